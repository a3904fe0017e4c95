"""The fast backend of key 1: ``P1``, ``P1L``, ``N1`` from one structured orthogonal transform ``Q``.

docs/method.md "Choosing the matrices": ``P1 = α·Q[:, :n]`` and, with ``z = Qᵀx``,

* pinv:    ``P1L x = z[:n]/α``,                ``N1 = β·Q[:, n:]``;
* oblique: ``P1L x = z[:n]/α + K z[n:]``,       ``N1 = β·Q [−αK; I]``,

where ``K`` (n×(ñ−n), ``‖K‖₂ = κ``) is a :class:`TiledOrthogonalMap`. Every left inverse of this ``P1`` has
the oblique form for some ``K``; ``K = 0`` is the pseudo-inverse, whose kernel ``col(Q[:, n:]) = col(P1)⊥`` an
orthogonal projection removes (docs/method.md "Attacks"). An encoding ``P1 w + N1 r = Q [α(w − βK r); β r]``
costs one transform, a decoding one transposed transform: O(ñ log ñ) time, O(ñ) key state, nothing ñ×n.
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
)
from sifl_ray.coding.base import CODING_DTYPE, KeyNorms, ServerKey
from sifl_ray.coding.roundoff import fast_roundoff
from sifl_ray.coding.transform import (
    COLUMN_BY_COLUMN,
    Givens,
    Permutation,
    SignedHadamard,
    StructuredOrthogonal,
    scratch,
)

# Columns per batch when norms() pushes the kernel basis through Q (bounds the scratch memory).
_NORM_BATCH_ELEMS = 1 << 22
# dense() materialises ñ×ñ-sized matrices; refuse beyond this many entries.
_DENSE_MAX_ENTRIES = 1 << 27


@dataclass(frozen=True, eq=False, repr=False)
class TiledOrthogonalMap:
    """``K``: an n×m map with ``‖K‖₂ = κ`` exactly, applied in O(n + m log m).

    ``K = κ/√t · S · [M; M; …; M]`` cut to n rows, with ``M`` an m×m structured orthogonal transform
    (fully mixing, so every entry of ``K`` is nonzero), ``S`` random signs and ``t = ⌈n/m⌉`` copies. Why the
    spectral norm is exactly κ: with ``n = (t−1)m + s``, ``KᵀK = κ²/t ((t−1)I + M[:s]ᵀM[:s])`` and
    ``M[:s]ᵀM[:s]`` is an orthogonal projection, so the largest eigenvalue is ``κ²/t · t = κ²`` (for
    ``n ≤ m``, t = 1 and the rows ``κ S M[:n]`` are orthonormal up to κ). Why this ``K`` and not a second
    full transform: it keeps the oblique backend at one transform per encode/decode; its structure only
    matters to an attacker who cannot first estimate the noise map by regression, and with ≥ m rounds
    any fixed ``K`` can be regressed (docs/method.md "Noise removal"), so a costlier ``K`` buys nothing
    measurable.
    """

    n: int
    m: int
    kappa: float
    signs: torch.Tensor  # (t·m,), ±κ/√t
    inner: StructuredOrthogonal

    @classmethod
    def random(cls, n: int, m: int, kappa: float, stream: KeyStream, label: str) -> TiledOrthogonalMap:
        copies = -(-n // m)
        signs = stream.signs(f"{label}/signs", copies * m) * (kappa / math.sqrt(copies))
        return cls(n, m, kappa, signs, StructuredOrthogonal.random(m, stream, f"{label}/M"))

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """``K @ v`` for ``v`` of shape (m,) or (m, p)."""
        u = self.inner.apply(v)
        copies = self.signs.shape[0] // self.m
        s = self.signs.view(copies, self.m, *([1] * (v.dim() - 1)))
        return (s * u.unsqueeze(0)).reshape(copies * self.m, *v.shape[1:])[: self.n]

    def to(self, device: str | torch.device) -> TiledOrthogonalMap:
        return replace(self, signs=self.signs.to(device), inner=self.inner.to(device))


@dataclass(frozen=True, eq=False, repr=False)
class FastCore:
    """``P1`` and ``P1L`` of the fast backend: what a client may hold (no β, no seed)."""

    n: int
    n_tilde: int
    alpha: float
    Q: StructuredOrthogonal
    K: TiledOrthogonalMap | None

    @property
    def device(self) -> torch.device:
        return self.Q.device

    def head_tail(self, w: torch.Tensor | None, r: torch.Tensor | None, beta: float, like: torch.Tensor):
        """``z = [α(w − βK r); β r]`` (``w``/``r`` None mean zero), the pre-image of an encoding under Q."""
        z = torch.empty((self.n_tilde, *like.shape[1:]), dtype=CODING_DTYPE, device=self.device)
        z = scratch("pre-image", z) if z.dim() == 1 else z  # consumed by Q at once, never returned
        head, tail = z[: self.n], z[self.n :]
        if r is None:
            tail.zero_()
        else:
            torch.mul(r, beta, out=tail)
        if self.K is not None and r is not None:
            k_r = self.K.apply(r * (-self.alpha * beta))  # scale the short vector, not the long one
            if w is None:
                head.copy_(k_r)
            else:
                torch.add(k_r, w, alpha=self.alpha, out=head)
        elif w is not None:
            torch.mul(w, self.alpha, out=head)
        else:
            head.zero_()
        return z

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        w = prepare(x, self.n, "apply_P1", self.device)
        return on_device_of(self.Q.apply(self.head_tail(w, None, 0.0, w)), x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        xt = prepare(x, self.n_tilde, "decode", self.device)
        z = self.Q.apply_t(xt)
        head = z[: self.n]
        if self.K is None:
            head.div_(self.alpha)
        else:
            torch.add(self.K.apply(z[self.n :]), head, alpha=1.0 / self.alpha, out=head)
        # A copy, not a view: the view's storage would also hold z[n:] (the kernel coordinates, i.e. the
        # noise), and would carry it along wherever the decoded model goes (pickles, Ray, checkpoints).
        return on_device_of(head.clone(), x)

    def to(self, device: str | torch.device) -> FastCore:
        return replace(self, Q=self.Q.to(device), K=None if self.K is None else self.K.to(device))


@dataclass(frozen=True, eq=False, repr=False)
class FastServerKey(ServerKey):
    """Key 1, fast backend. Build it with :meth:`create` or :func:`~sifl_ray.coding.make_server_key`.

    The key is its secret ``seed`` plus O(ñ) derived state (permutations, signs, angles) in ``core``.
    ``repr`` shows only public sizes and scales.
    """

    backend: ClassVar[str] = "fast"
    create_options: ClassVar[tuple[str, ...]] = ("rounds", "perm_block")

    n: int
    n_tilde: int
    alpha: float
    beta: float
    left_inverse: str
    kappa: float
    rounds: int
    perm_block: int
    epoch: int
    seed: Seed = field(repr=False)
    core: FastCore = field(repr=False)
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
        rounds: int = 1,
        perm_block: int = 1,
        seed: Seed | None = None,
        epoch: int = 0,
        device: str | torch.device = "cpu",
    ) -> FastServerKey:
        """Derive a key from ``seed`` (default: 256 fresh secure random bits).

        Args:
            rounds: layers of the transform (one already mixes fully; see ``transform``).
            perm_block: granularity of the input permutation (1 = a uniformly random permutation).
        """
        check_sizes(n, n_tilde)
        check_left_inverse(left_inverse)
        alpha, beta = check_positive("alpha", alpha), check_positive("beta", beta)
        kappa = resolve_kappa(left_inverse, kappa, alpha)
        if int(rounds) < 1 or int(perm_block) < 1:
            raise ValueError(f"rounds and perm_block must be ≥ 1; got {rounds}, {perm_block}")
        seed = fresh_seed(seed)
        stream = KeyStream(seed, "server-key", "fast", n, n_tilde, int(epoch))
        Q = StructuredOrthogonal.random(n_tilde, stream, "Q", rounds=int(rounds), perm_block=int(perm_block))
        m = n_tilde - n
        K = TiledOrthogonalMap.random(n, m, kappa, stream, "K") if left_inverse == "oblique" else None
        core = FastCore(n, n_tilde, alpha, Q, K).to(device)
        return cls(
            n, n_tilde, alpha, beta, left_inverse, kappa, int(rounds), int(perm_block), int(epoch), seed, core
        )

    # -- the maps -------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.core.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.apply_P1(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.decode(x)

    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        rr = prepare(r, self.n_tilde - self.n, "apply_N1", self.device)
        return on_device_of(self.core.Q.apply(self.core.head_tail(None, rr, self.beta, rr)), r)

    def encode(self, w: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        """``P1 w + N1 r = Q [α(w − βK r); β r]``: one transform, not two."""
        ww = prepare(w, self.n, "encode", self.device)
        rr = None if r is None else prepare(r, self.n_tilde - self.n, "encode (noise)", self.device)
        if rr is not None and rr.shape[1:] != ww.shape[1:]:
            raise ValueError(f"encode: w has shape {tuple(w.shape)} but r has shape {tuple(r.shape)}")
        return on_device_of(self.core.Q.apply(self.core.head_tail(ww, rr, self.beta, ww)), w)

    def reencode(self, x: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        """M2 server step ``P1 (P1L x) + N1 r``, fused: one ``Qᵀ`` and one ``Q`` per column.

        With ``z = Qᵀx``, ``P1L x = z[:n]/α + K z[n:]`` and ``encode(w, r) = Q [α(w − βK r); β r]``, so
        the pre-image of the result is ``[z[:n] + αK(z[n:] − β r); β r]``: one application of the short
        map ``K`` instead of two, no scaling of the long head by 1/α and back by α, and no decoded model
        in between (the server never holds one; docs/method.md "SIFL M2"). Exact arithmetic gives what
        ``encode(decode(x), r)`` gives; float64 rounds less (fewer operations on the 1e6-sized noise).
        """
        xx = prepare(x, self.n_tilde, "reencode", self.device)
        rr = None if r is None else prepare(r, self.n_tilde - self.n, "reencode (noise)", self.device)
        if rr is not None and rr.shape[1:] != xx.shape[1:]:
            raise ValueError(f"reencode: x has shape {tuple(x.shape)} but r has shape {tuple(r.shape)}")
        if xx.dim() == 1:
            return on_device_of(self._reencode_column(xx, rr), x)
        out = torch.empty_like(xx)
        for j in range(xx.shape[1]):
            out[:, j] = self._reencode_column(xx[:, j], None if rr is None else rr[:, j])
        return on_device_of(out, x)

    def _reencode_column(self, x: torch.Tensor, r: torch.Tensor | None) -> torch.Tensor:
        Q, K, n = self.core.Q, self.core.K, self.n
        z = Q.apply_t(x)  # fresh memory: modified in place below
        head, tail = z[:n], z[n:]
        if K is not None:
            shifted = tail if r is None else tail - self.beta * r
            head.add_(K.apply(shifted * self.alpha))
        if r is None:
            tail.zero_()
        else:
            torch.mul(r, self.beta, out=tail)
        return Q.apply(z)

    # -- parties, persistence -------------------------------------------------------------------------
    def roundoff(self):
        """Rigorous float64 error constants of this key (:mod:`sifl_ray.coding.roundoff`): scalars only."""
        return fast_roundoff(self)

    def client_view(self) -> ClientKeyView:
        return ClientKeyView(self.core, self.backend, self.left_inverse, self.epoch)

    def to(self, device: str | torch.device) -> FastServerKey:
        return replace(self, core=self.core.to(device), _cache={})

    def state_dict(self) -> dict:
        return {
            "backend": self.backend, "format": 1, "n": self.n, "n_tilde": self.n_tilde,
            "alpha": self.alpha, "beta": self.beta, "left_inverse": self.left_inverse,
            "kappa": self.kappa, "rounds": self.rounds, "perm_block": self.perm_block,
            "epoch": self.epoch, "seed": self.seed,
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: dict, *, device: str | torch.device = "cpu") -> FastServerKey:
        if state.get("backend") != cls.backend:
            raise ValueError(f"not a fast-backend key state (backend={state.get('backend')!r})")
        kappa = state["kappa"] if state["left_inverse"] == "oblique" else None
        return cls.create(
            n=state["n"],
            n_tilde=state["n_tilde"],
            alpha=state["alpha"],
            beta=state["beta"],
            left_inverse=state["left_inverse"],
            kappa=kappa,
            rounds=state["rounds"],
            perm_block=state["perm_block"],
            seed=state["seed"],
            epoch=state["epoch"],
            device=device,
        )

    def __repr__(self) -> str:
        return (
            f"FastServerKey(n={self.n}, n_tilde={self.n_tilde}, left_inverse={self.left_inverse!r}, "
            f"alpha={self.alpha:g}, beta={self.beta:g}, kappa={self.kappa:g}, rounds={self.rounds}, "
            f"perm_block={self.perm_block}, epoch={self.epoch}, device={str(self.device)!r})"
        )

    # -- norms ----------------------------------------------------------------------------------------
    def p1l_spectral(self) -> float:
        """``‖P1L‖₂``: ``1/α`` (pinv) or ``√(1/α² + κ²)`` (oblique).

        Why: ``P1L = [I/α, K] Qᵀ`` with Q orthogonal, so ``P1L P1Lᵀ = I/α² + K Kᵀ`` and its largest
        eigenvalue is ``1/α² + ‖K‖₂² = 1/α² + κ²`` (``‖K‖₂ = κ`` exactly, see :class:`TiledOrthogonalMap`).
        """
        return math.sqrt(1.0 / self.alpha**2 + self.kappa**2)

    @classmethod
    def depth_for(cls, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
        # Per round of the transform: log₂ L butterfly levels plus ~4 for the signs and Givens rotations.
        return rounds * (math.floor(math.log2(n_tilde)) + 4.0)

    def transform_depth(self) -> float:
        return self.depth_for(n_tilde=self.n_tilde, rounds=self.rounds)

    def conditioning(self, *, p1l_norm: float, alpha: float) -> float:
        # Q is orthogonal: P1 = α·(n columns of Q) and P1L's pinv part is (those columns)ᵀ/α, so the product
        # of norms is 1. The model leaves the oblique K out of this term; measured errors stay inside the
        # bound (tests/coding/test_coding_precision.py).
        return 1.0

    def norms(self) -> KeyNorms:
        """Exact row norms, computed once and cached on the key (the dataclass is frozen; the cache is a
        private dict, dropped by ``to()``).

        ``N1`` rows come from pushing the ñ−n kernel columns through the maps in batches
        (O((ñ−n)·ñ log ñ), which is why the result is cached). ``P1`` rows would need all n columns in
        general; for ``rounds = 1`` every entry of Q is a product along at most two paths through the
        layers, which gives the row 1- and 2-norms exactly in O(ñ) (:func:`_row_norms_one_round`). For
        ``rounds > 1`` the 2-norms are exact as ``α·√(1 − ‖Q[j, n:]‖²)`` (rows of Q are unit vectors, and
        the tail columns are pushed through Q), the 1-norms are the upper bound ``√n·‖P1^j‖₂``, and
        ``exact`` is False.
        """
        if "norms" not in self._cache:
            self._cache["norms"] = self._compute_norms()
        return self._cache["norms"]

    def _kernel_stats(self, fn, m: int, *, maxabs: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Row by row over the ``m`` columns ``fn(e_j)`` (e_j the unit vectors of length m): the sum of their
        squares and, with ``maxabs``, their largest magnitude.

        Keys from :data:`~sifl_ray.coding.transform.COLUMN_BY_COLUMN` on push one column at a time and add
        it in place: their transform runs column by column anyway, and stacking the columns into a
        (ñ, batch) matrix only to reduce it along its short rows cost more than the transforms' own passes
        (with the FWHT's cache blocks, the CNN2 key's norms 14.1 s → 9.9 s, the MLP's 2.1 → 0.8 s; the
        sums of squares now add one column at a time: the same m terms in another order, within 2m ulps,
        ``tests/coding/test_coding_norms.py``). Smaller keys push a batch of columns at once, which their
        transform runs in one pass."""
        sq = torch.zeros(self.n_tilde, dtype=CODING_DTYPE, device=self.device)
        top = torch.zeros_like(sq) if maxabs else None
        if self.n_tilde >= COLUMN_BY_COLUMN:
            for j in range(m):
                e = torch.zeros(m, dtype=CODING_DTYPE, device=self.device)
                e[j] = 1.0
                col = fn(e)
                sq.addcmul_(col, col)
                if top is not None:
                    torch.maximum(top, col.abs(), out=top)
            return sq, top
        batch = max(1, min(m, _NORM_BATCH_ELEMS // self.n_tilde))
        for start in range(0, m, batch):
            stop = min(m, start + batch)
            eye = torch.zeros((m, stop - start), dtype=CODING_DTYPE, device=self.device)
            eye[torch.arange(start, stop), torch.arange(stop - start)] = 1.0
            cols = fn(eye)
            sq += (cols * cols).sum(1)
            if top is not None:
                top = torch.maximum(top, cols.abs().amax(1))
        return sq, top

    def _compute_norms(self) -> KeyNorms:
        n, m = self.n, self.n_tilde - self.n
        n1_sq, n1_max = self._kernel_stats(self.apply_N1, m, maxabs=True)
        assert n1_max is not None
        if self.rounds == 1:
            p1_l2 = self.alpha * _row_norms_one_round(self.core.Q, n, 2)
            p1_l1, exact = self.alpha * _row_norms_one_round(self.core.Q, n, 1), True
            how = "P1 row norms exact from the one-round structure of Q (O(ñ))"
        else:
            if self.left_inverse == "pinv":
                tail_sq = n1_sq / self.beta**2  # N1 = β Q[:, n:]
            else:
                zeros = lambda e: e.new_zeros((n, *e.shape[1:]))  # noqa: E731
                tail = lambda e: self.core.Q.apply(torch.cat([zeros(e), e]))  # noqa: E731
                tail_sq = self._kernel_stats(tail, m, maxabs=False)[0]
            p1_l2 = self.alpha * torch.sqrt((1.0 - tail_sq).clamp_min(0.0))  # rows of Q are unit vectors
            p1_l1, exact = math.sqrt(n) * p1_l2, False
            how = "P1 row 2-norms exact as α·sqrt(1 − ‖Q[j, n:]‖²); 1-norms the upper bound sqrt(n)·‖P1^j‖₂"
        # P1 P1L = Q [I, αK] Qᵀ, so ‖P1^j P1L‖₂ = √(‖Q[j, :n]‖² + α²‖Q[j, :n] K‖²) ≥ ‖Q[j, :n]‖ = ‖P1^j‖₂/α
        # (the bound ‖P1^j‖₂/‖P1‖₂ of any left inverse), with equality for the pseudo-inverse (K = 0).
        p1p1l_exact = self.core.K is None
        note = (
            f"fast backend: N1 rows exact from the {m} kernel columns pushed through Q; "
            f"{how}; ‖P1L‖₂ = {'sqrt(1/α² + κ²)' if self.kappa else '1/α'} exactly; ‖P1^j P1L‖₂ "
            + ("= ‖P1^j‖₂/α exactly" if p1p1l_exact else "bounded below by ‖P1^j‖₂/α (oblique K)")
        )
        return KeyNorms(
            p1_row_l2=p1_l2.cpu(),
            p1_row_l1=p1_l1.cpu(),
            n1_row_l2=torch.sqrt(n1_sq).cpu(),
            n1_row_maxabs=n1_max.cpu(),
            p1l_spectral=self.p1l_spectral(),
            exact=exact,
            note=note,
            p1p1l_row_l2=(p1_l2 / self.alpha).cpu(),
            p1p1l_exact=p1p1l_exact,
        )

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(P1, P1L, N1)`` by pushing identity matrices through the maps (small n only)."""
        if self.n_tilde * self.n_tilde > _DENSE_MAX_ENTRIES:
            raise ValueError(f"dense() materialises ñ×ñ matrices; ñ = {self.n_tilde} is too large for it")
        eye = lambda k: torch.eye(k, dtype=CODING_DTYPE, device=self.device)  # noqa: E731
        return (
            self.apply_P1(eye(self.n)),
            self.decode(eye(self.n_tilde)),
            self.apply_N1(eye(self.n_tilde - self.n)),
        )


def _row_norms_one_round(Q: StructuredOrthogonal, n: int, order: int) -> torch.Tensor:
    """Row ``order``-norms (1 or 2) of ``Q[:, :n]`` (the columns fed by w), exactly, for one-round
    transforms, in O(ñ).

    Notation (see ``transform``): a column ``e_q`` at position q after ``Perm_in`` becomes, after ``G1``,
    ``a_q e_{h(q)} + b_q e_{L+k(q)}`` (head share a_q ∈ {1, c1, −s1}; tail share b_q only for paired
    positions); ``H D`` turns the head share into ``±a_q/√L`` on every head row (sign ``σ(o, h) =
    (−1)^popcount(o & h) sign(d_h)``); ``G2`` mixes head row i with tail row L+i. So a head row o ≥ r
    reads ``|a_q|/√L`` from every input, and a paired row reads ``|c2|`` or ``|s2|`` times that, except for
    the two inputs q ∈ {i, L+i} that also reach it through the tail, which are added with their signs.
    """
    layers = Q.layers
    perm_in, perm_out = layers[0], layers[-1]
    had = next(layer for layer in layers if isinstance(layer, SignedHadamard))
    givens = [layer for layer in layers if isinstance(layer, Givens)]
    if (
        len(layers) not in (3, 5)
        or not isinstance(perm_in, Permutation)
        or not isinstance(perm_out, Permutation)
    ):
        raise ValueError("closed-form row norms need a one-round transform")
    size, length = Q.size, had.signs.shape[0]
    r, dev = size - length, had.signs.device
    src = perm_in.forward(torch.arange(size, device=dev, dtype=torch.int64))  # input at position q
    in_w = (src < n).to(CODING_DTYPE)
    a = torch.ones(size, dtype=CODING_DTYPE, device=dev)
    if r:
        g1, g2 = givens
        a[:r] = g1.cos
        a[length:] = -g1.sin
    scale = length ** (-order / 2)  # |H D| entries are 1/√L
    total = (a.abs().pow(order) * in_w).sum()
    rows = torch.full((size,), float(total) * scale, dtype=CODING_DTYPE, device=dev)
    if r:
        i = torch.arange(r, device=dev)
        parity = i.clone()
        for shift in (32, 16, 8, 4, 2, 1):
            parity ^= parity >> shift
        sigma = (1.0 - 2.0 * (parity & 1).to(CODING_DTYPE)) * torch.sign(had.signs[:r])  # H[i,i]·sign(d_i)
        c1, s1, c2, s2 = g1.cos, g1.sin, g2.cos, g2.sin
        # The two special inputs of pair i: q = i (head share c1, tail share s1) and q = L+i (−s1, c1).
        head_share = torch.stack([c1, -s1]) * sigma / math.sqrt(length)
        tail_share = torch.stack([s1, c1])
        mask = torch.stack([in_w[:r], in_w[length:]])
        rest = (total - (torch.stack([c1, s1]).abs().pow(order) * mask).sum(0)) * scale
        head_rows = c2.abs().pow(order) * rest + (
            (c2 * head_share - s2 * tail_share).abs().pow(order) * mask
        ).sum(0)
        tail_rows = s2.abs().pow(order) * rest + (
            (s2 * head_share + c2 * tail_share).abs().pow(order) * mask
        ).sum(0)
        rows[:r] = head_rows
        rows[length:] = tail_rows
    return perm_out.forward(rows).pow(1.0 / order)
