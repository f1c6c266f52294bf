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


def _qwen35_mtp(engine):
    spec = load_model("Qwen/Qwen3.5-35B-A3B", checkpoint=False)
    if engine == "sglang":
        flags = dict(speculative_algorithm="NEXTN", speculative_num_steps=3)
        flags |= dict(speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    else:
        flags = dict(speculative_config='{"method": "mtp", "num_speculative_tokens": 3}')
    options = ServeOptions(engine=engine, tp=2, spec_accept_length=3.0, **flags)
    return build_replica(spec, load_profile("h100"), options).model


def test_sglang_commits_each_verified_state_on_the_memory_roof():
    """An SGLang MTP round on a Gated DeltaNet hybrid ends with the accepted position's state
    copied into the pool (update_mamba_state_after_mtp_verify): 2 x the state's bytes a
    sequence at the tables' attention bandwidth, once a round (1/E of a decode step), in the
    memory term and untimed; vLLM runs no such copy."""
    import copy

    from kvplan.formulas.batch_step import BatchShape

    model = _qwen35_mtp("sglang")
    target = model.target
    assert model.state_commit_bytes == pytest.approx(2 * target.state_bytes_per_sequence)
    assert model.state_commit_bytes > 0
    assert "the recurrent-state commit after each verification" in model.untimed_parts
    b = 32
    expected = b * model.state_commit_bytes / target.attention_rates.bandwidth_bytes_per_s
    assert model.state_commit_s(b) == pytest.approx(expected)
    without = copy.copy(model)
    without.state_commit_bytes = 0.0
    shape = BatchShape(num_decodes=b, decode_context_sum=b * 800, num_sampled=b)
    e = model.speculation.tokens_per_round
    a, z = model.step(shape), without.step(shape)
    assert a.total_s - z.total_s == pytest.approx(expected / e)
    assert a.terms_s["kv_read_s"] - z.terms_s["kv_read_s"] == pytest.approx(expected / e)
    assert a.untimed_s - z.untimed_s == pytest.approx(expected / e)
    span, kept = model.decode_span_s(b, [b * 800.0, b * 801.0])
    span0, kept0 = without.decode_span_s(b, [b * 800.0, b * 801.0])
    assert span - span0 == pytest.approx([expected / e] * 2)
    assert kept(2).untimed_s - kept0(2).untimed_s == pytest.approx(2 * expected / e)
    vllm = _qwen35_mtp("vllm")
    assert vllm.state_commit_bytes == 0.0
    assert "the recurrent-state commit after each verification" not in vllm.untimed_parts
