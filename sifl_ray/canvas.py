"""Where and when the run's figures are rendered: matplotlib's figure on its own Agg canvas, never pyplot;
a run's figures drawn side by side in helper processes, and in a session in a background thread while the
next run plays.

Why apart from :mod:`sifl_ray.plots` (what each figure shows): this is the process's side of drawing (the
import of matplotlib off the path to round 0, one figure rendered at a time, the helpers, a thread that
outlives the run that started it), which no figure needs to know.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

#: One figure rendered at a time in this process: a run's figures drawn in the background
#: (:class:`Drawing`) and one a caller saves meanwhile (:func:`sifl_ray.plots.save_figure`) share
#: matplotlib's font and text caches. Re-entrant: a drawing holds it for all its figures, and each
#: figure's :func:`save` takes it again.
RENDERING = threading.RLock()


def prefetch(*, helpers: bool) -> None:
    """Make ready what draws the run's figures: the figure helpers (:class:`Helpers`), which import
    matplotlib's figure themselves, and here, once per process in a background thread, matplotlib's colour
    maps (the driver picks the arms' colours: plug-in arms are registered here, not in the helpers), or
    where no helper runs, matplotlib's figure and its PNG writer.

    Why: the plots are drawn at the run's end, and matplotlib's import on the path to round 0 competes with
    the parties' processes starting on the same cores (``python -m bench startup`` measures it). A run
    calls this when its rounds begin: the driver mostly waits on the parties then, and a plot drawn before
    the import has finished waits for it (Python's import lock).

    Args:
        helpers: start the helpers (a session's runs, whose figures are drawn behind them), replacing one
            that has died since the last run. A run that draws its figures before its process ends
            (``sifl run``) draws them here beside Ray's stop: helpers would add their start and their exit
            to figures that take 0.4 s (``python -m bench startup``: its end 0.2 s longer with them).
    """
    global _PREFETCHED
    started = helpers and HELPERS.start()
    if not _PREFETCHED:
        _PREFETCHED = True
        target = _colormaps if started else _figure_class
        threading.Thread(target=target, name="sifl-matplotlib", daemon=True).start()


_PREFETCHED = False


def rounds_begin() -> None:
    """A run's rounds begin: the figures of the run before, waiting in the background, are drawn now."""
    Drawing.rounds_begun.set()


def _colormaps() -> Any:
    """matplotlib's colour maps (:func:`sifl_ray.plots.arm_styles`), without its figure."""
    from matplotlib import colormaps

    return colormaps


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


class Figures:
    """A run's figures as separate jobs, each a module-level function with plain-data arguments (a
    :func:`functools.partial` of one of :mod:`sifl_ray.plots`' ``plot_*``), so that each pickles and the
    figures can be drawn side by side in the helpers (:meth:`draw`) or one after another here (a call).

    A folder removed before its figures are drawn (a caller's temporary folder, removed once the run
    returned) gives no figures and no error: nobody can look at them then.

    Args:
        folder: the run folder the figures are written to; jobs: one per figure, each returning the path it
            wrote, or ``None`` where the run has nothing to show in it.
    """

    def __init__(self, folder: Path, jobs: Sequence[Callable[[], Path | None]]):
        self.folder, self.jobs = Path(folder), list(jobs)

    def __call__(self) -> list[Path]:
        """Every figure, drawn here one after another."""
        with RENDERING:
            return self._written(lambda: [job() for job in self.jobs])

    def draw(self) -> list[Path]:
        """Every figure, side by side in the helpers where they run, else here."""
        return self._written(lambda: HELPERS.draw(self.jobs)) if HELPERS.running() else self()

    def _written(self, draw: Callable[[], list[Path | None]]) -> list[Path]:
        try:
            return [path for path in draw() if path is not None]
        except OSError:
            if self.folder.is_dir():
                raise
            return []


#: How a helper process starts: it serves figure jobs on its standard input (:func:`serve`).
_SERVE = "from sifl_ray.canvas import serve; serve()"


def serve() -> None:
    """A figure helper's loop: a pickled job in on standard input, with the driver's matplotlib settings
    (:func:`_settings`), ``("ok", path)`` or ``("error", exc)`` out, pickled, until its input ends (its
    driver has exited or closed it).

    Why a process of its own (not multiprocessing's): a spawned multiprocessing child imports the user's
    main module again, and a script without a ``__main__`` guard would run its simulation once more in
    every child; a plain interpreter that imports :mod:`sifl_ray.canvas` runs nothing of the user's.
    Whatever the drawing prints goes to standard error: standard output carries the answers.
    """
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle; its exit ends us
    source = sys.stdin.buffer
    _figure_class()
    import matplotlib

    while True:
        try:
            settings, job = pickle.load(source)
        except EOFError:
            return
        try:
            with matplotlib.rc_context(settings):
                outcome: tuple[str, Any] = ("ok", job())
        except Exception as err:  # the driver raises it again where it waits for the figures
            outcome = ("error", _portable(err))
        pickle.dump(outcome, channel, protocol=pickle.HIGHEST_PROTOCOL)
        channel.flush()


def _portable(err: Exception) -> Exception:
    """``err``, or where it does not pickle, a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")
    return err


class Helpers:
    """Processes that draw a run's figures side by side, started once per process and kept for its life.

    Why: a run's figures are matplotlib's Python, one core's work each (the quickstart's two take 0.4–0.9 s
    one after another on the 2-core reference machine, most of a session's second run outside its rounds:
    ``python -m bench startup``), and they are independent. Each helper is a plain interpreter (:func:`serve`)
    that imports matplotlib as it starts, while the first run's rounds play (:func:`prefetch`); it never
    sees a party's key or seed, only what a figure shows. A helper that dies or cannot start is replaced by
    drawing here: the figures never depend on it.

    Args:
        count: how many (``0``: none, figures are drawn in the driver); fewer where the machine has fewer
            CPUs, since a helper on a single core only queues behind the driver.
    """

    def __init__(self, count: int):
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()  # one run's figures through the helpers at a time

    def start(self) -> bool:
        """Start the helpers that do not run (all of them the first time, one that has died since);
        whether any runs."""
        cpus = usable_cpus()
        wanted = min(self.count, cpus) if cpus > 1 else 0
        with self._lock:
            self._procs = [proc for proc in self._procs if proc.poll() is None]
            if len(self._procs) < wanted:
                root = str(Path(__file__).resolve().parent.parent)  # this sifl_ray, whatever the cwd
                path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
                env = {**os.environ, "PYTHONPATH": path}
                # one that cannot start (a process limit) leaves its figures to the driver
                with contextlib.suppress(OSError):
                    for _ in range(wanted - len(self._procs)):
                        self._procs.append(_spawn(env))
                if self._procs and not _HELPERS_AT_EXIT:
                    _at_exit()
        return bool(self._procs)

    def running(self) -> bool:
        """Whether any helper is alive."""
        return any(proc.poll() is None for proc in self._procs)

    def draw(self, jobs: Sequence[Callable[[], Path | None]]) -> list[Path | None]:
        """``jobs`` dealt out to the helpers in turn, their paths in the jobs' order. A figure whose helper
        failed (not the figure: the process) is drawn here; a figure's own error is raised once every
        helper has answered, so that each is ready for the next run."""
        settings = _settings()
        with self._lock:
            procs = [proc for proc in self._procs if proc.poll() is None]
            dealt = [(job, procs[i % len(procs)] if procs else None) for i, job in enumerate(jobs)]
            sent = [proc is not None and _send(proc, (settings, job)) for job, proc in dealt]
            answers: list[tuple[str, Any]] = []
            for (job, proc), ok in zip(dealt, sent, strict=True):
                answer = _receive(proc) if ok and proc is not None else None
                answers.append(answer if answer is not None else ("here", job))
        paths: list[Path | None] = []
        error: Exception | None = None
        for kind, value in answers:
            if kind == "here":
                with RENDERING:
                    value = value()
            elif kind == "error":
                error = error or value
            paths.append(value if kind != "error" else None)
        if error is not None:
            raise error
        return paths

    def close(self) -> None:
        """End the helpers: their input closed, then a second to finish, then killed."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS says, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _spawn(env: dict[str, str]) -> subprocess.Popen[bytes]:
    # its own session: a Ctrl-C at the terminal is the driver's, whose exit closes the helper's input
    return subprocess.Popen(
        [sys.executable, "-c", _SERVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def _settings() -> dict[str, Any]:
    """The matplotlib settings (``rcParams``) the driver has changed from matplotlib's own, to draw a figure
    in a helper as it would be drawn here (a style, a font size): a figure takes the settings in force
    when it is drawn. Not the backend: the helpers draw on Agg whatever the driver shows on."""
    if "matplotlib" not in sys.modules:  # nothing imported it: nothing changed
        return {}
    import matplotlib

    rc, original = matplotlib.rcParams, matplotlib.rcParamsOrig
    # keys first: reading the backend's value would resolve it, importing pyplot (a notebook user's choice)
    keys = [key for key in rc if key not in ("backend", "backend_fallback", "interactive")]
    return {key: rc[key] for key in keys if rc[key] != original.get(key)}


def _send(proc: subprocess.Popen[bytes], message: tuple[dict[str, Any], Callable[[], Path | None]]) -> bool:
    stdin: IO[bytes] | None = proc.stdin
    try:
        assert stdin is not None
        pickle.dump(message, stdin, protocol=pickle.HIGHEST_PROTOCOL)
        stdin.flush()
    except (OSError, ValueError):  # the helper is gone (a broken pipe, a closed file)
        return False
    return True


def _receive(proc: subprocess.Popen[bytes]) -> tuple[str, Any] | None:
    """The helper's answer, or ``None`` where it died on the way (the figure is then drawn here)."""
    try:
        assert proc.stdout is not None
        kind, value = pickle.load(proc.stdout)
    except (EOFError, OSError, pickle.UnpicklingError, ValueError):
        proc.kill()
        code = proc.wait()
        print(
            f"[sifl] a figure helper (pid {proc.pid}) ended with code {code}: its figure is drawn here",
            file=sys.stderr,
            flush=True,
        )
        return None
    return kind, value


#: The process's figure helpers (:class:`Helpers`): two, the figures a run most often has.
HELPERS = Helpers(2)
_HELPERS_AT_EXIT = False


def _at_exit() -> None:
    global _HELPERS_AT_EXIT
    _HELPERS_AT_EXIT = True
    atexit.register(HELPERS.close)  # registered before any drawing's settle(): it runs after it


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
        if isinstance(job, Figures):
            return job.draw()
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
