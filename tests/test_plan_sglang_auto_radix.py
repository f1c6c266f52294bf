"""`plan --emit sglang` adds --disable-radix-cache to a speculating hybrid exactly where
`kvplan engine` resolves the same launch without its radix cache (issue 28): through 0.5.9
SGLang turns it off itself, 0.5.10-0.5.13 refuse to start with it (PR #19391), and from 0.5.14
the default --mamba-radix-cache-strategy auto resolves extra_buffer for Qwen3.5 on CUDA, which
keeps it (engines.sglang.mamba_default_strategy), so the command carries no flag. The decision
is made per GPU (plans.plan._speculative_radix) with the resolution simulate and engine use."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli, run_json

MODEL = "qwen3.5-35b-a3b"
PLAN = (
    *("plan", MODEL, "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
    *("--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192"),
    *("--rate", "1", "--slo", "tpot_p99=1s", "--num-prompts", "20", "--jobs", "1"),
    *("--input-len", "512", "--output-len", "64", "--top", "10"),
)
NEXTN = (
    *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"),
)
ENGINE = ("engine", MODEL, "--engine", "sglang", "--gpu", "h200", "--tp", "2")
SIM = (
    *("simulate", MODEL, "--gpu", "h200", "--engine", "sglang", "--tp", "2"),
    *("--num-prompts", "4", "--input-len", "200", "--output-len", "10"),
)


def _speculating(release: str, *flags: str) -> dict:
    doc = run_json(*PLAN, "--engine-version", release, *NEXTN, *flags)
    (candidate,) = [c for c in doc["candidates"] if c.get("speculative")]
    return candidate


def _engine_resolves_extra_buffer(release: str, *flags: str) -> bool:
    """Whether `kvplan engine` (which sizes no hybrid's speculation, so the launch without it:
    SGLang's auto does not look at speculation) resolves the strategy to extra_buffer."""
    doc = run_json(*ENGINE, "--sglang-version", release, *flags)
    auto = next((n["text"] for n in doc["notes"] if n["id"] == "sglang-mamba-auto"), "")
    return "resolves to extra_buffer" in auto


def _simulate_keeps_radix(release: str, *flags: str) -> bool:
    """Whether `kvplan simulate` runs the speculating launch, as written without
    --disable-radix-cache, with the radix cache on (no refusal, no sglang-radix-off)."""
    code, out, err = run_cli(*SIM, "--engine-version", release, *NEXTN, *flags, "--format", "json")
    if code != 0:
        assert "--disable-radix-cache" in err, err  # the refusal names the flag it needs
        return False
    doc = json.loads(out)
    radix_off = any(n["id"] == "sglang-radix-off" for n in doc["notes"])
    return not radix_off and doc["setup"]["enable_prefix_caching"] is not False


@pytest.mark.parametrize(
    ("release", "flagged"),
    [("0.5.9", True), ("0.5.13", True), ("0.5.14", False), ("0.5.20", False)],
)
def test_plan_emits_what_engine_resolves(release, flagged):
    candidate = _speculating(release)
    emitted = "--disable-radix-cache" in candidate["command"].split()
    assert emitted is flagged
    assert emitted is not _engine_resolves_extra_buffer(release)
    assert emitted is not _simulate_keeps_radix(release)
    assert (candidate.get("layout_flags") or []) == (["--disable-radix-cache"] if flagged else [])


def test_extra_buffer_kept_candidate_replays_with_the_radix_cache():
    """The 0.5.14 command, replayed by simulate, keeps prefix caching and the pool plan priced."""
    from sim_replay import serve_argv

    candidate = _speculating("0.5.14")
    doc = run_json(
        "simulate", MODEL, "--gpu", "h200", "--engine", "sglang", "--engine-version", "0.5.14",
        *serve_argv(candidate["command"]), "--num-prompts", "8", "--input-len", "128",
        "--output-len", "8",
    )  # fmt: skip
    assert doc["setup"]["enable_prefix_caching"] is not False
    assert doc["setup"]["kv_cache_tokens"] == candidate["kv_cache_tokens"]
    assert any(n["id"] == "sglang-mamba-auto" for n in doc["notes"])


def test_no_buffer_given_still_takes_the_flag():
    """A given no_buffer strategy at 0.5.14 is refused with the radix cache while speculating:
    plan adds the flag, and simulate given the same strategy refuses without it."""
    strategy = ("--mamba-radix-cache-strategy", "no_buffer")
    candidate = _speculating("0.5.14", *strategy)
    assert "--disable-radix-cache" in candidate["command"].split()
    assert not _engine_resolves_extra_buffer("0.5.14", *strategy)
    assert not _simulate_keeps_radix("0.5.14", *strategy)


def test_off_cuda_the_auto_strategy_cannot_start_so_the_flag_is_added():
    """On an AMD GPU 0.5.14's auto resolves extra_buffer, which SGLang asserts on CUDA only:
    the speculating launch starts only without the radix cache, so plan adds the flag; the
    same launch without it is refused by simulate in one line."""
    doc = run_json(*PLAN[:3], "mi300x", *PLAN[4:], "--engine-version", "0.5.14", *NEXTN)
    (candidate,) = [c for c in doc["candidates"] if c.get("speculative")]
    assert candidate["layout_flags"] == ["--disable-radix-cache"]
    code, _, err = run_cli(*SIM[:3], "mi300x", *SIM[4:], "--engine-version", "0.5.14", *NEXTN)
    assert code == 2 and "CUDA" in err, err
