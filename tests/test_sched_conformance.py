"""kvplan's engine step for step against vLLM's own scheduler.

Each scenario (tests/data/sched_scenarios/*.json) was run through vLLM's real V1 Scheduler /
AsyncScheduler and KV-cache manager by scripts/record_vllm_schedule.py; its step logs are the
fixtures (tests/data/sched_fixtures/<vLLM version>/). The default run compares kvplan's engine,
every step taking 1 s, with each fixture: the tokens every request got in every step, the
preemptions and the finishes must be identical. The slow test re-records the fixtures with a
live vLLM (`import vllm`, or the Python that `KVPLAN_VLLM_PYTHON` names) and checks that they
did not change, so a vLLM release that changes its scheduler shows here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.simulate import steplog

from helpers import live_vllm

DATA = Path(__file__).parent / "data"
SCENARIOS = DATA / "sched_scenarios"
FIXTURES = sorted((DATA / "sched_fixtures").glob("*/*.json"))
RECORDER = Path(__file__).parent.parent / "scripts" / "record_vllm_schedule.py"

# scenario -> why kvplan's engine does not yet schedule it as vLLM does (xfail, strict: a fix
# that makes one agree must take it off this list)
# a scenario, or VERSION/scenario for one version's fixture only
KNOWN: dict[str, str] = {}


def _known(version: str, name: str) -> str | None:
    return KNOWN.get(f"{version}/{name}") or KNOWN.get(name)


def _fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _cases():
    for path in FIXTURES:
        reason = _known(path.parent.name, path.stem)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(path, marks=marks, id=_fixture_id(path))


@pytest.mark.parametrize("path", list(_cases()))
def test_kvplan_schedules_every_step_as_vllm(path):
    fixture = json.loads(path.read_text())
    scenario = steplog.load_scenario(SCENARIOS / f"{fixture['scenario']}.json")
    log = steplog.step_log(scenario, vllm_version=path.parent.name)
    difference = steplog.compare(fixture["steps"], log)
    assert difference is None, difference


def test_every_scenario_has_a_fixture_for_every_version():
    names = {p.stem for p in SCENARIOS.glob("*.json")}
    assert len(names) >= 20
    for version in steplog.SCHEDULE_VERSIONS:
        recorded = {p.stem for p in FIXTURES if p.parent.name == version}
        assert recorded == names, version
        for path in FIXTURES:
            if path.parent.name == version:
                assert json.loads(path.read_text())["vllm_version"].startswith(version + ".")


def test_the_step_time_only_scales_the_clock():
    scenario = steplog.load_scenario(SCENARIOS / "burst.json")
    assert steplog.step_log(scenario, 1e-3) == steplog.step_log(scenario, 1.0)


@pytest.mark.parametrize(
    "change",
    [
        {"num_blocks": 1},
        {"block_size": 0},
        {"max_num_seqs": 0},
        {"max_num_batched_tokens": 1},  # below max_num_seqs
        {"requests": []},
        {"requests": [{"arrival_step": 0, "prompt_len": 5000, "output_len": 1}]},
        {"requests": [{"arrival_step": -1, "prompt_len": 5, "output_len": 1}]},
        {"enable_prefix_caching": "yes"},
        {"sliding_window": -3},
    ],
)
def test_a_scenario_out_of_range_is_refused(change):
    data = json.loads((SCENARIOS / "steady.json").read_text())
    data.update(change)
    with pytest.raises(KvplanError):
        steplog.scenario_from_dict(data)


def test_a_step_time_out_of_range_is_refused():
    scenario = steplog.load_scenario(SCENARIOS / "steady.json")
    with pytest.raises(KvplanError):
        steplog.step_log(scenario, 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(2), ids=["first-vllm", "second-vllm"])
def test_vllm_still_schedules_as_recorded(tmp_path, index):
    """A live vLLM re-records every scenario; its log must equal its version's fixtures. CI
    names two (KVPLAN_VLLM_PYTHON: the version kvplan names and the newest)."""
    python, version = live_vllm(index, tmp_path)
    minor = ".".join(version.split(".")[:2])
    run = subprocess.run(
        [python, str(RECORDER), "--out", str(tmp_path / minor)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    for path in sorted((tmp_path / minor).glob("*.json")):
        fresh = json.loads(path.read_text())
        known = DATA / "sched_fixtures" / minor / path.name
        if not known.exists():  # a version without fixtures: the newest of those recorded
            known = DATA / "sched_fixtures" / steplog.SCHEDULE_VERSIONS[-1] / path.name
        assert fresh["steps"] == json.loads(known.read_text())["steps"], (version, path.stem)
        scenario = steplog.load_scenario(SCENARIOS / path.name)
        if _known(minor, path.stem) is None:
            log = steplog.step_log(scenario, vllm_version=minor)
            assert steplog.compare(fresh["steps"], log) is None


def test_the_vllm_version_switch_is_range_checked():
    from kvplan.simulate.setup import FULL_ISL_FROM, _minor

    assert _minor("0.19.1") == FULL_ISL_FROM and _minor("0.18") < FULL_ISL_FROM
    assert _minor("0.7") == (0, 7)  # V0 releases run with 0.8's rules (sim-vllm-v0)
    for bad in ("0.5", "abc", "", "0.x"):
        with pytest.raises(KvplanError):
            _minor(bad)
    with pytest.raises(KvplanError):
        steplog.step_log(steplog.load_scenario(SCENARIOS / "steady.json"), vllm_version="0.17")
