"""The native CPU paged decode kernel: kernels/paged_decode_cpu.c, compiled on first use.

The source ships inside the package. On the first call it is compiled with the system C compiler
(`cc -O3 -march=native -fopenmp-simd -pthread -shared -fPIC`; `CC` overrides the compiler: the
threads are the kernel's own pthread pool, OpenMP gives only its `simd` loops, so the library
needs no OpenMP runtime beside torch's) into a per-user
cache, `$KVPLAN_CACHE/native` (default `~/.cache/kvplan/native`), under a name keyed by the
source, the flags and this CPU's feature flags (`-march=native` code is not portable), written
atomically so that concurrent first calls cannot load half a file. The library is called through
ctypes on the tensors' data pointers. Without a compiler, or when the build or the load fails,
`status()` says why, the reason is logged once, and callers take the torch path; the environment
variable `KVPLAN_NATIVE_DECODE=0` forces the torch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

LOG = logging.getLogger(__name__)
ENV_SWITCH = "KVPLAN_NATIVE_DECODE"
SOURCE_NAME = "paged_decode_cpu.c"
COMPILER = os.environ.get("CC", "cc")
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-pthread", "-shared", "-fPIC")
BUILD_TIMEOUT_S = 120
CACHE_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}  # the kernel's dtype codes
# Work items (sequence x split, all heads together) per thread: enough for dynamic scheduling to
# even out ragged lengths and a descheduled thread; a split keeps at least MIN_SPLIT_TOKENS
# tokens, below which its fixed cost (a partial output and its merge) outweighs what it adds.
ITEMS_PER_THREAD = 4
MIN_SPLIT_TOKENS = 256


@dataclass(frozen=True)
class NativeStatus:
    """Whether the native kernel can be called, and why not when it cannot."""

    available: bool
    reason: str  # "" when available
    library_path: str | None = None


_STATE: NativeStatus | None = None
_LIBRARY: ctypes.CDLL | None = None


def status() -> NativeStatus:
    """Build (once per process) and load the kernel; never raises."""
    global _STATE, _LIBRARY
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return NativeStatus(False, f"{ENV_SWITCH}=0 forces the torch path")
    if _STATE is None:
        try:
            path = _build()
            _LIBRARY = _load(path)
            _STATE = NativeStatus(True, "", str(path))
        except (_BuildError, OSError) as error:  # OSError: the source missing from the install
            _STATE = NativeStatus(False, str(error))
            LOG.warning("native CPU paged decode unavailable (the torch path runs): %s", error)
    return _STATE


class _BuildError(Exception):
    pass


def cache_dir() -> Path:
    base = Path(os.environ.get("KVPLAN_CACHE", Path.home() / ".cache" / "kvplan"))
    return base / "native"


def _cpu_flags() -> str:
    """This CPU's feature flags (what -march=native compiles for), or the machine name."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def _build() -> Path:
    source = resources.files("kvplan.kernels").joinpath(SOURCE_NAME).read_bytes()
    compiler = shutil.which(COMPILER)
    if compiler is None:
        raise _BuildError(f"no C compiler {COMPILER!r} on PATH (set CC)")
    key = hashlib.sha256(
        b"\0".join([source, " ".join(FLAGS).encode(), compiler.encode(), _cpu_flags().encode()])
    ).hexdigest()[:16]
    folder = cache_dir()
    target = folder / f"paged_decode_cpu-{key}.so"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        descriptor, staged = tempfile.mkstemp(dir=folder, prefix=target.stem, suffix=".tmp")
        os.close(descriptor)
    except OSError as error:
        raise _BuildError(f"cannot write the cache {folder}: {error}") from error
    with tempfile.TemporaryDirectory() as scratch:
        source_path = Path(scratch) / SOURCE_NAME
        source_path.write_bytes(source)
        command = [compiler, *FLAGS, str(source_path), "-o", staged, "-lm"]
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            os.unlink(staged)
            raise _BuildError(f"{' '.join(command)}: {error}") from error
    if proc.returncode != 0:
        os.unlink(staged)
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        errors = [line for line in lines if "error" in line] or lines[-3:]
        raise _BuildError(f"{compiler} failed ({proc.returncode}): {' | '.join(errors[:3])}")
    os.replace(staged, target)
    return target


def _load(path: Path) -> ctypes.CDLL:
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        raise _BuildError(f"cannot load {path}: {error}") from error
    function = library.paged_decode_cpu
    pointer, strides, integer = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int
    # query, K, K strides, V, V strides, dtype, table, lens, out, partial, then the ten sizes
    function.argtypes = [pointer, pointer, strides, pointer, strides, integer]
    function.argtypes += (pointer,) * 4 + (integer,) * 10
    function.restype = integer
    return library


def unsupported(query, key_cache, value_cache, k_scale=None, v_scale=None) -> str | None:
    """Why the native kernel cannot take these inputs (None when it can)."""
    if query.device.type != "cpu" or key_cache.device.type != "cpu":
        return "not CPU tensors"
    if value_cache.device.type != "cpu":
        return "not CPU tensors"
    if key_cache.dtype not in CACHE_DTYPES or value_cache.dtype != key_cache.dtype:
        return f"cache dtype {key_cache.dtype} (the kernel reads fp32, bf16 and fp16)"
    if k_scale is not None or v_scale is not None:
        return "quantized caches with scales"
    if not query.dtype.is_floating_point:
        return f"query dtype {query.dtype}"
    return None


def num_splits(batch: int, longest: int, threads: int) -> int:
    """Splits of each sequence's KV: one on one thread, or when the sequences alone give every
    thread ITEMS_PER_THREAD items; else enough splits for that (small batches, long contexts),
    each of at least MIN_SPLIT_TOKENS tokens."""
    if threads <= 1:
        return 1
    wanted = math.ceil(ITEMS_PER_THREAD * threads / max(1, batch))
    return max(1, min(wanted, longest // MIN_SPLIT_TOKENS))


def native_decode_attention(
    query,
    key_cache,
    value_cache,
    block_table,
    seq_lens,
    *,
    batch: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float,
    sliding_window=None,
    threads: int | None = None,
):
    """query [B, Hq, D] (any strides, any float dtype), caches [blocks, block_size, Hkv, D] (any
    strides, fp32/bf16/fp16), block_table int [B, max_blocks], seq_lens int [B] on the CPU ->
    fp32 [B, Hq, D]. Inputs are validated by the caller (check_inputs); the kernel itself checks
    that every table entry it reads names a block of the cache."""
    state = status()
    if not state.available or _LIBRARY is None:
        raise RuntimeError(f"the native decode kernel is unavailable: {state.reason}")
    group = query.shape[1] // num_kv_heads
    num_blocks, block_size = key_cache.shape[:2]
    out = torch.empty(batch, num_kv_heads * group, head_dim, dtype=torch.float32)
    if batch == 0:
        return out
    q = (query.float() * scale).reshape(batch, num_kv_heads, group, head_dim).contiguous()
    table = block_table.to(torch.int32).contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    threads = threads or torch.get_num_threads()
    splits = num_splits(batch, int(lens.max()), threads)
    partial = torch.empty(batch * splits, num_kv_heads * group * (head_dim + 2))
    key_strides = (ctypes.c_int64 * 4)(*key_cache.stride())
    value_strides = (ctypes.c_int64 * 4)(*value_cache.stride())
    failed = _LIBRARY.paged_decode_cpu(
        q.data_ptr(),
        key_cache.data_ptr(),
        key_strides,
        value_cache.data_ptr(),
        value_strides,
        CACHE_DTYPES[key_cache.dtype],
        table.data_ptr(),
        lens.data_ptr(),
        out.data_ptr(),
        partial.data_ptr(),
        batch,
        num_kv_heads,
        group,
        head_dim,
        num_blocks,
        block_size,
        table.shape[1],
        sliding_window or 0,
        splits,
        threads,
    )
    if failed:
        raise ValueError(
            f"sequence {failed - 1}: its length exceeds its block table row, or a table entry "
            f"it reads is not a block of the cache (0..{num_blocks - 1})"
        )
    return out
