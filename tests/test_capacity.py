"""Engine-free capacity: the budget arithmetic, sharding, what-ifs, paging and the CLI."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.capacity import CapacityRequest, capacity

from helpers import run_cli, run_json

H100_BYTES = 85_028_896_768  # 79.19 GiB: the exact total CUDA reports (deviceQuery)


def test_budget_and_concurrency_by_hand():
    spec = load_model("llama-3.1-8b")
    data = capacity(
        spec,
        load_profile("h100"),
        CapacityRequest(context_len=32768, reserve_bytes=2 * 2**30, gpu_mem_util=0.9),
    )._asdict()
    pool = H100_BYTES * 0.9 - 8_030_261_248 * 2 - 2 * 2**30
    assert data["kv_pool_bytes_per_gpu"] == pytest.approx(pool)
    per_seq = 32768 * 131_072  # 2,048 whole blocks of 16 tokens
    assert data["max_concurrency"] == math.floor(pool / per_seq)
    assert data["kv_tokens"] == math.floor(pool / (16 * 131_072)) * 16
    longest = data["longest_context"][0]
    assert longest.memory_context_len == math.floor(pool / 131_072 / 16) * 16
    # past the model's 131,072 positions the answer is the positions, and says so
    assert (longest.max_context_len, longest.limited_by) == (131_072, "positions")
    assert data["fits"] is True


def test_weights_that_do_not_fit_say_so():
    data = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--ctx", "8k", "--tp", "1", expect=1
    )
    assert data["fits"] is False and data["max_concurrency"] == 0
    assert any("do not fit" in n for n in (x["text"] for x in data["notes"]))


def test_tensor_parallel_shards_weights_and_kv():
    one = run_json(
        "capacity",
        "llama-3.1-70b",
        "--gpu",
        "h100",
        "--ctx",
        "32k",
        "--tp",
        "4",
        "--reserve",
        "2GiB",
    )
    pool = H100_BYTES * 0.9 - 70_553_706_496 * 2 / 4 - 2 * 2**30
    assert one["kv_pool_bytes_per_gpu"] == pytest.approx(pool)
    assert one["max_concurrency"] == math.floor(pool / (32768 * 327_680 / 4))
    replicas = run_json(
        "capacity",
        "llama-3.1-70b",
        "--gpu",
        "h100",
        "--ctx",
        "32k",
        "--tp",
        "4",
        "--reserve",
        "2GiB",
        "--num-gpus",
        "8",
    )
    assert replicas["max_concurrency"] == 2 * one["max_concurrency"]


def test_pipeline_parallel_most_loaded_stage():
    data = run_json(
        "capacity",
        "llama-3.1-70b",
        "--gpu",
        "h100",
        "--ctx",
        "32k",
        "--pp",
        "3",
        "--reserve",
        "2GiB",
    )
    pool = H100_BYTES * 0.9 - 70_553_706_496 * 2 / 3 - 2 * 2**30
    # 80 layers over 3 stages: 26, 27, 27 (vLLM gives the remainder to the stages before the last)
    assert data["max_concurrency"] == math.floor(pool / (32768 * 27 * 4096))


def test_what_if_rows_and_prefix_sharing():
    data = run_json(
        "capacity",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--ctx",
        "32k",
        "--prefix-tokens",
        "4k",
        "--reserve",
        "2GiB",
    )
    rows = {r["scenario"]: r for r in data["what_if"]}
    base = data["max_concurrency"]
    assert rows["KV fp8"]["max_concurrency"] == pytest.approx(2 * base, abs=1)
    assert rows["half context"]["max_concurrency"] >= 2 * base
    pool = data["kv_pool_bytes_per_gpu"]
    shared = 4096 * 131_072
    expected = math.floor((pool - shared) / ((32768 - 4096) * 131_072))
    assert rows["4,096-token shared prefix"]["max_concurrency"] == expected


def test_paging_against_contiguous():
    data = run_json(
        "capacity",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--ctx",
        "32k",
        "--mean-len",
        "2000",
        "--reserve",
        "2GiB",
    )
    paging = data["paging"]
    pool = data["kv_pool_bytes_per_gpu"]
    assert paging["contiguous_sequences"] == math.floor(pool / (32768 * 131_072))
    assert paging["paged_sequences"] == math.floor(pool / (math.ceil(2000 / 16) * 16 * 131_072))
    assert paging["gain"] > 10


def test_sliding_window_model_capacity_is_bounded_by_the_window():
    short = run_json("capacity", "mistral-7b-v0.1", "--ctx", "8k", "--reserve", "2GiB")
    long = run_json("capacity", "mistral-7b-v0.1", "--ctx", "32k", "--reserve", "2GiB")
    assert short["max_concurrency"] == long["max_concurrency"]


def test_emit_vllm_flags():
    code, out, _ = run_cli(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "32k", "--emit", "vllm"
    )
    assert code == 0
    for flag in (
        "--max-model-len 32768",
        "--kv-cache-dtype auto",
        "--max-num-seqs",
        "--gpu-memory-utilization 0.9",
        "--tensor-parallel-size 4",
        "--block-size 16",
    ):
        assert flag in out


def test_capacity_plot(tmp_path):
    path = tmp_path / "users.svg"
    code, _, err = run_cli("capacity", "qwen3-8b", "--plot", str(path))
    assert code == 0, err
    assert "<svg" in path.read_text()[:500]


def test_json_contract():
    data = run_json("capacity", "qwen3-30b-a3b", "--gpu", "h200")
    for key in (
        "gpu",
        "tp",
        "pp",
        "kv_pool_bytes_per_gpu",
        "kv_tokens",
        "max_concurrency",
        "longest_context",
        "fits",
        "notes",
    ):
        assert key in data


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--gpu-mem-util", "1.5"], "between 0.05 and 1"),
        (["--num-gpus", "3", "--tp", "2"], "not a multiple"),
        (["--block-size", "0"], "not in the range 1<=x<=4096"),
        (["--prefix-tokens", "64k", "--ctx", "8k"], "between 0 and --ctx"),
        (["--reserve", "lots"], "not a size"),
        (["--emit", "trt"], "choose vllm, sglang"),
    ],
)
def test_bad_input(argv, needle):
    code, _, err = run_cli("capacity", "llama-3.1-8b", *argv)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_fits_no_exits_1_with_the_whole_answer():
    # what a script can rely on: 0 fits, 1 fits: NO (output complete), 2 bad input
    for fmt in ("table", "json", "csv", "markdown"):
        code, out, err = run_cli(
            "capacity", "llama-3.1-70b", "--tp", "2", "--ctx", "32k", "--format", fmt
        )
        assert code == 1 and out and "error" not in err, fmt  # csv writes its notes to stderr
    code, out, _ = run_cli("capacity", "llama-3.1-70b", "--tp", "2", "--ctx", "32k", "-f", "json")
    assert json.loads(out)["fits"] is False
    assert run_cli("capacity", "llama-3.1-70b", "--tp", "4", "--ctx", "32k")[0] == 0
    assert run_cli("capacity", "llama-3.1-70b", "--tp", "3")[0] == 2


def test_capacity_engine_points_to_kvplan_engine():
    for argv in (("--engine", "vllm"), ("--engine=sglang",)):
        code, _, err = run_cli("capacity", "llama-3.1-8b", *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "capacity has no --engine" in err and "kvplan engine MODEL --engine" in err
    # other unknown options keep click's words
    code, _, err = run_cli("capacity", "llama-3.1-8b", "--bogus")
    assert code == 2 and "No such option" in err
