"""Where SGLang runs a recurrent-state hybrid without its radix cache (issue 28): the rules of
server_args._handle_mamba_radix_cache (kvplan.engines.sglang.sglang_radix_off), the state pool
model_runner_kv_cache_mixin.handle_max_mamba_cache sizes then, and no prefix ever reused."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import (
    MAMBA_FULL_MEMORY_RATIO,
    _mamba_bytes_per_request,
    mamba_capped_requests,
    sglang_allocation,
    sglang_radix_off,
)
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json


@pytest.fixture(scope="module")
def qwen35():
    return load_model("Qwen/Qwen3.5-35B-A3B", checkpoint=False)


def _request(**fields) -> EngineRequest:
    return EngineRequest(engine="sglang", tp=2, max_model_len=4096, **fields)


def test_the_rules(qwen35):
    """support_mamba_cache=False (Kimi Linear): off; speculating under no_buffer: off through
    0.5.9 and for a bare 0.5, refused from 0.5.10 (PR #19391) except on ROCm (PR #22908);
    trtllm_mha without speculation: off; a given --disable-radix-cache: off; a model without
    recurrent state, or a release before 0.5.6: kept."""
    h100, mi300x = load_profile("h100"), load_profile("mi300x")
    assert sglang_radix_off(qwen35, h100, _request(sglang_version="0.5.9"), "fa3") is None
    kimi = qwen35._replace(model_type="kimi_linear")
    assert sglang_radix_off(kimi, h100, _request(), "fa3") == "unsupported"
    spec = {"speculative": True}
    assert sglang_radix_off(qwen35, h100, _request(sglang_version="0.5.9", **spec), "fa3") == (
        "speculative"
    )
    assert sglang_radix_off(qwen35, h100, _request(**spec), "fa3") == "speculative"
    with pytest.raises(KvplanError, match="PR #19391.*--disable-radix-cache"):
        sglang_radix_off(qwen35, h100, _request(sglang_version="0.5.10", **spec), "fa3")
    rocm = _request(sglang_version="0.5.12", **spec)
    assert sglang_radix_off(qwen35, mi300x, rocm, "aiter") == "speculative"
    assert sglang_radix_off(qwen35, h100, _request(), "trtllm_mha") == "trtllm_mha"
    assert sglang_radix_off(qwen35, h100, _request(radix_cache=False), "fa3") == "given"
    assert sglang_radix_off(qwen35, h100, _request(sglang_version="0.5.5", **spec), "fa3") is None
    dense = load_model("Qwen/Qwen3-32B", checkpoint=False)
    assert sglang_radix_off(dense, h100, _request(**spec), "fa3") is None


def test_without_the_radix_cache_the_state_pool_holds_one_state_a_request(qwen35):
    """handle_max_mamba_cache with the radix cache off and max_running_requests 64: 64 states
    of 737,280 conv + 31,457,280 SSM bytes (Qwen3.5-35B-A3B at TP 2, 30 Gated DeltaNet layers)
    = 2,060,451,840 B, the rest of the pool the KV's; with it on, 0.9 / 1.9 of the pool is
    states. init_memory then caps max_running_requests at the states // 1, not // 3."""
    h100 = load_profile("h100")
    conv, ssm = _mamba_bytes_per_request(qwen35, 2)
    assert (conv, ssm) == (737_280, 31_457_280)
    off = sglang_allocation(qwen35, h100, _request(radix_cache=False, max_running_requests=64))
    on = sglang_allocation(qwen35, h100, _request(max_running_requests=64))
    rest = dict(next(n for n in off.notes if n.id == "sglang-pool").values)["pool_bytes"]
    assert off.max_mamba_cache_size == 64
    assert off.mamba_pool_bytes == 64 * 32_194_560 == 2_060_451_840
    page, cell = off.block_size, off.profile_cell_size_bytes
    assert off.kv_cache_tokens == (rest - 2_060_451_840) // cell // page * page
    ratio_pool = int(rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO))
    assert on.mamba_pool_bytes == ratio_pool
    assert on.kv_cache_tokens == (rest - ratio_pool) // cell // page * page
    assert off.kv_cache_tokens > on.kv_cache_tokens
    assert mamba_capped_requests(500, 400, radix_cache=False) == 400
    assert mamba_capped_requests(500, 400) == 133
    # no max_running_requests given and no speculation: SGLang sizes the states by the ratio
    auto = sglang_allocation(qwen35, h100, _request(radix_cache=False))
    assert auto.mamba_pool_bytes == on.mamba_pool_bytes


SIM = ("simulate", "qwen3.5-35b-a3b", "--gpu", "h100", "--tp", "2", "--engine", "sglang")
SIM += ("--num-prompts", "16", "--input-len", "512", "--output-len", "16", "--prefix-len", "256")
NEXTN = ("--speculative-algorithm", "NEXTN", "--spec-accept-length", "3")


def _hit_rate(*argv: str) -> tuple[float, set[str]]:
    run = run_json(*SIM, *argv)["runs"][0]
    return run["engine"]["prefix_hit_rate"], {n["id"] for n in run_json(*SIM, *argv)["notes"]}


def test_a_speculating_hybrid_reuses_no_prefix():
    """16 prompts behind one 256-token prefix: SGLang 0.5.9 without speculation reuses it
    (hits), with NEXTN it runs without the radix cache (no hit, noted); a bare 0.5 likewise,
    0.5.10 refuses the launch (one line) unless --disable-radix-cache is given."""
    hits, _ = _hit_rate("--engine-version", "0.5.9")
    assert hits > 0
    none, notes = _hit_rate("--engine-version", "0.5.9", *NEXTN)
    assert none == 0.0 and {"sglang-radix-off", "sglang-mamba-no-radix"} <= notes
    bare, _ = _hit_rate(*NEXTN)
    assert bare == 0.0
    code, out, err = run_cli(*SIM, "--engine-version", "0.5.10", *NEXTN)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--disable-radix-cache" in err
    given, _ = _hit_rate("--engine-version", "0.5.10", *NEXTN, "--disable-radix-cache")
    assert given == 0.0
    code, _, err = run_cli(*SIM, "--engine", "vllm", "--disable-radix-cache")
    assert code == 2 and "--no-enable-prefix-caching" in err


def test_kvplan_engine_takes_the_flag_as_sglang_spells_it():
    """Qwen3.5-35B-A3B at TP 2 on H100, SGLang's own max_running_requests: the states come from
    the ratio split either way (no --max-running-requests given: handle_max_mamba_cache's else
    branch), and init_memory caps the requests at states // 3 with the radix cache, // 1
    without it."""
    argv = ("engine", "qwen3.5-35b-a3b", "--engine", "sglang", "--tp", "2", "--gpu", "h100")
    on = run_json(*argv)
    off = run_json(*argv, "--disable-radix-cache")
    assert on["max_mamba_cache_size"] == off["max_mamba_cache_size"]
    assert on["kv_cache_tokens"] == off["kv_cache_tokens"]
    states = on["max_mamba_cache_size"]
    assert on["max_running_requests"] == min(states // 3, 4096)
    assert off["max_running_requests"] == min(states, 4096)


@pytest.mark.parametrize(
    "version, flag",
    [("0.5.10", "--mamba-scheduler-strategy"), ("0.5.20", "--mamba-radix-cache-strategy")],
)
def test_the_refusal_offers_extra_buffer_in_the_releases_spelling(qwen35, version, flag):
    """kvplan models extra_buffer beside speculation (mamba_track_slots, spec v1 and v2): the
    refusal names it as the release spells the flag, and not as unmodelled."""
    request = _request(sglang_version=version, speculative=True)
    with pytest.raises(KvplanError) as got:
        sglang_radix_off(qwen35, load_profile("h100"), request, "fa3")
    message = str(got.value)
    assert f"{flag} no_buffer" in message and f"{flag} extra_buffer" in message
    assert "not modelled" not in message
    # the advice holds: extra_buffer keeps the radix cache beside speculation
    fixed = request._replace(mamba_track_slots=1)
    assert sglang_radix_off(qwen35, load_profile("h100"), fixed, "fa3") is None
