"""The built-in arms, one registration line each."""

from __future__ import annotations

from sifl_ray.arms.dp_fedavg import DpFedAvg
from sifl_ray.arms.fedavg import FedAvg
from sifl_ray.arms.nbafl import NbAFL
from sifl_ray.arms.registry import register_arm
from sifl_ray.arms.secagg import DpFedAvgSecAgg, SecAgg
from sifl_ray.arms.sifl import SiflM1, SiflM2

register_arm(FedAvg())
register_arm(SiflM1())
register_arm(SiflM2())
register_arm(NbAFL())
register_arm(DpFedAvg())
register_arm(SecAgg())
register_arm(DpFedAvgSecAgg())
