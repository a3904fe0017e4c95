"""DP-FedAvg (McMahan et al., ICLR 2018): client-level (ε, δ) of the sampled Gaussian mechanism over rounds.

One round: sample each client with probability q, clip each sampled update to ``‖Δ_i‖₂ ≤ C``, average with
the fixed weight ``1/m`` (m = qN, the *expected* number of clients: a fixed denominator keeps the sensitivity
of the average at ``C/m`` whoever is sampled), and add ``N(0, σ²)`` per coordinate with ``σ = z·C/m``. The
unit of privacy is a client: neighbouring populations differ by one client's whole data set. T rounds are T
compositions of the Poisson-subsampled Gaussian mechanism with noise multiplier z, whose (ε, δ) a privacy
accountant computes.

The accounting is Google's ``dp_accounting`` (no accountant is written here): ``"rdp"`` is
:class:`dp_accounting.rdp.RdpAccountant` (Rényi DP, Mironov 2017, with the library's conversion to (ε, δ)),
``"pld"`` is :class:`dp_accounting.pld.PLDAccountant` (privacy loss distributions, tighter, slower). Both
bound the same mechanism: PLD's ε is the smaller, RDP's the more conservative.

Sampling (:data:`SAMPLINGS`):

* ``"poisson"``: each client joins independently with probability q (``PoissonSampledDpEvent``), under the
  add-or-remove-one relation: what DP-FedAvg's analysis assumes, and what a runner must do to claim it
  (the number of clients then varies from round to round).
* ``"fixed_size"``: exactly m = round(qN) of N clients, uniformly without replacement
  (``SampledWithoutReplacementDpEvent``, Wang et al. 2019). ``dp_accounting`` supports it only in the RDP
  accountant and only under the replace-one relation (one client's data swapped for another's, a different
  neighbour notion), so its ε is not comparable with a Poisson ε; ``"pld"`` with ``"fixed_size"`` is
  refused.

Client-side helpers at the end: clipping (in place, float64 torch), the central noise on the average, and
the distributed noise each client adds before secure aggregation so that the *sum* carries the central
variance. All randomness comes from a ``torch.Generator`` passed in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import dp_accounting
import torch
from dp_accounting import pld, rdp

from sifl_ray.config.names import DP_ACCOUNTANTS
from sifl_ray.privacy.clipping import clip_norm_

Accountant = Literal["rdp", "pld"]
Sampling = Literal["poisson", "fixed_size"]
ACCOUNTANTS: tuple[Accountant, ...] = DP_ACCOUNTANTS  # type: ignore[assignment]
SAMPLINGS: tuple[Sampling, ...] = ("poisson", "fixed_size")
PLD_DISCRETIZATION = 1e-4  # the library's default value_discretization_interval


# ------------------------------------------------------------------------------------------------------------
# Accounting: which event, which accountant.


def _check(
    *, noise_multiplier: float | None, sample_rate: float, steps: int, delta: float, population: int | None
) -> None:
    if noise_multiplier is not None and not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}")
    if not 0 < sample_rate <= 1:
        raise ValueError(
            f"sample_rate must be in (0, 1], got {sample_rate!r}: it is q, the probability that a client is "
            "sampled in a round (expected clients per round / population)"
        )
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be an integer >= 0 (rounds), got {steps!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}; usually below 1/population")
    if population is not None and (int(population) != population or population < 1):
        raise ValueError(f"population must be an integer >= 1, got {population!r}")


def round_event(
    noise_multiplier: float,
    sample_rate: float,
    *,
    sampling: Sampling = "poisson",
    population: int | None = None,
) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of one DP-FedAvg round (module docstring, "Sampling").

    Raises:
        ValueError: unknown ``sampling``, or ``"fixed_size"`` without ``population``.
    """
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling == "poisson":
        return dp_accounting.PoissonSampledDpEvent(sample_rate, gaussian)
    if sampling == "fixed_size":
        if population is None:
            raise ValueError("fixed_size sampling needs population, the number of clients sampled from")
        size = round(sample_rate * population)
        if not 1 <= size <= population:
            raise ValueError(f"sample_rate·population = {sample_rate * population} rounds to {size} clients")
        return dp_accounting.SampledWithoutReplacementDpEvent(population, size, gaussian)
    raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")


def make_accountant(
    accountant: Accountant = "rdp", *, sampling: Sampling = "poisson"
) -> dp_accounting.PrivacyAccountant:
    """A fresh ``dp_accounting`` accountant for DP-FedAvg rounds of the given ``sampling``.

    Raises:
        ValueError: unknown accountant, or ``"pld"`` with ``"fixed_size"`` (the library has no PLD for
            sampling without replacement).
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    relation = (
        dp_accounting.NeighboringRelation.REPLACE_ONE
        if sampling == "fixed_size"
        else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    if accountant == "rdp":
        return rdp.RdpAccountant(neighboring_relation=relation)
    if accountant == "pld":
        if sampling == "fixed_size":
            raise ValueError(
                "the PLD accountant of dp_accounting does not support fixed-size sampling (sampling without "
                "replacement); use accountant='rdp' for it, or Poisson sampling"
            )
        return pld.PLDAccountant(relation, value_discretization_interval=PLD_DISCRETIZATION)
    raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")


def epsilon(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: Accountant = "rdp",
    sampling: Sampling = "poisson",
    population: int | None = None,
) -> float:
    """ε after ``steps`` DP-FedAvg rounds at δ: ``steps``-fold composition of the sampled Gaussian.

    Args:
        noise_multiplier: z, the noise std on the sum divided by the clip norm C.
        sample_rate: q, a client's probability of being sampled in a round.
        steps: T, the number of rounds.
        delta: δ of the guarantee.
        accountant: ``"rdp"`` or ``"pld"``.
        sampling: ``"poisson"`` or ``"fixed_size"`` (module docstring).
        population: N, needed for ``"fixed_size"``.

    Returns:
        ε (``inf`` for z = 0; 0 for 0 steps).
    """
    _check(
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        steps=steps,
        delta=delta,
        population=population,
    )
    acc = make_accountant(accountant, sampling=sampling)
    event = round_event(noise_multiplier, sample_rate, sampling=sampling, population=population)
    if steps:  # the library refuses a composition count of 0; nothing released is ε = 0
        acc.compose(dp_accounting.SelfComposedDpEvent(event, int(steps)))
    return float(acc.get_epsilon(delta))


def epsilon_of_rounds(
    *, noise_multipliers: Sequence[float], delta: float, accountant: Accountant = "rdp"
) -> float:
    """ε at δ of unsampled Gaussian rounds, each with its own noise multiplier ``z_t`` (composed; rounds of
    one ``z`` as one self-composition). What distributed noise gives when a round's sum carries fewer or
    more noise shares than planned: the multipliers are the realised ones.

    Why composition of different ``z_t`` is sound here: the sequence depends on who took part (public under
    the zero-out relation), never on a client's update, so it is fixed before the data speak."""
    for z in noise_multipliers:
        _check(noise_multiplier=z, sample_rate=1.0, steps=1, delta=delta, population=None)
    acc = make_accountant(accountant, sampling="poisson")
    for z, count in sorted(Counter(float(z) for z in noise_multipliers).items()):
        acc.compose(dp_accounting.SelfComposedDpEvent(round_event(z, 1.0, sampling="poisson"), count))
    return float(acc.get_epsilon(delta))


def epsilon_per_round(
    *,
    noise_multiplier: float,
    sample_rate: float,
    rounds: int,
    delta: float,
    accountant: Accountant = "rdp",
    sampling: Sampling = "poisson",
    population: int | None = None,
) -> list[float]:
    """Cumulative ε after each of rounds 1..T (for TensorBoard and the summary).

    RDP composes additively, so one round's RDP curve times t gives round t (the library's ``compute_epsilon``
    converts each); the last entry equals :func:`epsilon` for T steps. PLD composes the one-round privacy loss
    distribution once per round (one convolution and one ε query each, so its cost grows with T), which
    agrees with :func:`epsilon` up to the discretisation of the distribution.
    """
    _check(
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        steps=rounds,
        delta=delta,
        population=population,
    )
    make_accountant(accountant, sampling=sampling)  # validate the combination first
    if rounds == 0:
        return []
    if noise_multiplier == 0:
        return [math.inf] * int(rounds)
    if accountant == "rdp":
        acc = make_accountant("rdp", sampling=sampling)
        acc.compose(round_event(noise_multiplier, sample_rate, sampling=sampling, population=population))
        per_round, orders = acc.rdp, acc.orders
        return [
            float(rdp.rdp_privacy_accountant.compute_epsilon(orders, t * per_round, delta)[0])
            for t in range(1, int(rounds) + 1)
        ]
    one = pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        value_discretization_interval=PLD_DISCRETIZATION,
        sampling_prob=sample_rate,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    composed, history = one, [float(one.get_epsilon_for_delta(delta))]
    for _ in range(int(rounds) - 1):
        composed = composed.compose(one)
        history.append(float(composed.get_epsilon_for_delta(delta)))
    return history


def calibrate(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: Accountant = "rdp",
    sampling: Sampling = "poisson",
    population: int | None = None,
    tol: float = 1e-4,
) -> float:
    """The smallest noise multiplier z (within ``tol``) whose ε after ``steps`` rounds is ≤ the target.

    Uses ``dp_accounting.calibrate_dp_mechanism`` (Brent's method on the accountant's ε, then a check that the
    returned z meets the target: ``epsilon(z) ≤ target_epsilon`` holds for the returned z).

    Raises:
        ValueError: ``target_epsilon`` ≤ 0, or ``steps`` = 0 (every z, even 0, gives ε = 0: nothing to
            calibrate).
    """
    _check(noise_multiplier=None, sample_rate=sample_rate, steps=steps, delta=delta, population=population)
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ValueError(f"target_epsilon must be finite and > 0, got {target_epsilon!r}")
    if steps == 0:
        raise ValueError("steps = 0: no round is released, any noise multiplier gives ε = 0")
    make_accountant(accountant, sampling=sampling)  # validate the combination before searching

    def make_event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            round_event(z, sample_rate, sampling=sampling, population=population), int(steps)
        )

    fresh: Callable[[], dp_accounting.PrivacyAccountant] = lambda: make_accountant(  # noqa: E731
        accountant, sampling=sampling
    )
    return float(
        dp_accounting.calibrate_dp_mechanism(
            fresh,
            make_event,
            target_epsilon,
            delta,
            # the search starts at z = 0, where the sampled-without-replacement RDP divides by zero; any
            # z below 1e-3 gives an ε in the thousands, so that is where its search starts instead
            bracket_interval=dp_accounting.LowerEndpointAndGuess(0.0 if sampling == "poisson" else 1e-3, 1.0),
            tol=tol,
        )
    )


#: RDP may exceed PLD by at most this factor where :func:`cross_check` compares them (its docstring).
MAX_RDP_PLD_RATIO = 1.6
#: Where the ratio is checked: PLD's ε in this range, and at least one expected participation (q·T ≥ 1).
RATIO_CHECKED_EPSILONS = (1.0, 50.0)


@dataclass(frozen=True)
class AccountantCrossCheck:
    """ε of one DP-FedAvg schedule by both accountants, and whether they disagree beyond what is known.

    Attributes:
        rdp, pld: ε from :func:`epsilon` with ``accountant="rdp"`` and ``"pld"``.
        ratio: ``rdp / pld`` (1 where both are 0 or both inf; inf where only PLD's is 0).
        disagree: whether the pair is outside the known slack (``reason`` says how); "" otherwise.
    """

    rdp: float
    pld: float
    ratio: float
    disagree: bool
    reason: str


def _epsilon_ratio(rdp: float, pld: float) -> float:
    if rdp == pld:
        return 1.0
    return math.inf if pld == 0 else rdp / pld


def _disagreement(*, rdp: float, pld: float, steps: int, sample_rate: float) -> str:
    """Why ``rdp`` and ``pld`` disagree beyond their known slack ("" if they do not): :func:`cross_check`."""
    slack = steps * PLD_DISCRETIZATION
    if pld > rdp + slack:
        return (
            f"PLD's ε {pld:.6g} is above RDP's {rdp:.6g} by more than PLD's rounding over {steps} "
            f"rounds ({slack:.3g}): both bound the same mechanism and PLD is the tighter, so one accountant "
            "was given another mechanism (check q, z and the number of rounds each received)"
        )
    low, high = RATIO_CHECKED_EPSILONS
    ratio = _epsilon_ratio(rdp, pld)
    if low <= pld <= high and sample_rate * steps >= 1 and ratio > MAX_RDP_PLD_RATIO:
        return (
            f"RDP's ε {rdp:.6g} is {ratio:.3g} times PLD's {pld:.6g}, beyond the {MAX_RDP_PLD_RATIO} "
            f"allowed where PLD's ε is in [{low}, {high}] and q·T >= 1 (dp_fedavg.cross_check): one of "
            "the two was likely given another mechanism"
        )
    return ""


def cross_check(
    *, noise_multiplier: float, sample_rate: float, steps: int, delta: float
) -> AccountantCrossCheck:
    """ε of ``steps`` Poisson-sampled DP-FedAvg rounds from RDP and from PLD, and whether they disagree.

    Both accountants upper-bound the same ε: RDP through Rényi divergences at a grid of orders and a lossy
    conversion to (ε, δ), PLD through the discretised privacy loss distribution, pessimistically rounded
    (each round's loss rounded up by at most ``PLD_DISCRETIZATION``, so T rounds by at most ``T·Δ``). Two
    flags, then:

    * **PLD above RDP** by more than ``steps·PLD_DISCRETIZATION``: a bug (the accountants were handed
      different mechanisms), since PLD is the tighter analysis and differs from the exact ε only by its
      rounding.
    * **RDP above PLD** by more than :data:`MAX_RDP_PLD_RATIO` = 1.6, checked only where PLD's ε is in
      :data:`RATIO_CHECKED_EPSILONS` = [1, 50] and q·T ≥ 1. Measured at δ = 1e-5 over z ∈ {0.5, 0.7, 0.8,
      1, 1.1, 1.5, 2, 3, 5, 10}, q ∈ {0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1}, T ∈ {1, 10, 100, 1000, 5000}
      (186 points, 72 inside that region): inside, the largest ratio was 1.45 (z = 0.8, q = 0.01,
      T = 100: 2.19 against 1.51), the median 1.10, so 1.6 leaves 10% over the worst measured and still
      catches an accountant handed twice the sample rate. PLD was never above RDP. Outside the region the
      ratio says nothing about a bug: below ε ≈ 1 RDP's conversion term ``log(1/δ)/(α−1)`` dominates and
      the ratio reached 80 (z = 2, q = 0.001, T = 1: 0.12 against 0.0015); with q·T < 1 amplification is
      so strong that RDP stays loose up to ε ≈ 3 (2.9 at z = 0.5, q = 0.001, T = 10); above ε ≈ 50 RDP's
      largest order limits it (2.6 at z = 0.5, q = 0.1, T = 5000, PLD's ε = 435).
      ``tests/privacy/test_dp_fedavg_crosscheck.py`` re-measures points of each kind.

    Fixed-size sampling has no PLD accountant here (:func:`make_accountant`), so only Poisson is checked.
    """
    common = {
        "noise_multiplier": noise_multiplier,
        "sample_rate": sample_rate,
        "steps": steps,
        "delta": delta,
    }
    rdp_eps = epsilon(**common, accountant="rdp")
    pld_eps = epsilon(**common, accountant="pld")
    reason = _disagreement(rdp=rdp_eps, pld=pld_eps, steps=int(steps), sample_rate=sample_rate)
    return AccountantCrossCheck(
        rdp=rdp_eps, pld=pld_eps, ratio=_epsilon_ratio(rdp_eps, pld_eps), disagree=bool(reason), reason=reason
    )


# ------------------------------------------------------------------------------------------------------------
# Client and server noise (McMahan et al. 2018, Algorithm 1; distributed variant: Kairouz et al. 2021).


def clip_update_(update: torch.Tensor, clip: float) -> bool:
    """Scale a client update in place so that ``‖Δ‖₂ ≤ C``; return whether it had to.

    A zero update is left alone (no division by its norm). Float64 is required: the sensitivity C/m is what
    the accountant assumes, and a float32 rescale can land an ulp above C.
    """
    if update.dtype != torch.float64:
        raise TypeError(f"clip_update_ needs a float64 tensor, got {update.dtype}")
    return clip_norm_(update, clip)


def central_noise_std(*, noise_multiplier: float, clip: float, expected_clients: float) -> float:
    """σ of the Gaussian noise on the *average* ``(1/m) Σ Δ_i``: ``z·C/m``, m = qN the expected clients.

    The average's sensitivity to one client is C/m (the denominator is fixed, not the realised count).
    """
    if not (noise_multiplier >= 0 and clip > 0 and expected_clients > 0):
        raise ValueError(
            f"need noise_multiplier >= 0, clip > 0 and expected_clients > 0, got {noise_multiplier!r}, "
            f"{clip!r}, {expected_clients!r}"
        )
    return noise_multiplier * clip / expected_clients


def add_central_noise(
    average: torch.Tensor,
    *,
    noise_multiplier: float,
    clip: float,
    expected_clients: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """``average + N(0, (z·C/m)²)`` per coordinate (a trusted aggregator's step, :class:`CentralNoise`).

    The draw is the generator's own float64 normal sample, made where the generator lives (the CPU) and then
    moved to the average's device, so that one seed gives one release on any device.
    """
    std = central_noise_std(noise_multiplier=noise_multiplier, clip=clip, expected_clients=expected_clients)
    noise = torch.randn(average.shape, generator=generator, dtype=average.dtype)
    return average + std * noise.to(average.device)


def distributed_noise_std(*, noise_multiplier: float, clip: float, num_noisers: int) -> float:
    """σ each of n clients adds to its clipped update so that the *sum* of n carries ``N(0, (z·C)²)``.

    ``n·(zC/√n)² = (zC)²``: after the server divides the securely aggregated sum by m, the average carries
    the central noise ``N(0, (zC/m)²)``, and the accountant's guarantee applies as if a trusted server had
    added it.
    What this assumes, and where it fails:

    * the clients are honest: each adds its share; a client that skips it lowers the total variance, and a
      coalition of c clients that knows its own noise effectively removes c of the n shares;
    * the sum is hidden: each client's own noise is only ``zC/√n``, far too small to protect its update alone,
      so the update must reach the server only inside a secure aggregate (:mod:`sifl_ray.privacy.secagg`);
    * at least n clients add noise: with dropouts the sum has fewer shares and less variance, so take n as the
      smallest number of survivors the round accepts (the threshold t), which over-provisions noise when more
      survive;
    * continuous noise: encoding into the ring rounds and clips each noised update, and Gaussian noise rounded
      per client is not exactly a Gaussian on the sum; Kairouz et al. (ICML 2021) use the discrete Gaussian
      to make the guarantee exact. The error is bounded by the codec's rounding bound, but the (ε, δ) here is
      that of the continuous mechanism.
    """
    if int(num_noisers) != num_noisers or num_noisers < 1:
        raise ValueError(f"num_noisers must be an integer >= 1, got {num_noisers!r}")
    if not (noise_multiplier >= 0 and clip > 0):
        raise ValueError(f"need noise_multiplier >= 0 and clip > 0, got {noise_multiplier!r}, {clip!r}")
    return noise_multiplier * clip / math.sqrt(num_noisers)


def add_distributed_noise_(
    update: torch.Tensor,
    *,
    noise_multiplier: float,
    clip: float,
    num_noisers: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Add one client's share ``N(0, (zC)²/n)`` of the distributed noise to its clipped update, in place."""
    std = distributed_noise_std(noise_multiplier=noise_multiplier, clip=clip, num_noisers=num_noisers)
    noise = torch.randn(update.shape, generator=generator, dtype=update.dtype, device=update.device)
    return update.add_(noise, alpha=std)
