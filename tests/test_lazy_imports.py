"""What a party's process imports: only what its arms use.

``cryptography`` (secure aggregation's key agreement, streams and share encryption) costs ~13 MiB of PSS
in each process that imports it; a run without a secure arm has no use for it in its driver, aggregator
or client workers. Checked in a fresh interpreter, with a secure arm's import as the control.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sifl_ray.canvas import usable_cpus


def test_the_parties_import_cryptography_only_for_a_secure_arm():
    script = textwrap.dedent(
        """
        import sys
        import sifl_ray.parties.aggregator, sifl_ray.parties.evaluator, sifl_ray.parties.server  # noqa: F401
        import sifl_ray.parties.workers, sifl_ray.round  # noqa: F401
        import sifl_ray.arms, sifl_ray.runner  # noqa: F401
        print("cryptography" in sys.modules)
        from sifl_ray.parties.secure import WorkerSecAgg  # noqa: F401
        print("cryptography" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_a_run_that_audits_nothing_imports_no_scipy():
    """SciPy (the audit's bounds and estimate: ~0.5 s of a driver's start) is imported by the first audit
    figure, not by the runner; the canaries' draws need NumPy only."""
    script = textwrap.dedent(
        """
        import sys
        import sifl_ray.runner, sifl_ray.parties.evaluator, sifl_ray.parties.workers  # noqa: F401
        from sifl_ray.privacy.canary_draws import canary_directions, inclusion_draws  # noqa: F401
        print("scipy" in sys.modules)
        from sifl_ray.privacy.canaries import CanaryAudit
        audit = CanaryAudit(k=4, m=4, seed=bytes(16))
        audit.figures(delta=1e-5, confidence=0.95, claims={}, t=0)
        print("scipy" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


@pytest.mark.skipif(usable_cpus() < 2, reason="one CPU: no figure helper, the driver draws")
def test_the_imports_beside_rays_start_leave_matplotlib_to_the_rounds():
    """The driver's imports beside Ray's start (torch, the runner, TensorBoard) take no matplotlib: its ~0.3 s
    of CPU would compete with the parties' processes starting; a run starts its figure helpers once its
    rounds begin, and they import its figure, not the driver, which only picks the arms' colours (the
    control: a figure drawn here afterwards imports it). Never pyplot, not even once a figure is drawn:
    pyplot would take over the process's backend, a notebook user's."""
    script = textwrap.dedent(
        """
        import sys, tempfile, threading
        from functools import partial
        from pathlib import Path
        from sifl_ray.preload import import_in_background
        import_in_background().join()
        print("torch.utils.tensorboard" in sys.modules, "matplotlib" in sys.modules)
        from sifl_ray import canvas, plots
        canvas.prefetch(helpers=True)
        next(t for t in threading.enumerate() if t.name == "sifl-matplotlib").join()
        print(canvas.HELPERS.running(), "matplotlib.colors" in sys.modules)
        history = {"fl": [{"round": 0, "test_accuracy": 0.5}, {"round": 1, "test_accuracy": 0.6}]}
        styles = plots.arm_styles({"fl": ("Blues", "fl", None)})
        folder = Path(tempfile.mkdtemp())
        (path,) = canvas.Figures(folder, [partial(plots.plot_accuracy, folder, history, styles, "t")]).draw()
        print(path.stat().st_size > 1000, "matplotlib.figure" in sys.modules)
        path = plots.plot_accuracy(folder, history, styles, "t")
        print("matplotlib.figure" in sys.modules, "matplotlib.pyplot" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    expected = ["True", "False", "True", "True", "True", "False", "True", "False"]
    assert out.stdout.split() == expected, out.stderr
