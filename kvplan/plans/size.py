"""`kvplan size`: the cache per token, per sequence and per batch, next to the weights."""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import (
    batch_equal,
    cache_groups,
    gqa_saving_factor,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
)
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.present.view import (
    Column,
    Report,
    Table,
    fmt_float,
    fmt_gb,
    fmt_gib,
    fmt_int,
    fmt_ratio,
    fmt_text,
    unique_notes,
)
from kvplan.units import human_count, human_tokens


class SizeRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192,)
    batches: tuple[int, ...] = (1,)
    kv_dtypes: tuple[str, ...] = ("auto",)
    tp: int = 1
    weights_dtype: str = "auto"
    kv_group_size: int = 32
    breakdown: bool = False


def model_notes(spec: ModelSpec, tp: int) -> list[str]:
    """Notes that travel with every number computed for this model at this TP degree."""
    notes = list(spec.notes)
    if tp > 1:
        for attn in spec.attention_layers():
            if attn.kind != "mla" and attn.num_kv_heads < tp:
                notes.append(
                    f"TP {tp} > {attn.num_kv_heads} KV heads: each rank stores one KV head, "
                    f"replicated {tp // attn.num_kv_heads}x across ranks."
                )
                break
        if any(a.kind == "mla" for a in spec.attention_layers()):
            notes.append(f"MLA latent is replicated on all {tp} TP ranks (not sharded).")
        notes.append(f"Per-GPU figures at TP {tp}: weights split evenly across ranks.")
    if any(layer.state for layer in spec.layers):
        notes.append(
            "Recurrent state per sequence counted once, at its fixed size (conv state with "
            "kernel-1 columns plus the SSM state), in the model dtype unless the config names one;"
            " the KV dtype does not apply to it."
        )
    if any(a.kind == "sliding" for a in spec.attention_layers()):
        notes.append(
            "Sliding-window layers hold min(s, W) tokens. transformers keeps W-1; vLLM reserves "
            "W-1 + max_num_batched_tokens + one block (kvplan capacity --engine vllm)."
        )
    return notes


def size(spec: ModelSpec, request: SizeRequest) -> Report:
    """The Python twin of `kvplan size`."""
    spec.check_tp(request.tp)
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    weights_total = weight_bytes(spec, wdtype)
    weights_rank = weights_total / request.tp
    formats = []
    for name in dict.fromkeys(request.kv_dtypes):
        formats.append(resolve_kv_format(name, spec.dtype, request.kv_group_size))
    if not request.contexts or not request.batches:
        raise KvplanError("size needs at least one context and one batch size")

    rows, breakdown_rows, notes = [], [], model_notes(spec, request.tp) + wnotes
    for fmt in formats:
        if fmt.note:
            notes.append(fmt.note)
        groups = cache_groups(spec, fmt, request.tp)
        for context_len in request.contexts:
            per_seq = kv_bytes_per_sequence(spec, context_len, fmt, request.tp)
            for batch_size in request.batches:
                total = per_seq * batch_size
                rows.append(
                    {
                        "context_len": context_len,
                        "batch_size": batch_size,
                        "kv_dtype": fmt.name,
                        "tp": request.tp,
                        "kv_bytes_per_sequence": per_seq,
                        "kv_bytes_total": total,
                        "weights_bytes": int(round(weights_rank)),
                        "kv_to_weights": total / weights_rank if weights_rank else None,
                        "batch_equal": batch_equal(weights_rank, per_seq),
                    }
                )
            if request.breakdown:
                for group in groups:
                    breakdown_rows.append(
                        {
                            "context_len": context_len,
                            "kv_dtype": fmt.name,
                            "group": group.label,
                            "num_layers": group.num_layers,
                            "num_kv_heads": group.num_kv_heads or None,
                            "head_dim": group.head_dim or None,
                            "bytes_per_token_per_layer": group.bytes_per_token_per_layer or None,
                            "tokens_held": group.tokens_held(context_len) or None,
                            "bytes_per_sequence": group.bytes_per_sequence(context_len),
                        }
                    )

    first = formats[0]
    per_token = kv_bytes_per_token(spec, first, request.tp)
    mha = spec.mha_equivalent_bytes_per_token(first)
    saving = gqa_saving_factor(spec, first)
    layer_desc = ", ".join(f"{n} × {label}" for label, n in spec.layer_kind_counts().items())
    facts = [
        ("model", f"{spec.name} ({spec.model_type}; {spec.family})"),
        ("layers", f"{spec.num_layers}: {layer_desc}"),
        ("attention", _attention_desc(spec)),
        (
            "parameters",
            f"{human_count(spec.params_total)} total, "
            f"{human_count(spec.params_active)} active per token",
        ),
        (
            "weights",
            f"{fmt_gib(weights_total)} GiB ({fmt_gb(weights_total)} GB) in {wdtype}"
            + (
                f"; {fmt_gib(weights_rank)} GiB per GPU at TP {request.tp}"
                if request.tp > 1
                else ""
            ),
        ),
        (
            f"KV bytes/token ({first.name})",
            f"{per_token:,} B per token with every attention layer holding every token"
            + (f" (per GPU at TP {request.tp})" if request.tp > 1 else ""),
        ),
    ]
    if saving:
        facts.append(("saving vs multi-head", f"{saving:,.2f}× (MHA equivalent {mha:,} B/token)"))
    state = sum(
        g.state_bytes_per_layer * g.num_layers for g in cache_groups(spec, first, request.tp)
    )
    if state:
        facts.append(("state per sequence", f"{state:,} B ({fmt_gib(state)} GiB), any context"))

    columns = [
        Column("context_len", "context (tokens)", fmt_int),
        Column("batch_size", "batch", fmt_int),
        Column("kv_dtype", "KV dtype", fmt_text, "left"),
        Column("kv_bytes_per_sequence", "KV/seq (GiB)", fmt_gib),
        Column("kv_bytes_per_sequence", "KV/seq (GB)", fmt_gb),
        Column("kv_bytes_total", "KV batch (GiB)", fmt_gib),
        Column("kv_bytes_total", "KV batch (GB)", fmt_gb),
        Column("weights_bytes", "weights (GiB)", fmt_gib),
        Column("kv_to_weights", "KV ÷ weights", fmt_ratio),
        Column("batch_equal", "B_equal (seqs)", fmt_float(1)),
    ]
    tables = [Table("", columns, rows)]
    if request.breakdown:
        tables.append(
            Table(
                "per layer group",
                [
                    Column("context_len", "context (tokens)", fmt_int),
                    Column("kv_dtype", "KV dtype", fmt_text, "left"),
                    Column("group", "cache", fmt_text, "left"),
                    Column("num_layers", "layers", fmt_int),
                    Column("num_kv_heads", "KV heads/GPU", fmt_int),
                    Column("head_dim", "head_dim", fmt_int),
                    Column("bytes_per_token_per_layer", "B/token/layer", fmt_int),
                    Column("tokens_held", "tokens held", fmt_int),
                    Column("bytes_per_sequence", "bytes/seq", fmt_int),
                ],
                breakdown_rows,
            )
        )
    notes = unique_notes(notes)
    data = {
        "kvplan_version": __version__,
        "model": {
            "name": spec.name,
            "model_type": spec.model_type,
            "family": spec.family,
            "params_total": spec.params_total,
            "params_active": spec.params_active,
            "weights_bytes": weights_total,
            "weights_dtype": wdtype,
            "num_layers": spec.num_layers,
            "layer_groups": [
                {"cache": label, "num_layers": n} for label, n in spec.layer_kind_counts().items()
            ],
            "kv_bytes_per_token": per_token,
            "mha_equivalent_bytes_per_token": mha,
            "param_parts": dict(spec.param_parts),
        },
        "rows": rows,
        "notes": notes,
    }
    if request.breakdown:
        data["breakdown"] = breakdown_rows
    title = f"KV cache of {spec.name}: " + ", ".join(human_tokens(c) for c in request.contexts)
    return Report(title=title, facts=facts, tables=tables, notes=notes, data=data)


def _attention_desc(spec: ModelSpec) -> str:
    attn = spec.attention_layers()
    if not attn:
        return "none (attention-free)"
    a = attn[0]
    if a.kind == "mla":
        return (
            f"MLA, {a.num_q_heads} query heads, latent {a.mla_kv_lora_rank} + rope "
            f"{a.mla_rope_dim} = {a.head_dim} values per token per layer"
        )
    kind = "MHA" if a.num_kv_heads == a.num_q_heads else "MQA" if a.num_kv_heads == 1 else "GQA"
    return (
        f"{kind}, {a.num_q_heads} query heads over {a.num_kv_heads} KV heads, head_dim {a.head_dim}"
    )
