"""``sifl describe``: what a scenario costs and promises before any training (sizes, decode error, ε).

The figures are the runner's own: the precision claims and ε of :mod:`sifl_ray.arms.sifl_figures` for the
keys the parties would make (:func:`~sifl_ray.parties.server.make_server`), on the model and client sizes a
run would have. A built-in data set split IID with a built-in model is described from its known sizes and
shape (no data read); anything else is loaded and split as a run does (:mod:`sifl_ray.runner.workload`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.arms.sifl_figures import arm_round_bound, describe_arm, predict
from sifl_ray.coding import make_aggregator_key
from sifl_ray.device import single_threaded
from sifl_ray.models import build_model, count_params, resolve_model_factory
from sifl_ray.parties.aggregator import make_aggregator_state
from sifl_ray.parties.server import make_server
from sifl_ray.progress import Progress
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding, CodingSpec

INPUT_SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28)}
TRAIN_SIZES = {"mnist": 60000, "fashion_mnist": 60000}


def describe_needs_data(cfg: DictConfig) -> bool:
    """Whether ``sifl describe`` must read the data set: a built-in set split IID with a built-in model is
    described from its known sizes and shape alone (no download, no files needed)."""
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
    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.runner.workload import load_data, partition

    ds = load_data(cfg, download=False) if dataset is None else dataset
    parts = partition(cfg, np.asarray(ds.y_train), ds.client_train)
    return min(len(p) for p in parts), sum(len(p) for p in parts)


def describe_scenario(cfg: DictConfig, *, progress: bool | None = None) -> dict[str, Any]:
    """Sizes, predicted decode error and ε per release of a scenario, without training (``sifl describe``).

    Its three steps (the model and the data set's sizes; key 1 of M1 and its row norms; keys 1 and 2 of
    M2 and theirs) are reported on stderr (:mod:`sifl_ray.progress`; ``progress=False`` says nothing). The
    row norms push every kernel column through the key's transform, hundreds of small passes that a second
    thread does not speed up and contention on a busy machine slows down: they run on one thread
    (:func:`~sifl_ray.device.single_threaded`), which gives the same figures.
    """
    with single_threaded(), Progress(f"describe {cfg.scenario}", total=3, enabled=progress) as bar:
        return _describe(cfg, bar)


def _describe(cfg: DictConfig, bar: Progress) -> dict[str, Any]:
    model, local, total = _model_and_sizes(cfg)
    n = count_params(model)
    n_tilde = n + cfg.coding.n_extra
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
        # sifl describe's output keeps its keys: m1, m2
        out["modes"][coding.value] = _describe_mode(cfg, coding, model, local=local, total=total)
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


def _model_and_sizes(cfg: DictConfig) -> tuple[torch.nn.Module, int, int]:
    """The run's initial model and (smallest |D_i|, |D|)."""
    if cfg.data.name in (*INPUT_SHAPES, "synthetic") and resolve_model_factory(cfg.train.model) is None:
        # a built-in set and model: the shape is known; no data is loaded for an IID split
        shape = INPUT_SHAPES.get(cfg.data.name, (1, 28, 28))
        model = build_model(
            cfg.train.model, input_shape=shape, num_classes=10, generator=torch_generator(cfg.seed, "init")
        )
        local, total = dataset_sizes(cfg)
        return model, local, total
    # the user's model or data: built and split exactly as a run does
    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.runner.workload import load_data, model_for

    dataset = load_data(cfg, download=False)
    _, model = model_for(cfg, dataset)
    local, total = dataset_sizes(cfg, dataset)
    return model, local, total


def _describe_mode(
    cfg: DictConfig, coding: Coding, model: torch.nn.Module, *, local: int, total: int
) -> dict[str, Any]:
    """One SIFL mode's decode error, round bound and ε, from the keys its parties would make."""
    spec = CodingSpec.from_config(cfg)
    n = count_params(model)
    w_max = max(float(p.detach().abs().max()) for p in model.parameters())
    role, _ = make_server(arm="describe", coding=coding, n=n, spec=spec)
    report = predict(cfg, coding=coding, n=n, w_max=w_max, key=role.key)
    agg_norms = agg_roundoff = None
    if coding.aggregator_encodes:
        state = make_aggregator_state(arm="describe", coding=coding, spec=spec)
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
    return {
        "predicted_decode_error": float(report.predicted_max_error),
        "tolerance": float(cfg.coding.precision.tolerance),
        "within_tolerance": bool(report.predicted_max_error <= cfg.coding.precision.tolerance),
        "round_bound": None if bound is None else bound["round_bound"],
        **priv,
    }


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
