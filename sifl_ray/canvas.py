"""Where and when the run's figures are rendered: matplotlib's figure on its own Agg canvas, never pyplot,
and a run's figures drawn in a background thread while the next run plays.

Why apart from :mod:`sifl_ray.plots` (what each figure shows): this is the process's side of drawing (the
import of matplotlib off the path to round 0, one figure rendered at a time, a thread that outlives the run
that started it), which no figure needs to know.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: One figure rendered at a time in this process: a run's figures drawn in the background
#: (:class:`Drawing`) and one a caller saves meanwhile (:func:`sifl_ray.plots.save_figure`) share
#: matplotlib's caches.
RENDERING = threading.RLock()


def prefetch() -> None:
    """Import matplotlib's figure and its PNG writer in a background thread, once per process.

    Why: the plots are drawn at the run's end, and matplotlib's import (about 0.3 s of CPU) on the path to
    round 0 competes with the parties' processes starting on the same cores. A run calls this when its
    rounds begin: the driver mostly waits on the parties then (``python -m bench startup``), and a plot
    drawn before the import has finished waits for it (Python's import lock).
    """
    global _PREFETCHED
    Drawing.rounds_begun.set()
    if not _PREFETCHED:
        _PREFETCHED = True
        threading.Thread(target=_figure_class, name="sifl-matplotlib", daemon=True).start()


_PREFETCHED = False


def _figure_class() -> Any:
    """matplotlib's :class:`~matplotlib.figure.Figure` (and, imported with it, the Agg canvas that draws it).

    Why not pyplot: pyplot keeps every open figure in one process-wide registry and switches the process's
    backend, which is a notebook user's, not ours; a bare ``Figure`` on its own Agg canvas is nobody else's,
    so one can be drawn in a background thread (:class:`Drawing`) while the user plots in the main one.
    """
    from matplotlib.backends import backend_agg  # noqa: F401  (the canvas of subplots, imported once here)
    from matplotlib.figure import Figure

    return Figure


def subplots(figsize: tuple[float, float], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """A new figure on its own Agg canvas (``fig.canvas.draw()`` renders it, as under pyplot's Agg) and its
    axes (``Figure.subplots``' arguments): pyplot's ``subplots`` without pyplot."""
    fig = _figure_class()(figsize=figsize)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    return fig, fig.subplots(*args, **kwargs)


def save(fig: Any, path: Path) -> Path:
    """Save with what lies outside the axes (legend, caption) kept in the picture."""
    with RENDERING:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


class Drawing:
    """A run's figures, drawn now or in a background thread; :meth:`wait` gives their paths.

    Why in the background: a session's run (:func:`sifl_ray.simulate`) spends about 0.4 s of its 0.6 s
    outside the rounds drawing two PNGs, which a sweep of ten runs pays ten times while the parties wait;
    drawn in a thread, they are written while the next run's rounds play, or half a second after the run
    where none follows (``python -m bench startup``: the sweep).

    One run's figures are drawn at a time, and one figure rendered (``RENDERING``: matplotlib's caches are
    shared). The thread is not a daemon, so the interpreter's exit waits for the figures; a failure is said
    on stderr at once and raised by :meth:`wait`. Drawn now (``background=False``: ``sifl run``, whose end
    overlaps Ray's stop instead), a failure is raised here.

    Args:
        job: draws the figures, returns the paths written.
        background: draw in a thread; ``label``: the run, for the failure's line.
    """

    _one_at_a_time = RENDERING
    _latest: Drawing | None = None  # the last one started in the background
    #: Set when a run's rounds begin (:func:`prefetch`). A drawing in the background waits for it, at most
    #: :attr:`DELAY_S`: the next run's set-up (its configuration, its parties started again) is the
    #: driver's own work, the rounds are the parties' while the driver waits on them.
    rounds_begun = threading.Event()
    DELAY_S = 0.5

    def __init__(self, job: Callable[[], list[Path]], *, background: bool, label: str = "the run"):
        self._paths: list[Path] = []
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if not background:
            self._paths = self._draw(job)
            return
        Drawing.settle()  # one drawing in flight: the last run's finished long ago, while this one played
        Drawing.rounds_begun.clear()
        self._thread = threading.Thread(target=self._in_background, args=(job, label), name="sifl-plots")
        Drawing._latest = self
        self._thread.start()

    @classmethod
    def settle(cls) -> None:
        """Wait for the figures being drawn in the background, if any (a session's close: its caller may
        remove the run folders next)."""
        latest = cls._latest
        if latest is not None and latest._thread is not None:
            cls.rounds_begun.set()  # no reason to wait any more
            latest._thread.join()

    def _draw(self, job: Callable[[], list[Path]]) -> list[Path]:
        with self._one_at_a_time:
            return job()

    def _in_background(self, job: Callable[[], list[Path]], label: str) -> None:
        Drawing.rounds_begun.wait(Drawing.DELAY_S)
        try:
            self._paths = self._draw(job)
        except BaseException as err:  # raised again by wait(); said now, so that no one waits to hear it
            self._error = err
            print(
                f"[sifl] the figures of {label} were not drawn: {type(err).__name__}: {err}",
                file=sys.stderr,
                flush=True,
            )

    @property
    def done(self) -> bool:
        """Whether the figures are written (or failed)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> list[Path]:
        """The figures' paths, once written.

        Raises:
            Exception: what drawing them raised.
        """
        if self._thread is not None:
            Drawing.rounds_begun.set()
            self._thread.join()
        if self._error is not None:
            raise self._error
        return list(self._paths)
