"""The parties are called through their typed handles only (:mod:`sifl_ray.handles`), and every handle
method names a method its actor really has."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from actors.aggregator import AggregatorActor
from actors.client_worker import ClientWorkerActor
from actors.evaluator import EvaluatorActor
from actors.server import ServerActor
from sifl_ray import handles
from sifl_ray.handles import (
    AggregatorHandle,
    EvaluatorHandle,
    KeyHolderHandle,
    PartyHandle,
    ServerHandle,
    WorkerHandle,
)
from sifl_ray.sequential import SequentialBackend

ROOT = Path(__file__).resolve().parents[1]


def _string_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, method)`` of every ``<x>.call(<handle>, "method", ...)`` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "call"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_module_but_the_handles_names_a_remote_method_in_a_string():
    handles_file = Path(inspect.getfile(handles)).resolve()
    offenders = []
    for path in sorted((ROOT / "sifl_ray").rglob("*.py")):
        if path.resolve() == handles_file:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        offenders += [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in _string_calls(tree)]
    assert not offenders, "call the party through its handle (sifl_ray.handles):\n" + "\n".join(offenders)


ACTORS = {
    PartyHandle: (ServerActor, AggregatorActor, ClientWorkerActor, EvaluatorActor),
    KeyHolderHandle: (ServerActor, AggregatorActor),
    ServerHandle: (ServerActor,),
    AggregatorHandle: (AggregatorActor,),
    WorkerHandle: (ClientWorkerActor,),
    EvaluatorHandle: (EvaluatorActor,),
}


@pytest.mark.parametrize("handle", list(ACTORS), ids=lambda c: c.__name__)
def test_every_handle_method_calls_a_method_its_actors_have(handle):
    names = []
    for name, fn in vars(handle).items():
        if not inspect.isfunction(fn) or name.startswith("_"):
            continue
        calls = _string_calls(ast.parse(textwrap.dedent(inspect.getsource(fn))))
        assert len({m for _, m in calls}) == 1, f"{handle.__name__}.{name} must call one remote method"
        names.append(calls[0][1])
    assert names
    for actor in ACTORS[handle]:
        missing = [m for m in names if not callable(getattr(actor, m, None))]
        assert not missing, f"{actor.__name__} has no {missing}"


def test_a_handle_returns_refs_and_names_the_values_of_a_multi_valued_call():
    class Shard:
        def reduce(self, arm, t, key_epoch, *partials, shard=0, plan=None):
            total = sum(partials)
            return (total, {"shard": shard}) if plan is None else (total, {"shard": shard}, total - plan)

    backend = SequentialBackend()
    shard = AggregatorHandle(backend, Shard())
    plain = shard.reduce("fl", 0, 0, [backend.put(1), backend.put(2)], shard=3)
    assert (backend.get(plain.aggregate), backend.get(plain.info), plain.summed) == (3, {"shard": 3}, None)
    masked = shard.reduce("fl", 0, 0, [backend.put(1), backend.put(2)], shard=1, plan=backend.put(1))
    assert [backend.get(r) for r in (masked.aggregate, masked.info, masked.summed)] == [3, {"shard": 1}, 2]
