"""SGLang's KV pool (model_runner profile_max_num_token / set_num_token_hybrid), from the config.

cell_size = (kv_lora_rank + rope) x L x elem for MLA, else Hkv_rank x D x L x 2 x elem;
rest = memory after weights - total x (1 - mem_fraction_static);
max_total_num_tokens = rest // cell_size, rounded down to the page size.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.engines import EngineRequest
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import KvFormat, element_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique

SGLANG_VERSION = "0.5"
SWA_FULL_TOKENS_RATIO = 0.8
DEFAULT_MEM_FRACTION_STATIC = 0.9
_ELEMENT_DTYPE = {
    "auto": None,
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}


class SglangResult(NamedTuple):
    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    tp: int
    pp: int
    max_model_len: int
    mla: bool
    num_layers: int
    kv_heads_per_rank: int
    head_dim: int
    element_bytes: int
    mem_fraction_static: float
    mem_fraction_given: bool
    pool_bytes: int
    cell_size_bytes: int
    num_blocks: int
    block_size: int
    kv_cache_tokens: int
    full_tokens: int | None
    swa_tokens: int | None
    max_concurrency: float
    padding_layers: int
    required_bytes_per_request: int
    fits: bool
    estimated_max_model_len: int | None
    notes: tuple[Note, ...]


def sglang_allocation(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> SglangResult:
    if request.kv_cache_dtype not in _ELEMENT_DTYPE:
        raise KvplanError(
            f"--kv-cache-dtype {request.kv_cache_dtype[:40]!r} is not an SGLang kv-cache-dtype "
            f"({', '.join(_ELEMENT_DTYPE)})"
        )
    spec.check_tp(request.tp)
    fraction = request.mem_fraction_static
    if fraction is None:
        fraction = DEFAULT_MEM_FRACTION_STATIC
    if not 0.05 <= fraction <= 1:
        raise KvplanError("--mem-fraction-static must be between 0.05 and 1")
    if spec.has_kind(CacheKind.STATE):
        raise KvplanError("kvplan does not model SGLang's Mamba/linear-attention pools yet")
    page = request.block_size or 1
    fmt = KvFormat(_ELEMENT_DTYPE[request.kv_cache_dtype] or spec.dtype)
    elem = element_bytes(fmt.name)
    stage = max(pp_stages(spec, request.pp), key=lambda s: len(s.attention_layers()))
    attn = stage.attention_layers()
    if not attn:
        raise KvplanError(f"{spec.name} has no attention layer for SGLang's KV pool")
    layers = len(attn)
    total = gpu.usable_memory_bytes
    notes = [
        note(
            "sglang-rules",
            version=SGLANG_VERSION,
            fraction=fraction,
            given=request.mem_fraction_static is not None,
        )
    ]
    if request.kv_cache_memory_bytes is not None:
        rest = request.kv_cache_memory_bytes
    else:
        wdtype, _ = resolve_weights_dtype(spec, "auto")
        weights = weights_bytes_per_gpu(spec, wdtype, request.tp, request.pp)
        rest = int(total - weights - total * (1 - fraction))
        notes.append(
            note(
                "sglang-pool",
                after_weights_bytes=total - weights,
                kept_free_bytes=total * (1 - fraction),
                pool_bytes=rest,
            )
        )
    if rest <= 0:
        raise KvplanError("no memory is left for SGLang's KV pool: the weights do not fit")
    a = attn[0]
    mla = a.kind is CacheKind.MLA
    heads = a.kv_heads_per_rank(request.tp)
    cell = layers * a.kv_bytes_per_token(fmt, request.tp)
    tokens = int(rest // cell) // page * page
    full_tokens = swa_tokens = None
    n_swa = sum(x.kind.windowed for x in attn)
    n_full = layers - n_swa
    if n_swa and n_full:
        if stage.has_kind(CacheKind.CHUNKED):  # Llama 4
            chunk = next(x.window for x in attn if x.kind is CacheKind.CHUNKED)
            temp = chunk / request.max_model_len
            swa_tokens = int(4 * tokens * temp // (3 * temp + 1))
            full_tokens = int(4 * tokens - 12 * tokens * temp // (3 * temp + 1))
        else:
            full_tokens = int(tokens * layers / (SWA_FULL_TOKENS_RATIO * n_swa + n_full))
            swa_tokens = int(SWA_FULL_TOKENS_RATIO * full_tokens)
        full_tokens = full_tokens // page * page
        swa_tokens = swa_tokens // page * page
        notes.append(note("sglang-swa", swa=n_swa, full=n_full, ratio=SWA_FULL_TOKENS_RATIO))
    shown = full_tokens if full_tokens is not None else tokens
    fits = shown >= request.max_model_len
    return SglangResult(
        kvplan_version=__version__,
        engine="sglang",
        engine_version=SGLANG_VERSION,
        model={"name": spec.name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        max_model_len=request.max_model_len,
        mla=mla,
        num_layers=layers,
        kv_heads_per_rank=heads,
        head_dim=a.head_dim,
        element_bytes=elem,
        mem_fraction_static=fraction,
        mem_fraction_given=request.mem_fraction_static is not None,
        pool_bytes=rest,
        cell_size_bytes=cell,
        num_blocks=tokens // page,
        block_size=page,
        kv_cache_tokens=tokens,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        max_concurrency=shown / request.max_model_len,
        padding_layers=0,
        required_bytes_per_request=cell * request.max_model_len,
        fits=fits,
        estimated_max_model_len=None if fits else shown,
        notes=unique(notes),
    )
