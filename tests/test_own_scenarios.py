"""A scenario file of one's own: a YAML mistake answers with the file, line and column from every entry
point (exit code 2, no traceback; :class:`ConfigError` from the API); a folder of one's own scenarios is
played by name and listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray import simulate
from sifl_ray.cli import main
from sifl_ray.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent

#: (file text, line, column) of the two mistakes a hand-edited scenario meets first
MISTAKES = {
    "bracket": ("arms: [fl, sifl_m1\ntrain:\n  rounds: 2\n", 2, 6),
    "tab": ("train:\n\trounds: 2\n", 2, 1),
}


@pytest.fixture(params=sorted(MISTAKES))
def broken(request, tmp_path) -> tuple[Path, int, int]:
    text, line, column = MISTAKES[request.param]
    path = tmp_path / f"{request.param}.yaml"
    path.write_text(text)
    return path, line, column


@pytest.mark.parametrize("command", ["run", "config", "describe", "attack"])
def test_a_yaml_mistake_names_file_line_and_column_from_every_command(broken, command, capsys):
    path, line, column = broken
    assert main([command, f"scenario={path}"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:{column}: not valid YAML" in err
    assert "Traceback" not in err and len(err.splitlines()) <= 3


def test_a_yaml_mistake_through_run_py_exits_2_in_one_problem(broken):
    path, line, column = broken
    done = subprocess.run(
        [sys.executable, "run.py", f"scenario={path}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert f"{path}:{line}:{column}: not valid YAML" in done.stderr and "Traceback" not in done.stderr


def test_a_yaml_mistake_is_a_config_error_from_the_api(broken):
    path, line, column = broken
    with pytest.raises(ConfigError, match=f"{path}:{line}:{column}: not valid YAML"):
        simulate(str(path))


def test_an_open_bracket_says_where_it_was_opened(tmp_path):
    path = tmp_path / "bracket.yaml"
    path.write_text(MISTAKES["bracket"][0])
    with pytest.raises(ConfigError, match="flow sequence at line 1, column 7"):
        load_config([f"scenario={path}"])


@pytest.fixture
def own_folder(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tiny.yaml").write_text(
        "# My tiny run: two arms, two rounds.\narms: [fl, sifl_m1]\ntrain:\n  rounds: 2\n"
    )
    monkeypatch.setenv("SIFL_SCENARIOS", str(folder))
    return folder


def test_a_folder_in_sifl_scenarios_is_played_by_name(own_folder):
    cfg = load_config(["scenario=tiny"])
    assert cfg.scenario == "tiny" and list(cfg.arms) == ["fl", "sifl_m1"] and cfg.train.rounds == 2


def test_list_shows_ones_own_scenarios_with_their_file(own_folder, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    block = out.split("\n\ntiny")[1].split("\n\n")[0]
    assert f"(yours: {own_folder / 'tiny.yaml'})" in block
    assert "run: sifl run scenario=tiny" in block and "My tiny run" in block and "fl, sifl_m1" in block
    assert "\n\nquickstart\n" in out  # the shipped ones still


def test_list_of_a_folder_shows_its_files_with_the_path_to_play(tmp_path, capsys):
    folder = tmp_path / ("a_folder_whose_name_is_longer_than_a_terminal_line_" * 3)  # never cut: copied whole
    folder.mkdir()
    (folder / "b.yaml").write_text("arms: [fl\n")
    (folder / "a.yaml").write_text("# A.\narms: [fl]\n")
    assert main(["list", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"run: sifl run scenario={folder / 'a.yaml'}" in out
    assert f"\n    {folder / 'b.yaml'}:2:1:\n" in out  # the path on a line of its own, whole
    assert f"cannot be read: {folder / 'b.yaml'}:2:1: not valid YAML" in " ".join(out.split())  # wrapped


def test_list_of_a_missing_folder_is_refused(tmp_path, capsys):
    assert main(["list", str(tmp_path / "nope")]) == 2
    assert "no folder" in capsys.readouterr().err


def test_output_name_names_the_run_folder_and_the_result_tag(tmp_path, capsys):
    args = ["backend=local", "train.rounds=1", "arms=[fl]", f"output.dir={tmp_path}", "output.plot=false"]
    assert main(["run", *args, "output.name=lr_0.1"]) == 0
    result = capsys.readouterr().out.strip().splitlines()[-1]
    (run_dir,) = (p for p in (tmp_path / "lr_0.1").iterdir() if not p.name.startswith("."))
    assert result.startswith("RESULT lr_0.1 fl=") and result.endswith(f"run_dir={run_dir}")
    assert not (tmp_path / "quickstart").exists()
    with pytest.raises(ConfigError, match=r"output\.name: expected a name of letters, digits"):
        load_config(["output.name=my run/1"])
