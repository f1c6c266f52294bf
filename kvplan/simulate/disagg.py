"""Disaggregated prefill/decode serving: P prefill replicas, D decode replicas, a proxy between
them, and each request's KV cache moved from one pool to the other, as vLLM runs it with the
NixlConnector behind its proxy (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py):

1. The proxy sends the request to a prefill replica (round robin, or the --router choice) with
   max_tokens = 1 and streaming off. The prefill engine schedules prompts only (its own budget and
   seats) and samples one token; the response returns through its API server, and the engine keeps
   the request's blocks until the decode side has read them (NixlConnector.request_finished:
   delay_free_blocks, freed on the decode side's notification).
2. The proxy then sends the request to a decode replica and streams that replica's response to the
   client. The decode scheduler allocates the prompt's blocks when the request reaches the head of
   its queue (no token budget, no seat; local prefix hits are not transferred:
   get_num_new_matched_tokens = prompt - locally computed tokens) and its workers read the KV.
3. Each of a replica's tp x pp ranks sends or receives its share over its own link, all in step
   (formulas.comm kv_transfer_time_s). A transfer takes both its prefill replica's outgoing
   links and its decode replica's incoming ones; each side serves its transfers first come
   first served, so a prefill replica feeding several decode replicas sends one at a time.
   The connector reads whole blocks: the prompt's blocks past the decode side's local hits.
4. Once the KV has arrived, the next decode step recomputes the last prompt token
   (Scheduler._update_waiting_for_remote_kv: num_computed_tokens = num_tokens - 1) and samples the
   first token the client sees; the rest follow as in any decode. A preempted request recomputes
   on its decode replica.

So TTFT, as `vllm bench serve` measures it through the proxy, ends at the decode replica's first
token: prefill, its response, the decode server's request handling, the queue for blocks, the
transfer and one decode step. The prefill replica's own first token is reported beside it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

from kvplan.engines.context_limit import ContextLimit
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple
from kvplan.simulate.cluster import ROUTERS, ClusterRun, Frontend, _route
from kvplan.simulate.engine import NEEDS_KV, Engine, Req, _Unservable
from kvplan.simulate.workload import RequestSpec

# event kinds, in the order they are taken at equal times
_KV_DONE, _AT_DECODE, _AT_PREFILL, _DONE = 0, 1, 2, 3


class TransferModel(NamedTuple):
    """What moving a request's KV costs: `bytes_of(tokens)` (all decode ranks together) and
    `seconds_of(bytes)` over one decode replica's links."""

    link: str
    one_way_bytes_per_s: float
    latency_s: float
    bytes_of: Callable[[int], float]  # tokens -> bytes
    seconds_of: Callable[[float], float]  # bytes -> seconds


class Transfer(NamedTuple):
    rid: int
    prefill_replica: int
    decode_replica: int
    tokens: int
    transfer_bytes: float
    prefilled_s: float  # the prefill replica sampled the request's token
    requested_s: float  # the decode replica allocated its blocks and asked for the KV
    start_s: float  # the link took it
    end_s: float  # the KV is on the decode replica


class DisaggRun(NamedTuple):
    decode: ClusterRun  # client-facing: finished requests, decode engines
    prefill_engines: list
    prefilled: list  # the prefill engines' requests (handed off)
    transfers: list  # Transfer, in the order they ended
    link_busy_s: list  # per decode replica: time its incoming links moved KV
    send_busy_s: list  # per prefill replica: time its outgoing links moved KV


def run(
    requests: list[RequestSpec],
    prefill: list[Engine],
    decode: list[Engine],
    transfer: TransferModel,
    router: str = "round_robin",
    max_concurrency: int | None = None,
    frontend: Frontend = Frontend(),
    context: ContextLimit | None = None,
) -> DisaggRun:
    """Serve `requests` through the prefill pool, the links and the decode pool; `context`: the
    server's rule for requests against max_model_len (cluster.run)."""
    if router not in ROUTERS:
        raise KvplanError(f"--router {router!r}: choose {', '.join(ROUTERS)}")
    engines = [*prefill, *decode]
    events: list = []  # (time, kind, rid, payload)
    pending = deque(requests)
    free_slots = max_concurrency if max_concurrency else math.inf
    failed: list[RequestSpec] = []
    finished: list[Req] = []
    prefilled: list[Req] = []
    transfers: list[Transfer] = []
    out_p, out_d = [0] * len(prefill), [0] * len(decode)
    turn_p, turn_d = [0], [0]
    link_free = [0.0] * len(decode)
    link_busy = [0.0] * len(decode)
    send_free = [0.0] * len(prefill)
    send_busy = [0.0] * len(prefill)
    bytes_cache: dict[int, float] = {}
    # each pool's API server processes (one per replica): when each is free; a request takes
    # the one free first and is priced by Frontend.served_s, as in cluster.run
    free_p, free_d = [0.0] * len(prefill), [0.0] * len(decode)

    def served(free: list[float], start: float) -> float:
        server = min(range(len(free)), key=free.__getitem__)
        free[server] = frontend.served_s(start, free[server])
        return free[server]

    def dispatch(now: float) -> None:
        nonlocal free_slots
        while pending and free_slots > 0:
            spec = pending.popleft()
            start = max(spec.arrival_s, now)
            free_slots -= 1
            heapq.heappush(events, (served(free_p, start), _AT_PREFILL, spec.rid, start, spec))

    def collect(engine: Engine, index: int) -> None:
        """What a step produced: handoffs to the proxy, transfers to start."""
        if engine.handoffs:
            for r in engine.handoffs:
                out_p[index] -= 1
                prefilled.append(r)
                # the proxy forwards the request; the decode server parses it like any other
                at = served(free_d, r.first_client_s)
                heapq.heappush(events, (at, _AT_DECODE, r.rid, None, r))
            engine.handoffs.clear()
        if engine.kv_requests:
            d = index - len(prefill)
            for r, asked_s, tokens in engine.kv_requests:
                size = bytes_cache.get(tokens)
                if size is None:
                    size = bytes_cache[tokens] = transfer.bytes_of(tokens)
                seconds = transfer.seconds_of(size)
                source = r.peer
                assert source is not None, "a request asking for KV came from a prefill engine"
                p = source.replica
                start = max(asked_s, link_free[d], send_free[p])
                end = start + seconds
                link_free[d] = send_free[p] = end
                link_busy[d] += seconds
                send_busy[p] += seconds
                transfers.append(
                    Transfer(
                        r.rid,
                        source.replica,
                        d,
                        tokens,
                        size,
                        source.first_client_s,
                        asked_s,
                        start,
                        end,
                    )
                )
                heapq.heappush(events, (end, _KV_DONE, r.rid, d, r))
            engine.kv_requests.clear()

    dispatch(0.0)
    while events or any(e.has_work for e in engines):
        next_event = events[0][0] if events else math.inf
        busy = [i for i, e in enumerate(engines) if e.has_work]
        index = min(busy, key=lambda i: engines[i].clock_s) if busy else -1
        if index >= 0 and engines[index].clock_s < next_event:
            engine = engines[index]
            # a step must not run past anything another engine may yet send it
            horizon = min([next_event] + [engines[i].clock_s for i in busy if i != index])
            try:
                done = engine.step(horizon)
            except _Unservable as exc:
                raise KvplanError(
                    f"request {exc.req.rid} ({exc.req.num_tokens:,} tokens) does not fit a "
                    f"{'prefill' if engine.prefill_only else 'decode'} replica's KV pool even "
                    "alone; lower --max-model-len or raise the KV memory"
                ) from None
            for r in done:
                heapq.heappush(events, (r.last_client_s, _DONE, r.rid, None, r))
            collect(engine, index)
            continue
        now, kind, _, extra, item = heapq.heappop(events)
        if kind == _AT_PREFILL:
            spec = item
            if context is not None and context.refuses(spec.input_tokens, spec.output_tokens):
                failed.append(spec)
                if max_concurrency is not None:
                    free_slots += 1
                    dispatch(now)
                continue
            p = _route(router, spec, prefill, out_p, turn_p)
            req = Req(spec, extra, now, 1)  # max_tokens = 1
            req.replica = p
            out_p[p] += 1
            prefill[p].admit(req, now)
        elif kind == _AT_DECODE:
            source = item
            spec = source.spec
            target = spec.output_tokens
            if context is not None:
                target = context.output_tokens(spec.input_tokens, target)
            d = _route(router, spec, decode, out_d, turn_d)
            req = Req(spec, source.dispatch_s, now, target)
            req.replica = d
            req.remote = NEEDS_KV
            req.peer = source
            out_d[d] += 1
            decode[d].admit(req, now)
        elif kind == _KV_DONE:
            req = item
            decode[extra].kv_received(req, now)
            source = req.peer
            prefill[source.replica].release(source, now)
        else:
            r = item
            out_d[r.replica] -= 1
            finished.append(r)
            if max_concurrency is not None:
                free_slots += 1
                dispatch(now)
    transfers.sort(key=lambda t: t.end_s)
    return DisaggRun(
        ClusterRun(finished, failed, decode), prefill, prefilled, transfers, link_busy, send_busy
    )
