"""Clients: local training on the encoded global model (the target optimizer), hosted many per worker.

A client worker hosts many virtual clients and trains them one after the other on one model object, or,
where it can, all together on stacked parameters (:mod:`sifl_ray.optim.vectorised`: the same minibatches,
optimizer states and uploads, equal to round-off; ``train.vectorise``). For a SIFL arm each client starts
from the encoded broadcast ``w~^t`` (in M2 after stripping code 2 with ``P2R``), runs the target optimizer
(fused: decode once, K ordinary steps, encode the change once; stepwise: the paper's per-step form) and
uploads ``w~_i^{t+1}``. The worker then plays the first, keyless half of the
aggregator: it validates every upload and adds it to a weighted running sum (the leaves of the summation
tree, see :mod:`sifl_ray.roles.aggregator`).

Fused uploads are affine in the local model, ``w~ + P1 (w_K − w_0)``, so without
``materialize_uploads`` the worker sums ``|D_i| (w_K,i − w_0)`` and applies ``P1`` once per round: the same
sum as adding the individual encodings, with fewer rounding errors and one transform instead of one per
client. ``materialize_uploads=True`` encodes every upload (needed to record what the aggregator sees).

On a GPU everything a worker computes stays on it (model, minibatches, key views, the float64 sums); the
broadcast comes in and the partial sums go out once per round (:mod:`sifl_ray.device`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sifl_ray.arms.base import ClientStep
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, ClientServerKey
from sifl_ray.data import client_batches
from sifl_ray.device import HostStaging, SampleStore, on_device, resolve_device
from sifl_ray.optim import TorchTrainer, fused_update, loss_values, stepwise_update, vectorised
from sifl_ray.optim.target import fused_tail, step_metrics
from sifl_ray.roles.aggregator import check_upload
from sifl_ray.roles.messages import MaskedPartial, Partial, WorkerReport
from sifl_ray.specs import Coding

if TYPE_CHECKING:  # imported where a secure arm is set up: ``cryptography`` costs ~13 MiB in each process
    from sifl_ray.privacy.secagg import PublicKeys, UnmaskResponse
    from sifl_ray.roles.secure import RoundPublic, SecAggSpec, WorkerSecAgg


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of ``x`` is finite, as ``torch.isfinite(x).all()`` decides it.

    A sum is finite only if every term is (inf and nan propagate through addition), so one reduction
    settles the usual case; only a non-finite sum (a non-finite entry, or finite entries whose sum
    overflows) pays for the elementwise test. On a 199,210-vector: ~40 µs instead of ~500 µs, which was
    the largest per-client cost of a worker after the training steps themselves.
    """
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def count_step(report: WorkerReport, metrics: Mapping[str, float]) -> None:
    """One client's step metrics into the worker's report: ``clipped`` counted in ``clients/clipped``, each
    summed for the round's ``client/<name>`` mean (:func:`sifl_ray.arms.steps.client_metrics`)."""
    report.clipped += bool(metrics.get("clipped"))
    report.stepped += 1
    for name, value in metrics.items():
        report.step_metrics[name] = report.step_metrics.get(name, 0.0) + float(value)


@dataclass(frozen=True)
class ArmSetup:
    """What a worker needs to play the clients of one arm (and nothing of the server or aggregator keys)."""

    coding: Coding  # the arm's: what the clients decode, strip and encode
    server_view: ClientServerKey | None = None  # P1, P1L
    aggregator_view: AggregatorKey | None = None  # P2R (M2)
    client_form: str = "fused"
    key_epoch: int = 0
    # The arm's step on each local model before upload (clip; clip and add the client's own noise; ...):
    # :class:`sifl_ray.arms.ClientStep`. None: upload the model as trained.
    step: ClientStep | None = None
    # FedAvg weights: each client's |D_i| (False), or 1 for every client (True: a DP mean needs weights that
    # do not depend on the client's data, so that one client moves the sum by at most its clip C)
    uniform_weights: bool = False
    # Secure aggregation (:mod:`sifl_ray.roles.secure`): each upload is masked in a ring and only the sum
    # of the survivors' uploads can be unmasked. None: uploads travel as they are (or immersion-coded).
    secagg: SecAggSpec | None = None
    # In-run audit: the norm of this arm's canary uploads (its update clip, or audit.norm); None: no canaries
    canary_norm: float | None = None
    # what a plain upload carries (Arm.uploads): the local ``model`` or its ``update`` (the audit's reading)
    uploads: str = "model"
    # the arm's relation is zero-out: a canary left out takes part and uploads no change (else it is absent)
    canary_zero_out: bool = False


@dataclass(frozen=True)
class LocalTraining:
    """How every client trains locally in a round (the same for every arm, so that the arms see the same
    minibatches)."""

    batch_size: int
    local_epochs: int
    local_steps: int
    seed: int
    skip_training: bool = False
    # train the round's clients together where the loop's results can be reproduced (else one at a time:
    # sifl_ray.optim.vectorised); False: always one at a time
    vectorise: bool = True


class ClientWorkerRole:
    """Hosts the virtual clients ``partitions`` (client id → sample indices) of one worker.

    Args:
        device: where the clients train and encode; the trainer's model must already live there.
        stage_data: copy the worker's samples to ``device`` once (default: on any device but the CPU;
            see :class:`sifl_ray.device.SampleStore`).

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
        self.arms: dict[str, ArmSetup] = {}
        self.dtype = next(trainer.model.parameters()).dtype
        self.samples = SampleStore(
            x_train,
            y_train,
            partitions.values(),
            device=self.device,
            dtype=self.dtype,
            stage=stage_data,
        )
        self.host = HostStaging(self.device)
        self.upload_hook = None  # optional callable(arm, t, client, upload) -> upload (fault injection)
        self.recorder = None  # optional transcript recorder (what the aggregator sees)
        self.secure: dict[str, WorkerSecAgg] = {}  # arm → its hosted clients' SecAgg halves
        self._stacked: vectorised.StackedTrainer | None = None
        # In-run audit (simulation only): canary client id → its index j, the auditor's seed, their weight
        self.canaries: dict[int, int] = {}
        self._canary_seed: bytes | None = None
        self._canary_weight = 1.0
        self._canary_dirs: dict[int, torch.Tensor] = {}
        self._audit_count = 0
        self._audit_dirs: torch.Tensor | None = None
        self._included: np.ndarray | None = None

    def set_canaries(self, seed: bytes, canaries: dict[int, int], weight: float, directions: int = 0) -> None:
        """Host the canary clients ``canaries`` (client id → canary index j): each uploads the global model
        plus its direction ``c_j`` (:func:`~sifl_ray.privacy.one_run.canary_directions`, from the auditor's
        ``seed``) at the arm's canary norm, through the arm's client step like any client. ``weight``: their
        FedAvg weight (a typical |D_i|; 1 under uniform weights). Simulation only: the auditor's tool."""
        self.canaries = {int(c): int(j) for c, j in canaries.items()}
        self._canary_seed, self._canary_weight = seed, float(weight)
        self._canary_dirs = {}
        self._audit_count = int(directions)  # canaries + nulls: the aggregator's view is scored here
        self._audit_dirs = None
        self._included = None  # which canaries insert their direction (the auditor's draws)

    def _aggregator_reads(
        self, best: torch.Tensor | None, setup: ArmSetup, reading: torch.Tensor
    ) -> torch.Tensor | None:
        """The in-run audit's aggregator view (simulation only): the cosine of what the aggregator reads of
        one upload (``reading``: the update it sees in the clear, or decodes with a colluding client's
        ``P1L``, or a masked input read as numbers) with every audit direction; the worker keeps the
        largest per direction (``best``, the round's so far; returned), which is all the driver needs (the
        aggregator's best sighting); the report gets it once, at the end of the round."""
        if setup.canary_norm is None:
            return best
        from sifl_ray.privacy.one_run import canary_directions

        assert self._canary_seed is not None, "set_canaries comes first"
        if self._audit_dirs is None or self._audit_dirs.shape[1] != reading.numel():
            rows = canary_directions(d=reading.numel(), k=self._audit_count, seed=self._canary_seed, clip=1.0)
            self._audit_dirs = torch.from_numpy(rows)
        reading = reading.detach().to("cpu", CODING_DTYPE).reshape(-1)
        norm = float(torch.linalg.vector_norm(reading))
        cos = (
            self._audit_dirs @ reading / norm
            if norm > 0
            else torch.zeros(self._audit_count, dtype=CODING_DTYPE)
        )
        return cos if best is None else torch.maximum(best, cos)

    def _canary_model(self, client: int, w0: torch.Tensor, norm: float) -> torch.Tensor:
        """The canary's "trained" model: the round's start plus its direction at ``norm`` (float64); a
        canary left out (only sampled under a zero-out arm) stays at the start: it uploads no change."""
        from sifl_ray.privacy.one_run import canary_directions, inclusion_draws

        assert self._canary_seed is not None, "set_canaries comes first"
        if self._included is None:
            self._included = inclusion_draws(k=max(self.canaries.values()) + 1, seed=self._canary_seed)
        if not self._included[self.canaries[client]]:
            return w0.to(CODING_DTYPE).clone()

        unit = self._canary_dirs.get(client)
        if unit is None:
            row = canary_directions(
                d=w0.numel(), k=1, seed=self._canary_seed, clip=1.0, first=self.canaries[client]
            )
            unit = self._canary_dirs[client] = torch.from_numpy(row[0])
        return w0.to(CODING_DTYPE) + norm * unit.to(w0.device)

    def _split(self, clients: list[int]) -> tuple[list[int], list[int]]:
        """The round's real clients and its canaries (which have no data: never trained)."""
        canaries = sorted(c for c in clients if c in self.canaries)
        return [c for c in clients if c not in self.canaries], canaries

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
            from sifl_ray.roles.secure import WorkerSecAgg

            self.secure[arm] = WorkerSecAgg(setup.secagg, arm)

    # Secure aggregation, steps 0, 1 and 3 for the hosted clients (step 2, masking, is in train_round).
    def secagg_advertise(self, arm: str, public: RoundPublic, clients: list[int]) -> dict[int, PublicKeys]:
        return self.secure[arm].advertise(public, clients)

    def secagg_share(
        self, arm: str, t: int, routed: Mapping[int, Mapping[int, PublicKeys]]
    ) -> dict[int, dict[int, bytes]]:
        return self.secure[arm].share(t, routed)

    def secagg_unmask(
        self, arm: str, t: int, survivors: Collection[int]
    ) -> tuple[dict[int, UnmaskResponse], dict[str, Any]]:
        responses, costs = self.secure[arm].unmask(t, survivors)
        return responses, vars(costs)

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
        self, w0: torch.Tensor, start: torch.Tensor, client: int, t: int, out: torch.Tensor | None
    ) -> tuple[torch.Tensor, float]:
        """``K`` local steps from ``start`` (``w0`` cast once per round to the model dtype); the local
        model is returned as a new float64 vector, or in ``out`` if given."""
        if self.training.skip_training:  # no-op client: no data, no steps (framework-overhead benchmarks)
            return (w0.clone() if out is None else out.copy_(w0)), 0.0
        self.trainer.reset(start)
        losses = loss_values([self.trainer.step(b) for b in self._batches(client, t)])
        return self.trainer.params(out), float(np.mean(losses)) if losses else 0.0

    def _together(self, t: int, clients: list[int], **kwargs: Any) -> vectorised.ClientRound | None:
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
        return vectorised.client_round(self._stacked, self.samples, batches, clients, **kwargs)

    def train_round(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        inboxes: dict[int, Any] | None = None,
    ) -> tuple[list[Partial], WorkerReport] | tuple[list[MaskedPartial], WorkerReport, torch.Tensor]:
        """Train ``clients`` for round ``t`` of ``arm`` from ``broadcast``; return one partial sum per shard
        and a report. ``coding`` is the broadcast's own (the driver's
        :attr:`~sifl_ray.round.ArmState.broadcast_coding`): an M2 arm's is M1 until its first aggregate.

        Under secure aggregation (``inboxes``: the round's encrypted shares, routed by the aggregator) each
        client's upload, after the same training and client step, is masked (SecAgg step 2) and the worker
        adds the masked inputs in the ring: the partials are :class:`MaskedPartial`, and a third value
        follows, the exact float64 sum of what the clients encoded, a simulation-only instrument that only
        the evaluator receives (it measures the ring's quantisation error; no deployment has it). A client
        whose upload fails the checks, or that is not in the round's key agreement, masks nothing: the
        aggregator recovers the masks its neighbours added.
        """
        setup = self.arms[arm]
        report = WorkerReport(worker=self.worker, round=t)
        best = None  # the in-run audit: the aggregator's best cosine per direction this round
        tic = time.perf_counter()
        broadcast = broadcast.to(self.device)
        # coded: the key view that decodes and encodes, and the round's encoded start w~ (None: plain)
        coded: tuple[ClientServerKey, torch.Tensor] | None = None
        if not coding.coded:
            w0 = broadcast
        else:
            assert setup.server_view is not None
            w_tilde = broadcast
            if coding.aggregator_encodes:  # code 2 on: strip it, w~ = W' P2R (a valid M1 encoding)
                assert setup.aggregator_view is not None
                w_tilde = setup.aggregator_view.strip(broadcast)
            coded = (setup.server_view, w_tilde)
            w0 = setup.server_view.decode(w_tilde)
        report.encode_s += time.perf_counter() - tic
        upload_len = broadcast.shape[0] if coded is None else coded[1].shape[0]
        # Secure aggregation: the uploads are masked and summed in the ring (no coding: its arms are plain).
        masked = None if setup.secagg is None else self.secure[arm].round_sum(t, upload_len, inboxes or {})
        # the weighted sum of the uploads (empty under secure aggregation: the ring sum takes its place)
        acc = torch.zeros(upload_len if masked is None else 0, dtype=CODING_DTYPE, device=self.device)
        delta_sum = None if coded is None else torch.zeros_like(w0)
        # Direct: no hook or recorder, so no upload leaves this worker before it is summed here; only
        # finiteness can then be wrong (shape, round and key epoch are this worker's own).
        direct = self.upload_hook is None and self.recorder is None
        # The shortcut sums the local models' changes and encodes once (the upload of a client is then its
        # local model w_k, never encoded on its own).
        shortcut = (
            coded is not None
            and setup.client_form == "fused"
            and direct
            and not getattr(self, "materialize", False)
        )
        start = w0.to(self.dtype)  # every client starts from w0: cast it once, not once per client
        # A direct upload is consumed before the next client trains, so one buffer serves them all.
        local = torch.empty_like(w0) if direct else None
        clients, canaries = self._split(clients)
        together = self._together(t, clients, w0=w0, start=start, coded=coded, form=setup.client_form)
        for client in [*(sorted(clients) if together is None else together.order), *canaries]:
            canary = client in self.canaries
            size = self._size(client, setup)
            t0 = time.perf_counter()
            step = self._client_step(setup, w0, arm=arm, client=client, t=t)
            if canary:  # through the arm's step and coding like a trained client, never trained
                assert setup.canary_norm is not None
                w_k, loss = self._canary_model(client, w0, setup.canary_norm), 0.0
                if step is not None:
                    w_k, metrics = step(w_k)
                    count_step(report, metrics)
                # shortcut: the worker sums w_k − w0 and encodes once, as for every client
                upload = w_k if coded is None or shortcut else fused_tail(*coded, w0, w_k, [])[0]
            elif coded is not None and not shortcut:
                form = stepwise_update if setup.client_form == "stepwise" else fused_update
                upload, stats = (
                    form(*coded, self.trainer, self._batches(client, t), step=step)
                    if together is None
                    else together.update(client, step=step)
                )
                loss = float(stats.get("loss", 0.0))
                if step is not None:
                    count_step(report, step_metrics(stats))
                report.train_s += time.perf_counter() - t0
            else:
                if together is None:
                    w_k, loss = self._train(w0, start, client, t, local)
                else:
                    w_k, loss = together.local(client, torch.empty_like(w0) if local is None else local)
                report.train_s += time.perf_counter() - t0
                if step is not None:
                    w_k, metrics = step(w_k)
                    count_step(report, metrics)
                upload = w_k.to(CODING_DTYPE) if coded is None else w_k
            if shortcut or (direct and coded is None):  # no hook: only finiteness can be wrong
                reason = None if all_finite(upload) else "non-finite values"
            else:
                upload, reason = self._delivered(arm, t, client, upload, setup, upload_len)
            if reason is None and masked is not None:
                reason = masked.add(client, upload, size, report)
            if reason is not None:
                report.rejected[client] = reason
                continue
            if self.recorder is not None:  # what the aggregator receives (a masked input read as numbers)
                self.recorder.record_upload(t, client, (upload if masked is None else masked.reading()).cpu())
            if (
                self._audit_count
            ):  # the aggregator's reading: the update, decoded with a client's P1L if coded
                if shortcut:
                    reading = w_k - w0
                elif coded is not None:
                    reading = coded[0].decode(upload.to(CODING_DTYPE)) - w0
                elif masked is not None:
                    reading = masked.reading()
                else:
                    reading = upload - w0 if setup.uploads == "model" else upload
                best = self._aggregator_reads(best, setup, reading)
            if shortcut:
                assert delta_sum is not None
                delta_sum.add_(w_k.sub_(w0), alpha=size)  # w_k is this worker's buffer
            elif masked is None:  # a masked input was added in the ring when it was masked
                acc.add_(upload.to(CODING_DTYPE), alpha=size)
            self._count(report, client, size, loss)
        report.accepted.sort()  # trained together, clients come in groups of equal minibatch counts
        report.audit_max = None if best is None else best.tolist()
        if masked is not None:
            partials, exact = masked.partials(
                self.worker, bounds, key_epoch=setup.key_epoch, weight=report.weight
            )
            report.bytes_out = masked.packed_bytes()
            return partials, report, exact
        if shortcut and report.weight > 0:
            assert coded is not None and delta_sum is not None
            t0 = time.perf_counter()
            acc = coded[1] * report.weight + coded[0].apply_P1(delta_sum)
            report.encode_s += time.perf_counter() - t0
        acc = self.host.to_host(acc)  # out to the object store: the partials below are copies of it
        plain = [
            Partial(
                source=self.worker,
                round=t,
                key_epoch=setup.key_epoch,
                weighted_sum=acc[a:b].clone(),
                weight=report.weight,
                accepted=len(report.accepted),
            )
            for a, b in bounds
        ]
        report.bytes_out = acc.numel() * acc.element_size()
        return plain, report

    @staticmethod
    def _client_step(
        setup: ArmSetup, w0: torch.Tensor, *, arm: str, client: int, t: int
    ) -> Callable[[torch.Tensor], tuple[torch.Tensor, Mapping[str, float]]] | None:
        """The arm's client step (:class:`~sifl_ray.arms.ClientStep`) for one client's local model, bound to
        the round's start ``w0`` (``None``: the model is uploaded as trained)."""
        if setup.step is None:
            return None
        return partial(setup.step, start=w0, arm=arm, client=client, t=t)

    def _size(self, client: int, setup: ArmSetup) -> float:
        """The client's FedAvg weight: |D_i|, 1 under uniform weights, a canary's configured weight."""
        if setup.uniform_weights:
            return 1.0
        return self._canary_weight if client in self.canaries else float(len(self.partitions[client]))

    def _count(self, report: WorkerReport, client: int, size: float, loss: float) -> None:
        """An accepted upload joins the worker's report; a canary's is counted apart (it never trained, so
        it has no loss: the round's train loss is over the real clients)."""
        report.accepted.append(client)
        report.weight += size
        if client in self.canaries:
            report.canaries += 1
            report.canary_weight += size
        else:
            report.train_loss_sum += size * loss

    def _delivered(
        self, arm: str, t: int, client: int, upload: torch.Tensor, setup: ArmSetup, length: int
    ) -> tuple[torch.Tensor, str | None]:
        """What client ``client`` really sends (a drill's upload hook may corrupt it or its stamps) and why
        the worker must refuse it (``None``: it may be summed)."""
        stamped_round, stamped_epoch = t, setup.key_epoch
        if self.upload_hook is not None:
            upload, stamped_round, stamped_epoch = self.upload_hook(arm, t, client, upload, setup.key_epoch)
        reason = check_upload(
            upload,
            shape=(length,),
            round=t,
            stamped_round=stamped_round,
            key_epoch=setup.key_epoch,
            stamped_epoch=stamped_epoch,
        )
        return upload, reason
