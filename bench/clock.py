"""``python -m bench clock``: what the simulated clock's bookkeeping costs against a round's wall time.

The reference workload (:data:`bench._common.REFERENCE`: the paper's MLP, 60,000 synthetic MNIST-shaped
samples, one local epoch) at N = 1,000 clients, every client every round, with the clock on: the ``mobile``
profile, phones that come and go (online spells of 30 minutes, offline ones of 10, so that availability is
looked up for every client every round) and a deadline. Each round of each arm is timed whole, and inside
it the clock's own work: planning the round (devices, availability, every client's phases) and charging it
afterwards. The target: the clock's work at most 5 % of a round's wall time (the median of the per-round
ratios). The clock's one-off set-up (drawing the devices, counting the model's FLOPs) is reported apart.

The last line is ``RESULT clock_n<N> ratio=<clock / round> target=0.05``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench._common import publish, reference_config, result_line, rotation, spread, table
from sifl_ray.runner import Simulation

TARGET = 0.05
CLOCK = ("clock.profile=mobile", "mobile.online_min=30", "mobile.offline_min=10", "clock.deadline_s=60")


def _timed(fn: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
    """``fn``, with each call's wall seconds appended to ``into``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)

    return run


def main(argv: list[str] | None = None) -> int:
    """Run the bench (``--help`` lists the options); print the table and the RESULT line, write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench clock", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--n-train", type=int, default=60000)
    parser.add_argument("--n-test", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds measured per arm (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--arms", default="fl,sifl_m2")
    parser.add_argument("--out", default="bench_results/clock.json")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    rounds = args.warmup + args.rounds
    cfg = reference_config(
        args.clients,
        rounds=rounds,
        workers=args.workers,
        n_train=args.n_train,
        n_test=args.n_test,
        extra=[f"arms=[{','.join(arms)}]", "checkpoint.every=0", "backend=ray", *CLOCK],
    )
    start = time.perf_counter()
    sim = Simulation(cfg)
    built = time.perf_counter() - start
    assert sim.clock is not None, "the clock is on"
    clock_s: dict[str, list[float]] = {arm: [] for arm in arms}
    for arm in arms:  # instrument each arm's clock: its planning and its charging, nothing else
        arm_clock = sim.clock.arms[arm]
        arm_clock.plan = _timed(arm_clock.plan, clock_s[arm])  # type: ignore[method-assign]
        arm_clock.record = _timed(arm_clock.record, clock_s[arm])  # type: ignore[method-assign]
    round_s: dict[str, list[float]] = {arm: [] for arm in arms}
    spent: dict[str, list[float]] = {arm: [] for arm in arms}
    try:
        for t in range(rounds):
            for arm in rotation(arms, t):
                before = len(clock_s[arm])
                tic = time.perf_counter()
                sim.play_round(arm, t)
                wall = time.perf_counter() - tic
                if t >= args.warmup:
                    round_s[arm].append(wall)
                    spent[arm].append(sum(clock_s[arm][before:]))
    finally:
        sim.close()
    ratios = {arm: [c / r for c, r in zip(spent[arm], round_s[arm], strict=True)] for arm in arms}
    worst = max(statistics.median(r) for r in ratios.values())
    rows = [
        [
            arm,
            f"{statistics.median(round_s[arm]):.3f}",
            f"{1e3 * statistics.median(spent[arm]):.2f}",
            f"{100 * statistics.median(ratios[arm]):.3f}",
        ]
        for arm in arms
    ]
    name = f"clock_n{args.clients}"
    res = {
        "name": name,
        "args": vars(args),
        "clock": list(CLOCK),
        "round_s": {arm: spread(round_s[arm]) for arm in arms},
        "clock_s": {arm: spread(spent[arm]) for arm in arms},
        "clock_over_round": {arm: spread(ratios[arm]) for arm in arms},
        "ratio": worst,
        "target": TARGET,
        "setup_s": {"simulation_with_clock": built},
        "devices": sim.clock.devices.describe(),
    }
    text = "\n".join(
        [
            f"the clock's bookkeeping at N = {args.clients} ({', '.join(CLOCK)}), "
            f"{args.rounds} rounds per arm",
            table(rows, ["arm", "round s (median)", "clock ms (median)", "clock / round %"]),
            result_line(name, worst, TARGET),
        ]
    )
    return publish(args.out, res, text)


if __name__ == "__main__":
    raise SystemExit(main())
