"""Plug-ins: the modules that register arms, coding backends or partitioners, loaded before the command line
reads a configuration.

Why: an arm (or backend, or partitioner) registers itself when its module is imported. A Python script
imports it before :func:`sifl_ray.config.load_config`; ``sifl run`` and ``python run.py`` need to be told
which modules to import, or ``arms=[my_arm]`` would be refused as unknown. Two ways, the usual ones:

* ``SIFL_PLUGINS=mypkg.arms,mypkg.codes sifl run arms=[fl,my_arm]`` (comma-separated module names, for a
  module on ``PYTHONPATH``);
* an installed package that declares an entry point in the group ``sifl_ray.plugins``
  (``[project.entry-points."sifl_ray.plugins"] my = "mypkg.arms"``).

On Ray the workers import a step's module themselves when they unpickle it, and a server imports a coding
backend from the path the driver recorded, so a plug-in must be importable there too (installed, or on the
workers' ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from sifl_ray.errors import SiflError

ENV = "SIFL_PLUGINS"
GROUP = "sifl_ray.plugins"


class PluginError(SiflError, ImportError):
    """A plug-in module named by the user could not be imported."""


def load_plugins(names: str | None = None) -> list[str]:
    """Import every plug-in: the modules in ``names`` (default: ``$SIFL_PLUGINS``), then the entry points
    of :data:`GROUP`. Returns the modules imported, in order.

    Raises:
        PluginError: a module named in ``SIFL_PLUGINS`` (or an entry point) fails to import; the message
            names it, the error and the fix.
    """
    names = os.environ.get(ENV, "") if names is None else names
    loaded = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        try:
            importlib.import_module(name)
        except Exception as err:
            raise PluginError(
                f"{ENV}: cannot import plug-in {name!r} ({type(err).__name__}: {err}); put its folder on "
                f"PYTHONPATH or install it, or remove it from {ENV}"
            ) from None
        loaded.append(name)
    for ep in entry_points(group=GROUP):
        try:
            ep.load()
        except Exception as err:
            raise PluginError(
                f"entry point {ep.name!r} ({ep.value}) of group {GROUP}: cannot be loaded "
                f"({type(err).__name__}: {err}); reinstall or uninstall the package that declares it"
            ) from None
        loaded.append(ep.value)
    return loaded
