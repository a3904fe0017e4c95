"""The configuration sections that components declare: an arm's, a partitioner's, a model's, a data set's.

Why a registry of sections: a component owns its settings. ``topk.fraction`` belongs to the arm ``topk`` as
``nbafl.epsilons`` belongs to ``nbafl``: the arm declares the section, a dataclass whose fields are its keys,
types and defaults and whose fields' ``rule`` (:func:`sifl_ray.config.setting`) is its range or choice, when
it registers, and the one validator (:func:`sifl_ray.config.load_config`) checks it like every section of the
platform's own: an unknown key with a suggestion, a wrong type, a value out of range, all at once, exit code 2
from the command line. A plug-in's section is then a key of the command line and of a scenario's YAML, and
nothing in the platform restates its defaults.

An arm declares its sections in :attr:`sifl_ray.arms.Arm.settings` (:func:`sifl_ray.arms.register_arm`
registers them here). A model, a data set or a partitioner declares one section, named after itself, when it
registers (``register_model("my_cnn", settings=MyCnnSettings)``, likewise ``register_dataset`` and
``register_partitioner``; the built-in ones too: ``dirichlet.alpha``, ``shards.per_client``,
``synthetic.n_train``; :meth:`sifl_ray.config.registry.Registry.register`): ``my_cnn.width=64`` is then a key,
and the run hands the section's typed values to the factory, loader or partitioner as keyword arguments. Why a
top-level section named after the component rather than one nested under ``train`` or ``data``: it is the
arms' form (``topk.fraction``), the one the schema already merges and ``sifl config`` already lists; it is one
static dataclass whichever model the scenario picks (a scenario may set ``my_cnn.width`` and pick the model by
an override); and an unknown key reads ``my_cnn.widht: unknown key; did you mean my_cnn.width?``.

Several owners may declare one section with the same dataclass (``dp_fedavg`` and ``dp_fedavg_secagg``
share ``dp_fedavg``); it exists while one of them is registered. This module imports nothing of the
platform: a registry imports it, and the configuration reads it before torch is loaded.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

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


def component_owner(kind: str, name: str) -> str:
    """How a model's, data set's or partitioner's section names its owner (``"model my_cnn"``)."""
    return f"{kind} {name}"


def register_component_section(kind: str, name: str, schema: type, function: Callable[..., Any]) -> None:
    """Make ``schema`` the section ``name`` of the component ``kind`` ``name`` (``"model"``, ``"my_cnn"``),
    whose ``function`` (factory, loader, partitioner) receives the section's values as keyword arguments.

    Why the signature is checked here: a field the function cannot take would otherwise surface as a
    ``TypeError`` in the middle of a run; at registration it is the plug-in author's error, at import time.

    Raises:
        SectionError: ``schema`` is no dataclass, a field has no default (a section must be complete
            without the user's keys), ``function`` takes no keyword of a field's name, or the section is
            another component's.
    """
    owner = component_owner(kind, name)
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        required = [
            f.name
            for f in dataclasses.fields(schema)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if required:
            raise SectionError(
                f"{owner}: the settings {schema.__qualname__} need a default for {', '.join(required)}; "
                "a section holds the values a run uses when the scenario sets none"
            )
        missing = _untaken_keywords(function, [f.name for f in dataclasses.fields(schema)])
        if missing:
            raise SectionError(
                f"{owner}: {getattr(function, '__qualname__', function)!r} takes no keyword argument "
                f"{', '.join(missing)}, which its settings {schema.__qualname__} declare; add them to its "
                "signature (it receives the section's values as keyword arguments)"
            )
    register_section(name, schema, owner=owner)


def unregister_component_section(kind: str, name: str) -> None:
    """The component ``kind`` ``name`` no longer declares its section (see :func:`unregister_section`)."""
    unregister_section(name, owner=component_owner(kind, name))


def component_section(kind: str, name: str) -> type | None:
    """The dataclass the component ``kind`` ``name`` declared as its section ``name``; ``None`` when it
    declared none (or is not registered in this process)."""
    section = SECTIONS.get(name)
    if section is not None and component_owner(kind, name) in section.owners:
        return section.schema
    return None


def section_defaults(schema: type) -> dict[str, Any]:
    """A section's values when the scenario sets none, read from its dataclass (never restated), in the
    form a validated configuration gives them (a nested dataclass as a dict)."""
    return dataclasses.asdict(schema())


def _untaken_keywords(function: Callable[..., Any], names: list[str]) -> list[str]:
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself will tell
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [n for n in names if n not in takes]
