"""Derive the achieved-rate fractions of kvplan.formulas.batch_step from measured vLLM kernels.

    python scripts/derive_achieved.py AICONFIGURATOR_DATA_DIR [--gpu h100_sxm] [--version 0.14.0]

The data are NVIDIA aiconfigurator's silicon tables (github.com/ai-dynamo/aiconfigurator,
aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/vllm/<version>/*.parquet, commit
095f58a5): per-kernel latencies of vLLM's own GEMM, fused-MoE, attention, MLA and custom
all-reduce kernels measured on the GPU, one kernel at a time. They are kernel microbenchmarks,
not serving results, so fitting to them does not touch what `kvplan simulate` predicts.

For each kernel family the fraction is the median over the table's shapes of
roofline time / measured time, where the roofline uses the datasheet rates:
  - compute side: FLOPs / dense peak, over the compute-bound shapes (large token counts);
  - memory side: bytes / memory bandwidth, over the memory-bound shapes (few tokens).
Needs pyarrow (not a kvplan dependency): run it from a throwaway environment.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

DATASHEET = {  # bandwidth, dense peaks (FLOP/s), as kvplan's hardware profiles state them
    "h100_sxm": (3.35e12, {"bf16": 989.4e12, "fp8": 1978.9e12}),
    "h200_sxm": (4.8e12, {"bf16": 989.4e12, "fp8": 1978.9e12}),
    "a100_sxm": (2.039e12, {"bf16": 312e12, "fp8": 312e12}),
}
BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_block": 1 + 4 / 128 / 128,
    "int4_wo": 0.5 + 4 / 128,
}
PEAK_KEY = {
    "bfloat16": "bf16",
    "float16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8",
    "int4_wo": "bf16",
}


# kvplan's pair for bf16 experts (the H100 table's medians), used where a GPU's table has no
# balanced-routing rows to derive its own pair from (the A100's)
KVPLAN_H100_BF16_EXPERTS = (0.19, 0.69)


def table(root: Path, gpu: str, op: str, name: str, version: str) -> list[dict]:
    import pyarrow.parquet as pq

    path = root / gpu / op / "vllm" / version / f"{name}.parquet"
    return pq.read_table(path).to_pylist()


def gemm(rows, bw, peaks) -> dict:
    out = {}
    for dtype in sorted({r["gemm_dtype"] for r in rows}):
        sel = [r for r in rows if r["gemm_dtype"] == dtype]
        peak = peaks[PEAK_KEY[dtype]]
        compute = [
            2 * r["m"] * r["n"] * r["k"] / (r["latency"] * 1e-3) / peak
            for r in sel
            if r["m"] >= 4096 and 2048 <= r["n"] <= 32768 and 2048 <= r["k"] <= 32768
        ]
        memory = [
            r["n"] * r["k"] * BYTES[dtype] / (r["latency"] * 1e-3) / bw
            for r in sel
            if r["m"] <= 16 and r["n"] * r["k"] >= 16e6
        ]
        if compute and memory:
            out[dtype] = (statistics.median(compute), statistics.median(memory))
    return out


def _moe_row(r: dict) -> tuple[int, float, float, float, float]:
    """One fused-MoE row: (tokens, tokens per expert, the bytes of the experts the tokens touch
    under uniform routing, FLOPs, measured seconds), on one rank."""
    h, inter, k, experts = r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]
    tokens, tp = r["num_tokens"], r["moe_tp_size"]
    touched = experts * (1 - (1 - k / experts) ** tokens)
    weights = touched * 3 * h * inter / tp * BYTES[r["moe_dtype"]]
    flops = 2 * 3 * h * inter / tp * tokens * k
    return tokens, tokens * k / experts, weights, flops, r["latency"] * 1e-3


def moe(rows, bw, peaks) -> dict:
    out = {}
    rows = [r for r in rows if r["distribution"] == "balanced" and r["moe_ep_size"] == 1]
    for dtype in sorted({r["moe_dtype"] for r in rows}):
        compute, memory = [], []
        for r in rows:
            if r["moe_dtype"] != dtype:
                continue
            tokens, per_expert, weights, flops, seconds = _moe_row(r)
            memory_s, compute_s = weights / bw, flops / peaks[PEAK_KEY[dtype]]
            if tokens >= 4096:
                compute.append(compute_s / seconds)
            elif 16 <= tokens <= 256 and memory_s > compute_s:
                memory.append(memory_s / seconds)
        if compute and memory:
            out[dtype] = (statistics.median(compute), statistics.median(memory))
    return out


def moe_curve(rows, bw, peaks) -> dict:
    """Per weights dtype, the fused-MoE kernel's slowdown against the datasheet roofline
    (measured / max(touched expert bytes / BW, FLOPs / peak)) as a function of the tokens each
    expert gets on average (tokens x top-k / experts): medians over the table's shapes and TP
    sizes in power-of-two buckets. Routing: power_law_1.01 (skewed like a real router; the only
    distribution the A100 table has)."""
    out = {}
    rows = [r for r in rows if r["distribution"] == "power_law_1.01" and r["moe_ep_size"] == 1]
    for dtype in sorted({r["moe_dtype"] for r in rows}):
        buckets: dict[float, list[float]] = {}
        for r in rows:
            if r["moe_dtype"] != dtype:
                continue
            tokens, per_expert, weights, flops, seconds = _moe_row(r)
            ideal = max(weights / bw, flops / peaks[PEAK_KEY[dtype]])
            key = 2.0 ** round(math.log2(per_expert)) if per_expert >= 1 else 0.5
            buckets.setdefault(key, []).append(seconds / ideal)
        out[dtype] = tuple(
            (key, round(statistics.median(v), 2)) for key, v in sorted(buckets.items())
        )
    return out


def compare_moe(rows, bw, peaks, pairs: dict) -> dict:
    """How well each fused-MoE model fits the table, as the median |log(predicted / measured)|
    over its power-law rows: the pair of fractions (`pairs`, max of the two roofs), the curve over
    tokens per expert fitted on every shape, the same curve with each shape left out of its own
    fit, and a grid over tokens per expert and the expert's width on a rank (power-of-two
    buckets, 128-4,096 wide), each shape left out. The last two are what a model unseen by the
    table would get."""
    rows = [r for r in rows if r["distribution"] == "power_law_1.01" and r["moe_ep_size"] == 1]

    def bucket(x: float, low: float = 0.5, high: float = float("inf")) -> float:
        return min(high, max(low, 2.0 ** round(math.log2(x)) if x >= 1 else 0.5))

    out = {}
    for dtype in sorted({r["moe_dtype"] for r in rows}):
        data = []
        for r in rows:
            if r["moe_dtype"] != dtype:
                continue
            tokens, per_expert, weights, flops, seconds = _moe_row(r)
            peak = peaks[PEAK_KEY[dtype]]
            compute, memory = pairs.get(dtype, (None, None))
            pair = max(weights / (bw * memory), flops / (peak * compute)) if compute else None
            ideal = max(weights / bw, flops / peak)
            shape = (r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"])
            width = r["inter_size"] / r["moe_tp_size"]
            data.append((shape, bucket(per_expert), bucket(width, 128, 4096), ideal, pair, seconds))
        errors = {"pair": [], "curve": [], "curve, shape left out": [], "grid, shape left out": []}
        every = {}
        for _, t, _, ideal, _, seconds in data:
            every.setdefault(t, []).append(seconds / ideal)
        every = {t: statistics.median(v) for t, v in every.items()}
        for shape in sorted({d[0] for d in data}):
            curve, grid = {}, {}
            for other, t, w, ideal, _, seconds in data:
                if other != shape:
                    curve.setdefault(t, []).append(seconds / ideal)
                    grid.setdefault((t, w), []).append(seconds / ideal)
            curve = {t: statistics.median(v) for t, v in curve.items()}
            grid = {key: statistics.median(v) for key, v in grid.items()}
            for other, t, w, ideal, pair, seconds in data:
                if other != shape:
                    continue
                if pair:
                    errors["pair"].append(abs(math.log(pair / seconds)))
                errors["curve"].append(abs(math.log(ideal * every[t] / seconds)))
                if t in curve:
                    errors["curve, shape left out"].append(
                        abs(math.log(ideal * curve[t] / seconds))
                    )
                    slow = grid.get((t, w), curve[t])
                    errors["grid, shape left out"].append(abs(math.log(ideal * slow / seconds)))
        out[dtype] = {name: statistics.median(v) for name, v in errors.items() if v}
    return out


DSA_GPUS = {"h100_sxm": "H100 SXM", "h200_sxm": "H200 SXM"}
DSA_VERSION = "0.19.0"  # the first vLLM with MLA and DSA module tables in aiconfigurator


def _module_grid(rows, x_key: str, batches, lengths) -> dict:
    """{(heads, kv dtype): {(batch, x): seconds}} for one module table, block-fp8 weights, on
    the full (batches x lengths) grid: a cell the table lacks (large batch x length, where the
    collector ran out of memory) is its nearest smaller measured batch's scaled by the batch ratio
    (the module is linear in tokens there), else its nearest measured length's."""
    out: dict = {}
    for r in rows:
        if r["gemm_type"] != "fp8_block":
            continue
        key = (r["num_heads"], r["kv_cache_dtype"])
        out.setdefault(key, {})[(r["batch_size"], r[x_key])] = r["latency"] * 1e-3
    for cells in out.values():
        for x in lengths:
            known = [b for b in batches if (b, x) in cells]
            for b in batches:
                if (b, x) not in cells and known:
                    below = max((k for k in known if k < b), default=min(known))
                    cells[(b, x)] = cells[(below, x)] * b / below
        for b in batches:
            known = [x for x in lengths if (b, x) in cells]
            for x in lengths:
                if (b, x) not in cells:
                    near = min(known, key=lambda k: abs(math.log(k / x)))
                    cells[(b, x)] = cells[(b, near)]
    return out


def dsa_delta(root: Path, gpu: str) -> dict:
    """DeepSeek-V3.2's sparse attention module (indexer, top-k, sparse MLA) less DeepSeek-V3's
    dense MLA module, per layer on one rank, from vLLM's own module tables on this GPU: the same
    projections, so the difference is what DSA adds (or saves, at long contexts). Keys: phase
    ("decode": batch x tokens held; "prefill": sequences x prompt tokens), heads on the rank, kv
    dtype; values: {(batch, length): seconds}."""
    base = root / gpu
    out = {}
    for phase, mla_path, dsa_path, x_key in (
        ("decode", "mla/vllm/{v}/mla_generation_module_perf.parquet",
         "sparse_attention/vllm/{v}/dsa_generation_module_perf.parquet", "step"),
        ("prefill", "mla/vllm/{v}/mla_context_module_perf.parquet",
         "sparse_attention/vllm/{v}/dsa_context_module_perf.parquet", "isl"),
    ):  # fmt: skip
        import pyarrow.parquet as pq

        mla_rows = pq.read_table(base / mla_path.format(v=DSA_VERSION)).to_pylist()
        dsa_rows = [
            r
            for r in pq.read_table(base / dsa_path.format(v=DSA_VERSION)).to_pylist()
            if r["model"] == "deepseek-ai/DeepSeek-V3.2"
        ]
        batches = sorted({r["batch_size"] for r in mla_rows + dsa_rows})
        lengths = sorted({r[x_key] for r in mla_rows + dsa_rows})
        mla = _module_grid(mla_rows, x_key, batches, lengths)
        dsa = _module_grid(dsa_rows, x_key, batches, lengths)
        for key in sorted(set(mla) & set(dsa)):
            out[(phase, *key)] = {
                (b, x): dsa[key][(b, x)] - mla[key][(b, x)] for b in batches for x in lengths
            }
    return out


def write_dsa_module(root: Path, path: Path) -> None:
    """kvplan/formulas/dsa_tables.py: the DSA-minus-MLA grids of every GPU with tables."""
    lines = [
        '"""Generated by scripts/derive_achieved.py --write-dsa from NVIDIA aiconfigurator\'s silicon',
        f"tables of vLLM {DSA_VERSION}'s attention modules (ai-dynamo/aiconfigurator, systems/data/<gpu>/",
        "mla/vllm and sparse_attention/vllm): do not edit. Per GPU, phase, heads on a rank and KV",
        "dtype: DeepSeek-V3.2's DSA attention module less DeepSeek-V3's MLA module, microseconds per",
        'layer, over (batch, length): rows follow BATCHES[phase], columns LENGTHS[phase]."""',
        "",
        "# fmt: off",
    ]
    grids = {name: dsa_delta(root, gpu) for gpu, name in DSA_GPUS.items()}
    axes = {}
    for phase in ("decode", "prefill"):
        sample = next(v for (ph, *_), v in next(iter(grids.values())).items() if ph == phase)
        axes[phase] = (sorted({b for b, _ in sample}), sorted({x for _, x in sample}))
    lines.append("BATCHES = " + repr({ph: tuple(b) for ph, (b, _) in axes.items()}))
    lines.append("LENGTHS = " + repr({ph: tuple(x) for ph, (_, x) in axes.items()}))
    lines += ["DSA_DELTA_US = {"]
    for name, grid in grids.items():
        lines.append(f"    {name!r}: {{")
        for (phase, heads, kv), cells in sorted(grid.items()):
            batches, lengths = axes[phase]
            rows = tuple(tuple(round(cells[(b, x)] * 1e6, 1) for x in lengths) for b in batches)
            lines.append(f"        ({phase!r}, {heads}, {kv!r}): (")
            lines += [f"            {row!r}," for row in rows]
            lines.append("        ),")
        lines.append("    },")
    lines += ["}", "# fmt: on", ""]
    path.write_text("\n".join(lines))


def attention(context_rows, generation_rows, bw, peaks) -> dict:
    compute = [
        4
        * r["batch_size"]
        * r["num_heads"]
        * r["head_dim"]
        * r["isl"] ** 2
        / 2
        / (r["latency"] * 1e-3)
        / peaks["bf16"]
        for r in context_rows
        if r["isl"] >= 4096 and r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16"
    ]
    memory = []
    for r in generation_rows:
        if r["kv_cache_dtype"] != "bfloat16":
            continue
        context = r["isl"] + r["step"]
        kv = r["batch_size"] * context * r["num_key_value_heads"] * r["head_dim"] * 2 * 2
        if kv >= 256e6:
            memory.append(kv / (r["latency"] * 1e-3) / bw)
    return {"attention": (statistics.median(compute), statistics.median(memory))}


def mla(context_rows, generation_rows, bw, peaks) -> dict:
    compute = [
        # un-absorbed prefill: per head QK^T over 192 dims and AV over 128, causal
        2
        * r["batch_size"]
        * r["num_heads"]
        * (192 + 128)
        * r["isl"] ** 2
        / 2
        / (r["latency"] * 1e-3)
        / peaks["bf16"]
        for r in context_rows
        if r["isl"] >= 4096 and r["mla_dtype"] == "bfloat16"
    ]
    memory = []
    for r in generation_rows:
        if r["kv_cache_dtype"] != "bfloat16":
            continue
        latent = r["batch_size"] * (r["isl"] + r["step"]) * 576 * 2
        if latent >= 256e6:
            memory.append(latent / (r["latency"] * 1e-3) / bw)
    return {"mla": (statistics.median(compute), statistics.median(memory))}


def allreduce(rows, one_way_bytes_per_s: float) -> dict:
    out = {}
    for gpus in sorted({r["num_gpus"] for r in rows}):
        sel = [r for r in rows if r["num_gpus"] == gpus and r["backend"] == "vllm_graph"]
        small = min(sel, key=lambda r: r["message_size"])
        large = max(sel, key=lambda r: r["message_size"])
        bus = 2 * (gpus - 1) / gpus * large["message_size"] / (large["latency"] * 1e-3)
        out[gpus] = (small["latency"] * 1e-3, bus / one_way_bytes_per_s)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", type=Path, help="aiconfigurator's systems/data folder")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--version", default="0.14.0")
    parser.add_argument("--nvlink-one-way", type=float, default=450e9)
    parser.add_argument(
        "--write-dsa", type=Path, help="write the DSA-minus-MLA module grids to this module"
    )
    args = parser.parse_args()
    if args.write_dsa:
        write_dsa_module(args.data, args.write_dsa)
        print(f"wrote {args.write_dsa}")
        return
    bw, peaks = DATASHEET[args.gpu]
    v, g = args.version, args.gpu
    print(f"{g}, vLLM {v}: (compute fraction, memory fraction), medians")
    for name, result in (
        ("gemm", gemm(table(args.data, g, "gemm", "gemm_perf", v), bw, peaks)),
        ("moe", moe(table(args.data, g, "moe", "moe_perf", v), bw, peaks)),
        (
            "attention",
            attention(
                table(args.data, g, "attention", "context_attention_perf", v),
                table(args.data, g, "attention", "generation_attention_perf", v),
                bw,
                peaks,
            ),
        ),
        (
            "mla",
            mla(
                table(args.data, g, "mla", "context_mla_perf", v),
                table(args.data, g, "mla", "generation_mla_perf", v),
                bw,
                peaks,
            ),
        ),
    ):
        for key, (compute, memory) in result.items():
            print(f"  {name:10} {key:10} compute {compute:.2f}  memory {memory:.2f}")
    moe_rows = table(args.data, g, "moe", "moe_perf", v)
    for key, curve in moe_curve(moe_rows, bw, peaks).items():
        print(f"  moe curve  {key:10} (tokens per expert, slowdown): {curve}")
    pairs = {dtype: fractions for dtype, fractions in moe(moe_rows, bw, peaks).items()} or {
        "bfloat16": KVPLAN_H100_BF16_EXPERTS
    }
    for key, fits in compare_moe(moe_rows, bw, peaks, pairs).items():
        shown = ", ".join(f"{name} {value:.3f}" for name, value in fits.items())
        print(f"  moe fit    {key:10} median |log error|: {shown}")
    for gpus, (latency, fraction) in allreduce(
        table(args.data, g, "comm", "custom_allreduce_perf", v), args.nvlink_one_way
    ).items():
        print(
            f"  allreduce  {gpus} GPUs  smallest message {latency * 1e6:.1f} us, "
            f"bus bandwidth {fraction:.2f} of one NVLink direction"
        )


if __name__ == "__main__":
    main()
