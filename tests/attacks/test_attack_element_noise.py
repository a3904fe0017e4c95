"""Per-element noise against the aggregator: on a transcript recorded from the platform's own roles, element j
of a same-round difference carries round-off only; uploads with independent draws carry √2 times one upload's
noise (the control)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sifl_ray.attacks.element_noise import (
    measure,
    measure_transcript,
    noise_part,
    same_round_differences,
)
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding import make_server_key
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.config import load_config
from sifl_ray.runner import Simulation
from sifl_ray.seeding import numpy_generator, torch_generator

U = 2.0**-53  # float64 unit round-off

PLATFORM = [
    "scenario=quickstart",
    "train.rounds=6",
    "clients.num_clients=4",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "backend=local",
    "output.progress=false",
    "output.plot=false",
]


def _record(arm: str, out) -> tuple[TranscriptRecorder, object, object]:
    """Run ``arm`` on the real roles (in-process backend) with the aggregator's view recorded; return the
    transcript, the clients' view of key 1 and the server's key (the scorer's)."""
    cfg = load_config([*PLATFORM, f"arms=[{arm}]", f"output.dir={out}"])
    sim = Simulation(cfg, run_dir=out / "run")
    recorder = TranscriptRecorder()
    for name, worker in sim.actors().items():
        if name.startswith("worker"):
            worker.raw.recorder = recorder  # what each upload looks like as the aggregator receives it
    try:
        sim.run()
        view = sim.backend.get(sim.views[arm][0])
        key = sim.actors()["server"].raw.roles[arm].key
    finally:
        sim.close()
    return recorder, view, key


@pytest.mark.parametrize("arm", ["sifl_m1", "sifl_m2"])
def test_same_round_differences_carry_round_off_only(arm, tmp_path):
    recorder, view, key = _record(arm, tmp_path)
    assert len(recorder.rounds()) == 6 and all(len(recorder.uploads[t]) == 4 for t in recorder.rounds())
    m = measure_transcript(recorder, lambda t: view)
    assert m.rounds == 6 and m.pairs == 6 * 3

    # The bound. A fused upload fl(w~ + P1 δ_i) rounds once, by at most u·M (M = max|w~|), and so does the
    # difference of two: every entry of w~_i − w~_0 − P1 (δ_i − δ_0) is at most 3·u·M. The scorer's noise
    # part applies Π = I − P1 P1L to it, and ‖Π‖₂ = ‖P1 P1L‖₂ ≤ ‖P1‖₂ ‖P1L‖₂ = α·‖P1L‖₂ (P1 = α·Q[:, :n];
    # KeyNorms.p1l_spectral is an upper bound). RMS over elements: ≤ ‖Π‖₂·3uM; one element: ≤ ‖Π‖₂·3uM·√ñ.
    x = torch.randn(key.n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    alpha = float(torch.linalg.vector_norm(view.apply_P1(x)) / torch.linalg.vector_norm(x))
    assert alpha == pytest.approx(1e-3, rel=1e-12)  # scaled orthogonal, as the bound assumes
    proj = alpha * key.norms().p1l_spectral
    M = max(float(np.abs(recorder.upload_matrix(t)[0]).max()) for t in recorder.rounds())
    rms = float(np.sqrt(np.mean(np.square(m.upload_rms))))
    bound = 3 * proj * U * M / rms
    assert bound < 1e-9  # what "noise-free" means here: float64 round-off of the noise's size
    assert 0 < m.ratio <= bound
    assert np.all(m.element_ratios <= 3 * proj * U * M * math.sqrt(key.n_tilde) / m.upload_rms)
    assert all(0 < r <= bound * math.sqrt(len(m.per_round)) for r in m.per_round.values())
    # One upload does carry the paper's noise: s_j = ‖N1^j‖₂ σ1 (M2: times ‖P2R‖ stripped in, larger).
    s = key.norms().n1_row_l2.numpy() * 1e3
    assert float(np.median(m.upload_rms / s)) > 0.5


def _pinv_key():
    key = make_server_key(
        n=200, n_tilde=240, backend="fast", left_inverse="pinv", alpha=1e-3, beta=1e3, seed=b"e" * 32
    )
    _, _, N1 = key.dense()
    G = (N1.T @ N1).numpy()
    np.testing.assert_allclose(G, 1e6 * np.eye(40), atol=1e-6)  # N1ᵀN1 = β²I: the premise below
    return key


def test_independent_draws_give_sqrt2_shared_draws_round_off():
    """The control. Two uploads per round, each with its own draw r_0, r_1 (m = 40 dimensions, T rounds):
    with N1ᵀN1 = β²I the pooled ratio² is 4·A/(A + B) with A = Σ|r_1 − r_0|²/2 and B = Σ|r_1 + r_0|²/2,
    independent β²σ²χ²(mT) variables, so A/(A + B) ~ Beta(mT/2, mT/2): ratio² has mean 2 and standard
    deviation 2/√(mT + 1), the ratio √2 and about 1/√(2(mT + 1)). Five of those: a false alarm about once in
    two million seeds. With one shared draw per round the same uploads give round-off."""
    key = _pinv_key()
    view = key.client_view()
    noise = NoiseSpec("gaussian", 1e3)
    T, m = 50, key.n_tilde - key.n
    gen = torch_generator(0, "test", "element-noise")
    independent, shared = TranscriptRecorder(), TranscriptRecorder()
    for t in range(T):
        w = torch.randn(key.n, 2, generator=gen, dtype=torch.float64) * 0.1
        r = noise.sample((m, 2), gen)
        independent.record_upload(t, 0, key.encode(w[:, 0], r[:, 0]))
        independent.record_upload(t, 1, key.encode(w[:, 1], r[:, 1]))
        shared.record_upload(t, 0, key.encode(w[:, 0], r[:, 0]))
        shared.record_upload(t, 1, key.encode(w[:, 1], r[:, 0]))
    control = measure_transcript(independent, lambda t: view)
    assert control.ratio == pytest.approx(math.sqrt(2), abs=5 / math.sqrt(2 * (m * T + 1)))
    same = measure_transcript(shared, lambda t: view)
    M = max(float(np.abs(shared.upload_matrix(t)[0]).max()) for t in shared.rounds())
    rms = float(np.sqrt(np.mean(np.square(same.upload_rms))))
    # encode rounds P1 w + N1 r once per entry, the difference once more; Π is an orthogonal projection
    assert 0 < same.ratio <= 3 * U * M / rms < 1e-9


def test_noise_part_is_the_noise_and_differences_are_the_aggregators():
    key = _pinv_key()
    gen = numpy_generator(1, "test", "element-noise")
    w = torch.from_numpy(gen.standard_normal((key.n, 3)))
    r = torch.from_numpy(gen.standard_normal((key.n_tilde - key.n, 3)) * 1e3)
    x = key.encode(w, r).numpy()
    np.testing.assert_allclose(noise_part(key.client_view(), x), key.apply_N1(r).numpy(), atol=1e-6)
    np.testing.assert_array_equal(same_round_differences(x), x[:, 1:] - x[:, :1])
    with pytest.raises(ValueError, match="N_c"):
        same_round_differences(x[:, 0])
    with pytest.raises(ValueError, match="no round"):
        measure({})
    with pytest.raises(ValueError, match="single upload"):
        measure({0: (x[:, :1], np.zeros((key.n_tilde, 0)))})
