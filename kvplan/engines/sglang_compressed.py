"""SGLang 0.5.14's pools for DeepSeek-V4's compressed attention, read from its source (the
`sglang-0.5.14` wheel; paths below are in that tree) and checked against its own
`DSV4PoolConfigurator` run on a CPU (scripts/record_sglang_dsv4_pools.py, Flash and Pro at two
memory sizes each: every pool size equal).

`apply_deepseek_v4_defaults` (srt/arg_groups/deepseek_v4_hook.py) sets, on CUDA: the dsv4
attention backend, page_size 256 (whatever --page-size says), kv-cache-dtype fp8_e4m3 for
"auto" (fp8_e4m3 or bfloat16 accepted, anything else an AssertionError), max_running_requests
256 unless given, swa_full_tokens_ratio 0.1 unless given.

`DSV4PoolConfigurator` (srt/model_executor/pool_configurator.py:449-637) splits the pool memory
`available_bytes` (the rest after the weights, as for every model) by the bytes one "full"
token costs over the stage's layers:

  bytes_per_full_token = r·kv·L + kv/4·L4 + kv/128·L128 + idx/4·L4
                         + r·(8/W)·s4·L4 + r·(128/W)·s128·L128 + r·(8/W)·s4i·L4

with r the SWA ratio 0.1, kv = nope + 2·rope + 8 = 584 B (fp8 NoPE, bf16 RoPE, scales),
idx = index_head_dim + index_head_dim/128·4 = 132 B, W = sliding_window (the SWA page), the
compressor states' ring sizes 8 (1/4) and 128 (1/128) without speculative decoding
(deepseek_v4_memory_pool.get_compress_state_ring_size), s4 = 2·2·(nope + rope)·4,
s128 = 2·(nope + rope)·4, s4i = 2·2·index_head_dim·4 (fp32 states,
SGLANG_DSV4_COMPRESS_STATE_DTYPE's default). Then full = int(available / bytes_per_full_token)
rounded down to the page, swa = int(full·r) rounded down to the page, c4 = full // 4,
c128 = full // 128, c4_state = swa // W · 8, c128_state = swa // W · 128; max_total_num_tokens is
full, max_running_requests min(256, full // 2) (model_runner_kv_cache_mixin._resolve_max_num_reqs).
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.engines.vllm_compressed import (
    FP8_DS_MLA_STATE_BYTES,
    check_row_layout,
    indexer_key_bytes,
)
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

PAGE_SIZE = 256  # apply_deepseek_v4_defaults, CUDA
SWA_FULL_TOKENS_RATIO = 0.1  # apply_deepseek_v4_defaults when --swa-full-tokens-ratio is unset
MAX_RUNNING_REQUESTS = 256  # apply_deepseek_v4_defaults when --max-running-requests is unset
KV_CACHE_DTYPES = {"auto": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"}  # bfloat16: not modelled
STATE_BYTES = 4  # fp32 compressor states
RING_SIZE = {4: 8, 128: 128}  # get_compress_state_ring_size, no speculative decoding


class Dsv4Pools(NamedTuple):
    """What DSV4PoolConfigurator decides, per rank of the (single) pipeline stage."""

    bytes_per_full_token: float
    available_bytes: int
    full_tokens: int
    swa_tokens: int
    c4_tokens: int
    c128_tokens: int
    c4_state_pool_size: int
    c128_state_pool_size: int
    max_running_requests: int
    layers: int
    c4_layers: int
    c128_layers: int


def bytes_per_full_token(spec: ModelSpec) -> float:
    """_get_bytes_per_full_token for the model's layers (SWA ratio 0.1, no speculation)."""
    attn = spec.attention_layers()
    if not attn or any(a.compress_ratio not in (0, *RING_SIZE) for a in attn):
        raise KvplanError(
            f"{spec.name}: SGLang 0.5.14's DeepSeek-V4 pools take compress ratios 4 and 128 only "
            "(get_compress_state_ring_size)"
        )
    for a in attn:
        check_row_layout(spec, a, "SGLang 0.5.14")
    head, window = attn[0].head_dim, attn[0].window
    assert window is not None, "check_row_layout holds it"
    index_dim = max(a.compressed_indexer_dim for a in attn)
    kv = FP8_DS_MLA_STATE_BYTES  # nope + 2 x rope + 8
    indexer = indexer_key_bytes(index_dim)
    s4 = 2 * 2 * head * STATE_BYTES
    s128 = 2 * head * STATE_BYTES
    s4_indexer = 2 * 2 * index_dim * STATE_BYTES
    n = len(attn)
    n4 = sum(a.compress_ratio == 4 for a in attn)
    n128 = sum(a.compress_ratio == 128 for a in attn)
    r = SWA_FULL_TOKENS_RATIO
    c4_ratio, c128_ratio = RING_SIZE[4] / window, RING_SIZE[128] / window
    return (
        r * kv * n
        + 1 / 4 * kv * n4
        + 1 / 128 * kv * n128
        + 1 / 4 * indexer * n4
        + r * c4_ratio * s4 * n4
        + r * c128_ratio * s128 * n128
        + r * c4_ratio * s4_indexer * n4
    )


def dsv4_pools(spec: ModelSpec, available_bytes: int) -> Dsv4Pools:
    """calculate_pool_sizes and _resolve_max_num_reqs at SGLang 0.5.14's DeepSeek-V4 defaults."""
    per_token = bytes_per_full_token(spec)
    attn = spec.attention_layers()
    window = attn[0].window
    assert window is not None, "checked in bytes_per_full_token"
    full = int(available_bytes / per_token) // PAGE_SIZE * PAGE_SIZE
    swa = int(full * SWA_FULL_TOKENS_RATIO) // PAGE_SIZE * PAGE_SIZE
    return Dsv4Pools(
        bytes_per_full_token=per_token,
        available_bytes=available_bytes,
        full_tokens=full,
        swa_tokens=swa,
        c4_tokens=full // 4,
        c128_tokens=full // 128,
        c4_state_pool_size=swa // window * RING_SIZE[4],
        c128_state_pool_size=swa // window * RING_SIZE[128],
        max_running_requests=min(MAX_RUNNING_REQUESTS, full // 2),
        layers=len(attn),
        c4_layers=sum(a.compress_ratio == 4 for a in attn),
        c128_layers=sum(a.compress_ratio == 128 for a in attn),
    )
