"""`simulate --vllm-version V` sizes its pool with the allocator of V's release: the newest
release `kvplan engine` models that is not newer than V (0.19's for older ones)."""

from __future__ import annotations

import pytest

from kvplan.cli.common import load_gpu, load_model
from kvplan.engines import EngineRequest
from kvplan.engines.releases import VLLM_VERSIONS
from kvplan.engines.vllm import allocation_release, vllm_allocation
from kvplan.simulate.engine import usable_blocks
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.units import GIB


@pytest.mark.parametrize(
    ("given", "release"),
    [
        ("0.6", "0.19"),
        ("0.11.0", "0.19"),
        ("0.19.1", "0.19"),
        ("0.20", "0.19"),
        ("0.21.0", "0.21"),
        ("0.24.1", "0.21"),
        ("0.32.0", "0.32"),
        ("0.40", "0.32"),
    ],
)
def test_allocation_release_is_the_newest_not_newer(given, release):
    assert release in VLLM_VERSIONS
    assert allocation_release(given) == release


@pytest.mark.parametrize("version", ["0.19", "0.24", "0.32"])
def test_simulate_pool_is_the_engines_allocation_of_that_release(version):
    # gemma-3-27b: sliding layers, whose per-request blocks the releases count differently
    # (0.32 covers 2 x max_num_batched_tokens in flight), and 0.21+ subtract CUDA graphs
    spec, gpu = load_model("gemma-3-27b"), load_gpu("h100-sxm")
    options = ServeOptions(
        max_model_len=32768, vllm_version=version, kv_cache_memory_bytes=20 * GIB
    )
    replica = build_replica(spec, gpu, options)
    request = EngineRequest(
        max_model_len=32768,
        max_num_batched_tokens=replica.config.max_num_batched_tokens,
        kv_cache_memory_bytes=20 * GIB,
        vllm_version=allocation_release(version),
    )
    alloc = vllm_allocation(spec, gpu, request)
    assert replica.kv_cache_tokens == alloc.kv_cache_tokens
    # one group (the sliding and full layers share a page size): less vLLM's null block
    assert replica.config.num_blocks == usable_blocks(alloc.num_blocks, 1) == alloc.num_blocks - 1


@pytest.mark.parametrize("version", ["0.19", "0.32.0", "0.7"])
def test_the_engine_note_names_the_release_simulated(version):
    """The note that describes the scheduler named vLLM 0.19 whatever release ran; a V0 release
    (0.6, 0.7) has its own note that describes its engine instead."""
    from helpers import run_json

    data = run_json("simulate", "llama-3.1-8b", "--num-prompts", "20", "--vllm-version", version)
    notes = {n["id"]: n["text"] for n in data["notes"]}
    assert data["setup"]["engine_version"] == version
    if version == "0.7":
        assert "sim-engine" not in notes
        assert notes["sim-vllm-v0"].startswith("vLLM 0.7 runs the V0 engine")
    else:
        assert notes["sim-engine"].startswith(f"The engine is vLLM {version}'s V1 scheduler")


def test_each_engine_has_one_default_release_that_kvplan_models():
    """One default release per engine (engines.releases), one kvplan models, taken by every
    command that is given none."""
    from kvplan.cli.simulate import engine_versions
    from kvplan.engines.releases import SGLANG_VERSION, SGLANG_VERSIONS, VLLM_VERSION
    from kvplan.present.launch import VLLM_IMAGE, vllm_image
    from kvplan.simulate.setup import ServeOptions

    assert VLLM_VERSION in VLLM_VERSIONS and SGLANG_VERSION in SGLANG_VERSIONS
    assert EngineRequest().vllm_version == ServeOptions().vllm_version == VLLM_VERSION
    assert EngineRequest().sglang_version == ServeOptions().sglang_version == SGLANG_VERSION
    assert engine_versions("vllm", None, None) == (VLLM_VERSION, SGLANG_VERSION)
    assert VLLM_IMAGE == vllm_image(VLLM_VERSION)


@pytest.mark.parametrize(
    ("engine", "version", "given", "resolved"),
    [
        ("vllm", "0.7", None, False),  # V0: the scheduler runs between the steps
        ("vllm", "0.11.0", None, False),  # V1 before vllm-project/vllm#27614
        ("vllm", "0.12", None, True),
        ("vllm", "0.19", None, True),
        ("vllm", "0.11.0", True, True),  # --async-scheduling, as given
        ("vllm", "0.19", False, False),  # --no-async-scheduling
        ("sglang", "0.19", None, True),  # SGLang's overlap scheduler
    ],
)
def test_async_scheduling_is_the_releases_default_unless_given(engine, version, given, resolved):
    spec, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    options = ServeOptions(
        engine=engine, vllm_version=version, async_scheduling=given, max_model_len=8192
    )
    replica = build_replica(spec, gpu, options)
    assert replica.options.async_scheduling is resolved
    if engine == "vllm":  # the engine's rules (lagged window drops) see the same switch
        assert replica.config.async_scheduling is resolved
