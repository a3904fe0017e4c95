"""The platform's own configuration sections: each key with its type, its default, its rule and its meaning.

Why rules on the fields: a key's range or choice (:func:`~sifl_ray.config.validation.setting`) sits beside
its type and default, where a reader and ``sifl config`` find it, exactly as in a section a component
declares (:mod:`sifl_ray.config.sections`). A choice is read from the registry that owns it each time a
value is checked, so an entry registered at run time is valid at once and no list is copied here. The
comment beside a field (or just above it) is its meaning in ``sifl config``.

The sections :class:`ClientsConfig`, :class:`TrainConfig`, :class:`CodingConfig` and
:class:`PrivacyConfig` are the one schema the attack suite and the frontier read too
(:mod:`sifl_ray.attacks.config`, :mod:`sifl_ray.attacks.frontier`): the same keys, defaults and rules.
Nothing here imports a registry's module at import time: each is read when a value is checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sifl_ray.config import names
from sifl_ray.config.components import DATASETS, DEVICE_PROFILES, PARTITIONERS
from sifl_ray.config.import_paths import is_import_path
from sifl_ray.config.validation import AT_LEAST_1, NONNEG, POSITIVE, PROBABILITY, Choice, Range, setting

#: What ``output.name`` may be: one folder's name, one word of the RESULT line.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

DEFAULT_ARMS = ("fl", "sifl_m1", "sifl_m2", "nbafl")  # the arms a scenario runs when it lists none


def _partitioners() -> tuple[str, ...]:
    return PARTITIONERS.names()


def _datasets() -> tuple[str, ...]:
    return DATASETS.names()


def _profiles() -> tuple[str, ...]:
    return DEVICE_PROFILES.names()


@dataclass(frozen=True)
class ChoiceOrImportPath(Choice):
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


@dataclass
class DataConfig:
    """Which data set and how it is split over clients; a data set's and a partitioner's own knobs are in
    their sections (``synthetic.n_train``, ``dirichlet.alpha``: ``sifl config`` lists them)."""

    # a name in sifl_ray.data.DATASETS (digits, mnist, fashion_mnist, synthetic, mnist_sample: 5,000 real
    # MNIST digits, offline; arrays, leaf: your files; yours, registered with sifl_ray.data.register_dataset)
    # or package.module:function (docs/data.md)
    name: str = setting("digits", rule=ChoiceOrImportPath(_datasets))
    # keyword arguments of an imported loader (or a registered one that declares no settings section)
    args: dict[str, Any] = field(default_factory=dict)
    root: str | None = None  # folder for downloaded files (in <root>/<name>/); None → data_cache
    # fetch missing or corrupt files of a downloaded data set (mnist, fashion_mnist) from data.mirrors
    # (checked against the published checksums); false: use the files in data.root only, and name any that
    # is missing or corrupt
    download: bool = True
    # base URLs holding the .gz files, tried in order (your own copy, a closer mirror); null: the public
    # mirrors of the data set (sifl_ray.data.MNIST_MIRRORS). Every file is checked against the published MD5.
    mirrors: list[str] | None = setting(
        None,
        rule=Range(
            lambda v: bool(v) and all(str(u).startswith(("http://", "https://", "file://")) for u in v),
            "a non-empty list of base URLs (http://, https:// or file://) holding the .gz files, or null",
        ),
    )
    limit_train: int | None = None  # keep a random subset of the training set (scaled-down runs)
    limit_test: int | None = None  # keep a random subset of the test set (faster evaluation)
    # the share of samples held out for testing by a data set without a test set of its own (digits,
    # mnist_sample, arrays and leaf without one, yours)
    test_fraction: float = setting(0.25, rule=PROBABILITY)
    # a name in sifl_ray.data.PARTITIONERS: iid, dirichlet, shards, natural, yours
    partition: str = setting("iid", rule=Choice(_partitioners))


@dataclass
class ClientsConfig:
    """Who takes part: how many clients and how each round samples them."""

    num_clients: int = setting(10, rule=AT_LEAST_1)  # N: the clients the training set is split over
    # fraction of clients sampled each round (at least one)
    fraction: float = setting(1.0, rule=Range(lambda v: 0 < v <= 1, "a number in (0, 1]"))
    # fixed: exactly ⌈fraction·N⌉ clients a round; poisson: each client with probability fraction (a round
    # may have none; what DP-FedAvg's accountant assumes). The same clients in every arm either way.
    sampling: str = setting("fixed", rule=Choice(lambda: names.SAMPLINGS))


@dataclass
class TrainConfig:
    """Local training: the model, optimizer and schedule every client and every arm share."""

    # mlp | cnn | cnn2 | digits_mlp | digits_mlp_wide | a name registered with
    # sifl_ray.models.register_model | package.module:factory, called as
    # factory(input_shape, num_classes, **model_args) (docs/models.md)
    model: str = setting("digits_mlp", rule=ChoiceOrImportPath(names.MODELS.names))
    # keyword arguments of an imported factory (or a registered one that declares no settings section)
    model_args: dict[str, Any] = field(default_factory=dict)
    # sgd | momentum | adam | any torch.optim class name
    optimizer: str = setting(
        "sgd",
        rule=Choice(
            names.OPTIMIZERS.names, more=names.torch_optimizer_names, more_label="a torch.optim class name"
        ),
    )
    lr: float = setting(0.05, rule=POSITIVE)  # the clients' learning rate (the optimizer's step size)
    batch_size: int = setting(32, rule=AT_LEAST_1)  # a client's minibatch size
    local_epochs: int = setting(1, rule=AT_LEAST_1)  # passes over its data a client makes in a round
    local_steps: int = setting(0, rule=NONNEG)  # > 0: this many local steps instead of epochs
    rounds: int = setting(20, rule=AT_LEAST_1)  # global rounds (T) every arm plays
    eval_batch_size: int = setting(2048, rule=AT_LEAST_1)  # the evaluator's batch on the test set
    # model/training dtype (coding is always float64); float64 isolates coding error
    dtype: str = setting("float32", rule=Choice(lambda: ("float32", "float64")))
    skip_training: bool = False  # no-op clients (benchmarks of framework overhead)
    # a client worker trains its clients together where that reproduces the loop, else one at a time, and
    # says why once (sifl_ray.optim.vectorised); false (or off): always one at a time
    vectorise: bool = True


@dataclass
class NoiseConfig:
    """The law of SIFL's two noises (the server's r1 / R1 and the aggregator's R2)."""

    # the law of the noises: gaussian (σ = sigma1, sigma2) | laplace (scale b = sigma1, sigma2)
    distribution: str = setting("gaussian", rule=Choice(lambda: names.NOISE_DISTRIBUTIONS))
    sigma1: float = setting(1e3, rule=NONNEG)  # server noise r1 / R1: std (gaussian) or scale b (laplace)
    sigma2: float = setting(1e3, rule=NONNEG)  # aggregator noise R2


@dataclass
class PrecisionConfig:
    """The float64 guard: a coding whose predicted decode error exceeds the tolerance is refused (or warned
    about) before training."""

    tolerance: float = setting(1e-5, rule=POSITIVE)  # largest acceptable predicted per-round decode error
    # refuse: a coding predicted above the tolerance is an error before training; warn: it runs, warned
    policy: str = setting("refuse", rule=Choice(lambda: names.PRECISION_POLICIES))


_FLOAT64_ONLY = (
    "coding arithmetic is float64: the encoded vector is dominated by noise, and float32 would lose the "
    "model in it; docs/method.md 'Precision'"
)


@dataclass
class CodingConfig:
    """The immersion codes (docs/method.md "Choosing the matrices")."""

    backend: str = setting("fast", rule=Choice(names.immersion_backends))  # fast | dense | block
    # the left inverse of the server code: oblique (the paper's, with a kernel term) | pinv (orthogonal)
    left_inverse: str = setting("oblique", rule=Choice(lambda: names.LEFT_INVERSES))
    # ñ − n
    n_extra: int = setting(
        64, rule=Range(lambda v: v >= 1, "an integer ≥ 1 (ñ − n ≥ 1: the noise needs a kernel)")
    )
    alpha: float = setting(1e-3, rule=POSITIVE)  # scale of P1
    beta: float = setting(1.0, rule=POSITIVE)  # scale of N1
    # ‖K‖₂ of the oblique part; None → 1/alpha (kernel at 45° to col(P1)⊥)
    kappa: float | None = setting(None, rule=NONNEG)
    block_size: int = setting(64, rule=AT_LEAST_1)  # block backend only
    # columns of the aggregator code (M2)
    p: int = setting(2, rule=Range(lambda v: v >= 2, "an integer ≥ 2 (π2 needs a null space: p − 1 ≥ 1)"))
    gamma: float = setting(1e-3, rule=POSITIVE)  # scale of P2 (‖P2R‖ = 1/gamma)
    eta: float = setting(1.0, rule=POSITIVE)  # scale of N2
    # fused | stepwise (sifl_ray.roles.client.ClientWorkerRole)
    client_form: str = setting("fused", rule=Choice(lambda: ("fused", "stepwise")))
    # the coding's arithmetic: float64 only (the encoded vector is mostly noise; docs/method.md "Precision")
    dtype: str = setting("float64", rule=Choice(lambda: ("float64",), meaning=_FLOAT64_ONLY))
    key_seed: int | None = None  # None: keys from a secure random source; int: reproducible (not secure)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)


@dataclass
class PrivacyConfig:
    """SIFL's ε inputs: the clip C behind the sensitivities 2C/|D_i| and 2C/|D|, and δ."""

    clip: float = setting(1000.0, rule=POSITIVE)  # C used for SIFL's sensitivities 2C/|D_i| and 2C/|D|
    delta: float = setting(1e-5, rule=PROBABILITY)  # δ of SIFL's (ε, δ) per element


@dataclass
class RayConfig:
    """How the parties are laid out: how many client workers and aggregator hosts, the resources each gets,
    and, on Ray, which cluster."""

    # unset/local: a private local Ray instance; auto: join the cluster `ray start` recorded on this
    # machine; HOST:PORT or ray://HOST:PORT: join that one (RAY_ADDRESS also sets it, as a Ray job does)
    address: str | None = None
    # client workers; 0 → one per available CPU (at most the number of clients)
    num_workers: int = setting(0, rule=NONNEG)
    cpus_per_worker: float = setting(1.0, rule=NONNEG)  # CPUs Ray reserves for each client worker
    # fractional GPUs per client worker (0: the workers train on CPUs)
    gpus_per_worker: float = setting(0.0, rule=NONNEG)
    # fractional GPU for the evaluator (simulation only; 0: on a CPU)
    evaluator_gpus: float = setting(0.0, rule=NONNEG)
    # shards of the encoded vector, each reduced on its own (and with its own R2 noise)
    num_shards: int = setting(2, rule=AT_LEAST_1)
    # actors hosting the shards (at most num_shards; the numbers do not depend on it); 0: auto, one per
    # 2^19 rows of the encoded vector (sifl_ray.runner.parties.aggregator_actor_count)
    aggregator_actors: int = setting(0, rule=NONNEG)
    # spread the client workers over the cluster's nodes (Ray's SPREAD strategy) instead of Ray's default,
    # which fills the driver's node first; on one machine it changes nothing
    spread_workers: bool = False
    materialize_uploads: bool = False  # encode every client's upload separately (slower; for transcripts)
    # compact: the server, the first aggregator host, a CPU evaluator and client worker 0 (unless a drill
    # or faults.deadline_s may kill or stall it, it has a GPU, or the workers spread) share one process,
    # each its own object with its own secrets, which saves a process's start and memory each; separate:
    # a process per party (what a drill that kills one party needs)
    placement: str = setting("compact", rule=Choice(lambda: ("compact", "separate")))


@dataclass
class OutputConfig:
    """What a run writes: the run folder, TensorBoard, the plot, progress and checkpoints."""

    dir: str = "runs"  # where run folders are made
    # the run's name: its folder (output.dir/<name>/<date-time>) and the RESULT tag; None: the scenario's
    name: str | None = setting(
        None,
        rule=Range(
            lambda v: bool(RUN_NAME.fullmatch(v)),
            "a name of letters, digits, '.', '_' or '-' (a folder's name and the RESULT tag), e.g. lr_0.05",
        ),
    )
    tensorboard: bool = True  # write TensorBoard event files (<run folder>/tb)
    plot: bool = True  # draw accuracy.png (and accuracy_vs_epsilon.png where arms state an ε)
    progress: bool = True  # print a line per round (a bar on a terminal)


@dataclass
class FaultEventConfig:
    """One injected fault (tests, benchmarks, drills). See :mod:`sifl_ray.faults` for what each kind does.
    ``kind`` has no default to fall back on, so its choice is checked with the event's other keys
    (:mod:`sifl_ray.config.checks`)."""

    kind: str = ""  # worker_exit | worker_kill | straggle | corrupt_upload | corrupt_partial |
    #                 server_kill | aggregator_kill | evaluator_kill | driver_kill
    round: int = 0
    arm: str | None = None  # None: the first arm of the run
    worker: int | None = None  # worker_exit, worker_kill, straggle, corrupt_partial
    client: int | None = None  # corrupt_upload
    shard: int = 0  # aggregator_kill
    corruption: str = setting(
        "nan", rule=Choice(lambda: names.FAULT_CORRUPTIONS)
    )  # corrupt_*: nan | inf | shape | round | epoch
    # straggle: the delay; worker_exit: how long the worker trains before it dies
    seconds: float = setting(0.0, rule=Range(lambda v: v >= 0, "a number ≥ 0"))
    # worker_exit: train | unmask (secure aggregation: after the masked upload)
    phase: str = setting("train", rule=Choice(lambda: names.FAULT_PHASES))


@dataclass
class FaultsConfig:
    """What the platform does when a party fails, and the faults to inject (``inject``)."""

    # a client worker died: retry (respawn, re-run) | drop (survivors only)
    worker_policy: str = setting("retry", rule=Choice(lambda: ("retry", "drop")))
    # a worker missed the deadline: retry | drop
    straggler_policy: str = setting("drop", rule=Choice(lambda: ("drop", "retry")))
    # per-round deadline for a worker's clients; None: no deadline
    deadline_s: float | None = setting(
        None, rule=Range(lambda v: v > 0, "a number of seconds > 0 (or null: no deadline)")
    )
    # per worker and round; then the worker's clients are dropped (and logged)
    max_retries: int = setting(2, rule=NONNEG)
    # server / aggregator / evaluator restores per run before the run gives up
    max_restores: int = setting(3, rule=NONNEG)
    # faults to inject, for drills and tests: a list of events (kind, round, ...: sifl_ray.faults)
    inject: list[FaultEventConfig] = field(default_factory=list)


@dataclass
class AuditConfig:
    """Canary clients: every run audits its own privacy (docs/method.md "Auditing inside the run")."""

    # k canary clients per arm (0: off); an even k (the lower bound's theorem counts every canary)
    canaries: int = setting(0, rule=Range(lambda v: v >= 0, "an integer ≥ 0 (0 turns the canaries off)"))
    # directions never inserted: the null of the canaries' statistic
    nulls: int = setting(
        200, rule=Range(lambda v: v >= 2, "an integer ≥ 2 (the null's spread is estimated from them)")
    )
    # a canary's norm where the arm clips no update (fl, SIFL, NbAFL); else the arm's clip
    norm: float = setting(1.0, rule=POSITIVE)
    # of each lower bound (Steinke's and the f-DP one together) and the share the estimate's interval holds
    confidence: float = setting(0.95, rule=PROBABILITY)
    # none: each lower bound at audit.confidence (the table says what all of them hold together);
    # bonferroni: every bound of the table at once at audit.confidence (each at a higher one)
    correction: str = setting(
        "none",
        rule=Choice(
            lambda: ("none", "bonferroni"),
            meaning="none: each bound at audit.confidence; bonferroni: all of the table's bounds together",
        ),
    )
    # play the run again without canaries (in-process, same secrets: needs coding.key_seed) and report each
    # arm's accuracy with and without them: how much the canaries moved the model
    compare: bool = False


@dataclass
class CheckpointConfig:
    """Periodic checkpoints (``sifl run --resume RUN_DIR``; restoring a dead server or aggregator)."""

    # rounds between checkpoints (and the last round); 0: off
    every: int = setting(1, rule=Range(lambda v: v >= 0, "an integer ≥ 0 (0 turns checkpoints off)"))
    keep: int = setting(2, rule=AT_LEAST_1)  # complete checkpoints kept
    key_dir: str | None = None  # where the parties keep their key files; None: <run_dir>/../.keys/<run>


@dataclass
class ServerSideConfig:
    """The server and the aggregator as the clock charges them: one data centre, its compute and the link
    between the two (docs/clock.md "What a round costs")."""

    # the server's and the aggregator's compute, GFLOP/s: sums, codes, secure aggregation's masks
    gflops: float = setting(1000.0, rule=POSITIVE)
    gbps: float = setting(10.0, rule=POSITIVE)  # the link from the aggregator to the server, Gbit/s
    latency_ms: float = setting(0.5, rule=NONNEG)  # one-way latency on that link, ms


@dataclass
class ClockConfig:
    """A simulated clock (docs/clock.md): every client gets a device, every round a simulated duration (its
    real work converted to device time), and a deadline drops the late at the step they are in. Off unless
    a profile or a trace names the devices; then summary.json, TensorBoard and accuracy_vs_time.png have
    the clock as their time axis."""

    # the devices' law: mobile (phones on cellular links, its sources in docs/clock.md), equal (every device
    # the same), or one registered with sifl_ray.clock.register_profile; null (and no trace): no clock
    profile: str | None = setting(None, rule=Choice(_profiles))
    # a file of devices, CSV or JSON, one row per device (docs/clock.md "Trace files"); replaces the profile
    trace: str | None = None
    # simulated seconds from a round's start by which an upload must arrive; a client still working then
    # drops at the step it is in (before upload; under secure aggregation after sharing its keys); null: none
    deadline_s: float | None = setting(None, rule=POSITIVE)
    # over-selection: keep the first k uploads to arrive, drop the rest before upload; null: keep every one
    keep: int | None = setting(None, rule=AT_LEAST_1)
    # secure aggregation's key agreement and unmasking: how long the server waits for a client's message
    phase_timeout_s: float = setting(10.0, rule=POSITIVE)
    # test accuracy whose first crossing summary.json reports per arm (time to accuracy); null: none
    target_accuracy: float | None = setting(None, rule=PROBABILITY)
    server: ServerSideConfig = field(default_factory=ServerSideConfig)


@dataclass
class ScenarioConfig:
    """A scenario: every section of the platform's own (the arms, the data, the coding, …); the sections that
    components declare (:mod:`sifl_ray.config.sections`) are merged in by
    :func:`sifl_ray.config.load.scenario_schema`."""

    scenario: str = "quickstart"  # the scenario's name (its file's, or scenario= on the command line)
    seed: int = 0  # the run seed: the split, the initial model, the minibatches, the sampling, the noises
    # what hosts the parties: ray (a process per party, on this machine or a cluster: the ray section) or
    # local (every party in this process, the same parties and the same numbers)
    backend: str = setting("ray", rule=names.BACKENDS.choice())
    # the arms played side by side on the same data, initial model and minibatches (docs/privacy.md)
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
    clock: ClockConfig = field(default_factory=ClockConfig)
