"""What a serving engine keeps beside the weights and the KV pool: the activation peak of the
profiling forward pass and non-torch memory. A documented estimate from the model's shapes.

Fitted to the two vLLM 0.19 logs in docs/engines.md (H100-80GB, max_num_batched_tokens 8192):
  Llama-3.1-8B  logged 1.89 GiB activations + 0.25 GiB non-torch; this estimate 2.03 + 0.25
  Gemma-3-27B   logged 3.99 GiB activations + 0.26 GiB non-torch; this estimate 3.82 + 0.25
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.formulas.dtypes import ELEMENT_BYTES
from kvplan.units import GIB

NON_TORCH_BYTES = int(0.25 * GIB)  # CUDA context, cuBLAS workspaces, NCCL buffers
SAMPLER_SEQS = 1024  # vLLM V1's default max_num_seqs for an API server on a large GPU
SAMPLER_COPIES = 3  # fp32 logits, probabilities and log-probabilities of the dummy sampler run


def intermediate_size(spec: ModelSpec) -> int:
    """The widest MLP activation one token materialises, from the widths the config states: the
    dense MLP, or the top-k routed experts plus the shared ones (4 x hidden when none is given)."""
    widths = [spec.intermediate_size or 0]
    if spec.moe is not None:
        moe = spec.moe
        widths.append(moe.expert_intermediate_size * moe.top_k + moe.shared_intermediate_size)
    return max(widths) or 4 * spec.hidden_size


def activation_peak_bytes(
    spec: ModelSpec,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = SAMPLER_SEQS,
    tp: int = 1,
) -> int:
    """Peak activation memory of one profiling forward of `max_num_batched_tokens` tokens:
    tokens x (2 x intermediate + 2 x hidden) x dtype bytes / tp   (gate/up output and residuals)
    + SAMPLER_COPIES x max_num_seqs x vocab x 4 bytes              (the sampler's fp32 logits)."""
    dtype_bytes = ELEMENT_BYTES[spec.dtype]
    hidden = spec.hidden_size
    forward = max_num_batched_tokens * (2 * intermediate_size(spec) + 2 * hidden) * dtype_bytes
    sampler = SAMPLER_COPIES * max_num_seqs * spec.vocab_size * 4
    return int(forward / tp + sampler)


def runtime_reserve_bytes(spec: ModelSpec, max_num_batched_tokens: int = 8192, tp: int = 1) -> int:
    """Activation peak + non-torch memory: what `--reserve auto` sets aside per GPU."""
    return activation_peak_bytes(spec, max_num_batched_tokens, tp=tp) + NON_TORCH_BYTES
