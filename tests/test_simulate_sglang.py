"""The SGLang scheduler in the simulator: closed forms from the step-time model, SGLang's own
rules computed by hand (prefill batches run alone, the new_token_ratio admission, retraction),
and the scheduler's invariants as property tests."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_simulate_engine import MODEL, NO_FRONTEND, assert_blocks_cover, config, workloads

from kvplan.engines.context_limit import ContextLimit
from kvplan.formulas.batch_step import BatchShape
from kvplan.simulate import cluster, metrics
from kvplan.simulate.engine import Engine
from kvplan.simulate.sglang import SglangEngine, SglangPolicy
from kvplan.simulate.workload import RequestSpec

from helpers import REPO, run_cli, run_json

HOST_OVERHEADS_JSON = REPO / "kvplan/data/kernel_tables/host_overheads.json"


def serve(requests, cfg, observer=None, engine_class=SglangEngine, **kw):
    if engine_class is SglangEngine:
        engine = SglangEngine(cfg, MODEL, 0.0, observer=observer, policy=SglangPolicy(**kw))
    else:
        engine = Engine(cfg, MODEL, 0.0, observer=observer)
    run = cluster.run(
        requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(cfg.max_model_len)
    )
    return engine, run, metrics.bench_result(run, math.inf, 1.0, None)


def assert_itl_counts_every_gap_once(run, bench):
    """Mean ITL over all gaps = the time from first to last token, summed, over the gaps."""
    between = sum(r.last_client_s - r.first_client_s for r in run.finished)
    gaps = sum(r.outputs - 1 for r in run.finished)
    if gaps:
        assert bench.mean_itl_ms / 1e3 == pytest.approx(between / gaps, rel=1e-9)


class Steps:
    """Records (decodes, chunks) of every step."""

    def __init__(self):
        self.steps: list[tuple[int, list[tuple[int, int]]]] = []

    def __call__(self, engine, steps, num_decodes, chunks):
        for _ in range(steps):
            self.steps.append((num_decodes, [(r.rid, n) for r, n in chunks]))


def test_one_request_ttft_is_its_prefill_and_tpot_its_decode_step():
    _, _, bench = serve([RequestSpec(0, 0.0, 1000, 100)], config())
    prefill = MODEL.step(BatchShape(0, 0, ((1000, 0),), 1)).total_s
    assert bench.mean_ttft_ms / 1e3 == pytest.approx(prefill, rel=1e-9)
    decodes = [MODEL.step(BatchShape(1, 1000 + k, (), 1)).total_s for k in range(1, 100)]
    assert bench.mean_tpot_ms / 1e3 == pytest.approx(sum(decodes) / 99, rel=1e-9)
    assert bench.median_itl_ms / 1e3 == pytest.approx(sorted(decodes)[49], rel=1e-9)


def test_a_prefill_batch_runs_alone_and_the_decodes_wait_for_it():
    """r0 decodes; r1 (4,000 tokens) arrives mid-way. vLLM runs r1's prompt beside r0's decode;
    SGLang runs it alone, so r0's inter-token gap there is the whole prefill step."""
    prefill0 = MODEL.step(BatchShape(0, 0, ((16, 0),), 1)).total_s
    requests = [RequestSpec(0, 0.0, 16, 40), RequestSpec(1, prefill0 + 1e-3, 4000, 2)]
    seen = Steps()
    engine, run, bench = serve(requests, config(), seen)
    with_chunks = [(d, c) for d, c in seen.steps if c]
    assert with_chunks == [(0, [(0, 16)]), (0, [(1, 4000)])]
    r1_prefill = MODEL.step(BatchShape(0, 0, ((4000, 0),), 1)).total_s
    # r0's gap across r1's prefill is that step plus the decode after it, and the bench's ITL
    # counts every gap once (the step-to-step diffs alone would miss it)
    decode = MODEL.step(BatchShape(2, 16 + 4001, (), 2)).total_s
    client = engine.log.client_s
    spans = [client[q] - client[p] for p, q, _ in engine.resume_gaps]
    assert max(spans) == pytest.approx(
        r1_prefill + decode, rel=1e-4
    )  # r0's context there is approximate
    assert_itl_counts_every_gap_once(run, bench)
    vllm = Steps()
    serve(requests, config(), vllm, engine_class=Engine)
    assert any(d == 1 and c == [(1, 4000)] for d, c in vllm.steps)  # mixed in vLLM


def test_admission_reserves_the_expected_outputs():
    """A pool of 10,000 tokens, 20 requests of 100 in / 1,000 out at once. Each admission needs
    100 + 1,000 + 1 page < what is left and takes as much: the first prefill batch holds 9
    (10,000 - 9 x 1,101 = 91 left). vLLM would take all 20 prompts at once."""
    requests = [RequestSpec(i, 0.0, 100, 1000) for i in range(20)]
    cfg = config(num_blocks=625, block_size=16, max_model_len=2000, enable_prefix_caching=False)
    seen = Steps()
    engine, run, _ = serve(requests, cfg, seen)
    first = next(c for d, c in seen.steps if c)
    assert [rid for rid, _ in first] == list(range(9))
    assert len(run.finished) == 20
    vllm = Steps()
    serve(requests, cfg, vllm, engine_class=Engine)
    assert len(next(c for d, c in vllm.steps if c)) == 20


def test_after_a_request_finds_no_tokens_the_queue_waits_for_a_finish():
    """After the first 9 (their batch formed with nothing running), the next round reserves
    min(1,000 - 1, 4,096) x 0.7 for each: free 10,000 - 9 x 7 blocks x 16 = 8,992 tokens,
    8,992 - 9 x 999 x 0.7 = 2,698.3 left, room for 2 more of 1,101 (496.3 left), and the 12th
    finds no tokens (NO_TOKEN): the running batch is marked full, and no admission is tried
    until it shrinks, however far new_token_ratio falls. The first 9 emit output 1 in step 0
    and outputs 2-1,000 in the decode steps 2-1,000; step 1,001 is the next prefill batch."""
    requests = [RequestSpec(i, 0.0, 100, 1000) for i in range(20)]
    cfg = config(num_blocks=625, block_size=16, max_model_len=2000, enable_prefix_caching=False)
    seen = Steps()
    serve(requests, cfg, seen)
    prefills = [(k, [rid for rid, _ in c]) for k, (_, c) in enumerate(seen.steps) if c]
    assert prefills[:3] == [(0, list(range(9))), (1, [9, 10]), (1001, prefills[2][1])]
    assert prefills[2][1][0] == 11


def test_a_full_pool_retracts_the_request_with_fewest_outputs():
    """r0 (16 in, 3,000 out) runs alone; r1 (16 in, 2,000 out) arrives ~700 decode steps later,
    when new_token_ratio is at its floor (0.098): r0's 2,300 remaining outputs reserve only ~225
    tokens, so r1 (2,017 with its outputs) is admitted into 3,200 - 720 - 225 tokens. Both grow
    one token a step: after ~1,234 more steps (732 + 2x > 3,200) the pool runs out and r1, with
    fewer outputs, is retracted; it recomputes later and both finish."""
    step = MODEL.step(BatchShape(1, 400, (), 1)).total_s
    requests = [RequestSpec(0, 0.0, 16, 3000), RequestSpec(1, 700 * step, 16, 2000)]
    cfg = config(num_blocks=200, block_size=16, max_model_len=3100, enable_prefix_caching=False)
    seen = Steps()
    engine, run, _ = serve(requests, cfg, seen)
    assert engine.preemptions == 1
    r0, r1 = sorted(run.finished, key=lambda r: r.rid)
    assert (r0.preemptions, r1.preemptions) == (0, 1)
    assert (r0.outputs, r1.outputs) == (3000, 2000)
    # r1 recomputed its prompt and the outputs it had when retracted, in prefill batches
    recompute = sum(n for d, c in seen.steps for rid, n in c if rid == 1) - 16
    assert recompute > 16
    assert engine.bm.num_used_blocks == 0


class Checker:
    def __init__(self, cfg, max_prefill_tokens):
        self.cfg, self.max_prefill_tokens = cfg, max_prefill_tokens

    def __call__(self, engine, steps, num_decodes, chunks):
        cfg = self.cfg
        if chunks:  # a prefill batch: alone, within both budgets
            assert num_decodes == 0
            total = sum(n for _, n in chunks)
            assert total <= cfg.max_num_batched_tokens
            assert total <= self.max_prefill_tokens or len(chunks) == 1
            assert sum(1 for r, n in chunks if r.computed + n < r.num_tokens) <= 1
        assert len(engine.running) <= cfg.max_num_seqs
        assert engine.bm.num_used_blocks <= cfg.num_blocks
        assert_blocks_cover(engine, steps, num_decodes, chunks)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.sampled_from([4, 16]),
    st.integers(1, 8),
    st.integers(8, 200),
    st.integers(8, 400),
    st.integers(0, 40),
    st.booleans(),
)
def test_scheduler_invariants(items, block_size, seats, chunk, max_prefill, spare, caching):
    """No request starves, the pool never over-allocates, a prefill batch runs alone within
    chunked_prefill_size and max_prefill_tokens, one chunked request at a time, seats hold."""
    longest = max(i + o for _, i, o in items)
    blocks = -(-longest // block_size) + 2 + spare
    cfg = config(
        max_num_seqs=seats,
        max_num_batched_tokens=chunk,
        max_model_len=longest + 1,
        num_blocks=blocks,
        block_size=block_size,
        enable_prefix_caching=caching,
    )
    requests = sorted((RequestSpec(0, a, i, o) for a, i, o in items), key=lambda r: r.arrival_s)
    requests = [r._replace(rid=k) for k, r in enumerate(requests)]
    engine, run, bench = serve(
        requests, cfg, Checker(cfg, max_prefill), max_prefill_tokens=max_prefill
    )
    assert sorted(r.rid for r in run.finished) == [r.rid for r in requests]
    assert all(r.outputs == r.target == r.spec.output_tokens for r in run.finished)
    assert engine.bm.num_used_blocks == 0 or caching
    assert bench.completed == len(requests)
    # a retracted request's gap spans its recompute: one gap, counted once like the others
    assert_itl_counts_every_gap_once(run, bench)


def test_cli_runs_sglang_and_refuses_vllm_only_flags():
    data = run_json(
        "simulate", "qwen3-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts", "60",
        "--input-len", "500", "--output-len", "100",
    )  # fmt: skip
    assert data["setup"]["engine"] == "sglang"
    assert data["runs"][0]["bench"]["completed"] == 60
    code, _, err = run_cli("simulate", "qwen3-8b", "--engine", "sglang", "--no-preemption")
    assert code == 2 and "vLLM option" in err
    code, _, err = run_cli("simulate", "qwen3-8b", "--engine", "sglang", "--disaggregated", "1:1")
    assert code == 2 and "vLLM only" in err
    code, _, err = run_cli("simulate", "qwen3-8b", "--engine", "tgi")
    assert code == 2 and "vllm or sglang" in err


def test_the_sglang_note_says_how_prefill_dispatch_is_priced():
    """SGLang's prefill batches run under piecewise CUDA graphs by default from 0.5.10 (PR
    #16331) up to --piecewise-cuda-graph-max-tokens (chunked_prefill_size: 8,192 on an H100),
    eagerly above and where excluded (DP attention: every batch eager); the note says the
    release's price with host_overheads.json's eager figure and whose figure it is."""
    eager_ms = json.loads(HOST_OVERHEADS_JSON.read_text())["eager_per_layer_s"] * 1e3
    args = ("--num-prompts", "4", "--input-len", "128", "--output-len", "4")
    data = run_json("simulate", "qwen3-8b", "--gpu", "h100", "--engine", "sglang", *args)
    text = next(n["text"] for n in data["notes"] if n["id"] == "sim-sglang")
    assert "a prefill batch of up to 8,192 tokens with graph launch costs" in text
    assert (
        f"at {eager_ms:.1f} ms of CPU dispatch for a dense layer's 10 kernels (a layer of more "
        "kernels pays each one's measured host cost on top), a constant of aiconfigurator's"
    ) in text
    assert "SGLang's own dispatch cost, with or without graphs, is not measured" in text
    data = run_json(
        "simulate", "deepseek-r1", "--gpu", "h200", "--tp", "8", "--dp", "8",
        "--enable-dp-attention", "--engine", "sglang", *args,
    )  # fmt: skip
    text = next(n["text"] for n in data["notes"] if n["id"] == "sim-sglang")
    assert (
        "(DP attention), so every prefill batch runs eagerly; kvplan prices every prefill batch "
        f"at {eager_ms:.1f} ms of CPU dispatch for a dense layer's"
    ) in text


def test_retraction_sets_new_token_ratio_without_the_decay():
    """update_running_batch either retracts (new_token_ratio := the retract estimate) or decays
    the ratio, not both: at the retraction step the ratio is (r0's outputs + 20 x 1) / (3,000 +
    1), r0 being the one request left."""
    step = MODEL.step(BatchShape(1, 400, (), 1)).total_s
    requests = [RequestSpec(0, 0.0, 16, 3000), RequestSpec(1, 700 * step, 16, 2000)]
    cfg = config(num_blocks=200, block_size=16, max_model_len=3100, enable_prefix_caching=False)
    seen = []

    def observer(engine, steps, num_decodes, chunks):
        if engine.preemptions and not seen:
            (r0,) = [r for r in engine.running if r.rid == 0]
            outputs = r0.outputs + (engine.decode_index - r0.j0)
            seen.append((engine.ratio, outputs))

    serve(requests, cfg, observer)
    ratio, outputs = seen[0]
    assert ratio == pytest.approx((outputs + 20) / 3001, rel=1e-12)


def test_a_chunked_prompt_beside_the_last_decode_does_not_stop_the_run():
    """r3's prompt is being prefilled in chunks while r4 decodes, and the pool runs out: with
    one decode left nothing can be retracted, and SGLang would abort r4. The simulator retracts
    the chunked r3 instead (it recomputes later); every request finishes with its outputs."""
    cfg = config(
        max_num_seqs=7, max_num_batched_tokens=99, max_model_len=303, num_blocks=97,
        block_size=4, enable_prefix_caching=True,
    )  # fmt: skip
    items = [
        (0.09577503291988343, 105, 86),
        (0.24262371778717196, 234, 68),
        (0.7860673030012693, 180, 111),
        (0.9190575697262138, 90, 181),
        (1.0137300461533734, 57, 137),
    ]
    requests = [RequestSpec(k, a, i, o) for k, (a, i, o) in enumerate(items)]
    engine, run, bench = serve(
        requests, cfg, Checker(cfg, 465), max_prefill_tokens=465
    )  # fmt: skip
    assert sorted(r.rid for r in run.finished) == [0, 1, 2, 3, 4]
    assert all(r.outputs == r.spec.output_tokens for r in run.finished)
    assert engine.preemptions >= 1
    assert_itl_counts_every_gap_once(run, bench)


def test_a_pool_below_the_context_serves_requests_up_to_sglangs_max_req_len():
    """SGLang with a pool of P tokens < context length: max_req_len = P - 1, max_new_tokens cut
    to max_req_len - prompt - 1, so a request holds at most P - 2 tokens, and admission needs
    that + a page below the free tokens. 14,000-token prompts asking 4,000 outputs all run, each
    to P - 2 tokens less at most the simulated pool's block rounding (16) and the page (1)."""
    data = run_json(
        "simulate", "qwen3-8b", "--engine", "sglang", "--kv-cache-memory", "2GiB",
        "--num-prompts", "3", "--input-len", "14000", "--output-len", "4000",
    )  # fmt: skip
    pool = data["setup"]["kv_cache_tokens"]
    assert 14000 < pool < 18000  # the pool caps the requests
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (3, 0)
    per_request = 14000 + bench["total_output_tokens"] / 3
    assert pool - 2 - 16 - 1 <= per_request <= pool - 2


def test_a_burst_prefills_every_prompt_before_any_decode():
    """Ten prompts of 3,000 tokens (5 outputs) sent at once, chunked_prefill_size 8,192: the
    PrefillAdder fills each batch to 8,192 tokens, the prompt that does not fit cut to what is
    left (one chunked request at a time, its next chunk first in the next batch), and a prefill
    batch runs whenever one can be formed, so the four batches run back to back before the
    first decode step (scheduler.get_next_batch_to_run; no --enable-mixed-chunk):
      batch 1: r0 3,000, r1 3,000, r2 2,192 (of 3,000)
      batch 2: r2 808, r3 3,000, r4 3,000, r5 1,384
      batch 3: r5 1,616, r6 3,000, r7 3,000, r8 576
      batch 4: r8 2,424, r9 3,000
    A request's TTFT is the batches up to the one that ends its prompt, summed."""
    requests = [RequestSpec(i, 0.0, 3000, 5) for i in range(10)]
    seen = Steps()
    _, run, _ = serve(requests, config(max_num_batched_tokens=8192), seen)
    batches = [
        ((3000, 0), (3000, 0), (2192, 0)),
        ((808, 2192), (3000, 0), (3000, 0), (1384, 0)),
        ((1616, 1384), (3000, 0), (3000, 0), (576, 0)),
        ((2424, 576), (3000, 0)),
    ]
    assert [[n for _, n in c] for _, c in seen.steps[:4]] == [[n for n, _ in b] for b in batches]
    assert all(d == 0 for d, _ in seen.steps[:4]) and not seen.steps[4][1]
    ends = [0.0]
    for b in batches:  # the requests whose prompt the batch ends sample their first token
        sampled = sum(1 for n, done in b if n + done == 3000)
        ends.append(ends[-1] + MODEL.step(BatchShape(0, 0, b, sampled)).total_s)
    last_batch = [1, 1, 2, 2, 2, 3, 3, 3, 4, 4]  # the batch that ends each prompt
    ttft = {r.rid: r.first_client_s - r.dispatch_s for r in run.finished}
    for rid, k in enumerate(last_batch):
        assert ttft[rid] == pytest.approx(ends[k], rel=1e-9)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_overlap_scheduler_sees_a_request_one_step_later(overlap):
    """event_loop_overlap forms each batch when the step before it begins: r1, reaching the
    engine half-way through r0's decode step [3, 4), is first seen by the pass at 4 that
    forms [5, 6), so it waits for the running step and one more; the plain loop prefills it
    in [4, 5). An idle engine (r0 alone at 0) sees a request at once either way."""
    from kvplan.simulate.steplog import FixedStep

    step_s = 0.01
    requests = [RequestSpec(0, 0.0, 16, 20), RequestSpec(1, 3.5 * step_s, 16, 2)]
    engine = SglangEngine(config(), FixedStep(step_s), 0.0, policy=SglangPolicy(overlap=overlap))
    run = cluster.run(requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(1 << 20))
    ttft = {r.rid: r.first_client_s - r.dispatch_s for r in run.finished}
    assert ttft[0] == pytest.approx(step_s)
    assert ttft[1] == pytest.approx((2.5 if overlap else 1.5) * step_s)


def test_sglang_0_3_runs_without_the_overlap_scheduler():
    """0.3 has no overlap scheduler (0.3.0's ModelTpServer.forward_step); 0.4.0 turned it on."""
    from kvplan.engines.sglang import sglang_overlap_default

    assert not sglang_overlap_default("0.3.0")
    assert sglang_overlap_default("0.4.0")
    assert sglang_overlap_default("0.5.6.post2")
    assert sglang_overlap_default("0.5")


@pytest.mark.parametrize("flag", [None, True])
def test_pipeline_parallel_runs_without_the_overlap_loop(flag):
    """server_args._handle_pipeline_parallelism: pp_size > 1 sets disable_overlap_schedule
    ("Pipeline parallelism is incompatible with overlap schedule"), given or not, and the
    scheduler runs event_loop_pp, not event_loop_overlap: no request waits a step more."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.simulate.setup import ServeOptions, build_replica

    spec, gpu = load_model("llama-3.1-8b", checkpoint=False), load_profile("h100")
    for pp, overlap in ((1, True), (2, False)):
        options = ServeOptions(engine="sglang", pp=pp, async_scheduling=flag)
        assert build_replica(spec, gpu, options).policy.overlap is overlap, pp
