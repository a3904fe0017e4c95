"""``sifl config``: every configuration key with its value, default, type, allowed values and meaning.

Read from the schema itself (:func:`sifl_ray.config.load.scenario_schema`: the platform's sections and
every registered component's: an arm's, a partitioner's, a data set's, a plug-in's): the dataclasses give
the keys, types and defaults, each field's rule (:func:`~sifl_ray.config.validation.setting`) the allowed
values, and the comment written beside a field (or just above it) its meaning, in whichever module declares
it. So the reference cannot drift from what the validator accepts, and a user never has to read the
schema's source.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import sys
import tokenize
import typing
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sifl_ray.config.components import ARMS
from sifl_ray.config.load import RULES, scenario_schema
from sifl_ray.config.validation import Choice, ConfigError, Range, rule_of


@dataclass(frozen=True)
class KeyHelp:
    """One configuration key, as ``sifl config`` shows it."""

    key: str
    value: Any
    default: Any
    type: str
    allowed: str
    meaning: str


def field_comments(cls: type) -> dict[str, str]:
    """``field name → comment`` of the dataclass ``cls``: the comment on a field's line, else the comment
    lines just above it, from the source of the module that defines it (empty where there is none)."""
    return _module_comments(cls.__module__).get(cls.__name__, {})


@functools.lru_cache(maxsize=64)
def _module_comments(module: str) -> dict[str, dict[str, str]]:
    try:
        source = inspect.getsource(sys.modules[module])
    except (KeyError, OSError, TypeError):  # a class made at run time, or a module without a file
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                line = item.lineno
                # a comment on the field's lines (a formatter may wrap a long one inside the value)
                text = " ".join(
                    comments[k] for k in range(line, (item.end_lineno or line) + 1) if k in comments
                )
                if not text:  # the comment lines right above the field
                    above: list[str] = []
                    k = line - 1
                    while k >= 1 and lines[k - 1].strip().startswith("#"):
                        above.insert(0, comments.get(k, ""))
                        k -= 1
                    text = " ".join(above)
                out.setdefault(node.name, {})[item.target.id] = text
    return out


def _meaning(cls: type, name: str) -> str:
    """The comment of field ``name`` in the class that declares it: ``cls`` or a base (the run's schema is
    a class made at run time over :class:`~sifl_ray.config.schema.ScenarioConfig`, with its fields)."""
    return next((text for base in cls.__mro__ if (text := field_comments(base).get(name))), "")


def _type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text.replace("typing.", "")


def _allowed(key: str, spec: dataclasses.Field[Any]) -> str:
    rule = rule_of(key, spec, RULES)
    if isinstance(rule, Choice):
        names = ", ".join(rule.names())
        return names + (f", or {rule.more_label}" if rule.more is not None else "")
    if isinstance(rule, Range):
        return rule.expected
    if key == "arms":
        return "a list of: " + ", ".join(ARMS)
    return ""


def describe_keys(cfg: DictConfig) -> list[KeyHelp]:
    """Every key of the schema with its value in ``cfg`` (a loaded configuration)."""
    values = OmegaConf.to_container(cfg, resolve=True)
    out: list[KeyHelp] = []

    def walk(cls: type, prefix: str, value: Any) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            current = value.get(f.name) if isinstance(value, dict) else None
            hint = hints.get(f.name)
            if dataclasses.is_dataclass(hint):
                walk(typing.cast(type, hint), key + ".", current)
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
            out.append(
                KeyHelp(
                    key=key,
                    value=current,
                    default=default,
                    type=_type_name(f.type),
                    allowed=_allowed(key, f),
                    meaning=_meaning(cls, f.name),
                )
            )

    walk(scenario_schema(), "", values)
    return out


def select_keys(keys: list[KeyHelp], wanted: list[str]) -> list[KeyHelp]:
    """The keys named by ``wanted``: a section (``train``: its every key), a key (``train.lr``) or a section
    within one (``coding.noise``); all of them where ``wanted`` is empty.

    Raises:
        ConfigError: a name that is no section or key, with the nearest one and the sections there are.
    """
    chosen = [k for k in keys if not wanted or any(k.key == w or k.key.startswith(f"{w}.") for w in wanted)]
    names = {k.key for k in keys} | {k.key.rsplit(".", 1)[0] for k in keys if "." in k.key}
    unknown = [w for w in wanted if w not in names]
    if unknown:
        sections = sorted({k.key.split(".")[0] for k in keys if "." in k.key})
        problems = []
        for w in unknown:
            close = difflib.get_close_matches(w, sorted(names), n=1)
            tip = f"did you mean {close[0]}? " if close else ""
            problems.append(
                f"sifl config {w}: no such section or key; {tip}sections: {', '.join(sections)} "
                "(sifl config SECTION, or sifl config SECTION.KEY)"
            )
        raise ConfigError(problems)
    return chosen


def format_keys(keys: list[KeyHelp]) -> str:
    """Plain text, a block per section: ``key = value`` (and the default where it differs), then type,
    allowed values and meaning on indented lines."""
    lines: list[str] = []
    section = None
    for k in keys:
        head = k.key.split(".")[0] if "." in k.key else ""
        if head != section:
            section = head
            lines.append(f"\n[{head or 'top level'}]")
        changed = "" if k.value == k.default else f"   (default: {k.default!r})"
        lines.append(f"  {k.key} = {k.value!r}{changed}")
        lines.append(f"      type: {k.type}" + (f"; allowed: {k.allowed}" if k.allowed else ""))
        if k.meaning:
            lines.append(f"      {k.meaning}")
    return "\n".join(lines).lstrip("\n")
