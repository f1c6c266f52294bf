"""Storage formats: bytes per element, and the byte cost of a quantized head-vector with its scales.
The one home of every byte-per-element table in kvplan.

A "head-vector" is the `width` values of one K (or V) head for one token, or one MLA latent.
Quantized formats carry their scales explicitly so the byte count is what an engine stores.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from kvplan.errors import KvplanError
from kvplan.notes import Note, note

# Plain formats: bytes per element.
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

KV_DTYPES = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4")
WEIGHT_DTYPES = (
    "auto",
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "fp8-tensor",
    "int8",
    "int4",
    "nvfp4",
    "mxfp4",
)
WEIGHT_DTYPE_HELP = (
    "auto (from the config), bf16, fp16, fp32, fp8, int8, int4, int4-gN[-sym], nvfp4, mxfp4"
)

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


class WeightFormat(NamedTuple):
    """How a checkpoint stores its quantized linear layers: bytes per parameter with every scale
    and zero-point, and which parts it covers by default (the rest stay in the model dtype)."""

    name: str
    bytes_per_param: float
    experts_only: bool = False  # mxfp4 (gpt-oss) quantizes the routed experts alone


FP8_BLOCK = 128  # DeepSeek-style fp8: one fp32 scale per 128 x 128 block
INT4_DEFAULT_GROUP = 128  # GPTQ/AWQ's usual group
_INT = re.compile(r"int(?P<bits>[248])(?:-g(?P<group>\d{1,5}))?(?P<sym>-sym)?")


def weight_format(name: str) -> WeightFormat | None:
    """The storage of a quantized weights dtype name; None for a plain dtype (fp32, bf16, fp16).

    fp8: 1 byte + a fp32 scale per 128x128 block; fp8-tensor: per-tensor or per-channel scales
    (< 0.1%, not counted); int{4,8}[-gN][-sym]: bits/8 + (an fp16 scale + a zero-point of `bits`
    bits unless symmetric) per group of N (128 when not given; int8 alone: per-channel scales);
    nvfp4: 0.5 + one fp8 scale per 16 values; mxfp4: 0.5 + one e8m0 scale per 32, experts only."""
    key = str(name).strip().lower()
    if key in ELEMENT_BYTES and key != "fp8":
        return None
    if key == "fp8":
        return WeightFormat(key, 1 + 4 / (FP8_BLOCK * FP8_BLOCK))
    if key == "fp8-tensor":
        return WeightFormat(key, 1.0)
    if key == "nvfp4":
        return WeightFormat(key, 0.5 + 1 / 16)
    if key == "mxfp4":
        return WeightFormat(key, 0.5 + 1 / 32, experts_only=True)
    match = _INT.fullmatch(key)
    if match:
        bits = int(match.group("bits"))
        group = match.group("group")
        if bits == 8 and group is None:
            return WeightFormat(key, 1.0)
        size = int(group) if group else INT4_DEFAULT_GROUP
        if size < 1:
            return None
        zero = 0 if match.group("sym") else bits / 8
        return WeightFormat(key, bits / 8 + (2 + zero) / size)
    raise KvplanError(f"unknown weights dtype {key[:40]!r}; choose from {WEIGHT_DTYPE_HELP}")


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


# safetensors dtype names -> bytes per element (sub-byte types as fractions). Packed formats
# (int4 in U8/I32, mxfp4 blocks) are stored in the dtype named, so numel x size is their bytes.
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
    "F4": 0.5,
}
