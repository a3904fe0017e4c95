"""Where the Ray backend runs: a private local instance, or a cluster it joins.

``ray.address`` unset (and no ``RAY_ADDRESS``), or ``local``: a **private** Ray instance, started for this
run and stopped with it, sized to the machine. Ray's own default (``ray.init()`` with no address) would
instead join whatever cluster ``ray start`` last recorded on this machine, refusing the run's resource
sizes, or hang for minutes on a stale record of a cluster that has gone; a run must not change nature
because of a file in ``/tmp``.

``ray.address=auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` (or ``RAY_ADDRESS``, which Ray sets for the
driver of a ``ray job submit`` job): **join** that cluster and use what it has. A cluster that does not
answer is a :class:`ClusterUnreachable` error naming the setting and the fix, before Ray is asked (Ray
retries an unreachable GCS for minutes).

The first line a run prints says which of the two it got (:func:`connect` returns it).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import ray

from sifl_ray.backends.base import ClusterUnreachable

PRIVATE = ("", "local")

# A private instance's raylet connects to its own object store over a Unix socket that the store creates
# a moment after the raylet starts asking; Ray's default retry waits 1,000 ms after a failed attempt, so one
# start in four or so sat idle for a whole second (raylet.out: "ObjectManager server started" 1.00 s after
# the store's line; 2 starts of 4 on an Intel Xeon, 2 of 8 on an AMD EPYC, 2026-11-28/29). Retrying every
# 50 ms for the same 10 s in all takes that second back. Only for the instance a run starts itself: a
# joined cluster keeps its own settings (Ray refuses a system config from a driver that joins).
PRIVATE_SYSTEM_CONFIG: dict[str, Any] = {
    "raylet_client_connect_timeout_milliseconds": 50,
    "raylet_client_num_connect_attempts": 200,
}


def recorded_address() -> tuple[Path | None, str]:
    """The file where Ray reads the address ``ray start`` recorded (``$RAY_TMPDIR/ray/ray_current_cluster``,
    else under ``$TMPDIR`` or ``/tmp``) and the address in it (``""``: none)."""
    try:
        from ray._private.utils import get_ray_address_file  # type: ignore[attr-defined]
    except ImportError:  # a private helper: if it moves, say nothing rather than guess
        return None, ""
    path = Path(get_ray_address_file(None))
    try:
        return path, path.read_text().strip()
    except OSError:
        return path, ""


def recorded_cluster(timeout: float = 0.25) -> str | None:
    """The address ``ray start`` recorded on this machine, if something accepts connections there.

    A TCP connection to the recorded GCS port: cheap, and a stale record (the cluster was stopped or the
    machine rebooted, the file stays) is refused at once, so it is not reported as a running cluster.
    """
    _, address = recorded_address()
    return address if address and _answers(address, timeout) else None


def _host_port(address: str) -> tuple[str, int] | None:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _answers(address: str, timeout: float) -> bool:
    target = _host_port(address)
    if target is None:
        return False
    try:
        with socket.create_connection(target, timeout=timeout):
            return True
    except OSError:
        return False


def resources() -> str:
    """``'2 CPUs, 0 GPUs'``: what the connected Ray has in all."""
    res = ray.cluster_resources()  # type: ignore[no-untyped-call]
    cpus, gpus = res.get("CPU", 0), res.get("GPU", 0)
    return f"{cpus:g} CPU{'s' if cpus != 1 else ''}, {gpus:g} GPU{'s' if gpus != 1 else ''}"


def _fix(name: str) -> str:
    return (
        f"start the cluster (ray start --head), name a running one, or unset {name} to run on a private "
        "local Ray instance"
    )


def _join_target(address: str, name: str) -> str:
    """The address to join, checked to answer; raises :class:`ClusterUnreachable` with the fix."""
    setting, fix = f"{name}={address}", _fix(name)
    if address.startswith(("http://", "https://")):
        raise ClusterUnreachable(
            f"{setting}: that is a dashboard (job API) address; {name} wants the cluster's "
            "GCS address HOST:PORT (port 6379 unless the head was started with --port), or submit the run "
            f"as a job: ray job submit --address {address} --working-dir . -- python run.py ..."
        )
    if address == "auto":
        if os.environ.get("RAY_ADDRESS"):
            address = os.environ["RAY_ADDRESS"]  # what Ray's "auto" itself reads first
        else:
            path, recorded = recorded_address()
            if recorded and not _answers(recorded, timeout=2.0):
                raise ClusterUnreachable(
                    f"{setting}: the cluster recorded in {path} ({recorded}) does not answer (stale: it "
                    f"was stopped); {fix}"
                )
            return "auto"  # recorded and answering, or none recorded: Ray looks for a running one
    if _host_port(address) is None:
        raise ClusterUnreachable(
            f"{setting}: expected local, auto, HOST:PORT or ray://HOST:PORT (the GCS address, e.g. "
            f"127.0.0.1:6379); change {name}"
        )
    if not _answers(address, timeout=2.0):
        raise ClusterUnreachable(f"{setting}: no Ray cluster answers at {address}; {fix}")
    return address


def connect(
    address: str | None, *, num_cpus: int | None = None, num_gpus: int | None = None, **init_kwargs: Any
) -> str:
    """Start a private local Ray instance (``address`` unset or ``local``) or join the cluster at
    ``address``; returns the line that says which, with the resources the run got.

    Args:
        address: ``ray.address`` (the configuration folds ``RAY_ADDRESS`` into it).
        num_cpus / num_gpus: the private instance's size (default: this machine's CPUs, Ray's GPU count);
            a joined cluster has its own, and Ray refuses them there.
        init_kwargs: passed to ``ray.init`` (a private instance's system config is
            :data:`PRIVATE_SYSTEM_CONFIG`).

    Raises:
        ClusterUnreachable: a cluster was asked for and cannot be joined.
    """
    if address is None or address in PRIVATE:
        # Probe before starting: the private instance's own ports (random) could answer on a stale record.
        running = recorded_cluster()
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            num_gpus=num_gpus,
            _system_config=PRIVATE_SYSTEM_CONFIG,
            **init_kwargs,
        )
        line = f"Ray: private local instance ({resources()})"
        if running:
            line += f"; to join the cluster running at {running} instead, set ray.address=auto"
        return line
    name = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") == address else "ray.address"
    target = _join_target(address, name)
    try:
        context = ray.init(address=target, **init_kwargs)
    except (ConnectionError, ValueError) as err:  # Ray's advice names its own flags: keep its first sentence
        first = (str(err).strip() or type(err).__name__).splitlines()[0].split(". ")[0].rstrip(".")
        raise ClusterUnreachable(f"{name}={address}: cannot join: {first}; {_fix(name)}") from None
    joined = getattr(context, "address_info", {}).get("gcs_address") or address
    return f"Ray: joined cluster at {joined} ({resources()})"
