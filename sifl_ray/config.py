"""Scenario configuration: a typed schema, YAML scenarios, ``key=value`` overrides, validated once.

Why one module: every entry point (``run.py``, ``sifl run``, ``sifl describe``, benchmarks, tests) must
read the same schema and report problems the same way. The YAML scenario is merged over the dataclass
defaults, the CLI overrides over that; then *every* problem is collected (unknown keys with a suggestion,
wrong types, out-of-range values, cross-field constraints) and raised at once as a :class:`ConfigError`
whose message says, for each, the key, what was expected, what arrived and how to fix it. The result is a
read-only OmegaConf object: nobody mutates the configuration after validation.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import ARMS, arm_names

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
DEFAULT_ARMS = ("fl", "sifl_m1", "sifl_m2", "nbafl")  # the arms a scenario runs when it lists none


@dataclass
class DataConfig:
    """Where samples come from and how they are split over clients."""

    name: str = "digits"  # digits | mnist | fashion_mnist | synthetic
    root: str | None = None  # folder for IDX files (files live in <root>/<name>/); None → data_cache
    download: bool = True  # fetch missing IDX files from the public mirrors (checksums verified)
    n_train: int = 60000  # synthetic only
    n_test: int = 10000  # synthetic only
    limit_train: int | None = None  # keep a random subset of the training set (scaled-down runs)
    limit_test: int | None = None
    test_fraction: float = 0.25  # digits only
    partition: str = "iid"  # a name in sifl_ray.data.PARTITIONERS: iid, dirichlet, shards, ...
    dirichlet_alpha: float = 0.5
    shards_per_client: int = 2


@dataclass
class ClientsConfig:
    num_clients: int = 10
    fraction: float = 1.0  # fraction of clients sampled each round (at least one)


@dataclass
class TrainConfig:
    model: str = "digits_mlp"  # mlp | cnn | cnn2 | digits_mlp
    optimizer: str = "sgd"  # sgd | momentum | adam | any torch.optim class name
    lr: float = 0.05
    batch_size: int = 32
    local_epochs: int = 1
    local_steps: int = 0  # > 0: this many local steps instead of epochs
    rounds: int = 20
    eval_batch_size: int = 2048
    dtype: str = "float32"  # model/training dtype (coding is always float64); float64 isolates coding error
    skip_training: bool = False  # no-op clients (benchmarks of framework overhead)


@dataclass
class NoiseConfig:
    distribution: str = "gaussian"  # gaussian | laplace
    sigma1: float = 1e3  # server noise r1 / R1: std (gaussian) or scale b (laplace)
    sigma2: float = 1e3  # aggregator noise R2


@dataclass
class PrecisionConfig:
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
    clip: float = 1000.0  # C used for SIFL's sensitivities 2C/|D_i| and 2C/|D|
    delta: float = 1e-5


@dataclass
class NbaflConfig:
    """The NbAFL baseline (SPEC "Baselines"): σ from ε, δ, C, the exposures L and the Gaussian formula."""

    epsilons: list[float] = field(default_factory=lambda: [1.0])  # one nbafl arm per ε
    delta: float = 1e-5
    clip: float = 10.0
    # multi_round: (ε, δ) for all T uploads of a client, L = T (NbAFL Theorem 1); per_round: L = 1, each
    # upload alone (weaker). Default multi_round: the guarantee NbAFL states and a reader of "ε" assumes.
    exposures: str = "multi_round"
    calibration: str = "classical"  # classical: NbAFL's c·L·Δ/ε (a proof for ε < 1); analytic: exact


@dataclass
class RayConfig:
    backend: str = "ray"  # ray | sequential (in-process, same roles)
    # unset/local: a private local Ray instance; auto: join the cluster `ray start` recorded on this
    # machine; HOST:PORT or ray://HOST:PORT: join that one (RAY_ADDRESS also sets it, as a Ray job does)
    address: str | None = None
    num_workers: int = 0  # client workers; 0 → one per available CPU (at most the number of clients)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0  # fractional GPUs per worker when GPUs exist
    num_shards: int = 2  # aggregator actors, each reducing one shard of the encoded vector
    materialize_uploads: bool = False  # encode every client's upload separately (slower; for transcripts)


@dataclass
class OutputConfig:
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
class CheckpointConfig:
    """Periodic checkpoints (``sifl run --resume RUN_DIR``; restoring a dead server or aggregator)."""

    every: int = 1  # rounds between checkpoints (and the last round); 0: off
    keep: int = 2  # complete checkpoints kept
    key_dir: str | None = None  # where the parties keep their key files; None: <run_dir>/../.keys/<run>


@dataclass
class ScenarioConfig:
    scenario: str = "quickstart"
    seed: int = 0
    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))
    data: DataConfig = field(default_factory=DataConfig)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    coding: CodingConfig = field(default_factory=CodingConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    nbafl: NbaflConfig = field(default_factory=NbaflConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


class ConfigError(ValueError):
    """All configuration problems at once; ``str()`` is the message shown to the user (exit code 2)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        lines = [f"{len(problems)} configuration problem{'s' if len(problems) != 1 else ''}:"]
        lines += [f"  - {p}" for p in problems]
        super().__init__("\n".join(lines))


def _partition_schemes() -> tuple[str, ...]:
    """The partitioners' names, read from their registry (``sifl_ray.data.partition``) when validating."""
    from sifl_ray.data.partition import PARTITIONERS  # deferred: importing config must stay cheap

    return tuple(PARTITIONERS)


# key → the allowed values, or a function returning them where a registry elsewhere owns the list
CHOICES: dict[str, tuple[str, ...] | typing.Callable[[], tuple[str, ...]]] = {
    "data.name": ("digits", "mnist", "fashion_mnist", "synthetic"),
    "data.partition": _partition_schemes,
    "train.model": ("mlp", "cnn", "cnn2", "digits_mlp"),
    "coding.backend": ("fast", "dense", "block"),
    "coding.left_inverse": ("oblique", "pinv"),
    "coding.client_form": ("fused", "stepwise"),
    "coding.dtype": ("float64", "float32"),
    "train.dtype": ("float32", "float64"),
    "coding.noise.distribution": ("gaussian", "laplace"),
    "coding.precision.policy": ("refuse", "warn"),
    "ray.backend": ("ray", "sequential"),
    "faults.worker_policy": ("retry", "drop"),
    "faults.straggler_policy": ("drop", "retry"),
    "nbafl.exposures": ("multi_round", "per_round"),  # sifl_ray.privacy.nbafl.EXPOSURES
    "nbafl.calibration": ("classical", "analytic"),  # sifl_ray.privacy.nbafl.CALIBRATIONS
}
# What each choice means, where the consequence of a choice is not obvious from its name.
CHOICE_HELP: dict[str, str] = {
    "nbafl.exposures": "multi_round: (ε, δ) for all T uploads of a client, NbAFL Theorem 1, σ grows with T; "
    "per_round: (ε, δ) per upload, per round only",
    "nbafl.calibration": "the Gaussian formula: classical, NbAFL's σ = c·L·Δ/ε, a proof for ε < 1 only; "
    "analytic, exact for every ε. How many uploads it covers is nbafl.exposures",
}
FAULT_KINDS = (
    "worker_exit",
    "worker_kill",
    "straggle",
    "corrupt_upload",
    "corrupt_partial",
    "server_kill",
    "aggregator_kill",
    "evaluator_kill",
    "driver_kill",
)
CORRUPTIONS = ("nan", "inf", "shape", "round", "epoch")
ONCE_KINDS = (
    "server_kill",
    "aggregator_kill",
    "evaluator_kill",
    "driver_kill",
)  # recovered from a checkpoint

# key → (predicate, what is expected, how to fix)
_POSITIVE = (lambda v: v > 0, "a number > 0")
_NONNEG = (lambda v: v >= 0, "a number ≥ 0")
RANGES: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    "train.lr": _POSITIVE,
    "train.batch_size": (lambda v: v >= 1, "an integer ≥ 1"),
    "train.local_epochs": (lambda v: v >= 1, "an integer ≥ 1"),
    "train.local_steps": _NONNEG,
    "train.rounds": (lambda v: v >= 1, "an integer ≥ 1"),
    "train.eval_batch_size": (lambda v: v >= 1, "an integer ≥ 1"),
    "clients.num_clients": (lambda v: v >= 1, "an integer ≥ 1"),
    "clients.fraction": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "data.dirichlet_alpha": (lambda v: v > 0, "a number > 0 (smaller means more label skew)"),
    "data.shards_per_client": (lambda v: v >= 1, "an integer ≥ 1"),
    "data.n_train": (lambda v: v >= 1, "an integer ≥ 1"),
    "data.n_test": (lambda v: v >= 1, "an integer ≥ 1"),
    "data.test_fraction": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "coding.n_extra": (lambda v: v >= 1, "an integer ≥ 1 (ñ − n ≥ 1: the noise needs a kernel)"),
    "coding.alpha": _POSITIVE,
    "coding.beta": _POSITIVE,
    "coding.kappa": _NONNEG,
    "coding.block_size": (lambda v: v >= 1, "an integer ≥ 1"),
    "coding.p": (lambda v: v >= 2, "an integer ≥ 2 (π2 needs a null space: p − 1 ≥ 1)"),
    "coding.gamma": _POSITIVE,
    "coding.eta": _POSITIVE,
    "coding.noise.sigma1": _NONNEG,
    "coding.noise.sigma2": _NONNEG,
    "coding.precision.tolerance": _POSITIVE,
    "privacy.clip": _POSITIVE,
    "privacy.delta": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "nbafl.delta": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "nbafl.clip": _POSITIVE,
    "ray.num_workers": _NONNEG,
    "ray.cpus_per_worker": _NONNEG,
    "ray.gpus_per_worker": _NONNEG,
    "ray.num_shards": (lambda v: v >= 1, "an integer ≥ 1"),
    "faults.deadline_s": (lambda v: v > 0, "a number of seconds > 0 (or null: no deadline)"),
    "faults.max_retries": _NONNEG,
    "faults.max_restores": _NONNEG,
    "checkpoint.every": (lambda v: v >= 0, "an integer ≥ 0 (0 turns checkpoints off)"),
    "checkpoint.keep": (lambda v: v >= 1, "an integer ≥ 1"),
}


def scenario_names() -> list[str]:
    """Names of the bundled scenarios (``scenarios/*.yaml``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def _parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError([f"override {text!r}: expected key=value (for example train.rounds=5)"])
    key, raw = text.split("=", 1)
    value = yaml.safe_load(raw) if raw != "" else None
    return key.strip(), value


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def _check_type(hint: Any, value: Any) -> tuple[bool, Any]:
    """(ok, coerced value) for a value against a dataclass field annotation."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return True, None
        for arg in args:
            if arg is type(None):
                continue
            ok, coerced = _check_type(arg, value)
            if ok:
                return True, coerced
        return False, value
    if origin is list:
        if not isinstance(value, list | tuple):
            value = [value]  # a single value where a list is expected: accept it as a one-element list
        out = []
        for item in value:
            ok, coerced = _check_type(args[0], item)
            if not ok:
                return False, value
            out.append(coerced)
        return True, out
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1.0e3 (no exponent sign) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if hint is str:
        return isinstance(value, str), value
    return True, value


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _validate_tree(schema: type, raw: dict, prefix: str, problems: list[str]) -> dict:
    """Check ``raw`` against dataclass ``schema``; return a dict of coerced values (defaults filled)."""
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else f"; valid keys: {', '.join(fields)}"
            problems.append(f"{dotted}: unknown key{hint} (remove it or fix the spelling)")
            continue
        hint_t = hints[key]
        item_t = (typing.get_args(hint_t) or (None,))[0] if typing.get_origin(hint_t) is list else None
        if item_t is not None and dataclasses.is_dataclass(item_t):
            if value is None:
                value = []
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                problems.append(
                    f"{dotted}: expected a list of mappings, got {value!r}; "
                    f"for example {dotted}=[{{kind: worker_exit, worker: 0, round: 1}}]"
                )
                continue
            out[key] = [_validate_tree(item_t, v, f"{dotted}[{i}].", problems) for i, v in enumerate(value)]
            continue
        if dataclasses.is_dataclass(hint_t):
            if not isinstance(value, dict):
                problems.append(f"{dotted}: expected a section (mapping), got {value!r}")
                continue
            out[key] = _validate_tree(hint_t, value, f"{dotted}.", problems)
            continue
        ok, coerced = _check_type(hint_t, value)
        if not ok:
            problems.append(
                f"{dotted}: expected {_type_name(hint_t)}, got {value!r} ({type(value).__name__}); "
                f"set {dotted}=<{_type_name(hint_t)}>"
            )
            continue
        choices = CHOICES.get(dotted)
        if callable(choices):
            choices = choices()
        if choices is not None and coerced not in choices:
            meaning = f" ({CHOICE_HELP[dotted]})" if dotted in CHOICE_HELP else ""
            problems.append(
                f"{dotted}: expected one of {', '.join(choices)}{meaning}, got {coerced!r}; "
                f"set {dotted}={choices[0]}"
            )
            continue
        if dotted in RANGES and coerced is not None:
            pred, what = RANGES[dotted]
            if not pred(coerced):
                problems.append(f"{dotted}: expected {what}, got {coerced!r}; change {dotted}")
                continue
        out[key] = coerced
    return out


def _cross_checks(cfg: dict, problems: list[str]) -> None:
    arms = cfg.get("arms", list(DEFAULT_ARMS))
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
    coding = cfg.get("coding", {})
    if coding.get("dtype") == "float32":
        problems.append(
            "coding.dtype: expected float64, got float32; coding arithmetic must be float64 because the "
            "encoded vector is dominated by noise (SPEC 'Precision'); set coding.dtype=float64"
        )
    data = cfg.get("data", {})
    if data.get("name") in ("mnist", "fashion_mnist") and not data.get("download", True):
        root = Path(str(data.get("root") or "data_cache")).expanduser()
        layouts = [
            root / data["name"],
            root / {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}[data["name"]],
        ]
        if not root.is_dir():  # the files themselves may sit in root/<name>/ or torchvision's layout
            problems.append(
                f"data.root: expected an existing folder with the IDX files, got {str(root)!r} (missing); "
                "create it, point data.root at it, or set data.download=true"
            )
        elif not any(p.is_dir() for p in layouts):
            problems.append(
                f"data.root: no {data['name']} folder in {str(root)!r} (expected {layouts[0]}/ with the "
                "IDX files, or torchvision's layout); put the files there or set data.download=true"
            )
    clients = cfg.get("clients", {})
    num_clients = clients.get("num_clients", 10)
    limit = data.get("limit_train")
    if data.get("name") in ("mnist", "fashion_mnist") and num_clients > (limit or 60000):
        problems.append(
            f"clients.num_clients: {num_clients} clients but only {limit or 60000} training samples"
            f"{' (data.limit_train)' if limit else ''}; every client needs at least one sample: lower "
            "clients.num_clients or raise data.limit_train"
        )
    elif limit is not None and num_clients > limit:
        problems.append(
            f"clients.num_clients: {num_clients} clients but data.limit_train={limit} samples; every client "
            "needs at least one sample: lower clients.num_clients or raise data.limit_train"
        )
    if data.get("name") == "synthetic" and num_clients > data.get("n_train", 60000):
        problems.append(
            f"clients.num_clients: {num_clients} clients but only "
            f"data.n_train={data.get('n_train')} samples; "
            "every client needs at least one sample: lower clients.num_clients or raise data.n_train"
        )
    if data.get("name") == "digits":
        n_digits_train = int(1797 * (1 - data.get("test_fraction", 0.25)))
        if num_clients > n_digits_train:
            problems.append(
                f"clients.num_clients: {num_clients} clients but digits has only {n_digits_train} training "
                "samples; lower clients.num_clients or use data.name=synthetic"
            )
    if data.get("partition") == "shards":
        spc = data.get("shards_per_client", 2)
        n_train = data.get("n_train", 60000) if data.get("name") == "synthetic" else None
        if n_train is not None and num_clients * spc > n_train:
            problems.append(
                "data.shards_per_client: clients × shards exceeds the training samples; "
                "lower data.shards_per_client or clients.num_clients"
            )


def _fault_checks(cfg: dict, problems: list[str]) -> None:
    """Each injected fault must name something that exists in this run (see :mod:`sifl_ray.faults`)."""
    faults = cfg.get("faults", {})
    events = faults.get("inject", [])
    if not events:
        return
    in_process = ("corrupt_upload", "corrupt_partial")  # garbage in the data, no process dies
    killing = sorted({ev.get("kind") for ev in events if isinstance(ev, dict)} - set(in_process))
    if cfg.get("ray", {}).get("backend") == "sequential" and killing:
        problems.append(
            f"faults.inject: {', '.join(map(str, killing))} kill or stall Ray actors; set ray.backend=ray "
            f"(in-process runs take only {' and '.join(in_process)})"
        )
    rounds = cfg.get("train", {}).get("rounds", 20)
    num_clients = cfg.get("clients", {}).get("num_clients", 10)
    workers = cfg.get("ray", {}).get("num_workers", 0)
    max_workers = min(workers, num_clients) if workers else num_clients
    shards = cfg.get("ray", {}).get("num_shards", 2)
    arms = arm_names(cfg)
    for i, ev in enumerate(events):
        at = f"faults.inject[{i}]"
        kind = ev.get("kind")
        if kind not in FAULT_KINDS:
            problems.append(
                f"{at}.kind: expected one of {', '.join(FAULT_KINDS)}, got {kind!r}; set {at}.kind"
            )
            continue
        if not 0 <= ev.get("round", 0) < rounds:
            problems.append(
                f"{at}.round: expected a round in [0, {rounds}) (train.rounds={rounds}), "
                f"got {ev.get('round')}; change {at}.round"
            )
        if ev.get("arm") is not None and ev["arm"] not in arms:
            problems.append(
                f"{at}.arm: expected one of {', '.join(arms)}, got {ev['arm']!r}; change {at}.arm"
            )
        if kind in ("worker_exit", "worker_kill", "straggle", "corrupt_partial"):
            w = ev.get("worker")
            if w is None or not 0 <= w < max_workers:
                problems.append(
                    f"{at}.worker: expected a worker index in [0, {max_workers}) for {kind}, got {w!r}; "
                    f"set {at}.worker"
                )
        if kind == "corrupt_upload":
            c = ev.get("client")
            if c is None or not 0 <= c < num_clients:
                problems.append(
                    f"{at}.client: expected a client id in [0, {num_clients}) for corrupt_upload, got {c!r}; "
                    f"set {at}.client"
                )
        if kind.startswith("corrupt") and ev.get("corruption", "nan") not in CORRUPTIONS:
            problems.append(
                f"{at}.corruption: expected one of {', '.join(CORRUPTIONS)}, got {ev.get('corruption')!r}; "
                f"set {at}.corruption"
            )
        if kind == "aggregator_kill" and not 0 <= ev.get("shard", 0) < shards:
            problems.append(
                f"{at}.shard: expected a shard in [0, {shards}) (ray.num_shards={shards}), "
                f"got {ev.get('shard')}; change {at}.shard"
            )
        if ev.get("seconds", 0.0) < 0:
            problems.append(
                f"{at}.seconds: expected a number ≥ 0, got {ev.get('seconds')}; change {at}.seconds"
            )
        if kind in ONCE_KINDS and not cfg.get("checkpoint", {}).get("every", 1):
            problems.append(
                f"{at}: recovering from a {kind} needs a checkpoint, but checkpoint.every=0; "
                "set checkpoint.every ≥ 1"
            )
    if any(ev.get("kind") == "straggle" for ev in events) and faults.get("deadline_s") is None:
        problems.append(
            "faults.deadline_s: a straggle fault needs a per-round deadline, got null; "
            "set faults.deadline_s (for example faults.deadline_s=5)"
        )


def load_config(overrides: list[str] | None = None, *, scenario: str | None = None) -> DictConfig:
    """Build the validated, read-only configuration.

    Args:
        overrides: ``key=value`` strings (dotted keys; YAML values), applied last. ``scenario=NAME`` picks the
            scenario file ``scenarios/NAME.yaml``; a path to a ``.yaml`` file also works.
        scenario: the scenario if not given in ``overrides`` (default ``quickstart``).

    Raises:
        ConfigError: every problem found, each with its key, expectation and fix.
    """
    problems: list[str] = []
    parsed: list[tuple[str, Any]] = []
    for text in overrides or []:
        try:
            parsed.append(_parse_override(text))
        except ConfigError as err:
            problems.extend(err.problems)
        except yaml.YAMLError as err:
            problems.append(f"override {text!r}: the value is not valid YAML ({err.__class__.__name__})")
    for key, value in parsed:
        if key == "scenario":
            scenario = str(value)
    scenario = scenario or "quickstart"
    path = Path(scenario) if scenario.endswith((".yaml", ".yml")) else SCENARIO_DIR / f"{scenario}.yaml"
    raw: dict = {}
    if not path.is_file():
        names = scenario_names()
        close = difflib.get_close_matches(scenario, names, n=1)
        tip = f"did you mean {close[0]}? " if close else ""
        problems.append(f"scenario: no scenario {scenario!r} ({path}); {tip}available: {', '.join(names)}")
    else:
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            problems.append(
                f"scenario: {path} must contain a mapping of sections, got {type(loaded).__name__}"
            )
        else:
            raw = loaded
    raw["scenario"] = path.stem if path.is_file() else scenario
    for key, value in parsed:
        if key != "scenario":
            _set_path(raw, key, value)
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


def _validated(raw: dict, problems: list[str]) -> DictConfig:
    if os.environ.get("RAY_ADDRESS") and not (raw.get("ray") or {}).get("address"):
        _set_path(raw, "ray.address", os.environ["RAY_ADDRESS"])
    checked = _validate_tree(ScenarioConfig, raw, "", problems)
    # ``checked`` holds only values that passed, so the cross-field checks can run even when some keys
    # failed: the user sees every problem in one message, not a second batch after fixing the first.
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ScenarioConfig), checked)
    except Exception as err:  # defensive: ``checked`` holds validated values only
        raise ConfigError([*problems, f"configuration: cannot be merged ({err})"]) from None
    _cross_checks(OmegaConf.to_container(merged), problems)
    _fault_checks(OmegaConf.to_container(merged), problems)
    if problems:
        raise ConfigError(problems)
    OmegaConf.set_readonly(merged, True)
    return merged


def to_yaml(cfg: DictConfig) -> str:
    """The resolved configuration as YAML (for TensorBoard text and ``config.yaml`` in the run folder)."""
    return OmegaConf.to_yaml(cfg)
