"""``python -m bench overhead --clients N``: the platform's round time against a bare PyTorch loop.

The reference workload (:mod:`bench._common`) at N clients, four arms taking turns round by round in a
rotating order, in one process and one Ray session:

* ``fl``: the platform's FedAvg arm (``Simulation.play_round`` on Ray: ``--workers`` client workers of one
  CPU and one torch thread each, two aggregator shards, the server, the evaluator), its workers training
  their clients together (``train.vectorise=true``, the default: :mod:`sifl_ray.optim.vectorised`);
* ``fl stacked``: the same, where every client's model is formed: where each client takes one step of SGD
  (the reference workload at N = 1000: 60 samples a client, batch 64), ``fl`` sums each chunk's gradients
  instead (:meth:`sifl_ray.optim.vectorised.ClientRound.summed`), and this arm turns that off
  (``ClientWorker.set_vectorise(True, sums=False)``): what the clients trained together give where they
  take several steps;
* ``fl loop``: the same arm and workers training one client at a time (``train.vectorise=false``), from the
  same start in every round;
* ``bare 1t`` / ``bare 2t``: :class:`bench._common.BareLoop` in the driver with 1 and 2 torch threads,
  the loop's arithmetic with zero framework (after every round the bench checks that the platform's loop
  model equals the bare loop's: the largest difference is printed, 0 means bit for bit; the vectorised
  model's difference from the loop's is round-off).

The ratio is median(fl) / median(best bare arm); the spread is the 25th–75th percentile of the per-round
ratios. ``vectorised ÷ loop`` is median(fl) / median(fl loop), which must not exceed 1 (at N = 10 too).
Then, in the same Ray session, a fresh simulation with no-op clients (``train.skip_training=true``: no
data, no steps; the rest of the round, evaluation included, runs) gives the framework overhead per client
per round = median no-op round time / N. Start-up is timed from ``ray.init`` to the end of
``Simulation(...)``; the framework's share excludes generating the data set, which the bare loop needs
too.

Defaults (about 2–5 minutes on a 2-core machine at any N): 6 measured rounds per arm after 1 warm-up
round, 6 no-op rounds. Targets: ratio ≤ 1.10 (N ≤ 10), ≤ 1.25 (N ≤ 100), ≤ 1.5 (N < 1000), ≤ 0.45 from
N = 1000 (where a worker trains its clients together); vectorised ÷ loop ≤ 1 (≤ 0.6 from N = 1000); no-op
overhead ≤ 1 ms per client (stated for N = 1000); start-up ≤ 5 s.

Where the lead of clients trained with their models formed ends on a CPU, the report says: the no-op
round is the part of a round both ways of training pay alike (every client's checks and sums, the
aggregation, the server, the evaluation), so no vectorising that forms every model can bring its ratio to
the loop below (no-op round + the training's matrix products at this CPU's square-matrix rate) ÷ the
loop's round, printed as its lowest value here.

The last line is ``RESULT overhead_n<N> ratio=<ratio> target=<target>``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import torch

import sifl_ray.runner as runner
from bench._common import (
    BareLoop,
    cuda_missing,
    gpu_overrides,
    not_measured,
    publish,
    ratio_of_medians,
    reference_config,
    result_line,
    rotation,
    spread,
    table,
    timed,
)
from bench.floor import round_floor
from sifl_ray.models import build_model
from sifl_ray.parties.workers import ClientWorker
from sifl_ray.progress import progress

TARGETS = ((10, 1.10), (100, 1.25), (999, 1.5), (None, 0.45))
#: The platform's ways of training a worker's clients: arm → (``train.vectorise``, one-step chunks summed).
PLATFORM = {"fl": (True, True), "fl stacked": (True, False), "fl loop": (False, True)}
KINDS = {(True, True): "yes", (True, False): "models", (False, True): "no"}  # the table's "vectorised"
#: vectorised ÷ loop: never above 1; from this many clients on, ≤ :data:`VECTORISED_LEAD`.
VECTORISED_FROM, VECTORISED_LEAD = 1000, 0.6
NOOP_TARGET_MS = 1.0
STARTUP_TARGET_S = 5.0


def target_for(clients: int) -> float:
    """The issue's ratio target at ``clients`` clients."""
    return next(target for limit, target in TARGETS if limit is None or clients <= limit)


def vectorised_target(clients: int) -> float:
    """The issue's vectorised ÷ loop target at ``clients`` clients."""
    return VECTORISED_LEAD if clients >= VECTORISED_FROM else 1.0


def lowest_vectorised_over_loop(res: dict[str, Any]) -> float | None:
    """The least ``vectorised ÷ loop`` any vectorising could reach on this CPU: (the no-op round, which both
    ways of training pay alike, + the training's products at the square-matrix rate) ÷ the loop's round.
    ``None`` without a no-op round or a floor."""
    if not res.get("noop") or "floor" not in res:
        return None
    shared = res["noop"]["round_s"]["median"]
    return (shared + res["floor"]["train_floor_s"]) / res["round_s"]["fl loop"]["median"]


@contextlib.contextmanager
def _time_calls(module: Any, name: str) -> Iterator[list[float]]:
    """Record the wall time of every call to ``module.name`` while the block runs (instrument only)."""
    original, calls = getattr(module, name), []

    def wrapper(*args, **kwargs):
        dt, out = timed(lambda: original(*args, **kwargs))
        calls.append(dt)
        return out

    setattr(module, name, wrapper)
    try:
        yield calls
    finally:
        setattr(module, name, original)


def _platform_round(sim, t: int, groups) -> tuple[float, dict[str, float]]:
    dt, result = timed(lambda: sim.play_round("fl", t, groups, supervise=False))
    return dt, result.metrics


def _vectorise(sim, on: bool, sums: bool = True) -> None:
    """Switch every client worker to ``train.vectorise=on`` (between rounds, outside the timing)."""
    backend = sim.backend
    backend.get_all([w.call(ClientWorker.set_vectorise, on, sums) for w in sim.parties.workers])


def _turns(sim, cfg, args: argparse.Namespace, total: int):
    """``total`` rounds of ``fl`` (vectorised and loop, from the same start) and each bare loop, taking
    turns; times, metrics, largest difference from the platform's loop."""
    device = torch.device(args.device)
    parts = runner.partition(cfg, sim.dataset.y_train)
    bare = {f"bare {k}t": BareLoop(sim.dataset, parts, cfg, threads=k, device=device) for k in args.threads}
    arms = [*PLATFORM, *bare]
    times: dict[str, list[float]] = {a: [] for a in arms}
    metrics: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    deviation: dict[str, float] = dict.fromkeys(["fl", "fl stacked", *bare], 0.0)
    for t in progress(range(total), "bench overhead", name=lambda t: f"round {t}: every arm"):
        groups = sim.assignment(t)
        start, ends = sim.global_model("fl"), {}
        for arm in rotation(arms, t):
            if arm in PLATFORM:
                _vectorise(sim, *PLATFORM[arm])
                sim.set_start("fl", start)
                dt, m = _platform_round(sim, t, groups)
                ends[arm] = sim.global_model("fl")
            else:
                dt, m = timed(lambda loop=bare[arm], t=t, g=groups: loop.round(t, g), device)
            times[arm].append(dt)
            metrics[arm].append(m)
        w_loop = ends["fl loop"]
        sim.set_start("fl", w_loop)  # the next round starts where the loop (and the bare loops) ended
        for arm in ("fl", "fl stacked"):
            deviation[arm] = max(deviation[arm], float((ends[arm] - w_loop).abs().max()))
        for arm, loop in bare.items():
            deviation[arm] = max(deviation[arm], float((w_loop - loop.w.cpu()).abs().max()))
    _vectorise(sim, cfg.train.vectorise)
    return times, metrics, deviation


def _noop(backend: Any, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """No-op clients (no data, no steps) in the same Ray session: the framework's own cost per client."""
    n = args.clients
    cfg_noop = reference_config(
        n,
        rounds=args.warmup + args.noop_rounds,
        workers=args.workers,
        n_train=args.n_train,
        n_test=args.n_test,
        extra=[*extra, "train.skip_training=true"],
    )
    noop_build_s, noop_sim = timed(lambda: runner.Simulation(cfg_noop, backend=backend))
    try:
        noop_times = [
            _platform_round(noop_sim, t, noop_sim.assignment(t))[0]
            for t in progress(range(args.warmup + args.noop_rounds), "bench overhead: no-op rounds")
        ]
    finally:
        noop_sim.stop_actors()
    noop_stats = spread(noop_times[args.warmup :])
    return {
        "round_s": noop_stats,
        "ms_per_client": 1e3 * noop_stats["median"] / n,
        "simulation_s_warm_ray": noop_build_s,
        "times_s": noop_times,
    }


def _floor(sim: Any, cfg: Any, stats: dict[str, dict[str, float]], best: str) -> dict[str, Any]:
    """The round's arithmetic floor on this CPU (:mod:`bench.floor`), measured once the rounds are over
    (nothing else running), and the round times against it."""
    data = sim.dataset
    shape, classes = tuple(data.x_train.shape[1:]), int(data.num_classes)
    model = build_model(cfg.train.model, input_shape=shape, num_classes=classes, generator=torch.Generator())
    floor = round_floor(
        model,
        shape,
        classes,
        samples=len(data.y_train),
        epochs=cfg.train.local_epochs,
        workers=sim.num_workers,
        test_samples=len(data.y_test),
    )
    return {
        **floor,
        "fl_over_floor": stats["fl"]["median"] / floor["floor_s"],
        "floor_over_bare": floor["floor_s"] / stats[best]["median"],
        "floor_over_loop": floor["floor_s"] / stats["fl loop"]["median"],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Round times of fl on the platform against the best bare training loop on the same workload, in one
    process tree so that both see the same load."""
    n = args.clients
    total = args.warmup + args.rounds
    extra = ["ray.cpus_per_worker=1"]
    extra += gpu_overrides(args.device, args.gpus_per_worker, args.workers)
    cfg = reference_config(
        n, rounds=total, workers=args.workers, n_train=args.n_train, n_test=args.n_test, extra=extra
    )

    # 1. Start-up: ray.init, then the simulation (data set, partition, actors, keys, first broadcast).
    with _time_calls(runner.workload, "load_any_dataset") as data_calls:  # where the workload looks it up
        ray_s, backend = timed(lambda: runner.make_backend(cfg))
        with _time_calls(backend, "put") as put_calls:
            build_s, sim = timed(lambda: runner.Simulation(cfg, backend=backend))
    data_s, put_s = sum(data_calls), sum(put_calls)
    startup = {
        "ray_init_s": ray_s,
        "simulation_s": build_s,
        "data_s": data_s,
        "put_s": put_s,
        "actors_s": build_s - data_s - put_s,  # spawn every actor, make keys, first broadcast
        "total_s": ray_s + build_s,
        "framework_s": ray_s + build_s - data_s,
    }

    # 2. fl against the bare loop, taking turns; 3. no-op clients in the same Ray session.
    try:
        times, metrics, deviation = _turns(sim, cfg, args, total)
    finally:
        sim.stop_actors()  # the no-op simulation needs their CPUs; Ray itself stays up
    noop = _noop(backend, args, extra) if args.noop_rounds else {}
    backend.shutdown()  # only if this bench started Ray
    w = args.warmup
    stats = {a: spread(times[a][w:]) for a in times}
    best = min((a for a in times if a not in PLATFORM), key=lambda a: stats[a]["median"])
    ratio = ratio_of_medians(times["fl"][w:], times[best][w:])
    loop_ratio = ratio_of_medians(times["fl loop"][w:], times[best][w:])
    vectorised = ratio_of_medians(times["fl"][w:], times["fl loop"][w:])
    stacked = ratio_of_medians(times["fl stacked"][w:], times["fl loop"][w:])

    # 4. The round's arithmetic floor (in "floor"), measured now that nothing else runs.
    return {
        "name": f"overhead_n{n}",
        "args": vars(args),
        "workload": {
            "model": cfg.train.model,
            "n_params": sim.n,
            "n_train": args.n_train,
            "n_test": args.n_test,
            "clients": n,
            "workers": sim.num_workers,
            "batch_size": cfg.train.batch_size,
            "local_epochs": cfg.train.local_epochs,
            "lr": cfg.train.lr,
        },
        "startup": startup,
        "round_s": stats,
        "times_s": times,
        "best_bare": best,
        "fl_over_bare": ratio,
        "fl_loop_over_bare": loop_ratio,
        "vectorised_over_loop": vectorised,
        "stacked_over_loop": stacked,
        "fl_stacked_over_bare": ratio_of_medians(times["fl stacked"][w:], times[best][w:]),
        "max_model_difference_vs_loop": deviation,
        "test_accuracy_last": {a: metrics[a][-1]["test_accuracy"] for a in times},
        "train_loss_last": {a: metrics[a][-1]["train_loss"] for a in times},
        "first_round_s": {a: times[a][0] for a in times},
        "noop": noop,
        "floor": _floor(sim, cfg, stats, best),
    }


def report(res: dict[str, Any], target: float) -> str:
    """The ratio to the bare loop (the target), with the start-up split into its phases."""
    wl, st = res["workload"], res["startup"]
    lines = [
        f"overhead: FedAvg, {wl['model']} ({wl['n_params']:,} params), {wl['n_train']:,} samples, "
        f"N={wl['clients']} clients, {wl['workers']} workers × 1 thread, "
        f"{res['round_s']['fl']['n']} rounds after {res['args']['warmup']} warm-up",
        "",
    ]
    best = res["best_bare"]
    rows = []
    over_bare = {"fl": res["fl_over_bare"], "fl loop": res["fl_loop_over_bare"]}
    if "fl_stacked_over_bare" in res:
        over_bare["fl stacked"] = res["fl_stacked_over_bare"]
    for arm, s in res["round_s"].items():
        ratio = ""
        if arm in over_bare:
            r = over_bare[arm]
            ratio = f"{r['ratio']:.3f} ({r['ratio_p25']:.2f}–{r['ratio_p75']:.2f})"
        elif arm == best:
            ratio = "floor"
        dev = res["max_model_difference_vs_loop"].get(arm)
        rows.append(
            [
                arm,
                KINDS.get(PLATFORM.get(arm), "—"),
                f"{s['median']:.3f}",
                f"{s['p25']:.3f}–{s['p75']:.3f}",
                f"{s['min']:.3f}",
                f"{res['first_round_s'][arm]:.3f}",
                f"{res['test_accuracy_last'][arm]:.4f}",
                "—" if dev is None else f"{dev:.1e}",
                ratio,
            ]
        )
    header = [
        "arm", "vectorised", "median s", "p25–p75 s", "min s", "warm-up s", "test acc", "max|w−w_loop|",
        "÷ floor",
    ]  # fmt: skip
    lines.append(table(rows, header))
    v = res["vectorised_over_loop"]
    lines.append(
        f"vectorised ÷ loop: {v['ratio']:.3f} ({v['ratio_p25']:.2f}–{v['ratio_p75']:.2f}); "
        "max|w−w_loop|: from the same start each round (fl: round-off; bare: 0 means bit for bit)"
    )
    if "stacked_over_loop" in res:
        sv = res["stacked_over_loop"]
        lines.append(
            f"every client's model formed (fl stacked) ÷ loop: {sv['ratio']:.3f} "
            f"({sv['ratio_p25']:.2f}–{sv['ratio_p75']:.2f}): the clients trained together where they take "
            "several steps; fl sums one-step clients' gradients a chunk at a time"
        )
    if "floor" in res:
        f = res["floor"]
        lines.append(
            f"arithmetic floor (bench/floor.py): {f['gflop_per_round']:.1f} GFLOP of matrix products a "
            f"round, the evaluation's included ({f['mflop_per_sample']:.2f} MFLOP a training sample); "
            f"this CPU {f['gflops_one_thread']:.0f} GFLOP/s on one thread → {f['floor_s']:.3f} s with "
            f"{f['workers']} workers training; fl's round = "
            f"{f['fl_over_floor']:.2f} × the floor; the lowest ratio any round could show here: "
            f"÷ {best} {f['floor_over_bare']:.3f}, ÷ fl loop {f['floor_over_loop']:.3f}"
        )
    lines.append("")
    lines.append(
        f"start-up: ray.init {st['ray_init_s']:.2f} s + Simulation {st['simulation_s']:.2f} s (data set "
        f"{st['data_s']:.2f} s, put {st['put_s']:.2f} s, actors and keys {st['actors_s']:.2f} s) "
        f"= {st['total_s']:.2f} s; framework start-up (without the data set) {st['framework_s']:.2f} s "
        f"(target ≤ {STARTUP_TARGET_S:g} s)"
    )
    if res["noop"]:
        nb = res["noop"]
        lines.append(
            f"no-op clients: round {nb['round_s']['median']:.3f} s "
            f"({nb['round_s']['p25']:.3f}–{nb['round_s']['p75']:.3f}) → "
            f"{nb['ms_per_client']:.3f} ms per client per round (target ≤ {NOOP_TARGET_MS:g} ms at N = 1000)"
        )
    lead = lowest_vectorised_over_loop(res)
    if lead is not None:
        lines.append(
            f"with every client's model formed, ÷ loop cannot go below {lead:.3f} here: the part of a round "
            f"both pay alike (the no-op round, {res['noop']['round_s']['median']:.3f} s) + the training as "
            "matrix products alone at this CPU's square-matrix rate "
            f"({res['floor']['train_floor_s']:.3f} s), ÷ the loop's round (summed one-step clients skip "
            "each client's read, check and add)"
        )
    lines.append(f"CHECK startup_s={st['framework_s']:.2f} target={STARTUP_TARGET_S:g}")
    lines.append(f"CHECK vectorised_over_loop={v['ratio']:.3f} target={vectorised_target(wl['clients']):g}")
    if res["noop"]:
        lines.append(f"CHECK noop_ms_per_client={res['noop']['ms_per_client']:.3f} target={NOOP_TARGET_MS:g}")
    lines.append(result_line(res["name"], res["fl_over_bare"]["ratio"], target))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench overhead``: measure, print the report against the target for this N, write the
    JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10, help="number of clients N (default 10)")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds per arm (default 6)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds per arm (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="client workers (default 2)")
    parser.add_argument(
        "--threads", default="1,2", help="torch threads of the bare-loop arms, comma list (default 1,2)"
    )
    parser.add_argument(
        "--noop-rounds", type=int, default=6, help="measured no-op rounds (default 6; 0 skips them)"
    )
    parser.add_argument("--n-train", type=int, default=60000, help="training samples (default 60000)")
    parser.add_argument("--n-test", type=int, default=10000, help="test samples (default 10000)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (GPU workers and a GPU bare loop)")
    parser.add_argument(
        "--gpus-per-worker", type=float, default=0.0, help="with --device cuda (default 1/workers)"
    )
    parser.add_argument("--out", default=None, help="JSON path (default bench_results/overhead_n<N>.json)")
    args = parser.parse_args(argv)
    args.threads = [int(k) for k in str(args.threads).split(",") if k.strip()]
    name = f"overhead_n{args.clients}"
    target = target_for(args.clients)
    out = args.out or f"bench_results/{name}.json"
    if cuda_missing(args.device):
        return not_measured(name, target, out, "no GPU", vars(args))
    res = measure(args)
    res["target"] = target
    res["vectorised_target"] = vectorised_target(args.clients)
    res["lowest_vectorised_over_loop"] = lowest_vectorised_over_loop(res)
    return publish(out, res, report(res, target))


if __name__ == "__main__":
    raise SystemExit(main())
