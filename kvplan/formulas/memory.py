"""What a serving engine keeps beside the weights and the KV pool: the torch peak of its profiling
run, the memory outside torch's allocator, and the rotary tables. Each term follows what vLLM 0.19
allocates (vllm/v1/worker/gpu_model_runner.py profile_run, v1/sample/sampler.py,
fused_moe/modular_kernel.py); docs/engines.md lists the sources. The engine-free reserve
(`runtime_reserve_bytes`) and `kvplan engine --engine vllm` use the same terms.

Notation: T = max_num_batched_tokens (the profiling batch), S = min(max_num_seqs, T) (requests in
that batch, one logit row each), V vocabulary, H hidden size, b the activation bytes (the model
dtype), I the MLP width on one rank.

  sampler phase  = S*V*(b + 12) + R*V*4 + T*H*b + 2*S*H*b
  forward phase  = T*I*m*b + K*T*H*b          (m = 3 for a gated MLP, 2 otherwise)
  torch peak     = C + persistent + max(sampler phase, forward phase)

Two constants are fitted, each on two vLLM 0.19 H100 logs and checked on the 60 others
(tests/test_vllm_logs.py): K (activations of hidden width alive beside the MLP's: the attention
output, the residual in and out, the normalised input) on CodeLlama-7B TP 1 and a middle
pipeline stage of Llama-3.1-8B; C (cuBLAS workspaces and small buffers) on Llama-3.1-8B and
Qwen2.5-7B at TP 1.
"""

from __future__ import annotations

import math

from kvplan.anatomy.model import KEPT, CacheKind, ModelSpec
from kvplan.dtypes import ELEMENT_BYTES
from kvplan.record import NamedTuple
from kvplan.units import GIB

# The sampler's dummy run on S rows (vLLM 0.19, FlashInfer sampling off by default): the logits
# in the model dtype, then three fp32 [S, V] tensors alive together: the float32 logits, the
# softmax probabilities and the exponential noise q of random_sample.
SAMPLER_FP32_TENSORS = 3
FP32_BYTES = ELEMENT_BYTES["fp32"]
TOPK_MIN_ROWS = 8  # below 8 rows vLLM's top-k/top-p takes the sort path, without the buffer
DEFAULT_SM_COUNT = 132  # H100 SXM: rows of the Triton top-k/top-p buffer
FORWARD_HIDDEN_TENSORS = 3.7  # K, fitted (see the module docstring)
PROFILE_FIXED_BYTES = int(0.037 * GIB)  # C, fitted (see the module docstring)
MLA_WORKSPACE_MAX_TOKENS = 65536  # vLLM's cap on the MLA prefill workspace (chunked context)

# Memory outside torch's allocator that the profiling run adds ("non-torch forward increase
# memory" in vLLM 0.19's log), measured on H100 SXM: cuBLAS/cuBLASLt handles at TP 1; NCCL
# channels, custom all-reduce and symmetric-memory buffers once ranks talk. TP 8 is not measured;
# the TP 4 figure is used for it.
NON_TORCH_TP1_BYTES = int(0.25 * GIB)
NON_TORCH_PP_ONLY_BYTES = int(0.07 * GIB)  # pipeline ranks at TP 1: point-to-point only
NON_TORCH_TP_BYTES = {2: int(2.08 * GIB), 4: int(2.17 * GIB)}
NON_TORCH_MEASURED_MAX_TP = 4  # past it the TP 4 figure stands in, unmeasured


def non_torch_bytes(tp: int = 1, pp: int = 1) -> int:
    """vLLM 0.19's non-torch increase by parallel layout (H100 SXM)."""
    if tp == 1:
        return NON_TORCH_TP1_BYTES if pp == 1 else NON_TORCH_PP_ONLY_BYTES
    return NON_TORCH_TP_BYTES[2] if tp < 4 else NON_TORCH_TP_BYTES[4]


def rotary_cache_bytes(spec: ModelSpec, element_bytes: int) -> int:
    """The rotary tables: positions x rotary_dim values each (cos and sin halves)."""
    return sum(positions * dim for positions, dim in spec.rope_tables) * element_bytes


def topk_buffer_rows(num_seqs: int, sm_count: int) -> int:
    """Rows of the Triton top-k/top-p kernel's per-program fp32 buffer (cached across calls)."""
    if num_seqs < TOPK_MIN_ROWS:
        return 0
    programs = min(sm_count, num_seqs)
    return min(1 << math.ceil(math.log2(programs)), sm_count)


def sampler_bytes(num_seqs: int, vocab: int, act_bytes: int, sm_count: int) -> int:
    """The sampler's dummy run: S x V logits in the model dtype, three fp32 S x V tensors, and
    the top-k/top-p buffer of R x V fp32."""
    rows = topk_buffer_rows(num_seqs, sm_count)
    return num_seqs * vocab * (act_bytes + SAMPLER_FP32_TENSORS * FP32_BYTES) + (
        rows * vocab * FP32_BYTES
    )


# vLLM V0's profile run (0.6, 0.7: ModelRunner.profile_run samples with top_p 0.99 and top_k
# vocab - 1) peaks inside sampler.py _apply_top_k_top_p, at its scatter: alive per logit the
# caller's logits (model dtype), the fp32 logits, the sorted values (fp32) and indices (int64),
# the top-k mask (bool), softmax and cumsum (fp32 each), the top-p mask (bool) and the output
# (fp32): 4 + 4 + 8 + 1 + 4 + 4 + 1 + 4 bytes besides the model dtype's
V0_SAMPLER_FP32_LOGIT_BYTES = 30


def v0_sampler_bytes(num_seqs: int, vocab: int, act_bytes: int) -> int:
    """vLLM V0's sampler in its profile run: S x V logits, (b + 30) bytes each at the peak."""
    return num_seqs * vocab * (act_bytes + V0_SAMPLER_FP32_LOGIT_BYTES)


def mlp_matrices(spec: ModelSpec) -> int:
    """3 for a gated MLP (gate, up, down), 2 for up/down, read from the parameter count."""
    width = spec.intermediate_size
    for layer in spec.layers:
        params = dict(layer.params).get("mlp")
        if params and width:
            return 2 if params < 2.5 * spec.hidden_size * width else 3
    return 3


def moe_workspace_bytes(
    tokens: int, top_k: int, width: int, hidden: int, act_bytes: int, gated: bool = True
) -> int:
    """vLLM's fused-MoE workspaces (TritonExperts.workspace_shapes), persistent once allocated:
    workspace13 = max(T*k*max(I, H), T*H) (the output shares it), workspace2 = T*k*max(N, H)
    with N = 2I for a gated expert."""
    n = 2 * width if gated else width
    first = max(tokens * top_k * max(width, hidden), tokens * hidden)
    second = tokens * top_k * max(n, hidden)
    return (first + second) * act_bytes


def mla_workspace_bytes(
    spec: ModelSpec,
    max_model_len: int,
    num_seqs: int,
    block_size: int,
    tp: int,
    act_bytes: int,
) -> int:
    """MLA's profiling-run prefill workspace: W x heads/tp x (nope + v) in the model dtype, with
    W = max(min(max(8*max_model_len, 4*S*block), 65536), S*block)."""
    attn = next((a for a in spec.attention_layers() if a.kind is CacheKind.MLA), None)
    if attn is None:
        return 0
    rows = max(
        min(max(8 * max_model_len, 4 * num_seqs * block_size), MLA_WORKSPACE_MAX_TOKENS),
        num_seqs * block_size,
    )
    nope = attn.qk_head_dim - attn.mla_rope_dim
    return rows * (attn.num_q_heads // tp) * (nope + attn.v_head_dim) * act_bytes


class ActivationPeak(NamedTuple):
    """The torch peak of one profiling run on one rank, by term (bytes)."""

    sampler_phase_bytes: int  # logits and sampler buffers with the model's output alive (0: none)
    forward_phase_bytes: int  # the widest transient of the forward pass
    moe_workspace_bytes: int  # persistent fused-MoE workspaces
    persistent_bytes: int  # other buffers alive in both phases (pipeline, encoder outputs)
    fixed_bytes: int
    total_bytes: int


def activation_peak(
    spec: ModelSpec,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    tp: int = 1,
    act_bytes: int | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
    sampler: bool = True,
    moe_workspace: bool = True,
    quantized_activations: bool = False,
    mla_bytes: int = 0,
    persistent_bytes: int = 0,
    v0_sampler: bool = False,
) -> ActivationPeak:
    """The profiling run's torch peak (see the module docstring); `sampler` False on pipeline
    ranks before the last, `moe_workspace` False for MoE backends without a persistent
    workspace, `quantized_activations` for w8a8/fp8 linears (a 1-byte copy of each input),
    `v0_sampler` for vLLM V0's sampler (v0_sampler_bytes) in place of V1's."""
    b = ELEMENT_BYTES[spec.dtype] if act_bytes is None else act_bytes
    tokens, hidden = max_num_batched_tokens, spec.hidden_size
    seqs = min(max_num_seqs, tokens)
    sampler_phase = 0
    if sampler:
        logits = (
            v0_sampler_bytes(seqs, spec.vocab_size, b)
            if v0_sampler
            else sampler_bytes(seqs, spec.vocab_size, b, sm_count)
        )
        sampler_phase = logits + tokens * hidden * b + 2 * seqs * hidden * b
    widths = [mlp_matrices(spec) * (spec.intermediate_size or 0)]
    workspace = 0
    if spec.moe is not None:
        moe = spec.moe
        widths.append(3 * moe.shared_intermediate_size)
        if moe_workspace:
            workspace = moe_workspace_bytes(
                tokens, moe.top_k, moe.expert_intermediate_size // tp, hidden, b
            )
    widest = max(widths) // tp
    forward = tokens * widest * b
    if quantized_activations:  # the 1-byte copy of the down projection's input
        forward += tokens * (spec.intermediate_size or 0) // tp
    forward = max(forward, mla_bytes) + int(FORWARD_HIDDEN_TENSORS * tokens * hidden * b)
    total = PROFILE_FIXED_BYTES + workspace + persistent_bytes + max(sampler_phase, forward)
    return ActivationPeak(
        sampler_phase, forward, workspace, persistent_bytes, PROFILE_FIXED_BYTES, total
    )


def intermediate_size(spec: ModelSpec) -> int:
    """The widest MLP activation one token materialises, from the widths the config states: the
    dense MLP, or the top-k routed experts plus the shared ones (4 x hidden when none is given)."""
    widths = [spec.intermediate_size or 0]
    if spec.moe is not None:
        moe = spec.moe
        widths.append(moe.expert_intermediate_size * moe.top_k + moe.shared_intermediate_size)
    return max(widths) or 4 * spec.hidden_size


def runtime_reserve_bytes(spec: ModelSpec, max_num_batched_tokens: int = 8192, tp: int = 1) -> int:
    """Activation peak + non-torch memory + rotary tables: what `--reserve auto` sets aside per
    GPU (vLLM 0.19's profile of a single-stage rank with 1024 sequences). It depends on no GPU,
    and `capacity --gpu all` asks it of every kind and layout over a thousand times: the last
    KEPT answers are kept, each with the spec it came from (holding it keeps its id from
    being reused)."""
    key = (id(spec), max_num_batched_tokens, tp)
    kept = _RESERVES.get(key)
    if kept is not None and kept[0] is spec:
        return kept[1]
    peak = activation_peak(spec, max_num_batched_tokens, tp=tp).total_bytes
    rope = rotary_cache_bytes(spec, ELEMENT_BYTES[spec.dtype])
    found = peak + non_torch_bytes(tp) + rope
    if len(_RESERVES) >= KEPT:
        del _RESERVES[next(iter(_RESERVES))]
    _RESERVES[key] = (spec, found)
    return found


_RESERVES: dict[tuple, tuple] = {}
