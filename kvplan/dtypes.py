"""Storage formats: bytes per element, and the byte cost of a quantized head-vector with its scales.
The one home of every byte-per-element table in kvplan.

A "head-vector" is the `width` values of one K (or V) head for one token, or one MLA latent.
Quantized formats carry their scales explicitly so the byte count is what an engine stores.
"""

import math
import re
from functools import lru_cache

from kvplan.errors import KvplanError
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

# Plain formats: bytes per element.
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# llama.cpp's cache types (-ctk/-ctv, common/arg.cpp kv_cache_types): the K and V rows are stored
# in ggml's block formats below, scales (and minimums) included.
LLAMA_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
GGML_CACHE_QUANTS = ("q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

KV_DTYPES = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4", "nvfp4", *GGML_CACHE_QUANTS)
# "checkpoint": the weights as the model file stores them (safetensors headers, a GGUF's tensor
# table): exact bytes, each tensor in its own type with its scales
WEIGHT_DTYPE_HELP = (
    "auto (from the checkpoint or config), bf16, fp16, fp32, fp8, int8, int4, int4-gN[-sym], "
    "nvfp4, mxfp4, checkpoint"
)

INT8_SCALE_BYTES = 4  # one fp32 scale per token per head (vLLM int8_per_token_head)
SUB_BYTE_SCALE_ZERO_BYTES = 4  # fp16 scale + fp16 zero-point per group (KIVI-style asymmetric)
# Bits per value of the sub-byte integer formats. int3 and int2 are what-if formats (kvplan whatif),
# not engine dtypes: --kv-dtype offers int4 at most.
SUB_BYTE_BITS = {"int4": 4, "int3": 3, "int2": 2}
NVFP4_BLOCK = 16  # values per fp8 scale in an nvfp4 cache

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
_INT = r"int(?P<bits>[248])(?:-g(?P<group>\d{1,5}))?(?P<sym>-sym)?"  # compiled on use


@lru_cache(maxsize=64)
def weight_format(name: str) -> WeightFormat | None:
    """The storage of a quantized weights dtype name; None for a plain dtype (fp32, bf16, fp16).
    Kept (a pure function of the name): weight bytes ask it of every layout priced.

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
    match = re.fullmatch(_INT, key)
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


class GgmlType(NamedTuple):
    """One ggml storage type: `block_size` values stored in `block_bytes` bytes, the block's
    scale (and minimum) fields included."""

    name: str
    type_id: int
    block_size: int
    block_bytes: int

    @property
    def bits_per_value(self) -> float:
        return 8 * self.block_bytes / self.block_size


# ggml/src/ggml.c type_traits (blck_size, sizeof block) = gguf-py GGML_QUANT_SIZES (QK_K = 256).
# Examples: q8_0 = an fp16 scale + 32 int8 = 34 B; q4_1 = fp16 scale + fp16 min + 16 B = 20 B;
# q4_K = 2 fp16 + 12 B of 6-bit sub-block scales/mins + 128 B = 144 B per 256 values.
GGML_TYPES: dict[str, GgmlType] = {
    t.name: t
    for t in (
        GgmlType("f32", 0, 1, 4),
        GgmlType("f16", 1, 1, 2),
        GgmlType("q4_0", 2, 32, 18),
        GgmlType("q4_1", 3, 32, 20),
        GgmlType("q5_0", 6, 32, 22),
        GgmlType("q5_1", 7, 32, 24),
        GgmlType("q8_0", 8, 32, 34),
        GgmlType("q8_1", 9, 32, 40),
        GgmlType("q2_K", 10, 256, 84),
        GgmlType("q3_K", 11, 256, 110),
        GgmlType("q4_K", 12, 256, 144),
        GgmlType("q5_K", 13, 256, 176),
        GgmlType("q6_K", 14, 256, 210),
        GgmlType("q8_K", 15, 256, 292),
        GgmlType("iq2_xxs", 16, 256, 66),
        GgmlType("iq2_xs", 17, 256, 74),
        GgmlType("iq3_xxs", 18, 256, 98),
        GgmlType("iq1_s", 19, 256, 50),
        GgmlType("iq4_nl", 20, 32, 18),
        GgmlType("iq3_s", 21, 256, 110),
        GgmlType("iq2_s", 22, 256, 82),
        GgmlType("iq4_xs", 23, 256, 136),
        GgmlType("i8", 24, 1, 1),
        GgmlType("i16", 25, 1, 2),
        GgmlType("i32", 26, 1, 4),
        GgmlType("i64", 27, 1, 8),
        GgmlType("f64", 28, 1, 8),
        GgmlType("iq1_m", 29, 256, 56),
        GgmlType("bf16", 30, 1, 2),
        GgmlType("tq1_0", 34, 256, 54),
        GgmlType("tq2_0", 35, 256, 66),
        GgmlType("mxfp4", 39, 32, 17),
        GgmlType("nvfp4", 40, 64, 36),
        GgmlType("q1_0", 41, 128, 18),
        GgmlType("q2_0", 42, 64, 18),
    )
}
GGML_TYPE_BY_ID = {t.type_id: t for t in GGML_TYPES.values()}


def ggml_type(name: str) -> GgmlType:
    """A ggml type by name, case-insensitive (q4_k and Q4_K are the same type)."""
    key = str(name).strip().lower()
    for t in GGML_TYPES.values():
        if t.name.lower() == key:
            return t
    raise KvplanError(f"{str(name)[:40]!r} is not a ggml type ({', '.join(GGML_TYPES)})")


def ggml_row_bytes(type_name: str, num_values: int) -> int:
    """ggml_row_size: bytes of `num_values` values in one row, whole blocks only:
    n / block_size * block_bytes (q8_0: 4096 values -> 128 blocks x 34 B = 4,352 B)."""
    t = ggml_type(type_name)
    if num_values % t.block_size:
        raise KvplanError(
            f"a row of {num_values} values is not a whole number of {t.name} blocks "
            f"({t.block_size} values each)"
        )
    return num_values // t.block_size * t.block_bytes


def ggml_tensor_bytes(type_id: int, num_values: int) -> int:
    """Bytes of a tensor of `num_values` values stored as ggml type `type_id` (a GGUF tensor
    table's type field)."""
    t = GGML_TYPE_BY_ID.get(type_id)
    if t is None:
        raise KvplanError(f"ggml type id {type_id} is not one kvplan knows")
    return ggml_row_bytes(t.name, num_values)


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
        if self.name == "nvfp4":  # packed fp4 plus one fp8 scale per 16 values (vLLM's layout)
            return width // 2 + width // NVFP4_BLOCK
        if self.name in SUB_BYTE_BITS:
            groups = math.ceil(width / self.group_size)
            packed = math.ceil(width * SUB_BYTE_BITS[self.name] / 8)
            return packed + groups * SUB_BYTE_SCALE_ZERO_BYTES
        if self.name in GGML_CACHE_QUANTS:
            return ggml_row_bytes(self.name, width)
        raise KvplanError(f"unknown KV dtype {self.name!r}")

    @property
    def full_precision(self) -> "KvFormat":
        """The format of the tokens kept in full precision."""
        return KvFormat(self.full_precision_dtype)

    @property
    def note(self) -> Note | None:
        """What this format's byte count assumes (None for plain formats)."""
        if self.name == "fp8":
            return note("kv-fp8")
        if self.name == "int8":
            return note("kv-int8")
        if self.name == "nvfp4":
            return note("kv-nvfp4")
        if self.name == "int4" and not self.full_precision_tokens:
            return note("kv-int4", group_size=self.group_size)
        if self.name in GGML_CACHE_QUANTS:
            t = GGML_TYPES[self.name]
            return note(
                "kv-ggml",
                dtype=self.name,
                block_size=t.block_size,
                block_bytes=t.block_bytes,
            )
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


@lru_cache(maxsize=64)
def resolve_kv_format(name: str, model_dtype: str, group_size: int = 32) -> KvFormat:
    """'auto' -> the model dtype; validates the name and the int4 group size. Kept (a pure
    function of its arguments): a comparison of GPU kinds asks it of every layout."""
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
