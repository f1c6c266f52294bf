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

from kvplan.errors import KvplanError
from kvplan.inputs.fields import MAX_DIM, Fields, finite_number, shown

# Rope types whose table spans the configured positions times the scaling factor.
_TIMES_FACTOR = ("linear", "dynamic")
_ORIGINAL_TIMES_FACTOR = ("yarn", "deepseek_yarn")


MIN_FACTOR = 1.0  # transformers' rope validation: a scaling factor is a float >= 1


def rope_field(f: Fields) -> str:
    """The key the rope parameters sit under (transformers 5 renamed rope_scaling)."""
    return "rope_parameters" if f.data.get("rope_parameters") is not None else "rope_scaling"


def rope_factor(params: dict, field: str, source: str) -> float | None:
    """A rope parameter set's `factor`: None when not stated, else a finite number of at least 1
    (transformers refuses a smaller one; 1e-300 would shrink the positions to none, silently)."""
    factor = params.get("factor")
    if factor is None:
        return None
    if not finite_number(factor) or not factor >= MIN_FACTOR:
        raise KvplanError(
            f"{source}: {field}.factor must be a number from {MIN_FACTOR:g} up (the positions it "
            f"gives at most {MAX_DIM:,}), got {shown(factor)}"
        )
    return float(factor)


def _table(
    params: dict, positions: int, rotary_dim: int, source: str, field: str = "rope_scaling"
) -> tuple[int, int]:
    kind = str(params.get("rope_type") or params.get("type") or "default")
    factor = rope_factor(params, field, source)
    factor = 1.0 if factor is None else factor
    original = params.get("original_max_position_embeddings")
    length: float = positions  # a factor makes it a float; int() below
    if kind in _TIMES_FACTOR:
        length = positions * factor
    elif kind in _ORIGINAL_TIMES_FACTOR and isinstance(original, int) and original > 0:
        length = original * factor
    elif kind == "longrope" and isinstance(original, int) and original > 0:
        length = positions + original  # short and long tables, concatenated
    if not length <= MAX_DIM:  # an absurd factor or original length (inf, 1e308)
        raise KvplanError(
            f"{source}: rope scaling ({kind}, factor {factor:.4g}) gives {length:.4g} positions, "
            f"over {MAX_DIM:,}"
        )
    return int(length), rotary_dim


def _rotary_dim(head_dim: int, partial, source: str) -> int:
    """`head_dim x partial_rotary_factor`, the factor a fraction in [0, 1]."""
    if not finite_number(partial) or not 0 <= partial <= 1:
        raise KvplanError(
            f"{source}: partial_rotary_factor must be in [0, 1], got {shown(partial)}"
        )
    return int(head_dim * float(partial))


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
    rotary_dim = mla_rope_dim or _rotary_dim(head_dim, partial, f.source)
    if not rotary_dim:
        return ()
    per_type = {k: v for k, v in params.items() if isinstance(v, dict)}
    if per_type:  # transformers 5: {"full_attention": {...}, "sliding_attention": {...}}
        tables = []
        for key, sub in per_type.items():
            factor = sub.get("partial_rotary_factor") or partial
            dim = mla_rope_dim or _rotary_dim(head_dim, factor, f.source)
            tables.append(_table(sub, positions, dim, f.source, f"{rope_field(f)}.{key}"))
        return tuple(tables)
    tables = [_table(params, positions, rotary_dim, f.source, rope_field(f))]
    if has_sliding and (local_table or f.has("rope_local_base_freq")):  # Gemma-3, unscaled
        tables.append((positions, rotary_dim))
    return tuple(tables)
