"""`kvplan size`: the cache per token, per sequence and per batch, next to the weights."""

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.kv import (
    cache_groups,
    gqa_saving_factor,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    state_bytes_per_sequence,
)
from kvplan.formulas.weights import batch_equal_memory, resolve_weights_dtype, weight_bytes
from kvplan.notes import Note, note, unique
from kvplan.plans.common import (
    AttentionSummary,
    LayerGroupCount,
    attention_summary,
    checkpoint_kv_note,
    layer_groups,
    model_notes,
)
from kvplan.record import NamedTuple

MAX_ROWS = 10_000  # a table a person can read is far smaller; this bounds the work


class SizeRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192,)
    batches: tuple[int, ...] = (1,)
    kv_dtypes: tuple[str, ...] = ("auto",)
    tp: int = 1
    weights_dtype: str = "auto"
    kv_group_size: int = 32
    breakdown: bool = False


class SizeModel(NamedTuple):
    name: str
    model_type: str
    family: str
    params_total: int
    params_active: int
    weights_bytes: int
    weights_dtype: str
    num_layers: int
    layer_groups: list[LayerGroupCount]
    kv_bytes_per_token: int  # in the first KV dtype, per rank
    mha_equivalent_bytes_per_token: int
    param_parts: dict[str, int]
    attention: AttentionSummary
    gqa_saving: float | None
    state_bytes_per_sequence: int  # per rank, any context


class SizeRow(NamedTuple):
    context_len: int
    batch_size: int
    kv_dtype: str
    tp: int
    kv_bytes_per_sequence: int
    kv_bytes_total: int
    weights_bytes: int  # per rank
    kv_to_weights: float | None
    batch_equal_memory: float | None  # B_mem: weights stored / KV per sequence
    beyond_positions: bool  # the context is past the model's max_position_embeddings


class BreakdownRow(NamedTuple):
    context_len: int
    kv_dtype: str
    group: str
    num_layers: int
    num_kv_heads: int | None
    head_dim: int | None
    bytes_per_token_per_layer: int | None
    tokens_held: int | None
    bytes_per_sequence: int


class SizeResult(NamedTuple):
    kvplan_version: str
    model: SizeModel
    tp: int
    contexts: tuple[int, ...]
    rows: list[SizeRow]
    breakdown: list[BreakdownRow] | None
    notes: tuple[Note, ...]


def size(spec: ModelSpec, request: SizeRequest) -> SizeResult:
    """The Python twin of `kvplan size`."""
    spec.check_tp(request.tp)
    if not request.contexts or not request.batches or not request.kv_dtypes:
        raise KvplanError("size needs at least one context, one batch size and one KV dtype")
    row_count = len(request.contexts) * len(request.batches) * len(request.kv_dtypes)
    if row_count > MAX_ROWS:
        raise KvplanError(
            f"{row_count:,} rows (contexts x batches x KV dtypes): at most {MAX_ROWS:,} in one table"
        )
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    weights_total = weight_bytes(spec, wdtype)
    weights_rank = weights_total / request.tp
    formats = [
        resolve_kv_format(name, spec.dtype, request.kv_group_size)
        for name in dict.fromkeys(request.kv_dtypes)
    ]
    rows: list[SizeRow] = []
    breakdown: list[BreakdownRow] = []
    notes: list[Note | None] = [*model_notes(spec, request.tp), *wnotes]
    positions = spec.max_position_embeddings
    past = [c for c in request.contexts if positions and c > positions]
    if past:
        notes.append(note("ctx-beyond-positions", context_len=max(past), positions=positions))
    for fmt in formats:
        notes.append(fmt.note)
        notes.append(checkpoint_kv_note(spec, fmt.name))
        groups = cache_groups(spec, fmt, request.tp)
        for context_len in request.contexts:
            per_seq = kv_bytes_per_sequence(spec, context_len, fmt, request.tp)
            for batch_size in request.batches:
                total = per_seq * batch_size
                rows.append(
                    SizeRow(
                        context_len,
                        batch_size,
                        fmt.name,
                        request.tp,
                        per_seq,
                        total,
                        int(round(weights_rank)),
                        total / weights_rank if weights_rank else None,
                        batch_equal_memory(weights_rank, per_seq),
                        bool(positions and context_len > positions),
                    )
                )
            if request.breakdown:
                breakdown += [
                    BreakdownRow(
                        context_len,
                        fmt.name,
                        g.label,
                        g.num_layers,
                        g.num_kv_heads or None,
                        g.head_dim or None,
                        g.bytes_per_token_per_layer or None,
                        g.tokens_held(context_len) or None,
                        g.bytes_per_sequence(context_len),
                    )
                    for g in groups
                ]
    first = formats[0]
    model = SizeModel(
        name=spec.name,
        model_type=spec.model_type,
        family=spec.family,
        params_total=spec.params_total,
        params_active=spec.params_active,
        weights_bytes=weights_total,
        weights_dtype=wdtype,
        num_layers=spec.num_layers,
        layer_groups=layer_groups(spec),
        kv_bytes_per_token=kv_bytes_per_token(spec, first, request.tp),
        mha_equivalent_bytes_per_token=spec.mha_equivalent_bytes_per_token(first),
        param_parts=dict(spec.param_parts),
        attention=attention_summary(spec),
        gqa_saving=gqa_saving_factor(spec, first),
        state_bytes_per_sequence=state_bytes_per_sequence(spec, request.tp),
    )
    return SizeResult(
        __version__,
        model,
        request.tp,
        tuple(request.contexts),
        rows,
        breakdown if request.breakdown else None,
        unique(notes),
    )


MAX_MODELS = 64  # one design-doc table; each model is read and sized in full


class ModelSizeRow(NamedTuple):
    """One row of `kvplan size A B C`: a model at one context, batch and KV dtype."""

    model: str
    params_total: int
    params_active: int
    kv_bytes_per_token: int  # every attention layer holding every token, in this row's KV dtype
    context_len: int
    batch_size: int
    kv_dtype: str
    tp: int
    kv_bytes_per_sequence: int  # windows, chunks and states as each layer holds them
    kv_bytes_total: int
    weights_bytes: int  # per rank
    kv_to_weights: float | None
    batch_equal_memory: float | None
    beyond_positions: bool


class SizeTable(NamedTuple):
    """`kvplan size` over several models: each model's full result, and one table of them all."""

    kvplan_version: str
    models: list[SizeResult]
    rows: list[ModelSizeRow]
    notes: tuple[Note, ...]


def size_table(specs: list[ModelSpec], request: SizeRequest) -> SizeTable:
    """The Python twin of `kvplan size A B C`: every model sized on the same request."""
    if not specs:
        raise KvplanError("size needs at least one model")
    if len(specs) > MAX_MODELS:
        raise KvplanError(f"{len(specs):,} models: at most {MAX_MODELS} in one table")
    if request.breakdown:
        raise KvplanError("--breakdown takes one model (its rows are that model's layer groups)")
    results = [size(spec, request) for spec in specs]
    if sum(len(r.rows) for r in results) > MAX_ROWS:
        raise KvplanError(f"over {MAX_ROWS:,} rows (models x contexts x batches x KV dtypes)")
    rows = []
    for spec, result in zip(specs, results, strict=True):
        per_token = {}
        for row in result.rows:
            if row.kv_dtype not in per_token:
                fmt = resolve_kv_format(row.kv_dtype, spec.dtype, request.kv_group_size)
                per_token[row.kv_dtype] = kv_bytes_per_token(spec, fmt, request.tp)
            rows.append(
                ModelSizeRow(
                    result.model.name,
                    result.model.params_total,
                    result.model.params_active,
                    per_token[row.kv_dtype],
                    *row,
                )
            )
    notes = unique([n for result in results for n in result.notes])
    return SizeTable(__version__, results, rows, notes)
