"""`kvplan whatif` in words: what each technique moves, saves, and what to probe before using it."""

from __future__ import annotations

from kvplan.plans.whatif import WhatIfResult, WhatIfRow
from kvplan.present import format as f
from kvplan.present.view import Column, Table, Verdict, View, jsonable, judged, view
from kvplan.units import GIB

TERM_LABELS = {
    "bytes_per_value": "bytes_per_value (p)",
    "layers": "layers (L)",
    "kv_heads": "kv_heads (H_kv)",
    "seq_len": "seq_len (s)",
    "duplicates": "duplicate bytes across the batch",
}

PROBES = {
    "fp8": "near-lossless with calibrated scales; uncalibrated scales cost 1-2 points on "
    "reasoning: evaluate on your task",
    "int8": "generally safe; evaluate on your task",
    "int4": "degrades long-context recall first: run a long-context recall probe at "
    "production length",
    "cla": "a training-time change (layers share KV); CLA2 reports near-identical "
    "accuracy, but it needs a checkpoint trained that way",
    "gqa": "a training-time change (uptraining to fewer KV heads); MQA costs "
    "noticeable quality, GQA-8 is near-lossless",
    "window": "drops everything older than the window: run a long-context recall "
    "probe; keep the first (sink) tokens",
    "evict": "eviction is irreversible and input-dependent: gate it on a needle-style "
    "recall probe at production length; never evict the sink tokens",
    "prefix": "lossless (the same bytes, stored once); it only fires with prefix-aware routing",
}


def _probe_key(technique: str, kind: str) -> str:
    return technique.split("=")[0] if kind == "dtype" else kind


def probe_text(row: WhatIfRow, model_name: str, kv_dtype: str) -> str:
    if not row.kinds:
        return f"{model_name} as it is, KV {kv_dtype}"
    parts = row.technique.split(" + ")
    keys = [_probe_key(p, k) for p, k in zip(parts, row.kinds, strict=True)]
    if len(keys) == 1:
        return PROBES[keys[0]]
    lossy = [PROBES[k] for k in keys if k != "prefix"]
    return "; ".join(dict.fromkeys(lossy)) or "lossless"


def stacking_text(row: WhatIfRow) -> str:
    s = row.stacking
    if s.kind == "multiply":
        return "different terms: the factors multiply"
    if s.kind == "same_term":
        clashes = ", ".join(TERM_LABELS[t] for t in s.clashes)
        return (
            f"same term ({clashes}): only the stronger counts, {', '.join(s.dropped)} adds nothing"
        )
    return ""


def whatif_view(result: WhatIfResult) -> View:
    data = jsonable(result)
    for row, item in zip(result.rows, data["rows"], strict=True):
        item["term"] = ", ".join(TERM_LABELS[t] for t in row.terms) or "—"
        item["stacking_text"] = stacking_text(row)
        item["probe"] = probe_text(row, result.model["name"], result.kv_dtype)
        item["bytes_gib"] = row.bytes / GIB
    columns = [
        Column("technique", "technique", f.text, "left"),
        Column("term", "term it moves", f.text, "left"),
        Column("bytes", "KV (GiB)", f.gib1),
        Column("bytes", "KV (GB)", f.gb, priority=2),
        Column("factor", "factor", f.factor),
        Column(
            "lossless",
            "lossless",
            f.yes_no,
            "left",
            verdict=lambda row: judged(row["lossless"], Verdict.warn),
        ),
        Column("stacking_text", "stacking", f.text, "left", prose=True),
        Column("probe", "what to probe", f.text, "left", prose=True),
    ]
    facts = [
        ("model", result.model["name"]),
        ("sequences", f"{result.batch_size:,} x {result.context_len:,} tokens"),
        ("baseline", f"{f.gib(result.baseline_bytes)} GiB of KV ({result.kv_dtype})"),
    ]
    return view(
        f"What-if for {result.model['name']}: {result.batch_size} x {result.context_len:,} tokens",
        result,
        facts,
        [Table("", columns, data["rows"])],
        data=data,
    )
