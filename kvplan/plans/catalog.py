"""`kvplan models`: the bundled models, each with its family, size and KV cost per token."""

from __future__ import annotations

from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_token, state_bytes_per_sequence
from kvplan.inputs.sources import bundled_models, load_bundled
from kvplan.notes import Note, note
from kvplan.record import NamedTuple


class ModelRow(NamedTuple):
    name: str
    repo_id: str | None
    family: str
    params_total: int
    params_active: int
    dtype: str
    kv_bytes_per_token: int
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
        rows.append(
            ModelRow(
                alias,
                entry.repo_ids[0] if entry.repo_ids else None,
                spec.family,
                spec.params_total,
                spec.params_active,
                spec.dtype,
                kv_bytes_per_token(spec, fmt),
                state_bytes_per_sequence(spec) or None,
            )
        )
    return ModelsResult(rows, (note("models-kv-per-token"),))
