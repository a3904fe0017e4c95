"""``python -m bench check``: a ratio more than 10 % worse than the last recorded on the same CPU kind is
flagged; other CPUs' ratios are never compared; ``--record`` appends to the history."""

from __future__ import annotations

import json

from bench import check
from bench._common import publish, result_line


def _result(folder, name, ratio, cpu, avx512=False):
    res = {"name": name}
    publish(folder / f"{name}.json", res, f"report\n{result_line(name, ratio, 1.0)}")
    data = json.loads((folder / f"{name}.json").read_text())
    data["machine"].update(cpu=cpu, avx512=avx512)  # as if measured there
    (folder / f"{name}.json").write_text(json.dumps(data))


def test_a_ratio_ten_percent_worse_on_the_same_cpu_is_flagged(tmp_path, capsys):
    results, hist = tmp_path / "results", tmp_path / "history.jsonl"
    results.mkdir()
    _result(results, "overhead_n1000", 0.40, "AMD EPYC")
    args = ["--results", str(results), "--history", str(hist)]
    assert check.main(args) == 0  # nothing recorded yet: new
    assert check.main([*args, "--record"]) == 0
    recorded = [json.loads(line) for line in hist.read_text().splitlines()]
    assert recorded[0]["name"] == "overhead_n1000" and recorded[0]["cpu"] == "AMD EPYC"
    _result(results, "overhead_n1000", 0.43, "AMD EPYC")  # 7.5 % worse: within the margin
    assert check.main(args) == 0
    _result(results, "overhead_n1000", 0.45, "AMD EPYC")  # 12.5 % worse
    assert check.main(args) == 1
    assert "worse by more than 10%" in capsys.readouterr().err
    for cpu, avx512 in (("Intel(R) Xeon(R)", False), ("AMD EPYC", True)):  # another kind: not compared
        _result(results, "overhead_n1000", 0.60, cpu, avx512)
        assert check.main(args) == 0
        rows = check.compare(check.results(results), check.history(hist))
        assert [(r["verdict"], r["last"]) for r in rows] == [("new", None)]
    assert rows[0]["cpu"] == "AMD EPYC AVX-512"


def test_publish_writes_the_result_and_the_cpu_it_was_measured_on(tmp_path):
    publish(tmp_path / "x.json", {"name": "x"}, f"line\n{result_line('x', 0.5, 0.6)}")
    data = json.loads((tmp_path / "x.json").read_text())
    assert data["result"] == {"name": "x", "ratio": 0.5, "target": 0.6}
    assert data["machine"]["cpu"] and isinstance(data["machine"]["avx512"], bool)
