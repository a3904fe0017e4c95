"""A session outlives a run: its backend starts once and a run after the first takes the hosts the runs
before it left, started again from its own arguments. A started-again host must give a fresh host's
numbers bit for bit, on every arm and both backends, whatever ran on it before."""

from __future__ import annotations

import contextlib
import threading

import pytest

from sifl_ray import Session, simulate
from sifl_ray.arms import ARMS
from sifl_ray.canvas import RENDERING, Drawing
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


@pytest.mark.slow  # three runs, two on Ray
def test_an_in_process_run_between_two_ray_runs_keeps_the_ray_hosts_warm(ray_session, tmp_path):
    """An in-process host reserves nothing on Ray, so an in-process run stops no idle Ray host for its CPU
    (it did: every Ray ≡ in-process comparison paid for new Ray processes on its next Ray run)."""
    base = {**EVERY_ARM, "arms": ["fl", "sifl_m1"], "train.rounds": 1, "output.dir": str(tmp_path)}
    with Session("ray") as on_ray, Session("local") as here:

        def ray_pids() -> list[int]:
            idle = [h for hs in on_ray.hosts.idle.values() for h in hs]
            return sorted(on_ray.hosts.backend.get_all([h.call(Host.pid) for h in idle]))

        first = on_ray.simulate("quickstart", base)
        before = ray_pids()
        between = here.simulate("quickstart", base)
        again = on_ray.simulate("quickstart", base)
        assert on_ray.hosts.reused == len(before) == 5  # server, aggregator, evaluator, two workers
        assert ray_pids() == before  # the same processes, started again
    assert figures(again) == figures(first) == figures(between)


@pytest.mark.slow  # two runs on Ray
def test_a_run_without_warm_hosts_beside_a_sessions_idle_ones_gets_their_cpus(ray_session, tmp_path):
    """A simulation built on a backend of its own (``Simulation(cfg, backend=...)``, as the benches build
    theirs) spawns new hosts; a session's idle hosts held the two CPUs, and its workers waited for them for
    ever. Its spawns now stop the idle hosts first."""
    from sifl_ray.backends.ray import RayBackend
    from sifl_ray.runner import Simulation

    base = {**EVERY_ARM, "arms": ["fl"], "train.rounds": 1, "output.dir": str(tmp_path)}
    with Session("ray") as session:
        session.simulate("quickstart", base)
        assert any(session.hosts.idle.values())  # kept warm, holding their CPUs
        cfg = load_config(["scenario=quickstart"], settings=base)
        done: list[float] = []

        def run() -> None:
            sim = Simulation(cfg, backend=RayBackend(), run_dir=tmp_path / "own")
            try:
                sim.run()
                done.append(float(sim.global_model("fl").abs().sum()))
            finally:
                sim.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(180)  # it took seconds; before, it never ended
        assert done, "the run on a backend of its own is still waiting for a CPU"
        assert not any(session.hosts.idle.values())  # the idle hosts made room


#: A session's run that draws its figures (the quickstart's two: accuracy, and accuracy against ε).
DRAWN = {**EVERY_ARM, "arms": ["fl", "sifl_m1", "nbafl"], "output.plot": True, "backend": "local"}


@contextlib.contextmanager
def drawing_held(seconds: float = 60.0):
    """No figure is drawn until the block ends: another thread holds the drawing lock. A figure drawn in
    the caller's thread (not in the background) waits for it at most ``seconds``, then is drawn."""
    # An earlier run's figures still to be drawn (simulate()'s runs are drawn behind them) would wait for
    # the lock held here, and the next run's start waits for them: drawn first.
    Drawing.settle()
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with RENDERING:
            taken.set()
            release.wait(seconds)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait()
    try:
        yield
    finally:
        release.set()
        holder.join()


def test_a_sessions_run_draws_its_figures_behind_it_and_plots_waits_for_them(tmp_path):
    """The figures of a session's run are drawn in a thread once it returns (the next run plays
    meanwhile); ``result.plots`` waits for them. Held back here (the drawing lock taken), the run returns
    without them, and they are the synchronous run's, byte for byte, once drawn."""
    from sifl_ray.runner import run_scenario

    with Session("local") as session, drawing_held():
        result = session.simulate("dp_compare_small", {**DRAWN, "output.dir": str(tmp_path / "a")})
        assert not result.drawing.done
        assert not (result.run_dir / "accuracy.png").exists()
    assert result.drawing.done  # the session's close waited for them
    paths = result.plots
    assert sorted(p.name for p in paths) == ["accuracy.png", "accuracy_vs_epsilon.png"]
    cfg = load_config([], scenario="dp_compare_small", settings={**DRAWN, "output.dir": str(tmp_path / "b")})
    now = run_scenario(cfg)
    assert now.drawing.done
    for path in paths:
        assert path.read_bytes() == (now.run_dir / path.name).read_bytes()


def test_figures_of_a_removed_run_folder_are_dropped_and_a_failure_is_said_and_raised(tmp_path, capfd):
    """A run folder removed before its figures are drawn (a caller's temporary folder) leaves nothing to
    draw into: no figure, no error. A drawing that fails says so on stderr at once and raises on wait."""
    import shutil

    with Session("local") as session:
        with drawing_held():
            result = session.simulate("dp_compare_small", {**DRAWN, "output.dir": str(tmp_path)})
            shutil.rmtree(result.run_dir)
        assert result.plots == []
    assert "were not drawn" not in capfd.readouterr().err

    def broken() -> list:
        raise ValueError("no axes")

    drawing = Drawing(broken, background=True, label="run X")
    with pytest.raises(ValueError, match="no axes"):
        drawing.wait()
    assert "[sifl] the figures of run X were not drawn: ValueError: no axes" in capfd.readouterr().err
