"""When each device is online: alternating online and offline spells on the simulated clock.

Why a process in time and not a coin per round: whether a phone is there depends on the hour, not on the
round number; a round that lasts longer sees more clients leave mid-round, and a slow arm meets the
devices at other moments than a fast one. Each device alternates exponential spells (means ``online_s``
and ``offline_s`` of its :class:`~sifl_ray.clock.profiles.Devices` row), starting at time 0 in its
stationary state (online with probability ``online / (online + offline)``). A device with ``online_s``
infinite is always online; one with measured windows (a trace's ``online`` column) is online exactly in them.

Determinism: device ``i``'s spells come from its own stream ``("clock", "availability", i)`` of the run's
seed and are generated in order, as far as a query needs, so any order of queries, any arm and a resumed
run see the same spells at the same times.
"""

from __future__ import annotations

import math

import numpy as np

from sifl_ray.clock.profiles import Devices
from sifl_ray.seeding import numpy_generator

_CHUNK = 64  # spells drawn at a time (the values do not depend on it: the stream is read in order)


class Availability:
    """The online spells of every device of a run."""

    def __init__(self, devices: Devices, seed: int) -> None:
        self.devices = devices
        self.seed = int(seed)
        self._switches: dict[int, list[float]] = {}  # device → absolute times its state flips, increasing
        self._first: dict[int, bool] = {}  # device → online at time 0
        self._streams: dict[int, np.random.Generator] = {}

    def window(self, clients: np.ndarray, start: float) -> tuple[np.ndarray, np.ndarray]:
        """For clients ``clients`` (device rows): whether each is online at time ``start``, and the seconds
        after ``start`` until it next goes offline (``inf``: it stays online; ``0`` if it is offline)."""
        clients = np.asarray(clients, dtype=np.int64)
        online = np.ones(clients.shape, dtype=bool)
        leaves = np.full(clients.shape, math.inf)
        for j, device in enumerate(clients.tolist()):
            if self.devices.windows[device] is None and math.isinf(self.devices.online_s[device]):
                continue
            online[j], leaves[j] = self._state(device, start)
        return online, leaves

    def _state(self, device: int, start: float) -> tuple[bool, float]:
        switches = self._extend(device, start)
        flips = int(np.searchsorted(np.asarray(switches), start, side="right"))
        online = self._first[device] ^ bool(flips % 2)
        if not online:
            return False, 0.0
        return True, switches[flips] - start  # the next flip, from online to offline

    def _extend(self, device: int, until: float) -> list[float]:
        """Device ``device``'s flips, drawn until one lies after ``until`` (or its measured windows' flips,
        and an endless offline spell after the last)."""
        windows = self.devices.windows[device]
        if windows is not None:
            if device not in self._switches:
                bounds = [x for span in windows for x in span]
                self._first[device] = bounds[0] <= 0.0
                self._switches[device] = [*(x for x in bounds if x > 0.0), math.inf]
            return self._switches[device]
        if device not in self._streams:
            rng = numpy_generator(self.seed, "clock", "availability", device)
            on, off = float(self.devices.online_s[device]), float(self.devices.offline_s[device])
            self._streams[device] = rng
            self._first[device] = bool(rng.random() < on / (on + off))
            self._switches[device] = []
        switches = self._switches[device]
        rng = self._streams[device]
        means = (float(self.devices.online_s[device]), float(self.devices.offline_s[device]))
        while not switches or switches[-1] <= until:
            spells = rng.standard_exponential(_CHUNK)
            now = switches[-1] if switches else 0.0
            online = self._first[device] ^ bool(len(switches) % 2)  # the state of the spell to draw
            for x in spells.tolist():
                now += x * (means[0] if online else means[1])
                switches.append(now)
                online = not online
        return switches
