"""Progress of the commands that work for more than a few seconds (describe, attack, frontier, the benches).

One object, two faces, chosen by where the progress goes (stderr unless told otherwise):

* a terminal gets a bar (tqdm) that redraws in place and is cleared when the work is done;
* anything else (a log file, a pipe, ``ray job logs``) gets one plain line per step,
  ``LABEL: k/N what (elapsed s)``, which reads in order and greps.

Why stderr: stdout carries what a command is for (a table, ``--json``, the RESULT line) and must stay
parseable whatever progress is shown. ``SIFL_PROGRESS=0`` (or ``off``, ``false``, ``no``) silences every
progress report of the process; ``enabled=False`` silences one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import IO, Any, TypeVar

T = TypeVar("T")

#: The environment variable that silences all progress (``0``, ``off``, ``false``, ``no``).
ENV = "SIFL_PROGRESS"
_OFF = ("0", "off", "false", "no")


def progress_enabled(enabled: bool | None = None) -> bool:
    """Whether progress is shown: ``enabled`` if given, else not silenced by :data:`ENV`."""
    if enabled is not None:
        return enabled
    return os.environ.get(ENV, "").strip().lower() not in _OFF


class Progress:
    """Progress over ``total`` steps (``None``: unknown), as a bar on a terminal, else one line per step.

    Use it as a context manager and call :meth:`step` once per step done::

        with Progress("describe", total=3) as progress:
            ...
            progress.step("key 1 (M1) and its row norms")

    Args:
        label: what is progressing, the start of every line (``describe``, ``attack``, ``bench overhead``).
        total: the number of steps, if known.
        enabled: ``False`` shows nothing; ``None`` (default) follows :data:`ENV`.
        stream: where to write (default ``sys.stderr``, read when the progress starts).
        min_interval: off a terminal, at most one line per this many seconds (and always the last step):
            for thousands of short steps (an audit's trials), whose every line would bury the log.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        enabled: bool | None = None,
        stream: IO[str] | None = None,
        min_interval: float = 0.0,
    ) -> None:
        self.label, self.total, self.min_interval = label, total, min_interval
        self.enabled = progress_enabled(enabled)
        self.stream = stream
        self.done = 0
        self._bar: Any = None
        self._start = self._said = time.perf_counter()

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Progress:
        self._start = self._said = time.perf_counter()
        if self.enabled:
            self.stream = self.stream if self.stream is not None else sys.stderr
            if _is_terminal(self.stream):
                from tqdm import tqdm

                self._bar = tqdm(
                    total=self.total, desc=self.label, file=self.stream, leave=False, **_unsized(self.stream)
                )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Clear the bar (a terminal); lines need no closing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    # -- reporting -------------------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        """Seconds since the progress started."""
        return time.perf_counter() - self._start

    def step(self, what: str = "") -> None:
        """One step done; ``what`` says which (the line's text, or the bar's suffix)."""
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(what, refresh=False)
            self._bar.update(1)
            return
        now = time.perf_counter()
        if now - self._said < self.min_interval and self.done != self.total:
            return
        self._said = now
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        text = f" {what}" if what else ""
        print(f"{self.label}: {count}{text} ({self.elapsed:.1f} s)", file=self.stream, flush=True)

    def note(self, message: str) -> None:
        """A message that is not a step (a warning, a finding), printed above the bar on a terminal."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)


def progress(
    items: Iterable[T],
    label: str,
    *,
    total: int | None = None,
    enabled: bool | None = None,
    name: Any = None,
    stream: IO[str] | None = None,
    min_interval: float = 0.0,
) -> Iterator[T]:
    """Yield ``items``, reporting one step after each, so that a loop shows its progress by wrapping its
    iterable: ``for t in progress(range(n), "bench overhead")``.

    Args:
        total: the number of items (default ``len(items)`` where it has one).
        name: a function of the item that says what was done (the step's text); default: nothing.
        min_interval: as :class:`Progress`'s.
    """
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(label, total, enabled=enabled, stream=stream, min_interval=min_interval) as bar:
        for item in items:
            yield item
            bar.step("" if name is None else str(name(item)))


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or a stream without isatty
        return False


def _unsized(stream: IO[str]) -> dict[str, int]:
    """tqdm's size for a terminal that reports none (0 × 0: a pseudo-terminal nobody sized, as some CI
    runners give), on which tqdm draws nothing; ``{}`` (tqdm asks the terminal) for any other."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return {}
    return {} if size.columns and size.lines else {"ncols": 80, "nrows": 24}
