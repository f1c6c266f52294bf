"""Rotary-embedding tables a config implies: (positions, rotary_dim) per distinct table.

Serving engines precompute each distinct rotary table once (cos and sin halves, `rotary_dim`
values per position, in the model dtype) and keep it on every rank. The table length follows the
scaling type the way vLLM's `get_rope` builds it: linear and dynamic-NTK scaling tabulate
`max_position_embeddings x factor` positions; YaRN (and DeepSeek's variant) `original x factor`;
LongRoPE both the original and the extended range; llama3, mrope and plain RoPE
`max_position_embeddings`. Gemma-3's sliding layers use a second, unscaled table
(`rope_local_base_freq`); transformers-5 configs that key `rope_parameters` by layer type give
one table per type.
"""

from kvplan.inputs.fields import Fields

# Rope types whose table spans the configured positions times the scaling factor.
_TIMES_FACTOR = ("linear", "dynamic")
_ORIGINAL_TIMES_FACTOR = ("yarn", "deepseek_yarn")


def _table(params: dict, positions: int, rotary_dim: int) -> tuple[int, int]:
    kind = str(params.get("rope_type") or params.get("type") or "default")
    factor = params.get("factor")
    factor = float(factor) if isinstance(factor, (int, float)) and factor > 0 else 1.0
    original = params.get("original_max_position_embeddings")
    if kind in _TIMES_FACTOR:
        return int(positions * factor), rotary_dim
    if kind in _ORIGINAL_TIMES_FACTOR and isinstance(original, int) and original > 0:
        return int(original * factor), rotary_dim
    if kind == "longrope" and isinstance(original, int) and original > 0:
        return positions + original, rotary_dim  # short and long tables, concatenated
    return positions, rotary_dim


def rope_tables(
    f: Fields,
    head_dim: int,
    positions: int | None,
    mla_rope_dim: int = 0,
    has_sliding: bool = False,
    local_table: bool = False,
    uses_rope: bool = True,
) -> tuple[tuple[int, int], ...]:
    """The distinct rotary tables of the language model (empty without RoPE or positions)."""
    if not uses_rope or not positions:
        return ()
    params = f.raw("rope_parameters", "rope_scaling") or {}
    if not isinstance(params, dict):
        params = {}
    partial = params.get("partial_rotary_factor") or f.float("partial_rotary_factor", 1.0)
    rotary_dim = mla_rope_dim or int(head_dim * float(partial))
    if not rotary_dim:
        return ()
    per_type = {k: v for k, v in params.items() if isinstance(v, dict)}
    if per_type:  # transformers 5: {"full_attention": {...}, "sliding_attention": {...}}
        tables = []
        for sub in per_type.values():
            factor = sub.get("partial_rotary_factor") or partial
            tables.append(_table(sub, positions, mla_rope_dim or int(head_dim * float(factor))))
        return tuple(tables)
    tables = [_table(params, positions, rotary_dim)]
    if has_sliding and (local_table or f.has("rope_local_base_freq")):  # Gemma-3, unscaled
        tables.append((positions, rotary_dim))
    return tuple(tables)
