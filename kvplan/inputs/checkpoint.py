"""A checkpoint's exact weight bytes from its safetensors headers, never its data: a local
folder (one model.safetensors, or the index and each shard's header) or a Hugging Face repository
(huggingface-hub reads only the headers, within the Hub deadline). Every tensor's dtype and shape
give its bytes, which makes FP8 block-scaled, AWQ/GPTQ int4 with scales and zeros, MXFP4, NVFP4
and compressed-tensors checkpoints exact. Vision towers and multi-token-prediction layers are
counted apart."""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from pathlib import Path

from kvplan.anatomy.model import StoredWeights
from kvplan.dtypes import SAFETENSORS_DTYPE_BYTES
from kvplan.errors import KvplanError
from kvplan.inputs.text import clean

MAX_HEADER_BYTES = 64 * 2**20  # a safetensors header of a large MoE is a few MB
MAX_SHARDS = 4096
MAX_TENSORS = 2_000_000
# Over every shard: a model.safetensors.index.json (capped below at 16 MiB) names each tensor in
# about 2/3 of its header entry's bytes, so the largest index admitted stands for ~24 MiB of
# headers (DeepSeek-V3's 163 shards: ~12 MB). Parsing 56 MiB of headers took 9 s and 140 MB here.
MAX_TOTAL_HEADER_BYTES = 128 * 2**20
MAX_INDEX_BYTES = 16 * 2**20  # a model.safetensors.index.json of a large MoE is a few MB
MAX_TENSOR_ELEMENTS = 2**40  # the largest real tensors (embeddings, fused experts) hold ~1e10
VISION = re.compile(
    r"(^|\.)(vision|visual|vision_tower|vision_model|vit|image_encoder|mm_projector|"
    r"multi_modal_projector|patch_embed|img_)",
    re.I,
)
LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _tensor_bytes(name: str, dtype: str, shape: list, source: str) -> float:
    size = SAFETENSORS_DTYPE_BYTES.get(str(dtype).upper())
    if size is None:
        raise KvplanError(
            f"{source}: tensor {clean(name)[:80]} has an unknown dtype {clean(dtype)[:20]!r}"
        )
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape
    ):
        raise KvplanError(f"{source}: tensor {clean(name)[:80]} has a malformed shape")
    elements = 1
    for d in shape:  # stops early: a product of thousands of large sides is never built
        elements *= d
        if elements > MAX_TENSOR_ELEMENTS:
            raise KvplanError(
                f"{source}: tensor {clean(name)[:80]} has over {MAX_TENSOR_ELEMENTS:,} elements"
            )
    return elements * size


def header_length(path: Path, head: bytes) -> int:
    """The header length a safetensors file's first 8 bytes state, within MAX_HEADER_BYTES."""
    if len(head) < 8:
        raise KvplanError(f"{path}: not a safetensors file (too short)")
    (length,) = struct.unpack("<Q", head[:8])
    if length <= 1 or length > MAX_HEADER_BYTES:
        # The length is the file's first 8 bytes: never printed (a link to another file would
        # have them read back, "root:x:0" as a number).
        size = (
            f"over {MAX_HEADER_BYTES // 2**20} MiB"
            if length > MAX_HEADER_BYTES
            else "under 2 bytes"
        )
        raise KvplanError(
            f"{path}: implausible safetensors header length ({size}): not a safetensors file"
        )
    return length


def parse_header(raw: bytes, source: str) -> dict[str, tuple]:
    """{tensor name: (dtype, shape)} from a safetensors header's JSON (the shapes are checked
    when they are priced, by _tensor_bytes)."""
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise KvplanError(f"{source}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise KvplanError(f"{source}: the safetensors header is not a mapping")
    out: dict[str, tuple] = {}  # (dtype, shape) as the JSON has them: _tensor_bytes checks
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise KvplanError(f"{source}: tensor {clean(str(name))[:80]} has no dtype/shape")
        out[str(name)] = (info.get("dtype"), info.get("shape"))
    return out


class TooLarge(KvplanError):
    """A checkpoint past the bounds over all its shards (never a weight count from the config
    instead: the command stops)."""


def check_totals(header_bytes: int, tensors: int, source: str) -> None:
    """The bounds over every shard, checked before the next header is read or parsed."""
    if header_bytes > MAX_TOTAL_HEADER_BYTES:
        raise TooLarge(
            f"{source}: safetensors headers of {header_bytes:,} bytes in all, over kvplan's cap "
            f"of {MAX_TOTAL_HEADER_BYTES // 2**20} MiB"
        )
    if tensors > MAX_TENSORS:
        raise TooLarge(f"{source}: more than {MAX_TENSORS:,} tensors")


def _open_shard(path: Path):
    from kvplan.atomic import note_input

    note_input(path)  # an output of this command may not replace it
    try:  # opened without blocking and checked open: a FIFO would block the open or the read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise KvplanError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except (OSError, ValueError, RuntimeError) as exc:  # a symlink loop, a NUL in the name
        raise KvplanError(
            f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc.__class__.__name__})"
        ) from None


def read_headers(paths: list[Path], source: str) -> dict[str, tuple[str, list]]:
    """{tensor name: (dtype, shape)} over the safetensors files `paths`: every header's length
    first (their total bounded before any header is read), then each header, the tensor count
    checked before the next is parsed."""
    lengths = []
    for path in paths:
        with _open_shard(path) as handle:
            lengths.append(header_length(path, _read(handle, path, 8)))
        check_totals(sum(lengths), 0, source)
    tensors: dict = {}
    for path, length in zip(paths, lengths, strict=True):
        with _open_shard(path) as handle:
            raw = _read(handle, path, 8 + length)[8:]
        if len(raw) < length:
            raise KvplanError(f"{path}: truncated safetensors header")
        tensors.update(parse_header(raw, str(path)))
        check_totals(0, len(tensors), source)
    return tensors


def _read(handle, path: Path, size: int) -> bytes:
    try:
        return handle.read(size)
    except OSError as exc:
        raise KvplanError(
            f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})"
        ) from None


def _shards(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            if index.stat().st_size > MAX_INDEX_BYTES:
                raise KvplanError(f"{index}: over {MAX_INDEX_BYTES // 2**20} MiB, not an index")
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        except (OSError, ValueError, AttributeError, RecursionError):
            raise KvplanError(f"{index}: cannot read the safetensors index") from None
        if not isinstance(weight_map, dict):
            raise KvplanError(f"{index}: weight_map is not a mapping")
        names = sorted({str(v) for v in weight_map.values()})
        if len(names) > MAX_SHARDS:
            raise KvplanError(f"{index}: more than {MAX_SHARDS} shards")
        shards = []
        for name in names:
            # A shard is a file of this folder, by name: the index never reaches outside it.
            # (A name may be a symbolic link, as in the Hugging Face cache's snapshots.)
            if Path(name).name != name or name in (".", "..") or "\\" in name or "\0" in name:
                raise KvplanError(f"{index}: shard {clean(name)[:80]!r} is not a file name")
            shard = folder / name
            try:
                present = shard.is_file()
            except (OSError, ValueError, RuntimeError):
                present = False
            if not present:
                raise KvplanError(f"{index}: shard {clean(name)[:80]} is missing from {folder}")
            shards.append(shard)
        return shards
    shards = sorted(folder.glob("*.safetensors"))
    if len(shards) > MAX_SHARDS:
        raise KvplanError(f"{folder}: more than {MAX_SHARDS} .safetensors files")
    return shards


def summarize(tensors: dict[str, tuple[str, list]], num_layers: int, source: str) -> StoredWeights:
    if len(tensors) > MAX_TENSORS:
        raise TooLarge(f"{source}: more than {MAX_TENSORS:,} tensors")
    text = vision = skipped = 0.0
    by_dtype: dict[str, float] = {}
    for name, (dtype, shape) in tensors.items():
        size = _tensor_bytes(name, dtype, shape, source)
        key = str(dtype).upper()
        by_dtype[key] = by_dtype.get(key, 0) + size
        layer = LAYER_INDEX.search(name)
        if VISION.search(name):
            vision += size
        elif (
            (layer and int(layer.group(1)) >= num_layers)
            or ".mtp" in name
            or name.startswith("mtp")
        ):
            skipped += size  # multi-token-prediction layers: loaded only for MTP decoding
        else:
            text += size
    return StoredWeights(
        text_bytes=int(text),
        vision_bytes=int(vision),
        skipped_bytes=int(skipped),
        num_tensors=len(tensors),
        type_bytes={k: int(v) for k, v in sorted(by_dtype.items())},
        source=source,
    )


def local_checkpoint(folder: Path, num_layers: int) -> StoredWeights | None:
    """The weights of a local checkpoint folder, or None when it holds no safetensors."""
    shards = _shards(folder)
    if not shards:
        return None
    tensors = read_headers(shards, str(folder))
    if not tensors:  # not the weights: 0 bytes would be priced as the model
        raise KvplanError(f"{folder}: its safetensors headers list no tensors")
    return summarize(tensors, num_layers, f"{folder} ({len(shards)} safetensors headers)")
