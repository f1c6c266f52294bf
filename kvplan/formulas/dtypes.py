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
SUB_BYTE_SCALE_ZERO_BYTES = 4  # fp16 scale + fp16 zero-point per group (KIVI-style asymmetric)
# Bits per value of the sub-byte integer formats. int3 and int2 are what-if formats (kvplan whatif),
# not engine dtypes: --kv-dtype offers int4 at most.
SUB_BYTE_BITS = {"int4": 4, "int3": 3, "int2": 2}

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
    """A KV storage format: its name, the group size of the sub-byte formats' scales, and the
    tokens per sequence (per layer) a sub-byte cache keeps in full precision: the attention sinks
    and the most recent tokens (KIVI's residual, OSCAR's BF16 sink and recent window)."""

    name: str
    group_size: int = 32  # int4, int3, int2
    full_precision_tokens: int = 0  # sink + recent tokens stored in `full_precision_dtype`
    full_precision_dtype: str = "bf16"

    def head_vector_bytes(self, width: int) -> int:
        """Bytes to store `width` values of one head for one token, scales included."""
        if self.name in ELEMENT_BYTES:
            return width * ELEMENT_BYTES[self.name]
        if self.name == "int8":
            return width + INT8_SCALE_BYTES
        if self.name in SUB_BYTE_BITS:
            groups = math.ceil(width / self.group_size)
            packed = math.ceil(width * SUB_BYTE_BITS[self.name] / 8)
            return packed + groups * SUB_BYTE_SCALE_ZERO_BYTES
        raise KvplanError(f"unknown KV dtype {self.name!r}")

    @property
    def full_precision(self) -> KvFormat:
        """The format of the tokens kept in full precision."""
        return KvFormat(self.full_precision_dtype)

    @property
    def note(self) -> Note | None:
        """What this format's byte count assumes (None for plain formats)."""
        if self.name == "fp8":
            return note("kv-fp8")
        if self.name == "int8":
            return note("kv-int8")
        if self.name == "int4" and not self.full_precision_tokens:
            return note("kv-int4", group_size=self.group_size)
        if self.name in SUB_BYTE_BITS:
            return note(
                "kv-sub-byte",
                dtype=self.name,
                bits=SUB_BYTE_BITS[self.name],
                group_size=self.group_size,
                full_precision_tokens=self.full_precision_tokens,
                full_precision_dtype=self.full_precision_dtype,
            )
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
