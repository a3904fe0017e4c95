"""What a round releases is the arm's stated guarantee's to say, and its steps must be able to release it:
checked when an arm is set up, before any party is asked anything (docs/method.md "Every round releases a
noised output").

An arm declares :attr:`~sifl_ray.arms.base.Arm.every_round`: whether its guarantee releases every round, a
round in which nobody took part included. The round reads that declaration (never an attribute of a step),
and runs the aggregator's step on a zero sum when nobody's update arrived. For that to be a release the
guarantee can stand behind, the arm's steps must be able to make it:

* an aggregator step must exist (the noise comes from it) and must change the zero sum (a step that returns
  it unchanged, or skips its noise when ``weight`` is 0, releases the unchanged model, which tells everyone
  that nobody took part): :func:`release_problems` runs the step once on a zero sum to see;
* secure aggregation has nothing to unmask in such a round, so it cannot release one;
* an ε amplified by sampling (the privacy report's ``amplified_by_sampling``) assumes that nobody can tell
  who was sampled, an empty sample included: such an arm must declare ``every_round``
  (:func:`amplification_problems`).

An arm that cannot is refused with the reason; the aggregator refuses, at run time too, to release a zero sum
its step left unchanged in a round the guarantee says is noised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sifl_ray.arms.base import Arm, PartySteps

#: The seed the set-up's trial of an aggregator step draws from: a trial, never a release.
TRIAL_SEED = bytes(range(32))


def release_problems(arm: Arm, steps: PartySteps, *, name: str, rows: int) -> list[str]:
    """Why ``arm`` (instance ``name``) cannot release what its guarantee says in a round nobody took part
    in (empty: it can). ``rows``: the length of an aggregator shard's vector, which the step is tried on."""
    if not arm.every_round:
        return []
    why = (
        f"{name}: its guarantee releases every round (every_round = True), a round in which nobody took "
        "part too (else the unchanged model tells everyone that nobody did)"
    )
    if arm.secure_aggregation:
        return [
            f"{why}, but under secure aggregation such a round has nothing to unmask; set every_round = "
            "False and state the guarantee with participation public (zero-out)"
        ]
    if steps.aggregator is None:
        return [
            f"{why}, but it has no aggregator step to release the noise on a zero sum; give it one "
            "(DP-FedAvg's CentralNoise) or set every_round = False and claim no amplification by sampling"
        ]
    import torch

    zero = torch.zeros(max(int(rows), 1), dtype=torch.float64)
    out, _ = steps.aggregator(
        zero.clone(), arm=name, t=0, shard=0, bounds=(0, zero.numel()), weight=0.0, seed=TRIAL_SEED
    )
    if not bool(torch.any(out != 0)):
        return [
            f"{why}, but its aggregator step returns a zero sum unchanged (weight 0): it must add its "
            "noise whatever the weight, or the round releases the model as it was"
        ]
    return []


def amplification_problems(arm: Arm, privacy: dict[str, Any] | None, *, name: str) -> list[str]:
    """Why ``arm``'s privacy report claims what its releases cannot hold: an ε amplified by sampling from an
    arm whose empty rounds release nothing new (empty: nothing)."""
    if privacy and privacy.get("amplified_by_sampling") and not arm.every_round:
        return [
            f"{name}: its ε is amplified by sampling, which holds only against whoever cannot tell who was "
            "sampled; a round that sampled nobody then releases the model unchanged and tells everyone. Set "
            "every_round = True on the arm (with an aggregator step that noises a zero sum), or report the ε "
            "without amplification"
        ]
    return []
