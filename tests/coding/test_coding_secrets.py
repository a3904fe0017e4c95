"""Secrets (docs/method.md "Parties", "Mixing"): keys come from ≥ 128 secret bits, never print their material,
and a client's view carries neither N1, nor β, nor the seed."""

from __future__ import annotations

import pickle

import pytest
import torch
from coding_cases import CASES, CODED, case_id, make_key

from sifl_ray.coding import make_aggregator_key, make_server_key
from sifl_ray.coding._common import KeyStream

SEED = bytes(range(32))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_repr_shows_no_material(case):
    key = make_key(*case, n=12, m=4, seed=SEED)
    text = repr(key) + str(key) + repr(key.client_view())
    # the internals too: a log line or a traceback with locals must not dump key matrices
    for holder in (key, key.client_view()):
        core = getattr(holder, "core", None)
        if core is not None:
            text += repr(core) + "".join(
                repr(v) for v in vars(core).values() if not isinstance(v, torch.Tensor)
            )
    assert "tensor" not in text and "seed" not in text
    assert SEED.hex() not in text and repr(SEED) not in text and str(list(SEED)) not in text
    if case[0] != "identity":
        int_seed_key = make_key(*case, n=12, m=4, seed=987654321123456789)
        assert "987654321123456789" not in repr(int_seed_key)
        assert f"alpha={key.alpha:g}" in repr(key)  # the public scales are shown


@pytest.mark.parametrize("case", CODED, ids=case_id)
def test_client_view_carries_no_kernel_or_seed(case):
    key = make_key(*case, n=24, m=6, seed=SEED)
    view = key.client_view()
    blob = pickle.dumps(view)
    assert SEED not in blob  # the seed would regenerate N1 and the noise map
    assert SEED in pickle.dumps(key)  # (the test can fail: the full key does carry it)
    assert not hasattr(view, "apply_N1")
    _, _, N1 = key.dense()
    clone = pickle.loads(blob)
    for value in vars(clone.core).values():
        tensors = [value] if isinstance(value, torch.Tensor) else []
        for t in tensors:
            assert t.shape != N1.shape or not torch.equal(t, N1)
    if case[0] == "block":
        assert all(g.N1 is None for g in clone.core.groups)


def test_default_seed_is_fresh_secure_randomness():
    a = make_server_key(n=16, n_tilde=20, backend="fast", alpha=1e-2, beta=1.0)
    b = make_server_key(n=16, n_tilde=20, backend="fast", alpha=1e-2, beta=1.0)
    assert isinstance(a.seed, bytes) and len(a.seed) >= 16  # ≥ 128 bits (32 bytes by default)
    assert a.seed != b.seed
    w = torch.ones(16, dtype=torch.float64)
    assert not torch.allclose(a.apply_P1(w), b.apply_P1(w))
    agg = make_aggregator_key(p=2, gamma=1e-3, eta=1.0)
    assert isinstance(agg.seed, bytes) and len(agg.seed) == 32


def test_key_streams_are_separated_by_name():
    s1, s2 = KeyStream(SEED, "server-key", 0), KeyStream(SEED, "server-key", 1)
    assert torch.equal(s1.permutation("p", 50), KeyStream(SEED, "server-key", 0).permutation("p", 50))
    assert not torch.equal(s1.permutation("p", 50), s2.permutation("p", 50))
    assert not torch.equal(s1.signs("a", 64), s1.signs("b", 64))
    u = s1.uniform("u", 10_000)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0 and abs(float(u.mean()) - 0.5) < 0.02
    z = s1.normal("z", (20_000,))
    assert abs(float(z.mean())) < 0.05 and abs(float(z.std()) - 1.0) < 0.05
