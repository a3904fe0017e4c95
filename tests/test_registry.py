"""The one registry helper (:class:`sifl_ray.config.Registry`): names known without importing an entry, an
entry imported from its path on first use, a section per entry that declares settings, and the messages a
typo or a taken name gets."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sifl_ray.config import ConfigError, Range, Registry, RegistryError, load_config, setting
from sifl_ray.config.sections import SECTIONS, component_section

ROOT = Path(__file__).resolve().parent.parent


def test_a_declared_entry_is_a_name_at_once_and_imported_on_first_read():
    registry: Registry[object] = Registry("toy thing", declared={"joiner": "os.path:join"})
    assert "joiner" in registry and registry.names() == ("joiner",) and registry.declared("joiner")
    assert registry.path("joiner") == "os.path:join"
    import os.path

    assert registry["joiner"] is os.path.join
    with pytest.raises(ModuleNotFoundError):  # a path that does not import fails where it is read
        Registry("broken thing", declared={"gone": "no_such_module_xyz:thing"})["gone"]


def test_registering_a_declared_entry_again_is_the_same_entry_and_a_taken_name_is_refused():
    import os.path

    registry: Registry[object] = Registry("toy joiner", declared={"join": "posixpath:join"})
    assert registry.register("join", os.path.join) is os.path.join  # what the declaration names
    with pytest.raises(RegistryError, match=r"toy joiner 'join' is already registered \(posixpath:join\)"):
        registry.register("join", os.path.split)
    registry.register("join", os.path.split, replace=True)
    assert registry["join"] is os.path.split and not registry.declared("join")
    with pytest.raises(RegistryError, match="must be a name"):
        registry.register("not a name", os.path.join)


def test_an_unknown_name_lists_the_registered_ones_and_the_likely_one():
    registry: Registry[int] = Registry("toy number")
    registry.register("seven", 7)
    registry.register("eleven", 11)
    with pytest.raises(
        KeyError, match=r"unknown toy number 'sevn'; did you mean seven\? registered: seven, eleven"
    ):
        registry["sevn"]
    assert registry.get("sevn") is None and list(registry) == ["seven", "eleven"]
    assert registry.choice().problem("toy.key", "sevn") == (
        "toy.key: expected one of seven, eleven, got 'sevn'; did you mean seven? set toy.key=seven"
    )


@dataclass
class WidthSettings:
    width: int = setting(4, rule=Range(lambda v: v >= 1, "an integer ≥ 1"))


def test_an_entry_with_settings_owns_its_section_until_it_goes():
    from sifl_ray.data.partition import PARTITIONERS, Partitioner

    def striped(labels, num_clients, generator, width):
        raise AssertionError("never called here")

    with PARTITIONERS.restored():
        PARTITIONERS.register(
            "striped", Partitioner(striped, settings=WidthSettings), settings=WidthSettings, takes=striped
        )
        assert component_section("partitioner", "striped") is WidthSettings
        assert load_config(["data.partition=striped", "striped.width=3"]).striped.width == 3
        with pytest.raises(ConfigError, match=r"striped\.width: expected an integer ≥ 1, got 0"):
            load_config(["striped.width=0"])
        PARTITIONERS.unregister("striped")
        assert "striped" not in SECTIONS and "striped" not in PARTITIONERS
    with pytest.raises(ConfigError, match=r"striped: unknown key"):
        load_config(["striped.width=3"])


def test_the_registries_names_are_read_without_torch():
    """Every registry's names, the ones behind torch too (models, optimizers, coding backends), are known
    to a process that has not imported torch: validation and ``sifl config`` answer before it loads."""
    code = (
        "import sys\n"
        "from sifl_ray.config.load import load_components\n"
        "from sifl_ray.config.registry import REGISTRIES\n"
        "load_components()\n"
        "import sifl_ray.config.names\n"
        "names = {kind: r.names() for kind, r in REGISTRIES.items()}\n"
        "assert all(names.values()), names\n"
        "print(sorted(names), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("]")[1].strip() == "False"
    for kind in ("arm", "partitioner", "data set", "model", "optimizer", "coding backend"):
        assert repr(kind) in out.stdout, out.stdout
