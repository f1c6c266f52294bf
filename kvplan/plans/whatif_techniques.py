"""The techniques `kvplan whatif` prices, as data: how each is typed, the terms of the formula it
moves, and what it does to a model (`Scenario`): what is stored, what a decode step reads.

    KV bytes = 2 x layers x kv_heads x head_dim x seq_len x bytes_per_value x batch

Techniques on different terms multiply; techniques on the same term do not stack (`stack`: the
stronger one counts). Three change no term of the product: paging removes allocation waste, prefix
sharing removes duplicate bytes, sparse reads remove read volume; speculative decoding adds a
second cache. The scheduling group changes no byte at all.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan.anatomy.model import Attention, CacheKind, ModelSpec, State, StateKind
from kvplan.dtypes import SUB_BYTE_BITS, KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import (
    kv_bytes_per_sequence,
    kv_read_bytes_per_decode,
    state_bytes_per_sequence,
)
from kvplan.formulas.techniques import expected_tokens_per_round, kept_tokens
from kvplan.inputs.options import parse_tokens
from kvplan.record import NamedTuple

# The terms a technique can move: the six of the product, plus what changes no term of it.
TERMS = (
    "bytes_per_value",
    "layers",
    "kv_heads",
    "head_dim",
    "seq_len",
    "duplicates",  # prefix sharing: one copy, many requests
    "allocation",  # paging: the slack of a contiguous reservation
    "reads",  # sparse reads: bytes touched per step, not stored
    "draft",  # speculative decoding adds a second cache
)

# kind -> (terms it moves, lossless)
KINDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "dtype": (("bytes_per_value",), False),
    "cla": (("layers",), False),
    "gqa": (("kv_heads",), False),
    "prune": (("kv_heads",), False),
    "lowrank": (("head_dim",), False),
    "mla": (("kv_heads", "head_dim"), False),  # a latent replaces kv_heads x head_dim
    "window": (("seq_len",), False),
    "cyclic": (("seq_len",), False),
    "evict": (("seq_len",), False),
    "merge": (("seq_len",), False),
    "recurrent": (("seq_len",), False),
    "prefix": (("duplicates",), True),
    "paged": (("allocation",), True),
    "sparse_read": (("reads",), False),
    "spec": (("draft",), True),  # verification keeps the target's distribution
}

# The scheduling group: same bytes, better occupancy. No term moves; kvplan simulate measures them.
SCHEDULING = ("continuous-batching", "chunked-prefill", "preemption", "cache-aware-routing")

DEFAULT_MLA = (512, 64)  # DeepSeek-V2/V3: kv_lora_rank 512, decoupled RoPE key 64
# A recurrent layer's state (recurrent=F): Nemotron-H's Mamba-2 shape at the model's width.
RECURRENT_HEAD_DIM, RECURRENT_STATE_SIZE, RECURRENT_GROUPS, RECURRENT_CONV_KERNEL = 64, 256, 8, 4
# paged without N: sequences hold 30% of --ctx, the middle of the 20-40% utilisation the chapter
# measures under contiguous allocation.
PAGED_MEAN_FRACTION = 0.3
# A speculative draft is at most this fraction of the target's parameters.
DRAFT_MAX_FRACTION = 0.25

SYNTAX = (
    "fp8, int8, int4, int3, int2, claN, gqa=N, mqa, prune=N, lowrank=R, mla=LATENT+ROPE, "
    "window=N, cyclic=N, evict=F, merge=F, recurrent=F, prefix=N, paged[=N], sparse-read=F, "
    "spec[=DRAFT], or a scheduling technique (" + ", ".join(SCHEDULING) + ")"
)


class Technique(NamedTuple):
    name: str  # as typed: fp8, cla2, window=32000, mla=512+64, spec=llama-3.1-8b
    kind: str  # a key of KINDS
    value: Any
    terms: tuple[str, ...]
    lossless: bool


class NotApplicable(KvplanError):
    """A technique that does not apply to this model (listed as skipped, with the reason)."""


def _technique(name: str, kind: str, value: Any) -> Technique:
    terms, lossless = KINDS[kind]
    return Technique(name, kind, value, terms, lossless)


def parse_technique(text: str) -> Technique:
    """One technique as typed (no '+'; `mla=512+64` arrives joined back by `parse_combination`)."""
    raw = text.strip()
    key, _, arg = raw.partition("=")
    key = key.strip().lower()
    name = raw if key == "spec" else raw.lower()
    if (key in SUB_BYTE_BITS or key in ("fp8", "int8")) and not arg:
        return _technique(name, "dtype", key)
    if key.startswith("cla"):
        share = key[3:] or arg
        if not _digits(share) or not 2 <= int(share) <= 1024:
            raise KvplanError(f"--apply {text!r}: CLA needs a sharing factor of 2 or more (cla2)")
        return _technique(name, "cla", int(share))
    if key == "mqa" and not arg:
        return _technique(name, "gqa", 1)
    if key in ("gqa", "prune"):
        return _technique(name, key, _whole(arg, text))
    if key == "lowrank":
        return _technique(name, "lowrank", _rank(arg, text))
    if key == "mla":
        return _technique(name, "mla", _latent(arg, text))
    if key in ("window", "cyclic", "prefix"):
        return _technique(name, key, parse_tokens(arg, what=key))
    if key in ("evict", "merge", "recurrent", "sparse-read"):
        return _technique(name, key.replace("-", "_"), _fraction(arg, text))
    if key == "paged":
        return _technique(name, "paged", parse_tokens(arg, what="paged") if arg else None)
    if key == "spec":
        return _technique(name, "spec", arg.strip() or None)
    raise KvplanError(
        f"--apply {text[:60]!r}: unknown technique ({SYNTAX}; join with + to combine)"
    )


def parse_combination(text: str) -> list[str]:
    """Split `a+b+c` into techniques, keeping `mla=512+64` whole."""
    parts: list[str] = []
    pieces = text.split("+")
    if any(not p.strip() for p in pieces):
        raise KvplanError(
            f"--apply {text[:60]!r}: an empty technique between '+' signs (fp8+cla2, mla=512+64)"
        )
    for piece in pieces:
        piece = piece.strip()
        if (
            _digits(piece)
            and parts
            and parts[-1].lower().startswith("mla=")
            and "+" not in parts[-1]
        ):
            parts[-1] += "+" + piece
        elif piece:
            parts.append(piece)
    if not parts:
        raise KvplanError(f"--apply {text!r}: empty technique")
    return parts


def _digits(text: str) -> bool:
    """A short run of ASCII digits (int() of thousands of digits is refused by Python itself)."""
    return text.isascii() and text.isdigit() and len(text) <= 8


def _whole(arg: str, text: str) -> int:
    if not _digits(arg) or not 1 <= int(arg) <= 1 << 20:
        raise KvplanError(f"--apply {text!r}: needs a positive whole number")
    return int(arg)


def _fraction(arg: str, text: str) -> float:
    from kvplan.inputs.options import ascii_number

    try:
        value = float(ascii_number(arg, f"--apply {text[:40]}:"))
    except ValueError:
        raise KvplanError(f"--apply {text!r}: needs a fraction between 0 and 1") from None
    if not 0 < value < 1:
        raise KvplanError(f"--apply {text!r}: needs a fraction between 0 and 1")
    return value


def _rank(arg: str, text: str) -> float | int:
    """lowrank=R: a fraction of head_dim (0 < R < 1) or a rank per head (a whole number)."""
    from kvplan.inputs.options import ascii_number

    if _digits(arg):
        return _whole(arg, text)
    try:
        value = float(ascii_number(arg, f"--apply {text[:40]}:"))
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise KvplanError(
            f"--apply {text!r}: lowrank needs a fraction of head_dim (0.5) or a rank (64)"
        )
    return value


def _latent(arg: str, text: str) -> tuple[int, int]:
    if not arg:
        return DEFAULT_MLA
    latent, _, rope = arg.partition("+")
    if not _digits(latent) or not (_digits(rope) or not rope):
        raise KvplanError(f"--apply {text!r}: MLA needs LATENT+ROPE widths (mla=512+64)")
    values = int(latent), int(rope or 0)
    if not 1 <= values[0] <= 1 << 16 or values[1] > 1 << 16:
        raise KvplanError(f"--apply {text!r}: MLA widths must be between 1 and 65536")
    return values


# ---- scenarios: a model, a format and token counts, for storing and for reading -------------
class Scenario(NamedTuple):
    store: ModelSpec  # what is stored (CLA drops the shared layers' caches)
    read: ModelSpec  # what a decode step reads and computes over (every layer, under CLA)
    fmt: KvFormat
    store_tokens: int  # the context the stored cache is sized at (a cyclic buffer: at least W)
    read_tokens: int  # the context a decode step reads (sparse reads: F of it)
    prefix_tokens: int = 0  # stored once for the whole batch
    # paged=N: the tokens sequences really hold (capacity is paged at N) and the contiguous
    # reservation (--ctx) it replaces; every other figure is the baseline's
    held_tokens: int | None = None
    reservation_tokens: int | None = None
    lowrank: bool = False  # keys rebuilt from a low-rank cache (reconstruction FLOPs)
    draft: ModelSpec | None = None  # speculative decoding
    draft_tokens: int = 0  # k speculative entries per sequence
    acceptance: float = 0.0  # probability that the target accepts one drafted token


def _replace_attention(spec: ModelSpec, fn) -> tuple[ModelSpec, int]:
    """Apply `fn(attention) -> attention | None (unchanged)` to every attention layer; count the
    layers it changed."""
    layers, changed = list(spec.layers), 0
    for i, layer in enumerate(layers):
        if layer.attention is not None:
            new = fn(layer.attention)
            if new is not None and new != layer.attention:
                layers[i] = layer._replace(attention=new)
                changed += 1
    return spec._replace(layers=tuple(layers)), changed


def _fewer_heads(t: Technique):
    def fn(a: Attention):
        if a.kind is CacheKind.MLA or a.num_kv_heads <= t.value:
            return None
        if t.kind == "gqa" and a.num_q_heads % t.value:
            raise NotApplicable(f"{t.name}: {t.value} KV heads do not divide {a.num_q_heads} heads")
        return a._replace(num_kv_heads=t.value)

    return fn


def _lowrank(t: Technique):
    def fn(a: Attention):
        if a.kind is CacheKind.MLA:
            return None
        if isinstance(t.value, float):
            k_rank, v_rank = (max(1, round(t.value * d)) for d in (a.head_dim, a.head_dim_v))
        else:
            k_rank = v_rank = t.value
        if k_rank >= a.head_dim:
            raise NotApplicable(f"{t.name}: rank {k_rank} is not below head_dim {a.head_dim}")
        return a._replace(head_dim=k_rank, head_dim_v=min(v_rank, a.head_dim_v))

    return fn


def _mla(t: Technique):
    latent, rope = t.value

    def fn(a: Attention):
        if a.kind is not CacheKind.FULL:  # MLA keeps its latent; windows already bound theirs
            return None
        return Attention(
            CacheKind.MLA,
            a.num_q_heads,
            1,
            latent + rope,
            0,
            a.qk_head_dim,
            a.v_head_dim,
            mla_kv_lora_rank=latent,
            mla_rope_dim=rope,
        )

    return fn


def _window(t: Technique, kind: CacheKind):
    def fn(a: Attention):
        if a.kind is CacheKind.MLA or (a.window is not None and a.window <= t.value):
            return None  # MLA keeps its latent; a narrower window already caps the layer
        new_kind = kind if a.kind is not CacheKind.CHUNKED else CacheKind.CHUNKED
        return a._replace(kind=new_kind, window=t.value)

    return fn


def _recurrent(spec: ModelSpec, fraction: float) -> ModelSpec:
    """Replace `fraction` of the attention layers, spread evenly, by a Mamba-2 state."""
    intermediate = 2 * spec.hidden_size
    if intermediate % RECURRENT_HEAD_DIM:
        raise NotApplicable(f"recurrent: hidden size {spec.hidden_size} has no 64-wide heads")
    state = State(
        StateKind.MAMBA2,
        RECURRENT_CONV_KERNEL,
        intermediate=intermediate,
        state_size=RECURRENT_STATE_SIZE,
        num_heads=intermediate // RECURRENT_HEAD_DIM,
        head_dim=RECURRENT_HEAD_DIM,
        num_groups=RECURRENT_GROUPS,
        conv_dtype=spec.dtype,
        ssm_dtype=spec.dtype,
    )
    layers, seen = list(spec.layers), 0
    for i, layer in enumerate(layers):
        if layer.attention is None:
            continue
        if math.floor((seen + 1) * fraction) > math.floor(seen * fraction):
            layers[i] = layer._replace(attention=None, state=layer.state or state)
        seen += 1
    return spec._replace(layers=tuple(layers))


def _cla(spec: ModelSpec, share: int) -> ModelSpec:
    """Every group of `share` consecutive attention layers keeps one cache."""
    layers, seen = list(spec.layers), 0
    for i, layer in enumerate(layers):
        if layer.attention is not None:
            if seen % share:
                layers[i] = layer._replace(attention=None)
            seen += 1
    return spec._replace(layers=tuple(layers))


def _applied(spec: ModelSpec, t: Technique, fn) -> ModelSpec:
    new, changed = _replace_attention(spec, fn)
    if not changed:
        raise NotApplicable(f"{t.name}: no layer of {spec.name} changes ({_why_not(spec, t)})")
    return new


def _why_not(spec: ModelSpec, t: Technique) -> str:
    mla_kinds = ("gqa", "prune", "lowrank", "mla", "window", "cyclic")
    if spec.has_kind(CacheKind.MLA) and t.kind in mla_kinds:
        return "it caches an MLA latent"
    if t.kind in ("gqa", "prune"):
        return f"it has {spec.num_kv_heads} KV head(s) already"
    if t.kind in ("window", "cyclic"):
        return "its windows are already that narrow"
    return "no full-attention layer"


class Context(NamedTuple):
    """What every scenario of one request shares."""

    spec: ModelSpec
    context_len: int
    fmt: KvFormat  # the baseline's
    kv_group_size: int = 32
    full_precision_tokens: int = 0  # int3/int2: sink + recent tokens kept in the model dtype
    draft: ModelSpec | None = None
    draft_tokens: int = 4  # k
    acceptance: float = 0.7


def scenario(ctx: Context, techniques: list[Technique]) -> Scenario:
    """The model, format and token counts with `techniques` applied (each term at most once)."""
    spec, s = ctx.spec, ctx.context_len
    store = read = spec
    fmt = ctx.fmt
    prefix, reservation, lowrank, draft, draft_tokens = 0, None, False, None, 0
    kinds = {t.kind: t for t in techniques}
    held = None
    if "paged" in kinds:  # sequences hold N tokens; a contiguous allocator reserves --ctx each
        held = kinds["paged"].value or kept_tokens(s, PAGED_MEAN_FRACTION)
        if held > s:
            raise KvplanError(f"--apply {kinds['paged'].name}: more tokens than --ctx {s:,}")
        reservation = s
    kept, read_tokens, store_tokens = s, s, s
    if "dtype" in kinds:
        name = kinds["dtype"].value
        if name == fmt.name:
            raise NotApplicable(f"{name}: the baseline is already {name}")
        keep = ctx.full_precision_tokens if name in ("int3", "int2") else 0
        fmt = KvFormat(name, ctx.kv_group_size, keep, spec.dtype)
    if "recurrent" in kinds:
        if not spec.attention_layers():
            raise NotApplicable("recurrent: no attention layer to replace")
        read = _recurrent(read, kinds["recurrent"].value)
    if "mla" in kinds:
        read = _applied(read, kinds["mla"], _mla(kinds["mla"]))
    if "lowrank" in kinds:
        read = _applied(read, kinds["lowrank"], _lowrank(kinds["lowrank"]))
        lowrank = True
    for kind in ("gqa", "prune"):
        if kind in kinds:
            read = _applied(read, kinds[kind], _fewer_heads(kinds[kind]))
    store = read
    for kind in ("window", "cyclic"):
        if kind in kinds:
            t = kinds[kind]
            read = _applied(read, t, _window(t, CacheKind.SLIDING))
            # A cyclic buffer is W slots allocated once: stored whole, paged like a chunk
            # (ceil(W / block) blocks, not the sliding window's one more).
            store_kind = CacheKind.CHUNKED if kind == "cyclic" else CacheKind.SLIDING
            store = _applied(store, t, _window(t, store_kind))
            if kind == "cyclic":
                store_tokens = max(store_tokens, t.value)
    if "cla" in kinds:
        layers = len(store.attention_layers())
        if layers < 2:
            raise NotApplicable(f"{kinds['cla'].name}: fewer than two attention layers to share")
        if kinds["cla"].value > layers:
            raise NotApplicable(
                f"{kinds['cla'].name}: shares one cache among more layers than the "
                f"{layers} attention layers there are"
            )
        store = _cla(store, kinds["cla"].value)
    for kind in ("evict", "merge"):
        if kind in kinds:
            kept = store_tokens = read_tokens = kept_tokens(s, 1 - kinds[kind].value)
    if "sparse_read" in kinds:
        read_tokens = kept_tokens(kept, kinds["sparse_read"].value)
    if "prefix" in kinds:
        prefix = kinds["prefix"].value
        holds = min(kept, held) if held is not None else kept
        if prefix >= holds:
            raise NotApplicable(
                f"{kinds['prefix'].name}: a shared prefix of {prefix:,} tokens is not shorter "
                f"than the {holds:,} tokens each sequence holds"
            )
    if "spec" in kinds:
        if ctx.draft is None:
            raise NotApplicable(
                f"spec: no bundled model shares {spec.name}'s vocabulary and type at under "
                f"{DRAFT_MAX_FRACTION:.0%} of its size; name one: spec=MODEL"
            )
        draft, draft_tokens = ctx.draft, ctx.draft_tokens
        store_tokens += draft_tokens  # k speculative entries per sequence, in both caches
    return Scenario(
        store,
        read,
        fmt,
        store_tokens,
        read_tokens,
        prefix,
        held,
        reservation,
        lowrank,
        draft,
        draft_tokens,
        ctx.acceptance,
    )


def stored_model(sc: Scenario) -> ModelSpec:
    """What the cache holds per sequence: the target's layers, and a draft's beside them."""
    if sc.draft is None:
        return sc.store
    return sc.store._replace(layers=sc.store.layers + sc.draft.layers)


def stored_bytes(sc: Scenario, batch_size: int) -> int:
    """KV bytes `batch_size` sequences store (all ranks): a shared prefix once, each sequence's
    private part and recurrent state; a draft model's cache beside the target's."""
    model = stored_model(sc)
    per_sequence = kv_bytes_per_sequence(model, sc.store_tokens, sc.fmt)
    if not sc.prefix_tokens:
        return batch_size * per_sequence
    states = state_bytes_per_sequence(model)
    shared = kv_bytes_per_sequence(model, sc.prefix_tokens, sc.fmt) - states
    return shared + batch_size * (per_sequence - shared)


def read_bytes_per_token(sc: Scenario, tp: int = 1) -> float:
    """KV bytes read (per rank) for one output token of one sequence: its cache at the tokens a
    step reads, as a decode reads it (kv_read_bytes_per_decode: a sparse layer's top-k, not all
    it holds); with a draft, the target's once and the draft's k times per round, over the
    tokens a round yields."""
    target = kv_read_bytes_per_decode(sc.read, sc.read_tokens, sc.fmt, tp)
    if sc.draft is None:
        return float(target)
    draft = kv_read_bytes_per_decode(sc.draft, sc.read_tokens, sc.fmt, tp)
    per_round = target + sc.draft_tokens * draft
    return per_round / expected_tokens_per_round(sc.draft_tokens, sc.acceptance)


# ---- the catalogue: every technique of the chapter, with default settings ---------------------
def default_apply(spec: ModelSpec, context_len: int) -> tuple[str, ...]:
    """What `whatif` prices without --apply: every technique once (settings from the chapter),
    the chapter's two stacking examples, and the scheduling group."""
    heads = spec.num_kv_heads
    gqa = 8 if heads > 8 and spec.num_q_heads % 8 == 0 else heads // 2
    quarter = max(1, context_len // 4)  # the chapter's 32k window at 128k
    out = ["fp8", "int8", "int4", "int3", "int2", "cla2", "mqa"]
    if gqa > 1:
        out.append(f"gqa={gqa}")
    if heads > 1:
        out.append(f"prune={max(1, heads // 2)}")
    out += [
        "lowrank=0.5",  # Palu's 50% compression
        "mla=512+64",
        f"window={quarter}",
        f"cyclic={quarter}",
        "evict=0.75",  # the chapter's "dropped your memory 4x"
        "merge=0.75",
        "recurrent=0.75",  # three recurrent layers per attention layer (Qwen3-Next)
        f"prefix={min(2000, max(1, context_len // 2))}",  # the chapter's 2,000-token system prompt
        "paged",
        "sparse-read=0.125",
        "spec",
        "cla2+fp8",
    ]
    if gqa > 1:
        out.append(f"mqa+gqa={gqa}")
    return (*out, *SCHEDULING)


def find_draft(spec: ModelSpec) -> ModelSpec | None:
    """The smallest bundled model of the same type and vocabulary, at most a quarter of the size:
    a draft that can share the target's tokenizer (only that one is built)."""
    from kvplan.inputs.sources import load_bundled

    best = None
    for name, model_type, vocab_size, params_total in draft_candidates():
        if (
            model_type == spec.model_type
            and vocab_size == spec.vocab_size
            and params_total <= DRAFT_MAX_FRACTION * spec.params_total
            and (best is None or params_total < best[1])
        ):
            best = (name, params_total)
    return None if best is None else load_bundled(best[0])


def draft_candidates() -> tuple[tuple[str, str, int, int], ...]:
    """(alias, model_type, vocab_size, params_total) of every bundled model that builds, in the
    index's order: kvplan.plans.draft_models (building all ~60 was half of `whatif`'s time), or
    built now where a config changed since it was generated."""
    from kvplan.plans import draft_models

    if config_checksums() == draft_models.CONFIG_CRC32:
        return draft_models.MODELS
    return summarize_bundled()


def summarize_bundled() -> tuple[tuple[str, str, int, int], ...]:
    from kvplan.inputs.sources import bundled_models, load_bundled

    out = []
    for name in bundled_models():
        try:
            other = load_bundled(name)
        except KvplanError:
            continue
        out.append((name, other.model_type, other.vocab_size, other.params_total))
    return tuple(out)


def config_checksums() -> dict[str, str]:
    """The CRC-32 of model_configs/index.json and of each config it names."""
    import zlib

    from kvplan.inputs.sources import _bundled_dir, bundled_models

    folder = _bundled_dir()
    files = ["index.json", *sorted({m.file for m in bundled_models().values()})]
    return {name: f"{zlib.crc32((folder / name).read_bytes()):08x}" for name in files}


class Stacking(NamedTuple):
    kind: str  # "" (a single technique) | multiply | same_term
    clashes: tuple[str, ...] = ()  # terms hit twice
    dropped: tuple[str, ...] = ()  # techniques that add nothing


def stack(parts: list[Technique], strength) -> tuple[list[Technique], Stacking]:
    """The chapter's rule: techniques on different terms multiply; on the same term only the
    stronger counts (`strength(t)`: smaller is stronger)."""
    if len(parts) == 1:
        return parts, Stacking("")
    used: list[Technique] = []
    for t in sorted(parts, key=strength):
        if not any(set(t.terms) & set(u.terms) for u in used):
            used.append(t)
    terms = [term for t in parts for term in t.terms]
    clashes = tuple(sorted({x for x in terms if terms.count(x) > 1}))
    if clashes:
        dropped = tuple(t.name for t in parts if t not in used)
        return [t for t in parts if t in used], Stacking("same_term", clashes, dropped)
    return parts, Stacking("multiply")
