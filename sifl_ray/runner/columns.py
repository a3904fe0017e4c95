"""Tables that fit a terminal: a row longer than the window wraps and its columns fall apart, so a table is
fitted to the terminal's width (:data:`DEFAULT_WIDTH` when there is none: a pipe, a log), its notes wrapped
under it. Shared by the end-of-run table and the in-run audit's."""

from __future__ import annotations

import shutil
import textwrap

#: The width when the output is not a terminal (a pipe, a file, a notebook).
DEFAULT_WIDTH = 100


def terminal_width() -> int:
    """The width to fit: the terminal's (``COLUMNS`` first, as a shell sets it), or :data:`DEFAULT_WIDTH`."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def fit_table(
    header: list[str],
    rows: list[list[str]],
    width: int,
    *,
    optional: tuple[str, ...] = (),
    drop_empty: bool = True,
) -> tuple[str, list[str]]:
    """``rows`` under ``header`` in columns, fitted to ``width`` where it can be: columns with nothing but
    ``—`` are left out (``drop_empty``; the first column stays), then the gap between columns narrows from
    two spaces to one, then the ``optional`` columns go, in their order. Returns the text and the headers
    shown."""
    keep = [i for i in range(len(header)) if i == 0 or not drop_empty or any(r[i] != "—" for r in rows)]

    def render(cols: list[int], gap: str) -> list[str]:
        widths = {i: max(len(header[i]), *(len(r[i]) for r in rows)) for i in cols}
        lines = [[header[i].ljust(widths[i]) for i in cols], ["-" * widths[i] for i in cols]]
        lines += [[r[i].ljust(widths[i]) for i in cols] for r in rows]
        return [gap.join(line).rstrip() for line in lines]

    drop = [header.index(h) for h in optional if h in header]
    for gap, dropped in [("  ", 0), (" ", 0), *((" ", k + 1) for k in range(len(drop)))]:
        cols = [i for i in keep if i not in drop[:dropped]]
        out = render(cols, gap)
        if max(map(len, out)) <= width:
            break
    return "\n".join(out), [header[i] for i in cols]


def wrap_note(note: str, width: int) -> str:
    """A note wrapped to ``width``, its continuation lines indented under its first."""
    return textwrap.fill(note, width, subsequent_indent="  ", break_on_hyphens=False)
