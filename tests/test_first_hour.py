"""What a user meets in the first hour, each answered where they look: ``sifl config SECTION``, a meaning
for every key, a model in the working folder, the offline data set named when MNIST cannot be had, a word
on each benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.cli import main
from sifl_ray.config import load_config
from sifl_ray.config.help import describe_keys

ROOT = Path(__file__).resolve().parent.parent


def test_config_shows_the_sections_and_keys_named(capsys):
    assert main(["config", "train", "coding.noise", "train.lr=0.2"]) == 0
    out = capsys.readouterr().out
    keys = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and line[2] != " "]
    assert keys and all(k.startswith(("train.", "coding.noise.")) for k in keys)
    assert (
        "train.lr = 0.2   (default: 0.05)" in out and "coding.noise.sigma1" in out and "data.name" not in out
    )


def test_config_of_an_unknown_section_suggests_the_near_one(capsys):
    assert main(["config", "trian"]) == 2
    err = capsys.readouterr().err
    assert "sifl config trian: no such section or key; did you mean train?" in err and "Traceback" not in err


def test_every_configuration_key_says_what_it_means():
    """Every key of the run's schema, the components' sections included, as sifl config lists them."""
    keys = describe_keys(load_config([]))
    assert len(keys) > 50
    assert [k.key for k in keys if not k.meaning] == []
    assert next(k for k in keys if k.key == "train.lr").meaning.startswith("the clients' learning rate")


@pytest.mark.slow  # a `python run.py` process
def test_a_model_in_the_working_folder_is_found_by_its_module_name(tmp_path):
    (tmp_path / "mynet.py").write_text(
        "import torch\n\n\ndef tiny(input_shape, num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, num_classes))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),  # run from elsewhere: the working folder is not the script's
            "train.model=mynet:tiny",
            "train.rounds=1",
            "backend=local",
            "arms=[fl,sifl_m1]",
            f"output.dir={tmp_path / 'runs'}",
            "output.plot=false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].startswith("RESULT quickstart fl=")


@pytest.mark.parametrize("how", ["data.download=false", "data.mirrors=[http://127.0.0.1:9/]"])
def test_mnist_that_cannot_be_had_names_the_offline_sample(tmp_path, how, capsys):
    assert main(["run", "data.name=mnist", f"data.root={tmp_path}", how]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "offline, data.name=mnist_sample runs on 5,000 real MNIST digits" in err


def test_bench_help_says_what_each_benchmark_measures(capsys):
    bench = pytest.importorskip("bench.__main__")
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for name in bench.COMMANDS:
        line = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert len(line.split()) > 4, line  # its name and a few words on it
