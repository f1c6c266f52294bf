"""A config with no length key: vLLM (`_get_and_verify_max_len` without --max-model-len) and SGLang
(`get_context_length`) both assume 2,048 tokens, and simulate runs at that length and says so."""

from __future__ import annotations

import json

import pytest

from helpers import llama_like, run_cli

SMALL = ("--num-prompts", "4", "--input-len", "64", "--output-len", "8", "--format", "json")


def _simulate(tmp_path, config: dict, *extra: str) -> dict:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run_cli("simulate", str(path), "--gpu", "h100", *SMALL, *extra)
    assert code == 0, err
    return json.loads(out)


def _note_ids(result: dict) -> list[str]:
    return [n["id"] for n in result["notes"]]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_length_key_runs_at_the_engines_2048_and_says_so(tmp_path, engine):
    result = _simulate(tmp_path, llama_like(), "--engine", engine)
    assert result["setup"]["max_model_len"] == 2048
    assert "engine-default-length" in _note_ids(result)


def test_a_given_length_or_a_stated_key_needs_no_note(tmp_path):
    given = _simulate(tmp_path, llama_like(), "--max-model-len", "4096")
    assert given["setup"]["max_model_len"] == 4096
    assert "engine-default-length" not in _note_ids(given)
    stated = _simulate(tmp_path, llama_like(max_position_embeddings=32768))
    assert stated["setup"]["max_model_len"] == 32768
    assert "engine-default-length" not in _note_ids(stated)


def test_a_key_only_vllm_reads_sets_vllms_length(tmp_path):
    # max_target_positions is in vLLM's list (not in SGLang's): vLLM derives its length from it
    result = _simulate(tmp_path, llama_like(max_target_positions=3000))
    assert result["setup"]["max_model_len"] == 3000
    assert "engine-default-length" not in _note_ids(result)
