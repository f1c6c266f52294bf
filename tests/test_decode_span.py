"""The simulator's decode-span fast path (runs of decode-only steps advanced together, sized so
that no request finishes, no block runs out and no arrival is passed) against stepping the same
run one step at a time (`MIN_SPAN` set beyond any run): every request's first and last step,
client times, preemptions and outputs, and the engines' step logs and busy time, must agree.
The span's times are a cumulative sum where stepping adds one at a time, so times agree to
float rounding and everything counted agrees exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.dtypes import KvFormat
from kvplan.engines.context_limit import ContextLimit
from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.step_time import Rates
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate import cluster
from kvplan.simulate import engine as engine_module
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import Engine, EngineConfig
from kvplan.simulate.sglang import SglangEngine
from kvplan.simulate.workload import RequestSpec

MODEL = StepModel(load_model("llama-3.1-8b"), Rates(3.35e12, 989.4e12), "bf16", KvFormat("bf16"))
FRONTEND = Frontend(request_s=0.002, per_token_s=20e-6)


def _serve(kind, requests, cfg, concurrency):
    cls = SglangEngine if kind == "sglang" else Engine
    replica = cls(cfg, MODEL, FRONTEND.per_token_s)
    run = cluster.run(
        requests,
        [replica],
        max_concurrency=concurrency,
        frontend=FRONTEND,
        context=ContextLimit(cfg.max_model_len),
    )
    return replica, run


def _outcome(replica, run):
    per_request = sorted(
        (
            r.rid,
            r.outputs,
            r.preemptions,
            r.first_step,
            r.last_step,
            r.first_client_s,
            r.last_client_s,
        )
        for r in run.finished
    )
    log = replica.log
    return per_request, list(log.decode_tokens), list(log.running), list(log.end_s)


def _same(fast, slow):
    (fast_requests, fast_tokens, fast_running, fast_ends) = fast
    (slow_requests, slow_tokens, slow_running, slow_ends) = slow
    assert fast_tokens == slow_tokens
    assert fast_running == slow_running
    assert fast_ends == pytest.approx(slow_ends, rel=1e-9, abs=1e-12)
    assert len(fast_requests) == len(slow_requests)
    for a, b in zip(fast_requests, slow_requests, strict=True):
        assert a[:5] == b[:5]  # rid, outputs, preemptions, first and last step
        assert a[5:] == pytest.approx(b[5:], rel=1e-9, abs=1e-12)


requests_strategy = st.lists(
    st.tuples(
        st.floats(0.0, 2.0, allow_nan=False),  # arrival
        st.integers(1, 600),  # prompt
        st.integers(1, 300),  # outputs
    ),
    min_size=1,
    max_size=24,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    items=requests_strategy,
    kind=st.sampled_from(["vllm", "sglang"]),
    block_size=st.sampled_from([1, 16]),
    seats=st.integers(1, 16),
    spare_blocks=st.integers(0, 400),
    async_scheduling=st.booleans(),
    concurrency=st.sampled_from([None, 1, 4]),
)
def test_the_decode_span_is_the_same_run_as_stepping(
    monkeypatch, items, kind, block_size, seats, spare_blocks, async_scheduling, concurrency
):
    requests = [RequestSpec(i, a, p, o) for i, (a, p, o) in enumerate(sorted(items))]
    longest = max(p + o for _, p, o in items)
    # SGLang admits a request alone only while prompt + outputs + a page stays below the free
    # tokens (PrefillAdder's NO_TOKEN is `total >= rem_total`): a page and a token more
    room = longest + (block_size + 1 if kind == "sglang" else 0)
    cfg = EngineConfig(
        max_num_seqs=seats,
        max_num_batched_tokens=512,
        max_model_len=longest,
        # a small pool preempts (vLLM) or retracts (SGLang); the largest request always fits
        num_blocks=math.ceil(room / block_size) + 1 + spare_blocks // block_size,
        block_size=block_size,
        async_scheduling=async_scheduling and kind == "vllm",
    )
    fast_replica, fast_run = _serve(kind, requests, cfg, concurrency)
    fast = _outcome(fast_replica, fast_run)
    with monkeypatch.context() as patch:
        patch.setattr(engine_module, "MIN_SPAN", 1 << 62)
        slow_replica, slow_run = _serve(kind, requests, cfg, concurrency)
    _same(fast, _outcome(slow_replica, slow_run))


def test_a_long_steady_decode_is_advanced_in_spans_and_matches_stepping(monkeypatch):
    """The case the fast path exists for: 32 requests decoding 2,000 tokens together. Spans
    must actually run (fewer span calls than steps), or the comparison above tests nothing."""
    requests = [RequestSpec(i, 0.0, 500, 2000) for i in range(32)]
    cfg = EngineConfig(64, 8192, 4096, 1 << 14, 16)
    calls = []
    original = Engine._decode_span

    def counted(self, horizon_s):
        result = original(self, horizon_s)
        calls.append(result is not None)
        return result

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "_decode_span", counted)
        fast = _outcome(*_serve("vllm", requests, cfg, None))
    steps = len(fast[1])
    assert steps >= 2000 and 0 < sum(calls) < steps / 10
    with monkeypatch.context() as patch:
        patch.setattr(engine_module, "MIN_SPAN", 1 << 62)
        slow = _outcome(*_serve("vllm", requests, cfg, None))
    _same(fast, slow)


DP_MODEL = StepModel(
    load_model("deepseek-v2-lite"),
    Rates(4.8e12, 989.4e12),
    "bf16",
    KvFormat("bf16"),
    tp=1,
    link=load_profile("h200").interconnect,
    moe_ranks=2,
    dp=2,
)


class _SpeculativeSglang(SglangEngine):
    """SGLang's ranks under speculative decoding: no rank decodes in a step where another
    prefills (SglangEngine.lockstep_exclusive_prefill), priced by the target's steps."""

    lockstep_exclusive_prefill = True


def _serve_lockstep(kind, requests, cfg, concurrency, router):
    cls = {"sglang": SglangEngine, "sglang-spec": _SpeculativeSglang}.get(kind, Engine)
    ranks = [cls(cfg, DP_MODEL, FRONTEND.per_token_s) for _ in range(2)]
    run = cluster.run(
        requests,
        ranks,
        router=router,
        max_concurrency=concurrency,
        frontend=FRONTEND,
        context=ContextLimit(cfg.max_model_len),
        lockstep=2,
    )
    return ranks, run


def _lockstep_outcome(ranks, run):
    per_request = sorted(
        (r.rid, r.outputs, r.preemptions, r.first_step, r.last_step, r.replica)
        + (r.first_client_s, r.last_client_s)
        for r in run.finished
    )
    logs = [(list(r.log.decode_tokens), list(r.log.running), list(r.log.end_s)) for r in ranks]
    return per_request, logs


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    items=requests_strategy,
    kind=st.sampled_from(["vllm", "sglang", "sglang-spec"]),
    seats=st.integers(1, 16),
    spare_blocks=st.integers(0, 400),
    concurrency=st.sampled_from([None, 1, 4]),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
)
def test_dp_lockstep_spans_are_the_same_run_as_stepping(
    monkeypatch, items, kind, seats, spare_blocks, concurrency, router
):
    """Two DP-attention ranks in lockstep (cluster.Lockstep): their decode-only spans, each as
    long as the rank nearest an event allows and each step as long as the slower rank's, give
    the same run as stepping the group one step at a time (SGLang's speculative rule too)."""
    requests = [RequestSpec(i, a, p, o) for i, (a, p, o) in enumerate(sorted(items))]
    longest = max(p + o for _, p, o in items)
    block_size = 16
    room = longest + (block_size + 1 if kind == "sglang" else 0)
    cfg = EngineConfig(
        max_num_seqs=seats,
        max_num_batched_tokens=512,
        max_model_len=longest,
        num_blocks=math.ceil(room / block_size) + 1 + spare_blocks // block_size,
        block_size=block_size,
    )
    fast_ranks, fast_run = _serve_lockstep(kind, requests, cfg, concurrency, router)
    fast_requests, fast_logs = _lockstep_outcome(fast_ranks, fast_run)
    with monkeypatch.context() as patch:
        patch.setattr(engine_module, "MIN_SPAN", 1 << 62)
        slow_requests, slow_logs = _lockstep_outcome(
            *_serve_lockstep(kind, requests, cfg, concurrency, router)
        )
    for (tokens, running, ends), (slow_tokens, slow_running, slow_ends) in zip(
        fast_logs, slow_logs, strict=True
    ):
        assert tokens == slow_tokens and running == slow_running
        assert ends == pytest.approx(slow_ends, rel=1e-9, abs=1e-12)
    assert len(fast_requests) == len(slow_requests) == len(requests)
    for a, b in zip(fast_requests, slow_requests, strict=True):
        assert a[:6] == b[:6]
        assert a[6:] == pytest.approx(b[6:], rel=1e-9, abs=1e-12)


def test_a_long_dp_decode_runs_in_lockstep_spans(monkeypatch):
    """Two ranks decoding unequal batches for 1,500 steps: spans must run (fewer span calls
    than steps) and agree with stepping."""
    requests = [RequestSpec(i, 0.0, 300 + 700 * (i % 2), 1500) for i in range(12)]
    cfg = EngineConfig(64, 8192, 4096, 1 << 14, 16)
    calls = []
    original = cluster.Lockstep._span

    def counted(self, active, horizon_s):
        result = original(self, active, horizon_s)
        calls.append(result is not None)
        return result

    with monkeypatch.context() as patch:
        patch.setattr(cluster.Lockstep, "_span", counted)
        fast = _lockstep_outcome(*_serve_lockstep("vllm", requests, cfg, None, "round_robin"))
    steps = len(fast[1][0][0])
    assert steps >= 1500 and 0 < sum(calls) < steps / 10
    with monkeypatch.context() as patch:
        patch.setattr(engine_module, "MIN_SPAN", 1 << 62)
        slow = _lockstep_outcome(*_serve_lockstep("vllm", requests, cfg, None, "round_robin"))
    for a, b in zip(fast[0], slow[0], strict=True):
        assert a[:6] == b[:6] and a[6:] == pytest.approx(b[6:], rel=1e-9)
    for a, b in zip(fast[1], slow[1], strict=True):
        assert a[:2] == b[:2] and a[2] == pytest.approx(b[2], rel=1e-9)
