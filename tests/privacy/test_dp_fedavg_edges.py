"""DP-FedAvg's accountant and noise helpers at their edges: what each argument changes, what each check
refuses and where the noise comes from (written against the mutants mutmut left alive: tests/mutation)."""

from __future__ import annotations

import math

import pytest
import torch

from sifl_ray.privacy import dp_fedavg as D

ACC = {"noise_multiplier": 1.1, "sample_rate": 0.05, "delta": 1e-5}


def test_the_accountant_refuses_bad_parameters():
    with pytest.raises(ValueError, match=r"noise_multiplier must be finite and >= 0, got -1"):
        D.epsilon(**{**ACC, "noise_multiplier": -1.0}, steps=1)
    with pytest.raises(ValueError, match=r"population must be an integer >= 1, got 0"):
        D.epsilon(**ACC, steps=1, sampling="fixed_size", population=0)
    assert D.distributed_noise_std(noise_multiplier=0.5, clip=2.0, num_noisers=1) == 1.0
    assert D.distributed_noise_std(noise_multiplier=0.0, clip=2.0, num_noisers=3) == 0.0
    assert D.distributed_noise_std(noise_multiplier=3.0, clip=0.5, num_noisers=9) == 0.5


@pytest.mark.parametrize("which", ["central", "distributed"])
def test_the_noise_is_the_given_generators_float64_draw(which):
    """The noise is ``std ×`` the generator's own float64 normal draw, so a seeded party reproduces it, and
    no global RNG and no float32 draw (a coarser, different sample) stand in for it."""
    size, z, clip = 1000, 1.3, 0.5
    kw = {"noise_multiplier": z, "clip": clip}
    if which == "central":
        add, extra, std = D.add_central_noise, {"expected_clients": 4.0}, z * clip / 4.0
    else:
        add, extra, std = D.add_distributed_noise_, {"num_noisers": 4}, z * clip / 2.0
    torch.manual_seed(123)  # the global RNG, which must not be what the noise follows
    got = add(
        torch.zeros(size, dtype=torch.float64), **kw, **extra, generator=torch.Generator().manual_seed(9)
    )
    draw = torch.randn(size, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, std * draw, rtol=0.0, atol=0.0)
    assert math.isclose(float(got.std()), std, rel_tol=0.2)  # a sanity check on the scale only


# ---- the second mutation run's survivors: fixed-size sampling's path, the refusals' words, the defaults ----
FIXED = {"sample_rate": 0.2, "delta": 1e-5, "sampling": "fixed_size", "population": 50}


def test_fixed_size_sampling_reaches_every_entry_point_with_its_population():
    """The population must travel to the sampled-without-replacement event in each function: its ε is
    the RDP accountant's for exactly round(q·N) of N clients, not Poisson's."""
    per_round = D.epsilon_per_round(noise_multiplier=1.5, rounds=4, **FIXED)
    whole = D.epsilon(noise_multiplier=1.5, steps=4, **FIXED)
    poisson = D.epsilon(noise_multiplier=1.5, steps=4, sample_rate=0.2, delta=1e-5)
    assert per_round[-1] == pytest.approx(whole, rel=1e-12) and whole != pytest.approx(poisson, rel=1e-3)
    assert len(per_round) == 4 and per_round == sorted(per_round)
    z = D.calibrate(target_epsilon=whole, steps=4, **FIXED)
    assert D.epsilon(noise_multiplier=z, steps=4, **FIXED) <= whole * (1 + 1e-9)
    assert abs(z - 1.5) < 1e-3  # the same schedule back, within calibrate's tolerance
    with pytest.raises(ValueError, match="PLD accountant of dp_accounting does not support fixed-size"):
        D.epsilon_per_round(noise_multiplier=1.5, rounds=4, accountant="pld", **FIXED)
    with pytest.raises(ValueError, match="PLD accountant of dp_accounting does not support fixed-size"):
        D.calibrate(target_epsilon=1.0, steps=4, accountant="pld", **FIXED)


def test_one_round_and_no_noise_are_exact_edge_cases():
    one = D.epsilon_per_round(noise_multiplier=2.0, sample_rate=0.1, rounds=1, delta=1e-5)
    assert one == [pytest.approx(D.epsilon(noise_multiplier=2.0, sample_rate=0.1, steps=1, delta=1e-5))]
    assert D.epsilon_per_round(noise_multiplier=0.0, sample_rate=0.1, rounds=3, delta=1e-5) == [math.inf] * 3
    assert D.calibrate(target_epsilon=3.0, sample_rate=0.1, steps=1, delta=1e-5) > 0  # one round calibrates


def test_calibrate_defaults_to_rdp_and_meets_its_tolerance():
    kw = {"target_epsilon": 2.0, "sample_rate": 0.1, "steps": 20, "delta": 1e-5}
    z = D.calibrate(**kw)
    assert z == D.calibrate(**kw, accountant="rdp")
    # the smallest z within tol = 1e-4: one tolerance less noise already breaks the target
    assert D.epsilon(noise_multiplier=z - 2e-4, sample_rate=0.1, steps=20, delta=1e-5) > 2.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_epsilon": math.inf}, r"target_epsilon must be finite and > 0, got inf"),
        ({"target_epsilon": 0.0}, r"target_epsilon must be finite and > 0, got 0.0"),
        ({"steps": 0}, r"steps = 0: no round is released, any noise multiplier gives ε = 0"),
        ({"sample_rate": 1.5}, r"sample_rate must be in \(0, 1\]"),
    ],
)
def test_calibrate_refuses_in_its_own_words(kwargs, message):
    args = {"target_epsilon": 1.0, "sample_rate": 0.1, "steps": 10, "delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=message):
        D.calibrate(**args)


def test_central_noise_std_accepts_a_fractional_denominator_and_refuses_a_zero_clip():
    """m = qN is an expectation: 0.5 is a valid denominator; a zero clip bounds nothing and is refused."""
    assert D.central_noise_std(noise_multiplier=1.0, clip=1.0, expected_clients=0.5) == 2.0
    for bad in ({"clip": 0.0}, {"expected_clients": 0.0}, {"noise_multiplier": -1.0}):
        args = {"noise_multiplier": 1.0, "clip": 1.0, "expected_clients": 2.0, **bad}
        with pytest.raises(ValueError, match="need noise_multiplier >= 0, clip > 0 and expected_clients > 0"):
            D.central_noise_std(**args)
