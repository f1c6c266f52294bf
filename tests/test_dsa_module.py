"""DeepSeek-V3.2's DSA module priced from the GPU's and engine's module tables
(kvplan/data/kernel_tables/dsa, scripts/derive_achieved.py --write-dsa), checked by hand against
aiconfigurator-core 0.12.0's rows."""

from __future__ import annotations

import copy

import pytest

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica

# aiconfigurator-core 0.12.0, b200_sxm, block-fp8 weights, fp8 KV cache, 16 heads on a rank
# (TP8), 2,048 tokens held, one layer, ms: sparse_attention/sglang/0.5.14/
# dsa_generation_module_perf (sglang_dsa_indexer_trtllm) and mla/vllm/0.24.0/
# mla_generation_module_perf (FLASHINFER_MLA)
SGLANG_DSA_MS = {1: 0.0687, 64: 0.1159}
VLLM_MLA_MS = {1: 0.0538, 64: 0.0784}


@pytest.fixture(scope="module")
def b200_sglang():
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    return build_replica(spec, load_profile("b200"), ServeOptions(engine="sglang", tp=8)).model


@pytest.mark.parametrize("decodes", [1, 64])
def test_a_decode_step_adds_the_sglang_dsa_module_over_the_mla_module(b200_sglang, decodes):
    """1 and 64 decodes at 2k tokens held on a B200, SGLang, TP8: each of the 61 DSA layers
    adds SGLang's DSA module less the MLA module at that batch (a row of the table: no
    interpolation), and the step's decode attention is the dense-MLA base plus that."""
    m = b200_sglang
    assert (m.dsa.kv, m.dsa.heads, m.dsa.layers, m.dsa.shape_timed) == ("fp8", 16.0, 61, True)
    assert m.untimed_parts == ()
    per_layer_s = (SGLANG_DSA_MS[decodes] - VLLM_MLA_MS[decodes]) * 1e-3
    assert m.dsa.delta_s("decode", decodes, 2048) == pytest.approx(61 * per_layer_s, abs=61e-7)
    bare = copy.copy(m)  # the same step without its smallest-kernel floor
    bare.floors = m.floors._replace(attention_s=0.0)
    base = copy.copy(bare)
    base.dsa = None
    with_module, _ = bare.decode_attention_s(decodes, decodes * 2048.0)
    without, _ = base.decode_attention_s(decodes, decodes * 2048.0)
    assert with_module - without == pytest.approx(61 * per_layer_s, abs=61e-7)
    floored, _ = m.decode_attention_s(decodes, decodes * 2048.0)
    assert floored == max(with_module, m.floors.attention_s)


def test_engines_read_their_own_modules_on_one_gpu(b200_sglang):
    """vLLM 0.24.0's DSA module on the B200 costs ~100 us a layer over its MLA module at one
    decode, SGLang 0.5.14's ~15: each engine's run reads its own."""
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    vllm = build_replica(spec, load_profile("b200"), ServeOptions(engine="vllm", tp=8)).model
    assert vllm.dsa.tables.engine_version == "0.24.0"
    assert b200_sglang.dsa.tables.engine_version == "0.5.14"
    sglang_s = b200_sglang.dsa.delta_s("decode", 1, 2048) / 61
    vllm_s = vllm.dsa.delta_s("decode", 1, 2048) / 61
    assert 5e-6 < sglang_s < 30e-6 < 60e-6 < vllm_s < 150e-6
