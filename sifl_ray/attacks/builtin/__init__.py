"""The built-in attacks on an m1 arm's transcript, each registered by its own module on import
(:mod:`sifl_ray.attacks.registry`).

The order of the imports is the order of the figures in the report, the console table and ``result.json``
(the order of the attacks (a) to (d)), hence kept out of the import sorter's hands.
"""

# isort: off
from sifl_ray.attacks.builtin import differences  # noqa: F401 - imported to register
from sifl_ray.attacks.builtin import difference_noise  # noqa: F401
from sifl_ray.attacks.builtin import noise_removal  # noqa: F401
from sifl_ray.attacks.builtin import geometry  # noqa: F401
from sifl_ray.attacks.builtin import decoders  # noqa: F401
# isort: on
