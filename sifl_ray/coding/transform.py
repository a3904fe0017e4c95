"""A structured random orthogonal transform ``Q`` (ñ×ñ) for the fast backend (docs/method.md "Choosing the
matrices").

Design, for any size ñ ≥ 1 (ñ = 199,411 is prime): let ``L`` be the largest power of two below ñ
and ``r = ñ − L`` (so 1 ≤ r ≤ L; see :func:`head_length`). One round is::

    Q = Perm_out · G2 · (H_L D ⊕ I_r) · G1 · Perm_in

* ``Perm_in``, ``Perm_out``: secret uniformly random permutations of the ñ coordinates (``perm_block = k``
  makes ``Perm_in`` move blocks of k coordinates instead: fewer indices to gather, a coarser secret);
* ``G1``, ``G2``: secret Givens rotations pairing tail coordinate ``L+i`` with head coordinate ``i``
  (i < r), angles drawn so that |cos| and |sin| ≥ sin(π/8);
* ``D``: secret random signs on the head (times 1/√L), ``H_L`` the ±1 Walsh–Hadamard matrix.

Why it mixes fully (docs/method.md "Mixing": every output depends on every input). Follow a unit vector e_j.
After ``Perm_in`` it sits at one position. If that is a tail position ``L+i``, ``G1`` puts a share |sin| > 0
of it on head ``i``; if it is a head position, it is already on the head. ``H_L D`` spreads any nonzero head
vector to all L head coordinates with magnitude ``|share|/√L`` each (every entry of ``H_L`` is ±1). ``G2``
then gives every tail output ``L+i`` a share |sin| > 0 of head ``i``, which is nonzero; head outputs keep a
share |cos| > 0. So every one of the ñ outputs is reached, for every input: the transform is dense in
support (checked structurally by :meth:`StructuredOrthogonal.support` and numerically in the tests).
Without ``G1`` the tail inputs would bypass H; without ``G2`` the tail outputs would see only two inputs —
the "block-diagonal in disguise" failure the method warns about. More ``rounds`` repeat the pattern (with
fresh permutations and angles, and a layer of Givens rotations on all coordinates between rounds, without
which two signed Hadamards cancel to exact zeros) and make the entry magnitudes less uniform, at linear cost;
one round already mixes fully.

Cost: one power-of-two FWHT (``log₂ L`` in-place butterfly passes), two gathers, and O(r) work for the
Givens layers; state O(ñ): two permutations (int32), L signs, 2r angles. Nothing ñ×ñ is ever formed.
The gathers and the FWHT dominate; the Givens layers are a small fraction (``python -m bench kernels``
measures an encode plus a decode against one vector copy at the paper's sizes). Inputs of shape (ñ, p) are
transformed one column at a time (a random gather of p-double rows is slower per double than p flat gathers).
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from sifl_ray.coding.base import CODING_DTYPE

_WORKSPACE = threading.local()
_WORKSPACE_MIN_ELEMENTS = 1 << 16
#: From this size on, a transform of several columns runs column by column (see
#: :meth:`StructuredOrthogonal.apply`).
COLUMN_BY_COLUMN = 4096


def scratch(slot: str, like: torch.Tensor) -> torch.Tensor:
    """A per-thread reusable buffer shaped like ``like`` (float64 CPU vectors of ≥ 65,536 entries).

    Why: a fresh multi-megabyte tensor is fresh pages from the OS, and the page faults cost more than
    the gather that fills it; reusing two scratch vectors per size makes a
    transform allocate only its result. Never returned to callers. Everything else gets ``empty_like``.
    """
    if like.device.type != "cpu" or like.dim() != 1 or like.numel() < _WORKSPACE_MIN_ELEMENTS:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    buffers = _WORKSPACE.__dict__.setdefault("buffers", {})
    key = (slot, like.numel(), like.dtype)
    buf = buffers.get(key)
    if buf is None:
        buf = buffers[key] = torch.empty(like.numel(), dtype=like.dtype)
    return buf


def release_workspace() -> None:
    """Free this thread's scratch vectors (they are otherwise kept for the next transform)."""
    _WORKSPACE.__dict__.pop("buffers", None)


def head_length(size: int) -> int:
    """L: the largest power of two *below* ``size`` (1 for size 1), so that 1 ≤ r = size − L ≤ L.

    A power-of-two size therefore gets L = size/2 and r = L Givens pairs rather than a bare Hadamard:
    a lone signed Hadamard has entries of one magnitude, and sums of such entries cancel to exact zeros
    (e.g. ñ = 2 with the oblique kernel); the Givens angles make the magnitudes generic.
    """
    return 1 if size <= 1 else 1 << ((size - 1).bit_length() - 1)


#: Elements (of the flattened (L, p) array) that one block of :func:`fwht_`'s first levels holds on a CPU
#: whose L2 size is unknown: 1 MiB of float64 (see :func:`fwht_block_elems`).
_FWHT_BLOCK_ELEMS = 1 << 17


@functools.cache
def fwht_block_elems(cache_dir: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """How many float64 elements one block of :func:`fwht_` holds on this CPU: half its core's L2 cache
    (as Linux reports it), a power of two, or :data:`_FWHT_BLOCK_ELEMS` where that cannot be read.

    Why: each level of the transform is two passes over the array, and a 2²⁰-row head is 8 MiB, so done
    level after level every pass goes to memory, while a block's first levels stay in the cache. Half the
    L2 leaves room for what else the core touches: on the Intel Xeon we measured (2 MiB) 2²⁰ rows took
    19 ms level by level, 17, 13.4 and 11.5 ms in blocks of 256 KiB, 512 KiB and 1 MiB. The block size
    changes only which element is updated when, never the bits."""
    for index in sorted(Path(cache_dir).glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if level == "2" and kind in ("Unified", "Data") and size[:-1].isdigit():
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1])
            if scale:
                elems = int(size[:-1]) * scale // 2 // 8
                return 1 << (elems.bit_length() - 1) if elems >= 1024 else _FWHT_BLOCK_ELEMS
    return _FWHT_BLOCK_ELEMS


def fwht_(y: torch.Tensor) -> torch.Tensor:
    """Unnormalised Walsh–Hadamard transform of contiguous ``y`` (L,) or (L, p) along dim 0, in place.

    Each level is two passes: ``a ← a + b`` then ``b ← a − 2b`` (= old a − old b), so no scratch buffer.
    On a CPU the levels whose butterflies stay inside one block (:func:`fwht_block_elems`) run block after
    block, the wider ones over the whole array (a GPU runs every level over the whole array: there more
    blocks would only be more kernel launches). Each element sees the same additions in the same
    order either way, so the result is the same to the bit (``tests/coding/test_coding_transform.py``).
    """
    length = y.shape[0]
    if length & (length - 1):
        raise ValueError(f"FWHT length must be a power of two; got {length}")
    flat = y.view(-1)
    cols = flat.numel() // max(length, 1)
    rows = max(1, fwht_block_elems() // max(cols, 1)) if y.device.type == "cpu" else 1
    rows = 1 << (rows.bit_length() - 1)  # one block's rows: a power of two, so blocks hold whole butterflies
    if 1 < rows < length:
        for block in flat.view(-1, rows * cols):
            _levels(block, cols, 1, rows)
        _levels(flat, cols, rows, length)
    else:
        _levels(flat, cols, 1, length)
    return y


def _levels(flat: torch.Tensor, cols: int, first: int, end: int) -> None:
    """The butterflies of half-width ``first``, ``2·first``, … below ``end`` rows on ``flat`` (rows of
    ``cols``), in place."""
    h = first
    while h < end:
        stride = h * cols
        if stride == 2 and flat.dtype == torch.float64:
            # Runs of two contiguous doubles are slow for the elementwise kernels; as complex128 the same
            # butterfly is a run of one 16-byte element (a faster kernel, identical arithmetic).
            v = torch.view_as_complex(flat.view(-1, 2)).view(-1, 2, 1)
        else:
            v = flat.view(-1, 2, stride)
        a0, a1 = v[:, 0], v[:, 1]
        a0.add_(a1)
        torch.add(a0, a1, alpha=-2.0, out=a1)
        h *= 2


def _col(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``v`` shaped to broadcast over the columns of ``like`` ((k,) → (k, 1) when ``like`` is 2-D)."""
    return v if like.dim() == 1 else v[:, None]


@dataclass(frozen=True, eq=False, repr=False)
class Permutation:
    """``y[i] = x[index[i]]`` on blocks of ``block`` consecutive coordinates (not in place).

    ``index`` permutes the ``size // block`` whole blocks; the last ``size % block`` coordinates stay in
    place. ``block = 1`` is a uniformly random permutation of all coordinates. Larger blocks trade
    randomness for speed: a gather costs about the same per index on a CPU whatever the locality, so moving
    blocks of 16 doubles costs a fraction of moving single doubles.
    """

    index: torch.Tensor
    inverse: torch.Tensor
    block: int = 1
    in_place = False

    def _gather(self, x: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(x) if out is None else out
        if self.block == 1:
            return torch.index_select(x, 0, idx, out=out)
        head = idx.shape[0] * self.block
        torch.index_select(x[:head].view(idx.shape[0], -1), 0, idx, out=out[:head].view(idx.shape[0], -1))
        out[head:] = x[head:]
        return out

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self._gather(x, self.index, out)

    def backward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self._gather(x, self.inverse, out)

    def support(self, mask: torch.Tensor) -> torch.Tensor:
        return self._gather(mask.contiguous(), self.index)

    def to(self, device: str | torch.device) -> Permutation:
        return Permutation(self.index.to(device), self.inverse.to(device), self.block)


@dataclass(frozen=True, eq=False, repr=False)
class Givens:
    """Rotations of the pairs (head ``i``, tail ``tail + i``), i < len(cos): ``h ← c h − s t``,
    ``t ← s h + c t`` (in place)."""

    cos: torch.Tensor
    sin: torch.Tensor
    tail: int
    in_place = True

    def _halves(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        r = self.cos.shape[0]
        h, t = y[:r], y[self.tail : self.tail + r]
        return h, t, _col(self.cos, y), _col(self.sin, y)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        h, t, c, s = self._halves(y)
        sh = torch.mul(h, s, out=scratch("givens", h))
        h.mul_(c).addcmul_(t, s, value=-1.0)
        t.mul_(c).add_(sh)
        return y

    def backward(self, y: torch.Tensor) -> torch.Tensor:
        h, t, c, s = self._halves(y)
        sh = torch.mul(h, s, out=scratch("givens", h))
        h.mul_(c).addcmul_(t, s)
        t.mul_(c).sub_(sh)
        return y

    def support(self, mask: torch.Tensor) -> torch.Tensor:
        r = self.cos.shape[0]
        out = mask.clone()
        both = mask[:r] | mask[self.tail : self.tail + r]
        out[:r] = both
        out[self.tail : self.tail + r] = both
        return out

    def to(self, device: str | torch.device) -> Givens:
        return Givens(self.cos.to(device), self.sin.to(device), self.tail)


@dataclass(frozen=True, eq=False, repr=False)
class SignedHadamard:
    """``head ← H_L D head`` with ``D`` = random signs / √L (orthogonal; in place on the first L rows)."""

    signs: torch.Tensor
    in_place = True

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        head = y[: self.signs.shape[0]]
        head.mul_(_col(self.signs, head))
        fwht_(head)
        return y

    def backward(self, y: torch.Tensor) -> torch.Tensor:
        head = y[: self.signs.shape[0]]
        fwht_(head)
        head.mul_(_col(self.signs, head))
        return y

    def support(self, mask: torch.Tensor) -> torch.Tensor:
        out = mask.clone()
        length = self.signs.shape[0]
        out[:length] = mask[:length].any(dim=0, keepdim=True)
        return out

    def to(self, device: str | torch.device) -> SignedHadamard:
        return SignedHadamard(self.signs.to(device))


Layer = Permutation | Givens | SignedHadamard


@dataclass(frozen=True, eq=False, repr=False)
class StructuredOrthogonal:
    """An orthogonal ñ×ñ map given as layers (applied first to last); see the module docstring."""

    size: int
    layers: tuple[Layer, ...]

    @classmethod
    def random(
        cls, size: int, stream, label: str, *, rounds: int = 1, perm_block: int = 1
    ) -> StructuredOrthogonal:
        """Draw the layers from ``stream`` (a :class:`~sifl_ray.coding._common.KeyStream`)."""
        if size < 1 or rounds < 1:
            raise ValueError(f"need size ≥ 1 and rounds ≥ 1; got size={size}, rounds={rounds}")
        length = head_length(size)
        r = size - length
        layers: list[Layer] = []

        def perm(name: str, block: int) -> Permutation:
            block = block if size // block >= 64 else 1  # small sizes: a full permutation is cheap
            idx = stream.permutation(f"{label}/{name}", size // block)
            # int32 indices: index_select moves half the index bytes of int64.
            return Permutation(idx.to(torch.int32), torch.argsort(idx).to(torch.int32), block)

        def givens(name: str, count: int, tail: int) -> Givens:
            u = stream.uniform(f"{label}/{name}", 2 * count)
            # θ ∈ [π/8, 3π/8] + quadrant: |cos|, |sin| ≥ sin(π/8) keep every pair visibly mixed.
            theta = math.pi / 8 + u[:count] * (math.pi / 4) + (math.pi / 2) * torch.floor(4 * u[count:])
            return Givens(torch.cos(theta), torch.sin(theta), tail)

        for k in range(rounds):
            layers.append(perm(f"perm{k}", perm_block if k == 0 else 1))
            if k and size > 1:
                # Between rounds, rotate every coordinate with a partner. Without it two signed Hadamards
                # compose to entries (Σ ±1)/L, exactly zero with probability ~√(2/(πL)) each: more
                # rounds would *un*-mix. Random angles make the magnitudes generic.
                layers.append(givens(f"mix{k}", size // 2, size // 2))
            if r:
                layers.append(givens(f"givens{k}a", r, length))
            layers.append(SignedHadamard(stream.signs(f"{label}/signs{k}", length) / math.sqrt(length)))
            if r:
                layers.append(givens(f"givens{k}b", r, length))
        layers.append(perm("perm-out", 1))
        return cls(size, tuple(layers))

    @property
    def device(self) -> torch.device:
        return next(_tensors(self.layers[0])).device

    def _run(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        if x.shape[0] != self.size:
            raise ValueError(f"expected {self.size} rows, got shape {tuple(x.shape)}")
        layers = tuple(reversed(self.layers)) if transpose else self.layers
        y, slot = x.contiguous(), None  # slot: which scratch buffer holds y (None: the caller's input)
        for i, layer in enumerate(layers):
            if isinstance(layer, Permutation):
                if i == len(layers) - 1:
                    out, slot = None, "result"  # the result is always fresh memory
                else:
                    slot = "b" if slot == "a" else "a"
                    out = scratch(slot, y)
                y = layer.backward(y, out) if transpose else layer.forward(y, out)
            else:
                if slot is None:
                    slot = "a"
                    y = scratch(slot, y).copy_(y)
                y = layer.backward(y) if transpose else layer.forward(y)
        return y if slot == "result" else y.clone()

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``Q @ x`` for ``x`` of shape (ñ,) or (ñ, p) (a new tensor; ``x`` is not modified)."""
        return self._columns(x, transpose=False)

    def apply_t(self, x: torch.Tensor) -> torch.Tensor:
        """``Qᵀ @ x`` (= ``Q⁻¹ @ x``)."""
        return self._columns(x, transpose=True)

    def _columns(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        # Column by column: a random gather of rows of p doubles is slower per double than the flat
        # gather (``python -m bench kernels`` times the transform), and the gathers dominate the cost.
        if x.dim() == 1 or x.shape[1] == 1 or self.size < COLUMN_BY_COLUMN:
            return self._run(x, transpose)
        return torch.stack([self._run(x[:, j], transpose) for j in range(x.shape[1])], dim=1)

    def support(self, mask: torch.Tensor) -> torch.Tensor:
        """Which outputs can be nonzero, given boolean input masks (ñ,) or (ñ, k): the support of ``Q``
        propagated structurally, layer by layer, ignoring numerical cancellation."""
        y = mask.to(torch.bool)
        for layer in self.layers:
            y = layer.support(y)
        return y

    def dense(self) -> torch.Tensor:
        """``Q`` as a dense ñ×ñ matrix (small sizes only: tests and attacks)."""
        return self.apply(torch.eye(self.size, dtype=CODING_DTYPE, device=self.device))

    def to(self, device: str | torch.device) -> StructuredOrthogonal:
        return StructuredOrthogonal(self.size, tuple(layer.to(device) for layer in self.layers))


def _tensors(layer: Layer):
    if isinstance(layer, Permutation):
        yield layer.index
    elif isinstance(layer, Givens):
        yield layer.cos
    else:
        yield layer.signs
