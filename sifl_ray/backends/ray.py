"""The Ray backend: each party a Ray actor, ObjectRefs between them, ``ray.get`` at the driver for metrics
only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from sifl_ray.backends.base import Capabilities, Placement
from sifl_ray.backends.shared import SharedProcess, Slot
from sifl_ray.parties.handle import Handle, Ref

if TYPE_CHECKING:
    import ray
    from omegaconf import DictConfig
else:

    class _Ray:
        """Ray, imported on first use: the configuration reads this class's capabilities, and Ray must
        not be imported before a run has set the switches it reads at import (:mod:`sifl_ray.ray_output`)."""

        def __getattr__(self, name: str) -> Any:
            import ray as module  # deferred: Ray, a second or more, until a backend is made

            return getattr(module, name)

    ray = _Ray()

T = TypeVar("T")
H = TypeVar("H")
P = ParamSpec("P")


class RayBackend:
    """Runs the party hosts as Ray actors (:class:`~sifl_ray.backends.Backend`).

    Args:
        address: ``ray.address`` (``RAY_ADDRESS`` folded in): unset or ``local`` starts a private local
            instance sized to the machine; ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` joins that
            cluster (see :mod:`sifl_ray.backends.cluster`).
        num_cpus / num_gpus: only for a private instance (tests declare GPUs on a CPU machine this way).

    Raises:
        sifl_ray.backends.cluster.ClusterUnreachable: a cluster was asked for and cannot be joined.
    """

    name = "ray"
    description = ""
    capabilities = Capabilities(kill=True, own_processes=True, placement=True)

    def __init__(
        self, *, address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None
    ) -> None:
        self._owns = False
        self._shared: dict[str, Any] = {}  # share → its process (ray.placement=compact)
        self._slots = 0
        # What the run got, said on its first line: a private instance or a joined cluster; "" (the class
        # default) when the caller's Ray (tests, benchmarks) is used as it is.
        if not ray.is_initialized():
            from sifl_ray.backends import cluster  # deferred: Ray, imported by making a backend only

            self.description = cluster.connect(
                address,
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                include_dashboard=False,
                log_to_driver=True,
                configure_logging=False,
            )
            self._owns = True

    @classmethod
    def from_config(cls, cfg: DictConfig, **options: Any) -> RayBackend:
        """A private instance (``options``: its ``num_cpus``, ``num_gpus``) or the cluster ``ray.address``
        names."""
        return cls(address=cfg.ray.address, **options)

    def available(self) -> dict[str, float]:
        return dict(ray.available_resources())  # type: ignore[no-untyped-call]

    def cluster(self) -> dict[str, float]:
        return dict(ray.cluster_resources())  # type: ignore[no-untyped-call]

    def spawn(
        self, where: Placement, host: Callable[P, H], /, *args: P.args, **kwargs: P.kwargs
    ) -> Handle[H]:
        if where.share is not None and not where.gpus:
            return self._adopt(where, host, args, kwargs)  # compact placement: a shared process
        options: dict[str, Any] = {"num_cpus": where.cpus, "num_gpus": where.gpus or None, "max_restarts": 0}
        if where.spread:
            # Ray's SPREAD: each request goes to the next node (in turn) that has the resources free, so
            # the client workers of a cluster share its nodes rather than filling the driver's first.
            options["scheduling_strategy"] = "SPREAD"
        actor = ray.remote(host).options(**options).remote(*args, **kwargs)
        return Handle(self, actor)

    def _adopt(
        self, where: Placement, host: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Handle[Any]:
        """The party ``host(*args, **kwargs)`` in the shared process ``where.share`` (started on first use,
        reserving ``where.cpus``, and again after it was killed), as a
        :class:`~sifl_ray.backends.shared.Slot`."""
        share = str(where.share)
        actor: Any = self._shared.get(share)
        if actor is None:
            actor = ray.remote(SharedProcess).options(num_cpus=where.cpus, max_restarts=0).remote()
            self._shared[share] = actor
        self._slots += 1
        actor.adopt.remote(self._slots, host, *args, **kwargs)
        return Handle(self, Slot(actor, self._slots))

    def call(
        self, raw: object, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], n: int
    ) -> Any:
        if isinstance(raw, Slot):  # a party of a shared process: its own object there
            invoke = raw.actor.invoke.options(num_returns=n)
            return invoke.remote(raw.slot, method.__name__, *args, **kwargs)
        return getattr(raw, method.__name__).options(num_returns=n).remote(*args, **kwargs)

    def put(self, value: T) -> Ref[T]:
        return ray.put(value)  # type: ignore[return-value]  # an ObjectRef: to the type checker, the value

    def get(self, ref: Ref[T]) -> T:
        return cast(T, ray.get(cast(Any, ref)))

    def get_all(self, refs: Sequence[Ref[T]]) -> list[T]:
        return list(ray.get(list(refs)))  # type: ignore[arg-type]  # ObjectRefs: to the type checker, values

    def wait(self, refs: Sequence[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
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

    def kill(self, handle: Handle[Any]) -> None:
        """Stop the party's process at once; a party of a shared process takes the others there with it
        (compact placement runs no fault that kills a party: the configuration refuses it)."""
        raw = handle.raw
        if isinstance(raw, Slot):
            for share, actor in list(self._shared.items()):
                if actor is raw.actor:
                    del self._shared[share]  # the next party of that share starts a new process
            raw = raw.actor
        ray.kill(cast(Any, raw), no_restart=True)

    def shutdown(self) -> None:
        if self._owns:
            stop_autoscaler_monitor()
            ray.shutdown()


def stop_autoscaler_monitor() -> int | None:
    """Stop the autoscaler monitor of the private Ray instance this driver started, at once (SIGKILL), before
    ``ray.shutdown``; return its pid (``None``: no monitor of this driver's own is running).

    Why: ``ray.shutdown`` stops each of the instance's processes in turn with SIGTERM and a second's grace,
    and the monitor takes the whole second every time: a second of every run's end (``ray.shutdown`` after
    ``ray.init`` and three actors, 2026-11-28: 1.38 s → 0.37 s). A private instance runs on one machine with
    fixed resources: its monitor has nothing to scale and nothing to save. Only a driver that started the
    instance calls this (a joined cluster's processes are not this driver's); Ray's private handles are read
    defensively, so a Ray without them shuts down as before."""
    node = getattr(ray._private.worker, "_global_node", None)  # the node this driver started, if it did
    processes = getattr(node, "all_processes", None)
    if not isinstance(processes, dict):
        return None
    for info in processes.get("monitor", []):
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
            return int(process.pid)
    return None
