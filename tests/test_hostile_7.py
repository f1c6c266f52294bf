"""Hostile inputs, seventh round: the newest options (attention backends, vLLM 0.32 and the
DeepSeek-V4 engines, DP attention in lockstep). An empty or non-ASCII engine version read as the
default or as a release, a version newer than any kvplan models printed as that release's own
rules, and DP ranks sharing one replica's GPUs printed as replicas of the whole TP group."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_cli

SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--input-len", "200", "--output-len", "20")
SMALL = ("--num-prompts", "5")


# ---- 1. engine versions spelled oddly ----------------------------------------------------------
# `--vllm-version ''` and `--engine-version ''` ran as the default (an `or` took '' as unset), and
# int() read '0.٢٤', '0. 24' and '0.2_4' as 0.24: each is refused as typed now.
@pytest.mark.parametrize(
    "argv",
    [
        ("--vllm-version", ""),
        ("--engine-version", ""),
        ("--vllm-version", "0.٢٤"),
        ("--vllm-version", "0. 24"),
        ("--vllm-version", "0.2_4"),
        ("--vllm-version", "+0.24"),
        ("--engine", "sglang", "--engine-version", ""),
        ("--engine", "sglang", "--engine-version", "0.٥"),
        ("--engine", "sglang", "--engine-version", "0. 5"),
        ("--vllm-version", "0." + "9" * 5000),  # int() of 5,000 digits raises ValueError
        ("--engine", "sglang", "--engine-version", "0." + "9" * 5000),
    ],
)
def test_an_odd_engine_version_is_refused_as_typed(argv):
    code, _, err = run_cli(*SIM, *SMALL, *argv)
    one_line_error(code, err, "version")


@pytest.mark.parametrize("version", ["0.32.0rc1", "0.8.5.post1", "0.24", "0.19.1"])
def test_a_release_spelled_as_vllm_tags_it_still_runs(version):
    code, out, err = run_cli(*SIM, *SMALL, "--vllm-version", version, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["setup"]["engine_version"] == version


# ---- 2. a release newer than kvplan models -----------------------------------------------------
# `--vllm-version 1.0` printed "(1.0 rules)" with no word that 0.32's rules ran instead.
@pytest.mark.parametrize("version, said", [("1.0", True), ("0.999", True), ("0.32", False)])
def test_a_release_newer_than_the_newest_says_whose_rules_ran(version, said):
    code, out, err = run_cli(*SIM, *SMALL, "--vllm-version", version, "-f", "json")
    assert code == 0, err
    ids = {n["id"]: n for n in json.loads(out)["notes"]}
    assert ("sim-vllm-version-newer" in ids) is said
    if said:
        assert "0.32" in ids["sim-vllm-version-newer"]["text"]


# ---- 3. DP attention's ranks are not replicas of the TP group ----------------------------------
# SGLang --tp 2 --dp-size 2 --enable-dp-attention runs on 2 GPUs; the deployment line read
# "x 2 (TP 2, PP 1, 2 replicas, ...)", i.e. two TP-2 replicas on two GPUs.
def test_dp_attention_ranks_are_not_printed_as_replicas():
    code, out, err = run_cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--input-len", "200", "--output-len", "20",
        *SMALL, "--engine", "sglang", "--tp", "2", "--dp-size", "2", "--enable-dp-attention",
    )  # fmt: skip
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("deployment"))
    assert "x 2 (TP 2, PP 1, 2 DP ranks in lockstep" in line, line
    assert "replicas" not in line, line
    assert "tokens per DP rank" in out


def test_plain_dp_replicas_still_read_as_replicas():
    code, out, err = run_cli(*SIM, *SMALL, "-dp", "2")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("deployment"))
    assert "x 2 (TP 1, PP 1, 2 replicas" in line, line


# ---- 4. a KV memory below one block ------------------------------------------------------------
# vLLM 0.32 with --kv-cache-memory 1B (llama) exited 0 and printed the per-request ValueError
# with "(-0.0 GiB)"; the memory less the null block is <= 0, so vLLM raises "No available memory
# for the cache blocks" first. DeepSeek-V4 already said so; every model does now.
@pytest.mark.parametrize("memory", ["1B", "2MiB"])  # 2 MiB: exactly llama's null block
def test_vllm_032_memory_within_the_null_block_is_refused(memory):
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--vllm-version", "0.32", "--kv-cache-memory", memory
    )
    one_line_error(code, err, "null block (2,097,152 B a block)")


def test_vllm_032_one_block_beside_the_null_block_still_answers():
    code, out, err = run_cli(
        "engine", "llama-3.1-8b", "--vllm-version", "0.32", "--kv-cache-memory", "3MiB"
    )
    assert code == 0, err
    assert "num_blocks           1" in out  # 3 MiB / 2 MiB a block: 1 block, the null one apart


# SGLang with --kv-cache-memory 1B printed "KV Cache is allocated. #tokens: 0" and exit 0; SGLang
# raises "Not enough memory" when max_total_num_tokens <= 0, before logging the allocation.
@pytest.mark.parametrize("memory", ["1B", "100KiB"])  # llama: 131,072 B a token
def test_sglang_pool_of_no_token_is_refused(memory):
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--engine", "sglang", "--kv-cache-memory", memory
    )
    one_line_error(code, err, "Not enough memory")


# ---- 5. vLLM's backend names are looked up as typed, in any case --------------------------------
# kvplan stripped the value; vLLM's AttentionConfig.validate_backend_before does
# AttentionBackendEnum[value.upper()] with no strip, so "FLASH_ATTN " fails to start vLLM.
@pytest.mark.parametrize("backend", ["FLASH_ATTN ", " FLASH_ATTN", " auto"])
def test_vllm_backend_with_spaces_is_refused(backend):
    code, _, err = run_cli("engine", "llama-3.1-8b", "--attention-backend", backend)
    one_line_error(code, err, "is not a vLLM attention backend")


@pytest.mark.parametrize("backend", ["flash_attn", "Flash_Attn", "AUTO", "auto"])
def test_vllm_backend_in_any_case_runs(backend):
    code, _, err = run_cli("engine", "llama-3.1-8b", "--attention-backend", backend)
    assert code == 0, err
