"""The speculative term of SGLang's default mem_fraction_static, by release and algorithm
(engines.sglang.speculative_reserve_mib; server_args._handle_gpu_memory_settings of each wheel):
after the 10 GiB floor, STANDALONE 6 GiB, NGRAM none, the EAGLE family 2 GiB through 0.5.9 and
4 GiB in 0.5.10-0.5.13; from 0.5.14 no term, the draft counted in the pool instead. Through
0.5.13 the target's pool is its own (the draft's weights and pool come out of the reserve)."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import default_mem_fraction, sglang_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json

H100 = load_profile("h100")
G = H100.usable_memory_bytes / 2**20  # 81,089.875 MiB
LLAMA_8B = load_model("llama-3.1-8b")
# H100, TP 1: 512 + 8,192 x 1.5 + 256 x 2 + 1 / 8 x 1,024 = 13,440 MiB (no piecewise term:
# speculative decoding turns the graphs off from 0.5.10, and before it they are opt-in)
BASE_MIB = 512 + 8192 * 1.5 + 256 * 2 + 1024 / 8


def _fraction(reserved_mib: float) -> float:
    return round((G - reserved_mib) / G, 3)


@pytest.mark.parametrize(
    "version, algorithm, term_mib",
    [
        ("0.5.9", None, 0),
        ("0.5.9", "EAGLE", 2048),
        ("0.5.9", "EAGLE3", 2048),
        ("0.5.9", "NEXTN", 2048),
        ("0.5.9", "STANDALONE", 6144),
        ("0.5.9", "NGRAM", 0),
        ("0.5.6.post2", "eagle3", 2048),  # as typed: SGLang's choices are upper case
        ("0.5.10", "EAGLE", 4096),
        ("0.5.13", "EAGLE3", 4096),
        ("0.5.13", "STANDALONE", 6144),
        ("0.5.13", "NGRAM", 0),
        ("0.5.14", "EAGLE", 0),  # the draft counted in the pool instead
        ("0.5.14", "STANDALONE", 0),
        ("0.5.23", "EAGLE3", 0),
        ("0.5", "EAGLE", 4096),  # April 2026's main: 0.5.10's rules
    ],
)
def test_the_fraction_by_release_and_algorithm(version, algorithm, term_mib):
    got = default_mem_fraction(
        LLAMA_8B,
        H100,
        1,
        1,
        version,
        piecewise_off="speculative decoding",
        speculative_algorithm=algorithm,
    )
    assert got.mem_fraction_static == _fraction(BASE_MIB + term_mib)


def test_the_pool_is_the_targets_own_under_the_lower_fraction():
    """sglang_allocation: free before load x fraction - weights, the fraction with the term."""
    request = EngineRequest(
        engine="sglang", sglang_version="0.5.9", speculative=True, speculative_algorithm="EAGLE"
    )
    got = sglang_allocation(LLAMA_8B, H100, request)
    plain = sglang_allocation(LLAMA_8B, H100, request._replace(speculative_algorithm=None))
    assert got.mem_fraction_static == _fraction(BASE_MIB + 2048)
    assert plain.mem_fraction_static == _fraction(BASE_MIB)
    assert got.kv_cache_tokens < plain.kv_cache_tokens


def test_engine_takes_the_algorithm_for_sglang():
    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    eagle = run_json(*base, "--sglang-version", "0.5.9", "--speculative-algorithm", "EAGLE")
    assert eagle["mem_fraction_static"] == _fraction(BASE_MIB + 2048)
    new = run_json(*base, "--sglang-version", "0.5.10", "--speculative-algorithm", "STANDALONE")
    assert new["mem_fraction_static"] == _fraction(BASE_MIB + 6144)
    ngram = run_json(*base, "--sglang-version", "0.5.10", "--speculative-algorithm", "NGRAM")
    assert ngram["mem_fraction_static"] == _fraction(BASE_MIB)
    plain = run_json(*base, "--sglang-version", "0.5.9")
    assert eagle["kv_cache_tokens"] < plain["kv_cache_tokens"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--sglang-version", "0.5.14", "--speculative-algorithm", "EAGLE"), "kvplan simulate"),
        (("--speculative-algorithm", "MEDUSA"), "--speculative-algorithm"),
        (("--engine", "vllm", "--speculative-algorithm", "EAGLE"), "--speculative-algorithm"),
    ],
)
def test_engine_refuses_what_it_cannot_size_one_line_exit_2(argv, message):
    base = ["engine", "llama-3.1-8b", "--ctx", "8k"]
    if "--engine" not in argv:
        base += ["--engine", "sglang"]
    code, _, err = run_cli(*base, *argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


SIM = (
    *("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts", "2"),
    *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x"),
)


def test_simulate_prints_the_releases_fraction_and_pool():
    """Through 0.5.13 the target's pool is its own under the lower fraction (the draft's
    weights and pool sit in the reserve); from 0.5.14 the fraction has no term and the pool
    holds the draft's weights and layers (techniques.speculative_pool_blocks)."""
    old = run_json(*SIM, "--engine-version", "0.5.9")["setup"]
    plain = run_json(*SIM[:8], "--engine-version", "0.5.9")["setup"]
    new = run_json(*SIM, "--engine-version", "0.5.14", "--disable-piecewise-cuda-graph")
    new = new["setup"]
    assert old["mem_fraction_static"] == _fraction(BASE_MIB + 2048)
    assert new["mem_fraction_static"] == _fraction(BASE_MIB)
    # the pool per GiB of the fraction: the target's own cell (128 KiB a token for Llama-8B
    # bf16) through 0.5.13; the same memory less the draft's weights, split with its KV, after
    per_token = 32 * 8 * 128 * 2 * 2
    gap_bytes = (plain["kv_cache_tokens"] - old["kv_cache_tokens"]) * per_token
    fraction_gap = (plain["mem_fraction_static"] - old["mem_fraction_static"]) * 2**20 * G
    # within the context's share of the GPU and the fractions' rounding (0.001 of 0.025)
    assert abs(gap_bytes - fraction_gap) < 0.05 * fraction_gap
    draft = new["speculative"]
    assert new["kv_cache_tokens"] < plain["kv_cache_tokens"] - draft["draft_weight_bytes"] / (
        per_token
    )


@pytest.mark.parametrize(
    "version, off",
    [("0.5.10", True), ("0.5", True), ("0.5.11", False), ("0.5.13", False), ("0.5.14", False)],
)
def test_speculation_turns_piecewise_graphs_off_in_0_5_10_only(version, off):
    """_handle_piecewise_cuda_graph's "2. Speculative decoding" (0.5.10 server_args.py:1088-1090)
    is gone from 0.5.11 (:1200-1222 lists DP attention, torch compile, PP, ...): the graphs and
    their reserve stay on beside a speculative algorithm."""
    from kvplan.engines.sglang import piecewise_excluded

    got = piecewise_excluded(H100, True, 1, 1, version)
    assert (got == "speculative decoding") is off and (got is None) is not off


def test_engine_keeps_the_piecewise_reserve_beside_speculation_from_0_5_11():
    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    ngram = run_json(*base, "--sglang-version", "0.5.14", "--speculative-algorithm", "NGRAM")
    assert ngram["mem_fraction_static"] == _fraction(BASE_MIB + 58 * 8)  # 58 sizes to 8,192
    eagle = run_json(*base, "--sglang-version", "0.5.11", "--speculative-algorithm", "EAGLE")
    assert eagle["mem_fraction_static"] == _fraction(BASE_MIB + 58 * 8 + 4096)


@pytest.mark.parametrize("algorithm", ["EAGLE3", "STANDALONE", "NGRAM"])
def test_engine_runs_48_requests_when_speculating(algorithm):
    """server_args._handle_speculative_decoding sets max_running_requests to 48 when a
    speculative algorithm is given without --max-running-requests (EAGLE family, STANDALONE and
    NGRAM alike), so the scheduler's log line says 48, as `kvplan simulate` runs it, not the
    pool's own count."""
    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    got = run_json(*base, "--sglang-version", "0.5.10", "--speculative-algorithm", algorithm)
    plain = run_json(*base, "--sglang-version", "0.5.10")
    assert got["max_running_requests"] == 48
    assert plain["max_running_requests"] > 48  # the pool's own count when not speculating


def test_a_given_running_count_is_the_schedulers():
    """tp_worker: a given max_running_requests (// the DP-attention size) is the scheduler's,
    above or below the count SGLang picks from the pool when none is given."""
    request = EngineRequest(engine="sglang", sglang_version="0.5.10")
    own = sglang_allocation(LLAMA_8B, H100, request).max_running_requests
    for given in (64, own + 1000):
        got = sglang_allocation(LLAMA_8B, H100, request._replace(max_running_requests=given))
        assert got.max_running_requests == given


def test_engine_refuses_nextn_on_a_model_without_mtp_layers_as_simulate_does():
    """NEXTN drafts with the checkpoint's own MTP layers: `kvplan simulate` refuses it on a
    model without them (simulate.speculative.parse_sglang), and so does `kvplan engine`."""
    base = ["engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k"]
    code, _, err = run_cli(*base, "--sglang-version", "0.5.10", "--speculative-algorithm", "NEXTN")
    assert code == 2 and "has no MTP layers" in err and "Traceback" not in err
    sim = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang"]
    code, _, sim_err = run_cli(*sim, "--speculative-algorithm", "NEXTN", "--num-prompts", "2")
    assert code == 2 and sim_err.strip() == err.strip()


def test_engine_concurrency_holds_spec_v2s_reserve_as_simulate_does():
    """0.5.13 runs EAGLE as spec v2 (ScheduleBatch.is_spec_v2): each running request holds
    2 x max(steps x topk, draft tokens) slots from its committed length on
    (engines.sglang.spec_v2_reserve_tokens), with SGLang's defaults for a Llama target
    (auto_choose_speculative_params: 5 steps, topk 4, 8 draft tokens) 40 at page 1. `kvplan
    engine`'s concurrency divides the pool by a request's max_model_len plus the slots it holds
    past the token it decodes, as kvplan simulate's engine holds them, and names the reserve;
    NGRAM runs spec v1's schema and reserves nothing."""
    from kvplan.engines.sglang import spec_v2_lookahead_tokens, spec_v2_reserve_tokens

    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    eagle = run_json(*base, "--sglang-version", "0.5.13", "--speculative-algorithm", "EAGLE")
    reserve = spec_v2_reserve_tokens("0.5.13", "eagle", 5, 4, 8, eagle["block_size"], False)
    assert reserve == 40
    held = 8192 + spec_v2_lookahead_tokens(reserve)
    assert eagle["max_concurrency"] == pytest.approx(eagle["kv_cache_tokens"] / held)
    assert "sglang-spec-v2-kv" in [n["id"] for n in eagle["notes"]]
    ngram = run_json(*base, "--sglang-version", "0.5.13", "--speculative-algorithm", "NGRAM")
    assert ngram["max_concurrency"] == pytest.approx(ngram["kv_cache_tokens"] / 8192)
    assert "sglang-spec-v2-kv" not in [n["id"] for n in ngram["notes"]]
