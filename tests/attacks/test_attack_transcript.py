"""The transcript recorder: what each party saw, bounded, saved without pickles, read back identically."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sifl_ray.attacks.transcript import TranscriptRecorder


def _fill(rec: TranscriptRecorder, n_tilde: int = 12) -> None:
    gen = torch.Generator().manual_seed(0)
    rec.record_key_epoch(1, 0)
    for t in (1, 2):
        rec.record_broadcast(t, torch.randn(n_tilde, generator=gen, dtype=torch.float64))
        for c in (2, 0, 1):
            rec.record_upload(
                t, c, torch.randn(n_tilde, generator=gen, dtype=torch.float64), weight=10.0 * (c + 1)
            )
        rec.record_server_input(t, torch.randn(n_tilde, 2, generator=gen, dtype=torch.float64))
    rec.record_key_epoch(3, 1)


def test_round_trip_through_npz(tmp_path):
    rec = TranscriptRecorder()
    _fill(rec)
    path = rec.save(tmp_path / "t.npz")
    back = TranscriptRecorder.load(path)
    assert back.rounds() == [1, 2]
    for t in (1, 2):
        a, ca = rec.upload_matrix(t)
        b, cb = back.upload_matrix(t)
        assert ca == cb == [0, 1, 2]
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(rec.broadcasts[t], back.broadcasts[t])
        np.testing.assert_array_equal(rec.server_inputs[t], back.server_inputs[t])
    np.testing.assert_allclose(back.client_weights([0, 1, 2]), [1 / 6, 2 / 6, 3 / 6])
    assert back.epoch_of(2) == 0 and back.epoch_of(3) == 1 and back.epoch_of(7) == 1
    with np.load(path, allow_pickle=False) as data:  # loadable without pickles; only views, no truth or keys
        assert {k.split("/")[0] for k in data.files} == {"meta", "upload", "broadcast", "server_input"}


def test_subsampled_coordinates_are_fixed_and_shared():
    rec = TranscriptRecorder(max_coordinates=5, seed=3)
    _fill(rec, n_tilde=40)
    coords = rec.coordinates
    assert coords is not None and coords.size == 5 and np.all(np.diff(coords) > 0)
    assert rec.uploads[1][0].shape == (5,) and rec.server_inputs[2].shape == (5, 2)
    other = TranscriptRecorder(max_coordinates=5, seed=3)
    _fill(other, n_tilde=40)
    np.testing.assert_array_equal(other.coordinates, coords)  # chosen once, from the seed
    assert "subset of 5 of ñ = 40" in rec.describe()
    with pytest.raises(ValueError, match="whole encoded vectors"):
        rec.require_full("the difference attack")
    TranscriptRecorder().require_full("anything")  # whole vectors: fine


def test_rejects_inconsistent_lengths_and_shapes():
    rec = TranscriptRecorder()
    rec.record_upload(1, 0, np.zeros(8))
    with pytest.raises(ValueError, match="length 8"):
        rec.record_upload(1, 1, np.zeros(9))
    with pytest.raises(ValueError, match="vector"):
        rec.record_broadcast(1, np.zeros((8, 2, 2)))


def test_recorder_copies_its_inputs():
    rec = TranscriptRecorder()
    x = torch.zeros(4, dtype=torch.float64)
    rec.record_upload(1, 0, x)
    x += 1.0  # the caller reuses its buffer
    assert rec.uploads[1][0].sum() == 0.0


def test_saved_transcript_holds_no_seed(tmp_path):
    """The run seed reproduces data, initial model, minibatches and noise: beside a transcript it would give
    back the plain models without any key. Neither the metadata nor any array may carry it."""
    for rec in (TranscriptRecorder(), TranscriptRecorder(max_coordinates=10, seed=987654321)):
        _fill(rec, n_tilde=40)
        path = rec.save(tmp_path / "t.npz")
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            assert "seed" not in meta and "987654321" not in str(data["meta"])
            assert not any("seed" in name for name in data.files)
        back = TranscriptRecorder.load(path)
        assert back.seed is None
        if rec.subsampled:  # the subset itself is stored, so nothing needs the seed to read it back
            np.testing.assert_array_equal(back.coordinates, rec.coordinates)


def test_default_coordinate_subset_comes_from_fresh_entropy():
    """Without a seed the subset is drawn from OS entropy: a subset derived from the run seed would let a
    reader search small seeds until it matches."""
    a, b = TranscriptRecorder(max_coordinates=20), TranscriptRecorder(max_coordinates=20)
    _fill(a, n_tilde=400)
    _fill(b, n_tilde=400)
    assert not np.array_equal(a.coordinates, b.coordinates)  # equal with probability 1/C(400, 20)
