"""`kvplan measure` as a View (facts, the profile, the error table, the self-test, the baseline
comparison), a one-line summary for a CI log, and JUnit XML (one test case per point and per
criterion of the gate)."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from kvplan.measure.verdict import FAIL, NOT_GATED, PASS
from kvplan.present import format as f
from kvplan.present.notes import note_texts
from kvplan.present.view import (
    Column,
    Fact,
    Table,
    Verdict,
    View,
    jsonable,
    judged,
    note_json,
    rows_of,
)


def _unit_value(value, unit: str) -> str:
    if unit == "s":
        return f.ms_text(value, 2) if value >= 1e-3 else f.us_text(value, 2)
    if unit == "bytes_per_s":
        return f.gbps_text(value, 1)
    return f.gflops_text(value, 1)


def _device_fact(identity: dict) -> str:
    if identity["kind"] == "cuda":
        parts = [
            identity.get("nvml_name") or identity["name"],
            f.gib_text(identity["memory_bytes"]),
        ]
        if identity.get("driver_version"):
            parts.append(f"driver {identity['driver_version']}")
        clocks = identity.get("clocks_mhz") or {}
        if clocks.get("sm_max"):
            parts.append(f"SM {clocks.get('sm')}/{clocks['sm_max']} MHz")
        if identity.get("power_limit_w"):
            parts.append(f"power limit {identity['power_limit_w']:,.0f} W")
        return ", ".join(parts)
    return (
        f"{identity['cpu_model']} ({identity['cpu_threads']} CPUs, {identity['threads']} "
        f"thread{'s' if identity['threads'] != 1 else ''} used, {identity.get('isa')})"
    )


def _parts(data: dict) -> list[str]:
    """The check's failed parts ("predictions", "profile", "self-test"), from the verdict."""
    return list(data["verdict"]["check_missed"])


NOT_GATED_WORDS = "not gated (no --check)"  # a check the run did not ask to gate it
_MISSED_WORDS = {
    "predictions": "kvplan's predictions",
    "profile": "the --gpu profile's predictions",
}


def check_text(check: dict, missed: list[str], gated: bool = True) -> str:
    """The check in words: what failed, what it means, what to do. `missed`: the check's failed
    parts (kvplan.measure.verdict.check_missed); `gated`: whether --check gates the run (else
    the words say so, and say that nothing failed the run)."""
    errors = (
        f"median |error| {check['median_abs_error']:.1%} (<= {check['tolerance']:.0%}), worst "
        f"{check['worst_abs_error']:.1%} (<= {check['worst_tolerance']:.0%})"
    )
    caught = sum(1 for m in check["mutations"] if m["caught"])
    sensitivity = (
        f"{check['memory_bound_points']} memory-bound point(s), self-test {caught}/"
        f"{len(check['mutations'])} mutations caught"
    )
    if not missed:
        return ("" if gated else NOT_GATED_WORDS + ", ") + f"passed: {errors}, {sensitivity}"
    failed = "FAILED" if gated else NOT_GATED_WORDS + ", it would have failed"
    if "predictions" in missed or "profile" in missed:
        what = " and ".join(_MISSED_WORDS[p] for p in missed if p != "self-test")
        return (
            f"{failed} ({what} vs this device): {errors}; {sensitivity}. The step-time model, fed "
            "this machine's own probes, does not predict its steps within the limits. On a "
            "shared machine rerun with --confirm (a miss must show twice); if it misses again, "
            "the --json file says which operators are off"
        )
    not_caught = [m["name"] for m in check["mutations"] if not m["caught"]]
    cause = (
        f"with {', '.join(not_caught)} on purpose the gate would still pass"
        if not_caught
        else "no point is memory-bound, so wrong bytes could not show"
    )
    return (
        f"{failed} (kvplan's self-test, not its predictions): the predictions are within the "
        f"limits on this device ({errors}), but {cause}: on this machine these points cannot see "
        "such a mistake, so this run cannot vouch for the gate (it is blind, not passed). "
        "Nothing here says kvplan is wrong on this machine; rerun with --confirm, or without "
        "--quick (more points)"
    )


def _threads(count: int) -> str:
    return f"{count} thread{'s' if count != 1 else ''}"


# the gated parts that failed, in the CI line's words
_FAILED_WORDS = {
    "predictions": "prediction check: predictions vs this device",
    "profile": "prediction check: the --gpu profile vs this device",
    "self-test": "self-test: the gate is blind here, it could not see wrong bytes",
    "baseline": "regression",
}
# the check's failed parts when --check did not gate it: said, never called a failure
_NOT_GATED_MISSED = {
    "predictions": "the predictions missed",
    "profile": "the --gpu profile missed",
    "self-test": "blind, the check could not see wrong bytes here",
}


def verdict_words(verdict: dict, failed_words: dict[str, str], gates: str) -> str:
    """The verdict word of a CI line, with what decided it: PASS, FAIL (the gated parts that
    failed), NOT GATED (nothing asked to gate: `gates` names the options that would)."""
    outcome = verdict["outcome"]
    if outcome == NOT_GATED:
        return f"{NOT_GATED} (no {gates}: the exit status is 0)"
    if outcome == FAIL:
        failed = [failed_words[p] for p in verdict["failed"]]
        if "self-test" in verdict["failed"] and "predictions" not in verdict["failed"]:
            at = verdict["failed"].index("self-test")
            failed[at] += "; predictions within the limits"
        return f"{FAIL} ({'; '.join(failed)})"
    if verdict["baseline_gated"] and not verdict["check_gated"]:
        return f"{PASS} (baseline: no regression; the prediction check not gated, no --check)"
    return PASS


def summary_line(data: dict) -> str:
    """One line for a CI log: the verdict (the word the exit status follows), the device, the
    errors, the self-test, the baseline. A check that did not gate the run says so."""
    check, comparison, verdict = data["check"], data.get("baseline"), data["verdict"]
    identity = data["identity"]
    name = identity.get("nvml_name") or identity["name"]
    caught = sum(1 for m in check["mutations"] if m["caught"])
    missed = ""
    if not verdict["check_gated"] and verdict["check_missed"]:
        missed = " | not gated, it would fail: " + "; ".join(
            _NOT_GATED_MISSED[p] for p in verdict["check_missed"]
        )
    line = (
        f"kvplan measure: {verdict_words(verdict, _FAILED_WORDS, '--check or --baseline')} | "
        f"{identity['kind']} {name}, {_threads(data['conditions']['threads'])} | "
        + ("" if verdict["check_gated"] else NOT_GATED_WORDS + ": ")
        + f"{len(data['points'])} points: median "
        f"|error| {check['median_abs_error']:.1%}, worst {check['worst_abs_error']:.1%} (limits "
        f"{check['tolerance']:.0%}/{check['worst_tolerance']:.0%}) | memory-bound points "
        f"{check['memory_bound_points']} | self-test {caught}/{len(check['mutations'])} caught"
        + missed
    )
    if comparison:
        line += (
            f" | baseline: {comparison['regressions']} regressions, "
            f"{comparison['within_noise']} within noise (max {comparison['max_regression']:.0%})"
        )
    if data["conditions"].get("runs", 1) > 1:
        line += " | measured twice (--confirm)"
    return line


def verdict_json(verdict) -> dict:
    """The verdict as JSON: its fields, and whether the check was blind."""
    return {**jsonable(verdict), "blind": verdict.blind}


def measure_view(result, comparison, verdict) -> View:
    """The run (kvplan.measure.run.MeasureResult), its comparison with a baseline (or None) and
    its verdict (kvplan.measure.verdict.Verdict: the CI line's word, the exit status)."""
    data = jsonable(result)
    if comparison is not None:
        data["baseline"] = {**jsonable(comparison), "passed": comparison.passed}
    data["notes"] = note_json(result.notes)
    data["verdict"] = verdict_json(verdict)
    data["summary"] = summary_line(data)
    identity, cond, check = result.identity, result.conditions, result.check
    rates = result.profile.rates
    facts: list[Fact | tuple[str, str]] = [
        ("device", _device_fact(identity)),
        (
            "software",
            f"torch {identity['torch_version']}"
            + (f", CUDA {identity['cuda_version']}" if identity.get("cuda_version") else "")
            + f", kvplan {identity['kvplan_version']}",
        ),
        (
            "workload",
            f"{cond['model']}, first {cond['layers']} layer(s), {cond['dtype']}, attention "
            f"{cond['attention_impl']}; {cond['rounds']} interleaved rounds, "
            f"{f.fixed(1)(cond['elapsed_s'])} s",
        ),
        (
            "bandwidth",
            f"stream {f.gbps_text(rates.bandwidth_bytes_per_s, 1)}; matmul weights "
            + ", ".join(
                f"{f.gbps_text(rate, 1)} (rows of {int(width):,})"
                for width, rate in rates.matmul_bandwidth_bytes_per_s
            ),
        ),
        (
            "fixed costs",
            f"{f.us_text(rates.overhead_s, 2)} per launch, {f.us_text(rates.matmul_overhead_s, 0)} "
            "more per GEMM",
        ),
        ("profile compared", result.datasheet["name"] if result.datasheet else "none matched"),
        Fact(
            "check",
            check_text(data["check"], _parts(data), verdict.check_gated),
            # a self-test alone is the gate's sensitivity, not a wrong prediction, and a check
            # that does not gate the run fails nothing: yellow
            verdict=judged(
                check.passed,
                Verdict.warn
                if _parts(data) == ["self-test"] or not verdict.check_gated
                else Verdict.bad,
            ),
        ),
    ]
    if comparison is not None:
        facts.append(
            (
                "baseline",
                f"{comparison.path} ({comparison.kind}): {comparison.regressions} regression(s), "
                f"{comparison.within_noise} within noise, max {comparison.max_regression:.0%}"
                + ("" if comparison.same_device else f"; measured on {comparison.baseline_device}"),
            )
        )
    points = [
        {
            **p._asdict(),
            "ops": ", ".join(
                f"{o.name} {f.ms_text(o.time_s, 1)}"
                for o in sorted(p.ops, key=lambda o: -o.time_s)[:3]
            ),
        }
        for p in result.points
    ]
    point_columns = [
        Column("phase", "phase", f.text, "left"),
        Column("batch_size", "batch", f.integer),
        Column("context_len", "tokens", f.integer),
        Column("measured_s", "measured (ms)", f.ms),
        Column("spread", "± run", lambda v: f"{v:.0%}"),
        Column("predicted_s", "predicted (ms)", f.ms),
        Column("error", "error", f.percent),
        Column("bound", "bound", f.text, "left"),
        Column("predicted_roofline_s", "roofline (ms)", f.ms),
        Column("error_roofline", "error", f.percent),
        Column("predicted_datasheet_s", "datasheet (ms)", f.ms),
        Column("error_datasheet", "error", f.percent),
        Column("ops", "largest operators (predicted)", f.text, "left"),
    ]
    figures = [
        {
            "key": fig.key,
            "model": _unit_value(fig.value, fig.unit),
            "probe": _unit_value(fig.probe_value, fig.unit),
            "spread": fig.spread,
            "memory": fig.memory_bound if fig.kind in ("matmul", "decode_attention") else None,
        }
        for fig in result.profile.figures
    ]
    figure_columns = [
        Column("key", "probe", f.text, "left"),
        Column("probe", "measured", f.text),
        Column("model", "in the model", f.text),
        Column("spread", "± run", lambda v: f"{v:.0%}"),
        Column("memory", "memory-bound", f.yes_no),
    ]
    mutation_columns = [
        Column("name", "mutation", f.text, "left"),
        Column("median_abs_error", "median |error|", lambda v: f"{v:.1%}"),
        Column("worst_abs_error", "worst |error|", lambda v: f"{v:.1%}"),
        Column("caught", "caught", f.yes_no),
    ]
    tables = [
        Table("profile (probes; none is a predicted point)", figure_columns, figures),
        Table("predicted vs measured (no point used for calibration)", point_columns, points),
        Table(
            "self-test: the gate with wrong bytes",
            mutation_columns,
            [m._asdict() for m in check.mutations],
        ),
    ]
    if comparison is not None:
        tables.append(
            Table(
                f"against the baseline (max regression {comparison.max_regression:.0%})",
                [
                    Column("key", "figure", f.text, "left"),
                    Column("baseline", "baseline", f.text),
                    Column("current", "now", f.text),
                    Column("worse_by", "worse by", f.percent),
                    Column("noise", "noise", lambda v: f"±{v:.1%}"),
                    Column("verdict", "verdict", f.text, "left"),
                ],
                [
                    {
                        **c._asdict(),
                        "baseline": _unit_value(c.baseline, c.unit),
                        "current": _unit_value(c.current, c.unit),
                    }
                    for c in comparison.changes
                ],
            )
        )
    title = f"kvplan measure on {identity.get('nvml_name') or identity['name']}"
    return View(title, facts, tables, note_texts(result.notes), data)


def _junit(suite: str, cases: list[str], elapsed: float | None = None) -> str:
    """The XML around the test cases, with their counts of failures and skips."""
    failures = sum(1 for c in cases if "<failure" in c)
    skipped = sum(1 for c in cases if "<skipped" in c)
    time = "" if elapsed is None else f' time="{elapsed:.3f}"'
    counts = f'tests="{len(cases)}" failures="{failures}" skipped="{skipped}"{time}'
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f"<testsuites {counts}>",
            f"  <testsuite name={quoteattr(suite)} {counts}>",
            *cases,
            "  </testsuite>",
            "</testsuites>",
            "",
        ]
    )


def _case(classname: str, name: str, seconds: float, failure: str | None, gated: bool) -> str:
    """A test case: failed with `failure`'s words when it gates the run; a criterion of a check
    that does not gate it (no --check) is skipped, with what it showed."""
    if not gated:
        shown = f"{NOT_GATED_WORDS}: " + (f"it would fail: {failure}" if failure else "it passed")
        body = f"<skipped message={quoteattr(shown)}/>"
    else:
        body = f"<failure message={quoteattr(failure)}/>" if failure else ""
    return (
        f"    <testcase classname={quoteattr(classname)} name={quoteattr(name)} "
        f'time="{seconds:.6f}">{body}</testcase>'
    )


def junit_xml(data: dict) -> str:
    """JUnit XML: a test case per point (failed beyond the worst-point tolerance), per criterion
    of the gate (the --gpu profile's too, where it was judged), per mutation of the self-test,
    and per baseline figure. Without --check the check's cases are skipped, not failed: the
    failures are exactly what sets the exit status."""
    check, gated = data["check"], data["verdict"]["check_gated"]
    cases = []

    def case(classname: str, name: str, seconds: float = 0.0, failure: str | None = None):
        cases.append(_case(classname, name, seconds, failure, gated))

    for p in data["points"]:
        name = f"{p['phase']} batch {p['batch_size']}, {p['context_len']} tokens"
        message = (
            f"predicted {p['predicted_s'] * 1e3:.3f} ms, measured {p['measured_s'] * 1e3:.3f} ms: "
            f"error {p['error']:+.1%} beyond {check['worst_tolerance']:.0%}"
        )
        failed = abs(p["error"]) > check["worst_tolerance"]
        case(f"kvplan.measure.{p['phase']}", name, p["measured_s"], message if failed else None)
    case(
        "kvplan.measure.gate",
        "median |error|",
        failure=None
        if check["median_abs_error"] <= check["tolerance"]
        else f"{check['median_abs_error']:.1%} > {check['tolerance']:.0%}",
    )
    case(
        "kvplan.measure.gate",
        "a memory-bound point",
        failure=None if check["memory_bound_points"] else "no point is memory-bound",
    )
    if check.get("profile_checked"):
        off = [n["text"] for n in check["failures"] if n["id"] == "check-profile-off"]
        case(
            "kvplan.measure.gate", "the --gpu profile's predictions", failure=" ".join(off) or None
        )
    for m in check["mutations"]:
        case(
            "kvplan.measure.self_test",
            f"{m['name']} is caught",
            failure=None
            if m["caught"]
            else f"the gate passes with {m['name']}: median {m['median_abs_error']:.1%}",
        )
    comparison = data.get("baseline")
    for c in comparison["changes"] if comparison else []:
        cases.append(
            _case(
                "kvplan.measure.baseline",
                c["key"],
                0.0,
                f"worse by {c['worse_by']:.1%} (noise ±{c['noise']:.1%})"
                if c["verdict"] == "regression"
                else None,
                gated=True,
            )
        )
    return _junit("kvplan measure", cases, data["conditions"]["elapsed_s"])


# ---- --distributed --------------------------------------------------------------------------
def distributed_check_text(check: dict) -> str:
    """The gate's figures and limits: the median and worst |error| over the judged rows, the
    limits widened by the noise the rounds measured, the rows not judged, the self-test."""
    tolerance = check["tolerance"]
    noisy = len(check["noisy"])
    return (
        f"median |error| {check['median_abs_error']:.1%} (<= {tolerance:.0%} + "
        f"{check['allowance']:.1%} noise), worst {check['worst_abs_error']:.1%} (<= "
        f"{2 * tolerance:.0%} + its noise) over {check['judged']} judged"
        + (f", {noisy} noisy, not judged" if noisy else "")
        + f"; {check['rounds']} rounds, between-round spread {check['spread']:.1%} (times), "
        f"{check['error_spread']:.1%} (errors); self-test "
        f"{sum(1 for m in check['mutations'] if m['caught'])}/{len(check['mutations'])} caught"
    )


_DISTRIBUTED_FAILED = {
    "predictions": "prediction check: predictions vs the link",
    "self-test": "self-test: the check is blind here, it could not see a 10x wrong link",
}
_DISTRIBUTED_NOT_GATED = {
    "predictions": "the predictions missed",
    "self-test": "blind, the check could not see a 10x wrong link here",
}


def distributed_summary(data: dict) -> str:
    """The CI line of --distributed: the verdict (the word the exit status follows), the ranks,
    the check's figures; a check that did not gate the run (no --check) says so."""
    check, verdict = data["check"], data["verdict"]
    missed = ""
    if not verdict["check_gated"] and verdict["check_missed"]:
        missed = " | not gated, it would fail: " + "; ".join(
            _DISTRIBUTED_NOT_GATED[p] for p in verdict["check_missed"]
        )
    return (
        f"kvplan measure --distributed: {verdict_words(verdict, _DISTRIBUTED_FAILED, '--check')}"
        f" | {data['ranks']} ranks, {data['backend']} | "
        + ("" if verdict["check_gated"] else NOT_GATED_WORDS + ": ")
        + f"{len(data['rows'])} operations: "
        + distributed_check_text(check)
        + missed
    )


def distributed_view(result, verdict) -> View:
    """The --distributed run (kvplan.measure.distributed.DistributedResult) and its verdict
    (kvplan.measure.verdict.distributed_verdict)."""
    data = jsonable(result)
    data["notes"] = note_json(result.notes)
    data["verdict"] = verdict_json(verdict)
    data["summary"] = distributed_summary(data)
    columns = [
        Column("operation", "operation", f.text, "left"),
        Column("bytes", "bytes", f.integer),
        Column("measured_s", "measured (ms)", f.ms3),
        Column("predicted_s", "predicted (ms)", f.ms3),
        Column("error", "error", f.percent),
        Column("spread", "spread", lambda v: f"{v:.1%}"),
        Column("noise", "noise", lambda v: f"±{v:.1%}"),
        Column("judged", "judged", lambda v: "yes" if v else "noisy, not judged"),
        Column("predicted_alpha_beta_s", "alpha-beta only (ms)", f.ms3),
        Column("predicted_profile_s", "profile (ms)", f.ms3),
    ]
    check = result.check
    missed = verdict.check_missed
    if not missed:
        said = "passed"
    elif verdict.check_gated:
        said = "FAILED (" + " and ".join(_DISTRIBUTED_FAILED[p] for p in missed) + ")"
    else:
        said = (
            NOT_GATED_WORDS
            + ", it would have failed ("
            + "; ".join(_DISTRIBUTED_NOT_GATED[p] for p in missed)
            + ")"
        )
    facts: list[Fact | tuple[str, str]] = [
        ("ranks", f"{result.ranks} ({result.backend}, {result.device})"),
        (
            "link (calibrated)",
            f"{f.us_text(result.latency_s, 1)} per step, {f.gbps_text(result.bandwidth_bytes_per_s, 2)}"
            + (
                f"; host reduction {f.gbps_text(result.reduce_bytes_per_s, 1)}"
                if result.reduce_bytes_per_s
                else ""
            ),
        ),
        Fact(
            "check",
            said + ": " + distributed_check_text(data["check"]),
            verdict=judged(
                check.passed,
                Verdict.warn
                if list(missed) == ["self-test"] or not verdict.check_gated
                else Verdict.bad,
            ),
        ),
    ]
    calibration_columns = [c for c in columns if c.key != "judged"]
    tables = [
        Table("predicted (calibrated on other sizes) vs measured", columns, rows_of(result.rows)),
        Table("calibration (not checked)", calibration_columns, rows_of(result.calibration)),
    ]
    return View("kvplan measure --distributed", facts, tables, note_texts(result.notes), data)


def distributed_junit_xml(data: dict) -> str:
    """A test case per predicted row (failed beyond twice the tolerance plus its noise; skipped
    when noisy, not judged), the median criterion and each mutation of the self-test: the
    failures are exactly what sets the exit status (without --check, skipped)."""
    check, gated = data["check"], data["verdict"]["check_gated"]
    cases = []
    for row in data["rows"]:
        limit = 2 * check["tolerance"] + row["noise"]
        if not row["judged"]:
            skipped = quoteattr(f"noisy, not judged: noise ±{row['noise']:.1%}")
            cases.append(
                f'    <testcase classname="kvplan.measure.distributed" '
                f'name={quoteattr(row["operation"])} time="{row["measured_s"]:.6f}">'
                f"<skipped message={skipped}/></testcase>"
            )
            continue
        failed = abs(row["error"]) > limit
        message = f"error {row['error']:+.1%} beyond {limit:.1%}"
        cases.append(
            _case(
                "kvplan.measure.distributed",
                row["operation"],
                row["measured_s"],
                message if failed else None,
                gated,
            )
        )
    if check["judged"]:
        median_limit = check["tolerance"] + check["allowance"]
        cases.append(
            _case(
                "kvplan.measure.distributed.gate",
                "median |error|",
                0.0,
                None
                if check["median_abs_error"] <= median_limit
                else f"{check['median_abs_error']:.1%} > {median_limit:.1%}",
                gated,
            )
        )
    for m in check["mutations"]:
        cases.append(
            _case(
                "kvplan.measure.distributed.self_test",
                f"{m['name']} is caught",
                0.0,
                None
                if m["caught"]
                else f"the check passes with {m['name']}: median {m['median_abs_error']:.1%}",
                gated,
            )
        )
    return _junit("kvplan measure --distributed", cases)
