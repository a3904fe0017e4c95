"""``sifl describe``: what a scenario costs and promises before any training: sizes, the split over the
clients, and every arm's figures.

The figures are the runner's own: for a SIFL arm, the precision claims and ε of
:mod:`sifl_ray.arms.sifl_figures` for the keys the parties would make
(:func:`~sifl_ray.parties.server.make_server`), on the model and client sizes a run would have; for every
other arm, its own privacy report (:meth:`~sifl_ray.arms.Arm.privacy`: DP-FedAvg's noise multiplier
calibrated per ε, NbAFL's σ, secure aggregation's ring and threshold), as a run computes it. The split is
the run's (:mod:`sifl_ray.runner.workload`): each client's size and label histogram where the data is at
hand (a built-in set, files on disk); a built-in set whose files are not here is described from its known
sizes and shape, without the labels.
"""

from __future__ import annotations

import math
import shutil
import textwrap
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.arms import ArmContext, arm_of
from sifl_ray.arms.secagg import ring_report, round_threshold
from sifl_ray.arms.sifl_figures import arm_round_bound, describe_arm, predict
from sifl_ray.coding import ServerKey, make_aggregator_key
from sifl_ray.config import arm_names
from sifl_ray.data import DatasetError
from sifl_ray.data.partition import partition_report
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
    """Sizes, the split, and every arm's figures of a scenario, without training (``sifl describe``).

    Its steps (the model, the data set and its split; key 1 of M1 and its row norms, keys 1 and 2 of M2 and
    theirs, for the SIFL modes the arms use; the other arms' reports) are reported on stderr
    (:mod:`sifl_ray.progress`; ``progress=False`` says nothing). The row norms push every kernel column
    through the key's transform, hundreds of small passes that a second thread does not speed up and
    contention on a busy machine slows down: they run on one thread
    (:func:`~sifl_ray.device.single_threaded`), which gives the same figures.
    """
    modes = sifl_modes(cfg)
    with (
        single_threaded(),
        Progress(f"describe {cfg.scenario}", total=2 + len(modes), enabled=progress) as bar,
    ):
        return _describe(cfg, modes, bar)


def sifl_modes(cfg: DictConfig) -> list[Coding]:
    """The SIFL codings the scenario's arms use, M1 before M2 (none: no SIFL figures to compute)."""
    used = {arm_of(cfg, arm).coding for arm in arm_names(cfg)}
    return [c for c in (Coding.M1, Coding.M2) if c in used]


def _describe(cfg: DictConfig, modes: list[Coding], bar: Progress) -> dict[str, Any]:
    model, split = _model_and_split(cfg)
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
        "local_size": split["size_min"],
        "total_size": split["total"],
        "partition": split,
        "arms": list(cfg.arms),
        "modes": {},
    }
    bar.step(f"model ({n:,} parameters) and the split over {cfg.clients.num_clients} clients")
    # One key 1 for both modes: it is made from the coding section and the seed of the party "describe",
    # never from the mode (with coding.key_seed set, M1's and M2's were the same key; unset, one draw of
    # the same law serves both), and its row norms, most of describe's time on the paper's models, are
    # cached on it: computed once.
    spec = CodingSpec.from_config(cfg)
    key = make_server(arm="describe", coding=modes[0], n=n, spec=spec)[0].key if modes else None
    for coding in modes:
        assert key is not None
        # sifl describe's output keeps its keys: m1, m2
        out["modes"][coding.value] = _describe_mode(
            cfg, coding, model, key, local=split["size_min"], total=split["total"]
        )
        bar.step(
            "M2: keys 1 and 2 and their row norms"
            if coding.aggregator_encodes
            else "M1: key 1 and its row norms"
        )
    out["arm_figures"] = describe_arms(cfg, n=n, split=split)
    bar.step("every arm's figures")
    if modes:
        out.update(_sifl_summary(out["modes"]))
    return out


def _sifl_summary(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The SIFL figures a reader looks for first: the largest predicted decode error and the ε per element
    of each release (M2's where the arms have it, M1's broadcast beside it)."""
    eps: dict[str, Any] = {}
    if "m2" in modes:
        m2 = modes["m2"]
        eps.update(
            local=m2["epsilon_local"],
            local_paper=m2["epsilon_local_paper"],
            local_round0=m2["epsilon_local_round0"],
            broadcast_round0=m2["epsilon_broadcast_round0"],
            **{"global": m2["epsilon_global"], "global_paper": m2["epsilon_global_paper"]},
        )
    if "m1" in modes:
        m1 = modes["m1"]
        eps["m1_broadcast"] = m1["epsilon_broadcast"]
        eps.setdefault("local", m1["epsilon_local"])
        eps.setdefault("local_paper", m1["epsilon_local_paper"])
    return {
        "predicted_decode_error": max(v["predicted_decode_error"] for v in modes.values()),
        "epsilon": eps,
        "scope": next(iter(modes.values()))["scope"],
    }


def describe_arms(cfg: DictConfig, *, n: int, split: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every concrete arm's figures, as its own privacy report gives them for this run's sizes: a SIFL arm
    points to its mode's figures; DP-FedAvg gives its noise multiplier z and the noise's σ per ε, NbAFL its
    σ, secure aggregation its threshold and the sizes of its ring and uploads; an arm that claims nothing
    says so."""
    sizes = {"local_size": split["size_min"], "total_size": split["total"], "largest_size": split["size_max"]}
    out = {}
    for arm in arm_names(cfg):
        protocol = arm_of(cfg, arm)
        if protocol.coding.coded:
            out[arm] = {
                "mechanism": f"sifl-{protocol.coding.value}",
                "figures": f"modes.{protocol.coding.value}",
            }
            continue
        report = protocol.privacy(ArmContext(cfg=cfg, arm=arm, n=n, **sizes)) or {}
        figures: dict[str, Any] = {"mechanism": report.get("mechanism", "none")}
        for key in ("epsilon", "delta", "noise_multiplier", "sigma", "clip", "num_noisers", "sample_rate"):
            if report.get(key) is not None:
                figures[key] = report[key]
        if "noise_multiplier" in report:  # σ of the noise on the mean update: zC / (qN)
            expected = float(cfg.clients.fraction) * int(cfg.clients.num_clients)
            figures["sigma_mean_update"] = report["noise_multiplier"] * report["clip"] / expected
            if "num_noisers" in report:  # each client's share: N(0, (zC)²/t)
                figures["sigma_client_share"] = (
                    report["noise_multiplier"] * report["clip"] / math.sqrt(report["num_noisers"])
                )
        if protocol.secure_aggregation:
            ring = {k: report[k] for k in ring_report(cfg, clip=1.0) if k in report}
            figures.update(ring, threshold=round_threshold(cfg))
            figures["upload_bytes"] = n * int(ring["ring_bits"]) // 8
        if report.get("neighbour_relation"):
            figures["neighbour_relation"] = report["neighbour_relation"]
        out[arm] = figures
    return out


def _model_and_split(cfg: DictConfig) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The run's initial model and the split of its training set: each client's size and labels where the
    data is at hand, else (a built-in set not on disk, split IID) the sizes alone."""
    known = cfg.data.name in (*INPUT_SHAPES, "synthetic") and resolve_model_factory(cfg.train.model) is None
    # deferred: scipy, which this module does not load otherwise
    from sifl_ray.runner.workload import load_data, model_for, partition

    try:
        dataset = load_data(cfg, download=False)
    except DatasetError:
        if not (known and cfg.data.partition == "iid"):
            raise
        dataset = None
    if dataset is None:  # a built-in set and model, not on disk: the shape and sizes are known
        shape = INPUT_SHAPES.get(cfg.data.name, (1, 28, 28))
        model = build_model(
            cfg.train.model, input_shape=shape, num_classes=10, generator=torch_generator(cfg.seed, "init")
        )
        _, total = dataset_sizes(cfg)
        clients = int(cfg.clients.num_clients)
        sizes = [total // clients + (1 if i < total % clients else 0) for i in range(clients)]
        split = {"scheme": "iid", "clients": clients, "sizes": sizes, "size_min": min(sizes)}
        split.update(size_median=float(np.median(sizes)), size_max=max(sizes), label_histogram=None)
        return model, {**split, "total": total}
    _, model = model_for(cfg, dataset)
    parts = partition(cfg, np.asarray(dataset.y_train), dataset.client_train)
    report = partition_report(
        parts, np.asarray(dataset.y_train), int(dataset.num_classes), scheme=str(cfg.data.partition)
    )
    return model, {**report, "total": int(sum(report["sizes"]))}


def _describe_mode(
    cfg: DictConfig, coding: Coding, model: torch.nn.Module, key: ServerKey, *, local: int, total: int
) -> dict[str, Any]:
    """One SIFL mode's decode error, round bound and ε, from the keys its parties would make (``key``: the
    server's key 1, :func:`~sifl_ray.parties.server.make_server`'s)."""
    spec = CodingSpec.from_config(cfg)
    n = count_params(model)
    w_max = max(float(p.detach().abs().max()) for p in model.parameters())
    report = predict(cfg, coding=coding, n=n, w_max=w_max, key=key)
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
        key_roundoff=key.roundoff(),
        aggregator_roundoff=agg_roundoff,
        clients_per_worker=cfg.clients.num_clients,
        workers=1,
        initial_norm=math.sqrt(sum(float((p.detach() ** 2).sum()) for p in model.parameters())),
    )
    priv = describe_arm(
        cfg,
        coding=coding,
        key_norms=key.norms(),
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
    """``sifl describe``'s text: each size, the split, every arm's figures and (for SIFL arms) each bound
    and ε of :func:`describe_scenario`, with what it means."""
    lines = [
        f"scenario {info['scenario']}: model {info['model']}, {info['clients']} clients, "
        f"|D| = {info['total_size']}",
        f"  n  = {info['n']:,}   (model parameters)",
    ]
    if info["modes"]:
        lines += [
            f"  ñ  = {info['n_tilde']:,}   (server code π1: ñ − n = {info['n_tilde'] - info['n']})",
            f"  n' = {info['n_prime']:,}   (aggregator code π2: ñ × p, p = {info['p']})",
            f"  coding: {info['backend']} backend, {info['left_inverse']} left inverse, float64",
        ]
    lines += format_split(info["partition"])
    lines.append("arms:")
    width = shutil.get_terminal_size((100, 24)).columns
    for arm, figures in info["arm_figures"].items():
        lines.append(textwrap.fill(f"  {arm}: {format_arm(figures)}", width, subsequent_indent="      "))
    if info["modes"]:
        lines.append('SIFL, per element and round (docs/method.md "Differential privacy"):')
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
    if info.get("scope"):
        lines.append(f"  SIFL's ε scope: {info['scope']}")
    return "\n".join(lines)


def format_split(split: dict[str, Any], *, rows: int = 20) -> list[str]:
    """The split over the clients: sizes (smallest, median, largest), the classes each holds, and per client
    its size and label histogram where there are at most ``rows`` clients (all of them: ``--json``)."""
    lines = [
        f"split ({split['scheme']}): |D_i| from {split['size_min']} to {split['size_max']} "
        f"(median {split['size_median']:g}); the smallest sets the record-level sensitivities"
    ]
    histogram = split.get("label_histogram")
    if histogram is None:
        lines.append("  labels per client: the data set's files are not here (sizes from the set's own size)")
        return lines
    lines.append(
        f"  classes per client: {split['classes_per_client_min']} to {split['classes_per_client_max']} "
        f"of {len(histogram[0])}"
    )
    if len(histogram) <= rows:
        width = max(len(str(c)) for row in histogram for c in row)
        head = " ".join(str(c).rjust(width) for c in range(len(histogram[0])))
        lines.append(f"  client  |D_i|  samples of class {head}")
        for i, (size, row) in enumerate(zip(split["sizes"], histogram, strict=True)):
            counts = " ".join(str(c).rjust(width) for c in row)
            lines.append(f"  {i:>6}  {size:>5}  {'':16} {counts}")
    else:
        lines.append("  per client: sifl describe --json (partition), and summary.json after a run")
    return lines


def format_arm(figures: dict[str, Any]) -> str:
    """One arm's figures on a line: a SIFL arm's mode (its figures below), a DP arm's ε, δ and noise, secure
    aggregation's threshold and sizes, or no claim."""
    if "figures" in figures:
        return f"immersion coding {figures['mechanism'][-2:]}: its per-element ε and precision below"
    said = []
    if "epsilon" in figures:
        said.append(f"ε = {figures['epsilon']:.4g}, δ = {figures['delta']:g} (the whole model)")
    if "noise_multiplier" in figures:
        said.append(
            f"noise multiplier z = {figures['noise_multiplier']:.4g}, C = {figures['clip']:g}, "
            f"σ on the mean update = {figures['sigma_mean_update']:.4g}"
        )
    if "sigma_client_share" in figures:
        said.append(
            f"each client's share σ = {figures['sigma_client_share']:.4g} "
            f"(s = {figures['num_noisers']} noise shares)"
        )
    if "sigma" in figures:
        said.append(f"σ = {figures['sigma']:.4g} on each clipped model (C = {figures['clip']:g})")
    if "threshold" in figures:
        said.append(
            f"secure aggregation: threshold t = {figures['threshold']} of {figures['graph_degree'] + 1} per "
            f"neighbourhood, ring 2^{figures['ring_bits']} ({figures['frac_bits']} fraction bits), "
            f"{figures['upload_bytes']:,} bytes per masked upload"
        )
    return "; ".join(said) or "no privacy claimed"
