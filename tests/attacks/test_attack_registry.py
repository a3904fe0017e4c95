"""The attack registry: an attack is one module, registered once, and every registered figure reaches the
report, the console table and TensorBoard; registration refuses what would drop a figure silently.

The tests enumerate the registry (:func:`figure_specs`) rather than pin its contents, so an attack added
later is held to the same rules without a line here.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

import sifl_ray.attacks.builtin  # noqa: F401 - the shipped attacks, registered as a run registers them
from sifl_ray.attacks.registry import (
    ATTACKS,
    Attack,
    AttackRegistryError,
    FigureSpec,
    Measured,
    figure_specs,
    measure_all,
    register_attack,
    unregister_attack,
)
from sifl_ray.cli import main

SMALL_RUN = [
    "attack",
    "arms=[sifl_m1]",
    "model.features=23",
    "clients.num_clients=5",
    "data.samples_per_client=60",
    "train.batch_size=16",
    "train.rounds=8",
    "coding.n_extra=4",
    "designs=[fast-oblique]",
    "primary=fast-oblique",
    "audit.trials=200",
    "contrast.designs=[]",
    "coding.key_seed=3",
]


@pytest.fixture
def plugin_attack(monkeypatch):
    """``SIFL_PLUGINS=attack_plugin``: the one-file attack of ``tests/attacks/attack_plugin.py``, imported
    afresh by the command line's plug-in loader, and taken out of the registry afterwards."""
    monkeypatch.setenv("SIFL_PLUGINS", "attack_plugin")
    monkeypatch.delitem(sys.modules, "attack_plugin", raising=False)
    yield "upload_inflation"
    unregister_attack("upload_inflation")


def test_an_attack_in_one_new_file_reaches_the_report_the_console_and_tensorboard(
    plugin_attack, tmp_path, capsys
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    name = plugin_attack
    assert name not in figure_specs()
    assert main([*SMALL_RUN, f"out_dir={tmp_path}"]) == 0
    spec = figure_specs()[name]  # registered by the plug-in loader, nowhere else

    design = json.loads((tmp_path / "result.json").read_text())["designs"][0]
    figure = design["figures"][name]
    assert figure["threat_model"] == spec.threat_model and figure["attack"] == spec.attack
    assert figure["value"] > 1 and len(figure["per_round"]) == 8

    report = (tmp_path / "report.md").read_text()
    assert f"- **{spec.attack}** ({spec.threat_model}). {spec.explanation}" in report
    row = " | ".join(cell.replace("|", "\\|") for cell in (spec.threat_model, spec.attack, spec.figure))
    assert f"| {row} |" in report

    console = capsys.readouterr().out.splitlines()
    head = next(line for line in console if line.startswith("design "))
    assert f" {spec.column:>10s}" in head
    assert f"  {spec.column:10s} {spec.attack} [{spec.threat_model}]" in console

    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    scalars = acc.Scalars(f"attack/fast-oblique/{name}")
    assert [s.step for s in scalars] == sorted(int(t) for t in figure["per_round"])
    assert scalars[-1].value == pytest.approx(figure["value"], rel=1e-6)
    table = acc.Tensors("attack/fast-oblique/text_summary")[0].tensor_proto.string_val[0].decode()
    assert spec.attack in table


def test_the_shipped_attacks_are_registered():
    assert ATTACKS and all(attack.figures for attack in ATTACKS.values())


def test_every_registered_attack_is_refused_a_second_time():
    for attack in list(ATTACKS.values()):
        with pytest.raises(AttackRegistryError, match=f"an attack '{attack.name}' is already registered"):
            register_attack(attack)


def test_a_figure_name_belongs_to_one_attack():
    for name in figure_specs():
        twin = Attack(name="twin_attack", figures=(_spec(name),), measure=lambda view: {})
        with pytest.raises(AttackRegistryError, match=f"figure '{name}' is already"):
            register_attack(twin)
    assert "twin_attack" not in ATTACKS


@pytest.mark.parametrize("field", ["explanation", "threat_model", "attack", "figure", "column"])
def test_a_figure_without_its_explanation_or_labels_is_refused(field):
    """Before the registry, a figure without an entry in the explanations silently left the report."""
    for spec in figure_specs().values():
        bare = dataclasses.replace(spec, name=f"{spec.name}_copy", **{field: " "})
        with pytest.raises(AttackRegistryError, match=f"figure '{bare.name}' has no {field}"):
            register_attack(Attack(name="bare_attack", figures=(bare,), measure=lambda view: {}))
    assert "bare_attack" not in ATTACKS


def test_every_registered_column_fits_the_console_table():
    assert all(0 < len(spec.column) <= 10 for spec in figure_specs().values())
    with pytest.raises(AttackRegistryError, match="longer than 10 characters"):
        register_attack(
            Attack(name="wide", figures=(_spec("wide", column="x" * 11),), measure=lambda view: {})
        )


def test_an_attack_that_measures_other_figures_than_it_declared_fails_loudly(monkeypatch):
    from sifl_ray.attacks import registry
    from sifl_ray.config import Registry

    monkeypatch.setattr(registry, "ATTACKS", Registry("attack"))  # a fresh, empty registry
    register_attack(
        Attack(name="liar", figures=(_spec("declared"),), measure=lambda view: {"other": Measured(1.0)})
    )
    with pytest.raises(AttackRegistryError, match=r"measured \['other'\], but declared \['declared'\]"):
        measure_all(None)  # type: ignore[arg-type]  # the attack reads nothing of the view


def _spec(name: str, *, column: str = "col") -> FigureSpec:
    return FigureSpec(name=name, threat_model="t", attack="a", figure="f", explanation="why", column=column)
