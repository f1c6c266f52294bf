"""Storage formats: bytes per element, and the byte cost of a quantized head-vector with its scales.
The one home of every byte-per-element table in kvplan.

A "head-vector" is the `width` values of one K (or V) head for one token, or one MLA latent.
Quantized formats carry their scales explicitly so the byte count is what an engine stores.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from kvplan.errors import KvplanError
from kvplan.notes import Note, note

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
        raise KvplanError(
            f"config torch_dtype {str(torch_dtype)[:40]!r} is not a float type kvplan knows"
        )
    return name


def element_bytes(dtype: str) -> int:
    """Bytes per element of a plain (unquantized) dtype name."""
    try:
        return ELEMENT_BYTES[dtype]
    except KeyError:
        raise KvplanError(
            f"{dtype!r} is not a plain element type ({', '.join(ELEMENT_BYTES)})"
        ) from None


class KvFormat(NamedTuple):
    """A KV storage format: its name, and the group size of int4's scales."""

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
    def note(self) -> Note | None:
        """What this format's byte count assumes (None for plain formats)."""
        if self.name == "fp8":
            return note("kv-fp8")
        if self.name == "int8":
            return note("kv-int8")
        if self.name == "int4":
            return note("kv-int4", group_size=self.group_size)
        return None


def resolve_kv_format(name: str, model_dtype: str, group_size: int = 32) -> KvFormat:
    """'auto' -> the model dtype; validates the name and the int4 group size."""
    key = str(name).strip().lower()
    if key not in KV_DTYPES:
        raise KvplanError(
            f"unknown KV dtype {str(name)[:40]!r}; choose from {', '.join(KV_DTYPES)}"
        )
    if group_size < 1 or group_size > 4096:
        raise KvplanError(f"--kv-group-size {group_size} must be between 1 and 4096")
    return KvFormat(model_dtype if key == "auto" else key, group_size)
