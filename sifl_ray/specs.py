"""What a party's actor is told of the configuration: frozen, typed values the driver builds once.

Why not the configuration, or a dict of it: an actor's constructor is a trust boundary and a process
boundary (STYLE 4). Each party receives what its role needs and nothing more, as a value that cannot change
on the way and cannot be misread: ``coding.kappa`` is a ``float | None`` field, where ``coding["kappa"]``
and ``coding.get("kappa")`` were two spellings of one question, and a misspelt key was a ``KeyError``
inside a worker. The values come from the validated configuration (:func:`sifl_ray.config.load_config`), so
they hold no unchecked input. No torch here: the driver builds them before any party process exists.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sifl_ray.errors import SiflError


class UnknownCoding(SiflError, ValueError):
    """A stored or configured coding name that is none of :class:`Coding`'s."""


class Coding(enum.Enum):
    """How an arm's vectors travel (docs/method.md "SIFL M1", "SIFL M2"): what each party encodes and decodes.

    Why a value and not a name: every party branches on what the coding *does* (does the server hold a
    plain model? does the aggregator add key 2?), and a property answers that once, here, where a string
    compared in each role restated the protocol wherever it was read. The value (``"plain"``, ``"m1"``,
    ``"m2"``) is what records store (key files, transcripts, ``summary.json``): :meth:`of` reads it back.
    """

    PLAIN = "plain"  # no code: the identity (fl, nbafl, dp_fedavg, secure aggregation)
    M1 = "m1"  # key 1: the server encodes, the clients decode and re-encode, the server decodes the average
    M2 = "m2"  # keys 1 and 2: the aggregator encodes the average again; the server never decodes it

    @classmethod
    def of(cls, name: str) -> Coding:
        """The coding a record or a configuration names (``"m1"``)."""
        try:
            return cls(name)
        except ValueError:
            raise UnknownCoding(
                f"unknown coding {name!r}; one of {', '.join(c.value for c in cls)}"
            ) from None

    @property
    def coded(self) -> bool:
        """The server encodes with key 1 (``P1``, ``N1``): the clients decode the broadcast and re-encode."""
        return self is not Coding.PLAIN

    @property
    def aggregator_encodes(self) -> bool:
        """The aggregator encodes the average with key 2 (``P2``, ``R2``): a broadcast in this coding
        carries code 2 (an ñ × p matrix ``W'`` that the clients strip with ``P2R``)."""
        return self is Coding.M2

    @property
    def first_broadcast(self) -> Coding:
        """The coding of an arm's first broadcast, the server's encoding of ``w^0``. M2's is M1: code 2
        comes with the first aggregate, so an M2 arm broadcasts in M1 until a round releases one (round 0,
        and every round after a skipped one). The driver keeps each broadcast's coding beside it
        (:attr:`sifl_ray.round.ArmState.broadcast_coding`) and tells it to whoever decodes the broadcast."""
        return Coding.M1 if self is Coding.M2 else self

    @property
    def server_holds_model(self) -> bool:
        """The server holds the plain global model each round (it decodes the average, or nothing is
        coded), so it can run an arm's server step on it; in M2 code 2 stays on and it never does."""
        return self is not Coding.M2

    @property
    def scheme(self) -> str:
        """The name the paper and the reports use (``M1``)."""
        return self.value.upper()


@dataclass(frozen=True)
class CodingSpec:
    """What the server and the aggregator need to make their keys and their noise (``coding.*``).

    ``noise_distribution``, ``sigma1`` and ``sigma2`` are ``coding.noise.*``: the law of every party's
    coding noise, the server's scale (``r1``, ``R1``) and the aggregator's (``R2``). ``key_seed`` ``None``
    means secure random keys (see :func:`sifl_ray.party_seeds.party_seed`).
    """

    backend: str
    left_inverse: str
    n_extra: int
    alpha: float
    beta: float
    kappa: float | None
    block_size: int
    p: int
    gamma: float
    eta: float
    noise_distribution: str
    sigma1: float
    sigma2: float
    key_seed: int | None = None
    #: where the backend's class lives (``module:Class``): a party's process imports it from there, so a
    #: backend the user registered in the driver is found in every actor
    backend_path: str | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> CodingSpec:
        """From the validated configuration (its ``coding`` section)."""
        # deferred: omegaconf, which this module does not load otherwise
        from sifl_ray.config.names import SERVER_KEYS

        c = cfg.coding
        return cls(
            backend=str(c.backend),
            left_inverse=str(c.left_inverse),
            n_extra=int(c.n_extra),
            alpha=float(c.alpha),
            beta=float(c.beta),
            kappa=None if c.kappa is None else float(c.kappa),
            block_size=int(c.block_size),
            p=int(c.p),
            gamma=float(c.gamma),
            eta=float(c.eta),
            noise_distribution=str(c.noise.distribution),
            sigma1=float(c.noise.sigma1),
            sigma2=float(c.noise.sigma2),
            key_seed=None if c.key_seed is None else int(c.key_seed),
            backend_path=SERVER_KEYS.path(str(c.backend)),
        )


@dataclass(frozen=True)
class ModelSpec:
    """The network every party builds: ``train.model`` on the data set's sample shape and classes.

    Built by the driver once the data set is loaded (:func:`sifl_ray.runner.workload.load_workload`), since
    the shape and the classes are the data's. ``dtype`` is ``train.dtype`` (the model's; coding is float64).
    ``factory`` is a user's model factory (``train.model`` registered or an import path), resolved once by
    the driver and pickled to each party (by reference, or by value for a script's own function), so a
    worker builds it without importing the plug-in; ``None`` for a built-in model. ``args`` are the
    factory's keyword arguments: the model's own settings section when it declared one (its every key,
    typed and validated), else ``train.model_args``.
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    dtype: str = "float32"
    args: dict[str, Any] = field(default_factory=dict)
    factory: Callable[..., Any] | None = None

    def __post_init__(self) -> None:  # a shape given as a list (numpy's, JSON's) is kept as a tuple
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))


@dataclass(frozen=True)
class TrainSpec:
    """A client worker's local training (``train.*``): the base optimizer and how long it runs per round.

    ``local_steps`` > 0 replaces ``local_epochs``; ``skip_training`` makes no-op clients (benchmarks of the
    framework's overhead); ``vectorise`` is ``train.vectorise`` (:mod:`sifl_ray.optim.vectorised`).
    """

    optimizer: str
    lr: float
    batch_size: int
    local_epochs: int = 1
    local_steps: int = 0
    skip_training: bool = False
    vectorise: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> TrainSpec:
        """From the validated configuration (its ``train`` section)."""
        t = cfg.train
        return cls(
            optimizer=str(t.optimizer),
            lr=float(t.lr),
            batch_size=int(t.batch_size),
            local_epochs=int(t.local_epochs),
            local_steps=int(t.local_steps),
            skip_training=bool(t.skip_training),
            vectorise=bool(t.vectorise),
        )
