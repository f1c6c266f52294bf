"""`kvplan roofline`: prefill and decode on the device's roofline, throughput ceilings.

time floor = max(bytes / bandwidth, FLOPs / peak); intensity = FLOPs / bytes; ridge = peak / BW.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.comm import (
    p2p_time_s,
    pipeline_bubble_fraction,
    tp_allreduce_bytes,
    tp_comm_time_per_decode_step_s,
)
from kvplan.formulas.dtypes import KvFormat, resolve_kv_format
from kvplan.formulas.flops import flops_per_decode_token, prefill_flops
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes_read_per_decode_step
from kvplan.inputs.hardware import GpuProfile
from kvplan.plans.size import model_notes
from kvplan.present.view import (
    Column,
    Report,
    Table,
    fmt_float,
    fmt_int,
    fmt_ms,
    fmt_text,
    unique_notes,
)


class RooflineRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192,)
    batches: tuple[int, ...] = (1, 8, 64)
    kv_dtype: str = "auto"
    weights_dtype: str = "auto"
    tp: int = 1
    kv_group_size: int = 32
    pp: int = 1


def time_floor_s(num_bytes: float, flops: float, bandwidth: float, peak: float) -> float:
    """Roofline time floor: max(bytes / BW, FLOPs / peak)."""
    return max(num_bytes / bandwidth, flops / peak)


def compute_dtype(weights_dtype: str) -> str:
    """The tensor-core dtype the matmuls run in: fp8 weights run fp8 GEMMs; 4-bit and int8
    weight-only formats dequantize to bf16; fp32 is taken at the bf16 peak (TF32-class)."""
    return "fp8" if weights_dtype == "fp8" else "fp16" if weights_dtype == "fp16" else "bf16"


class Phase(NamedTuple):
    batch_size: int
    context_len: int
    flops: float
    bytes: float
    time_floor_s: float
    bound: str

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def decode_step(
    spec: ModelSpec,
    gpu: GpuProfile,
    batch_size: int,
    context_len: int,
    wdtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> Phase:
    """One decode step of `batch_size` sequences at `context_len`, per GPU:
    FLOPs = B * f(s); bytes = weights read + B * KV(s)."""
    peak = gpu.peak(compute_dtype(wdtype))
    flops = batch_size * flops_per_decode_token(spec, context_len) / tp
    weights = weight_bytes_read_per_decode_step(spec, wdtype, batch_size) / tp
    num_bytes = weights + batch_size * kv_bytes_per_sequence(spec, context_len, fmt, tp)
    memory_s = num_bytes / gpu.memory_bandwidth_bytes_per_s
    compute_s = flops / peak
    return Phase(
        batch_size,
        context_len,
        flops,
        num_bytes,
        max(memory_s, compute_s),
        "memory" if memory_s >= compute_s else "compute",
    )


def prefill(
    spec: ModelSpec, gpu: GpuProfile, num_tokens: int, wdtype: str, fmt: KvFormat, tp: int = 1
) -> Phase:
    """Prefill of one sequence of `num_tokens`: weights read once, the KV written once."""
    peak = gpu.peak(compute_dtype(wdtype))
    flops = prefill_flops(spec, num_tokens) / tp
    weights = weight_bytes_read_per_decode_step(spec, wdtype, num_tokens) / tp
    num_bytes = weights + kv_bytes_per_sequence(spec, num_tokens, fmt, tp)
    memory_s = num_bytes / gpu.memory_bandwidth_bytes_per_s
    compute_s = flops / peak
    return Phase(
        1,
        num_tokens,
        flops,
        num_bytes,
        max(memory_s, compute_s),
        "memory" if memory_s >= compute_s else "compute",
    )


def asymptotic_intensity(spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1) -> float:
    """I_inf(s) = f(s) / KV(s): decode intensity as B -> infinity (weights amortised away)."""
    return (
        flops_per_decode_token(spec, context_len)
        / tp
        / kv_bytes_per_sequence(spec, context_len, fmt, tp)
    )


def critical_context_len(spec: ModelSpec, ridge: float, fmt: KvFormat, tp: int = 1) -> int | None:
    """s*: the longest context at which I_inf(s) still reaches the ridge, so that enough batching
    makes decode compute-bound. None when no context reaches it (or every context does)."""
    lo, hi = 1, 1 << 30
    if asymptotic_intensity(spec, lo, fmt, tp) < ridge:
        return None
    if asymptotic_intensity(spec, hi, fmt, tp) >= ridge:
        return None  # bounded cache (all-sliding or state-only): never memory-walled by context
    while hi - lo > 1:  # I_inf falls as s grows
        mid = (lo + hi) // 2
        if asymptotic_intensity(spec, mid, fmt, tp) >= ridge:
            lo = mid
        else:
            hi = mid
    return lo


def ceiling_tokens_per_s(bandwidth: float, kv_bytes_per_seq: float) -> float:
    """BW / (s * k): the decode token rate no batch size can beat (every KV byte read per token)."""
    return bandwidth / kv_bytes_per_seq


def half_ceiling_batch(
    spec: ModelSpec, context_len: int, wdtype: str, fmt: KvFormat, tp: int = 1
) -> float:
    """B_equal: the batch at which the KV read per step equals the weight read per step, which is
    where throughput reaches half of the ceiling. Solved numerically: MoE weight reads grow with B."""
    kv = kv_bytes_per_sequence(spec, context_len, fmt, tp)
    lo, hi = 0.0, 1e9
    for _ in range(200):
        mid = (lo + hi) / 2
        weights = weight_bytes_read_per_decode_step(spec, wdtype, max(1, round(mid))) / tp
        if weights > mid * kv:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def tp_where_comm_dominates(
    spec: ModelSpec, gpu: GpuProfile, batch_size: int, context_len: int, wdtype: str, fmt: KvFormat
) -> int | None:
    """The smallest valid TP degree at which a decode step's all-reduces take longer than its
    memory/compute floor (0 when none up to 64 does)."""
    link = gpu.interconnect
    for tp in (2, 4, 8, 16, 32, 64):
        try:
            spec.check_tp(tp)
        except KvplanError:
            continue
        floor = decode_step(spec, gpu, batch_size, context_len, wdtype, fmt, tp).time_floor_s
        comm = tp_comm_time_per_decode_step_s(
            spec, batch_size, tp, link.one_way_bytes_per_s, link.latency_s
        )
        if comm > floor:
            return tp
    return 0


def device_report(gpu: GpuProfile) -> Report:
    rows = [
        {
            "dtype": dtype,
            "peak_flop_per_s": peak,
            "ridge_flop_per_byte": peak / gpu.memory_bandwidth_bytes_per_s,
        }
        for dtype, peak in gpu.peak_flop_per_s.items()
    ]
    facts = [
        ("GPU", f"{gpu.name} ({gpu.vendor})"),
        (
            "memory",
            f"{gpu.memory_bytes / 1e9:,.0f} GB"
            + (
                f", {gpu.memory_reported_bytes / 2**30:,.2f} GiB reported to software"
                if gpu.memory_reported_bytes
                else ""
            ),
        ),
        ("bandwidth", f"{gpu.memory_bandwidth_bytes_per_s / 1e12:,.2f} TB/s"),
        ("source", gpu.source),
    ]
    table = Table(
        "",
        [
            Column("dtype", "dtype", fmt_text, "left"),
            Column("peak_flop_per_s", "dense peak (TFLOP/s)", lambda v: f"{v / 1e12:,.1f}"),
            Column("ridge_flop_per_byte", "ridge (FLOP/byte)", fmt_float(1)),
        ],
        rows,
    )
    data = {"kvplan_version": __version__, "gpu": _gpu_json(gpu), "peaks": rows}
    return Report(f"Roofline of {gpu.name}", facts, [table], [], data)


def _gpu_json(gpu: GpuProfile, dtype: str = "bf16") -> dict:
    return {
        "name": gpu.name,
        "ridge_flop_per_byte": gpu.ridge_flop_per_byte(dtype),
        "peak_flop_per_s": gpu.peak(dtype),
        "memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s,
    }


def roofline(spec: ModelSpec, gpu: GpuProfile, request: RooflineRequest) -> Report:
    """The Python twin of `kvplan roofline MODEL --gpu GPU`."""
    spec.check_tp(request.tp)
    tp, pp = request.tp, request.pp
    if pp < 1 or pp > spec.num_layers:
        raise KvplanError(f"--pp {pp} must be between 1 and the {spec.num_layers} layers")
    link = gpu.interconnect
    if (tp > 1 or pp > 1) and link is None:
        raise KvplanError(f"{gpu.name}'s profile has no interconnect figure for TP/PP")
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    fmt = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    cdtype = compute_dtype(wdtype)
    ridge = gpu.ridge_flop_per_byte(cdtype)
    bw = gpu.memory_bandwidth_bytes_per_s
    if not request.contexts or not request.batches:
        raise KvplanError("roofline needs at least one context and one batch size")
    prefill_len = request.contexts[0]
    pre = prefill(spec, gpu, prefill_len, wdtype, fmt, tp)
    decode_rows = []
    for context_len in request.contexts:
        for batch_size in request.batches:
            step = decode_step(spec, gpu, batch_size, context_len, wdtype, fmt, tp)
            comm = 0.0
            if tp > 1:
                comm = tp_comm_time_per_decode_step_s(
                    spec, batch_size, tp, link.one_way_bytes_per_s, link.latency_s
                )
            if pp > 1:  # each stage boundary passes the batch's activations once per token
                comm += (pp - 1) * p2p_time_s(
                    tp_allreduce_bytes(spec, batch_size), link.one_way_bytes_per_s, link.latency_s
                )
            total = step.time_floor_s + comm
            decode_rows.append(
                {
                    "batch_size": batch_size,
                    "context_len": context_len,
                    "flops": step.flops,
                    "bytes": step.bytes,
                    "arithmetic_intensity_flop_per_byte": step.intensity,
                    "time_floor_s": total,
                    "compute_or_memory_s": step.time_floor_s,
                    "comm_s": comm,
                    "tokens_per_s": batch_size / total,
                    "bound": "communication" if comm > step.time_floor_s else step.bound,
                }
            )
    per_context = []
    for context_len in request.contexts:
        kv = kv_bytes_per_sequence(spec, context_len, fmt, tp)
        per_context.append(
            {
                "context_len": context_len,
                "kv_bytes_per_sequence": kv,
                "asymptotic_intensity_flop_per_byte": asymptotic_intensity(
                    spec, context_len, fmt, tp
                ),
                "ceiling_tokens_per_s": ceiling_tokens_per_s(bw, kv) if kv else None,
                "batch_equal": half_ceiling_batch(spec, context_len, wdtype, fmt, tp)
                if kv
                else None,
            }
        )
    s_star = critical_context_len(spec, ridge, fmt, tp)
    comm_dominates_tp = None
    if link is not None:
        comm_dominates_tp = tp_where_comm_dominates(
            spec, gpu, request.batches[-1], request.contexts[0], wdtype, fmt
        )
    notes = (
        model_notes(spec, tp)
        + wnotes
        + [
            f"Compute at the {cdtype} dense peak ({gpu.peak(cdtype) / 1e12:,.1f} TFLOP/s); bandwidth "
            f"{bw / 1e12:,.2f} TB/s; floors assume both at 100% (real kernels reach 55-90% of "
            "bandwidth on decode, see kvplan measure).",
            "Decode reads every weight once per step (the input-embedding table only for the B rows "
            "looked up) plus every resident sequence's KV; FLOPs are 2 per active matmul parameter "
            "plus attention over each layer's real heads, head widths and window.",
            "Prefill attention counts the causal half of the n x n scores (what FlashAttention "
            "computes); the seed's 4*L*d*n per token counts the full square.",
            "B_equal is the batch at which per-step KV reads equal per-step weight reads, i.e. "
            "half the ceiling BW/(s*k).",
        ]
    )
    if fmt.note:
        notes.append(fmt.note)
    if spec.moe is not None:
        notes.append(
            f"MoE: a decode step reads only the experts its batch touches, expected "
            f"E*(1-(1-k/E)^B) per MoE layer under uniform routing (E={spec.moe.num_experts}, "
            f"k={spec.moe.top_k}); real routing is less uniform, so more experts stay idle."
        )
    if any(layer.state for layer in spec.layers):
        notes.append(
            "Recurrent-state layers: the state read and written each step is in the "
            "KV bytes; their scan FLOPs are small and not counted."
        )
    if tp > 1:
        notes.append(
            f"Per GPU at TP {tp}: FLOPs, weights and KV heads divided by {tp}; each layer adds 2 "
            f"ring all-reduces of batch x hidden bf16 activations over {link.name} "
            f"({link.one_way_bytes_per_s / 1e9:,.0f} GB/s one way, {link.latency_s * 1e6:.0f} us "
            "per message), not overlapped with compute."
        )
    if pp > 1:
        notes.append(
            f"PP {pp}: a token crosses the {pp} stages in turn (each stage boundary sends batch x "
            "hidden activations); the floors above are per token through all stages. Throughput "
            f"needs microbatches to fill the pipe: with m microbatches the stages idle "
            f"(p-1)/(m+p-1) of the time, {pipeline_bubble_fraction(pp, pp):.0%} at m = p."
        )
    notes = unique_notes(notes)
    summary = per_context[0]
    facts = [
        (
            "model / GPU",
            f"{spec.name} on {gpu.name}"
            + (f", TP {tp}" if tp > 1 else "")
            + (f", PP {pp}" if pp > 1 else ""),
        ),
        ("dtypes", f"weights {wdtype}, KV {fmt.name}, compute {cdtype}"),
        ("ridge point", f"{ridge:,.1f} FLOP/byte"),
        (
            f"prefill {prefill_len:,} tokens",
            f"{pre.flops / 1e12:,.1f} TFLOP, {pre.bytes / 1e9:,.1f} GB, intensity "
            f"{pre.intensity:,.0f} FLOP/byte ({pre.bound}-bound), TTFT floor {pre.time_floor_s:,.3f} s",
        ),
        (
            "critical context s*",
            "none"
            if s_star is None
            else f"{s_star:,} tokens (below it, batching can reach the ridge)",
        ),
    ]
    if comm_dominates_tp is not None:
        facts.append(
            (
                "TP where communication dominates",
                (f"{comm_dominates_tp}" if comm_dominates_tp else "none up to 64")
                + f" (batch {request.batches[-1]}, {link.name})",
            )
        )
    for row in per_context:
        facts.append(
            (
                f"at {row['context_len']:,} tokens",
                f"I_inf {row['asymptotic_intensity_flop_per_byte']:,.1f} FLOP/byte, ceiling "
                f"{row['ceiling_tokens_per_s']:,.0f} tok/s, B_equal {row['batch_equal']:,.1f}"
                if row["ceiling_tokens_per_s"]
                else "no KV",
            )
        )
    table = Table(
        "decode",
        [
            Column("context_len", "context (tokens)", fmt_int),
            Column("batch_size", "batch", fmt_int),
            Column("flops", "GFLOP/step", lambda v: f"{v / 1e9:,.1f}"),
            Column("bytes", "GB/step", lambda v: f"{v / 1e9:,.2f}"),
            Column("arithmetic_intensity_flop_per_byte", "intensity (FLOP/B)", fmt_float(2)),
            Column("bound", "bound", fmt_text, "left"),
            Column("comm_s", "comm (ms)", fmt_ms),
            Column("time_floor_s", "TPOT floor (ms)", fmt_ms),
            Column("tokens_per_s", "tokens/s", fmt_int),
        ],
        decode_rows,
    )
    data = {
        "kvplan_version": __version__,
        "model": {
            "name": spec.name,
            "params_total": spec.params_total,
            "params_active": spec.params_active,
        },
        "gpu": _gpu_json(gpu, cdtype),
        "tp": tp,
        "weights_dtype": wdtype,
        "kv_dtype": fmt.name,
        "prefill": {
            "context_len": prefill_len,
            "flops": pre.flops,
            "bytes": pre.bytes,
            "arithmetic_intensity_flop_per_byte": pre.intensity,
            "time_floor_s": pre.time_floor_s,
            "bound": pre.bound,
        },
        "decode": decode_rows,
        "per_context": per_context,
        "asymptotic_intensity_flop_per_byte": summary["asymptotic_intensity_flop_per_byte"],
        "critical_context_len": s_star,
        "ceiling_tokens_per_s": summary["ceiling_tokens_per_s"],
        "batch_equal": summary["batch_equal"],
        "pp": pp,
        "tp_where_comm_dominates": comm_dominates_tp,
        "notes": notes,
    }
    return Report(f"Roofline of {spec.name} on {gpu.name}", facts, [table], notes, data)
