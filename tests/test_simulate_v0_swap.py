"""vLLM V0's swap preemption (--preemption-mode swap, vllm/core/scheduler.py
Scheduler._preempt_by_swap, _schedule_swapped; vllm/core/block_manager.py _can_swap), worked by
hand on a five-block pool with steps of 1 s, and run end to end."""

from __future__ import annotations

import pytest

from kvplan.formulas.comm import host_copy_time_s
from kvplan.simulate.engine import SwapSpaceExhausted, append_blocks_touched

from helpers import one_line_error, run_by_hand, run_cli, run_json

BLOCK_BYTES = 1_000_000
ONE_WAY = 1e9  # bytes/s: a block copies in exactly 1 ms


def _run(cpu_blocks: int):
    """A and B (16-token prompts, 40 outputs each) on 5 blocks of 16 tokens, both admitted at
    t = 0. Returns the engine, A and B."""
    engine, (a, b) = run_by_hand(
        [(0, 16, 40), (0, 16, 40)],
        None,
        num_blocks=5,
        enable_prefix_caching=False,
        swap_cpu_blocks=cpu_blocks,
        swap_block_bytes=BLOCK_BYTES,
        host_link_one_way_bytes_per_s=ONE_WAY,
    )
    return engine, a, b


def test_v0_counts_one_block_touched_by_one_new_token():
    # get_num_blocks_touched_by_append_slots: 1 + ceil((1 - first chunk) / 16)
    assert append_blocks_touched(32, 1, 16) == 1  # the last block full: a new one
    assert append_blocks_touched(33, 1, 16) == 1  # room in the last block: still counted
    assert append_blocks_touched(0, 40, 16) == 3


def test_a_forced_swap_costs_its_blocks_over_the_host_link_each_way():
    # Step 0 prefills both (a block each); step 1 both open their 2nd block (4 used). Decode
    # step 17 has both at position 32: A takes the 5th block, B finds none and is swapped out
    # (its 32 tokens: 2 blocks; the CPU pool needs 2 full + 1 touched). B stays swapped while
    # A holds 3 (then 4) blocks: 5 - 3 free < B's 3 touched. A's 40th token is step 39; in
    # step 40 B's 2 blocks come back and it decodes its 18th token, its 40th in step 62.
    engine, a, b = _run(cpu_blocks=100)
    copy_s = host_copy_time_s(2, BLOCK_BYTES, ONE_WAY)
    assert copy_s == 2 * BLOCK_BYTES / ONE_WAY == 0.002
    durations = engine.log.duration_s
    assert len(durations) == 63
    slow = {i: d for i, d in enumerate(durations) if d != 1.0}
    assert slow == {17: 1.0 + copy_s, 40: 1.0 + copy_s}  # out in step 17, back in step 40
    assert (engine.swap_outs, engine.swap_ins) == (1, 1)
    assert engine.swapped_out_blocks == engine.swapped_in_blocks == 2
    assert engine.swap_s == pytest.approx(2 * copy_s)
    assert engine.preemptions == b.preemptions == 1 and a.preemptions == 0
    assert engine.cpu_free_blocks == 100  # every block came back
    assert a.last_client_s == pytest.approx(40.002)
    assert b.last_client_s == pytest.approx(63.004)
    # swapped, B kept its tokens: no recompute, its token after the swap follows step 16's
    assert b.outputs == 40 and (16, 40, 1) in engine.resume_gaps


def test_a_full_cpu_pool_aborts_as_v0_does():
    # B's swap-out at decode step 17 asks for 2 full blocks + 1 touched = 3 CPU blocks
    with pytest.raises(SwapSpaceExhausted) as caught:
        _run(cpu_blocks=2)
    assert (caught.value.rid, caught.value.need, caught.value.free) == (1, 3, 2)
    assert caught.value.at_s == 17.0


SMALL_POOL = (
    "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine-version", "0.7",
    "--num-prompts", "200", "--input-len", "1000", "--output-len", "1000",
    "--request-rate", "inf", "--max-model-len", "8192", "--gpu-memory-utilization", "0.3",
)  # fmt: skip


def test_simulate_swaps_and_says_so():
    swap = run_json(*SMALL_POOL, "--preemption-mode", "swap", "--swap-space", "64")
    recompute = run_json(*SMALL_POOL, "--swap-space", "64")
    words = next(n["text"] for n in swap["notes"] if n["id"] == "sim-vllm-v0-pool")
    assert "# CPU blocks 32,768" in words and "host link" in words  # 64 GiB / 2 MiB
    assert swap["runs"][0]["engine"]["preemptions"] > 0
    # a swapped request keeps its KV: no recompute, so its next tokens come sooner
    assert swap["runs"][0]["bench"]["p99_itl_ms"] < recompute["runs"][0]["bench"]["p99_itl_ms"]


def test_simulate_aborts_on_a_full_swap_space():
    code, out, err = run_cli(*SMALL_POOL, "--preemption-mode", "swap")  # 4 GiB: 2,048 blocks
    one_line_error(code, err, "Aborted due to the lack of CPU swap space")
    assert not out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--gpu", "b200"), "B200's profile states no host_link"),
        (("--model", "deepseek-v2-lite"), "V0's own KV pool only"),
    ],
)
def test_swap_is_refused_where_it_cannot_be_priced_or_sized(args, needle):
    model = args[1] if args[0] == "--model" else "llama-3.1-8b"
    extra = args if args[0] != "--model" else ()
    code, out, err = run_cli(
        "simulate", model, "--gpu", "h100", "--engine-version", "0.7", "--num-prompts", "4",
        "--input-len", "128", "--output-len", "4", "--preemption-mode", "swap", *extra,
    )  # fmt: skip
    one_line_error(code, err, needle)
    assert not out
