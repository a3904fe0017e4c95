"""Adversaries that measure what SIFL's encodings leak (docs/method.md "Attacks the design must be judged
against").

The paper's privacy argument looks at one coordinate at a time; this package measures what an adversary
recovers from whole vectors, with figures, and prints the per-element ε beside them:

* :mod:`.transcript`: :class:`TranscriptRecorder`, what each channel carried (uploads, broadcasts, the
  server's inputs; no seed, no key, no plain model);
* :mod:`.adversaries`: the attacks, using only the attacking party's view;
* :mod:`.element_noise`: per element, the noise in one upload vs in a same-round difference (the aggregator's
  view; the per-element ε does not hold against it);
* :mod:`.audit`: an empirical DP audit with Clopper–Pearson bounds (keys granted);
* :mod:`.record`: any registered arm played on a small model through the platform's own parties (server
  and aggregator actors, the client role, ``run_round`` in-process), every channel recorded,
  the plain models kept on the side by a simulation-only tap for scoring;
* :mod:`.registry`: the attacks on a key design's transcript, each registered once with its figures and
  their explanations; :mod:`.builtin`: the built-in ones, (a) to (d), one module each;
* :mod:`.design`, :mod:`.m2`, :mod:`.plain`, :mod:`.arm_audit`: each kind of arm attacked (an m1 arm under
  one key design, an m2 arm by its server, a plain arm by the aggregator's direct view) and audited;
* :mod:`.suite`: :func:`run_suite`, every arm of a configuration through those, scored;
* :mod:`.frontier`: the precision–privacy frontier (``sifl describe --frontier``);
* :mod:`.report`, :mod:`.cli`: JSON, markdown, TensorBoard, the RESULT line (``sifl attack``).
"""

from sifl_ray.attacks.transcript import TranscriptRecorder

__all__ = ["TranscriptRecorder"]
