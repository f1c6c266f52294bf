"""The time of one engine step over a mixed batch: prefill chunks and decodes run as one forward.

A serving engine (vLLM V1, SGLang) runs every scheduled token of a step in one forward pass, so a
step's time is a sum of operator rooflines over the whole batch, not a prefill time plus a decode
time. Per GPU, for a step of T tokens (decodes plus prefill-chunk tokens):

    t_gpu  = dense GEMMs    max(dense weights / BW·f_m, 2·P_dense·T / peak·f_c, n_gemm·floor)
           + expert GEMMs   max(experts touched by T tokens / BW·f_m, 2·P_experts,active·T / ..,
                                L_moe·floor)
           + decode attention     max(Σ_groups max(Σ_i KV(s_i) / BW·f_m, attention FLOPs / ..),
                                      L_attention·floor)
           + prefill attention    Σ_chunks max(cached + chunk KV / BW·f_m, causal FLOPs / peak·f_c)
           + sampler              sequences x vocab x fp32 logit copies / BW·f_m
           + TP all-reduces       2 per layer over T x hidden activations (1 more of T x 2 fp32
                                  where the q/k norm spans all heads: MiniMax-M2) and the input
                                  embedding's 1 (comm); the head's logits all-gathered over TP,
                                  sequences x vocab x bf16 (logits_gather_s)
           + launches             max(layers' launches x per-launch cost, small kernels x their
                                  floor) under a CUDA graph (up to 512 tokens), the GEMMs in
                                  their measured calls; else every launch at its measured
                                  host cost and each layer the rest of the eager per-layer
                                  constant (layer_launches, HostOverheads.launch_s)
    t_host = per-step + per-request scheduler work on the CPU
    t_step = t_gpu + t_host (synchronous scheduling) or max(t_gpu, t_host) (async scheduling)

Each f is the fraction of the datasheet rate vLLM's kernel for that operation reaches
(kvplan/data/kernel_tables, medians of measured kernels, per GPU and engine). Below some size a
kernel takes a fixed time whatever its shape: each family's term is at least its launches in a
forward times the smallest kernel of that family the GPU's tables measured (`_Floors`), so the
fixed cost of a layer scales with what it launches (a MoE layer at TP 8 launches a router, a
fused MoE, shared-expert GEMMs, MLA's five GEMMs and an attention kernel, each a few to tens of
microseconds at one token). With pipeline parallelism the batch is cut into
m = min(pp, sequences) micro-batches and a step takes (m + pp − 1) stage times
(`comm.pipeline_bubble_fraction`). The FLOP and byte counts are the operator list's
(`step_time.step_ops`, the floor's), summed by kernel kind once per model (`_coefficients`), and
`comm`'s; each roofline is `step_time.time_floor_s`.
"""

from __future__ import annotations

import copy
import math
from functools import cached_property

from kvplan.anatomy.model import CacheKind, Layer, ModelSpec, distinct_layers, kept_with
from kvplan.dtypes import KvFormat
from kvplan.formulas.comm import (
    ACTIVATION_BYTES,
    dcp_allgather_bytes,
    logits_allgather_bytes,
    p2p_time_s,
    pipeline_bubble_fraction,
    qk_norm_allreduce_bytes,
    qk_norm_allreduces_per_forward,
    ring_allgather_time_s,
    tp_allreduce_bytes,
    tp_allreduce_time_s,
    tp_allreduces_per_forward,
    two_level_allgather_time_s,
)
from kvplan.formulas.expert_parallel import (
    dp_gather_time_s,
    dp_gather_two_level_time_s,
    ep_alltoall_time_s,
    ep_alltoall_two_link_time_s,
)
from kvplan.formulas.flops import (
    causal_keys_attended,
    indexer_flop_per_key,
    prefill_compressed_keys,
    prefill_indexed_keys,
)
from kvplan.formulas.gemm_calls import (
    GemmCall,
    MlaBmmCall,
    PricedCalls,
    dense_gemm_calls,
    gemm_calls_s,
    mla_bmm_calls,
    mla_bmm_calls_s,
    mla_projection_calls,
    priced_calls,
    priced_calls_s,
)
from kvplan.formulas.kv import block_topk_tokens, compressed_read_bytes, topk_read_bytes
from kvplan.formulas.memory import SAMPLER_FP32_TENSORS
from kvplan.formulas.recurrent_calls import RecurrentKernels
from kvplan.formulas.step_time import (
    OpKind,
    OpRates,
    Rates,
    StepTime,
    batch_ops,
    curve_value,
    roofs_s,
    step_ops,
    step_time,
    time_floor_s,
)
from kvplan.formulas.weights import quantized_parts
from kvplan.inputs.kernel_tables import (
    Achieved,
    BackendTiming,
    DsaEager,
    DsaGrids,
    GemmGrid,
    RecurrentGrid,
    datasheet_achieved,
    decode_calls_dtype,
    decode_calls_for,
    host_overheads_data,
)
from kvplan.record import NamedTuple

LOGIT_BYTES = 4  # the sampler works on fp32 logits
QK_NORM_TP_LAUNCHES = 2  # a TP q/k norm over all heads: sums of squares, apply (small_launches)


# The fractions per GPU and engine are data (kvplan/data/kernel_tables, provenance in each file;
# kvplan.inputs.kernel_tables picks them by the profile's `kernel_tables` field). A GPU without
# tables runs at the H100 SXM's vLLM fractions on its own datasheet rates.
ACHIEVED_DATASHEET = datasheet_achieved()


def dsa_layers(spec: ModelSpec) -> list:
    """The attention layers the DSA module prices (a sparse indexer of their own); none: the
    GPU's DSA tables are never read for this model."""
    if not any(_own_indexer(layer.attention) for layer, _ in distinct_layers(spec.layers)):
        return []  # most models: each kind of layer looked at once
    return [a for a in spec.attention_layers() if _own_indexer(a)]


def dsa_grids_for(spec: ModelSpec, grids: DsaGrids | None) -> DsaGrids | None:
    """The DSA module grids a model's DSA layers read: of those the tables hold (`grids`, the
    stand-in's, DeepSeek-V3.2's, and DsaGrids.others: GLM-5's in SGLang's), the first whose
    shape (DsaGrids.shape) each DSA layer's config fields equal; none: the stand-in's
    (dsa_shape_timed False, named in untimed_parts)."""
    if grids is None:
        return None
    return next((g for g in (grids, *grids.others) if dsa_shape_timed(spec, g)), grids)


def dsa_shape_timed(spec: ModelSpec, grids: DsaGrids | None) -> bool:
    """Whether the DSA module grids time this model's DSA layers: each has the attention shape
    the modules ran (DsaGrids.shape: DeepSeek-V3.2's)."""
    if grids is None:
        return False
    layers = dsa_layers(spec)
    return bool(layers) and all(_shape_timed(a, grids.shape) for a in layers)


def _own_indexer(attn) -> bool:
    """An attention layer with a sparse indexer of its own (DSA's, not a GQA indexer)."""
    return attn is not None and bool(attn.indexer_head_dim) and not attn.gqa_indexer


def decode_rows(num_decodes: int, queries: int = 1) -> int:
    """Decode rows a DSA module runs for `num_decodes` sequences of `queries` tokens each (a
    speculative verification's draft tokens, a draft extend's settled positions): one a token.
    SGLang's nsa backend expands a target verify and a draft extend to one query row per token,
    each at its own length (nsa_backend.py init_forward_metadata: cu_seqlens_q = arange(0,
    bs x speculative_num_draft_tokens + 1), max_seqlen_q 1, seqlens_expanded, the page table
    repeat_interleave'd per token): the indexer's paged MQA logits, its top-k and the sparse
    MLA each run once a token; vLLM's sparse_attn_indexer and FlashMLA sparse decode take the
    verification's next_n tokens as rows with a top-k each. The module tables time one token a
    sequence, so a step reads them at this many rows."""
    return num_decodes * max(1, queries)


def measured_achieved(achieved: Achieved = ACHIEVED_DATASHEET) -> Achieved:
    """For a measured profile (its peak is a dense bf16 matmul, its bandwidth a stream): every
    fraction relative to the dense bf16 kernels'."""
    compute, memory = achieved.dense["bf16"]

    def rel(pair):
        return (min(1.0, pair[0] / compute), min(1.0, pair[1] / memory))

    scale = (compute + memory) / 2  # the ideal roofline is already at the measured rates

    return achieved._replace(
        dense={k: rel(v) for k, v in achieved.dense.items()},
        experts={k: rel(v) for k, v in achieved.experts.items()},
        attention=rel(achieved.attention),
        mla=rel(achieved.mla),
        experts_curve={
            k: tuple((x, max(1.0, y * scale)) for x, y in curve)
            for k, curve in achieved.experts_curve.items()
        },
    )


def _format_key(weights_dtype: str) -> str:
    """The kernel tables' format key of a resolved weights dtype (kvplan.dtypes.weight_format
    names): fp8 (block scales) -> "fp8"; per-tensor fp8 and int8 -> "int8" (the tables' fp8 rows
    without block scales, derive_achieved.GEMM_FORMATS); int4 at any group size (GPTQ, AWQ,
    compressed-tensors' int4-g32-sym: vLLM's W4A16 kernels) and mxfp4 -> "4bit"; the rest
    (bf16, fp16, nvfp4: no such tables) -> "bf16"."""
    key = str(weights_dtype).lower()
    if key == "fp8":
        return "fp8"
    if key == "fp8-tensor" or key == "int8" or key.startswith("int8-"):
        return "int8"
    if key == "mxfp4" or key == "int4" or key.startswith("int4-"):
        return "4bit"
    return "bf16"


class HostOverheads(NamedTuple):
    """Fixed costs per step that no roofline sees (seconds)."""

    per_step_s: float  # scheduler pass, input preparation, synchronisation
    per_request_s: float  # per scheduled request: block tables, outputs, stop checks
    per_layer_s: float  # kernel launches and small kernels, per layer, under CUDA graphs
    eager_per_layer_s: float  # the same without CUDA graphs: the CPU dispatches every kernel
    # the launches of the layer the two per-layer constants are read as (host_overheads.json's
    # reference_layer: a dense GQA Llama layer, its TP collectives apart, layer_launches); other
    # layers pay by their own launches at the per-launch cost
    reference_layer_launches: int
    # one launch dispatched from the CPU: host_dispatch.json's measured PyTorch calls and the
    # driver's enqueue (kernel_tables.host_overheads_data)
    eager_per_launch_s: float

    def per_launch_s(self) -> float:
        """One kernel launch's fixed cost under a CUDA graph: the graph constant over the
        reference layer's launches."""
        return self.per_layer_s / self.reference_layer_launches

    def launch_s(self, launches: float, layers: int, graphed: bool) -> float:
        """Seconds `launches` kernel launches of `layers` layers cost: under a CUDA graph each
        at per_launch_s; eagerly each at the measured eager_per_launch_s, and every layer the
        part of eager_per_layer_s no launch count explains (the reference layer's constant less
        its launches' measured cost: the model's Python, metadata, synchronisations), so the
        reference layer pays eager_per_layer_s and a layer of more kernels their host cost."""
        if graphed:
            return launches * self.per_launch_s()
        per_layer_s = self.eager_per_layer_s - self.reference_layer_launches * (
            self.eager_per_launch_s
        )
        return layers * per_layer_s + launches * self.eager_per_launch_s


# kvplan/data/kernel_tables/host_overheads.json (its provenance there: BLIS's trained-physics
# defaults and aiconfigurator's vLLM dispatch overhead)
HOST_OVERHEADS = HostOverheads(**host_overheads_data().values)
# vLLM captures CUDA graphs up to min(2 x max_num_seqs, 512) tokens (vllm/config/vllm.py,
# _set_cudagraph_sizes); a larger step runs without one.
CUDA_GRAPH_MAX_TOKENS = 512


class BatchShape(NamedTuple):
    """What one step runs: `num_decodes` sequences decoding one token each, attending
    `decode_context_sum` cached tokens in all (each counts its cache plus the new token), and
    prefill chunks as (new tokens, tokens already cached before the chunk)."""

    num_decodes: int = 0
    decode_context_sum: float = 0  # a float for a micro-batch's share (_pipelined)
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_sampled: int = 0  # sequences that sample a token this step


# the engine step's terms (step_time.StepTime's terms_s): each roofline term is charged to the
# roof that bounds it, weights_s or matmul_s for the GEMMs, kv_read_s or attention_s for
# attention; the GPU's terms, then the CPU's
GPU_TERMS = ("weights_s", "matmul_s", "kv_read_s", "attention_s", "sampler_s", "comm_s", "launch_s")
ENGINE_TERMS = (*GPU_TERMS, "host_s")
# the terms priced by HostOverheads' constants (per layer, per step, per request:
# kernel_tables/host_overheads.json, BLIS's and aiconfigurator's end-to-end fits), not by any
# kernel table's rows
FIXED_TERMS = ("launch_s", "host_s")


def critical_fixed_s(step: StepTime) -> float:
    """Seconds of a step's FIXED_TERMS on its critical path: launch_s (GPU time), and of host_s
    what the step's total leaves exposed beside its GPU terms: all of it where the host runs
    serially with the GPU, none of what async scheduling (vLLM; SGLang's overlap scheduler)
    hides behind a longer GPU step (StepModel.step's total: max(gpu, host) there, gpu + host
    otherwise). Read off the total itself (total_s less the GPU_TERMS, at most host_s), so it
    follows whatever rule priced the step."""
    terms = step.terms_s
    gpu_s = sum(terms.get(key, 0.0) for key in GPU_TERMS)
    exposed_host_s = min(terms.get("host_s", 0.0), max(0.0, step.total_s - gpu_s))
    return terms.get("launch_s", 0.0) + exposed_host_s


def run_untimed_parts(model, stand_in_launch_s: float) -> tuple[str, ...]:
    """The parts a run's steps priced on no kernel table's rows, in words: its model's
    (StepModel.untimed_parts), and another release's eager DSA module rows
    (StepModel.dsa_eager_stand_in_part) where its steps charged them (`stand_in_launch_s` > 0:
    the run's StepTime.stand_in_launch_s summed), as a run that never decodes outside a CUDA
    graph has no such part."""
    stand_in = model.dsa_eager_stand_in_part if stand_in_launch_s > 0 else None
    return (*model.untimed_parts, *((stand_in,) if stand_in else ()))


def engine_step_time(
    weights_s: float,
    matmul_s: float,
    kv_read_s: float,
    attention_s: float,
    sampler_s: float,
    comm_s: float,
    launch_s: float,
    host_s: float,
    total_s: float,
    untimed_s: float = 0.0,
    stand_in_launch_s: float = 0.0,
) -> StepTime:
    """An engine step's StepTime from its terms (ENGINE_TERMS), its total, the seconds of its
    terms that hold an untimed part (StepModel.untimed_s) and of those the launch seconds
    priced on another release's eager DSA rows (StepTime.stand_in_launch_s)."""
    terms = {
        "weights_s": weights_s,
        "matmul_s": matmul_s,
        "kv_read_s": kv_read_s,
        "attention_s": attention_s,
        "sampler_s": sampler_s,
        "comm_s": comm_s,
        "launch_s": launch_s,
        "host_s": host_s,
    }
    return StepTime(total_s, terms, None, None, None, None, (), untimed_s, stand_in_launch_s)


class Forward(NamedTuple):
    """A forward's GPU terms (weights, matmul, kv_read, attention, comm, launch: seconds, at
    its share of the layers) and, of its launch seconds, the eager DSA module's dispatch
    (StepModel.dsa_eager_s at that share): priced once, read by the step's untimed seconds
    (StepModel.forward_untimed_s)."""

    terms: tuple[float, ...]
    dsa_eager_s: float = 0.0


class _Group(NamedTuple):
    window: int | None  # None: every token held (full, MLA)
    chunked: bool
    mla: bool
    kv_bytes_per_token: float  # all layers of the group, one rank
    decode_flop_per_key: float  # all layers of the group, one rank
    prefill_flop_per_key: float
    # DeepSeek-V4 compressed layers (0: none): one entry per `compress_ratio` tokens, of which a
    # decode reads compressed_read_bytes (the indexer's keys of all, the `compressed_topk` picked)
    compress_ratio: int = 0
    compressed_topk: int = 0
    compressed_kv_bytes_per_entry: float = 0.0  # all layers of the group
    compressed_index_bytes_per_entry: float = 0.0
    # DeepSeek-V4's indexer: FLOPs scoring one compressed key, all layers of the group, one rank
    compressed_index_flop_per_entry: float = 0.0
    # DSA layers priced without the DSA module's tables (0: none): a decode reads and attends
    # the latents of `attended_topk` tokens at most (topk_read_bytes), and its indexer reads and
    # scores every held token's key, these bytes and FLOPs per key (all layers of the group, one
    # rank), which kv_bytes_per_token and decode_flop_per_key then leave out
    attended_topk: int = 0
    index_bytes_per_token: float = 0.0
    index_flop_per_key: float = 0.0
    # MiniMax-M3's sparse layers: `attended_topk` blocks of this many tokens (block_topk_tokens;
    # 0: DSA's tokens)
    attended_block: int = 0
    layers: int = 0  # the attention layers of the group on a rank (one kernel call each)
    # the kernel's shape: "<qk head dim>x<v head dim>" and the query heads on a rank (the
    # prefill calls' keys: BackendTiming.prefill_calls)
    head_shape: str = ""
    heads: float = 0.0
    # DSA layers the DSA module's tables time (priced here as dense MLA, the module's delta
    # beside): like `attended_topk`'s, a decode of several query tokens runs a row per token
    dsa_module: bool = False
    # an MLA layer's absorbed latent form: "<kv_lora_rank + rope>x<kv_lora_rank>" (every query
    # head against the one latent; the prefill calls' key of the rows that time that form)
    latent_shape: str = ""


class BackendKernels(NamedTuple):
    """The attention backends a run's flags name, timed from their own kernels (the kernel
    tables' attention/ files), by phase: MLA (True) or GQA/MHA (False) -> BackendTiming. A kind
    absent from a phase runs on the default tables' pair and floor."""

    decode: dict[bool, BackendTiming]
    prefill: dict[bool, BackendTiming]
    # by kind, the query heads the decode kernel runs together in whole blocks (its rows read
    # at the heads rounded up to a block: kernel_heads); a kind absent: 1
    decode_head_block: dict[bool, int] = {}
    # the MHA rows of the prefill backend where it runs an MLA layer's chunks with no cached
    # tokens as MHA over the up-projected heads (their prefill calls at the layer's head shape
    # time such a step's chunks; kvplan.engines.sglang.SGLANG_MLA_PREFILL_AS_MHA)
    mla_prefill_as_mha: BackendTiming | None = None


def kernel_heads(heads: float, block: int) -> float:
    """The query heads a kernel that runs them in whole blocks of `block` does the work of: the
    heads rounded up to a block (1: the heads themselves)."""
    return heads if block <= 1 else float(block * math.ceil(heads / block))


def decode_call_s(calls: tuple, batch: int, kv_bytes, maximum=max):
    """Seconds of one decode-attention call over `batch` sequences reading `kv_bytes` in all
    (a float, or an array with np.maximum), from a backend's measured calls (BackendTiming.
    decode_calls): along each measured batch, linear in log(bytes per sequence) and log(seconds)
    between its points; between two measured batches, linear in log(batch) and log(seconds);
    the nearest point's time beyond any end (never extrapolated)."""
    per_sequence = kv_bytes / max(batch, 1)
    below = [c for c in calls if c[0] <= batch] or calls[:1]
    above = [c for c in calls if c[0] >= batch] or calls[-1:]
    (b0, curve0), (b1, curve1) = below[-1], above[0]
    t = 0.0 if b1 == b0 else math.log(batch / b0) / math.log(b1 / b0)
    if maximum is max:
        y0 = curve_value(curve0, per_sequence)
        y1 = y0 if b1 == b0 else curve_value(curve1, per_sequence)
        return math.exp(math.log(y0) + t * math.log(y1 / y0))
    import numpy as np

    at = np.log(np.maximum(per_sequence, 1.0))
    log_y0 = np.interp(at, np.log([x for x, _ in curve0]), np.log([y for _, y in curve0]))
    log_y1 = np.interp(at, np.log([x for x, _ in curve1]), np.log([y for _, y in curve1]))
    return np.exp(log_y0 + t * (log_y1 - log_y0))


def decode_heads_call_s(calls: tuple, heads: float, batch: int, kv_bytes, maximum=max):
    """Seconds of one decode-attention call of `heads` query heads on the rank over `batch`
    sequences reading `kv_bytes` in all, from a backend's measured calls by head count
    (BackendTiming.decode_calls of one cache dtype): each measured head count's call by
    decode_call_s; between two measured counts, linear in log(heads) and log(seconds); the
    nearest count's time beyond either end (never extrapolated)."""
    below = [c for c in calls if c[0] <= heads] or calls[:1]
    above = [c for c in calls if c[0] >= heads] or calls[-1:]
    (h0, curves0), (h1, curves1) = below[-1], above[0]
    y0 = decode_call_s(curves0, batch, kv_bytes, maximum)
    if h1 == h0:
        return y0
    t = math.log(heads / h0) / math.log(h1 / h0)
    y1 = decode_call_s(curves1, batch, kv_bytes, maximum)
    if maximum is max:
        return math.exp(math.log(y0) + t * math.log(y1 / y0))
    import numpy as np

    return np.exp(np.log(y0) + t * np.log(y1 / y0))


def equivalent_prompt_tokens(keys: float, window: int | None = None) -> float:
    """The prompt tokens n whose causal attention attends `keys` keys in all (n(n+1)/2, or
    under a sliding `window` W: W(W+1)/2 + (n - W)W past W): a chunk over cached tokens, or a
    window under a full-attention call, as the no-cache prompt of the same work."""
    if window is not None and keys > window * (window + 1) / 2:
        return window + (keys - window * (window + 1) / 2) / window
    return (math.sqrt(8.0 * keys + 1.0) - 1.0) / 2.0


def prefill_call_s(calls: tuple, units: float, tokens: float, window: int | None = None) -> float:
    """Seconds of one prefill-attention call of `units` parallel units (sequences x query heads
    on the rank) over `tokens` prompt tokens each, from a backend's measured calls
    (BackendTiming.prefill_calls, one head shape; a sliding `window`'s own rows where the
    call's keys are capped at it): along each measured unit count, linear in log(tokens) and
    log(seconds) between its points, its first point's time below them, and past its last its
    last point's time per key attended times the keys (the kernel is compute-bound there);
    between two measured unit counts, linear in log(units) and log(seconds); below the first
    its time, past the last that count's time per unit times the units (a full GPU:
    work-linear)."""
    below = [c for c in calls if c[0] <= units] or calls[:1]
    above = [c for c in calls if c[0] >= units] or calls[-1:]
    (u0, curve0), (u1, curve1) = below[-1], above[0]

    def along(curve) -> float:
        last_tokens, last_s = curve[-1]
        if tokens <= last_tokens:
            return curve_value(curve, tokens)
        keys = causal_keys_attended(round(tokens), window)
        return last_s * keys / causal_keys_attended(round(last_tokens), window)

    y0 = along(curve0)
    if u1 == u0:
        return y0 * max(1.0, units / u0)
    t = math.log(units / u0) / math.log(u1 / u0)
    return math.exp(math.log(y0) + t * math.log(along(curve1) / y0))


def mla_latent_shape(attn) -> str:
    """An MLA layer's absorbed latent form as a head shape, "<kv_lora_rank + rope>x<kv_lora_rank>"
    (DeepSeek's "576x512": every query head against the one cached latent, as SGLang's absorbed
    MLA kernels run it); "" for a layer with no latent."""
    if attn.kind is not CacheKind.MLA or not attn.mla_kv_lora_rank:
        return ""
    return f"{attn.mla_kv_lora_rank + attn.mla_rope_dim}x{attn.mla_kv_lora_rank}"


def mha_form_calls(calls: dict, head_shape: str) -> tuple:
    """The measured MHA prefill calls (BackendTiming.prefill_calls of one dtype) that time an MHA
    call of `head_shape` ("<qk head dim>x<v head dim>"): that shape's own, one curve set; else,
    where qk and v differ (an MLA layer's up-projected heads, DeepSeek's 192x128), the two
    square shapes qk x qk and v x v, whose mean times it (a causal call's FLOPs per query-key
    pair are 2(qk + v), the mean of theirs: the pair brackets the untimed shape); () where
    the backend timed neither."""
    if head_shape in calls:
        return (calls[head_shape],)
    qk, _, v = head_shape.partition("x")
    pair = (f"{qk}x{qk}", f"{v}x{v}")
    if qk != v and all(p in calls for p in pair):
        return tuple(calls[p] for p in pair)
    return ()


class StepModel:
    """Per-model, per-device coefficients of the step time, computed once from the formulas.

    `weights_dtype` is a resolved weights format (resolve_weights_dtype); `rates` the device's
    datasheet bandwidth and bf16 peak, `fp8_flop_per_s` its fp8 peak (None: none); `link` an
    Interconnect for TP/PP (None at tp = pp = 1).

    Expert and data parallelism (kvplan.simulate.setup.parallel_layout): `tp` is the attention
    (and dense layers') TP of one rank; the routed experts are spread over `moe_ranks` GPUs (None:
    tp), as EP where `ep` > 1 (each MoE layer's all-reduce replaced by dispatch + combine
    all-to-alls, expert_parallel.ep_alltoall_time_s); `dp` DP-attention ranks step in lockstep,
    each attending its own batch while the MoE layers run on the gathered batch (a step of
    `num_tokens` on this rank is priced with dp x num_tokens through the experts unless
    `step(shape, gathered_tokens=...)` says otherwise; without EP the gather and reduce-scatter
    are charged, expert_parallel.dp_gather_time_s).

    A replica over several nodes (`node_gpus` of its GPUs to a node, `network` the inter-node
    link; None: one node): a collective whose group spans nodes is priced on both links, the
    network's part at its datasheet rate and latency (no measured inter-node table): TP
    all-reduces in two levels (comm.tp_allreduce_time_s), the DP gather likewise
    (expert_parallel.dp_gather_two_level_time_s), the EP all-to-alls split by destination
    (expert_parallel.ep_alltoall_two_link_time_s), the pipeline hops between nodes over the
    network. Ranks are numbered node by node, as the engines place them."""

    def __init__(
        self,
        spec: ModelSpec,
        rates: Rates,
        weights_dtype: str,
        fmt: KvFormat,
        tp: int = 1,
        pp: int = 1,
        link=None,
        achieved: Achieved = ACHIEVED_DATASHEET,
        host: HostOverheads = HOST_OVERHEADS,
        async_scheduling: bool = False,
        cuda_graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS,
        prefill_graph_max_tokens: int | None = None,
        fp8_flop_per_s: float | None = None,
        dsa_delta_us: DsaGrids | None = None,
        dsa_eager: DsaEager | None = None,
        moe_ranks: int | None = None,
        ep: int = 1,
        dp: int = 1,
        dcp: int = 1,
        scheduler_steps: int = 1,
        moe_curves_s: dict | None = None,
        op_rates: OpRates | None = None,
        op_dtype: str | None = None,
        op_gather_kv: bool = False,
        state_dtypes: tuple[str, str] | None = None,
        network=None,
        node_gpus: int | None = None,
        backend_kernels: BackendKernels | None = None,
        sglang_collectives: bool = False,
        dp_lm_head: bool = False,
        dense_mlp_dp: bool = False,
        untimed_backends: tuple[str, ...] = (),
        dsa_decode_kernel: tuple[str, str] | None = None,
        untimed_moe_backend: str = "",
        borrowed_backends: tuple[str, ...] = (),
        gemm_grid: GemmGrid | None = None,
        recurrent_grid: RecurrentGrid | None = None,
    ):
        self.spec, self.weights_dtype, self.tp, self.pp = spec, weights_dtype, tp, pp
        # the attention backends the flags name that the tables hold no rows of, and the MoE
        # backend flag whose kernels they do not time, as typed (untimed_parts)
        self.untimed_backends = tuple(untimed_backends)
        # (SGLang's DSA decode kernel, the ones the DSA module grids timed) where they differ
        # (simulate.setup.dsa_decode_kernel): the module's decode named untimed
        self.dsa_decode_kernel = dsa_decode_kernel
        self.untimed_moe_backend = untimed_moe_backend
        # the attention backends timed from another GPU's rows by a fitted ratio, in words
        # (borrowed_parts; kvplan.inputs.kernel_tables.borrowed_backends)
        self.borrowed_backends = tuple(borrowed_backends)
        # the inter-node link and the replica's GPUs per node (None: the replica is one node)
        self.network = network if node_gpus else None
        self.node_gpus = node_gpus if network is not None else None
        self.fmt = fmt
        # a measured profile's per-operator curves (kvplan measure): the forward is priced
        # operator by operator (step_time.batch_ops at these rates, in `op_dtype`), the model
        # that `kvplan measure --check` validates; None: the kernel tables' fractions
        self.op_rates, self.op_dtype, self.op_gather_kv = op_rates, op_dtype, op_gather_kv
        # each kind of layer once with its count (measured profiles only)
        self._op_layers = distinct_layers(spec.layers) if op_rates is not None else ()
        self.moe_ranks, self.ep, self.dp = moe_ranks or tp, ep, dp
        # SGLang's MoE collectives (no --moe-a2a-backend; kvplan takes none): under DP
        # attention every layer's MLP, dense ones included, runs on the buffer gathered over the
        # whole TP group (communicator.py, ScatterMode FULL), even with --ep-size
        # (dp_gather_full); without it, --ep-size keeps every token on every TP rank, each runs
        # its own experts and the TP all-reduce sums the partial outputs (deepseek_v2.py
        # forward_normal): no all-to-all. False: vLLM's all-to-alls and MoE-only gathers.
        self.sglang_collectives = sglang_collectives
        # the GPUs SGLang's DP attention runs every layer's MLP (dense MLP, shared experts), the
        # router and the head over, on the rows gathered over them (dp x attention TP; the
        # attention TP elsewhere): models/deepseek_v2.py shards them over the whole TP group
        self.group_tp = dp * tp if dp > 1 and sglang_collectives else tp
        grouped = self.group_tp != tp
        # SGLang's --enable-dp-lm-head (logits_processor.py use_attn_tp_group): the head split
        # over the attention TP group on the rank's own sampled rows, its logits all-gathered
        # within that group alone (no dp_gather_replicate, no all-gather over the group)
        self.dp_lm_head = grouped and dp_lm_head
        # SGLang's --moe-dense-tp-size 1 (communicator.py enable_moe_dense_fully_dp: the dense
        # layers' MLP in ScatterMode SCATTERED; models/deepseek_v2.py tp_size 1): the dense
        # layers' MLPs whole on every GPU, on the rank's own rows (attention TP 1: all of
        # them), no gather over the group before those layers (sglang_dp_comm_s)
        self.dense_mlp_dp = grouped and dense_mlp_dp
        self._local_mlp_layers = (
            sum(1 for layer in spec.layers if not any(p == "experts" for p, _ in layer.params))
            if self.dense_mlp_dp
            else 0
        )
        self.link, self.achieved, self.host = link, achieved, host
        self.async_scheduling = async_scheduling
        # vLLM V0's multi-step scheduling (--num-scheduler-steps N): one scheduler pass and
        # output processing for N decode-only steps, overlapped with them: each pays 1/N of it
        self.scheduler_steps = scheduler_steps
        self.cuda_graph_max_tokens = cuda_graph_max_tokens
        # a step with prefill tokens runs graphs up to this many tokens where the engine captures
        # prefill batches apart (SGLang's piecewise graphs; 0: never); None: as a decode step
        self.prefill_graph_max_tokens = prefill_graph_max_tokens
        # vLLM -dcp: each rank reads 1/dcp of every decode's cache, then the ranks all-gather
        # their partial outputs and LSEs (attention layers x one all-gather per decode step)
        self.dcp = dcp
        self._dcp_layers = [
            (a.num_q_heads * dcp // tp, a.mla_kv_lora_rank or a.v_head_dim or a.head_dim)
            for a in (spec.attention_layers() if dcp > 1 else ())
        ]
        bw, bf16 = rates.bandwidth_bytes_per_s, rates.peak_flop_per_s
        key = _format_key(weights_dtype)
        gemm_peak = (fp8_flop_per_s or bf16) if key in ("fp8", "int8") else bf16
        # 4-bit formats' dense layers: int4 runs dequantizing kernels near the bf16 ones; mxfp4
        # quantizes only the experts (the rest stays in the model dtype)
        dense = achieved.dense.get(key, achieved.dense["bf16"])
        # dense layers held in a format the tables have no GEMM rows of (int4, nvfp4): they run
        # at the bf16 fractions above (untimed_parts)
        self.dense_untimed = bool(quantized_parts(spec, weights_dtype) - {"experts"}) and (
            key == "bf16" or key not in achieved.dense
        )
        experts = achieved.experts.get(key, achieved.experts["bf16"])
        self.dense_rates = Rates(bw * dense[1], gemm_peak * dense[0])
        # each dense GEMM at its own shape, timed by this GPU and engine's own GEMM table at
        # every step size (gemm_calls; None: not measured, a format it lacks, or layers whose
        # matrices the widths do not lay out: the pooled term alone); `_calls_s` by (tokens,
        # sampled), as a run repeats its step sizes
        self.gemm_grid: GemmGrid | None = None
        self.gemm_calls: tuple[GemmCall, ...] | None = None
        self._priced: PricedCalls | None = None
        self._calls_s: dict[tuple[int, int, int, int], float] = {}
        # the DSA module's cost over the MLA module (None: no DSA layers, or no tables of it)
        self.dsa = _DsaModule.of(spec, fmt, tp, dsa_delta_us)
        # SGLang's DSA decode module outside a CUDA graph (None: no module, or never timed so)
        self.dsa_eager = _DsaEager.of(spec, fmt, tp, dsa_eager) if self.dsa is not None else None
        if gemm_grid is not None and not self.dense_untimed:
            calls = dense_gemm_calls(
                spec,
                key,
                quantized_parts(spec, weights_dtype),
                tp,
                self.group_tp if self.group_tp != tp else None,
                local_head=self.dp_lm_head,
                local_dense_mlp=self.dense_mlp_dp,
                dsa_module=self.dsa is not None,
            )
            priced = None if calls is None else priced_calls(gemm_grid, calls)
            if priced is not None:
                self.gemm_grid, self.gemm_calls, self._priced = gemm_grid, calls, priced
        # one DSA layer's MLA projections among those calls (dsa_layer_base_s)
        self.dsa_projection_calls: tuple[GemmCall, ...] = ()
        if self.dsa is not None and self.gemm_calls is not None:
            parts = quantized_parts(spec, weights_dtype)
            self.dsa_projection_calls = mla_projection_calls(
                dsa_layers(spec)[0], spec.hidden_size, tp, key if "attention" in parts else "bf16"
            )
        # MLA's absorbed BMMs of a bf16 checkpoint at their own shape, timed by the GPU's
        # mla_bmm rows (gemm_calls.mla_bmm_calls_s); empty: at their floor (mla_bmms_s below)
        self.mla_bmm_calls: tuple[MlaBmmCall, ...] = ()
        if self.gemm_grid is not None and key == "bf16":
            bmms = mla_bmm_calls(spec, tp)
            if bmms and mla_bmm_calls_s(self.gemm_grid, bmms, "bf16", 1) is not None:
                self.mla_bmm_calls = bmms
        expert_peak = gemm_peak if key in ("fp8", "int8") else bf16
        self.expert_curve = achieved.experts_curve.get(key) if spec.moe else None
        # with a curve, the experts run at the datasheet roofline times its slowdown; without
        # one (int8), at the pair of fractions
        self.expert_rates = (
            Rates(bw, expert_peak)
            if self.expert_curve
            else Rates(bw * experts[1], expert_peak * experts[0])
        )
        self.tokens_per_expert = spec.moe.top_k / spec.moe.num_experts if spec.moe else 0.0
        self.attention_rates = Rates(bw * achieved.attention[1], bf16 * achieved.attention[0])
        self.mla_rates = Rates(bw * achieved.mla[1], bf16 * achieved.mla[0])
        self.sampler_bandwidth = bw * achieved.dense["bf16"][1]
        # each phase's attention kernels by kind (MLA or not): the default tables' pair, or
        # the backend the flags name, from its own rows (pair, floor, decode calls by query heads,
        # batch and bytes)
        self.decode_rates = {False: self.attention_rates, True: self.mla_rates}
        self.prefill_rates = dict(self.decode_rates)
        self.decode_curves: dict[bool, tuple] = {}
        # (phase, backend, the cache's dtype, the dtype whose calls stand in for it): the
        # backends that timed no call of that phase on this cache's dtype (decode_calls_dtype;
        # a prefill on an int8 or nvfp4 cache reads the 16-bit prefill calls)
        self.cache_stand_ins: tuple[tuple[str, str, str, str], ...] = ()
        # the tables' name of the cache's dtype (aiconfigurator's kv_cache_dtype: 16-bit and
        # fp8 caches); a cache of neither (int8, nvfp4) reads the 16-bit calls by bytes
        timed_cache = fmt.name.startswith("fp8") or fmt.name in ("bf16", "fp16")
        cache_dtype = "fp8" if fmt.name.startswith("fp8") else "bfloat16"
        floors_s = achieved.floors_s
        if backend_kernels is not None:
            floors_s = dict(floors_s)
            for phase, by_kind in (
                (backend_kernels.decode, self.decode_rates),
                (backend_kernels.prefill, self.prefill_rates),
            ):
                for mla, timing in phase.items():
                    if timing.pair:
                        by_kind[mla] = Rates(bw * timing.pair[1], bf16 * timing.pair[0])
            for mla, timing in backend_kernels.decode.items():
                if timing.floor_s is not None and floors_s:
                    floors_s["attention_mla" if mla else "attention"] = timing.floor_s
                calls = decode_calls_for(timing, cache_dtype)
                if calls:
                    self.decode_curves[mla] = calls
                rows = decode_calls_dtype(timing, cache_dtype)
                if rows is not None and (rows != cache_dtype or not timed_cache):
                    cache = cache_dtype if timed_cache else fmt.name
                    self.cache_stand_ins += (("decode", timing.backend, cache, rows),)
        self.decode_head_block = dict(backend_kernels.decode_head_block) if backend_kernels else {}
        # the prefill backend's 16-bit MHA calls, by head shape, where it runs an MLA layer's
        # chunks with no cached tokens as MHA (BackendKernels.mla_prefill_as_mha): their keys
        # and values come fresh from the up-projection, not from the cache, whatever its dtype
        as_mha = backend_kernels.mla_prefill_as_mha if backend_kernels else None
        self.mla_prefill_as_mha_calls: dict = (
            as_mha.prefill_calls.get("bfloat16", {}) if as_mha is not None else {}
        )
        # the prefill backend's measured calls in the cache's dtype, by kind and head shape
        # (none: the fractions price the chunks; prefill_timing says which each group got)
        self.prefill_calls: dict[bool, dict] = {}
        for mla, timing in (backend_kernels.prefill if backend_kernels else {}).items():
            if timing.prefill_calls.get(cache_dtype):
                self.prefill_calls[mla] = timing.prefill_calls[cache_dtype]
                if not timed_cache:
                    self.cache_stand_ins += (("prefill", timing.backend, fmt.name, cache_dtype),)
        # the recurrent layers timed by this GPU's kernel tables at the heads on a rank (None:
        # none, or not held: their state read and written once per sequence on the roofline)
        self.recurrent = RecurrentKernels.of(spec, tp, recurrent_grid)
        self.floors = _Floors.of(
            _shape(spec),
            floors_s,
            weights_dtype,
            self.moe_ranks // ep,
            ep,
            recurrent_timed=self.recurrent is not None,
        )
        # MLA's two absorbed BMMs a layer: no GEMM of the table, at their floor beside the calls
        gemm_floor_s = floors_s.get("gemm", 0.0) if floors_s else 0.0
        self.mla_bmms_s = (
            2 * _shape(spec).mla_layers * floors_s.get("gemm_mla_bmm", gemm_floor_s)
            if floors_s
            else 0.0
        )
        # the kernels the layers launch (layer_launches): every one dispatched from the CPU in
        # an eager forward; under a CUDA graph the GEMMs' and the fused MoE's measured times
        # (graph replays) hold their launches where the tables price them, so the launch cost
        # stays on the rest (_forward)
        counts = _shape(spec)
        self.layer_launches = counts.layer_launches
        self.layer_gemm_launches = counts.gemm_launches - GEMM_LAUNCHES["forward"]
        # the model's own fused MoE (shape, format, split) as the GPU's tables timed it at
        # each token count (None: not timed; the roofline, curve and floor above price it)
        self.moe_layers = spec.moe.num_layers if spec.moe else 0
        self.moe_curve = _own_moe_curve(
            spec, moe_curves_s or {}, weights_dtype, self.moe_ranks // ep, ep
        )
        # every byte and FLOP below is a sum over the step's operator list (step_time.step_ops),
        # by kernel kind; the DSA module's tables time the indexer's key cache: not read again
        # in the MLA base
        # a recurrent state in the engine's own dtypes (`state_dtypes`, State.held_in)
        coef = _coefficients(spec, weights_dtype, fmt, tp, self.dsa is None, state_dtypes)
        self.coefficients = coef
        # the head runs on the sampled positions only (vLLM's logits_indices: a prefill chunk's
        # last token, each decode), the rest of the dense GEMMs on every token
        # under SGLang's DP attention (group_tp > tp) the MLPs and the head run over the group on
        # the gathered rows: their weights split over group_tp GPUs, their FLOPs over the group's
        # tokens (mlp_flop_per_gathered_token; the head's over the group's sampled rows)
        grouped = self.group_tp != tp
        # (--enable-dp-lm-head: the head at the attention TP on the rank's own rows;
        # --moe-dense-tp-size 1: the dense layers' MLPs whole, on its own rows at attention TP 1)
        self.head_flop_per_sample = coef.head_flop_per_sample / (
            tp if self.dp_lm_head else self.group_tp
        )
        local_mlp_flops = coef.dense_mlp_flop_per_token if self.dense_mlp_dp else 0.0
        moved_flops = coef.mlp_flop_per_token - local_mlp_flops if grouped else 0.0
        # the MoE router too runs on the gathered rows, and whole on every GPU of the group
        # (sglang/srt/models/deepseek_v2.py: MoEGate is one unsharded (experts x hidden) weight,
        # applied in forward_normal to the hidden states the communicator gathered)
        router_flops = coef.router_flop_per_token if grouped else 0.0
        self.dense_flop_per_token = (coef.dense_flop_per_token - moved_flops - router_flops) / tp
        self.mlp_flop_per_gathered_token = moved_flops / self.group_tp + router_flops
        self.whole_dense_bytes = coef.dense_mlp_bytes if self.dense_mlp_dp else 0.0
        self.group_dense_bytes = (
            coef.mlp_bytes - self.whole_dense_bytes + (0.0 if self.dp_lm_head else coef.head_bytes)
            if grouped
            else 0.0
        )
        self.group_router_bytes = coef.router_bytes if grouped else 0.0
        self.expert_flop_per_token = coef.expert_flop_per_token / self.moe_ranks
        self.groups = list(coef.groups)
        self.state_bytes_per_sequence = coef.state_bytes_per_sequence
        self.sampler_bytes_per_sequence = SAMPLER_FP32_TENSORS * spec.vocab_size * LOGIT_BYTES
        self._weights: dict[object, tuple[float, float]] = {}
        self._span_base: dict[tuple[int, int, int | None, bool], StepTime] = {}
        self._eager: StepModel | None = None  # without_graphs
        self._graph_twins: dict[int, StepModel] = {}  # with_graph_tokens, by its max_tokens

    @property
    def untimed_parts(self) -> tuple[str, ...]:
        """The parts of this step no kernel table times, in words (empty: every operator has
        the tables' own rates): a fused MoE whose shape, format and split the tables hold no
        curve of; dense layers in a format the tables have no GEMM rows of (int4, nvfp4); DSA
        layers without the DSA module tables (with them, a DSA layer of another shape than the
        tables' and the layers that reuse another's picks); recurrent layers the recurrent/
        tables do not hold (Mamba, KDA, lightning; Gated DeltaNet at a head shape on a rank, or
        on a GPU and engine, without rows); attention
        backends the flags name without rows of their own; a MoE backend a flag names (the
        tables time the engine's default MoE path only). Each is
        priced by a stand-in instead (the datasheet roofline at the tables' fractions; a backend
        flag: the kernels of the engine's own pick), so how far the real kernel lands from it is
        unknown (kvplan.plans.intervals: the "partial" class). Not the eager DSA rows of another
        release (dsa_eager_stand_in_part): a run names those only where a step charged them
        (run_untimed_parts)."""
        return tuple(words for kind, words in self._untimed if kind != "launch")

    @property
    def dsa_eager_stand_in(self) -> str | None:
        """The SGLang release whose eager DSA module rows stand in for this run's
        (DsaEager.stands_in_from; None: no eager module, or its rows are the tables' own)."""
        return None if self.dsa_eager is None else self.dsa_eager.rows.stands_in_from

    @property
    def dsa_eager_stand_in_part(self) -> str | None:
        """The words of the untimed part a step decoding outside a CUDA graph charges on
        another release's eager DSA rows (dsa_eager_s, StepTime.stand_in_launch_s), None where
        none can."""
        return next((words for kind, words in self._untimed if kind == "launch"), None)

    @property
    def _untimed(self) -> tuple[tuple[str, str], ...]:
        """(the step's priced part that holds it: "dense", "experts" or "attention"; its
        words) of each part untimed_parts names: the one list both untimed_parts and
        untimed_terms read."""
        spec, parts = self.spec, []
        if self.dense_untimed:
            parts.append(("dense", f"the {self.weights_dtype} dense GEMMs"))
        if spec.moe is not None and self.moe_curve is None:
            parts.append(("experts", f"the {self.weights_dtype} fused MoE of this shape and split"))
        if spec.moe is not None and self.untimed_moe_backend:
            parts.append(("experts", f"the fused MoE under {self.untimed_moe_backend}"))
        if self.dsa is None and dsa_layers(spec):
            parts.append(("attention", "the DSA indexer and sparse attention"))
        elif self.dsa is not None and not self.dsa.shape_timed:
            parts.append(
                ("attention", "the DSA module at this model's shape (DeepSeek-V3.2's stands in)")
            )
        if self.dsa is not None and self.dsa.tables.base_release is not None:
            parts.append(  # the delta less another tables' layer price than the step charges
                (
                    "attention",
                    "the DSA module over this run's layer (its rows were drawn on the layer "
                    f"priced on SGLang {self.dsa.tables.base_release}'s tables, not this run's)",
                )
            )
        if self.dsa is not None and self.dsa_decode_kernel is not None:
            kernel, timed = self.dsa_decode_kernel
            parts.append(
                ("attention", f"the DSA module's decode under {kernel} (the tables time {timed})")
            )
        if self.dsa_eager_stand_in is not None:
            parts.append(
                (
                    "launch",
                    "the DSA module's decode outside a CUDA graph (SGLang "
                    f"{self.dsa_eager_stand_in}'s eager rows stand in)",
                )
            )
        if self.dsa is not None and self.dsa.layers < sum(
            1 for a in spec.attention_layers() if a.indexer_topk and not a.gqa_indexer
        ):  # GLM-5.3's layers that reuse another's picks: their top-k read on the roofline
            parts.append(
                ("attention", "the sparse attention of the layers that reuse another's top-k")
            )
        states = sorted({s.kind.value for s in spec.state_layers()})
        if states and self.recurrent is None:
            parts.append(("attention", f"the recurrent layers ({', '.join(states)})"))
        parts += [("attention", f"the attention under {flag}") for flag in self.untimed_backends]
        return tuple(parts)

    @property
    def borrowed_parts(self) -> tuple[str, ...]:
        """The parts of this step timed from another GPU's kernel rows, scaled by a ratio fitted
        on the rows both GPUs have (transfer.json): not this GPU's own timing, so the run is in
        the "borrowed" interval class (kvplan.plans.intervals.raw_class)."""
        return self.borrowed_backends

    @cached_property
    def untimed_terms(self) -> frozenset[str]:
        """Which of the step's priced parts hold an untimed part (untimed_parts): "dense" (the
        dense GEMMs in a format without rows), "experts" (a fused MoE without its curve, or
        under a MoE backend flag), "attention" (the attention terms: DSA, the recurrent
        layers, a backend flag without rows). untimed_s charges these parts' whole seconds."""
        return frozenset(k for k, _ in self._untimed)

    def untimed_s(
        self,
        gpu: tuple[float, ...],
        num_tokens: int,
        num_sampled: int,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> float:
        """Seconds of a step's forward terms `gpu` (_forward's tuple) that hold an untimed
        part (untimed_terms): the attention terms whole, and of the GEMM terms the untimed
        groups' share of the GEMMs' seconds at `num_tokens` (gemm_parts_s). An upper bound of
        the stand-in's own time where a term holds timed kernels too (a hybrid model's full
        attention beside its recurrent layers)."""
        kinds = self.untimed_terms
        if not kinds:
            return 0.0
        weights_s, matmul_s, kv_read_s, attention_s = gpu[:4]
        seconds = kv_read_s + attention_s if "attention" in kinds else 0.0
        if kinds & {"dense", "experts"}:
            dense_s, expert_s = self.gemm_parts_s(
                num_tokens, num_sampled, gathered_tokens, gathered_sampled
            )[2:]
            untimed = dense_s * ("dense" in kinds) + expert_s * ("experts" in kinds)
            if dense_s + expert_s > 0:
                seconds += (weights_s + matmul_s) * untimed / (dense_s + expert_s)
        return seconds

    def forward_untimed_s(
        self,
        shape: BatchShape,
        forward: Forward,
        queries: int = 1,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> tuple[float, float]:
        """(untimed_s of `forward` (_forward's, over `shape` at any share of the layers), at
        the tokens and sampled rows _forward prices its GEMMs at, plus the eager DSA module's
        dispatch it charged where its rows stand in from another release; that dispatch alone,
        StepTime.stand_in_launch_s)."""
        stand_in_s = forward.dsa_eager_s if self.dsa_eager_stand_in is not None else 0.0
        return stand_in_s + self.untimed_s(
            forward.terms,
            shape_tokens(shape, queries),
            max(1, shape.num_sampled),
            gathered_tokens,
            gathered_sampled,
        ), stand_in_s

    def extend_in_batch(self) -> StepModel:
        """The model of a DP-attention step in which some rank runs an extend batch: this one
        (a speculative model's decoding ranks run theirs as extends there:
        SpeculativeStepModel.extend_in_batch)."""
        return self

    def without_graphs(self) -> StepModel:
        """This model with every step run eagerly (no CUDA graph at any size): a DP-attention
        rank whose group runs a step without graphs (cluster.Lockstep). Built once."""
        if self._eager is None:
            twin = self._graph_twin(0, 0)
            twin._eager = twin
            self._eager = twin
        return self._eager

    def dsa_eager_s(self, shape: BatchShape, queries: int = 1) -> float:
        """Seconds a decode step run outside a CUDA graph spends dispatching its DSA layers'
        modules beyond what the step already charges them: per layer SGLang's eager module
        less its graph time at the step's batch and mean length (_DsaEager.excess_s), less the
        eager launches the step counts for the layer's MLA attention (MLA_ATTENTION_LAUNCHES
        at the measured host cost a launch), never below nothing. 0 for a graphed step, a step
        with prefill chunks (the rows time decodes) or a verification (several queries a
        sequence), and without eager rows."""
        decodes = shape.num_decodes
        if (
            self.dsa_eager is None
            or not decodes
            or shape.prefill_chunks
            or queries != 1
            or shape_tokens(shape, queries) <= self.graph_limit(False)
        ):
            return 0.0
        counted_s = MLA_ATTENTION_LAUNCHES * self.host.eager_per_launch_s
        excess_s = self.dsa_eager.excess_s(decodes, shape.decode_context_sum / decodes)
        return self.dsa_eager.layers * max(0.0, excess_s - counted_s)

    def graph_limit(self, prefill: bool) -> int:
        """The most tokens a step runs under CUDA graphs: a step with prefill tokens up to
        prefill_graph_max_tokens where the engine captures those apart, else
        cuda_graph_max_tokens."""
        if prefill and self.prefill_graph_max_tokens is not None:
            return self.prefill_graph_max_tokens
        return self.cuda_graph_max_tokens

    def with_graph_tokens(self, max_tokens: int) -> StepModel:
        """This model replaying CUDA graphs up to `max_tokens` tokens a step (a graph runner
        that captures batch sizes and runs several tokens a sequence: SGLang's speculative
        forwards, kvplan.simulate.speculative). Eager stays eager. Built once per
        `max_tokens`, held by this model (not by another's cache keyed by its id)."""
        if not self.cuda_graph_max_tokens or max_tokens == self.cuda_graph_max_tokens:
            return self
        twin = self._graph_twins.get(max_tokens)
        if twin is None:
            twin = self._graph_twins[max_tokens] = self._graph_twin(
                max_tokens, self.prefill_graph_max_tokens
            )
        return twin

    def _graph_twin(self, max_tokens: int, prefill_max_tokens: int | None) -> StepModel:
        """A copy of this model under other CUDA-graph limits (cuda_graph_max_tokens,
        prefill_graph_max_tokens): without_graphs' and with_graph_tokens' one copy, its caches
        of graph-dependent steps emptied, the rest shared."""
        twin = copy.copy(self)
        twin.cuda_graph_max_tokens = max_tokens
        twin.prefill_graph_max_tokens = prefill_max_tokens
        twin._span_base = {}
        return twin

    def __copy__(self) -> StepModel:
        """A shallow copy (caches shared, as copy.copy's), less the twins with_graph_tokens
        built of this model: a copy whose fields are then changed builds its own."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._graph_twins = {}
        return twin

    # ---- the terms --------------------------------------------------------------------------
    def weights_bytes(
        self, num_tokens: int, gathered_tokens: int | None = None
    ) -> tuple[float, float]:
        """(dense, expert) weight bytes one rank streams in a step of `num_tokens` tokens: the
        input embedding is a lookup of the tokens' rows, MoE layers read the experts touched by
        `gathered_tokens` (None: dp x num_tokens), this rank's 1/moe_ranks of them (uniform
        routing: the expected touched experts among the ones it holds); under SGLang's DP
        attention the MLPs' and the head's 1/group_tp, and every router whole (replicated)."""
        moe_tokens = self._gathered(num_tokens, gathered_tokens)
        # keyed by the tokens alone where the MoE layers see the step's own (no DP attention)
        key = num_tokens if moe_tokens == num_tokens else (num_tokens, moe_tokens)
        cached = self._weights.get(key)
        if cached is None:
            coef = self.coefficients
            moe = self.spec.moe
            dense = (
                coef.dense_bytes
                - self.group_dense_bytes
                - self.group_router_bytes
                - self.whole_dense_bytes
                + min(num_tokens, self.spec.vocab_size) * coef.embedding_row_bytes
            )
            touched = moe.expected_experts_touched(moe_tokens) if moe is not None else 0.0
            cached = (
                dense / self.tp
                + self.whole_dense_bytes
                + self.group_dense_bytes / self.group_tp
                + self.group_router_bytes,
                touched * coef.expert_bytes_per_touched / self.moe_ranks,
            )
            self._weights[key] = cached
        return cached

    def _gathered(self, num_tokens: int, gathered_tokens: int | None) -> int:
        """The tokens the MoE layers of a rank's step see."""
        return self.dp * num_tokens if gathered_tokens is None else gathered_tokens

    def _gathered_sampled(
        self,
        num_tokens: int,
        num_sampled: int,
        gathered_tokens: int | None,
        gathered_sampled: int | None,
    ) -> int:
        """The sampled rows SGLang's DP-attention head runs on (its logits gather sums the
        ranks' sampled positions, unpadded: LogitsMetadata's DpPaddingMode.SUM_LEN): the given
        `gathered_sampled`, else the rank's own scaled as its tokens are (dp x where
        `gathered_tokens` is None too). The rank's own outside SGLang's DP attention."""
        if self.group_tp == self.tp or self.dp_lm_head:
            return num_sampled
        if gathered_sampled is not None:
            return gathered_sampled
        if gathered_tokens is None:
            return self.dp * num_sampled
        return max(num_sampled, round(num_sampled * gathered_tokens / max(1, num_tokens)))

    def decode_attention_s(
        self, num_decodes: int, context_sum: float, queries: int = 1
    ) -> tuple[float, bool]:
        """Seconds of `num_decodes` decodes attending `context_sum` tokens in all, and whether
        reading the cache bounds it. Windowed layers hold min(s, W) per sequence, at the mean.
        `queries`: query tokens per decode (a speculative verification's k + 1), each cache
        read once, the FLOPs `queries` times."""
        if not num_decodes:
            return 0.0, True
        seconds, memory = self._decode_attention(
            num_decodes, context_sum / self.dcp, max, min, queries
        )
        return seconds, memory >= seconds

    def _decode_attention(self, num_decodes: int, context_sum, maximum, minimum, queries=1):
        """(seconds, the seconds of the cache reads) of the decodes' attention: the recurrent
        state, each group on its roofline, the DSA module's delta. One body for a float
        `context_sum` (with max and min) and for an array of them, one per step of a decode span
        (with np.maximum and np.minimum)."""
        mean = context_sum / num_decodes
        if self.recurrent is not None:  # the layers' kernels as the tables timed them
            seconds = memory = self.recurrent.decode_s(queries * num_decodes)
        else:
            state = num_decodes * self.state_bytes_per_sequence
            seconds = memory = state / self.attention_rates.bandwidth_bytes_per_s
        for g in self.groups:
            keys = context_sum if g.window is None else num_decodes * minimum(mean, g.window)
            rates = self.decode_rates[g.mla]
            # the FLOPs of `queries` tokens over keys read once, in calls of `num_decodes`; a DSA
            # layer's row per query token (decode_rows), each scoring and reading its own keys
            repeats, calls = queries, num_decodes
            if g.attended_topk and not g.attended_block or g.dsa_module:
                repeats, calls = 1, decode_rows(num_decodes, queries)
                keys = keys * (calls / num_decodes)
            kv_bytes = g.kv_bytes_per_token * keys
            attended = keys
            if g.attended_block:  # MiniMax-M3: the top-k blocks' K and V, every indexer key
                picked = block_topk_tokens(mean, g.attended_block, g.attended_topk, minimum)
                attended = num_decodes * picked
                kv_bytes = g.kv_bytes_per_token * attended + g.index_bytes_per_token * keys
            elif g.attended_topk:  # DSA: the top-k's latents, every token's indexer key
                attended = calls * minimum(mean, g.attended_topk)
                kv_bytes = topk_read_bytes(
                    keys, calls * g.attended_topk, g.kv_bytes_per_token,
                    g.index_bytes_per_token, minimum,
                )  # fmt: skip
            if g.compress_ratio:  # the compressed entries read, and attended beside the window
                entries = mean // g.compress_ratio
                kv_bytes = kv_bytes + num_decodes * compressed_read_bytes(
                    entries,
                    g.compressed_topk,
                    g.compressed_kv_bytes_per_entry,
                    g.compressed_index_bytes_per_entry,
                    minimum,
                )
                attended = keys = keys + num_decodes * compressed_read_bytes(
                    entries, g.compressed_topk, 1, 0, minimum
                )
            flops = g.decode_flop_per_key * attended + g.index_flop_per_key * keys
            if g.compressed_index_flop_per_entry:  # the indexer scores the keys it reads
                flops = flops + num_decodes * compressed_read_bytes(
                    entries, g.compressed_topk, 0, g.compressed_index_flop_per_entry, minimum
                )
            read_s = kv_bytes / rates.bandwidth_bytes_per_s
            group_s = maximum(read_s, repeats * flops / rates.peak_flop_per_s)
            curve = self.decode_curves.get(g.mla)
            if curve and g.layers:  # a named backend: at least its measured calls' time
                heads = kernel_heads(g.heads, self.decode_head_block.get(g.mla, 1))
                group_s = maximum(
                    group_s,
                    g.layers
                    * decode_heads_call_s(curve, heads, calls, kv_bytes / g.layers, maximum),
                )
            seconds = seconds + group_s
            memory = memory + read_s
        if self.dsa is not None:  # the sparse module's cost over the MLA roofline (or saving)
            # one module row per query token (decode_rows): a verification's
            # draft tokens are decodes of their own to the indexer and the sparse MLA
            delta = self.dsa.delta_s("decode", decode_rows(num_decodes, queries), mean)
            seconds = maximum(0.0, seconds + delta)
            memory = maximum(0.0, memory + delta)
        # each attention layer launches its kernel: at least the smallest one measured
        return maximum(seconds, self.floors.attention_s), memory

    def prefill_attention_s(self, new_tokens: int, cached_tokens: int) -> float:
        """Seconds of one prefill chunk's attention (prefill_chunks_attention_s of it alone)."""
        return self.prefill_chunks_attention_s(((new_tokens, cached_tokens),))

    def prefill_calls_of(self, group: _Group) -> tuple | None:
        """The measured prefill calls that time a group's chunks (None: the fractions do): the
        prefill backend's (BackendTiming.prefill_calls) at the group's kind, cache dtype and head
        shape, for a dense group (full, sliding or chunked window, MLA): not DSA's top-k or
        DeepSeek-V4's compressed entries, nor MiniMax-M3's blocks, which those rows never ran."""
        if self.prefill_fractions_why(group):
            return None
        calls = self.prefill_calls[group.mla]
        return calls[self._table_shape(group, calls)]

    @staticmethod
    def _table_shape(group: _Group, calls: dict) -> str:
        """The head shape whose calls of the backend's own kind time a group: an MLA group's
        MHA form (its head shape) where the backend's MLA rows timed that form (SGLang's
        trtllm_mla: it runs every extend chunk so, MHA_CHUNKED_KV), else its absorbed latent
        form (latent_shape: the form FA3's and triton's MLA rows timed, and the one SGLang runs
        a chunk over cached tokens in); a GQA/MHA group's head shape."""
        if group.mla and group.head_shape not in calls and group.latent_shape:
            return group.latent_shape
        return group.head_shape

    def prefill_as_mha_calls(self, group: _Group, chunks=None) -> tuple | None:
        """The prefill backend's MHA calls that time an MLA group's up-projected heads
        (mha_form_calls: its head shape's own, or the two square shapes that bracket it) where
        it runs the group's chunks with no cached tokens as MHA
        (BackendKernels.mla_prefill_as_mha: SGLANG_MLA_PREFILL_AS_MHA), None where it does not,
        or the backend's MHA rows hold neither; `chunks` (new tokens, cached tokens) given, None
        unless none of them holds cached tokens (SGLang runs the whole extend batch in the
        absorbed latent form then), and None where their new tokens fit the piecewise CUDA
        graphs (prefill_graph_max_tokens: every handler returns AttnForwardMethod.MLA under
        is_in_piecewise_cuda_graph(), the latent form captured)."""
        if not group.mla or group.compress_ratio or group.attended_topk or not group.layers:
            return None
        if group.window is not None:
            return None
        if chunks is not None and any(cached for _, cached in chunks):
            return None
        piecewise = self.prefill_graph_max_tokens
        if chunks is not None and piecewise and sum(new for new, _ in chunks) <= piecewise:
            return None
        return mha_form_calls(self.mla_prefill_as_mha_calls, group.head_shape) or None

    def prefill_fractions_why(self, group: _Group) -> str:
        """Why a group's prefill attention is priced at the fractions ("": it is not, its
        backend's measured calls time it): "sparse" (DSA's top-k, DeepSeek-V4's compressed
        entries, MiniMax-M3's blocks: the rows time dense attention), "backend" (no prefill rows
        of this kind for the backend, or none in the cache's dtype), "shape" (none at the
        group's head shape)."""
        if group.compress_ratio or group.attended_topk or not group.layers:
            return "sparse"
        calls = self.prefill_calls.get(group.mla)
        if not calls:
            return "backend"
        return "" if self._table_shape(group, calls) in calls else "shape"

    def _window_calls(self, group: _Group) -> tuple | None:
        """A sliding-window group's own measured calls (its window's rows), None where the
        backend timed none at its window: the full-attention calls then time it at the prompt
        of as many keys."""
        if group.window is None or group.chunked:
            return None
        return self.prefill_calls[group.mla].get(f"{group.head_shape}/w{group.window}")

    def prefill_chunks_attention_s(self, chunks) -> float:
        """Seconds of a step's prefill chunks' causal attention, each (new tokens, tokens cached
        before it) over its cached tokens and itself (the cached KV read and the chunk's written
        once: every new token's, a window's too), and the recurrent state read and written once
        per chunk (the chunk scan starts from the cached state and leaves its own).

        Each group of layers: where the prefill backend's calls were measured at its kind, cache
        dtype and head shape (prefill_calls_of), its layers x one call over all the chunks
        (prefill_call_s: the chunks x the heads on a rank as the call's units, the tokens whose
        causal attention attends as many keys as a chunk does on average as its prompt
        tokens; a sliding window's own rows where the backend timed that window), and at least
        the chunks' KV read at the backend's memory fraction (an MLA group whose chunks hold no
        cached tokens, where the backend runs them as MHA: its MHA calls at the group's head
        shape, prefill_as_mha_calls); else each
        chunk on the roofline of the fractions (max of the KV read and the FLOPs), as the
        operator list charges it."""
        if self.recurrent is not None:  # the layers' kernels over every chunk, as timed
            seconds = self.recurrent.prefill_s(chunks)
        else:
            state_s = self.state_bytes_per_sequence / self.attention_rates.bandwidth_bytes_per_s
            seconds = len(chunks) * state_s
        for g in self.groups:
            rates = self.prefill_rates[g.mla]
            as_mha = self.prefill_as_mha_calls(g, chunks)
            calls = as_mha[0] if as_mha else self.prefill_calls_of(g)
            roofline_s = read_bytes = keys_sum = 0.0
            for new_tokens, cached_tokens in chunks:
                end = cached_tokens + new_tokens
                held = end if g.window is None else min(end, g.window + new_tokens)
                keys = causal_keys_attended(end, g.window, g.chunked) - causal_keys_attended(
                    cached_tokens, g.window, g.chunked
                )
                # (a DSA group priced without tables: its indexer keys beside the latents)
                kv_bytes = (g.kv_bytes_per_token + g.index_bytes_per_token) * held
                if g.compress_ratio:  # the compressed entries cached before, and the chunk's own
                    entries = cached_tokens // g.compress_ratio + new_tokens // g.compress_ratio
                    kv_bytes += entries * (
                        g.compressed_kv_bytes_per_entry + g.compressed_index_bytes_per_entry
                    )
                keys_sum += keys
                read_bytes += kv_bytes
                if calls is not None:
                    continue
                # DeepSeek-V4: the compressed entries each token attends
                keys += prefill_compressed_keys(
                    g.compress_ratio, g.compressed_topk, new_tokens, cached_tokens
                )
                flops = g.prefill_flop_per_key * keys
                if g.compressed_index_flop_per_entry:  # the indexer scores each token's keys
                    flops += g.compressed_index_flop_per_entry * prefill_indexed_keys(
                        g.compress_ratio, g.compressed_topk, new_tokens, cached_tokens
                    )
                roofline_s += time_floor_s(kv_bytes, flops, rates)
            if calls is None:
                seconds += roofline_s
                continue
            units = len(chunks) * g.heads
            windowed = self._window_calls(g)
            if windowed is not None:  # the window's own rows, at the prompt of as many keys
                tokens = equivalent_prompt_tokens(keys_sum / len(chunks), g.window)
                call_s = prefill_call_s(windowed, units, tokens, g.window)
            else:  # the MHA form's bracketing shapes (mha_form_calls): their mean
                tokens = equivalent_prompt_tokens(keys_sum / len(chunks))
                call_s = sum(prefill_call_s(c, units, tokens) for c in as_mha or (calls,))
                call_s /= len(as_mha or (calls,))
            seconds += max(g.layers * call_s, read_bytes / rates.bandwidth_bytes_per_s)
        return seconds

    def dense_calls_s(
        self,
        num_tokens: int,
        num_sampled: int,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> float | None:
        """Seconds of the step's dense GEMMs each at its own shape, as this GPU's GEMM table
        timed them (gemm_calls.priced_calls_s), MLA's absorbed BMMs at their own shape from its
        mla_bmm rows (bf16 checkpoints: mla_bmm_calls_s) or else at their floor; None where the
        model's GEMMs are not laid out or not timed (gemm_calls)."""
        if self._priced is None or self.gemm_grid is None:
            return None
        group_tokens = self._gathered(num_tokens, gathered_tokens)
        group_sampled = self._gathered_sampled(
            num_tokens, num_sampled, gathered_tokens, gathered_sampled
        )
        key = (num_tokens, num_sampled, group_tokens, group_sampled)
        cached = self._calls_s.get(key)
        if cached is None:
            bmms_s = (
                mla_bmm_calls_s(self.gemm_grid, self.mla_bmm_calls, "bf16", num_tokens)
                if self.mla_bmm_calls
                else None
            )
            calls_s = priced_calls_s(
                self._priced, num_tokens, num_sampled, group_tokens, group_sampled
            )
            cached = calls_s + (self.mla_bmms_s if bmms_s is None else bmms_s)
            self._calls_s[key] = cached
        return cached

    def gemm_s(
        self,
        num_tokens: int,
        num_sampled: int | None = None,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> tuple[float, float]:
        """(weight-bound, compute-bound) seconds of the step's GEMMs over `num_tokens` tokens,
        `num_sampled` of which reach the head (None: all): the dense ones and the experts',
        each on its own roofline; the experts over `gathered_tokens` (weights_bytes), and under
        SGLang's DP attention the MLPs over them too, the head over `gathered_sampled`
        (_gathered_sampled)."""
        return self.gemm_parts_s(num_tokens, num_sampled, gathered_tokens, gathered_sampled)[:2]

    def gemm_parts_s(
        self,
        num_tokens: int,
        num_sampled: int | None = None,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> tuple[float, float, float, float]:
        """gemm_s's (weight-bound, compute-bound) seconds, then the same seconds by group:
        (the dense GEMMs', the experts')."""
        dense_bytes, expert_bytes = self.weights_bytes(num_tokens, gathered_tokens)
        moe_tokens = self._gathered(num_tokens, gathered_tokens)
        weights_s = matmul_s = 0.0
        groups_s = [0.0, 0.0]
        sampled = num_tokens if num_sampled is None else num_sampled
        head_rows = self._gathered_sampled(num_tokens, sampled, gathered_tokens, gathered_sampled)
        dense_flops = (
            self.dense_flop_per_token * num_tokens
            + self.mlp_flop_per_gathered_token * moe_tokens
            + self.head_flop_per_sample * head_rows
        )
        expert_flops = self.expert_flop_per_token * moe_tokens
        expert_slowdown = (
            curve_value(self.expert_curve, moe_tokens * self.tokens_per_expert)
            if self.expert_curve
            else 1.0
        )
        # the dense GEMMs at their own shapes where timed, at every step size: their sum alone
        # (docs/simulate.md "Each dense GEMM at its own shape"); else the pooled roofline
        calls_s = self.dense_calls_s(num_tokens, sampled, gathered_tokens, gathered_sampled)
        for index, (num_bytes, flops, rates, slowdown, floor_s, curve, timed_s) in enumerate(
            (
                (
                    dense_bytes,
                    dense_flops,
                    self.dense_rates,
                    1.0,
                    self.floors.dense_s,
                    None,
                    calls_s,
                ),
                (
                    expert_bytes,
                    expert_flops,
                    self.expert_rates,
                    expert_slowdown,
                    self.floors.experts_s,
                    self.moe_curve,
                    None,
                ),
            )
        ):
            if not num_bytes and not flops:
                continue
            # every GEMM launched takes at least the smallest GEMM (fused MoE) measured
            memory_s, compute_s = roofs_s(num_bytes, flops, rates)
            if timed_s is not None:
                seconds = timed_s
            elif curve is not None:  # the model's own MoE, timed
                seconds = self.moe_layers * moe_kernel_s(curve, moe_tokens)
            else:
                seconds = max(max(memory_s, compute_s) * slowdown, floor_s)
            groups_s[index] += seconds
            if memory_s >= compute_s:  # the weights' roof binds (`bound`)
                weights_s += seconds
            else:
                matmul_s += seconds
        return weights_s, matmul_s, groups_s[0], groups_s[1]

    @property
    def dp_gather_full(self) -> bool:
        """SGLang's DP attention: every layer's MLP on the gathered rows (sglang_dp_comm_s)."""
        return self.dp > 1 and self.sglang_collectives

    def comm_s(
        self, num_tokens: int, gathered_tokens: int | None = None, padded: bool = False
    ) -> float:
        """TP all-reduces of one forward: the comm formula at the achieved bus bandwidth, with a
        per-hop latency that makes a small message cost one measured all-reduce call. With EP
        the MoE layers' all-reduces are dispatch + combine all-to-alls instead (vLLM; SGLang
        without DP attention keeps the all-reduces: sglang_collectives); DP attention
        without EP adds each MoE layer's all-gather and reduce-scatter; SGLang's DP attention
        gathers before every layer's MLP (sglang_dp_comm_s). Collectives whose group spans nodes
        are priced on both links (the class docstring). Beside them, the q/k norms' all-reduces
        of the attention TP group (qk_norm_comm_s)."""
        return self._layer_comm_s(num_tokens, gathered_tokens, padded) + self.qk_norm_comm_s(
            num_tokens
        )

    def qk_norm_comm_s(self, num_tokens: int) -> float:
        """The all-reduces of one forward's q/k norms over all heads (MiniMax-M2's: comm.
        qk_norm_allreduces_per_forward), each of the `num_tokens` tokens' two fp32 sums of
        squares over the attention TP group: at a step's sizes one measured call each."""
        calls = qk_norm_allreduces_per_forward(self.spec)
        if not calls:
            return 0.0
        return calls * self._group_allreduce_s(qk_norm_allreduce_bytes(num_tokens), self.tp)

    def _layer_comm_s(
        self, num_tokens: int, gathered_tokens: int | None = None, padded: bool = False
    ) -> float:
        """comm_s's collectives of the layers' outputs, the q/k norms' left out."""
        if self.dp <= 1 and (self.ep <= 1 or self.sglang_collectives):
            return self.tp_allreduce_s(num_tokens, tp_allreduces_per_forward(self.spec))
        if self.dp_gather_full:
            return self.sglang_dp_comm_s(num_tokens, gathered_tokens, padded)
        one_way = self.link.one_way_bytes_per_s * self.achieved.link
        moe_layers = self.spec.moe.num_layers if self.spec.moe else 0
        # attention's all-reduce in every layer, the MLP's in the dense ones, the embedding's
        calls = tp_allreduces_per_forward(self.spec) - (moe_layers if self.ep > 1 else 0)
        seconds = self.tp_allreduce_s(num_tokens, calls)
        node = self.node_gpus
        if self.ep > 1:  # the attention TP group's ranks hold the same tokens: each sends its share
            own = -(-num_tokens // self.tp)
            if node is not None and self.ep > node:
                seconds += ep_alltoall_two_link_time_s(
                    self.spec,
                    own,
                    self.ep,
                    node,
                    one_way,
                    self._network.one_way_bytes_per_s,
                    self._network.latency_s,
                )
            else:
                seconds += ep_alltoall_time_s(self.spec, own, self.ep, one_way, self.link.latency_s)
        elif self.dp > 1:
            if node is not None and self.dp * self.tp > node:
                seconds += dp_gather_two_level_time_s(
                    self.spec,
                    num_tokens,
                    self.dp,
                    max(1, node // self.tp),
                    node,
                    one_way,
                    self.link.latency_s,
                    self._network.one_way_bytes_per_s,
                    self._network.latency_s,
                )
            else:
                seconds += dp_gather_time_s(
                    self.spec, num_tokens, self.dp, one_way, self.link.latency_s
                )
        return seconds

    def sglang_dp_comm_s(
        self, num_tokens: int, gathered_tokens: int | None = None, padded: bool = False
    ) -> float:
        """The collectives of one SGLang DP-attention forward (sglang/srt/layers/dp_attention.py,
        communicator.py; no --moe-a2a-backend): before every layer's MLP (dense and MoE: both
        run in ScatterMode FULL, at TP over the whole group of G = dp x attention-TP GPUs) the
        ranks' hidden states are gathered into one buffer of `gathered_tokens` rows, and after
        it the output goes back to each rank:

        - `padded` (DpPaddingMode.MAX_LEN: a decode step whose ranks are balanced enough, every
          rank's rows padded to the largest): all_gather_into_tensor, then reduce_scatter_tensor
          over the G GPUs (dp_gather_time_s of the padded rows per GPU, at every layer); with
          attention TP > 1, a reduce-scatter within the attention TP group before the gather and
          an all-gather after the scatter: one all-reduce of the rank's tokens at attention TP.
        - else (SUM_LEN: every step with a prefill, and unbalanced decodes): the buffer of the
          summed rows zero-filled but for the rank's own, then all-reduced over the G GPUs
          (_dp_gather_via_all_reduce), and after the MLP its output all-reduced again
          (tensor_model_parallel_all_reduce) and the rank's rows copied out (dp_scatter): two
          all-reduces of gathered_tokens x hidden bf16 per layer (comm.tp_allreduce_time_s, as
          a TP all-reduce is priced), attention's own reduction folded into the first."""
        group = self.dp * self.tp
        gathered = self._gathered(num_tokens, gathered_tokens)
        layers = self.spec.num_layers - self._local_mlp_layers  # --moe-dense-tp-size 1's: none
        one_way = self.link.one_way_bytes_per_s * self.achieved.link
        node = self.node_gpus if self.node_gpus is not None and group > self.node_gpus else None
        network = self._network if node is not None else None
        if padded:
            rows = -(-gathered // group)  # each GPU's slice of the padded buffer
            seconds = self.tp_allreduce_s(num_tokens, self.spec.num_layers)
            if node is not None and network is not None:
                return seconds + dp_gather_two_level_time_s(
                    self.spec,
                    rows,
                    group,
                    node,
                    node,
                    one_way,
                    self.link.latency_s,
                    network.one_way_bytes_per_s,
                    network.latency_s,
                    layers,
                )
            return seconds + dp_gather_time_s(
                self.spec, rows, group, one_way, self.link.latency_s, layers
            )
        return 2 * layers * self._group_allreduce_s(tp_allreduce_bytes(self.spec, gathered), group)

    @property
    def _network(self):
        """The inter-node link, asked for only where a group spans nodes (node_gpus set)."""
        assert self.network is not None, "a replica over several nodes has its network"
        return self.network

    def logits_gather_s(
        self,
        num_sampled: int,
        gathered_tokens: int | None = None,
        gathered_sampled: int | None = None,
    ) -> float:
        """The TP all-gather of the vocab-parallel head's logits (SGLang's LogitsProcessor and
        vLLM's gather every rank's vocab / tp columns of each sampled position before sampling):
        a ring all-gather of comm.logits_allgather_bytes at the achieved bus bandwidth, its
        per-hop latency such that a small message costs one measured NCCL all-gather call
        (the kernel tables' allgather_call_s; the all-reduce call's where a file has none); a
        group spanning nodes in two levels (comm.two_level_allgather_time_s).

        Under SGLang's DP attention (logits_processor._get_logits, no --enable-dp-lm-head) the
        head is vocab-parallel over the whole group of G = dp x attention-TP GPUs: the ranks'
        sampled hidden states are first gathered into one buffer of their summed rows
        (dp_gather_replicate, DpPaddingMode.SUM_LEN: zero-filled but for the rank's own, then
        all-reduced over the G GPUs: comm.tp_allreduce_bytes of the summed rows), the head runs
        on every row (gemm_s), its logits all-gathered over the G GPUs (logits_allgather_bytes
        of the summed rows at G), and the rank's rows copied out (dp_scatter: no traffic)."""
        if num_sampled <= 0:
            return 0.0
        if self.dp_gather_full and not self.dp_lm_head:
            rows = self._gathered_sampled(
                max(1, num_sampled), num_sampled, gathered_tokens, gathered_sampled
            )
            return self._allgather_s(
                logits_allgather_bytes(rows, self.spec.vocab_size, self.group_tp), self.group_tp
            ) + self._group_allreduce_s(tp_allreduce_bytes(self.spec, rows), self.group_tp)
        if self.tp <= 1:
            return 0.0
        return self._allgather_s(
            logits_allgather_bytes(num_sampled, self.spec.vocab_size, self.tp), self.tp
        )

    def _allgather_s(self, received: float, ranks: int) -> float:
        """A ring all-gather over `ranks` GPUs of which each receives `received` bytes
        (logits_gather_s)."""
        one_way = self.link.one_way_bytes_per_s * self.achieved.link
        call_s = self.achieved.allgather_call_s or self.achieved.allreduce_call_s
        node = self.node_gpus
        if node is None or ranks <= node:
            return ring_allgather_time_s(received, ranks, one_way, call_s / (ranks - 1))
        network = self._network
        return two_level_allgather_time_s(
            received,
            ranks,
            node,
            node,
            one_way,
            call_s / (node - 1) if node > 1 else 0.0,
            network.one_way_bytes_per_s,
            network.latency_s,
        )

    def _group_allreduce_s(self, message_bytes: float, ranks: int) -> float:
        """One all-reduce of `message_bytes` over `ranks` GPUs (the TP group's, tp_allreduce_s;
        SGLang's DP-attention group's, sglang_dp_comm_s and logits_gather_s): within a node the
        engine's all-reduce as its table times it at this size and GPU count
        (Achieved.allreduce_s); where the table has no curve, and for a group spanning nodes (in
        two levels), comm.tp_allreduce_time_s: the achieved bus bandwidth, a small message one
        measured call."""
        if ranks <= 1:
            return 0.0
        one_way = self.link.one_way_bytes_per_s * self.achieved.link
        node = self.node_gpus if self.node_gpus is not None and ranks > self.node_gpus else None
        if node is None:  # within a node: the engine's all-reduce as measured at this size
            measured = self.achieved.allreduce_s(message_bytes, ranks)
            if measured is not None:
                return measured
        network = self._network if node is not None else None
        local = ranks if node is None else node
        intra_latency = (
            self.achieved.allreduce_call_s_at(local) / (2 * (local - 1)) if local > 1 else 0.0
        )
        return tp_allreduce_time_s(
            message_bytes,
            ranks,
            node,
            one_way,
            intra_latency,
            network.one_way_bytes_per_s if network is not None else 0.0,
            network.latency_s if network is not None else 0.0,
        )

    def tp_allreduce_s(self, num_tokens: int, calls: int) -> float:
        """`calls` all-reduces of `num_tokens` hidden states over the TP group, each priced by
        comm.tp_allreduce_time_s: the ring at the achieved intra-node bus bandwidth, its
        per-hop latency such that the ring within a node costs at least one measured call's
        latency; a group spanning nodes in two levels, the network's part at its datasheet
        rate and per-message latency."""
        if calls <= 0:
            return 0.0
        return calls * self._group_allreduce_s(tp_allreduce_bytes(self.spec, num_tokens), self.tp)

    def pipeline_hops_s(self, tokens: int) -> float:
        """The activations of `tokens` passed point to point across the (pp - 1) stage
        boundaries: over the network where a boundary is between nodes (every one where a
        stage spans nodes, else one per node boundary), else the intra-node link."""
        message = tokens * self.spec.hidden_size * ACTIVATION_BYTES
        intra = p2p_time_s(
            message, self.link.one_way_bytes_per_s * self.achieved.link, self.link.latency_s
        )
        crossing = 0
        if self.node_gpus is not None:
            if self.tp > self.node_gpus:
                crossing = self.pp - 1
            else:
                crossing = min(self.pp - 1, -(-self.tp * self.pp // self.node_gpus) - 1)
        inter = (
            p2p_time_s(message, self._network.one_way_bytes_per_s, self._network.latency_s)
            if crossing
            else 0.0
        )
        return (self.pp - 1 - crossing) * intra + crossing * inter

    def dcp_bytes(self, num_decodes: int) -> float:
        """Bytes one rank receives in a step's DCP all-gathers (all attention layers)."""
        return sum(
            dcp_allgather_bytes(num_decodes, heads, width, self.dcp)
            for heads, width in self._dcp_layers
        )

    def dcp_comm_s(self, num_decodes: int) -> float:
        """The DCP all-gathers of a step's decodes, at the achieved link bandwidth, each call
        at least one measured all-reduce call's latency."""
        if self.dcp <= 1 or not num_decodes:
            return 0.0
        rate = self.link.one_way_bytes_per_s * self.achieved.link
        latency_s = self.achieved.allreduce_call_s_at(self.dcp) / (self.dcp - 1)
        return sum(
            ring_allgather_time_s(
                dcp_allgather_bytes(num_decodes, heads, width, self.dcp), self.dcp, rate, latency_s
            )
            for heads, width in self._dcp_layers
        )

    # ---- one step ---------------------------------------------------------------------------
    def step(
        self,
        shape: BatchShape,
        gathered_tokens: int | None = None,
        queries: int = 1,
        padded: bool = False,
        gathered_sampled: int | None = None,
    ) -> StepTime:
        """The time of one step running `shape`; `gathered_tokens`: the tokens the MoE layers
        see across the DP-attention ranks (None: dp x this rank's); `queries`: tokens each
        decode runs (a speculative verification: k drafted + 1, kvplan.simulate.speculative);
        `padded`: the gathered tokens are every rank's padded to the largest (SGLang's
        MAX_LEN gather, comm_s); `gathered_sampled`: the ranks' sampled positions summed (the
        rows SGLang's DP-attention head runs on; None: _gathered_sampled)."""
        num_seqs = shape.num_decodes + len(shape.prefill_chunks)
        if self.pp > 1 and num_seqs > 1:
            forward = self._pipelined(shape, min(self.pp, num_seqs), queries)
        else:
            forward = self._forward(shape, 1.0, gathered_tokens, queries, padded, gathered_sampled)
        gpu = forward.terms
        sampler_s = shape.num_sampled * self.sampler_bytes_per_sequence / self.sampler_bandwidth
        host_s = self.host.per_step_s + self.host.per_request_s * num_seqs
        if self.scheduler_steps > 1 and not shape.prefill_chunks:
            host_s /= self.scheduler_steps
        head_s = self.logits_gather_s(shape.num_sampled, gathered_tokens, gathered_sampled)
        gpu_s = sum(gpu) + sampler_s + head_s
        total = max(gpu_s, host_s) if self.async_scheduling else gpu_s + host_s
        untimed_s, stand_in_s = self.forward_untimed_s(
            shape, forward, queries, gathered_tokens, gathered_sampled
        )
        weights_s, matmul_s, kv_read_s, attention_s, comm_s, launch_s = gpu
        comm_s += head_s
        return engine_step_time(
            weights_s,
            matmul_s,
            kv_read_s,
            attention_s,
            sampler_s,
            comm_s,
            launch_s,
            host_s,
            total,
            untimed_s,
            stand_in_s,
        )

    def _forward(
        self,
        shape: BatchShape,
        layer_share: float,
        gathered_tokens: int | None = None,
        queries: int = 1,
        padded: bool = False,
        gathered_sampled: int | None = None,
    ) -> Forward:
        """The Forward (its terms: weights, matmul, kv_read, attention, comm, launch seconds)
        over `layer_share` of the layers (1: the whole model)."""
        if self.op_rates is not None:
            return Forward(
                self._forward_ops(_as_chunks(shape, queries), layer_share, gathered_tokens, padded)
            )
        num_tokens = shape_tokens(shape, queries)
        weights_s, matmul_s = self.gemm_s(
            num_tokens, max(1, shape.num_sampled), gathered_tokens, gathered_sampled
        )
        decode_s, kv_bound = self.decode_attention_s(
            shape.num_decodes, shape.decode_context_sum, queries
        )
        prefill_s = (
            self.prefill_chunks_attention_s(shape.prefill_chunks) if shape.prefill_chunks else 0.0
        )
        if self.dsa is not None and shape.prefill_chunks:  # one module call over every chunk
            count = len(shape.prefill_chunks)
            mean_chunk = sum(n for n, _ in shape.prefill_chunks) / count
            prefill_s = max(0.0, prefill_s + self.dsa.delta_s("prefill", count, mean_chunk))
        if shape.prefill_chunks and not shape.num_decodes:  # the decodes' floor covers a mix
            prefill_s = max(prefill_s, self.floors.attention_s)
        graphed = num_tokens <= self.graph_limit(bool(shape.prefill_chunks))
        launches = self.layer_launches
        if graphed and self._priced is not None:
            # the GEMMs' launches are in their measured times (dense_calls_s)
            launches -= self.layer_gemm_launches
        if graphed and self.moe_curve is not None:
            # and the fused MoE's in its own measured curve: aiconfigurator's collector times
            # select_experts and fused_moe together as CUDA-graph replays (collector/sglang/
            # collect_moe.py run_op under helper.benchmark_with_power, use_cuda_graph=True)
            launches -= FUSED_MOE_LAUNCHES * self.moe_layers
        launch_s = self.host.launch_s(launches, self.spec.num_layers, graphed)
        eager_s = 0.0 if graphed else self.dsa_eager_s(shape, queries)
        launch_s += eager_s
        if graphed and self.floors.small_s is not None:
            # at least the small kernels the layers launch, as the tables time them (_Floors)
            launch_s = max(launch_s, self.floors.small_s)
        terms = (
            weights_s,
            matmul_s,
            decode_s if kv_bound else 0.0,
            (0.0 if kv_bound else decode_s) + prefill_s,
            self.comm_s(num_tokens, gathered_tokens, padded) + self.dcp_comm_s(shape.num_decodes),
            launch_s,
        )
        return Forward(tuple(t * layer_share for t in terms), eager_s * layer_share)

    def forward_ops_s(
        self, shape: BatchShape, head: bool = True
    ) -> tuple[float, float, float, float, float]:
        """(weights, matmul, kv_read, attention, launch) seconds of a whole forward over `shape`
        priced operator by operator at the measured curves: each distinct layer's operators
        (step_time.batch_ops) once, times its count, then the embedding lookup and the head over
        the sampled positions. GEMMs are charged to weights_s or matmul_s by the roof that binds
        each, attention to kv_read_s or attention_s, the other streaming operators (norms,
        activations, cache writes and gathers) to weights_s or kv_read_s by what they move, and
        every launch's fixed cost to launch_s. Decodes attend their mean context, rounded.
        Without `head`: the layers alone, the forward `kvplan measure` times and predicts."""
        rates, dtype = self.op_rates, self.op_dtype
        assert rates is not None and dtype is not None, "a measured profile's curves, given"
        num_decodes = shape.num_decodes
        context = round(shape.decode_context_sum / self.dcp / num_decodes) if num_decodes else 0
        terms = [0.0] * 5
        parts: list[tuple[tuple[Layer, ...], int, int]]
        parts = [((layer,), 0, count) for layer, count in self._op_layers]
        if head:  # the embedding and the head
            parts.append(((), max(1, shape.num_sampled), 1))
        for layers, sampled, count in parts:
            ops = batch_ops(
                self.spec._replace(layers=layers),
                dtype,
                self.fmt,
                num_decodes,
                context,
                shape.prefill_chunks,
                num_sampled=sampled,
                tp=self.tp,
                gather_kv=self.op_gather_kv,
            )
            for op, t in zip(ops, step_time(ops, rates).ops, strict=True):
                body = (t.time_s - t.overhead_s) * count
                if op.kind is OpKind.MATMUL:
                    terms[0 if t.bound == "memory" else 1] += body
                elif op.kind is OpKind.ELEMENTWISE:
                    terms[2 if op.kv_bytes else 0] += body
                else:
                    terms[2 if t.bound == "memory" else 3] += body
                terms[4] += t.overhead_s * count
        weights_s, matmul_s, kv_read_s, attention_s, launch_s = terms
        return weights_s, matmul_s, kv_read_s, attention_s, launch_s

    def _forward_ops(
        self,
        shape: BatchShape,
        layer_share: float,
        gathered_tokens: int | None = None,
        padded: bool = False,
    ) -> tuple[float, ...]:
        """_forward's terms from the measured per-operator model (forward_ops_s)."""
        weights_s, matmul_s, kv_read_s, attention_s, launch_s = self.forward_ops_s(shape)
        num_tokens = max(1, shape.num_decodes + sum(n for n, _ in shape.prefill_chunks))
        comm_s = self.comm_s(num_tokens, gathered_tokens, padded) + self.dcp_comm_s(
            shape.num_decodes
        )
        return tuple(
            t * layer_share for t in (weights_s, matmul_s, kv_read_s, attention_s, comm_s, launch_s)
        )

    def _pipelined(self, shape: BatchShape, microbatches: int, queries: int = 1) -> Forward:
        """m micro-batches through pp stages: (m + pp - 1) stage times, the idle share being
        pipeline_bubble_fraction(pp, m); each stage boundary passes activations point to point."""
        m = microbatches
        micro = BatchShape(
            num_decodes=-(-shape.num_decodes // m),
            decode_context_sum=shape.decode_context_sum / m,
            prefill_chunks=tuple((-(-n // m), c) for n, c in shape.prefill_chunks),
            num_sampled=-(-shape.num_sampled // m),
        )
        stage = self._forward(micro, 1.0 / self.pp, None, queries)
        scale = m / (1.0 - pipeline_bubble_fraction(self.pp, m))  # = m + pp - 1
        tokens = queries * micro.num_decodes + sum(n for n, _ in micro.prefill_chunks)
        hops_s = self.pipeline_hops_s(tokens)
        weights_s, matmul_s, kv_read_s, attention_s, comm_s, launch_s = (
            t * scale for t in stage.terms
        )
        return Forward(
            (weights_s, matmul_s, kv_read_s, attention_s, comm_s + hops_s, launch_s),
            stage.dsa_eager_s * scale,
        )

    def decode_span_s(
        self,
        num_decodes: int,
        context_sums,
        queries: int = 1,
        gathered_tokens: int | None = None,
        padded: bool = False,
    ):
        """Consecutive decode-only steps of the same `num_decodes` sequences whose attended
        context sums are `context_sums` (a numpy array): (their step times, an array; the
        terms of the run, a function of how many of its steps are kept that returns a
        StepTime of sums). The terms of `step`, the attention ones for many steps at once;
        `queries` tokens per decode, `gathered_tokens` the MoE layers' (step's)."""
        import numpy as np

        sums = np.asarray(context_sums, dtype=float)
        sampled = queries * num_decodes
        if (self.pp > 1 and num_decodes > 1) or self.op_rates is not None:
            steps = [
                self.step(
                    BatchShape(num_decodes, float(x), (), sampled), gathered_tokens, queries, padded
                )
                for x in sums
            ]

            def kept_steps(k: int) -> StepTime:
                kept = steps[:k]
                return StepTime(
                    sum(t.total_s for t in kept),
                    {f: sum(t.terms_s[f] for t in kept) for f in ENGINE_TERMS},
                    untimed_s=sum(t.untimed_s for t in kept),
                    stand_in_launch_s=sum(t.stand_in_launch_s for t in kept),
                )

            return np.array([t.total_s for t in steps]), kept_steps
        base, attention = self.span_parts(num_decodes, sums, queries, gathered_tokens, padded)
        terms = base.terms_s
        weights_s, matmul_s, sampler_s = terms["weights_s"], terms["matmul_s"], terms["sampler_s"]
        comm_s, launch_s, host_s = terms["comm_s"], terms["launch_s"], terms["host_s"]
        fixed = weights_s + matmul_s + sampler_s + comm_s + launch_s
        gpu = fixed + attention
        times = np.maximum(gpu, host_s) if self.async_scheduling else gpu + host_s
        # the base step's untimed seconds less its attention at no context, and the
        # attention at each step's where that is untimed (untimed_terms)
        untimed_attention = "attention" in self.untimed_terms
        untimed_s = base.untimed_s - (
            terms["kv_read_s"] + terms["attention_s"] if untimed_attention else 0.0
        )

        def kept(k: int) -> StepTime:
            return engine_step_time(
                weights_s * k,
                matmul_s * k,
                float(attention[:k].sum()),
                0.0,
                sampler_s * k,
                comm_s * k,
                launch_s * k,
                host_s * k,
                float(times[:k].sum()),
                untimed_s * k + (float(attention[:k].sum()) if untimed_attention else 0.0),
                base.stand_in_launch_s * k,
            )

        return times, kept

    def span_parts(
        self,
        num_decodes: int,
        sums,
        queries: int = 1,
        gathered_tokens: int | None = None,
        padded: bool = False,
    ):
        """(the step of `num_decodes` decodes with no context, whose every term but attention
        is the same at any context; the attention seconds at each of `sums`, an array)."""
        import numpy as np

        key = (num_decodes, queries, gathered_tokens, padded)
        base = self._span_base.get(key)
        if base is None:  # every term but attention depends on the batch size alone
            shape = BatchShape(num_decodes, 0, (), queries * num_decodes)
            base = self._span_base[key] = self.step(shape, gathered_tokens, queries, padded)
        attention, _ = self._decode_attention(
            num_decodes, np.asarray(sums, dtype=float) / self.dcp, np.maximum, np.minimum, queries
        )
        return base, attention + np.zeros_like(sums, dtype=float)  # an array without attention


def _as_chunks(shape: BatchShape, queries: int) -> BatchShape:
    """A speculative verification's decodes (`queries` tokens each over its cache) as the
    prefill chunks they are, for the per-operator model; the shape itself at one query."""
    if queries <= 1 or not shape.num_decodes:
        return shape
    mean = round(shape.decode_context_sum / shape.num_decodes) - 1  # cached before the token
    chunks = ((queries, max(0, mean)),) * shape.num_decodes + tuple(shape.prefill_chunks)
    return BatchShape(0, 0, chunks, shape.num_sampled)


def shape_tokens(shape: BatchShape, queries: int = 1) -> int:
    """The tokens a step runs, `queries` a decode (at least one: an idle rank of a lockstep
    group runs a dummy)."""
    return max(1, queries * shape.num_decodes + sum(n for n, _ in shape.prefill_chunks))


def lockstep_step(
    model: StepModel,
    shapes: list[BatchShape],
    idle_ranks: int = 0,
    pad_to_max: bool = False,
    gathered_tokens: int | None = None,
    gathered_sampled: int | None = None,
) -> tuple[StepTime, int]:
    """One step of DP-attention ranks in lockstep, each running its own shape with the MoE
    layers over the gathered tokens of all: (the slowest rank's step, its index in `shapes`).
    Every rank joins every MoE layer's dispatch/combine (or all-gather) each step, so none
    finishes before the slowest. `idle_ranks` ranks with nothing to run step a one-token dummy
    batch (vLLM's DPEngineCoreProc.execute_dummy_batch): its token joins the MoE layers, its
    forward (the same layers over one token, no attention, nothing sampled) is never the
    slowest. `gathered_tokens` and `gathered_sampled` (the engine's Engine.lockstep_batch)
    replace the rule below where given. The MoE layers see the sum
    of the ranks' tokens (vLLM's num_tokens_across_dp, SGLang's global_num_tokens), or with
    `pad_to_max` every rank's padded to the largest (vLLM under CUDA graphs, SGLang's MAX_LEN
    gather): lockstep_gathered_tokens. `model` prices every rank (StepModel.without_graphs where
    the group runs eagerly)."""
    tokens = [shape_tokens(s) for s in shapes] + [1] * idle_ranks
    gathered = lockstep_gathered_tokens(tokens, pad_to_max)
    if gathered_tokens is not None:
        gathered = gathered_tokens
    # SGLang's DP-attention head runs on the ranks' sampled rows summed (an idle rank samples
    # none: logits_gather_s)
    sampled = sum(s.num_sampled for s in shapes) if gathered_sampled is None else gathered_sampled
    times = [model.step(s, gathered, padded=pad_to_max, gathered_sampled=sampled) for s in shapes]
    slowest = max(range(len(times)), key=lambda i: times[i].total_s)
    return times[slowest], slowest


def lockstep_gathered_tokens(tokens: list[int], pad_to_max: bool) -> int:
    """The tokens a lockstep step's MoE layers see on every rank, from each rank's `tokens`:
    their sum, or (`pad_to_max`) the ranks x the largest."""
    return len(tokens) * max(tokens) if pad_to_max else sum(tokens)


class _Floors(NamedTuple):
    """What a step's kernels take at least, whatever their shape (seconds per forward over all
    layers): each launch of a family at the smallest time the GPU's tables measured for it at
    1-16 tokens (Achieved.floors_s; scripts/derive_achieved.py), times the launches of a forward
    as vLLM's model code makes them. A roofline term below its floor is charged the floor: at
    small batch the kernels of a large MoE layer at TP 8 run far below either roof.

        dense GEMMs    per attention layer 2 (qkv, o) or, MLA, 5 (q_a+kv_a, q_b, the absorbed
                       k and v BMMs, o); per linear-attention layer 2 (in, out projections);
                       per dense MLP 2 (gate_up, down); per MoE layer 1 (router) + 2 per shared
                       expert block; 1 for the head
        fused MoE      1 per MoE layer
        attention      1 per attention layer (one kernel for the step's decodes and chunks)

    An MLA layer's attention kernel pays the tables' smallest MLA decode kernel
    (`attention_mla`: SGLang's trtllm_mla on a B200, 8.4 us at 1-16 sequences, against 4.3 us
    for the smallest GQA kernel) and its two absorbed BMMs the smallest of those (`gemm_mla_bmm`,
    3.9 us, against a 1.8 us GEMM), where the tables timed them; else the family's.

    A launch pays the floor of the kernel its weights format runs where the tables measured that
    format (`gemm_fp8`, `moe_fp8`, ...: `_floor_format`), else the family's smallest: a
    block-fp8 GEMM is a per-token-group activation quant and then DeepGEMM (4.2 us at one token
    on a B200 under SGLang, against bf16's 1.8 us), a block-fp8 fused MoE 16.5 us against
    bf16's 13.6 us. The head, the routers and MLA's two absorbed BMMs stay at the family's
    smallest (unquantized, or a kernel no table times), as does a format without rows. MXFP4
    and NVFP4 experts pay their own rows' floors (`moe_mxfp4`, `moe_nvfp4`: `_moe_format`), not
    the int4 W4A16 rows' (`moe_4bit`), where the tables timed them. Where the tables timed
    the model's own fused MoE (hidden x expert width, experts x top-k, format, the experts' TP
    and EP split: `moe_shape_key`), its floor is that kernel's smallest time at 1-16 tokens:
    DeepSeek-R1's at TP 8 in block fp8 takes 35 us on a B200 under SGLang (router top-k and
    permutation included), where the smallest fused MoE of any shape takes 13.6 us.

    All-reduces are floored already: comm_s charges each call the tables' smallest message.

        small kernels  `small_launches` (norms, rotary, cache writes, activations, conv-state
                       updates) at `elementwise`, the smallest graph-timed one-row kernel of the
                       tables (1.4-2.0 us: SGLang's and vLLM's causal_conv1d_update, vLLM's
                       static fp8 quant), and each recurrent layer's state update at `recurrent`,
                       the Gated DeltaNet decode update the tables time (4.1-4.4 us); where the
                       recurrent/ tables time the layers (`recurrent_timed`), their conv-state
                       update and state update are in the attention term, not here; a floor
                       under the launch term, whose per-launch cost (HostOverheads.per_launch_s, 3.2 us) is above it for every bundled
                       model at the shipped floors (DeepSeek-R1: 487 launches x 1.68 us on a
                       B200 under SGLang, 13.4 us a layer)."""

    dense_s: float = 0.0
    experts_s: float = 0.0
    attention_s: float = 0.0
    small_s: float | None = None  # the small launches' (None: the tables time none)

    @classmethod
    def of(
        cls,
        shape: _Shape,
        floors_s: dict,
        weights_dtype: str = "bf16",
        moe_tp: int = 1,
        moe_ep: int = 1,
        recurrent_timed: bool = False,
    ) -> _Floors:
        """`recurrent_timed`: the recurrent/ tables time the recurrent layers' decode kernels
        (RecurrentKernels: the conv-state update and the state update, in the attention term),
        so the small floor leaves out those two launches of every recurrent layer."""
        if not floors_s:
            return cls()
        fmt = _floor_format(weights_dtype)
        gemm = floors_s.get("gemm", 0.0)
        gemm_quantized = floors_s.get(f"gemm_{fmt}", gemm) if fmt else gemm
        moe = floors_s.get("moe", 0.0)
        moe_fmt = _moe_format(weights_dtype)
        if moe_fmt:
            moe = floors_s.get(f"moe_{moe_fmt}", moe)
            if shape.moe_shape:
                moe = floors_s.get(moe_shape_key(moe_fmt, shape.moe_shape, moe_tp, moe_ep), moe)
        quantized = shape.quantized_gemm_launches
        bmms = 2 * shape.mla_layers  # MLA's absorbed BMMs, of the unquantized launches
        attention = floors_s.get("attention", 0.0)
        mla = shape.mla_layers
        small = floors_s.get("elementwise")
        return cls(
            dense_s=(shape.gemm_launches - quantized - bmms) * gemm
            + bmms * floors_s.get("gemm_mla_bmm", gemm)
            + quantized * gemm_quantized,
            experts_s=shape.moe_layers * moe,
            attention_s=(shape.attention_layers - mla) * attention
            + mla * floors_s.get("attention_mla", attention),
            small_s=None
            if small is None
            else (shape.small_launches - shape.recurrent_layers) * small
            if recurrent_timed
            else shape.small_launches * small
            + shape.recurrent_layers * floors_s.get("recurrent", small),
        )


def moe_kernel_s(curve: tuple, tokens: float) -> float:
    """Seconds of one fused-MoE layer over `tokens` tokens, from its shape's measured
    (tokens, seconds) points (kernel tables' moe/ files): linear between the two measured
    token counts around it, the first point's time below it, and past the last point that
    point's time per token times the tokens (the kernel is compute-bound there, linear)."""
    first_tokens, first_s = curve[0]
    if tokens <= first_tokens:
        return first_s
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if tokens <= x1:
            return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
    last_tokens, last_s = curve[-1]
    return last_s * tokens / last_tokens


def _own_moe_curve(
    spec: ModelSpec, curves_s: dict, weights_dtype: str, moe_tp: int, moe_ep: int
) -> tuple | None:
    """The measured curve of the model's own fused MoE in its weights format and split (None:
    no MoE, a format no table times by shape, or a shape the tables lack)."""
    key = own_moe_key(spec, weights_dtype, moe_tp, moe_ep)
    if key is None or not curves_s:
        return None
    return curves_s.get(key) or None


def own_moe_key(spec: ModelSpec, weights_dtype: str, moe_tp: int, moe_ep: int) -> str | None:
    """The kernel tables' key of the model's own fused MoE in its weights format and split
    (None: no MoE, or a format no table times by shape)."""
    fmt = _moe_format(weights_dtype)
    if spec.moe is None or fmt is None:
        return None
    return moe_shape_key(fmt, _shape(spec).moe_shape, moe_tp, moe_ep)


def moe_shape_key(fmt: str, moe_shape: str, moe_tp: int, moe_ep: int) -> str:
    """The kernel tables' floors_s key of a fused MoE of shape `moe_shape` (_Shape.moe_shape) in
    format `fmt` with its experts split `moe_tp` ways (each expert's width) and `moe_ep` ways
    (the experts): scripts/derive_achieved.py's moe_shape_key."""
    return f"moe_{fmt}_{moe_shape}_tp{moe_tp}_ep{moe_ep}"


def _moe_shape(spec: ModelSpec) -> str:
    moe = spec.moe
    if moe is None:
        return ""
    return f"{spec.hidden_size}x{moe.expert_intermediate_size}_{moe.num_experts}x{moe.top_k}"


def moe_format(weights_dtype: str) -> str | None:
    """The kernel tables' fused-MoE format key of `weights_dtype` (_moe_format)."""
    return _moe_format(weights_dtype)


def _moe_format(weights_dtype: str) -> str | None:
    """The kernel tables' format key of the fused MoE a model in `weights_dtype` runs (None: the
    family's smallest): `_floor_format`'s, but mxfp4 and nvfp4 experts have keys of their own
    (aiconfigurator's w4a16_mxfp4 and nvfp4 rows: scripts/derive_achieved.MOE_SHAPE_FORMATS),
    timed only at the shapes and splits the tables hold (gpt-oss's MXFP4 experts under vLLM
    and SGLang on Hopper and Blackwell); elsewhere no curve, and the experts stay untimed."""
    key = str(weights_dtype).lower()
    return key if key in ("mxfp4", "nvfp4") else _floor_format(key)


def _floor_format(weights_dtype: str) -> str | None:
    """The kernel tables' format key whose floors a launch in `weights_dtype` pays (None: the
    family's smallest): `_format_key`'s, but for mxfp4 (its experts run an MXFP4 kernel the
    tables' 4-bit W4A16 rows do not time; its dense layers stay bf16) and nvfp4 (no rows)."""
    key = str(weights_dtype).lower()
    return None if key in ("mxfp4", "nvfp4") else _format_key(key)


# Dense GEMM kernels by layer kind (gemm_launches): the head; per attention layer qkv and o
# (MLA: q_a+kv_a, q_b, two absorbed BMMs, o); per linear-attention layer in and out; per dense MLP
# gate_up and down; per MoE layer the router and a shared expert's two
GEMM_LAUNCHES = {"forward": 1, "gqa": 2, "mla": 5, "state": 2, "dense": 2, "moe": 1, "shared": 2}
# Small kernels by layer kind (small_launches' docstring has the source)
SMALL_LAUNCHES = {
    "forward": 2,
    "every_layer": 2,
    "gqa": 2,
    "mla": 4,
    "state": 2,
    "dense": 1,
    "moe": 0,
    "shared": 2,
}
# The kernels an MLA layer's attention launches, the step's launch count for it (layer_launches):
# its GEMMs (q_a+kv_a, q_b, two absorbed BMMs, o), its small kernels and the attention kernel
MLA_ATTENTION_LAUNCHES = GEMM_LAUNCHES["mla"] + SMALL_LAUNCHES["mla"] + 1
# The kernels of one fused MoE layer past its router GEMM (a GEMM_LAUNCHES one), as SGLang's and
# vLLM's Triton fused MoE launch them: the top-k (SGLang layers/moe/topk.py select_experts:
# topk_softmax, or biased_grouped_topk / moe_fused_gate; vLLM fused_moe.py fused_topk), the
# expert alignment (moe_align_block_size), the two grouped GEMMs (fused_moe_kernel for w13 and
# w2), the activation between them (silu_and_mul) and the weighted sum over the top-k
# (SGLang moe_sum_reduce, vLLM ops.moe_sum). Not counted: a block-fp8 checkpoint's
# per-token-group activation quant before each grouped GEMM, EP's dispatch and combine kernels.
FUSED_MOE_LAUNCHES = 6


def gemm_launches(spec: ModelSpec) -> int:
    """Dense GEMM kernels one forward launches (the head included; see _Floors)."""
    return _launches(spec, **GEMM_LAUNCHES)


def layer_launches(spec: ModelSpec) -> int:
    """The kernels one forward's layers launch, the forward's own (embedding, final norm, head)
    left out: their dense GEMMs (gemm_launches), small
    kernels (small_launches), each attention layer's attention kernel, each recurrent layer's
    state update and each MoE layer's fused-MoE kernels (FUSED_MOE_LAUNCHES). A dense GQA Llama
    layer launches 10 (4 GEMMs, 5 small kernels, attention); a DeepSeek-V3 MoE layer 23 (MLA's
    5 GEMMs and 4 small kernels, the router and shared expert's 3 GEMMs and 2 small kernels,
    the fused MoE's 6, the 2 residual norms, attention). Under a CUDA graph a launch costs the
    graph constant over the reference layer's count; eagerly its measured host cost, with each
    layer the rest of the per-layer constant (HostOverheads.launch_s).

    The TP collectives are not counted: comm_s prices each at a measured call, and the
    constants were fitted on runs at several TP sizes (host_overheads.json's reference_layer),
    so whatever dispatching them costs is in the constants in an unknown share; counting them
    would move a dense layer at TP > 1 off the constants it was fitted with."""
    moe_layers = spec.moe.num_layers if spec.moe else 0
    return (
        gemm_launches(spec)
        - GEMM_LAUNCHES["forward"]
        + small_launches(spec)
        - SMALL_LAUNCHES["forward"]
        + len(spec.attention_layers())
        + recurrent_layers(spec)
        + FUSED_MOE_LAUNCHES * moe_layers
    )


def small_launches(spec: ModelSpec) -> int:
    """Kernels one decode forward launches that no family of `_Floors` counts, each a single
    small kernel (its time at a few tokens is its launch and latency, not its bytes), as
    SGLang 0.5's model code launches them under a CUDA graph (python/sglang/srt/models/
    llama.py, qwen3_moe.py, deepseek_v2.py, qwen3_next.py; layers/layernorm.py):

        every layer        2: the fused residual-add + RMSNorm before attention and before the MLP
        GQA attention      2: rotary embedding, KV-cache write
        MLA attention      4: q_a and kv_a RMSNorms, rotary embedding, KV-cache write
        recurrent state    2: causal conv1d state update, gated RMSNorm of the output (the state
                           update itself: `recurrent_layers`, its own floor)
        dense MLP          1: SiLU-and-mul
        MoE, shared expert 2: its SiLU-and-mul, the add of the shared and routed outputs
        the forward        2: embedding lookup, final RMSNorm
        q/k norm over all  2: the sums of squares and the apply (SGLang minimax_m2.py
        heads under TP        rms_sumsq_serial, rms_apply_serial; their all-reduce is comm's)

    Not counted here: what a family's floor already times (GEMMs with their per-token-group
    activation quant, the fused MoE with its top-k, alignment, activation and sum, the attention
    kernel, all-reduces); per-head q/k RMSNorms (Qwen3's), which the anatomy does not record."""
    return _launches(spec, **SMALL_LAUNCHES) + QK_NORM_TP_LAUNCHES * qk_norm_allreduces_per_forward(
        spec
    )


def _launches(
    spec: ModelSpec,
    *,
    forward: int,
    gqa: int,
    mla: int,
    state: int,
    dense: int,
    moe: int,
    shared: int,
    every_layer: int = 0,
) -> int:
    """Kernels of one forward counted by layer kind: `forward` once, `every_layer` per layer,
    per attention layer `gqa` (or `mla`), per recurrent-state layer `state`, per dense MLP
    `dense`, per MoE layer `moe` plus `shared` where it has a shared expert."""
    launches = forward + every_layer * spec.num_layers
    for layer, count in distinct_layers(spec.layers):  # each kind of layer once, times its count
        attn = layer.attention
        if attn is not None:
            launches += (mla if attn.kind is CacheKind.MLA else gqa) * count
        elif layer.state is not None:
            launches += state * count
    moe_layers = spec.moe.num_layers if spec.moe else 0
    with_shared = shared if spec.moe and spec.moe.shared_intermediate_size else 0
    return launches + dense * (spec.num_layers - moe_layers) + moe_layers * (moe + with_shared)


def recurrent_layers(spec: ModelSpec) -> int:
    """Layers whose decode runs a recurrent state update in place of an attention kernel."""
    return sum(1 for layer in spec.layers if layer.attention is None and layer.state is not None)


def _mla_layers(spec: ModelSpec) -> int:
    return sum(
        1 for layer in spec.layers if layer.attention and layer.attention.kind is CacheKind.MLA
    )


def quantized_gemm_launches(spec: ModelSpec) -> int:
    """Of `gemm_launches`, those a quantized checkpoint runs in its weights format: all but the
    head, the MoE routers and MLA's two absorbed BMMs (an fp8 checkpoint leaves the head and the
    router gate unquantized)."""
    moe_layers = spec.moe.num_layers if spec.moe else 0
    return gemm_launches(spec) - 1 - moe_layers - 2 * _mla_layers(spec)


class _Shape(NamedTuple):
    """What a step model's floors take from the model alone, whatever the GPU, format or
    layout."""

    gemm_launches: int
    quantized_gemm_launches: int  # of gemm_launches, those in the weights format
    attention_layers: int
    moe_layers: int
    moe_shape: str  # the fused MoE's <hidden>x<width>_<experts>x<top-k> ("": none)
    mla_layers: int = 0  # of attention_layers, those of MLA
    small_launches: int = 0  # small kernels of a decode forward no family counts
    recurrent_layers: int = 0  # layers running a recurrent state update instead of attention
    layer_launches: int = 0  # the kernels the layers launch, collectives apart (layer_launches)


# A step model is built for every layout of every GPU kind (`capacity --gpu all`: over a hundred
# for one model); its shape depends on the model alone: kept per spec
# (kvplan.anatomy.model.kept_with).
_SHAPES: dict[tuple, tuple] = {}


def _shape(spec: ModelSpec) -> _Shape:
    def build() -> _Shape:
        return _Shape(
            gemm_launches(spec),
            quantized_gemm_launches(spec),
            len(spec.attention_layers()),
            spec.moe.num_layers if spec.moe else 0,
            _moe_shape(spec),
            _mla_layers(spec),
            small_launches(spec),
            recurrent_layers(spec),
            layer_launches(spec),
        )

    return kept_with(_SHAPES, spec, (), build)


# the operators of a layer's MLP side (step_time.step_ops names): a dense MLP laid out from its
# widths or coarse, and a MoE layer's shared experts (the router and routed experts apart)
MLP_OPS = frozenset({"mlp", "shared_experts", "gate_up", "up", "down", "activation"})


class _Coefficients(NamedTuple):
    """A step's bytes and FLOPs by kernel kind, summed from its operator list (step_time.step_ops)
    and linear in what a step runs: the whole model's (one copy; StepModel splits it over its
    ranks), the cache's per rank."""

    dense_bytes: float  # every weight but the embedding's rows and the routed experts
    embedding_row_bytes: float  # per token looked up (a tied table's too: the head reads it whole)
    expert_bytes_per_touched: float  # per expert touched in every MoE layer (all layers)
    dense_flop_per_token: float  # the dense GEMMs and norm parameters, the head left out
    head_flop_per_sample: float
    expert_flop_per_token: float  # the top-k routed experts of every MoE layer
    groups: tuple[_Group, ...]  # attention layers by window and kind, one rank's
    state_bytes_per_sequence: float  # recurrent state read and written per sequence, one rank
    # of dense_bytes and dense_flop_per_token, the MLPs' (dense MLP, shared experts: the GEMMs
    # SGLang's DP attention runs over its whole group on the gathered rows), and the head's bytes
    mlp_bytes: float
    mlp_flop_per_token: float
    head_bytes: float
    # of dense_bytes and dense_flop_per_token, the MoE routers' (one replicated gate a layer)
    router_bytes: float
    router_flop_per_token: float
    # of mlp_bytes and mlp_flop_per_token, the dense layers' MLPs' (layers without routed
    # experts: what SGLang's --moe-dense-tp-size 1 keeps whole on every GPU)
    dense_mlp_bytes: float = 0.0
    dense_mlp_flop_per_token: float = 0.0


# its coefficients depend on the model, the formats, tp and the indexer alone: kept per spec
_COEFFICIENTS: dict[tuple, tuple] = {}


def _coefficients(
    spec: ModelSpec,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int,
    indexer_keys: bool = True,
    state_dtypes: tuple[str, str] | None = None,
) -> _Coefficients:
    """The step's coefficients from the operator list: the weights and GEMMs of a whole-model
    one-token step (one rank's at tp 1; the embedding a lookup of the token's row, the experts
    those one token touches, E * (1 - (1 - k/E)^T) per layer), the attention and state operators
    of one decode at one cached token and one one-token chunk on one of `tp` ranks (per cached
    key; without a DSA indexer's keys where `indexer_keys` is False), a recurrent state in
    `state_dtypes` (State.held_in)."""
    return kept_with(
        _COEFFICIENTS,
        spec,
        (weights_dtype, fmt, tp, indexer_keys, state_dtypes),
        lambda: _sum_ops(spec, weights_dtype, fmt, tp, indexer_keys, state_dtypes),
    )


def _sum_ops(
    spec: ModelSpec,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int,
    indexer_keys: bool,
    state_dtypes: tuple[str, str] | None,
) -> _Coefficients:
    dense_bytes = row_bytes = expert_bytes = dense_flops = head_flops = expert_flops = 0.0
    mlp_bytes = mlp_flops = head_bytes = router_bytes = router_flops = 0.0
    dense_mlp_bytes = dense_mlp_flops = 0.0
    whole = step_ops(
        spec,
        weights_dtype,
        fmt,
        num_decodes=1,
        decode_context=1,
        num_sampled=1,
        even_split=True,
        whole_model=True,
    )
    for ops, count in whole:
        sparse = any(op.name == "experts" for op in ops)
        for op in ops:
            if op.kind in (OpKind.DECODE_ATTENTION, OpKind.PREFILL_ATTENTION):
                continue  # the attention groups' below
            if op.name == "embedding":
                row_bytes += count * op.weight_bytes
            elif op.name == "experts":
                expert_bytes += count * op.weight_bytes
                expert_flops += count * op.flops
            elif op.name == "lm_head":
                dense_bytes += count * op.weight_bytes
                head_bytes += count * op.weight_bytes
                head_flops += count * op.flops
            else:
                dense_bytes += count * op.weight_bytes
                dense_flops += count * (op.flops + op.elementwise_flops)
                if op.name in MLP_OPS:
                    mlp_bytes += count * op.weight_bytes
                    mlp_flops += count * (op.flops + op.elementwise_flops)
                    if not sparse:
                        dense_mlp_bytes += count * op.weight_bytes
                        dense_mlp_flops += count * (op.flops + op.elementwise_flops)
                elif op.name == "router":
                    router_bytes += count * op.weight_bytes
                    router_flops += count * (op.flops + op.elementwise_flops)
    if spec.moe is not None:
        expert_bytes /= spec.moe.expected_experts_touched(1)
    # one decode at one cached token and one one-token chunk: per cached key
    cache = step_ops(
        spec,
        weights_dtype,
        fmt,
        num_decodes=1,
        decode_context=1,
        prefill_chunks=((1, 0),),
        tp=tp,
        even_split=True,
        state_dtypes=state_dtypes,
    )
    by_key: dict[tuple, list[float]] = {}
    state = 0.0
    for (layer, count), (ops, _) in zip(distinct_layers(spec.layers), cache, strict=True):
        attn = layer.attention
        entry = [0.0] * 9  # a layer without attention has no attention operator
        # a sparse layer's indexer (its key's bytes and one key's FLOPs at the decode and at the
        # chunk): with the DSA module's tables the module times a DSA layer's, not priced again;
        # without (and MiniMax-M3's), per key beside the top-k (the group's attended_topk)
        dsa = indexer = 0.0
        topk = block = 0
        module = False  # a DSA layer the module's tables time (_Group.dsa_module)
        if attn is not None and attn.indexer_topk:
            dsa = indexer_flop_per_key(attn) / tp
            indexer = attn.indexer_bytes_per_token(fmt)
            # the tables time a layer with an indexer of its own over dense MLA; a layer that
            # shares another's picks (GLM-5.3's) is not theirs: its top-k priced here
            module = not indexer_keys and _own_indexer(attn)
            topk = 0 if module else attn.indexer_topk
        elif attn is not None and attn.sparse_topk_blocks:  # MiniMax-M3 (no DSA tables)
            dsa = indexer_flop_per_key(attn) / tp
            indexer = attn.indexer_bytes_per_token(fmt)
            topk, block = attn.sparse_topk_blocks, attn.sparse_block_size
        if attn is not None:
            window = attn.window if attn.kind.windowed else None
            entry = by_key.setdefault(
                (
                    window,
                    attn.kind is CacheKind.CHUNKED,
                    attn.kind is CacheKind.MLA,
                    attn.compress_ratio,
                    attn.compressed_topk,
                    topk,
                    block,
                    f"{attn.qk_head_dim}x{attn.v_head_dim}",
                    max(1.0, attn.num_q_heads / tp),
                    module,
                    mla_latent_shape(attn),
                ),
                [0.0] * 9,
            )
            entry[8] += count
            kv_entry, index_entry = attn.compressed_entry_parts(fmt)
            entry[3] += count * kv_entry
            entry[4] += count * index_entry
            if attn.compress_ratio:  # DeepSeek-V4's: split as the floor splits
                entry[5] += count * indexer_flop_per_key(attn) / tp
            if topk:
                entry[6] += count * indexer
                entry[7] += count * dsa
        for op in ops:
            if op.kind is OpKind.DECODE_ATTENTION:
                entry[0] += count * (op.kv_bytes - indexer)
                entry[1] += count * (op.flops - dsa)
            elif op.kind is OpKind.PREFILL_ATTENTION:
                entry[2] += count * (op.flops - (0.0 if indexer_keys else dsa))
            elif op.name == "state":  # the decode's and the chunk's sequences
                state += count * op.kv_bytes / 2
    groups = tuple(
        _Group(
            window, chunked, mla, kv, dec, pre, ratio, ctopk, kv_entry, index_entry,
            indexer_flops, topk, index_bytes, index_flops, block, int(layers), head_shape, heads,
            module, latent,
        )
        for (window, chunked, mla, ratio, ctopk, topk, block, head_shape, heads, module, latent), (
            kv, dec, pre, kv_entry, index_entry, indexer_flops, index_bytes, index_flops, layers,
        ) in by_key.items()
    )  # fmt: skip
    return _Coefficients(
        dense_bytes,
        row_bytes,
        expert_bytes,
        dense_flops,
        head_flops,
        expert_flops,
        groups,
        state,
        mlp_bytes,
        mlp_flops,
        head_bytes,
        router_bytes,
        router_flops,
        dense_mlp_bytes,
        dense_mlp_flops,
    )


class _DsaModule:
    """DeepSeek-V3.2's sparse attention (DSA: an indexer scores every cached key, a top-k picks
    2,048, MLA attends to those) as the engine runs it: the step model prices the layer as dense
    MLA, and this adds what the engine's DSA module costs over the dense MLA module on the same
    GPU (or saves, at long contexts), from the GPU's and engine's kernel tables
    (kvplan/data/kernel_tables/dsa: vLLM's DSA module less vLLM's MLA module; SGLang's DSA module
    less what this model charges the layer without it, dsa_layer_base_s, the wheel holding no
    SGLang MLA module: DsaGrids.baseline). Each grid times the attention shape its module ran
    (DsaGrids.shape): the model reads the one of its DSA layers' shape (dsa_grids_for: GLM-5's
    in SGLang's files); a DSA layer of a shape no grid timed (GLM-5 in vLLM's: no vLLM MLA
    module table of its shape to subtract) takes DeepSeek-V3.2's as a stand-in (`shape_timed`
    False, named in untimed_parts: GLM-5's DSA module is within ~12% of DeepSeek-V3.2's at TP 8
    in vLLM 0.24.0's and SGLang 0.5.14's H200 and B200 decode tables).
    Per layer, read at
    the step's batch and length and the heads on a rank, bilinear in the logarithms of batch and
    heads, linear along the logarithm of the length, flat beyond the tables' ends but for the
    batch: past its largest (1,024 decodes, 256 prefills) each further sequence adds what one
    did between the two largest (the sequences are independent; flat would price 2,048 decodes
    as 1,024)."""

    def __init__(self, grids, kv: str, heads: float, layers: int):
        import numpy as np

        self.tables = grids
        self.grids, self.kv, self.heads, self.layers = grids.delta_us, kv, heads, layers
        # the layers have the shape the modules ran (False: DeepSeek-V3.2's grids stand in)
        self.shape_timed = True
        self._rows: dict[tuple[str, float], object] = {}
        self._log_lengths = {
            ph: np.log(np.asarray(x, dtype=float)) for ph, x in grids.lengths.items()
        }

    @classmethod
    def of(cls, spec: ModelSpec, fmt: KvFormat, tp: int, tables):
        """The module for a model with DSA layers and a GPU with tables (None otherwise)."""
        layers = dsa_layers(spec)
        if not tables or not layers:
            return None
        kv = "fp8" if fmt.name.startswith("fp8") else "bfloat16"
        tables = dsa_grids_for(spec, tables)
        module = cls(tables, kv, layers[0].num_q_heads / tp, len(layers))
        module.shape_timed = dsa_shape_timed(spec, tables)
        return module

    def _row(self, phase: str, batch: float):
        """The length row at (heads, batch), seconds per layer."""
        row = self._rows.get((phase, batch))
        if row is None:
            row = self._rows[(phase, batch)] = self._mixed_row(phase, batch)
        return row

    def _mixed_row(self, phase: str, batch: float):
        import numpy as np

        heads = sorted({h for ph, h, _ in self.grids if ph == phase})
        hi, hw = _log_position(heads, self.heads)
        batches = self.tables.batches[phase]
        bi, bw = _log_position(batches, batch)
        if batch > batches[-1]:  # more sequences than the table: each costs what one more did
            bw = 1.0 + (batch - batches[-1]) / (batches[-1] - batches[-2])
        row = 0.0
        for h, wh in ((heads[hi], 1 - hw), (heads[hi + 1], hw)):
            grid = np.asarray(self.grids[(phase, h, self.kv)], dtype=float)
            row = row + wh * ((1 - bw) * grid[bi] + bw * grid[bi + 1])
        return row * 1e-6

    def delta_s(self, phase: str, batch: float, length):
        """Seconds the DSA layers add to one step (a float, or an array for an array of
        lengths)."""
        import numpy as np

        at = np.interp(
            np.log(np.maximum(length, 1.0)), self._log_lengths[phase], self._row(phase, batch)
        )
        return self.layers * (float(at) if np.ndim(at) == 0 else at)


class _DsaEager:
    """SGLang's DSA decode module run outside a CUDA graph (a decode batch above the server's
    cuda_graph_max_bs): aiconfigurator's collector times such a batch eagerly, as the server
    runs it (kernel_tables/dsa_eager/, DsaEager), and the module then takes ~1.3-1.4 ms a layer
    on H100/H200/B200/B300 however few tokens each sequence holds, against 0.1-0.3 ms in a
    graph: the host dispatching its kernels one by one. excess_s is that eager time less the
    graph time at the same batch and length, read off the rows: each in the logarithms of
    heads (as _DsaModule) and tokens held (flat beyond a batch's timed lengths); the eager
    rows by batch in its logarithm, flat beyond their ends (a host-bound floor); the graph
    time linear in the sequences between and past the two largest graph-timed batches (as
    _DsaModule carries it past the largest), the smaller's time below it (an eager step of
    fewer sequences: SGLang's DP-attention ranks beside another's prefill)."""

    def __init__(self, rows: DsaEager, kv: str, heads: float, layers: int):
        self.rows, self.kv, self.heads, self.layers = rows, kv, heads, layers

    @classmethod
    def of(cls, spec: ModelSpec, fmt: KvFormat, tp: int, rows: DsaEager | None):
        """The eager module for a model with DSA layers and eager rows of its cache dtype."""
        layers = dsa_layers(spec)
        if rows is None or not layers:
            return None
        kv = "fp8" if fmt.name.startswith("fp8") else "bfloat16"
        if not any(k == kv for _, k in rows.eager):
            return None
        return cls(rows, kv, layers[0].num_q_heads / tp, len(layers))

    def excess_s(self, batch: float, length: float) -> float:
        """Seconds per layer the module takes outside a graph over inside one, at `batch`
        decodes holding `length` tokens each."""
        heads = sorted(h for h, k in self.rows.eager if k == self.kv)
        hi, hw = _log_position(heads, self.heads) if len(heads) > 1 else (0, 0.0)
        total = 0.0
        for h, weight in ((heads[hi], 1 - hw), (heads[min(hi + 1, len(heads) - 1)], hw)):
            eager = self.rows.eager[(h, self.kv)]
            graph = self.rows.graph[(h, self.kv)]
            batches = sorted(eager)
            bi, bw = _log_position(batches, batch) if len(batches) > 1 else (0, 0.0)
            eager_us = (1 - bw) * _length_us(eager[batches[bi]], length) + bw * _length_us(
                eager[batches[min(bi + 1, len(batches) - 1)]], length
            )
            small, large = sorted(graph)[-2:]
            small_us, large_us = _length_us(graph[small], length), _length_us(graph[large], length)
            # past the smaller batch, linear in the sequences; below it, the smaller's time
            graph_us = large_us + (max(batch, small) - large) * (large_us - small_us) / (
                large - small
            )
            total += weight * (eager_us - graph_us)
        return total * 1e-6


def _length_us(pairs: tuple, length: float) -> float:
    """Microseconds at `length` tokens held off ((tokens, us), ...) pairs: linear in the
    logarithm of the length, flat beyond the ends."""
    lengths = [x for x, _ in pairs]
    i, w = _log_position(lengths, max(length, 1.0))
    return (1 - w) * pairs[i][1] + w * pairs[min(i + 1, len(pairs) - 1)][1]


def dsa_layer_base_s(model: StepModel, phase: str, batch: int, length: int) -> float | None:
    """Seconds `model` charges one DSA layer before its DSA module's delta, at a module table's
    cell: `batch` decodes holding `length` tokens each ("decode"), or `batch` prompts of
    `length` tokens with none cached ("prefill"): the layer's MLA projections at the step's
    tokens from the GEMM table (its calls among the step's: dense_gemm_calls(dsa_module=)),
    its two absorbed BMMs (mla_bmm rows, else their floor), its attention as the step prices
    it without the delta (the MLA kernel rows at the top-k read, or the roofline). For a model
    whose MLA layers are all DSA layers (DeepSeek-V3.2, the tables' shape): scripts/
    derive_achieved.py --write-dsa subtracts it from SGLang's DSA module, so that a step adds
    the module less what it already charges. None: no module, or projections not timed."""
    dsa = model.dsa
    if dsa is None or model.gemm_grid is None or not model.dsa_projection_calls:
        return None
    tokens = batch if phase == "decode" else batch * length
    gemm_s = gemm_calls_s(model.gemm_grid, model.dsa_projection_calls, tokens, tokens)
    if gemm_s is None:
        return None
    mla_layers = _shape(model.spec).mla_layers
    bmms_s = (
        mla_bmm_calls_s(model.gemm_grid, model.mla_bmm_calls, "bf16", tokens)
        if model.mla_bmm_calls
        else None
    )
    bmms_s = model.mla_bmms_s if bmms_s is None else bmms_s
    bare = copy.copy(model)
    bare.dsa = None
    if phase == "decode":
        attention_s = bare._decode_attention(batch, float(batch * length), max, min)[0]
    else:
        attention_s = bare.prefill_chunks_attention_s(((length, 0),) * batch)
    return gemm_s + (bmms_s + attention_s) / mla_layers


def _shape_timed(attn, shape: dict) -> bool:
    """Whether a DSA layer has the attention shape the module tables ran (DsaGrids.shape)."""
    return bool(shape) and all(getattr(attn, field) == value for field, value in shape.items())


def _log_position(axis, value: float) -> tuple[int, float]:
    """(i, w): value between axis[i] and axis[i + 1] at log-fraction w, flat beyond the ends."""
    if value <= axis[0]:
        return 0, 0.0
    if value >= axis[-1]:
        return len(axis) - 2, 1.0
    i = next(i for i in range(len(axis) - 1) if value <= axis[i + 1])
    return i, math.log(value / axis[i]) / math.log(axis[i + 1] / axis[i])
