"""Block manager: allocation, prefix caching, fork with copy-on-write, eviction, and agreement with
the planner's paging formula."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import kvplan.kernels.block_manager as bm_module
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_token, paged_bytes_per_sequence
from kvplan.inputs.sources import load_model
from kvplan.kernels import BlockManager, NoFreeBlocksError
from kvplan.plans.pool import max_sequences


def test_allocate_append_free():
    m = BlockManager(num_blocks=8, block_size=4)
    assert m.allocate("a", list(range(6))) == 0
    assert len(m.block_table("a")) == 2 and m.num_free_blocks == 6
    m.append_token("a", 6)
    m.append_token("a", 7)
    assert len(m.block_table("a")) == 2  # 8 tokens fill two blocks exactly
    m.append_token("a", 8)
    assert len(m.block_table("a")) == 3
    assert m.stats()["internal_waste_tokens"] == 3
    m.free("a")
    assert m.num_free_blocks == 8


def test_blocks_filled_uncached_become_hits_only_when_cached():
    """KV loaded from another engine: its blocks are filled with cache=False and entered into
    the prefix cache (cache_blocks) only once the KV is there; only the first num_tokens count."""
    m = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(13))
    m.allocate("remote", prompt[:1])
    m.append_tokens("remote", prompt[1:], cache=False)
    assert m.cached_prefix_tokens(prompt) == 0
    m.cache_blocks("remote", 9)  # two full blocks within the first 9 tokens
    assert m.cached_prefix_tokens(prompt) == 8
    m.cache_blocks("remote", 13)
    assert m.cached_prefix_tokens(prompt + [99]) == 12


def test_prefix_hit_only_on_whole_identical_blocks():
    m = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(10))
    m.allocate("a", prompt)
    assert m.allocate("b", prompt[:8] + [99, 98]) == 8  # two full blocks shared, partial private
    assert m.block_table("a")[:2] == m.block_table("b")[:2]
    assert m.block_table("a")[2] != m.block_table("b")[2]
    # same later tokens but a different first block: position is part of identity, no hit
    assert m.allocate("c", [7] + prompt[1:]) == 0
    # extra key (e.g. LoRA id, cache salt) separates otherwise identical prefixes
    assert m.allocate("d", prompt, extra_key=b"lora-1") == 0


def test_hash_collisions_are_verified_not_trusted(monkeypatch):
    monkeypatch.setattr(bm_module, "block_hash", lambda parent, tokens, extra=b"": b"same")
    m = BlockManager(num_blocks=8, block_size=2)
    m.allocate("a", [1, 2, 3, 4])
    assert m.allocate("b", [5, 6, 7, 8]) == 0  # every hash collides; tokens differ


def test_freed_cached_blocks_stay_hits_until_evicted_lru():
    m = BlockManager(num_blocks=4, block_size=2)
    m.allocate("a", [1, 2, 3, 4])
    m.free("a")
    assert m.num_cached_free_blocks == 2
    assert m.allocate("b", [1, 2, 3, 4, 5]) == 4  # a hit on free cached blocks
    m.free("b")
    # freed in reverse order: the last block of b ([5]) then [3,4] then [1,2] go to the tail
    m.allocate("c", [9, 9])  # pops the oldest free block: the never-used block 3
    m.allocate("d", [8, 8])  # next: b's partial last block
    m.free("c")  # a block for e's last token
    assert m.allocate("e", [1, 2, 3, 4, 6]) == 4  # the prefix blocks survived


def test_evicted_blocks_stay_free_and_are_taken_first():
    """evict(): free cached blocks leave the prefix cache ahead of need (a radix cache's leaf),
    stay free, and are the next blocks allocated, before the other cached ones."""
    m = BlockManager(num_blocks=6, block_size=2)
    m.allocate("a", [1, 2, 3, 4, 5, 6])
    m.free("a")  # freed last block first: [5,6], [3,4], [1,2] join the tail in that order
    assert list(m.cached_free_blocks()) == list(m.free_queue)[-3:]
    tail = list(m.cached_free_blocks())[0]  # [5,6]: the least recently freed cached block
    m.evict([tail])
    assert m.num_free_blocks == 6 and m.num_cached_free_blocks == 2
    assert m.cached_prefix_tokens([1, 2, 3, 4, 5, 6, 7]) == 4  # [5,6] is gone, [1..4] stay
    m.allocate("b", [9, 9])
    assert m.block_table("b") == [tail]  # the evicted block goes first
    assert m.cached_prefix_tokens([1, 2, 3, 4, 5]) == 4


def test_a_fully_cached_prompt_still_computes_its_last_token():
    m = BlockManager(num_blocks=8, block_size=2)
    m.allocate("a", [1, 2, 3, 4])
    # every block of [1, 2, 3, 4] is cached, but the last token's logits start decoding: the
    # hit stops one token short, so the last block is computed again (vLLM and SGLang alike)
    assert m.allocate("b", [1, 2, 3, 4]) == 2
    assert m.block_table("b")[0] == m.block_table("a")[0]
    assert m.block_table("b")[1] != m.block_table("a")[1]
    assert m.allocate("c", [1, 2, 3, 4, 5]) == 4


def test_a_duplicate_stays_findable_when_the_first_copy_is_evicted():
    m = BlockManager(num_blocks=4, block_size=2)
    m.allocate("a", [1, 2])  # block 0 holds [1, 2] (a prompt is never hit in full: no reuse)
    m.allocate("b", [1, 2])  # block 1 holds [1, 2] again: a duplicate with the same hash
    m.allocate("e", [9, 9])  # block 2
    assert m.block_table("a") == [0] and m.block_table("b") == [1]
    m.free("a")  # block 0 joins the free queue, still cached
    m.allocate("c", [7, 8, 7, 8])  # takes blocks 3 and 0: the first copy of [1, 2] is evicted
    m.free("e")  # one block free
    # [1, 2, 5] fits only by reusing b's copy of [1, 2]: it must still be findable
    assert m.allocate("d", [1, 2, 5]) == 2
    assert m.block_table("d")[0] == 1


def test_extra_key_is_compared_on_a_hit_not_only_hashed(monkeypatch):
    # hashes that ignore the extra key: a hit must still check it
    monkeypatch.setattr(
        bm_module, "block_hash", lambda parent, tokens, extra=b"": bytes(str(tokens), "ascii")
    )
    m = BlockManager(num_blocks=8, block_size=2)
    m.allocate("a", [1, 2, 3], extra_key=b"lora-1")
    assert m.allocate("b", [1, 2, 3], extra_key=b"lora-2") == 0
    assert m.allocate("c", [1, 2, 3], extra_key=b"lora-1") == 2


def test_eviction_removes_the_hash():
    m = BlockManager(num_blocks=2, block_size=2)
    m.allocate("a", [1, 2, 3, 4])
    m.free("a")
    m.allocate("b", [5, 6, 7, 8])  # evicts both cached blocks
    m.free("b")
    assert m.allocate("c", [1, 2]) == 0


def test_out_of_blocks_changes_nothing():
    m = BlockManager(num_blocks=2, block_size=2)
    m.allocate("a", [1, 2, 3])
    before = m.stats()
    with pytest.raises(NoFreeBlocksError):
        m.allocate("b", [4, 5, 6])
    assert m.stats() == before and "b" not in m.seqs


def test_fork_copy_on_write():
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("parent", [1, 2, 3, 4, 5, 6])
    m.fork("parent", "child")
    shared_last = m.block_table("parent")[-1]
    assert m.blocks[shared_last].ref_count == 2
    copies = m.append_token("child", 70)
    assert len(copies) == 1 and copies[0][0] == shared_last
    assert m.block_table("child")[-1] == copies[0][1] != shared_last
    assert m.block_table("child")[0] == m.block_table("parent")[0]  # full blocks still shared
    assert m.append_token("parent", 7) == []  # parent is now the sole owner: writes in place
    assert m.blocks[shared_last].ref_count == 1


# ---- agreement with the planner ----------------------------------------------------------------


def test_memory_equals_the_planner_paging_formula():
    spec, fmt, block_size = load_model("llama-3.1-8b"), KvFormat("bf16"), 16
    per_block = block_size * kv_bytes_per_token(spec, fmt)
    m = BlockManager(num_blocks=10_000, block_size=block_size, enable_prefix_caching=False)
    lengths = [1, 15, 16, 17, 1000, 4097]
    for i, n in enumerate(lengths):
        m.allocate(i, list(range(n)))
    planner = sum(paged_bytes_per_sequence(spec, n, fmt, block_size=block_size) for n in lengths)
    assert m.num_used_blocks * per_block == planner


def test_shared_prefix_memory_equals_the_planner_capacity_formula():
    spec, fmt, block_size = load_model("llama-3.1-8b"), KvFormat("bf16"), 16
    per_block = block_size * kv_bytes_per_token(spec, fmt)
    prefix, context = 1000, 3000  # 62 full prefix blocks shared, 8 prefix tokens private
    pool_blocks = 2000
    m = BlockManager(num_blocks=pool_blocks, block_size=block_size)
    admitted = 0
    try:
        while True:
            m.allocate(admitted, list(range(prefix)) + [10_000 + admitted] * (context - prefix))
            admitted += 1
    except NoFreeBlocksError:
        pass
    assert admitted == max_sequences(
        [spec], pool_blocks * per_block, context, fmt, 1, block_size, prefix_tokens=prefix
    )


# ---- property-based state machine -------------------------------------------------------------


class BlockManagerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.m = BlockManager(num_blocks=24, block_size=4)
        self.tokens: dict[int, list[int]] = {}  # what each sequence should see
        self.next_id = 0

    @rule(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=20))
    def allocate(self, prompt):
        try:
            hit = self.m.allocate(self.next_id, prompt)
        except NoFreeBlocksError:
            return
        assert hit % 4 == 0 and hit < len(prompt)  # the last token is always computed
        if hit:  # a hit only on an identical prefix: some cached sequence had these blocks
            table = self.m.block_table(self.next_id)
            for i in range(hit // 4):
                assert self.m.blocks[table[i]].token_ids == tuple(prompt[i * 4 : (i + 1) * 4])
        self.tokens[self.next_id] = list(prompt)
        self.next_id += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        try:
            self.m.append_token(seq, token)
        except NoFreeBlocksError:
            return
        self.tokens[seq].append(token)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.fork(parent, self.next_id)
        self.tokens[self.next_id] = list(self.tokens[parent])
        self.next_id += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.free(seq)
        del self.tokens[seq]

    @invariant()
    def no_leak_no_double_free(self):
        refs = {}
        for seq in self.m.seqs.values():
            for block in seq.block_table:
                refs[block] = refs.get(block, 0) + 1
        for block in self.m.blocks:
            assert block.ref_count >= 0
            assert block.ref_count == refs.get(block.block_id, 0)
            assert (block.ref_count == 0) == (block.block_id in self.m.free_queue)

    @invariant()
    def sequences_see_only_their_own_writes(self):
        # Each block of a sequence holds what that sequence wrote: shared blocks agree between
        # all holders, so a copy-on-write miss would show up as two sequences disagreeing.
        owner: dict[int, tuple] = {}
        for seq_id, tokens in self.tokens.items():
            table = self.m.block_table(seq_id)
            assert len(table) == -(-len(tokens) // 4)
            assert self.m.num_tokens(seq_id) == len(tokens)
            for i, block in enumerate(table):
                content = tuple(tokens[i * 4 : (i + 1) * 4])
                if block in owner:
                    seen = owner[block]
                    shorter = min(len(seen), len(content))
                    assert seen[:shorter] == content[:shorter]
                    assert len(seen) == len(content), "sequences diverged inside a shared block"
                owner[block] = content

    @invariant()
    def cached_blocks_are_findable(self):
        # every hashed block is registered under its hash (duplicates too), and nothing else is
        for block in self.m.blocks:
            if block.hash is not None:
                assert block.block_id in self.m.cached[block.hash]
        for h, copies in self.m.cached.items():
            assert copies and all(self.m.blocks[b].hash == h for b in copies)


# the default run's share of the machine (about 2 s); the slow run walks six times as many, longer
TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)


class TestBlockManagerMachineLong(BlockManagerMachine.TestCase):
    pytestmark = pytest.mark.slow
    settings = settings(max_examples=300, stateful_step_count=50, deadline=None)


def test_blocks_to_allocate_counts_cached_blocks_in_the_free_queue():
    """vLLM's get_num_blocks_to_allocate: hits held by another sequence cost nothing, hits in
    the free queue cost a block each (they leave it), the rest one block each."""
    bm = BlockManager(16, 4)
    bm.allocate("a", list(range(12)))
    assert bm.blocks_to_allocate(list(range(12)) + [99]) == 4 - 3  # 3 hits, held by "a"
    bm.free("a")
    assert bm.blocks_to_allocate(list(range(12)) + [99]) == 4  # the 3 hits are free blocks
    assert bm.num_free_blocks == 16 and not bm.seqs  # nothing changed


def test_uncache_block_forgets_a_private_block_only():
    bm = BlockManager(16, 4)
    bm.allocate("a", list(range(8)))
    bm.uncache_block("a", 1)
    bm.free("a")
    assert bm.cached_prefix_tokens(list(range(9))) == 4  # block 0 still cached, block 1 gone
    bm.allocate("b", list(range(9)))  # block 1 computed and cached again
    bm.fork("b", "c")
    bm.uncache_block("b", 0)  # shared with "c": stays
    assert bm.cached_prefix_tokens(list(range(9))) == 8


@pytest.mark.parametrize("uncached_first", [False, True])
def test_free_puts_uncached_blocks_first_from_vllm_024(uncached_first):
    """vLLM 0.24's BlockPool.free_blocks reuses a freed request's uncached blocks first and
    keeps its cached ones for last; before, all went to the tail, the last block first."""
    pool = BlockManager(6, 2, uncached_first=uncached_first)
    pool.allocate("a", [1, 2, 3, 4, 5])  # two full (cached) blocks and a partial one
    cached, partial = pool.block_table("a")[:2], pool.block_table("a")[2]
    pool.free("a")
    order = list(pool.free_queue)
    if uncached_first:
        assert order[0] == partial and order[-2:] == cached[::-1]
    else:
        assert order[-3:] == [partial, *cached[::-1]]
