"""What a configuration costs and promises before any training: sizes, predicted decode error, ε.

``sifl describe`` prints this; the runner uses the same functions to refuse a configuration float64 cannot
carry (SPEC "Precision") and to report the per-element ε of every release (SPEC "Differential privacy").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseSpec
from sifl_ray.coding.precision import check_precision, predict_decode_error
from sifl_ray.coding.roundoff import round_error_bound, run_round_bound
from sifl_ray.privacy.accountant import ArmReleases, arm_release_epsilons, describe_release_epsilons
from sifl_ray.progress import Progress
from sifl_ray.specs import Coding, CodingSpec

ROUND0_NOTE = (
    "round 0 of M2 is an M1 round: its clients start from the server's M1 encoding P1 w0 + N1 r1 and strip "
    "no code 2, so its uploads carry N1 r1 without the ||P2R|| factor and its broadcast is M1's"
)
#: Who a SIFL ε is about: the paper's adjacency (§5: local data sets that differ on a single element), record
#: level, for one element of one release in one round.
SIFL_NEIGHBOUR_RELATION = (
    "one sample of one client's local data set changed (record level): D_i and D_i' differing on a single "
    "element, as the paper's §5 states it; each ε is per element of one release, per round"
)
#: Against whom (the caveat says why not more).
SIFL_THREAT_MODEL = (
    "an observer without key 1 of one element of one release in one round: the aggregator (one upload's "
    "element: the round's uploads share one noise draw, so their differences are not covered) and an "
    "eavesdropper on the broadcast; not the clients, which hold P1L (and P2R in M2) and decode the "
    "broadcast exactly"
)
INPUT_SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28)}
TRAIN_SIZES = {"mnist": 60000, "fashion_mnist": 60000}
ROUND_BOUND_CONFIDENCE = 1e-9  # per noise draw: the round bound fails only if a draw exceeds this quantile


def noise_specs(cfg: DictConfig) -> tuple[NoiseSpec, NoiseSpec]:
    """The two SIFL noises of a configuration (the client's and the aggregator's), as the coding bounds take
    them."""
    noise = cfg.coding.noise
    return (
        NoiseSpec(distribution=noise.distribution, scale=float(noise.sigma1)),
        NoiseSpec(distribution=noise.distribution, scale=float(noise.sigma2)),
    )


def predict(cfg: DictConfig, *, coding: Coding, n: int, w_max: float, key=None, **key_inputs: float):
    """The precision model's report for one round of an arm of ``coding`` (``M1`` or ``M2``).

    The configuration alone gives the fast design's ‖P1L‖₂ and conditioning; dense and block keys are worse
    conditioned, so their owner passes ``key`` (or the scalars ``p1l_norm``, ``cond``, ``depth`` it computed
    from its key) and the prediction uses the real values.
    """
    c = cfg.coding
    return predict_decode_error(
        scheme=coding.scheme,
        dtype=getattr(torch, c.dtype),
        n=n,
        n_tilde=n + c.n_extra,
        alpha=c.alpha,
        beta=c.beta,
        kappa=c.kappa if c.kappa is not None else 1.0 / c.alpha,
        left_inverse=c.left_inverse,
        backend=c.backend,
        distribution=c.noise.distribution,
        sigma1=c.noise.sigma1,
        sigma2=c.noise.sigma2,
        p=c.p,
        gamma=c.gamma,
        eta=c.eta,
        w_max=w_max,
        clients=cfg.clients.num_clients,
        key=key,
        **key_inputs,
    )


def arm_precision(cfg: DictConfig, *, coding: Coding, n: int, w_max: float) -> dict[str, Any]:
    """The precision model's estimate of one round's decode error, checked against the tolerance.

    Raises:
        PrecisionError: the estimate exceeds ``coding.precision.tolerance`` and the policy is ``refuse``.

    ``deviation_estimate`` adds the per-round estimate once per round: what the paired FedAvg run would
    differ by if local training did not amplify a perturbation from round to round. It is an estimate, not
    a bound (the paper's CNNs amplify; a CPU may round less kindly than the estimate assumes); the
    rigorous figure is the per-round bound of :func:`arm_round_bound`.
    """
    report = predict(cfg, coding=coding, n=n, w_max=w_max)
    check_precision(report, tolerance=cfg.coding.precision.tolerance, policy=cfg.coding.precision.policy)
    per_round = float(report.predicted_max_error)
    return {
        "estimate_per_round": per_round,
        "deviation_estimate": per_round * cfg.train.rounds,
        "tolerance": float(cfg.coding.precision.tolerance),
    }


def arm_round_bound(
    cfg: DictConfig,
    *,
    coding: Coding,
    n: int,
    key_roundoff,
    aggregator_roundoff,
    clients_per_worker: int,
    workers: int,
    initial_norm: float,
) -> dict[str, Any] | None:
    """The rigorous per-round float64 bound of one arm (:mod:`sifl_ray.coding.roundoff`), or ``None`` where
    it does not apply (the stepwise client form trains on decoded points)."""
    if cfg.coding.client_form != "fused":
        return None
    c = cfg.coding

    def compute(model_norm: float):
        return round_error_bound(
            key_roundoff,
            scheme=coding.scheme,
            n=n,
            n_tilde=n + c.n_extra,
            model_norm=model_norm,
            clients_per_worker=clients_per_worker,
            workers=workers,
            noise_scale1=c.noise.sigma1,
            noise_scale2=c.noise.sigma2,
            distribution=c.noise.distribution,
            aggregator=aggregator_roundoff if coding.aggregator_encodes else None,
            confidence=ROUND_BOUND_CONFIDENCE,
        )

    result = run_round_bound(compute, clip=cfg.privacy.clip, initial_norm=initial_norm)
    return {
        "round_bound": result.bound,
        "round_bound_confidence": result.confidence,
        "round_bound_terms": {name: value for name, value in result.terms},
    }


def arm_releases(
    cfg: DictConfig,
    *,
    coding: Coding,
    key_norms: KeyNorms,
    agg_norms: AggregatorNorms | None,
    local_size: int,
    total_size: int,
) -> ArmReleases:
    """The ε of every release of a SIFL arm's rounds (the keys are fixed, so once per run); M2's round 0
    is an M1 round (see :class:`~sifl_ray.privacy.accountant.ArmReleases`)."""
    noise1, noise2 = noise_specs(cfg)
    return arm_release_epsilons(
        key_norms=key_norms,
        agg_norms=agg_norms if coding.aggregator_encodes else None,
        noise1=noise1,
        noise2=noise2 if coding.aggregator_encodes else None,
        clip=cfg.privacy.clip,
        local_size=local_size,
        total_size=total_size,
        delta=cfg.privacy.delta,
        coding=coding,
    )


def describe_arm(
    cfg: DictConfig,
    *,
    coding: Coding,
    key_norms: KeyNorms,
    agg_norms: AggregatorNorms | None,
    local_size: int,
    total_size: int,
) -> dict[str, Any]:
    """JSON-safe privacy summary of one SIFL arm: sound ε (the guarantee) and the paper's, per release.

    M2 also gets ``epsilon_*_round0``: its round 0 is an M1 round (the clients start from the server's M1
    encoding and strip no code 2), with M1's local and broadcast figures.
    """
    noise1, noise2 = noise_specs(cfg)
    common = {
        "key_norms": key_norms,
        "noise1": noise1,
        "clip": cfg.privacy.clip,
        "local_size": local_size,
        "total_size": total_size,
        "delta": cfg.privacy.delta,
    }
    info = describe_release_epsilons(
        agg_norms=agg_norms if coding.aggregator_encodes else None,
        noise2=noise2 if coding.aggregator_encodes else None,
        coding=coding,
        **common,
    )
    out: dict[str, Any] = {"mechanism": f"sifl-{cfg.coding.noise.distribution}", "delta": cfg.privacy.delta}
    for release, rel in info["releases"].items():
        out[f"epsilon_{release}"] = float(rel["epsilon"])
        out[f"epsilon_{release}_paper"] = float(rel["epsilon_paper"])
    if coding.aggregator_encodes:  # its round 0 is an M1 round
        first = describe_release_epsilons(agg_norms=None, noise2=None, coding=Coding.M1, **common)
        for release, rel in first["releases"].items():
            out[f"epsilon_{release}_round0"] = float(rel["epsilon"])
            out[f"epsilon_{release}_round0_paper"] = float(rel["epsilon_paper"])
        out["round0"] = ROUND0_NOTE
    out["scope"] = info["scope"]
    out["caveat"] = info["caveat"]
    out["neighbour_relation"] = SIFL_NEIGHBOUR_RELATION
    out["threat_model"] = SIFL_THREAT_MODEL
    clip = float(cfg.privacy.clip)
    out["conditional"] = (
        f"CONDITIONAL: each ε assumes the sensitivities 2C/|D_i| = {2 * clip / local_size:.3g} and "
        f"2C/|D| = {2 * clip / total_size:.3g} (C = {clip:g}, the paper's Remark 3), "
        "which hold only if changing one sample moves a client's clipped model by at most 2C/|D_i|; model "
        "clipping (‖w_i‖ ≤ C) does not enforce that (it bounds the move by 2C only)"
    )
    out["norms_exact"] = info["norms_exact"]
    return out


def describe_needs_data(cfg: DictConfig) -> bool:
    """Whether ``sifl describe`` must read the data set: a built-in set split IID with a built-in model is
    described from its known sizes and shape alone (no download, no files needed)."""
    from sifl_ray.models import resolve_model_factory

    known = cfg.data.name in (*INPUT_SHAPES, "synthetic") and resolve_model_factory(cfg.train.model) is None
    return not (known and cfg.data.partition == "iid")


def dataset_sizes(cfg: DictConfig, dataset: Any = None) -> tuple[int, int]:
    """(smallest client's |D_i|, |D|): the sensitivities 2C/|D_i| and 2C/|D| need the real split.

    An IID split of a built-in set is computed from the sizes alone (no data needed); any other split
    (Dirichlet, shards, natural) depends on the labels or the data's own clients, so the data set (given,
    or loaded from disk: ``sifl describe``'s pre-flight check made sure of the files,
    :mod:`sifl_ray.data.preflight`) is partitioned exactly as a run would.
    """
    if dataset is None and cfg.data.partition == "iid" and cfg.data.name in (*INPUT_SHAPES, "synthetic"):
        if cfg.data.name == "digits":
            from sklearn.datasets import load_digits

            total = len(load_digits().target)
            total -= math.ceil(total * cfg.data.test_fraction)
        elif cfg.data.name == "synthetic":
            total = cfg.synthetic.n_train
        else:
            total = TRAIN_SIZES[cfg.data.name]
        if cfg.data.limit_train:
            total = min(total, cfg.data.limit_train)
        return total // cfg.clients.num_clients, total
    from sifl_ray.runner.workload import load_data, partition

    ds = load_data(cfg, download=False) if dataset is None else dataset
    parts = partition(cfg, np.asarray(ds.y_train), ds.client_train)
    return min(len(p) for p in parts), sum(len(p) for p in parts)


def describe_scenario(cfg: DictConfig, *, progress: bool | None = None) -> dict[str, Any]:
    """Sizes, predicted decode error and ε per release of a scenario, without training (``sifl describe``).

    Its three steps (the model and the data set's sizes; key 1 of M1 and its row norms; keys 1 and 2 of
    M2 and theirs) are reported on stderr (:mod:`sifl_ray.progress`; ``progress=False`` says nothing). The
    row norms push every kernel column through the key's transform, hundreds of small passes: on one
    thread (:func:`~sifl_ray.device.single_threaded`), which gives the same figures, because on a busy
    machine torch's second thread turned seconds into a minute and more.
    """
    from sifl_ray.device import single_threaded

    with single_threaded(), Progress(f"describe {cfg.scenario}", total=3, enabled=progress) as bar:
        return _describe(cfg, bar)


def _describe(cfg: DictConfig, bar: Progress) -> dict[str, Any]:
    from sifl_ray.models import build_model, count_params, resolve_model_factory
    from sifl_ray.roles.factories import make_party_aggregator_state, make_party_server_key
    from sifl_ray.seeding import torch_generator

    from .coding import make_aggregator_key

    if cfg.data.name in (*INPUT_SHAPES, "synthetic") and resolve_model_factory(cfg.train.model) is None:
        # a built-in set and model: the shape is known; no data is loaded for an IID split
        shape = INPUT_SHAPES.get(cfg.data.name, (1, 28, 28))
        model = build_model(
            cfg.train.model, input_shape=shape, num_classes=10, generator=torch_generator(cfg.seed, "init")
        )
        local, total = dataset_sizes(cfg)
    else:  # the user's model or data: built and split exactly as a run does
        from sifl_ray.runner.workload import load_data, model_for

        dataset = load_data(cfg, download=False)
        _, model = model_for(cfg, dataset)
        local, total = dataset_sizes(cfg, dataset)
    n = count_params(model)
    w_max = max(float(p.detach().abs().max()) for p in model.parameters())
    n_tilde = n + cfg.coding.n_extra
    spec = CodingSpec.from_config(cfg)
    out: dict[str, Any] = {
        "scenario": cfg.scenario,
        "model": cfg.train.model,
        "n": n,
        "n_tilde": n_tilde,
        "n_prime": n_tilde * cfg.coding.p,
        "p": cfg.coding.p,
        "backend": cfg.coding.backend,
        "left_inverse": cfg.coding.left_inverse,
        "clients": cfg.clients.num_clients,
        "local_size": local,
        "total_size": total,
        "arms": list(cfg.arms),
        "modes": {},
    }
    bar.step(f"model ({n:,} parameters) and data set sizes")
    for coding in (Coding.M1, Coding.M2):
        role, _ = make_party_server_key(arm="describe", coding=coding, n=n, spec=spec, run_seed=cfg.seed)
        report = predict(cfg, coding=coding, n=n, w_max=w_max, key=role.key)
        agg_norms = agg_roundoff = None
        if coding.aggregator_encodes:
            state = make_party_aggregator_state(arm="describe", coding=coding, spec=spec, run_seed=cfg.seed)
            agg_key = make_aggregator_key(
                p=cfg.coding.p, gamma=cfg.coding.gamma, eta=cfg.coding.eta, seed=state["seed"]
            )
            agg_norms, agg_roundoff = agg_key.norms(), agg_key.roundoff()
        # the worker layout is the cluster's: one worker summing every client is the worst case
        bound = arm_round_bound(
            cfg,
            coding=coding,
            n=n,
            key_roundoff=role.key.roundoff(),
            aggregator_roundoff=agg_roundoff,
            clients_per_worker=cfg.clients.num_clients,
            workers=1,
            initial_norm=math.sqrt(sum(float((p.detach() ** 2).sum()) for p in model.parameters())),
        )
        priv = describe_arm(
            cfg,
            coding=coding,
            key_norms=role.key.norms(),
            agg_norms=agg_norms,
            local_size=local,
            total_size=total,
        )
        out["modes"][coding.value] = {  # sifl describe's output keeps its keys: m1, m2
            "predicted_decode_error": float(report.predicted_max_error),
            "tolerance": float(cfg.coding.precision.tolerance),
            "within_tolerance": bool(report.predicted_max_error <= cfg.coding.precision.tolerance),
            "round_bound": None if bound is None else bound["round_bound"],
            **priv,
        }
        bar.step(
            "M2: keys 1 and 2 and their row norms"
            if coding.aggregator_encodes
            else "M1: key 1 and its row norms"
        )
    m2 = out["modes"]["m2"]
    out["predicted_decode_error"] = max(v["predicted_decode_error"] for v in out["modes"].values())
    out["epsilon"] = {
        "local": m2["epsilon_local"],
        "global": m2["epsilon_global"],
        "local_paper": m2["epsilon_local_paper"],
        "global_paper": m2["epsilon_global_paper"],
        "m1_broadcast": out["modes"]["m1"]["epsilon_broadcast"],
        "local_round0": m2["epsilon_local_round0"],
        "broadcast_round0": m2["epsilon_broadcast_round0"],
    }
    out["scope"] = m2["scope"]
    return out


def format_description(info: dict[str, Any]) -> str:
    """``sifl describe``'s text: each size, bound and ε of :func:`describe_scenario` with what it means."""
    lines = [
        f"scenario {info['scenario']}: model {info['model']}, {info['clients']} clients, "
        f"|D_i| ≈ {info['local_size']}, |D| = {info['total_size']}",
        f"  n  = {info['n']:,}   (model parameters)",
        f"  ñ  = {info['n_tilde']:,}   (server code π1: ñ − n = {info['n_tilde'] - info['n']})",
        f"  n' = {info['n_prime']:,}   (aggregator code π2: ñ × p, p = {info['p']})",
        f"  coding: {info['backend']} backend, {info['left_inverse']} left inverse, float64",
    ]
    for name, m in info["modes"].items():
        ok = "ok" if m["within_tolerance"] else "EXCEEDS tolerance"
        lines.append(
            f"  SIFL {name.upper()}: estimated max decode error per round {m['predicted_decode_error']:.3e} "
            f"(tolerance {m['tolerance']:.1e}: {ok})"
        )
        if m.get("round_bound") is not None:
            lines.append(f"    rigorous float64 bound per round (2-norm, any CPU): {m['round_bound']:.3e}")
        releases = sorted(k[8:] for k in m if k.startswith("epsilon_") and not k.endswith("_paper"))
        first = [r for r in releases if r.endswith("_round0")]
        for release in [r for r in releases if r not in first] + first:
            key = f"epsilon_{release}"
            when = " (round 0: an M1 round)" if release in first else " (rounds ≥ 1)" if first else ""
            lines.append(
                f"    ε {release.removesuffix('_round0'):9s} = {m[key]:.4g} (sound)   "
                f"paper's formula: {m[key + '_paper']:.4g}{when}"
            )
    lines.append(f"  scope: {info['scope']}")
    return "\n".join(lines)
