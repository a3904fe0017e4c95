"""``python -m bench kernels`` runs end to end on small sizes: table, JSON, and the RESULT line last."""

from __future__ import annotations

import json
import re

from bench.__main__ import main as bench_main


def test_kernels_bench_small(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    assert bench_main(["kernels", "--sizes", "small", "--reps", "3", "--warmup", "1", "--devices", "cpu",
                       "--out", str(out)]) == 0  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    match = re.fullmatch(r"RESULT kernels ratio=([0-9.]+) target=100", lines[-1])
    assert match, lines[-1]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {(r["n"], r["left_inverse"]) for r in rows} == {
        (1_000, "pinv"),
        (1_000, "oblique"),
        (20_000, "pinv"),
        (20_000, "oblique"),
    }
    worst = max(r["ratio"] for r in rows)
    assert float(match.group(1)) == round(worst, 1) and data["meta"]["worst_ratio"] == worst
    for r in rows:
        assert r["copy_ms"] > 0 and r["encode_decode_ms"] > 0 and r["ratio_p25"] <= r["ratio_p75"]
        assert r["max_decode_error"] < 1e-5
