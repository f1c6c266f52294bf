"""Paged decode attention against the fastest contiguous formulation, and a copy of the same bytes.

    python scripts/bench_paged_decode.py [--device cpu|cuda] [--dtype fp32] [--threads 1]

For each shape, in interleaved rounds (shared machines drift): the paged kernels over shuffled
blocks (on a CPU the torch path and the native C kernel, when it builds; Triton on CUDA); grouped-query SDPA on the same K/V stored contiguously,
in its fastest form (the G query heads of a KV head folded into the query length, one GEMM per KV
head: no mask is needed for one new token) and with enable_gqa; a device copy of the KV bytes. The
ceiling first (the copy), then each kernel's KV GB/s and its ratio to the fastest contiguous one.
Speed is reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from kvplan.kernels import available_impls, paged_decode_attention

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# (batch, context): batch 1 is where a kernel must split the KV to use the device
SHAPES = ((1, 4096), (1, 16384), (8, 4096), (32, 1024))


def cases(batch, context, heads, kv_heads, head_dim, block_size, dtype, device):
    blocks = batch * context // block_size
    key_cache = torch.randn(blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    value_cache = torch.randn(blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    table = torch.randperm(blocks, device=device).view(batch, -1).to(torch.int32)  # no reuse
    lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    query = torch.randn(batch, heads, head_dim, device=device).to(dtype)
    order = table.long().flatten()  # the same K/V, contiguous [B, Hkv, S, D]
    k = key_cache[order].view(batch, context, kv_heads, head_dim).transpose(1, 2).contiguous()
    v = value_cache[order].view(batch, context, kv_heads, head_dim).transpose(1, 2).contiguous()
    group = heads // kv_heads
    folded = query.view(batch, kv_heads, group, head_dim)
    kv_bytes = 2 * k.numel() * k.element_size()
    src = torch.empty(kv_bytes // 4, device=device).normal_()
    dst = torch.empty_like(src)
    impls = ["triton"] if device == "cuda" else ["torch"]
    if device == "cpu" and "native" in available_impls():
        impls.append("native")
    paged = {
        f"paged_{impl}": (
            lambda impl=impl: paged_decode_attention(
                query, key_cache, value_cache, table, lens, max_seq_len=context, impl=impl
            ),
            kv_bytes,
        )
        for impl in impls
    }
    return kv_bytes, {
        **paged,
        "sdpa_grouped_folded": (lambda: F.scaled_dot_product_attention(folded, k, v), kv_bytes),
        "sdpa_enable_gqa": (
            lambda: F.scaled_dot_product_attention(
                query.view(batch, heads, 1, head_dim), k, v, enable_gqa=True
            ),
            kv_bytes,
        ),
        "copy_read_plus_write": (lambda: dst.copy_(src), 2 * kv_bytes),
    }


def timer(device: str, threads: int):
    """Seconds of one call: CUDA events; on a CPU with one thread its CPU time."""
    if device == "cuda":

        def run(fn):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) * 1e-3

        return run
    clock = time.thread_time_ns if threads == 1 else time.perf_counter_ns

    def run(fn):
        t0 = clock()
        fn()
        return (clock() - t0) * 1e-9

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, choices=DTYPES, help="fp32 on CPU, bf16 on GPU")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype_name = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    run = timer(args.device, args.threads)
    report = []
    print(
        f"{args.q_heads} query heads over {args.kv_heads} KV heads, head_dim {args.head_dim}, "
        f"block {args.block_size}, {dtype_name}, {args.device}, {args.threads} thread(s)"
    )
    for batch, context in SHAPES:
        kv_bytes, fns = cases(
            batch,
            context,
            args.q_heads,
            args.kv_heads,
            args.head_dim,
            args.block_size,
            DTYPES[dtype_name],
            args.device,
        )
        samples = {name: [] for name in fns}
        for fn, _ in fns.values():
            fn(), fn()  # warm-up (and Triton's compile)
        for _ in range(args.rounds):
            for name, (fn, _) in fns.items():
                samples[name].append(run(fn))
        rows = {}
        for name, (_, moved) in fns.items():
            median = statistics.median(samples[name])
            rows[name] = {"median_ms": median * 1e3, "gb_per_s": moved / median / 1e9}
        contiguous = min(
            rows["sdpa_grouped_folded"]["median_ms"], rows["sdpa_enable_gqa"]["median_ms"]
        )
        ratios = {
            name: contiguous / row["median_ms"]
            for name, row in rows.items()
            if name[:6] == "paged_"
        }
        print(
            f"batch {batch}, context {context}: KV {kv_bytes / 1e6:,.1f} MB; copy "
            f"{rows['copy_read_plus_write']['gb_per_s']:.1f} GB/s (read + write, the ceiling)"
        )
        for name, row in rows.items():
            if name != "copy_read_plus_write":
                print(f"  {name:22s} {row['median_ms']:9.3f} ms  {row['gb_per_s']:7.2f} GB/s of KV")
        for name, ratio in ratios.items():
            print(f"  {name} / fastest contiguous speed: {ratio:.2f}x")
        report.append(
            {
                "batch": batch,
                "context": context,
                "kv_bytes": kv_bytes,
                **rows,
                "paged_vs_fastest_contiguous": ratios,
            }
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "dtype": dtype_name, "shapes": report}, handle, indent=2)


if __name__ == "__main__":
    main()
