"""Weight bytes for a weights dtype, from the parameter parts.

Quantized formats apply to the linear layers a checkpoint quantizes (by default attention, MLP,
experts, mixers; a config's ignore list narrows it); embeddings, lm_head, norms and routers stay
in the model dtype, as real quantized checkpoints keep them. When the checkpoint's own tensor
headers were read (kvplan.inputs.checkpoint), their bytes are the weights, exactly.
"""

from kvplan.anatomy.model import KEPT, QUANTIZABLE_PARTS, ModelSpec, kept_with
from kvplan.dtypes import ELEMENT_BYTES, WEIGHT_DTYPE_HELP, WeightFormat, weight_format
from kvplan.errors import KvplanError
from kvplan.notes import Note, note


def resolve_weights_dtype(spec: ModelSpec, name: str) -> tuple[str, list[Note]]:
    """'auto' follows the checkpoint: its tensor headers when read, else its quantization_config,
    else its torch_dtype. An explicit name is validated (plain or quantized format). Kept per
    spec and name: a comparison of GPU kinds resolves it for every layout it prices."""
    dtype, notes = kept_with(
        _RESOLVED, spec, (str(name),), lambda: _resolve_weights_dtype(spec, name)
    )
    return dtype, list(notes)


_RESOLVED: dict[tuple, tuple] = {}


def _resolve_weights_dtype(spec: ModelSpec, name: str) -> tuple[str, tuple[Note, ...]]:
    key = str(name).strip().lower()
    notes: list[Note] = []
    if key == "auto":
        if spec.stored is not None:
            notes += _stored_notes(spec)
            return "checkpoint", tuple(notes)
        quant = spec.weights_quantization
        if quant:
            notes.append(_quant_note(quant, spec))
            return quant, tuple(notes)
        return spec.dtype, tuple(notes)
    if key == "checkpoint":
        if spec.stored is None:
            raise KvplanError(
                "--weights-dtype checkpoint needs the model file's tensor headers (a GGUF file, "
                "or a folder or Hub repository with safetensors)"
            )
        notes += _stored_notes(spec)
        return key, tuple(notes)
    fmt = weight_format(key) if key not in ("fp32", "bf16", "fp16") else None
    if key not in ELEMENT_BYTES and fmt is None:
        raise KvplanError(f"unknown weights dtype {key[:40]!r}; choose from {WEIGHT_DTYPE_HELP}")
    if fmt is not None:
        notes.append(_quant_note(key, spec))
    return key, tuple(notes)


def _stored_notes(spec: ModelSpec) -> list[Note]:
    """The checkpoint's bytes as the weights; a safetensors checkpoint more than 1% off the
    config's own count (in its quantization_config's format, else its torch_dtype) says so."""
    stored = spec.stored
    assert stored is not None, "a note on stored weights for a model that has them"
    if stored.file_type:  # a GGUF
        return [note("weights-gguf", file_type=stored.file_type, weights_bytes=stored.total_bytes)]
    notes = [note("weights-stored", weights_bytes=stored.total_bytes)]
    config_dtype = spec.weights_quantization or spec.dtype
    config_bytes = weight_bytes(spec, config_dtype)
    if config_bytes and abs(stored.text_bytes - config_bytes) > 0.01 * config_bytes:
        notes.append(
            note(
                "checkpoint-differs",
                checkpoint_bytes=stored.text_bytes,
                config_bytes=config_bytes,
                config_dtype=config_dtype,
            )
        )
    return notes


def _scope(spec: ModelSpec, fmt: WeightFormat) -> frozenset[str]:
    if spec.quantized_parts is not None and fmt.name == spec.weights_quantization:
        return frozenset(spec.quantized_parts)
    return frozenset({"experts"}) if fmt.experts_only else frozenset(QUANTIZABLE_PARTS)


def quantized_parts(spec: ModelSpec, dtype: str) -> frozenset[str]:
    """The parameter parts (ModelSpec.param_parts keys, with parameters) held in the quantized
    format `dtype` (empty for a plain float format or the checkpoint's own)."""
    fmt = None if dtype == "checkpoint" else weight_format(dtype)
    if fmt is None:
        return frozenset()
    return _scope(spec, fmt) & {part for part, count in spec.param_parts.items() if count}


def _quant_note(dtype: str, spec: ModelSpec) -> Note:
    fmt = weight_format(dtype)
    assert fmt is not None, f"{dtype} is a quantized format"
    scope = sorted(_scope(spec, fmt) & set(spec.param_parts))
    return note(
        "weights-quantized",
        dtype=dtype,
        scope=", ".join(scope) or "no part",
        bytes_per_param=fmt.bytes_per_param,
        rest_dtype=spec.dtype,
    )


def weight_bytes(spec: ModelSpec, dtype: str) -> int:
    """Bytes of the language model's weights in `dtype` (a name from resolve_weights_dtype).
    Kept per spec and dtype (with the spec, so that its id is not reused): `capacity --gpu all`
    asks it of every layout of every GPU kind."""
    key = (id(spec), dtype)
    kept = _WEIGHT_BYTES.get(key)
    if kept is not None and kept[0] is spec:
        return kept[1]
    found = _weight_bytes(spec, dtype)
    if len(_WEIGHT_BYTES) >= KEPT:
        del _WEIGHT_BYTES[next(iter(_WEIGHT_BYTES))]
    _WEIGHT_BYTES[key] = (spec, found)
    return found


_WEIGHT_BYTES: dict[tuple, tuple] = {}


def _weight_bytes(spec: ModelSpec, dtype: str) -> int:
    if dtype == "checkpoint":
        assert spec.stored is not None, "'checkpoint' is offered only with stored weights"
        return spec.stored.total_bytes
    if dtype in ELEMENT_BYTES and dtype != "fp8":
        return spec.params_total * ELEMENT_BYTES[dtype]
    total = sum(
        count * part_bytes_per_param(spec, dtype, part) for part, count in spec.param_parts.items()
    )
    return int(round(total))


def weight_bytes_read_per_decode_step(spec: ModelSpec, dtype: str, batch_size: int) -> float:
    """Weight bytes one decode step streams: every weight, except that the input-embedding table
    is a lookup of `batch_size` rows (a tied table: read whole as the head, and its rows again
    by the lookup) and MoE layers read only the experts the batch touches
    (expected count under uniform routing)."""
    read = float(weight_bytes(spec, dtype))
    embedding_bytes = part_bytes_per_param(spec, dtype, "embedding")
    rows = embedding_rows_read(spec, batch_size)
    read -= (spec.embedding_lookup_params - rows) * embedding_bytes
    if spec.moe is not None:
        idle = spec.moe.num_experts - spec.moe.expected_experts_touched(batch_size)
        expert_bytes = part_bytes_per_param(spec, dtype, "experts")
        read -= idle * spec.moe.params_per_expert * spec.moe.num_layers * expert_bytes
    return read


def embedding_rows_read(spec: ModelSpec, num_tokens: int) -> int:
    """Parameters of the input embedding a step of `num_tokens` gathers: one row of `hidden`
    per token, at most the whole table (vLLM's VocabParallelEmbedding and SGLang's index the
    table; llama.cpp's ggml_get_rows on token_embd). A tied table is gathered the same way: the
    head reads it whole as well, and the gather is a read of its own."""
    if not spec.param_parts.get("embedding", 0):
        return 0
    return min(num_tokens, spec.vocab_size) * spec.hidden_size


def part_bytes_per_param(spec: ModelSpec, dtype: str, part: str) -> float:
    """Bytes one parameter of `part` takes in the weights format `dtype` (scales included)."""
    if dtype == "checkpoint":
        stored = spec.stored
        assert stored is not None, "'checkpoint' is offered only with stored weights"
        if stored.part_bytes:  # the file says which tensors are which part (a GGUF)
            count = spec.param_parts.get(part, 0)
            return stored.part_bytes.get(part, 0) / count if count else 0.0
        return stored.total_bytes / spec.params_total  # the file's average
    if dtype in ELEMENT_BYTES and dtype != "fp8":
        return ELEMENT_BYTES[dtype]
    fmt = weight_format(dtype)
    assert fmt is not None, f"{dtype} is a quantized format (plain ones returned above)"
    return fmt.bytes_per_param if part in _scope(spec, fmt) else ELEMENT_BYTES[spec.dtype]


def expert_tp_padding(spec: ModelSpec, tp: int) -> float:
    """How much wider each TP rank's routed experts are than 1/tp of them: vLLM's Kimi-K3 MoE
    (vllm/models/kimi_k3/nvidia/model.py:595-604, vLLM 0.32) raises the per-rank expert width
    moe_intermediate_size / tp to min_moe_intermediate_per_partition when it falls below it,
    with TP > 1 and no expert parallelism: Kimi-K3 at TP 16, 3,072 / 16 = 192 -> 256 (x4/3);
    at TP 24, 128 -> 256 (x2). 1.0 for every other model and layout."""
    moe = spec.moe
    if moe is None or not moe.tp_min_intermediate or tp <= 1 or not moe.expert_intermediate_size:
        return 1.0
    width = moe.expert_intermediate_size // tp
    return max(1.0, moe.tp_min_intermediate / width) if width else 1.0


def weights_bytes_per_gpu(
    spec: ModelSpec, dtype: str, tp: int = 1, pp: int = 1, dp_attention: int = 1
) -> float:
    """The one rule for weights on one GPU: the language model's weights in `dtype` plus the
    vision tower (in the model dtype; engines load it), split evenly over tp x pp ranks.

    With attention data-parallel over `dp_attention` ranks (vLLM's -dp N --enable-expert-parallel
    at tp 1), each rank holds everything but the routed experts whole, and 1/N of the experts."""
    if spec.stored is not None and dtype == "checkpoint":
        vision = spec.stored.vision_bytes
    else:
        vision = spec.vision_params * ELEMENT_BYTES[spec.dtype]
    total = weight_bytes(spec, dtype) + vision
    if dp_attention > 1:
        experts = expert_weight_bytes(spec, dtype)
        return total - experts + experts / dp_attention
    padded = expert_weight_bytes(spec, dtype) * (expert_tp_padding(spec, tp) - 1)
    return (total + padded) / (tp * pp)


def expert_weight_bytes(spec: ModelSpec, dtype: str) -> float:
    """Bytes of the routed experts alone (what expert parallelism spreads over ranks)."""
    return spec.param_parts.get("experts", 0) * part_bytes_per_param(spec, dtype, "experts")


def batch_equal_memory(weights_bytes: float, kv_bytes_per_seq: float) -> float | None:
    """B_mem = weights stored / KV per sequence: the batch at which the cache's memory equals the
    weights' memory (the seed's B_equal)."""
    if kv_bytes_per_seq <= 0:
        return None
    return weights_bytes / kv_bytes_per_seq
