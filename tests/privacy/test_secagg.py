"""Secure aggregation: exact ring sums under dropouts, the quantisation bound, uniform masks, trust boundary.

Real cryptography throughout (X25519, HKDF, ChaCha20, AES-GCM from ``cryptography``); the statistical tests
use fixed key seeds, so they are deterministic, and each comes with a negative control the same test rejects.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy import stats

from sifl_ray.aggregation import Parties, SecureAggregation
from sifl_ray.backends import Placement
from sifl_ray.backends.local import LocalBackend, LocalRef
from sifl_ray.config import load_config
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.messages import MaskedTrained, UnmaskCosts, Unmasked, WorkerReport
from sifl_ray.parties.secure import AggregatorSecAgg, WorkerSecAgg
from sifl_ray.parties.server import ServerHost
from sifl_ray.parties.upload import Local
from sifl_ray.party_seeds import party_seed
from sifl_ray.privacy.secagg import (
    FixedPointCodec,
    SecAggClient,
    SecAggError,
    SecAggParams,
    SecAggServer,
    complete_graph,
    crypto,
    harary_graph,
    prg_ring,
    recovery_problems,
    ring_sum,
    shamir,
)
from sifl_ray.privacy.secagg.graph import NeighbourGraph
from sifl_ray.privacy.secagg.protocol import ID_BYTES
from sifl_ray.privacy.secagg.spec import SecAggSpec
from sifl_ray.round import ArmState, RoundResult, run_round
from sifl_ray.specs import Coding, CodingSpec

P_MIN = 1e-3  # a uniformity test passes above this p-value, a negative control must fall far below it


# ------------------------------------------------------------------------------------------------------------
# Fixed-point codec


def test_codec_refuses_a_ring_too_small_for_the_sum():
    ok = FixedPointCodec(ring_bits=32, frac_bits=16, clip=1.0, num_summands=10)
    assert ok.bits_needed() == (10 * 2**16).bit_length() + 1 == 21
    FixedPointCodec(ring_bits=21, frac_bits=16, clip=1.0, num_summands=10)  # exactly enough
    with pytest.raises(ValueError, match=r"needs 21 ring bits .* frac_bits <= 15"):
        FixedPointCodec(ring_bits=20, frac_bits=16, clip=1.0, num_summands=10)
    with pytest.raises(ValueError, match="ring_bits"):
        FixedPointCodec(ring_bits=65)


@pytest.mark.parametrize("ring_bits", [21, 32, 64])
def test_codec_extreme_sums_do_not_wrap(ring_bits):
    """N clients all at +B (or all at −B) is the largest sum: it must decode exactly to ±N·M/2^f."""
    codec = FixedPointCodec(ring_bits=ring_bits, frac_bits=16, clip=1.0, num_summands=10)
    for sign in (1.0, -1.0):
        enc = [codec.encode(np.full(3, sign * 5.0)) for _ in range(10)]  # clipped to ±1
        assert np.array_equal(codec.decode(ring_sum(enc, ring_bits)), np.full(3, sign * 10.0))


@pytest.mark.parametrize(("ring_bits", "frac_bits", "n"), [(32, 20, 10), (64, 40, 100), (64, 55, 100)])
def test_decoded_sum_within_the_predicted_quantisation_bound(ring_bits, frac_bits, n):
    """|decode(ring sum) − exact real sum| ≤ N·2^-(f+1) (+ half an ulp once N·M > 2^53, the last case)."""
    codec = FixedPointCodec(ring_bits=ring_bits, frac_bits=frac_bits, clip=2.0, num_summands=n)
    rng = np.random.default_rng(7)
    xs = rng.uniform(-2.0, 2.0, size=(n, 400))
    decoded = codec.decode(ring_sum((codec.encode(x) for x in xs), ring_bits))
    exact = np.array(
        [math.fsum(col) for col in xs.T]
    )  # correctly rounded: within half an ulp of the real sum
    err = np.abs(decoded - exact)
    bound = codec.sum_error_bound() + np.spacing(np.abs(exact)) / 2
    assert np.all(err <= bound)
    if frac_bits <= 40:  # inputs have finer digits than 2^-f: rounding shows, the bound is not vacuous
        assert err.max() > codec.sum_error_bound() / 100
    assert codec.count_clipped(xs[0]) == 0 and codec.count_clipped(np.array([2.5, -3.0, 1.0])) == 2


def test_codec_rejects_non_finite_updates():
    codec = FixedPointCodec(num_summands=2)
    with pytest.raises(ValueError, match="non-finite"):
        codec.encode(np.array([0.0, np.nan]))


# ------------------------------------------------------------------------------------------------------------
# Protocol: exactness under dropouts, on the platform's own parties
#
# A secure arm's round as a run plays it: run_round on the in-process backend, the platform's server and
# aggregator actors, and client workers that are the platform's SecAgg halves (WorkerSecAgg, and the ring sum
# a worker masks its clients' uploads into) hosting one client each, with its update given instead of
# trained. A client vanishes before a step by its worker dying there: the backend reports it lost, as Ray
# does, and the round drops it.

ARM = "secagg"
STAGES = ("keys", "shares", "upload", "unmask")  # a client vanishes before advertising keys, ... answering


class _Gone(Exception):
    """A client worker died (the backend calls it lost)."""


class _Lost:
    """The ref of a call whose party died: reading it raises, as an ObjectRef of a dead actor does."""

    def __init__(self, error: _Gone) -> None:
        self.error = error


class _DyingBackend(LocalBackend):
    """The in-process backend, where a worker can die: its call returns refs that raise when read."""

    def call(self, raw, method, args, kwargs, n):
        try:
            return super().call(raw, method, args, kwargs, n)
        except _Gone as err:
            return _Lost(err) if n == 1 else [_Lost(err)] * n

    def get(self, ref):
        if isinstance(ref, _Lost):
            raise ref.error
        return super().get(ref)

    def get_all(self, refs):
        return [self.get(r) for r in refs]

    def is_lost(self, err: BaseException) -> bool:
        return isinstance(err, _Gone)


class _Supervisor:
    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        return 0.0

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        pass


class _ClientHost:
    """A client worker hosting client ``client``, whose update is ``update``; it dies before ``dies``."""

    def __init__(self, spec: SecAggSpec, client: int, update: np.ndarray, dies: str | None) -> None:
        self.secure, self.client, self.update, self.dies = WorkerSecAgg(spec, ARM), client, update, dies

    def _step(self, stage: str) -> None:
        if self.dies == stage:
            raise _Gone(f"client {self.client} vanished before {stage}")

    def secagg_advertise(self, arm, public, clients):
        self._step("keys")
        return self.secure.advertise(public, clients)

    def secagg_share(self, arm, t, routed):
        self._step("shares")
        return self.secure.share(t, routed)

    def train_masked(self, arm, t, broadcast, coding, clients, bounds, inboxes, attempt=0):
        self._step("upload")
        report = WorkerReport(worker=self.client, round=t)
        total = self.secure.round_sum(t, len(self.update), inboxes)
        for c in clients:
            reason = total.add(Local(c, 1.0, 0.0, None, torch.from_numpy(self.update)), report)
            if reason is None:
                report.accepted.append(c)
                report.weight += 1.0
            else:
                report.rejected[c] = reason
        partials, exact = total.partials(self.client, bounds, key_epoch=0, weight=report.weight)
        return MaskedTrained.of(partials, exact, report)

    def secagg_unmask(self, arm, t, survivors, silent=()):
        self._step("unmask")
        responses, costs = self.secure.unmask(t, survivors, silent)
        return Unmasked(responses, UnmaskCosts(**vars(costs)))


class _Evaluator:
    """Keeps the shards' decoded ring sum that a secure round hands the evaluator (simulation only)."""

    def __init__(self) -> None:
        self.sums: list[np.ndarray] = []

    def evaluate(self, arm, t, broadcast, coding, previous=None, previous_coding=None):
        return {}

    def sum_error(self, arm, t, num_shards, *vectors):
        self.sums.append(torch.cat(vectors[:num_shards]).numpy())
        return 0.0


@dataclasses.dataclass
class _Played:
    result: RoundResult
    sum: np.ndarray | None  # the decoded ring sum of U3's inputs (None: nothing was unmasked)
    graph: NeighbourGraph
    t: int  # the round's threshold


@pytest.fixture(scope="module")
def coding() -> CodingSpec:
    return CodingSpec.from_config(load_config(["scenario=quickstart", "output.progress=false"]))


def _play(
    coding: CodingSpec,
    updates: list[np.ndarray],
    spec: SecAggSpec,
    dies: dict[int, str] | None = None,
) -> _Played:
    """One secure round of the platform over clients ``0..N-1`` (client ``i`` on worker ``i``, update
    ``updates[i]``; ``dies``: client → the step its worker dies before)."""
    backend, dies = _DyingBackend(), dies or {}
    n, length = len(updates), len(updates[0])
    here = Placement()
    workers = [backend.spawn(here, _ClientHost, spec, i, updates[i], dies.get(i)) for i in range(n)]
    evaluator = backend.spawn(here, _Evaluator)
    parties = Parties(
        server=backend.spawn(here, ServerHost),
        aggregators=[backend.spawn(here, AggregatorHost, 0)],
        workers=workers,
        evaluator=evaluator,
    )
    server, aggregator = parties.server, parties.aggregators[0]
    server.call(ServerHost.setup_arm, ARM, coding=Coding.PLAIN, n=length, spec=coding, key_path=None)
    aggregator.call(
        AggregatorHost.setup_arm,
        ARM,
        coding=Coding.PLAIN,
        spec=coding,
        state=None,
        bounds=(0, length),
        shard=0,
    )
    aggregator.call(AggregatorHost.set_secagg, ARM, spec)
    arm = ArmState(ARM, Coding.PLAIN, length, [(0, length)], aggregation=SecureAggregation)
    arm.broadcast = server.call(
        ServerHost.initial_broadcast, ARM, LocalRef(torch.zeros(length, dtype=torch.float64))
    )
    result = run_round(backend, parties, arm, 0, [[i] for i in range(n)], supervisor=_Supervisor())
    public = AggregatorSecAgg(spec, ARM).open(0, range(n))  # the graph the aggregator drew for the round
    sums = evaluator.raw.sums
    summed = sums[0] if sums else None
    return _Played(result=result, sum=summed, graph=public.graph, t=public.params.t)


def _outcome(graph: NeighbourGraph, t: int, dies: dict[int, str]) -> tuple[str, set[int], set[int]]:
    """What the round should do (``ok``, ``refused``: nothing revealed, ``raises``: a client refuses to
    share its keys) and U3, U4. A client whose neighbourhood is too small to mask in leaves the round as if
    it had vanished before uploading (its worker refuses its upload; the other clients carry on)."""
    clients = set(range(graph.num_clients))
    u1 = clients - {c for c, s in dies.items() if s == "keys"}
    u2 = u1 - {c for c, s in dies.items() if s == "shares"}
    if len(u1) < t:
        return "refused", set(), set()
    if any(len(graph.neighbours[i] & u1) + 1 < t for i in u2):  # share_keys aborts
        return "raises", set(), set()
    if len(u2) < t:
        return "refused", set(), set()
    uploading = u2 - {c for c, s in dies.items() if s == "upload"}
    u3 = {i for i in uploading if len(graph.neighbours[i] & u2) + 1 >= t}  # mask_update refuses the others
    u4 = u3 - {c for c, s in dies.items() if s == "unmask"}
    if len(u3) < t or recovery_problems(graph, shared=u2, survivors=u3, responders=u4, threshold=t):
        return "refused", u3, u4
    return "ok", u3, u4


def _random_dies(rng: np.random.Generator, n: int, max_drops: int) -> dict[int, str]:
    count = int(rng.integers(0, max_drops + 1))
    who = rng.choice(n, size=count, replace=False)
    return {int(c): STAGES[int(s)] for c, s in zip(who, rng.integers(0, 4, size=count), strict=True)}


@pytest.mark.parametrize(
    ("degree", "threshold", "ring_bits", "max_drops"),
    [(None, None, 32, None), (None, 6, 64, None), (4, 3, 64, 3), (3, 3, 20, 2)],
)
def test_ring_sum_is_exact_under_random_dropouts(coding, degree, threshold, ring_bits, max_drops):
    """The unmasked ring sum equals, bit for bit, the plain ring sum of the survivors' encodings.

    Complete graph: every pattern of up to N − t dropouts at any step must finish. Sparse graph: the round
    must finish exactly when :func:`_outcome` says so, and reveal nothing otherwise.
    """
    n, length = 10, 64
    frac = 12 if ring_bits == 20 else 16
    codec = FixedPointCodec(ring_bits=ring_bits, frac_bits=frac, clip=4.0, num_summands=n)
    rng = np.random.default_rng(2024)
    outcomes = {"ok": 0, "refused": 0, "raises": 0}
    for trial in range(14):
        xs = list(rng.normal(scale=2.0, size=(n, length)))
        spec = SecAggSpec(
            codec, length, degree=degree, threshold=threshold, key_seed=1000 * trial + (degree or 0)
        )
        public = AggregatorSecAgg(spec, ARM).open(0, range(n))
        t = public.params.t
        dies = _random_dies(rng, n, n - t if max_drops is None else max_drops)
        expect, u3, u4 = _outcome(public.graph, t, dies)
        outcomes[expect] += 1
        if degree is None:
            assert expect == "ok", "the complete graph must tolerate any N − t dropouts"
        if expect == "raises":
            with pytest.raises(SecAggError):
                _play(coding, xs, spec, dies)
            continue
        played = _play(coding, xs, spec, dies)
        if expect == "refused":
            assert played.result.skipped and played.sum is None
            continue
        metrics = played.result.metrics
        assert not played.result.skipped
        assert metrics["secagg/survivors"] == len(u3) and metrics["secagg/unanswered"] == len(u3 - u4)
        plain = ring_sum((codec.encode(xs[i]) for i in sorted(u3)), ring_bits)
        assert np.array_equal(played.sum, codec.decode(plain))
        exact = np.sum([np.clip(xs[i], -4.0, 4.0) for i in sorted(u3)], axis=0)
        assert np.all(np.abs(played.sum - exact) <= codec.sum_error_bound(len(u3)) + 1e-12)
    assert outcomes["ok"] >= 5  # the loop really exercised recoveries
    if degree is not None:
        assert outcomes["refused"] + outcomes["raises"] >= 1  # ... and, on a sparse graph, refusals


def test_dropped_clients_are_really_recovered(coding):
    """Masks of a client that dropped after sharing are removed: without recovery the sum would be noise."""
    n = 6
    codec = FixedPointCodec(ring_bits=32, frac_bits=16, clip=2.0, num_summands=n)
    xs = [np.full(32, 0.25 * i) for i in range(n)]
    played = _play(coding, xs, SecAggSpec(codec, 32, key_seed=5), {1: "upload", 4: "unmask"})
    assert played.result.metrics["secagg/survivors"] == 5  # {0, 2, 3, 4, 5}; 4 is rebuilt from shares
    assert played.result.metrics["secagg/unanswered"] == 1
    assert np.array_equal(played.sum, np.full(32, 0.25 * (0 + 2 + 3 + 4 + 5)))
    # the round's average: what the server receives and broadcasts
    assert played.result.metrics["clients/accepted"] == 5


def test_fewer_than_t_survivors_is_a_clear_error(coding):
    n = 6
    codec = FixedPointCodec(ring_bits=32, frac_bits=16, clip=1.0, num_summands=n)
    spec = SecAggSpec(codec, 8, key_seed=1)
    assert AggregatorSecAgg(spec, ARM).open(0, range(n)).params.t == 4
    xs = [np.zeros(8)] * n
    cases = [
        (
            {0: "upload", 1: "upload", 2: "upload"},
            r"masked input: 3 clients left, fewer than the threshold t = 4",
        ),
        (
            {0: "unmask", 1: "unmask", 2: "unmask"},
            r"3 clients answered the unmasking request, fewer than t=4",
        ),
        ({0: "keys", 1: "keys", 2: "shares"}, "fewer than the threshold"),
    ]
    for dies, why in cases:
        result = _play(coding, xs, spec, dies).result
        assert result.skipped and result.skip_reason is not None
        assert re.search(why, result.skip_reason), result.skip_reason
    with pytest.raises(ValueError, match="threshold must be in"):
        SecAggParams(n, 8, codec, threshold=3)  # not a majority of 6


def _parties(params: SecAggParams, *, key_seed: int | None) -> tuple[SecAggServer, list[SecAggClient]]:
    """The server and the N clients of one round of the protocol, each with only its own secrets."""
    graph = harary_graph(
        params.num_clients,
        params.graph_degree,
        seed=party_seed(key_seed, "secagg", f"graph round={params.round_index}"),
    )
    clients = [
        SecAggClient(
            i, params, graph, seed=party_seed(key_seed, "secagg", f"client={i} round={params.round_index}")
        )
        for i in range(params.num_clients)
    ]
    return SecAggServer(params, graph), clients


def test_a_client_answers_the_unmasking_request_only_once():
    n = 4
    codec = FixedPointCodec(ring_bits=32, frac_bits=8, clip=1.0, num_summands=n)
    params = SecAggParams(n, 4, codec)
    server, clients = _parties(params, key_seed=3)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    inboxes = server.route_shares({c.client_id: c.share_keys(routed[c.client_id]) for c in clients})
    survivors = server.collect_masked(
        {c.client_id: c.mask_update(np.zeros(4), inboxes[c.client_id]) for c in clients}
    )
    clients[0].unmask(survivors)
    with pytest.raises(SecAggError, match="already answered"):
        clients[0].unmask(survivors - {3})  # a second survivor set would reveal the key share of client 3


def test_a_client_shares_its_keys_only_once_a_round():
    """Step 1 seals each pair's shares under a key used once (AES-GCM, fixed zero nonce); a second call draws
    fresh Shamir coins and would seal other plaintexts under the same key and nonce. It is refused; the
    client of the next round shares again."""
    n = 4
    codec = FixedPointCodec(ring_bits=32, frac_bits=8, clip=1.0, num_summands=n)
    params = SecAggParams(n, 4, codec)
    server, clients = _parties(params, key_seed=3)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    clients[0].share_keys(routed[0])
    with pytest.raises(SecAggError, match="already shared its keys in round 0"):
        clients[0].share_keys(routed[0])
    # a refused call (keys of a stranger) seals nothing and leaves the one call to come
    strangers = {99: routed[1][next(iter(routed[1]))]}
    with pytest.raises(SecAggError, match="non-neighbours"):
        clients[1].share_keys(strangers)
    clients[1].share_keys(routed[1])
    # the next round: new parties (new keys from the same key seed), one share_keys each again
    server, clients = _parties(dataclasses.replace(params, round_index=1), key_seed=3)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    inboxes = server.route_shares({c.client_id: c.share_keys(routed[c.client_id]) for c in clients})
    assert set(inboxes) == set(range(n))
    with pytest.raises(SecAggError, match="already shared its keys in round 1"):
        clients[2].share_keys(routed[2])


def test_altered_shares_are_detected():
    n = 4
    codec = FixedPointCodec(ring_bits=32, frac_bits=8, clip=1.0, num_summands=n)
    server, clients = _parties(SecAggParams(n, 4, codec), key_seed=3)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    inboxes = server.route_shares({c.client_id: c.share_keys(routed[c.client_id]) for c in clients})
    ciphertext = bytearray(inboxes[0][1])
    ciphertext[5] ^= 1
    inboxes[0][1] = bytes(ciphertext)
    with pytest.raises(SecAggError, match="do not decrypt"):
        clients[0].mask_update(np.zeros(4), inboxes[0])


# ------------------------------------------------------------------------------------------------------------
# Masks: uniform, and a masked upload says nothing about the update


def _byte_uniformity_p(values: np.ndarray) -> float:
    counts = np.bincount(values.astype(np.uint8), minlength=256)
    return float(stats.chisquare(counts).pvalue)


def _top_byte(x: np.ndarray, ring_bits: int) -> np.ndarray:
    return (x >> np.uint64(ring_bits - 8)) & np.uint64(0xFF)


def _all_bytes(x: np.ndarray, ring_bits: int) -> np.ndarray:
    """Every whole byte of each k-bit element, pooled."""
    return np.concatenate([(x >> np.uint64(8 * b)) & np.uint64(0xFF) for b in range(ring_bits // 8)])


@pytest.mark.parametrize("ring_bits", [64, 32, 20])
def test_masks_are_uniform_and_a_biased_mask_is_caught(ring_bits):
    seed = crypto.derive(b"uniformity test", "mask")
    mask = prg_ring(seed, 1 << 15, ring_bits)
    assert mask.dtype == np.uint64 and int(mask.max()) < 2**ring_bits
    # every whole byte of each element, and its top 8 bits
    assert _byte_uniformity_p(_all_bytes(mask, ring_bits)) > P_MIN
    assert _byte_uniformity_p(_top_byte(mask, ring_bits)) > P_MIN
    # negative controls: a masked-off top bit, and a reduction modulo 2^k − 2^(k−2) (modulo bias)
    top_bit_lost = mask & np.uint64((1 << (ring_bits - 1)) - 1)
    assert _byte_uniformity_p(_top_byte(top_bit_lost, ring_bits)) < 1e-12
    modulo_biased = mask % np.uint64(2**ring_bits - 2 ** (ring_bits - 2))
    assert _byte_uniformity_p(_top_byte(modulo_biased, ring_bits)) < 1e-12


def test_pairwise_masks_are_symmetric_and_distinct():
    """i and j derive the same PRG seed from X25519 (so the masks cancel); other pairs get other seeds."""
    keys = [crypto.x25519_from_seed(crypto.derive(b"k", f"client {i}")) for i in range(3)]
    pub = [crypto.public_bytes(k) for k in keys]
    s01 = crypto.agree(keys[0], pub[1], "round=0 pair=0,1 pairwise-mask")
    assert s01 == crypto.agree(keys[1], pub[0], "round=0 pair=0,1 pairwise-mask")
    assert s01 != crypto.agree(keys[0], pub[2], "round=0 pair=0,2 pairwise-mask")
    assert s01 != crypto.agree(keys[0], pub[1], "round=1 pair=0,1 pairwise-mask")


def _masked_upload(update: np.ndarray, params: SecAggParams, key_seed: int | None) -> np.ndarray:
    server, clients = _parties(params, key_seed=key_seed)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    inboxes = server.route_shares({c.client_id: c.share_keys(routed[c.client_id]) for c in clients})
    return clients[0].mask_update(update, inboxes[0]).masked


def test_a_masked_upload_is_independent_of_the_update():
    """Client 0's upload for an all-zero update and for a random one: both uniform, indistinguishable.

    The same two-sample test rejects the unmasked encodings (what a zero mask would upload)."""
    n, length, ring_bits = 3, 1 << 14, 32
    codec = FixedPointCodec(ring_bits=ring_bits, frac_bits=16, clip=1.0, num_summands=n)
    params = SecAggParams(n, length, codec)
    a, b = np.zeros(length), np.random.default_rng(3).uniform(-1.0, 1.0, length)
    ya, yb = _masked_upload(a, params, key_seed=11), _masked_upload(b, params, key_seed=12)

    def two_sample_p(u: np.ndarray, v: np.ndarray) -> float:
        """Chi-square test that the byte histograms of u and v come from one distribution."""
        table = np.stack(
            [np.bincount(_all_bytes(w, ring_bits).astype(np.int64), minlength=256) for w in (u, v)]
        )
        return float(stats.chi2_contingency(table[:, table.sum(axis=0) > 0]).pvalue)

    assert two_sample_p(ya, yb) > P_MIN
    assert _byte_uniformity_p(_all_bytes(ya, ring_bits)) > P_MIN
    assert _byte_uniformity_p(_all_bytes(yb, ring_bits)) > P_MIN
    # negative control: with a zero mask the uploads are the encodings, and the same test tells them apart
    assert two_sample_p(codec.encode(a), codec.encode(b)) < 1e-12
    assert _byte_uniformity_p(_all_bytes(codec.encode(b), ring_bits)) < 1e-12


def test_same_key_seed_reproduces_the_round_and_none_draws_fresh_keys(coding):
    n, length = 4, 16
    codec = FixedPointCodec(ring_bits=32, frac_bits=16, clip=1.0, num_summands=n)
    params = SecAggParams(n, length, codec)
    x = np.linspace(-1, 1, length)
    assert np.array_equal(_masked_upload(x, params, 21), _masked_upload(x, params, 21))
    assert not np.array_equal(_masked_upload(x, params, 21), _masked_upload(x, params, 22))
    assert not np.array_equal(_masked_upload(x, params, None), _masked_upload(x, params, None))
    xs = [x] * n
    spec = SecAggSpec(codec, length)  # key_seed=None: fresh secrets every round, the same sum
    r1, r2 = _play(coding, xs, spec), _play(coding, xs, spec)
    assert np.array_equal(r1.sum, r2.sum)


# ------------------------------------------------------------------------------------------------------------
# The trust boundary


def _walk(obj, seen=None):
    """Every object reachable from ``obj`` through attributes, slots, mappings and sequences."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, np.ndarray | str | bytes | int | float | bool | type(None)):
        return
    if isinstance(obj, dict):
        children = [*obj.keys(), *obj.values()]
    elif isinstance(obj, list | tuple | set | frozenset):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
        if dataclasses.is_dataclass(obj):
            children += [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    for child in children:
        yield from _walk(child, seen)


def _client_secrets(client: SecAggClient) -> set[bytes | int]:
    keys = [client._mask_key, client._encryption_key]  # the test may look inside a client, the server may not
    raw = [crypto.private_bytes(k) for k in keys] + [client._self_mask_seed]
    return set(raw) | {shamir.secret_to_int(r) for r in raw}


def test_the_server_never_holds_a_client_private_key():
    """After a round in which it had to rebuild a dropped client's key, the server object holds no private
    key, no private key bytes and no self-mask seed; the same search finds them in the client objects."""
    n = 6
    codec = FixedPointCodec(ring_bits=32, frac_bits=16, clip=1.0, num_summands=n)
    params = SecAggParams(n, 8, codec)
    server, clients = _parties(params, key_seed=9)
    routed = server.collect_keys({c.client_id: c.advertise_keys() for c in clients})
    inboxes = server.route_shares({c.client_id: c.share_keys(routed[c.client_id]) for c in clients})
    uploads = {
        c.client_id: c.mask_update(np.ones(8), inboxes[c.client_id]) for c in clients if c.client_id != 2
    }
    survivors = server.collect_masked(uploads)
    ring = server.unmask({c.client_id: c.unmask(survivors) for c in clients if c.client_id in survivors})
    assert np.array_equal(codec.decode(ring), np.full(8, 5.0))  # client 2's key was rebuilt and used

    secrets_ = set().union(*(_client_secrets(c) for c in clients))
    held = list(_walk(server))
    assert not any(isinstance(o, X25519PrivateKey) for o in held)
    assert not any(isinstance(o, bytes | int) and not isinstance(o, bool) and o in secrets_ for o in held)
    # the search has teeth: it finds a client's own secrets in the client object
    found = list(_walk(clients[2]))
    assert any(isinstance(o, X25519PrivateKey) for o in found)
    assert any(isinstance(o, bytes) and o in _client_secrets(clients[2]) for o in found)


# ------------------------------------------------------------------------------------------------------------
# Building blocks: Shamir, the graph, the byte count


def test_shamir_any_t_shares_reconstruct_and_fewer_do_not():
    stream = crypto.RandomStream(crypto.derive(b"shamir test", "coins"))
    secret = shamir.secret_to_int(crypto.derive(b"shamir test", "secret"))
    shares = shamir.split(secret, holders=range(1, 8), threshold=4, draw=stream.below)
    rng = np.random.default_rng(0)
    for _ in range(10):
        subset = rng.choice(7, size=int(rng.integers(4, 8)), replace=False) + 1
        assert shamir.reconstruct({int(x): shares[int(x)] for x in subset}, 4) == secret
    three = {x: shares[x] for x in (1, 2, 3)}
    assert shamir.reconstruct(three, 3) != secret  # t − 1 shares interpolate a different polynomial
    with pytest.raises(ValueError, match="cannot rebuild"):
        shamir.reconstruct(three, 4)


def test_harary_graph_is_symmetric_regular_and_seeded():
    seed_a, seed_b = crypto.derive(b"g", "a"), crypto.derive(b"g", "b")
    for n, k in [(10, 4), (11, 4), (10, 3), (11, 3), (100, 14)]:
        g = harary_graph(n, k, seed=seed_a)
        degrees = {len(nb) for nb in g.neighbours}
        assert degrees == ({k + 1} if k % 2 and n % 2 else {k})
        assert g == harary_graph(n, k, seed=seed_a)
        assert g != harary_graph(n, k, seed=seed_b)
    assert harary_graph(7, 6, seed=None) == complete_graph(7)
    assert harary_graph(7, 6, seed=None).is_complete


def test_bytes_and_messages_are_counted_as_on_the_wire(coding):
    n, length, ring_bits = 5, 1000, 32
    codec = FixedPointCodec(ring_bits=ring_bits, frac_bits=16, clip=1.0, num_summands=n)
    metrics = _play(coding, [np.zeros(length)] * n, SecAggSpec(codec, length, key_seed=4)).result.metrics
    share_ct = 2 * ID_BYTES + 2 * shamir.SHARE_BYTES + crypto.GCM_TAG_BYTES
    sent = {
        "keys": 2 * crypto.PUBLIC_KEY_BYTES,  # step 0
        "shares": (n - 1) * share_ct,  # step 1
        "masked": ring_bits * length // 8,  # step 2
        "unmask": n * (ID_BYTES + shamir.SHARE_BYTES),  # step 3: one self-mask share per survivor it holds
    }
    for step, nbytes in sent.items():
        assert metrics[f"secagg/sent_per_client/{step}"] == nbytes
    assert metrics["secagg/bytes_per_client"] > sum(sent.values())  # and what it received
    assert metrics["secagg/client_s"] > 0 and metrics["secagg/server_s"] > 0


def test_params_and_server_check_their_inputs():
    codec = FixedPointCodec(num_summands=3)
    with pytest.raises(ValueError, match="sized for 3 summands"):
        SecAggParams(4, 8, codec)
    with pytest.raises(ValueError, match="num_clients >= 2"):
        SecAggParams(1, 8, codec)
    with pytest.raises(ValueError, match="the graph has"):
        SecAggServer(SecAggParams(3, 8, codec), complete_graph(4))
