"""The attack suite's configuration: a typed schema, ``scenarios/attack_*.yaml``, ``key=value`` overrides.

Why a schema of its own: the attack suite simulates a small model (its own synthetic task, ``model`` and
``data``) and compares several key designs at once (``designs``, ``contrast``, ``m2``, ``audit``). Where a
key means what it means to ``sifl run``, it has the platform's name and the platform's rule
(``clients.num_clients``, ``train.rounds``, ``coding.key_seed``, ``coding.alpha``,
``coding.noise.sigma1``, ...: :data:`PLATFORM_KEYS`); an old name of the attack suite's is refused with its
new one (:data:`RENAMED`). The validator is the platform's (:func:`sifl_ray.validation.validate`): YAML
scenario over the dataclass defaults, CLI overrides over that, every problem collected and raised at once
(:class:`~sifl_ray.validation.ConfigError`, exit code 2), then a read-only OmegaConf object.

Designs are named ``<backend>-<left inverse>[-rekey<k>]``, for example ``fast-pinv``, ``dense-oblique``,
``block-pinv`` or ``fast-pinv-rekey10`` (a new key epoch every 10 rounds). Backends and left inverses are the
coding registry's (:mod:`sifl_ray.registry_names`), read when a design is parsed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from sifl_ray import registry_names
from sifl_ray.config import RULES as PLATFORM_RULES
from sifl_ray.config import ScenarioConfig, read_scenario, scenario_kinds, scenario_path
from sifl_ray.validation import Choice, Range, Rules, parse_overrides, set_path, validate

DEFAULT_SCENARIO = "attack_small"
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

    samples_per_client: int = 200
    teacher_scale: float = 3.0


@dataclass
class ClientsSection:
    """The platform's ``clients`` keys the attack suite reads: every client takes part in every round."""

    num_clients: int = 10


@dataclass
class TrainSection:
    """Local SGD, the platform's ``train`` keys: K steps of minibatch SGD per round (the fused client of SPEC
    "SIFL M1"); ``init_scale``, the attack suite's own, scales the random initial model."""

    rounds: int = 40
    local_steps: int = 2
    batch_size: int = 32
    lr: float = 0.5
    init_scale: float = 0.1


@dataclass
class NoiseSection:
    """The server's noise ``r1`` (the platform's ``coding.noise``): its law and scale. The aggregator's
    ``R2`` of the M2 run takes its scales from ``m2.noise2_scales``."""

    distribution: str = "gaussian"
    sigma1: float = 1e3


@dataclass
class CodingSection:
    """The keys, with the platform's ``coding`` names (``make_server_key``, ``make_aggregator_key``): ñ = n +
    n_extra; ``kappa`` is ``‖K‖₂`` of an oblique left inverse (``None``: the coding default 1/α, 45° between
    the kernel and col(P1)⊥); ``p``, ``gamma``, ``eta`` are key 2's, in the M2 run. ``key_seed``: an integer
    gives reproducible simulation keys and noise (not secret: anyone with the number can rebuild them),
    ``null`` draws 256 secure random bits per key."""

    key_seed: int | None = 0
    n_extra: int = 20
    alpha: float = 1e-3
    beta: float = 1e3
    kappa: float | None = None
    block_size: int = 20
    p: int = 2
    gamma: float = 1e-3
    eta: float = 1.0
    noise: NoiseSection = field(default_factory=NoiseSection)


@dataclass
class M2Section:
    """The M2 server attack (e): a larger model, a few rounds, the fast backend (key 2: ``coding.p``,
    ``coding.gamma``, ``coding.eta``, its noise ``R2`` at each scale of ``noise2_scales``)."""

    enabled: bool = True
    features: int = 4999
    clients: int = 10
    samples_per_client: int = 100
    rounds: int = 2
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
    """What the recorder keeps of each transcript: at most ``max_coordinates`` coordinates per vector (the
    attacks need a sample, not a copy of every model), saved to the output folder or not."""

    max_coordinates: int = 100_000
    save: bool = True


@dataclass
class AttackConfig:
    """Everything ``sifl attack`` needs. ``designs`` are compared under the same attacks; ``primary`` is the
    design whose figures go on the RESULT line. ``seed`` drives data, initial model and minibatches;
    ``coding.key_seed`` the keys and the parties' noise."""

    scenario: str = DEFAULT_SCENARIO
    seed: int = 0
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
    clients: ClientsSection = field(default_factory=ClientsSection)
    train: TrainSection = field(default_factory=TrainSection)
    coding: CodingSection = field(default_factory=CodingSection)
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
        backends, lefts = registry_names.immersion_backends(), registry_names.LEFT_INVERSES
        m = _DESIGN.match(name)
        if not m or m["backend"] not in backends or m["left"] not in lefts or m["k"] == "0":
            raise ValueError(
                f"design {name!r}: expected <backend>-<left inverse>[-rekey<k>] with backend in "
                f"{'/'.join(backends)}, left inverse in {'/'.join(lefts)} and k >= 1, "
                "for example fast-pinv or dense-oblique-rekey10"
            )
        return cls(name=name, backend=m["backend"], left_inverse=m["left"], rekey_every=int(m["k"] or 0))


#: The attack suite's old names → the platform's: refused with the new name, all at once (:func:`_renamed`).
RENAMED: dict[str, str] = {
    "key_seed": "coding.key_seed",
    "data.clients": "clients.num_clients",
    **{f"training.{k}": f"train.{k}" for k in ("rounds", "local_steps", "batch_size", "lr", "init_scale")},
    **{f"key.{k}": f"coding.{k}" for k in ("n_extra", "alpha", "beta", "kappa", "block_size")},
    "key.noise": "coding.noise.distribution",
    "key.noise_scale": "coding.noise.sigma1",
    **{f"m2.{k}": f"coding.{k}" for k in ("p", "gamma", "eta")},
}


def _schema_keys(schema: type, prefix: str = "") -> list[str]:
    """Every dotted key of ``schema`` (its sections walked)."""
    hints = typing.get_type_hints(schema)
    out = []
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _schema_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


#: The keys the attack suite shares with ``sifl run``'s schema: checked by the platform's own rules.
PLATFORM_KEYS: tuple[str, ...] = tuple(
    k for k in _schema_keys(AttackConfig) if k in set(_schema_keys(ScenarioConfig))
)

_AT_LEAST_1 = Range(lambda v: v >= 1, "an integer >= 1")
_POSITIVE = Range(lambda v: v > 0, "a number > 0")
_NONNEG = Range(lambda v: v >= 0, "a number >= 0")
_PROBABILITY = Range(lambda v: 0 < v < 1, "a number in (0, 1)")
#: Where the attacks need more than a run does: two uploads a round (the differences), and local steps
#: counted in steps (the platform's 0 means "epochs instead").
NARROWER: dict[str, Range] = {
    "clients.num_clients": Range(
        lambda v: v >= 2, "an integer >= 2 (differences need two uploads per round)"
    ),
    "train.local_steps": Range(lambda v: v >= 1, "an integer >= 1 (the attack suite counts local steps)"),
}
#: The domain checks of :class:`AttackConfig`: the platform's for :data:`PLATFORM_KEYS` (narrowed where
#: :data:`NARROWER` says), the attack suite's own for the rest; the choices are the coding registry's.
RULES = Rules(
    choices={
        **{k: c for k, c in PLATFORM_RULES.choices.items() if k in PLATFORM_KEYS},
        "m2.backend": Choice(registry_names.immersion_backends),
        "m2.left_inverse": Choice(lambda: registry_names.LEFT_INVERSES),
    },
    ranges={
        **{k: r for k, r in PLATFORM_RULES.ranges.items() if k in PLATFORM_KEYS},
        **NARROWER,
        "model.features": _AT_LEAST_1,
        "model.hidden": Range(lambda v: v >= 0, "an integer >= 0"),
        "data.samples_per_client": _AT_LEAST_1,
        "train.init_scale": _POSITIVE,
        "m2.features": _AT_LEAST_1,
        "m2.clients": _AT_LEAST_1,
        "m2.samples_per_client": _AT_LEAST_1,
        "m2.rounds": _AT_LEAST_1,
        "audit.trials": _AT_LEAST_1,
        "audit.delta": _PROBABILITY,
        "audit.clip": _POSITIVE,
        "known_plaintext.tolerance": _POSITIVE,
        "transcript.max_coordinates": _AT_LEAST_1,
        "rank_tol_factor": _POSITIVE,
        "contrast.beta": _POSITIVE,
        "contrast.noise_scale": _NONNEG,
    },
)


def _renamed(raw: dict, problems: list[str]) -> None:
    """Take every old name out of ``raw`` (a scenario's, an override's) and say its new one: the platform's
    names are the only ones, so ``clients.num_clients=5`` means the same to ``sifl run`` and ``sifl
    attack``."""
    for old, new in RENAMED.items():
        *path, leaf = old.split(".")
        section = raw
        for part in path:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf in section:
            value = section.pop(leaf)
            shown = value if isinstance(value, str) else json.dumps(value)
            problems.append(
                f"{old}: renamed {new} (the platform's name, as in sifl run); write {new}={shown} instead"
            )
    for old in ("training", "key"):  # emptied by the renames above: no "unknown key" besides
        if raw.get(old) == {}:
            raw.pop(old)


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
    if cfg["train"]["batch_size"] > cfg["data"]["samples_per_client"]:
        problems.append(
            f"train.batch_size: {cfg['train']['batch_size']} exceeds data.samples_per_client="
            f"{cfg['data']['samples_per_client']}; lower train.batch_size"
        )


def load_attack_config(argv: list[str] | None = None) -> DictConfig:
    """Parse ``scenario=NAME`` and ``key=value`` items into the validated, read-only :class:`AttackConfig`.

    Raises:
        ConfigError: every problem found, each with its key, what was expected, what arrived and the fix.
    """
    parsed, problems = parse_overrides(argv or [], noun="argument", example="train.rounds=30")
    scenario = next((str(v) for k, v in parsed if k == "scenario"), DEFAULT_SCENARIO)
    path = scenario_path(scenario)
    raw: dict = {}
    if path.is_file():
        raw = read_scenario(path, "attack", problems)  # a scenario of sifl run: that command, one line
    else:
        names = [name for name, kind in scenario_kinds().items() if kind == "attack"]
        problems.append(f"scenario: no file {path}; attack scenarios: {', '.join(names) or 'none'}")
    raw["scenario"] = path.stem
    for key, value in parsed:
        if key != "scenario":
            set_path(raw, key, value)
    _renamed(raw, problems)
    return validate(AttackConfig, raw, RULES, cross_checks=(_cross_checks,), problems=problems)
