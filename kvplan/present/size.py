"""`kvplan size` in words: the model's anatomy as facts, the KV table, the per-group breakdown."""

from kvplan.plans.size import SizeResult, SizeTable
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, View, ref, rows_of, view


def attention_text(a) -> str:
    if a.layout is None:
        return "none (attention-free)"
    if a.layout == "MLA":
        return (
            f"MLA, {a.num_q_heads} query heads, latent {a.mla_kv_lora_rank} + rope "
            f"{a.mla_rope_dim} = {a.head_dim} values per token per layer"
        )
    text = (
        f"{a.layout}, {a.num_q_heads} query heads over {a.num_kv_heads} KV heads, "
        f"head_dim {a.head_dim}"
    )
    for kind, kv_heads, head_dim in a.other_shapes:
        text += f"; {kind}-attention layers: {kv_heads} KV heads, head_dim {head_dim}"
    return text


def _dtype_note(row: dict) -> tuple:
    """A row in a KV dtype cites that storage format's note (kv-fp8, kv-int8, kv-ggml, ...)."""
    return (f"kv-{row['kv_dtype']}", ref("kv-ggml", dtype=row["kv_dtype"]))


def size_view(result: SizeResult) -> View:
    m, tp = result.model, result.tp
    weights_rank = m.weights_bytes / tp
    first_dtype = result.rows[0].kv_dtype
    layer_desc = ", ".join(f"{g.num_layers} × {g.cache}" for g in m.layer_groups)
    facts: list[Fact | tuple[str, str]] = [
        Fact(
            "model",
            f"{m.name} ({m.model_type}; {m.family})",
            notes=("model-path", "quant-hf-file", "variant-resolved"),
        ),
        Fact(
            "layers",
            f"{m.num_layers}: {layer_desc}",
            notes=("sliding-held", "llama4-chunked", "mtp-excluded", "state-fixed"),
        ),
        Fact("attention", attention_text(m.attention), notes=("mla-latent", "falcon-broadcast")),
        Fact(
            "parameters",
            f"{f.count(m.params_total)} total, {f.count(m.params_active)} active per token",
            notes=("vision-excluded", "vision-absent"),
            data={"params_total": m.params_total, "params_active": m.params_active},
        ),
        Fact(
            "weights",
            f"{f.gib(m.weights_bytes)} GiB ({f.gb(m.weights_bytes)} GB) in {m.weights_dtype}"
            + (f"; {f.gib(weights_rank)} GiB per GPU at TP {tp}" if tp > 1 else ""),
            notes=("weights-quantized", "weights-gguf", "tp-per-gpu"),
        ),
        Fact(
            f"KV bytes/token ({first_dtype})",
            f"{m.kv_bytes_per_token:,} B per token with every attention layer holding every token"
            + (f" (per GPU at TP {tp})" if tp > 1 else ""),
            notes=("tp-kv-replicated", "tp-mla-replicated"),
            data={"kv_bytes_per_token": m.kv_bytes_per_token},
        ),
    ]
    if m.gqa_saving:
        facts.append(
            (
                "saving vs multi-head",
                f"{m.gqa_saving:,.2f}× (MHA equivalent {m.mha_equivalent_bytes_per_token:,} B/token)",
            )
        )
    if m.state_bytes_per_sequence:
        state = m.state_bytes_per_sequence
        facts.append(
            Fact(
                "state per sequence",
                f"{state:,} B ({f.gib(state)} GiB), any context",
                notes=("state-fixed",),
                data={"state_bytes_per_sequence": state},
            )
        )
    columns = [
        Column("context_len", "context (tokens)", f.integer),
        Column("batch_size", "batch", f.integer),
        Column("kv_dtype", "KV dtype", f.text, "left"),
        Column("kv_bytes_per_sequence", "KV/seq (GiB)", f.gib),
        Column("kv_bytes_per_sequence", "KV/seq (GB)", f.gb, priority=3),
        Column("kv_bytes_total", "KV batch (GiB)", f.gib),
        Column("kv_bytes_total", "KV batch (GB)", f.gb, priority=3),
        Column("weights_bytes", "weights (GiB)", f.gib, priority=2),
        Column("kv_to_weights", "KV ÷ weights", f.ratio),
        Column("batch_equal_memory", "B_mem (seqs)", f.fixed(1), priority=1),
    ]
    if any(row.beyond_positions for row in result.rows):
        columns.append(
            Column("beyond_positions", "!", lambda v: "! past max positions" if v else "", "left")
        )
    tables = [Table("", columns, rows_of(result.rows), row_notes=_dtype_note)]
    if result.breakdown is not None:
        tables.append(
            Table(
                "per layer group",
                [
                    Column("context_len", "context (tokens)", f.integer),
                    Column("kv_dtype", "KV dtype", f.text, "left"),
                    Column("group", "cache", f.text, "left"),
                    Column("num_layers", "layers", f.integer),
                    Column("num_kv_heads", "KV heads/GPU", f.integer, priority=2),
                    Column("head_dim", "head_dim", f.integer, priority=2),
                    Column("bytes_per_token_per_layer", "B/token/layer", f.integer, priority=1),
                    Column("tokens_held", "tokens held", f.integer),
                    Column("bytes_per_sequence", "bytes/seq", f.integer),
                ],
                rows_of(result.breakdown),
                row_notes=_dtype_note,
            )
        )
    title = f"KV cache of {m.name}: " + ", ".join(f.tokens(c) for c in result.contexts)
    return view(title, result, facts, tables)


def size_table_view(table: SizeTable) -> View:
    """`kvplan size A B C`: one row per model, context, batch and KV dtype, for a design doc;
    each row cites its own model's notes."""
    by_model = {
        result.model.name: tuple(ref(n.id, **dict(n.values)) for n in result.notes)
        for result in table.models
    }

    def model_notes(row: dict) -> tuple:
        return by_model.get(row["model"], ()) + _dtype_note(row)

    columns = [
        Column("model", "model", f.text, "left"),
        Column("params_total", "params", f.count, priority=2),
        Column("context_len", "context (tokens)", f.integer),
        Column("batch_size", "batch", f.integer),
        Column("kv_dtype", "KV dtype", f.text, "left"),
        Column("kv_bytes_per_token", "B/token (every layer)", f.integer, priority=1),
        Column("kv_bytes_per_sequence", "KV/seq (GiB)", f.gib, answer=True),
        Column("kv_bytes_per_sequence", "KV/seq (GB)", f.gb, priority=4),
        Column("kv_bytes_total", "KV batch (GiB)", f.gib),
        Column("weights_bytes", "weights (GiB)", f.gib, priority=3),
        Column("kv_to_weights", "KV ÷ weights", f.ratio, priority=1),
    ]
    if any(row.beyond_positions for row in table.rows):
        columns.append(
            Column("beyond_positions", "!", lambda v: "! past max positions" if v else "", "left")
        )
    tp = table.models[0].tp
    contexts = table.models[0].contexts
    title = (
        f"KV cache of {len(table.models)} models: "
        + ", ".join(f.tokens(c) for c in contexts)
        + (f" (per GPU at TP {tp})" if tp > 1 else "")
    )
    return view(title, table, (), [Table("", columns, rows_of(table.rows), row_notes=model_notes)])
