"""The mutation score of a mutmut run in a staging folder (tests/mutation/run.sh prints it at the end).

Score = killed / (checked − equivalent), checked = killed + survived: a timeout counts as killed (the
mutant changed behaviour), a mutant listed in ``equivalent.txt`` (beside this file, one ``name  # why`` a
line) is left out of the total, and every other survivor is listed with its diff, to be killed by a test or
argued equivalent there.

    python tests/mutation/score.py /tmp/sifl-mutation
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def equivalent_mutants(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            out[name.strip()] = why.strip()
    return out


def main(stage: Path, judged_file: str = "equivalent.txt") -> None:
    subprocess.run(["mutmut", "export-cicd-stats"], cwd=stage, check=True, capture_output=True)
    stats = json.loads((stage / "mutants" / "mutmut-cicd-stats.json").read_text())
    listing = subprocess.run(["mutmut", "results"], cwd=stage, check=True, capture_output=True, text=True)
    status = dict(
        (name.strip(), state.strip())
        for name, _, state in (line.rpartition(":") for line in listing.stdout.splitlines())
        if name.strip()
    )
    listed = Path(__file__).with_name(judged_file or "equivalent.txt")
    equivalent = equivalent_mutants(listed) if listed.exists() else {}
    survivors = [n for n, s in status.items() if s == "survived" and n not in equivalent]
    judged = [n for n, s in status.items() if s == "survived" and n in equivalent]
    killed = int(stats["killed"]) + int(stats.get("timeout", 0))
    checked = killed + int(stats["survived"])  # a run cut short leaves the rest "not checked"
    denominator = checked - len(judged)
    print(f"mutmut: {json.dumps(stats)}")
    print(
        f"score: {killed} killed of {denominator} non-equivalent mutants = "
        f"{100 * killed / max(denominator, 1):.1f} % ({len(judged)} judged equivalent, "
        f"{len(survivors)} survivors to kill)"
    )
    other = {n: s for n, s in status.items() if s not in ("survived", "killed", "timeout")}
    if other:
        print(f"{len(other)} of {stats['total']} mutants not run to a verdict (a run cut short?)")
    for name in survivors:
        diff = subprocess.run(["mutmut", "show", name], cwd=stage, capture_output=True, text=True)
        print(diff.stdout)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sifl-mutation"), *sys.argv[2:3])
