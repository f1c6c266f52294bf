"""GGUF files as a model input: the metadata and the tensor table, never the tensor data.

A GGUF file (llama.cpp's format) states its architecture in `general.architecture` and its
hyperparameters as `{arch}.*` keys; its tensor table gives every tensor's shape and ggml type, so
the weight bytes are exact (each type's block scales included). The cache anatomy follows
llama.cpp's own rules for the file (src/models/<arch>.cpp load_arch_hparams and
llama_model::create_memory), which is what llama.cpp allocates: where they differ from
transformers' reading of the config.json (a sliding window llama.cpp ignores, a NextN layer it
keeps, a state it stores in f32), the GGUF answer is llama.cpp's and a note says so.

A split GGUF (`name-00001-of-00003.gguf`, gguf-split) is one model: metadata from shard 1,
tensors from every shard.
"""

from __future__ import annotations

import builtins
import re
import struct
from collections import Counter
from pathlib import Path

from kvplan.anatomy.model import (
    Attention,
    CacheKind,
    Layer,
    ModelSpec,
    MoE,
    State,
    StateKind,
    StoredWeights,
)
from kvplan.dtypes import GGML_TYPE_BY_ID, ggml_tensor_bytes
from kvplan.errors import KvplanError
from kvplan.inputs.checkpoint import MAX_TENSOR_ELEMENTS
from kvplan.inputs.fields import FIELD_MAXIMUM, MAX_DIM, MAX_LAYERS
from kvplan.inputs.files import user_path
from kvplan.inputs.text import clean
from kvplan.notes import note
from kvplan.record import NamedTuple

SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
MAX_SPLITS = 65_535  # llama.cpp reads split.count as a uint16 (llama-model-loader.cpp)
MISSING_SHOWN = 3  # missing shards named in an error; the rest are counted
# Bounds checked before the reader walks anything (each walk is a Python loop). Real files: a few
# dozen keys, at most a few thousand tensors (llama.cpp stores a layer's experts as one 3-D
# tensor), arrays as long as the vocabulary (tokens, scores, merges).
MAX_KEYS = 1 << 16
MAX_GGUF_TENSORS = 1 << 16
MAX_ARRAY_LENGTH = FIELD_MAXIMUM["vocab_size"]  # the longest arrays are the vocabulary's
MAX_NAME_BYTES = 1 << 16  # GGUF_MAX_NAME is 64; a long name is still read, then refused by name
GGML_MAX_DIMS = 4  # ggml.h: gguf.cpp refuses a tensor of more dimensions
MIN_KEY_BYTES = 8 + 4 + 1  # the key's length, its type, a one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, dimension count, type, offset
# `{arch}.` keys bounded like the config fields they mirror (kvplan/inputs/fields.py); every
# other whole-number key is bounded by MAX_DIM.
KEY_MAXIMUM = {
    "block_count": MAX_LAYERS,
    "nextn_predict_layers": MAX_LAYERS,
    "attention.head_count": FIELD_MAXIMUM["num_attention_heads"],
    "attention.head_count_kv": FIELD_MAXIMUM["num_key_value_heads"],
    "vocab_size": FIELD_MAXIMUM["vocab_size"],
    "expert_count": FIELD_MAXIMUM["num_experts"],
    "expert_used_count": FIELD_MAXIMUM["num_experts_per_tok"],
}

# llama.cpp's cache rule per architecture (src/models/*.cpp, llama-model.cpp create_memory).
# Plain: every layer caches K and V (GQA/MHA), whatever the file says about windows.
PLAIN_ARCHS = frozenset(
    (
        "llama",
        "mistral3",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "phi2",
        "phi3",
        "phimoe",
        "command-r",
        "granite",
        "granitemoe",
        "glm4",
        "glm4moe",
        "minimax-m2",
        "starcoder",
        "starcoder2",
        "gemma",
        "falcon",
        "gpt2",
        "gptneox",
        "stablelm",
        "internlm2",
        "deci",
        "olmo",
        "olmoe",
        "exaone",
        "ernie4_5",
        "ernie4_5-moe",
        "smollm3",
        "seed_oss",
        "arcee",
        "apertus",
        "bailingmoe",
        "bailingmoe2",
        "dots1",
        "hunyuan-dense",
        "hunyuan-moe",
        "grok",
        "dbrx",
        "mpt",
        "bloom",
        "baichuan",
        "orion",
        "xverse",
        "codeshell",
        "nemotron",
        "minicpm",
        "chatglm",
        "jais",
        "plm",
    )
)
# Interleaved sliding-window archs: (default pattern period, default window, keep SWA only when
# the file states a window). Layer il is sliding iff il % period < period - 1
# (llama_hparams::set_swa_pattern).
SWA_ARCHS = {
    "gemma2": (2, 4096, False),
    "gemma3": (6, None, True),
    "gpt-oss": (2, None, False),
    "cohere2": (4, None, False),
    "olmo2": (4, None, True),
    "gemma4": (None, None, False),  # a per-layer pattern array
}
LLAMA4_CHUNK = 8192  # llama.cpp hard-codes Llama 4's attention chunk (src/models/llama4.cpp)
MLA_ARCHS = frozenset(("deepseek2",))
# Hybrids: which layers are recurrent, per llama.cpp's rule for each arch.
INTERVAL_HYBRIDS = frozenset(("qwen3next", "qwen35", "qwen35moe"))  # (i+1) % interval != 0
KV_ZERO_HYBRIDS = frozenset(("granitehybrid", "jamba"))  # head_count_kv(il) == 0
NEMOTRON_HYBRIDS = frozenset(("nemotron_h", "nemotron_h_moe"))  # n_head_kv == 0 and n_ff == 0
RECURRENT_ARCHS = frozenset(("mamba", "mamba2"))
NO_CACHE_ARCHS = frozenset(
    ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert")
    + ("neo-bert", "eurobert", "gemma-embedding", "t5encoder", "clip", "wavtokenizer-dec")
)
SPECIAL_CACHE_ARCHS = frozenset(
    ("deepseek32", "deepseek4", "glm-dsa", "minimax-m3", "kimi-linear", "dflash", "gemma3n")
)
MAMBA1_ARCHS = frozenset(("mamba", "jamba"))


class GgufTensor(NamedTuple):
    name: str
    shape: tuple[int, ...]  # ne0 first, as GGUF stores it (token_embd: [n_embd, n_vocab])
    type_name: str
    num_values: int
    bytes: int


class GgufModel(NamedTuple):
    paths: tuple[str, ...]
    metadata: dict[str, object]
    tensors: tuple[GgufTensor, ...]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


class ArrayLength(int):
    """An array read as its length only: strings (a tokenizer's vocabulary), or numbers past
    MAX_LAYERS (its scores and token types). kvplan reads no longer array than one value per
    layer; 2^24 scores made Python numbers took 52 s and 760 MB."""


class _Bound(ValueError):
    """A count in the file that is past kvplan's bound or past the file's end (a ValueError, so
    _read_one names it as it names the gguf package's own refusals)."""


def _reader_class():
    """GGUFReader with three changes: every count is bounded before anything is read for it (an
    array's, the keys', the tensors', a tensor's dimensions: count x smallest element size within
    what is left of the file, and under kvplan's caps), the tensor table is read without views of
    the data (a header-only or partly downloaded file still reads, and a type id newer than the
    installed package is looked up in kvplan's table), and arrays are read in one step (the stock
    reader walks a 150k-token vocabulary value by value: 12 s on a laptop core, 0.03 s this way;
    big-endian files too, which it walked value by value)."""
    import sys

    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    class HeaderReader(GGUFReader):
        def _room(self, offs: int, count: int, size: int, what: str, cap: int) -> None:
            # the count itself is never printed: it is the file's bytes (a link to another file
            # would have them read back as a number)
            if count > cap:
                raise _Bound(f"GGUF {what} over kvplan's cap of {cap:,}")
            if count * size > len(self.data) - offs:
                raise _Bound(f"truncated or corrupt GGUF: its {what} runs past its end")

        def _build_fields(self, offs, count):
            self._room(offs, int(count), MIN_KEY_BYTES, "key count", MAX_KEYS)
            return super()._build_fields(offs, count)

        def _build_tensor_info(self, offs, count):
            self._room(offs, int(count), MIN_TENSOR_INFO_BYTES, "tensor count", MAX_GGUF_TENSORS)
            return super()._build_tensor_info(offs, count)

        def _get_tensor_info_field(self, orig_offs):
            name_len = int(self._get(orig_offs, np.uint64)[0])
            self._room(orig_offs + 8, name_len, 1, "tensor name length", MAX_NAME_BYTES)
            n_dims = int(self._get(orig_offs + 8 + name_len, np.uint32)[0])
            self._room(orig_offs + 12 + name_len, n_dims, 8, "tensor dimensions", GGML_MAX_DIMS)
            return super()._get_tensor_info_field(orig_offs)

        def _get_str(self, offset):
            length = int(self._get(offset, np.uint64)[0])
            self._room(offset + 8, length, 1, "string length", len(self.data))
            return super()._get_str(offset)

        def _get_field_parts(self, orig_offs, raw_type):
            if raw_type != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            item_type = self._get(orig_offs, np.uint32)
            length = self._get(orig_offs + 4, np.uint64)
            offs, count = orig_offs + 12, int(length[0])
            try:
                kind = GGUFValueType(int(item_type[0]))
            except ValueError:
                raise _Bound(f"GGUF array of unknown type {int(item_type[0])}") from None
            if kind == GGUFValueType.ARRAY:  # llama.cpp's gguf.cpp refuses them too
                raise _Bound("GGUF array of arrays, which llama.cpp does not read")
            scalar = self.gguf_scalar_to_np.get(kind)
            size = np.dtype(scalar).itemsize if scalar is not None else 8  # a string: its length
            self._room(offs, count, size, "array length", MAX_ARRAY_LENGTH)
            if scalar is not None:
                values = self._get(offs, scalar, count)
                return 12 + int(values.nbytes), [item_type, length, values], [2], [raw_type, kind]
            swapped = self.byte_order == "S"
            big = swapped == (sys.byteorder == "little")
            unpack = struct.Struct(">Q" if big else "<Q").unpack_from
            # a memmap exports a buffer; numpy's stub says so (__buffer__) from Python 3.12 only
            buffer = memoryview(self.data)  # type: ignore[arg-type]
            end = len(self.data)
            for _ in range(count):
                if offs + 8 > end:
                    raise _Bound("truncated or corrupt GGUF: a string array runs past its end")
                offs += 8 + unpack(buffer, offs)[0]
            if offs > end:
                raise _Bound("truncated or corrupt GGUF: a string array runs past its end")
            return offs - orig_offs, [item_type, length], [], [raw_type, kind]

        def _build_tensors(self, start_offs, fields):
            self.tensor_table = [
                (
                    str(bytes(field.parts[1]), encoding="utf-8"),
                    tuple(int(d) for d in field.parts[3]),
                    int(field.parts[4][0]),
                )
                for field in fields
            ]

    return HeaderReader, GGUFValueType


def _field_value(field, value_type):
    kinds = field.types
    if not kinds:
        return None
    if kinds[0] == value_type.ARRAY:
        length = int(field.parts[4][0])
        if (len(kinds) > 1 and kinds[1] == value_type.STRING) or length > MAX_LAYERS:
            return ArrayLength(length)
        if not field.data:
            return []
        return field.parts[field.data[0]].tolist()
    if kinds[0] == value_type.STRING:
        return str(bytes(field.parts[field.data[0]]), encoding="utf-8", errors="replace")
    return field.parts[field.data[0]][0].item()


# The gguf package's messages, by a phrase of each, in kvplan's words: its own carry what it read
# (a version number, a key or tensor name), and a file that is not a GGUF at all (a link to
# another file) must never have its bytes printed.
READER_ERRORS = (
    ("magic", "it does not start with the GGUF magic"),
    ("version", "a GGUF version the reader does not handle"),
    ("alignment", "an invalid general.alignment"),
    ("field type", "a metadata value of an unknown type"),
    ("Duplicate", "a metadata key appears twice"),
    ("duplicated tensor", "a tensor name appears twice"),
)


def _unread(exc: Exception) -> str:
    """Why the gguf package could not read a file, naming no byte of it."""
    if isinstance(exc, OSError):
        return exc.strerror or exc.__class__.__name__
    if isinstance(exc, _Bound):  # kvplan's own bounds, in its own words (no byte of the file)
        return str(exc)
    message = str(exc)
    for phrase, reason in READER_ERRORS:
        if phrase in message:
            return reason
    # numpy's and Python's (a read past the end of the file) say nothing to the user
    return "truncated or corrupt GGUF: its header runs past the end of the file"


def _read_one(path: Path) -> tuple[dict, list[GgufTensor]]:
    reader_class, value_type = _reader_class()
    try:
        reader = reader_class(str(path), "r")
    except (ValueError, KeyError, IndexError, OSError, TypeError, struct.error) as exc:
        raise KvplanError(f"{path}: not a GGUF file kvplan can read ({_unread(exc)})") from None
    metadata = {
        name: _field_value(field, value_type)
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")
    }
    tensors = []
    for name, dims, type_id in reader.tensor_table:
        ggml = GGML_TYPE_BY_ID.get(type_id)
        if ggml is None:
            raise KvplanError(
                f"{path}: tensor {clean(name)[:80]} has ggml type id {type_id}, unknown to kvplan"
            )
        values = 1
        for d in dims:  # stops early: a product of huge sides is never built
            values *= d
            if values > MAX_TENSOR_ELEMENTS:
                raise KvplanError(
                    f"{path}: tensor {clean(name)[:80]} has over {MAX_TENSOR_ELEMENTS:,} elements"
                )
        tensors.append(
            GgufTensor(name, dims, ggml.name, values, ggml_tensor_bytes(type_id, values))
        )
    return metadata, tensors


def split_paths(path: Path) -> list[Path]:
    """Every shard of a split GGUF named like `path` (just `path` when it is not split)."""
    match = SPLIT_NAME.match(path.name)
    if not match:
        return [path]
    count, number = int(match.group("count")), int(match.group("no"))
    if not 1 <= number <= count <= MAX_SPLITS:
        raise KvplanError(
            f"{path}: a split GGUF is named part 1 to N of N, N at most {MAX_SPLITS:,} "
            "(llama.cpp's split.count is 16 bits)"
        )
    stem = match.group("stem")
    shards = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        shown = ", ".join(missing[:MISSING_SHOWN])
        if len(missing) > MISSING_SHOWN:
            shown = f"{len(missing):,} of {count:,} parts, e.g. {shown}"
        raise KvplanError(f"{path}: split GGUF is missing {shown}")
    return shards


def _check_parts(shards: list[Path], metas: list[dict]) -> None:
    """Each shard of a split holds the part its name says and all agree on the count, as
    llama.cpp's loader checks (split.no of every further shard, one split.count): a shard copied
    or linked over another would otherwise be counted twice."""
    count = metas[0].get("split.count")
    seen: dict[int, Path] = {}
    for index, (shard, meta) in enumerate(zip(shards, metas, strict=True)):
        number = meta.get("split.no")
        if number is None and index == 0:
            continue  # llama.cpp reads split.no of the further shards only
        if number is None:
            raise KvplanError(f"{shard}: a part of a split GGUF without split.no")
        if not isinstance(number, int) or isinstance(number, bool):
            raise KvplanError(f"{shard}: split.no is not a whole number")
        if meta.get("split.count") != count:
            raise KvplanError(
                f"{shard}: split count mismatch (its split.count differs from {shards[0].name}'s)"
            )
        if number in seen:
            raise KvplanError(
                f"{shard}: split index {number + 1:,} appears twice (also {seen[number].name}): "
                "a part of the split is duplicated"
            )
        seen[number] = shard
    for index, (shard, meta) in enumerate(zip(shards, metas, strict=True)):
        number = meta.get("split.no", index)
        if number != index:
            raise KvplanError(
                f"{shard}: holds part {number + 1:,} of the split, not part {index + 1:,} as its "
                "name says"
            )


def read_gguf(model: str) -> GgufModel:
    """A GGUF path (any shard of a split model) -> its metadata and whole tensor table."""
    path = user_path(model)
    if not path.is_file():
        raise KvplanError(f"{path}: no such GGUF file")
    shards = split_paths(path)
    read = []
    count = 0
    for shard in shards:  # the tensors over every shard bounded before the next one is read
        meta, shard_tensors = _read_one(shard)
        count += len(shard_tensors)
        if count > MAX_GGUF_TENSORS:
            raise KvplanError(f"{path}: more than {MAX_GGUF_TENSORS:,} tensors over its shards")
        read.append((meta, shard_tensors))
    metadata = read[0][0]
    if len(shards) > 1:
        _check_parts(shards, [meta for meta, _ in read])
    tensors: list[GgufTensor] = []
    held_by: dict[str, Path] = {}  # tensor name -> the shard holding it
    for shard, (_, shard_tensors) in zip(shards, read, strict=True):
        for tensor in shard_tensors:  # llama.cpp: "invalid model: tensor ... is duplicated"
            other = held_by.get(tensor.name)
            if other is not None:
                where = (
                    "appears twice in it"
                    if other == shard
                    else f"is also in {other.name}: a part of the split appears twice"
                )
                raise KvplanError(f"{shard}: tensor {clean(tensor.name)[:80]} {where}")
            held_by[tensor.name] = shard
        tensors += shard_tensors
    parts = metadata.get("split.count")
    if parts is not None and parts != len(shards) and not (parts == 0 and len(shards) == 1):
        raise KvplanError(
            f"{path}: split.count says {str(parts)[:20]} parts but the file name makes it "
            f"{len(shards)}"
        )
    declared = metadata.get("split.tensors.count")
    if isinstance(declared, int) and declared != len(tensors):
        raise KvplanError(
            f"{path}: the split declares {declared} tensors but its shards hold {len(tensors)}"
        )
    return GgufModel(tuple(str(s) for s in shards), metadata, tuple(tensors))


class Keys:
    """`{arch}.` keys of one file, with llama.cpp's defaults and per-layer arrays."""

    def __init__(self, model: GgufModel, source: str):
        self.meta, self.arch, self.source = model.metadata, model.architecture, source

    def raw(self, key: str):
        value = self.meta.get(f"{self.arch}.{key}")
        if isinstance(value, ArrayLength):
            raise KvplanError(
                f"{self.source}: {self.arch}.{key} is an array of {int(value):,} values, more "
                "than one per layer"
            )
        return value

    def has(self, key: str) -> bool:
        return self.raw(key) is not None

    def int(self, key: str, default: int | None = None, minimum: int = 0) -> int:
        value = self.raw(key)
        if value is None:
            if default is None:
                raise KvplanError(f"{self.source}: GGUF lacks {self.arch}.{key}")
            return default
        if isinstance(value, list):
            raise KvplanError(f"{self.source}: {self.arch}.{key} is an array, expected a number")
        return self._checked(key, value, minimum)

    def per_layer(
        self, key: str, n: builtins.int, default: builtins.int | None = None
    ) -> list[builtins.int]:
        """A key that is one number for every layer or an array of exactly one per layer
        (llama.cpp's get_key_or_arr refuses an array of any other length)."""
        value = self.raw(key)
        if isinstance(value, list):
            if len(value) != n:
                raise KvplanError(
                    f"{self.source}: {self.arch}.{key} has {len(value)} values for {n} layers"
                )
            return [self._checked(key, v, 0) for v in value]
        return [self.int(key, default)] * n

    def _checked(self, key: str, value, minimum: builtins.int) -> builtins.int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise KvplanError(f"{self.source}: {self.arch}.{key} must be a whole number")
        maximum = KEY_MAXIMUM.get(key, MAX_DIM)
        if not minimum <= value <= maximum:
            raise KvplanError(
                f"{self.source}: {self.arch}.{key} = {value} is out of range "
                f"({minimum} to {maximum:,})"
            )
        return value


# ---- tensors -> parameters and bytes, by part ------------------------------------------------
def tensor_part(name: str) -> tuple[int | None, str]:
    """(block index or None, kvplan's part name) of a GGUF tensor name."""
    if name.startswith("blk."):
        _, index, rest = name.split(".", 2)
        return int(index), _block_part(rest)
    base = name.rsplit(".", 1)[0]
    if base == "token_embd":
        return None, "embedding"
    if base == "output":
        return None, "lm_head"
    if base.endswith("_norm"):
        return None, "norms"
    return None, "other"


def _block_part(rest: str) -> str:
    base = rest.rsplit(".", 1)[0]
    if base.startswith("nextn."):
        return "mtp"
    if base in ("attn_norm", "ffn_norm", "attn_norm_2", "layer_output_norm") or (
        base.startswith("post_") and base.endswith("norm")
    ):
        return "norms"
    if base.startswith("ffn_") and base.endswith("_exps"):
        return "experts"
    if base.startswith("ffn_gate_inp") or base == "exp_probs_b":
        return "router"
    if base.endswith("_shexp"):
        return "shared_experts"
    if base.startswith("attn_") or base.startswith("wkv") or base.startswith("indexer"):
        return "attention"
    if base.startswith("ssm_"):
        return "mixer"
    if base.startswith("ffn_"):
        return "mlp"
    return "other"


def _file_type(meta: dict, type_bytes: Counter) -> str:
    value = meta.get("general.file_type")
    if isinstance(value, int):
        try:
            from gguf import LlamaFileType

            return LlamaFileType(value).name.replace("MOSTLY_", "").replace("ALL_", "")
        except ValueError:
            pass
    return type_bytes.most_common(1)[0][0].upper() if type_bytes else "unknown"


class TensorTotals(NamedTuple):
    params: dict[str, int]
    layer_params: list[dict[str, int]]
    stored: StoredWeights
    expert_values_per_layer: dict[int, int]


def tensor_totals(model: GgufModel, num_layers: int) -> TensorTotals:
    params: Counter = Counter()
    part_bytes: Counter = Counter()
    type_bytes: Counter = Counter()
    layer_params: list[Counter] = [Counter() for _ in range(num_layers)]
    layer_bytes = [0] * num_layers
    experts: Counter = Counter()
    for t in model.tensors:
        block, part = tensor_part(t.name)
        params[part] += t.num_values
        part_bytes[part] += t.bytes
        type_bytes[t.type_name] += t.bytes
        if block is not None and block < num_layers:
            layer_params[block][part] += t.num_values
            layer_bytes[block] += t.bytes
            if part == "experts":
                experts[block] += t.num_values
    stored = StoredWeights(
        text_bytes=sum(part_bytes.values()),
        num_tensors=len(model.tensors),
        type_bytes=dict(type_bytes.most_common()),
        source=str(model.paths[0]),
        file_type=_file_type(model.metadata, type_bytes),
        part_bytes=dict(part_bytes),
        layer_bytes=tuple(layer_bytes),
    )
    return TensorTotals(dict(params), [dict(c) for c in layer_params], stored, dict(experts))


# ---- metadata -> layers ------------------------------------------------------------------------
class LayerPlan(NamedTuple):
    attention: str | None  # full | sliding | chunked | mla | None
    recurrent: bool


def layer_plans(keys: Keys, n_all: int, n_layer: int, notes: list) -> list[LayerPlan]:
    """What each of the file's blocks caches under llama.cpp's rules for its architecture."""
    arch = keys.arch
    if arch in RECURRENT_ARCHS:
        return [LayerPlan(None, True)] * n_all
    if arch in MLA_ARCHS:
        mla = keys.int("attention.key_length_mla", 0) and keys.int("attention.value_length_mla", 0)
        if not mla:
            notes.append(note("gguf-mla-legacy"))
        return [LayerPlan("mla" if mla else "full", False)] * n_all
    if arch in INTERVAL_HYBRIDS:
        flags = keys.raw("attention.recurrent_layers")
        if isinstance(flags, list):
            recurrent = [bool(v) for v in flags[:n_all]]
        else:
            interval = keys.int("full_attention_interval", 4)
            recurrent = [i < n_layer and (i + 1) % interval != 0 for i in range(n_all)]
        return [LayerPlan(None if r else "full", r) for r in recurrent]
    if arch in KV_ZERO_HYBRIDS:
        kv = keys.per_layer("attention.head_count_kv", n_all)
        return [LayerPlan("full" if h else None, not h) for h in kv]
    if arch in NEMOTRON_HYBRIDS:
        kv = keys.per_layer("attention.head_count_kv", n_all)
        ff = keys.per_layer("feed_forward_length", n_all, 0)
        return [
            LayerPlan("full" if h and not f else None, not h and not f)
            for h, f in zip(kv, ff, strict=True)
        ]
    if arch == "llama4":
        window = keys.raw("attention.sliding_window")
        if window == 0:
            return [LayerPlan("full", False)] * n_all
        period = keys.int("attention.sliding_window_pattern", 4)
        return [LayerPlan("chunked" if _swa(il, period) else "full", False) for il in range(n_all)]
    if arch in SWA_ARCHS:
        return _swa_plans(keys, n_all, n_layer)
    if arch in PLAIN_ARCHS:
        if arch == "phi3" and keys.has("attention.sliding_window"):
            notes.append(note("gguf-window-ignored", arch=arch))
        return [LayerPlan("full", False)] * n_all
    if arch in NO_CACHE_ARCHS:
        raise KvplanError(
            f"{keys.source}: {arch} is an encoder (embeddings) architecture: llama.cpp keeps no "
            "KV cache for it"
        )
    if arch in SPECIAL_CACHE_ARCHS:
        raise KvplanError(
            f"{keys.source}: llama.cpp gives {arch} a cache of its own (compressed, indexed or "
            "shared layers) that kvplan does not model for GGUF files yet; pass its config.json"
        )
    raise KvplanError(
        f"{keys.source}: GGUF architecture {arch!r} is not one kvplan knows how llama.cpp caches"
    )


def _swa(il: int, period: int) -> bool:
    return period == 0 or il % period < period - 1


def _swa_plans(keys: Keys, n_all: int, n_layer: int) -> list[LayerPlan]:
    period, window_default, needs_window = SWA_ARCHS[keys.arch]
    window = keys.raw("attention.sliding_window")
    if needs_window and not window:
        return [LayerPlan("full", False)] * n_all
    pattern = keys.raw("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        flags = [bool(v) for v in pattern[:n_layer]] + [False] * (n_all - n_layer)
    else:
        if period is None and pattern is None:
            raise KvplanError(
                f"{keys.source}: GGUF lacks {keys.arch}.attention.sliding_window_pattern"
            )
        p = pattern if isinstance(pattern, int) else period
        if p is None:  # an architecture without a period of its own (gemma4): a number or flags
            raise KvplanError(
                f"{keys.source}: {keys.arch}.attention.sliding_window_pattern must be a whole "
                "number or one flag per layer"
            )
        flags = [il < n_layer and _swa(il, p) for il in range(n_all)]
    if window is None and window_default is None:
        raise KvplanError(f"{keys.source}: GGUF lacks {keys.arch}.attention.sliding_window")
    return [LayerPlan("sliding" if f else "full", False) for f in flags]


def _attention(
    keys: Keys, kind: str, il: int, heads: list, kv: list, n_embd: int
) -> Attention | None:
    """Layer il's attention cache, or None where the file gives it 0 KV heads: llama.cpp sizes
    each layer's cache by n_embd_k_gqa(il) = head_dim x head_count_kv(il), so such a layer
    keeps nothing (Nemotron-NAS's attention-free and linear-attention blocks)."""
    if kind != "mla" and kv[il] == 0:
        return None
    q = heads[il]
    if q == 0:
        raise KvplanError(f"{keys.source}: layer {il} caches attention but has 0 heads")
    key_dim = keys.int("attention.key_length", n_embd // heads[0] if heads[0] else 0)
    value_dim = keys.int("attention.value_length", n_embd // heads[0] if heads[0] else 0)
    for key, dim in (("attention.key_length", key_dim), ("attention.value_length", value_dim)):
        if dim < 1:
            how = "" if keys.has(key) else f" (embedding_length {n_embd} // {heads[0]} heads)"
            raise KvplanError(
                f"{keys.source}: {keys.arch}.{key} is 0{how}: an attention head needs a width"
            )
    if kind == "mla":
        kv_lora = keys.int("attention.kv_lora_rank")
        rope = keys.int("rope.dimension_count")
        if key_dim != kv_lora + rope:
            raise KvplanError(
                f"{keys.source}: MLA key_length {key_dim} is not kv_lora_rank {kv_lora} + rope "
                f"{rope}"
            )
        return Attention(
            kind=CacheKind.MLA,
            num_q_heads=q,
            num_kv_heads=1,
            head_dim=key_dim,
            head_dim_v=0,
            qk_head_dim=keys.int("attention.key_length_mla"),
            v_head_dim=keys.int("attention.value_length_mla"),
            mla_kv_lora_rank=kv_lora,
            mla_rope_dim=rope,
        )
    window = None
    if kind == "sliding":
        window = keys.int("attention.sliding_window", SWA_ARCHS[keys.arch][1])
        key_dim = keys.int("attention.key_length_swa", key_dim)
        value_dim = keys.int("attention.value_length_swa", value_dim)
    elif kind == "chunked":
        window = LLAMA4_CHUNK
    kv_heads = kv[il]
    if q % kv_heads:
        raise KvplanError(
            f"{keys.source}: layer {il} has {q} attention heads over {kv_heads} KV heads "
            f"({keys.arch}.attention.head_count_kv): heads must be a whole multiple of KV heads"
        )
    return Attention(
        kind=CacheKind(kind),
        num_q_heads=q,
        num_kv_heads=kv_heads,
        head_dim=key_dim,
        head_dim_v=value_dim,
        qk_head_dim=key_dim,
        v_head_dim=value_dim,
        window=window,
    )


def _state(keys: Keys) -> State:
    """A recurrent layer's state as llama.cpp keeps it (f32; llama-memory-recurrent.cpp):
    conv (conv_kernel - 1) x (inner + 2 groups x state), ssm state x inner."""
    kernel = keys.int("ssm.conv_kernel")
    inner = keys.int("ssm.inner_size")
    state_size = keys.int("ssm.state_size")
    groups = keys.int("ssm.group_count", 0)
    if keys.arch in MAMBA1_ARCHS:
        return State(
            StateKind.MAMBA1,
            kernel,
            intermediate=inner,
            state_size=state_size,
            conv_dtype="fp32",
            ssm_dtype="fp32",
        )
    heads = keys.int("ssm.time_step_rank")
    if not heads or inner % heads:
        raise KvplanError(
            f"{keys.source}: ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {heads}"
        )
    if keys.arch in INTERVAL_HYBRIDS:  # gated delta net: groups = key heads, state = key dim
        return State(
            StateKind.GATED_DELTANET,
            kernel,
            num_heads=heads,
            head_dim=inner // heads,
            key_heads=groups,
            key_dim=state_size,
            conv_dtype="fp32",
            ssm_dtype="fp32",
        )
    return State(
        StateKind.MAMBA2,
        kernel,
        intermediate=inner,
        state_size=state_size,
        num_heads=heads,
        head_dim=inner // heads,
        num_groups=groups,
        conv_dtype="fp32",
        ssm_dtype="fp32",
    )


def gguf_model_spec(model: GgufModel, name: str, source: str) -> ModelSpec:
    """The ModelSpec of a GGUF file: llama.cpp's cache anatomy, parameters and exact bytes from
    the tensor table."""
    arch = model.architecture
    if not arch:
        raise KvplanError(f"{source}: GGUF lacks general.architecture")
    keys = Keys(model, source)
    notes: list = [note("gguf-file", arch=arch)]
    n_all = keys.int("block_count", minimum=1)
    nextn = keys.int("nextn_predict_layers", 0)
    if nextn >= n_all:
        raise KvplanError(
            f"{source}: {arch}.nextn_predict_layers {nextn} leaves none of {n_all} blocks"
        )
    n_layer = n_all - nextn
    n_embd = keys.int("embedding_length", minimum=1)
    plans = layer_plans(keys, n_all, n_layer, notes)
    heads = keys.per_layer("attention.head_count", n_all, 0)
    kv = (
        keys.per_layer("attention.head_count_kv", n_all, 0)
        if keys.has("attention.head_count_kv")
        else heads
    )
    totals = tensor_totals(model, n_all)
    state = _state(keys) if any(p.recurrent for p in plans) else None
    # Gemma 4: the last shared_kv_layers layers read an earlier layer's cache and keep none.
    own_kv = n_all - keys.int("attention.shared_kv_layers", 0)
    if own_kv < n_all:
        notes.append(note("gguf-shared-kv", layers=n_all - own_kv))
    layers = []
    for il, plan in enumerate(plans):
        attention = None
        if plan.attention and il < own_kv:
            attention = _attention(keys, plan.attention, il, heads, kv, n_embd)
        params = tuple(sorted(totals.layer_params[il].items()))
        layers.append(Layer(attention, state if plan.recurrent else None, params))
    if any(p.attention for p in plans[:own_kv]) and not any(layer.attention for layer in layers):
        if not keys.has("attention.head_count"):
            raise KvplanError(f"{source}: GGUF lacks {arch}.attention.head_count")
        raise KvplanError(
            f"{source}: {arch}.attention.head_count_kv is 0 for every layer: an attention "
            "model needs KV heads"
        )
    if nextn and arch not in MLA_ARCHS:
        notes.append(note("gguf-nextn-layers", layers=nextn))
    token_embd = next((t for t in model.tensors if t.name == "token_embd.weight"), None)
    tokens = model.metadata.get("tokenizer.ggml.tokens")  # its length (ArrayLength) when strings
    vocab = keys.int("vocab_size", 0) or (tokens if isinstance(tokens, int) else 0)
    what = "the tokenizer's token list"
    if not vocab and token_embd is not None and len(token_embd.shape) == 2:
        vocab, what = token_embd.shape[1], "token_embd.weight's vocabulary side"
    if isinstance(vocab, int) and vocab > FIELD_MAXIMUM["vocab_size"]:
        raise KvplanError(
            f"{source}: {what} gives a vocabulary of {vocab:,}, over kvplan's cap of "
            f"{FIELD_MAXIMUM['vocab_size']:,}"
        )
    moe = _moe(keys, totals)
    dense_ff = [f for f in keys.per_layer("feed_forward_length", n_all, 0) if f]
    return ModelSpec(
        name=name,
        model_type=f"gguf:{arch}",
        family=f"GGUF {arch} ({totals.stored.file_type})",
        hidden_size=n_embd,
        vocab_size=int(vocab),
        layers=tuple(layers),
        param_parts={k: v for k, v in totals.params.items() if v},
        dtype="fp16",  # llama.cpp's default cache type and compute precision
        moe=moe,
        tied_embeddings=not any(t.name == "output.weight" for t in model.tensors),
        max_position_embeddings=keys.int("context_length", 0) or None,
        weights_quantization=None,
        notes=tuple(notes),
        intermediate_size=dense_ff[0] if dense_ff else None,
        source=f"gguf:{model.paths[0]}",
        stored=totals.stored,
    )


def _moe(keys: Keys, totals: TensorTotals) -> MoE | None:
    num_experts = keys.int("expert_count", 0)
    if not num_experts or not totals.expert_values_per_layer:
        return None
    per_layer = list(totals.expert_values_per_layer.values())
    shared = keys.int("expert_shared_feed_forward_length", 0) * max(
        1, keys.int("expert_shared_count", 1)
    )
    return MoE(
        num_experts=num_experts,
        top_k=keys.int("expert_used_count"),
        params_per_expert=per_layer[0] // num_experts,
        num_layers=len(per_layer),
        expert_intermediate_size=keys.int("expert_feed_forward_length", 0),
        shared_intermediate_size=shared,
    )


def load_gguf(model: str) -> ModelSpec:
    """A .gguf path -> ModelSpec (the hook kvplan.inputs.sources routes GGUF paths to)."""
    gguf_model = read_gguf(model)
    name = str(gguf_model.metadata.get("general.name") or Path(gguf_model.paths[0]).stem)
    return gguf_model_spec(gguf_model, name, model)
