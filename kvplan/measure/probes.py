"""Device probes: memory bandwidth (STREAM copy, triad, read; arrays >= 4x the last-level cache),
the bandwidth a batch-1 weight-streaming matmul achieves, and the matmul peak."""

from __future__ import annotations

import torch

from kvplan.measure.timing import Timing, time_fn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _result(name: str, timing: Timing, num_bytes: float = 0, flops: float = 0) -> dict:
    out = {"name": name, **timing.to_json()}
    if num_bytes:
        out["bytes"] = num_bytes
        out["bytes_per_s_median"] = num_bytes / timing.median_s
        out["bytes_per_s_best"] = num_bytes / min(timing.p20_s, timing.median_s)
    if flops:
        out["flops"] = flops
        out["flop_per_s_median"] = flops / timing.median_s
    return out


def bandwidth(device: str, array_bytes: int, runs: int) -> dict:
    """STREAM-style: copy counts read + write (2 arrays), triad 3, read-only 1."""
    n = array_bytes // 4
    a = torch.randn(n, device=device)
    b = torch.randn(n, device=device)
    c = torch.empty(n, device=device)
    kw = dict(device=device, min_runs=runs, max_runs=runs, min_total_s=0.0)
    flush = (lambda: None) if device == "cuda" else None  # arrays >> cache already
    return {
        "copy": _result("copy", time_fn(lambda: c.copy_(a), flush=flush, **kw), 2 * 4 * n),
        "triad": _result(
            "triad",
            time_fn(lambda: torch.add(b, a, alpha=2.0, out=c), flush=flush, **kw),
            3 * 4 * n,
        ),
        "read": _result("read", time_fn(lambda: a.sum(), flush=flush, **kw), 4 * n),
        "array_bytes": 4 * n,
    }


def matvec_probe(device: str, dtype: str, matrix_bytes: int):
    """(callable, bytes streamed, FLOPs): batch-1 y = W x over a matrix larger than the caches,
    the kernel class a decode step spends its weight reads in."""
    cols = 4096
    element = torch.finfo(DTYPES[dtype]).bits // 8
    rows = max(1024, matrix_bytes // (cols * element))
    w = torch.randn(rows, cols, device=device).to(DTYPES[dtype])
    x = torch.randn(cols, device=device).to(DTYPES[dtype])
    return (lambda: torch.mv(w, x)), rows * cols * element, 2 * rows * cols


def stream_matvec(device: str, dtype: str, matrix_bytes: int, runs: int) -> dict:
    """The matvec probe's bytes/s: what calibrates the decode predictions."""
    fn, num_bytes, flops = matvec_probe(device, dtype, matrix_bytes)
    timing = time_fn(fn, device=device, min_runs=runs, max_runs=runs, min_total_s=0.0)
    return _result("matvec", timing, num_bytes, flops)


def matmul_peak(device: str, dtype: str, size: int, runs: int) -> dict:
    """A square GEMM with random-normal data (zeros run faster on GPUs: less power)."""
    a = torch.randn(size, size, device=device).to(DTYPES[dtype])
    b = torch.randn(size, size, device=device).to(DTYPES[dtype])
    timing = time_fn(
        lambda: a @ b, device=device, min_runs=runs, max_runs=runs * 3, min_total_s=0.05
    )
    return _result(f"matmul_{dtype}_{size}", timing, flops=2 * size**3)


def fp8_matmul_peak(size: int, runs: int) -> dict | None:
    """fp8 e4m3 GEMM through torch._scaled_mm, where the GPU supports it."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None
    try:
        a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        timing = time_fn(
            lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
            device="cuda",
            min_runs=runs,
            max_runs=runs * 3,
            min_total_s=0.05,
        )
    except RuntimeError:
        return None
    return _result(f"matmul_fp8_{size}", timing, flops=2 * size**3)
