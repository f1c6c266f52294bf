"""SGLang's --mamba-scheduler-strategy extra_buffer (issue 28): server_args'
_handle_mamba_radix_cache keeps a hybrid's radix cache and overlap scheduler on, and each running
request holds a ping-pong track buffer of recurrent states (2 with the overlap scheduler, 1
without) that _calculate_mamba_ratio counts beside MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
(3): the state pool caps running requests at its states // 5 (// 4 without overlap)."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import (
    MAMBA_FULL_MEMORY_RATIO,
    mamba_capped_requests,
    mamba_track_slots,
    sglang_allocation,
    sglang_spec_v2,
)
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import one_line_error, run_cli, run_json

SIM = (
    *("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang", "--tp", "2"),
    *("--engine-version", "0.5.9", "--num-prompts", "20", "--input-len", "1000"),
    *("--output-len", "50"),
)
EXTRA = ("--mamba-scheduler-strategy", "extra_buffer")


NEXTN = ("--speculative-algorithm", "NEXTN")


def _at(release: str) -> tuple[str, ...]:
    return (*SIM[:9], release, *SIM[10:])


def test_the_ratio_by_hand():
    """1,000 states: 333 requests under no_buffer (// 3), 200 under extra_buffer with the
    overlap scheduler (// 5), 250 without it (// 4); 1,000 with the radix cache off (// 1)."""
    assert mamba_capped_requests(4096, 1000) == 333
    assert mamba_capped_requests(4096, 1000, True, 2) == 200
    assert mamba_capped_requests(4096, 1000, True, 1) == 250
    assert mamba_capped_requests(4096, 1000, False, 0) == 1000
    assert mamba_capped_requests(150, 1000, True, 2) == 150  # a smaller count stands


def test_track_slots_by_overlap_and_strategy():
    """_calculate_mamba_ratio's track buffer (model_runner_kv_cache_mixin.py): 0.5.7-0.5.9 key
    it on speculative decoding (MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_OVERLAP with it, _OVERLAP
    without, whatever the overlap scheduler), 0.5.10 on by the overlap scheduler."""
    spec, gpu = load_model("qwen3.5-35b-a3b"), load_profile("h200")
    assert mamba_track_slots(spec, gpu, None, "0.5.9", True, False, True) == 0
    assert mamba_track_slots(spec, gpu, "no_buffer", "0.5.9", True, False, True) == 0
    assert mamba_track_slots(spec, gpu, "extra_buffer", "0.5.9", True, False, True) == 2
    assert mamba_track_slots(spec, gpu, "extra_buffer", "0.5.7", False, False, True) == 2
    assert mamba_track_slots(spec, gpu, "extra_buffer", "0.5.10", False, False, True) == 1
    assert mamba_track_slots(spec, gpu, "extra_buffer", "0.5", True, False, True) == 2
    # speculating (spec v1: the overlap scheduler off): 1 in every release that runs it
    for release in ("0.5.7", "0.5.9", "0.5.10", "0.5"):
        assert mamba_track_slots(spec, gpu, "extra_buffer", release, False, True, True) == 1
    # 0.5.11 on runs an EAGLE chain as spec v2 by default, beside the overlap scheduler: its
    # 2 ping-pong slots (HybridReqToTokenPool: 2 if enable_overlap_schedule else 1)
    v2 = mamba_track_slots(spec, gpu, "extra_buffer", "0.5.11", True, True, True, spec_v2=True)
    assert v2 == 2
    assert sglang_spec_v2("0.5.11", given_topk=1, overlap_off=False)
    assert not sglang_spec_v2("0.5.11", given_topk=2, overlap_off=False)
    assert not sglang_spec_v2("0.5.11", given_topk=1, overlap_off=True)
    assert not sglang_spec_v2("0.5.10", given_topk=1, overlap_off=False)
    assert not sglang_spec_v2("0.5", given_topk=1, overlap_off=False)


def test_pool_split_by_hand():
    """The state pool is rest x 0.9 / 1.9 either way (the KV pool is unchanged); the track
    buffer only lowers how many requests run: the states // 5."""
    spec, gpu = load_model("qwen3.5-35b-a3b"), load_profile("h200")
    base = dict(engine="sglang", sglang_version="0.5.9", max_model_len=8192, tp=2)
    plain = sglang_allocation(spec, gpu, EngineRequest(**base))
    extra = sglang_allocation(spec, gpu, EngineRequest(**base, mamba_track_slots=2))
    assert plain.max_mamba_cache_size == extra.max_mamba_cache_size
    assert plain.kv_cache_tokens == extra.kv_cache_tokens
    states = plain.max_mamba_cache_size
    assert states is not None and states > 0
    assert plain.max_running_requests == min(states // 3, 4096)
    assert extra.max_running_requests == min(states // 5, 4096)
    ratio = MAMBA_FULL_MEMORY_RATIO
    assert ratio / (1 + ratio) == pytest.approx(0.9 / 1.9)


def test_simulate_keeps_radix_and_overlap_on_with_fewer_running_requests():
    plain = run_json(*SIM)
    extra = run_json(*SIM, *EXTRA)
    # 0.5.10 keys the track buffer on the overlap scheduler (0.5.9 on speculation alone)
    no_overlap = run_json(*_at("0.5.10"), *EXTRA, "--no-async-scheduling")
    p, e, n = plain["setup"], extra["setup"], no_overlap["setup"]
    assert p["async_scheduling"] is False  # no_buffer turns the overlap scheduler off
    assert e["async_scheduling"] is True and e["enable_prefix_caching"] is True
    assert e["kv_cache_tokens"] == p["kv_cache_tokens"]
    # the same state pool: // 3 under no_buffer, // 5 and // 4 under extra_buffer
    states_low = p["max_num_seqs"] * 3
    assert states_low // 5 <= e["max_num_seqs"] <= (states_low + 2) // 5
    assert states_low // 4 <= n["max_num_seqs"] <= (states_low + 2) // 4
    ids = [x["id"] for x in extra["notes"]]
    assert "sglang-mamba-extra-buffer" in ids and "sglang-mamba-no-overlap" not in ids


@pytest.mark.parametrize(
    "args,needle",
    [
        ((*SIM[:9], "0.5.6", *SIM[10:], *EXTRA), "from 0.5.7"),
        # the flag itself came with extra_buffer (PR #14792): 0.5.6 has no no_buffer to name
        ((*SIM[:9], "0.5.6", *SIM[10:], "--mamba-scheduler-strategy", "no_buffer"), "0.5.7"),
        ((*SIM, "--mamba-scheduler-strategy", "eager"), "choose no_buffer or extra_buffer"),
        ((*_at("0.5.10"), *EXTRA, "--disable-radix-cache"), "from 0.5.10"),
        ((*_at("0.5.10"), *EXTRA, "--disable-radix-cache", *NEXTN), "from 0.5.10"),
        (("simulate", "qwen3-8b", "--gpu", "h200", "--engine", "sglang", *EXTRA), "none"),
        ((*SIM[:3], "mi300x", *SIM[4:], *EXTRA), "CUDA"),
        (("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--tp", "2", *EXTRA), "is SGLang's"),
    ],
)
def test_refusals_are_one_line(args, needle):
    code, out, err = run_cli(*args, "--num-prompts", "4")
    one_line_error(code, err, needle)
    assert out == ""


def test_plan_prices_and_emits_it():
    """plan runs every configuration with it, prints it in each launch command, and the
    command replays (sim_replay) to the running requests it was priced with."""
    from sim_replay import serve_argv

    doc = run_json(
        *("plan", "qwen3.5-35b-a3b", "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
        *("--engine-version", "0.5.9", "--kv-cache-dtype", "auto", "--max-num-seqs", "4096"),
        *("--max-num-batched-tokens", "8192", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--num-prompts", "20", "--jobs", "1", "--input-len", "512", "--output-len", "64"),
        *("--speculative", "off", *EXTRA, "--format", "json"),
    )
    (c,) = doc["candidates"]
    assert c["command"].endswith("--mamba-scheduler-strategy extra_buffer")
    replay = run_json("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang",
                      "--engine-version", "0.5.9", *serve_argv(c["command"]),
                      "--num-prompts", "4")  # fmt: skip
    assert replay["setup"]["max_num_seqs"] == c["max_num_seqs"] < 4096
    assert replay["setup"]["kv_cache_tokens"] == c["kv_cache_tokens"]
    code, _, err = run_cli("plan", "qwen3.5-35b-a3b", "--gpu", "h200", "--rate", "1",
                           "--slo", "tpot_p99=1s", *EXTRA)  # fmt: skip
    one_line_error(code, err, "is SGLang's")


def test_plan_does_not_emit_the_flag_to_a_release_without_it():
    """plan --mamba-scheduler-strategy no_buffer at 0.5.6 would print a flag that release's
    argument parser refuses: a one-line error instead (on Qwen3-Next, which 0.5.6 serves:
    Qwen3.5 is refused there first, as 0.5.6 has no model for it)."""
    code, out, err = run_cli(
        *("plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
        *("--engine-version", "0.5.6", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--num-prompts", "20", "--input-len", "512", "--output-len", "64"),
        *("--mamba-scheduler-strategy", "no_buffer"),
    )
    one_line_error(code, err, "0.5.7")
    assert out == ""


RADIX = ("--mamba-radix-cache-strategy", "extra_buffer")


def test_each_release_takes_its_spelling():
    """The wheels' parsers: --mamba-scheduler-strategy from 0.5.7; 0.5.14 renamed the field
    mamba_radix_cache_strategy and kept the old flag as a deprecated alias to 0.5.19; 0.5.20
    has the new spelling only. A bare 0.5 (April 2026's main) has the old one."""
    from kvplan.engines.sglang import mamba_strategy_flag

    old, new = "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"
    assert [mamba_strategy_flag(f"0.5.{p}") for p in (7, 13, 14, 19, 20, 23)] == [
        old,
        old,
        new,
        new,
        new,
        new,
    ]
    assert mamba_strategy_flag("0.5") == old
    same = [
        run_json(*_at(r), *flags, "--num-prompts", "4")["setup"]["max_num_seqs"]
        for r, flags in (("0.5.14", EXTRA), ("0.5.14", RADIX), ("0.5.20", RADIX))
    ]
    assert same[0] == same[1] == same[2]


@pytest.mark.parametrize(
    "release,flags,needle",
    [
        ("0.5.13", RADIX, "0.5.14"),
        ("0.5", RADIX, "0.5.14"),
        ("0.5.20", EXTRA, "--mamba-radix-cache-strategy"),
        ("0.5.14", (*EXTRA, *RADIX), "one of"),
    ],
)
def test_a_spelling_the_release_refuses_is_one_line(release, flags, needle):
    code, out, err = run_cli(*_at(release), *flags, "--num-prompts", "4")
    one_line_error(code, err, needle)
    assert out == ""


def test_plan_prints_the_spelling_of_the_release():
    """plan at 0.5.20 prints --mamba-radix-cache-strategy (0.5.20's parser has no other), and
    the command replays to the running requests it was priced with."""
    from sim_replay import serve_argv

    doc = run_json(
        *("plan", "qwen3.5-35b-a3b", "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
        *("--engine-version", "0.5.20", "--kv-cache-dtype", "auto", "--max-num-seqs", "4096"),
        *("--max-num-batched-tokens", "8192", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--num-prompts", "20", "--jobs", "1", "--input-len", "512", "--output-len", "64"),
        *("--speculative", "off", *RADIX, "--format", "json"),
    )
    (c,) = doc["candidates"]
    assert c["command"].endswith("--mamba-radix-cache-strategy extra_buffer")
    assert "--mamba-scheduler-strategy" not in c["command"]
    replay = run_json("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang",
                      "--engine-version", "0.5.20", *serve_argv(c["command"]),
                      "--num-prompts", "4")  # fmt: skip
    assert replay["setup"]["max_num_seqs"] == c["max_num_seqs"] < 4096


@pytest.mark.parametrize("release,tree", [("0.5.9", ()), ("0.5.10", ()), ("0.5.11", ("2",))])
def test_speculating_keeps_the_radix_cache_with_one_track_slot(release, tree):
    """extra_buffer with speculative decoding as spec v1 (the overlap scheduler off): SGLang
    keeps the radix cache (_handle_mamba_radix_cache only asserts mamba_track_interval 256 >=
    the draft tokens) and each running request holds one track state: the running requests
    are the states // 4, where no_buffer + --disable-radix-cache runs them at // 1. 0.5.11 runs
    a topk-2 tree as spec v1 ("spec v2 currently only supports topk = 1")."""
    steps = ("--speculative-num-steps", "2", "--speculative-eagle-topk", *tree,
             "--speculative-num-draft-tokens", "4") if tree else ()  # fmt: skip
    doc = run_json(*_at(release), *EXTRA, *NEXTN, *steps, "--max-num-seqs", "400")
    s = doc["setup"]
    assert s["speculative"] and s["enable_prefix_caching"] is True
    assert s["async_scheduling"] is False
    ids = [x["id"] for x in doc["notes"]]
    assert "sglang-mamba-extra-buffer" in ids
    off = run_json(*_at(release), *NEXTN, *steps, "--disable-radix-cache",
                   "--max-num-seqs", "400")["setup"]  # fmt: skip
    assert s["max_num_seqs"] < off["max_num_seqs"]


def test_plan_searches_the_speculative_layout_with_the_radix_cache():
    """plan --mamba-scheduler-strategy extra_buffer at 0.5.10: the NEXTN layout keeps the radix
    cache (no --disable-radix-cache, which 0.5.10 refuses beside extra_buffer) and replays."""
    from sim_replay import serve_argv

    doc = run_json(
        *("plan", "qwen3.5-35b-a3b", "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
        *("--engine-version", "0.5.10", "--kv-cache-dtype", "auto", "--max-num-seqs", "64"),
        *("--max-num-batched-tokens", "8192", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--num-prompts", "20", "--jobs", "1", "--input-len", "512", "--output-len", "64"),
        *(*EXTRA, "--format", "json"),
    )
    spec = [c for c in doc["candidates"] if c.get("speculative")]
    assert spec and all("--disable-radix-cache" not in c["command"] for c in spec)
    replay = run_json("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang",
                      "--engine-version", "0.5.10", *serve_argv(spec[0]["command"]),
                      "--num-prompts", "4")  # fmt: skip
    assert replay["setup"]["enable_prefix_caching"] is True
    assert replay["setup"]["max_num_seqs"] == spec[0]["max_num_seqs"]


def test_spec_v2_keeps_the_overlap_schedulers_two_track_slots():
    """0.5.11 runs a NEXTN chain under extra_buffer as spec v2 beside the overlap scheduler
    (its V2 worker tracks the states: EAGLEWorkerV2._mamba_verify_update), each running request
    holding the overlap's 2 track states: the running requests are the states // 5, fewer than
    spec v1's // 4 (--no-async-scheduling, the same release)."""
    v2 = run_json(*_at("0.5.11"), *EXTRA, *NEXTN, "--max-num-seqs", "400")
    v1 = run_json(*_at("0.5.11"), *EXTRA, *NEXTN, "--no-async-scheduling", "--max-num-seqs", "400")
    s2, s1 = v2["setup"], v1["setup"]
    assert s2["speculative"] and s2["enable_prefix_caching"] is True
    assert s2["async_scheduling"] is True and s1["async_scheduling"] is False
    states = s1["max_num_seqs"] * 4
    assert (states - 3) // 5 <= s2["max_num_seqs"] <= (states + 3) // 5
    modes = {n["id"]: n["text"] for n in v2["notes"]}
    assert "spec v2" in modes["sglang-spec-mode"]
    assert "spec v1" in {n["id"]: n["text"] for n in v1["notes"]}["sglang-spec-mode"]
