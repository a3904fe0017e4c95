"""The attack suite: run SIFL on a small model with the real keys, record each party's view, attack, score.

Why a simulator of its own: the subspace attacks need whole encoded vectors over tens of rounds, which is
cheap only for small models (n in the hundreds), and the scoring needs the plain models, which a real
deployment never has. :func:`simulate_m1` and :func:`simulate_m2` run the protocol of SPEC "SIFL M1" / "SIFL
M2" round by round with the platform's keys (``sifl_ray.coding``), fill a :class:`TranscriptRecorder` with
what travelled on each channel (uploads, broadcasts, the M2 server's inputs), and keep the plain models on
the side in a :class:`GroundTruth`.
:func:`evaluate_design` hands the transcript to the adversaries of :mod:`sifl_ray.attacks.adversaries` and
scores their output against the truth.

Scoring "up to the unknown linear map". The subspace adversaries recover ``c = A w`` for an invertible map
``A = Uᵀ P1`` (U their basis of ``col(P1)``) that they never learn. The scorer, who holds the key, computes
that A from U and ``P1`` and reports ``max_i ‖A⁻¹ c_i − w_i‖ / ‖w_i‖`` over a round's uploads. This is
invariant to the adversary's choice of basis (another basis U' = U M gives c' = Mᵀc and A' = MᵀA), and it is
zero exactly when the adversary holds every model up to one fixed map, which is the SPEC's claim. The
adversary would obtain A itself from any n known (w, w~) pairs, or from one colluding client (attack d).

Threat models. SPEC "Parties": the aggregator sees only the encoded local models (the uploads), the server
only aggregated encoded models. Every figure labelled :data:`AGGREGATOR` uses the uploads alone. Figures
that also use the broadcasts (the telescoped regression, the geometry of updates relative to ``w~^t``) are
labelled :data:`AGGREGATOR_BROADCASTS`: the SPEC's aggregator does not see them, an eavesdropper on the
server → client channel or a colluding client does. The RESULT line's ``projection_error`` is uploads-only.

Seeds stay in memory. ``seed`` reproduces data, initial model, minibatches and every noise draw (beside a
transcript: the plain models); ``key_seed`` reproduces every key. :func:`public_config` drops both from what
is written out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sifl_ray.attacks.adversaries import (
    EPS64,
    BlockLayout,
    DifferenceAttack,
    abs_correlation,
    apply_decoder,
    encoded_updates,
    fit_decoder,
    fit_noise_regression,
    fit_telescoped_regression,
    m2_server_estimate,
    project_onto_signal,
    remove_fitted_noise,
    update_geometry,
)
from sifl_ray.attacks.audit import AuditTest, audit_upload_release
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.element_noise import cross_round_pairs, measure_transcript
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, NoiseSpec, ServerKey
from sifl_ray.optim import Batch, TorchTrainer, fused_update
from sifl_ray.seeding import derive_bytes, derive_seed, torch_generator


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the enclosed small linear algebra on one thread (torch and the BLAS under NumPy).

    Why: every matrix here is tiny (hundreds of rows); worker threads cost more in start-up and spin-waits
    than they save, and on a busy two-core machine they made the suite 25× slower. Restores the previous
    settings on exit.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # only a speed-up; scikit-learn (a dependency) normally brings it
        limits = nullcontext()
    else:
        limits = threadpool_limits(limits=1)
    try:
        with limits:
            yield
    finally:
        torch.set_num_threads(before)


AGGREGATOR = "aggregator (honest-but-curious)"
AGGREGATOR_BROADCASTS = (
    "aggregator + broadcasts (an eavesdropper on the server→client channel, or a colluding client)"
)
AGGREGATOR_KP = "aggregator + known plaintext"
AGGREGATOR_COLLUSION = "aggregator + one colluding client"
SERVER_M2 = "server in M2 (honest-but-curious)"
AUDITOR = "auditor holding the keys"


# ------------------------------------------------------------------------------------------------------------
# The small learning task.


@dataclass(frozen=True)
class SmallTask:
    """Synthetic binary classification split over clients, and a small float64 model for it: logistic
    regression (``hidden == 0``) or a one-layer tanh MLP. Its parameters, in ``model.parameters()`` order,
    are the vector w the codes act on."""

    features: int
    hidden: int
    X: tuple[torch.Tensor, ...]
    y: tuple[torch.Tensor, ...]

    @property
    def n(self) -> int:
        d, h = self.features, self.hidden
        return d + 1 if h == 0 else d * h + 2 * h + 1

    @property
    def clients(self) -> int:
        return len(self.X)

    def model(self) -> nn.Module:
        """A fresh float64 module (its initial weights are overwritten by the broadcast model)."""
        if self.hidden == 0:
            layers: list[nn.Module] = [nn.Linear(self.features, 1)]
        else:
            layers = [nn.Linear(self.features, self.hidden), nn.Tanh(), nn.Linear(self.hidden, 1)]
        return nn.Sequential(*layers).to(torch.float64)

    def trainer(self, lr: float) -> TorchTrainer:
        """The clients' base optimizer: plain SGD on the logistic loss (``sifl_ray.optim``)."""
        return TorchTrainer(self.model(), "sgd", lr, loss_fn=_logistic_loss)

    def batches(self, *, client: int, round: int, steps: int, batch_size: int, seed: int) -> list[Batch]:
        """Client ``client``'s K minibatches of round ``round``, from their own named stream."""
        gen = torch_generator(seed, "attack-task", "batches", client, round)
        X, y = self.X[client], self.y[client]
        out = []
        for _ in range(steps):
            idx = torch.randperm(X.shape[0], generator=gen)[:batch_size]
            out.append((X[idx], y[idx]))
        return out


def _logistic_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.binary_cross_entropy_with_logits(logits.squeeze(-1), y)


def make_task(
    *, features: int, hidden: int, clients: int, samples_per_client: int, teacher_scale: float, seed: int
) -> SmallTask:
    """Gaussian features and labels drawn from a random logistic teacher (noisy labels keep the gradients
    alive, so client updates keep spanning new directions)."""
    gen = torch_generator(seed, "attack-task", "data")
    teacher = torch.randn(features, generator=gen, dtype=torch.float64) * (
        teacher_scale / math.sqrt(features)
    )
    Xs, ys = [], []
    for _ in range(clients):
        X = torch.randn(samples_per_client, features, generator=gen, dtype=torch.float64)
        p = torch.sigmoid(X @ teacher)
        ys.append((torch.rand(samples_per_client, generator=gen, dtype=torch.float64) < p).to(torch.float64))
        Xs.append(X)
    return SmallTask(features=features, hidden=hidden, X=tuple(Xs), y=tuple(ys))


# ------------------------------------------------------------------------------------------------------------
# The protocol, with the plain models kept on the side.


@dataclass
class GroundTruth:
    """What the scorer knows and no adversary does: keys and the plain models behind every encoding.

    ``upload_models[t]`` (n × N_c) are the models the uploads of round t encode (exactly, up to the
    round-off of the final addition): the broadcast's model plus each client's update ``w_K − w_0``.
    """

    design: Design
    n: int
    n_tilde: int
    clients: list[int]
    weights: np.ndarray
    keys: dict[int, ServerKey] = field(default_factory=dict)
    agg_key: AggregatorKey | None = None
    upload_models: dict[int, np.ndarray] = field(default_factory=dict)
    updates: dict[int, np.ndarray] = field(default_factory=dict)
    broadcast_models: dict[int, np.ndarray] = field(default_factory=dict)
    aggregate_models: dict[int, np.ndarray] = field(default_factory=dict)

    def key_for_round(self, round: int) -> ServerKey:
        return self.keys[self.epoch_of(round)]

    def epoch_of(self, round: int) -> int:
        k = self.design.rekey_every
        return (round - 1) // k if k else 0


def _key_seed(cfg: DictConfig, *names: object) -> bytes | None:
    """A party's key seed: derived from ``cfg.key_seed`` (reproducible, not secret: simulation only), or
    ``None`` for 256 secure random bits (the coding factories draw them)."""
    return None if cfg.key_seed is None else derive_bytes(int(cfg.key_seed), "attack", *names)


def server_key(cfg: DictConfig, design: Design, *, n: int, n_tilde: int, epoch: int) -> ServerKey:
    """The server key of ``design`` for key epoch ``epoch`` (a new epoch is an independent key)."""
    from sifl_ray.coding import make_server_key

    return make_server_key(
        n=n,
        n_tilde=n_tilde,
        backend=design.backend,
        left_inverse=design.left_inverse,
        alpha=cfg.key.alpha,
        beta=cfg.key.beta,
        kappa=cfg.key.kappa,
        block_size=cfg.key.block_size,
        seed=_key_seed(cfg, design.name, "server-key"),
        epoch=epoch,
    )


def _init_model(task: SmallTask, cfg: DictConfig) -> torch.Tensor:
    gen = torch_generator(cfg.seed, "attack-task", "init")
    return torch.randn(task.n, generator=gen, dtype=CODING_DTYPE) * cfg.training.init_scale


def _client_round(
    task: SmallTask, cfg: DictConfig, key: ServerKey, broadcast: torch.Tensor, t: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every client runs the fused target optimizer (``sifl_ray.optim.fused_update``) from the encoded
    model: decode once, K plain SGD steps, upload ``w~ + P1 (w_K − w_0)`` (SPEC "SIFL M1", fused form).

    Returns the uploads and the plain updates ``w_K − w_0``: the truth the uploads encode, relative to the
    broadcast's model.
    """
    view = key.client_view()
    w0 = view.decode(broadcast)  # what fused_update decodes: the same operation, the same numbers
    trainer = task.trainer(cfg.training.lr)
    uploads, updates = [], []
    for i in range(task.clients):
        batches = task.batches(
            client=i,
            round=t,
            steps=cfg.training.local_steps,
            batch_size=cfg.training.batch_size,
            seed=cfg.seed,
        )
        upload, _ = fused_update(view, broadcast, trainer, batches)
        uploads.append(upload)
        updates.append(trainer.params() - w0)
    return uploads, updates


def simulate_m1(
    task: SmallTask, cfg: DictConfig, design: Design, recorder: TranscriptRecorder
) -> GroundTruth:
    """Run SIFL M1 for ``cfg.training.rounds`` rounds (1-based), re-keying every ``design.rekey_every``.

    The aggregator's view (uploads, broadcasts, key epochs) goes to ``recorder``; the plain models to the
    returned :class:`GroundTruth`.
    """
    n, m = task.n, cfg.key.n_extra
    sizes = np.array([x.shape[0] for x in task.X], dtype=np.float64)
    truth = GroundTruth(
        design=design, n=n, n_tilde=n + m, clients=list(range(task.clients)), weights=sizes / sizes.sum()
    )
    p = torch.as_tensor(truth.weights, dtype=CODING_DTYPE)
    noise = NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale)
    w = _init_model(task, cfg)  # the server's plain global model
    for t in range(1, cfg.training.rounds + 1):
        epoch = truth.epoch_of(t)
        if epoch not in truth.keys:
            truth.keys[epoch] = server_key(cfg, design, n=n, n_tilde=n + m, epoch=epoch)
            recorder.record_key_epoch(t, epoch)
        key = truth.keys[epoch]

        # 1. Server encodes the global model with fresh noise r1^t.
        r = noise.sample((m,), torch_generator(cfg.seed, "attack", design.name, "server-noise", t))
        broadcast = key.encode(w, r)
        recorder.record_broadcast(t, broadcast)
        truth.broadcast_models[t] = w.numpy().copy()

        # 2. Clients train on the encoded model and upload.
        uploads, updates = _client_round(task, cfg, key, broadcast, t)
        for i, up in enumerate(uploads):
            recorder.record_upload(t, i, up, weight=float(task.X[i].shape[0]))
        truth.updates[t] = torch.stack(updates, dim=1).numpy()
        truth.upload_models[t] = truth.broadcast_models[t][:, None] + truth.updates[t]

        # 3. Aggregator averages the encoded models.
        aggregate = torch.stack(uploads, dim=1) @ p
        truth.aggregate_models[t] = truth.upload_models[t] @ truth.weights

        # 4. Server decodes: P1L w~_a = w^{t+1} (the weights sum to 1 and P1L N1 = 0).
        w = key.decode(aggregate)
    return truth


def simulate_m2(
    task: SmallTask, cfg: DictConfig, *, noise2_scale: float, recorder: TranscriptRecorder
) -> GroundTruth:
    """Run SIFL M2 for ``cfg.m2.rounds`` rounds; the server's inputs ``W'_a`` go to ``recorder``.

    Round 1 starts from the server's M1 encoding; afterwards the server re-encodes ``P1L W'_a`` column by
    column and clients strip code 2 with ``P2R`` (SPEC "SIFL M2").
    """
    from sifl_ray.coding import make_aggregator_key

    design = Design(
        name=f"m2-{cfg.m2.backend}-{cfg.m2.left_inverse}",
        backend=cfg.m2.backend,
        left_inverse=cfg.m2.left_inverse,
    )
    n, m, pdim = task.n, cfg.key.n_extra, cfg.m2.p
    sizes = np.array([x.shape[0] for x in task.X], dtype=np.float64)
    truth = GroundTruth(
        design=design, n=n, n_tilde=n + m, clients=list(range(task.clients)), weights=sizes / sizes.sum()
    )
    p = torch.as_tensor(truth.weights, dtype=CODING_DTYPE)
    key = server_key(cfg, design, n=n, n_tilde=n + m, epoch=0)
    agg_key = make_aggregator_key(
        p=pdim,
        gamma=cfg.m2.gamma,
        eta=cfg.m2.eta,
        seed=_key_seed(cfg, "m2", "aggregator-key"),
    )
    truth.keys[0], truth.agg_key = key, agg_key
    strip = agg_key.client_view().strip
    noise1 = NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale)
    noise2 = NoiseSpec(distribution=cfg.key.noise, scale=noise2_scale)
    w = _init_model(task, cfg)
    broadcast = key.encode(w, noise1.sample((m,), torch_generator(cfg.seed, "attack", "m2", "r1", 0)))
    for t in range(1, cfg.m2.rounds + 1):
        # 1. The server's broadcast: its M1 encoding in round 1, then W' (the clients strip code 2).
        recorder.record_broadcast(t, broadcast)
        truth.broadcast_models[t] = w.numpy().copy()
        w_tilde = broadcast if broadcast.dim() == 1 else strip(broadcast)

        # 2. Clients train on the (stripped) encoded model.
        uploads, updates = _client_round(task, cfg, key, w_tilde, t)
        truth.updates[t] = torch.stack(updates, dim=1).numpy()
        truth.upload_models[t] = truth.broadcast_models[t][:, None] + truth.updates[t]

        # 3. Aggregator averages and adds code 2: W'_a = w~_a P2 + R2 N2.
        aggregate = torch.stack(uploads, dim=1) @ p
        R2 = noise2.sample(
            (n + m, pdim - 1), torch_generator(cfg.seed, "attack", "m2", "R2", noise2_scale, t)
        )
        W_a = agg_key.encode(aggregate, R2)
        recorder.record_server_input(t, W_a)
        truth.aggregate_models[t] = truth.upload_models[t] @ truth.weights

        # 4. Server re-encodes without removing code 2: W' = P1 (P1L W'_a) + N1 R1.
        R1 = noise1.sample((m, pdim), torch_generator(cfg.seed, "attack", "m2", "R1", noise2_scale, t))
        W_bar = key.decode(W_a)
        broadcast = key.encode(W_bar, R1)
        w = strip(W_bar)  # the model the next broadcast carries: W̄ P2R (evaluator's view)
    return truth


# ------------------------------------------------------------------------------------------------------------
# Scoring.


@dataclass
class Figure:
    """One attack's figure: a headline value and the same figure per round where it has one."""

    threat_model: str
    attack: str
    figure: str
    value: float | int | None
    per_round: dict[int, float | int | None] = field(default_factory=dict)
    note: str = ""


#: What each figure means and why, printed once per report (the figures' notes hold per-design numbers).
EXPLANATIONS: dict[str, str] = {
    "difference_rank": (
        "Every client of a round starts from the same w~^t, so N1 r^t cancels in w~_i - w~_j = P1 (w_i - "
        "w_j). "
        "The stacked differences span col(P1) after about ceil(n/(N_c-1)) rounds, ceil(s/(N_c-1)) for blocks "
        "of "
        "s parameters. Numerical rank: singular values above c * eps64 * max|w~| * sqrt(rows * columns) per "
        "block, a certified bound on the differences' round-off (Weyl), so every counted direction is signal."
    ),
    "difference_noise": (
        "Per element, uploads only. The paper's per-element epsilon covers element j of ONE upload, whose "
        "noise (N1 r^t)_j has std s_j = ||N1^j|| sigma. The aggregator holds all N_c uploads of a round, and "
        "they share one draw r^t, so element j of w~_i - w~_k is P1^j (w_i - w_k) with round-off only. "
        "Measured by the scorer, who splits a vector x into signal and noise with the key: the noise is "
        "x - P1 P1L x (= N1 r exactly). The figure is the RMS of that noise in the differences over its RMS "
        "in one upload, over every element and round; a float64 bound is a few u * max|w~| / RMS(noise), "
        "u = 2^-53. Element by element the aggregator learns the clients' differences scaled by P1 exactly: "
        "against it the per-element epsilon does not hold (a noise-free release has no finite epsilon; "
        "round-off is deterministic and no noise)."
    ),
    "difference_noise_control": (
        "The same measurement on one upload of round t against one of round t+1 (independent draws, pairs "
        "of rounds used once, within a key epoch): the noise of the difference is N1 (r^t - r^{t+1}), "
        "sqrt(2) times one upload's in RMS. It shows the measurement sees noise where there is some."
    ),
    "projection": (
        "Orthogonal projection onto the recovered col(P1). Under P1L = pinv(P1) the noise lies in "
        "col(P1)^perp "
        "and is removed outright in exact arithmetic. In float64 the differences carry round-off of the "
        "noise's "
        "magnitude, which tilts the recovered subspace, so the leftover noise grows like (noise/alpha)^2: "
        "small "
        "at moderate scales, large at the paper's. An oblique kernel leaves noise of the full scale."
    ),
    "regression": (
        "Uploads only: regress the signal coordinates U^T w~ on the noise coordinates V^T w~ over all rounds "
        "of "
        "the key epoch; the noise of a round enters both through the same r^t, the model does not. The "
        "residual "
        "is the models' spread, so the error falls with rounds, whatever the noise scale."
    ),
    "telescoped": (
        "Needs the broadcasts, which the SPEC's aggregator does not see (every client receives them, so an "
        "eavesdropper on the server->client channel or one colluding client has them): U^T(aggregate_t - "
        "broadcast_t) = A(w^{t+1} - w^t) is noise-free, so the regression has no residual and is exact once "
        "the rounds of a key epoch exceed the noise dimensions (per block), whatever the noise scale or the "
        "left inverse."
    ),
    "geometry_ratio": (
        "Uploads only: P1 d_i = w~_i - sum_j p_j w~_j is noise-free (every upload of a round carries the "
        "same N1 r^t), where d_i = w_i - w_bar is client i's deviation from the round's weighted mean "
        "model; for a scaled-orthogonal P1 (P1^T P1 = alpha^2 I) norm ratios and angles of the deviations "
        "are exact from round 1. A generic dense P1 distorts them."
    ),
    "geometry_cosine": "As above, for the cosines between the deviations.",
    "geometry_ratio_broadcast": (
        "With the broadcast w~^t (same noise as the round's uploads): P1 u_i = w~_i - w~^t gives the client "
        "updates u_i = w_i - w^t themselves, with the same exactness for a scaled-orthogonal P1."
    ),
    "geometry_cosine_broadcast": "As above, for the cosines between the client updates.",
    "known_plaintext": (
        "Pairs (w, w~), each with fresh noise (one per round from a colluding client, or any known model): "
        "the "
        "min-norm decoder fitted on them equals P1L once they span the block's rows: s parameters + the "
        "block's extra rows, per block. Counted by binary search on the decode error of a fresh encoding "
        "falling below the tolerance."
    ),
    "collusion": (
        "Every client holds P1L (the target optimizer needs it), so one colluding client hands it over and "
        "the "
        "aggregator decodes every upload as the server does."
    ),
}


def _dense(key: ServerKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(m.detach().to(dtype=torch.float64, device="cpu").numpy() for m in key.dense())  # type: ignore[return-value]


def errors_up_to_map(
    layout: BlockLayout,
    bases: list[tuple[np.ndarray, np.ndarray]],
    P1: np.ndarray,
    coords: list[np.ndarray],
    truth: np.ndarray,
) -> np.ndarray:
    """Relative error of each recovered model (columns) after undoing the adversary's unknown map
    ``A_b = U_bᵀ P1_b`` block by block (scorer side: it needs the key). Zero-safe: a zero true model is
    scored by its absolute error."""
    w_hat = np.zeros_like(truth)
    for rows, params, (U, _), c in zip(layout.rows, layout.params, bases, coords, strict=True):
        A = U.T @ P1[np.ix_(rows, params)]
        w_hat[params] = np.linalg.solve(A, c)
    num = np.linalg.norm(w_hat - truth, axis=0)
    den = np.linalg.norm(truth, axis=0)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), num)


def _geometry_errors(est: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Max relative error of norm ratios and max absolute error of cosines over client pairs i != j."""
    _, r_est, c_est = update_geometry(est)
    _, r_true, c_true = update_geometry(true)
    off = ~np.eye(est.shape[1], dtype=bool) & np.isfinite(r_true) & np.isfinite(r_est)
    if not off.any():
        return math.nan, math.nan
    return float(np.max(np.abs(r_est[off] / r_true[off] - 1.0))), float(
        np.max(np.abs(c_est[off] - c_true[off]))
    )


@dataclass
class DesignResult:
    """Every figure of one key design, plus its per-element ε (paper's formula and the sound one)."""

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


def _nanmax(per_round: dict[int, float]) -> float | None:
    """Max over rounds, ignoring NaN (pairs with a zero vector); None when no round has the figure."""
    vals = [v for v in per_round.values() if not math.isnan(v)]
    return max(vals) if vals else None


def _first_round(per_round: dict[int, float]) -> str:
    return f"round {min(per_round)}: {per_round[min(per_round)]:.2e}" if per_round else "no round recorded"


def _trend(per_round: dict[int, float | int | None]) -> str:
    """ "X in round a, Y in round b" over the rounds where the figure exists."""
    pts = [(t, v) for t, v in sorted(per_round.items()) if v is not None]
    if not pts:
        return "never computable: col(P1) was not known in any key epoch"
    (t0, v0), (t1, v1) = pts[0], pts[-1]
    return f"{v0:.2e} in round {t0} (first with col(P1) known), {v1:.2e} in round {t1}"


def _per_element_epsilon(cfg: DictConfig, key: ServerKey, task: SmallTask) -> tuple[float, float]:
    """Worst-element ε of the client upload (the paper's formula and the sound one), via the accountant."""
    from sifl_ray.privacy import release_epsilons

    sizes = [int(x.shape[0]) for x in task.X]
    rels = release_epsilons(
        key_norms=key.norms(),
        noise1=NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale),
        clip=cfg.audit.clip,
        local_size=sizes,
        total_size=sum(sizes),
        delta=cfg.audit.delta,
        mode="m1",
    )
    local = next(r for r in rels if r.release == "local")
    return float(local.epsilon_paper), float(local.epsilon)


def known_plaintext(
    key: ServerKey, layout: BlockLayout, cfg: DictConfig, design: Design
) -> tuple[int | None, float, float, float]:
    """(d) How many known (w, w~) pairs, each with fresh noise, give the exact decoder.

    Pairs come from an oracle that encodes random models with the key (as a colluding client would supply
    one per round). Binary search over the pair count on "relative decode error of a fresh encoding below
    the tolerance": below the block's row count the min-norm decoder misses a direction and the error is
    large; from it on the decoder is ``P1L`` up to round-off.

    Returns:
        ``(pairs_needed or None, error with that many pairs, error with one fewer, key holder's error)``.
    """
    n, m = key.n, key.n_tilde - key.n
    gen = torch_generator(cfg.seed, "attack", design.name, "known-plaintext")
    noise = NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale)
    k_max = max(r.size for r in layout.rows) + 2
    W = torch.randn(n, k_max + 1, generator=gen, dtype=CODING_DTYPE) * cfg.training.init_scale
    W_tilde = key.encode(W, noise.sample((m, k_max + 1), gen)).numpy()
    W = W.numpy()
    fresh_w, fresh = W[:, -1], W_tilde[:, -1]

    def error(k: int) -> float:
        if k <= 0:
            return math.inf
        L = fit_decoder(layout, W_tilde[:, :k], W[:, :k])
        return float(np.linalg.norm(apply_decoder(layout, L, fresh) - fresh_w) / np.linalg.norm(fresh_w))

    tol = cfg.known_plaintext.tolerance
    holder = float(
        np.linalg.norm(key.decode(torch.as_tensor(fresh)).numpy() - fresh_w) / np.linalg.norm(fresh_w)
    )
    if error(k_max) >= tol:
        return None, error(k_max), math.nan, holder
    lo, hi = 1, k_max
    while lo < hi:
        mid = (lo + hi) // 2
        if error(mid) < tol:
            hi = mid
        else:
            lo = mid + 1
    return lo, error(lo), error(lo - 1), holder


def evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    """Simulate one design, run attacks (a)–(d) on the transcript (each with its threat model), score them."""
    with single_threaded():
        return _evaluate_design(task, cfg, design)


@dataclass
class _PerRound:
    """The aggregator's figures, round by round (None where col(P1) is not yet known in the key epoch)."""

    rank: dict[int, int] = field(default_factory=dict)
    projection: dict[int, float | None] = field(default_factory=dict)
    regression: dict[int, float | None] = field(default_factory=dict)
    telescoped: dict[int, float | None] = field(default_factory=dict)
    ratio_err: dict[int, float] = field(default_factory=dict)  # uploads only: deviations from the mean
    cos_err: dict[int, float] = field(default_factory=dict)
    ratio_err_bcast: dict[int, float] = field(default_factory=dict)  # with the broadcast: the updates
    cos_err_bcast: dict[int, float] = field(default_factory=dict)
    full_rank_round: int | None = None  # rounds into the key epoch when col(P1) was first complete
    best_epoch_rank: int = 0


def _aggregate(recorder: TranscriptRecorder, round: int) -> np.ndarray:
    """The aggregator's own FedAvg of a round's uploads."""
    uploads, clients = recorder.upload_matrix(round)
    return uploads @ recorder.client_weights(clients)


def _aggregator_attacks(
    recorder: TranscriptRecorder, truth: GroundTruth, layout: BlockLayout, cfg: DictConfig
) -> _PerRound:
    """Attacks (a)–(c) round by round on the transcript; each scored against the truth.

    Uploads only (the SPEC's aggregator): (a), projection, regression, geometry of the deviations. With the
    broadcasts as well (:data:`AGGREGATOR_BROADCASTS`): the telescoped regression, geometry of the updates.
    """
    out = _PerRound()
    attack = DifferenceAttack(layout, tol_factor=cfg.rank_tol_factor)
    P1_of_epoch = {e: _dense(k)[0] for e, k in truth.keys.items()}  # scorer side: undoes the unknown map
    epoch, epoch_rounds = None, []
    for t in recorder.rounds():
        if recorder.epoch_of(t) != epoch:  # a new key: what was learnt is useless
            epoch, epoch_rounds = recorder.epoch_of(t), []
            attack.reset()
        uploads, clients = recorder.upload_matrix(t)
        epoch_rounds.append(t)

        # (a) Noise-free differences.
        out.rank[t] = attack.observe(uploads)
        out.best_epoch_rank = max(out.best_epoch_rank, out.rank[t])
        if attack.full_rank and out.full_rank_round is None:
            out.full_rank_round = len(epoch_rounds)

        # (c) Geometry, from round 1. Uploads only: the deviations P1 (w_i - w_bar) from the weighted mean
        # upload (the round's noise cancels). With the M1 broadcast (same noise): the updates P1 (w_i - w^t).
        weights = recorder.client_weights(clients)
        deviations = truth.upload_models[t] - truth.aggregate_models[t][:, None]
        out.ratio_err[t], out.cos_err[t] = _geometry_errors(
            encoded_updates(uploads, None, weights), deviations
        )
        bcast = recorder.broadcasts.get(t)
        if bcast is not None and bcast.ndim == 1:
            out.ratio_err_bcast[t], out.cos_err_bcast[t] = _geometry_errors(
                encoded_updates(uploads, bcast, weights), truth.updates[t]
            )

        # (b) Noise removal, once col(P1) is known in this key epoch.
        if not attack.full_rank:
            out.projection[t] = out.regression[t] = out.telescoped[t] = None
            continue
        bases = attack.bases()
        P1, target = P1_of_epoch[epoch], truth.upload_models[t]

        def score(coords: list[np.ndarray], bases=bases, P1=P1, target=target) -> float:
            return float(errors_up_to_map(layout, bases, P1, coords, target).max())

        out.projection[t] = score(project_onto_signal(layout, bases, uploads))
        G = fit_noise_regression(layout, bases, [recorder.upload_matrix(s)[0] for s in epoch_rounds])
        out.regression[t] = score(remove_fitted_noise(layout, bases, G, uploads))
        G = fit_telescoped_regression(
            layout,
            bases,
            [recorder.broadcasts[s] for s in epoch_rounds],
            [_aggregate(recorder, s) for s in epoch_rounds[:-1]],
        )
        out.telescoped[t] = score(remove_fitted_noise(layout, bases, G, uploads))
    return out


def _difference_noise_figures(
    recorder: TranscriptRecorder, truth: GroundTruth, cfg: DictConfig
) -> dict[str, Figure]:
    """(a) per element: the noise in element j of one upload vs of a same-round difference, and the control
    with independent draws (:mod:`sifl_ray.attacks.element_noise`). Scorer side: the split into signal and
    noise uses the key of each round's epoch."""
    views = {epoch: key.client_view() for epoch, key in truth.keys.items()}

    def view_for_round(t: int):
        return views[truth.epoch_of(t)]

    same = measure_transcript(recorder, view_for_round)
    control = cross_round_pairs(recorder, view_for_round, truth.epoch_of)
    key0 = truth.keys[0]
    std = cfg.key.noise_scale * (math.sqrt(2.0) if cfg.key.noise == "laplace" else 1.0)
    predicted = float(np.median(key0.norms().n1_row_l2.numpy())) * std
    rms = float(np.sqrt(np.mean(np.square(same.upload_rms))))
    bound = EPS64 / 2 * max(float(np.max(np.abs(recorder.upload_matrix(t)[0]))) for t in recorder.rounds())
    return {
        "difference_noise": Figure(
            AGGREGATOR,
            "(a) per element: noise in element j of w~_i - w~_k (same round) vs of one upload w~_i",
            "RMS of the noise in the differences / in one upload (every element and round)",
            same.ratio,
            dict(same.per_round),
            f"worst element {same.worst_element_ratio:.2e}; noise RMS per element in one upload {rms:.3g} "
            f"(median measured {float(np.median(same.upload_rms)):.3g}, the paper's s_j = ||N1^j|| sigma: "
            f"median {predicted:.3g}), in the differences {rms * same.ratio:.2e}, against a round-off unit "
            f"u * max|w~| = {bound:.2e}; {same.pairs} differences over {same.rounds} rounds. The paper's "
            "per-element epsilon covers element j of ONE upload: against the aggregator, who holds every "
            "w~_i - w~_k = P1 (w_i - w_k), it does not hold",
        ),
        "difference_noise_control": Figure(
            AGGREGATOR,
            "(a) per element, control: one upload of round t vs one of round t+1 (independent draws)",
            "RMS of the noise in the differences / in one upload (sqrt(2) = 1.414 expected)",
            control.ratio,
            dict(control.per_round),
            f"{control.pairs} pairs of rounds, {key0.n_tilde - key0.n} noise dimensions each; worst "
            f"element {control.worst_element_ratio:.3g}",
        ),
    }


def _evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    tic = time.perf_counter()
    recorder = TranscriptRecorder(max_coordinates=cfg.transcript.max_coordinates)
    truth = simulate_m1(task, cfg, design, recorder)
    recorder.require_full("the aggregator's subspace attacks")
    n = truth.n
    P1_0, _, N1_0 = _dense(truth.keys[0])
    layout = BlockLayout.from_dense(P1_0, N1_0)  # public: which rows form a block, not the blocks
    pr = _aggregator_attacks(recorder, truth, layout, cfg)

    last = recorder.rounds()[-1]
    figures: dict[str, Figure] = {}
    rounds_needed = math.ceil(max(p.size for p in layout.params) / (task.clients - 1))
    figures["difference_rank"] = Figure(
        AGGREGATOR,
        "(a) noise-free same-round differences w~_i - w~_j = P1 (w_i - w_j)",
        "rounds until col(P1) is known (full numerical rank)",
        pr.full_rank_round,
        pr.rank,
        f"expected about ceil(s/(N_c-1)) = {rounds_needed} rounds for the largest block of s = "
        f"{max(p.size for p in layout.params)} parameters; best rank within one key epoch: "
        f"{pr.best_epoch_rank} of n = {n} (c = {cfg.rank_tol_factor:g})",
    )
    figures.update(_difference_noise_figures(recorder, truth, cfg))
    figures["projection"] = Figure(
        AGGREGATOR,
        "(b) noise removal by orthogonal projection onto the recovered col(P1)",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.projection.get(last),
        pr.projection,
        _trend(pr.projection),
    )
    figures["regression"] = Figure(
        AGGREGATOR,
        "(b) noise removal by regression of signal on noise coordinates over rounds",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.regression.get(last),
        pr.regression,
        _trend(pr.regression),
    )
    figures["telescoped"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(b) noise removal by regression on telescoped broadcasts (noise-free global-model increments)",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.telescoped.get(last),
        pr.telescoped,
        _trend(pr.telescoped),
    )
    figures["geometry_ratio"] = Figure(
        AGGREGATOR,
        "(c) norm ratios of the updates' deviations from their mean, P1 d_i = w~_i - sum_j p_j w~_j",
        "max relative error of ||d_i|| / ||d_j|| over client pairs (max over rounds)",
        _nanmax(pr.ratio_err),
        pr.ratio_err,
        _first_round(pr.ratio_err),
    )
    figures["geometry_cosine"] = Figure(
        AGGREGATOR,
        "(c) cosines between the updates' deviations from their mean",
        "max absolute error of cos(d_i, d_j) over client pairs (max over rounds)",
        _nanmax(pr.cos_err),
        pr.cos_err,
        _first_round(pr.cos_err),
    )
    figures["geometry_ratio_broadcast"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(c) norm ratios of the client updates, P1 u_i = w~_i - w~^t (needs the broadcast w~^t)",
        "max relative error of ||u_i|| / ||u_j|| over client pairs (max over rounds)",
        _nanmax(pr.ratio_err_bcast),
        pr.ratio_err_bcast,
        _first_round(pr.ratio_err_bcast),
    )
    figures["geometry_cosine_broadcast"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(c) cosines between the client updates (needs the broadcast w~^t)",
        "max absolute error of cos(u_i, u_j) over client pairs (max over rounds)",
        _nanmax(pr.cos_err_bcast),
        pr.cos_err_bcast,
        _first_round(pr.cos_err_bcast),
    )

    key0 = truth.keys[0]
    needed, err_k, err_km1, holder = known_plaintext(key0, layout, cfg, design)
    rows_b, params_b = layout.largest_block
    figures["known_plaintext"] = Figure(
        AGGREGATOR_KP,
        "(d) exact decoder from known (w, w~) pairs, block by block",
        "pairs needed for the exact decoder",
        needed,
        {},
        f"relative decode error of a fresh encoding: {err_k:.2e} with that many pairs, {err_km1:.2e} with "
        f"one fewer (the key holder's own: {holder:.2e}; tolerance {cfg.known_plaintext.tolerance:g}); "
        f"expected: the rows of the largest block, {rows_b} = {params_b} parameters + "
        f"{rows_b - params_b} extra rows",
    )

    collusion = 0.0
    for t in recorder.rounds():
        view = truth.key_for_round(t).client_view()
        decoded = view.decode(torch.as_tensor(recorder.upload_matrix(t)[0])).numpy()
        target = truth.upload_models[t]
        collusion = max(
            collusion,
            float(np.max(np.linalg.norm(decoded - target, axis=0) / np.linalg.norm(target, axis=0))),
        )
    figures["collusion"] = Figure(
        AGGREGATOR_COLLUSION,
        "(d) the colluding client hands over P1L (every client holds it for the target optimizer)",
        "max relative error of every decoded upload",
        collusion,
        {},
        f"the legitimate decoder's own round-off on a fresh encoding: {holder:.2e}",
    )

    eps_paper, eps_sound = _per_element_epsilon(cfg, key0, task)
    result = DesignResult(
        design=design.name,
        backend=design.backend,
        left_inverse=design.left_inverse,
        rekey_every=design.rekey_every,
        alpha=float(cfg.key.alpha),
        beta=float(cfg.key.beta),
        noise_scale=float(cfg.key.noise_scale),
        n=n,
        n_tilde=truth.n_tilde,
        layout=layout.describe(),
        transcript=recorder.describe(),
        epsilon_paper=eps_paper,
        epsilon_sound=eps_sound,
        figures=figures,
        key_holder_decode_error=holder,
        seconds=time.perf_counter() - tic,
    )
    return result, recorder, truth


@dataclass
class M2Result:
    noise2_scale: float
    n: int
    p: int
    corr_per_round: dict[int, float]
    transcript: str


def evaluate_m2(cfg: DictConfig, *, transcript_dir: Path | None = None) -> list[M2Result]:
    """(e) The M2 server's estimate of the global model from ``P1L W'_a``, per round, per R2 noise scale.

    The server uses only its own view: the inputs ``W'_a`` it received and its own ``P1L``.
    """
    with single_threaded():
        return _evaluate_m2(cfg, transcript_dir)


def _evaluate_m2(cfg: DictConfig, transcript_dir: Path | None) -> list[M2Result]:
    task = make_task(
        features=cfg.m2.features,
        hidden=0,
        clients=cfg.m2.clients,
        samples_per_client=cfg.m2.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=derive_seed(cfg.seed, "m2"),
    )
    out = []
    for scale in cfg.m2.noise2_scales:
        recorder = TranscriptRecorder(max_coordinates=None)
        truth = simulate_m2(task, cfg, noise2_scale=float(scale), recorder=recorder)
        key = truth.keys[0]
        corr = {}
        for t, W_a in sorted(recorder.server_inputs.items()):
            W_bar = key.decode(torch.as_tensor(W_a)).numpy()  # the server's own P1L
            corr[t] = abs_correlation(m2_server_estimate(W_bar), truth.aggregate_models[t])
        out.append(M2Result(float(scale), task.n, cfg.m2.p, corr, recorder.describe()))
        if transcript_dir is not None and cfg.transcript.save:
            recorder.save(transcript_dir / f"m2-R2-scale-{float(scale):g}.npz")
    return out


#: The noise-removal figures that use the uploads alone (the SPEC's aggregator): the RESULT line's best.
UPLOADS_ONLY_REMOVAL = ("projection", "regression")

#: Configuration fields never written out: ``seed`` reproduces the data, the initial model, the minibatches
#: and every noise draw (beside a transcript: the plain models), ``key_seed`` every key.
REDACTED_FIELDS = ("seed", "key_seed")


def public_config(cfg: DictConfig) -> dict[str, Any]:
    """The configuration as written to JSON, markdown and TensorBoard: :data:`REDACTED_FIELDS` removed, and
    a ``keys`` line saying what kind of keys were used (without any seed)."""
    data: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    reproducible = data.get("key_seed") is not None
    for name in REDACTED_FIELDS:
        data.pop(name, None)
    data["keys"] = (
        "reproducible simulation keys derived from a fixed seed (not secret; the seed is not written out)"
        if reproducible
        else "256 secure random bits per key"
    )
    data["redacted"] = (
        "the run seed (data, initial model, minibatches, noise) and the key seed: either, beside the "
        "transcripts, would give back the plain models or the keys"
    )
    return data


@dataclass
class SuiteResult:
    config: dict[str, Any]
    designs: list[DesignResult]
    m2: list[M2Result]
    audit_whole: AuditTest | None
    audit_single: AuditTest | None
    audit_design: str
    audit_sensitivity: float
    primary: str
    seconds: float

    def primary_result(self) -> DesignResult:
        return next(d for d in self.designs if d.design == self.primary)

    def headline(self) -> dict[str, float | int | None]:
        """The RESULT line's figures (see :func:`sifl_ray.attacks.report.result_line`).

        ``projection_error`` is the best noise removal from the uploads alone (orthogonal projection or
        regression), the SPEC's aggregator; the telescoped regression needs the broadcasts and is reported
        apart (:meth:`broadcast_headline`). ``diff_noise_ratio`` (last, uploads only): the noise in the
        elements of same-round differences over the noise in one upload (:mod:`.element_noise`).
        """
        d = self.primary_result()
        removal = [d.figures[k].value for k in UPLOADS_ONLY_REMOVAL]
        removal = [v for v in removal if v is not None]
        m2_round1 = [r.corr_per_round[min(r.corr_per_round)] for r in self.m2]
        return {
            "full_rank_round": d.figures["difference_rank"].value,
            "projection_error": min(removal) if removal else None,
            "m2_server_corr": min(m2_round1) if m2_round1 else None,
            "audit_eps_lb": self.audit_whole.epsilon_lower_bound if self.audit_whole else None,
            "paper_eps": d.epsilon_paper,
            "diff_noise_ratio": d.figures["difference_noise"].value,
        }

    def broadcast_headline(self) -> dict[str, float | str | None]:
        """The primary design's noise removal with the broadcasts too (not on the RESULT line)."""
        d = self.primary_result()
        return {"threat_model": AGGREGATOR_BROADCASTS, "telescoped_error": d.figures["telescoped"].value}


def run_suite(
    cfg: DictConfig, *, transcript_dir: Path | None = None, log: Callable[[str], object] = print
) -> SuiteResult:
    """Run every design of ``cfg`` under attacks (a)–(d), the M2 server attack (e) and the audit (f)."""
    with single_threaded():
        return _run_suite(cfg, transcript_dir=transcript_dir, log=log)


def _run_suite(cfg: DictConfig, *, transcript_dir: Path | None, log: Callable[[str], object]) -> SuiteResult:
    tic = time.perf_counter()
    task = make_task(
        features=cfg.model.features,
        hidden=cfg.model.hidden,
        clients=cfg.data.clients,
        samples_per_client=cfg.data.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=cfg.seed,
    )
    designs = []
    truths: dict[str, GroundTruth] = {}
    for name in cfg.designs:
        design = Design.parse(name)
        result, recorder, truths[name] = evaluate_design(task, cfg, design)
        designs.append(result)
        if transcript_dir is not None and cfg.transcript.save:
            recorder.save(transcript_dir / f"{design.name}.npz")
        log(f"design {design.name}: done in {result.seconds:.1f}s")

    quiet = OmegaConf.merge(
        cfg, {"key": {"beta": cfg.contrast.beta, "noise_scale": cfg.contrast.noise_scale}}
    )
    for name in cfg.contrast.designs:
        result, _, _ = evaluate_design(task, quiet, Design.parse(name))
        result.design = f"{name}@moderate"
        designs.append(result)
        log(
            f"design {result.design} (beta = {cfg.contrast.beta:g}, noise {cfg.contrast.noise_scale:g}): done"
        )

    m2 = evaluate_m2(cfg, transcript_dir=transcript_dir) if cfg.m2.enabled else []
    if m2:
        log(f"M2 server attack: n = {m2[0].n}, done")

    truth = truths[cfg.primary]
    from sifl_ray.privacy import local_sensitivity

    sensitivity = float(
        local_sensitivity(clip=cfg.audit.clip, local_size=min(int(x.shape[0]) for x in task.X))
    )
    last = max(truth.aggregate_models)
    whole, single = audit_upload_release(
        truth.keys[0],
        w0=torch.as_tensor(truth.aggregate_models[last]),
        sensitivity=sensitivity,
        noise=NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale),
        trials=cfg.audit.trials,
        generator=torch_generator(cfg.seed, "attack", "audit"),
        delta=cfg.audit.delta,
        confidence=cfg.audit.confidence,
    )
    return SuiteResult(
        config=public_config(cfg),
        designs=designs,
        m2=m2,
        audit_whole=whole,
        audit_single=single,
        audit_design=cfg.primary,
        audit_sensitivity=sensitivity,
        primary=cfg.primary,
        seconds=time.perf_counter() - tic,
    )
