"""Noise is a party's secret: SIFL's r1, R1, R2 and each NbAFL client's noise come from streams that carry
at least 128 bits of the party's secret seed (secure random, or derived from ``coding.key_seed``), never from
the public run seed."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
import torch

from sifl_ray.arms.steps import chain, clip, gaussian
from sifl_ray.coding import make_server_key
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.models import build_model, flatten_params
from sifl_ray.optim import TorchTrainer
from sifl_ray.parties.aggregator import aggregator_from_state, make_aggregator_state
from sifl_ray.parties.key_holdings import key_inventory
from sifl_ray.parties.messages import Partial
from sifl_ray.parties.server import Server, make_server
from sifl_ray.parties.workers import ArmSetup, ClientWorker, LocalTraining
from sifl_ray.party_seeds import ClientNoiseSeeds, party_seed
from sifl_ray.seeding import (
    _generator_from_words,
    _mt_init_genrand,
    noise_generator,
    secret_torch_generator,
    torch_generator,
)
from sifl_ray.specs import Coding, CodingSpec

SEED = bytes(range(32))
CODING = CodingSpec(
    key_seed=None,
    backend="fast",
    left_inverse="oblique",
    n_extra=16,
    alpha=1e-3,
    beta=1.0,
    kappa=None,
    block_size=8,
    p=2,
    gamma=1e-2,
    eta=1.0,
    noise_distribution="gaussian",
    sigma1=1e3,
    sigma2=1e3,
)


@pytest.mark.parametrize("bad", [7, b"short", b"x" * 15, "a" * 32])
def test_noise_streams_refuse_seeds_below_128_bits(bad):
    with pytest.raises(ValueError, match="128 bits"):
        noise_generator(bad, "server", "r1")
    with pytest.raises(ValueError, match="128 bits"):
        secret_torch_generator(bad, "noise", "nbafl")


def test_a_party_with_a_short_noise_seed_refuses_to_draw():
    key = make_server_key(n=20, n_tilde=24, backend="fast", alpha=1e-3, beta=1.0, seed=SEED)
    server = Server(coding=Coding.M1, key=key, noise=NoiseSpec("gaussian", 1.0), noise_seed=b"8 bytes!")
    with pytest.raises(ValueError, match="128 bits"):
        server.initial_broadcast(torch.zeros(20, dtype=torch.float64))


def test_noise_generator_is_philox_keyed_by_the_whole_seed():
    gen = noise_generator(SEED, "server", "r1", 0, 1)
    assert isinstance(gen.bit_generator, np.random.Philox)
    key = gen.bit_generator.state["state"]["key"]
    assert key.dtype == np.uint64 and key.size == 2  # a 128-bit key
    flipped = bytearray(SEED)
    flipped[-1] ^= 1  # the last byte of the secret counts too
    other = noise_generator(bytes(flipped), "server", "r1", 0, 1).bit_generator.state["state"]["key"]
    assert not np.array_equal(key, other)
    again = noise_generator(SEED, "server", "r1", 0, 1)
    assert np.array_equal(gen.standard_normal(1000), again.standard_normal(1000))
    assert not np.array_equal(
        again.standard_normal(1000), noise_generator(SEED, "server", "r1", 0, 2).random()
    )


def test_secret_torch_generator_sets_the_whole_mersenne_twister_state():
    # The layout is right: the reference initialisation of a seed reproduces torch's own manual_seed stream.
    g, h = _generator_from_words(_mt_init_genrand(12345)), torch.Generator().manual_seed(12345)
    f64 = torch.float64
    assert torch.equal(torch.randn(3000, generator=g, dtype=f64), torch.randn(3000, generator=h, dtype=f64))
    a, b = secret_torch_generator(SEED, "noise", 1), secret_torch_generator(SEED, "noise", 1)
    x = torch.randn(1000, generator=a, dtype=torch.float64)
    assert torch.equal(x, torch.randn(1000, generator=b, dtype=torch.float64))
    other = secret_torch_generator(SEED, "noise", 2)
    assert not torch.equal(x, torch.randn(1000, generator=other, dtype=torch.float64))
    # 624 words from the seed, not the expansion of a 64-bit manual_seed: they do not follow init_genrand.
    words = secret_torch_generator(SEED, "noise", 1).get_state().numpy()[24 : 24 + 8 * 624].copy().view("<u8")
    assert len(set(words.tolist())) > 600 and not np.array_equal(words, _mt_init_genrand(int(words[0])))


@pytest.mark.parametrize("distribution", ["gaussian", "laplace"])
def test_noise_spec_draws_from_a_numpy_stream(distribution):
    spec = NoiseSpec(distribution, 3.0)
    x = spec.sample((200_000,), noise_generator(SEED, "test"))
    assert x.dtype == torch.float64 and x.shape == (200_000,)
    std = 3.0 * (2**0.5 if distribution == "laplace" else 1.0)
    assert abs(float(x.mean())) < 5 * std / 200_000**0.5  # five standard errors
    assert float(x.std()) == pytest.approx(std, rel=0.02)
    # the law, not only its moments: P(|X| > 3 std) is exp(-3√2) = 0.0144 for Laplace, 0.0027 for Gaussian
    beyond = float((x.abs() > 3 * std).double().mean())
    expected = math.exp(-3 * math.sqrt(2)) if distribution == "laplace" else 0.0026998
    assert beyond == pytest.approx(expected, abs=5 * math.sqrt(expected / 200_000))  # five standard errors
    assert torch.equal(x, spec.sample((200_000,), noise_generator(SEED, "test")))
    assert torch.equal(
        NoiseSpec(distribution, 0.0).sample((3,), noise_generator(SEED, "test")), torch.zeros(3)
    )


def _server_r1(key_seed):
    role, _ = make_server(arm="sifl_m1", coding=Coding.M1, n=40, spec=replace(CODING, key_seed=key_seed))
    r1 = role._r1(1, None)
    # drawn from the Philox stream keyed by the server's secret noise seed (not a 64-bit torch seed)
    stream = noise_generator(role._noise_seed, "server", "r1", 0, 1)
    assert torch.equal(r1, NoiseSpec("gaussian", 1e3).sample((16,), stream))
    return r1


def _aggregator_R2(key_seed):
    coding = replace(CODING, key_seed=key_seed)
    state = make_aggregator_state(arm="sifl_m2", coding=Coding.M2, spec=coding)
    agg = aggregator_from_state(coding=Coding.M2, spec=coding, state=state, bounds=(0, 56), shard=0)
    zero = Partial(
        source=0,
        round=1,
        key_epoch=0,
        weighted_sum=torch.zeros(56, dtype=torch.float64),
        weight=1.0,
        accepted=1,
    )
    W, _ = agg.reduce(1, 0, [zero])  # = 0·P2 + R2 N2: the aggregator's noise alone
    stream = noise_generator(agg._noise_seed, "aggregator", "R2", 0, 1, 0)
    R2 = NoiseSpec("gaussian", 1e3).sample((56, 1), stream)
    assert torch.equal(W, agg.key.encode(torch.zeros(56, dtype=torch.float64), R2))
    return W


@pytest.mark.parametrize("draw", [_server_r1, _aggregator_R2], ids=["server r1", "aggregator R2"])
def test_sifl_noise_is_secret_without_key_seed_and_reproducible_with_it(draw):
    """Two parties with secret seeds draw different noise (the run seed is the same: it plays no part); two
    parties with the same key_seed draw the same noise, and another key_seed other noise."""
    a, b = draw(None), draw(None)
    assert float(a.abs().max()) > 1.0 and not torch.equal(a, b)
    assert torch.equal(draw(7), draw(7))
    assert not torch.equal(draw(7), draw(8))


def _nbafl_noise(*, key_seed, run_seed, noise=None, t=2):
    """What client 0's NbAFL noise was in round ``t``: a no-op client uploads clip(w0) + noise."""
    gen = torch_generator(0, "init")
    net = build_model("digits_mlp", input_shape=(1, 8, 8), num_classes=10, generator=gen).double()
    w0 = flatten_params(net).to(torch.float64)
    role = ClientWorker(
        worker=0,
        x_train=np.zeros((20, 1, 8, 8), dtype=np.float32),
        y_train=np.zeros(20, dtype=np.int64),
        partitions={0: np.arange(20)},
        trainer=TorchTrainer(net, "sgd", lr=0.1),
        training=LocalTraining(
            batch_size=8, local_epochs=1, local_steps=0, seed=run_seed, skip_training=True
        ),
        device=torch.device("cpu"),
    )
    noise = ClientNoiseSeeds(key_seed) if noise is None else noise
    role.set_arm("nbafl", ArmSetup(coding=Coding.PLAIN, step=chain(clip(1e9), gaussian(1.0, noise))))
    (partial,) = role.train_round("nbafl", t, w0, Coding.PLAIN, [0], [(0, w0.numel())]).partials
    return partial.weighted_sum / 20.0 - w0


def test_nbafl_noise_differs_between_runs_without_key_seed():
    """The run seed alone does not determine it: same run seed, two runs, two noises."""
    a, b = _nbafl_noise(key_seed=None, run_seed=0), _nbafl_noise(key_seed=None, run_seed=0)
    assert float(a.std()) == pytest.approx(1.0, rel=0.1)
    assert float((a - b).abs().max()) > 1.0


def test_nbafl_noise_is_reproducible_with_key_seed_and_independent_of_the_run_seed():
    a = _nbafl_noise(key_seed=7, run_seed=0)
    assert torch.allclose(a, _nbafl_noise(key_seed=7, run_seed=0), rtol=0, atol=1e-12)
    assert torch.allclose(a, _nbafl_noise(key_seed=7, run_seed=123), rtol=0, atol=1e-12)
    assert float((a - _nbafl_noise(key_seed=8, run_seed=0)).abs().max()) > 1.0
    assert float((a - _nbafl_noise(key_seed=7, run_seed=0, t=3)).abs().max()) > 1.0  # a stream per round


def test_client_noise_seeds_stay_in_their_worker():
    """Made on first use, from the one rule (party_seed), kept for a retried round, never pickled."""
    noise = ClientNoiseSeeds(key_seed=None)
    assert key_inventory({"noise": noise}) == set()
    first = _nbafl_noise(key_seed=None, run_seed=0, noise=noise)
    assert torch.allclose(first, _nbafl_noise(key_seed=None, run_seed=0, noise=noise), rtol=0, atol=1e-12)
    (seed,) = noise.client_seeds.values()
    assert isinstance(seed, bytes) and len(seed) == 32
    assert key_inventory({"noise": noise}) == {"client-noise-seed"}
    blob = pickle.dumps(noise)
    assert seed not in blob and pickle.loads(blob).client_seeds == {}
    assert seed.hex() not in repr(noise)
    derived = ClientNoiseSeeds(key_seed=7)
    derived.generator("nbafl", 3, 1)
    assert derived.client_seeds[("nbafl", 3)] == party_seed(7, "nbafl", "client-3")


@pytest.mark.parametrize("nbytes", [0, 1, 8, 32, 33, 64, 2496])
@pytest.mark.parametrize("seed", [0, -3, 2**100, b"k" * 32])
def test_derived_bytes_are_sha256_blocks_of_the_whole_message(seed, nbytes):
    """Each 32-byte block is SHA-256 of seed ‖ (0x00 ‖ name)… ‖ le32(block index), hashed whole here: the
    streams every party derives (keys, noise, samples) must not change with how the prefix is hashed."""
    import hashlib

    from sifl_ray.seeding import derive_bytes

    base = seed if isinstance(seed, bytes) else int(seed).to_bytes(16, "little", signed=True)
    names = ("noise", 3, "client 7")
    message = base + b"".join(b"\x00" + str(n).encode() for n in names)
    want = b"".join(hashlib.sha256(message + i.to_bytes(4, "little")).digest() for i in range(79))
    assert derive_bytes(seed, *names, nbytes=nbytes) == want[:nbytes]
