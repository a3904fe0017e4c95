"""The package as it ships: the wheel holds ``sifl_ray`` alone with its scenarios and licence; one version
for ``sifl --version``, the metadata and the citation.

``.ci/wheel`` installs the wheel into a fresh venv outside the checkout and runs the quickstart from it.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

import sifl_ray
from sifl_ray.cli import main
from sifl_ray.config import SCENARIO_DIR

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    # built from a copy of what the wheel is made of: a build/ folder an earlier build left in the
    # checkout would be packed too, and hide a file the package no longer has
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sifl_ray", src / "sifl_ray", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    subprocess.run([*pip, str(src)], check=True)
    (path,) = out.glob("sifl_ray-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_sifl_ray_alone_with_every_scenario(wheel):
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"sifl_ray", f"sifl_ray-{sifl_ray.__version__}.dist-info"}
    shipped = {p.name for p in SCENARIO_DIR.glob("*.yaml")}
    assert (
        shipped and {n.removeprefix("sifl_ray/scenarios/") for n in names if n.endswith(".yaml")} == shipped
    )


def test_the_wheel_carries_the_licence_and_says_which(wheel):
    meta = email.message_from_bytes(wheel.read(f"sifl_ray-{sifl_ray.__version__}.dist-info/METADATA"))
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Version"] == sifl_ray.__version__
    licence = wheel.read(f"sifl_ray-{sifl_ray.__version__}.dist-info/licenses/LICENSE").decode()
    assert "Apache License" in licence and "Version 2.0" in licence


def test_version_names_the_version_and_where_the_package_is(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"sifl-ray {sifl_ray.__version__} from {Path(sifl_ray.__file__).resolve().parent}")


def test_the_citation_cites_this_version_of_the_tool_and_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == sifl_ray.__version__ and cff["license"] == "Apache-2.0"
    (paper,) = cff["references"]
    assert paper["title"] == "Immersion and Invariance-based Coding for Privacy-Preserving Federated Learning"
    assert [a["family-names"] for a in paper["authors"]] == ["Hayati", "Murguia", "van de Wouw"]
