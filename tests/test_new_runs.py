"""The published runs from sources kvplan had not used (tests/data/sim_bench_cases_new.json, issue
34's validation on unseen runs): the file's schema, the copied numbers' internal consistency, what
the replay takes and refuses, and that no interval is calibrated on them. Simulating them is
`scripts/sim_accuracy.py --heldout new`."""

from __future__ import annotations

import json
import math
import re

import pytest

from kvplan.errors import KvplanError
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.quantization import read_quantization
from kvplan.inputs.sources import load_model

from helpers import load_script
from sim_cases import HELDOUT, RECORD_FIELDS, load_cases
from sim_replay import DATA, needs, replayed_model, serve_argv, simulate_argv

CASES = load_cases(HELDOUT["new"])
FIELDS = RECORD_FIELDS
MEASURED = {
    "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
    "p99_tpot_ms", "median_itl_ms", "duration_s", "completed",
}  # fmt: skip


def test_every_run_has_the_schema_and_is_held_out():
    assert len({c["id"] for c in CASES}) == len(CASES) >= 30
    for case in CASES:
        assert FIELDS <= set(case) <= FIELDS | {"kvplan_model", "replay_flags"}, case["id"]
        assert case["split"] == "validate", case["id"]  # nothing is calibrated on them
        assert case["engine"] in ("vllm", "sglang") and case["dataset"] in ("random", "sharegpt")
        assert re.fullmatch(
            r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+?(#L\d+)?", case["url"]
        ), case["id"]
        assert set(case["measured"]) <= MEASURED and case["measured"], case["id"]
        for value in (case["input_len"], case["output_len"], *case["measured"].values()):
            assert isinstance(value, int | float) and math.isfinite(value) and value > 0
        # the release as the source states it; where it states none, the notes say so
        assert case["engine_version"] or "is not stated" in case["notes"], case["id"]
        load_profile(case["gpu_profile"])
    assert len({c["source"] for c in CASES}) >= 3


def test_copied_numbers_agree_with_each_other():
    """Request and output throughput against the printed duration and totals, and, where a page
    prints throughputs only, the output length is their ratio."""
    checked = 0
    for case in CASES:
        m = case["measured"]
        if "duration_s" in m:
            if "request_throughput" in m:  # DataCrunch's output files print none
                rate = m["completed"] / m["duration_s"]
                assert m["request_throughput"] == pytest.approx(rate, rel=0.01), case["id"]
            tokens = case["output_len"] * m["completed"] / m["duration_s"]
            assert m["output_throughput"] == pytest.approx(tokens, rel=0.01), case["id"]
            checked += 1
        elif "output_throughput" in m:
            ratio = m["output_throughput"] / m["request_throughput"]
            assert case["output_len"] == pytest.approx(ratio, abs=0.06), case["id"]
            checked += 1
    assert checked >= 25


def test_the_fp8_checkpoint_replays_on_its_kept_config():
    """meta-llama/Llama-3.1-405B-FP8 is not bundled: its runs replay on the config kept beside the
    cases, FBGEMM FP8 in the MLPs with attention in bf16, resolved from the repository root."""
    dstack = [c for c in CASES if c["model"] == "meta-llama/Llama-3.1-405B-FP8"]
    assert dstack
    for case in dstack:
        path = replayed_model(case)
        assert path == str(DATA / "new_runs_configs" / "Llama-3.1-405B-FP8")
        if not needs(case):  # the H100 launch replays (the MI300X one is refused below)
            assert simulate_argv(case)[1] == path
    config = json.loads(
        (DATA / "new_runs_configs" / "Llama-3.1-405B-FP8" / "config.json").read_text()
    )
    quant = read_quantization(config, {}, "meta-llama/Llama-3.1-405B-FP8")
    assert quant.format == "fp8-tensor" and quant.parts is not None
    assert "mlp" in quant.parts and "attention" not in quant.parts
    # the same layers as the bundled config, and weights between fp8 and bf16 throughout
    spec, bundled = load_model(path), load_model("llama-3.1-405b")
    assert spec.num_layers == bundled.num_layers
    ffn_only = weight_bytes(spec, resolve_weights_dtype(spec, "auto")[0])
    assert weight_bytes(bundled, "fp8") < ffn_only < weight_bytes(bundled, "bf16")
    # a bundled name or a Hub id is passed as it is
    assert replayed_model({"model": "meta-llama/Llama-3.1-8B-Instruct"}) == (
        "meta-llama/Llama-3.1-8B-Instruct"
    )


def test_what_the_replay_takes_and_what_it_refuses():
    by_id = {c["id"]: c for c in CASES}
    replayed = {cid for cid, c in by_id.items() if not needs(c)}
    assert {c["engine"] for c in CASES if c["id"] in replayed} == {"vllm", "sglang"}
    for cid, case in by_id.items():
        lacks = needs(case)
        if "--max-seq-len-to-capture" in case["serve_cmd"]:
            # its VLLM_RPC_TIMEOUT (a wait's limit) and VLLM_USE_TRITON_FLASH_ATTN (a ROCm
            # kernel choice) are taken; V0's eager fallback past the captured length is not
            assert lacks == [
                "--max-seq-len-to-capture: a serve flag kvplan simulate does not take"
            ], cid
        else:  # vLLM 0.6's multi-step launches included (V0 rules)
            assert lacks == [], cid
    # vLLM's server module, its underscore spellings and argparse prefixes, V0 multi-step
    assert serve_argv(
        "python -m vllm.entrypoints.openai.api_server --model m --num-scheduler-steps 10 "
        "--tensor 4 --max_model_len=4096"
    ) == ["--num-scheduler-steps", "10", "--tp", "4", "--max-model-len", "4096"]
    # a dotted key keeps its JSON spelling (the features file's MTP launches)
    dotted = "vllm serve m --speculative-config.num_speculative_tokens 3 --max_num_seqs 8"
    assert serve_argv(dotted) == [
        "--max-num-seqs",
        "8",
        "--speculative-config",
        '{"num_speculative_tokens": 3}',
    ]
    # SGLang's argparse prefix of --mem-fraction-static
    assert serve_argv(
        "python -m vllm.entrypoints.openai.api_server --model m --disable-log-requests -tp 2"
    ) == ["--tp", "2"]
    assert serve_argv("python -m sglang.launch_server --model-path m --mem-frac 0.88") == [
        "--mem-fraction-static",
        "0.88",
    ]
    with pytest.raises(KvplanError, match="not a vllm serve"):
        serve_argv("text-generation-launcher --model-id m")


def test_no_interval_is_calibrated_on_them():
    calibrate = load_script("calibrate_intervals")
    new = {c["id"] for c in CASES}
    assert not new & {c["id"] for c in calibrate.calibration_cases()}
    assert not new & {c["id"] for c in calibrate.heldout_cases()}


def test_random_runs_replay_the_clients_own_draw():
    """DataCrunch's commands abbreviate the flags (--num-prompt, --random-input): the replay
    reads them as argparse does and draws sglang.bench_serving's lengths (U[1, L], seed 1),
    whose mean input is the printed one within a token. The printed outputs of that December
    2024 build are the drawn lengths within 3% (0.7 to 14 tokens a request: its own count of
    the generated tokens, not the draw's), so the replay's outputs are the client's draw."""
    from kvplan.simulate.workload import BENCH_DEFAULT_SEED, BENCH_RANDOM, bench_random_lengths

    from sim_replay import workload_argv

    checked = 0
    for case in CASES:
        if case["dataset"] != "random":
            continue
        opts = dict(zip(*(iter(workload_argv(case)),) * 2, strict=True))
        law = BENCH_RANDOM[opts["--bench-client"]]
        inputs, outputs = bench_random_lengths(
            law,
            int(opts["--input-len"]),
            int(opts["--output-len"]),
            float(opts.get("--random-range-ratio", 0.0)),
            int(opts["--num-prompts"]),
            int(opts.get("--seed", BENCH_DEFAULT_SEED[law])),
        )
        assert abs(sum(inputs) / len(inputs) - case["input_len"]) <= 1.05, case["id"]
        mean_output = sum(outputs) / len(outputs)
        assert mean_output == pytest.approx(case["output_len"], rel=0.03), case["id"]
        checked += 1
    assert checked >= 10
