"""Every error class the platform defines derives from :class:`sifl_ray.errors.SiflError` and keeps its
built-in base, so ``except SiflError`` catches what the platform refuses and old ``except ValueError``
clauses still hold. The classes are found in the source (any class whose bases name an exception), not
listed here, so a new error that forgets the base fails this test."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

from sifl_ray.errors import SiflError

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_EXCEPTIONS = {
    n
    for n in dir(builtins)
    if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
}
#: not errors: a user's request to stop must pass through ``except Exception`` (it is a KeyboardInterrupt)
NOT_ERRORS = {"Interrupted"}


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every class defined with an exception among its bases' names."""
    found: list[tuple[str, str]] = []
    for package in ("sifl_ray", "actors", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or node.name in NOT_ERRORS:
                    continue
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if any(n.endswith("Warning") for n in names):
                    continue  # a warning is not an error (PrecisionWarning): it is filtered, never caught
                if names & BUILTIN_EXCEPTIONS or any(n.endswith(("Error", "Lost")) for n in names):
                    found.append((module, node.name))
    return found


def test_the_source_defines_errors_to_check():
    assert len(_error_classes()) >= 10  # the finder finds them (ConfigError, PartyLost, DatasetError, ...)


@pytest.mark.parametrize(("module", "name"), _error_classes())
def test_every_platform_error_derives_from_sifl_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, SiflError), f"{module}.{name}: derive it from sifl_ray.errors.SiflError"
    builtin_bases = [b for b in cls.__mro__[1:] if b.__module__ == "builtins" and b is not object]
    assert any(b is not Exception and b is not BaseException for b in builtin_bases) or name == "SiflError"
