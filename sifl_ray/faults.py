"""Fault injection and the fault journal: how the platform is made to fail on purpose, and how it remembers.

Faults come from the configuration (``faults.inject``), so a drill is reproducible and a test is a config.
Each kind does something real:

=====================  ==============================================================================
``worker_exit``        the client worker calls ``os._exit(1)`` inside its ``train_round`` (after sleeping
                       ``seconds``), while the other workers train; with ``phase: unmask`` (secure
                       aggregation arms) it dies after its clients uploaded their masked inputs, when the
                       aggregator asks them for their shares
``worker_kill``        the driver kills the worker with ``ray.kill`` right after submitting its round (the
                       kill is asynchronous: the death may show only at the worker's next call)
``straggle``           the worker sleeps ``seconds`` before training (needs ``faults.deadline_s``)
``corrupt_upload``     client ``client`` sends garbage (``corruption``: nan, inf, shape, round, epoch)
``corrupt_partial``    the worker hands the aggregator a corrupted partial sum (the aggregator's check)
``server_kill``        the driver kills the server with ``ray.kill`` once step 3 of the round is submitted
``aggregator_kill``    the same for aggregator shard ``shard``
``evaluator_kill``     the same for the evaluator
``driver_kill``        the driver SIGKILLs itself in the middle of round ``round``, right after arm ``arm``
=====================  ==============================================================================

When they fire. Worker faults are part of the scenario: they fire on the first attempt of their round every
time that round runs (also when a round is replayed after a restore or a resume), so a replay reproduces
the run it replaces, drops included. Party and driver faults are accidents: they fire once per run
folder, recorded in the journal ``<run_dir>/faults.jsonl`` (appended and fsynced *before* the fault fires, so
a SIGKILLed driver still finds it there on resume).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sifl_ray.config import names
from sifl_ray.config.names import FAULT_CORRUPTIONS, FAULT_PHASES

if TYPE_CHECKING:  # no torch at run time: the configuration validator reads the kinds below without it
    import torch

FAULT_KINDS = names.FAULT_KINDS  # every kind of fault, in the order of the table above
PHASES = FAULT_PHASES  # when a worker_exit fires: in training, or in secure aggregation's step 3
CORRUPTIONS = FAULT_CORRUPTIONS  # what a corrupt_* fault sends (corrupt, upload_hook)
WORKER_KINDS = ("worker_exit", "straggle", "corrupt_upload", "corrupt_partial")  # fire inside the worker
ONCE_KINDS = names.FAULT_ONCE_KINDS  # once per run folder
JOURNAL = "faults.jsonl"


@dataclass(frozen=True)
class Fault:
    """One configured fault, with ``arm`` resolved (``None`` in the config means the run's first arm)."""

    index: int  # position in faults.inject: its identity in the journal
    kind: str
    round: int
    arm: str
    worker: int | None = None
    client: int | None = None
    shard: int = 0
    corruption: str = "nan"
    seconds: float = 0.0
    phase: str = "train"

    def describe(self) -> str:
        where = {
            "worker": None if self.worker is None else f"worker {self.worker}",
            "client": None if self.client is None else f"client {self.client}",
        }
        target = where["worker"] or where["client"]
        if self.kind == "aggregator_kill":
            target = f"aggregator shard {self.shard}"
        extra = f" ({self.corruption})" if self.kind.startswith("corrupt") else ""
        if self.phase != "train":
            extra += f" (at {self.phase})"
        return (
            f"{self.kind}{extra}"
            + (f" of {target}" if target else "")
            + f" at round {self.round}, {self.arm}"
        )


class FaultPlan:
    """The faults of one run, looked up by who fires them and when."""

    def __init__(self, events: list[Fault]):
        self.events = list(events)

    @classmethod
    def from_config(cls, cfg: Any, arms: list[str]) -> FaultPlan:
        events = []
        for i, ev in enumerate(cfg.faults.inject):
            events.append(
                Fault(
                    index=i,
                    kind=str(ev.kind),
                    round=int(ev.round),
                    arm=str(ev.arm) if ev.arm is not None else arms[0],
                    worker=None if ev.worker is None else int(ev.worker),
                    client=None if ev.client is None else int(ev.client),
                    shard=int(ev.shard),
                    corruption=str(ev.corruption),
                    seconds=float(ev.seconds),
                    phase=str(ev.phase),
                )
            )
        return cls(events)

    def __len__(self) -> int:
        return len(self.events)

    def for_worker(self, worker: int, clients: list[int]) -> list[dict]:
        """What worker ``worker`` (hosting ``clients``) fires itself, as plain dicts (sent to its actor)."""
        hosted = set(clients)
        out = []
        for ev in self.events:
            if (ev.kind == "corrupt_upload" and ev.client in hosted) or (
                ev.kind in ("worker_exit", "straggle", "corrupt_partial") and ev.worker == worker
            ):
                out.append(asdict(ev))
        return out

    def at(self, kind: str, arm: str, t: int) -> list[Fault]:
        return [ev for ev in self.events if ev.kind == kind and ev.arm == arm and ev.round == t]


class FaultJournal:
    """``<run_dir>/faults.jsonl``: one JSON line per fault fired or recovery made, fsynced as written."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / JOURNAL

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"time": time.time(), **record}, default=str) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash: the fault it announced did not fire completely
        return out

    def fired_once(self) -> set[int]:
        """Indices of the once-per-run faults that already fired in this run folder."""
        return {
            int(r["fault"])
            for r in self.records()
            if r.get("event") == "fired" and r.get("kind") in ONCE_KINDS
        }


# ---------------------------------------------------------------------------------- inside the worker
def corrupt(upload: torch.Tensor, how: str) -> torch.Tensor:
    """A corrupted copy of ``upload``: a NaN or an infinity in it, or one element short (``shape``)."""
    if how == "shape":
        return upload[:-1].clone()
    bad = upload.clone()
    bad.view(-1)[0] = float("nan") if how == "nan" else float("inf")
    return bad


class WorkerFaults:
    """The faults one client worker fires itself (its part of the :class:`FaultPlan`)."""

    def __init__(self, events: list[dict]):
        self.events = [Fault(**ev) for ev in events]

    def __bool__(self) -> bool:
        return bool(self.events)

    def before_training(self, arm: str, t: int, attempt: int) -> None:
        """Die or straggle, on the first attempt of the round only (a retry must be able to succeed)."""
        if attempt != 0:
            return
        for ev in self.events:
            if ev.arm != arm or ev.round != t or ev.phase != "train":
                continue
            if ev.kind == "straggle":
                time.sleep(ev.seconds)
            elif ev.kind == "worker_exit":
                if ev.seconds:
                    time.sleep(ev.seconds)  # die while the other workers are still training
                os._exit(1)

    def before_unmask(self, arm: str, t: int) -> None:
        """Die when the aggregator asks this worker's clients for their shares (a ``worker_exit`` with
        ``phase: unmask``): its clients' masked inputs are in the sum, and the others' shares must do."""
        for ev in self.events:
            if ev.kind == "worker_exit" and ev.phase == "unmask" and ev.arm == arm and ev.round == t:
                if ev.seconds:
                    time.sleep(ev.seconds)
                os._exit(1)

    def has_upload_faults(self) -> bool:
        return any(ev.kind == "corrupt_upload" for ev in self.events)

    def upload_hook(self, arm: str, t: int, client: int, upload: torch.Tensor, key_epoch: int):
        """What client ``client`` really sends, and its stamps (the fault tap before a worker checks an
        upload)."""
        stamped_round, stamped_epoch = t, key_epoch
        for ev in self.events:
            if ev.kind != "corrupt_upload" or ev.client != client or ev.arm != arm or ev.round != t:
                continue
            if ev.corruption == "round":
                stamped_round = t - 1 if t > 0 else t + 1  # a replayed (or premature) upload
            elif ev.corruption == "epoch":
                stamped_epoch = key_epoch + 1  # encoded under a key the aggregator does not use
            else:
                upload = corrupt(upload, ev.corruption)
        return upload, stamped_round, stamped_epoch

    def corrupt_partials(self, arm: str, t: int, partials: list) -> list:
        """A worker gone bad: its partial sums carry garbage or wrong stamps (the aggregator must refuse)."""
        from dataclasses import replace

        for ev in self.events:
            if ev.kind != "corrupt_partial" or ev.arm != arm or ev.round != t:
                continue
            if ev.corruption == "round":
                partials = [replace(p, round=p.round + 1) for p in partials]
            elif ev.corruption == "epoch":
                partials = [replace(p, key_epoch=p.key_epoch + 1) for p in partials]
            elif hasattr(partials[-1], "masked_sum"):
                # a masked sum holds ring elements, no floats: any garbage goes unseen (secure aggregation
                # hides content, it does not check it), so every corruption of content cuts it short
                last = partials[-1]
                partials = [*partials[:-1], replace(last, masked_sum=last.masked_sum[:-1].copy())]
            else:
                # corrupt the last shard only: shards must agree on which workers they average
                last = partials[-1]
                partials = [
                    *partials[:-1],
                    replace(last, weighted_sum=corrupt(last.weighted_sum, ev.corruption)),
                ]
        return partials
