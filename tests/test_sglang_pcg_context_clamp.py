"""SGLang 0.5.13-0.5.16 clamp piecewise_cuda_graph_max_tokens to a given --context-length
("prevents PCG warmup from compiling graphs with more tokens than the model buffers can hold",
#21112; 0.5.13 server_args.py:1579-1585, 0.5.16 :4039-4045), a given max tokens too; 0.5.12
and 0.5.17 have no such clamp. Fewer captured sizes, a smaller reserve in the default
mem_fraction_static, and no prefill step past the context under a graph."""

from __future__ import annotations

import pytest

from kvplan.engines.request import PiecewiseFlags
from kvplan.engines.sglang import (
    default_mem_fraction,
    piecewise_graph_tokens,
    piecewise_max_tokens,
)
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_json

H100 = load_profile("h100")
G = H100.usable_memory_bytes / 2**20
LLAMA_8B = load_model("llama-3.1-8b")
BASE_MIB = 512 + 8192 * 1.5 + 256 * 2 + 1024 / 8  # H100, TP 1 (test_sglang_pcg_reserve)


def _fraction(reserved_mib: float) -> float:
    return round((G - reserved_mib) / G, 3)


@pytest.mark.parametrize(
    "version, flags, max_tokens",
    [
        ("0.5.12", PiecewiseFlags(context_length=4096), 8192),
        ("0.5.13", PiecewiseFlags(context_length=4096), 4096),
        ("0.5.13", PiecewiseFlags(), 8192),
        ("0.5.16", PiecewiseFlags(context_length=3000), 3000),
        ("0.5.16", PiecewiseFlags(max_tokens=6000, context_length=5000), 5000),
        ("0.5.16", PiecewiseFlags(context_length=100_000), 8192),
        ("0.5.17", PiecewiseFlags(context_length=4096), 8192),
        ("0.5", PiecewiseFlags(context_length=4096), 8192),  # April 2026's main: before
    ],
)
def test_the_max_tokens_by_release(version, flags, max_tokens):
    assert piecewise_max_tokens(LLAMA_8B, version, flags, 8192) == max_tokens


def test_the_reserve_counts_the_clamped_sizes():
    flags = PiecewiseFlags(context_length=1024)
    clamped = piecewise_graph_tokens(1024, "0.5.13")
    assert clamped == 38 and piecewise_graph_tokens(8192, "0.5.13") == 58
    got = default_mem_fraction(LLAMA_8B, H100, 1, 1, "0.5.13", piecewise=flags)
    assert got.mem_fraction_static == _fraction(BASE_MIB + 38 * 8) == 0.831
    assert _fraction(BASE_MIB + 58 * 8) == 0.829  # unclamped: a different fraction


def test_engine_clamps_to_a_given_max_model_len():
    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--max-model-len", "1024")
    at_13 = run_json(*base, "--sglang-version", "0.5.13")
    at_12 = run_json(*base, "--sglang-version", "0.5.12")
    assert at_13["mem_fraction_static"] == _fraction(BASE_MIB + 38 * 8) == 0.831
    assert at_12["mem_fraction_static"] == _fraction(BASE_MIB + 58 * 8) == 0.829
    plain = run_json("engine", "llama-3.1-8b", "--engine", "sglang", "--sglang-version", "0.5.13")
    assert plain["mem_fraction_static"] == 0.829  # no context given: no clamp


def test_simulate_clamps_to_a_given_max_model_len():
    sim = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts", "2")
    at_13 = run_json(*sim, "--engine-version", "0.5.13", "--max-model-len", "1024")["setup"]
    at_12 = run_json(*sim, "--engine-version", "0.5.12", "--max-model-len", "1024")["setup"]
    assert (at_13["mem_fraction_static"], at_12["mem_fraction_static"]) == (0.831, 0.829)
