"""The simulated engine: closed forms (one request's TTFT and TPOT, a saturated batch's
throughput) computed from the step-time model alone, and the scheduler's invariants as property
tests (no request starves, the pool never over-allocates, preempted requests recompute, chunked
prefill respects the token budget, FCFS admission)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.dtypes import KvFormat
from kvplan.engines.context_limit import ContextLimit
from kvplan.formulas.batch_step import BatchShape, StepModel
from kvplan.formulas.step_time import Rates
from kvplan.inputs.sources import load_model
from kvplan.kernels.block_manager import BlockManager
from kvplan.simulate import cluster, metrics
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import DECODE, Engine, EngineConfig, without_idle_caching
from kvplan.simulate.workload import RequestSpec

SPEC = load_model("llama-3.1-8b")
MODEL = StepModel(SPEC, Rates(3.35e12, 989.4e12), "bf16", KvFormat("bf16"))
NO_FRONTEND = Frontend(0.0, 0.0)


def config(**kw) -> EngineConfig:
    base = dict(
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=1 << 20,
        num_blocks=1 << 16,
        block_size=16,
    )
    base.update(kw)
    return EngineConfig(**base)


def serve(requests, cfg, frontend=NO_FRONTEND, observer=None, concurrency=None):
    engine = Engine(cfg, MODEL, frontend.per_token_s, observer=observer)
    run = cluster.run(
        requests,
        [engine],
        max_concurrency=concurrency,
        frontend=frontend,
        context=ContextLimit(cfg.max_model_len),
    )
    return engine, run, metrics.bench_result(run, math.inf, 1.0, concurrency)


def test_one_request_ttft_is_its_prefill_and_tpot_its_decode_step():
    frontend = Frontend(request_s=0.015, per_token_s=50e-6)
    _, run, bench = serve([RequestSpec(0, 0.0, 1000, 100)], config(), frontend)
    prefill = MODEL.step(BatchShape(0, 0, ((1000, 0),), 1)).total_s
    assert bench.mean_ttft_ms / 1e3 == pytest.approx(0.015 + prefill + 50e-6, rel=1e-9)
    # decode k (k = 1..99) attends 1000 prompt + k tokens; the streamed token's cost cancels
    decodes = [MODEL.step(BatchShape(1, 1000 + k, (), 1)).total_s for k in range(1, 100)]
    assert bench.mean_tpot_ms / 1e3 == pytest.approx(sum(decodes) / 99, rel=1e-9)
    assert bench.median_itl_ms / 1e3 == pytest.approx(sorted(decodes)[49], rel=1e-9)


def test_a_prompt_longer_than_the_budget_is_chunked():
    _, _, bench = serve([RequestSpec(0, 0.0, 20000, 2)], config())
    # every chunk runs the head and the sampler (vLLM's logits_indices: one per request; the
    # token of a chunk that is not the prompt's last is discarded)
    chunks = [((8192, 0), 1), ((8192, 8192), 1), ((3616, 16384), 1)]
    prefill = sum(MODEL.step(BatchShape(0, 0, (c,), s)).total_s for c, s in chunks)
    assert bench.mean_ttft_ms / 1e3 == pytest.approx(prefill, rel=1e-9)


def test_saturated_throughput_is_the_batch_over_its_step_time():
    """64 requests at once (16 in, 512 out): one prefill step of 1,024 tokens, then 511 steps of
    64 decodes at contexts 17..527 each; throughput = tokens / that time."""
    requests = [RequestSpec(i, 0.0, 16, 512) for i in range(64)]
    _, _, bench = serve(requests, config(max_num_seqs=64))
    prefill = MODEL.step(BatchShape(0, 0, tuple((16, 0) for _ in range(64)), 64)).total_s
    decodes = [MODEL.step(BatchShape(64, 64 * (16 + k), (), 64)).total_s for k in range(1, 512)]
    assert bench.duration == pytest.approx(prefill + sum(decodes), rel=1e-9)
    steady = 64 / (sum(decodes) / len(decodes))  # the steady batch's tokens per step time
    assert bench.output_throughput == pytest.approx(steady, rel=0.01)


def test_concurrency_limit_excludes_client_waiting_from_ttft():
    requests = [RequestSpec(i, 0.0, 100, 10) for i in range(4)]
    _, _, bench = serve(requests, config(), concurrency=1)
    prefill = MODEL.step(BatchShape(0, 0, ((100, 0),), 1)).total_s
    assert bench.max_concurrent_requests == 1
    assert bench.median_ttft_ms / 1e3 == pytest.approx(prefill, rel=1e-9)


# ---- invariants -----------------------------------------------------------------------------
def held_blocks(pool, rid) -> int:
    if hasattr(pool, "held"):  # the counting pool (prefix caching off)
        return pool.held[rid][0]
    return len(pool.block_table(rid))


def assert_blocks_cover(engine, steps, num_decodes, chunks) -> None:
    """The blocks every running request holds cover what this step (or run of `steps` decode
    steps, when decodes ran) computes."""
    for r in engine.running:
        if r.state == DECODE:
            needed = r.c0 + (engine.decode_index - r.j0) + (steps if num_decodes else 0)
        else:
            needed = r.computed + next((n for q, n in chunks if q is r), 0)
        assert held_blocks(engine.bm, r.rid) * engine.config.block_size >= needed


class Checker:
    """Observes every step: budget, seats, pool, blocks covering computed tokens, recompute."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.prefilled: dict[int, int] = {}  # rid -> prefill tokens scheduled in all
        self.since: dict[int, int] = {}  # rid -> prefill tokens since its last preemption
        self.owed: dict[int, int] = {}  # rid -> what its last recomputation had to redo
        self.seen_preemptions: dict[int, int] = {}
        self.first_admitted: list[int] = []

    def __call__(self, engine, steps, num_decodes, chunks):
        cfg = self.cfg
        assert num_decodes + sum(n for _, n in chunks) <= cfg.max_num_batched_tokens
        assert len(engine.running) <= cfg.max_num_seqs
        assert engine.bm.num_used_blocks <= cfg.num_blocks
        for r, n in chunks:
            assert n > 0
            if r.rid not in self.prefilled:
                self.first_admitted.append(r.rid)
            self.prefilled[r.rid] = self.prefilled.get(r.rid, 0) + n
            self.since[r.rid] = self.since.get(r.rid, 0) + n
        assert_blocks_cover(engine, steps, num_decodes, chunks)
        for r in engine.waiting:  # preempted since last seen: must redo input + outputs so far
            if r.preemptions > self.seen_preemptions.get(r.rid, 0):
                self.seen_preemptions[r.rid] = r.preemptions
                self.owed[r.rid] = r.input_tokens + r.outputs
                self.since[r.rid] = 0


workloads = st.lists(
    st.tuples(
        st.floats(0, 2.0),  # arrival
        st.integers(1, 120),  # input
        st.integers(1, 40),  # output
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.sampled_from([4, 16]),
    st.integers(1, 8),
    st.integers(8, 200),
    st.booleans(),
    st.integers(0, 40),
)
def test_scheduler_invariants(items, block_size, seats, budget, chunked, spare_blocks):
    longest = max(i + o for _, i, o in items)
    if not chunked:
        budget = max(budget, longest)
    blocks = -(-longest // block_size) + 1 + spare_blocks  # one request always fits alone
    cfg = config(
        max_num_seqs=min(seats, budget),
        max_num_batched_tokens=budget,
        max_model_len=longest + 1,
        num_blocks=blocks,
        block_size=block_size,
        enable_prefix_caching=False,
        enable_chunked_prefill=chunked,
    )
    requests = sorted((RequestSpec(0, a, i, o) for a, i, o in items), key=lambda r: r.arrival_s)
    requests = [r._replace(rid=k) for k, r in enumerate(requests)]
    checker = Checker(cfg)
    engine, run, _ = serve(requests, cfg, observer=checker)
    # no request starves: every one finishes with all its tokens
    assert sorted(r.rid for r in run.finished) == [r.rid for r in requests]
    assert all(r.outputs == r.target == r.spec.output_tokens for r in run.finished)
    # first come, first served: first admissions in arrival order
    assert checker.first_admitted == sorted(checker.first_admitted)
    # a preempted request recomputes its prompt and the outputs it had (caching off)
    for r in run.finished:
        assert checker.since[r.rid] == checker.owed.get(r.rid, r.input_tokens)
        assert (r.preemptions > 0) == (r.rid in checker.owed)
    assert engine.bm.num_used_blocks == 0  # everything released


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.integers(0, 30), st.integers(1, 3))
def test_prefix_caching_pool_never_over_allocates(items, spare_blocks, num_prefixes):
    """With the block manager (prefix caching on, shared prefixes): same completion and budget
    invariants; the hit rate comes from the block manager and stays within [0, 1)."""
    longest = max(i + o for _, i, o in items) + 32
    cfg = config(
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=longest + 1,
        num_blocks=-(-longest // 16) + 2 + spare_blocks,
        block_size=16,
    )
    requests = [
        RequestSpec(k, a, i + 32, o, stream_id=k % num_prefixes, stream_tokens=32)
        for k, (a, i, o) in enumerate(sorted(items))
    ]
    checker = Checker(cfg)
    engine, run, _ = serve(requests, cfg, observer=checker)
    assert len(run.finished) == len(requests)
    assert 0 <= engine.hit_tokens <= engine.queried_tokens
    assert engine.bm.num_used_blocks == 0


def test_preemption_happens_and_costs_recompute():
    """Three long decodes in a pool that holds two at full length: someone is preempted,
    recomputes, and everyone still finishes."""
    requests = [RequestSpec(i, 0.0, 32, 200) for i in range(3)]
    cfg = config(num_blocks=2 * -(-232 // 16) + 1, max_model_len=300)
    checker = Checker(cfg)
    engine, run, _ = serve(requests, cfg, observer=checker)
    assert engine.preemptions >= 1
    assert len(run.finished) == 3
    assert sum(checker.prefilled.values()) > 3 * 32


def test_no_preemption_mode_reserves_whole_sequences():
    requests = [RequestSpec(i, 0.0, 32, 200) for i in range(3)]
    cfg = config(num_blocks=2 * -(-232 // 16) + 1, max_model_len=300, preemption=False)
    engine, run, _ = serve(requests, cfg)
    assert engine.preemptions == 0 and len(run.finished) == 3


def test_static_batching_waits_for_the_batch_to_finish():
    """Continuous batching off: the fourth request waits until the first three all end."""
    requests = [RequestSpec(0, 0.0, 16, 400), RequestSpec(1, 0.0, 16, 10)]
    requests += [RequestSpec(2, 0.0, 16, 10), RequestSpec(3, 0.001, 16, 10)]
    on = serve(requests, config(max_num_seqs=3))[1]
    off = serve(requests, config(max_num_seqs=3, continuous_batching=False))[1]
    last = {r.rid: r for r in off.finished}
    cont = {r.rid: r for r in on.finished}
    assert last[3].first_client_s > last[0].last_client_s  # waited for the long one
    assert cont[3].first_client_s < cont[0].last_client_s  # joined as soon as a seat freed


def test_caching_is_dropped_only_where_it_cannot_change_the_run():
    """A preempted request finds its own freed prompt blocks in the prefix cache when it comes
    back (vLLM frees them into the cache), so caching changes a run that preempts even with no
    shared prefix; kvplan plan drops it (to skip hashing) only where nothing can be preempted."""
    requests = [RequestSpec(i, 0.0, 200, 200) for i in range(16)]
    tight = config(max_num_seqs=8, num_blocks=80, enable_prefix_caching=True)  # 16 x 25 blocks
    assert without_idle_caching(tight, requests) is tight
    engine_on, _, _ = serve(requests, tight)
    engine_off, _, _ = serve(requests, tight._replace(enable_prefix_caching=False))
    assert engine_on.preemptions > 0
    assert engine_on.hit_tokens > 0 and engine_off.hit_tokens == 0
    roomy = tight._replace(num_blocks=8 * 25 + 1)  # max_num_seqs of the longest always fit
    assert without_idle_caching(roomy, requests).enable_prefix_caching is False
    shared = [r._replace(stream_id=0, stream_tokens=64) for r in requests]
    assert without_idle_caching(roomy, shared) is roomy
    engine_on, run_on, _ = serve(requests, roomy)
    _, run_off, _ = serve(requests, roomy._replace(enable_prefix_caching=False))
    assert engine_on.preemptions == 0
    assert [r.last_client_s for r in run_on.finished] == [r.last_client_s for r in run_off.finished]


def test_round_robin_replicas_sized_by_their_share_give_the_same_run():
    """plans.simulate sizes each round-robin replica's pool by its own share of the requests and
    counts blocks instead of hashing them where caching cannot matter (each share fits its
    pool); the run is the one with every pool sized for all the requests and caching on."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.plans.simulate import SimulateRequest, _replica_pool, run_once
    from kvplan.simulate.engine import pool_demand
    from kvplan.simulate.setup import ServeOptions, build_replica
    from kvplan.simulate.workload import WorkloadSpec, generate

    workload = WorkloadSpec(num_prompts=400, input_len=900, output_len=300, length_dist="lognormal",
                            spread=0.8, request_rate=40.0)  # fmt: skip
    requests = generate(workload)
    request = SimulateRequest(workload=workload, replicas=4, series=False)
    options = ServeOptions(kv_cache_memory_bytes=20 << 30)
    replica = build_replica(SPEC, load_profile("h100"), options)
    everything = pool_demand(replica.config, requests)
    config, share = _replica_pool(replica.config, requests, request, replica.context)
    assert not config.enable_prefix_caching and share < replica.config.num_blocks < everything
    fast = run_once(replica, requests, request, 40.0).bench
    engines = [Engine(replica.config, replica.model, request.frontend.per_token_s, everything)
               for _ in range(4)]  # fmt: skip
    assert isinstance(engines[0].bm, BlockManager)  # the reference: caching on, hashed blocks
    run = cluster.run(requests, engines, frontend=request.frontend,
                      context=replica.context)  # fmt: skip
    assert fast == metrics.bench_result(run, 40.0, 1.0, None)


def _outcome(requests, cfg, stand_in: bool):
    from kvplan.simulate.engine import pool_demand

    engine = Engine(cfg, MODEL, 0.0, pool_demand(cfg, requests), stand_in=stand_in)
    run = cluster.run(
        requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(cfg.max_model_len)
    )
    per_request = [(r.rid, r.first_client_s, r.last_client_s, r.preemptions) for r in run.finished]
    return per_request, metrics.bench_result(run, math.inf, 1.0, None), engine


@pytest.mark.parametrize(
    "num_blocks, seats, chunked, preemption, side, counted",
    [
        (1 << 16, 256, True, True, (), True),  # the pool holds everything: never preempts
        (600, 64, True, True, (), False),  # preempts under load
        (600, 64, False, True, (), False),
        (900, 32, True, False, (), True),  # reserves whole sequences before admitting
        (700, 64, True, True, ((64, 1, 16),), False),  # a sliding-window group's blocks beside
        (2000, 16, True, True, (), True),
    ],
)
def test_a_stand_in_pool_gives_the_prefix_caching_run_or_steps_aside(
    num_blocks, seats, chunked, preemption, side, counted
):
    """With no shared token stream a counted pool stands in for the BlockManager: it either
    gives the run the BlockManager gives (every request's times, the bench, preemptions), or
    raises CachingMatters once a freed sequence comes back (plan then runs the real pool)."""
    from kvplan.simulate.engine import CachingMatters
    from kvplan.simulate.workload import WorkloadSpec, generate

    cfg = config(
        num_blocks=num_blocks,
        max_num_seqs=seats,
        max_num_batched_tokens=2048 if chunked else 3072,
        enable_chunked_prefill=chunked,
        preemption=preemption,
        side_blocks=side,
        max_model_len=3000,
    )
    workload = WorkloadSpec(120, 40.0, 1.0, 700, 150, "lognormal", 0.5, seed=3)
    requests = generate(workload)
    real, real_bench, real_engine = _outcome(requests, cfg, stand_in=False)
    try:
        stood_in, stood_in_bench, stood_in_engine = _outcome(requests, cfg, stand_in=True)
    except CachingMatters:
        assert not counted and real_engine.preemptions
        return
    assert counted
    assert stood_in == real
    assert stood_in_bench == real_bench
    assert stood_in_engine.peak_used == real_engine.peak_used
    assert stood_in_engine.hit_tokens == real_engine.hit_tokens == 0


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_async_scheduling_sees_a_request_one_step_later(async_scheduling):
    """vLLM V1's batch queue (engines.vllm_schedule.batches_formed_ahead): with async
    scheduling step_with_batch_queue forms each step as the one before it starts, so r1,
    reaching the engine half-way through r0's decode step [3, 4), is first in the step formed
    at 4, [5, 6): its first token at 6, 2.5 steps after it arrived. Without it `step` forms
    the step after the running one ends: r1 is prefilled in [4, 5), 1.5 steps. An idle engine
    (r0 alone at 0) schedules a request at once either way: r0's first token after one step."""
    from kvplan.simulate.steplog import FixedStep

    step_s = 0.01
    requests = [RequestSpec(0, 0.0, 16, 20), RequestSpec(1, 3.5 * step_s, 16, 2)]
    cfg = config(async_scheduling=async_scheduling)
    engine = Engine(cfg, FixedStep(step_s), 0.0)
    run = cluster.run(requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(1 << 20))
    ttft = {r.rid: r.first_client_s - r.dispatch_s for r in run.finished}
    assert ttft[0] == pytest.approx(step_s)
    assert ttft[1] == pytest.approx((2.5 if async_scheduling else 1.5) * step_s)


@pytest.mark.parametrize(("version", "steps"), [("0.11", 1.5), ("0.19", 2.5), ("0.32", 2.5)])
def test_the_release_default_decides_the_step_a_request_waits(version, steps):
    """async scheduling is on by default from vLLM 0.12 (engines.vllm.async_scheduling_default):
    a request arriving mid-step waits one step more from then, 2.5 fixed steps in all."""
    from kvplan.engines.vllm import async_scheduling_default
    from kvplan.simulate.steplog import FixedStep

    step_s = 0.01
    requests = [RequestSpec(0, 0.0, 16, 20), RequestSpec(1, 3.5 * step_s, 16, 2)]
    cfg = config(async_scheduling=async_scheduling_default(version, v0_engine=False))
    engine = Engine(cfg, FixedStep(step_s), 0.0)
    run = cluster.run(requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(1 << 20))
    first = next(r for r in run.finished if r.rid == 1)
    assert first.first_client_s - first.dispatch_s == pytest.approx(steps * step_s)
