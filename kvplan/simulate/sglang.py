"""One engine replica as SGLang's scheduler runs it, where it differs from vLLM V1.

SGLang's event loop (python/sglang/srt/managers/scheduler.py, `get_next_batch_to_run`, and
schedule_policy.py's `PrefillAdder`, main of April 2026), with its defaults (no
--enable-mixed-chunk, --schedule-policy fcfs, radix cache on):

1. Prefill first: if any waiting request can be admitted (or a chunked prompt is half done),
   the step is a prefill batch alone; the running requests do not decode in it.
2. Admission, first come first served, stops at the first request that does not fit:
   - seats: the running requests plus this batch stay under max_running_requests;
   - input budget: max_prefill_tokens (16,384) new tokens per batch (the first request always);
   - chunk budget: chunked_prefill_size; a longer prompt is cut to what is left and finishes in
     the next prefill batches (one chunked request at a time);
   - KV budget: free + evictable tokens minus what the running requests are expected to still
     need, min(max_new_tokens - outputs, 4096) x new_token_ratio each, must exceed the new
     request's tokens to compute + min(max_new_tokens - outputs, 4096) (no page more); an
     admitted request then takes its tokens and min(max_new_tokens, 4096) in full (outputs
     made before a retraction included) from the budget.
   A request that finds no seat or no tokens (NO_TOKEN) marks the running batch full
   (`batch_is_full`): no admission is tried again until the running batch shrinks (a request
   finishes or is retracted, or a chunk of the chunked prompt ran) or was empty when the batch
   formed (and held no finished request: a prefill batch merged into a running batch that
   still holds one keeps the flag). A request that finishes in a decode step keeps its seat
   (and the batch its `batch_is_full`) until the next decode step's filter (the first of a
   run of decode steps), or an idle pass, removes it. Every prefill attempt that reaches the
   waiting loop (beside an unfinished chunk too) matches the head before deciding, admitted
   or refused: the match uses its path in the radix cache.
3. Otherwise every running request decodes one token. new_token_ratio starts at 0.7 and falls by
   (0.7 - 0.098) / 600 per decode step to 0.098. When the pool cannot hold the next tokens the
   scheduler retracts requests (fewest outputs first, then longest prompt; at least one stays)
   to the back of the queue, where they recompute, and sets new_token_ratio to
   (outputs decoded + 20 x requests) / (max_new_tokens + 1) over the requests left, at most 1.

4. The radix cache (page 1) holds what prefill computed, once the batch that computed it ran:
   a request's prompt (with its outputs so far, for one recomputed after a retraction) enters
   it after each prefill batch (cache_unfinished_req), so a request matched in the same batch
   finds none of it; the tokens decoding computes never do (cache_finished_req inserts the
   request's last prefill input, `fill_ids`, and frees the rest; retract_decode inserts
   nothing, and evicts ahead of the next decode steps); an insert frees the request's copies
   of tokens the tree already holds (a request matched in the same batch, or a prompt's last
   token), the request taking the tree's. A match leaves the prompt's last token
   to compute (`max_prefix_len = input_len - 1`) and is locked (no longer evictable) while the
   batch forms. Tokens outside the tree are allocated first; an allocation of n tokens (a
   prefill batch's, once it formed; a decode step's) that finds fewer outside the tree evicts
   at least n from it, whole leaves (what one insert added, split where a match ended), the
   one used least recently first (a match, or an insert, uses every node on its path).
5. A request's outputs stop at max_req_len - prompt - 1 (init_req_max_new_tokens), where
   max_req_len = min(context length, pool tokens) - 1; a prompt of max_req_len - 5 tokens or
   more is refused (`output_limit`, as the step log applies it; `kvplan simulate` caps prompt +
   outputs at the pool's limit in setup and at max_model_len as vLLM does, 2 tokens more).

The pool, the prefix cache, the decode cohort and the step log are kvplan.simulate.engine's;
only the choice of what each step runs, what enters the prefix cache and the output limit
differ. max_new_tokens is the request's output length
(what `vllm bench serve` sends as max_tokens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.engines.sglang import graph_batch_size
from kvplan.formulas.batch_step import BatchShape, lockstep_gathered_tokens, shape_tokens
from kvplan.formulas.expert_parallel import sglang_dp_max_len
from kvplan.kernels.block_manager import BlockManager, NoFreeBlocksError
from kvplan.record import NamedTuple
from kvplan.simulate.engine import DECODE, Engine, Req, _Unservable

if TYPE_CHECKING:  # numpy is imported where the arrays are made
    import numpy as np

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0
# server_args._handle_data_parallelism with DP attention on (0.4 to main): schedule_conservativeness
# x 0.3 (init and min new_token_ratio scale with it) and chunked_prefill_size // dp_size
DP_ATTENTION_CONSERVATIVENESS = 0.3
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens


class SglangPolicy(NamedTuple):
    """SGLang's scheduling limits for one replica (max_running_requests is the engine config's
    max_num_seqs, chunked_prefill_size its max_num_batched_tokens)."""

    max_prefill_tokens: int = MAX_PREFILL_TOKENS
    page_size: int = 1  # SGLang's page (the simulated pool may count coarser blocks)
    init_new_token_ratio: float = INIT_NEW_TOKEN_RATIO
    # the overlap scheduler (Scheduler.event_loop_overlap, 0.4.0 to main): each pass receives
    # the requests sent so far, forms the next batch and launches it behind the running one
    # (run_batch does not wait), then waits for the batch before it. A batch is therefore
    # formed when the step before it begins, and a request that reaches the scheduler after a
    # step began is first seen by the pass that forms the step after the next: it waits for
    # the running step and one more (SglangEngine._collect_inbox). The plain loop
    # (event_loop_normal; 0.3's ModelTpServer.forward_step) runs each batch to its end before
    # it receives again: no step more.
    overlap: bool = False

    def paged_tokens(self, tokens: int) -> int:
        """PrefillAdder.ceil_paged_tokens: what a prefill of `tokens` new tokens takes from the
        batch's input, chunk and KV budgets, in whole pages (schedule_policy.py of 0.5.6.post2:
        _update_prefill_budget charges the rounded count, :443; add_one_req compares it with
        rem_input_tokens and rem_chunk_tokens, :588, :611, :616; 0.5.3 the same at :426, :565,
        :588, :593). The KV check (total_tokens >= rem_total_tokens) takes the count unrounded.
        With DeepSeek sparse attention's 64-token pages and the per-rank chunk of
        DP attention (chunked_prefill_size // dp_size), a short prompt leaves much of a batch's
        chunk unused."""
        return -(-tokens // self.page_size) * self.page_size

    @property
    def min_new_token_ratio(self) -> float:
        return self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS


class _Node:
    """A radix-tree node over the pool's blocks: what one insert added (split where a match
    ended), its last use and its first block's position in its sequence."""

    __slots__ = ("blocks", "access", "depth")

    def __init__(self, blocks: list, access: int, depth: int):
        self.blocks, self.access, self.depth = blocks, access, depth


class SglangEngine(Engine):
    """An Engine whose steps are SGLang's: a prefill batch alone when one can be formed, else a
    decode step for every running request."""

    def __init__(self, config, model, frontend_per_token_s, demand_blocks=None, observer=None,
                 policy: SglangPolicy = SglangPolicy()):  # fmt: skip
        # tokens outside the radix cache go back to the allocator's free list and are taken
        # first; the tree's are evicted only when that list runs out
        config = config._replace(free_uncached_first=True)
        super().__init__(config, model, frontend_per_token_s, demand_blocks, observer)
        self.policy = policy
        self.ratio = policy.init_new_token_ratio
        self.chunked: Req | None = None  # the request whose prompt is being prefilled in chunks
        # running_batch.batch_is_full: no admission is tried until the running batch shrinks
        self.full = False
        # a decode finished since the last decode step: update_running_batch's filter_batch
        # clears batch_is_full at the next decode step, after that step's prefill attempt
        self.shrunk = False
        # decode finishes since then: still in running_batch (holding a seat) until that filter
        self.unfiltered = 0
        self.prefill_finishing = False  # finishes now are of a prefill batch
        self.decode_log: list[int] = []
        self.ends: dict[int, int] = {}  # decoding request -> the decode step after its last
        self.ends_array: np.ndarray | None = None  # the same as an array, until it changes
        self.head_memo: tuple = (None, None)  # (request, step) -> _head_need, within one step
        # prefilled / joined_at (Engine's): whether a prefill step ran since the last decode
        # step, and (request, the step of its first token) of who joined the decodes in it
        self.fill_end: dict[int, int] = {}  # request -> tokens its last prefill covers
        self.node_of: dict[int, _Node] = {}  # cached block -> its radix-tree node
        self.tick = 0  # the tree's clock: a node's last use

    def admit(self, req: Req, now: float) -> None:
        if not self.has_work and now > self.clock_s:
            # the event loop passed idle since the last step: update_running_batch filtered the
            # finished requests out of the running batch (seats and batch_is_full cleared)
            self.unfiltered, self.shrunk, self.full = 0, False, False
        super().admit(req, now)

    @property
    def forms_ahead(self) -> bool:
        """The overlap scheduler forms each batch while the one before runs (SglangPolicy.overlap;
        Engine._collect_inbox)."""
        return self.busy_loop and self.policy.overlap

    def _runs_on(self) -> bool:
        return self.num_decodes > 0 or self.chunked is not None

    # ---- what a request may ask for ----------------------------------------------------------
    def output_limit(self, input_tokens: int, max_model_len: int) -> int:
        """init_req_max_new_tokens' cap on outputs (0: the prompt is refused)."""
        pool_tokens = self.config.num_blocks * self.config.block_size
        max_req_len = min(max_model_len - 1, pool_tokens - 1)
        if input_tokens >= max_req_len - 5:  # max_req_input_len: an error reply
            return 0
        return max_req_len - input_tokens - 1

    # ---- the radix cache: prefill's tokens, after their batch ----------------------------------
    def _extend(self, r: Req, upto: int) -> bool:
        """Hand the block manager r's tokens up to `upto`, outside the prefix cache: what a
        prefill batch computed enters it after the batch (`_insert`), decodes' tokens never."""
        if upto <= r.synced:
            return True
        try:
            self.bm.append_tokens(r.rid, self.ids(r, r.synced, upto), cache=False)
        except NoFreeBlocksError:
            return False
        r.synced = upto
        return True

    def _insert(self, r: Req) -> None:
        """cache_unfinished_req / cache_finished_req: r's prefill tokens so far into the tree;
        the blocks this adds are one node (a leaf), and the path to it is touched."""
        upto = min(self.fill_end.get(r.rid, 0), r.synced)
        if not isinstance(self.bm, BlockManager):
            self.bm.cache_blocks(r.rid, upto)
            return
        bm = self.bm
        own = {b for b in bm.block_table(r.rid) if b is not None and bm.blocks[b].hash is None}
        # what the tree already holds replaces r's copies, which are freed
        bm.cache_blocks(r.rid, upto, merge=True)
        table = [b for b in bm.block_table(r.rid) if b is not None]
        new = [b for b in table if b in own and bm.blocks[b].hash is not None]
        held = table[: table.index(new[0])] if new else table[: upto // self.block_size]
        if held:  # the insert splits the node its path leaves the tree in
            self._split(held)
        self.tick += 1
        if new:
            node = _Node(new, self.tick, table.index(new[0]))
            for b in new:
                self.node_of[b] = node
        self._touch(table)

    def _touch(self, blocks) -> None:
        """match_prefix / insert: every node on the path was used now."""
        for b in blocks:
            node = self.node_of.get(b)
            if node is not None:
                node.access = self.tick

    def _split(self, matched: list) -> None:
        """match_prefix: a match that ends inside a node splits it there (two nodes, evicted
        apart); the path is touched."""
        self.tick += 1
        node = self.node_of.get(matched[-1]) if matched else None
        if node is not None:
            cut = node.blocks.index(matched[-1]) + 1
            if cut < len(node.blocks):
                head = _Node(node.blocks[:cut], self.tick, node.depth)
                tail = _Node(node.blocks[cut:], self.tick, node.depth + cut)
                for part in (head, tail):
                    for b in part.blocks:
                        self.node_of[b] = part
        self._touch(matched)

    def _evict_for(self, num_blocks: int) -> None:
        """evict_from_tree_cache: when fewer than `num_blocks` free blocks are outside the tree,
        evict at least that many from it, whole leaves, the least recently used first (a
        node's parent is used whenever it is, so the deeper of two goes first on a tie).
        SGLang counts tokens (page 1); the simulated pool may count coarser blocks."""
        bm = self.bm
        if not isinstance(bm, BlockManager):  # prefix caching off: nothing in a tree
            return
        if bm.num_free_blocks - bm.num_cached_free_blocks >= num_blocks:
            return
        evicted = 0
        # evicting a leaf changes no other node's blocks, so the leaves found once are the
        # ones a fresh look would find, less those evicted: taken in order, found again only
        # when spent (a fresh look per leaf made a full pool's eviction quadratic)
        leaves: list = []
        while evicted < num_blocks:
            if not leaves:
                free = list(bm.cached_free_blocks())
                if not free:
                    return
                leaves = sorted(self._free_leaves(bm, free), reverse=True)
            leaf = leaves.pop()[2] if leaves else [free[0]]
            for b in leaf:
                self.node_of.pop(b, None)
            bm.evict(leaf)
            evicted += len(leaf)

    def _free_leaves(self, bm: BlockManager, free: list) -> list:
        """(access, -depth, blocks) of each node whose cached blocks are all free."""
        nodes = {id(n): n for n in map(self.node_of.get, free) if n is not None}
        leaves = []
        for node in nodes.values():
            cached = [b for b in node.blocks if self.node_of.get(b) is node]
            cached = [b for b in cached if bm.blocks[b].hash is not None]
            if cached and all(bm.blocks[b].ref_count == 0 for b in cached):
                leaves.append((node.access, -node.depth, cached))
        return leaves

    def _span_free_blocks(self) -> int:
        """A run of decode steps takes only blocks outside the tree (evicting is per step)."""
        return self.bm.num_free_blocks - self.bm.num_cached_free_blocks

    def _release(self, r: Req) -> None:
        super()._release(r)
        self.fill_end.pop(r.rid, None)

    # ---- the KV budget ------------------------------------------------------------------------
    def _join_cohort(self, r: Req, j: int) -> None:
        super()._join_cohort(r, j)
        self.ends[r.rid] = j + r.target - r.outputs  # the decode step after its last
        self.ends_array = None

    def _finish(self, r: Req, j: int) -> None:
        if r.rid in self.fill_end:  # cache_finished_req, before its blocks are freed
            self._insert(r)
        super()._finish(r, j)
        if self.prefill_finishing:  # get_next_batch_to_run filters the last (extend) batch first
            self.full = False
        else:
            self.shrunk = True
            self.unfiltered += 1

    def _leave_cohort(self, r: Req, j: int) -> None:
        super()._leave_cohort(r, j)
        del self.ends[r.rid]
        self.ends_array = None

    def _remaining_outputs(self):
        """Outputs each decoding request may still produce, now (a numpy array)."""
        import numpy as np

        if self.ends_array is None:
            self.ends_array = np.fromiter(self.ends.values(), dtype=float, count=len(self.ends))
        return self.ends_array - self.decode_index

    def _reserved_tokens(self, ratio: float) -> float:
        import numpy as np

        return float(np.minimum(self._remaining_outputs(), CLIP_MAX_NEW_TOKENS).sum()) * ratio

    def _free_tokens(self) -> int:
        return self.bm.num_free_blocks * self.block_size

    def _head_need(self, r: Req) -> tuple[int, int, list[int] | range, int]:
        """(tokens to compute, cached prefix tokens, token ids, cached prefix tokens now free)
        for r's prefill now."""
        key = (r.rid, r.num_tokens, self.step_index, self.bm.num_free_blocks)
        if self.head_memo[0] == key:
            return self.head_memo[1]
        self.head_memo = (key, self._head_need_now(r))
        return self.head_memo[1]

    def _head_need_now(self, r: Req) -> tuple[int, int, list[int] | range, int]:
        ids = self.ids(r, 0, r.num_tokens)
        hits = self.bm.cached_prefix_tokens(ids)  # whole blocks within the first len - 1
        # hit blocks no running request holds: evictable until the match is locked
        blocks = -(-r.num_tokens // self.block_size)
        free_hits = self.bm.blocks_to_allocate(ids) - (blocks - hits // self.block_size)
        return r.num_tokens - hits, hits, ids, free_hits * self.block_size

    def _head_total(self, r: Req, extend: int) -> int:
        """PrefillAdder.add_one_req's `total_tokens`: tokens to compute + outputs left."""
        return extend + min(r.target - r.outputs, CLIP_MAX_NEW_TOKENS)

    def lockstep_rules(self, shapes: list[BatchShape]) -> tuple[bool, bool]:
        """SGLang's DP-attention step (scheduler_dp_attn_mixin.prepare_mlp_sync_batch_raw):
        can_cuda_graph is the minimum over the ranks and an extend (prefill) batch cannot run a
        graph, so a prefill on any rank, or a rank past the graphs' largest batch, runs every
        rank eagerly; the MoE gather pads every rank to the largest count (DpPaddingMode
        MAX_LEN) in a decode step where 2 x sum > ranks x max, and sums them otherwise and with
        a prefill in the step (SUM_LEN): expert_parallel.sglang_dp_max_len, an idle rank's
        tokens 0 (idle_rank_tokens)."""
        tokens = [shape_tokens(s) if s.num_decodes or s.prefill_chunks else 0 for s in shapes]
        extend = any(s.prefill_chunks for s in shapes)
        eager = extend or max(tokens) > self.model.cuda_graph_max_tokens
        return eager, sglang_dp_max_len(tokens, extend)

    def lockstep_batch(
        self, shapes: list[BatchShape], idle: int, eager: bool, pad: bool
    ) -> tuple[int, int, bool]:
        """SGLang's DP-attention gather (Engine.lockstep_batch). Under CUDA graphs every rank
        replays the graph of the smallest captured batch size at least the largest rank's
        batch (cuda_graph_runner.replay: bisect over capture_bs of max(global_num_tokens); an
        idle rank too) and sets every rank's token and sampled counts to it: the MoE and MLP
        layers and the head run on ranks x that size, gathered padded (all_gather_into_tensor).
        Eagerly, an idle rank's batch has no tokens (prepare_mlp_sync_batch_raw), the ranks'
        tokens are summed or padded to the largest (lockstep_rules), the head's rows summed."""
        ranks = len(shapes) + idle
        if not eager and self.model.dp_gather_full:
            speculative = getattr(self.model, "speculation", None) is not None
            size = graph_batch_size(
                max(s.num_decodes for s in shapes), self.model.cuda_graph_max_tokens, speculative
            )
            if size is not None:
                return ranks * size, ranks * size, True
        tokens = [shape_tokens(s) for s in shapes] + [0] * idle
        return lockstep_gathered_tokens(tokens, pad), sum(s.num_sampled for s in shapes), pad

    # ---- one step -----------------------------------------------------------------------------
    def plan_step(self):
        plan = self.plan_prefill()
        return plan if plan is not None else self.plan_decode()

    @property
    def lockstep_exclusive_prefill(self) -> bool:
        """Under speculative decoding a DP-attention group never mixes prefill and decode
        batches: get_next_batch_to_run syncs the ranks' new prefill batches first
        (prepare_mlp_sync_batch, "prefill and decode batches will not be mixed when spec and
        dp-attn is enabled") and, when any rank formed one, every other rank runs an idle batch
        instead of its decodes (Engine.lockstep_exclusive_prefill). --speculative-skip-dp-mlp-sync
        skips that sync: each rank runs what its own scheduler formed."""
        speculating = getattr(self.model, "speculation", None) is not None
        return speculating and not getattr(self.model, "skip_dp_mlp_sync", False)

    def plan_prefill(self):
        """get_new_batch_prefill: (the prefill batch's BatchShape, the function that settles
        it), or None where this pass forms none."""
        j = self.step_index
        self._collect_inbox()
        chunks = self._prefill_batch()
        if not chunks:
            return None
        shape = BatchShape(
            0,
            0,
            tuple((n, r.computed) for r, n in chunks),
            sum(1 for r, n in chunks if r.computed + n >= r.num_tokens),
        )
        return shape, lambda timing: self._settle_prefill(j, timing, chunks)

    def plan_decode(self):
        """update_running_batch: the decode step of every running request (plan_step's), or
        the finished requests of a pass that runs nothing (a list)."""
        j = self.step_index
        self._collect_inbox()
        if not self.num_decodes:
            if self.chunked is not None or self.waiting:  # nothing runs, nothing will free
                raise _Unservable(self.chunked or self.waiting[0])
            return []
        shrunk, self.shrunk = self.shrunk, False
        self.unfiltered = 0
        retracted = self._make_room()
        if retracted or shrunk:  # update_running_batch: the batch is smaller than it was
            self.full = False
        if not retracted:  # the ratio decays unless it retracted
            self.ratio = max(
                self.ratio - self.policy.new_token_ratio_decay, self.policy.min_new_token_ratio
            )
        d, lookahead = self.decode_index, self.lookahead
        for r in self._decode_allocations():
            if not self._extend(r, r.c0 + (d - r.j0) + 1 + lookahead):
                raise _Unservable(r)  # alone in the pool and still out of room
        self.spec_joined.clear()
        self.joined_at = [(r, p) for r, p in self.joined_at if r.state == DECODE]  # not retracted
        shape = BatchShape(self.num_decodes, self.context_sum, (), self.num_decodes)
        return shape, lambda timing: self._settle_decode(j, timing)

    def _settle_prefill(self, j: int, timing, chunks) -> list[Req]:
        """Prefill batch j ran in `timing`: its chunks advance, its prompts enter the tree."""
        self.prefill_finishing = True
        try:
            finished = self._advance(j, timing, chunks, decoded=False)
        finally:
            self.prefill_finishing = False
        for r, _ in chunks:  # the batch ran: its prefill tokens enter the tree
            if r.rid in self.fill_end:
                self._insert(r)
        self.prefilled = True
        self.joined_at += [(r, j) for r, _ in chunks if r.state == DECODE]
        return finished

    def _settle_decode(self, j: int, timing) -> list[Req]:
        """Decode step j ran in `timing`: every running request took a token."""
        finished = self._advance(j, timing, [], decoded=True)
        self._settle_gaps(j, len(self.decode_log) - 1)
        return finished

    def _prefill_batch(self) -> list[tuple[Req, int]]:
        """PrefillAdder: the chunked request's next chunk, then waiting requests in order."""
        seated = len(self.running) + self.unfiltered >= self.config.max_num_seqs
        if (self.full or seated) and self.shrunk and not self.num_decodes:
            # no seat, or batch_is_full, and nothing decoding: the pass forms no batch, and
            # update_running_batch filters the finished requests out (the batch is empty),
            # clearing batch_is_full; that pass takes no step, the next tries the prefill
            self.full, self.shrunk = False, False
            self.unfiltered = 0
        if (self.full or not self.waiting) and self.chunked is None:
            return []
        policy, config = self.policy, self.config
        # the batch becomes the running batch, its flag cleared, unless that still holds a
        # request finished since the last decode step (merged into it, the flag stays)
        alone = not self.num_decodes and not self.unfiltered
        rem_input = policy.max_prefill_tokens
        rem_chunk = config.max_num_batched_tokens
        rem_total = self._free_tokens() - self._reserved_tokens(self.ratio)
        chunks: list[tuple[Req, int]] = []
        # the batch's new tokens, allocated once it is formed (prepare_for_extend), after every
        # match: (request, tokens up to), and the blocks they take
        pending: list[tuple[Req, int]] = []
        room = self.bm.num_free_blocks
        if self.chunked is not None:  # add_chunked_req: the next chunk, within the KV budget
            r = self.chunked
            n = min(r.num_tokens - r.computed, rem_chunk, int(rem_total))
            paged = policy.paged_tokens(n)  # add_chunked_req's budget update
            cost = self.bm.append_cost(r.rid, n) if n > 0 else 0
            if n <= 0 or cost > room:
                return chunks  # not this time: the running requests decode first
            room -= cost
            if isinstance(self.bm, BlockManager):  # init_next_round_input matches it again
                self.tick += 1
                self._touch(self.bm.block_table(r.rid))
            pending.append((r, r.computed + n))
            chunks.append((r, n))
            if r.computed + n >= r.num_tokens:
                self.chunked = None
                rem_total -= min(r.target, CLIP_MAX_NEW_TOKENS)  # max_new_tokens, in full
            else:  # the next round filters the chunked request out of the batch: it shrank
                self.full = False
                self._match_head()
            rem_input -= paged
            rem_chunk -= paged
            rem_total -= paged
        while self.waiting and self.chunked is None and not self.full:
            if len(self.running) + self.unfiltered >= config.max_num_seqs:
                self.full = True
                break
            r = self.waiting[0]
            extend, hits, ids, free_hits = self._head_need(r)
            matched = self.bm.prefix_blocks(ids)
            self._split(matched)  # match_prefix splits the node its match ends in
            total = self._head_total(r, extend)
            if total >= rem_total - free_hits:  # NO_TOKEN, with the match locked
                self.full = True
                break
            # add_one_req compares and charges the input in whole pages (paged_tokens)
            if policy.paged_tokens(extend) >= rem_input and chunks:
                break
            if policy.paged_tokens(extend) <= rem_chunk:
                n = extend
                rem_total -= min(r.target, CLIP_MAX_NEW_TOKENS)  # max_new_tokens, in full
            else:
                n = rem_chunk // policy.page_size * policy.page_size
                if n <= 0:
                    break
                self.chunked = r
            new_blocks = -(-(hits + n) // self.block_size) - hits // self.block_size
            if new_blocks > room - free_hits // self.block_size:
                self.chunked = None if self.chunked is r else self.chunked
                break
            room -= new_blocks + free_hits // self.block_size
            # the match now (locked); this batch's tokens after it formed, outside the tree
            # until the batch ran
            self.bm.allocate(r.rid, ids[:hits], hit=(0, matched))
            pending.append((r, hits + n))
            self.waiting.popleft()
            self.fill_end[r.rid] = r.num_tokens
            if r.admit_s < 0:
                r.admit_s = self.clock_s
            self.queried_tokens += r.num_tokens
            self.hit_tokens += hits
            r.computed, r.synced = hits, hits
            self._schedule_admitted(r, n, 0, chunks)
            paged = policy.paged_tokens(n)
            rem_input -= paged
            rem_chunk -= paged
            rem_total -= paged + free_hits  # the match stays locked
            if rem_total <= 0:  # budget_state after the add: NO_TOKEN
                self.full = True
            elif rem_input <= 0 or rem_chunk <= 0:  # OTHER: the next is not matched
                break
        if pending:  # alloc_for_extend: the batch's tokens at once, evicting ahead if short
            self._evict_for(sum(self.bm.append_cost(r.rid, upto - r.synced) for r, upto in pending))
            for r, upto in pending:
                if not self._extend(r, upto):
                    raise AssertionError("the batch was sized to fit the pool")
        if alone:
            self.full = False
        return chunks

    def _match_head(self) -> None:
        """A chunk that does not finish its prompt still leaves the waiting loop its turn: the
        head, given a seat, is matched (its path used, the node its match ends in split) and then
        refused (no chunk budget left, or NO_TOKEN, which the next round's filter clears)."""
        if not self.waiting or self.full or not isinstance(self.bm, BlockManager):
            return
        if len(self.running) + self.unfiltered >= self.config.max_num_seqs:
            return  # batch_is_full before the match, cleared by the next round's filter
        self._split(self.bm.prefix_blocks(self._head_need(self.waiting[0])[2]))

    def _decode_allocations(self) -> list[Req]:
        """The decoding requests the next decode step allocates for: those whose next token
        (with spec v2, the last of the slots held ahead: EngineConfig.spec_lookahead) opens a
        block, and those that joined since the last decode step while slots are held ahead
        (their first round tops up to them)."""
        d, bs = self.decode_index, self.block_size
        joined = {r.rid: r for r in self.spec_joined if r.state == DECODE}  # once each
        crossing = self.buckets[(d + self.lookahead) % bs].values()
        return [r for r in crossing if r.state == DECODE and r.rid not in joined] + list(
            joined.values()
        )

    def _decode_need_blocks(self) -> int:
        """check_decode_mem: the blocks the next decode step takes (a token a request, here a
        block where it starts one; with spec v2, new_tokens_required_next_decode's top-up to
        kv_committed_len + 2 x the per-round allocation)."""
        d, lookahead = self.decode_index, self.lookahead
        joined = {r.rid: r for r in self.spec_joined if r.state == DECODE}  # once each
        crossing = self.buckets[(d + lookahead) % self.block_size].values()
        need = sum(1 for r in crossing if r.state == DECODE and r.rid not in joined)
        for (
            r
        ) in joined.values():  # the first round's top-up: every block up to the slots held ahead
            upto = r.c0 + (d - r.j0) + 1 + lookahead
            need += self.bm.append_cost(r.rid, upto - r.synced) if upto > r.synced else 0
        return need

    def _make_room(self) -> bool:
        """check_decode_mem / retract_decode: free the blocks the next decode step needs; True
        when it retracted. Where the last decode still finds no room beside a half-prefilled
        chunked request (SGLang would abort the decode, or run out of memory in the next
        chunk), the chunked request is retracted instead: the simulator's way through."""
        d = self.decode_index
        self._evict_for(self._decode_need_blocks())
        if self._decode_need_blocks() <= self.bm.num_free_blocks:
            return False
        decoding = [r for r in self.running if r.state == DECODE]
        # retract_decode: sort by (outputs, -prompt) descending and pop from the end
        decoding.sort(key=lambda r: (r.outputs + (d - r.j0), -r.input_tokens), reverse=True)
        while len(decoding) > 1:
            if self._decode_need_blocks() <= self.bm.num_free_blocks:
                break
            self._requeue(decoding.pop(), d, front=False)
            tokens = len(decoding) * RETRACT_DECODE_STEPS  # release_req
            self._evict_for(-(-tokens // self.block_size))
        chunked = self.chunked
        if chunked is not None and self._decode_need_blocks() > self.bm.num_free_blocks:
            self.chunked = None
            self._requeue(chunked, d, front=True)  # admitted before every waiting request
        outputs = sum(r.outputs + (d - r.j0) for r in decoding)
        targets = sum(r.target for r in decoding)
        self.ratio = min(1.0, (outputs + RETRACT_DECODE_STEPS * len(decoding)) / (targets + 1))
        return True

    # ---- runs of decode-only steps ------------------------------------------------------------
    def _quiet(self) -> bool:
        if self.inbox or self.chunked is not None or self.prefilling or not self.num_decodes:
            return False
        if self.shrunk and self.waiting:  # the next decode step clears batch_is_full: alone
            return False
        if self.waiting and not self.full:
            if self._head_fits():
                return False
            # the prefill attempt finds no seat or no tokens: batch_is_full, and nothing is
            # admitted until a finish or a retraction, which end a run of decode steps anyway
            self.full = True
        return True

    def _head_fits(self) -> bool:
        """Whether the queue's head would be admitted now: a seat, and its prompt, expected
        outputs and a page within the KV budget (PrefillAdder.add_one_req's first test)."""
        if len(self.running) + self.unfiltered >= self.config.max_num_seqs:
            return False
        rem_total = self._free_tokens() - self._reserved_tokens(self.ratio)
        extend, _, ids, free_hits = self._head_need(self.waiting[0])
        if isinstance(self.bm, BlockManager):  # init_next_round_input matches it, even refused
            self._split(self.bm.prefix_blocks(ids))
        return 0 < rem_total and self._head_total(self.waiting[0], extend) < rem_total - free_hits

    def _after_decode_span(self, steps: int) -> None:
        if steps and self.shrunk:  # the first step's update_running_batch filtered the finishes
            self.shrunk, self.full, self.unfiltered = False, False, 0
        policy = self.policy
        self.ratio = max(
            self.ratio - policy.new_token_ratio_decay * steps, policy.min_new_token_ratio
        )
        self._settle_gaps(self.step_index - steps, len(self.decode_log) - steps)
