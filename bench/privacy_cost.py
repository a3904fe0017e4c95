"""``python -m bench privacy-cost [--clients 10 100 1000]``: what secure aggregation and SIFL M2 cost per
round and per client, as ratios to FedAvg measured in the same run.

For each N, one simulation (on Ray, as a user runs it) with three arms, ``fl``, ``secagg`` and ``sifl_m2``,
taking turns round by round (the order rotates), on the quickstart workload: scikit-learn's digits (every
client at least one sample up to N = 1347), the quickstart MLP, one local epoch. The arms share the data,
the initial model and the minibatches; what differs is how the uploads are protected.

Per arm and round:

* **bytes per client**: what one client sends and receives in a round, counted as on the wire: FedAvg an
  n-vector up and one down (float64, as the platform sends them); SIFL M2 an ñ-vector up (its M1 encoding)
  and the ñ×p broadcast down; secure aggregation its protocol (two public keys, its neighbours' keys, the
  encrypted shares out and in, the k-bit masked vector, the survivors' list and its unmasking answer: the
  protocol's own counters) and the n-vector broadcast down;
* **time per client**: the round's wall time divided by N (the whole platform: training, coding, the
  protocol's message steps, evaluation), and the protocol's own compute per client (secure aggregation:
  key agreement, Shamir sharing, share encryption, masking) and at the aggregator (routing, reconstruction).

Secure aggregation masks every pair of clients up to N = ``--complete-up-to`` (the original protocol:
O(N) key agreements and shares per client, O(N²) per round) and uses SecAgg+'s sparse graph beyond it,
degree ``--degree`` (O(log N); default ⌈3·log₂ N⌉ = 30 at N = 1000). A complete graph at N = 1000 would
cost each client a thousand-way Shamir split per secret (about a second of Python big-integer arithmetic)
every round.

Ratios are of medians (``secagg ÷ fl``, ``sifl_m2 ÷ fl``); no target: the bench reports what each
protection costs. The last line is ``RESULT privacy_cost secagg_bytes_n<N>=<r> secagg_time_n<N>=<r>
sifl_m2_bytes_n<N>=<r> sifl_m2_time_n<N>=<r> ...``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import sifl_ray.runner as runner
from bench._common import publish, ratio_of_medians, rotation, spread, table, timed
from sifl_ray.config import load_config
from sifl_ray.progress import progress

ARMS = ("fl", "secagg", "sifl_m2")
FLOAT64 = 8


def degree_for(n: int, complete_up_to: int, degree: int | None) -> int | None:
    """The masking graph's degree at ``n`` clients: every pair up to ``complete_up_to`` (``None``), else
    ``degree`` or ⌈3·log₂ N⌉."""
    if n <= complete_up_to:
        return None
    return degree if degree is not None else math.ceil(3 * math.log2(n))


def bytes_per_client(arm: str, metrics: dict[str, float], *, n: int, n_tilde: int, p: int, t: int) -> float:
    """One client's traffic in round ``t`` of ``arm`` (see the module docstring)."""
    if arm == "fl":
        return 2 * n * FLOAT64
    if arm == "secagg":
        return metrics["secagg/bytes_per_client"] + n * FLOAT64
    broadcast = n_tilde * (1 if t == 0 else p)  # M2's round 0 starts from the server's M1 encoding
    return (n_tilde + broadcast) * FLOAT64


def measure_n(clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """Round times of every privacy arm at ``clients`` clients, as ratios to fl measured in the same run."""
    total = args.warmup + args.rounds
    degree = degree_for(clients, args.complete_up_to, args.degree)
    cfg = load_config(
        [
            "scenario=quickstart",
            f"arms=[{','.join(ARMS)}]",
            f"clients.num_clients={clients}",
            f"train.rounds={total}",
            f"ray.num_workers={args.workers}",
            "ray.cpus_per_worker=1",
            f"secagg.degree={'null' if degree is None else degree}",
            "output.tensorboard=false",
            "output.plot=false",
            "output.progress=false",
            "output.dir=bench_results/runs",  # nothing is written there: the bench drives rounds itself
        ]
    )
    build_s, sim = timed(lambda: runner.Simulation(cfg))
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    traffic: dict[str, list[float]] = {a: [] for a in ARMS}
    protocol: dict[str, list[dict[str, float]]] = {"secagg": []}
    n, n_tilde, p = sim.n, sim.n + cfg.coding.n_extra, cfg.coding.p
    try:
        for t in progress(range(total), "bench privacy-cost", name=lambda t: f"round {t}: every arm"):
            groups = sim.assignment(t)
            for arm in rotation(ARMS, t):
                dt, res = timed(lambda a=arm, t=t, g=groups: sim.play_round(a, t, g, supervise=False))
                if res.skipped or res.accepted != clients:
                    raise RuntimeError(f"round {t} of {arm}: {res.accepted} of {clients} clients averaged")
                if t < args.warmup:
                    continue
                times[arm].append(dt / clients)
                traffic[arm].append(bytes_per_client(arm, res.metrics, n=n, n_tilde=n_tilde, p=p, t=t))
                if arm == "secagg":
                    protocol["secagg"].append(
                        {k[7:]: v for k, v in res.metrics.items() if k.startswith("secagg/")}
                    )
    finally:
        sim.close()
    secure = protocol["secagg"]
    return {
        "clients": clients,
        "n_params": n,
        "n_tilde": n_tilde,
        "p": p,
        "degree": clients - 1 if degree is None else min(degree, clients - 1),
        "ring_bits": int(cfg.secagg.ring_bits),
        "simulation_s": build_s,
        "time_per_client_s": {a: spread(times[a]) for a in ARMS},
        "bytes_per_client": {a: spread(traffic[a]) for a in ARMS},
        "time_ratio": {a: ratio_of_medians(times[a], times["fl"]) for a in ARMS[1:]},
        "bytes_ratio": {a: ratio_of_medians(traffic[a], traffic["fl"]) for a in ARMS[1:]},
        "secagg_client_protocol_s": spread([r["client_s"] for r in secure]),
        "secagg_server_protocol_s": spread([r["server_s"] for r in secure]),
        "secagg_messages": spread([r["messages"] for r in secure]),
        "secagg_quantisation": {
            "error_max": max(r["quantisation_error"] for r in secure),
            "bound": max(r["quantisation_bound"] for r in secure),
        },
    }


def report(res: dict[str, Any]) -> str:
    """One row per N and arm: the cost of each protection beside plain FedAvg's."""
    n = res["runs"][0]["n_params"]
    lines = [
        f"privacy cost per round and client, quickstart workload (digits MLP, n = {n:,}), "
        f"{res['args']['rounds']} rounds per arm after {res['args']['warmup']} warm-up, "
        f"{res['args']['workers']} workers; ratios to fl in the same run",
        "",
    ]
    rows = []
    for run in res["runs"]:
        for arm in ARMS:
            b, s = run["bytes_per_client"][arm]["median"], run["time_per_client_s"][arm]["median"]
            base = arm == "fl"
            extra = ""
            if arm == "secagg":
                extra = (
                    f"k = {run['degree']}{' (all pairs)' if run['degree'] == run['clients'] - 1 else ''}; "
                    f"protocol {1e3 * run['secagg_client_protocol_s']['median']:.2f} ms/client, "
                    f"{1e3 * run['secagg_server_protocol_s']['median']:.1f} ms at the aggregator, "
                    f"{run['secagg_messages']['median']:.0f} messages"
                )
            elif arm == "sifl_m2":
                extra = f"ñ = {run['n_tilde']:,}, p = {run['p']}"
            rows.append(
                [
                    str(run["clients"]),
                    arm,
                    f"{b / 1e3:,.1f}",
                    "base" if base else f"{run['bytes_ratio'][arm]['ratio']:.2f}",
                    f"{1e3 * s:.2f}",
                    "base" if base else f"{run['time_ratio'][arm]['ratio']:.2f}",
                    extra,
                ]
            )
    header = ["N", "arm", "kB/client/round", "÷ fl", "ms/client/round", "÷ fl", "protocol"]
    lines.append(table(rows, header))
    lines.append(
        "bytes: as on the wire (float64 vectors as the platform sends them; secure aggregation's masked "
        "vector at the ring's k bits per parameter); time: the round's wall time / N"
    )
    parts = ["RESULT privacy_cost"]
    for run in res["runs"]:
        for arm in ARMS[1:]:
            parts.append(f"{arm}_bytes_n{run['clients']}={run['bytes_ratio'][arm]['ratio']:.3f}")
            parts.append(f"{arm}_time_n{run['clients']}={run['time_ratio'][arm]['ratio']:.3f}")
    lines.append(" ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench privacy-cost``: measure each N, print the report, write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench privacy-cost", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients", type=int, nargs="+", default=[10, 100, 1000], help="N (default 10 100 1000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per arm (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds per arm (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="client workers (default 2)")
    parser.add_argument(
        "--complete-up-to", type=int, default=100, help="every pair masks up to this N (default 100)"
    )
    parser.add_argument(
        "--degree", type=int, default=None, help="SecAgg+ degree beyond it (default ⌈3 log2 N⌉)"
    )
    parser.add_argument("--out", default="bench_results/privacy_cost.json", help="JSON path")
    args = parser.parse_args(argv)
    if any(n < 2 or n > 1347 for n in args.clients):
        parser.error("--clients: every N must be in [2, 1347] (digits has 1347 training samples)")
    res = {"name": "privacy_cost", "args": vars(args), "runs": [measure_n(n, args) for n in args.clients]}
    return publish(args.out, res, report(res))


if __name__ == "__main__":
    raise SystemExit(main())
