"""The engines' MoE kernel switches and the expert splits they refuse (issue 28): vLLM's
--moe-backend and SGLang's --moe-runner-backend are taken as each engine's parser takes them
(exact names, per release), refused with the engine's own words where it refuses the backend for
the weights format, the GPU or the layout, noted as timed on the default tables, and carried by
`plan --emit`; a block-FP8 checkpoint's experts split into widths that are not whole 128-wide
blocks are refused as both engines refuse them at weight creation."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.engines.backends import Backends
from kvplan.engines.moe_backend import check_expert_split
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json

SMALL = ("--num-prompts", "4", "--input-len", "64", "--output-len", "4")


def sim(*argv: str) -> tuple[int, str, str]:
    return run_cli("simulate", *argv, *SMALL)


@pytest.mark.parametrize(
    ("engine", "flag", "value"),
    [
        ("vllm", "--moe-backend", "triton"),
        ("vllm", "--moe-backend", "flashinfer_cutlass"),
        ("sglang", "--moe-runner-backend", "triton_kernel"),
        ("sglang", "--moe-runner-backend", "flashinfer_trtllm"),  # --quantization None: taken
    ],
)
def test_a_named_backend_runs_and_says_its_kernels_are_the_default_tables(engine, flag, value):
    doc = run_json(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine, flag, value, *SMALL
    )
    words = next(n["text"] for n in doc["notes"] if n["id"] == "sim-moe-kernels")
    assert f"{flag} {value}" in words and "not known" in words
    base = run_json("simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine, *SMALL)
    # the kernels are not timed per backend: the run is the engine's default one, to the digit
    assert doc["runs"][0]["bench"] == base["runs"][0]["bench"]


def test_a_dense_model_notes_the_flag_is_unused():
    doc = run_json("simulate", "llama-3.1-8b", "--gpu", "h100", "--moe-backend", "triton", *SMALL)
    words = next(n["text"] for n in doc["notes"] if n["id"] == "sim-moe-kernels")
    assert "no routed experts" in words


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # argparse choices: the Literal's exact names (vLLM's lower-casing validator comes after)
        (("--moe-backend", "TRITON"), "invalid choice: 'TRITON'"),
        (("--moe-backend", ""), "invalid choice: ''"),
        (("--moe-backend", "trit\u0585n"), "invalid choice"),
        (("--moe-backend", "x" * 5000), "invalid choice: 'xxxx"),
        (("--moe-backend", "deep_gemm_mega_moe"), "invalid choice"),  # 0.21's, not 0.19's
        (("--engine", "sglang", "--moe-runner-backend", "marlin"), "choose from 'auto'"),
        (("--engine", "sglang", "--moe-runner-backend", "Triton"), "invalid choice: 'Triton'"),
        # the oracle's map for the experts' format (fused_moe/oracle/unquantized.py)
        (("--moe-backend", "marlin"), "moe_backend='marlin' is not supported for unquantized"),
        (("--moe-backend", "deep_gemm"), "not supported for unquantized MoE"),
        # kernels the device does not run
        (("--moe-backend", "flashinfer_trtllm"), "Blackwell"),
        (("--moe-backend", "aiter"), "ROCm"),
        # SGLang's _handle_moe_kernel_config asserts
        (
            ("--engine", "sglang", "--moe-runner-backend", "flashinfer_cutlass", "-q", "fp8"),
            "Invalid quantization 'fp8'",
        ),
        (
            (
                "--engine",
                "sglang",
                "--tp",
                "2",
                "--ep-size",
                "2",
                "--moe-runner-backend",
                "cutlass",
                "-q",
                "fp8",
            ),
            "only supported with ep_size == 1",
        ),  # fmt: skip
        (
            ("--engine", "sglang", "--engine-version", "0.4.6", "--moe-runner-backend", "triton"),
            "SGLang 0.4.6 has no such flag (it came with 0.5)",
        ),  # fmt: skip
        (("--vllm-version", "0.8", "--moe-backend", "triton"), "no such flag (it came with 0.17)"),
        # 0.17 and 0.18 take the flag; kvplan reads the oracles that refuse names from 0.19
        (("--vllm-version", "0.18", "--moe-backend", "triton"), "from 0.19 on"),
    ],
)
def test_refused_backends_are_one_line_errors(argv, words):
    code, out, err = sim("qwen3-30b-a3b", "--gpu", "h100", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and words in err, err


def test_vllm_021_takes_its_own_names():
    request = EngineRequest(
        engine="vllm", vllm_version="0.21", backends=Backends(moe_backend="emulation")
    )
    with pytest.raises(KvplanError, match="not supported for unquantized MoE"):
        engine_allocation(load_model("qwen3-30b-a3b"), load_profile("h100"), request)
    with pytest.raises(KvplanError, match="invalid choice: 'emulation'"):
        engine_allocation(
            load_model("qwen3-30b-a3b"), load_profile("h100"), request._replace(vllm_version="0.19")
        )


def test_fp8_experts_take_the_fp8_oracle_names():
    spec, h200 = load_model("minimax-m2.5"), load_profile("h200")
    request = EngineRequest(engine="vllm", tp=4, max_model_len=4096)
    for ok in ("triton", "deep_gemm", "cutlass", "marlin"):
        engine_allocation(spec, h200, request._replace(backends=Backends(moe_backend=ok)))
    with pytest.raises(KvplanError, match="not supported for FP8 MoE"):
        engine_allocation(
            spec, h200, request._replace(backends=Backends(moe_backend="flashinfer_cutedsl"))
        )


def test_plan_emit_carries_each_engines_spelling():
    for emit, flag in (("vllm", "--moe-backend"), ("sglang", "--moe-runner-backend")):
        doc = run_json(
            "plan", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
            "--tp", "1", "--max-num-seqs", "64", "--num-prompts", "20", "--input-len", "256",
            "--output-len", "32", "--emit", emit, flag, "triton",
        )  # fmt: skip
        assert doc["mode_flags"] == f"{flag} triton"


def test_plan_refuses_an_unknown_name_before_searching():
    code, out, err = run_cli(
        "plan", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--emit", "sglang", "--moe-runner-backend", "marlin",
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1 and "'marlin'" in err


def test_engine_takes_the_flag():
    code, _, err = run_cli(
        "engine", "qwen3-30b-a3b", "--gpu", "h100", "--moe-backend", "marlin",
    )  # fmt: skip
    assert code == 2 and "not supported for unquantized MoE" in err and err.count("\n") == 1
    code, _, _ = run_cli("engine", "qwen3-30b-a3b", "--gpu", "h100", "--moe-backend", "triton")
    assert code == 0


# MiniMax-M2.5: FP8 blocks of 128 over experts 1,536 wide. TP 8 gives 1,536 / 8 = 192 per rank,
# not whole blocks: vLLM and SGLang stop ("... weight = 192 is not divisible by ... block_n =
# 128", as published runs logged); TP 4 gives 384 = 3 x 128; EP keeps experts whole; SGLang's
# --ep-size 2 of TP 8 leaves TP 4 inside each expert (384).
@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (("--tp", "8"), True),
        (("--tp", "4"), False),
        (("--tp", "8", "--enable-expert-parallel"), False),
        (("--tp", "4", "-dp", "2"), True),  # vLLM's DP without EP: experts over TP x DP = 8
        (("--tp", "8", "--engine", "sglang"), True),
        (("--tp", "8", "--engine", "sglang", "--ep-size", "2"), False),
        (("--tp", "8", "--engine", "sglang", "--ep-size", "8"), False),
    ],
)
def test_block_fp8_experts_split_into_partial_blocks_are_refused(argv, refused):
    code, _, err = sim("minimax-m2.5", "--gpu", "h200", *argv)
    if refused:
        assert code == 2 and err.count("\n") == 1
        assert "weight = 192 is not divisible by weight quantization block_n = 128" in err
    else:
        assert code == 0, err


def test_the_split_rule_by_hand():
    spec = load_model("minimax-m2.5")
    check_expert_split(spec, False, 4)  # 384 = 3 x 128
    check_expert_split(spec, True, 8)  # bf16 given: no blocks
    with pytest.raises(KvplanError, match="= 96 is not divisible"):
        check_expert_split(spec, False, 16)
    check_expert_split(load_model("qwen3-30b-a3b"), False, 16)  # bf16 checkpoint


@pytest.mark.parametrize(
    "argv",
    [
        ("engine", "qwen3-30b-a3b", "--gpu", "h100", "--moe-backend", "\u0663"),
        (
            "engine",
            "qwen3-30b-a3b",
            "--gpu",
            "h100",
            "--engine",
            "sglang",
            "--moe-runner-backend",
            "a" * 100_000,
        ),  # fmt: skip
        ("engine", "qwen3-30b-a3b", "--gpu", "h100", "--moe-backend", "tri\nton"),
        (
            "plan",
            "qwen3-30b-a3b",
            "--gpu",
            "h100",
            "--rate",
            "1",
            "--slo",
            "ttft_p99=5s",
            "--moe-backend",
            "",
        ),  # fmt: skip
        (
            "simulate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--engine-version",
            "\u0660.\u0667",
            "--no-enable-chunked-prefill",
        ),  # fmt: skip
    ],
)
def test_hostile_input_is_one_line(argv):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and len(err) < 400, err
