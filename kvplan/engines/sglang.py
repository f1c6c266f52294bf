"""SGLang's KV pool (model_runner_kv_cache_mixin / pool_configurator, main of April 2026).

mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3) unless given (server_args
                      _handle_gpu_memory_settings; reserved from chunked prefill, CUDA graphs,
                      TP x PP, piecewise graphs by release, at least 10 GiB on GPUs above
                      60 GiB)
rest                = free after load - free before load x (1 - mem_fraction_static)
                    = free before load x mem_fraction_static - weights
Mamba/linear-attention hybrids first give rest x r/(1+r) to the state pool (r = 0.9)
max_total_num_tokens = rest // cell_size, rounded down to the page size
cell_size (bytes per token, all layers on the rank): MHA H_kv/TP x (d + d_v) x L x elem;
MLA (kv_lora + rope) x L x elem; DSA models add the indexer key, 128 fp8 values + a 4-byte
scale per layer. With an fp8 cache a DSA pool stores 656 B per latent (fp8 latent, fp32
scales, bf16 rope) while the profile divides by 576: cell_size_bytes reports what is
allocated, profile_cell_size_bytes what the token count uses.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.dtypes import ELEMENT_BYTES, KvFormat
from kvplan.engines.backends import ATTENTION_FIELDS, Backends, flag_of
from kvplan.engines.max_len import check_max_model_len
from kvplan.engines.moe_backend import GPT_OSS_MODEL_TYPE, moe_backend_name
from kvplan.engines.releases import SGLANG_VERSION, SGLANG_VERSIONS, release_parts
from kvplan.engines.request import (
    EngineRequest,
    PiecewiseFlags,
    check_plain_tp_experts,
    config_weights_notes,
)
from kvplan.engines.sglang_04 import (
    chunked_prefill_04,
    cuda_graph_max_bs_04,
    fraction_04,
    patch_04,
)
from kvplan.engines.sglang_compressed import KV_CACHE_DTYPES as DSV4_KV_CACHE_DTYPES
from kvplan.engines.sglang_compressed import PAGE_SIZE as DSV4_PAGE_SIZE
from kvplan.engines.sglang_compressed import Dsv4Pools, dsv4_pools
from kvplan.engines.vllm import (
    CHECKPOINT_KV_CACHES,
    DTYPES,
    compute_capability_notes,
    gpu_generation,
    indexer_bytes_per_token,
)
from kvplan.engines.vllm_memory import mxfp4_alignment, weights_per_rank
from kvplan.errors import KvplanError
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import GpuProfile
from kvplan.inputs.kernel_tables import detokenizer_data, frontend_data
from kvplan.notes import Note, note, unique
from kvplan.record import NamedTuple
from kvplan.units import GIB, MIB


class SglangRules(NamedTuple):
    """Which of kvplan's SGLang rules a release runs (sglang_rules)."""

    release: str  # the known release (SGLANG_VERSIONS) whose rules and defaults apply
    patch: int | None  # the patch whose rules apply within it; None: its newest rules
    nearest: bool  # the release given is not one kvplan knows (note sim-sglang-version-nearest)

    def from_05(self, first: int, bare: bool = True) -> bool:
        """Whether a rule SGLang 0.5.`first` brought in applies: a 0.5 release at patch `first`
        or later; a bare 0.5 or a later release than kvplan knows (patch None) where `bare`
        (False for a rule dated after the newest rules kvplan models for one: April 2026's
        main); never a 0.4 release, whose patch numbers are not 0.5's. The one gate of every
        0.5-patch rule, so that 0.4.9 never passes a test meant for 0.5.9."""
        if self.release != "0.5":
            return False
        return bare if self.patch is None else self.patch >= first


def sglang_rules(version: str) -> SglangRules:
    """The rules SGLang `version` runs with, the one reading of an SGLang release every release
    rule uses (kvplan.engines.releases: release_parts, and the rule for a release kvplan does
    not know): '0.5.8.post1' -> 0.5's rules at patch 8; a bare '0.5' -> its newest (patch
    None); a release kvplan does not know -> the nearest known one's (nearest True): its newest
    rules for a later release ('0.6.1' -> 0.5, None), its first for an earlier one ('0.3' ->
    0.4, patch 0). A one-line error for what no SGLang release spells."""
    text = str(version).strip().lower().lstrip("v")
    parts = release_parts(text) if len(text) <= 40 else None
    if parts is None or parts[0] != 0 or not 1 <= parts[1] <= 99:
        raise KvplanError(
            f"SGLang version {str(version)[:20]!r}: give a release such as 0.4.6 or 0.5.8"
        )
    minor, patch = parts[1], parts[2]
    known = [int(v.split(".")[1]) for v in SGLANG_VERSIONS]
    nearest = min(known, key=lambda k: (abs(k - minor), -k))
    if nearest != minor:
        patch = None if minor > nearest else 0
    return SglangRules(f"0.{nearest}", patch, nearest != minor)


# The overlap scheduler (Scheduler.event_loop_overlap) is on by default from 0.4.0
# (server_args.py of 0.4.0: disable_overlap_schedule False, and --enable-overlap-schedule
# "is deprecated. It is enabled by default now"); 0.3 has none (0.3.0's
# ModelTpServer.forward_step runs each batch to its end before the controller receives again)
OVERLAP_DEFAULT_FROM = (0, 4)


def sglang_overlap_default(version: str) -> bool:
    """Whether SGLang `version` runs the overlap scheduler unless told not to."""
    parts = release_parts(str(version).strip().lower().lstrip("v"))
    return parts is None or parts[:2] >= OVERLAP_DEFAULT_FROM


def sglang_release(version: str) -> tuple[str, bool]:
    """'0.5.8.post1' -> ('0.5', False): the known release whose rules apply, and whether it is
    only the nearest one (sglang_rules)."""
    rules = sglang_rules(version)
    return rules.release, rules.nearest


# _handle_model_specific_adjustments, GptOssForCausalLM (server_args.py of 0.5.3, 0.5.4.post2,
# 0.5.6, 0.5.7, 0.5.8, 0.5.9): with no backend given it runs trtllm_mha on SM100, fa3 on SM90 and
# triton elsewhere, and asserts one of its backends (fa4 from 0.5.4, ascend by 0.5.9)
GPT_OSS_BACKENDS = ("triton", "trtllm_mha", "fa3")
GPT_OSS_FA4_FROM = 4  # 0.5.4 added fa4 to the list
# 0.5.3-0.5.7 set disable_hybrid_swa_memory for it unconditionally (one pool, every layer at
# full length); from 0.5.8 only where trtllm_mha runs prefill or decode ("TODO: support swa kv
# indices translation for trtllm_mha attention backend")
GPT_OSS_HYBRID_SWA_FROM = 8


# _handle_model_specific_adjustments -> _handle_mamba_radix_cache(sm100_default_attention_backend)
# (server_args of early 2026, read for kvplan issue 34): with no backend given on SM100 these
# recurrent-state hybrids (by config model_type) run the backend named, not
# _handle_attention_backend_compatibility's pick; (backend, first SGLang 0.5 patch that no longer
# names it, None: none). Qwen3-Next has run triton on Blackwell since PR #10403 (2025-09-13, page
# size 1, which MambaRadixCache needs) until PR #19030 (2026-02-19) gave hybrid Qwen models the
# general pick; kvplan takes 0.5.10 as the first release with it (0.5.9's side of that date is
# not checked) and the bare 0.5 (main, April 2026) as after it.
HYBRID_SM100_BACKENDS = {
    "qwen3_next": ("triton", 10),
    "nemotron_h": ("flashinfer", None),
    "falcon_h1": ("triton", None),
    "lfm2": ("flashinfer", None),
}
# _handle_mamba_radix_cache's no_buffer branch (the default --mamba-scheduler-strategy): a hybrid
# that keeps its radix cache (MambaRadixCache) and does not speculate runs with the overlap
# scheduler off ("mamba no_buffer is not compatible with overlap schedule"; PR #13057,
# 2025-11-11, for Qwen3-Next, later every hybrid through _handle_mamba_radix_cache), unless its
# attention backend is trtllm_mha, which cannot take the cache's 1-token pages: then the radix
# cache goes off instead and the overlap scheduler stays on (PR #14560, 2025-12-07). kvplan takes
# 0.5.6 as the first release with the rule (the first it knows after 2025-11-11).
MAMBA_NO_OVERLAP_FROM = 6
# _handle_mamba_radix_cache(support_mamba_cache=False): no MambaRadixCache for these model types,
# the radix cache goes off, and the overlap scheduler stays on; by model type, the first 0.5
# patch that keeps it. Kimi Linear: "Disabling Radix Cache for KimiLinearForCausalLM as it is
# not yet supported" in 0.5.6-0.5.8 (0.5.8 server_args.py:1411-1414), support_mamba_cache=False
# in 0.5.9-0.5.13 (0.5.9 :1524-1528, 0.5.13 :2459-2463); 0.5.14 calls
# _handle_mamba_radix_cache(model_arch) like every hybrid (0.5.14 :4142-4143), MambaRadixCache
# kept (its no_buffer and extra_buffer rules below). A bare 0.5 (April 2026's main): before it.
NO_MAMBA_RADIX_UNTIL = {"kimi_linear": 14}
# _handle_mamba_radix_cache's no_buffer branch for a speculating hybrid with the radix cache on:
# through 0.5.9 it turns the radix cache off ("Disabling radix cache since speculative decoding
# for {model_arch} is not supported with radix cache yet"); SGLang PR #19391 (merged 2026-03-04,
# after 0.5.9 of 2026-02-24) raises a ValueError instead ("... is not compatible with radix cache
# when using --mamba-scheduler-strategy no_buffer"), and PR #22908 (merged 2026-04) turned it
# back into the radix cache off on ROCm only. kvplan takes 0.5.10 as the first release with the
# error (refused, one line) and, for a bare 0.5 (no patch), the side of it on which the launch
# runs (the radix cache off, noted).
MAMBA_SPEC_RADIX_ERROR_FROM = 10
# --mamba-scheduler-strategy (server_args): no_buffer (the default; the rules above) or
# extra_buffer, added by SGLang PR #14792 (opened 2025-12-10, Qwen3-Next; Mamba2 models by PR
# #15829, opened 2025-12-25). Under extra_buffer _handle_mamba_radix_cache keeps the radix cache
# and the overlap scheduler on (it only asserts CUDA and the track interval), and each running
# request holds, beside its working state, a ping-pong track buffer of recurrent states
# (HybridReqToTokenPool.mamba_ping_pong_track_buffer_size: 2 with the overlap scheduler, 1
# without), which _calculate_mamba_ratio counts: max_running_requests <=
# max_mamba_cache_size // (MAMBA_SLOTS_PER_REQUEST + MAMBA_TRACK_SLOTS[overlap]). kvplan takes
# 0.5.7 as the first release with it (the first after 2025-12-10; the tag is not checked, nor
# whether 0.5.7 has #15829's Mamba2 support).
MAMBA_STRATEGIES = ("no_buffer", "extra_buffer")
# the parser's third choice, its default: the release resolves it (mamba_default_strategy)
MAMBA_AUTO = "auto"
MAMBA_EXTRA_BUFFER_FROM = 7
MAMBA_TRACK_SLOTS = {True: 2, False: 1}  # MAMBA_CACHE_V2_ADDITIONAL_RATIO_(NO_)OVERLAP
# What the track slots are keyed on (model_runner_kv_cache_mixin.py of the wheels): 0.5.7-0.5.9
# on speculative decoding (_NO_OVERLAP with a speculative algorithm, _OVERLAP without, whatever
# the overlap scheduler; HybridReqToTokenPool's ping-pong buffer 2 if
# speculative_num_draft_tokens is None else 1), from 0.5.10 on the overlap scheduler
# (_calculate_mamba_ratio: "ping-pong buffer size is 2 when overlap schedule is on, 1
# otherwise"). With speculative decoding under extra_buffer SGLang keeps the radix cache
# (_handle_mamba_radix_cache asserts only mamba_track_interval, 256 by default, >= the draft
# tokens): as spec v1, the overlap scheduler off, one slot in every release; as spec v2 (from
# 0.5.11, SPEC_V2_DEFAULT_FROM) beside the overlap scheduler, the overlap's 2.
MAMBA_TRACK_BY_OVERLAP_FROM = 10
# 0.5.7's _calculate_mamba_ratio (model_runner_kv_cache_mixin.py:290) adds
# MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP (2) unless extra_buffer speculates, so under no_buffer
# with the radix cache on it too caps running requests at the states // 5 (no buffer is used);
# 0.5.8 (:270) adds it under extra_buffer only. (first 0.5 patch, first without)
MAMBA_NO_BUFFER_RATIO_PATCHES = (7, 8)
# _handle_mamba_radix_cache's checks of a given --page-size under extra_buffer (before the
# backends force theirs): mamba_track_interval (256 by default; kvplan takes no flag for it)
# % page_size == 0 in every release (0.5.7 server_args.py:1421-1424, 0.5.10 :2181-2184, 0.5.14
# :4376-4377, 0.5.23 arg_groups/mamba_hook.py:135), and the FLA chunk and the page dividing
# one another: FLA_CHUNK_SIZE (64) % page_size in 0.5.7 (:1425-1427), either way from 0.5.8
# (0.5.10 :2185-2189; from 0.5.13 mamba_cache_chunk_size, 0.5.13 :7389-7400, the config's
# mamba_chunk_size in place of 64 where it states one, which kvplan does not read: with a page
# dividing 256, any power-of-two chunk passes). A chunked_prefill_size under that chunk is only
# warned about (0.5.17 :5614). mamba_track_interval >= speculative_num_draft_tokens cannot fail
# at kvplan's limit of 64 draft tokens (simulate.speculative.MAX_DRAFT_TOKENS).
MAMBA_TRACK_INTERVAL = 256
FLA_CHUNK_SIZE = 64
FLA_CHUNK_EITHER_WAY_FROM = 8  # the 0.5 patch
# _handle_mamba_radix_cache raises "mamba extra_buffer is not compatible with
# --disable-radix-cache" from 0.5.10 (server_args.py:2166), speculating or not; 0.5.7-0.5.9 run
# it, one state a request (the radix cache off: _calculate_mamba_ratio 1)
MAMBA_EXTRA_BUFFER_RADIX_ERROR_FROM = 10
# SGLang's spec v2 (EAGLEWorkerV2: the overlap scheduler kept while speculating; timed in
# simulate.speculative, SGLANG_V2_EXPOSED_PASSES), by release (the released wheels):
# SGLANG_ENABLE_SPEC_V2 (environ.py, from 0.5.5) is False to 0.5.10 (kvplan reads no
# environment: v1), True from 0.5.11, when _handle_speculative_decoding keeps the overlap
# scheduler for EAGLE/EAGLE3/STANDALONE (NEXTN is EAGLE) unless it is already off
# (--disable-overlap-schedule; _handle_pipeline_parallelism, run first, for PP > 1) or
# --speculative-eagle-topk > 1 is given ("spec v2 currently only supports topk = 1"): a check of
# the flag before auto_choose_speculative_params fills it, so an unset topk runs v2 whatever
# auto picks (0.5.11 server_args.py:3461, 0.5.12 :3749). From 0.5.13 the v1 worker is gone
# (spec_info.create_worker: EAGLEWorkerV2 with or without the overlap scheduler;
# arg_groups/speculative_hook.py _handle_eagle_family) and any topk keeps the overlap scheduler;
# with it off ("non-overlap (synchronous) spec v2") the round runs serially, timed as v1. NGRAM
# always turns the overlap scheduler off. A bare 0.5 (April 2026's main): v1.
SPEC_V2_DEFAULT_FROM = 11
SPEC_V2_ANY_TOPK_FROM = 13
# From 0.5.14 the strategy's default is "auto" (0.5.7-0.5.13 resolved auto to no_buffer
# unconditionally: 0.5.13 server_args.py:1225): _handle_mamba_radix_cache (0.5.14
# server_args.py:4385; arg_groups/overrides.py _mamba_radix_cache_resolution from 0.5.15, :1038,
# 0.5.23 :477) resolves it, the radix cache on (--disable-radix-cache returns first), to
# extra_buffer where the overlap scheduler is wanted (no --disable-overlap-schedule given: it
# runs in _handle_model_specific_adjustments, before the speculative and page-size handlers,
# server_args.py:2533) or --page-size > 1 is given, and the model "supports" it
# (_support_mamba_cache_extra_buffer, server_args.py:4338: the architecture in a list and
# --linear-attn-backend triton, the default, server_args.py:1750); otherwise to no_buffer, the
# overlap scheduler off. The list by the config's top-level model_type (kvplan's bundled
# hybrids; the architecture each writes): the first 0.5 patch whose list names it. 0.5.14:
# Qwen3NextForCausalLM, Qwen3_5(Moe)ForConditionalGeneration, NemotronHForCausalLM,
# FalconH1ForCausalLM, GraniteMoeHybridForCausalLM; 0.5.16 adds KimiLinearForCausalLM
# (_MAMBA_EXTRA_BUFFER_ARCHS, 0.5.16 arg_groups/overrides.py:1131-1136; 0.5.15's :980-994 lacks
# it); 0.5.19 adds the text-only Qwen3_5(Moe)ForCausalLM (overrides.py:519). Not LFM2
# (Lfm2ForCausalLM) in any release. KimiK3ForConditionalGeneration is listed from 0.5.17, the
# first release with a model for it; kvplan reads Kimi-K3's text config (kimi_linear) and does
# not tell it apart from Kimi Linear.
MAMBA_AUTO_FROM = 14
MAMBA_AUTO_EXTRA_BUFFER_FROM = {
    "qwen3_next": 14,
    "qwen3_5": 14,
    "qwen3_5_moe": 14,
    "nemotron_h": 14,
    "falcon_h1": 14,
    "granitemoehybrid": 14,
    "qwen3_5_text": 19,
    "qwen3_5_moe_text": 19,
    "kimi_linear": 16,
}

# A given extra_buffer asserted off per architecture before the list (0.5.7-0.5.13
# _handle_model_specific_adjustments: _handle_mamba_radix_cache(support_mamba_cache_extra_buffer=
# False) asserts "mamba extra_buffer is not supported for {model_arch} model"; 0.5.9
# server_args.py:1551 NemotronH, :1637 FalconH1, :1650 GraniteMoeHybrid, :1658 Lfm2; 0.5.7 :1310
# NemotronH, :1441 FalconH1, no Granite or Lfm2 handler; 0.5.12 drops NemotronH, 0.5.13 keeps
# Lfm2 only): config model_type -> (first 0.5 patch refusing, first accepting; None: none).
# From MAMBA_AUTO_FROM _validate_mamba_extra_buffer asserts MAMBA_AUTO_EXTRA_BUFFER_FROM's list
# (0.5.14 server_args.py:4338-4367 "extra_buffer is not supported for {model_arch}; use
# no_buffer.", 0.5.16+ arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS).
MAMBA_EXTRA_BUFFER_ARCH_REFUSED = {
    "nemotron_h": (7, 12),
    "falcon_h1": (7, 13),
    "granitemoehybrid": (9, 13),
    "lfm2": (9, None),
}
SWA_FULL_TOKENS_RATIO = 0.8  # --swa-full-tokens-ratio
MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio: state pool = rest x r / (1 + r)
MAMBA_SSM_DTYPE = "fp32"  # SGLang's default SSM state dtype (config mamba_ssm_dtype overrides)
MAMBA_CONV_DTYPE = "bf16"
# model_runner_kv_cache_mixin's MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO: state slots the pool
# keeps per running request with the radix cache on (init_memory: max_num_reqs is at most
# max_mamba_cache_size // 3)
MAMBA_SLOTS_PER_REQUEST = 3
# the (conv, SSM) dtypes SGLang keeps a recurrent state in (State.held_in): its step reads them
STATE_DTYPES = (MAMBA_CONV_DTYPE, MAMBA_SSM_DTYPE)
FP8_NSA_LATENT_BYTES = 656  # 512 fp8 + 4 fp32 scales + 64 bf16 rope (calculate_mla_kv_cache_dim)
DSA_PAGE_SIZE = 64  # "Setting page size to 64 for DeepSeek DSA." (1 on ROCm)
# SGLang's attention backends (sglang 0.5.9, python/sglang/srt/server_args.py): what
# --attention-backend, --prefill-attention-backend and --decode-attention-backend accept
# (ATTENTION_BACKEND_CHOICES), and --nsa-prefill-backend / --nsa-decode-backend (NSA_CHOICES)
SGLANG_ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
SGLANG_NSA_BACKENDS = (
    "flashmla_sparse",
    "flashmla_kv",
    "flashmla_auto",
    "fa3",
    "tilelang",
    "aiter",
    "trtllm",
)
# _handle_attention_backend_compatibility (0.5.9): the pages a backend takes, the first forced
# when the page in effect is another (trtllm_mla keeps a given 32, trtllm_mha a given 16 or 32)
SGLANG_BACKEND_PAGES = {
    "flashmla": (64,),
    "cutlass_mla": (128,),
    "trtllm_mla": (64, 32),
    "trtllm_mha": (64, 16, 32),
}
FA4_PREFILL_PAGE = 128  # fa4 as the prefill backend of a non-MLA model
SGLANG_EAGER_BACKENDS = ("torch_native", "flex_attention")  # "Cuda graph is disabled because..."
# backends that read an MLA model's latent (attention_registry: trtllm_mla "can only be used
# with MLA models"; flashmla and cutlass_mla read kv_lora_rank), and the MHA-only one
SGLANG_MLA_BACKENDS = ("flashmla", "cutlass_mla", "trtllm_mla")
SGLANG_MHA_BACKENDS = ("trtllm_mha",)
# _handle_model_specific_adjustments: DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi-K2) and
# KimiK25ForConditionalGeneration run trtllm_mla on SM100 when no backend is given
SGLANG_TRTLLM_MLA_MODELS = ("deepseek_v3", "kimi_k2", "kimi_k25")
# layers/attention/triton_ops/decode_attention.py _decode_grouped_att_m_fwd (0.5.x): the triton
# backend's grouped decode kernel runs BLOCK_H = 16 query heads a program, its grid (batch,
# cdiv(heads, min(16, query heads per KV head)), max KV splits), the heads past a block's last
# masked, not skipped: an MLA rank of 20 heads runs two programs a split, as 32 heads do
SGLANG_TRITON_DECODE_HEAD_BLOCK = 16
# models/deepseek_common/attention_backend_handler.py (0.5.x): an extend batch whose sequences
# hold no cached prefix (sum(extend_prefix_lens_cpu) == 0, no speculative extend) runs an MLA
# layer as MHA over the up-projected heads (qk_nope + qk_rope by v_head_dim, as many KV heads as
# query heads) through the backend's MHA extend kernel, the kernel its MHA rows time:
# handle_attention_triton (AttnForwardMethod.MHA), _handle_attention_backend for fa3,
# flashinfer, flashmla and cutlass_mla (MHA_ONE_SHOT / MHA_CHUNKED_KV: flash_attn_varlen_func
# on q, k, v of the MHA form under FA3), handle_attention_trtllm_mla and handle_attention_fa4
# (MHA_CHUNKED_KV); decode and chunks over cached tokens run the absorbed latent form its MLA
# rows time (but past chunked_prefix_cache_threshold, where fa3/flashinfer/trtllm_mla run
# MHA_CHUNKED_KV over the cached prefix too: not modelled), and so does a batch run under a
# piecewise CUDA graph (is_in_piecewise_cuda_graph(): AttnForwardMethod.MLA, PR #11812; kvplan:
# a step within StepModel.prefill_graph_max_tokens). Not modelled: the MLA fallbacks under
# --enable-deterministic-inference (fa3, triton) and flashinfer_mla_disable_ragged
# (flashinfer, flashmla)
SGLANG_MLA_PREFILL_AS_MHA = (
    "triton", "fa3", "flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "fa4",
)  # fmt: skip


def sglang_decode_head_block(backend: str, mla: bool) -> int:
    """The query heads an SGLang decode-attention kernel works on together, whose whole blocks
    it runs however many of a block's heads are real: the triton backend's grouped kernel for
    an MLA layer (every query head shares the latent, so a block holds
    SGLANG_TRITON_DECODE_HEAD_BLOCK of them); 1 for the others (their rows are read at the
    heads themselves)."""
    return SGLANG_TRITON_DECODE_HEAD_BLOCK if mla and backend == "triton" else 1


# model_types whose checkpoints ship Moonshot's tiktoken tokenizer (tokenization_kimi.py's
# TikTokenTokenizer, a transformers slow tokenizer): SGLang's one detokenizer process decodes
# every streamed token of them through transformers' slow decode path, which kvplan does not time
# (SGLang's environ: "Kimi tiktoken: ... the ITL can differ by +10x under high batch size";
# PRs #16427 and #25309 made that path 10x and 23-35x faster)
KIMI_TIKTOKEN_MODEL_TYPES = ("kimi_k2", "kimi_k25")


# Checkpoints, by their config's top-level model_type, that SGLang serves with a model of its own
# only from a 0.5 patch on: (patch, the architecture it registers, the file that adds it). Before
# it get_model_architecture (srt/model_loader/utils.py) finds no SGLang class for the
# architecture and resolve_transformers_arch hands it to the Transformers backend
# (models/transformers.py) if the checkpoint's remote class is_backend_compatible(), else raises
# "... has no SGlang implementation and the Transformers implementation is not compatible with
# SGLang" (0.5.6.post2 :29-81); kvplan models neither. Read from the PyPI wheels (pip download
# --no-deps sglang==V): no file of 0.5.6.post2, 0.5.7, 0.5.8 or 0.5.8.post1 names
# KimiK25ForConditionalGeneration; 0.5.9 adds models/kimi_k25.py and the architecture to
# configs/model_config.py's MLA and multimodal lists. Every architecture's first release is
# data: kvplan/data/sglang_models.json, `python scripts/sglang_model_releases.py WHEELS --write`
# over the wheels 0.4.10 and 0.5.0-0.5.23 (the architectures each release's srt/models registers
# in its EntryClass lists), keyed, as SGLang's ModelRegistry is, on the config's
# architectures[0], so a checkpoint kvplan has never seen is gated too. An architecture the
# oldest scanned release registers is taken as every release's (the 0.4 releases before
# 0.4.10 were not scanned); one no scanned release registers runs on the Transformers backend
# in every release (sglang_transformers_backend).
SGLANG_MODELS = Path(__file__).resolve().parent.parent / "data" / "sglang_models.json"


@functools.lru_cache(maxsize=1)
def _sglang_models() -> tuple[tuple[str, ...], dict[str, dict]]:
    doc = json.loads(SGLANG_MODELS.read_text(encoding="utf-8"))
    return tuple(doc["releases"]), doc["architectures"]


class OwnModelFrom(NamedTuple):
    """The 0.5 patch from which SGLang serves a checkpoint with a model of its own
    (kvplan/data/sglang_models.json), the architecture it registers and the file that adds it."""

    patch: int
    architecture: str
    path: str

    @property
    def release(self) -> str:
        return f"0.5.{self.patch}"


def sglang_own_model_from(spec: ModelSpec) -> OwnModelFrom | None:
    """The first SGLang release with a model of its own for `spec`'s checkpoint (its config's
    first architecture in kvplan/data/sglang_models.json), None where every release kvplan
    models has one, none has (sglang_transformers_backend), or the config names none."""
    arch = spec.config_architecture
    releases, table = _sglang_models()
    row = table.get(arch) if arch else None
    if row is None or row["first"] == releases[0]:
        return None
    parts = release_parts(row["first"])
    if parts is None or parts[:2] != (0, 5):
        return None
    return OwnModelFrom(parts[2] or 0, str(arch), row["path"])


def sglang_transformers_backend(spec: ModelSpec) -> bool:
    """Whether no SGLang release kvplan scanned registers `spec`'s architecture (config
    architectures[0]): SGLang serves it on its Transformers backend (resolve_transformers_arch),
    whose model code kvplan does not time (note sglang-transformers-backend)."""
    arch = spec.config_architecture
    return arch is not None and arch not in _sglang_models()[1]


def check_sglang_own_model(spec: ModelSpec, version: str) -> None:
    """Refuse a release that has no SGLang model for `spec`'s checkpoint (sglang_own_model_from):
    it would run the Transformers backend, or refuse to start, and kvplan models neither."""
    first = sglang_own_model_from(spec)
    if first is None or sglang_rules(version).from_05(first.patch):
        return
    raise KvplanError(
        f"{spec.name}: SGLang {str(version)[:20]} has no model for {first.architecture} "
        f"(srt/{first.path} arrives in {first.release}); it would fall back to the Transformers "
        f"backend or refuse to start, which kvplan does not model; give SGLang {first.release} "
        "or later"
    )


def detokenizer_untimed(spec: ModelSpec) -> bool:
    """Whether SGLang's detokenizer runs this model's tokenizer on a CPU path kvplan does not
    time (KIMI_TIKTOKEN_MODEL_TYPES): its streamed rate may be the detokenizer's, not the GPU's."""
    return spec.checkpoint_model_type in KIMI_TIKTOKEN_MODEL_TYPES


# How SGLang's detokenizer decodes KIMI_TIKTOKEN_MODEL_TYPES' tokens, by release (the 0.5 patch
# from which each path is the default): before 0.5.11 batch_decode with skip_special_tokens /
# spaces_between_special_tokens, which sends TikTokenTokenizer.decode to transformers' slow
# _decode, rebuilding all_special_tokens and all_special_ids per token (#16427's cache for them
# ships in 0.5.8 but environ.py keeps SGLANG_PATCH_TOKENIZER False, "TODO enable by default",
# through 0.5.10); 0.5.11 turns the cache on (environ.py: EnvBool(True)); 0.5.13 drops the
# keywords for slow tokenizers (#25309: detokenizer_manager.py's decode_without_hf_kwargs),
# which decodes through tiktoken itself, as fast as the fast tokenizers kvplan does not time
DETOKENIZER_PATHS = ((0, "hf_kwargs"), (11, "cached_special"), (13, "native"))
DETOKENIZER_TIMED_PATHS = ("hf_kwargs", "cached_special")  # the slow ones, timed


def detokenizer_path(spec: ModelSpec, version: str) -> str | None:
    """The decode path SGLang `version`'s detokenizer runs for `spec` (DETOKENIZER_PATHS), None
    for models off Moonshot's tokenizer. 0.5's rules by patch (sglang_rules: a bare 0.5 or a
    later release runs the newest path); 0.4's detokenizer passed the same keywords as 0.5's
    first releases."""
    if not detokenizer_untimed(spec):
        return None
    rules = sglang_rules(version)
    paths = [path for first, path in DETOKENIZER_PATHS if rules.from_05(first)]
    return paths[-1] if paths else DETOKENIZER_PATHS[0][1]


def detokenizer_token_s(spec: ModelSpec, version: str) -> float:
    """Seconds SGLang's one detokenizer process spends per streamed token per request on
    `spec`'s tokenizer under `version` (kvplan/data/kernel_tables/sglang_detokenizer.json,
    timed on another CPU than a serving host's: the detokenizer note says so); 0 where it is
    not on a slow path (EngineConfig.detokenizer_token_s)."""
    path = detokenizer_path(spec, version)
    if path not in DETOKENIZER_TIMED_PATHS:
        return 0.0
    return detokenizer_data().per_request_token_s[path]


def frontend_serial_request_s() -> float:
    """Seconds of CPU SGLang's one HTTP server process spends on each /v1/chat/completions
    request before the scheduler sees it, one request after another (http_server.py ->
    serving_chat.py apply_chat_template(tokenize=True) -> tokenizer_manager.py send_pyobj, all
    in the uvicorn process; kvplan/data/kernel_tables/sglang_frontend.json, timed on another
    CPU than a serving host's with uvicorn's own work untimed: a lower bound)."""
    return frontend_data().serial_request_s


# Device memory in use before SGLang measures "free before load" (after NCCL init): the CUDA
# context, and the communicators once ranks talk (vLLM 0.19's init snapshot on H100 SXM).
INIT_CONTEXT_BYTES = {1: int(0.51 * GIB), 2: int(1.52 * GIB)}
# _handle_gpu_memory_settings: (GPU MiB below, chunked_prefill_size, cuda_graph_max_bs tp<4, tp>=4)
MEMORY_BUCKETS = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 2048, 24, 80),
    (60 * 1024, 4096, 32, 160),
    (160 * 1024, 8192, 256, 512),
)
LARGEST_BUCKET = (16384, 512)
RESERVED_BASE_MIB = 512
RESERVED_FLOOR_MIB = 10 * 1024  # on GPUs above 60 GiB
# The piecewise-graph term of _handle_gpu_memory_settings' reserve, by release (server_args.py
# of each wheel): none before 0.5.6 (0.5.4 and 0.5.5 take the flag but reserve nothing); with
# --enable-piecewise-cuda-graph, 0.5.6 and 0.5.6.post2 (:884) piecewise_cuda_graph_max_tokens // 4
# and 0.5.7 (:945) // 8, both added after the 10 GiB floor (and the speculative term); 0.5.8
# (:1014) and 0.5.9 (:1046) 8 MiB per captured size (len(piecewise_cuda_graph_tokens) x 8),
# before the floor; from 0.5.10 (:1165-1171) the same unless disable_piecewise_cuda_graph, which
# _handle_piecewise_cuda_graph sets for its exclusions before the reserve is computed (:778,
# :784), and 1.5 GiB flat with an MLA backend ("much higher than expected with fa3")
PIECEWISE_RESERVE_FROM = 6  # the 0.5 patch
PIECEWISE_RESERVE_DIVISORS = {6: 4, 7: 8}  # 0.5.6, 0.5.7: max_tokens // this, after the floor
PIECEWISE_PER_SIZE_FROM = 8  # 0.5.8: PIECEWISE_MIB_PER_SIZE per captured size, before the floor
PIECEWISE_MIB_PER_SIZE = 8
MLA_PIECEWISE_MIB = 1536  # from 0.5.10 (PIECEWISE_DEFAULT_FROM)
# piecewise_cuda_graph_max_tokens unset: 4096 before 0.5.7 (a field default, 0.5.6.post2 :533);
# chunked_prefill_size from 0.5.7 (:902); 2,048 for an MLA backend from 0.5.8 (:981, PR #15927)
PIECEWISE_FIXED_MAX_TOKENS = 4096
PIECEWISE_CHUNKED_MAX_FROM = 7
PIECEWISE_MLA_MAX_FROM = 8
# a given --context-length caps piecewise_cuda_graph_max_tokens, given or not ("prevents PCG
# warmup from compiling graphs with more tokens than the model buffers can hold", #21112):
# 0.5.13 server_args.py:1579-1585 to 0.5.16 :4039-4045; 0.5.12 and 0.5.17 have no such clamp.
# (The default's cap to --max-total-tokens, from 0.5.10 :1262-1266, needs a flag kvplan does not
# take; nor does it read model_path, whose "llama-2" caps the default at 4,096.)
PIECEWISE_CONTEXT_CLAMP_PATCHES = (13, 17)  # (first 0.5 patch, first without)
# _generate_piecewise_cuda_graph_tokens' 64-token step between 512 and 1,024 starts at 640 in
# 0.5.8 (:1078), at 576 from 0.5.9 (:1118)
PIECEWISE_576_FROM = 9
# the flags' releases: --enable-piecewise-cuda-graph and --piecewise-cuda-graph-max-tokens from
# 0.5.4 (0.5.3's server_args has neither); --disable-piecewise-cuda-graph from 0.5.10 (none of
# 0.5.6-0.5.9 has it), where --enable-piecewise-cuda-graph is a DeprecatedAction (:5479)
PIECEWISE_FLAGS_FROM = 4
# The speculative term of _handle_gpu_memory_settings' reserve ("draft model and cuda graphs"),
# added after the 10 GiB floor, by --speculative-algorithm as typed: STANDALONE 6 GiB, NGRAM
# none, the EAGLE family (EAGLE, EAGLE3, NEXTN) 2 GiB through 0.5.9 (0.5.3 server_args.py:663-669,
# 0.5.9 :1051-1057) and 4 GiB in 0.5.10-0.5.13 (0.5.10 :1316-1322, 0.5.13 :1627-1633). Through
# 0.5.13 the target profiles its pool before the draft loads (profile_max_num_token, 0.5.10
# model_runner_kv_cache_mixin.py:144-177), so its pool is its own and the draft's weights and
# pool (as many tokens, MemoryPoolConfig) come out of this reserve. 0.5.14 drops the term
# (0.5.14 server_args.py:3276-3315) and counts the draft in the pool: both models load before
# alloc_memory_pool (model_runner.py:806-813, "draft weights are now counted",
# model_runner_kv_cache_mixin.py:102-117) and the cell grows by the draft's layers
# (pool_configurator.py:129-145): kvplan's techniques.speculative_pool_blocks.
SPEC_RESERVE_MIB = {"STANDALONE": 6144, "NGRAM": 0}  # by algorithm, every release to 0.5.13
SPEC_EAGLE_RESERVE_MIB = ((10, 4096), (0, 2048))  # (first 0.5 patch, MiB), newest first
SPEC_DRAFT_IN_POOL_FROM = 14
# server_args._handle_speculative_decoding sets max_running_requests to 48 where
# --max-running-requests is not given ("Max running requests is reset to 48 for speculative
# decoding"), in its EAGLE/EAGLE3/STANDALONE branch (NEXTN is EAGLE) and its NGRAM branch alike
SPEC_RUNNING_REQUESTS = 48
# under DP attention: MiB per captured batch size per DP rank, and more above 300 sizes
DP_GRAPH_MIB, DP_LARGE_GRAPH_MIB = 3, 1.5
MAX_PREFILL_TOKENS = 16384
VIT_BASELINE_LAYERS, VIT_BASELINE_HIDDEN = 24, 1024  # ViT-L/14, adjust_mem_fraction_for_vlm
# SGLang's --kv-cache-dtype spellings -> the format kvplan's formulas store a value in (None: the
# model dtype): the one table its allocation and the step time (kvplan.simulate.setup) read
# Only spellings a release's parser takes: no SGLang --kv-cache-dtype choices list has "fp8" or
# "float16" (0.4.6-0.5.14 server_args.py choices=[auto, fp8_e5m2, fp8_e4m3(, bf16, bfloat16,
# fp4_e2m1)], 0.5.14 :600; 0.5.16 :616-626 and 0.5.23 arg_groups/fields/model.py:209-219 add
# mxfp8, nvfp4 and fp4_mx_block16, which kvplan does not size), and SGLang maps neither
KV_CACHE_FORMATS = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
KV_CACHE_DTYPES = tuple(KV_CACHE_FORMATS)  # --kv-cache-dtype values kvplan sizes
# What SGLang's command line accepts (server_args.py, --kv-cache-dtype choices)
CLI_KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
# The first 0.5 patch whose --kv-cache-dtype choices carry a spelling the earlier releases'
# parser refuses (the wheels' server_args.py; arg_groups/fields/model.py from 0.5.20): 0.4.6,
# 0.4.10, 0.5.2 and 0.5.3 take auto, fp8_e5m2 and fp8_e4m3 only; 0.5.4 adds bf16 and bfloat16
# (0.5.5 fp4_e2m1, which kvplan does not size). No 0.4 release takes them.
KV_CACHE_DTYPE_FROM = {"bf16": 4, "bfloat16": 4}


def check_kv_cache_dtype_release(kv_cache_dtype: str, version: str) -> None:
    """A one-line error where SGLang `version`'s parser refuses `kv_cache_dtype`
    (KV_CACHE_DTYPE_FROM, kv_cache_dtype_taken): the rule of the allocation and of `plan
    --emit sglang`'s search."""
    if kv_cache_dtype_taken(kv_cache_dtype, version):
        return
    if kv_cache_dtype not in KV_CACHE_FORMATS:
        taken = [d for d in KV_CACHE_DTYPES if kv_cache_dtype_taken(d, version)]
        raise KvplanError(
            f"--kv-cache-dtype {kv_cache_dtype[:40]}: SGLang {str(version)[:20]}'s parser does "
            f"not take it; give one of {', '.join(taken)} (the choices kvplan sizes)"
        )
    raise KvplanError(
        f"--kv-cache-dtype {kv_cache_dtype}: SGLang {str(version)[:20]} does not take it (its "
        f"--kv-cache-dtype choices have it from 0.5.{KV_CACHE_DTYPE_FROM[kv_cache_dtype]}; "
        "earlier ones auto, fp8_e5m2 and fp8_e4m3 only); give fp8_e4m3, auto or a later release"
    )


def kv_cache_dtype_taken(kv_cache_dtype: str, version: str) -> bool:
    """Whether SGLang `version`'s --kv-cache-dtype choices have `kv_cache_dtype` (one kvplan
    sizes, KV_CACHE_FORMATS; KV_CACHE_DTYPE_FROM)."""
    first = KV_CACHE_DTYPE_FROM.get(kv_cache_dtype)
    return kv_cache_dtype in KV_CACHE_FORMATS and (
        first is None or sglang_rules(version).from_05(first)
    )


def kv_format(kv_cache_dtype: str, model_dtype: str) -> KvFormat:
    """The format of a --kv-cache-dtype spelling (KV_CACHE_FORMATS; auto: the model dtype)."""
    return KvFormat(KV_CACHE_FORMATS[kv_cache_dtype] or model_dtype)


def piecewise_graph_tokens(max_tokens: int, version: str = SGLANG_VERSION) -> int:
    """How many token sizes SGLang `version` captures piecewise CUDA graphs for (up to
    max_tokens; _generate_piecewise_cuda_graph_tokens of 0.5.8 on)."""
    start = 576 if sglang_rules(version).from_05(PIECEWISE_576_FROM) else 640
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(start, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_tokens)


# Piecewise CUDA graphs for prefill/extend batches (model_executor/piecewise_cuda_graph_runner.py:
# each layer's pieces between split ops such as attention captured at token counts up to
# piecewise_cuda_graph_max_tokens, a batch replaying the smallest one at least its tokens, a
# longer one run eagerly). Opt-in (--enable-piecewise-cuda-graph) from PR #10062 (merged
# 2025-10-12); the default from 0.5.10 (PR #16331, merged 2026-03-02, "Piecewise CUDA Graph
# Enabled by Default" in v0.5.10's release notes; v0.5.9 of 2026-02-24 predates it), turned off
# with --disable-piecewise-cuda-graph
PIECEWISE_DEFAULT_FROM = 10  # the 0.5 patch
# server_args: piecewise_cuda_graph_max_tokens unset is chunked_prefill_size, 2,048 for an MLA
# backend ("the introduction of piecewise cuda graph will influence the kernel dispatch", PR
# #15927)
PIECEWISE_MLA_MAX_TOKENS = 2048
# ServerArgs._handle_piecewise_cuda_graph turns them off for these (docs/advanced_features/
# piecewise_cuda_graph.md "Compatibility", sglang commit 1e52b9b): the architectures of
# model_config's piecewise_cuda_graph_disabled_model_archs kvplan reads (Qwen3NextForCausalLM;
# DeepseekV32ForCausalLM and GlmMoeDsaForCausalLM, its DSA models, until PIECEWISE_DSA_OFF_UNTIL),
# speculative decoding, DP attention, pp_size > 1, non-CUDA hardware, multimodal models
PIECEWISE_DISABLED_MODEL_TYPES = ("qwen3_next",)
# "2. Speculative decoding" is on that list in 0.5.10 only (server_args.py:1088-1090): from 0.5.11
# (:1200-1222) a speculating server keeps its piecewise graphs and their reserve. A bare 0.5
# (April 2026's main, 0.5.10's side): off. The other entries of 0.5.10-0.5.13's list need flags
# kvplan does not take (torch compile, MoE A2A backends, LoRA, GGUF, DLLM, CPU offload and the
# hierarchical cache, deterministic inference, PD disaggregation, symmetric memory, EPLB, context
# parallelism, CUDA-graph debug), so none of them removes a reserve kvplan computes.
PIECEWISE_SPEC_OFF_UNTIL = 11  # the first 0.5 patch that keeps them
# DSA models (is_deepseek_nsa: DeepSeek-V3.2, GLM-5) are excluded through 0.5.12 (model_config.py
# :330-332 ORs is_deepseek_nsa into is_piecewise_cuda_graph_disabled_model); 0.5.13 (:330-331)
# drops it and no later release (0.5.14-0.5.23, piecewise_cuda_graph_disabled_model_archs) names
# a DSA architecture. A bare 0.5 (0.5.10's side): excluded.
PIECEWISE_DSA_OFF_UNTIL = 13  # the first 0.5 patch that keeps them


class Piecewise(NamedTuple):
    """The prefill steps a replica runs under piecewise CUDA graphs: those of up to `tokens`
    tokens (0: none), and why none where none (a note's wording, None where it runs them)."""

    tokens: int
    off_because: str | None


def piecewise_default_on(version: str) -> bool:
    """Whether release `version` captures piecewise prefill graphs unasked: from 0.5.10, and
    in a bare 0.5 or a later release run with 0.5's rules (the newest kvplan models)."""
    return sglang_rules(version).from_05(PIECEWISE_DEFAULT_FROM)


def check_piecewise_flags(version: str, flags: PiecewiseFlags) -> None:
    """The piecewise-CUDA-graph flags as SGLang `version` takes them, or a one-line error:
    both switches at once, or any of them on 0.4 (the graphs are 0.5's, PR #10062)."""
    if flags.disable and flags.enable:
        raise KvplanError(
            "give one of --disable-piecewise-cuda-graph and --enable-piecewise-cuda-graph"
        )
    rules = sglang_rules(version)
    if rules.release == "0.4" and flags.given():
        raise KvplanError(
            f"{flags.given()[0].split()[0]}: SGLang 0.4 has no piecewise CUDA graphs (0.5's, "
            "PR #10062)"
        )
    if rules.release == "0.4":
        return
    if flags.disable and not rules.from_05(PIECEWISE_DEFAULT_FROM):
        raise KvplanError(
            f"--disable-piecewise-cuda-graph: SGLang {version} has no such flag (from 0.5."
            f"{PIECEWISE_DEFAULT_FROM}; before it piecewise CUDA graphs are off unless "
            "--enable-piecewise-cuda-graph)"
        )
    if flags.given() and not rules.from_05(PIECEWISE_FLAGS_FROM):
        raise KvplanError(
            f"{flags.given()[0].split()[0]}: SGLang {version} has no piecewise CUDA graphs "
            f"(from 0.5.{PIECEWISE_FLAGS_FROM}, PR #10062)"
        )


def piecewise_prefill(
    spec: ModelSpec,
    version: str,
    flags: PiecewiseFlags,
    chunked_prefill_size: int,
    excluded: str | None = None,
) -> Piecewise:
    """The prefill batches SGLang `version` replays piecewise CUDA graphs for under `flags`:
    none where off (the release's default, --disable-piecewise-cuda-graph, or `excluded`, the
    layout's reason _handle_piecewise_cuda_graph turns them off), else those of up to
    --piecewise-cuda-graph-max-tokens, by default chunked_prefill_size (2,048 for MLA)."""
    check_piecewise_flags(version, flags)
    if flags.disable:
        return Piecewise(0, "--disable-piecewise-cuda-graph")
    if not (flags.enable or piecewise_default_on(version)):
        return Piecewise(0, f"off by default before 0.5.{PIECEWISE_DEFAULT_FROM}")
    dsa_off = not sglang_rules(version).from_05(PIECEWISE_DSA_OFF_UNTIL, bare=False)
    if excluded is None and dsa_off and dsa_model(spec):
        excluded = "a DSA model"
    if excluded is None and spec.checkpoint_model_type in (PIECEWISE_DISABLED_MODEL_TYPES):
        excluded = f"{spec.model_type}'s architecture"
    if excluded is None and spec.vision_tower is not None:
        excluded = "a multimodal model"
    if excluded is not None:
        return Piecewise(0, excluded)
    return Piecewise(piecewise_max_tokens(spec, version, flags, chunked_prefill_size), None)


def piecewise_max_tokens(
    spec: ModelSpec, version: str, flags: PiecewiseFlags, chunked_prefill_size: int
) -> int:
    """SGLang `version`'s piecewise_cuda_graph_max_tokens: as given, else 4,096 before 0.5.7,
    chunked_prefill_size from it, 2,048 for an MLA backend from 0.5.8; capped to a given
    --context-length in 0.5.13-0.5.16 (PIECEWISE_CONTEXT_CLAMP_PATCHES)."""
    rules = sglang_rules(version)
    if flags.max_tokens is not None:
        tokens = flags.max_tokens
    elif not rules.from_05(PIECEWISE_CHUNKED_MAX_FROM):
        tokens = PIECEWISE_FIXED_MAX_TOKENS
    elif rules.from_05(PIECEWISE_MLA_MAX_FROM) and spec.has_kind(CacheKind.MLA):
        tokens = PIECEWISE_MLA_MAX_TOKENS
    else:
        tokens = chunked_prefill_size
    first, after = PIECEWISE_CONTEXT_CLAMP_PATCHES
    clamps = rules.from_05(first, bare=False) and not rules.from_05(after, bare=False)
    if clamps and flags.context_length is not None:
        tokens = min(tokens, flags.context_length)
    return tokens


def piecewise_reserve_mib(
    spec: ModelSpec,
    version: str,
    flags: PiecewiseFlags,
    chunked_prefill_size: int,
    excluded: str | None = None,
) -> tuple[float, bool]:
    """The MiB SGLang `version`'s default mem_fraction_static reserves for piecewise CUDA
    graphs, and whether it adds them after the 10 GiB floor (PIECEWISE_RESERVE_FROM's table):
    nothing where the graphs are off (before 0.5.10 unless --enable-piecewise-cuda-graph; from
    it with --disable-piecewise-cuda-graph or `excluded`, piecewise_prefill's reasons)."""
    rules = sglang_rules(version)
    if not rules.from_05(PIECEWISE_RESERVE_FROM):
        return 0.0, False
    if rules.from_05(PIECEWISE_DEFAULT_FROM):
        if not piecewise_prefill(spec, version, flags, chunked_prefill_size, excluded).tokens:
            return 0.0, False
    elif not flags.enable:
        return 0.0, False
    max_tokens = piecewise_max_tokens(spec, version, flags, chunked_prefill_size)
    if not rules.from_05(PIECEWISE_PER_SIZE_FROM):
        patch = rules.patch if rules.patch is not None else PIECEWISE_PER_SIZE_FROM - 1
        return float(max_tokens // PIECEWISE_RESERVE_DIVISORS[patch]), True
    if rules.from_05(PIECEWISE_DEFAULT_FROM) and spec.has_kind(CacheKind.MLA):
        return float(MLA_PIECEWISE_MIB), False
    return float(piecewise_graph_tokens(max_tokens, version) * PIECEWISE_MIB_PER_SIZE), False


def speculative_reserve_mib(version: str, algorithm: str | None) -> float:
    """The MiB SGLang `version`'s default mem_fraction_static reserves, after the 10 GiB floor,
    for --speculative-algorithm `algorithm` as typed (None: not speculating): SPEC_RESERVE_MIB
    and SPEC_EAGLE_RESERVE_MIB through 0.5.13, nothing from 0.5.14 (the pool holds the draft:
    draft_in_pool) nor on 0.4 (whose own speculative terms are engines.sglang_04's)."""
    rules = sglang_rules(version)
    if algorithm is None or rules.release != "0.5" or draft_in_pool(version):
        return 0.0
    name = str(algorithm).strip().upper()
    if name in SPEC_RESERVE_MIB:
        return float(SPEC_RESERVE_MIB[name])
    return float(next(mib for first, mib in SPEC_EAGLE_RESERVE_MIB if rules.from_05(first)))


def requested_running(given: int | None, speculative: bool) -> int | None:
    """--max-running-requests as server_args leaves it: `given`, else SPEC_RUNNING_REQUESTS
    where a speculative algorithm is given, else None (the scheduler picks from the pool:
    sglang_allocation)."""
    if given is not None:
        return given
    return SPEC_RUNNING_REQUESTS if speculative else None


def draft_in_pool(version: str) -> bool:
    """Whether SGLang `version` sizes the target's pool with the draft's weights and layers in
    it (SPEC_DRAFT_IN_POOL_FROM: 0.5.14; April 2026's main, a bare 0.5, is before it): else the
    target's pool is its own and the draft sits in the speculative reserve."""
    return sglang_rules(version).from_05(SPEC_DRAFT_IN_POOL_FROM, bare=False)


def piecewise_excluded(
    gpu: GpuProfile, speculative: bool, dp_attention: int, pp: int, version: str
) -> str | None:
    """The layout's reason SGLang `version`'s _handle_piecewise_cuda_graph turns piecewise
    prefill graphs off (PIECEWISE_DISABLED_MODEL_TYPES names the model's; speculative decoding
    before PIECEWISE_SPEC_OFF_UNTIL only), None where none."""
    spec_off = not sglang_rules(version).from_05(PIECEWISE_SPEC_OFF_UNTIL, bare=False)
    for reason, applies in (
        ("speculative decoding", speculative and spec_off),
        ("DP attention", dp_attention > 1),
        ("pipeline parallelism", pp > 1),
        (f"{gpu.device_vendor} hardware (CUDA only)", gpu.device_vendor != "NVIDIA"),
    ):
        if applies:
            return reason
    return None


def dsa_model(spec: ModelSpec) -> bool:
    """Whether the model's attention has DSA's indexer (SGLang's is_deepseek_nsa)."""
    from kvplan.formulas.batch_step import dsa_layers

    return bool(dsa_layers(spec))


def cuda_graph_batch_sizes(max_bs: int, speculative: bool = False) -> tuple[int, ...]:
    """The batch sizes SGLang 0.5 captures CUDA graphs at, up to `max_bs` (--cuda-graph-max-bs;
    server_args._generate_cuda_graph_batch_sizes): 1, 2, 4, 8, 12, then every 8 to 256, every 16
    to 511, every 32 from 512; with speculative decoding 1-8, every 2 to 32, every 4 to 64, every
    8 to 256, every 16 from 272. A decode batch replays the smallest one it fits."""
    if speculative:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += range(512, max_bs + 1, 32)
    return tuple(s for s in sizes if s <= max_bs)


def graph_batch_size(tokens: int, max_bs: int, speculative: bool = False) -> int | None:
    """The captured batch size a decode batch of `tokens` sequences replays (the smallest one
    at least as large, cuda_graph_runner.replay's bisect), None past the largest."""
    return next((s for s in cuda_graph_batch_sizes(max_bs, speculative) if s >= tokens), None)


def vlm_fraction_factor(vision_tower: tuple[int, int]) -> float:
    """adjust_mem_fraction_for_vlm's factor: 0.95 x (1 - 0.1 (L x H^2 / (24 x 1024^2) - 1)),
    the bracket kept within 0.8 and 1.05 (L, H: the vision_config's layers and hidden size)."""
    layers, hidden = vision_tower
    ratio = layers * hidden**2 / (VIT_BASELINE_LAYERS * VIT_BASELINE_HIDDEN**2)
    return 0.95 * min(max(1 - 0.1 * (ratio - 1), 0.8), 1.05)


class FractionDefault(NamedTuple):
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_bytes: float


def default_mem_fraction(
    spec: ModelSpec,
    gpu: GpuProfile,
    tp: int,
    pp: int,
    version: str = SGLANG_VERSION,
    dp_attention: int = 1,
    piecewise: PiecewiseFlags = PiecewiseFlags(),
    piecewise_off: str | None = None,
    speculative_algorithm: str | None = None,
    dp_size: int = 1,
) -> FractionDefault:
    """SGLang's own mem_fraction_static for this GPU and layout (its server_args heuristic),
    at release `version` (any release sglang_rules reads). `tp` is the server's --tp;
    `dp_size` its --dp-size without DP attention (independent replicas; 0.4.6's graph sizes
    read it); `dp_attention` its --dp-size under --enable-dp-attention (1: off), which 0.5 reserves
    cuda_graph_max_bs x dp x 3 MiB more for ("DP attention needs more padding"), x 4.5 above
    300; `piecewise` the piecewise-graph flags and `piecewise_off` the layout's reason they are
    off (piecewise_excluded), which decide the piecewise term (piecewise_reserve_mib);
    `speculative_algorithm` --speculative-algorithm as typed (speculative_reserve_mib)."""
    gpu_mib = gpu.usable_memory_bytes / MIB
    rules = sglang_rules(version)
    if rules.release == "0.4":  # by patch (engines.sglang_04)
        at = patch_04(version, rules.patch, rules.nearest)
        vlm = vlm_fraction_factor(spec.vision_tower) if spec.vision_tower else None
        speculative = speculative_algorithm is not None
        cuda = gpu.device_vendor == "NVIDIA"  # is_cuda()
        fraction = fraction_04(at, gpu_mib, tp, pp, cuda, speculative, dp_attention > 1, vlm)
        chunked = chunked_prefill_04(at, gpu_mib)
        graphs = cuda_graph_max_bs_04(at, gpu_mib, tp, max(dp_attention, dp_size))
        return FractionDefault(fraction, chunked, graphs, gpu.usable_memory_bytes * (1 - fraction))
    chunked, graphs = LARGEST_BUCKET
    for limit, size, small_tp, large_tp in MEMORY_BUCKETS:
        if gpu_mib < limit:
            chunked, graphs = size, (small_tp if tp < 4 else large_tp)
            break
    reserved = RESERVED_BASE_MIB + max(chunked, 2048) * 1.5 + graphs * 2 + tp * pp / 8 * 1024
    if dp_attention > 1:
        reserved += (
            graphs * dp_attention * (DP_GRAPH_MIB + (DP_LARGE_GRAPH_MIB if graphs > 300 else 0))
        )
    piecewise_mib, after_floor = piecewise_reserve_mib(
        spec, version, piecewise, chunked, piecewise_off
    )
    if not after_floor:
        reserved += piecewise_mib
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, RESERVED_FLOOR_MIB)
    reserved += speculative_reserve_mib(version, speculative_algorithm)
    if after_floor:
        reserved += piecewise_mib
    fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    if spec.vision_tower:  # adjust_mem_fraction_for_vlm: not rounded again
        fraction *= vlm_fraction_factor(spec.vision_tower)
    return FractionDefault(fraction, chunked, graphs, reserved * MIB)


def sglang_model_dtype(spec: ModelSpec, dtype: str) -> tuple[str, list[Note]]:
    """SGLang's --dtype (configs/model_config.py _get_and_verify_dtype): auto serves a float32
    config as float16 (bfloat16 for Gemma); an explicit dtype is used as given."""
    key = str(dtype).strip().lower()
    if key not in DTYPES:
        raise KvplanError(f"--dtype {str(dtype)[:40]!r}: choose from {', '.join(DTYPES)}")
    chosen = DTYPES[key]
    if chosen is None:
        if spec.dtype != "fp32":
            return spec.dtype, []
        half = "bf16" if spec.model_type.startswith("gemma") else "fp16"
        return half, [note("engine-dtype-downcast", engine="SGLang", dtype=half)]
    if chosen != spec.dtype:
        return chosen, [note("engine-dtype-cast", config=spec.dtype, dtype=chosen)]
    return chosen, []


class SglangAttention(NamedTuple):
    """The attention kernels an SGLang server runs and what they force (sglang_attention)."""

    prefill: str | None  # the backend of each phase; None: the release's default, not modelled
    decode: str | None
    nsa_prefill: str | None  # DSA models: the NSA kernels of each phase (else None)
    nsa_decode: str | None
    page_size: int
    cuda_graph: bool  # False: the backend turns CUDA graphs off
    given: bool  # a backend flag was given
    forced_page: bool  # the page size is the backend's, not SGLang's default of 1


def _checked_backend(flag: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    if value not in choices:
        raise KvplanError(
            f"{flag} {str(value)[:40]!r} is not an SGLang backend; choose from {', '.join(choices)}"
        )
    return value


def check_sglang_backends(backends: Backends) -> tuple[str | None, ...]:
    """(attention, prefill, decode, NSA prefill, NSA decode) backends given, each refused unless
    SGLang's argparse takes it."""
    return tuple(
        _checked_backend(
            flag_of(name),
            getattr(backends, name),
            SGLANG_NSA_BACKENDS if name.startswith("nsa") else SGLANG_ATTENTION_BACKENDS,
        )
        for name in ATTENTION_FIELDS
    )


def _default_sglang_backend(
    spec: ModelSpec, gpu: GpuProfile, tp: int, topk: int | None, version: str = SGLANG_VERSION
) -> str:
    """_handle_attention_backend_compatibility's pick when no backend is given (0.5.9), or
    _handle_model_specific_adjustments' for gpt-oss (GPT_OSS_MODEL_TYPE) and, on SM100, for
    the recurrent-state hybrids of HYBRID_SM100_BACKENDS in SGLang `version`."""
    generation = gpu_generation(gpu)
    if spec.model_type == GPT_OSS_MODEL_TYPE:
        return "trtllm_mha" if generation == 10 else "fa3" if generation == 9 else "triton"
    hybrid = HYBRID_SM100_BACKENDS.get(spec.model_type)
    if generation == 10 and hybrid is not None:
        backend, until = hybrid
        # `until` is a 0.5 patch: a 0.4 release is before it
        if until is None or not sglang_rules(version).from_05(until):
            return backend
    hip = gpu.vendor.upper() == "AMD"
    attn = spec.attention_layers()[0]
    if attn.kind is not CacheKind.MLA:
        if generation == 9 and (topk or 1) == 1:  # "flashinfer 0.6.1 ... regression on Hopper"
            return "fa3"
        if generation == 10 and (topk or 1) == 1:
            return "trtllm_mha"
        return "aiter" if hip else "flashinfer"
    if generation == 9:
        return "fa3"
    if generation == 10:
        return "flashinfer"
    if hip:  # aiter takes 16 or 128 heads per rank (an MLA config states as many KV as Q heads)
        return "aiter" if max(1, attn.num_q_heads // tp) in (16, 128) else "triton"
    return "triton"


def nsa_default_backends(kv_cache_dtype: str, generation: int) -> tuple[str, str]:
    """(prefill, decode) NSA kernels SGLang picks for a DSA model on a CUDA GPU of compute
    capability major `generation` unless --nsa-prefill-backend / --nsa-decode-backend name
    them (0.5.9 server_args.py _set_default_nsa_backends): an fp8_e4m3 cache flashmla_auto and
    flashmla_kv, a bfloat16 one flashmla_sparse and trtllm from SM100, else flashmla_sparse and
    fa3."""
    if kv_cache_dtype == "fp8_e4m3":
        return "flashmla_auto", "flashmla_kv"
    return "flashmla_sparse", "trtllm" if generation >= 10 else "fa3"


# server_args._handle_speculative_decoding (arg_groups/speculative_hook.py _handle_eagle_family
# from 0.5.13): an EAGLE/EAGLE3/STANDALONE draft tree (--speculative-eagle-topk > 1) on pages of
# more than one token runs on these attention backends only ("speculative_eagle_topk > 1 with
# page_size > 1 is unstable and produces incorrect results for paged attention backends"), a
# ValueError on any other: (first 0.5 patch, backends), read in the released wheels: flashinfer
# from 0.5.2 (0.5.1's has no such check), fa3 beside it from 0.5.6, triton from 0.5.13
# (_PAGE_TREE_SPEC_BACKENDS, "the two-pass cascade draft-decode"), the same to 0.5.23. NGRAM,
# whose topk is its BFS breadth, takes flashinfer alone from its first release (0.5.3) on.
EAGLE_TREE_PAGE_BACKENDS = (
    (2, ("flashinfer",)),
    (6, ("flashinfer", "fa3")),
    (13, ("flashinfer", "fa3", "triton")),
)
NGRAM_TREE_PAGE_BACKENDS = (3, ("flashinfer",))
NEWEST_RULES_PATCH = 10  # the last 0.5 patch whose rules a bare 0.5 (April 2026's main) has


def eagle_tree_page_backends(version: str, ngram: bool = False) -> tuple[str, ...] | None:
    """The attention backends SGLang `version` runs a draft tree on pages of more than one token
    with (EAGLE_TREE_PAGE_BACKENDS, NGRAM_TREE_PAGE_BACKENDS); None: the release has no rule."""
    rules = sglang_rules(version)
    table = (NGRAM_TREE_PAGE_BACKENDS,) if ngram else EAGLE_TREE_PAGE_BACKENDS
    taken = [b for first, b in table if rules.from_05(first, bare=first <= NEWEST_RULES_PATCH)]
    return taken[-1] if taken else None


def check_eagle_tree_pages(
    tree: tuple[str, int] | None, page: int, backend: str | None, version: str
) -> None:
    """A one-line error where SGLang `version` refuses a speculative draft tree (`tree`: the
    kvplan method and its resolved topk; None: not speculating) on `page`-token pages under
    attention backend `backend` (eagle_tree_page_backends)."""
    if tree is None or tree[1] <= 1 or page <= 1:
        return
    backends = eagle_tree_page_backends(version, ngram=tree[0] == "ngram")
    if backends is None or backend in backends:
        return
    raise KvplanError(
        f"SGLang {str(version)[:20]} refuses speculative_eagle_topk > 1 with page_size > 1 "
        f"(here {tree[1]} and {page}) on the {backend} attention backend (only on "
        f"{', '.join(backends)}): give --page-size 1, --speculative-eagle-topk 1 or one of those "
        "backends"
    )


def sglang_attention(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: EngineRequest,
    version: str,
    kv_cache_dtype: str,
) -> SglangAttention:
    """The attention backends SGLang runs for this model and GPU, the page size they force and
    whether they keep CUDA graphs (sglang 0.5.9 server_args: _handle_model_specific_adjustments,
    _handle_attention_backend_compatibility, _set_default_nsa_backends, _handle_page_size;
    layers/attention/attention_registry.py), refused as SGLang refuses them. Release 0.4: a given
    backend forces its page as 0.5.9 does; the default backend is not modelled (page 1)."""
    backend, prefill, decode, nsa_prefill, nsa_decode = check_sglang_backends(request.backends)
    given = any(x is not None for x in (backend, prefill, decode, nsa_prefill, nsa_decode))
    attn = spec.attention_layers()[0]
    mla = attn.kind is CacheKind.MLA
    dsa = mla and bool(attn.indexer_head_dim)
    generation = gpu_generation(gpu)
    hip = gpu.vendor.upper() == "AMD"
    page = request.block_size
    if prefill is not None and prefill == decode:
        backend = prefill
    unset = backend is None and prefill is None and decode is None
    if dsa:  # DeepSeek DSA: the nsa backend, 64-token pages on CUDA, 1 on ROCm
        if unset:
            backend = "nsa"
        page = 1 if hip else DSA_PAGE_SIZE
        if not hip:
            default_prefill, default_decode = nsa_default_backends(kv_cache_dtype, generation)
            nsa_prefill = nsa_prefill or default_prefill
            nsa_decode = nsa_decode or default_decode
    else:
        nsa_prefill = nsa_decode = None  # read for DSA models only
    if unset and version == "0.5" and mla and generation == 10:
        if spec.model_type in SGLANG_TRTLLM_MLA_MODELS and not dsa:
            backend = "trtllm_mla"
    gpt_oss = version == "0.5" and spec.model_type == GPT_OSS_MODEL_TYPE
    if backend is None and version == "0.5":
        backend = _default_sglang_backend(
            spec, gpu, request.tp, request.speculative_eagle_topk, request.sglang_version
        )
    if backend == "fa3" and kv_cache_dtype == "fp8_e5m2":  # "FlashAttention3 only supports
        backend = "triton"  # fp8_e4m3 if using FP8; Setting attention backend to triton."
    prefill_kernel, decode_kernel = prefill or backend, decode or backend
    if gpt_oss:
        supported: tuple[str, ...] = GPT_OSS_BACKENDS
        if sglang_rules(request.sglang_version).from_05(GPT_OSS_FA4_FROM):
            supported = (*supported, "fa4")
        refused = [k for k in (prefill_kernel, decode_kernel) if k not in supported]
        if refused:
            raise KvplanError(
                f"SGLang refuses this launch for {spec.name}: GptOssForCausalLM requires one "
                f"of {list(supported)} attention backend, but got {refused[0]!r}"
            )
    for kernel in {prefill_kernel, decode_kernel} - {None}:
        why = None
        if kernel in SGLANG_MLA_BACKENDS and not mla:
            why = f"{kernel} backend can only be used with MLA models"
        elif kernel in SGLANG_MHA_BACKENDS and mla:
            why = f"{kernel} backend can only be used with non-MLA models"
        elif kernel == "nsa" and not dsa:
            why = "the nsa backend runs DeepSeek sparse attention (DSA) models only"
        elif kernel == "trtllm_mla" and generation not in (10, 12):
            why = "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x)"
        elif kernel == "trtllm_mha" and generation != 10:
            why = "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100)"
        elif kernel == "fa3" and not (generation == 9 or (generation == 8 and not mla)):
            why = "FlashAttention v3 Backend requires SM>=80 and SM<=90 (SM90 for MLA)"
        if why:
            raise KvplanError(f"SGLang refuses this launch for {spec.name} on {gpu.name}: {why}")
    forced = False
    for kernel, pages in SGLANG_BACKEND_PAGES.items():
        phases = (backend, decode) if kernel != "trtllm_mha" else (backend, decode, prefill)
        if kernel in phases and page not in pages:
            page, forced = pages[0], True
    if prefill == "fa4" and not mla:
        page, forced = FA4_PREFILL_PAGE, True
    check_eagle_tree_pages(request.speculative_tree, page or 1, backend, request.sglang_version)
    return SglangAttention(
        prefill=prefill_kernel,
        decode=decode_kernel,
        nsa_prefill=nsa_prefill,
        nsa_decode=nsa_decode,
        page_size=page or 1,
        cuda_graph=backend not in SGLANG_EAGER_BACKENDS,
        given=given,
        forced_page=forced,
    )


class SglangResult(NamedTuple):
    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    tp: int
    pp: int
    max_model_len: int
    dtype: str
    kv_cache_dtype: str
    mla: bool
    num_layers: int
    kv_heads_per_rank: int
    head_dim: int
    element_bytes: int
    mem_fraction_static: float
    mem_fraction_given: bool
    chunked_prefill_size: int
    cuda_graph_max_bs: int  # SGLang's default for the GPU and TP
    free_before_load_bytes: int | None
    weights_bytes: float | None
    pool_bytes: int
    mamba_pool_bytes: int
    max_mamba_cache_size: int | None
    mamba_conv_bytes: int
    mamba_ssm_bytes: int
    cell_size_bytes: int  # what the pool allocates per token (all layers on the rank)
    profile_cell_size_bytes: int  # what SGLang divides the pool by
    indexer_bytes_per_token: int
    num_blocks: int
    block_size: int
    kv_cache_tokens: int
    full_tokens: int | None
    swa_tokens: int | None
    full_layers: int
    indexer_layers: int  # layers holding a DSA indexer key
    # hybrid SWA: each sub-pool's K+V bytes per token per layer (its own layers' shape)
    full_layer_bytes_per_token: int | None
    swa_layer_bytes_per_token: int | None
    max_running_requests: int
    max_concurrency: float
    padding_layers: int
    required_bytes_per_request: int
    fits: bool
    estimated_max_model_len: int | None
    notes: tuple[Note, ...]


def speculative_state_slots(max_running_requests: int, draft_tokens: int, dp: int = 1) -> int:
    """Recurrent states SGLang reserves for a speculative verification before it splits the
    rest between the state and KV pools (model_runner_kv_cache_mixin.handle_max_mamba_cache:
    mamba_cache_per_req x max_running_requests // dp x speculative_num_draft_tokens, the
    intermediate SSM and conv states of every verified position)."""
    return max_running_requests // dp * draft_tokens


def mamba_ratio_track_slots(track_slots: int, version: str) -> int:
    """The track slots _calculate_mamba_ratio counts beside MAMBA_SLOTS_PER_REQUEST: the
    strategy's (mamba_track_slots), or under no_buffer on 0.5.7 (MAMBA_NO_BUFFER_RATIO_PATCHES)
    the overlap ratio all the same."""
    first, fixed = MAMBA_NO_BUFFER_RATIO_PATCHES
    rules = sglang_rules(version)
    if track_slots or not rules.from_05(first, bare=False) or rules.from_05(fixed):
        return track_slots
    return MAMBA_TRACK_SLOTS[True]


def mamba_capped_requests(
    requests: int, max_mamba_cache_size: int | None, radix_cache: bool = True, track_slots: int = 0
) -> int:
    """max_running_requests under a hybrid's state pool (init_memory: at most
    max_mamba_cache_size // _calculate_mamba_ratio: MAMBA_SLOTS_PER_REQUEST, plus the
    extra_buffer strategy's `track_slots` (mamba_track_slots), whether given or SGLang's
    default, and // 1 with the radix cache off: _calculate_mamba_ratio returns 1 under
    disable_radix_cache); `requests` as it is without a state pool (None: none)."""
    if max_mamba_cache_size is None:
        return requests
    per_request = MAMBA_SLOTS_PER_REQUEST + track_slots if radix_cache else 1
    return min(requests, max(max_mamba_cache_size // per_request, 1))


# --speculative-skip-dp-mlp-sync (scheduler.get_next_batch_to_run skips the sync of the new
# prefill batches): in the argument parser of the SGLang wheels 0.5.11 to 0.5.22 only
# (server_args.py of 0.5.11-0.5.13, arg_groups/speculative_hook.py and the fields from 0.5.14);
# 0.5.10's has no such flag, and 0.5.23's wheel names speculative_skip_dp_mlp_sync nowhere (its
# scheduler syncs the new batch first unless SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION). The
# 0.5 patches (first with it, first without it again); a bare 0.5 (kvplan's newest rules)
# takes it.
SKIP_DP_MLP_SYNC_PATCHES = (11, 23)


def skip_dp_mlp_sync_accepted(version: str) -> bool:
    """Whether SGLang `version`'s argument parser takes --speculative-skip-dp-mlp-sync
    (SKIP_DP_MLP_SYNC_PATCHES): `plan` searches it and `simulate` takes it there only."""
    rules = sglang_rules(version)
    first, gone = SKIP_DP_MLP_SYNC_PATCHES
    return rules.from_05(first) and not rules.from_05(gone, bare=False)


def check_skip_dp_mlp_sync_release(version: str) -> None:
    """--speculative-skip-dp-mlp-sync refused, one line, for a release whose argument parser
    refuses it (skip_dp_mlp_sync_accepted)."""
    if skip_dp_mlp_sync_accepted(version):
        return
    first, gone = SKIP_DP_MLP_SYNC_PATCHES
    raise KvplanError(
        f"SGLang {str(version)[:20]} has no --speculative-skip-dp-mlp-sync (its argument "
        f"parser has it from 0.5.{first} to 0.5.{gone - 1}; 0.5.{gone} removed it)"
    )


# The strategy flag's spellings by release (the wheels' argument parsers): 0.5.7-0.5.13 take
# --mamba-scheduler-strategy; 0.5.14 renamed the field mamba_radix_cache_strategy
# (--mamba-radix-cache-strategy, server_args.py:1731) and kept the old flag as a
# DeprecatedAliasStoreAction onto it (server_args.py:6350) up to 0.5.19 (server_args.py:3920);
# 0.5.20's parser (arg_groups/fields/exec_.py) has the new spelling only. The 0.5 patches
# (first with the new spelling, first without the old); a bare 0.5 (April 2026's main, before
# 0.5.14) the old spelling alone.
MAMBA_STRATEGY_FLAGS = ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")
MAMBA_STRATEGY_RENAMED = (14, 20)


def mamba_strategy_flags(version: str) -> tuple[str, ...]:
    """The spellings of the strategy flag SGLang `version`'s parser takes (MAMBA_STRATEGY_FLAGS,
    the one `plan` prints last); whether the release has the flag at all is
    check_mamba_strategy_release's."""
    rules = sglang_rules(version)
    renamed, gone = MAMBA_STRATEGY_RENAMED
    old, new = MAMBA_STRATEGY_FLAGS
    if not rules.from_05(renamed, bare=False):
        return (old,)
    return (new,) if rules.from_05(gone) else (old, new)


def mamba_strategy_flag(version: str) -> str:
    """The spelling `plan` prints for SGLang `version`: the newer of those it takes."""
    return mamba_strategy_flags(version)[-1]


def check_mamba_strategy_flag(flag: str, version: str) -> None:
    """A one-line error for a spelling of the strategy flag SGLang `version` refuses."""
    taken = mamba_strategy_flags(version)
    if flag in taken:
        return
    renamed, gone = MAMBA_STRATEGY_RENAMED
    raise KvplanError(
        f"SGLang {str(version)[:20]} takes {taken[0]}, not {flag} (renamed "
        f"--mamba-radix-cache-strategy in 0.5.{renamed}; the old spelling up to 0.5.{gone - 1})"
    )


def check_mamba_strategy_release(strategy: str | None, version: str) -> None:
    """A given --mamba-scheduler-strategy (either choice) refused, one line, for a release
    before the flag: it came with extra_buffer (PR #14792, MAMBA_EXTRA_BUFFER_FROM), so the
    release's argument parser refuses the flag itself."""
    if strategy is None or sglang_rules(version).from_05(MAMBA_EXTRA_BUFFER_FROM):
        return
    name = str(strategy).strip().lower()[:20]
    raise KvplanError(
        f"SGLang {version} has no --mamba-scheduler-strategy {name} (the flag is from "
        f"0.5.{MAMBA_EXTRA_BUFFER_FROM}, PR #14792)"
    )


def sglang_spec_v2(version: str, given_topk: int | None, overlap_off: bool) -> bool:
    """Whether SGLang `version` runs an EAGLE-family speculation (EAGLE, EAGLE3, NEXTN,
    STANDALONE; the caller excludes NGRAM) as spec v2 beside the overlap scheduler
    (SPEC_V2_DEFAULT_FROM): not where the overlap scheduler is off before the speculative
    handler runs (`overlap_off`: --disable-overlap-schedule, PP > 1), nor, before
    SPEC_V2_ANY_TOPK_FROM, where --speculative-eagle-topk > 1 is given (`given_topk`: the flag
    as given, None unset, whatever topk SGLang then picks)."""
    rules = sglang_rules(version)
    if overlap_off or not rules.from_05(SPEC_V2_DEFAULT_FROM, bare=False):
        return False
    return rules.from_05(SPEC_V2_ANY_TOPK_FROM, bare=False) or (given_topk or 1) <= 1


# Spec v2's KV over-allocation: before each round the v2 worker tops a running request's KV
# allocation up to kv_committed_len + 2 x get_alloc_len_per_decode() ("a double-buffer that
# absorbs the kv_committed_len lag in overlap mode"), get_alloc_len_per_decode being
# max(steps x topk, draft tokens) at page 1 or topk 1, else max(ceil((page - 1 + steps) / page)
# pages x page x topk, draft tokens) (0.5.11 speculative/eagle_info_v2.py:122-131 and
# managers/utils.py:204-228, which raises NotImplementedError at page > 1 with topk > 1;
# 0.5.13 mem_cache/common.py:155-191; 0.5.16 and 0.5.23 mem_cache/allocation_sizing.py, the
# top-up page-aligned from 0.5.19). The slots stay taken from the pool (the admission's free
# tokens exclude them) and check_decode_mem asks for the top-up
# (_new_tokens_required_next_decode_spec_v2). Where the batch runs the v2 schema
# (ScheduleBatch.is_spec_v2): 0.5.11-0.5.12 only beside the overlap scheduler (sglang_spec_v2);
# from 0.5.13, when the v1 worker is gone, for every EAGLE-family algorithm, overlap or not.
SPEC_V2_RESERVE_ROUNDS = 2
SPEC_V2_SCHEMA_ALWAYS_FROM = SPEC_V2_ANY_TOPK_FROM  # 0.5.13: EAGLEWorkerV2 alone


def spec_v2_reserve_tokens(
    version: str,
    method: str,
    num_steps: int,
    topk: int,
    draft_tokens: int,
    page_size: int,
    overlap_v2: bool,
) -> int:
    """KV slots a running request holds from its committed length on under SGLang `version`'s
    spec v2 (the comment above): 2 x get_alloc_len_per_decode(); 0 where the batch runs spec
    v1's schema (NGRAM always; 0.5.11-0.5.12 without the overlap scheduler, `overlap_v2`
    False; a bare 0.5 and 0.5.10, which run v1). A one-line error where 0.5.11-0.5.12 would
    raise (page > 1 with topk > 1)."""
    rules = sglang_rules(version)
    always = rules.from_05(SPEC_V2_SCHEMA_ALWAYS_FROM, bare=False)
    if method == "ngram" or not (overlap_v2 or always):
        return 0
    if page_size == 1 or topk == 1:
        per_round = max(num_steps * topk, draft_tokens)
    elif not always:
        raise KvplanError(
            f"SGLang {str(version)[:20]} runs spec v2 here and cannot size its decode allocation "
            f"at page size {page_size} with --speculative-eagle-topk {topk} "
            '("get_alloc_len_per_decode not implemented for page_size > 1 and spec_topk > 1")'
        )
    else:
        pages_per_branch = (page_size - 1 + num_steps + page_size - 1) // page_size
        per_round = max(pages_per_branch * page_size * topk, draft_tokens)
    return SPEC_V2_RESERVE_ROUNDS * per_round


def spec_v2_lookahead_tokens(reserve: int) -> int:
    """Of spec v2's reserve (spec_v2_reserve_tokens; 0: none), the slots a decoding request
    holds past the token it decodes (kvplan simulate's EngineConfig.spec_lookahead)."""
    return max(reserve - 1, 0)


# SGLang 0.5's auto_choose_speculative_params: (num_steps, eagle_topk, num_draft_tokens)
SGLANG_AUTO_LLAMA = (5, 4, 8)  # LlamaForCausalLM, Grok-1
SGLANG_AUTO = (3, 1, 4)  # DeepSeek V2/V3, GPT-OSS, GLM-4 MoE, STANDALONE, the rest


def sglang_auto_params(spec: ModelSpec, method: str) -> tuple[int, int, int]:
    """SGLang's (num_steps, eagle_topk, num_draft_tokens) when none is given
    (auto_choose_speculative_params): Llama's for a Llama target drafted by EAGLE or its MTP
    layers, the rest's otherwise (STANDALONE's draft model included)."""
    llama = spec.model_type == "llama" and method != "draft_model"
    return SGLANG_AUTO_LLAMA if llama else SGLANG_AUTO


def with_spec_v2_concurrency(spec: ModelSpec, result: SglangResult, request) -> SglangResult:
    """`kvplan engine`'s SGLang result for a launch with --speculative-algorithm (request:
    EngineRequest) and SGLang's default draft tree (sglang_auto_params):
    its concurrency holds spec v2's per-request reserve past max_model_len
    (spec_v2_lookahead_tokens, as simulate's engine holds it), with the reserve's note; the
    result as it is where the release runs spec v1's schema (NGRAM, spec v2 off)."""
    name = str(request.speculative_algorithm or "").upper()
    if not name:
        return result
    method = {"NGRAM": "ngram", "STANDALONE": "draft_model"}.get(name, name.lower())
    if method == "ngram":
        return result
    steps, topk, draft_tokens = sglang_auto_params(spec, method)
    topk = request.speculative_eagle_topk or topk
    v2 = sglang_spec_v2(request.sglang_version, request.speculative_eagle_topk, request.pp > 1)
    reserve = spec_v2_reserve_tokens(
        request.sglang_version, method, steps, topk, draft_tokens, result.block_size, v2
    )
    if not reserve:
        return result
    held = result.max_model_len + spec_v2_lookahead_tokens(reserve)
    return result._replace(
        max_concurrency=result.kv_cache_tokens / held,
        notes=(
            *result.notes,
            note("sglang-spec-v2-kv", reserve=reserve, tokens=result.kv_cache_tokens),
        ),
    )


def mamba_strategy_name(strategy: str | None) -> str:
    """A given --mamba-scheduler-strategy as SGLang's parser spells it (MAMBA_STRATEGIES, case
    and spaces as kvplan takes them; None: no_buffer), one line for any other name."""
    name = str(strategy or "no_buffer").strip().lower()
    if name not in MAMBA_STRATEGIES:
        raise KvplanError(
            f"--mamba-scheduler-strategy {str(strategy)[:20]!r}: choose "
            f"{' or '.join(MAMBA_STRATEGIES)}"
        )
    return name


def check_mamba_strategy_given(spec: ModelSpec, strategy: str | None, version: str) -> str:
    """The checks of a given strategy that hold whatever the launch's GPU, page or flags
    (mamba_strategy_name, check_mamba_strategy_release, extra_buffer on a model without
    recurrent state): mamba_track_slots' first, and `plan`'s before its search. The name."""
    name = mamba_strategy_name(strategy)
    check_mamba_strategy_release(strategy, version)
    if name == "extra_buffer" and not spec.has_kind(CacheKind.STATE):
        raise KvplanError(
            f"--mamba-scheduler-strategy extra_buffer needs a model with recurrent state; "
            f"{spec.name} has none"
        )
    return name


def mamba_track_slots(
    spec: ModelSpec,
    gpu: GpuProfile,
    strategy: str | None,
    version: str,
    overlap: bool,
    speculative: bool,
    radix_cache: bool,
    spec_v2: bool = False,
    page_size: int | None = None,
) -> int:
    """The recurrent states a running request holds beside its own under --mamba-scheduler-
    strategy `strategy` (MAMBA_STRATEGIES; None: no_buffer): extra_buffer's ping-pong track
    buffer (MAMBA_TRACK_SLOTS, by whether the overlap scheduler runs, or before
    MAMBA_TRACK_BY_OVERLAP_FROM whether SGLang speculates; speculating as spec v1: 1), 0 under
    no_buffer and where the radix cache is off regardless (mamba_radix_unsupported).
    One-line errors where SGLang refuses it (before MAMBA_EXTRA_BUFFER_FROM, off CUDA, a model
    without recurrent state, extra_buffer with the radix cache off and no speculation: PR
    #19169, a given `page_size` it asserts against: check_mamba_extra_buffer_page).
    Speculating as SGLang's spec v2 beside the overlap scheduler (`spec_v2`, sglang_spec_v2):
    the overlap scheduler's slots (EAGLEWorkerV2._mamba_verify_update tracks the states;
    0.5.11's _calculate_mamba_ratio and HybridReqToTokenPool key them on it)."""
    name = check_mamba_strategy_given(spec, strategy, version)
    if name == "no_buffer":
        return 0
    if gpu.device_vendor != "NVIDIA":
        raise KvplanError(
            "SGLang runs --mamba-scheduler-strategy extra_buffer on CUDA devices only "
            "(_handle_mamba_radix_cache)"
        )
    if not radix_cache:
        if sglang_rules(version).from_05(MAMBA_EXTRA_BUFFER_RADIX_ERROR_FROM):
            raise KvplanError(
                f"SGLang {str(version)[:20]} refuses --mamba-scheduler-strategy extra_buffer "
                "with --disable-radix-cache (_handle_mamba_radix_cache, from "
                f"0.5.{MAMBA_EXTRA_BUFFER_RADIX_ERROR_FROM}): use no_buffer"
            )
        return 0  # one state a request (_calculate_mamba_ratio: 1 without the radix cache)
    if mamba_radix_unsupported(spec, version):
        return 0  # the radix cache goes off first: no track buffer (enable_mamba_extra_buffer)
    check_mamba_extra_buffer_arch(spec, version)
    check_mamba_extra_buffer_page(page_size, version)
    if speculative:
        # spec v1: the overlap scheduler off; spec v2 keeps it (from 0.5.11, keyed on it)
        return MAMBA_TRACK_SLOTS[spec_v2]
    if not sglang_rules(version).from_05(MAMBA_TRACK_BY_OVERLAP_FROM):
        return MAMBA_TRACK_SLOTS[True]  # keyed on speculation: 2 without it
    return MAMBA_TRACK_SLOTS[overlap]


def mamba_extra_buffer_arch_taken(spec: ModelSpec, version: str) -> bool:
    """Whether SGLang `version` takes --mamba-scheduler-strategy extra_buffer for this model's
    architecture (by config model_type): the per-architecture asserts before MAMBA_AUTO_FROM
    (MAMBA_EXTRA_BUFFER_ARCH_REFUSED), the list from it (MAMBA_AUTO_EXTRA_BUFFER_FROM)."""
    rules = sglang_rules(version)
    model_type = spec.checkpoint_model_type
    if rules.from_05(MAMBA_AUTO_FROM, bare=False):
        first = MAMBA_AUTO_EXTRA_BUFFER_FROM.get(model_type)
        return first is not None and rules.from_05(first, bare=False)
    refused = MAMBA_EXTRA_BUFFER_ARCH_REFUSED.get(model_type)
    if refused is None:
        return True
    first, until = refused  # a bare 0.5 (April 2026's main, 0.5.10's side): before `until`
    return not rules.from_05(first) or (until is not None and rules.from_05(until, bare=False))


def check_mamba_extra_buffer_arch(spec: ModelSpec, version: str) -> None:
    """One line where SGLang `version` asserts a given extra_buffer off for this architecture
    (mamba_extra_buffer_arch_taken)."""
    if not mamba_extra_buffer_arch_taken(spec, version):
        raise KvplanError(
            f"SGLang {str(version)[:20]} refuses --mamba-scheduler-strategy extra_buffer for "
            f'{spec.name} ({spec.checkpoint_model_type}: "extra_buffer is not supported", '
            "its _handle_mamba_radix_cache): use no_buffer"
        )


def check_mamba_extra_buffer_page(page_size: int | None, version: str) -> None:
    """One line where SGLang `version` asserts against a given --page-size under
    --mamba-scheduler-strategy extra_buffer (MAMBA_TRACK_INTERVAL, FLA_CHUNK_SIZE); None: no
    page given, nothing checked."""
    if page_size is None:
        return
    rules = sglang_rules(version)
    chunk, page = FLA_CHUNK_SIZE, page_size
    if MAMBA_TRACK_INTERVAL % page:
        why = f"mamba_track_interval {MAMBA_TRACK_INTERVAL} must be divisible by page_size {page}"
    elif not rules.from_05(FLA_CHUNK_EITHER_WAY_FROM) and chunk % page:
        why = f"the page size must divide FLA_CHUNK_SIZE {chunk}"
    elif max(chunk, page) % min(chunk, page):
        why = f"FLA_CHUNK_SIZE {chunk} or page_size {page} must divide the other"
    else:
        return
    raise KvplanError(
        f"SGLang {str(version)[:20]} refuses --mamba-scheduler-strategy extra_buffer with "
        f"--page-size {page}: {why} (_handle_mamba_radix_cache)"
    )


def mamba_default_strategy(
    spec: ModelSpec,
    gpu: GpuProfile,
    version: str,
    overlap_off_given: bool,
    page_size: int | None,
    radix: bool,
) -> str | None:
    """The strategy SGLang `version` runs a hybrid with when none is given (None: the release
    or the model never resolves one, no_buffer's rules): "extra_buffer" where "auto"
    (MAMBA_AUTO_FROM) picks it, the radix cache on (`radix`), for a model whose config
    model_type the release lists (MAMBA_AUTO_EXTRA_BUFFER_FROM) and the overlap scheduler not
    turned off by the flag (`overlap_off_given`) or a --page-size > 1; else "no_buffer".
    One line where it resolves to extra_buffer off CUDA: SGLang then asserts "extra_buffer
    needs CUDA/MUSA/NPU (FLA)" (_validate_mamba_extra_buffer, server_args.py:4368)."""
    if not radix or not mamba_radix_rules(spec, version):
        return None
    if mamba_radix_unsupported(spec, version):
        return None
    rules = sglang_rules(version)
    if not rules.from_05(MAMBA_AUTO_FROM, bare=False):
        return None
    first = MAMBA_AUTO_EXTRA_BUFFER_FROM.get(spec.checkpoint_model_type)
    wanted = not overlap_off_given or (page_size or 1) > 1
    if first is not None and rules.from_05(first, bare=False) and wanted:
        if gpu.device_vendor != "NVIDIA":
            raise KvplanError(
                f"SGLang {str(version)[:20]}'s default --mamba-radix-cache-strategy auto "
                f"resolves to extra_buffer for {spec.name}, which it asserts on CUDA only "
                "(_validate_mamba_extra_buffer): launch it with --mamba-radix-cache-strategy "
                "no_buffer (kvplan simulate and plan take that flag)"
            )
        return "extra_buffer"
    return "no_buffer"


def mamba_radix_unsupported(spec: ModelSpec, version: str) -> bool:
    """Whether SGLang `version` keeps no MambaRadixCache for this model type at all
    (support_mamba_cache=False: NO_MAMBA_RADIX_UNTIL, Kimi Linear before 0.5.14)."""
    first = NO_MAMBA_RADIX_UNTIL.get(spec.model_type)
    return first is not None and not sglang_rules(version).from_05(first, bare=False)


def mamba_radix_rules(spec: ModelSpec, version: str) -> bool:
    """Whether SGLang `version` runs server_args._handle_mamba_radix_cache for this model: a
    recurrent-state hybrid at 0.5.6 or later (MAMBA_NO_OVERLAP_FROM; a bare 0.5: its newest)."""
    return spec.has_kind(CacheKind.STATE) and sglang_rules(version).from_05(MAMBA_NO_OVERLAP_FROM)


class MambaStrategy(NamedTuple):
    """The mamba strategy SGLang runs a launch with (resolve_mamba_strategy)."""

    track_slots: int  # extra_buffer's track-buffer states a running request holds (0: none)
    # what SGLang's default auto resolved to (None: a strategy was given, or no auto applies):
    # EngineRequest.mamba_strategy_auto, the notes sglang-mamba-auto and -extra-buffer
    auto: str | None


def resolve_mamba_strategy(
    spec: ModelSpec,
    gpu: GpuProfile,
    given: str | None,
    version: str,
    *,
    overlap: bool,
    overlap_off_given: bool,
    page_size: int | None,
    radix_cache: bool,
    speculative: bool = False,
    spec_v2: bool = False,
) -> MambaStrategy:
    """The strategy `given` (None: SGLang's default, auto, as `version` resolves it:
    mamba_default_strategy) and its track slots (mamba_track_slots): the one resolution
    `kvplan engine` and `kvplan simulate` (and so `plan`) share. `overlap`: the overlap
    scheduler runs; `overlap_off_given`: it was turned off by the flag."""
    auto = None
    if given is None:
        auto = mamba_default_strategy(spec, gpu, version, overlap_off_given, page_size, radix_cache)
    slots = mamba_track_slots(
        spec,
        gpu,
        given or auto,
        version,
        overlap,
        speculative,
        radix_cache,
        spec_v2=spec_v2,
        page_size=page_size,
    )
    return MambaStrategy(slots, auto)


def with_launch_mamba_strategy(
    spec: ModelSpec, gpu: GpuProfile, request: EngineRequest, given: str | None = None
) -> EngineRequest:
    """`request` with the track slots of the mamba strategy `given` (None: SGLang's default)
    for a launch with SGLang's defaults beside it (the overlap scheduler on, no speculation):
    what `kvplan engine` and `capacity --emit sglang` size (resolve_mamba_strategy)."""
    mamba = resolve_mamba_strategy(
        spec,
        gpu,
        given,
        request.sglang_version,
        overlap=True,
        overlap_off_given=False,
        page_size=request.block_size,
        radix_cache=request.radix_cache,
    )
    return request._replace(mamba_track_slots=mamba.track_slots, mamba_strategy_auto=mamba.auto)


def speculative_radix_off(spec: ModelSpec, version: str, strategy: str | None = None) -> bool:
    """Whether SGLang `version` keeps no radix cache for this model while it speculates under
    the no_buffer strategy (sglang_radix_off's "speculative" and its error from
    MAMBA_SPEC_RADIX_ERROR_FROM): `kvplan plan` launches such a layout with
    --disable-radix-cache, which SGLang then runs as it would itself, or needs to start.
    Never under `strategy` extra_buffer, which keeps it (mamba_track_slots)."""
    if str(strategy or "").strip().lower() == "extra_buffer":
        return False
    return mamba_radix_rules(spec, version) and not mamba_radix_unsupported(spec, version)


def sglang_radix_off(
    spec: ModelSpec, gpu: GpuProfile, request: EngineRequest, attention_backend: str | None
) -> str | None:
    """Why SGLang runs this model without its radix cache (None: it keeps it): "given"
    (--disable-radix-cache), else server_args._handle_mamba_radix_cache for a recurrent-state
    hybrid from 0.5.6 (MAMBA_NO_OVERLAP_FROM, the first release kvplan reads it in):
    "unsupported" (support_mamba_cache=False: mamba_radix_unsupported), "speculative" (the
    no_buffer strategy with a speculative algorithm: MAMBA_SPEC_RADIX_ERROR_FROM; refused where
    SGLang raises), "trtllm_mha" (no_buffer, not speculating, on the trtllm_mha backend, which
    cannot take MambaRadixCache's 1-token pages). One home for the pool
    (sglang_allocation) and the simulated prefix cache (simulate.setup)."""
    if not request.radix_cache:
        return "given"
    if not mamba_radix_rules(spec, request.sglang_version):
        return None
    rules = sglang_rules(request.sglang_version)
    if mamba_radix_unsupported(spec, request.sglang_version):
        return "unsupported"
    if request.mamba_track_slots:
        return None  # extra_buffer: _handle_mamba_radix_cache keeps it whatever the backend
    if request.speculative:
        amd = gpu.device_vendor == "AMD"
        if rules.from_05(MAMBA_SPEC_RADIX_ERROR_FROM, bare=False) and not amd:
            flag = mamba_strategy_flag(request.sglang_version)
            raise KvplanError(
                f"SGLang {request.sglang_version} refuses speculative decoding on {spec.name} "
                f"with the radix cache under {flag} no_buffer "
                "(server_args._handle_mamba_radix_cache, PR #19391): add --disable-radix-cache "
                f"or give {flag} extra_buffer"
            )
        return "speculative"
    if attention_backend == "trtllm_mha":
        return "trtllm_mha"
    return None


def mamba_radix_overlap_off(
    spec: ModelSpec, version: str, attention_backend: str | None, speculative: bool, radix: bool
) -> bool:
    """Whether SGLang `version` turns its overlap scheduler off for this model: a
    recurrent-state hybrid that keeps the radix cache (`radix`), does not speculate, and runs
    an attention backend other than trtllm_mha (MAMBA_NO_OVERLAP_FROM's rule; a speculative
    hybrid's overlap scheduler is off in any case, spec v1)."""
    if not radix or speculative:
        return False
    if mamba_radix_unsupported(spec, version) or attention_backend == "trtllm_mha":
        return False
    return mamba_radix_rules(spec, version)


def _mamba_bytes_per_request(stage: ModelSpec, tp: int) -> tuple[int, int]:
    """(conv, ssm) bytes of one request's state over the stage's linear layers."""
    conv = ssm = 0
    for state in stage.state_layers():
        conv_elements, ssm_elements = state.elements(tp)
        conv += conv_elements * ELEMENT_BYTES[MAMBA_CONV_DTYPE]
        ssm += ssm_elements * ELEMENT_BYTES[MAMBA_SSM_DTYPE]
    return conv, ssm


class SglangCompressedResult(NamedTuple):
    """DeepSeek-V4's pools in SGLang 0.5.14 (kvplan.engines.sglang_compressed)."""

    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    tp: int
    pp: int
    max_model_len: int
    dtype: str
    kv_cache_dtype: str
    block_size: int
    pools: Dsv4Pools
    kv_cache_tokens: int  # max_total_num_tokens: the full pool
    max_running_requests: int
    max_concurrency: float
    fits: bool
    notes: tuple[Note, ...]


DSV4_SGLANG_VERSION = "0.5.14"
DSV4_SGLANG_GENERATIONS = (9, 10, 12)  # CUDA GPUs the dsv4 attention backend serves


def sglang_compressed_allocation(
    spec: ModelSpec, gpu: GpuProfile, request: EngineRequest
) -> SglangCompressedResult:
    """DeepSeek-V4 in SGLang 0.5.14 from the pool memory the engine logged."""
    from kvplan.engines.request import check_kv_memory_given, refuse_backends_for_compressed

    refuse_backends_for_compressed(request, "SGLang")
    check_kv_memory_given(request, gpu)
    moe_backend_name(
        "sglang", request.backends.moe_runner_backend, sglang_release(request.sglang_version)[0]
    )
    name = spec.name
    dtype = request.kv_cache_dtype
    if sglang_release(request.sglang_version)[0] != "0.5":
        raise KvplanError(
            f"{name}: SGLang {request.sglang_version} has no DeepSeek-V4 pools; kvplan models "
            f"{DSV4_SGLANG_VERSION}'s"
        )
    if dtype == "bfloat16":
        raise KvplanError(
            f"--kv-cache-dtype bfloat16 with {name}: SGLang 0.5.14 accepts it for DeepSeek-V4, "
            "but kvplan does not model that pool (its fp8 rows are asserted 584 B); give "
            "fp8_e4m3 or auto"
        )
    if dtype not in DSV4_KV_CACHE_DTYPES:
        raise KvplanError(
            f"--kv-cache-dtype {dtype} with {name}: SGLang 0.5.14 refuses it (AssertionError: "
            f'"{dtype} is not supported for DeepseekV4ForCausalLM"; fp8_e4m3 or bfloat16)'
        )
    if gpu_generation(gpu) not in DSV4_SGLANG_GENERATIONS:
        raise KvplanError(
            f"{name} on {gpu.name}: kvplan models SGLang's DeepSeek-V4 pools on NVIDIA Hopper "
            "and Blackwell only (its ROCm and NPU pools differ)"
        )
    if request.block_size not in (None, DSV4_PAGE_SIZE):
        raise KvplanError(
            f"--page-size {request.block_size} with {name}: SGLang 0.5.14 sets page_size "
            f"{DSV4_PAGE_SIZE} for DeepSeek-V4 whatever is given (apply_deepseek_v4_defaults)"
        )
    if request.pp != 1:
        raise KvplanError(f"{name}: kvplan models SGLang's DeepSeek-V4 pools at PP 1 only")
    if request.kv_cache_memory_bytes is None:
        raise KvplanError(
            f"{name}: kvplan does not estimate SGLang's pool memory for DeepSeek-V4 (its fp4 "
            "experts and replicated compressor and indexer projections are not modelled); give "
            '--kv-cache-memory with the available_bytes of SGLang\'s "DSV4 memory calculation" '
            "line"
        )
    spec.check_tp(request.tp)
    too_long = check_max_model_len(
        spec, "sglang", request.max_model_len, request.allow_long_max_model_len
    )
    model_dtype, dtype_notes = sglang_model_dtype(spec, request.dtype)
    pools = dsv4_pools(spec, request.kv_cache_memory_bytes)
    if pools.full_tokens <= 0:
        raise KvplanError(
            f"{name}: {request.kv_cache_memory_bytes / GIB:,.2f} GiB holds no page of SGLang's "
            "DeepSeek-V4 pools"
        )
    notes = [
        *spec.source_notes,
        *compute_capability_notes(gpu),
        *([too_long] if too_long else []),
        *dtype_notes,
        note(
            "sglang-dsv4-pools",
            version=DSV4_SGLANG_VERSION,
            bytes_per_full_token=pools.bytes_per_full_token,
            layers=pools.layers,
            c4_layers=pools.c4_layers,
            c128_layers=pools.c128_layers,
        ),
    ]
    if dtype == "auto":
        notes.append(note("sglang-dsv4-dtype"))
    full = pools.full_tokens
    return SglangCompressedResult(
        kvplan_version=__version__,
        engine="sglang",
        engine_version=DSV4_SGLANG_VERSION,
        model={"name": name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        max_model_len=request.max_model_len,
        dtype=model_dtype,
        kv_cache_dtype="fp8_e4m3",
        block_size=DSV4_PAGE_SIZE,
        pools=pools,
        kv_cache_tokens=full,
        max_running_requests=pools.max_running_requests,
        max_concurrency=full / request.max_model_len,
        fits=full >= request.max_model_len,
        notes=unique(notes),
    )


def cuda_ipc_held_bytes(spec: ModelSpec, pool_bytes: int) -> int:
    """What SGLANG_USE_CUDA_IPC_TRANSPORT=1 holds on GPU 0 before the scheduler measures its free
    memory: the tokenizer process's multimodal processor (BaseMultimodalProcessor.__init__)
    allocates its MmItemMemoryPool of `pool_bytes` there, in a CUDA context of its own
    (INIT_CONTEXT_BYTES[1]); a text-only model builds no multimodal processor and holds
    nothing. SGLang takes the free memory as the minimum over ranks, so every rank's pool
    shrinks by it. The launch starts the schedulers and then the tokenizer manager
    (_launch_subprocesses), which reserves the pool while the schedulers import and initialise
    NCCL: kvplan takes the reservation as made before "free before load" is measured."""
    if not pool_bytes or not spec.vision_params:
        return 0
    return pool_bytes + INIT_CONTEXT_BYTES[1]


# --kv-cache-dtype auto (ModelRunner's kv-cache-dtype step: model_runner.py from 0.5.3,
# mem_cache/kv_cache_dtype.py configure_kv_cache_dtype from 0.5.16, the same to 0.5.23): fp8_e4m3
# (float8_e4m3fnuz on ROCm) where the model's quant_config has kv_cache_quant_algo "FP8", else the
# model dtype. Which configs carry that attribute, by release (the wheels; the first 0.5 patch
# by the config that states the checkpoint's cache, inputs.quantization.CHECKPOINT_KV_METHODS):
# ModelOptFp4Config from 0.5.3 (0.5.2's model_runner has no such step; 0.5.3's
# ModelOptFp8Config keeps kv_cache_quant_method, which the step does not read), every ModelOpt
# config through ModelOptQuantConfig from 0.5.4, ModelOptMixedPrecisionConfig (MIXED_PRECISION,
# w4afp8 before it) from 0.5.10, CompressedTensorsConfig's kv_cache_quant_algo property (a
# static per-tensor FP8 kv_cache_scheme) from 0.5.19. vLLM's rule: engines.vllm
# checkpoint_kv_cache_dtype.
SGLANG_CHECKPOINT_KV_FROM = {
    "modelopt-fp4": 3,
    "modelopt-fp8": 4,
    "modelopt-mixed": 10,
    "compressed-tensors": 19,
}


def sglang_checkpoint_kv_from(spec: ModelSpec) -> int | None:
    """The first 0.5 patch SGLang takes `spec`'s stated KV cache from for --kv-cache-dtype auto
    (SGLANG_CHECKPOINT_KV_FROM, by the config that states it; its step takes kv_cache_quant_algo
    "FP8" only, so an nvfp4 statement keeps auto), None where no release does."""
    if spec.checkpoint_kv_cache != "fp8":
        return None
    return SGLANG_CHECKPOINT_KV_FROM.get(spec.checkpoint_kv_method or "")


def sglang_checkpoint_kv_cache_dtype(
    spec: ModelSpec, kv_cache_dtype: str, version: str
) -> tuple[str, list[Note]]:
    """--kv-cache-dtype `kv_cache_dtype` as SGLang `version` resolves auto from the checkpoint
    (SGLANG_CHECKPOINT_KV_FROM; ModelSpec.checkpoint_kv_cache), and the note that says so."""
    first = sglang_checkpoint_kv_from(spec)
    if kv_cache_dtype != "auto" or first is None:
        return kv_cache_dtype, []
    resolved = CHECKPOINT_KV_CACHES["fp8"][0]
    if not sglang_rules(version).from_05(first, bare=first <= NEWEST_RULES_PATCH):
        return kv_cache_dtype, []
    return resolved, [
        note(
            "sglang-checkpoint-kv-cache",
            version=str(version)[:20],
            kv_cache_dtype=resolved,
            method=spec.checkpoint_kv_method,
            first=f"0.5.{first}",
        )
    ]


def sglang_allocation(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> SglangResult:
    """SGLang's token pool (DeepSeek-V4's compressed pools: sglang_compressed_allocation,
    refused here)."""
    from kvplan.engines.request import check_kv_memory_given, refuse_gqa_indexer

    refuse_gqa_indexer(spec, "SGLang")
    check_sglang_own_model(spec, request.sglang_version)
    check_kv_memory_given(request, gpu)
    check_piecewise_flags(request.sglang_version, request.piecewise)
    check_kv_cache_dtype_release(request.kv_cache_dtype, request.sglang_version)
    spec.check_tp(request.tp)
    check_plain_tp_experts(spec, request)
    too_long = check_max_model_len(
        spec, "sglang", request.max_model_len, request.allow_long_max_model_len
    )
    dtype, dtype_notes = sglang_model_dtype(spec, request.dtype)
    notes = [
        *spec.source_notes,
        *config_weights_notes(spec, request),
        *compute_capability_notes(gpu),
        *([too_long] if too_long else []),
        *dtype_notes,
    ]
    if sglang_transformers_backend(spec):
        notes.append(note("sglang-transformers-backend", architecture=spec.config_architecture))
    spec = spec._replace(dtype=dtype)
    version, _ = sglang_release(request.sglang_version)
    moe_backend_name("sglang", request.backends.moe_runner_backend, version)
    # under DP attention the server's --tp is the group's (request.tp a rank's attention TP)
    server_tp = request.tp * request.dp_attention
    default = default_mem_fraction(
        spec,
        gpu,
        server_tp,
        request.pp,
        request.sglang_version,
        request.dp_attention,
        request.piecewise,
        piecewise_excluded(
            gpu, request.speculative, request.dp_attention, request.pp, request.sglang_version
        ),
        request.speculative_algorithm,
        request.dp_size,
    )
    fraction = request.mem_fraction_static
    given = fraction is not None
    if fraction is None:
        fraction = default.mem_fraction_static
    if not 0.05 <= fraction <= 1:
        raise KvplanError("--mem-fraction-static must be between 0.05 and 1")
    stages = pp_stages(spec, request.pp)
    index = max(range(len(stages)), key=lambda i: len(stages[i].attention_layers()))
    stage = stages[index]
    attn = stage.attention_layers()
    if not attn:
        raise KvplanError(f"{spec.name} has no attention layer for SGLang's KV pool")
    a = attn[0]
    mla = a.kind is CacheKind.MLA
    kv_dtype = request.kv_cache_dtype
    if a.indexer_head_dim and kv_dtype == "auto":  # _set_default_nsa_kv_cache_dtype
        kv_dtype = "fp8_e4m3" if gpu_generation(gpu) >= 10 else "bfloat16"
        notes.append(note("sglang-dsa-dtype", dtype=kv_dtype))
    # server_args picks the backends from the flag; the model runner resolves auto after it
    attention = sglang_attention(spec, gpu, request, version, kv_dtype)
    kv_dtype, checkpoint_kv = sglang_checkpoint_kv_cache_dtype(
        spec, kv_dtype, request.sglang_version
    )
    notes.extend(checkpoint_kv)
    fmt = kv_format(kv_dtype, dtype)
    elem = ELEMENT_BYTES[fmt.name]
    page = attention.page_size
    if attention.given or attention.forced_page:
        notes.append(
            note(
                "sglang-attention",
                prefill=attention.prefill,
                decode=attention.decode,
                nsa_prefill=attention.nsa_prefill,
                nsa_decode=attention.nsa_decode,
                page=page,
                forced=attention.forced_page,
                graphs=attention.cuda_graph,
            )
        )
    layers = len(attn)
    notes.append(note("sglang-rules", version=version, fraction=fraction, given=given))
    free_before = weights = None
    if request.kv_cache_memory_bytes is not None:
        rest = request.kv_cache_memory_bytes
    else:
        wdtype, weights_notes = resolve_weights_dtype(spec, request.weights_dtype)
        notes += weights_notes
        last = index == len(stages) - 1
        weights = weights_per_rank(
            spec,
            stage,
            index == 0,
            last,
            wdtype,
            request.tp,
            sglang_mxfp4_alignment(gpu),
            request.expert_ranks,
            mlp_ranks=server_tp if request.dp_attention > 1 else None,
            embedding_ranks=1 if request.dp_attention > 1 else None,
            dense_mlp_ranks=request.moe_dense_tp_size,
            head_ranks=request.tp if request.enable_dp_lm_head else None,
        ).total_bytes
        kept = triton_kernels_kept_bytes(spec, stage, gpu, request, version, wdtype)
        if kept:
            weights += kept
            notes.append(
                note("sglang-triton-kernels-kept", kept_bytes=kept, hopper=gpu_generation(gpu) == 9)
            )
        context = INIT_CONTEXT_BYTES[1 if server_tp * request.pp == 1 else 2]
        free_before = int(gpu.usable_memory_bytes - context)
        held = cuda_ipc_held_bytes(spec, request.cuda_ipc_pool_bytes)
        free_before -= held
        rest = int(free_before * fraction - weights)
        if request.cuda_ipc_pool_bytes:
            notes.append(
                note(
                    "sglang-cuda-ipc-pool",
                    pool_bytes=request.cuda_ipc_pool_bytes,
                    held_bytes=held,
                    fraction=fraction,
                    later_bytes=rest - int(held * (1 - fraction)),
                )
            )
        notes.append(
            note(
                "sglang-pool",
                free_before_bytes=free_before,
                fraction=fraction,
                weights_bytes=weights,
                pool_bytes=rest,
            )
        )
    if rest <= 0:
        raise KvplanError(
            "no memory is left for SGLang's KV pool: the weights do not fit under "
            f"--mem-fraction-static {round(fraction, 4)}"
        )
    mamba_pool = conv_bytes = ssm_bytes = 0
    max_mamba = None
    conv_req, ssm_req = _mamba_bytes_per_request(stage, request.tp)
    radix_off = sglang_radix_off(spec, gpu, request, attention.decode)
    if radix_off is not None and radix_off != "given":
        notes.append(
            note(
                "sglang-radix-off",
                reason=radix_off,
                patch=sglang_rules(request.sglang_version).patch,
            )
        )
    if request.mamba_strategy_auto is not None:
        notes.append(note("sglang-mamba-auto", strategy=request.mamba_strategy_auto))
    if conv_req + ssm_req:
        spec_bytes = (conv_req + ssm_req) * request.speculative_state_slots
        if spec_bytes:
            rest -= spec_bytes
            notes.append(
                note(
                    "sglang-mamba-spec",
                    slots=request.speculative_state_slots,
                    state_bytes=conv_req + ssm_req,
                    reserved_bytes=spec_bytes,
                )
            )
            if rest <= 0:
                raise KvplanError(
                    "no memory is left for SGLang's KV pool after the speculative "
                    f"verification's recurrent states ({spec_bytes / GIB:,.2f} GiB per GPU): "
                    "lower --max-running-requests or --speculative-num-draft-tokens"
                )
        if radix_off is not None and request.max_running_requests is not None:
            # handle_max_mamba_cache: with the radix cache off and max_running_requests set
            # (given, or 48 when speculating: server_args), max_mamba_cache_size is
            # max_running_requests // the DP-attention size, one state a request, and the rest
            # of the memory is the KV pool's
            max_mamba = max(request.max_running_requests // request.dp_attention, 1)
            mamba_pool = max_mamba * (conv_req + ssm_req)
            notes.append(note("sglang-mamba-no-radix", slots=max_mamba, ssm=MAMBA_SSM_DTYPE))
        else:
            mamba_pool = int(rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO))
            max_mamba = mamba_pool // (conv_req + ssm_req)
            notes.append(note("sglang-mamba", ratio=MAMBA_FULL_MEMORY_RATIO, ssm=MAMBA_SSM_DTYPE))
            if request.mamba_track_slots:
                notes.append(
                    note(
                        "sglang-mamba-extra-buffer",
                        track=request.mamba_track_slots,
                        ratio=MAMBA_SLOTS_PER_REQUEST + request.mamba_track_slots,
                        decided=(
                            mamba_strategy_flag(request.sglang_version)
                            if request.mamba_strategy_auto is None
                            else "auto"
                        ),
                    )
                )
        conv_bytes, ssm_bytes = max_mamba * conv_req, max_mamba * ssm_req
        rest -= mamba_pool
        if rest <= 0:
            raise KvplanError(
                "no memory is left for SGLang's KV pool after the recurrent-state pool "
                f"({mamba_pool / GIB:,.2f} GiB per GPU): lower --max-running-requests"
            )
    # a DSA indexer key on the layers that run their own indexer (GLM-5.3: not every layer)
    indexed = [x for x in attn if x.indexer_head_dim] if mla else []
    indexer = indexer_bytes_per_token(indexed[0]) if indexed else 0
    if 0 < len(indexed) < len(attn):
        notes.append(note("sglang-partial-indexer", layers=len(indexed), of=len(attn)))
    heads = a.kv_heads_per_rank(request.tp)
    per_layer = fmt.head_vector_bytes(a.head_dim) if mla else a.kv_bytes_per_token(fmt, request.tp)
    # each sub-pool holds its own layers' shape (Gemma-4's wider full-attention layers: SGLang's
    # SWA pool takes swa_head_num / swa_head_dim apart); one shape per pool
    full_kv = {x.kv_bytes_per_token(fmt, request.tp) for x in attn if not x.kind.windowed}
    swa_kv = {x.kv_bytes_per_token(fmt, request.tp) for x in attn if x.kind.windowed}
    latents = {x.head_dim for x in attn}
    if (mla and len(latents) > 1) or (not mla and (len(full_kv) > 1 or len(swa_kv) > 1)):
        raise KvplanError(
            f"{spec.name}: attention layers of several cache shapes within one pool "
            f"({sorted(full_kv | swa_kv)} bytes per token per layer); kvplan does not model how "
            "SGLang sizes that pool"
        )
    n_swa = sum(x.kind.windowed for x in attn)
    n_full = layers - n_swa
    full_layer = full_kv.pop() if full_kv and not mla else None
    swa_layer = swa_kv.pop() if swa_kv and not mla else None
    if mla:
        profile_cell = per_layer * layers + indexer * len(indexed)
    else:
        profile_cell = (full_layer or 0) * n_full + (swa_layer or 0) * n_swa
    allocated = per_layer
    if indexed and fmt.name == "fp8":
        allocated = FP8_NSA_LATENT_BYTES
        notes.append(note("sglang-nsa-fp8-layout", allocated=FP8_NSA_LATENT_BYTES))
    cell = allocated * layers + indexer * len(indexed) if mla else profile_cell
    full_tokens: int | None = None
    swa_tokens: int | None = None
    one_pool = n_swa and n_full and gpt_oss_one_pool(spec, attention, request.sglang_version)
    if one_pool:
        notes.append(note("sglang-swa-off", swa=n_swa, full=n_full))
    if n_swa and n_full and not one_pool:  # HybridSWAPoolConfigurator
        assert full_layer is not None and swa_layer is not None, "both pools, not MLA"
        full_bytes, swa_bytes = full_layer * n_full, swa_layer * n_swa
        full_tokens = int(rest // (full_bytes + SWA_FULL_TOKENS_RATIO * swa_bytes)) // page * page
        swa_tokens = int(full_tokens * SWA_FULL_TOKENS_RATIO) // page * page
        tokens = full_tokens
        notes.append(note("sglang-swa", swa=n_swa, full=n_full, ratio=SWA_FULL_TOKENS_RATIO))
    else:
        tokens = rest // profile_cell // page * page
    if tokens <= 0:
        # model_runner_kv_cache_mixin: RuntimeError before "KV Cache is allocated" is logged
        raise KvplanError(
            f"SGLang would refuse to start: {rest / GIB:,.2f} GiB holds no page of its KV pool "
            '("Not enough memory. Please try to increase --mem-fraction-static.")'
        )
    if request.max_running_requests is not None:
        # tp_worker: a given count (or server_args' when speculating: requested_running), a
        # DP-attention rank's share of it
        running = max(request.max_running_requests // request.dp_attention, 1)
    else:
        running = min(max(int(tokens / request.max_model_len * 512), 2048), 4096)
        running = min(running, max(tokens // 2, 1))
    running = mamba_capped_requests(
        running,
        max_mamba,
        radix_off is None,
        mamba_ratio_track_slots(request.mamba_track_slots, request.sglang_version),
    )
    fits = tokens >= request.max_model_len
    return SglangResult(
        kvplan_version=__version__,
        engine="sglang",
        engine_version=version,
        model={"name": spec.name},
        gpu=gpu.name,
        tp=request.tp,
        pp=request.pp,
        max_model_len=request.max_model_len,
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
        mla=mla,
        num_layers=layers,
        kv_heads_per_rank=heads,
        head_dim=a.head_dim,
        element_bytes=elem,
        mem_fraction_static=fraction,
        mem_fraction_given=given,
        chunked_prefill_size=default.chunked_prefill_size,
        # a backend that turns CUDA graphs off (torch_native, flex_attention) captures none
        cuda_graph_max_bs=default.cuda_graph_max_bs if attention.cuda_graph else 0,
        free_before_load_bytes=free_before,
        weights_bytes=weights,
        pool_bytes=rest,
        mamba_pool_bytes=mamba_pool,
        max_mamba_cache_size=max_mamba,
        mamba_conv_bytes=conv_bytes,
        mamba_ssm_bytes=ssm_bytes,
        cell_size_bytes=cell,
        profile_cell_size_bytes=profile_cell,
        indexer_bytes_per_token=indexer,
        num_blocks=tokens // page,
        block_size=page,
        kv_cache_tokens=tokens,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        full_layers=n_full,
        indexer_layers=len(indexed),
        full_layer_bytes_per_token=full_layer if full_tokens is not None else None,
        swa_layer_bytes_per_token=swa_layer if full_tokens is not None else None,
        max_running_requests=running,
        max_concurrency=tokens / request.max_model_len,
        padding_layers=0,
        required_bytes_per_request=cell * request.max_model_len,
        fits=fits,
        estimated_max_model_len=None if fits else tokens,
        notes=unique(notes),
    )


def sglang_mxfp4_alignment(gpu: GpuProfile) -> tuple[int, int]:
    """(intermediate, hidden) multiples SGLang pads mxfp4 experts to (layers/quantization/
    mxfp4.py, create_weights): FlashInfer on datacenter Blackwell and AITER on ROCm pad both to
    256, as vLLM's kernels there do; elsewhere its Triton kernels round the per-rank intermediate
    width up to 64 and leave the hidden size (gpt-oss-120b at TP 4: 720 -> 768)."""
    return (256, 256) if mxfp4_alignment(gpu) == (256, 256) else (64, 1)


def gpt_oss_below_blackwell(spec: ModelSpec, gpu) -> bool:
    """gpt-oss on an NVIDIA GPU before Blackwell (or not NVIDIA's): SGLang runs its MXFP4
    experts through triton_kernels' matmul_ogs there (layers/quantization/mxfp4.py, 0.5.3-0.5.9),
    a kernel no table times (note sim-weak-gpt-oss-sglang)."""
    from kvplan.engines.vllm import gpu_generation

    return spec.model_type == GPT_OSS_MODEL_TYPE and gpu_generation(gpu) < 10


# gpt-oss's MXFP4 experts on SM120 (RTX PRO 6000, RTX 5090) under --moe-runner-backend auto
# (server_args.py _handle_model_specific_adjustments, GptOssForCausalLM): triton_kernels'
# matmul_ogs through 0.5.13 (its SM120 branch set "triton_kernel"); Marlin from 0.5.14 (PR
# #28231 "Use Marlin for SM120 MXFP4 MoE", merged 2026-06-15, two days after 0.5.13's release),
# the kernel aiconfigurator-core's SGLang 0.5.14 rows time on SM120 (collector/cases/base_ops/
# moe.yaml: w4a16_mxfp4 120: marlin, "server_args.py:3876-3887"); FlashInfer's CUTLASS MXFP4 MoE
# from PR #32668 (opened 2026-07-28, after 0.5.16's release of 2026-07-26), so in 0.5.17 or
# 0.5.18: the releases up to 0.5.16 are the last known to run Marlin
SM120_MARLIN_MXFP4_FROM = 14
SM120_MARLIN_MXFP4_LAST = 16


def gpt_oss_sm120_other_kernel(spec: ModelSpec, gpu, version: str) -> bool:
    """gpt-oss on an SM120 GPU under an SGLang release that does not run the Marlin MXFP4 MoE
    its kernel tables' rows time there (SM120_MARLIN_MXFP4_FROM to _LAST): triton_kernels'
    matmul_ogs before, FlashInfer's CUTLASS MXFP4 MoE after; a bare 0.5 (April 2026's main, the
    rules kvplan models for it) ran triton_kernels (note sim-gpt-oss-sm120-kernel)."""
    from kvplan.engines.vllm import gpu_generation

    if spec.model_type != GPT_OSS_MODEL_TYPE or gpu_generation(gpu) != 12:
        return False
    return not sglang_runs_sm120_marlin(version)


def sglang_runs_sm120_marlin(version: str) -> bool:
    """Whether SGLang `version` is one of the 0.5 releases that run gpt-oss's MXFP4 experts on
    Marlin on SM120 (SM120_MARLIN_MXFP4_FROM to _LAST); a bare 0.5 is before them."""
    first = sglang_rules(version).from_05(SM120_MARLIN_MXFP4_FROM, bare=False)
    return first and not sglang_after_sm120_marlin(version)


def sglang_after_sm120_marlin(version: str) -> bool:
    """Whether SGLang `version` is a 0.5 release after the last that runs Marlin there (note
    sim-gpt-oss-sm120-kernel's `later`: FlashInfer's CUTLASS MXFP4 MoE); never a 0.4 one."""
    return sglang_rules(version).from_05(SM120_MARLIN_MXFP4_LAST + 1, bare=False)


def gpt_oss_one_pool(spec: ModelSpec, attention: SglangAttention, version: str) -> bool:
    """Whether SGLang keeps gpt-oss's sliding-window layers in its one full pool
    (disable_hybrid_swa_memory, GPT_OSS_HYBRID_SWA_FROM): always before 0.5.8, then only where
    trtllm_mha runs prefill or decode. 0.5.8 also did so for speculative decoding, which 0.5.9
    dropped; kvplan does not model that one release's rule."""
    rules = sglang_rules(version)
    if rules.release != "0.5" or spec.model_type != GPT_OSS_MODEL_TYPE:
        return False
    if not rules.from_05(GPT_OSS_HYBRID_SWA_FROM):
        return True
    return "trtllm_mha" in (attention.prefill, attention.decode)


# layers/quantization/mxfp4.py (Mxfp4MoEMethod, 0.5.3 to 0.5.9): with the triton_kernels MoE
# runner (gpt-oss on CUDA below Blackwell at EP 1, where server_args picks it; SGLang cannot load
# the checkpoint's experts without the triton_kernels package there) process_weights_after_loading
# keeps w13_weight_scale / w2_weight_scale beside the copies _swizzle_mxfp4 makes of them, deletes
# only the values, and holds the expert biases in fp32. triton_kernels' scale layout copies on
# Hopper (HopperMXScaleLayout: the rows padded to 2 x num_warps x 2 x 8, num_warps 8; the columns
# to 2) and is a view elsewhere (StridedLayout)
TRITON_KERNELS_NUM_WARPS = 8
HOPPER_SCALE_ROWS = 2 * TRITON_KERNELS_NUM_WARPS * 2 * 8  # 256
HOPPER_SCALE_COLUMNS = 2
MXFP4_BLOCK = 32  # values per scale byte
FP32_BYTES = 4


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def triton_kernels_kept_bytes(
    spec: ModelSpec, stage: ModelSpec, gpu: GpuProfile, request: EngineRequest, version: str,
    wdtype: str,
) -> int:  # fmt: skip
    """Bytes SGLang's triton_kernels MoE keeps on a rank beyond the loaded experts (the comment
    above): the swizzled scale copies on Hopper, and the expert biases at fp32 where the weights
    count them at the mxfp4 rate. 0 where that runner does not run."""
    from kvplan.formulas.weights import part_bytes_per_param

    moe = spec.moe
    generation = gpu_generation(gpu)
    if (
        version != "0.5"
        or spec.model_type != GPT_OSS_MODEL_TYPE
        or moe is None
        or wdtype != "mxfp4"
        or generation not in (8, 9)
        or request.expert_ranks is not None
    ):
        return 0
    runner = request.backends.moe_runner_backend
    if runner not in (None, "auto", "triton_kernel"):
        # Mxfp4MoEMethod without triton_kernels upcasts the experts to bf16 after loading
        raise KvplanError(
            f"--moe-runner-backend {runner}: SGLang upcasts {spec.name}'s mxfp4 experts to bf16 "
            "after loading them on this GPU (layers/quantization/mxfp4.py), a load kvplan does "
            "not model; leave it auto (triton_kernel)"
        )
    layers = sum(any(part == "experts" for part, _ in layer.params) for layer in stage.layers)
    hidden = spec.hidden_size
    width = _round_up(
        -(-moe.expert_intermediate_size // request.tp), sglang_mxfp4_alignment(gpu)[0]
    )
    biases = moe.num_experts * (2 * width + hidden)  # gate_up and down, per layer
    kept = biases * (FP32_BYTES - part_bytes_per_param(spec, wdtype, "experts"))
    if generation == 9:
        w13 = _round_up(2 * width, HOPPER_SCALE_ROWS) * _round_up(
            hidden // MXFP4_BLOCK, HOPPER_SCALE_COLUMNS
        )
        w2 = _round_up(hidden, HOPPER_SCALE_ROWS) * _round_up(
            width // MXFP4_BLOCK, HOPPER_SCALE_COLUMNS
        )
        kept += moe.num_experts * (w13 + w2)
    return int(kept * layers)
