"""The precision price of immersion coding: predict it, measure it, refuse or warn (docs/method.md
"Precision").

Why there is a price. The encoded vector is mostly noise: ``x = P1 w + N1 r`` with ``‖P1 w‖ ~ α‖w‖`` and
``‖N1 r‖ ~ βσ√m`` (m = ñ − n). Decoding cancels the noise exactly in real arithmetic, but every float
operation on a number of size ``X`` commits an error up to ``u·X`` (unit round-off u = 2⁻⁵³ in float64,
2⁻²⁴ in float32), and ``P1L`` multiplies errors by up to ``‖P1L‖₂`` (1/α for the orthogonal designs).
So each decode carries an error of order ``u · (noise magnitude) · ‖P1L‖₂`` — the relative precision
of w is traded for noise: smaller ε (more noise) costs digits, linearly.

This is an ESTIMATE, not a bound: its constants (the safety factor C, BLAS's partial sums, the random-walk
accumulation of round-off) are fitted to how round-off behaves on the CPUs measured, and another CPU may
round less kindly. The rigorous per-round bound, worst case for every operation on any CPU, is
:mod:`sifl_ray.coding.roundoff` (1-3 orders looser); this estimate is what a run uses to refuse or warn.

The model (a high-probability estimate of ``max_i |ŵ_i − w_i|``, δ = ``confidence``). For one transform
(one encode or one decode) the error of a decoded coordinate is bounded by

    E_T(σ) = C · u · ‖P1L‖₂ · β√(1 + (ακ)²) · σ_std · [ q(m) + √(D·m/ñ) · q(n) ]
           + C · u · ‖w‖∞ · √D · q(n) · cond

with σ_std the noise standard deviation (Laplace scale b: b√2), D the transform depth (roundings an
output accumulates: ``log₂ L + 4`` per round of the fast transform; for dense and block the dot-product
length ñ or block height, divided by 64 for BLAS's parallel partial sums), ``q(k)`` the δ-quantile of
the largest of k standard noise draws (Gaussian √(2 ln(2k/δ)), Laplace ln(k/δ)/√2) and
``cond = ‖P1L‖₂‖P1‖₂`` (1 for the orthogonal designs). A key answers for its backend: D is
``key.transform_depth()``, ‖P1L‖₂ ``key.p1l_spectral()``, cond ``key.conditioning(...)``; a configuration
without a key gets D from :func:`~sifl_ray.coding.keys.transform_depth` and the fast design's norms.
The two noise terms are the two ways round-off meets the noise:

* concentrated (``q(m)``): in the fast design the noise enters the pre-image ``[α(w − βKr); βr]`` as m
  coordinates of size ~βσ; a decoded coordinate whose butterfly or Givens partner holds one of them is
  computed as the difference of two numbers of that size, so it carries ``u·βσ·q(m)/α`` (measured: the
  max error sits on those few coordinates, 40-80x the rms error);
* spread (``√(D m/ñ) q(n)``): the noise spread over all ñ coordinates (per-coordinate size βσ√(m/ñ))
  accumulates D roundings per output; this dominates for the dense backend, where a decode is a dot
  product of length ñ (D ∝ ñ gives a term ∝ ``βσ√m``).

A round chains several transforms, each with fresh round-off, so the estimate adds them:

* M1 (server encode, client decode, client encode of the change, aggregation of N_c uploads, server
  decode): ``2·E_T(σ1) + E_T(σ1)/√2 + C√N_c·u‖P1L‖₂(βσ1√(m/ñ) + α‖w‖∞) q(n)`` — the client's decode
  error is counted at 1/√2 (in the fused form it moves the point where gradients are taken, not the
  upload); the last term is the rounding of adding and averaging N_c uploads of per-coordinate size
  βσ1√(m/ñ).
* M2 adds the aggregator's code and the strip: the server decodes and re-encodes p columns that carry
  ``R2 N2`` (entries of size σ2·η spread over all ñ coordinates), and the client's strip multiplies every
  error by ``‖P2R‖₂ = 1/γ`` before the final decode, which sees the server noise ``N1 R1 P2R`` of size
  βσ1/γ: ``M1 + ‖P2R‖₂·[3·E_T^noise(σ1) + 2·C·u‖P1L‖₂·σ2η·√D·q(n)]``.

``C = 2`` is a safety factor for the constant in front of each term. Measured errors sit 5-80x below
the estimate for the fast backend at n ≥ 2,000 (5-30x at the paper's sizes and scales), 8-180x for dense
and block, and were never above it on the CPUs tested. For σ = 0 or tiny n (a max over a handful of
coordinates) the estimate is looser, but then it is at the 1e-14 level.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, NoiseDistribution, NoiseSpec, ServerKey
from sifl_ray.coding.keys import transform_depth
from sifl_ray.config.names import PRECISION_POLICIES
from sifl_ray.errors import SiflError

SAFETY = 2.0
DEFAULT_CONFIDENCE = 1e-6
Scheme = Literal["M1", "M2"]


class PrecisionError(SiflError, ValueError):
    """The predicted decode error exceeds the configured tolerance (policy ``"refuse"``)."""


class PrecisionWarning(UserWarning):
    """The predicted decode error exceeds the configured tolerance (policy ``"warn"``)."""


@dataclass(frozen=True)
class PrecisionReport:
    """The precision model's prediction for one round (see the module docstring).

    Attributes:
        predicted_max_error: high-probability estimate of ``max_i |decode(...)_i − w_i|`` over the round's
            chain (not a bound: see the module docstring).
        scheme: ``"M1"`` or ``"M2"``.
        dtype: the coding dtype the prediction is for (``"float64"`` or ``"float32"``).
        unit_roundoff: u of that dtype.
        terms: the chain's contributions by name (they add up to ``predicted_max_error``).
        config: the parameters the prediction was made from.
    """

    predicted_max_error: float
    scheme: str
    dtype: str
    unit_roundoff: float
    terms: tuple[tuple[str, float], ...]
    config: dict = field(default_factory=dict)

    def __float__(self) -> float:
        return self.predicted_max_error

    def relative_to(self, w_max: float) -> float:
        """The predicted error as a fraction of ``‖w‖∞``."""
        return self.predicted_max_error / w_max if w_max > 0 else math.inf


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = 2^-(mantissa bits + 1): half the gap between 1 and the next float."""
    return float(torch.finfo(dtype).eps) / 2.0


def noise_quantile(count: int, *, distribution: NoiseDistribution, confidence: float) -> float:
    """The δ-quantile of the largest |draw| among ``count`` unit-variance noise draws (δ = confidence)."""
    count = max(1, int(count))
    if distribution == "laplace":
        return math.log(count / confidence) / math.sqrt(2.0)
    return math.sqrt(2.0 * math.log(2.0 * count / confidence))


def _transform_error(
    *, u, p1l, beta_eff, sigma, m, n, n_tilde, depth, distribution, confidence, w_max, cond
) -> tuple[float, float]:
    """(concentrated + spread noise term, signal term) of E_T."""
    q_n = noise_quantile(n, distribution="gaussian", confidence=confidence)
    noise = 0.0
    if m > 0 and sigma > 0:
        q_m = noise_quantile(m, distribution=distribution, confidence=confidence)
        noise = SAFETY * u * p1l * beta_eff * sigma * (q_m + math.sqrt(depth * m / n_tilde) * q_n)
    signal = SAFETY * u * w_max * math.sqrt(depth) * q_n * cond
    return noise, signal


def predict_decode_error(
    *,
    scheme: Scheme = "M1",
    dtype: torch.dtype = CODING_DTYPE,
    n: int | None = None,
    n_tilde: int | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    kappa: float | None = None,
    left_inverse: str = "pinv",
    backend: str = "fast",
    depth: float | None = None,
    p1l_norm: float | None = None,
    cond: float = 1.0,
    distribution: NoiseDistribution = "gaussian",
    sigma1: float | None = None,
    sigma2: float | None = None,
    p: int = 2,
    gamma: float = 1.0,
    eta: float = 1.0,
    w_max: float | None = None,
    w_scale: float | None = None,
    clients: int = 1,
    confidence: float = DEFAULT_CONFIDENCE,
    key: ServerKey | None = None,
    aggregator_key: AggregatorKey | None = None,
    noise: NoiseSpec | None = None,
    noise2: NoiseSpec | None = None,
) -> PrecisionReport:
    """Predict the max decode error of one round from the configuration (a pure function).

    Either give the parameters, or a ``key`` (and ``aggregator_key`` for M2) and the noise laws ``noise``
    (σ1) / ``noise2`` (σ2), from which they are read; explicit parameters win.

    Args:
        scheme: ``"M1"`` or ``"M2"`` (M2 needs γ, η, σ2, p).
        dtype: the coding dtype (float32 is modelled, so that it can be refused with a number).
        n, n_tilde, alpha, beta, kappa, left_inverse: key 1 (κ = ‖K‖₂; None means 1/α for oblique, as
            for the keys; ignored for pinv).
        backend, depth: transform family and its depth D (default: the key's ``transform_depth()``, else
            :func:`~sifl_ray.coding.keys.transform_depth` of the backend's name).
        p1l_norm: ``‖P1L‖₂`` (default 1/α for pinv, √(1/α² + κ²) for oblique: the fast design's values;
            dense keys are worse conditioned, pass ``key=`` to use their exact norm).
        cond: ``‖P1L‖₂‖P1‖₂`` (1 for the orthogonal designs).
        distribution, sigma1, sigma2: the noise law; σ is the Gaussian std or the Laplace scale b.
        p, gamma, eta: key 2 (M2).
        w_max: ``‖w‖∞`` (or ``w_scale``: the std of Gaussian-like weights, turned into a max).
        clients: uploads averaged per round.
        confidence: δ, the probability the estimate may be exceeded under its model.
    """
    if scheme not in ("M1", "M2"):
        raise ValueError(f"scheme must be 'M1' or 'M2'; got {scheme!r}")
    given = dict(
        scheme=scheme,
        dtype=dtype,
        n=n,
        n_tilde=n_tilde,
        alpha=alpha,
        beta=beta,
        kappa=kappa,
        left_inverse=left_inverse,
        backend=backend,
        depth=depth,
        p1l_norm=p1l_norm,
        cond=cond,
        distribution=distribution,
        sigma1=sigma1,
        sigma2=sigma2,
        p=p,
        gamma=gamma,
        eta=eta,
        w_max=w_max,
        clients=clients,
        confidence=confidence,
    )
    config = _completed(_read_keys(given, key, aggregator_key, noise, noise2), w_scale=w_scale)
    u = unit_roundoff(dtype)
    terms = _error_terms(config, u=u)
    total = sum(v for _, v in terms)
    return PrecisionReport(total, scheme, config["dtype"], u, tuple(terms), config)


def _read_keys(
    given: dict[str, Any],
    key: ServerKey | None,
    aggregator_key: AggregatorKey | None,
    noise: NoiseSpec | None,
    noise2: NoiseSpec | None,
) -> dict[str, Any]:
    """The parameters the keys and noise laws supply, where the caller left them out (explicit ones win;
    the left inverse and the backend always come from the key)."""
    c = dict(given)
    if key is not None:
        c["n"] = key.n if c["n"] is None else c["n"]
        c["n_tilde"] = key.n_tilde if c["n_tilde"] is None else c["n_tilde"]
        c["alpha"] = getattr(key, "alpha", 1.0) if c["alpha"] is None else c["alpha"]
        c["beta"] = getattr(key, "beta", 0.0) if c["beta"] is None else c["beta"]
        c["kappa"] = getattr(key, "kappa", 0.0) if c["kappa"] is None else c["kappa"]
        c["left_inverse"] = key.left_inverse
        c["backend"] = key.backend
        c["depth"] = key.transform_depth() if c["depth"] is None else c["depth"]
        c["p1l_norm"] = key.p1l_spectral() if c["p1l_norm"] is None else c["p1l_norm"]
        if c["cond"] == 1.0:
            c["cond"] = key.conditioning(p1l_norm=c["p1l_norm"], alpha=c["alpha"])
    if aggregator_key is not None and c["scheme"] == "M2":
        c["p"] = aggregator_key.p
        c["gamma"] = getattr(aggregator_key, "gamma", c["gamma"])
        c["eta"] = getattr(aggregator_key, "eta", c["eta"])
    if noise is not None:
        c["distribution"] = noise.distribution
        c["sigma1"] = float(noise.scale) if c["sigma1"] is None else c["sigma1"]
    if noise2 is not None:
        c["sigma2"] = float(noise2.scale) if c["sigma2"] is None else c["sigma2"]
    return c


def _completed(c: dict[str, Any], *, w_scale: float | None) -> dict[str, Any]:
    """Every parameter set: the defaults of the fast design where none was given (κ = 1/α for an oblique
    inverse, ``‖P1L‖₂ = √(1/α² + κ²)``, the backend's transform depth), ``w_max`` from ``w_scale``."""
    c = dict(c)
    c["dtype"] = str(c["dtype"]).removeprefix("torch.")  # as the report names it
    c["sigma1"], c["sigma2"] = float(c["sigma1"] or 0.0), float(c["sigma2"] or 0.0)
    missing = [name for name in ("n", "n_tilde", "alpha") if c[name] is None]
    if missing:
        raise ValueError(f"predict_decode_error needs {', '.join(missing)} (or key=...)")
    alpha = c["alpha"]
    c["beta"] = 0.0 if c["beta"] is None else float(c["beta"])
    oblique_kappa = 1.0 / alpha if c["kappa"] is None else float(c["kappa"])  # None: the keys' default 1/α
    c["kappa"] = oblique_kappa if c["left_inverse"] == "oblique" else 0.0
    if c["depth"] is None:
        c["depth"] = transform_depth(c["backend"], n_tilde=c["n_tilde"])
    if c["p1l_norm"] is None:
        c["p1l_norm"] = math.sqrt(1.0 / alpha**2 + c["kappa"] ** 2)
    if c["w_max"] is None:
        q_n = noise_quantile(c["n"], distribution="gaussian", confidence=c["confidence"])
        c["w_max"] = 0.0 if w_scale is None else w_scale * q_n
    return c


def _error_terms(c: dict[str, Any], *, u: float) -> list[tuple[str, float]]:
    """The model's terms, each a max decode error of one step of the round (see the module's docstring)."""
    n, n_tilde, alpha, kappa, p1l_norm = c["n"], c["n_tilde"], c["alpha"], c["kappa"], c["p1l_norm"]
    m, depth, sigma1, w_max = n_tilde - n, c["depth"], c["sigma1"], c["w_max"]
    q_n = noise_quantile(n, distribution="gaussian", confidence=c["confidence"])
    std = math.sqrt(2.0) if c["distribution"] == "laplace" else 1.0  # σ_std per unit of the scale parameter
    beta_eff = c["beta"] * math.sqrt(1.0 + (alpha * kappa) ** 2)
    noise1, signal = _transform_error(
        beta_eff=beta_eff,
        sigma=std * sigma1,
        distribution=c["distribution"],
        w_max=w_max,
        u=u,
        p1l=p1l_norm,
        m=m,
        n=n,
        n_tilde=n_tilde,
        depth=depth,
        confidence=c["confidence"],
        cond=c["cond"],
    )
    aggregation = (
        SAFETY
        * u
        * p1l_norm
        * math.sqrt(max(1, c["clients"]))
        * q_n
        * (beta_eff * std * sigma1 * math.sqrt(max(m, 1) / n_tilde) + alpha * w_max)
    )
    terms = [
        ("server encode + server decode", 2.0 * (noise1 + signal)),
        ("client decode", (noise1 + signal) / math.sqrt(2.0)),
        ("client encode + aggregation", aggregation),
    ]
    if c["scheme"] == "M2":
        p2r = 1.0 / c["gamma"]
        # R2 N2: entries of size σ2·η spread over all ñ coordinates (per coordinate, no 1/α amplification
        # of a concentrated term: the aggregator's noise is dense), decoded and re-encoded by the server.
        spread2 = SAFETY * u * p1l_norm * std * c["sigma2"] * c["eta"] * math.sqrt(depth) * q_n
        terms += [
            ("M2: server decode/re-encode of p columns, client strip", p2r * (2.0 * noise1 + 2.0 * spread2)),
            ("M2: client decode of the stripped model", p2r * noise1),
        ]
    return terms


def max_noise_scale(*, tolerance: float, **config) -> float:
    """The largest σ1 whose predicted error stays within ``tolerance`` (for M2, σ2 = σ1 unless given).

    The prediction is affine in σ (the signal term does not depend on it), so this inverts it exactly:
    the ε-vs-precision trade-off in one number (the accountant maps σ to ε).
    """
    config = {k: v for k, v in config.items() if k != "sigma1"}
    # σ2 given either as a number or through ``noise2`` is kept; only an unspecified σ2 follows σ1.
    tie = config.get("scheme", "M1") == "M2" and "sigma2" not in config and config.get("noise2") is None

    def predicted(sigma: float) -> float:
        extra = {"sigma1": sigma, **({"sigma2": sigma} if tie else {})}
        return predict_decode_error(**config, **extra).predicted_max_error

    base, slope = predicted(0.0), predicted(1.0) - predicted(0.0)
    if base >= tolerance:
        return 0.0
    return math.inf if slope <= 0 else (tolerance - base) / slope


def precision_tradeoff(sigmas, **config) -> list[tuple[float, float]]:
    """``[(σ1, predicted max error)]`` for each σ1 in ``sigmas`` (pure; for plots and reports)."""
    return [(float(s), predict_decode_error(sigma1=float(s), **config).predicted_max_error) for s in sigmas]


def check_precision(
    report: PrecisionReport, *, tolerance: float, policy: Literal["refuse", "warn"] = "refuse"
) -> PrecisionReport:
    """Refuse (raise :class:`PrecisionError`) or warn when the predicted error exceeds ``tolerance``.

    Returns the report when it is within tolerance (or after warning), so it can be logged.
    """
    if policy not in PRECISION_POLICIES:
        raise ValueError(f"policy must be one of {PRECISION_POLICIES}; got {policy!r}")
    if report.predicted_max_error <= tolerance:
        return report
    cfg = report.config
    fixes = []
    if report.dtype != "float64":
        fixes.append(
            f"do the coding arithmetic in float64 (it is {report.dtype}: u = {report.unit_roundoff:.1e})"
        )
    fixes.append(f"lower the noise scale σ1 (now {cfg.get('sigma1', 0):g})")
    if cfg.get("scheme") == "M2":
        fixes.append(
            f"lower σ2 (now {cfg.get('sigma2', 0):g}) or raise γ (now {cfg.get('gamma', 1):g}: M2 multiplies "
            "every error by ‖P2R‖ = 1/γ)"
        )
    fixes.append(f"raise α (now {cfg.get('alpha', 0):g}) or lower β (now {cfg.get('beta', 0):g})")
    if cfg.get("backend") in ("dense", "block"):
        fixes.append("use backend='fast' (condition number 1)")
    message = (
        f"predicted max decode error {report.predicted_max_error:.3g} exceeds the tolerance {tolerance:.3g} "
        f"({report.scheme}, {report.dtype}, largest term: {max(report.terms, key=lambda t: t[1])[0]}). "
        "A decode this inexact changes the model the clients train, so SIFL would no longer match plain FL. "
        "Fix: " + "; or ".join(fixes) + ". (Less noise means a larger ε: see max_noise_scale.)"
    )
    if policy == "refuse":
        raise PrecisionError(message)
    warnings.warn(message, PrecisionWarning, stacklevel=2)
    return report


def measure_round_trip_error(
    key: ServerKey,
    w: torch.Tensor,
    *,
    noise: NoiseSpec,
    generator: torch.Generator,
    scheme: Scheme = "M1",
    aggregator_key: AggregatorKey | None = None,
    noise2: NoiseSpec | None = None,
    clients: int = 1,
    update_scale: float = 1e-3,
) -> float:
    """Run one round's coding chain in float64 and return ``max |ŵ − w_expected|`` (no training).

    M1: server encode with fresh noise; each client decodes (the error at that point is counted) and
    uploads ``w~ + P1 Δ_i`` with a random change Δ_i; the uploads are averaged and the server decodes,
    which must give ``w + mean Δ_i``. M2 continues: the aggregator encodes the average with code 2, the
    server decodes and re-encodes its p columns, a client strips code 2 and decodes.
    """
    n, m = key.n, key.n_tilde - key.n
    view = key.client_view()
    x = key.encode(w, noise.sample((m,), generator))
    worst = float((view.decode(x) - w).abs().max())
    deltas = [update_scale * torch.randn(n, generator=generator, dtype=CODING_DTYPE) for _ in range(clients)]
    aggregate = sum(x + view.apply_P1(d) for d in deltas) / clients
    expected = w + sum(deltas) / clients
    if scheme == "M1":
        return max(worst, float((key.decode(aggregate) - expected).abs().max()))
    if aggregator_key is None:
        raise ValueError("scheme='M2' needs aggregator_key")
    noise2 = noise2 if noise2 is not None else NoiseSpec(noise.distribution, 0.0)
    W_a = aggregator_key.encode(aggregate, noise2.sample((key.n_tilde, aggregator_key.p - 1), generator))
    W = key.reencode(W_a, noise.sample((m, aggregator_key.p), generator))
    w_tilde = aggregator_key.client_view().strip(W)
    return max(worst, float((view.decode(w_tilde) - expected).abs().max()))
