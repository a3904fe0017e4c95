"""The f-DP one-run bound (sifl_ray.privacy.fdp_audit; Mahloujifar, Melis, Chaudhuri 2024) against DeepMind's
jax_privacy auditor (``CanaryScoreAuditor.epsilon_one_run_fdp``) on shared (scores, inclusion bits) inputs.

jax_privacy needs jax (about 650 MB installed: 18 s to install from this workplace's package mirror, 3 s to
import warm, 11 s cold), too heavy for the test extra; its figures are kept in
``tests/privacy/data/jax_privacy_fdp.json`` with the command that made them (the generator beside it says
how), and every case is recomputed here. Where jax_privacy is importable, the last test recomputes its side
too.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from sifl_ray.privacy import fdp_audit as F
from sifl_ray.privacy.estimate import gdp_epsilon

DATA = Path(__file__).with_name("data")
_spec = importlib.util.spec_from_file_location("jax_privacy_fdp", DATA / "jax_privacy_fdp.py")
assert _spec is not None and _spec.loader is not None
REFERENCE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(REFERENCE)
RECORDED = json.loads((DATA / "jax_privacy_fdp.json").read_text())


def test_the_recorded_cases_are_the_generators():
    assert RECORDED["jax_privacy"] == "2.0.0"
    assert [{k: v for k, v in c.items() if k != "fdp"} for c in RECORDED["cases"]] == REFERENCE.cases()


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: f"seed{c['seed']}-k{c['k']}")
def test_the_bound_is_jax_privacys_to_1e_4(case):
    scores, included = REFERENCE.case_inputs(case)
    got, guesses, correct = F.fdp_lower_bound(
        scores=scores, included=included, delta=case["delta"], confidence=case["confidence"]
    )
    assert got == pytest.approx(case["fdp"], abs=1e-4)
    assert 0 <= correct <= guesses <= case["k"]


def test_the_shared_inputs_cover_strong_and_weak_signals():
    """At least 50 cases, most of them refuting something, some at the largest bounds."""
    values = [c["fdp"] for c in RECORDED["cases"]]
    assert len(values) >= 50 and sum(v > 0 for v in values) >= 40 and max(values) > 7


def test_the_ceiling_at_1000_canaries_is_above_8_and_grows_with_k():
    ceilings = [F.fdp_ceiling(k=k, delta=1e-5) for k in (20, 100, 1000)]
    assert ceilings[0] < ceilings[1] < ceilings[2] and ceilings[2] > 8
    # more inserted canaries, all told apart, refute more (one-sided guesses)
    assert F.fdp_ceiling(k=1000, delta=1e-5, inserted=600) > ceilings[2]


def test_a_gaussian_mechanisms_scores_never_refute_its_own_epsilon():
    """μ-GDP scores (inserted N(μ, 1), left out N(0, 1)) refute the Gaussian mechanism of ε(μ) with
    probability at most 5 %; over 20 seeds, at most 4 do (binomial tail below 1e-3), and with a strong
    signal the bound is well above 0."""
    mu, k = 1.5, 1000  # ε(μ) ≈ 7.2, below the ceiling
    truth = gdp_epsilon(mu=mu, delta=1e-5)
    above = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        included = rng.random(k) < 0.5
        scores = np.where(included, rng.normal(mu, 1, k), rng.normal(0, 1, k))
        bound = F.fdp_lower_bound(scores=scores, included=included, delta=1e-5)[0]
        above += bound > truth
        assert bound > truth / 4
    assert above <= 4


def test_the_refutation_margin_falls_with_epsilon():
    margins = [
        F.refutation_margin(canaries=200, guesses=50, correct=48, significance=0.05, epsilon=e, delta=1e-5)
        for e in (0.0, 1.0, 2.0, 4.0, 8.0)
    ]
    assert all(a >= b for a, b in itertools.pairwise(margins)) and margins[0] > 0 > margins[-1]
    got = F.refuted_epsilon(canaries=200, guesses=50, correct=48, significance=0.05, delta=1e-5)
    assert (
        F.refutation_margin(
            canaries=200, guesses=50, correct=48, significance=0.05, epsilon=got - 1e-3, delta=1e-5
        )
        > 0
    )


def test_the_bound_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="at least one canary inserted and one left out"):
        F.fdp_lower_bound(scores=np.zeros(4), included=np.ones(4, dtype=bool), delta=1e-5)
    with pytest.raises(ValueError, match="delta and confidence in"):
        F.fdp_lower_bound(scores=np.zeros(4), included=np.arange(4) < 2, delta=0.0)


def test_against_jax_privacy_itself_where_it_is_installed():
    auditing = pytest.importorskip("jax_privacy.auditing")
    for case in RECORDED["cases"][::6]:
        scores, included = REFERENCE.case_inputs(case)
        auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
        theirs = auditor.epsilon_one_run_fdp(1 - case["confidence"], case["delta"])
        ours = F.fdp_lower_bound(
            scores=scores, included=included, delta=case["delta"], confidence=case["confidence"]
        )
        assert ours[0] == pytest.approx(theirs, abs=1e-4)
