"""plan --emit sglang with the flags of SGLang's speculative layouts (issue 28):
--disable-radix-cache, which a speculating hybrid needs from 0.5.10 (server_args'
_handle_mamba_radix_cache raises without it, SGLang PR #19391) and gets from plan, and
--speculative-skip-dp-mlp-sync, searched (or given) for EAGLE/NEXTN under DP attention only.
Each emitted command replays through kvplan's own reading of serve commands (sim_replay) to the
layout plan priced."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli, run_json
from sim_replay import serve_argv

HYBRID = (
    *("plan", "qwen3.5-35b-a3b", "--gpu", "h200", "--emit", "sglang", "--tp", "2"),
    *("--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192"),
    *("--rate", "1", "--slo", "tpot_p99=1s", "--num-prompts", "20", "--jobs", "1"),
    *("--input-len", "512", "--output-len", "64", "--top", "10"),
)
NEXTN = (
    *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"),
)
# A hybrid the releases before 0.5.6 serve (Qwen3-Next from 0.5.2; Qwen3.5 only from 0.5.9,
# kvplan/data/sglang_models.json), speculating with an EAGLE draft (it has no MTP layers)
OLD_HYBRID = ("plan", "qwen3-next-80b-a3b", *HYBRID[2:])
EAGLE = (
    *("--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "x/y"),
    *NEXTN[2:],
)
DSV3 = (
    *("plan", "deepseek-v3", "--gpu", "h200", "--emit", "sglang", "--tp", "8"),
    *("--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048"),
    *("--max-model-len", "8192", "--rate", "1", "--slo", "tpot_p99=1s", "--num-prompts", "20"),
    *("--jobs", "1", "--input-len", "128", "--output-len", "16", "--top", "10"),
)
DP8 = ("--dp", "8", "--enable-dp-attention")
SKIP = "--speculative-skip-dp-mlp-sync"


def _speculating(doc: dict) -> list[dict]:
    return [c for c in doc["candidates"] if c.get("speculative")]


def _replayed(doc: dict, candidate: dict, *head: str) -> dict:
    """`kvplan simulate` on the candidate's emitted command, read as sim_replay reads a
    published serve command."""
    argv = serve_argv(candidate["command"])
    return run_json("simulate", *head, *argv, "--num-prompts", "8", "--input-len", "128",
                    "--output-len", "8")  # fmt: skip


def test_speculating_hybrid_at_0_5_10_is_proposed_without_the_radix_cache():
    """At 0.5.10 the NEXTN layout is proposed with --disable-radix-cache (simulate refuses it
    without), the layout without speculation keeps the radix cache, and the command replays to
    the same pool (its KV tokens, its running requests) with prefix caching off."""
    code, _, err = run_cli(
        "simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang", "--tp", "2",
        "--engine-version", "0.5.10", *NEXTN, "--num-prompts", "4",
    )  # fmt: skip
    one_line_error(code, err, "--disable-radix-cache")
    doc = run_json(*HYBRID, "--engine-version", "0.5.10", *NEXTN, "--format", "json")
    (spec,) = _speculating(doc)
    assert spec["layout_flags"] == ["--disable-radix-cache"]
    assert spec["command"].endswith("--disable-radix-cache")
    assert "--speculative-algorithm EAGLE" in spec["command"]  # NEXTN is EAGLE to SGLang
    plain = [c for c in doc["candidates"] if not c.get("speculative")]
    assert plain and all("--disable-radix-cache" not in c["command"] for c in plain)
    setup = _replayed(doc, spec, "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang",
                      "--engine-version", "0.5.10")["setup"]  # fmt: skip
    assert setup["enable_prefix_caching"] is False
    assert setup["kv_cache_tokens"] == spec["kv_cache_tokens"]
    assert setup["max_num_seqs"] == spec["max_num_seqs"]
    assert setup["tp"] == spec["tp"] and setup["speculative"]


def test_no_flag_where_the_release_keeps_the_radix_cache():
    """0.5.5 has no _handle_mamba_radix_cache rule (kvplan's reading: from 0.5.6), so the
    speculating hybrid keeps its radix cache and plan adds nothing."""
    doc = run_json(*OLD_HYBRID, "--engine-version", "0.5.5", *EAGLE, "--format", "json")
    assert _speculating(doc)
    assert all("layout_flags" not in c for c in doc["candidates"])


def test_disable_radix_cache_given_reaches_every_configuration():
    doc = run_json(*OLD_HYBRID, "--engine-version", "0.5.5", "--disable-radix-cache",
                   "--format", "json")  # fmt: skip
    assert doc["candidates"]
    for c in doc["candidates"]:
        assert c["layout_flags"] == ["--disable-radix-cache"], c
    kept = run_json(*OLD_HYBRID, "--engine-version", "0.5.5", "--format", "json")
    off = {bool(c.get("speculative")): c["kv_cache_tokens"] for c in doc["candidates"]}
    on = {bool(c.get("speculative")): c["kv_cache_tokens"] for c in kept["candidates"]}
    # one state a request instead of the radix cache's pool split: more KV tokens
    assert off[False] > on[False]


def test_skip_dp_mlp_sync_is_searched_under_dp_attention_with_eagle_only():
    """Under DP attention the MTP (EAGLE) layout is searched without and with the flag; it
    replays to the same layout; without DP attention no candidate carries it."""
    doc = run_json(*DSV3, *DP8, "--format", "json")
    flags = sorted(str(c.get("layout_flags")) for c in _speculating(doc))
    assert flags == ["None", str([SKIP])]
    skipped = next(c for c in _speculating(doc) if c.get("layout_flags"))
    assert skipped["command"].endswith(SKIP) and "--enable-dp-attention" in skipped["command"]
    replay = _replayed(doc, skipped, "deepseek-v3", "--gpu", "h200", "--engine", "sglang")
    layout = next(n["text"] for n in replay["notes"] if n["id"] == "sim-expert-parallel")
    assert SKIP in layout
    assert replay["setup"]["kv_cache_tokens"] == skipped["kv_cache_tokens"]
    assert replay["setup"]["tp"] == 8 and replay["setup"]["speculative"]
    alone = run_json(*DSV3, "--format", "json")
    assert _speculating(alone)
    assert all(SKIP not in c["command"] for c in alone["candidates"])


def test_skip_dp_mlp_sync_given_applies_to_the_speculative_layouts():
    doc = run_json(*DSV3, *DP8, SKIP, "--format", "json")
    assert [c.get("layout_flags") for c in _speculating(doc)] == [[SKIP]]
    assert all(not c.get("layout_flags") for c in doc["candidates"] if not c.get("speculative"))


@pytest.mark.parametrize(
    "args,needle",
    [
        ((*DSV3, SKIP), "--enable-dp-attention"),
        ((*DSV3, *DP8, SKIP, "--speculative", "off"), "EAGLE"),
        ((*DSV3, *DP8, SKIP, "--speculative-algorithm", "NGRAM"), "EAGLE"),
        ((*HYBRID[:5], "vllm", *HYBRID[6:], "--disable-radix-cache"), "is SGLang's"),
    ],
)
def test_misplaced_flags_are_one_line_errors(args, needle):
    code, out, err = run_cli(*args)
    one_line_error(code, err, needle)
    assert out == ""


def test_skip_dp_mlp_sync_is_not_searched_for_a_release_without_it():
    """At 0.5.10 (before the flag, first in 0.5.11) plan searches the MTP layout without it
    and refuses it given, one line, rather than print a flag the release refuses."""
    doc = run_json(*DSV3, *DP8, "--engine-version", "0.5.10", "--format", "json")
    assert _speculating(doc)
    assert all(SKIP not in c["command"] for c in doc["candidates"])
    code, out, err = run_cli(*DSV3, *DP8, "--engine-version", "0.5.10", SKIP)
    one_line_error(code, err, "0.5.11")
    assert out == ""
