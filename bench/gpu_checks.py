"""The pure half of ``python -m bench gpu``: its verdicts and its output, functions of data alone.

Kept apart from the measuring half (:mod:`bench.gpu`) so that every judgement the bench makes on a GPU
machine (was each worker pinned, do the CUDA trajectories agree within the precision bound, did a figure
meet its target, is the vectorised-clients feature there) is tested here, on the CPU, before any GPU is
seen.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A figure's status: measured and met, measured and missed (performance), a correctness check that
#: failed, a feature this platform does not have, not measured (out of time, or the section broke), a
#: figure with no target, or a rehearsal on the CPU (plumbing only: nothing measured on a GPU).
STATUSES = ("pass", "miss", "fail", "not_available", "not_measured", "info", "rehearsal")

#: CUDA vs CPU, the same run: ‖w_cuda − w_cpu‖₂ / ‖w_cpu‖₂ beyond this is not float32 round-off.
#: float32 training on two kinds of hardware sums in different orders (~1e-7 relative per operation, and
#: training can amplify it a little over a few rounds); a wrong device path (wrong samples, a float32
#: coding step, noise that no longer cancels) moves the model by 1e-2 or more.
TRAJECTORY_TOLERANCE = 1e-3


@dataclass
class Check:
    """One figure of the bench held against its target, with the verdict (``status``): its RESULT line and
    its JSON entry. A check, not an attack's figure (:class:`sifl_ray.attacks.registry.Figure`, a measured
    value with its threat model and no target): the two shared a name and nothing else."""

    name: str
    value: float | None
    status: str
    target: str = ""  # "<=1.2", ">=10", "<=1ms"; "" when the figure has none
    unit: str = ""
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")

    def line(self) -> str:
        """``RESULT gpu_<name> value=<v><unit> [target=<t>] status=<s> [(<note>)]``."""
        measured = self.value is not None and math.isfinite(self.value)
        shown = f"{self.value:.4g}{self.unit}" if measured else "nan"
        parts = [f"RESULT gpu_{self.name}", f"value={shown}"]
        if self.target:
            parts.append(f"target={self.target}{self.unit}")
        parts.append(f"status={self.status}")
        if self.note:
            parts.append(f"({self.note})")
        return " ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "line": self.line()}


def judge(value: float | None, target: str, *, rehearsal: bool = False) -> str:
    """The status of a performance figure against ``target`` (``"<=x"`` or ``">=x"``)."""
    if rehearsal:
        return "rehearsal"
    if value is None or not math.isfinite(value):
        return "not_measured"
    if not target:
        return "info"
    match = re.fullmatch(r"(<=|>=)([0-9.eE+-]+)", target)
    if match is None:
        raise ValueError(f"a target is '<=x' or '>=x'; got {target!r}")
    bound = float(match.group(2))
    return "pass" if (value <= bound if match.group(1) == "<=" else value >= bound) else "miss"


# ------------------------------------------------------------------------------------------ pinning
def check_pinning(
    placements: Mapping[str, Mapping[str, Any]],
    *,
    workers: int,
    gpus_per_worker: float,
    evaluator_gpus: float,
    cuda: bool,
) -> list[str]:
    """What is wrong with where the parties run (``[]``: nothing).

    ``placements``: each party's :func:`sifl_ray.parties.process.placement` (``"worker 0"``, …, ``"server"``,
    ``"aggregator 0"``, …, ``"evaluator"``). With ``cuda``, every worker must compute on ``cuda:0`` (the
    one GPU Ray made visible to it: ``CUDA_VISIBLE_DEVICES`` is its GPU id, ``current_device()`` is 0)
    with every tensor it holds there; without (a rehearsal on declared GPUs), it must say that it fell
    back to the CPU, and hold everything there. Fractions share GPUs: ``workers × gpus_per_worker``
    rounded up is how many distinct GPUs the workers may use. The server and the aggregator get no GPU
    and compute on the CPU; the evaluator gets one only if ``evaluator_gpus``.
    """
    problems: list[str] = []
    names = [k for k in placements if k.startswith("worker ")]
    if len(names) != workers:
        problems.append(f"{len(names)} workers placed, expected {workers}")
    gpu_sets = set()
    for name in names:
        p = placements[name]
        problems += _gpu_party(name, p, cuda=cuda)
        gpu_sets.add(tuple(p.get("gpu_ids") or ()))
    allowed = math.ceil(workers * gpus_per_worker - 1e-9)
    if names and len(gpu_sets) > max(1, allowed):
        problems.append(
            f"the workers use {len(gpu_sets)} GPUs, expected at most {allowed}: {sorted(gpu_sets)}"
        )
    for name, p in placements.items():
        if name.startswith(("server", "aggregator")):
            problems += _cpu_party(name, p)
        elif name == "evaluator":
            if evaluator_gpus:
                problems += _gpu_party(name, p, cuda=cuda)
            else:
                problems += _cpu_party(name, p)
    return problems


def _gpu_party(name: str, p: Mapping[str, Any], *, cuda: bool) -> list[str]:
    out = []
    ids = list(p.get("gpu_ids") or ())
    if len(ids) != 1:
        out.append(f"{name}: Ray assigned GPU ids {ids}, expected exactly one")
    elif p.get("cuda_visible_devices") != ids[0]:
        out.append(f"{name}: CUDA_VISIBLE_DEVICES={p.get('cuda_visible_devices')!r}, expected {ids[0]!r}")
    device = "cuda:0" if cuda else "cpu"
    if p.get("device") != device:
        out.append(f"{name}: computes on {p.get('device')}, expected {device} ({p.get('fallback')})")
    if cuda and p.get("current_device") != 0:
        out.append(f"{name}: torch.cuda.current_device() is {p.get('current_device')}, expected 0")
    if cuda and p.get("fallback"):
        out.append(f"{name}: fell back to the CPU: {p['fallback']}")
    if not cuda and not p.get("fallback"):
        out.append(f"{name}: no CUDA here, yet it did not say that it computes on the CPU")
    held = set(p.get("tensor_devices") or ())
    if held != {device}:
        out.append(f"{name}: holds tensors on {sorted(held)}, expected all on {device}")
    return out


def _cpu_party(name: str, p: Mapping[str, Any]) -> list[str]:
    out = []
    if p.get("gpu_ids"):
        out.append(f"{name}: Ray assigned GPU ids {p['gpu_ids']}, expected none")
    if p.get("device") != "cpu":
        out.append(f"{name}: computes on {p.get('device')}, expected cpu")
    if set(p.get("tensor_devices") or ()) - {"cpu"}:
        out.append(f"{name}: holds tensors on {p['tensor_devices']}, expected the CPU only")
    return out


# ---------------------------------------------------------------------------------------- agreement
def agreement_verdict(
    *,
    paired: Mapping[str, Sequence[float]],
    bounds: Mapping[str, float | None],
    relative_differences: Mapping[str, Sequence[float]],
    tolerance: float = TRAJECTORY_TOLERANCE,
) -> dict[str, Any]:
    """Whether the CUDA run agrees with the CPU run, and the figures that say so.

    Two checks:

    * the precision bound, on the GPU: each SIFL round, played beside FedAvg from the same start, moves
      the model by ``‖w_sifl − w_fl‖₂ ≤ round_bound`` (``paired``: those errors; ``bounds``: each arm's
      rigorous float64 bound, which holds for any IEEE float64 arithmetic, a GPU's included);
    * the trajectories: every arm's CUDA model stays within ``tolerance`` (relative 2-norm) of the same
      run's CPU model (``relative_differences``: per arm, per round).

    Returns:
        ``status`` (pass, fail or not_measured: no paired round or no trajectory), the worst paired error
        over its bound, the worst relative difference, and the problems found.
    """
    problems = []
    ratios = []
    for arm, errors in paired.items():
        bound = bounds.get(arm)
        if bound is None or not errors:
            continue
        worst = max(errors)
        ratios.append(worst / bound)
        if not worst <= bound:  # NaN fails too
            problems.append(
                f"{arm}: a round moved the model by {worst:.3e} from FedAvg's, beyond the bound {bound:.3e}"
            )
    diffs = []
    for arm, values in relative_differences.items():
        if not values:
            continue
        worst = max(values)
        diffs.append(worst)
        if not worst <= tolerance:
            problems.append(
                f"{arm}: the CUDA model is {worst:.3e} (relative) from the CPU model, beyond {tolerance:g}"
            )
    measured = bool(ratios) and bool(diffs)
    return {
        "status": "fail" if problems else ("pass" if measured else "not_measured"),
        "worst_paired_over_bound": max(ratios) if ratios else None,
        "worst_relative_difference": max(diffs) if diffs else None,
        "tolerance": tolerance,
        "problems": problems,
    }


# --------------------------------------------------------------------------------------- nvidia-smi
def parse_smi_csv(text: str, columns: Sequence[str]) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-…=<columns> --format=csv,noheader,nounits`` as dictionaries."""
    rows = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(columns):
            rows.append(dict(zip(columns, cells, strict=True)))
    return rows
