"""A checkpoint's exact weight bytes from its safetensors headers, never its data: a local
folder (one model.safetensors, or the index and each shard's header) or a Hugging Face repository
(huggingface-hub reads only the headers, within the Hub deadline). Every tensor's dtype and shape
give its bytes, which makes FP8 block-scaled, AWQ/GPTQ int4 with scales and zeros, MXFP4, NVFP4
and compressed-tensors checkpoints exact. Vision towers and multi-token-prediction layers are
counted apart."""

from __future__ import annotations

import json
import re
import stat
import struct
from collections import Counter
from pathlib import Path

from kvplan.anatomy.model import StoredWeights
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import SAFETENSORS_DTYPE_BYTES
from kvplan.inputs.text import clean

MAX_HEADER_BYTES = 64 * 2**20  # a safetensors header of a large MoE is a few MB
MAX_SHARDS = 4096
MAX_TENSORS = 2_000_000
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


def read_header(path: Path) -> dict[str, tuple[str, list]]:
    """{tensor name: (dtype, shape)} from one .safetensors file's header."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read forever
            raise KvplanError(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise KvplanError(f"{path}: not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", head)
            if length <= 1 or length > MAX_HEADER_BYTES:
                # The length is the file's first 8 bytes: never printed (a link to another
                # file would have them read back, "root:x:0" as a number).
                size = (
                    f"over {MAX_HEADER_BYTES // 2**20} MiB"
                    if length > MAX_HEADER_BYTES
                    else "under 2 bytes"
                )
                raise KvplanError(
                    f"{path}: implausible safetensors header length ({size}): not a "
                    "safetensors file"
                )
            raw = handle.read(length)
    except (OSError, ValueError, RuntimeError) as exc:  # a symlink loop, a NUL in the name
        raise KvplanError(
            f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc.__class__.__name__})"
        ) from None
    if len(raw) < length:
        raise KvplanError(f"{path}: truncated safetensors header")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise KvplanError(f"{path}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise KvplanError(f"{path}: the safetensors header is not a mapping")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise KvplanError(f"{path}: tensor {clean(name)[:80]} has no dtype/shape")
        out[str(name)] = (info.get("dtype"), info.get("shape"))
    return out


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
        raise KvplanError(f"{source}: more than {MAX_TENSORS:,} tensors")
    text = vision = skipped = 0.0
    by_dtype: Counter = Counter()
    for name, (dtype, shape) in tensors.items():
        size = _tensor_bytes(name, dtype, shape, source)
        by_dtype[str(dtype).upper()] += size
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
    tensors: dict = {}
    for shard in shards:
        tensors.update(read_header(shard))
    if not tensors:  # not the weights: 0 bytes would be priced as the model
        raise KvplanError(f"{folder}: its safetensors headers list no tensors")
    return summarize(tensors, num_layers, f"{folder} ({len(shards)} safetensors headers)")


def hub_checkpoint(repo_id: str, num_layers: int, limit_s: float) -> StoredWeights | None:
    """The weights of a Hub repository from its safetensors headers (HTTP range requests); None
    when it has none, or the Hub does not answer within `limit_s` seconds."""
    from kvplan.inputs.hub import fetch_safetensors_headers

    tensors = fetch_safetensors_headers(repo_id, limit_s)
    if not tensors:
        return None
    return summarize(tensors, num_layers, f"hub:{repo_id} (safetensors headers)")
