"""vLLM 0.19 and SGLang allocation, against the logged runs and configs built for each rule."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.anatomy.model import CacheKind
from kvplan.engines import EngineRequest, engine_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.options import parse_bytes
from kvplan.inputs.sources import load_model
from kvplan.present.engines import engine_view

from helpers import REPO, llama_like, one_line_error, run_cli, run_json, spec_from

H100 = load_profile("h100")


def gib(text: str) -> int:
    return parse_bytes(text + "GiB")


def vllm(spec, **kw):
    return engine_view(engine_allocation(spec, H100, EngineRequest(engine="vllm", **kw))).data


def test_vllm_flags_belong_to_vllm():
    code, _, err = run_cli("engine", "llama-3.1-8b", "--engine", "sglang", "--max-num-seqs", "8")
    assert code == 2 and "is a vllm flag" in err


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


def test_issue_examples_available_memory():
    # public vLLM 0.19 logs on H100 at gpu_memory_utilization 0.95, max_model_len 8192
    # (issue 21): Qwen3-8B TP 1 logged 57.5 GiB, Llama-3.1-8B TP 2 63.76 GiB, Qwen2.5-72B TP 2
    # about 3.0 GiB.
    qwen = vllm(load_model("qwen3-8b"), gpu_mem_util=0.95, max_model_len=8192)
    llama = vllm(load_model("llama-3.1-8b"), gpu_mem_util=0.95, max_model_len=8192, tp=2)
    big = vllm(load_model("qwen2.5-72b"), gpu_mem_util=0.95, max_model_len=8192, tp=2)
    assert qwen["available_kv_bytes"] / 2**30 == pytest.approx(57.5, abs=0.1)
    assert llama["available_kv_bytes"] / 2**30 == pytest.approx(63.76, abs=0.1)
    assert big["available_kv_bytes"] / 2**30 == pytest.approx(3.04, abs=0.25)


def test_profile_line_in_vllm_wording_and_rounding():
    lines = vllm(load_model("llama-3.1-8b"), gpu_mem_util=0.95, max_model_len=8192)["log_lines"]
    assert lines[0] == "Model loading took 14.99 GiB memory"
    # vLLM 0.19 logged "... torch peak memory increase: 1.89GiB; non-torch forward increase
    # memory: 0.25GiB; weights memory: 14.99GiB." for this run (total 17.13 rounds per term)
    assert (
        "; torch peak memory increase: 1.89GiB; non-torch forward increase memory: 0.25GiB; "
        "weights memory: 14.99GiB." in lines[2]
    )
    assert lines[2].startswith("Total non KV cache memory: ")
    assert lines[3].startswith("Available KV cache memory: 58.1") and lines[3].endswith(" GiB")


def test_batch_defaults_follow_the_gpu():
    spec = load_model("llama-3.1-8b")
    h100 = vllm(spec, max_model_len=8192)
    a100 = engine_allocation(
        spec, load_profile("a100-80gb-sxm"), EngineRequest(engine="vllm", max_model_len=8192)
    )
    assert (h100["max_num_seqs"], h100["max_num_batched_tokens"]) == (1024, 8192)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    short = vllm(spec, max_model_len=4)  # the token budget is capped at seqs x max_model_len
    assert short["max_num_batched_tokens"] == 4096 and short["max_num_seqs"] == 1024


def test_dtype_sets_the_model_and_the_cache():
    spec = load_model("llama-3.1-8b")
    fp32 = vllm(spec, max_model_len=8192, gpu_mem_util=0.95, dtype="float32")
    bf16 = vllm(spec, max_model_len=8192, gpu_mem_util=0.95)
    assert fp32["dtype"] == "fp32" and fp32["page_bytes"] == 2 * bf16["page_bytes"]
    # vLLM 0.19, --dtype float32 on H100: weights 29.98 GiB, 175,296 tokens (262,144 B/token)
    assert fp32["memory"][0]["weights"]["total_bytes"] / 2**30 == pytest.approx(29.98, abs=0.01)
    assert fp32["page_bytes"] == 16 * 8 * 128 * 2 * 4
    float32_config = spec._replace(dtype="fp32")  # a float32 config served with --dtype auto
    auto = vllm(float32_config, max_model_len=8192)
    assert auto["dtype"] == "bf16" and auto["page_bytes"] == bf16["page_bytes"]
    assert any(n["id"] == "engine-dtype-downcast" for n in auto["notes"])


def test_online_fp8_keeps_the_vocabulary_layers_in_the_model_dtype():
    # vLLM 0.19 --quantization fp8 on Llama-3.1-8B logged 8.49 GiB: 6.98e9 linear params in one
    # byte, embedding and lm_head (2 x 525,336,576) in bf16
    data = vllm(load_model("llama-3.1-8b"), max_model_len=8192, quantization="fp8")
    linear = 8_030_261_248 - 2 * 525_336_576 - 266_240
    expected = linear + 2 * 525_336_576 * 2 + 266_240 * 2 + 131072 * 128 * 2
    assert data["memory"][0]["weights"]["total_bytes"] == pytest.approx(expected, rel=1e-3)
    assert expected / 2**30 == pytest.approx(8.49, abs=0.01)


def test_window_at_least_max_model_len_stays_a_sliding_spec():
    # vLLM builds a SlidingWindowSpec whenever a window is set (no conversion to full
    # attention): a window >= max_model_len costs one block more per request, same pool.
    spec = load_model("phi-4")  # this copy of the config carries sliding_window 16384
    sliding = vllm(spec, kv_cache_memory_bytes=gib("10"), max_model_len=8192)
    full = vllm(
        spec._replace(
            layers=tuple(
                layer._replace(attention=layer.attention._replace(kind=CacheKind.FULL, window=None))
                for layer in spec.layers
            )
        ),
        kv_cache_memory_bytes=gib("10"),
        max_model_len=8192,
    )
    assert sliding["blocks_per_request"] == 8192 // 16 + 1
    assert full["blocks_per_request"] == 8192 // 16
    assert sliding["kv_cache_tokens"] == full["kv_cache_tokens"]


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


def test_mla_page_is_replicated_and_the_block_follows_the_backend():
    spec = load_model("deepseek-v3")
    data = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=32768, tp=8)
    assert data["block_size"] == 16  # FLASH_ATTN_MLA on Hopper with a bf16 cache
    assert data["page_bytes"] == 16 * 576 * 2  # one latent head whatever the TP degree
    assert data["num_blocks"] == 20 * 2**30 // (16 * 576 * 2) // 61
    fp8 = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=32768, kv_cache_dtype="fp8")
    assert fp8["block_size"] == 64 and fp8["page_bytes"] == 64 * 576  # FlashMLA
    ds = vllm(
        spec, kv_cache_memory_bytes=gib("20"), max_model_len=32768, kv_cache_dtype="fp8_ds_mla"
    )
    assert ds["page_bytes"] == 64 * 656
    b200 = engine_allocation(
        spec,
        load_profile("b200"),
        EngineRequest(engine="vllm", kv_cache_memory_bytes=gib("20"), max_model_len=32768),
    )
    assert b200.block_size == 32  # FLASHINFER_MLA
    a100 = engine_allocation(
        spec,
        load_profile("a100-80gb-sxm"),
        EngineRequest(engine="vllm", kv_cache_memory_bytes=gib("20"), max_model_len=32768),
    )
    assert a100.block_size == 16  # TRITON_MLA


def test_dsa_indexer_key_cache_beside_the_latent():
    # DeepseekV32IndexerCache: 128 fp8 values + one fp32 scale = 132 B per token per layer, in
    # the same group as the latent (FLASHMLA_SPARSE, 64-token blocks on Hopper)
    spec = load_model("deepseek-v3.2")
    bf16 = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=32768, tp=8)
    assert bf16["block_size"] == 64
    assert bf16["page_bytes"] == 64 * (576 * 2 + 132)
    fp8 = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=32768, kv_cache_dtype="fp8")
    assert fp8["kv_cache_dtype"] == "fp8_ds_mla"  # vLLM switches layouts on FlashMLA-sparse
    assert fp8["page_bytes"] == 64 * (656 + 132)


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


def test_llama4_chunked_layers_stay_chunked_unless_the_hybrid_manager_is_off():
    # vLLM keeps the hybrid KV-cache manager on for chunked attention since vllm#29627
    # (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1)
    spec = load_model("llama-4-scout")
    hybrid = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=131072)
    assert hybrid["num_groups"] == 4  # 12 full + 36 chunked in groups of 12
    chunk_blocks = math.ceil(min(8192 + 8192, 131072) / 16)
    assert hybrid["blocks_per_request"] == 131072 // 16 + 3 * chunk_blocks
    off = vllm(spec, kv_cache_memory_bytes=gib("20"), max_model_len=131072, hybrid_chunked=False)
    assert off["num_groups"] == 1  # every layer a full-attention spec
    assert off["required_bytes_per_request"] == 48 * 131072 * 2 * 8 * 128 * 2
    disabled = vllm(
        spec, kv_cache_memory_bytes=gib("20"), max_model_len=131072, hybrid_kv_cache_manager=False
    )
    assert disabled["num_groups"] == 1


def test_per_token_head_scales_and_nvfp4_pages():
    spec = load_model("llama-3.1-8b")
    int8 = vllm(
        spec,
        kv_cache_memory_bytes=gib("10"),
        max_model_len=8192,
        kv_cache_dtype="int8_per_token_head",
        vllm_version="0.21",  # CacheDType has the per-token-head and nvfp4 caches from 0.20.0
    )
    assert int8["page_bytes"] == 16 * 8 * 256 + 2 * 16 * 8 * 4
    nvfp4 = vllm(
        spec,
        kv_cache_memory_bytes=gib("10"),
        max_model_len=8192,
        kv_cache_dtype="nvfp4",
        vllm_version="0.21",
    )
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
    gb = (tokens + 1) * 32 * 8 * 128 * 2 / 2**30  # every buffer has size + page_size rows
    assert data["log_lines"][0] == (
        f"KV Cache is allocated. #tokens: {tokens}, K size: {gb:.2f} GB, V size: {gb:.2f} GB"
    )
    assert data["log_lines"][1].startswith(f"max_total_num_tokens={tokens}, chunked_prefill_size=")


def test_sglang_log_line_matches_a_logged_pool():
    # vllm#21348: SGLang, Qwen3-235B-A22B-FP8 at TP 4 logged
    # "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"
    spec = load_model("qwen3-235b-a22b")
    cell = 94 * 1 * 128 * 2 * 2
    given = engine_allocation(
        spec,
        H100,
        EngineRequest(engine="sglang", tp=4, kv_cache_memory_bytes=367404 * cell),
    )
    assert given.kv_cache_tokens == 367404
    line = engine_view(given).data["log_lines"][0]
    assert line == "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"
    predicted = engine_allocation(
        spec,
        H100,
        EngineRequest(engine="sglang", tp=4, mem_fraction_static=0.93, weights_dtype="fp8"),
    )
    assert predicted.kv_cache_tokens == pytest.approx(367404, rel=0.05)


def test_sglang_default_mem_fraction_static():
    # server_args: H100 (81,090 MiB reported), TP 1, not MLA: reserved 512 + 8192 x 1.5 +
    # 256 x 2 + 1/8 x 1024 + 58 piecewise sizes x 8 = 13,904 MiB -> 0.829; MLA adds 1,536 MiB
    # instead of the piecewise term; TP 8: 512 + 12,288 + 1,024 + 1,024 + 464 = 15,312 MiB
    gpu_mib = H100.usable_memory_bytes / 2**20
    tp1 = run_json("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    assert tp1["mem_fraction_static"] == round((gpu_mib - 13904) / gpu_mib, 3)
    tp8 = run_json("engine", "llama-3.1-70b", "--engine", "sglang", "--ctx", "8k", "--tp", "8")
    assert tp8["mem_fraction_static"] == round((gpu_mib - 15312) / gpu_mib, 3)


def test_sglang_mla_and_dsa_pools():
    mla = run_json(
        "engine", "deepseek-v3", "--engine", "sglang", "--kv-cache-memory", "10GiB", "--tp", "8"
    )
    assert mla["cell_size_bytes"] == 576 * 61 * 2
    dsa = engine_allocation(
        load_model("deepseek-v3.2"),
        H100,
        EngineRequest(engine="sglang", tp=8, kv_cache_memory_bytes=gib("10")),
    )
    assert dsa.kv_cache_dtype == "bfloat16" and dsa.block_size == 64  # Hopper default for DSA
    assert dsa.cell_size_bytes == dsa.profile_cell_size_bytes == (576 * 2 + 132) * 61
    fp8 = engine_allocation(
        load_model("deepseek-v3.2"),
        H100,
        EngineRequest(
            engine="sglang", tp=8, kv_cache_memory_bytes=gib("10"), kv_cache_dtype="fp8_e4m3"
        ),
    )
    # the pool is divided by 576 + 132 B per layer, but each latent is stored in 656 B
    assert fp8.profile_cell_size_bytes == (576 + 132) * 61
    assert fp8.cell_size_bytes == (656 + 132) * 61
    assert fp8.kv_cache_tokens == 10 * 2**30 // ((576 + 132) * 61) // 64 * 64


def test_sglang_hybrid_swa_split():
    swa = run_json("engine", "gemma-3-27b", "--engine", "sglang", "--kv-cache-memory", "10GiB")
    full, window = swa["full_tokens"], swa["swa_tokens"]
    assert window == int(0.8 * full)
    per_token = 16 * 128 * 2 * 2
    assert full == 10 * 2**30 // (per_token * 10 + 0.8 * per_token * 52)


def test_sglang_sub_pools_hold_their_own_layer_shapes():
    """Gemma-4-31B: the SWA pool's 50 layers are 16 KV heads x 256, the full pool's 10 are 4 x
    512; each pool's token takes its own layers' bytes (SGLang's swa_head_num/swa_head_dim)."""
    import json

    from kvplan.inputs.architectures import build_model

    raw = json.loads(
        (REPO / "tests/data/real_configs/nvidia--Gemma-4-31B-IT-NVFP4.json").read_text()
    )
    spec = build_model(raw, "gemma-4-31b")
    data = engine_allocation(
        spec,
        H100,
        # bf16: auto is the checkpoint's fp8 cache (sglang_checkpoint_kv_cache_dtype)
        EngineRequest(engine="sglang", kv_cache_memory_bytes=gib("10"), kv_cache_dtype="bf16"),
    )
    swa, full = 16 * 256 * 2 * 2, 4 * 512 * 2 * 2
    assert data.cell_size_bytes == 50 * swa + 10 * full == 901_120
    assert data.full_tokens == int(10 * 2**30 // (10 * full + 0.8 * 50 * swa))
    from kvplan.present.engines import sglang_log_lines

    lines = [x for x in sglang_log_lines(data) if "KV Cache is allocated" in x]
    k_gb = [float(x.split("K size: ")[1].split(" GB")[0]) for x in lines]
    page = data.block_size
    expected = [
        (data.full_tokens + page) * 10 * full / 2 / 2**30,
        (data.swa_tokens + page) * 50 * swa / 2 / 2**30,
    ]
    assert k_gb == [round(x, 2) for x in expected]


def test_sglang_mamba_pool_comes_first():
    data = engine_allocation(
        load_model("qwen3-next-80b-a3b"),
        H100,
        EngineRequest(engine="sglang", tp=4, kv_cache_memory_bytes=gib("19")),
    )
    assert data.mamba_pool_bytes == int(19 * 2**30 * 0.9 / 1.9)
    assert data.pool_bytes == 19 * 2**30 - data.mamba_pool_bytes
    # 12 full-attention layers; 2 KV heads over TP 4 leave one (replicated) head per rank
    assert data.cell_size_bytes == 12 * 1 * (256 + 256) * 2


def test_sglang_speculative_hybrid_reserves_verification_states_first():
    """handle_max_mamba_cache: with speculative decoding the intermediate states of every
    verified position (max_running_requests x speculative_num_draft_tokens of them, a request's
    whole state each) leave the rest before the state/KV split; init_memory then caps
    max_running_requests at the state slots // 3."""
    from kvplan.engines.sglang import mamba_capped_requests, speculative_state_slots

    spec, rest = load_model("qwen3-next-80b-a3b"), 19 * 2**30
    plain = engine_allocation(
        spec, H100, EngineRequest(engine="sglang", tp=4, kv_cache_memory_bytes=rest)
    )
    slots = speculative_state_slots(48, 4)
    assert slots == 192
    spec_alloc = engine_allocation(
        spec,
        H100,
        EngineRequest(
            engine="sglang", tp=4, kv_cache_memory_bytes=rest, speculative_state_slots=slots
        ),
    )
    # one request's state at TP 4, by hand: 36 Gated DeltaNet layers, each a bf16 conv state of
    # 3 columns x (2 x 4 x 128 + 8 x 128) channels and an fp32 SSM state of 8 heads x 128 x 128
    state = 36 * (3 * 2048 * 2 + 8 * 128 * 128 * 4)
    assert state == 19_316_736
    reserved = 192 * state
    assert spec_alloc.mamba_pool_bytes == int((rest - reserved) * 0.9 / 1.9)
    assert spec_alloc.pool_bytes == rest - reserved - spec_alloc.mamba_pool_bytes
    assert plain.mamba_pool_bytes == int(rest * 0.9 / 1.9)  # nothing reserved unspeculated
    # (19 GiB - 192 x 19,316,736 B) x 0.9 / 1.9 = 7,906,870,110 B: 409 states, 136 requests
    assert spec_alloc.max_mamba_cache_size == 409
    assert mamba_capped_requests(48, 409) == 48 and mamba_capped_requests(200, 409) == 136
    assert mamba_capped_requests(200, None) == 200


def test_sglang_speculative_hybrid_state_cap_reaches_the_running_batch():
    """A given --max-running-requests (kvplan --max-num-seqs) past the state slots // 3 runs at
    that cap, as SGLang's init_memory clamps it; without a state pool it stays as given."""
    base = ("simulate", "qwen3-next-80b-a3b", "--gpu", "h100", "--tp", "4", "--engine", "sglang")
    base += ("--kv-cache-memory", "19GiB", "--num-prompts", "4", "--input-len", "64")
    base += ("--output-len", "4", "--format", "json")
    code, out, err = run_cli(*base, "--max-num-seqs", "1000")
    assert code == 0, err
    # 19 GiB x 0.9 / 1.9 = 9,663,676,416 B of states at 19,316,736 B: 500 slots, 166 requests
    assert json.loads(out)["setup"]["max_num_seqs"] == 166
    code, out, err = run_cli(*base, "--max-num-seqs", "100")
    assert code == 0, err
    assert json.loads(out)["setup"]["max_num_seqs"] == 100


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
        (["--engine", "vllm", "--dtype", "float8"], "--dtype 'float8'"),
        (["--engine", "vllm", "--quantization", "bitnet"], "--quantization 'bitnet'"),
        (["--engine", "vllm", "--quantization", "fp8", "--weights-dtype", "int8"], "not both"),
        (["--engine", "vllm", "--vllm-version", "0.7"], "--vllm-version '0.7'"),
        (["--engine", "vllm", "--max-num-seqs", "0"], "--max-num-seqs"),
        (["--engine", "sglang", "--enforce-eager"], "is a vllm flag"),
    ],
)
def test_bad_engine_input(argv, needle):
    code, _, err = run_cli("engine", "llama-3.1-8b", *argv)
    assert code == 2 and needle in err, err


def test_vllm_021_subtracts_the_cuda_graph_estimate_and_prints_the_new_cache_size():
    spec = load_model("llama-3.1-8b")
    old = vllm(spec, gpu_mem_util=0.95, max_model_len=8192)
    new = vllm(spec, gpu_mem_util=0.95, max_model_len=8192, vllm_version="0.21")
    graphs = old["memory"][0]["cuda_graph_estimate_bytes"]
    assert graphs > 0
    assert new["available_kv_bytes"] == old["available_kv_bytes"] - graphs
    assert new["kv_cache_tokens"] == int(new["max_concurrency"] * 8192)
    eager = vllm(
        spec, gpu_mem_util=0.95, max_model_len=8192, vllm_version="0.21", enforce_eager=True
    )
    assert eager["available_kv_bytes"] == old["available_kv_bytes"]


def test_pipeline_stages_take_their_own_memory_and_the_fewest_blocks():
    # vLLM 0.19, Llama-3.1-8B at PP 4: the first and last stages hold 4.26 GiB of weights, the
    # middle ones 3.28; the last stage's sampler makes it the smallest pool (2,257,264 tokens)
    data = vllm(load_model("llama-3.1-8b"), gpu_mem_util=0.95, max_model_len=8192, pp=4)
    weights = [m["weights"]["total_bytes"] / 2**30 for m in data["memory"]]
    assert [round(w, 2) for w in weights] == [4.26, 3.28, 3.28, 4.26]
    assert data["kv_cache_tokens"] == pytest.approx(2_257_264, rel=0.01)


def test_weights_that_do_not_fit_are_a_one_line_error():
    code, _, err = run_cli("engine", "llama-3.1-70b", "--engine", "vllm", "--gpu", "h100")
    assert code == 2 and "Traceback" not in err
    # Llama-3.1-70B in bf16 is 131 GiB: one H100's 0.9 x 79.19 GiB cannot hold the weights alone
    assert "the weights alone (" in err and "exceed the 71.27 GiB requested" in err


def _glm53():
    import json

    from kvplan.inputs.architectures import build_model

    raw = json.loads((REPO / "tests/data/real_configs/zai-org--GLM-5.3.json").read_text())
    return build_model(raw, "glm-5.3")


def test_vllm_layers_of_one_type_and_several_sizes_share_one_group():
    """GLM-5.3 at TP 8, fp8 cache: 21 layers hold a 576-byte latent and a 132-byte indexer key
    (128 fp8 + one fp32 scale), 57 only the latent. vLLM's UniformTypeKVCacheSpecs: one group,
    a block covers all 78 layers, so num_blocks = memory // (block x the summed bytes)."""
    data = engine_allocation(
        _glm53(),
        load_profile("b300"),
        EngineRequest(engine="vllm", tp=8, kv_cache_dtype="fp8", kv_cache_memory_bytes=gib("50")),
    )
    per_token = 21 * (576 + 132) + 57 * 576
    assert data.uniform_type and data.num_groups == 1
    assert data.page_bytes == data.block_size * per_token
    assert data.num_blocks == 50 * 2**30 // (data.block_size * per_token)


def test_sglang_counts_an_indexer_key_only_where_a_layer_has_one():
    data = engine_allocation(
        _glm53(),
        load_profile("b300"),
        EngineRequest(engine="sglang", tp=8, kv_cache_memory_bytes=gib("50")),
    )
    assert data.profile_cell_size_bytes == 78 * 576 + 21 * 132
    assert "sglang-partial-indexer" in [n.id for n in data.notes]


@pytest.mark.parametrize("version, reported", [("0.19", 55_000), ("0.21", 525_000)])
def test_gemma4_cache_size_lines_match_a_published_vllm_run(version, reported):
    """vllm-project/vllm#43308: Gemma-4-31B (AWQ 4-bit) on an A100 80GB, about 50 GB of KV
    memory, logged "GPU KV cache size" of ~55k tokens under v0.20.0 and ~525k under v0.21.0
    (the line's definition changed in 0.21). kvplan, with 50 GiB and a 128k max_model_len:
    the 0.19 definition (num_blocks // groups x block) and the 0.21 one (concurrency x
    max_model_len), within the report's rounding."""
    import json

    from kvplan.inputs.architectures import build_model

    raw = json.loads(
        (REPO / "tests/data/real_configs/nvidia--Gemma-4-31B-IT-NVFP4.json").read_text()
    )
    # the run's AWQ checkpoint states no KV cache; this ModelOpt one states fp8, which vLLM
    # 0.14+ would take for auto (tests/test_checkpoint_kv_cache.py)
    del raw["quantization_config"]["kv_cache_scheme"]
    data = engine_allocation(
        build_model(raw, "gemma-4-31b"),
        load_profile("a100"),
        EngineRequest(
            engine="vllm",
            kv_cache_memory_bytes=gib("50"),
            max_model_len=131072,
            vllm_version=version,
        ),
    )
    assert data.kv_cache_tokens == pytest.approx(reported, rel=0.05)


def _real(name: str, alias: str):
    import json

    from kvplan.inputs.architectures import build_model

    raw = json.loads((REPO / f"tests/data/real_configs/{name}.json").read_text())
    return build_model(raw, alias)


@pytest.mark.parametrize("tp, kv_cache_dtype", [(8, "auto"), (1, "auto"), (8, "fp8")])
def test_vllm_minimax_m3_indexer_key_beside_k_and_v(tp, kv_cache_dtype):
    """MiniMax-M3 under vLLM 0.32 (vllm/models/minimax_m3): every layer's K and V is a
    FullAttentionSpec of max(1, 4 // tp) heads of 128; the 57 sparse layers' indexer keys are
    MLAAttentionSpecs of one bf16 vector of 128 (MiniMaxM3IndexerCache), whatever the cache
    dtype and TP. All need the same token slots: one UniformTypeKVCacheSpecs group, blocks of
    128 (the sparse backends' only kernel block), page = block x the summed bytes."""
    spec = _real("MiniMaxAI--MiniMax-M3", "minimax-m3")
    memory = gib("3")
    data = engine_allocation(
        spec,
        load_profile("h200"),
        EngineRequest(
            engine="vllm",
            tp=tp,
            kv_cache_dtype=kv_cache_dtype,
            kv_cache_memory_bytes=memory,
            vllm_version="0.32",
        ),
    )
    element = 1 if kv_cache_dtype == "fp8" else 2
    kv = max(1, 4 // tp) * (128 + 128) * element
    per_token = 60 * kv + 57 * 128 * 2
    assert data.block_size == 128 and data.uniform_type and data.num_groups == 1
    assert data.page_bytes == 128 * per_token
    assert data.num_blocks == memory // (128 * per_token)
    assert data.blocks_per_request == math.ceil(8192 / 128)
    assert "vllm-gqa-indexer" in [n.id for n in data.notes]


def test_vllm_minimax_m3_refused_where_the_release_has_no_model():
    code, _, err = run_cli(
        "engine",
        str(REPO / "tests/data/real_configs/MiniMaxAI--MiniMax-M3.json"),
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--vllm-version",
        "0.21",
    )
    assert code == 2 and "vLLM 0.21 has no model for it" in err
    assert "--vllm-version 0.32" in err and len(err.strip().splitlines()) == 1


def test_vllm_deepseek_v4_before_0_32_is_refused_by_release():
    """vLLM 0.19 has no DeepSeek-V4 model; 0.21.0's groups its caches another way
    (group_and_unify_kv_cache_specs): both name the release kvplan models (tests/test_vllm_dsv4.py
    holds 0.32's allocation)."""
    flash = str(REPO / "tests/data/real_configs/deepseek-ai--DeepSeek-V4-Flash.json")
    for version, why in (("0.19", "no DeepSeek-V4 model"), ("0.21", "group_and_unify")):
        code, _, err = run_cli(
            "engine", flash, "--engine", "vllm", "--gpu", "h200", "--vllm-version", version
        )
        one_line_error(code, err, why)
        assert "--vllm-version 0.32" in err


def test_sglang_still_refuses_the_minimax_m3_indexer():
    code, _, err = run_cli(
        "engine",
        str(REPO / "tests/data/real_configs/MiniMaxAI--MiniMax-M3.json"),
        "--engine",
        "sglang",
        "--gpu",
        "h200",
        "--tp",
        "8",
    )
    assert code == 2 and "SGLang 0.5.14 has no MiniMax-M3 model" in err


def test_vllm_0_32_holds_back_one_block_of_a_uniform_type_group():
    """0.32's fit check plans against the memory less the null block, one block of the pool
    (_pool_bytes_per_block: the widest group's pages). GLM-5.3's one uniform-type group's block
    already covers all 78 layers, so exactly one request plus that block fits, a byte less does
    not (not 78 blocks held back)."""
    spec = load_model(str(REPO / "tests/data/real_configs/zai-org--GLM-5.3.json"), checkpoint=False)
    h200 = load_profile("h200")

    def alloc(memory):
        request = EngineRequest(vllm_version="0.32", kv_cache_memory_bytes=memory, tp=8)
        return engine_allocation(spec, h200, request)

    r = alloc(50 * (1 << 30))
    assert r.uniform_type and r.pool_block_bytes == r.page_bytes
    just = r.required_bytes_per_request + r.page_bytes
    assert alloc(just).fits and not alloc(just - 1).fits
