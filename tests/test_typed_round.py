"""A type checker follows the round into the parties: a remote call is checked against the host's method
and its result read by the host's own record types. Proven on a deliberately wrong snippet beside a correct
one, both checked by ``mypy --strict`` with the project's settings, as CI checks the round, in a
``python -m mypy`` process (mypy run inside pytest keeps its ~3.5 million syntax-tree objects alive, and
every later full garbage collection, the five at pytest's exit among them, walks them).

One difference from CI's check: PyTorch's modules are skipped (their types read as ``Any``). Why: a cold
check read torch's whole package, 17 of the check's 24 CPU-s (7.6 s against 25.7 s, 2026-11-29), and no
line of the snippet asks about a tensor: the handle, the host's method and its records are ``sifl_ray``'s
own types. Both checks print the same nine errors. CI's own ``mypy --strict`` still reads torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]

HEADER = """
from __future__ import annotations

import torch

from sifl_ray.aggregation import Parties
from sifl_ray.backends import Backend
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.handle import collect
from sifl_ray.parties.server import ServerHost
from sifl_ray.parties.workers import ClientWorker
from sifl_ray.specs import Coding
"""

RIGHT = """
def step4(backend: Backend, parties: Parties, shards: list[torch.Tensor]) -> float:
    finished = parties.server.call(ServerHost.finish_round, "fl", 3, *shards, previous=None)
    info = collect(backend, finished.info, "server", 0, arm="fl", t=3)
    return info["decode_s"] + info["encode_s"]


def step2(backend: Backend, parties: Parties, w: torch.Tensor) -> int:
    out = parties.workers[0].call(ClientWorker.train_round, "fl", 3, w, Coding.PLAIN, [1, 2], [(0, 5)], 0)
    report = collect(backend, out.report, "worker", 0, arm="fl", t=3)
    return len(report.accepted) + len(out.partials)


def step3(backend: Backend, parties: Parties) -> float:
    reduced = parties.aggregators[0].call(AggregatorHost.reduce, "fl", 3, 0, shard=0)
    return collect(backend, reduced.info, "aggregator", 0, arm="fl", t=3)["weight"]
"""

WRONG = """
def step4(backend: Backend, parties: Parties, shards: list[torch.Tensor]) -> float:
    finished = parties.server.call(ServerHost.finish_round, "fl", "3", *shards)  # t is a round number
    info = collect(backend, finished.info, "server", 0, arm="fl", t=3)
    return info["decod_s"]  # no such figure


def step2(backend: Backend, parties: Parties, w: torch.Tensor) -> int:
    out = parties.workers[0].call(ClientWorker.train_round, "fl", 3, w, "plain", [1, 2], [(0, 5)])  # coding
    report = collect(backend, out.report, "worker", 0, arm="fl", t=3)
    return report.acepted  # misspelt field


def step3(backend: Backend, parties: Parties) -> float:
    reduced = parties.aggregators[0].call(AggregatorHost.reduce, "fl", 3, 0, shard=0, plan=None)  # not here
    return reduced.infos  # the record has no such field
"""


def _ini(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def settings_without_torch(folder: Path) -> Path:
    """A mypy.ini of the project's settings (pyproject.toml's ``[tool.mypy]``, overrides included) that
    also skips PyTorch's modules (module docstring)."""
    import tomllib

    settings = dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"])
    overrides = [*settings.pop("overrides", []), {"module": ["torch.*"], "follow_imports": "skip"}]
    lines = ["[mypy]", *(f"{key} = {_ini(value)}" for key, value in settings.items())]
    for override in overrides:
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        lines += ["", f"[mypy-{','.join(modules)}]"]
        lines += [f"{key} = {_ini(value)}" for key, value in override.items() if key != "module"]
    path = folder / "mypy.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_mypy_checks_a_call_through_the_handle_and_reads_its_record(tmp_path):
    right, wrong = tmp_path / "right.py", tmp_path / "wrong.py"
    right.write_text(textwrap.dedent(HEADER + RIGHT))
    wrong.write_text(textwrap.dedent(HEADER + WRONG))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(settings_without_torch(tmp_path)),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(right),
            str(wrong),
        ],
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    out, err, status = done.stdout, done.stderr, done.returncode
    lines = [line for line in out.splitlines() if ": error:" in line]
    assert not [line for line in lines if "right.py" in line], out + err
    first = len(textwrap.dedent(HEADER).splitlines())
    marked = {  # each wrong line of the snippet, and what mypy must say about it
        first + i + 1: text.rsplit("# ", 1)[1]
        for i, text in enumerate(textwrap.dedent(WRONG).splitlines())
        if "  # " in text
    }
    found: dict[int, set[str]] = {}
    for line in lines:
        if "wrong.py" in line:
            found.setdefault(int(line.split(":")[1]), set()).add(line.rsplit("[", 1)[1].rstrip("]"))
    expected = {
        "t is a round number": "arg-type",
        "no such figure": "typeddict-item",
        "coding": "arg-type",
        "misspelt field": "attr-defined",
        "not here": "call-arg",
        "the record has no such field": "attr-defined",
    }
    assert status == 1
    assert {n: expected[why] in found.get(n, set()) for n, why in marked.items()} == dict.fromkeys(
        marked, True
    ), out
    assert set(found) == set(marked), out  # nothing else in the snippet is flagged
