"""(e) The M2 server's view: its estimate of the global model from ``P1L W'_a``, per round and R2 noise scale.

An m2 arm is played through the shipped parties on a larger task (``cfg.m2``); the server attacks with only
its own view, the inputs ``W'_a`` it received and its own ``P1L``. Each R2 scale is a run of its own, with
keys and noise draws of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from sifl_ray.attacks.adversaries import abs_correlation, m2_server_estimate
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.design import design_coding
from sifl_ray.attacks.record import make_task, record_arm
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.device import single_threaded
from sifl_ray.seeding import derive_seed


def m2_design(cfg: DictConfig) -> Design:
    """Key 1's design in the M2 run (``cfg.m2``)."""
    m2 = cfg.m2
    return Design(name=f"m2-{m2.backend}-{m2.left_inverse}", backend=m2.backend, left_inverse=m2.left_inverse)


def m2_coding(cfg: DictConfig, *, noise2_scale: float) -> dict[str, Any]:
    """The platform ``coding`` values of the M2 run: key 1 of ``cfg.m2``'s design at ``cfg.coding``'s
    scales, key 2 of ``cfg.coding`` (``p``, ``gamma``, ``eta``) and its noise ``R2`` of scale
    ``noise2_scale``. Each scale is a run of its own, with keys and noise draws of its own (the same draws
    scaled would make every scale's figure the same)."""
    coding = design_coding(cfg, m2_design(cfg))
    if coding["key_seed"] is not None:
        coding["key_seed"] = derive_seed(coding["key_seed"], "R2-scale", float(noise2_scale))
    key = cfg.coding
    coding.update(p=int(key.p), gamma=float(key.gamma), eta=float(key.eta))
    coding["noise"]["sigma2"] = float(noise2_scale)
    return coding


@dataclass
class M2Result:
    """What the M2 server-side attack measured: the correlation of its estimate with the true model, per
    round, against the aggregator noise's scale."""

    noise2_scale: float
    n: int
    p: int
    corr_per_round: dict[int, float]
    transcript: str
    arm: str = "sifl_m2"


def evaluate_m2(
    cfg: DictConfig, *, transcript_dir: Path | None = None, arm: str = "sifl_m2"
) -> list[M2Result]:
    """(e) The M2 server's estimate of the global model from ``P1L W'_a``, per round, per R2 noise scale.

    The m2 arm ``arm`` is played through the shipped parties on a larger task (``cfg.m2``); the server uses
    only its own view: the inputs ``W'_a`` it received and its own ``P1L``.
    """
    with single_threaded():
        return _evaluate_m2(cfg, transcript_dir, arm)


def _evaluate_m2(cfg: DictConfig, transcript_dir: Path | None, arm: str) -> list[M2Result]:
    task = make_task(
        features=cfg.m2.features,
        hidden=0,
        clients=cfg.m2.clients,
        samples_per_client=cfg.m2.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=derive_seed(cfg.seed, "m2"),
    )
    design = m2_design(cfg)
    out = []
    for scale in cfg.m2.noise2_scales:
        recorder = TranscriptRecorder(max_coordinates=None)
        truth = record_arm(
            task,
            cfg,
            arm=arm,
            design=design,
            coding=m2_coding(cfg, noise2_scale=float(scale)),
            rounds=cfg.m2.rounds,
            recorder=recorder,
        )
        key = truth.keys[0]
        corr = {}
        for t, W_a in sorted(recorder.server_inputs.items()):
            W_bar = key.decode(torch.as_tensor(W_a)).numpy()  # the server's own P1L
            corr[t] = abs_correlation(m2_server_estimate(W_bar), truth.aggregate_models[t])
        out.append(M2Result(float(scale), task.n, cfg.coding.p, corr, recorder.describe(), arm))
        if transcript_dir is not None and cfg.transcript.save:
            prefix = "m2" if arm == "sifl_m2" else arm
            recorder.save(transcript_dir / f"{prefix}-R2-scale-{float(scale):g}.npz")
    return out
