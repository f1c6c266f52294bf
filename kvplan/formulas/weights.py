"""Weight bytes for a weights dtype, from the parameter parts.

Quantized formats apply to the linear layers (attention, MLP, experts, mixers); embeddings,
lm_head, norms and routers stay in the model dtype, as real quantized checkpoints keep them.
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import ELEMENT_BYTES, WEIGHT_DTYPES
from kvplan.notes import Note, note

QUANTIZABLE_PARTS = ("attention", "mlp", "experts", "shared_experts", "mixer", "expert_projections")

# Bytes per parameter of each quantized weight format, scales included.
QUANT_BYTES_PER_PARAM = {
    "fp8": 1 + 4 / (128 * 128),  # one fp32 scale per 128x128 block (DeepSeek-V3 style)
    "int8": 1.0,  # per-output-channel scales are < 0.1% and not counted
    "int4": 0.5 + 4 / 128,  # fp16 scale + fp16 zero per group of 128 (GPTQ/AWQ style)
    "mxfp4": 0.5 + 1 / 32,  # one e8m0 scale byte per 32 values (OCP MX)
}


def resolve_weights_dtype(spec: ModelSpec, name: str) -> tuple[str, list[Note]]:
    """'auto' follows the config: its quantization_config, else its torch_dtype."""
    key = str(name).lower()
    if key not in WEIGHT_DTYPES:
        raise KvplanError(
            f"unknown weights dtype {str(name)[:40]!r}; choose from {', '.join(WEIGHT_DTYPES)}"
        )
    notes = []
    if key == "gguf" or (key == "auto" and spec.stored is not None):
        if spec.stored is None:
            raise KvplanError("--weights-dtype gguf needs a GGUF file as the model")
        notes.append(
            note(
                "weights-gguf",
                file_type=spec.stored.file_type,
                weights_bytes=spec.stored.total_bytes,
            )
        )
        return "gguf", notes
    if key == "auto":
        quant = spec.weights_quantization
        if quant in ("fp8", "mxfp4"):
            notes.append(_quant_note(quant, spec))
            return quant, notes
        if quant:
            notes.append(note("weights-quant-unknown", method=quant, dtype=spec.dtype))
        return spec.dtype, notes
    if key in QUANT_BYTES_PER_PARAM:
        notes.append(_quant_note(key, spec))
    return key, notes


def _quant_note(dtype: str, spec: ModelSpec) -> Note:
    return note(
        "weights-quantized",
        dtype=dtype,
        scope="routed experts" if dtype == "mxfp4" else "linear layers",
        bytes_per_param=QUANT_BYTES_PER_PARAM[dtype],
        rest_dtype=spec.dtype,
    )


def weight_bytes(spec: ModelSpec, dtype: str) -> int:
    """Bytes of all weights in `dtype` (a resolved name from resolve_weights_dtype); "gguf" is
    the file's own bytes, each tensor in its ggml type with its block scales."""
    if dtype == "gguf":
        return spec.stored.total_bytes
    if dtype in ELEMENT_BYTES:
        return spec.params_total * ELEMENT_BYTES[dtype]
    total = sum(
        count * _part_bytes_per_param(spec, dtype, part) for part, count in spec.param_parts.items()
    )
    return int(round(total))


def weight_bytes_read_per_decode_step(spec: ModelSpec, dtype: str, batch_size: int) -> float:
    """Weight bytes one decode step streams: every weight, except that the input-embedding table
    is a lookup of `batch_size` rows and MoE layers read only the experts the batch touches
    (expected count under uniform routing)."""
    read = float(weight_bytes(spec, dtype))
    embedding_bytes = _part_bytes_per_param(spec, dtype, "embedding")
    rows = (
        min(batch_size, spec.vocab_size) * spec.hidden_size if spec.embedding_lookup_params else 0
    )
    read -= (spec.embedding_lookup_params - rows) * embedding_bytes
    if spec.moe is not None:
        idle = spec.moe.num_experts - spec.moe.expected_experts_touched(batch_size)
        expert_bytes = _part_bytes_per_param(spec, dtype, "experts")
        read -= idle * spec.moe.params_per_expert * spec.moe.num_layers * expert_bytes
    return read


def _part_bytes_per_param(spec: ModelSpec, dtype: str, part: str) -> float:
    if dtype == "gguf":
        count = spec.param_parts.get(part, 0)
        return spec.stored.part_bytes.get(part, 0) / count if count else 0.0
    if dtype in ELEMENT_BYTES:
        return ELEMENT_BYTES[dtype]
    quantized = {"experts"} if dtype == "mxfp4" else set(QUANTIZABLE_PARTS)
    return QUANT_BYTES_PER_PARAM[dtype] if part in quantized else ELEMENT_BYTES[spec.dtype]


def weights_bytes_per_gpu(spec: ModelSpec, dtype: str, tp: int = 1, pp: int = 1) -> float:
    """The one rule for weights on one GPU: the language model's weights in `dtype` plus the
    vision tower (in the model dtype; engines load it), split evenly over tp x pp ranks."""
    vision = spec.vision_params * ELEMENT_BYTES[spec.dtype]
    return (weight_bytes(spec, dtype) + vision) / (tp * pp)
