"""vLLM 0.19's "Available KV cache memory", term by term, the way the engine measures it.

vllm/v1/worker/gpu_worker.py determine_available_memory:
  requested       = ceil(total memory CUDA reports x gpu_memory_utilization)
  available       = requested - (weights + torch peak increase + non-torch increase)
  (the CUDA-graph estimate is logged but subtracted only with
   VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default from 0.21)

Weights are what one rank holds after loading (gpu_model_runner load_model): the vocabulary
padded to 64 and split over TP, norms and routers replicated, MLA's down-projections replicated
with the decompressed W_UK/W_UV kept beside kv_b_proj, KV heads replicated when TP exceeds them,
the vision tower split over TP on the first stage, and the rotary tables on every rank. The
torch peak and the non-torch increase are kvplan.formulas.memory's terms, with the engine's
choices (defaults by GPU, sampler on the last stage only, the pipeline's intermediate buffers).
"""

from __future__ import annotations

import math

from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.dtypes import ELEMENT_BYTES
from kvplan.engines.releases import VLLM_VERSION
from kvplan.formulas.memory import (
    DEFAULT_SM_COUNT,
    NON_TORCH_MEASURED_MAX_TP,
    ActivationPeak,
    activation_peak,
    mla_workspace_bytes,
    non_torch_bytes,
    rotary_cache_bytes,
)
from kvplan.formulas.weights import expert_tp_padding, part_bytes_per_param
from kvplan.inputs.architectures.params import indexer_params
from kvplan.inputs.hardware import GpuProfile
from kvplan.record import NamedTuple
from kvplan.units import GIB

VOCAB_PADDING = 64  # DEFAULT_VOCAB_PADDING_SIZE of VocabParallelEmbedding / ParallelLMHead
REPLICATED_PARTS = ("norms", "router")
# Never quantized by vLLM's linear methods (fp8, compressed-tensors, AWQ, GPTQ): the vocabulary
# layers are VocabParallelEmbedding / ParallelLMHead, not LinearBase; norms and routers stay too.
UNQUANTIZED_PARTS = ("embedding", "lm_head", "norms", "router")
LARGE_GPU_BYTES = 70 * GIB  # get_batch_defaults: the larger defaults from 70 GiB, A100 excepted
# (max_num_seqs, max_num_batched_tokens) for `vllm serve` (OPENAI_API_SERVER usage context)
LARGE_GPU_DEFAULTS = (1024, 8192)
# vLLM 0.32 adds a tier from 160 GiB (B200, B300): 16384 tokens (arg_utils.get_batch_defaults;
# 0.21.0 has none)
HUGE_GPU_BYTES = 160 * GIB
HUGE_GPU_DEFAULTS = (1024, 16384)
HUGE_GPU_FROM = "0.32"
SMALL_GPU_DEFAULTS = (256, 2048)
# Activation formats that quantize each linear layer's input (w8a8, fp8 dynamic).
QUANTIZED_ACTIVATION_WEIGHTS = ("fp8", "int8")

# "Estimated CUDA graph memory" (logged since 0.18, subtracted from 0.21 on): a + b x layers on
# the rank, fitted on the even rows of the 0.19 H100 logs and checked on the odd rows
# (tests/test_vllm_logs.py: median miss 0.07 GiB, worst 0.9 GiB; the engine's own measurement
# differs by that much between runs of one model at TP 2 and TP 4).
CUDA_GRAPH_BASE_BYTES = int(0.24 * GIB)
CUDA_GRAPH_PER_LAYER_BYTES = int(0.018 * GIB)


def batch_defaults(gpu: GpuProfile, version: str = VLLM_VERSION) -> tuple[int, int]:
    """vLLM's default (max_num_seqs, max_num_batched_tokens) for an API server on this GPU."""
    if version == HUGE_GPU_FROM and gpu.usable_memory_bytes >= HUGE_GPU_BYTES:
        return HUGE_GPU_DEFAULTS
    large = gpu.usable_memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower()
    return LARGE_GPU_DEFAULTS if large else SMALL_GPU_DEFAULTS


def requested_bytes(gpu: GpuProfile, gpu_memory_utilization: float) -> int:
    """request_memory: the budget the engine may use, ceil(total x utilization)."""
    return math.ceil(gpu.usable_memory_bytes * gpu_memory_utilization)


def padded_vocab(vocab: int) -> int:
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def _part_bytes(spec: ModelSpec, dtype: str, part: str, count: float) -> float:
    """Bytes of `count` parameters of one part in the weights format `dtype`."""
    if not count:
        return 0.0
    if part in UNQUANTIZED_PARTS and dtype != "checkpoint":
        return ELEMENT_BYTES[spec.dtype] * count
    return part_bytes_per_param(spec, dtype, part) * count


class WeightsBreakdown(NamedTuple):
    """One rank's "weights memory" (bytes), by where it comes from."""

    layers_bytes: float  # this stage's layers, split and replicated as vLLM loads them
    embedding_bytes: float  # padded vocabulary / tp, first stage
    lm_head_bytes: float  # padded vocabulary / tp, last stage (tied: shared on one stage)
    vision_bytes: float  # vision tower / tp, first stage
    mla_decompressed_bytes: float  # W_UK and W_UV kept beside kv_b_proj
    rotary_bytes: float
    total_bytes: float


def mxfp4_alignment(gpu: GpuProfile) -> tuple[int, int]:
    """(intermediate, hidden) multiples vLLM 0.19 pads mxfp4 experts to on this GPU
    (fused_moe/oracle/mxfp4.py, mxfp4_round_up_hidden_size_and_intermediate_size): FlashInfer's
    TRT-LLM kernels on datacenter Blackwell and AITER on ROCm pad both to 256; the Marlin
    kernels (Ampere, Ada, sm120, and Hopper where the logs show them) pad the intermediate width
    to 128 and the hidden size to 256. On Hopper vLLM tries its Triton kernels first (width to 64,
    nothing for gpt-oss) and falls back to Marlin; the logged runs took Marlin: gpt-oss-20b on an
    H100 loads 13.64 GiB (TP 1) and 7.01 GiB (TP 2) in vLLM 0.19's logs, 0.82 and 0.59 GiB above
    the checkpoint's bytes, where Marlin's 2880 -> 2944 x 3072 (TP 1) and 1440 -> 1536 x 3072
    (TP 2) give 0.85 and 0.65 GiB and Triton's layout about 0 and 0.1; vLLM 0.10.1 on an H100
    logs Marlin and 65.97 GiB for gpt-oss-120b (vllm#23278; kvplan: 65.86)."""
    # the maker as the device reported it for a measured profile ("measured NVIDIA B200")
    if gpu.device_vendor.upper() == "AMD" or gpu.is_model("B200", "GB200", "B300", "GB300"):
        return 256, 256
    return 128, 256


def _round_up(value: float, multiple: int) -> float:
    return math.ceil(value / multiple) * multiple


def weights_per_rank(
    spec: ModelSpec,
    stage: ModelSpec,
    first: bool,
    last: bool,
    wdtype: str,
    tp: int,
    mxfp4_align: tuple[int, int] | None = None,
    expert_ranks: int | None = None,
    expert_floor: bool = False,
    mlp_ranks: int | None = None,
    embedding_ranks: int | None = None,
    dense_mlp_ranks: int | None = None,
    head_ranks: int | None = None,
) -> WeightsBreakdown:
    """What one rank of one pipeline stage holds after loading. `mxfp4_align`: the
    (intermediate, hidden) multiples an mxfp4 expert is padded to (None: none); `expert_ranks`:
    the GPUs the routed experts are spread over (EP, or DP ranks' TP; None: tp);
    `expert_floor`: vLLM's Kimi-K3 per-rank expert width floor applies (TP without EP);
    `mlp_ranks`: the GPUs the dense MLPs, shared experts and head are split over (SGLang's DP
    attention: the whole TP group, models/deepseek_v2.py; None: tp); `embedding_ranks`: the GPUs
    the input embedding is split over (SGLang's DP attention: 1, each GPU holding it whole,
    VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled()); None: tp);
    `dense_mlp_ranks`: the GPUs the dense layers' MLPs alone are split over (SGLang's
    --moe-dense-tp-size 1: 1, every GPU holding them whole, models/deepseek_v2.py
    tp_rank, tp_size = 0, 1 when enable_moe_dense_fully_dp(); None: mlp_ranks); `head_ranks`:
    the GPUs the head is split over (SGLang's --enable-dp-lm-head: the attention TP group,
    ParallelLMHead(use_attn_tp_group=True); None: mlp_ranks)."""
    model_bytes = ELEMENT_BYTES[spec.dtype]
    layers = 0.0
    mla_copies = 0.0
    expert_pad = 1.0
    if spec.moe and spec.moe.expert_intermediate_size:
        width = spec.moe.expert_intermediate_size / tp
        padded = width
        if expert_floor and expert_ranks is None:
            padded *= expert_tp_padding(spec, tp)
        hidden_pad = 1.0
        if mxfp4_align and wdtype == "mxfp4":
            padded = _round_up(padded, mxfp4_align[0])
            hidden = spec.hidden_size
            hidden_pad = _round_up(hidden, mxfp4_align[1]) / hidden
        expert_pad = padded / width * hidden_pad
    for layer in stage.layers:
        for part, count in layer.params:
            share = count if part in REPLICATED_PARTS else count / tp
            if part == "mlp":
                share = count / (dense_mlp_ranks or mlp_ranks or tp)
            if part == "shared_experts":
                share = count / (mlp_ranks or tp)
            if part == "experts":
                share = count / (expert_ranks or tp) * expert_pad
            layers += _part_bytes(spec, wdtype, part, share)
        attn = layer.attention
        if attn is None:
            continue
        if attn.kind is CacheKind.MLA:
            # fused q_a/kv_a down-projections are ReplicatedLinear (and the indexer's projections)
            h = spec.hidden_size
            replicated = h * (attn.mla_kv_lora_rank + attn.mla_rope_dim) + attn.mla_kv_lora_rank
            if attn.mla_q_lora_rank:
                replicated += (h + 1) * attn.mla_q_lora_rank
            replicated += indexer_params(attn, h)  # "no tensor parallel, just replicated"
            layers += _part_bytes(spec, wdtype, "attention", replicated * (1 - 1 / tp))
            nope = attn.qk_head_dim - attn.mla_rope_dim
            heads = attn.num_q_heads // tp
            mla_copies += attn.mla_kv_lora_rank * heads * (nope + attn.v_head_dim) * model_bytes
        elif attn.num_kv_heads < tp:  # each rank keeps one KV head's k and v projections
            missing = 2 * attn.head_dim * spec.hidden_size * (1 - attn.num_kv_heads / tp)
            layers += _part_bytes(spec, wdtype, "attention", missing)
    embedding = lm_head = vision = 0.0
    edges = dict(spec.param_parts)
    for layer in spec.layers:
        for part, count in layer.params:
            edges[part] = edges.get(part, 0) - count
    if first:
        extra = edges.get("embedding", 0) - spec.vocab_size * spec.hidden_size  # positions
        rows = padded_vocab(spec.vocab_size) * spec.hidden_size / (embedding_ranks or tp)
        embedding = _part_bytes(spec, wdtype, "embedding", rows + max(extra, 0))
        vision = spec.vision_params * model_bytes / tp
    if last:
        final_norms = _part_bytes(spec, wdtype, "norms", edges.get("norms", 0))
        if not spec.tied_embeddings or not first:  # a tied head on its own stage is loaded again
            head_ranks = head_ranks or mlp_ranks or tp
            bias = max(edges.get("lm_head", 0) - spec.vocab_size * spec.hidden_size, 0)
            rows = padded_vocab(spec.vocab_size) * spec.hidden_size / head_ranks
            lm_head = _part_bytes(spec, wdtype, "lm_head", rows + bias / head_ranks)
        lm_head += final_norms
    rotary = float(rotary_cache_bytes(spec, model_bytes))
    total = layers + embedding + lm_head + vision + mla_copies + rotary
    return WeightsBreakdown(layers, embedding, lm_head, vision, mla_copies, rotary, total)


class StageMemory(NamedTuple):
    """vLLM's profile on one rank of one pipeline stage (bytes)."""

    stage: int
    requested_bytes: int
    weights: WeightsBreakdown
    peak: ActivationPeak
    non_torch_bytes: int
    non_kv_bytes: int  # "Total non KV cache memory"
    cuda_graph_estimate_bytes: int  # logged; subtracted from vLLM 0.21 on
    available_bytes: int  # "Available KV cache memory"


def stage_memory(
    spec: ModelSpec,
    stages: list[ModelSpec],
    index: int,
    gpu: GpuProfile,
    *,
    gpu_memory_utilization: float,
    wdtype: str,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int,
    enforce_eager: bool = False,
    subtract_cuda_graphs: bool = False,
    expert_ranks: int | None = None,
    v0_sampler: bool = False,
) -> StageMemory:
    """determine_available_memory on one rank of stage `index` (`v0_sampler`: vLLM V0's
    profile run, whose sampler peaks higher; V0's determine_num_available_blocks takes the same
    terms otherwise)."""
    pp = len(stages)
    first, last = index == 0, index == pp - 1
    stage = stages[index]
    tokens = max_num_batched_tokens
    b = ELEMENT_BYTES[spec.dtype]
    # compressed-tensors mxfp4 experts (Kimi-K3) keep the checkpoint's widths: its MoE method
    # has no maybe_roundup_sizes (compressed_tensors_moe_w4a4_mxfp4.py, vLLM 0.32); the mxfp4
    # method's Marlin/FlashInfer rounding is quantization/mxfp4.py's
    align = None if spec.weights_method == "compressed-tensors" else mxfp4_alignment(gpu)
    weights = weights_per_rank(
        spec, stage, first, last, wdtype, tp, align, expert_ranks, expert_floor=True
    )
    persistent = 0
    if not first:  # IntermediateTensors buffers (hidden states and residual) for the stage input
        persistent += 2 * tokens * spec.hidden_size * b
    if first and spec.vision_params:  # the encoder outputs stay cached through the dummy run
        persistent += tokens * spec.hidden_size * b
    seqs = min(max_num_seqs, tokens)
    peak = activation_peak(
        stage,
        tokens,
        max_num_seqs,
        tp,
        act_bytes=b,
        sm_count=gpu.sm_count or DEFAULT_SM_COUNT,
        sampler=last,
        moe_workspace=wdtype != "mxfp4",  # the mxfp4 Triton backend keeps no workspace
        quantized_activations=wdtype in QUANTIZED_ACTIVATION_WEIGHTS,
        mla_bytes=mla_workspace_bytes(stage, max_model_len, seqs, block_size, tp, b),
        persistent_bytes=persistent,
        v0_sampler=v0_sampler,
    )
    non_torch = non_torch_bytes(tp, pp)
    requested = requested_bytes(gpu, gpu_memory_utilization)
    non_kv = int(weights.total_bytes) + peak.total_bytes + non_torch
    graphs = 0
    if not enforce_eager:
        graphs = CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * len(stage.layers)
    available = requested - non_kv - (graphs if subtract_cuda_graphs else 0)
    return StageMemory(index, requested, weights, peak, non_torch, non_kv, graphs, available)


def no_kv_memory_message(memory: StageMemory, tp: int) -> str:
    """Why vLLM stops at start-up with nothing left for the KV cache on this rank ("No available
    memory for the cache blocks"): the weights alone past the requested memory, or weights that
    fit and the profile run's terms that take the rest. The two call for different remedies."""
    weights = memory.weights.total_bytes
    head = f"no memory is left for the KV cache ({memory.available_bytes / GIB:,.2f} GiB on the "
    if weights >= memory.requested_bytes:
        return (
            f"{head}fullest rank): the weights alone ({weights / GIB:,.2f} GiB a rank) exceed "
            f"the {memory.requested_bytes / GIB:,.2f} GiB requested; raise --tp/--pp or "
            "--gpu-memory-utilization"
        )
    graphs = memory.requested_bytes - memory.non_kv_bytes - memory.available_bytes
    terms = [
        f"torch peak ({memory.peak.total_bytes / GIB:,.2f} GiB)",
        f"non-torch memory ({memory.non_torch_bytes / GIB:,.2f} GiB"
        + (
            f", TP {NON_TORCH_MEASURED_MAX_TP}'s: TP {tp} is not measured)"
            if tp > NON_TORCH_MEASURED_MAX_TP
            else ")"
        ),
    ]
    if graphs > 0:  # subtracted from vLLM 0.21 on
        terms.append(f"CUDA graphs ({graphs / GIB:,.2f} GiB)")
    listed = ", ".join(terms[:-1]) + " and " + terms[-1]
    return (
        f"{head}fullest rank): the weights ({weights / GIB:,.2f} GiB a rank) fit in the "
        f"{memory.requested_bytes / GIB:,.2f} GiB requested, but the profile run's {listed} "
        "take the rest; lower --max-num-seqs or --max-num-batched-tokens, or raise --tp/--pp "
        "or --gpu-memory-utilization"
    )
