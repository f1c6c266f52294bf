"""What several plans share: the notes that travel with a model at a TP degree, the memory
budget's note, and the model's summary (anatomy, parameters, weights) that size, report and
models print."""

from kvplan.anatomy.model import CacheKind, ModelSpec, distinct_layers, kept_with
from kvplan.errors import KvplanError
from kvplan.notes import Note, note
from kvplan.record import NamedTuple


def model_notes(spec: ModelSpec, tp: int) -> list[Note]:
    """Notes that travel with every number computed for this model at this TP degree (kept
    per spec and TP: a comparison of GPU kinds asks for them at every layout)."""
    return list(kept_with(_MODEL_NOTES, spec, (tp,), lambda: tuple(_model_notes(spec, tp))))


_MODEL_NOTES: dict[tuple, tuple] = {}


def _model_notes(spec: ModelSpec, tp: int) -> list[Note]:
    notes = list(spec.notes)
    if tp > 1:
        for layer, _ in distinct_layers(spec.layers):  # in order, each kind of layer once
            attn = layer.attention
            if attn is not None and attn.kind is not CacheKind.MLA and attn.num_kv_heads < tp:
                notes.append(note("tp-kv-replicated", tp=tp, kv_heads=attn.num_kv_heads))
                break
        if spec.has_kind(CacheKind.MLA):
            notes.append(note("tp-mla-replicated", tp=tp))
        notes.append(note("tp-per-gpu", tp=tp))
    if spec.has_kind(CacheKind.STATE):
        notes.append(note("state-fixed"))
    if spec.has_kind(CacheKind.SLIDING):
        notes.append(note("sliding-held"))
    return notes


def checkpoint_kv_note(spec: ModelSpec, kv_format: str) -> Note | None:
    """Where a checkpoint states its own KV cache (ModelSpec.checkpoint_kv_cache) and a figure is
    sized at the model's dtype (`kv_format`, kvplan's name): the note that the engines take the
    checkpoint's cache for --kv-cache-dtype auto (by the engines' rules:
    engines.vllm.vllm_checkpoint_kv, engines.sglang.sglang_checkpoint_kv_from) and how to
    size it; None elsewhere. size, capacity, whatif and roofline."""
    from kvplan.engines.sglang import sglang_checkpoint_kv_from
    from kvplan.engines.vllm import vllm_checkpoint_kv

    stated = spec.checkpoint_kv_cache
    if stated is None or kv_format != spec.dtype:
        return None
    # the first release of each engine that takes it (None: that engine keeps the model dtype)
    vllm_taken = vllm_checkpoint_kv(spec)
    if stated == "nvfp4" and spec.has_kind(CacheKind.MLA):
        vllm_taken = None  # vLLM refuses an nvfp4 cache on MLA layers (checkpoint_kv_cache_dtype)
    sglang_patch = sglang_checkpoint_kv_from(spec)
    return note(
        "checkpoint-kv-cache-stated",
        kv_cache=stated,
        model_dtype=spec.dtype,
        vllm_from=vllm_taken[1] if vllm_taken else None,
        sglang_from=f"0.5.{sglang_patch}" if sglang_patch is not None else None,
    )


def budget_note(gpu, gpu_mem_util: float, reserve_bytes: float, reserve_given: bool) -> Note:
    """The capacity-budget note: where a GPU's KV pool comes from (capacity, whatif)."""
    return note(
        "capacity-budget",
        gpu=gpu.name,
        reported=bool(gpu.memory_reported_bytes),
        usable_memory_bytes=gpu.usable_memory_bytes,
        gpu_mem_util=gpu_mem_util,
        reserve_bytes=reserve_bytes,
        reserve_given=reserve_given,
    )


class AttentionSummary(NamedTuple):
    """The first attention layer's shape: layout MHA | GQA | MQA | MLA (None when attention-free)."""

    layout: str | None
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    mla_kv_lora_rank: int
    mla_rope_dim: int
    # layers whose cache is shaped otherwise: (kind, KV heads, head_dim), e.g. Gemma-4's wider
    # full-attention layers beside its sliding ones
    other_shapes: tuple[tuple[str, int, int], ...] = ()


def attention_summary(spec: ModelSpec) -> AttentionSummary:
    attn = spec.attention_layers()
    if not attn:
        return AttentionSummary(None, 0, 0, 0, 0, 0)
    a = attn[0]
    if a.kind is CacheKind.MLA:
        layout = "MLA"
    elif a.num_kv_heads == a.num_q_heads:
        layout = "MHA"
    else:
        layout = "MQA" if a.num_kv_heads == 1 else "GQA"
    others = []
    for b in attn:
        shape = (b.kind.value, b.num_kv_heads, b.head_dim)
        if (b.num_kv_heads, b.head_dim) != (a.num_kv_heads, a.head_dim) and shape not in others:
            others.append(shape)
    return AttentionSummary(
        layout,
        a.num_q_heads,
        a.num_kv_heads,
        a.head_dim,
        a.mla_kv_lora_rank,
        a.mla_rope_dim,
        tuple(others),
    )


class LayerGroupCount(NamedTuple):
    cache: str
    num_layers: int


def layer_groups(spec: ModelSpec) -> list[LayerGroupCount]:
    return [LayerGroupCount(label, n) for label, n in spec.layer_kind_counts().items()]


def require_cache(spec: ModelSpec, what: str) -> None:
    """Capacity questions need a per-sequence cache; a model without one gets a clear answer."""
    if not spec.attention_layers() and not spec.state_layers():
        raise KvplanError(
            f"{spec.name} keeps no per-sequence cache (no attention or recurrent layer): {what} "
            "is not limited by cache memory; kvplan size shows its weights, kvplan roofline its "
            "speed"
        )
