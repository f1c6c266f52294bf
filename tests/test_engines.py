"""vLLM 0.19 and SGLang allocation, against the logged runs and configs built for each rule."""

from __future__ import annotations

import math

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.options import parse_bytes
from kvplan.inputs.sources import load_model
from kvplan.present.engines import engine_view

from helpers import llama_like, run_cli, run_json, spec_from

H100 = load_profile("h100")


def gib(text: str) -> int:
    return parse_bytes(text + "GiB")


def vllm(spec, **kw):
    return engine_view(engine_allocation(spec, H100, EngineRequest(engine="vllm", **kw))).data


def test_gemma3_27b_logged_case_exactly():
    data = run_json(
        "engine",
        "gemma-3-27b",
        "--engine",
        "vllm",
        "--kv-cache-memory",
        "19.53GiB",
        "--ctx",
        "8192",
    )
    assert data["padding_layers"] == 8
    assert data["num_blocks"] == 15_998
    assert data["kv_cache_tokens"] == 36_560
    assert f"{data['max_concurrency']:.2f}" == "4.46"
    assert data["log_lines"] == [
        "Add 8 padding layers, may waste at most 15.38% KV cache memory",
        "GPU KV cache size: 36,560 tokens",
        "Maximum concurrency for 8,192 tokens per request: 4.46x",
    ]
    assert data["blocks_per_request"] == 512 + 6 * 513


def test_llama31_8b_logged_case_and_the_rounding_of_58_11():
    spec = load_model("llama-3.1-8b")
    inside = vllm(spec, kv_cache_memory_bytes=gib("58.108"), max_model_len=8192)
    assert inside["kv_cache_tokens"] == 476_016
    fp8 = vllm(spec, kv_cache_memory_bytes=gib("58.108"), max_model_len=8192, kv_cache_dtype="fp8")
    assert fp8["kv_cache_tokens"] == 952_032
    # 58.11 GiB taken literally is one 16-token block more than the engine logged: the log
    # rounds to 0.01 GiB, and 476,016 tokens need between 58.1074 and 58.1094 GiB.
    literal = vllm(spec, kv_cache_memory_bytes=gib("58.11"), max_model_len=8192)
    assert literal["kv_cache_tokens"] == 476_016 + 16
    assert 29_751 * 2_097_152 / 2**30 == pytest.approx(58.1074, abs=1e-4)


def test_estimated_available_memory_is_within_the_stated_error():
    llama = vllm(load_model("llama-3.1-8b"), gpu_mem_util=0.95, max_model_len=8192)
    gemma = vllm(load_model("gemma-3-27b"), gpu_mem_util=0.95, max_model_len=8192)
    assert llama["available_kv_bytes"] / 2**30 == pytest.approx(58.11, abs=0.15)
    assert gemma["available_kv_bytes"] / 2**30 == pytest.approx(19.53, abs=0.6)


def mixed(sliding: int, full: int):
    kinds = ["sliding_attention"] * sliding + ["full_attention"] * full
    return spec_from(
        llama_like(num_hidden_layers=len(kinds), layer_types=kinds, sliding_window=1024)
    )


def test_mixed_counts_not_multiples_pad_the_larger_type():
    data = vllm(mixed(7, 3), kv_cache_memory_bytes=gib("1"), max_model_len=4096)
    assert data["group_size"] == 3 and data["num_groups"] == 3 + 1
    assert data["padding_layers"] == 2
    assert data["log_lines"][0] == "Add 2 padding layers, may waste at most 28.57% KV cache memory"
    page = 16 * 4 * 128 * 2
    assert data["num_blocks"] == 2**30 // page // 3


def test_one_and_a_half_rule_takes_the_larger_count():
    data = vllm(mixed(12, 13), kv_cache_memory_bytes=gib("1"), max_model_len=4096)
    assert data["group_size"] == 13 and data["padding_layers"] == 1


def test_uniform_model_is_one_group():
    data = vllm(load_model("llama-3.1-8b"), kv_cache_memory_bytes=gib("10"), max_model_len=8192)
    assert data["num_groups"] == 1 and data["group_size"] == 32
    assert data["num_blocks"] == 10 * 2**30 // (16 * 8 * 256 * 2) // 32


def test_mla_under_tp8_is_replicated_with_64_token_blocks():
    data = vllm(
        load_model("deepseek-v3"), kv_cache_memory_bytes=gib("20"), max_model_len=32768, tp=8
    )
    assert data["block_size"] == 64
    assert data["page_bytes"] == 64 * 576 * 2  # one latent head whatever the TP degree
    assert data["num_blocks"] == 20 * 2**30 // (64 * 576 * 2) // 61
    ds = vllm(
        load_model("deepseek-v3"),
        kv_cache_memory_bytes=gib("20"),
        max_model_len=32768,
        kv_cache_dtype="fp8_ds_mla",
    )
    assert ds["page_bytes"] == 64 * 656


def test_fewer_kv_heads_than_tp_ranks():
    data = vllm(
        load_model("llama-3.1-8b"), kv_cache_memory_bytes=gib("10"), max_model_len=8192, tp=16
    )
    assert data["page_bytes"] == 16 * 1 * 256 * 2  # one (replicated) KV head per rank


def test_mamba_hybrid_forces_the_attention_block_size():
    data = vllm(load_model("nemotron-h-56b"), kv_cache_memory_bytes=gib("40"), max_model_len=8192)
    mamba_page = (3 * 20480 + 4_194_304) * 2
    block = 16 * math.ceil(mamba_page / (16 * 2 * 8 * 128 * 2))
    assert data["block_size"] == block == 2080
    assert data["page_bytes"] == block * 4096
    assert data["group_size"] == 10 and data["padding_layers"] == 6  # 54 Mamba layers in 6 x 10
    assert data["blocks_per_request"] == math.ceil(8192 / 2080) + 6


def test_llama4_chunked_layers_full_by_default_and_chunked_on_request():
    spec = load_model("llama-4-scout")
    default = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=131072)
    assert default["num_groups"] == 1  # every layer a full-attention spec
    assert default["required_bytes_per_request"] == 48 * 131072 * 2 * 8 * 128 * 2
    hybrid = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=131072, hybrid_chunked=True)
    assert hybrid["num_groups"] == 4  # 12 full + 36 chunked in groups of 12
    chunk_blocks = math.ceil(min(8192 + 8192, 131072) / 16)
    assert hybrid["blocks_per_request"] == 131072 // 16 + 3 * chunk_blocks


def test_per_token_head_scales_and_nvfp4_pages():
    spec = load_model("llama-3.1-8b")
    int8 = vllm(
        spec,
        kv_cache_memory_bytes=gib("10"),
        max_model_len=8192,
        kv_cache_dtype="int8_per_token_head",
    )
    assert int8["page_bytes"] == 16 * 8 * 256 + 2 * 16 * 8 * 4
    nvfp4 = vllm(spec, kv_cache_memory_bytes=gib("10"), max_model_len=8192, kv_cache_dtype="nvfp4")
    assert nvfp4["page_bytes"] == 16 * 8 * 2 * 72  # 72 B per 128-wide head vector


def test_start_up_error_when_one_request_does_not_fit():
    data = run_json(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--kv-cache-memory",
        "10GiB",
        "--ctx",
        "131072",
    )
    assert data["fits"] is False
    needed = 131072 * 131_072
    assert data["required_bytes_per_request"] == needed
    assert data["estimated_max_model_len"] == 10 * 2**30 // 131_072 // 16 * 16
    assert "16.00 GiB KV cache is needed" in data["log_lines"][-1]
    assert "estimated maximum model length is 81920" in data["log_lines"][-1]


def test_sglang_cell_size_tokens_and_log_line():
    data = run_json(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "sglang",
        "--kv-cache-memory",
        "40GiB",
        "--ctx",
        "8192",
    )
    cell = 8 * 128 * 32 * 2 * 2
    assert data["cell_size_bytes"] == cell
    tokens = 40 * 2**30 // cell
    assert data["kv_cache_tokens"] == tokens
    gb = tokens * 32 * 8 * 128 * 2 / 2**30
    assert data["log_lines"] == [
        f"KV Cache is allocated. #tokens: {tokens}, K size: {gb:.2f} GB, V size: {gb:.2f} GB"
    ]


def test_sglang_mla_and_hybrid_swa_split():
    mla = run_json(
        "engine", "deepseek-v3", "--engine", "sglang", "--kv-cache-memory", "10GiB", "--tp", "8"
    )
    assert mla["cell_size_bytes"] == 576 * 61 * 2
    swa = run_json("engine", "gemma-3-27b", "--engine", "sglang", "--kv-cache-memory", "10GiB")
    tokens = swa["kv_cache_tokens"]
    full, window = swa["full_tokens"], swa["swa_tokens"]
    assert window == int(0.8 * full)
    assert 52 * window + 10 * full <= tokens * 62


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--engine", "tgi"], "choose vllm, sglang, llama.cpp"),
        (["--engine", "sglang", "--gpu-memory-utilization", "0.8"], "is a vllm flag"),
        (["--engine", "vllm", "--mem-fraction-static", "0.8"], "is a sglang flag"),
        (["--engine", "sglang", "--max-num-batched-tokens", "4096"], "is a vllm flag"),
        (["--engine", "vllm", "--kv-cache-memory", "20"], "needs a unit"),
        (["--engine", "vllm", "--kv-dtype", "int3"], "not a vLLM kv-cache-dtype"),
        (["--engine", "vllm", "--kv-cache-memory", "lots"], "not a size"),
    ],
)
def test_bad_engine_input(argv, needle):
    code, _, err = run_cli("engine", "llama-3.1-8b", *argv)
    assert code == 2 and needle in err, err
