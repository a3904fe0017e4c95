"""What the driver holds between rounds, and how it survives a crash: checkpoint, restore, resume.

Between rounds the driver holds, per arm, a reference to the next broadcast
(:class:`~sifl_ray.round.ArmState`) and its own records (:class:`DriverState`); the keys stay with the
parties. A checkpoint is the three of them: the server writes the broadcasts, the driver its records, and
each party keeps its key in its own file (written once, when the key is made). A restore (a party died)
or a resume (the driver died) reads them back: the parties take their keys back from their files, the
server the broadcasts, the driver its records. The file format, atomic writes and checksums are
:mod:`sifl_ray.checkpoint`'s.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from sifl_ray.arms import arm_names, arm_of
from sifl_ray.backends import Backend
from sifl_ray.checkpoint import (
    DRIVER_FILE,
    MANIFEST,
    SERVER_FILE,
    CheckpointError,
    CheckpointRef,
    CheckpointStore,
    key_file,
    load_party_key,
    read_checkpoint_file,
    save_party_key,
    write_checkpoint_file,
)
from sifl_ray.config import load_run_config
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.checks import shard_bounds
from sifl_ray.parties.handle import Handle, PartyLost, collect
from sifl_ray.parties.server import ServerHost
from sifl_ray.party_seeds import party_seed
from sifl_ray.round import ArmState
from sifl_ray.runner.driver import DriverState as DriverState
from sifl_ray.runner.driver import config_sha
from sifl_ray.runner.parties import say
from sifl_ray.specs import Coding, CodingSpec


def arm_shape(cfg: DictConfig, arm: str, n: int) -> tuple[Coding, int, list[tuple[int, int]]]:
    """``(coding, ñ, shard bounds)`` of ``arm`` for a model of ``n`` parameters."""
    coding = arm_of(cfg, arm).coding
    n_tilde = n + cfg.coding.n_extra if coding.coded else n
    return coding, n_tilde, shard_bounds(n_tilde, cfg.ray.num_shards)


def default_key_dir(cfg: DictConfig, run_dir: Path) -> Path:
    """Where the parties keep their key files: ``checkpoint.key_dir``, else ``<run_dir>/../.keys/<run>``.

    Why not inside the run folder: a run folder (TensorBoard, summary, encoded checkpoints) is meant to be
    shared; the keys are each party's secret and stay apart, in a 0700 folder, one 0600 file per party.
    """
    if cfg.checkpoint.key_dir:
        return Path(cfg.checkpoint.key_dir) / Path(run_dir).name
    return Path(run_dir).parent / ".keys" / Path(run_dir).name


def _key_dir_of(ckpt: CheckpointRef, run_dir: Path) -> Path:
    """The key folder a checkpoint names, relative to its run folder (a run folder moved together with its
    ``.keys`` sibling still resumes)."""
    return (Path(run_dir) / ckpt.manifest["key_dir"]).resolve()


def is_checkpoint_error(err: BaseException) -> bool:
    """A :class:`CheckpointError`, also one an actor raised (Ray wraps it)."""
    return isinstance(err, CheckpointError) or "CheckpointError" in f"{type(err).__name__}{err}"


# ------------------------------------------------------------------------------------------------ resume
@dataclass(frozen=True)
class ResumePoint:
    """What :func:`open_resume` verified: the checkpoint (``None``: none yet, start over with the saved
    keys), the driver's state in it, and the parties' key folder."""

    checkpoint: CheckpointRef | None
    state: dict | None
    key_dir: str | None


def open_resume(path: str | Path) -> tuple[DictConfig, Path, ResumePoint]:
    """The configuration, run folder and resume point of the run in ``path`` (a run folder, or one of its
    ``checkpoints/round-*`` folders).

    Verifies what the driver may read (the saved configuration, the manifest, the driver's state) and that
    every key file exists; the broadcasts and the keys themselves are verified by the server and aggregator
    actors, which alone may read them. Nothing is written.

    Raises:
        CheckpointError: nothing to resume from, or a file is missing, truncated or corrupted.
    """
    path = Path(path)
    explicit = (path / MANIFEST).exists() or path.name.startswith("round-")
    run_dir = path.parent.parent if explicit else path
    if not (run_dir / "config.yaml").exists():
        raise CheckpointError(f"{run_dir}: not a run folder (no config.yaml)")
    config_text = (run_dir / "config.yaml").read_text()
    cfg = load_run_config(run_dir / "config.yaml")
    store = CheckpointStore(run_dir, keep=cfg.checkpoint.keep)
    ckpt = store.open(path) if explicit else store.latest()
    state = None
    if ckpt is not None:
        files = ckpt.manifest.get("files", {})
        state = read_checkpoint_file(ckpt.driver_file, expect_sha256=files.get(DRIVER_FILE))
        if not isinstance(state, dict) or state.get("format") != 1:
            raise CheckpointError(f"{ckpt.driver_file}: not a driver state of this format")
        if state.get("config_sha256") != config_sha(config_text):
            raise CheckpointError(
                f"{run_dir / 'config.yaml'}: changed since the checkpoint was taken; restore it "
                "(a resumed run must have the configuration it started with)"
            )
        if state.get("arms") != arm_names(cfg):
            raise CheckpointError(f"{ckpt.driver_file}: arms {state.get('arms')} ≠ {arm_names(cfg)}")
    elif not cfg.checkpoint.every:
        raise CheckpointError(f"{run_dir}: nothing to resume from (the run had checkpoint.every=0)")
    key_dir = _key_dir_of(ckpt, run_dir) if ckpt is not None else default_key_dir(cfg, run_dir)
    if ckpt is None and not key_dir.exists():  # what an interrupt before the first saved round leaves
        raise CheckpointError(
            f"{run_dir}: nothing to resume: the run stopped before any round was saved, and its key folder "
            f"{key_dir} is gone (an interrupt before the first checkpoint removes it); start the run again"
        )
    for arm in arm_names(cfg):  # existence only: the driver never opens another party's key file
        needed = ["server", "aggregator"] if arm_of(cfg, arm).coding.coded else ["aggregator"]
        for party in needed:
            if not key_file(key_dir, party, arm).exists():
                raise CheckpointError(
                    f"{key_file(key_dir, party, arm)}: missing; the {party}'s key of {arm} cannot be restored"
                )
    return cfg, run_dir, ResumePoint(ckpt, state, str(key_dir))


def broadcast_codings(driver: dict, states: dict[str, ArmState]) -> dict[str, Coding]:
    """Each arm's broadcast coding at a checkpoint (:attr:`~sifl_ray.round.ArmState.broadcast_coding`): as
    the driver's file records it (its value, ``"m1"``), or in a file written before it did, as the driver's
    history implies: an M2 arm broadcasts in M1 until a round accepted an update (the rule the accountant's
    round-0 releases follow, :meth:`sifl_ray.runner.recorder.Recorder.round`)."""
    saved = driver.get("broadcast_codings")
    if saved is not None:
        return {arm: Coding.of(saved[arm]) for arm in states}
    history = driver.get("history", {})
    return {
        arm: state.coding
        if any(r.get("clients/accepted", 1) > 0 for r in history.get(arm, []))
        else state.coding.first_broadcast
        for arm, state in states.items()
    }


# ------------------------------------------------------------------------------------------------ checkpoints
class Checkpoints:
    """The run's checkpoints and key folder, and the calls that save and restore what the parties hold.

    The driver passes paths and references only: the server reads and writes the broadcasts, each party
    its key file.
    """

    def __init__(self, cfg: DictConfig, *, run_dir: Path, key_dir: Path, arms: list[str]):
        self.cfg = cfg
        self.arms = list(arms)
        self.run_dir = Path(run_dir)
        self.key_dir = Path(key_dir)
        self.store = CheckpointStore(self.run_dir, keep=cfg.checkpoint.keep)
        self.coding_spec = CodingSpec.from_config(cfg)  # what the server and aggregator parties are told

    def due(self, t: int) -> bool:
        """Whether round ``t`` ends with a checkpoint (every ``checkpoint.every`` rounds, and the last)."""
        every = self.cfg.checkpoint.every
        return bool(every) and ((t + 1) % every == 0 or t == self.cfg.train.rounds - 1)

    def make_key_dir(self) -> None:
        """The parties' key folder, mode 0700 (and its ``.keys`` parent); only when checkpointing is on."""
        if self.cfg.checkpoint.every:
            self.key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.key_dir.chmod(0o700)
            if self.key_dir.parent.name == ".keys":
                self.key_dir.parent.chmod(0o700)

    def kept_key_dir(self) -> str | None:
        """The key folder when the parties keep their secrets in files (``None``: checkpointing is off)."""
        return str(self.key_dir) if self.cfg.checkpoint.every else None

    def sampler_seed(self) -> bytes:
        """The secret seed each round's sample of clients is drawn from.

        The server samples (the driver plays that part here), and the sample must be its secret: the
        accountant's amplification by sampling assumes the adversary does not know who took part, and a
        sample drawn from the run seed, which ``config.yaml`` prints, is known to anyone who reads it
        (docs/method.md "Amplification by sampling needs a secret sample"). Like every party secret it is
        derived from ``coding.key_seed`` when that is set (reproducible, not secret), else secure random, kept
        in the key folder (``sampler-run.key``) so that a resumed run draws the samples it drew before.
        """
        return self._driver_secret("sampler")

    def auditor_seed(self) -> bytes:
        """The auditor's secret seed (simulation only): the canaries' directions and which are inserted.
        Kept like the sampler's, so that a resumed run audits the same canaries."""
        return self._driver_secret("auditor")

    def _driver_secret(self, party: str) -> bytes:
        """A secret of a party the driver plays (the sampler, the auditor): derived from
        ``coding.key_seed`` when set, else secure random and kept in ``<party>-run.key``."""
        if self.cfg.coding.key_seed is not None:
            return party_seed(self.cfg.coding.key_seed, "run", party)
        path = self.key_path(party, "run")
        if path is not None and Path(path).exists():
            return bytes(load_party_key(path, party=party, arm="run")["state"]["seed"])
        seed = party_seed(None, "run", party)
        if path is not None:
            save_party_key(path, party=party, arm="run", mode="driver", state={"seed": seed})
        return seed

    def key_path(self, party: str, arm: str) -> str | None:
        """The key file of ``party`` in ``arm`` (``None``: checkpointing is off, keys live in memory only)."""
        return str(key_file(self.key_dir, party, arm)) if self.cfg.checkpoint.every else None

    def restore_keys(
        self,
        backend: Backend,
        server: Handle[ServerHost],
        aggregators: list[Handle[AggregatorHost]],
        n: int,
        which: tuple[str, ...] = ("server", "aggregator"),
    ) -> None:
        """The server and the aggregator shards (``which``: ``server``, ``aggregator`` for every shard, or
        ``aggregator<s>``) take their keys back from their own key files, which only they read."""
        cfg = self.cfg
        done = []
        for arm in self.arms:
            coding, _, bounds = arm_shape(cfg, arm, n)
            if "server" in which:
                done.append(
                    server.call(
                        ServerHost.restore_arm,
                        arm,
                        coding=coding,
                        n=n,
                        spec=self.coding_spec,
                        key_path=self.key_path("server", arm),
                    )
                )
            for s, a in enumerate(aggregators[: len(bounds)]):
                if "aggregator" in which or f"aggregator{s}" in which:
                    done.append(
                        a.call(
                            AggregatorHost.restore_arm,
                            arm,
                            coding=coding,
                            spec=self.coding_spec,
                            key_path=self.key_path("aggregator", arm),
                            bounds=bounds[s],
                            shard=s,
                        )
                    )
        backend.get_all(done)

    def load_broadcasts(
        self,
        backend: Backend,
        server: Handle[ServerHost],
        states: dict[str, ArmState],
        w0: torch.Tensor,
        ckpt: CheckpointRef | None,
    ) -> None:
        """Every arm's broadcast from checkpoint ``ckpt`` (read and verified by the server, which keeps it
        until asked for it by reference), or the initial broadcast when there is no checkpoint yet."""
        for arm in self.arms:
            if arm not in states:
                coding, n_tilde, bounds = arm_shape(self.cfg, arm, int(w0.numel()))
                states[arm] = ArmState(name=arm, coding=coding, n_tilde=n_tilde, bounds=bounds)
        if ckpt is None:
            for arm in self.arms:
                states[arm].broadcast = server.call(ServerHost.initial_broadcast, arm, backend.put(w0))
                states[arm].broadcast_coding = states[arm].coding.first_broadcast
            return
        sha = ckpt.manifest.get("files", {}).get(SERVER_FILE)
        status = server.call(ServerHost.load_broadcasts, str(ckpt.server_file), sha, self.arms)
        collect(backend, status, "server", 0, arm=self.arms[0], t=ckpt.round)  # raises if the file is bad
        codings = broadcast_codings(self.driver_state(ckpt) or {}, states)
        for arm in self.arms:
            loaded = server.call(ServerHost.loaded_broadcast, arm)
            states[arm].broadcast, states[arm].broadcast_coding = loaded, codings[arm]

    def driver_state(self, ckpt: CheckpointRef | None) -> dict | None:
        """The driver's file of ``ckpt``, verified (``None`` when there is no checkpoint yet)."""
        if ckpt is None:
            return None
        return read_checkpoint_file(ckpt.driver_file, expect_sha256=ckpt.manifest["files"][DRIVER_FILE])

    def save(
        self,
        t: int,
        backend: Backend,
        server: Handle[ServerHost],
        states: dict[str, ArmState],
        driver: DriverState,
    ) -> None:
        """End of round ``t``: the server saves the broadcasts, the driver its state, then the manifest.

        A checkpoint that cannot be written (disk full, a folder gone) does not stop the run: it says so,
        and the previous complete checkpoint stays the one a restore or a resume would use.

        Raises:
            PartyLost: the server died.
        """
        try:
            self._write(t, backend, server, states, driver)
        except PartyLost:
            raise
        except (OSError, CheckpointError) as err:
            last = self.store.available()
            driver.incidents.append(
                {"round": t, "arm": None, "what": f"checkpoint not written: {err}", "action": "run continues"}
            )
            say(
                f"round {t}: the checkpoint could not be written ({err}); the run continues, the last "
                f"complete checkpoint is {last[-1] if last else 'none'}"
            )

    def _write(
        self,
        t: int,
        backend: Backend,
        server: Handle[ServerHost],
        states: dict[str, ArmState],
        driver: DriverState,
    ) -> None:
        tic = time.perf_counter()
        staging = self.store.begin(t)
        refs = [states[arm].broadcast for arm in self.arms]
        sha = server.call(ServerHost.save_broadcasts, str(staging / SERVER_FILE), t, self.arms, *refs)
        server_sha = collect(backend, sha, "server", 0, arm=self.arms[0], t=t)
        driver.checkpoint_s.append(0.0)  # this checkpoint's own time is known only once it is written
        payload = driver.payload(t, self.cfg)
        payload["broadcast_codings"] = {arm: states[arm].broadcast_coding.value for arm in self.arms}
        driver_sha = write_checkpoint_file(staging / DRIVER_FILE, payload)
        self.store.commit(
            staging,
            t,
            arms=self.arms,
            files={SERVER_FILE: server_sha, DRIVER_FILE: driver_sha},
            key_dir=os.path.relpath(self.key_dir.resolve(), self.run_dir.resolve()),
        )
        driver.checkpoint_s[-1] = time.perf_counter() - tic
