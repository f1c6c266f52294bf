"""The tokens in flight vLLM sizes a sliding-window or chunked-local cache for, by release.

A windowed spec's per-request blocks (`max_memory_usage_bytes`, which sizes the start-up check,
the maximum concurrency and, in 0.32, the runtime admission cap) cover the window plus the tokens
scheduled but not yet settled, since out-of-window blocks are freed only once a step's tokens are
processed:

- vLLM 0.19.1 and 0.21.0 count one token budget, `scheduler_config.max_num_batched_tokens`
  (`SlidingWindowSpec` / `ChunkedLocalAttentionSpec.max_memory_usage_bytes`,
  `vllm/v1/kv_cache_interface.py`), although async scheduling is on by default there too;
- vLLM 0.32.0 counts `VllmConfig.max_in_flight_tokens` = `max_concurrent_batches x
  max_num_batched_tokens` (`vllm/config/vllm.py:576-598`): with async scheduling `pp + 1`
  batches under Model Runner V2, 2 under V1 at PP 1; without it `pp`.

Defaults assumed, as `VllmConfig.__post_init__` resolves them on a CUDA GPU for a generative model
without speculative decoding (config/vllm.py:1585-1644, 703-729, 2914-2953): async scheduling on
(the mp and uni executors support it), Model Runner V2 (Triton present, no unsupported feature),
so `pp + 1` batches: 2 at PP 1. `--no-async-scheduling` would make it `pp`.
"""

from __future__ import annotations

IN_FLIGHT_BATCHES_FROM = "0.32"  # the first release kvplan models that counts in-flight batches


def max_concurrent_batches(pp: int, async_scheduling: bool = True) -> int:
    """VllmConfig.max_concurrent_batches in vLLM 0.32 under Model Runner V2 (the default): the
    pipeline's stages, one more with async scheduling to overlap scheduling and execution."""
    return pp + 1 if async_scheduling else pp


def batches_formed_ahead(async_scheduling: bool) -> int:
    """How many steps ahead of the running one vLLM V1 forms a step, at PP 1 (the stage kvplan
    simulates): `max_concurrent_batches - 1`, 1 with async scheduling, 0 without; the same in
    every V1 release kvplan models (async scheduling's default by release:
    kvplan.engines.vllm.async_scheduling_default).

    EngineCore uses a batch queue of `max_concurrent_batches` when that is over 1 and then steps
    with `step_with_batch_queue`, else with `step` (vllm/v1/engine/core.py, 0.19.1 :185-211,
    0.21.0 :188-214, 0.32.0 :220-243). At PP 1 that is 2 with async scheduling, 1 without
    (UniProcExecutor and MultiprocExecutor.max_concurrent_batches, 0.19.1
    uniproc_executor.py:64-65, multiproc_executor.py:469-472; 0.21.0 :77-78, :475-478; 0.32.0
    VllmConfig.max_concurrent_batches, config/vllm.py:577-587). `run_busy_loop` drains the
    input queue (`_process_input_queue`) only at the top of each pass (0.19.1 :1136-1175, 0.21.0
    :1168-1207, 0.32.0 :1547-1601). `step` schedules, runs the step and waits for it (0.19.1
    :380-406): a request that arrives during step k is in step k + 1. `step_with_batch_queue`
    schedules and launches a step without waiting while the queue has room, and waits for the
    oldest step only once the queue is full (0.19.1 :421-494, 0.21.0 :447-520, 0.32.0 :698-768):
    the pass that forms step k + 1 runs as step k starts, so a request that arrives during step
    k waits for it and for step k + 1, and is first in step k + 2, as in SGLang's overlap
    scheduler. An idle engine forms its first step at once (the queue was empty)."""
    return max_concurrent_batches(1, async_scheduling) - 1


def window_in_flight_tokens(
    max_num_batched_tokens: int, vllm_version: str, pp: int = 1, async_scheduling: bool = True
) -> int:
    """The tokens in flight a windowed spec's per-request blocks cover (see the module's text):
    the token budget up to 0.21, `max_concurrent_batches` budgets from 0.32."""
    if vllm_version != IN_FLIGHT_BATCHES_FROM:
        return max_num_batched_tokens
    return max_concurrent_batches(pp, async_scheduling) * max_num_batched_tokens
