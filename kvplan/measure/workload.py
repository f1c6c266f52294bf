"""A model's decode and prefill steps on the local device, truncated to its first N layers and
built from kvplan's own description of them (`formulas.step_time.layer_shape`: the widths the
config states), so that the operators timed are the operators the step-time model predicts.

Per layer: RMS norm, the fused q|k|v projection, attention (decode: `paged_decode_attention` over
a paged cache whose physical blocks are shuffled and distinct per sequence; prefill: causal
attention, and K and V written to the cache through a slot mapping), the output projection and a
residual add, RMS norm, the MLP (gate|up fused, silu(gate) * up, down; or up, activation, down)
and a residual add. Embeddings and the output head are not built: a decode step's head is one
more matrix, a prefill's is run once."""

from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F

from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.step_time import layer_shape
from kvplan.kernels import paged_decode_attention, prefill_attention, write_kv
from kvplan.measure.probes import DTYPES

BLOCK_SIZE = 16


def truncate(spec: ModelSpec, layers: int) -> ModelSpec:
    """The first `layers` layers alone: their parameters by part (Layer.params), no embeddings
    and no output head; each layer checked to be one the workload can build."""
    if not 1 <= layers <= spec.num_layers:
        raise KvplanError(f"--layers {layers}: {spec.name} has {spec.num_layers} layers")
    kept = spec.layers[:layers]
    for layer in kept:
        layer_shape(spec, layer)  # refuses what it cannot lay out
    parts: Counter = Counter()
    for layer in kept:
        parts.update(dict(layer.params))
    return spec._replace(
        name=f"{spec.name} (first {layers} layer{'s' if layers > 1 else ''})",
        layers=kept,
        param_parts=dict(parts),
        moe=None,
        tied_embeddings=False,
    )


def _rms_norm(x, weight):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, 1e-6)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


class Workload:
    """Weights and a paged cache for a truncated `spec` on `device`; decode, prefill and
    attention-alone callables with every host-side value prepared outside the timed call."""

    def __init__(
        self,
        spec: ModelSpec,
        dtype: str,
        device: str,
        max_kv_tokens: int,
        attention_impl: str = "auto",
        seed: int = 0,
    ):
        # the weights and caches are drawn from `seed` without touching the caller's RNG state
        cuda = [torch.device(device).index or 0] if device.startswith("cuda") else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            self._build(spec, dtype, device, max_kv_tokens, attention_impl)

    def _build(
        self, spec: ModelSpec, dtype: str, device: str, max_kv_tokens: int, attention_impl: str
    ) -> None:
        self.spec, self.device, self.impl = spec, device, attention_impl
        self.dt = DTYPES[dtype]
        h = spec.hidden_size
        self.layers = []
        for layer in spec.layers:
            shape = layer_shape(spec, layer)
            weights = {
                m.name: self._rand(m.rows, m.cols, scale=1 / math.sqrt(m.cols))
                for m in shape.matrices
            }
            attn = shape.attention
            self.layers.append(
                {
                    "shape": shape,
                    "weights": weights,
                    "norm_in": torch.ones(h, device=device, dtype=self.dt),
                    "norm_post": torch.ones(h, device=device, dtype=self.dt),
                    "cache": self._cache(max_kv_tokens, attn.num_kv_heads, attn.head_dim),
                }
            )
        blocks = self.layers[0]["cache"][0].shape[0]
        # distinct, shuffled physical blocks: no two sequences share one, none is adjacent
        self.order = torch.randperm(blocks, device=device).to(torch.int32)

    def _rand(self, *shape, scale=1.0):
        return (torch.randn(*shape, device=self.device) * scale).to(self.dt)

    def _cache(self, tokens: int, heads: int, head_dim: int):
        blocks = -(-tokens // BLOCK_SIZE) + 1
        return (
            self._rand(blocks, BLOCK_SIZE, heads, head_dim),
            self._rand(blocks, BLOCK_SIZE, heads, head_dim),
        )

    def _table(self, batch: int, context: int):
        per_seq = max(1, -(-context // BLOCK_SIZE))
        if batch * per_seq > self.order.numel():
            raise KvplanError(f"the cache pool holds fewer than {batch} x {context} tokens")
        table = self.order[: batch * per_seq].view(batch, per_seq)
        lens = torch.full((batch,), context, dtype=torch.int32, device=self.device)
        return table, lens

    def _attend(self, layer: dict, q, table, lens, context: int):
        attn = layer["shape"].attention
        k_cache, v_cache = layer["cache"]
        return paged_decode_attention(
            q,
            k_cache,
            v_cache,
            table,
            lens,
            sliding_window=attn.window if attn.kind.windowed else None,
            max_seq_len=context,
            impl=self.impl,
        )

    def _layer(self, layer: dict, x, attend):
        shape, w = layer["shape"], layer["weights"]
        attn = shape.attention
        tokens = x.shape[0]
        q_width = attn.num_q_heads * attn.qk_head_dim
        k_width = attn.num_kv_heads * attn.head_dim
        qkv = F.linear(_rms_norm(x, layer["norm_in"]), w["qkv"])
        q = qkv[:, :q_width].view(tokens, attn.num_q_heads, attn.qk_head_dim)
        k = qkv[:, q_width : q_width + k_width].view(tokens, attn.num_kv_heads, attn.head_dim)
        v = qkv[:, q_width + k_width :].view(tokens, attn.num_kv_heads, attn.head_dim_v)
        out = attend(layer, q, k, v)
        x = x + F.linear(out.reshape(tokens, -1), w["o"])
        y = _rms_norm(x, layer["norm_post"])
        if shape.gated:
            gate, up = F.linear(y, w["gate_up"]).chunk(2, dim=-1)
            hidden = F.silu(gate).mul_(up)
        else:
            hidden = F.gelu(F.linear(y, w["up"]))
        return x + F.linear(hidden, w["down"])

    def decode(self, batch: int, context: int):
        """One decode step of `batch` sequences at `context` cached tokens (the new token's K and
        V are not written: a few KB)."""
        table, lens = self._table(batch, context)
        x0 = self._rand(batch, self.spec.hidden_size)

        def attend(layer, q, k, v):
            return self._attend(layer, q, table, lens, context)

        def step():
            x = x0
            for layer in self.layers:
                x = self._layer(layer, x, attend)
            return x

        return step

    def attention(self, batch: int, context: int):
        """The first layer's decode attention alone: the decode-attention probe."""
        layer = self.layers[0]
        attn = layer["shape"].attention
        table, lens = self._table(batch, context)
        q = self._rand(batch, attn.num_q_heads, attn.qk_head_dim)
        return lambda: self._attend(layer, q, table, lens, context)

    def prefill(self, tokens: int):
        """The prefill of one prompt of `tokens`: causal attention, K and V written to the
        cache."""
        table, _ = self._table(1, tokens)
        offsets = torch.arange(tokens, device=self.device)
        slots = table[0].long()[offsets // BLOCK_SIZE] * BLOCK_SIZE + offsets % BLOCK_SIZE
        x0 = self._rand(tokens, self.spec.hidden_size)

        def attend(layer, q, k, v):
            attn = layer["shape"].attention
            write_kv(k, v, *layer["cache"], slots)
            window = attn.window if attn.kind.windowed else None
            return prefill_attention(q, k, v, sliding_window=window)

        def step():
            x = x0
            for layer in self.layers:
                x = self._layer(layer, x, attend)
            return x

        return step

    def prefill_attention(self, tokens: int):
        """The first layer's prefill attention alone: the prefill-attention probe."""
        attn = self.layers[0]["shape"].attention
        q = self._rand(tokens, attn.num_q_heads, attn.qk_head_dim)
        k = self._rand(tokens, attn.num_kv_heads, attn.head_dim)
        v = self._rand(tokens, attn.num_kv_heads, attn.head_dim_v)
        window = attn.window if attn.kind.windowed else None
        return lambda: prefill_attention(q, k, v, sliding_window=window)
