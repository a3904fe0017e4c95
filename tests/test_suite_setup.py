"""What the suite sets up before its first test (tests/conftest.py), checked where a test can see it."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_of_the_checkout_has_its_bytecode_before_the_tests_run(request):
    """``compile_checkout`` wrote each module's bytecode, current with its source (the size and time Python
    checks), so the processes the suite starts read it instead of compiling the module again, even where
    ``PYTHONDONTWRITEBYTECODE`` stops them from writing it themselves; modules that no test imports too."""
    # this folder's conftest, as pytest registered it (`import conftest` could find another folder's)
    packages = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py")).CHECKOUT_PACKAGES
    stale = []
    sources = [path for name in packages for path in sorted((ROOT / name).rglob("*.py"))]
    assert len(sources) > 100  # the packages were found
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.is_file():
            stale.append(f"{source.relative_to(ROOT)}: none")
            continue
        # PEP 552's header: magic, flags (0: checked by time and size), the source's time and size
        _, flags, mtime, size = struct.unpack("<4sIII", cached.read_bytes()[:16])
        info = source.stat()
        if (flags, mtime, size) != (0, int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF):
            stale.append(f"{source.relative_to(ROOT)}: out of date")
    assert not stale, stale[:10]


class _Item:
    """What :func:`longest_first` reads of a collected test: its id and whether it is marked ``slow``."""

    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.slow else None


def test_a_spread_run_takes_its_longest_modules_first_and_keeps_each_modules_order(request):
    """The order pytest-xdist hands modules out in (``longest_first``): a module of SLOW_MODULES before
    one with slow tests, that one before a quick module with more tests, ties in collection order, and each
    module's tests in their own order."""
    conftest = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))
    cluster = conftest.SLOW_MODULES[0]
    items = [
        *(_Item(f"tests/test_quick_a.py::test_{i}") for i in range(30)),  # 3.0
        _Item("tests/test_two_slow.py::test_b", slow=True),  # 10.0
        _Item("tests/test_two_slow.py::test_a", slow=True),
        _Item("tests/test_quick_b.py::test_0"),  # 0.1
        _Item(f"{cluster}::test_one", slow=True),  # 35.0: the module alone says it is long
        *(_Item(f"tests/test_quick_c.py::test_{i}") for i in range(30)),  # 3.0, after test_quick_a
    ]
    ordered = [item.nodeid for item in conftest.longest_first(items)]
    modules = list(dict.fromkeys(nodeid.split("::")[0] for nodeid in ordered))
    assert modules == [
        cluster,
        "tests/test_two_slow.py",
        "tests/test_quick_a.py",
        "tests/test_quick_c.py",
        "tests/test_quick_b.py",
    ]
    assert sorted(ordered) == sorted(item.nodeid for item in items)
    for module in modules:  # each module's tests stay together and in their order
        own = [item.nodeid for item in items if item.nodeid.startswith(module + "::")]
        first = ordered.index(own[0])
        assert ordered[first : first + len(own)] == own
