"""One result type for the three step-time evaluators (issue 27): the datasheet floor
(decode_step, prefill_step and the steps built on floor_step), the per-operator model
(step_time, `kvplan measure`) and the engine step (StepModel: simulate, plan) each return a
`StepTime`, with its terms by name, and each total is what the evaluator's formula gives when
priced by hand from the step's operator list (formulas.step_time.batch_ops)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.formulas import batch_step, step_time
from kvplan.formulas.batch_step import ENGINE_TERMS, GPU_TERMS, BatchShape, StepModel
from kvplan.formulas.expert_parallel import dp_attention_decode_step, dp_attention_prefill_step
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.step_time import (
    FLOOR_TERMS,
    OPS_TERMS,
    Op,
    OpKind,
    OpRates,
    Rates,
    StepTime,
    batch_ops,
    curve_value,
    decode_ops,
    decode_step,
    op_rates_of,
    prefill_ops,
    prefill_step,
)
from kvplan.formulas.techniques import verify_step
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, step_model

PROFILE = Path(__file__).parent / "data" / "measured_cpu_profile.yaml"
MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite", "gemma-4-31b")


def _shapes(seed: int, count: int = 4):
    """(batch, context, tp, rates) drawn at random, the rates anywhere from a CPU's to past a
    B200's."""
    rng = random.Random(seed)
    for _ in range(count):
        rates = Rates(rng.uniform(5e10, 8e12), rng.uniform(1e12, 5e15))
        yield rng.randint(1, 512), rng.randint(1, 65_536), rng.choice((1, 2, 4)), rates


def _floor_by_hand(ops: list[Op], rates: Rates) -> tuple[float, float, float, float]:
    """(memory_s, compute_s, FLOPs, bytes) of the datasheet floor over the operators: every FLOP
    at the peak (a streaming operator's parameters too), the weights and the cache across
    memory once."""
    flops = sum(op.flops + op.elementwise_flops for op in ops)
    num_bytes = sum(op.weight_bytes + op.kv_bytes for op in ops)
    return num_bytes / rates.bandwidth_bytes_per_s, flops / rates.peak_flop_per_s, flops, num_bytes


def _check_floor(step: StepTime, ops: list[Op], rates: Rates, batch: int, context: int) -> None:
    memory_s, compute_s, flops, num_bytes = _floor_by_hand(ops, rates)
    assert type(step) is StepTime
    assert tuple(step.terms_s) == FLOOR_TERMS
    assert step.terms_s["memory_s"] == pytest.approx(memory_s, rel=1e-12)
    assert step.terms_s["compute_s"] == pytest.approx(compute_s, rel=1e-12)
    assert step.total_s == pytest.approx(max(memory_s, compute_s), rel=1e-12)
    assert step.counts() == pytest.approx((flops, num_bytes), rel=1e-12)
    assert step.intensity == pytest.approx(flops / num_bytes, rel=1e-12)
    assert (step.batch_size, step.context_len, step.ops) == (batch, context, ())
    if abs(memory_s - compute_s) > 1e-9 * memory_s:  # away from the ridge, the roof that binds
        assert step.bound == ("memory" if memory_s > compute_s else "compute")


@pytest.mark.parametrize("name", MODELS)
def test_the_floor_is_the_larger_roof_over_the_operator_list(name):
    spec = load_model(name)
    fmt = resolve_kv_format("auto", spec.dtype)
    for batch, context, tp, rates in _shapes(MODELS.index(name)):
        step = decode_step(spec, rates, batch, context, "bf16", fmt, tp)
        ops = batch_ops(
            spec, "bf16", fmt, batch, context, num_sampled=batch, tp=tp,
            even_split=True, whole_model=True,
        )  # fmt: skip
        _check_floor(step, ops, rates, batch, context)
        prefill = prefill_step(spec, rates, context, "bf16", fmt, tp)
        ops = batch_ops(
            spec, "bf16", fmt, prefill_chunks=((context, 0),), num_sampled=1, tp=tp,
            even_split=True, whole_model=True,
        )  # fmt: skip
        _check_floor(prefill, ops, rates, 1, context)


def test_the_steps_built_on_the_floor_are_floor_steps():
    """A speculative verification (its tokens' FLOPs and weights, each cache read once) and a
    DP-attention rank's decode and prefill are the same record, their total the larger roof."""
    spec = load_model("deepseek-v2-lite")
    fmt = resolve_kv_format("auto", spec.dtype)
    rates = Rates(3.35e12, 989.4e12)
    verify = verify_step(spec, rates, 8, 4096, "bf16", fmt, 4)
    ops = batch_ops(spec, "bf16", fmt, 32, 4096, num_sampled=32, even_split=True, whole_model=True)
    memory_s, compute_s, flops, num_bytes = _floor_by_hand(ops, rates)
    reread = 24 * kv_bytes_per_sequence(spec, 4096, fmt, 1)
    assert type(verify) is StepTime and tuple(verify.terms_s) == FLOOR_TERMS
    assert verify.counts() == pytest.approx((flops, num_bytes - reread), rel=1e-12)
    assert verify.total_s == pytest.approx(
        max((num_bytes - reread) / rates.bandwidth_bytes_per_s, compute_s), rel=1e-12
    )
    for step in (
        dp_attention_decode_step(spec, rates, 64, 2048, "bf16", fmt, 4),
        dp_attention_prefill_step(spec, rates, 2048, "bf16", fmt, 4),
    ):
        flops, num_bytes = step.counts()
        assert type(step) is StepTime and tuple(step.terms_s) == FLOOR_TERMS
        assert step.total_s == max(
            num_bytes / rates.bandwidth_bytes_per_s, flops / rates.peak_flop_per_s
        )
    assert dp_attention_decode_step(spec, rates, 64, 2048, "bf16", fmt, 4).batch_size == 16


def _op_by_hand(op: Op, rates: OpRates) -> tuple[float, float, float]:
    """(bytes / bandwidth, FLOPs / throughput at the operator's size, launches x cost)."""
    if op.kind is OpKind.MATMUL:
        bandwidth = curve_value(rates.matmul_bandwidth_bytes_per_s, op.width)
        curve = rates.matmul_flop_per_s
    else:
        bandwidth = rates.bandwidth_bytes_per_s
        curve = (
            rates.decode_attention_flop_per_s
            if op.kind is OpKind.DECODE_ATTENTION
            else rates.prefill_attention_flop_per_s
        )
    memory = op.bytes / bandwidth
    compute = op.flops / curve_value(curve, op.size) if op.flops else 0.0
    per_launch = rates.overhead_s + (rates.matmul_overhead_s if op.kind is OpKind.MATMUL else 0)
    return memory, compute, op.launches * per_launch


def _per_operator_by_hand(ops: list[Op], rates: OpRates) -> dict[str, float]:
    terms = dict.fromkeys(OPS_TERMS, 0.0)
    for op in ops:
        memory, compute, overhead = _op_by_hand(op, rates)
        terms["memory_s" if memory >= compute else "compute_s"] += max(memory, compute)
        terms["overhead_s"] += overhead
    return terms


def test_the_per_operator_time_is_the_sum_of_its_operators():
    """On a profile measured on a CPU (curves, launch costs) and on random flat datasheets."""
    spec = load_model("llama-3.1-8b")
    fmt = resolve_kv_format("auto", spec.dtype)
    measured = op_rates_of(load_profile(str(PROFILE)), "bf16")
    for batch, context, _, rates in _shapes(27):
        for op_rates in (measured, OpRates.flat(*rates)):
            for ops in (
                decode_ops(spec, batch, context, "bf16", fmt),
                decode_ops(spec, batch, context, "bf16", fmt, gather_kv=True),
                prefill_ops(spec, context % 4096 + 1, "bf16", fmt),
            ):
                step = step_time.step_time(ops, op_rates)
                terms = _per_operator_by_hand(ops, op_rates)
                assert type(step) is StepTime and tuple(step.terms_s) == OPS_TERMS
                assert step.terms_s == pytest.approx(terms, rel=1e-12)
                assert step.total_s == pytest.approx(sum(terms.values()), rel=1e-12)
                assert step.bound == max(terms, key=terms.__getitem__).removesuffix("_s")
                assert len(step.ops) == len(ops)
                assert [t.time_s for t in step.ops] == pytest.approx(
                    [_priced(op, op_rates) for op in ops],
                    rel=1e-12,
                )
                assert step.counts() == pytest.approx(
                    (sum(op.flops for op in ops), sum(op.bytes for op in ops)), rel=1e-12
                )
                assert (step.batch_size, step.context_len) == (None, None)


def _priced(op: Op, rates: OpRates) -> float:
    memory, compute, overhead = _op_by_hand(op, rates)
    return max(memory, compute) + overhead


@pytest.mark.parametrize("name", MODELS)
def test_the_engine_step_is_its_gpu_terms_and_the_host(name):
    """The engine step's terms are ENGINE_TERMS; its total the GPU terms plus the host's (or,
    scheduling asynchronously, the larger), whatever the shape; it counts no FLOPs."""
    spec = load_model(name)
    fmt = resolve_kv_format("auto", spec.dtype)
    rng = random.Random(len(name))
    for async_scheduling in (False, True):
        model = StepModel(
            spec, Rates(3.35e12, 989.4e12), "bf16", fmt, async_scheduling=async_scheduling
        )
        for _ in range(4):
            decodes, context = rng.randint(0, 256), rng.randint(1, 32_768)
            chunks = tuple((rng.randint(1, 2048), rng.randint(0, 8192)) for _ in range(2))
            shape = BatchShape(decodes, decodes * context, chunks, decodes + len(chunks))
            step = model.step(shape)
            assert type(step) is StepTime and tuple(step.terms_s) == ENGINE_TERMS
            gpu = sum(step.terms_s[term] for term in GPU_TERMS)
            host = step.terms_s["host_s"]
            assert step.total_s == pytest.approx(
                max(gpu, host) if async_scheduling else gpu + host, rel=1e-12
            )
            assert step.bound == max(step.terms_s, key=step.terms_s.__getitem__)[:-2]
            assert (step.flops, step.bytes, step.ops) == (None, None, ())
            with pytest.raises(ValueError, match="counts no FLOPs"):
                step.counts()


def test_the_engine_step_on_measured_rates_is_the_per_operator_sum():
    """On a measured profile the engine prices the whole forward's operator list (layers,
    embedding and head) at the measured curves: its GPU terms but the sampler's and the
    all-reduces' are the per-operator sum of that list, by hand; a decode span's terms are the
    sums of its steps'."""
    spec = load_model("qwen2.5-3b")
    spec = spec._replace(layers=spec.layers[:2])
    model, _ = step_model(spec, load_profile(str(PROFILE)), ServeOptions(), "auto", 512, [])
    rates = model.op_rates
    assert rates is not None and model.op_dtype is not None
    for batch, context, chunk in ((1, 1024, 0), (4, 3000, 256), (16, 512, 64)):
        chunks = ((chunk, 0),) if chunk else ()
        sampled = batch + len(chunks)
        step = model.step(BatchShape(batch, batch * context, chunks, sampled))
        ops = batch_ops(
            spec, model.op_dtype, model.fmt, batch, context, chunks, sampled,
            gather_kv=model.op_gather_kv,
        )  # fmt: skip
        forward = sum(step.terms_s[t] for t in GPU_TERMS if t not in ("sampler_s", "comm_s"))
        assert forward == pytest.approx(sum(_priced(op, rates) for op in ops), rel=1e-12)
    times, kept = model.decode_span_s(4, [4 * 1000.0, 4 * 1001.0, 4 * 1002.0])
    singles = [model.step(BatchShape(4, x, (), 4)) for x in (4000.0, 4004.0, 4008.0)]
    span = kept(3)
    assert type(span) is StepTime and tuple(span.terms_s) == ENGINE_TERMS
    assert span.total_s == pytest.approx(float(times.sum()), rel=1e-12)
    for term in ENGINE_TERMS:
        assert span.terms_s[term] == pytest.approx(sum(s.terms_s[term] for s in singles), rel=1e-12)


def test_one_type_and_no_other():
    """The records the three evaluators returned before (Step, OpsStepTime, BatchStepTime)
    are gone, with no alias left."""
    for module, old in ((step_time, "Step"), (step_time, "OpsStepTime")):
        assert not hasattr(module, old)
    assert not hasattr(batch_step, "BatchStepTime")
