"""A DP-attention rank's scheduling limits as SGLang sets them, computed by hand: the prefill
budgets in whole pages (PrefillAdder.ceil_paged_tokens), the per-rank chunk
(chunked_prefill_size // dp_size), the per-rank seat count (a given --max-running-requests
divided among the ranks, the pool's own count not) and a burst dealt round robin."""

from __future__ import annotations

from test_simulate_engine import config
from test_simulate_sglang import Steps, serve

from kvplan.simulate.workload import RequestSpec

from helpers import run_json

DP_FLAGS = ("--tp", "8", "--dp", "8", "--enable-dp-attention")


def _burst(n: int, prompt: int, output: int = 4) -> list[RequestSpec]:
    return [RequestSpec(i, 0.0, prompt, output) for i in range(n)]


def test_a_prefill_batch_charges_whole_pages():
    """A 1,024-token chunk (8,192 // 8 ranks), prompts of 100 tokens at once. In 64-token pages
    each takes ceil(100 / 64) x 64 = 128 of the chunk: 8 prompts fill it (8 x 128 = 1,024) and
    the batch closes (budget_state: OTHER) with 800 tokens computed. In 1-token pages 10 fit
    (1,000) and the 11th is chunked to the 24 left."""
    cfg = config(max_num_batched_tokens=1024, block_size=64)
    paged = Steps()
    serve(_burst(20, 100), cfg, paged, page_size=64)
    first = next(c for d, c in paged.steps if c)
    assert first == [(i, 100) for i in range(8)]
    unpaged = Steps()
    serve(_burst(20, 100), config(max_num_batched_tokens=1024), unpaged, page_size=1)
    first = next(c for d, c in unpaged.steps if c)
    assert first == [(i, 100) for i in range(10)] + [(10, 24)]


def test_a_prompt_fits_the_chunk_only_in_whole_pages():
    """Chunk 1,024, page 64: after 7 prompts of 100 (7 x 128 = 896) 128 are left; a prompt of
    100 (128 paged) still fits whole. Prompts of 130 take 192 each: 5 fill 960, the 6th
    (192 > 64 left) is chunked to 64 // 64 x 64 = 64 tokens."""
    cfg = config(max_num_batched_tokens=1024, block_size=64)
    seen = Steps()
    serve(_burst(8, 130), cfg, seen, page_size=64)
    first = next(c for d, c in seen.steps if c)
    assert first == [(i, 130) for i in range(5)] + [(5, 64)]


def _dp_sim(*extra: str) -> dict:
    return run_json(
        *("simulate", "deepseek-v3", "--engine", "sglang", "--gpu", "h200", *DP_FLAGS),
        *("--max-model-len", "8192", "--num-prompts", "16", "--input-len", "128"),
        *("--output-len", "8", "--request-rate", "inf"),
        *extra,
    )


def test_the_pools_own_seat_count_is_a_ranks():
    """Without --max-running-requests each rank's scheduler takes min(max_total_num_tokens // 2,
    req_to_token_pool.size) of its own pool (tp_worker.py): min(max(tokens / 8,192 x 512,
    2,048), 4,096) for context 8,192; SGLang divides only a given count by the DP size."""
    sim = _dp_sim()
    setup = sim["setup"]
    tokens = setup["kv_cache_tokens"]
    expected = min(max(int(tokens / 8192 * 512), 2048), 4096, tokens // 2)
    assert setup["max_num_seqs"] == expected
    given = _dp_sim("--max-running-requests", "64")["setup"]
    assert given["max_num_seqs"] == 64 // 8
    # the chunk: the H200 bucket's 8,192 over 8 ranks
    assert setup["max_num_batched_tokens"] == 8192 // 8


def test_a_burst_is_dealt_round_robin():
    """16 requests at once over 8 ranks (--load-balance-method round_robin, SGLang's default):
    2 each, whatever their order."""
    sim = _dp_sim()
    replicas = sim["runs"][0]["engine"]["replicas"]
    assert [r["requests"] for r in replicas] == [2] * 8
