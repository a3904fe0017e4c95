"""The coding as a value (:class:`sifl_ray.specs.Coding`): what each coding makes each party do, the strings
records keep, and what a party does with each form of an M2 broadcast."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sifl_ray.arms import ARMS
from sifl_ray.coding import make_aggregator_key
from sifl_ray.errors import SiflError
from sifl_ray.parties.evaluator import Evaluator
from sifl_ray.parties.server import Server, make_server
from sifl_ray.specs import Coding, CodingSpec, UnknownCoding

SPEC = CodingSpec(
    key_seed=3,
    backend="fast",
    left_inverse="oblique",
    n_extra=8,
    alpha=1e-3,
    beta=1.0,
    kappa=None,
    block_size=8,
    p=2,
    gamma=1e-2,
    eta=1.0,
    noise_distribution="gaussian",
    sigma1=10.0,
    sigma2=10.0,
)


def test_each_coding_says_what_its_parties_do():
    """Plain FL codes nothing; M1 codes with key 1 and its server decodes; M2 adds key 2 at the aggregator,
    so its server never holds a plain model."""
    table = {c: (c.coded, c.aggregator_encodes, c.server_holds_model) for c in Coding}
    assert table == {
        Coding.PLAIN: (False, False, True),
        Coding.M1: (True, False, True),
        Coding.M2: (True, True, False),
    }
    assert [c.scheme for c in Coding] == ["PLAIN", "M1", "M2"]
    assert [c.first_broadcast for c in Coding] == [Coding.PLAIN, Coding.M1, Coding.M1]


def test_records_keep_the_strings_they_always_kept():
    """Key files, transcripts and summaries store ``plain``/``m1``/``m2``: earlier runs still read back, and
    a name that is none of them is refused with the choices (a SiflError and a ValueError)."""
    assert [Coding.of(c.value) for c in Coding] == list(Coding)
    assert [c.value for c in Coding] == ["plain", "m1", "m2"]
    with pytest.raises(UnknownCoding, match="'m3'; one of plain, m1, m2") as err:
        Coding.of("m3")
    assert isinstance(err.value, SiflError) and isinstance(err.value, ValueError)


def test_every_registered_arm_declares_a_coding():
    assert ARMS and all(isinstance(arm.coding, Coding) for arm in ARMS.values())


def test_a_server_key_file_stores_the_coding_as_before_and_reads_back():
    """A server's key state keeps ``"mode": "m2"`` (the format of every earlier key file) and a state of
    that format loads back as the same coding and key."""
    server, _ = make_server(arm="sifl_m2", coding=Coding.M2, n=24, spec=SPEC)
    state = server.state_dict()
    assert state["mode"] == "m2"
    again = Server.from_state_dict(state)
    assert again.coding is Coding.M2 and torch.equal(again.key.dense()[0], server.key.dense()[0])


def test_the_evaluator_decodes_an_m2_broadcast_in_the_coding_it_is_told():
    """An M2 arm broadcasts the key-1 encoding until a round releases an aggregate (round 0, or a round
    after skipped ones), then W' with code 2 on: told which, the evaluator (as every client) reads the same
    model from both, and strips nothing from the first."""
    server, view = make_server(arm="sifl_m2", coding=Coding.M2, n=24, spec=SPEC)
    agg = make_aggregator_key(p=2, gamma=SPEC.gamma, eta=SPEC.eta, seed=b"\x07" * 32)
    reader = Evaluator(
        model=torch.nn.Linear(4, 4, dtype=torch.float64),  # 24 parameters, never run here
        x_test=np.zeros((1, 4)),
        y_test=np.zeros(1, dtype=np.int64),
        batch_size=1,
        device=torch.device("cpu"),
    )
    reader.set_arm("sifl_m2", Coding.M2, view, agg.client_view())
    w = torch.linspace(-1.0, 1.0, 24, dtype=torch.float64)
    first = server.initial_broadcast(w)
    W = agg.encode(first, torch.zeros(first.shape[0], 1, dtype=torch.float64))
    assert first.dim() == 1 and W.dim() == 2
    for broadcast, coding in ((first, Coding.M1), (W, Coding.M2)):
        assert torch.allclose(reader.decode("sifl_m2", broadcast, coding), w, rtol=0, atol=1e-9)
    with pytest.raises(ValueError):  # told M2, a key-1 encoding is refused, not silently misread
        reader.decode("sifl_m2", first, Coding.M2)
