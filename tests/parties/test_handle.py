"""The driver calls a party by the host's method object, never by a string; a host's results of several
objects come back as its own record; and a type checker reads a call through the handle."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest
import torch

from sifl_ray.backends import Placement
from sifl_ray.backends.local import LocalBackend
from sifl_ray.parties import aggregator, evaluator, server, workers
from sifl_ray.parties.handle import Handle, num_returns, returns
from sifl_ray.parties.messages import Finished, MaskedTrained, Reduced, ServerInfo, Trained, WorkerReport
from sifl_ray.parties.process import Host

ROOT = Path(__file__).resolve().parents[2]
HOSTS = (
    server.ServerHost,
    aggregator.AggregatorHost,
    workers.ClientWorker,
    workers.WorkerHost,
    evaluator.Evaluator,
    evaluator.EvaluatorHost,
)


def remote_methods() -> set[str]:
    """Every public method a party's host answers."""
    return {
        name
        for host in HOSTS
        for name, fn in inspect.getmembers(host, inspect.isfunction)
        if not name.startswith("_")
    }


def string_calls(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` wherever a host's method is named by a string: an argument of a ``.call``,
    ``getattr``'s attribute, or a raw actor call ``x.<method>.remote(...)`` that bypasses the handle."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        named = isinstance(func, ast.Attribute) and func.attr == "call"
        named |= isinstance(func, ast.Name) and func.id == "getattr"
        if named:
            found += [
                (node.lineno, a.value)
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value in names
            ]
        raw = (
            isinstance(func, ast.Attribute)
            and func.attr == "remote"
            and isinstance(func.value, ast.Attribute)
        )
        if raw and func.value.attr in names:  # type: ignore[union-attr]
            found.append((node.lineno, func.value.attr))  # type: ignore[union-attr]
    return sorted(found)


def test_no_remote_method_is_named_by_a_string_anywhere():
    names = remote_methods()
    offenders = []
    for folder in ("sifl_ray", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            offenders += [
                f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in string_calls(tree, names)
            ]
    assert not offenders, "call the party through its handle, by the host's method:\n" + "\n".join(offenders)


def test_the_scan_finds_each_way_of_naming_a_method_by_a_string():
    code = textwrap.dedent(
        """
        backend.call(handle, "finish_round", 1)
        getattr(actor, "train_round")(1)
        actor.reduce.remote(1)
        handle.call(ServerHost.finish_round, 1)  # the way to call: not found
        """
    )
    found = string_calls(ast.parse(code), {"finish_round", "train_round", "reduce"})
    assert found == [(2, "finish_round"), (3, "train_round"), (4, "reduce")]


def test_every_declared_record_has_as_many_objects_as_the_host_returns():
    """A method declared with :func:`returns` gives back its record: each item its own reference, the
    record rebuilt from them, its fields named as the host's return type names them."""
    backend = LocalBackend()
    host = backend.spawn(Placement(), server.ServerHost)
    spec_fields = [
        (m, m.returns)
        for h in HOSTS
        for _, m in inspect.getmembers(h, inspect.isfunction)
        if hasattr(m, "returns")
    ]
    assert {m.__qualname__ for m, _ in spec_fields} >= {
        "ServerHost.finish_round",
        "AggregatorHost.reduce",
        "AggregatorHost.reduce_masked",
        "ClientWorker.train_round",
        "ClientWorker.train_masked",
        "ClientWorker.secagg_unmask",
    }
    for method, (record, count, fixed) in spec_fields:
        hints = inspect.signature(method).return_annotation
        assert record.__name__ in str(hints).replace("Step[", "Step "), method.__qualname__
        assert count is not None or fixed >= 2
    assert num_returns(workers.ClientWorker.train_round, ("fl", 0, None, None, [], [(0, 1), (1, 2)]), {}) == 3
    assert num_returns(workers.ClientWorker.train_masked, ("fl", 0, None, None, [], [(0, 1)], {}), {}) == 3
    assert num_returns(server.ServerHost.finish_round, ("fl", 0), {}) == 2
    assert num_returns(server.ServerHost.initial_broadcast, ("fl", None), {}) == 1
    assert isinstance(host, Handle)


class _Host(Host):
    @returns(Finished)
    def finish(self, t: int) -> Finished:
        return Finished(torch.full((2,), float(t)), ServerInfo(decode_s=0.0, encode_s=0.0, step_metrics={}))

    @returns(Trained, count=lambda bounds: len(bounds) + 1)
    def train(self, bounds: list[tuple[int, int]]) -> Trained:
        return Trained.of([torch.ones(b - a) for a, b in bounds], WorkerReport(worker=0, round=0))

    def plain(self, x: int) -> int:
        return x + 1


def test_a_handle_returns_the_hosts_record_with_a_reference_in_each_field():
    backend = LocalBackend()
    h = backend.spawn(Placement(), _Host)
    finished = h.call(_Host.finish, 3)
    assert isinstance(finished, Finished)
    assert torch.equal(backend.get(finished.broadcast), torch.full((2,), 3.0))
    assert backend.get(finished.info)["decode_s"] == 0.0
    trained = h.call(_Host.train, [(0, 1), (1, 4)])
    assert isinstance(trained, Trained) and len(trained.partials) == 2
    assert [backend.get(p).numel() for p in trained.partials] == [1, 3]
    assert backend.get(trained.report).worker == 0
    assert backend.get(h.call(_Host.plain, 1)) == 2
    with pytest.raises(TypeError, match="two fields or a count"):
        returns(WorkerReport)  # type: ignore[arg-type]


def test_a_secure_workers_record_keeps_the_exact_sum_apart_from_its_partials():
    out = MaskedTrained.of(["p0", "p1"], "exact", "report")  # type: ignore[list-item, arg-type]
    assert (out.partials, out.exact, out.report) == (["p0", "p1"], "exact", "report")
    assert MaskedTrained._make(list(out)) == out
    assert Reduced._make(["a", "i"]) == Reduced("a", "i")  # type: ignore[arg-type]
