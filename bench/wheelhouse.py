"""``python -m bench wheelhouse``: the wheels that carry this platform to a GPU machine with no internet.

A lent GPU machine (and many a cluster's GPU node) has Python with a CUDA build of PyTorch and the usual
scientific stack, but no package index: Ray, OmegaConf, ``cryptography``, ``dp-accounting`` and their own
needs are not there, and ``pip install`` cannot fetch them. This command downloads, here, the wheels of
exactly what is missing there, for that machine's Python, at the versions installed here (the versions the
tests ran with), so that ``python -m bench gpu`` runs there after one offline install::

    python -m bench wheelhouse --have bench/gpu_image.txt        # here: .whl/, and its size
    # there, in the checkout:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:. python3 -m bench gpu

What is carried is the closure of ``sifl-ray``'s requirements, read from the installed distributions'
metadata with the markers evaluated for the target Python (``--python``), less the packages named in
``--have`` (the target's ``pip list``, one name per line) and less PyTorch, which is never carried: the
target's own CUDA build is the one to measure. Extras are not followed: ``ray[default]`` brings the
dashboard's web stack, which a simulation does not need (``ray.init(include_dashboard=False)``).

Ray's wheel is 79 MB, over what some transports carry in one go (the lent machines take 64 MiB with the
checkout). Two parts of it serve no Python run and are left out of the carried copy: ``ray/jars`` (the Java
workers' runtime, 32 MB) and the dashboard's JavaScript source maps. The copy is a valid wheel (its
``RECORD`` lists what it holds) and is named as the original.

The last line is ``RESULT wheelhouse wheels=<n> mib=<total> max_mib=<--max-mib> status=pass|over``; the
exit code is 1 when the wheels exceed ``--max-mib``, 2 for a wheel pip cannot find.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sifl_ray.errors import SiflError

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024

#: Never carried: the target's own CUDA build of PyTorch (and what it brings) is the one to run and measure.
NEVER = ("torch", "triton", "nvidia-")

#: Members of Ray's wheel that no Python run reads: the Java workers' runtime and the dashboard's source maps.
RAY_DROPPED = ("ray/jars/",)
RAY_DROPPED_SUFFIXES = (".js.map",)

#: The platform tags pip matches for a manylinux x86-64 machine, newest first (pip matches each exactly).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def target_environment(python: str) -> dict[str, str]:
    """The marker environment of a CPython ``python`` (``3.12``) on x86-64 Linux: this machine's, with the
    version replaced, so that ``typing_extensions; python_version < "3.13"`` is decided for the target."""
    env = {key: str(value) for key, value in default_environment().items()}
    env.update(
        python_version=python,
        python_full_version=f"{python}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
    )
    return env


class WheelhouseError(SiflError, RuntimeError):
    """A wheel that cannot be chosen or fetched: said in one line, exit code 2."""


def closure(
    root: str,
    env: Mapping[str, str],
    version_of: Callable[[str], str] = metadata.version,
    requires_of: Callable[[str], list[str] | None] = metadata.requires,
) -> dict[str, str]:
    """Every distribution ``root`` needs, transitively, as ``{canonical name: installed version}``.

    Requirements are read from the installed metadata, markers evaluated in ``env`` with no extra: a
    package's optional parts are not followed. A requirement not installed here is an error: its version
    would be a guess.
    """
    found: dict[str, str] = {}
    missing: list[str] = []
    stack = [root]
    while stack:
        for line in requires_of(stack.pop()) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            name = canonicalize_name(req.name)
            if name in found:
                continue
            try:
                found[name] = version_of(req.name)
            except metadata.PackageNotFoundError:
                missing.append(str(req))
                continue
            stack.append(req.name)
    if missing:
        raise WheelhouseError(f"not installed here, so no version to carry: {', '.join(sorted(missing))}")
    return found


def read_have(path: Path | None) -> set[str]:
    """The names in a ``--have`` file: one per line, as ``pip list``, ``pip freeze`` or a bare list writes
    them (a version after the name, ``==`` or spaces, is ignored; ``#`` starts a comment)."""
    if path is None:
        return set()
    if not path.is_file():
        raise WheelhouseError(f"--have {path}: no such file (write the target's `pip list` into it)")
    names: set[str] = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith(("Package", "---")):
            continue
        names.add(canonicalize_name(line.replace("==", " ").split()[0]))
    return names


def to_carry(needed: Mapping[str, str], have: Iterable[str]) -> dict[str, str]:
    """What the target lacks: ``needed`` less ``have`` and less :data:`NEVER`, with local versions
    (``2.13.0+cpu``) refused: a package index holds no such build."""
    have = set(have)
    carry = {}
    for name, version in sorted(needed.items()):
        if name in have or any(name == n or (n.endswith("-") and name.startswith(n)) for n in NEVER):
            continue
        if "+" in version:
            raise WheelhouseError(f"{name} {version} is a local build (no index holds it): name it in --have")
        carry[name] = version
    return carry


def prune_ray(wheel: Path) -> tuple[int, int]:
    """Rewrites Ray's wheel in place without :data:`RAY_DROPPED` members; returns the bytes before and after.

    ``RECORD`` loses the lines of what was left out, so the wheel still lists exactly what it holds.
    """
    before = wheel.stat().st_size
    kept = wheel.with_suffix(".pruning")

    def dropped(member: str) -> bool:
        return member.startswith(RAY_DROPPED) or member.endswith(RAY_DROPPED_SUFFIXES)

    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(kept, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if dropped(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not dropped(line.split(",", 1)[0])).encode()
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    kept.replace(wheel)
    return before, wheel.stat().st_size


def download(name: str, version: str, python: str, out: Path) -> Path:
    """One wheel, ``name==version``, for CPython ``python`` on manylinux x86-64, without its requirements
    (the closure is ours to decide). It is fetched into a folder of its own, so that the file found is this
    download's and not a wheel already in ``out``."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    with tempfile.TemporaryDirectory(dir=out) as fresh:
        command = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp", *platforms,
            "-d", fresh, f"{name}=={version}",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted(Path(fresh).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            tail = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise WheelhouseError(f"no wheel of {name}=={version} for Python {python}: {tail}")
        return wheels[0].replace(out / wheels[0].name)


def main(argv: list[str] | None = None) -> int:
    """Download what the target lacks, prune Ray, print one line per wheel and the total."""
    parser = argparse.ArgumentParser(prog="python -m bench wheelhouse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.12", help="the target's Python, MAJOR.MINOR (default 3.12)")
    parser.add_argument("--have", type=Path, help="the target's packages, one name per line (pip list)")
    parser.add_argument("--out", type=Path, default=ROOT / ".whl", help="where the wheels go (default .whl/)")
    parser.add_argument("--max-mib", type=float, default=60.0, help="exit 1 above this total (default 60)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be carried, download nothing")
    args = parser.parse_args(argv)
    try:
        return _wheelhouse(args)
    except WheelhouseError as error:
        print(f"wheelhouse: {error}", file=sys.stderr)
        return 2


def _wheelhouse(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"3\.\d{1,2}", args.python):
        raise WheelhouseError(f"--python {args.python}: expected MAJOR.MINOR of a CPython 3, such as 3.12")
    carry = to_carry(closure("sifl-ray", target_environment(args.python)), read_have(args.have))
    if args.dry_run:
        for name, version in carry.items():
            print(f"{name}=={version}")
        print(f"RESULT wheelhouse wheels={len(carry)} dry_run=true python={args.python}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, version in carry.items():
        wheel = download(name, version, args.python, args.out)
        note = ""
        if name == "ray":
            before, _ = prune_ray(wheel)
            note = f"  (pruned from {before / MIB:.1f}: no jars, no source maps)"
        size = wheel.stat().st_size
        total += size
        print(f"{size / MIB:7.2f} MiB  {wheel.name}{note}")
    status = "pass" if total / MIB <= args.max_mib else "over"
    print(
        f"RESULT wheelhouse wheels={len(carry)} mib={total / MIB:.1f} max_mib={args.max_mib:g} "
        f"status={status} python={args.python} out={args.out}"
    )
    return 0 if status == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
