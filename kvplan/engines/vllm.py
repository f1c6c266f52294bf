"""vLLM V1 (0.19) KV-cache allocation, reproduced from the config.

Rules (docs/engines.md): per-layer page sizes; hybrid grouping with padding layers; page-size
unification (attention block size forced up by Mamba pages); num_blocks from the available memory;
the "GPU KV cache size" and "Maximum concurrency" log lines; the start-up error.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec, pp_stages
from kvplan.engines import EngineRequest
from kvplan.errors import KvplanError
from kvplan.formulas.memory import NON_TORCH_BYTES, activation_peak_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile
from kvplan.present.view import Column, Report, Table, fmt_int, fmt_text, unique_notes
from kvplan.units import GIB, parse_bytes

VLLM_VERSION = "0.19"
DEFAULT_BLOCK_SIZE = 16
MLA_BLOCK_SIZE = 64  # FlashMLA, the default MLA backend on Hopper, forces 64-token blocks
KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_ds_mla",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
)
_ELEMENT = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8_per_token_head": 1,
    "fp8_per_token_head": 1,
}
PER_TOKEN_HEAD_SCALE_BYTES = 4  # fp32 scale per token per KV head, for K and for V


class LayerSpec(NamedTuple):
    """One layer's KV-cache spec as vLLM builds it (per rank)."""

    kind: str  # full | sliding | chunked | mla | mamba
    window: int | None
    bytes_per_token: int  # attention page bytes for one token (0 for mamba)
    mamba_bytes: int  # mamba state page bytes (0 for attention)

    def page_bytes(self, block_size: int) -> int:
        return self.mamba_bytes if self.kind == "mamba" else block_size * self.bytes_per_token

    def blocks_per_request(self, max_model_len: int, block_size: int, mnbt: int) -> int:
        """vLLM's max_memory_usage_bytes / page_size for one request."""
        if self.kind == "mamba":
            return 1  # mamba_cache_mode "none": one state page per request
        if self.kind == "sliding":
            return math.ceil(min(self.window - 1 + mnbt, max_model_len) / block_size) + 1
        if self.kind == "chunked":
            return math.ceil(min(self.window + mnbt, max_model_len) / block_size)
        return math.ceil(max_model_len / block_size)


def _attention_bytes_per_token(attn, kv_cache_dtype: str, model_dtype_bytes: int, tp: int) -> int:
    if attn.kind == "mla":
        if kv_cache_dtype == "fp8_ds_mla":
            return 656  # 512 fp8 latent + 16 B fp32 scales + 64 bf16 rope values
        element = _ELEMENT.get(kv_cache_dtype) or model_dtype_bytes
        if kv_cache_dtype in ("nvfp4", "int8_per_token_head", "fp8_per_token_head"):
            raise KvplanError(f"--kv-dtype {kv_cache_dtype} does not apply to MLA layers")
        return attn.head_dim * element
    if kv_cache_dtype == "fp8_ds_mla":
        raise KvplanError("--kv-dtype fp8_ds_mla is only for MLA models")
    heads = max(1, attn.num_kv_heads // tp)
    if kv_cache_dtype == "nvfp4":

        def full_dim(h: int) -> int:
            return h // 2 + h // 16  # packed fp4 plus one fp8 scale per 16 values

        return heads * (full_dim(attn.head_dim) + full_dim(attn.head_dim_v))
    element = _ELEMENT.get(kv_cache_dtype) or model_dtype_bytes
    per_token = heads * (attn.head_dim + attn.head_dim_v) * element
    if kv_cache_dtype in ("int8_per_token_head", "fp8_per_token_head"):
        per_token += 2 * heads * PER_TOKEN_HEAD_SCALE_BYTES
    return per_token


def layer_specs(spec: ModelSpec, request: EngineRequest, tp: int) -> tuple[list[LayerSpec], list]:
    """Every layer's spec on one rank, with the hybrid-allocator decisions vLLM makes."""
    notes = []
    dtype_bytes = {"bf16": 2, "fp16": 2, "fp32": 4}[spec.dtype]
    kinds = {layer.attention.kind for layer in spec.layers if layer.attention}
    has_chunked = "chunked" in kinds
    hma_off = has_chunked and not request.hybrid_chunked
    if hma_off:
        notes.append(
            "vLLM 0.19 disables the hybrid KV-cache manager for chunked-attention models by "
            "default: chunked (and sliding) layers are stored in full. --hybrid-chunked models "
            "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1."
        )
    specs = []
    for layer in spec.layers:
        if layer.attention is not None:
            attn = layer.attention
            kind = "full" if hma_off and attn.kind in ("sliding", "chunked") else attn.kind
            specs.append(
                LayerSpec(
                    kind,
                    attn.window if kind in ("sliding", "chunked") else None,
                    _attention_bytes_per_token(attn, request.kv_cache_dtype, dtype_bytes, tp),
                    0,
                )
            )
        if layer.state is not None:
            specs.append(LayerSpec("mamba", None, 0, layer.state.bytes_per_sequence(tp)))
    return specs, notes


class Allocation(NamedTuple):
    block_size: int  # smallest block size (tokens) across groups
    page_bytes: int
    group_size: int
    groups: list  # (kind, window, block_size, layers in group incl. padding)
    padding: list  # (kind, padding layers, percent)
    num_blocks: int
    blocks_per_request: int
    required_bytes: int  # sum over layers of max_memory_usage_bytes


def allocate(
    specs: list[LayerSpec], available_bytes: int, request: EngineRequest, block_size: int
) -> Allocation:
    """Grouping, page unification and block counts for one rank's layers."""
    mnbt, mml = request.max_num_batched_tokens, request.max_model_len
    attention = [s for s in specs if s.kind != "mamba"]
    mamba = [s for s in specs if s.kind == "mamba"]
    block_of: dict[tuple, int] = {}
    if mamba:
        # The attention block size is forced up so one attention page covers a Mamba page; the
        # Mamba page is then padded to the attention page.
        per_token = max(s.bytes_per_token for s in attention) if attention else 0
        mamba_page = max(s.mamba_bytes for s in mamba)
        if per_token:
            block_size = 16 * math.ceil(mamba_page / (16 * per_token))
    pages = {}
    for s in attention:
        pages[(s.kind, s.window, s.bytes_per_token)] = s.bytes_per_token * block_size
    if pages:
        largest = max(pages.values())
        for key, page in pages.items():
            if largest % page:
                raise KvplanError(
                    "vLLM cannot unify these layers' page sizes "
                    f"({sorted(set(pages.values()))} bytes)"
                )
            block_of[key] = block_size * (largest // page)
        page_bytes = largest
    else:
        page_bytes = max(s.mamba_bytes for s in mamba)
    if mamba and pages and max(s.mamba_bytes for s in mamba) > page_bytes:
        raise KvplanError("vLLM cannot fit a Mamba state page into an attention page here")

    def key_of(s: LayerSpec) -> tuple:
        return ("mamba",) if s.kind == "mamba" else (s.kind, s.window, s.bytes_per_token)

    counts = Counter(key_of(s) for s in specs)
    if len(counts) == 1:
        group_size = len(specs)
    else:
        group_size = min(counts.values())
        if max(counts.values()) < 1.5 * group_size:
            group_size = max(counts.values())
    groups, padding = [], []
    blocks_per_request = 0
    required = 0
    for key, n in counts.items():
        num_groups = math.ceil(n / group_size)
        pad = num_groups * group_size - n
        if pad:
            padding.append((key[0], pad, pad / n * 100))
        sample = next(s for s in specs if key_of(s) == key)
        blk = block_of.get(key, block_size)
        per_request = sample.blocks_per_request(mml, blk, mnbt)
        blocks_per_request += num_groups * per_request
        required += n * per_request * page_bytes
        for _ in range(num_groups):
            groups.append((key[0], sample.window, blk, group_size))
    num_blocks = available_bytes // page_bytes // group_size
    min_block = min(g[2] for g in groups if g[0] != "mamba") if pages else block_size
    return Allocation(
        min_block, page_bytes, group_size, groups, padding, num_blocks, blocks_per_request, required
    )


def estimated_max_model_len(specs, available_bytes, request, block_size) -> int:
    """The longest max_model_len whose per-request memory fits (vLLM's binary search)."""
    lo, hi = 0, request.max_model_len
    while hi - lo > 1:
        mid = (lo + hi) // 2
        need = allocate(
            specs, available_bytes, request._replace(max_model_len=mid), block_size
        ).required_bytes
        lo, hi = (mid, hi) if need <= available_bytes else (lo, mid)
    return lo


def available_kv_bytes(
    spec: ModelSpec, gpu: GpuProfile, request: EngineRequest
) -> tuple[int, list]:
    """Given (--kv-cache-memory, as the engine logged it) or estimated from --gpu-mem-util."""
    if request.kv_cache_memory:
        return parse_bytes(request.kv_cache_memory, what="--kv-cache-memory"), [
            f"Available KV memory given: {request.kv_cache_memory} (vLLM prints it rounded to "
            "0.01 GiB, which pins num_blocks only to a small range)."
        ]
    if not 0.05 <= request.gpu_mem_util <= 1:
        raise KvplanError("--gpu-mem-util must be between 0.05 and 1")
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    weights = (weight_bytes(spec, wdtype) + spec.vision_params * 2) / (request.tp * request.pp)
    activation = activation_peak_bytes(spec, request.max_num_batched_tokens, tp=request.tp)
    total = gpu.usable_memory_bytes * request.gpu_mem_util
    available = int(total - weights - activation - NON_TORCH_BYTES)
    return available, [
        f"Available KV memory estimated: {gpu.usable_memory_bytes / GIB:,.2f} GiB x "
        f"{request.gpu_mem_util} - weights {weights / GIB:,.2f} GiB - activation peak "
        f"{activation / GIB:,.2f} GiB - non-torch {NON_TORCH_BYTES / GIB:,.2f} GiB = "
        f"{available / GIB:,.2f} GiB. Against the two logged vLLM 0.19 runs this estimate is off by "
        "-0.12 GiB (Llama-3.1-8B, logged 58.11) and +0.53 GiB (Gemma-3-27B, logged 19.53); pass "
        "--kv-cache-memory with the logged figure for exact counts."
    ]


def vllm_report(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> Report:
    if request.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise KvplanError(
            f"--kv-dtype {request.kv_cache_dtype!r} is not a vLLM kv-cache-dtype "
            f"({', '.join(KV_CACHE_DTYPES)})"
        )
    if not 1 <= request.max_num_batched_tokens <= 1 << 24:
        raise KvplanError("--max-num-batched-tokens must be between 1 and 16,777,216")
    spec.check_tp(request.tp)
    is_mla = any(a.kind == "mla" for a in spec.attention_layers())
    block_size = request.block_size or (MLA_BLOCK_SIZE if is_mla else DEFAULT_BLOCK_SIZE)
    if not 1 <= block_size <= 4096:
        raise KvplanError(f"--block-size {block_size} must be between 1 and 4096")
    available, notes = available_kv_bytes(spec, gpu, request)
    notes = [f"Rules of vLLM V1 {VLLM_VERSION}."] + notes
    if is_mla and request.block_size is None:
        notes.append("MLA: block size 64, which vLLM's FlashMLA backend forces on Hopper.")
    if available <= 0:
        raise KvplanError(
            f"no memory is left for the KV cache ({available / GIB:,.2f} GiB): the weights do "
            "not fit; raise --tp/--pp or --gpu-mem-util"
        )
    allocations, estimated = [], None
    for stage in pp_stages(spec, request.pp):
        specs, stage_notes = layer_specs(stage, request, request.tp)
        notes += stage_notes
        if not specs:
            continue
        alloc = allocate(specs, available, request, block_size)
        allocations.append((specs, alloc))
    if not allocations:
        raise KvplanError(f"{spec.name} has no layer that needs a KV cache")
    specs, alloc = min(allocations, key=lambda a: a[1].num_blocks)  # ranks take the minimum
    fits = alloc.required_bytes <= available
    log_lines = []
    for _kind, pad, pct in alloc.padding:
        if pad:
            log_lines.append(
                f"Add {pad} padding layers, may waste at most {pct:.2f}% KV cache memory"
            )
    if any(s.kind == "mamba" for s in specs) and alloc.block_size != block_size:
        notes.append(
            f"Attention block size forced to {alloc.block_size} tokens so one attention page "
            "holds a Mamba state page (version-dependent: vllm#54458)."
        )
    if fits:
        tokens = alloc.num_blocks // len(alloc.groups) * alloc.block_size
        concurrency = alloc.num_blocks / alloc.blocks_per_request
        log_lines.append(f"GPU KV cache size: {tokens:,} tokens")
        log_lines.append(
            f"Maximum concurrency for {request.max_model_len:,} tokens per request: "
            f"{concurrency:.2f}x"
        )
    else:
        tokens, concurrency = None, 0.0
        estimated = estimated_max_model_len(specs, available, request, block_size)
        log_lines.append(
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({request.max_model_len}), ({alloc.required_bytes / GIB:.2f} GiB KV cache is "
            f"needed, which is larger than the available KV cache memory "
            f"({available / GIB:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {estimated}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    notes.append(
        '"GPU KV cache size" uses the 0.19 definition: num_blocks // groups x block size '
        "(later versions print int(concurrency x max_model_len))."
    )
    if request.pp > 1:
        notes.append(
            "PP: each stage is grouped on its own layers; every rank takes the minimum num_blocks."
        )
    padding_layers = sum(p for _, p, _ in alloc.padding)
    group_rows = [
        {"group": i, "kind": g[0], "window": g[1], "block_size": g[2], "layers": g[3]}
        for i, g in enumerate(alloc.groups)
    ]
    facts = [
        ("engine", f"vLLM V1 {VLLM_VERSION} rules"),
        ("model / GPU", f"{spec.name} on {gpu.name}, TP {request.tp} x PP {request.pp}"),
        ("available KV memory", f"{available / GIB:,.2f} GiB per GPU"),
        ("page", f"{alloc.page_bytes:,} B per layer per block of {alloc.block_size} tokens"),
        (
            "groups",
            f"{len(alloc.groups)} groups of {alloc.group_size} layers"
            + (f" ({padding_layers} padding layers)" if padding_layers else ""),
        ),
        ("num_blocks", f"{alloc.num_blocks:,}"),
        (
            "blocks per request",
            f"{alloc.blocks_per_request:,} at max_model_len {request.max_model_len:,}",
        ),
        ("needed per request", f"{alloc.required_bytes / GIB:,.2f} GiB"),
    ]
    table = Table(
        "log lines",
        [Column("line", "what vLLM logs", fmt_text, "left")],
        [{"line": line} for line in log_lines],
    )
    groups_table = Table(
        "KV-cache groups",
        [
            Column("group", "group", fmt_int),
            Column("kind", "spec", fmt_text, "left"),
            Column("window", "window", fmt_int),
            Column("block_size", "block (tokens)", fmt_int),
            Column("layers", "layers", fmt_int),
        ],
        group_rows,
    )
    notes = unique_notes(notes)
    data = {
        "kvplan_version": __version__,
        "engine": "vllm",
        "engine_version": VLLM_VERSION,
        "model": {"name": spec.name},
        "gpu": gpu.name,
        "tp": request.tp,
        "pp": request.pp,
        "kv_cache_dtype": request.kv_cache_dtype,
        "available_kv_bytes": available,
        "page_bytes": alloc.page_bytes,
        "num_blocks": alloc.num_blocks,
        "block_size": alloc.block_size,
        "num_groups": len(alloc.groups),
        "group_size": alloc.group_size,
        "kv_cache_tokens": tokens,
        "max_concurrency": concurrency,
        "padding_layers": padding_layers,
        "blocks_per_request": alloc.blocks_per_request,
        "required_bytes_per_request": alloc.required_bytes,
        "fits": fits,
        "estimated_max_model_len": estimated,
        "log_lines": log_lines,
        "groups": group_rows,
        "notes": notes,
    }
    return Report(
        f"vLLM {VLLM_VERSION} allocation for {spec.name} on {gpu.name}",
        facts,
        [table, groups_table],
        notes,
        data,
    )
