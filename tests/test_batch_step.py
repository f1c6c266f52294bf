"""formulas.batch_step: each term of a step against a hand computation from the config's own
numbers (parameter counts, layer shapes, datasheet rates, the documented fractions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.dtypes import KvFormat
from kvplan.formulas.batch_step import (
    ACHIEVED_DATASHEET,
    HOST_OVERHEADS,
    BatchShape,
    StepModel,
    _Floors,
    _shape,
    measured_achieved,
    recurrent_layers,
    small_launches,
)
from kvplan.formulas.step_time import Rates, curve_value
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import tables_for
from kvplan.inputs.sources import load_model


def dsa_tables_for(profile):
    return tables_for(profile, "vllm").dsa_delta_us


BW, PEAK = 3.35e12, 989.4e12  # H100 SXM datasheet
DENSE_C, DENSE_M = ACHIEVED_DATASHEET.dense["bf16"]
ATTN_C, ATTN_M = ACHIEVED_DATASHEET.attention


@pytest.fixture(scope="module")
def llama8():
    return load_model("llama-3.1-8b")


def model(spec, **kw):
    return StepModel(spec, Rates(BW, PEAK), "bf16", KvFormat("bf16"), **kw)


def sglang_model(spec, gpu, tp: int):
    """The step model `simulate --engine sglang --tp N` prices with (its kernel tables)."""
    from kvplan.simulate.setup import ServeOptions, step_model

    return step_model(spec, gpu, ServeOptions(tp=tp, engine="sglang"), "auto", 512, [])[0]


def test_decode_of_one_sequence_term_by_term(llama8):
    """Llama-3.1-8B: 32 layers, 8 KV heads x 128, untied 128,256 x 4,096 embedding."""
    step = model(llama8).step(BatchShape(1, 1000, (), 1))
    vocab, hidden = 128256, 4096
    weights = (llama8.params_total - vocab * hidden + hidden) * 2  # one embedding row looked up
    assert step.terms_s["weights_s"] == pytest.approx(weights / (BW * DENSE_M), rel=1e-9)
    assert step.terms_s["matmul_s"] == 0.0  # one token: far below the ridge
    kv_per_token = 32 * 8 * 128 * 2 * 2  # K and V, bf16
    # reading 1,000 tokens' KV (49 us) is below 32 launches of the smallest decode-attention
    # kernel the H100's tables measured: the step pays the launches, in attention_s
    roofline_s = 1000 * kv_per_token / (BW * ATTN_M)
    floor_s = 32 * ACHIEVED_DATASHEET.floors_s["attention"]
    assert roofline_s < floor_s
    assert step.terms_s["kv_read_s"] == 0.0
    assert step.terms_s["attention_s"] == pytest.approx(floor_s, rel=1e-9)
    unfloored = model(llama8, achieved=ACHIEVED_DATASHEET._replace(floors_s={}))
    one = unfloored.step(BatchShape(1, 1000, (), 1))
    assert one.terms_s["kv_read_s"] == pytest.approx(roofline_s, rel=1e-9)
    assert (
        one.terms_s["weights_s"] == step.terms_s["weights_s"]
    )  # 129 GEMM launches x 2.5 us < streaming 16 GB
    assert step.terms_s["launch_s"] == pytest.approx(32 * HOST_OVERHEADS.per_layer_s)
    assert step.terms_s["host_s"] == pytest.approx(
        HOST_OVERHEADS.per_step_s + HOST_OVERHEADS.per_request_s
    )
    assert step.terms_s["sampler_s"] == pytest.approx(3 * vocab * 4 / (BW * DENSE_M))
    gpu = (
        step.terms_s["weights_s"]
        + step.terms_s["attention_s"]
        + step.terms_s["launch_s"]
        + step.terms_s["sampler_s"]
    )
    assert step.total_s == pytest.approx(gpu + step.terms_s["host_s"])


def test_small_shape_floors_charge_every_launch_of_a_moe_layer():
    """DeepSeek-R1 at TP 8, one decode: each kernel family pays at least its floor times the
    launches of a forward. 61 MLA layers x 5 GEMMs (q_a+kv_a, q_b, the absorbed k and v BMMs, o),
    3 dense MLPs x 2, 58 MoE layers x (router + shared gate_up and down), the head: 486 GEMMs;
    58 fused-MoE kernels; 61 attention kernels. Floors of 40 us (GEMM), 90 us (fused MoE) and
    30 us (attention) are above each roofline here, so the terms are the floors exactly."""
    spec = load_model("deepseek-r1")
    h200 = load_profile("h200")
    floors = {"gemm": 40e-6, "moe": 90e-6, "attention": 30e-6}
    achieved = ACHIEVED_DATASHEET._replace(floors_s=floors)
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    fmt = KvFormat("bf16")
    kw = dict(tp=8, link=h200.interconnect)
    floored = StepModel(spec, rates, "fp8", fmt, achieved=achieved, **kw)
    plain = StepModel(spec, rates, "fp8", fmt, achieved=achieved._replace(floors_s={}), **kw)
    shape = BatchShape(1, 1000, (), 1)
    step, old = floored.step(shape), plain.step(shape)
    gemms = 61 * 5 + 3 * 2 + 58 * (1 + 2) + 1
    dense_s, experts_s = gemms * 40e-6, 58 * 90e-6
    assert old.terms_s["weights_s"] < dense_s  # the rooflines are below the floors: the floors bind
    assert step.terms_s["weights_s"] + step.terms_s["matmul_s"] == pytest.approx(
        dense_s + experts_s, rel=1e-9
    )
    assert step.terms_s["kv_read_s"] + step.terms_s["attention_s"] == pytest.approx(
        61 * 30e-6, rel=1e-9
    )
    assert old.terms_s["kv_read_s"] + old.terms_s["attention_s"] < 61 * 30e-6
    # the other terms do not move
    for term in ("sampler_s", "comm_s", "launch_s", "host_s"):
        assert step.terms_s[term] == old.terms_s[term]


def test_a_quantized_launch_pays_its_formats_floor():
    """DeepSeek-R1 (block fp8) at TP 8, one decode, floors above every roofline: of the 486 GEMM
    launches, the 305 in fp8 (per MLA layer q_a+kv_a, q_b and o; 3 dense MLPs x 2; 58 shared
    experts x 2) pay the fp8 floor, the head, 58 routers and 61 x 2 absorbed BMMs the family's;
    the 58 fused MoEs the fp8 one. In bf16 or mxfp4 (whose experts no 4-bit row times) every
    launch pays the family's."""
    spec = load_model("deepseek-r1")
    h200 = load_profile("h200")
    floors = {"gemm": 40e-6, "gemm_fp8": 100e-6, "moe": 90e-6, "moe_fp8": 200e-6,
              "moe_4bit": 300e-6, "attention": 30e-6}  # fmt: skip
    achieved = ACHIEVED_DATASHEET._replace(floors_s=floors)
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    kw = dict(tp=8, link=h200.interconnect, achieved=achieved)
    shape = BatchShape(1, 1000, (), 1)

    def gemms_s(dtype):
        step = StepModel(spec, rates, dtype, KvFormat("bf16"), **kw).step(shape)
        return step.terms_s["weights_s"] + step.terms_s["matmul_s"]

    fp8 = 61 * 3 + 3 * 2 + 58 * 2
    plain = 1 + 58 + 61 * 2
    assert gemms_s("fp8") == pytest.approx(fp8 * 100e-6 + plain * 40e-6 + 58 * 200e-6)
    assert gemms_s("bf16") == pytest.approx((fp8 + plain) * 40e-6 + 58 * 90e-6)
    assert gemms_s("mxfp4") == pytest.approx((fp8 + plain) * 40e-6 + 58 * 90e-6)
    # per-tensor fp8 runs the tables' "fp8" rows (key int8): none here, the family's floor
    assert gemms_s("fp8-tensor") == gemms_s("bf16")


def test_the_b200_sglang_tables_floor_deepseek_r1_by_its_format():
    """On the shipped SGLang B200 table a block-fp8 DeepSeek-R1 step of one token pays more for
    its GEMMs than the same model in bf16 would at the same floors (4.2 vs 1.8 us per launch)."""
    spec = load_model("deepseek-r1")
    b200 = load_profile("b200")
    achieved = tables_for(b200, "sglang").achieved
    assert achieved.floors_s["gemm_fp8"] > achieved.floors_s["gemm"]
    rates = Rates(b200.memory_bandwidth_bytes_per_s, 2.25e15)
    kw = dict(tp=8, link=b200.interconnect, achieved=achieved)
    fp8 = StepModel(spec, rates, "fp8", KvFormat("bf16"), **kw)
    family = StepModel(
        spec, rates, "fp8", KvFormat("bf16"),
        **{**kw, "achieved": achieved._replace(floors_s={
            k: v for k, v in achieved.floors_s.items()
            if "_" not in k or k in ("gemm_mla_bmm", "attention_mla")})},
    )  # fmt: skip
    assert fp8.floors.dense_s - family.floors.dense_s == pytest.approx(
        305 * (achieved.floors_s["gemm_fp8"] - achieved.floors_s["gemm"])
    )
    # the table timed DeepSeek-R1's own fused MoE (7,168 x 2,048, 256 experts, top 8) at TP 8
    own = achieved.floors_s["moe_fp8_7168x2048_256x8_tp8_ep1"]
    assert own > achieved.floors_s["moe_fp8"]
    assert fp8.floors.experts_s == pytest.approx(58 * own)


def test_a_moe_floor_is_the_models_own_shape_where_the_tables_timed_it():
    """The fused MoE's floor is the one of the model's own shape, format and split where the
    floors hold it (key: hidden x width, experts x top-k, TP and EP of the experts), else the
    format's smallest, else the family's."""
    spec = load_model("deepseek-r1")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    floors = {"gemm": 1e-6, "moe": 10e-6, "moe_fp8": 20e-6, "attention": 1e-6,
              "moe_fp8_7168x2048_256x8_tp8_ep1": 50e-6,
              "moe_fp8_7168x2048_256x8_tp1_ep8": 70e-6}  # fmt: skip
    achieved = ACHIEVED_DATASHEET._replace(floors_s=floors)

    def experts_s(dtype, **kw):
        kw = {"tp": 8, "link": h200.interconnect, "achieved": achieved, **kw}
        return StepModel(spec, rates, dtype, KvFormat("bf16"), **kw).floors.experts_s

    assert experts_s("fp8") == pytest.approx(58 * 50e-6)
    assert experts_s("fp8", moe_ranks=8, ep=8) == pytest.approx(58 * 70e-6)
    assert experts_s("fp8", tp=4, moe_ranks=4) == pytest.approx(58 * 20e-6)  # no tp4 row
    assert experts_s("bf16") == pytest.approx(58 * 10e-6)


def test_prefill_chunk_attention_is_the_causal_triangle(llama8):
    """A chunk of n tokens after p cached ones: each layer 2 x 32 heads x (128 + 128) FLOPs per
    attended key, keys = (p+n)(p+n+1)/2 - p(p+1)/2; compute-bound at this size. The GEMMs run
    on every token but the head, which runs on the one sampled position (vLLM's logits_indices)."""
    n, p = 4096, 4096
    keys = (p + n) * (p + n + 1) // 2 - p * (p + 1) // 2
    flops = 32 * 2 * 32 * 256 * keys
    step = model(llama8).step(BatchShape(0, 0, ((n, p),), 1))
    assert step.terms_s["attention_s"] == pytest.approx(flops / (PEAK * ATTN_C), rel=1e-9)
    head = 128256 * 4096
    gemm = 2 * (llama8.params_total - 2 * head) * n + 2 * head * 1
    assert step.terms_s["matmul_s"] == pytest.approx(gemm / (PEAK * DENSE_C), rel=1e-9)


def test_steps_beyond_the_cuda_graph_sizes_pay_eager_dispatch(llama8):
    m = model(llama8)
    graphed = m.step(BatchShape(512, 512 * 100, (), 512))
    eager = m.step(BatchShape(513, 513 * 100, (), 513))
    assert graphed.terms_s["launch_s"] == pytest.approx(32 * HOST_OVERHEADS.per_layer_s)
    assert eager.terms_s["launch_s"] == pytest.approx(32 * HOST_OVERHEADS.eager_per_layer_s)


def test_async_scheduling_overlaps_the_host(llama8):
    shape = BatchShape(8, 8000, (), 8)
    sync, overlapped = model(llama8).step(shape), model(llama8, async_scheduling=True).step(shape)
    gpu = sync.total_s - sync.terms_s["host_s"]
    assert overlapped.total_s == pytest.approx(max(gpu, sync.terms_s["host_s"]))


def test_tensor_parallel_all_reduce_by_hand(llama8):
    """2 all-reduces per layer of T x 4096 bf16 activations and the embedding's one, each the
    engine's all-reduce as its table times 512 KB at 4 GPUs (the H100 SXM vLLM 0.14.0 row:
    11.36 us), not the 2-point ring of the smallest call and the largest message's bus rate; then the head's logits all-gathered: each rank receives the
    other 3/4 of sampled x 128,256 bf16 logits, plus one measured NCCL all-gather call."""
    link = load_profile("h100").interconnect
    m = model(llama8, tp=4, link=link)
    tokens, sampled = 64, 48
    rate = link.one_way_bytes_per_s * ACHIEVED_DATASHEET.link
    one = ACHIEVED_DATASHEET.allreduce_s(tokens * 4096 * 2, 4)
    assert one == 1.1359e-05
    ring = 2 * 3 / 4 * tokens * 4096 * 2 / rate + ACHIEVED_DATASHEET.allreduce_call_s
    assert one > 1.2 * ring
    gather = sampled * 128_256 * 2 * 3 / 4 / rate + ACHIEVED_DATASHEET.allgather_call_s
    step = m.step(BatchShape(tokens, tokens * 500, (), sampled))
    assert step.terms_s["comm_s"] == pytest.approx((2 * 32 + 1) * one + gather, rel=1e-9)
    # the gather is a cost of the step's time, not only of its terms
    assert step.total_s == pytest.approx(sum(step.terms_s.values()), rel=1e-9)


def test_the_logits_gather_is_nccls_call_at_one_sequence():
    """At one sampled sequence the gather is latency-bound: within 5% of the measured NCCL
    all-gather call (B200: 16.1 us at 8 GPUs in aiconfigurator's nccl table, the custom
    all-reduce 7 us); nothing at TP 1; under SGLang's DP attention not priced."""
    deepseek = load_model("deepseek-r1")
    b200 = load_profile("b200")
    m = sglang_model(deepseek, b200, tp=8)
    call = m.achieved.allgather_call_s
    assert call is not None and call > m.achieved.allreduce_call_s
    assert m.logits_gather_s(1) == pytest.approx(call, rel=0.05)
    assert m.logits_gather_s(16) > m.logits_gather_s(1)
    assert sglang_model(deepseek, b200, tp=1).logits_gather_s(1) == 0.0


def test_moe_reads_the_experts_a_batch_touches():
    """Mixtral-8x7B: 8 experts, top 2; T tokens touch 8 (1 - (1 - 2/8)^T) experts a layer."""
    spec = load_model("mixtral-8x7b")
    m = model(spec)
    per_expert = spec.moe.params_per_expert * spec.moe.num_layers * 2
    _, experts_1 = m.weights_bytes(1)
    _, experts_4 = m.weights_bytes(4)
    assert experts_1 == pytest.approx(2 * per_expert)
    assert experts_4 == pytest.approx(8 * (1 - 0.75**4) * per_expert)
    # one token: 2/8 of a token per expert, the curve's first bucket (below one token)
    slowdown = ACHIEVED_DATASHEET.experts_curve["bf16"][0][1]
    dense_bytes, _ = m.weights_bytes(1)
    step = m.step(BatchShape(1, 100, (), 1))
    assert step.terms_s["weights_s"] == pytest.approx(
        dense_bytes / (BW * DENSE_M) + experts_1 / BW * slowdown, rel=1e-9
    )


def test_the_expert_kernels_follow_the_tokens_per_expert_curve():
    """A fused-MoE step is the datasheet roofline times the curve's slowdown at the tokens each
    expert gets: Mixtral (top 2 of 8) at 2,048 tokens gives 512 an expert, compute-bound."""
    spec = load_model("mixtral-8x7b")
    m = model(spec)
    curve = ACHIEVED_DATASHEET.experts_curve["bf16"]
    assert curve_value(curve, 128) == pytest.approx(dict(curve)[128])
    assert curve_value(curve, 0.01) == curve[0][1] and curve_value(curve, 1e9) == curve[-1][1]
    between = curve_value(curve, 96)  # log-log between the 64 and 128 buckets
    assert dict(curve)[64] < between < dict(curve)[128]
    flops = 2 * (spec.moe.params_per_expert * spec.moe.num_layers) * 2 * 2048
    _, experts = m.weights_bytes(2048)
    assert flops / PEAK > experts / BW  # compute-bound: the peak side sets the ideal
    dense_only = model(spec)
    dense_only.expert_curve = None  # the same step without the experts ...
    dense_only.expert_flop_per_token = 0.0
    dense_only._weights = {2048: (m.weights_bytes(2048)[0], 0.0)}
    experts_s = sum(m.gemm_s(2048, 1)) - sum(dense_only.gemm_s(2048, 1))
    assert experts_s == pytest.approx(flops / PEAK * dict(curve)[512], rel=1e-9)


def test_the_head_runs_on_sampled_positions_only(llama8):
    """A 2,048-token prefill chunk samples one token: its head FLOPs are one token's."""
    m = model(llama8)
    head = 2 * llama8.head_params
    assert llama8.head_params == 128256 * 4096
    _, every = m.gemm_s(2048, 2048)
    _, one = m.gemm_s(2048, 1)
    assert every - one == pytest.approx(head * 2047 / (PEAK * DENSE_C), rel=1e-9)


def test_pipeline_takes_m_plus_p_minus_one_stage_times(llama8):
    link = load_profile("h100").interconnect
    flat, piped = model(llama8), model(llama8, pp=2, link=link)
    shape = BatchShape(64, 64 * 200, (), 64)
    one = flat.step(shape)
    two = piped.step(shape)
    # each of 2 micro-batches streams a stage's half of the weights: 3 stage times of W/2 (the
    # embedding lookup reads 32 rows per micro-batch instead of 64: a 1e-5 difference)
    assert two.terms_s["weights_s"] == pytest.approx(3 * one.terms_s["weights_s"] / 2, rel=1e-4)


def test_a_run_of_decode_steps_equals_the_steps_one_by_one(llama8):
    for spec_name in ("llama-3.1-8b", "gemma-3-27b", "deepseek-v2-lite"):
        spec = load_model(spec_name)
        m = model(spec)
        sums = np.array([1000.0, 5000.0, 20000.0, 90000.0])
        times, terms = m.decode_span_s(10, sums)
        singles = [m.step(BatchShape(10, s, (), 10)) for s in sums]
        assert times == pytest.approx([s.total_s for s in singles], rel=1e-9)
        assert terms(4).total_s == pytest.approx(sum(s.total_s for s in singles), rel=1e-9)
        assert terms(4).terms_s["kv_read_s"] + terms(4).terms_s["attention_s"] == pytest.approx(
            sum(s.terms_s["kv_read_s"] + s.terms_s["attention_s"] for s in singles), rel=1e-9
        )


def test_a_spans_attention_is_the_single_steps_exactly():
    """One body prices decode attention for a step and for a span: the same floats, for full,
    windowed, recurrent-state and DSA models."""
    h200 = load_profile("h200-sxm")
    for spec_name in ("llama-3.1-8b", "gemma-3-27b", "qwen3-next-80b-a3b", "deepseek-v3.2"):
        spec = load_model(spec_name)
        m = model(spec, dsa_delta_us=dsa_tables_for(h200))
        for n in (1, 7, 300):
            sums = np.array([n * 1.0, n * 999.0, n * 4096.0 + 3, n * 131072.0])
            span, _ = m._decode_attention(n, sums, np.maximum, np.minimum)
            singles = [m.decode_attention_s(n, float(s))[0] for s in sums]
            assert span.tolist() == singles


def test_measured_profiles_take_fractions_relative_to_dense():
    measured = measured_achieved()
    assert measured.dense["bf16"] == (1.0, 1.0)
    compute, memory = ACHIEVED_DATASHEET.experts["bf16"]
    assert measured.experts["bf16"] == pytest.approx((compute / DENSE_C, memory / DENSE_M))
    assert all(0 < v <= 1 for pair in measured.dense.values() for v in pair)
    assert not math.isnan(measured.attention[0])
    scale = (DENSE_C + DENSE_M) / 2
    for (x, y), (x2, y2) in zip(
        ACHIEVED_DATASHEET.experts_curve["fp8"], measured.experts_curve["fp8"], strict=True
    ):
        assert x == x2 and y2 == pytest.approx(max(1.0, y * scale))


def test_dsa_layers_add_vllms_module_difference_from_the_gpus_tables():
    """DeepSeek-V3.2 at TP 8 on an H200 (16 heads a rank): a decode step of 16 sequences at 512
    tokens held pays, per DSA layer, the table's DSA-minus-MLA cell at (16 heads, bf16 KV,
    batch 16, length 512) on top of the dense MLA roofline; without tables it pays none."""
    spec = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    grids = dsa_tables_for(h200)
    assert grids is not None and dsa_tables_for(load_profile("h100")) is not grids
    assert dsa_tables_for(load_profile("b200")) not in (None, grids)  # its own
    assert dsa_tables_for(load_profile("mi300x")) is None  # no tables of its own
    link = h200.interconnect
    fmt = KvFormat("bf16")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    bare = ACHIEVED_DATASHEET._replace(floors_s={})  # the module's delta, not the floors
    plain = StepModel(spec, rates, "fp8", fmt, tp=8, link=link, achieved=bare)
    dsa = StepModel(
        spec, rates, "fp8", fmt, tp=8, link=link, achieved=bare, dsa_delta_us=dsa_tables_for(h200)
    )
    assert plain.dsa is None and dsa.dsa.heads == 16 and dsa.dsa.layers == spec.num_layers
    cell_us = grids.delta_us[("decode", 16, "bfloat16")][grids.batches["decode"].index(16)][
        grids.lengths["decode"].index(512)
    ]
    shape = BatchShape(16, 16 * 512, (), 16)
    one, two = plain.step(shape), dsa.step(shape)
    added = (two.terms_s["kv_read_s"] + two.terms_s["attention_s"]) - (
        one.terms_s["kv_read_s"] + one.terms_s["attention_s"]
    )
    # the module's cell times the indexer's keys (128 bf16 values a token a layer), which the
    # dense-MLA base then no longer reads (it did, twice with the cell)
    indexer_read_s = (
        16
        * 512
        * 128
        * 2
        * spec.num_layers
        / (h200.memory_bandwidth_bytes_per_s * ACHIEVED_DATASHEET.mla[1])
    )
    assert added == pytest.approx(spec.num_layers * cell_us * 1e-6 - indexer_read_s, rel=1e-9)
    assert cell_us > 0  # short contexts: the indexer and top-k cost more than dense MLA saves
    # a run of decode steps equals the steps one by one with the DSA term too
    sums = np.array([16 * 300.0, 16 * 5000.0, 16 * 40000.0])
    times, _ = dsa.decode_span_s(16, sums)
    assert times == pytest.approx([dsa.step(BatchShape(16, s, (), 16)).total_s for s in sums])


def test_dsa_saves_at_long_contexts_and_never_goes_negative():
    """At 131,072 tokens held the sparse module attends 2,048 keys where MLA reads them all:
    the table's difference is negative, and the step's attention stays at or above zero."""
    spec = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    m = StepModel(spec, rates, "fp8", KvFormat("bf16"), tp=8, link=h200.interconnect,
                  dsa_delta_us=dsa_tables_for(h200))  # fmt: skip
    assert m.dsa.delta_s("decode", 256, 131072) < 0
    step = m.step(BatchShape(256, 256 * 131072, (), 256))
    assert step.terms_s["kv_read_s"] >= 0 and step.terms_s["attention_s"] >= 0


def test_dsa_batches_past_the_tables_grow_by_the_last_sequences_cost():
    """Past the tables' largest batch (1,024 decodes) each further sequence adds what one added
    between 512 and 1,024 (H200, 16 heads, bf16, 512 tokens held: 352.9 and 652.9 us a layer,
    so 2,048 decodes cost 652.9 + 1,024 x 300 / 512 = 1,252.9 us a layer); it was held flat, which
    priced 2,048 decodes as 1,024. Within the table nothing moves."""
    spec = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    m = StepModel(spec, rates, "fp8", KvFormat("bf16"), tp=8, link=h200.interconnect,
                  dsa_delta_us=dsa_tables_for(h200))  # fmt: skip
    layers = spec.num_layers
    assert m.dsa.delta_s("decode", 1024, 512) == pytest.approx(layers * 652.9e-6)
    assert m.dsa.delta_s("decode", 512, 512) == pytest.approx(layers * 352.9e-6)
    assert m.dsa.delta_s("decode", 2048, 512) == pytest.approx(layers * 1252.9e-6)
    # prefill: 256 chunks of 16 tokens 2,869.3 us a layer, 128 of them 1,623.0
    assert m.dsa.delta_s("prefill", 512, 16) == pytest.approx(layers * (2869.3 + 2 * 1246.3) * 1e-6)
    # the run of decode steps still equals the steps one by one past the table
    sums = np.array([2048 * 300.0, 2048 * 5000.0])
    times, _ = m.decode_span_s(2048, sums)
    assert times == pytest.approx([m.step(BatchShape(2048, s, (), 2048)).total_s for s in sums])


def test_dsa_base_reads_the_latent_and_the_module_the_indexer_keys():
    """With DSA tables the dense-MLA base reads each token's MLA latent only (576 values a layer,
    bf16: 1,152 bytes); the indexer's keys (128 more) are the module's, whose table already times
    them, and scores them. Without tables the base reads both, as a decode reads them: the
    latents of the index_topk tokens picked (1,152 bytes each, absorbed MLA FLOPs) and every
    token's indexer key (256 bytes, its scores), as the capacity formula stores them.
    At 256 sequences of 4,096 tokens held that double read was 6 ms of a 70 ms H200 step."""
    spec = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    link, fmt = h200.interconnect, KvFormat("bf16")
    plain = StepModel(spec, rates, "fp8", fmt, tp=8, link=link)
    dsa = StepModel(spec, rates, "fp8", fmt, tp=8, link=link, dsa_delta_us=dsa_tables_for(h200))
    layers = spec.num_layers
    assert [(g.kv_bytes_per_token, g.index_bytes_per_token) for g in plain.groups] == [
        (layers * 576 * 2, layers * 128 * 2)
    ]
    assert [(g.kv_bytes_per_token, g.attended_topk) for g in dsa.groups] == [(layers * 576 * 2, 0)]
    # the indexer's scores (64 heads x 128 per key, replicated, split as the floor splits every
    # FLOP over the 8 ranks) are the module's too; without tables the base prices them per key
    assert [g.decode_flop_per_key for g in dsa.groups] == [
        g.decode_flop_per_key for g in plain.groups
    ]
    assert [g.index_flop_per_key for g in plain.groups] == [layers * 2 * 64 * 128 / 8]
    # at 4,096 tokens held the base without tables reads 2,048 latents and 4,096 indexer keys
    _, memory = plain._decode_attention(256, 256 * 4096, max, min)
    read = memory * plain.mla_rates.bandwidth_bytes_per_s
    assert read == pytest.approx(256 * layers * 2 * (2048 * 576 + 4096 * 128), rel=1e-12)


def test_the_layer_groups_are_computed_once_per_model(llama8, monkeypatch):
    """`capacity --gpu all` builds a step model for every layout of every GPU kind: the
    coefficients summed from the operator list are kept per model, formats and TP, not laid out
    again per GPU."""
    import kvplan.formulas.batch_step as batch_step

    calls = []
    real = batch_step._sum_ops
    monkeypatch.setattr(batch_step, "_COEFFICIENTS", {})
    monkeypatch.setattr(batch_step, "_sum_ops", lambda *args: calls.append(args[3]) or real(*args))
    first = model(llama8).groups
    for bandwidth in (1e12, 2e12, 8e12):  # other GPUs, the same model
        assert StepModel(llama8, Rates(bandwidth, PEAK), "bf16", KvFormat("bf16")).groups == first
    model(llama8, tp=2)
    model(llama8, tp=2)
    assert calls == [1, 2]


@pytest.mark.parametrize(
    "dtype, key",
    [("int4-g32-sym", "4bit"), ("int4-g128", "4bit"), ("int4", "4bit"), ("mxfp4", "4bit"),
     ("fp8", "fp8"), ("fp8-tensor", "int8"), ("nvfp4", "bf16")],
)  # fmt: skip
def test_quantized_experts_run_on_their_formats_kernels(dtype, key):
    """A resolved weights dtype with a group size (Kimi-K2.5's int4-g32-sym experts) times its
    experts on the tables' curve of its kernel family, not on the bf16 one."""
    spec = load_model("qwen3-30b-a3b")
    m = StepModel(spec, Rates(BW, PEAK), dtype, KvFormat("bf16"))
    assert m.expert_curve == ACHIEVED_DATASHEET.experts_curve.get(key)  # int8: a pair, no curve


def test_moe_kernel_s_interpolates_a_shapes_measured_curve():
    """Linear between the measured token counts, the first point's time below it, and past the
    last point that point's time per token (compute-bound: linear in tokens)."""
    from kvplan.formulas.batch_step import moe_kernel_s

    curve = ((1, 30e-6), (16, 150e-6), (64, 300e-6))
    assert moe_kernel_s(curve, 1) == pytest.approx(30e-6)
    assert moe_kernel_s(curve, 0.5) == pytest.approx(30e-6)
    assert moe_kernel_s(curve, 8.5) == pytest.approx(90e-6)  # halfway from 1 to 16
    assert moe_kernel_s(curve, 40) == pytest.approx(225e-6)
    assert moe_kernel_s(curve, 128) == pytest.approx(600e-6)


def test_a_models_own_moe_shape_curve_prices_its_experts():
    """DeepSeek-R1 (block fp8) at TP 8: where the tables timed its fused MoE (7168 x 2048,
    256 experts, top 8, fp8, TP 8) the experts' term is its 58 MoE layers x the curve at the
    step's tokens, instead of the roofline, median curve and floor; a curve of another shape,
    format or split is not read."""
    spec = load_model("deepseek-r1")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    fmt = KvFormat("bf16")
    key = "moe_fp8_7168x2048_256x8_tp8_ep1"
    kw = dict(tp=8, link=h200.interconnect)
    timed = StepModel(
        spec, rates, "fp8", fmt, moe_curves_s={key: ((1, 40e-6), (16, 100e-6), (32, 160e-6))}, **kw
    )
    free = StepModel(spec, rates, "fp8", fmt, moe_curves_s={key: ((1, 0.0), (32, 0.0))}, **kw)
    plain = StepModel(spec, rates, "fp8", fmt, **kw)
    other = {"moe_fp8_7168x2048_256x8_tp4_ep1": timed.moe_curve,
             "moe_bf16_7168x2048_256x8_tp8_ep1": timed.moe_curve}  # fmt: skip
    elsewhere = StepModel(spec, rates, "fp8", fmt, moe_curves_s=other, **kw)
    for tokens, per_layer_s in ((1, 40e-6), (8, 40e-6 + 60e-6 * 7 / 15), (24, 130e-6)):
        experts_s = sum(timed.gemm_s(tokens)) - sum(free.gemm_s(tokens))
        assert experts_s == pytest.approx(58 * per_layer_s, rel=1e-9)
        assert elsewhere.gemm_s(tokens) == plain.gemm_s(tokens)
        assert sum(plain.gemm_s(tokens)) > sum(free.gemm_s(tokens))  # its experts priced too


def test_an_mla_layer_pays_the_mla_kernels_floors():
    """DeepSeek-R1 at TP 8, one decode, floors above every roofline: its 61 MLA layers pay the
    MLA decode kernel's floor (`attention_mla`) instead of the GQA kernel's, and their 2 x 61
    absorbed BMMs the BMMs' floor (`gemm_mla_bmm`) instead of the GEMM family's; a table
    without those keys charges the family floors as before."""
    spec = load_model("deepseek-r1")
    h200 = load_profile("h200")
    rates = Rates(h200.memory_bandwidth_bytes_per_s, 989.4e12)
    base = {"gemm": 40e-6, "moe": 90e-6, "attention": 30e-6}
    mla = {**base, "attention_mla": 50e-6, "gemm_mla_bmm": 45e-6}
    kw = dict(tp=8, link=h200.interconnect)
    shape = BatchShape(1, 1000, (), 1)
    steps = [
        StepModel(
            spec,
            rates,
            "fp8",
            KvFormat("bf16"),
            achieved=ACHIEVED_DATASHEET._replace(floors_s=floors),
            **kw,
        ).step(shape)
        for floors in (base, mla)
    ]
    old, new = steps
    gemms = 61 * 5 + 3 * 2 + 58 * (1 + 2) + 1
    assert new.terms_s["weights_s"] + new.terms_s["matmul_s"] == pytest.approx(
        (gemms - 122) * 40e-6 + 122 * 45e-6 + 58 * 90e-6, rel=1e-9
    )
    assert new.terms_s["kv_read_s"] + new.terms_s["attention_s"] == pytest.approx(
        61 * 50e-6, rel=1e-9
    )
    assert old.terms_s["kv_read_s"] + old.terms_s["attention_s"] == pytest.approx(
        61 * 30e-6, rel=1e-9
    )


@pytest.mark.parametrize(
    "name, small, recurrent",
    [
        # 32 GQA layers: 2 norms + rotary + KV write + SiLU-and-mul each; embedding, final norm
        ("llama-3.1-8b", 2 + 32 * (2 + 2 + 1), 0),
        # 61 MLA layers (q_a and kv_a norms, rotary, KV write), 3 dense MLPs, 58 MoE layers with a
        # shared expert (its activation and the shared + routed add)
        ("deepseek-v3", 2 + 61 * (2 + 4) + 3 + 58 * 2, 0),
        # 48 GQA layers, every one MoE without a shared expert: the fused MoE times the rest
        ("qwen3-30b-a3b", 2 + 48 * (2 + 2), 0),
        # 12 full-attention and 36 Gated DeltaNet layers (conv update, gated norm), all MoE with a
        # shared expert; the 36 state updates counted apart
        ("qwen3-next-80b-a3b", 2 + 48 * 2 + 12 * 2 + 36 * 2 + 48 * 2, 36),
    ],
)
def test_small_launches_follow_the_layers_anatomy(name, small, recurrent):
    spec = load_model(name)
    assert small_launches(spec) == small
    assert recurrent_layers(spec) == recurrent


def test_the_small_launches_floor_is_their_count_times_the_tables_kernel():
    """_Floors.small_s: the small launches at `elementwise`, the state updates at
    `recurrent` (else `elementwise`); None where the tables time no small kernel."""
    spec = load_model("qwen3-next-80b-a3b")
    shape = _shape(spec)
    both = _Floors.of(shape, {"elementwise": 2e-6, "recurrent": 5e-6})
    assert both.small_s == pytest.approx(290 * 2e-6 + 36 * 5e-6)
    assert _Floors.of(shape, {"elementwise": 2e-6}).small_s == pytest.approx(326 * 2e-6)
    assert _Floors.of(shape, {"gemm": 2e-6}).small_s is None
    assert _Floors.of(shape, {}).small_s is None


def test_the_launch_term_is_at_least_the_small_kernels_floor():
    """Under a CUDA graph the launch term is the layers' launches at the per-launch cost or,
    where it is more, the small launches at their floor; eagerly, the eager cost alone. At the
    shipped SGLang B200 floors DeepSeek-R1's small kernels (487 x 1.68 us) stay under its 1,379
    launches at 3.2 us (3 dense MLA layers of 15 kernels, 58 MoE ones of 23: layer_launches)."""
    spec = load_model("deepseek-r1")
    b200 = load_profile("b200")
    achieved = tables_for(b200, "sglang").achieved
    rates = Rates(b200.memory_bandwidth_bytes_per_s, 2.25e15)
    kw = dict(tp=8, link=b200.interconnect)
    shape = BatchShape(1, 1000, (), 1)
    shipped = StepModel(spec, rates, "fp8", KvFormat("bf16"), achieved=achieved, **kw)
    assert shipped.floors.small_s == pytest.approx(487 * achieved.floors_s["elementwise"])
    launches = 3 * 15 + 58 * 23
    constant = launches * HOST_OVERHEADS.per_layer_s / 10
    assert shipped.floors.small_s < constant
    assert shipped.step(shape).terms_s["launch_s"] == pytest.approx(constant)
    slow = achieved._replace(floors_s={**achieved.floors_s, "elementwise": 10e-6})
    floored = StepModel(spec, rates, "fp8", KvFormat("bf16"), achieved=slow, **kw)
    assert floored.step(shape).terms_s["launch_s"] == pytest.approx(487 * 10e-6)
    eager = floored.without_graphs().step(shape).terms_s["launch_s"]
    # eagerly every kernel's launch is charged at its measured host cost, the GEMMs' too, and
    # every layer the reference layer's remainder (0.8 ms less its 10 launches' cost)
    h = HOST_OVERHEADS
    rest = h.eager_per_layer_s - 10 * h.eager_per_launch_s
    assert eager == pytest.approx(spec.num_layers * rest + launches * h.eager_per_launch_s)


def test_layer_launches_by_family_counted_by_hand():
    """The kernels a layer launches (layer_launches), each family counted from its model code:
    a dense GQA layer 10 (qkv, o, gate_up, down; 2 residual norms, rotary, cache write,
    SiLU-and-mul; attention); MLA's attention 5 GEMMs and 4 small kernels; a MoE MLP the router
    and the fused MoE's 6 kernels (top-k, align, 2 grouped GEMMs, activation, sum), a shared
    expert 2 GEMMs and 2 small kernels more; a Gated DeltaNet layer in and out, conv update,
    gated norm and the state update."""
    from kvplan.formulas.batch_step import layer_launches

    cases = {
        "llama-3.1-8b": 32 * 10,  # dense GQA
        "qwen3-30b-a3b": 48 * (2 + 2 + 2 + 1 + 1 + 6),  # GQA, MoE without a shared expert
        # MLA: 3 dense layers, 58 MoE with a shared expert
        "deepseek-r1": 3 * (5 + 4 + 2 + 2 + 1 + 1) + 58 * (5 + 4 + 2 + 1 + 1 + 6 + 2 + 2),
        # hybrid: 36 Gated DeltaNet layers, 12 GQA, every MLP a MoE with a shared expert
        "qwen3-next-80b-a3b": 36 * (2 + 2 + 2 + 1) + 12 * (2 + 2 + 2 + 1) + 48 * (1 + 6 + 2 + 2),
    }
    for name, launches in cases.items():
        spec = load_model(name)
        assert layer_launches(spec) == launches, name


def _eager_launch_per_layer_s(name: str, tp: int = 1) -> float:
    spec = load_model(name)
    h100 = load_profile("h100")
    rates = Rates(h100.memory_bandwidth_bytes_per_s, 9.89e14)
    model = StepModel(spec, rates, "bf16", KvFormat("bf16"), tp=tp, link=h100.interconnect)
    launch_s = model.without_graphs().step(BatchShape(0, 0, ((4096, 0),), 1)).terms_s["launch_s"]
    return launch_s / spec.num_layers


def test_the_reference_layer_keeps_the_constants_and_others_scale():
    """A dense GQA Llama layer at TP 1 is the layer host_overheads.json's per-layer constants
    are read as: it pays them unchanged, at TP 1 and TP 2 (the collectives are comm_s's); a
    MoE layer launches more kernels and pays more."""
    from kvplan.formulas.batch_step import layer_launches

    llama = load_model("llama-3.1-8b")
    assert layer_launches(llama) == HOST_OVERHEADS.reference_layer_launches * llama.num_layers
    assert _eager_launch_per_layer_s("llama-3.1-8b") == pytest.approx(
        HOST_OVERHEADS.eager_per_layer_s
    )
    # a MoE layer's 4 more launches at the measured host cost of one (host_dispatch.json plus
    # the driver's enqueue), not a tenth of the per-layer constant each
    moe = _eager_launch_per_layer_s("qwen3-30b-a3b")
    assert HOST_OVERHEADS.eager_per_launch_s < HOST_OVERHEADS.eager_per_layer_s / 10
    assert moe == pytest.approx(
        HOST_OVERHEADS.eager_per_layer_s + 4 * HOST_OVERHEADS.eager_per_launch_s
    )
    assert _eager_launch_per_layer_s("llama-3.1-8b", tp=2) == pytest.approx(
        HOST_OVERHEADS.eager_per_layer_s
    )


def test_a_timed_fused_moe_holds_its_launches_under_graphs():
    """Where the tables time the model's own fused MoE (a CUDA-graph replay of its top-k,
    alignment, grouped GEMMs, activation and sum), a graphed step charges its 6 launches a layer
    no more; an eager step still dispatches them."""
    from kvplan.formulas.batch_step import _shape, moe_shape_key

    spec = load_model("qwen3-30b-a3b")  # 48 MoE layers
    h100 = load_profile("h100")
    rates = Rates(h100.memory_bandwidth_bytes_per_s, 9.89e14)
    kw = dict(tp=1, link=h100.interconnect)
    key = moe_shape_key("bf16", _shape(spec).moe_shape, 1, 1)
    plain = StepModel(spec, rates, "bf16", KvFormat("bf16"), **kw)
    timed = StepModel(
        spec, rates, "bf16", KvFormat("bf16"), moe_curves_s={key: ((1, 1e-4), (4096, 1e-2))}, **kw
    )
    assert plain.moe_curve is None and timed.moe_curve is not None
    shape = BatchShape(1, 1000, (), 1)
    per_launch = HOST_OVERHEADS.per_layer_s / 10
    launch = [m.step(shape).terms_s["launch_s"] for m in (plain, timed)]
    assert launch[0] == pytest.approx(48 * 14 * per_launch)
    assert launch[0] - launch[1] == pytest.approx(48 * 6 * per_launch)
    eager = [m.without_graphs().step(shape).terms_s["launch_s"] for m in (plain, timed)]
    assert eager[0] == pytest.approx(eager[1])
