"""The platform's packages have an order, and no import goes up it.

Why: a package that imports one above it makes the two one knot: neither can be read, tested or replaced
alone, and a circle is one edit away. The order follows the protocol, from what every part needs to what
a user runs: the configuration and the codes at the bottom, then the privacy mathematics, the arms, the
parties, the backends that host them, the round, the runner, and the commands at the top. Every import
counts, at the top of a module or inside a function, since a deferred import is still a dependency; a
deferred import must say which import cost it saves (``# deferred: torch, ...``), so that it is not a
way round the order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_graph import import_graph

ROOT = Path(__file__).resolve().parents[1]

#: Low to high: a unit (a package of ``sifl_ray`` or a root module) may import its own layer's other units
#: only where this lists them in one tuple, and any unit of a lower layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "seeding", "progress", "ray_output", "logging", "device", "canvas"),
    ("config",),
    ("specs", "checkpoint", "faults"),
    ("party_seeds",),
    ("coding",),
    ("privacy",),
    ("data", "models"),
    ("optim",),
    ("arms",),
    ("plots",),
    ("parties",),
    ("backends",),
    ("aggregation",),
    ("round",),
    ("clock",),
    ("runner",),
    ("describe", "attacks", "preload"),
    ("api",),
    ("cli",),
)
LEVEL = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
#: Units of one layer that import each other's (allowed, and listed, so that a new one is seen).
SIDEWAYS = {("specs", "config"), ("checkpoint", "logging")}
#: Heavy libraries a deferred import may name as the cost it saves.
COSTS = ("torch", "ray", "cryptography", "scipy", "numpy", "dp_accounting", "omegaconf", "matplotlib")


def unit(module: str) -> str:
    """``sifl_ray.parties.server`` → ``parties``; ``sifl_ray.round`` → ``round``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a unit to one of a higher layer (or of its own layer, unlisted)."""
    out = []
    for source, targets in sorted(graph.items()):
        a = unit(source)
        for target in sorted(targets):
            b = unit(target)
            if a == b or "__init__" in (a, b):
                continue
            if LEVEL[b] > LEVEL[a] or (LEVEL[b] == LEVEL[a] and (a, b) not in SIDEWAYS):
                out.append(f"{source} -> {target}")
    return out


def test_every_package_has_its_place_in_the_order():
    units = {unit(m) for m in import_graph() if m.startswith("sifl_ray.")} - {"__init__"}
    assert units - set(LEVEL) == set(), "give the new package its layer in LAYERS"
    assert set(LEVEL) - units == set(), "a package in LAYERS that no longer exists"


def test_no_import_goes_up_the_order():
    graph = {m: {t for t in ts if t.startswith("sifl_ray.")} for m, ts in import_graph().items()}
    assert upward({m: ts for m, ts in graph.items() if m.startswith("sifl_ray.")}) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"sifl_ray.coding.keys": {"sifl_ray.arms.base"}}, ["sifl_ray.coding.keys -> sifl_ray.arms.base"]),
        ({"sifl_ray.round": {"sifl_ray.parties.server"}}, []),
        ({"sifl_ray.describe": {"sifl_ray.attacks.task"}}, ["sifl_ray.describe -> sifl_ray.attacks.task"]),
        ({"sifl_ray.specs": {"sifl_ray.config.names"}}, []),
    ],
)
def test_the_check_finds_an_upward_import(edges, expected):
    assert upward(edges) == expected


def deferred_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, comment)`` of every import of the platform inside a function of ``path``: the comment on
    its line or the line above."""
    src = path.read_text().splitlines()
    out = []
    seen = set()
    for fn in ast.walk(ast.parse("\n".join(src))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in seen:
                continue
            seen.add(node.lineno)
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if (
                getattr(node, "level", 0) or (module or "").startswith("sifl_ray")
            ) and module != "__future__":
                here, above = src[node.lineno - 1], src[node.lineno - 2] if node.lineno > 1 else ""
                inline = here.partition("#")[2].strip()
                comment = inline if inline.startswith("deferred:") else ""
                comment = comment or (above.strip()[1:] if above.strip().startswith("#") else inline)
                out.append((node.lineno, comment.strip()))
    return out


def test_a_deferred_import_names_the_import_cost_it_saves():
    offenders = []
    for path in sorted((ROOT / "sifl_ray").rglob("*.py")):
        for line, comment in deferred_imports(path):
            named = any(cost in comment.lower() for cost in COSTS)
            if not comment.startswith("deferred:") or not named:
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {comment or '(no comment)'}")
    assert offenders == [], "import it at the top, or say what deferring it saves:\n" + "\n".join(offenders)


def test_the_cost_check_reads_the_comment_on_the_line_or_above(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n"
        "    from sifl_ray import runner  # deferred: torch, for the commands that train\n"
        "    # deferred: cryptography, for secure arms only\n"
        "    from sifl_ray.parties import secure\n"
        "    from sifl_ray import errors\n"
    )
    assert deferred_imports(module) == [
        (2, "deferred: torch, for the commands that train"),
        (4, "deferred: cryptography, for secure arms only"),
        (5, ""),
    ]
