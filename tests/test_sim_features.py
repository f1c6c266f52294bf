"""The published runs that use expert parallelism, DP attention, speculative decoding or decode
context parallelism (tests/data/sim_bench_cases_features.json, all held out): the records' schema
and split, their serve flags as kvplan simulate arguments, that every expressible run replays
through `kvplan simulate` and every other one is refused in one line, and that the accuracy
table docs/simulate.md prints is the one scripts/sim_features.py computes."""

from __future__ import annotations

import json
import math
import re

import pytest

from kvplan.errors import KvplanError

from helpers import REPO, load_script
from sim_replay import FEATURES_PATH, serve_argv, simulate_argv

CASES = json.loads(FEATURES_PATH.read_text(encoding="utf-8"))["cases"]
FIELDS = {
    "id", "url", "source", "engine", "engine_version", "vllm_version", "gpu", "gpu_profile",
    "gpu_family", "tp", "pp", "dp", "ep", "model", "kvplan_model", "serve_cmd", "bench_cmd",
    "dataset", "input_len", "output_len", "num_prompts", "max_concurrency", "request_rate",
    "measured", "features", "spec_accept_length", "spec_accept_length_docs", "replay_flags",
    "expressible", "needs", "notes", "split",
}  # fmt: skip


SCRIPT = load_script("sim_features")


def test_records_have_the_schema_and_are_held_out():
    assert len({c["id"] for c in CASES}) == len(CASES) >= 10
    for case in CASES:
        assert set(case) == FIELDS, case["id"]
        assert case["split"] == "validate", case["id"]  # nothing is fitted to them
        assert re.fullmatch(
            r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+#L\d+", case["url"]
        )
        assert case["features"] == SCRIPT.features_of(case["serve_cmd"]), case["id"]
        assert case["expressible"] == (not case["needs"]), case["id"]
        m = case["measured"]
        for value in (case["input_len"], case["output_len"], *m.values()):
            assert isinstance(value, int | float) and math.isfinite(value) and value > 0
        tokens = case["output_len"] * m["completed"] / m["duration_s"]
        assert m["output_throughput"] == pytest.approx(tokens, rel=0.02), case["id"]
        length = case["spec_accept_length"]
        assert length is None or "speculative" in case["features"]
    assert {f for c in CASES for f in c["features"]} >= {"ep", "dp-attention", "speculative"}


def test_serve_flags_become_kvplan_arguments():
    assert serve_argv(
        "vllm serve zai-org/GLM-5.1-FP8 --tensor-parallel-size 8 "
        "--speculative-config.method mtp --speculative-config.num_speculative_tokens 3 "
        "--served-model-name glm --chat-template-content-format=string"
    ) == ["--tp", "8", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']
    assert serve_argv(
        "python3 -m sglang.launch_server --model-path X --tp-size 8 --dp 8 "
        "--enable-dp-attention --ep 8 --context-length=32768 --enable-torch-compile"
    ) == [
        "--tp", "8", "--dp-size", "8", "--enable-dp-attention", "--ep-size", "8",
        "--context-length", "32768",
    ]  # fmt: skip
    assert serve_argv("sglang serve --model-path X --tp 8 --attention-backend triton") == [
        "--tp", "8", "--attention-backend", "triton",
    ]  # fmt: skip
    with pytest.raises(KvplanError, match="--moe-runner-backend"):
        serve_argv("sglang serve --model-path X --tp 8 --moe-runner-backend triton")


def test_a_speculative_replay_passes_the_printed_acceptance():
    case = next(c for c in CASES if c["spec_accept_length"] is not None)
    argv = simulate_argv(case)
    assert argv[argv.index("--spec-accept-length") + 1] == f"{case['spec_accept_length']:g}"
    assert "--spec-accept-length" not in simulate_argv(
        dict(case, spec_accept_length=None)
    )  # kvplan's default then, noted in its output


@pytest.fixture(scope="module")
def computed():
    return SCRIPT.compute()


@pytest.mark.slow  # replays 38 runs: 17 s
def test_every_run_replays_or_is_refused_in_one_line(computed):
    rows, _ = computed
    by_id = {(r["id"], r["replay"]): r for r in rows}
    for case in CASES:
        row = by_id[(case["id"], "as published")]
        if case["expressible"]:
            assert "refused" not in row, row.get("refused")
            sim = row["output_throughput"]["simulated"]
            assert math.isfinite(sim) and sim > 0
        else:
            assert "\n" not in row["refused"]
        if case["spec_accept_length_docs"] and case["spec_accept_length"] is None:
            assert (case["id"], "docs acceptance") in by_id


@pytest.mark.slow  # replays 38 runs: 17 s
def test_the_docs_table_is_what_the_script_computes(computed):
    _, summary = computed
    text = (REPO / "docs/simulate.md").read_text(encoding="utf-8")
    start = text.index("<!-- sim_features table -->")
    end = text.index("<!-- /sim_features table -->")
    assert text[start:end].split("\n", 1)[1].strip() == SCRIPT.markdown(summary).strip()
