"""SGLang's own rules for gpt-oss (GptOssForCausalLM), pinned to its source (issue 34).

server_args.py _handle_model_specific_adjustments (0.5.3, 0.5.4.post2, 0.5.6, 0.5.7, 0.5.8,
0.5.9): with no backend given gpt-oss runs trtllm_mha on SM100, fa3 on SM90 and triton
elsewhere, and SGLang asserts one of its backends; disable_hybrid_swa_memory is set for it
unconditionally through 0.5.7 and, from 0.5.8, only where trtllm_mha runs. Its experts load
through triton_kernels below Blackwell (moe_runner_backend triton_kernel at EP 1), whose
process_weights_after_loading (layers/quantization/mxfp4.py) deletes the expert values but keeps
the checkpoint's scales beside their swizzled copies (a copy on Hopper) and holds the expert
biases in fp32."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.backends import Backends
from kvplan.engines.sglang import (
    GPT_OSS_HYBRID_SWA_FROM,
    HOPPER_SCALE_ROWS,
    MXFP4_BLOCK,
    _default_sglang_backend,
    sglang_allocation,
    sglang_rules,
)
from kvplan.errors import KvplanError
from kvplan.formulas.weights import part_bytes_per_param
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model


def _alloc(model="gpt-oss-120b", gpu="h100", version="0.5", **kw):
    request = EngineRequest(engine="sglang", sglang_version=version, max_model_len=8192, **kw)
    return sglang_allocation(load_model(model), load_profile(gpu), request)


@pytest.mark.parametrize(
    ("version", "patch"),
    [("0.5.3rc0", 3), ("0.5.4.post2", 4), ("v0.5.10.post1", 10), ("0.5", None), ("0.4", None)],
)
def test_the_patch_is_read_from_the_release_as_given(version, patch):
    assert sglang_rules(version).patch == patch


@pytest.mark.parametrize(
    ("gpu", "backend"), [("a100-80gb-sxm", "triton"), ("h100", "fa3"), ("b200", "trtllm_mha")]
)
def test_gpt_oss_runs_its_own_attention_backend(gpu, backend):
    spec = load_model("gpt-oss-20b")
    assert _default_sglang_backend(spec, load_profile(gpu), 1, None) == backend
    # a model without the rule takes the general pick: flashinfer on an A100
    other = load_model("llama-3.1-8b")
    assert _default_sglang_backend(other, load_profile("a100-80gb-sxm"), 1, None) == "flashinfer"


def test_sglang_refuses_a_backend_gpt_oss_does_not_run():
    with pytest.raises(KvplanError, match="GptOssForCausalLM requires one of"):
        _alloc(backends=Backends(attention_backend="flashinfer"))
    # fa4 joined the list in 0.5.4
    with pytest.raises(KvplanError, match="'fa4'"):
        _alloc(version="0.5.3", backends=Backends(attention_backend="fa4"))
    assert _alloc(version="0.5.4.post2", backends=Backends(attention_backend="fa4")).fits


@pytest.mark.parametrize(
    ("version", "gpu", "one_pool"),
    [
        ("0.5.3", "h100", True),
        ("0.5.4.post2", "a100-80gb-sxm", True),
        (f"0.5.{GPT_OSS_HYBRID_SWA_FROM - 1}", "h100", True),
        (f"0.5.{GPT_OSS_HYBRID_SWA_FROM}", "h100", False),  # fa3 keeps the hybrid pool
        ("0.5", "h100", False),
        ("0.5", "b200", True),  # trtllm_mha: still one pool in 0.5.9
    ],
)
def test_gpt_oss_keeps_one_pool_before_0_5_8_and_with_trtllm_mha(version, gpu, one_pool):
    alloc = _alloc(version=version, gpu=gpu)
    assert (alloc.swa_tokens is None) is one_pool
    assert ("sglang-swa-off" in {n.id for n in alloc.notes}) is one_pool
    if one_pool:  # every layer at full length: the pool over the whole cell, page by page
        assert (
            alloc.kv_cache_tokens
            == alloc.pool_bytes
            // alloc.profile_cell_size_bytes
            // (alloc.block_size)
            * alloc.block_size
        )
    else:  # the full pool is the larger: the windowed layers hold 0.8 of it
        assert alloc.kv_cache_tokens > alloc.pool_bytes // alloc.profile_cell_size_bytes


def test_a_model_without_the_rule_keeps_its_hybrid_pool_on_old_releases():
    alloc = _alloc(model="gemma-3-27b", version="0.5.3")
    assert alloc.swa_tokens is not None


def _kept(gpu: str, version: str = "0.5.3") -> float:
    """The bytes the allocation adds to the weights for triton_kernels (0: none)."""
    notes = {n.id: n for n in _alloc(gpu=gpu, version=version).notes}
    kept = notes.get("sglang-triton-kernels-kept")
    return 0 if kept is None else kept.value("kept_bytes")


def test_hopper_keeps_the_expert_scales_beside_their_swizzled_copies():
    spec = load_model("gpt-oss-120b")
    moe, hidden = spec.moe, spec.hidden_size
    width = moe.expert_intermediate_size  # 2,880 at TP 1: a multiple of 64, not padded
    # HopperMXScaleLayout: rows padded to 2 x 8 warps x 2 x 8 = 256, columns (H/32, I/32) even
    rows = HOPPER_SCALE_ROWS
    w13 = -(-2 * width // rows) * rows * (hidden // MXFP4_BLOCK)
    w2 = -(-hidden // rows) * rows * (width // MXFP4_BLOCK)
    biases = (2 * width + hidden) * (4 - part_bytes_per_param(spec, "mxfp4", "experts"))
    per_layer = moe.num_experts * (w13 + w2 + biases)
    assert _kept(gpu="h100") == pytest.approx(per_layer * moe.num_layers, abs=1)
    # Ampere's layout is a view of the scales: the fp32 biases alone
    ampere = moe.num_experts * biases * moe.num_layers
    assert _kept(gpu="a100-80gb-sxm") == pytest.approx(ampere, abs=1)
    # the scales alone are about 3.5 GiB on gpt-oss-120b: most of an H100's pool
    assert 3.4 < (per_layer - moe.num_experts * biases) * moe.num_layers / 2**30 < 3.6


def test_the_kept_bytes_are_in_the_weights_sglang_logs():
    # the same experts load on both (widths padded to 64 below Blackwell); Hopper adds its copies
    hopper, ampere = _alloc(version="0.5.3"), _alloc(version="0.5.3", gpu="a100-80gb-sxm")
    copies = _kept("h100") - _kept("a100-80gb-sxm")
    assert hopper.weights_bytes - ampere.weights_bytes == pytest.approx(copies, abs=1)
    assert _kept("b200") == 0  # FlashInfer's MXFP4 MoE on Blackwell


def test_another_moe_runner_is_refused_where_sglang_would_upcast_the_experts():
    with pytest.raises(KvplanError, match="upcasts gpt-oss-120b's mxfp4 experts to bf16"):
        _alloc(backends=Backends(moe_runner_backend="triton"))
    named = _alloc(backends=Backends(moe_runner_backend="triton_kernel"))
    assert "sglang-triton-kernels-kept" in {n.id for n in named.notes}


def test_gpt_oss_under_sglang_before_blackwell_says_its_experts_are_untimed():
    """sim-weak-gpt-oss-sglang: SGLang runs gpt-oss's MXFP4 experts through triton_kernels'
    matmul_ogs on SM80/SM90 (mxfp4.py), timed by no table; not on Blackwell, not under vLLM,
    not for another model."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.simulate.setup import ServeOptions
    from kvplan.simulate.workload import WorkloadSpec

    def notes(model, gpu, engine):
        request = SimulateRequest(
            serve=ServeOptions(engine=engine),
            workload=WorkloadSpec(num_prompts=4, input_len=64, output_len=4),
        )
        result = simulate(load_model(model, checkpoint=False), load_profile(gpu), request)
        return {n.id for n in result.notes}

    assert "sim-weak-gpt-oss-sglang" in notes("openai/gpt-oss-20b", "a100", "sglang")
    assert "sim-weak-gpt-oss-sglang" in notes("openai/gpt-oss-20b", "h100", "sglang")
    assert "sim-weak-gpt-oss-sglang" not in notes("openai/gpt-oss-20b", "b200", "sglang")
    assert "sim-weak-gpt-oss-sglang" not in notes("openai/gpt-oss-20b", "h100", "vllm")
    assert "sim-weak-gpt-oss-sglang" not in notes("Qwen/Qwen3-8B", "h100", "sglang")
