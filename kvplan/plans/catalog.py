"""`kvplan models`: the bundled models, each with its family, size and KV cost per token (every
layer holding every token, and averaged over a 128k sequence, windows held)."""

from __future__ import annotations

from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence, kv_bytes_per_token, state_bytes_per_sequence
from kvplan.inputs.sources import bundled_models, load_bundled
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

LONG_CONTEXT = 131072  # the long context the averaged figure is taken at (or the model's positions)


class ModelRow(NamedTuple):
    name: str
    repo_id: str | None
    family: str
    params_total: int
    params_active: int
    dtype: str
    kv_bytes_per_token: int  # every attention layer holding every token
    # KV bytes per token averaged over one sequence of long_context_len: what a long context
    # really costs where sliding-window or chunked layers hold only their window
    long_kv_bytes_per_token: float
    long_context_len: int
    state_bytes_per_sequence: int | None


class ModelsResult(NamedTuple):
    models: list[ModelRow]
    notes: tuple[Note, ...]


def models() -> ModelsResult:
    """The Python twin of `kvplan models`."""
    rows = []
    for alias, entry in bundled_models().items():
        spec = load_bundled(alias)
        fmt = KvFormat(spec.dtype)
        long = min(LONG_CONTEXT, spec.max_position_embeddings or LONG_CONTEXT)
        state = state_bytes_per_sequence(spec)
        rows.append(
            ModelRow(
                alias,
                entry.repo_ids[0] if entry.repo_ids else None,
                spec.family,
                spec.params_total,
                spec.params_active,
                spec.dtype,
                kv_bytes_per_token(spec, fmt),
                (kv_bytes_per_sequence(spec, long, fmt) - state) / long,
                long,
                state or None,
            )
        )
    return ModelsResult(rows, (note("models-kv-per-token", context_len=LONG_CONTEXT),))
