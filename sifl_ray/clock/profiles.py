"""Every client's device: its compute speed, its links, its latency and when it is online.

Why devices at all: a round in deployment lasts as long as its slowest kept client takes to download the
broadcast, train, and upload, and that depends on the client's phone and network far more than on the
host the simulation runs on. Each client gets a :class:`Devices` row, from one of two sources:

- a **profile** (``clock.profile``), a registered law that draws every client's device from the run's seed
  (stream ``("clock", "devices")``): the built-in ``mobile`` mix (:func:`mobile`: log-normal compute speed,
  bandwidths and latency around medians taken from published measurements, docs/clock.md "Where the numbers
  come from") and ``equal`` (every device the same: the control of a heterogeneous run). A user's registers
  with :func:`register_profile`, its settings a section of the configuration like any component's;
- a **trace file** (``clock.trace``), one row per device, CSV or JSON (:func:`read_trace`; the format is
  docs/clock.md "Trace files"): a row may name the client it belongs to, the others are dealt to the
  remaining clients from the same stream (without replacement while rows last).

Units inside the platform are SI base units: FLOP/s, bytes/s, seconds. A profile's settings use the units
people quote (GFLOP/s, Mbit/s, ms); a trace file uses FLOP/s, bit/s and seconds, so that a value written in
a file is the value the clock computes with (the conversion bit/s → bytes/s is exact).

This module imports no torch and no numpy at import time: the configuration imports it to learn the
profiles' names and sections.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sifl_ray.config.components import DEVICE_PROFILES
from sifl_ray.config.validation import NONNEG, POSITIVE, ConfigError, setting

if TYPE_CHECKING:
    import numpy as np
    from omegaconf import DictConfig

#: The built-in mix's medians (docs/clock.md "Where the numbers come from" says what is measured and what is
#: assumed): a phone's sustained training speed (an assumption), the global mobile downlink of Ookla's
#: Speedtest Global Index for July 2021, the uplink at Ookla's U.S. mobile upload/download ratio of H1 2018
#: (8.63 / 27.33 Mbit/s), and one way of Ookla's global mobile latency (a round trip) for November 2022.
PHONE_GFLOPS = 10.0
MOBILE_DOWN_MBPS = 55.07
MOBILE_UP_MBPS = round(MOBILE_DOWN_MBPS * 8.63 / 27.33, 2)
MOBILE_LATENCY_MS = 28.0 / 2


@dataclass(frozen=True)
class Devices:
    """One row per client (client ``i`` is row ``i``), in SI base units.

    Attributes:
        flops: sustained training speed, FLOP/s.
        down, up: link bandwidths, bytes/s (downlink: server to client).
        latency: one-way latency of a message, s.
        online_s, offline_s: mean seconds a device stays online, then offline (exponential spells, see
            :mod:`~sifl_ray.clock.availability`); ``inf`` online: always online.
        windows: per device, ``None`` or its online windows ``((start, end), ...)`` in simulated seconds
            (a trace's measured availability; offline outside them): then its spells are not drawn.
    """

    flops: np.ndarray
    down: np.ndarray
    up: np.ndarray
    latency: np.ndarray
    online_s: np.ndarray
    offline_s: np.ndarray
    windows: np.ndarray

    def __len__(self) -> int:
        return int(self.flops.shape[0])

    def rows(self, index: Any) -> Devices:
        """The devices of rows ``index`` (an array of row numbers)."""
        return Devices(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def describe(self) -> dict[str, Any]:
        """Medians and the 5th and 95th percentiles, in the units people quote (summary.json)."""
        # deferred: numpy, which this module does not load at import
        import numpy as np

        def spread(x: np.ndarray, scale: float) -> dict[str, float]:
            p5, p50, p95 = np.percentile(x * scale, [5, 50, 95])
            return {"p5": float(p5), "median": float(p50), "p95": float(p95)}

        always = bool(np.isinf(self.online_s).all()) and all(w is None for w in self.windows)
        return {
            "devices": len(self),
            "gflops": spread(self.flops, 1e-9),
            "down_mbps": spread(self.down, 8e-6),
            "up_mbps": spread(self.up, 8e-6),
            "latency_ms": spread(self.latency, 1e3),
            "availability": "always online"
            if always
            else {
                "devices_with_spells": int(np.isfinite(self.online_s).sum()),
                "devices_with_windows": sum(w is not None for w in self.windows),
            },
        }


Windows = tuple[tuple[float, float], ...]
"""A device's online windows, ``((start, end), ...)`` in simulated seconds, increasing, not overlapping."""

Profile = Callable[..., Devices]
"""``profile(count, rng, **settings) -> Devices``: ``count`` devices drawn from the NumPy generator
``rng``."""


def register_profile(name: str, *, settings: type | None = None) -> Callable[[Profile], Profile]:
    """Decorator: make ``profile`` the device profile ``clock.profile=<name>``; return it unchanged.

    With ``settings`` (a dataclass whose fields have defaults and rules), the section ``<name>`` is a key of
    the configuration, checked like every section, and the profile is called with its values as keyword
    arguments (``mobile.down_mbps=20``).

    Raises:
        RegistryError: ``name`` is taken or no name.
        SectionError: ``settings`` cannot be the section (see :mod:`sifl_ray.config.sections`).
    """

    def register(profile: Profile) -> Profile:
        DEVICE_PROFILES.register(name, profile, settings=settings)
        return profile

    return register


def devices(
    *,
    flops: Any,
    down: Any,
    up: Any,
    latency: Any,
    online_s: Any = math.inf,
    offline_s: Any = 0.0,
    windows: list[Windows | None] | None = None,
    count: int,
) -> Devices:
    """:class:`Devices` of ``count`` rows from arrays or scalars (a scalar: every row the same)."""
    # deferred: numpy, which this module does not load at import
    import numpy as np

    def column(x: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), (count,)).copy()

    held = np.empty(count, dtype=object)
    held[:] = [None] * count if windows is None else windows
    return Devices(
        column(flops), column(down), column(up), column(latency), column(online_s), column(offline_s), held
    )


# ------------------------------------------------------------------------------------------ built-in profiles
@dataclass
class MobileProfile:
    """Phones on cellular links: compute speed, bandwidths and latency each log-normal around a median, drawn
    independently (docs/clock.md "Where the numbers come from": which figure is measured, which assumed)."""

    gflops: float = setting(PHONE_GFLOPS, rule=POSITIVE)  # median sustained training speed, GFLOP/s (assumed)
    gflops_sigma: float = setting(0.8, rule=NONNEG)  # log-normal σ of the speed (assumed)
    down_mbps: float = setting(MOBILE_DOWN_MBPS, rule=POSITIVE)  # median downlink, Mbit/s (Ookla, 2021)
    # median uplink, Mbit/s (the downlink at Ookla's U.S. upload/download ratio, 2018)
    up_mbps: float = setting(MOBILE_UP_MBPS, rule=POSITIVE)
    bandwidth_sigma: float = setting(1.0, rule=NONNEG)  # log-normal σ of both links (assumed)
    # median one-way latency, ms (half of Ookla's round trip, 2022)
    latency_ms: float = setting(MOBILE_LATENCY_MS, rule=POSITIVE)
    latency_sigma: float = setting(0.5, rule=NONNEG)  # log-normal σ of the latency (assumed)
    # mean minutes a device stays online (exponential spells); null: always online
    online_min: float | None = setting(None, rule=POSITIVE)
    offline_min: float = setting(10.0, rule=POSITIVE)  # mean minutes offline once gone (with online_min)


@register_profile("mobile", settings=MobileProfile)
def mobile(
    count: int,
    rng: np.random.Generator,
    *,
    gflops: float,
    gflops_sigma: float,
    down_mbps: float,
    up_mbps: float,
    bandwidth_sigma: float,
    latency_ms: float,
    latency_sigma: float,
    online_min: float | None,
    offline_min: float,
) -> Devices:
    """``count`` phones: each quantity ``median · exp(σ Z)``, Z standard normal, drawn in this order (speed,
    downlink, uplink, latency), so that a device keeps its draws when another setting changes."""
    speed = gflops * 1e9 * rng.lognormal(0.0, gflops_sigma, count)
    down = down_mbps * 1e6 / 8 * rng.lognormal(0.0, bandwidth_sigma, count)
    up = up_mbps * 1e6 / 8 * rng.lognormal(0.0, bandwidth_sigma, count)
    latency = latency_ms * 1e-3 * rng.lognormal(0.0, latency_sigma, count)
    online = math.inf if online_min is None else online_min * 60.0
    return devices(
        flops=speed,
        down=down,
        up=up,
        latency=latency,
        online_s=online,
        offline_s=offline_min * 60.0,
        count=count,
    )


@dataclass
class EqualProfile:
    """Every device the same, by default the mobile mix's medians, always online: the control that shows
    what heterogeneity costs."""

    gflops: float = setting(PHONE_GFLOPS, rule=POSITIVE)  # training speed, GFLOP/s
    down_mbps: float = setting(MOBILE_DOWN_MBPS, rule=POSITIVE)  # downlink, Mbit/s
    up_mbps: float = setting(MOBILE_UP_MBPS, rule=POSITIVE)  # uplink, Mbit/s
    latency_ms: float = setting(MOBILE_LATENCY_MS, rule=NONNEG)  # one-way latency, ms


@register_profile("equal", settings=EqualProfile)
def equal(
    count: int,
    rng: np.random.Generator,
    *,
    gflops: float,
    down_mbps: float,
    up_mbps: float,
    latency_ms: float,
) -> Devices:
    """``count`` identical devices (``rng`` is not drawn from)."""
    return devices(
        flops=gflops * 1e9,
        down=down_mbps * 1e6 / 8,
        up=up_mbps * 1e6 / 8,
        latency=latency_ms * 1e-3,
        count=count,
    )


# ------------------------------------------------------------------------------------------------ trace files
#: A trace file's columns: required ones, then optional ones with the value an empty or absent cell means.
TRACE_REQUIRED = ("flops", "down_bps", "up_bps")
TRACE_OPTIONAL: Mapping[str, float | None] = {
    "latency_s": 0.0,
    "online_s": math.inf,
    "offline_s": 0.0,
    "client": None,
    "online": None,
}


@dataclass(frozen=True)
class Trace:
    """A trace file's devices, and the client each row is pinned to (``None``: dealt from the seed)."""

    devices: Devices
    pinned: list[int | None]


def read_trace(path: str | Path) -> Trace:
    """The devices of a trace file: CSV with a header row, or JSON (a list of objects, or an object whose
    ``devices`` is one). Columns: ``flops`` (FLOP/s), ``down_bps`` and ``up_bps`` (bit/s), optional
    ``latency_s`` (s, default 0), ``online_s`` and ``offline_s`` (mean seconds of the online and offline
    spells; empty: always online), ``online`` (measured windows instead of spells: CSV ``"0-600 900-1500"``,
    JSON ``[[0, 600], [900, 1500]]``, in simulated seconds, offline outside them) and ``client`` (the client
    the row belongs to).

    Raises:
        ConfigError: the file is missing or malformed; the message names ``clock.trace``, the row and the fix.
    """
    path = Path(path)
    where = f"clock.trace: {path}"
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(
            [f"{where}: cannot be read ({err.strerror}); give the path of a CSV or JSON file"]
        ) from None
    try:
        records = (
            _json_records(text) if path.suffix.lower() == ".json" else list(csv.DictReader(text.splitlines()))
        )
    except (ValueError, csv.Error) as err:
        raise ConfigError([f"{where}: not a device table ({err}); see docs/clock.md 'Trace files'"]) from None
    if not records:
        raise ConfigError(
            [f"{where}: no device in it; write one row per device (docs/clock.md 'Trace files')"]
        )
    known = (*TRACE_REQUIRED, *TRACE_OPTIONAL)
    problems: list[str] = []
    columns: dict[str, list[float]] = {k: [] for k in known if k != "online"}
    windows: list[Windows | None] = []
    for row_number, record in enumerate(records, start=1):
        unknown = sorted(set(record) - set(known))
        if unknown:
            problems.append(
                f"{where} row {row_number}: unknown column(s) {', '.join(map(str, unknown))}; expected "
                f"{', '.join(known)}"
            )
        for key in columns:
            value, problem = _cell(record.get(key), key)
            if problem is not None:
                problems.append(f"{where} row {row_number}: {key} {problem}")
            columns[key].append(value if value is not None else math.nan)
        window, problem = _windows(record.get("online"))
        if problem is not None:
            problems.append(f"{where} row {row_number}: online {problem}")
        windows.append(window)
    if problems:
        raise ConfigError(problems)
    count = len(records)
    pinned = [None if math.isnan(c) else int(c) for c in columns["client"]]
    table = devices(
        flops=columns["flops"],
        down=[b / 8 for b in columns["down_bps"]],
        up=[b / 8 for b in columns["up_bps"]],
        latency=columns["latency_s"],
        online_s=columns["online_s"],
        offline_s=columns["offline_s"],
        windows=windows,
        count=count,
    )
    return Trace(table, pinned)


def _json_records(text: str) -> list[dict[str, Any]]:
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("devices")
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError('expected a list of objects, one per device, or {"devices": [...]}')
    return data


def _windows(raw: Any) -> tuple[Windows | None, str | None]:
    """A row's online windows (``None``: none given) or what is wrong with them."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None, None
    expected = 'windows "start-end start-end ..." (CSV) or [[start, end], ...] (JSON), seconds, increasing'
    try:
        pairs = [w.split("-") for w in raw.split()] if isinstance(raw, str) else list(raw)
        spans = tuple((float(a), float(b)) for a, b in pairs)
    except (TypeError, ValueError):
        return None, f"must be {expected}, got {raw!r}"
    bounds = [x for span in spans for x in span]
    if not spans or bounds[0] < 0 or any(b <= a for a, b in pairwise(bounds)):
        return (
            None,
            f"must be {expected} (each end after its start, each start after the last end), got {raw!r}",
        )
    return spans, None


def _cell(raw: Any, key: str) -> tuple[float | None, str | None]:
    """A cell's value (``None``: empty, the column's default applies) or what is wrong with it."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if key in TRACE_REQUIRED:
            return None, "is missing; every device needs flops, down_bps and up_bps"
        return TRACE_OPTIONAL[key], None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None, f"must be a number, got {raw!r}"
    if key == "client":
        ok, expected = value >= 0 and value == int(value), "a client number ≥ 0"
    elif key in ("flops", "down_bps", "up_bps"):
        ok, expected = math.isfinite(value) and value > 0, "a number > 0"
    else:
        ok, expected = value >= 0 and not math.isnan(value), "a number ≥ 0"
    return (value, None) if ok else (None, f"must be {expected}, got {raw!r}")


# ----------------------------------------------------------------------------------------- the run's devices
def client_devices(cfg: DictConfig, num_clients: int) -> Devices:
    """Client ``i``'s device is row ``i``: from ``clock.trace`` (pinned rows first, the others dealt from
    the stream ``("clock", "devices")`` of the run's seed), else drawn by ``clock.profile`` from that stream.

    Raises:
        ConfigError: the trace cannot be read, or pins a client the run does not have or twice.
    """
    # deferred: numpy, which this module does not load at import
    import numpy as np

    # deferred: numpy, which this module does not load at import
    from sifl_ray.seeding import numpy_generator

    rng = numpy_generator(int(cfg.seed), "clock", "devices")
    if cfg.clock.trace is None:
        name = str(cfg.clock.profile)
        profile = DEVICE_PROFILES[name]
        section = DEVICE_PROFILES.settings(name)
        settings = {f.name: cfg[name][f.name] for f in fields(section)} if section is not None else {}
        drawn: Devices = profile(num_clients, rng, **settings)
        return drawn
    trace = read_trace(cfg.clock.trace)
    rows = np.full(num_clients, -1, dtype=np.int64)
    problems = []
    for row, client in enumerate(trace.pinned):
        if client is None:
            continue
        if client >= num_clients or rows[client] >= 0:
            why = (
                f"this run has clients 0..{num_clients - 1}"
                if client >= num_clients
                else "another row has it"
            )
            problems.append(f"clock.trace: row {row + 1} pins client {client}, but {why}")
            continue
        rows[client] = row
    if problems:
        raise ConfigError(problems)
    free_rows = np.array([r for r, c in enumerate(trace.pinned) if c is None], dtype=np.int64)
    free_clients = np.flatnonzero(rows < 0)
    if free_clients.size and not free_rows.size:
        raise ConfigError(
            [
                f"clock.trace: every row is pinned, but clients {free_clients.tolist()[:5]} have no device; "
                "add rows"
            ]
        )
    if free_clients.size:
        if free_rows.size >= free_clients.size:
            dealt = rng.permutation(free_rows)[: free_clients.size]
        else:  # fewer devices than clients: each client draws one (devices are shared in law, not in use)
            dealt = rng.choice(free_rows, size=free_clients.size, replace=True)
        rows[free_clients] = dealt
    return trace.devices.rows(rows)
