"""Ollama's defaults as a preset of the llama.cpp model: what `ollama serve` passes to llama.cpp
for a version and its environment (Ollama source at fb30760, first tags by `git describe`).

Since v0.30 Ollama runs upstream llama-server with `-c num_ctx*num_parallel -np num_parallel`
(no -kvu, no --swa-full), `--cache-type-k/-v OLLAMA_KV_CACHE_TYPE` and `--flash-attn`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kvplan.errors import KvplanError
from kvplan.notes import Note, note
from kvplan.record import NamedTuple
from kvplan.units import GIB

if TYPE_CHECKING:
    from kvplan.inputs.hardware import GpuProfile

OLLAMA_VERSION = "0.33"
OLLAMA_ENV = (
    "OLLAMA_CONTEXT_LENGTH",
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_FLASH_ATTENTION",
)
# Architectures Ollama serves one request at a time (server/sched.go).
SINGLE_SEQUENCE_ARCHS = frozenset(
    ("mllama", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe")
    + ("nemotron_h", "nemotron_h_moe", "nemotron_h_omni")
)
OLD_KV_TYPES = ("f16", "q8_0", "q4_0")  # accepted before v0.30
BATCH = 512  # num_batch default (api/types.go), passed as -b and -ub


class OllamaSettings(NamedTuple):
    version: str
    num_ctx: int
    num_parallel: int
    cache_type: str
    flash_attn: str  # on | off | auto
    swa_full: bool
    notes: tuple[Note, ...]


def parse_version(text: str) -> tuple[int, ...]:
    match = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?", str(text).strip())
    if not match:
        raise KvplanError(f"--ollama {str(text)[:20]!r} is not an Ollama version (0.30, 0.6.7)")
    return tuple(int(g or 0) for g in match.groups())


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, _, value = str(item).partition("=")
        if name not in OLLAMA_ENV or not value:
            raise KvplanError(
                f"--ollama-env {str(item)[:40]!r}: give NAME=VALUE with NAME one of "
                + ", ".join(OLLAMA_ENV)
            )
        env[name] = value.strip()
    return env


def default_num_ctx(version: tuple, vram_bytes: float) -> int:
    """Ollama's default context by version: 2048, 4096 from v0.6.7, and from v0.15.5 by the
    GPUs' memory: >= 47 GiB 262144, >= 23 GiB 32768, else 4096."""
    if version < (0, 6, 7):
        return 2048
    if version < (0, 15, 5):
        return 4096
    if vram_bytes >= 47 * GIB:
        return 262144
    return 32768 if vram_bytes >= 23 * GIB else 4096


def default_num_parallel(version: tuple) -> int:
    """1 until v0.2, 4 (auto) until v0.6.7, 2 until v0.9.7, 1 since."""
    if version < (0, 2, 0):
        return 1
    if version < (0, 6, 7):
        return 4
    return 2 if version < (0, 9, 7) else 1


def ollama_settings(
    version_text: str, env: dict[str, str], vram_bytes: float, n_ctx_train: int | None, arch: str
) -> OllamaSettings:
    version = parse_version(version_text)
    notes = [note("ollama-preset", version=version_text)]
    if version > parse_version(OLLAMA_VERSION):
        notes.append(note("ollama-newer", version=version_text, known=OLLAMA_VERSION))
    ctx_env = env.get("OLLAMA_CONTEXT_LENGTH")
    if ctx_env and version >= (0, 5, 13):
        num_ctx = _int(ctx_env, "OLLAMA_CONTEXT_LENGTH")
    else:
        num_ctx = default_num_ctx(version, vram_bytes)
        if version >= (0, 15, 5):
            notes.append(note("ollama-vram-tier", vram_bytes=vram_bytes, num_ctx=num_ctx))
    if n_ctx_train and num_ctx > n_ctx_train:
        num_ctx = n_ctx_train
        notes.append(note("ollama-ctx-capped", n_ctx_train=n_ctx_train))
    par_env = env.get("OLLAMA_NUM_PARALLEL")
    parallel = _int(par_env, "OLLAMA_NUM_PARALLEL") if par_env else default_num_parallel(version)
    if arch in SINGLE_SEQUENCE_ARCHS and parallel > 1:
        parallel = 1
        notes.append(note("ollama-single-sequence", arch=arch))
    fa_env = env.get("OLLAMA_FLASH_ATTENTION")
    if fa_env is not None:
        flash = "on" if fa_env.lower() in ("1", "true", "on", "yes") else "off"
    elif version >= (0, 30, 0):
        flash = "auto"
    else:
        flash = "on" if version >= (0, 11, 8) else "off"
    cache = env.get("OLLAMA_KV_CACHE_TYPE", "f16").lower()
    if version < (0, 30, 0):
        if cache not in OLD_KV_TYPES:
            raise KvplanError(f"OLLAMA_KV_CACHE_TYPE={cache}: Ollama < 0.30 takes f16, q8_0, q4_0")
        if cache != "f16" and flash == "off":
            notes.append(note("ollama-kv-needs-fa"))
            cache = "f16"
    swa_full = version < (0, 30, 0)  # the old runner kept llama.cpp's C API default
    if swa_full:
        notes.append(note("ollama-old-runner"))
    return OllamaSettings(version_text, num_ctx, parallel, cache, flash, swa_full, tuple(notes))


def _int(text: str, name: str) -> int:
    text = str(text).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or not 1 <= int(text) <= 1 << 24:
        raise KvplanError(f"{name}={text}: a whole number between 1 and 16,777,216")
    return int(text)


# ---- the engine: Ollama's settings through llama.cpp's allocation ------------------------------
class OllamaRequest(NamedTuple):
    """What `ollama serve` is told: its version, its environment, and a request's options."""

    version: str = OLLAMA_VERSION
    env: tuple[tuple[str, str], ...] = ()  # OLLAMA_* variables, NAME=VALUE pairs
    num_ctx: int | None = None  # the request's num_ctx option, per sequence (None: the default)
    num_gpu: int | None = None  # the request's num_gpu option, layers (None: the most that fit)
    gpu_memory_bytes: float | None = None  # what the GPU may use (a Mac's iogpu.wired_limit_mb)
    weights_type: str | None = None  # a config.json's weights in this ggml type (default f16)
    host: GpuProfile | None = None  # the CPU side (None: a Mac's unified memory)
    device: str | None = None
    notes: tuple[Note, ...] = ()  # said by the caller (the deprecated --ollama spelling)


class OllamaEstimate(NamedTuple):
    """Ollama's own pre-flight estimate (llm/llama_server.go PredictServerVRAM at fb30760): the
    model file's size plus an f16 cache of every layer at the full context, whatever the cache
    type, window or head widths. The scheduler evicts other models when it exceeds 80% of the
    free memory; llama-server then allocates what the `llama.cpp` rows say."""

    weights_bytes: int  # the model file's size
    kv_bytes: int
    total_bytes: int
    context_tokens: int  # num_ctx x num_parallel


def predicted_server_vram_bytes(
    file_bytes: int,
    block_count: int,
    kv_heads_min: int,
    embedding_length: int,
    head_count_max: int,
    context_tokens: int,
) -> tuple[int, int]:
    """PredictServerVRAM: (kv, total) = 2 (K and V) x layers x min KV heads x
    (embedding / max heads) x context x 2 bytes (f16), plus the file."""
    head_dim = embedding_length // head_count_max if head_count_max > 0 else 0
    kv = 2 * block_count * max(kv_heads_min, 1) * head_dim * context_tokens * 2
    return kv, file_bytes + kv


def ollama_allocation(spec, gpu, r: OllamaRequest):
    """The Python twin of `kvplan engine MODEL --engine ollama`: Ollama's settings for this
    version and environment, as the llama-server options it passes, through llama.cpp's
    allocation (kvplan.engines.llamacpp), with Ollama's own estimate beside it."""
    from kvplan.engines.llamacpp import LlamaCppRequest, llamacpp_allocation

    env = dict(r.env)
    vram = r.gpu_memory_bytes or gpu.usable_memory_bytes
    arch = spec.model_type.removeprefix("gguf:")
    preset = ollama_settings(r.version, env, vram, spec.max_position_embeddings, arch)
    num_ctx = r.num_ctx or preset.num_ctx
    notes = list(r.notes) + list(preset.notes)
    if spec.max_position_embeddings and num_ctx > spec.max_position_embeddings:
        num_ctx = spec.max_position_embeddings  # llm/server.go caps a request's num_ctx too
        notes.append(note("ollama-ctx-capped", n_ctx_train=spec.max_position_embeddings))
    request = LlamaCppRequest(
        ctx_size=num_ctx * preset.num_parallel,  # -c num_ctx x num_parallel
        parallel=preset.num_parallel,  # -np: split streams (no -kvu)
        batch_size=BATCH,
        ubatch_size=BATCH,
        cache_type_k=preset.cache_type,
        cache_type_v=preset.cache_type,
        flash_attn=preset.flash_attn,
        n_gpu_layers=r.num_gpu,
        swa_full=preset.swa_full,
        gpu_memory_bytes=r.gpu_memory_bytes,
        weights_type=r.weights_type,
        host=r.host,
        device=r.device,
        preset_notes=tuple(notes),
    )
    result = llamacpp_allocation(spec, gpu, request)
    attns = spec.attention_layers()
    kv, total = predicted_server_vram_bytes(
        _file_bytes(spec, result),
        spec.num_layers,
        min((a.num_kv_heads for a in attns), default=1),
        spec.hidden_size,
        max((a.num_q_heads for a in attns), default=0),
        result.settings.n_ctx,
    )
    estimate = OllamaEstimate(_file_bytes(spec, result), kv, total, result.settings.n_ctx)
    return result._replace(
        engine="ollama",
        engine_version=r.version,
        ollama=preset._replace(num_ctx=num_ctx),
        ollama_estimate=estimate,
        notes=(*result.notes, note("ollama-estimate")),
    )


def _file_bytes(spec, result) -> int:
    """The model file's size (a GGUF on disk), else the weights llama.cpp would load."""
    import os

    source = spec.source or ""
    if source.startswith("gguf:"):
        try:
            return os.path.getsize(source.removeprefix("gguf:"))
        except OSError:
            pass
    return result.gpu_memory.weights_bytes + result.host_memory.weights_bytes
