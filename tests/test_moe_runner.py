"""SGLang's fused-MoE runner by release (engines.moe_backend.sglang_moe_runner) and the moe/
rows of that runner (kernel_tables.moe_runner_rows): aiconfigurator timed one runner per format
and release, SGLang runs the one its server_args resolve."""

from __future__ import annotations

import json

import pytest

from kvplan.engines.moe_backend import (
    SGLANG_RUNNER_OF_SOURCE,
    SGLANG_SM100_TRTLLM_RULES,
    sglang_moe_runner,
)
from kvplan.engines.sglang import sglang_rules
from kvplan.formulas.batch_step import moe_kernel_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import MOE_FOLDER, moe_runner_rows
from kvplan.inputs.sources import load_model


@pytest.mark.parametrize(
    "patch, model_type, wdtype, generation, given, ep, runner",
    [
        # DeepSeek-V3/R1 block FP8 on SM100: flashinfer_trtllm from PR #11816 (0.5.4)
        (6, "deepseek_v3", "fp8", 10, None, 1, "flashinfer_trtllm"),
        (3, "deepseek_v3", "fp8", 10, None, 1, "triton"),
        (None, "deepseek_v3", "fp8", 10, None, 1, "flashinfer_trtllm"),
        (6, "deepseek_v3", "fp8", 9, None, 1, "triton"),  # Hopper: auto, Triton's fused MoE
        (6, "deepseek_v3", "fp8", 12, None, 1, "triton"),  # SM120 is not is_sm100_supported
        (6, "deepseek_v3", "nvfp4", 10, None, 1, "flashinfer_trtllm"),
        (6, "kimi_k2", "fp8", 10, None, 1, "flashinfer_trtllm"),  # DeepseekV3ForCausalLM
        (14, "deepseek_v3", "fp8", 10, "triton", 1, "triton"),  # named: as named
        (14, "deepseek_v3", "fp8", 10, "auto", 1, "flashinfer_trtllm"),
        # Kimi thinking int4 on SM100: flashinfer_trtllm from 0.5.14, Marlin before and elsewhere
        (9, "kimi_k2", "int4-g32-sym", 10, None, 1, "marlin"),
        (14, "kimi_k2", "int4-g32-sym", 10, None, 1, "flashinfer_trtllm"),
        (14, "kimi_k2", "int4-g32-sym", 9, None, 1, "marlin"),
        # Qwen3 MoE: FP8 from PR #13489 (0.5.6), bf16 from the 0.5.8 line
        (5, "qwen3_moe", "fp8", 10, None, 1, "triton"),
        (6, "qwen3_moe", "fp8", 10, None, 1, "flashinfer_trtllm"),
        (6, "qwen3_moe", "bf16", 10, None, 1, "triton"),
        (9, "qwen3_moe", "bf16", 10, None, 1, "flashinfer_trtllm"),
        (9, "qwen3_moe", "bf16", 9, None, 1, "triton"),
        (9, "qwen3_next", "bf16", 10, None, 1, "flashinfer_trtllm"),
        # no model rule: auto leaves it to the weights' method
        (9, "minimax_m2", "fp8", 10, None, 1, "triton"),
        (9, "glm4_moe", "fp8", 10, None, 1, "triton"),
        (9, "glm4_moe", "nvfp4", 10, None, 1, "flashinfer_trtllm"),
        (6, "glm4_moe", "nvfp4", 10, None, 1, "cutlass"),
        (9, "nemotron_h", "bf16", 10, None, 1, "triton"),
        (9, "llama4", "fp8", 10, None, 1, "flashinfer_trtllm"),
        # gpt-oss MXFP4: FlashInfer's MXFP4 MoE on Blackwell, triton_kernels elsewhere at EP 1
        (9, "gpt_oss", "mxfp4", 10, None, 1, "flashinfer_mxfp4"),
        (9, "gpt_oss", "mxfp4", 12, None, 1, "flashinfer_mxfp4"),
        (9, "gpt_oss", "mxfp4", 9, None, 1, "triton_kernel"),
        (9, "gpt_oss", "mxfp4", 9, None, 2, "triton"),
    ],
)
def test_the_runner_sglang_resolves(patch, model_type, wdtype, generation, given, ep, runner):
    rules = sglang_rules("0.5" if patch is None else f"0.5.{patch}")
    assert sglang_moe_runner(rules, model_type, wdtype, generation, given, ep) == runner


@pytest.mark.parametrize(
    "model_type, wdtype, first",
    [(types[0], formats[0], first) for types, formats, first in SGLANG_SM100_TRTLLM_RULES],
)
def test_a_0_4_release_never_passes_a_0_5_patch_rule(model_type, wdtype, first):
    """Each SM100 rule (SGLANG_SM100_TRTLLM_RULES) runs at its own 0.5 patch, never at the
    0.4 release of the same patch number: 0.4's patches are not 0.5's."""
    patch = max(first, 9)
    new = sglang_moe_runner(sglang_rules(f"0.5.{patch}"), model_type, wdtype, 10)
    old = sglang_moe_runner(sglang_rules(f"0.4.{patch}"), model_type, wdtype, 10)
    assert new == "flashinfer_trtllm" and old != new


def _moe_curve(model: str, version: str, weights: str = "auto", runner: str | None = None):
    from kvplan.engines.backends import Backends
    from kvplan.simulate.setup import ServeOptions, step_model

    options = ServeOptions(
        tp=8,
        engine="sglang",
        sglang_version=version,
        backends=Backends(moe_runner_backend=runner),
    )
    notes: list = []
    model_ = step_model(load_model(model), load_profile("b200"), options, weights, 512, notes)[0]
    return model_, next(n for n in notes if n.id == "sim-kernel-tables")


def _file(version: str) -> dict:
    return json.loads((MOE_FOLDER / f"b200_sxm.sglang.{version}.json").read_text())


def _sources(runner: str) -> set:
    return {src for src, r in SGLANG_RUNNER_OF_SOURCE.items() if r == runner}


DS_KEY = "moe_fp8_7168x2048_256x8_tp8_ep1"  # DeepSeek-R1's experts, TP 8


def test_deepseek_r1_fp8_on_b200_at_0_5_6_reads_flashinfer_trtllm_rows():
    """A 0.5.6.post1 run reads B200's 0.5.9 tables, whose block-FP8 rows are triton's; SGLang
    runs flashinfer_trtllm there (PR #11816), timed by 0.5.14's table: the step reads those."""
    old, new = _file("0.5.9"), _file("0.5.14")
    assert set(old["runners"][DS_KEY]["runs"]) <= _sources("triton")
    assert set(new["runners"][DS_KEY]["runs"]) <= _sources("flashinfer_trtllm")
    model, note = _moe_curve("deepseek-r1", "0.5.6.post1")
    assert note.value("tables") == "B200, SGLang 0.5.9"
    one = new["us"][DS_KEY][new["tokens"].index(1)] * 1e-6
    assert moe_kernel_s(model.moe_curve, 1) == pytest.approx(one, rel=1e-9)
    assert one < old["us"][DS_KEY][old["tokens"].index(1)] * 1e-6
    assert "the fused MoE as flashinfer_trtllm runs it from SGLang 0.5.14's rows" in note.value(
        "releases"
    )


def test_qwen3_bf16_on_b200_at_0_5_6_still_reads_triton_rows():
    """Qwen3-235B bf16: SGLang 0.5.6 had no bf16 flashinfer_trtllm rule (triton), and the
    0.5.9 table its run reads timed triton: those rows, and no runner words in the note."""
    key = "moe_bf16_4096x1536_128x8_tp8_ep1"
    rows = _file("0.5.9")
    assert set(rows["runners"][key]["runs"]) <= _sources("triton")
    model, note = _moe_curve("qwen3-235b-a22b", "0.5.6", "bf16")
    assert moe_kernel_s(model.moe_curve, 1) == pytest.approx(
        rows["us"][key][rows["tokens"].index(1)] * 1e-6, rel=1e-9
    )
    assert "runs it" not in (note.value("releases") or "")


def test_a_named_triton_runner_reads_triton_rows_where_a_release_timed_them():
    """--moe-runner-backend triton on DeepSeek-R1 at 0.5.14: 0.5.14's table timed this shape
    under flashinfer_trtllm only; the nearest release that timed triton is read, and the MoE
    is no longer an untimed part."""
    timed = [
        v
        for v in ("0.5.14", "0.5.9")
        if DS_KEY in _file(v)["runners"]
        and (
            set(_file(v)["runners"][DS_KEY]["runs"]) <= _sources("triton")
            or _sources("triton") & set(_file(v)["runners"][DS_KEY].get("us", {}))
        )
    ]
    assert timed and timed[0] != "0.5.14"
    rows = _file(timed[0])
    model, note = _moe_curve("deepseek-r1", "0.5.14", runner="triton")
    assert moe_kernel_s(model.moe_curve, 1) == pytest.approx(
        rows["us"][DS_KEY][rows["tokens"].index(1)] * 1e-6, rel=1e-9
    )
    assert model.untimed_moe_backend == ""
    assert f"the fused MoE as triton runs it from SGLang {timed[0]}'s rows" in note.value(
        "releases"
    )
    auto, _ = _moe_curve("deepseek-r1", "0.5.14")
    assert moe_kernel_s(auto.moe_curve, 1) < moe_kernel_s(model.moe_curve, 1)


def test_a_runner_no_release_timed_is_named_untimed():
    """--moe-runner-backend cutlass on DeepSeek-R1: no B200 table times SGLang's CUTLASS
    fused MoE; the fastest timed rows stand, the note says so and the part stays untimed."""
    got = moe_runner_rows("b200_sxm", "sglang", "0.5.14", DS_KEY, tuple(_sources("cutlass")))
    assert got.release is None
    model, note = _moe_curve("deepseek-r1", "0.5.14", runner="cutlass")
    assert note.id == "sim-kernel-tables"
    assert "SGLang's cutlass fused MoE untimed at the model's shape" in note.value("releases")
    assert model.untimed_moe_backend


def test_an_sglang_0_4_run_takes_no_0_5_patch_rule():
    """The runner rules are keyed by 0.5 patches (SGLANG_SM100_TRTLLM_RULES): a 0.4.9 run is
    older than every one of them, so DeepSeek-R1's FP8 experts run on Triton there as at 0.5.3
    (before PR #11816), not on flashinfer_trtllm as a 0.5.9 run's."""
    old, _ = _moe_curve("deepseek-r1", "0.4.9")
    before, _ = _moe_curve("deepseek-r1", "0.5.3")
    after, _ = _moe_curve("deepseek-r1", "0.5.9")
    assert moe_kernel_s(old.moe_curve, 1) == moe_kernel_s(before.moe_curve, 1)
    assert moe_kernel_s(after.moe_curve, 1) != moe_kernel_s(before.moe_curve, 1)
