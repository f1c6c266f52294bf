"""The piecewise-CUDA-graph term of SGLang's default mem_fraction_static, by release
(engines.sglang.piecewise_reserve_mib; server_args._handle_gpu_memory_settings of each wheel):
none before 0.5.6; under --enable-piecewise-cuda-graph max_tokens // 4 (0.5.6, max_tokens 4,096)
and // 8 (0.5.7, max_tokens chunked_prefill_size); 8 MiB per captured size (0.5.8, 0.5.9); from
0.5.10 on by default (off with --disable-piecewise-cuda-graph and for the excluded layouts),
1.5 GiB flat for MLA. And the flags each release's command line has."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest, PiecewiseFlags
from kvplan.engines.sglang import default_mem_fraction, sglang_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json

H100 = load_profile("h100")
G = H100.usable_memory_bytes / 2**20  # 81,089.875 MiB
LLAMA_8B = load_model("llama-3.1-8b")
ON = PiecewiseFlags(enable=True)
OFF = PiecewiseFlags(disable=True)
# H100, TP 1: 512 + 8,192 x 1.5 (chunked_prefill_size) + 256 x 2 (cuda_graph_max_bs) +
# 1 x 1 / 8 x 1,024 = 13,440 MiB before any piecewise term
BASE_MIB = 512 + 8192 * 1.5 + 256 * 2 + 1024 / 8


def _fraction(reserved_mib: float) -> float:
    return round((G - reserved_mib) / G, 3)


@pytest.mark.parametrize(
    "version, flags, term_mib",
    [
        ("0.5.5", ON, 0),  # the flag exists, the reserve does not
        ("0.5.6.post2", PiecewiseFlags(), 0),  # off unless asked
        ("0.5.6.post2", ON, 4096 // 4),  # max_tokens 4,096 (a field default)
        ("0.5.6.post2", PiecewiseFlags(enable=True, max_tokens=2000), 2000 // 4),
        ("0.5.7", PiecewiseFlags(), 0),
        ("0.5.7", ON, 8192 // 8),  # max_tokens = chunked_prefill_size
        ("0.5.8", PiecewiseFlags(), 0),
        # sizes up to 8,192: 4-32 by 4 (8), 48-256 by 16 (14), 288-512 by 32 (8), 640-1,024
        # by 64 (7), 1,280-4,096 by 256 (12), 4,608-8,192 by 512 (8) = 57
        ("0.5.8", ON, 57 * 8),
        ("0.5.9", PiecewiseFlags(), 0),
        ("0.5.9", ON, 58 * 8),  # 576-1,024 by 64 from 0.5.9: one size more
        ("0.5.10", PiecewiseFlags(), 58 * 8),  # on by default
        ("0.5.10", OFF, 0),
        ("0.5.10", PiecewiseFlags(max_tokens=1024), 37 * 8),  # 8 + 14 + 8 + 7 sizes
        ("0.5", PiecewiseFlags(), 58 * 8),  # the newest rules: 0.5.10's
    ],
)
def test_the_fraction_by_release_and_flag(version, flags, term_mib):
    got = default_mem_fraction(LLAMA_8B, H100, 1, 1, version, piecewise=flags)
    assert got.mem_fraction_static == _fraction(BASE_MIB + term_mib)


def test_the_term_moves_the_fraction():
    """The cases above are not all one number: 13,440 MiB -> 0.834, +1,024 -> 0.822."""
    assert _fraction(BASE_MIB) == 0.834
    assert _fraction(BASE_MIB + 1024) == 0.822
    assert _fraction(BASE_MIB + 58 * 8) == 0.829


def test_mla_reserves_1_5_gib_from_0_5_10_and_per_size_before():
    """An MLA backend's max_tokens is 2,048 from 0.5.8 (41 sizes with 0.5.8's list, 42 from
    0.5.9's); from 0.5.10 its term is 1,536 MiB flat."""
    spec = load_model("deepseek-v2-lite")
    for version, flags, term in (
        ("0.5.8", ON, 41 * 8),
        ("0.5.9", ON, 42 * 8),
        ("0.5.9", PiecewiseFlags(), 0),
        ("0.5.7", ON, 8192 // 8),  # no MLA cap yet: chunked_prefill_size
        ("0.5.10", PiecewiseFlags(), 1536),
        ("0.5.10", OFF, 0),
    ):
        got = default_mem_fraction(spec, H100, 1, 1, version, piecewise=flags)
        assert got.mem_fraction_static == _fraction(BASE_MIB + term), (version, flags)


def test_0_5_10_reserves_nothing_where_the_graphs_are_off():
    """_handle_piecewise_cuda_graph runs before the reserve: a DSA model (is_deepseek_nsa),
    speculative decoding, DP attention and PP > 1 reserve no term; before 0.5.10 the flag alone
    decides it."""
    dsa = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    g = h200.usable_memory_bytes / 2**20
    # 8 x H200: 512 + 12,288 + 512 x 2 + 8 / 8 x 1,024 = 14,848 MiB
    plain = round((g - 14848) / g, 3)
    assert default_mem_fraction(dsa, h200, 8, 1, "0.5.10").mem_fraction_static == plain
    assert default_mem_fraction(dsa, h200, 8, 1, "0.5.6.post2").mem_fraction_static == plain
    asked = default_mem_fraction(dsa, h200, 8, 1, "0.5.6.post2", piecewise=ON)
    assert asked.mem_fraction_static == round((g - 14848 - 1024) / g, 3)
    request = EngineRequest(engine="sglang", sglang_version="0.5.10", kv_cache_memory_bytes=None)
    llama = sglang_allocation(LLAMA_8B, H100, request).mem_fraction_static
    assert llama == _fraction(BASE_MIB + 58 * 8)
    spec = sglang_allocation(LLAMA_8B, H100, request._replace(speculative=True))
    assert spec.mem_fraction_static == _fraction(BASE_MIB)


def test_engine_takes_the_flags_by_release():
    base = ("engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "8k")
    on = run_json(*base, "--sglang-version", "0.5.7", "--enable-piecewise-cuda-graph")
    assert on["mem_fraction_static"] == _fraction(BASE_MIB + 1024)
    off = run_json(*base, "--sglang-version", "0.5.7")
    assert off["mem_fraction_static"] == _fraction(BASE_MIB)
    disabled = run_json(*base, "--sglang-version", "0.5.10", "--disable-piecewise-cuda-graph")
    assert disabled["mem_fraction_static"] == _fraction(BASE_MIB)


@pytest.mark.parametrize(
    "command, version, flag, message",
    [
        ("engine", "0.5.9", "--disable-piecewise-cuda-graph", "SGLang 0.5.9 has no such flag"),
        ("simulate", "0.5.9", "--disable-piecewise-cuda-graph", "SGLang 0.5.9 has no such flag"),
        ("engine", "0.5.3", "--enable-piecewise-cuda-graph", "SGLang 0.5.3 has no piecewise"),
        ("simulate", "0.5.3", "--enable-piecewise-cuda-graph", "SGLang 0.5.3 has no piecewise"),
    ],
)
def test_a_flag_the_release_lacks_one_line_exit_2(command, version, flag, message):
    if command == "engine":
        argv = ("engine", "llama-3.1-8b", "--engine", "sglang", "--sglang-version", version)
    else:
        argv = (
            *("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang"),
            *("--engine-version", version, "--num-prompts", "1"),
        )
    code, _, err = run_cli(*argv, flag)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_dsa_models_reserve_the_mla_term_from_0_5_13():
    """0.5.13 drops is_deepseek_nsa from the piecewise exclusion (model_config.py:330-331):
    DeepSeek-V3.2 then keeps its piecewise graphs and their MLA reserve (MLA_PIECEWISE_MIB,
    1,536 MiB) unless --disable-piecewise-cuda-graph; 0.5.12 reserves none either way."""
    dsa = load_model("deepseek-v3.2")
    h200 = load_profile("h200")
    g = h200.usable_memory_bytes / 2**20
    for version, term in (("0.5.12", 0), ("0.5.13", 1536)):
        on = default_mem_fraction(dsa, h200, 8, 1, version).mem_fraction_static
        off = default_mem_fraction(dsa, h200, 8, 1, version, piecewise=OFF).mem_fraction_static
        assert round((off - on) * g) == pytest.approx(term, abs=0.002 * g), version
