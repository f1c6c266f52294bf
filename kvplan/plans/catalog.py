"""`kvplan models`: the bundled models, each with its family, size and KV cost per token."""

from __future__ import annotations

from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_token, state_bytes_per_sequence
from kvplan.inputs.sources import bundled_models, load_model
from kvplan.present.view import Column, Report, Table, fmt_int, fmt_text
from kvplan.units import human_count


def models_report() -> Report:
    rows = []
    for alias, entry in bundled_models().items():
        spec = load_model(alias)
        fmt = KvFormat(spec.dtype)
        rows.append(
            {
                "name": alias,
                "repo_id": entry.repo_ids[0] if entry.repo_ids else None,
                "family": spec.family,
                "params_total": spec.params_total,
                "params_active": spec.params_active,
                "params": f"{human_count(spec.params_total)} / {human_count(spec.params_active)}",
                "dtype": spec.dtype,
                "kv_bytes_per_token": kv_bytes_per_token(spec, fmt),
                "state_bytes_per_sequence": state_bytes_per_sequence(spec) or None,
            }
        )
    columns = [
        Column("name", "name", fmt_text, "left"),
        Column("repo_id", "Hugging Face id", fmt_text, "left"),
        Column("family", "family", fmt_text, "left"),
        Column("params", "params total / active", fmt_text),
        Column("dtype", "dtype", fmt_text, "left"),
        Column("kv_bytes_per_token", "KV B/token", fmt_int),
        Column("state_bytes_per_sequence", "state B/seq", fmt_int),
    ]
    notes = [
        "KV B/token: every attention layer holding every token, in the model dtype (sliding and "
        "chunked layers hold fewer at long context: see kvplan size --breakdown).",
    ]
    return Report(
        "Bundled models",
        tables=[Table("", columns, rows)],
        notes=notes,
        data={"models": rows, "notes": notes},
    )
