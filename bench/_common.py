"""What the platform benchmarks share: the reference workload, the bare loop, statistics, output.

The reference workload (the issue's): FedAvg on the paper's MLP (199,210 parameters), 60,000 synthetic
MNIST-shaped samples split IID over N clients, one local epoch, batch 64, SGD lr 0.01, every client every
round, and a global evaluation on 10,000 test samples each round.

Every target is a ratio of two arms measured side by side in one run: the arms take turns round by round
(the order rotates, so neither always runs first), several rounds after a warm-up, and a ratio is the
ratio of the medians; its spread is the 25th–75th percentile of the per-round ratios. The machine is shared
and noisy: the turn-taking makes both arms see the same background load on average, and the load average
of the machine is written into every JSON file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sifl_ray.config import load_config
from sifl_ray.data import Dataset, client_batches
from sifl_ray.device import SampleStore
from sifl_ray.models import build_model, flatten_params, load_flat_params_
from sifl_ray.optim.trainer import loss_values, make_optimizer_factory
from sifl_ray.seeding import torch_generator

REFERENCE: tuple[str, ...] = (
    "scenario=scale_1000",
    "arms=[fl]",
    "data.name=synthetic",
    "data.partition=iid",
    "train.model=mlp",
    "train.optimizer=sgd",
    "train.lr=0.01",
    "train.batch_size=64",
    "train.local_epochs=1",
    "train.local_steps=0",
    "clients.fraction=1.0",
    "output.tensorboard=false",
    "output.plot=false",
    "output.progress=false",
)
"""Overrides that turn any scenario into the reference workload (data sizes and N come separately)."""


def reference_config(
    clients: int,
    *,
    rounds: int,
    workers: int = 2,
    n_train: int = 60000,
    n_test: int = 10000,
    extra: Sequence[str] = (),
):
    """The validated configuration of the reference workload at ``clients`` clients."""
    return load_config(
        [
            *REFERENCE,
            f"synthetic.n_train={n_train}",
            f"synthetic.n_test={n_test}",
            f"clients.num_clients={clients}",
            f"train.rounds={rounds}",
            f"ray.num_workers={workers}",
            "output.dir=bench_results/runs",  # nothing is written there: benches drive rounds themselves
            *extra,
        ]
    )


# ------------------------------------------------------------------------------------------- statistics
def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (``q`` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, extremes and count of ``values``."""
    return {
        "median": statistics.median(values),
        "p25": quantile(values, 0.25),
        "p75": quantile(values, 0.75),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def ratio_of_medians(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """``median(a) / median(b)`` and the quartiles of the paired per-round ratios ``a_i / b_i``."""
    paired = [x / y for x, y in zip(a, b, strict=True)]
    return {
        "ratio": statistics.median(a) / statistics.median(b),
        "ratio_p25": quantile(paired, 0.25),
        "ratio_p75": quantile(paired, 0.75),
    }


def rotation(arms: Sequence[str], t: int) -> list[str]:
    """The order in which ``arms`` take their turn in round ``t`` (rotates every round)."""
    k = t % len(arms)
    return [*arms[k:], *arms[:k]]


def timed(fn: Callable[[], Any], device: torch.device | None = None) -> tuple[float, Any]:
    """Wall seconds of ``fn()`` (CUDA synchronised when ``device`` is a GPU) and its result."""
    sync = device is not None and device.type == "cuda"
    if sync:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if sync:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


# ------------------------------------------------------------------------------------------- the floor
class BareLoop:
    """FedAvg in one process with no framework: the floor the platform is measured against.

    The same arithmetic as the platform's ``fl`` arm, operation for operation: the same initial model
    (stream ``(seed, "init")``), the same minibatches (:func:`sifl_ray.data.client_batches`), a fresh
    optimizer per client, the local model read back as float64, the weighted sum formed per worker group
    and then over the groups (the platform's summation tree, so the float64 sums agree to the bit), and
    the same evaluation on the test set. Nothing else: no processes, no messages, no validation.

    Args:
        dataset: the data set (the same one the platform loads).
        parts: sample indices of every client (the platform's partition).
        cfg: the scenario configuration (``train`` and ``seed``).
        threads: torch threads while this loop runs (restored afterwards).
        device: where to train and evaluate.
    """

    def __init__(
        self,
        dataset: Dataset,
        parts: Sequence[np.ndarray],
        cfg,
        *,
        threads: int,
        device: torch.device | None = None,
    ):
        self.parts = parts
        self.cfg = cfg
        self.threads = threads
        self.device = device or torch.device("cpu")
        self.dtype = getattr(torch, cfg.train.dtype)
        # As a careful GPU loop would: the samples on the device once (none cross per step on a GPU).
        self.samples = SampleStore(
            dataset.x_train, dataset.y_train, parts, device=self.device, dtype=self.dtype
        )
        self.x_test = torch.tensor(np.asarray(dataset.x_test)).to(self.device)
        self.y_test = torch.tensor(np.asarray(dataset.y_test)).to(self.device)
        self.model = build_model(
            cfg.train.model,
            input_shape=tuple(dataset.x_train.shape[1:]),
            num_classes=int(dataset.num_classes),
            generator=torch_generator(cfg.seed, "init"),
        ).to(self.device, self.dtype)
        self.make_optimizer = make_optimizer_factory(cfg.train.optimizer, lr=cfg.train.lr)
        self.w = flatten_params(self.model)  # w^t, float64
        self.local = torch.empty_like(self.w)

    def round(self, t: int, groups: Sequence[Sequence[int]]) -> dict[str, float]:
        """Train every client of ``groups`` (one list per platform worker) and average; evaluate."""
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return self._round(t, groups)
        finally:
            torch.set_num_threads(previous)

    def _round(self, t: int, groups: Sequence[Sequence[int]]) -> dict[str, float]:
        train = self.cfg.train
        start = self.w.to(self.dtype)
        params = list(self.model.parameters())
        total = torch.zeros_like(self.w)
        weights, loss_sums = [], []
        for clients in groups:
            if not clients:
                continue
            acc, group_weight, group_loss = torch.zeros_like(self.w), 0.0, 0.0
            for client in sorted(clients):
                size = float(len(self.parts[client]))
                load_flat_params_(self.model, start)
                optimizer = self.make_optimizer(params)
                losses = []
                batches = client_batches(
                    self.parts[client],
                    batch_size=train.batch_size,
                    epochs=train.local_epochs,
                    steps=train.local_steps,
                    seed=self.cfg.seed,
                    client_id=client,
                    round=t,
                )
                for x, y in self.samples.batches(batches):
                    optimizer.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(self.model(x), y)
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.detach())
                acc.add_(flatten_params(self.model, out=self.local), alpha=size)
                group_weight += size
                group_loss += size * float(np.mean(loss_values(losses)))  # one read per client
            total.add_(acc)
            weights.append(group_weight)
            loss_sums.append(group_loss)
        self.w = total.div_(sum(weights))
        return {"train_loss": sum(loss_sums) / sum(weights), **self.evaluate()}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Test accuracy and loss of ``w`` (as the platform's evaluator computes them)."""
        load_flat_params_(self.model, self.w)
        size = self.cfg.train.eval_batch_size
        losses, hits = [], []
        for s in range(0, len(self.y_test), size):
            xb = self.x_test[s : s + size].to(self.device, self.dtype)
            yb = self.y_test[s : s + size]
            logits = self.model(xb)
            losses.append(F.cross_entropy(logits, yb, reduction="sum"))
            hits.append((logits.argmax(1) == yb).sum())
        loss_sum = 0.0
        for value in loss_values(losses):
            loss_sum += value
        correct = int(torch.stack(hits).sum())
        return {"test_accuracy": correct / len(self.y_test), "test_loss": loss_sum / len(self.y_test)}


# ------------------------------------------------------------------------------------------- output
def cpu_model() -> str:
    """This machine's CPU model as the kernel names it (``AMD EPYC``, ``Intel(R) Xeon(R) ...``): the kind of
    CPU a ratio is compared within (the same code gives other ratios on another kind)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the numbers were measured on, including how busy the machine was."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    flags: list[str] = []
    with contextlib.suppress(OSError):
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next((ln for ln in cpuinfo if ln.startswith("flags")), "").split()
    return {
        "cpu": cpu_model(),
        "avx512": "avx512f" in flags,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch_threads_default": torch.get_num_threads(),
        "machine": platform.machine(),
        "cuda": torch.cuda.is_available(),
        "loadavg_1_5_15": [round(x, 2) for x in load],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (with the machine description under ``"machine"``) to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=_jsonable))
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path | torch.device):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def result_line(name: str, ratio: float, target: float) -> str:
    """The last line of every bench command."""
    return f"RESULT {name} ratio={ratio:.3f} target={target:g}"


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain fixed-width table (left-aligned first column, right-aligned others)."""
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)

    return "\n".join([fmt(cells[0]), "  ".join("-" * w for w in widths), *(fmt(r) for r in cells[1:])])


def gpu_overrides(device: str, gpus_per_worker: float, workers: int) -> list[str]:
    """Config overrides that put the client workers on GPUs for ``--device cuda`` (none for the CPU)."""
    if not device.startswith("cuda"):
        return []
    return [f"ray.gpus_per_worker={gpus_per_worker or 1.0 / workers:g}"]


def cuda_missing(device: str) -> bool:
    """Whether a CUDA run was asked for on a machine without a usable GPU."""
    return device.startswith("cuda") and not torch.cuda.is_available()


def publish(out: str | Path, res: dict[str, Any], text: str) -> int:
    """Write ``res`` as JSON to ``out`` and print the report ``text``, keeping its last line (the
    ``RESULT`` line) last, after the path written; the exit code of a benchmark that ran."""
    *body, last = text.split("\n")
    if last.startswith("RESULT "):  # what bench check compares, with the machine that measured it
        fields = dict(part.split("=", 1) for part in last.split()[2:])
        res["result"] = {
            "name": last.split()[1],
            "ratio": float(fields["ratio"]),
            "target": float(fields["target"]),
        }
    res["machine"] = machine()
    path = write_json(out, res)
    print("\n".join(body))
    print(f"wrote {path}")
    print(last)
    return 0


def not_measured(name: str, target: float, out: str | Path, why: str, args: dict[str, Any]) -> int:
    """Report a benchmark that cannot run here (e.g. ``--device cuda`` without a GPU)."""
    print(f"not measured: {why}")
    path = write_json(out, {"name": name, "status": "not measured", "why": why, "args": args})
    print(f"wrote {path}")
    print(result_line(name, math.nan, target))
    return 0
