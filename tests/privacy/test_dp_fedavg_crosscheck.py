"""RDP against PLD on the same DP-FedAvg schedule (dp_fedavg.cross_check): they agree within the measured
slack where the slack is claimed, and a planted mismatch (one accountant handed another mechanism) is flagged.

The measurements behind MAX_RDP_PLD_RATIO (cross_check's docstring) at δ = 1e-5, re-measured here: inside the
checked region (PLD's ε in [1, 50], q·T ≥ 1) the worst of 72 grid points was z = 0.8, q = 0.01, T = 100
(ratio 1.45); outside it, z = 2, q = 0.001, T = 1 (ratio 80, ε ≪ 1) and z = 0.5, q = 0.001, T = 10
(ratio 2.9, q·T < 1) show why the ratio is not checked there.
"""

from __future__ import annotations

import logging
import math

import pytest

from sifl_ray.privacy import dp_fedavg as D

DELTA = 1e-5


@pytest.fixture(autouse=True)
def _quiet_rdp():
    """dp_accounting logs a warning per RDP order it cannot evaluate at small z; nothing to act on here."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize(
    ("z", "q", "steps"),
    [
        (1.0, 0.05, 100),  # a typical DP-FedAvg schedule: ratio ≈ 1.15
        (0.8, 0.01, 100),  # the worst point of the grid inside the checked region
        (1.5, 0.05, 100),
    ],
)
def test_the_accountants_agree_inside_the_checked_region(z, q, steps):
    res = D.cross_check(noise_multiplier=z, sample_rate=q, steps=steps, delta=DELTA)
    low, high = D.RATIO_CHECKED_EPSILONS
    assert low <= res.pld <= high and q * steps >= 1  # the point is where the ratio is checked
    assert not res.disagree and res.reason == ""
    # PLD is the tighter bound; its pessimistic rounding could lift it at most steps·Δ above the exact ε
    assert res.pld <= res.rdp + steps * D.PLD_DISCRETIZATION
    assert 1.0 <= res.ratio <= D.MAX_RDP_PLD_RATIO
    assert res.ratio == pytest.approx(res.rdp / res.pld, rel=1e-12)
    assert res.rdp == D.epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=DELTA, accountant="rdp")


@pytest.mark.parametrize(("z", "q", "steps"), [(2.0, 0.001, 1), (0.5, 0.001, 10)])
def test_outside_the_region_the_ratio_is_reported_not_flagged(z, q, steps):
    """Small ε or q·T < 1: RDP is known to be loose there, well beyond the factor, and that is no bug."""
    res = D.cross_check(noise_multiplier=z, sample_rate=q, steps=steps, delta=DELTA)
    assert res.ratio > D.MAX_RDP_PLD_RATIO
    assert not res.disagree


def test_edges_nothing_released_and_no_noise():
    none = D.cross_check(noise_multiplier=1.0, sample_rate=0.05, steps=0, delta=DELTA)
    assert (none.rdp, none.pld, none.ratio, none.disagree) == (0.0, 0.0, 1.0, False)
    bare = D.cross_check(noise_multiplier=0.0, sample_rate=0.05, steps=10, delta=DELTA)
    assert (bare.rdp, bare.pld, bare.ratio, bare.disagree) == (math.inf, math.inf, 1.0, False)


def test_a_planted_mismatch_is_flagged():
    """The bug the check is for: the two accountants composing different mechanisms."""
    kw = {"noise_multiplier": 1.0, "steps": 100, "delta": DELTA}
    rdp = D.epsilon(**kw, sample_rate=0.05, accountant="rdp")
    # PLD handed twice the sample rate: above RDP, which no rounding explains
    pld_wrong_q = D.epsilon(**kw, sample_rate=0.1, accountant="pld")
    reason = D._disagreement(rdp=rdp, pld=pld_wrong_q, steps=100, sample_rate=0.05)
    assert reason.startswith("PLD's ε") and "another mechanism" in reason
    # RDP handed twice the sample rate: beyond the factor
    rdp_wrong_q = D.epsilon(**kw, sample_rate=0.1, accountant="rdp")
    pld = D.epsilon(**kw, sample_rate=0.05, accountant="pld")
    reason = D._disagreement(rdp=rdp_wrong_q, pld=pld, steps=100, sample_rate=0.05)
    assert reason.startswith("RDP's ε") and f"beyond the {D.MAX_RDP_PLD_RATIO}" in reason


def test_the_comparison_at_its_thresholds():
    """The internal comparison on made-up numbers, at each edge of the slack."""
    slack = 100 * D.PLD_DISCRETIZATION

    def compare(rdp: float, pld: float, steps: int = 100, q: float = 0.05) -> str:
        return D._disagreement(rdp=rdp, pld=pld, steps=steps, sample_rate=q)

    assert compare(2.0, 2.0 + slack) == ""  # within PLD's rounding over 100 rounds
    assert compare(2.0, 2.0 + 1.01 * slack) != ""
    assert compare(2.0, 2.0 + 1.01 * slack, steps=200) == ""  # more rounds, more rounding
    factor = D.MAX_RDP_PLD_RATIO
    assert compare(factor * 2.0, 2.0) == ""
    assert compare(factor * 2.0 * 1.001, 2.0) != ""
    assert compare(3.0, 0.5) == ""  # below the checked ε range: RDP's conversion dominates
    assert compare(3.0 * 60, 60.0) == ""  # above it: RDP's largest order limits it
    assert compare(3.0, 1.5, steps=10, q=0.05) == ""  # q·T = 0.5 < 1
    assert compare(3.0, 1.5, steps=20, q=0.05) != ""  # q·T = 1
