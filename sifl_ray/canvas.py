"""Where and when the run's figures are rendered: matplotlib's figure on its own Agg canvas, never pyplot,
and a run's figures drawn in a background thread while the next run plays.

Why apart from :mod:`sifl_ray.plots` (what each figure shows): this is the process's side of drawing (the
import of matplotlib off the path to round 0, one figure rendered at a time, a thread that outlives the run
that started it), which no figure needs to know.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: One figure rendered at a time in this process: a run's figures drawn in the background
#: (:class:`Drawing`) and one a caller saves meanwhile (:func:`sifl_ray.plots.save_figure`) share
#: matplotlib's font and text caches. Re-entrant: a drawing holds it for all its figures, and each
#: figure's :func:`save` takes it again.
RENDERING = threading.RLock()


def prefetch() -> None:
    """Import matplotlib's figure and its PNG writer in a background thread, once per process.

    Why: the plots are drawn at the run's end, and matplotlib's import on the path to round 0 competes with
    the parties' processes starting on the same cores (``python -m bench startup`` measures it). A run
    calls this when its rounds begin: the driver mostly waits on the parties then, and a plot drawn before
    the import has finished waits for it (Python's import lock).
    """
    global _PREFETCHED
    if not _PREFETCHED:
        _PREFETCHED = True
        threading.Thread(target=_figure_class, name="sifl-matplotlib", daemon=True).start()


_PREFETCHED = False


def rounds_begin() -> None:
    """A run's rounds begin: the figures of the run before, waiting in the background, are drawn now."""
    Drawing.rounds_begun.set()


def _figure_class() -> Any:
    """matplotlib's :class:`~matplotlib.figure.Figure` (and, imported with it, the Agg canvas that draws it).

    Why not pyplot: pyplot keeps every open figure in one process-wide registry and switches the process's
    backend, which is a notebook user's, not ours; a bare ``Figure`` on its own Agg canvas is nobody else's,
    so one can be drawn in a background thread (:class:`Drawing`) while the user plots in the main one.
    (matplotlib's ``rcParams`` stay process-wide: a figure takes the settings in force when it is drawn.)
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


def save(fig: Any, path: Path, *, bbox_inches: str | None = "tight") -> Path:
    """Save ``fig`` as ``path`` (its format by the suffix, PNG by default), whole or not at all: written
    beside it and renamed, so that a reader polling the run folder, or an interrupt while a figure is
    written in the background, never leaves half a file under its name. ``bbox_inches="tight"`` keeps
    what lies outside the axes (legend, caption) in the picture."""
    part = path.with_name(path.name + ".part")
    with RENDERING:
        fig.savefig(part, format=path.suffix[1:] or "png", dpi=120, bbox_inches=bbox_inches)
    os.replace(part, path)
    return path


class Drawing:
    """A run's figures, drawn now or in a background thread; :meth:`wait` gives their paths.

    Why in the background: drawing a run's PNGs is most of a session's run outside its rounds, which a
    sweep pays once per run while the parties wait (``python -m bench startup``: the sweep); drawn in a
    thread, they are written while the next run's rounds play (:func:`rounds_begin`), or
    :attr:`DELAY_S` after the run where none follows.

    One run's figures are drawn at a time, and one figure rendered (:data:`RENDERING`). The interpreter's
    exit waits for the figures (:meth:`settle`, at exit: without the delay); a failure is said on stderr at
    once and raised by :meth:`wait`. Drawn now (``background=False``: ``sifl run``, whose end overlaps
    Ray's stop instead), a failure is raised here. A drawing pickles (a result sent to another process) as
    its outcome, once written.

    Args:
        job: draws the figures, returns the paths written.
        background: draw in a thread; ``label``: the run, for the failure's line.
    """

    _latest: Drawing | None = None  # the last one started in the background
    _exit_waits = False  # settle() is registered to run at the interpreter's exit
    #: Set when a run's rounds begin (:func:`rounds_begin`). A drawing in the background waits for it, at
    #: most :attr:`DELAY_S`: the next run's set-up (its configuration, its parties started again) is the
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
        # A daemon joined at exit by settle(), which ends the wait: a non-daemon thread is joined before
        # any exit handler runs, so the exit would wait out the whole delay first.
        if not Drawing._exit_waits:
            Drawing._exit_waits = True
            atexit.register(Drawing.settle)
        thread = threading.Thread(
            target=self._in_background, args=(job, label), name="sifl-plots", daemon=True
        )
        thread.start()
        self._thread = thread
        Drawing._latest = self

    @classmethod
    def settle(cls) -> None:
        """Wait for the figures being drawn in the background, if any (a session's close and the
        interpreter's exit: the run folders may be removed next)."""
        if cls._latest is not None:
            cls._latest._finish()

    @staticmethod
    def _draw(job: Callable[[], list[Path]]) -> list[Path]:
        with RENDERING:
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

    def _finish(self) -> None:
        """Draw now if still waiting, and wait for the end (the drawing in flight is the latest: a new
        one settles the last before it starts)."""
        if self._thread is not None and self._thread.is_alive():
            Drawing.rounds_begun.set()
            self._thread.join()

    def wait(self) -> list[Path]:
        """The figures' paths, once written.

        Raises:
            Exception: what drawing them raised.
        """
        self._finish()
        if self._error is not None:
            raise self._error
        return list(self._paths)

    def __getstate__(self) -> dict[str, Any]:
        """Its outcome, once written (a thread does not pickle, nor does it travel)."""
        self._finish()
        return {"_paths": list(self._paths), "_error": self._error, "_thread": None}
