"""Derive the achieved-rate fractions of kvplan.formulas.batch_step from measured vLLM kernels.

    python scripts/derive_achieved.py AICONFIGURATOR_DATA_DIR [--gpu h100_sxm] [--version 0.14.0]
    python scripts/derive_achieved.py AICONFIGURATOR_DATA_DIR --write-tables

--write-tables writes kvplan/data/kernel_tables/<gpu>.<engine>.<version>.json for every GPU in
TABLE_GPUS and engine in the data folder (aiconfigurator-core 0.12.0's wheel,
aiconfigurator_core/systems/data), at the newest version of each table there, with each GPU's
datasheet rates read from kvplan's own hardware_profiles/<profile>.yaml. The vLLM 0.14.0 files of
the H100, H200 and A100 SXM came from aiconfigurator@095f58a5, which that wheel does not hold:
it keeps their fractions and writes only their floors (`floors_s`, from the wheel's
newest vLLM tables of that GPU, with `floors_source`). Their GEMM grids (gemm/<gpu>.vllm.0.14.0
.json, every format timed in a CUDA graph) come from that commit's data folder:

    python scripts/derive_achieved.py GIT_DATA --write-gemm-grids --engine vllm \
        --at-version 0.14.0 --data-source "aiconfigurator@095f58a5 (git), \
        aic-core/src/aiconfigurator_core/systems/data"

The data are NVIDIA aiconfigurator's silicon tables (github.com/ai-dynamo/aiconfigurator,
aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/vllm/<version>/*.parquet, commit
095f58a5): per-kernel latencies of vLLM's own GEMM, fused-MoE, attention, MLA and custom
all-reduce kernels measured on the GPU, one kernel at a time. They are kernel microbenchmarks,
not serving results, so fitting to them does not touch what `kvplan simulate` predicts.

For each kernel family the fraction is the median over the table's shapes of
roofline time / measured time, where the roofline uses the datasheet rates:
  - compute side: FLOPs / dense peak, over the compute-bound shapes (large token counts);
  - memory side: bytes / memory bandwidth, over the memory-bound shapes (few tokens).
Only rows timed in a CUDA graph, as the engines replay their decode steps, count: a GEMM format
whose rows time the host's dispatch (`host_timed`: aiconfigurator's vLLM block-fp8 rows) takes
the pair of the same kernel graph-timed in the GPU's other-engine table, else the H100's.
Needs pyarrow (not a kvplan dependency): run it from a throwaway environment.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path

PROFILES = Path(__file__).resolve().parent.parent / "hardware_profiles"
TABLES = Path(__file__).resolve().parent.parent / "kvplan" / "data" / "kernel_tables"
# aiconfigurator's GPU folder -> (kvplan's profile, the engines whose tables to write)
TABLE_GPUS = {
    "h100_sxm": ("h100-sxm", ("sglang",)),  # vLLM: the 0.14.0 file
    "h200_sxm": ("h200-sxm", ("sglang",)),
    "a100_sxm": ("a100-80gb-sxm", ("sglang",)),
    "b200_sxm": ("b200", ("vllm", "sglang")),
    "b300_sxm": ("b300", ("vllm", "sglang")),
    "gb200": ("gb200", ("vllm", "sglang")),
    "gb300": ("gb300", ("vllm", "sglang")),
    "l40s": ("l40s", ("vllm", "sglang")),
    "rtx_pro_6000_server": ("rtx-pro-6000", ("vllm", "sglang")),
}


def datasheet(gpu: str) -> tuple[float, dict, float]:
    """(bandwidth, dense peaks by dtype, one direction of the link) from kvplan's profile."""
    import yaml

    data = yaml.safe_load((PROFILES / f"{TABLE_GPUS[gpu][0]}.yaml").read_text())
    peaks = {k: float(v) for k, v in data["peak_flop_per_s"].items()}
    peaks.setdefault("fp8", peaks["bf16"])  # no fp8 tensor cores: fp8 tables run at bf16's
    link = float((data.get("interconnect") or {}).get("bandwidth_bytes_per_s", 0)) / 2
    return float(data["memory_bandwidth_bytes_per_s"]), peaks, link


DATASHEET = {"h100_sxm": (3.35e12, {"bf16": 989.4e12, "fp8": 1978.9e12}),
             "h200_sxm": (4.8e12, {"bf16": 989.4e12, "fp8": 1978.9e12}),
             "a100_sxm": (2.039e12, {"bf16": 312e12, "fp8": 312e12})}  # fmt: skip
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


def table(
    root: Path,
    gpu: str,
    op: str,
    name: str,
    version: str,
    engine: str = "vllm",
    fastest: bool = True,
) -> list[dict]:
    """The rows of one table; where several kernels timed one shape (a newer table times each
    backend the engine can pick), the fastest, as the engine's autotuned default would be.
    `fastest` False: every row (a table whose kernels are steps of one operation, not
    alternatives: the Gated DeltaNet table's conv update and state update)."""
    import pyarrow.parquet as pq

    path = root / gpu / op / engine / version / f"{name}.parquet"
    rows = pq.read_table(path).to_pylist()
    if not fastest or len({r.get("kernel_source") for r in rows}) <= 1:
        return rows
    best: dict = {}
    for r in rows:
        key = tuple((k, v) for k, v in r.items() if k not in ("kernel_source", "latency"))
        if key not in best or r["latency"] < best[key]["latency"]:
            best[key] = r
    return list(best.values())


# (gpu, op, engine, version) folders whose rows are no kernel's time, read as if absent (the
# nearest release's stand): why, from the rows themselves
NOT_KERNEL_TIMES = {
    # every fused-MoE row ~10x (9-11x) the same kernel_source's (sglang_fused_moe_triton) at
    # 0.5.9, 0.5.10 and 0.5.14 on this GPU and the H200's at 0.5.6.post2, at every shape and
    # token count: 344 us for Qwen3-235B's bf16 4096x1536 128x8 TP8 at one token, 30x the
    # datasheet roofline, where H200 0.5.6.post2 times 39 us and H100 0.5.9 35 us
    ("h100_sxm", "moe", "sglang", "0.5.6.post2"): "fused-MoE rows 10x every other release's",
}
# --at-version: engine -> the release whose tables to read ({}: the newest of each table)
AT_VERSION: dict = {}
# the words naming DATA in the files' `source` (--data-source)
DATA_SOURCE = "aiconfigurator-core 0.12.0 (PyPI wheel), aiconfigurator_core/systems/data"


def _version_order(v: str) -> tuple:
    """A version folder's order among releases (kernel_tables.release_order: the one reading
    of a release, 0.5.10rc0 after 0.5.9 and before 0.5.10)."""
    from kvplan.inputs.kernel_tables import release_order

    return release_order(v)


def newest(root: Path, gpu: str, op: str, engine: str, name: str) -> str | None:
    """The version folder of this table that holds it (some hold a reuse note only): the
    newest, or under --at-version (AT_VERSION) for this engine the nearest release to the asked
    one, the newest at or below it (the asked one itself where it has the table), else the
    oldest (a table that release did not time comes from the nearest release that did)."""
    folder = root / gpu / op / engine
    versions = [
        p.name
        for p in folder.glob("*")
        if (p / f"{name}.parquet").exists() and (gpu, op, engine, p.name) not in NOT_KERNEL_TIMES
    ]
    if not versions:
        return None
    asked = AT_VERSION.get(engine)
    if asked is None:
        return max(versions, key=_version_order)
    below = [v for v in versions if _version_order(v) <= _version_order(asked)]
    return max(below, key=_version_order) if below else min(versions, key=_version_order)


def nearest_graph_comm(root: Path, gpu: str, engine: str) -> str | None:
    """The version folder of the all-reduce table nearest the asked release (AT_VERSION: the
    newest at or below it, then the oldest above) whose rows say which ran in a CUDA graph
    (a `backend` column, "<engine>_graph"/"_eager": the collector's since SGLang 0.5.9's
    tables; the older rows mix neither and time no graph replay)."""
    import pyarrow.parquet as pq

    folder = root / gpu / "comm" / engine
    found = [p.name for p in folder.glob("*") if (p / "custom_allreduce_perf.parquet").exists()]
    asked = _version_order(AT_VERSION.get(engine) or max(found, key=_version_order))
    below = sorted((v for v in found if _version_order(v) <= asked), key=_version_order)
    above = sorted((v for v in found if _version_order(v) > asked), key=_version_order)
    for v in below[::-1] + above:
        path = folder / v / "custom_allreduce_perf.parquet"
        if "backend" in pq.read_schema(path).names:
            return v
    return None


def at_version_words(engine: str) -> str:
    """derived_by's words for --at-version ("" without it)."""
    asked = AT_VERSION.get(engine)
    if asked is None:
        return ""
    return (
        f"; with --at-version {asked} --data-source (DATA: the folder `source` names): each "
        f"table at {ENGINE_WORDS[engine]} {asked}, else the nearest release that has it (the "
        "newest below, else the oldest)"
    )


# A row is a kernel's time only where a CUDA graph replayed it, as vLLM and SGLang replay their
# decode steps. aiconfigurator's vLLM GEMM collector times block-fp8 eagerly
# (collector/vllm/collect_gemm.py, `use_cuda_graph=gemm_type != "fp8_block"`, since 4bed48d96,
# 2026-05-11; the wheel's vLLM 0.24.0 tables, d5bad971c): each call then waits for vLLM's Python
# dispatch, 55 us a call on an H100 host, 150-250 us on B200/B300/GB200/GB300, whatever the
# shape. A format is taken as timed by the host when its fastest call at <= 16 tokens is over
# HOST_TIMED_FACTOR times the table's fastest bf16 call there (bf16 is graph-timed in every
# collector): graph-timed formats measure 1.4-8.3x (H100 vLLM 0.14 block-fp8 8.3x, 20.5 us),
# host-timed ones 22-171x.
HOST_TIMED_FACTOR = 15
# The same kernel timed by the other engine's collector in a graph, by kernel_source: vLLM's
# DeepGemmFp8BlockScaledMMKernel (vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py: a
# per-token-group quant, then deep_gemm.fp8_gemm_nt) and SGLang's collector (a per-token-group
# quant, then deep_gemm gemm_nt_f8f8bf16): one DeepGEMM kernel. vLLM selects it for
# Fp8LinearMethod on Hopper and Blackwell (its start-up log: "Selected
# DeepGemmFp8BlockScaledMMKernel for Fp8LinearMethod").
SAME_KERNEL = {
    ("vllm", "DeepGemmFp8BlockScaledMMKernel"): ("sglang", "sglang_deepgemm_gemm_nt_f8f8bf16"),
    ("sglang", "sglang_deepgemm_gemm_nt_f8f8bf16"): ("vllm", "DeepGemmFp8BlockScaledMMKernel"),
}


def host_timed(rows) -> set:
    """The GEMM formats of one table whose rows time the host's dispatch, not the kernel (their
    fastest call at <= 16 tokens over HOST_TIMED_FACTOR times the fastest bf16 call)."""
    fastest: dict = {}
    for r in rows:
        if r["m"] <= 16:
            fastest[r["gemm_dtype"]] = min(r["latency"], fastest.get(r["gemm_dtype"], math.inf))
    if "bfloat16" not in fastest:
        return set()
    limit = HOST_TIMED_FACTOR * fastest["bfloat16"]
    return {dtype for dtype, latency in fastest.items() if latency > limit}


def _gemm_kernel(rows, dtype: str) -> str | None:
    """The kernel that served the format's rows at the shapes `gemm` reads (one, or None)."""
    sources = {
        r.get("kernel_source")
        for r in rows
        if r["gemm_dtype"] == dtype and r["n"] * r["k"] >= 16e6 and (r["m"] <= 16 or r["m"] >= 4096)
    }
    return sources.pop() if len(sources) == 1 else None


def dense_pairs(rows, bw, peaks, engine: str, other_rows=None) -> tuple[dict, dict]:
    """({gemm dtype: (compute, memory)}, {gemm dtype: why}) for one table's GEMM rows. A format
    timed by the host (`host_timed`) takes the pair of the same kernel in `other_rows` (this
    GPU's table of the other engine) where that table timed it in a graph; else it has no pair
    (the caller borrows), and `why` says which."""
    host = host_timed(rows)
    pairs = gemm([r for r in rows if r["gemm_dtype"] not in host], bw, peaks)
    why = {}
    for dtype in sorted(host):
        kernel = _gemm_kernel(rows, dtype)
        twin = SAME_KERNEL.get((engine, kernel))
        floor_us = min(r["latency"] for r in rows if r["gemm_dtype"] == dtype and r["m"] <= 16)
        reason = (
            f"were timed without a CUDA graph ({floor_us * 1e3:.0f} us a call at <= 16 tokens, "
            "the host's dispatch)"
        )
        other = [r for r in other_rows or () if r["gemm_dtype"] == dtype]
        if (
            twin
            and other
            and dtype not in host_timed(other_rows)
            and _gemm_kernel(other, dtype) == twin[1]
        ):
            pairs.update(gemm(other, bw, peaks))
            why[dtype] = (
                f"{reason}; the pair of the same kernel ({kernel}: {twin[1]}), graph-timed in "
                f"this GPU's {ENGINE_WORDS[twin[0]]} table"
            )
        else:
            why[dtype] = reason
    return pairs, why


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


# The DSA module grids (kernel_tables/dsa/<gpu>.<engine>.<version>.json, beside the tables of
# that name). The H100 and H200 vLLM 0.14.0 ones came from vLLM 0.19.0's module tables in
# aiconfigurator@095f58a5 (not in the wheel: kept as they are); --write-dsa writes the rest from
# the wheel, for every GPU and engine kvplan has tables of and the wheel DSA module tables of.
DSA_WRITE = {
    "h100_sxm": ("sglang",),
    "h200_sxm": ("sglang",),
    "b200_sxm": ("vllm", "sglang"),
    "b300_sxm": ("vllm", "sglang"),
    "gb200": ("vllm", "sglang"),
    "gb300": ("vllm", "sglang"),
}
DSA_MODEL = "deepseek-ai/DeepSeek-V3.2"
# SGLang's --nsa-decode-backend of each kernel_source an SGLang DSA decode row names
# (aiconfigurator collector/kernel_source_backends.yaml, "indexer path" rows; collector/sglang/
# collect_mla_module.py sets dsa_decode_backend to trtllm on SM100 and flashmla_kv on Hopper for
# an fp8 KV cache, as SGLang 0.5.14 does, and leaves SGLang's default for bf16): the file
# records the decode kernels its grids timed, so a run whose SGLang picks another is named
NSA_DECODE_BACKENDS = {
    "sglang_dsa_indexer_fa3": "fa3",
    "sglang_dsa_indexer_trtllm": "trtllm",
    "sglang_dsa_indexer_flashmla_kv": "flashmla_kv",
    "sglang_dsa_indexer_flashmla_sparse": "flashmla_sparse",
}
# The kernel_source of SGLang 0.5.9-0.5.12's DSA module rows (aiconfigurator 2ae0a2aed,
# collector/sglang/collect_mla_module.py: attention_backend "nsa", "SGLang auto-detects
# nsa_prefill_backend / nsa_decode_backend based on SM + kv_cache_dtype"): the release's own
# default decode kernel for the GPU and cache dtype (kvplan.engines.sglang.nsa_default_backends)
NSA_RUNTIME_DEFAULT = "dsa_nsa"
# A model whose DSA module rows a release's table files under another name of the same shape
# and weights (dsa_shape checks the shape; the rows' gemm_type the weights): SGLang 0.5.10's
# tables time zai-org/GLM-5 with block-fp8 weights (gemm_type fp8_block), GLM-5-FP8's
# checkpoint, and no zai-org/GLM-5-FP8 rows. Read only where the model's own rows are absent.
DSA_ROW_ALIASES = {"zai-org/GLM-5-FP8": "zai-org/GLM-5"}
# A module row this many times off the same cell (model, weights, heads, kv dtype, batch,
# length) at every other release that timed it is refused (dsa_sane_rows), as is one faster
# than its projections' weights streamed at the datasheet bandwidth or their FLOPs at its peak
DSA_RELEASE_SPREAD = 3.0
MLA_MODEL = "deepseek-ai/DeepSeek-V3"
# The DSA modules of other attention shapes each file holds grids of beside DSA_MODEL's (the
# stand-in for any shape not timed), by engine: the wheel's SGLang 0.5.14 DSA module tables also
# time zai-org/GLM-5-FP8 (64 heads of 256 wide, q_lora_rank 2,048, a 32-head indexer) with
# block-fp8 weights on every GPU of DSA_WRITE (its zai-org/GLM-5 rows: bf16 weights;
# nvidia/GLM-5.2-NVFP4's: NVFP4 weights). vLLM's also time zai-org/GLM-5, but no vLLM MLA module
# table of its shape is there to subtract (mla_module baseline: DeepSeek-V3's only), so none.
DSA_OTHER_MODELS = {"sglang": ("zai-org/GLM-5-FP8",), "vllm": ()}
# The attention fields a DSA module's time depends on (kvplan.anatomy.model.Attention's names):
# each grid records its model's (from the bundled config, kvplan.inputs.sources.load_model), and
# the step model reads a grid only for layers of that shape (batch_step.dsa_grids_for)
DSA_SHAPE_FIELDS = (
    "qk_head_dim",
    "v_head_dim",
    "mla_kv_lora_rank",
    "mla_q_lora_rank",
    "indexer_head_dim",
    "indexer_num_heads",
    "indexer_topk",
)


def dsa_shape(model: str) -> dict:
    """The DSA attention shape of `model`'s config (its first DSA layer's DSA_SHAPE_FIELDS;
    kvplan must be importable)."""
    from kvplan.formulas.batch_step import dsa_layers
    from kvplan.inputs.sources import load_model

    layers = dsa_layers(load_model(model, checkpoint=False))
    if not layers:
        raise SystemExit(f"{model}: no DSA layers in its config")
    return {field: getattr(layers[0], field) for field in DSA_SHAPE_FIELDS}


def _module_grid(rows, x_key: str, batches, lengths) -> dict:
    """{(heads, kv dtype): {(batch, x): seconds}} for one module table, block-fp8 weights, on
    the full (batches x lengths) grid: a cell the table lacks (large batch x length, where the
    collector ran out of memory) is its nearest smaller measured batch's scaled by the batch ratio
    (the module is linear in tokens there), else its nearest measured length's."""
    out: dict = {}
    for r in rows:
        if r["gemm_type"] != "fp8_block" or r["batch_size"] not in batches:
            continue
        if r[x_key] not in lengths:
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


DSA_EAGER_JUMP = 3.0  # a decode batch this many times slower than the one below: not graph-timed


def _graph_batches(rows, batches) -> list:
    """The decode batches up to the first whose median module time over the shortest lengths
    (at most 256 tokens held) is DSA_EAGER_JUMP x the batch below's: SGLang 0.5.14's rows time
    1,024 decodes at ~1.1 ms on every Blackwell GPU, 11x the 512's, the step outside a CUDA
    graph (the module's kernels do not grow 11x from 512 to 1,024 sequences of 4 tokens). The
    step model carries the last kept batch's per-sequence cost beyond (_DsaModule)."""
    short: dict = {}
    for r in rows:
        if r["gemm_type"] == "fp8_block" and r["step"] <= 256:
            short.setdefault(r["batch_size"], []).append(r["latency"])
    kept = []
    for b in batches:
        if kept and b in short and kept[-1] in short:
            if statistics.median(short[b]) > DSA_EAGER_JUMP * statistics.median(short[kept[-1]]):
                break
        kept.append(b)
    return kept


def dsa_delta(
    root: Path, gpu: str, engine: str = "vllm", model: str = DSA_MODEL
) -> tuple[dict, dict, dict, dict]:
    """`model`'s (DeepSeek-V3.2's by default) sparse attention module (indexer, top-k, sparse MLA, and the layer's
    projections) per layer on one rank, on this GPU, less what the layer costs without it, so
    that the step model adds the difference (_DsaModule; more at short contexts, less at long
    ones). The DSA module is `engine`'s own (its newest sparse_attention tables). What it is
    compared with (`baseline`):
      - vLLM: DeepSeek-V3's dense MLA module in vLLM at the version of its DSA tables on this
        GPU (the same projections, so the difference is what DSA adds);
      - SGLang: the wheel holds no SGLang MLA module, and vLLM's is no stand-in (the H200's
        runs 91-110 us a layer at 1-16 decodes against SGLang's whole DSA module's 70-88):
        kvplan's own price of the layer at the cell from SGLang's rows
        (batch_step.dsa_layer_base_s: the MLA projections from the GEMM table, the absorbed
        BMMs, the MLA kernel rows at the top-k read), so that a step charges the module.
    Where several kernels timed one shape, the fastest (`table`). Decode rows: isl 1, `step`
    tokens held; prefill rows: no cached tokens (step 0), isl prompt tokens. The grid is the
    batches and lengths the tables measured (both, for vLLM). Returns (grids, batches, lengths,
    provenance): grids keyed (phase ("decode": batch x tokens held; "prefill": sequences x
    prompt tokens), heads on the rank, kv dtype) -> {(batch, length): seconds}; provenance
    phase -> the tables read, "baseline" -> what was subtracted, "decode_kernels" -> SGLang's
    decode backends the grids timed by kv dtype ({} for vLLM: no such flag)."""
    out: dict = {}
    axes: dict = {
        "batches": {},
        "lengths": {},
        "source": {},
        "decode_kernels": {},
        "rows_model": set(),
        "short": set(),
    }
    mla_version = newest(root, gpu, "sparse_attention", "vllm", "dsa_generation_module_perf")
    version = newest(root, gpu, "sparse_attention", engine, "dsa_generation_module_perf")
    own = engine == "sglang"
    layer = _KvplanLayer(gpu, engine, model, AT_VERSION.get(engine)) if own else None
    refused: list = []
    for phase, mla_name, dsa_name, x_key in (
        ("decode", "mla_generation_module_perf", "dsa_generation_module_perf", "step"),
        ("prefill", "mla_context_module_perf", "dsa_context_module_perf", "isl"),
    ):
        mla_rows = (
            []
            if own
            else [
                r
                for r in table(root, gpu, "mla", mla_name, mla_version)
                if r["model"] == MLA_MODEL
                and r["step" if phase == "decode" else "isl"] > 0
                and (phase == "decode" or r["step"] == 0)
            ]
        )
        dsa_rows = _dsa_rows(root, gpu, engine, dsa_name, version, model, phase)
        if own and layer is not None:
            others = {
                v: _dsa_rows(root, gpu, engine, dsa_name, v, model, phase)
                for v in _dsa_versions(root, gpu, engine, dsa_name)
                if v != version
            }
            if phase == "decode":  # only another release's graph-timed batches compare
                for v, other in others.items():
                    kept = set(_graph_batches(other, sorted({r["batch_size"] for r in other})))
                    others[v] = [r for r in other if r["batch_size"] in kept]
            dsa_rows, why = dsa_sane_rows(dsa_rows, others, layer.floor_s, phase)
            refused += [f"{phase}: {line}" for line in why]
        axes["rows_model"] |= {r["model"] for r in dsa_rows}
        batches = sorted({r["batch_size"] for r in dsa_rows})
        lengths = _module_lengths(dsa_rows, x_key, phase)
        if not own:
            batches = sorted(set(batches) & {r["batch_size"] for r in mla_rows})
            lengths = sorted(set(lengths) & {r[x_key] for r in mla_rows})
        if phase == "decode":
            batches = _graph_batches(dsa_rows, batches)
        dsa = _module_grid(dsa_rows, x_key, batches, lengths)
        for key, longest in _short_keys(dsa_rows, x_key, lengths).items():
            del dsa[key]  # _module_grid would hold its longest timed length flat to the end
            refused.append(
                f"{phase}: {key[0]} heads on a rank, {key[1]} cache, left out (timed to "
                f"{longest} tokens only, the grid runs to {lengths[-1]})"
            )
            axes["short"].add(key)
        if phase == "decode" and own:  # the SGLang decode backends the grids timed, by kv dtype
            for r in dsa_rows:
                timed = axes["decode_kernels"].setdefault(r["kv_cache_dtype"], set())
                source = r["kernel_source"]
                if source == NSA_RUNTIME_DEFAULT and layer is not None:
                    timed.add(layer.default_decode_kernel(r["kv_cache_dtype"]))
                else:
                    timed.add(NSA_DECODE_BACKENDS[source])
        if layer is not None:
            from kvplan.errors import KvplanError

            base = {}
            for key in dsa:
                try:
                    base[key] = layer.grid(phase, *key, batches, lengths)
                except KvplanError:  # its TP spans more GPUs than a node: no baseline priced
                    refused.append(
                        f"{phase}: {key[0]} heads on a rank, {key[1]} cache, left "
                        "out (its TP spans more GPUs than a node: no baseline)"
                    )
        else:
            base = _module_grid(mla_rows, x_key, batches, lengths)
        for key in sorted(set(base) & set(dsa)):
            out[(phase, *key)] = {
                (b, x): dsa[key][(b, x)] - base[key][(b, x)] for b in batches for x in lengths
            }
        axes["batches"][phase] = batches
        axes["lengths"][phase] = lengths
        axes["source"][phase] = f"{gpu}/sparse_attention/{engine}/{version}/{dsa_name}.parquet" + (
            "" if own else f" less {gpu}/mla/vllm/{mla_version}/{mla_name}.parquet"
        )
    baseline = (
        f"less kvplan's own price of the layer at each cell without the module "
        f"(kvplan.formulas.batch_step.dsa_layer_base_s, {model}, SGLang, TP its heads / heads, "
        f"kvplan's {layer.tables} tables: the MLA projections from its GEMM table, "
        "the absorbed BMMs, the MLA kernel rows at the top-k read), so a step charges the "
        "module"
        if layer is not None
        else f"less {MLA_MODEL}'s MLA module (vLLM {mla_version})"
    )
    provenance = {"version": version, **axes["source"], "baseline": baseline, "refused": refused}
    provenance["rows_model"] = next(iter(axes["rows_model"] - {model}), None)
    provenance["short"] = sorted(axes["short"])
    provenance["decode_kernels"] = {kv: sorted(b) for kv, b in axes["decode_kernels"].items()}
    return out, axes["batches"], axes["lengths"], provenance


def _module_lengths(rows, x_key: str, phase: str) -> list:
    """The lengths of a module table's grid: for decodes those it timed at two batches or more
    (SGLang 0.5.14's rows time 1,536, 3,072, 6,144, 10,000-12,288 and 163,839 tokens held at
    one decode only: _module_grid's fill scales a cell from the batch below, and a graph-timed
    decode is not linear in its batch at a few sequences), for prefills every one (a prompt's
    chunk is: the fill's rule holds)."""
    timed: dict = {}
    for r in rows:
        timed.setdefault(r[x_key], set()).add(r["batch_size"])
    return sorted(x for x, b in timed.items() if phase == "prefill" or len(b) > 1)


def _short_keys(rows, x_key: str, lengths) -> dict:
    """{(heads, kv dtype): the longest length timed} of the block-fp8 module keys whose rows stop
    before the grid's longest length (SGLang 0.5.10's B200 decode rows of DeepSeek-V3.2 at 8,
    16 and 32 heads on a rank end at 128 tokens held, its other heads' at 16,384)."""
    longest: dict = {}
    for r in rows:
        if r["gemm_type"] == "fp8_block" and r[x_key] in lengths:
            key = (r["num_heads"], r["kv_cache_dtype"])
            longest[key] = max(longest.get(key, 0), r[x_key])
    return {key: x for key, x in longest.items() if x < lengths[-1]}


def _dsa_rows(root: Path, gpu: str, engine: str, name: str, version: str, model: str, phase: str):
    """One DSA module table's rows of `model` for `phase` (decode: every row; prefill: those
    with no cached tokens), or, where the table has none of it, of its DSA_ROW_ALIASES name."""
    rows = [
        r
        for r in table(root, gpu, "sparse_attention", name, version, engine)
        if r["op_name"] == name.removesuffix("_perf") and (phase == "decode" or r["step"] == 0)
    ]
    own = [r for r in rows if r["model"] == model]
    alias = DSA_ROW_ALIASES.get(model)
    if own or alias is None:
        return own
    if dsa_shape(alias) != dsa_shape(model):
        raise SystemExit(f"{alias}'s DSA shape is not {model}'s")
    return [r for r in rows if r["model"] == alias]


def _dsa_versions(root: Path, gpu: str, engine: str, name: str) -> list:
    """The releases whose folder holds this DSA module table (NOT_KERNEL_TIMES left out)."""
    folder = root / gpu / "sparse_attention" / engine
    return sorted(
        (
            p.name
            for p in folder.glob("*")
            if (p / f"{name}.parquet").exists()
            and (gpu, "sparse_attention", engine, p.name) not in NOT_KERNEL_TIMES
        ),
        key=_version_order,
    )


def _dsa_cell(r: dict, phase: str) -> tuple:
    """A module row's cell: weights, heads, kv dtype, batch and its length (decode: tokens
    held; prefill: prompt tokens)."""
    x = r["step"] if phase == "decode" else r["isl"]
    return (r["gemm_type"], r["num_heads"], r["kv_cache_dtype"], r["batch_size"], x)


def dsa_sane_rows(rows, others: dict, floor_s, phase: str) -> tuple[list, list]:
    """(the rows kept, the refusals in words) of one release's DSA module table: a row faster
    than `floor_s(phase, heads, batch, length)` (its projections' weights at the datasheet
    bandwidth, or their FLOPs at the peak: no kernel beats it), or DSA_RELEASE_SPREAD times
    off the same cell at every other release in `others` (release -> rows) that timed it, is
    refused. The step model then fills its cell as it fills an untimed one (_module_grid)."""
    timed: dict = {}
    for release, other_rows in others.items():
        for r in other_rows:
            cell = _dsa_cell(r, phase)
            best = timed.setdefault(cell, {})
            best[release] = min(best.get(release, r["latency"]), r["latency"])
    kept, floors, spreads = [], [], []
    for r in rows:
        cell = _dsa_cell(r, phase)
        gemm_type, heads, _, batch, x = cell
        floor = floor_s(phase, heads, batch, x) if gemm_type == "fp8_block" else None
        seconds = r["latency"] * 1e-3
        if floor is not None and seconds < floor:
            floors.append(f"{cell} {seconds * 1e6:.1f} us < {floor * 1e6:.1f} us")
            continue
        seen = timed.get(cell, {})
        ratios = [r["latency"] / v for v in seen.values()]
        if ratios and all(q >= DSA_RELEASE_SPREAD or q <= 1 / DSA_RELEASE_SPREAD for q in ratios):
            shown = ", ".join(f"{v} {t * 1e3:.1f}" for v, t in sorted(seen.items()))
            spreads.append(f"{cell} {r['latency'] * 1e3:.1f} us against {shown} us")
            continue
        kept.append(r)
    why = []
    if floors:
        why.append(
            f"{len(floors)} rows under the projections' datasheet floor (cell: weights, heads, "
            f"kv, batch, length), e.g. {floors[0]}"
        )
    if spreads:
        why.append(
            f"{len(spreads)} rows {DSA_RELEASE_SPREAD:g}x+ off every other release's, e.g. "
            f"{spreads[0]}"
        )
    return kept, why


class UnpricedLayer(SystemExit):
    """kvplan's tables price no DSA layer at a module cell (their GEMM grid prices not every
    projection: batch_step.dsa_layer_base_s is None), so no delta can be drawn on them."""


class _KvplanLayer:
    """kvplan's own step model of a DSA model (DeepSeek-V3.2, GLM-5) on one GPU and engine (kvplan must be importable:
    `pip install -e .` in the pyarrow environment), priced at a module table's cells without
    the DSA module's delta (batch_step.dsa_layer_base_s)."""

    def __init__(self, gpu: str, engine: str, model: str = DSA_MODEL, version: str | None = None):
        from kvplan.inputs.hardware import load_profile
        from kvplan.inputs.kernel_tables import tables_for
        from kvplan.inputs.sources import load_model

        self.engine, self.profile = engine, load_profile(TABLE_GPUS[gpu][0])
        self.model, self.spec = model, load_model(model, checkpoint=False)
        # the tables a run of `version` reads (the newest without one): the base the run adds
        # the delta to
        self.version = version
        self.tables = tables_for(self.profile, engine, version).label
        self.bandwidth_bytes_per_s, self.peaks, _ = datasheet(gpu)
        self._models: dict = {}  # (heads on a rank, kv dtype) -> its step model

    def _model(self, heads: int, kv: str):
        if (heads, kv) in self._models:
            return self._models[(heads, kv)]
        from kvplan.simulate.setup import ServeOptions, kv_format_name, step_model

        attention = self.spec.attention_layers()[0]
        options = ServeOptions(engine=self.engine, tp=attention.num_q_heads // heads)
        if self.version is not None:  # the run of that release reads its nearest tables
            options = options._replace(sglang_version=self.version)
        fmt = kv_format_name(self.engine, "fp8" if kv == "fp8" else "bfloat16")
        self._models[(heads, kv)] = step_model(self.spec, self.profile, options, fmt, 512, [])[0]
        return self._models[(heads, kv)]

    def default_decode_kernel(self, kv: str) -> str:
        """SGLang's own NSA decode kernel for this GPU and cache dtype."""
        from kvplan.engines.sglang import nsa_default_backends
        from kvplan.engines.vllm import gpu_generation

        cache = "fp8_e4m3" if kv == "fp8" else "bfloat16"
        return nsa_default_backends(cache, gpu_generation(self.profile))[1]

    def floor_s(self, phase: str, heads: int, batch: int, length: int) -> float | None:
        """The least time the layer's MLA projections can take on the rank at this cell: their
        weights at the datasheet bandwidth or their FLOPs at the datasheet peak (None: no
        projections priced)."""
        from kvplan.errors import KvplanError

        try:
            calls = self._model(heads, "bfloat16").dsa_projection_calls
        except KvplanError:  # more ranks than one node holds: no floor drawn
            return None
        if not calls:
            return None
        tokens = batch if phase == "decode" else batch * length
        weight_bytes = sum(c.n * c.k * c.times * (1 if c.fmt == "fp8" else 2) for c in calls)
        flop = sum(2 * c.n * c.k * c.times * tokens for c in calls)
        peak = self.peaks["fp8" if all(c.fmt == "fp8" for c in calls) else "bf16"]
        return max(weight_bytes / self.bandwidth_bytes_per_s, flop / peak)

    def grid(self, phase: str, heads: int, kv: str, batches, lengths) -> dict:
        from kvplan.formulas.batch_step import dsa_layer_base_s

        model = self._model(heads, kv)
        cells = {}
        for b in batches:
            for x in lengths:
                seconds = dsa_layer_base_s(model, phase, b, x)
                if seconds is None:
                    raise UnpricedLayer(f"{self.tables}: {self.model}'s DSA layer is not priced")
                cells[(b, x)] = seconds
        return cells


def write_dsa_grids(root: Path, version: str | None = None) -> list[Path]:
    """kernel_tables/dsa/<gpu>.<engine>.<version>.json (the name of the tables the run reads,
    kvplan.inputs.kernel_tables._dsa_file) for every GPU and engine of DSA_WRITE: dsa_delta's
    grids in microseconds (0.1), one (phase, heads, kv dtype) a line; DSA_MODEL's (the stand-in)
    at the top level, each of DSA_OTHER_MODELS's under "shapes" (its model, shape, source,
    decode kernels, axes and grids; the same engine version and baseline rule). `version`
    (--at-version): for every GPU with SGLang tables of that release, a file of its name (the
    one its runs read: kernel_tables.grid_file) holding the module rows of the release nearest
    it that timed them (`newest` under AT_VERSION; "version" names it), less the layer priced
    on those tables (the base the run adds the delta to); not written where that is the newest
    release's (its runs read the newest file) or where that release timed no block-fp8 module
    row (bf16 weights only: not the checkpoint's format, which the baseline prices)."""
    import json

    if version is not None:
        AT_VERSION["sglang"] = version
    written = []
    for gpu, engines in DSA_WRITE.items():
        for engine in engines if version is None else ("sglang",):
            tables = sorted(
                (p.name for p in TABLES.glob(f"{gpu}.{engine}.*.json")),
                key=lambda n: [int(x) if x.isdigit() else -1 for x in n.split(".")[2:-1]],
            )
            if not tables:
                continue
            if version is not None:
                if f"{gpu}.{engine}.{version}.json" not in tables:
                    continue
                timed = _dsa_versions(root, gpu, engine, "dsa_generation_module_perf")
                at = newest(root, gpu, "sparse_attention", engine, "dsa_generation_module_perf")
                if not timed or at == max(timed, key=_version_order):
                    continue
                tables = [f"{gpu}.{engine}.{version}.json"]
            try:
                grids, batches, lengths, prov = dsa_delta(root, gpu, engine)
            except UnpricedLayer as why:
                if version is None:
                    raise
                print(f"not written: dsa/{tables[-1]} ({why})")
                continue
            if not grids:
                print(f"not written: dsa/{tables[-1]} (no block-fp8 {DSA_MODEL} module rows)")
                continue
            if version is not None and prov["short"]:  # the stand-in's grid has holes
                print(f"not written: dsa/{tables[-1]} ({'; '.join(prov['refused'])})")
                continue
            head = {
                "version": prov["version"],
                "source": _dsa_source(prov),
                "derived_by": "scripts/derive_achieved.py DATA --write-dsa (dsa_delta): "
                f"{DSA_MODEL}'s DSA module per layer on one rank {prov['baseline']}; "
                "block-fp8 weights, the fastest kernel per shape, microseconds"
                + at_version_words(engine),
                **({"refused": prov["refused"]} if prov["refused"] else {}),
                "baseline": "kvplan_layer" if engine == "sglang" else "mla_module",
                "model": DSA_MODEL,
                "shape": dsa_shape(DSA_MODEL),
                **({"decode_kernels": prov["decode_kernels"]} if prov["decode_kernels"] else {}),
                "batches": batches,
                "lengths": lengths,
            }
            body = _dsa_json(head, grids, batches, lengths)
            others = []
            for model in DSA_OTHER_MODELS[engine]:
                o_grids, o_batches, o_lengths, o_prov = dsa_delta(root, gpu, engine, model)
                if o_prov["version"] != prov["version"]:
                    raise SystemExit(f"{gpu} {engine}: {model}'s DSA tables are another version")
                o_head = {
                    "model": model,
                    "source": _dsa_source(o_prov),
                    **({"refused": o_prov["refused"]} if o_prov["refused"] else {}),
                    "baseline_by": o_prov["baseline"],
                    "shape": dsa_shape(model),
                    **(
                        {"decode_kernels": o_prov["decode_kernels"]}
                        if o_prov["decode_kernels"]
                        else {}
                    ),
                    "batches": o_batches,
                    "lengths": o_lengths,
                }
                text = _dsa_json(o_head, o_grids, o_batches, o_lengths).rstrip("\n")
                others.append("\n".join("  " + line for line in text.split("\n")))
            if others:
                body = body[: -len("\n}\n")] + ',\n "shapes": [\n' + ",\n".join(others)
                body += "\n ]\n}\n"
            json.loads(body)  # well-formed
            path = TABLES / "dsa" / tables[-1]
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(body)
            tmp.replace(path)
            written.append(path)
    return written


# SGLang's DSA decode module run outside a CUDA graph (kernel_tables/dsa_eager/): aiconfigurator's
# collector times a decode batch in a CUDA graph only where SGLang would capture one
# (collector/sglang/collect_mla_module.py _generation_cuda_graph_enabled_for_tokens: batch <=
# the server's cuda_graph_max_bs) and eagerly above it, so the batches _graph_batches cuts off
# are the module's eager time: ~1.4 ms a layer on H100/H200 and ~1.3 on B200/B300 at 512-1,024
# decodes of <= 256 tokens, flat in batch, length and heads (the host dispatching the indexer's
# and the MLA's kernels one by one), against 0.1-0.3 ms in a graph.
DSA_EAGER_GRAPH_BATCHES = 2  # the largest graph-timed batches kept beside the eager ones


def dsa_eager_rows(root: Path, gpu: str, model: str = DSA_MODEL) -> dict | None:
    """`model`'s SGLang DSA decode module (the newest sparse_attention table of `gpu`) at the
    batches timed without a CUDA graph (_graph_batches), and at the two largest batches timed in
    one (what the step model extrapolates the graph time from), per (heads on a rank, kv dtype):
    {"graph"|"eager": {batch: [[tokens held, microseconds per layer], ...]}}; block-fp8 weights,
    the fastest kernel per shape. None: no table, or every batch graph-timed."""
    version = newest(root, gpu, "sparse_attention", "sglang", "dsa_generation_module_perf")
    if version is None:
        return None
    name = "dsa_generation_module_perf"
    rows = [
        r
        for r in _dsa_rows(root, gpu, "sglang", name, version, model, "decode")
        if r["gemm_type"] == "fp8_block"
    ]
    batches = sorted({r["batch_size"] for r in rows})
    graph = _graph_batches(rows, batches)
    eager = batches[len(graph) :]
    if not eager or len(graph) < DSA_EAGER_GRAPH_BATCHES:
        return None
    kept = {"graph": graph[-DSA_EAGER_GRAPH_BATCHES:], "eager": eager}
    modules: dict = {}
    for r in rows:
        for kind, among in kept.items():
            if r["batch_size"] in among:
                cells = modules.setdefault((r["num_heads"], r["kv_cache_dtype"]), {})
                cells.setdefault(kind, {}).setdefault(r["batch_size"], {})[r["step"]] = round(
                    r["latency"] * 1e3, 1
                )
    return {
        "version": version,
        "source": f"{DATA_SOURCE}/ {gpu}/sparse_attention/sglang/{version}/{name}.parquet",
        "graph_batches": kept["graph"],
        "eager_batches": eager,
        "modules": [
            {
                "heads": heads,
                "kv_dtype": kv,
                **{
                    kind: {str(b): sorted(cells[kind][b].items()) for b in sorted(cells[kind])}
                    for kind in ("graph", "eager")
                },
            }
            for (heads, kv), cells in sorted(modules.items())
            if set(cells) == {"graph", "eager"}
        ],
    }


def write_dsa_eager(root: Path) -> list[Path]:
    """kernel_tables/dsa_eager/<gpu>.sglang.<version>.json (dsa_eager_rows) for every GPU of
    DSA_WRITE with SGLang DSA module tables that time eager batches: one module a line."""
    import json

    written = []
    for gpu, engines in DSA_WRITE.items():
        if "sglang" not in engines:
            continue
        found = dsa_eager_rows(root, gpu)
        if found is None:
            print(f"not written: dsa_eager/{gpu} (no eager-timed SGLang DSA decode rows)")
            continue
        modules = found.pop("modules")
        head = {
            **found,
            "derived_by": "scripts/derive_achieved.py DATA --write-dsa-eager (dsa_eager_rows): "
            f"{DSA_MODEL}'s SGLang DSA decode module per layer on one rank, block-fp8 weights, "
            "the fastest kernel per shape, microseconds; eager_batches: the batches the "
            f"collector timed without a CUDA graph (a batch over DSA_EAGER_JUMP = {DSA_EAGER_JUMP}"
            "x the one below, and every one above it), graph_batches: the two largest it timed "
            "in one; each batch's [tokens held, us] pairs as timed",
            "model": DSA_MODEL,
        }
        text = json.dumps(head, indent=1)[:-2] + ',\n "modules": [\n'
        text += ",\n".join("  " + json.dumps(m) for m in modules) + "\n ]\n}\n"
        folder = TABLES / "dsa_eager"
        folder.mkdir(exist_ok=True)
        path = folder / f"{gpu}.sglang.{found['version']}.json"
        path.write_text(text)
        written.append(path)
    return written


def _dsa_source(prov: dict) -> str:
    rows = f" (the rows of {prov['rows_model']})" if prov.get("rows_model") else ""
    return f"{DATA_SOURCE}/ {prov['decode']}; {prov['prefill']}{rows}"


def _dsa_json(head: dict, grids: dict, batches: dict, lengths: dict) -> str:
    """One DSA grid set as JSON text: `head`, then "delta_us", one (phase, heads, kv) a line."""
    import json

    lines = []
    for (phase, heads, kv), cells in grids.items():
        rows = [[round(cells[(b, x)] * 1e6, 1) for x in lengths[phase]] for b in batches[phase]]
        group = {"phase": phase, "heads": heads, "kv_dtype": kv, "rows": rows}
        lines.append("  " + json.dumps(group, separators=(",", ":")))
    body = json.dumps(head, indent=1)[:-2] + ',\n "delta_us": [\n'
    return body + ",\n".join(lines) + "\n ]\n}\n"


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
    return {"attention": (_median(compute), _median(memory))}


def _median(values) -> float | None:
    """The median, None for no values (a backend whose rows hold no shape that side needs)."""
    return statistics.median(values) if values else None


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
    return {"mla": (_median(compute), _median(memory))}


# bytes of one element of an all-reduce table's allreduce_dtype: aiconfigurator's
# collector/network/collect_all_reduce.py times a [message_size / 4096, 4096] tensor of that
# dtype, so message_size counts elements, not bytes
ALLREDUCE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def allreduce(rows, one_way_bytes_per_s: float, backend: str | None = "vllm_graph") -> dict:
    """{GPUs: (the smallest message's seconds, the largest message's bus bandwidth / one
    direction of the link)}: nccl-tests' bus bandwidth 2 (n - 1) / n x bytes / time, the bytes
    message_size elements of the row's allreduce_dtype (ALLREDUCE_DTYPE_BYTES)."""
    out = {}
    for gpus in sorted({r["num_gpus"] for r in rows}):
        sel = [r for r in rows if r["num_gpus"] == gpus and backend in (None, r["backend"])]
        small = min(sel, key=lambda r: r["message_size"])
        large = max(sel, key=lambda r: r["message_size"])
        size = (
            large["message_size"] * ALLREDUCE_DTYPE_BYTES[large.get("allreduce_dtype", "bfloat16")]
        )
        bus = 2 * (gpus - 1) / gpus * size / (large["latency"] * 1e-3)
        out[gpus] = (small["latency"] * 1e-3, bus / one_way_bytes_per_s)
    return out


def allreduce_curves_by_gpus(rows) -> dict:
    """{GPUs: [[message bytes, seconds], ...]}: the graph-mode all-reduce (backends ending in
    _graph: the kernels a CUDA-graph decode step replays) at every message size the table timed
    at each GPU count (aiconfigurator's collector/network/collect_all_reduce.py; message_size in
    elements of allreduce_dtype: ALLREDUCE_DTYPE_BYTES), smallest first, for
    Achieved.allreduce_s and allreduce_call_s_at. {}: no graph-mode rows."""
    graph = [r for r in rows if r["backend"].endswith("_graph")]
    out = {}
    for gpus in sorted({r["num_gpus"] for r in graph}):
        sel = sorted((r for r in graph if r["num_gpus"] == gpus), key=lambda r: r["message_size"])
        out[str(gpus)] = [
            [
                r["message_size"] * ALLREDUCE_DTYPE_BYTES[r.get("allreduce_dtype", "bfloat16")],
                round(r["latency"] * 1e-3, 9),
            ]
            for r in sel
        ]
    return out


def write_allreduce_by_gpus(root: Path) -> list[Path]:
    """Add each top-level table file's allreduce_curve_s_by_gpus, and rewrite its link (the bus
    bandwidth fraction, allreduce), from the comm table version its source names
    (comm/custom_allreduce_perf VERSION; the kept vLLM 0.14.0 files, which name none, the
    wheel's 0.14.0 table), the rest of the file untouched; a file whose comm table the wheel
    does not hold keeps its one call and link. Rerunning it changes nothing."""
    import json
    import re

    written = []
    for path in sorted(TABLES.glob("*.*.*.json")):
        doc = json.loads(path.read_text())
        found = re.search(r"comm/custom_allreduce_perf ([0-9][^ ,;]*)", doc.get("source", ""))
        engine = doc["engine"]
        version = found.group(1) if found else doc.get("engine_version")
        folder = root / doc["gpu"] / "comm" / engine / str(version)
        if not (folder / "custom_allreduce_perf.parquet").exists():
            continue
        rows = table(root, doc["gpu"], "comm", "custom_allreduce_perf", version, engine)
        by_gpus = allreduce_curves_by_gpus(rows)
        if not by_gpus:
            continue
        doc["achieved"]["allreduce_curve_s_by_gpus"] = by_gpus
        one_way = datasheet(doc["gpu"])[2]
        graph = [r for r in rows if r["backend"].endswith("_graph")]
        if one_way and graph and not any(b.startswith("link") for b in doc.get("borrowed", [])):
            gpus = max(r["num_gpus"] for r in graph)
            doc["achieved"]["link"] = round(allreduce(graph, one_way, backend=None)[gpus][1], 2)
        if not found:
            doc["source"] += (
                f"; allreduce_curve_s_by_gpus and link: comm/custom_allreduce_perf {version} "
                "(aiconfigurator-core 0.12.0 wheel)"
            )
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append(path)
    return written


def nccl_allgather_call_s(root: Path, gpu: str) -> tuple[float, str] | None:
    """(seconds, NCCL version): NCCL's all-gather of the smallest message at the largest GPU
    count the GPU's nccl table times (aiconfigurator's collector/collect_nccl.py runs
    nccl-tests' all_gather_perf, fp16), the call the engines make to gather the vocab-parallel
    head's logits over TP (SGLang's and vLLM's tensor_model_parallel_all_gather: NCCL, not the
    custom all-reduce). None: no nccl table for this GPU."""
    version = newest(root, gpu, "comm", "nccl", "nccl_perf")
    if version is None:
        return None
    rows = [
        r
        for r in table(root, gpu, "comm", "nccl_perf", version, "nccl", fastest=False)
        if r["op_name"] == "all_gather" and r["nccl_dtype"] == "half"
    ]
    if not rows:
        return None
    gpus = max(r["num_gpus"] for r in rows)
    small = min((r for r in rows if r["num_gpus"] == gpus), key=lambda r: r["message_size"])
    return small["latency"] * 1e-3, version


MOE_FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8", "fp8": "int8", "int4_wo": "4bit"}
# the 4-bit formats whose fused MoE the tables time at the models' own shapes but whose experts
# no roofline fraction is derived for (their kernels dequantize FP4 in ways the W4A16 int4 rows'
# bytes do not describe): only their per-shape curves and floors are written, under their own
# keys (kvplan.formulas.batch_step._moe_format), never folded into the "4bit" int4 rows. MXFP4:
# gpt-oss's experts (W4A16, aiconfigurator's w4a16_mxfp4: vLLM's OAI-triton / Marlin / FlashInfer
# kernels, SGLang's triton / Marlin / FlashInfer ones); NVFP4: W4A4 experts (ModelOpt,
# compressed-tensors nvfp4: FlashInfer's TRT-LLM / CUTLASS kernels, Blackwell only); MXFP4
# experts with MXFP8 activations (w4a8_mxfp4_mxfp8: FlashInfer's TRT-LLM MoE on Blackwell, SGLang's
# default precision for gpt-oss there: kvplan.simulate.setup.mxfp4_timings)
MOE_SHAPE_FORMATS = {
    **MOE_FORMATS,
    "w4a16_mxfp4": "mxfp4",
    "w4a8_mxfp4_mxfp8": "mxfp4a8",
    "nvfp4": "nvfp4",
}
GEMM_FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8", "fp8": "int8"}
DATASHEET_FILE = "h100_sxm.vllm.0.14.0.json"  # what a GPU without a table borrows
# the vLLM 0.14.0 files from aiconfigurator@095f58a5 that --write-tables keeps but for their floors
KEPT_VLLM_FILES = ("h100_sxm", "h200_sxm", "a100_sxm")
ENGINE_WORDS = {"vllm": "vLLM", "sglang": "SGLang"}
NAMES = {"h100_sxm": "H100 SXM", "h200_sxm": "H200 SXM", "a100_sxm": "A100 SXM", "b200_sxm": "B200",
         "b300_sxm": "B300", "gb200": "GB200", "gb300": "GB300", "l40s": "L40S",
         "rtx_pro_6000_server": "RTX PRO 6000 Blackwell"}  # fmt: skip


def _round(pair) -> list:
    return [round(pair[0], 2), round(pair[1], 2)]


def small_shape_floors(gemm=None, moe=None, attention=None, mla=None, mla_bmm=None) -> dict:
    """The smallest measured time of a kernel of each family at 1-16 tokens (seconds), from a
    GEMM, fused-MoE and generation-attention table's rows (None or empty: no floor for it).
    The step model charges every launch of the family at least this (formulas/batch_step.py).

    Per weights format too (`gemm_fp8`, `moe_4bit`, ... by GEMM_FORMATS / MOE_FORMATS): the
    smallest kernel of that format's rows, which is the kernel a launch in that format runs. A
    block-fp8 GEMM row of SGLang's collector times a per-token-group activation quant and then
    DeepGEMM (collector/sglang/collect_gemm.py), a fused-MoE row the router's top-k, the token
    permutation and both expert GEMMs (collect_moe.py: `select_experts` / `TopK` inside the timed
    call); all graph-timed (collector/helper.py, benchmark_with_power). The family floor (the
    smallest of any format) stays for the launches that run unquantized (router, head)."""
    out = {}
    for name, rows, tokens, dtype_key, formats in (
        ("gemm", gemm, "m", "gemm_dtype", GEMM_FORMATS),
        ("moe", moe, "num_tokens", "moe_dtype", MOE_SHAPE_FORMATS),
        ("attention", attention, "batch_size", None, None),
    ):
        small = [r for r in rows or () if r[tokens] <= 16]
        if small:
            out[name] = min(r["latency"] * 1e-3 for r in small)
        for dtype, fmt in (formats or {}).items():
            own = [r["latency"] * 1e-3 for r in small if r[dtype_key] == dtype]
            if own:
                out[f"{name}_{fmt}"] = min(own)
    # MLA's decode kernel (trtllm_mla on Blackwell, FlashAttention's MLA on Hopper under SGLang)
    # and its two absorbed BMMs (W_UK before, W_UV after: mla_gen_pre / mla_gen_post), at 1-16
    # sequences or tokens: an MLA layer launches these, not a GQA attention kernel and GEMMs
    small = [r["latency"] * 1e-3 for r in mla or () if r["batch_size"] <= 16]
    if small:
        out["attention_mla"] = min(small)
    small = [r["latency"] * 1e-3 for r in mla_bmm or () if r["num_tokens"] <= 16]
    if small:
        out["gemm_mla_bmm"] = min(small)
    for r in moe or ():
        if r["num_tokens"] <= 16 and r["moe_dtype"] in MOE_SHAPE_FORMATS:
            key = moe_shape_key(
                MOE_SHAPE_FORMATS[r["moe_dtype"]],
                *(r[k] for k in ("hidden_size", "inter_size", "num_experts", "topk")),
                *(r[k] for k in ("moe_tp_size", "moe_ep_size")),
            )
            out[key] = min(out.get(key, math.inf), r["latency"] * 1e-3)
    return out


# The graph-timed one-row kernels of the wheel's tables that stand for a decode layer's small
# launches (norms, rotary, cache writes, activations, conv-state updates): each a single small
# kernel whose time at 1-16 tokens is its launch and latency, not its bytes
SMALL_KERNELS = {
    "causal_conv1d_update",  # linear_attention/gdn_perf: the conv-state update of one decode
    "static_scaled_fp8_quant",  # quantize/scale_matrix_perf (vLLM): one row read, one written
}
# the recurrent state update of a Gated DeltaNet decode (gating fused in), the kernel a
# linear-attention layer launches in place of an attention kernel
GDN_DECODE_KERNEL = "fused_recurrent_gated_delta_rule_packed_decode"
# a one-row kernel slower than this many times the GPU's fastest GEMM timed the host's dispatch
SMALL_HOST_FACTOR = 2


def small_kernel_floors(gdn=None, quantize=None, gemm_floor_s: float | None = None) -> dict:
    """The floors of the launches no GEMM, MoE or attention table times (seconds): `elementwise`,
    the smallest time at 1-16 tokens of the SMALL_KERNELS the tables time (SGLang's and vLLM's
    causal_conv1d_update in the Gated DeltaNet table; vLLM's static_scaled_fp8_quant), and
    `recurrent`, the smallest Gated DeltaNet decode state update at 1-16 sequences.

    A kernel that moves one row cannot take longer than the table's fastest GEMM unless the
    host's dispatch was timed: a kernel whose fastest call is over SMALL_HOST_FACTOR times
    `gemm_floor_s` (the GPU's fastest graph-timed GEMM at <= 16 tokens) is left out. That drops
    SGLang's quantize rows (7-8 us at every width from 32 to 16,384 columns, flat, where SGLang's
    own profile of the kernel at one token reads 2.7 us: sgl-project/sglang#5432) and the A100's
    SGLang 0.5.10 Gated DeltaNet rows (6.4 us for a conv update, 2.6x its fastest GEMM); the
    graph-timed ones measure 0.6-1.3x it (1.5-1.9 us on H100, H200, B200, B300)."""

    def kept(latencies: list) -> list:
        if not latencies:
            return []
        if gemm_floor_s is not None and min(latencies) > SMALL_HOST_FACTOR * gemm_floor_s:
            return []
        return latencies

    def gdn_rows(kernel: str) -> list:
        return [
            r["latency"] * 1e-3
            for r in gdn or ()
            if r["phase"] == "generation" and r["batch_size"] <= 16 and r["kernel_source"] == kernel
        ]

    out = {}
    conv = kept(gdn_rows("causal_conv1d_update"))
    quant = kept(
        [
            r["latency"] * 1e-3
            for r in quantize or ()
            if r["m"] <= 16 and r["kernel_source"] in SMALL_KERNELS
        ]
    )
    if conv or quant:
        out["elementwise"] = min(conv + quant)
    # the state update moves a state, not a row: it is kept where the same table's conv update,
    # timed by the same collector, is
    recurrent = gdn_rows(GDN_DECODE_KERNEL) if conv else []
    if recurrent:
        out["recurrent"] = min(recurrent)
    return out


# The routing the per-shape curves are read at: aiconfigurator's own default (sdk/config.py,
# workload_distribution "power_law", with the models' alpha 1.01), a skewed router's load
MOE_CURVE_DISTRIBUTION = "power_law_1.01"


def _curve_row_key(r) -> str | None:
    """The moe_shape_key of a fused-MoE row the curves keep (MOE_CURVE_DISTRIBUTION routing, a
    format of MOE_SHAPE_FORMATS), None for any other row: moe_shape_curves' and
    moe_shape_runners' one filter and key."""
    if r["distribution"] != MOE_CURVE_DISTRIBUTION or r["moe_dtype"] not in MOE_SHAPE_FORMATS:
        return None
    return moe_shape_key(
        MOE_SHAPE_FORMATS[r["moe_dtype"]],
        *(r[k] for k in ("hidden_size", "inter_size", "num_experts", "topk")),
        *(r[k] for k in ("moe_tp_size", "moe_ep_size")),
    )


def moe_shape_curves(rows) -> dict:
    """{moe_shape_key: [[tokens, seconds], ...]} from one fused-MoE table's rows: each shape's
    time at every token count the table measured (1-16,384), format and TP/EP split, under
    MOE_CURVE_DISTRIBUTION routing (the fastest kernel where several timed a shape: `table`).
    The step model reads the model's own shape there, interpolated at the step's tokens
    (kvplan.formulas.batch_step.moe_kernel_s); seconds to four significant figures."""
    out: dict = {}
    for r in rows or ():
        key = _curve_row_key(r)
        if key is None:
            continue
        out.setdefault(key, {})[r["num_tokens"]] = float(f"{r['latency'] * 1e-3:.4g}")
    return {k: [[t, v[t]] for t in sorted(v)] for k, v in sorted(out.items())}


def moe_shape_runners(rows) -> dict:
    """{moe_shape_key: {kernel_source: [[tokens, seconds], ...]}} from one fused-MoE table's
    every row (`table(..., fastest=False)`): each runner's own curve of a shape, as
    moe_shape_curves keys and rounds it. A table may time one shape under several runners
    (SGLang 0.5.14's B200 block-FP8 rows: flashinfer_trtllm and triton), and the engine runs
    the one its server_args resolve (kvplan.engines.moe_backend.sglang_moe_runner), not the
    fastest."""
    out: dict = {}
    for r in rows or ():
        key = _curve_row_key(r)
        if key is None:
            continue
        at = out.setdefault(key, {}).setdefault(str(r.get("kernel_source")), {})
        seconds = float(f"{r['latency'] * 1e-3:.4g}")
        at[r["num_tokens"]] = min(seconds, at.get(r["num_tokens"], seconds))
    return {
        k: {src: [[t, v[t]] for t in sorted(v)] for src, v in sorted(by.items())}
        for k, by in sorted(out.items())
    }


MOE_TOKENS = (1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024,
              1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)  # fmt: skip
MOE_MAX_RANKS = 16  # the splits kept: moe_tp x moe_ep up to two nodes of eight


def write_rows_file(path: Path, head: dict, lines: list[str]) -> Path:
    """A kernel_tables/<folder>/ file: `head`'s keys, then "us" with one pre-rendered
    `"key": value` line each (one shape a line keeps the files diffable), checked well-formed
    and written through a temporary file so a reader never sees half of it."""
    import json

    body = json.dumps(head, indent=1)[:-2] + ',\n "us": {\n' + ",\n".join(lines) + "\n }\n}\n"
    json.loads(body)  # well-formed
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(body)
    tmp.replace(path)
    return path


def _moe_us_row(points) -> list:
    """A curve [[tokens, seconds], ...] as microseconds on MOE_TOKENS (None: not timed)."""
    at = dict((t, s) for t, s in points)
    return [float(f"{at[t] * 1e6:.4g}") if t in at else None for t in MOE_TOKENS]


def _moe_ranks(key: str) -> int:
    tp, ep = key.rsplit("_tp", 1)[1].split("_ep")
    return int(tp) * int(ep)


def moe_runner_lines(curves: dict, runners: dict) -> list[str]:
    """The `runners` lines of a moe/ file, one shape a line: the kernel_source(s) whose rows
    make that shape's fastest curve (`us`), then, where the table timed the shape under more
    than one runner, each runner's own row ({"runs": [...], "us": {source: row}})."""
    import json

    lines = []
    for key, points in curves.items():
        if _moe_ranks(key) > MOE_MAX_RANKS or key not in runners:
            continue
        by = runners[key]
        fastest = dict((t, s) for t, s in points)
        runs = sorted(src for src, pts in by.items() if any(fastest.get(t) == s for t, s in pts))
        entry: dict = {"runs": runs}
        if len(by) > 1:
            entry["us"] = {src: _moe_us_row(pts) for src, pts in by.items()}
        lines.append(f"  {json.dumps(key)}: {json.dumps(entry, separators=(',', ':'))}")
    return lines


def write_moe_curves(name: str, curves: dict, source: str, runners: dict | None = None) -> Path:
    """kernel_tables/moe/<name>: the per-shape fused-MoE curves beside their table file, one
    shape a line, microseconds on the shared token axis (null: not measured), read only for a
    MoE model. Splits over MOE_MAX_RANKS ranks are left out. `runners` (moe_shape_runners):
    each shape's kernel_source(s), written as the file's `runners` (moe_runner_lines)."""
    import json

    lines = []
    for key, points in curves.items():
        if _moe_ranks(key) > MOE_MAX_RANKS:
            continue
        us = _moe_us_row(points)
        lines.append(f" {json.dumps(key)}: {json.dumps(us, separators=(',', ':'))}")
    head = {
        "source": source,
        "derived_by": "scripts/derive_achieved.py DATA --write-tables (moe_shape_curves): each "
        "fused-MoE shape's time per forward of one layer on one rank, under "
        f"{MOE_CURVE_DISTRIBUTION} routing, fastest kernel per shape, splits of at most "
        f"{MOE_MAX_RANKS} ranks" + at_version_words(name.split(".")[1]),
        "distribution": MOE_CURVE_DISTRIBUTION,
        "tokens": list(MOE_TOKENS),
    }
    path = write_rows_file(TABLES / "moe" / name, head, lines)
    if runners:  # each shape's runner(s): aiconfigurator's kernel_source of its rows
        body = path.read_text()[: -len("\n}\n")]
        body += ',\n "runners": {\n' + ",\n".join(moe_runner_lines(curves, runners)) + "\n }\n}\n"
        json.loads(body)
        path.write_text(body)
    return path


def moe_shape_key(fmt, hidden, inter, experts, topk, moe_tp, moe_ep) -> str:
    """The floors_s key of one fused-MoE shape (kvplan.formulas.batch_step reads the same):
    the smallest time the table measured for that shape, format and split at 1-16 tokens, over
    its routing distributions (balanced, power-law)."""
    return f"moe_{fmt}_{hidden}x{inter}_{experts}x{topk}_tp{moe_tp}_ep{moe_ep}"


def floors_for_kept(root: Path, gpu: str) -> tuple[dict, dict, str]:
    """(floors, per-shape MoE curves, provenance) for a kept vLLM 0.14.0 file
    (aiconfigurator@095f58a5's fractions, not in the wheel): the floors and curves of the
    wheel's newest vLLM tables of that GPU, the all-reduce floor the file's own call cost."""
    import json

    doc = json.loads((TABLES / f"{gpu}.vllm.0.14.0.json").read_text())
    versions = {}

    def rows(op, name, fastest=True):
        v = newest(root, gpu, op, "vllm", name)
        if v is None:
            return None
        versions[f"{op}/{name}"] = v
        return table(root, gpu, op, name, v, "vllm", fastest)

    gemm_rows = rows("gemm", "gemm_perf")
    if gemm_rows is not None:
        host = host_timed(gemm_rows)
        gemm_rows = [r for r in gemm_rows if r["gemm_dtype"] not in host]
    moe_rows = rows("moe", "moe_perf")
    floors = small_shape_floors(
        gemm=gemm_rows,
        moe=moe_rows,
        attention=rows("attention", "generation_attention_perf"),
        mla=rows("mla", "generation_mla_perf"),
        mla_bmm=rows("mla_bmm", "mla_bmm_perf"),
    )
    floors.update(
        small_kernel_floors(
            rows("linear_attention", "gdn_perf", fastest=False),
            rows("quantize", "scale_matrix_perf"),
            floors.get("gemm"),
        )
    )
    floors["allreduce"] = doc["achieved"]["allreduce_call_s"]

    source = (
        "aiconfigurator-core 0.12.0 (PyPI wheel), "
        f"aiconfigurator_core/systems/data/{gpu}/<op>/vllm/<version>; versions per table: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
        + "; allreduce: this file's allreduce_call_s"
    )
    return floors, moe_shape_curves(moe_rows), source


def derive_tables(root: Path, gpu: str, engine: str) -> dict | None:
    """One data file's content: what `Achieved` holds for this GPU and engine, from the newest
    version of each table; what a table lacks borrowed from the H100 SXM's vLLM 0.14.0 file (the
    rule the A100's file documents: a missing pair of fractions is the H100's, a missing MoE curve
    the H100's curve of that format times this GPU's bf16 curve over the H100's, bucket by
    bucket), each borrowing listed. Floors: the smallest measured time of a kernel of each
    family at 1-16 tokens (seconds)."""
    import json

    bw, peaks, link_one_way = datasheet(gpu)
    h100 = json.loads((TABLES / DATASHEET_FILE).read_text())["achieved"]
    versions, borrowed, floors = {}, [], {}

    def rows(op, name, fastest=True):
        v = newest(root, gpu, op, engine, name)
        if v is None:
            return None
        versions[f"{op}/{name}"] = v
        return table(root, gpu, op, name, v, engine, fastest)

    gemm_rows = rows("gemm", "gemm_perf")
    if gemm_rows is None:
        return None
    gemm_rows = [r for r in gemm_rows if r["gemm_dtype"] in GEMM_FORMATS]
    other_engine = "sglang" if engine == "vllm" else "vllm"
    other_version = newest(root, gpu, "gemm", other_engine, "gemm_perf")
    other_rows = (
        table(root, gpu, "gemm", "gemm_perf", other_version, other_engine) if other_version else []
    )
    pairs, why = dense_pairs(gemm_rows, bw, peaks, engine, other_rows)
    dense = {GEMM_FORMATS[k]: _round(v) for k, v in pairs.items()}
    host = host_timed(gemm_rows)
    floors.update(small_shape_floors(gemm=[r for r in gemm_rows if r["gemm_dtype"] not in host]))
    shape_rows = rows("moe", "moe_perf") or []
    moe_rows = [r for r in shape_rows if r["moe_dtype"] in MOE_FORMATS]
    experts = {MOE_FORMATS[k]: _round(v) for k, v in moe(moe_rows, bw, peaks).items()}
    curve = {
        MOE_FORMATS[k]: [list(p) for p in c] for k, c in moe_curve(moe_rows, bw, peaks).items()
    }
    # floors over every format the tables key (MOE_SHAPE_FORMATS): the family's smallest is the
    # smallest fused MoE of any of them, as in the kept vLLM files (floors_for_kept)
    shape_rows = [r for r in shape_rows if r["moe_dtype"] in MOE_SHAPE_FORMATS]
    floors.update(small_shape_floors(moe=shape_rows))
    ctx, gen = (
        rows("attention", "context_attention_perf"),
        rows("attention", "generation_attention_perf"),
    )
    att = attention(ctx, gen, bw, peaks)["attention"] if ctx and gen else None
    floors.update(small_shape_floors(attention=gen))
    mctx, mgen = rows("mla", "context_mla_perf"), rows("mla", "generation_mla_perf")
    ml = mla(mctx, mgen, bw, peaks)["mla"] if mctx and mgen else None
    floors.update(small_shape_floors(mla=mgen, mla_bmm=rows("mla_bmm", "mla_bmm_perf")))
    # the small-kernel floors stand for a one-row kernel's graph-replayed launch, not for a
    # release's kernels: the newest tables', under --at-version too (SGLang 0.5.9-0.5.10's
    # H100/H200 conv update runs 3.9-4.1 us flat to 32 sequences and 4x 0.5.14's kernel at 512,
    # a slower kernel, not the launch floor of the norms and rotaries it stands for)
    asked = AT_VERSION.pop(engine, None)
    try:
        floors.update(
            small_kernel_floors(
                rows("linear_attention", "gdn_perf", fastest=False),
                rows("quantize", "scale_matrix_perf"),
                floors.get("gemm"),
            )
        )
    finally:
        if asked is not None:
            AT_VERSION[engine] = asked
    comm = rows("comm", "custom_allreduce_perf")
    if comm and "backend" not in comm[0]:  # an older collector's rows: graph or eager unsaid
        comm_version = nearest_graph_comm(root, gpu, engine)
        comm = None
        if comm_version is not None:
            versions["comm/custom_allreduce_perf"] = comm_version
            comm = table(root, gpu, "comm", "custom_allreduce_perf", comm_version, engine)
    call_s, link, by_gpus = None, None, {}
    if comm and link_one_way:
        graph = [r for r in comm if r["backend"].endswith("_graph")]
        if graph:
            call_s, link = allreduce(graph, link_one_way, backend=None)[
                max(r["num_gpus"] for r in graph)
            ]
            floors["allreduce"] = call_s
            by_gpus = allreduce_curves_by_gpus(comm)
    gather = nccl_allgather_call_s(root, gpu)
    if gather is not None:
        versions["comm/nccl_perf (nccl)"] = gather[1]

    def take(name, own, fallback):
        if own is None:
            borrowed.append(
                f"{name}: the H100 SXM's (vLLM 0.14.0; no {ENGINE_WORDS[engine]} table here)"
            )
            return fallback
        if isinstance(own, tuple) and None in own:  # one side without a shape that needs it
            side = "compute" if own[0] is None else "memory"
            borrowed.append(f"{name} {side}: the H100 SXM's (vLLM 0.14.0; no such rows here)")
            return tuple(f if o is None else o for o, f in zip(own, fallback, strict=True))
        return own

    for dtype, reason in why.items():
        if GEMM_FORMATS[dtype] in dense:
            borrowed.append(
                f"dense {GEMM_FORMATS[dtype]}: this table's rows {reason} "
                f"(gemm/gemm_perf {other_version})"
            )
    for kind, own in (("dense", dense), ("experts", experts)):
        for fmt, pair in h100[kind].items():
            if fmt not in own:
                own[fmt] = pair
                reasons = [w for d, w in why.items() if kind == "dense" and GEMM_FORMATS[d] == fmt]
                borrowed.append(
                    f"{kind} {fmt}: the H100 SXM's; this table's rows {reasons[0]}"
                    if reasons
                    else f"{kind} {fmt}: the H100 SXM's (no such rows in the table)"
                )
    ref = dict((x, y) for x, y in h100["experts_curve"]["bf16"])
    for fmt, h100_curve in h100["experts_curve"].items():
        if fmt in curve:
            continue
        mine = dict((x, y) for x, y in curve.get("bf16", []))
        curve[fmt] = [
            [x, round(y * mine[x] / ref[x], 2) if x in mine and x in ref else y]
            for x, y in h100_curve
        ]
        borrowed.append(
            f"experts_curve {fmt}: the H100 SXM's times this GPU's bf16 curve over the H100's"
            if mine
            else f"experts_curve {fmt}: the H100 SXM's"
        )
    achieved = {
        "dense": dense,
        "experts": experts,
        "attention": _round(take("attention", att, h100["attention"])),
        "mla": _round(take("mla", ml, h100["mla"])),
        "allreduce_call_s": round(take("allreduce_call_s", call_s, h100["allreduce_call_s"]), 7),
        "link": round(take("link", link, h100["link"]), 2),
        **({"allreduce_curve_s_by_gpus": by_gpus} if by_gpus else {}),
        "allgather_call_s": round(
            take(
                "allgather_call_s",
                gather[0] if gather else None,
                h100.get("allgather_call_s", h100["allreduce_call_s"]),
            ),
            7,
        ),
        "experts_curve": curve,
    }
    version = versions.get("gemm/gemm_perf")
    asked = AT_VERSION.get(engine)
    if asked is not None:  # a table that release did not time: the nearest release's
        borrowed += [
            f"{table_name}: {ENGINE_WORDS[engine]} {v}'s ("
            + (
                "the small-kernel floors: a one-row launch, the newest tables')"
                if table_name in SMALL_FLOOR_TABLES
                else f"{asked}'s: {NOT_KERNEL_TIMES[rejected]})"
                if (rejected := (gpu, table_name.split("/")[0], engine, asked)) in NOT_KERNEL_TIMES
                else f"no {asked} table, or none naming its CUDA-graph rows)"
                if table_name.startswith("comm/")
                else f"no {asked} table)"
            )
            for table_name, v in sorted(versions.items())
            if v != asked and not table_name.endswith("(nccl)")
        ]
    return {
        "gpu": gpu,
        "name": NAMES[gpu],
        "engine": engine,
        "engine_version": version,
        "source": f"{DATA_SOURCE}/"
        f"{gpu}/<op>/{engine}/<version>/*.parquet; versions per table: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
        "derived_by": "scripts/derive_achieved.py: python scripts/derive_achieved.py "
        "DATA --write-tables (DATA: the wheel's aiconfigurator_core/systems/data); datasheet "
        f"rates from hardware_profiles/{TABLE_GPUS[gpu][0]}.yaml" + at_version_words(engine),
        "borrowed": borrowed,
        "floors_s": {k: round(v, 9) for k, v in floors.items()},
        "moe_curves": moe_shape_curves(shape_rows),
        "moe_runners": moe_shape_runners(rows("moe", "moe_perf", fastest=False)),
        "achieved": achieved,
    }


def write_tables(root: Path) -> list[Path]:
    import json

    written = []
    for gpu in KEPT_VLLM_FILES:  # their fractions stay; their floors come from the wheel
        path = TABLES / f"{gpu}.vllm.0.14.0.json"
        doc = json.loads(path.read_text())
        floors, curves, source = floors_for_kept(root, gpu)
        gather = nccl_allgather_call_s(root, gpu)
        if gather is not None:  # the file's own fractions stay; the all-gather is the wheel's
            doc["achieved"]["allgather_call_s"] = round(gather[0], 7)
            source += f"; allgather_call_s: comm/nccl_perf (nccl) {gather[1]}"
        written.append(write_moe_curves(path.name, curves, source))
        doc["floors_s"] = {k: round(v, 9) for k, v in floors.items()}
        doc["floors_source"] = source
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written.append(path)
    for gpu, (_, engines) in TABLE_GPUS.items():
        for engine in engines:
            doc = derive_tables(root, gpu, engine)
            if doc is None:
                continue
            path = TABLES / f"{gpu}.{engine}.{doc['engine_version']}.json"
            curves, runners = doc.pop("moe_curves"), doc.pop("moe_runners")
            path.write_text(json.dumps(doc, indent=1) + "\n")
            written.append(path)
            written.append(write_moe_curves(path.name, curves, doc["source"], runners))
    written += write_attention_backends(root, sorted(p.name for p in TABLES.glob("*.*.*.json")))
    written += write_gemm_grids(root)
    return written


def rewrite_moe_runners(roots: dict) -> list[Path]:
    """--write-moe-runners: every SGLang moe/ file rewritten with its shapes' runners
    (moe_shape_runners), from the data its own `source` names (`roots`: the words `source`
    starts with -> that data folder) at the moe/moe_perf version it names; the curves are
    recomputed and must equal the file's (a file whose rows differ is left alone)."""
    import json
    import re

    written = []
    for path in sorted((TABLES / "moe").glob("*.sglang.*.json")):
        doc = json.loads(path.read_text())
        root = next((r for words, r in roots.items() if doc["source"].startswith(words)), None)
        got = re.search(r"moe/moe_perf ([0-9][0-9a-z.]*?)(?:,|$)", doc["source"])
        if root is None or got is None:
            print(f"left alone: {path.name} (its source names no data given)")
            continue
        gpu, engine, version = path.name.split(".", 2)
        version = version[: -len(".json")]
        AT_VERSION.pop(engine, None)
        if "(git)" in doc["source"]:  # written by --at-version (at_version_words)
            AT_VERSION[engine] = version
        rows_at = got[1]
        curves = moe_shape_curves(table(root, gpu, "moe", "moe_perf", rows_at, engine))
        runners = moe_shape_runners(
            table(root, gpu, "moe", "moe_perf", rows_at, engine, fastest=False)
        )
        kept = {k: v for k, v in curves.items() if _moe_ranks(k) <= MOE_MAX_RANKS}
        if {k: _moe_us_row(v) for k, v in kept.items()} != doc["us"]:
            print(f"left alone: {path.name} (its rows are not {rows_at}'s as read now)")
            continue
        written.append(write_moe_curves(path.name, curves, doc["source"], runners))
    AT_VERSION.pop("sglang", None)
    return written


# the most of a datasheet rate a table's rows may reach (tests/test_kernel_tables.py holds every
# file to it): a release whose rows run faster is not written (B200 SGLang 0.5.10's context
# attention at 1.74 of the bf16 peak, L40S 0.5.12's decode at 12.8 of the bandwidth), and its
# runs take the nearest release's tables
FRACTION_MAX = 1.5


# the tables only the small-kernel floors read (derive_tables: the newest release's)
SMALL_FLOOR_TABLES = ("linear_attention/gdn_perf", "quantize/scale_matrix_perf")


def write_release_tables(root: Path, engine: str, version: str) -> list[Path]:
    """--at-version: the tables file (derive_tables), its fused-MoE curves, attention backends,
    GEMM grid and Gated DeltaNet grid of `engine`'s release `version` for every GPU of
    TABLE_GPUS that has that release's GEMM table (the file's name is its version), each table
    at that release where it was timed there, else the nearest release's (`newest` under
    AT_VERSION; `source` names each table's version folder, `borrowed` those not its own). The
    DSA module grids are not written (a run reads the nearest release's: the sim-kernel-tables
    note says whose)."""
    import json

    AT_VERSION[engine] = version
    written = []
    for gpu, (_, engines) in TABLE_GPUS.items():
        if engine not in engines:
            continue
        if not (root / gpu / "gemm" / engine / version / "gemm_perf.parquet").exists():
            continue
        if (TABLES / f"{gpu}.{engine}.{version}.json").exists():  # the newest's: plain runs'
            continue
        doc = derive_tables(root, gpu, engine)
        if doc is None or doc["engine_version"] != version:
            continue
        name = f"{gpu}.{engine}.{version}.json"
        a = doc["achieved"]
        pairs = [a["attention"], a["mla"], *a["dense"].values(), *a["experts"].values()]
        if max(v for pair in pairs for v in pair) > FRACTION_MAX:
            print(f"not written: {name} (a fraction over {FRACTION_MAX} of the datasheet)")
            continue
        curves, runners = doc.pop("moe_curves"), doc.pop("moe_runners")
        (TABLES / name).write_text(json.dumps(doc, indent=1) + "\n")
        written.append(TABLES / name)
        written.append(write_moe_curves(name, curves, doc["source"], runners))
        written += write_attention_backends(root, [name])
        gemm_path = write_gemm_grid(root, gpu, engine, name)
        if gemm_path is not None:
            written.append(gemm_path)
        op, table_name = RECURRENT_TABLES["gated_deltanet"]
        if newest(root, gpu, op, engine, table_name) == version:  # else the nearest's file
            recurrent_path = write_recurrent_grid(root, gpu, engine)
            if recurrent_path is not None:
                written.append(recurrent_path)
    return written


# --- per attention backend (kvplan.inputs.kernel_tables.attention_backends) -------------------
# aiconfigurator's kernel_source of an attention or MLA row -> the backend name the engine's
# flag takes (SGLang --attention-backend / --prefill- / --decode-attention-backend; vLLM
# --attention-backend), per engine; a source not here is no flag's (vLLM's fa4 is FLASH_ATTN
# with VLLM_FLASH_ATTN_VERSION=4; SGLang's A100 "flash_attention" rows name no backend) and is
# left out. SGLang's "flash_attention" on Hopper is its FlashAttentionBackend, the "fa3" flag.
BACKEND_OF_SOURCE = {
    "sglang": {"triton": "triton", "flashinfer": "flashinfer", "fa3": "fa3",
               "trtllm_mha": "trtllm_mha", "trtllm_mla": "trtllm_mla"},
    "vllm": {"vllm_flash_attn_fa3": "FLASH_ATTN", "vllm_flash_attn_fa2": "FLASH_ATTN",
             "vllm_flash_attn": "FLASH_ATTN", "vllm_triton_attn": "TRITON_ATTN",
             "vllm_flashinfer": "FLASHINFER", "vllm_flashinfer_trtllmdecode": "FLASHINFER",
             "vllm_flashinfer_trtllmprefill": "FLASHINFER", "vllm_flashinfer_fidecode": "FLASHINFER",
             "vllm_flashinfer_fiprefill": "FLASHINFER"},
}  # fmt: skip
HOPPER = ("h100_sxm", "h200_sxm")
# decode calls: KV bytes each sequence of a call reads, in power-of-two buckets from 2^12 (4 KiB)
DECODE_CURVE_LOW = 2**12


def _backend_of(engine: str, gpu: str, source: str) -> str | None:
    if engine == "sglang" and source == "flash_attention" and gpu in HOPPER:
        return "fa3"
    return BACKEND_OF_SOURCE[engine].get(source)


def _kv_bytes(r: dict, mla: bool) -> float:
    """KV bytes one generation row's kernel reads: every sequence's cached keys and values
    (MLA: its 576-wide latent), bf16 or fp8."""
    size = 1 if r["kv_cache_dtype"] == "fp8" else 2
    context = r["isl"] + r["step"]
    if mla:
        return r["batch_size"] * context * 576 * size
    return r["batch_size"] * context * r["num_key_value_heads"] * r["head_dim"] * 2 * size


def decode_curves(rows, mla: bool) -> dict:
    """{kv dtype: {query heads: {batch: [[KV bytes per sequence, seconds], ...]}}}: per cache
    dtype, query heads on the rank and batch size the table timed, the time of one
    decode-attention call over the rows whose sequences each read about that many bytes
    (power-of-two buckets; full attention rows), seconds to four significant figures.
    MLA: by query heads (power-of-two buckets of the rows' num_heads): at the same bytes a call
    of more heads does more work (H200 SGLang 0.5.14 FA3 MLA, 128 sequences of 4,096 tokens,
    bf16 cache: 156 us at 16 heads, 262 us at 128). Its rows are a grid of one shape
    (DeepSeek's 576-wide latent), each (heads, batch, context) timed once, contexts a power of
    two apart: a bucket holds one row and the curve is the rows themselves, each at its own
    bytes (4,096 tokens x 576 x 2 B = 4.5 MiB; stored at the 4 MiB bucket, a call of 128
    sequences of 4,096 tokens at 16 heads read 173 us off the curve, not its row's 156), where
    pooling neighbouring head counts would blur what the heads cost; their single-row noise
    along bytes is a few percent (the same FA3, 1 sequence of 16 heads: 16.7 us at 256
    tokens, 16.1 us at 512). GQA/MHA: pooled over the query heads (heads key 0), the median of a bucket's rows of
    many shapes (KV heads, head dims), buckets of fewer than 2 rows left out: split by heads,
    the sparse tables' buckets hold one row each (H100 SGLang triton bf16: 172 points pooled,
    none by heads), while at the same bytes the heads move a call little next to MLA's (H200
    SGLang fa3 bf16, 64 sequences at 1 MiB: 29.7-34.4 us over 1-128 heads). By
    cache dtype: at the same bytes an fp8 cache's call is not a bf16 one's (the same FA3 MLA,
    128 sequences of 16 heads: bf16 at 4,096 tokens 156 us, fp8 at 8,192 tokens, the same
    bytes, 2,042 us: the fp8 path dequantizes). By batch as well as bytes: at the same bytes a
    call over many short sequences takes several times one over a few long ones (H100 fa3 at 4
    MiB: 10 us for 1-32 sequences, 50-190 us for 256-1,024)."""
    buckets: dict = {}
    for r in rows:
        if r.get("window_size") not in (None, 0):
            continue
        per_sequence = _kv_bytes(r, mla) / r["batch_size"]
        key = 2 ** max(round(math.log2(max(per_sequence, 1))), round(math.log2(DECODE_CURVE_LOW)))
        heads = 2 ** round(math.log2(r["num_heads"])) if mla else 0
        by_batch = buckets.setdefault(r["kv_cache_dtype"], {}).setdefault(heads, {})
        by_bytes = by_batch.setdefault(r["batch_size"], {})
        by_bytes.setdefault(key, []).append((r["latency"] * 1e-3, per_sequence))
    out: dict = {}
    least = 1 if mla else 2
    for kv, by_heads in sorted(buckets.items()):
        for heads, by in sorted(by_heads.items()):
            for batch, by_bytes in sorted(by.items()):
                curve = [
                    # a lone row at its own bytes, a pooled bucket at its power of two
                    [
                        round(v[0][1]) if len(v) == 1 else k,
                        float(f"{statistics.median(s for s, _ in v):.4g}"),
                    ]
                    for k, v in sorted(by_bytes.items())
                    if len(v) >= least
                ]
                if curve:
                    out.setdefault(kv, {}).setdefault(str(heads), {})[str(batch)] = curve
    return out


# prefill calls: the parallel units of a call (sequences x query heads on the rank) in power-of-two
# buckets; the kernel's grid is sequences x heads x query tiles, so at one prompt length a call
# over 8 sequences of 8 heads takes what one over 1 sequence of 64 heads does (B200 SGLang
# trtllm_mha, head dim 128, 1,024 tokens: 39.0-50.4 us over every split of 64 units, 57.0 us for
# 64 sequences of one head)
def _prefill_dtype_rows(rows, kv: str, dtype_key: str) -> list:
    """The rows a `kv` cache's prefill runs on: that cache dtype with bf16 attention math where
    the backend timed it, else its own (trtllm_mha pairs an fp8 cache with fp8 attention only)."""
    own = [r for r in rows if r["kv_cache_dtype"] == kv]
    bf16 = [r for r in own if r.get(dtype_key, "bfloat16") == "bfloat16"]
    return bf16 or own


# the head shape an SGLang MLA context row timed, by kernel_source (aiconfigurator
# collector/sglang/collect_mla.py, __compat__ sglang==0.5.14, unchanged since the 0.5.14 data
# commit e23be5a79): trtllm_mla's context rows run the non-absorbed MHA form (q_nope + q_rope =
# 192 by v_head_dim = qk_nope 128: "Prefill: Non-absorbed, standard projected heads"); every other
# backend's (FA3's "flash_attention" on Hopper, triton) set v_head_dim = kv_lora_rank 512 and
# head_dim = 576 with one KV head and a ForwardBatch without attn_attend_prefix_cache, so
# FlashAttentionBackend.forward_extend takes its "Do absorbed multi-latent attention" branch
# (flash_attn_with_kvcache over the 576-wide latent cache) and the triton backend its extend
# kernel over 576-wide q/k and 512-wide v: the absorbed latent form
MLA_PREFILL_SHAPE = {"trtllm_mla": "192x128"}
MLA_LATENT_SHAPE = "576x512"  # kv_lora_rank 512 + qk_rope 64 by kv_lora_rank


def mla_prefill_shape(kernel_source: str) -> str:
    """The head shape one SGLang MLA context row timed (MLA_PREFILL_SHAPE): the MHA form's
    "192x128" for trtllm_mla, else the absorbed latent form's "576x512"."""
    return MLA_PREFILL_SHAPE.get(kernel_source, MLA_LATENT_SHAPE)


def prefill_curves(rows, mla: bool) -> dict:
    """{kv dtype: {"<qk head dim>x<v head dim>[/w<window>]": {units: [[prompt tokens, seconds],
    ...]}}}: per cache dtype and head shape (MLA's rows: the form the collector timed,
    mla_prefill_shape: DeepSeek's 192x128 MHA form or its 576x512 latent; a sliding
    window's rows under their own key), the median measured time of one causal prefill
    (context) call with no cached tokens, by the call's parallel units (sequences x query heads
    on the rank, power-of-two buckets) and prompt tokens per sequence (the table's own
    lengths), over any KV-head count; seconds to four significant figures."""
    out: dict = {}
    dtype_key = "mla_dtype" if mla else "attn_dtype"
    rows = [r for r in rows if r.get("step", 0) == 0]
    for kv in ("bfloat16", "fp8"):
        buckets: dict = {}
        for r in _prefill_dtype_rows(rows, kv, dtype_key):
            head = (
                mla_prefill_shape(r["kernel_source"]) if mla else f"{r['head_dim']}x{r['head_dim']}"
            )
            if r.get("window_size"):
                head += f"/w{r['window_size']}"
            units = 2 ** round(math.log2(r["batch_size"] * r["num_heads"]))
            cell = buckets.setdefault(head, {}).setdefault(units, {})
            cell.setdefault(r["isl"], []).append(r["latency"] * 1e-3)
        if buckets:
            out[kv] = {
                head: {
                    str(units): [
                        [isl, float(f"{statistics.median(v):.4g}")]
                        for isl, v in sorted(by_isl.items())
                    ]
                    for units, by_isl in sorted(by_units.items())
                }
                for head, by_units in sorted(buckets.items())
            }
    return out


def attention_backends(root: Path, gpu: str, engine: str) -> dict | None:
    """{backend: entry} of one GPU and engine from its attention (GQA/MHA) and MLA kernel
    tables, each backend from its own rows only (no fastest-of-several: `table` picks that):
    kind (mha, mla), the kernel sources and table versions read, the rows, the (compute,
    memory) pair as `attention` / `mla` derive it (None where its rows have no shape that
    side needs), the smallest decode call at 1-16 sequences (floor_s), the decode curve
    (decode_calls) and the prefill curves (prefill_calls). vLLM's MLA tables time whole modules (projections included), not the
    kernel: not read here."""
    import pyarrow.parquet as pq

    bw, peaks, _ = datasheet(gpu)
    out: dict = {}
    for kind, op, ctx_name, gen_name in (
        ("mha", "attention", "context_attention_perf", "generation_attention_perf"),
        ("mla", "mla", "context_mla_perf", "generation_mla_perf"),
    ):
        version = newest(root, gpu, op, engine, gen_name)
        if version is None or newest(root, gpu, op, engine, ctx_name) != version:
            continue
        if AT_VERSION.get(engine, version) != version:  # that release's rows only
            continue
        folder = root / gpu / op / engine / version
        ctx = pq.read_table(folder / f"{ctx_name}.parquet").to_pylist()
        gen = pq.read_table(folder / f"{gen_name}.parquet").to_pylist()
        by: dict = {}
        for phase, rows in (("prefill", ctx), ("decode", gen)):
            for r in rows:
                name = _backend_of(engine, gpu, r["kernel_source"])
                if name is not None:
                    by.setdefault(name, {"prefill": [], "decode": []})[phase].append(r)
        for name, phases in sorted(by.items()):
            pre, dec = phases["prefill"], phases["decode"]
            full_pre = [r for r in pre if r.get("window_size") in (None, 0)]
            full_dec = [r for r in dec if r.get("window_size") in (None, 0)]
            derive = mla if kind == "mla" else attention
            compute, memory = derive(full_pre, full_dec, bw, peaks)[
                kind.replace("mha", "attention")
            ]
            small = [r["latency"] * 1e-3 for r in full_dec if r["batch_size"] <= 16]
            entry = {
                "kind": kind,
                "kernel_source": sorted({r["kernel_source"] for r in pre + dec}),
                "version": version,
                "rows": {"prefill": len(pre), "decode": len(dec)},
                "pair": None if compute is None or memory is None else _round((compute, memory)),
                "floor_s": round(min(small), 9) if small else None,
                "decode_calls": decode_curves(full_dec, kind == "mla"),
                "prefill_calls": prefill_curves(pre, kind == "mla"),
            }
            out[f"{kind}:{name}"] = entry
    return out or None


def _compact_prefill_calls(doc: dict) -> str:
    """The attention/ file's text: indented, but each backend's prefill curves of one cache dtype
    and head shape, and its decode curves of one cache dtype and head count, on one line
    (thousands of points)."""
    import json

    compact = {}
    for name, entry in doc["backends"].items():
        for kv, by_heads in entry["decode_calls"].items():
            for heads, curves in by_heads.items():
                mark = f"@{name}@decode@{kv}@{heads}@"
                compact[json.dumps(mark)] = json.dumps(curves, separators=(",", ":"))
                by_heads[heads] = mark
        for kv, heads in entry["prefill_calls"].items():
            for head, curves in heads.items():
                mark = f"@{name}@{kv}@{head}@"
                compact[json.dumps(mark)] = json.dumps(curves, separators=(",", ":"))
                heads[head] = mark
    text = json.dumps(doc, indent=1) + "\n"
    for mark, body in compact.items():
        text = text.replace(mark, body)
    json.loads(text)  # well-formed
    return text


def write_attention_backends(root: Path, names: list[str]) -> list[Path]:
    """kernel_tables/attention/<name>: the per-backend attention entries of the tables file
    <name> (<gpu>.<engine>.<version>.json), with their provenance."""

    written = []
    for name in names:
        gpu, engine = name.split(".")[:2]
        backends = attention_backends(root, gpu, engine)
        if not backends:
            continue
        versions = sorted({e["version"] for e in backends.values()})
        doc = {
            "source": f"{DATA_SOURCE}/"
            f"{gpu}/{{attention,mla}}/{engine}/<version>/{{context,generation}}_"
            f"{{attention,mla}}_perf.parquet; versions {', '.join(versions)}",
            "derived_by": "scripts/derive_achieved.py DATA --write-tables (attention_backends): "
            "per backend (kernel_source -> the engine's flag name, BACKEND_OF_SOURCE), its own "
            "rows only: the (compute, memory) fractions of `attention`/`mla` over full-attention "
            "rows, the smallest decode call at 1-16 sequences, and the median decode call by "
            "cache dtype, query heads on the rank, batch and KV bytes per sequence (decode_calls: "
            "{dtype: {heads: {batch: [[bytes, s], ...]}}}, bytes in power-of-two buckets; MLA: "
            "by heads (power-of-two buckets), its grid of one row per heads, batch and context "
            "the rows themselves at their own bytes; GQA/MHA: pooled over heads (key 0), the "
            "median of >= 2 rows at the bucket's bytes), "
            "and the median "
            "prefill call by cache dtype, head shape, sequences x query heads (power-of-two "
            "buckets) and prompt tokens (prefill_calls); datasheet rates from hardware_profiles/"
            f"{TABLE_GPUS[gpu][0]}.yaml" + at_version_words(engine),
            "backends": backends,
        }
        path = TABLES / "attention" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(_compact_prefill_calls(doc))
        written.append(path)
    return written


# AMD Instinct: no aiconfigurator tables. AMD's AITER ships its GEMM tuner's per-shape kernel
# timings (aiter/configs/*.csv: gfx, cu_num, M, N, K, ..., us, ..., bw); the decode GEMMs of
# bf16_decode_gfx942_m1_m4_canary.csv (gfx942, 304 CUs: MI300X/MI325X) at M = 1-4 give the
# bandwidth a dense bf16 decode GEMM reaches and the smallest GEMM time. Only weights larger than
# the 256 MB Infinity Cache count for the fraction (a tuner's loop over a smaller weight reads it
# from the cache, not from HBM).
AITER_COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"
AITER_DECODE_CSV = "aiter/configs/bf16_decode_gfx942_m1_m4_canary.csv"
PARTIAL = TABLES / "partial"


def aiter_decode_gemm(csv_text: str, bw: float, cache_bytes: float, cu_num: int = 304) -> dict:
    """{"memory_fraction": median over the rows whose bf16 weights exceed `cache_bytes` of
    (N x K x 2 B / us) / bw, "floor_s": the smallest time of any row, "rows": the rows used}."""
    import csv
    import io

    rows = [
        r
        for r in csv.DictReader(io.StringIO(csv_text))
        if int(r["cu_num"]) == cu_num and r["dtype"] == "torch.bfloat16"
    ]
    big = [r for r in rows if int(r["N"]) * int(r["K"]) * 2 > cache_bytes]
    fractions = [int(r["N"]) * int(r["K"]) * 2 / (float(r["us"]) * 1e-6) / bw for r in big]
    return {
        "memory_fraction": round(statistics.median(fractions), 2),
        "floor_s": min(float(r["us"]) for r in rows) * 1e-6,
        "rows": [[int(r["M"]), int(r["N"]), int(r["K"]), float(r["us"])] for r in big],
        "rows_total": len(rows),
    }


def gemm_call_s(rows, dtype: str, m: int, n: float, k: float) -> float:
    """The GPU's measured time of one GEMM of `m` tokens by an n x k weight in `dtype` (a GEMM
    table's rows: aiconfigurator's grid of n and k at each m): bilinear in log n and log k
    between the four grid points around (n, k), at the table's m nearest below or at `m`.
    Outside the grid, the edge row (no extrapolation). Seconds."""
    sel = [r for r in rows if r["gemm_dtype"] == dtype]
    ms = sorted({r["m"] for r in sel})
    at = max([x for x in ms if x <= m] or ms[:1])
    grid = {(r["n"], r["k"]): r["latency"] * 1e-3 for r in sel if r["m"] == at}
    ns, ks = sorted({a for a, _ in grid}), sorted({b for _, b in grid})

    def bracket(v, axis):
        if v <= axis[0]:
            return axis[0], axis[0], 0.0
        if v >= axis[-1]:
            return axis[-1], axis[-1], 0.0
        hi = next(x for x in axis if x >= v)
        lo = axis[axis.index(hi) - 1]
        return lo, hi, (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))

    n0, n1, wn = bracket(n, ns)
    k0, k1, wk = bracket(k, ks)
    return (
        grid[n0, k0] * (1 - wn) * (1 - wk)
        + grid[n1, k0] * wn * (1 - wk)
        + grid[n0, k1] * (1 - wn) * wk
        + grid[n1, k1] * wn * wk
    )


# --- per GEMM shape at every token count (kvplan.inputs.kernel_tables.gemm_grid) -------------
# the table's m kept, all measured: the powers of two from one token to its largest, 32,768
# (past the engines' prefill chunks: SGLang's chunked_prefill_size 2,048-16,384, vLLM's
# max_num_batched_tokens 2,048-16,384); the 1-17, 33, ... 4,353 rows between are left out
GEMM_GRID_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


# vLLM's GEMM collector times fp8_block without a CUDA graph (aiconfigurator@095f58a5
# collector/vllm/collect_gemm.py: `use_cuda_graph=gemm_type != "fp8_block"`), and the kept
# vLLM 0.14.0 tables' fp8_block rows are not the kernel's graph time: on the H100 at one token
# a 7168x2048 block-fp8 GEMM takes 30.8 us there, 2.9x SGLang 0.5.9's graph-timed DeepGEMM row
# of the same shape (10.8 us), the kernel vLLM runs by default on Hopper (VLLM_USE_DEEP_GEMM
# "1", should_use_deepgemm_for_fp8_linear). Their fastest call (8.3x bf16's) is under
# HOST_TIMED_FACTOR, so host_timed keeps them for the fractions (as before); the grid, which
# prices every shape from its own row, leaves them out (the step model prices block fp8 at the
# pair of fractions, as before the vLLM grids).
EAGER_COLLECTED = {"vllm": {"fp8_block"}}


def gemm_grid(rows, engine: str = "") -> dict:
    """{"m": [...], "n": [...], "k": [...], "us": {kvplan format: [[[us at each k] at each n] at
    each m]}} from one GEMM table's rows: every (n, k) the table timed at GEMM_GRID_TOKENS, the
    fastest kernel per shape (`table`), microseconds to three significant figures (null: not
    timed). Formats timed by the host (`host_timed`: not in a CUDA graph) are left out; the
    step model prices those at the pair of fractions. The token axis is GEMM_GRID_TOKENS up to
    the table's largest (aiconfigurator@095f58a5's H100 and A100 vLLM 0.14.0 tables stop at
    8,192; the step model goes linear in tokens past the last, gemm_calls.along_tokens_s)."""
    host = host_timed(rows) | EAGER_COLLECTED.get(engine, set())
    kept = [
        r
        for r in rows
        if r["gemm_dtype"] in GEMM_FORMATS
        and r["gemm_dtype"] not in host
        and r["m"] in GEMM_GRID_TOKENS
    ]
    timed = {r["m"] for r in kept}
    tokens = [m for m in GEMM_GRID_TOKENS if m <= max(timed, default=0)]
    ns = sorted({r["n"] for r in kept})
    ks = sorted({r["k"] for r in kept})
    at = {(r["gemm_dtype"], r["m"], r["n"], r["k"]): r["latency"] * 1e3 for r in kept}
    us = {}
    for dtype in sorted({r["gemm_dtype"] for r in kept}):
        us[GEMM_FORMATS[dtype]] = [
            [
                [float(f"{at[dtype, m, n, k]:.3g}") if (dtype, m, n, k) in at else None for k in ks]
                for n in ns
            ]
            for m in tokens
        ]
    return {"m": tokens, "n": ns, "k": ks, "us": us}


def mla_bmm_grid(rows) -> dict:
    """{"heads": [...], "us": {"bf16": {"pre": [[us at each head] at each m], "post": ...}}}
    from one mla_bmm table's rows: the bf16 rows (the engines' torch.bmm; the fp8 kernels are
    left out: which BMM an fp8 checkpoint's absorbed projections run differs by engine path) at
    GEMM_GRID_TOKENS tokens, microseconds to three significant figures (null: not timed)."""
    kept = [
        r for r in rows if r.get("bmm_dtype") == "bfloat16" and r["num_tokens"] in GEMM_GRID_TOKENS
    ]
    heads = sorted({r["num_heads"] for r in kept})
    at = {(r["op_name"], r["num_tokens"], r["num_heads"]): r["latency"] * 1e3 for r in kept}
    us: dict = {}
    for op, key in (("mla_gen_pre", "pre"), ("mla_gen_post", "post")):
        if any(o == op for o, _, _ in at):
            us[key] = [
                [float(f"{at[op, m, h]:.3g}") if (op, m, h) in at else None for h in heads]
                for m in GEMM_GRID_TOKENS
            ]
    return {"heads": heads, "us": {"bf16": us} if len(us) == 2 else {}}


def write_gemm_grid(root: Path, gpu: str, engine: str, name: str) -> Path | None:
    """kernel_tables/gemm/<name>: the GPU's graph-timed GEMM of every (n, k) the engine's newest
    table holds at GEMM_GRID_TOKENS tokens (gemm_grid), read by the step model to price each
    dense GEMM of a step at its own shape (None: no GEMM table)."""
    import json

    version = newest(root, gpu, "gemm", engine, "gemm_perf")
    if version is None:
        return None
    grid = gemm_grid(table(root, gpu, "gemm", "gemm_perf", version, engine), engine)
    if not grid["us"]:
        return None
    head = {
        "source": f"{DATA_SOURCE}/{gpu}/gemm/{engine}/{version}/gemm_perf.parquet",
        "derived_by": "scripts/derive_achieved.py DATA --write-gemm-grids (gemm_grid): each "
        "GEMM's measured time by tokens (m), output features (n) and input features (k), the "
        "fastest kernel per shape, formats timed in a CUDA graph only, microseconds"
        + at_version_words(engine),
        "m": grid["m"],
        "n": grid["n"],
        "k": grid["k"],
    }
    bmm_version = newest(root, gpu, "mla_bmm", engine, "mla_bmm_perf")
    if bmm_version is not None:
        bmm = mla_bmm_grid(table(root, gpu, "mla_bmm", "mla_bmm_perf", bmm_version, engine))
        if bmm["us"]:
            head["mla_bmm"] = {
                "source": f"aiconfigurator_core/systems/data/{gpu}/mla_bmm/{engine}/"
                f"{bmm_version}/mla_bmm_perf.parquet",
                "derived_by": "mla_bmm_grid: MLA's two absorbed BMMs (pre: q_nope [heads, m, "
                "128] x [heads, 128, 512]; post: [heads, m, 512] x [heads, 512, 128], the "
                "DeepSeek slice the table times) in bf16 (torch.bmm) by tokens (m, as above) "
                "and heads, microseconds (null: not timed)",
                "heads": bmm["heads"],
                "us": bmm["us"],
            }
    lines = []
    for fmt, by_m in grid["us"].items():
        rows = ",\n  ".join(json.dumps(block, separators=(",", ":")) for block in by_m)
        lines.append(f" {json.dumps(fmt)}: [\n  {rows}\n ]")
    return write_rows_file(TABLES / "gemm" / name, head, lines)


def write_gemm_grids(root: Path) -> list[Path]:
    """write_gemm_grid for every GPU and engine --write-tables writes from the wheel."""
    written = []
    for gpu, (_, engines) in TABLE_GPUS.items():
        for engine in engines:
            version = newest(root, gpu, "gemm", engine, "gemm_perf")
            if version is None:
                continue
            path = write_gemm_grid(root, gpu, engine, f"{gpu}.{engine}.{version}.json")
            if path is not None:
                written.append(path)
    return written


def write_kept_vllm_gemm_grids(root: Path, version: str) -> list[Path]:
    """--write-gemm-grids --engine vllm --at-version VERSION: the GEMM grid of each
    KEPT_VLLM_FILES GPU (H100, H200, A100 SXM) at vLLM `version` from DATA, the
    aiconfigurator@095f58a5 data folder that holds those tables (the 0.12.0 wheel does not):
    the grids those GPUs' vLLM runs price each dense GEMM on, in every format the table timed
    in a CUDA graph (gemm_grid)."""
    AT_VERSION["vllm"] = version
    written = []
    for gpu in KEPT_VLLM_FILES:
        if newest(root, gpu, "gemm", "vllm", "gemm_perf") != version:
            continue
        path = write_gemm_grid(root, gpu, "vllm", f"{gpu}.vllm.{version}.json")
        if path is not None:
            written.append(path)
    return written


# ---- recurrent layers (kernel_tables/recurrent/) ------------------------------------------
# The kernels one Gated DeltaNet layer runs per step, by phase, as the engines' GDN backends
# call them (SGLang's hybrid_linear_attn_backend.py, vLLM's gdn_attn / qwen3_next.py): a decode
# runs the conv-state update, then the recurrent state update (gating fused in); a prefill chunk
# the causal conv over its tokens, then the chunked delta rule. The norms and projections
# around them are in the GEMM and small-kernel terms.
RECURRENT_KERNELS = {
    "decode": ("generation", "causal_conv1d_update", "fused_recurrent_"),
    "prefill": ("context", "causal_conv1d_fn", "chunk_"),
}
RECURRENT_TABLES = {"gated_deltanet": ("linear_attention", "gdn_perf")}


def recurrent_grid(rows) -> dict:
    """{"decode_batch", "prefill_batch", "prefill_tokens", "us"} from one Gated DeltaNet table's
    rows (every kernel_source kept: `table(..., fastest=False)`): per head shape on a rank
    ("gated_deltanet/<key heads>x<key dim>/<value heads>x<value dim>/<phase>"), the layer's
    kernels of that phase (RECURRENT_KERNELS: the conv and the state kernel) summed at each batch
    (decode: sequences of one token; prefill: sequences x tokens per sequence), each kernel at
    the median over the table's models of that head shape (the kernels see the heads, not the
    model's width), microseconds; None where a kernel was not timed at that point. A phase whose
    state kernel the table lacks (the A100's SGLang 0.5.10 table has no chunked kernel) is left
    out."""
    by: dict = {}
    for r in rows:
        for phase, (row_phase, conv, state) in RECURRENT_KERNELS.items():
            source = r["kernel_source"]
            if r["phase"] != row_phase or not (source == conv or source.startswith(state)):
                continue
            shape = f"{r['num_k_heads']}x{r['head_k_dim']}/{r['num_v_heads']}x{r['head_v_dim']}"
            part = "conv" if source == conv else "state"
            at = (r["batch_size"], r["seq_len"] if phase == "prefill" else 1)
            by.setdefault((phase, shape), {}).setdefault(at, {}).setdefault(part, []).append(
                r["latency"] * 1e3
            )
    decode_batch = sorted({b for (ph, _), pts in by.items() if ph == "decode" for b, _ in pts})
    prefill_batch = sorted({b for (ph, _), pts in by.items() if ph == "prefill" for b, _ in pts})
    prefill_tokens = sorted({s for (ph, _), pts in by.items() if ph == "prefill" for _, s in pts})

    def us(points: dict, at) -> float | None:
        parts = points.get(at, {})
        if set(parts) != {"conv", "state"}:
            return None
        return round(sum(statistics.median(v) for v in parts.values()), 3)

    out: dict = {}
    for (phase, shape), points in sorted(by.items()):
        if not any(set(p) == {"conv", "state"} for p in points.values()):
            continue
        if phase == "decode":
            out[f"gated_deltanet/{shape}/decode"] = [us(points, (b, 1)) for b in decode_batch]
        else:
            out[f"gated_deltanet/{shape}/prefill"] = [
                [us(points, (b, s)) for s in prefill_tokens] for b in prefill_batch
            ]
    return {
        "decode_batch": decode_batch,
        "prefill_batch": prefill_batch,
        "prefill_tokens": prefill_tokens,
        "us": out,
    }


def write_recurrent_grid(root: Path, gpu: str, engine: str) -> Path | None:
    """kernel_tables/recurrent/<gpu>.<engine>.<version>.json: the GPU's Gated DeltaNet layer
    kernels by head shape, phase and batch (recurrent_grid) from the engine's newest
    linear_attention/gdn_perf table, read by the step model to time each recurrent layer
    (None: no table, or one without both phases)."""
    import json

    op, name = RECURRENT_TABLES["gated_deltanet"]
    version = newest(root, gpu, op, engine, name)
    if version is None:
        return None
    grid = recurrent_grid(table(root, gpu, op, name, version, engine, fastest=False))
    phases = {key.rsplit("/", 1)[1] for key in grid["us"]}
    if phases != {"decode", "prefill"}:
        return None
    head = {
        "source": f"{DATA_SOURCE}/{gpu}/{op}/{engine}/{version}/{name}.parquet",
        "derived_by": "scripts/derive_achieved.py DATA --write-recurrent-grids (recurrent_grid): "
        "one Gated DeltaNet layer's kernels per phase summed (decode: causal_conv1d_update + the "
        "fused recurrent state update; prefill: causal_conv1d_fn + the chunked delta rule), by "
        "the heads on a rank (key heads x key dim / value heads x value dim), at each batch "
        "(decode: sequences; prefill: sequences x tokens per sequence), the median over the "
        "table's models of that head shape, microseconds" + at_version_words(engine),
        "decode_batch": grid["decode_batch"],
        "prefill_batch": grid["prefill_batch"],
        "prefill_tokens": grid["prefill_tokens"],
    }
    lines = [
        f" {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}"
        for key, value in grid["us"].items()
    ]
    return write_rows_file(TABLES / "recurrent" / f"{gpu}.{engine}.{version}.json", head, lines)


def write_recurrent_grids(root: Path) -> list[Path]:
    """write_recurrent_grid for every GPU of TABLE_GPUS and both engines."""
    written = []
    for gpu in TABLE_GPUS:
        for engine in ("vllm", "sglang"):
            path = write_recurrent_grid(root, gpu, engine)
            if path is not None:
                written.append(path)
    return written


def gemm_calls_s(rows, calls, m: int) -> float:
    """The summed measured time of `calls` ((n, k, dtype, count), ...) at `m` tokens: what the
    GPU's table says the dense GEMMs of one step take, each at its own shape (gemm_call_s). A
    check of the step model's pooled dense term (max(weights / achieved bandwidth, launches x the
    smallest GEMM), formulas/batch_step.py, where no grid prices the calls), not an input to it."""
    return sum(count * gemm_call_s(rows, dtype, m, n, k) for n, k, dtype, count in calls)


# AITER's fused-MoE and block-fp8 GEMM tuner tables (aiter@AITER_COMMIT) with rows timed on
# gfx942 at 304 CUs (MI300X/MI325X): the model-specific files under aiter/configs/model_configs
# (us = the whole fused MoE of one layer on one rank: routing sort, both expert GEMMs, the
# weighted sum; AITER's tuner draws each token's top-k uniformly over the file's experts, the
# shared expert fused in as one more, e.g. 257 x 9).
AITER_FMOE_CSVS = (
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_glm5_1.csv",
    "aiter/configs/model_configs/mimo_v2_5_pro_tuned_fmoe.csv",
    "aiter/configs/model_configs/qwen3_235b_bf16_tuned_fmoe.csv",
)
AITER_BLOCKSCALE_GEMM_CSVS = (
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_glm5_1.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen36_27b.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_235b.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_vl_32b.csv",
)


def _aiter_rows(csv_text: str, cu_num: int, gfx: str = "gfx942") -> list:
    """The rows of one AITER tuner table timed on `gfx` with `cu_num` CUs (a failed tune, us
    0, left out). A table without a gfx column (AITER's older fused-MoE header) is read as
    `gfx`'s where its cu_num matches: 304 CUs is gfx942 alone, and 256 CUs gfx950 in those
    files (gfx1250, also 256 CUs, came to AITER's tables in 2026-06 with the gfx column)."""
    import csv
    import io

    return [
        r
        for r in csv.DictReader(io.StringIO(csv_text))
        if (r.get("gfx") or gfx) == gfx and int(r["cu_num"]) == cu_num and float(r["us"]) > 0
    ]


def _aiter_moe_format(r: dict) -> str | None:
    """kvplan's weights format of an AITER fused-MoE row: block fp8 (per 1 x 128) "fp8",
    unquantized bf16 "bf16", any other quantization None (not read)."""
    if r["q_type"] == "QuantType.per_1x128" and "float8" in r["q_dtype_w"]:
        return "fp8"
    if r["q_type"] == "QuantType.No" and r["q_dtype_w"] == "torch.bfloat16":
        return "bf16"
    return None


def aiter_fmoe(
    csv_texts, bw: float, peaks: dict, cache_bytes: float, cu_num: int = 304, gfx: str = "gfx942"
) -> dict:
    """{format: {"curve": ((tokens per expert, slowdown), ...), "floor_s", "rows", "curve_rows"}}
    from AITER's fused-MoE tuner rows: the slowdown against the datasheet roofline (measured /
    max(touched expert bytes / BW, FLOPs / peak), `moe_curve`'s buckets and uniform routing
    over the row's experts) over the rows whose touched weights exceed `cache_bytes` (a
    tuner's loop over fewer bytes reads them from the Infinity Cache); the floor is the smallest
    time of any row at 1-16 tokens."""
    out: dict = {}
    for text in csv_texts:
        for r in _aiter_rows(text, cu_num, gfx):
            fmt = _aiter_moe_format(r)
            if fmt is None:
                continue
            h, inter, experts, k, tokens = (
                int(r[x]) for x in ("model_dim", "inter_dim", "expert", "topk", "token")
            )
            seconds = float(r["us"]) * 1e-6
            touched = experts * (1 - (1 - k / experts) ** tokens)
            weights = touched * 3 * h * inter * (1 if fmt == "fp8" else 2)
            flops = 2 * 3 * h * inter * tokens * k
            ideal = max(weights / bw, flops / peaks[fmt])
            per_expert = tokens * k / experts
            got = out.setdefault(fmt, {"buckets": {}, "floor_s": None, "rows": 0})
            got["rows"] += 1
            if tokens <= 16:
                floor = got["floor_s"]
                got["floor_s"] = seconds if floor is None else min(floor, seconds)
            if weights > cache_bytes:
                key = 2.0 ** round(math.log2(per_expert)) if per_expert >= 1 else 0.5
                got["buckets"].setdefault(key, []).append(seconds / ideal)
    return {
        fmt: {
            "curve": tuple(
                (key, round(statistics.median(v), 2)) for key, v in sorted(got["buckets"].items())
            ),
            "floor_s": got["floor_s"],
            "rows": got["rows"],
            "curve_rows": sum(len(v) for v in got["buckets"].values()),
        }
        for fmt, got in sorted(out.items())
    }


def aiter_blockscale_gemm(csv_texts, peak: float, cu_num: int = 304, gfx: str = "gfx942") -> dict:
    """{"compute_fraction": median over the rows at M >= 4,096 of (2 M N K / peak) / time,
    "floor_s": the smallest time at M <= 16, "rows", "compute_rows"} of AITER's block-fp8
    (a8w8, 1 x 128 activation and 128 x 128 weight scales) GEMM tuner rows. No memory side:
    no row at M <= 16 has fp8 weights over the 256 MB Infinity Cache."""
    rows = [r for text in csv_texts for r in _aiter_rows(text, cu_num, gfx)]
    compute = [
        2 * int(r["M"]) * int(r["N"]) * int(r["K"]) / peak / (float(r["us"]) * 1e-6)
        for r in rows
        if int(r["M"]) >= 4096
    ]
    return {
        "compute_fraction": round(statistics.median(compute), 2),
        "floor_s": min(float(r["us"]) for r in rows if int(r["M"]) <= 16) * 1e-6,
        "rows": len(rows),
        "compute_rows": len(compute),
    }


# The same tuner tables' rows timed on gfx950 at 256 CUs (MI355X and MI350X: one die, one HBM3E
# at 8 TB/s, the MI350X at a 2.2 GHz peak clock to the MI355X's 2.4; the rows do not say which).
# Every bf16 GEMM table AITER ships (its tuned dispatcher's per-shape pick: the fastest of
# hipBLASLt, its triton, flydsl and asm kernels), the block-fp8 GEMM and fused-MoE tables.
AITER_GFX950_BF16_GEMM_CSVS = (
    "aiter/configs/bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/dsv3_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/dsv4_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/glm47_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/glm5_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/gptoss_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/kimi_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/kimik2_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/kimik3_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/llama405B_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/llama70B_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/minimax_m3_eagle_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/qwen32B_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/qwen3_5_397b_bf16_tuned_gemm.csv",
    "aiter/configs/model_configs/qwen3_8b_bf16_tuned_gemm.csv",
)
AITER_GFX950_BLOCKSCALE_GEMM_CSVS = (
    "aiter/configs/a8w8_blockscale_tuned_gemm.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_235b.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_5_397b_a13b.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_qwen3_next_80b_a3b.csv",
)
AITER_GFX950_FMOE_CSVS = (
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_glm5.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_minimax-m2_5.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_qwen3_235b.csv",
    "aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_qwen3_5_397b.csv",
    "aiter/configs/model_configs/qwen3_235b_bf16_tuned_fmoe.csv",
)
# AITER's tables for each AMD profile: (gfx, CUs, bf16 GEMM tables or None, block-fp8 GEMM
# tables, fused-MoE tables); the MI300X's bf16 side comes from the decode canary table
# (aiter_decode_gemm, --aiter-decode-gemm)
AITER_GPUS = {
    "mi300x": ("gfx942", 304, None, AITER_BLOCKSCALE_GEMM_CSVS, AITER_FMOE_CSVS),
    "mi355x": (
        "gfx950",
        256,
        AITER_GFX950_BF16_GEMM_CSVS,
        AITER_GFX950_BLOCKSCALE_GEMM_CSVS,
        AITER_GFX950_FMOE_CSVS,
    ),
}
# decode GEMMs: the rows at M = 1-4 (the MI300X canary table's range)
AITER_DECODE_MAX_M = 4


def aiter_bf16_gemm(
    csv_texts, bw: float, cache_bytes: float, cu_num: int, gfx: str, max_m: int = AITER_DECODE_MAX_M
) -> dict:
    """{"memory_fraction", "floor_s", "rows", "rows_total"} of AITER's bf16 GEMM tuner rows at
    M <= `max_m` (each shape once, at its fastest time over the tables: the tuned dispatcher's
    pick): the median over the shapes whose bf16 weights exceed `cache_bytes` of
    (N x K x 2 B / time) / bw, and the smallest time of any shape."""
    best: dict = {}
    for text in csv_texts:
        for r in _aiter_rows(text, cu_num, gfx):
            if r["dtype"] != "torch.bfloat16" or int(r["M"]) > max_m:
                continue
            shape = (int(r["M"]), int(r["N"]), int(r["K"]))
            best[shape] = min(best.get(shape, math.inf), float(r["us"]))
    big = sorted((s, us) for s, us in best.items() if s[1] * s[2] * 2 > cache_bytes)
    return {
        "memory_fraction": round(
            statistics.median(n * k * 2 / (us * 1e-6) / bw for (_, n, k), us in big), 2
        ),
        "floor_s": min(best.values()) * 1e-6,
        "rows": [[m, n, k, us] for (m, n, k), us in big],
        "rows_total": len(best),
    }


def aiter_measured(
    git_dir: Path, bw: float, peaks: dict, cache_bytes: float = 256e6, gpu: str = "mi300x"
) -> dict:
    """The partial file's fused-MoE and block-fp8 GEMM figures from an AITER git directory at
    AITER_COMMIT (`git show`): measured.experts_curve, the moe floors, gemm_fp8 and the
    block-fp8 dense compute fraction, with the row counts they came from; where AITER_GPUS
    names bf16 GEMM tables for `gpu`, the dense bf16 memory fraction and the GEMM floors too
    (aiter_bf16_gemm; its rows under "bf16_rows")."""
    import subprocess

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{AITER_COMMIT}:{path}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    gfx, cu_num, bf16_csvs, blockscale_csvs, fmoe_csvs = AITER_GPUS[gpu]
    moe = aiter_fmoe([show(p) for p in fmoe_csvs], bw, peaks, cache_bytes, cu_num, gfx)
    gemm = aiter_blockscale_gemm([show(p) for p in blockscale_csvs], peaks["fp8"], cu_num, gfx)
    floors = {f"moe_{fmt}": got["floor_s"] for fmt, got in moe.items()}
    floors["moe"] = min(floors.values())
    floors["gemm_fp8"] = gemm["floor_s"]
    out: dict = {
        "experts_curve": {fmt: [list(p) for p in got["curve"]] for fmt, got in moe.items()},
        "dense_compute": {"fp8": gemm["compute_fraction"]},
        "rows": {
            **{f"moe_{fmt}": [got["rows"], got["curve_rows"]] for fmt, got in moe.items()},
            "gemm_fp8": [gemm["rows"], gemm["compute_rows"]],
        },
    }
    if bf16_csvs:
        bf16 = aiter_bf16_gemm([show(p) for p in bf16_csvs], bw, cache_bytes, cu_num, gfx)
        floors["gemm_bf16"] = bf16["floor_s"]
        floors["gemm"] = floors["gemm_bf16"]  # the generic floor is the bf16 one (the H100's too)
        out["dense_memory"] = {"bf16": bf16["memory_fraction"]}
        out["bf16_rows"] = bf16["rows"]
        out["rows"]["gemm_bf16"] = [bf16["rows_total"], len(bf16["rows"])]
    out["floors_s"] = {k: float(f"{v:.5g}") for k, v in sorted(floors.items())}
    return out


def write_partial_aiter(git_dir: Path, gpu: str = "mi300x") -> Path:
    """partial/<gpu>.json with aiter_measured's figures merged into its `measured` (the other
    figures and their provenance kept), from the profile's datasheet bandwidth, peaks and
    Infinity Cache."""
    import json

    import yaml

    profile = yaml.safe_load((PROFILES / f"{gpu}.yaml").read_text())
    bw = float(profile["memory_bandwidth_bytes_per_s"])
    peaks = {k: float(v) for k, v in profile["peak_flop_per_s"].items()}
    cache = float(profile["l2_cache_bytes"])
    got = aiter_measured(git_dir, bw, peaks, cache, gpu)
    path = PARTIAL / f"{gpu}.json"
    doc = json.loads(path.read_text())
    measured = doc["measured"]
    measured["experts_curve"] = got["experts_curve"]
    measured["floors_s"] = {**measured.get("floors_s", {}), **got["floors_s"]}
    measured["dense_compute"] = got["dense_compute"]
    if "dense_memory" in got:
        measured["dense_memory"] = got["dense_memory"]
        doc["rows"] = got["bf16_rows"]
    doc["aiter_rows"] = got["rows"]
    text = json.dumps(doc, indent=1)
    # each innermost list of numbers on one line ([0.5, 1.33], a row)
    text = re.sub(
        r"\[\s+([-0-9.e+]+(?:,\s+[-0-9.e+]+)*)\s+\]",
        lambda m: "[" + re.sub(r",\s+", ", ", m[1]) + "]",
        text,
    )
    path.write_text(text + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", type=Path, help="aiconfigurator's systems/data folder")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--version", default="0.14.0")
    parser.add_argument("--nvlink-one-way", type=float, default=450e9)
    parser.add_argument(
        "--write-tables", action="store_true", help="write kvplan/data/kernel_tables/*.json"
    )
    parser.add_argument(
        "--write-attention-backends",
        action="store_true",
        help="write kvplan/data/kernel_tables/attention/*.json only",
    )
    parser.add_argument(
        "--aiter-decode-gemm",
        action="store_true",
        help="DATA is AITER's bf16_decode_gfx942_m1_m4_canary.csv: print the MI300X figures",
    )
    parser.add_argument(
        "--gemm-calls",
        help="N:K:DTYPE:COUNT,...: print the summed time of these GEMMs (one rank's, a table's "
        "dtype: bfloat16, fp8_block, fp8, nvfp4) at --tokens in --gpu's --engine GEMM table",
    )
    parser.add_argument("--engine", default="sglang")
    parser.add_argument("--tokens", default="1,16")
    parser.add_argument(
        "--aiter-moe",
        action="store_true",
        help="DATA is an AITER git directory (fetch github:ROCm/aiter): merge its fused-MoE "
        "and block-fp8 GEMM figures (and, for --gpu mi355x, its bf16 GEMMs') into "
        "partial/<--gpu>.json (mi300x: gfx942, 304 CUs; mi355x: gfx950, 256 CUs)",
    )
    parser.add_argument(
        "--write-gemm-grids",
        action="store_true",
        help="write kvplan/data/kernel_tables/gemm/*.json only (gemm_grid)",
    )
    parser.add_argument(
        "--write-moe-runners",
        type=Path,
        metavar="GIT_DATA",
        help="rewrite the SGLang moe/ files with each shape's runner (rewrite_moe_runners): "
        "DATA the wheel's systems/data, GIT_DATA aiconfigurator@095f58a5's",
    )
    parser.add_argument(
        "--write-dsa",
        action="store_true",
        help="write kvplan/data/kernel_tables/dsa/*.json only (dsa_delta)",
    )
    parser.add_argument(
        "--write-dsa-eager",
        action="store_true",
        help="write kvplan/data/kernel_tables/dsa_eager/*.json only (dsa_eager_rows)",
    )
    parser.add_argument(
        "--write-allreduce",
        action="store_true",
        help="add allreduce_curve_s_by_gpus (and link) to kvplan/data/kernel_tables/*.json only",
    )
    parser.add_argument(
        "--write-recurrent-grids",
        action="store_true",
        help="write kvplan/data/kernel_tables/recurrent/*.json only (recurrent_grid)",
    )
    parser.add_argument(
        "--at-version",
        help="with --write-tables: write the tables of this release of --engine only (each table "
        "at that release, else the nearest release's), for every GPU that has its GEMM table; "
        "with --write-gemm-grids --engine vllm: the H100/H200/A100 SXM GEMM grids of that "
        "release (write_kept_vllm_gemm_grids)",
    )
    parser.add_argument(
        "--data-source",
        help="the words naming DATA in the files' source (default: the 0.12.0 wheel's folder)",
    )
    args = parser.parse_args()
    global DATA_SOURCE
    if args.data_source:
        DATA_SOURCE = args.data_source
    if args.write_moe_runners:
        roots = {
            "aiconfigurator-core 0.12.0 (PyPI wheel)": args.data,
            "aiconfigurator@095f58a5 (git)": args.write_moe_runners,
        }
        for path in rewrite_moe_runners(roots):
            print(f"wrote {path}")
        return
    if args.at_version and args.write_gemm_grids:
        if args.engine != "vllm":
            raise SystemExit("--write-gemm-grids --at-version: the kept vLLM files (--engine vllm)")
        for path in write_kept_vllm_gemm_grids(args.data, args.at_version):
            print(f"wrote {path}")
        return
    if args.at_version and args.write_dsa:
        if args.engine != "sglang":
            raise SystemExit("--write-dsa --at-version: SGLang's grids only (--engine sglang)")
        for path in write_dsa_grids(args.data, args.at_version):
            print(f"wrote {path}")
        return
    if args.at_version:
        if not args.write_tables:
            raise SystemExit("--at-version goes with --write-tables or --write-dsa")
        for path in write_release_tables(args.data, args.engine, args.at_version):
            print(f"wrote {path}")
        return
    for given, writer in (
        (args.write_dsa, write_dsa_grids),
        (args.write_dsa_eager, write_dsa_eager),
        (args.write_recurrent_grids, write_recurrent_grids),
        (args.write_gemm_grids, write_gemm_grids),
        (args.write_allreduce, write_allreduce_by_gpus),
    ):
        if given:  # one folder of grids, from aiconfigurator's data
            for path in writer(args.data):
                print(f"wrote {path}")
            return
    if args.aiter_moe:
        gpu = "mi300x" if args.gpu == parser.get_default("gpu") else args.gpu
        if gpu not in AITER_GPUS:  # not another profile's file written in its place
            raise SystemExit(f"--aiter-moe --gpu {gpu}: choose {' or '.join(AITER_GPUS)}")
        print(f"wrote {write_partial_aiter(args.data, gpu)}")
        return
    if args.gemm_calls:
        version = newest(args.data, args.gpu, "gemm", args.engine, "gemm_perf")
        if version is None:
            raise SystemExit(f"no {args.engine} GEMM table for {args.gpu}")
        rows = table(args.data, args.gpu, "gemm", "gemm_perf", version, args.engine)
        calls = []
        for part in args.gemm_calls.split(","):
            n, k, dtype, count = part.split(":")
            calls.append((float(n), float(k), dtype, int(count)))
        for m in (int(x) for x in args.tokens.split(",")):
            total = gemm_calls_s(rows, calls, m)
            print(
                f"{args.gpu} {args.engine} {version}, {m} tokens: "
                f"{sum(c for *_, c in calls)} GEMMs, {total * 1e3:.3f} ms"
            )
        return
    if args.aiter_decode_gemm:
        import yaml

        profile = yaml.safe_load((PROFILES / "mi300x.yaml").read_text())
        bw = float(profile["memory_bandwidth_bytes_per_s"])
        got = aiter_decode_gemm(args.data.read_text(encoding="utf-8"), bw, 256e6)
        print(
            f"mi300x: dense bf16 memory fraction {got['memory_fraction']}, GEMM floor "
            f"{got['floor_s']:.4e} s over {got['rows_total']} rows; rows used {got['rows']}"
        )
        return
    if args.write_attention_backends:
        names = sorted(p.name for p in TABLES.glob("*.*.*.json"))
        for path in write_attention_backends(args.data, names):
            print(f"wrote {path}")
        return
    if args.write_tables:
        for path in write_tables(args.data):
            print(f"wrote {path}")
        return
    bw, peaks = DATASHEET[args.gpu]
    v, g = args.version, args.gpu
    print(f"{g}, vLLM {v}: (compute fraction, memory fraction), medians")
    gemm_pairs, host = dense_pairs(table(args.data, g, "gemm", "gemm_perf", v), bw, peaks, "vllm")
    for dtype, why in host.items():
        print(f"  gemm       {dtype:10} no pair: its rows {why}")
    for name, result in (
        ("gemm", gemm_pairs),
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
