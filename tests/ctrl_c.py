"""For the tests that send Ctrl-C to a ``run.py`` they start (imported by name: ``tests/`` is on the path,
as for :mod:`training_roundoff`)."""

from __future__ import annotations

import signal


def default_ctrl_c() -> None:
    """In the child, before ``run.py`` starts (``Popen(preexec_fn=...)``): Ctrl-C's default action.

    Why: a suite started in the background by a shell without job control (``pytest &`` in a script) hands
    its children SIGINT ignored, and a Python that starts with SIGINT ignored never raises
    KeyboardInterrupt, so the run would not see the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
