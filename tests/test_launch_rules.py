"""Every launch kvplan prints either runs as planned or is refused with what would fit, checked
against the engines' own rules rather than against kvplan's planner:

- the command line is parsed by an argparse model of the flags (the spellings of vLLM's
  `vllm serve` EngineArgs and SGLang's ServerArgs), so a typo or a flag without its value fails;
- vLLM starts only if its KV pool holds one max_model_len request (vllm/v1/core/
  kv_cache_utils.py, _check_enough_kv_cache_memory: "To serve at least one request with the
  models's max seq len ..."); kvplan's reproduction of vLLM 0.19 (kvplan.engines.vllm, pinned to
  56 start-up logs by test_vllm_logs) takes the parsed flags and must hold the seats;
- SGLang gives each DP-attention rank max_running_requests // dp_size (srt/managers/tp_worker.py:
  `server_args.max_running_requests // (server_args.dp_size if server_args.enable_dp_attention
  else 1)`), so that quotient must be the rank's planned seats.
"""

from __future__ import annotations

import argparse
import json
import shlex

import pytest
import yaml

from kvplan.engines import EngineRequest
from kvplan.engines.vllm import vllm_allocation
from kvplan.inputs.hardware import load_profile as load_gpu
from kvplan.inputs.sources import load_model
from kvplan.plans.capacity import CapacityRequest, capacity_for_launch

from helpers import run_cli


def vllm_parser() -> argparse.ArgumentParser:
    """The `vllm serve` flags kvplan emits, typed as EngineArgs types them."""
    p = argparse.ArgumentParser(prog="vllm serve", exit_on_error=False)
    p.add_argument("model")
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--kv-cache-dtype", choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"))
    p.add_argument("--max-num-seqs", type=int, required=True)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", type=int, default=1)
    p.add_argument("--data-parallel-size", type=int, default=1)
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--block-size", type=int, choices=(1, 8, 16, 32, 64, 128, 256))
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--quantization")
    p.add_argument("--dtype")
    return p


def sglang_parser() -> argparse.ArgumentParser:
    """The `python -m sglang.launch_server` flags kvplan emits, typed as ServerArgs types them."""
    p = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    p.add_argument("--model-path", required=True)
    p.add_argument("--context-length", type=int, required=True)
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--max-running-requests", type=int, required=True)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--page-size", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--quantization")
    p.add_argument("--dtype")
    return p


def parse_launch(out: str) -> tuple[str, argparse.Namespace]:
    """The engine and its parsed flags from an emitted command (comments dropped)."""
    text = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
    words = shlex.split(text.replace("\\\n", " "))  # the shell's line continuations
    if words[:2] == ["vllm", "serve"]:
        return "vllm", vllm_parser().parse_args(words[2:])
    assert words[:3] == ["python", "-m", "sglang.launch_server"], words[:3]
    return "sglang", sglang_parser().parse_args(words[3:])


def vllm_rule_check(model: str, gpu: str, args: argparse.Namespace) -> None:
    """vLLM 0.19's start-up on the parsed flags: it starts, and its pool holds the seats."""
    request = EngineRequest(
        max_model_len=args.max_model_len,
        kv_cache_dtype=args.kv_cache_dtype or "auto",
        block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        tp=1 if args.data_parallel_size > 1 else args.tensor_parallel_size,
        pp=args.pipeline_parallel_size,
        gpu_mem_util=args.gpu_memory_utilization,
        quantization=args.quantization,
        max_num_seqs=args.max_num_seqs,
    )
    result = vllm_allocation(load_model(model), load_gpu(gpu), request)
    assert result.fits, f"vLLM would refuse to start: {model} on {gpu} {vars(args)}"
    assert int(result.max_concurrency) >= args.max_num_seqs, (result.max_concurrency, vars(args))


# Dense models where --data-parallel-size does not apply (vLLM's DP+EP is MoE-only in kvplan)
LAUNCHES = [
    ("llama-3.1-8b", "h100", "8k", ()),
    ("llama-3.1-8b", "rtx-4090", "32k", ("--kv-dtype", "fp8")),
    ("llama-3.1-70b", "h100", "32k", ()),
    ("llama-3.1-70b", "h100", "32k", ("--tp", "8")),
    ("llama-3.1-70b", "h100", "32k", ("--num-gpus", "8")),
    ("llama-3.1-70b", "h100", "32k", ("--tp", "2", "--weights-dtype", "fp8")),
    ("llama-3.1-70b", "h200", "128k", ()),
    ("qwen3-32b", "h100", "32k", ("--users", "100")),
    ("qwen2.5-72b", "a100", "16k", ()),
    # MLA: vLLM picks the block (64 for FlashMLA's fp8 cache, 32 on Blackwell)
    ("deepseek-v2-lite", "h100", "32k", ("--kv-dtype", "fp8")),
    ("deepseek-v2-lite", "b200", "32k", ()),
    # DSA with an fp8 cache: vLLM stores fp8_ds_mla (656 B a token, not the 576 of an fp8
    # latent), so it holds 27 where the engine-free plan counts 31: the launch carries 27
    ("deepseek-v3.2", "h200", "32k", ("--kv-dtype", "fp8", "--tp", "8")),
    ("gemma-3-27b", "h100", "32k", ()),  # sliding windows: vLLM's hybrid groups
]


@pytest.mark.parametrize(("model", "gpu", "ctx", "extra"), LAUNCHES)
def test_every_vllm_launch_starts_and_holds_its_seats(model, gpu, ctx, extra):
    code, out, err = run_cli(
        "capacity", model, "--gpu", gpu, "--ctx", ctx, *extra, "--emit", "vllm"
    )
    assert code == 0, err
    engine, args = parse_launch(out)
    assert engine == "vllm"
    vllm_rule_check(model, gpu, args)


def test_a_plan_that_does_not_fit_is_refused_with_what_would():
    # issue 30: Llama-3.1-70B bf16 on TP 2 at 32k printed --max-num-seqs 1 and exit 0; vLLM's
    # pool (1.48 GiB) cannot hold the 5 GiB of one 32k request, so it refuses to start
    for target in ("vllm", "sglang", "vllm-docker", "vllm-k8s"):
        code, out, err = run_cli(
            "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--ctx", "32k",
            "--emit", target,
        )  # fmt: skip
        assert code == 2 and out == "", target
        assert len(err.strip().splitlines()) == 1
        assert "TP 4 on 4 x H100 SXM holds 13" in err and "(--tp 4)" in err
        assert "fp8 weights on TP 2 hold" in err and "--weights-dtype fp8" in err
    # what it names does launch, and vLLM's own rule agrees
    code, out, err = run_cli(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--ctx", "32k",
        "--weights-dtype", "fp8", "--emit", "vllm",
    )  # fmt: skip
    assert code == 0, err
    vllm_rule_check("llama-3.1-70b", "h100", parse_launch(out)[1])
    # the launch at the engine's own start-up check: the same plan is one it refuses
    args = vllm_parser().parse_args(
        shlex.split("m --max-model-len 32768 --max-num-seqs 1 --tensor-parallel-size 2")
    )
    with pytest.raises(AssertionError, match="refuse to start"):
        vllm_rule_check("llama-3.1-70b", "h100", args)


def test_sglang_dp_attention_gets_the_total_sglang_divides():
    # issue 30: --max-running-requests 13 under --dp-size 8 ran 13 // 8 = 1 per rank
    plan = json.loads(
        run_cli("capacity", "deepseek-v3", "--gpu", "h200", "--ctx", "32k",
                "--dp-attention", "8", "--format", "json")[1]
    )  # fmt: skip
    assert plan["dp_attention"] == 8 and plan["max_concurrency"] >= 8
    # the launch carries SGLang's own pool (kvplan.plans.capacity._sglang_seats: the dense
    # MLPs and head split over the group leave more room than the engine-free plan's vLLM rule)
    sglang = capacity_for_launch(
        load_model("deepseek-v3"),
        load_gpu("h200"),
        CapacityRequest(context_len=32768, dp_attention=8),
        "sglang",
        False,
    )
    per_rank = sglang.max_concurrency // 8
    assert per_rank >= plan["max_concurrency"] // 8
    code, out, err = run_cli(
        "capacity", "deepseek-v3", "--gpu", "h200", "--ctx", "32k", "--dp-attention", "8",
        "--emit", "sglang",
    )  # fmt: skip
    assert code == 0, err
    engine, args = parse_launch(out)
    assert engine == "sglang" and args.enable_dp_attention and args.dp_size == 8
    # SGLang's own arithmetic (tp_worker.py) gives each rank what the plan counted
    assert args.max_running_requests // (args.dp_size if args.enable_dp_attention else 1) == (
        per_rank
    )
    # vLLM's -dp starts one engine core (and scheduler) per rank: its flag is the rank's
    code, out, err = run_cli(
        "capacity", "deepseek-v3", "--gpu", "h200", "--ctx", "32k", "--dp-attention", "8",
        "--emit", "vllm",
    )  # fmt: skip
    assert code == 0, err
    _, args = parse_launch(out)
    assert args.data_parallel_size == 8 and args.max_num_seqs == plan["max_concurrency"] // 8


def test_mla_launches_leave_vllm_its_backend_block():
    # FlashMLA takes blocks of 64, CUTLASS MLA 128 (get_supported_kernel_block_sizes): a launch
    # that forces --block-size 16 on them does not run as planned
    code, out, err = run_cli("capacity", "deepseek-v2-lite", "--gpu", "h100", "--emit", "vllm")
    assert code == 0, err
    _, args = parse_launch(out)
    assert args.block_size is None
    vllm_rule_check("deepseek-v2-lite", "h100", args)
    # where vLLM picks another block (FlashMLA for an fp8 cache on Hopper: 64), the plan counts
    # in it, so the seats are the engine's
    code, out, err = run_cli(
        "capacity", "deepseek-v2-lite", "--gpu", "h100", "--kv-dtype", "fp8", "--emit", "vllm"
    )
    assert code == 0, err
    _, args = parse_launch(out)
    assert args.block_size is None and args.kv_cache_dtype == "fp8"
    vllm_rule_check("deepseek-v2-lite", "h100", args)
    # a block the user gives is kept
    code, out, _ = run_cli(
        "capacity", "deepseek-v2-lite", "--gpu", "h100", "--block-size", "64", "--emit", "vllm"
    )
    assert parse_launch(out)[1].block_size == 64
    # dense models keep the block the plan counted in
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm")
    assert parse_launch(out)[1].block_size == 16


def test_kubernetes_keeps_the_weights_and_lands_on_the_gpu_planned():
    code, out, err = run_cli(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--ctx", "32k", "--emit", "vllm-k8s"
    )
    assert code == 0, err
    docs = {d["kind"]: d for d in yaml.safe_load_all(out)}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    # NVIDIA GPU Feature Discovery's label: the driver's product name, spaces as dashes
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    cache = next(v for v in pod["volumes"] if v["name"] == "hf-cache")
    claim = docs["PersistentVolumeClaim"]
    assert cache == {
        "name": "hf-cache",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    }
    assert "emptyDir" not in cache
    # 141 GB of bf16 weights (131 GiB) fit in the claim
    assert int(claim["spec"]["resources"]["requests"]["storage"].removesuffix("Gi")) > 131


def test_i_have_n_gpus_is_answered_on_them():
    def plan(*extra, expect=0):
        code, out, err = run_cli(
            "capacity", "llama-3.1-70b", "--gpu", "h100", "--ctx", "32k", *extra, "--format", "json"
        )
        assert code == expect, err  # capacity's fits: NO exits 1
        return json.loads(out)

    # issue 30: 8 H100s gave two replicas of TP 4 (26) where one TP 8 holds 40
    eight = plan("--num-gpus", "8")
    assert (eight["tp"], eight["replicas"], eight["max_concurrency"]) == (8, 1, 40)
    assert eight["deployment_chosen_by"] == "most-users-on-gpus"
    # 2 GPUs: no error about a TP 4 kvplan chose itself; fits NO on them, with what would
    two = plan("--num-gpus", "2", expect=1)
    assert (two["tp"], two["num_gpus"], two["fits"], two["max_concurrency"]) == (2, 2, False, 0)
    kinds = {(r["kind"], r["weights_dtype"]): r for r in two["remedies"]}
    assert kinds[("weights_dtype", "fp8")]["max_concurrency"] >= 1  # Llama-3.1-70B fp8 on 2
    assert kinds[("layout", "bf16")]["num_gpus"] == 4
    # 6 GPUs: one TP 4 replica, two idle (said so)
    six = plan("--num-gpus", "6")
    assert (six["tp"], six["replicas"], six["num_gpus"]) == (4, 1, 4)
    assert any(n["id"] == "gpus-idle" for n in six["notes"])
    # the what-if table weighs weights formats (the change that fits 70B on 2 H100s)
    rows = {r["scenario"]: r["max_concurrency"] for r in two["what_if"]}
    assert rows["weights fp8"] >= 1 and rows["weights int4"] >= rows["weights fp8"]
    # a layout the user fixes still has to divide the GPUs
    code, _, err = run_cli("capacity", "llama-3.1-70b", "--tp", "4", "--num-gpus", "6")
    assert code == 2 and "not a multiple" in err
