"""Storage formats: bytes per element, and the byte cost of a quantized head-vector with its scales.

A "head-vector" is the `width` values of one K (or V) head for one token, or one MLA latent.
Quantized formats carry their scales explicitly so the byte count is what an engine stores.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from kvplan.errors import KvplanError

# Plain formats: bytes per element.
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

KV_DTYPES = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4")
WEIGHT_DTYPES = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4")

INT8_SCALE_BYTES = 4  # one fp32 scale per token per head (vLLM int8_per_token_head)
INT4_SCALE_ZERO_BYTES = 4  # fp16 scale + fp16 zero-point per group (KIVI-style asymmetric)

_TORCH_DTYPE_NAMES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
}


def model_dtype_name(torch_dtype: object) -> str:
    """Config `torch_dtype` ('bfloat16', ...) -> 'bf16'. Missing means bf16, with a note upstream."""
    if torch_dtype is None:
        return "bf16"
    name = _TORCH_DTYPE_NAMES.get(str(torch_dtype).lower())
    if name is None:
        raise KvplanError(f"config torch_dtype {torch_dtype!r} is not a float type kvplan knows")
    return name


class KvFormat(NamedTuple):
    """A KV storage format: its name, and the note describing what its byte count assumes."""

    name: str
    group_size: int = 32  # int4 only

    def head_vector_bytes(self, width: int) -> int:
        """Bytes to store `width` values of one head for one token, scales included."""
        if self.name in ELEMENT_BYTES:
            return width * ELEMENT_BYTES[self.name]
        if self.name == "int8":
            return width + INT8_SCALE_BYTES
        if self.name == "int4":
            groups = math.ceil(width / self.group_size)
            return math.ceil(width / 2) + groups * INT4_SCALE_ZERO_BYTES
        raise KvplanError(f"unknown KV dtype {self.name!r}")

    @property
    def note(self) -> str | None:
        if self.name == "fp8":
            return "fp8 KV: e4m3 with per-tensor scales (two fp32 per layer, not counted)."
        if self.name == "int8":
            return "int8 KV: one fp32 scale per token per head for K and for V (vLLM int8_per_token_head)."
        if self.name == "int4":
            return (
                f"int4 KV: asymmetric, an fp16 scale and an fp16 zero-point per group of "
                f"{self.group_size} values (KIVI-style); no full-precision residual window counted."
            )
        return None

    @property
    def lossless(self) -> bool:
        return self.name in ("fp32", "bf16", "fp16")


def resolve_kv_format(name: str, model_dtype: str, group_size: int = 32) -> KvFormat:
    """'auto' -> the model dtype; validates the name and the int4 group size."""
    key = str(name).lower()
    if key not in KV_DTYPES:
        raise KvplanError(f"unknown KV dtype {name!r}; choose from {', '.join(KV_DTYPES)}")
    if group_size < 1 or group_size > 4096:
        raise KvplanError(f"--kv-group-size {group_size} must be between 1 and 4096")
    return KvFormat(model_dtype if key == "auto" else key, group_size)
