"""Client workers: many virtual clients per process, local training on the encoded global model.

A client worker hosts many virtual clients and trains them one after the other on one model object, or,
where it can, all together on stacked parameters (:mod:`sifl_ray.optim.vectorised`: the same minibatches,
optimizer states and uploads, equal to round-off; ``train.vectorise``). For a SIFL arm each client starts
from the encoded broadcast ``w~^t`` (in M2 after stripping code 2 with ``P2R``), runs the target optimizer
(fused: decode once, K ordinary steps, encode the change once; stepwise: the paper's per-step form) and
uploads ``w~_i^{t+1}``. The worker then plays the first, keyless half of the aggregator: it checks every
upload and adds it to a weighted running sum, one partial per aggregator shard. Each upload goes through
the stages of :mod:`sifl_ray.parties.upload`; secure aggregation only changes the last one (the sum is
masked, :mod:`sifl_ray.parties.secure`).

On a GPU everything a worker computes stays on it (model, minibatches, key views, the float64 sums); the
broadcast comes in and the partial sums go out once per round (:mod:`sifl_ray.device`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sifl_ray.arms.steps import Clip, for_canaries
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, ClientServerKey
from sifl_ray.data import client_batches
from sifl_ray.device import HostStaging, SampleStore, on_device, resolve_device
from sifl_ray.faults import WorkerFaults
from sifl_ray.optim import TorchTrainer, fused_update, loss_values, stepwise_update, vectorised
from sifl_ray.optim.target import fused_tail, step_metrics
from sifl_ray.parties.canaries import WorkerAudit, aggregator_reading
from sifl_ray.parties.checks import check_upload
from sifl_ray.parties.handle import returns
from sifl_ray.parties.messages import ArmSetup, MaskedTrained, Trained, UnmaskCosts, Unmasked, WorkerReport
from sifl_ray.parties.process import (
    Host,
    initial_model,
    memory,
    pick_device,
    placement,
    prepare_process,
    reset_peak_memory,
)
from sifl_ray.parties.upload import Accumulator, Local, PlainSum, RoundStart, add_sums, all_finite, count_step
from sifl_ray.specs import Coding, ModelSpec, TrainSpec

if TYPE_CHECKING:  # imported where a secure arm is set up: ``cryptography`` costs ~13 MiB in each process
    from sifl_ray.parties.secure import RoundPublic, WorkerSecAgg
    from sifl_ray.privacy.secagg import PublicKeys


@dataclass(frozen=True)
class LocalTraining:
    """How every client trains locally in a round (the same for every arm, so that the arms see the same
    minibatches)."""

    batch_size: int
    local_epochs: int
    local_steps: int
    seed: int
    skip_training: bool = False
    vectorise: bool = True  # clients trained together where they can be (sifl_ray.optim.vectorised)


class ClientWorker(Host):
    """Hosts the virtual clients ``partitions`` (client id → sample indices) of one worker.

    Args:
        device: where the clients train and encode; the trainer's model must already live there.
        stage_data: copy the worker's samples to ``device`` once (default: on any device but the CPU;
            see :class:`sifl_ray.device.SampleStore`).
        materialize: encode every upload on its own (slower; ``ray.materialize_uploads``), instead of the
            shortcut of :mod:`sifl_ray.parties.upload`.

    Raises:
        ValueError: ``device`` cannot hold a computation (:func:`sifl_ray.device.resolve_device`), or the
            trainer's model lives elsewhere.
    """

    def __init__(
        self,
        *,
        worker: int,
        x_train: np.ndarray,
        y_train: np.ndarray,
        partitions: dict[int, np.ndarray],
        trainer: TorchTrainer,
        training: LocalTraining,
        device: torch.device | str,
        stage_data: bool | None = None,
        materialize: bool = False,
    ):
        self.worker = worker
        self.device = resolve_device(device)
        model_device = next(trainer.model.parameters()).device
        if model_device != self.device and not (
            model_device.type == self.device.type == "cuda" and self.device.index is None
        ):
            raise ValueError(
                f"worker {worker}: the trainer's model lives on {model_device}, the worker computes on "
                f"{self.device}; move the model there first (model.to(device))"
            )
        self.partitions = partitions
        self.trainer = trainer
        self.training = training
        self.materialize = materialize
        self.sums = True  # one-step clients summed a chunk at a time (sifl_ray.parties.upload.add_sums)
        self.arms: dict[str, ArmSetup] = {}
        self.dtype = next(trainer.model.parameters()).dtype
        self.samples = SampleStore(
            x_train, y_train, partitions.values(), device=self.device, dtype=self.dtype, stage=stage_data
        )
        self.host = HostStaging(self.device)
        self.faults = WorkerFaults([])  # tap: the faults a drill makes this worker fire
        self.recorder: Any = None  # tap: a transcript recorder (what the aggregator receives)
        self.audit: WorkerAudit | None = None  # tap: the in-run audit (canary clients, the aggregator's view)
        self.secure: dict[str, WorkerSecAgg] = {}  # arm → its hosted clients' SecAgg halves
        self._stacked: vectorised.StackedTrainer | None = None

    # ------------------------------------------------------------------ set-up
    def set_arm(
        self,
        arm: str,
        setup: ArmSetup,
        server_view: ClientServerKey | None = None,
        aggregator_view: AggregatorKey | None = None,
    ) -> None:
        """Play ``arm``'s clients with ``setup`` (made once, by the driver's
        :func:`~sifl_ray.runner.arms.hand_out_arm`) and the key views the server and the aggregator made for
        the clients (given here: they travel by reference; ``None`` keeps the setup's own); the views are
        moved to this worker's device once."""
        server_view = setup.server_view if server_view is None else server_view
        aggregator_view = setup.aggregator_view if aggregator_view is None else aggregator_view
        self.arms[arm] = replace(
            setup,
            server_view=on_device(server_view, self.device),
            aggregator_view=on_device(aggregator_view, self.device),
        )
        if setup.secagg is not None:
            # deferred: cryptography, which this module does not load otherwise
            from sifl_ray.parties.secure import WorkerSecAgg

            self.secure[arm] = WorkerSecAgg(setup.secagg, arm)

    def set_canaries(
        self, seed: bytes, canaries: dict[int, tuple[int, bool]], weight: float, directions: int = 0
    ) -> None:
        """Host the canary clients ``canaries`` (client id → canary index j, and whether it is inserted) and
        score the aggregator's view against ``directions`` audit directions, all from ``seed``, the seed of
        the directions (:class:`~sifl_ray.parties.canaries.WorkerAudit`). ``weight``: the canaries' FedAvg
        weight (a typical |D_i|; 1 under uniform weights). Simulation only."""
        self.audit = WorkerAudit(seed, canaries, weight, directions)

    def set_vectorise(self, on: bool, sums: bool = True) -> None:
        """``train.vectorise`` from now on, and with ``sums=False`` every client's model formed where one-step
        clients would be summed, without respawning the worker (``python -m bench overhead`` measures the
        three in one run)."""
        self.training = replace(self.training, vectorise=bool(on))
        self.sums = sums

    # ------------------------------------------------------------------ step 2
    @returns(Trained, count=lambda bounds: len(bounds) + 1)
    def train_round(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int = 0,
    ) -> Trained:
        """Step 2: train ``clients`` for round ``t`` of ``arm`` from ``broadcast``; one partial sum per shard
        (rows ``bounds``), then the report. ``coding`` is the broadcast's own (the driver's
        :attr:`~sifl_ray.round.ArmState.broadcast_coding`): an M2 arm's is M1 until its first aggregate.
        ``attempt`` > 0: the round is retried (a drill's faults fire on a given attempt)."""
        self.faults.before_training(arm, t, attempt)
        setup, report = self.arms[arm], WorkerReport(worker=self.worker, round=t)
        start = self._start(setup, broadcast, coding, report)
        fused = start.coded is not None and setup.client_form == "fused"
        total = PlainSum(
            start, shortcut=fused and self._direct() and not self.materialize, device=self.device
        )
        self._uploads(arm, t, setup, start, clients, total, report)
        partials = total.partials(
            self.worker, t, bounds, key_epoch=setup.key_epoch, report=report, host=self.host
        )
        return Trained.of(self.faults.corrupt_partials(arm, t, partials), report)

    @returns(MaskedTrained, count=lambda bounds: len(bounds) + 2)
    def train_masked(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        inboxes: dict[int, dict[int, bytes]],
        attempt: int = 0,
    ) -> MaskedTrained:
        """Step 2 of a secure arm (``inboxes``: the round's encrypted shares, routed by the aggregator): the
        same training and client step, then each upload is masked (SecAgg step 2) and summed in the ring.
        Between the masked partials and the report comes the exact float64 sum of what the clients
        encoded, a simulation-only instrument that only the evaluator receives (it measures the ring's
        quantisation error; no deployment has it). A client whose upload fails the checks, or that is not
        in the round's key agreement, masks nothing: the aggregator recovers the masks its neighbours
        added."""
        self.faults.before_training(arm, t, attempt)
        setup, report = self.arms[arm], WorkerReport(worker=self.worker, round=t)
        start = self._start(setup, broadcast, coding, report)
        total = self.secure[arm].round_sum(t, start.length, inboxes)
        self._uploads(arm, t, setup, start, clients, total, report)
        partials, exact = total.partials(self.worker, bounds, key_epoch=setup.key_epoch, weight=report.weight)
        report.bytes_out = total.packed_bytes()
        return MaskedTrained.of(self.faults.corrupt_partials(arm, t, partials), exact, report)

    def _start(
        self, setup: ArmSetup, broadcast: torch.Tensor, coding: Coding, report: WorkerReport
    ) -> RoundStart:
        """The round's start from ``broadcast`` (in its own ``coding``): M2 strips code 2 with ``P2R``
        (``w~ = W' P2R``, a valid M1 encoding), a coded arm decodes ``w0 = P1L w~`` once."""
        tic = time.perf_counter()
        broadcast = broadcast.to(self.device)
        coded: tuple[ClientServerKey, torch.Tensor] | None = None
        if not coding.coded:
            w0 = broadcast
        else:
            assert setup.server_view is not None
            w_tilde = broadcast
            if coding.aggregator_encodes:
                assert setup.aggregator_view is not None
                w_tilde = setup.aggregator_view.strip(broadcast)
            coded = (setup.server_view, w_tilde)
            w0 = setup.server_view.decode(w_tilde)
        report.encode_s += time.perf_counter() - tic
        length = broadcast.shape[0] if coded is None else coded[1].shape[0]
        return RoundStart(w0=w0, start=w0.to(self.dtype), coded=coded, length=length)

    def _direct(self) -> bool:
        """No tap needs an upload as sent (no recorder, no drill corrupting one): each upload can be added
        where it is made, and only its finiteness can be wrong (shape, round and key epoch are the
        worker's own)."""
        return self.recorder is None and not self.faults.has_upload_faults()

    def _uploads(
        self,
        arm: str,
        t: int,
        setup: ArmSetup,
        start: RoundStart,
        clients: list[int],
        total: Accumulator,
        report: WorkerReport,
    ) -> None:
        """Every client of the round through the pipeline (:mod:`sifl_ray.parties.upload`) into ``total``;
        the taps beside it: the recorder and the in-run audit."""
        real, canaries = self.audit.split(clients) if self.audit is not None else (clients, [])
        together = self._together(t, real, start, setup.client_form)
        buffer = torch.empty_like(start.w0) if self._direct() else None  # one buffer serves every client
        # the in-run audit: the aggregator's best cosine per direction this round
        sightings = None if self.audit is None or setup.canary_norm is None else self.audit.sightings()
        summed: set[int] = set()  # clients added a chunk at a time, where no one needs their models
        clip = setup.step if isinstance(setup.step, Clip) else None  # checked against a bound, no model
        stepless = setup.step is None or clip is not None  # no client step needs a client's model
        if together is not None and self.sums and stepless and sightings is None and self._direct():
            radius, size = None if clip is None else clip.clip, partial(self._size, setup=setup)
            summed = add_sums(together, size, radius, start, total, report)
        order = sorted(real) if together is None else together.order
        for client in [c for c in [*order, *canaries] if c not in summed]:
            local = self._local(arm, t, setup, start, client, together, total, buffer, report)
            reason = self._check(arm, t, setup, start, local) or total.add(local, report)
            if reason is not None:
                report.rejected[client] = reason
                continue
            if self.recorder is not None:  # what the aggregator receives (a masked input read as numbers)
                self.recorder.record_upload(t, client, total.sent(local).cpu())
            if sightings is not None:
                sightings.add(aggregator_reading(setup.uploads, start, local, total))
            canary = self.audit is not None and client in self.audit
            report.accept(client, local.size, local.loss, canary=canary)
        report.accepted.sort()  # trained together, clients come in groups of equal minibatch counts
        best = None if sightings is None else sightings.best()
        report.audit_max = None if best is None else best.tolist()

    def _local(
        self,
        arm: str,
        t: int,
        setup: ArmSetup,
        start: RoundStart,
        client: int,
        together: vectorised.ClientRound | None,
        total: Accumulator,
        buffer: torch.Tensor | None,
        report: WorkerReport,
    ) -> Local:
        """Stages 1–3 for one client: train (a canary does not), the arm's client step, encode."""
        size, w0, shortcut = self._size(client, setup), start.w0, total.shortcut
        step = None if setup.step is None else partial(setup.step, start=w0, arm=arm, client=client, t=t)
        if self.audit is not None and client in self.audit:  # the arm's step and coding, never trained
            assert setup.canary_norm is not None
            w_k = self.audit.model(client, w0, setup.canary_norm)
            own = for_canaries(setup.step)  # no share of the round's noise: the real clients carry it all
            if own is not None:
                w_k, metrics = own(w_k, start=w0, arm=arm, client=client, t=t)
                count_step(report, metrics)
            upload = w_k
            if start.coded is not None and not shortcut:
                view, w_tilde = start.coded
                upload = fused_tail(view, w_tilde, w0, w_k, [])[0]
            return Local(client, size, 0.0, w_k, upload)
        tic = time.perf_counter()
        if start.coded is not None and not shortcut:  # the training form encodes the upload itself
            form = stepwise_update if setup.client_form == "stepwise" else fused_update
            batches = self._batches(client, t)
            upload, stats = (
                form(*start.coded, self.trainer, batches, step=step)
                if together is None
                else together.update(client, step=step)
            )
            if step is not None:
                count_step(report, step_metrics(stats))
            report.train_s += time.perf_counter() - tic
            return Local(client, size, float(stats.get("loss", 0.0)), None, upload)
        if together is None:
            w_k, loss = self._train(start, client, t, buffer)
        else:
            w_k, loss = together.local(client, torch.empty_like(w0) if buffer is None else buffer)
        report.train_s += time.perf_counter() - tic
        if step is not None:
            w_k, metrics = step(w_k)
            count_step(report, metrics)
        return Local(client, size, loss, w_k, w_k.to(CODING_DTYPE) if start.coded is None else w_k)

    def _check(self, arm: str, t: int, setup: ArmSetup, start: RoundStart, local: Local) -> str | None:
        """Stage 4: why the worker must refuse ``local``'s upload (``None``: it may be added). A drill's
        fault tap may first change what the client really sends, or its stamps."""
        if not self.faults.has_upload_faults():
            return None if all_finite(local.upload) else "non-finite values"
        epoch = setup.key_epoch
        local.upload, stamped_round, stamped_epoch = self.faults.upload_hook(
            arm, t, local.client, local.upload, epoch
        )
        return check_upload(
            local.upload,
            shape=(start.length,),
            round=t,
            stamped_round=stamped_round,
            key_epoch=epoch,
            stamped_epoch=stamped_epoch,
        )

    def _size(self, client: int, setup: ArmSetup) -> float:
        """The client's FedAvg weight: |D_i|, 1 under uniform weights, a canary's configured weight."""
        if setup.uniform_weights:
            return 1.0
        if self.audit is not None and client in self.audit:
            return self.audit.weight
        return float(len(self.partitions[client]))

    # ------------------------------------------------------------------ training
    def _batch_indices(self, client: int, t: int) -> list[np.ndarray]:
        """The client's minibatches (dataset indices) for round ``t``, from its own stream."""
        return client_batches(
            self.partitions[client],
            batch_size=self.training.batch_size,
            epochs=self.training.local_epochs,
            steps=self.training.local_steps,
            seed=self.training.seed,
            client_id=client,
            round=t,
        )

    def _batches(self, client: int, t: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The client's minibatches for round ``t``, gathered one at a time as training consumes them
        (a pre-gathered list would hold a copy of the client's whole data set)."""
        return self.samples.batches(self._batch_indices(client, t))

    def _train(
        self, start: RoundStart, client: int, t: int, out: torch.Tensor | None
    ) -> tuple[torch.Tensor, float]:
        """``K`` local steps from the round's start; the local model is returned as a new float64 vector,
        or in ``out`` if given."""
        if self.training.skip_training:  # no-op client: no data, no steps (framework-overhead benchmarks)
            return (start.w0.clone() if out is None else out.copy_(start.w0)), 0.0
        self.trainer.reset(start.start)
        losses = loss_values([self.trainer.step(b) for b in self._batches(client, t)])
        return self.trainer.params(out), float(np.mean(losses)) if losses else 0.0

    def _together(
        self, t: int, clients: list[int], start: RoundStart, form: str
    ) -> vectorised.ClientRound | None:
        """The round's clients trained together (:mod:`sifl_ray.optim.vectorised`), or ``None``: one at a time
        (``train.vectorise=false``, no-op clients, or what cannot be vectorised, said once)."""
        if not self.training.vectorise or self.training.skip_training:
            return None
        why = vectorised.fallback_reason(self.trainer, recorder=self.recorder)
        if why is not None:
            vectorised.say_fallback(why)
            return None
        if self._stacked is None:
            self._stacked = vectorised.StackedTrainer(self.trainer)
        batches = partial(self._batch_indices, t=t)
        return vectorised.client_round(
            self._stacked,
            self.samples,
            batches,
            clients,
            w0=start.w0,
            start=start.start,
            coded=start.coded,
            form=form,
        )

    # ------------------------------------------------------------------ secure aggregation, steps 0, 1 and 3
    def secagg_advertise(self, arm: str, public: RoundPublic, clients: list[int]) -> dict[int, PublicKeys]:
        return self.secure[arm].advertise(public, clients)

    def secagg_share(
        self, arm: str, t: int, routed: Mapping[int, Mapping[int, PublicKeys]]
    ) -> dict[int, dict[int, bytes]]:
        return self.secure[arm].share(t, routed)

    @returns(Unmasked)
    def secagg_unmask(
        self, arm: str, t: int, survivors: Collection[int], silent: Collection[int] = ()
    ) -> Unmasked:
        """Step 3's answers of this worker's surviving clients, and what the protocol cost them; the clients
        ``silent`` (platform ids) answer nothing: the simulated clock's devices gone after their upload."""
        self.faults.before_unmask(arm, t)
        responses, costs = self.secure[arm].unmask(t, survivors, silent)
        return Unmasked(responses, UnmaskCosts(**vars(costs)))  # type: ignore[typeddict-item]


class WorkerHost(ClientWorker):
    """A client worker's process: the configured model built from the run's seed on the device it was
    given (a GPU Ray assigned, else the CPU), its clients' data, and the faults a drill makes it fire."""

    def __init__(
        self,
        worker: int,
        data: dict[str, np.ndarray],
        partitions: dict[int, np.ndarray],
        model: ModelSpec,
        train: TrainSpec,
        seed: int,
        threads: int = 1,
        materialize: bool = False,
    ) -> None:
        prepare_process(threads)
        device, self.fallback = pick_device()
        net = initial_model(model, seed).to(device)
        training = LocalTraining(
            batch_size=train.batch_size,
            local_epochs=train.local_epochs,
            local_steps=train.local_steps,
            seed=seed,
            skip_training=train.skip_training,
            vectorise=train.vectorise,
        )
        super().__init__(
            worker=worker,
            x_train=data["x_train"],
            y_train=data["y_train"],
            partitions=partitions,
            trainer=TorchTrainer(net, train.optimizer, lr=train.lr),
            training=training,
            device=device,
            materialize=materialize,
        )

    def set_faults(self, events: list[dict[str, Any]]) -> None:
        """The faults this worker fires itself (:class:`sifl_ray.faults.WorkerFaults`); drills and tests only.
        A fault that corrupts an upload turns off the shortcut (every upload is then built and checked on
        its own), which other runs must not pay for."""
        self.faults = WorkerFaults(events)

    def placement(self) -> dict[str, Any]:
        """Where this worker runs: its GPU ids as Ray assigned them, what CUDA sees, its device, the devices
        of what it holds (model, staged samples, every arm's key views) and why it fell back to the CPU
        if Ray assigned a GPU that CUDA cannot use here."""
        held = (self.trainer.model, self.samples.staged_tensors(), self.arms)
        return placement(self.device, *held, fallback=self.fallback)

    def memory(self) -> dict[str, Any]:
        """Peak memory of this worker: its GPU allocator and resident set (``process.memory``)."""
        return memory(self.device)

    def reset_peak_memory(self) -> None:
        reset_peak_memory(self.device)
