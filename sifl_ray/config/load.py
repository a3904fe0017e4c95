"""A run's configuration: the scenario over the schema's defaults, ``key=value`` overrides over that,
validated once, then read-only.

Why one loader: every entry point (``run.py``, ``sifl run``, ``sifl describe``, benchmarks, tests, the
attack suite's arms) must read the same schema and report problems the same way. The schema is
:class:`~sifl_ray.config.schema.ScenarioConfig` and every section a registered component declares (an
arm's ``nbafl``, a partitioner's ``dirichlet``, a data set's ``synthetic``, a plug-in's); the validator
(:func:`~sifl_ray.config.validation.validate`) collects *every* problem (a renamed key with its new name,
unknown keys with a suggestion, wrong types, values out of range, unknown choices, then the cross-field
checks of :mod:`sifl_ray.config.checks`) and raises them at once as a :class:`ConfigError`. What a
party's process needs of the result, it receives as a frozen value (:mod:`sifl_ray.specs`), not as a dict
read by string key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf

from sifl_ray.config.checks import cross_checks, fault_checks
from sifl_ray.config.components import DATASETS, load_components
from sifl_ray.config.scenarios import read_scenario, scenario_kinds, scenario_path, yaml_problem
from sifl_ray.config.schema import ScenarioConfig
from sifl_ray.config.sections import SectionError, owners, sections
from sifl_ray.config.validation import ConfigError, Rules, parse_overrides, refuse_renamed, set_path, validate

#: The run schema's rules beyond its fields': how to write an item of a list of sections.
RULES = Rules(examples={"faults.inject": "[{kind: worker_exit, worker: 0, round: 1}]"})


def _path_key(raw: Mapping[str, Any]) -> str:
    """Where an old ``data.path`` goes: the ``path`` of the data set the scenario names, if its section has
    one (``leaf.path``), else the file data set's (``arrays.path``)."""
    data = raw.get("data")
    name = data.get("name") if isinstance(data, dict) else None
    settings = DATASETS.settings(name) if isinstance(name, str) and name in DATASETS else None
    has_path = settings is not None and "path" in {f.name for f in dataclasses.fields(settings)}
    return f"{name}.path" if has_path else "arrays.path"


def _backend_key(raw: Mapping[str, Any]) -> str:
    """``ray.backend`` became the top-level ``backend`` (what hosts the parties, Ray or not), and its
    in-process value ``sequential`` is ``local``."""
    ray = raw.get("ray")
    if isinstance(ray, dict) and ray.get("backend") == "sequential":
        ray["backend"] = "local"
    return "backend"


#: Keys that moved into the section of the component that reads them: refused with their new name.
RENAMED: dict[str, Any] = {
    "data.dirichlet_alpha": "dirichlet.alpha",
    "data.shards_per_client": "shards.per_client",
    "data.n_train": "synthetic.n_train",
    "data.n_test": "synthetic.n_test",
    "data.path": _path_key,
    "data.test_path": "leaf.test_path",
}


def load_config(
    overrides: list[str] | None = None,
    *,
    scenario: str | None = None,
    sections: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> DictConfig:
    """Build the validated, read-only configuration.

    Args:
        overrides: ``key=value`` strings (dotted keys; YAML values), applied over the scenario.
            ``scenario=NAME`` picks the scenario of that name (shipped, or in a folder of
            ``SIFL_SCENARIOS``); a path to a ``.yaml`` file also works.
        scenario: the scenario if not given in ``overrides`` (default ``quickstart``).
        sections: a scenario given as a mapping of sections (what a scenario file holds) instead of a
            file (:func:`sifl_ray.api.simulate`); ``scenario`` names it (default ``custom``).
        settings: dotted key → value (Python values, not YAML text), applied last.

    Raises:
        ConfigError: every problem found, each with its key, expectation and fix.
    """
    parsed, problems = parse_overrides(overrides or [], noun="override", example="train.rounds=5")
    for key, value in parsed:
        if key == "scenario":
            scenario = str(value)
    raw: dict[str, Any] = {}
    if sections is not None:
        raw = copy.deepcopy(dict(sections))
        raw["scenario"] = scenario or str(raw.get("scenario", "custom"))
    else:
        scenario = scenario or "quickstart"
        path = scenario_path(scenario)
        if not path.is_file():
            names = [name for name, kind in scenario_kinds().items() if kind == "run"]
            close = difflib.get_close_matches(scenario, names, n=1)
            tip = f"did you mean {close[0]}? " if close else ""
            problems.append(
                f"scenario: no scenario {scenario!r} ({path}); {tip}available: {', '.join(names)} "
                "(sifl list: what each is for)"
            )
        else:
            raw = read_scenario(path, "run", problems)
        raw["scenario"] = path.stem if path.is_file() else scenario
    for key, value in [*parsed, *(settings or {}).items()]:
        if key != "scenario":
            set_path(raw, key, value)
    return _validated(raw, problems)


def load_run_config(path: str | Path) -> DictConfig:
    """The resolved configuration a run saved (``<run_dir>/config.yaml``), validated again (for resume).

    Raises:
        ConfigError: the file is missing, not YAML, or no longer valid.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: missing; is this a run folder (made by sifl run)?"]) from None
    except yaml.YAMLError as err:
        raise ConfigError([yaml_problem(path, err)]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{path}: expected a mapping of sections, got {type(raw).__name__}"])
    return _validated(raw, [])


def scenario_schema() -> type:
    """The schema a run's configuration is validated against: :class:`ScenarioConfig` and every section a
    registered component declares (:mod:`sifl_ray.config.sections`), read when called, so a component
    registered at run time is a key.

    Raises:
        SectionError: a declared section takes the name of one of :class:`ScenarioConfig`'s.
    """
    load_components()
    return _schema(tuple(sections().items()))


@functools.lru_cache(maxsize=16)
def _schema(declared: tuple[tuple[str, type], ...]) -> type:
    core = {f.name for f in dataclasses.fields(ScenarioConfig)}
    for name, _ in declared:
        if name in core:
            raise SectionError(
                f"{', '.join(owners(name))}: section {name!r} is a section of the platform's own "
                "configuration; give the component's section another name"
            )
    return dataclasses.make_dataclass(
        "ScenarioConfig",
        [(name, schema, dataclasses.field(default_factory=schema)) for name, schema in declared],
        bases=(ScenarioConfig,),
    )


def _validated(raw: dict[str, Any], problems: list[str]) -> DictConfig:
    """``raw`` validated against :func:`scenario_schema`, as a plain read-only configuration.

    Why not the structured object the validator returns: its class is made for this set of sections and
    cannot be pickled by name (a process started by ``multiprocessing``, a deep copy of a result); the
    values are the same, and struct mode keeps a misspelt key an error on read, as in the structured one.
    """
    if os.environ.get("RAY_ADDRESS") and not (raw.get("ray") or {}).get("address"):
        set_path(raw, "ray.address", os.environ["RAY_ADDRESS"])
    refuse_renamed(raw, RENAMED, problems, why="the section of the component that reads it")
    refuse_renamed(raw, {"ray.backend": _backend_key}, problems, why="what hosts the parties, Ray or not")
    checked = validate(
        scenario_schema(), raw, RULES, cross_checks=(cross_checks, fault_checks), problems=problems
    )
    cfg = OmegaConf.create(cast(dict[str, Any], OmegaConf.to_container(checked)))
    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved configuration as YAML (for TensorBoard text and ``config.yaml`` in the run folder)."""
    return OmegaConf.to_yaml(cfg)
