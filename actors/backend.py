"""The Ray backend: actors, ObjectRefs, and ``ray.get`` at the driver for metrics only."""

from __future__ import annotations

from typing import Any

import ray

from actors import cluster


class RayBackend:
    """Runs the role hosts as Ray actors (:class:`sifl_ray.backend.Backend`).

    Args:
        address: ``ray.address`` (``RAY_ADDRESS`` folded in): unset or ``local`` starts a private local
            instance sized to the machine; ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that
            cluster (see :mod:`actors.cluster`).
        num_cpus / num_gpus: only for a private instance (tests declare GPUs on a CPU machine this way).

    Raises:
        actors.cluster.ClusterUnreachable: a cluster was asked for and cannot be joined.
    """

    name = "ray"
    description = ""

    def __init__(
        self, *, address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None
    ) -> None:
        self._owns = False
        # What the run got, said on its first line: a private instance or a joined cluster; "" (the class
        # default) when the caller's Ray (tests, benchmarks) is used as it is.
        if not ray.is_initialized():
            self.description = cluster.connect(
                address,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                include_dashboard=False,
                log_to_driver=True,
                configure_logging=False,
            )
            self._owns = True

    def available(self) -> dict[str, float]:
        return dict(ray.available_resources())

    def cluster(self) -> dict[str, float]:
        return dict(ray.cluster_resources())

    def spawn(
        self,
        cls: type,
        *args: Any,
        num_cpus: float = 0,
        num_gpus: float = 0,
        spread: bool = False,
        **kwargs: Any,
    ):
        remote_cls = ray.remote(cls)
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus or None, "max_restarts": 0}
        if spread:
            # Ray's SPREAD: each request goes to the next node (in turn) that has the resources free, so
            # the client workers of a cluster share its nodes rather than filling the driver's first.
            options["scheduling_strategy"] = "SPREAD"
        return remote_cls.options(**options).remote(*args, **kwargs)

    def call(self, handle, method: str, *args: Any, num_returns: int = 1, **kwargs: Any):
        return getattr(handle, method).options(num_returns=num_returns).remote(*args, **kwargs)

    def put(self, value: Any):
        return ray.put(value)

    def get(self, refs):
        return ray.get(refs)

    def wait(self, refs: list, timeout: float | None = None) -> tuple[list, list]:
        if not refs:
            return [], []
        return ray.wait(list(refs), num_returns=len(refs), timeout=timeout, fetch_local=False)

    @staticmethod
    def is_lost(err: BaseException) -> bool:
        # Gone: the actor itself, or an object it owned (a result whose owner died with it).
        lost = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError)
        if isinstance(err, lost):
            return True
        return isinstance(err, ray.exceptions.RayTaskError) and isinstance(getattr(err, "cause", None), lost)

    def kill(self, handle) -> None:
        ray.kill(handle, no_restart=True)

    def shutdown(self) -> None:
        if self._owns:
            ray.shutdown()
