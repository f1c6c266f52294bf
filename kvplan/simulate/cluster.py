"""Clients, a router, and engine replicas with their API servers, on one clock.

- Clients send each request at its scheduled time; with a concurrency limit a request waits for a
  free slot first (`vllm bench serve --max-concurrency`: the wait is not part of its TTFT).
- The API server adds `request_s` before the engine sees a request (its `serial_request_s`
  part done by one process per replica, request after request: at a burst the requests reach
  the engines that far apart, Frontend.served_s), and streams every token it is handed: one server per replica, `per_token_s` of work per token, in the order the engine
  produced them. When the engine outpaces it, tokens queue and the client sees the server's pace.
- The router picks a replica per request: round robin, least outstanding requests, or cache-aware
  (the replica whose prefix cache holds the longest prefix of the prompt, among those not much
  busier than the least busy).

Events are taken in time order; an engine steps when its clock is earliest. A run of decode-only
steps stops before the next arrival, so the router and the queues always see the replicas' state
at their last step boundary.

DP-attention ranks (`lockstep` > 1: each run of that many engines is one group) step together:
every rank joins each MoE layer's all-to-all or all-gather, so a step lasts as long as the
slowest rank's and a rank with nothing to run steps a dummy batch while any rank of its group
has work (vLLM: DPEngineCoreProc.run_busy_loop runs execute_dummy_batch when its scheduler ran
nothing and the wave is on; SGLang: prepare_mlp_sync_batch gathers every rank's token count each
step and gives an idle rank an idle batch while any count is above 0). Each rank's own scheduler
decides its batch (`Lockstep`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

from kvplan.engines.context_limit import ContextLimit
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import (
    BatchShape,
    lockstep_step,
)
from kvplan.formulas.step_time import StepTime
from kvplan.record import NamedTuple
from kvplan.simulate import engine as engine_rules
from kvplan.simulate.engine import Engine, Req, SwapSpaceExhausted, _Unservable
from kvplan.simulate.frontend import Frontend
from kvplan.simulate.workload import RequestSpec, prompt_token_ids

ROUTERS = ("round_robin", "least_outstanding", "cache_aware")
# a rank's plan of one step: its BatchShape, and what settles the step given its time
Plan = tuple[BatchShape, Callable[[StepTime], list[Req]]]
CACHE_AWARE_SLACK = 8  # requests: how much busier than the least busy a cache hit may be


class ClusterRun(NamedTuple):
    finished: list  # Req, with client times
    failed: list  # RequestSpec the server refused (ContextLimit.refuses)
    engines: list


def run(
    requests: list[RequestSpec],
    engines: list[Engine],
    router: str = "round_robin",
    max_concurrency: int | None = None,
    frontend: Frontend = Frontend(),
    context: ContextLimit | None = None,
    lockstep: int = 1,
    servers: int | None = None,
) -> ClusterRun:
    """Serve `requests` on `engines` until every request finishes; `lockstep` > 1: the engines
    are DP-attention ranks, each run of `lockstep` of them stepping together (Lockstep);
    `servers`: the API server processes in front of them (api_servers; None: one per engine, a
    lockstep group being one);
    `context`: the server's rule for requests against max_model_len (a refused request is
    failed, kvplan.engines.context_limit), None: every request served as asked."""
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
    # each server's front-end process: when it is free (one per replica, its DP ranks behind
    # it: api_servers); a request takes the one free first
    free_s = [0.0] * (servers or max(1, len(engines) // max(1, lockstep)))

    def dispatch(now: float) -> None:
        nonlocal free_slots
        while pending and free_slots > 0:
            spec = pending.popleft()
            start = max(spec.arrival_s, now)
            free_slots -= 1
            server = min(range(len(free_s)), key=free_s.__getitem__)
            served = frontend.served_s(start, free_s[server])
            free_s[server] = served
            heapq.heappush(arrivals, (served, spec.rid, start, spec))

    dispatch(0.0)
    units: list = (
        list(engines)
        if lockstep <= 1
        else [Lockstep(engines[i : i + lockstep]) for i in range(0, len(engines), lockstep)]
    )
    coupled = max_concurrency is not None and len(units) > 1
    while arrivals or done or any(e.has_work for e in units):
        next_arrival = arrivals[0][0] if arrivals else math.inf
        next_done = done[0][0] if done else math.inf
        busy = [e for e in units if e.has_work]
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
            except SwapSpaceExhausted as exc:  # vLLM V0's Scheduler._swap_out
                raise KvplanError(
                    f'vLLM V0 would abort at {exc.at_s:,.2f} s of the run: "Aborted due to the '
                    f'lack of CPU swap space" (request {exc.rid} needs {exc.need:,} CPU blocks to '
                    f"swap out, {exc.free:,} of {exc.total:,} free); raise --swap-space"
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
            if context is not None:
                if context.refuses(spec.input_tokens, target):  # HTTP 400: a failed request
                    failed.append(spec)
                    if max_concurrency is not None:
                        free_slots += 1
                        dispatch(now)
                    continue
                target = context.output_tokens(spec.input_tokens, target)
            index = _route(router, spec, engines, outstanding, turn)
            req = Req(spec, start, now, target)
            req.replica = index
            outstanding[index] += 1
            engines[index].admit(req, now)
    return ClusterRun(finished, failed, engines)


def api_servers(engines: int, layout) -> int:
    """The API server processes in front of `engines` engines laid out as `layout`
    (setup.ParallelLayout; None: each engine a replica of its own): one per replica, whose DP
    ranks, DP attention's or independent ones, sit behind it (SGLang: the HTTP server process's
    one TokenizerManager feeds --dp-size's DataParallelController, entrypoints/engine.py
    _launch_subprocesses; only SGLang's front end has a serial part timed, Frontend.served_s,
    so for vLLM the count changes nothing)."""
    ranks = 1 if layout is None else layout.dp * layout.dp_replicas
    return max(1, engines // ranks)


def _clock(engine) -> float:
    return engine.clock_s


class Lockstep:
    """DP-attention ranks that run every forward together. Each step every rank's scheduler
    plans its own batch (Engine.plan_step); the step is priced by batch_step.lockstep_step
    over all the ranks' shapes (the MoE layers over the ranks' tokens, a rank with nothing to
    run as a one-token dummy, eagerly and padded as the engine's lockstep_rules say) and lasts
    as long as the slowest rank's; every rank
    settles its batch at that time (its terms the slowest rank's). When every rank with work
    could run decode-only steps, they run as one span (Engine.span_steps): as many steps as the
    rank nearest an event allows, each as long as the slowest rank's step then."""

    def __init__(self, ranks: list[Engine]):
        self.ranks = ranks
        self.model = ranks[0].model

    @property
    def has_work(self) -> bool:
        return any(r.has_work for r in self.ranks)

    @property
    def clock_s(self) -> float:
        return max(r.clock_s for r in self.ranks)

    def step(self, horizon_s: float) -> list[Req]:
        start = self.clock_s
        for r in self.ranks:  # one clock: a rank idle so far joins the group's next step
            r.clock_s = start
        active = [r for r in self.ranks if r.has_work]
        if all([r._quiet() for r in active]):  # each asked, as its own loop would
            done = self._span(active, horizon_s)
            if done is not None:
                return done
        finished, planned = (
            self._exclusive_plans(active)
            if self.ranks[0].lockstep_exclusive_prefill
            else self._plans(active)
        )
        if not planned:  # nothing ran anywhere (a preemption, a stall): no forward
            return finished
        shapes = [shape for shape, _ in planned]
        idle = len(self.ranks) - len(planned)  # ranks stepping a dummy batch
        eager, pad = self.ranks[0].lockstep_rules(shapes + [BatchShape()] * idle)
        model = self.model.without_graphs() if eager else self.model
        if any(s.prefill_chunks for s in shapes):
            # SGLang's speculative ranks in a step with an extend run their decodes as extends
            # (SpeculativeStepModel.extend_in_batch; every other model is itself)
            model = model.extend_in_batch()
        gathered, sampled, pad = self.ranks[0].lockstep_batch(shapes, idle, eager, pad)
        timing, _ = lockstep_step(model, shapes, idle, pad, gathered, sampled)
        for _, settle in planned:
            finished += settle(timing)
        self._sync()
        return finished

    @staticmethod
    def _plans(active: list[Engine], decode_only: bool = False) -> tuple[list[Req], list[Plan]]:
        """Each rank's own plan (Engine.plan_step; `decode_only`: its decode step alone,
        Engine.plan_decode): (the requests finished by ranks that ran nothing, the plans of
        those that run)."""
        finished: list[Req] = []
        planned: list[Plan] = []
        for r in active:
            plan = r.plan_decode() if decode_only else r.plan_step()
            if isinstance(plan, list):
                finished += plan
            else:
                planned.append(plan)
        return finished, planned

    @classmethod
    def _exclusive_plans(cls, active: list[Engine]) -> tuple[list[Req], list[Plan]]:
        """The plans where prefill and decode never share a step (Engine.
        lockstep_exclusive_prefill): the ranks' prefill batches where any rank formed one, the
        others idle, their running requests waiting; else each rank's decode step."""
        prefills = [plan for plan in (r.plan_prefill() for r in active) if plan is not None]
        if prefills:
            return [], prefills
        return cls._plans(active, decode_only=True)

    def _span(self, active: list[Engine], horizon_s: float):
        """A run of decode-only steps on every rank with work, or None (fewer than MIN_SPAN)."""
        import numpy as np

        limits = [r.span_steps() for r in active]
        if any(n is None for n in limits):
            return None
        steps = min(n for n in limits if n is not None)
        # every step of the span runs the same batch sizes: the same rules, the same tokens
        # through the MoE layers (each rank's decodes, one dummy token per idle rank)
        shapes = [BatchShape(r.num_decodes, 0, (), r.num_decodes) for r in active]
        shapes += [BatchShape()] * (len(self.ranks) - len(active))
        eager, pad = self.ranks[0].lockstep_rules(shapes)
        model = self.model.without_graphs() if eager else self.model
        idle = len(self.ranks) - len(active)
        gathered, _, pad = self.ranks[0].lockstep_batch(shapes[: len(active)], idle, eager, pad)
        runs = [
            model.decode_span_s(r.num_decodes, r.span_sums(steps), 1, gathered, pad) for r in active
        ]
        times = np.max([t for t, _ in runs], axis=0)  # an idle rank's dummy is never slowest
        starts = self.clock_s + np.cumsum(times) - times
        steps = int(np.searchsorted(starts, horizon_s, side="left"))
        if steps < engine_rules.MIN_SPAN:
            return None
        times = times[:steps]
        # the terms of the rank slowest over the run stand for the step's
        slowest = max(range(len(runs)), key=lambda i: float(runs[i][0][:steps].sum()))
        terms = runs[slowest][1]
        finished: list[Req] = []
        for r in active:
            finished += r.commit_span(times, terms)
        self._sync()
        return finished

    def _sync(self) -> None:
        end = self.clock_s
        for r in self.ranks:
            r.clock_s = end


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
