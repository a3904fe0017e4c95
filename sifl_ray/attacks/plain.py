"""Plain and secure-aggregation arms under the aggregator's direct view, and the server's view of the
aggregate: each upload read as what its client trained (its model, or its update).

No key stands between the aggregator and a plain upload, so no attack is needed: the figures say how close
an upload is to the trained model (0 for FedAvg, the client's own noise for NbAFL, a uniform ring element
under secure aggregation) and how close the server's input is to the clients' FedAvg.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from sifl_ray.arms import arm_instances, get_arm
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.record import SmallTask, platform_config, record_arm
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.device import single_threaded


@dataclass
class PlainResult:
    """A plain arm under the aggregator's direct view: each upload read as its client's model (or update);
    and the server's view of the aggregate it receives.

    ``error`` is ``max ‖upload_i − w_i‖ / ‖w_i‖`` over clients and rounds, ``w_i`` the model client i
    trained (before the arm's client step): 0 for FedAvg, the client's own noise for NbAFL, the masks under
    secure aggregation (far above 1: a masked upload read as numbers is uniform noise). ``correlation`` is the
    median over uploads of ``|corr(upload_i, w_i)|``, the coordinates as samples: 1 for FedAvg; for an upload
    independent of the model it is at chance, ``correlation_chance`` = 0.6745/√n (the median of |N(0, 1/n)|).
    ``server_error`` is the median over rounds of ``‖a − ā‖ / ‖ā‖``, ``a`` what the server received and ``ā``
    the FedAvg of what the clients uploaded before any masking: ~0 where the server learns the aggregate.
    """

    arm: str
    n: int
    rounds: int
    upload: str  # what the arm says an upload is (sifl_ray.arms.Arm.releases)
    error: float
    median_error: float
    per_round: dict[int, float]
    transcript: str
    seconds: float
    correlation: float = math.nan
    correlation_chance: float = math.nan
    server_error: float = math.nan
    masked: bool = False  # the uploads travel under secure aggregation


def evaluate_plain(task: SmallTask, cfg: DictConfig, arm: str) -> tuple[PlainResult, TranscriptRecorder]:
    """The aggregator's direct view of the plain arm ``arm``, played through the shipped parties."""
    with single_threaded():
        return _evaluate_plain(task, cfg, arm)


def _evaluate_plain(task: SmallTask, cfg: DictConfig, arm: str) -> tuple[PlainResult, TranscriptRecorder]:

    tic = time.perf_counter()
    recorder = TranscriptRecorder(max_coordinates=cfg.transcript.max_coordinates)
    truth = record_arm(
        task,
        cfg,
        arm=arm,
        design=Design(name=arm, backend="identity", left_inverse="none"),
        coding={},
        rounds=cfg.train.rounds,
        recorder=recorder,
    )
    platform = platform_config(cfg, clients=task.clients, rounds=cfg.train.rounds)
    protocol = get_arm(arm_instances(platform)[arm])
    per_round, every, corr, server = {}, [], [], []
    for t in recorder.rounds():
        uploads, clients = recorder.upload_matrix(t)
        trained = truth.local_models[t][:, clients]
        if protocol.uploads == "update":  # the upload is w_i − w^t: read it as the client's update
            trained = trained - truth.broadcast_models[t][:, None]
        num = np.linalg.norm(uploads - trained, axis=0)
        den = np.linalg.norm(trained, axis=0)
        rel = np.where(den > 0, num / np.where(den > 0, den, 1.0), num)  # zero-safe: a zero model, abs.
        per_round[t] = float(rel.max())
        every.extend(rel.tolist())
        corr.extend(abs(_correlation(uploads[:, i], trained[:, i])) for i in range(len(clients)))
        if t in recorder.server_inputs:  # the server's view: what it received against the clients' FedAvg
            received, expected = recorder.server_inputs[t].reshape(-1), truth.aggregate_models[t]
            scale = float(np.linalg.norm(expected))
            server.append(float(np.linalg.norm(received - expected)) / (scale if scale > 0 else 1.0))
    releases = protocol.releases()
    upload = next((r.content for r in releases if r.name == "upload"), "")
    result = PlainResult(
        arm=arm,
        n=task.n,
        rounds=len(per_round),
        upload=upload,
        error=max(every),
        median_error=float(np.median(every)),
        per_round=per_round,
        transcript=recorder.describe(),
        seconds=time.perf_counter() - tic,
        correlation=float(np.median(corr)),
        correlation_chance=0.6745 / math.sqrt(task.n),
        server_error=float(np.median(server)) if server else math.nan,
        masked=protocol.secure_aggregation,
    )
    return result, recorder


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two vectors' coordinates (0 when either is constant: zero-safe)."""
    a, b = a - a.mean(), b - b.mean()
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / den if den > 0 else 0.0
