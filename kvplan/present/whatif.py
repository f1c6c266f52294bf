"""`kvplan whatif` in words: what each technique moves, saves in bytes and in time, and what to
probe before using it. The table stays narrow; the long texts go under it and into the JSON."""

from __future__ import annotations

from kvplan.plans.whatif import WhatIfResult, WhatIfRow
from kvplan.present import format as f
from kvplan.present.notes import note_texts
from kvplan.present.view import Column, Table, View, jsonable

TERM_LABELS = {
    "bytes_per_value": "bytes_per_value (p)",
    "layers": "layers (L)",
    "kv_heads": "kv_heads (H_kv)",
    "head_dim": "head_dim (d)",
    "seq_len": "seq_len (s)",
    "duplicates": "duplicate bytes across the batch",
    "allocation": "allocation waste",
    "reads": "bytes read per step",
    "draft": "a draft model's cache",
}
TERM_SYMBOLS = {
    "bytes_per_value": "p",
    "layers": "L",
    "kv_heads": "H_kv",
    "head_dim": "d",
    "seq_len": "s",
    "duplicates": "dup",
    "allocation": "waste",
    "reads": "reads",
    "draft": "+draft",
}

TABLE_NAME_WIDTH, TABLE_TERM_WIDTH = 20, 10  # longer names and term lists are shortened

# The accuracy note and the probe to run, per technique kind (dtype: per format).
PROBES = {
    "fp8": "near-lossless with calibrated scales; quantize KV one step less aggressively than "
    "the weights and probe long-context recall",
    "int8": "generally safe; probe long-context recall",
    "int4": "degrades long-context recall first (short prompts still score well): run a "
    "needle-style recall probe at production length",
    "int3": "workable with careful outlier handling (rotation before quantizing, as "
    "TurboQuant); keys tolerate less than values: run a recall probe at production length",
    "int2": "research territory: naive INT2 collapses; it needs attention-aware rotation "
    "(OSCAR) or per-channel keys (KIVI) and the sink and recent tokens in full precision: run a "
    "recall probe at production length",
    "cla": "a training-time change: needs a checkpoint trained with shared layers (CLA2 "
    "reports near-identical accuracy); evaluate on your task",
    "gqa": "a training-time change (uptraining to fewer KV heads): GQA-8 is near-lossless, "
    "MQA costs noticeable quality; evaluate on your task",
    "prune": "KV heads removed from a trained checkpoint by importance: cheaper than "
    "retraining, worse than trained GQA; quality usually needs fine-tuning: evaluate on your "
    "task and a recall probe",
    "lowrank": "Palu: the K/V projections of an existing checkpoint decomposed; evaluate "
    "perplexity and a recall probe at your compression rate",
    "mla": "a conversion to MLA needs retraining or distillation; evaluate on your task",
    "window": "drops everything older than the window: run a long-context recall probe; keep "
    "the first (sink) tokens",
    "cyclic": "the window's implementation, with the window's accuracy: run a long-context "
    "recall probe; exempt the sink slots from the wraparound",
    "evict": "irreversible and input-dependent: gate it on a needle-style recall probe at "
    "production length, in CI; never evict the sink tokens",
    "merge": "averages similar neighbours instead of dropping them; the same blind decision "
    "as eviction: recall probe at production length (helps on redundant prose, not on lists "
    "of distinct facts)",
    "recurrent": "a hybrid architecture (training-time): a fixed state instead of a growing "
    "cache; evaluate long-context recall",
    "prefix": "lossless (one copy, many requests); it fires only with prefix-aware routing; a "
    "hit can change outputs at the 1e-5 level (batch shapes), never degrade them",
    "paged": "lossless and bit-exact: only the addressing of the bytes changes",
    "sparse_read": "attends to a selected subset per step: evaluate a recall probe at "
    "production length",
    "spec": "lossless (verification keeps the target's distribution); it gets worse as the "
    "batch grows: a full batch has no idle FLOPs to spend",
}

# The scheduling group: what each does, in a few words.
SCHEDULING_TEXT = {
    "continuous-batching": "keeps freed memory busy (occupancy, not size)",
    "chunked-prefill": "stops one long prompt stalling everyone's decode",
    "preemption": "admits optimistically, recovers by preempting",
    "cache-aware-routing": "decides whether prefix reuse ever fires",
}


def probe_key(technique: str, kind: str) -> str:
    return technique.split("=")[0] if kind == "dtype" else kind


def probe_text(row: WhatIfRow, model_name: str, kv_dtype: str) -> str:
    if not row.kinds:
        return f"{model_name} as it is, KV {kv_dtype}"
    parts = row.technique.split(" + ")
    keys = [probe_key(p, k) for p, k in zip(parts, row.kinds, strict=True)]
    if len(keys) == 1:
        return PROBES[keys[0]]
    lossy = [PROBES[k] for k in keys if k not in ("prefix", "paged", "spec")]
    return "; ".join(dict.fromkeys(lossy)) or "lossless"


def term_symbols(terms: tuple[str, ...]) -> str:
    if set(terms) == {"kv_heads", "head_dim"}:
        return "H_kv·d"
    return ", ".join(TERM_SYMBOLS[t] for t in terms) or "—"


def stacking_text(row: WhatIfRow) -> str:
    s = row.stacking
    if s.kind == "multiply":
        return "different terms: the factors multiply"
    if s.kind == "same_term":
        clashes = ", ".join(TERM_LABELS[t] for t in s.clashes)
        if not s.dropped:  # one technique named twice
            return f"the same term, {clashes}: the technique counts once"
        return f"the same term, {clashes}: only the stronger counts, {', '.join(s.dropped)} adds nothing"
    return ""


def label(technique: str) -> str:
    """The table's name for a row: a long combination shortened (the notes and JSON keep it)."""
    parts = technique.split(" + ")
    if len(technique) <= TABLE_NAME_WIDTH or len(parts) == 1:
        return technique
    return f"{parts[0]} + {len(parts) - 1} more"


def short_terms(terms: tuple[str, ...]) -> str:
    text = term_symbols(terms)
    return text if len(text) <= TABLE_TERM_WIDTH else f"{len(terms)} terms"


def _extra(row: WhatIfRow) -> str:
    if row.contiguous_concurrency is not None:
        return (
            f" Sequences holding {row.held_tokens:,} tokens: reserving --ctx each (contiguous) "
            f"fits {row.contiguous_concurrency:,}; paged, {row.max_concurrency:,}."
        )
    if row.draft is not None:
        return f" Draft {row.draft}, {row.tokens_per_round:.2f} tokens per round."
    return ""


def row_notes(result: WhatIfResult) -> list[str]:
    """One line per technique under the table: its accuracy note and probe, how it stacks."""
    lines, seen = [], set()
    for row in result.rows:
        if not row.kinds or row.technique in seen:
            continue
        seen.add(row.technique)
        quality = "lossless" if row.lossless else "lossy"
        words = probe_text(row, result.model["name"], result.kv_dtype)
        stacking = stacking_text(row)
        how = f"{term_symbols(row.terms)}, {quality}" + (f"; {stacking}" if stacking else "")
        lines.append(f"{row.technique} ({how}): {words}.{_extra(row)}")
    for item in result.skipped:
        lines.append(f"{item.technique}: not priced — {item.reason}.")
    return lines


def whatif_view(result: WhatIfResult) -> View:
    data = jsonable(result)
    for row, item in zip(result.rows, data["rows"], strict=True):
        item["term"] = ", ".join(TERM_LABELS[t] for t in row.terms) or "—"
        item["term_symbols"] = term_symbols(row.terms)
        item["label"] = label(row.technique)
        item["term_short"] = short_terms(row.terms)
        item["stacking_text"] = stacking_text(row)
        item["probe"] = probe_text(row, result.model["name"], result.kv_dtype)
    for item in data["scheduling"]:
        item["what"] = SCHEDULING_TEXT[item["technique"]]
    several = len(result.batch_sizes) > 1
    columns = [
        Column("label", "technique", f.text, "left"),
        *([Column("batch_size", "batch", f.integer)] if several else []),
        Column("term_short", "term", f.text, "left"),
        Column("kv_bytes", "KV GiB", f.gib1),
        Column("factor", "x", f.factor),
        Column("kv_read_bytes", "read GiB", f.gib1),
        Column("ceiling_tokens_per_s", "max tok/s", f.integer),
        Column("tpot_floor_s", "TPOT ms", f.ms),
        Column("max_concurrency", "users", f.integer),
        Column("ttft_floor_s", "TTFT s", f.fixed(2)),
    ]
    tables = [Table("", columns, data["rows"])]
    if result.scheduling:
        tables.append(
            Table(
                "Changes no term (kvplan simulate measures it):",
                [
                    Column("technique", "technique", f.text, "left"),
                    Column("what", "what it does", f.text, "left"),
                ],
                data["scheduling"],
            )
        )
    batches = ", ".join(f"{b:,}" for b in result.batch_sizes)
    if several:
        batches = f"batches of {batches}"
    facts = [
        ("model", result.model["name"]),
        ("sequences", f"{batches} x {result.context_len:,} tokens"),
        (
            "GPU",
            f"{result.tp} x {result.gpu} (KV pool {f.gib_text(result.kv_pool_bytes_per_gpu)} per GPU)",
        ),
        ("baseline", f"KV {result.kv_dtype}, weights {result.weights_dtype}"),
    ]
    return View(
        f"What-if for {result.model['name']}: {batches} x {result.context_len:,} tokens",
        facts,
        tables,
        row_notes(result) + note_texts(result.notes),
        data,
    )
