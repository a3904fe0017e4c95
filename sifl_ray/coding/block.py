"""The block backend of key 1: a deliberately WEAK block-diagonal key, the attack suite's reference.

The n coordinates are cut into blocks of ``block_size`` (the last one may be shorter); the ñ−n extra rows
are spread as evenly as possible over the blocks (block b gets ⌊m/B⌋ or ⌈m/B⌉ of them). Each block is an
independent dense code (:func:`~sifl_ray.coding.dense.dense_code`, pinv or oblique). docs/method.md "Attacks":
with block size s the noise-free differences reveal ``col(P1)`` after s/(N_c − 1) rounds, and s + (extra rows
per block) known plaintexts give a block's decoder; blocks that receive no extra row (when ñ−n < number of
blocks) carry no noise at all. That is the point: it is broken faster, which calibrates the attacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from sifl_ray.coding._common import (
    ClientKeyView,
    KeyStream,
    Seed,
    check_left_inverse,
    check_positive,
    check_sizes,
    fresh_seed,
    on_device_of,
    prepare,
    resolve_kappa,
    zeros_like_rows,
)
from sifl_ray.coding.base import CODING_DTYPE, KeyNorms, ServerKey
from sifl_ray.coding.dense import dense_code, dot_product_depth, gaussian_spectral_bound
from sifl_ray.coding.roundoff import matrix_roundoff


@dataclass(frozen=True, eq=False, repr=False)
class BlockGroup:
    """Consecutive blocks of equal shape, stacked for batched products.

    Blocks ``count`` of ``cols`` inputs and ``cols + extra`` outputs; the group reads inputs from
    ``col0``, writes outputs from ``row0`` and takes noise from ``noise0``.
    """

    count: int
    cols: int
    extra: int
    col0: int
    row0: int
    noise0: int
    P1: torch.Tensor  # (count, cols + extra, cols)
    P1L: torch.Tensor  # (count, cols, cols + extra)
    N1: torch.Tensor | None  # (count, cols + extra, extra); None in a client's view

    def _in(self, x: torch.Tensor, start: int, per: int) -> torch.Tensor:
        return x[start : start + self.count * per].reshape(self.count, per, -1)

    def _out(self, out: torch.Tensor, start: int, per: int, y: torch.Tensor) -> None:
        out[start : start + self.count * per] = y.reshape(self.count * per, *out.shape[1:])

    def to(self, device: str | torch.device, *, with_n1: bool = True) -> BlockGroup:
        n1 = self.N1.to(device) if with_n1 and self.N1 is not None else None
        return replace(self, P1=self.P1.to(device), P1L=self.P1L.to(device), N1=n1)


@dataclass(frozen=True, eq=False, repr=False)
class BlockCore:
    """``P1``/``P1L`` products of a block key (``N1`` products too when the groups carry it)."""

    n: int
    n_tilde: int
    groups: tuple[BlockGroup, ...]

    @property
    def device(self) -> torch.device:
        return self.groups[0].P1.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        xx = prepare(x, self.n, "apply_P1", self.device)
        out = zeros_like_rows(self.n_tilde, xx)
        for g in self.groups:
            rows = g.cols + g.extra
            g._out(out, g.row0, rows, torch.bmm(g.P1, g._in(xx, g.col0, g.cols)))
        return on_device_of(out, x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        xx = prepare(x, self.n_tilde, "decode", self.device)
        out = zeros_like_rows(self.n, xx)
        for g in self.groups:
            rows = g.cols + g.extra
            g._out(out, g.col0, g.cols, torch.bmm(g.P1L, g._in(xx, g.row0, rows)))
        return on_device_of(out, x)

    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        rr = prepare(r, self.n_tilde - self.n, "apply_N1", self.device)
        out = zeros_like_rows(self.n_tilde, rr)
        for g in self.groups:
            if g.extra:
                g._out(out, g.row0, g.cols + g.extra, torch.bmm(g.N1, g._in(rr, g.noise0, g.extra)))
        return on_device_of(out, r)

    def to(self, device: str | torch.device, *, with_n1: bool = True) -> BlockCore:
        return BlockCore(self.n, self.n_tilde, tuple(g.to(device, with_n1=with_n1) for g in self.groups))


def block_layout(n: int, m: int, block_size: int) -> list[tuple[int, int]]:
    """``(cols, extra)`` per block: blocks of ``block_size`` columns, ``m`` extra rows spread evenly."""
    cols = [block_size] * (n // block_size) + ([n % block_size] if n % block_size else [])
    count = len(cols)
    return [(c, m // count + (1 if b < m % count else 0)) for b, c in enumerate(cols)]


@dataclass(frozen=True, eq=False, repr=False)
class BlockServerKey(ServerKey):
    """Key 1, block backend (weak by design; see the module docstring)."""

    backend: ClassVar[str] = "block"
    create_options: ClassVar[tuple[str, ...]] = ("block_size",)

    n: int
    n_tilde: int
    alpha: float
    beta: float
    left_inverse: str
    kappa: float
    block_size: int
    epoch: int
    seed: Seed = field(repr=False)
    core: BlockCore = field(repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def create(
        cls,
        *,
        n: int,
        n_tilde: int,
        alpha: float,
        beta: float,
        left_inverse: str = "oblique",
        kappa: float | None = None,
        block_size: int = 64,
        seed: Seed | None = None,
        epoch: int = 0,
        device: str | torch.device = "cpu",
    ) -> BlockServerKey:
        check_sizes(n, n_tilde)
        check_left_inverse(left_inverse)
        alpha, beta = check_positive("alpha", alpha), check_positive("beta", beta)
        kappa = resolve_kappa(left_inverse, kappa, alpha)
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer ≥ 1; got {block_size!r}")
        seed = fresh_seed(seed)
        stream = KeyStream(seed, "server-key", "block", n, n_tilde, block_size, int(epoch))
        layout = block_layout(n, n_tilde - n, block_size)
        groups, col0, row0, noise0, b = [], 0, 0, 0, 0
        while b < len(layout):
            cols, extra = layout[b]
            count = 1
            while b + count < len(layout) and layout[b + count] == (cols, extra):
                count += 1
            codes = [
                dense_code(
                    n=cols,
                    m=extra,
                    alpha=alpha,
                    beta=beta,
                    kappa=kappa,
                    left_inverse=left_inverse,
                    stream=stream,
                    label=f"block{b + j}",
                )
                for j in range(count)
            ]
            P1, P1L, N1 = (torch.stack(mats) for mats in zip(*codes, strict=True))
            groups.append(BlockGroup(count, cols, extra, col0, row0, noise0, P1, P1L, N1))
            col0, row0, noise0, b = (
                col0 + count * cols,
                row0 + count * (cols + extra),
                noise0 + count * extra,
                b + count,
            )
        core = BlockCore(n, n_tilde, tuple(groups)).to(device)
        return cls(n, n_tilde, alpha, beta, left_inverse, kappa, block_size, int(epoch), seed, core)

    @property
    def device(self) -> torch.device:
        return self.core.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.apply_P1(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.decode(x)

    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        return self.core.apply_N1(r)

    def roundoff(self):
        """Rigorous float64 error constants of this key (:mod:`sifl_ray.coding.roundoff`): scalars only."""
        return matrix_roundoff([(g.P1, g.P1L, g.N1) for g in self.core.groups])

    def client_view(self) -> ClientKeyView:
        return ClientKeyView(
            self.core.to(self.device, with_n1=False), self.backend, self.left_inverse, self.epoch
        )

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        P1s, P1Ls, N1s = [], [], []
        for g in self.core.groups:
            P1s += list(g.P1)
            P1Ls += list(g.P1L)
            N1s += list(g.N1)
        return torch.block_diag(*P1s), torch.block_diag(*P1Ls), torch.block_diag(*N1s)

    def norms(self) -> KeyNorms:
        """Exact, block by block; ``‖P1L‖₂`` is the largest block's spectral norm (block diagonal)."""
        if "norms" not in self._cache:
            p1_l2 = torch.zeros(self.n_tilde, dtype=CODING_DTYPE)
            p1_l1, n1_l2, n1_max, p1p1l = p1_l2.clone(), p1_l2.clone(), p1_l2.clone(), p1_l2.clone()
            spectral = 0.0
            for g in self.core.groups:
                rows = slice(g.row0, g.row0 + g.count * (g.cols + g.extra))
                p1_l2[rows] = torch.linalg.vector_norm(g.P1, dim=2).reshape(-1).cpu()
                p1_l1[rows] = g.P1.abs().sum(2).reshape(-1).cpu()
                # P1 P1L is block diagonal too: ‖P1^j P1L‖₂² = P1^j (P1L P1Lᵀ) P1^jᵀ within the block.
                gram = g.P1L @ g.P1L.mT
                p1p1l[rows] = ((g.P1 @ gram) * g.P1).sum(2).clamp_min(0.0).sqrt().reshape(-1).cpu()
                if g.extra:
                    n1_l2[rows] = torch.linalg.vector_norm(g.N1, dim=2).reshape(-1).cpu()
                    n1_max[rows] = g.N1.abs().amax(2).reshape(-1).cpu()
                spectral = max(spectral, float(torch.linalg.matrix_norm(g.P1L, ord=2).max()))
            self._cache["norms"] = KeyNorms(
                p1_row_l2=p1_l2, p1_row_l1=p1_l1, n1_row_l2=n1_l2, n1_row_maxabs=n1_max,
                p1l_spectral=spectral, exact=True, p1p1l_row_l2=p1p1l, p1p1l_exact=True,
                note=(f"block backend (block size {self.block_size}): exact norms of the explicit blocks; "
                      "rows of blocks without extra rows have N1 = 0 (no noise)"),
            )  # fmt: skip
        return self._cache["norms"]

    @property
    def tallest_block_rows(self) -> int:
        """Rows of the tallest block: ``block_size`` columns plus ⌈m/B⌉ extra rows."""
        return self.block_size + math.ceil((self.n_tilde - self.n) / math.ceil(self.n / self.block_size))

    @classmethod
    def depth_for(cls, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
        # Block heights unknown (a configuration without a key): as if one block of ñ rows.
        return dot_product_depth(block_rows if block_rows is not None else n_tilde)

    def transform_depth(self) -> float:
        return self.depth_for(n_tilde=self.n_tilde, block_rows=self.tallest_block_rows)

    def conditioning(self, *, p1l_norm: float, alpha: float) -> float:
        # Each block is a small Gaussian code (:class:`~sifl_ray.coding.dense.DenseServerKey`'s reason).
        return p1l_norm * alpha * gaussian_spectral_bound(self.block_size, self.tallest_block_rows)

    def to(self, device: str | torch.device) -> BlockServerKey:
        return replace(self, core=self.core.to(device), _cache={})

    def state_dict(self) -> dict:
        return {
            "backend": self.backend, "format": 1, "n": self.n, "n_tilde": self.n_tilde, "alpha": self.alpha,
            "beta": self.beta, "left_inverse": self.left_inverse, "kappa": self.kappa,
            "block_size": self.block_size, "epoch": self.epoch, "seed": self.seed,
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: dict, *, device: str | torch.device = "cpu") -> BlockServerKey:
        if state.get("backend") != cls.backend:
            raise ValueError(f"not a block-backend key state (backend={state.get('backend')!r})")
        kappa = state["kappa"] if state["left_inverse"] == "oblique" else None
        return cls.create(
            n=state["n"],
            n_tilde=state["n_tilde"],
            alpha=state["alpha"],
            beta=state["beta"],
            left_inverse=state["left_inverse"],
            kappa=kappa,
            block_size=state["block_size"],
            seed=state["seed"],
            epoch=state["epoch"],
            device=device,
        )

    def __repr__(self) -> str:
        return (
            f"BlockServerKey(n={self.n}, n_tilde={self.n_tilde}, block_size={self.block_size}, "
            f"left_inverse={self.left_inverse!r}, alpha={self.alpha:g}, beta={self.beta:g}, "
            f"kappa={self.kappa:g}, epoch={self.epoch}, device={str(self.device)!r})"
        )
