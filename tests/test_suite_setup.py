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
