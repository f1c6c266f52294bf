"""Sliding-window groups in kvplan's engine, block by block as vLLM's SlidingWindowManager keeps
them (vllm/v1/core/single_type_kv_cache_manager.py): every allocation first drops the blocks the
window has left, then allocates blocks for every token the step computes. Expected counts below
are worked by hand for a window of 64 tokens over blocks of 16."""

from __future__ import annotations

import pytest

from kvplan.kernels.block_manager import BlockManager
from kvplan.simulate.engine import Engine, EngineConfig, Req, pool_demand
from kvplan.simulate.steplog import FixedStep
from kvplan.simulate.workload import RequestSpec

WINDOW, BLOCK = 64, 16


def _held_per_step(prefix_caching: bool) -> dict[int, tuple[int, int]]:
    """One request (prompt 100, 60 outputs) alone: step -> (full-group blocks, window-group
    blocks held), seen while each step runs."""
    config = EngineConfig(
        max_num_seqs=1,
        max_num_batched_tokens=512,
        max_model_len=4096,
        num_blocks=100,
        block_size=BLOCK,
        window_groups=((WINDOW, 1),),
        enable_prefix_caching=prefix_caching,
    )
    held: dict[int, tuple[int, int]] = {}

    def observe(engine, steps, num_decodes, chunks):
        assert steps == 1
        used = engine.bm.num_used_blocks
        full = -(-(engine.running[0].synced) // BLOCK)
        held[engine.step_index] = (full, used - full)

    engine = Engine(config, FixedStep(1.0), 0.0, observer=observe)
    engine.admit(Req(RequestSpec(0, 0.0, 100, 60), 0.0, 0.0, 60), 0.0)
    while engine.has_work:
        engine.step(engine.clock_s + 0.5)  # one step at a time
    assert engine.bm.num_used_blocks == 0
    return held


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_a_window_table_holds_its_chunk_then_drops_what_the_window_left(prefix_caching):
    held = _held_per_step(prefix_caching)
    assert len(held) == 60  # the prefill step and 59 decodes
    # step 0 computes tokens 0-99: 7 blocks in both groups (a fixed share would be 5)
    assert held[0] == (7, 7)
    # step k >= 1 computes token c = 99 + k after dropping blocks before c - 63:
    # c = 100 drops 37 // 16 = 2 blocks: 5 held
    assert held[1] == (7, 5)
    # c = 111 drops a third (48 // 16): 4 held, the window's fewest
    assert held[12] == (7, 4)
    # c = 112 opens block 7 in both groups: 5 held
    assert held[13] == (8, 5)
    # c = 127 drops block 3 (64 // 16 = 4): 4 held; c = 128 opens block 8: 5
    assert held[28] == (8, 4)
    assert held[29] == (9, 5)
    # the last token, c = 158: 10 blocks, 95 // 16 = 5 dropped
    assert held[59] == (10, 5)
    assert max(w for _, w in held.values()) == 7
    assert min(w for k, (_, w) in held.items() if k) == 4


def test_dropped_blocks_are_freed_last_first_and_stay_findable():
    bm = BlockManager(20, 4)
    tokens = list(range(22))  # 5 full blocks and 2 tokens
    bm.allocate("a", tokens, b"w")
    table = bm.block_table("a")
    assert bm.drop_leading_blocks("a", 3) == 3
    assert bm.block_table("a")[:3] == [None, None, None]
    assert bm.num_free_blocks == 20 - 6 + 3
    assert list(bm.free_queue)[-3:] == [table[2], table[1], table[0]]
    assert bm.drop_leading_blocks("a", 4) == 1  # only block 3 is still held
    assert bm.drop_leading_blocks("a", 4) == 0
    bm.append_tokens("a", [22, 23, 24])  # block 5 fills, block 6 opens: still chained
    bm.free("a")
    assert bm.num_free_blocks == 20
    # window of 9 tokens: cdiv(8, 4) = 2 blocks before the hit's end must be cached
    first, run = bm.window_hit(tokens + [22, 23, 24, 25], 2, b"w")
    assert (first, len(run)) == (4, 2)  # blocks 4 and 5: a hit of 6 blocks
    assert bm.window_hit(tokens + [22, 23, 24, 25], 2, b"other") == (0, [])
    assert bm.cached_prefix_tokens(tokens, b"w") == 20  # all 5 prompt blocks still cached


def test_a_hybrid_hit_needs_the_window_blocks_before_its_end():
    """A hit is one every group hits (vLLM's HybridKVCacheCoordinator): the full group's
    cached prefix, cut back to the end of the last run of cdiv(63, 16) = 4 cached window
    blocks in it; with none, the window blocks cached from the start."""
    config = EngineConfig(
        max_num_seqs=4,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        num_blocks=100,
        block_size=BLOCK,
        window_groups=((WINDOW, 1),),
    )
    engine = Engine(config, FixedStep(1.0), 0.0)
    ids = list(range(1000, 1000 + 200))  # 12 full blocks and 8 tokens
    engine.bm.allocate("full", ids)
    engine.bm.allocate("window", ids, engine.window_keys[0])
    engine.bm.drop_leading_blocks("window", 10)  # dropped: still cached, evictable
    for block_id in engine.bm.block_table("window")[:10]:
        assert block_id is None

    def hit(ids):
        full, spans = engine._hybrid_hit(ids)
        return len(full), [(first, first + len(blocks)) for first, blocks in spans]

    assert hit(ids) == (12, [(8, 12)])  # blocks 8-11 are still cached
    engine.bm.uncache_block("window", 10)  # the run before it: dropped blocks 6-9
    assert hit(ids) == (10, [(6, 10)])
    free = engine.bm.num_free_blocks
    engine.bm.allocate("filler", list(range(free * BLOCK)))  # evicts every dropped block
    assert hit(ids) == (0, [(0, 0)])  # block 11 alone is no run of 4


def test_the_pool_demand_counts_a_prefill_chunk_in_the_window_group():
    config = EngineConfig(
        max_num_seqs=1,
        max_num_batched_tokens=512,
        max_model_len=4096,
        num_blocks=100,
        block_size=BLOCK,
        window_groups=((WINDOW, 1),),
    )
    # 1 (vLLM's null block) + 7 full blocks + min(7, cdiv(63 + 512, 16) + 1) window blocks
    assert pool_demand(config, [RequestSpec(0, 0.0, 100, 10)]) == 1 + 7 + 7
