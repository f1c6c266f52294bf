"""Orchestration of `kvplan measure`: probe the device, run the workload, predict every point
from the profile (datasheet) and from the probes (calibrated), fit decode time against context,
and build the report. The Python twin of the command is `measure(MeasureRequest(...))`."""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import NamedTuple

import torch

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.inputs.sources import load_model
from kvplan.measure import probes
from kvplan.measure.device import choose_profile, detect
from kvplan.measure.timing import time_fn, time_interleaved
from kvplan.measure.workload import Workload, shape_for
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, judged
from kvplan.present.view import View as Report

DEFAULT_MODEL = "qwen2.5-7b"  # 932 MB per fp32 layer: fixed per-call costs stay small


class MeasureRequest(NamedTuple):
    model: str = DEFAULT_MODEL
    layers: int | None = None
    device: str = "auto"
    gpu: str | None = None
    quick: bool = False
    threads: int | None = None
    tolerance: float = 0.15
    batches: tuple[int, ...] | None = None
    contexts: tuple[int, ...] | None = None


class Plan(NamedTuple):
    layers: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    runs: int
    array_bytes: int


def plan_for(request: MeasureRequest, info: dict) -> Plan:
    llc = info["last_level_cache_bytes"]
    array = max(4 * llc, 64 << 20) if info["kind"] == "cpu" else max(4 * llc, 512 << 20)
    if info["kind"] == "cuda":
        layers = request.layers if request.layers is not None else (4 if request.quick else 8)
        batches = (1, 8, 64) if request.quick else (1, 8, 32, 128)
        contexts = (1024, 8192) if request.quick else (1024, 4096, 16384, 32768)
        prefill = (1024, 4096)
        runs = 10 if request.quick else 30
    else:
        layers = request.layers if request.layers is not None else (1 if request.quick else 2)
        batches = (1,) if request.quick else (1, 4)
        contexts = (256, 1024, 2048) if request.quick else (256, 1024, 4096, 8192)
        prefill = (256,) if request.quick else (256, 1024)
        runs = 11 if request.quick else 15
    return Plan(
        layers, request.batches or batches, request.contexts or contexts, prefill, runs, array
    )


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares y = intercept + slope * x; None with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def predicted_s(
    num_bytes: float, flops: float, bandwidth: float | None, peak: float | None
) -> float | None:
    """Roofline time max(bytes / BW, FLOPs / peak); None when a constant is unknown."""
    if not bandwidth or not peak:
        return None
    return max(num_bytes / bandwidth, flops / peak)


def error(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else (predicted - measured) / measured


def measure(request: MeasureRequest, progress: Callable[[str], None] | None = None) -> Report:
    progress = progress or (lambda _: None)
    device = request.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = request.threads if request.threads is not None else torch.get_num_threads()
    if threads < 1 or threads > 1024:
        raise KvplanError("--threads must be between 1 and 1024")
    if not 0 < request.tolerance < 10:
        raise KvplanError("--tolerance must be a positive fraction, e.g. 0.15")
    torch.set_num_threads(threads)
    info = detect(device, threads)
    profile = choose_profile(info, request.gpu)
    dtype = info["measure_dtype"]
    plan = plan_for(request, info)
    spec = load_model(request.model)
    shape, notes = shape_for(spec, plan.layers, dtype)

    progress("bandwidth")
    bw = probes.bandwidth(device, plan.array_bytes, plan.runs)
    progress("matvec")
    matvec = probes.stream_matvec(device, dtype, plan.array_bytes, plan.runs)
    progress("matmul")
    matmul = probes.matmul_peak(device, dtype, 1024 if device == "cpu" else 8192, plan.runs)
    fp8 = probes.fp8_matmul_peak(8192, plan.runs) if device == "cuda" else None
    cal_bw = matvec["bytes_per_s_median"]
    cal_peak = matmul["flop_per_s_median"]
    sheet_bw = profile.memory_bandwidth_bytes_per_s if profile else None
    sheet_peak = None
    if profile:
        try:
            sheet_peak = profile.peak(dtype)
        except KvplanError:
            sheet_peak = None

    constants = (cal_bw, cal_peak, sheet_bw, sheet_peak)
    workload = Workload(shape, device, max(plan.batches), max(plan.contexts))
    decode_rows = []
    for batch in plan.batches:
        for context in plan.contexts:
            progress(f"decode B={batch} s={context}")
            # alternating rounds with the matvec probe: this point's calibration sees the same
            # drift as the point itself
            timing, probe = time_interleaved(
                [workload.decode(batch, context), workload.weights_pass(batch)],
                device=device,
                runs=plan.runs,
            )
            point_bw = shape.weight_bytes() / probe.median_s
            kv = batch * context * shape.kv_bytes_per_token()
            row = _point(
                "decode",
                batch,
                context,
                shape.weight_bytes(),
                kv,
                shape.decode_flops(batch, context),
                timing,
                (point_bw, cal_peak, sheet_bw, sheet_peak),
            )
            decode_rows.append(
                {
                    **row,
                    "weight_bytes": shape.weight_bytes(),
                    "kv_bytes": kv,
                    "calibration_bandwidth_bytes_per_s": point_bw,
                }
            )
    prefill_rows = []
    for tokens in plan.prefill_tokens:
        progress(f"prefill n={tokens}")
        timing = time_fn(
            workload.prefill(tokens),
            device=device,
            min_runs=max(3, plan.runs // 2),
            max_runs=plan.runs,
        )
        prefill_rows.append(
            _point(
                "prefill",
                1,
                tokens,
                shape.weight_bytes(),
                tokens * shape.kv_bytes_per_token(),
                shape.prefill_flops(tokens),
                timing,
                constants,
            )
        )

    fits = []
    for batch in plan.batches:
        rows = [r for r in decode_rows if r["batch_size"] == batch]
        line = fit_line([r["context_len"] for r in rows], [r["measured_s"] for r in rows])
        if line is None:
            continue
        intercept, slope = line
        kv_per_token = batch * shape.kv_bytes_per_token()
        effective = kv_per_token / slope if slope > 0 else None
        fits.append(
            {
                "batch_size": batch,
                "intercept_s": intercept,
                "slope_s_per_token": slope,
                "effective_kv_bytes_per_s": effective,
                "fraction_of_copy": effective / bw["copy"]["bytes_per_s_median"]
                if effective
                else None,
                "weights_bytes_per_s_from_intercept": shape.weight_bytes() / intercept
                if intercept > 0
                else None,
            }
        )

    failures = []
    for row in decode_rows:
        if row["bound"] != "memory":
            continue
        checks = [("calibrated", row["error_calibrated"])]
        if request.gpu:
            checks.append(("profile", row["error_datasheet"]))
        for label, err in checks:
            if err is not None and abs(err) > request.tolerance:
                failures.append(
                    f"decode B={row['batch_size']} s={row['context_len']}: {label} "
                    f"prediction off by {err:+.0%} (tolerance {request.tolerance:.0%})"
                )

    notes += [
        "Calibrated decode predictions use the bandwidth this model's own weight-streaming "
        "matvecs reach on this device (a weights-only pass of the same layers, timed in "
        "alternating rounds with each decode point, so drift hits both alike), and the measured "
        f"{dtype} matmul peak ({cal_peak / 1e12:,.3f} TFLOP/s). STREAM copy "
        f"{bw['copy']['bytes_per_s_median'] / 1e9:,.1f} GB/s and triad "
        f"{bw['triad']['bytes_per_s_median'] / 1e9:,.1f} GB/s (read + write counted).",
        f"Workload: {spec.name} scaled to {shape.layers} layer(s) in {dtype}; times are the median "
        "of repeated runs after a warm-up, with p20/p80 in the JSON.",
    ]
    if profile is None:
        notes.append(
            "No hardware profile matched this device: datasheet predictions are null "
            "(pass --gpu PROFILE, or --save-profile to make one)."
        )
    if info["kind"] == "cpu" and not info["fast_bf16"]:
        notes.append(
            "This CPU has no fast bf16 (no AVX512-BF16/AMX): measured in fp32; bf16 "
            "bytes are accounted for analytically by the planner."
        )
    if any(b > 1 for b in plan.batches) and info["kind"] == "cpu":
        notes.append(
            "On CPUs, batched skinny matmuls often run far below both roofs (BLAS "
            "kernels tuned for large tiles): a decode miss at batch > 1 measures that."
        )
    if failures:
        notes.append("CHECK FAILED: " + "; ".join(failures))
    notes = list(dict.fromkeys(notes))

    conditions = {
        "device": info,
        "threads": threads,
        "dtype": dtype,
        "torch_version": torch.__version__,
        "kvplan_version": __version__,
        "python": platform.python_version(),
        "profile": profile.name if profile else None,
    }
    facts = [
        ("device", f"{info['name']} ({info['kind']}, {threads} threads, {dtype})"),
        ("profile", profile.name if profile else "none matched"),
        (
            "bandwidth",
            f"copy {bw['copy']['bytes_per_s_median'] / 1e9:,.1f}, triad "
            f"{bw['triad']['bytes_per_s_median'] / 1e9:,.1f}, read "
            f"{bw['read']['bytes_per_s_median'] / 1e9:,.1f}, matvec "
            f"{cal_bw / 1e9:,.1f} GB/s (median)",
        ),
        (
            "matmul peak",
            f"{cal_peak / 1e12:,.3f} TFLOP/s {dtype}"
            + (f", fp8 {fp8['flop_per_s_median'] / 1e12:,.1f}" if fp8 else ""),
        ),
    ]
    for fit in fits:
        eff = fit["effective_kv_bytes_per_s"]
        facts.append(
            (
                f"decode fit, batch {fit['batch_size']}",
                f"{fit['intercept_s'] * 1e3:,.2f} ms + {fit['slope_s_per_token'] * 1e6:,.3f} "
                "µs/token"
                + (
                    f"; KV read at {eff / 1e9:,.2f} GB/s = {fit['fraction_of_copy']:.2f} of copy"
                    if eff
                    else ""
                ),
            )
        )
    facts.append(
        Fact(
            "check",
            "FAILED" if failures else f"passed (tolerance {request.tolerance:.0%})",
            verdict=judged(not failures),
        )
    )

    columns = [
        Column("phase", "phase", f.text, "left"),
        Column("batch_size", "batch", f.integer),
        Column("context_len", "tokens", f.integer),
        Column("bytes", "MB", lambda v: f"{v / 1e6:,.1f}"),
        Column("flops", "GFLOP", lambda v: f"{v / 1e9:,.2f}"),
        Column("predicted_datasheet_s", "datasheet (ms)", _ms),
        Column("predicted_calibrated_s", "calibrated (ms)", _ms),
        Column("measured_s", "measured (ms)", _ms),
        Column("error_calibrated", "error cal.", _pct),
        Column("error_datasheet", "error sheet", _pct),
        Column("bound", "bound", f.text, "left"),
    ]
    data = {
        "kvplan_version": __version__,
        "conditions": conditions,
        "device_probes": {"bandwidth": bw, "matvec": matvec, "matmul": matmul, "matmul_fp8": fp8},
        "calibration": {"bandwidth_bytes_per_s": cal_bw, "peak_flop_per_s": cal_peak},
        "datasheet": {"bandwidth_bytes_per_s": sheet_bw, "peak_flop_per_s": sheet_peak},
        "workload": {"model": spec.name, **shape._asdict()},
        "decode": decode_rows,
        "prefill": prefill_rows,
        "fits": fits,
        "check": {"tolerance": request.tolerance, "passed": not failures, "failures": failures},
        "notes": notes,
    }
    tables = [Table("decode", columns, decode_rows), Table("prefill", columns, prefill_rows)]
    return Report(f"kvplan measure on {info['name']}", facts, tables, notes, data)


def _point(
    phase: str,
    batch: int,
    context: int,
    weights: int,
    kv: int,
    flops: int,
    timing,
    constants: tuple,
) -> dict:
    """One measured point next to its two predictions (calibrated, datasheet) and its bound."""
    cal_bw, cal_peak, sheet_bw, sheet_peak = constants
    cal = predicted_s(weights + kv, flops, cal_bw, cal_peak)
    sheet = predicted_s(weights + kv, flops, sheet_bw, sheet_peak)
    return {
        "phase": phase,
        "batch_size": batch,
        "context_len": context,
        "bytes": weights + kv,
        "flops": flops,
        "predicted_datasheet_s": sheet,
        "predicted_calibrated_s": cal,
        "measured": timing.to_json(),
        "measured_s": timing.median_s,
        "error_datasheet": error(sheet, timing.median_s),
        "error_calibrated": error(cal, timing.median_s),
        "bound": "memory" if (weights + kv) / cal_bw >= flops / cal_peak else "compute",
    }


def _ms(value):
    return "—" if value is None else f"{value * 1e3:,.2f}"


def _pct(value):
    return "—" if value is None else f"{value:+.1%}"


def profile_yaml(data: dict) -> str:
    """A hardware profile from measured figures, loadable by `--gpu FILE.yaml` everywhere."""
    info = data["conditions"]["device"]
    dtype = data["conditions"]["dtype"]
    peaks = {dtype: data["calibration"]["peak_flop_per_s"]}
    if data["device_probes"].get("matmul_fp8"):
        peaks["fp8"] = data["device_probes"]["matmul_fp8"]["flop_per_s_median"]
    lines = [
        f"# Measured by kvplan {__version__} (kvplan measure); decode-calibrated figures.",
        f'name: "measured {info["name"]}"',
        "vendor: measured",
        "peak_flop_per_s:",
        *[f"  {k}: {v:.6e}" for k, v in peaks.items()],
        f"memory_bytes: {float(info.get('memory_bytes') or 0) or 1:.6e}",
        f"memory_bandwidth_bytes_per_s: {data['calibration']['bandwidth_bytes_per_s']:.6e}",
        f"l2_cache_bytes: {float(info['last_level_cache_bytes']):.6e}",
        f'source: "kvplan measure, {data["conditions"]["threads"]} threads, '
        f'torch {data["conditions"]["torch_version"]}"',
    ]
    return "\n".join(lines) + "\n"
