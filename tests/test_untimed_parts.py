"""The parts of a step no kernel table times (StepModel.untimed_parts): named in the
sim-interval note and in JSON, and they move a run on its GPU's own tables to the "partial"
interval class (kvplan.plans.intervals.raw_class)."""

from __future__ import annotations

import pytest

from kvplan.engines.backends import Backends
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans import intervals
from kvplan.simulate.setup import ServeOptions, build_replica


def _parts(model, gpu, **options):
    spec = load_model(model, checkpoint=False)
    return build_replica(spec, load_profile(gpu), ServeOptions(**options)).model.untimed_parts


def test_a_dense_model_on_its_gpus_own_tables_has_none():
    assert _parts("Qwen/Qwen3-8B", "h100") == ()
    assert _parts("Qwen/Qwen3-8B", "h100", engine="sglang") == ()


def test_an_attention_backend_without_rows_is_named_with_its_flag():
    parts = _parts(
        "zai-org/GLM-4.7-Flash",
        "b200",
        engine="sglang",
        backends=Backends(attention_backend="triton"),
    )
    assert "the attention under --attention-backend triton" in parts
    # without the flag SGLang's own pick runs, and nothing about attention is untimed
    assert not any(
        "attention" in p for p in _parts("zai-org/GLM-4.7-Flash", "b200", engine="sglang")
    )


def test_recurrent_layers_are_named_by_kind():
    parts = _parts("Qwen/Qwen3-Next-80B-A3B-Thinking", "b200", engine="sglang", tp=8)
    assert "the recurrent layers (gated_deltanet)" in parts


@pytest.mark.parametrize(
    ("gpu", "engine", "untimed"),
    [("b200", "sglang", True), ("h200", "vllm", False)],  # vLLM's DSA module tables: H100/H200
)
def test_the_dsa_indexer_is_untimed_without_the_module_tables(gpu, engine, untimed):
    parts = _parts("deepseek-ai/DeepSeek-V3.2", gpu, engine=engine, tp=8)
    assert ("the DSA indexer" in parts) is untimed


def test_a_fused_moe_without_its_curve_is_named_with_its_format():
    # gpt-oss's MXFP4 experts: no table times an MXFP4 fused MoE on the H100
    parts = _parts("openai/gpt-oss-20b", "h100")
    assert any(p.startswith("the mxfp4 fused MoE") for p in parts)


def test_parts_decide_the_class_and_the_note_names_them():
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.simulate.workload import WorkloadSpec

    spec, gpu = load_model("openai/gpt-oss-20b", checkpoint=False), load_profile("h100")
    request = SimulateRequest(
        serve=ServeOptions(),
        workload=WorkloadSpec(num_prompts=8, input_len=64, output_len=8),
    )
    result = simulate(spec, gpu, request)
    assert result.untimed_parts and all(isinstance(p, str) for p in result.untimed_parts)
    (interval,) = [n for n in result.notes if n.id == "sim-interval"]
    assert interval.value("parts") == result.untimed_parts
    classes = intervals.table()["classes"]
    if intervals.PARTIAL in classes:
        assert interval.value("evidence").split("/")[0] == intervals.PARTIAL
    from kvplan.present.notes import note_text  # the note's words name each part

    text = note_text(interval)
    assert all(p in text for p in result.untimed_parts)
