"""The arm registry: the names a scenario lists in ``arms`` mapped to their :class:`~sifl_ray.arms.base.Arm`.

A module of its own so that the built-in arms (:mod:`sifl_ray.arms.builtin`) and a user's plug-in register
through it without importing the package that imports them back. :data:`ARMS` is the platform's one
registry helper (:class:`~sifl_ray.config.registry.Registry`); an arm declares its sections itself
(:attr:`Arm.settings`, several where it needs them), registered here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sifl_ray.arms.base import UPLOADS, Arm
from sifl_ray.config.components import ARMS as _ARMS
from sifl_ray.config.components import arm_instances as arm_instances
from sifl_ray.config.components import arm_names as arm_names
from sifl_ray.config.registry import Registry
from sifl_ray.config.sections import SectionError, register_section, unregister_section
from sifl_ray.specs import Coding

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: The arms a scenario lists in ``arms``, by kind, in registration order (the built-in ones first).
ARMS: Registry[Arm] = _ARMS  # held by the configuration, which reads it without importing the arms


def register_arm(arm: Arm, *, replace: bool = False) -> Arm:
    """Make ``arm`` available under ``arm.kind`` (``replace``: take the place of an arm of that name), and
    its settings sections (:attr:`Arm.settings`) keys of the configuration.

    Raises:
        ValueError: the kind is empty or taken, the coding unknown, secure aggregation asked of a coded
            arm, an ``uploads`` other than ``model`` or ``update``, or the arm paired with itself.
        SectionError: a section of its settings is another component's (a ``ValueError`` too).
    """
    if not arm.kind or not arm.kind.isidentifier():
        raise ValueError(f"an arm's kind must be a name like 'fl_momentum', got {arm.kind!r}")
    if arm.kind in ARMS and not replace:
        raise ValueError(f"an arm {arm.kind!r} is already registered ({ARMS[arm.kind]!r}); pass replace=True")
    if not isinstance(arm.coding, Coding):
        raise ValueError(
            f"arm {arm.kind!r}: coding must be a sifl_ray.specs.Coding "
            f"({', '.join(f'Coding.{c.name}' for c in Coding)}), got {arm.coding!r}"
        )
    if arm.secure_aggregation and arm.coding.coded:
        raise ValueError(
            f"arm {arm.kind!r}: secure aggregation masks plain uploads; an immersion-coded "
            f"({arm.coding.scheme}) upload is not a fixed-point vector the ring can carry. "
            "Give it coding Coding.PLAIN"
        )
    if arm.uploads not in UPLOADS:
        raise ValueError(
            f"arm {arm.kind!r}: uploads says what a client uploads, one of {', '.join(UPLOADS)}; got "
            f"{arm.uploads!r}"
        )
    if arm.paired_with is not None and (not arm.paired_with.isidentifier() or arm.paired_with == arm.kind):
        raise ValueError(
            f"arm {arm.kind!r}: paired_with names the arm whose model this one's must equal (for example "
            f"'fl'), not {arm.paired_with!r}"
        )
    previous = ARMS.get(arm.kind)
    if previous is not None:
        _drop_sections(previous)
    try:
        for name, schema in arm.settings.items():
            register_section(name, schema, owner=_owner(arm))
    except SectionError:
        _drop_sections(arm)
        if previous is not None:  # the arm it was to replace keeps its place and its sections
            for name, schema in previous.settings.items():
                register_section(name, schema, owner=_owner(previous))
        raise
    ARMS.register(arm.kind, arm, replace=True)  # a taken kind was refused above unless replace
    return arm


def unregister_arm(kind: str) -> None:
    """Remove ``kind`` and the sections only it declared (tests that register arms of their own)."""
    if kind in ARMS:
        _drop_sections(ARMS[kind])
        ARMS.unregister(kind)


def _owner(arm: Arm) -> str:
    return f"arm {arm.kind}"


def _drop_sections(arm: Arm) -> None:
    for name in arm.settings:
        unregister_section(name, owner=_owner(arm))


def arm_kinds() -> tuple[str, ...]:
    """Every registered arm's name, in registration order (the built-in ones first)."""
    return ARMS.names()


def get_arm(kind: str) -> Arm:
    """The registered arm ``kind``; the error (a ``KeyError``) lists the registered ones, the fix for a
    typo."""
    return ARMS[kind]


def arm_of(cfg: DictConfig, name: str) -> Arm:
    """The arm object behind the concrete name ``name`` of ``cfg``."""
    kind = arm_instances(cfg).get(name)
    if kind is None:
        raise KeyError(f"no arm {name!r} in this configuration; it runs {', '.join(arm_names(cfg))}")
    return ARMS[kind]
