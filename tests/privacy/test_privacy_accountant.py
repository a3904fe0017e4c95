"""The SIFL accountant: formula per release, worst element, history, JSON-safe state, no key material."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseSpec
from sifl_ray.privacy import CAVEAT, SiflAccountant, describe_release_epsilons, release_epsilons
from sifl_ray.privacy import formulas as F
from sifl_ray.specs import Coding


def approx(expected, **kw):
    """``pytest.approx`` without its default absolute tolerance of 1e-12, which would pass any ε < 1e-12."""
    kw.setdefault("rel", 1e-6)
    kw.setdefault("abs", 0.0)
    return pytest.approx(expected, **kw)


DELTA = 1e-5


def uniform_key(n_tilde: int = 6, *, p1: float = 1e-3, n1: float = 1e3, n1_max: float | None = None):
    """Norms of the paper's §6 example, the same for every row."""
    return KeyNorms(
        p1_row_l2=torch.full((n_tilde,), p1, dtype=torch.float64),
        p1_row_l1=torch.full((n_tilde,), p1, dtype=torch.float64),
        n1_row_l2=torch.full((n_tilde,), n1, dtype=torch.float64),
        n1_row_maxabs=torch.full((n_tilde,), n1 if n1_max is None else n1_max, dtype=torch.float64),
        p1l_spectral=1e3,
        exact=True,
        note="uniform test norms",
    )


PAPER_AGG = AggregatorNorms(
    p2_abs=torch.tensor([1e-3, 1e-3], dtype=torch.float64), p2r_l2=1e3, n2_spectral=1.0
)


def dense_key(n: int = 5, extra: int = 3, seed: int = 0):
    """A real dense key (random P1, oblique left inverse, kernel basis N1) and its exact norms."""
    rng = np.random.default_rng(seed)
    nt = n + extra
    P1 = rng.normal(size=(nt, n)) * 1e-2
    N1 = rng.normal(size=(nt, extra)) * rng.uniform(0.5, 50, size=(nt, 1))  # rows of very different sizes
    P1L = np.linalg.pinv(np.hstack([P1, N1]))[:n]  # P1L P1 = I, P1L N1 = 0
    assert np.allclose(P1L @ P1, np.eye(n)) and np.allclose(P1L @ N1, 0)
    t = torch.from_numpy
    norms = KeyNorms(
        p1_row_l2=t(np.linalg.norm(P1, axis=1)),
        p1_row_l1=t(np.abs(P1).sum(axis=1)),
        n1_row_l2=t(np.linalg.norm(N1, axis=1)),
        n1_row_maxabs=t(np.abs(N1).max(axis=1)),
        p1l_spectral=float(np.linalg.norm(P1L, 2)),
        exact=True,
        note="dense",
    )
    return P1, N1, P1L, norms


def record_all(acc: SiflAccountant, key: KeyNorms, *, round: int = 0, dist: str = "gaussian", scale=1e3):
    for coding in (Coding.M1, Coding.M2):
        acc.record_round(
            arm=f"sifl_{coding.value}",
            round=round,
            key_norms=key,
            agg_norms=PAPER_AGG,
            noise1=NoiseSpec(dist, scale),
            noise2=NoiseSpec(dist, scale),
            clip=1000.0,
            local_size=[6000] * 10,
            total_size=60000,
            delta=DELTA,
            coding=coding,
        )


def test_paper_example_figures_through_the_accountant():
    # Exact sensitivities 2C/|D_i| = 1/3 and 2C/|D| = 1/30 (the paper rounds them to 0.33 and 0.033).
    acc = SiflAccountant()
    record_all(acc, uniform_key())
    q = F.gaussian_tail_inverse(delta=DELTA)
    r_local, r_global = 1e-3 / 3 / 1e9, 1e-3 / 30 * 1e-3 / 1e6
    assert acc.epsilon(release="local", arm="sifl_m2") == approx(r_local * q + r_local**2 / 2, rel=1e-9)
    assert acc.epsilon(release="local", arm="sifl_m2") == approx(1.4e-12, rel=0.02)
    assert acc.epsilon(release="global", arm="sifl_m2") == approx(r_global * q, rel=1e-9)
    assert acc.epsilon(release="global", arm="sifl_m2", bound="paper") == approx(
        r_global * q / 1.001, rel=1e-6
    )
    # M1: no code 2, so the upload's noise is ‖N1^j‖σ1 = 1e6 and the broadcast uses Δ^w.
    assert acc.epsilon(release="local", arm="sifl_m1") == approx(1e3 * r_local * q, rel=1e-6)
    assert acc.epsilon(release="broadcast", arm="sifl_m1") == approx(1e-3 / 30 / 1e6 * q, rel=1e-6)

    lap = SiflAccountant()
    record_all(lap, uniform_key(), dist="laplace")
    assert lap.epsilon(release="local", arm="sifl_m2", bound="paper") == approx(1e-3 / 3 / 1e9)
    assert lap.epsilon(release="global", arm="sifl_m2", bound="paper") == approx(1e-3 / 30 * 1e-3 / 1.001e6)
    for rec in lap.history():
        assert rec.delta == 0.0 and rec.mechanism == "laplace"
        assert rec.epsilon >= rec.epsilon_paper


def test_worst_element_of_a_real_dense_key():
    P1, N1, _, norms = dense_key()
    rels = {
        r.release: r
        for r in release_epsilons(
            key_norms=norms,
            agg_norms=PAPER_AGG,
            noise1=NoiseSpec("laplace", 2.0),
            noise2=NoiseSpec("laplace", 2.0),
            clip=5.0,
            local_size=[50, 40, 70],
            total_size=160,
            delta=DELTA,
            coding=Coding.M2,
        )
    }
    d_local, d_global = 10.0 / 40, 10.0 / 160  # the smallest client sets the local sensitivity
    # Straight from the matrices, row by row, without the formulas module.
    p2r_max = 1e3 / math.sqrt(2)
    sound = [np.abs(P1[j]).sum() * d_local / (np.abs(N1[j]).max() * 2.0 * p2r_max) for j in range(len(P1))]
    paper = [np.abs(P1[j]).sum() * d_local / (np.linalg.norm(N1[j]) * 2.0 * 1e3) for j in range(len(P1))]
    local = rels["local"]
    assert local.epsilon == approx(max(sound), rel=1e-12)
    assert local.worst_row == int(np.argmax(sound))
    assert local.epsilon_paper == approx(max(paper), rel=1e-12)
    assert local.worst_row_paper == int(np.argmax(paper))
    assert local.sensitivity == approx(d_local)
    glob = rels["global"]
    sound_g = [np.abs(P1[j]).sum() * d_global * 1e-3 / (np.abs(N1[j]).max() * 2.0) for j in range(len(P1))]
    assert glob.epsilon == approx(max(sound_g), rel=1e-12)
    assert (glob.worst_row, glob.worst_column) == (int(np.argmax(sound_g)), 0)


def test_epsilon_queries_latest_or_given_round():
    acc = SiflAccountant()
    record_all(acc, uniform_key(), round=0, scale=1e3)
    record_all(acc, uniform_key(), round=1, scale=1e2)  # less noise in round 1
    e0 = acc.epsilon(release="global", arm="sifl_m2", round=0)
    e1 = acc.epsilon(release="global", arm="sifl_m2", round=1)
    assert e1 > e0
    assert acc.epsilon(release="global", arm="sifl_m2") == e1
    assert len(acc.history(arm="sifl_m2")) == 4 and len(acc) == 8
    with pytest.raises(KeyError, match="broadcast"):
        acc.epsilon(release="broadcast", arm="sifl_m2")
    with pytest.raises(KeyError, match="round 7"):
        acc.epsilon(release="local", arm="sifl_m1", round=7)
    with pytest.raises(ValueError, match="already recorded"):
        record_all(acc, uniform_key(), round=1)


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, list | tuple):
        yield obj
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def test_summary_and_state_hold_scalars_only():
    marker = 1234.5678  # a row norm that must not leak into any summary
    key = uniform_key(n_tilde=50, n1=marker)
    acc = SiflAccountant()
    record_all(acc, key)
    for blob in (acc.summary(), acc.state_dict()):
        json.dumps(blob, allow_nan=False)  # JSON-safe
        for leaf in _leaves(blob):
            assert not isinstance(leaf, torch.Tensor | np.ndarray)
            if isinstance(leaf, list):
                assert all(isinstance(x, dict) for x in leaf)  # only the list of records, no number arrays
        assert str(marker) not in json.dumps(blob)
    arm = acc.summary()["arms"]["sifl_m2"]
    assert set(arm) == {"local", "global"}
    for row in arm.values():
        assert row["scope"] == "per-element, per-round"
        assert row["caveat"] == CAVEAT
        assert {"epsilon", "epsilon_paper", "delta", "mechanism", "worst_row", "norms_exact"} <= set(row)


def test_state_dict_round_trip_including_infinite_epsilon():
    acc = SiflAccountant()
    record_all(acc, uniform_key(), round=0)
    record_all(acc, uniform_key(), round=1, scale=0.0)  # no noise: ε = inf
    state = json.loads(json.dumps(acc.state_dict(), allow_nan=False))
    other = SiflAccountant()
    other.load_state_dict(state)
    assert other.history() == acc.history()
    assert other.epsilon(release="local", arm="sifl_m1") == math.inf
    assert other.epsilon(release="local", arm="sifl_m1", round=0) == acc.epsilon(
        release="local", arm="sifl_m1", round=0
    )
    with pytest.raises(ValueError, match="format"):
        other.load_state_dict({"records": []})


def test_report_says_what_the_numbers_mean():
    acc = SiflAccountant()
    record_all(acc, uniform_key(), dist="laplace")
    text = " ".join(acc.report().split())  # the report is wrapped; compare words, not line breaks
    assert "per-element, per-round" in text
    assert "no finite ε" in text
    assert "whole released vector" in text
    assert "not composed" in text and "many rounds" in text
    assert "sifl_m1" in text and "broadcast" in text and "sifl_m2" in text and "global" in text
    assert "paper's formula" in text
    assert "No releases recorded." in SiflAccountant().report()


def test_describe_release_epsilons_for_sifl_describe():
    kw = {
        "key_norms": uniform_key(),
        "clip": 1000.0,
        "local_size": 6000,
        "total_size": 60000,
        "delta": DELTA,
    }
    m1 = describe_release_epsilons(
        agg_norms=None, noise1=NoiseSpec("gaussian", 0.0), noise2=None, coding=Coding.M1, **kw
    )
    assert set(m1["releases"]) == {"local", "broadcast"}
    assert m1["releases"]["local"]["epsilon"] == "inf"  # zero noise: no guarantee, and still valid JSON
    json.dumps(m1, allow_nan=False)
    m2 = describe_release_epsilons(
        agg_norms=PAPER_AGG,
        noise1=NoiseSpec("laplace", 1e3),
        noise2=NoiseSpec("laplace", 1e3),
        coding=Coding.M2,
        **kw,
    )
    assert set(m2["releases"]) == {"local", "global"}
    assert m2["scope"] == "per-element, per-round" and m2["caveat"] == CAVEAT
    local = m2["releases"]["local"]
    assert local["epsilon_paper"] == approx(1e-3 / 3 / 1e9)
    assert local["epsilon"] >= local["epsilon_paper"]
    assert local["delta"] == 0.0
    with pytest.raises(ValueError, match="agg_norms"):
        describe_release_epsilons(agg_norms=None, noise1=NoiseSpec(), noise2=None, coding=Coding.M2, **kw)


def test_bounded_norms_are_flagged():
    key = uniform_key()
    bounded = KeyNorms(
        p1_row_l2=key.p1_row_l2,
        p1_row_l1=key.p1_row_l1,
        n1_row_l2=key.n1_row_l2,
        n1_row_maxabs=key.n1_row_maxabs,
        p1l_spectral=key.p1l_spectral,
        exact=False,
        note="structured transform: bounds",
    )
    acc = SiflAccountant()
    record_all(acc, bounded)
    assert all(not r.norms_exact for r in acc.history())
    assert acc.summary()["arms"]["sifl_m1"]["local"]["norms_exact"] is False
    assert "conservative bounds" in acc.history()[0].note


@pytest.mark.parametrize("left_inverse", ["oblique", "pinv"])
def test_m2_global_epsilon_uses_the_exact_std_of_each_element(left_inverse):
    """The sound M2 global ε is Theorem 2 with the element's real std, R1 and R2 noise in quadrature,
    computed from a real dense key pair; the std itself is checked against noise drawn through the codes."""
    from sifl_ray.coding import make_aggregator_key, make_server_key

    n, m, p, sigma1, sigma2 = 6, 4, 3, 2.0, 3.0
    key = make_server_key(
        n=n, n_tilde=n + m, backend="dense", left_inverse=left_inverse, alpha=0.5, beta=0.05, seed=11
    )
    agg = make_aggregator_key(p=p, gamma=0.5, eta=1.0, seed=12)
    P1, P1L, N1 = (x.numpy() for x in key.dense())
    N2, P2 = agg.N2.numpy(), agg.P2.numpy()
    # Straight from the matrices: s_jm = √((‖N1^j‖σ1)² + (‖(P1 P1L)^j‖‖N2[:, m]‖σ2)²).
    s1 = np.linalg.norm(N1, axis=1)[:, None] * sigma1
    s2 = np.linalg.norm(P1 @ P1L, axis=1)[:, None] * np.linalg.norm(N2, axis=0)[None, :] * sigma2
    std = np.sqrt(s1**2 + s2**2)
    d_global = 2.0 * 5.0 / 120
    a = np.linalg.norm(P1, axis=1)[:, None] * d_global * np.abs(P2)[None, :]
    q = F.gaussian_tail_inverse(delta=DELTA)
    want = a / std * q + (a / std) ** 2 / 2
    glob = release_epsilons(
        key_norms=key.norms(),
        agg_norms=agg.norms(),
        noise1=NoiseSpec("gaussian", sigma1),
        noise2=NoiseSpec("gaussian", sigma2),
        clip=5.0,
        local_size=[40, 80],
        total_size=120,
        delta=DELTA,
        coding=Coding.M2,
    )[1]
    assert glob.release == "global" and glob.norms_exact
    assert glob.epsilon == approx(want.max(), rel=1e-9)
    assert (glob.worst_row, glob.worst_column) == np.unravel_index(np.argmax(want), want.shape)
    r1_only = a / s1 * q + (a / s1) ** 2 / 2
    assert glob.epsilon_paper < glob.epsilon < r1_only.max()  # the paper's overestimates the std
    # The std is the real one: W' noise = P1 P1L R2 N2 + N1 R1, drawn through the codes themselves.
    gen = torch.Generator().manual_seed(0)
    zero = torch.zeros(n + m, dtype=torch.float64)

    def noise(*shape: int, scale: float) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=gen, dtype=torch.float64)

    draws = torch.stack(
        [
            key.reencode(agg.encode(zero, noise(n + m, p - 1, scale=sigma2)), noise(m, p, scale=sigma1))
            for _ in range(4000)
        ]
    )
    np.testing.assert_allclose(draws.std(0).numpy(), std, rtol=0.06)


def test_m2_round0_is_an_m1_round():
    """M2's round 0 starts from the server's M1 encoding: its uploads carry N1 r1 (no ‖P2R‖ factor) and the
    clients received M1's broadcast, so it is accounted with M1's figures, ‖P2R‖ = 1e3 times M2's local."""
    from sifl_ray.privacy import arm_release_epsilons

    kw = {
        "key_norms": uniform_key(),
        "noise1": NoiseSpec("gaussian", 1e3),
        "clip": 1000.0,
        "local_size": [6000] * 10,
        "total_size": 60000,
        "delta": DELTA,
    }
    arm = arm_release_epsilons(coding=Coding.M2, agg_norms=PAPER_AGG, noise2=NoiseSpec("gaussian", 1e3), **kw)
    first = {r.release: r for r in arm.of_round(from_initial_broadcast=True)}
    later = {r.release: r for r in arm.of_round(from_initial_broadcast=False)}
    assert set(first) == {"local", "broadcast"} and set(later) == {"local", "global"}
    m1 = {r.release: r for r in release_epsilons(coding=Coding.M1, **kw)}
    assert first == m1
    assert first["local"].epsilon / later["local"].epsilon == approx(PAPER_AGG.p2r_l2, rel=1e-6)
    # M1 arms are the same every round.
    m1_arm = arm_release_epsilons(coding=Coding.M1, **kw)
    assert m1_arm.of_round(from_initial_broadcast=True) == m1_arm.of_round(from_initial_broadcast=False)
    # Recorded per round, the accountant's history says which is which.
    acc = SiflAccountant()
    for t in range(3):
        acc.record(arm="sifl_m2", round=t, releases=arm.of_round(from_initial_broadcast=t == 0))
    assert acc.epsilon(release="broadcast", arm="sifl_m2") == first["broadcast"].epsilon
    assert [r.round for r in acc.history(release="global")] == [1, 2]
    assert acc.summary()["arms"]["sifl_m2"]["local"]["largest_per_round_epsilon"] == first["local"].epsilon
