"""A DSA model's decode (DeepSeek-V3.2, GLM-5) reads and attends the latents of the index_topk
tokens its indexer picks, and the indexer's key of every cached token (vLLM's FlashMLA sparse
decode: flash_mla_with_kvcache with indices=topk_indices); a MiniMax-M3 sparse layer the K and V
of its top-k blocks (vLLM's models/minimax_m3 index_topk.py). Counted here token by token from
the config JSON alone, below and above the top-k: the floor's operator list,
kv_read_bytes_per_decode and the decode FLOPs agree."""

import json

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.formulas.flops import attention_flops_per_decode_token
from kvplan.formulas.kv import kv_read_bytes_per_decode
from kvplan.formulas.step_time import OpKind, step_ops
from kvplan.inputs.sources import _bundled_dir, bundled_models, load_model

DSA = ["deepseek-v3.2", "glm-5", "glm-5.3"]


def _config(name: str) -> dict:
    path = _bundled_dir() / bundled_models()[name].file
    config = json.loads(path.read_text(encoding="utf-8"))
    return config.get("text_config", config)


def _brute(config: dict, context: int) -> tuple[int, int]:
    """(bytes, FLOPs) of one decode's attention over `context` cached tokens, bf16 cache: each
    cached token a layer's indexer scores (its key read, index_n_heads q.k products of
    index_head_dim; none on a GLM-5.3 layer that shares an earlier layer's picks, its
    indexer_types "shared"), and each the top-k picks, at most index_topk (its latent read, and
    per query head the absorbed scores over kv_lora_rank + rope and the output over
    kv_lora_rank)."""
    latent, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
    heads, topk = config["num_attention_heads"], config["index_topk"]
    index_dim, index_heads = config["index_head_dim"], config["index_n_heads"]
    kinds = config.get("indexer_types") or ["full"] * config["num_hidden_layers"]
    num_bytes = flops = 0
    for kind in kinds:
        for token in range(context):
            if kind == "full":
                num_bytes += 2 * index_dim
                flops += index_heads * 2 * index_dim
            if token < topk:  # picked: as many as the top-k holds
                num_bytes += 2 * (latent + rope)
                flops += heads * (2 * (latent + rope) + 2 * latent)
    return num_bytes, flops


@pytest.mark.parametrize("name", DSA)
@pytest.mark.parametrize("context", [1, 1000, 2048, 2049, 9000])
def test_a_dsa_decode_reads_the_top_k_latents_and_every_indexer_key(name, context):
    spec = load_model(name)
    fmt = resolve_kv_format("bf16", spec.dtype)
    num_bytes, flops = _brute(_config(name), context)
    assert kv_read_bytes_per_decode(spec, context, fmt) == num_bytes
    assert attention_flops_per_decode_token(spec, context) == flops
    ops = step_ops(spec, "bf16", fmt, num_decodes=3, decode_context=context, even_split=True)
    attention = [
        (op, count) for ops_, count in ops for op in ops_ if op.kind is OpKind.DECODE_ATTENTION
    ]
    read = sum(count * op.kv_bytes for op, count in attention)
    done = sum(count * op.flops for op, count in attention)
    assert read == 3 * num_bytes
    assert done == pytest.approx(3 * flops, rel=1e-12)


def test_above_the_top_k_the_latents_read_stop_growing():
    """32k and 128k read the same latents (2,048 of them); the indexer keys grow with s."""
    spec = load_model("deepseek-v3.2")
    fmt = resolve_kv_format("bf16", spec.dtype)
    config = _config("deepseek-v3.2")
    layers, index_key = config["num_hidden_layers"], 2 * config["index_head_dim"]
    short = kv_read_bytes_per_decode(spec, 32_768, fmt)
    long = kv_read_bytes_per_decode(spec, 131_072, fmt)
    assert long - short == layers * index_key * (131_072 - 32_768)


def _brute_minimax_m3(config: dict, context: int) -> tuple[int, int]:
    """(bytes, FLOPs) of one MiniMax-M3 decode's attention over `context` cached tokens, bf16
    cache: a dense layer (sparse_attention_freq 0) reads every token's K and V; a sparse layer
    its indexer key of every token (sparse_num_index_heads q.k of sparse_index_dim each) and the
    K and V of the sparse_topk_blocks blocks picked, the query's own block (the last, partial
    one: sparse_local_block) always among them, the others whole."""
    sparse = config["sparse_attention_config"]
    block, topk = sparse["sparse_block_size"], sparse["sparse_topk_blocks"]
    index_dim, index_heads = sparse["sparse_index_dim"], sparse["sparse_num_index_heads"]
    heads, kv, dim = (config[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim"))
    num_bytes = flops = 0
    for is_sparse in sparse["sparse_attention_freq"]:
        blocks = [min(block, context - start) for start in range(0, context, block)]
        if is_sparse:
            num_bytes += context * 2 * index_dim
            flops += context * index_heads * 2 * index_dim
            if len(blocks) > topk:  # the local block and topk - 1 others
                blocks = blocks[: topk - 1] + blocks[-1:]
        picked = sum(blocks)
        num_bytes += picked * kv * 2 * dim * 2
        flops += picked * heads * 2 * (dim + dim)
    return num_bytes, flops


@pytest.mark.parametrize("context", [1, 1000, 2048, 2049, 2100, 9000])
def test_a_minimax_m3_sparse_decode_reads_its_top_k_blocks(context):
    spec = load_model("minimax-m3")
    fmt = resolve_kv_format("bf16", spec.dtype)
    config = _config("minimax-m3")
    num_bytes, flops = _brute_minimax_m3(config, context)
    assert kv_read_bytes_per_decode(spec, context, fmt) == num_bytes
    assert attention_flops_per_decode_token(spec, context) == flops
    ops = step_ops(spec, "bf16", fmt, num_decodes=2, decode_context=context, even_split=True)
    attention = [
        (op, count) for ops_, count in ops for op in ops_ if op.kind is OpKind.DECODE_ATTENTION
    ]
    assert sum(count * op.kv_bytes for op, count in attention) == 2 * num_bytes
    done = sum(count * op.flops for op, count in attention)
    assert done == pytest.approx(2 * flops, rel=1e-12)
