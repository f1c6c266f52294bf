"""The 80% interval beside every simulated figure: how far published runs fall from kvplan's.

kvplan/data/intervals.json holds, per evidence class of the kernel rates a run was priced at
("own": this GPU's tables for this engine; "partial": those, but a part of the step is in
none of them and runs on the roofline; "other-engine": this GPU's, measured for the other
engine; "borrowed": another GPU's, named by the profile; "datasheet": none, the H100's fractions
on this GPU's datasheet rates; kvplan.inputs.kernel_tables; "untimed": a part of the serving path
outside the step is not timed) and per metric family (throughput,
ttft, tpot), the split-conformal 80% ends of log(measured / simulated) over the calibration runs
(tests/data/README.md says which; scripts/calibrate_intervals.py writes the file): of n sorted
values, the order statistics at 1-based ranks floor(0.1 (n + 1)) and ceil(0.9 (n + 1)), which
hold a new exchangeable run with probability >= 0.8 where the plain 10th/90th percentiles of a
small sample do not; a rank outside 1..n takes the extremes, half-width times the stated factor.
A workload of a kind (ShareGPT, the bench's random dataset, lognormal: workload_kind of
WorkloadSpec.length_dist) that fewer than min_runs of the class's calibration runs were takes
the class's half-width times workload_widen: the engines' classes were calibrated on one kind
each (the vLLM runs mostly ShareGPT, the SGLang runs mostly random), and how far a workload of
another kind lands is measured on the calibration runs, leaving each kind out in turn. A class with too few calibration runs of
its own takes the pooled spread of every class that is not "own", widened by a stated factor,
and says it is uncalibrated. The partial class also holds untimed-part factors
("untimed_factor"): where the simulation gives a run's untimed fraction u (the fraction of its
step time in terms that hold a part no kernel table times: EngineStats.untimed_time_fraction),
its ends are the own class's with those parts at k10..k90 times their stand-in, a time's end
plus log(1 - u + u k) (untimed_ends), so the less of the step is untimed the nearer the own
ends; (k10, k90) are split-conformal over the factors the partial calibration runs ask for,
per engine where it has min_engine_runs of them, else pooled. Without u, the class's ends.
The own class also holds TTFT untimed factors ("ttft_untimed_factor"): where the simulation
gives the fraction s of a run's median TTFT in costs no kernel table times (the API server's
request cost, the launch and host constants of the prefill steps:
EngineStats.ttft_untimed_fraction), its TTFT ends are the class's plus log(1 - s + s k) for k
at (k10, k90) (cost_ends): a lone short prefill, mostly constants, takes their spread, a queue
whose TTFT the kernel tables time keeps the class's ends (scripts/calibrate_intervals.py,
untimed_cost_factor, says how they are chosen), with an engine's own (k10, k90)
("ttft_untimed_factor_engines") where it has min_engine_runs own calibration runs: the
constants are each engine's rules (SGLang's eager prefill takes aiconfigurator's vLLM launch
fit). Likewise throughput ("throughput_untimed_factor", pooled: one API-server cost for both
engines): where the simulation gives the fraction r of a run's duration that the API server's
per-request cost would take paid in turn (EngineStats.frontend_request_fraction; a burst of
short requests rests on it), its throughput ends are the class's less log(1 - r + r k).
A figure's interval is [point * exp(q10), point * exp(q90)]: not
centred on the point where kvplan is biased (the simulation was faster than the real run in
most published runs), and the point stays the model's answer.

Other confidences (plan --confidence) take a normal distribution of the log ratio with the
centre and spread of the run's ends as the interval gives them (log_quantiles: the class's, or
widened by the run's untimed fractions u and s where the plan's run gives them), q90 - q10 =
2 * 1.2816 sigma, so at 0.9 the plan's bound is the interval's own 90% end; an open end (no
centre) leaves the quantiles on its side open and those on the other at the finite end."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from statistics import NormalDist

from kvplan.engines.sglang import (
    detokenizer_untimed,
    gpt_oss_below_blackwell,
    sglang_transformers_backend,
)
from kvplan.errors import KvplanError
from kvplan.inputs.kernel_tables import tables_for
from kvplan.record import NamedTuple

PATH = Path(__file__).resolve().parent.parent / "data" / "intervals.json"
FAMILIES = ("throughput", "ttft", "tpot")
Z80 = NormalDist().inv_cdf(0.9)  # the 90th percentile of a standard normal: 1.2816
CONFIDENCE_RANGE = (0.5, 0.95)

# bench keys by how they follow the engine's speed: rates (higher is faster), times of a
# metric family (lower is faster), and the run's duration (a time that throughput sets)
RATE_KEYS = (
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
)


def family_of(key: str) -> tuple[str, bool] | None:
    """(metric family, is a rate) of a bench key, or None for a count the workload fixes."""
    if key in RATE_KEYS:
        return "throughput", True
    if key == "duration":
        return "throughput", False
    if key.endswith("_ttft_ms"):
        return "ttft", False
    if key.endswith(("_tpot_ms", "_itl_ms")):
        return "tpot", False
    if key.endswith("_e2el_ms"):  # a request's time is mostly its decode: the TPOT spread,
        return "e2el", False  # or the throughput's where that is wider (see quantiles)
    return None


# the class of runs whose serving path has a part kvplan does not time, or times only from
# another machine's CPU, whatever its kernel tables (SGLang's detokenizer on Moonshot's
# tokenizer: kvplan.engines.sglang.detokenizer_untimed; its per-token cost,
# detokenizer_token_s, was measured on a CPU other than the serving host's), or whose kernels
# are of a family no table times and no stand-in prices at its own rate (SGLang's gpt-oss
# before Blackwell: triton_kernels' matmul_ogs MXFP4 experts and, on Ampere, the Triton
# attention backend; kvplan.engines.sglang.gpt_oss_below_blackwell, note
# sim-weak-gpt-oss-sglang, which reads the figures as an upper bound), or whose model SGLang
# serves on its Transformers backend (kvplan.engines.sglang.sglang_transformers_backend)
UNTIMED = "untimed"
# the class of runs priced at the GPU's own tables for the engine where a part of the step is in
# none of them (StepModel.untimed_parts: a fused MoE of another shape or format, DSA's indexer,
# recurrent layers, an attention backend without rows): the roofline prices that part
PARTIAL = "partial"
# the class of runs on another GPU's kernel rates: the profile's borrowed tables, or a part of
# the step timed from another GPU's rows by a ratio fitted on the rows both have
# (StepModel.borrowed_parts, kvplan/data/kernel_tables/transfer.json)
BORROWED = "borrowed"


# the engines whose runs can be in the UNTIMED class (untimed)
UNTIMED_ENGINES = ("sglang",)


def untimed(spec, engine: str) -> bool:
    """Whether serving `spec` under `engine` runs a part of its serving path kvplan does not
    time: SGLang's detokenizer on Moonshot's tokenizer."""
    return engine in UNTIMED_ENGINES and detokenizer_untimed(spec)


def untimed_run(spec, engine: str, gpu) -> bool:
    """Whether a run of `spec` under `engine` on `gpu` is of the UNTIMED class: its serving
    path has a part kvplan does not time (untimed), its step runs a kernel family kvplan's
    note calls an upper bound (SGLang's gpt-oss before Blackwell: gpt_oss_below_blackwell),
    or SGLang serves its architecture on the Transformers backend, whose model code kvplan
    does not time (sglang_transformers_backend, note sglang-transformers-backend)."""
    if engine not in UNTIMED_ENGINES:
        return False
    return (
        untimed(spec, engine)
        or gpt_oss_below_blackwell(spec, gpu)
        or sglang_transformers_backend(spec)
    )


def raw_class(
    gpu,
    engine: str,
    spec=None,
    untimed_parts: tuple[str, ...] = (),
    borrowed_parts: tuple[str, ...] = (),
) -> str:
    """The class a run belongs to, whatever intervals.json holds: UNTIMED where its serving
    path has a part kvplan does not time or its step a kernel family no table prices
    (untimed_run); where the GPU's own tables for this engine
    price it, BORROWED where a part of its step is timed from another GPU's rows by a fitted
    ratio (`borrowed_parts`: StepModel.borrowed_parts; the class's ends hold PARTIAL's, so a
    step with both kinds of part takes it), PARTIAL where some part is in none of them
    (`untimed_parts`: StepModel.untimed_parts); else the evidence class of the kernel rates it
    is priced at (the profile's `kernel_tables` field, kvplan.inputs.kernel_tables)."""
    if spec is not None and untimed_run(spec, engine, gpu):
        return UNTIMED
    evidence = tables_for(gpu, engine).evidence
    if evidence == "own" and borrowed_parts:
        return BORROWED
    return PARTIAL if evidence == "own" and untimed_parts else evidence


def evidence_for(
    gpu,
    engine: str,
    spec=None,
    untimed_parts: tuple[str, ...] = (),
    borrowed_parts: tuple[str, ...] = (),
) -> str:
    """The interval class of a run on `gpu` under `engine` (raw_class), as "class/engine"
    where intervals.json calibrated that engine on its own, else the class; a class the file
    does not hold (UNTIMED, PARTIAL before scripts/calibrate_intervals.py wrote them) falls
    back to the next: UNTIMED to the step's class (PARTIAL with untimed parts), that to the
    kernel tables' evidence class."""
    classes = table()["classes"]
    evidence = raw_class(gpu, engine, spec, untimed_parts, borrowed_parts)
    if evidence not in classes:
        evidence = raw_class(gpu, engine, None, untimed_parts, borrowed_parts)
    if evidence not in classes:
        evidence = tables_for(gpu, engine).evidence
    specific = f"{evidence}/{engine}"
    return specific if specific in classes else evidence


@cache
def table() -> dict:
    try:
        return json.loads(PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KvplanError(f"interval table {PATH.name}: {exc}") from None


# the workload kind of each length distribution (kvplan.simulate.workload.LENGTH_DISTS): the bench
# clients' random datasets draw at the means (range ratio 0, their default) or uniformly about
# them, which the calibration runs' random-dataset cases stand for as "fixed"
WORKLOAD_OF_LENGTH_DIST = {
    "fixed": "random",
    "uniform": "random",
    "vllm-random": "random",
    "sglang-random": "random",
    "sharegpt": "sharegpt",
    "lognormal": "lognormal",
}


def workload_kind(length_dist: str) -> str:
    """The workload kind intervals.json counts calibration runs by (WORKLOAD_OF_LENGTH_DIST)."""
    if length_dist not in WORKLOAD_OF_LENGTH_DIST:
        raise KvplanError(f"no interval workload kind for length distribution {length_dist!r}")
    return WORKLOAD_OF_LENGTH_DIST[length_dist]


def transfer_widen(evidence: str, length_dist: str) -> float:
    """The factor on the class's half-width for a workload of `length_dist`
    (WorkloadSpec.length_dist): the stored workload_widen where fewer than min_runs of the
    class's calibration runs were of that workload kind, else 1."""
    doc = table()
    seen = doc["classes"][evidence]["workloads"].get(workload_kind(length_dist), 0)
    return float(doc["workload_widen"]) if seen < doc["min_runs"] else 1.0


class Untimed(NamedTuple):
    """What a simulated run says of its untimed parts: its engine, the fraction of its step
    time in the terms that hold them (EngineStats.untimed_time_fraction), the fraction of
    its median TTFT in costs no kernel table times (EngineStats.ttft_untimed_fraction), and
    the fraction of its duration the API server's per-request cost would take, paid in turn
    (EngineStats.frontend_request_fraction); and the fraction of its step time in launches
    priced on another release's eager DSA rows (EngineStats.stand_in_launch_fraction: above 0,
    those rows are one of its untimed parts, batch_step.run_untimed_parts)."""

    engine: str
    time_fraction: float
    ttft_fraction: float = 0.0
    request_fraction: float = 0.0
    stand_in_launch_fraction: float = 0.0


def run_untimed(engine: str, stats) -> Untimed:
    """A simulated run's Untimed from its EngineStats (kvplan.simulate.metrics) under `engine`:
    the one reading simulate's intervals and plan's factors take."""
    return Untimed(
        engine,
        stats.untimed_time_fraction,
        stats.ttft_untimed_fraction,
        stats.frontend_request_fraction,
        stats.stand_in_launch_fraction,
    )


# below this untimed fraction a run's ends are the own class's (the factor's score divides by it)
MIN_UNTIMED_FRACTION = 1e-3


def untimed_factors(evidence: str, engine: str) -> tuple[tuple[float, float], ...] | None:
    """The class's untimed-part factors for `engine` ((k10, k90) per metric family in
    FAMILIES' order, intervals.json "untimed_factor"), or None where the class has none."""
    rule = table()["classes"][evidence].get("untimed_factor")
    if rule is None:
        return None
    by_engine = rule["engines"].get(engine, rule["pooled"])
    return tuple(tuple(by_engine[family]) for family in FAMILIES)


def untimed_ends(
    base: tuple[float, float], factors: tuple[float, float], time_fraction: float, is_time: bool
) -> tuple[float, float]:
    """The log-ratio ends of a run with `time_fraction` of its step time in untimed parts: the
    step is the timed rest at the own class's ends `base` plus the untimed parts at k times
    their stand-in, k within `factors` (k10 <= 1 <= k90), so a time's ends are
    base + log(1 - share + share * k) (`is_time`; a rate's the same on the inverse). A lower
    factor that would leave no time (1 - share + share * k10 <= 0) leaves the end open (-inf
    on a time, +inf on a rate)."""
    u, (k10, k90) = _share(time_fraction), factors
    low, high = (base[0], base[1]) if is_time else (-base[1], -base[0])
    fast = 1 - u + u * k10
    low = low + math.log(fast) if fast > 0 else -math.inf
    high = high + math.log(1 - u + u * k90)
    return (low, high) if is_time else (-high, -low)


def _share(time_fraction: float) -> float:
    """An untimed time fraction, refused where it is no share of a step (outside [0, 1], NaN)."""
    if not 0.0 <= time_fraction <= 1.0:
        raise KvplanError(f"untimed time fraction {time_fraction!r} is not a share within [0, 1]")
    return time_fraction


# the entry keys of the costs no kernel table times, per metric family they widen (the own
# class's; scripts/calibrate_intervals.py untimed_cost_factor): [k10, k90] pooled over engines,
# and "<key>_engines" {engine: [k10, k90]} where an engine has its own
COST_FACTOR_KEYS = {"ttft": "ttft_untimed_factor", "throughput": "throughput_untimed_factor"}


def cost_fraction(untimed: Untimed, family: str) -> float:
    """The run's share in untimed costs that a family's cost factor applies to: of its median
    TTFT (ttft_fraction), of its duration the API server's per-request cost paid in turn
    (request_fraction, for throughput)."""
    return untimed.ttft_fraction if family == "ttft" else untimed.request_fraction


def cost_factor(entry: dict, family: str, engine: str) -> tuple[float, float] | None:
    """The entry's (k10, k90) on `family`'s untimed costs for `engine` (its engine's own where
    the file has one, else pooled), or None where the entry has none for that family."""
    key = COST_FACTOR_KEYS.get(family)
    if key is None:
        return None
    factors = entry.get(f"{key}_engines", {}).get(engine, entry.get(key))
    return None if factors is None else (factors[0], factors[1])


def cost_ends(entry: dict, family: str, untimed: Untimed | None) -> tuple[float, float]:
    """A class entry's ends of `family` for a run with the share cost_fraction of it in costs
    no kernel table times: for TTFT, of its median TTFT, the API server's per-request cost and
    the launch and host constants (kvplan.simulate.metrics.ttft_untimed_fraction); for
    throughput, of its duration, the API server's per-request cost paid in turn
    (metrics.frontend_request_fraction). Where the entry has factors on them (cost_factor),
    its conformal ends with those costs at k10..k90 times their constants (untimed_ends), so a
    run whose figure is all kernel-timed keeps the ends and one that rests on those costs (a
    lone short prefill's TTFT, a burst of short requests' duration) takes the factors'
    spread; else, or without the share, the conformal ends."""
    low, high = entry["log_ratio"][family]
    factors = None if untimed is None else cost_factor(entry, family, untimed.engine)
    if untimed is None or factors is None:
        return low, high
    share = _share(cost_fraction(untimed, family))
    if share < MIN_UNTIMED_FRACTION:
        return low, high
    return untimed_ends((low, high), factors, share, family != "throughput")


def _own_ends(engine: str, family: str, untimed: Untimed | None) -> tuple[float, float]:
    """The own class's ends for `engine` (its engine's entry where there is one), at the run's
    share in untimed costs (cost_ends)."""
    classes = table()["classes"]
    own = f"own/{engine}"
    return cost_ends(classes[own if own in classes else "own"], family, untimed)


def _family_ends(evidence: str, family: str, untimed: Untimed | None) -> tuple[float, float]:
    """A metric family's stored ends: the class's conformal ends (at the run's share in untimed
    costs: cost_ends), or where the class has untimed-part factors and the run's untimed
    fraction is known, the own class's ends (_own_ends) widened by them (untimed_ends)."""
    classes = table()["classes"]
    entry = classes[evidence]
    factors = None if untimed is None else untimed_factors(evidence, untimed.engine)
    if untimed is None or factors is None:
        return cost_ends(entry, family, untimed)
    base = _own_ends(untimed.engine, family, untimed)
    if _share(untimed.time_fraction) < MIN_UNTIMED_FRACTION:
        return base
    return untimed_ends(
        base,
        factors[FAMILIES.index(family)],
        untimed.time_fraction,
        family != "throughput",
    )


def log_quantiles(
    evidence: str, family: str, length_dist: str, untimed: Untimed | None = None
) -> tuple[float, float]:
    """(q10, q90) of log(measured / simulated) for this class and metric family, for a
    workload of `length_dist` (half-width times transfer_widen); `untimed`: the run's untimed
    fraction, where the simulation gave one (_family_ends)."""
    classes = table()["classes"]
    if evidence not in classes:
        raise KvplanError(f"no interval for evidence {evidence!r}")
    if family == "e2el":  # the wider of the two it is made of
        a = _family_ends(evidence, "tpot", untimed)
        b = _family_ends(evidence, "throughput", untimed)
        # throughput's ratio is inverse to a time's
        low, high = min(a[0], -b[1]), max(a[1], -b[0])
    else:
        low, high = _family_ends(evidence, family, untimed)
    if not (math.isfinite(low) and math.isfinite(high)):
        return low, high  # an open end: no centre to widen about
    widen = transfer_widen(evidence, length_dist)
    centre, half = (low + high) / 2, (high - low) / 2
    return centre - widen * half, centre + widen * half


def calibrated(evidence: str) -> bool:
    return bool(table()["classes"][evidence]["calibrated"])


def log_quantile(
    evidence: str, family: str, length_dist: str, p: float, untimed: Untimed | None = None
) -> float:
    """The p-quantile of log(measured / simulated), from the normal through q10 and q90 of the
    run's ends (log_quantiles: `untimed`, the run's untimed fractions, widen them as they widen
    its interval). Where an end is open (untimed_ends) there is no centre: a quantile on its
    side is open too, one on the other side the finite end."""
    q10, q90 = log_quantiles(evidence, family, length_dist, untimed)
    if not (math.isfinite(q10) and math.isfinite(q90)):
        return q10 if p < 0.5 else q90
    centre, sigma = (q10 + q90) / 2, (q90 - q10) / (2 * Z80)
    return centre + sigma * NormalDist().inv_cdf(p)


def step_scales(
    evidence: str, length_dist: str, untimed: Untimed | None = None
) -> tuple[float, float]:
    """(low, high) step-time scales of the class: exp of its TPOT ends (log_quantiles). A
    median TPOT is the step time between a request's tokens, so how far the real one lands from
    the simulated one is how far the real step does; the interval reruns the simulation with
    every step time at each scale (kvplan.simulate.setup.with_step_scale) and propagates it
    through the queue (bench_interval)."""
    q10, q90 = log_quantiles(evidence, "tpot", length_dist, untimed)
    return math.exp(q10), math.exp(q90)


def propagated_families() -> tuple[str, ...]:
    """The metric families whose interval holds the propagated runs' values (intervals.json
    "propagate", chosen on the calibration runs by scripts/calibrate_intervals.py); none where
    the file does not say."""
    return tuple(table().get("propagate", {}).get("families", ()))


def interval(
    value: float,
    key: str,
    evidence: str,
    length_dist: str,
    scaled: tuple[float | None, ...] = (),
    untimed: Untimed | None = None,
) -> tuple[float, float]:
    """The 80% interval of one bench figure: the class's conformal ends about the point (for
    a run's `untimed` fraction, log_quantiles) and, where its family is propagated
    (propagated_families), the envelope of those and the figure's values in the runs at the
    class's step scales (`scaled`)."""
    kind = family_of(key)
    if kind is None:
        return value, value
    family, is_rate = kind
    q10, q90 = log_quantiles(evidence, family, length_dist, untimed)
    if family == "throughput" and not is_rate:  # the duration: inverse to the throughput
        q10, q90 = -q90, -q10
    low, high = value * math.exp(q10), value * math.exp(q90)
    if family in propagated_families():
        seen = [v for v in scaled if v is not None and math.isfinite(v)]
        low, high = min([low, *seen]), max([high, *seen])
    return low, high


def _numeric(bench) -> dict:
    """The bench result's finite numeric keys."""
    return {
        key: value
        for key, value in bench._asdict().items()
        if not isinstance(value, bool)
        and isinstance(value, (int, float))
        and not (isinstance(value, float) and not math.isfinite(value))
    }


def bench_interval(
    bench, evidence: str, length_dist: str, scaled_benches=(), untimed: Untimed | None = None
) -> dict:
    """{key: [low, high]} for every numeric key of a bench result; `scaled_benches`: the same
    run at the class's step scales (step_scales), whose values a propagated family's interval
    holds; `untimed`: the run's untimed fraction (log_quantiles)."""
    others = [b._asdict() for b in scaled_benches]
    out = {}
    for key, value in _numeric(bench).items():
        low, high = interval(
            value, key, evidence, length_dist, tuple(o.get(key) for o in others), untimed
        )
        out[key] = [low, high]
    return out


def stretched(bench, scale: float):
    """`bench` on a clock stretched by `scale`: what the simulation gives with every step time
    times `scale` where nothing else keeps time (every request sent at once or closed-loop, no
    arrival rate or trace): each latency and the duration times `scale`, each rate divided by
    it, counts unchanged. The frontend's fixed per-request costs are stretched too (they are
    not steps), and a peak over one-second windows (max_output_tokens_per_s) is divided as a
    rate though its windows are the wall clock's: approximations where steps dominate, which
    save each such run its two reruns (kvplan.plans.simulate._with_intervals)."""
    changes = {}
    for key, value in _numeric(bench).items():
        kind = family_of(key)
        if kind is None:
            continue
        changes[key] = value / scale if kind[1] else value * scale
    return bench._replace(**changes)


def step_scaled(scales: tuple[float, ...], scaled_benches) -> dict:
    """The runs at the step scales as a result keeps them: {"step_scales": scales, key: [its
    value in each run]} for every key of a metric family (family_of)."""
    out: dict = {"step_scales": list(scales)}
    for bench in scaled_benches:
        for key, value in _numeric(bench).items():
            if family_of(key) is not None:
                out.setdefault(key, []).append(value)
    return out


def check_confidence(confidence: float | None) -> None:
    if confidence is None:
        return
    lo, hi = CONFIDENCE_RANGE
    if not (isinstance(confidence, (int, float)) and lo <= confidence <= hi):
        raise KvplanError(f"--confidence must be between {lo} and {hi} (got {confidence})")


def pessimistic_factors(
    evidence: str, length_dist: str, confidence: float, untimed: Untimed | None = None
) -> dict:
    """At `confidence`, how much slower the real engine may be: 'rate' divides the rate one
    replica sustains; 'ttft', 'tpot', 'e2el' multiply those latencies (each >= 1 only where the
    evidence says the real run is slower at that confidence; never below 1: the point estimate
    is the optimistic end a plan may use). `untimed`: the simulated run's untimed fractions
    (u: its step time's, s: its median TTFT's), which widen its ends as they widen the
    interval `simulate` prints for it (log_quantile); None: the class's ends.

    Where a family's interval is propagated (propagated_families), the step scale at
    `confidence` (the TPOT factor) bounds it from below, and the rate's too: with every step s
    times slower, a replica at the real rate G runs as the simulation does at G * s with every
    time s times longer (arrivals and steps on one clock stretched by s), so simulating at
    G * rate (rate >= s) and taking a latency times a factor >= s holds the propagated run's
    latency."""
    rate = math.exp(-log_quantile(evidence, "throughput", length_dist, 1 - confidence, untimed))
    step = math.exp(log_quantile(evidence, "tpot", length_dist, confidence, untimed))
    propagated = propagated_families()
    if propagated:
        rate = max(rate, step)
    out = {"rate": max(rate, 1.0)}
    for family in ("ttft", "tpot", "e2el"):
        factor = math.exp(log_quantile(evidence, family, length_dist, confidence, untimed))
        if family in propagated:
            factor = max(factor, step)
        out[family] = max(factor, 1.0)
    return out
