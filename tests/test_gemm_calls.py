"""Each dense GEMM at its own shape (kvplan.formulas.gemm_calls): the interpolation in the
shipped gemm/ grids, DeepSeek-R1's per-rank call list at TP 8, its summed time on the B200's
SGLang table at one token worked by hand from the file's entries, and how the step model uses
it (the calls alone at every step size; the per-layer launch cost on the other kernels)."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.gemm_calls import GemmCall, dense_gemm_calls, gemm_call_s, gemm_calls_s
from kvplan.formulas.step_time import roofs_s
from kvplan.formulas.weights import quantized_parts
from kvplan.inputs.kernel_tables import GEMM_FOLDER, gemm_grid
from kvplan.inputs.sources import load_model

from helpers import OWN_GRID, load_script, sglang_table_step, table_step

B200 = "b200_sxm.sglang.0.5.14.json"


def _raw(name: str = B200) -> dict:
    return json.loads((GEMM_FOLDER / name).read_text())


def _us(raw: dict, fmt: str, m: int, n: int, k: int) -> float:
    """The file's entry at grid point (m, n, k), microseconds."""
    return raw["us"][fmt][raw["m"].index(m)][raw["n"].index(n)][raw["k"].index(k)]


def test_a_grid_point_is_the_files_entry():
    raw, grid = _raw(), gemm_grid(B200)
    assert gemm_call_s(grid, "bf16", 1, 4096, 4096) == pytest.approx(
        _us(raw, "bf16", 1, 4096, 4096) * 1e-6
    )
    assert gemm_call_s(grid, "fp8", 16, 7168, 2048) == pytest.approx(
        _us(raw, "fp8", 16, 7168, 2048) * 1e-6
    )


def test_between_grid_shapes_the_time_is_bilinear_in_log_n_and_log_k():
    raw, grid = _raw(), gemm_grid(B200)
    # n 2112 between 2048 and 2560, k 7168 on the grid
    wn = math.log(2112 / 2048) / math.log(2560 / 2048)
    lo, hi = _us(raw, "fp8", 1, 2048, 7168), _us(raw, "fp8", 1, 2560, 7168)
    assert gemm_call_s(grid, "fp8", 1, 2112, 7168) == pytest.approx(
        (lo * (1 - wn) + hi * wn) * 1e-6
    )
    # both off the grid: n 3000 in (2560, 3072), k 1800 in (1536, 2048)
    wn = math.log(3000 / 2560) / math.log(3072 / 2560)
    wk = math.log(1800 / 1536) / math.log(2048 / 1536)
    want = (
        _us(raw, "bf16", 4, 2560, 1536) * (1 - wn) * (1 - wk)
        + _us(raw, "bf16", 4, 3072, 1536) * wn * (1 - wk)
        + _us(raw, "bf16", 4, 2560, 2048) * (1 - wn) * wk
        + _us(raw, "bf16", 4, 3072, 2048) * wn * wk
    )
    assert gemm_call_s(grid, "bf16", 4, 3000, 1800) == pytest.approx(want * 1e-6)


def test_between_grid_token_counts_the_time_is_log_log_in_tokens():
    raw, grid = _raw(), gemm_grid(B200)
    t16, t32 = _us(raw, "bf16", 16, 4096, 4096), _us(raw, "bf16", 32, 4096, 4096)
    w = math.log(20 / 16) / math.log(2)
    assert gemm_call_s(grid, "bf16", 20, 4096, 4096) == pytest.approx(t16 * (t32 / t16) ** w * 1e-6)
    # at a prefill chunk's size: between 4,096 and 8,192 tokens, the same rule
    t4k, t8k = _us(raw, "fp8", 4096, 7168, 2048), _us(raw, "fp8", 8192, 7168, 2048)
    w = math.log(6000 / 4096) / math.log(2)
    assert gemm_call_s(grid, "fp8", 6000, 7168, 2048) == pytest.approx(
        t4k * (t8k / t4k) ** w * 1e-6
    )
    assert t4k < gemm_call_s(grid, "fp8", 6000, 7168, 2048) * 1e6 < t8k


def test_the_grid_holds_every_power_of_two_to_32768_tokens():
    raw = _raw()
    assert raw["m"] == [2**i for i in range(16)]
    # past one token's flat time the table's GEMM grows with the tokens: at 32,768 a 4,096 x
    # 4,096 bf16 GEMM (1.1 TFLOP) runs near the B200's compute peak, not its bandwidth
    t1, t32k = _us(raw, "bf16", 1, 4096, 4096), _us(raw, "bf16", 32768, 4096, 4096)
    assert t32k > 50 * t1
    assert 2 * 32768 * 4096 * 4096 / (t32k * 1e-6) > 0.5 * 2.25e15


def test_past_the_grid_a_wider_call_scales_and_more_tokens_scale_linearly():
    raw, grid = _raw(), gemm_grid(B200)
    widest = _us(raw, "bf16", 1, 65536, 4096)
    assert gemm_call_s(grid, "bf16", 1, 131072, 4096) == pytest.approx(2 * widest * 1e-6)
    last = _us(raw, "bf16", 32768, 4096, 4096)
    assert gemm_call_s(grid, "bf16", 40000, 4096, 4096) == pytest.approx(
        last * 40000 / 32768 * 1e-6
    )
    assert gemm_call_s(grid, "bf16", 257, 4096, 4096) is not None  # past the old 256
    assert gemm_call_s(grid, "nvfp4", 1, 4096, 4096) is None


def test_deepseek_r1_tp8_calls_are_its_per_rank_shapes():
    spec = load_model("deepseek-r1")
    calls = dense_gemm_calls(spec, "fp8", quantized_parts(spec, "fp8"), 8)
    assert calls is not None
    # hidden 7168; MLA q_lora 1536, kv_lora 512, rope 64, 128 heads (16 a rank) of qk 192 and
    # v 128; dense MLP 18432 (2304 a rank, first 3 layers); 58 MoE layers: router 256 experts,
    # shared expert 2048 (256 a rank); head 129280 / 8
    attention = [(1536 + 512 + 64, 7168), (16 * 192, 1536), (7168, 16 * 128)]
    want = (
        [GemmCall(n, k, "fp8", 3) for n, k in attention]
        + [GemmCall(2 * 2304, 7168, "fp8", 3), GemmCall(7168, 2304, "fp8", 3)]
        + [GemmCall(n, k, "fp8", 58) for n, k in attention]
        + [GemmCall(256, 7168, "bf16", 58)]
        + [GemmCall(2 * 256, 7168, "fp8", 58), GemmCall(7168, 256, "fp8", 58)]
        + [GemmCall(16160, 7168, "bf16", 1, head=True)]
    )
    assert calls == tuple(want)


def test_deepseek_r1_tp8_on_the_b200_at_one_token_by_hand():
    """The per-call sum from the file's entries, each interpolated in log n by hand (k on the
    grid for every call but q_b's 1536 and o's 2048, both grid values)."""
    raw, grid = _raw(), gemm_grid(B200)

    def between(fmt, n, k, lo, hi):
        w = math.log(n / lo) / math.log(hi / lo)
        return _us(raw, fmt, 1, lo, k) * (1 - w) + _us(raw, fmt, 1, hi, k) * w

    q_a_kv_a = between("fp8", 2112, 7168, 2048, 2560)
    q_b = _us(raw, "fp8", 1, 3072, 1536)
    o = _us(raw, "fp8", 1, 7168, 2048)
    gate_up = between("fp8", 4608, 7168, 4096, 5120)
    down_k = math.log(2304 / 2048) / math.log(2560 / 2048)
    down = _us(raw, "fp8", 1, 7168, 2048) * (1 - down_k) + _us(raw, "fp8", 1, 7168, 2560) * down_k
    router = _us(raw, "bf16", 1, 256, 7168)
    shared = _us(raw, "fp8", 1, 512, 7168) + _us(raw, "fp8", 1, 7168, 256)
    head = between("bf16", 16160, 7168, 12288, 16384)
    want_us = 61 * (q_a_kv_a + q_b + o) + 3 * (gate_up + down) + 58 * (router + shared) + head
    spec = load_model("deepseek-r1")
    calls = dense_gemm_calls(spec, "fp8", quantized_parts(spec, "fp8"), 8)
    assert calls is not None
    got = gemm_calls_s(grid, calls, 1, 1)
    assert got == pytest.approx(want_us * 1e-6)
    assert 3.0e-3 < got < 3.6e-3  # the B200 table's 3.27 ms, against 1.85 ms pooled


def _b200_model(spec, with_grid: bool) -> StepModel:
    return sglang_table_step(spec, "b200", "fp8", 8, gemm_grid=OWN_GRID if with_grid else None)


def test_the_step_model_takes_the_calls_alone_at_every_step_size():
    spec = load_model("deepseek-r1")
    timed, pooled = _b200_model(spec, True), _b200_model(spec, False)
    for tokens in (1, 256, 257, 4096, 20000):
        calls_s = timed.dense_calls_s(tokens, 1)
        assert calls_s is not None
        assert calls_s == pytest.approx(
            gemm_calls_s(gemm_grid(B200), timed.gemm_calls, tokens, 1) + timed.mla_bmms_s
        )
        # the dense term is the calls, in place of the pooled term: the step's GEMMs move by
        # the difference (the experts' term is the same in both)
        dense_bytes, _ = pooled.weights_bytes(tokens, None)
        flops = pooled.dense_flop_per_token * tokens + pooled.head_flop_per_sample
        memory_s, compute_s = roofs_s(dense_bytes, flops, pooled.dense_rates)
        dense_pooled_s = max(memory_s, compute_s, pooled.floors.dense_s)
        before, after = sum(pooled.gemm_s(tokens, 1)), sum(timed.gemm_s(tokens, 1))
        assert after - before == pytest.approx(calls_s - dense_pooled_s, rel=1e-9)
    # at one token the calls are far above the pooled term
    assert timed.dense_calls_s(1, 1) > 1.5 * max(  # type: ignore[operator]
        *roofs_s(pooled.weights_bytes(1, None)[0], pooled.dense_flop_per_token, pooled.dense_rates),
        pooled.floors.dense_s,
    )


def _h100_llama_8b(with_grid: bool) -> StepModel:
    grid = OWN_GRID if with_grid else None
    return sglang_table_step(load_model("llama-3.1-8b"), "h100-sxm", "bf16", 1, gemm_grid=grid)


def test_llama_8b_prefill_of_4096_tokens_on_the_h100_by_hand():
    """A 4,096-token prefill step of Llama-3.1-8B at TP 1 on the H100's SGLang table: hidden
    4,096, 32 heads and 8 KV heads of 128 (q|k|v 6,144 wide), MLP 14,336 gated (gate|up
    28,672), 32 layers, head 128,256 by 4,096 on the one sampled row. Every call at a grid
    token count (4,096; the head at 1), its n and k on the grid but gate|up's n 28,672 (log n
    between 16,384 and 51,200), down's k 14,336 (log k between 12,288 and 16,384) and the
    head's n (past the widest, 65,536: 128,256 / 65,536 of it)."""
    name = "h100_sxm.sglang.0.5.14.json"
    raw = _raw(name)

    def us(m, n, k):
        return _us(raw, "bf16", m, n, k)

    w = math.log(28672 / 16384) / math.log(51200 / 16384)
    gate_up = us(4096, 16384, 4096) * (1 - w) + us(4096, 51200, 4096) * w
    w = math.log(14336 / 12288) / math.log(16384 / 12288)
    down = us(4096, 4096, 12288) * (1 - w) + us(4096, 4096, 16384) * w
    layer = us(4096, 6144, 4096) + us(4096, 4096, 4096) + gate_up + down
    head = us(1, 65536, 4096) * 128256 / 65536
    want_s = (32 * layer + head) * 1e-6
    model = _h100_llama_8b(True)
    assert model.dense_calls_s(4096, 1) == pytest.approx(want_s)
    # the sum is the whole dense term of the step (the calls alone)
    weights_s, matmul_s = model.gemm_s(4096, 1)
    assert weights_s + matmul_s == pytest.approx(want_s)
    assert 80e-3 < want_s < 95e-3  # the H100 table's 86 ms (pooled: 78 ms)


def test_step_time_does_not_fall_across_the_old_256_token_edge():
    from kvplan.formulas.batch_step import BatchShape

    model = _h100_llama_8b(True)
    times = [
        model.step(BatchShape(prefill_chunks=((t, 0),), num_sampled=1)).total_s
        for t in range(240, 300)
    ]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))
    # and the dense term moves by less than a token's share across 256 -> 257
    d256, d257 = model.dense_calls_s(256, 1), model.dense_calls_s(257, 1)
    assert d256 is not None and d257 is not None
    assert 0 < d257 - d256 < 2 * d256 / 256


def test_the_launch_cost_stays_on_the_kernels_other_than_the_timed_gemms():
    from kvplan.formulas.batch_step import BatchShape

    spec = load_model("deepseek-r1")  # 61 MLA layers: 3 dense MLPs, 58 MoE with a shared expert
    timed, pooled = _b200_model(spec, True), _b200_model(spec, False)
    # by hand: a dense MLA layer launches 7 GEMMs (5 MLA, 2 MLP) and 8 other kernels (2 norms,
    # MLA's 4 small ones, SiLU-and-mul, attention); a MoE layer 8 GEMMs (5 MLA, router, shared
    # expert's 2) and 15 others (2 norms, 4 MLA, shared's 2, the fused MoE's 6, attention)
    gemms, others = 3 * 7 + 58 * 8, 3 * 8 + 58 * 15
    assert (pooled.layer_launches, pooled.layer_gemm_launches) == (gemms + others, gemms)
    shape = BatchShape(num_decodes=1, decode_context_sum=1000, num_sampled=1)
    launch_timed, launch_pooled = (
        timed._forward(shape, 1.0).terms[-1],
        pooled._forward(shape, 1.0).terms[-1],
    )
    per_launch = pooled.host.per_layer_s / pooled.host.reference_layer_launches
    assert launch_pooled == pytest.approx(
        max((gemms + others) * per_launch, pooled.floors.small_s or 0.0)
    )
    assert launch_timed == pytest.approx(max(others * per_launch, timed.floors.small_s or 0.0))


def test_layers_the_widths_do_not_lay_out_keep_the_pooled_term():
    spec = load_model("deepseek-v3.2")  # DSA's indexer, with no DSA module to time it
    assert dense_gemm_calls(spec, "fp8", quantized_parts(spec, "fp8"), 8) is None
    assert _b200_model(spec, True).gemm_calls is None


def test_a_dsa_layer_with_its_module_timed_runs_the_mla_projections_as_calls():
    """DeepSeek-V3.2 is DeepSeek-V3's layers plus an indexer: with the DSA module's tables (the
    indexer's wq_b, wk and weights_proj in its difference over the MLA module) its dense GEMMs
    are DeepSeek-R1's calls, the same shapes, priced by the B200 table's rows (3.27 ms at one
    token, where the pooled term had 1.85 ms); the indexer's 1536 x 64 x 128 + 7168 x 128 +
    2 x 128 + 7168 x 64 parameters a layer are what the attention part holds beyond them."""
    v32, r1 = load_model("deepseek-v3.2"), load_model("deepseek-r1")
    calls = dense_gemm_calls(v32, "fp8", quantized_parts(v32, "fp8"), 8, dsa_module=True)
    assert calls == dense_gemm_calls(r1, "fp8", quantized_parts(r1, "fp8"), 8)
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    layer = next(layer for layer in v32.layers if layer.attention.indexer_head_dim)
    r1_layer = r1.layers[len(r1.layers) - 1]
    assert dict(layer.params)["attention"] - indexer == dict(r1_layer.params)["attention"]
    assert sglang_table_step(v32, "b200", "fp8", 8).gemm_calls is None  # no DSA grids given
    model = sglang_table_step(v32, "b200", "fp8", 8, dsa=True)
    assert model.dsa is not None and model.gemm_calls == calls
    got = gemm_calls_s(model.gemm_grid, calls, 1, 1)
    assert got == pytest.approx(gemm_calls_s(gemm_grid(B200), calls, 1, 1))
    assert 3.0e-3 < got < 3.6e-3


def test_the_deriver_keeps_graph_timed_formats_at_the_grid_tokens():
    derive = load_script("derive_achieved")
    rows = [
        {"gemm_dtype": dtype, "m": m, "n": n, "k": k, "latency": latency}
        for dtype, latency in (("bfloat16", 0.002), ("fp8_block", 0.2))  # ms: 2 us, 200 us
        for m in (1, 2, 300)
        for n in (64, 128)
        for k in (64, 128)
    ]
    grid = derive.gemm_grid(rows)
    assert set(grid["us"]) == {"bf16"}  # block fp8 timed the host (100x bf16)
    assert grid["n"] == [64, 128] and grid["k"] == [64, 128]
    # the token axis stops at the table's largest grid count (300 is none): 1, 2
    assert grid["m"] == [1, 2]
    by_m = grid["us"]["bf16"]
    assert by_m == [[[2.0, 2.0], [2.0, 2.0]], [[2.0, 2.0], [2.0, 2.0]]]


def test_the_deriver_keeps_every_graph_timed_format_of_a_table():
    """A table timing bf16, per-tensor fp8 and block fp8 in a graph (aiconfigurator's H100
    vLLM 0.14.0 collector: block fp8 8x bf16 at one token, under HOST_TIMED_FACTOR) writes a
    grid per format, in kvplan's keys (GEMM_FORMATS: fp8 per-tensor "int8", block "fp8")."""
    derive = load_script("derive_achieved")
    rows = [
        {"gemm_dtype": dtype, "m": m, "n": 64, "k": 64, "latency": latency * m}
        for dtype, latency in (("bfloat16", 0.002), ("fp8", 0.0015), ("fp8_block", 0.016))
        for m in (1, 2, 4)
    ]
    grid = derive.gemm_grid(rows)
    assert grid["m"] == [1, 2, 4]
    assert {fmt: by_m[2][0][0] for fmt, by_m in grid["us"].items()} == {
        "bf16": 8.0,
        "int8": 6.0,
        "fp8": 64.0,
    }


# --- the vLLM 0.14.0 grids of the H100, H200 and A100 SXM (aiconfigurator@095f58a5) ---------
H100_VLLM = "h100_sxm.vllm.0.14.0.json"


def _vllm_step(model: str, profile: str, wdtype: str, tp: int, with_grid: bool = True):
    """A StepModel of `model` on `profile`'s vLLM 0.14.0 tables (bf16 cache), as simulate
    builds one for a vLLM run there."""
    grid = OWN_GRID if with_grid else None
    return table_step(load_model(model), profile, wdtype, tp, "vllm", "0.14.0", gemm_grid=grid)


def test_vllm_runs_on_the_h100_read_their_own_grid_of_every_format():
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.kernel_tables import tables_for

    for profile, gpu in (("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")):
        grid = tables_for(load_profile(profile), "vllm", "0.14.0").gemm_grid
        assert grid == gemm_grid(f"{gpu}.vllm.0.14.0.json")
        assert set(grid.us) == {"bf16", "int8"}  # block fp8: EAGER_COLLECTED
    raw = _raw(H100_VLLM)
    assert raw["m"] == [2**i for i in range(14)]  # the H100 table stops at 8,192 tokens
    assert "095f58a5" in raw["source"] and "/vllm/0.14.0/" in raw["source"]


def test_the_dense_weight_format_picks_the_grid_it_is_priced_on():
    """Llama-3.1-405B at TP 8 on the H100's vLLM 0.14.0 grid: bf16 weights price every call on
    the bf16 grid, per-tensor fp8 (fp8-tensor: Llama-3.1-405B-FP8) the quantized projections
    on the per-tensor fp8 rows ("int8"); the head stays bf16 in both. Each sum is its own rows'
    (no shared fraction): at one token the per-tensor fp8 GEMMs read half the bytes and take
    0.6-0.8 of the bf16 time. Block fp8 has no vLLM grid (its rows are not the kernel's graph
    time: EAGER_COLLECTED) and keeps the pooled pair."""
    grid = gemm_grid(H100_VLLM)
    got = {}
    for wdtype, fmt in (("bf16", "bf16"), ("fp8-tensor", "int8")):
        model = _vllm_step("llama-3.1-405b", "h100-sxm", wdtype, 8)
        assert model.gemm_calls is not None
        assert {c.fmt for c in model.gemm_calls if not c.head} == {fmt}
        assert {c.fmt for c in model.gemm_calls if c.head} == {"bf16"}
        got[wdtype] = model.dense_calls_s(1, 1)
        assert got[wdtype] == pytest.approx(gemm_calls_s(grid, model.gemm_calls, 1, 1))
    assert 0.6 < got["fp8-tensor"] / got["bf16"] < 0.8
    block = _vllm_step("llama-3.1-405b", "h100-sxm", "fp8", 8)
    assert block.gemm_calls is None and block.dense_calls_s(1, 1) is None


def test_vllm_block_fp8_rows_stay_out_of_the_grid():
    """vLLM's collector times fp8_block without a CUDA graph: gemm_grid leaves a vLLM table's
    block-fp8 rows out whatever their speed, and keeps them for an engine whose collector
    graphs them (SGLang); the other formats are kept for both."""
    derive = load_script("derive_achieved")
    rows = [
        {"gemm_dtype": dtype, "m": m, "n": 4096, "k": 4096, "latency": lat}
        for dtype, lat in (("bfloat16", 0.010), ("fp8", 0.008), ("fp8_block", 0.012))
        for m in (1, 2)
    ]
    assert set(derive.gemm_grid(rows, "vllm")["us"]) == {"bf16", "int8"}
    assert set(derive.gemm_grid(rows, "sglang")["us"]) == {"bf16", "int8", "fp8"}


def test_a_per_tensor_fp8_call_between_grid_shapes_on_the_h100_vllm_grid():
    """Llama-3.1-405B's gate|up at TP 8 (n 2 x 53,248 / 8 = 13,312, between 12,288 and 16,384;
    k 16,384 on the grid) at 3 tokens (between 2 and 4): linear in log n between the grid
    shapes, log-log in tokens, from the file's per-tensor fp8 ("int8") entries."""
    raw, grid = _raw(H100_VLLM), gemm_grid(H100_VLLM)
    wn = math.log(13312 / 12288) / math.log(16384 / 12288)

    def at(m: int) -> float:
        return _us(raw, "int8", m, 12288, 16384) * (1 - wn) + _us(raw, "int8", m, 16384, 16384) * wn

    w = math.log(3 / 2) / math.log(2)
    want = at(2) * (at(4) / at(2)) ** w * 1e-6
    assert gemm_call_s(grid, "int8", 3, 13312, 16384) == pytest.approx(want)
    assert _us(raw, "int8", 2, 12288, 16384) < want * 1e6 < _us(raw, "int8", 4, 16384, 16384)
    # past the table's last count (8,192): linear in tokens from it
    last = _us(raw, "int8", 8192, 16384, 16384)
    assert gemm_call_s(grid, "int8", 16384, 16384, 16384) == pytest.approx(2 * last * 1e-6)


def test_a_format_the_grid_lacks_keeps_the_pooled_term():
    """The A100's vLLM 0.14.0 table times bf16 alone (no fp8 tensor cores): a per-tensor fp8
    checkpoint there has no grid of its format and is priced by the pooled pair, as before;
    bf16 on the same GPU reads the grid."""
    assert set(gemm_grid("a100_sxm.vllm.0.14.0.json").us) == {"bf16"}
    fp8 = _vllm_step("llama-3.1-70b", "a100-80gb-sxm", "fp8-tensor", 4)
    pooled = _vllm_step("llama-3.1-70b", "a100-80gb-sxm", "fp8-tensor", 4, with_grid=False)
    assert fp8.gemm_calls is None and fp8.dense_calls_s(1, 1) is None
    assert fp8.gemm_s(1, 1) == pooled.gemm_s(1, 1)
    assert _vllm_step("llama-3.1-70b", "a100-80gb-sxm", "bf16", 4).gemm_calls is not None
