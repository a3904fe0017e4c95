"""Where a party's tensors live, and what crosses between the host and its device, when.

A client worker (and, if the configuration gives it a GPU, the evaluator) computes on one device: its
model, its minibatches, its copy of the clients' key views and every float64 coding product stay there.
What crosses, and only where the protocol needs it:

* in, once per round: the broadcast, from the object store (a blocking copy, needed at once). Not
  through pinned memory: it arrives in pageable memory (unpickled from the object store), so pinning it
  would be one more host copy of the same size, which the driver's own staging of a pageable copy
  already amounts to, and there is nothing to overlap the copy with;
* out, once per round: the worker's partial sums, to the object store, through a reusable pinned host
  buffer (:class:`HostStaging`: the device writes it by DMA, and the partials are cut from it by the one
  host copy they needed anyway);
* nothing per step: the worker's samples are staged on the device once (:class:`SampleStore`), and a step
  returns its loss as a device tensor (:func:`sifl_ray.optim.trainer.loss_values` reads a client's losses
  together). A host→device copy from pageable memory, or a ``float()`` of a device value, makes the host
  wait for the device: once per step, that serialises the step loop.

Noise and key material are drawn on the CPU on purpose: the parties' secret streams are NumPy Philox and
SHAKE-256 (:mod:`sifl_ray.seeding`, :mod:`sifl_ray.coding._common`), so a run on a GPU draws exactly the
numbers a run on a CPU draws, and the one transfer of what was drawn costs less than a device generator
would save. The server and the aggregator, whose work per round is a few transforms of ñ and those noise
draws, stay on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import fields, is_dataclass

import numpy as np
import torch


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the enclosed work on one thread (torch's intra-op pool and the BLAS under NumPy).

    Why: small operations (the attack suite's matrices of hundreds of rows, the fast transform's
    elementwise passes of ~10^5 doubles) split across torch's worker threads wait at a barrier for the
    slowest one. On a busy two-core machine the second thread is often not scheduled: the attack suite
    ran 25× slower, and ``sifl describe``'s key row norms (~400 transforms at ñ = 199,411) took 50–90 s
    instead of a few. Results are the same: elementwise work is exact either way, and the reductions
    here run along rows that one thread sums alone. Restores the previous settings on exit.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # only a speed-up; scikit-learn (a dependency) normally brings it
        limits = nullcontext()
    else:
        limits = threadpool_limits(limits=1)
    try:
        with limits:
            yield
    finally:
        torch.set_num_threads(before)


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` a party can compute on, or a ``ValueError`` that says why not.

    Refused: a string torch does not know, ``meta`` (it holds no data: a model trained there has no
    values), and a CUDA device this process cannot use (no CUDA, or an index beyond what it sees).
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        known = "use 'cpu' or 'cuda[:k]'"
        raise ValueError(f"device {device!r}: not a device torch knows ({err}); {known}") from None
    if dev.type == "meta":
        raise ValueError(
            "device 'meta' holds no data: a model trained or a vector encoded there has no values; "
            "use 'cpu' or 'cuda[:k]'"
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {str(dev)!r}: CUDA is not usable in this process (torch.cuda.is_available() is "
                "False); use 'cpu', or run where a GPU is visible"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {str(dev)!r}: this process sees {torch.cuda.device_count()} CUDA device(s) "
                "(CUDA_VISIBLE_DEVICES); use an index below that"
            )
    return dev


def on_device(value, device: torch.device):
    """``value`` (a tensor, a key view, anything with ``.to(device)``) moved to ``device``; ``None`` and
    values without ``.to`` as they are. A key view arrives from its owner on the CPU; the party that
    computes with it moves it here once, so no product falls back to the CPU per call."""
    return value.to(device) if value is not None and hasattr(value, "to") else value


def tensor_devices(*objects: object) -> set[str]:
    """The devices of every tensor reachable from ``objects`` (through tensors, modules, dataclasses,
    lists, tuples and dicts): what a placement check compares with where a party should compute."""
    found: set[str] = set()
    seen: set[int] = set()

    def walk(x: object) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            found.add(str(x.device))
        elif isinstance(x, torch.nn.Module):
            for t in (*x.parameters(), *x.buffers()):
                walk(t)
        elif is_dataclass(x) and not isinstance(x, type):
            for f in fields(x):
                walk(getattr(x, f.name))
        elif isinstance(x, list | tuple | set | frozenset):
            for item in x:
                walk(item)
        elif isinstance(x, dict):
            for item in x.values():
                walk(item)

    for obj in objects:
        walk(obj)
    return found


class HostStaging:
    """The way out of a device: a device tensor copied into a reusable pinned host buffer.

    On a CUDA device the copy is a DMA into page-locked memory, where a copy into fresh pageable memory
    goes through the driver's own staging and a second host copy; the caller then takes what it keeps
    from the buffer (a slice's ``clone()``), before the next :meth:`to_host` overwrites it. On the CPU the
    tensor is returned as it is.
    """

    def __init__(self, device: torch.device):
        self.pinned = device.type == "cuda"
        self._buffers: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def to_host(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` on the CPU: ``x`` itself there, else the pinned buffer holding it (valid until the next
        call with the same size and dtype)."""
        if x.device.type == "cpu":
            return x
        if not self.pinned:
            return x.cpu()
        key = (x.numel(), x.dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty(x.numel(), dtype=x.dtype, pin_memory=True)
        out = buf.view(x.shape)
        out.copy_(x, non_blocking=True)
        torch.cuda.current_stream(x.device).synchronize()  # the host reads it next
        return out


class SampleStore:
    """A worker's training samples, and how a minibatch reaches the device it trains on.

    Two ways, giving the same tensors value for value:

    * host (the CPU's): each minibatch is gathered from the arrays with NumPy fancy indexing (a fresh
      array; Ray hands the arrays over zero-copy and read-only, so no worker copies the whole training
      set) and converted to the model's dtype;
    * staged (the default on an accelerator): the samples of the worker's own clients are copied to the
      device once, in the model's dtype; per client and round, its minibatch indices go over in one
      transfer, and each minibatch is gathered on the device. The step loop then makes no host→device
      copy, each of which (from pageable memory) would make the host wait for the device.

    Args:
        x, y: the training set (every sample; ``owned`` picks the worker's).
        owned: the sample indices of each client the worker hosts.
        device, dtype: where and in which dtype the model trains (labels keep their dtype).
        stage: staged (True) or host (False); default: staged on any device but the CPU.
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        owned: Iterable[np.ndarray],
        *,
        device: torch.device,
        dtype: torch.dtype,
        stage: bool | None = None,
    ):
        self.x, self.y = np.asarray(x), np.asarray(y)
        self.device, self.dtype = device, dtype
        self.is_staged = device.type != "cpu" if stage is None else bool(stage)
        if self.is_staged:
            parts = [np.asarray(p, dtype=np.int64).reshape(-1) for p in owned]
            self._rows = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            self._x = torch.from_numpy(np.ascontiguousarray(self.x[self._rows])).to(device, dtype)
            self._y = torch.from_numpy(np.ascontiguousarray(self.y[self._rows])).to(device)

    def staged_tensors(self) -> tuple[torch.Tensor, ...]:
        """The samples and labels staged on the device (none in host mode)."""
        return (self._x, self._y) if self.is_staged else ()

    def batches(self, index_batches: Sequence[np.ndarray]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The minibatches ``index_batches`` (sample indices, as :func:`sifl_ray.data.client_batches` gives
        them), one at a time as training consumes them."""
        if not self.is_staged:
            for b in index_batches:
                yield (
                    torch.from_numpy(self.x[b]).to(self.device, self.dtype),
                    torch.from_numpy(self.y[b]).to(self.device),
                )
            return
        if not len(index_batches):
            return
        flat = np.concatenate([np.asarray(b).reshape(-1) for b in index_batches])
        rows = np.searchsorted(self._rows, flat)
        if rows.size and (rows.max() >= self._rows.size or not np.array_equal(self._rows[rows], flat)):
            raise KeyError("a minibatch names samples that no client of this worker owns")
        rows_dev = torch.from_numpy(rows).to(self.device)  # one transfer per client and round
        start = 0
        for b in index_batches:
            stop = start + len(b)
            take = rows_dev[start:stop]
            yield self._x.index_select(0, take), self._y.index_select(0, take)
            start = stop
