"""Checkpoints: atomic, checksummed files; each party's key in its own private file, apart from the model.

Why this shape: a run must survive a SIGKILL of the driver and the death of any party without losing a
round, and the driver must still never hold a key or a parameter vector (docs/method.md "Parties"). So
every party writes and reads its own state, the driver passes paths only, and a checkpoint is complete
only once the driver has written its manifest and then ``LATEST`` (both atomically): a crash at any point
leaves the previous checkpoint intact and readable.

Layout::

    KEY_DIR/                      mode 0700, outside the run folder (a run folder is shared; keys are not)
        server-<arm>.key          key 1 and the server's noise seed (mode 0600; the server actor only)
        aggregator-<arm>.key      key 2's seed (mode 0600; the aggregator actors only)
    RUN_DIR/checkpoints/
        round-000004/server.ckpt  every arm's next broadcast, as the server holds it (M2: an encoded W')
        round-000004/driver.ckpt  history, wall times, drop / fault / restore logs, accountant state
        round-000004/MANIFEST.ckpt  round, arms, SHA-256 of the two files above, the key folder (relative)
        LATEST                    the name of the newest complete checkpoint

Every file is ``MAGIC | SHA-256(payload) | len(payload) | payload`` where the payload is a ``torch.save``
of plain containers and tensors: a truncated or corrupted file is detected before anything is unpickled,
and the payload is loaded with ``torch.load(weights_only=True)``. Files are written to a temporary name,
fsynced and renamed (``os.replace``); key files are created with mode 0600 from the start.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sifl_ray.errors import SiflError
from sifl_ray.logging import atomic_write_text

MAGIC = b"SIFLCKPT\x01\n"
_HEADER = len(MAGIC) + 32 + 8
FORMAT = 1
LATEST = "LATEST"
MANIFEST = "MANIFEST.ckpt"
SERVER_FILE = "server.ckpt"
DRIVER_FILE = "driver.ckpt"


class CheckpointError(SiflError, RuntimeError):
    """A checkpoint cannot be used: missing, truncated, corrupted or from another run; nothing written."""


# ------------------------------------------------------------------------------------------------ files
def write_checkpoint_file(path: Path, payload: Any, *, private: bool = False) -> str:
    """Atomically write ``payload`` to ``path``; return the SHA-256 (hex) of the payload bytes.

    Args:
        private: create the file with mode 0600 (key files); otherwise 0644.
    """
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getvalue()
    digest = hashlib.sha256(body).digest()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + digest + struct.pack("<Q", len(body)) + body)
            fh.flush()
            os.fsync(fh.fileno())
        if not private:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return digest.hex()


def read_checkpoint_file(path: Path, *, expect_sha256: str | None = None) -> Any:
    """Verify and load a file written by :func:`write_checkpoint_file`.

    Raises:
        CheckpointError: the file is missing, truncated, not a checkpoint, corrupted (checksum mismatch),
            not the file the manifest names (``expect_sha256``), or not loadable with ``weights_only``.
    """
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror})") from None
    if len(blob) < _HEADER or not blob.startswith(MAGIC):
        what = "truncated (shorter than the header)" if len(blob) < _HEADER else "not a sifl-ray checkpoint"
        raise CheckpointError(f"{path}: {what}")
    digest = blob[len(MAGIC) : len(MAGIC) + 32]
    (length,) = struct.unpack("<Q", blob[len(MAGIC) + 32 : _HEADER])
    body = blob[_HEADER:]
    if len(body) != length:
        raise CheckpointError(f"{path}: truncated ({len(body)} of {length} payload bytes)")
    if hashlib.sha256(body).digest() != digest:
        raise CheckpointError(f"{path}: checksum mismatch (the file is corrupted)")
    if expect_sha256 is not None and digest.hex() != expect_sha256:
        raise CheckpointError(f"{path}: not the file the checkpoint manifest names (another checkpoint's?)")
    try:
        return torch.load(io.BytesIO(body), weights_only=True)
    except Exception as err:
        raise CheckpointError(f"{path}: payload cannot be loaded safely ({type(err).__name__})") from None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ keys
def key_file(key_dir: str | Path, party: str, arm: str) -> Path:
    """Where ``party`` (``server`` or ``aggregator``) keeps its key of ``arm``."""
    return Path(key_dir) / f"{party}-{arm}.key"


def save_party_key(path: str | Path, *, party: str, arm: str, mode: str, state: dict) -> None:
    """Write one party's key state (mode 0600, folder 0700). Called inside that party's actor only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_checkpoint_file(
        path, {"format": FORMAT, "party": party, "arm": arm, "mode": mode, "state": state}, private=True
    )


def load_party_key(path: str | Path, *, party: str, arm: str) -> dict:
    """Read one party's key state back (inside that party's actor), checking it is the right one."""
    data = read_checkpoint_file(Path(path))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a key file of this format")
    if data.get("party") != party or data.get("arm") != arm:
        raise CheckpointError(
            f"{path}: holds the {data.get('party')} key of arm {data.get('arm')!r}, "
            f"expected the {party} key of arm {arm!r}"
        )
    return data


# ------------------------------------------------------------------------------------------------ rounds
@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint on disk: taken at the end of ``round``."""

    dir: Path
    round: int
    manifest: dict

    @property
    def server_file(self) -> Path:
        return self.dir / SERVER_FILE

    @property
    def driver_file(self) -> Path:
        return self.dir / DRIVER_FILE


def checkpoint_root(run_dir: str | Path) -> Path:
    """Where a run folder keeps its checkpoints (one folder a round, beside the event files)."""
    return Path(run_dir) / "checkpoints"


def round_dir_name(t: int) -> str:
    """A round's folder name, zero-padded so that names sort in round order."""
    return f"round-{t:06d}"


class CheckpointStore:
    """The checkpoints of one run folder: begin a round's folder, commit it, find and verify the latest."""

    def __init__(self, run_dir: str | Path, *, keep: int = 2):
        self.root = checkpoint_root(run_dir)
        self.keep = max(1, int(keep))

    def begin(self, t: int) -> Path:
        """A fresh staging folder for the checkpoint of round ``t`` (stale staging folders are removed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".{round_dir_name(t)}.partial"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        return staging

    def commit(self, staging: Path, t: int, *, arms: list[str], files: dict[str, str], key_dir: str) -> Path:
        """Seal the staging folder: manifest, rename to its final name, then point ``LATEST`` at it."""
        write_checkpoint_file(
            staging / MANIFEST,
            {"format": FORMAT, "round": int(t), "arms": list(arms), "files": dict(files), "key_dir": key_dir},
        )
        final = self.root / round_dir_name(t)
        if final.exists():  # a replayed round (after a restore) supersedes its earlier checkpoint
            shutil.rmtree(final)
        os.replace(staging, final)
        _fsync_dir(self.root)
        atomic_write_text(self.root / LATEST, final.name + "\n")
        self._prune(t)
        return final

    def _prune(self, t: int) -> None:
        done = sorted(p for p in self.root.glob("round-*") if p.is_dir())
        for old in done[: max(0, len(done) - self.keep)]:
            shutil.rmtree(old, ignore_errors=True)
        for later in (p for p in done if p.name > round_dir_name(t)):
            shutil.rmtree(later, ignore_errors=True)  # from before a rollback: no longer on this history

    def available(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("round-*") if p.is_dir())

    def latest(self) -> CheckpointRef | None:
        """The checkpoint ``LATEST`` names, verified; ``None`` when the run has not completed one yet.

        Raises:
            CheckpointError: ``LATEST`` or the manifest it names is missing, truncated or corrupted.
        """
        pointer = self.root / LATEST
        if not pointer.exists():
            if self.available():
                raise CheckpointError(
                    f"{pointer}: missing although checkpoints exist ({', '.join(self.available())}); "
                    "resume from one of them explicitly: sifl run --resume RUN_DIR/checkpoints/<name>"
                )
            return None
        name = pointer.read_text().strip()
        if not name.startswith("round-") or "/" in name:
            raise CheckpointError(f"{pointer}: does not name a checkpoint (found {name[:40]!r})")
        return self.open(self.root / name)

    def open(self, path: str | Path) -> CheckpointRef:
        """Verify the manifest of the checkpoint folder ``path``."""
        path = Path(path)
        if not path.is_dir():
            others = ", ".join(self.available()) or "none"
            raise CheckpointError(f"{path}: no such checkpoint (available: {others})")
        manifest = read_checkpoint_file(path / MANIFEST)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CheckpointError(f"{path / MANIFEST}: not a manifest of this format")
        return CheckpointRef(dir=path, round=int(manifest["round"]), manifest=manifest)


def describe_error(err: BaseException) -> str:
    """The message of a :class:`CheckpointError`, also when it arrives wrapped by Ray from an actor (Ray's
    wrapper is itself an instance of the cause's class, but its text is the remote traceback)."""
    inner = err
    for _ in range(4):
        cause = getattr(inner, "cause", None)
        if cause is None or cause is inner:
            break
        inner = cause
    if isinstance(inner, CheckpointError) and inner.args:
        return str(inner.args[0])
    text = str(err)
    marker = "CheckpointError: "
    return text[text.rfind(marker) + len(marker) :].strip() if marker in text else text
