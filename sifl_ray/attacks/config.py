"""The attack suite's configuration: a typed schema, ``scenarios/attack_*.yaml``, ``key=value`` overrides.

Why a schema of its own: the attack suite simulates a small model with its own protocol loop (the platform's
scenarios describe MNIST-scale runs), and it compares several key designs at once. The loading rules are the
platform's: YAML scenario over the dataclass defaults, CLI overrides over that, every problem collected and
raised at once (:class:`sifl_ray.config.ConfigError`), then a read-only OmegaConf object.

Designs are named ``<backend>-<left inverse>[-rekey<k>]``, for example ``fast-pinv``, ``dense-oblique``,
``block-pinv`` or ``fast-pinv-rekey10`` (a new key epoch every 10 rounds).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from sifl_ray.config import SCENARIO_DIR, ConfigError

DEFAULT_SCENARIO = "attack_small"
BACKENDS = ("dense", "fast", "block")
LEFT_INVERSES = ("pinv", "oblique")
_DESIGN = re.compile(r"^(?P<backend>[a-z]+)-(?P<left>[a-z]+)(?:-rekey(?P<k>\d+))?$")


@dataclass
class ModelSection:
    """The small model: binary logistic regression (n = features + 1), or with ``hidden`` > 0 a one-layer
    tanh MLP (n = features·hidden + 2·hidden + 1). Its updates span the whole parameter space, which the
    subspace attacks need to reach full rank."""

    features: int = 199
    hidden: int = 0


@dataclass
class DataSection:
    """Synthetic data: Gaussian features, labels from a random logistic teacher (noisy, so gradients never
    vanish)."""

    clients: int = 10
    samples_per_client: int = 200
    teacher_scale: float = 3.0


@dataclass
class TrainingSection:
    """Local SGD: K steps of minibatch SGD per round (the fused client of SPEC "SIFL M1")."""

    rounds: int = 40
    local_steps: int = 2
    batch_size: int = 32
    lr: float = 0.5
    init_scale: float = 0.1


@dataclass
class KeySection:
    """The server key and its noise (``make_server_key``): ñ = n + n_extra. ``kappa`` is ``‖K‖₂`` of an
    oblique left inverse; ``None`` takes the coding default (1/α: 45° between the kernel and col(P1)⊥)."""

    n_extra: int = 20
    alpha: float = 1e-3
    beta: float = 1e3
    kappa: float | None = None
    block_size: int = 20
    noise: str = "gaussian"
    noise_scale: float = 1e3


@dataclass
class M2Section:
    """The M2 server attack (e): a larger model, a few rounds, the fast backend."""

    enabled: bool = True
    features: int = 4999
    clients: int = 10
    samples_per_client: int = 100
    rounds: int = 2
    p: int = 2
    gamma: float = 1e-3
    eta: float = 1.0
    noise2_scales: list[float] = field(default_factory=lambda: [1.0, 1e3])
    backend: str = "fast"
    left_inverse: str = "pinv"


@dataclass
class AuditSection:
    """The DP audit (f): trials per hypothesis, Clopper–Pearson confidence, δ and Remark 3's clip C."""

    trials: int = 5000
    confidence: float = 0.95
    delta: float = 1e-5
    clip: float = 1.0


@dataclass
class KnownPlaintextSection:
    """Known plaintext (d): a fitted decoder counts as exact when its relative error on a fresh encoding is
    below ``tolerance`` (the legitimate decoder's own round-off is printed beside it)."""

    tolerance: float = 1e-3


@dataclass
class ContrastSection:
    """Designs run a second time at a moderate noise scale: separates what float64 round-off does to an
    attack (at the paper's scales) from what the design does (it is the same design, the same attacks)."""

    designs: list[str] = field(default_factory=list)
    beta: float = 1.0
    noise_scale: float = 1.0


@dataclass
class TranscriptSection:
    max_coordinates: int = 100_000
    save: bool = True


@dataclass
class AttackConfig:
    """Everything ``sifl attack`` needs. ``designs`` are compared under the same attacks; ``primary`` is the
    design whose figures go on the RESULT line. ``seed`` drives data, initial model and minibatches;
    ``key_seed`` the keys and the parties' noise: an integer gives reproducible simulation keys (not secret:
    anyone with the number can rebuild them), ``null`` draws 256 secure random bits per key."""

    scenario: str = DEFAULT_SCENARIO
    seed: int = 0
    key_seed: int | None = 0
    designs: list[str] = field(
        default_factory=lambda: [
            "dense-pinv",
            "dense-oblique",
            "fast-pinv",
            "fast-oblique",
            "block-pinv",
            "fast-oblique-rekey10",
        ]
    )
    primary: str = "fast-oblique"
    # The registered arms to attack (sifl_ray.arms): m1 arms under every design, m2 arms by their server,
    # plain arms by the aggregator's direct view; arm_config: sections of the platform configuration
    # (``sifl run``'s keys) the arms read, e.g. arm_config.nbafl.epsilons=[1,5].
    arms: list[str] = field(default_factory=lambda: ["sifl_m1", "sifl_m2"])
    arm_config: dict[str, Any] = field(default_factory=dict)
    rank_tol_factor: float = 4.0
    out_dir: str | None = None
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    key: KeySection = field(default_factory=KeySection)
    m2: M2Section = field(default_factory=M2Section)
    audit: AuditSection = field(default_factory=AuditSection)
    known_plaintext: KnownPlaintextSection = field(default_factory=KnownPlaintextSection)
    contrast: ContrastSection = field(default_factory=ContrastSection)
    transcript: TranscriptSection = field(default_factory=TranscriptSection)


@dataclass(frozen=True)
class Design:
    """One key design: backend, left inverse, and how often the key changes (0: never)."""

    name: str
    backend: str
    left_inverse: str
    rekey_every: int = 0

    @classmethod
    def parse(cls, name: str) -> Design:
        m = _DESIGN.match(name)
        if not m or m["backend"] not in BACKENDS or m["left"] not in LEFT_INVERSES or m["k"] == "0":
            raise ValueError(
                f"design {name!r}: expected <backend>-<left inverse>[-rekey<k>] with backend in "
                f"{'/'.join(BACKENDS)}, left inverse in {'/'.join(LEFT_INVERSES)} and k >= 1, "
                "for example fast-pinv or dense-oblique-rekey10"
            )
        return cls(name=name, backend=m["backend"], left_inverse=m["left"], rekey_every=int(m["k"] or 0))


_CHOICES: dict[str, tuple[Any, ...]] = {
    "key.noise": ("gaussian", "laplace"),
    "m2.backend": BACKENDS,
    "m2.left_inverse": LEFT_INVERSES,
}
_AT_LEAST_1 = (lambda v: v >= 1, "an integer >= 1")
_POSITIVE = (lambda v: v > 0, "a number > 0")
_RANGES: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    "model.features": _AT_LEAST_1,
    "model.hidden": (lambda v: v >= 0, "an integer >= 0"),
    "data.clients": (lambda v: v >= 2, "an integer >= 2 (differences need two uploads per round)"),
    "data.samples_per_client": _AT_LEAST_1,
    "training.rounds": _AT_LEAST_1,
    "training.local_steps": _AT_LEAST_1,
    "training.batch_size": _AT_LEAST_1,
    "training.lr": _POSITIVE,
    "key.n_extra": (lambda v: v >= 1, "an integer >= 1 (the noise needs a kernel)"),
    "key.alpha": _POSITIVE,
    "key.beta": _POSITIVE,
    "key.kappa": (lambda v: v >= 0, "a number >= 0 (or null for the coding default 1/alpha)"),
    "key.block_size": _AT_LEAST_1,
    "key.noise_scale": (lambda v: v >= 0, "a number >= 0"),
    "m2.features": _AT_LEAST_1,
    "m2.clients": _AT_LEAST_1,
    "m2.samples_per_client": _AT_LEAST_1,
    "m2.rounds": _AT_LEAST_1,
    "m2.p": (lambda v: v >= 2, "an integer >= 2"),
    "m2.gamma": _POSITIVE,
    "m2.eta": _POSITIVE,
    "audit.trials": _AT_LEAST_1,
    "audit.confidence": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "audit.delta": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "audit.clip": _POSITIVE,
    "known_plaintext.tolerance": _POSITIVE,
    "transcript.max_coordinates": _AT_LEAST_1,
    "rank_tol_factor": _POSITIVE,
    "contrast.beta": _POSITIVE,
    "contrast.noise_scale": (lambda v: v >= 0, "a number >= 0"),
}


def _coerce(hint: Any, value: Any) -> tuple[bool, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, __import__("types").UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in (a for a in args if a is not type(None)):
            ok, out = _coerce(arg, value)
            if ok:
                return True, out
        return False, value
    if origin is list:
        items = value if isinstance(value, list | tuple) else [value]
        out = []
        for item in items:
            ok, c = _coerce(args[0], item)
            if not ok:
                return False, value
            out.append(c)
        return True, out
    if origin is dict:
        return isinstance(value, dict), value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True, float(value)
        try:  # YAML 1.1 reads 1.0e3 (no exponent sign) as a string
            return isinstance(value, str), float(value)
        except (TypeError, ValueError):
            return False, value
    if hint is str:
        return isinstance(value, str), value
    return True, value


def _validate(schema: type, raw: dict, prefix: str, problems: list[str]) -> dict:
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in hints:
            close = difflib.get_close_matches(str(key), names, n=1)
            tip = f"did you mean {prefix}{close[0]}?" if close else f"valid keys: {', '.join(names)}"
            problems.append(f"{dotted}: unknown key; {tip} (remove it or fix the spelling)")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if isinstance(value, dict):
                out[key] = _validate(hint, value, f"{dotted}.", problems)
            else:
                problems.append(f"{dotted}: expected a section (mapping), got {value!r}")
            continue
        ok, value = _coerce(hint, value)
        name = getattr(hint, "__name__", str(hint).replace("typing.", ""))
        if not ok:
            problems.append(
                f"{dotted}: expected {name}, got {value!r} ({type(value).__name__}); set {dotted}=<{name}>"
            )
            continue
        if dotted in _CHOICES and value not in _CHOICES[dotted]:
            choices = ", ".join(map(str, _CHOICES[dotted]))
            problems.append(
                f"{dotted}: expected one of {choices}, got {value!r}; set {dotted}={_CHOICES[dotted][0]}"
            )
            continue
        if dotted in _RANGES and value is not None and not _RANGES[dotted][0](value):
            problems.append(f"{dotted}: expected {_RANGES[dotted][1]}, got {value!r}; change {dotted}")
            continue
        out[key] = value
    return out


def _cross_checks(cfg: dict, problems: list[str]) -> None:
    designs = cfg["designs"]
    if not designs:
        problems.append("designs: expected at least one design, got []; for example designs=[fast-pinv]")
    for name in designs:
        try:
            Design.parse(name)
        except ValueError as err:
            problems.append(f"designs: {err}")
    for name in cfg["contrast"]["designs"]:
        try:
            Design.parse(name)
        except ValueError as err:
            problems.append(f"contrast.designs: {err}")
    if cfg["primary"] not in designs:
        problems.append(
            f"primary: {cfg['primary']!r} is not among designs {designs}; set primary to one of them"
        )
    from sifl_ray.arms import ARMS

    if not cfg["arms"]:
        problems.append("arms: expected at least one registered arm, got []; for example arms=[sifl_m1]")
    problems += [
        f"arms: unknown arm {a!r}; registered: {', '.join(ARMS)}" for a in cfg["arms"] if a not in ARMS
    ]
    if len(set(designs)) != len(designs):
        problems.append(f"designs: duplicate design in {designs}; list each once")
    if cfg["training"]["batch_size"] > cfg["data"]["samples_per_client"]:
        problems.append(
            f"training.batch_size: {cfg['training']['batch_size']} exceeds data.samples_per_client="
            f"{cfg['data']['samples_per_client']}; lower training.batch_size"
        )


def load_attack_config(argv: list[str] | None = None) -> DictConfig:
    """Parse ``scenario=NAME`` and ``key=value`` items into the validated, read-only :class:`AttackConfig`.

    Raises:
        ConfigError: every problem found, each with its key, what was expected, what arrived and the fix.
    """
    problems: list[str] = []
    parsed: list[tuple[str, Any]] = []
    for text in argv or []:
        if "=" not in text:
            problems.append(f"argument {text!r}: expected key=value (for example training.rounds=30)")
            continue
        key, raw = text.split("=", 1)
        try:
            parsed.append((key.strip(), yaml.safe_load(raw) if raw else None))
        except yaml.YAMLError as err:
            problems.append(f"argument {text!r}: the value is not valid YAML ({err.__class__.__name__})")
    scenario = next((str(v) for k, v in parsed if k == "scenario"), DEFAULT_SCENARIO)
    path = Path(scenario) if scenario.endswith((".yaml", ".yml")) else SCENARIO_DIR / f"{scenario}.yaml"
    raw: dict = {}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text()) or {}
        if isinstance(loaded, dict):
            raw = loaded
        else:
            problems.append(f"scenario: {path} must hold a mapping, got {type(loaded).__name__}")
    else:
        names = sorted(p.stem for p in SCENARIO_DIR.glob("attack_*.yaml"))
        problems.append(f"scenario: no file {path}; attack scenarios: {', '.join(names) or 'none'}")
    raw["scenario"] = path.stem
    for key, value in parsed:
        if key == "scenario":
            continue
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    checked = _validate(AttackConfig, raw, "", problems)
    merged = None
    if not problems:
        merged = OmegaConf.merge(OmegaConf.structured(AttackConfig), checked)
        _cross_checks(OmegaConf.to_container(merged), problems)
    if problems or merged is None:
        raise ConfigError(problems)
    OmegaConf.set_readonly(merged, True)
    return merged
