"""One cost model: the operators `kvplan measure` validates are the ones `simulate` and `plan`
run on a measured profile (issue 27).

A step's operators are built once (formulas.step_time.batch_ops) from the anatomy and a batch
shape; `kvplan measure` prices the pure decode and prefill shapes with them, and the simulator's
StepModel prices every mixed step of a measured profile with the same list at the same rates.
The profile here is a real one, measured on the development machine
(tests/data/measured_cpu_profile.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.formulas.batch_step import GPU_TERMS, BatchShape
from kvplan.formulas.step_time import (
    OpKind,
    OpRates,
    batch_ops,
    decode_ops,
    measurable,
    op_rates_of,
    prefill_ops,
    step_time,
)
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate.setup import ServeOptions, step_model
from kvplan.simulate.workload import WorkloadSpec

from helpers import run_cli

PROFILE = Path(__file__).parent / "data" / "measured_cpu_profile.yaml"


@pytest.fixture(scope="module")
def measured():
    return load_profile(str(PROFILE))


def _truncate(spec, layers: int):
    return spec._replace(layers=spec.layers[:layers])


def _model(spec, gpu, tp: int = 1):
    notes: list = []
    model, _ = step_model(spec, gpu, ServeOptions(tp=tp), "auto", 512, notes)
    return model, [n.id for n in notes]


def test_simulate_prices_a_measured_profile_with_the_operators_measure_checks(measured):
    """The layers of a decode and a prefill, as StepModel prices them on the measured profile,
    take exactly the time `kvplan measure` predicts for those shapes from the same rates."""
    spec = _truncate(load_model("qwen2.5-3b"), 2)
    model, notes = _model(spec, measured)
    assert "sim-measured-ops" in notes and model.op_rates is not None
    rates = op_rates_of(measured, model.op_dtype)
    fmt = resolve_kv_format("auto", spec.dtype)
    gather = measured.measured.gather_kv
    for batch, context in ((1, 1024), (4, 16384), (16, 2048), (7, 333)):
        shape = BatchShape(batch, batch * context, (), batch)
        predicted = step_time(decode_ops(spec, batch, context, model.op_dtype, fmt, gather), rates)
        assert sum(model.forward_ops_s(shape, head=False)) == pytest.approx(
            predicted.total_s, rel=1e-12
        )
    for tokens in (128, 1000):
        shape = BatchShape(0, 0, ((tokens, 0),), 1)
        predicted = step_time(prefill_ops(spec, tokens, model.op_dtype, fmt), rates)
        assert sum(model.forward_ops_s(shape, head=False)) == pytest.approx(
            predicted.total_s, rel=1e-12
        )


def test_the_whole_step_adds_the_head_and_the_engine_terms(measured):
    """A simulated step = the measured layers + embedding and head at the same curves + the
    scheduler's host time (vLLM's, not measured); the datasheet path is not used."""
    spec = load_model("qwen2.5-3b")
    model, _ = _model(spec, measured)
    shape = BatchShape(8, 8 * 2048, ((256, 0),), 9)
    step = model.step(shape)
    layers = sum(model.forward_ops_s(shape, head=False))
    whole = sum(model.forward_ops_s(shape))
    head = batch_ops(
        spec._replace(layers=()),
        model.op_dtype,
        model.fmt,
        8,
        2048,
        ((256, 0),),
        num_sampled=9,
    )
    assert whole == pytest.approx(layers + step_time(head, model.op_rates).total_s, rel=1e-12)
    gpu_s = sum(step.terms_s[term] for term in GPU_TERMS)
    assert gpu_s == pytest.approx(whole + step.terms_s["sampler_s"], rel=1e-12)
    assert step.terms_s["comm_s"] == 0.0 and step.terms_s["host_s"] > 0
    combine = max if model.async_scheduling else (lambda a, b: a + b)
    assert step.total_s == combine(gpu_s, step.terms_s["host_s"])


def test_a_model_the_operators_cannot_lay_out_says_so(measured):
    """MoE layers are not what measure times: the fraction path runs, and its note says that
    the H100's ratios are used, unchecked on this device."""
    spec = load_model("qwen3-30b-a3b")
    assert not measurable(spec)
    model, notes = _model(spec, measured)
    assert model.op_rates is None
    assert "sim-achieved-measured" in notes and "sim-measured-ops" not in notes


def test_chunked_prefill_attention_adds_up_to_one_prefill():
    """Causal attention over a prompt cut in chunks does the same FLOPs as one prefill of the
    whole prompt; the GEMMs run over each chunk's tokens."""
    spec = _truncate(load_model("llama-3.1-8b"), 1)
    fmt = resolve_kv_format("auto", spec.dtype)

    def attention_flops(ops):
        return sum(op.flops for op in ops if op.kind is OpKind.PREFILL_ATTENTION)

    whole = batch_ops(spec, "bf16", fmt, prefill_chunks=((3000, 0),))
    first = batch_ops(spec, "bf16", fmt, prefill_chunks=((1000, 0),))
    rest = batch_ops(spec, "bf16", fmt, prefill_chunks=((2000, 1000),))
    assert attention_flops(first) + attention_flops(rest) == attention_flops(whole)
    # by hand: 32 query heads of 128 + 128, each query attending itself and what precedes it
    assert attention_flops(whole) == 2 * 32 * (128 + 128) * (3000 * 3001 // 2)
    # one step of both chunks of two prompts runs each layer's GEMMs once over 1,500 rows
    both = batch_ops(spec, "bf16", fmt, 4, 700, ((1000, 0), (496, 2000)))
    rows = {op.size for op in both if op.kind is OpKind.MATMUL}
    assert rows == {1500}
    assert sum(op.kind is OpKind.PREFILL_ATTENTION for op in both) == 2
    assert sum(op.kind is OpKind.DECODE_ATTENTION for op in both) == 1


def test_a_tensor_parallel_rank_holds_its_share():
    """At TP 4 a rank's GEMMs hold a quarter of the layer's matrices, its attention a quarter
    of the heads and of the KV; at TP 16 the 8 KV heads are replicated, one per rank."""
    spec = _truncate(load_model("llama-3.1-8b"), 1)
    fmt = resolve_kv_format("auto", spec.dtype)

    def totals(tp):
        ops = batch_ops(spec, "bf16", fmt, 2, 4096, tp=tp)
        weights = sum(op.weight_bytes for op in ops if op.kind is OpKind.MATMUL)
        kv = sum(op.kv_bytes for op in ops)
        flops = sum(op.flops for op in ops if op.kind is OpKind.DECODE_ATTENTION)
        return weights, kv, flops

    w1, kv1, f1 = totals(1)
    w4, kv4, f4 = totals(4)
    assert (w4 * 4, kv4 * 4, f4 * 4) == (w1, kv1, f1)
    _, kv16, _ = totals(16)
    assert kv16 == kv1 // 8  # one of 8 KV heads per rank


def test_flat_rates_price_the_operators_at_the_datasheet_roofline():
    """OpRates.flat is the textbook roofline per operator: a memory-bound decode of one layer
    takes its bytes over the bandwidth."""
    spec = _truncate(load_model("llama-3.1-8b"), 1)
    fmt = resolve_kv_format("auto", spec.dtype)
    ops = decode_ops(spec, 1, 1024, "bf16", fmt)
    rates = OpRates.flat(1e12, 1e15)
    t = step_time(ops, rates)
    assert t.bound == "memory"
    assert t.total_s == pytest.approx(sum(op.bytes for op in ops) / 1e12, rel=1e-9)


def test_simulate_cli_runs_on_the_measured_profile():
    """`kvplan simulate --gpu measured.yaml`: a run on the measured curves, said in a note."""
    code, out, err = run_cli(
        "simulate",
        "qwen2.5-3b",
        "--gpu",
        str(PROFILE),
        "--num-prompts",
        "8",
        "--input-len",
        "128",
        "--output-len",
        "8",
        "--format",
        "json",
    )
    assert code == 0, err
    result = json.loads(out)
    ids = {n["id"] for n in result["notes"]}
    assert "sim-measured-ops" in ids
    bench = result["runs"][0]["bench"]
    assert bench["completed"] == 8 and bench["output_throughput"] > 0


def test_python_twin_matches_the_step_model(measured):
    """A single request alone: its TTFT is one prefill step (the whole prompt, the head on its
    last token) plus the API server's costs; its TPOT is the decode steps' mean."""
    spec = load_model("qwen2.5-3b")
    request = SimulateRequest(workload=WorkloadSpec(num_prompts=1, input_len=64, output_len=4))
    result = simulate(spec, measured, request)
    run = result.runs[0]
    model, _ = _model(spec, measured)
    prefill = model.step(BatchShape(0, 0, ((64, 0),), 1)).total_s
    assert run.bench.mean_ttft_ms / 1e3 >= prefill
    decode = model.step(BatchShape(1, 65, (), 1)).total_s
    assert run.bench.mean_tpot_ms / 1e3 == pytest.approx(decode, rel=0.05)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_one_kv_vocabulary_per_engine_the_pool_and_the_step_read_alike(engine):
    """Every --kv-cache-dtype spelling an engine takes is read through one table: the bytes a
    token takes in the engine's pages are the bytes the step time reads (vLLM's per-token-head
    caches with their fp32 scales, nvfp4 with its fp8 scale per 16 values)."""
    from kvplan.engines import sglang, vllm
    from kvplan.simulate.setup import kv_format_name

    module = vllm if engine == "vllm" else sglang
    spec = load_model("llama-3.1-8b")
    attn = spec.layers[0].attention
    for spelling in module.KV_CACHE_FORMATS:
        if spelling == "fp8_ds_mla":  # MLA's own layout, refused for GQA layers
            continue
        step = resolve_kv_format(kv_format_name(engine, spelling), spec.dtype)
        if engine == "vllm":
            pool = vllm.attention_bytes_per_token(attn, spelling, spec.dtype, 1)
        else:
            pool = attn.kv_bytes_per_token(sglang.kv_format(spelling, spec.dtype))
        assert pool == attn.kv_bytes_per_token(step), spelling
    with pytest.raises(Exception, match="choose"):
        kv_format_name(engine, "fp9")


def test_nvfp4_and_per_token_head_caches_by_hand():
    """Llama-3.1-8B, 8 KV heads of 128: nvfp4 stores 64 packed bytes and 8 fp8 scales per head
    vector, K and V: 8 x 2 x 72 = 1,152 B per token per layer; the per-token-head caches 128
    bytes and one fp32 scale: 8 x 2 x 132 = 2,112 B."""
    from kvplan.engines import vllm

    attn = load_model("llama-3.1-8b").layers[0].attention
    assert vllm.attention_bytes_per_token(attn, "nvfp4", "bf16", 1) == 8 * 2 * (64 + 8)
    for spelling in vllm.PER_TOKEN_HEAD_KV:
        assert vllm.attention_bytes_per_token(attn, spelling, "bf16", 1) == 8 * 2 * 132
