"""GPU kinds side by side (`kvplan capacity MODEL --gpu A --gpu B`) in words: one row per kind,
normalised per GPU, the verdict first."""

from __future__ import annotations

from kvplan.plans.compare import CompareResult
from kvplan.present import format as f
from kvplan.present.notes import note_text
from kvplan.present.view import Column, Table, View, jsonable, view


def compare_view(result: CompareResult) -> View:
    r = result
    facts = [
        ("model", r.model),
        ("context", f"{r.context_len:,} tokens per sequence, KV {r.kv_dtype}"),
        ("weights", r.weights_dtype),
        ("verdict", note_text(r.verdict)),
    ]
    columns = [
        Column("gpu", "GPU", f.text, "left"),
        Column(
            "layout",
            "deployment",
            lambda v: "does not fit" if v is None else v,
            "left",
            raw_keys=("layout", "fits", "why_not"),
        ),
        Column("gpus_per_replica", "GPUs", f.integer),
        Column("users_per_replica", "users", f.integer),
        Column("users_per_gpu", "per GPU", f.fixed(1), priority=2),  # users / GPUs
        Column("ceiling_tokens_per_s", "ceiling tok/s", f.integer, priority=3),
        Column("tpot_floor_s", "TPOT floor ms", f.ms, priority=4),  # 100% of the datasheet
        Column("tpot_s", "TPOT ms", f.ms),  # plan's step model, the replica full
        Column("tokens_per_s_per_gpu", "tok/s per GPU", f.integer),
    ]
    if r.users:
        columns.append(Column("gpus_needed", f"GPUs for {r.users:,}", f.integer))
    if any(row.usd_per_gpu_hour is not None for row in r.rows):
        columns += [
            Column("usd_per_hour", "$/hour", f.usd, priority=1),
            # the comparison's answer: never hidden at a narrow terminal
            Column("usd_per_million_output_tokens", "$/M tokens", f.usd, answer=True),
        ]
    data = jsonable(r)
    table = Table("", columns, data["rows"])
    unfit = [row for row in r.rows if not row.fits and row.why_not]
    notes = list(r.notes) + [r.verdict]
    view_ = view(
        f"{r.model} on {len(r.rows)} GPU kinds at {r.context_len:,} tokens",
        r,
        facts,
        [table],
        notes=notes,
        data=data,
    )
    if unfit:  # why a kind cannot serve it, one line each
        lines = [f"{row.gpu}: {row.why_not}" for row in unfit]
        view_ = view_._replace(notes=view_.notes + lines)
    return view_
