"""Decode context parallelism (vLLM -dcp) and eager mode (--enforce-eager /
--disable-cuda-graph) in kvplan simulate: the pool, the step terms, the start-up figures and
the refusals, against hand-computed figures."""

from __future__ import annotations

import pytest

from kvplan.cli.common import load_gpu, load_model
from kvplan.engines import EngineRequest
from kvplan.engines.vllm import vllm_allocation
from kvplan.engines.vllm_memory import CUDA_GRAPH_BASE_BYTES, CUDA_GRAPH_PER_LAYER_BYTES
from kvplan.formulas.batch_step import BatchShape
from kvplan.formulas.comm import dcp_allgather_bytes
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.units import GIB

from helpers import run_cli, run_json

MLA = "DeepSeek-V2-Lite"  # 27 layers, MLA latent 512 + rope 64, 16 query heads, bf16
GPU = "h100-sxm"
SMALL = ("--num-prompts", "20", "--input-len", "256", "--output-len", "32")


@pytest.fixture(scope="module")
def mla():
    return load_model(MLA)


@pytest.fixture(scope="module")
def gpu():
    return load_gpu(GPU)


def test_mla_pool_in_tokens_is_dcp_times_larger(mla, gpu):
    # 10 GiB per GPU given: a page of 16 tokens x (512 + 64) x 2 bytes = 18,432 bytes per
    # layer, 27 layers in the one group: 10 GiB // 18,432 // 27 = 21,575 blocks per rank
    base = EngineRequest(max_model_len=8192, tp=4, block_size=16, kv_cache_memory_bytes=10 * GIB)
    one = vllm_allocation(mla, gpu, base)
    four = vllm_allocation(mla, gpu, base._replace(decode_context_parallel_size=4))
    assert one.page_bytes == 16 * 576 * 2
    assert one.num_blocks == four.num_blocks == 10 * GIB // 18_432 // 27 == 21_575
    assert one.kv_cache_tokens == 21_575 * 16 == 345_200
    assert four.kv_cache_tokens == 4 * 345_200  # vLLM's "GPU KV cache size" x dcp


def test_replica_scheduler_blocks_are_dcp_times_larger(mla, gpu):
    opts = ServeOptions(tp=4, block_size=16, kv_cache_memory_bytes=10 * GIB)
    one = build_replica(mla, gpu, opts)
    four = build_replica(mla, gpu, opts._replace(decode_context_parallel_size=4))
    assert four.config.block_size == 64 and one.config.block_size == 16
    assert four.config.num_blocks == one.config.num_blocks
    assert four.kv_cache_tokens == 4 * one.kv_cache_tokens == 4 * 345_200
    assert "sim-dcp" in {n.id for n in four.notes}


def test_decode_attention_per_rank_and_the_all_gather(mla, gpu):
    opts = ServeOptions(tp=4, kv_cache_memory_bytes=10 * GIB)
    one = build_replica(mla, gpu, opts).model
    four = build_replica(mla, gpu, opts._replace(decode_context_parallel_size=4)).model
    batch, context = 64, 64 * 32_768
    # the cache read per rank: 27 layers x 576 x 2 bytes per token, a quarter of the tokens
    read_one_s, bound_one = one.decode_attention_s(batch, context)
    read_four_s, bound_four = four.decode_attention_s(batch, context)
    assert bound_one and bound_four
    bw = one.mla_rates.bandwidth_bytes_per_s
    assert read_one_s == pytest.approx(27 * 576 * 2 * context / bw)
    assert read_four_s == pytest.approx(27 * 576 * 2 * context / 4 / bw)
    # the all-gather: per layer B x (16 heads x 4 / 4 tp) x (512 x 2 + 4 LSE bytes) x 3/4
    per_layer = 64 * 16 * (512 * 2 + 4) * 3 / 4
    assert per_layer == 789_504
    assert dcp_allgather_bytes(64, 16, 512, 4) == per_layer
    assert four.dcp_bytes(64) == 27 * per_layer
    assert one.dcp_bytes(64) == 0
    link = gpu.interconnect.one_way_bytes_per_s * four.achieved.link
    call_s = four.achieved.allreduce_call_s_at(4)  # the 4-GPU call
    expected_s = 27 * (per_layer / link + call_s)  # 3 hops at a third of a call's latency
    assert four.dcp_comm_s(64) == pytest.approx(expected_s)
    shape = BatchShape(num_decodes=batch, decode_context_sum=context, num_sampled=batch)
    step_one, step_four = one.step(shape), four.step(shape)
    assert step_four.terms_s["comm_s"] - step_one.terms_s["comm_s"] == pytest.approx(expected_s)
    assert step_four.terms_s["kv_read_s"] == pytest.approx(read_four_s)


def test_enforce_eager_pays_the_launches_at_small_batch(gpu):
    spec = load_model("Llama-3.1-8B")
    graphs = build_replica(spec, gpu, ServeOptions()).model
    eager = build_replica(spec, gpu, ServeOptions(enforce_eager=True)).model
    assert eager.cuda_graph_max_tokens == 0
    shape = BatchShape(num_decodes=1, decode_context_sum=1000, num_sampled=1)
    extra = eager.step(shape).total_s - graphs.step(shape).total_s
    # 32 layers x (0.8 ms eager dispatch - 32 us under graphs) = 24.576 ms, and the 4 GEMM
    # launches a layer (qkv, o, gate|up, down) the graph-replayed step no longer charges: the
    # H100's vLLM GEMM grid times hold them (gemm_calls), 32 x 4 x 3.2 us = 0.41 ms
    assert graphs.host.eager_per_layer_s == pytest.approx(0.8e-3)
    assert graphs.host.per_layer_s == pytest.approx(32e-6)
    assert graphs.gemm_calls is not None
    per_launch = graphs.host.per_layer_s / graphs.host.reference_layer_launches
    assert per_launch == pytest.approx(3.2e-6)
    want = 32 * (0.8e-3 - 32e-6) + 32 * 4 * per_launch
    assert extra == pytest.approx(want) == pytest.approx(24.9856e-3)
    big = BatchShape(num_decodes=600, decode_context_sum=600_000, num_sampled=600)
    assert eager.step(big).total_s == graphs.step(big).total_s  # past 512 tokens both eager


def test_enforce_eager_takes_no_graph_memory(gpu):
    spec = load_model("Llama-3.1-8B")
    request = EngineRequest(max_model_len=8192, vllm_version="0.21")
    graphs = vllm_allocation(spec, gpu, request)
    eager = vllm_allocation(spec, gpu, request._replace(enforce_eager=True))
    # vLLM 0.21 subtracts its CUDA-graph estimate: a + b x 32 layers
    graph_bytes = CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * 32
    assert eager.available_kv_bytes - graphs.available_kv_bytes == graph_bytes
    assert eager.kv_cache_tokens > graphs.kv_cache_tokens


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--tp", "4", "-dcp", "3"), "must divide --tensor-parallel-size 4"),
        (("--tp", "4", "-dcp", "0"), "must be between 1 and 1,024"),
        (("--tp", "4", "-dcp", "2", "--engine", "sglang"), "SGLang has no decode context"),
        (("--tp", "2", "--dcp", "2"), "at most tp / KV heads"),  # Llama: 8 KV heads
    ],
)
def test_bad_dcp_exits_2_with_one_line(argv, words):
    model = "Llama-3.1-8B" if "--dcp" in argv else MLA
    code, out, err = run_cli("simulate", model, "--gpu", GPU, *SMALL, *argv)
    assert code == 2, err
    assert words in err and len(err.strip().splitlines()) == 1


def test_json_shows_the_settings_and_notes():
    data = run_json("simulate", MLA, "--gpu", GPU, "--tp", "4", "-dcp", "4", *SMALL)
    text = str(data)
    assert "'decode_context_parallel_size': 4" in text
    assert "sim-dcp" in text
    data = run_json("simulate", "Llama-3.1-8B", "--gpu", GPU, "--enforce-eager", *SMALL)
    text = str(data)
    assert "'enforce_eager': True" in text and "sim-enforce-eager" in text
    plain = str(run_json("simulate", "Llama-3.1-8B", "--gpu", GPU, *SMALL))
    assert "'enforce_eager': False" in plain and "sim-enforce-eager" not in plain


def test_engine_cache_size_line_counts_dcp_times_the_tokens():
    argv = ("engine", MLA, "--gpu", GPU, "--tp", "4", "--kv-cache-memory", "10GiB")
    code, out, err = run_cli(*argv, "--block-size", "16", "-dcp", "4")
    assert code == 0, err
    assert "GPU KV cache size: 1,380,800 tokens" in out  # 4 x 21,575 blocks x 16 tokens
    code, _, err = run_cli(*argv, "-dcp", "3")
    assert code == 2 and "must divide" in err and len(err.strip().splitlines()) == 1


def test_plan_passes_dcp_to_every_configuration():
    data = run_json(
        "plan", MLA, "--gpu", GPU, "--rate", "2", "--tp", "2,4", "-dcp", "4",
        "--num-prompts", "50", "--max-num-seqs", "128", "--kv-cache-dtype", "auto",
        "--max-num-batched-tokens", "8192", "--slo", "ttft_p99=2s",
    )  # fmt: skip
    text = str(data)
    assert "must divide --tensor-parallel-size 2" in text  # TP 2 ruled out, TP 4 planned
    assert "'tp': 4" in text


def test_plan_launch_commands_carry_dcp_and_eager():
    data = run_json(
        "plan", MLA, "--gpu", GPU, "--rate", "2", "--tp", "4", "-dcp", "4", "--enforce-eager",
        "--num-prompts", "50", "--max-num-seqs", "128", "--kv-cache-dtype", "auto",
        "--max-num-batched-tokens", "8192", "--slo", "ttft_p99=2s",
    )  # fmt: skip
    assert data["mode_flags"] == "--decode-context-parallel-size 4 --enforce-eager"
    assert data["candidates"], data["rejections"]
    for c in data["candidates"]:
        assert c["command"].endswith(" --decode-context-parallel-size 4 --enforce-eager")
    plain = run_json(
        "plan", MLA, "--gpu", GPU, "--rate", "2", "--tp", "4",
        "--num-prompts", "50", "--max-num-seqs", "128", "--kv-cache-dtype", "auto",
        "--max-num-batched-tokens", "8192", "--slo", "ttft_p99=2s",
    )  # fmt: skip
    assert "mode_flags" not in plain
    assert all("context-parallel" not in c["command"] for c in plain["candidates"])
