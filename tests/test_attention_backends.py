"""The engines' attention-backend flags (issue 28): the page a backend forces moves the pool as the
engine's own rule says (hand-computed below), unknown names and refused backends are one-line
errors, CUDA graphs off where SGLang turns them off, and `plan --emit` carries the flags."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.backends import Backends
from kvplan.engines.sglang import sglang_allocation
from kvplan.engines.vllm import vllm_allocation
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json

# DeepSeek-V3's MLA cache in bf16: (512 latent + 64 rope) x 2 B = 1,152 B per layer, 61 layers
DSV3_CELL = (512 + 64) * 2 * 61  # 70,272 B per token


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


@pytest.mark.parametrize(
    ("backend", "gpu", "page"),
    [
        (None, "h200", 1),  # Hopper: fa3, page 1
        ("triton", "h200", 1),
        ("flashmla", "h200", 64),  # "FlashMLA only supports a page_size of 64"
        ("cutlass_mla", "h200", 128),  # "Cutlass MLA only supports a page_size of 128"
        ("trtllm_mla", "b200", 64),  # "changing page_size from 1 to 64"
        (None, "b200", 64),  # DeepseekV3ForCausalLM on SM100: trtllm_mla by default
    ],
)
def test_sglang_page_moves_the_pool_as_the_engine_rounds_it(dsv3, backend, gpu, page):
    # 1,000 tokens' worth of pool and 5 bytes: SGLang keeps rest // cell_size tokens, rounded
    # down to whole pages (1,000 -> 960 in 64-token pages, 896 in 128-token pages)
    request = EngineRequest(
        engine="sglang",
        tp=8,
        backends=Backends(attention_backend=backend),
        kv_cache_memory_bytes=DSV3_CELL * 1000 + 5,
    )
    alloc = sglang_allocation(dsv3, load_profile(gpu), request)
    assert alloc.profile_cell_size_bytes == DSV3_CELL
    assert alloc.block_size == page
    assert alloc.kv_cache_tokens == {1: 1000, 64: 960, 128: 896}[page]
    assert alloc.num_blocks == alloc.kv_cache_tokens // page


def test_sglang_trtllm_mla_keeps_a_given_page_of_32(dsv3):
    request = EngineRequest(
        engine="sglang", tp=8, backends=Backends(attention_backend="trtllm_mla"), block_size=32,
        kv_cache_memory_bytes=DSV3_CELL * 1000,
    )  # fmt: skip
    alloc = sglang_allocation(dsv3, load_profile("b200"), request)
    assert (alloc.block_size, alloc.kv_cache_tokens) == (32, 992)


def test_vllm_backend_block_size_moves_the_blocks(dsv3):
    # vLLM: a block holds block_size tokens x 1,152 B on each of 61 layers; FLASHMLA's kernels
    # take 64-token blocks only, TRITON_MLA's multiples of 16 (vLLM's default 16 kept)
    memory = 64 * DSV3_CELL * 100  # one hundred 64-token blocks
    blocks = {}
    for backend in ("FLASHMLA", "triton_mla", "CUTLASS_MLA"):
        gpu = load_profile("b200" if backend == "CUTLASS_MLA" else "h200")
        request = EngineRequest(
            tp=8, backends=Backends(attention_backend=backend), kv_cache_memory_bytes=memory
        )
        alloc = vllm_allocation(dsv3, gpu, request)
        blocks[backend] = (alloc.block_size, alloc.num_blocks)
    assert blocks == {"FLASHMLA": (64, 100), "triton_mla": (16, 400), "CUTLASS_MLA": (128, 50)}


def test_vllm_refuses_a_backend_as_its_selector_does(dsv3):
    with pytest.raises(KvplanError, match=r"Reason: \['non-MLA not supported'\]"):
        vllm_allocation(load_model("llama-3.1-8b"), load_profile("h100"),
                        EngineRequest(backends=Backends(attention_backend="FLASHMLA")))  # fmt: skip
    with pytest.raises(KvplanError, match="compute capability not supported"):
        vllm_allocation(dsv3, load_profile("h200"),
                        EngineRequest(tp=8, backends=Backends(attention_backend="CUTLASS_MLA")))  # fmt: skip
    with pytest.raises(KvplanError, match="block_size not supported"):
        vllm_allocation(dsv3, load_profile("h200"),
                        EngineRequest(tp=8, backends=Backends(attention_backend="FLASHMLA"), block_size=16))  # fmt: skip


@pytest.mark.parametrize(
    ("model", "gpu", "backend", "words"),
    [
        ("deepseek-v3", "b200", "trtllm_mha", "can only be used with non-MLA models"),
        ("llama-3.1-8b", "h100", "trtllm_mla", "can only be used with MLA models"),
        ("deepseek-v3", "h200", "trtllm_mla", "only supported on Blackwell"),
        ("llama-3.1-8b", "b200", "fa3", "requires SM>=80 and SM<=90"),
    ],
)
def test_sglang_refuses_a_backend_as_it_does(model, gpu, backend, words):
    code, out, err = run_cli(
        "engine", model, "--engine", "sglang", "--gpu", gpu, "--tp", "8",
        "--attention-backend", backend,
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err


@pytest.mark.parametrize(
    ("engine", "flag", "known"),
    [
        ("vllm", "--attention-backend", "FLASHMLA"),
        ("sglang", "--attention-backend", "trtllm_mla"),
        ("sglang", "--nsa-decode-backend", "tilelang"),
    ],
)
def test_an_unknown_backend_is_one_line_listing_the_known(engine, flag, known):
    code, out, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, flag, "fa9",
        "--num-prompts", "4",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "'fa9'" in err and known in err


def test_sglang_only_flags_are_refused_for_vllm():
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--nsa-prefill-backend", "tilelang",
    )  # fmt: skip
    assert code == 2 and "SGLang's" in err and err.count("\n") == 1


def test_torch_native_turns_sglang_cuda_graphs_off():
    def run(*extra):
        return run_json(
            "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *extra,
            "--num-prompts", "8", "--input-len", "128", "--output-len", "16",
            "--max-concurrency", "1",
        )["runs"][0]["bench"]["median_tpot_ms"]  # fmt: skip

    default, native, eager = (
        run(),
        run("--attention-backend", "torch_native"),
        run("--disable-cuda-graph"),
    )
    assert native == pytest.approx(eager) and native > 2 * default
    alloc = sglang_allocation(
        load_model("llama-3.1-8b"),
        load_profile("h100"),
        EngineRequest(engine="sglang", backends=Backends(attention_backend="torch_native")),
    )
    assert alloc.cuda_graph_max_bs == 0


def test_a_given_backend_notes_that_its_kernels_are_timed_on_the_default_tables():
    doc = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--attention-backend", "flashinfer",
        "--num-prompts", "4", "--input-len", "64", "--output-len", "4",
    )  # fmt: skip
    ids = [n["id"] for n in doc["notes"]]
    assert "sim-attention-kernels" in ids and "vllm-attention" in ids
    words = next(n["text"] for n in doc["notes"] if n["id"] == "sim-attention-kernels")
    assert "--attention-backend flashinfer" in words and "not known" in words


@pytest.mark.parametrize(
    ("emit", "flags"),
    [
        ("vllm", ("--attention-backend", "FLASHINFER")),
        ("sglang", ("--attention-backend", "triton")),
    ],
)
def test_plan_emit_carries_the_backend(emit, flags):
    doc = run_json(
        "plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--tp", "1", "--kv-cache-dtype", "auto", "--max-num-seqs", "64",
        "--num-prompts", "20", "--input-len", "256", "--output-len", "32", "--emit", emit,
        *flags,
    )  # fmt: skip
    assert doc["mode_flags"] == " ".join(flags)
    code, out, _ = run_cli(
        "plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--tp", "1", "--kv-cache-dtype", "auto", "--max-num-seqs", "64",
        "--num-prompts", "20", "--input-len", "256", "--output-len", "32", "--emit", emit,
        *flags,
    )  # fmt: skip
    launch = next(line for line in out.splitlines() if "launch each replica" in line)
    assert code == 0 and launch.rstrip().endswith(" ".join(flags))


def test_plan_refuses_an_unknown_backend_before_searching():
    code, out, err = run_cli(
        "plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--emit", "sglang", "--attention-backend", "FLASHMLA",
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1 and "flashmla" in err


@pytest.mark.parametrize(
    ("engine", "extra"),
    [("vllm", ("--vllm-version", "0.32", "--attention-backend", "FLASHMLA_SPARSE")),
     ("sglang", ("--nsa-decode-backend", "tilelang"))],
)  # fmt: skip
def test_deepseek_v4_pools_refuse_a_backend_rather_than_ignore_it(engine, extra):
    code, out, err = run_cli(
        "engine", "deepseek-v4-flash", "--engine", engine, "--gpu", "h200", "--tp", "8",
        "--kv-cache-memory", "50GiB", *extra,
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1 and "DeepSeek-V4" in err


def test_nsa_flags_are_ignored_for_a_model_without_dsa_and_untimed_for_one_with_it():
    """SGLang reads --nsa-prefill-backend / --nsa-decode-backend for DeepSeek sparse attention
    models only: for Llama-3.1-8B they change nothing (the same figures as without them) and
    are named as ignored, not as untimed; for DeepSeek-V3.2 they pick its DSA kernels, which
    the tables did not time."""
    small = ("--num-prompts", "8", "--input-len", "128", "--output-len", "8")
    nsa = ("--nsa-prefill-backend", "flashmla_sparse", "--nsa-decode-backend", "fa3")
    plain = run_json("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *small)
    given = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *nsa, *small
    )
    notes = {n["id"]: n["text"] for n in given["notes"]}
    assert "sim-attention-kernels" not in notes
    assert notes["sim-nsa-backend-ignored"].startswith(
        "--nsa-prefill-backend flashmla_sparse --nsa-decode-backend fa3: ignored for this model"
    )
    assert "not known" not in notes["sim-nsa-backend-ignored"]
    assert {k: v for k, v in given.items() if k != "notes"} == {
        k: v for k, v in plain.items() if k != "notes"
    }
    extra = [n["id"] for n in given["notes"] if n not in plain["notes"]]
    # (a backend flag given: the engine note names the backend SGLang runs, its own pick)
    assert extra == ["sglang-attention", "sim-nsa-backend-ignored"]
    assert "Attention backend: fa3;" in notes["sglang-attention"]
    dsa = run_json(
        "simulate", "deepseek-v3.2", "--gpu", "h200", "--tp", "8", "--engine", "sglang",
        *nsa, *small,
    )  # fmt: skip
    notes = {n["id"]: n["text"] for n in dsa["notes"]}
    assert "sim-nsa-backend-ignored" not in notes
    assert notes["sim-attention-kernels"].startswith(
        "--nsa-prefill-backend flashmla_sparse --nsa-decode-backend fa3:"
    )
