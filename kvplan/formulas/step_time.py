"""The step-time model: how long a decode step or a prefill takes on a device.

At its floor (`decode_step`, `prefill_step`): time = max(bytes / bandwidth, FLOPs / peak), the
whole step on the textbook roofline; `roofline` and the planner predict through it, the device
entering as `Rates` (a datasheet's or measured).

Per operator (`decode_ops`, `prefill_ops`, `step_time`): a step is the list of operators a layer
runs, laid out from the widths the config states (`layer_shape`); each operator takes
max(bytes / BW, FLOPs / throughput(shape)) + launches x overhead, and the step is their sum.
`kvplan measure` predicts through this with a profile measured on the device, and checks it.

The engine step of `simulate` and `plan` (batch_step.StepModel) prices the same operator list at
the achieved rates of the engine's kernels. All three evaluators return one type, `StepTime`.
"""

from __future__ import annotations

from enum import Enum

from kvplan.anatomy.model import (
    KEPT,
    Attention,
    CacheKind,
    Layer,
    ModelSpec,
    distinct_layers,
    kept_with,
)
from kvplan.curves import curve_value
from kvplan.dtypes import ELEMENT_BYTES, KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.flops import (
    _decode_flop_per_key,
    causal_keys_attended,
    decode_indexer_flops,
    decode_keys_attended,
    prefill_compressed_keys,
    prefill_indexer_flops,
)
from kvplan.formulas.kv import _group_layers, decode_read_excess_bytes
from kvplan.formulas.weights import embedding_rows_read, part_bytes_per_param, weight_bytes
from kvplan.record import NamedTuple


class Rates(NamedTuple):
    """What a device sustains: memory bandwidth and matmul throughput in the compute dtype."""

    bandwidth_bytes_per_s: float
    peak_flop_per_s: float


def roofs_s(num_bytes: float, flops: float, rates: Rates) -> tuple[float, float]:
    """The two roofs: (bytes / BW, FLOPs / peak)."""
    return num_bytes / rates.bandwidth_bytes_per_s, flops / rates.peak_flop_per_s


def time_floor_s(num_bytes: float, flops: float, rates: Rates) -> float:
    """Roofline time floor: max(bytes / BW, FLOPs / peak)."""
    return max(roofs_s(num_bytes, flops, rates))


def bound(num_bytes: float, flops: float, rates: Rates) -> str:
    """Which roof limits: 'memory' when moving the bytes takes at least as long as the FLOPs."""
    memory_s, compute_s = roofs_s(num_bytes, flops, rates)
    return "memory" if memory_s >= compute_s else "compute"


class StepTime(NamedTuple):
    """One step's time as an evaluator prices it (seconds, per GPU): its total and its terms by
    name, each in seconds. The three evaluators and their terms:

        the datasheet floor (floor_step: decode_step, prefill_step, the DP-attention rank of
            expert_parallel, the verification of techniques): memory_s (bytes / bandwidth),
            compute_s (FLOPs / peak); the roofs overlap, so the total is the larger of the two
        per operator (step_time, `kvplan measure`): memory_s and compute_s (the operators
            whose bytes, or whose throughput, bind each, less their launches), overhead_s (every
            launch's fixed cost); the total is their sum
        the engine step (batch_step.StepModel: simulate, plan): weights_s, matmul_s (the GEMMs,
            by the roof that binds each), kv_read_s, attention_s (attention, likewise),
            sampler_s, comm_s, launch_s (batch_step.GPU_TERMS), host_s (the CPU's scheduling);
            the total is the GPU terms plus host_s, or the larger of the two (async scheduling)

    `bound` is the largest term (the roof that binds). The FLOPs and bytes counted (the floor's
    every FLOP and the bytes that cross memory; the per-operator model's FLOPs and bytes it
    priced, activations included), the sequences and context of the step (the floor's), and
    the operators' own times (the per-operator model's) are there where the evaluator knows
    them, None (or no operators) where it does not. `untimed_s`: the seconds of the terms that
    hold a part no kernel table times (batch_step.StepModel.untimed_s; 0 where every part is
    timed or the evaluator does not say): not a term, a share of them. `stand_in_launch_s`: of
    launch_s, the seconds priced on another release's eager DSA module rows
    (batch_step.StepModel.dsa_eager_s; also in untimed_s): a run names those rows as an untimed
    part only where a step charged them (batch_step.run_untimed_parts)."""

    total_s: float
    terms_s: dict[str, float]
    flops: float | None = None
    bytes: float | None = None
    batch_size: int | None = None
    context_len: int | None = None
    ops: tuple[OpTime, ...] = ()
    untimed_s: float = 0.0
    stand_in_launch_s: float = 0.0

    @property
    def bound(self) -> str:
        """The name of the largest term less its unit (the first of equals): memory, compute,
        overhead, weights, kv_read, ..."""
        terms = self.terms_s
        return max(terms, key=terms.__getitem__).removesuffix("_s")

    @property
    def intensity(self) -> float:
        """FLOPs per byte of what the evaluator counted."""
        flops, num_bytes = self.counts()
        return flops / num_bytes

    def counts(self) -> tuple[float, float]:
        """(FLOPs, bytes) the evaluator counted; refuses a step whose evaluator counts none
        (the engine step's terms are timed from sums kept per kernel kind)."""
        if self.flops is None or self.bytes is None:
            raise ValueError("this step's evaluator counts no FLOPs or bytes")
        return self.flops, self.bytes


FLOOR_TERMS = ("memory_s", "compute_s")


def floor_step(
    batch_size: int, context_len: int, flops: float, num_bytes: float, rates: Rates
) -> StepTime:
    """A step of `flops` and `num_bytes` at its roofline floor (decode, prefill, the DP-attention
    rank of expert_parallel, the verification of techniques): time_floor_s, its terms the two
    roofs (FLOOR_TERMS), its bound the larger (`bound`: memory on a tie)."""
    memory_s, compute_s = roofs_s(num_bytes, flops, rates)
    return StepTime(
        max(memory_s, compute_s),
        {"memory_s": memory_s, "compute_s": compute_s},
        flops,
        num_bytes,
        batch_size,
        context_len,
    )


def decode_step(
    spec: ModelSpec,
    rates: Rates,
    batch_size: int,
    context_len: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> StepTime:
    """One decode step of `batch_size` sequences at `context_len`, per GPU, at its floor: the
    sums of the whole model's operators (step_ops, split evenly over `tp`): FLOPs = B * f(s) / tp;
    bytes = weights read per step / tp + B * KV(s) per rank."""
    flops, num_bytes = kept_with(
        _DECODE_SUMS,
        spec,
        (batch_size, context_len, weights_dtype, fmt, tp),
        lambda: floor_sums(
            step_ops(
                spec,
                weights_dtype,
                fmt,
                num_decodes=batch_size,
                decode_context=context_len,
                num_sampled=batch_size,
                tp=tp,
                even_split=True,
                whole_model=True,
            )
        ),
    )
    return floor_step(batch_size, context_len, flops, num_bytes, rates)


# decode_step's sums per spec and shape, held with the spec: `capacity --gpu all` asks the same
# step of the GPU kinds that share a batch (90 distinct of 137 for llama-3.1-8b)
_DECODE_SUMS: dict[tuple, tuple] = {}


def prefill_step(
    spec: ModelSpec,
    rates: Rates,
    num_tokens: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> StepTime:
    """Prefill of one sequence of `num_tokens` at its floor: weights read once, the KV written
    once, the head over the last position only (the one sampled: vLLM's logits_indices, SGLang's
    LogitsProcessor on each sequence's last token)."""
    groups = step_ops(
        spec,
        weights_dtype,
        fmt,
        prefill_chunks=((num_tokens, 0),),
        num_sampled=1,
        tp=tp,
        even_split=True,
        whole_model=True,
    )
    flops, num_bytes = floor_sums(groups)
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
    # FLOPs of a streaming operator's parameters (norm weights, biases: 2 per parameter per
    # token, the floor's rule for every parameter): the datasheet floor counts them at the
    # peak; the per-operator model prices a streaming operator by its bytes alone
    elementwise_flops: float = 0.0

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


OPS_TERMS = ("memory_s", "compute_s", "overhead_s")


def step_time(ops: list[Op], rates: OpRates) -> StepTime:
    """A step's predicted time as the sum of its operators' (op_time), by the term that bounds
    each operator (OPS_TERMS), with the operators' own times."""
    times = tuple(op_time(op, rates) for op in ops)
    memory = sum(t.time_s - t.overhead_s for t in times if t.bound == "memory")
    compute = sum(t.time_s - t.overhead_s for t in times if t.bound == "compute")
    overhead = sum(t.overhead_s for t in times)
    return StepTime(
        memory + compute + overhead,
        {"memory_s": memory, "compute_s": compute, "overhead_s": overhead},
        sum(op.flops for op in ops),
        sum(op.bytes for op in ops),
        None,
        None,
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


def _op(
    name: str,
    kind: OpKind,
    size: int,
    flops: float,
    weight_bytes: float,
    kv_bytes: float,
    activation_bytes: float,
    launches: int = 1,
    width: int = 0,
    elementwise_flops: float = 0.0,
    share: int = 1,
) -> Op:
    """Op(...), built without the record's keyword handling (the floor builds thousands); with
    `share` > 1, its FLOPs, weights and activations split evenly over that many ranks."""
    if share != 1:
        flops, weight_bytes = flops / share, weight_bytes / share
        activation_bytes, elementwise_flops = activation_bytes / share, elementwise_flops / share
    return _tuple_new(
        Op,
        (
            name,
            kind,
            size,
            flops,
            weight_bytes,
            kv_bytes,
            activation_bytes,
            launches,
            width,
            elementwise_flops,
        ),
    )


_tuple_new = tuple.__new__


def _matmul(m: Matrix, tokens: int, weight_bytes: float, act_bytes: int, share: int = 1) -> Op:
    """A GEMM of `tokens` rows through `m`, its weights at `weight_bytes` per parameter."""
    return _op(
        m.name,
        OpKind.MATMUL,
        tokens,
        2 * tokens * m.params,
        m.params * weight_bytes,
        0,
        tokens * (m.rows + m.cols) * act_bytes,
        1,
        m.cols,
        0,
        share,
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


# Bytes per parameter of each part in a weights dtype, per spec (held with it, so that its id is
# not reused): a roofline sweep asks the same spec and dtype at every batch and context.
_PART_BYTES: dict[tuple, tuple] = {}


def _part_bytes(spec: ModelSpec, dtype: str) -> tuple[dict[str, float], tuple, float]:
    """({part: bytes per parameter in `dtype`} for every part of the spec and its layers, the
    parameters outside the layers (_model_parts), the bytes a checkpoint stores outside its named
    parts)."""
    return kept_with(_PART_BYTES, spec, (dtype,), lambda: _find_part_bytes(spec, dtype))


def _find_part_bytes(spec: ModelSpec, dtype: str) -> tuple[dict[str, float], tuple, float]:
    parts = set(spec.param_parts) | {"attention", "mlp", "embedding", "lm_head"}
    for layer, _ in distinct_layers(spec.layers):
        parts.update(part for part, _ in layer.params)
    per_param = {part: part_bytes_per_param(spec, dtype, part) for part in parts}
    # the parameters outside the layers, and the bytes a checkpoint stores outside its parts
    unnamed = weight_bytes(spec, dtype) - sum(
        n * per_param[part] for part, n in spec.param_parts.items()
    )
    return (per_param, _model_parts(spec), unnamed if abs(unnamed) >= 1 else 0.0)


def _activation_bytes(spec: ModelSpec, dtype: str) -> int:
    """Bytes of one activation element: the weights' plain dtype, else the model's (quantized
    weights dequantize into it)."""
    return ELEMENT_BYTES[dtype] if dtype in ELEMENT_BYTES else ELEMENT_BYTES[spec.dtype]


# A layer's cache groups (its attention's, its state's), per distinct layer, format and tp: held
# with the layer (immutable; holding it keeps its id from being reused).
_LAYER_GROUPS: dict[tuple, tuple] = {}


def _layer_groups(
    layer: Layer, fmt: KvFormat, tp: int, state_dtypes: tuple[str, str] | None = None
) -> tuple[tuple, tuple]:
    """(attention groups, state groups) of one layer's cache on one of `tp` ranks, its
    recurrent state in `state_dtypes` (State.held_in)."""
    return kept_with(
        _LAYER_GROUPS,
        layer,
        (fmt, tp, state_dtypes),
        lambda: _split_groups(layer, fmt, tp, state_dtypes),
    )


def _split_groups(
    layer: Layer, fmt: KvFormat, tp: int, state_dtypes: tuple[str, str] | None
) -> tuple[tuple, tuple]:
    if layer.state is not None and state_dtypes is not None:
        layer = layer._replace(state=layer.state.held_in(state_dtypes))
    groups = _group_layers((layer,), fmt, tp)
    return (
        tuple(g for g in groups if g.kind is not CacheKind.STATE),
        tuple(g for g in groups if g.kind is CacheKind.STATE),
    )


def _cache_bytes(groups: tuple, context_len: int) -> int:
    return sum(g.bytes_per_sequence(context_len) for g in groups)


def _written_bytes(groups: tuple, new_tokens: int) -> int:
    """The cache bytes a prefill chunk of `new_tokens` writes: every new token's K and V, a
    windowed layer's too (vLLM's reshape_and_cache and SGLang's set_kv_buffer store each token
    of the chunk before the blocks that leave the window are freed), and the compressed entries
    it completes."""
    written = 0
    for g in groups:
        written += g.bytes_per_sequence(new_tokens)
        if g.kind.windowed and g.window is not None and new_tokens > g.window:
            written += g.num_layers * g.bytes_per_token_per_layer * (new_tokens - g.window)
    return written


def _attention_ops(
    layer: Layer,
    fmt: KvFormat,
    tp: int,
    even: bool,
    act_bytes: int,
    num_decodes: int,
    decode_context: int,
    prefill_chunks: tuple[tuple[int, int], ...],
    gather_kv: bool,
    state_dtypes: tuple[str, str] | None = None,
) -> tuple[list[Op], list[Op]]:
    """(attention operators, state operators) of one layer on one of `tp` ranks. Decode
    attention reads each decode's cache at `decode_context`; a prefill chunk writes its K and V
    and attends causally over the tokens cached before it and itself (the chunk's own K and V
    re-read as activations: the cache bytes are those written and those cached before). A
    recurrent state is read and written in place: its bytes counted once per sequence. With
    `even`, the FLOPs are split evenly over the ranks (the datasheet floor's rule)."""
    attn = layer.attention
    attention_groups, state_groups = _layer_groups(layer, fmt, tp, state_dtypes)
    attention: list[Op] = []
    if attn is not None:
        q_heads = -(-attn.num_q_heads // tp)
        q_out_per_token = q_heads * (attn.qk_head_dim + attn.v_head_dim) * act_bytes

        def share(flops: int) -> float:
            return flops / tp if even else flops * q_heads // attn.num_q_heads

        def indexer_share(flops: int) -> float:
            # DSA's and DeepSeek-V4's indexer is replicated on each rank in vLLM; MiniMax-M3's
            # index heads are its KV heads and split as they do (the floor's even split divides
            # every FLOP)
            if even:
                return flops / tp
            if attn.gqa_indexer:
                return flops * attn.kv_heads_per_rank(tp) // attn.num_kv_heads
            return flops

        if num_decodes:
            kv = num_decodes * _cache_bytes(attention_groups, decode_context)
            keys = decode_keys_attended(attn, decode_context)
            # a sparse layer reads fewer than it holds: DeepSeek-V4's compressed entries, DSA's
            # top-k latents, MiniMax-M3's top-k blocks
            kv += num_decodes * decode_read_excess_bytes(attn, fmt, decode_context, tp)
            flops = num_decodes * _decode_flop_per_key(attn) * keys
            # a sparse indexer: its heads score every key (DeepSeek-V4's compressed ones, DSA's
            # and MiniMax-M3's every cached one)
            indexer = num_decodes * decode_indexer_flops(attn, decode_context)
            if gather_kv:
                attention.append(_op("kv_gather", OpKind.ELEMENTWISE, 0, 0, 0, kv, 0, 2))
            attention.append(
                _op(
                    "attention",
                    OpKind.DECODE_ATTENTION,
                    num_decodes * keys,
                    share(flops) + indexer_share(indexer),
                    0,
                    0 if gather_kv else kv,
                    num_decodes * q_out_per_token,
                )
            )
        window = attn.window if attn.kind.windowed else None
        chunked = attn.kind is CacheKind.CHUNKED
        per_key = 2 * attn.num_q_heads * (attn.qk_head_dim + attn.v_head_dim)
        longest = max((new + cached for new, cached in prefill_chunks), default=0)
        for new, cached in prefill_chunks:
            end = cached + new
            # the chunk's queries over the cached keys and themselves (causal)
            keys = causal_keys_attended(end, window, chunked) - causal_keys_attended(
                cached, window, chunked
            )
            # DeepSeek-V4: and the compressed entries each token attends
            keys += prefill_compressed_keys(attn.compress_ratio, attn.compressed_topk, new, cached)
            indexer = prefill_indexer_flops(attn, new, cached, longest, num_decodes)
            written = _written_bytes(attention_groups, new)
            before = _cache_bytes(attention_groups, cached)
            # K and V written to the cache (and read from the projection: as many bytes again
            # when the cache keeps the compute dtype, as it does in `kvplan measure`)
            attention.append(_op("kv_write", OpKind.ELEMENTWISE, 0, 0, 0, written, written, 2))
            attention.append(
                _op(
                    "attention",
                    OpKind.PREFILL_ATTENTION,
                    new,
                    share(per_key * keys) + indexer_share(indexer),
                    0,
                    before,
                    _cache_bytes(attention_groups, end) - before + new * q_out_per_token,
                )
            )
    states: list[Op] = []
    if state_groups:
        held = _cache_bytes(state_groups, 0)
        sequences = num_decodes + len(prefill_chunks)
        states.append(_op("state", OpKind.ELEMENTWISE, 0, 0, 0, sequences * held, 0, 1))
    return attention, states


# a dense layer's rank matrices and the bytes it stores beyond them, per layer, weights format
# (its bytes-per-parameter table, held) and split
_DENSE: dict[tuple, tuple] = {}


def _dense_layer_ops(
    spec: ModelSpec,
    shape: LayerShape,
    layer: Layer,
    tokens: int,
    attention: list[Op],
    part_bytes: dict[str, float],
    p: int,
    split: int,
    share: int = 1,
) -> list[Op]:
    """The operators of a dense attention + MLP layer, laid out from its widths (`layer_shape`),
    over `tokens` rows on one of `split` ranks (or split evenly over `share`), in execution
    order."""
    h, w = spec.hidden_size, -(-shape.mlp_width // split)
    attn_b, mlp_b = part_bytes["attention"], part_bytes["mlp"]
    key = (id(layer), id(part_bytes), split)
    kept = _DENSE.get(key)
    if kept is None or kept[0] is not layer or kept[1] is not part_bytes:
        whole = shape.matrices
        # norm weights, biases, sinks: the bytes the layer stores beyond its matrices
        stored = sum(count * part_bytes[part] for part, count in layer.params)
        other_bytes = stored - (whole[0].params + whole[1].params) * attn_b
        other_bytes -= (whole[2].params + whole[3].params) * mlp_b
        kept = (layer, part_bytes, _rank_matrices(spec, shape, split), other_bytes)
        if len(_DENSE) >= KEPT:
            del _DENSE[next(iter(_DENSE))]
        _DENSE[key] = kept
    (qkv, o, *mlp), other_bytes = kept[2], kept[3]
    # two norms (read + write) and two residual adds (read 2, write 1); the norm weights and
    # biases are read once (and priced by the floor at 2 FLOPs per parameter per token)
    norms = _op(
        "norms",
        OpKind.ELEMENTWISE,
        0,
        0,
        other_bytes,
        0,
        10 * tokens * h * p,
        4,
        0,
        2 * tokens * shape.other_params,
        share,
    )
    # silu(gate) * up: read + write, then read 2 + write 1; a plain MLP's activation: read + write
    act_bytes = (5 if shape.gated else 2) * tokens * w * p
    launches = 2 if shape.gated else 1
    activation = _op("activation", OpKind.ELEMENTWISE, 0, 0, 0, 0, act_bytes, launches, 0, 0, share)
    return [
        norms,
        _matmul(qkv, tokens, attn_b, p, share),
        *attention,
        _matmul(o, tokens, attn_b, p, share),
        _matmul(mlp[0], tokens, mlp_b, p, share),
        activation,
        _matmul(mlp[1], tokens, mlp_b, p, share),
    ]


def _coarse_layer_ops(
    spec: ModelSpec,
    layer: Layer,
    tokens: int,
    moe_tokens: int,
    attention: list[Op],
    states: list[Op],
    part_bytes: dict[str, float],
    share: int = 1,
) -> list[Op]:
    """A layer the widths do not lay out (MoE, MLA, DSA, recurrent, linear attention, gated or
    compressed attention): one operator per parameter part, 2 FLOPs per parameter per token
    (routed experts: the top-k's), its weights read once (routed experts: those the batch's
    `moe_tokens` touch, E * (1 - (1 - k/E)^T) per layer under uniform routing), the attention
    operators after the attention projections and the state's after the mixer. Their
    activations are not laid out."""
    h, moe = spec.hidden_size, spec.moe
    ops: list[Op] = []
    placed = False
    for part, count in layer.params:
        stored = count * part_bytes[part]
        if part == "norms":
            ops.append(
                _op(
                    "norms",
                    OpKind.ELEMENTWISE,
                    0,
                    0,
                    stored,
                    0,
                    0,
                    1,
                    0,
                    2 * tokens * count,
                    share,
                )
            )
        elif part == "experts" and moe is not None:
            touched = moe.expected_experts_touched(moe_tokens)
            ppe = moe.params_per_expert
            ops.append(
                _op(
                    "experts",
                    OpKind.MATMUL,
                    tokens,
                    2 * tokens * moe.top_k * ppe,
                    touched * ppe * part_bytes["experts"],
                    0,
                    0,
                    1,
                    h,
                    0,
                    share,
                )
            )
        else:
            name = "attention_proj" if part == "attention" else part
            flops = 2 * tokens * count
            ops.append(_op(name, OpKind.MATMUL, tokens, flops, stored, 0, 0, 1, h, 0, share))
        if part == "attention":
            ops += attention
            placed = True
        elif part == "mixer":
            ops += states
            states = []
    return ops + states + ([] if placed else attention)


def _model_parts(spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    """The parameters outside the layers, the embedding and the head (the final norm, DeepSeek-V4's
    hyper-connection head, ...): param_parts less what the layers hold."""
    left = {k: v for k, v in spec.param_parts.items() if k not in ("embedding", "lm_head")}
    for layer, count in distinct_layers(spec.layers):
        for part, n in layer.params:
            if part in left:
                left[part] -= n * count
    return tuple((part, n) for part, n in left.items() if n)


def measurable(spec: ModelSpec) -> bool:
    """Whether every layer is one the per-operator model lays out matrix by matrix (dense
    attention + MLP, the layers `kvplan measure` times); MoE, MLA and recurrent layers are laid
    out coarsely, one operator per parameter part, and are not measured."""
    try:
        for layer, _ in distinct_layers(spec.layers):
            layer_shape(spec, layer)
    except KvplanError:
        return False
    return True


# layer_shape per spec and distinct layer (None: laid out coarsely), held with the spec: a roofline
# sweep or a capacity comparison lays out the same layers at every batch and context
_SHAPES: dict[tuple, tuple] = {}


def _shape_or_none(spec: ModelSpec, layer: Layer) -> LayerShape | None:
    # the spec holds its layers, so a layer's id is not reused while the entry is kept
    return kept_with(_SHAPES, spec, (id(layer),), lambda: _try_layer_shape(spec, layer))


def _try_layer_shape(spec: ModelSpec, layer: Layer) -> LayerShape | None:
    try:
        return layer_shape(spec, layer)
    except KvplanError:
        return None


def step_ops(
    spec: ModelSpec,
    dtype: str,
    fmt: KvFormat,
    num_decodes: int = 0,
    decode_context: int = 0,
    prefill_chunks: tuple[tuple[int, int], ...] = (),
    num_sampled: int = 0,
    tp: int = 1,
    gather_kv: bool = False,
    even_split: bool = False,
    whole_model: bool = False,
    moe_tokens: int | None = None,
    state_dtypes: tuple[str, str] | None = None,
) -> list[tuple[list[Op], int]]:
    """batch_ops as (operators, how many times they run): each distinct layer's operators once
    with its count, then the embedding, the parameters outside the layers and the head, once
    each. What the floor sums (floor_sums) without repeating a deep stack's layers.

    `dtype` is the weights' (a plain or quantized format, or 'checkpoint'): each part's weights
    at its own bytes per parameter; activations in the plain dtype (or the model's). With
    `even_split` every operator's FLOPs and weights are split evenly over the `tp` ranks (the
    datasheet floor's and the memory plan's rule), else matrix by matrix as vLLM shards them;
    the cache is always the rank's own (KV heads replicated below one per rank). With
    `whole_model` the parameters outside the layers (the final norm, ...) run too, and the
    weights the stored checkpoint holds outside its named parts are read. `moe_tokens`: the
    tokens the MoE layers route (the step's own by default). `state_dtypes`: the (conv, SSM)
    dtypes the engine keeps a recurrent state in (State.held_in; None: as the spec holds it)."""
    p = _activation_bytes(spec, dtype)
    part_bytes, model_parts, unnamed = _part_bytes(spec, dtype)
    tokens = num_decodes + sum(n for n, _ in prefill_chunks)
    routed = tokens if moe_tokens is None else moe_tokens
    split = 1 if even_split else tp
    share = tp if even_split else 1
    groups: list[tuple[list[Op], int]] = []
    head: list[Op] = []
    if num_sampled:
        h = spec.hidden_size
        rows = embedding_rows_read(spec, tokens)
        embedding = _op(
            "embedding",
            OpKind.ELEMENTWISE,
            0,
            0,
            rows * part_bytes["embedding"],
            0,
            2 * tokens * h * p - rows * p,
            1,
            0,
            0,
            share,
        )
        groups.append(([embedding], 1))
    for layer, count in distinct_layers(spec.layers):
        attention, states = _attention_ops(
            layer,
            fmt,
            tp,
            even_split,
            p,
            num_decodes,
            decode_context,
            prefill_chunks,
            gather_kv,
            state_dtypes,
        )
        shape = _shape_or_none(spec, layer)
        if shape is None:
            ops = _coarse_layer_ops(
                spec, layer, tokens, routed, attention, states, part_bytes, share
            )
        else:
            ops = _dense_layer_ops(
                spec, shape, layer, tokens, attention, part_bytes, p, split, share
            )
            ops += states
        groups.append((ops, count))
    if whole_model:
        for part, n in model_parts:
            kind = OpKind.ELEMENTWISE if part == "norms" else OpKind.MATMUL
            flops = 0 if part == "norms" else 2 * tokens * n
            extra = 2 * tokens * n if part == "norms" else 0
            stored = n * part_bytes[part]
            head.append(_op(part, kind, tokens, flops, stored, 0, 0, 1, 0, extra, share))
        if unnamed:  # a checkpoint's tensors outside the named parts
            head.append(
                _op("weights_other", OpKind.ELEMENTWISE, 0, 0, unnamed, 0, 0, 0, 0, 0, share)
            )
    if num_sampled:
        h = spec.hidden_size
        head_part = "lm_head" if "lm_head" in spec.param_parts else "embedding"
        vocab = -(-spec.head_params // h // split)
        if even_split:
            head.append(
                _op(
                    "lm_head",
                    OpKind.MATMUL,
                    num_sampled,
                    2 * num_sampled * spec.head_params,
                    spec.head_params * part_bytes[head_part],
                    0,
                    num_sampled * (spec.head_params // h + h) * p,
                    1,
                    h,
                    0,
                    share,
                )
            )
        else:
            head.append(_matmul(Matrix("lm_head", vocab, h), num_sampled, part_bytes[head_part], p))
    if head:
        groups.append((head, 1))
    return groups


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
    even_split: bool = False,
    whole_model: bool = False,
) -> list[Op]:
    """Every operator of one forward over a mixed batch, on one of `tp` ranks: `num_decodes`
    sequences decoding one token each at `decode_context` tokens, and prefill chunks as (new
    tokens, tokens cached before the chunk); weights in `dtype`, the cache in `fmt`. Each
    layer's GEMMs run once over every token of the step; each decode layer runs one attention
    call over all decodes, each chunk its own causal attention over its cached tokens and
    itself, writing its K and V. `num_sampled` > 0 adds the input embedding's lookup and the
    output head over the sampled positions (a whole model's forward; `kvplan measure` times the
    layers alone).

    Dense attention + MLP layers are laid out matrix by matrix from their widths (the layers
    `kvplan measure` times); every other layer (MoE, MLA, DSA, recurrent and linear attention,
    attention-free) one operator per parameter part (`_coarse_layer_ops`), each counting its
    bytes and FLOPs once. The datasheet floor (`decode_step`, `prefill_step`) is this list's
    sums.

    With `gather_kv` the decode attention is two operators, as a kernel that first gathers the
    pages into a cache-sized buffer runs it (kvplan's torch path): the gather streams the KV,
    the attention computes on what the gather left in cache. Without it (a fused paged kernel),
    one operator does both. A decode step (`decode_ops`) and a prompt's prefill (`prefill_ops`)
    are the two pure shapes; `simulate` and `plan` price every step of a measured profile
    through this list, so the operators `kvplan measure --check` validates are the ones the
    simulator runs."""
    groups = step_ops(
        spec,
        dtype,
        fmt,
        num_decodes,
        decode_context,
        prefill_chunks,
        num_sampled,
        tp,
        gather_kv,
        even_split,
        whole_model,
    )
    ops: list[Op] = []
    for _, layer_ops in ops_by_layer(spec, groups, num_sampled):
        ops += layer_ops
    return ops


def ops_by_layer(
    spec: ModelSpec, groups: list[tuple[list[Op], int]], num_sampled: int
) -> list[tuple[int, list[Op]]]:
    """step_ops' groups in layer order, each with its layer index: -1 for the input embedding
    (with `num_sampled`), 0..L-1 for the blocks, L for the head and the parameters outside the
    layers (what a layer offload places block by block)."""
    first = 1 if num_sampled else 0
    distinct = distinct_layers(spec.layers)
    by_layer = {
        id(layer): ops for (layer, _), (ops, _) in zip(distinct, groups[first:], strict=False)
    }
    out: list[tuple[int, list[Op]]] = [(-1, groups[0][0])] if num_sampled else []
    out += [(il, by_layer[id(layer)]) for il, layer in enumerate(spec.layers)]
    out += [(len(spec.layers), tail) for tail, _ in groups[first + len(distinct) :]]
    return out


def floor_sums(groups: list[tuple[list[Op], int]]) -> tuple[float, float]:
    """(FLOPs, bytes) of the datasheet floor over a step's operators: every FLOP at the peak
    (a streaming operator's parameters at 2 FLOPs each per token, as every parameter), and the
    bytes that must cross memory once: the weights and the cache (activations are taken to stay
    on chip)."""
    flops = 0.0
    num_bytes = 0.0
    for ops, count in groups:
        group_flops: float = 0  # an int while every term is one: exact sums
        group_bytes: float = 0
        for op in ops:
            group_flops += op[3] + op[9]  # flops + elementwise_flops
            group_bytes += op[4] + op[5]  # weight_bytes + kv_bytes
        flops += count * group_flops
        num_bytes += count * group_bytes
    return flops, num_bytes


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
