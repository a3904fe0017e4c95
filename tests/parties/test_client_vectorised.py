"""A client worker that trains its clients together gives what its loop gives, for every kind of arm.

Two :class:`~sifl_ray.parties.workers.ClientWorker` s on the same data, keys and noise seeds, one with
``vectorise=True``, one with ``False``, play the same round of: plain FedAvg, NbAFL's client step
(clip and add noise), DP-FedAvg's (clip the update, equal weights), SIFL M1 fused (the worker's shortcut,
and with every upload materialised), stepwise, and M2. Clients of unequal sizes (several minibatch counts,
ragged minibatches), one of them poisoned with NaN in some cases. The partial sums, the accepted and
rejected clients, the clipped counts and the loss sums must agree: exactly where they are not arithmetic,
and within a tolerance derived from rigorous bounds where they are:

* each client's training: 2E, E the bound of ``tests/training_roundoff.py`` on any execution's distance
  from exact arithmetic, for the model's dtype;
* the client steps: clipping is a projection on a ball (nonexpansive), the noise is the same draw, an
  update is a subtraction; plus their float64 rounding;
* the coding: the key's rigorous float64 constants (:meth:`~sifl_ray.coding.base.ServerKey.roundoff`) for
  every product, and γ_k for the sums, whatever their order; a stepwise client's decode and encode at every
  step perturb its trajectory, and the bound carries that perturbation through the remaining steps.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn
from training_roundoff import U64, gamma, one_step_sum, reference

from sifl_ray.arms.dp_fedavg import clipped_update
from sifl_ray.arms.steps import chain, clip, gaussian
from sifl_ray.coding import NoiseSpec, make_aggregator_key, make_server_key
from sifl_ray.models import MLP, flatten_params
from sifl_ray.optim import TorchTrainer, vectorised
from sifl_ray.parties.upload import PlainSum
from sifl_ray.parties.workers import ArmSetup, ClientWorker, LocalTraining
from sifl_ray.party_seeds import ClientNoiseSeeds
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding

SIZES = [24, 17, 40, 9, 24, 31, 9]
ROUND, BATCH = 2, 8
ARMS = ["fl", "nbafl", "dp_fedavg", "m1", "m1_materialised", "m1_stepwise", "m2"]
OPTIMIZERS = {"sgd": (0.1, 0), "momentum": (0.1, 0), "adam": (0.01, 2)}  # lr, local steps (0: an epoch)
POISONED = 2


@pytest.fixture(autouse=True)
def every_chunk_together(monkeypatch):
    """This worker hosts seven clients in four groups: train every chunk together, however small."""
    monkeypatch.setattr(vectorised, "MIN_TOGETHER", 1)


def model(dtype: torch.dtype) -> nn.Module:
    net = MLP(16, (12,), 5)
    gen = torch_generator(0, "init")
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-0.5, 0.5, generator=gen)
    return net.to(dtype)


class Setting:
    """Both workers, the keys, the round's broadcast for each arm."""

    def __init__(self, dtype: torch.dtype, optimizer: str, poisoned: bool, steps: int | None = None):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((sum(SIZES), 1, 4, 4)).astype(np.float32)
        self.y = rng.integers(0, 5, sum(SIZES)).astype(np.int64)
        bounds = np.cumsum([0, *SIZES])
        self.parts = {c: np.arange(bounds[c], bounds[c + 1]) for c in range(len(SIZES))}
        self.dtype, self.optimizer = dtype, optimizer
        self.lr, self.steps = OPTIMIZERS[optimizer]
        self.steps = self.steps if steps is None else steps
        if poisoned:  # its first sample; every sample where a client sees only its first minibatch
            self.x[self.parts[POISONED] if self.steps == 1 else self.parts[POISONED][0]] = np.nan
        self.net = model(dtype)
        self.w0 = flatten_params(self.net)
        n = self.w0.numel()
        # Moderate scales: at the paper's (α = 1e-3, noise 1e3) the coding's own float64 resolution is far
        # coarser than training round-off, and both workers' uploads would be equal for that reason alone.
        self.key = make_server_key(
            n=n, n_tilde=n + 13, backend="dense", left_inverse="oblique", alpha=1.0, beta=1.0, seed=7
        )
        self.agg = make_aggregator_key(p=2, gamma=1.0, eta=1.0, seed=8)
        noise = torch.Generator().manual_seed(1)
        self.w_tilde = self.key.encode(self.w0, NoiseSpec("gaussian", 1.0).sample((13,), noise))
        self.W = self.agg.encode(self.w_tilde, NoiseSpec("gaussian", 1.0).sample((n + 13, 1), noise))
        seeds = ClientNoiseSeeds(key_seed=5)  # one object for both workers: the same noise
        self.setups = {
            "fl": ArmSetup(coding=Coding.PLAIN),
            # every arm's clip of the local model (privacy.clip): one that never binds, one that does
            "fl_clip": ArmSetup(coding=Coding.PLAIN, step=clip(1e3)),
            "fl_tight": ArmSetup(
                coding=Coding.PLAIN, step=clip(0.99 * float(torch.linalg.vector_norm(self.w0)))
            ),
            "nbafl": ArmSetup(coding=Coding.PLAIN, step=chain(clip(1.0), gaussian(0.01, seeds))),
            "dp_fedavg": ArmSetup(coding=Coding.PLAIN, step=clipped_update(0.5), uniform_weights=True),
            "m1": ArmSetup(coding=Coding.M1, server_view=self.key.client_view()),
            "m1_materialised": ArmSetup(coding=Coding.M1, server_view=self.key.client_view()),
            "m1_stepwise": ArmSetup(
                coding=Coding.M1, server_view=self.key.client_view(), client_form="stepwise"
            ),
            "m2": ArmSetup(
                coding=Coding.M2, server_view=self.key.client_view(), aggregator_view=self.agg.client_view()
            ),
        }
        self.roles = {on: self._role(on) for on in (True, False)}

    def _role(self, vectorise: bool, stage_data: bool | None = None) -> ClientWorker:
        training = LocalTraining(
            batch_size=BATCH, local_epochs=1, local_steps=self.steps, seed=3, vectorise=vectorise
        )
        role = ClientWorker(
            worker=0,
            x_train=self.x,
            y_train=self.y,
            partitions=self.parts,
            trainer=TorchTrainer(model(self.dtype), self.optimizer, lr=self.lr),
            training=training,
            device=torch.device("cpu"),
            stage_data=stage_data,
        )
        for arm, setup in self.setups.items():
            role.set_arm(arm, setup)
        return role

    def broadcast(self, arm: str) -> torch.Tensor:
        return {Coding.PLAIN: self.w0, Coding.M1: self.w_tilde, Coding.M2: self.W}[self.setups[arm].coding]

    def play(self, vectorise: bool, arm: str):
        role = self.roles[vectorise]
        role.materialize = arm == "m1_materialised"
        b = self.broadcast(arm)
        coding = self.setups[arm].coding  # each arm's broadcast here is in its own coding (M2: W')
        out = role.train_round(arm, ROUND, b, coding, list(self.parts), [(0, b.shape[0])])
        (partial,) = out.partials
        return partial, out.report

    def data(self, client: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The client's minibatches of the round, in the model's dtype."""
        batches = self.roles[False]._batch_indices(client, ROUND)
        return [(torch.from_numpy(self.x[b]).to(self.dtype), torch.from_numpy(self.y[b])) for b in batches]

    def references(self, accepted: list[int], stepwise: bool = False) -> dict:
        """Each accepted client's float64 reference run and its bound (a stepwise client's trajectory is
        perturbed at every step by its decode and encode: see :func:`stepwise_perturbations`)."""
        out = {}
        for c in accepted:
            data = self.data(c)
            run = {"optimizer": self.optimizer, "lr": self.lr, "dtype": self.dtype}
            ref = reference(self.net, self.w0, data, **run)
            if stepwise:
                extra, final = stepwise_perturbations(self, ref)
                ref = reference(self.net, self.w0, data, **run, extra=extra)
                ref.e = ref.e + final
            out[c] = ref
        return out


def stepwise_perturbations(s: Setting, ref) -> tuple[list[float], float]:
    """How far a stepwise client's decoded point may be from the point its optimizer stepped to, at each
    step (2-norm, used elementwise): the encode ``w~ − P1 g`` and the decode, each by the key's rigorous
    constants, plus ``P1L P1 ≠ I`` in the stored floats. Loading the decoded point into a float32 model
    rounds it to the nearest float32, and the point stepped to is one, so the load at most doubles that.
    Returns the perturbation before each later step and the final decode's."""
    ro = s.key.roundoff()
    path = [s.w0, *ref.path]
    slack = 2 * float(torch.linalg.vector_norm(ref.e))
    g = [float(torch.linalg.vector_norm(a - b)) + slack for a, b in itertools.pairwise(path)]
    wt = float(torch.linalg.vector_norm(s.w_tilde))
    eps = []
    for gk in g:
        wt_next = wt + ro.p1_norm * gk
        eps.append(
            ro.p1l_norm * (ro.apply_p1 * gk + U64 * (wt_next + ro.p1_norm * gk))
            + ro.pp_defect * gk
            + ro.decode * wt_next
        )
        wt = wt_next
    load = 2.0 if s.dtype != torch.float64 else 1.0
    return [load * e for e in eps[:-1]], eps[-1]


def upload_norms(s: Setting, arm: str, refs: dict) -> dict[int, float]:
    """A bound on each accepted client's upload norm."""
    out = {}
    for c, ref in refs.items():
        w = ref.w.abs() + ref.e
        if arm in ("fl",):
            out[c] = float(torch.linalg.vector_norm(w))
        elif arm in ("nbafl", "dp_fedavg"):
            clip = 1.0 if arm == "nbafl" else 0.5
            out[c] = clip + 0.01 * 4 * math.sqrt(w.numel())  # the noise: 4σ per entry at most, here
        else:
            d = float(torch.linalg.vector_norm(w + s.w0.abs()))
            out[c] = float(torch.linalg.vector_norm(s.w_tilde)) * 1.01 + s.key.roundoff().p1_norm * d
    return out


def tolerance(s: Setting, arm: str, refs: dict, sizes: dict[int, float]) -> tuple[torch.Tensor, float]:
    """(elementwise part, uniform part) of the bound on |partial_auto − partial_off| (plain arms) or on
    |decode(partial_auto) − decode(partial_off)| (coded arms): each execution's distance from exact, twice."""
    N = len(refs)
    W = sum(sizes[c] for c in refs)
    norms = upload_norms(s, arm, refs)
    sum_norms = sum(sizes[c] * norms[c] for c in refs)
    training = sum(sizes[c] * 2 * refs[c].e for c in refs)
    if arm == "fl":  # the sums in another order, elementwise
        mags = sum(sizes[c] * (refs[c].w.abs() + refs[c].e) for c in refs)
        return training + 2 * gamma(N + 1, U64) * mags, 0.0
    if arm in ("nbafl", "dp_fedavg"):  # nonexpansive steps: 2-norm, then used elementwise
        n = s.w0.numel()
        steps = sum(sizes[c] * (n + 200) * U64 * norms[c] for c in refs)
        two_norm = float(torch.linalg.vector_norm(training)) + 2 * (gamma(N + 1, U64) * sum_norms + steps)
        return torch.zeros_like(s.w0), two_norm
    ro = s.key.roundoff()
    wt = float(torch.linalg.vector_norm(s.w_tilde)) * 1.01
    norm = torch.linalg.vector_norm
    d = {c: float(norm(refs[c].w - s.w0)) + float(norm(refs[c].e)) for c in refs}  # ‖w_K − w0‖
    encode = {c: ro.apply_p1 * d[c] + U64 * (wt + ro.p1_norm * d[c] + norms[c]) for c in refs}
    coding = sum(sizes[c] * (ro.p1l_norm * encode[c] + ro.pp_defect * d[c]) for c in refs)
    sums = ro.p1l_norm * gamma(N + 2, U64) * (sum_norms + W * wt)
    partial = ro.decode * (sum_norms + W * wt)
    defect = ro.pp_defect * float(torch.linalg.vector_norm(training))
    return training, 2 * (coding + sums + partial) + defect


# NbAFL refuses to privatize a NaN model on either path (test_client_worker.py): no poisoned NbAFL case
CASES = [(arm, poisoned) for arm in ARMS for poisoned in (False, True) if not (poisoned and arm == "nbafl")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize(
    ("arm", "poisoned"), CASES, ids=[f"{a}-{'poisoned' if p else 'clean'}" for a, p in CASES]
)
def test_vectorised_worker_equals_the_loop(arm, optimizer, dtype, poisoned):
    s = Setting(dtype, optimizer, poisoned)
    vec, vec_report = s.play(True, arm)
    loop, loop_report = s.play(False, arm)
    # what is not arithmetic is equal
    assert vec_report.accepted == loop_report.accepted
    assert vec_report.rejected == loop_report.rejected
    assert vec_report.clipped == loop_report.clipped and vec_report.weight == loop_report.weight
    if poisoned:
        assert vec_report.rejected == {POISONED: "non-finite values"}
    assert bool(torch.isfinite(vec.weighted_sum).all())
    # what is arithmetic agrees within the bound
    sizes = {c: 1.0 if s.setups[arm].uniform_weights else float(len(s.parts[c])) for c in s.parts}
    refs = s.references(loop_report.accepted, stepwise=arm == "m1_stepwise")
    elementwise, uniform = tolerance(s, arm, refs, sizes)
    a, b = vec.weighted_sum, loop.weighted_sum
    if s.setups[arm].coding.coded:
        a, b = s.key.decode(a), s.key.decode(b)
    diff = (a - b).abs()
    if arm in ("nbafl", "dp_fedavg"):
        assert float(torch.linalg.vector_norm(a - b)) <= uniform
    else:
        assert float((diff - elementwise - uniform).max()) <= 0, float((diff / (elementwise + uniform)).max())
    loss_sum = sum(sizes[c] * abs(np.mean(refs[c].losses)) for c in refs)
    loss_tol = (
        sum(sizes[c] * 2 * refs[c].mean_loss_bound for c in refs) + 2 * gamma(len(refs) + 1, U64) * loss_sum
    )
    assert abs(vec_report.train_loss_sum - loop_report.train_loss_sum) <= loss_tol


def test_the_vectorised_worker_is_not_the_loop_in_disguise():
    """The comparison above is between two computations: float64 partial sums differ by round-off (not
    zero), so the vectorised path ran."""
    s = Setting(torch.float64, "momentum", False)
    vec, _ = s.play(True, "fl")
    loop, _ = s.play(False, "fl")
    assert not torch.equal(vec.weighted_sum, loop.weighted_sum)


@pytest.mark.parametrize("arm", ["fl", "m1_stepwise"])
def test_samples_staged_on_the_device_give_the_same_bits(arm):
    """The minibatches of a step are gathered in one call, from the host arrays or from the samples staged
    on the device (:class:`sifl_ray.device.SampleStore`, staged here on the CPU): the same tensors, so the
    same partial sums to the bit."""
    s = Setting(torch.float32, "momentum", False)
    s.roles = {True: s._role(True, stage_data=True)}
    staged, _ = s.play(True, arm)
    s.roles = {True: s._role(True, stage_data=False)}
    host, _ = s.play(True, arm)
    assert torch.equal(staged.weighted_sum, host.weighted_sum)


def add_summed_calls(monkeypatch) -> list[bool]:
    """Whether each chunk the worker offered as one sum was added so (``False``: its sum was not finite)."""
    calls: list[bool] = []
    add = PlainSum.add_summed
    monkeypatch.setattr(PlainSum, "add_summed", lambda self, *a: calls.append(add(self, *a)) or calls[-1])
    return calls


ONE_STEP = [(arm, poisoned) for arm in ("fl", "fl_clip", "m1", "m2") for poisoned in (False, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
@pytest.mark.parametrize(
    ("arm", "poisoned"), ONE_STEP, ids=[f"{a}-{'poisoned' if p else 'clean'}" for a, p in ONE_STEP]
)
def test_one_step_clients_are_summed_as_the_loop_sums_their_models(
    arm, optimizer, dtype, poisoned, monkeypatch
):
    """Clients that each take one step of SGD or Momentum, on a plain arm or the shortcut: the vectorised
    worker adds its chunk (all seven clients) as one sum of gradients, no client's model formed, within
    the bound of both executions: the loop's (each client's, as above) plus the summed execution's
    (:func:`training_roundoff.one_step_sum`). A poisoned client makes the chunk's sum non-finite: the
    chunk then goes client by client, and the same client is refused."""
    s = Setting(dtype, optimizer, poisoned, steps=1)
    calls = add_summed_calls(monkeypatch)
    vec, vec_report = s.play(True, arm)
    assert calls == [not poisoned]
    loop, loop_report = s.play(False, arm)
    assert calls == [not poisoned]  # the loop sums nothing
    assert vec_report.accepted == loop_report.accepted and vec_report.weight == loop_report.weight
    assert (vec_report.clipped, vec_report.stepped) == (loop_report.clipped, loop_report.stepped)
    assert vec_report.step_metrics == loop_report.step_metrics
    refused = {POISONED: "non-finite values"} if poisoned else {}
    assert vec_report.rejected == loop_report.rejected == refused
    sizes = {c: float(len(s.parts[c])) for c in s.parts}
    refs = s.references(loop_report.accepted)
    elementwise, uniform = tolerance(s, "fl" if arm == "fl_clip" else arm, refs, sizes)
    if not poisoned:
        accepted = loop_report.accepted
        summed = one_step_sum(
            s.net, s.w0, [s.data(c)[0] for c in accepted], [sizes[c] for c in accepted], lr=s.lr, dtype=dtype
        )
        elementwise = elementwise + summed.e
        if s.setups[arm].coding.coded:
            uniform += s.key.roundoff().pp_defect * float(torch.linalg.vector_norm(summed.e))
    a, b = vec.weighted_sum, loop.weighted_sum
    if s.setups[arm].coding.coded:
        a, b = s.key.decode(a), s.key.decode(b)
    assert poisoned or not torch.equal(a, b)  # two computations (a poisoned chunk: the stacked one's)
    excess = (a - b).abs() - elementwise - uniform
    assert float(excess.max()) <= 0, float(((a - b).abs() / (elementwise + uniform)).max())
    loss_sum = sum(sizes[c] * abs(np.mean(refs[c].losses)) for c in refs)
    loss_tol = (
        sum(sizes[c] * 2 * refs[c].mean_loss_bound for c in refs) + 2 * gamma(len(refs) + 1, U64) * loss_sum
    )
    assert abs(vec_report.train_loss_sum - loop_report.train_loss_sum) <= loss_tol


@pytest.mark.parametrize("arm", ["nbafl", "dp_fedavg", "m1_materialised", "m1_stepwise", "fl_tight"])
def test_no_sum_where_each_client_s_model_is_needed(arm, monkeypatch):
    """Noise, the update's clip, each upload encoded on its own, the stepwise form, or a clip of the model
    that may bind needs every client's model: one-step clients are then trained and added one by one (and
    the tight clip scales some of them, as the loop's does)."""
    s = Setting(torch.float64, "sgd", False, steps=1)
    calls = add_summed_calls(monkeypatch)
    _, report = s.play(True, arm)
    assert calls == []
    if arm == "fl_tight":
        _, loop_report = s.play(False, arm)
        assert 0 < report.clipped == loop_report.clipped


def test_no_sum_for_adam_or_several_steps(monkeypatch):
    """Adam's first step is not linear in the gradient, and a second step starts from each client's own
    model: neither is summed."""
    calls = add_summed_calls(monkeypatch)
    Setting(torch.float64, "adam", False, steps=1).play(True, "fl")
    Setting(torch.float64, "sgd", False, steps=2).play(True, "fl")
    assert calls == []
    Setting(torch.float64, "sgd", False, steps=1).play(True, "fl")
    assert calls == [True]
