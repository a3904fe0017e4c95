"""Secure aggregation as the platform plays it (:mod:`~sifl_ray.parties.secure`): client workers hosting
several clients each pre-sum their masked inputs, aggregator shards unmask their own rows with a mask plan.

The ring sum must be exact, bit for bit, against the plain integer sum of the survivors' encodings, for any
dropout pattern the threshold tolerates (at any step), any sharding of the vector and any grouping of the
clients into workers; and with too many dropouts the round must refuse to unmask.
"""

from __future__ import annotations

import numpy as np
import pytest

from sifl_ray.parties.checks import shard_bounds
from sifl_ray.parties.secure import AggregatorSecAgg, WorkerSecAgg, unmask_rows
from sifl_ray.party_seeds import party_seed
from sifl_ray.privacy.secagg import FixedPointCodec, SecAggError, crypto, ring_sum
from sifl_ray.privacy.secagg.spec import SecAggSpec, fit_codec


def test_a_shard_expands_only_its_rows_of_a_mask():
    seed = party_seed(5, "secagg", "mask")
    for ring_bits in (13, 32, 33, 64):
        full = crypto.prg_ring(seed, 777, ring_bits)
        for a, b in [(0, 777), (1, 9), (7, 8), (8, 777), (63, 129), (500, 776)]:
            assert np.array_equal(crypto.prg_ring(seed, b - a, ring_bits, offset=a), full[a:b])


def play_round(
    spec: SecAggSpec,
    x: np.ndarray,
    *,
    workers: list[list[int]],
    roster: list[int],
    drop_keys: set[int],
    drop_shares: set[int],
    drop_upload: set[int],
    drop_unmask: set[int],
    shards: int,
    t: int = 0,
) -> tuple[np.ndarray, set[int]]:
    """One round over ``roster`` (platform ids; ``x[c]`` is client c's vector), with the platform's message
    flow: every worker plays its clients, sums its survivors' masked inputs once, and the shards unmask
    their rows. A worker-level drop is not needed: a client that drops is a client of some worker.
    Returns the unmasked ring sum (concatenated over shards) and the survivors' platform ids."""
    head = AggregatorSecAgg(spec, "arm")
    public = head.open(t, roster)
    hosts = [WorkerSecAgg(spec, "arm") for _ in workers]
    keys = [
        h.advertise(public, [c for c in w if c not in drop_keys]) for h, w in zip(hosts, workers, strict=True)
    ]
    routed = head.route_keys(t, keys)
    gone = drop_keys | drop_shares
    outboxes = [
        {i: box for i, box in h.share(t, routed).items() if public.roster[i] not in gone} for h in hosts
    ]
    inboxes = head.route_shares(t, outboxes)
    gone |= drop_upload
    sums, survivors = [], set()
    for h, w in zip(hosts, workers, strict=True):
        ring = np.zeros(spec.vector_len, dtype=np.uint64)
        mine = []
        for c in (c for c in w if c not in gone):
            try:  # as the client role does: a client the protocol aborts (too few neighbours left) drops
                np.add(ring, h.mask(t, c, x[c], inboxes), out=ring)
            except SecAggError:
                continue
            mine.append(c)
        sums.append(ring)
        survivors |= {public.index(c) for c in mine}
    head.announce(t, survivors)
    answers = [h.unmask(t, survivors)[0] for h in hosts]
    answers = [{i: a for i, a in ans.items() if public.roster[i] not in drop_unmask} for ans in answers]
    plan = head.plan(t, answers)
    rows = [
        unmask_rows([s[a:b] for s in sums], plan, offset=a, codec=spec.codec)
        for a, b in shard_bounds(spec.vector_len, shards)
    ]
    return np.concatenate(rows), {public.roster[i] for i in survivors}


@pytest.mark.parametrize(("degree", "ring_bits"), [(None, 32), (4, 32), (None, 64), (5, 20)])
def test_the_unmasked_sum_is_exact_for_any_dropout_pattern_up_to_n_minus_t(degree, ring_bits):
    """Random dropout patterns at every step, up to what the threshold allows; clients grouped into
    workers that pre-sum, the vector split over shards: the decoded sum equals the decoding of the plain
    integer sum of the survivors' encodings to the bit (in the ring: exact). With every pair masking, up
    to n − t dropouts always unmask; on a sparse SecAgg+ graph the threshold holds per neighbourhood, so a
    pattern that empties one refuses to unmask (a clear error, nothing revealed) instead."""
    rng = np.random.default_rng(degree or 0)
    n, vector_len = 11, 37
    codec = fit_codec(clip=2.0, num_summands=n, ring_bits=ring_bits, frac_bits=None)
    spec = SecAggSpec(codec=codec, vector_len=vector_len, degree=degree, key_seed=3)
    roster = list(range(100, 100 + n))  # platform ids are not protocol ids
    x = {c: rng.normal(scale=1.5, size=vector_len) for c in roster}  # some coordinates beyond the clip
    params = spec.params(n, 0)
    unmasked = 0
    for trial in range(12):
        order = rng.permutation(roster)
        drops = order[: rng.integers(0, n - params.t + 1)]
        steps = rng.integers(0, 4, size=len(drops))
        drop = [{int(c) for c, s in zip(drops, steps, strict=True) if s == k} for k in range(4)]
        cuts = sorted(rng.choice(np.arange(1, n), size=3, replace=False))
        workers = [list(map(int, w)) for w in np.split(rng.permutation(roster), cuts)]
        try:
            got, survivors = play_round(
                spec,
                x,
                workers=workers,
                roster=roster,
                drop_keys=drop[0],
                drop_shares=drop[1],
                drop_upload=drop[2],
                drop_unmask=drop[3],
                shards=int(rng.integers(1, 5)),
                t=trial,
            )
        except SecAggError as err:
            assert degree is not None, err  # the complete graph tolerates any n − t dropouts
            assert "cannot be unmasked" in str(err) or "fewer than t" in str(err)
            continue
        unmasked += 1
        if degree is None:
            assert survivors == set(roster) - drop[0] - drop[1] - drop[2]
        expected = codec.decode(ring_sum([codec.encode(x[c]) for c in sorted(survivors)], ring_bits))
        assert np.array_equal(got, expected), (trial, drop)
        clipped = sum(np.clip(x[c], -codec.clip, codec.clip) for c in survivors)
        assert np.max(np.abs(got - clipped)) <= codec.sum_error_bound(len(survivors)) * (1 + 1e-12)
    assert unmasked >= (12 if degree is None else 4)  # a sparse graph loses more patterns, not all


def test_a_worker_shares_its_clients_keys_once_a_round():
    """A worker asked twice for round t's shares refuses (its clients' share keys take one message each);
    round t + 1, opened anew, shares again."""
    n = 4
    spec = SecAggSpec(codec=fit_codec(clip=1.0, num_summands=n, ring_bits=32, frac_bits=None), vector_len=3)
    head, host = AggregatorSecAgg(spec, "arm"), WorkerSecAgg(spec, "arm")
    for t in (0, 1):
        public = head.open(t, list(range(n)))
        routed = head.route_keys(t, [host.advertise(public, range(n))])
        assert set(host.share(t, routed)) == set(range(n))
        with pytest.raises(SecAggError, match=f"already shared its keys in round {t}"):
            host.share(t, routed)


def test_too_many_dropouts_refuse_to_unmask_and_reveal_nothing():
    n = 6
    spec = SecAggSpec(codec=fit_codec(clip=1.0, num_summands=n, ring_bits=32, frac_bits=None), vector_len=5)
    t_needed = spec.params(n, 0).t
    x = {c: np.zeros(5) for c in range(n)}
    with pytest.raises(SecAggError, match=r"cannot be unmasked|fewer than"):
        play_round(
            spec,
            x,
            workers=[[0, 1, 2], [3, 4, 5]],
            roster=list(range(n)),
            drop_keys=set(),
            drop_shares=set(),
            drop_upload=set(),
            drop_unmask=set(range(n - t_needed + 1)),  # one responder short of t
            shards=2,
        )


def test_a_floor_under_the_threshold_refuses_small_rounds():
    """Distributed DP needs at least ``min_survivors`` noise shares in any sum it unmasks: the threshold is
    raised to it, and a round too small for it is not run."""
    codec = fit_codec(clip=1.0, num_summands=10, ring_bits=32, frac_bits=None)
    spec = SecAggSpec(codec=codec, vector_len=3, min_survivors=8)
    assert spec.params(10, 0).t == 8  # above the default ⌈2·10/3⌉ = 7
    with pytest.raises(SecAggError, match="fewer than the threshold t = 8"):
        spec.params(7, 0)


def test_the_codec_is_fitted_to_the_ring_and_refuses_what_cannot_fit():
    codec = fit_codec(clip=10.0, num_summands=10, ring_bits=32, frac_bits=None)
    assert codec.frac_bits == 24 and codec.bits_needed() <= 32
    assert (
        FixedPointCodec(ring_bits=33, frac_bits=25, clip=10.0, num_summands=10).bits_needed() == 33
    )  # tight
    with pytest.raises(ValueError, match="ring bits"):
        fit_codec(clip=1e12, num_summands=1000, ring_bits=32, frac_bits=None)
