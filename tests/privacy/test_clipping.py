"""Clients clip their models to ‖w_i‖ ≤ C (every SIFL ε assumes it), and every clipped model is counted."""

from __future__ import annotations

import math

import pytest
import torch

from sifl_ray.coding import make_server_key
from sifl_ray.config import load_config
from sifl_ray.optim import TorchTrainer, fused_update, stepwise_update
from sifl_ray.privacy.clipping import clip_norm_
from sifl_ray.runner import Simulation


def test_clip_norm_bounds_the_norm_exactly_and_leaves_the_rest_alone():
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e6):
        w = torch.randn(1001, generator=g, dtype=torch.float64) * scale
        before = float(torch.linalg.vector_norm(w))
        clip = before / 3.0
        assert clip_norm_(w, clip)
        assert float(torch.linalg.vector_norm(w)) <= clip  # exactly, not within an ulp
        assert float(torch.linalg.vector_norm(w)) >= clip * (1 - 1e-12)  # scaled, not zeroed
    inside = torch.full((10,), 0.1, dtype=torch.float64)
    assert not clip_norm_(inside, 1.0) and bool((inside == 0.1).all())
    zero = torch.zeros(5, dtype=torch.float64)
    assert not clip_norm_(zero, 1.0) and bool((zero == 0).all())
    bad = torch.tensor([1.0, math.nan], dtype=torch.float64)
    assert not clip_norm_(bad, 1e-3)  # left for the upload check to reject
    with pytest.raises(ValueError, match="clip must be > 0"):
        clip_norm_(inside, 0.0)


@pytest.mark.parametrize("form", [fused_update, stepwise_update])
def test_both_client_forms_upload_the_encoding_of_the_clipped_model(form):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3)).double()
    trainer = TorchTrainer(net, optimizer="sgd", lr=0.5)
    n = trainer.n
    key = make_server_key(n=n, n_tilde=n + 7, backend="dense", alpha=1.0, beta=1.0, seed=b"k" * 32)
    view = key.client_view()
    w = torch.randn(n, dtype=torch.float64)
    w_tilde = key.encode(w, torch.randn(7, dtype=torch.float64))
    batches = [(torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))) for _ in range(3)]
    clip = 0.5 * float(torch.linalg.vector_norm(w))
    upload, stats = form(view, w_tilde, trainer, batches, clip=clip)
    assert stats["clipped"] == 1.0
    decoded = view.decode(upload)
    free, stats_free = form(view, w_tilde, trainer, batches, clip=None)
    assert stats_free["clipped"] == 0.0
    expected = view.decode(free)
    # Tolerance from the key's rigorous round-off constants: every encoded step (3 batches + the clip)
    # and the decodes err by at most decode·‖x‖ + ‖P1L‖·apply_p1·‖Δ‖ + pp_defect·‖Δ‖, with ‖x‖ the largest
    # encoded vector and ‖Δ‖ ≤ 4 max(‖w‖, ‖w_K‖) a step's size for this small SGD (lr 0.5).
    ro = key.roundoff()
    x = max(float(v.norm()) for v in (w_tilde, upload, free))
    d = 4 * max(float(w.norm()), float(expected.norm()))
    tol = 3 * (len(batches) + 3) * (ro.decode * x + (ro.p1l_norm * ro.apply_p1 + ro.pp_defect) * d)
    assert float(torch.linalg.vector_norm(decoded)) <= clip + tol
    expected = expected * (clip / float(torch.linalg.vector_norm(expected)))
    assert float((decoded - expected).norm()) <= tol


def test_a_run_with_a_small_clip_clips_every_arm_and_counts_it(tmp_path, capsys):
    """``privacy.clip=0.5`` on the digits MLP (its norm is far above 0.5): the global models stay inside
    the ball, and the count is in summary.json and TensorBoard (before, SIFL models grew freely)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = load_config(
        [
            "scenario=quickstart",
            "train.rounds=2",
            "clients.num_clients=4",
            "coding.key_seed=3",
            "privacy.clip=0.5",
            "arms=[fl,sifl_m1,sifl_m2]",
            "backend=local",
            "output.progress=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        result = sim.run()
        models = {arm: sim.global_model(arm) for arm in sim.arms}
    finally:
        sim.close()
    assert "clipped 8 client models to ‖w_i‖ ≤ C = 0.5" in capsys.readouterr().err
    for arm, model in models.items():
        summary = result.summary["arms"][arm]
        assert summary["clipped"] == 8 and summary["clip"] == 0.5, arm  # 4 clients × 2 rounds
        # the average of models inside the ball is inside the ball (up to the coding round-off)
        assert float(torch.linalg.vector_norm(model)) <= 0.5 * (1 + 1e-6), arm
        acc = EventAccumulator(str(result.run_dir / "tb" / arm))
        acc.Reload()
        assert [e.value for e in acc.Scalars("system/clients/clipped")] == [4.0, 4.0], arm
        assert [r["clients/clipped"] for r in summary["rounds"]] == [4.0, 4.0], arm


def test_the_privacy_report_says_the_guarantee_is_conditional_on_clipping():
    from sifl_ray.privacy import SiflAccountant

    text = " ".join(SiflAccountant().report().split())
    assert "CONDITIONAL on every client model satisfying ||w_i|| <= C" in text
    assert "clipping to C (privacy.clip)" in text
