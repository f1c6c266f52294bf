"""Paged decode attention benchmark (issue 5): achieved GB/s of KV read by the fast paged path,
next to torch SDPA on the same data stored contiguously, and a plain copy of the same bytes.

    python scripts/bench_paged_decode.py [--device cpu|cuda] [--dtype fp32] [--threads 2]

Default shape: batch 8, context 4096, 32 query heads over 8 KV heads, head_dim 128, block 16.
"""

from __future__ import annotations

import argparse
import json

import torch

from kvplan.kernels import paged_decode_attention
from kvplan.measure.timing import summarize, time_fn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", choices=DTYPES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev, dtype = args.device, DTYPES[args.dtype]
    b, s, hq, hkv, d, bs = (
        args.batch,
        args.context,
        args.q_heads,
        args.kv_heads,
        args.head_dim,
        args.block_size,
    )
    blocks = b * s // bs
    key_cache = torch.randn(blocks, bs, hkv, d, device=dev).to(dtype)
    value_cache = torch.randn(blocks, bs, hkv, d, device=dev).to(dtype)
    table = torch.randperm(blocks, device=dev).view(b, s // bs).to(torch.int32)  # no reuse
    lens = torch.full((b,), s, dtype=torch.int32, device=dev)
    query = torch.randn(b, hq, d, device=dev).to(dtype)
    # The same K/V, stored contiguously [B, Hkv, S, D] for SDPA.
    order = table.long().flatten()
    k_contig = key_cache[order].view(b, s, hkv, d).transpose(1, 2).contiguous()
    v_contig = value_cache[order].view(b, s, hkv, d).transpose(1, 2).contiguous()
    kv_bytes = 2 * b * s * hkv * d * key_cache.element_size()
    impl = "triton" if dev == "cuda" else "torch"

    def paged():
        paged_decode_attention(query, key_cache, value_cache, table, lens, impl=impl)

    def sdpa():
        torch.nn.functional.scaled_dot_product_attention(
            query.view(b, hq, 1, d), k_contig, v_contig, enable_gqa=True
        )

    src = torch.empty(kv_bytes // 4, dtype=torch.float32, device=dev).normal_()
    dst = torch.empty_like(src)
    cases = (
        ("paged_" + impl, paged, kv_bytes),
        ("sdpa_contiguous", sdpa, kv_bytes),
        ("copy_read_plus_write", lambda: dst.copy_(src), 2 * kv_bytes),
    )
    # Interleaved rounds: machine drift (shared VMs vary +-20%) hits every case alike.
    samples = {name: [] for name, _, _ in cases}
    for _ in range(args.rounds):
        for name, fn, _ in cases:
            samples[name].append(
                time_fn(fn, device=dev, min_runs=1, max_runs=1, min_total_s=0.0).median_s
            )
    results = {}
    for name, _, moved in cases:
        t = summarize(samples[name])
        results[name] = {
            "median_ms": t.median_s * 1e3,
            "p20_ms": t.p20_s * 1e3,
            "p80_ms": t.p80_s * 1e3,
            "gb_per_s": moved / t.median_s / 1e9,
        }
    ratio = results["sdpa_contiguous"]["median_ms"] / results["paged_" + impl]["median_ms"]
    print(
        f"shape: batch {b}, context {s}, {hq} query heads over {hkv} KV heads, head_dim {d}, "
        f"block {bs}, {args.dtype}, device {dev}, {torch.get_num_threads()} threads"
    )
    print(f"KV read per call: {kv_bytes / 1e6:,.1f} MB")
    for name, r in results.items():
        print(
            f"{name:24s} median {r['median_ms']:8.2f} ms  (p20 {r['p20_ms']:.2f}, p80 "
            f"{r['p80_ms']:.2f})  {r['gb_per_s']:7.2f} GB/s"
        )
    print(f"paged / contiguous SDPA speed: {ratio:.2f}x (target >= 0.80x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"args": vars(args), "results": results, "ratio_vs_sdpa": ratio}, fh, indent=2
            )


if __name__ == "__main__":
    main()
