"""A party's host and its own process: what every host answers (its process, its node, the key material it
holds), and the settings of its process (it owns its process; a library must not touch the driver's)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from typing import Any

import torch

from sifl_ray.device import tensor_devices
from sifl_ray.models import build_model
from sifl_ray.parties.key_holdings import key_inventory
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import ModelSpec

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2); larger blocks are always mapped.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Make glibc keep freed heap memory for reuse instead of handing it back to the OS at every free.

    Why: a client worker that alternates coding (a few vector-sized blocks per round) with training (many
    activation-sized blocks per step) took three orders of magnitude more minor page faults in a SIFL M2
    round than in an fl round, and trained measurably slower, although the training is the same
    arithmetic; with fixed thresholds the faults and the training time are the same in both arms. By
    default glibc adapts its mmap and trim thresholds to the blocks it has seen freed and trims the top of
    the heap when more than the trim threshold is free there, so such a process keeps handing pages back
    and faulting them in again; that adaptation is the likely mechanism, and fixing the thresholds removes
    it, so the behaviour no longer depends on what ran before (``tests/test_actor_process.py`` shows the
    effect on a freed block; ``python -m bench coding-overhead`` times an M2 round against fl's).

    Cost: a process keeps its peak heap (up to the blocks below 32 MiB) instead of returning the top of
    it; blocks of 32 MiB and more are still mapped and unmapped on their own. Returns whether the
    setting took (False off glibc, e.g. on macOS, where nothing is changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )


class Host:
    """What every party's host answers, whatever else it does: where it runs and what key material it holds
    (the tests' proof that no party holds another's)."""

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`node_id`)."""
        return node_id()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this host holds
        (:func:`~sifl_ray.parties.key_holdings.key_inventory`)."""
        return sorted(key_inventory(self))

    def placement(self) -> dict[str, Any]:
        """Where this host runs and computes, and the devices of what it holds (:func:`placement`); each
        host says what it holds."""
        return placement(torch.device("cpu"))

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """Start this host again as its class would make it from these arguments: every attribute of the
        run before is dropped first (keys, noise streams, data, the arms' set-ups, taps), so nothing of it
        survives into the next run; only the process stays, with its imports (a session's warm host:
        :mod:`sifl_ray.runner.hosts`)."""
        self.__dict__.clear()
        type(self).__init__(self, *args, **kwargs)


def initial_model(model: ModelSpec, seed: int) -> torch.nn.Module:
    """The configured model with the run's initial weights (its ``init`` stream, the same in every party
    that builds it), in the model's dtype, on the CPU."""
    net = build_model(
        model.name,
        input_shape=model.input_shape,
        num_classes=model.num_classes,
        generator=torch_generator(seed, "init"),
        args=model.args,
        factory=model.factory,
    )
    return net.to(getattr(torch, model.dtype))


def in_ray_actor() -> bool:
    """Whether this code runs inside a Ray actor's own process (not the driver, not the in-process
    backend, which builds the same hosts in the caller's process)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id())


def node_id() -> str | None:
    """The id of the Ray node this actor runs on (``None`` outside a Ray actor): where a party landed."""
    if not in_ray_actor():
        return None
    import ray

    return ray.get_runtime_context().get_node_id()


def prepare_process(threads: int | None = None) -> None:
    """What every host does first: its torch thread count (if given) and, in its own process only,
    :func:`keep_freed_memory`."""
    if threads is not None:
        torch.set_num_threads(max(1, threads))
    if in_ray_actor():
        keep_freed_memory()


def assigned_gpu_ids() -> list[str]:
    """The GPU ids Ray assigned to this actor ([] outside a Ray actor: the driver, the in-process backend;
    or when it asked for none)."""
    if not in_ray_actor():
        return []
    import ray

    return [str(g) for g in ray.get_gpu_ids()]


def pick_device() -> tuple[torch.device, str | None]:
    """Where this host computes: the GPU Ray assigned to it if CUDA works here, else the CPU; and why it
    is the CPU when Ray assigned a GPU (``None`` otherwise).

    Ray sets ``CUDA_VISIBLE_DEVICES`` to the assigned GPU(s), so the first one this process sees is
    ``cuda:0``. Declared GPUs on a machine without CUDA (the tests) fall back to the CPU, and say so.
    """
    if not assigned_gpu_ids():
        return torch.device("cpu"), None
    if not torch.cuda.is_available():
        why = "Ray assigned a GPU, but CUDA is not usable here (torch.cuda.is_available() is False)"
        return torch.device("cpu"), why
    torch.cuda.set_device(0)
    return torch.device("cuda", 0), None


def placement(device: torch.device, *holdings: object, fallback: str | None = None) -> dict[str, Any]:
    """Where a host runs and computes: its GPU ids as Ray assigned them, what CUDA sees, its device, the
    devices of every tensor it holds (``holdings``: model, keys, staged data), and why it fell back to the
    CPU if it did."""
    cuda = device.type == "cuda"
    return {
        "gpu_ids": assigned_gpu_ids(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device": str(device),
        "current_device": torch.cuda.current_device() if cuda else None,
        "device_name": torch.cuda.get_device_name(device) if cuda else None,
        "tensor_devices": sorted(tensor_devices(*holdings)),
        "fallback": fallback,
        "pid": os.getpid(),
    }


def memory(device: torch.device) -> dict[str, Any]:
    """This host's peak memory: on a CUDA device what torch's allocator allocated and reserved (its peak
    since the process started or :func:`reset_peak_memory`), and the process's peak resident set."""
    out = {"device": str(device), "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if device.type == "cuda":
        out.update(
            peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
            peak_reserved_bytes=torch.cuda.max_memory_reserved(device),
            allocated_bytes=torch.cuda.memory_allocated(device),
        )
    return out


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak for :func:`memory` (CUDA devices; nothing to do on the CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
