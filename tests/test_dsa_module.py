"""DeepSeek-V3.2's (and GLM-5's) DSA module priced from the GPU's and engine's module tables
(kvplan/data/kernel_tables/dsa, scripts/derive_achieved.py --write-dsa), checked by hand against
aiconfigurator-core 0.12.0's rows."""

from __future__ import annotations

import copy
import math

import pytest

from kvplan.formulas.batch_step import decode_rows, dsa_grids_for, dsa_layer_base_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import tables_for
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica

# aiconfigurator-core 0.12.0, b200_sxm, block-fp8 weights, fp8 KV cache, 16 heads on a rank
# (TP8), 2,048 tokens held, one layer, ms: sparse_attention/sglang/0.5.14/
# dsa_generation_module_perf (sglang_dsa_indexer_trtllm)
SGLANG_DSA_MS = {1: 0.0687, 64: 0.1159}
# kvplan/data/kernel_tables/b200_sxm.sglang.0.5.14.json, gemm "fp8" at 1 token, us: q_b (3,072
# x 1,536), o (7,168 x 2,048), and the fused q_a|kv_a's (2,112 x 7,168) two neighbours in n;
# floors_s gemm_mla_bmm (each absorbed BMM of a block-fp8 checkpoint, s)
GEMM_1_US = {"q_b": 7.67, "o": 8.21, "n2048": 14.7, "n2560": 17.5}
BMM_FLOOR_S = 3.878e-6


@pytest.fixture(scope="module")
def b200_sglang():
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    return build_replica(spec, load_profile("b200"), ServeOptions(engine="sglang", tp=8)).model


def test_a_dsa_layer_base_is_its_projections_bmms_and_attention_by_hand(b200_sglang):
    """What a B200 SGLang TP8 step charges one DeepSeek-V3.2 layer before the DSA delta, at 1
    decode of 2,048 tokens: the three MLA projections from the GEMM table (q_a|kv_a's 2,112 rows
    bilinear in log n between 2,048 and 2,560), two absorbed BMMs at their floor, and the decode
    attention the step prices without the module."""
    m = b200_sglang
    w = math.log(2112 / 2048) / math.log(2560 / 2048)
    q_a = GEMM_1_US["n2048"] + w * (GEMM_1_US["n2560"] - GEMM_1_US["n2048"])
    gemm_s = (q_a + GEMM_1_US["q_b"] + GEMM_1_US["o"]) * 1e-6
    bare = copy.copy(m)
    bare.dsa = None
    attention_s = bare._decode_attention(1, 2048.0, max, min)[0] / 61
    expected = gemm_s + 2 * BMM_FLOOR_S + attention_s
    assert dsa_layer_base_s(m, "decode", 1, 2048) == pytest.approx(expected, abs=1e-9)


def test_the_step_runs_each_projection_once_and_no_indexer_matrix(b200_sglang):
    """No double charge: the step's GEMM calls hold each DSA layer's three MLA projections once
    (61 layers) and none of the indexer's matrices (wq_b 8,192 x 1,536, wk 128 x 7,168,
    weights_proj 64 x 7,168: the module's, so the delta's)."""
    m = b200_sglang
    times = {}
    for c in m.gemm_calls:
        times[(c.n, c.k)] = times.get((c.n, c.k), 0) + c.times
    for c in m.dsa_projection_calls:
        assert times[(c.n, c.k)] == 61
    assert not {(8192, 1536), (128, 7168), (64, 7168)} & set(times)


@pytest.mark.parametrize("decodes", [1, 64])
def test_a_decode_step_charges_the_sglang_dsa_module(b200_sglang, decodes):
    """1 and 64 decodes at 2k tokens held on a B200, SGLang, TP8: what the step charges each of
    the 61 DSA layers (its base, dsa_layer_base_s, plus the delta, a row of the table: no
    interpolation) is SGLang's DSA module's row (0.05 us: the file's rounding), and the step's
    decode attention is the base's plus that delta."""
    m = b200_sglang
    assert (m.dsa.kv, m.dsa.heads, m.dsa.layers, m.dsa.shape_timed) == ("fp8", 16.0, 61, True)
    assert m.dsa.tables.baseline == "kvplan_layer"
    # SGLang 0.5.9's fp8 decode kernel is flashmla_kv, the grids time 0.5.14's trtllm
    assert m.untimed_parts == (
        "the DSA module's decode under flashmla_kv (the tables time trtllm)",
    )
    delta_s = m.dsa.delta_s("decode", decodes, 2048)
    charged_s = dsa_layer_base_s(m, "decode", decodes, 2048) + delta_s / 61
    assert charged_s == pytest.approx(SGLANG_DSA_MS[decodes] * 1e-3, abs=0.051e-6)
    bare = copy.copy(m)  # the same step without its smallest-kernel floor
    bare.floors = m.floors._replace(attention_s=0.0)
    base = copy.copy(bare)
    base.dsa = None
    with_module, _ = bare.decode_attention_s(decodes, decodes * 2048.0)
    without, _ = base.decode_attention_s(decodes, decodes * 2048.0)
    assert with_module - without == pytest.approx(delta_s, rel=1e-9)
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


# aiconfigurator-core 0.12.0, h200_sxm, block-fp8 weights, bf16 KV cache, 16 heads on a rank
# (TP8), 2,048 tokens held, one layer, ms: sparse_attention/sglang/0.5.14/
# dsa_generation_module_perf (sglang_dsa_indexer_fa3)
H200_SGLANG_DSA_MS = {1: 0.0771, 16: 0.1013}


@pytest.mark.parametrize("decodes", [1, 16])
def test_an_h200_sglang_step_charges_its_dsa_module_not_less(decodes):
    """Issue 34: on an H200 vLLM 0.24.0's MLA module is slower than SGLang's whole DSA module
    (at 1 and 16 decodes of short contexts), so subtracting it took DSA to its floor. Against
    kvplan's own layer the module costs more, and the step charges the module (77.1 us a layer
    at 1 decode of 2,048 tokens, 101.3 at 16)."""
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    m = build_replica(spec, load_profile("h200"), ServeOptions(engine="sglang", tp=8)).model
    assert (m.dsa.kv, m.dsa.heads) == ("bfloat16", 16.0)
    delta_s = m.dsa.delta_s("decode", decodes, 2048) / 61
    assert delta_s > 0
    charged_s = dsa_layer_base_s(m, "decode", decodes, 2048) + delta_s
    assert charged_s == pytest.approx(H200_SGLANG_DSA_MS[decodes] * 1e-3, abs=0.051e-6)


@pytest.mark.parametrize(("gpu", "engine"), [("b200", "sglang"), ("h200", "vllm")])
@pytest.mark.parametrize(("decodes", "context"), [(1, 300), (16, 2048), (16, 8192)])
def test_a_verification_runs_a_dsa_row_per_draft_token(gpu, engine, decodes, context):
    """SGLang's nsa backend runs a target verify of 4 draft tokens a sequence as 4 one-token
    decode rows (cu_seqlens_q = arange(0, bs x 4 + 1), the page table repeated per token): the
    indexer, its top-k and the sparse MLA once a token. So 16 sequences verifying 4 tokens
    each cost the DSA attention of 64 one-token decodes (the module's row at 64, the base's
    latent read 64 times), not 16 decodes' with 4x the FLOPs."""
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    m = build_replica(spec, load_profile(gpu), ServeOptions(engine=engine, tp=8)).model
    assert decode_rows(decodes, 4) == 4 * decodes
    assert all(g.dsa_module for g in m.groups)  # dense MLA under the module's delta
    verify = m.decode_attention_s(decodes, decodes * float(context), 4)[0]
    rows = m.decode_attention_s(4 * decodes, 4 * decodes * float(context), 1)[0]
    assert verify == pytest.approx(rows, rel=1e-12)
    assert verify > m.decode_attention_s(decodes, decodes * float(context), 1)[0]


def test_a_dense_mla_verification_still_reads_the_latents_once():
    """Without DSA (DeepSeek-R1's MLA) a verification's 4 tokens read each sequence's cache
    once and multiply its FLOPs: fewer seconds than 4x the one-token decodes."""
    spec = load_model("deepseek-ai/DeepSeek-R1-0528", checkpoint=False)
    m = build_replica(spec, load_profile("b200"), ServeOptions(engine="sglang", tp=8)).model
    bare = copy.copy(m)
    bare.floors = m.floors._replace(attention_s=0.0)
    assert [g.dsa_module or bool(g.attended_topk) for g in bare.groups] == [False]
    _, one_read = bare._decode_attention(16, 16 * 8192.0, max, min, 1)
    _, verify_read = bare._decode_attention(16, 16 * 8192.0, max, min, 4)
    assert verify_read == pytest.approx(one_read, rel=1e-12)


# aiconfigurator-core 0.12.0, h200_sxm, zai-org/GLM-5-FP8, block-fp8 weights, bf16 KV cache, 8
# heads on a rank (TP8), 2,048 tokens held, one layer, ms: sparse_attention/sglang/0.5.14/
# dsa_generation_module_perf (sglang_dsa_indexer_fa3)
H200_SGLANG_GLM5_DSA_MS = {1: 0.0732, 16: 0.0970}


@pytest.mark.parametrize("decodes", [1, 16])
def test_glm5_on_sglang_charges_its_own_dsa_module_row(decodes):
    """GLM-5 (64 heads of 256 wide, q_lora_rank 2,048, a 32-head indexer) on an H200, SGLang,
    TP8: the step reads the GLM-5-FP8 grid of the file (its shape is the config's), so each of
    its 78 DSA layers costs GLM-5's module row (73.2 us at 1 decode of 2,048 tokens, 97.0 at
    16), not DeepSeek-V3.2's (77.1, 101.3)."""
    spec = load_model("zai-org/GLM-5-FP8", checkpoint=False)
    m = build_replica(spec, load_profile("h200"), ServeOptions(engine="sglang", tp=8)).model
    assert (m.dsa.kv, m.dsa.heads, m.dsa.layers, m.dsa.shape_timed) == ("bfloat16", 8.0, 78, True)
    assert m.dsa.tables.shape["indexer_num_heads"] == 32
    delta_s = m.dsa.delta_s("decode", decodes, 2048) / 78
    charged_s = dsa_layer_base_s(m, "decode", decodes, 2048) + delta_s
    assert charged_s == pytest.approx(H200_SGLANG_GLM5_DSA_MS[decodes] * 1e-3, abs=0.051e-6)
    assert charged_s != pytest.approx(H200_SGLANG_DSA_MS[decodes] * 1e-3, abs=1e-6)


def test_deepseek_v32_reads_the_stand_in_grid_and_an_unknown_shape_falls_back():
    """The file's top-level grid (DeepSeek-V3.2's) stays V3.2's; a DSA model whose config
    differs from every grid's shape in one field (GLM-5 with a 1,024 top-k) reads it as the
    stand-in, named untimed, rather than GLM-5's grid."""
    h200 = load_profile("h200")
    options = ServeOptions(engine="sglang", tp=8)
    v32 = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    grids = tables_for(h200, "sglang").dsa_delta_us
    assert grids.others and dsa_grids_for(v32, grids) is grids
    m = build_replica(v32, h200, options).model
    assert m.dsa.tables is grids and m.dsa.shape_timed
    glm5 = load_model("zai-org/GLM-5-FP8", checkpoint=False)
    assert dsa_grids_for(glm5, grids) in grids.others
    odd = glm5._replace(
        layers=tuple(
            layer._replace(attention=layer.attention._replace(indexer_topk=1024))
            if layer.attention is not None and layer.attention.indexer_head_dim
            else layer
            for layer in glm5.layers
        )
    )
    assert dsa_grids_for(odd, grids) is grids
    m = build_replica(odd, h200, options).model
    assert m.dsa.tables is grids and not m.dsa.shape_timed
    assert m.untimed_parts == ("the DSA module at this model's shape (DeepSeek-V3.2's stands in)",)


# aiconfigurator@095f58a5 (git), h200_sxm, block-fp8 weights, bf16 KV cache, 16 heads on a rank
# (TP8), 2,048 tokens held, one layer, ms: sparse_attention/sglang/0.5.10/
# dsa_generation_module_perf (dsa_nsa: SGLang 0.5.10's own NSA kernels)
H200_SGLANG_0_5_10_DSA_MS = {1: 0.0956, 16: 0.1131}


@pytest.mark.parametrize("decodes", [1, 16])
def test_an_older_h200_sglang_run_charges_its_nearest_releases_dsa_module(decodes):
    """A SGLang 0.5.9 run on an H200 reads 0.5.9's tables and the DSA module rows of 0.5.10,
    the nearest release that timed them (0.5.9 did not on this GPU), less the layer priced on
    0.5.9's tables: the step charges 0.5.10's row (95.6 us at 1 decode of 2,048 tokens, 113.1
    at 16), not 0.5.14's (77.1, 101.3), and the tables note says whose modules."""
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    options = ServeOptions(engine="sglang", tp=8, sglang_version="0.5.9")
    m = build_replica(spec, load_profile("h200"), options).model
    assert (m.dsa.kv, m.dsa.heads) == ("bfloat16", 16.0)
    assert m.dsa.tables.engine_version == "0.5.10"
    charged_s = (
        dsa_layer_base_s(m, "decode", decodes, 2048) + m.dsa.delta_s("decode", decodes, 2048) / 61
    )
    assert charged_s == pytest.approx(H200_SGLANG_0_5_10_DSA_MS[decodes] * 1e-3, abs=0.051e-6)
    assert charged_s > H200_SGLANG_DSA_MS[decodes] * 1e-3
    tables = tables_for(load_profile("h200"), "sglang", "0.5.9")
    assert tables.grid_versions()["dsa"] == "0.5.10"
    assert "DSA modules from SGLang 0.5.10's" in tables.version_words(("dsa",))


def _row(latency_ms: float, batch: int = 16, length: int = 2048, gemm_type: str = "fp8_block"):
    return {
        "gemm_type": gemm_type,
        "num_heads": 16,
        "kv_cache_dtype": "bfloat16",
        "batch_size": batch,
        "step": length,
        "isl": 1,
        "latency": latency_ms,
    }


def test_a_dsa_module_row_off_every_other_release_or_under_its_floor_is_refused():
    """derive_achieved.dsa_sane_rows: a row 3x+ off the same cell at every other release that
    timed it is refused, one that some release agrees with is kept, one faster than its
    projections' datasheet floor is refused, and the refusals are counted in words."""
    from helpers import load_script

    derive = load_script("derive_achieved")

    def floor_s(phase, heads, batch, length):
        return 20e-6  # the projections' least time at every cell

    rows = [_row(0.400, batch=16), _row(0.100, batch=32), _row(0.015, batch=64)]
    others = {
        "0.5.14": [_row(0.110, batch=16), _row(0.105, batch=32), _row(0.016, batch=64)],
        "0.5.12": [_row(0.390, batch=16)],
    }
    kept, why = derive.dsa_sane_rows(rows, others, floor_s, "decode")
    assert [r["batch_size"] for r in kept] == [16, 32]  # 0.5.12 agrees at 16: kept
    assert len(why) == 1 and why[0].startswith("1 rows under the projections' datasheet floor")
    kept, why = derive.dsa_sane_rows(rows, {"0.5.14": others["0.5.14"]}, floor_s, "decode")
    assert [r["batch_size"] for r in kept] == [32]
    assert why[1].startswith("1 rows 3x+ off every other release's")
    bf16 = [_row(0.015, batch=64, gemm_type="bfloat16")]  # no floor drawn for bf16 weights
    assert derive.dsa_sane_rows(bf16, {}, floor_s, "decode")[0] == bf16


@pytest.mark.parametrize("version", ["0.5.6.post2", "0.5.9", "0.5.14"])
def test_a_run_on_other_tables_than_its_dsa_files_baseline_names_the_module_untimed(version):
    """An SGLang DSA file holds the module rows less the layer priced on one release's tables
    (its name's: dsa/h200_sxm.sglang.0.5.9.json less 0.5.9's). A 0.5.6.post2 run on an H200
    reads that file (the nearest) but prices its layer on 0.5.6.post2's tables, which price no
    DSA layer from GEMM rows (dsa_layer_base_s None; derive_achieved --at-version 0.5.6.post2:
    "not written ... not priced"), so base + delta is not the module row: the step names the
    module untimed (the "partial" interval class). A run of the file's own release does not."""
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    options = ServeOptions(engine="sglang", tp=8, sglang_version=version)
    m = build_replica(spec, load_profile("h200"), options).model
    words = [p for p in m.untimed_parts if "drawn on" in p]
    if version == "0.5.6.post2":
        assert dsa_layer_base_s(m, "decode", 16, 2048) is None
        assert words == [
            "the DSA module over this run's layer (its rows were drawn on the layer priced on "
            "SGLang 0.5.9's tables, not this run's)"
        ]
    else:
        assert dsa_layer_base_s(m, "decode", 16, 2048) is not None
        assert words == []
