"""The longest request an engine starts with: the limit vLLM and SGLang derive from the config,
and their refusal of a longer one.

vLLM (config/model.py `_get_and_verify_max_len`): the smallest of the length keys the config
states, `model_max_length` instead where the config has one (Cohere), times the rope scaling
factor (YaRN: `original_max_position_embeddings x factor`; llama3, LongRoPE and Gemma 3 are
already scaled); a longer --max-model-len is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or
it is within the config's `model_max_length`). With no length key at all vLLM takes the user's
--max-model-len, and without one 2,048 (with a warning).

SGLang (`get_context_length`): the first of its keys the config states, times the rope factor
(1 when the scaling states an original length or is llama3), 2,048 without any; a longer
--context-length is refused unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
"""

from __future__ import annotations

import math

from kvplan.anatomy.model import ModelSpec, PositionKeys
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.build import ENGINE_LENGTH_KEYS
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

# vLLM's own list, in its order: the one the builder reads the config with (ModelSpec.position_keys)
VLLM_KEYS = ENGINE_LENGTH_KEYS
VLLM_SCALED = ("su", "longrope", "llama3")  # rope types whose length is already the scaled one
SGLANG_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
# vLLM's (_get_and_verify_max_len, no --max-model-len) and SGLang's (get_context_length) length
# for a config with none of their keys
NO_KEY_DEFAULT = 2048
SGLANG_DEFAULT = NO_KEY_DEFAULT
OVERRIDE = {
    "vllm": ("vLLM", "--max-model-len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
    "sglang": ("SGLang", "--context-length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"),
}
ALLOW_FLAG = "--allow-long-max-model-len"  # kvplan's spelling of either override


class EngineMaxLen(NamedTuple):
    tokens: int | None  # None: the engine derives none and takes the user's
    key: str  # the config key it comes from, with the rope scaling applied ("... x rope 8")
    # vLLM: a --max-model-len up to the config's model_max_length is let through
    allowed_up_to: int | None = None


def _keys(spec: ModelSpec) -> PositionKeys:
    if spec.positions is not None:
        return spec.positions
    lengths: tuple[tuple[str, int], ...] = ()
    if spec.max_position_embeddings:
        lengths = (("max_position_embeddings", spec.max_position_embeddings),)
    return PositionKeys(lengths)


def vllm_max_len(spec: ModelSpec) -> EngineMaxLen:
    """vLLM's derived max_model_len for this config."""
    keys = _keys(spec)
    lengths = dict(keys.lengths)
    derived, key = math.inf, ""
    for name in VLLM_KEYS:
        if name in lengths and lengths[name] < derived:
            derived, key = lengths[name], name
    model_max_length = lengths.get("model_max_length")
    if model_max_length:
        derived, key = model_max_length, "model_max_length"
    if derived == math.inf:
        return EngineMaxLen(None, "")
    if keys.rope and "gemma3" not in spec.model_type:
        factor = 1.0
        for kind, rope_factor, original in keys.rope:
            if kind not in VLLM_SCALED:
                factor = rope_factor if rope_factor is not None else factor
                if kind == "yarn" and original is not None:
                    derived, key = original, "original_max_position_embeddings"
        if factor != 1.0:
            derived, key = derived * factor, f"{key} x rope factor {factor:g}"
    return EngineMaxLen(int(derived), key, model_max_length)


def sglang_max_len(spec: ModelSpec) -> EngineMaxLen:
    """SGLang's derived context_length for this config."""
    keys = _keys(spec)
    lengths = dict(keys.lengths)
    factor = 1.0
    if keys.rope and not keys.rope_nested:
        kind, rope_factor, original = keys.rope[0]
        if rope_factor is not None and original is None and kind != "llama3":
            factor = rope_factor
    for name in SGLANG_KEYS:
        if name in lengths:
            scaled = f"{name} x rope factor {factor:g}" if factor != 1.0 else name
            return EngineMaxLen(int(lengths[name] * factor), scaled)
    return EngineMaxLen(SGLANG_DEFAULT, "SGLang's default without a length key")


def engine_max_len(spec: ModelSpec, engine: str) -> EngineMaxLen:
    return sglang_max_len(spec) if engine == "sglang" else vllm_max_len(spec)


def default_max_model_len(spec: ModelSpec, engine: str, default: int) -> int:
    """kvplan's default request length (8k, the model's positions), at most the engine's limit."""
    limit = engine_max_len(spec, engine).tokens
    return min(default, limit) if limit else default


def check_max_model_len(
    spec: ModelSpec,
    engine: str,
    max_model_len: int,
    allow: bool,
    flag: str | None = None,
    allow_flag: str | None = ALLOW_FLAG,
) -> Note | None:
    """None when the engine starts with this length; past its limit a one-line refusal, as the
    engine refuses, or with `allow` (the engine's override variable set) a note."""
    limit = engine_max_len(spec, engine)
    if limit.tokens is None or max_model_len <= limit.tokens:
        return None
    if limit.allowed_up_to is not None and max_model_len <= limit.allowed_up_to:
        return None
    name, engine_flag, variable = OVERRIDE[engine]
    flag = flag or engine_flag
    if allow:
        return note(
            "engine-long-max-model-len",
            engine=name,
            max_model_len=max_model_len,
            limit=limit.tokens,
            key=limit.key,
            variable=variable,
        )
    hint = f" (kvplan: {allow_flag})" if allow_flag else ""
    raise KvplanError(
        f"{flag} {max_model_len:,} is over the {limit.tokens:,} tokens {name} derives from the "
        f"config ({limit.key}): {name} refuses to start unless {variable}{hint}"
    )
