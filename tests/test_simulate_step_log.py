"""`kvplan simulate --step-log FILE`: the simulated schedule step by step, in the format of
kvplan.simulate.steplog (scripts/step_log.py, tests/data/sched_fixtures), so that it can be
compared with a step log recorded from vLLM."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvplan.cli import common as c
from kvplan.errors import KvplanError
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate import steplog
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import WorkloadSpec

from helpers import run_cli

SMALL = ["--gpu", "h100", "--num-prompts", "20", "--input-len", "512", "--output-len", "32"]


def _check_log(steps: list[dict], num_requests: int) -> None:
    assert [s["step"] for s in steps] == list(range(len(steps)))  # every step that ran
    starts = [s["t_s"] for s in steps]
    assert starts == sorted(starts) and starts[0] >= 0
    finished = [rid for s in steps for rid in s["finished"]]
    assert sorted(finished, key=int) == [str(i) for i in range(num_requests)]
    for s in steps:
        assert set(s) == {"step", "t_s", "scheduled", "preempted", "finished"}
        assert all(n >= 1 for n in s["scheduled"].values())
        assert set(s["finished"]) <= set(s["scheduled"])  # a finish samples in its step


def test_the_step_log_file_is_the_schedule_and_stays_out_of_the_report(tmp_path):
    path = tmp_path / "steps.json"
    code, out, err = run_cli(
        "simulate", "qwen3-8b", *SMALL, "--request-rate", "4", "--step-log", str(path),
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert f"wrote {path}" in err
    assert "step_log" not in json.loads(out)  # the report's JSON is unchanged
    data = json.loads(path.read_text())
    assert data["scenario"] == "kvplan simulate qwen3-8b" and data["vllm_version"] == "0.19"
    assert data["request_rate"] == 4.0 and data["replica"] == 0 and data["step_s"] is None
    _check_log(data["steps"], 20)
    assert data["steps"][0]["scheduled"] == {"0": 512}
    # without a prefix cache hit or a preemption a request computes its prompt and all its
    # outputs but the last (sampled, never fed back)
    tokens = Counter()
    for s in data["steps"]:
        tokens.update(s["scheduled"])
    assert set(tokens.values()) == {512 + 32 - 1}
    # the compare of scripts/step_log.py --against takes it as it is
    assert steplog.compare(data["steps"], data["steps"]) is None


def test_the_python_twin_logs_preemptions_as_the_engine_counts_them():
    spec, gpu = c.load_model("qwen3-8b"), c.load_gpu("h100")
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=40, input_len=512, output_len=300),
        serve=ServeOptions(kv_cache_memory_bytes=400 << 20, enable_prefix_caching=False),
        step_log=True,
    )
    result = simulate(spec, gpu, request)
    steps = result.step_log["steps"]
    _check_log(steps, 40)
    preempted = sum(len(s["preempted"]) for s in steps)
    assert preempted == result.runs[0].engine.preemptions > 0
    assert result.step_log["request_rate"] == "inf"
    assert simulate(spec, gpu, request._replace(step_log=False)).step_log is None


def test_the_step_log_follows_the_vllm_version_asked_for(tmp_path):
    path = tmp_path / "old.json"
    code, _, err = run_cli(
        "simulate", "qwen3-8b", *SMALL, "--vllm-version", "0.18", "--step-log", str(path),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(path.read_text())["vllm_version"] == "0.18"


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--step-log", "-"], "needs a file name"),
        (["--step-log", ""], "names no file"),
        (["--step-log", "{tmp}/"], "folder"),
        (["--step-log", "{tmp}/missing/steps.json"], "does not exist"),
        (["--step-log", "{tmp}"], "is a folder"),
        (["--step-log", "{tmp}/a.json", "--out", "{tmp}/a.json"], "same file"),
        (["--step-log", "{tmp}/a.json", "--request-rate", "1,2"], "one --request-rate"),
        (["--step-log", "{tmp}/a.json", "--engine", "sglang"], "drop --engine sglang"),
        (["--step-log", "{tmp}/a.json", "--disaggregated", "1:1"], "drop --disaggregated"),
    ],
)
def test_a_step_log_that_cannot_be_written_is_refused_before_any_work(tmp_path, extra, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code, out, err = run_cli("simulate", "qwen3-8b", *SMALL, *argv)
    assert code == 2 and needle in err, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_step_log_nor_report(tmp_path, monkeypatch):
    """--step-log and --out land together or not at all (all_or_nothing)."""
    from kvplan.present import simulate as present

    def broken(result):
        raise KvplanError("boom")

    monkeypatch.setattr(present, "step_log_text", broken)
    code, _, err = run_cli(
        "simulate", "qwen3-8b", *SMALL, "--step-log", str(tmp_path / "s.json"),
        "--out", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert code == 2 and "boom" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_run_redone_with_the_real_pool_logs_once_and_only_replica_0(replicas):
    """A tight pool with prefix caching on: the counted stand-in pool gives way to the real one
    mid-run (engine.with_stand_in), and the log starts again with it; with two replicas only
    replica 0's requests are in it, every one finished once."""
    spec, gpu = c.load_model("qwen3-8b"), c.load_gpu("h100")
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=40, input_len=512, output_len=300),
        serve=ServeOptions(kv_cache_memory_bytes=400 << 20),
        replicas=replicas,
        step_log=True,
    )
    result = simulate(spec, gpu, request)
    steps = result.step_log["steps"]
    assert [s["step"] for s in steps] == list(range(len(steps)))
    finished = [rid for s in steps for rid in s["finished"]]
    seen = {rid for s in steps for rid in s["scheduled"]}
    assert sorted(finished, key=int) == sorted(seen, key=int) and len(set(finished)) == len(
        finished
    )
    assert len(finished) == (40 if replicas == 1 else 20)  # round robin: every other request
    if replicas == 1:
        assert sum(len(s["preempted"]) for s in steps) == result.runs[0].engine.preemptions > 0
