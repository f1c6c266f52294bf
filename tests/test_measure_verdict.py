"""`kvplan measure`'s verdict: the word its CI line starts with and its exit status come from one
value (kvplan.measure.verdict), so they agree for every kind of verdict (issue 32: the step
`measure --baseline` without --check printed "FAIL (self-test: ...)" and exited 0). The logic is
driven with synthetic check results (no timing); the command line with the timings of a recorded
real run replayed (tests/data/recorded/), so that no test depends on this machine's speed."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvplan.measure.verdict import (
    CHECK_PARTS,
    EXIT_CHECK_FAILED,
    EXIT_PASS,
    EXIT_REGRESSION,
    FAIL,
    NOT_GATED,
    PART_OF_FAILURE,
    PASS,
    verdict_of,
)
from kvplan.present.measure import (
    distributed_junit_xml,
    distributed_summary,
    junit_xml,
    summary_line,
    verdict_json,
)
from kvplan.present.notes import all_texts

from helpers import RECORDED_MEASURE_MODEL, run_cli, synthetic_measure_points

RECORDED = Path(__file__).parent / "data" / "recorded"

# a failure note of the check for each of its parts, as kvplan.measure.run._check makes them
FAILURE_OF = {"predictions": "check-worst", "profile": "check-profile-off"}
FAILURE_OF["self-test"] = "check-mutation-missed"
SUMMARY = re.compile(r"kvplan measure(?: --distributed)?: (PASS|FAIL|NOT GATED)\b")


def _word(line: str) -> str:
    found = SUMMARY.match(line)
    assert found, line
    return found.group(1)


def test_every_failure_note_of_a_check_names_its_part():
    """A new check-* note must say which part of the check it fails (predictions, profile or
    self-test), else the CI line could not name it."""
    check_notes = {i for i in all_texts() if i.startswith("check-")}
    assert check_notes == set(PART_OF_FAILURE)
    assert set(PART_OF_FAILURE.values()) == set(CHECK_PARTS)


# every kind of run: the check's failed parts, whether --check gates it, the baseline's regressions
# (None: no --baseline)
MISSES = [
    parts for n in range(4) for parts in itertools.combinations(("predictions", "self-test"), n)
]
MISSES += [("profile",), ("predictions", "profile", "self-test")]
KINDS = list(itertools.product(MISSES, (False, True), (None, 0, 2)))


@pytest.mark.parametrize("missed,check_gated,regressions", KINDS)
def test_the_exit_status_follows_the_documented_rules(missed, check_gated, regressions):
    v = verdict_of([FAILURE_OF[p] for p in missed], check_gated, regressions)
    assert v.check_missed == tuple(p for p in CHECK_PARTS if p in missed)
    assert v.blind == ("self-test" in missed)
    if not check_gated and regressions is None:
        expected = EXIT_PASS  # nothing gates the run: NOT GATED, whatever the check showed
    elif check_gated and missed:
        expected = EXIT_CHECK_FAILED  # a blind check is a failure, not a pass
    elif regressions:
        expected = EXIT_REGRESSION
    else:
        expected = EXIT_PASS
    assert v.exit_code == expected
    assert v.outcome == (
        NOT_GATED
        if not (check_gated or regressions is not None)
        else PASS
        if not expected
        else FAIL
    )
    # a gated failure is named; nothing that did not gate the run is
    assert set(v.failed) == (set(missed) if check_gated else set()) | (
        {"baseline"} if regressions else set()
    )


def _measure_data(missed, check_gated, regressions) -> dict:
    ids = [FAILURE_OF[p] for p in missed]
    caught = "self-test" not in missed
    errors = [0.9 if "predictions" in missed else 0.01, 0.02, 0.03]
    data = {
        "identity": {"kind": "cpu", "name": "CPU X"},
        "conditions": {"threads": 1, "elapsed_s": 9.0},
        "points": synthetic_measure_points(errors),
        "check": {
            "passed": not ids,
            "tolerance": 0.15,
            "worst_tolerance": 0.3,
            "median_abs_error": 0.02,
            "worst_abs_error": max(errors),
            "memory_bound_points": 1,
            "mutations": [{"name": "KV x10", "caught": caught, "median_abs_error": 0.4}],
            "failures": [{"id": i, "text": i} for i in ids],
            "profile_checked": True,
        },
        "verdict": verdict_json(verdict_of(ids, check_gated, regressions)),
    }
    if regressions is not None:
        changes = [
            {"key": f"figure {i}", "verdict": "regression", "worse_by": 0.2, "noise": 0.01}
            for i in range(regressions)
        ]
        changes.append({"key": "bandwidth", "verdict": "ok", "worse_by": 0.0, "noise": 0.01})
        data["baseline"] = {
            "regressions": regressions,
            "within_noise": 0,
            "max_regression": 0.05,
            "changes": changes,
        }
    return data


@pytest.mark.parametrize("missed,check_gated,regressions", KINDS)
def test_the_ci_line_and_junit_say_what_the_exit_status_says(missed, check_gated, regressions):
    data = _measure_data(missed, check_gated, regressions)
    code = data["verdict"]["exit_code"]
    line = summary_line(data)
    word = _word(line)
    assert word == data["verdict"]["outcome"]
    assert (word == "FAIL") == (code != 0)
    if code == 0:
        assert "FAIL" not in line  # not even about a check that gated nothing
    if "self-test" in missed and check_gated:
        assert "the gate is blind here" in line  # blind is said, and it is a failure
    if not check_gated:
        assert "not gated (no --check)" in line
    # JUnit's failures are exactly what sets the exit status
    suite = ET.fromstring(junit_xml(data)).find("testsuite")
    assert (int(suite.get("failures")) > 0) == (code != 0)


def _distributed_data(missed, check_gated) -> dict:
    ids = [{"predictions": "check-link-worst"}.get(p, FAILURE_OF[p]) for p in missed]
    judged_error = 1.5 if "predictions" in missed else 0.05
    return {
        "ranks": 2,
        "backend": "gloo",
        "rows": [
            {"operation": "all-reduce", "error": judged_error, "noise": 0.02, "judged": True},
            {"operation": "KV transfer", "error": 0.1, "noise": 0.5, "judged": False},
        ],
        "check": {
            "passed": not ids,
            "tolerance": 0.25,
            "median_abs_error": judged_error,
            "worst_abs_error": judged_error,
            "allowance": 1.5,  # a median within its limit: the worst row decides
            "judged": 1,
            "noisy": ["KV transfer"],
            "rounds": 15,
            "spread": 0.1,
            "error_spread": 0.1,
            "mutations": [
                {
                    "name": "link 10x fast",
                    "caught": "self-test" not in missed,
                    "median_abs_error": 0.9,
                }
            ],
            "failures": [{"id": i, "text": i} for i in ids],
        },
        "verdict": verdict_json(verdict_of(ids, check_gated)),
    }


@pytest.mark.parametrize("missed,check_gated", list(itertools.product(MISSES[:4], (False, True))))
def test_the_distributed_ci_line_and_junit_say_what_the_exit_status_says(missed, check_gated):
    data = _distributed_data(missed, check_gated)
    for row in data["rows"]:
        row |= {"measured_s": 0.001, "bytes": 1}
    code = data["verdict"]["exit_code"]
    line = distributed_summary(data)
    assert _word(line) == data["verdict"]["outcome"]
    assert (_word(line) == "FAIL") == (code != 0) and code in (0, EXIT_CHECK_FAILED)
    assert (code != 0) == (check_gated and bool(missed))
    if code == 0:
        assert "FAIL" not in line
    if "self-test" in missed:
        assert "blind" in line
    suite = ET.fromstring(distributed_junit_xml(data)).find("testsuite")
    assert (int(suite.get("failures")) > 0) == (code != 0)


# ---- the command line, with a recorded run's timings replayed ------------------------------------
def _junit_agrees(xml: Path, code: int) -> None:
    """The JUnit file a run wrote has a failed case exactly when the run exits non-zero."""
    suite = ET.parse(xml).getroot().find("testsuite")
    assert (int(suite.get("failures")) > 0) == (code != 0), (code, xml.read_text())


MODEL = RECORDED_MEASURE_MODEL


@pytest.fixture
def replayed(monkeypatch, tmp_path):
    """`kvplan measure ...` on this CPU with the device, the thread layout and every timing of a
    recorded real run: (exit code, the last line on stderr, the JSON written)."""
    torch = pytest.importorskip("torch")
    import kvplan.measure.run as measure_run
    from kvplan.measure.timing import Timing

    recorded = json.loads((RECORDED / "measure_cpu_quick.json").read_text())
    scale = {"by": 1.0}  # every time x this: a slower machine for a baseline to catch

    def time_rounds(items, *_args, **_kwargs):
        out = {}
        for item in items:
            timing = dict(recorded["timings"][item.key])
            for key in ("median_s", "p20_s", "p25_s", "p80_s"):
                timing[key] *= scale["by"]
            out[item.key] = Timing(**timing)
        return out

    monkeypatch.setattr(measure_run, "detect", lambda *_a, **_k: dict(recorded["info"]))
    monkeypatch.setattr(measure_run, "default_threads", lambda: tuple(recorded["threads"]))
    monkeypatch.setattr(measure_run, "time_rounds", time_rounds)
    # nothing runs, so the probes' and the workload's arrays need no values: torch.empty
    # (pages never touched) instead of 2 s of torch.randn per run
    monkeypatch.setattr(
        torch, "randn", lambda *shape, device=None: torch.empty(*shape, device=device)
    )
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    threads = torch.get_num_threads()

    def run(*argv: str, slower: float = 1.0, out: Path = tmp_path / "run.json"):
        scale["by"] = slower
        xml = tmp_path / "measure.xml"
        code, _, err = run_cli(
            "measure",
            "--model",
            str(model),
            "--quick",
            "--rounds",
            "3",
            "--json",
            str(out),
            "--junit-xml",
            str(xml),
            *argv,
        )
        torch.set_num_threads(threads)
        _junit_agrees(xml, code)
        return code, err.strip().splitlines()[-1], json.loads(out.read_text())

    return run


def test_the_command_line_exit_status_agrees_with_its_ci_line(replayed, tmp_path):
    """Each verdict of `kvplan measure`, from the command itself: plain, --check (a miss, a blind
    check), --confirm, --baseline without --check (issue 32's CI step) and with it. The recorded
    model is small enough for a CPU's caches: no point is memory-bound, so its check is blind
    (and at the default tolerance its worst point misses too)."""
    baseline = tmp_path / "baseline.json"
    code, line, first = replayed(out=baseline)
    assert (code, _word(line)) == (0, "NOT GATED"), line
    assert first["verdict"]["check_missed"] == ["predictions", "self-test"]
    assert (
        "| not gated, it would fail: the predictions missed; blind, the check could not see" in line
    )
    runs = {
        "plain, blind": ((), 0, "NOT GATED"),
        "check, missed and blind": (("--check", "--tolerance", "0.15"), 1, "FAIL"),
        "check, blind": (("--check",), 1, "FAIL"),
        "check confirmed, blind": (("--check", "--confirm"), 1, "FAIL"),
        # issue 32: the self-test blind, no --check; the baseline gates, and passes
        "baseline, blind check not gated": (("--baseline", str(baseline)), 0, "PASS"),
        "baseline and check, blind": (("--baseline", str(baseline), "--check"), 1, "FAIL"),
    }
    for name, (argv, expected, word) in runs.items():
        tolerance = () if "--tolerance" in argv else ("--tolerance", "5")
        code, line, data = replayed(*argv, *tolerance)
        assert (code, _word(line)) == (expected, word), (name, line)
        assert data["verdict"]["exit_code"] == code and data["summary"] == line, name
        if code == 0:
            assert "FAIL" not in line, name
    code, line, data = replayed("--baseline", str(baseline), "--tolerance", "5")
    assert line.startswith(
        "kvplan measure: PASS (baseline: no regression; the prediction check not gated, no "
        "--check) |"
    )
    assert "not gated (no --check): 5 points" in line and "blind" in line
    assert data["verdict"]["blind"] and not data["verdict"]["check_gated"]
    code, line, _ = replayed("--check", "--tolerance", "5")
    assert "FAIL (self-test: the gate is blind here" in line and "within the limits" in line
    # a machine 3x slower: a regression (exit 3), named; with --check the blind check wins (1)
    code, line, _ = replayed("--baseline", str(baseline), "--max-regression", "50%", slower=3.0)
    assert code == 3 and line.startswith("kvplan measure: FAIL (regression) |"), line
    code, line, _ = replayed("--baseline", str(baseline), "--check", "--tolerance", "5", slower=3.0)
    assert code == 1 and line.startswith("kvplan measure: FAIL (self-test: "), line
    assert "; regression) |" in line


@pytest.mark.parametrize(
    "argv,expected,said",
    [
        (("--tolerance", "0.3", "--check"), 0, "kvplan measure --distributed: PASS |"),
        (("--tolerance", "0.3"), 0, "NOT GATED (no --check: the exit status is 0) |"),
        (("--check",), 1, "FAIL (prediction check: predictions vs the link) |"),
        ((), 0, "| not gated, it would fail: the predictions missed"),
        (("--tolerance", "1", "--check"), 1, "FAIL (self-test: the check is blind here"),
        (
            ("--tolerance", "1"),
            0,
            "| not gated, it would fail: blind, the check could not see a 10x wrong link here",
        ),
    ],
)
def test_the_distributed_command_exit_status_agrees_with_its_ci_line(
    monkeypatch, tmp_path, argv, expected, said
):
    """`kvplan measure --distributed` with the timings of a recorded two-rank gloo run: with
    --check a pass (tolerance 30%), a miss (25%) and a blind self-test (100%); without it, the
    same checks gate nothing (before: "FAIL (prediction check)" and exit 0)."""
    pytest.importorskip("torch")
    import kvplan.measure.distributed as distributed

    recorded = json.loads((RECORDED / "measure_distributed_cpu.json").read_text())
    monkeypatch.setattr(
        distributed,
        "run_distributed",
        lambda request: distributed.analyse(request, recorded["results"]),
    )
    out, xml = tmp_path / "d.json", tmp_path / "d.xml"
    code, _, err = run_cli(
        "measure", "--distributed", "--quick", "--json", str(out), "--junit-xml", str(xml), *argv
    )
    line = err.strip().splitlines()[-1]
    assert code == expected and said in line, line
    assert (_word(line) == "FAIL") == (code != 0) and json.loads(out.read_text())["summary"] == line
    if code == 0:
        assert "FAIL" not in line
    _junit_agrees(xml, code)
