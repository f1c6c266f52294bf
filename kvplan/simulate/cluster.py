"""Clients, a router, and engine replicas with their API servers, on one clock.

- Clients send each request at its scheduled time; with a concurrency limit a request waits for a
  free slot first (`vllm bench serve --max-concurrency`: the wait is not part of its TTFT).
- The API server adds `request_s` before the engine sees a request, and streams every token it
  is handed: one server per replica, `per_token_s` of work per token, in the order the engine
  produced them. When the engine outpaces it, tokens queue and the client sees the server's pace.
- The router picks a replica per request: round robin, least outstanding requests, or cache-aware
  (the replica whose prefix cache holds the longest prefix of the prompt, among those not much
  busier than the least busy).

Events are taken in time order; an engine steps when its clock is earliest. A run of decode-only
steps stops before the next arrival, so the router and the queues always see the replicas' state
at their last step boundary.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from kvplan.errors import KvplanError
from kvplan.record import NamedTuple
from kvplan.simulate.engine import Engine, Req, _Unservable
from kvplan.simulate.frontend import Frontend
from kvplan.simulate.workload import RequestSpec, prompt_token_ids

ROUTERS = ("round_robin", "least_outstanding", "cache_aware")
CACHE_AWARE_SLACK = 8  # requests: how much busier than the least busy a cache hit may be


class ClusterRun(NamedTuple):
    finished: list  # Req, with client times
    failed: list  # RequestSpec refused (longer than max_model_len)
    engines: list


def run(
    requests: list[RequestSpec],
    engines: list[Engine],
    router: str = "round_robin",
    max_concurrency: int | None = None,
    frontend: Frontend = Frontend(),
    max_model_len: int | None = None,
) -> ClusterRun:
    """Serve `requests` on `engines` until every request finishes."""
    if router not in ROUTERS:
        raise KvplanError(f"--router {router!r}: choose {', '.join(ROUTERS)}")
    arrivals: list = []  # (server arrival, rid, dispatch, spec)
    done: list = []  # (client completion, rid, req)
    pending = deque(requests)
    free_slots = max_concurrency if max_concurrency else math.inf
    failed: list[RequestSpec] = []
    finished: list[Req] = []
    outstanding = [0] * len(engines)
    turn = [0]

    def dispatch(now: float) -> None:
        nonlocal free_slots
        while pending and free_slots > 0:
            spec = pending.popleft()
            start = max(spec.arrival_s, now)
            free_slots -= 1
            heapq.heappush(arrivals, (start + frontend.request_s, spec.rid, start, spec))

    dispatch(0.0)
    coupled = max_concurrency is not None and len(engines) > 1
    while arrivals or done or any(e.has_work for e in engines):
        next_arrival = arrivals[0][0] if arrivals else math.inf
        next_done = done[0][0] if done else math.inf
        busy = [e for e in engines if e.has_work]
        engine = min(busy, key=_clock) if busy else None
        if engine is not None and engine.clock_s < min(next_arrival, next_done):
            horizon = next_arrival
            if max_concurrency is not None:
                horizon = min(horizon, next_done + frontend.request_s)
            if coupled:
                horizon = min([horizon] + [e.clock_s for e in busy if e is not engine])
            try:
                for r in engine.step(horizon):
                    heapq.heappush(done, (r.last_client_s, r.rid, r))
            except _Unservable as exc:
                raise KvplanError(
                    f"request {exc.req.rid} ({exc.req.num_tokens:,} tokens) does not fit the KV "
                    "pool even alone; lower --max-model-len or raise the KV memory"
                ) from None
        elif next_done <= next_arrival:
            _, _, r = heapq.heappop(done)
            outstanding[r.replica] -= 1
            finished.append(r)
            if max_concurrency is not None:
                free_slots += 1
                dispatch(next_done)
        else:
            now, _, start, spec = heapq.heappop(arrivals)
            target = spec.output_tokens
            if max_model_len is not None:
                if spec.input_tokens >= max_model_len:
                    failed.append(spec)
                    if max_concurrency is not None:
                        free_slots += 1
                        dispatch(now)
                    continue
                target = min(target, max_model_len - spec.input_tokens)
            index = _route(router, spec, engines, outstanding, turn)
            req = Req(spec, start, now, target)
            req.replica = index
            outstanding[index] += 1
            engines[index].admit(req, now)
    return ClusterRun(finished, failed, engines)


def _clock(engine: Engine) -> float:
    return engine.clock_s


def _route(router: str, spec: RequestSpec, engines: list[Engine], outstanding, turn) -> int:
    if len(engines) == 1:
        return 0
    if router == "round_robin":
        index = turn[0] % len(engines)
        turn[0] += 1
        return index
    least = min(range(len(engines)), key=outstanding.__getitem__)
    if router == "least_outstanding":
        return least
    ids = prompt_token_ids(spec)[:-1]
    limit = outstanding[least] + max(CACHE_AWARE_SLACK, outstanding[least])
    best, best_key = least, (-1, 0)
    for index, engine in enumerate(engines):
        if outstanding[index] > limit:
            continue
        key = (engine.bm.cached_prefix_tokens(ids), -outstanding[index])
        if key > best_key:
            best, best_key = index, key
    return best
