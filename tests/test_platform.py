"""The platform end to end on real Ray: Ray ≡ in-process, SIFL ≡ FedAvg within the bound, TensorBoard tags,
key custody (no actor holds another party's key), no key material in the outputs, GPU placement."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import torch

from sifl_ray.config import load_config
from sifl_ray.logging import tensorboard_tag
from sifl_ray.parties.key_holdings import key_inventory
from sifl_ray.parties.process import Host
from sifl_ray.party_seeds import party_seed
from sifl_ray.runner import Simulation

TINY = [
    "scenario=quickstart",
    "train.rounds=3",
    "clients.num_clients=6",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "output.progress=false",
    "arms=[fl,sifl_m1,sifl_m2,nbafl]",
]
EXPECTED_METRICS = {
    "test_accuracy",
    "test_loss",
    "train_loss",
    "time/round",
    "time/train",
    "time/encode",
    "time/aggregate",
    "time/decode",
    "time/transfer",
    "bytes/object_store",
}
EXPECTED_TAGS = {tensorboard_tag(m) for m in EXPECTED_METRICS}  # eval/test_accuracy, system/time/round, ...


@pytest.fixture(scope="module")
def ray_run(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray_run")
    cfg = load_config([*TINY, f"output.dir={out}"])
    sim = Simulation(cfg, run_dir=out / "run")
    result = sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    inventory = {name: sim.backend.get(h.call(Host.key_inventory)) for name, h in sim.actors().items()}
    pids = {name: sim.backend.get(h.call(Host.pid)) for name, h in sim.actors().items()}
    sim.close()
    return cfg, result, models, inventory, pids


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("seq_run")
    cfg = load_config([*TINY, f"output.dir={out}", "backend=local"])
    sim = Simulation(cfg, run_dir=out / "run")
    result = sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    sim.close()
    return cfg, result, models


def test_ray_and_in_process_runs_agree(ray_run, local_run):
    _, ray_result, ray_models, _, _ = ray_run
    _, seq_result, seq_models = local_run
    for arm, rows in ray_result.history.items():
        assert [r["test_accuracy"] for r in rows] == [r["test_accuracy"] for r in seq_result.history[arm]], (
            arm
        )
    # the same roles, the same keys, the same noise and minibatches: the same numbers
    for arm in ray_models:
        assert torch.equal(ray_models[arm], seq_models[arm]), arm


def test_compact_placement_shares_one_process_among_the_light_parties_and_changes_no_number(
    ray_run, tmp_path
):
    """The default (ray.placement=compact): the server, the aggregator host, the evaluator and client worker
    0 answer from one process, worker 1 from its own; ray.placement=separate gives each party its own
    process and the same models to the last bit (each party is its own object either way)."""
    cfg, _, models, _, pids = ray_run
    assert cfg.ray.placement == "compact"
    assert pids["server"] == pids["aggregator0"] == pids["evaluator"] == pids["worker0"]
    assert pids["worker1"] != pids["server"] and len(pids) == 5
    apart = load_config([*TINY, f"output.dir={tmp_path}", "ray.placement=separate"])
    sim = Simulation(apart, run_dir=tmp_path / "separate")
    try:
        sim.run()
        separate = {name: sim.backend.get(h.call(Host.pid)) for name, h in sim.actors().items()}
        assert len(set(separate.values())) == len(separate) == 5  # a process per party
        for arm in models:
            assert torch.equal(sim.global_model(arm), models[arm]), arm
    finally:
        sim.close()


@pytest.mark.parametrize(
    ("overrides", "shares"),
    [
        ([], True),
        (["ray.placement=separate"], False),
        (["faults.deadline_s=30"], False),  # a late worker is replaced: its process killed
        (["faults.deadline_s=30", "faults.inject=[{kind: straggle, arm: fl, round: 1, worker: 1}]"], False),
        (["faults.inject=[{kind: worker_kill, arm: fl, round: 1, worker: 1}]"], False),
        (["faults.inject=[{kind: corrupt_upload, arm: fl, round: 1, client: 0}]"], True),  # nobody dies
        (["ray.spread_workers=true"], False),
        (["ray.gpus_per_worker=0.5"], False),
    ],
)
def test_client_worker_0_joins_the_light_process_only_where_nothing_kills_or_stalls_it(overrides, shares):
    """Under compact placement worker 0 shares the light parties' process unless its process may be killed
    or stalled (the light parties would go with it), it has a GPU, or the workers spread over nodes; the
    in-process backend has no processes to share."""
    from sifl_ray.backends.local import LocalBackend
    from sifl_ray.backends.ray import RayBackend
    from sifl_ray.config.components import arm_names
    from sifl_ray.faults import FaultPlan
    from sifl_ray.runner.parties import worker_shares

    cfg = load_config([*TINY, *overrides])
    plan = FaultPlan.from_config(cfg, arm_names(cfg))
    # worker_shares reads the backend's capabilities only: the classes say them
    assert worker_shares(cfg, RayBackend, plan) is shares  # type: ignore[arg-type]
    assert worker_shares(cfg, LocalBackend, plan) is False  # type: ignore[arg-type]


def test_sifl_arms_equal_fedavg_in_accuracy_with_the_figures_named_for_what_they_are(ray_run):
    _, result, models, _, _ = ray_run
    summary = result.summary
    fl_acc = summary["arms"]["fl"]["final_accuracy"]
    for arm in ("sifl_m1", "sifl_m2"):
        a = summary["arms"][arm]
        assert abs(a["final_accuracy"] - fl_acc) <= 0.005
        # measured, beside an estimate (trajectories can amplify) and the rigorous per-round bound
        assert a["max_deviation"] is not None and a["max_deviation"] > 0
        assert a["deviation_estimate"] > 0 and isinstance(a["within_estimate"], bool)
        assert a["round_bound"] > 0 and 0 < a["round_bound_confidence"] < 1e-6
        assert sum(a["round_bound_terms"].values()) == pytest.approx(a["round_bound"], rel=1e-12)
        assert "server decode" in a["round_bound_terms"] or "server re-encode" in a["round_bound_terms"]
        assert "within_bound" not in a and "predicted_bound" not in summary
    assert summary["round_bound"] == max(summary["arms"][a]["round_bound"] for a in ("sifl_m1", "sifl_m2"))
    # the DP baseline really perturbs: its model is far from FedAvg's
    assert float((models["nbafl_eps1"] - models["fl"]).abs().max()) > 1e-3
    assert result.result_line.startswith("RESULT quickstart fl=")
    assert f"dev_estimate={summary['deviation_estimate']:.3e} " in result.result_line
    assert f"round_bound={summary['round_bound']:.3e} " in result.result_line
    assert f"run_dir={result.run_dir}" in result.result_line


def test_a_deviation_beyond_the_additive_estimate_is_flagged(tmp_path, capsys):
    """A model whose training amplifies the coding error (the paper's CNNs do; far too slow for a test)
    is stood in for by an estimate below the measured deviation: the run says so and marks it."""
    cfg = load_config(
        [*TINY, "train.rounds=2", "arms=[fl,sifl_m1]", "backend=local", f"output.dir={tmp_path}"]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    sim.precision["sifl_m1"]["deviation_estimate"] = 1e-30
    summary = sim.run().summary
    sim.close()
    arm = summary["arms"]["sifl_m1"]
    assert arm["max_deviation"] > 1e-30 and arm["within_estimate"] is False
    assert summary["arms"]["fl"]["within_estimate"] is None  # no paired deviation for the reference itself
    err = capsys.readouterr().err
    assert "sifl_m1: the deviation from fl" in err and "exceeds the additive estimate" in err
    assert (
        json.loads((tmp_path / "run" / "summary.json").read_text())["arms"]["sifl_m1"]["within_estimate"]
        is False
    )


def test_tensorboard_files_carry_every_tag_for_every_arm(ray_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg, result, *_ = ray_run
    for arm in result.history:
        acc = EventAccumulator(str(Path(result.run_dir) / "tb" / arm))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert tags >= EXPECTED_TAGS, (arm, EXPECTED_TAGS - tags)
        steps = [e.step for e in acc.Scalars("eval/test_accuracy")]
        assert steps == list(range(cfg.train.rounds))
        if arm.startswith("sifl"):
            assert "precision/max_deviation_from_fl" in tags and "privacy/epsilon_per_element_local" in tags
    summary = json.loads((Path(result.run_dir) / "summary.json").read_text())
    assert set(summary["arms"]) == set(result.history)
    assert (Path(result.run_dir) / "accuracy.png").stat().st_size > 1000


def test_summary_rounds_carry_the_tensorboard_epsilons(local_run):
    """Every per-round row of summary.json carries the privacy/epsilon_* figures TensorBoard shows, with the
    same values, under tags that say their scope: SIFL's per element (one tag per release), NbAFL's for the
    whole model (one tag), never one tag for both; M2's round 0 is an M1 round: M1's broadcast, and a local
    ε ‖P2R‖ = 1/γ times round 1's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg, result, _ = local_run
    summary = json.loads((Path(result.run_dir) / "summary.json").read_text())
    for arm, a in summary["arms"].items():
        acc = EventAccumulator(str(Path(result.run_dir) / "tb" / arm))
        acc.Reload()
        tb = {
            tag: {e.step: e.value for e in acc.Scalars(tag)}
            for tag in acc.Tags()["scalars"]
            if tag.startswith("privacy/")
        }
        rows = a["rounds"]
        per_element = arm.startswith("sifl")
        named = {
            tensorboard_tag(k, per_element=per_element) for r in rows for k in r if k.startswith("privacy/")
        }
        assert set(tb) == named, arm
        if per_element:
            assert all(t.startswith("privacy/epsilon_per_element_") for t in tb), arm
            for tag, by_step in tb.items():  # TensorBoard keeps float32
                metric = "privacy/epsilon_" + tag.removeprefix("privacy/epsilon_per_element_")
                expected = {r["round"]: r[metric] for r in rows if metric in r}
                assert by_step == pytest.approx(expected, rel=1e-6, abs=0), (arm, tag)
        elif arm != "fl":  # NbAFL: its stated ε of the whole model, every round
            assert set(tb) == {"privacy/epsilon_whole_vector"}, arm
            expected = {r["round"]: a["privacy"]["epsilon"] for r in rows}
            assert tb["privacy/epsilon_whole_vector"] == pytest.approx(expected, rel=1e-6), arm
        if arm != "fl":
            assert all("privacy/epsilon_local" in r for r in rows), arm
    m2 = summary["arms"]["sifl_m2"]
    rows = m2["rounds"]
    assert {k for k in rows[0] if k.startswith("privacy/")} == {
        "privacy/epsilon_local",
        "privacy/epsilon_broadcast",
    }
    for r in rows[1:]:
        assert {k for k in r if k.startswith("privacy/")} == {
            "privacy/epsilon_local",
            "privacy/epsilon_global",
        }
    ratio = rows[0]["privacy/epsilon_local"] / rows[1]["privacy/epsilon_local"]
    assert ratio == pytest.approx(1 / cfg.coding.gamma, rel=1e-3)
    priv = m2["privacy"]
    assert rows[0]["privacy/epsilon_local"] == priv["epsilon_local_round0"]
    assert rows[0]["privacy/epsilon_broadcast"] == priv["epsilon_broadcast_round0"]
    assert rows[1]["privacy/epsilon_local"] == priv["epsilon_local"]
    assert rows[1]["privacy/epsilon_global"] == priv["epsilon_global"]
    largest = summary["accountant"]["arms"]["sifl_m2"]["local"]["largest_per_round_epsilon"]
    assert largest == rows[0]["privacy/epsilon_local"]


@pytest.mark.parametrize("exposures, uploads", [("multi_round", 3), ("per_round", 1)])
def test_nbafl_arm_sigma_covers_the_uploads_it_claims(tmp_path, exposures, uploads):
    """multi_round calibrates the σ the clients receive for all T = 3 uploads (NbAFL Theorem 1, L = T);
    per_round for one; the privacy info says which."""
    from sifl_ray.arms.steps import Gaussian
    from sifl_ray.privacy.nbafl import GUARANTEES, nbafl_sigma

    overrides = ["arms=[fl,nbafl]", "backend=local", f"nbafl.exposures={exposures}"]
    cfg = load_config([*TINY, *overrides, f"output.dir={tmp_path}"])
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        setup, priv, smallest = sim.setups["nbafl_eps1"], sim.privacy["nbafl_eps1"], int(sim.sizes.min())
    finally:
        sim.close()
    one = nbafl_sigma(epsilon=1.0, delta=cfg.nbafl.delta, clip=cfg.nbafl.clip, local_size=smallest)
    (noise,) = [s for s in setup.step.steps if isinstance(s, Gaussian)]  # the chain clip, then noise
    assert noise.sigma == pytest.approx(uploads * one, rel=1e-12)  # what the clients receive
    assert priv["sigma"] == noise.sigma and priv["uploads_covered"] == uploads
    assert priv["guarantee"].startswith(GUARANTEES[exposures]) and priv["exposures"] == exposures


def test_no_actor_holds_another_partys_key(ray_run):
    *_, inventory, _ = ray_run
    assert inventory["server"] == ["secret-seed", "server-key"]
    assert inventory["evaluator"] == ["aggregator-client-view", "server-client-view"]
    for name, kinds in inventory.items():
        if name.startswith("aggregator"):
            assert kinds == ["aggregator-key", "secret-seed"], (name, kinds)
        if name.startswith("worker"):  # and the NbAFL noise seeds of the clients it hosts, its own
            views = ["aggregator-client-view", "server-client-view"]
            assert kinds == sorted([*views, "client-noise-seed"]), (name, kinds)


def test_key_inventory_sees_seeds_raw_cores_and_keys():
    """The custody check itself must be able to fail: seeds, key internals and keys are all seen."""
    from sifl_ray.coding import make_aggregator_key, make_server_key

    key = make_server_key(
        n=20, n_tilde=24, backend="dense", left_inverse="oblique", alpha=1e-3, beta=1.0, seed=b"k" * 32
    )
    agg = make_aggregator_key(p=2, gamma=1e-2, eta=1.0, seed=b"a" * 32)

    class Holder:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    assert key_inventory(Holder(state={"seed": b"s" * 32})) == {"secret-seed"}
    assert key_inventory(Holder(parts=[key.client_view().core])) == {"key-internals"}
    assert key_inventory(Holder(k=key, v=agg.client_view())) == {"server-key", "aggregator-client-view"}
    assert key_inventory(Holder(nested={"x": [Holder(a=agg)]})) == {"aggregator-key"}
    assert key_inventory(Holder(w=torch.zeros(3), name="seedless", n=5)) == set()


def test_no_key_material_in_event_files_or_summary(ray_run):
    cfg, result, *_ = ray_run
    secrets_ = []
    for arm in ("sifl_m1", "sifl_m2"):
        for party in ("server", "aggregator"):
            seed = party_seed(cfg.coding.key_seed, arm, party)
            secrets_ += [seed, seed.hex().encode(), base64.b64encode(seed)]
    for arm in (a for a in result.history if a.startswith("nbafl")):
        for client in range(cfg.clients.num_clients):  # each client's NbAFL noise seed
            seed = party_seed(cfg.coding.key_seed, arm, f"client-{client}")
            secrets_ += [seed, seed.hex().encode(), base64.b64encode(seed)]
    assert len(secrets_) == 3 * (4 + cfg.clients.num_clients)
    files = [p for p in Path(result.run_dir).rglob("*") if p.is_file()]
    assert any(p.name == "summary.json" for p in files)
    for path in files:
        blob = path.read_bytes()
        for secret in secrets_:
            assert secret not in blob, path
    summary = json.loads((Path(result.run_dir) / "summary.json").read_text())

    def fields(node):  # every key of a JSON tree (a run with a key seed says so in words, never its value)
        if isinstance(node, dict):
            return {k for key, value in node.items() for k in (key, *fields(value))}
        return {k for item in node for k in fields(item)} if isinstance(node, list) else set()

    assert not any("key_seed" in name for name in fields(summary["arms"]))


def test_workers_are_pinned_to_declared_gpus(ray_session):
    """Ray accepts declared GPUs on a CPU machine: each worker sees its own GPU ids, fractions share one
    (four quarters on one GPU: ``ray.gpus_per_worker=0.25``), and a worker without CUDA says it computes
    on the CPU, and does, with everything it holds."""
    from sifl_ray.backends import Placement
    from sifl_ray.backends.ray import RayBackend
    from sifl_ray.parties.workers import WorkerHost
    from sifl_ray.specs import ModelSpec, TrainSpec

    data = {"x_train": torch.zeros(4, 1, 8, 8).numpy(), "y_train": torch.zeros(4, dtype=torch.long).numpy()}
    model = ModelSpec(name="digits_mlp", input_shape=(1, 8, 8), num_classes=10)
    train = TrainSpec(optimizer="sgd", lr=0.1, batch_size=2)
    backend = RayBackend()  # the session's Ray, as a run's backend spawns into it

    def spawn(k: int, gpus: float):
        return backend.spawn(Placement(gpus=gpus), WorkerHost, k, data, {k: [k]}, model, train, 0)

    quarters = [spawn(k, 0.25) for k in range(4)]  # first, while every declared GPU is free
    placed_quarters = backend.get_all([w.call(WorkerHost.placement) for w in quarters])
    assert len({tuple(p["gpu_ids"]) for p in placed_quarters}) == 1  # best fit: one GPU, four workers
    assert len({p["pid"] for p in placed_quarters}) == 4
    whole = [spawn(k, 1) for k in range(2)]
    half = [spawn(k, 0.5) for k in range(2)]
    placed = backend.get_all([w.call(WorkerHost.placement) for w in whole + half])
    cuda = torch.cuda.is_available()
    for p in placed + placed_quarters:
        assert len(p["gpu_ids"]) == 1
        assert p["cuda_visible_devices"] == p["gpu_ids"][0]
        assert p["device"] == ("cuda:0" if cuda else "cpu")
        assert p["tensor_devices"] == [p["device"]]  # the model (and, staged, the samples) live there
        assert p["current_device"] == (0 if cuda else None)
        assert (p["fallback"] is None) == cuda
        assert cuda or "CUDA is not usable here" in p["fallback"]
    assert placed[0]["gpu_ids"] != placed[1]["gpu_ids"]
    assert placed_quarters[0]["gpu_ids"] not in (placed[0]["gpu_ids"], placed[1]["gpu_ids"])
    memory = backend.get(quarters[0].call(WorkerHost.memory))
    assert memory["max_rss_bytes"] > 0 and ("peak_allocated_bytes" in memory) == cuda
    for w in quarters + whole + half:
        backend.kill(w)


def test_gpus_beyond_the_cluster_are_refused_before_any_worker_waits():
    from sifl_ray.backends import Capabilities
    from sifl_ray.config import ConfigError
    from sifl_ray.runner.parties import check_gpus, worker_count

    class Cluster:  # what worker_count asks of a backend: what it can do and the cluster's resources
        capabilities = Capabilities(kill=True, own_processes=True, placement=True)

        def __init__(self, cpus: float, gpus: float):
            self.resources = {"CPU": cpus, "GPU": gpus}

        def cluster(self) -> dict[str, float]:
            return self.resources

    def cfg(*extra: str):
        return load_config(["scenario=quickstart", "clients.num_clients=10", *extra])

    quarter = "ray.gpus_per_worker=0.25"
    assert worker_count(cfg(quarter), Cluster(16, 1)) == 4  # as many as the GPU holds, not 16
    assert worker_count(cfg(quarter, "ray.evaluator_gpus=0.5"), Cluster(16, 1)) == 2
    assert worker_count(cfg("ray.gpus_per_worker=0.2", "ray.evaluator_gpus=0.2"), Cluster(16, 1)) == 4
    assert worker_count(cfg(), Cluster(16, 0)) == 10
    assert worker_count(cfg(quarter, "ray.num_workers=4"), Cluster(16, 1)) == 4
    with pytest.raises(ConfigError, match=r"5 workers × 0.25 GPU \+ ray.evaluator_gpus 0 = 1.25 GPUs"):
        worker_count(cfg(quarter, "ray.num_workers=5"), Cluster(16, 1))
    with pytest.raises(ConfigError, match="the Ray cluster has 0"):
        worker_count(cfg(quarter), Cluster(16, 0))
    with pytest.raises(ConfigError, match=r"ray\.evaluator_gpus 1 = 1 GPUs, but the Ray cluster has 0"):
        check_gpus(cfg("ray.evaluator_gpus=1"), 4, 0.0)
    check_gpus(cfg(quarter), 4, 1.0)  # exactly full is fine


def test_a_private_instance_retries_its_sockets_quickly_and_stops_its_monitor_at_once():
    """A private instance starts with its raylet's quick socket retries (PRIVATE_SYSTEM_CONFIG: Ray's
    default waits a whole second after one failed connect to the object store), read back from the running
    instance; and a run's end does not give Ray's autoscaler monitor the second of grace it always takes:
    the backend that started the instance kills it (SIGKILL), then Ray shuts down as usual, leaving nothing
    running. In a fresh interpreter: the test suite's shared Ray is joined, not owned, and never touched."""
    import os
    import subprocess
    import sys

    code = (
        "import ray\n"
        "from sifl_ray.backends.ray import RayBackend, stop_autoscaler_monitor\n"
        "backend = RayBackend(num_cpus=1)\n"
        "from ray._private.state import state\n"
        "system = state.get_system_config()\n"
        "print(system['raylet_client_connect_timeout_milliseconds'])\n"
        "print(system['raylet_client_num_connect_attempts'])\n"
        "processes = ray._private.worker._global_node.all_processes\n"
        "monitor = processes['monitor'][0].process\n"
        "others = [i.process for k, v in processes.items() if k != 'monitor' for i in v]\n"
        "real, seen = ray.shutdown, []\n"
        "def watched():\n"  # what was still running when Ray's own shutdown began
        "    seen.append((monitor.poll(), [p.poll() is None for p in others].count(False)))\n"
        "    real()\n"
        "ray.shutdown = watched\n"
        "backend.shutdown()\n"
        "print(*seen[0], ray.is_initialized(), [p.poll() is None for p in others].count(True))\n"
        "print(stop_autoscaler_monitor())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    # the monitor killed, every other process still up, when Ray's shutdown began; nothing running after
    assert done.stdout.split() == ["50", "200", "-9", "0", "False", "0", "None"], done.stderr[-2000:]
