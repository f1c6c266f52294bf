"""Hostile inputs, fifteenth round.
1. `kvplan plan MODEL --emit sglang --engine-version R` where release R has no SGLang model for
the checkpoint's architecture (Qwen3.5 on 0.5.2): simulate and engine refuse it in one line, but
plan built all 160 configurations, ruled each out for that one reason and exited 0 with "no
configuration meets the targets"."""

from __future__ import annotations

import pytest

from helpers import run_cli


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
