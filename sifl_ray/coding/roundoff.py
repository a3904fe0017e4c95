"""A rigorous float64 bound on what one round of coding changes, for any CPU (docs/method.md "Precision").

Why a second model next to :mod:`sifl_ray.coding.precision`. That module *estimates* the decode error
(high-probability constants fitted to how round-off behaves in practice); it decides whether a run is
refused. An estimate can be beaten by a CPU that sums in another order. This module *bounds*: every
operation the coding code performs is charged its worst case (Higham's γ_k = k·u/(1 − k·u), u = 2⁻⁵³),
whatever the summation order, FMA or SIMD width, and every norm is an upper bound read from the real
key's stored parameters (their cosines, signs and matrices, including how far the stored floats are from
exactly orthogonal). The price is looseness: the bound sits 1–3 orders above measured errors.

What is bounded. Round t of a SIFL arm from the clients' decoded start ``w0 = decode(x^t)``: the clients
train (training is not coding and is the same in both arms), upload (fused form: ``x + P1 (w_i − w0)``),
the workers and aggregator sum and renormalise over whichever clients were accepted, M2 adds code 2, the
server decodes or re-encodes, and the evaluator decodes the next broadcast. The bound is on
``‖decoded next model − Σ_i a_i w_i‖₂`` (a_i = |D_i| / Σ|D_j| over the accepted clients, any set of them):
a rejected upload, a refused partial reduced again, a retried or dropped worker all only change which
clients are summed, which the bound allows for. It holds for every float64 execution, given that the
round's noise draws stay below their (1 − δ)-quantile norms (Gaussian concentration; Laplace by a union
bound) and that every model is inside the clipping ball (``‖w_i‖ ≤ C``, enforced by the clients). It is not
a bound on the distance between two *trajectories* (a SIFL run and its paired FedAvg run): local
training can amplify a perturbation from round to round, and no coding analysis bounds that.

The stepwise client form decodes at every local step, so its local trajectory itself differs from FedAvg's
by training on perturbed points; the bound covers the fused form (the default) only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch

from sifl_ray.coding import transform

U = 2.0**-53  # unit round-off of float64


def gamma(k: float) -> float:
    """Higham's γ_k = k·u / (1 − k·u): the relative error of any k roundings in sequence."""
    return k * U / (1.0 - k * U)


def _up(x: float) -> float:
    """``x`` rounded up by a few ulps: a norm computed in float64 made into an upper bound (its relative
    error is at most γ_k for the k terms it sums; 1e-12 covers any k this code sees)."""
    return float(x) * (1.0 + 1e-12) + 1e-300


@dataclass(frozen=True)
class KeyRoundoff:
    """Rigorous float64 constants of one server key (2-norms; nothing here reveals the key).

    ``decode`` bounds ``‖fl(decode(x)) − P1L x‖ / ‖x‖``; ``apply_p1`` likewise for ``P1 d``;
    ``encode_w`` and ``encode_r`` bound ``‖fl(encode(w, r)) − (P1 w + N1 r)‖ ≤ encode_w‖w‖ + encode_r‖r‖``;
    ``reencode_*`` the same for the M2 server step ``P1 P1L x + N1 r``. ``pp_defect`` ≥ ‖P1L P1 − I‖₂ and
    ``leak`` ≥ ‖P1L N1‖₂ in exact arithmetic on the stored parameters (zero on paper, a few ulps in
    float64 keys).
    """

    p1_norm: float
    p1l_norm: float
    n1_norm: float
    decode: float
    apply_p1: float
    encode_w: float
    encode_r: float
    reencode_x: float
    reencode_r: float
    pp_defect: float
    leak: float
    how: str


@dataclass(frozen=True)
class AggregatorRoundoff:
    """Rigorous float64 constants of key 2: ``strip`` bounds ``‖fl(W P2R) − W P2R‖ / ‖W‖_F``, ``encode``
    the relative error of ``w P2 + R2 N2`` (against ``‖w‖‖P2‖ + ‖R2‖_F‖N2‖_F``); ``p2p2r_defect`` =
    |P2 P2R − 1| and ``n2p2r_defect`` = ‖N2 P2R‖ computed exactly (rational arithmetic on the stored
    floats)."""

    p: int
    p2_norm: float
    p2r_norm: float
    n2_fro: float
    strip: float
    encode: float
    p2p2r_defect: float
    n2p2r_defect: float


# ------------------------------------------------------------------------------------------------------------
# Key 1, fast backend: layer by layer.


def _layer_constants(layers, transform) -> tuple[float, float, float]:
    """(relative error ρ, norm N, orthogonality defect d) of a structured orthogonal transform.

    ρ: ``‖fl(Qx) − Qx‖ ≤ ρ‖x‖`` for Q or Qᵀ, from the recurrence ``1 + E_l ≤ (1 + ρ_l)(1 + E_{l−1})`` over
    the layers (each layer's error is relative to its exact output on its computed input), times N;
    N ≥ ‖Q‖₂; d ≥ ‖QᵀQ − I‖₂ for the stored parameters.
    """
    prod_err, norm, prod_def = 1.0, 1.0, 1.0
    for layer in layers:
        if isinstance(layer, transform.Permutation):
            continue
        if isinstance(layer, transform.Givens):
            c, s = layer.cos.double(), layer.sin.double()
            # |c² + s² − 1| computed in float64 is off by at most γ₃(c² + s² + 1) ≤ 3γ₃.
            d = float((c * c + s * s - 1.0).abs().max()) + 3.0 * gamma(3) if c.numel() else 0.0
            # Each output is c·a ∓ s·b with at most three roundings: |error| ≤ γ₃(|c||a| + |s||b|), and
            # the 2×2 matrix [[|c|, |s|], [|s|, |c|]] has norm |c| + |s| ≤ √(2(1 + d)).
            rho = gamma(3) * math.sqrt(2.0 * (1.0 + d))
            norm *= math.sqrt(1.0 + d)
        elif isinstance(layer, transform.SignedHadamard):
            length = layer.signs.shape[0]
            k = length.bit_length() - 1  # log₂ L (L a power of two)
            h = float(layer.signs.abs().max())
            # Scaling by ±h: one rounding. Each butterfly level computes a + b, then (a + b) − 2b: the
            # error is ≤ u|a + b| on the first output and ≤ u(1 + u)|a + b| + u|a − b| on the second, so
            # ≤ √3·u(1 + u)·‖level output‖.
            rho = (1.0 + U) * (1.0 + math.sqrt(3.0) * U * (1.0 + U)) ** k - 1.0
            d = abs(h * h * length - 1.0) + 3.0 * U
            norm *= h * math.sqrt(length)
        else:  # pragma: no cover - a new layer kind must say its constants
            raise TypeError(f"no round-off constants for layer {type(layer).__name__}")
        prod_err *= 1.0 + rho
        prod_def *= 1.0 + d
    return norm * (prod_err - 1.0), norm, prod_def - 1.0


def fast_roundoff(key) -> KeyRoundoff:
    """Constants of a :class:`~sifl_ray.coding.fast.FastServerKey` (see the module docstring)."""
    core, alpha, beta = key.core, float(key.alpha), float(key.beta)
    rho_q, n_q, d_q = _layer_constants(core.Q.layers, transform)
    zeta = n_q + rho_q  # ‖fl(Qᵀx)‖ / ‖x‖
    if core.K is None:
        kappa = c_k = 0.0
    else:
        rho_m, n_m, _ = _layer_constants(core.K.inner.layers, transform)
        copies = core.K.signs.shape[0] // core.K.m
        s_k = float(core.K.signs.abs().max())
        kappa = s_k * math.sqrt(copies) * n_m  # ≥ ‖K‖₂
        c_k = s_k * math.sqrt(copies) * (rho_m + U * (n_m + rho_m))  # ‖fl(Kv) − Kv‖ / ‖v‖
    g2, g3 = gamma(2), gamma(3)
    left = math.sqrt(1.0 / alpha**2 + kappa**2)  # ‖[I/α, K]‖₂
    if core.K is None:
        decode = (rho_q + U * zeta) / alpha
    else:
        decode = left * rho_q + zeta * (c_k + g3 / alpha + U * (kappa + c_k))
    apply_p1 = alpha * (n_q * U + rho_q * (1.0 + U))

    def encode(wn: float, rn: float) -> float:
        if core.K is None:
            err_z = U * alpha * wn + U * beta * rn
            z = alpha * wn + beta * rn
        else:
            k_r = (kappa + c_k) * (1.0 + g2) * alpha * beta * rn
            err_z = (
                U * beta * rn + (c_k * (1.0 + g2) + kappa * g2) * alpha * beta * rn + g2 * (k_r + alpha * wn)
            )
            z = alpha * wn + (alpha * kappa + 1.0) * beta * rn
        return n_q * err_z + rho_q * (z + err_z)

    def reencode(xn: float, rn: float) -> float:
        err_zhat = rho_q * xn
        if core.K is None:
            err_z = err_zhat + U * beta * rn
            z = n_q * xn + beta * rn
        else:
            shifted = (zeta * xn + (1.0 + U) * beta * rn) * (1.0 + U)
            err_shift = err_zhat + U * beta * rn + U * (zeta * xn + (1.0 + U) * beta * rn)
            err_k = c_k * alpha * (1.0 + U) * shifted + kappa * alpha * (err_shift + U * shifted)
            k_hat = (kappa + c_k) * alpha * (1.0 + U) * shifted
            err_z = err_zhat + err_k + U * (zeta * xn + k_hat) + U * beta * rn
            z = n_q * xn * (1.0 + alpha * kappa) + beta * rn * (1.0 + alpha * kappa)
        return n_q * err_z + rho_q * (z + err_z)

    n1 = beta * n_q * (math.sqrt(1.0 + (alpha * kappa) ** 2) if core.K is not None else 1.0)
    return KeyRoundoff(
        p1_norm=alpha * n_q,
        p1l_norm=left * n_q,
        n1_norm=n1,
        decode=decode,
        apply_p1=apply_p1,
        encode_w=encode(1.0, 0.0),
        encode_r=encode(0.0, 1.0),
        reencode_x=reencode(1.0, 0.0),
        reencode_r=reencode(0.0, 1.0),
        pp_defect=left * d_q * alpha,
        leak=left * d_q * n1 / n_q if core.K is not None else d_q * beta / alpha,
        how=f"fast: ‖fl(Qx) − Qx‖ ≤ {rho_q / U:.1f}·u·‖x‖ over {len(core.Q.layers)} layers",
    )


# ------------------------------------------------------------------------------------------------------------
# Key 1, matrix backends (dense: one block; block: many): products of stored matrices.


def _spectral_up(mats: torch.Tensor) -> float:
    """Max spectral norm over a batch, as an upper bound: LAPACK's singular values are backward stable
    (error ≤ p(k)·u·σ_max with a modest p); 1e-10 relative is far above that for any size used here."""
    return float(torch.linalg.matrix_norm(mats, ord=2).max()) * (1.0 + 1e-10)


def matrix_roundoff(blocks: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> KeyRoundoff:
    """Constants for keys applied as (batched) matrix products: blocks of ``(P1, P1L, N1)`` with shapes
    (count, rows, cols), (count, cols, rows), (count, rows, extra); a dense key is one block of count 1.

    A product with inner dimension k errs by at most ``γ_k |A||x|`` elementwise, so by ``γ_k ‖A‖_F ‖x‖``;
    block-diagonal keys take the worst block. The defects are computed residuals plus their own γ bound.
    """
    dec = p1 = n1 = 0.0
    p1_norm = p1l_norm = n1_norm = pp = leak = 0.0
    for P1, P1L, N1 in blocks:
        P1, P1L = P1.double(), P1L.double()
        rows, cols = P1.shape[-2], P1.shape[-1]
        f_p1 = _up(float(torch.linalg.matrix_norm(P1).max()))
        f_p1l = _up(float(torch.linalg.matrix_norm(P1L).max()))
        p1 = max(p1, gamma(cols) * f_p1)
        dec = max(dec, gamma(rows) * f_p1l)
        p1_norm, p1l_norm = max(p1_norm, _spectral_up(P1)), max(p1l_norm, _spectral_up(P1L))
        eye = torch.eye(cols, dtype=torch.float64, device=P1.device)
        res = _up(float(torch.linalg.matrix_norm(P1L @ P1 - eye).max()))
        pp = max(pp, res * (1.0 + U) + gamma(rows + 1) * f_p1l * f_p1)
        if N1 is not None and N1.shape[-1]:
            N1 = N1.double()
            f_n1 = _up(float(torch.linalg.matrix_norm(N1).max()))
            n1 = max(n1, gamma(N1.shape[-1]) * f_n1)
            n1_norm = max(n1_norm, _spectral_up(N1))
            res = _up(float(torch.linalg.matrix_norm(P1L @ N1).max()))
            leak = max(leak, res + gamma(rows) * f_p1l * f_n1)
    # encode = apply_P1(w) + apply_N1(r): one more rounding for the sum
    encode_w = p1 + U * (p1_norm + p1) * (1.0 + U)
    encode_r = n1 + U * (n1_norm + n1) * (1.0 + U)
    return KeyRoundoff(
        p1_norm=p1_norm,
        p1l_norm=p1l_norm,
        n1_norm=n1_norm,
        decode=dec,
        apply_p1=p1,
        encode_w=encode_w,
        encode_r=encode_r,
        # reencode = encode(decode(x), r): the decode error passes through P1, then encode's own
        reencode_x=p1_norm * dec + encode_w * (p1l_norm + dec),
        reencode_r=encode_r,
        pp_defect=pp,
        leak=leak,
        how=f"matrix products over {len(blocks)} block group(s)",
    )


# ------------------------------------------------------------------------------------------------------------
# Key 2.


def _exact(x: torch.Tensor) -> list[Fraction]:
    return [Fraction(float(v)) for v in x.reshape(-1).tolist()]


def aggregator_roundoff(key) -> AggregatorRoundoff:
    """Constants of a :class:`~sifl_ray.coding.aggregator.DenseAggregatorKey` (p×p-sized, so exact)."""
    p = int(key.p)
    P2, P2R, N2 = key.P2.double().cpu(), key.P2R.double().cpu(), key.N2.double().cpu()
    p2, p2r = _exact(P2), _exact(P2R)
    e_a = abs(sum(a * b for a, b in zip(p2, p2r, strict=True)) - 1)
    e_b = [sum(a * b for a, b in zip(_exact(row), p2r, strict=True)) for row in N2]
    e_b_norm = math.sqrt(float(sum(v * v for v in e_b)))
    return AggregatorRoundoff(
        p=p,
        p2_norm=_up(float(torch.linalg.vector_norm(P2))),
        p2r_norm=_up(float(torch.linalg.vector_norm(P2R))),
        n2_fro=_up(float(torch.linalg.matrix_norm(N2))),
        strip=gamma(p) * _up(float(torch.linalg.vector_norm(P2R))),
        encode=gamma(p + 1),
        p2p2r_defect=_up(float(e_a)),
        n2p2r_defect=_up(e_b_norm),
    )


# ------------------------------------------------------------------------------------------------------------
# One round.


def noise_norm_bound(count: int, *, scale: float, distribution: str, confidence: float) -> float:
    """An upper bound on ‖r‖₂ for ``count`` i.i.d. draws that fails with probability ≤ ``confidence``.

    Gaussian (std σ): ‖r‖ is σ-Lipschitz in standard normals with E‖r‖ ≤ σ√k, so
    P(‖r‖ ≥ σ(√k + t)) ≤ exp(−t²/2). Laplace (scale b): P(|r_i| > b·x) = e^{−x}, a union bound over the k
    draws, and ‖r‖ ≤ √k·max|r_i|.
    """
    if count <= 0 or scale <= 0:
        return 0.0
    if distribution == "laplace":
        return scale * math.sqrt(count) * math.log(count / confidence)
    return scale * (math.sqrt(count) + math.sqrt(2.0 * math.log(1.0 / confidence)))


@dataclass(frozen=True)
class RoundBound:
    """The bound of one round and the norms it assumed (all 2-norms)."""

    bound: float
    broadcast_norm: float  # X: the clients' M1-form broadcast (M2: after stripping)
    model_norm: float  # M: every model entering the round
    confidence: float  # probability that a noise draw exceeded its assumed norm
    terms: tuple[tuple[str, float], ...]


def round_error_bound(
    key: KeyRoundoff,
    *,
    scheme: str,
    n: int,
    n_tilde: int,
    model_norm: float,
    clients_per_worker: int,
    workers: int,
    noise_scale1: float,
    noise_scale2: float = 0.0,
    distribution: str = "gaussian",
    aggregator: AggregatorRoundoff | None = None,
    confidence: float = 1e-6,
) -> RoundBound:
    """Bound ``‖decoded next model − Σ a_i w_i‖₂`` for one round (see the module docstring).

    Args:
        key, aggregator: the keys' constants (:class:`KeyRoundoff`, :class:`AggregatorRoundoff` for M2).
        scheme: ``"M1"`` or ``"M2"``.
        model_norm: M ≥ ‖w‖ for the start and every local model (the clipping radius C, or the initial
            model's norm if larger, plus the coding error of the rounds before: see :func:`run_round_bound`).
        clients_per_worker, workers: the summation tree (most clients one worker sums, workers summed).
        noise_scale1, noise_scale2, distribution: the noise laws of r1/R1 and R2.
        confidence: per noise draw.
    """
    if scheme not in ("M1", "M2"):
        raise ValueError(f"scheme must be 'M1' or 'M2', got {scheme!r}")
    m2 = scheme == "M2"
    if m2 and aggregator is None:
        raise ValueError("M2 needs the aggregator key's constants")
    m, p = n_tilde - n, (aggregator.p if aggregator is not None else 1)

    def nb(count: int, scale: float) -> float:
        return noise_norm_bound(count, scale=scale, distribution=distribution, confidence=confidence)

    r1 = nb(m * p, noise_scale1)  # r1 (M1) or R1 (M2, m×p)
    rnd = _Round(
        k=key,
        aggregator=aggregator if m2 else None,
        M=model_norm,
        D=2.0 * model_norm,  # ‖w_i − w0‖
        r1=r1,
        r2=nb(n_tilde * (p - 1), noise_scale2) if m2 else 0.0,
        p=p,
        clients_per_worker=max(1, clients_per_worker),
        workers=workers,
    )
    # the server's M1 encoding (every M1 round, and round 0 of M2)
    k, M = key, model_norm
    X = k.p1_norm * M + k.n1_norm * r1 + k.encode_w * M + k.encode_r * r1
    bound, X_next, terms = _round_errors(rnd, X)
    for _ in range(50):  # steady state of the broadcast norm (it changes by u-sized terms)
        if X_next <= X:
            break
        X = X_next * (1.0 + 1e-9)
        bound, X_next, terms = _round_errors(rnd, X)
    else:  # pragma: no cover - only with constants near 1/u
        raise ArithmeticError("the broadcast-norm bound does not settle: the coding is not float64-stable")
    draws = 3 if m2 else 2
    return RoundBound(bound, X, M, draws * confidence, tuple(terms))


@dataclass(frozen=True)
class _Round:
    """The constants of one round's bound: the keys' (``aggregator`` in M2 only), ``M ≥ ‖w‖``,
    ``D = 2M ≥ ‖w_i − w0‖``, the noise norms ``r1`` (r1 or R1) and ``r2`` (R2), p, and the summation tree."""

    k: KeyRoundoff
    aggregator: AggregatorRoundoff | None
    M: float
    D: float
    r1: float
    r2: float
    p: int
    clients_per_worker: int
    workers: int


def _round_errors(rnd: _Round, X: float) -> tuple[float, float, list[tuple[str, float]]]:
    """(bound, next X, terms) for a round whose clients hold a broadcast of norm X."""
    k, D, nk = rnd.k, rnd.D, rnd.clients_per_worker
    e_agg, A = _aggregation_error(rnd, X)
    terms = [
        ("client decode", k.decode * X),
        ("P1L P1 ≠ I on the update", k.pp_defect * D),
        ("uploads and their sum", k.p1l_norm * e_agg),
    ]
    if rnd.aggregator is None:
        X_next, server = _m1_server_terms(rnd, X, A, e_agg)
    else:
        X_next, server = _m2_server_terms(rnd, rnd.aggregator, X, A, e_agg)
    terms += server
    # the reference Σ a_i w_i itself, summed in float64 by the paired plain round
    terms.append(("reference average", gamma(nk + rnd.workers + 2) * rnd.M))
    return sum(v for _, v in terms), X_next, terms


def _aggregation_error(rnd: _Round, X: float) -> tuple[float, float]:
    """(the error of the aggregate, a bound on its norm A): the clients' uploads summed by their worker,
    the workers' partials summed by the aggregator in a fixed order, then divided by the total weight."""
    k, D, nk = rnd.k, rnd.D, rnd.clients_per_worker
    # One worker: Σ s_i·(x + P1 Δ_i) (per-client uploads) or x·W + P1 Σ s_i Δ_i (the fused shortcut);
    # relative to the weight W_k, both err by at most:
    upload = (
        k.apply_p1 * D * (1.0 + U)
        + k.p1_norm * D * gamma(2)
        + U * (X + k.p1_norm * D) * (1.0 + U)
        + gamma(nk + 2) * (X + k.p1_norm * D + k.apply_p1 * D)
    )
    partial_norm = X + (k.p1_norm + k.apply_p1) * D + upload
    # the aggregator adds the workers' partials in a fixed order, then divides by the total weight
    e_agg = (upload + gamma(rnd.workers) * partial_norm) * (1.0 + U) + U * partial_norm
    return e_agg, X + k.p1_norm * D + e_agg


def _m1_server_terms(rnd: _Round, X: float, A: float, e_agg: float) -> tuple[float, list[tuple[str, float]]]:
    """M1: the server decodes the aggregate and re-encodes the new model; the evaluator decodes it."""
    k, M, D, r1 = rnd.k, rnd.M, rnd.D, rnd.r1
    w_new = M + k.decode * X + k.pp_defect * D + k.p1l_norm * e_agg + k.decode * A
    X_next = k.p1_norm * w_new + k.n1_norm * r1 + k.encode_w * w_new + k.encode_r * r1
    return X_next, [
        ("server decode", k.decode * A),
        ("P1L P1 ≠ I on the model", k.pp_defect * w_new),
        ("P1L N1 ≠ 0 on the noise", k.leak * r1),
        ("server encode", k.p1l_norm * (k.encode_w * w_new + k.encode_r * r1)),
        ("evaluator decode", k.decode * X_next),
    ]


def _m2_server_terms(
    rnd: _Round, a: AggregatorRoundoff, X: float, A: float, e_agg: float
) -> tuple[float, list[tuple[str, float]]]:
    """M2: the aggregator's code 2, the server's re-encoding of every column, the evaluator's strip and
    decode."""
    k, M, D, r1, r2 = rnd.k, rnd.M, rnd.D, rnd.r1, rnd.r2
    e_pi2 = a.encode * (A * a.p2_norm + r2 * a.n2_fro)
    Wa = A * a.p2_norm + r2 * a.n2_fro + e_pi2
    # P1L W'_a = (Σ a_i w_i + small) P2 + P1L R2 N2: bounded through the model, not through A
    p1l_agg = M + k.decode * X + k.pp_defect * D + k.p1l_norm * e_agg
    wbar = p1l_agg * a.p2_norm + k.p1l_norm * (r2 * a.n2_fro + e_pi2)
    e_re = k.reencode_x * Wa + k.reencode_r * r1
    W_next = k.p1_norm * wbar + k.n1_norm * r1 + e_re
    X_next = W_next * a.p2r_norm * (1.0 + gamma(rnd.p))
    return X_next, [
        ("P2 P2R ≠ 1", a.p2p2r_defect * k.p1l_norm * A),
        ("N2 P2R ≠ 0 on R2", k.p1l_norm * r2 * a.n2p2r_defect),
        ("aggregator code 2", k.p1l_norm * e_pi2 * a.p2r_norm),
        ("P1L P1 ≠ I on W̄", k.pp_defect * wbar * a.p2r_norm),
        ("P1L N1 ≠ 0 on R1", k.leak * r1 * a.p2r_norm),
        ("server re-encode", k.p1l_norm * e_re * a.p2r_norm),
        ("evaluator strip", k.p1l_norm * a.strip * W_next),
        ("evaluator decode", k.decode * X_next),
    ]


def run_round_bound(
    compute: Callable[[float], RoundBound], *, clip: float, initial_norm: float
) -> RoundBound:
    """The round bound with the model norm it needs: ``M = max(C, ‖w⁰‖) + B`` (a global model is an average
    of models clipped to C, plus one round's coding error B). Solved by iteration (B ≪ M)."""
    base = max(float(clip), float(initial_norm))
    result = compute(base)
    for _ in range(20):
        nxt = compute(base + result.bound)
        if nxt.bound <= result.bound * (1.0 + 1e-9):
            return nxt
        result = nxt
    return compute(base + 2.0 * result.bound)
