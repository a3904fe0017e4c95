"""The backend interface (:class:`sifl_ray.backends.Backend`): every registered backend has every member,
with a signature that accepts every call the interface allows, declares what it can do, and the in-process
backend's ``wait`` and ``is_lost`` do what the interface says (nothing is late in-process, nothing is lost).
No Ray is started: ``RayBackend`` is checked on an instance made without its constructor, which would
start Ray."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import ray

from sifl_ray.backends import BACKENDS, Backend, Capabilities, Placement
from sifl_ray.backends.local import LocalBackend
from sifl_ray.backends.ray import RayBackend
from sifl_ray.parties.handle import collect

P = inspect.Parameter
ROOT = Path(__file__).resolve().parents[1]


def without_constructor(cls: type) -> object:
    return object.__new__(cls)


def protocol_methods() -> list[str]:
    return sorted(k for k, v in vars(Backend).items() if inspect.isfunction(v) and not k.startswith("_"))


def incompatibilities(impl: inspect.Signature, proto: inspect.Signature) -> list[str]:
    """Ways in which a call that ``proto`` allows would fail on ``impl`` (both without ``self``)."""
    have = impl.parameters
    kinds = {p.kind for p in have.values()}
    problems = []
    for p in proto.parameters.values():
        q = have.get(p.name)
        if p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            if p.kind not in kinds:
                problems.append(f"no {'*' if p.kind is P.VAR_POSITIONAL else '**'}{p.name}")
        elif q is None:
            if not (p.kind is P.KEYWORD_ONLY and P.VAR_KEYWORD in kinds):
                problems.append(f"no parameter {p.name!r}")
        elif q.kind is not p.kind and not (q.kind is P.POSITIONAL_OR_KEYWORD and p.kind is P.KEYWORD_ONLY):
            problems.append(f"{p.name!r} is {q.kind.description}, expected {p.kind.description}")
        elif p.default is not P.empty and q.default is P.empty:
            problems.append(f"{p.name!r} has no default")
    positional = [
        p.name for p in proto.parameters.values() if p.kind in (P.POSITIONAL_OR_KEYWORD, P.POSITIONAL_ONLY)
    ]
    have_positional = [
        p.name for p in have.values() if p.kind in (P.POSITIONAL_OR_KEYWORD, P.POSITIONAL_ONLY)
    ]
    if have_positional[: len(positional)] != positional:
        problems.append(f"positional parameters are not {positional} in this order")
    extra = [
        q.name
        for q in have.values()
        if q.name not in proto.parameters and q.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
    ]
    problems += [
        f"extra parameter {name!r} has no default" for name in extra if have[name].default is P.empty
    ]
    return problems


def unbound(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_registered_backend_implements_the_protocol(name):
    cls = BACKENDS[name]
    backend = without_constructor(cls)
    assert isinstance(backend, Backend)
    assert backend.name == name  # the value of the configuration that chose it
    assert backend.description == ""  # before (or without) connecting, there is nothing to say
    assert isinstance(backend.capabilities, Capabilities)
    assert callable(getattr(cls, "from_config", None))
    for method in protocol_methods():
        impl = inspect.signature(getattr(backend, method))
        proto = unbound(inspect.signature(getattr(Backend, method)))
        assert incompatibilities(impl, proto) == [], (name, method)


def test_protocol_names_what_the_platform_calls():
    """Every method the round and the runner call, and only methods: a member lost from the protocol
    would stop being checked above."""
    expected = {
        "available",
        "call",
        "cluster",
        "get",
        "get_all",
        "is_lost",
        "kill",
        "put",
        "shutdown",
        "spawn",
        "wait",
    }
    assert set(protocol_methods()) == expected
    assert set(Backend.__annotations__) == {"name", "description", "capabilities"}


def test_the_check_catches_a_missing_member_and_a_wrong_signature():
    members = {k: v for k, v in vars(LocalBackend).items() if k != "wait"}
    assert not isinstance(type("NoWait", (), members)(), Backend)

    class Narrow:
        def wait(self, refs, deadline): ...  # no default, and a name the round does not pass

    narrow = incompatibilities(inspect.signature(Narrow().wait), unbound(inspect.signature(Backend.wait)))
    assert "no parameter 'timeout'" in narrow and "extra parameter 'deadline' has no default" in narrow


def test_nothing_outside_the_backends_asks_a_backend_its_name():
    """What differs between backends is read from their capabilities: a branch on ``backend.name`` (or on
    the name of a backend class) anywhere else is the smell this package removes."""
    offenders = []
    for path in sorted((ROOT / "sifl_ray").rglob("*.py")):
        if "backends" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if (
                "backend.name ==" in line
                or "backend.name !=" in line
                or "isinstance(backend, RayBackend" in line
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert not offenders


def test_local_wait_returns_everything_ready():
    backend = LocalBackend()
    handle = backend.spawn(Placement(), list, [3, 1, 2])
    refs = [backend.put(1), handle.call(list.copy), backend.put(None)]
    for timeout in (None, 0.0):
        ready, late = backend.wait(refs, timeout)
        assert ready == refs and late == []
    assert backend.wait([], 0.0) == ([], [])
    assert backend.get_all(refs) == [1, [3, 1, 2], None]


def test_local_is_lost_is_false_so_errors_surface_as_themselves():
    for err in (RuntimeError("boom"), ray.exceptions.RayActorError(), KeyboardInterrupt()):
        assert LocalBackend().is_lost(err) is False

    class FailedCall(LocalBackend):
        def get(self, ref):
            raise ValueError("a bug in the party")

    backend = FailedCall()
    with pytest.raises(ValueError, match="a bug"):  # not PartyLost: nothing to restore, a bug to fix
        collect(backend, backend.put(1), "server", 0, arm="fl", t=0)


def test_the_local_backend_cannot_kill_and_says_so():
    backend = LocalBackend()
    assert not backend.capabilities.kill and not backend.capabilities.own_processes
    with pytest.raises(RuntimeError, match="cannot kill"):
        backend.kill(backend.spawn(Placement(), dict))


def test_ray_is_lost_tells_a_dead_actor_from_a_bug():
    assert RayBackend.is_lost(ray.exceptions.RayActorError())
    assert not RayBackend.is_lost(ValueError("a bug in the party"))
    assert RayBackend.capabilities.kill and RayBackend.capabilities.placement
