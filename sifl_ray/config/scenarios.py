"""The bundled scenarios (``scenarios/*.yaml``): where they are, which command plays each, how one is read.

Why a declared kind: the attack suite and a run read different sections, so a scenario given to the wrong
command would answer with a dozen "unknown key" lines about a shipped file; with its kind declared it
answers with the one command that plays it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sifl_ray.config.validation import ConfigError

SCENARIO_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"


def scenario_names() -> list[str]:
    """Names of the bundled scenarios (``scenarios/*.yaml``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


#: The commands that play a scenario, by the scenario file's top-level ``kind`` key (a file without one is
#: of the kind of the command reading it).
SCENARIO_COMMANDS: dict[str, str] = {"run": "sifl run", "attack": "sifl attack"}


class ScenarioKindError(ConfigError):
    """A scenario made for another command: one line, naming the command that plays it (exit code 2)."""

    def __init__(self, problem: str):
        self.problems = [problem]
        ValueError.__init__(self, problem)  # one line, not ConfigError's list


def scenario_kinds() -> dict[str, str]:
    """``name → kind`` of every bundled scenario (``run`` where a file declares none)."""
    kinds = {}
    for name in scenario_names():
        data = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text())
        kinds[name] = str(data.get("kind", "run")) if isinstance(data, dict) else "run"
    return kinds


def scenario_path(scenario: str) -> Path:
    """The file of ``scenario``: a path to a ``.yaml`` file, else ``scenarios/<scenario>.yaml``."""
    return Path(scenario) if scenario.endswith((".yaml", ".yml")) else SCENARIO_DIR / f"{scenario}.yaml"


def read_scenario(path: Path, kind: str, problems: list[str]) -> dict[str, Any]:
    """The sections of the scenario file at ``path`` (which exists), for the command of ``kind``, without
    its ``kind`` key; a file that is not a mapping is a problem appended to ``problems``.

    Raises:
        ScenarioKindError: the file declares another kind: the command to use instead, alone (its keys are
            another schema's, and a list of them would only hide the fix).
    """
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        problems.append(f"scenario: {path} must contain a mapping of sections, got {type(loaded).__name__}")
        return {}
    declared = loaded.pop("kind", kind)
    if declared not in SCENARIO_COMMANDS:
        problems.append(
            f"kind: expected one of {', '.join(SCENARIO_COMMANDS)}, got {declared!r} in {path}; "
            "set it to the command the scenario is for"
        )
    elif declared != kind:
        name = path.stem if path.parent == SCENARIO_DIR else str(path)
        also = f" (or python run.py scenario={name})" if declared == "run" else ""
        raise ScenarioKindError(
            f"scenario {name} is for {SCENARIO_COMMANDS[declared]} (kind: {declared} in {path.name}), not "
            f"this command; run: {SCENARIO_COMMANDS[declared]} scenario={name}{also}"
        )
    return loaded
