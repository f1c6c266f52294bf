"""`kvplan roofline` in words: the model's phases on the device's roofline, or the device alone."""

from __future__ import annotations

from kvplan.plans.deployment import deployment_of, layout_text
from kvplan.plans.roofline import DeviceResult, RooflineResult
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, Verdict, View, judged, rows_of, view
from kvplan.units import TFLOP


def device_view(result: DeviceResult) -> View:
    gpu = result.gpu
    memory = f"{f.gb_nominal(result.memory_bytes)} GB"
    if result.memory_reported_bytes:
        memory += f", {f.gib_text(result.memory_reported_bytes)} reported to software"
    facts = [
        ("GPU", f"{gpu.name} ({result.vendor})"),
        ("memory", memory),
        ("bandwidth", f.bandwidth_text(gpu.memory_bandwidth_bytes_per_s)),
        ("source", result.source),
    ]
    table = Table(
        "",
        [
            Column("dtype", "dtype", f.text, "left"),
            Column("peak_flop_per_s", "dense peak (TFLOP/s)", f.tflop_per_s),
            Column("ridge_flop_per_byte", "ridge (FLOP/byte)", f.fixed(1)),
        ],
        rows_of(result.peaks),
    )
    return view(f"Roofline of {gpu.name}", result, facts, [table], notes=())


def roofline_view(result: RooflineResult) -> View:
    pre = result.prefill
    d = deployment_of(result)
    setup = f"{result.model.name} on {d.gpus} x {result.gpu.name}, {layout_text(d)}"
    if result.deployment_chosen_by != "given":
        setup += " (chosen: see notes)"
    s_star = result.critical_context_len
    facts = [
        Fact(
            "model / GPU",
            setup,
            notes=("deployment-chosen", "dp-attention", "tp-crosses-nodes", "tp-per-gpu"),
            data={"tp": result.tp, "pp": result.pp, "dp_attention": result.dp_attention},
        ),
        (
            "dtypes",
            f"weights {result.weights_dtype}, KV {result.kv_dtype}, compute {result.compute_dtype}",
        ),
        Fact(
            "ridge point",
            f"{result.gpu.ridge_flop_per_byte:,.1f} FLOP/byte",
            notes=("roofline-peaks",),
        ),
        Fact(
            f"prefill {pre.context_len:,} tokens",
            f"{pre.flops / TFLOP:,.1f} TFLOP, {f.gb_text(pre.bytes, 1)}, intensity "
            f"{pre.arithmetic_intensity_flop_per_byte:,.0f} FLOP/byte ({pre.bound}-bound), "
            f"TTFT floor {pre.time_floor_s:,.3f} s",
            notes=("roofline-prefill-causal",),
        ),
        (
            "critical context s*",
            "none"
            if s_star is None
            else f"{s_star:,} tokens (below it, batching can reach the ridge)",
        ),
    ]
    if result.tp_where_comm_dominates is not None:
        facts.append(
            (
                "TP where communication dominates",
                (
                    f"{result.tp_where_comm_dominates}"
                    if result.tp_where_comm_dominates
                    else "none up to 64"
                )
                + f" (batch {result.comm_batch_size}, {result.link_name}; above "
                f"{result.gpus_per_node} GPUs in two levels over {result.network_name})",
            )
        )
    for row in result.per_context:
        facts.append(
            Fact(
                f"at {row.context_len:,} tokens",
                f"I_inf {row.asymptotic_intensity_flop_per_byte:,.1f} FLOP/byte, ceiling "
                f"{row.ceiling_tokens_per_s:,.0f} tok/s, B_read {row.batch_equal_reads:,.1f}"
                if row.ceiling_tokens_per_s
                else "no KV",
                notes=("roofline-batch-equal-reads", "roofline-terms"),
            )
        )
    table = Table(
        "decode",
        [
            Column("context_len", "context (tokens)", f.integer),
            Column("batch_size", "batch", f.integer),
            Column("flops", "GFLOP/step", f.gflop, priority=2),
            Column("bytes", "GB/step", f.gb),
            Column(
                "arithmetic_intensity_flop_per_byte", "intensity (FLOP/B)", f.fixed(2), priority=1
            ),
            Column("bound", "bound", f.text, "left"),
            Column("comm_s", "comm (ms)", f.ms, priority=3 if d.gpus == 1 else 1),
            Column("time_floor_s", "TPOT floor (ms)", f.ms),
            Column("tokens_per_s", "tokens/s", f.integer),
            Column(
                "fits_text",
                "fits",
                f.text,
                "left",
                verdict=lambda row: judged(row["fits"], Verdict.bad),
                raw_keys=("fits", "max_batch"),
            ),
        ],
        [
            {**row, "fits_text": "yes" if row["fits"] else f"no (max {row['max_batch']:,})"}
            for row in rows_of(result.decode)
        ],
        notes=("roofline-decode-reads", "roofline-moe", "roofline-state", "roofline-tp"),
    )
    tables = [table]
    if result.operators is not None:
        tables.append(
            Table(
                "decode step by operator",
                [
                    Column("batch_size", "batch", f.integer),
                    Column("name", "operator", f.text, "left"),
                    Column("layers", "layers", f.integer, priority=2),
                    Column("flops", "GFLOP", f.gflop2),
                    Column("weight_bytes", "weights MB", f.mb, priority=1),
                    Column("kv_bytes", "KV MB", f.mb, priority=1),
                    Column("activation_bytes", "act. MB", f.mb, priority=2),
                    Column("arithmetic_intensity_flop_per_byte", "FLOP/B", f.fixed(2)),
                    Column("bound", "bound", f.text, "left"),
                    Column("time_floor_s", "floor ms", f.ms3),
                    Column("share", "share", f.share),
                ],
                rows_of(result.operators),
                notes=("roofline-ops",),
            )
        )
    return view(f"Roofline of {result.model.name} on {result.gpu.name}", result, facts, tables)
