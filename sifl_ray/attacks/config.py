"""The attack suite's configuration: a typed schema, a scenario of kind ``attack``, ``key=value`` overrides.

Why a schema of its own: the attack suite simulates a small model (its own synthetic task, ``model`` and
``data``) and compares several key designs at once (``designs``, ``contrast``, ``m2``, ``audit``). Where a
key means what it means to ``sifl run``, it is the run's own: the sections ``clients``, ``train`` and
``coding`` are the run schema's (:mod:`sifl_ray.config.schema`), with its defaults and its rules, read as
:data:`PLATFORM_KEYS`; a run's key the attack suite does not read is refused by name (:data:`UNREAD`
says why), and an old name of the attack suite's is refused with its new one (:data:`RENAMED`). The
validator is the platform's (:func:`sifl_ray.config.validate`): YAML scenario over the dataclass
defaults, CLI overrides over that, every problem collected and raised at once
(:class:`~sifl_ray.config.ConfigError`, exit code 2), then a read-only OmegaConf object.

Designs are named ``<backend>-<left inverse>[-rekey<k>]``, for example ``fast-pinv``, ``dense-oblique``,
``block-pinv`` or ``fast-pinv-rekey10`` (a new key epoch every 10 rounds). Backends and left inverses are the
coding registry's (:mod:`sifl_ray.config.names`), read when a design is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import ARMS
from sifl_ray.config import names
from sifl_ray.config.scenarios import read_scenario, scenario_kinds, scenario_path
from sifl_ray.config.schema import ClientsConfig, CodingConfig, TrainConfig
from sifl_ray.config.validation import (
    AT_LEAST_1,
    NONNEG,
    POSITIVE,
    PROBABILITY,
    Choice,
    Range,
    Rules,
    parse_overrides,
    refuse_renamed,
    refuse_unread,
    schema_keys,
    set_path,
    setting,
    validate,
)

DEFAULT_SCENARIO = "attack_small"
_DESIGN = re.compile(r"^(?P<backend>[a-z]+)-(?P<left>[a-z]+)(?:-rekey(?P<k>\d+))?$")


@dataclass
class ModelSection:
    """The small model: binary logistic regression (n = features + 1), or with ``hidden`` > 0 a one-layer
    tanh MLP (n = features·hidden + 2·hidden + 1). Its updates span the whole parameter space, which the
    subspace attacks need to reach full rank."""

    features: int = setting(199, rule=AT_LEAST_1)
    hidden: int = setting(0, rule=NONNEG)


@dataclass
class DataSection:
    """Synthetic data: Gaussian features, labels from a random logistic teacher (noisy, so gradients never
    vanish)."""

    samples_per_client: int = setting(200, rule=AT_LEAST_1)
    teacher_scale: float = 3.0


@dataclass
class AttackTrainSection(TrainConfig):
    """The run's ``train`` section (local SGD: K steps of minibatch SGD per round, the fused client of
    docs/method.md "SIFL M1"), and the attack suite's own ``init_scale``, which scales the random initial
    model."""

    init_scale: float = setting(0.1, rule=POSITIVE)


@dataclass
class M2Section:
    """The M2 server attack (e): a larger model, a few rounds, the fast backend (key 2: ``coding.p``,
    ``coding.gamma``, ``coding.eta``, its noise ``R2`` at each scale of ``noise2_scales``)."""

    enabled: bool = True
    features: int = setting(4999, rule=AT_LEAST_1)
    clients: int = setting(10, rule=AT_LEAST_1)
    samples_per_client: int = setting(100, rule=AT_LEAST_1)
    rounds: int = setting(2, rule=AT_LEAST_1)
    noise2_scales: list[float] = field(default_factory=lambda: [1.0, 1e3])
    backend: str = setting("fast", rule=Choice(names.immersion_backends))
    left_inverse: str = setting("pinv", rule=Choice(lambda: names.LEFT_INVERSES))


@dataclass
class AuditSection:
    """The DP audit (f): trials per hypothesis, Clopper–Pearson confidence, δ and Remark 3's clip C."""

    trials: int = setting(5000, rule=AT_LEAST_1)
    confidence: float = 0.95
    delta: float = setting(1e-5, rule=PROBABILITY)
    clip: float = setting(1.0, rule=POSITIVE)


@dataclass
class KnownPlaintextSection:
    """Known plaintext (d): a fitted decoder counts as exact when its relative error on a fresh encoding is
    below ``tolerance`` (the legitimate decoder's own round-off is printed beside it)."""

    tolerance: float = setting(1e-3, rule=POSITIVE)


@dataclass
class ContrastSection:
    """Designs run a second time at a moderate noise scale: separates what float64 round-off does to an
    attack (at the paper's scales) from what the design does (it is the same design, the same attacks)."""

    designs: list[str] = field(default_factory=list)
    beta: float = setting(1.0, rule=POSITIVE)
    noise_scale: float = setting(1.0, rule=NONNEG)


@dataclass
class TranscriptSection:
    """What the recorder keeps of each transcript: at most ``max_coordinates`` coordinates per vector (the
    attacks need a sample, not a copy of every model), saved to the output folder or not."""

    max_coordinates: int = setting(100_000, rule=AT_LEAST_1)
    save: bool = True


@dataclass
class AttackConfig:
    """Everything ``sifl attack`` needs. ``designs`` are compared under the same attacks; ``primary`` is the
    design whose figures go on the RESULT line. ``seed`` drives data, initial model and minibatches;
    ``coding.key_seed`` the keys and the parties' noise (null, as in a run: secure random keys)."""

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
    rank_tol_factor: float = setting(4.0, rule=POSITIVE)
    out_dir: str | None = None
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    train: AttackTrainSection = field(default_factory=AttackTrainSection)
    coding: CodingConfig = field(default_factory=CodingConfig)
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
        backends, lefts = names.immersion_backends(), names.LEFT_INVERSES
        m = _DESIGN.match(name)
        if not m or m["backend"] not in backends or m["left"] not in lefts or m["k"] == "0":
            raise ValueError(
                f"design {name!r}: expected <backend>-<left inverse>[-rekey<k>] with backend in "
                f"{'/'.join(backends)}, left inverse in {'/'.join(lefts)} and k >= 1, "
                "for example fast-pinv or dense-oblique-rekey10"
            )
        return cls(name=name, backend=m["backend"], left_inverse=m["left"], rekey_every=int(m["k"] or 0))


#: The attack suite's old names → the platform's: refused with the new name, all at once.
RENAMED: dict[str, str] = {
    "key_seed": "coding.key_seed",
    "data.clients": "clients.num_clients",
    **{f"training.{k}": f"train.{k}" for k in ("rounds", "local_steps", "batch_size", "lr", "init_scale")},
    **{f"key.{k}": f"coding.{k}" for k in ("n_extra", "alpha", "beta", "kappa", "block_size")},
    "key.noise": "coding.noise.distribution",
    "key.noise_scale": "coding.noise.sigma1",
    **{f"m2.{k}": f"coding.{k}" for k in ("p", "gamma", "eta")},
}

#: The keys of the run's sections the attack suite reads (checked by the run's own rules, beside its own
#: ``train.init_scale``).
PLATFORM_KEYS: tuple[str, ...] = (
    "clients.num_clients",
    *(f"train.{k}" for k in ("rounds", "local_steps", "batch_size", "lr")),
    *(
        f"coding.{k}"
        for k in ("key_seed", "n_extra", "alpha", "beta", "kappa", "block_size", "p", "gamma", "eta")
    ),
    "coding.noise.distribution",
    "coding.noise.sigma1",
)

_SHARED = {"clients": ClientsConfig, "train": TrainConfig, "coding": CodingConfig}

#: Why a run's key is not the attack suite's (the others: the small model and its task are the suite's).
UNREAD: dict[str, str] = {
    "coding.backend": "the key designs name the backend: designs=[fast-pinv]",
    "coding.left_inverse": "the key designs name the left inverse: designs=[fast-pinv]",
    "train.model": "the model is the suite's own: model.features, model.hidden",
    "coding.noise.sigma2": "the M2 run's R2 takes each of m2.noise2_scales",
}

#: Where the attacks need more than a run does: two uploads a round (the differences), and local steps
#: counted in steps (the platform's 0 means "epochs instead").
NARROWER: dict[str, Range] = {
    "clients.num_clients": Range(
        lambda v: v >= 2, "an integer >= 2 (differences need two uploads per round)"
    ),
    "train.local_steps": Range(lambda v: v >= 1, "an integer >= 1 (the attack suite counts local steps)"),
}
#: The domain checks of :class:`AttackConfig` beyond its fields' own: the narrower ranges.
RULES = Rules(ranges=NARROWER)


def read_keys(cfg: DictConfig) -> dict[str, Any]:
    """``cfg`` as the suite reads it, for the outputs: its own sections whole, the run's sections reduced to
    :data:`PLATFORM_KEYS` (and ``train.init_scale``), so that a report never shows a run's key the suite
    ignored (a ``train.model`` it never built)."""
    data: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    kept = {*PLATFORM_KEYS, "train.init_scale"}
    for name in _SHARED:
        for key in schema_keys(_SHARED[name], f"{name}."):
            *path, leaf = key.split(".")
            section = data
            for part in path:
                section = section[part]
            if key not in kept:
                section.pop(leaf)
        data[name] = {k: v for k, v in data[name].items() if v != {}}  # a section left with no key read
    return data


def _cross_checks(cfg: DictConfig, problems: list[str]) -> None:
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
    if cfg.train.local_steps < 1:  # sifl run's default (0: epochs instead) when no scenario sets it
        problems.append(
            f"train.local_steps: expected an integer >= 1 (the attack suite counts local steps), got "
            f"{cfg.train.local_steps}; set train.local_steps (for example train.local_steps=2)"
        )


def load_attack_config(argv: list[str] | None = None) -> DictConfig:
    """Parse ``scenario=NAME`` and ``key=value`` items into the validated, read-only :class:`AttackConfig`.

    Raises:
        ConfigError: every problem found, each with its key, what was expected, what arrived and the fix.
    """
    parsed, problems = parse_overrides(argv or [], noun="argument", example="train.rounds=30")
    scenario = next((str(v) for k, v in parsed if k == "scenario"), DEFAULT_SCENARIO)
    path = scenario_path(scenario)
    raw: dict[str, Any] = {}
    if path.is_file():
        raw = read_scenario(path, "attack", problems)  # a scenario of sifl run: that command, one line
    else:
        kinds = [name for name, kind in scenario_kinds().items() if kind == "attack"]
        problems.append(f"scenario: no file {path}; attack scenarios: {', '.join(kinds) or 'none'}")
    raw["scenario"] = path.stem
    for key, value in parsed:
        if key != "scenario":
            set_path(raw, key, value)
    refuse_renamed(raw, RENAMED, problems, why="the platform's name, as in sifl run")
    refuse_unread(
        raw,
        _SHARED,
        PLATFORM_KEYS,
        problems,
        command="sifl attack",
        why=UNREAD,
        otherwise="the attack suite plays its own small task",
    )
    return validate(AttackConfig, raw, RULES, cross_checks=(_cross_checks,), problems=problems)
