"""Differential privacy of SIFL (paper §5) and the NbAFL baseline.

* :mod:`~sifl_ray.privacy.formulas`: pure, keyword-only per-element ε of Theorems 1 and 2 (the paper's
  formulas and sound ones beside them), sensitivities of Remark 3; the Laplace ones in
  :mod:`~sifl_ray.privacy.laplace`.
* :mod:`~sifl_ray.privacy.releases`: which formula for which release of a round, and its worst element.
* :mod:`~sifl_ray.privacy.accountant`: a thin history of per-round, per-release worst-element ε.
* :mod:`~sifl_ray.privacy.nbafl`: the DP baseline of Fig. 6 (clip, then Gaussian noise before upload).

Every ε here is a per-element, per-round guarantee, as the paper states it; none is a guarantee on the whole
released vector or over several rounds (docs/method.md "Attacks").
"""

from sifl_ray.privacy.accountant import ReleaseRecord, SiflAccountant, describe_release_epsilons
from sifl_ray.privacy.formulas import (
    gaussian_broadcast_epsilon,
    gaussian_global_epsilon,
    gaussian_global_epsilon_sound,
    gaussian_local_epsilon,
    gaussian_mechanism_delta,
    gaussian_tail_inverse,
    global_sensitivity,
    laplace_broadcast_epsilon_paper,
    laplace_broadcast_epsilon_sound,
    laplace_global_epsilon_paper,
    laplace_global_epsilon_sound,
    laplace_local_epsilon_paper,
    laplace_local_epsilon_sound,
    local_sensitivity,
    worst_element,
    worst_element_index,
)
from sifl_ray.privacy.nbafl import clip_model, nbafl_exposures, nbafl_guarantee, nbafl_sigma, privatize_upload
from sifl_ray.privacy.releases import (
    CAVEAT,
    SCOPE,
    ArmReleases,
    ReleaseEpsilon,
    arm_release_epsilons,
    release_epsilons,
)

__all__ = [
    "CAVEAT",
    "SCOPE",
    "ArmReleases",
    "ReleaseEpsilon",
    "ReleaseRecord",
    "SiflAccountant",
    "arm_release_epsilons",
    "clip_model",
    "describe_release_epsilons",
    "gaussian_broadcast_epsilon",
    "gaussian_global_epsilon",
    "gaussian_global_epsilon_sound",
    "gaussian_local_epsilon",
    "gaussian_mechanism_delta",
    "gaussian_tail_inverse",
    "global_sensitivity",
    "laplace_broadcast_epsilon_paper",
    "laplace_broadcast_epsilon_sound",
    "laplace_global_epsilon_paper",
    "laplace_global_epsilon_sound",
    "laplace_local_epsilon_paper",
    "laplace_local_epsilon_sound",
    "local_sensitivity",
    "nbafl_exposures",
    "nbafl_guarantee",
    "nbafl_sigma",
    "privatize_upload",
    "release_epsilons",
    "worst_element",
    "worst_element_index",
]
