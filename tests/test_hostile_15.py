"""Hostile inputs, fifteenth round.
1. `kvplan plan MODEL --emit sglang --engine-version R` where release R has no SGLang model for
the checkpoint's architecture (Qwen3.5 on 0.5.2): simulate and engine refuse it in one line, but
plan built all 160 configurations, ruled each out for that one reason and exited 0 with "no
configuration meets the targets".
2. scripts/bench_consistency.py (and the cookbook collector that calls it) on a record whose
numbers no run can print: a median TTFT of 0 ms with one output token, a request rate of 0, a
printed duration of 0 s ended in ZeroDivisionError; a negative or NaN median gave a negative or
NaN implied throughput that flagged (or silently passed) the run; a run with no completed
request was checked against the prompts it sent. The collector
(scripts/collect_external_runs.py) divided by a printed duration or throughput of 0 and ran
int() on an --num-prompts of "$N" before any check: a traceback for the whole page.
3. `kvplan plan --emit sglang --mamba-scheduler-strategy bogus` (or extra_buffer for a model
without recurrent state) ruled out every configuration for that one reason and exited 0 with
"no configuration meets the targets", where simulate and engine refuse it in one line; and a
strategy given as `EXTRA_BUFFER` was printed as given in every launch command, which SGLang's
argument parser (case-sensitive choices) refuses.
4. `kvplan plan llama-3.1-8b --emit vllm --speculative-config '{"method": "mtp", ...}'` ruled
out every configuration ("has no MTP layers") and exited 0; SGLang's NEXTN on the same model
is refused in one line before the search.
5. `kvplan engine --engine sglang --speculative-algorithm NEXTN` on a hybrid (or a release whose
pool holds the draft) pointed to `kvplan simulate ... NEXTN --speculative-draft-model-path ...`:
NEXTN drafts with the checkpoint's own MTP layers and takes no draft path.
6. `kvplan simulate --engine sglang --engine-version 0.5.2 --speculative-algorithm STANDALONE
--speculative-draft-model-path DRAFT` with a draft whose architecture 0.5.2 has no model for ran:
the target's own model was gated by release, the draft, which SGLang loads through the same
ModelRegistry, was not. And `kvplan plan` with a draft model that is none (a missing file), of
another vocabulary or of such an architecture (vLLM draft_model, SGLang STANDALONE) ruled out
every speculative layout for that one reason and planned without it, exit 0."""

from __future__ import annotations

import math

import pytest

from helpers import REPO, load_script, run_cli

consistency = load_script("bench_consistency")


def one_line_error(code: int, out: str, err: str) -> None:
    assert code == 2 and out == "", err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


# ---- 1. plan --emit sglang on a release without the checkpoint's model -------------------------
def test_plan_refuses_a_release_without_the_models_sglang_class_before_the_search():
    code, out, err = run_cli(
        "plan", "qwen3.5-35b-a3b", "--emit", "sglang", "--engine-version", "0.5.2", "--gpu",
        "h200", "--rate", "1", "--slo", "ttft_p99=5s", "--num-prompts", "20", "--max-gpus", "1",
        "--jobs", "1", "--format", "json",
    )  # fmt: skip
    one_line_error(code, out, err)
    assert "SGLang 0.5.2 has no model for Qwen3_5MoeForConditionalGeneration" in err, err
    assert "0.5.9" in err, err


def test_the_plan_gate_is_the_engines_own():
    """The release that has the model passes the same check (plan's twin: the engine's rule)."""
    from kvplan.engines.sglang import check_sglang_own_model
    from kvplan.errors import KvplanError
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import PlanRequest, _check_sglang_flags

    spec = load_model("qwen3.5-35b-a3b")
    check_sglang_own_model(spec, "0.5.9")
    fields = dict(rate=1.0, slos=(), emit="sglang")
    _check_sglang_flags(spec, PlanRequest(**fields, engine_version="0.5.9"))
    _check_sglang_flags(spec, PlanRequest(**fields))  # the default release
    _check_sglang_flags(spec, PlanRequest(**{**fields, "emit": "vllm"}, engine_version="0.19"))
    with pytest.raises(KvplanError, match="no model for Qwen3_5Moe"):
        _check_sglang_flags(spec, PlanRequest(**fields, engine_version="0.5.8.post1"))


# ---- 2. the consistency check on records no run prints -----------------------------------------
def record(**kw) -> dict:
    """10 requests one at a time, 400 output tokens each, TTFT 50 ms, TPOT 10 ms, 100 tok/s."""
    measured = {
        "median_ttft_ms": 50.0,
        "median_tpot_ms": 10.0,
        "completed": 10,
        "output_throughput": 100.0,
        "duration_s": 40.0,
    }
    measured.update(kw.pop("measured", {}))
    base = {
        "id": "x",
        "num_prompts": 10,
        "max_concurrency": 1,
        "request_rate": None,
        "output_len": 400.0,
        "measured": measured,
    }
    return {**base, **kw}


HOSTILE = {
    "no latency": record(output_len=1.0, measured={"median_ttft_ms": 0.0}),
    "zero medians": record(measured={"median_ttft_ms": 0.0, "median_tpot_ms": 0.0}),
    "rate 0": record(max_concurrency=4, request_rate=0.0),
    "negative rate": record(max_concurrency=4, request_rate=-1.0),
    "nan rate": record(max_concurrency=4, request_rate=math.nan),
    "negative TTFT": record(measured={"median_ttft_ms": -5000.0}),
    "NaN TTFT": record(measured={"median_ttft_ms": math.nan}),
    "inf TPOT": record(measured={"median_tpot_ms": math.inf}),
    "text TTFT": record(measured={"median_ttft_ms": "50"}),
    "bool TPOT": record(measured={"median_tpot_ms": True}),
    "no output": record(output_len=0.0),
    "negative concurrency": record(max_concurrency=-3),
    "no request completed": record(measured={"completed": 0, "output_throughput": 0.0}),
    "completed a fraction": record(measured={"completed": 2.5}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_record_no_run_prints_is_not_checked_and_never_flagged(name):
    case = HOSTILE[name]
    implied = consistency.implied_output_throughput(case)
    assert implied.output_throughput is None, implied
    assert implied.basis.startswith("not checked: "), implied.basis
    row = consistency.check(case)
    assert row.ratio is None and not row.flagged


def test_the_rules_still_check_a_record_with_sound_numbers():
    sound = consistency.check(record())
    latency_s = 0.050 + 399 * 0.010
    assert sound.implied.output_throughput == pytest.approx(400 / latency_s)
    assert sound.ratio == pytest.approx(100.0 / (400 / latency_s)) and not sound.flagged
    # a TTFT of 0 with more than one output token still has a latency: checked
    assert consistency.check(record(measured={"median_ttft_ms": 0.0})).ratio is not None
    # concurrency 0 reads as none given (every request at once), as before
    at_once = consistency.implied_output_throughput(record(max_concurrency=0))
    assert at_once.output_throughput is None and "slowest" in at_once.basis


@pytest.mark.parametrize("duration", [0.0, -1.0, math.nan, math.inf, "40"])
def test_the_one_off_reading_needs_a_printed_duration(duration):
    case = record(measured={"duration_s": duration, "output_throughput": 40.0})
    assert consistency.sequential_one_off(case, 4000.0, 4000.0) is None
    # the same record with its duration: the means account for it (10 x 4 s of 40 s)
    sound = consistency.sequential_one_off(record(measured={"output_throughput": 40.0}), 4000.0, 4000.0)  # fmt: skip
    assert sound is not None and sound["metrics"] == ["output_throughput"]


# ---- 2b. the collector drops such a block with its reason --------------------------------------
def cookbook_block(**measured) -> dict:
    """A printed block of the SGLang cookbook as runs_in reads it (Llama4.md#L312's numbers)."""
    printed = {
        "completed": 10,
        "duration_s": 68.08,
        "total_input_tokens": 6101,
        "total_output_tokens": 4220,
        "output_throughput": 61.99,
        "median_ttft_ms": 57.45,
        "median_tpot_ms": 5.96,
        "printed_concurrency": 1,
    }
    return {
        "line": 312,
        "hardware": "Hardware: AMD MI300x GPU",
        "heading": "### 5.1.1 Low Concurrency (Latency-Optimized)",
        "version": "sglang version: 0.5.9",
        "serve": "sglang serve --model-path meta-llama/Llama-4-Maverick-17B-128E-Instruct --tp 8",
        "bench": "python3 -m sglang.bench_serving --backend sglang --dataset-name random "
        "--random-input-len 1000 --random-output-len 1000 --num-prompts 10 --max-concurrency 1",
        "added": None,
        "measured": {**printed, **measured},
        "path": "docs/autoregressive/Llama/Llama4.md",
    }


@pytest.fixture(scope="module")
def collect():
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    return load_script("collect_external_runs")


@pytest.mark.parametrize(
    "measured",
    [
        {"duration_s": 0.0},
        {"output_throughput": 0.0},
        {"completed": 0},
        {"median_ttft_ms": "nan"},
        {"median_tpot_ms": math.nan},
        {"median_ttft_ms": -1.0},
        {"total_output_tokens": math.inf},
    ],
)
def test_the_collector_drops_a_block_of_figures_no_run_prints(collect, measured):
    case, why = collect.case_of(cookbook_block(**measured))
    assert case is None and "not a figure a completed run prints" in why, why
    assert next(iter(measured)) in why


@pytest.mark.parametrize(
    "bench",
    [
        "--num-prompts $N --max-concurrency 1",
        "--num-prompts 10 --max-concurrency one",
        "--num-prompts 10.5 --max-concurrency 1",
        "--num-prompts 10 --max-concurrency 1 'unclosed",
    ],
)
def test_the_collector_drops_a_block_whose_commands_give_no_number(collect, bench):
    raw = cookbook_block()
    raw["bench"] = raw["bench"].replace("--num-prompts 10 --max-concurrency 1", bench)
    case, why = collect.case_of(raw)
    assert case is None and why.startswith("the commands give a number no run takes"), why


def test_the_collector_keeps_the_sound_block(collect):
    case, why = collect.case_of(cookbook_block())
    assert case is not None, why
    assert case["measured"]["duration_s"] == 68.08 and case["num_prompts"] == 10


# ---- 3. plan's mamba strategy: checked before the search, launched as SGLang spells it ---------
PLAN_HYBRID = (
    "plan", "qwen3.5-35b-a3b", "--emit", "sglang", "--gpu", "h200", "--rate", "1", "--slo",
    "ttft_p99=5s", "--num-prompts", "20", "--max-gpus", "1", "--jobs", "1", "--tp", "1",
    "--max-num-seqs", "8", "--max-num-batched-tokens", "2048", "--kv-cache-dtype", "auto",
    "--engine-version", "0.5.14",
)  # fmt: skip


@pytest.mark.parametrize(
    "model, strategy, says",
    [
        ("qwen3.5-35b-a3b", "bogus", "choose no_buffer or extra_buffer"),
        ("qwen3.5-35b-a3b", "extra-buffer", "choose no_buffer or extra_buffer"),
        ("llama-3.1-8b", "extra_buffer", "needs a model with recurrent state"),
    ],
)
def test_plan_refuses_a_mamba_strategy_sglang_refuses_before_the_search(model, strategy, says):
    argv = list(PLAN_HYBRID)
    argv[1] = model
    code, out, err = run_cli(*argv, "--mamba-scheduler-strategy", strategy, "--format", "json")
    one_line_error(code, out, err)
    assert says in err, err


def test_the_strategy_name_is_sglangs_spelling():
    from kvplan.engines.sglang import mamba_strategy_name
    from kvplan.errors import KvplanError

    assert mamba_strategy_name(" EXTRA_BUFFER ") == "extra_buffer"
    assert mamba_strategy_name(None) == "no_buffer"
    with pytest.raises(KvplanError, match="choose no_buffer or extra_buffer"):
        mamba_strategy_name("extra")


def test_plan_launches_the_strategy_as_sglang_spells_it():
    from kvplan.plans.plan import PlanRequest, mode_flags

    request = PlanRequest(
        rate=1.0, slos=(), emit="sglang", engine_version="0.5.14",
        mamba_scheduler_strategy=" EXTRA_BUFFER",
    )  # fmt: skip
    assert mode_flags(request) == "--mamba-radix-cache-strategy extra_buffer"


# ---- 4. an MTP draft of a checkpoint without MTP layers, refused before plan's search ----------
def test_plan_refuses_a_vllm_mtp_draft_of_a_model_without_mtp_layers():
    from kvplan.errors import KvplanError
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import PlanRequest, _check_speculative

    mtp = '{"method": "mtp", "num_speculative_tokens": 3}'
    request = PlanRequest(rate=1.0, slos=(), emit="vllm", speculative_config=mtp)
    with pytest.raises(KvplanError, match="llama-3.1-8b has no MTP layers"):
        _check_speculative(load_model("llama-3.1-8b"), request)
    _check_speculative(load_model("deepseek-v3"), request)  # a checkpoint with MTP layers


def test_the_mtp_check_is_resolves_own():
    from kvplan.errors import KvplanError
    from kvplan.inputs.sources import load_model
    from kvplan.simulate.speculative import SpecDecode, check_mtp

    mtp = SpecDecode("mtp", 3, 1, 4, None)
    assert check_mtp(load_model("deepseek-v3"), mtp) >= 1
    assert check_mtp(load_model("llama-3.1-8b"), mtp._replace(method="eagle")) == 0
    with pytest.raises(KvplanError, match="no MTP layers"):
        check_mtp(load_model("llama-3.1-8b"), mtp)


# ---- 5. the engine's NEXTN refusal points to a simulate command that takes it -----------------
def test_engine_nextn_refusal_names_no_draft_path():
    code, out, err = run_cli(
        "engine", "qwen3.5-35b-a3b", "--engine", "sglang", "--gpu", "h200", "--sglang-version",
        "0.5.11", "--speculative-algorithm", "NEXTN",
    )  # fmt: skip
    one_line_error(code, out, err)
    assert "kvplan simulate --engine sglang --speculative-algorithm NEXTN sizes it" in err, err
    code, out, err = run_cli(
        "engine", "llama-3.1-8b", "--engine", "sglang", "--gpu", "h100", "--sglang-version",
        "0.5.14", "--speculative-algorithm", "EAGLE3",
    )  # fmt: skip
    one_line_error(code, out, err)
    assert "EAGLE3 --speculative-draft-model-path ... sizes it" in err, err


# ---- 6. a STANDALONE draft is gated by release as the target is ------------------------------
def test_simulate_refuses_a_draft_the_release_has_no_model_for(tmp_path):
    import json

    config = json.loads((REPO / "model_configs" / "Llama-3.1-8B.json").read_text())
    config["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(config))
    argv = (
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--gpu", "h100", "--num-prompts", "2",
        "--input-len", "16", "--output-len", "4", "--speculative-algorithm", "STANDALONE",
        "--speculative-draft-model-path", str(draft), "--format", "json",
    )  # fmt: skip
    code, out, err = run_cli(*argv, "--engine-version", "0.5.2")
    one_line_error(code, out, err)
    assert "SGLang 0.5.2 has no model for Qwen3_5ForConditionalGeneration" in err, err
    from kvplan.engines.sglang import check_sglang_own_model
    from kvplan.inputs.sources import load_model

    check_sglang_own_model(load_model(str(draft), checkpoint=False), "0.5.9")  # its first


def plan_with_draft(emit: str, draft: str):
    import json

    from kvplan.plans.plan import PlanRequest

    if emit == "vllm":
        config = {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}
        return PlanRequest(rate=1.0, slos=(), emit=emit, speculative_config=json.dumps(config))
    return PlanRequest(
        rate=1.0, slos=(), emit=emit, speculative_algorithm="STANDALONE",
        speculative_draft_model_path=draft,
    )  # fmt: skip


@pytest.mark.parametrize(
    "emit, draft, says",
    [
        ("vllm", "qwen3-4b", "has a vocabulary of 151,936"),
        ("vllm", "/nonexistent/draft.json", "no such config file"),
        ("sglang", "qwen3-4b", "has a vocabulary of 151,936"),
    ],
)
def test_plan_refuses_a_draft_model_no_layout_could_run(emit, draft, says):
    from kvplan.errors import KvplanError
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import _check_speculative

    with pytest.raises(KvplanError, match=says):
        _check_speculative(load_model("llama-3.1-70b"), plan_with_draft(emit, draft))
    # a draft of the target's tokenizer passes
    _check_speculative(load_model("llama-3.1-70b"), plan_with_draft(emit, "llama-3.1-8b"))
