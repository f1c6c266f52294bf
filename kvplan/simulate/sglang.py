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
     request's prompt + min(max_new_tokens, 4096) + one page.
   A request that finds no seat or no tokens (NO_TOKEN) marks the running batch full
   (`batch_is_full`): no admission is tried again until the running batch shrinks (a request
   finishes or is retracted, or a chunk of the chunked prompt ran) or was empty when the batch
   formed. SGLang notices a decode's finish one decode step later; the simulation at once.
3. Otherwise every running request decodes one token. new_token_ratio starts at 0.7 and falls by
   (0.7 - 0.098) / 600 per decode step to 0.098. When the pool cannot hold the next tokens the
   scheduler retracts requests (fewest outputs first, then longest prompt; at least one stays)
   to the back of the queue, where they recompute, and sets new_token_ratio to
   (outputs decoded + 20 x requests) / (max_new_tokens + 1) over the requests left, at most 1.

The pool, the prefix cache, the decode cohort and the step log are kvplan.simulate.engine's;
only the choice of what each step runs differs. max_new_tokens is the request's output length
(what `vllm bench serve` sends as max_tokens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.formulas.batch_step import BatchShape
from kvplan.kernels.block_manager import NoFreeBlocksError
from kvplan.record import NamedTuple
from kvplan.simulate.engine import DECODE, Engine, Req, _Unservable

if TYPE_CHECKING:  # numpy is imported where the arrays are made
    import numpy as np

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0
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

    @property
    def min_new_token_ratio(self) -> float:
        return self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS


class SglangEngine(Engine):
    """An Engine whose steps are SGLang's: a prefill batch alone when one can be formed, else a
    decode step for every running request."""

    def __init__(self, config, model, frontend_per_token_s, demand_blocks=None, observer=None,
                 policy: SglangPolicy = SglangPolicy()):  # fmt: skip
        super().__init__(config, model, frontend_per_token_s, demand_blocks, observer)
        self.policy = policy
        self.ratio = policy.init_new_token_ratio
        self.chunked: Req | None = None  # the request whose prompt is being prefilled in chunks
        # running_batch.batch_is_full: no admission is tried until the running batch shrinks
        self.full = False
        # a decode finished since the last decode step: update_running_batch's filter_batch
        # clears batch_is_full at the next decode step, after that step's prefill attempt
        self.shrunk = False
        self.prefill_finishing = False  # finishes now are of a prefill batch
        self.decode_log: list[int] = []
        self.ends: dict[int, int] = {}  # decoding request -> the decode step after its last
        self.ends_array: np.ndarray | None = None  # the same as an array, until it changes
        self.head_memo: tuple = (None, None)  # (request, step) -> _head_need, within one step
        # since the last decode step: whether a prefill step ran, and who joined the decodes
        self.prefilled = False
        # (request, the step of its first token); Engine.joined is another list (windowed ones)
        self.joined_at: list[tuple[Req, int]] = []

    # ---- the KV budget ------------------------------------------------------------------------
    def _join_cohort(self, r: Req, j: int) -> None:
        super()._join_cohort(r, j)
        self.ends[r.rid] = j + r.target - r.outputs  # the decode step after its last
        self.ends_array = None

    def _finish(self, r: Req, j: int) -> None:
        super()._finish(r, j)
        if self.prefill_finishing:  # get_next_batch_to_run filters the last (extend) batch first
            self.full = False
        else:
            self.shrunk = True

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

    def _head_need(self, r: Req) -> tuple[int, int, list[int] | range]:
        """(tokens to compute, cached prefix tokens, token ids) for r's prefill now."""
        key = (r.rid, r.num_tokens, self.step_index, self.bm.num_free_blocks)
        if self.head_memo[0] == key:
            return self.head_memo[1]
        self.head_memo = (key, self._head_need_now(r))
        return self.head_memo[1]

    def _head_need_now(self, r: Req) -> tuple[int, int, list[int] | range]:
        ids = self.ids(r, 0, r.num_tokens)
        cap = (r.num_tokens - 1) // self.block_size * self.block_size
        hits = min(self.bm.cached_prefix_tokens(ids[:-1]), cap) if cap else 0
        return r.num_tokens - hits, hits, ids

    def _head_total(self, r: Req, extend: int) -> int:
        """PrefillAdder.add_one_req's `total_tokens`: prompt + expected outputs + a page."""
        return extend + min(r.target - r.outputs, CLIP_MAX_NEW_TOKENS) + self.policy.page_size

    # ---- one step -----------------------------------------------------------------------------
    def step(self, horizon_s: float) -> list[Req]:
        if self._quiet():
            done = self._decode_span(horizon_s)
            if done is not None:
                return done
        j = self.step_index
        chunks = self._prefill_batch()
        if chunks:
            shape = BatchShape(
                0,
                0,
                tuple((n, r.computed) for r, n in chunks),
                sum(1 for r, n in chunks if r.computed + n >= r.num_tokens),
            )
            self.prefill_finishing = True
            try:
                finished = self._advance(j, self.model.step(shape), chunks, decoded=False)
            finally:
                self.prefill_finishing = False
            self.prefilled = True
            self.joined_at += [(r, j) for r, _ in chunks if r.state == DECODE]
            return finished
        if not self.num_decodes:
            if self.chunked is not None or self.waiting:  # nothing runs, nothing will free
                raise _Unservable(self.chunked or self.waiting[0])
            return []
        shrunk, self.shrunk = self.shrunk, False
        retracted = self._make_room()
        if retracted or shrunk:  # update_running_batch: the batch is smaller than it was
            self.full = False
        if not retracted:  # the ratio decays unless it retracted
            self.ratio = max(
                self.ratio - self.policy.new_token_ratio_decay, self.policy.min_new_token_ratio
            )
        d = self.decode_index
        for r in list(self.buckets[d % self.block_size].values()):
            if r.state == DECODE and not self._extend(r, r.c0 + (d - r.j0) + 1):
                raise _Unservable(r)  # alone in the pool and still out of room
        self.joined_at = [(r, p) for r, p in self.joined_at if r.state == DECODE]  # not retracted
        shape = BatchShape(self.num_decodes, self.context_sum, (), self.num_decodes)
        finished = self._advance(j, self.model.step(shape), [], decoded=True)
        self._settle_gaps(j, len(self.decode_log) - 1)
        return finished

    def _settle_gaps(self, q: int, position: int) -> None:
        """Decode step q (log index) followed prefill steps: its tokens' previous tokens came
        from the decode step before them (or, for requests that joined since, from their prefill
        step), not from step q - 1. Recorded as explicit gaps; q's own weight is cleared."""
        if not self.prefilled:
            return
        continuing = self.log.decode_tokens[q] - len(self.joined_at)
        self.log.decode_tokens[q] = 0
        if position > 0 and continuing > 0:  # decode step q's position in decode_log
            self.resume_gaps.append((self.decode_log[position - 1], q, continuing))
        for _, p in self.joined_at:
            self.resume_gaps.append((p, q, 1))
        self.prefilled = False
        self.joined_at = []

    def _prefill_batch(self) -> list[tuple[Req, int]]:
        """PrefillAdder: the chunked request's next chunk, then waiting requests in order."""
        if self.full and self.shrunk and not self.num_decodes:
            # update_running_batch on an empty batch clears batch_is_full; the loop's pass
            # with no batch takes no step, and the next pass tries the prefill again
            self.full, self.shrunk = False, False
        if (self.full or not self.waiting) and self.chunked is None:
            return []
        policy, config = self.policy, self.config
        alone = not self.num_decodes  # the batch becomes the running batch, its flag cleared
        rem_input = policy.max_prefill_tokens
        rem_chunk = config.max_num_batched_tokens
        rem_total = self._free_tokens() - self._reserved_tokens(self.ratio)
        chunks: list[tuple[Req, int]] = []
        if self.chunked is not None:  # add_chunked_req: the next chunk, within the KV budget
            r = self.chunked
            n = min(r.num_tokens - r.computed, rem_chunk, int(rem_total))
            if n <= 0 or not self._extend(r, r.computed + n):
                return chunks  # not this time: the running requests decode first
            chunks.append((r, n))
            if r.computed + n >= r.num_tokens:
                self.chunked = None
                rem_total -= min(r.target - r.outputs, CLIP_MAX_NEW_TOKENS)
            else:  # the next round filters the chunked request out of the batch: it shrank
                self.full = False
            rem_input -= n
            rem_chunk -= n
            rem_total -= n + policy.page_size
        while self.waiting and self.chunked is None and not self.full:
            if len(self.running) >= config.max_num_seqs:
                self.full = True
                break
            if rem_total <= 0:  # NO_TOKEN
                self.full = True
                break
            if rem_input <= 0 or rem_chunk <= 0:
                break
            r = self.waiting[0]
            extend, hits, ids = self._head_need(r)
            total = self._head_total(r, extend)
            if total >= rem_total:  # NO_TOKEN
                self.full = True
                break
            if extend >= rem_input and chunks:
                break
            if extend <= rem_chunk:
                n = extend
                rem_total -= min(r.target - r.outputs, CLIP_MAX_NEW_TOKENS)
            else:
                n = rem_chunk // policy.page_size * policy.page_size
                if n <= 0:
                    break
                self.chunked = r
            try:
                self.bm.allocate(r.rid, ids[: hits + n])
            except NoFreeBlocksError:
                self.chunked = None if self.chunked is r else self.chunked
                break
            self.waiting.popleft()
            if r.admit_s < 0:
                r.admit_s = self.clock_s
            self.queried_tokens += r.num_tokens
            self.hit_tokens += hits
            r.computed, r.synced = hits, hits + n
            self._schedule_admitted(r, n, 0, chunks)
            rem_input -= n
            rem_chunk -= n
            rem_total -= n + policy.page_size
            if rem_total <= 0:  # budget_state after the add: NO_TOKEN
                self.full = True
        if alone:
            self.full = False
        return chunks

    def _make_room(self) -> bool:
        """check_decode_mem / retract_decode: free the blocks the next decode step needs; True
        when it retracted. Where the last decode still finds no room beside a half-prefilled
        chunked request (SGLang would abort the decode, or run out of memory in the next
        chunk), the chunked request is retracted instead: the simulator's way through."""
        d = self.decode_index
        crossing = self.buckets[d % self.block_size]
        if sum(1 for r in crossing.values() if r.state == DECODE) <= self.bm.num_free_blocks:
            return False
        decoding = [r for r in self.running if r.state == DECODE]
        # retract_decode: sort by (outputs, -prompt) descending and pop from the end
        decoding.sort(key=lambda r: (r.outputs + (d - r.j0), -r.input_tokens), reverse=True)
        while len(decoding) > 1:
            need = sum(1 for r in crossing.values() if r.state == DECODE)
            if need <= self.bm.num_free_blocks:
                break
            self._requeue(decoding.pop(), d, front=False)
        chunked = self.chunked
        if chunked is not None and sum(1 for r in crossing.values() if r.state == DECODE) > (
            self.bm.num_free_blocks
        ):
            self.chunked = None
            self._requeue(chunked, d, front=True)  # admitted before every waiting request
        outputs = sum(r.outputs + (d - r.j0) for r in decoding)
        targets = sum(r.target for r in decoding)
        self.ratio = min(1.0, (outputs + RETRACT_DECODE_STEPS * len(decoding)) / (targets + 1))
        return True

    # ---- runs of decode-only steps ------------------------------------------------------------
    def _quiet(self) -> bool:
        if self.chunked is not None or self.prefilling or not self.num_decodes:
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
        if len(self.running) >= self.config.max_num_seqs:
            return False
        rem_total = self._free_tokens() - self._reserved_tokens(self.ratio)
        extend, _, _ = self._head_need(self.waiting[0])
        return 0 < rem_total and self._head_total(self.waiting[0], extend) < rem_total

    def _after_decode_span(self, steps: int) -> None:
        policy = self.policy
        self.ratio = max(
            self.ratio - policy.new_token_ratio_decay * steps, policy.min_new_token_ratio
        )
        self._settle_gaps(self.step_index - steps, len(self.decode_log) - steps)
