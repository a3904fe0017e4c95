"""``sifl attack [scenario=attack_small] [arms=[sifl_m1,sifl_m2]] [key=value ...] [out_dir=PATH]``: run the
attack suite.

Loads the scenario (of kind ``attack``) over :class:`~sifl_ray.attacks.config.AttackConfig`, applies the
overrides, plays every arm of ``arms`` (any registered arm: ``fl``, ``sifl_m1``, ``sifl_m2``, ``nbafl``,
yours) through the platform's own parties with every channel recorded (an m1 arm once per key design), runs
the adversaries on what each party saw, and writes ``result.json``, ``report.md``, TensorBoard text and the
recorded transcripts to ``out_dir`` (default ``runs/attack/<scenario>/<timestamp>/``). The table printed
names the arms attacked; the last line printed is the RESULT line
(:func:`sifl_ray.attacks.report.result_line`; ``none`` for a figure of an arm not attacked).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sifl_ray.attacks.config import load_attack_config
from sifl_ray.config import ConfigError
from sifl_ray.progress import Progress

#: ``sifl attack --help``: plain text, what a terminal shows (the module's docstring is for the API docs).
USAGE = """usage: sifl attack [scenario=attack_small] [arms=[sifl_m1,sifl_m2]] [key=value ...] [out_dir=PATH]

Runs the attack suite: plays every arm of arms (any registered arm: fl, sifl_m1, sifl_m2, nbafl, yours)
through the platform's own parties on the scenario's small task, records every channel (an m1 arm once per
key design), runs the adversaries on what each party saw, and audits each arm's DP claim. Writes
result.json, report.md, TensorBoard text and the recorded transcripts to out_dir (default
runs/attack/<scenario>/<date-time>/); prints a table of the arms attacked and, last, one RESULT line
(none for a figure of an arm not attacked).
  the attack scenarios (kind: attack):  sifl list
  what each attack measures:            docs/attacks.md
"""


def attack_main(argv: list[str] | None = None) -> int:
    """Entry point of ``sifl attack``; returns the exit code (2 for configuration problems)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(USAGE)
        return 0

    try:
        cfg = load_attack_config(argv)
        # deferred: scipy, which this module does not load otherwise
        from sifl_ray.attacks.suite import attacked_arms

        attacked_arms(cfg)  # the platform configuration the arms read (arm_config) is valid
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.attacks.report import audit_result_line, result_line, write_all

    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.attacks.report_console import summary_table

    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.attacks.suite import run_suite, suite_steps

    out_dir = (
        Path(cfg.out_dir)
        if cfg.out_dir
        else Path("runs") / "attack" / cfg.scenario / time.strftime("%Y%m%d-%H%M%S")
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    with Progress(f"attack {cfg.scenario}", total=suite_steps(cfg)) as progress:  # on stderr
        result = run_suite(cfg, transcript_dir=out_dir / "transcripts", log=progress.step)
    paths = write_all(result, out_dir)
    print(summary_table(result))
    print(f"\nwritten: {paths['json']}, {paths['markdown']}, TensorBoard: {paths['tensorboard']}")
    audit = audit_result_line(result)
    if audit is not None:
        print(audit)
    print(result_line(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(attack_main())
