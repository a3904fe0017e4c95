"""The attack registry: every attack on a key design's transcript, declared once with its figures.

Why a registry: without one, an attack is six to ten edits over three files (a figure here, its explanation
in a dictionary there, a console column picked by hand), and a figure whose explanation is forgotten drops
out of the report without a word. With it, an attack is one module that calls :func:`register_attack` with

* its figures (:class:`FigureSpec`): the threat model, what is attacked, what is measured, and the
  explanation the report prints: a figure without one is refused here, at registration;
* ``measure``: a function of the :class:`DesignView` (what the attacking party saw: the transcript; what
  the scorer holds: the plain models and the keys) returning one :class:`Measured` per figure.

The report (``report.md``, ``result.json``), the console table and TensorBoard list every figure of every
registered attack, in registration order; nothing else needs to know an attack exists. The built-in
attacks register in :mod:`sifl_ray.attacks.builtin`; a plug-in registers the same way (tests register
their own and unregister it). A module of its own, importing none of the attacks, so that they register
through it without importing the package that imports them back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sifl_ray.config.registry import Registry
from sifl_ray.errors import SiflError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from sifl_ray.attacks.adversaries import BlockLayout
    from sifl_ray.attacks.config import Design
    from sifl_ray.attacks.record import GroundTruth, SmallTask
    from sifl_ray.attacks.transcript import TranscriptRecorder

#: Threat models, as every figure labels itself. docs/method.md "Parties": the aggregator sees only the
#: encoded local models (the uploads); a figure that also uses the server's broadcasts says so.
AGGREGATOR = "aggregator (honest-but-curious)"
AGGREGATOR_BROADCASTS = (
    "aggregator + broadcasts (an eavesdropper on the server→client channel, or a colluding client)"
)
AGGREGATOR_KP = "aggregator + known plaintext"
AGGREGATOR_COLLUSION = "aggregator + one colluding client"

T = TypeVar("T")


class AttackRegistryError(SiflError, ValueError):
    """An attack that cannot be registered as declared (a duplicate name, a figure without explanation) or
    whose measurement does not match its declaration."""


@dataclass(frozen=True)
class FigureSpec:
    """What one figure is, declared once: its name (the key in ``result.json``, the TensorBoard tag
    ``attack/<design>/<name>``), its threat model, the attack and the measurement as the tables print them,
    the report's explanation of why the attack works, and its console column (at most 10 characters)."""

    name: str
    threat_model: str
    attack: str
    figure: str
    explanation: str
    column: str


@dataclass
class Figure:
    """One attack's figure on one design, as the report, ``result.json`` and TensorBoard show it: a headline
    value and the same figure per round where it has one."""

    threat_model: str
    attack: str
    figure: str
    value: float | int | None
    per_round: dict[int, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Measured:
    """One figure measured on one design: the headline value, the same figure per round where it has one,
    and a note with the design's own numbers (expected values, round-off floors)."""

    value: float | int | None
    per_round: dict[int, Any] = field(default_factory=dict)
    note: str = ""


@dataclass
class DesignView:
    """What an attack on one key design works from: the transcript the attacking party saw
    (``recorder``), the block layout of the key (public: which rows form a block), and, for scoring only,
    the plain models and keys (``truth``). :meth:`once` shares a pass over the transcript between attacks."""

    task: SmallTask
    cfg: DictConfig
    design: Design
    recorder: TranscriptRecorder
    truth: GroundTruth
    layout: BlockLayout
    _memo: dict[Callable[..., Any], Any] = field(default_factory=dict, repr=False)

    def once(self, compute: Callable[[DesignView], T]) -> T:
        """``compute(self)``, computed once per design: two attacks that need the same pass (the subspace
        the differences span, for instance) share it instead of repeating it."""
        if compute not in self._memo:
            self._memo[compute] = compute(self)
        return self._memo[compute]


@dataclass(frozen=True)
class Attack:
    """One attack on an m1 arm's transcript: its figures and how they are measured."""

    name: str
    figures: tuple[FigureSpec, ...]
    measure: Callable[[DesignView], dict[str, Measured]]


#: Every attack, by name, in registration order (the platform's registry helper).
ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(attack: Attack) -> Attack:
    """Make ``attack`` part of every run's report, console table and TensorBoard files.

    Raises:
        AttackRegistryError: every problem at once: the name is empty or taken, a figure's name is taken
            (by this attack or another), or a figure has no explanation, threat model or column.
    """
    problems = []
    if not attack.name.isidentifier():
        problems.append(f"an attack's name must be a name like 'telescoped', got {attack.name!r}")
    if attack.name in ATTACKS:
        problems.append(f"an attack {attack.name!r} is already registered; unregister it first")
    if not attack.figures:
        problems.append(f"attack {attack.name!r} declares no figure")
    taken = {spec.name: other.name for other in ATTACKS.values() for spec in other.figures}
    for spec in attack.figures:
        if not spec.name.isidentifier():
            problems.append(f"attack {attack.name!r}: a figure's name must be a name, got {spec.name!r}")
        if spec.name in taken:
            problems.append(f"attack {attack.name!r}: figure {spec.name!r} is already {taken[spec.name]!r}'s")
        taken[spec.name] = attack.name
        for what in ("explanation", "threat_model", "attack", "figure", "column"):
            if not getattr(spec, what).strip():
                problems.append(
                    f"attack {attack.name!r}: figure {spec.name!r} has no {what}; the report prints it "
                    "beside the value"
                )
        if len(spec.column) > 10:
            problems.append(
                f"attack {attack.name!r}: figure {spec.name!r}'s column {spec.column!r} is longer than 10 "
                "characters (the console table's width)"
            )
    if problems:
        raise AttackRegistryError("; ".join(problems))
    ATTACKS.register(attack.name, attack)
    return attack


def unregister_attack(name: str) -> None:
    """Remove ``name`` from the registry (tests that register attacks of their own)."""
    ATTACKS.unregister(name)


def figure_specs() -> dict[str, FigureSpec]:
    """Every registered figure by name, in registration order."""
    return {spec.name: spec for attack in ATTACKS.values() for spec in attack.figures}


def measure_all(view: DesignView) -> dict[str, Figure]:
    """Every registered attack on ``view``, its figures in registration order.

    Raises:
        AttackRegistryError: an attack measured other figures than it declared.
    """
    out: dict[str, Figure] = {}
    for attack in list(ATTACKS.values()):
        got = attack.measure(view)
        declared = [spec.name for spec in attack.figures]
        if sorted(got) != sorted(declared):
            raise AttackRegistryError(
                f"attack {attack.name!r} measured {sorted(got)}, but declared {sorted(declared)}"
            )
        for spec in attack.figures:
            m = got[spec.name]
            out[spec.name] = Figure(spec.threat_model, spec.attack, spec.figure, m.value, m.per_round, m.note)
    return out
