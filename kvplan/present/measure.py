"""`kvplan measure` as a View (facts, the profile, the error table, the self-test, the baseline
comparison), a one-line summary for a CI log, and JUnit XML (one test case per point and per
criterion of the gate)."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

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


def failed_parts(check: dict) -> list[str]:
    """Which of the gate's questions failed, in the user's terms: "predictions" (kvplan's
    predictions miss this device's steps), "profile" (the --gpu profile's do), "self-test" (the
    gate's own sensitivity: it could not have seen wrong bytes on these points). A dict of the
    Check (jsonable); "profile" is read from its failure notes when they are there."""
    out = []
    if (
        check["median_abs_error"] > check["tolerance"]
        or check["worst_abs_error"] > check["worst_tolerance"]
    ):
        out.append("predictions")
    if any(n.get("id") == "check-profile-off" for n in check.get("failures", ())):
        out.append("profile")
    if not check["memory_bound_points"] or not all(m["caught"] for m in check["mutations"]):
        out.append("self-test")
    return out


def check_text(check: dict) -> str:
    """The check in words: what failed, what it means, what to do."""
    errors = (
        f"median |error| {check['median_abs_error']:.1%} (<= {check['tolerance']:.0%}), worst "
        f"{check['worst_abs_error']:.1%} (<= {check['worst_tolerance']:.0%})"
    )
    caught = sum(1 for m in check["mutations"] if m["caught"])
    sensitivity = (
        f"{check['memory_bound_points']} memory-bound point(s), self-test {caught}/"
        f"{len(check['mutations'])} mutations caught"
    )
    if check["passed"]:
        return f"passed: {errors}, {sensitivity}"
    parts = failed_parts(check)
    if "predictions" in parts or "profile" in parts:
        what = " and ".join(
            {"predictions": "kvplan's predictions", "profile": "the --gpu profile's predictions"}[p]
            for p in parts
            if p != "self-test"
        )
        return (
            f"FAILED ({what} vs this device): {errors}; {sensitivity}. The step-time model, fed "
            "this machine's own probes, does not predict its steps within the limits. On a "
            "shared machine rerun with --confirm (a miss must show twice); if it misses again, "
            "the --json file says which operators are off"
        )
    missed = [m["name"] for m in check["mutations"] if not m["caught"]]
    cause = (
        f"with {', '.join(missed)} on purpose the gate would still pass"
        if missed
        else "no point is memory-bound, so wrong bytes could not show"
    )
    return (
        f"FAILED (kvplan's self-test, not its predictions): the predictions are within the limits "
        f"on this device ({errors}), but {cause}: on this machine these points cannot see such "
        "a mistake, so this run cannot vouch for the gate. Nothing here says kvplan is wrong "
        "on this machine; rerun with --confirm, or without --quick (more points)"
    )


def _threads(count: int) -> str:
    return f"{count} thread{'s' if count != 1 else ''}"


def summary_line(data: dict) -> str:
    """One line for a CI log: the verdict, the device, the errors, the self-test, the baseline."""
    check, comparison = data["check"], data.get("baseline")
    verdict = "PASS"
    parts = failed_parts(check) if not check["passed"] else []
    if parts and parts != ["self-test"]:
        verdict = "FAIL (prediction check: predictions vs this device)"
    elif parts:
        verdict = "FAIL (self-test: the gate could not see wrong bytes here; predictions passed)"
    elif not check["passed"]:
        verdict = "FAIL (prediction check)"
    elif comparison and comparison["regressions"]:
        verdict = "FAIL (regression)"
    identity = data["identity"]
    name = identity.get("nvml_name") or identity["name"]
    caught = sum(1 for m in check["mutations"] if m["caught"])
    line = (
        f"kvplan measure: {verdict} | {identity['kind']} {name}, "
        f"{_threads(data['conditions']['threads'])} | {len(data['points'])} points: median "
        f"|error| {check['median_abs_error']:.1%}, worst {check['worst_abs_error']:.1%} (limits "
        f"{check['tolerance']:.0%}/{check['worst_tolerance']:.0%}) | memory-bound points "
        f"{check['memory_bound_points']} | self-test {caught}/{len(check['mutations'])} caught"
    )
    if comparison:
        line += (
            f" | baseline: {comparison['regressions']} regressions, "
            f"{comparison['within_noise']} within noise (max {comparison['max_regression']:.0%})"
        )
    if data["conditions"].get("runs", 1) > 1:
        line += " | measured twice (--confirm)"
    return line


def measure_view(result, comparison=None) -> View:
    data = jsonable(result)
    if comparison is not None:
        data["baseline"] = {**jsonable(comparison), "passed": comparison.passed}
    data["notes"] = note_json(result.notes)
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
            check_text(jsonable(check)),
            # a self-test alone is the gate's sensitivity, not a wrong prediction: yellow
            verdict=judged(
                check.passed,
                Verdict.warn if failed_parts(jsonable(check)) == ["self-test"] else Verdict.bad,
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


def junit_xml(data: dict) -> str:
    """JUnit XML: a test case per point (failed beyond the worst-point tolerance), per criterion
    of the gate, per mutation of the self-test, and per baseline figure."""
    check = data["check"]
    cases = []

    def case(classname: str, name: str, seconds: float = 0.0, failure: str | None = None):
        body = f"<failure message={quoteattr(failure)}/>" if failure else ""
        cases.append(
            f"    <testcase classname={quoteattr(classname)} name={quoteattr(name)} "
            f'time="{seconds:.6f}">{body}</testcase>'
        )

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
        case(
            "kvplan.measure.baseline",
            c["key"],
            failure=f"worse by {c['worse_by']:.1%} (noise ±{c['noise']:.1%})"
            if c["verdict"] == "regression"
            else None,
        )
    failures = sum(1 for c in cases if "<failure" in c)
    elapsed = data["conditions"]["elapsed_s"]
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<testsuites tests="{len(cases)}" failures="{failures}" time="{elapsed:.3f}">',
            f'  <testsuite name="kvplan measure" tests="{len(cases)}" failures="{failures}" '
            f'time="{elapsed:.3f}">',
            *cases,
            "  </testsuite>",
            "</testsuites>",
            "",
        ]
    )


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


def distributed_summary(data: dict) -> str:
    check = data["check"]
    return (
        f"kvplan measure --distributed: {'PASS' if check['passed'] else 'FAIL (prediction check)'}"
        f" | {data['ranks']} ranks, {data['backend']} | {len(data['rows'])} operations: "
        + distributed_check_text(check)
    )


def distributed_view(result) -> View:
    data = jsonable(result)
    data["notes"] = note_json(result.notes)
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
        (
            "check",
            ("passed" if check.passed else "FAILED") + ": " + distributed_check_text(data["check"]),
        ),
    ]
    calibration_columns = [c for c in columns if c.key != "judged"]
    tables = [
        Table("predicted (calibrated on other sizes) vs measured", columns, rows_of(result.rows)),
        Table("calibration (not checked)", calibration_columns, rows_of(result.calibration)),
    ]
    return View("kvplan measure --distributed", facts, tables, note_texts(result.notes), data)


def distributed_junit_xml(data: dict) -> str:
    check = data["check"]
    cases = []
    for row in data["rows"]:
        limit = 2 * check["tolerance"] + row["noise"]
        failed = row["judged"] and abs(row["error"]) > limit
        message = quoteattr(f"error {row['error']:+.1%} beyond {limit:.1%}")
        skipped = quoteattr(f"noisy, not judged: noise ±{row['noise']:.1%}")
        body = (
            f"<failure message={message}/>"
            if failed
            else f"<skipped message={skipped}/>"
            if not row["judged"]
            else ""
        )
        cases.append(
            f'    <testcase classname="kvplan.measure.distributed" '
            f'name={quoteattr(row["operation"])} time="{row["measured_s"]:.6f}">{body}</testcase>'
        )
    failures = sum(1 for c in cases if "<failure" in c)
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<testsuites tests="{len(cases)}" failures="{failures}">',
            f'  <testsuite name="kvplan measure --distributed" tests="{len(cases)}" '
            f'failures="{failures}">',
            *cases,
            "  </testsuite>",
            "</testsuites>",
            "",
        ]
    )
