"""The checks that span several keys of a run's configuration, run on the merged, typed configuration.

Why each check reads its component instead of naming it: an arm, a data set and a partitioner own their
rules (``Arm.problems``, ``DataSource.problems``, ``Partitioner.problems``), registered with them, so a
built-in one and a user's are checked alike and nothing here branches on a component's name. What is left
here is what no single component owns: the arms' list, the free-form arguments beside a declared section,
every client having a sample, the audit's replay, and the injected faults.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sifl_ray.config import names
from sifl_ray.config.components import ARMS, DATASETS, PARTITIONERS, arm_instances, arm_names, train_samples
from sifl_ray.config.sections import component_section
from sifl_ray.config.validation import Choice


def cross_checks(cfg: DictConfig, problems: list[str]) -> None:
    """Every check of this module except the faults' (:func:`fault_checks`)."""
    _free_form_checks(cfg, problems)
    _arm_checks(cfg, problems)
    _data_checks(cfg, problems)
    _clock_checks(cfg, problems)
    if cfg.audit.compare and cfg.audit.canaries and cfg.coding.key_seed is None:
        problems.append(
            "audit.compare: the run without canaries must draw the same secrets (sample, noise, keys) as "
            "the run with them, which needs coding.key_seed, got null; set coding.key_seed=0 (or "
            "audit.compare=false)"
        )


def _free_form_checks(cfg: DictConfig, problems: list[str]) -> None:
    """A model or data set that declared its settings section takes its arguments from there only: the same
    knob in two places would leave the reader guessing which one the run used."""
    free_form = (("model", "train.model_args", cfg.train.model), ("data set", "data.args", cfg.data.name))
    for kind, key, name in free_form:
        given = OmegaConf.select(cfg, key)
        if len(given) and component_section(kind, name) is not None:
            fields = ", ".join(f"{name}.{k}" for k in given)
            problems.append(
                f"{key}: the {kind} {name!r} takes its settings from its section {name}, got "
                f"{OmegaConf.to_container(given)}; set {fields} instead and leave {key} empty"
            )


def _arm_checks(cfg: DictConfig, problems: list[str]) -> None:

    arms = list(cfg.arms)
    for arm in arms:
        if arm not in ARMS:
            close = difflib.get_close_matches(str(arm), list(ARMS), n=1)
            tip = f"did you mean {close[0]}? " if close else ""
            problems.append(f"arms: unknown arm {arm!r}; {tip}expected a subset of {', '.join(ARMS)}")
    if not arms:
        problems.append("arms: expected at least one arm, got []; for example arms=[fl,sifl_m2]")
    if len(set(arms)) != len(arms):
        problems.append(f"arms: duplicate arm in {arms}; list each arm once")
    for kind in dict.fromkeys(arms):
        if kind in ARMS:
            problems.extend(ARMS[kind].problems(cfg))


def _data_checks(cfg: DictConfig, problems: list[str]) -> None:
    """The data set's and the partitioner's own rules, and one sample for every client."""
    data = cfg.data
    if data.name in DATASETS:
        problems.extend(DATASETS[data.name].problems(cfg))
    if data.partition in PARTITIONERS:
        problems.extend(PARTITIONERS[data.partition].problems(cfg))
    samples = train_samples(cfg)
    clients = cfg.clients.num_clients
    if samples is not None and clients > samples.count:
        problems.append(
            f"clients.num_clients: {clients} clients but only {samples.count} training samples "
            f"({samples.source}); every client needs at least one sample: lower clients.num_clients or "
            f"{samples.more}"
        )


_FAULT_KIND = Choice(lambda: names.FAULT_KINDS)
_WORKER_KINDS = ("worker_exit", "worker_kill", "straggle", "corrupt_partial")  # take faults.inject[i].worker


def _clock_checks(cfg: DictConfig, problems: list[str]) -> None:
    """The clock's rules need devices; a trace must exist; over-selection must not void a DP mean's claim."""
    clock = cfg.clock
    if clock.profile is None and clock.trace is None:
        for key in ("deadline_s", "keep", "target_accuracy"):
            if clock[key] is not None:
                problems.append(
                    f"clock.{key}: the simulated clock is off (no device profile and no trace), got "
                    f"clock.{key}={clock[key]}; set clock.profile=mobile (or equal, or a trace file in "
                    "clock.trace)"
                )
    if clock.trace is not None and not Path(str(clock.trace)).is_file():
        problems.append(
            f"clock.trace: no file {clock.trace}; give the path of a CSV or JSON device table "
            "(docs/clock.md 'Trace files')"
        )
    if clock.keep is None:
        return
    for name, kind in arm_instances(cfg).items():
        arm = ARMS[kind]
        if arm.uniform_weights and not arm.zero_out:
            problems.append(
                f"clock.keep: over-selection lets one client's upload push another's out of the sum, so one "
                f"client moves {name}'s mean by up to twice its clip, and its accountant (add/remove, "
                "sensitivity C) no longer holds; drop clock.keep and use clock.deadline_s, or an arm stated "
                "under zero-out (dp_fedavg_secagg)"
            )


def fault_checks(cfg: DictConfig, problems: list[str]) -> None:
    """Each injected fault must name something that exists in this run (see :mod:`sifl_ray.faults`)."""
    events = list(cfg.faults.inject)
    if not events:
        return
    in_process = ("corrupt_upload", "corrupt_partial")  # garbage in the data, no process dies
    killing = sorted({ev.kind for ev in events} - set(in_process))
    if killing and not names.BACKENDS[cfg.backend].capabilities.kill:
        problems.append(
            f"faults.inject: {', '.join(map(str, killing))} kill or stall a party's process, which backend "
            f"{cfg.backend} cannot (it runs every party in this process); set backend=ray "
            f"(in-process runs take only {' and '.join(in_process)})"
        )
    light = sorted({ev.kind for ev in events} & {"server_kill", "aggregator_kill", "evaluator_kill"})
    if light and cfg.ray.placement == "compact":  # the client workers keep a process each
        problems.append(
            f"ray.placement: {', '.join(map(str, light))} kill a party whose process compact placement "
            "shares with other parties; set ray.placement=separate"
        )
    arms = arm_names(cfg)
    for i, ev in enumerate(events):
        problems.extend(_event_problems(cfg, f"faults.inject[{i}]", ev, arms))
    if any(ev.kind == "straggle" for ev in events) and cfg.faults.deadline_s is None:
        problems.append(
            "faults.deadline_s: a straggle fault needs a per-round deadline, got null; "
            "set faults.deadline_s (for example faults.deadline_s=5)"
        )


def _event_problems(cfg: DictConfig, at: str, ev: DictConfig, arms: list[str]) -> list[str]:
    """What is wrong with the one injected fault ``ev`` (at ``at``) in this run."""
    kind = ev.kind
    problem = _FAULT_KIND.problem(f"{at}.kind", kind)
    if problem:
        return [problem]
    out = []
    rounds, num_clients, shards = cfg.train.rounds, cfg.clients.num_clients, cfg.ray.num_shards
    workers = min(cfg.ray.num_workers, num_clients) if cfg.ray.num_workers else num_clients
    if not 0 <= ev.round < rounds:
        out.append(
            f"{at}.round: expected a round in [0, {rounds}) (train.rounds={rounds}), got {ev.round}; "
            f"change {at}.round"
        )
    if ev.arm is not None and ev.arm not in arms:
        out.append(f"{at}.arm: expected one of {', '.join(arms)}, got {ev.arm!r}; change {at}.arm")
    if kind in _WORKER_KINDS and (ev.worker is None or not 0 <= ev.worker < workers):
        out.append(
            f"{at}.worker: expected a worker index in [0, {workers}) for {kind}, got {ev.worker!r}; "
            f"set {at}.worker"
        )
    if kind == "corrupt_upload" and (ev.client is None or not 0 <= ev.client < num_clients):
        out.append(
            f"{at}.client: expected a client id in [0, {num_clients}) for corrupt_upload, got "
            f"{ev.client!r}; set {at}.client"
        )
    out.extend(_phase_problems(cfg, at, ev, arms))
    if kind == "aggregator_kill" and not 0 <= ev.shard < shards:
        out.append(
            f"{at}.shard: expected a shard in [0, {shards}) (ray.num_shards={shards}), got {ev.shard}; "
            f"change {at}.shard"
        )
    if kind in names.FAULT_ONCE_KINDS and not cfg.checkpoint.every:
        out.append(
            f"{at}: recovering from a {kind} needs a checkpoint, but checkpoint.every=0; "
            "set checkpoint.every ≥ 1"
        )
    return out


def _phase_problems(cfg: DictConfig, at: str, ev: DictConfig, arms: list[str]) -> list[str]:
    """A phase other than ``train`` is a step of secure aggregation: a worker_exit of a masking arm."""
    if ev.phase == "train":
        return []
    if ev.kind != "worker_exit":
        return [f"{at}.phase: {ev.phase} applies to worker_exit only, got kind {ev.kind}; remove it"]
    target = ev.arm or (arms[0] if arms else None)
    kind_of = arm_instances(cfg).get(str(target))
    if kind_of is None or not ARMS[kind_of].secure_aggregation:
        return [
            f"{at}.phase: {ev.phase} is a step of secure aggregation, but arm {target!r} does not mask its "
            f"uploads; set {at}.arm to a secure-aggregation arm (secagg, dp_fedavg_secagg) or remove the "
            "phase"
        ]
    return []
