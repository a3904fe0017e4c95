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

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import ARMS, Arm, register_arm
from sifl_ray.backends import make_backend
from sifl_ray.config import load_config
from sifl_ray.config.plugins import load_plugins
from sifl_ray.config.validation import ConfigError
from sifl_ray.ray_output import quiet_ray

if TYPE_CHECKING:
    import pandas

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
    """

    run_dir: Path
    summary: dict[str, Any]
    history: dict[str, list[dict[str, Any]]]
    result_line: str
    config: DictConfig = field(repr=False)

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


def simulate(
    scenario: Scenario = "quickstart",
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    *,
    arms: Sequence[str | Arm] | None = None,
    backend: str | None = None,
) -> SimulationResult:
    """Validate a configuration, play every arm of it to the end, and return the run as data.

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
    if backend is not None:
        settings["backend"] = backend
    cfg = _config(scenario, texts, settings)
    return _run(cfg)


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


def _run(cfg: DictConfig) -> SimulationResult:
    """Play ``cfg`` as ``sifl run`` does: the data set checked, then the backend, then the runner."""
    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data.preflight import check_data

    check_data(cfg)
    quiet_ray(cfg)  # before Ray is imported, which reads these switches
    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data import DatasetError, IDXFormatError

    # deferred: numpy, which this module does not load otherwise
    from sifl_ray.data.preflight import data_problem

    # deferred: numpy, scipy, torch, which this module does not load otherwise
    from sifl_ray.runner import run_scenario

    marks = {"backend_start": time.time()}
    backend = make_backend(cfg)
    marks["backend"] = time.time()
    try:
        got = run_scenario(cfg, backend=backend, startup_marks=marks)
    except (DatasetError, IDXFormatError) as err:  # what the pre-flight check cannot see: the values
        raise ConfigError([data_problem(err, cfg)]) from None
    finally:
        backend.shutdown()  # a no-op once the run closed it; Ray is stopped only if this call started it
    return SimulationResult(
        run_dir=got.run_dir,
        summary=got.summary,
        history={arm: [dict(record) for record in records] for arm, records in got.history.items()},
        result_line=got.result_line,
        config=cfg,
    )
