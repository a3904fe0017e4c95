"""Configuration: a typed schema, YAML scenarios, ``key=value`` overrides, validated once, then read-only.

One package, one module per concern:

- :mod:`~sifl_ray.config.schema`: the platform's sections, each key with its type, default, rule and
  meaning (the sections the attack suite and the frontier share with runs, too);
- :mod:`~sifl_ray.config.validation`: the one validator every schema uses (every problem at once, each
  naming the key, what was expected, what arrived and the fix; exit code 2 at the command line);
- :mod:`~sifl_ray.config.sections`: the sections components declare (an arm's, a partitioner's, a data
  set's, a model's, a plug-in's);
- :mod:`~sifl_ray.config.registry`: the one registry helper every registry is made of;
- :mod:`~sifl_ray.config.names`: the registries behind torch, declared by name and import path, and the
  method's fixed choices, so that validation never loads torch;
- :mod:`~sifl_ray.config.checks`: what spans several keys;
- :mod:`~sifl_ray.config.load`: a run's configuration, from scenario and overrides;
- :mod:`~sifl_ray.config.scenarios`: the shipped scenarios and a user's, and which command plays each;
- :mod:`~sifl_ray.config.help`: ``sifl config``, every key with its value, default, type, choices, meaning;
- :mod:`~sifl_ray.config.import_paths` and :mod:`~sifl_ray.config.plugins`: a user's own code, named by
  import path or loaded before the configuration is read.

The package imports neither torch nor the components: the arms, data sets and partitioners import it for
their settings' rules, and are imported by :func:`load_config` when it builds the schema.
"""

from __future__ import annotations

from sifl_ray.config.components import arm_names
from sifl_ray.config.import_paths import ImportPathError, import_object, is_import_path
from sifl_ray.config.load import RENAMED, RULES, load_config, load_run_config, scenario_schema, to_yaml
from sifl_ray.config.plugins import PluginError, load_plugins
from sifl_ray.config.registry import Registry, RegistryError
from sifl_ray.config.scenarios import (
    SCENARIO_COMMANDS,
    SCENARIO_DIR,
    USER_SCENARIOS,
    ScenarioKindError,
    load_yaml,
    read_scenario,
    scenario_files,
    scenario_kinds,
    scenario_names,
    scenario_path,
)
from sifl_ray.config.schema import (
    DEFAULT_ARMS,
    ClientsConfig,
    CodingConfig,
    DataConfig,
    PrivacyConfig,
    ScenarioConfig,
    TrainConfig,
)
from sifl_ray.config.sections import SectionError
from sifl_ray.config.validation import (
    AT_LEAST_1,
    NONNEG,
    POSITIVE,
    PROBABILITY,
    Choice,
    ConfigError,
    Range,
    Rules,
    parse_overrides,
    set_path,
    setting,
    validate,
)

__all__ = [
    "AT_LEAST_1",
    "DEFAULT_ARMS",
    "NONNEG",
    "POSITIVE",
    "PROBABILITY",
    "RENAMED",
    "RULES",
    "SCENARIO_COMMANDS",
    "SCENARIO_DIR",
    "USER_SCENARIOS",
    "Choice",
    "ClientsConfig",
    "CodingConfig",
    "ConfigError",
    "DataConfig",
    "ImportPathError",
    "PluginError",
    "PrivacyConfig",
    "Range",
    "Registry",
    "RegistryError",
    "Rules",
    "ScenarioConfig",
    "ScenarioKindError",
    "SectionError",
    "TrainConfig",
    "arm_names",
    "import_object",
    "is_import_path",
    "load_config",
    "load_plugins",
    "load_run_config",
    "load_yaml",
    "parse_overrides",
    "read_scenario",
    "scenario_files",
    "scenario_kinds",
    "scenario_names",
    "scenario_path",
    "scenario_schema",
    "set_path",
    "setting",
    "to_yaml",
    "validate",
]
