"""One round on the simulated clock: each client's phases on its own links, the deadline, who drops where.

Pure arithmetic on arrays (no party, no backend): :func:`plan_round` takes the round's clients, their
devices, what the arm moves and computes (:class:`~sifl_ray.clock.work.ArmWork`) and the rules, and
returns a :class:`RoundPlan`: at which step each client drops, if it does, and when each phase ended.

A phase is one request from the server and one answer from every client still in (docs/clock.md "What a
round costs"). Client ``i`` answers after

    2·latency_i + down/down_i + work/flops_i + up/up_i

seconds (the request's latency and bytes, its compute, the answer's latency and bytes). The server closes
the phase when every client still in has answered; or, with over-selection, when the ``keep``-th answer
arrived; or at the phase's limit, if someone is missing (the server cannot know a late client from a gone
one). A client misses the phase if its answer would arrive after the limit, after the phase closed (not
among the first ``keep``), or after its device went offline (its spell ended mid-phase). A phase without a
limit (the upload, when ``clock.deadline_s`` is unset) waits for every answer, and learns of a device that
went offline when its connection drops.

The phases of an arm in the clear: ``upload`` (download the broadcast, train, upload), limited by the
round's deadline. Under secure aggregation (Bonawitz et al. 2017) four, one after the other: ``keys``
(advertise two public keys), ``shares`` (receive the neighbours' keys, send them encrypted shares),
``upload`` (receive the shares and the broadcast, train, mask, upload), ``unmask`` (receive the survivors,
send the shares of the dropped clients' keys and of the survivors' self masks); the key agreement and the
unmasking wait ``clock.phase_timeout_s``. Where each client stops decides what the protocol must do: gone
in the key agreement, nothing (no mask was made with it; modelled as leaving before it); late for the
upload, its neighbours' masks with it are rebuilt; gone after its masked upload, its self mask is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sifl_ray.clock.profiles import Devices

#: Where a client left the round, in the order of the protocol (``TOOK_PART``: it did not).
TOOK_PART, OFFLINE, KEY_AGREEMENT, BEFORE_UPLOAD, NOT_KEPT, AFTER_MASKING = range(6)
STEPS = ("took_part", "offline", "key_agreement", "before_upload", "not_kept", "after_masking")
#: What each drop means, in the words of a round's record.
WHY = {
    OFFLINE: "offline when the round started",
    KEY_AGREEMENT: "lost in the key agreement (no mask was made with it)",
    BEFORE_UPLOAD: "missed the deadline before its upload",
    NOT_KEPT: "not among the first uploads kept",
    AFTER_MASKING: "gone after its masked upload (its self mask is rebuilt)",
}


@dataclass(frozen=True)
class Phase:
    """One request and its answers: bytes each client receives and sends, FLOPs it computes (per client,
    or one number for all), and how long the server waits: ``timeout`` seconds from the phase's start, and
    at most until ``deadline`` seconds from the round's start (``None``: no such limit)."""

    name: str
    down: Any
    work: Any
    up: Any
    timeout: float | None = None
    deadline: float | None = None
    keep: int | None = None

    def limit(self, start: float) -> float:
        """The latest answer the server accepts, in seconds from the round's start."""
        limits = [start + self.timeout if self.timeout is not None else math.inf]
        return min(limits + ([self.deadline] if self.deadline is not None else []))


@dataclass
class RoundPlan:
    """Round ``t`` of one arm on the clock (times in seconds from the round's start).

    Attributes:
        clients: the round's clients (device rows), in the order of the arrays below.
        step: where each client left the round (:data:`STEPS`; ``TOOK_PART``: it answered every phase).
        phases: per phase, its name, start and end.
        answered: per phase name, the answer time of each client that answered (``nan`` otherwise).
    """

    clients: np.ndarray
    step: np.ndarray
    phases: list[tuple[str, float, float]] = field(default_factory=list)
    answered: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def end(self) -> float:
        """When the last phase closed (0 if there was none)."""
        return self.phases[-1][2] if self.phases else 0.0

    def phase_end(self, name: str) -> float:
        """When phase ``name`` closed (the start of the next one)."""
        return next(end for phase, _, end in self.phases if phase == name)

    def left(self, *steps: int) -> set[int]:
        """The clients that left at any of ``steps``."""
        return {int(c) for c, s in zip(self.clients.tolist(), self.step.tolist(), strict=True) if s in steps}

    def counts(self) -> dict[str, int]:
        """How many clients left at each step (and took part)."""
        return {name: int((self.step == code).sum()) for code, name in enumerate(STEPS)}


def run_phase(
    phase: Phase, *, start: float, devices: Devices, inside: np.ndarray, leaves: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Phase ``phase`` from time ``start`` for the clients ``inside`` (a mask over ``devices``' rows).

    Returns each client's answer time, whether it answered in time and was kept, when the phase closed, and
    which of the missing were cut by over-selection (answered in time, after the ``keep``-th)."""
    d = devices
    answer = start + 2.0 * d.latency + phase.down / d.down + phase.work / d.flops + phase.up / d.up
    made = inside & (answer <= leaves)  # the device stayed online until its answer was sent
    limit = phase.limit(start)
    made &= answer <= limit
    cut = np.zeros_like(made)
    if phase.keep is not None and int(made.sum()) >= phase.keep:
        order = np.flatnonzero(made)[np.argsort(answer[made], kind="stable")]
        cut[order[phase.keep :]] = True
        made &= ~cut
        return answer, made, float(answer[order[phase.keep - 1]]), cut
    if (made == inside).all():
        return answer, made, float(answer[made].max(initial=start)), cut
    if math.isfinite(limit):
        return answer, made, limit, cut
    gone = inside & ~made  # no limit: the server learns of each disconnection when it happens
    return answer, made, float(max(answer[made].max(initial=start), leaves[gone].max(initial=start))), cut


def plan_round(
    phases_of: Any, *, clients: np.ndarray, devices: Devices, online: np.ndarray, leaves: np.ndarray
) -> RoundPlan:
    """Play the phases of one round for ``clients`` (their ``devices`` rows, whether each is online at the
    round's start and the seconds until each goes offline).

    ``phases_of(inside)`` yields the phases in order; it is a generator that receives, after each phase,
    the mask of the clients still in, so that a later phase's messages can depend on who is left (the
    unmasking's survivor list). The clients a phase loses leave at that phase's step (``keys`` and
    ``shares``: the key agreement; ``upload``: before upload, or not kept; ``unmask``: after masking)."""
    step = np.where(online, TOOK_PART, OFFLINE)
    plan = RoundPlan(clients=np.asarray(clients), step=step)
    inside = online.copy()
    start = 0.0
    phases = phases_of(inside.copy())
    phase = next(phases, None)
    while phase is not None:
        answer, made, end, cut = run_phase(phase, start=start, devices=devices, inside=inside, leaves=leaves)
        lost = inside & ~made
        step[lost & cut] = NOT_KEPT
        step[lost & ~cut] = _LEFT_AT[phase.name]
        plan.phases.append((phase.name, start, end))
        plan.answered[phase.name] = np.where(made, answer, np.nan)
        inside, start = made, end
        try:
            phase = phases.send(inside.copy())
        except StopIteration:
            phase = None
    return plan


#: The step a client lost in a phase left at.
_LEFT_AT = {"keys": KEY_AGREEMENT, "shares": KEY_AGREEMENT, "upload": BEFORE_UPLOAD, "unmask": AFTER_MASKING}
