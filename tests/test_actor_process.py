"""A party's own process keeps freed heap memory (:mod:`sifl_ray.parties.process`); the driver and in-process
runs are left alone.

Observable effect: a freed 20 MiB block stays resident (glibc reuses it) instead of being unmapped. Under
glibc's defaults it is returned at once, which is what made a SIFL M2 worker fault its training memory back
in every round.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.parties.process import in_ray_actor

ROOT = Path(__file__).resolve().parent.parent
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
MIB = 1 << 20


def make_probe():
    """A function that allocates, touches and frees 20 MiB and says how much of it is still resident (MiB).

    Made by a factory so that Ray pickles it by value into an actor (this module is not importable there).
    """

    def freed_block_resident_mib(_actor=None) -> float:
        import psutil
        import torch

        proc = psutil.Process()
        base = proc.memory_info().rss
        block = torch.ones(20 * MIB // 8, dtype=torch.float64)
        del block
        return (proc.memory_info().rss - base) / MIB

    return freed_block_resident_mib


def _probe(keep: bool) -> float:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from sifl_ray.parties.process import keep_freed_memory; from tests.test_actor_process import "
        "make_probe;"
        f"took = keep_freed_memory() if {keep} else True; print(took, make_probe()())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    took, resident = out.stdout.split()
    assert took == "True"
    return float(resident)


@pytest.mark.slow  # two Python processes
@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's (elsewhere keep_freed_memory changes nothing)")
def test_keep_freed_memory_keeps_a_freed_block_for_reuse():
    assert _probe(keep=True) >= 15
    assert _probe(keep=False) <= 5  # the defaults hand it back: the test can tell the two apart


@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's")
def test_real_actors_keep_freed_memory_and_the_driver_does_not(ray_session):
    from sifl_ray.parties.server import ServerHost

    ray = ray_session
    assert not in_ray_actor()
    server = ray.remote(ServerHost).options(num_cpus=0).remote()
    try:
        assert ray.get(server.__ray_call__.remote(lambda actor: in_ray_actor()))
        assert ray.get(server.__ray_call__.remote(make_probe())) >= 15
    finally:
        ray.kill(server)
