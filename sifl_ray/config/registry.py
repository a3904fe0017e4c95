"""One registry helper for every registry: arms, attacks, partitioners, data sets, models, coding backends,
optimizers.

Why one helper: each registry answers the same questions (which names exist, what a name stands for, where
it lives so that another process can import it, which configuration section it declares, what a typo
should have been) and a built-in entry registers exactly as a user's does. Opacus' accountant registry is
the model: a mapping and a ``register``.

A :class:`Registry` is a read-only mapping ``name → entry`` in registration order, so ``name in ARMS``,
``ARMS[name]`` and ``list(ARMS)`` read as for a dict. An entry may be *declared* by its import path
(``"sifl_ray.models:mlp"``) and imported the first time it is read: its name is then known to the
configuration without importing its module (a model, an optimizer or a coding backend needs torch, which
validation never loads), and the path is the only place the name is spelled. An entry that declares
settings makes the section named after it a key of the configuration (:mod:`sifl_ray.config.sections`).
This module imports nothing of the platform beyond the configuration's own sections.
"""

from __future__ import annotations

import contextlib
import importlib
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from sifl_ray.config.sections import register_component_section, unregister_component_section
from sifl_ray.config.validation import Choice, did_you_mean
from sifl_ray.errors import SiflError

T = TypeVar("T")
E = TypeVar("E")

#: Every registry alive, by kind (the first made of a kind): what a test that enumerates registries walks.
#: Weak: a registry a test makes for itself goes with the test.
REGISTRIES: weakref.WeakValueDictionary[str, Registry[Any]] = weakref.WeakValueDictionary()


class RegistryError(SiflError, ValueError):
    """An entry that cannot be registered as given (a name taken or malformed, a path that does not
    import); the message names the registry, the entry and the fix."""


def import_path_of(obj: object) -> str | None:
    """Where ``obj`` lives as ``module:qualname`` (``None`` for an object without a module-level name)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _load(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


class Registry(Mapping[str, T], Generic[T]):
    """The entries one configuration key chooses from, by name, in registration order.

    Args:
        kind: what an entry is, in messages and as the owner of its section (``"partitioner"``).
        key: the configuration key that names an entry (``"data.partition"``): an unknown name's message
            starts with it.
        declared: ``name → "module:attr"``: entries known by name now, imported when first read.
    """

    def __init__(self, kind: str, *, key: str = "", declared: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.key = key
        self._entries: dict[str, T | None] = {}  # None: declared, not imported yet
        self._paths: dict[str, str] = {}
        self._settings: dict[str, type] = {}
        self._declared: set[str] = set()
        for name, path in (declared or {}).items():
            self.declare(name, path)
        REGISTRIES.setdefault(kind, self)

    # -- reading ----------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise KeyError(self.unknown(name))
        entry = self._entries[name]
        if entry is None:
            entry = _load(self._paths[name])
            self._entries[name] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:  # never imports a declared entry
        return name in self._entries

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order, without importing any entry."""
        return tuple(self._entries)

    def path(self, name: str) -> str | None:
        """Where the entry ``name`` lives (``module:attr``), so that another process can import it."""
        return self._paths.get(name)

    def settings(self, name: str) -> type | None:
        """The settings dataclass the entry ``name`` declared (its section), or ``None``."""
        return self._settings.get(name)

    def unknown(self, name: object) -> str:
        """The message for a name that is not registered: the registered ones, and the likely one."""
        close = did_you_mean(str(name), self.names())
        tip = f"did you mean {close}? " if close else ""
        where = f"{self.key}: " if self.key else ""
        return f"{where}unknown {self.kind} {name!r}; {tip}registered: {', '.join(self.names())}"

    def choice(self, **options: Any) -> Choice:
        """A schema field's rule: one of this registry's names, read when a value is checked (an entry
        registered at run time is a valid choice at once)."""
        return Choice(self.names, **options)

    # -- writing ----------------------------------------------------------------------------------------

    def declare(self, name: str, path: str) -> None:
        """Make ``name`` an entry imported from ``path`` (``module:attr``) the first time it is read."""
        self._check_name(name)
        if name in self._entries and self._paths.get(name) != path:
            raise RegistryError(f"{self.kind} {name!r} is already {self._paths.get(name) or 'registered'}")
        self._entries.setdefault(name, None)
        self._paths[name] = path
        self._declared.add(name)

    def declared(self, name: str) -> bool:
        """Whether ``name`` was declared by import path (a built-in entry of a registry behind torch) rather
        than registered as an object."""
        return name in self._declared

    def register(
        self,
        name: str,
        entry: T,
        *,
        settings: type | None = None,
        takes: Callable[..., Any] | None = None,
        replace: bool = False,
    ) -> T:
        """Make ``entry`` the registry's ``name``; return it.

        Args:
            settings: a dataclass of the entry's own settings: the configuration section ``name``, whose
                values ``takes`` (default: the entry itself) receives as keyword arguments.
            replace: take the place of an entry of that name (else that is an error).

        Raises:
            RegistryError: ``name`` is not a name, or is taken (by another object than the one declared
                under it) and ``replace`` is false.
            SectionError: ``settings`` cannot be the section (see
                :func:`~sifl_ray.config.sections.register_component_section`).
        """
        self._check_name(name)
        where = import_path_of(entry)
        if name in self._entries and not replace:
            current = self._entries[name]
            same = current is entry or (current is None and self._paths.get(name) == where)
            if not same:
                taken = self._paths.get(name) or repr(self._entries[name])
                raise RegistryError(
                    f"{self.kind} {name!r} is already registered ({taken}); choose another name"
                )
        if settings is not None:
            register_component_section(self.kind, name, settings, takes or entry)  # type: ignore[arg-type]
            self._settings[name] = settings
        elif replace and name in self._settings:
            unregister_component_section(self.kind, name)
            del self._settings[name]
        declared = name in self._declared and self._paths.get(name) == where
        if not declared:
            self._declared.discard(name)
        self._entries[name] = entry
        if where is not None:
            self._paths[name] = where
        else:
            self._paths.pop(name, None)
        return entry

    def add(self, name: str, *, settings: type | None = None, replace: bool = False) -> Callable[[E], E]:
        """Decorator form of :meth:`register` for a function or class entry: returns it unchanged."""

        def register(entry: E) -> E:
            self.register(name, entry, settings=settings, replace=replace)  # type: ignore[arg-type]
            return entry

        return register

    def unregister(self, name: str) -> None:
        """Remove ``name`` and its section (tests that register entries of their own)."""
        self._entries.pop(name, None)
        self._paths.pop(name, None)
        self._declared.discard(name)
        if self._settings.pop(name, None) is not None:
            unregister_component_section(self.kind, name)

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """The registry's entries as they are now, back after the block, whatever it registered or removed
        (tests; the sections are :data:`~sifl_ray.config.sections.SECTIONS`' to restore)."""
        saved = (dict(self._entries), dict(self._paths), dict(self._settings), set(self._declared))
        try:
            yield
        finally:
            self._entries, self._paths, self._settings, self._declared = (
                dict(saved[0]),
                dict(saved[1]),
                dict(saved[2]),
                set(saved[3]),
            )

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise RegistryError(
                f"a {self.kind}'s name must be a name like 'my_{self.kind.split()[-1]}', got {name!r}"
            )

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
