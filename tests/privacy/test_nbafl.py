"""The NbAFL baseline: calibration, clipping, and the privatized upload."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.privacy import formulas as F
from sifl_ray.privacy.nbafl import (
    GUARANTEES,
    clip_model,
    nbafl_exposures,
    nbafl_guarantee,
    nbafl_sigma,
    privatize_upload,
)


def approx(expected, **kw):
    """``pytest.approx`` without its default absolute tolerance of 1e-12, which would pass any ε < 1e-12."""
    kw.setdefault("rel", 1e-6)
    kw.setdefault("abs", 0.0)
    return pytest.approx(expected, **kw)


# Fig. 6's baseline: C = 10, δ = 1e-5, N_c = 50 clients of 60,000/50 = 1,200 samples.
CLIP, DELTA, SIZE = 10.0, 1e-5, 1200


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_classical_sigma_golden_value():
    # σ = Δ·√(2 ln(1.25/δ))/ε with Δ = 2C/|D_i| = 1/60.
    expected = (2 * CLIP / SIZE) * math.sqrt(2 * math.log(1.25 / DELTA)) / 1.0
    assert nbafl_sigma(epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE) == approx(expected)
    assert expected == approx(0.0807468, rel=1e-6)
    assert nbafl_sigma(epsilon=5.0, delta=DELTA, clip=CLIP, local_size=SIZE) == approx(expected / 5)
    assert nbafl_sigma(epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE, exposures=3) == approx(
        3 * expected
    )


def test_multi_round_calibration_golden_values():
    """NbAFL's Theorem 1 over T uploads: σ = c·L·Δs/ε with L = T; c = √(2 ln(1.25/δ)), Δs = 2C/m."""
    c = math.sqrt(2 * math.log(1.25e5))
    assert c == approx(4.844805262, rel=1e-9)
    # The quickstart's arm: C = 10, m = 134 (1347 digits over 10 clients), T = 25 rounds, ε = 1.
    L = nbafl_exposures(exposures="multi_round", rounds=25)
    assert L == 25 and nbafl_exposures(exposures="per_round", rounds=25) == 1
    sigma = nbafl_sigma(epsilon=1.0, delta=DELTA, clip=10.0, local_size=134, exposures=L)
    assert sigma == approx(c * 25 * (20 / 134) / 1.0, rel=1e-12)
    assert sigma == approx(18.07763, rel=1e-6)
    assert sigma == approx(25 * nbafl_sigma(epsilon=1.0, delta=DELTA, clip=10.0, local_size=134), rel=1e-12)
    # dp_compare: m = 1200, T = 30, ε = 20: σ = c·30·(1/60)/20.
    assert nbafl_sigma(epsilon=20.0, delta=DELTA, clip=CLIP, local_size=SIZE, exposures=30) == approx(
        c * 30 / 60 / 20, rel=1e-12
    )
    # The Gaussian formula is the other, independent choice: the analytic one composes the T uploads
    # exactly (one Gaussian of sensitivity √T·Δ), so its σ meets δ exactly there.
    d = 2 * CLIP / SIZE
    an = nbafl_sigma(
        epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE, exposures=30, calibration="analytic"
    )
    assert F.gaussian_mechanism_delta(epsilon=1.0, sigma=an, sensitivity=math.sqrt(30) * d) == approx(
        DELTA, rel=1e-6
    )
    assert an < nbafl_sigma(epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE, exposures=30)


def test_exposures_and_guarantee_labels():
    assert GUARANTEES["multi_round"] == "(ε, δ) for all T uploads of a client (NbAFL Theorem 1)"
    assert GUARANTEES["per_round"] == "(ε, δ) per upload, per round only"
    label = nbafl_guarantee(exposures="multi_round", rounds=25, calibration="classical")
    assert label.startswith(GUARANTEES["multi_round"]) and "L = T = 25" in label and "ε < 1" in label
    label = nbafl_guarantee(exposures="per_round", rounds=25, calibration="analytic")
    assert label.startswith(GUARANTEES["per_round"]) and "L = 1" in label and "analytic" in label
    with pytest.raises(ValueError, match="exposures must be one of multi_round, per_round"):
        nbafl_exposures(exposures="all", rounds=3)
    with pytest.raises(ValueError, match="rounds"):
        nbafl_exposures(exposures="multi_round", rounds=0)
    with pytest.raises(ValueError, match="calibration"):
        nbafl_guarantee(exposures="per_round", rounds=3, calibration="multi_round")


def test_classical_calibration_validity_is_as_documented():
    d = 2 * CLIP / SIZE
    for eps in (0.1, 0.5, 0.99, 1.0, 5.0):  # proven for ε < 1; still holds at 1 and 5 here
        sigma = nbafl_sigma(epsilon=eps, delta=DELTA, clip=CLIP, local_size=SIZE)
        assert F.gaussian_mechanism_delta(epsilon=eps, sigma=sigma, sensitivity=d) <= DELTA
    for eps, documented in ((10.0, 2.3e-5), (20.0, 1.5e-3)):  # the docstring's warning: it fails at large ε
        sigma = nbafl_sigma(epsilon=eps, delta=DELTA, clip=CLIP, local_size=SIZE)
        assert F.gaussian_mechanism_delta(epsilon=eps, sigma=sigma, sensitivity=d) == approx(
            documented, rel=0.05
        )


@pytest.mark.parametrize("eps", [0.5, 1.0, 10.0, 20.0])
def test_analytic_calibration_is_the_smallest_valid_sigma(eps):
    d = 2 * CLIP / SIZE
    sigma = nbafl_sigma(epsilon=eps, delta=DELTA, clip=CLIP, local_size=SIZE, calibration="analytic")
    assert F.gaussian_mechanism_delta(epsilon=eps, sigma=sigma, sensitivity=d) <= DELTA
    assert F.gaussian_mechanism_delta(epsilon=eps, sigma=sigma * (1 - 1e-6), sensitivity=d) > DELTA


def test_invalid_calibration_inputs():
    with pytest.raises(ValueError, match="epsilon"):
        nbafl_sigma(epsilon=0.0, delta=DELTA, clip=CLIP, local_size=SIZE)
    with pytest.raises(ValueError, match="delta"):
        nbafl_sigma(epsilon=1.0, delta=1.0, clip=CLIP, local_size=SIZE)
    with pytest.raises(ValueError, match="calibration"):
        nbafl_sigma(epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE, calibration="rdp")


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=64),
    clip=st.floats(1e-3, 1e3),
)
def test_clipping_bound_holds(values, clip):
    w = torch.tensor(values, dtype=torch.float32)
    before = w.clone()
    out = clip_model(w, clip=clip)
    assert torch.equal(w, before)  # the input is untouched
    assert out.dtype == torch.float64 and out.shape == w.shape
    norm_in = float(torch.linalg.vector_norm(w.double()))
    norm_out = float(torch.linalg.vector_norm(out))
    assert norm_out <= clip
    if norm_in <= clip:
        assert torch.equal(out, w.double())
    else:
        assert norm_out == approx(clip, rel=1e-12)
        assert torch.allclose(out * (norm_in / norm_out), w.double(), rtol=1e-9, atol=0)


def test_clip_zero_vector_and_non_finite():
    z = torch.zeros(10)
    out = clip_model(z, clip=1.0)
    assert torch.equal(out, torch.zeros(10, dtype=torch.float64))
    out64 = torch.zeros(3, dtype=torch.float64)
    assert clip_model(out64, clip=1.0).data_ptr() != out64.data_ptr()  # a new tensor even when unchanged
    with pytest.raises(ValueError, match="NaN or inf"):
        clip_model(torch.tensor([1.0, math.nan]), clip=1.0)
    with pytest.raises(ValueError, match="clip"):
        clip_model(z, clip=0.0)


def test_privatize_upload_noise_has_the_calibrated_std():
    n = 200_000
    w = torch.full((n,), 0.01, dtype=torch.float64)  # norm 4.47 < C: not clipped
    sigma = nbafl_sigma(epsilon=1.0, delta=DELTA, clip=CLIP, local_size=SIZE)
    out = privatize_upload(w, clip=CLIP, sigma=sigma, generator=gen(7))
    noise = out - w
    assert float(noise.std()) == approx(sigma, rel=0.01)  # std error of the estimate is 0.16 %
    assert abs(float(noise.mean())) < 5 * sigma / math.sqrt(n)
    assert torch.equal(w, torch.full((n,), 0.01, dtype=torch.float64))  # no in-place mutation


def test_privatize_upload_clips_before_adding_noise():
    w = torch.full((1000,), 3.0)  # norm ≈ 94.9 > C = 10
    out = privatize_upload(w, clip=CLIP, sigma=0.0, generator=gen(0))
    assert float(torch.linalg.vector_norm(out)) == approx(CLIP, rel=1e-12)


def test_privatize_upload_uses_only_the_given_generator():
    w = torch.linspace(-1, 1, 500)
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a = privatize_upload(w, clip=CLIP, sigma=0.5, generator=gen(42))
    assert torch.equal(torch.get_rng_state(), state)  # the global stream is not touched
    torch.manual_seed(999)
    b = privatize_upload(w, clip=CLIP, sigma=0.5, generator=gen(42))
    assert torch.equal(a, b)  # same generator seed, same noise, whatever the global seed
    c = privatize_upload(w, clip=CLIP, sigma=0.5, generator=gen(43))
    assert not torch.equal(a, c)
    # σ = 0 still consumes the same draws, so later draws do not depend on σ.
    g1, g2 = gen(5), gen(5)
    privatize_upload(w, clip=CLIP, sigma=0.0, generator=g1)
    privatize_upload(w, clip=CLIP, sigma=3.0, generator=g2)
    assert torch.equal(torch.randn(4, generator=g1), torch.randn(4, generator=g2))
    with pytest.raises(ValueError, match="sigma"):
        privatize_upload(w, clip=CLIP, sigma=-1.0, generator=gen(0))


# ------------------------------------------------------------------------------------------------------------
# The guarantee is conditional: σ assumes that one sample moves a clipped model by at most 2C/m


def test_one_sample_moves_a_clipped_model_far_beyond_the_sensitivity_the_label_names():
    """docs/method.md "Conditional sensitivities are named": NbAFL's σ assumes Δs = 2C/m (Lemma 1), but model
    clipping bounds ‖w_i‖ ≤ C, not one sample's influence. A quickstart client trained as a run trains it (its
    round-0 minibatches, the scenario's optimizer), once on its data and once with one sample scaled ×1e3
    (a neighbouring data set), moves its clipped model by ~69× 2C/m. The arm's privacy report says so."""
    import numpy as np

    from sifl_ray.arms import ArmContext, get_arm
    from sifl_ray.config import load_config
    from sifl_ray.data import client_batches
    from sifl_ray.models import build_model
    from sifl_ray.optim.trainer import TorchTrainer
    from sifl_ray.runner.workload import load_workload

    cfg = load_config(["scenario=quickstart"])
    work = load_workload(cfg, 1)
    x, y = np.asarray(work.dataset.x_train), np.asarray(work.dataset.y_train)
    client, m, clip = 0, int(work.sizes.min()), float(cfg.nbafl.clip)
    mine = work.partitions[0][client]
    spec = work.model_spec
    dtype = getattr(torch, spec.dtype)
    net = build_model(spec.name, input_shape=spec.input_shape, num_classes=spec.num_classes, generator=gen(0))
    net = net.to(dtype)
    trainer = TorchTrainer(net, cfg.train.optimizer, lr=cfg.train.lr)
    batches = client_batches(
        mine,
        batch_size=cfg.train.batch_size,
        epochs=cfg.train.local_epochs,
        seed=cfg.seed,
        client_id=client,
        round=0,
    )

    def clipped_model(xs: np.ndarray) -> torch.Tensor:
        trainer.reset(work.w0)
        for b in batches:
            trainer.step((torch.from_numpy(xs[b]).to(dtype), torch.from_numpy(y[b])))
        return clip_model(trainer.params(), clip=clip)

    neighbour = x.copy()
    neighbour[mine[0]] *= 1e3  # one sample of this client replaced by a scaled copy of itself
    moved = float(torch.linalg.vector_norm(clipped_model(x) - clipped_model(neighbour)))
    sensitivity = 2 * clip / m
    assert moved > 10 * sensitivity  # measured 10.27 against 0.149: 69×
    assert moved <= 2 * clip * (1 + 1e-12)  # what clipping does bound
    ctx = ArmContext(cfg=cfg, arm="nbafl_eps1", n=work.n, local_size=m, total_size=int(work.sizes.sum()))
    priv = get_arm("nbafl").privacy(ctx)
    assert priv["conditional"].startswith("CONDITIONAL")
    assert f"2C/m = {sensitivity:.3g}" in priv["conditional"] and "does not enforce" in priv["conditional"]
    assert "one sample" in priv["neighbour_relation"] and "aggregator" in priv["threat_model"]


def test_summary_and_tensorboard_label_each_guarantee_with_its_relation_threat_model_and_condition(tmp_path):
    """What a run writes: ``summary.json`` and TensorBoard's ``privacy`` text carry, for NbAFL and SIFL, the
    neighbour relation, the threat model and the CONDITIONAL label of the sensitivity their ε assumes."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sifl_ray.config import load_config
    from sifl_ray.runner import Simulation

    cfg = load_config(
        [
            "scenario=quickstart",
            "arms=[fl,sifl_m1,nbafl]",
            "train.rounds=1",
            "clients.num_clients=4",
            "coding.key_seed=3",
            "backend=local",
            "output.progress=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        sim.run()
    finally:
        sim.close()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for arm, sensitivity in (("nbafl_eps1", "2C/m = "), ("sifl_m1", "2C/|D_i| = ")):
        priv = summary["arms"][arm]["privacy"]
        assert priv["conditional"].startswith("CONDITIONAL") and sensitivity in priv["conditional"], arm
        assert "one sample" in priv["neighbour_relation"] and "record level" in priv["neighbour_relation"]
        assert "aggregator" in priv["threat_model"]
        acc = EventAccumulator(str(tmp_path / "run" / "tb" / arm))
        acc.Reload()
        text = acc.Tensors("privacy/text_summary")[0].tensor_proto.string_val[0].decode()
        for key in ("neighbour_relation", "threat_model", "conditional"):
            assert f"**{key}**: {priv[key]}" in text, (arm, key)
    assert "replaced" in summary["arms"]["nbafl_eps1"]["privacy"]["neighbour_relation"]
    assert "not the clients" in summary["arms"]["sifl_m1"]["privacy"]["threat_model"]
