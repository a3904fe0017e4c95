"""Reference figures of the f-DP one-run bound from DeepMind's jax_privacy (``CanaryScoreAuditor.
epsilon_one_run_fdp``, its default Bonferroni threshold strategy), for tests/privacy/test_fdp_audit.py.

jax_privacy needs jax (about 650 MB installed), too heavy for the test extra, so its figures are kept here
and the test recomputes each case with the platform's own code. To make them again (a virtual environment
of its own: nothing of the project's is installed there):

    python -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install "jax-privacy==2.0.0" jax
    /tmp/jaxp/bin/python tests/privacy/data/jax_privacy_fdp.py > tests/privacy/data/jax_privacy_fdp.json

Every case's scores and inclusion bits come from ``numpy.random.default_rng(seed)`` (PCG64, the same
stream on every NumPy version), built by :func:`case_inputs`, which the test imports from this file.
"""

from __future__ import annotations

import json
import sys

import numpy as np

SIZES = (20, 50, 100, 200, 500, 1000)
SHIFTS = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0)
LEVELS = ((1e-5, 0.95), (1e-3, 0.95), (1e-5, 0.975), (1e-6, 0.9))


def cases() -> list[dict]:
    """60 cases: every size, signal strength and level in turn; every fifth case's scores rounded to one
    decimal (ties between canaries), and one case per size perfectly separated."""
    out = []
    for seed in range(60):
        delta, confidence = LEVELS[seed % len(LEVELS)]
        out.append(
            {
                "seed": seed,
                "k": SIZES[seed % len(SIZES)],
                "shift": SHIFTS[seed % len(SHIFTS)],
                "decimals": 1 if seed % 5 == 0 else None,
                "separated": seed >= 54,
                "delta": delta,
                "confidence": confidence,
            }
        )
    return out


def case_inputs(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """The case's scores and inclusion bits: each canary in with probability ½, an inserted one scoring
    N(shift, 1), a left-out one N(0, 1) (or exactly 1 and 0 when separated)."""
    rng = np.random.default_rng(case["seed"])
    included = rng.random(case["k"]) < 0.5
    included[0], included[1] = True, False  # at least one of each
    if case["separated"]:
        return included.astype(np.float64), included
    scores = np.where(included, rng.normal(case["shift"], 1.0, case["k"]), rng.normal(0.0, 1.0, case["k"]))
    if case["decimals"] is not None:
        scores = np.round(scores, case["decimals"])
    return scores, included


def main() -> None:
    import jax_privacy
    from jax_privacy import auditing

    rows = []
    for case in cases():
        scores, included = case_inputs(case)
        auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
        significance = 1 - case["confidence"]
        rows.append({**case, "fdp": float(auditor.epsilon_one_run_fdp(significance, case["delta"]))})
    version = getattr(jax_privacy, "__version__", "unknown")
    json.dump({"jax_privacy": version, "command": " ".join(sys.argv), "cases": rows}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
