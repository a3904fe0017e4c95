"""The clock through the run's own path: a round's simulated duration by hand, a client slower than the
deadline dropping at its protocol step on both backends, distributed DP reporting the ε of the noise that
arrived, the same clock after a resume, and no clock at all unless a profile or a trace asks for one.

Device speeds in these traces are powers of two (FLOP/s, and bit/s that are 8 × a power of two bytes/s),
latencies dyadic fractions: every term of a round's duration is then exact in binary, so a duration
computed by hand equals the clock's bit for bit, whatever the order of the additions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sifl_ray.clock.work import PRG_OPS_PER_ELEMENT
from sifl_ray.config import load_config
from sifl_ray.privacy.dp_fedavg import epsilon_of_rounds
from sifl_ray.runner import Simulation

# A run that names no backend runs on Ray, the default: on the suite's one instance, never on one it would
# start (and stop) for itself when it is the first run of the session on Ray.
pytestmark = pytest.mark.usefixtures("ray_session")

# the server side, exactly 2^30 FLOP/s and 2^30 bytes/s with no latency (GFLOP/s and Gbit/s as written)
EXACT_SERVER = [
    "clock.server.gflops=1.073741824",
    "clock.server.gbps=8.589934592",
    "clock.server.latency_ms=0",
]
BASE = [
    "scenario=quickstart",  # digits, digits_mlp (n = 2410, trained in float64: 8 bytes a parameter)
    "coding.key_seed=1",
    "output.progress=false",
    "output.tensorboard=false",
    "checkpoint.every=0",
    *EXACT_SERVER,
]
N = 2410
FLOPS_PER_SAMPLE = 10112  # digits_mlp's forward and backward pass (test_clock_parts counts it by hand)
FAST = "1073741824,8388608,4194304,0.015625"  # 2^30 FLOP/s, 2^20 bytes/s down, 2^19 up, 2^-6 s


def _trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "devices.csv"
    path.write_text("client,flops,down_bps,up_bps,latency_s,online\n" + "\n".join(rows) + "\n")
    return path


def _run(tmp_path: Path, overrides: list[str], name: str = "run"):
    cfg = load_config([*BASE, *overrides, f"output.dir={tmp_path}"])
    sim = Simulation(cfg, run_dir=tmp_path / name)
    return sim, sim.run(close=True)


def test_a_hand_computed_round_gives_the_simulated_duration_exactly(tmp_path):
    trace = _trace(
        tmp_path,
        [
            f"0,{FAST},",
            "1,268435456,16777216,8388608,0.03125,",  # 2^28 FLOP/s, 2^21 / 2^20 bytes/s, 2^-5 s
            "2,67108864,2097152,1048576,0.0625,",  # 2^26 FLOP/s, 2^18 / 2^17 bytes/s, 2^-4 s: the slowest
        ],
    )
    sim, run = _run(
        tmp_path, ["arms=[fl]", "clients.num_clients=3", "train.rounds=2", f"clock.trace={trace}"]
    )
    assert sim.sizes.tolist() == [449, 449, 449]  # one epoch of 449 samples each
    vector = N * 8  # the broadcast and each upload: n float64 parameters
    train = 449 * FLOPS_PER_SAMPLE

    def client(flops: int, down: int, up: int, latency: float) -> float:
        return 2 * latency + vector / down + train / flops + vector / up

    slowest = max(
        client(2**30, 2**20, 2**19, 2**-6),
        client(2**28, 2**21, 2**20, 2**-5),
        client(2**26, 2**18, 2**17, 2**-4),
    )
    assert slowest == client(2**26, 2**18, 2**17, 2**-4)
    # the server: 3 uploads summed and the update added (one addition per parameter each), the float64
    # aggregate over the aggregator-server link
    server = (3 * N + N) / 2**30 + N * 8 / 2**30
    first, second = run.history["fl"]
    assert first["clock/round_s"] == slowest + server
    assert first["clock/elapsed_s"] == slowest + server
    assert second["clock/elapsed_s"] == 2 * (slowest + server)  # every device as fast in round 1
    assert first["clock/arrived"] == 3 and first["clock/before_upload"] == 0
    assert run.summary["arms"]["fl"]["clock"]["simulated_s"] == 2 * (slowest + server)
    assert (run.run_dir / "accuracy_vs_time.png").stat().st_size > 0


FIVE = [
    f"0,{FAST},",
    # online until 0.4 s: after its masked upload, before it answers the unmasking
    "1,268435456,16777216,8388608,0.03125,0-0.4",
    "2,67108864,2097152,1048576,0.0625,",  # slower than the deadline
    f"3,{FAST},",
    f"4,{FAST},",
]


THREE = [FIVE[0], FIVE[1].removesuffix("0-0.4"), FIVE[2]]  # always online, client 2 too slow


@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_client_slower_than_the_deadline_drops_at_its_protocol_step(tmp_path, backend):
    """Deadline 0.375 s. In the clear, client 2 misses it before its upload: four uploads are averaged.
    Under secure aggregation (t = 3) client 2 shared its keys, then missed the upload: its neighbours' masks
    with it are rebuilt (``recovered``); client 1 uploaded, then went offline at 0.4 s: it answers no
    unmasking request, its self mask is rebuilt from the others' shares, and the server waited the phase's
    timeout for it. The round is unmasked all the same; the clock is the same on both backends."""
    trace = _trace(tmp_path, FIVE)
    overrides = [
        f"backend={backend}",
        "arms=[fl,secagg]",
        "clients.num_clients=5",
        "train.rounds=1",
        "secagg.threshold=3",
        f"clock.trace={trace}",
        "clock.deadline_s=0.375",
        "clock.phase_timeout_s=2",
        "output.plot=false",
    ]
    _, run = _run(tmp_path, overrides, name=backend)
    fl, secagg = run.history["fl"][0], run.history["secagg"][0]
    assert fl["clock/before_upload"] == 1 and fl["clients/accepted"] == 4 and fl["clock/after_masking"] == 0
    assert fl["clock/round_s"] == 0.375 + (4 * N + N + N * 8) / 2**30  # the server waited out the deadline
    assert secagg["clock/before_upload"] == 1 and secagg["secagg/recovered"] == 1
    assert secagg["clock/after_masking"] == 1 and secagg["secagg/unanswered"] == 1
    assert secagg["clients/accepted"] == 4 and secagg["secagg/survivors"] == 4  # client 1's upload is in
    assert secagg["clock/phase_unmask_s"] == 2.0  # the missing answer costs the whole timeout
    # the server rebuilt 4 self masks and client 2's pairwise masks with its 4 neighbours
    assert secagg["secagg/mask_terms"] == 8
    rebuilt = 8 * N * PRG_OPS_PER_ELEMENT / 2**30
    assert secagg["clock/server_s"] == pytest.approx(rebuilt + (4 * N + N) / 2**30 + N * 8 / 2**30, rel=1e-12)


def test_the_clock_is_bit_identical_on_both_backends(tmp_path):
    trace = _trace(tmp_path, FIVE)
    overrides = [
        "arms=[secagg,sifl_m2]",
        "clients.num_clients=5",
        "train.rounds=2",
        "secagg.threshold=3",
        f"clock.trace={trace}",
        "clock.deadline_s=0.375",
        "output.plot=false",
    ]
    _, local = _run(tmp_path, [*overrides, "backend=local"], name="local")
    _, ray = _run(tmp_path, [*overrides, "backend=ray"], name="ray")
    for arm in ("secagg", "sifl_m2"):
        for a, b in zip(local.history[arm], ray.history[arm], strict=True):
            clock_a = {k: v for k, v in a.items() if k.startswith("clock/")}
            assert clock_a == {k: v for k, v in b.items() if k.startswith("clock/")}
            assert a["test_accuracy"] == b["test_accuracy"]


def test_a_distributed_dp_round_missing_a_noise_share_reports_the_weaker_epsilon(tmp_path, capsys):
    """Noise split into 3 shares, 3 clients, client 2 too slow for the deadline: every round's sum carries 2
    shares, the multiplier z·√(2/3). The run reports the ε that noise gives, not the planned one, and says
    so; the plan stays beside it."""
    trace = _trace(tmp_path, THREE)
    overrides = [
        "arms=[dp_fedavg_secagg]",
        "clients.num_clients=3",
        "train.rounds=3",
        "secagg.noise_shares=3",
        f"clock.trace={trace}",
        "clock.deadline_s=0.375",
        "clock.phase_timeout_s=0.25",
        "output.plot=false",
    ]
    _, run = _run(tmp_path, overrides)
    privacy = run.summary["arms"]["dp_fedavg_secagg_eps5"]["privacy"]
    z, delta = privacy["noise_multiplier"], privacy["delta"]
    rows = run.history["dp_fedavg_secagg_eps5"]
    assert [r["clients/accepted"] for r in rows] == [2, 2, 2]
    realised = epsilon_of_rounds(noise_multipliers=[z * math.sqrt(2 / 3)] * 3, delta=delta)
    assert privacy["epsilon_planned"] == pytest.approx(5.0, rel=1e-3)
    assert privacy["epsilon"] == privacy["epsilon_realised"] == realised > privacy["epsilon_planned"]
    assert rows[-1]["privacy/epsilon_cumulative"] == realised  # TensorBoard's ε of the whole model too
    assert f"eps_dp_fedavg_secagg_eps5={realised:.3g}" in run.result_line
    err = capsys.readouterr().err
    assert "round 0 dp_fedavg_secagg_eps5: its sum carried 1 noise share(s) fewer than the 3 planned" in err
    assert "fewer noise shares arrived than planned, so the claim is weaker" in err


def test_with_the_threshold_as_the_split_a_dropout_never_weakens_the_claim(tmp_path):
    """The default split (the threshold t = 2 of 3 clients): a round that is unmasked carries at least t
    shares, so the planned ε holds and nothing is replaced."""
    trace = _trace(tmp_path, THREE)
    overrides = [
        "arms=[dp_fedavg_secagg]",
        "clients.num_clients=3",
        "train.rounds=2",
        f"clock.trace={trace}",
        "clock.deadline_s=0.375",
        "output.plot=false",
    ]
    _, run = _run(tmp_path, overrides)
    privacy = run.summary["arms"]["dp_fedavg_secagg_eps5"]["privacy"]
    assert privacy["num_noisers"] == 2 and "epsilon_realised" not in privacy
    assert [r["clients/accepted"] for r in run.history["dp_fedavg_secagg_eps5"]] == [2, 2]


@pytest.mark.slow  # three rounds, then two again from the checkpoint
def test_a_resumed_run_replays_the_same_clock(tmp_path):
    """Phones that come and go (spells of 20 s online, 10 s offline): a run resumed from its round-0
    checkpoint plays rounds 1 and 2 at the same simulated times, with the same clients present."""
    overrides = [
        "arms=[fl,secagg]",
        "clients.num_clients=8",
        "train.rounds=3",
        "clock.profile=mobile",
        "mobile.online_min=0.33",
        "mobile.offline_min=0.17",
        "checkpoint.every=1",
        "checkpoint.keep=5",
        "output.plot=false",
    ]
    _, first = _run(tmp_path, overrides)
    resumed = Simulation.resume(first.run_dir / "checkpoints" / "round-000000").run(close=True)
    for arm in ("fl", "secagg"):
        for a, b in zip(first.history[arm], resumed.history[arm], strict=True):
            assert {k: v for k, v in a.items() if k.startswith("clock/")} == {
                k: v for k, v in b.items() if k.startswith("clock/")
            }
    left = first.summary["arms"]["fl"]["clock"]["clients_left"]
    assert left["offline"] > 0  # the spells mattered


def test_a_run_without_a_profile_has_no_clock(tmp_path):
    _, run = _run(tmp_path, ["arms=[fl]", "clients.num_clients=3", "train.rounds=1", "output.plot=false"])
    assert "clock" not in run.summary and "clock" not in run.summary["arms"]["fl"]
    assert not any(k.startswith("clock/") for k in run.history["fl"][0])


def test_secure_aggregations_messages_are_the_sizes_the_protocol_counts(tmp_path):
    """With every client in, the sizes the clock charges are what the protocol's parties counted: two public
    keys, a sealed pair of shares per neighbour, the masked vector at 32 bits an element, one share per
    holder (its neighbours and itself)."""
    sim, run = _run(
        tmp_path,
        [
            "arms=[secagg]",
            "clients.num_clients=4",
            "train.rounds=1",
            "clock.profile=equal",
            "output.plot=false",
        ],
    )
    sizes, row = sim.clock.arms["secagg"].work.secure, run.history["secagg"][0]
    d = sizes.neighbours(4)
    assert (d, sizes.masked) == (3, math.ceil(32 * N / 8))
    assert row["secagg/sent_per_client/keys"] == sizes.keys_up == 64
    assert row["secagg/sent_per_client/shares"] == sizes.shares * d
    assert row["secagg/sent_per_client/masked"] == sizes.masked
    assert row["secagg/sent_per_client/unmask"] == sizes.unmask_share * (d + 1)


def test_central_dp_fedavg_keeps_its_denominator_noise_and_claim_when_a_client_drops(tmp_path):
    """Central noise: the mean divides what arrived by the fixed qN = 3 and the aggregator adds all of the
    noise, so a dropped client leaves the ε as planned (nothing realised to report)."""
    trace = _trace(tmp_path, THREE)
    overrides = [
        "arms=[dp_fedavg]",
        "clients.num_clients=3",
        "train.rounds=2",
        f"clock.trace={trace}",
        "clock.deadline_s=0.375",
        "output.plot=false",
    ]
    _, run = _run(tmp_path, overrides)
    arm = run.summary["arms"]["dp_fedavg_eps5"]
    privacy, rows = arm["privacy"], run.history["dp_fedavg_eps5"]
    assert [r["clients/accepted"] for r in rows] == [2, 2] and [r["clock/before_upload"] for r in rows] == [
        1,
        1,
    ]
    clip = 1.0  # dp_fedavg.clip
    assert all(r["aggregator/noise_std"] == privacy["noise_multiplier"] * clip / 3 for r in rows)
    assert "epsilon_realised" not in privacy and privacy["epsilon"] == privacy["epsilon_per_round"][-1]
