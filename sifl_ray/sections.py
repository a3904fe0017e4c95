"""The configuration sections that components declare: an arm's, a partitioner's, a model's, a data set's.

Why a registry of sections: a component owns its settings (STYLE habit 13). ``topk.fraction`` belongs to the
arm ``topk`` as ``nbafl.epsilons`` belongs to ``nbafl``: the arm declares the section, a dataclass whose
fields are its keys, types and defaults and whose fields' ``rule`` (:func:`sifl_ray.validation.setting`) is
its range or choice, when it registers, and the one validator (:func:`sifl_ray.config.load_config`) checks it
like every built-in section: an unknown key with a suggestion, a wrong type, a value out of range, all at
once, exit code 2 from the command line. A plug-in's section is then a key of the command line and of a
scenario's YAML, and nothing in the platform restates its defaults.

An arm declares its sections in :attr:`sifl_ray.arms.Arm.settings` (:func:`sifl_ray.arms.register_arm`
registers them here); any other component calls :func:`register_section`. Several owners may declare one
section with the same dataclass (``dp_fedavg`` and ``dp_fedavg_secagg`` share ``dp_fedavg``); it exists
while one of them is registered. This module imports nothing of the platform: a registry imports it, and the
configuration reads it before torch is loaded.
"""

from __future__ import annotations

import dataclasses

from sifl_ray.errors import SiflError


class SectionError(SiflError, ValueError):
    """A section declared under a name that is not a key, or taken by another dataclass."""


@dataclasses.dataclass
class _Section:
    schema: type
    owners: list[str]


#: Section name → its dataclass and the components that declared it, in registration order.
SECTIONS: dict[str, _Section] = {}


def register_section(name: str, schema: type, *, owner: str) -> None:
    """Make ``schema`` (a dataclass) the configuration section ``name``, declared by ``owner`` (``arm topk``).

    Raises:
        SectionError: ``name`` is no identifier, ``schema`` no dataclass, or the section is another
            dataclass's already (the message names its owners).
    """
    if not name.isidentifier():
        raise SectionError(f"{owner}: a section's name must be a key like 'topk', got {name!r}")
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise SectionError(f"{owner}: section {name!r} must be a dataclass (its fields are the keys)")
    section = SECTIONS.get(name)
    if section is None:
        SECTIONS[name] = _Section(schema, [owner])
    elif section.schema is not schema:
        raise SectionError(
            f"{owner}: section {name!r} is already {section.schema.__qualname__} of "
            f"{', '.join(section.owners)}; choose another name or declare the same dataclass"
        )
    elif owner not in section.owners:
        section.owners.append(owner)


def unregister_section(name: str, *, owner: str) -> None:
    """``owner`` no longer declares ``name``; the section goes with its last owner."""
    section = SECTIONS.get(name)
    if section is not None and owner in section.owners:
        section.owners.remove(owner)
        if not section.owners:
            del SECTIONS[name]


def sections() -> dict[str, type]:
    """Every declared section's name → its dataclass, in registration order."""
    return {name: section.schema for name, section in SECTIONS.items()}


def owners(name: str) -> list[str]:
    """Who declared section ``name`` (for messages)."""
    section = SECTIONS.get(name)
    return [] if section is None else list(section.owners)
