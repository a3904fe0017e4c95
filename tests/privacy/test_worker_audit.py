"""The auditor's part at a client worker, figure by figure: what a canary uploads, how the aggregator's
view of an upload is scored against the audit directions, and what the aggregator reads of each kind of
upload in the clear (a masked one is read through a real secure round in test_audit_wiring.py). The runs go
through these too; here each value is computed again beside them, so a wrong sign, a wrong direction index
or a wrong branch is caught where it happens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sifl_ray.coding import make_server_key
from sifl_ray.parties.canaries import WorkerAudit, aggregator_reading
from sifl_ray.parties.upload import Local, PlainSum, RoundStart
from sifl_ray.privacy.canary_draws import canary_directions

SEED = bytes(range(16))
D = 12
#: A cosine of float64 vectors of D entries, computed by two summation orders (torch's, numpy's): each is
#: within D·u of the exact one (|Σ r_i x_i| rounding ≤ D·u·Σ|r_i x_i| ≤ D·u·|r||x|), so apart by 2·D·u, plus
#: the norms' and the division's few u: 4·D·u bounds it on any CPU.
COSINE_ATOL = 4 * D * float(np.finfo(np.float64).eps)


def _audit(directions: int = 0) -> WorkerAudit:
    # clients 7 and 9 host canaries 3 (inserted) and 5 (left out)
    return WorkerAudit(SEED, {7: (3, True), 9: (5, False)}, weight=2.0, directions=directions)


def test_an_inserted_canary_uploads_the_start_plus_its_own_direction_at_the_norm():
    audit = _audit()
    w0 = torch.linspace(-1, 1, D, dtype=torch.float32)
    got = audit.model(7, w0, norm=2.5)
    want = w0.double() + 2.5 * torch.from_numpy(canary_directions(d=D, k=1, seed=SEED, clip=1.0, first=3)[0])
    assert got.dtype == torch.float64 and torch.equal(got, want)
    assert torch.equal(audit.model(7, w0, norm=2.5), got)  # the direction kept is the same one
    assert not torch.allclose(
        got,
        w0.double() + 2.5 * torch.from_numpy(canary_directions(d=D, k=1, seed=SEED, clip=1.0, first=4)[0]),
    )  # another canary's direction differs
    assert float(torch.linalg.vector_norm(got - w0.double())) == pytest.approx(2.5, rel=1e-12)


def test_a_left_out_canary_uploads_no_change_in_float64_and_in_a_copy_of_its_own():
    audit = _audit()
    w0 = torch.linspace(-1, 1, D, dtype=torch.float32)
    got = audit.model(9, w0, norm=2.5)
    assert got.dtype == torch.float64 and torch.equal(got, w0.double())
    got += 1.0
    assert torch.equal(audit.model(9, w0, norm=2.5), w0.double())  # nothing shared with a later call


def _best(audit: WorkerAudit, *readings: torch.Tensor) -> torch.Tensor | None:
    """The aggregator's view of one round in which it read ``readings``."""
    sightings = audit.sightings()
    assert sightings is not None
    for reading in readings:
        sightings.add(reading)
    return sightings.best()


def test_the_aggregators_view_is_each_directions_cosine_and_the_rounds_largest():
    k = 6
    audit = _audit(directions=k)
    rows = canary_directions(d=D, k=k, seed=SEED, clip=1.0)
    first = torch.linspace(0.5, 2.0, D, dtype=torch.float64)
    second = torch.from_numpy(rows[2] * 3.0)  # points along direction 2
    cos1 = _best(audit, first)
    want1 = rows @ first.numpy() / (np.linalg.norm(rows, axis=1) * np.linalg.norm(first.numpy()))
    np.testing.assert_allclose(cos1.numpy(), want1, rtol=0, atol=COSINE_ATOL)
    both = _best(audit, first, second)
    assert both[2] == pytest.approx(1.0, abs=COSINE_ATOL)
    np.testing.assert_allclose(both, torch.maximum(cos1, _best(audit, second)), rtol=0, atol=COSINE_ATOL)
    assert torch.equal(_best(audit, torch.zeros(D, dtype=torch.float32)), torch.zeros(k, dtype=torch.float64))
    # a zero reading scores 0 beside the others: the largest of a negative cosine and 0 is 0
    against = torch.from_numpy(-rows[4])
    assert _best(audit, against)[4] == pytest.approx(-1.0, abs=COSINE_ATOL)
    assert _best(audit, against, torch.zeros(D))[4] == 0.0
    # another length (a coded arm's ñ): the directions are drawn again for it
    longer = torch.ones(D + 3, dtype=torch.float64)
    rows_long = canary_directions(d=D + 3, k=k, seed=SEED, clip=1.0)
    want_long = rows_long.sum(axis=1) / (np.linalg.norm(rows_long, axis=1) * np.sqrt(D + 3))
    atol_long = 4 * (D + 3) * np.finfo(np.float64).eps
    np.testing.assert_allclose(_best(audit, longer).numpy(), want_long, rtol=0, atol=atol_long)
    # both lengths in one round: each scored with its own directions, the largest kept
    mixed = _best(audit, first, longer)
    np.testing.assert_allclose(mixed.numpy(), np.maximum(want1, want_long), rtol=0, atol=atol_long)


def test_the_readings_are_scored_in_blocks_as_one_by_one(monkeypatch):
    """Blocks of readings give the cosines each reading gives alone, at a block's edge too, and a reading
    is copied when it is added: an upload that lives in a buffer the next client reuses still counts."""
    from sifl_ray.parties import canaries

    k = 5
    audit = _audit(directions=k)
    rng = np.random.default_rng(0)
    readings = [torch.from_numpy(rng.normal(size=D)) for _ in range(7)]
    alone = torch.stack([_best(audit, r) for r in readings]).amax(dim=0)
    monkeypatch.setattr(canaries, "BLOCK_READINGS", 3)  # blocks of 3, 3 and 1
    sightings = audit.sightings()
    buffer = torch.empty(D, dtype=torch.float64)
    for reading in readings:
        buffer.copy_(reading)
        sightings.add(buffer)
    buffer.zero_()
    np.testing.assert_allclose(sightings.best(), alone, rtol=0, atol=COSINE_ATOL)
    assert _best(audit) is None  # a round in which the aggregator read nothing


def test_a_block_holds_at_most_its_bytes_of_readings_and_is_scored_when_full(monkeypatch):
    """The memory the view takes beside the directions: a block of at most ``BLOCK_BYTES`` of float64
    readings (at least one), filled before it is scored, empty again after."""
    from sifl_ray.parties import canaries

    audit = _audit(directions=3)
    monkeypatch.setattr(canaries, "BLOCK_BYTES", 8 * D * 3 + 7)  # room for 3 readings, not 4
    sightings = audit.sightings()
    for _ in range(2):
        sightings.add(torch.ones(D))
    assert sightings._block.shape == (3, D) and sightings._used == 2  # waiting for a third
    sightings.add(torch.ones(D))
    assert sightings._used == 0  # full: scored
    monkeypatch.setattr(canaries, "BLOCK_BYTES", 8 * D - 1)  # not one reading's room: one at a time
    one = audit.sightings()
    one.add(torch.ones(D))
    assert one._block.shape == (1, D) and one._used == 0


def test_a_reading_of_any_dtype_and_any_small_norm_is_scored_in_float64():
    """A float32 upload is read in float64 (the directions' dtype); a change of norm below 1 is scored like
    any other, and only a zero change scores 0 (in float64 too)."""
    k = 4
    audit = _audit(directions=k)
    rows = canary_directions(d=D, k=k, seed=SEED, clip=1.0)
    small = torch.from_numpy(rows[1] * 1e-3).float()
    got = _best(audit, small)
    assert got.dtype == torch.float64 and got[1] == pytest.approx(1.0, abs=1e-6)  # float32 input: 1e-7
    zero = _best(audit, torch.zeros(D, dtype=torch.float32))
    assert zero.dtype == torch.float64 and not zero.any()


def test_without_directions_the_worker_scores_no_view():
    assert WorkerAudit(SEED, {7: (3, True)}, weight=1.0).sightings() is None  # the default
    assert _audit(directions=0).sightings() is None


def _local(model, upload):
    return Local(client=1, size=3.0, loss=0.0, model=model, upload=upload)


def test_what_the_aggregator_reads_of_each_kind_of_upload():
    w0 = torch.linspace(-1, 1, D, dtype=torch.float64)
    plain = RoundStart(w0=w0, start=w0.float(), coded=None, length=D)
    model = w0 + 0.25
    # in the clear: a model upload is read as its change, an update as it is
    total = PlainSum(plain, shortcut=False, device=torch.device("cpu"))
    assert torch.equal(aggregator_reading("model", plain, _local(model, model), total), model - w0)
    update = torch.full((D,), 0.5, dtype=torch.float64)
    assert torch.equal(aggregator_reading("update", plain, _local(model, update), total), update)
    # coded: decoded with a colluding client's view of key 1, then its change
    key = make_server_key(n=D, n_tilde=D + 4, backend="fast", alpha=1e-3, beta=1e3, seed=b"k" * 32)
    view = key.client_view()
    encoded = key.encode(model, torch.zeros(4, dtype=torch.float64))
    coded = RoundStart(
        w0=w0,
        start=w0.float(),
        coded=(view, key.encode(w0, torch.zeros(4, dtype=torch.float64))),
        length=D + 4,
    )
    total = PlainSum(coded, shortcut=False, device=torch.device("cpu"))
    got = aggregator_reading("model", coded, _local(None, encoded), total)
    assert torch.equal(got, view.decode(encoded) - w0)
    # the decode recovers the change up to float64 round-off amplified by the key's conditioning
    # (κ ≤ β/α = 1e6): κ·ñ·u·max|w| with a factor 4 for the encode and the decode
    bound = 1e6 * (D + 4) * float(np.finfo(np.float64).eps) * 4 * float(model.abs().max())
    assert float((got - (model - w0)).abs().max()) <= bound
    # the shortcut sums the local models' changes: the reading is the local model's change
    fused = PlainSum(coded, shortcut=True, device=torch.device("cpu"))
    assert torch.equal(aggregator_reading("model", coded, _local(model, encoded), fused), model - w0)
