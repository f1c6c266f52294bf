"""A pool of fixed-size KV blocks with per-sequence block tables, reference counts, fork with
copy-on-write, and prefix caching over full blocks (vLLM v1 style, plus CoW for forks).

Invariants (checked by tests/test_block_manager.py's state machine):
- every block is either in use (ref_count > 0) or in the free queue, never both, never neither;
- a block's ref_count equals the number of block tables that contain it;
- every cached block (one with a hash) is findable by that hash, duplicates included: two blocks
  with the same contents computed separately are both registered, and evicting one leaves the
  other findable;
- prefix hits happen only on an identical prefix: each hit block's tokens, parent hash and extra
  key are compared, the hash alone is never trusted;
- a prompt is never hit in full: its last token is always computed (its logits start decoding),
  as vLLM and SGLang do;
- a sequence never writes into a block another sequence can see (copy-on-write on append).

A sliding-window sequence (vLLM's SlidingWindowManager) drops the blocks its window has left
(`drop_leading_blocks`): their places in its table become None (vLLM's null block) and they go
to the free queue, cached ones still findable; `window_hit` finds a prefix hit that needs only
the window's blocks before its end, and `allocate(..., hit=...)` takes it.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections import OrderedDict, abc

NONE_HASH = b"\x00" * 32  # parent of block 0


class NoFreeBlocksError(RuntimeError):
    """The pool has no free block left (a scheduler would preempt or wait)."""


@functools.lru_cache(maxsize=1 << 17)  # a pure function; schedulers re-ask for the same blocks
def block_hash(parent: bytes, token_ids: tuple[int, ...], extra_key: bytes = b"") -> bytes:
    """Chained block hash: sha256(parent hash, token ids, extra key). Position is part of a
    block's identity because the parent chain is."""
    payload = struct.pack(f"<{len(token_ids)}q", *token_ids)
    return hashlib.sha256(parent + payload + b"|" + extra_key).digest()


def block_hashes(
    token_ids: abc.Sequence[int], block_size: int, extra_key: bytes = b""
) -> list[bytes]:
    """Hashes of every full block of `token_ids` (a partial last block is never hashed)."""
    hashes, parent = [], NONE_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = block_hash(parent, tuple(token_ids[start : start + block_size]), extra_key)
        hashes.append(parent)
    return hashes


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent_hash", "token_ids", "extra_key")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: bytes | None = None
        self.parent_hash: bytes | None = None
        self.token_ids: tuple[int, ...] | None = None  # kept for full, hashed blocks
        self.extra_key: bytes | None = None


class Sequence:
    __slots__ = ("block_table", "token_ids", "extra_key")

    def __init__(self, extra_key: bytes):
        # None: a block a sliding window has left (vLLM's null block), freed
        self.block_table: list[int | None] = []
        self.token_ids: list[int] = []
        self.extra_key = extra_key


class BlockManager:
    """Block tables for sequences over a pool of `num_blocks` blocks of `block_size` tokens."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        uncached_first: bool = False,
    ):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        # vLLM 0.24 on (BlockPool.free_blocks): freed blocks without a hash go to the free
        # queue's head (reused first), cached ones to its tail
        self.uncached_first = uncached_first
        self.blocks = [Block(i) for i in range(num_blocks)]
        # LRU order: the head is evicted first. An OrderedDict gives O(1) removal from the middle.
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        # hash -> every block holding it (insertion-ordered: the oldest copy is found first)
        self.cached: dict[bytes, dict[int, None]] = {}
        self.seqs: dict[object, Sequence] = {}
        self.hit_tokens = 0
        self.queried_tokens = 0

    # ---- queries ------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return len(self.blocks) - len(self.free_queue)

    def cached_free_blocks(self):
        """The free blocks the prefix cache holds, least recently freed first."""
        return (b for b in self.free_queue if self.blocks[b].hash is not None)

    def evict(self, block_ids: list[int]) -> None:
        """Take these free cached blocks out of the prefix cache, as a radix cache evicts a
        leaf ahead of need; they stay free, first in line, in this order."""
        for block_id in reversed(block_ids):
            self._forget(self.blocks[block_id])
            self.free_queue.move_to_end(block_id, last=False)

    @property
    def num_cached_free_blocks(self) -> int:
        return sum(1 for i in self.free_queue if self.blocks[i].hash is not None)

    def block_table(self, seq_id) -> list[int | None]:
        return list(self.seqs[seq_id].block_table)

    def num_tokens(self, seq_id) -> int:
        return len(self.seqs[seq_id].token_ids)

    def internal_waste_tokens(self) -> int:
        """Slots allocated but unused in the last block of each sequence (shared blocks once)."""
        seen, waste = set(), 0
        for seq in self.seqs.values():
            if not seq.block_table or seq.block_table[-1] is None:
                continue
            last = seq.block_table[-1]
            if last in seen:
                continue
            seen.add(last)
            waste += len(seq.block_table) * self.block_size - len(seq.token_ids)
        return waste

    def stats(self) -> dict:
        return {
            "blocks_in_use": self.num_used_blocks,
            "free_blocks": self.num_free_blocks,
            "cached_free_blocks": self.num_cached_free_blocks,
            "hit_tokens": self.hit_tokens,
            "queried_tokens": self.queried_tokens,
            "hit_rate": self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0,
            "internal_waste_tokens": self.internal_waste_tokens(),
        }

    # ---- allocation ---------------------------------------------------------------------------
    def allocate(
        self,
        seq_id,
        token_ids: abc.Sequence[int],
        extra_key: bytes = b"",
        hit: tuple | None = None,
    ) -> int:
        """Give a new sequence blocks for `token_ids`; returns the tokens found in the prefix cache
        (their KV need not be computed). `hit` = (first, cached blocks): take those blocks as the
        prefix's blocks first, first + 1, ... (a window's hit, `window_hit`, or `prefix_blocks`
        cut short to what every group of a hybrid model hits), the `first` before them as
        dropped (None); found moments before, they are not looked up again."""
        return self.allocate_groups([(seq_id, token_ids, extra_key, hit)])[0]

    def allocate_groups(self, entries: list[tuple]) -> list[int]:
        """`allocate` for several sequences at once, all or nothing, as vLLM allocates a
        request's KV-cache groups: every sequence's cached blocks are taken first (so none is
        evicted by another's new blocks), then each one's new blocks in turn. `entries`:
        (seq_id, token_ids, extra_key, hit); returns each one's hit tokens."""
        plans: list[tuple] = []
        needed_total, reusable_total = 0, 0
        for seq_id, token_ids, extra_key, hit in entries:
            if seq_id in self.seqs or any(seq_id == plan[0] for plan in plans):
                raise ValueError(f"sequence {seq_id!r} already exists")
            first, hits = self._hit_blocks(token_ids, extra_key, hit)
            needed = -(-len(token_ids) // self.block_size) - first - len(hits)
            needed_total += needed
            reusable_total += sum(1 for b in set(hits) if self.blocks[b].ref_count == 0)
            plans.append((seq_id, token_ids, extra_key, first, hits, needed))
        if needed_total > self.num_free_blocks - reusable_total:
            raise NoFreeBlocksError(
                f"need {needed_total} blocks, {self.num_free_blocks - reusable_total} free"
            )
        for plan in plans:
            for block_id in plan[4]:
                self._touch(block_id)
        out = []
        for seq_id, token_ids, extra_key, first, hits, needed in plans:
            seq = Sequence(extra_key)
            seq.block_table = [None] * first + list(hits)
            for _ in range(needed):
                seq.block_table.append(self._pop_free())
            seq.token_ids = list(token_ids)
            self.seqs[seq_id] = seq
            end = first + len(hits)
            self.queried_tokens += len(token_ids)
            self.hit_tokens += end * self.block_size
            self._cache_full_blocks(seq, start_block=end)
            out.append(end * self.block_size)
        return out

    def _hit_blocks(self, token_ids, extra_key: bytes, hit) -> tuple[int, list[int]]:
        """(blocks taken as dropped, the cached blocks after them) for a new sequence."""
        if not self.enable_prefix_caching:
            return 0, []
        if hit is None:
            return 0, self._prefix_hits(token_ids, extra_key)
        first, blocks = hit
        return (first, list(blocks)) if blocks else (0, [])

    def prefix_blocks(self, token_ids: abc.Sequence[int], extra_key: bytes = b"") -> list[int]:
        """The cached blocks of the longest cached prefix (within the first len - 1 tokens)."""
        return self._prefix_hits(token_ids, extra_key) if self.enable_prefix_caching else []

    def _chain(
        self, token_ids: abc.Sequence[int], extra_key: bytes, num_blocks: int
    ) -> list[tuple[bytes, tuple[int, ...], bytes]]:
        """(hash, tokens, parent hash) of each of the first `num_blocks` full blocks."""
        chain, parent, size = [], NONE_HASH, self.block_size
        for start in range(0, min(num_blocks * size, len(token_ids) - size + 1), size):
            chunk = tuple(token_ids[start : start + size])
            h = block_hash(parent, chunk, extra_key)
            chain.append((h, chunk, parent))
            parent = h
        return chain

    def _find(self, h: bytes, chunk: tuple, parent: bytes, extra_key: bytes) -> int | None:
        return next(
            (
                block_id
                for block_id in self.cached.get(h, ())
                if self.blocks[block_id].token_ids == chunk
                and self.blocks[block_id].parent_hash == parent
                and self.blocks[block_id].extra_key == extra_key
            ),
            None,
        )

    def window_hit(
        self,
        token_ids: abc.Sequence[int],
        window_blocks: int,
        extra_key: bytes = b"",
        max_blocks=None,
    ) -> tuple[int, list[int]]:
        """A sliding-window sequence's prefix hit as vLLM's SlidingWindowManager finds it:
        searching back from the prefix's last block (at most `max_blocks`, within the first
        len - 1 tokens), the last run of `window_blocks` cached blocks is a hit up to its end
        that needs only that run; without one, the run of cached blocks the prefix starts with.
        Returns (first, the run's blocks): the blocks before `first` are dropped."""
        if not self.enable_prefix_caching or not token_ids:
            return 0, []
        usable = len(token_ids) - 1
        limit = usable // self.block_size
        if max_blocks is not None:
            limit = min(limit, max_blocks)
        chain = self._chain(token_ids, extra_key, limit)
        run: list[int] = []  # the run's blocks, last first
        for index in range(len(chain) - 1, -1, -1):
            found = self._find(*chain[index], extra_key)
            if found is None:
                run = []
                continue
            run.append(found)
            if len(run) >= window_blocks:
                return index, run[::-1]
        return 0, run[::-1]

    def cache_blocks(self, seq_id, num_tokens: int, merge: bool = False) -> None:
        """Enter the full blocks among the sequence's first `num_tokens` tokens into the prefix
        cache: blocks filled with cache=False become findable once their KV exists (vLLM's
        cache_blocks after a remote KV load; until then another request must not hit them).
        With `merge`, a block whose contents the cache already holds is not entered: the
        sequence takes the cached copy and frees its own (SGLang's radix cache keeps one copy:
        cache_unfinished_req frees the duplicates an insert found in the tree)."""
        if not self.enable_prefix_caching:
            return
        seq = self.seqs[seq_id]
        start, table = 0, seq.block_table
        while start < len(table) and ((held := table[start]) is None or self.blocks[held].hash):
            start += 1
        self._cache_full_blocks(seq, start, num_tokens, merge)

    def _prefix_hits(self, token_ids: abc.Sequence[int], extra_key: bytes) -> list[int]:
        """Cached blocks for the longest prefix of full blocks, never the whole prompt: the last
        token is always computed (its logits start decoding), so only blocks within the first
        len - 1 tokens can hit."""
        hits, parent = [], NONE_HASH
        usable = token_ids[: len(token_ids) - 1]
        size = self.block_size
        for start in range(0, len(usable) - size + 1, size):  # hashed as far as the hits go
            chunk = tuple(usable[start : start + size])
            h = block_hash(parent, chunk, extra_key)
            found = self._find(h, chunk, parent, extra_key)
            if found is None:
                break  # a miss, or a collision (verified, not trusted): the shared region ends
            hits.append(found)
            parent = h
        return hits

    def blocks_to_allocate(
        self, token_ids: abc.Sequence[int], extra_key: bytes = b"", hit: tuple | None = None
    ) -> int:
        """Free blocks a new sequence of `token_ids` would take: its blocks past the cached
        prefix, plus the cached prefix blocks that sit in the free queue (vLLM's
        get_num_blocks_to_allocate); `hit` as `allocate` takes it; changes nothing."""
        first, hits = self._hit_blocks(token_ids, extra_key, hit)
        reusable = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return -(-len(token_ids) // self.block_size) - first - len(hits) + reusable

    def append_cost(self, seq_id, num_tokens: int) -> int:
        """Free blocks appending `num_tokens` tokens to the sequence would take."""
        seq = self.seqs[seq_id]
        start = len(seq.token_ids)
        needed = -(-(start + num_tokens) // self.block_size) - len(seq.block_table)
        last = seq.block_table[-1] if seq.block_table else None
        shared = bool(
            num_tokens
            and start % self.block_size
            and last is not None
            and self.blocks[last].ref_count > 1
        )
        return max(0, needed) + shared

    def drop_leading_blocks(self, seq_id, num_blocks: int) -> int:
        """A sliding window has left the sequence's first `num_blocks` blocks (vLLM's
        remove_skipped_blocks): each still held, from the last of them back to the first
        already dropped, becomes None and is freed in that order; returns how many."""
        table = self.seqs[seq_id].block_table
        dropped = []
        for index in range(min(num_blocks, len(table)) - 1, -1, -1):
            block_id = table[index]
            if block_id is None:
                break
            dropped.append(block_id)
            table[index] = None
        self._release_blocks(dropped)
        return len(dropped)

    def uncache_block(self, seq_id, index: int) -> None:
        """Take the sequence's block `index` out of the prefix cache (a block whose KV the
        engine will not keep, e.g. one filled by a step whose output was never processed);
        a block another sequence shares stays."""
        block_id = self.seqs[seq_id].block_table[index]
        if block_id is None:
            return
        block = self.blocks[block_id]
        if block.hash is None or block.ref_count > 1:
            return
        copies = self.cached[block.hash]
        del copies[block.block_id]
        if not copies:
            del self.cached[block.hash]
        block.hash = block.parent_hash = block.token_ids = block.extra_key = None

    def cached_prefix_tokens(self, token_ids: abc.Sequence[int], extra_key: bytes = b"") -> int:
        """Tokens of `token_ids` a new sequence would find in the prefix cache (whole blocks);
        changes nothing. A scheduler asks before deciding how many tokens to compute."""
        if not self.enable_prefix_caching:
            return 0
        return len(self._prefix_hits(token_ids, extra_key)) * self.block_size

    def append_tokens(
        self, seq_id, token_ids: abc.Sequence[int], cache: bool = True
    ) -> list[tuple[int, int]]:
        """Append several tokens at once (a prefill chunk, or decode steps caught up): the same
        blocks, copies and cached hashes as calling append_token for each, in one pass. All or
        nothing: NoFreeBlocksError leaves the sequence as it was. cache=False leaves the blocks
        these tokens fill out of the prefix cache (tokens no other sequence will ask for)."""
        seq = self.seqs[seq_id]
        if not token_ids:
            return []
        held = len(seq.block_table)
        start = len(seq.token_ids)
        needed = -(-(start + len(token_ids)) // self.block_size) - held
        last_id = seq.block_table[-1] if start % self.block_size else None
        shared_id = last_id if last_id is not None and self.blocks[last_id].ref_count > 1 else None
        partial_shared = shared_id is not None
        if needed + partial_shared > self.num_free_blocks:
            raise NoFreeBlocksError(
                f"need {needed + partial_shared} blocks, {self.num_free_blocks} free"
            )
        copies = []
        if shared_id is not None:  # shared partial block: copy before writing
            last = self.blocks[shared_id]
            dst = self._pop_free()
            last.ref_count -= 1
            seq.block_table[-1] = dst
            copies.append((last.block_id, dst))
        for _ in range(needed):
            seq.block_table.append(self._pop_free())
        seq.token_ids.extend(token_ids)
        first_full = start // self.block_size
        if cache and len(seq.token_ids) // self.block_size > first_full:
            self._cache_full_blocks(seq, start_block=first_full)
        return copies

    def append_token(self, seq_id, token_id: int) -> list[tuple[int, int]]:
        """Append one token; returns the (src, dst) block copies copy-on-write asked for."""
        seq = self.seqs[seq_id]
        copies = []
        position = len(seq.token_ids)
        if position % self.block_size == 0:
            if not self.free_queue:
                raise NoFreeBlocksError("no free block to append into")
            seq.block_table.append(self._pop_free())
        else:
            last_id = seq.block_table[-1]
            assert last_id is not None, "a window never drops the block being written"
            last = self.blocks[last_id]
            if last.ref_count > 1:  # shared partial block: copy before writing
                if not self.free_queue:
                    raise NoFreeBlocksError("no free block for copy-on-write")
                dst = self._pop_free()
                last.ref_count -= 1
                seq.block_table[-1] = dst
                copies.append((last.block_id, dst))
        seq.token_ids.append(token_id)
        if len(seq.token_ids) % self.block_size == 0:
            self._cache_full_blocks(seq, start_block=len(seq.block_table) - 1)
        return copies

    def fork(self, parent_id, child_id) -> None:
        """The child shares every block of the parent (parallel sampling, beam search)."""
        if child_id in self.seqs:
            raise ValueError(f"sequence {child_id!r} already exists")
        parent = self.seqs[parent_id]
        child = Sequence(parent.extra_key)
        child.block_table = list(parent.block_table)
        child.token_ids = list(parent.token_ids)
        for block_id in child.block_table:
            if block_id is not None:
                self.blocks[block_id].ref_count += 1
        self.seqs[child_id] = child

    def free(self, seq_id) -> None:
        """Release a sequence. Blocks reaching zero references go to the free queue's tail in
        reverse order (its last block is evicted first); cached ones keep their hash. With
        `uncached_first`, those without a hash go to the head instead, in the same order."""
        seq = self.seqs.pop(seq_id)
        self._release_blocks([b for b in reversed(seq.block_table) if b is not None])

    def _release_blocks(self, ordered: list[int]) -> None:
        """One reference less on each block, first to last (vLLM's BlockPool.free_blocks)."""
        uncached = []
        for block_id in ordered:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if self.uncached_first and block.hash is None:
                    uncached.append(block_id)
                else:
                    self.free_queue[block_id] = None
        for block_id in reversed(uncached):  # the head keeps their order: first freed, first used
            self.free_queue[block_id] = None
            self.free_queue.move_to_end(block_id, last=False)

    # ---- internals ----------------------------------------------------------------------------
    def _touch(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_queue[block_id]
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self.free_queue.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:  # evict: the least recently freed cached block
            self._forget(block)
        block.ref_count = 1
        return block_id

    def _forget(self, block: Block) -> None:
        """Take a free block out of the prefix cache."""
        key = block.hash
        if key is None:
            return
        copies = self.cached[key]
        del copies[block.block_id]  # another copy of the same contents stays findable
        if not copies:
            del self.cached[key]
        block.hash = block.parent_hash = block.token_ids = block.extra_key = None

    def _cache_full_blocks(
        self, seq: Sequence, start_block: int, upto: int | None = None, merge: bool = False
    ) -> None:
        if not self.enable_prefix_caching:
            return
        tokens = len(seq.token_ids) if upto is None else min(upto, len(seq.token_ids))
        full = tokens // self.block_size
        parent: bytes | None = NONE_HASH
        if start_block > 0:
            before = seq.block_table[start_block - 1]
            if before is None:  # dropped by a window: the chain from the tokens
                parent = block_hashes(
                    seq.token_ids[: start_block * self.block_size], self.block_size, seq.extra_key
                )[-1]
            else:
                parent = self.blocks[before].hash
            if parent is None:  # an earlier block was never cached (CoW copy): stop here
                return
        blocks, table, token_ids, size = (
            self.blocks,
            seq.block_table,
            seq.token_ids,
            self.block_size,
        )
        cached, extra_key = self.cached, seq.extra_key
        for index in range(start_block, full):
            chunk = tuple(token_ids[index * size : (index + 1) * size])
            h = block_hash(parent, chunk, extra_key)
            block_id = table[index]
            if block_id is None:  # dropped by a window (vLLM skips its null blocks)
                parent = h
                continue
            block = blocks[block_id]
            if block.hash is None:
                copies = cached.get(h)
                if merge and copies is not None:  # the cached copy replaces this one
                    kept = next(iter(copies))
                    self._touch(kept)
                    table[index] = kept
                    self._release_blocks([block_id])
                    parent = h
                    continue
                block.hash, block.parent_hash, block.token_ids = h, parent, chunk
                block.extra_key = extra_key
                # duplicates are not merged (vLLM v1 neither): each copy is registered
                if copies is None:
                    cached[h] = {block.block_id: None}
                else:
                    copies[block.block_id] = None
            elif block.hash != h:
                return
            parent = h
