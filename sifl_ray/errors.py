"""The one base of the platform's own errors.

Why one base: a caller (the CLI, a notebook, a sweep script) can catch what the platform refuses or fails at,
``except SiflError``, apart from a bug (a ``TypeError`` in a user's model) that must surface as itself. Each
error also keeps the built-in class it always had (``ConfigError`` is a ``ValueError``, ``PartyLost`` a
``RuntimeError``, ...), so existing ``except`` clauses still hold. The one exception is
:class:`~sifl_ray.runner.simulation.Interrupted`, a ``KeyboardInterrupt``: it is a user's request to stop,
not an error, and must pass through ``except Exception``.
"""

from __future__ import annotations


class SiflError(Exception):
    """Something the platform refused or could not do; the message says what and, where it can, the fix."""
