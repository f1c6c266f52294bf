"""kvplan's SGLang engine step for step against SGLang's own scheduler.

scripts/record_sglang_schedule.py drove SGLang's real Scheduler (get_next_batch_to_run,
PrefillAdder, update_running_batch, new_token_ratio) over a real token pool and radix cache on
a CPU for the scenarios SGLang can express; its step logs are the fixtures
(tests/data/sched_fixtures_sglang/<SGLang version>/). The default run compares
`steplog.sglang_step_log` with each; the slow test re-records them with a live SGLang source
(`import sglang`, or the Python that `KVPLAN_SGLANG_PYTHON` names).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.simulate import steplog

DATA = Path(__file__).parent / "data"
SCENARIOS = DATA / "sched_scenarios"
SGLANG_ONLY = DATA / "sched_scenarios_sglang"  # tight pools: new_token_ratio, retraction
FIXTURES = sorted((DATA / "sched_fixtures_sglang").glob("*/*.json"))
RECORDER = Path(__file__).parent.parent / "scripts" / "record_sglang_schedule.py"

# scenario -> why kvplan's SGLang engine does not yet schedule it as SGLang does (xfail, strict)
KNOWN: dict[str, str] = {}


def _scenario_path(name: str) -> Path:
    only = SGLANG_ONLY / f"{name}.json"
    return only if only.exists() else SCENARIOS / f"{name}.json"


def _cases():
    for path in FIXTURES:
        reason = KNOWN.get(path.stem)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(path, marks=marks, id=f"{path.parent.name}/{path.stem}")


@pytest.mark.parametrize("path", list(_cases()))
def test_kvplan_schedules_every_step_as_sglang(path):
    fixture = json.loads(path.read_text())
    scenario = steplog.load_scenario(_scenario_path(fixture["scenario"]))
    difference = steplog.compare(fixture["steps"], steplog.sglang_step_log(scenario))
    assert difference is None, difference


def test_the_fixtures_cover_the_sglang_scenarios():
    assert {p.stem for p in FIXTURES} >= {
        "steady",
        "burst",
        "pool_exhaustion",
        "long_prompt",
        "seat_limit",
        *(p.stem for p in SGLANG_ONLY.glob("*.json")),
    }
    for path in FIXTURES:
        assert json.loads(path.read_text())["sglang_version"] == path.parent.name


def test_a_prefill_step_decodes_nothing():
    """SGLang runs a prefill batch alone: no request decodes in the step a prompt runs."""
    scenario = steplog.load_scenario(SCENARIOS / "steady.json")
    log = steplog.sglang_step_log(scenario)
    prefills = [e for e in log if any(n > 1 for n in e["scheduled"].values())]
    assert prefills and all(len(e["scheduled"]) == 1 for e in prefills[1:3])
    assert any(len(e["scheduled"]) > 1 for e in log)  # decodes batch together


def test_vllm_only_scenarios_are_refused():
    for name in ("async_steady", "sliding_window", "pool_exhaustion_no_caching"):
        with pytest.raises(KvplanError):
            steplog.sglang_step_log(steplog.load_scenario(SCENARIOS / f"{name}.json"))


def _sglang_python() -> str | None:
    if os.environ.get("KVPLAN_SGLANG_PYTHON"):
        return os.environ["KVPLAN_SGLANG_PYTHON"]
    return sys.executable if importlib.util.find_spec("sglang") else None


@pytest.mark.slow
def test_sglang_still_schedules_as_recorded(tmp_path):
    python = _sglang_python()
    if python is None:
        pytest.skip("SGLang is not importable (set KVPLAN_SGLANG_PYTHON to a Python that has it)")
    run = subprocess.run(
        [python, str(RECORDER), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    newest = sorted({p.parent for p in FIXTURES})[-1]
    for path in sorted(tmp_path.glob("*.json")):
        fresh = json.loads(path.read_text())
        known = newest / path.name
        if (newest.parent / fresh["sglang_version"] / path.name).exists():
            known = newest.parent / fresh["sglang_version"] / path.name
        assert fresh["steps"] == json.loads(known.read_text())["steps"], path.stem
        if path.stem not in KNOWN:
            log = steplog.sglang_step_log(steplog.load_scenario(_scenario_path(path.stem)))
            assert steplog.compare(fresh["steps"], log) is None


def test_a_finish_clears_batch_is_full_only_at_the_next_decode_step():
    """SGLang's update_running_batch filters finished requests (and so clears batch_is_full)
    after the next step's prefill attempt: with requests waiting on a full batch, one decode
    step runs between a finish and the next admission (ratio_retract: 8 and 9 finish in step
    701, 5-7 decode alone in 702, 10 and 11 prefill in 703). kvplan cleared the flag at the
    finish and admitted in 702; all three SGLang-only scenarios differed."""
    log = steplog.sglang_step_log(steplog.load_scenario(SGLANG_ONLY / "ratio_retract.json"))
    finish = next(e["step"] for e in log if {"8", "9"} <= set(e["finished"]))
    assert set(log[finish + 1]["scheduled"]) == {"5", "6", "7"}
    assert log[finish + 2]["scheduled"] == {"10": 60, "11": 60}
    assert any(e["preempted"] for e in log)  # the scenario retracts, too
