"""Per-element noise against the aggregator: element j of one upload vs of the difference of two uploads.

The paper's ε (§5, Theorems 1 and 2) is per element and per release: element j of ONE upload ``w~_i`` carries
the noise ``(N1 r1)_j``, of standard deviation ``s_j = ‖N1^j‖₂ σ1``, and ε_j follows from ``s_j``. The
aggregator does not see one release. It sees the N_c uploads of a round, and every client started from the
same ``w~^t = P1 w^t + N1 r1^t``, so every upload carries the SAME draw ``N1 r1^t`` (docs/method.md
"Noise-free differences"). Element j of ``w~_i − w~_k`` is ``P1^j (w_i − w_k)``: no noise beyond float64
round-off, which is deterministic and no privacy (docs/method.md "Precision does not help"). Element by
element the aggregator learns the differences of the clients' models, scaled by ``P1``, exactly: against it
the per-element ε does not hold, whatever σ1.

What is measured, and by whom. The aggregator's computation is :func:`same_round_differences`, from its own
view. Splitting a vector into signal and noise needs ``P1`` and ``P1L`` (a client's view of key 1 is enough),
so that is the scorer's side: :func:`noise_part` gives ``x − P1 (P1L x)``, which is ``N1 r`` exactly for
``x = P1 w + N1 r`` (``P1L P1 = I``, ``P1L N1 = 0``). :func:`measure` reduces per-round noise parts to an
:class:`ElementNoise`: per element j the root mean square over rounds (the noise has mean zero, so this is
its standard deviation) in one upload and in the differences, and the pooled ratio over all elements,
rounds and pairs (``diff_noise_ratio`` on the RESULT line of ``sifl attack``).

What to expect. Same round: each entry of a difference is exact up to a few roundings of numbers of size
``max|w~|``, so the ratio is at most a small multiple of ``u·max|w~| / RMS(noise)`` (``u = 2^-53``), about
1e-16 at the paper's scales. Two uploads with independent draws (:func:`cross_round_pairs`, the control):
the noise of the difference is ``N1 (r − r')``, whose RMS is √2 times one upload's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding.base import CODING_DTYPE, ClientServerKey


def same_round_differences(uploads: np.ndarray) -> np.ndarray:
    """The aggregator's differences ``w~_i − w~_0`` (i = 1 … N_c − 1) of one round's uploads (ñ × N_c)."""
    uploads = np.asarray(uploads, dtype=np.float64)
    if uploads.ndim != 2:
        raise ValueError(f"expected one round's uploads as an (ñ, N_c) matrix, got shape {uploads.shape}")
    return uploads[:, 1:] - uploads[:, :1]


def noise_part(view: ClientServerKey, x: np.ndarray) -> np.ndarray:
    """``x − P1 (P1L x)`` for encoded vectors ``x`` (ñ,) or (ñ, k): their noise component ``N1 r``.

    Scorer side (it needs ``P1`` and ``P1L``). Applied to a difference as the aggregator computed it, it
    gives the noise left in what the aggregator holds, round-off included.
    """
    t = torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=CODING_DTYPE)
    return (t - view.apply_P1(view.decode(t))).numpy()


@dataclass(frozen=True)
class ElementNoise:
    """Noise per encoded element j in one upload and in the differences of two uploads.

    Attributes:
        upload_rms: (ñ,) RMS over rounds (and uploads) of element j's noise in one upload: the measured
            ``s_j`` of the paper's per-element ε.
        difference_rms: (ñ,) RMS over rounds and pairs of element j's noise in the differences.
        ratio: RMS of all difference noise / RMS of all upload noise (every element, round and pair).
        per_round: the same pooled ratio for each round alone.
        rounds: rounds measured.
        pairs: differences measured (over all rounds).
    """

    upload_rms: np.ndarray
    difference_rms: np.ndarray
    ratio: float
    per_round: dict[int, float]
    rounds: int
    pairs: int

    @property
    def element_ratios(self) -> np.ndarray:
        """``difference_rms / upload_rms`` per element (``nan`` where an upload carries no noise)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.upload_rms > 0, self.difference_rms / self.upload_rms, np.nan)

    @property
    def worst_element_ratio(self) -> float:
        """The largest per-element ratio: the noisiest difference relative to its element's upload noise."""
        r = self.element_ratios
        return float(np.nanmax(r)) if np.isfinite(r).any() else float("nan")


def _columns(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(x.shape[0], -1)


def _rms_ratio(num: np.ndarray, den: np.ndarray) -> float:
    d = float(np.sqrt(np.mean(np.square(den))))
    return float(np.sqrt(np.mean(np.square(num)))) / d if d > 0 else float("nan")


def measure(rounds: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> ElementNoise:
    """Reduce per-round noise parts to an :class:`ElementNoise`.

    Args:
        rounds: round → ``(noise of the uploads (ñ × k), noise of the differences (ñ × k'))``, both from
            :func:`noise_part`.
    """
    if not rounds:
        raise ValueError("no round to measure")
    order = sorted(rounds)
    up = [_columns(rounds[t][0]) for t in order]
    diff = [_columns(rounds[t][1]) for t in order]
    U, D = np.hstack(up), np.hstack(diff)
    if D.shape[1] == 0:
        raise ValueError("no difference to measure: every round has a single upload")
    return ElementNoise(
        upload_rms=np.sqrt(np.mean(np.square(U), axis=1)),
        difference_rms=np.sqrt(np.mean(np.square(D), axis=1)),
        ratio=_rms_ratio(D, U),
        per_round={t: _rms_ratio(d, u) for t, u, d in zip(order, up, diff, strict=True) if d.size},
        rounds=len(rounds),
        pairs=D.shape[1],
    )


def measure_transcript(
    recorder: TranscriptRecorder, view_for_round: Callable[[int], ClientServerKey]
) -> ElementNoise:
    """Same-round differences: the aggregator's view, every round of ``recorder`` with two uploads or more.

    ``view_for_round(t)`` is the client view of the key in force at round ``t`` (a re-keyed run changes it).
    """
    parts = {}
    for t in recorder.rounds():
        uploads, _ = recorder.upload_matrix(t)
        if uploads.shape[1] < 2:
            continue
        view = view_for_round(t)
        parts[t] = (noise_part(view, uploads), noise_part(view, same_round_differences(uploads)))
    return measure(parts)


def cross_round_pairs(
    recorder: TranscriptRecorder,
    view_for_round: Callable[[int], ClientServerKey],
    epoch_of: Callable[[int], int],
) -> ElementNoise:
    """The control: one upload of round t against one of round t' (independent draws ``r1^t``, ``r1^t'``).

    Rounds are paired (1, 2), (3, 4), … within a key epoch, so no draw is used twice; the noise of each
    difference is ``N1 (r^t − r^t')``, √2 times one upload's in RMS.
    """
    rounds = recorder.rounds()
    parts = {}
    for a, b in zip(rounds[0::2], rounds[1::2], strict=False):
        if epoch_of(a) != epoch_of(b):
            continue
        x = np.stack([recorder.upload_matrix(a)[0][:, 0], recorder.upload_matrix(b)[0][:, 0]], axis=1)
        view = view_for_round(a)
        parts[a] = (noise_part(view, x), noise_part(view, same_round_differences(x)))
    return measure(parts)
