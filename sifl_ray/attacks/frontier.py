"""The precision–privacy frontier: what a smaller per-element ε costs in float64 decode error.

docs/method.md "Precision": the encoded vector is mostly noise, so every decode carries an error of about
``eps64·‖noise‖/α``. Shrinking the per-element ε means more noise (σ) or a smaller signal scale (α), and both
raise that error. :func:`frontier` sweeps σ and α over one key configuration and reports, for each point:

* the per-element ε of a client upload (worst element), from the accountant's formulas: Gaussian (Theorem 2,
  sound as stated), Laplace as the paper states it (Theorem 1) and the sound Laplace bound;
* the decode error predicted by the precision model (``sifl_ray.coding.precision``), for each noise law;
* the decode error measured in float64 (encode random models with fresh noise, decode, compare), once with
  Gaussian noise of std σ (beside the Gaussian ε) and once with Laplace noise of scale b = σ (beside the
  Laplace ε): each ε is set against the error of the noise it is computed for.

The ε are per-element, per-round figures, as the paper states them; the attack suite shows what they do not
cover. ``frontier_main`` is the entry point of ``sifl describe --frontier``. Its keys of the key and of the
privacy inputs are a run's (``coding.n_extra``, ``coding.backend``, ``privacy.clip``, ...: the run's
sections, defaults and rules, :mod:`sifl_ray.config.schema`), so a scenario's values need no translation.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from sifl_ray.coding import make_server_key
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey
from sifl_ray.coding.dense import DENSE_MAX_N  # the dense key's own limit: checked here before any work
from sifl_ray.coding.precision import predict_decode_error
from sifl_ray.config import load_config
from sifl_ray.config.components import train_samples
from sifl_ray.config.schema import CodingConfig, PrivacyConfig
from sifl_ray.config.validation import (
    AT_LEAST_1,
    ConfigError,
    Range,
    Rules,
    parse_overrides,
    refuse_renamed,
    refuse_unread,
    set_path,
    setting,
    validate,
)
from sifl_ray.device import single_threaded
from sifl_ray.models import build_model, count_params
from sifl_ray.privacy import release_epsilons
from sifl_ray.progress import Progress
from sifl_ray.seeding import derive_bytes, torch_generator
from sifl_ray.specs import Coding

_POSITIVE_LIST = Range(lambda v: bool(v) and all(x > 0 for x in v), "a non-empty list of numbers > 0")


@dataclass
class FrontierConfig:
    """The sweep: α × noise scale over one key (``coding``: ñ − n, backend, left inverse, β, κ, block size)
    and the privacy inputs (``privacy``: C, δ), a run's keys with a run's defaults. ``coding.alpha`` and
    ``coding.noise.sigma1``, where given, join the sweep. ``scenario`` (a run's scenario) takes n, |D_i|
    and those keys from that scenario (each key given here wins)."""

    scenario: str | None = None
    n: int = setting(1000, rule=AT_LEAST_1)
    alphas: list[float] = setting(default_factory=lambda: [1e-4, 1e-3, 1e-2, 1e-1, 1.0], rule=_POSITIVE_LIST)
    noise_scales: list[float] = setting(
        default_factory=lambda: [1.0, 10.0, 100.0, 1e3, 1e4], rule=_POSITIVE_LIST
    )
    w_scale: float = 0.05
    samples: int = setting(4, rule=AT_LEAST_1)
    local_size: int = setting(6000, rule=AT_LEAST_1)
    seed: int = 0
    out_dir: str | None = None
    coding: CodingConfig = field(default_factory=CodingConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)


@dataclass(frozen=True)
class FrontierPoint:
    """One (α, σ) point: per-element ε of a client upload and the decode error it costs.

    ``predicted_error``, ``measured_error`` and ``measured_relative_error`` are for Gaussian noise of std σ
    (the Gaussian ε); the ``laplace_`` fields for Laplace noise of scale b = σ (the Laplace ε)."""

    alpha: float
    noise_scale: float
    eps_gaussian: float
    eps_laplace_paper: float
    eps_laplace_sound: float
    predicted_error: float
    measured_error: float
    measured_relative_error: float
    laplace_predicted_error: float
    laplace_measured_error: float
    laplace_measured_relative_error: float


def _upload_epsilons(
    key: ServerKey, *, scale: float, clip: float, local_size: int, delta: float
) -> tuple[float, float, float]:
    """Worst-element ε of the M1 upload: Gaussian (σ = scale), Laplace paper and sound (b = scale)."""
    norms = key.norms()
    common = {
        "key_norms": norms,
        "clip": clip,
        "local_size": local_size,
        "total_size": local_size,
        "delta": delta,
    }
    gauss = release_epsilons(noise1=NoiseSpec("gaussian", scale), coding=Coding.M1, **common)[0]
    lap = release_epsilons(noise1=NoiseSpec("laplace", scale), coding=Coding.M1, **common)[0]
    return float(gauss.epsilon), float(lap.epsilon_paper), float(lap.epsilon)


def _predicted_error(key: ServerKey, *, noise: NoiseSpec, w_scale: float) -> float:
    """The precision model's max decode error for one round (``sifl_ray.coding.precision``)."""
    return float(predict_decode_error(key=key, noise=noise, w_scale=w_scale).predicted_max_error)


def measure_decode_error(
    key: ServerKey, *, noise: NoiseSpec, w_scale: float, samples: int, generator: torch.Generator
) -> tuple[float, float]:
    """Max absolute and max relative float64 error of ``P1L (P1 w + N1 r)`` over ``samples`` random models
    ``w ~ N(0, w_scale²)`` with fresh noise ``r``."""
    n, m = key.n, key.n_tilde - key.n
    W = torch.randn(n, samples, generator=generator, dtype=CODING_DTYPE) * w_scale
    R = noise.sample((m, samples), generator)
    err = key.decode(key.encode(W, R)) - W
    rel = torch.linalg.vector_norm(err, dim=0) / torch.linalg.vector_norm(W, dim=0).clamp_min(1e-300)
    return float(err.abs().max()), float(rel.max())


def frontier(
    *,
    n: int,
    n_extra: int,
    alphas: Sequence[float],
    noise_scales: Sequence[float],
    backend: str = "fast",
    left_inverse: str = "pinv",
    beta: float = 1e3,
    kappa: float | None = None,
    block_size: int = 64,
    w_scale: float = 0.05,
    samples: int = 4,
    clip: float = 1000.0,
    local_size: int = 6000,
    delta: float = 1e-5,
    seed: int = 0,
    progress: bool | None = None,
) -> list[FrontierPoint]:
    """Sweep α × noise scale; one key per α (the noise scale does not change the key). Each point done is
    reported on stderr (:mod:`sifl_ray.progress`; ``progress=False``: nothing).

    Returns:
        One :class:`FrontierPoint` per (α, σ), α-major.
    """
    if backend == "dense" and n > DENSE_MAX_N:
        raise ValueError(
            f"the dense backend stores an explicit ñ×n matrix; n = {n} is above {DENSE_MAX_N}. "
            "Use backend=fast for large models"
        )
    points = []
    total = len(alphas) * len(noise_scales)
    privacy = {"clip": clip, "local_size": local_size, "delta": delta}
    with single_threaded(), Progress("describe --frontier", total=total, enabled=progress) as bar:
        for alpha in map(float, alphas):
            key = make_server_key(
                n=n,
                n_tilde=n + n_extra,
                backend=backend,
                left_inverse=left_inverse,
                alpha=alpha,
                beta=beta,
                kappa=kappa,
                block_size=block_size,
                seed=derive_bytes(seed, "frontier", "server-key", alpha),
            )
            for scale in map(float, noise_scales):
                points.append(
                    _point(key, alpha, scale, privacy=privacy, w_scale=w_scale, samples=samples, seed=seed)
                )
                bar.step(f"alpha {alpha:g}, noise scale {scale:g}")
    return points


def _point(
    key: ServerKey,
    alpha: float,
    scale: float,
    *,
    privacy: dict[str, Any],
    w_scale: float,
    samples: int,
    seed: int,
) -> FrontierPoint:
    """One (α, σ) point of ``key``: the upload's ε and the decode error of each noise law at scale σ."""
    eps_g, eps_lp, eps_ls = _upload_epsilons(key, scale=scale, **privacy)
    gauss, lap = NoiseSpec("gaussian", scale), NoiseSpec("laplace", scale)
    abs_g, rel_g = measure_decode_error(
        key,
        noise=gauss,
        w_scale=w_scale,
        samples=samples,
        generator=torch_generator(seed, "frontier", "measure", alpha, scale),
    )
    abs_l, rel_l = measure_decode_error(
        key,
        noise=lap,
        w_scale=w_scale,
        samples=samples,
        generator=torch_generator(seed, "frontier", "measure", "laplace", alpha, scale),
    )
    return FrontierPoint(
        alpha=alpha,
        noise_scale=scale,
        eps_gaussian=eps_g,
        eps_laplace_paper=eps_lp,
        eps_laplace_sound=eps_ls,
        predicted_error=_predicted_error(key, noise=gauss, w_scale=w_scale),
        measured_error=abs_g,
        measured_relative_error=rel_g,
        laplace_predicted_error=_predicted_error(key, noise=lap, w_scale=w_scale),
        laplace_measured_error=abs_l,
        laplace_measured_relative_error=rel_l,
    )


def frontier_table(points: Sequence[FrontierPoint]) -> str:
    """A markdown table of the sweep."""
    lines = [
        "| alpha | noise scale | ε Gaussian | Gaussian: predicted max decode error | measured max decode "
        "error | measured relative error | ε Laplace (paper) | ε Laplace (sound) | Laplace: predicted max "
        "decode error | measured max decode error | measured relative error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(
            f"| {p.alpha:g} | {p.noise_scale:g} | {p.eps_gaussian:.2e} | {p.predicted_error:.2e} | "
            f"{p.measured_error:.2e} | {p.measured_relative_error:.2e} | {p.eps_laplace_paper:.2e} | "
            f"{p.eps_laplace_sound:.2e} | {p.laplace_predicted_error:.2e} | {p.laplace_measured_error:.2e} | "
            f"{p.laplace_measured_relative_error:.2e} |"
        )
    return "\n".join(lines)


def plot_frontier(points: Sequence[FrontierPoint], path: Path, *, title: str) -> Path:
    """Per-element ε (x) against the max decode error (y), one curve per α. Left: Gaussian noise of std σ,
    measured (solid) and predicted (dashed). Right: Laplace noise of scale b, measured with Laplace noise,
    against the sound ε (o) and the paper's (x), and the Laplace prediction against the sound ε (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    alphas = sorted({p.alpha for p in points})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, alpha in enumerate(alphas):
        pts = sorted((p for p in points if p.alpha == alpha), key=lambda p: p.noise_scale)
        c = colors[i % len(colors)]
        floor = 1e-300  # log axes: an exact zero error is drawn at the bottom
        axes[0].loglog(
            [max(p.eps_gaussian, floor) for p in pts],
            [max(p.measured_error, floor) for p in pts],
            "o-",
            color=c,
            label=f"alpha = {alpha:g} measured",
        )
        axes[0].loglog(
            [max(p.eps_gaussian, floor) for p in pts],
            [max(p.predicted_error, floor) for p in pts],
            "--",
            color=c,
            label=f"alpha = {alpha:g} predicted",
        )
        axes[1].loglog(
            [max(p.eps_laplace_sound, floor) for p in pts],
            [max(p.laplace_measured_error, floor) for p in pts],
            "o-",
            color=c,
            label=f"alpha = {alpha:g} sound",
        )
        axes[1].loglog(
            [max(p.eps_laplace_paper, floor) for p in pts],
            [max(p.laplace_measured_error, floor) for p in pts],
            "x:",
            color=c,
            label=f"alpha = {alpha:g} paper",
        )
        axes[1].loglog(
            [max(p.eps_laplace_sound, floor) for p in pts],
            [max(p.laplace_predicted_error, floor) for p in pts],
            "--",
            color=c,
            label=f"alpha = {alpha:g} predicted (sound ε)",
        )
    axes[0].set_title("Gaussian noise (Theorem 2)")
    axes[1].set_title("Laplace noise of scale b: sound ε (o), the paper's Theorem 1 (x)")
    for ax in axes:
        ax.set_xlabel("per-element ε of an upload, worst element (not a vector guarantee)")
        ax.set_ylabel("max |decode error| in float64")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


#: The keys of the run's sections the frontier reads (the rest of those sections is no part of a sweep).
READS: tuple[str, ...] = (
    *(f"coding.{k}" for k in ("n_extra", "backend", "left_inverse", "beta", "kappa", "block_size", "alpha")),
    "coding.noise.sigma1",
    "privacy.clip",
    "privacy.delta",
)

#: The frontier's old names → the run's: refused with the new name, all at once.
RENAMED: dict[str, str] = {
    **{k: f"coding.{k}" for k in ("n_extra", "backend", "left_inverse", "beta", "kappa", "block_size")},
    **{k: f"privacy.{k}" for k in ("clip", "delta")},
}


def _scenario_values(name: str) -> dict[str, Any]:
    """n, |D_i| and the keys of :data:`READS` of the run's scenario ``NAME``, dotted.

    Raises:
        ConfigError: the scenario does not load.
    """
    cfg = load_config([f"scenario={name}"])
    shape = (1, 8, 8) if cfg.data.name == "digits" else (1, 28, 28)
    model = build_model(cfg.train.model, input_shape=shape, num_classes=10, generator=torch.Generator())
    samples = train_samples(cfg)
    n_train = samples.count if samples is not None else 60000
    values = {key: OmegaConf.select(cfg, key) for key in READS}
    return {**values, "n": count_params(model), "local_size": max(n_train // int(cfg.clients.num_clients), 1)}


#: The domain checks of :class:`FrontierConfig` beyond its fields' own (none: the run's rules hold).
RULES = Rules()


def load_frontier_config(argv: Sequence[str]) -> FrontierConfig:
    """``key=value`` items over :class:`FrontierConfig` (all problems at once, as :class:`ConfigError`).

    Raises:
        ConfigError: every problem, each with its key, what was expected, what arrived and the fix.
    """
    parsed, problems = parse_overrides(argv, noun="argument", example="alphas=[1e-3,1e-2]")
    raw: dict[str, Any] = {}
    for key, value in parsed:
        set_path(raw, key, value)
    refuse_renamed(raw, RENAMED, problems, why="the run's name, as in sifl run")
    shared = {"coding": CodingConfig, "privacy": PrivacyConfig}
    refuse_unread(
        raw,
        shared,
        READS,
        problems,
        command="sifl describe --frontier",
        why={},
        otherwise="no part of a sweep",
    )
    given = {key for key, _ in parsed}
    scenario = raw.get("scenario")
    if isinstance(scenario, str):
        for key, value in _scenario_values(scenario).items():
            if key not in given:
                set_path(raw, key, value)
    cfg = OmegaConf.to_object(validate(FrontierConfig, raw, RULES, problems=problems))
    if scenario or "coding.alpha" in given:  # the scenario's own point joins the sweep
        cfg.alphas = sorted({*cfg.alphas, cfg.coding.alpha})
    if scenario or "coding.noise.sigma1" in given:
        cfg.noise_scales = sorted({*cfg.noise_scales, cfg.coding.noise.sigma1})
    return cfg


def frontier_main(argv: Sequence[str] | None = None) -> int:
    """``sifl describe --frontier [scenario=NAME] [key=value ...]``: print the table, write JSON, markdown and
    a PNG to ``out_dir`` (default ``runs/frontier/<timestamp>/``). Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_frontier_config(argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    coding, privacy = cfg.coding, cfg.privacy
    points = frontier(
        n=cfg.n,
        n_extra=coding.n_extra,
        alphas=cfg.alphas,
        noise_scales=cfg.noise_scales,
        backend=coding.backend,
        left_inverse=coding.left_inverse,
        beta=coding.beta,
        kappa=coding.kappa,
        block_size=coding.block_size,
        w_scale=cfg.w_scale,
        samples=cfg.samples,
        clip=privacy.clip,
        local_size=cfg.local_size,
        delta=privacy.delta,
        seed=cfg.seed,
    )
    out = Path(cfg.out_dir) if cfg.out_dir else Path("runs") / "frontier" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    title = (
        f"precision-privacy frontier: n = {cfg.n}, ñ - n = {coding.n_extra}, {coding.backend}/"
        f"{coding.left_inverse}, beta = {coding.beta:g}, C = {privacy.clip:g}, |D_i| = {cfg.local_size}, "
        f"delta = {privacy.delta:g}"
    )
    table = frontier_table(points)
    note = (
        "Per-element, per-round ε of one client upload (worst element), as the paper states them; not a "
        "guarantee on the whole vector (see `sifl attack`). Decode errors: float64, models w ~ N(0, "
        f"{cfg.w_scale:g}^2), {cfg.samples} samples per point; noise scale = σ (Gaussian std) or b (Laplace "
        "scale). Each ε is set against the decode error of its own noise law: the Gaussian columns measured "
        "with Gaussian noise of std σ, the Laplace columns with Laplace noise of scale b."
    )
    (out / "frontier.md").write_text(f"# {title}\n\n{note}\n\n{table}\n")
    (out / "frontier.json").write_text(
        json.dumps({"config": _public(cfg), "points": [_finite(asdict(p)) for p in points]}, indent=2) + "\n"
    )
    png = plot_frontier(points, out / "frontier.png", title=title)
    print(title)
    print(note)
    print(table)
    print(f"written: {out / 'frontier.md'}, {out / 'frontier.json'}, {png}")
    return 0


def _public(cfg: FrontierConfig) -> dict[str, Any]:
    """The sweep's configuration as written out: its own keys and the run's keys it reads, without ``seed``,
    which reproduces the sweep's keys and noise (the attack suite's rule: no seed that rebuilds keys or noise
    leaves the process)."""
    data = asdict(cfg)
    data.pop("seed")
    sections = {"coding": data.pop("coding"), "privacy": data.pop("privacy")}
    for key in READS:
        section, *path = key.split(".")
        value: Any = sections[section]
        for part in path:
            value = value[part]
        data[key] = value
    return data


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in d.items()}


if __name__ == "__main__":
    raise SystemExit(frontier_main())
