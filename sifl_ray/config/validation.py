"""One validator for every configuration schema: ``sifl run``'s, ``sifl attack``'s and the frontier's.

A schema is a dataclass: its fields are the keys that exist, their annotations the types, their values the
defaults. Its domain checks are declared once, on the field itself (:func:`setting`), in the platform's
sections (:mod:`sifl_ray.config.schema`) as in a component's (:mod:`sifl_ray.config.sections`); a schema
that shares another's sections may narrow a rule with :class:`Rules` (dotted key → range or choice). Each
choice is read from the registry that owns it at the moment of validating (so an entry registered at run
time is a valid choice, and no list is copied here). :func:`validate`
collects *every* problem — unknown keys with a suggestion, wrong types, values out of range, unknown
choices, then the schema's own cross-field checks — and raises them together as a :class:`ConfigError`
(exit code 2 at the command line), each naming the key, what was expected, what arrived and the fix. It
returns the schema as a read-only OmegaConf structured config: nobody mutates a configuration after
validation.

Why a walk over the keys before OmegaConf takes the values, instead of ``OmegaConf.merge`` alone: OmegaConf
raises at the first problem, and the user must see them all in one message. And its conversions are too
lenient for user input, and deprecated (OmegaConf 2.4 warns on each one): it makes ``"3"`` of ``3`` for a
string, ``True`` of ``"yes"`` or ``2`` for a boolean, ``20`` of ``"20"`` for an integer. So each value is
checked here against its field's annotation (an integer is a float; a string such as ``1.0e3``, which YAML
1.1 reads as a string, is a float; nothing else is converted), and only the values that passed reach
OmegaConf, which builds the typed, frozen result from the schema and would refuse anything the walk let
through. Because the passed values are merged over the defaults, the cross-field checks run even when some
keys failed: fixing the first batch of problems never reveals a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from sifl_ray.errors import SiflError


class ConfigError(SiflError, ValueError):
    """All configuration problems at once; ``str()`` is the message shown to the user (exit code 2)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        lines = [f"{len(problems)} configuration problem{'s' if len(problems) != 1 else ''}:"]
        lines += [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (case aside: ``adamw`` finds ``AdamW``), or ``None``."""
    by_lower = {str(c).lower(): str(c) for c in candidates}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return by_lower[close[0]] if close else None


@dataclass(frozen=True)
class Choice:
    """The values one key may take, asked of the registry that owns them each time a value is checked.

    Args:
        names: returns the allowed names (read when validating: a registered entry is accepted at once).
        meaning: what the choices mean, where the consequence of a choice is not obvious from its name.
            A near spelling is no safe guess between such choices, so their fix names the default, never a
            "did you mean".
        more: further allowed names, asked only for a value that is not among ``names`` (for a list that
            is expensive to read: the ``torch.optim`` classes need torch, and a valid name must not pay).
        more_label: how the message names them, e.g. ``"a torch.optim class name"``.
    """

    names: Callable[[], Iterable[str]]
    meaning: str = ""
    more: Callable[[], Iterable[str]] | None = None
    more_label: str = ""

    def problem(self, key: str, value: Any, default: Any = None) -> str | None:
        """``None`` when ``value`` is allowed, else the problem: what was expected, what arrived, the fix."""
        names = tuple(self.names())
        if value in names:
            return None
        more = tuple(self.more()) if self.more is not None else ()
        if value in more:
            return None
        expected = ", ".join(names)
        if more:
            expected += f", or {self.more_label or 'one of'} ({', '.join(more)})"
        if self.meaning:
            expected += f" ({self.meaning})"
        close = None if self.meaning else did_you_mean(str(value), names + more)
        fix = close or (default if default in names + more else names[0])
        tip = f"did you mean {close}? " if close else ""
        return f"{key}: expected one of {expected}, got {value!r}; {tip}set {key}={fix}"


@dataclass(frozen=True)
class Range:
    """A predicate on one key's (typed) value and the words saying what it expects."""

    ok: Callable[[Any], bool]
    expected: str


@dataclass(frozen=True)
class Rules:
    """A schema's domain checks, declared once: dotted key → :class:`Choice` and → :class:`Range`.

    ``examples``: for a key holding a list of sections, how to write one (shown when it is malformed).
    """

    choices: Mapping[str, Choice] = field(default_factory=dict)
    ranges: Mapping[str, Range] = field(default_factory=dict)
    examples: Mapping[str, str] = field(default_factory=dict)


#: The ranges most keys take, named once (a component's section uses them as the built-in sections do).
POSITIVE = Range(lambda v: v > 0, "a number > 0")
NONNEG = Range(lambda v: v >= 0, "a number ≥ 0")
AT_LEAST_1 = Range(lambda v: v >= 1, "an integer ≥ 1")
PROBABILITY = Range(lambda v: 0 < v < 1, "a number in (0, 1)")


def setting(
    default: Any = dataclasses.MISSING,
    *,
    rule: Choice | Range | None = None,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """A schema field with its domain check beside it (``fraction: float`` with its default and its
    ``rule=Range(...)``).

    Why on the field: a section (the platform's own, :mod:`sifl_ray.config.schema`, or a component's,
    :mod:`sifl_ray.config.sections`) is one dataclass, with no table of dotted keys elsewhere to keep in step;
    :func:`check_tree` reads the rule where :class:`Rules` has none for the key (a schema that shares
    another's section may narrow a rule there), and ``sifl config`` shows it.
    """
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"rule": rule} if rule else {}
    )


def rule_of(dotted: str, spec: dataclasses.Field[Any], rules: Rules) -> Choice | Range | None:
    """The domain check of one key: the schema's :class:`Rules` for it, else its field's :func:`setting`."""
    return rules.choices.get(dotted) or rules.ranges.get(dotted) or spec.metadata.get("rule")


#: A check spanning several keys: ``check(cfg, problems)`` reads the merged, typed configuration (every key
#: present: the given values that passed, the schema's defaults for the rest) and appends its problems.
CrossCheck = Callable[[DictConfig, list[str]], None]


def validate(
    schema: type,
    raw: Mapping[str, Any],
    rules: Rules,
    *,
    cross_checks: Iterable[CrossCheck] = (),
    problems: list[str] | None = None,
) -> DictConfig:
    """``raw`` checked against ``schema`` and ``rules``, merged over the defaults, read-only.

    Args:
        schema: the dataclass.
        raw: the values given (scenario file and overrides merged), nested by section.
        rules: the schema's ranges and choices.
        cross_checks: ``check(cfg, problems)`` on the merged, typed configuration (the given values that
            passed, the defaults for the rest, read-only), appending what spans several keys.
        problems: problems found before (a malformed override, a missing scenario), reported first.

    Raises:
        ConfigError: every problem, each with its key, what was expected, what arrived and the fix.
    """
    problems = [] if problems is None else problems
    checked = check_tree(schema, raw, rules, problems)
    try:
        merged = OmegaConf.merge(_defaults(schema), checked)
    except Exception as err:  # defensive: ``checked`` holds checked values only
        raise ConfigError([*problems, f"configuration: cannot be merged ({err})"]) from None
    OmegaConf.set_readonly(merged, True)
    for check in cross_checks:
        check(merged, problems)  # type: ignore[arg-type]  # a dataclass merges into a mapping
    if problems:
        raise ConfigError(problems)
    return merged  # type: ignore[return-value]


@functools.lru_cache(maxsize=32)
def _defaults(schema: type) -> DictConfig:
    """``schema``'s defaults as a read-only structured configuration, built once per schema class.

    Why: OmegaConf's reflection over the dataclasses was three quarters of a validation (32 of 42 ms for
    a run's schema, 2026-11-29), paid by every run, sweep point and test; ``OmegaConf.merge`` copies its
    first argument, so the one kept here is never changed. Every default is a constant or a constant's
    copy (no field reads the machine or the time), and a schema with another set of sections is another
    class (:func:`sifl_ray.config.load.scenario_schema`), so a cached value is the one a fresh build
    gives."""
    defaults = OmegaConf.structured(schema)
    OmegaConf.set_readonly(defaults, True)
    return defaults  # type: ignore[no-any-return]  # a dataclass made structured: a DictConfig


def check_tree(
    schema: type, raw: Mapping[str, Any], rules: Rules, problems: list[str], prefix: str = ""
) -> dict[str, Any]:
    """The values of ``raw`` that pass ``schema``'s types and ``rules`` (typed); the others become problems.

    Sections (nested dataclasses) and lists of sections are walked; ``prefix`` is the dotted path of
    ``schema`` inside the whole configuration (``"coding."``), used to name keys and to look up rules.
    """
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            tip = f"; did you mean {prefix}{close[0]}?" if close else f"; valid keys: {', '.join(fields)}"
            problems.append(f"{dotted}: unknown key{tip} (remove it or fix the spelling)")
            continue
        hint = hints[key]
        item = (typing.get_args(hint) or (None,))[0] if typing.get_origin(hint) is list else None
        if item is not None and dataclasses.is_dataclass(item):
            value = [] if value is None else value
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                example = rules.examples.get(dotted, "[{...}]")
                problems.append(
                    f"{dotted}: expected a list of mappings, got {value!r}; for example {dotted}={example}"
                )
                continue
            item_schema = typing.cast(type, item)
            out[key] = [
                check_tree(item_schema, v, rules, problems, f"{dotted}[{i}].") for i, v in enumerate(value)
            ]
            continue
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                problems.append(f"{dotted}: expected a section (mapping), got {value!r}")
                continue
            out[key] = check_tree(typing.cast(type, hint), value, rules, problems, f"{dotted}.")
            continue
        ok, typed = check_type(hint, value)
        if not ok:
            name = type_name(hint)
            problems.append(
                f"{dotted}: expected {name}, got {value!r} ({type(value).__name__}); set {dotted}=<{name}>"
            )
            continue
        problem = _domain_problem(dotted, typed, fields[key], rules)
        if problem:
            problems.append(problem)
            continue
        out[key] = typed
    return out


def _domain_problem(dotted: str, value: Any, spec: dataclasses.Field[Any], rules: Rules) -> str | None:
    if value is None:  # an optional key left unset: its meaning is the schema's, nothing to check
        return None
    choice = rules.choices.get(dotted)
    bounds = rules.ranges.get(dotted)
    own = spec.metadata.get("rule")
    choice = choice or (own if isinstance(own, Choice) else None)
    bounds = bounds or (own if isinstance(own, Range) else None)
    if choice is not None:
        problem = choice.problem(dotted, value, spec.default)
        if problem:
            return problem
    if bounds is not None and not bounds.ok(value):
        return f"{dotted}: expected {bounds.expected}, got {value!r}; change {dotted}"
    return None


def check_type(hint: Any, value: Any) -> tuple[bool, Any]:
    """``(ok, typed value)`` of ``value`` against a field annotation (see the module docstring)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in (a for a in args if a is not type(None)):
            ok, typed = check_type(arg, value)
            if ok:
                return True, typed
        return False, value
    if origin is list:
        if isinstance(value, str) and "," in value:  # key=a,b: a list without brackets (parse_overrides)
            try:
                value = [yaml.safe_load(v) for v in value.split(",") if v.strip()]
            except yaml.YAMLError:
                return False, value
        items = value if isinstance(value, list | tuple) else [value]  # one value: a one-element list
        out = []
        for item in items:
            ok, typed = check_type(args[0], item)
            if not ok:
                return False, value
            out.append(typed)
        return True, out
    if origin is dict:  # a free-form section (e.g. the attack suite's arm_config): a mapping, nothing more
        return isinstance(value, dict), value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1.0e3 (no exponent sign) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if hint is str:
        return isinstance(value, str), value
    return True, value


def type_name(hint: Any) -> str:
    """A type hint as a user reads it in an error (``int``, ``list[str]``)."""
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def parse_overrides(
    texts: Iterable[str], *, noun: str, example: str
) -> tuple[list[tuple[str, Any]], list[str]]:
    """``key=value`` items (dotted keys, YAML values; an empty value is null) and the problems of the
    malformed ones. ``noun`` names an item in a message (``override``, ``argument``); ``example`` shows
    one well formed.

    A list written with spaces, ``arms=[fl, sifl_m1]``, reaches a program as two items (``arms=[fl,`` and
    ``sifl_m1]``: the shell splits at the space); they are joined again (:func:`join_split_lists`). A list
    written without brackets, ``arms=fl,sifl_m1``, is a list where the key holds one (:func:`check_type`).
    Why accept both rather than answer with the fix: each has one reading only (a value that opens a bracket
    cannot end before it closes; no name or number a list holds contains a comma), and both are how people
    write lists on a command line.
    """
    parsed: list[tuple[str, Any]] = []
    problems: list[str] = []
    for text in join_split_lists(texts):
        if "=" not in text:
            problems.append(f"{noun} {text!r}: expected key=value (for example {example})")
            continue
        key, value = text.split("=", 1)
        try:
            parsed.append((key.strip(), yaml.safe_load(value) if value != "" else None))
        except yaml.YAMLError as err:
            unclosed = _open_brackets(value)
            if unclosed > 0:
                closed = _AFTER_COMMA.sub(",", value) + "]" * unclosed
                problems.append(
                    f"{noun} {text!r}: a '[' or '{{' is never closed; write {key.strip()}={closed} "
                    "(no spaces, or the whole item in quotes)"
                )
            else:
                problems.append(
                    f"{noun} {text!r}: the value is not valid YAML ({err.__class__.__name__}); a list is "
                    f"{key.strip()}=[a,b]; text with special characters goes in quotes: {key.strip()}='...'"
                )
    return parsed, problems


_AFTER_COMMA = re.compile(r",\s+")


def _open_brackets(value: str) -> int:
    """How many ``[`` / ``{`` of ``value`` are still open at its end (quoted text aside)."""
    depth, quote = 0, ""
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth


def join_split_lists(texts: Iterable[str]) -> list[str]:
    """Command-line items with the pieces of a bracketed value joined again: ``["arms=[fl,", "sifl_m1]"]``
    (what a shell makes of ``arms=[fl, sifl_m1]``) gives ``["arms=[fl, sifl_m1]"]``. A ``key=value`` item
    whose brackets are still open takes the items after it up to the one that closes them; if none does,
    the items after it that are no ``key=value`` (the unclosed value is then reported with its fix)."""
    items = list(texts)
    out: list[str] = []
    i = 0
    while i < len(items):
        text = items[i]
        depth = _open_brackets(text.split("=", 1)[1]) if "=" in text else 0
        k = i
        while depth > 0 and k + 1 < len(items):
            k += 1
            depth += _open_brackets(items[k])
        if depth > 0:  # never closed: its pieces are the items after it that are no key=value
            k = i
            while k + 1 < len(items) and "=" not in items[k + 1]:
                k += 1
        text = " ".join(items[i : k + 1])
        out.append(text)
        i = k + 1
    return out


def refuse_renamed(
    raw: dict[str, Any],
    renamed: Mapping[str, str | Callable[[Mapping[str, Any]], str]],
    problems: list[str],
    *,
    why: str,
) -> None:
    """Take every old key of ``renamed`` out of ``raw`` (a scenario's, an override's) and say its new name.

    ``renamed``: old dotted key → its new one, or a function of ``raw`` giving it (where the new name
    depends on another key). ``why`` says, in the message, where keys of that kind now live. A section the
    old keys leave empty is dropped, so it adds no "unknown key" besides.
    """
    for old, new in renamed.items():
        *path, leaf = old.split(".")
        section: Any = raw
        for part in path:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf in section:
            target = new(raw) if callable(new) else new
            value = section.pop(leaf)
            shown = value if isinstance(value, str) else json.dumps(value)
            problems.append(f"{old}: renamed {target} ({why}); write {target}={shown} instead")
    for head in {old.split(".")[0] for old in renamed if "." in old}:
        if raw.get(head) == {}:
            raw.pop(head)


def schema_keys(schema: type, prefix: str = "") -> list[str]:
    """Every dotted key of ``schema`` (its sections walked), ``prefix`` before each."""
    hints = typing.get_type_hints(schema)
    out = []
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            out += schema_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def refuse_unread(
    raw: dict[str, Any],
    shared: Mapping[str, type],
    reads: Iterable[str],
    problems: list[str],
    *,
    command: str,
    why: Mapping[str, str],
    otherwise: str,
) -> None:
    """Take every key of the sections a schema shares with a run's (``shared``: name → the run's section)
    that the schema does not read out of ``raw``, and say so: a key accepted and then ignored would leave the
    reader sure of a setting the command never used.

    Args:
        reads: the dotted keys of the shared sections the command reads.
        command: the command, as the message names it (``sifl attack``).
        why: dotted key → why the command does not read it; ``otherwise``: the reason for the rest.
    """
    read = set(reads)
    for name, section_schema in shared.items():
        for key in schema_keys(section_schema, f"{name}."):
            if key in read:
                continue
            *path, leaf = key.split(".")
            section: Any = raw
            for part in path:
                section = section.get(part) if isinstance(section, dict) else None
            if isinstance(section, dict) and leaf in section:
                section.pop(leaf)
                reason = why.get(key, otherwise)
                problems.append(f"{key}: a key of sifl run that {command} does not read ({reason}); drop it")


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """``tree[a][b][c] = value`` for ``dotted`` = ``a.b.c``, making (or replacing) sections on the way."""
    node = tree
    *parents, leaf = dotted.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value
