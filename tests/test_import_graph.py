"""No module of the platform imports another that imports it back, directly or around a circle.

Why: a circle makes the import order matter (a name used before its module finished loading), hides which
module owns a concept, and forces imports into function bodies to break it. The graph is read from the
source (every ``import`` and ``from … import``, at the top or inside a function, since a lazy import is
still a dependency), so a circle is found before it bites at run time. ``from package import submodule``
depends on the submodule, not on the package's ``__init__``: a package importing its own submodules is
how packages are built, not a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sifl_ray", "bench")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the platform's modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_platform_has_no_import_circle():
    assert circles(import_graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ],
)
def test_the_circle_finder_finds_circles(edges, expected):
    assert circles(edges) == expected


def test_the_graph_sees_lazy_imports_and_submodules():
    """The graph holds a function-level import (seeding's users import it lazily too), and a package's
    ``from package import submodule`` as an edge to the submodule."""
    graph = import_graph()
    assert "sifl_ray.party_seeds" in graph["sifl_ray.arms.dp_fedavg"]  # imported inside CentralNoise.__call__
    assert "sifl_ray.arms.builtin" in graph["sifl_ray.arms"]
    assert "sifl_ray.arms" not in graph["sifl_ray.arms.builtin"]
