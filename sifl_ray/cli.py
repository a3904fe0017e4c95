"""``sifl``: run, describe and list scenarios; run the attack suite and the benchmarks.

Configuration problems are printed all at once, one per line with the fix, and exit with code 2 (no
traceback): a user's typo is not a crash. ``--help`` / ``-h`` after any command prints its help
(:data:`USAGE`, :data:`HELP`: plain text, what a terminal shows).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import platform
import re
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import sifl_ray
from sifl_ray.backends import make_backend, starting
from sifl_ray.backends.base import ClusterUnreachable
from sifl_ray.config import (
    SCENARIO_COMMANDS,
    SCENARIO_DIR,
    ConfigError,
    ScenarioKindError,
    load_config,
    load_run_config,
    load_yaml,
    scenario_files,
    scenario_kinds,
)
from sifl_ray.config.help import describe_keys, format_keys, select_keys
from sifl_ray.config.plugins import PluginError, load_plugins
from sifl_ray.preload import import_in_background
from sifl_ray.ray_output import quiet_ray

if TYPE_CHECKING:
    from omegaconf import DictConfig

USAGE = """usage: sifl COMMAND [arguments]      (sifl COMMAND --help for one command; sifl --version)

  sifl run [scenario=NAME] [key=value ...]     run a scenario (the same as: python run.py ...)
  sifl run --resume RUN_DIR                    continue a run from its latest checkpoint
  sifl config [SECTION] [scenario=NAME] [key=value ...]
                                               the configuration keys: value, default, type, allowed, meaning
  sifl describe [scenario=NAME] [key=value ...] [--json] [--frontier]
                                               sizes, precision and privacy figures, without training
  sifl list [FOLDER ...]                       the scenarios: shipped, yours (SIFL_SCENARIOS), a folder's
  sifl attack [scenario=attack_small] [key=value ...]
                                               the attack suite and the DP audit of every arm
  sifl bench NAME [options]                    benchmarks, from a checkout (sifl bench --help)

Overrides are key=value pairs on the scenario's YAML (scenario=NAME, default quickstart, or
scenario=path/to/yours.yaml), e.g.
  python run.py arms=[fl,sifl_m1] train.rounds=5 clients.num_clients=20 output.name=short
Plug-ins (modules that register arms, coding backends, partitioners) are imported first: those named in
SIFL_PLUGINS (comma-separated) and the entry points of the group sifl_ray.plugins.
"""

HELP = {
    "run": """usage: sifl run [scenario=NAME] [key=value ...]
       python run.py [scenario=NAME] [key=value ...]
       sifl run --resume RUN_DIR

Runs a scenario (a name from sifl list, default quickstart, or a path to a .yaml file of yours) with the
overrides given, every arm it lists, logs to TensorBoard (RUN_DIR/tb) and ends with a table, summary.json
and one RESULT line. output.name=NAME names the run: its folder (runs/NAME/<date-time>) and RESULT tag.
  every key, its default and what it means:  sifl config [scenario=NAME]
  the scenarios:                             sifl list
  a run's sizes and privacy figures first:   sifl describe [scenario=NAME]
  continue an interrupted run:               sifl run --resume RUN_DIR
                                             (or the folder above it, runs/NAME: its latest run)
""",
    "config": """usage: sifl config [SECTION | KEY ...] [scenario=NAME] [key=value ...]

Prints every configuration key with its value (the scenario's, with the overrides given), the default, the
type, the allowed values and what it means, read from the schema the validator checks against.
Name sections or keys to see only those:  sifl config train   sifl config coding.noise train.lr
""",
    "describe": """usage: sifl describe [scenario=NAME] [key=value ...] [--json] [--frontier]

Sizes (n, ñ, n'), the predicted coding error against its tolerance and every arm's privacy figures, from
the configuration and freshly made keys, without training. --json: machine-readable; --frontier: the
precision-privacy frontier of the coding.
""",
    "list": """usage: sifl list [FOLDER ...]

The scenarios a run can be given by name: the shipped ones, and yours in the folders SIFL_SCENARIOS names
(separated by ':'; a name there wins over a shipped one), or in the FOLDERs given. Each with the command
that plays it (sifl run or sifl attack), its description (the comment at the top of its file, whole) and
its arms.
""",
}


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_data(cfg: DictConfig) -> None:
    """The data set's pre-flight check (:mod:`sifl_ray.data.preflight`), before Ray: a missing or corrupt
    file is fetched (``data.download``) or is a configuration error (exit code 2)."""
    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data.preflight import check_data

    check_data(cfg, log=_note)


def cmd_run(argv: list[str]) -> int:
    """``sifl run``: validate the configuration and the data before Ray starts (a typo answers at once), then
    run and print the RESULT line."""
    if "--resume" in argv:
        return cmd_resume(argv)
    cfg = load_config(argv)  # validate before the heavy imports: a typo answers at once
    _check_data(cfg)  # and the data set's files before Ray starts

    quiet_ray(cfg)  # before Ray is imported, which reads these switches
    _note(f"[sifl] {starting(str(cfg.backend), cfg.ray.address)}…")  # the first line, before Ray's start
    imports = import_in_background(tensorboard=bool(cfg.output.tensorboard))  # beside Ray's start
    marks = {"backend_start": time.time()}
    try:
        backend = make_backend(cfg)
    except ClusterUnreachable as err:
        return _fail(str(err))
    marks["backend"] = time.time()
    # The first line a run prints: a private Ray instance or a joined cluster, and its size.
    if backend.description:
        print(backend.description, flush=True)
    try:
        imports.join()
        # deferred: numpy, torch, which this module does not load otherwise
        from sifl_ray.coding.precision import PrecisionError

        # deferred: numpy, which this module does not load otherwise
        from sifl_ray.data import DatasetError, IDXFormatError

        # deferred: numpy, which this module does not load otherwise
        from sifl_ray.data.preflight import data_problem
        from sifl_ray.models import ModelError  # deferred: torch, which this module does not load otherwise

        # deferred: numpy, scipy, torch, which this module does not load otherwise
        from sifl_ray.runner import run_scenario, summary_table
    except BaseException:
        backend.shutdown()
        raise
    marks["imports"] = time.time()
    try:
        result = run_scenario(cfg, backend=backend, startup_marks=marks)
    except PrecisionError as err:
        return _fail(str(err))
    except (DatasetError, IDXFormatError) as err:  # what the pre-flight check cannot see: the values
        backend.shutdown()
        raise ConfigError([data_problem(err, cfg)]) from None
    except ModelError as err:  # a user's model that cannot be built or is refused (its buffers)
        backend.shutdown()
        raise ConfigError([str(err)]) from None
    print(summary_table(result.summary))
    print(f"run folder: {result.run_dir} (tensorboard --logdir {result.run_dir / 'tb'})")
    print(result.result_line)
    return 0


def _not_a_run_folder(path: Path) -> str | None:
    """Why ``path`` cannot be a run folder or one of its checkpoints, from what is on disk alone (``None``:
    it may be one; the resume verifies the rest)."""
    if not path.exists():
        return f"{path}: not a run folder (nothing is there)"
    run_dir = path.parent.parent if path.name.startswith("round-") else path
    if not (run_dir / "config.yaml").is_file():
        return f"{run_dir}: not a run folder (no config.yaml)"
    return None


def resume_target(given: str) -> Path:
    """The run ``sifl run --resume`` continues: ``given`` itself (a run folder, or one of its checkpoint
    folders), or, for the folder of a scenario's runs (``runs/quickstart``), its latest run: the run
    folders' names are their start times, so the last in order is the latest."""
    path = Path(given)
    if not path.is_dir() or (path / "config.yaml").is_file() or path.name.startswith("round-"):
        return path
    runs = sorted(p for p in path.iterdir() if (p / "config.yaml").is_file())
    if not runs:
        return path
    _note(f"resuming the latest run in {path}: {runs[-1]}")
    return runs[-1]


def cmd_resume(argv: list[str]) -> int:
    """``sifl run --resume RUN_DIR``: continue a run from its latest checkpoint (or from the checkpoint
    folder ``RUN_DIR/checkpoints/round-NNNNNN`` given instead, or the latest run of a scenario's folder
    ``runs/NAME``). The run keeps its saved configuration."""
    i = argv.index("--resume")
    rest = argv[:i] + argv[i + 2 :]
    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
        return _fail("--resume needs the run folder: sifl run --resume RUN_DIR")
    if rest:
        return _fail(
            f"--resume takes no other arguments (got {' '.join(rest)}): a resumed run keeps the "
            "configuration it started with"
        )
    target = resume_target(argv[i + 1])
    problem = _not_a_run_folder(target)
    if problem is not None:  # answered before the heavy imports below (torch, the runner)
        return _fail(f"cannot resume: {problem}. Nothing was written.")
    run_dir = target.parent.parent if target.name.startswith("round-") else target
    with contextlib.suppress(ConfigError):  # a folder that is no run: open_resume says so below
        quiet_ray(load_run_config(run_dir / "config.yaml"))  # before Ray is imported, as a run does
    # deferred: torch, which this module does not load otherwise
    from sifl_ray.checkpoint import CheckpointError, describe_error

    # deferred: numpy, scipy, torch, which this module does not load otherwise
    from sifl_ray.runner import Simulation, summary_table

    # deferred: numpy, scipy, torch, which this module does not load otherwise
    from sifl_ray.runner.launch import run_to_end

    # deferred: numpy, scipy, torch, which this module does not load otherwise
    from sifl_ray.runner.state import open_resume

    try:
        cfg, run_dir, point = open_resume(target)  # reads files only: no Ray yet
    except CheckpointError as err:
        return _fail(f"cannot resume: {describe_error(err)}. Nothing was written.")
    _check_data(cfg)
    done = point.checkpoint is not None and point.checkpoint.round >= cfg.train.rounds - 1
    if done:
        print(
            f"{run_dir}: finished, all {cfg.train.rounds} rounds (0-{cfg.train.rounds - 1}) were played; "
            f"nothing to resume. Its results: {run_dir / 'summary.json'}"
        )
        return 0
    try:
        sim = Simulation(cfg, run_dir=run_dir, _resume=point)
    except CheckpointError as err:
        return _fail(f"cannot resume: {describe_error(err)}. Nothing was written.")
    except ClusterUnreachable as err:
        return _fail(str(err))
    result = run_to_end(sim)
    print(summary_table(result.summary))
    print(f"run folder: {result.run_dir} (tensorboard --logdir {result.run_dir / 'tb'})")
    print(result.result_line)
    return 0


def cmd_describe(argv: list[str]) -> int:
    """``sifl describe``: the sizes, bounds and ε of a scenario without training (seconds, not a run)."""
    # deferred: numpy, torch, which this module does not load otherwise
    from sifl_ray.describe import describe_needs_data, describe_scenario, format_description

    as_json = "--json" in argv
    frontier = "--frontier" in argv
    rest = [a for a in argv if a not in ("--json", "--frontier")]
    if frontier:
        # deferred: numpy, torch, which this module does not load otherwise
        from sifl_ray.attacks.frontier import frontier_main

        return int(frontier_main(rest) or 0)
    cfg = load_config(rest)
    if describe_needs_data(cfg):  # a non-IID split needs the labels, the user's data its files
        _check_data(cfg)
    info = describe_scenario(cfg)
    print(json.dumps(info, indent=2) if as_json else format_description(info))
    return 0


def cmd_list(argv: list[str]) -> int:
    """``sifl list [FOLDER ...]``: every scenario a run can be given by name (the folders given, those of
    ``SIFL_SCENARIOS``, the shipped ones), the command that plays it, its description (the comment at the
    top of its file, whole, wrapped to the terminal) and its arms; a user's file also shows its path."""
    import shutil
    import textwrap

    folders = [Path(a) for a in argv]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        return _fail(f"sifl list: no folder {', '.join(missing)}; give folders of scenario .yaml files")
    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 110)) - 1

    def wrap(text: str, indent: str = "    ") -> list[str]:
        # a path or command is never cut (a user copies it whole): it overflows its line instead
        return textwrap.wrap(
            text,
            width,
            initial_indent="    ",
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )

    blocks = ["(sifl run scenario=NAME is the same as python run.py scenario=NAME)"]
    kinds = scenario_kinds(*folders)
    for name, path in scenario_files(*folders).items():
        text = path.read_text()
        paragraphs: list[list[str]] = [[]]
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            line = line.lstrip("#").strip()
            if line.startswith("Run:") and paragraphs[-1]:  # a file's own usage line stays a line
                paragraphs.append([])
            paragraphs[-1].append(line)
        mine = path.parent != SCENARIO_DIR
        play = f"scenario={path}" if path.parent in folders else f"scenario={name}"
        lines = [
            name + (f"    (yours: {path})" if mine else ""),
            f"    run: {SCENARIO_COMMANDS.get(kinds[name], kinds[name])} {play}",
        ]
        for paragraph in paragraphs:
            lines += wrap(" ".join(paragraph))
        try:
            data = load_yaml(path) or {}
        except ConfigError as err:
            lines += wrap(f"cannot be read: {err.problems[0]}")
            data = {}
        arms = data.get("arms") if isinstance(data, dict) and isinstance(data.get("arms"), list) else None
        if arms:
            lines += wrap(f"arms: {', '.join(map(str, arms))}", "      ")
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks))
    return 0


def cmd_attack(argv: list[str]) -> int:
    """``sifl attack``: the attack suite; imported on demand (it pulls in the recorder and the
    adversaries)."""
    # deferred: numpy, torch, which this module does not load otherwise
    from sifl_ray.attacks.cli import attack_main

    return int(attack_main(argv) or 0)


def cmd_bench(argv: list[str]) -> int:
    """``sifl bench``: the same benchmarks as ``python -m bench``, which live beside the package in a
    checkout (they are not installed: a benchmark measures this repository's code on this machine)."""
    checkout = Path(sifl_ray.__file__).resolve().parent.parent
    if (checkout / "bench" / "__main__.py").is_file() and str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        bench = importlib.import_module("bench.__main__")
    except ModuleNotFoundError:
        return _fail(
            f"sifl bench: the benchmarks run from a checkout of the repository (python -m bench NAME there); "
            f"this sifl-ray is installed in {checkout}, without them"
        )
    return int(bench.main(argv) or 0)


def cmd_config(argv: list[str]) -> int:
    """``sifl config [SECTION|KEY ...] [key=value ...]``: the keys of the resolved configuration, all or
    those of the sections and keys named (:mod:`sifl_ray.config.help`)."""
    wanted, overrides, depth = [], [], 0
    for arg in argv:
        # a name outside any override's brackets (``arms=[fl, sifl_m1]`` reaches us as two items)
        if depth == 0 and "=" not in arg and re.fullmatch(r"[A-Za-z_][\w.]*", arg):
            wanted.append(arg)
        else:
            overrides.append(arg)
            depth += arg.count("[") + arg.count("{") - arg.count("]") - arg.count("}")
    keys = describe_keys(load_config(overrides))
    print(format_keys(select_keys(keys, wanted)))
    return 0


COMMANDS = {
    "run": cmd_run,
    "config": cmd_config,
    "describe": cmd_describe,
    "list": cmd_list,
    "attack": cmd_attack,
    "bench": cmd_bench,
}


def working_folder_importable() -> None:
    """Make the working folder importable, as ``python -m`` and Flower's ``flwr run`` do: a model, a data
    loader or a plug-in in ``./mynet.py`` is ``train.model=mynet:tiny``, without PYTHONPATH. Appended, not
    put first: a file of the working folder never shadows an installed package. Ray's workers get the
    driver's working folder on their path too."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def version_line() -> str:
    """``sifl --version``: the version, where the package was imported from (a checkout or an install: the
    first question about an odd result) and the Python running it."""
    where = Path(sifl_ray.__file__).resolve().parent
    return f"sifl-ray {sifl_ray.__version__} from {where} (Python {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    """The ``sifl`` command: dispatch to a sub-command; configuration errors exit 2 with every problem
    listed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        print(version_line())
        return 0
    command, rest = argv[0], argv[1:]
    if command in HELP and any(a in ("-h", "--help") for a in rest):
        print(HELP[command])
        return 0
    if command == "attack" and any(a in ("-h", "--help") for a in rest):
        # deferred: numpy, torch, which this module does not load otherwise
        from sifl_ray.attacks.cli import USAGE as ATTACK_USAGE

        print(ATTACK_USAGE)
        return 0
    if command not in COMMANDS:
        if "=" in command:  # `sifl scenario=quickstart` reads as `sifl run scenario=quickstart`
            command, rest = "run", argv
        else:
            return _fail(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
    working_folder_importable()
    try:
        load_plugins()  # arms, coding backends, partitioners the user registers (sifl_ray.config.plugins)
        return COMMANDS[command](rest)
    except (PluginError, ScenarioKindError) as err:
        return _fail(str(err))
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # a run's Interrupted says what was saved and how to resume
        print(str(err) or "interrupted", file=sys.stderr)
        return 130


def entry(argv: list[str] | None = None) -> int:
    """:func:`main` as a program (``python run.py``, ``sifl``, ``python -m sifl_ray.cli``), not as a library.

    At exit the interpreter tears down every module torch and Ray loaded and runs their libraries' static
    destructors, after the run has written, closed and printed everything: 0.11 s of a quickstart's end here
    (``python -m bench startup`` measures a run's end; a bare ``import torch, ray`` takes 0.4 s to exit). So
    the program does what the exit does first (waits for its threads, runs the atexit handlers: Ray's,
    logging's, a coverage tool's), flushes its output and ends the process there (``os._exit``). Only
    here: a process that goes on (tests call :func:`main`) keeps its modules.

    Output piped into a reader that stops early (``sifl config | head``) ends the program quietly, as a
    Unix tool does, instead of with a ``BrokenPipeError`` traceback.
    """
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more reaches the pipe
        return 141  # 128 + SIGPIPE, what a shell reports for a program stopped by its reader
    for thread in threading.enumerate():  # what the interpreter's exit does first: wait for the threads
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # then the atexit handlers
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(entry())
