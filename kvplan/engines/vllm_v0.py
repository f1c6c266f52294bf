"""vLLM V0's own serving defaults and admission rules (releases 0.6.x and 0.7.x), as their source
states them. Read from the wheels' `vllm/engine/arg_utils.py`, `vllm/config.py` and
`vllm/core/{scheduler,block_manager}.py` (0.6.0 to 0.6.6.post1, 0.7.0 to 0.7.3); 0.8.0 made V1 the
default (`envs.VLLM_USE_V1` defaults to "1"), and kvplan runs 0.8 with V1's rules.

- `max_num_seqs`: 256 (`EngineArgs.max_num_seqs = 256` to 0.6.4; from 0.6.5
  `EngineArgs.__post_init__`: `256 if not envs.VLLM_USE_V1 else 1024`).
- Chunked prefill on by default (`EngineArgs.create_engine_config`) when `max_model_len > 32768`
  on a GPU and none of the exceptions below holds; off otherwise.
- `max_num_batched_tokens` (`SchedulerConfig.__init__` / `__post_init__`): chunked prefill off:
  `max(max_model_len, 2048)`; on: 512 to 0.6.4, 2,048 from 0.6.5; from 0.6.3 chunked prefill with
  multi-step scheduling (`num_scheduler_steps > 1`) takes `max(max_model_len, 2048)`.
- Prefix caching off by default (`enable_prefix_caching: bool = False` to 0.6.4; from 0.6.5
  `bool(envs.VLLM_USE_V1)`, False under V0).
- Admission (`BlockSpaceManager.can_allocate`): a prompt is admitted when the free blocks less its
  whole prompt's blocks (prefix hits not subtracted) leave the watermark, `int(0.01 x
  num_gpu_blocks)`; a chunked prompt's blocks are all allocated on admission.
- Preemption (`Scheduler._preempt`): `--preemption-mode` unset: RECOMPUTE for a sequence group of
  one sequence (every `vllm bench serve` request), SWAP for several (beam search, n > 1);
  "swap": SWAP; any other string: RECOMPUTE. `--swap-space` 4 GiB of CPU memory per GPU; a swap
  out that finds it full raises "Aborted due to the lack of CPU swap space" (`_swap_out`).
- KV pool (`vllm/worker/worker.py` `Worker.determine_num_available_blocks`, 0.6.6.post1 and
  0.7.3): available = total x gpu_memory_utilization - (weights + the profile run's torch
  peak + non-torch memory), the profile run being max_num_seqs prompts of
  max_num_batched_tokens // max_num_seqs tokens (`ModelRunner.profile_run`);
  num_gpu_blocks = int(available // block bytes), num_cpu_blocks = int(swap_space x GiB //
  block bytes), a block being every attention layer's K and V for block_size tokens
  (`CacheEngine.get_cache_block_size`); the executor takes each figure's minimum over the
  workers. CUDA graphs are captured after the cache is allocated (`initialize_cache` ->
  `_warm_up_model`), so their memory is not subtracted; V0 has no null block.
"""

from __future__ import annotations

import re

from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple
from kvplan.units import GIB

V0_RELEASES = ((0, 6), (0, 7))  # the minors whose default engine is V0 (0.8: v08_v0_fallback)
# a minor given without its patch runs as its last release's rules
LAST_PATCH = {(0, 6): 6, (0, 7): 3}  # 0.6.6.post1, 0.7.3
V0_MAX_NUM_SEQS = 256
LONG_CONTEXT_TOKENS = 32768  # use_long_context = max_model_len > 32768
NO_CHUNK_MIN_TOKENS = 2048  # max(max_model_len, 2048) without chunked prefill
CHUNKED_BUDGET_UNTIL_0_6_4 = 512
CHUNKED_BUDGET_FROM_0_6_5 = 2048
WATERMARK = 0.01  # BlockSpaceManager(watermark=0.01)
SWAP_SPACE_GIB = 4.0  # EngineArgs.swap_space
V0_BLOCK_SIZE = 16  # CudaPlatform.check_and_update_config: block_size None -> 16
MAX_SWAP_SPACE_GIB = 1 << 20
PREEMPTION_MODES = ("recompute", "swap")
# model types V0's ModelConfig treats as interleaved sliding window (the window dropped from the
# scheduler's view, `get_sliding_window()` None): gemma2 from 0.6.5, cohere2 from 0.7.0 (before
# 0.6.5 gemma2's window was disabled too, `disable_sliding_window = True`)
INTERLEAVED_FROM = {"gemma2": (0, 6, 0), "cohere2": (0, 7, 0)}

# major.minor[.patch][rcN|aN|bN][.postN, +local, ...]: the patch at most 4 digits and whole
_PATCH = re.compile(
    r"([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4})(?![0-9]))?(?:(?:rc|a|b)[0-9]{1,4})?"
    r"(?:[.+-][0-9A-Za-z.+-]{0,20})?"
)


def release_patch(version: str) -> tuple[int, int, int | None] | None:
    """'0.8' -> (0, 8, None), '0.8.4' and '0.8.4.post1' -> (0, 8, 4); None for what no vLLM
    release spells."""
    match = _PATCH.fullmatch(str(version))
    if match is None:
        return None
    return int(match[1]), int(match[2]), None if match[3] is None else int(match[3])


def v0_release(version: str) -> tuple[int, int, int] | None:
    """'0.6' -> (0, 6, 6) (the minor's last release), '0.6.3' -> (0, 6, 3),
    '0.6.6.post1' -> (0, 6, 6); None for a release whose default engine is V1 (0.8 on)."""
    parts = release_patch(version)
    if parts is None or parts[:2] not in V0_RELEASES:
        return None
    major, minor, patch = parts
    return major, minor, LAST_PATCH[(major, minor)] if patch is None else patch


class V0Defaults(NamedTuple):
    """What a V0 release resolves for the flags left out."""

    enable_chunked_prefill: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    enable_prefix_caching: bool
    # why chunked prefill is off by default (None: on, or given): a word kvplan's notes render
    chunked_off_because: str | None = None


def chunked_prefill_default(
    release: tuple[int, int, int],
    spec: ModelSpec,
    max_model_len: int,
    *,
    vendor: str,
    prefix_caching: bool,
    speculative: bool,
) -> tuple[bool, str | None]:
    """(whether V0 turns chunked prefill on, the first reason it does not), as
    `EngineArgs.create_engine_config` decides when --enable-chunked-prefill is not given."""
    multimodal = spec.vision_tower is not None
    if multimodal and release >= (0, 6, 2):  # "disabled by default in V0" for multimodal models
        return False, "multimodal"
    if spec.has_kind(CacheKind.MLA) and release >= (0, 8, 0):  # 0.8's _set_default_args_v0
        return False, "mla"
    if max_model_len <= LONG_CONTEXT_TOKENS:
        return False, "short"
    if vendor not in ("NVIDIA", "AMD"):  # is_gpu: device_type "cuda" (CUDA or ROCm)
        return False, "not-gpu"
    if vendor == "AMD" and release >= (0, 6, 5):  # `not current_platform.is_rocm()`
        return False, "rocm"
    interleaved = release >= INTERLEAVED_FROM.get(spec.model_type, (9, 9, 9))
    if spec.has_kind(CacheKind.SLIDING) and not interleaved:  # get_sliding_window() is not None
        return False, "sliding"
    if speculative:
        return False, "speculative"
    if prefix_caching and release < (0, 6, 1):  # 0.6.0: `not self.enable_prefix_caching`
        return False, "prefix-caching"
    if spec.has_kind(CacheKind.STATE) and release < (0, 6, 3):  # seqlen-agnostic layers
        return False, "state"
    return True, None


def max_num_batched_tokens_default(
    release: tuple[int, int, int], max_model_len: int, chunked: bool, scheduler_steps: int = 1
) -> int:
    """SchedulerConfig's default token budget of a V0 release."""
    whole = max(max_model_len, NO_CHUNK_MIN_TOKENS)
    if not chunked:
        return whole
    if scheduler_steps > 1 and release >= (0, 6, 3):  # multi-step chunked prefill: no chunking
        return whole
    return CHUNKED_BUDGET_FROM_0_6_5 if release >= (0, 6, 5) else CHUNKED_BUDGET_UNTIL_0_6_4


def v0_defaults(
    release: tuple[int, int, int],
    spec: ModelSpec,
    max_model_len: int,
    *,
    chunked_given: bool | None,
    prefix_caching_given: bool | None,
    vendor: str,
    speculative: bool,
    scheduler_steps: int = 1,
) -> V0Defaults:
    """A V0 release's resolution of --enable-chunked-prefill, --max-num-batched-tokens,
    --max-num-seqs and --enable-prefix-caching (None: not given)."""
    prefix = bool(prefix_caching_given)  # off unless asked for
    why = None
    chunked = chunked_given
    if chunked is None:
        chunked, why = chunked_prefill_default(
            release,
            spec,
            max_model_len,
            vendor=vendor,
            prefix_caching=prefix,
            speculative=speculative,
        )
    budget = max_num_batched_tokens_default(release, max_model_len, chunked, scheduler_steps)
    return V0Defaults(chunked, budget, V0_MAX_NUM_SEQS, prefix, why)


V08_LAST_PATCH = 5  # "0.8" runs as 0.8.5


def v08_v0_fallback(
    version: str,
    *,
    kv_cache_dtype: str,
    pp: int,
    scheduler_steps: int,
    vendor: str,
    preemption_mode: str | None = None,
    speculative: bool = False,
    hopper: bool = False,
) -> tuple[str, ...]:
    """What, of the flags kvplan takes, sends vLLM 0.8 to its V0 engine
    (EngineArgs._is_v1_supported_oracle, with VLLM_USE_V1 unset): --preemption-mode given,
    multi-step scheduling, a --kv-cache-dtype other than auto, --pp above 1 (the mp executor,
    not Ray), a device other than CUDA; from 0.8.5 (read in its wheel) fp8 KV stays on V1 where
    FlashAttention 3 runs it (`flash_attn_supports_fp8`: compute capability 9, Hopper), and
    speculative decoding falls back (ngram and EAGLE are "experimental on VLLM_USE_V1=1",
    `_warn_or_fallback`; other methods unsupported). () for another release or none of them.
    Conditions kvplan cannot decide from flags (a V0-only architecture, compute capability
    below 8.0, --dtype float32, LoRA/prompt adapters, structured-output backends) are not
    checked."""
    parts = release_patch(version)
    if parts is None or parts[:2] != (0, 8):
        return ()
    patch = V08_LAST_PATCH if parts[2] is None else parts[2]
    fp8_on_v1 = patch >= 5 and kv_cache_dtype.startswith("fp8") and hopper
    flags = (
        (preemption_mode is not None, f"--preemption-mode {str(preemption_mode)[:20]}"),
        (scheduler_steps > 1, f"--num-scheduler-steps {scheduler_steps}"),
        (kv_cache_dtype != "auto" and not fp8_on_v1, f"--kv-cache-dtype {kv_cache_dtype}"),
        (pp > 1, f"--pp {pp}"),
        (vendor != "NVIDIA", f"a {vendor} device"),
        (speculative and patch >= 5, "speculative decoding"),
    )
    return tuple(text for given, text in flags if given)


def v08_release(version: str) -> tuple[int, int, int]:
    """The 0.8 patch whose V0 engine runs a fallback: '0.8' -> (0, 8, 5)."""
    parts = release_patch(version)
    assert parts is not None and parts[:2] == (0, 8), version
    return 0, 8, V08_LAST_PATCH if parts[2] is None else parts[2]


class V0Pool(NamedTuple):
    """V0's KV pools, as `# GPU blocks: N, # CPU blocks: M` logs them (0.7: `# cuda blocks`)."""

    block_bytes: int  # one block on the fullest rank: every attention layer's K and V
    num_gpu_blocks: int
    num_cpu_blocks: int
    available_bytes: int  # "the rest of the memory reserved for KV Cache", on that rank


def v0_pool_applies(spec: ModelSpec, release: tuple[int, int, int], max_model_len: int) -> bool:
    """Whether kvplan sizes V0's own pool for this model: every attention layer K/V attention
    (CacheEngine lays out K and V per token per layer; MLA's latent cache, 0.7's use_mla with
    its 256-byte alignment, and recurrent states are not modelled), its windows, if any, either
    dropped from V0's scheduler view (an interleaved model, INTERLEAVED_FROM) or no shorter than
    max_model_len (so V0's block manager never recycles a block of one)."""
    layers = spec.attention_layers()
    if not layers or spec.has_kind(CacheKind.STATE):
        return False
    interleaved = release >= INTERLEAVED_FROM.get(spec.model_type, (9, 9, 9))
    for a in layers:
        if a.kind is CacheKind.FULL:
            continue
        if a.kind is not CacheKind.SLIDING or a.window is None:
            return False
        if not interleaved and a.window < max_model_len:
            return False
    return True


def cache_block_bytes(layer_bytes_per_token: list[int], block_size: int) -> int:
    """CacheEngine.get_cache_block_size on one rank: block_size tokens of K and V in every
    attention layer it holds (each layer's bytes a token as vLLM lays them out,
    engines.vllm.attention_bytes_per_token: kv heads split over TP, at least one a rank)."""
    return block_size * sum(layer_bytes_per_token)


def v0_pool(available_bytes: list[int], block_bytes: list[int], swap_space_gib: float) -> V0Pool:
    """determine_num_available_blocks on every rank (one entry a pipeline stage), the executor
    keeping the minimum: num_gpu_blocks = int(available // block bytes), num_cpu_blocks =
    int(swap_space_bytes // block bytes), both at least 0."""
    rows = [
        (max(int(avail // size), 0), max(int(swap_space_gib * GIB // size), 0), size, avail)
        for avail, size in zip(available_bytes, block_bytes, strict=True)
        if size > 0
    ]
    if not rows:
        raise KvplanError("no attention layer needs a KV cache block")
    gpu = min(rows, key=lambda r: r[0])
    return V0Pool(gpu[2], gpu[0], min(r[1] for r in rows), int(gpu[3]))


def check_v0_pool(pool: V0Pool, block_size: int, max_model_len: int) -> None:
    """worker.raise_if_cache_size_invalid: V0 refuses to start without a block, or when one
    max_model_len request does not fit the pool."""
    if pool.num_gpu_blocks <= 0:
        raise KvplanError(
            "vLLM V0 would refuse to start: no available memory for the cache blocks "
            f"({pool.available_bytes / GIB:,.2f} GiB left); raise --gpu-memory-utilization"
        )
    if max_model_len > block_size * pool.num_gpu_blocks:
        raise KvplanError(
            f"vLLM V0 would refuse to start: max_model_len {max_model_len:,} is larger than the "
            f"{block_size * pool.num_gpu_blocks:,} tokens its KV cache holds "
            f"({pool.num_gpu_blocks:,} blocks); lower --max-model-len or raise "
            "--gpu-memory-utilization"
        )


def watermark_blocks(num_gpu_blocks: int) -> int:
    """BlockSpaceManager.watermark_blocks: the free blocks admission leaves untouched."""
    return int(WATERMARK * num_gpu_blocks)


def check_preemption_mode(mode: str | None, release: tuple[int, int, int] | None) -> None:
    """--preemption-mode as V0 takes it, refused where kvplan cannot run it: a V1 release (which
    preempts by recompute only) and a mode other than recompute or swap (swap's own refusals
    are check_swap's)."""
    if mode is None:
        return
    name = str(mode).strip().lower()
    if name not in PREEMPTION_MODES:
        raise KvplanError(f"--preemption-mode {str(mode)[:40]!r}: choose recompute or swap")
    if release is None:
        raise KvplanError(
            "--preemption-mode is vLLM V0's (0.6, 0.7); V1 preempts by recompute only "
            "(0.8 falls back to V0 when it is given): give --engine-version 0.7"
        )


def swaps(mode: str | None) -> bool:
    """Whether V0 preempts every request by swapping: --preemption-mode swap (unset: recompute
    for the one-sequence requests `vllm bench serve` sends)."""
    return mode is not None and str(mode).strip().lower() == "swap"


def check_swap(gpu_name: str, host_link_given: bool, pool_modelled: bool, why: str) -> None:
    """--preemption-mode swap where kvplan cannot price or size it, refused as one line: a GPU
    profile without a host_link (the copies' bandwidth), or a pool kvplan does not size as V0
    does (`why`)."""
    if not host_link_given:
        raise KvplanError(
            f"--preemption-mode swap: {gpu_name}'s profile states no host_link (the PCIe link "
            "V0's swap copies run over); add host_link to the profile or leave the flag out"
        )
    if not pool_modelled:
        raise KvplanError(f"--preemption-mode swap is simulated on V0's own KV pool only: {why}")


def check_multi_step_chunked(release: tuple[int, int, int], steps: int, chunked: bool, pp: int):
    """EngineArgs.create_engine_config's refusals of multi-step scheduling with chunked prefill:
    any before 0.6.3, with pipeline parallelism from 0.6.3."""
    if steps <= 1 or not chunked:
        return
    if release < (0, 6, 3):
        raise KvplanError(
            f"vLLM {'.'.join(map(str, release))} refuses chunked prefill with multi-step "
            "(--num-scheduler-steps > 1; allowed from 0.6.3): add --no-enable-chunked-prefill"
        )
    if pp > 1:
        raise KvplanError("vLLM V0 refuses multi-step chunked prefill with --pp above 1")


# The launch flags kvplan prints for V1 engines only (data parallelism, expert parallelism,
# multi-node launches, decode context parallelism and the --speculative-config JSON): kvplan
# plans a V0 release as one TP x PP engine without them (the kernel-backend flags' releases are
# kvplan.engines.backends')
V1_LAUNCH_FLAGS = (
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--data-parallel-size-local",
    "--nnodes",
    "--decode-context-parallel-size",
    "--speculative-config",
)


def check_v0_launch(version: str, flags: tuple[str, ...]) -> None:
    """A launch of a V0 release (0.6, 0.7) with a flag of V1_LAUNCH_FLAGS, refused as one line
    (kvplan neither simulates nor prints it for V0)."""
    release = v0_release(version)
    given = [flag for flag in flags if flag in V1_LAUNCH_FLAGS]
    if release is None or not given:
        return
    raise KvplanError(
        f"{given[0]}: kvplan plans vLLM V0 releases (0.6, 0.7; --engine-version "
        f"{str(version)[:20]}) as one TP x PP engine without it; drop it or give "
        "--engine-version 0.8 or later"
    )


def check_swap_space(gib: float | None) -> None:
    """--swap-space in GiB of CPU memory per GPU: a number from 0."""
    if gib is None:
        return
    value = float(gib)
    if not 0 <= value <= MAX_SWAP_SPACE_GIB:  # NaN fails both
        raise KvplanError(f"--swap-space {gib}: GiB of CPU memory per GPU, from 0")
