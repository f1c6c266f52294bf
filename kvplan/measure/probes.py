"""Device probes: the operators a profile is built from, none of them a predicted point.

- stream: copy, triad and read over arrays at least 4x the last-level cache;
- matmul: y = x W^T (torch.nn.functional.linear, as the workload runs its layers) with x of M
  rows: skinny GEMMs at M = 1-64 over a generic DRAM-resident matrix (K = 4096, not a model's
  widths), batch 1 also at K = 1024 and 16384 (the weight-streaming rate by row length), and the
  same M over a matrix that stays in cache (the arithmetic rate where a DRAM probe
  only shows the memory); prefill's M over a square matrix (8192^2 on a GPU, 4096^2 on a CPU);
- decode attention: the workload's own paged attention (one layer's head geometry) over KV lengths
  that are not the sweep's;
- prefill attention: causal attention over prompt lengths that are not the sweep's;
- overhead: a one-element add, the fixed cost of one launch (50 back to back per call); and a
  GEMM's own fixed cost: the cache-resident matrix's batch-1 product with the caches flushed,
  less its bytes at the matmul bandwidth.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from kvplan.measure.timing import Item
from kvplan.record import NamedTuple

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SKINNY_ROWS = (1, 2, 4, 8, 16, 32, 64)
PROBE_K = 4096  # input features of the generic skinny-GEMM matrix
BANDWIDTH_K = (1024, 16384)  # more batch-1 row lengths: a matvec streams long rows faster
OVERHEAD_CALLS = 50


class Probe(NamedTuple):
    key: str
    kind: str  # stream | matmul | matmul_cache | matmul_bandwidth | matmul_start |
    # decode_attention | prefill_attention | overhead
    size: int  # rows (matmul), input width (matmul_bandwidth), KV or prompt tokens (attention)
    flops: float
    bytes: float
    item: Item


class ProbePlan(NamedTuple):
    stream_bytes: int
    skinny_matrix_bytes: int
    cache_matrix_rows: int
    square: int  # square GEMM size (0: prefill's rows over the skinny probes' DRAM matrix)
    square_rows: tuple[int, ...]
    decode_tokens: tuple[int, ...]
    prefill_tokens: tuple[int, ...]


def _rand(*shape, dtype, device):
    return torch.randn(*shape, device=device).to(DTYPES[dtype])


def stream_probes(device: str, num_bytes: int) -> list[Probe]:
    """STREAM-style, fp32: copy counts read + write (2 arrays), triad 3, read-only 1."""
    n = num_bytes // 4
    a = torch.randn(n, device=device)
    b = torch.randn(n, device=device)
    c = torch.empty(n, device=device)
    cold = device == "cuda"  # CPU arrays are 4x the cache already
    cases = [
        ("copy", lambda: c.copy_(a), 2 * 4 * n),
        ("triad", lambda: torch.add(b, a, alpha=2.0, out=c), 3 * 4 * n),
        ("read", lambda: a.sum(), 4 * n),
    ]
    return [
        Probe(
            f"stream:{name}",
            "stream",
            0,
            0,
            moved,
            Item(f"stream:{name}", f"stream {name}", fn, cold),
        )
        for name, fn, moved in cases
    ]


def _linear_probe(key: str, kind: str, size: int, x, weight, element: int, label: str, cold: bool):
    """A probe of F.linear(x, weight): 2 x x's rows x the weight's elements FLOPs, the weight's
    bytes moved (`element` bytes each)."""
    flops = 2 * x.shape[0] * weight.numel()
    item = Item(key, label, partial(F.linear, x, weight), cold)
    return Probe(key, kind, size, flops, weight.numel() * element, item)


def matmul_probes(device: str, dtype: str, plan: ProbePlan) -> list[Probe]:
    element = torch.finfo(DTYPES[dtype]).bits // 8
    rows = max(1024, plan.skinny_matrix_bytes // (PROBE_K * element))
    big = _rand(rows, PROBE_K, dtype=dtype, device=device)
    small = _rand(plan.cache_matrix_rows, PROBE_K, dtype=dtype, device=device)
    square = _rand(plan.square, plan.square, dtype=dtype, device=device) if plan.square else big
    cold = device == "cuda"
    probes = []
    for m in SKINNY_ROWS:
        x = _rand(m, PROBE_K, dtype=dtype, device=device)
        label = f"matmul {m} x {PROBE_K} x {rows}"
        probes.append(_linear_probe(f"matmul:m={m}", "matmul", m, x, big, element, label, cold))
        label = f"matmul {m} rows, in cache"
        key = f"matmul_cache:m={m}"
        probes.append(_linear_probe(key, "matmul_cache", m, x, small, element, label, False))
    for k in BANDWIDTH_K:
        w = _rand(max(64, plan.skinny_matrix_bytes // (k * element)), k, dtype=dtype, device=device)
        x = _rand(1, k, dtype=dtype, device=device)
        key, label = f"matmul_bandwidth:k={k}", f"matmul 1 x {k} x {w.shape[0]}"
        probes.append(_linear_probe(key, "matmul_bandwidth", k, x, w, element, label, cold))
    # a small GEMM found cold: its time beyond its bytes is what every GEMM costs to start
    x = _rand(1, PROBE_K, dtype=dtype, device=device)
    label = "matmul 1 row, cold, small"
    probes.append(_linear_probe("matmul_start", "matmul_start", 1, x, small, element, label, True))
    for m in plan.square_rows:
        x = _rand(m, square.shape[1], dtype=dtype, device=device)
        label = f"matmul {m} x {plan.square}^2"
        probes.append(_linear_probe(f"matmul:m={m}", "matmul", m, x, square, element, label, cold))
    return probes


def overhead_probe(device: str) -> Probe:
    a = torch.ones(1, device=device)
    out = torch.empty(1, device=device)

    def run():
        for _ in range(OVERHEAD_CALLS):
            torch.add(a, a, out=out)

    return Probe(
        "overhead", "overhead", OVERHEAD_CALLS, 0, 0, Item("overhead", "launch overhead", run)
    )
