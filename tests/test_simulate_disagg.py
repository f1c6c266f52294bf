"""Disaggregated prefill/decode: one request's timeline in closed form (the prefill replica's
response is its prefill step; the decode replica's first step starts when the prefill, the proxy,
and the transfer are done, and its TTFT adds that one step), and invariants as property tests:
every request's KV moves exactly once, no decode work starts before its transfer ends, transfers
into one decode replica never overlap, prefill engines never decode, no pool over-allocates, and
every block is released at the end."""

from __future__ import annotations

import math
import signal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_simulate_engine import MODEL, NO_FRONTEND, config

from kvplan.engines.context_limit import ContextLimit
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import BatchShape
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate import disagg, metrics
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import Engine
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import RequestSpec, WorkloadSpec

BYTES_PER_TOKEN = 1000.0  # a hand-made link: 1 kB per token, 1 GB/s, 1 us per transfer
LINK = disagg.TransferModel(
    "test link", 1e9, 1e-6, lambda tokens: BYTES_PER_TOKEN * tokens, lambda b: 1e-6 + b / 1e9
)


def serve(requests, cfg, num_prefill=1, num_decode=1, frontend=NO_FRONTEND, link=LINK, obs=None):
    prefill = [
        Engine(cfg, MODEL, frontend.per_token_s, prefill_only=True) for _ in range(num_prefill)
    ]
    decode = [Engine(cfg, MODEL, frontend.per_token_s) for _ in range(num_decode)]
    for engine in prefill + decode:
        engine.observer = obs

    def stuck(*_):
        raise AssertionError("the simulation made no progress for 30 s (a livelock)")

    # a run of a dozen requests takes milliseconds; a livelock must fail, not hang the suite
    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    try:
        drun = disagg.run(
            requests,
            prefill,
            decode,
            link,
            frontend=frontend,
            context=ContextLimit(cfg.max_model_len),
        )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return drun, metrics.bench_result(drun.decode, math.inf, 1.0, None)


def test_one_request_timeline():
    """1,000 in, 100 out. The prefill replica answers after its API server, the prefill step and
    one streamed token; the proxy's request reaches the decode server's API (15 ms); the KV
    moves in whole blocks (63 blocks of 16 = 1,008 tokens: 1 us + 1.008 MB at 1 GB/s); then the
    decode replica's first step recomputes token 1,000 and samples the first token the client
    sees."""
    frontend = Frontend(request_s=0.015, per_token_s=50e-6)
    starts = []

    def observer(engine, steps, num_decodes, chunks):
        if not engine.prefill_only and chunks:
            starts.append((engine.clock_s, chunks[0][1], chunks[0][0].computed))

    drun, bench = serve([RequestSpec(0, 0.0, 1000, 100)], config(), frontend=frontend, obs=observer)
    prefill_s = MODEL.step(BatchShape(0, 0, ((1000, 0),), 1)).total_s
    response_s = 0.015 + prefill_s + 50e-6
    transfer_s = 1e-6 + 1008 * BYTES_PER_TOKEN / 1e9
    kv_at = response_s + 0.015 + transfer_s
    first_step_s = MODEL.step(BatchShape(0, 0, ((1, 999),), 1)).total_s
    (t,) = drun.transfers
    assert (t.tokens, t.transfer_bytes) == (1008, 1.008e6)
    assert t.end_s - t.start_s == pytest.approx(transfer_s, rel=1e-12)
    assert t.end_s == pytest.approx(kv_at, rel=1e-12)
    # the prefill replica's own TTFT is its prefill step (plus its API server's costs)
    (p,) = drun.prefilled
    assert p.first_client_s - p.dispatch_s == pytest.approx(response_s, rel=1e-12)
    # the decode replica's first step starts as the KV lands: one token, 999 cached
    assert starts[0] == (pytest.approx(kv_at, rel=1e-12), 1, 999)
    assert bench.mean_ttft_ms / 1e3 == pytest.approx(kv_at + first_step_s + 50e-6, rel=1e-9)
    decodes = [MODEL.step(BatchShape(1, 1000 + k, (), 1)).total_s for k in range(1, 100)]
    assert bench.mean_tpot_ms / 1e3 == pytest.approx(sum(decodes) / 99, rel=1e-9)


def test_decode_prefix_hits_are_not_transferred():
    """Two requests with the same 64-token prefix, one after the other, on one decode replica:
    the second finds the prefix in the decode pool's cache and moves only the rest."""
    requests = [
        RequestSpec(0, 0.0, 96, 4, stream_id=0, stream_tokens=64),
        RequestSpec(1, 1.0, 96, 4, stream_id=0, stream_tokens=64),
    ]
    drun, _ = serve(requests, config())
    assert [t.tokens for t in drun.transfers] == [96, 96 - 64]


def test_a_slow_link_queues_transfers_first_come_first_served():
    """Eight requests at once through a 10 MB/s link into one decode replica: each transfer
    starts when the one before it ends."""
    slow = LINK._replace(seconds_of=lambda b: b / 1e7)
    drun, _ = serve([RequestSpec(i, 0.0, 100, 4) for i in range(8)], config(), link=slow)
    moved = sorted(drun.transfers, key=lambda t: t.start_s)
    for before, after in zip(moved, moved[1:], strict=False):
        assert after.start_s == pytest.approx(before.end_s, rel=1e-12)
    assert moved[-1].start_s - moved[-1].requested_s > 0.05  # it waited for seven others


def test_one_prefill_replica_sends_one_transfer_at_a_time():
    """One prefill replica feeding four decode replicas through a 10 MB/s link: its outgoing
    links carry one request's KV at a time, whichever decode replica it goes to."""
    slow = LINK._replace(seconds_of=lambda b: b / 1e7)
    drun, _ = serve([RequestSpec(i, 0.0, 100, 4) for i in range(8)], config(), 1, 4, link=slow)
    assert len({t.decode_replica for t in drun.transfers}) == 4
    moved = sorted(drun.transfers, key=lambda t: t.start_s)
    for before, after in zip(moved, moved[1:], strict=False):
        assert after.start_s == pytest.approx(before.end_s, rel=1e-12)
    # the busiest link is the sender's: 8 transfers of 112 tokens (7 blocks), 11.2 ms each
    assert drun.send_busy_s[0] == pytest.approx(8 * 112 * BYTES_PER_TOKEN / 1e7, rel=1e-12)


def test_kv_still_arriving_is_not_a_prefix_hit():
    """Request 1 shares request 0's 64-token prefix and reaches the decode replica while request
    0's KV is still on the wire: it finds nothing cached there (vLLM caches a remote request's
    blocks only once its KV has arrived) and moves all of its blocks."""
    slow = LINK._replace(seconds_of=lambda b: b / 1e6)  # 96 kB: 96 ms on the wire
    requests = [
        RequestSpec(0, 0.0, 96, 4, stream_id=0, stream_tokens=64),
        RequestSpec(1, 0.005, 96, 4, stream_id=0, stream_tokens=64),
    ]
    drun, _ = serve(requests, config(), link=slow)
    first, second = sorted(drun.transfers, key=lambda t: t.rid)
    assert second.requested_s < first.end_s  # asked while the first was still moving
    assert (first.tokens, second.tokens) == (96, 96)
    # once it has arrived, a later request with the same prefix finds it
    later = RequestSpec(2, 1.0, 96, 4, stream_id=0, stream_tokens=64)
    drun, _ = serve([*requests, later], config(), link=slow)
    assert [t.tokens for t in sorted(drun.transfers, key=lambda t: t.rid)] == [96, 96, 32]


def test_a_prefill_engine_waiting_on_its_held_blocks_stops_until_released():
    """Without chunked prefill, a prompt longer than the free pool waits at a prefill engine
    whose blocks are held for a transfer; the engine waits for the release instead of
    spinning (this hung before), and the request runs once the blocks are back."""
    cfg = config(
        max_num_seqs=4,
        max_num_batched_tokens=256,
        max_model_len=257,
        num_blocks=12,
        enable_chunked_prefill=False,
    )
    slow = LINK._replace(seconds_of=lambda b: b / 1e6)
    requests = [RequestSpec(0, 0.0, 100, 4), RequestSpec(1, 0.001, 150, 4)]
    drun, _ = serve(requests, cfg, link=slow)
    assert sorted(r.rid for r in drun.decode.finished) == [0, 1]
    first, second = sorted(drun.prefilled, key=lambda r: r.rid)
    released = min(t.end_s for t in drun.transfers if t.rid == 0)
    assert second.admit_s >= released


def test_a_prompt_over_the_budget_without_chunking_is_an_error_not_a_spin():
    """Chunked prefill off and a prompt longer than max_num_batched_tokens, while the prefill
    engine holds another request's blocks: the engine waits for the release, then reports that
    the request cannot be served (this spun forever before, its clock never moving)."""
    cfg = config(
        max_num_batched_tokens=32, enable_chunked_prefill=False, num_blocks=13, max_num_seqs=3
    )
    slow = LINK._replace(seconds_of=lambda b: b / 1e5)
    with pytest.raises(KvplanError, match="request 1 "):
        serve([RequestSpec(0, 0.0, 14, 2), RequestSpec(1, 0.01, 43, 2)], cfg, link=slow)


class Watch:
    """Every step of every engine: budgets, seats, pools, and when remote requests first run."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.first_decode_step: dict[int, float] = {}
        self.prefill_decoded = 0

    def __call__(self, engine, steps, num_decodes, chunks):
        cfg = self.cfg
        assert num_decodes + sum(n for _, n in chunks) <= cfg.max_num_batched_tokens
        assert len(engine.running) <= cfg.max_num_seqs
        assert engine.bm.num_used_blocks <= cfg.num_blocks
        if engine.prefill_only:
            self.prefill_decoded += num_decodes
            return
        for r, _ in chunks:
            self.first_decode_step.setdefault(r.rid, engine.clock_s)


workloads = st.lists(
    st.tuples(st.floats(0, 1.0), st.integers(1, 120), st.integers(1, 30)), min_size=1, max_size=12
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 30),
    st.sampled_from([1e5, 1e7, 1e9]),
    st.booleans(),
)
# found hanging (a preempted head re-admitted forever while arrived requests held the blocks it
# needed) and failing as unservable (the same head, nothing running), before arrived requests ran
# ahead of the head
@example(
    [
        (0.42, 3, 8),
        (0.22, 35, 23),
        (0.59, 103, 14),
        (0.22, 17, 29),
        (0.03, 42, 12),
        (0.97, 72, 26),
        (0.87, 16, 15),
        (0.69, 105, 24),
        (0.66, 114, 17),
        (0.79, 86, 4),
        (0.73, 73, 18),
        (0.10, 76, 23),
    ],
    1,
    2,
    4,
    1e5,
    False,
)
@example(
    [
        (0.71, 61, 8),
        (0.09, 88, 11),
        (0.84, 4, 15),
        (0.79, 17, 17),
        (0.58, 51, 16),
        (0.51, 19, 28),
        (0.96, 34, 9),
        (0.61, 54, 21),
        (0.02, 72, 5),
        (0.67, 33, 2),
    ],
    1,
    1,
    5,
    1e5,
    True,
)
def test_disaggregated_invariants(items, num_prefill, num_decode, spare, link_bps, caching):
    longest = max(i + o for _, i, o in items)
    cfg = config(
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=longest + 1,
        num_blocks=-(-longest // 16) + 1 + spare,  # one request always fits alone
        enable_prefix_caching=caching,
    )
    requests = sorted((RequestSpec(0, a, i, o) for a, i, o in items), key=lambda r: r.arrival_s)
    requests = [r._replace(rid=k) for k, r in enumerate(requests)]
    link = LINK._replace(seconds_of=lambda b: 1e-6 + b / link_bps)
    watch = Watch(cfg)
    drun, _ = serve(requests, cfg, num_prefill, num_decode, link=link, obs=watch)
    # every request finishes with all its tokens, its KV moved exactly once
    assert sorted(r.rid for r in drun.decode.finished) == [r.rid for r in requests]
    assert all(r.outputs == r.spec.output_tokens for r in drun.decode.finished)
    assert sorted(t.rid for t in drun.transfers) == [r.rid for r in requests]
    assert watch.prefill_decoded == 0
    # no decode work before the request's KV has arrived
    arrived = {t.rid: t.end_s for t in drun.transfers}
    for rid, start in watch.first_decode_step.items():
        assert start >= arrived[rid]
    # transfers into one decode replica run one at a time, each after its allocation
    for d in range(num_decode):
        moved = sorted(
            (t for t in drun.transfers if t.decode_replica == d), key=lambda t: t.start_s
        )
        for before, after in zip(moved, moved[1:], strict=False):
            assert after.start_s >= before.end_s
        assert all(t.start_s >= t.requested_s >= t.prefilled_s for t in moved)
    for p in range(num_prefill):
        sent = sorted(
            (t for t in drun.transfers if t.prefill_replica == p), key=lambda t: t.start_s
        )
        for before, after in zip(sent, sent[1:], strict=False):
            assert after.start_s >= before.end_s
    # every block released: prefill ones after their transfer, decode ones at the end
    for engine in drun.prefill_engines + drun.decode.engines:
        assert engine.bm.num_used_blocks == 0 and engine.held == engine.receiving == 0


def test_simulate_reports_transfers_and_pools():
    spec, gpu = load_model("qwen3-8b"), load_profile("h100")
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=30, input_len=512, output_len=16),
        rates=(4.0,),
        disaggregated=(1, 2),
        series=False,
    )
    result = simulate(spec, gpu, request)
    run = result.runs[0]
    d = run.disaggregated
    assert (result.setup.prefill_replicas, result.setup.decode_replicas) == (1, 2)
    assert result.setup.num_gpus == 3 and run.bench.completed == 30 and d.transfers == 30
    # Qwen3-8B: 36 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes = 144 KiB per token
    assert d.mean_transfer_bytes == 512 * 36 * 8 * 128 * 2 * 2
    # over the profile's network link (one way per GPU), plus its latency
    wire_s = d.mean_transfer_bytes / d.link_one_way_bytes_per_s
    assert d.transfer.median_ms / 1e3 == pytest.approx(wire_s + 5e-6, rel=1e-6)
    assert 0 < d.prefill.engine_busy_fraction < 1 and 0 < run.engine.engine_busy_fraction < 1
    assert run.bench.median_ttft_ms > d.prefill_ttft.median_ms + d.transfer.median_ms
    # the prefill pool's preemptions are reported too (2 GiB pools, 6k-token prompts at
    # once, admitted by their first chunk as vLLM 0.18 did; 0.19 waits for the whole prompt)
    squeezed = SimulateRequest(
        workload=WorkloadSpec(num_prompts=40, input_len=6000, output_len=10),
        rates=(math.inf,),
        disaggregated=(1, 1),
        network_gbps=10.0,  # a slow link: prefill blocks stay held while the KV moves
        serve=ServeOptions(
            kv_cache_memory_bytes=2 * 2**30,
            max_num_batched_tokens=2048,
            max_model_len=8192,
            vllm_version="0.18",
        ),
        series=False,
    )
    tight = simulate(spec, gpu, squeezed)
    assert tight.runs[0].disaggregated.prefill.preemptions > 0
    assert tight.runs[0].engine.preemptions == 0
    assert "sim-preemptions" in [n.id for n in tight.notes]
    assert "sim-weak-disagg-hybrid" not in [n.id for n in tight.notes]
    gemma = simulate(
        load_model("gemma-3-27b"),
        gpu,
        request._replace(workload=request.workload._replace(num_prompts=4)),
    )
    assert "sim-weak-disagg-hybrid" in [n.id for n in gemma.notes]
    with pytest.raises(KvplanError, match="drop --replicas"):
        simulate(spec, gpu, request._replace(replicas=2))
    with pytest.raises(KvplanError, match="network-gbps"):
        simulate(spec, gpu, request._replace(network_gbps=0.0))
    tp2 = simulate(spec, gpu, request._replace(serve=ServeOptions(tp=2), link="interconnect"))
    # TP 2: each rank holds half the KV heads and receives its half over its own link
    assert tp2.runs[0].disaggregated.mean_transfer_bytes == d.mean_transfer_bytes


def test_the_api_servers_serial_part_is_served_in_turn_as_in_plain_runs():
    """Frontend.served_s prices both pools' API servers: a burst of three requests reaches one
    prefill server's scheduler one serial interval apart (request_s after the first), and a
    front end with no serial part (vLLM's) lets them all in request_s after they were sent."""
    burst = [RequestSpec(i, 0.0, 64, 4) for i in range(3)]
    serial = Frontend(request_s=0.015, per_token_s=0.0, serial_request_s=0.005)
    drun, _ = serve(burst, config(), frontend=serial)
    arrivals = sorted(r.arrival_s for r in drun.prefilled)
    assert arrivals == pytest.approx([0.015, 0.020, 0.025])
    # the decode server's process serves the forwarded requests in turn too
    decode_arrivals = sorted(r.arrival_s for r in drun.decode.finished)
    gaps = [b - a for a, b in zip(decode_arrivals, decode_arrivals[1:], strict=False)]
    assert min(gaps) >= 0.005 - 1e-12
    parallel, _ = serve(burst, config(), frontend=serial._replace(serial_request_s=0.0))
    assert [r.arrival_s for r in parallel.prefilled] == pytest.approx([0.015] * 3)


def test_simulate_disaggregated_uses_the_engines_front_end_rule():
    """simulate --disaggregated takes its API server from engine_frontend like a plain run: a
    serial part given is served in turn (vLLM times none, so by default nothing waits)."""
    spec, gpu = load_model("qwen3-8b"), load_profile("h100")

    def ttft(frontend: Frontend) -> float:
        request = SimulateRequest(
            workload=WorkloadSpec(num_prompts=20, input_len=256, output_len=4),
            rates=(math.inf,),
            disaggregated=(1, 1),
            frontend=frontend,
            series=False,
        )
        return simulate(spec, gpu, request).runs[0].bench.p99_ttft_ms

    # 20 requests at once, 50 ms each in turn: the last two reach the prefill scheduler 0.9 s
    # and 0.95 s after they were sent; served at once, all of them 15.6 ms after
    plain = Frontend()
    assert ttft(plain._replace(serial_request_s=0.050)) > 900.0 > ttft(plain)
