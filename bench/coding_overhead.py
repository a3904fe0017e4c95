"""``python -m bench coding-overhead --model mlp|cnn2|cnn``: what SIFL M2 costs per round over FedAvg.

One simulation with two arms, ``fl`` and ``sifl_m2``, on the reference workload (:mod:`bench._common`)
with the chosen model, taking turns round by round (fl first in even rounds, M2 first in odd ones). The
arms share the data, the initial model and the minibatches, so the only difference is the coding: the
server's re-encoding, the aggregator's π2, the workers' strip + decode + one ``P1`` per round, the
evaluator's decode and a broadcast twice as wide. The coding keys come from the paper's scenario for
the model (``paper_mnist_<model>_sgd``: ñ − n = 201 / 513 / 129, p = 2, fast backend, oblique inverse),
with one local epoch as in the reference workload.

The ratio is median(sifl_m2) / median(fl); the spread is the 25th–75th percentile of per-round ratios.

Defaults (about 2–7 minutes each on a 2-core machine): 10 clients, 10 measured rounds per arm after 1
warm-up; 60,000 training and 10,000 test samples for the MLP, 12,000 / 2,000 for CNN2 and 6,000 / 1,000
for the CNN (a CNN epoch over 60,000 samples takes over a minute on a CPU). The coding cost per round
does not depend on the sample counts, so fewer samples make the ratio *harder* to meet, not easier; the
table also gives that cost in milliseconds (median M2 round minus median fl round), which carries over
to any sample count. Target: ratio ≤ 1.05.

The last line is ``RESULT coding_overhead_<model> ratio=<ratio> target=1.05``.
"""

from __future__ import annotations

import argparse
from typing import Any

import sifl_ray.runner as runner
from bench._common import (
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
from sifl_ray.models import MODEL_PARAM_COUNTS
from sifl_ray.progress import progress

TARGET = 1.05
DEFAULT_SAMPLES = {"mlp": (60000, 10000), "cnn2": (12000, 2000), "cnn": (6000, 1000)}  # (train, test)
SCENARIO = {"mlp": "paper_mnist_mlp_sgd", "cnn2": "paper_fmnist_cnn2_sgd", "cnn": "paper_mnist_cnn_sgd"}
ARMS = ("fl", "sifl_m2")
TIMINGS = ("time/train", "time/encode", "time/aggregate", "time/decode", "time/transfer")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run of fl and sifl_m2 on the same workload, interleaved round by round so that the machine's load
    falls on both alike; the per-round wall times of each arm."""
    total = args.warmup + args.rounds
    extra = [
        f"scenario={SCENARIO[args.model]}",  # its coding section; the reference workload overrides the rest
        f"train.model={args.model}",
        "arms=[fl,sifl_m2]",
        "ray.cpus_per_worker=1",
    ]
    extra += gpu_overrides(args.device, args.gpus_per_worker, args.workers)
    if args.precision_warn:
        extra.append("coding.precision.policy=warn")
    cfg = reference_config(
        args.clients,
        rounds=total,
        workers=args.workers,
        n_train=args.n_train,
        n_test=args.n_test,
        extra=extra,
    )
    build_s, sim = timed(lambda: runner.Simulation(cfg))
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    parts: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
    deviation = 0.0
    try:
        for t in progress(range(total), "bench coding-overhead", name=lambda t: f"round {t}: every arm"):
            groups = sim.assignment(t)
            for arm in rotation(ARMS, t):
                dt, res = timed(lambda a=arm, t=t, g=groups: sim.play_round(a, t, g, supervise=False))
                times[arm].append(dt)
                parts[arm].append({k: res.metrics[k] for k in TIMINGS})
                if "max_deviation" in res.metrics:
                    deviation = max(deviation, res.metrics["max_deviation"])
    finally:
        sim.close()
    w = args.warmup
    return {
        "name": f"coding_overhead_{args.model}",
        "args": vars(args),
        "workload": {
            "model": args.model,
            "n_params": sim.n,
            "n_tilde": sim.n + cfg.coding.n_extra,
            "p": cfg.coding.p,
            "n_train": args.n_train,
            "n_test": args.n_test,
            "clients": args.clients,
            "workers": sim.num_workers,
            "scenario_coding": SCENARIO[args.model],
        },
        "simulation_s": build_s,
        "round_s": {a: spread(times[a][w:]) for a in ARMS},
        "times_s": times,
        "components_median_s": {
            a: {k[5:]: spread([p[k] for p in parts[a][w:]])["median"] for k in TIMINGS} for a in ARMS
        },
        "m2_over_fl": ratio_of_medians(times["sifl_m2"][w:], times["fl"][w:]),
        "max_deviation_m2_vs_fl": deviation,
    }


def report(res: dict[str, Any]) -> str:
    """The table and the ratio line a reader compares with the target (sifl_m2 ÷ fl ≤ 1.05)."""
    wl = res["workload"]
    lines = [
        f"coding overhead: {wl['model']} (n = {wl['n_params']:,}, ñ = {wl['n_tilde']:,}, p = {wl['p']}), "
        f"{wl['n_train']:,} samples, N={wl['clients']} clients, {wl['workers']} workers, "
        f"{res['round_s']['fl']['n']} rounds per arm after {res['args']['warmup']} warm-up",
        "",
    ]
    rows = []
    for arm in ARMS:
        s, c = res["round_s"][arm], res["components_median_s"][arm]
        r = res["m2_over_fl"]
        delta = s["median"] - res["round_s"]["fl"]["median"]
        rows.append(
            [
                arm,
                f"{s['median']:.3f}",
                "" if arm == "fl" else f"{1e3 * delta:+.0f}",
                f"{s['p25']:.3f}–{s['p75']:.3f}",
                f"{1e3 * c['train']:.0f}",
                f"{1e3 * c['encode']:.1f}",
                f"{1e3 * c['decode']:.1f}",
                f"{1e3 * c['transfer']:.0f}",
                "base" if arm == "fl" else f"{r['ratio']:.3f} ({r['ratio_p25']:.3f}–{r['ratio_p75']:.3f})",
            ]
        )
    header = ["arm", "median s", "Δ ms", "p25–p75 s", "train ms", "encode ms", "decode ms", "other ms"]
    header.append("÷ fl")
    lines.append(table(rows, header))
    lines.append(
        f"max |w_m2 − w_fl| over the run: {res['max_deviation_m2_vs_fl']:.2e} (float64 coding round-off)"
    )
    lines.append(result_line(res["name"], res["m2_over_fl"]["ratio"], TARGET))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench coding-overhead``: measure, print the report, write the JSON; exit 0."""
    parser = argparse.ArgumentParser(
        prog="python -m bench coding-overhead", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", choices=tuple(SCENARIO), default="mlp", help="default mlp")
    parser.add_argument("--clients", type=int, default=10, help="number of clients (default 10)")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds per arm (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds per arm (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="client workers (default 2)")
    parser.add_argument(
        "--n-train", type=int, default=None, help="training samples (mlp 60000, cnn2 12000, cnn 6000)"
    )
    parser.add_argument(
        "--n-test", type=int, default=None, help="test samples (mlp 10000, cnn2 2000, cnn 1000)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (GPU client workers)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="with --device cuda")
    parser.add_argument(
        "--precision-warn",
        action="store_true",
        help="warn instead of refusing when the predicted decode error exceeds the tolerance",
    )
    parser.add_argument("--out", default=None, help="JSON path (default bench_results/<name>.json)")
    args = parser.parse_args(argv)
    train, test = DEFAULT_SAMPLES[args.model]
    args.n_train = train if args.n_train is None else args.n_train
    args.n_test = test if args.n_test is None else args.n_test
    name = f"coding_overhead_{args.model}"
    out = args.out or f"bench_results/{name}.json"
    if cuda_missing(args.device):
        return not_measured(name, TARGET, out, "no GPU", vars(args))
    res = measure(args)
    res["target"] = TARGET
    res["paper_param_count"] = MODEL_PARAM_COUNTS[args.model]
    return publish(out, res, report(res))


if __name__ == "__main__":
    raise SystemExit(main())
