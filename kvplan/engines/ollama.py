"""Ollama's defaults as a preset of the llama.cpp model: what `ollama serve` passes to llama.cpp
for a version and its environment (Ollama source at fb30760, first tags by `git describe`).

Since v0.30 Ollama runs upstream llama-server with `-c num_ctx*num_parallel -np num_parallel`
(no -kvu, no --swa-full), `--cache-type-k/-v OLLAMA_KV_CACHE_TYPE` and `--flash-attn`.
"""

from __future__ import annotations

import re

from kvplan.errors import KvplanError
from kvplan.notes import Note, note
from kvplan.record import NamedTuple
from kvplan.units import GIB

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
    if not str(text).strip().isdigit() or not 1 <= int(text) <= 1 << 24:
        raise KvplanError(f"{name}={text}: a whole number between 1 and 16,777,216")
    return int(text)
