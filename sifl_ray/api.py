"""Run a simulation from Python: ``simulate("quickstart", {"train.rounds": 3})`` returns the run as data.

Why a function beside the command line: a notebook, a sweep script or a test wants the per-round history of
every arm as a table, and wants a configuration problem as an exception it can catch, not as text on stderr
and an exit code. The path is the command line's (``sifl run``): the same loader and validator
(:func:`sifl_ray.config.load_config`), the same pre-flight check of the data set, the same backend (Ray, or
in-process with ``backend=local``) and the same runner (:func:`sifl_ray.runner.run_scenario`), so a
run started here writes the same run folder, TensorBoard logs and ``summary.json`` as ``sifl run``.

Nothing here imports torch or Ray until the configuration is valid: a typo costs no start-up.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import ARMS, Arm, register_arm
from sifl_ray.backends import BACKENDS, Backend, starting
from sifl_ray.canvas import Drawing
from sifl_ray.config import load_config
from sifl_ray.config.plugins import load_plugins
from sifl_ray.config.validation import ConfigError
from sifl_ray.preload import import_in_background
from sifl_ray.ray_output import private_switches, quiet_ray

if TYPE_CHECKING:
    import pandas

    from sifl_ray.runner.hosts import WarmHosts

#: What :func:`simulate` takes as a configuration: a scenario name (``quickstart``), a path to a scenario
#: file, a mapping of sections (a whole scenario written in Python), or a configuration already loaded.
Scenario = str | Path | Mapping[str, Any] | DictConfig


@dataclass(frozen=True)
class SimulationResult:
    """A finished run, as data.

    Attributes:
        run_dir: the run folder (``config.yaml``, ``summary.json``, TensorBoard logs under ``tb/``).
        summary: what ``summary.json`` holds (per arm: final accuracy, privacy figures, timings, ...).
        history: per arm, one record per round (``round``, ``test_accuracy``, ``train_loss``,
            ``clients/clipped``, ``time/round``, the privacy releases, ...), in the order played.
        result_line: the ``RESULT`` line ``sifl run`` prints last.
        config: the validated configuration the run played.
        drawing: the run's figures, drawn in a background thread while the next run plays; read them
            through :attr:`plots`, which waits for them (``None``: ``output.plot=false``).
    """

    run_dir: Path
    summary: dict[str, Any]
    history: dict[str, list[dict[str, Any]]]
    result_line: str
    config: DictConfig = field(repr=False)
    drawing: Drawing | None = field(default=None, repr=False, compare=False)

    @property
    def plots(self) -> list[Path]:
        """The run's figures (PNG paths in :attr:`run_dir`), once written: waits for the background
        thread that draws them (at once, if it still waits for a next run), and raises what it raised.
        Empty with ``output.plot=false``."""
        return [] if self.drawing is None else self.drawing.wait()

    @property
    def arms(self) -> list[str]:
        """The arms the run played (concrete names: ``nbafl_eps1``, ...), in the scenario's order."""
        return list(self.history)

    def rows(self) -> list[dict[str, Any]]:
        """Every arm's every round as one flat list of records, each with its ``arm``: the long table a
        DataFrame is made of (``pandas.DataFrame(result.rows())``). A metric an arm does not report (a coded
        arm's ``max_deviation`` in an ``fl`` row) is absent from its record."""
        return [{"arm": arm, **record} for arm, records in self.history.items() for record in records]

    def columns(self) -> dict[str, list[Any]]:
        """:meth:`rows` as columns (``name → values``), ``None`` where a row lacks the metric; the shape
        ``pandas.DataFrame``, ``polars.DataFrame`` and plotting libraries take directly."""
        rows = self.rows()
        names = list(dict.fromkeys(name for row in rows for name in row))
        return {name: [row.get(name) for row in rows] for name in names}

    def to_pandas(self) -> pandas.DataFrame:
        """:meth:`rows` as a ``pandas.DataFrame`` (pandas is optional: imported here only).

        Raises:
            ImportError: pandas is not installed (``pip install pandas``; :meth:`columns` needs nothing).
        """
        import pandas

        return pandas.DataFrame(self.rows())


class Session:
    """One backend and its warm hosts for many runs: ``with Session(backend="ray") as s: s.simulate(...)``.

    The backend starts once (a private Ray instance, sized as given); each run takes the hosts the runs
    before it left, started again from its own arguments (:mod:`sifl_ray.runner.hosts`), so a run after the
    first pays neither Ray's start nor a process per party, and its numbers are a fresh run's bit for bit.

    Args:
        backend: ``"ray"`` or ``"local"`` (or a backend registered by a plug-in).
        num_cpus / num_gpus: the size of a private Ray instance (default: the machine's).
        address: a Ray cluster to join instead (as ``ray.address``).
    """

    def __init__(
        self,
        backend: str = "ray",
        *,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        address: str | None = None,
    ) -> None:
        self.kind = backend
        options = {k: v for k, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus)) if v is not None}
        print(f"[sifl] {starting(backend, address, num_cpus)}…", file=sys.stderr, flush=True)
        if "ray" not in sys.modules:  # Ray reads its switches when imported
            for key, value in private_switches(address).items():
                os.environ.setdefault(key, value)
        imports = import_in_background()  # torch and the runner, beside the backend's start
        self.backend: Backend = BACKENDS[backend].from_config(_Address(address), **options)
        if self.backend.description:
            print(self.backend.description, flush=True)
        imports.join()
        # deferred: torch, which a host's module loads (a session runs parties anyway)
        from sifl_ray.runner.hosts import WarmHosts

        self.hosts: WarmHosts = WarmHosts(self.backend)  # the hosts of the runs so far, by shape
        self.closed = False

    @classmethod
    def around(cls, hosts: WarmHosts, kind: str) -> Session:
        """A session on warm hosts someone else keeps (and closes): closing it closes nothing."""
        session = cls.__new__(cls)
        session.kind, session.backend, session.hosts, session.closed = kind, hosts.backend, hosts, True
        return session

    def simulate(
        self,
        scenario: Scenario = "quickstart",
        overrides: Mapping[str, Any] | Iterable[str] | None = None,
        *,
        arms: Sequence[str | Arm] | None = None,
    ) -> SimulationResult:
        """:func:`simulate` on this session's backend and warm hosts."""
        return simulate(scenario, overrides, arms=arms, session=self)

    def close(self) -> None:
        """Stop the warm hosts and the backend (the Ray instance the session started), once the last run's
        figures are written (the caller may remove its folder next). Once."""
        if self.closed:
            return
        self.closed = True
        Drawing.settle()
        self.hosts.stop()
        self.backend.shutdown()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Ray:
    address: str | None


@dataclass(frozen=True)
class _Address:
    """What a backend's ``from_config`` reads of a configuration (``cfg.ray.address``), for a session that
    has no configuration yet."""

    address: str | None

    @property
    def ray(self) -> _Ray:
        return _Ray(self.address)


_SHARED: dict[tuple[str, str | None], Session] = {}


def shared(backend: str, address: str | None = None) -> Session:
    """The module-level session of ``backend`` (at ``address``, a cluster) that :func:`simulate` reuses
    call after call: made on first use, closed when the interpreter exits (or by :func:`close_shared`).
    Where a caller made default warm hosts for the backend (a test suite's), the session is theirs."""
    # Default warm hosts are set through sifl_ray.runner.hosts (use_default): where that module was never
    # imported there are none, and importing it here (torch, the runner) would delay the session's first
    # line by a second.
    registry = sys.modules.get("sifl_ray.runner.hosts")
    hosts = None if registry is None else registry.default_hosts(backend)
    if hosts is not None:
        return Session.around(hosts, backend)
    session = _SHARED.get((backend, address))
    if session is None or session.closed:
        session = _SHARED[(backend, address)] = Session(backend, address=address)
    return session


def close_shared() -> None:
    """Close every module-level session (at the interpreter's exit; tests that want a fresh start)."""
    for session in list(_SHARED.values()):
        session.close()
    _SHARED.clear()


atexit.register(close_shared)


def simulate(
    scenario: Scenario = "quickstart",
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    *,
    arms: Sequence[str | Arm] | None = None,
    backend: str | None = None,
    session: Session | None = None,
) -> SimulationResult:
    """Validate a configuration, play every arm of it to the end, and return the run as data.

    A run plays on a session (:class:`Session`): the one given, else a module-level session of the
    configuration's backend that every call of this function reuses, so that a sweep pays for Ray's start
    and the parties' processes once (:func:`shared`; its Ray instance lives until the interpreter exits or
    :func:`close_shared`).

    Args:
        scenario: a bundled scenario's name, a path to a scenario ``.yaml``, a mapping of sections (the
            same keys as a scenario file), or a configuration :func:`sifl_ray.config.load_config` made.
        overrides: ``{"train.rounds": 3}`` (dotted key → value) or ``["train.rounds=3"]`` (the command
            line's ``key=value`` strings), applied over the scenario.
        arms: the arms to run, instead of the scenario's: registered names (``"fl"``, ``"nbafl"``) or
            :class:`~sifl_ray.arms.Arm` objects, which are registered under their ``kind`` first (replacing
            an arm of that kind: re-running a notebook cell that redefines an arm takes the new one).
        backend: ``"ray"`` or ``"local"`` (in-process, the same parties and numbers), instead of the
            scenario's ``backend``.
        session: the session to play on (its backend, instead of the scenario's).

    Returns:
        The run folder, the summary and every arm's per-round history (:class:`SimulationResult`).

    Raises:
        ConfigError: every problem of the configuration at once (``err.problems``: one line each, naming
            the key, what was expected and the fix), the same as ``sifl run`` prints with exit code 2.
        SiflError: the run could not go on (a precision refused, a cluster unreachable, a party lost
            beyond its restores); the message says why.
    """
    load_plugins()  # the plug-ins SIFL_PLUGINS and the entry points name, as the command line does
    names = None if arms is None else [_registered(arm) for arm in arms]
    settings: dict[str, Any] = dict(overrides) if isinstance(overrides, Mapping) else {}
    texts: list[str] = [] if overrides is None or isinstance(overrides, Mapping) else list(overrides)
    if names is not None:
        settings["arms"] = names
    if session is not None:
        backend = session.kind
    if backend is not None:
        settings["backend"] = backend
    cfg = _config(scenario, texts, settings)
    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data.preflight import check_data

    check_data(cfg)  # the data set's files, before any backend starts: a missing one answers at once
    quiet_ray(cfg)  # before a session's backend imports Ray, which reads these switches
    return _run(cfg, session or shared(str(cfg.backend), cfg.ray.address))


def _registered(arm: str | Arm) -> str:
    """The name to list in ``arms`` for ``arm`` (an :class:`Arm` object is registered first)."""
    if isinstance(arm, Arm):
        if ARMS.get(arm.kind) is not arm:
            register_arm(arm, replace=True)
        return arm.kind
    return arm


def _config(scenario: Scenario, texts: list[str], settings: dict[str, Any]) -> DictConfig:
    """The validated configuration of ``scenario`` with the overrides (the loader's own path)."""
    if isinstance(scenario, DictConfig):
        scenario = OmegaConf.to_container(scenario)  # validated again with the overrides on top
    if isinstance(scenario, Mapping):
        return load_config(texts, sections=scenario, settings=settings)
    return load_config(texts, scenario=str(scenario), settings=settings)


def _run(cfg: DictConfig, session: Session) -> SimulationResult:
    """Play ``cfg`` as ``sifl run`` does (its data set checked already) on ``session``."""
    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data import DatasetError, IDXFormatError

    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data.preflight import data_problem

    # deferred: numpy, scipy, torch, which this module does not load otherwise
    from sifl_ray.runner import run_scenario

    try:
        marks = {"backend_start": time.time()}
        got = run_scenario(cfg, hosts=session.hosts, startup_marks=marks, draw_later=True)
    except (DatasetError, IDXFormatError) as err:  # what the pre-flight check cannot see: the values
        raise ConfigError([data_problem(err, cfg)]) from None
    return SimulationResult(
        run_dir=got.run_dir,
        summary=got.summary,
        history={arm: [dict(record) for record in records] for arm, records in got.history.items()},
        result_line=got.result_line,
        config=cfg,
        drawing=got.drawing,
    )
