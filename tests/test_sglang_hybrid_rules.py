"""SGLang's server_args rules for recurrent-state hybrids (kvplan issue 34): the attention
backend a hybrid runs on SM100 with none given (HYBRID_SM100_BACKENDS) and the overlap
scheduler MambaRadixCache's no_buffer strategy turns off (MAMBA_NO_OVERLAP_FROM), from
server_args._handle_model_specific_adjustments and _handle_mamba_radix_cache."""

from __future__ import annotations

import pytest

from kvplan.engines.sglang import _default_sglang_backend, mamba_radix_overlap_off
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica


@pytest.fixture(scope="module")
def qwen3_next():
    return load_model("Qwen/Qwen3-Next-80B-A3B-Instruct", checkpoint=False)


@pytest.fixture(scope="module")
def nemotron_nano():
    return load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", checkpoint=False)


@pytest.mark.parametrize(
    ("version", "backend"),
    [("0.5.6", "triton"), ("0.5.9", "triton"), ("0.5.10", "trtllm_mha"), ("0.5", "trtllm_mha")],
)
def test_qwen3_next_runs_triton_on_sm100_until_hybrid_qwen_models_took_the_general_pick(
    qwen3_next, version, backend
):
    assert _default_sglang_backend(qwen3_next, load_profile("b200"), 8, None, version) == backend


def test_the_hybrid_backends_apply_on_sm100_only(qwen3_next, nemotron_nano):
    b200, h200 = load_profile("b200"), load_profile("h200-sxm")
    assert _default_sglang_backend(nemotron_nano, b200, 1, None, "0.5") == "flashinfer"
    assert _default_sglang_backend(qwen3_next, h200, 8, None, "0.5.6") == "fa3"
    dense = load_model("Qwen/Qwen3-32B", checkpoint=False)  # no recurrent state: the general pick
    assert _default_sglang_backend(dense, b200, 1, None, "0.5.6") == "trtllm_mha"


def test_the_overlap_rule(qwen3_next):
    """Off for a hybrid keeping its radix cache, not speculating, on a backend other than
    trtllm_mha, from 0.5.6; on otherwise (and always for a model without recurrent state)."""
    assert mamba_radix_overlap_off(qwen3_next, "0.5.6", "triton", False, True)
    assert mamba_radix_overlap_off(qwen3_next, "0.5", "fa3", False, True)
    assert not mamba_radix_overlap_off(qwen3_next, "0.5.5", "triton", False, True)
    assert not mamba_radix_overlap_off(qwen3_next, "0.4.9", "triton", False, True)
    assert not mamba_radix_overlap_off(qwen3_next, "0.5.6", "trtllm_mha", False, True)
    assert not mamba_radix_overlap_off(qwen3_next, "0.5.6", "triton", True, True)
    assert not mamba_radix_overlap_off(qwen3_next, "0.5.6", "triton", False, False)
    dense = load_model("Qwen/Qwen3-32B", checkpoint=False)
    assert not mamba_radix_overlap_off(dense, "0.5.6", "triton", False, True)
    # SGLang gives Kimi Linear no MambaRadixCache (support_mamba_cache=False): the radix cache
    # goes off, the overlap scheduler stays on
    kimi_linear = qwen3_next._replace(model_type="kimi_linear")
    assert not mamba_radix_overlap_off(kimi_linear, "0.5", "fa3", False, True)


def _replica(spec, gpu, **options):
    return build_replica(spec, load_profile(gpu), ServeOptions(engine="sglang", **options))


def test_a_replica_runs_without_the_overlap_scheduler_where_sglang_turns_it_off(qwen3_next):
    """Qwen3-Next at TP 8 on B200: SGLang 0.5.6 runs triton with the radix cache, so no
    overlap (the note says so); the bare 0.5 runs trtllm_mha and keeps it; a given
    --disable-radix-cache or overlap flag keeps what it says."""
    old = _replica(qwen3_next, "b200", tp=8, sglang_version="0.5.6")
    assert old.model.async_scheduling is False
    assert "sglang-mamba-no-overlap" in {n.id for n in old.notes}
    new = _replica(qwen3_next, "b200", tp=8)
    assert new.model.async_scheduling is True
    assert "sglang-mamba-no-overlap" not in {n.id for n in new.notes}
    no_radix = _replica(
        qwen3_next, "b200", tp=8, sglang_version="0.5.6", enable_prefix_caching=False
    )
    assert no_radix.model.async_scheduling is True
    given = _replica(qwen3_next, "b200", tp=8, sglang_version="0.5.6", async_scheduling=True)
    assert given.model.async_scheduling is True


def test_without_overlap_a_decode_step_adds_the_host_time(nemotron_nano):
    """The same Nemotron-3-Nano step with the overlap scheduler off takes the GPU's time plus the
    host's (batch_step: total = gpu + host), with it the larger of the two."""
    from kvplan.formulas.batch_step import BatchShape

    off = _replica(nemotron_nano, "b200", tp=1).model
    on = _replica(nemotron_nano, "b200", tp=1, async_scheduling=True).model
    assert off.async_scheduling is False and on.async_scheduling is True
    shape = BatchShape(num_decodes=64, decode_context_sum=64 * 600, num_sampled=64)
    a, b = off.step(shape), on.step(shape)
    host = a.terms_s["host_s"]
    gpu = sum(v for k, v in a.terms_s.items() if k != "host_s")
    assert host > 0 and a.total_s == pytest.approx(gpu + host)
    assert b.total_s == pytest.approx(max(gpu, host))
