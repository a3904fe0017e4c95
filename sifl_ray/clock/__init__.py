"""A simulated clock: each client a device, each round a simulated duration, deadlines that drop the late.

One module per concern (docs/clock.md is the guide):

- :mod:`~sifl_ray.clock.profiles`: the devices, :class:`~sifl_ray.clock.profiles.Devices`, drawn from a
  registered profile (the built-in ``mobile`` mix, its sources stated; ``equal``) or read from a trace file;
- :mod:`~sifl_ray.clock.availability`: when each device is online, a two-state process from the run's seed;
- :mod:`~sifl_ray.clock.work`: what one round of an arm moves (bytes per message) and computes (FLOPs);
- :mod:`~sifl_ray.clock.timeline`: the pure arithmetic of one round: each client's phases on its links,
  the deadline, who drops at which step, how long the round took;
- :mod:`~sifl_ray.clock.stage`: the clock as a stage around the arm's aggregation (habit 17: substituted,
  not branched on), and :class:`~sifl_ray.clock.stage.Clock`, the run's clock;
- :mod:`~sifl_ray.clock.report`: what summary.json says of it (time to accuracy, who dropped where).

This module imports only the profiles (no torch, no numpy): the configuration imports them to learn the
built-in profiles' names and sections before torch is loaded.
"""

from __future__ import annotations

from sifl_ray.clock.profiles import Devices, register_profile

__all__ = ["Devices", "register_profile"]
