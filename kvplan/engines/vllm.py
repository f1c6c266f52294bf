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
from kvplan.anatomy.model import Attention, CacheKind, ModelSpec, pp_stages
from kvplan.engines import EngineRequest
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.memory import NON_TORCH_BYTES, activation_peak_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique
from kvplan.units import GIB

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
# vLLM's kv-cache-dtype spellings -> kvplan's element dtypes (None: the model dtype)
_ELEMENT_DTYPE = {
    "auto": None,
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "int8_per_token_head": "fp8",  # one byte per value, like fp8
    "fp8_per_token_head": "fp8",
}
PER_TOKEN_HEAD_SCALE_BYTES = 4  # fp32 scale per token per KV head, for K and for V
FP8_DS_MLA_BYTES = 656  # 512 fp8 latent + 16 B of fp32 scales + 64 bf16 rope values


class LayerSpec(NamedTuple):
    """One layer's KV-cache spec as vLLM builds it (per rank)."""

    kind: CacheKind
    window: int | None
    bytes_per_token: int  # attention page bytes for one token (0 for a state)
    state_bytes: int  # state page bytes (0 for attention)

    def page_bytes(self, block_size: int) -> int:
        return (
            self.state_bytes if self.kind is CacheKind.STATE else block_size * self.bytes_per_token
        )

    def blocks_per_request(self, max_model_len: int, block_size: int, mnbt: int) -> int:
        """vLLM's max_memory_usage_bytes / page_size for one request."""
        if self.kind is CacheKind.STATE:
            return 1  # mamba_cache_mode "none": one state page per request
        if self.kind is CacheKind.SLIDING:
            return math.ceil(min(self.window - 1 + mnbt, max_model_len) / block_size) + 1
        if self.kind is CacheKind.CHUNKED:
            return math.ceil(min(self.window + mnbt, max_model_len) / block_size)
        return math.ceil(max_model_len / block_size)


def _nvfp4_width(width: int) -> int:
    return width // 2 + width // 16  # packed fp4 plus one fp8 scale per 16 values


def attention_bytes_per_token(
    attn: Attention, kv_cache_dtype: str, model_dtype: str, tp: int
) -> int:
    """Page bytes one token takes in one attention layer on one rank, in vLLM's layouts."""
    if attn.kind is CacheKind.MLA:
        if kv_cache_dtype == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES
        if kv_cache_dtype in ("nvfp4", "int8_per_token_head", "fp8_per_token_head"):
            raise KvplanError(f"--kv-cache-dtype {kv_cache_dtype} does not apply to MLA layers")
    elif kv_cache_dtype == "fp8_ds_mla":
        raise KvplanError("--kv-cache-dtype fp8_ds_mla is only for MLA models")
    heads = attn.kv_heads_per_rank(tp)
    if kv_cache_dtype == "nvfp4":
        return heads * (_nvfp4_width(attn.head_dim) + _nvfp4_width(attn.head_dim_v))
    per_token = attn.kv_bytes_per_token(
        KvFormat(_ELEMENT_DTYPE.get(kv_cache_dtype) or model_dtype), tp
    )
    if kv_cache_dtype in ("int8_per_token_head", "fp8_per_token_head"):
        per_token += 2 * heads * PER_TOKEN_HEAD_SCALE_BYTES
    return per_token


def layer_specs(spec: ModelSpec, request: EngineRequest, tp: int) -> tuple[list[LayerSpec], list]:
    """Every layer's spec on one rank, with the hybrid-allocator decisions vLLM makes."""
    notes = []
    hma_off = spec.has_kind(CacheKind.CHUNKED) and not request.hybrid_chunked
    if hma_off:
        notes.append(note("vllm-hma-off"))
    specs = []
    for layer in spec.layers:
        if layer.attention is not None:
            attn = layer.attention
            kind = CacheKind.FULL if hma_off and attn.kind.windowed else attn.kind
            specs.append(
                LayerSpec(
                    kind,
                    attn.window if kind.windowed else None,
                    attention_bytes_per_token(attn, request.kv_cache_dtype, spec.dtype, tp),
                    0,
                )
            )
        if layer.state is not None:
            specs.append(LayerSpec(CacheKind.STATE, None, 0, layer.state.bytes_per_sequence(tp)))
    return specs, notes


class Group(NamedTuple):
    kind: CacheKind
    window: int | None
    block_size: int
    layers: int  # layers in the group, padding included


class Padding(NamedTuple):
    kind: CacheKind
    layers: int
    percent: float


class Allocation(NamedTuple):
    block_size: int  # smallest block size (tokens) across groups
    page_bytes: int
    group_size: int
    groups: list[Group]
    padding: list[Padding]
    num_blocks: int
    blocks_per_request: int
    required_bytes: int  # sum over layers of max_memory_usage_bytes


def allocate(
    specs: list[LayerSpec], available_bytes: int, request: EngineRequest, block_size: int
) -> Allocation:
    """Grouping, page unification and block counts for one rank's layers."""
    mnbt, mml = request.max_num_batched_tokens, request.max_model_len
    attention = [s for s in specs if s.kind is not CacheKind.STATE]
    states = [s for s in specs if s.kind is CacheKind.STATE]
    block_of: dict[tuple, int] = {}
    if states:
        # The attention block size is forced up so one attention page covers a state page; the
        # state page is then padded to the attention page.
        per_token = max(s.bytes_per_token for s in attention) if attention else 0
        state_page = max(s.state_bytes for s in states)
        if per_token:
            block_size = 16 * math.ceil(state_page / (16 * per_token))
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
        page_bytes = max(s.state_bytes for s in states)
    if states and pages and max(s.state_bytes for s in states) > page_bytes:
        raise KvplanError("vLLM cannot fit a Mamba state page into an attention page here")

    def key_of(s: LayerSpec) -> tuple:
        return (
            (CacheKind.STATE,)
            if s.kind is CacheKind.STATE
            else (s.kind, s.window, s.bytes_per_token)
        )

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
            padding.append(Padding(key[0], pad, pad / n * 100))
        sample = next(s for s in specs if key_of(s) == key)
        blk = block_of.get(key, block_size)
        per_request = sample.blocks_per_request(mml, blk, mnbt)
        blocks_per_request += num_groups * per_request
        required += n * per_request * page_bytes
        groups += [Group(key[0], sample.window, blk, group_size)] * num_groups
    num_blocks = available_bytes // page_bytes // group_size
    min_block = (
        min(g.block_size for g in groups if g.kind is not CacheKind.STATE) if pages else block_size
    )
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


class MemoryEstimate(NamedTuple):
    """The terms of vLLM's profile, as kvplan estimates them (bytes per GPU)."""

    requested_bytes: float  # device memory x gpu_memory_utilization
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    available_bytes: int


def available_kv_bytes(
    spec: ModelSpec, gpu: GpuProfile, request: EngineRequest
) -> tuple[int, MemoryEstimate | None, list[Note]]:
    """Given (--kv-cache-memory, as the engine logged it) or estimated from --gpu-mem-util."""
    if request.kv_cache_memory_bytes is not None:
        return request.kv_cache_memory_bytes, None, [note("vllm-memory-given")]
    if not 0.05 <= request.gpu_mem_util <= 1:
        raise KvplanError("--gpu-mem-util must be between 0.05 and 1")
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    weights = weights_bytes_per_gpu(spec, wdtype, request.tp, request.pp)
    activation = activation_peak_bytes(spec, request.max_num_batched_tokens, tp=request.tp)
    total = gpu.usable_memory_bytes * request.gpu_mem_util
    available = int(total - weights - activation - NON_TORCH_BYTES)
    estimate = MemoryEstimate(total, weights, activation, NON_TORCH_BYTES, available)
    return (
        available,
        estimate,
        [
            note(
                "vllm-memory-estimated",
                usable_memory_bytes=gpu.usable_memory_bytes,
                gpu_mem_util=request.gpu_mem_util,
                weights_bytes=weights,
                activation_bytes=activation,
                non_torch_bytes=NON_TORCH_BYTES,
                available_bytes=available,
            )
        ],
    )


class VllmResult(NamedTuple):
    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    tp: int
    pp: int
    kv_cache_dtype: str
    max_model_len: int
    available_kv_bytes: int
    memory: MemoryEstimate | None
    page_bytes: int
    num_blocks: int
    block_size: int
    num_groups: int
    group_size: int
    kv_cache_tokens: int | None
    max_concurrency: float
    padding: list[Padding]
    padding_layers: int
    blocks_per_request: int
    required_bytes_per_request: int
    fits: bool
    estimated_max_model_len: int | None
    groups: list[Group]
    notes: tuple[Note, ...]


def vllm_allocation(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> VllmResult:
    if request.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise KvplanError(
            f"--kv-cache-dtype {request.kv_cache_dtype[:40]!r} is not a vLLM kv-cache-dtype "
            f"({', '.join(KV_CACHE_DTYPES)})"
        )
    if not 1 <= request.max_num_batched_tokens <= 1 << 24:
        raise KvplanError("--max-num-batched-tokens must be between 1 and 16,777,216")
    spec.check_tp(request.tp)
    is_mla = spec.has_kind(CacheKind.MLA)
    block_size = request.block_size or (MLA_BLOCK_SIZE if is_mla else DEFAULT_BLOCK_SIZE)
    if not 1 <= block_size <= 4096:
        raise KvplanError(f"--block-size {block_size} must be between 1 and 4096")
    available, estimate, memory_notes = available_kv_bytes(spec, gpu, request)
    notes = [note("vllm-rules", version=VLLM_VERSION), *memory_notes]
    if is_mla and request.block_size is None:
        notes.append(note("vllm-mla-block"))
    if available <= 0:
        raise KvplanError(
            f"no memory is left for the KV cache ({available / GIB:,.2f} GiB): the weights do "
            "not fit; raise --tp/--pp or --gpu-mem-util"
        )
    allocations = []
    for stage in pp_stages(spec, request.pp):
        specs, stage_notes = layer_specs(stage, request, request.tp)
        notes += stage_notes
        if specs:
            allocations.append((specs, allocate(specs, available, request, block_size)))
    if not allocations:
        raise KvplanError(f"{spec.name} has no layer that needs a KV cache")
    specs, alloc = min(allocations, key=lambda a: a[1].num_blocks)  # ranks take the minimum
    fits = alloc.required_bytes <= available
    if any(s.kind is CacheKind.STATE for s in specs) and alloc.block_size != block_size:
        notes.append(note("vllm-state-block", block_size=alloc.block_size))
    estimated = None
    if fits:
        tokens = alloc.num_blocks // len(alloc.groups) * alloc.block_size
        concurrency = alloc.num_blocks / alloc.blocks_per_request
    else:
        tokens, concurrency = None, 0.0
        estimated = estimated_max_model_len(specs, available, request, block_size)
    notes.append(note("vllm-cache-size-definition"))
    if request.pp > 1:
        notes.append(note("vllm-pp"))
    return VllmResult(
        kvplan_version=__version__,
        engine="vllm",
        engine_version=VLLM_VERSION,
        model={"name": spec.name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        kv_cache_dtype=request.kv_cache_dtype,
        max_model_len=request.max_model_len,
        available_kv_bytes=available,
        memory=estimate,
        page_bytes=alloc.page_bytes,
        num_blocks=alloc.num_blocks,
        block_size=alloc.block_size,
        num_groups=len(alloc.groups),
        group_size=alloc.group_size,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        padding=alloc.padding,
        padding_layers=sum(p.layers for p in alloc.padding),
        blocks_per_request=alloc.blocks_per_request,
        required_bytes_per_request=alloc.required_bytes,
        fits=fits,
        estimated_max_model_len=estimated,
        groups=alloc.groups,
        notes=unique(notes),
    )
