"""Write kvplan/data/intervals.json: the spread of published runs around kvplan simulate.

    python scripts/calibrate_intervals.py [--check] [--coverage]

Calibration runs (tests/data/README.md):
  - tests/data/sim_bench_cases.json: the 25 runs that decided earlier choices of the step model
    (they are not held out for anything, so they may set widths);
  - split "calibrate" (first byte of sha256(id) even) of each other published-run file: the
    GPUStack vLLM and SGLang files and the external (SGLang cookbook, vLLM recipes) file, so
    each engine's class is calibrated on every source that measured it (until stop 41 the
    GPUStack files were held out whole and the SGLang class saw one source only, the cookbook,
    and its interval missed the GPUStack SGLang runs: between-source spread was not in it).
Held out, never read here except by --coverage: the "validate" split of those files.

Per evidence class (kvplan.plans.intervals.evidence_for) and metric family the file stores the
split-conformal 80% ends of log(measured / simulated) (output throughput, median TPOT, median
TTFT): with n calibration values sorted, the order statistics at ranks floor(0.1 (n + 1)) and
ceil(0.9 (n + 1)) (1-based): a new run exchangeable with the calibration runs falls below the
low end with probability at most floor(0.1 (n + 1)) / (n + 1) <= 0.1, above the high end likewise,
so inside with probability >= 0.8 (the plain 10th/90th percentiles of 6-25 runs under-cover).
Where a rank falls outside 1..n (n < 9) the ends are the sample's extremes, their half-width
times WIDEN. A class with fewer than MIN_RUNS calibration runs takes the pooled runs
of every class but "own", its half-width times WIDEN, and is marked uncalibrated. An engine's
own entry of a class ("own/sglang") exists where that engine's runs of the class are
MIN_ENGINE_RUNS from MIN_LABS labs or more; else its runs take the class's ends, pooled over
engines. Nested: a class's ends hold those of every class that knows more (nested()).

--coverage prints, for the held-out runs, the share whose measured value lies inside the 80%
interval, per metric and per engine and GPU family."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from sim_accuracy import groups  # noqa: E402

from kvplan.errors import KvplanError  # noqa: E402
from kvplan.inputs.hardware import load_profile  # noqa: E402
from kvplan.inputs.kernel_tables import tables_for  # noqa: E402
from kvplan.inputs.sources import load_model  # noqa: E402
from kvplan.plans import intervals  # noqa: E402

from sim_cases import (  # noqa: E402
    CASES_PATH,
    HELDOUT,
    gpu_name,
    inconsistent_metrics,
    load_cases,
    replayed_from_serve_cmd,
    run_case,
    simulate_request,
)
from sim_replay import needs, replayed_model  # noqa: E402

MIN_RUNS = 6
# an engine's own entry of a class needs its calibration runs from this many labs (lab): one
# lab's runs hold none of the spread between labs, and its narrow ends missed another lab's
# runs (until 0.7.0 own/sglang held the SGLang cookbook's runs only, 0.70-0.92x on
# throughput, and the GPUStack lab's SGLang runs landed 1.0-1.3x)
MIN_LABS = 2
# ... and this many runs: the smallest n whose conformal ranks floor(0.1 (n + 1)) >= 2 and
# ceil(0.9 (n + 1)) <= n - 1 leave a run beyond each end, so that no single run sets an end (with
# 9-18 runs the ends are the sample's extremes: one outlier decides them, and the pooled class's
# ends, from more runs, are the better estimate; partial/sglang's 10 runs took 0.05x from one
# GPUStack gpt-oss run on an A100 whose median TPOT was 2.5 s)
MIN_ENGINE_RUNS = 19
# the classes by how much a run's kernel rates are known, most first (nested: a class's ends
# hold those of every class before it)
EVIDENCE_ORDER = ("own", intervals.PARTIAL, "other-engine", "borrowed", "datasheet")
CLASSES = (*EVIDENCE_ORDER, intervals.UNTIMED)
WIDEN = 1.5
FAMILY_OF_METRIC = {
    "output_throughput": "throughput",
    "median_tpot_ms": "tpot",
    "median_ttft_ms": "ttft",
}


def evidence(
    case: dict, untimed_parts: tuple[str, ...], borrowed_parts: tuple[str, ...] = ()
) -> str:
    """The run's interval class (kvplan.plans.intervals.raw_class) before any interval exists:
    intervals.UNTIMED for a run whose serving path has a part kvplan does not time (SGLang's
    detokenizer on Moonshot's tokenizer); intervals.PARTIAL for one priced at its GPU's own
    tables where its simulation names parts of the step no table times (`untimed_parts`);
    else its kernel tables' evidence class."""
    engine = case.get("engine", "vllm")
    spec = load_model(replayed_model(case), checkpoint=False)
    gpu = load_profile(gpu_name(case))
    return intervals.raw_class(gpu, engine, spec, untimed_parts, borrowed_parts)


def _published() -> list[dict]:
    return [*(c for name in ("vllm", "sglang", "external") for c in load_cases(HELDOUT[name]))]


def calibration_cases() -> list[dict]:
    """The 25 first runs, and the calibrate split of every other published-run file."""
    calibrate = [c for c in _published() if c.get("split") == "calibrate"]
    return [*load_cases(CASES_PATH), *calibrate]


def heldout_cases() -> list[dict]:
    """The validate split of every published-run file but the features file (held out whole,
    tests/data/README.md; the features runs' coverage is scripts/sim_features.py's)."""
    return [c for c in _published() if c.get("split") == "validate"]


def log_ratios(cases: list[dict]) -> list[dict]:
    """Per simulated case: its id, class, groups and {metric: log(measured / simulated)}."""
    rows = []
    for case in cases:
        if replayed_from_serve_cmd(case) and needs(case):  # what simulate lacks for it
            continue
        try:
            sim = run_case(case)
        except KvplanError as exc:
            print(f"  {case['id'][:60]}: not simulated ({exc})", file=sys.stderr)
            continue
        length_dist = simulate_request(case).workload.length_dist
        ratios, propagated = {}, {}
        scaled = sim.get("step_scaled") or {}
        marked = inconsistent_metrics(case)  # contradicts its own medians: not calibrated on
        for metric in FAMILY_OF_METRIC:
            measured, simulated = case["measured"].get(metric), sim[metric]
            if measured and simulated and metric not in marked:
                ratios[metric] = math.log(measured / simulated)
                # log(value at each step scale / simulated): the runs at the class's step scales
                propagated[metric] = [
                    math.log(v / simulated) for v in scaled.get(metric) or () if v
                ]
        rows.append(
            {
                "id": case["id"],
                "evidence": evidence(case, sim["untimed_parts"], sim["borrowed_parts"]),
                "untimed_parts": list(sim["untimed_parts"]),
                # of the run's step time, the fraction in terms holding an untimed part
                "untimed_time_fraction": sim["untimed_time_fraction"],
                # of the run's median TTFT, the fraction in costs no kernel table times
                "ttft_untimed_fraction": sim["ttft_untimed_fraction"],
                # of the run's duration, the API server's per-request cost paid in turn
                "request_fraction": sim["frontend_request_fraction"],
                # the kernel tables' class, which an untimed run takes until the file has one
                "tables_evidence": tables_for(
                    load_profile(gpu_name(case)), case.get("engine", "vllm")
                ).evidence,
                "groups": groups(case),
                "length_dist": length_dist,
                "workload": intervals.workload_kind(length_dist),
                "ratios": ratios,
                "propagated": propagated,
                "step_scales": scaled.get("step_scales"),
                "sim": {m: sim[m] for m in FAMILY_OF_METRIC},
                "measured": {m: case["measured"].get(m) for m in FAMILY_OF_METRIC},
            }
        )
        print(f"  {case['id'][:60]:60} {rows[-1]['evidence']}", file=sys.stderr)
    return rows


def conformal_ranks(n: int) -> tuple[int, int]:
    """The 1-based ranks of the split-conformal 80% ends among n sorted calibration values."""
    return math.floor(0.1 * (n + 1)), math.ceil(0.9 * (n + 1))


def quantiles(values: list[float]) -> list[float]:
    """The split-conformal 80% ends of `values`; beyond the sample (n < 9: a rank outside
    1..n) the sample's extremes, widened by WIDEN about their centre."""
    ordered = sorted(values)
    low, high = conformal_ranks(len(ordered))
    if low < 1 or high > len(ordered):
        return widened([ordered[0], ordered[-1]])
    return [ordered[low - 1], ordered[high - 1]]


def widened(pair: list[float]) -> list[float]:
    centre, half = (pair[0] + pair[1]) / 2, (pair[1] - pair[0]) / 2
    return [centre - WIDEN * half, centre + WIDEN * half]


def untimed_scores(
    row: dict, metric: str, base: list[float], fraction: str = "untimed_time_fraction"
) -> tuple[float, float]:
    """(the lower, the upper) factor k on a run's untimed parts that its measured value asks
    for, beyond the own class's ends `base` of its family: with u the run's untimed fraction
    (row[`fraction`]: of its step time, or of its TTFT) and t = exp(y - end) its time ratio
    past an end (a rate's inverse), the step is (1 - u) + u k times the simulated one where
    t = 1 - u + u k, k = (t - 1 + u) / u; the lower score at most 1 and the upper at least 1
    (inside the own ends, no factor is asked)."""
    u = row[fraction]
    y = row["ratios"][metric]
    low, high = base
    if FAMILY_OF_METRIC[metric] == "throughput":  # a rate: its time ratio is the inverse
        y, low, high = -y, -high, -low
    fast = (math.exp(y - low) - 1 + u) / u
    slow = (math.exp(y - high) - 1 + u) / u
    return min(1.0, fast), max(1.0, slow)


def untimed_factor_pair(
    members: list[dict], metric: str, base: list[float], own: dict | None = None
) -> list[float]:
    """The split-conformal (k10, k90) of the runs' untimed_scores: the lower scores' rank
    floor(0.1 (n + 1)), the upper's ceil(0.9 (n + 1)) (beyond the sample, n < 9: the extremes);
    k10 at least 0 (the untimed parts free). A TTFT's or throughput's base is the own entry
    `own`'s at the run's share in untimed costs (kvplan.plans.intervals.cost_ends), as the
    interval takes it."""

    def base_of(row: dict) -> list[float]:
        if own is None:
            return base
        return list(intervals.cost_ends(own, FAMILY_OF_METRIC[metric], row_untimed(row)))

    lows, highs = zip(*(untimed_scores(r, metric, base_of(r)) for r in members), strict=True)
    low, high = conformal_ranks(len(members))
    if low < 1 or high > len(members):
        return [max(0.0, min(lows)), max(highs)]
    return [max(0.0, sorted(lows)[low - 1]), sorted(highs)[high - 1]]


def row_untimed(row: dict) -> intervals.Untimed:
    """A calibration or held-out row's untimed fractions as the interval takes them."""
    return intervals.Untimed(
        row["groups"]["engine"],
        row["untimed_time_fraction"],
        row.get("ttft_untimed_fraction", 0.0),
        row.get("request_fraction", 0.0),
    )


# the share of the share-weighted calibration runs a cost factor may leave beyond each end (the
# 80% interval's two tails)
TAIL = 0.1
# per metric family with a cost factor (kvplan.plans.intervals.COST_FACTOR_KEYS), its metric and
# the row's share in the costs the factor applies to
COST_METRIC = {
    "ttft": ("median_ttft_ms", "ttft_untimed_fraction"),
    "throughput": ("output_throughput", "request_fraction"),
}


def untimed_cost_factor(
    members: list[dict], family: str = "ttft", pool: list[dict] | None = None
) -> list[float]:
    """(k10, k90) on the costs of a figure that no kernel table times, for the class of
    `pool` (default `members`; kvplan.plans.intervals.cost_ends): for TTFT the API server's
    request cost and the launch and host constants (kvplan.simulate.metrics.
    ttft_untimed_fraction), for throughput the API server's per-request cost paid in turn
    (metrics.frontend_request_fraction). Each of `members` left out of `pool` in turn, the
    factors its figure asks for beyond the conformal ends of the rest (untimed_scores on its
    share); k10 the largest factor that leaves at most TAIL of the runs' summed shares below
    the low end, k90 the smallest that leaves at most TAIL above the high end. Weighting each
    run by its share asks the interval to hold where the untimed costs are, not only on
    average: the conformal ends hold 80% of the runs, most of them queues whose TTFT the kernel
    tables time, and missed runs at one request at a time whose TTFT is mostly a lone
    prefill's constants (until 0.9.0 the own class held 62% of the held-out TTFTs, the SGLang
    runs at concurrency 1 missing low). `members` a subset of `pool` (one engine's runs): the
    engine's factor about the pool's ends, which the interval of its runs takes."""
    metric, fraction = COST_METRIC[family]
    pool = members if pool is None else pool
    have = [r for r in pool if metric in r["ratios"]]
    scored = []
    for row in members:
        if metric not in row["ratios"]:
            continue
        if row.get(fraction, 0.0) < intervals.MIN_UNTIMED_FRACTION:
            continue
        rest = [r["ratios"][metric] for r in have if r is not row]
        base = quantiles(rest)
        low, high = untimed_scores(row, metric, base, fraction)
        scored.append((row[fraction], low, high))
    if not scored:
        return [1.0, 1.0]
    allowed = TAIL * sum(w for w, _, _ in scored)
    return [
        max(0.0, _weighted_tail([(low, w) for w, low, _ in scored], allowed, 1.0)),
        _weighted_tail([(-high, w) for w, _, high in scored], allowed, -1.0) * -1.0,
    ]


def _weighted_tail(scores: list[tuple[float, float]], allowed: float, bound: float) -> float:
    """The largest k, at most `bound`, that leaves at most `allowed` weight of the (score,
    weight) pairs with a score below it: ascending, the first score whose cumulative weight
    passes `allowed` (each run before it is left out)."""
    total = 0.0
    for score, weight in sorted(scores):
        total += weight
        if total > allowed:
            return min(bound, score)
    return bound


def untimed_rule(members: list[dict], classes: dict) -> dict:
    """The partial class's untimed-part factors (kvplan.plans.intervals.untimed_ends), per
    metric family: pooled over its calibration runs, and per engine where that engine has
    MIN_ENGINE_RUNS of them. The base is the own class's ends (its engine's entry where there
    is one), which hold the spread between labs and engines of runs whose every part is timed;
    the factor is how far the untimed parts' real kernels land from their stand-in, a property
    of the engine's kernels, so an engine's own factor needs no second lab (MIN_LABS)."""
    timed = [r for r in members if r["untimed_time_fraction"] >= intervals.MIN_UNTIMED_FRACTION]

    def factors(rows: list[dict], engine: str | None) -> dict:
        own = f"own/{engine}"
        entry = classes[own if own in classes else "own"]
        out = {}
        for metric, family in FAMILY_OF_METRIC.items():
            have = [r for r in rows if metric in r["ratios"]]
            out[family] = untimed_factor_pair(have, metric, entry["log_ratio"][family], entry)
        return out

    engines = {}
    for engine in sorted({r["groups"]["engine"] for r in timed}):
        subset = [r for r in timed if r["groups"]["engine"] == engine]
        if len(subset) >= MIN_ENGINE_RUNS:
            engines[engine] = factors(subset, engine)
    return {
        "pooled": factors(timed, None),
        "engines": engines,
        "runs": len(timed),
    }


def rule_span(entry: dict, classes: dict, engines: tuple[str, ...] | None = None) -> dict:
    """An entry's ends over every untimed fraction: its conformal ends and, where it has
    untimed-part factors, those at fraction 1 about the own ends (the widest) for each of
    `engines` (None: every engine's and the pooled): what a class that knows less must hold
    for runs under those engines (nested)."""
    spans = dict(entry["log_ratio"])
    for family, key in intervals.COST_FACTOR_KEYS.items():
        # a figure all in untimed costs: the widest, for each engine's factor and the pooled
        pairs = [entry.get(key), *entry.get(f"{key}_engines", {}).values()]
        if engines is not None:
            pairs = [intervals.cost_factor(entry, family, e) for e in engines]
        ends = [
            intervals.untimed_ends(tuple(spans[family]), tuple(p), 1.0, family != "throughput")
            for p in pairs
            if p is not None
        ]
        if ends:
            spans[family] = [min(e[0] for e in ends), max(e[1] for e in ends)]
    rule = entry.get("untimed_factor")
    if rule is None:
        return {**entry, "log_ratio": spans}
    pairs = (
        [("", rule["pooled"]), *rule["engines"].items()]
        if engines is None
        else [(e, rule["engines"].get(e, rule["pooled"])) for e in engines]
    )
    for engine, factors in pairs:
        own = f"own/{engine}"
        base = rule_span(classes[own if own in classes else "own"], classes)["log_ratio"]
        for family, pair in factors.items():
            low, high = intervals.untimed_ends(
                tuple(base[family]), tuple(pair), 1.0, family != "throughput"
            )
            spans[family] = [min(spans[family][0], low), max(spans[family][1], high)]
    return {**entry, "log_ratio": spans}


def _entry(members: list[dict], pool: list[dict]) -> dict:
    """A class's quantiles: its own runs where there are MIN_RUNS, else `pool`'s, widened; and
    how many of the runs they came from were of each workload kind."""
    entry: dict = {"runs": [r["id"] for r in members], "log_ratio": {}}
    entry["calibrated"] = len(members) >= MIN_RUNS
    source = members if entry["calibrated"] else pool
    for metric, family in FAMILY_OF_METRIC.items():
        pair = quantiles([r["ratios"][metric] for r in source if metric in r["ratios"]])
        entry["log_ratio"][family] = pair if entry["calibrated"] else widened(pair)
    entry["workloads"] = dict(sorted(Counter(r["workload"] for r in source).items()))
    return entry


def transfer_scores(rows: list[dict]) -> list[float]:
    """Leave one workload kind out, on the calibration runs only: per (class, engine)
    group with MIN_RUNS runs and each of its workload kinds, the ends from the group's other
    kinds (where those are MIN_RUNS values of a metric) and, for each
    left-out value, |value - centre| / half-width: how far out a workload unlike the class's
    calibration runs lands, in half-widths (<= 1: inside)."""
    scores = []
    for key in sorted({(r["evidence"], r["groups"]["engine"]) for r in rows}):
        group = [r for r in rows if (r["evidence"], r["groups"]["engine"]) == key]
        if len(group) < MIN_RUNS:
            continue
        for kind in sorted({r["workload"] for r in group}):
            rest = [r for r in group if r["workload"] != kind]
            out = [r for r in group if r["workload"] == kind]
            for metric in FAMILY_OF_METRIC:
                values = [r["ratios"][metric] for r in rest if metric in r["ratios"]]
                if len(values) < MIN_RUNS:
                    continue
                low, high = quantiles(values)
                centre, half = (low + high) / 2, (high - low) / 2
                scores += [
                    abs(r["ratios"][metric] - centre) / half for r in out if metric in r["ratios"]
                ]
    return scores


def transfer_widen(scores: list[float]) -> float:
    """The factor on a class's half-width that holds 80% of the left-out runs: the conformal
    rank ceil(0.8 (n + 1)) of the n scores (the largest where that is beyond them); at least 1."""
    if not scores:
        return 1.0
    ordered = sorted(scores)
    rank = min(math.ceil(0.8 * (len(ordered) + 1)), len(ordered))
    return max(1.0, ordered[rank - 1])


def _group_key(row: dict, rows: list[dict]) -> tuple[str, str | None]:
    """The (class, engine) whose runs set a run's ends as build does: its class and engine
    where those are MIN_ENGINE_RUNS runs from MIN_LABS labs, else its class (engine None)."""
    cls, engine = row["evidence"], row["groups"]["engine"]
    subset = [r for r in rows if r["evidence"] == cls and r["groups"]["engine"] == engine]
    if len(subset) >= MIN_ENGINE_RUNS and len({lab(r) for r in subset}) >= MIN_LABS:
        return cls, engine
    return cls, None


def held_out_ends(rows: list[dict]):
    """For each scheme of leaving calibration runs out ("run": one at a time; "workload": one
    workload kind of a class at a time, as transfer_scores), yield (scheme, row, metric, ends):
    the conformal ends of the row's (class, engine) group (_group_key) without the left-out
    runs, where those are MIN_RUNS values or more."""
    keys = {id(r): _group_key(r, rows) for r in rows}
    for r in rows:
        group = [o for o in rows if keys[id(o)] == keys[id(r)]]
        for scheme, rest in (
            ("run", [o for o in group if o is not r]),
            ("workload", [o for o in group if o["workload"] != r["workload"]]),
        ):
            for metric in FAMILY_OF_METRIC:
                if metric not in r["ratios"]:
                    continue
                values = [o["ratios"][metric] for o in rest if metric in o["ratios"]]
                if len(values) >= MIN_RUNS:
                    yield scheme, r, metric, quantiles(values)


def propagation_choice(rows: list[dict]) -> dict:
    """Which metric families' intervals take the envelope of the conformal ends and the runs at
    the class's step scales (kvplan.plans.intervals.step_scales), chosen on the calibration
    runs only: per family and scheme of leaving runs out (held_out_ends), the share of left-out
    runs inside the conformal ends alone and inside the envelope, and the median hi/lo width of
    each. A family is propagated where the conformal ends alone hold fewer than 80% of the
    left-out runs in either scheme and the envelope holds more there. A request's end-to-end
    latency (not in the published runs) is its TTFT plus its decode: propagated where TTFT or
    TPOT is."""
    tally: dict = {}
    for scheme, r, metric, (low, high) in held_out_ends(rows):
        value, runs = r["ratios"][metric], r.get("propagated", {}).get(metric) or []
        env_low, env_high = min([low, *runs]), max([high, *runs])
        cell = tally.setdefault(FAMILY_OF_METRIC[metric], {}).setdefault(
            scheme, {"n": 0, "conformal": 0, "envelope": 0, "w_conformal": [], "w_envelope": []}
        )
        cell["n"] += 1
        cell["conformal"] += low <= value <= high
        cell["envelope"] += env_low <= value <= env_high
        cell["w_conformal"].append(math.exp(high - low))
        cell["w_envelope"].append(math.exp(env_high - env_low))
    scores: dict = {}
    families = []
    for family, schemes in sorted(tally.items()):
        scores[family] = {}
        chosen = False
        for scheme, c in sorted(schemes.items()):
            conformal, envelope = c["conformal"] / c["n"], c["envelope"] / c["n"]
            scores[family][scheme] = {
                "runs": c["n"],
                "conformal": round(conformal, 4),
                "envelope": round(envelope, 4),
                "width_conformal": round(statistics.median(c["w_conformal"]), 4),
                "width_envelope": round(statistics.median(c["w_envelope"]), 4),
            }
            chosen |= conformal < 0.8 and envelope > conformal
        if chosen:
            families.append(family)
    if {"ttft", "tpot"} & set(families):
        families.append("e2el")
    return {"families": sorted(families), "scores": scores}


def lab(row: dict) -> str:
    """Who published a run: its source without the tool it was measured with ("GPUStack
    performance lab (vllm bench serve against SGLang)" -> "GPUStack performance lab")."""
    return row["groups"]["source"].split(" (")[0]


def above(cls: str) -> tuple[str, ...]:
    """The classes that know more than `cls` about a run's step (EVIDENCE_ORDER; an untimed
    run's step is priced at its own tables, with or without untimed parts)."""
    if cls == intervals.UNTIMED:
        return ("own", intervals.PARTIAL)
    return EVIDENCE_ORDER[: EVIDENCE_ORDER.index(cls)]


def nested(classes: dict) -> dict:
    """Each class's ends widened to hold those of every class that knows more (above), per
    engine: a run priced with less evidence carries every uncertainty a better-evidenced run
    carries, so its interval is never narrower on either side (without this, SGLang runs on an
    H100's own tables with one untimed part were sized 19x slower at 90% confidence while a GPU
    without tables was sized 3.9x). Where a class has no entry of its own for an engine but a
    class above it has, the engine gets one: the class's pooled ends held around the engine's.
    Entries keep the runs they were calibrated on; `held` names the classes whose ends they
    took."""
    out = {k: {**v, "log_ratio": dict(v["log_ratio"])} for k, v in classes.items()}
    engines = sorted({k.split("/")[1] for k in classes if "/" in k})
    for cls in CLASSES:
        reachable = intervals.UNTIMED_ENGINES if cls == intervals.UNTIMED else None
        for engine in (None, *engines):
            own_key = cls if engine is None else f"{cls}/{engine}"
            base = out.get(own_key) or out[cls]
            # the engines whose runs the entry holds (an untimed run is under SGLang only)
            runs_of = (engine,) if engine else reachable
            wider = [
                rule_span(out.get(f"{a}/{engine}") or out[a] if engine else out[a], out, runs_of)
                for a in above(cls)
            ]
            held = [a for a, entry in zip(above(cls), wider, strict=True) if _widens(base, entry)]
            if not held:
                continue
            entry = {**base, "log_ratio": dict(base["log_ratio"]), "held": held}
            for family, (low, high) in base["log_ratio"].items():
                ends = [e["log_ratio"][family] for e in wider]
                entry["log_ratio"][family] = [
                    min([low, *(e[0] for e in ends)]),
                    max([high, *(e[1] for e in ends)]),
                ]
            out[own_key] = entry
    return out


def _widens(base: dict, other: dict) -> bool:
    """Whether `other`'s ends reach beyond `base`'s on any metric family."""
    return any(
        other["log_ratio"][f][0] < low or other["log_ratio"][f][1] > high
        for f, (low, high) in base["log_ratio"].items()
    )


def build(rows: list[dict]) -> dict:
    """Per evidence class, and per class and engine where that has MIN_ENGINE_RUNS runs of its
    own from MIN_LABS labs.
    A class with too few takes every run that is not "own" (where those are MIN_RUNS or
    more, else every run), its half-width times WIDEN. Untimed runs (a part of the serving path
    kvplan does not time) pool only into their own class: how far they land says nothing about
    kernel tables borrowed or missing."""
    classes = {}
    timed = [r for r in rows if r["evidence"] != intervals.UNTIMED]
    not_own = [r for r in timed if r["evidence"] != "own"]
    for cls in CLASSES:
        members = [r for r in rows if r["evidence"] == cls]
        pool = rows if cls == "own" else not_own  # the non-own runs and the class's own
        fallback = rows if cls == intervals.UNTIMED else timed
        classes[cls] = _entry(members, pool if len(pool) >= MIN_RUNS else fallback)
        for engine in sorted({r["groups"]["engine"] for r in members}):
            subset = [r for r in members if r["groups"]["engine"] == engine]
            if len(subset) >= MIN_ENGINE_RUNS and len({lab(r) for r in subset}) >= MIN_LABS:
                classes[f"{cls}/{engine}"] = _entry(subset, subset)
    for key in [k for k in classes if k.split("/")[0] == "own"]:
        engine = key.split("/")[1] if "/" in key else None
        members = [
            r for r in rows if r["evidence"] == "own" and engine in (None, r["groups"]["engine"])
        ]
        for family, factor_key in intervals.COST_FACTOR_KEYS.items():
            classes[key][factor_key] = untimed_cost_factor(members, family)
        # TTFT's constants are each engine's rules: an engine's own factor about the class's
        # ends where it has MIN_ENGINE_RUNS runs of it (as untimed_rule; no second lab needed)
        by_engine = {
            e: untimed_cost_factor(subset, "ttft", members)
            for e in sorted({r["groups"]["engine"] for r in members})
            if engine is None
            and len(subset := [r for r in members if r["groups"]["engine"] == e]) >= MIN_ENGINE_RUNS
        }
        if by_engine:
            classes[key]["ttft_untimed_factor_engines"] = by_engine
    partial = [
        r
        for r in rows
        if r["evidence"] == intervals.PARTIAL
        and r["untimed_time_fraction"] >= intervals.MIN_UNTIMED_FRACTION
    ]
    for key in [k for k in classes if k.split("/")[0] == intervals.PARTIAL and partial]:
        classes[key]["untimed_factor"] = untimed_rule(partial, classes)
    classes = nested(classes)
    scores = transfer_scores(rows)
    return {
        "about": (
            "Split-conformal 80% ends of log(measured / simulated) over published runs, per "
            "evidence class of the kernel rates and metric family: with n calibration values "
            "sorted, the order statistics at 1-based ranks floor(0.1 (n + 1)) and "
            "ceil(0.9 (n + 1)); where a rank is outside 1..n, the extremes with half-width "
            f"times {WIDEN}. kvplan.plans.intervals reads it. Classes with calibrated false take every non-own run (every run where those "
            f"are fewer than min_runs), half-width times {WIDEN}; 'class/engine' entries "
            f"exist where that engine has {MIN_ENGINE_RUNS} runs of the class (no single run sets "
            f"an end) from {MIN_LABS} or more labs (one lab's runs hold none of the spread "
            "between labs). Nested: each class's "
            "ends hold those of every class that knows more (own, partial, other-engine, "
            "borrowed, datasheet; untimed holds own and partial), per engine; 'held' names "
            "the classes an entry took ends from. untimed_factor (partial): where a run's "
            "untimed fraction u is known (the fraction of its simulated step time in terms "
            "that hold a part no kernel table times), its ends are the own class's with the "
            "untimed parts at k10..k90 times their stand-in: a time's end + log(1 - u + u k); "
            "(k10, k90) the split-conformal ranks of the factors the partial calibration runs "
            f"ask for beyond the own ends, per engine where it has {MIN_ENGINE_RUNS} such runs, "
            "else pooled; where u is not known, log_ratio. ttft_untimed_factor (own): "
            "(k10, k90) on the costs of a TTFT no kernel table times (the API server's "
            "request cost, the launch and host constants of the prefill steps; a run's share "
            "s of its median TTFT: EngineStats.ttft_untimed_fraction): its TTFT ends are "
            "log_ratio's + log(1 - s + s k); k10 the largest, k90 the smallest factor leaving "
            f"at most {TAIL} of the calibration runs' summed shares beyond each end, each run "
            "left out of the ends it is scored against; ttft_untimed_factor_engines: an "
            f"engine's own where it has {MIN_ENGINE_RUNS} own runs (the constants are each "
            "engine's rules), scored against the class's ends. throughput_untimed_factor "
            "(own): the same rule on the throughput, for a run's share r of its duration in "
            "the API server's per-request cost paid in turn (EngineStats."
            "frontend_request_fraction): its throughput ends are log_ratio's - "
            "log(1 - r + r k)."
        ),
        "derived_by": "python scripts/calibrate_intervals.py",
        "calibration_runs": ["tests/data/sim_bench_cases.json", "external split calibrate"],
        "min_runs": MIN_RUNS,
        "min_labs": MIN_LABS,
        "min_engine_runs": MIN_ENGINE_RUNS,
        "widen": WIDEN,
        "workload_widen": transfer_widen(scores),
        "workload_widen_about": (
            "A run whose workload kind (kvplan.plans.intervals.workload_kind of its length "
            "distribution) fewer than min_runs of its class's calibration runs were (workloads) "
            "takes the class's half-width times this factor: the conformal 80% rank of "
            "|log ratio - centre| / half-width over calibration runs left out by workload kind "
            f"(ends from their class and engine's other kinds; {len(scores)} scores). "
            "Calibration runs only."
        ),
        "propagate": {
            **propagation_choice(rows),
            "about": (
                "The metric families whose 80% interval is the envelope of the class's ends "
                "about the point and the same run simulated with every step time at the "
                "class's TPOT ends (kvplan.plans.intervals.step_scales): a slower step moves "
                "a queue's waiting time by far more than its own ratio near saturation and "
                "barely far from it. Chosen on the calibration runs only (scores: the share "
                "of calibration runs left out one at a time, or one workload kind of their "
                "class at a time, inside the conformal ends alone and inside the envelope; "
                "propagated where the first is under 80% in either scheme and the second is "
                "higher); e2el where ttft or tpot is."
            ),
        },
        "classes": classes,
    }


def coverage(rows: list[dict]) -> None:
    """Held-out share inside the 80% interval, per metric, overall and per group."""

    def key(r):
        classes = intervals.table()["classes"]
        cls = r["evidence"] if r["evidence"] in classes else r["tables_evidence"]
        specific = f"{cls}/{r['groups']['engine']}"
        return specific if specific in classes else cls

    def ends(r, metric):  # log(end / simulated): intervals.interval's rule
        family = FAMILY_OF_METRIC[metric]
        q10, q90 = intervals.log_quantiles(key(r), family, r["length_dist"], row_untimed(r))
        if family in intervals.propagated_families():
            runs = r.get("propagated", {}).get(metric) or []
            q10, q90 = min([q10, *runs]), max([q90, *runs])
        return q10, q90

    def inside(r, metric):
        q10, q90 = ends(r, metric)
        return q10 <= r["ratios"][metric] <= q90

    def line(label, members):
        cells = []
        for metric in FAMILY_OF_METRIC:
            have = [r for r in members if metric in r["ratios"]]
            share = sum(inside(r, metric) for r in have) / len(have) if have else float("nan")
            width = [math.exp(q90 - q10) for q10, q90 in (ends(r, metric) for r in have)]
            extra = f" (hi/lo {statistics.median(width):.2f}x)" if width else ""
            cells.append(f"{metric} {share:.0%} of {len(have)}{extra}")
        print(f"{label[:44]:44} " + "; ".join(cells))

    line("all held out", rows)
    for kind in ("engine", "gpu family", "source"):
        for name in sorted({r["groups"].get(kind, "?") for r in rows}):
            line(f"{kind}: {name}", [r for r in rows if r["groups"].get(kind, "?") == name])
    for cls in CLASSES:
        members = [r for r in rows if r["evidence"] == cls]
        if members:
            line(f"evidence: {cls}", members)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if the file would change")
    parser.add_argument("--coverage", action="store_true", help="held-out coverage, no writing")
    parser.add_argument("--json", type=Path, help="write the held-out rows here (--coverage)")
    parser.add_argument(
        "--heldout",
        choices=sorted(set(HELDOUT) - {"vllm", "sglang", "external"}),
        help="with --coverage: the validate runs of this file alone (sim_cases.HELDOUT; a file "
        "no interval was calibrated on)",
    )
    args = parser.parse_args()
    if args.heldout and not args.coverage:
        parser.error("--heldout takes --coverage")
    if args.coverage:
        cases = heldout_cases()
        if args.heldout:
            cases = [c for c in load_cases(HELDOUT[args.heldout]) if c["split"] == "validate"]
        rows = log_ratios(cases)
        coverage(rows)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return
    doc = build(log_ratios(calibration_cases()))
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        if intervals.PATH.read_text(encoding="utf-8") != text:
            sys.exit(f"{intervals.PATH} is stale: rerun scripts/calibrate_intervals.py")
        return
    tmp = intervals.PATH.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(intervals.PATH)
    for cls, entry in doc["classes"].items():
        pairs = ", ".join(
            f"{fam} [{math.exp(a):.2f}, {math.exp(b):.2f}]"
            for fam, (a, b) in entry["log_ratio"].items()
        )
        state = "calibrated" if entry["calibrated"] else "pooled+widened"
        print(f"{cls:13} {len(entry['runs']):3} runs {state:15} {pairs}")


if __name__ == "__main__":
    main()
