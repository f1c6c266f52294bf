"""The verdict of a `kvplan measure` run: the one value that the CI summary's verdict word and the
command's exit status are both read from, so that the two cannot disagree (docs/measure.md,
"exit codes").

Every run computes the prediction check, and a run with `--baseline` the comparison; which of
them *gate* the run is what was asked for: `--check` gates the prediction check, `--baseline`
the comparison. A result that was computed but not asked for is reported as "not gated": it
never sets the exit status, and it is never called a pass or a failure.

The prediction check has three parts: kvplan's predictions against this device's steps, a
`--gpu` profile's (when one is given) and the self-test, which proves that the check could have
seen wrong bytes (or, with `--distributed`, a wrong link) on these measurements. A check whose
self-test missed is *blind*: its predictions may be within the limits, but it cannot vouch for
them, so a blind check is a failure, never a pass.

| outcome | exit | when |
|---|---|---|
| PASS | 0 | at least one gate ran, and every gate passed (a gated check: not blind either) |
| FAIL | 1 | the gated check failed: the predictions missed, or the check was blind |
| FAIL | 3 | a regression against `--baseline`, and the check (if gated) passed |
| NOT GATED | 0 | neither `--check` nor `--baseline`: the error table is the product |
"""

from __future__ import annotations

from collections.abc import Iterable

from kvplan.record import NamedTuple

EXIT_PASS = 0
EXIT_CHECK_FAILED = 1
EXIT_REGRESSION = 3

PASS, FAIL, NOT_GATED = "PASS", "FAIL", "NOT GATED"

# the parts of the prediction check, in the order they are reported, and the baseline's
PREDICTIONS, PROFILE, SELF_TEST = "predictions", "profile", "self-test"
BASELINE = "baseline"
CHECK_PARTS = (PREDICTIONS, PROFILE, SELF_TEST)

# which part of the check each failure note of a check says failed (kvplan.measure.run._check,
# kvplan.measure.distributed.judge and analyse); tests hold that every check note is here
PART_OF_FAILURE = {
    "check-median": PREDICTIONS,
    "check-worst": PREDICTIONS,
    "check-link-worst": PREDICTIONS,
    "check-profile-off": PROFILE,
    "check-no-memory-point": SELF_TEST,
    "check-mutation-missed": SELF_TEST,
}


class Verdict(NamedTuple):
    """What gated the run, what failed, and the exit status that follows."""

    outcome: str  # PASS | FAIL | NOT GATED
    exit_code: int  # 0, 1 or 3: EXIT_PASS, EXIT_CHECK_FAILED, EXIT_REGRESSION
    check_gated: bool  # --check: the prediction check sets the exit status
    baseline_gated: bool  # --baseline: the comparison sets it
    failed: tuple[str, ...]  # the gated parts that failed (CHECK_PARTS, then BASELINE)
    check_missed: tuple[str, ...]  # the check's failed parts, gated or not

    @property
    def blind(self) -> bool:
        """The check's self-test missed: it could not have seen a wrong byte count (or link)."""
        return SELF_TEST in self.check_missed

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS


def check_missed(failure_ids: Iterable[str]) -> tuple[str, ...]:
    """The parts of the check that its failure notes name, in report order. A failure note this
    table does not know counts against the predictions: it fails a gated check either way."""
    missed = {PART_OF_FAILURE.get(i, PREDICTIONS) for i in failure_ids}
    return tuple(part for part in CHECK_PARTS if part in missed)


def verdict_of(
    failure_ids: Iterable[str], check_gated: bool, regressions: int | None = None
) -> Verdict:
    """The verdict from the check's failure note ids (none: the check passed), whether `--check`
    gates it, and the baseline's confirmed regressions (None: no `--baseline`)."""
    missed = check_missed(failure_ids)
    baseline_gated = regressions is not None
    failed = missed if check_gated else ()
    if baseline_gated and regressions:
        failed += (BASELINE,)
    if not (check_gated or baseline_gated):
        return Verdict(NOT_GATED, EXIT_PASS, False, False, (), missed)
    if check_gated and missed:
        code = EXIT_CHECK_FAILED
    elif failed:
        code = EXIT_REGRESSION
    else:
        code = EXIT_PASS
    return Verdict(
        PASS if code == EXIT_PASS else FAIL, code, check_gated, baseline_gated, failed, missed
    )


def measure_verdict(result, comparison, check_gated: bool) -> Verdict:
    """A step sweep's verdict: its check (kvplan.measure.run.MeasureResult.check) and its
    comparison with a baseline (kvplan.measure.baseline.Comparison, or None)."""
    return verdict_of(
        (n.id for n in result.check.failures),
        check_gated,
        None if comparison is None else comparison.regressions,
    )


def distributed_verdict(result, check_gated: bool) -> Verdict:
    """`--distributed`'s verdict: its check alone (no baseline)."""
    return verdict_of((n.id for n in result.check.failures), check_gated)
