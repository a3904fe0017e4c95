"""The transcripts come from the shipped parties: what the recorder holds is what the real roles exchanged.

The harness (:mod:`sifl_ray.attacks.record`) plays an arm through the server and aggregator actors, the client
role and :func:`~sifl_ray.round.run_round` on the in-process backend. These tests catch it (or a later change)
recording something other than what travelled: an upload that is not what the aggregator summed, a server
input that is not what the server decoded, a truth that is not what the clients trained, a key that is not
the one the server actor made.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from sifl_ray.arms import ARMS, arm_instances
from sifl_ray.attacks.config import Design, load_attack_config
from sifl_ray.attacks.design import design_coding
from sifl_ray.attacks.m2 import m2_coding
from sifl_ray.attacks.record import (
    RecordingBackend,
    epoch_coding,
    make_task,
    platform_config,
    record_arm,
)
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.specs import Coding

SMALL = [
    "model.features=11",  # n = 12
    "clients.num_clients=4",
    "data.samples_per_client=40",
    "train.batch_size=8",
    "coding.n_extra=4",
    "coding.block_size=6",
    "m2.features=11",
    "m2.clients=4",
    "m2.samples_per_client=40",
]


class ReduceTap(RecordingBackend):
    """The recording backend, also keeping every partial sum each aggregator shard was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.partials: dict[int, list] = {}

    def call(self, raw, method, args, kwargs, n):
        if method is AggregatorHost.reduce:
            _arm, t, _epoch, *partials = [self.get(a) for a in args]
            self.partials.setdefault(t, []).append(partials)
        return super().call(raw, method, args, kwargs, n)


def _task(cfg, *, m2: bool = False):
    if m2:
        sizes = dict(features=cfg.m2.features, clients=cfg.m2.clients, samples_per_client=40)
    else:
        sizes = dict(features=cfg.model.features, clients=cfg.clients.num_clients, samples_per_client=40)
    return make_task(hidden=0, teacher_scale=3.0, seed=cfg.seed, **sizes)


def _record(cfg, arm, design, coding, rounds, backend=None):
    rec = TranscriptRecorder()
    task = _task(cfg, m2=coding.get("p") is not None)
    truth = record_arm(
        task, cfg, arm=arm, design=design, coding=coding, rounds=rounds, recorder=rec, backend=backend
    )
    return task, rec, truth


@pytest.mark.parametrize("arm", ["sifl_m1", "sifl_m2", "fl"])
def test_each_recorded_upload_is_what_the_aggregator_summed(arm):
    """One client per worker: each partial sum an aggregator shard reduces is one client's upload times its
    weight |D_i|. The transcript's upload must be that vector, bit for bit (the worker's own sum)."""
    cfg = load_attack_config([*SMALL, "arms=[sifl_m1,sifl_m2,fl]"])
    design = Design.parse("fast-oblique")
    coding = m2_coding(cfg, noise2_scale=1e3) if arm == "sifl_m2" else design_coding(cfg, design)
    backend = ReduceTap()
    _, rec, truth = _record(cfg, arm, design, coding, rounds=3, backend=backend)
    assert rec.rounds() == [1, 2, 3]
    for t in rec.rounds():
        shards = backend.partials[t]  # per shard, the partials of every worker (one client each)
        assert len(shards) >= 2  # the platform's shards: the vector is split over aggregator actors
        for client in truth.clients:
            pieces = [next(p for p in shard if p.source == client) for shard in shards]
            summed = torch.cat([p.weighted_sum for p in pieces])
            upload = torch.as_tensor(rec.uploads[t][client])
            weight = pieces[0].weight
            assert weight == rec.weights[client] == 40.0
            assert torch.equal(summed, torch.zeros_like(upload).add_(upload, alpha=weight))


@pytest.mark.parametrize("arm", ["sifl_m1", "sifl_m2"])
def test_server_inputs_are_what_the_server_received(arm):
    """The recorded server input is the aggregator's average of the recorded uploads (M1), or that average
    under code 2 (M2: ñ × p, and the server's own P1L gives back the average times P2 plus code-2 noise)."""
    cfg = load_attack_config(SMALL)
    design = Design.parse("fast-pinv")
    coding = m2_coding(cfg, noise2_scale=1.0) if arm == "sifl_m2" else design_coding(cfg, design)
    _, rec, truth = _record(cfg, arm, design, coding, rounds=3)
    for t in rec.rounds():
        uploads, clients = rec.upload_matrix(t)
        average = uploads @ rec.client_weights(clients)
        got = rec.server_inputs[t]
        if arm == "sifl_m1":
            assert got.shape == average.shape
            np.testing.assert_allclose(got, average, rtol=0, atol=1e-12 * np.abs(average).max())
        else:
            assert got.shape == (average.shape[0], cfg.coding.p)
            assert rec.broadcasts[t].ndim == (1 if t == 1 else 2)  # round 1 starts from an M1 encoding
            P2R = truth.agg_key.client_view().strip  # W'_a P2R = w~_a: code 2 stripped, the average back
            back = P2R(torch.as_tensor(got)).numpy()
            np.testing.assert_allclose(back, average, rtol=0, atol=1e-9 * np.abs(average).max())


def test_truth_comes_from_the_clients_not_from_a_decoder():
    """The truth is what the clients trained (the tap), not a decoding of the uploads: decoding an upload
    with the key gives it back only up to float64 round-off of a noise 1e6 times the signal, while the
    truth of a plain arm is exactly its upload."""
    cfg = load_attack_config([*SMALL, "coding.beta=1e3", "coding.noise.sigma1=1e3", "arms=[sifl_m1,fl]"])
    design = Design.parse("fast-oblique")
    _, rec, truth = _record(cfg, "sifl_m1", design, design_coding(cfg, design), rounds=2)
    view = truth.keys[0].client_view()
    for t in rec.rounds():
        uploads, _ = rec.upload_matrix(t)
        decoded = view.decode(torch.as_tensor(uploads)).numpy()
        gap = np.abs(decoded - truth.upload_models[t]).max()
        assert 0 < gap < 1e-4 * np.abs(truth.upload_models[t]).max()
        np.testing.assert_array_equal(truth.local_models[t], truth.upload_models[t])  # privacy.clip: no-op
        np.testing.assert_allclose(
            truth.upload_models[t] - truth.broadcast_models[t][:, None], truth.updates[t]
        )
    _, rec, truth = _record(cfg, "fl", design, {}, rounds=2)
    for t in rec.rounds():
        np.testing.assert_array_equal(rec.upload_matrix(t)[0], truth.upload_models[t])


def test_keys_are_the_server_actors_and_rekeying_starts_a_new_epoch():
    """A re-keyed design sets the arm up again: the server actor makes an independent key (announced in the
    transcript) and the clients' stamps follow (a partial of the wrong epoch would be refused)."""
    from sifl_ray.parties.server import ServerHost

    cfg = load_attack_config(SMALL)
    design = Design.parse("fast-oblique-rekey2")
    _, rec, truth = _record(cfg, "sifl_m1", design, design_coding(cfg, design), rounds=5)
    assert rec.key_epochs == {1: 0, 3: 1, 5: 2} and sorted(truth.keys) == [0, 1, 2]
    P1 = [truth.keys[e].dense()[0] for e in range(3)]
    assert not torch.equal(P1[0], P1[1]) and not torch.equal(P1[1], P1[2])
    # The keys are reproducible from the key seed, by the server actor alone, epoch by epoch.
    platform = platform_config(cfg, clients=4, rounds=5, coding=design_coding(cfg, design))
    for epoch in range(3):
        server = ServerHost()
        server.setup_arm("sifl_m1", coding=Coding.M1, n=12, spec=epoch_coding(platform, epoch))
        assert torch.equal(server.roles["sifl_m1"].key.dense()[0], P1[epoch])


@pytest.mark.parametrize("kind", sorted(ARMS))
def test_every_registered_arm_can_be_recorded(kind):
    """Whatever its coding, an arm plays through the parties and every channel is recorded."""
    cfg = load_attack_config([*SMALL, f"arms=[{kind}]"])
    platform = platform_config(cfg, clients=4, rounds=2)
    design = Design.parse("fast-oblique")
    for arm in arm_instances(platform):
        coding = (
            m2_coding(cfg, noise2_scale=1.0)
            if ARMS[kind].coding.aggregator_encodes
            else design_coding(cfg, design)
        )
        task, rec, truth = _record(cfg, arm, design, coding, rounds=2)
        n_tilde = task.n + 4 if ARMS[kind].coding.coded else task.n
        assert rec.rounds() == [1, 2] and rec.n_tilde == n_tilde
        assert len(rec.uploads[2]) == 4 and len(rec.broadcasts) == 2 and len(rec.server_inputs) == 2
        assert truth.upload_models[2].shape == (task.n, 4) and truth.coding is ARMS[kind].coding


def test_plain_uploads_are_recorded_as_sent():
    """An NbAFL upload is the client's model plus its own noise: the transcript holds the noised vector (the
    step's output), the truth the trained model."""
    cfg = load_attack_config([*SMALL, "arms=[nbafl]"])
    _, rec, truth = _record(cfg, "nbafl_eps1", Design.parse("fast-oblique"), {}, rounds=2)
    for t in rec.rounds():
        uploads, _ = rec.upload_matrix(t)
        np.testing.assert_array_equal(uploads, truth.upload_models[t])
        assert np.linalg.norm(uploads - truth.local_models[t], axis=0).min() > 1.0


def test_no_second_implementation_of_the_protocol():
    """The attack suite plays the shipped roles: no simulator of Algorithm 2, and none of the clients' target
    optimizer or the M2 server's re-encoding, remains in it."""
    root = Path(__file__).resolve().parents[2] / "sifl_ray"
    assert not [p for p in root.rglob("*.py") if re.search(r"def simulate_m[12]\b", p.read_text())]
    for path in (root / "attacks").glob("*.py"):
        assert not re.search(
            r"fused_update|stepwise_update|\.reencode\(|client_view\(\)\.strip", path.read_text()
        ), path
