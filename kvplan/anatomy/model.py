"""A model as kvplan sees it: a list of layers, each holding at most one attention cache and at most
one fixed-size recurrent state, plus a parameter count broken into named parts.

Heterogeneous models are data: one loop over `layers` sizes every architecture.
The value types are NamedTuples: immutable, and cheap to define (the CLI's start-up budget).
"""

from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

from kvplan.dtypes import ELEMENT_BYTES, KvFormat
from kvplan.errors import KvplanError
from kvplan.notes import Note
from kvplan.record import NamedTuple

# Notes saying where a model's config came from (kvplan.inputs.sources)
SOURCE_NOTES = frozenset(("model-path", "quant-hf-file", "variant-resolved"))
# The notes that say the config's weights format was not read (its quantization_config unsized,
# or none where the name says quantized): an engine's result carries them where its weights come
# from the config (kvplan.engines.request.config_weights_notes)
WEIGHTS_READ_NOTES = frozenset(("quant-unread", "quant-name-only"))


class CacheKind(str, Enum):
    """What one layer group caches per sequence: KV for every token (full, or MLA's one latent),
    KV for at most `window` tokens (sliding, chunked), or a fixed-size recurrent state."""

    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"
    MLA = "mla"
    STATE = "state"

    @property
    def windowed(self) -> bool:
        return self is CacheKind.SLIDING or self is CacheKind.CHUNKED  # members are singletons


class StateKind(str, Enum):
    MAMBA1 = "mamba1"
    MAMBA2 = "mamba2"
    GATED_DELTANET = "gated_deltanet"
    LIGHTNING = "lightning"  # MiniMax-style linear attention: heads x d x d, no conv
    SHORT_CONV = "short_conv"  # LFM2's gated short convolution: a conv state only
    KDA = "kda"  # Kimi Delta Attention: Gated DeltaNet's shapes, a per-channel decay


STATE_LABELS = {
    StateKind.MAMBA1: "Mamba-1 state",
    StateKind.MAMBA2: "Mamba-2 state",
    StateKind.GATED_DELTANET: "Gated DeltaNet state",
    StateKind.LIGHTNING: "linear-attention state",
    StateKind.SHORT_CONV: "convolution state",
    StateKind.KDA: "KDA state",
}


class Attention(NamedTuple):
    """One layer's attention, as far as the cache and the FLOPs are concerned.

    kind: FULL | SLIDING (keeps the last `window` tokens) | CHUNKED (keeps up to `window` tokens
    of the current chunk) | MLA (one latent of width `head_dim`, no separate V).
    num_kv_heads / head_dim / head_dim_v: what the cache stores per token (MLA: 1 / latent / 0).
    qk_head_dim / v_head_dim: per-query-head widths used by the attention FLOPs.
    """

    kind: CacheKind
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    qk_head_dim: int
    v_head_dim: int
    window: int | None = None
    mla_kv_lora_rank: int = 0
    mla_rope_dim: int = 0
    # A sparse-attention indexer's key cache (DeepSeek-V3.2 DSA): one `indexer_head_dim` vector
    # per token per layer, beside the MLA latent (0: none).
    indexer_head_dim: int = 0
    indexer_num_heads: int = 0  # the indexer's query heads (its weights, not its cache)
    # DSA's top-k (index_topk): the keys its indexer (or, on a layer that shares an earlier
    # layer's picks, GLM-5.3's, that layer's) picks for the MLA to attend, all a decode reads of
    # the latents; a prefill that ends within it runs dense and skips the indexer (0: not DSA)
    indexer_topk: int = 0
    # MiniMax-M3's block-sparse layers: per query token the indexer picks `sparse_topk_blocks`
    # blocks of `sparse_block_size` tokens, the query's own (local) block always among them, and
    # the attention reads and attends those alone (0: not block-sparse)
    sparse_block_size: int = 0
    sparse_topk_blocks: int = 0
    mla_q_lora_rank: int = 0  # MLA query down-projection width (0: none, queries from hidden)
    shared_kv_proj: bool = False  # V is K's projection (no v_proj weights; the cache holds both)
    sinks: bool = False  # one learned sink logit per query head (gpt-oss, MiMo-V2 sliding layers)
    # q and k RMSNorm'd over all heads, not per head (MiniMax-M2): under attention TP each rank
    # holds a share of the heads, so every layer all-reduces the partial sums of squares, two
    # fp32 per token (comm.qk_norm_allreduce_bytes), and launches the sum and the apply kernels
    qk_norm_allreduce: bool = False
    # K and V are one tensor, stored once (DeepSeek-V4's shared-KV MQA: `head_dim` per token)
    kv_one_copy: bool = False
    # DeepSeek-V4 compressed attention: beside its sliding window the layer keeps one compressed
    # entry (`head_dim` wide) per `compress_ratio` tokens, and, on the CSA layers, the indexer's
    # compressed key (`compressed_indexer_dim` wide) at the same ratio (0: not compressed)
    compress_ratio: int = 0
    compressed_indexer_dim: int = 0
    # the compressed entries a CSA layer's query attends, picked by its indexer (`index_topk`;
    # 0: every entry, as an HCA layer attends)
    compressed_topk: int = 0
    # DeepSeek-V4: the RoPE part of `head_dim` (qk_rope_head_dim), which the engines store in bf16
    # beside the fp8 NoPE part of a row (0: not stated)
    compressed_rope_dim: int = 0
    # DeepSeek-V4's grouped output projection (o_groups: wo_a holds one block per group, which
    # vLLM splits over the TP ranks; 0: not grouped)
    output_groups: int = 0

    @property
    def gqa_indexer(self) -> bool:
        """A key-only indexer cache beside plain K and V (MiniMax-M3), not DSA's beside MLA."""
        return bool(self.indexer_head_dim) and self.kind is not CacheKind.MLA

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one tensor-parallel rank stores: max(1, Hkv // tp); MLA's latent is replicated."""
        if self.kind is CacheKind.MLA:
            return 1
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token(self, fmt: KvFormat, tp: int = 1) -> int:
        """Bytes one token occupies in this layer's cache on one rank (K and V, or the MLA latent)."""
        if self.kind is CacheKind.MLA:
            return fmt.head_vector_bytes(self.head_dim) + self.indexer_bytes_per_token(fmt)
        heads = self.kv_heads_per_rank(tp)
        if self.kv_one_copy:
            return heads * fmt.head_vector_bytes(self.head_dim)
        return heads * (
            fmt.head_vector_bytes(self.head_dim) + fmt.head_vector_bytes(self.head_dim_v)
        ) + self.indexer_bytes_per_token(fmt)  # MiniMax-M3: a key-only indexer beside K, V

    def compressed_bytes_per_entry(self, fmt: KvFormat) -> int:
        """One compressed entry of a DeepSeek-V4 compressed layer: the compressed KV vector plus
        the indexer's compressed key where the layer has one (0 for an uncompressed layer)."""
        return sum(self.compressed_entry_parts(fmt))

    def compressed_entry_parts(self, fmt: KvFormat) -> tuple[int, int]:
        """(the compressed KV vector's bytes, the indexer's compressed key's) of one entry:
        compressed_bytes_per_entry's two parts, which a decode reads in different numbers."""
        if not self.compress_ratio:
            return 0, 0
        indexer = self.compressed_indexer_dim
        return fmt.head_vector_bytes(self.head_dim), (
            fmt.head_vector_bytes(indexer) if indexer else 0
        )

    def compressed_entries(self, context_len: int) -> int:
        """Compressed entries one sequence holds at `context_len`: floor(s / ratio) (the tokens
        after the last full window wait in the compressor's buffer)."""
        return context_len // self.compress_ratio if self.compress_ratio else 0

    def indexer_bytes_per_token(self, fmt: KvFormat) -> int:
        """The indexer's key vector for one token, in the cache's format (0 without an indexer)."""
        return fmt.head_vector_bytes(self.indexer_head_dim) if self.indexer_head_dim else 0

    def tokens_held(self, context_len: int) -> int:
        """Tokens this layer keeps for one sequence at `context_len`: s, or min(s, window)."""
        if self.kind.windowed:
            assert self.window is not None, "a windowed kind has a window"
            return min(context_len, self.window)
        return context_len

    def label(self) -> str:
        if self.compress_ratio:
            indexer = (
                f" + indexer {self.compressed_indexer_dim}" if self.compressed_indexer_dim else ""
            )
            return f"sliding window {self.window:,} + 1/{self.compress_ratio} compressed{indexer}"
        if self.kind is CacheKind.SLIDING:
            return f"sliding window {self.window:,}"
        if self.kind is CacheKind.CHUNKED:
            return f"chunked attention {self.window:,}"
        if self.kind is CacheKind.MLA:
            indexer = f" + indexer {self.indexer_head_dim}" if self.indexer_head_dim else ""
            return f"MLA latent {self.mla_kv_lora_rank}+{self.mla_rope_dim}{indexer}"
        if self.indexer_head_dim:
            return f"full attention + indexer key {self.indexer_head_dim}"
        return "full attention"


class State(NamedTuple):
    """A fixed-size recurrent state per sequence (Mamba-1, Mamba-2, Gated DeltaNet, lightning).

    Shapes follow vLLM's MambaStateShapeCalculator: the conv state keeps (conv_kernel - 1) columns.
    mamba1: conv (k-1) x intermediate, ssm intermediate x state_size.
    mamba2: conv (k-1) x (intermediate + 2*groups*state_size), ssm heads x head_dim x state_size.
    gated_deltanet: conv (k-1) x (2*key_heads*key_dim + value_heads*value_dim),
                    ssm value_heads x value_dim x key_dim.
    short_conv: conv (k-1) x intermediate (LFM2: the hidden size), no ssm state.
    kda: as gated_deltanet with key heads = value heads (vLLM's kda_state_shape).
    """

    kind: StateKind
    conv_kernel: int
    intermediate: int = 0
    state_size: int = 0
    num_heads: int = 0
    head_dim: int = 0
    num_groups: int = 0
    key_heads: int = 0
    key_dim: int = 0
    conv_dtype: str = "bf16"
    ssm_dtype: str = "bf16"
    # the config field that named ssm_dtype (mamba_ssm_cache_dtype, mamba_ssm_dtype), "" when
    # none did and ssm_dtype is the model dtype: engines honour a field by architecture
    ssm_dtype_field: str = ""

    def elements(self, tp: int = 1) -> tuple[int, int]:
        """(conv elements, ssm elements) one rank stores for one sequence."""
        taps = self.conv_kernel - 1
        if self.kind is StateKind.MAMBA1:
            inner = self.intermediate // tp
            return taps * inner, inner * self.state_size
        if self.kind is StateKind.MAMBA2:
            groups = self.num_groups
            if groups % tp:  # vLLM replicates groups up to a multiple of tp
                groups = groups + (tp - groups % tp)
            conv = taps * (self.intermediate // tp + 2 * (groups // tp) * self.state_size)
            return conv, (self.num_heads // tp) * self.head_dim * self.state_size
        if self.kind is StateKind.GATED_DELTANET or self.kind is StateKind.KDA:
            conv = taps * (2 * self.key_heads * self.key_dim + self.num_heads * self.head_dim) // tp
            return conv, (self.num_heads // tp) * self.head_dim * self.key_dim
        if self.kind is StateKind.LIGHTNING:
            return 0, (self.num_heads // tp) * self.head_dim * self.key_dim
        if self.kind is StateKind.SHORT_CONV:
            return taps * (self.intermediate // tp), 0
        raise KvplanError(f"unknown state kind {self.kind!r}")

    def bytes_per_sequence(self, tp: int = 1) -> int:
        conv, ssm = self.elements(tp)
        return conv * ELEMENT_BYTES[self.conv_dtype] + ssm * ELEMENT_BYTES[self.ssm_dtype]

    def held_in(self, dtypes: tuple[str, str] | None) -> "State":
        """This state as an engine keeps it: `dtypes` (conv, SSM) the engine's own (SGLang's
        bf16 and fp32, llama.cpp's f32 r_l and s_l, vLLM's by architecture and release:
        engines.vllm.state_dtypes), None as the spec holds it (the config's
        mamba_ssm_cache_dtype / mamba_ssm_dtype, else the model dtype; a GGUF's f32)."""
        if dtypes is None or dtypes == (self.conv_dtype, self.ssm_dtype):
            return self
        return self._replace(conv_dtype=dtypes[0], ssm_dtype=dtypes[1])

    def split_heads(self) -> int:
        """The head count tensor parallelism divides."""
        if self.kind in (StateKind.MAMBA1, StateKind.SHORT_CONV):
            return self.intermediate
        return self.num_heads

    def label(self) -> str:
        return STATE_LABELS[self.kind]


class Layer(NamedTuple):
    attention: Attention | None = None
    state: State | None = None
    # this layer's parameters by part (attention, mlp, experts, shared_experts, router, mixer,
    # norms): what a pipeline stage or a truncated model holds
    params: tuple[tuple[str, int], ...] = ()

    @property
    def cache_label(self) -> str:
        parts = [c.label() for c in (self.attention, self.state) if c is not None]
        return " + ".join(parts) if parts else "no cache"


class MoE(NamedTuple):
    """Routed experts: `num_layers` MoE layers of `num_experts`, `top_k` used per token, each
    expert an MLP of width `expert_intermediate_size` as the config states it."""

    num_experts: int
    top_k: int
    params_per_expert: int
    num_layers: int
    expert_intermediate_size: int = 0
    shared_intermediate_size: int = 0  # all shared experts of one layer together (0: none)
    # vLLM's Kimi-K3 MoE raises each TP rank's expert width to this (its config's
    # min_moe_intermediate_per_partition, 256 unless stated) when TP > 1 without expert
    # parallelism (0: no such floor)
    tp_min_intermediate: int = 0

    def expected_experts_touched(self, batch_size: int) -> float:
        """Distinct experts a batch of tokens touches per MoE layer under uniform routing:
        E * (1 - (1 - k/E)^B)."""
        e, k = self.num_experts, self.top_k
        return e * (1.0 - (1.0 - k / e) ** batch_size)


class PositionKeys(NamedTuple):
    """What a config states about its longest sequence, for the engines' own limits
    (kvplan.engines.max_len): every length key of the language model's config, with its config
    class's default for max_position_embeddings where it states none, and its rope scaling."""

    lengths: tuple[tuple[str, int], ...] = ()  # (key, tokens), keys the config states
    # (rope_type, factor, original_max_position_embeddings) of each rope parameter set: one for
    # rope_scaling, one per layer type for transformers 5's nested rope_parameters
    rope: tuple[tuple[str, float | None, int | None], ...] = ()
    rope_nested: bool = False


class StoredWeights(NamedTuple):
    """Weights as a model file stores them, read from its headers and never its data
    (safetensors headers, a GGUF's tensor table): exact bytes, each tensor in its own type with
    its scales."""

    text_bytes: int  # the language model as engines load it
    vision_bytes: int = 0  # vision tower and projector
    skipped_bytes: int = 0  # multi-token-prediction layers and the like, not loaded by default
    num_tensors: int = 0
    type_bytes: dict[str, int] = {}  # bytes by stored type (BF16, F8_E4M3, Q4_K, ...)
    source: str = ""
    file_type: str = ""  # a GGUF's quantization mix as llama.cpp names it (Q4_K_M, ...)
    part_bytes: dict[str, int] = {}  # by part, where the tensor names tell (a GGUF)
    layer_bytes: tuple[int, ...] = ()  # block i's tensors (a GGUF)

    @property
    def total_bytes(self) -> int:
        return self.text_bytes


# The parameter parts (ModelSpec.param_parts keys) a quantized checkpoint quantizes unless its
# config narrows them (quantized_parts): the linear layers; embeddings, lm_head, norms and routers
# stay in the model dtype.
QUANTIZABLE_PARTS = (
    "attention",
    "mlp",
    "experts",
    "shared_experts",
    "mixer",
    "expert_projections",
    "shared_blocks",
)


class ModelSpec(NamedTuple):
    """Everything kvplan derives from a config.json: layers, parameters, dtypes, notes."""

    name: str
    model_type: str
    family: str
    hidden_size: int
    vocab_size: int
    layers: tuple[Layer, ...]
    param_parts: dict[str, int]
    dtype: str  # model dtype name: bf16, fp16, fp32
    moe: MoE | None = None
    tied_embeddings: bool = False
    max_position_embeddings: int | None = None
    # The checkpoint's weights format from its quantization_config (a kvplan weights dtype name:
    # fp8, int4-g32-sym, nvfp4, mxfp4, ...) and the parts it covers (None: the format's default)
    weights_quantization: str | None = None
    # its quant_method where the engines' kernels depend on it (mxfp4: "mxfp4", gpt-oss's, or
    # "compressed-tensors", Kimi-K3's, which vLLM does not pad); None when not read
    weights_method: str | None = None
    # The KV cache format the checkpoint's quantization_config states (a ModelOpt
    # kv_cache_scheme / kv_cache_quant_algo: "fp8", "nvfp4"; a compressed-tensors static
    # per-tensor kv_cache_scheme: "fp8"); None where it states none
    checkpoint_kv_cache: str | None = None
    # the config that states it (inputs.quantization.CHECKPOINT_KV_METHODS), which decides
    # which engine release takes it for --kv-cache-dtype auto
    checkpoint_kv_method: str | None = None
    vision_params: int = 0  # excluded from the counts; engines load it
    # (layers, hidden size) of the config's vision_config, as engines read it; None without one
    vision_tower: tuple[int, int] | None = None
    notes: tuple[Note, ...] = ()
    # The dense MLP's width as the config states it (None when every layer is MoE or has none).
    intermediate_size: int | None = None
    # Where the config came from: the Hugging Face id engines load it by (None for a local file).
    hf_id: str | None = None
    source: str | None = None
    quantized_parts: tuple[str, ...] | None = None
    # The weights as the model file stores them (kvplan.inputs.checkpoint, kvplan.inputs.gguf)
    stored: StoredWeights | None = None
    # The model_type the checkpoint's config.json writes at its top where it differs from the
    # layers' (kimi_k2 and kimi_k25, whose layers are read as deepseek_v3): engines key paths
    # that follow the checkpoint rather than its layers on it (its tokenizer, say)
    config_model_type: str | None = None
    # The architecture the checkpoint's config.json names first (architectures[0]; None where
    # it names none, a GGUF): the class engines look their own model up by
    config_architecture: str | None = None
    # Distinct rotary tables (positions, rotary_dim) engines precompute and keep on every rank.
    rope_tables: tuple[tuple[int, int], ...] = ()
    # The length keys and rope scaling engines derive their longest request from (None: only
    # max_position_embeddings is known, a GGUF's context_length)
    positions: PositionKeys | None = None

    @property
    def checkpoint_model_type(self) -> str:
        """The model_type the checkpoint's config.json writes (config_model_type where it
        differs from the layers', else model_type): what engines key their own model on."""
        return self.config_model_type or self.model_type

    @property
    def source_notes(self) -> tuple[Note, ...]:
        """The notes that say where the config came from (a local path read before a name of the
        same spelling, a variant resolved to a bundled config): every result carries them."""
        return tuple(n for n in self.notes if n.id in SOURCE_NOTES)

    # --- parameters -------------------------------------------------------------------------
    @property
    def params_total(self) -> int:
        return sum(self.param_parts.values())

    @property
    def params_active(self) -> int:
        """Parameters used per token: routed experts count k/E; everything else in full."""
        if self.moe is None:
            return self.params_total
        inactive = (self.moe.num_experts - self.moe.top_k) * self.moe.params_per_expert
        return self.params_total - inactive * self.moe.num_layers

    @property
    def embedding_lookup_params(self) -> int:
        """Parameters used only as a table lookup (the input embedding, when not tied)."""
        return 0 if self.tied_embeddings else self.param_parts.get("embedding", 0)

    @property
    def head_params(self) -> int:
        """Parameters of the output head (the LM head, or the tied embedding it reuses)."""
        if "lm_head" in self.param_parts:
            return self.param_parts["lm_head"]
        return self.param_parts.get("embedding", 0) if self.tied_embeddings else 0

    # --- cache geometry ---------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def attention_layers(self) -> list[Attention]:
        layers = self.layers
        kept = _ATTENTION.get(id(layers))
        if kept is None or kept[0] is not layers:
            kept = (
                layers,
                tuple(layer.attention for layer in layers if layer.attention is not None),
            )
            _keep(_ATTENTION, id(layers), kept)
        return list(kept[1])

    def state_layers(self) -> list[State]:
        return [layer.state for layer in self.layers if layer.state is not None]

    def has_kind(self, kind: CacheKind) -> bool:
        if kind is CacheKind.STATE:
            return any(layer.state is not None for layer, _ in distinct_layers(self.layers))
        return any(
            layer.attention is not None and layer.attention.kind is kind
            for layer, _ in distinct_layers(self.layers)
        )

    def layer_kind_counts(self) -> Counter:
        return Counter(layer.cache_label for layer in self.layers)

    @property
    def num_q_heads(self) -> int:
        attn = self.attention_layers()
        return attn[0].num_q_heads if attn else 0

    @property
    def num_kv_heads(self) -> int:
        attn = [a for a in self.attention_layers() if a.kind is not CacheKind.MLA]
        return attn[0].num_kv_heads if attn else (1 if self.attention_layers() else 0)

    @property
    def head_dim(self) -> int:
        attn = self.attention_layers()
        return attn[0].head_dim if attn else 0

    def check_tp(self, tp: int) -> None:
        """Tensor parallelism must divide the query heads, and divide or be divided by the KV heads."""
        if tp < 1 or tp > 1024:
            raise KvplanError(f"--tp {tp} must be between 1 and 1024")
        # each distinct layer once, in order of first appearance: the same first complaint
        distinct = distinct_layers(self.layers)
        for layer, _ in distinct:
            attn = layer.attention
            if attn is None:
                continue
            if attn.num_q_heads % tp:
                raise KvplanError(
                    f"--tp {tp} does not divide the {attn.num_q_heads} query heads of {self.name}"
                )
            if attn.kind is not CacheKind.MLA and attn.num_kv_heads % tp and tp % attn.num_kv_heads:
                raise KvplanError(
                    f"--tp {tp} neither divides nor is a multiple of the {attn.num_kv_heads} KV heads"
                    f" of {self.name}"
                )
        for layer, _ in distinct:
            state = layer.state
            if state is None:
                continue
            if state.split_heads() % tp:
                raise KvplanError(
                    f"--tp {tp} does not divide the {state.split_heads()} state heads of {self.name}"
                )

    def mha_equivalent_bytes_per_token(self, fmt: KvFormat) -> int:
        """What the attention layers would store per token with one KV head per query head
        (the multi-head baseline that GQA, MQA and MLA save against); windows ignored."""
        total = 0
        for attn in self.attention_layers():
            total += attn.num_q_heads * (
                fmt.head_vector_bytes(attn.qk_head_dim) + fmt.head_vector_bytes(attn.v_head_dim)
            )
        return total


# Planning asks about one stack of layers thousands of times (every layout, GPU and context of
# `capacity --gpu all`). The answers below are kept per stack, with the object they came from
# (immutable; holding it keeps its id from being reused), the oldest dropped past KEPT. KEPT
# holds one comparison's working set: a model's pipeline stages at PP 2..16 are 135 stacks, asked
# of at each node's TP (1 to 8) and KV format; at 256 the oldest were dropped and rebuilt over
# and over (about 450 rebuilds of the cache groups in `capacity llama-3.1-8b --gpu all`).
KEPT = 4096
T = TypeVar("T")
_DISTINCT: dict[int, tuple] = {}
_ATTENTION: dict[int, tuple] = {}
_STAGES: dict[tuple, tuple] = {}


def distinct_layers(layers: tuple[Layer, ...]) -> tuple[tuple[Layer, int], ...]:
    """(layer, how many layers it is) for each distinct layer object, in order of first
    appearance: the builder shares one object among the layers of a kind, so a deep stack is a
    few pairs."""
    kept = _DISTINCT.get(id(layers))
    if kept is not None and kept[0] is layers:
        return kept[1]
    counts: dict[int, list] = {}
    for layer in layers:
        seen = counts.get(id(layer))
        if seen is None:
            counts[id(layer)] = [layer, 1]
        else:
            seen[1] += 1
    pairs = tuple((layer, count) for layer, count in counts.values())
    _keep(_DISTINCT, id(layers), (layers, pairs))
    return pairs


def _keep(cache: dict, key: object, value: tuple) -> None:
    if len(cache) >= KEPT:
        del cache[next(iter(cache))]
    cache[key] = value


def kept_with(cache: dict, holder: object, key: tuple, build: Callable[[], T]) -> T:
    """build()'s answer for `holder` (an immutable input, told by its identity) and `key` (the
    other immutable inputs), kept in `cache` with the holder (its id is not reused while it is
    held), the oldest dropped past KEPT."""
    kept = cache.get((id(holder), *key))
    if kept is None or kept[0] is not holder:
        kept = (holder, build())
        _keep(cache, (id(holder), *key), kept)
    return kept[1]


def pp_stages(spec: ModelSpec, pp: int) -> list[ModelSpec]:
    """Split the layers into `pp` pipeline stages the way vLLM does (get_pp_indices): an even
    share each, the remainder given to the stages just before the last."""
    kept = _STAGES.get((id(spec), pp))
    if kept is not None and kept[0] is spec:
        return list(kept[1])
    stages = _split_stages(spec, pp)
    _keep(_STAGES, (id(spec), pp), (spec, tuple(stages)))
    return stages


def _split_stages(spec: ModelSpec, pp: int) -> list[ModelSpec]:
    if pp < 1 or pp > spec.num_layers:
        raise KvplanError(f"--pp {pp} must be between 1 and the {spec.num_layers} layers")
    sizes = [spec.num_layers // pp] * pp
    for i in range(2, spec.num_layers % pp + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(spec._replace(layers=spec.layers[start : start + size]))
        start += size
    return stages
