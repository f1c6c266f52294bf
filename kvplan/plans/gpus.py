"""`kvplan gpus`: the bundled hardware profiles and their ridge points."""

from __future__ import annotations

from kvplan.inputs.hardware import bundled_profiles
from kvplan.present.view import Column, Report, Table, fmt_float, fmt_text


def gpus_report() -> Report:
    rows = []
    for key, p in bundled_profiles().items():
        rows.append(
            {
                "key": key,
                "name": p.name,
                "aliases": ", ".join(p.aliases),
                "memory_bytes": p.memory_bytes,
                "memory_bandwidth_bytes_per_s": p.memory_bandwidth_bytes_per_s,
                "bf16_peak_flop_per_s": p.peak("bf16"),
                "ridge_bf16_flop_per_byte": p.ridge_flop_per_byte("bf16"),
                "ridge_fp8_flop_per_byte": p.ridge_flop_per_byte("fp8")
                if "fp8" in p.peak_flop_per_s
                else None,
            }
        )
    columns = [
        Column("key", "profile", fmt_text, "left"),
        Column("name", "name", fmt_text, "left"),
        Column("aliases", "aliases", fmt_text, "left"),
        Column("memory_bytes", "memory (GB)", lambda v: f"{v / 1e9:,.0f}"),
        Column("memory_bandwidth_bytes_per_s", "BW (TB/s)", lambda v: f"{v / 1e12:,.2f}"),
        Column("bf16_peak_flop_per_s", "bf16 (TFLOP/s)", lambda v: f"{v / 1e12:,.1f}"),
        Column("ridge_bf16_flop_per_byte", "ridge bf16 (FLOP/B)", fmt_float(1)),
        Column("ridge_fp8_flop_per_byte", "ridge fp8 (FLOP/B)", fmt_float(1)),
    ]
    notes = ["Dense peaks (no 2:4 sparsity) from each vendor's datasheet; sources in each YAML."]
    return Report(
        "Hardware profiles",
        tables=[Table("", columns, rows)],
        notes=notes,
        data={"gpus": rows, "notes": notes},
    )
