"""`kvplan whatif`: price each KV-cache technique by the term of the formula it moves.

    KV bytes = 2 x layers x kv_heads x head_dim x seq_len x bytes_per_value x batch

Techniques on different terms multiply; techniques on the same term do not stack (the stronger
one counts). Prefix sharing removes duplicate bytes across the batch and composes with all.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.present.view import Column, Report, Table, fmt_gb, fmt_gib, fmt_text, unique_notes
from kvplan.units import parse_tokens


class Technique(NamedTuple):
    name: str  # as typed: fp8, cla2, window=32000, gqa=8, int4, prefix=4k, evict=0.25
    kind: str
    value: float | int | str | None
    term: str
    lossless: bool
    note: str


TERMS = {
    "bytes_per_value": "bytes_per_value (p)",
    "layers": "layers (L)",
    "kv_heads": "kv_heads (H_kv)",
    "seq_len": "seq_len (s)",
    "duplicates": "duplicate bytes across the batch",
}


def parse_technique(text: str) -> Technique:
    raw = text.strip().lower()
    key, _, arg = raw.partition("=")
    if key in ("fp8", "int8", "int4"):
        probe = {
            "fp8": "near-lossless with calibrated scales; uncalibrated scales cost 1-2 points on "
            "reasoning: evaluate on your task",
            "int8": "generally safe; evaluate on your task",
            "int4": "degrades long-context recall first: run a long-context recall probe at "
            "production length",
        }[key]
        return Technique(raw, "dtype", key, "bytes_per_value", False, probe)
    if key.startswith("cla"):
        share = key[3:] or arg
        if not share.isdigit() or int(share) < 2:
            raise KvplanError(f"--apply {text!r}: CLA needs a sharing factor of 2 or more (cla2)")
        return Technique(
            raw,
            "cla",
            int(share),
            "layers",
            False,
            "a training-time change (layers share KV); CLA2 reports near-identical "
            "accuracy, but it needs a checkpoint trained that way",
        )
    if key in ("gqa", "mqa"):
        heads = 1 if key == "mqa" else _int(arg, text)
        return Technique(
            raw,
            "gqa",
            heads,
            "kv_heads",
            False,
            "a training-time change (uptraining to fewer KV heads); MQA costs "
            "noticeable quality, GQA-8 is near-lossless",
        )
    if key == "window":
        return Technique(
            raw,
            "window",
            parse_tokens(arg, what="window"),
            "seq_len",
            False,
            "drops everything older than the window: run a long-context recall "
            "probe; keep the first (sink) tokens",
        )
    if key == "evict":
        fraction = _fraction(arg, text)
        return Technique(
            raw,
            "evict",
            fraction,
            "seq_len",
            False,
            "eviction is irreversible and input-dependent: gate it on a needle-style "
            "recall probe at production length; never evict the sink tokens",
        )
    if key == "prefix":
        return Technique(
            raw,
            "prefix",
            parse_tokens(arg, what="prefix"),
            "duplicates",
            True,
            "lossless (the same bytes, stored once); it only fires with prefix-aware routing",
        )
    raise KvplanError(
        f"--apply {text!r}: unknown technique (fp8, int8, int4, claN, gqa=N, mqa, window=N, "
        "evict=F, prefix=N; join with + to combine)"
    )


def _int(arg: str, text: str) -> int:
    if not arg.isdigit() or int(arg) < 1:
        raise KvplanError(f"--apply {text!r}: needs a positive whole number")
    return int(arg)


def _fraction(arg: str, text: str) -> float:
    try:
        value = float(arg)
    except ValueError:
        raise KvplanError(f"--apply {text!r}: needs a fraction between 0 and 1") from None
    if not 0 < value < 1:
        raise KvplanError(f"--apply {text!r}: needs a fraction between 0 and 1")
    return value


def _strongest(
    techniques: list[Technique],
    spec: ModelSpec,
    context: int,
    batch: int,
    base_dtype: str,
    group: int,
) -> list[Technique]:
    """Techniques that act on the same term do not stack: keep the one that saves the most."""
    by_term: dict[str, Technique] = {}
    for t in techniques:
        current = by_term.get(t.term)
        if current is None or _bytes(spec, [t], context, batch, base_dtype, group) < _bytes(
            spec, [current], context, batch, base_dtype, group
        ):
            by_term[t.term] = t
    return list(by_term.values())


def _transform(spec: ModelSpec, techniques: list[Technique]) -> ModelSpec:
    layers = list(spec.layers)
    for t in techniques:
        if t.kind == "cla":  # every group of N consecutive attention layers keeps one cache
            seen = 0
            for i, layer in enumerate(layers):
                if layer.attention is not None:
                    if seen % t.value:
                        layers[i] = layer._replace(attention=None)
                    seen += 1
        elif t.kind == "gqa":
            for i, layer in enumerate(layers):
                a = layer.attention
                if a is not None and a.kind != "mla" and t.value < a.num_kv_heads:
                    if a.num_q_heads % t.value:
                        raise KvplanError(f"gqa={t.value} does not divide {a.num_q_heads} heads")
                    layers[i] = layer._replace(attention=a._replace(num_kv_heads=t.value))
        elif t.kind == "window":
            for i, layer in enumerate(layers):
                a = layer.attention
                if a is None or a.kind == "mla" or (a.window is not None and a.window <= t.value):
                    continue  # MLA keeps its latent; a narrower window already caps the layer
                kind = "chunked" if a.kind == "chunked" else "sliding"
                layers[i] = layer._replace(attention=a._replace(kind=kind, window=t.value))
    return spec._replace(layers=tuple(layers))


def _bytes(
    spec: ModelSpec,
    techniques: list[Technique],
    context: int,
    batch: int,
    base_dtype: str,
    group: int,
) -> int:
    """KV bytes for `batch` sequences of `context` tokens with `techniques` applied."""
    dtype = next((t.value for t in techniques if t.kind == "dtype"), base_dtype)
    fmt = resolve_kv_format(dtype, spec.dtype, group)
    model = _transform(spec, techniques)
    kept = context
    for t in techniques:
        if t.kind == "evict":
            kept = max(1, round(context * (1 - t.value)))
    prefix = next((t.value for t in techniques if t.kind == "prefix"), 0)
    prefix = min(prefix, kept)
    if prefix:
        shared = kv_bytes_per_sequence(model, prefix, fmt)
        private = kv_bytes_per_sequence(model, kept, fmt) - shared
        return shared + batch * private
    return batch * kv_bytes_per_sequence(model, kept, fmt)


class WhatIfRequest(NamedTuple):
    context_len: int = 131072
    batch_size: int = 1
    apply: tuple[str, ...] = ()
    kv_dtype: str = "auto"
    kv_group_size: int = 32


def whatif(spec: ModelSpec, request: WhatIfRequest) -> Report:
    """The Python twin of `kvplan whatif`."""
    if not request.apply:
        raise KvplanError("whatif needs at least one --apply technique")
    if request.batch_size < 1:
        raise KvplanError("--batch must be at least 1")
    ctx, batch, group = request.context_len, request.batch_size, request.kv_group_size
    base_dtype = resolve_kv_format(request.kv_dtype, spec.dtype, group).name
    baseline = _bytes(spec, [], ctx, batch, base_dtype, group)
    rows = [
        {
            "technique": "baseline",
            "term": "—",
            "bytes": baseline,
            "factor": 1.0,
            "lossless": True,
            "stacking": "",
            "note": f"{spec.name} as it is, KV {base_dtype}",
        }
    ]
    singles: list[Technique] = []
    combos: list[list[Technique]] = []
    for item in request.apply:
        parts = [parse_technique(p) for p in item.split("+") if p.strip()]
        if not parts:
            raise KvplanError(f"--apply {item!r}: empty technique")
        if len(parts) == 1:
            singles.append(parts[0])
        else:
            combos.append(parts)
    if len(singles) > 1 and not combos:
        combos.append(list(singles))
    for t in singles:
        after = _bytes(spec, [t], ctx, batch, base_dtype, group)
        rows.append(
            {
                "technique": t.name,
                "term": TERMS[t.term],
                "bytes": after,
                "factor": baseline / after,
                "lossless": t.lossless,
                "stacking": "",
                "note": t.note,
            }
        )
    notes = []
    for parts in combos:
        used = _strongest(parts, spec, ctx, batch, base_dtype, group)
        after = _bytes(spec, used, ctx, batch, base_dtype, group)
        terms = [t.term for t in parts]
        clashes = sorted({TERMS[x] for x in terms if terms.count(x) > 1})
        if clashes:
            dropped = [t.name for t in parts if t not in used]
            stacking = (
                f"same term ({', '.join(clashes)}): only the stronger counts, "
                f"{', '.join(dropped)} adds nothing"
            )
        else:
            stacking = "different terms: the factors multiply"
        rows.append(
            {
                "technique": " + ".join(t.name for t in parts),
                "term": ", ".join(dict.fromkeys(TERMS[x] for x in terms)),
                "bytes": after,
                "factor": baseline / after,
                "lossless": all(t.lossless for t in parts),
                "stacking": stacking,
                "note": "; ".join(dict.fromkeys(t.note for t in parts if not t.lossless))
                or "lossless",
            }
        )
    if any(a.kind == "mla" for a in spec.attention_layers()):
        notes.append(
            "MLA caches a latent: gqa/mqa do not apply to it (no KV heads to share), "
            "and windows were left off its layers."
        )
    if any(layer.state for layer in spec.layers):
        notes.append(
            "Recurrent states are fixed-size: the techniques act on the attention layers only."
        )
    notes.append(
        "Order of adoption (seed 004): lossless first — paging and continuous batching, "
        "prefix reuse, chunked prefill — then fp8, then windows or eviction behind a "
        "recall probe, then change the requirement."
    )
    notes = unique_notes(notes)
    for row in rows:
        row["bytes_gib"] = row["bytes"] / 2**30
    columns = [
        Column("technique", "technique", fmt_text, "left"),
        Column("term", "term it moves", fmt_text, "left"),
        Column("bytes", "KV (GiB)", lambda v: f"{v / 2**30:,.1f}"),
        Column("bytes", "KV (GB)", fmt_gb),
        Column("factor", "factor", lambda v: f"{v:,.2f}x"),
        Column("lossless", "lossless", lambda v: "yes" if v else "no", "left"),
        Column("stacking", "stacking", fmt_text, "left"),
        Column("note", "what to probe", fmt_text, "left"),
    ]
    facts = [
        ("model", spec.name),
        ("sequences", f"{batch:,} x {ctx:,} tokens"),
        ("baseline", f"{fmt_gib(baseline)} GiB of KV ({base_dtype})"),
    ]
    data = {
        "kvplan_version": __version__,
        "model": {"name": spec.name},
        "context_len": ctx,
        "batch_size": batch,
        "kv_dtype": base_dtype,
        "baseline_bytes": baseline,
        "rows": rows,
        "notes": notes,
    }
    return Report(
        f"What-if for {spec.name}: {batch} x {ctx:,} tokens",
        facts,
        [Table("", columns, rows)],
        notes,
        data,
    )
