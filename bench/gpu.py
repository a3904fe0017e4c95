"""``python -m bench gpu [--quick]``: every GPU measurement of the platform in one command.

Made for one call on a GPU machine (one H100, 16 CPU cores: inside 8 minutes by default, ~4 with
``--quick``). One Ray session, then five sections, each time-boxed (a share of what is left of
``--budget-s``); each figure prints one ``RESULT gpu_<figure>`` line as it is measured, and the JSON
(``bench_results/gpu-<date>.json``) is rewritten after every section, so a run cut short keeps what it
measured. The last line summarises.

1. **pinning** — 4 client workers with ``ray.gpus_per_worker=0.25`` on one GPU: each sees its own GPU id as
   ``CUDA_VISIBLE_DEVICES``, ``torch.cuda.current_device()`` is 0, it computes on ``cuda:0`` and every
   tensor it holds (model, staged samples, key views) lives there; the server, the aggregator shards and
   the evaluator run where the configuration puts them (the CPU). ``gpu_fallback`` counts the workers
   that fell back to the CPU and lists what runs on the CPU by design.
2. **agreement** — ``fl``, ``sifl_m1``, ``sifl_m2`` on the paper's MLP (n = 199,210, its coding),
   played on CUDA and again on the CPU (in this process: the local backend, the same parties) with
   the same keys and noise (``coding.key_seed``). Each SIFL round
   beside FedAvg from the same start must stay within the rigorous float64 bound (``round_bound``; float64
   coding on the GPU), and each arm's CUDA trajectory within 1e-3 (relative) of its CPU one.
3. **kernels** — encode + decode of the fast key on the GPU at n = 199,210 / 582,026 / 1,199,882, in
   milliseconds (target ≤ 1 ms at n = 1.2M) and as a ratio to one float64 copy on the same GPU.
4. **rounds** — per model (MLP, CNN2, CNN; the reference workload, 10 clients, 60,000 samples): ``fl``,
   ``sifl_m2`` and a bare single-process GPU loop (:class:`bench._common.BareLoop`) take turns;
   ``fl`` ÷ bare (target ≤ 1.2) and ``sifl_m2`` ÷ ``fl`` (target ≤ 1.02). The workers get 0.2 GPU each
   and the evaluator 0.2 (``ray.evaluator_gpus``), so that the whole round is on the GPU as the bare loop's.
5. **vectorised** — vectorised ÷ per-client clients at N = 1000 (target ≥ 10×): ``train.vectorise`` on
   and off (or the switch named with ``--vectorised KEY=VALUE``).
6. **memory** — peak GPU memory of every worker (torch's allocator) and what ``nvidia-smi`` reports.

Without CUDA it prints one line saying that nothing was measured, and exits 0. ``--rehearse`` runs every
section on the CPU at tiny sizes with one *declared* GPU (Ray accepts it): the plumbing and the
correctness checks (with the CPU fallback expected), no figure measured on a GPU; the tests use it.

Exit code: 0, or 1 if a correctness check failed or a section broke (its traceback is in the JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import sifl_ray.runner as runner
from bench import kernels as kb
from bench._common import (
    BareLoop,
    ratio_of_medians,
    reference_config,
    rotation,
    spread,
    table,
    timed,
    write_json,
)
from bench.gpu_checks import (
    TRAJECTORY_TOLERANCE,
    Check,
    agreement_verdict,
    check_pinning,
    judge,
    parse_smi_csv,
)
from sifl_ray.parties.process import Host
from sifl_ray.parties.workers import WorkerHost
from sifl_ray.progress import progress
from sifl_ray.runner.hosts import WarmHosts

MODELS = ("mlp", "cnn2", "cnn")
PAPER_CODING = {"mlp": "paper_mnist_mlp_sgd", "cnn2": "paper_fmnist_cnn2_sgd", "cnn": "paper_mnist_cnn_sgd"}
PINNED_WORKERS, PINNED_FRACTION = 4, 0.25  # the placement: four quarters of one GPU
ROUND_FRACTION = 0.2  # the rounds: 4 workers and the evaluator, a fifth of the GPU each
#: the vectorised clients' switch (sifl_ray.optim.vectorised), measured on and off in section 5
VECTORISE_KEY = "train.vectorise"

TARGETS = {"fl_over_bare": "<=1.2", "m2_over_fl": "<=1.02", "kernel_ms": "<=1", "vectorised": ">=10"}
MIB = 2**20


@dataclass(frozen=True)
class Sizes:
    """How much each section does (full, ``--quick`` or ``--rehearse``)."""

    budget_s: float
    agree_clients: int
    agree_train: int
    agree_test: int
    agree_rounds: int
    paired_rounds: int
    kernel_sizes: tuple[tuple[int, int], ...]
    kernel_reps: int
    kernel_warmup: int
    kernel_inverses: tuple[str, ...]
    round_clients: int
    round_train: int
    round_test: int
    round_warmup: int
    rounds: int
    vec_clients: int
    vec_train: int
    vec_rounds: int


FULL = Sizes(
    budget_s=450,
    agree_clients=8, agree_train=4000, agree_test=1000, agree_rounds=3, paired_rounds=2,
    kernel_sizes=kb.PAPER_SIZES, kernel_reps=11, kernel_warmup=2, kernel_inverses=("oblique", "pinv"),
    round_clients=10, round_train=60000, round_test=10000, round_warmup=1, rounds=5,
    vec_clients=1000, vec_train=60000, vec_rounds=3,
)  # fmt: skip
QUICK = Sizes(
    budget_s=240,
    agree_clients=8, agree_train=1600, agree_test=500, agree_rounds=2, paired_rounds=1,
    kernel_sizes=kb.PAPER_SIZES, kernel_reps=5, kernel_warmup=1, kernel_inverses=("oblique",),
    round_clients=10, round_train=12000, round_test=2000, round_warmup=1, rounds=3,
    vec_clients=1000, vec_train=12000, vec_rounds=2,
)  # fmt: skip
REHEARSE = Sizes(
    budget_s=900,
    agree_clients=4, agree_train=320, agree_test=100, agree_rounds=2, paired_rounds=1,
    kernel_sizes=kb.SMALL_SIZES, kernel_reps=2, kernel_warmup=1, kernel_inverses=("oblique",),
    round_clients=4, round_train=320, round_test=100, round_warmup=1, rounds=2,
    vec_clients=8, vec_train=320, vec_rounds=1,
)  # fmt: skip
SHARES = {"agreement": 3.0, "kernels": 1.0, "rounds": 6.0, "vectorised": 2.0}


class Budget:
    """The run's time: each section gets its share of what is left (what one does not use, the later
    ones get)."""

    def __init__(self, total_s: float):
        self.start, self.total_s = time.monotonic(), float(total_s)

    def left(self) -> float:
        return self.total_s - (time.monotonic() - self.start)

    def deadline(self, share: float, shares_left: float) -> float:
        return time.monotonic() + max(0.0, self.left()) * share / shares_left


class GpuBench:
    """One run of the bench: its Ray session, its figures, its JSON."""

    def __init__(self, args: argparse.Namespace, sizes: Sizes):
        self.args, self.sizes = args, sizes
        self.rehearsal = bool(args.rehearse)
        self.cuda = torch.cuda.is_available() and not self.rehearsal
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.out = Path(args.out or f"bench_results/gpu-{time.strftime('%Y%m%d-%H%M%S')}.json")
        self.figures: list[Check] = []
        self.sections: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.backend = None
        # the last model's round hosts, which the vectorised section (the same shape) starts again
        self.round_hosts: WarmHosts | None = None

    # -------------------------------------------------------------------- plumbing
    def add(self, figure: Check) -> None:
        self.figures.append(figure)
        print(figure.line(), flush=True)

    def save(self) -> Path:
        return write_json(
            self.out,
            {
                "name": "gpu",
                "rehearsal": self.rehearsal,
                "args": vars(self.args),
                "sizes": dataclasses.asdict(self.sizes),
                "figures": [f.as_json() for f in self.figures],
                "sections": self.sections,
                "errors": self.errors,
            },
        )

    def config(self, model: str, *, clients: int, n_train: int, n_test: int, rounds: int, arms, extra=()):
        """The reference workload (:mod:`bench._common`) with ``model``, its paper coding and the arms."""
        cpus = 0 if self.rehearsal else 1  # a rehearsal runs on 2 shared cores
        return reference_config(
            clients,
            rounds=rounds,
            workers=PINNED_WORKERS,
            n_train=n_train,
            n_test=n_test,
            extra=[
                f"scenario={PAPER_CODING[model]}",  # its coding section; the reference overrides the rest
                f"train.model={model}",
                f"arms=[{','.join(arms)}]",
                f"ray.cpus_per_worker={cpus}",
                "coding.precision.policy=warn",  # report, never refuse: the bench measures
                "coding.key_seed=1",  # the CUDA and CPU runs draw the same keys and noise
                *(["ray.num_shards=1"] if self.rehearsal else []),  # fewer processes on 2 shared cores
                f"output.dir={self.out.parent / 'runs'}",
                *extra,
            ],
        )

    def start_backend(self, cfg):
        """The bench's backend, started by its first run."""
        if self.backend is None:
            self.backend = runner.make_backend(cfg, **({"num_gpus": 1} if self.rehearsal else {}))
            if self.backend.description:
                print(self.backend.description, flush=True)
        return self.backend

    def simulation(self, cfg) -> runner.Simulation:
        return runner.Simulation(cfg, backend=self.start_backend(cfg))

    def run_section(self, name: str, fn: Callable[[float], None], deadline: float) -> None:
        tic = time.monotonic()
        try:
            fn(deadline)
        except Exception as err:  # a broken section must not take the others with it
            self.errors[name] = traceback.format_exc()
            self.add(Check(name, None, "not_measured", note=f"section failed: {type(err).__name__}: {err}"))
        self.sections.setdefault(name, {})["wall_s"] = round(time.monotonic() - tic, 2)
        self.save()

    # -------------------------------------------------------------------- 1 + 2: pinning, agreement
    def agreement(self, deadline: float) -> None:
        s, arms = self.sizes, ("fl", "sifl_m1", "sifl_m2")
        total = s.agree_rounds + s.paired_rounds
        shape = dict(
            clients=s.agree_clients, n_train=s.agree_train, n_test=s.agree_test, rounds=total, arms=arms
        )
        sim = self.simulation(self.config("mlp", **shape, extra=[f"ray.gpus_per_worker={PINNED_FRACTION}"]))
        try:
            placements = party_placements(sim)
            problems = check_pinning(
                placements,
                workers=PINNED_WORKERS,
                gpus_per_worker=PINNED_FRACTION,
                evaluator_gpus=0.0,
                cuda=self.cuda,
            )
            gpu_traj = trajectory(sim, arms, s.agree_rounds, deadline)
            paired = paired_errors(
                sim, ("sifl_m1", "sifl_m2"), len(gpu_traj["fl"]), s.paired_rounds, deadline
            )
            bounds = {arm: sim.precision[arm].get("round_bound") for arm in paired}
            memory, smi = worker_memory(sim), nvidia_smi()
        finally:
            sim.stop_actors()
        self.sections.setdefault("memory", {})["agreement"] = memory
        self.sections.setdefault("nvidia_smi", {})["agreement"] = smi
        self.pinning_figures(placements, problems)
        played = len(gpu_traj["fl"])
        # The same run on the CPU, in this process: the local backend plays the same parties with the
        # same workers, partition and summation tree, number for number what Ray CPU workers play
        # (tests/test_platform.py), without starting eight more processes.
        cfg = self.config("mlp", **shape, extra=["backend=local"])
        threads = torch.get_num_threads()  # in-process parties set this process's threads: put them back
        sim = runner.Simulation(cfg, backend=runner.make_backend(cfg))
        try:
            cpu_traj = trajectory(sim, arms, played, None)
        finally:
            sim.close()
            torch.set_num_threads(threads)
        relative = {
            arm: [
                float(torch.linalg.vector_norm(g - c) / torch.linalg.vector_norm(c))
                for g, c in zip(gpu_traj[arm], cpu_traj[arm], strict=True)
            ]
            for arm in arms
        }
        verdict = agreement_verdict(paired=paired, bounds=bounds, relative_differences=relative)
        self.sections["agreement"] = {
            "rounds": played,
            "paired_rounds": {arm: len(v) for arm, v in paired.items()},
            "paired_errors": paired,
            "round_bounds": bounds,
            "relative_differences": relative,
            "accuracy": {arm: [gpu_traj["accuracy"][arm], cpu_traj["accuracy"][arm]] for arm in arms},
            "verdict": verdict,
            # TF32 would round float32 matmuls to 10 bits: the tolerance assumes the defaults (off for matmul)
            "tf32": {
                "matmul": torch.backends.cuda.matmul.allow_tf32,
                "cudnn": torch.backends.cudnn.allow_tf32,
            },
        }
        where = "CUDA" if self.cuda else "the CPU (rehearsal)"
        beyond = [p for p in verdict["problems"] if "beyond the bound" in p]
        ratio, worst = verdict["worst_paired_over_bound"], verdict["worst_relative_difference"]
        self.add(
            Check(
                "agreement_bound",
                ratio,
                judge(ratio, "<=1").replace("miss", "fail"),  # a correctness check: beyond is a failure
                target="<=1",
                note=f"worst ‖w_sifl − w_fl‖₂ ÷ round_bound, one round from the same start on {where}, "
                f"float64 coding; {'; '.join(beyond) or 'within the bound'}",
                data={"paired_errors": paired, "round_bounds": bounds},
            )
        )
        self.add(
            Check(
                "agreement_cuda_vs_cpu",
                worst,
                judge(worst, f"<={TRAJECTORY_TOLERANCE:g}").replace("miss", "fail"),
                target=f"<={TRAJECTORY_TOLERANCE:g}",
                note=f"fl, sifl_m1, sifl_m2 over {played} rounds: worst ‖w_cuda − w_cpu‖₂ ÷ ‖w_cpu‖₂",
                data={"relative_differences": relative},
            )
        )
        self.memory_figures("agreement", memory, smi)

    def pinning_figures(self, placements: dict[str, dict], problems: list[str]) -> None:
        workers = {k: v for k, v in placements.items() if k.startswith("worker ")}
        ids = sorted({",".join(p["gpu_ids"]) for p in workers.values()})
        devices = sorted({p["device"] for p in workers.values()})
        self.sections["pinning"] = {"placements": placements, "problems": problems}
        self.add(
            Check(
                "pinning",
                float(len(placements) - len({p.split(":")[0] for p in problems})),
                "fail" if problems else "pass",
                target=f">={len(placements)}",
                note=f"parties placed as configured: {len(workers)} workers × {PINNED_FRACTION} GPU on "
                f"GPU id(s) {'/'.join(ids) or '-'}, computing on {'/'.join(devices)}; server, aggregator "
                "shards and evaluator on the CPU"
                + (f"; problems: {'; '.join(problems)}" if problems else ""),
                data={"placements": placements},
            )
        )
        fell = [name for name, p in workers.items() if p.get("fallback")]
        design = (
            "server and aggregator (a few ñ transforms and their noise per round), evaluator, noise draws"
        )
        self.add(
            Check(
                "fallback",
                float(len(fell)),
                "rehearsal" if self.rehearsal else ("pass" if not fell else "fail"),
                target="<=0",
                note=f"workers that fell back to the CPU: {', '.join(fell) or 'none'}; "
                f"on the CPU by design: {design}",
                data={name: workers[name].get("fallback") for name in fell},
            )
        )

    # -------------------------------------------------------------------- 3: kernels
    def kernels(self, deadline: float) -> None:
        s, rows = self.sizes, []
        for left_inverse in s.kernel_inverses:
            for n, n_tilde in s.kernel_sizes:
                if time.monotonic() > deadline:
                    break
                rows.append(
                    kb.measure(
                        n=n,
                        n_tilde=n_tilde,
                        left_inverse=left_inverse,
                        device=self.device,
                        reps=s.kernel_reps,
                        warmup=s.kernel_warmup,
                    )
                )
        self.sections["kernels"] = {"rows": rows}
        for r in rows:
            largest = r["n"] == s.kernel_sizes[-1][0]
            target = TARGETS["kernel_ms"] if largest and not self.rehearsal else ""
            self.add(
                Check(
                    f"kernels_{r['left_inverse']}_n{r['n']}",
                    r["encode_decode_ms"],
                    judge(r["encode_decode_ms"], target, rehearsal=self.rehearsal),
                    target=target,
                    unit="ms",
                    note=f"encode+decode on {r['device']} = {r['ratio']:.1f}× one float64 copy "
                    f"({r['copy_ms']:.3f} ms; p25–p75 {r['ratio_p25']:.1f}–{r['ratio_p75']:.1f}×), "
                    f"decode error {r['max_decode_error']:.1e}",
                    data=r,
                )
            )

    # -------------------------------------------------------------------- 4: rounds
    def rounds(self, deadline: float) -> None:
        models = list(self.args.models)
        for i, model in enumerate(models):
            share = (deadline - time.monotonic()) / (len(models) - i)
            try:
                self.rounds_of(model, time.monotonic() + share)
            except Exception as err:
                self.errors[f"rounds_{model}"] = traceback.format_exc()
                note = f"failed: {type(err).__name__}: {err}"
                self.add(Check(f"rounds_{model}", None, "not_measured", note=note))
            self.save()

    def rounds_of(self, model: str, deadline: float) -> None:
        s = self.sizes
        arms = ("fl", "sifl_m2")
        gpu = [f"ray.gpus_per_worker={ROUND_FRACTION}", f"ray.evaluator_gpus={ROUND_FRACTION}"]
        key, _, off = self.vectorised_switch()
        gpu.append(f"{key}={off}")  # clients one at a time, the bare loop's arithmetic (both: section 5)
        cfg = self.config(
            model,
            clients=s.round_clients,
            n_train=s.round_train,
            n_test=s.round_test,
            rounds=s.round_warmup + s.rounds,
            arms=arms,
            extra=gpu,
        )
        # Hosts of its own for each model (its memory figures are its own), kept for the vectorised
        # section, which has the same shape: six processes and their CUDA contexts not started again.
        self.stop_round_hosts()
        self.round_hosts = WarmHosts(self.start_backend(cfg))
        sim = runner.Simulation(cfg, hosts=self.round_hosts)
        try:
            parts = runner.partition(cfg, sim.dataset.y_train)
            bare = BareLoop(sim.dataset, parts, cfg, threads=1 if self.rehearsal else 4, device=self.device)
            total = s.round_warmup + s.rounds
            times, difference = play_turns(sim, bare, self.device, total, s.round_warmup + 2, deadline)
            memory = worker_memory(sim)
            smi = nvidia_smi()
        finally:
            sim.stop_actors()
        w = s.round_warmup
        measured = len(times["fl"]) - w
        record = {
            "model": model,
            "n": sim.n,
            "rounds_measured": measured,
            "round_s": {a: spread(v[w:]) for a, v in times.items()} if measured > 0 else {},
            "times_s": times,
            "max_difference_bare_vs_fl": difference,
        }
        self.sections.setdefault("rounds", {})[model] = record
        self.sections.setdefault("memory", {})[f"rounds_{model}"] = memory
        self.sections.setdefault("nvidia_smi", {})[f"rounds_{model}"] = smi
        ratios = {}
        if measured >= 2:
            ratios = {
                "fl_over_bare": ratio_of_medians(times["fl"][w:], times["bare"][w:]),
                "m2_over_fl": ratio_of_medians(times["sifl_m2"][w:], times["fl"][w:]),
            }
            record.update(ratios)
        for key, label in (("fl_over_bare", "fl ÷ bare GPU loop"), ("m2_over_fl", "sifl_m2 ÷ fl")):
            r = ratios.get(key)
            value = None if r is None else r["ratio"]
            spread_note = "" if r is None else f", p25–p75 {r['ratio_p25']:.3f}–{r['ratio_p75']:.3f}"
            self.add(
                Check(
                    f"rounds_{model}_{key}",
                    value,
                    judge(value, TARGETS[key], rehearsal=self.rehearsal),
                    target=TARGETS[key],
                    note=f"{label}, {model} (n = {sim.n:,}), {measured} rounds{spread_note}"
                    + (f"; max |w_bare − w_fl| {difference:.1e}" if key == "fl_over_bare" else ""),
                    data=r or {},
                )
            )
        self.memory_figures(f"rounds_{model}", memory, smi)

    # -------------------------------------------------------------------- 5: vectorised clients
    def vectorised(self, deadline: float) -> None:
        switch = self.vectorised_switch()
        key, on, off = switch
        s, times, models, parties = self.sizes, {}, {}, 0
        cfgs = {
            label: self.config(
                "mlp",
                clients=s.vec_clients,
                n_train=s.vec_train,
                n_test=s.round_test,
                rounds=1 + s.vec_rounds,
                arms=("fl",),
                extra=[
                    f"ray.gpus_per_worker={ROUND_FRACTION}",
                    f"ray.evaluator_gpus={ROUND_FRACTION}",
                    f"{key}={value}",
                ],
            )
            for label, value in (("per_client", off), ("vectorised", on))
        }
        # Both runs take the round section's hosts (or the per-client run's), started again (a fresh
        # host's numbers: tests/test_session.py), rather than a process per party of their own; the
        # speedup compares the rounds after the first, warm either way.
        hosts = self.round_hosts or WarmHosts(self.start_backend(cfgs["per_client"]))
        self.round_hosts = None
        try:
            for label, cfg in cfgs.items():
                sim = runner.Simulation(cfg, hosts=hosts)
                try:
                    times[label] = []
                    for t in range(1 + s.vec_rounds):
                        if t > 1 and time.monotonic() > deadline:
                            break
                        dt, _ = timed(lambda t=t, sim=sim: sim.play_round("fl", t, supervise=False))
                        times[label].append(dt)
                    models[label] = sim.global_model("fl")
                    parties += len(sim.actors())
                finally:
                    sim.stop_actors()
            reused = hosts.reused
        finally:
            hosts.stop()
        off_s, on_s = (statistics.median(times[k][1:] or times[k]) for k in ("per_client", "vectorised"))
        speedup = off_s / on_s
        self.sections["vectorised"] = {
            "available": True,
            "switch": f"{key}={on} (per-client: {off})",
            "times_s": times,
            "max_model_difference": float((models["vectorised"] - models["per_client"]).abs().max()),
            "hosts_started_again": f"{reused} of {parties}",  # all: the round section's, then each other's
        }
        self.add(
            Check(
                "vectorised_n1000_speedup",
                speedup,
                judge(speedup, TARGETS["vectorised"], rehearsal=self.rehearsal),
                target=TARGETS["vectorised"],
                unit="x",
                note=f"median round, {s.vec_clients} clients, per-client ÷ vectorised ({key}); one run after "
                "the other (not taking turns)",
            )
        )

    def stop_round_hosts(self) -> None:
        """Stop the round section's hosts, if the vectorised section did not take them."""
        if self.round_hosts is not None:
            self.round_hosts.stop()
            self.round_hosts = None

    def vectorised_switch(self) -> tuple[str, str, str]:
        """``(key, on, off)`` of the vectorised-clients switch: ``train.vectorise``
        (:mod:`sifl_ray.optim.vectorised`), or the one ``--vectorised KEY=VALUE`` names."""
        if self.args.vectorised:
            key, _, on = self.args.vectorised.partition("=")
            return key, on or "true", "false"
        return VECTORISE_KEY, "true", "false"

    # -------------------------------------------------------------------- 6: memory
    def memory_figures(self, where: str, memory: dict[str, dict], smi: dict[str, Any]) -> None:
        if not memory:
            return
        key = "peak_reserved_bytes" if self.cuda else "max_rss_bytes"
        peaks = {name: m.get(key, 0) / MIB for name, m in memory.items()}
        worst = max(peaks.values())
        what = "torch's peak reserved GPU memory" if self.cuda else "peak RSS (no CUDA)"
        self.add(
            Check(
                f"memory_{where}_worker_peak",
                worst,
                "rehearsal" if self.rehearsal else "info",
                unit="MiB",
                note=f"{what} per worker: " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()),
                data=memory,
            )
        )
        gpus = smi.get("gpus") or []
        used = sum(float(g.get("memory.used", "nan")) for g in gpus) if gpus else None
        self.add(
            Check(
                f"nvidia_smi_{where}",
                used,
                "info" if gpus else "not_measured",
                unit="MiB",
                note=smi.get("summary") or smi.get("why", ""),
                data=smi,
            )
        )

    # -------------------------------------------------------------------- the run
    def run(self) -> int:
        budget = Budget(self.args.budget_s or self.sizes.budget_s)
        if not self.rehearsal:  # a hung CUDA call must not hold the machine: die, leaving the JSON so far
            faulthandler.dump_traceback_later(budget.total_s + 120, exit=True)
        sections = [("agreement", self.agreement), ("kernels", self.kernels), ("rounds", self.rounds)]
        sections.append(("vectorised", self.vectorised))
        shares = dict(SHARES)
        try:
            for i, (name, fn) in enumerate(sections):
                shares_left = sum(shares[n] for n, _ in sections[i:]) or 1.0
                if budget.left() <= 0:
                    self.add(Check(name, None, "not_measured", note="out of time (--budget-s)"))
                    continue
                self.run_section(name, fn, budget.deadline(shares[name], shares_left))
        finally:
            faulthandler.cancel_dump_traceback_later()
            self.stop_round_hosts()
            if self.backend is not None:
                self.backend.shutdown()
        self.sections["total_s"] = round(budget.total_s - budget.left(), 1)
        path = self.save()
        print(summary(self.figures))
        print(f"wrote {path}")
        print(final_line(self.figures, path, rehearsal=self.rehearsal, total_s=self.sections["total_s"]))
        broke = bool(self.errors) or any(f.status == "fail" for f in self.figures)
        return 1 if broke else 0


# ------------------------------------------------------------------------------------------ helpers
def party_placements(sim) -> dict[str, dict]:
    """Every party's :func:`~sifl_ray.parties.process.placement`, by name."""
    parties = sim.parties
    handles = {f"worker {k}": w for k, w in enumerate(parties.workers)}
    handles["server"] = parties.server
    handles.update({f"aggregator {k}": a for k, a in enumerate(parties.aggregators)})
    handles["evaluator"] = parties.evaluator
    placed = sim.backend.get_all([h.call(Host.placement) for h in handles.values()])
    return dict(zip(handles, placed, strict=True))


def worker_memory(sim) -> dict[str, dict]:
    """Each client worker's memory report (peak allocated and reserved on its device), read at the end so that
    the figure covers the whole run."""
    workers = sim.parties.workers
    got = sim.backend.get_all([w.call(WorkerHost.memory) for w in workers])
    return {f"worker {k}": m for k, m in enumerate(got)}


def trajectory(sim, arms, rounds: int, deadline: float | None) -> dict[str, Any]:
    """``rounds`` rounds of every arm (stopping early, after one, at ``deadline``): each arm's global model
    after each round, and its test accuracy."""
    out: dict[str, Any] = {arm: [] for arm in arms}
    out["accuracy"] = {}
    for t in progress(range(rounds), "bench gpu: trajectory", name=lambda t: f"round {t}"):
        if t and deadline is not None and time.monotonic() > deadline:
            break
        for arm in arms:
            result = sim.play_round(arm, t, supervise=False)
            out[arm].append(sim.global_model(arm))
            out["accuracy"][arm] = result.metrics.get("test_accuracy")
    return out


def paired_errors(sim, arms, start: int, count: int, deadline: float) -> dict[str, list[float]]:
    """Each SIFL round against FedAvg from the same start (``‖w_sifl − w_fl‖₂``; what ``round_bound``
    bounds, as in ``tests/reliability/reliability_helpers.paired_round_errors``)."""
    errors: dict[str, list[float]] = {arm: [] for arm in arms}
    for t in progress(range(start, start + count), "bench gpu: paired rounds", name=lambda t: f"round {t}"):
        if t > start and time.monotonic() > deadline:
            break
        assignment = sim.assignment(t)
        for arm in arms:
            sim.set_start("fl", sim.global_model(arm))
            for played in ("fl", arm):
                sim.play_round(played, t, assignment, supervise=False)
            difference = sim.global_model(arm) - sim.global_model("fl")
            errors[arm].append(float(torch.linalg.vector_norm(difference)))
    return errors


def play_turns(sim, bare: BareLoop, device: torch.device, total: int, least: int, deadline: float):
    """``fl``, ``sifl_m2`` and the bare loop take turns for up to ``total`` rounds (at least ``least``, then
    until ``deadline``); their wall times, and how far the bare loop's model is from fl's."""
    arms = ["fl", "sifl_m2", "bare"]
    times: dict[str, list[float]] = {a: [] for a in arms}
    difference = 0.0
    for t in progress(range(total), "bench gpu: turns", name=lambda t: f"round {t}"):
        if t >= least and time.monotonic() > deadline:
            break
        groups = sim.assignment(t)
        for arm in rotation(arms, t):
            if arm == "bare":
                dt, _ = timed(lambda t=t, g=groups: bare.round(t, g), device)
            else:
                dt, _ = timed(lambda a=arm, t=t, g=groups: sim.play_round(a, t, g, supervise=False))
            times[arm].append(dt)
        difference = max(difference, float((sim.global_model("fl") - bare.w.cpu()).abs().max()))
    return times, difference


def nvidia_smi() -> dict[str, Any]:
    """What ``nvidia-smi`` reports: every GPU's memory and use, and the processes on it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"why": "nvidia-smi not found on this machine"}
    gpu_cols = ("index", "name", "memory.used", "memory.total", "utilization.gpu")
    app_cols = ("pid", "process_name", "used_memory")
    out: dict[str, Any] = {}
    try:
        for key, query, cols in (
            ("gpus", "--query-gpu", gpu_cols),
            ("processes", "--query-compute-apps", app_cols),
        ):
            text = subprocess.run(
                [exe, f"{query}={','.join(cols)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            out[key] = parse_smi_csv(text, cols)
    except (OSError, subprocess.SubprocessError) as err:
        return {"why": f"nvidia-smi failed: {err}", **out}
    gpus = out.get("gpus") or []
    out["summary"] = (
        "; ".join(
            f"GPU {g['index']} {g['name']}: {g['memory.used']}/{g['memory.total']} MiB, "
            f"{g['utilization.gpu']} % busy"
            for g in gpus
        )
        + f"; {len(out.get('processes') or [])} compute processes"
    )
    return out


def summary(figures: list[Check]) -> str:
    """The console table of every check: its value, target and verdict."""
    rows = [
        [f.name, "nan" if f.value is None else f"{f.value:.4g}{f.unit}", f.target, f.status] for f in figures
    ]
    return table(rows, ["figure", "value", "target", "status"])


def final_line(figures: list[Check], path: Path, *, rehearsal: bool, total_s: float) -> str:
    """The last line: how many checks passed, missed, failed or could not be measured, and where the JSON
    is."""
    counts = {
        s: sum(f.status == s for f in figures)
        for s in ("pass", "miss", "fail", "not_available", "not_measured")
    }
    tail = " ".join(f"{k}={v}" for k, v in counts.items())
    where = "rehearsal on the CPU: nothing measured on a GPU" if rehearsal else "measured on the GPU"
    return f"RESULT gpu figures={len(figures)} {tail} total_s={total_s:g} json={path} ({where})"


def main(argv: list[str] | None = None) -> int:
    """``python -m bench gpu``: every GPU check within the time budget, in one call (device time is scarce);
    exit 0 unless a check failed."""
    parser = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and rounds (about 4 minutes)")
    parser.add_argument("--rehearse", action="store_true", help="run every section on the CPU, tiny (no GPU)")
    parser.add_argument("--budget-s", type=float, default=None, help="total time (default 450; quick 240)")
    parser.add_argument("--models", default=",".join(MODELS), help="models of the rounds section")
    parser.add_argument("--vectorised", default=None, help="the vectorised-clients switch, KEY=VALUE")
    parser.add_argument("--out", default=None, help="JSON path (default bench_results/gpu-<date>.json)")
    args = parser.parse_args(argv)
    args.models = [m for m in str(args.models).split(",") if m]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; expected some of {','.join(MODELS)}")
    if not torch.cuda.is_available() and not args.rehearse:
        print(
            "gpu: nothing was measured: no CUDA device here (torch.cuda.is_available() is False); "
            "on a GPU machine run: python -m bench gpu"
        )
        return 0
    sizes = REHEARSE if args.rehearse else (QUICK if args.quick else FULL)
    return GpuBench(args, sizes).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
