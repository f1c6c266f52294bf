"""vLLM's recurrent-state dtypes (kvplan.engines.vllm.state_dtypes) as its source sets them at
each release kvplan models: the conv state in --mamba-cache-dtype (auto: the model dtype), the
SSM state in --mamba-ssm-cache-dtype, whose auto is the architecture's hook
(vllm/model_executor/models/config.py: Nemotron-H's mamba_ssm_cache_dtype, float16 on 0.19.1 and
float32 from 0.21.0 without one; Qwen3.5's mamba_ssm_dtype) or else the conv dtype. The state
page vLLM allocates follows them; the flags are refused as one line where vLLM refuses them."""

from __future__ import annotations

import json

import pytest

from kvplan.anatomy.model import CacheKind
from kvplan.dtypes import ELEMENT_BYTES
from kvplan.engines import EngineRequest, engine_allocation
from kvplan.engines.releases import VLLM_VERSIONS
from kvplan.engines.vllm import layer_specs, state_dtypes
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import bundled_models, load_config, load_model

from helpers import one_line_error, run_cli, spec_from

H100 = load_profile("h100")


def _state_page(spec, tp: int = 1, **request) -> int:
    """The bytes vLLM's MambaSpec holds for one state layer of `spec` (unpadded)."""
    pages, _ = layer_specs(spec, EngineRequest(**request), tp)
    sizes = {p.state_bytes for p in pages if p.kind is CacheKind.STATE}
    assert len(sizes) == 1
    return sizes.pop()


def _expected(state, conv: str, ssm: str, tp: int = 1) -> int:
    c, s = state.elements(tp)
    return c * ELEMENT_BYTES[conv] + s * ELEMENT_BYTES[ssm]


def _hybrids():
    return [n for n in bundled_models() if load_model(n).state_layers()]


def test_every_bundled_hybrid_gets_the_dtypes_its_architecture_gets_in_vllm():
    """Nemotron-H without a dtype in its config: float16 (the same bytes as bf16) on 0.19, float32
    from 0.21; with one, the config's; Qwen3.5's mamba_ssm_dtype at every release; every other
    family the model dtype (KDA's recurrent state float32)."""
    hybrids = _hybrids()
    assert {load_model(n).model_type.split("_text")[0] for n in hybrids} >= {
        "nemotron_h",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "lfm2",
        "kimi_linear",
    }
    for name in hybrids:
        spec = load_model(name)
        config, _, _ = load_config(name)
        text = config.get("text_config") or config
        state = spec.state_layers()[0]
        for version in VLLM_VERSIONS:
            conv, ssm = state_dtypes(
                state, spec.model_type, spec.dtype, EngineRequest(vllm_version=version)
            )
            assert conv == spec.dtype, (name, version)
            if spec.model_type == "nemotron_h":
                named = text.get("mamba_ssm_cache_dtype")
                default = "fp16" if version == "0.19" else "fp32"
                assert ssm == ({"float32": "fp32"}[named] if named else default), (name, version)
            elif spec.model_type.startswith("qwen3_5"):
                assert text["mamba_ssm_dtype"] == "float32" and ssm == "fp32", (name, version)
            elif state.kind.name == "KDA":
                assert ssm == "fp32", (name, version)
            else:
                assert ssm == spec.dtype, (name, version)
            assert _state_page(spec, vllm_version=version) == _expected(state, conv, ssm)


def test_nemotron_h_56b_pages_double_their_ssm_bytes_from_0_21():
    """The 56B's config names no SSM dtype: 0.19.1 keeps it in float16 (what the recorded 0.19.1
    oracle holds, tests/data/vllm_kv_config), 0.21 and 0.32 in float32, so its state page and
    the attention block forced up to cover it grow, and fewer blocks fit."""
    spec = load_model("nemotron-h-56b")
    state = spec.state_layers()[0]
    conv, ssm = state.elements(8)
    old = _state_page(spec, 8, vllm_version="0.19")
    assert old == 2 * conv + 2 * ssm
    runs = {}
    for version in VLLM_VERSIONS:
        request = EngineRequest(vllm_version=version, tp=8, kv_cache_memory_bytes=40 << 30)
        runs[version] = engine_allocation(spec, H100, request)
        if version != "0.19":
            assert _state_page(spec, 8, vllm_version=version) == 2 * conv + 4 * ssm
    assert runs["0.21"].block_size > runs["0.19"].block_size
    assert runs["0.21"].num_blocks < runs["0.19"].num_blocks
    # --mamba-ssm-cache-dtype float16 gives 0.32 back 0.19's page
    back = engine_allocation(
        spec,
        H100,
        EngineRequest(
            vllm_version="0.32",
            tp=8,
            kv_cache_memory_bytes=40 << 30,
            mamba_ssm_cache_dtype="float16",
        ),
    )
    assert (back.page_bytes, back.block_size) == (runs["0.19"].page_bytes, runs["0.19"].block_size)


@pytest.mark.parametrize("field", ["mamba_ssm_dtype", "mamba_ssm_cache_dtype"])
def test_a_dtype_field_only_its_architectures_hook_reads_is_ignored(field):
    """vLLM reads mamba_ssm_cache_dtype for Nemotron-H and mamba_ssm_dtype for Qwen3.5 only: the
    field on another architecture (or the other field) changes nothing."""
    config, _, _ = load_config("qwen3-next-80b-a3b")
    plain = spec_from(config)
    named = spec_from({**config, field: "float32"})
    assert named.state_layers()[0].ssm_dtype == "fp32"  # the config's own statement
    for version in VLLM_VERSIONS:
        assert _state_page(named, vllm_version=version) == _state_page(plain, vllm_version=version)
    config, _, _ = load_config("nemotron-h-56b")
    other = spec_from({**config, "mamba_ssm_dtype": "float16"})
    ours = spec_from({**config, "mamba_ssm_cache_dtype": "float16"})
    state = ours.state_layers()[0]
    assert _state_page(other, vllm_version="0.32") == _expected(state, "bf16", "fp32")
    assert _state_page(ours, vllm_version="0.32") == _expected(state, "bf16", "fp16")


def test_the_flags_and_dtype_set_the_state_as_vllm_does():
    """--mamba-cache-dtype sets conv and SSM (the SSM's auto follows it, Nemotron-H's hook
    aside); --mamba-ssm-cache-dtype the SSM alone, over any hook; --dtype float32 is the model
    dtype the conv state follows; a lightning-free model's short conv has no SSM part."""
    nxt = load_model("qwen3-next-80b-a3b")
    s = nxt.state_layers()[0]
    assert _state_page(nxt, vllm_version="0.21", mamba_cache_dtype="float32") == _expected(
        s, "fp32", "fp32"
    )
    assert _state_page(nxt, vllm_version="0.32", mamba_ssm_cache_dtype="bfloat16") == _expected(
        s, "bf16", "bf16"
    )
    # --dtype float32: the model dtype vLLM's "auto" state follows
    served = [
        engine_allocation(
            nxt, H100, EngineRequest(tp=4, kv_cache_memory_bytes=20 << 30, dtype="float32", **f)
        )
        for f in ({}, {"mamba_cache_dtype": "float32"}, {"mamba_cache_dtype": "float16"})
    ]
    assert served[0].page_bytes == served[1].page_bytes
    assert served[0].num_blocks == served[1].num_blocks != served[2].num_blocks
    qwen35 = load_model("qwen3.5-27b")
    s = qwen35.state_layers()[0]
    assert _state_page(qwen35, mamba_ssm_cache_dtype="float16") == _expected(s, "bf16", "fp16")
    nano = load_model("nemotron-3-nano-30b")
    s = nano.state_layers()[0]
    assert _state_page(nano, vllm_version="0.21", mamba_cache_dtype="float16") == _expected(
        s, "fp16", "fp32"
    )
    lfm = load_model("lfm2-1.2b")
    s = lfm.state_layers()[0]
    assert _state_page(lfm, mamba_cache_dtype="float32") == _expected(s, "fp32", "fp32")


def _serve(*argv: str) -> tuple[int, str, str]:
    return run_cli(
        "engine", "nemotron-h-56b", "--engine", "vllm", "--gpu", "h100", "--tp", "8", *argv
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--mamba-ssm-cache-dtype", "bfloat16"], "vLLM 0.19 takes auto, float32, float16"),
        (["--vllm-version", "0.21", "--mamba-cache-dtype", "bfloat16"], "vLLM 0.21 takes"),
        (["--mamba-cache-dtype", "fp32"], "--mamba-cache-dtype 'fp32'"),
        (["--mamba-ssm-cache-dtype", ""], "--mamba-ssm-cache-dtype ''"),
        (["--mamba-ssm-cache-dtype", "x" * 10_000], "--mamba-ssm-cache-dtype 'xxxx"),
        (["--mamba-cache-dtype", "ｆｌｏａｔ３２"], "--mamba-cache-dtype"),
        (["--mamba-cache-dtype", "float32\n"], "--mamba-cache-dtype"),
        (["--engine", "sglang", "--mamba-ssm-cache-dtype", "float32"], "--mamba-ssm-cache-dtype"),
    ],
)
def test_hostile_mamba_dtype_flags_are_one_line_errors(argv, needle):
    code, out, err = _serve(*argv)
    assert not out
    one_line_error(code, err, needle)
    assert len(err) < 300


def test_a_bad_mamba_flag_is_refused_for_a_model_without_a_state_too():
    """vLLM's argument parser refuses it whatever the model."""
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--engine", "vllm", "--mamba-cache-dtype", "int8"
    )
    one_line_error(code, err, "--mamba-cache-dtype 'int8'")


def test_simulate_takes_the_flags_for_vllm_and_refuses_them_for_sglang():
    base = (
        "simulate", "nemotron-h-56b", "--gpu", "h100", "--tp", "8", "--num-prompts", "4",
        "--input-len", "128", "--output-len", "4", "--format", "json",
    )  # fmt: skip
    code, out, err = run_cli(*base, "--engine-version", "0.32")
    assert code == 0, err
    fp32 = json.loads(out)["runs"][0]
    code, out, err = run_cli(
        *base, "--engine-version", "0.32", "--mamba-ssm-cache-dtype", "float16"
    )
    assert code == 0, err
    fp16 = json.loads(out)["runs"][0]
    assert fp16 != fp32
    code, _, err = run_cli(*base, "--engine", "sglang", "--mamba-cache-dtype", "float32")
    one_line_error(code, err, "--mamba-cache-dtype is vLLM's")
    code, _, err = run_cli(*base, "--mamba-ssm-cache-dtype", "half")
    one_line_error(code, err, "--mamba-ssm-cache-dtype 'half'")
