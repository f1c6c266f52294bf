"""SGLang's attention path for an MLA model that is not DeepSeek-V3 (issue 34): the backend it
picks per architecture, SM, cache dtype and release, and how the triton backend's MLA kernels are
priced from the rows of the kernels SGLang runs (the grouped decode's 16-head blocks; a prefill
with no cached tokens as MHA over the up-projected heads)."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.backends import Backends
from kvplan.engines.sglang import (
    SGLANG_TRITON_DECODE_HEAD_BLOCK,
    sglang_attention,
    sglang_decode_head_block,
)
from kvplan.formulas.batch_step import (
    decode_heads_call_s,
    equivalent_prompt_tokens,
    kernel_heads,
    mha_form_calls,
    prefill_call_s,
)
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import decode_calls_for, tables_for
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica


@pytest.fixture(scope="module")
def flash():
    """GLM-4.7-Flash: Glm4MoeLiteForCausalLM, MLA (kv_lora_rank 512, qk 192 + 64, v 256), 20
    query heads."""
    return load_model("zai-org/GLM-4.7-Flash", checkpoint=False)


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


@pytest.mark.parametrize(
    ("model", "gpu", "kv", "version", "flag", "backend", "page"),
    [
        # _handle_model_specific_adjustments sets trtllm_mla on SM100 for DeepseekV3ForCausalLM
        # (and Kimi-K2.5) only; any other MLA architecture falls to
        # _handle_attention_backend_compatibility's MLA branch: flashinfer on SM100, fa3 on SM90
        ("flash", "b200", "bf16", "0.5", None, "flashinfer", 1),
        ("flash", "b200", "fp8_e4m3", "0.5", None, "flashinfer", 1),
        ("flash", "h100", "bf16", "0.5", None, "fa3", 1),
        ("flash", "h200", "fp8_e4m3", "0.5", None, "fa3", 1),
        # "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to
        # triton."
        ("flash", "h100", "fp8_e5m2", "0.5", None, "triton", 1),
        ("dsv3", "b200", "bf16", "0.5", None, "trtllm_mla", 64),
        ("dsv3", "b200", "fp8_e4m3", "0.5", None, "trtllm_mla", 64),
        ("dsv3", "h200", "bf16", "0.5", None, "fa3", 1),
        # the cookbook's GLM-4.7-Flash runs name triton: it keeps page 1 and CUDA graphs
        ("flash", "b200", "bf16", "0.5", "triton", "triton", 1),
        # release 0.4: the default is not modelled (page 1), a named backend is the one run
        ("flash", "b200", "bf16", "0.4", None, None, 1),
        ("flash", "b200", "bf16", "0.4", "triton", "triton", 1),
    ],
)
def test_sglang_picks_the_mla_backend_by_architecture_sm_cache_and_release(
    request, model, gpu, kv, version, flag, backend, page
):
    spec = request.getfixturevalue(model)
    engine_request = EngineRequest(engine="sglang", backends=Backends(attention_backend=flag))
    picked = sglang_attention(spec, load_profile(gpu), engine_request, version, kv)
    assert (picked.prefill, picked.decode) == (backend, backend)
    assert picked.page_size == page
    assert picked.cuda_graph


def test_only_the_triton_mla_decode_runs_whole_blocks_of_heads():
    assert sglang_decode_head_block("triton", True) == SGLANG_TRITON_DECODE_HEAD_BLOCK == 16
    assert sglang_decode_head_block("triton", False) == 1  # GQA: the rows pool the heads
    assert sglang_decode_head_block("flashinfer", True) == 1
    assert sglang_decode_head_block("trtllm_mla", True) == 1
    # cdiv(heads, 16) programs of 16 heads each: 20 heads are two blocks, as 32 are
    assert [kernel_heads(h, 16) for h in (8, 16, 20, 32, 33)] == [16, 16, 32, 32, 48]
    assert kernel_heads(20, 1) == 20


def test_glm_flash_decode_under_triton_reads_the_rows_of_two_head_blocks(flash):
    """At 20 heads on a rank the triton kernel does 32 heads' work: the step's decode attention
    is the rows' call at 32 heads (not between the 16- and 32-head rows), where they time it."""
    b200 = load_profile("b200")
    triton = ServeOptions(engine="sglang", backends=Backends(attention_backend="triton"))
    model = build_replica(flash, b200, triton).model
    assert model.decode_head_block == {True: 16}
    timing = tables_for(b200, "sglang").attention_backends[("mla", "triton")]
    calls = decode_calls_for(timing, "bfloat16")
    layers = flash.num_layers
    context = 8192
    kv_bytes = (512 + 64) * 2 * context  # one sequence's latent, one layer
    seconds, _ = model._decode_attention(1, context, max, min)
    at_32 = layers * decode_heads_call_s(calls, 32, 1, kv_bytes)
    at_20 = layers * decode_heads_call_s(calls, 20, 1, kv_bytes)
    assert at_32 > at_20
    assert seconds == pytest.approx(at_32, rel=0.02)
    # the default backend (flashinfer: no MLA rows on the B200) reads no block
    plain = build_replica(flash, b200, ServeOptions(engine="sglang")).model
    assert plain.decode_head_block in ({}, {True: 1})


def test_glm_flash_prefill_under_triton_runs_as_mha_without_cached_tokens(flash):
    """handle_attention_triton: a prefill with no cached prefix runs MLA as MHA over the 20
    up-projected heads of 256 x 256, the kernel the B200's own triton MHA rows time at that head
    shape; a chunk over cached tokens runs the absorbed latent form (not those rows)."""
    b200 = load_profile("b200")
    triton = ServeOptions(engine="sglang", backends=Backends(attention_backend="triton"))
    model = build_replica(flash, b200, triton).model
    (group,) = [g for g in model.groups if g.layers]
    assert group.mla and group.head_shape == "256x256"
    mha = tables_for(b200, "sglang").attention_backends[("mha", "triton")]
    assert mha.borrowed_from == ""  # the B200's own rows
    calls = mha.prefill_calls["bfloat16"]["256x256"]
    assert model.prefill_as_mha_calls(group, ((4096, 0),)) == (calls,)
    assert model.prefill_as_mha_calls(group, ((4096, 0), (512, 1024))) is None
    fresh = model.prefill_chunks_attention_s(((4096, 0),))
    assert fresh == pytest.approx(group.layers * prefill_call_s(calls, 20, 4096), rel=0.02)
    # the same keys over a cached prefix: not the MHA rows' time
    cached = model.prefill_chunks_attention_s(((2048, 2048),))
    assert cached != pytest.approx(fresh, rel=0.02)
    # no triton named: SGLang's own pick (flashinfer) runs it as MHA too, but its MHA rows
    # time neither 256x256 nor a pair of shapes around it: none read
    plain = build_replica(flash, b200, ServeOptions(engine="sglang")).model
    (group,) = [g for g in plain.groups if g.layers]
    assert "256x256" not in plain.mla_prefill_as_mha_calls
    assert plain.prefill_as_mha_calls(group, ((4096, 0),)) is None


def test_the_mha_form_reads_16_bit_rows_whatever_the_cache_dtype(flash):
    """forward_normal: the MHA form's keys and values come from kv_b_proj on the fresh latent
    (attn_mha(..., save_kv_cache=False)), not from the cache: an fp8 cache's fresh prefill
    reads the 16-bit MHA rows, not the rows that time an fp8 cache."""
    b200 = load_profile("b200")
    mha = tables_for(b200, "sglang").attention_backends[("mha", "triton")]
    assert mha.prefill_calls["fp8"]["256x256"] != mha.prefill_calls["bfloat16"]["256x256"]
    fp8 = ServeOptions(
        engine="sglang", kv_cache_dtype="fp8_e4m3", backends=Backends(attention_backend="triton")
    )
    model = build_replica(flash, b200, fp8).model
    assert model.mla_prefill_as_mha_calls == mha.prefill_calls["bfloat16"]


def test_mha_form_calls_read_the_shape_or_the_two_square_shapes_around_it():
    a, b, c = ((16, ((512, 1e-5),)),), ((16, ((512, 2e-5),)),), ((16, ((512, 3e-5),)),)
    assert mha_form_calls({"192x128": a, "192x192": b, "128x128": c}, "192x128") == (a,)
    assert mha_form_calls({"192x192": b, "128x128": c}, "192x128") == (b, c)
    assert mha_form_calls({"192x192": b}, "192x128") == ()  # one side of the pair only
    assert mha_form_calls({"192x192": b, "128x128": c}, "256x256") == ()


def test_deepseek_fresh_prefill_on_hopper_fa3_runs_the_mha_form_not_the_latent_rows(dsv3):
    """collect_mla.py times FA3's MLA context rows in the absorbed latent form (576-wide q and
    k, 512-wide v, one KV head): keyed 576x512, they time DeepSeek's chunks over cached tokens;
    a prefill with no cached tokens runs MHA over the 128 up-projected heads of 192 x 128
    (_handle_attention_backend), between fa3's MHA rows at 192x192 and 128x128."""
    profile = load_profile("h200")
    tables = tables_for(profile, "sglang")
    mla = tables.attention_backends[("mla", "fa3")]
    mha = tables.attention_backends[("mha", "fa3")]
    assert set(mla.prefill_calls["bfloat16"]) == {"576x512"}
    model = build_replica(dsv3, profile, ServeOptions(engine="sglang", tp=8)).model
    (group,) = [g for g in model.groups if g.layers and g.mla]
    assert (group.head_shape, group.latent_shape, group.heads) == ("192x128", "576x512", 16.0)
    wide, narrow = (
        mha.prefill_calls["bfloat16"]["192x192"],
        mha.prefill_calls["bfloat16"]["128x128"],
    )
    assert model.prefill_as_mha_calls(group, ((4096, 0),)) == (wide, narrow)
    fresh = model.prefill_chunks_attention_s(((4096, 0),))
    mean = (prefill_call_s(wide, 16, 4096) + prefill_call_s(narrow, 16, 4096)) / 2
    assert fresh == pytest.approx(group.layers * mean, rel=0.02)
    latent = mla.prefill_calls["bfloat16"]["576x512"]
    assert fresh < group.layers * prefill_call_s(latent, 16, 4096) / 2  # the latent form's ~3x
    # a step within the piecewise CUDA graphs (2,048 tokens for an MLA backend from 0.5.10):
    # is_in_piecewise_cuda_graph() dispatches the latent form, its rows time it
    assert model.prefill_graph_max_tokens == 2048
    assert model.prefill_as_mha_calls(group, ((1024, 0), (1024, 0))) is None
    assert model.prefill_as_mha_calls(group, ((1024, 0), (1025, 0))) == (wide, narrow)
    small = model.prefill_chunks_attention_s(((2048, 0),))
    assert small == pytest.approx(group.layers * prefill_call_s(latent, 16, 2048), rel=0.02)
    # a chunk over cached tokens: the latent rows at the prompt of as many keys
    assert model.prefill_fractions_why(group) == ""
    assert model.prefill_calls_of(group) == latent
    keys = (4096 * 4097 - 2048 * 2049) / 2
    cached = model.prefill_chunks_attention_s(((2048, 2048),))
    expected = group.layers * prefill_call_s(latent, 16, equivalent_prompt_tokens(keys))
    assert cached == pytest.approx(expected, rel=0.05)


def test_trtllm_mla_rows_time_the_mha_form_deepseek_reads_them_at_its_head_shape(dsv3):
    """collect_mla.py times trtllm_mla's context rows in the non-absorbed MHA form (192 x 128):
    keyed so, DeepSeek's group reads them at its own head shape, cached tokens or not."""
    b200 = load_profile("b200")
    mla = tables_for(b200, "sglang").attention_backends[("mla", "trtllm_mla")]
    assert set(mla.prefill_calls["bfloat16"]) == {"192x128"}
    model = build_replica(dsv3, b200, ServeOptions(engine="sglang", tp=8)).model
    (group,) = [g for g in model.groups if g.layers and g.mla]
    assert model.prefill_as_mha_calls(group, ((4096, 0),)) is None  # no trtllm_mla MHA rows
    assert model.prefill_calls_of(group) == mla.prefill_calls["bfloat16"]["192x128"]
