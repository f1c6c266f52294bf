"""`kvplan whatif`: price each KV-cache technique by the term of the formula it moves.

    KV bytes = 2 x layers x kv_heads x head_dim x seq_len x bytes_per_value x batch

Techniques on different terms multiply; techniques on the same term do not stack (the stronger
one counts). Prefix sharing removes duplicate bytes across the batch and composes with all.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.options import parse_tokens
from kvplan.notes import Note, note, unique

TERMS = ("bytes_per_value", "layers", "kv_heads", "seq_len", "duplicates")


class Technique(NamedTuple):
    name: str  # as typed: fp8, cla2, window=32000, gqa=8, int4, prefix=4k, evict=0.25
    kind: str  # dtype | cla | gqa | window | evict | prefix
    value: float | int | str | None
    term: str  # one of TERMS
    lossless: bool


def parse_technique(text: str) -> Technique:
    raw = text.strip().lower()
    key, _, arg = raw.partition("=")
    if key in ("fp8", "int8", "int4"):
        return Technique(raw, "dtype", key, "bytes_per_value", False)
    if key.startswith("cla"):
        share = key[3:] or arg
        if not (share.isascii() and share.isdigit()) or not 2 <= int(share) <= 1024:
            raise KvplanError(f"--apply {text!r}: CLA needs a sharing factor of 2 or more (cla2)")
        return Technique(raw, "cla", int(share), "layers", False)
    if key in ("gqa", "mqa"):
        heads = 1 if key == "mqa" else _int(arg, text)
        return Technique(raw, "gqa", heads, "kv_heads", False)
    if key == "window":
        return Technique(raw, "window", parse_tokens(arg, what="window"), "seq_len", False)
    if key == "evict":
        return Technique(raw, "evict", _fraction(arg, text), "seq_len", False)
    if key == "prefix":
        return Technique(raw, "prefix", parse_tokens(arg, what="prefix"), "duplicates", True)
    raise KvplanError(
        f"--apply {text[:60]!r}: unknown technique (fp8, int8, int4, claN, gqa=N, mqa, window=N, "
        "evict=F, prefix=N; join with + to combine)"
    )


def _int(arg: str, text: str) -> int:
    if not (arg.isascii() and arg.isdigit()) or len(arg) > 8 or not 1 <= int(arg) <= 1 << 20:
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
                if a is not None and a.kind is not CacheKind.MLA and t.value < a.num_kv_heads:
                    if a.num_q_heads % t.value:
                        raise KvplanError(f"gqa={t.value} does not divide {a.num_q_heads} heads")
                    layers[i] = layer._replace(attention=a._replace(num_kv_heads=t.value))
        elif t.kind == "window":
            for i, layer in enumerate(layers):
                a = layer.attention
                if (
                    a is None
                    or a.kind is CacheKind.MLA
                    or (a.window is not None and a.window <= t.value)
                ):
                    continue  # MLA keeps its latent; a narrower window already caps the layer
                kind = CacheKind.CHUNKED if a.kind is CacheKind.CHUNKED else CacheKind.SLIDING
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


class Stacking(NamedTuple):
    kind: str  # "" (a single technique) | multiply | same_term
    clashes: tuple[str, ...] = ()  # terms hit twice
    dropped: tuple[str, ...] = ()  # techniques that add nothing


class WhatIfRow(NamedTuple):
    technique: str
    kinds: tuple[str, ...]  # the technique kinds in the row (empty for the baseline)
    terms: tuple[str, ...]
    bytes: int
    factor: float
    lossless: bool
    stacking: Stacking


class WhatIfResult(NamedTuple):
    kvplan_version: str
    model: dict
    context_len: int
    batch_size: int
    kv_dtype: str
    baseline_bytes: int
    rows: list[WhatIfRow]
    notes: tuple[Note, ...]


def whatif(spec: ModelSpec, request: WhatIfRequest) -> WhatIfResult:
    """The Python twin of `kvplan whatif`."""
    if not request.apply:
        raise KvplanError("whatif needs at least one --apply technique")
    if request.batch_size < 1:
        raise KvplanError("--batch must be at least 1")
    ctx, batch, group = request.context_len, request.batch_size, request.kv_group_size
    base_dtype = resolve_kv_format(request.kv_dtype, spec.dtype, group).name
    baseline = _bytes(spec, [], ctx, batch, base_dtype, group)
    if baseline <= 0:
        raise KvplanError(
            f"{spec.name} keeps no KV cache: there is nothing for a technique to save"
        )
    rows = [WhatIfRow("baseline", (), (), baseline, 1.0, True, Stacking(""))]
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
            WhatIfRow(
                t.name, (t.kind,), (t.term,), after, baseline / after, t.lossless, Stacking("")
            )
        )
    for parts in combos:
        used = _strongest(parts, spec, ctx, batch, base_dtype, group)
        after = _bytes(spec, used, ctx, batch, base_dtype, group)
        terms = [t.term for t in parts]
        clashes = tuple(sorted({x for x in terms if terms.count(x) > 1}))
        if clashes:
            stacking = Stacking("same_term", clashes, tuple(t.name for t in parts if t not in used))
        else:
            stacking = Stacking("multiply")
        rows.append(
            WhatIfRow(
                " + ".join(t.name for t in parts),
                tuple(t.kind for t in parts),
                tuple(dict.fromkeys(terms)),
                after,
                baseline / after,
                all(t.lossless for t in parts),
                stacking,
            )
        )
    notes = []
    if spec.has_kind(CacheKind.MLA):
        notes.append(note("whatif-mla"))
    if spec.has_kind(CacheKind.STATE):
        notes.append(note("whatif-state"))
    notes.append(note("whatif-order"))
    return WhatIfResult(
        __version__,
        {"name": spec.name},
        ctx,
        batch,
        base_dtype,
        baseline,
        rows,
        unique(notes),
    )
