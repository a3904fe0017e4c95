"""A run's figures drawn behind it (``sifl_ray.canvas``): when the thread draws, that the interpreter's exit
waits for it without waiting out the delay, that a figure is renamed into place, that a result
with its drawing still pickles, and the helper processes that draw the figures side by side. The runs
themselves are in tests/test_session.py."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from functools import partial
from pathlib import Path

import pytest

from sifl_ray import canvas
from sifl_ray.canvas import Drawing

ROOT = Path(__file__).resolve().parents[1]

#: The figure helpers run only beside a second CPU (one core: the driver draws, ``canvas.Helpers``).
needs_helpers = pytest.mark.skipif(
    canvas.usable_cpus() < 2, reason="one CPU: figures are drawn in the driver, no helper runs"
)

#: Far beyond any wait below: a drawing that waits out this delay fails the test by its timeout instead.
LONG_DELAY_S = 120.0


@pytest.fixture
def long_delay(monkeypatch):
    monkeypatch.setattr(Drawing, "DELAY_S", LONG_DELAY_S)
    yield
    Drawing.settle()


def test_a_drawing_waits_for_the_next_rounds_and_starts_with_them(long_delay, tmp_path):
    """Behind a run, the figures wait while the next run sets up (the driver's own work) and are drawn as
    soon as its rounds begin, not after the delay."""
    drawn = threading.Event()

    def job() -> list[Path]:
        drawn.set()
        return [tmp_path / "a.png"]

    drawing = Drawing(job, background=True)
    assert not drawn.wait(0.3) and not drawing.done
    canvas.rounds_begin()
    assert drawn.wait(LONG_DELAY_S / 4)
    assert drawing.wait() == [tmp_path / "a.png"]


def test_a_result_with_its_drawing_pickles_and_copies_as_its_outcome(long_delay, tmp_path):
    """A result is sent to other processes and copied (a sweep through multiprocessing): its drawing
    travels as the paths written (waiting for them first), or as the error raised."""
    drawing = Drawing(lambda: [tmp_path / "a.png"], background=True)
    for copied in (pickle.loads(pickle.dumps(drawing)), copy.deepcopy(drawing)):
        assert copied.done and copied.wait() == [tmp_path / "a.png"]

    def broken() -> list[Path]:
        raise ValueError("no axes")

    failed = Drawing(broken, background=True)
    with pytest.raises(ValueError, match="no axes"):
        pickle.loads(pickle.dumps(failed)).wait()


def test_the_interpreters_exit_draws_the_last_figures_without_waiting_out_the_delay(tmp_path):
    """A script that ends right after its last run still gets that run's figures, and its exit does not
    wait out the delay first (a non-daemon thread would be joined before any exit handler could end the
    wait; a daemon nobody joins would be killed with its figures unwritten)."""
    out = tmp_path / "drawn.txt"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sifl_ray.canvas import Drawing
        Drawing.DELAY_S = {LONG_DELAY_S}
        def job():
            Path({str(out)!r}).write_text("drawn")
            return []
        Drawing(job, background=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=LONG_DELAY_S / 2)
    assert out.read_text() == "drawn"


def test_a_figure_is_renamed_into_place_and_its_suffix_decides_the_format(tmp_path):
    """A figure is written beside its name and renamed: nothing else is left in the folder, and the
    suffix decides the format."""
    fig, ax = canvas.subplots((2, 2))
    ax.plot([0, 1], [1, 0])
    png = canvas.save(fig, tmp_path / "f.png")
    pdf = canvas.save(fig, tmp_path / "f.pdf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]
    assert png.read_bytes().startswith(b"\x89PNG") and pdf.read_bytes().startswith(b"%PDF")


@needs_helpers
def test_the_helpers_draw_side_by_side_in_their_own_processes_with_the_drivers_settings(tmp_path):
    """A run's figures are dealt out to the helper processes, one each (the jobs run there, not here), and
    drawn with the matplotlib settings the driver has changed: a style set here shows in the figure; with
    none changed, a helper's PNG is the driver's byte for byte."""
    import matplotlib
    from PIL import Image

    from sifl_ray import plots

    assert canvas.HELPERS.start()
    pids = canvas.HELPERS.draw([os.getpid, os.getpid])
    assert len(set(pids)) == 2 and os.getpid() not in pids
    history = {"fl": [{"round": 0, "test_accuracy": 0.5}, {"round": 1, "test_accuracy": 0.6}]}
    styles = plots.arm_styles({"fl": ("Blues", "fl", None)})
    job = partial(plots.plot_accuracy, tmp_path, history, styles, "t")
    with matplotlib.rc_context({"figure.facecolor": "#ff0000", "savefig.facecolor": "#ff0000"}):
        (path,) = canvas.Figures(tmp_path, [job]).draw()
    with Image.open(path) as image:
        assert image.convert("RGB").getpixel((1, 1)) == (255, 0, 0)
    (path,) = canvas.Figures(tmp_path, [job]).draw()  # the setting was the driver's then, not the helper's
    with Image.open(path) as image:
        assert image.convert("RGB").getpixel((1, 1)) == (255, 255, 255)
    here = tmp_path / "here"  # drawn here, the same figure is the same file, byte for byte
    here.mkdir()
    (drawn_here,) = canvas.Figures(here, [partial(plots.plot_accuracy, here, history, styles, "t")])()
    assert drawn_here.read_bytes() == path.read_bytes()


@needs_helpers
def test_a_figures_error_is_raised_here_and_a_dead_helpers_figure_is_drawn_here():
    """What a figure raises in a helper is raised where the figures are waited for, and the helpers go on
    to the next run's; a figure whose helper is gone is drawn by the driver instead."""
    assert canvas.HELPERS.start()
    with pytest.raises(ValueError, match="invalid literal"):
        canvas.HELPERS.draw([partial(int, "x"), os.getpid])
    assert os.getpid() not in canvas.HELPERS.draw([os.getpid, os.getpid])
    for proc in list(canvas.HELPERS._procs):
        proc.kill()
        proc.wait()
    assert not canvas.HELPERS.running()
    assert canvas.HELPERS.draw([os.getpid]) == [os.getpid()]
    assert canvas.HELPERS.start() and os.getpid() not in canvas.HELPERS.draw([os.getpid])


@needs_helpers
def test_a_helper_that_dies_on_a_figure_is_said_and_its_figure_drawn_here(tmp_path, monkeypatch, capfd):
    """A helper that ends while it draws does not take the figure with it: the driver says so on stderr
    and draws the job itself, and the next run's start replaces the helper. The job ends any process but
    the driver's, so it is drawn here and only here."""
    (tmp_path / "dying_figure.py").write_text(
        "import os\n\ndef figure(driver):\n    if os.getpid() != driver:\n        os._exit(3)\n"
        "    return 'drawn here'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    )
    import dying_figure

    canvas.HELPERS.close()  # helpers that can import the job's module
    assert canvas.HELPERS.start()
    helper = canvas.HELPERS._procs[0]
    assert canvas.HELPERS.draw([partial(dying_figure.figure, os.getpid())]) == ["drawn here"]
    assert f"a figure helper (pid {helper.pid}) ended with code 3" in capfd.readouterr().err
    assert canvas.HELPERS.start()  # the next run's: the dead helper replaced, two draw side by side again
    pids = canvas.HELPERS.draw([os.getpid, os.getpid])
    assert len(set(pids)) == 2 and helper.pid not in pids and os.getpid() not in pids
