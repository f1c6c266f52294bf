"""A model's decode and prefill steps, scaled down to `layers` layers, built from kvplan's own
description of the model (the same shapes the planner sizes): per layer the q/k/v/o and MLP
weight-streaming matmuls, and paged decode attention over a shuffled paged cache."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.memory import intermediate_size
from kvplan.kernels import paged_decode_attention, prefill_attention
from kvplan.measure.probes import DTYPES


class Shape(NamedTuple):
    hidden: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    layers: int
    dtype: str

    @property
    def element_bytes(self) -> int:
        return torch.finfo(DTYPES[self.dtype]).bits // 8

    @property
    def weight_params_per_layer(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.num_q_heads + 2 * self.num_kv_heads)
        return attn + 3 * self.hidden * self.intermediate

    def weight_bytes(self) -> int:
        return self.layers * self.weight_params_per_layer * self.element_bytes

    def kv_bytes_per_token(self) -> int:
        """K and V read per cached token per step, all measured layers."""
        return self.layers * 2 * self.num_kv_heads * self.head_dim * self.element_bytes

    def decode_flops(self, batch: int, context: int) -> int:
        attention = 2 * self.num_q_heads * 2 * self.head_dim * context
        return self.layers * batch * (2 * self.weight_params_per_layer + attention)

    def prefill_flops(self, tokens: int) -> int:
        attention = 2 * self.num_q_heads * 2 * self.head_dim * tokens * (tokens + 1) // 2
        return self.layers * (2 * self.weight_params_per_layer * tokens + attention)


def shape_for(spec: ModelSpec, layers: int, dtype: str) -> tuple[Shape, list[str]]:
    attn = spec.attention_layers()
    if not attn:
        raise KvplanError(f"{spec.name} has no attention layers to measure")
    a = attn[0]
    notes = []
    if a.kind == "mla":
        notes.append(
            "MLA measured as its absorbed decode: one 576-wide latent head shared by "
            "all query heads."
        )
    if spec.moe is not None:
        notes.append(
            "MoE measured as its top-k experts' MLP at batch 1 (the experts one token reads)."
        )
    if layers < 1 or layers > 256:
        raise KvplanError("--layers must be between 1 and 256")
    shape = Shape(
        spec.hidden_size,
        a.num_q_heads,
        a.num_kv_heads if a.kind != "mla" else 1,
        a.head_dim,
        intermediate_size(spec),
        layers,
        dtype,
    )
    return shape, notes


def _linear(weight, x):
    """y = x W^T for a weight [out, in]; batch 1 as matrix-vector (the streaming kernel)."""
    if x.shape[0] == 1:
        return torch.mv(weight, x[0]).unsqueeze(0)
    return (weight @ x.T).T


class Workload:
    """Weights and a paged cache for `shape`, on `device`; decode and prefill callables."""

    def __init__(
        self,
        shape: Shape,
        device: str,
        max_batch: int,
        max_context: int,
        block_size: int = 16,
        seed: int = 0,
    ):
        torch.manual_seed(seed)
        self.shape, self.device, self.block_size = shape, device, block_size
        dt = DTYPES[shape.dtype]
        h, hq, hkv, d, inter = (
            shape.hidden,
            shape.num_q_heads,
            shape.num_kv_heads,
            shape.head_dim,
            shape.intermediate,
        )
        scale = 1 / math.sqrt(h)

        def weight(rows, cols):
            return (torch.randn(rows, cols, device=device) * scale).to(dt)

        # Fused projections, as serving engines run them (vLLM's QKVParallelLinear and
        # MergedColumnParallelLinear): one matvec for q|k|v and one for gate|up.
        self.layers = [
            {
                "qkv": weight((hq + 2 * hkv) * d, h),
                "o": weight(h, hq * d),
                "gate_up": weight(2 * inter, h),
                "down": weight(h, inter),
            }
            for _ in range(shape.layers)
        ]
        blocks_per_seq = -(-max_context // block_size)
        pool = max_batch * blocks_per_seq
        self.caches = [
            (
                torch.randn(pool, block_size, hkv, d, device=device).to(dt),
                torch.randn(pool, block_size, hkv, d, device=device).to(dt),
            )
            for _ in range(shape.layers)
        ]
        # distinct, shuffled physical blocks per sequence: no reuse between sequences
        self.table = torch.randperm(pool, device=device).view(max_batch, blocks_per_seq)
        self.table = self.table.to(torch.int32)

    def decode(self, batch: int, context: int):
        s = self.shape
        x0 = torch.randn(batch, s.hidden, device=self.device).to(DTYPES[s.dtype])
        table = self.table[:batch]
        lens = torch.full((batch,), context, dtype=torch.int32, device=self.device)

        def step():
            x = x0
            q_width = s.num_q_heads * s.head_dim
            for w, (kc, vc) in zip(self.layers, self.caches, strict=True):
                qkv = _linear(w["qkv"], x)  # the new k/v would be appended: negligible bytes
                q = qkv[:, :q_width].reshape(batch, s.num_q_heads, s.head_dim)
                attn = paged_decode_attention(q, kc, vc, table, lens)
                x = _linear(w["o"], attn.reshape(batch, -1))
                gate, up = _linear(w["gate_up"], x).chunk(2, dim=-1)
                x = _linear(w["down"], torch.nn.functional.silu(gate) * up)
            return x

        return step

    def weights_pass(self, batch: int):
        """The decode step's weight-streaming matvecs alone (no attention): what calibrates the
        bandwidth that this model's own matrices stream at on this device."""
        s = self.shape
        x0 = torch.randn(batch, s.hidden, device=self.device).to(DTYPES[s.dtype])
        attn = torch.randn(batch, s.num_q_heads * s.head_dim, device=self.device).to(x0.dtype)

        def step():
            x = x0
            for w in self.layers:
                _linear(w["qkv"], x)
                x = _linear(w["o"], attn)
                gate, up = _linear(w["gate_up"], x).chunk(2, dim=-1)
                x = _linear(w["down"], torch.nn.functional.silu(gate) * up)
            return x

        return step

    def prefill(self, tokens: int):
        s = self.shape
        x0 = torch.randn(tokens, s.hidden, device=self.device).to(DTYPES[s.dtype])

        def step():
            x = x0
            q_width = s.num_q_heads * s.head_dim
            kv_width = s.num_kv_heads * s.head_dim
            for w in self.layers:
                qkv = x @ w["qkv"].T
                q = qkv[:, :q_width].reshape(tokens, s.num_q_heads, s.head_dim)
                k = qkv[:, q_width : q_width + kv_width].reshape(tokens, s.num_kv_heads, s.head_dim)
                v = qkv[:, q_width + kv_width :].reshape(tokens, s.num_kv_heads, s.head_dim)
                attn = prefill_attention(q, k, v)
                x = attn.reshape(tokens, -1) @ w["o"].T
                gate, up = (x @ w["gate_up"].T).chunk(2, dim=-1)
                x = (torch.nn.functional.silu(gate) * up) @ w["down"].T
            return x

        return step
