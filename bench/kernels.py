"""``python -m bench kernels``: encode + decode time of the fast key, as a ratio to one vector copy.

For each paper model size (docs/method.md "The paper's experiments": n = 199,210 / 582,026 / 1,199,882 with
ñ = 199,411 / 582,539 / 1,200,011) and each left inverse, time ``decode(encode(w, r))`` (one server
encode with fresh noise, one decode: the coding work of a round on one vector) and one float64 copy of
``w`` into a preallocated vector, alternating the two so both see the same machine state (load from other
processes, caches), over several repetitions. The copy goes into preallocated memory because a fresh
multi-megabyte tensor may or may not need new pages from the OS, which makes ``clone()`` vary 4x from one
call to the next; the encode/decode times include their own allocations. The ratio is
median(code) / median(copy); the spread is the 25th–75th percentile of the per-repetition ratios.
Runs on CPU and, when available, CUDA (synchronised).

The last line is ``RESULT kernels ratio=<worst ratio> target=100``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from sifl_ray.coding import make_server_key
from sifl_ray.coding.base import CODING_DTYPE

PAPER_SIZES = ((199_210, 199_411), (582_026, 582_539), (1_199_882, 1_200_011))
SMALL_SIZES = ((1_000, 1_031), (20_000, 20_129))
TARGET = 100.0


def _timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def measure(
    *,
    n: int,
    n_tilde: int,
    left_inverse: str,
    device: torch.device,
    reps: int,
    warmup: int,
    perm_block: int = 1,
) -> dict:
    """Time encode+decode (and each alone) against a copy of ``w``, alternating, ``reps`` times."""
    key = make_server_key(
        n=n,
        n_tilde=n_tilde,
        backend="fast",
        left_inverse=left_inverse,
        alpha=1e-3,
        beta=1e3,
        seed=b"bench-kernels".ljust(32, b"\0"),
        perm_block=perm_block,
        device=device,
    )
    gen = torch.Generator(device=device).manual_seed(0)
    w = 0.05 * torch.randn(n, generator=gen, dtype=CODING_DTYPE, device=device)
    r = 1e3 * torch.randn(n_tilde - n, generator=gen, dtype=CODING_DTYPE, device=device)
    encoded = key.encode(w, r)
    error = float((key.decode(encoded) - w).abs().max())
    buffer = torch.empty_like(w)
    copy, code, enc, dec = [], [], [], []
    for i in range(warmup + reps):
        t_copy = _timed(lambda: buffer.copy_(w), device)
        t_code = _timed(lambda: key.decode(key.encode(w, r)), device)
        t_enc = _timed(lambda: key.encode(w, r), device)
        t_dec = _timed(lambda: key.decode(encoded), device)
        if i >= warmup:
            copy.append(t_copy)
            code.append(t_code)
            enc.append(t_enc)
            dec.append(t_dec)
    ratios = [c / k for c, k in zip(code, copy, strict=True)]
    med_copy, med_code = statistics.median(copy), statistics.median(code)
    return {
        "device": str(device),
        "left_inverse": left_inverse,
        "perm_block": perm_block,
        "n": n,
        "n_tilde": n_tilde,
        "reps": reps,
        "copy_ms": med_copy * 1e3,
        "encode_decode_ms": med_code * 1e3,
        "encode_ms": statistics.median(enc) * 1e3,
        "decode_ms": statistics.median(dec) * 1e3,
        "ratio": med_code / med_copy,
        "ratio_p25": _quantile(ratios, 0.25),
        "ratio_p75": _quantile(ratios, 0.75),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "max_decode_error": error,
    }


def _table(rows: list[dict]) -> str:
    head = (
        f"{'device':6} {'P1L':8} {'n':>9} {'ñ':>9} {'copy ms':>8} {'enc ms':>8} {'dec ms':>8} "
        f"{'enc+dec':>8} {'ratio':>7} {'p25–p75':>13} {'max err':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['device']:6} {r['left_inverse']:8} {r['n']:9d} {r['n_tilde']:9d} {r['copy_ms']:8.3f} "
            f"{r['encode_ms']:8.2f} {r['decode_ms']:8.2f} {r['encode_decode_ms']:8.2f} {r['ratio']:7.1f} "
            f"{r['ratio_p25']:6.1f}–{r['ratio_p75']:<6.1f} {r['max_decode_error']:9.1e}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench kernels``: time each coding kernel against a copy of the same size, print the ratios,
    write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results/kernels.json", help="JSON output path")
    parser.add_argument("--reps", type=int, default=11, help="timed repetitions per case (default 11)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--sizes",
        choices=("paper", "small"),
        default="paper",
        help="paper: the three paper models; small: two quick sizes (tests)",
    )
    parser.add_argument("--left-inverse", choices=("both", "pinv", "oblique"), default="both")
    parser.add_argument(
        "--perm-block", type=int, default=1, help="input-permutation block of the fast key (default 1: full)"
    )
    parser.add_argument(
        "--devices", default="auto", help="comma list of cpu,cuda (default: cpu + cuda if present)"
    )
    args = parser.parse_args(argv)

    if args.devices == "auto":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    inverses = ("pinv", "oblique") if args.left_inverse == "both" else (args.left_inverse,)
    sizes = PAPER_SIZES if args.sizes == "paper" else SMALL_SIZES
    rows = []
    for dev in devices:
        device = torch.device(dev)
        for n, n_tilde in sizes:
            for left_inverse in inverses:
                rows.append(
                    measure(
                        n=n,
                        n_tilde=n_tilde,
                        left_inverse=left_inverse,
                        device=device,
                        reps=args.reps,
                        warmup=args.warmup,
                        perm_block=args.perm_block,
                    )
                )
    worst = max(r["ratio"] for r in rows)
    print(_table(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "target": TARGET,
        "worst_ratio": worst,
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {out}")
    print(f"RESULT kernels ratio={worst:.1f} target={TARGET:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
