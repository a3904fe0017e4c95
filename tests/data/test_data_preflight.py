"""A run's data set is checked before Ray starts: a missing, truncated, foreign or undownloadable file is one
configuration error in the command line's keys (exit code 2, no traceback), and a corrupt file is fetched
again from the mirror when downloads are allowed. Real IDX files written here, a real HTTP server on
127.0.0.1, real ``python run.py`` / ``sifl run`` processes."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from data_cases import LoopbackServer, mnist_like

from sifl_ray.data import IDX_FILES, MNIST_CHECKSUMS, encode_idx
from sifl_ray.data.download import CorruptFileError, mnist_files

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = {"run.py": ["run.py"], "sifl run": ["-m", "sifl_ray.cli", "run"]}
NO_PROXY = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # loopback stays loopback


def _run(entry: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *ENTRIES[entry], *args, "backend=ray", "train.rounds=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**NO_PROXY, "PYTHONPATH": str(ROOT)},
    )


def _raw_files(folder: Path) -> None:
    """The four files of a small MNIST-like set, uncompressed (no published checksum: header and length
    are what the pre-flight check can verify)."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays, _ = mnist_like()
    for role, arr in arrays.items():
        (folder / IDX_FILES[role]).write_bytes(encode_idx(arr))


def _truncated(folder: Path) -> str:
    _raw_files(folder)
    path = folder / IDX_FILES["train_images"]
    path.write_bytes(path.read_bytes()[:-100])
    return f"{path} is corrupt or not the published file (truncated: shape (40, 28, 28)"


def _garbage_header(folder: Path) -> str:
    _raw_files(folder)
    path = folder / IDX_FILES["test_labels"]
    path.write_bytes(b"<html>not found</html>" + path.read_bytes())
    return f"{path} is corrupt or not the published file (bad IDX magic 3c68746d"


def _foreign_gz(folder: Path) -> str:
    folder.mkdir(parents=True)
    _, files = mnist_like()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    published = MNIST_CHECKSUMS["mnist"]["train-images-idx3-ubyte.gz"]
    actual = hashlib.md5(files["train-images-idx3-ubyte.gz"]).hexdigest()
    return (
        f"{folder / 'train-images-idx3-ubyte.gz'} is corrupt or not the published file (md5 is {actual}, "
        f"expected {published})"
    )


def _empty(folder: Path) -> str:
    folder.mkdir(parents=True)
    return (
        f"data.root: expected mnist's four IDX files in {folder} (.gz or uncompressed), missing train-images"
    )


CASES = {
    "empty folder": _empty,
    "truncated": _truncated,
    "garbage header": _garbage_header,
    "foreign gz": _foreign_gz,
}


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("case", list(CASES))
def test_a_data_error_is_a_configuration_error_before_ray(tmp_path: Path, case: str, entry: str) -> None:
    """Each is a configuration error before Ray starts (exit 2) naming the key and the fix, not a traceback
    after Ray has started with the fix in Python terms."""
    expected = CASES[case](tmp_path / "mnist")
    got = _run(entry, "data.name=mnist", "train.model=mlp", f"data.root={tmp_path}", "data.download=false")
    assert got.returncode == 2, got.stderr
    assert "Traceback" not in got.stderr and got.stdout == ""  # nothing started: not even Ray's first line
    assert got.stderr.startswith("1 configuration problem:\n  - data.root: "), got.stderr
    assert expected in got.stderr
    assert "set data.download=true" in got.stderr
    assert "download=True" not in got.stderr and "pass " not in got.stderr  # no Python-terms fix


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_failed_download_is_one_configuration_error(
    tmp_path: Path, loopback: LoopbackServer, entry: str
) -> None:
    """No mirror has the file (404), or the mirror serves another file than the published one: one problem
    naming data.mirrors and what each mirror answered, exit code 2, nothing kept."""
    got = _run(
        entry, "data.name=mnist", f"data.root={tmp_path}", f"data.mirrors=[{loopback.url('nowhere/')}]"
    )
    assert got.returncode == 2, got.stderr
    assert "Traceback" not in got.stderr and "1 configuration problem:" in got.stderr
    assert (
        "data.mirrors: could not obtain a verified train-images-idx3-ubyte.gz from any of 1 mirror"
        in got.stderr
    )
    assert "HTTP Error 404" in got.stderr and "set data.mirrors=[URL,...]" in got.stderr
    assert loopback.requests == [
        "nowhere/train-images-idx3-ubyte.gz"
    ]  # the run asked the mirror it was given

    _, files = mnist_like()
    loopback.files = {f"other/{name}": data for name, data in files.items()}
    got = _run(entry, "data.name=mnist", f"data.root={tmp_path}", f"data.mirrors=[{loopback.url('other/')}]")
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
    assert MNIST_CHECKSUMS["mnist"]["train-images-idx3-ubyte.gz"] in got.stderr  # the published MD5 it missed
    assert not [p for p in (tmp_path / "mnist").iterdir() if p.suffix in (".gz", ".part")]


def _serve(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The loopback mirror serves a small MNIST-like set, and its checksums stand in for the published
    ones (the real files are 55 MB on the internet)."""
    _, files = mnist_like()
    loopback.files = {f"mnist/{name}": data for name, data in files.items()}
    digests = {name: hashlib.md5(data).hexdigest() for name, data in files.items()}
    monkeypatch.setitem(MNIST_CHECKSUMS, "mnist", digests)
    return files


@pytest.mark.parametrize("damage", ["checksum", "truncated raw file", "garbage header"])
def test_a_corrupt_local_file_is_fetched_again_when_downloads_are_allowed(
    tmp_path: Path, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """With downloads allowed a damaged file is neither refused nor read: the verified copy from the mirror
    replaces it (a ``.gz`` in ``<root>/mnist/``, read before anything else there) and the others are left
    alone; with downloads off it is named, with the fix, and kept."""
    files = _serve(loopback, monkeypatch)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    bad = folder / "train-images-idx3-ubyte.gz"
    if damage == "checksum":
        corrupted = bytearray(files[bad.name])
        corrupted[len(corrupted) // 2] ^= 0xFF
        bad.write_bytes(bytes(corrupted))
    else:  # an uncompressed file in its place: no checksum to check, its header and length are
        raw = gzip.decompress(files[bad.name])
        bad.unlink()
        bad = folder / "train-images-idx3-ubyte"
        bad.write_bytes(raw[:-5] if damage == "truncated raw file" else b"\x08\x00" + raw[2:])
    before = bad.read_bytes()
    log: list[str] = []

    with pytest.raises(CorruptFileError) as refused:
        mnist_files(tmp_path, mirrors=[loopback.url("mnist/")], download=False, log=log.append)
    assert bad.read_bytes() == before and loopback.requests == [] and log == []
    assert str(bad) in str(refused.value)

    paths = mnist_files(tmp_path, mirrors=[loopback.url("mnist/")], download=True, log=log.append)
    assert loopback.requests == ["mnist/train-images-idx3-ubyte.gz"]  # only the corrupt one
    assert paths["train_images"] == folder / "train-images-idx3-ubyte.gz"
    assert paths["train_images"].read_bytes() == files["train-images-idx3-ubyte.gz"]
    assert len(log) == 1 and f"{bad} is corrupt" in log[0] and "fetching a verified copy" in log[0]
    loopback.requests.clear()
    mnist_files(tmp_path, mirrors=[loopback.url("mnist/")], download=False)  # now right, from disk alone
    assert loopback.requests == []


def test_sifl_run_fetches_a_corrupt_file_again_and_trains(
    tmp_path: Path, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The command line's path: the pre-flight check replaces the corrupt file from ``data.mirrors`` before
    the run starts, says so on stderr, and the run trains on the verified copy."""
    from sifl_ray.cli import main

    files = _serve(loopback, monkeypatch)
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data[:-20] if name.startswith("t10k-labels") else data)
    args = [
        "run",
        "data.name=mnist",
        f"data.root={tmp_path / 'data'}",
        f"data.mirrors=[{loopback.url('mnist/')}]",
        "train.model=mlp",
        "arms=[fl]",
        "clients.num_clients=4",
        "train.rounds=1",
        "backend=local",
        "output.plot=false",
        "output.progress=false",
        f"output.dir={tmp_path / 'runs'}",
    ]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert loopback.requests == ["mnist/t10k-labels-idx1-ubyte.gz"]
    assert f"data: {folder / 't10k-labels-idx1-ubyte.gz'} is corrupt" in err
    assert (folder / "t10k-labels-idx1-ubyte.gz").read_bytes() == files["t10k-labels-idx1-ubyte.gz"]
    assert out.strip().splitlines()[-1].startswith("RESULT quickstart ")


@pytest.mark.slow  # a `python run.py` that reads the data
def test_a_bad_value_seen_only_when_the_data_is_read_is_a_configuration_error_too(tmp_path: Path) -> None:
    """A label file of the right shape and length with a label out of 0..9 passes the header check; the
    run meets it when it reads the values, and answers as the pre-flight check does (exit code 2)."""
    folder = tmp_path / "mnist"
    _raw_files(folder)
    arrays, _ = mnist_like()
    labels = arrays["train_labels"].copy()
    labels[3] = 12
    (folder / IDX_FILES["train_labels"]).write_bytes(encode_idx(labels))
    args = ["data.name=mnist", "train.model=mlp", f"data.root={tmp_path}", "data.download=false"]
    args += ["backend=local", "train.rounds=1", f"output.dir={tmp_path / 'runs'}"]
    got = subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 2, got.stderr
    assert "Traceback" not in got.stderr
    assert "data.root: " in got.stderr and "label 12 outside 0..9" in got.stderr
    assert "set data.download=true to fetch a verified copy, or replace the file" in got.stderr


def test_a_split_with_only_one_of_its_files_verified_is_still_checked(tmp_path: Path, monkeypatch) -> None:
    """The pre-flight check trusts a split's published shapes only when both of its files match their
    published checksums. Here the training images do (their digest is registered as the published one) and
    the labels are an uncompressed copy with no checksum, one label short: the split is checked, and its
    40 images against 39 labels refused."""
    from sifl_ray.config import ConfigError, load_config
    from sifl_ray.data.preflight import check_data

    folder = tmp_path / "mnist"
    folder.mkdir()
    arrays, files = mnist_like()
    images = files["train-images-idx3-ubyte.gz"]
    (folder / "train-images-idx3-ubyte.gz").write_bytes(images)
    monkeypatch.setitem(
        MNIST_CHECKSUMS["mnist"], "train-images-idx3-ubyte.gz", hashlib.md5(images).hexdigest()
    )
    (folder / IDX_FILES["train_labels"]).write_bytes(encode_idx(arrays["train_labels"][:-1]))
    for role in ("test_images", "test_labels"):
        (folder / IDX_FILES[role]).write_bytes(encode_idx(arrays[role]))
    cfg = load_config(["data.name=mnist", f"data.root={tmp_path}", "data.download=false"])
    with pytest.raises(ConfigError, match="expected as many labels as 28×28 images"):
        check_data(cfg)
