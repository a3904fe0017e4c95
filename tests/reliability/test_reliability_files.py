"""The reliability building blocks without Ray: checkpoint files (atomic, checksummed, ``weights_only``,
private key files), the checkpoint store, fault injection inside a worker, and the aggregator's refusal of
bad partial sums."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct

import pytest
import torch

from sifl_ray.checkpoint import (
    MAGIC,
    CheckpointError,
    CheckpointStore,
    load_party_key,
    read_checkpoint_file,
    save_party_key,
    write_checkpoint_file,
)
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.faults import WorkerFaults
from sifl_ray.parties.aggregator import Aggregator
from sifl_ray.parties.checks import check_upload
from sifl_ray.parties.messages import Partial
from sifl_ray.specs import Coding


def test_round_trip_and_every_kind_of_damage_is_detected(tmp_path):
    payload = {"round": 3, "w": torch.arange(5, dtype=torch.float64), "seed": b"\x01" * 32}
    path = tmp_path / "x.ckpt"
    digest = write_checkpoint_file(path, payload)
    back = read_checkpoint_file(path, expect_sha256=digest)
    assert back["round"] == 3 and torch.equal(back["w"], payload["w"]) and back["seed"] == payload["seed"]
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed, not left behind

    good = path.read_bytes()
    damaged = {
        "truncated": good[:-1],
        "shorter than the header": good[:10],
        "not a sifl-ray checkpoint": b"PK\x03\x04" + good[4:],
        "checksum mismatch": good[:-3] + bytes([good[-3] ^ 1]) + good[-2:],
    }
    for message, blob in damaged.items():
        path.write_bytes(blob)
        with pytest.raises(CheckpointError, match=message):
            read_checkpoint_file(path)
    path.write_bytes(good)
    with pytest.raises(CheckpointError, match="not the file the checkpoint manifest names"):
        read_checkpoint_file(path, expect_sha256="0" * 64)
    with pytest.raises(CheckpointError, match="missing"):
        read_checkpoint_file(tmp_path / "nope.ckpt")


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_payload_is_loaded_with_weights_only(tmp_path):
    """A well-formed file whose payload would run code when unpickled is refused, not executed."""
    buf = io.BytesIO()
    torch.save({"x": Evil()}, buf)
    body = buf.getvalue()
    path = tmp_path / "evil.ckpt"
    path.write_bytes(MAGIC + hashlib.sha256(body).digest() + struct.pack("<Q", len(body)) + body)
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        read_checkpoint_file(path)


def test_party_key_files_are_private_and_checked(tmp_path):
    path = tmp_path / "keys" / "server-sifl_m1.key"
    save_party_key(path, party="server", arm="sifl_m1", mode="m1", state={"seed": b"\x02" * 32})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_party_key(path, party="server", arm="sifl_m1")["state"]["seed"] == b"\x02" * 32
    with pytest.raises(CheckpointError, match="holds the server key of arm 'sifl_m1'"):
        load_party_key(path, party="aggregator", arm="sifl_m1")


def test_store_commits_atomically_and_keeps_the_last_ones(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    assert store.latest() is None
    for t in range(4):
        staging = store.begin(t)
        sha = write_checkpoint_file(staging / "driver.ckpt", {"round": t})
        store.commit(staging, t, arms=["fl"], files={"driver.ckpt": sha}, key_dir="k")
    assert store.available() == ["round-000002", "round-000003"]
    assert store.latest().round == 3
    # a crash while writing round 4: a staging folder, no manifest, LATEST untouched
    staging = store.begin(4)
    write_checkpoint_file(staging / "driver.ckpt", {"round": 4})
    assert store.latest().round == 3
    # replaying round 3 after a restore supersedes it; later checkpoints are off the new history
    staging = store.begin(2)
    sha = write_checkpoint_file(staging / "driver.ckpt", {"round": 2})
    store.commit(staging, 2, arms=["fl"], files={"driver.ckpt": sha}, key_dir="k")
    assert store.latest().round == 2 and store.available() == ["round-000002"]
    (tmp_path / "checkpoints" / "LATEST").unlink()
    with pytest.raises(CheckpointError, match="missing although checkpoints exist"):
        store.latest()


def _event(**kw):
    base = {"index": 0, "kind": "corrupt_upload", "round": 2, "arm": "sifl_m1", "client": 7}
    return {**base, **kw}


@pytest.mark.parametrize(
    ("corruption", "reason"),
    [
        ("nan", "non-finite"),
        ("inf", "non-finite"),
        ("shape", "wrong shape"),
        ("round", "round 1"),
        ("epoch", "key epoch 1"),
    ],
)
def test_every_corrupted_upload_is_rejected(corruption, reason):
    faults = WorkerFaults([_event(corruption=corruption)])
    upload = torch.ones(6, dtype=torch.float64)
    bad, stamped_round, stamped_epoch = faults.upload_hook("sifl_m1", 2, 7, upload, 0)
    got = check_upload(
        bad, shape=(6,), round=2, stamped_round=stamped_round, key_epoch=0, stamped_epoch=stamped_epoch
    )
    assert got is not None and reason in got
    # other clients, rounds and arms are untouched
    for args in (("sifl_m1", 2, 8), ("sifl_m1", 3, 7), ("fl", 2, 7)):
        same, r, e = faults.upload_hook(*args, upload, 0)
        assert same is upload and r == args[1] and e == 0


def _partial(source, value, weight=1.0, length=4, **kw):
    ws = torch.full((length,), float(value), dtype=torch.float64) * weight
    return Partial(
        source=source,
        round=kw.get("round", 0),
        key_epoch=kw.get("key_epoch", 0),
        weighted_sum=ws,
        weight=weight,
        accepted=1,
    )


def test_aggregator_refuses_bad_partials_and_renormalises_over_the_rest():
    agg = Aggregator(coding=Coding.PLAIN, key=None, noise=NoiseSpec(), noise_seed=b"", bounds=(0, 4))
    good = [_partial(0, 2.0, 1.0), _partial(1, 5.0, 3.0)]
    nan = _partial(2, 1.0)
    nan.weighted_sum[1] = float("nan")
    bad = [
        nan,
        _partial(3, 1.0, length=3),
        _partial(4, 1.0, round=1),
        _partial(5, 1.0, key_epoch=2),
        _partial(6, 1.0, weight=float("inf")),
        _partial(7, 1.0),
        _partial(7, 1.0),
    ]
    out, info = agg.reduce(0, 0, [*good, *bad])
    assert torch.equal(out, torch.full((4,), (2.0 + 15.0) / 4.0, dtype=torch.float64))
    assert set(info["rejected"]) == {2, 3, 4, 5, 6, 7}
    assert "non-finite" in info["rejected"][2] and "wrong shape" in info["rejected"][3]
    assert "2 partial sums" in info["rejected"][7]
    assert info["accepted"] == 2 and info["weight"] == 4.0
    empty, info = agg.reduce(0, 0, bad)
    assert empty is None and info["weight"] == 0
