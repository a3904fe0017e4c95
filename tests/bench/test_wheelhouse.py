"""``python -m bench wheelhouse``: what it carries to an offline GPU machine (the closure of the installed
requirements, markers decided for the target's Python, less what the target has, never PyTorch), Ray's wheel
pruned and still installable by pip, and one real download from the package index."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench.wheelhouse import (
    RAY_DROPPED,
    WheelhouseError,
    closure,
    download,
    main,
    prune_ray,
    read_have,
    target_environment,
    to_carry,
)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "bench" / "gpu_image.txt"

#: A made-up installed world: name -> (version, requirement lines).
WORLD = {
    "app": (
        "1.0",
        ["lib>=1", 'typing-extensions; python_version < "3.13"', "web[fast]", "extra-only; extra == 'dev'"],
    ),
    "lib": ("2.1", ["base"]),
    "base": ("0.3", None),
    "web": ("5.0", ["uvloop; extra == 'fast'"]),
    "typing-extensions": ("4.15", None),
}


def _closure(python: str, world=WORLD) -> dict[str, str]:
    def version_of(name: str) -> str:
        from importlib.metadata import PackageNotFoundError

        if name not in world:
            raise PackageNotFoundError(name)
        return world[name][0]

    return closure("app", target_environment(python), version_of, lambda name: world[name][1])


def test_closure_follows_requirements_decides_markers_for_the_target_and_skips_extras() -> None:
    assert _closure("3.12") == {"lib": "2.1", "base": "0.3", "typing-extensions": "4.15", "web": "5.0"}
    # the same world for a newer Python: the marker drops typing-extensions there
    assert "typing-extensions" not in _closure("3.13")


def test_closure_refuses_a_requirement_not_installed_here() -> None:
    world = {**WORLD, "lib": ("2.1", ["ghost>=1"])}
    with pytest.raises(WheelhouseError, match="ghost"):
        _closure("3.12", world)


def test_the_platforms_closure_has_what_a_gpu_image_lacks_and_not_rays_dashboard_stack() -> None:
    needed = closure("sifl-ray", target_environment("3.12"))
    for name in ("ray", "omegaconf", "cryptography", "dp-accounting", "numpy", "torch", "tensorboard"):
        assert name in needed, name
    # ray[default]'s web stack is an extra, not followed
    for name in ("opencensus", "py-spy", "smart-open", "virtualenv", "colorful"):
        assert name not in needed, name


def test_read_have_takes_pip_list_freeze_and_bare_names(tmp_path: Path) -> None:
    listing = tmp_path / "have.txt"
    listing.write_text(
        "# a comment\nPackage    Version\n---------- -------\nNumPy      2.5.2\n"
        "ruamel.yaml==0.18\ntyping_extensions\n\n  scikit-learn  # inline comment\n"
    )
    assert read_have(listing) == {"numpy", "ruamel-yaml", "typing-extensions", "scikit-learn"}
    assert read_have(None) == set()


def test_to_carry_leaves_out_what_the_target_has_and_never_carries_torch() -> None:
    needed = {"ray": "2.60.0", "numpy": "2.4.6", "torch": "2.11.0", "nvidia-cublas": "13.0", "triton": "3.6"}
    assert to_carry(needed, {"numpy"}) == {"ray": "2.60.0"}
    with pytest.raises(WheelhouseError, match="local build"):
        to_carry({"torchaudio": "2.13.0+cpu"}, set())


def test_the_gpu_images_list_has_its_torch_and_lacks_ray() -> None:
    have = read_have(IMAGE)
    assert {"torch", "numpy", "scipy", "tensorboard", "matplotlib", "scikit-learn"} <= have
    assert not {"ray", "omegaconf", "cryptography", "dp-accounting"} & have
    carry = to_carry(closure("sifl-ray", target_environment("3.12")), have)
    assert {"ray", "omegaconf", "cryptography", "dp-accounting"} <= set(carry)


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    record = "".join(f"{name},,\n" for name in members) + "fake-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("fake-1.0.dist-info/RECORD", record)
    return path


def test_prune_ray_drops_jars_and_source_maps_and_pip_still_installs_it(tmp_path: Path) -> None:
    members = {
        "fake/__init__.py": b"VALUE = 7\n",
        f"{RAY_DROPPED[0]}ray_dist.jar": b"\0" * 200_000,
        "fake/dashboard/main.js": b"var a = 1;\n",
        "fake/dashboard/main.js.map": b"{}" * 50_000,
        "fake-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n",
        "fake-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    wheel = _wheel(tmp_path / "fake-1.0-py3-none-any.whl", members)
    before, after = prune_ray(wheel)
    assert after < before / 2
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        record = z.read("fake-1.0.dist-info/RECORD").decode()
    assert not any(n.startswith(RAY_DROPPED) or n.endswith(".js.map") for n in names)
    assert {"fake/__init__.py", "fake/dashboard/main.js"} <= names
    assert ".jar" not in record and ".js.map" not in record and "fake/__init__.py" in record

    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True)
    out = subprocess.run(
        [sys.executable, "-c", "import fake; print(fake.VALUE)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "7"
    assert not (target / "ray" / "jars").exists()


@pytest.mark.slow  # a download from the package index
def test_download_fetches_one_real_wheel_for_the_target_python(tmp_path: Path) -> None:
    """A real download from the package index (the one CI installs from): a small pure-Python wheel."""
    from importlib.metadata import version

    wheel = download("omegaconf", version("omegaconf"), "3.12", tmp_path)
    assert wheel.name.startswith(f"omegaconf-{version('omegaconf')}-") and wheel.suffix == ".whl"
    with pytest.raises(WheelhouseError, match=r"no wheel of omegaconf==0\.0\.1"):
        download("omegaconf", "0.0.1", "3.12", tmp_path)


def test_dry_run_lists_what_the_gpu_image_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--have", str(IMAGE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ray==" in out and "omegaconf==" in out and "torch==" not in out and "numpy==" not in out
    assert out.strip().splitlines()[-1].startswith("RESULT wheelhouse wheels=")


def test_bad_arguments_exit_2_with_one_line_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--have", str(tmp_path / "absent.txt"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--have" in err and "no such file" in err and "Traceback" not in err
    assert main(["--python", "12", "--dry-run"]) == 2
    assert "expected MAJOR.MINOR" in capsys.readouterr().err
