"""The ``sifl`` command line: ``describe`` prints the paper's Table 3 sizes and the ε of every release;
``list`` shows the bundled scenarios."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ctrl_c import default_ctrl_c

from sifl_ray.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TABLE3 = {
    "mlp": (199_210, 199_411, 398_822),
    "cnn": (1_199_882, 1_200_011, 2_400_022),
    "cnn2": (582_026, 582_539, 1_165_078),
}


def sifl(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m sifl_ray.cli ARGS`` in the repository (``env``: variables set on top of this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "sifl_ray.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.mark.slow  # a `sifl describe` process per model (the paper's sizes)
@pytest.mark.parametrize("model", sorted(TABLE3))
def test_describe_prints_table3_sizes(model):
    proc = sifl("describe", f"scenario=paper_mnist_{model}_sgd", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout)
    assert (info["n"], info["n_tilde"], info["n_prime"]) == TABLE3[model]
    assert 0 < info["predicted_decode_error"] <= info["modes"]["m2"]["tolerance"]
    for release in ("local", "global", "m1_broadcast"):
        assert 0 < info["epsilon"][release] < 1, (release, info["epsilon"])
    # the sound bound is the reported guarantee and is never below the paper's formula
    assert info["epsilon"]["global"] >= info["epsilon"]["global_paper"]
    assert info["scope"] == "per-element, per-round"


@pytest.mark.slow  # two `sifl` processes
def test_describe_text_and_list():
    proc = sifl("describe", "scenario=quickstart")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "n  = 2,410" in proc.stdout and "SIFL M2: estimated max decode error" in proc.stdout
    assert "rigorous float64 bound per round" in proc.stdout
    listing = sifl("list")
    assert listing.returncode == 0
    names = {line.split()[0] for line in listing.stdout.splitlines() if line.strip()}
    assert {"quickstart", "dp_compare", "scale_1000", "paper_fmnist_cnn_momentum", "attack_small"} <= names


@pytest.mark.slow  # `sifl describe` and `python run.py` processes
def test_describe_refuses_nothing_but_reports_an_excess():
    """A configuration float64 cannot carry is reported by describe (and refused by run, exit code 2)."""
    proc = sifl("describe", "scenario=quickstart", "coding.gamma=1e-4", "--json")
    assert proc.returncode == 0
    info = json.loads(proc.stdout)
    assert info["modes"]["m2"]["within_tolerance"] is False
    run = subprocess.run(
        [sys.executable, "run.py", "coding.gamma=1e-4", "backend=local", "train.rounds=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "exceeds the tolerance" in run.stderr and "Fix:" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow  # two `sifl describe` processes
def test_describe_shows_round0_of_m2_as_an_m1_round():
    """M2's round 0 starts from the server's M1 encoding: describe reports it with M1's figures, ‖P2R‖ = 1/γ
    (100 in the quickstart) times the local ε of later rounds."""
    proc = sifl("describe", "scenario=quickstart", "coding.key_seed=7", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout)
    eps, m1 = info["epsilon"], info["modes"]["m1"]
    assert eps["local_round0"] / eps["local"] == pytest.approx(100.0, rel=1e-3)
    assert eps["local_round0"] == m1["epsilon_local"] and eps["broadcast_round0"] == m1["epsilon_broadcast"]
    text = sifl("describe", "scenario=quickstart", "coding.key_seed=7")
    assert text.returncode == 0, text.stderr[-2000:]
    m2_lines = text.stdout.split("SIFL M2")[1].splitlines()
    assert any(line.strip().startswith("ε local") and "round 0: an M1 round" in line for line in m2_lines)
    assert any(line.strip().startswith("ε broadcast") and "round 0" in line for line in m2_lines)


def test_run_refuses_an_unknown_optimizer_up_front_with_a_suggestion():
    """``train.optimizer`` is checked before any actor exists: exit code 2, the fix, no traceback."""
    proc = sifl("run", "train.optimizer=adamw_typo", "backend=local", "train.rounds=1", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "1 configuration problem:" in proc.stderr
    assert "train.optimizer: expected one of sgd, momentum, adam, or a torch.optim class name" in proc.stderr
    assert "did you mean AdamW? set train.optimizer=AdamW" in proc.stderr


PLUGIN = """
from sifl_ray.arms import register_arm
from sifl_ray.arms.fedavg import FedAvg


class PluginFedAvg(FedAvg):
    kind = "plugin_fedavg"


register_arm(PluginFedAvg())
"""


@pytest.mark.slow  # `sifl run` processes
def test_an_arm_from_a_plugin_module_runs_from_the_command_line(tmp_path):
    """``SIFL_PLUGINS=module sifl run arms=[...]``: the module registers its arm before the configuration
    is read; the arm (FedAvg under another name) gives fl's accuracy. Without the plug-in: exit 2."""
    (tmp_path / "my_sifl_plugin.py").write_text(PLUGIN)
    args = [
        "run",
        "arms=[fl,plugin_fedavg]",
        "backend=local",
        "train.rounds=1",
        "clients.num_clients=4",
        "output.progress=false",
        "output.plot=false",
        f"output.dir={tmp_path / 'runs'}",
    ]
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    refused = sifl(*args, env=env)
    assert refused.returncode == 2 and "unknown arm 'plugin_fedavg'" in refused.stderr
    done = sifl(*args, env={**env, "SIFL_PLUGINS": "my_sifl_plugin"})
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    fields = dict(f.split("=", 1) for f in line.split()[2:])
    assert fields["plugin_fedavg"] == fields["fl"]
    broken = sifl(*args, env={**env, "SIFL_PLUGINS": "no_such_plugin_module"})
    assert broken.returncode == 2 and "cannot import plug-in 'no_such_plugin_module'" in broken.stderr
    assert "Traceback" not in broken.stderr


@pytest.mark.slow  # a `sifl run` of 15 arms
def test_dp_compare_small_prints_every_arms_accuracy_and_epsilon_and_plots_them(tmp_path):
    """``sifl run scenario=dp_compare_small`` (rounds cut to 2 here): the table, one RESULT line with every
    arm's final accuracy and its ε named for its scope, and a readable ``accuracy_vs_epsilon.png``."""
    import matplotlib.image

    run = sifl(
        "run",
        "scenario=dp_compare_small",
        "train.rounds=2",
        "backend=local",
        "output.progress=false",
        f"output.dir={tmp_path}",
    )
    assert run.returncode == 0, run.stderr
    assert "ε model" in run.stdout and "δ" in run.stdout
    line = run.stdout.strip().splitlines()[-1]
    assert line.startswith("RESULT dp_compare_small ")
    fields = dict(f.split("=", 1) for f in line.split()[2:])
    kinds = ("nbafl", "dp_fedavg", "dp_fedavg_secagg")
    arms = ["fl", "secagg", "sifl_m2"] + [f"{k}_eps{e}" for k in kinds for e in (1, 5, 10, 20)]
    for arm in arms:
        assert 0 <= float(fields[arm]) <= 1, arm
    for arm in arms[3:]:  # whole-vector ε: the configured target (DP-FedAvg: what the accountant reached)
        target = float(arm.rsplit("eps", 1)[1])
        assert 0 < float(fields[f"eps_{arm}"]) <= target * (1 + 1e-3), arm
    assert float(fields["eps_per_element_sifl_m2"]) > 0
    assert "eps_fl" not in fields and "eps_secagg" not in fields  # no DP claimed: ε = ∞
    assert float(fields["max_dev_secagg"]) < 1e-5  # secure aggregation's model is fl's, up to the ring
    run_dir = Path(fields["run_dir"])
    image = matplotlib.image.imread(run_dir / "accuracy_vs_epsilon.png")
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
    assert len({tuple(px) for px in image.reshape(-1, image.shape[2])[::97]}) > 10  # not a blank canvas


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--help"],
        ["run", "-h"],
        ["describe", "--help"],
        ["config", "-h"],
        ["list", "--help"],
        ["attack", "-h"],
        ["bench", "--help"],
    ],
)
def test_every_command_answers_help_in_plain_text(argv, capsys):
    """``--help`` after any command prints its help, never read as an override (which would be
    "expected key=value", exit 2)."""
    from sifl_ray.cli import main

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "``" not in out
    assert not any(role in out for role in (":mod:", ":class:", ":func:", ":meth:", ":data:"))  # Sphinx's


def test_python_run_py_help_and_a_pipe_closed_early(tmp_path):
    """The entry point as a user runs it: help exits 0 without starting Ray; a reader that stops early
    (``| head``) ends the program without a traceback."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    got = subprocess.run(
        [sys.executable, "run.py", "--help"], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 0 and "sifl config" in got.stdout and got.stderr == ""
    piped = subprocess.run(
        f"{sys.executable} -m sifl_ray.cli config | head -1",
        shell=True,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.stdout.strip() == "[top level]" and "Traceback" not in piped.stderr


def test_config_lists_every_key_with_its_default_type_allowed_values_and_meaning(capsys):
    from sifl_ray.cli import main
    from sifl_ray.config import load_config
    from sifl_ray.config.help import describe_keys

    assert main(["config", "scenario=dp_compare_small", "train.lr=0.5"]) == 0
    out = capsys.readouterr().out
    assert "  train.lr = 0.5   (default: 0.05)" in out
    assert "clients.sampling = 'fixed'" in out and "allowed: fixed, poisson" in out
    # every leaf key of the schema, each with a type; the comments in config.py are the meanings
    keys = describe_keys(load_config([]))
    assert {k.key for k in keys} >= {"train.lr", "audit.canaries", "dp_fedavg.epsilons", "faults.inject"}
    assert all(k.type for k in keys)
    meaning = {k.key: k.meaning for k in keys}
    assert "0: off" in meaning["audit.canaries"] and meaning["clients.sampling"].startswith("fixed: exactly")
    assert main(["config", "train.lr=-1"]) == 2  # a bad value is the validator's error, as for run


def test_config_lists_the_sections_data_sets_and_partitioners_own(capsys):
    """A built-in data set's and partitioner's settings are sections of their own, listed with the
    platform's: value, default, type, allowed values and the meaning written beside the field."""
    from sifl_ray.cli import main

    assert main(["config", "data.partition=dirichlet", "dirichlet.alpha=0.1"]) == 0
    out = capsys.readouterr().out
    for section in ("[dirichlet]", "[shards]", "[synthetic]", "[arrays]", "[leaf]"):
        assert section in out, section
    assert "  dirichlet.alpha = 0.1   (default: 0.5)" in out
    assert "type: float; allowed: a number > 0 (smaller means more label skew)" in out
    assert "  shards.per_client = 2" in out and "shards dealt to each client" in out
    assert "  synthetic.n_train = 60000" in out and "type: int; allowed: an integer ≥ 1" in out
    assert "  coding.dtype = 'float64'\n      type: str; allowed: float64\n" in out  # no dead choice


def _interrupt(tmp_path: Path, sig: int, after: str, rounds: int = 200) -> tuple[int, str, Path]:
    """Start ``python run.py`` in-process (no Ray), send ``sig`` once ``after`` appears on stderr."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "run.py",
            "backend=local",
            f"train.rounds={rounds}",
            f"output.dir={tmp_path}",
            "output.plot=false",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if after in line:
            proc.send_signal(sig)
            break
    rest = proc.stderr.read()
    code = proc.wait(timeout=120)
    return code, "".join(seen) + rest, tmp_path / "quickstart"


@pytest.mark.slow  # a run interrupted, then resumed, in processes
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_says_what_is_saved_and_how_to_resume(tmp_path, sig):
    """The run folder comes first, and an interrupt names the last complete checkpoint and the exact
    resume command, which works; rounds are numbered from 0."""
    code, err, scenario_dir = _interrupt(tmp_path, sig, "(3/200 done)")
    assert code == 130, err
    (run_dir,) = (p for p in scenario_dir.iterdir() if not p.name.startswith("."))
    assert f"run folder: {run_dir}" in err.splitlines()[0] or f"run folder: {run_dir}" in err
    assert "round 2 (3/200 done)" in err  # round 2 is the third: one numbering with TensorBoard and resume
    assert f"resume with: sifl run --resume {run_dir}" in err
    saved = [line for line in err.splitlines() if line.startswith("interrupted: rounds 0-")]
    assert saved and str(run_dir / "checkpoints" / "round-") in saved[0]
    assert "Traceback" not in err


@pytest.mark.slow  # a `python run.py` process
def test_an_interrupt_before_any_round_leaves_no_key_folder(tmp_path):
    code, err, scenario_dir = _interrupt(tmp_path, signal.SIGINT, "run folder:")
    assert code == 130, err
    assert "nothing to resume" in err and "Traceback" not in err
    assert not (scenario_dir / ".keys").exists()


@pytest.mark.slow  # a run in this process
def test_resuming_a_run_stopped_before_its_first_checkpoint_says_there_is_nothing_to_resume(tmp_path, capsys):
    """What Ctrl-C between round 0's line and its checkpoint leaves (the interrupt removes the keys of a
    run with nothing saved, as above): the run's folder with its configuration, no checkpoint, no keys. A
    resume says so; it named a missing key file of the aggregator before (2026-11-29)."""
    from sifl_ray.cli import main

    args = ["backend=local", "train.rounds=2", "arms=[fl]", f"output.dir={tmp_path}", "output.plot=false"]
    assert main(["run", *args, "output.progress=false"]) == 0
    (run_dir,) = (p for p in (tmp_path / "quickstart").iterdir() if not p.name.startswith("."))
    shutil.rmtree(run_dir / "checkpoints")
    shutil.rmtree(tmp_path / "quickstart" / ".keys")
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "quickstart")]) == 2
    said = capsys.readouterr().err
    assert f"cannot resume: {run_dir}: nothing to resume: the run stopped before any round was saved" in said
    assert "missing" not in said and "Traceback" not in said


@pytest.mark.slow  # a run, then a `sifl` process
def test_resuming_a_finished_run_says_so_without_starting_ray(tmp_path):
    from sifl_ray.cli import main

    cfg_args = ["backend=local", "train.rounds=2", f"output.dir={tmp_path}", "output.plot=false"]
    assert main(["run", *cfg_args, "output.progress=false"]) == 0
    (run_dir,) = (p for p in (tmp_path / "quickstart").iterdir() if not p.name.startswith("."))
    got = sifl("run", "--resume", str(run_dir), timeout=120)
    assert got.returncode == 0, got.stderr
    assert "finished, all 2 rounds (0-1) were played; nothing to resume" in got.stdout
    assert "Ray" not in got.stdout + got.stderr  # no backend was started


@pytest.mark.slow  # four `sifl` processes
def test_a_scenario_made_for_another_command_names_the_command_in_one_line():
    """``python run.py scenario=attack_small`` and ``sifl attack scenario=quickstart`` name the command that
    plays the scenario, in one line (not a dozen "unknown key" lines about a shipped file)."""
    for argv, fix in (
        (["run.py", "scenario=attack_small"], "run: sifl attack scenario=attack_small"),
        (["-m", "sifl_ray.cli", "run", "scenario=attack_small"], "run: sifl attack scenario=attack_small"),
        (
            ["-m", "sifl_ray.cli", "describe", "scenario=attack_small"],
            "run: sifl attack scenario=attack_small",
        ),
        (["-m", "sifl_ray.cli", "attack", "scenario=quickstart"], "run: sifl run scenario=quickstart"),
    ):
        got = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert got.returncode == 2, (argv, got.stderr)
        assert got.stdout == "" and len(got.stderr.splitlines()) == 1, (argv, got.stderr)
        assert got.stderr.startswith("error: scenario ") and fix in got.stderr, (argv, got.stderr)


def test_lists_on_the_command_line_with_spaces_or_without_brackets_are_lists():
    """``arms=[fl, sifl_m1]`` reaches the program as two items (not a YAML parser error), and
    ``arms=fl,sifl_m1`` is a list, not one arm named 'fl,sifl_m1'."""
    from sifl_ray.attacks.config import load_attack_config
    from sifl_ray.config import load_config

    shell = subprocess.run(
        f"{sys.executable} -m sifl_ray.cli config arms=[fl, sifl_m1] nbafl.epsilons=1,5",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.returncode == 0, shell.stderr
    assert "arms = ['fl', 'sifl_m1']" in shell.stdout and "nbafl.epsilons = [1.0, 5.0]" in shell.stdout
    assert list(load_config(["arms=[fl,", "sifl_m1]"]).arms) == ["fl", "sifl_m1"]
    cfg = load_config(["arms=fl,sifl_m1", "nbafl.epsilons=1,5", "dp_fedavg.epsilons=[2, 4]"])
    assert list(cfg.arms) == ["fl", "sifl_m1"] and list(cfg.nbafl.epsilons) == [1.0, 5.0]
    assert list(cfg.dp_fedavg.epsilons) == [2.0, 4.0]
    assert list(load_attack_config(["arms=[sifl_m1,", "fl]"]).arms) == ["sifl_m1", "fl"]
    with pytest.raises(ConfigError) as unclosed:  # the closing bracket forgotten: the exact fix
        load_config(["arms=[fl,", "sifl_m1"])
    assert unclosed.value.problems == [
        "override 'arms=[fl, sifl_m1': a '[' or '{' is never closed; write arms=[fl,sifl_m1] (no spaces, or "
        "the whole item in quotes)"
    ]


def test_list_prints_every_description_whole_and_the_command_of_each_scenario():
    """``sifl list`` shows the whole comment at the top of each file, wrapped, under the command that
    plays it (not its first line, cut mid-phrase)."""
    import yaml

    from sifl_ray.config import SCENARIO_DIR, scenario_names

    got = sifl("list", env={"COLUMNS": "80"})
    assert got.returncode == 0, got.stderr
    blocks = {b.splitlines()[0]: b.splitlines()[1:] for b in got.stdout.strip().split("\n\n")}
    assert set(scenario_names()) <= set(blocks)
    for name in scenario_names():
        text = (SCENARIO_DIR / f"{name}.yaml").read_text()
        kind = yaml.safe_load(text)["kind"]  # every shipped scenario declares the command it is for
        command = {"run": "sifl run", "attack": "sifl attack"}[kind]
        assert blocks[name][0] == f"    run: {command} scenario={name}", blocks[name]
        shown = " ".join(line.strip() for line in blocks[name][1:] if not line.strip().startswith("arms:"))
        top = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            top.append(line.lstrip("#").strip())
        assert " ".join(" ".join(top).split()) in " ".join(shown.split()), name
        assert all(len(line) < 80 for line in blocks[name]), name  # wrapped to the terminal, not cut
