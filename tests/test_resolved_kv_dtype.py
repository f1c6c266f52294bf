"""`kvplan simulate`'s setup and `kvplan engine` print the same --kv-cache-dtype for the same
launch: the one the engine's allocation resolved, a checkpoint-stated KV cache included (vLLM
from 0.14 takes a ModelOpt checkpoint's fp8 cache for auto, SGLang from 0.5.4), with the note
that the checkpoint stated it in both."""

from __future__ import annotations

import pytest

from helpers import run_json

MODEL = "kimi-k2.5-nvfp4"  # ModelOpt NVFP4 weights, kv_cache_scheme fp8
SIM = ("--num-prompts", "4", "--input-len", "100", "--output-len", "5", "--max-model-len", "8192")


def _pair(engine: str, release_flag: str, release: str) -> tuple[dict, dict]:
    alloc = run_json(
        *("engine", MODEL, "--engine", engine, "--gpu", "b200", "--tp", "8"),
        *(release_flag, release, "--max-model-len", "8192"),
    )
    sim = run_json(
        *("simulate", MODEL, "--engine", engine, "--gpu", "b200", "--tp", "8"),
        *("--engine-version", release, *SIM),
    )
    return alloc, sim


@pytest.mark.parametrize(
    ("engine", "release_flag", "release", "resolved", "note_id"),
    [
        ("vllm", "--vllm-version", "0.21", "fp8_e4m3", "vllm-checkpoint-kv-cache"),
        ("sglang", "--sglang-version", "0.5.14", "fp8_e4m3", "sglang-checkpoint-kv-cache"),
    ],
)
def test_checkpoint_stated_cache_prints_the_same(engine, release_flag, release, resolved, note_id):
    alloc, sim = _pair(engine, release_flag, release)
    assert alloc["kv_cache_dtype"] == sim["setup"]["kv_cache_dtype"] == resolved
    assert note_id in [n["id"] for n in alloc["notes"]]
    assert note_id in [n["id"] for n in sim["notes"]]
    assert alloc["kv_cache_tokens"] == sim["setup"]["kv_cache_tokens"]


def test_a_given_cache_prints_as_given():
    """--kv-cache-dtype bfloat16 overrides the checkpoint's statement in both, with no note."""
    alloc = run_json(
        *("engine", MODEL, "--engine", "vllm", "--gpu", "b200", "--tp", "8"),
        *("--max-model-len", "8192", "--kv-cache-dtype", "bfloat16"),
    )
    sim = run_json(
        *("simulate", MODEL, "--engine", "vllm", "--gpu", "b200", "--tp", "8"),
        *("--kv-cache-dtype", "bfloat16", *SIM),
    )
    assert alloc["kv_cache_dtype"] == sim["setup"]["kv_cache_dtype"] == "bfloat16"
    assert "vllm-checkpoint-kv-cache" not in [n["id"] for n in sim["notes"]]
