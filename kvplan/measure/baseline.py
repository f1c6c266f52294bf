"""`kvplan measure --baseline FILE --max-regression 5%`: did this machine get slower than last
time? A baseline is a profile YAML (`--save-profile`) or a measure JSON (`--json`) from an
earlier run; the bandwidths, matmul and attention throughputs, the launch overhead and (from a
JSON of the same workload) every step time are compared figure by figure.

A change is a regression when it is worse than `max_regression` AND larger than the noise: twice
the standard error of the two medians, from each run's p20-p80 spread and its number of rounds.
A change within the noise is reported as such, never failed."""

from __future__ import annotations

import json
import math

from kvplan.errors import KvplanError
from kvplan.inputs.files import user_path
from kvplan.inputs.hardware import MAX_ROUNDS, MAX_SPREAD, load_profile
from kvplan.measure.device import device_key
from kvplan.measure.profile import figures_of
from kvplan.measure.timing import noise
from kvplan.record import NamedTuple

# Figures that are the difference of two measurements (matmul_overhead: the first small matmul's
# time less its streaming estimate from another probe, ~50 of ~250 us on a CPU) swing by 60-170%
# between runs where neither measurement moved by more than a few percent; a baseline compares the
# raw time of their probe instead, under this key. A profile YAML keeps only the difference, so
# its matmul_overhead is not compared.
RESIDUALS = {"matmul_overhead": "matmul_start"}


class Figure(NamedTuple):
    value: float
    spread: float
    runs: int
    higher_is_better: bool


class Baseline(NamedTuple):
    path: str
    kind: str  # profile | measure-json
    identity: dict
    workload: dict | None  # model, layers, dtype of a measure JSON (None for a profile)
    figures: dict[str, Figure]


class Change(NamedTuple):
    key: str
    baseline: float
    current: float
    unit: str
    worse_by: float  # relative; positive = slower (a longer time or a lower rate)
    noise: float  # relative: 2 standard errors of the difference of the two medians
    verdict: str  # regression | within noise | ok | faster


class Comparison(NamedTuple):
    path: str
    kind: str
    baseline_device: str
    device: str
    same_device: bool
    max_regression: float
    compared_points: bool
    changes: tuple[Change, ...]
    regressions: int
    within_noise: int

    @property
    def passed(self) -> bool:
        return self.regressions == 0


def load_baseline(path: str) -> Baseline:
    """A profile YAML or a measure JSON; anything else is a one-line error."""
    file = user_path(path)
    if not file.is_file():
        what = "not a regular file" if file.exists() else "no such file"
        raise KvplanError(f"--baseline {path}: {what}")
    if file.suffix in (".yaml", ".yml"):
        profile = load_profile(str(file))
        from kvplan.atomic import release_input

        release_input(file)  # the previous result: --save-profile onto it updates it
        if profile.measured is None:
            raise KvplanError(
                f"--baseline {path}: a datasheet profile, not a measured one (write one with "
                "kvplan measure --save-profile)"
            )
        runs = int(profile.measured.device.get("rounds", 0) or 0)
        figures = {
            key: Figure(value, spread, runs, not key.endswith("overhead"))
            for key, (value, spread) in figures_of(profile).items()
        }
        return Baseline(str(file), "profile", profile.measured.device, None, figures)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KvplanError(
            f"--baseline {path}: not a readable JSON ({exc.__class__.__name__})"
        ) from None
    try:
        return from_json(data, str(file))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        detail = f" ({exc})" if isinstance(exc, BadFigure) else ""
        raise KvplanError(f"--baseline {path}: not a kvplan measure JSON{detail}") from None


class BadFigure(ValueError):
    """A number in a measure JSON that no run writes (NaN, infinite, negative, not a number)."""


def _figure_number(value, what: str, maximum: float = math.inf) -> float:
    """A time, rate or spread of a measure JSON: finite and not negative (NaN or a negative
    spread would hide every regression; a time of NaN compares as "ok")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadFigure(f"{what} is not a number")
    number = float(value)
    if not math.isfinite(number) or not 0 <= number <= maximum:
        raise BadFigure(f"{what} = {number!r} is out of range")
    return number


def from_json(data, path: str = "") -> Baseline:
    """A measure run's figures: from its JSON (a dict), or from the typed result it is written
    from (kvplan.measure.run.MeasureResult; the same fields, read as attributes)."""
    conditions = _get(data, "conditions")
    rounds = conditions["rounds"]
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise BadFigure(f"conditions.rounds = {str(rounds)[:20]} is not a whole number of rounds")
    runs = rounds
    identity = _get(data, "identity")
    if not isinstance(identity, dict):
        raise BadFigure("identity is not a mapping")
    figures = {}
    for f in _get(_get(data, "profile"), "figures"):
        key = str(_get(f, "key"))
        spread = _figure_number(_get(f, "spread"), f"{key}: spread", MAX_SPREAD)
        if key in RESIDUALS:  # compared as the raw time its probe measured
            value = _figure_number(_get(f, "probe_value"), f"{key}: probe_value")
            figures[RESIDUALS[key]] = Figure(value, spread, runs, False)
        else:
            value = _figure_number(_get(f, "value"), f"{key}: value")
            figures[key] = Figure(value, spread, runs, _get(f, "unit") != "s")
    for point in _get(data, "points"):
        key = point_key(point)
        figures[key] = Figure(
            _figure_number(_get(point, "measured_s"), f"{key}: measured_s"),
            _figure_number(_get(point, "spread"), f"{key}: spread", MAX_SPREAD),
            runs,
            False,
        )
    workload = {k: conditions[k] for k in ("model", "layers", "dtype", "attention_impl")}
    return Baseline(path, "measure-json", identity, workload, figures)


def _get(data, key: str):
    """A field of a JSON object (dict) or of a typed record."""
    return data[key] if isinstance(data, dict) else getattr(data, key)


def point_key(point) -> str:
    get = point.get if isinstance(point, dict) else point._asdict().get
    return f"{get('phase')}:batch={get('batch_size')},tokens={get('context_len')}"


def compare(
    current: Baseline, baseline: Baseline, max_regression: float, allow_other_device: bool
) -> Comparison:
    """Figure by figure, the current run against the baseline."""
    now, then = device_key(current.identity), device_key(baseline.identity)
    same = now == then
    if not same and not allow_other_device:
        raise KvplanError(
            f"--baseline {baseline.path} was measured on {then!r}, this is {now!r}: pass "
            "--allow-other-device to compare them anyway"
        )
    same_workload = baseline.workload is not None and baseline.workload == current.workload
    changes = []
    for key, base in baseline.figures.items():
        if key not in current.figures:
            continue
        is_point = "batch=" in key
        if is_point and not same_workload:
            continue
        cur = current.figures[key]
        if base.value <= 0 or cur.value <= 0:  # a cost clamped at zero: nothing to compare
            continue
        if base.higher_is_better:
            worse = base.value / cur.value - 1
        else:
            worse = cur.value / base.value - 1
        level = math.hypot(noise(cur.spread, cur.runs), noise(base.spread, base.runs))
        if worse > max_regression:
            verdict = "regression" if worse > level else "within noise"
        else:
            verdict = "faster" if worse < -max(max_regression, level) else "ok"
        unit = "s" if (is_point or key.endswith("overhead")) else _unit(key)
        changes.append(Change(key, base.value, cur.value, unit, worse, level, verdict))
    return Comparison(
        baseline.path,
        baseline.kind,
        then,
        now,
        same,
        max_regression,
        same_workload,
        tuple(changes),
        sum(1 for c in changes if c.verdict == "regression"),
        sum(1 for c in changes if c.verdict == "within noise"),
    )


def confirmed(first: Comparison, second: Comparison) -> Comparison:
    """The second run's comparison, where a figure counts as a regression only if it regressed in
    the first run too (`--confirm`): load from other jobs slows a different figure each time, a
    real regression slows the same one again. A figure that regressed once is "not confirmed"."""
    before = {c.key for c in first.changes if c.verdict == "regression"}
    changes = tuple(
        c._replace(verdict="not confirmed")
        if c.verdict == "regression" and c.key not in before
        else c
        for c in second.changes
    )
    return second._replace(
        changes=changes,
        regressions=sum(1 for c in changes if c.verdict == "regression"),
        within_noise=sum(1 for c in changes if c.verdict in ("within noise", "not confirmed")),
    )


def _unit(key: str) -> str:
    return "bytes_per_s" if "bandwidth" in key or key.startswith("stream") else "flop_per_s"
