"""The clock's parts on their own: the devices a profile or a trace gives, their availability, one phase of
a round, and what a round of an arm moves and computes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sifl_ray.clock.availability import Availability
from sifl_ray.clock.profiles import client_devices, devices, read_trace
from sifl_ray.clock.timeline import Phase, run_phase
from sifl_ray.clock.work import model_flops, samples_per_round, transform_flops
from sifl_ray.config import ConfigError, load_config
from sifl_ray.specs import ModelSpec


def _cfg(*overrides: str):
    return load_config(["clients.num_clients=5", *overrides])


# ------------------------------------------------------------------------------------------------ profiles
def test_the_mobile_mix_is_drawn_from_the_run_seed_around_its_medians():
    cfg = _cfg("clock.profile=mobile", "mobile.down_mbps=20", "mobile.latency_sigma=0")
    one, again = client_devices(cfg, 20_000), client_devices(cfg, 20_000)
    assert np.array_equal(one.flops, again.flops) and np.array_equal(one.up, again.up)
    other = client_devices(_cfg("clock.profile=mobile", "seed=1"), 20_000)
    assert not np.array_equal(one.flops, other.flops)
    # a log-normal's median is its scale: 20 Mbit/s is 2.5e6 bytes/s
    assert np.median(one.down) == pytest.approx(20e6 / 8, rel=0.03)
    assert np.median(one.flops) == pytest.approx(10e9, rel=0.03)
    assert np.all(one.latency == 0.014)  # σ = 0: every device at the median (one way of 28 ms)
    assert np.isinf(one.online_s).all()  # no availability spells unless mobile.online_min is set


def test_equal_devices_are_the_settings_every_one():
    d = client_devices(_cfg("clock.profile=equal", "equal.up_mbps=8", "equal.latency_ms=0"), 7)
    assert np.all(d.up == 1e6) and np.all(d.latency == 0) and np.all(d.flops == 10e9)


def test_a_csv_trace_pins_its_rows_and_deals_the_others_from_the_seed(tmp_path):
    path = tmp_path / "devices.csv"
    path.write_text(
        "client,flops,down_bps,up_bps,latency_s,online\n"
        "3,1e9,8e6,4e6,0.5,0-10 20-30\n"
        ",2e9,16e6,8e6,,\n"
        ",3e9,24e6,12e6,,\n"
    )
    trace = read_trace(path)
    assert trace.pinned == [3, None, None]
    assert trace.devices.windows[0] == ((0.0, 10.0), (20.0, 30.0)) and trace.devices.windows[1] is None
    cfg = _cfg(f"clock.trace={path}")
    d = client_devices(cfg, 5)
    assert d.flops[3] == 1e9 and d.down[3] == 1e6 and d.latency[3] == 0.5  # bit/s → bytes/s, exactly
    assert np.array_equal(d.flops, client_devices(cfg, 5).flops)  # dealt from the seed: the same each time
    assert set(d.flops[[0, 1, 2, 4]]) <= {2e9, 3e9}  # two free rows for four clients: drawn with replacement


def test_a_json_trace_reads_like_its_csv(tmp_path):
    rows = [{"flops": 1e9, "down_bps": 8e6, "up_bps": 4e6, "online": [[0, 5]]}]
    (tmp_path / "d.json").write_text(json.dumps({"devices": rows}))
    trace = read_trace(tmp_path / "d.json")
    assert trace.devices.up[0] == 5e5 and trace.devices.windows[0] == ((0.0, 5.0),)


def test_a_bad_trace_names_the_key_the_row_and_the_fix(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("flops,down_bps,up_bps,speed\n0,8e6,,1\n1e9,8e6,4e6,\n")
    with pytest.raises(ConfigError) as err:
        read_trace(path)
    text = str(err.value)
    assert "clock.trace" in text and "row 1: unknown column(s) speed" in text
    assert "row 1: flops must be a number > 0, got '0'" in text and "row 1: up_bps is missing" in text
    path.write_text("flops,down_bps,up_bps,online\n1e9,8e6,4e6,5-1\n")
    with pytest.raises(ConfigError, match="row 1: online must be windows"):
        read_trace(path)
    with pytest.raises(ConfigError, match=r"clock\.trace: no file"):
        load_config([f"clock.trace={tmp_path / 'missing.csv'}"])


def test_the_clocks_keys_are_refused_without_devices_and_over_selection_under_add_remove():
    with pytest.raises(ConfigError, match=r"clock\.deadline_s: the simulated clock is off"):
        load_config(["clock.deadline_s=10"])
    with pytest.raises(ConfigError, match=r"clock\.keep: over-selection lets one client's upload push"):
        load_config(["clock.profile=equal", "clock.keep=3", "arms=[fl,dp_fedavg]"])
    load_config(["clock.profile=equal", "clock.keep=3", "arms=[fl,dp_fedavg_secagg]"])  # zero-out: no push


# -------------------------------------------------------------------------------------------- availability
def test_availability_is_the_same_whatever_the_order_of_the_questions():
    d = devices(flops=1, down=1, up=1, latency=0, online_s=600.0, offline_s=300.0, count=200)
    clients, times = np.arange(200), [0.0, 50.0, 5000.0, 120.0, 99999.0]
    forward = [Availability(d, 7).window(clients, t) for t in times]
    backward = [Availability(d, 7).window(clients, t) for t in reversed(times)][::-1]
    for (on_a, left_a), (on_b, left_b) in zip(forward, backward, strict=True):
        assert np.array_equal(on_a, on_b) and np.array_equal(left_a, left_b)


def test_spells_are_online_as_often_as_their_means_say():
    d = devices(flops=1, down=1, up=1, latency=0, online_s=600.0, offline_s=200.0, count=4000)
    online, leaves = Availability(d, 3).window(np.arange(4000), 10_000.0)
    assert online.mean() == pytest.approx(0.75, abs=0.03)
    assert np.all(leaves[~online] == 0) and leaves[online].mean() == pytest.approx(600, rel=0.08)


def test_measured_windows_are_followed_exactly():
    d = devices(flops=1, down=1, up=1, latency=0, windows=[((0.0, 10.0), (20.0, 30.0))], count=1)
    a = Availability(d, 0)
    assert [bool(a.window(np.array([0]), t)[0][0]) for t in (0, 9.9, 10, 19.9, 20, 30, 1e6)] == [
        True,
        True,
        False,
        False,
        True,
        False,
        False,
    ]
    assert a.window(np.array([0]), 22.5)[1][0] == 7.5


# ------------------------------------------------------------------------------------------------ one phase
def _three(latency: float = 0.0):
    return devices(flops=[1.0, 1.0, 1.0], down=1.0, up=1.0, latency=latency, count=3)


def test_a_phase_waits_for_everyone_until_its_deadline():
    d, inside, forever = _three(), np.ones(3, bool), np.full(3, math.inf)
    phase = Phase("upload", down=0.0, work=np.array([1.0, 2.0, 5.0]), up=0.0, deadline=3.0)
    answer, made, end, _ = run_phase(phase, start=0.0, devices=d, inside=inside, leaves=forever)
    assert answer.tolist() == [1.0, 2.0, 5.0] and made.tolist() == [True, True, False] and end == 3.0
    everyone = Phase("upload", down=0.0, work=np.array([1.0, 2.0, 2.5]), up=0.0, deadline=3.0)
    assert run_phase(everyone, start=0.0, devices=d, inside=inside, leaves=forever)[2] == 2.5  # no wait


def test_over_selection_closes_at_the_kth_answer_and_cuts_the_rest():
    d, inside, forever = _three(), np.ones(3, bool), np.full(3, math.inf)
    phase = Phase("upload", down=0.0, work=np.array([4.0, 1.0, 2.0]), up=0.0, keep=2)
    _, made, end, cut = run_phase(phase, start=0.0, devices=d, inside=inside, leaves=forever)
    assert made.tolist() == [False, True, True] and cut.tolist() == [True, False, False] and end == 2.0


def test_a_device_that_goes_offline_mid_phase_misses_it_and_without_a_limit_is_noticed_when_it_goes():
    d, inside = _three(latency=0.5), np.ones(3, bool)
    leaves = np.array([math.inf, 1.5, math.inf])  # device 1 leaves before its answer (2.0) is sent
    phase = Phase("keys", down=0.0, work=0.0, up=np.array([0.0, 1.0, 0.0]))
    _, made, end, _ = run_phase(phase, start=0.0, devices=d, inside=inside, leaves=leaves)
    assert made.tolist() == [True, False, True] and end == 1.5
    timed = Phase("keys", down=0.0, work=0.0, up=np.array([0.0, 1.0, 0.0]), timeout=4.0)
    assert run_phase(timed, start=1.0, devices=d, inside=inside, leaves=leaves + 1)[2] == 5.0  # waits it out


# ------------------------------------------------------------------------------------------------ work
def test_one_samples_training_flops_are_counted_by_hand():
    """digits_mlp is 64 → 32 → 10: forward 2·64·32 + 2·32·10 multiply-adds, backward the second layer's
    input and weight gradients (2·32·10 each) and the first layer's weight gradient (2·64·32); the input
    itself needs no gradient."""
    spec = ModelSpec(name="digits_mlp", input_shape=(1, 8, 8), num_classes=10)
    assert model_flops(spec) == (2 * 64 * 32 + 2 * 32 * 10) + (2 * 32 * 10 + 2 * 32 * 10 + 2 * 64 * 32)


def test_the_samples_of_a_round_are_what_the_minibatches_hold():
    from sifl_ray.data import client_batches

    sizes = np.array([5, 16, 37])
    for epochs, steps in ((2, 0), (1, 3), (1, 7)):
        counted = samples_per_round(sizes, batch_size=16, epochs=epochs, steps=steps)
        dealt = [
            sum(
                len(b)
                for b in client_batches(
                    np.arange(n), batch_size=16, epochs=epochs, steps=steps, seed=0, client_id=0, round=0
                )
            )
            for n in sizes
        ]
        assert counted.tolist() == dealt


def test_a_transforms_cost_follows_its_backend():
    assert transform_flops("dense", n=10, n_tilde=20, block_size=4) == 400
    assert transform_flops("block", n=10, n_tilde=20, block_size=4) == 160
    assert transform_flops("fast", n=10, n_tilde=20, block_size=4) == 20 * 5


def test_a_registered_profile_is_a_choice_with_its_own_section():
    from dataclasses import dataclass

    from sifl_ray.clock import register_profile
    from sifl_ray.config.components import DEVICE_PROFILES
    from sifl_ray.config.sections import SECTIONS

    @dataclass
    class Laptops:
        gflops: float = 50.0  # every laptop's speed

    saved = dict(SECTIONS)
    with DEVICE_PROFILES.restored():
        try:

            @register_profile("laptops", settings=Laptops)
            def laptops(count, rng, *, gflops):
                return devices(flops=gflops * 1e9, down=1e7, up=1e7, latency=0.01, count=count)

            cfg = _cfg("clock.profile=laptops", "laptops.gflops=80")
            assert np.all(client_devices(cfg, 3).flops == 80e9)
            with pytest.raises(ConfigError, match=r"laptops\.gflop: unknown key"):
                _cfg("clock.profile=laptops", "laptops.gflop=80")
        finally:
            SECTIONS.clear()
            SECTIONS.update(saved)
    with pytest.raises(ConfigError, match=r"clock\.profile: expected one of mobile, equal"):
        _cfg("clock.profile=laptops")
