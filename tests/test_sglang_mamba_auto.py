"""SGLang's default mamba strategy by release (issue 28): 0.5.7-0.5.13 resolve "auto" to
no_buffer always (0.5.13 server_args.py:1225); from 0.5.14 _handle_mamba_radix_cache (0.5.14
server_args.py:4385, arg_groups/overrides.py from 0.5.15) resolves it to extra_buffer for a
listed hybrid architecture when the overlap scheduler is wanted or --page-size > 1, else to
no_buffer with the overlap scheduler off. The running-request cap is the state pool's states
// 3 under no_buffer and // 5 under extra_buffer with the overlap scheduler (// 4 without)."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import (
    mamba_default_strategy,
    mamba_ratio_track_slots,
    sglang_allocation,
)
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import one_line_error, run_cli, run_json

MODEL = "qwen3.5-35b-a3b"  # config model_type qwen3_5_moe: Qwen3_5MoeForConditionalGeneration
SIM = (
    *("simulate", MODEL, "--gpu", "h200", "--engine", "sglang", "--tp", "2"),
    *("--num-prompts", "4", "--input-len", "200", "--output-len", "10"),
)


def _run(release: str, *flags: str) -> dict:
    return run_json(*SIM, "--engine-version", release, *flags)


def test_the_resolution_by_release_model_and_flags():
    spec, h200 = load_model(MODEL), load_profile("h200")
    # (version, --disable-overlap-schedule given, --page-size, radix cache on)
    # before 0.5.14 (and a bare 0.5, April 2026's main) no auto: no_buffer's rules (None)
    assert mamba_default_strategy(spec, h200, "0.5.13", False, None, True) is None
    assert mamba_default_strategy(spec, h200, "0.5.14", False, None, True) == "extra_buffer"
    assert mamba_default_strategy(spec, h200, "0.5.23", False, None, True) == "extra_buffer"
    assert mamba_default_strategy(spec, h200, "0.5.14", True, None, True) == "no_buffer"
    assert mamba_default_strategy(spec, h200, "0.5.14", True, 16, True) == "extra_buffer"
    assert mamba_default_strategy(spec, h200, "0.5.14", False, None, False) is None
    assert mamba_default_strategy(spec, h200, "0.5", False, None, True) is None
    assert mamba_default_strategy(spec, h200, "0.5.5", False, None, True) is None
    # LFM2 (Lfm2ForCausalLM) is in no release's list
    lfm2 = load_model("lfm2-1.2b")
    assert mamba_default_strategy(lfm2, h200, "0.5.23", False, None, True) == "no_buffer"
    # the text-only Qwen3_5MoeForCausalLM is listed from 0.5.19 (overrides.py:519)
    text = load_model("qwen3.8-2.4t-a95b")
    assert mamba_default_strategy(text, h200, "0.5.18", False, None, True) == "no_buffer"
    assert mamba_default_strategy(text, h200, "0.5.19", False, None, True) == "extra_buffer"
    # dense models have no strategy
    dense = load_model("qwen3-8b")
    assert mamba_default_strategy(dense, h200, "0.5.14", False, None, True) is None
    with pytest.raises(KvplanError, match="CUDA only"):
        mamba_default_strategy(spec, load_profile("mi300x"), "0.5.14", False, None, True)


def test_running_caps_by_hand_on_013_014_and_newest():
    """One state pool (rest x 0.9/1.9, the same on every release); 0.5.13's default caps the
    running requests at its states // 3, 0.5.14's and 0.5.23's at // 5 with the overlap
    scheduler on, and // 3 again (no_buffer) with --disable-overlap-schedule."""
    spec, gpu = load_model(MODEL), load_profile("h200")
    alloc = sglang_allocation(
        spec, gpu, EngineRequest(engine="sglang", sglang_version="0.5.13", tp=2)
    )
    states = alloc.max_mamba_cache_size
    assert states is not None and states > 20
    old, new, newest = _run("0.5.13"), _run("0.5.14"), _run("0.5.23")
    assert old["setup"]["max_num_seqs"] == states // 3
    assert old["setup"]["async_scheduling"] is False
    for doc in (new, newest):
        assert doc["setup"]["max_num_seqs"] == states // 5
        assert doc["setup"]["async_scheduling"] is True
        assert doc["setup"]["kv_cache_tokens"] == old["setup"]["kv_cache_tokens"]
        ids = [n["id"] for n in doc["notes"]]
        assert "sglang-mamba-auto" in ids and "sglang-mamba-extra-buffer" in ids
    off = _run("0.5.14", "--no-async-scheduling")
    assert off["setup"]["max_num_seqs"] == states // 3
    paged = _run("0.5.14", "--no-async-scheduling", "--block-size", "16")
    assert paged["setup"]["max_num_seqs"] == states // 4  # extra_buffer, no overlap: 1 slot


@pytest.mark.parametrize(
    "release,flags",
    [
        ("0.5.13", ("--mamba-scheduler-strategy", "extra_buffer")),
        ("0.5.14", ("--mamba-radix-cache-strategy", "no_buffer")),
        ("0.5.23", ("--mamba-radix-cache-strategy", "no_buffer")),
    ],
)
def test_an_explicit_strategy_overrides_the_default(release, flags):
    doc = _run(release, *flags)
    ids = [n["id"] for n in doc["notes"]]
    assert "sglang-mamba-auto" not in ids
    default = _run(release)
    assert doc["setup"]["max_num_seqs"] != default["setup"]["max_num_seqs"]


def test_off_cuda_the_default_is_one_line():
    code, out, err = run_cli(*SIM[:3], "mi300x", *SIM[4:], "--engine-version", "0.5.14")
    one_line_error(code, err, "no_buffer")
    assert out == ""


def test_057_counts_the_overlap_ratio_under_no_buffer():
    """0.5.7's _calculate_mamba_ratio adds 2 unless extra_buffer speculates (0.5.8 only under
    extra_buffer): the default no_buffer caps running requests at the states // 5 there."""
    assert mamba_ratio_track_slots(0, "0.5.7") == 2
    assert mamba_ratio_track_slots(1, "0.5.7") == 1  # extra_buffer speculating
    assert [mamba_ratio_track_slots(0, r) for r in ("0.5.6", "0.5.8", "0.5.14", "0.5")] == [0] * 4
    # a hybrid those releases serve (Qwen3-Next from 0.5.2; Qwen3.5 only from 0.5.9)
    old = "qwen3-next-80b-a3b"
    spec, gpu = load_model(old), load_profile("h200")
    states = sglang_allocation(
        spec, gpu, EngineRequest(engine="sglang", sglang_version="0.5.7", tp=2)
    ).max_mamba_cache_size
    assert states is not None
    sim = (SIM[0], old, *SIM[2:])
    caps = {
        r: run_json(*sim, "--engine-version", r)["setup"]["max_num_seqs"]
        for r in ("0.5.6", "0.5.7", "0.5.8")
    }
    assert caps == {"0.5.6": states // 3, "0.5.7": states // 5, "0.5.8": states // 3}


def test_plan_emits_the_default_and_replays_to_its_pool():
    """plan --emit sglang on 0.5.14 prices the default as the release resolves it (extra_buffer:
    the states // 5) and prints no strategy flag; the command replays to the same cap."""
    from sim_replay import serve_argv

    doc = run_json(
        *("plan", MODEL, "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
        *("--engine-version", "0.5.14", "--kv-cache-dtype", "auto", "--max-num-seqs", "4096"),
        *("--max-num-batched-tokens", "8192", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--num-prompts", "20", "--jobs", "1", "--input-len", "512", "--output-len", "64"),
        *("--speculative", "off", "--format", "json"),
    )
    (c,) = doc["candidates"]
    assert "strategy" not in c["command"]
    replay = run_json(*SIM, "--engine-version", "0.5.14", *serve_argv(c["command"]))
    assert (
        replay["setup"]["max_num_seqs"]
        == c["max_num_seqs"]
        == _run("0.5.14")["setup"]["max_num_seqs"]
    )
    assert replay["setup"]["kv_cache_tokens"] == c["kv_cache_tokens"]


@pytest.mark.parametrize(
    ("release", "flag"),
    [
        ("0.5.13", "--mamba-scheduler-strategy"),
        ("0.5.14", "--mamba-scheduler-strategy"),
        ("0.5.23", "--mamba-radix-cache-strategy"),
    ],
)
def test_the_default_given_by_name_is_the_default(release, flag):
    """SGLang's parser lists "auto" among the strategy's choices (MAMBA_SCHEDULER_STRATEGY_
    CHOICES = ["auto", "no_buffer", "extra_buffer"]) and defaults to it: giving it is giving
    nothing, not a refused input."""
    given, default = _run(release, flag, "auto"), _run(release)
    assert given["setup"]["max_num_seqs"] == default["setup"]["max_num_seqs"]
    assert given["setup"]["kv_cache_tokens"] == default["setup"]["kv_cache_tokens"]


def test_auto_keeps_the_release_and_engine_refusals():
    # before the flag (0.5.7) SGLang's parser refuses it whatever the value; vLLM has none
    one_line_error(
        *run_cli(*SIM, "--engine-version", "0.5.6", "--mamba-scheduler-strategy", "auto")[:3:2],
        "0.5.7",
    )
    vllm = [a if a != "sglang" else "vllm" for a in SIM]
    one_line_error(*run_cli(*vllm, "--mamba-scheduler-strategy", "auto")[:3:2], "SGLang's")


@pytest.mark.parametrize("release", ["0.5.13", "0.5.14", "0.5.23"])
def test_engine_caps_running_requests_as_simulate_does(release):
    """`kvplan engine` has no strategy flag: it runs SGLang's default, which from 0.5.14
    resolves to extra_buffer for this model (MAMBA_AUTO_EXTRA_BUFFER_FROM) and caps the running
    requests at the states // 5, as `kvplan simulate` counts them."""
    engine = run_json(
        *("engine", MODEL, "--engine", "sglang", "--gpu", "h200", "--tp", "2"),
        *("--sglang-version", release, "--max-model-len", "8192"),
    )
    sim = _run(release, "--max-model-len", "8192")
    assert engine["max_running_requests"] == sim["setup"]["max_num_seqs"]
    assert engine["kv_cache_tokens"] == sim["setup"]["kv_cache_tokens"]
