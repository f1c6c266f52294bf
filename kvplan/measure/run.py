"""`kvplan measure`: profile the device's operators, predict a model's decode and prefill steps
through the planner's per-operator step-time model, then measure those steps and check the
predictions. The Python twin of the command is `measure(MeasureRequest(...))`.

No point is used for calibration: the profile comes from probes (kvplan.measure.probes) at
shapes and lengths the sweep does not contain; probes and points are timed in the same
interleaved rounds, so that background load and drift hit both alike.
"""

from __future__ import annotations

import statistics
import time

import torch

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.step_time import (
    Op,
    OpRates,
    StepTime,
    decode_ops,
    layer_shape,
    op_rates_of,
    prefill_ops,
    scale_bytes,
    step_time,
)
from kvplan.inputs.sources import load_bundled, load_model
from kvplan.kernels.paged_attention import available_impls
from kvplan.measure import baseline
from kvplan.measure import probes as pr
from kvplan.measure.device import choose_profile, default_threads, detect
from kvplan.measure.profile import DeviceProfile, derive
from kvplan.measure.timing import Clock, Item, Progress, time_rounds
from kvplan.measure.workload import Workload, truncate
from kvplan.notes import Note, note, unique
from kvplan.record import NamedTuple

DEFAULT_MODEL = {"cpu": "qwen2.5-3b", "cuda": "qwen2.5-7b"}  # 309 MB per fp32 layer; 8 x 466 MB
TOLERANCE = {"cpu": 0.15, "cuda": 0.10}  # median |error|; the worst point may miss by twice it
MUTATIONS = (("weights x2", 2.0, 1.0), ("weights x0.5", 0.5, 1.0), ("KV x10", 1.0, 10.0))


class MeasureRequest(NamedTuple):
    model: str | None = None  # None: DEFAULT_MODEL for the device
    layers: int | None = None
    device: str = "auto"
    gpu: str | None = None
    quick: bool = False
    threads: int | None = None
    tolerance: float | None = None  # None: TOLERANCE for the device
    decode_points: tuple[tuple[int, int], ...] | None = None  # (batch, context)
    prefill_points: tuple[int, ...] | None = None
    rounds: int | None = None
    # the check gates the run (--check): with `confirm`, a miss must show again in a second run
    check: bool = False
    # a failure (a missed check when `check`, a regression in `measure_against`) must show again
    # in a second, fresh run (probes and steps re-measured); at most one more run
    confirm: bool = False


class Sweep(NamedTuple):
    layers: int
    decode: tuple[tuple[int, int], ...]
    prefill: tuple[int, ...]
    rounds: int
    min_sample_s: float
    probes: pr.ProbePlan


def sweep_for(request: MeasureRequest, info: dict) -> Sweep:
    """What to probe and what to predict. No probe length equals a point's: the decode-attention
    probes read 0.75 x a power of two of KV tokens, the points powers of two."""
    cache = info["last_level_cache_bytes"]
    if info["kind"] == "cuda":
        layers = 4 if request.quick else 8
        decode = (
            ((1, 4096), (1, 32768), (8, 8192), (64, 4096))
            if request.quick
            else ((1, 1024), (1, 8192), (1, 32768), (8, 4096), (8, 32768), (64, 4096), (128, 2048))
        )
        prefill: tuple[int, ...] = (1024, 4096) if request.quick else (512, 2048, 8192)
        plan = pr.ProbePlan(
            stream_bytes=max(4 * cache, 1 << 30),
            skinny_matrix_bytes=max(8 * cache, 512 << 20),
            cache_matrix_rows=2048,
            square=8192,
            square_rows=(192, 768, 3072, 12288),
            decode_tokens=(3072, 24576, 196608),
            prefill_tokens=(384, 1536, 6144),
        )
        rounds, min_sample = (10 if request.quick else 15), 0.0005
    else:
        layers = 1 if request.quick else 2
        decode = (
            ((1, 1024), (1, 16384), (4, 16384), (16, 2048))
            if request.quick
            else ((1, 1024), (1, 4096), (1, 16384), (4, 2048), (4, 8192), (16, 1024), (16, 4096))
        )
        # --quick: one 128-token prefill, bracketed by GEMM probes of 96 and 192 rows and
        # prefill-attention probes of 96 and 384 tokens. The 256-token prefill, the 384-row GEMM
        # and the 1,536-token attention probe were 5.6, 1.8 and 1.8 s of a quick run's 18 s of
        # timed CPU (2 cores): half of it, for a prefill point the self-test cannot use
        # (compute-bound: the byte mutations do not move it); the 128-token one takes 2.6 s.
        prefill = (128,) if request.quick else (128, 512)
        plan = pr.ProbePlan(
            stream_bytes=max(4 * cache, 64 << 20),
            # 4x the last-level cache: at 2x, back-to-back products re-read ~10% from it
            skinny_matrix_bytes=max(4 * cache, 64 << 20),
            cache_matrix_rows=256,
            square=4096,  # compute-bound: 64 MB is enough, and half the time of the skinny one
            square_rows=(96, 192) if request.quick else (96, 192, 384),
            decode_tokens=(768, 3072, 12288, 49152),
            prefill_tokens=(96, 384) if request.quick else (96, 384, 1536),
        )
        rounds, min_sample = (7 if request.quick else 9), 0.004
    return Sweep(
        request.layers or layers,
        request.decode_points or decode,
        request.prefill_points or prefill,
        request.rounds or rounds,
        min_sample,
        plan,
    )


class OpShare(NamedTuple):
    name: str
    time_s: float
    bound: str


class Point(NamedTuple):
    """One measured step beside its predictions. `error` = predicted / measured - 1, with
    `measured_s` the step's typical time (the 25th percentile of its interleaved samples)."""

    phase: str
    batch_size: int
    context_len: int
    measured_s: float
    median_s: float
    p20_s: float
    p80_s: float
    spread: float
    predicted_s: float
    error: float
    bound: str  # the term with the largest share of the prediction: memory | compute | overhead
    memory_bound_s: float
    compute_bound_s: float
    overhead_s: float
    predicted_roofline_s: float  # textbook roofline: measured bandwidth and best matmul rate
    error_roofline: float
    predicted_datasheet_s: float | None  # the matched or given profile's prediction
    error_datasheet: float | None
    weight_bytes: float
    kv_bytes: float
    flops: float
    used_for_calibration: bool
    ops: tuple[OpShare, ...]


class Mutation(NamedTuple):
    name: str
    weights_factor: float
    kv_factor: float
    median_abs_error: float
    worst_abs_error: float
    caught: bool


class Check(NamedTuple):
    passed: bool
    tolerance: float
    worst_tolerance: float
    median_abs_error: float
    worst_abs_error: float
    memory_bound_points: int
    mutations: tuple[Mutation, ...]
    failures: tuple[Note, ...]
    profile_checked: bool = False  # a --gpu profile's predictions were judged too


class MeasureResult(NamedTuple):
    identity: dict
    conditions: dict
    profile: DeviceProfile
    datasheet: dict | None
    points: tuple[Point, ...]
    check: Check
    probe_timings: dict
    notes: tuple[Note, ...]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise KvplanError(f"--device {device!r}: choose auto, cpu or cuda")
    return device


def error(predicted: float, measured: float) -> float:
    """predicted / measured - 1: positive when the model predicts too slow a step."""
    return predicted / measured - 1


def measure(request: MeasureRequest, progress: Progress | None = None) -> MeasureResult:
    """The Python twin of `kvplan measure`. With `check` and `confirm`, a check that fails is
    measured again from scratch and the second run decides: another job's load on a shared
    machine slows one run's points or probes for its whole length, which its own rounds cannot
    show, and rarely the same ones twice; a wrong prediction misses again. Without `check` the
    check is reported, never repeated."""
    return confirmed_run(request, progress)[0]


def confirmed_run(request: MeasureRequest, progress: Progress | None = None, against=None):
    """(the run, its comparison): one run, compared by `against` (run -> Comparison; None: no
    baseline). With `request.confirm`, a run that fails (a missed check under `request.check`,
    a regression) is measured once more, from scratch: the check is the second run's, the
    comparisons are `confirmed` (a regression must show in both), and the second run is the one
    returned, noting what the first showed."""
    result = _measure_once(request, progress)
    comparison = against(result) if against else None
    check_missed = request.check and not result.check.passed
    regressed = comparison is not None and not comparison.passed
    if request.confirm and (check_missed or regressed):
        second = _measure_once(request, progress)
        first = ()
        if comparison is not None:
            first = tuple(c.key for c in comparison.changes if c.verdict == "regression")
            comparison = baseline.confirmed(comparison, against(second))
        result = remeasured(
            result,
            second,
            check_missed=check_missed,
            regressions=comparison.regressions if comparison is not None else 0,
            regressed_first=first,
        )
    return result, comparison


def measure_against(
    request: MeasureRequest,
    base: baseline.Baseline,
    max_regression: float,
    allow_other_device: bool,
    progress: Progress | None = None,
):
    """The Python twin of `kvplan measure --baseline FILE`: (the run, its comparison). With
    `request.confirm`, a run that fails (a regression, or a missed check when `request.check`)
    is measured once more, from scratch: the comparisons are `confirmed` and the check is the
    second run's; the second run is the one returned."""

    def against(result: MeasureResult) -> baseline.Comparison:
        current = baseline.from_json(result)
        return baseline.compare(current, base, max_regression, allow_other_device)

    return confirmed_run(request, progress, against)


def remeasured(
    first: MeasureResult,
    second: MeasureResult,
    check_missed: bool = False,
    regressions: int = 0,
    regressed_first: tuple[str, ...] = (),
):
    """The second run, noting what the first one showed: a missed check (its median and worst
    |error|) and/or a regression against the baseline (which figures, how many confirmed)."""
    check = first.check
    reasons = (["check"] if check_missed else []) + (["baseline"] if regressed_first else [])
    confirm_notes = [
        note(
            "measure-confirm",
            why=why,
            median=check.median_abs_error,
            worst=check.worst_abs_error,
            passed=second.check.passed,
            regressions=regressions,
            regressed_first=regressed_first,
        )
        for why in reasons
    ]
    return second._replace(
        notes=unique([*confirm_notes, *second.notes]),
        conditions={
            **second.conditions,
            "runs": 2,
            # the command's time: both runs
            "elapsed_s": first.conditions.get("elapsed_s", 0.0)
            + second.conditions.get("elapsed_s", 0.0),
        },
    )


def _measure_once(request: MeasureRequest, progress: Progress | None) -> MeasureResult:
    began = time.perf_counter()
    device = resolve_device(request.device)
    if request.threads is not None and not 1 <= request.threads <= 1024:
        raise KvplanError("--threads must be between 1 and 1024")
    tolerance = request.tolerance if request.tolerance is not None else TOLERANCE[device]
    if not 0.01 <= tolerance <= 5:
        raise KvplanError("--tolerance must be between 0.01 and 5")
    busy = None
    threads = request.threads
    if threads is None:
        threads, busy = default_threads() if device == "cpu" else (torch.get_num_threads(), None)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # this run's layout; the caller's comes back after it
    try:
        return _measure_on(request, progress, began, device, tolerance, threads, busy)
    finally:
        torch.set_num_threads(previous)


def _measure_on(
    request: MeasureRequest,
    progress: Progress | None,
    began: float,
    device: str,
    tolerance: float,
    threads: int,
    busy: float | None,
) -> MeasureResult:
    info = detect(device, threads, busy)
    datasheet = choose_profile(info, request.gpu)
    spec = load_model(request.model) if request.model else load_bundled(DEFAULT_MODEL[device])
    sweep = sweep_for(request, info)
    model = truncate(spec, min(sweep.layers, spec.num_layers))
    dtype = "bf16" if device == "cuda" else "fp32"  # CPUs: fp32 (bf16 kernels there are slow)
    fmt = KvFormat(dtype)
    impl = "triton" if device == "cuda" and "triton" in available_impls() else "torch"
    gather_kv = impl == "torch"
    for batch, context in sweep.decode:
        if not 1 <= batch <= 4096 or not 1 <= context <= 1 << 22:
            raise KvplanError(f"decode point ({batch}, {context}) out of range")

    pool = max(
        [b * c for b, c in sweep.decode] + list(sweep.probes.decode_tokens) + list(sweep.prefill)
    )
    workload = Workload(model, dtype, device, pool, attention_impl=impl)
    probes = _probes(device, dtype, sweep, workload, model)
    points = [
        Item(
            f"decode:{b}x{c}",
            f"decode batch {b}, {c:,} tokens",
            workload.decode(b, c),
            device == "cuda",
        )
        for b, c in sweep.decode
    ] + [
        Item(f"prefill:{n}", f"prefill {n:,} tokens", workload.prefill(n), device == "cuda")
        for n in sweep.prefill
    ]
    # one thread on a CPU: time what the thread ran, not what the scheduler kept it waiting
    clock = Clock(device, info["last_level_cache_bytes"], thread_time=threads == 1)
    timings = time_rounds(
        [p.item for p in probes] + points, clock, sweep.rounds, sweep.min_sample_s, progress
    )
    attn = layer_shape(model, model.layers[0]).attention
    profile = derive(probes, timings, attn.kv_bytes_per_token(fmt), gather_kv)

    roofline = OpRates.flat(
        profile.rates.bandwidth_bytes_per_s, max(v for _, v in profile.rates.matmul_flop_per_s)
    )  # the textbook roofline from the same probes: STREAM and the best matmul rate
    sheet_rates = None
    if datasheet is not None:
        try:
            sheet_rates = op_rates_of(datasheet, dtype)
        except KvplanError:
            sheet_rates = None
    steps: list[tuple[str, int, int, list[Op], str]] = [
        ("decode", b, c, decode_ops(model, b, c, dtype, fmt, gather_kv), f"decode:{b}x{c}")
        for b, c in sweep.decode
    ] + [
        ("prefill", 1, n, prefill_ops(model, n, dtype, fmt), f"prefill:{n}") for n in sweep.prefill
    ]
    results = tuple(
        _point(phase, b, c, ops, timings[key], profile.rates, roofline, sheet_rates)
        for phase, b, c, ops, key in steps
    )
    check = _check(results, steps, timings, profile.rates, tolerance, bool(request.gpu))
    notes = [
        note("measure-method", rounds=sweep.rounds, probes=len(probes)),
        note(
            "measure-workload",
            model=spec.name,
            layers=model.num_layers,
            dtype=dtype,
            weight_bytes=sum(op.weight_bytes for op in steps[0][3]),
        ),
        note(
            "measure-threads",
            threads=threads,
            busy=busy,
            cpus=info.get("usable_cpus"),
            clock=clock.kind,
        ),
        note("measure-bandwidth", probe=profile.bandwidth_probe),
    ]
    if gather_kv:
        notes.append(note("measure-gather"))
    if device == "cpu":
        notes.append(note("measure-cpu-fp32", fast_bf16=info.get("fast_bf16")))
    if datasheet is None:
        notes.append(note("measure-no-datasheet"))
    notes += check.failures
    conditions = {
        "device": device,
        "dtype": dtype,
        "threads": threads,
        "rounds": sweep.rounds,
        "model": spec.name,
        "layers": model.num_layers,
        "attention_impl": impl,
        "gather_kv": gather_kv,
        "quick": request.quick,
        "clock": clock.kind,
        "tolerance": tolerance,
        "elapsed_s": time.perf_counter() - began,
        "runs": 1,
    }
    sheet = (
        {"name": datasheet.name, "path": datasheet.path, "measured": datasheet.measured is not None}
        if datasheet
        else None
    )
    probe_timings = {p.key: timings[p.key]._asdict() for p in probes}
    return MeasureResult(
        info, conditions, profile, sheet, results, check, probe_timings, unique(notes)
    )


def _probes(device: str, dtype: str, sweep: Sweep, workload: Workload, model) -> list[pr.Probe]:
    plan = sweep.probes
    out = pr.stream_probes(device, plan.stream_bytes)
    out += pr.matmul_probes(device, dtype, plan)
    one = model._replace(layers=model.layers[:1])
    fmt = KvFormat(dtype)
    for tokens in plan.decode_tokens:
        ops = decode_ops(one, 1, tokens, dtype, fmt)
        attention = next(op for op in ops if op.name == "attention")
        out.append(
            pr.Probe(
                f"decode_attention:tokens={tokens}",
                "decode_attention",
                tokens,
                attention.flops,
                attention.kv_bytes,
                Item(
                    f"decode_attention:tokens={tokens}",
                    f"decode attention, {tokens:,} tokens",
                    workload.attention(1, tokens),
                    cold=True,
                ),
            )
        )
    for tokens in plan.prefill_tokens:
        ops = prefill_ops(one, tokens, dtype, fmt)
        attention = next(op for op in ops if op.name == "attention")
        out.append(
            pr.Probe(
                f"prefill_attention:tokens={tokens}",
                "prefill_attention",
                tokens,
                attention.flops,
                attention.bytes,
                Item(
                    f"prefill_attention:tokens={tokens}",
                    f"prefill attention, {tokens:,} tokens",
                    workload.prefill_attention(tokens),
                    cold=device == "cuda",
                ),
            )
        )
    out.append(pr.overhead_probe(device))
    return out


def _point(phase, batch, context, ops, timing, rates, roofline, sheet_rates) -> Point:
    predicted: StepTime = step_time(ops, rates)
    flat = step_time(ops, roofline).total_s
    sheet = step_time(ops, sheet_rates).total_s if sheet_rates is not None else None
    shares: dict[str, list] = {}
    for t in predicted.ops:
        entry = shares.setdefault(t.name, [0.0, {}])
        entry[0] += t.time_s
        entry[1][t.bound] = entry[1].get(t.bound, 0.0) + t.time_s
    measured = timing.typical_s
    return Point(
        phase,
        batch,
        context,
        measured,
        timing.median_s,
        timing.p20_s,
        timing.p80_s,
        timing.spread,
        predicted.total_s,
        error(predicted.total_s, measured),
        predicted.bound,
        predicted.terms_s["memory_s"],
        predicted.terms_s["compute_s"],
        predicted.terms_s["overhead_s"],
        flat,
        error(flat, measured),
        sheet,
        error(sheet, measured) if sheet is not None else None,
        sum(op.weight_bytes for op in ops),
        sum(op.kv_bytes for op in ops),
        sum(op.flops for op in ops),
        False,  # the profile is built from probes only; no point's own timing enters it
        tuple(
            OpShare(name, total, max(bounds, key=bounds.get))
            for name, (total, bounds) in shares.items()
        ),
    )


def gate_errors(errors: list[float]) -> tuple[float, float]:
    """(median |error|, worst |error|) over the points."""
    magnitudes = [abs(e) for e in errors]
    return statistics.median(magnitudes), max(magnitudes)


def _check(points, steps, timings, rates, tolerance: float, with_profile: bool) -> Check:
    """The gate: median |error| <= tolerance and worst <= 2 x tolerance over every point, at
    least one memory-bound point, and every mutation of the bytes caught (the gate would fail
    with weights x2, x0.5 or KV x10: it can see wrong bytes)."""
    worst_tolerance = 2 * tolerance
    median_err, worst_err = gate_errors([p.error for p in points])
    failures = []
    if median_err > tolerance:
        failures.append(note("check-median", error=median_err, tolerance=tolerance))
    if worst_err > worst_tolerance:
        worst = max(points, key=lambda p: abs(p.error))
        failures.append(
            note(
                "check-worst",
                error=worst.error,
                tolerance=worst_tolerance,
                phase=worst.phase,
                batch=worst.batch_size,
                context=worst.context_len,
            )
        )
    memory_points = sum(1 for p in points if p.bound == "memory")
    if memory_points == 0:
        failures.append(note("check-no-memory-point"))
    mutations = []
    for name, weights, kv in MUTATIONS:
        errors = [
            error(step_time(scale_bytes(ops, weights, kv), rates).total_s, timings[key].typical_s)
            for _, _, _, ops, key in steps
        ]
        med, worst = gate_errors(errors)
        caught = med > tolerance or worst > worst_tolerance
        mutations.append(Mutation(name, weights, kv, med, worst, caught))
        if not caught:
            failures.append(note("check-mutation-missed", mutation=name, median=med, worst=worst))
    off = [p for p in points if p.error_datasheet is not None] if with_profile else []
    if off:
        med, worst = gate_errors([p.error_datasheet for p in off])
        if med > tolerance or worst > worst_tolerance:
            failures.append(note("check-profile-off", median=med, worst=worst))
    return Check(
        not failures,
        tolerance,
        worst_tolerance,
        median_err,
        worst_err,
        memory_points,
        tuple(mutations),
        tuple(failures),
        bool(off),
    )
