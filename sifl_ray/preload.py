"""The driver's heavy imports, made in a thread while the main thread starts Ray.

Why: Ray's start is spent mostly waiting on its own processes, while the driver's imports (torch, the
runner, TensorBoard: about 1.5 s of CPU) are CPU work; one after the other, a core idles through the first
and the second then runs alone. Overlapped, the start costs about the longer of the two (``python -m bench
startup`` measures ``sifl run``'s first run and a session's). matplotlib is not among them: a run imports it
once its rounds begin (:func:`sifl_ray.canvas.prefetch`), when the parties' processes no longer need the
CPU.
"""

from __future__ import annotations

import contextlib
import threading


def import_in_background(*, tensorboard: bool = True) -> threading.Thread:
    """Start importing the runner (torch, the parties, the round) and, with ``tensorboard``, TensorBoard's
    writer, in a daemon thread; join it before using them. A failed import is not reported here: the main
    thread's own import raises it, with its traceback."""

    def work() -> None:
        with contextlib.suppress(BaseException):
            # deferred: torch, numpy, omegaconf (the runner's: its parties, the round), in this thread
            import sifl_ray.runner  # noqa: F401

            if tensorboard:
                import torch.utils.tensorboard  # noqa: F401

    thread = threading.Thread(target=work, name="sifl-imports", daemon=True)
    thread.start()
    return thread
