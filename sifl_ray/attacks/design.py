"""An m1 arm under one key design: played through the shipped parties, attacked by every registered attack.

:func:`evaluate_design` records the arm's transcript (:func:`sifl_ray.attacks.record.record_arm`) with the
design's keys, hands the attacking party's view and the scorer's truth to every attack of the registry
(:mod:`sifl_ray.attacks.registry`; the built-in ones are :mod:`sifl_ray.attacks.builtin`) and sets the
paper's per-element ε of the upload beside their figures. Which attacks run is the registry's business: a
new attack registers itself and appears here, in the report, the console table and TensorBoard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

import sifl_ray.attacks.builtin  # noqa: F401 - the built-in attacks register on import
from sifl_ray.attacks.adversaries import BlockLayout
from sifl_ray.attacks.builtin.decoders import key_holder_error
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.record import GroundTruth, SmallTask, record_arm
from sifl_ray.attacks.registry import DesignView, Figure, measure_all
from sifl_ray.attacks.scoring import dense
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding.base import NoiseSpec, ServerKey
from sifl_ray.device import single_threaded
from sifl_ray.privacy import release_epsilons
from sifl_ray.seeding import derive_seed
from sifl_ray.specs import Coding


def design_key_seed(cfg: DictConfig, design: Design) -> int | None:
    """The key seed of ``design``'s run: derived from ``cfg.coding.key_seed`` and the design's name, so that
    every design has keys and noise of its own (``None``: secure random keys)."""
    seed = cfg.coding.key_seed
    return None if seed is None else derive_seed(int(seed), "attack", design.name)


def design_coding(cfg: DictConfig, design: Design) -> dict[str, Any]:
    """The platform ``coding`` values of ``design`` at the scales of ``cfg.coding``."""
    k = cfg.coding
    return {
        "key_seed": design_key_seed(cfg, design),
        "backend": design.backend,
        "left_inverse": design.left_inverse,
        "n_extra": int(k.n_extra),
        "alpha": float(k.alpha),
        "beta": float(k.beta),
        "kappa": None if k.kappa is None else float(k.kappa),
        "block_size": int(k.block_size),
        "noise": {
            "distribution": k.noise.distribution,
            "sigma1": float(k.noise.sigma1),
            "sigma2": float(k.noise.sigma1),
        },
    }


@dataclass
class DesignResult:
    """Every registered figure of one key design, plus its per-element ε (paper's formula and the sound
    one)."""

    design: str
    backend: str
    left_inverse: str
    rekey_every: int
    alpha: float
    beta: float
    noise_scale: float
    n: int
    n_tilde: int
    layout: str
    transcript: str
    epsilon_paper: float
    epsilon_sound: float
    figures: dict[str, Figure]
    key_holder_decode_error: float
    seconds: float
    arm: str = "sifl_m1"  # the registered m1 arm played under this design


def _per_element_epsilon(cfg: DictConfig, key: ServerKey, task: SmallTask) -> tuple[float, float]:
    """Worst-element ε of the client upload (the paper's formula and the sound one), via the accountant."""
    sizes = [int(x.shape[0]) for x in task.X]
    rels = release_epsilons(
        key_norms=key.norms(),
        noise1=NoiseSpec(distribution=cfg.coding.noise.distribution, scale=cfg.coding.noise.sigma1),
        clip=cfg.audit.clip,
        local_size=sizes,
        total_size=sum(sizes),
        delta=cfg.audit.delta,
        coding=Coding.M1,
    )
    local = next(r for r in rels if r.release == "local")
    return float(local.epsilon_paper), float(local.epsilon)


def evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design, *, arm: str = "sifl_m1"
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    """Play the m1 arm ``arm`` under ``design`` through the shipped parties, run every registered attack on
    its transcript (each with its threat model), score them."""
    with single_threaded():
        return _evaluate_design(task, cfg, design, arm)


def _evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design, arm: str
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    tic = time.perf_counter()
    recorder = TranscriptRecorder(max_coordinates=cfg.transcript.max_coordinates)
    truth = record_arm(
        task,
        cfg,
        arm=arm,
        design=design,
        coding=design_coding(cfg, design),
        rounds=cfg.train.rounds,
        recorder=recorder,
    )
    recorder.require_full("the aggregator's subspace attacks")
    P1_0, _, N1_0 = dense(truth.keys[0])
    layout = BlockLayout.from_dense(P1_0, N1_0)  # public: which rows form a block, not the blocks
    view = DesignView(task=task, cfg=cfg, design=design, recorder=recorder, truth=truth, layout=layout)
    figures = measure_all(view)
    eps_paper, eps_sound = _per_element_epsilon(cfg, truth.keys[0], task)
    result = DesignResult(
        design=design.name,
        backend=design.backend,
        left_inverse=design.left_inverse,
        rekey_every=design.rekey_every,
        alpha=float(cfg.coding.alpha),
        beta=float(cfg.coding.beta),
        noise_scale=float(cfg.coding.noise.sigma1),
        n=truth.n,
        n_tilde=truth.n_tilde,
        layout=layout.describe(),
        transcript=recorder.describe(),
        epsilon_paper=eps_paper,
        epsilon_sound=eps_sound,
        figures=figures,
        key_holder_decode_error=key_holder_error(view),
        seconds=time.perf_counter() - tic,
        arm=arm,
    )
    return result, recorder, truth
