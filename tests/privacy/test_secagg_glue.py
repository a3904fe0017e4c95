"""Secure aggregation as the platform's parties run it (:mod:`sifl_ray.parties.secure`, with the public
parameters a secure arm's ``steps(ctx)`` hands them): the client side refuses what the protocol forbids,
forgets its secrets when a round ends, reveals one secret per neighbour, and each round has a fresh graph
and the documented threshold. Each test fails with one realistic single bug that leaves every other test
green. In-process: no Ray, a few clients, vectors of 8 coordinates.
"""

from __future__ import annotations

import gc
import types

import numpy as np
import pytest

from sifl_ray.arms import ArmContext, arm_of
from sifl_ray.config import load_config
from sifl_ray.parties.secure import AggregatorSecAgg, SecAggSpec, WorkerSecAgg, unmask_rows
from sifl_ray.privacy.secagg import SecAggClient, SecAggError, default_threshold, ring_sum

ARM = "secagg"
LEN = 8


def secagg_spec(num_clients: int = 10, *extra: str) -> SecAggSpec:
    """The spec the ``secagg`` arm hands every party (its steps, as the runner asks for them)."""
    cfg = load_config(
        [
            "scenario=quickstart",
            "arms=[secagg]",
            f"clients.num_clients={num_clients}",
            "coding.key_seed=5",
            "output.progress=false",
            *extra,
        ]
    )
    ctx = ArmContext(cfg=cfg, arm=ARM, n=LEN, local_size=50, total_size=50 * num_clients, largest_size=50)
    spec = arm_of(cfg, ARM).steps(ctx).secagg
    assert isinstance(spec, SecAggSpec)
    return spec


class Round:
    """One round driven as :func:`sifl_ray.round.run_round` drives it: the aggregator opens it, two client
    workers host the roster's clients (even ids on one, odd on the other), keys and shares are routed, and
    the clients in ``masking`` upload masked inputs (their protocol ids are their positions in the roster)."""

    def __init__(self, spec: SecAggSpec, t: int, roster: list[int], masking: list[int] | None = None):
        self.spec, self.t = spec, t
        self.aggregator = AggregatorSecAgg(spec, ARM)
        self.public = self.aggregator.open(t, roster)
        self.hosted = [[c for c in roster if c % 2 == k] for k in (0, 1)]
        self.workers = [WorkerSecAgg(spec, ARM) for _ in self.hosted]
        self.keys = [w.advertise(self.public, h) for w, h in zip(self.workers, self.hosted, strict=True)]
        routed = self.aggregator.route_keys(t, self.keys)
        self.inboxes = self.aggregator.route_shares(t, [w.share(t, routed) for w in self.workers])
        masking = roster if masking is None else masking
        rng = np.random.default_rng(t)
        self.x = {c: rng.uniform(-1, 1, LEN) for c in masking}
        self.partials = []
        for w, h in zip(self.workers, self.hosted, strict=True):
            mine = [w.mask(t, c, self.x[c], self.inboxes) for c in h if c in masking]
            if mine:
                self.partials.append(ring_sum(mine, spec.codec.ring_bits))
        self.ids = {c: self.public.index(c) for c in roster}
        self.masking = frozenset(self.ids[c] for c in masking)

    def unmask(self, survivors=None):
        """Announce ``survivors`` (protocol ids; default: every client that masked), collect the answers."""
        survivors = self.aggregator.announce(self.t, self.masking) if survivors is None else survivors
        return [w.unmask(self.t, survivors)[0] for w in self.workers]


# ----------------------------------------------------------------------------------------------------------
# The client side of step 3


def test_a_client_refuses_to_answer_fewer_than_t_survivors():
    """A server that announces fewer than t survivors is refused by the clients themselves (the server's own
    check is not what protects them), and nothing is answered; t survivors are answered."""
    spec = secagg_spec(10)
    rnd = Round(spec, 0, list(range(10)))
    t = rnd.public.params.t
    assert t == 7
    few = frozenset(range(t - 1))
    for worker in rnd.workers:
        with pytest.raises(SecAggError, match="fewer than t"):
            worker.unmask(0, few)
    enough = Round(spec, 1, list(range(10)))
    answers = enough.unmask(frozenset(range(t)))
    assert set().union(*answers) == set(range(t))


def test_each_client_reveals_one_secret_per_neighbour_and_the_sum_is_exact():
    """Two clients shared their keys but never masked (dropped): every answer carries, per owner j, the share
    of b_j if j survived or of s_j if it dropped, never both (both would let the aggregator unmask j's own
    input); with those answers the aggregator gets exactly the survivors' sum."""
    spec = secagg_spec(10)
    roster = list(range(0, 20, 2))  # platform ids 0, 2, .., 18: protocol ids are positions
    masking = [c for c in roster if c not in (4, 14)]
    rnd = Round(spec, 3, roster, masking)
    survivors = rnd.aggregator.announce(3, rnd.masking)
    dropped = frozenset(range(10)) - survivors
    assert len(dropped) == 2
    responses = rnd.unmask(survivors)
    answers = [r for part in responses for r in part.values()]
    assert {r.client_id for r in answers} == set(survivors)
    for r in answers:
        assert set(r.key_shares).isdisjoint(r.self_mask_shares), r.client_id
        assert set(r.key_shares) <= dropped and set(r.self_mask_shares) <= survivors, r.client_id
        assert set(r.key_shares) == dropped and set(r.self_mask_shares) == survivors  # complete graph
    plan = rnd.aggregator.plan(3, responses)
    total = unmask_rows(rnd.partials, plan, offset=0, codec=spec.codec)
    expected = sum(rnd.x.values())
    assert np.max(np.abs(total - expected)) <= spec.sum_bound(len(masking))


def reachable(root: object, kind: type) -> list[object]:
    """Every instance of ``kind`` reachable from ``root`` through containers and object attributes (not
    through classes, modules or functions, which reach everything)."""
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    seen, stack, found = {id(root)}, [root], []
    while stack:
        obj = stack.pop()
        if isinstance(obj, kind):
            found.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, skip):
                seen.add(id(ref))
                stack.append(ref)
    return found


def test_a_worker_forgets_the_rounds_secrets_once_it_has_unmasked():
    """After step 3 the worker holds no client's keys, self-mask seed or shares: it cannot mask again under
    the same masks (two inputs under one mask would reveal their difference) nor answer again."""
    spec = secagg_spec(6)
    rnd = Round(spec, 2, list(range(6)))
    assert all(reachable(w, SecAggClient) for w in rnd.workers)  # the check below can see them
    rnd.unmask()
    for w, hosted in zip(rnd.workers, rnd.hosted, strict=True):
        assert reachable(w, SecAggClient) == []
        with pytest.raises(SecAggError):
            w.mask(2, hosted[0], np.zeros(LEN), rnd.inboxes)


# ----------------------------------------------------------------------------------------------------------
# Fresh per round: the SecAgg+ graph and the clients' keys


def test_every_round_has_its_own_masking_graph_and_keys():
    """SecAgg+ (degree 4 of 20 clients): the graph's shuffle is keyed by the round, so rounds differ even
    with a fixed ``coding.key_seed`` (a sparse graph reused every round lets a coalition plan around it).
    Two shuffles of 20 clients give the same Harary graph with probability at most 40/20! < 1e-16."""
    spec = secagg_spec(20, "secagg.degree=4")
    roster = list(range(20))
    graphs = [AggregatorSecAgg(spec, ARM).open(t, roster).graph for t in range(6)]
    assert all(g.min_degree == 4 and not g.is_complete for g in graphs)
    assert len({g.neighbours for g in graphs}) == len(graphs)
    # reproducible within a round: every party of round t agrees on one graph
    assert AggregatorSecAgg(spec, ARM).open(3, roster).graph == graphs[3]
    keys = [Round(spec, t, roster).keys for t in (0, 1)]
    first = {i: pk for part in keys[0] for i, pk in part.items()}
    second = {i: pk for part in keys[1] for i, pk in part.items()}
    assert all(first[i].mask_key != second[i].mask_key for i in first)


# ----------------------------------------------------------------------------------------------------------
# The default threshold


# closed neighbourhood size k + 1 → t = max(⌊(k+1)/2⌋ + 1, ⌈2(k+1)/3⌉), worked out by hand
THRESHOLDS = {2: 2, 3: 2, 4: 3, 5: 4, 6: 4, 7: 5, 8: 6, 9: 6, 10: 7, 11: 8, 12: 8, 21: 14, 100: 67}


def test_default_threshold_is_two_thirds_of_the_closed_neighbourhood():
    assert {n: default_threshold(n) for n in THRESHOLDS} == THRESHOLDS


@pytest.mark.parametrize(
    ("num_clients", "degree", "sampled", "t"),
    [(10, None, 10, 7), (10, None, 4, 3), (10, None, 3, 2), (20, 4, 20, 4), (20, 5, 20, 4), (20, 6, 20, 5)],
)
def test_the_arms_rounds_use_the_default_threshold(num_clients, degree, sampled, t):
    """Through the arm's spec: a round of ``sampled`` clients on a graph of the configured degree uses the
    default t of its closed neighbourhoods (the round's, not the configuration's population)."""
    extra = [] if degree is None else [f"secagg.degree={degree}"]
    spec = secagg_spec(num_clients, *extra)
    assert spec.params(sampled, 0).t == t


def test_distributed_dp_counts_the_default_threshold_of_noise_shares():
    """``dp_fedavg_secagg`` adds 1/t of the variance per client, t the default threshold of a full round,
    and no round is unmasked with fewer survivors than that."""
    cfg = load_config(["scenario=quickstart", "arms=[dp_fedavg_secagg]", "dp_fedavg.epsilons=[5]"])
    arm = arm_of(cfg, "dp_fedavg_secagg_eps5")
    ctx = ArmContext(cfg=cfg, arm="dp_fedavg_secagg_eps5", n=LEN, local_size=50, total_size=500)
    assert arm.privacy(ctx)["num_noisers"] == 7
    spec = arm.steps(ctx).secagg
    assert spec.min_survivors == 7 and spec.params(10, 0).t == 7
    with pytest.raises(SecAggError, match="fewer than the threshold"):
        spec.params(6, 0)
