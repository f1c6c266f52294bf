"""`kvplan fit` as a table: what runs on this machine, ranked, with what each row assumes."""

from __future__ import annotations

from kvplan.plans.fit import FitResult
from kvplan.present import format as f
from kvplan.present.view import Column, Table, View, jsonable, view


def row_command(result: FitResult, row: dict) -> str:
    """The kvplan engine command that prints the row's bytes."""
    from kvplan.present.escape import shell_word

    words = ["kvplan", "engine", row["model_argument"], "--engine", "llama.cpp"]
    words += ["--gpu", result.gpu_argument, "-c", str(row["context_len"]), "-np", "1"]
    words += ["-ngl", "all"]
    if not row["weights_stored"]:
        words += ["--weights-type", row["weights_type"]]
    if result.cache_type != "f16":
        words += ["-ctk", result.cache_type, "-ctv", result.cache_type]
    if result.gpu_memory_given:
        words += ["--gpu-memory", f"{int(result.gpu_capacity_bytes)}B"]
    return " ".join(shell_word(w) for w in words)


def fit_view(result: FitResult, top: int = 0) -> View:
    data = jsonable(result)
    for row in data["rows"]:
        row["params"] = f"{f.count(row['params_total'])} / {f.count(row['params_active'])}"
        row["command"] = row_command(result, row)
    shown = data["rows"][:top] if top else data["rows"]
    columns = [
        Column("model", "model", f.text, "left"),
        Column("params", "params total / active", f.text, raw_keys=("params_total",), priority=2),
        Column("weights_type", "weights", f.text, "left"),
        Column("context_len", "-c (tokens)", f.integer, answer=True),
        Column("weights_bytes", "weights (GiB)", f.gib, priority=1),
        Column("kv_bytes", "KV (GiB)", f.gib),
        Column("gpu_bytes", "GPU total (GiB)", f.gib, answer=True),
        Column("headroom_bytes", "left (GiB)", f.gib, priority=3),
        Column("decode_tok_per_s", "tok/s", f.fixed(1), priority=1),
    ]
    title = f"fits on {result.gpu} ({f.gib_text(result.gpu_capacity_bytes)} for the GPU)"
    count = len(data["rows"])
    facts = [
        ("machine", f"{result.gpu}: {f.gib_text(result.gpu_capacity_bytes)} the GPU may use"),
        (
            "rows",
            f"{count:,} fit"
            + (
                f"; the first {len(shown):,} shown (--top 0 lists all)"
                if len(shown) < count
                else ""
            ),
        ),
    ]
    tables = [Table("", columns, shown, notes=("fit-assumes", "fit-rank"))]
    if result.too_large:
        tables.append(
            Table(
                "does not fit here",
                [
                    Column("model", "model", f.text, "left"),
                    Column("params_total", "params", f.count),
                    Column("smallest_gpu_bytes", "least it needs (GiB)", f.gib),
                    Column("why", "why", f.text, "left", prose=True),
                ],
                data["too_large"],
            )
        )
    return view(title, result, facts, tables, data=data)
