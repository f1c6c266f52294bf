"""What `vllm bench serve` reports, computed from a simulated run with its definitions
(vllm/benchmarks/serve.py, `calculate_metrics`):

- TTFT = first token received − request sent; E2EL = last token received − request sent;
- TPOT per request = (E2EL − TTFT) / (output tokens − 1), for requests with more than one token;
- ITL = every gap between consecutive tokens of a request, pooled over all requests;
- duration = first request sent to last token received; throughputs = totals / duration;
- percentiles as numpy.percentile (linear interpolation) over the values (ITL: the pooled gaps);
- peak output throughput: output tokens received per 1-second bucket, the largest bucket;
- peak concurrent requests: the most requests between sent and last token at any instant.

Plus what the engine itself would show: peak KV-cache usage, preemptions, prefix-cache hit rate,
mean running and waiting requests, and where the engine's time went.
"""

from __future__ import annotations

import math

from kvplan.formulas.batch_step import ENGINE_TERMS
from kvplan.record import NamedTuple
from kvplan.units import MS

PERCENTILES = (90, 99)
SERIES_POINTS = 800  # samples kept for the over-time charts


class Latency(NamedTuple):
    mean_ms: float | None
    median_ms: float | None
    std_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


class BenchResult(NamedTuple):
    """`vllm bench serve --save-result` keys, with its units (ms, tokens/s, seconds)."""

    completed: int
    failed: int
    request_rate: float | str | None  # "inf", or None for a trace's own arrival times
    burstiness: float
    max_concurrency: int | None
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    std_e2el_ms: float | None
    p90_e2el_ms: float | None
    p99_e2el_ms: float | None


class ReplicaStats(NamedTuple):
    replica: int
    requests: int
    prefix_hit_rate: float | None
    preemptions: int
    peak_kv_usage: float


class EngineStats(NamedTuple):
    """What the engine's own logs and metrics would show."""

    peak_kv_usage: float  # fraction of the KV pool's blocks in use at the fullest step
    preemptions: int
    prefix_hit_rate: float | None  # tokens found cached / tokens looked up, at admissions
    mean_running_requests: float  # time-weighted over the time the engine was busy
    mean_waiting_requests: float
    mean_queue_ms: float | None  # arrival at the engine to first scheduled, mean
    engine_busy_fraction: float  # busy time / duration (mean over replicas)
    frontend_busy_fraction: float  # API server streaming time / duration (the busiest)
    step_time_shares: dict  # busy time by term, fractions summing to 1
    replicas: list[ReplicaStats]
    # of the busy time, the fraction in the step terms that hold a part no kernel table times
    # (StepModel.untimed_s: priced on a stand-in): 0 where every part is timed; it scales the
    # partial class's interval (kvplan.plans.intervals.log_quantiles)
    untimed_time_fraction: float = 0.0
    # of the median TTFT, the fraction in costs no kernel table times: the API server's
    # per-request cost and the fixed terms of the prefill steps on their critical path
    # (ttft_untimed_fraction); it widens the TTFT interval (kvplan.plans.intervals.log_quantiles)
    ttft_untimed_fraction: float = 0.0
    # of the duration, the busiest API server's per-request cost (Frontend.request_s: BLIS's
    # fitted latency, no kernel table's) were it paid in turn (frontend_request_fraction); it
    # widens the throughput interval (kvplan.plans.intervals.log_quantiles)
    frontend_request_fraction: float = 0.0
    # of the busy time, the launch seconds priced on another release's eager DSA module rows
    # (StepTime.stand_in_launch_s): above 0, the run names those rows as an untimed part
    # (batch_step.run_untimed_parts)
    stand_in_launch_fraction: float = 0.0


class Series(NamedTuple):
    """Replica 0 over time (downsampled)."""

    time_s: list
    kv_usage: list
    running: list
    waiting: list


def weighted_percentile(values, weights, q: float) -> float:
    """numpy.percentile(linear) of the list where each value appears `weight` times."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=float)[order]
    w = np.asarray(weights, dtype=float)[order]
    total = w.sum()
    cumulative = np.cumsum(w)
    rank = q / 100 * (total - 1)
    lo = math.floor(rank)
    hi = math.ceil(rank)
    v_lo = v[np.searchsorted(cumulative, lo + 1, side="left")]
    v_hi = v[np.searchsorted(cumulative, hi + 1, side="left")]
    return float(v_lo + (v_hi - v_lo) * (rank - lo))


def _latency(values, weights=None) -> Latency:
    import numpy as np

    if values is None or len(values) == 0:
        return Latency(None, None, None, None, None)
    v = np.asarray(values, dtype=float) / MS
    if weights is None:
        return Latency(
            float(v.mean()),
            float(np.median(v)),
            float(v.std()),
            *(float(np.percentile(v, q)) for q in PERCENTILES),
        )
    w = np.asarray(weights, dtype=float)
    keep = w > 0
    v, w = v[keep], w[keep]
    if not len(v):
        return Latency(None, None, None, None, None)
    mean = float((v * w).sum() / w.sum())
    std = float(math.sqrt(max(0.0, (w * (v - mean) ** 2).sum() / w.sum())))
    return Latency(
        mean,
        weighted_percentile(v, w, 50),
        std,
        *(weighted_percentile(v, w, q) for q in PERCENTILES),
    )


def _concat(values):
    import numpy as np

    return np.asarray(values, dtype=float)


def bench_result(run, request_rate, burstiness: float, max_concurrency) -> BenchResult:
    """The bench's numbers for a finished ClusterRun."""
    import numpy as np

    finished = run.finished
    dispatch = np.array([r.dispatch_s for r in finished])
    first = np.array([r.first_client_s for r in finished])
    last = np.array([r.last_client_s for r in finished])
    outputs = np.array([r.outputs for r in finished])
    inputs = np.array([r.input_tokens for r in finished])
    ttft = first - dispatch
    e2el = last - dispatch
    many = outputs > 1
    tpot = (e2el[many] - ttft[many]) / (outputs[many] - 1)
    gaps, weights = [], []
    emitted_times, emitted_counts = [], []
    for engine in run.engines:
        client = _concat(engine.log.client_s)
        decode = _concat(engine.log.decode_tokens)
        emitted = _concat(engine.log.emitted)
        if len(client) > 1:
            gaps.append(np.diff(client))
            weights.append(decode[1:])
        for before, after, tokens in engine.resume_gaps:
            gaps.append(np.array([client[after] - client[before]]))
            weights.append(np.array([float(tokens)]))
        emitted_times.append(client)
        emitted_counts.append(emitted)
    start = float(dispatch.min()) if len(finished) else 0.0
    duration = float(last.max()) - start if len(finished) else 0.0
    peak_tokens = 0.0
    if emitted_times:
        times, counts = np.concatenate(emitted_times), np.concatenate(emitted_counts)
        if len(times):
            # Summed per occupied second only: a bincount over the span allocated 8 bytes per
            # second of it (7.45 GiB for a trace with an arrival at 1e9 s).
            buckets = np.maximum(np.floor(times - start), 0)
            _, which = np.unique(buckets, return_inverse=True)
            peak_tokens = float(np.bincount(which.ravel(), weights=counts).max())
    total_in, total_out = int(inputs.sum()), int(outputs.sum())
    rate = duration if duration > 0 else math.inf
    ttft_l, tpot_l, e2el_l = _latency(ttft), _latency(tpot), _latency(e2el)
    itl_l = _latency(np.concatenate(gaps), np.concatenate(weights)) if gaps else _latency(None)
    return BenchResult(
        completed=len(finished),
        failed=len(run.failed),
        request_rate=None
        if request_rate is None
        else ("inf" if math.isinf(request_rate) else request_rate),
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        duration=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(finished) / rate,
        output_throughput=total_out / rate,
        total_token_throughput=(total_in + total_out) / rate,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=_peak_overlap(dispatch, last),
        **_keys("ttft", ttft_l),
        **_keys("tpot", tpot_l),
        **_keys("itl", itl_l),
        **_keys("e2el", e2el_l),
    )


def _keys(metric: str, latency: Latency) -> dict:
    return {
        f"mean_{metric}_ms": latency.mean_ms,
        f"median_{metric}_ms": latency.median_ms,
        f"std_{metric}_ms": latency.std_ms,
        f"p90_{metric}_ms": latency.p90_ms,
        f"p99_{metric}_ms": latency.p99_ms,
    }


def _peak_overlap(starts, ends) -> int:
    import numpy as np

    if not len(starts):
        return 0
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((deltas, times))  # at a tie, an end before a start
    return int(np.cumsum(deltas[order]).max())


def engine_stats(
    run,
    duration: float,
    frontend_per_token_s: float,
    median_ttft_ms: float | None = None,
    request_s: float = 0.0,
) -> EngineStats:
    """What the engine's logs would show; `median_ttft_ms` and the API server's `request_s`
    give the TTFT's untimed fraction (ttft_untimed_fraction; 0 without a TTFT)."""
    import numpy as np

    replicas, terms = [], dict.fromkeys(ENGINE_TERMS, 0.0)
    weighted_running = weighted_waiting = busy = 0.0
    frontend_busy = 0.0
    per_replica_requests = [0] * len(run.engines)
    for r in run.finished:
        per_replica_requests[r.replica] += 1
    for index, engine in enumerate(run.engines):
        durations = _concat(engine.log.duration_s)
        running = _concat(engine.log.running)
        waiting = _concat(engine.log.waiting)
        weighted_running += float((durations * running).sum())
        weighted_waiting += float((durations * waiting).sum())
        busy += float(durations.sum())
        emitted = float(_concat(engine.log.emitted).sum())
        frontend_busy = max(frontend_busy, emitted * frontend_per_token_s)
        for key in terms:
            terms[key] += engine.term_s[key]
        replicas.append(
            ReplicaStats(
                index,
                per_replica_requests[index],
                engine.hit_tokens / engine.queried_tokens if engine.queried_tokens else None,
                engine.preemptions,
                engine.peak_used / engine.config.num_blocks,
            )
        )
    total_terms = sum(terms.values()) or 1.0
    queued = [r.admit_s - r.arrival_s for r in run.finished if r.admit_s >= 0]
    hits = sum(e.hit_tokens for e in run.engines)
    queried = sum(e.queried_tokens for e in run.engines)
    return EngineStats(
        peak_kv_usage=max(r.peak_kv_usage for r in replicas),
        preemptions=sum(r.preemptions for r in replicas),
        prefix_hit_rate=hits / queried if queried else None,
        mean_running_requests=weighted_running / busy if busy else 0.0,
        mean_waiting_requests=weighted_waiting / busy if busy else 0.0,
        mean_queue_ms=float(np.mean(queued)) / MS if queued else None,
        engine_busy_fraction=busy / len(run.engines) / duration if duration > 0 else 0.0,
        frontend_busy_fraction=frontend_busy / duration if duration > 0 else 0.0,
        step_time_shares={key: value / total_terms for key, value in terms.items()},
        replicas=replicas,
        untimed_time_fraction=untimed_fraction(run.engines),
        stand_in_launch_fraction=untimed_share(
            sum(e.stand_in_launch_s for e in run.engines), sum(e.busy_s for e in run.engines)
        ),
        ttft_untimed_fraction=ttft_untimed_fraction(
            run.engines, None if median_ttft_ms is None else median_ttft_ms * MS, request_s
        ),
        frontend_request_fraction=frontend_request_fraction(
            max(per_replica_requests, default=0), request_s, duration
        ),
    )


def frontend_request_fraction(requests: int, request_s: float, duration_s: float) -> float:
    """Of a run's `duration_s`, the API server's per-request cost (`request_s`, BLIS's fitted
    latency: HTTP parsing, validation, tokenization, queue insertion) for the `requests` its
    busiest server took, were they paid in turn. The simulation pays each as a delay of its own
    request, all at once (kvplan.simulate.cluster), while the API server is one process by
    default (vLLM's `--api-server-count` 1, SGLang's TokenizerManager), so in a burst of short
    requests their costs may queue behind each other, and no measurement on a serving host
    says how much of request_s is that process's own work: the share of the run that rests on
    it (at most 1), which widens the throughput interval (kvplan.plans.intervals.cost_ends).
    0 for an empty run."""
    if duration_s <= 0:
        return 0.0
    return min(1.0, requests * request_s / duration_s)


def untimed_fraction(engines) -> float:
    """Over the run's engines, the untimed seconds of their steps (StepTime.untimed_s) over
    their busy seconds (0 where they never stepped)."""
    return untimed_share(sum(e.untimed_s for e in engines), sum(e.busy_s for e in engines))


def untimed_share(untimed_s: float, busy_s: float) -> float:
    """Of `busy_s` seconds of steps, the share in untimed seconds (0 where none ran)."""
    return min(1.0, untimed_s / busy_s) if busy_s > 0 else 0.0


def ttft_untimed_fraction(engines, ttft_s: float | None, request_s: float) -> float:
    """Of a TTFT of `ttft_s`, the fraction in costs no kernel table times: the API server's
    `request_s` (kvplan.simulate.frontend, BLIS's fit), and of the rest, spent in the engines'
    steps before the first token, the share that the steps holding a prompt chunk spent in
    FIXED_TERMS (the launch and host constants of kernel_tables/host_overheads.json) on their
    critical path (batch_step.critical_fixed_s: host time async scheduling hides not counted):
    (request_s + f (ttft - request_s)) / ttft. At one request at a time the rest is the lone
    prefill and f its own share; under load it is the queue's steps, priced at the prefill
    steps' mean share. 0 where there is no TTFT."""
    busy_s = sum(e.prefill_busy_s for e in engines)
    fixed_s = sum(e.prefill_fixed_s for e in engines)
    return ttft_untimed_share(ttft_s, request_s, busy_s, fixed_s)


def ttft_untimed_share(
    ttft_s: float | None, request_s: float, prefill_busy_s: float, prefill_fixed_s: float
) -> float:
    """ttft_untimed_fraction's rule on its sums: of a TTFT of `ttft_s`, the API server's
    `request_s` and, of the rest, the share `prefill_fixed_s / prefill_busy_s` of the steps that
    held a prompt chunk (0 where there is no TTFT)."""
    if not ttft_s or ttft_s <= 0:
        return 0.0
    fixed = prefill_fixed_s / prefill_busy_s if prefill_busy_s > 0 else 0.0
    front_s = min(request_s, ttft_s)
    return min(1.0, (front_s + fixed * (ttft_s - front_s)) / ttft_s)


def series(engine) -> Series:
    """KV usage, running and waiting requests of one replica over time, downsampled."""
    import numpy as np

    time_s = _concat(engine.log.end_s)
    if not len(time_s):
        return Series([], [], [], [])
    pick = np.unique(np.linspace(0, len(time_s) - 1, min(SERIES_POINTS, len(time_s))).astype(int))
    usage = _concat(engine.log.kv_used) / engine.config.num_blocks
    return Series(
        [float(x) for x in time_s[pick]],
        [float(x) for x in usage[pick]],
        [int(x) for x in _concat(engine.log.running)[pick]],
        [int(x) for x in _concat(engine.log.waiting)[pick]],
    )


class DisaggStats(NamedTuple):
    """Disaggregated serving: the KV transfers and the prefill pool (the decode pool's figures
    are the run's EngineStats). Times in ms, as the bench's."""

    prefill_replicas: int
    decode_replicas: int
    link: str
    link_one_way_bytes_per_s: float
    transfers: int
    mean_transfer_bytes: float | None
    transfer: Latency  # on the wire: one request's KV over the decode replica's links
    link_wait: Latency  # queued behind other transfers on either replica's links
    kv_wait: Latency  # the decode replica received the request -> its KV arrived
    prefill_ttft: Latency  # request sent -> the prefill replica's one-token response
    link_busy_fraction: float  # the busiest replica's links (sending or receiving) / duration
    prefill: EngineStats  # the prefill pool as its engines would show it


def disagg_stats(drun, duration: float, frontend_per_token_s: float, transfer) -> DisaggStats:
    """The transfers' distributions and the prefill pool's utilisation for a finished DisaggRun."""
    import numpy as np

    moved = drun.transfers
    on_wire = [t.end_s - t.start_s for t in moved]
    queued = [t.start_s - t.requested_s for t in moved]
    arrived = {t.rid: t.end_s for t in moved}
    waits = [arrived[r.rid] - r.arrival_s for r in drun.decode.finished if r.rid in arrived]
    prefill_run = type(drun.decode)(drun.prefilled, [], drun.prefill_engines)
    ttft = [r.first_client_s - r.dispatch_s for r in drun.prefilled]
    return DisaggStats(
        prefill_replicas=len(drun.prefill_engines),
        decode_replicas=len(drun.decode.engines),
        link=transfer.link,
        link_one_way_bytes_per_s=transfer.one_way_bytes_per_s,
        transfers=len(moved),
        mean_transfer_bytes=float(np.mean([t.transfer_bytes for t in moved])) if moved else None,
        transfer=_latency(on_wire),
        link_wait=_latency(queued),
        kv_wait=_latency(waits),
        prefill_ttft=_latency(ttft),
        link_busy_fraction=(
            max(*drun.link_busy_s, *drun.send_busy_s) / duration if duration > 0 else 0.0
        ),
        prefill=engine_stats(prefill_run, duration, frontend_per_token_s),
    )
