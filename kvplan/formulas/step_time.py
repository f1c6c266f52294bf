"""The step-time model: how long a decode step or a prefill takes on a device.

At its floor (`decode_step`, `prefill_step`): time = max(bytes / bandwidth, FLOPs / peak), the
whole step on the textbook roofline; `roofline` and the planner predict through it, the device
entering as `Rates` (a datasheet's or measured).

Per operator (`decode_ops`, `prefill_ops`, `step_time`): a step is the list of operators a layer
runs, laid out from the widths the config states (`layer_shape`); each operator takes
max(bytes / BW, FLOPs / throughput(shape)) + launches x overhead, and the step is their sum.
`kvplan measure` predicts through this with a profile measured on the device, and checks it.
"""

from __future__ import annotations

import math
from enum import Enum

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, distinct_layers
from kvplan.dtypes import ELEMENT_BYTES, KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.flops import (
    attention_flops_per_decode_token,
    flops_per_decode_token,
    matmul_params,
    prefill_flops,
)
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.weights import weight_bytes_read_per_decode_step
from kvplan.record import NamedTuple


class Rates(NamedTuple):
    """What a device sustains: memory bandwidth and matmul throughput in the compute dtype."""

    bandwidth_bytes_per_s: float
    peak_flop_per_s: float


def time_floor_s(num_bytes: float, flops: float, rates: Rates) -> float:
    """Roofline time floor: max(bytes / BW, FLOPs / peak)."""
    return max(num_bytes / rates.bandwidth_bytes_per_s, flops / rates.peak_flop_per_s)


def bound(num_bytes: float, flops: float, rates: Rates) -> str:
    """Which roof limits: 'memory' when moving the bytes takes at least as long as the FLOPs."""
    memory_s = num_bytes / rates.bandwidth_bytes_per_s
    return "memory" if memory_s >= flops / rates.peak_flop_per_s else "compute"


class Step(NamedTuple):
    batch_size: int
    context_len: int
    flops: float
    bytes: float
    time_floor_s: float
    bound: str

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def floor_step(
    batch_size: int, context_len: int, flops: float, num_bytes: float, rates: Rates
) -> Step:
    """A step of `flops` and `num_bytes` at its roofline floor (decode, prefill, the DP-attention
    rank of expert_parallel, the verification of techniques)."""
    return Step(
        batch_size,
        context_len,
        flops,
        num_bytes,
        time_floor_s(num_bytes, flops, rates),
        bound(num_bytes, flops, rates),
    )


def decode_step(
    spec: ModelSpec,
    rates: Rates,
    batch_size: int,
    context_len: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> Step:
    """One decode step of `batch_size` sequences at `context_len`, per GPU:
    FLOPs = B * f(s) / tp; bytes = weights read per step / tp + B * KV(s) per rank."""
    flops = batch_size * flops_per_decode_token(spec, context_len) / tp
    weights = weight_bytes_read_per_decode_step(spec, weights_dtype, batch_size) / tp
    num_bytes = weights + batch_size * kv_bytes_per_sequence(spec, context_len, fmt, tp)
    return floor_step(batch_size, context_len, flops, num_bytes, rates)


def prefill_step(
    spec: ModelSpec,
    rates: Rates,
    num_tokens: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> Step:
    """Prefill of one sequence of `num_tokens`: weights read once, the KV written once."""
    flops = prefill_flops(spec, num_tokens) / tp
    weights = weight_bytes_read_per_decode_step(spec, weights_dtype, num_tokens) / tp
    num_bytes = weights + kv_bytes_per_sequence(spec, num_tokens, fmt, tp)
    return floor_step(1, num_tokens, flops, num_bytes, rates)


# ---- the per-operator model ------------------------------------------------------------------
# A step is a list of operators; each takes max(bytes / BW, FLOPs / throughput(shape)) plus a
# fixed cost per launch, and the step is their sum (one stream: operators do not overlap).
# Throughput is a curve, not a peak: a skinny GEMM of 4 rows, a decode attention over 1k tokens
# and a prefill attention over 256 run far below a square GEMM's rate on a CPU, and the model
# must say so. A datasheet gives flat curves at the peak and no launch cost.


class OpKind(str, Enum):
    MATMUL = "matmul"  # curve read at the GEMM's rows (tokens)
    DECODE_ATTENTION = "decode_attention"  # curve read at the KV tokens one call reads
    PREFILL_ATTENTION = "prefill_attention"  # curve read at the prompt's tokens
    ELEMENTWISE = "elementwise"  # streams its bytes: norms, activations, residuals, cache writes


class Op(NamedTuple):
    """One operator of a step: its FLOPs, the bytes it moves by kind, where its throughput curve
    is read, and how many launches (kernels, or dispatches on a CPU) it takes."""

    name: str
    kind: OpKind
    size: int
    flops: float
    weight_bytes: float
    kv_bytes: float
    activation_bytes: float
    launches: int = 1
    width: int = 0  # a GEMM's input features: how long the weight rows it streams are

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes


Curve = tuple[tuple[float, float], ...]  # (size, rate) points, sizes ascending


class OpRates(NamedTuple):
    """What a device sustains per operator class: the bandwidth a streaming kernel reaches, the
    bandwidth a GEMM streams its weights at, a throughput curve per compute class, and a fixed
    cost per launch."""

    bandwidth_bytes_per_s: float  # elementwise operators, gathers, a fused attention's KV
    matmul_bandwidth_bytes_per_s: Curve  # a GEMM's weights, by its input width (row length)
    matmul_flop_per_s: Curve
    decode_attention_flop_per_s: Curve
    prefill_attention_flop_per_s: Curve
    overhead_s: float = 0.0  # per launch of any operator
    matmul_overhead_s: float = 0.0  # more per GEMM: what a cold GEMM costs beyond its bytes

    @classmethod
    def flat(cls, bandwidth_bytes_per_s: float, peak_flop_per_s: float) -> OpRates:
        """A datasheet's rates: one bandwidth, every class at the peak, no launch cost (the
        textbook roofline)."""
        peak = ((1.0, peak_flop_per_s),)
        flat = ((1.0, bandwidth_bytes_per_s),)
        return cls(bandwidth_bytes_per_s, flat, peak, peak, peak, 0.0, 0.0)

    def curve(self, kind: OpKind) -> Curve:
        return {
            OpKind.MATMUL: self.matmul_flop_per_s,
            OpKind.DECODE_ATTENTION: self.decode_attention_flop_per_s,
            OpKind.PREFILL_ATTENTION: self.prefill_attention_flop_per_s,
        }[kind]

    def bandwidth(self, op: Op) -> float:
        if op.kind is OpKind.MATMUL:
            return curve_value(self.matmul_bandwidth_bytes_per_s, op.width)
        return self.bandwidth_bytes_per_s


def curve_value(curve: Curve, size: float) -> float:
    """A rate at `size`: linear in log(size) and log(rate) between the measured points, the
    nearest point's value beyond either end (never extrapolated)."""
    if not curve:
        raise ValueError("empty throughput curve")
    if size <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if size == x1:
            return y1
        if size < x1:
            t = math.log(size / x0) / math.log(x1 / x0)
            return math.exp(math.log(y0) + t * math.log(y1 / y0))
    return curve[-1][1]


class OpTime(NamedTuple):
    name: str
    kind: OpKind
    time_s: float
    memory_s: float  # bytes / BW
    compute_s: float  # FLOPs / throughput(shape)
    overhead_s: float  # launches x the per-launch cost
    bound: str  # memory | compute: the larger of the two terms


def op_time(op: Op, rates: OpRates) -> OpTime:
    """max(bytes / BW, FLOPs / throughput(shape)) + launches x overhead (a GEMM's launch
    costs the GEMM's fixed cost on top)."""
    memory = op.bytes / rates.bandwidth(op)
    compute = op.flops / curve_value(rates.curve(op.kind), op.size) if op.flops else 0.0
    per_launch = rates.overhead_s
    if op.kind is OpKind.MATMUL:
        per_launch += rates.matmul_overhead_s
    overhead = op.launches * per_launch
    return OpTime(
        op.name,
        op.kind,
        max(memory, compute) + overhead,
        memory,
        compute,
        overhead,
        "memory" if memory >= compute else "compute",
    )


class OpsStepTime(NamedTuple):
    """A step's predicted time as the sum of its operators (`step_time`), split by the term that
    bounds each operator; the engine step of simulate and plan is batch_step.BatchStepTime."""

    time_s: float
    memory_bound_s: float  # time of the operators whose bytes bind
    compute_bound_s: float  # time of the operators whose throughput binds
    overhead_s: float
    bound: str  # memory | compute | overhead: the largest share
    ops: tuple[OpTime, ...]


def step_time(ops: list[Op], rates: OpRates) -> OpsStepTime:
    times = tuple(op_time(op, rates) for op in ops)
    memory = sum(t.time_s - t.overhead_s for t in times if t.bound == "memory")
    compute = sum(t.time_s - t.overhead_s for t in times if t.bound == "compute")
    overhead = sum(t.overhead_s for t in times)
    shares = {"memory": memory, "compute": compute, "overhead": overhead}
    return OpsStepTime(
        memory + compute + overhead,
        memory,
        compute,
        overhead,
        max(shares, key=shares.__getitem__),
        times,
    )


def scale_bytes(ops: list[Op], weights: float = 1.0, kv: float = 1.0) -> list[Op]:
    """The same operators with their weight and KV bytes scaled: what a wrong dtype or a wrong
    cache geometry would predict (the self-test of `kvplan measure --check`)."""
    return [
        op._replace(weight_bytes=op.weight_bytes * weights, kv_bytes=op.kv_bytes * kv) for op in ops
    ]


# ---- a layer's operators, from the widths the config states ------------------------------------
class Matrix(NamedTuple):
    """A weight matrix y = x W^T: `rows` output features by `cols` input features."""

    name: str
    rows: int
    cols: int

    @property
    def params(self) -> int:
        return self.rows * self.cols


class LayerShape(NamedTuple):
    """What one decoder layer runs: the fused q|k|v and output projections, the MLP's matrices
    (gate|up fused, as serving engines run them, then down; or up, down), and the parameters that
    are no matmul (norm weights, biases)."""

    attention: Attention
    matrices: tuple[Matrix, ...]  # qkv, o, then the MLP's in execution order
    mlp_width: int
    gated: bool
    other_params: int


def layer_shape(spec: ModelSpec, layer: Layer) -> LayerShape:
    """A layer laid out from stored widths: Attention's heads and head widths, the spec's
    intermediate_size; whether the MLP is gated follows from its stored parameter count (three
    matrices of hidden x width, or two). Refuses what it cannot lay out exactly."""
    attn, parts = layer.attention, dict(layer.params)
    h = spec.hidden_size
    if attn is None or layer.state is not None or attn.kind is CacheKind.MLA:
        kind = "a recurrent state" if layer.state is not None else (attn and attn.kind.value)
        raise KvplanError(f"{spec.name}: a layer with {kind or 'no attention'} is not measured")
    width = spec.intermediate_size
    if "mlp" not in parts or not width or set(parts) - {"attention", "mlp", "norms"}:
        raise KvplanError(f"{spec.name}: only dense attention + MLP layers are measured")
    q_width = attn.num_q_heads * attn.qk_head_dim
    kv_width = attn.num_kv_heads * (attn.head_dim + attn.head_dim_v)
    qkv = Matrix("qkv", q_width + kv_width, h)
    o = Matrix("o", h, attn.num_q_heads * attn.v_head_dim)
    gated = parts["mlp"] >= 3 * h * width
    mlp = (
        (Matrix("gate_up", 2 * width, h), Matrix("down", h, width))
        if gated
        else (Matrix("up", width, h), Matrix("down", h, width))
    )
    matrices = (qkv, o, *mlp)
    other = sum(parts.values()) - sum(m.params for m in matrices)
    # biases, norms, sinks: a few widths. More means matrices these widths do not describe
    # (a gated query, a second projection): refuse rather than mis-model them.
    if not 0 <= other <= 8 * (h + width + q_width + kv_width):
        raise KvplanError(
            f"{spec.name}: its layer holds {other:,} parameters its stated widths do not lay out"
        )
    return LayerShape(attn, matrices, width, gated, other)


def _one_layer(spec: ModelSpec, layer: Layer) -> ModelSpec:
    """The spec of one layer alone (no embeddings, no head): what a layer's formulas read."""
    return spec._replace(layers=(layer,), param_parts=dict(layer.params), moe=None)


def _matmul(m: Matrix, tokens: int, weight_bytes: int, act_bytes: int) -> Op:
    return Op(
        m.name,
        OpKind.MATMUL,
        tokens,
        2 * tokens * m.params,
        m.params * weight_bytes,
        0,
        tokens * (m.rows + m.cols) * act_bytes,
        1,
        m.cols,
    )


def _rank_matrices(spec: ModelSpec, shape: LayerShape, tp: int) -> tuple[Matrix, ...]:
    """One tensor-parallel rank's share of a layer's matrices, as vLLM splits them: q|k|v and
    gate|up by output features (the KV heads at max(1, Hkv // tp), replicated below one per
    rank), o and down by input features."""
    if tp == 1:
        return shape.matrices
    attn, h = shape.attention, spec.hidden_size
    qkv, o, *mlp = shape.matrices
    q_width = -(-attn.num_q_heads // tp) * attn.qk_head_dim
    kv_width = attn.kv_heads_per_rank(tp) * (attn.head_dim + attn.head_dim_v)
    rank = [
        Matrix(qkv.name, q_width + kv_width, h),
        Matrix(o.name, h, -(-o.cols // tp)),
        Matrix(mlp[0].name, -(-mlp[0].rows // tp), h),
        Matrix(mlp[1].name, h, -(-mlp[1].cols // tp)),
    ]
    return tuple(rank)


def _layer_ops(
    spec: ModelSpec, layer: Layer, tokens: int, attention: list[Op], dtype: str, tp: int = 1
) -> list[Op]:
    """The operators of one layer over `tokens` rows on one of `tp` ranks, in execution
    order."""
    shape = layer_shape(spec, layer)
    p = ELEMENT_BYTES[dtype]
    h, w = spec.hidden_size, -(-shape.mlp_width // tp)
    qkv, o, *mlp = _rank_matrices(spec, shape, tp)
    # two norms (read + write) and two residual adds (read 2, write 1); the norm weights and
    # biases are read once
    norms = Op("norms", OpKind.ELEMENTWISE, 0, 0, shape.other_params * p, 0, 10 * tokens * h * p, 4)
    # silu(gate) * up: read + write, then read 2 + write 1; a plain MLP's activation: read + write
    act_bytes = (5 if shape.gated else 2) * tokens * w * p
    activation = Op(
        "activation", OpKind.ELEMENTWISE, 0, 0, 0, 0, act_bytes, 2 if shape.gated else 1
    )
    return [
        norms,
        _matmul(qkv, tokens, p, p),
        *attention,
        _matmul(o, tokens, p, p),
        _matmul(mlp[0], tokens, p, p),
        activation,
        _matmul(mlp[1], tokens, p, p),
    ]


def measurable(spec: ModelSpec) -> bool:
    """Whether every layer is one the per-operator model lays out (dense attention + MLP, the
    layers `kvplan measure` times); MoE, MLA and recurrent layers are not."""
    try:
        for layer, _ in distinct_layers(spec.layers):
            layer_shape(spec, layer)
    except KvplanError:
        return False
    return True


def batch_ops(
    spec: ModelSpec,
    dtype: str,
    fmt: KvFormat,
    num_decodes: int = 0,
    decode_context: int = 0,
    prefill_chunks: tuple[tuple[int, int], ...] = (),
    num_sampled: int = 0,
    tp: int = 1,
    gather_kv: bool = False,
) -> list[Op]:
    """Every operator of one forward over a mixed batch, on one of `tp` ranks: `num_decodes`
    sequences decoding one token each at `decode_context` tokens, and prefill chunks as (new
    tokens, tokens cached before the chunk); weights and activations in the plain `dtype`, the
    cache in `fmt`. Each layer's GEMMs run once over every token of the step; each decode
    layer runs one attention call over all decodes, each chunk its own causal attention over
    its cached tokens and itself, writing its K and V. `num_sampled` > 0 adds the input
    embedding's lookup and the output head over the sampled positions (a whole model's
    forward; `kvplan measure` times the layers alone).

    With `gather_kv` the decode attention is two operators, as a kernel that first gathers the
    pages into a cache-sized buffer runs it (kvplan's torch path): the gather streams the KV,
    the attention computes on what the gather left in cache. Without it (a fused paged kernel),
    one operator does both. A decode step (`decode_ops`) and a prompt's prefill (`prefill_ops`)
    are the two pure shapes; `simulate` and `plan` price every step of a measured profile
    through this list, so the operators `kvplan measure --check` validates are the ones the
    simulator runs."""
    p = ELEMENT_BYTES[dtype]
    tokens = num_decodes + sum(n for n, _ in prefill_chunks)
    ops: list[Op] = []
    if num_sampled:
        h = spec.hidden_size
        ops.append(Op("embedding", OpKind.ELEMENTWISE, 0, 0, 0, 0, 2 * tokens * h * p, 1))
    for layer in spec.layers:
        one = _one_layer(spec, layer)
        attn = layer_shape(spec, layer).attention
        q_heads = -(-attn.num_q_heads // tp)
        q_out_per_token = q_heads * (attn.qk_head_dim + attn.v_head_dim) * p
        attention: list[Op] = []
        if num_decodes:
            kv = num_decodes * kv_bytes_per_sequence(one, decode_context, fmt, tp)
            flops = num_decodes * attention_flops_per_decode_token(one, decode_context)
            if gather_kv:
                attention.append(Op("kv_gather", OpKind.ELEMENTWISE, 0, 0, 0, kv, 0, 2))
            attention.append(
                Op(
                    "attention",
                    OpKind.DECODE_ATTENTION,
                    num_decodes * attn.tokens_held(decode_context),
                    flops * q_heads // attn.num_q_heads,
                    0,
                    0 if gather_kv else kv,
                    num_decodes * q_out_per_token,
                )
            )
        for new, cached in prefill_chunks:
            end = cached + new
            # the chunk's queries over the cached keys and themselves (causal)
            flops = prefill_flops(one, end) - prefill_flops(one, cached)
            flops -= 2 * matmul_params(one) * new
            written = kv_bytes_per_sequence(one, new, fmt, tp)
            # K and V written to the cache (and read from the projection: as many bytes again
            # when the cache keeps the compute dtype, as it does in `kvplan measure`)
            attention.append(Op("kv_write", OpKind.ELEMENTWISE, 0, 0, 0, written, written, 2))
            attention.append(
                Op(
                    "attention",
                    OpKind.PREFILL_ATTENTION,
                    new,
                    flops * q_heads // attn.num_q_heads,
                    0,
                    kv_bytes_per_sequence(one, end, fmt, tp),
                    new * q_out_per_token,
                )
            )
        ops += _layer_ops(spec, layer, tokens, attention, dtype, tp)
    if num_sampled:
        vocab = -(-spec.head_params // spec.hidden_size // tp)
        ops.append(_matmul(Matrix("lm_head", vocab, spec.hidden_size), num_sampled, p, p))
    return ops


def decode_ops(
    spec: ModelSpec,
    batch_size: int,
    context_len: int,
    dtype: str,
    fmt: KvFormat,
    gather_kv: bool = False,
) -> list[Op]:
    """Every layer's operators for one decode step of `batch_size` sequences at `context_len`:
    batch_ops' decode-only shape."""
    return batch_ops(
        spec, dtype, fmt, num_decodes=batch_size, decode_context=context_len, gather_kv=gather_kv
    )


def prefill_ops(spec: ModelSpec, num_tokens: int, dtype: str, fmt: KvFormat) -> list[Op]:
    """Every layer's operators for the prefill of one `num_tokens` prompt: causal attention, and
    its K and V written to the cache (batch_ops' one-chunk shape)."""
    return batch_ops(spec, dtype, fmt, prefill_chunks=((num_tokens, 0),))


def op_rates_of(profile, dtype: str) -> OpRates:
    """A profile's per-operator rates (a GpuProfile): its measured curves where it has them,
    else the datasheet's flat roofline (bandwidth and the `dtype` peak, no launch cost)."""
    m = profile.measured
    if m is not None:
        return OpRates(
            profile.memory_bandwidth_bytes_per_s,
            m.matmul_bandwidth_bytes_per_s,
            m.matmul_flop_per_s,
            m.decode_attention_flop_per_s,
            m.prefill_attention_flop_per_s,
            m.overhead_s,
            m.matmul_overhead_s,
        )
    return OpRates.flat(profile.memory_bandwidth_bytes_per_s, profile.peak(dtype))
