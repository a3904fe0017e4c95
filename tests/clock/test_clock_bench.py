"""``python -m bench clock`` end to end at a tiny size: it times the clock's own work inside real rounds,
prints the table and the RESULT line, and writes its JSON."""

from __future__ import annotations

import json
import re

import pytest

from bench.__main__ import main as bench_main

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a whole benchmark, as the platform's are


def test_clock_bench(ray_session, tmp_path, capsys):
    out = tmp_path / "clock.json"
    argv = [
        "clock",
        "--clients",
        "12",
        "--n-train",
        "480",
        "--n-test",
        "100",
        "--rounds",
        "2",
        "--warmup",
        "1",
    ]
    assert bench_main([*argv, "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    match = re.fullmatch(r"RESULT clock_n12 ratio=(\S+) target=0.05", last)
    assert match, last
    data = json.loads(out.read_text())
    assert data["ratio"] == pytest.approx(float(match.group(1)), abs=5e-4)
    for arm in ("fl", "sifl_m2"):
        assert (
            data["clock_s"][arm]["n"] == 2
            and 0 < data["clock_s"][arm]["median"] < data["round_s"][arm]["median"]
        )
    assert data["devices"]["devices"] == 12
