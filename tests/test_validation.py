"""The one validator (:mod:`sifl_ray.config.validation`) on a schema of its own: every problem at once, each
with its key and fix; choices read from their registry when validating; strict types; a read-only result."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf

from sifl_ray.config.validation import (
    Choice,
    ConfigError,
    Range,
    Rules,
    check_type,
    did_you_mean,
    parse_overrides,
    set_path,
    validate,
)

REGISTRY: dict[str, object] = {"alpha": object(), "beta": object()}  # stands in for an owner's registry


@dataclass
class Inner:
    kind: str = "alpha"
    rate: float = 0.5


@dataclass
class Item:
    name: str = ""
    size: int = 1


@dataclass
class Toy:
    count: int = 3
    label: str | None = None
    flag: bool = False
    scales: list[float] = field(default_factory=lambda: [1.0])
    inner: Inner = field(default_factory=Inner)
    parts: list[Item] = field(default_factory=list)


RULES = Rules(
    choices={"inner.kind": Choice(lambda: tuple(REGISTRY))},
    ranges={"count": Range(lambda v: v >= 1, "an integer >= 1"), "inner.rate": Range(lambda v: v < 1, "< 1")},
    examples={"parts": "[{name: a, size: 2}]"},
)


def test_every_problem_at_once_each_with_its_key_and_fix():
    seen: list[dict] = []
    raw = {
        "count": 0,  # range
        "cuont": 2,  # unknown, close to a key
        "zzz": 1,  # unknown, close to nothing
        "flag": "yes",  # not a bool: no conversion
        "inner": {"kind": "alpah", "rate": 2},  # choice (a near spelling) and range
        "parts": [{"name": "a", "size": "big"}],  # a type inside a list of sections
    }
    with pytest.raises(ConfigError) as info:
        validate(Toy, raw, RULES, cross_checks=[lambda values, problems: seen.append(values)])
    problems = info.value.problems
    assert problems == [
        "count: expected an integer >= 1, got 0; change count",
        "cuont: unknown key; did you mean count? (remove it or fix the spelling)",
        "zzz: unknown key; valid keys: count, label, flag, scales, inner, parts "
        "(remove it or fix the spelling)",
        "flag: expected bool, got 'yes' (str); set flag=<bool>",
        "inner.kind: expected one of alpha, beta, got 'alpah'; did you mean alpha? set inner.kind=alpha",
        "inner.rate: expected < 1, got 2.0; change inner.rate",
        "parts[0].size: expected int, got 'big' (str); set parts[0].size=<int>",
    ]
    assert str(info.value).startswith("7 configuration problems:\n  - count:")
    # the cross-field checks ran too, on the defaults where a value failed: no second batch after a fix
    assert seen and seen[0]["count"] == 3 and seen[0]["parts"] == [{"name": "a", "size": 1}]


def test_malformed_list_of_sections_shows_an_example():
    with pytest.raises(
        ConfigError, match=r"parts: expected a list of mappings, got 3; for example parts=\[\{name"
    ):
        validate(Toy, {"parts": 3}, RULES)
    with pytest.raises(ConfigError, match=r"inner: expected a section \(mapping\), got 'x'"):
        validate(Toy, {"inner": "x"}, RULES)


def test_result_is_typed_frozen_and_built_without_omegaconf_conversions():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # OmegaConf 2.4 warns on each implicit conversion: none must happen
        cfg = validate(
            Toy, {"count": 2, "scales": 3, "inner": {"rate": "1.0e-1"}, "parts": [{"name": "b"}]}, RULES
        )
    assert cfg.count == 2 and cfg.scales == [3.0] and cfg.inner.rate == 0.1 and cfg.parts[0].size == 1
    assert isinstance(cfg.scales[0], float)
    with pytest.raises(Exception):  # noqa: B017 - OmegaConf's ReadonlyConfigError
        cfg.count = 5


def test_a_validation_leaves_the_next_ones_defaults_as_a_fresh_build_gives_them():
    """The schema's defaults are built once and kept (:func:`~sifl_ray.config.validation.validate`): a
    validation's values, lists and sections among them, never reach the next one's defaults."""
    given = {"count": 7, "scales": [2.0, 4.0], "inner": {"kind": "beta"}, "parts": [{"name": "a", "size": 2}]}
    first = validate(Toy, given, RULES)
    assert first.count == 7 and first.scales == [2.0, 4.0] and first.parts[0].name == "a"
    second = validate(Toy, {}, RULES)
    assert OmegaConf.to_container(second) == OmegaConf.to_container(OmegaConf.structured(Toy))
    assert second.count == 3 and second.scales == [1.0] and second.inner.kind == "alpha" and not second.parts


@pytest.mark.parametrize(
    ("hint", "value", "ok"),
    [
        (int, True, False),  # a bool is no integer
        (int, "3", False),  # nor is a string of digits (OmegaConf would convert it)
        (int, 3.0, False),
        (float, 3, True),  # an integer is a float
        (float, "1.0e3", True),  # YAML 1.1 reads 1.0e3 as a string
        (float, True, False),
        (str, 3, False),  # OmegaConf would make "3" of it
        (bool, 1, False),
        (int | None, None, True),
        (list[int], [1, "a"], False),
    ],
)
def test_types_are_strict(hint, value, ok):
    assert check_type(hint, value)[0] is ok


def test_choices_are_read_from_the_registry_when_validating(monkeypatch):
    with pytest.raises(ConfigError, match=r"inner\.kind: expected one of alpha, beta, got 'gamma'"):
        validate(Toy, {"inner": {"kind": "gamma"}}, RULES)
    monkeypatch.setitem(REGISTRY, "gamma", object())  # registered after the rules were declared
    assert validate(Toy, {"inner": {"kind": "gamma"}}, RULES).inner.kind == "gamma"


def test_a_choice_reads_its_expensive_names_only_for_a_name_outside_the_cheap_ones():
    calls = []

    def more():
        calls.append(1)
        return ("AdamW", "RMSprop")

    choice = Choice(lambda: ("sgd", "adam"), more=more, more_label="a torch.optim class name")
    assert choice.problem("opt", "sgd") is None and not calls
    assert choice.problem("opt", "AdamW") is None and calls == [1]
    problem = choice.problem("opt", "adamw_typo", "sgd")
    assert problem == (
        "opt: expected one of sgd, adam, or a torch.optim class name (AdamW, RMSprop), got 'adamw_typo'; "
        "did you mean AdamW? set opt=AdamW"
    )


def test_a_choice_with_a_meaning_names_the_default_not_a_near_spelling():
    """Between choices whose consequences differ (a guarantee for all rounds, or for one), the nearest
    spelling of a typo is no safe guess: the fix names the default."""
    choice = Choice(lambda: ("multi_round", "per_round"), meaning="what each covers")
    assert did_you_mean("per_rnd", ("multi_round", "per_round")) == "per_round"
    assert choice.problem("x", "per_rnd", "multi_round") == (
        "x: expected one of multi_round, per_round (what each covers), got 'per_rnd'; set x=multi_round"
    )


def test_overrides_are_parsed_with_every_malformed_one_reported():
    parsed, problems = parse_overrides(
        ["a.b=3", "c=", "nokey", "d=[1, 2", "e=[x,", "y]", "f=[p,", "q"],
        noun="override",
        example="train.rounds=5",
    )
    assert parsed == [("a.b", 3), ("c", None), ("e", ["x", "y"])]  # a list a shell split at a space: joined
    assert problems == [
        "override 'nokey': expected key=value (for example train.rounds=5)",
        "override 'd=[1, 2': a '[' or '{' is never closed; write d=[1,2] (no spaces, or the whole item in "
        "quotes)",
        "override 'f=[p, q': a '[' or '{' is never closed; write f=[p,q] (no spaces, or the whole item in "
        "quotes)",
    ]
    tree: dict = {"a": 1}
    set_path(tree, "a.b", 3)
    set_path(tree, "c", 4)
    assert tree == {"a": {"b": 3}, "c": 4}
