"""One engine replica as vLLM V1 schedules it: continuous batching over a paged KV pool.

Each step (vllm/v1/core/sched/scheduler.py, `schedule()`):
1. Running requests first, in admission order: a decoding request takes 1 token, a request still
   prefilling takes min(the rest of its prompt, the token budget). A request whose next token
   needs a new KV block and finds none preempts the last-admitted request (its blocks are freed,
   it goes back to the head of the queue and later recomputes prompt + outputs), repeating until
   the allocation succeeds or the request preempted itself.
2. Only in a step that preempted nobody: waiting requests, first come first served with
   head-of-line blocking, while budget and seats (max_num_seqs) remain. A request's cached prefix
   (whole blocks, at most num_tokens - 1 tokens) costs no budget; a prompt longer than the budget
   is cut into chunks (chunked prefill), or waits for a step with room when chunking is off.
   From vLLM 0.19 (`reserve_full_isl`) a request is admitted only when its whole prompt fits.
3. One forward runs every scheduled token; its time comes from formulas.batch_step. Every full
   block enters the prefix cache, outputs' blocks too. With async scheduling a request finished
   in step k keeps its seat and blocks while step k + 1 is scheduled (`lingering`).

tests/test_sched_conformance.py checks these rules step for step against vLLM's own scheduler
(kvplan.simulate.steplog, scripts/record_vllm_schedule.py).

The pool is kvplan.kernels.BlockManager: allocation, prefix caching and LRU eviction are its own.
Blocks are counted in the full-attention group's blocks. A sliding-window group is kept as vLLM's
SlidingWindowManager keeps it, a second block table per request in the same pool: every
allocation first drops the blocks the window has left (those before token
computed - window + 1, vLLM's remove_skipped_blocks), then allocates blocks for every token the
step computes, the window's group as many as the full one; so a prefill chunk holds all its
blocks in both groups until the request's next allocation. A prefix hit is one every group hits
(HybridKVCacheCoordinator): the full group's cached prefix, cut back to the end of the last run
of cdiv(window - 1, block_size) cached window blocks within it. The whole-prompt check counts the
window group's blocks too (from vLLM 0.32 at most its admission cap,
cdiv(window - 1 + max_num_batched_tokens, block_size) + 1). Recurrent-state and chunked groups
(and windows whose groups do not map onto the pool's blocks one to one) hold a fixed share per
request (one state block, the chunk's blocks), reserved at admission.

Decoding requests are kept as a cohort (every one of them takes exactly one token per step, since
max_num_seqs <= max_num_batched_tokens and prefills run after them): a step costs O(requests whose
state changes), and runs of decode-only steps in which nothing is admitted, finished or preempted
are advanced together (`_decode_span`).

Disaggregated prefill/decode (kvplan.simulate.disagg, vLLM's NixlConnector): a prefill-only
engine hands a request off when its prompt's first token is sampled (max_tokens = 1) and keeps
its blocks until the decode side has read them (`request_finished` delays the free); a decode
engine allocates a remote request's prompt blocks when it reaches the queue's head (no budget, no
seat: WAITING_FOR_REMOTE_KVS), asks for the transfer, and once the KV has arrived schedules the
last prompt token again (`_update_waiting_for_remote_kv`: num_computed_tokens = num_tokens - 1),
whose step samples the request's first token.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from enum import IntEnum

from kvplan.engines.vllm_schedule import batches_formed_ahead, max_concurrent_batches
from kvplan.formulas.batch_step import (
    ENGINE_TERMS,
    BatchShape,
    StepModel,
    critical_fixed_s,
    lockstep_gathered_tokens,
    shape_tokens,
)
from kvplan.formulas.comm import host_copy_time_s
from kvplan.kernels.block_manager import BlockManager, NoFreeBlocksError
from kvplan.record import NamedTuple
from kvplan.simulate.workload import RequestSpec, output_token_ids, prompt_token_ids

MIN_SPAN = 2  # decode-only steps worth advancing together


class EngineConfig(NamedTuple):
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    num_blocks: int  # pool size in blocks of the full-attention group
    block_size: int
    # windowed and state groups: (blocks a request holds at most, 0 for a state; groups; the
    # group's block size in tokens)
    side_blocks: tuple[tuple[int, int, int], ...] = ()
    main_groups: int = 1  # full-attention groups a block of the pool stands for
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    preemption: bool = True  # False: admit only what can run to its end (no over-commit)
    continuous_batching: bool = True  # False: a new batch only when the last one finished
    # vLLM's AsyncScheduler: step k + 1 is scheduled before step k's output is processed, so a
    # request finished in step k holds its seat and blocks through step k + 1's scheduling
    async_scheduling: bool = False
    # vLLM 0.19 on (scheduler_reserve_full_isl): a waiting request is admitted only when its
    # whole prompt fits the free blocks; before, only its first chunk had to
    reserve_full_isl: bool = True
    # vLLM 0.24 on: a freed request's uncached blocks are reused first (BlockPool.free_blocks)
    free_uncached_first: bool = False
    # sliding-window groups kept as vLLM's SlidingWindowManager keeps them: (window in tokens,
    # block tables a request holds for it in the pool), blocks of `block_size` tokens
    window_groups: tuple[tuple[int, int], ...] = ()
    # vLLM 0.32 on: the whole-prompt check counts a window's blocks at most up to its
    # admission cap (SlidingWindowSpec.max_admission_blocks_per_request)
    window_admission_cap: bool = False
    # vLLM 0.32 on: a window's blocks are dropped on the processed-token basis, so with async
    # scheduling the tokens of the step still in flight keep theirs one step longer
    window_processed_drops: bool = False
    # speculative decoding (kvplan.simulate.speculative): the k drafted tokens each decode
    # schedules besides its own (they count in the token budget) and the slots its blocks
    # hold ahead of them (vLLM's num_lookahead_tokens); 0: no speculation
    spec_lookahead: int = 0
    # vLLM V0's multi-step scheduling (--num-scheduler-steps N, 0.6-0.8): while decodes run,
    # the scheduler admits only every N decode steps (a window of N runs unscheduled)
    scheduler_steps: int = 1
    # vLLM V0's Scheduler._schedule_default (chunked prefill off, 0.6-0.7): prompts admitted
    # in a step run alone ("Don't schedule decodes if prefills are scheduled"); the running
    # requests decode only in steps that admit none
    prefill_first: bool = False
    # vLLM V0's BlockSpaceManager.can_allocate (0.6-0.7): a waiting request is admitted only when
    # the free blocks less its whole sequence's blocks (prefix hits counted too) leave this many
    # (int(0.01 x num_gpu_blocks)); 0: no watermark (V1)
    admission_watermark_blocks: int = 0
    # vLLM V0's --preemption-mode swap (Scheduler._preempt_by_swap): the CPU pool's blocks
    # (swap_space // block bytes; -1: preemption recomputes), one block's bytes and the host
    # link's one-way bytes/s the copies run at (formulas.comm.host_copy_time_s)
    swap_cpu_blocks: int = -1
    swap_block_bytes: int = 0
    host_link_one_way_bytes_per_s: float = 0.0
    # SGLang's detokenizer: one process turns every streamed token of every request into text
    # before the API server sends it, so its seconds per token cap the tokens/s clients receive
    # (a stage of its own between the engine and the API server: the scheduler does not wait
    # for it, the streamed chunks queue). 0: not timed (fast tokenizers, vLLM's in-process
    # detokenization: the API server's per-token cost stands for it)
    detokenizer_token_s: float = 0.0


def serial_stage_s(ready_s, free_s: float, busy_s: float):
    """When a one-server stage (the detokenizer, the API server) is done with each of a run of
    steps whose tokens are ready at `ready_s` (a numpy array, increasing), each taking it
    `busy_s`, the stage being free from `free_s`: done[k] = max(ready[k], done[k-1]) + busy_s,
    in closed form."""
    import numpy as np

    cumulative = busy_s * np.arange(1, len(ready_s) + 1)
    return cumulative + np.maximum.accumulate(np.maximum(ready_s - (cumulative - busy_s), free_s))


class SwapSpaceExhausted(Exception):
    """vLLM V0's Scheduler._swap_out: "Aborted due to the lack of CPU swap space" (the engine
    stops: RuntimeError)."""

    def __init__(self, rid: int, need: int, free: int, total: int, at_s: float):
        super().__init__(
            f"request {rid} needs {need:,} CPU blocks to swap out, {free:,} of {total:,} free"
        )
        self.rid, self.need, self.free, self.total, self.at_s = rid, need, free, total, at_s


def append_blocks_touched(slots: int, new_tokens: int, block_size: int) -> int:
    """V0's BlockTable.get_num_blocks_touched_by_append_slots: 1 + ceil((new - first chunk) /
    block_size), the first chunk being what the last block has left (a whole block when it is
    full); at least 1 for one token even when it fits the last block."""
    first = block_size - slots % block_size
    return 1 + math.ceil((new_tokens - first) / block_size)


class RequestState(IntEnum):
    """Where a request is in an engine (ints underneath: the hot loop compares them)."""

    WAITING = 0  # queued, or preempted back to the queue
    PREFILL = 1  # its prompt (or what preemption dropped) being computed, chunk by chunk
    DECODE = 2  # one token a step
    DONE = 3
    HELD = 4  # prefilled, its blocks kept for a transfer (disaggregated prefill)
    SWAPPED = 5  # V0's swap preemption: its blocks in the CPU pool until swapped back in


class KvSource(IntEnum):
    """Where a decode engine's request gets its KV from (disaggregated serving)."""

    LOCAL = 0  # computed here
    NEEDS_KV = 1  # remote: no KV yet
    RECEIVING = 2  # its blocks allocated, the KV on its way
    RECEIVED = 3


WAITING, PREFILL, DECODE, DONE, HELD, SWAPPED = RequestState
LOCAL, NEEDS_KV, RECEIVING, RECEIVED = KvSource


class CountingPool:
    """The pool with prefix caching off, counted instead of built: a sequence holds
    ceil(tokens / block_size) blocks and nothing outlives it, so only counts matter. The same
    calls as kvplan.kernels.BlockManager; token ids may be anything with a length."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_used_blocks = 0
        self.held: dict = {}  # sequence -> [blocks, tokens, blocks dropped by a window]

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.num_used_blocks

    num_cached_free_blocks = 0  # nothing is cached

    def cached_free_blocks(self):
        return iter(())  # nothing is cached

    def evict(self, block_ids) -> None:
        return None

    def allocate(self, seq_id, token_ids, extra_key: bytes = b"", hit=None) -> int:
        if seq_id in self.held:
            raise ValueError(f"sequence {seq_id!r} already exists")
        blocks = -(-len(token_ids) // self.block_size)
        if blocks > self.num_free_blocks:
            raise NoFreeBlocksError(f"need {blocks} blocks, {self.num_free_blocks} free")
        self.held[seq_id] = [blocks, len(token_ids), 0]
        self.num_used_blocks += blocks
        return 0

    def allocate_groups(self, entries) -> list[int]:
        blocks = sum(-(-len(token_ids) // self.block_size) for _, token_ids, _, _ in entries)
        if blocks > self.num_free_blocks:
            raise NoFreeBlocksError(f"need {blocks} blocks, {self.num_free_blocks} free")
        return [self.allocate(seq_id, token_ids) for seq_id, token_ids, _, _ in entries]

    def append_cost(self, seq_id, num_tokens: int) -> int:
        entry = self.held[seq_id]
        return max(0, -(-(entry[1] + num_tokens) // self.block_size) - entry[0])

    def drop_leading_blocks(self, seq_id, num_blocks: int) -> int:
        entry = self.held[seq_id]
        dropped = max(0, min(num_blocks, entry[0]) - entry[2])
        entry[2] += dropped
        self.num_used_blocks -= dropped
        return dropped

    def window_hit(self, token_ids, window_blocks: int, extra_key=b"", max_blocks=None):
        return 0, []

    def prefix_blocks(self, token_ids, extra_key: bytes = b"") -> list:
        return []

    def cache_blocks(self, seq_id, num_tokens: int) -> None:
        return None

    def append_tokens(self, seq_id, token_ids, cache: bool = True) -> list:
        entry = self.held[seq_id]
        tokens = entry[1] + len(token_ids)
        more = -(-tokens // self.block_size) - entry[0]
        if more > self.num_free_blocks:
            raise NoFreeBlocksError(f"need {more} blocks, {self.num_free_blocks} free")
        entry[0] += more
        entry[1] = tokens
        self.num_used_blocks += more
        return []

    def free(self, seq_id) -> None:
        blocks, _, dropped = self.held.pop(seq_id)
        self.num_used_blocks -= blocks - dropped

    def cached_prefix_tokens(self, token_ids, extra_key: bytes = b"") -> int:
        return 0

    def blocks_to_allocate(self, token_ids, extra_key: bytes = b"", hit=None) -> int:
        return -(-len(token_ids) // self.block_size)

    def uncache_block(self, seq_id, index: int) -> None:
        return None


class CachingMatters(Exception):
    """A stand-in pool is asked for a sequence it freed before it ended: from here on prefix
    caching could change the run (StandInPool)."""


class StandInPool(CountingPool):
    """A prefix-caching pool counted instead of built while caching cannot change the run.
    Where no prompt shares a token stream with another (workload: every token id names one
    position of one request), a block can only be found by the sequence that filled it, after
    that sequence was freed before it ended (a preemption, an admission rolled back) and is
    allocated again. Until then every answer of kvplan.kernels.BlockManager's (no hits, the same
    free and used counts) is this pool's, with no block hashed and no token id built; then it
    raises CachingMatters, and the run is redone with the BlockManager."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.freed: set = set()

    def allocate(self, seq_id, token_ids, extra_key: bytes = b"", hit=None) -> int:
        if seq_id in self.freed:
            raise CachingMatters(seq_id)
        return super().allocate(seq_id, token_ids, extra_key)

    def free(self, seq_id) -> None:
        super().free(seq_id)
        self.freed.add(seq_id)


class Req:
    """A request's state inside one engine."""

    __slots__ = (
        "spec",
        "rid",
        "input_tokens",
        "target",
        "arrival_s",
        "dispatch_s",
        "state",
        "computed",
        "outputs",
        "synced",
        "admit_seq",
        "j0",
        "c0",
        "epoch",
        "first_step",
        "last_step",
        "preemptions",
        "side",
        "windowed",
        "chunk_step",
        "chunk_tokens",
        "replica",
        "first_client_s",
        "last_client_s",
        "admit_s",
        "remote",
        "peer",
    )

    def __init__(self, spec: RequestSpec, dispatch_s: float, arrival_s: float, target: int):
        self.spec = spec
        self.rid = spec.rid
        self.input_tokens = spec.input_tokens
        self.target = target  # outputs to generate (max_tokens, capped by max_model_len)
        self.dispatch_s = dispatch_s
        self.arrival_s = arrival_s
        self.state = WAITING
        self.computed = 0  # tokens whose KV is computed
        self.outputs = 0  # tokens generated
        self.synced = 0  # tokens handed to the block manager
        self.admit_seq = 0
        self.j0 = 0  # cohort: the first decode step and the computed tokens then
        self.c0 = 0
        self.epoch = 0
        self.first_step = -1
        self.last_step = -1
        self.preemptions = 0
        self.side = 0  # blocks reserved for the request's fixed-share (state, chunked) groups
        self.windowed = False  # holds its sliding-window groups' block tables
        self.chunk_step = -1  # the step of its last prefill chunk, and the chunk's tokens
        self.chunk_tokens = 0
        self.replica = 0
        self.first_client_s = 0.0  # when the client received the first token
        self.last_client_s = 0.0  # ... and the last
        self.admit_s = -1.0  # when the engine first scheduled it
        self.remote = LOCAL  # a decode engine's request whose prompt KV comes from a prefill one
        self.peer: Req | None = None  # disaggregated: the prefill engine's request it continues

    @property
    def num_tokens(self) -> int:
        return self.input_tokens + self.outputs

    def token_ids(self, start: int, end: int) -> list[int]:
        """Token ids at positions [start, end): prompt, then outputs."""
        out = []
        if start < self.input_tokens:
            out = prompt_token_ids(self.spec)[start : min(end, self.input_tokens)]
        if end > self.input_tokens:
            first = max(start, self.input_tokens) - self.input_tokens
            out += output_token_ids(self.spec, first, end - self.input_tokens)
        return out


class StepLog:
    """What every step did, one entry per step, for the metrics: times, tokens out, batch,
    queue and pool."""

    def __init__(self):
        self.end_s: list = []
        self.client_s: list = []  # when the API server had streamed the step's tokens
        self.decode_tokens: list = []  # ITL weight: tokens whose previous token was the step before
        self.emitted: list = []  # tokens streamed to clients
        self.running: list = []
        self.waiting: list = []
        self.kv_used: list = []
        self.duration_s: list = []


class Engine:
    """One replica: `admit` requests, then `step` while `has_work`."""

    def __init__(
        self,
        config: EngineConfig,
        model: StepModel,
        frontend_per_token_s: float,
        demand_blocks: int | None = None,
        observer=None,
        prefill_only: bool = False,
        stand_in: bool = False,
    ):
        """`demand_blocks`: every block the workload could ever hold at once (pool_demand); a
        pool at least that large never runs out nor evicts, so a smaller one stands in for it
        (the same schedule, fewer objects to build). `prefill_only`: a disaggregated prefill
        engine (requests leave when their first token is sampled; `handoffs`, `release`).
        `stand_in`: no request shares a token stream, so a StandInPool counts the prefix-caching
        pool until caching could matter (step raises CachingMatters then)."""
        self.config = config
        self.model = model
        self.frontend_per_token_s = frontend_per_token_s
        # observer(engine, steps, num_decodes, chunks): called after every step (steps = 1) or
        # run of decode-only steps, chunks as (request, tokens) — what tests check invariants on
        self.observer = observer
        pool = config.num_blocks if demand_blocks is None else min(config.num_blocks, demand_blocks)
        counted = not config.enable_prefix_caching or stand_in  # no token ids needed
        self.bm: CountingPool | BlockManager
        if not config.enable_prefix_caching:  # nothing is shared or kept: count blocks
            self.bm = CountingPool(config.num_blocks, config.block_size)
        elif stand_in:
            self.bm = StandInPool(max(1, pool), config.block_size)
        else:
            self.bm = BlockManager(
                max(1, pool), config.block_size, True, uncached_first=config.free_uncached_first
            )
        self.ids = _lengths if counted else _token_ids
        # a block table per sliding-window group copy, each its own prefix-cache key
        self.windows = tuple(w for w, copies in config.window_groups for _ in range(copies))
        self.window_keys = tuple(f"window:{i}".encode() for i in range(len(self.windows)))
        self.drop_windows = tuple(sorted(set(self.windows)))
        self._lagged_drops = config.window_processed_drops and config.async_scheduling
        self.ids_side = _side_lengths if counted else _side_ids
        self.block_size = config.block_size
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.prefilling: list[Req] = []
        self.step_index = 0  # steps run (the log's index)
        # decode steps run (the cohort's clock); equal to step_index where every step decodes
        # (vLLM), behind it where some steps only prefill (SGLang), which decode_log then maps
        self.decode_index = 0
        self.decode_log: list[int] | None = [] if config.prefill_first else None
        # since the last decode step: whether a prefill-only step ran, and who joined the
        # decodes in one, with the step of their first token (SGLang's steps and V0's)
        self.prefilled = False
        self.joined_at: list[tuple[Req, int]] = []
        self.clock_s = 0.0
        self.client_s = 0.0  # the API server's clock (it streams each step's tokens in turn)
        self.detokenized_s = 0.0  # the detokenizer's clock (EngineConfig.detokenizer_token_s)
        self.admitted = 0
        # the decode cohort
        self.buckets: list[dict[int, Req]] = [{} for _ in range(config.block_size)]
        self.finish_heap: list = []
        self.num_decodes = 0
        self.context_sum = 0  # tokens the decodes attend in the current step
        self.blocked = False  # the queue's head found no blocks and nothing was freed since
        # the free blocks the blocked head asked for (0: unknown): a window's drop that leaves
        # fewer free cannot admit it
        self.blocked_need = 0
        # async scheduling: requests finished in the last step, whose seats and blocks are
        # freed once the next step is scheduled (vLLM processes step k's output after it has
        # scheduled step k + 1)
        self.lingering: list[Req] = []
        # requests with window tables that joined the cohort since the last step: their first
        # decode allocation drops what their prefill's window has left
        self.joined: list[Req] = []
        # speculative decoding: decodes that joined since the last step, whose first decode
        # allocates its lookahead slots (later ones do at each block crossing)
        self.lookahead = config.spec_lookahead
        self.spec_joined: list[Req] = []
        # disaggregated serving
        self.prefill_only = prefill_only
        self.held = 0  # prefill: requests handed off whose blocks wait for the decode side
        self.receiving = 0  # decode: remote requests in the queue whose KV is on its way
        self.ready = 0  # decode: remote requests in the queue whose KV has arrived
        self.stalled = False  # nothing could run; only another engine's event changes that
        self.handoffs: list[Req] = []  # prefill: handed off since the cluster last looked
        self.kv_requests: list[tuple[Req, float, int]] = []  # decode: (request, when, tokens)
        # statistics
        self.log = StepLog()
        # inter-token gaps the step-to-step diffs miss: (step before, step after, tokens)
        self.resume_gaps: list[tuple[int, int, int]] = []
        self.finished: list[Req] = []
        self.preemptions = 0
        # V0's swap preemption: the swapped queue (FCFS), the CPU pool's free blocks, the copy
        # time the next step pays, and what was copied
        self.swapped: deque[Req] = deque()
        self.cpu_free_blocks = max(config.swap_cpu_blocks, 0)
        self.swap_pending_s = 0.0
        self.swap_outs = 0
        self.swap_ins = 0
        self.swapped_out_blocks = 0
        self.swapped_in_blocks = 0
        self.swap_s = 0.0
        self.hit_tokens = 0
        self.queried_tokens = 0
        self.term_s = dict.fromkeys(ENGINE_TERMS, 0.0)
        self.busy_s = 0.0
        self.untimed_s = 0.0  # of busy_s, the terms holding an untimed part (StepTime.untimed_s)
        self.stand_in_launch_s = 0.0  # of untimed_s, StepTime.stand_in_launch_s
        # the steps that held a prompt chunk: their seconds, and of those the launch and host
        # terms on the critical path (HostOverheads' constants, no kernel table's rows; host time
        # the overlap scheduler hides not counted: batch_step.critical_fixed_s,
        # metrics.ttft_untimed_fraction)
        self.prefill_busy_s = 0.0
        self.prefill_fixed_s = 0.0
        self.peak_used = 0
        self.last_step_s = 0.0
        # when the last step run began and ended (SglangEngine's overlap: the batch after it
        # was formed at its start)
        self.step_start_s = 0.0
        self.step_end_s = 0.0
        # requests that reached the engine and that no scheduler pass has received yet
        # (forms_ahead), in arrival order
        self.inbox: deque[Req] = deque()
        # whether requests reach the scheduler through the engine's busy loop (False: handed to
        # the scheduler itself before a step, as scripts/record_vllm_schedule.py drives it)
        self.busy_loop = True
        self.min_step_s = model.step(BatchShape(1, 1, (), 1)).total_s

    def warm_prefixes(self, requests) -> int:
        """A server reused across runs: the shared prefixes of `requests` (each stream's first
        `stream_tokens`, whole blocks) already in the prefix cache, unreferenced (evictable),
        before the first request arrives; conversations' streams are each their own and stay
        cold. Returns the blocks warmed (as many streams as the pool holds, first come first)."""
        if not isinstance(self.bm, BlockManager) or not self.config.enable_prefix_caching:
            return 0
        bm, warmed, seen = self.bm, 0, set()
        queried, hit = bm.queried_tokens, bm.hit_tokens  # warming is no request's lookup
        for spec in requests:
            if spec.stream_id < 0 or spec.session or spec.stream_id in seen:
                continue
            seen.add(spec.stream_id)
            tokens = min(spec.stream_tokens, spec.input_tokens) // self.block_size
            ids = prompt_token_ids(spec)[: tokens * self.block_size]
            if not ids or bm.blocks_to_allocate(ids) > bm.num_free_blocks:
                continue
            key = ("warm", spec.stream_id)
            warmed += bm.blocks_to_allocate(ids)
            bm.allocate(key, ids)
            bm.free(key)
        bm.queried_tokens, bm.hit_tokens = queried, hit
        return warmed

    # ---- arrivals ---------------------------------------------------------------------------
    def admit(self, req: Req, now: float) -> None:
        """A request reaches the engine's queue at `now`."""
        if not self.has_work:  # idle, or waiting only on transfers: its clock catches up
            self.clock_s = max(self.clock_s, now)
            self._release_lingering()  # an idle engine has processed every output
        self.waiting.append(req)
        self.stalled = False
        if self.forms_ahead:  # not seen by the scheduler before its next pass
            self.inbox.append(self.waiting.pop())

    @property
    def forms_ahead(self) -> bool:
        """Whether each step is formed while the step before it runs (vLLM V1's batch queue,
        kvplan.engines.vllm_schedule.batches_formed_ahead): a request that arrives during a
        step is first scheduled in the step after the next (`_collect_inbox`)."""
        return self.busy_loop and batches_formed_ahead(self.config.async_scheduling) > 0

    def _runs_on(self) -> bool:
        """Whether the last step left requests to run: the pass that forms the next step ran
        when it began (forms_ahead)."""
        return self.num_decodes > 0 or bool(self.prefilling)

    def _collect_inbox(self) -> None:
        """The pass that forms the step starting now ran when the step before began (where
        forms_ahead): of the requests that reached the engine, those that came after that are
        not in the queue yet. Where nothing was in flight (the loop was idle, or the step before
        ended with nothing left to run) the pass is now."""
        inbox = self.inbox
        if not inbox:
            return
        in_flight = self.step_end_s >= self.clock_s and self._runs_on()
        cutoff_s = self.step_start_s if in_flight else self.clock_s
        while inbox and inbox[0].arrival_s <= cutoff_s:
            self.waiting.append(inbox.popleft())

    @property
    def has_work(self) -> bool:
        """Whether a step can run now; an engine whose queue waits only on transfers (blocks
        held for one, or KV still arriving) has none until `release` or `kv_received`."""
        if self.inbox:
            return True
        if self.running or self.ready or self.swapped:
            return True
        if self.stalled or len(self.waiting) <= self.receiving:
            return False
        return not (self.blocked and (self.held or self.receiving))

    # ---- disaggregated serving --------------------------------------------------------------
    def release(self, r: Req, now: float) -> None:
        """Prefill: the decode side has read r's KV; its blocks are freed (into the prefix
        cache), which may unblock the queue."""
        self._release(r)
        self.held -= 1
        r.state = DONE
        self.stalled = False
        self.clock_s = max(self.clock_s, now)

    def kv_received(self, r: Req, now: float) -> None:
        """Decode: r's prompt KV has arrived; the next step recomputes its last prompt token."""
        r.remote = RECEIVED
        r.computed = r.input_tokens - 1
        self.bm.cache_blocks(r.rid, r.input_tokens)  # now another request may hit them
        self.receiving -= 1
        self.ready += 1
        self.blocked = False
        self.stalled = False
        self.clock_s = max(self.clock_s, now)

    def _allocate_remote(self, r: Req) -> bool:
        """Decode: the blocks of r's prompt (prefix hits found locally are not transferred);
        False when the pool cannot hold them now."""
        num_tokens = r.num_tokens
        final = num_tokens + r.target - r.outputs
        reserved = num_tokens if self.config.preemption else final  # no preemption: to its end
        ids = self.ids(r, 0, reserved)
        # the locally cached prefix is found now; the blocks the KV will fill enter the cache
        # only once it has arrived (vLLM: delay_cache_blocks, then cache_blocks)
        hits = self.bm.cached_prefix_tokens(ids[:num_tokens])
        try:
            self.bm.allocate(r.rid, ids[: hits + 1])
        except NoFreeBlocksError:
            return False
        try:
            self.bm.append_tokens(r.rid, ids[hits + 1 :], cache=False)
        except NoFreeBlocksError:
            self.bm.free(r.rid)
            return False
        if self.windows:  # the window groups' tables: every block of the transfer, no hits
            window = sum(self.bm.blocks_to_allocate(ids, key, (0, [])) for key in self.window_keys)
            if window > self.bm.num_free_blocks:
                self.bm.free(r.rid)
                return False
            self.bm.allocate_groups(
                [
                    (("window", i, r.rid), ids, key, (0, []))
                    for i, key in enumerate(self.window_keys)
                ]
            )
            r.windowed = True
        side = side_blocks(self.config, final)
        if side and not self._reserve_side(r, side):
            self._free_blocks(r)
            return False
        r.synced = reserved
        r.computed = hits
        r.remote = RECEIVING
        if r.admit_s < 0:
            r.admit_s = self.clock_s
        self.receiving += 1
        self.queried_tokens += num_tokens
        self.hit_tokens += hits
        # the connector reads whole blocks: the prompt's blocks past the local hits
        moved = (-(-num_tokens // self.block_size) * self.block_size) - hits
        self.kv_requests.append((r, self.clock_s, moved))
        return True

    def lockstep_batch(
        self, shapes: list[BatchShape], idle: int, eager: bool, pad: bool
    ) -> tuple[int, int, bool]:
        """(the tokens the MoE layers of a lockstep step see on every rank, the sampled rows
        summed over the ranks, whether the gather is padded) for ranks running `shapes` and
        `idle` ranks with nothing to run, as lockstep_rules decided (`eager`, `pad`). vLLM: an
        idle rank's dummy batch (DPEngineCoreProc.execute_dummy_batch) puts one token through;
        the ranks' tokens summed, or padded to the largest (lockstep_gathered_tokens)."""
        tokens = [shape_tokens(s) for s in shapes] + [1] * idle
        return lockstep_gathered_tokens(tokens, pad), sum(s.num_sampled for s in shapes), pad

    @property
    def lockstep_exclusive_prefill(self) -> bool:
        """Whether, in a DP-attention group (cluster.Lockstep), a prefill batch on any rank
        keeps every other rank from decoding in that step (those run an idle batch): then the
        ranks' prefill batches are planned first (plan_prefill) and their decodes
        (plan_decode) only where no rank formed one. False: each rank runs its own plan."""
        return False

    def plan_prefill(self):
        """plan_step's prefill batch alone, or None (an engine whose lockstep_exclusive_prefill
        holds splits its plan_step in two)."""
        raise NotImplementedError(type(self).__name__)

    def plan_decode(self):
        """plan_step's decode step alone (after plan_prefill formed no batch)."""
        raise NotImplementedError(type(self).__name__)

    def lockstep_rules(self, shapes: list[BatchShape]) -> tuple[bool, bool]:
        """How a step of DP-attention ranks running `shapes` together runs (cluster.Lockstep):
        (eagerly, its MoE tokens padded to the largest rank's). vLLM syncs the ranks first
        (vllm/v1/worker/dp_utils.py, coordinate_batch_across_dp): the step's CUDA-graph mode is
        the minimum over the ranks, so one rank with more tokens than the largest graph runs
        every rank eagerly; under graphs every rank is padded to the largest token count
        (should_dp_pad)."""
        limit = self.model.cuda_graph_max_tokens
        eager = any(shape_tokens(s) > limit for s in shapes)
        return eager, not eager

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting) + len(self.swapped)

    # ---- one step ---------------------------------------------------------------------------
    def step(self, horizon_s: float) -> list[Req]:
        """Run the next step (or a run of decode-only steps starting before `horizon_s`);
        returns the requests that finished, with their client-side times settled."""
        if self._quiet():
            done = self._decode_span(horizon_s)
            if done is not None:
                return done
        planned = self.plan_step()
        if isinstance(planned, list):
            return planned
        shape, commit = planned
        return commit(self.model.step(shape))

    def plan_step(self):
        """Schedule the next step: (its BatchShape, a function that settles it given its
        StepTime and returns the requests finished), or the finished requests of a step
        that ran nothing (a list). A DP-attention group (cluster.Lockstep) schedules every rank
        before it prices the step they run together."""
        self._collect_inbox()
        j, d = self.step_index, self.decode_index
        budget = self.config.max_num_batched_tokens
        preempted = False
        prefill_first = self.config.prefill_first
        if (
            prefill_first
            and self.waiting
            and not self.swapped  # V0: "If any requests are swapped, prioritized swapped requests"
            and not self._in_window()
            and self._may_admit()
        ):
            chunks_first: list[tuple[Req, int]] = []
            self._admit_waiting(budget, chunks_first)
            if chunks_first:  # V0's _schedule_default: the prompts alone, no decodes
                shape = BatchShape(
                    0,
                    0,
                    tuple((n, r.computed) for r, n in chunks_first),
                    len(chunks_first),
                )
                return shape, lambda timing: self._settle_prefill_only(j, timing, chunks_first)
        # 1. running: decodes whose next token opens a block (or whose window leaves one), in
        # admission order
        bs, lookahead = self.block_size, self.lookahead
        crossing = self.buckets[(d + lookahead) % bs]
        if self.windows:
            touched = {id(r): r for r in crossing.values()}
            touched.update((id(r), r) for r in self.joined)
            # on the processed-token basis (async) its last chunk is still in flight in its
            # first decode step: the catch-up drop comes one step later
            self.joined = [r for r in self.joined if r.j0 == d and self._lagged_drops]
            lag = int(self._lagged_drops)  # its last decode in flight: c - 1 counts
            for w in self.drop_windows:  # a decode at computed c drops when c - w + 1 ≡ 0
                touched.update((id(r), r) for r in self.buckets[(d - w + 1 - lag) % bs].values())
            active = touched.values()
        else:
            active = crossing.values()
        if active:
            for r in sorted(active, key=_admit_order):
                if r.state != DECODE:
                    continue
                position = r.c0 + (d - r.j0)
                if r.windowed:
                    flight = 1 if d > r.j0 else self._chunk_in_flight(r, j)
                    self._drop_window_blocks(r, position, flight)
                if (position + lookahead) % bs:
                    continue
                while not self._extend(r, position + 1 + lookahead):
                    preempted = True
                    if self._preempt_last(d) is r:
                        break
        if self.spec_joined:  # their first decode's lookahead slots
            for r in sorted(self.spec_joined, key=_admit_order):
                if r.state != DECODE:
                    continue
                while not self._extend(r, r.c0 + (d - r.j0) + 1 + lookahead):
                    preempted = True
                    if self._preempt_last(d) is r:
                        break
            self.spec_joined.clear()
        budget -= self.num_decodes * (1 + lookahead)  # each verifies its k drafted tokens too
        chunks: list[tuple[Req, int]] = []
        for r in list(self.prefilling):
            if budget <= 0:
                break
            if r.state != PREFILL:
                continue
            n = min(r.num_tokens - r.computed, budget)
            if r.windowed:
                self._drop_window_blocks(r, r.computed, self._chunk_in_flight(r, j))
            while not self._extend(r, r.computed + n):
                preempted = True
                if self._preempt_last(d) is r:
                    break
            if r.state != PREFILL:
                continue
            chunks.append((r, n))
            budget -= n
        # V0's _schedule_swapped, only if nobody was preempted: swapped requests back in, FCFS
        swapped_in = self._swap_in(budget, d) if self.swapped and not preempted else []
        budget -= len(swapped_in)
        # 2. waiting, only if nobody was preempted: first the requests whose KV has arrived
        scheduled = not self._in_window()
        if scheduled and not preempted and self.ready:
            budget = self._admit_received(budget, chunks)
        if (
            scheduled
            and not preempted
            and self.waiting
            and not prefill_first  # V0 admits in its own step, above
            and self._may_admit()
        ):
            budget = self._admit_waiting(budget, chunks)
        # async: the last step's output is processed only now, its finished requests freed
        released = self._release_lingering()
        # 3. one forward
        shape = BatchShape(
            self.num_decodes,
            self.context_sum,
            tuple((n, r.computed) for r, n in chunks),
            # vLLM computes logits and samples for every scheduled request, a chunk that is not
            # its prompt's last too (the token is discarded): logits_indices has one per request
            self.num_decodes + len(chunks),
        )
        if not shape.num_decodes and not chunks:
            return self._idle_step(preempted or released)
        if self.swap_pending_s or swapped_in:
            return shape, lambda timing: self._settle_swaps(j, timing, chunks, swapped_in)
        if prefill_first:
            return shape, lambda timing: self._settle_decode_after(j, timing, chunks)
        return shape, lambda timing: self._advance(j, timing, chunks)

    def _settle_swaps(self, j: int, timing, chunks, swapped_in: list) -> list[Req]:
        """Step j with V0's swap copies: they run before its forward (the worker's
        execute_worker swaps blocks first), so the step takes their time too; a request
        swapped back in takes its first token since at j, its last one before at the step it
        was swapped out after (an inter-token gap across the steps between)."""
        copy_s, self.swap_pending_s = self.swap_pending_s, 0.0
        self.swap_s += copy_s
        timing = timing._replace(total_s=timing.total_s + copy_s)
        resumed = [(r, r.last_step) for r in swapped_in]
        if self.config.prefill_first:
            finished = self._settle_decode_after(j, timing, chunks)
        else:
            finished = self._advance(j, timing, chunks)
        decoding = [last for r, last in resumed if r.first_step >= 0 and last >= 0]
        self.log.decode_tokens[j] -= len(decoding)
        self.resume_gaps.extend((last, j, 1) for last in decoding)
        return finished

    def _settle_prefill_only(self, j: int, timing, chunks) -> list[Req]:
        """A prefill-only step j ran: its prompts advance; the decodes waited."""
        finished = self._advance(j, timing, chunks, decoded=False)
        self.prefilled = True
        self.joined_at += [(r, j) for r, _ in chunks if r.state == DECODE]
        return finished

    def _settle_decode_after(self, j: int, timing, chunks) -> list[Req]:
        """A decode step j of an engine with prefill-only steps: its gaps settled."""
        self.joined_at = [(r, p) for r, p in self.joined_at if r.state == DECODE]
        finished = self._advance(j, timing, chunks)
        assert self.decode_log is not None
        self._settle_gaps(j, len(self.decode_log) - 1)
        return finished

    def _settle_gaps(self, q: int, position: int) -> None:
        """Decode step q (log index) followed prefill-only steps: its tokens' previous tokens
        came from the decode step before them (or, for requests that joined since, from their
        prefill step), not from step q - 1. Recorded as explicit gaps; q's own weight is
        cleared."""
        if not self.prefilled:
            return
        assert self.decode_log is not None
        continuing = self.log.decode_tokens[q] - len(self.joined_at)
        self.log.decode_tokens[q] = 0
        if position > 0 and continuing > 0:  # decode step q's position in decode_log
            self.resume_gaps.append((self.decode_log[position - 1], q, continuing))
        for _, p in self.joined_at:
            self.resume_gaps.append((p, q, 1))
        self.prefilled = False
        self.joined_at = []

    def _advance(self, j: int, timing, chunks, decoded: bool = True) -> list[Req]:
        """Settle step j: its chunks, and (`decoded`) one token for every decode."""
        if self.observer is not None:
            self.observer(self, 1, self.num_decodes if decoded else 0, chunks)
        duration = timing.total_s
        term_s = self.term_s
        for key, seconds in timing.terms_s.items():
            term_s[key] += seconds
        self.busy_s += duration
        self.untimed_s += timing.untimed_s
        self.stand_in_launch_s += timing.stand_in_launch_s
        if chunks:
            self.prefill_busy_s += duration
            self.prefill_fixed_s += critical_fixed_s(timing)
        end = self.clock_s + duration
        self.step_start_s, self.step_end_s = self.clock_s, end
        self.clock_s = end
        self.step_index = j + 1
        d = self.decode_index
        if decoded:
            self.decode_index = d + 1
            if self.decode_log is not None:
                self.decode_log.append(j)
        decode_tokens = self.num_decodes if decoded else 0
        emitted = decode_tokens
        finished: list[Req] = []
        # decodes: every one took a token; context grows by one each
        self.context_sum += decode_tokens
        # prefills that reached the end of their tokens sample one
        joined, firsts, handed = [], [], []
        for r, n in chunks:
            r.chunk_step, r.chunk_tokens = j, n
            r.computed += n
            if r.computed < r.num_tokens:
                continue
            self.prefilling.remove(r)
            emitted += 1
            if self.prefill_only:  # its one token sampled: off to a decode engine, blocks kept
                r.outputs += 1
                r.first_step = r.last_step = j
                self.running.remove(r)
                r.state = HELD
                self.held += 1
                handed.append(r)
                continue
            r.outputs += 1
            if r.first_step < 0:
                r.first_step = j
                firsts.append(r)
            else:  # a resumed request: its new token follows the one before preemption
                self.resume_gaps.append((r.last_step, j, 1))
            r.last_step = j
            if r.outputs >= r.target:
                self._finish(r, j)
                finished.append(r)
            else:
                joined.append(r)
        # decodes whose last token was this step's
        while decoded and self.finish_heap and self.finish_heap[0][0] <= d:
            _, epoch, _, r = heapq.heappop(self.finish_heap)
            if r.state != DECODE or epoch != r.epoch:
                continue
            self._leave_cohort(r, d + 1)
            r.outputs = r.target
            r.last_step = j
            self._finish(r, j)
            finished.append(r)
        for r in joined:
            self._join_cohort(r, self.decode_index)
        self.detokenized_s = (
            max(end, self.detokenized_s) + self.config.detokenizer_token_s * emitted
        )
        client = max(self.detokenized_s, self.client_s) + self.frontend_per_token_s * emitted
        self.client_s = client
        self._record(end, client, decode_tokens, emitted, duration, len(handed))
        for r in firsts:
            r.first_client_s = client
        for r in finished:
            r.last_client_s = client
        for r in handed:  # the API server returns the one-token response now
            r.first_client_s = r.last_client_s = client
            self.handoffs.append(r)
        return finished

    def _record(self, end, client, decode_tokens, emitted, duration, handed=0) -> None:
        log = self.log
        log.end_s.append(end)
        log.client_s.append(client)
        log.decode_tokens.append(decode_tokens)
        log.emitted.append(emitted)
        log.running.append(len(self.running) + handed)  # handed off: ran in this step
        log.waiting.append(len(self.waiting))
        used = self.bm.num_used_blocks
        log.kv_used.append(used)
        log.duration_s.append(duration)
        if used > self.peak_used:
            self.peak_used = used

    def _idle_step(self, preempted: bool) -> list[Req]:
        """Nothing was scheduled: after a preemption (or once finished requests' blocks are
        freed, with async scheduling) the next step admits again; while blocks
        are held for transfers, or KV is arriving, the engine waits for them; otherwise the
        queue's head does not fit even an empty pool."""
        if preempted:
            return []
        if self.held or self.receiving:  # until a release, an arrival or a new request
            self.stalled = True
            return []
        raise _Unservable(self.waiting[0] if self.waiting else self.swapped[0])

    # ---- admission --------------------------------------------------------------------------
    def _seat_free(self) -> bool:
        """A seat for a new request this step (static batching: only once the batch is done)."""
        if len(self.running) + len(self.lingering) >= self.config.max_num_seqs:
            return False
        return self.config.continuous_batching or not self.running

    def _may_admit(self) -> bool:
        return self._seat_free() and not self.blocked

    def _admit_waiting(self, budget: int, chunks: list) -> int:
        config = self.config
        skipped: list[Req] = []  # remote requests waiting for their KV keep their places
        seats = config.max_num_seqs - len(self.lingering)
        while self.waiting and budget > 0 and len(self.running) < seats:
            r = self.waiting[0]
            self.blocked_need = 0
            if r.remote:
                if r.remote == NEEDS_KV and not self._allocate_remote(r):
                    self.blocked = True
                    break
                skipped.append(self.waiting.popleft())
                continue
            num_tokens = r.num_tokens
            ids = self.ids(r, 0, num_tokens)
            cap = (num_tokens - 1) // self.block_size * self.block_size  # at most num_tokens - 1
            remaining = r.target - r.outputs
            try:
                if config.admission_watermark_blocks:
                    self._check_watermark(num_tokens)
                if self.windows:
                    hit = self._hybrid_hit(ids)
                    hits = len(hit[0]) * self.block_size
                if not config.preemption:  # reserve the whole sequence: nothing will grow
                    final = num_tokens + remaining
                    if self.windows:
                        self._allocate_hybrid(r, self.ids(r, 0, final), hit)
                    else:
                        hits = self.bm.allocate(r.rid, self.ids(r, 0, final))
                    hits = min(hits, cap)
                    n = num_tokens - hits
                    if n > budget and not config.enable_chunked_prefill:
                        self._free_blocks(r)
                        break
                    n = min(n, budget)
                    synced = final
                elif num_tokens <= budget:  # the whole prompt fits: the allocation finds the hits
                    if self.windows:
                        self._allocate_hybrid(r, ids, hit)
                    else:
                        hits = self.bm.allocate(r.rid, ids)
                    hits = min(hits, cap)
                    n = num_tokens - hits
                    synced = num_tokens
                else:
                    if not self.windows:
                        hits = self.bm.cached_prefix_tokens(ids)  # its last token stays out
                    n = num_tokens - hits
                    if not config.enable_chunked_prefill and n > budget:
                        break
                    # scheduler_reserve_full_isl: the whole prompt (prompt and outputs for a
                    # resumed request) must fit the free blocks, not only its first chunk
                    side = side_blocks(config, num_tokens + r.target - r.outputs)
                    free = self.bm.num_free_blocks
                    if self.windows:
                        whole = self._hybrid_cost(ids, hit, config.window_admission_cap)
                    else:
                        whole = self.bm.blocks_to_allocate(ids)
                    if config.reserve_full_isl and whole + side > free:
                        self.blocked_need = whole + side
                        raise NoFreeBlocksError("the whole prompt does not fit")
                    n = min(n, budget)
                    synced = hits + n
                    if self.windows:
                        self._allocate_hybrid(r, ids[:synced], hit)
                    else:
                        self.bm.allocate(r.rid, ids[:synced])
            except NoFreeBlocksError:
                self.blocked = True
                break
            side = side_blocks(config, num_tokens + r.target - r.outputs)
            if side and not self._reserve_side(r, side):
                self._free_blocks(r)
                self.blocked = True
                break
            self.waiting.popleft()
            if r.admit_s < 0:
                r.admit_s = self.clock_s
            self.queried_tokens += num_tokens
            self.hit_tokens += hits
            r.computed = hits
            r.synced = synced
            budget = self._schedule_admitted(r, n, budget, chunks)
        if skipped:
            self.waiting.extendleft(reversed(skipped))
        return budget

    def _check_watermark(self, num_tokens: int) -> None:
        """V0's can_allocate: the whole sequence's blocks, hits included, must leave the
        watermark free. A sequence that could never leave it (V0 ignores it, FINISHED_IGNORED)
        is held to the plain fit instead."""
        mark = self.config.admission_watermark_blocks
        whole = -(-num_tokens // self.block_size)
        if self.config.num_blocks - whole < mark:  # AllocStatus.NEVER: not modelled
            return
        if self.bm.num_free_blocks - whole < mark:
            self.blocked_need = whole + mark
            raise NoFreeBlocksError("V0's watermark")

    def _admit_received(self, budget: int, chunks: list) -> int:
        """Decode: schedule the queued requests whose KV has arrived, in queue order, ahead of
        requests that still need blocks. Each holds its blocks and needs one token computed.
        vLLM keeps them in queue order, behind a head that may never find blocks while they
        hold them (a pool of a few requests' worth stalls there); running them first is the
        simulator's way through. It differs from vLLM only when seats or budget are short in
        that step (they go to the arrived requests, not the head)."""
        if not self._seat_free():
            return budget
        kept: list[Req] = []
        while self.waiting and self.ready and budget > 0:
            if len(self.running) + len(self.lingering) >= self.config.max_num_seqs:
                break
            r = self.waiting.popleft()
            if r.remote != RECEIVED:
                kept.append(r)
                continue
            self.ready -= 1
            r.remote = LOCAL
            budget = self._schedule_admitted(r, r.num_tokens - r.computed, budget, chunks)
        if kept:
            self.waiting.extendleft(reversed(kept))
        return budget

    def _schedule_admitted(self, r: Req, n: int, budget: int, chunks: list) -> int:
        r.state = PREFILL
        self.admitted += 1
        r.admit_seq = self.admitted
        self.running.append(r)
        self.prefilling.append(r)
        chunks.append((r, n))
        return budget - n

    def _reserve_side(self, r: Req, side: int) -> bool:
        key = ("side", r.rid)
        try:
            self.bm.allocate(key, self.ids_side(r.rid, side * self.block_size))
        except NoFreeBlocksError:
            return False
        r.side = side
        return True

    # ---- sliding windows -----------------------------------------------------------------
    def _window_ids(self, r: Req) -> list:
        return [("window", i, r.rid) for i in range(len(self.windows))]

    def _hybrid_hit(self, ids) -> tuple[list, list[tuple[int, list]]]:
        """The prefix hit every group hits (vLLM's HybridKVCacheCoordinator, iterated to its
        fixed point): (the full group's hit blocks, each window table's (first block kept, its
        hit blocks from there)), every table's hit ending at the same block."""
        bs = self.block_size
        full = self.bm.prefix_blocks(ids)
        while True:
            spans = [
                self.bm.window_hit(ids, -(-(w - 1) // bs), key, len(full))
                for w, key in zip(self.windows, self.window_keys, strict=True)
            ]
            shortest = min(first + len(blocks) for first, blocks in spans)
            if shortest >= len(full):
                return full, spans
            full = full[:shortest]

    def _hybrid_cost(self, ids, hit, capped: bool = False) -> int:
        """Free blocks a new request of `ids` takes in every group, given its `hit`; `capped`:
        a window's blocks at most its admission cap (vLLM 0.32's whole-prompt check)."""
        full, spans = hit
        cost = self.bm.blocks_to_allocate(ids, b"", (0, full))
        blocks = -(-len(ids) // self.block_size)
        for w, key, span in zip(self.windows, self.window_keys, spans, strict=True):
            window = self.bm.blocks_to_allocate(ids, key, span)
            if capped:  # max(min(blocks, cap) - end, 0) instead of blocks - end
                end = span[0] + len(span[1])
                cap = self._window_cap_blocks(w)
                window += max(min(blocks, cap) - end, 0) - (blocks - end)
            cost += window
        return cost

    def _window_cap_blocks(self, window: int) -> int:
        """vLLM 0.32's SlidingWindowSpec.max_admission_blocks_per_request: the window and the
        tokens in flight (a batch per concurrent step), never past max_model_len."""
        config = self.config
        batches = max_concurrent_batches(1, config.async_scheduling)  # one stage simulated
        tokens = min(window - 1 + batches * config.max_num_batched_tokens, config.max_model_len)
        return -(-tokens // self.block_size) + 1

    def _allocate_hybrid(self, r: Req, ids, hit) -> None:
        """Allocate a new request's tables in every group with its `hit`; all or nothing."""
        cost = self._hybrid_cost(ids, hit)
        if cost > self.bm.num_free_blocks:
            self.blocked_need = cost
            raise NoFreeBlocksError("the groups' blocks do not fit")
        full, spans = hit
        entries: list[tuple] = [(r.rid, ids, b"", (0, full))]  # seq ids: rid, then per window
        for i, (key, span) in enumerate(zip(self.window_keys, spans, strict=True)):
            entries.append((("window", i, r.rid), ids, key, span))
        self.bm.allocate_groups(entries)
        r.windowed = True

    def _chunk_in_flight(self, r: Req, j: int) -> int:
        """r's tokens of step j - 1 (a prefill chunk) whose output step j is scheduled
        without (async scheduling)."""
        return r.chunk_tokens if r.chunk_step == j - 1 else 0

    def _drop_window_blocks(self, r: Req, computed: int, in_flight: int = 0) -> None:
        """vLLM's remove_skipped_blocks before r's allocation: the window of the token after
        `computed` starts at computed - window + 1; whole blocks before it are freed. From vLLM
        0.32 with async scheduling, `computed` less the `in_flight` tokens of the step before
        (the processed-token basis)."""
        if self._lagged_drops:
            computed -= in_flight
        freed = 0
        for i, w in enumerate(self.windows):
            skipped = computed - w + 1
            if skipped >= self.block_size:
                freed += self.bm.drop_leading_blocks(
                    ("window", i, r.rid), skipped // self.block_size
                )
        if freed and self.bm.num_free_blocks >= self.blocked_need:
            self.blocked = False  # the queue's head may fit now

    # ---- blocks -----------------------------------------------------------------------------
    def _span_free_blocks(self) -> int:
        """The free blocks a run of decode steps may take."""
        return self.bm.num_free_blocks

    def output_limit(self, input_tokens: int, max_model_len: int) -> int:
        """The most outputs a request of `input_tokens` may produce (0: the prompt is refused):
        vLLM's, up to max_model_len in all."""
        return max_model_len - input_tokens

    def _extend(self, r: Req, upto: int) -> bool:
        """Hand the block manager r's tokens up to position `upto`; False when blocks run out."""
        if upto <= r.synced:
            return True
        # every full block enters the prefix cache, outputs' too (vLLM caches each block once
        # its tokens are known): a preempted request finds its own outputs when it resumes
        ids = self.ids(r, r.synced, upto)
        if r.windowed:  # every group's blocks, or none
            count = upto - r.synced
            cost = self.bm.append_cost(r.rid, count)
            cost += sum(self.bm.append_cost(key, count) for key in self._window_ids(r))
            if cost > self.bm.num_free_blocks:
                return False
        try:
            self.bm.append_tokens(r.rid, ids)
        except NoFreeBlocksError:
            return False
        if r.windowed:
            for key in self._window_ids(r):
                self.bm.append_tokens(key, ids)
        r.synced = upto
        return True

    def _free_blocks(self, r: Req) -> None:
        """Free r's tables, the full group's first, then its windows' (vLLM's group order)."""
        self.bm.free(r.rid)
        if r.windowed:
            for key in self._window_ids(r):
                self.bm.free(key)
            r.windowed = False

    def _release(self, r: Req) -> None:
        self._free_blocks(r)
        if r.side:
            self.bm.free(("side", r.rid))
            r.side = 0
        self.blocked = False

    def _preempt_last(self, j: int) -> Req:
        """Preempt the last-admitted running request (recompute: all its blocks freed; V0's
        swap mode: its blocks copied to the CPU pool)."""
        if self.config.swap_cpu_blocks >= 0:
            return self._swap_out(self.running[-1], j)
        return self._requeue(self.running[-1], j, front=True)

    def _stop_running(self, victim: Req, j: int) -> None:
        """Take a running request out of the batch before decode step j, its tokens computed
        so far handed to the block manager."""
        if victim.state == DECODE:
            self._leave_cohort(victim, j)
        else:
            self.prefilling.remove(victim)
        if self.running and self.running[-1] is victim:
            self.running.pop()
        else:
            self.running.remove(victim)
        if victim.computed > victim.synced:  # decodes since its last new block: a full block
            self._extend(victim, victim.computed)  # is cached as vLLM caches it (it fits)

    def _swap_out(self, victim: Req, j: int) -> Req:
        """V0's Scheduler._preempt_by_swap before decode step j: `can_swap_out` asks the CPU
        pool for the victim's full blocks plus the blocks its unseen tokens touch
        (BlockSpaceManager._can_swap), else V0 aborts (SwapSpaceExhausted); its every block is
        copied out (the next step pays host_copy_time_s) and freed on the GPU, and it waits in
        the swapped queue with its tokens kept."""
        self._stop_running(victim, j)
        bs = self.block_size
        held = -(-victim.synced // bs)
        need = victim.synced // bs
        need += append_blocks_touched(victim.synced, victim.num_tokens - victim.synced, bs)
        if need > self.cpu_free_blocks:
            raise SwapSpaceExhausted(
                victim.rid, need, self.cpu_free_blocks, self.config.swap_cpu_blocks, self.clock_s
            )
        self._release(victim)
        self.cpu_free_blocks -= held
        victim.state = SWAPPED
        victim.preemptions += 1
        self.preemptions += 1
        self.swap_outs += 1
        self.swapped_out_blocks += held
        self.swap_pending_s += self._copy_s(held)
        self.swapped.append(victim)
        return victim

    def _copy_s(self, blocks: int) -> float:
        config = self.config
        return host_copy_time_s(
            blocks, config.swap_block_bytes, config.host_link_one_way_bytes_per_s
        )

    def _swap_in(self, budget: int, d: int) -> list[Req]:
        """V0's _schedule_swapped at decode step d: from the head of the swapped queue while
        `can_swap_in` holds (the GPU's free blocks less the full blocks and those the unseen
        tokens touch leave the watermark), a token of budget and a seat remain. Each request's
        blocks are copied back (the step pays the copy), it rejoins the batch at its end and
        runs its next token in this step (a prompt cut by the swap, its next chunk next step)."""
        bs = self.block_size
        back: list[Req] = []
        while self.swapped and budget > len(back) and self._seat_free():
            r = self.swapped[0]
            touched = r.synced // bs + append_blocks_touched(r.synced, r.num_tokens - r.synced, bs)
            if self.bm.num_free_blocks - touched < self.config.admission_watermark_blocks:
                break
            self.swapped.popleft()
            held = -(-r.synced // bs)
            self.bm.allocate(r.rid, self.ids(r, 0, r.synced))
            self.cpu_free_blocks += held
            self.swap_ins += 1
            self.swapped_in_blocks += held
            self.swap_pending_s += self._copy_s(held)
            self.admitted += 1
            r.admit_seq = self.admitted  # self.running.extend: at the end of the batch
            self.running.append(r)
            if r.outputs == 0:  # swapped out mid-prompt (chunked prefill)
                r.state = PREFILL
                self.prefilling.append(r)
                continue
            self._join_cohort(r, d)
            if not self._extend(r, r.computed + 1):  # _append_slots: touched counted it
                raise AssertionError("can_swap_in counted the new token's block")
            back.append(r)
        return back

    def _requeue(self, victim: Req, j: int, front: bool) -> Req:
        """Stop a running request before decode step j, free all its blocks and queue it again
        (at the head, or at the back) to recompute its prompt and outputs."""
        decoded = victim.state == DECODE and j > victim.j0  # it decoded in the step before
        self._stop_running(victim, j)
        if decoded and self.config.async_scheduling and victim.computed % self.block_size == 0:
            # async: a block is cached once the output of the step that filled it is processed;
            # that step's output comes after this preemption, so its last block is not kept
            self.bm.uncache_block(victim.rid, victim.computed // self.block_size - 1)
        self._release(victim)
        victim.state = WAITING
        victim.computed = 0
        victim.synced = 0
        victim.preemptions += 1
        self.preemptions += 1
        if front:
            self.waiting.appendleft(victim)
        else:
            self.waiting.append(victim)
        return victim

    def _finish(self, r: Req, j: int) -> None:
        if r.state == DECODE:
            raise AssertionError("leave the cohort first")
        if r.computed > r.synced:  # a last, partly filled block: cache it if it is full
            self._extend(r, r.computed)
        if self.config.async_scheduling:  # its seat and blocks are held through the next step
            self.lingering.append(r)
        else:
            self._release(r)
        self.running.remove(r)
        r.state = DONE
        self.finished.append(r)

    def _release_lingering(self) -> bool:
        """Free the requests that finished in the last step (async scheduling); whether any."""
        if not self.lingering:
            return False
        for r in self.lingering:
            self._release(r)
        self.lingering.clear()
        return True

    # ---- the decode cohort ------------------------------------------------------------------
    def _join_cohort(self, r: Req, j: int) -> None:
        """r decodes from step j on: one token per step until its target."""
        r.state = DECODE
        r.j0, r.c0 = j, r.computed
        r.epoch += 1
        self.buckets[(j - r.c0) % self.block_size][r.rid] = r
        heapq.heappush(self.finish_heap, (j + r.target - r.outputs - 1, r.epoch, r.rid, r))
        self.num_decodes += 1
        self.context_sum += r.c0 + 1
        if r.windowed:
            self.joined.append(r)
        if self.lookahead:
            self.spec_joined.append(r)

    def _leave_cohort(self, r: Req, j: int) -> None:
        """r stops decoding before step j (finished after j - 1, or preempted at j)."""
        del self.buckets[(r.j0 - r.c0) % self.block_size][r.rid]
        steps = j - r.j0
        r.computed = r.c0 + steps
        r.outputs += steps
        if steps:
            r.last_step = self._log_index(j - 1)
        self.num_decodes -= 1
        self.context_sum -= r.c0 + steps + 1
        r.state = PREFILL  # neither decoding nor done until the caller says
        r.epoch += 1

    def _after_decode_span(self, steps: int) -> None:
        """What a run of `steps` decode-only steps changes besides the cohort: after
        prefill-only steps (V0), the first one's gaps."""
        if self.config.prefill_first:
            assert self.decode_log is not None
            self._settle_gaps(self.step_index - steps, len(self.decode_log) - steps)

    def _log_index(self, d: int) -> int:
        """The step (log index) that ran decode step d."""
        return d if self.decode_log is None else self.decode_log[d]

    # ---- runs of decode-only steps ----------------------------------------------------------
    def _in_window(self) -> bool:
        """Multi-step scheduling: decode steps run inside a window of N, none admitted there."""
        n = self.config.scheduler_steps
        return n > 1 and self.num_decodes > 0 and self.decode_index % n != 0

    def _quiet(self) -> bool:
        """Nothing but decodes can happen this step: no prefill, and no admission possible."""
        if self.inbox or self.prefilling or not self.num_decodes or self.lingering:
            return False
        if self.swapped or self.swap_pending_s:  # V0's swapped queue is looked at every step
            return False
        if self._in_window():
            return True
        if self.ready and self._seat_free():
            return False
        return not (len(self.waiting) > self.receiving and self._may_admit())

    def _decode_span(self, horizon_s: float):
        """Advance decode-only steps together while no request finishes, no block runs out and
        no step starts at or after `horizon_s`. None when fewer than MIN_SPAN steps qualify."""
        import numpy as np

        steps = self.span_steps()
        if steps is None:
            return None
        times, terms = self.model.decode_span_s(self.num_decodes, self.span_sums(steps))
        ends = self.clock_s + np.cumsum(times)
        starts = ends - times
        steps = int(np.searchsorted(starts, horizon_s, side="left"))  # steps starting before
        if steps < MIN_SPAN:
            return None
        return self.commit_span(times[:steps], terms)

    def span_sums(self, steps: int):
        """The context sums the decodes attend in each of the next `steps` decode-only steps."""
        import numpy as np

        return self.context_sum + self.num_decodes * np.arange(steps, dtype=float)

    def span_steps(self) -> int | None:
        """How many decode-only steps can run together from now (ignoring arrivals): until
        the first finish, the end of a multi-step window, or what the pool holds without
        preempting. None when fewer than MIN_SPAN."""
        j = self.decode_index  # the cohort's clock
        if (self.joined and self._lagged_drops) or self.spec_joined:
            return None
        while self.finish_heap:
            top = self.finish_heap[0]
            r = top[3]
            if r.state == DECODE and top[1] == r.epoch:
                break
            heapq.heappop(self.finish_heap)
        last = self.finish_heap[0][0]  # the first decode to finish does so in step `last`
        n = self.config.scheduler_steps
        if n > 1:  # a multi-step window ends at the next multiple of N: admission then
            last = min(last, j + (n - j % n) - 1)
        steps = last - j + 1
        if steps < MIN_SPAN:
            return None
        bs, lookahead = self.block_size, self.lookahead
        tables = 1 + len(self.windows)  # a crossing opens a block in every group
        counts = [len(b) * tables for b in self.buckets]
        free = self._span_free_blocks()
        full_cycles = steps // bs
        need = full_cycles * self.num_decodes * tables
        need += sum(counts[(j + i + lookahead) % bs] for i in range(steps % bs))
        if need > free:  # shorten to what the pool holds without preempting (drops ignored)
            steps, need = 0, 0
            while steps < last - j + 1:
                extra = counts[(j + steps + lookahead) % bs]
                if need + extra > free:
                    break
                need += extra
                steps += 1
            if steps < MIN_SPAN:
                return None
        if self.windows and self.blocked and self._seat_free():
            # the windows' drops free blocks: end before a step whose drops could admit the
            # queue's head (each table in a drop bucket drops at most one block a step)
            if self.joined:
                return None
            free_bound, lag = free, int(self._lagged_drops)
            for i in range(steps):
                free_bound -= counts[(j + i + lookahead) % bs]
                for w in self.drop_windows:
                    tables = self.windows.count(w)
                    free_bound += tables * len(self.buckets[(j + i - w + 1 - lag) % bs])
                if free_bound >= self.blocked_need:
                    steps = i
                    break
            if steps < MIN_SPAN:
                return None
        return steps

    def commit_span(self, times, terms) -> list[Req]:
        """Run the next len(`times`) decode-only steps (span_steps allows them), each taking
        its time in `times` (a numpy array), `terms(steps)` their StepTime of sums."""
        import numpy as np

        j = self.decode_index
        bs, lookahead = self.block_size, self.lookahead
        steps = len(times)
        ends = self.clock_s + np.cumsum(times)
        totals = terms(steps)
        # hand the block manager every decode's tokens that crossed into a new block
        for residue in {(j + i + lookahead) % bs for i in range(min(steps, bs))}:
            for r in list(self.buckets[residue].values()):
                position = r.c0 + (j + steps - 1 - r.j0)
                if not self._extend(r, position + 1 + lookahead):
                    raise AssertionError("the span was sized to fit the pool")
        if self.windows:  # the windows' drops, step by step in admission order (freed blocks
            # join the free queue's tail, behind every block the span took from its head)
            for r in sorted(self.joined, key=_admit_order):
                if r.state == DECODE:
                    flight = 1 if j > r.j0 else self._chunk_in_flight(r, self.step_index)
                    self._drop_window_blocks(r, r.c0 + (j - r.j0), flight)
            self.joined.clear()
            lag = int(self._lagged_drops)
            for i in range(steps):
                for w in self.drop_windows:
                    bucket = self.buckets[(j + i - w + 1 - lag) % bs]
                    for r in sorted(bucket.values(), key=_admit_order):
                        position = r.c0 + (j + i - r.j0)
                        flight = 1 if j + i > r.j0 else self._chunk_in_flight(r, self.step_index)
                        self._drop_window_blocks(r, position, flight)
        if self.observer is not None:
            self.observer(self, steps, self.num_decodes, [])
        emitted = self.num_decodes
        detokenized = serial_stage_s(
            ends, self.detokenized_s, self.config.detokenizer_token_s * emitted
        )
        client = serial_stage_s(detokenized, self.client_s, self.frontend_per_token_s * emitted)
        term_s = self.term_s
        for key, seconds in totals.terms_s.items():
            term_s[key] += seconds
        self.busy_s += totals.total_s
        self.untimed_s += totals.untimed_s
        self.stand_in_launch_s += totals.stand_in_launch_s
        log = self.log
        log.end_s.extend(ends.tolist())
        log.client_s.extend(client.tolist())
        log.decode_tokens.extend([emitted] * steps)
        log.emitted.extend([emitted] * steps)
        log.running.extend([len(self.running)] * steps)
        log.waiting.extend([len(self.waiting)] * steps)
        used = self.bm.num_used_blocks
        log.kv_used.extend([used] * steps)
        log.duration_s.extend(times.tolist())
        self.peak_used = max(self.peak_used, used)
        self.clock_s = float(ends[-1])
        self.step_start_s, self.step_end_s = float(ends[-1] - times[-1]), self.clock_s
        self.client_s = float(client[-1])
        self.detokenized_s = float(detokenized[-1])
        self.context_sum += self.num_decodes * steps
        first_log = self.step_index
        self.step_index = first_log + steps
        self.decode_index = j + steps
        if self.decode_log is not None:
            self.decode_log.extend(range(first_log, first_log + steps))
        self._after_decode_span(steps)
        finished = []
        last_step = j + steps - 1
        while self.finish_heap and self.finish_heap[0][0] <= last_step:
            _, epoch, _, r = heapq.heappop(self.finish_heap)
            if r.state != DECODE or epoch != r.epoch:
                continue
            self._leave_cohort(r, last_step + 1)
            r.outputs = r.target
            r.last_step = self.step_index - 1
            self._finish(r, r.last_step)
            r.last_client_s = self.client_s
            finished.append(r)
        if finished:  # a step's record counts the requests left after its finishes (_record)
            log.running[-1] = len(self.running)
        return finished


def with_stand_in(config: EngineConfig, requests, run):
    """`run(stand_in)`: first with a counted pool standing in for the prefix cache where no
    prompt shares a token stream (StandInPool), redone with the real pool the moment caching
    could change the run (CachingMatters) — the same outcome either way, with no block hashed in
    the runs that never bring a freed sequence back."""
    if config.enable_prefix_caching and not any(r.stream_id >= 0 for r in requests):
        try:
            return run(True)
        except CachingMatters:
            pass
    return run(False)


def without_idle_caching(config: EngineConfig, requests) -> EngineConfig:
    """Prefix caching off when it cannot change the run: no prompt shares a token stream (no
    common prefix, no conversation) and the pool holds max_num_seqs of the longest request, so
    nothing is preempted (a preempted request finds its own freed blocks still cached when it
    comes back, as in vLLM). Then evictable blocks count as free, the schedule is the one with
    caching off, and the pool is counted instead of built, no block hashed."""
    if not config.enable_prefix_caching or any(r.stream_id >= 0 for r in requests):
        return config
    off = config._replace(enable_prefix_caching=False)
    return off if pool_demand(off, requests) <= config.num_blocks else config


def pool_demand(config: EngineConfig, requests) -> int:
    """Blocks all `requests` would hold if every one ran at once, to its full length; without
    prefix caching (nothing kept after a request ends) at most max_num_seqs of them at once."""
    total, largest = 1, 0
    for spec in requests:
        tokens = spec.input_tokens + spec.output_tokens
        blocks = -(-tokens // config.block_size) + side_blocks(config, tokens)
        blocks += window_blocks(config, tokens, config.max_num_batched_tokens)
        total += blocks
        largest = max(largest, blocks)
    if not config.enable_prefix_caching:
        total = min(total, config.max_num_seqs * largest + 1)
    return total


def window_blocks(config: EngineConfig, tokens: int, in_flight_tokens: int = 0) -> int:
    """Pool blocks a request of `tokens` holds at most in its sliding-window groups
    (window_groups): cdiv(window - 1 + in_flight_tokens, block_size) + 1 each, or its tokens'
    blocks if fewer. With no tokens in flight, vLLM's per-request estimate at start-up; with a
    step's token budget, what a prefill chunk holds until the next allocation drops it."""
    total = 0
    for window, copies in config.window_groups:
        cap = -(-(window - 1 + in_flight_tokens) // config.block_size) + 1
        total += copies * min(-(-tokens // config.block_size), cap)
    return total


def side_blocks(config: EngineConfig, tokens: int) -> int:
    """Pool blocks a request of `tokens` holds in its fixed-share groups (side_blocks): a
    chunk's or a window's blocks (or fewer), one block per state; in blocks of the
    full-attention groups."""
    physical = 0
    for cap, groups, size in config.side_blocks:
        blocks = -(-tokens // size)
        physical += groups * (1 if cap == 0 else min(blocks, cap))
    return -(-physical // config.main_groups)


def usable_blocks(vllm_num_blocks: int, main_groups: int = 1) -> int:
    """The engine's pool for vLLM's `num_blocks`: vLLM's BlockPool holds block 0 back as its
    null block (the placeholder of blocks a window has skipped), so num_blocks - 1 serve
    requests; a pool block here stands for `main_groups` of vLLM's."""
    return max(1, (vllm_num_blocks - 1) // main_groups)


class _Unservable(Exception):
    def __init__(self, req: Req):
        super().__init__(f"request {req.rid} cannot be scheduled")
        self.req = req


def _admit_order(r: Req) -> int:
    return r.admit_seq


def _token_ids(r: Req, start: int, end: int) -> list[int]:
    return r.token_ids(start, end)


def _lengths(r: Req, start: int, end: int) -> range:
    """For the counting pool: only the number of tokens matters."""
    return range(end - start)


def _side_lengths(rid: int, count: int) -> range:
    return range(count)


def _side_ids(rid: int, count: int) -> list[int]:
    base = (5 << 60) + rid * (1 << 32)
    return list(range(base, base + count))
