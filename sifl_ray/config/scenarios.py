"""The scenarios: the shipped ones (``sifl_ray/scenarios/*.yaml``, package data), a user's own (a file path,
or the folders named in ``SIFL_SCENARIOS``), which command plays each, and how one is read.

Why a declared kind: the attack suite and a run read different sections, so a scenario given to the wrong
command would answer with a dozen "unknown key" lines about a shipped file; with its kind declared it
answers with the one command that plays it.

Why the file, line and column in a YAML error: a scenario of one's own is edited by hand, and a bracket left
open or a tab answers with the place to fix, as a compiler does, not with the parser's traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sifl_ray.config.validation import ConfigError

#: The shipped scenarios, installed with the package (``pip install`` puts them beside the code).
SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"

#: The environment variable naming a user's folders of scenarios (``os.pathsep``-separated): their files
#: are played by name (``scenario=NAME``) and listed by ``sifl list``; a name there wins over a shipped one.
USER_SCENARIOS = "SIFL_SCENARIOS"


def user_folders() -> list[Path]:
    """The folders named in ``SIFL_SCENARIOS``, in their order (empty entries skipped)."""
    return [Path(p).expanduser() for p in os.environ.get(USER_SCENARIOS, "").split(os.pathsep) if p]


def scenario_files(*folders: Path) -> dict[str, Path]:
    """``name → file`` of every scenario by name: those of ``folders`` and of ``SIFL_SCENARIOS`` first (a
    name found twice is the first folder's), then the shipped ones not shadowed."""
    files: dict[str, Path] = {}
    for folder in [*folders, *user_folders(), SCENARIO_DIR]:
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            files.setdefault(path.stem, path)
    return files


def scenario_names() -> list[str]:
    """Names of the scenarios a run can be given by name (shipped and ``SIFL_SCENARIOS``')."""
    return sorted(scenario_files())


#: The commands that play a scenario, by the scenario file's top-level ``kind`` key (a file without one is
#: of the kind of the command reading it).
SCENARIO_COMMANDS: dict[str, str] = {"run": "sifl run", "attack": "sifl attack"}


class ScenarioKindError(ConfigError):
    """A scenario made for another command: one line, naming the command that plays it (exit code 2)."""

    def __init__(self, problem: str):
        self.problems = [problem]
        ValueError.__init__(self, problem)  # one line, not ConfigError's list


def load_yaml(path: Path) -> Any:
    """The YAML document in ``path``, parsed.

    Raises:
        ConfigError: the file is not valid YAML: one line naming the file, the line and column (counted
            from 1, as an editor does) and what the parser met there.
    """
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError([yaml_problem(path, err)]) from None


def yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """One line for a YAML error in ``path``: ``FILE:LINE:COLUMN: what``, where the construct it was in
    began (a bracket left open), then the fix."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    context, began = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and began is not None and began is not mark:
        what += f" ({context} at line {began.line + 1}, column {began.column + 1})"
    elif context:
        what += f" ({context})"
    tab = "; YAML indents with spaces, never tabs" if "\\t" in what else ""
    return f"{where}: not valid YAML: {what}{tab}; fix the file there (a scenario is a mapping of sections)"


def scenario_kinds(*folders: Path) -> dict[str, str]:
    """``name → kind`` of every scenario by name (``run`` where a file declares none, or cannot be read:
    reading it for a command says why)."""
    kinds = {}
    for name, path in scenario_files(*folders).items():
        try:
            data = load_yaml(path)
        except ConfigError:
            data = None
        kinds[name] = str(data.get("kind", "run")) if isinstance(data, dict) else "run"
    return kinds


def scenario_path(scenario: str) -> Path:
    """The file of ``scenario``: a path to a ``.yaml`` file, else the file of that name in ``SIFL_SCENARIOS``'
    folders or the shipped ones (a shipped path that does not exist when there is none)."""
    if scenario.endswith((".yaml", ".yml")):
        return Path(scenario).expanduser()
    return scenario_files().get(scenario, SCENARIO_DIR / f"{scenario}.yaml")


def scenario_label(path: Path) -> str:
    """How a message names the scenario at ``path``: its name where ``scenario=NAME`` finds that file, its
    path otherwise."""
    return path.stem if scenario_files().get(path.stem) == path else str(path)


def read_scenario(path: Path, kind: str, problems: list[str]) -> dict[str, Any]:
    """The sections of the scenario file at ``path`` (which exists), for the command of ``kind``, without
    its ``kind`` key; a file that is not a mapping is a problem appended to ``problems``.

    Raises:
        ConfigError: the file is not valid YAML (file, line and column; the other problems would be about a
            file that was not read).
        ScenarioKindError: the file declares another kind: the command to use instead, alone (its keys are
            another schema's, and a list of them would only hide the fix).
    """
    loaded = load_yaml(path) or {}
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
        name = scenario_label(path)
        also = f" (or python run.py scenario={name})" if declared == "run" else ""
        raise ScenarioKindError(
            f"scenario {name} is for {SCENARIO_COMMANDS[declared]} (kind: {declared} in {path.name}), not "
            f"this command; run: {SCENARIO_COMMANDS[declared]} scenario={name}{also}"
        )
    return loaded
