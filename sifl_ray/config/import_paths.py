"""``package.module:attr`` references to a user's own model factory or data loader.

Why a module of its own: the configuration checks a reference's *form* before torch is imported (a typo in
``train.model=mypkg.nets:make`` answers at once), and the run resolves it when it starts (a missing module
or attribute is an error that names the key, not a traceback from inside a worker). Both halves live here,
import nothing at module level, and are shared by the model and the data set registries.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from sifl_ray.errors import SiflError

__all__ = ["ImportPathError", "import_object", "is_import_path"]

_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ImportPathError(SiflError, ImportError):
    """A ``module:attr`` reference from the configuration could not be imported; the message names the key,
    what failed and the fix."""


def is_import_path(value: object) -> bool:
    """Whether ``value`` has the form ``package.module:attr`` (dotted names on both sides of one colon)."""
    return isinstance(value, str) and _PATH.match(value) is not None


def import_object(path: str, *, key: str) -> Any:
    """The object ``path`` (``package.module:attr``, the attribute possibly dotted) names.

    Args:
        path: the reference, as the configuration spells it.
        key: the configuration key it came from (``train.model``, ``data.name``), for the message.

    Raises:
        ImportPathError: the form is wrong, the module does not import, or it has no such attribute.
    """
    if not is_import_path(path):
        raise ImportPathError(
            f"{key}: expected an import path package.module:attr, got {path!r}; write the module's dotted "
            "name, a colon and the name of the function in it"
        )
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:
        raise ImportPathError(
            f"{key}: cannot import module {module_name!r} of {path!r} ({type(err).__name__}: {err}); put its "
            "folder on PYTHONPATH (on Ray, every node's) or install it"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportPathError(
                f"{key}: module {module_name!r} has no attribute {attr!r} (from {path!r}); check the name "
                "after the colon"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportPathError(
            f"{key}: {path!r} names a {type(obj).__name__}, not a function or class to call"
        )
    return obj
