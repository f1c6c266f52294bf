"""SGLANG_USE_CUDA_IPC_TRANSPORT=1 (issue 34: the cookbook's Qwen3.5 H200 runs were refused as an
environment switch simulate does not model).

SGLang's source: with the switch on, the multimodal processor the tokenizer manager builds
(BaseMultimodalProcessor.__init__, multimodal/processors/base_processor.py) allocates an
MmItemMemoryPool of SGLANG_MM_FEATURE_CACHE_MB on GPU 0 (environ.py: 4096 until PR #22662 of
April 2026, 1024 after), in the tokenizer process's own CUDA context; the processors built in the
scheduler pass skip_mm_pool=True, and a text-only model builds none. _launch_subprocesses starts
the schedulers, then builds the tokenizer manager, so the pool is held while the schedulers
measure their free memory (the minimum over ranks). A text-only request sends no feature through
the pool: only the KV pool moves."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.sglang import sglang_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.units import GIB, MIB

from helpers import run_cli

QWEN35 = "Qwen/Qwen3.5-397B-A17B"  # a vision tower: SGLang serves it as multimodal


def _alloc(model: str, pool_mib: int, **kw):
    request = EngineRequest(
        engine="sglang",
        tp=8,
        max_model_len=8192,
        mem_fraction_static=0.8,
        cuda_ipc_pool_bytes=pool_mib * MIB,
        **kw,
    )
    return sglang_allocation(load_model(model), load_profile("h200-sxm"), request)


def _rest(alloc) -> int:
    """SGLang's rest before the state pool takes its share: the KV pool plus the Mamba pool."""
    return alloc.pool_bytes + alloc.mamba_pool_bytes


def test_a_multimodal_models_pool_shrinks_by_the_fraction_of_the_held_bytes():
    """By hand: the 4096 MiB pool and a CUDA context (0.51 GiB, the TP 1 context kvplan takes
    for SGLang's own ranks) leave GPU 0 before "free before load"; rest = free x 0.8 - weights
    shrinks by 0.8 x (4 + 0.51) GiB = 3.608 GiB."""
    off, on = _alloc(QWEN35, 0), _alloc(QWEN35, 4096)
    assert _rest(off) - _rest(on) == pytest.approx(0.8 * 4.51 * GIB, abs=2 * MIB)
    assert on.kv_cache_tokens < off.kv_cache_tokens
    (ipc,) = [n for n in on.notes if n.id == "sglang-cuda-ipc-pool"]
    values = dict(ipc.values)
    assert values["held_bytes"] == pytest.approx(4.51 * GIB, abs=MIB)
    # the other end of the start-up race: held after the first measurement, the whole 4.51 GiB
    assert _rest(off) - values["later_bytes"] == pytest.approx(4.51 * GIB, abs=2 * MIB)
    smaller = _alloc(QWEN35, 1024)  # SGLang's default since PR #22662
    assert _rest(off) - _rest(smaller) == pytest.approx(0.8 * 1.51 * GIB, abs=2 * MIB)


def test_a_text_only_model_holds_no_pool():
    off, on = _alloc("Qwen/Qwen3-235B-A22B", 0), _alloc("Qwen/Qwen3-235B-A22B", 4096)
    assert _rest(on) == _rest(off)
    (ipc,) = [n for n in on.notes if n.id == "sglang-cuda-ipc-pool"]
    assert dict(ipc.values)["held_bytes"] == 0


def test_the_pool_is_sglangs_flag():
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
        "--cuda-ipc-pool-mib", "4096", "--num-prompts", "4",
    )  # fmt: skip
    assert code == 2
    assert "--cuda-ipc-pool-mib is SGLang's" in err and "Traceback" not in err


def test_qwen35s_mtp_layer_is_read_from_mtp_num_hidden_layers():
    """Qwen3.5's config names its MTP layer mtp_num_hidden_layers (1), not
    num_nextn_predict_layers: --speculative-algorithm NEXTN drafts with it."""
    from kvplan.simulate.speculative import mtp_layers

    assert mtp_layers(load_model(QWEN35)) == 1
    assert mtp_layers(load_model("Qwen/Qwen3-235B-A22B")) == 0
