"""kvplan.kernels: a paged KV cache with prefix caching, and paged decode attention.

The block manager is pure Python; the attention functions need torch (the `kernels` extra) and are
imported on first use, so `import kvplan.kernels` costs nothing on the planning path.
"""

from kvplan.kernels.block_manager import BlockManager, NoFreeBlocksError, block_hashes

_TORCH_API = {
    "paged_decode_attention": "kvplan.kernels.paged_attention",
    "reference_decode_attention": "kvplan.kernels.paged_attention",
    "write_kv": "kvplan.kernels.paged_attention",
    "prefill_attention": "kvplan.kernels.paged_attention",
    "quantize_int8_per_token": "kvplan.kernels.paged_attention",
    "quantize_fp8": "kvplan.kernels.paged_attention",
    "available_impls": "kvplan.kernels.paged_attention",
}

__all__ = ["BlockManager", "NoFreeBlocksError", "block_hashes", *_TORCH_API]


def __getattr__(name: str):
    if name in _TORCH_API:
        import importlib

        return getattr(importlib.import_module(_TORCH_API[name]), name)
    raise AttributeError(f"module 'kvplan.kernels' has no attribute {name!r}")
