"""A session outlives a run: its backend starts once and a run after the first takes the hosts the runs
before it left, started again from its own arguments. A started-again host must give a fresh host's
numbers bit for bit, on every arm and both backends, whatever ran on it before."""

from __future__ import annotations

import pytest

from sifl_ray import Session, simulate
from sifl_ray.arms import ARMS
from sifl_ray.config import load_config
from sifl_ray.config.components import arm_instances
from sifl_ray.parties.process import Host

#: Every registered arm, each at one ε, on a few clients and rounds: what a round of each one does
#: (keys, noise streams, masks, steps) must all be started again.
EVERY_ARM = {
    "arms": list(ARMS),
    "clients.num_clients": 4,
    "train.rounds": 2,
    "nbafl.epsilons": [5.0],
    "dp_fedavg.epsilons": [5.0],
    "coding.key_seed": 1,
    "output.progress": False,
    "output.plot": False,
}
OTHER = {**EVERY_ARM, "seed": 7, "coding.key_seed": 2, "train.lr": 0.05, "clients.num_clients": 6}


def figures(result) -> list[dict]:
    """Every arm's every round, timings aside (they are the wall clock's: ``time/*``, ``*_s``)."""
    return [
        {k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith("_s"))}
        for row in result.rows()
    ]


@pytest.mark.parametrize(
    "kind", ["local", pytest.param("ray", marks=pytest.mark.slow)]
)  # ray: 3 runs, 15 arms
def test_a_started_again_host_gives_a_fresh_hosts_numbers_on_every_arm(kind, request, tmp_path):
    if kind == "ray":
        request.getfixturevalue("ray_session")  # the suite's one Ray instance
    settings = {**EVERY_ARM, "output.dir": str(tmp_path)}
    other = {**OTHER, "output.dir": str(tmp_path)}
    assert len(arm_instances(load_config([], settings=settings))) == len(ARMS)
    with Session(kind) as session:
        fresh = session.simulate("dp_compare_small", settings)
        assert session.hosts.reused == 0  # the first run's hosts are all new
        between = session.simulate("dp_compare_small", other)
        again = session.simulate("dp_compare_small", settings)
        assert session.hosts.reused >= 2 * 5  # server, aggregator, two workers, evaluator: twice
    assert figures(again) == figures(fresh)
    assert figures(between) != figures(fresh)  # the run between was another run (the check can fail)
    assert [r["arm"] for r in fresh.rows()] == [r["arm"] for r in again.rows()]


def test_reset_drops_everything_the_run_before_left():
    class Party(Host):
        def __init__(self, seed: int) -> None:
            self.seed = seed

        def learn(self, secret: bytes) -> None:
            self.secret = secret

    party = Party(1)
    party.learn(b"k" * 32)
    party.reset(2)
    assert vars(party) == {"seed": 2}


def test_simulate_reuses_its_session_call_after_call(tmp_path):
    settings = {
        "train.rounds": 1,
        "clients.num_clients": 3,
        "output.dir": str(tmp_path),
        "coding.key_seed": 1,
    }
    first = simulate("quickstart", settings, arms=["fl"], backend="local")
    second = simulate("quickstart", settings, arms=["fl"], backend="local")
    assert figures(first) == figures(second)
    from sifl_ray.api import shared

    assert shared("local").hosts.reused >= 4  # the second call took the first's hosts


def test_a_session_refuses_what_it_does_not_host():
    with pytest.raises(KeyError, match="unknown backend 'threads'"):
        Session("threads")


@pytest.mark.slow  # four runs on Ray
def test_a_ray_session_changes_shape_between_runs_without_losing_a_party(ray_session, tmp_path):
    """Worker 0 shares the light parties' process unless the run may kill or stall it (here: a deadline).
    A session whose runs alternate the two shapes frees the other shape's CPUs when it needs them, never a
    process a run still uses (a third worker's CPU is taken from idle hosts only), and gives the same
    numbers for the same settings whichever hosts ran before."""
    base = {
        "train.rounds": 2,
        "clients.num_clients": 4,
        "coding.key_seed": 1,
        "output.dir": str(tmp_path),
        "output.progress": False,
        "output.plot": False,
    }
    late = {**base, "faults.deadline_s": 60}  # worker 0 in a process of its own
    with Session("ray") as session:

        def idle() -> set[tuple[str, str | None]]:
            """The idle hosts' shapes: host class and shared process (None: a process of its own)."""
            return {(host.__name__, where.share) for (host, where), hs in session.hosts.idle.items() if hs}

        first = session.simulate("quickstart", base, arms=["fl", "sifl_m1"])
        assert ("WorkerHost", "light+worker0") in idle() and ("WorkerHost", None) in idle()
        apart = session.simulate("quickstart", late, arms=["fl", "sifl_m1"])
        # the other shape's shared process was stopped for worker 1's CPU; the light one reserves none
        assert ("WorkerHost", "light+worker0") not in idle() and ("ServerHost", "light") in idle()
        one = session.simulate("quickstart", {**base, "ray.num_workers": 1}, arms=["fl", "sifl_m1"])
        again = session.simulate("quickstart", base, arms=["fl", "sifl_m1"])
        assert session.hosts.reused >= 4
    assert figures(again) == figures(first) == figures(apart)  # the deadline is never reached
    assert one.summary["num_workers"] == 1
