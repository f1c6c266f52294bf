"""config.json -> ModelSpec, from structure.

The cache anatomy and the parameter count follow what the config declares, whatever its
model_type: an MLA latent (`kv_lora_rank`) makes MLA layers, indexer fields add an indexer key
cache, any expert spelling makes MoE layers, recurrent fields give a state, and the layer list
(`layer_types`, `layers_block_type`, `hybrid_override_pattern`, `attn_type_list`) or the family's
pattern says which layer holds what. The family row (kvplan.inputs.architectures.families) adds
only class defaults and block details. An unknown model_type is sized from structure with a note
naming the fields that decided each part and any structural field left unread; a config that
declares structure kvplan cannot read is refused (exit 2), never printed as plain attention.
"""

from collections import Counter

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, PositionKeys, State
from kvplan.dtypes import model_dtype_name
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.families import ALIASES, FAMILIES, Family
from kvplan.inputs.architectures.layouts import FamilyLayouts, Plan
from kvplan.inputs.architectures.mixers import lightning_state, read_state
from kvplan.inputs.architectures.params import EXPERT_COUNT
from kvplan.inputs.architectures.rope import rope_factor, rope_field, rope_tables
from kvplan.inputs.architectures.structure import UNBUILT, unbuilt_features, unread_structure
from kvplan.inputs.fields import MAX_DIM, MAX_LAYERS, REQUIRED, Fields
from kvplan.inputs.quantization import read_quantization
from kvplan.inputs.text import clean
from kvplan.notes import note

GENERIC = Family("unknown family, sized from structure")

# Keys that hold a multimodal or composite model's language model.
TEXT_CONFIG_KEYS = (
    "text_config",
    "llm_config",
    "language_config",
    "language_model_config",
    "text_model_config",
    "thinker_config",
    "decoder",
    "generator",
    "text_encoder",
)

# Values of per-layer type lists -> what the layer holds: a mixer kind and whether the layer has
# an MLP of its own ("single" kinds are a whole layer: Nemotron-H's mlp and moe layers).
LAYER_VALUES = {
    "full_attention": ("full", True),
    "attention": ("full", True),
    "*": ("full", True),
    "sliding_attention": ("sliding", True),
    "chunked_attention": ("chunked", True),
    "indexed_attention": ("full", True),
    "deepseek_sparse_attention": ("full", True),
    "qwen_sparse_attention": ("full", True),
    "minimax_m3_sparse": ("full", True),  # GQA with a key-only indexer cache (MiniMax-M3)
    "linear_attention": ("state", True),
    "conv": ("state", True),  # LFM2's short convolution
    "mamba": ("state", True),
    "M": ("state", True),
    "hybrid": ("hybrid", True),
    "mlp": ("none", "dense"),
    "-": ("none", "dense"),
    "moe": ("none", "moe"),
    "E": ("none", "moe"),
}

# Multimodal wrappers' class defaults for tie_word_embeddings (transformers 5.24), used when the
# top level does not say; the wrapper's model holds the output head.
WRAPPER_TIE = {
    "qwen3_vl": False,
    "qwen3_vl_moe": False,
    "gemma3": True,
    "gemma4": True,
    "llama4": False,
}
# Wrappers whose config class ties when either the top level or text_config says so.
TIE_EITHER = ("llava", "llava_onevision", "qwen2_5_vl", "glm4v", "hunyuan_vl", "paddleocr_vl")

# Families with multi-token-prediction layers outside num_hidden_layers (besides MLA models).
MTP_FAMILIES = ("mimo", "mimo_v2_flash", "step3p7", "minimax_m3")

# Fields `per_layer_config` may override on a layer (the attention geometry).
PER_LAYER_FIELDS = ("head_dim", "num_key_value_heads", "num_attention_heads")

# Every dimension within its own range can still multiply to an absurd model (a head_dim of 2^31
# across 65,536 heads); the largest real ones hold a few trillion parameters.
MAX_PARAMS = 10**15
MAX_POSITION_KEYS = (
    "model_max_length",  # Cohere: overrides the others
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
)


# Every key vLLM (_get_and_verify_max_len) or SGLang (get_context_length) reads a length from
ENGINE_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def _rope_entry(params: dict, field: str, source: str) -> tuple[str, float | None, int | None]:
    """(rope_type, factor, original_max_position_embeddings) as engines read a rope parameter
    set: `type` is the older spelling of `rope_type`; a factor below 1 or not a number is
    refused (`rope_factor`); a length that is not a positive integer is not one."""
    kind = str(params.get("rope_type") or params.get("type") or "default")
    factor = rope_factor(params, field, source)
    original = params.get("original_max_position_embeddings")
    original = original if isinstance(original, int) and 0 < original <= MAX_DIM else None
    return kind, factor, original


def text_config(raw: dict, source: str) -> tuple[dict, dict]:
    """(text config, top-level config): the language model of a multimodal or composite config,
    found under any of the known keys (nested wrappers unwrapped), else the config itself."""
    if not isinstance(raw, dict):
        raise KvplanError(f"{source}: config is not a JSON object")
    top, text = raw, raw
    for _ in range(4):  # a wrapper inside a wrapper (thinker -> text)
        nested = [k for k in TEXT_CONFIG_KEYS if isinstance(text.get(k), dict)]
        if not nested:
            break
        if len(nested) > 1:
            raise KvplanError(f"{source}: config has several text configs ({', '.join(nested)})")
        text = text[nested[0]]
    return text, top


def build_model(raw: dict, name: str, source: str | None = None) -> ModelSpec:
    """The one entry point: a parsed config.json (dict) -> ModelSpec."""
    source = source or name
    text, top = text_config(raw, source)
    raw_type = text.get("model_type") or top.get("model_type")
    if not isinstance(raw_type, str) or not raw_type:
        raise KvplanError(f"{source}: config has no model_type")
    top_type = top.get("model_type") if isinstance(top.get("model_type"), str) else raw_type
    raw_type = clean(raw_type)[:80]
    model_type = ALIASES.get(raw_type, raw_type)
    if text is top and raw_type in ("llama4", "gemma3", "mistral3", "kimi_k25"):
        raise KvplanError(f"{source}: {raw_type} config has no text_config")
    if model_type in ("deepseek_v4", "kimi_linear", "laguna"):
        # built by their own modules, which refuse any field they do not read
        from kvplan.inputs.architectures.deepseek_v4 import build_deepseek_v4
        from kvplan.inputs.architectures.kimi_linear import build_kimi_linear
        from kvplan.inputs.architectures.laguna import build_laguna

        build = {
            "deepseek_v4": build_deepseek_v4,
            "kimi_linear": build_kimi_linear,
            "laguna": build_laguna,
        }[model_type]
        return build(Fields(text, source, parent=top), top, name, source, model_dtype_name)
    family = FAMILIES.get(model_type)
    known = family is not None
    family = family or GENERIC
    f = Fields(text, source, parent=top)
    builder = Builder(f, top, family, model_type, raw_type, top_type)
    builder.name_hint = source
    try:
        spec = builder.build(name)
    except KvplanError as exc:
        if known:
            raise
        # the failure is a symptom: say first that the type is unknown and what it declares
        declared = unread_structure(text, set())
        listed = f"; it declares {', '.join(declared[:8])}" if declared else ""
        raise KvplanError(
            f"{source}: model_type {raw_type!r} is not one kvplan knows{listed}. Sizing it "
            f"from structure stopped at: {str(exc).removeprefix(source + ': ')}"
        ) from None
    unread = unread_structure(text, f.read)
    if not known:
        if unread:
            raise KvplanError(
                f"{source}: model_type {raw_type!r} is not one kvplan knows, and it declares "
                f"structure kvplan did not read: {', '.join(unread)}; kvplan will not guess its "
                "cache (open an issue with the config)"
            )
        spec = spec._replace(
            notes=(note("structure-read", model_type=raw_type, decided=tuple(builder.decided)),)
            + spec.notes
        )
    elif unread:
        spec = spec._replace(notes=spec.notes + (note("structure-unread", fields=tuple(unread)),))
    return spec


class Builder(FamilyLayouts):
    """Reads one config: dimensions, the per-layer plan, attention, state, MoE, parameters."""

    def __init__(
        self, f: Fields, top: dict, family: Family, model_type: str, raw_type: str, top_type
    ):
        self.f, self.top, self.family = f, top, family
        self.model_type, self.raw_type, self.top_type = model_type, raw_type, top_type
        self.notes: list = []
        self.name_hint = ""
        self.decided: list[tuple[str, str]] = []  # (part, the fields that decided it)
        self.per_layer = False  # the config has transformers 5.x's per_layer_config

    # ---- dimensions -------------------------------------------------------------------------
    def dims(self) -> None:
        f, fam = self.f, self.family
        self.hidden = f.int("hidden_size", "n_embd", "d_model", why="the parameter count")
        if self.model_type == "falcon":
            self.heads = f.int("num_attention_heads", "n_head", why="attention heads")
            self.kv = self._falcon_kv_heads()
        elif self.model_type in ("mamba", "mamba2"):  # attention-free: no attention heads
            self.heads = f.int("num_attention_heads", "num_heads", default=1)
            self.kv = self.heads
            self.head_dim = f.int("head_dim", default=64)
        else:
            self.heads = f.int("num_attention_heads", "n_head", "num_heads", why="attention heads")
            default = self.heads if fam.kv_heads == "heads" else fam.kv_heads
            self.kv = f.int(
                "num_key_value_heads",
                "n_head_kv",
                "num_kv_heads",
                "multi_query_group_num",
                default=default,
            )
        if self.kv > self.heads or self.heads % self.kv:
            raise KvplanError(
                f"{f.source}: {self.heads} query heads cannot be grouped over {self.kv} KV heads"
            )
        if self.model_type not in ("mamba", "mamba2"):
            self.head_dim = self._head_dim()
        vocab_default = fam.vocab if fam.vocab is not None else REQUIRED
        self.vocab = f.int("vocab_size", default=vocab_default, why="the parameter count")
        self.tied = self._tie()
        declared = next(
            (
                c[k]
                for c in (f.data, self.top)
                for k in ("torch_dtype", "dtype")
                if c.get(k) is not None
            ),
            None,
        )
        if declared is None:
            self.notes.append(note("no-dtype"))
        self.dtype = model_dtype_name(declared)

    def _falcon_kv_heads(self) -> int:
        f = self.f
        new_arch = f.bool("new_decoder_architecture", self.raw_type == "RefinedWeb")
        self.falcon_new_arch = new_arch
        multi_query = f.bool("multi_query", self.raw_type == "RefinedWebModel" or not new_arch)
        if new_arch:
            return f.int("num_kv_heads", "n_head_kv", default=self.heads)
        return 1 if multi_query else self.heads

    def _head_dim(self) -> int:
        f, fam, hidden, heads = self.f, self.family, self.hidden, self.heads
        if fam.head_dim_rule == "derived" or self.model_type in ("falcon", "gpt2", "gpt_neox"):
            if hidden % heads:
                raise KvplanError(
                    f"{f.source}: hidden_size {hidden} is not a multiple of {heads} heads"
                )
            return hidden // heads
        if fam.head_dim_rule == "double":  # attention over concat(hidden, embedding): 2h / heads
            return f.int("attention_head_dim", default=2 * hidden // heads)
        explicit = f.opt_int("head_dim", "attention_head_dim")
        if explicit is not None:
            return explicit
        if fam.head_dim is not None:
            return fam.head_dim
        if hidden % heads:
            raise KvplanError(
                f"{f.source}: hidden_size {hidden} is not a multiple of {heads} heads and "
                "no head_dim is given"
            )
        return hidden // heads

    def _tie(self) -> bool:
        """Whether the output head is the embedding. A multimodal wrapper's model holds the head,
        so its own (top-level) flag decides, as in transformers: a text_config flag that says
        otherwise (transformers 5.x writes the text class's default back into text_config) is
        noted and not used; a few wrappers OR the two (llava, Qwen2.5-VL)."""
        inner = self._tie_value(self.f.data)
        if self.top is self.f.data:
            return self.family.tie if inner is None else inner
        outer = self._tie_value(self.top)
        if outer is not None:
            if self.top_type in TIE_EITHER:
                return outer or bool(inner)
            if inner is not None and inner != outer:
                self.notes.append(note("tie-wrapper-wins", wrapper=self.top_type, tied=outer))
            return outer
        if self.top_type == "mistral3":
            # Mistral3Config defaults to tied, but the checkpoints store a separate lm_head, and
            # transformers unties weights a checkpoint holds twice: count it untied.
            self.notes.append(note("tie-wrapper-default", wrapper=self.top_type))
            return False
        if self.top_type in WRAPPER_TIE:
            wrapper = WRAPPER_TIE[self.top_type]
            return wrapper or bool(inner) if self.top_type in TIE_EITHER else wrapper
        return self.family.tie if inner is None else inner

    def _tie_value(self, cfg: dict) -> bool | None:
        # LFM2 spells it tie_embedding, which transformers' Lfm2Config takes first
        value = cfg.get("tie_embedding", cfg.get("tie_word_embeddings"))
        if value is not None and not isinstance(value, bool):
            raise KvplanError(f"{self.f.source}: tie_word_embeddings must be true or false")
        return value

    # ---- the per-layer plan -----------------------------------------------------------------
    def plan(self) -> list[Plan]:
        f = self.f
        if f.raw("block_configs") is not None:
            return self._block_configs()
        declared, key = self._declared_layers()
        if declared is not None:
            self.decided.append(("layers", f"from {key}"))
            layers = []
            for value in declared:
                if value not in LAYER_VALUES:
                    known = sorted(v for v in LAYER_VALUES if len(v) > 1)
                    raise KvplanError(
                        f"{f.source}: {key} value {value!r} is not one kvplan can size "
                        f"(known: {', '.join(known)})"
                    )
                mixer, ffn = LAYER_VALUES[value]
                layers.append(Plan(mixer, ffn if isinstance(ffn, str) else "?"))
            self._check_window_letters([p.mixer for p in layers])
            if self.family.layer_rule == "lfm2":  # Lfm2Config: layer_types wins over it
                f.has("full_attn_idxs")
            if self.family.layer_rule == "interval_full":
                self._check_interval([p.mixer for p in layers])
            single = any(p.ffn in ("dense", "moe") for p in layers)
            if single:  # each layer is one kind: mixers have no MLP of their own
                return [p if p.mixer == "none" else Plan(p.mixer, "none") for p in layers]
            return self._assign_ffn([p.mixer for p in layers])
        num_layers = f.int("num_hidden_layers", "n_layer", "num_layers", why="the layer count")
        if not self.attention_layers_possible:  # Mamba: every layer is one mixer, nothing else
            return [Plan("state", "none")] * num_layers
        return self._assign_ffn(self._rule_mixers(num_layers))

    def _check_interval(self, mixers: list[str]) -> None:
        """Qwen3-Next/Qwen3.5 write full_attention_interval beside the layer_types it was
        derived from; transformers and vLLM build layer_types. An interval that says the same
        is read; one that disagrees stays unread, and the structure note names it."""
        interval = self.f.data.get("full_attention_interval")
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            return
        derived = ["full" if (i + 1) % interval == 0 else "state" for i in range(len(mixers))]
        if mixers == derived:
            self.f.has("full_attention_interval")

    def per_layer_lists(self, plans: list[Plan]) -> list[Plan]:
        """Per-layer lists beside the layer pattern: `indexer_types` (GLM-5: "full" layers run
        their own DSA indexer, "shared" ones reuse the last one's selection and hold no indexer
        key) and `mlp_layer_types` ("dense" or "sparse" MLP per layer)."""
        f = self.f
        lists = {"indexer_types": ("full", "shared"), "mlp_layer_types": ("dense", "sparse")}
        for key, values in lists.items():
            if key == "indexer_types" and self.indexer_dim:
                given = self._indexer_types(len(plans))
            elif f.has(key) and f.data[key] is not None:
                given = f.data[key]
            else:
                continue
            if not isinstance(given, list) or len(given) != len(plans):
                raise KvplanError(f"{f.source}: {key} must list one value per layer ({len(plans)})")
            bad = sorted({str(v)[:20] for v in given if v not in values})
            if bad:
                raise KvplanError(
                    f"{f.source}: {key} value {bad[0]!r} is not one kvplan can size "
                    f"(known: {', '.join(values)})"
                )
            if key == "indexer_types":
                plans = [p._replace(indexer=v == "full") for p, v in zip(plans, given, strict=True)]
                self.decided.append(("indexer", "per layer from indexer_types"))
            else:
                plans = [
                    p._replace(ffn="moe" if v == "sparse" else "dense") if p.ffn != "none" else p
                    for p, v in zip(plans, given, strict=True)
                ]
                self.decided.append(("MLP per layer", "from mlp_layer_types"))
        return plans

    def per_layer_config(self, plans: list[Plan]) -> list[Plan]:
        """transformers 5.x's heterogeneous form: `per_layer_config` maps a layer index to the
        fields that differ on that layer (Gemma-4 written back by save_pretrained: the
        full-attention layers' head_dim and num_key_value_heads). The attention geometry is read
        per layer; any other field overridden per layer is refused, never ignored."""
        f = self.f
        given = f.raw("per_layer_config")
        self.per_layer = given is not None
        if given is None:
            return plans
        if not isinstance(given, dict):
            raise KvplanError(f"{f.source}: per_layer_config must map layer indices to fields")
        plans = list(plans)
        for key, fields in given.items():
            index = int(key) if isinstance(key, str) and key.isascii() and key.isdigit() else None
            if index is None or index >= len(plans):
                raise KvplanError(
                    f"{f.source}: per_layer_config key {str(key)[:20]!r} is not a layer index "
                    f"below {len(plans)}"
                )
            if not isinstance(fields, dict):
                raise KvplanError(f"{f.source}: per_layer_config[{key}] must be an object")
            unknown = sorted(str(k)[:40] for k in fields if k not in PER_LAYER_FIELDS)
            if unknown:
                raise KvplanError(
                    f"{f.source}: per_layer_config[{key}] overrides {', '.join(unknown)}, which "
                    f"kvplan does not read per layer (it reads {', '.join(PER_LAYER_FIELDS)})"
                )
            layer = Fields(fields, f"{f.source}: per_layer_config[{key}]")
            values = tuple((k, layer.int(k)) for k in PER_LAYER_FIELDS if k in fields)
            plans[index] = plans[index]._replace(overrides=values)
        self.decided.append(("attention per layer", "from per_layer_config"))
        return plans

    def _indexer_types(self, num_layers: int) -> list:
        """Which layers run their own indexer: `indexer_types`, else `index_topk_pattern`
        ("F"/"S" per layer), else every `index_topk_freq`-th layer from `index_skip_topk_offset`
        on (transformers' GlmMoeDsaConfig; without them, every layer)."""
        f = self.f
        if f.has("indexer_types") and f.data["indexer_types"] is not None:
            for key in ("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"):
                f.has(key)  # what the list was written from
            return f.data["indexer_types"]
        if f.has("index_topk_pattern") and f.data["index_topk_pattern"] is not None:
            pattern = f.data["index_topk_pattern"]
            if isinstance(pattern, str):
                names = {"F": "full", "S": "shared"}
                return [names.get(c, c) for c in pattern]
            return pattern
        freq = max(f.opt_int("index_topk_freq") or 1, 1)
        offset = f.opt_int("index_skip_topk_offset", minimum=0)
        offset = 2 if offset is None else offset
        return [
            "full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(num_layers)
        ]

    def _declared_layers(self) -> tuple[list[str] | None, str]:
        """The per-layer list a config states, as long as its num_hidden_layers when both are
        given (transformers refuses a mismatch; a short list would silently drop layers)."""
        values, key = self._declared_list()
        count = self.f.opt_int("num_hidden_layers", "num_layers")
        if values is not None and count is not None and len(values) != count:
            raise KvplanError(
                f"{self.f.source}: field {key} has {len(values)} entries, expected {count}"
            )
        return values, key

    def _declared_list(self) -> tuple[list[str] | None, str]:
        f = self.f
        for key in ("layers_block_type", "layer_types"):
            values = f.str_list(key)
            if values is not None:
                if not values:
                    raise KvplanError(f"{f.source}: {key} is empty")
                return values, key
        pattern = f.string("hybrid_override_pattern")
        if pattern is not None:
            bad = set(pattern) - set("M*-E")
            if bad:
                raise KvplanError(
                    f"{f.source}: hybrid_override_pattern has unknown layer codes {sorted(bad)}"
                )
            if not pattern:
                raise KvplanError(f"{f.source}: hybrid_override_pattern is empty")
            if len(pattern) > MAX_LAYERS:
                raise KvplanError(
                    f"{f.source}: hybrid_override_pattern has over {MAX_LAYERS:,} layers"
                )
            return list(pattern), "hybrid_override_pattern"
        attn_types = f.int_list("attn_type_list")
        if attn_types is not None:  # MiniMax: 1 softmax attention, 0 lightning (linear)
            return [
                "full_attention" if t else "linear_attention" for t in attn_types
            ], "attn_type_list"
        if self.model_type == "nemotron_h":
            raise KvplanError(
                f"{f.source}: nemotron_h config lacks layers_block_type and hybrid_override_pattern"
            )
        return None, ""

    def _rule_mixers(self, n: int) -> list[str]:
        """Layer kinds when the config lists none: the family's pattern, else one kind for all."""
        f, fam = self.f, self.family
        window = self.window
        rule = fam.layer_rule
        if rule == "qwen":
            if window:
                first = f.int("max_window_layers", default=28, minimum=0)
                return ["sliding" if i >= first else "full" for i in range(n)]
            return ["full"] * n
        if rule == "alternate":
            return ["sliding" if (i + 1) % 2 else "full" for i in range(n)]
        if rule == "pattern":
            letters = self._window_letters()
            if letters is not None:
                return [letters[i % len(letters)] for i in range(n)]
            if window is None and self.model_type == "exaone4":
                return ["full"] * n  # Exaone4Config: no window, no pattern
            period = f.int("sliding_window_pattern", default=fam.pattern)
            return ["sliding" if (i + 1) % period else "full" for i in range(n)]
        if rule == "mimo_v2":  # hybrid_layer_pattern: 1 sliding, 0 full; else layer 0, every 6th
            pattern = f.int_list("hybrid_layer_pattern", length=n)
            if pattern is None:
                pattern = [0 if i == 0 or (i + 1) % 6 == 0 else 1 for i in range(n)]
            return ["sliding" if v else "full" for v in pattern]
        if rule == "lfm2":  # Lfm2Config: attention on full_attn_idxs (default: every layer)
            given = f.int_list("full_attn_idxs")
            chosen = set(range(n) if given is None else given)
            return ["full" if i in chosen else "state" for i in range(n)]
        if rule == "smollm3":
            # SmolLM3Config: with the window switched on, the NoPE layers (0 in no_rope_layers)
            # slide; RoPE or not changes no cache size
            interval = f.int("no_rope_layer_interval", default=4)
            rope = f.int_list("no_rope_layers", length=n) or [
                int((i + 1) % interval != 0) for i in range(n)
            ]
            return ["sliding" if window and not rope[i] else "full" for i in range(n)]
        if rule == "even_sliding":
            return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
        if rule == "llama4":
            interval = f.int("no_rope_layer_interval", default=4)
            # an empty list means "derive it", as in transformers' Llama4TextConfig
            declared = f.int_list("no_rope_layers") or None
            no_rope = f.int_list("no_rope_layers", length=n) if declared else None
            no_rope = no_rope or [int((i + 1) % interval != 0) for i in range(n)]
            return ["chunked" if no_rope[i] else "full" for i in range(n)]
        if rule == "interval_full":
            interval = f.int("full_attention_interval", default=4)
            return ["full" if (i + 1) % interval == 0 else "state" for i in range(n)]
        if rule == "period":
            period = f.int("attn_layer_period", default=8)
            offset = f.int("attn_layer_offset", default=4, minimum=0)
            return ["full" if i % period == offset else "state" for i in range(n)]
        if self.model_type == "falcon_h1":
            return ["hybrid"] * n
        uniform = "sliding" if window else "chunked" if self.chunk else "full"
        if window or self.chunk:
            self.decided.append(("windows", "sliding_window" if window else "attention_chunk_size"))
        return [uniform] * n

    def _assign_ffn(self, mixers: list[str]) -> list[Plan]:
        if not self.family.layer_mlp:
            return [Plan(m, "none") for m in mixers]
        mask = self._moe_mask(len(mixers))
        return [Plan(m, "moe" if moe else "dense") for m, moe in zip(mixers, mask, strict=True)]

    def _moe_mask(self, n: int) -> list[bool]:
        f = self.f
        if not self.num_experts:
            return [False] * n
        explicit = f.int_list("moe_layers")
        if explicit is not None:
            chosen = set(explicit)
            return [i in chosen for i in range(n)]
        if f.has("interleave_moe_layer_step"):
            step = f.int("interleave_moe_layer_step")
            chosen = set(range(step - 1, n, step))
            return [i in chosen for i in range(n)]
        if f.has("decoder_sparse_step") or f.has("mlp_only_layers"):
            step = f.int("decoder_sparse_step", default=1)
            dense = set(f.int_list("mlp_only_layers") or [])
            return [i not in dense and (i + 1) % step == 0 for i in range(n)]
        if isinstance(f.raw("moe_layer_freq"), list):  # one 0/1 per layer (MiMo-V2, MiniMax-M3)
            flags = f.int_list("moe_layer_freq", length=n)
            f.has("first_k_dense_replace")  # the same layers, written twice
            return [bool(v) for v in flags or []]  # a list: checked just above
        if f.has("first_k_dense_replace"):
            first = f.int("first_k_dense_replace", minimum=0)
            freq = f.int("moe_layer_freq", default=1)
            return [i >= first and i % freq == 0 for i in range(n)]
        if f.has("expert_layer_period"):
            period = f.int("expert_layer_period")
            offset = f.int("expert_layer_offset", default=1, minimum=0)
            return [i % period == offset for i in range(n)]
        if self.model_type == "jamba":
            return [i % 2 == 1 for i in range(n)]
        return [True] * n

    # ---- the building blocks ----------------------------------------------------------------
    def read_structure(self) -> None:
        f, fam = self.f, self.family
        built = ("enable_moe_block",) if fam.moe_block else ()
        unbuilt = unbuilt_features(f.data, built)
        if unbuilt:
            raise KvplanError(
                f"{f.source}: declares what kvplan does not build yet, so its sizes would be "
                f"wrong: {'; '.join(unbuilt)}"
            )
        for key in UNBUILT:
            f.has(key)
        if not f.opt_int("hidden_size_per_layer_input", minimum=0):
            f.has("vocab_size_per_layer_input")  # the PLE table's rows, unused without PLE
        if fam.sparse_config:
            if (
                not f.bool("use_qk_norm", True)
                or f.string("qk_norm_type", "per_head") != "per_head"
            ):
                raise KvplanError(f"{f.source}: q/k norms other than per head are not built")
            if f.bool("attention_output_gate", False):
                raise KvplanError(f"{f.source}: attention_output_gate is not built")
            for key in ("use_routing_bias", "num_mtp_modules"):  # a buffer; MTP outside
                f.has(key)
        if fam.head_gate:
            f.has("use_moe_router_bias")  # e_score_correction_bias: a buffer, not a parameter
            self._sliding_heads()
        if fam.layer_rule == "smollm3":  # which layers skip RoPE: no size depends on it
            f.has("no_rope_layers")
            f.has("no_rope_layer_interval")
        self.window = f.window("sliding_window", default=fam.window)
        if fam.swa_fields and (swa_window := f.window("sliding_window_size")):
            # MiMoV2FlashConfig: the window attends sliding_window_size tokens plus the query
            self.window = swa_window + 1
        switch = fam.window_switch or (
            "use_sliding_window" if f.has("use_sliding_window") else None
        )
        if switch and not f.bool(switch, False):
            self.window = None  # real Qwen configs carry a window value with the switch off
        self.chunk = f.opt_int("attention_chunk_size")
        self.mla = f.has("kv_lora_rank")
        self.indexer_dim = (
            f.opt_int("index_head_dim")
            if not fam.sparse_config and (f.has("index_n_heads") or f.has("index_head_dim"))
            else None
        )
        self.gqa_indexer: list[bool] | None = None  # per layer: a key-only indexer (MiniMax-M3)
        # MiniMax-M3's (block size, top-k blocks) a sparse layer attends (None: dense)
        self.sparse_blocks = None
        if fam.sparse_config:
            self._sparse_attention_config()
        state = read_state(f, self.model_type, self.hidden, self.dtype)
        self.state: State | None
        self.state, self.state_source = state if state else (None, "")
        self.attention_layers_possible = self.model_type != "mamba2" and self.model_type != "mamba"
        self.num_experts = f.opt_int(*EXPERT_COUNT, minimum=0) or 0
        self.moe_block = fam.moe_block and f.bool("enable_moe_block", False)
        if fam.moe_block and not self.moe_block:
            self.num_experts = 0  # Gemma-4's expert fields count only with enable_moe_block
        if self.mla:
            self.decided.append(
                (
                    "attention",
                    "MLA from kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim",
                )
            )
        else:
            self.decided.append(
                (
                    "attention",
                    "num_attention_heads, num_key_value_heads, head_dim (or hidden/heads)",
                )
            )
        if self.indexer_dim:
            self.decided.append(("indexer", "index_head_dim, index_n_heads"))
        if self.state is not None:
            self.decided.append(("state", self.state_source))

    def _q_lora(self) -> int | None:
        """MLA's query down-projection width: the config's (null: none), else the class default."""
        if "q_lora_rank" in self.f.data:
            return self.f.opt_int("q_lora_rank")
        return self.family.q_lora_default

    def attention(self, kind: str, overrides: tuple = ()) -> Attention:
        f = self.f
        if self.mla:
            if overrides:
                raise KvplanError(f"{f.source}: per_layer_config on MLA layers is not supported")
            kv_lora = f.int("kv_lora_rank", why="the MLA latent width")
            rope = f.int("qk_rope_head_dim", why="the MLA latent width")
            nope = f.int("qk_nope_head_dim", why="the MLA parameter count")
            mla_v_dim = f.int("v_head_dim", why="the MLA parameter count")
            window = None
            if kind != "full":
                raise KvplanError(f"{f.source}: {kind} layers with an MLA latent are not supported")
            return Attention(
                kind=CacheKind.MLA,
                num_q_heads=self.heads,
                num_kv_heads=1,
                head_dim=kv_lora + rope,
                head_dim_v=0,
                qk_head_dim=nope + rope,
                v_head_dim=mla_v_dim,
                window=window,
                mla_kv_lora_rank=kv_lora,
                mla_rope_dim=rope,
                indexer_head_dim=self.indexer_dim or 0,
                indexer_num_heads=(
                    f.int("index_n_heads", why="the indexer") if self.indexer_dim else 0
                ),
                # transformers' DeepseekV32Config and GlmMoeDsaConfig default: 2,048
                indexer_topk=f.int("index_topk", default=2048) if self.indexer_dim else 0,
                mla_q_lora_rank=self._q_lora() or 0,
            )
        cache_kind = CacheKind(kind)
        size = self.window if kind == "sliding" else self.chunk if kind == "chunked" else None
        if cache_kind.windowed and not size:
            raise KvplanError(f"{f.source}: {kind} layers but no window size in the config")
        head_dim, kv, shared_kv_proj = self.head_dim, self.kv, False
        if kind == "full":
            head_dim, kv, shared_kv_proj = self._global_attention()
        v_dim: int | None = None  # as wide as the keys unless the family says otherwise
        if self.family.swa_fields:
            head_dim, kv, v_dim = self._swa_attention(kind, head_dim, kv)
        given = dict(overrides)
        if kind == "sliding" and getattr(self, "sliding_heads", None):
            given.setdefault("num_attention_heads", self.sliding_heads)
        head_dim = given.get("head_dim", head_dim)
        v_dim = head_dim if v_dim is None else v_dim
        kv = given.get("num_key_value_heads", kv)
        heads = given.get("num_attention_heads", self.heads)
        if kv > heads or heads % kv:
            raise KvplanError(
                f"{f.source}: {heads} query heads cannot be grouped over {kv} KV heads"
            )
        return Attention(
            kind=cache_kind,
            num_q_heads=heads,
            num_kv_heads=kv,
            head_dim=head_dim,
            head_dim_v=v_dim,
            qk_head_dim=head_dim,
            v_head_dim=v_dim,
            window=size if cache_kind.windowed else None,
            shared_kv_proj=shared_kv_proj,
            sinks=self._sinks(kind),
            qk_norm_allreduce=self.family.qk_norm_allreduce,
            indexer_head_dim=(self.indexer_dim or 0) if self.gqa_indexer else 0,
            indexer_num_heads=self.indexer_heads if self.gqa_indexer else 0,
            sparse_block_size=self.sparse_blocks[0]
            if self.gqa_indexer and self.sparse_blocks
            else 0,
            sparse_topk_blocks=self.sparse_blocks[1]
            if self.gqa_indexer and self.sparse_blocks
            else 0,
        )

    def _global_attention(self) -> tuple[int, int, bool]:
        """Full-attention layers of a local/global model may be wider than the sliding ones
        (Gemma-4: `global_head_dim`, and `num_global_key_value_heads` where
        `attention_k_eq_v` makes the values the keys' projection): (head_dim, KV heads, whether
        keys and values share one projection). The cache stores both K and V either way."""
        f = self.f
        k_eq_v = f.bool("attention_k_eq_v", False)
        if self.per_layer:  # written back by transformers 5.x: the widths are per layer
            return self.head_dim, self.kv, k_eq_v
        head_dim = f.opt_int("global_head_dim") or self.family.global_head_dim or self.head_dim
        global_kv = f.opt_int("num_global_key_value_heads")
        gated = k_eq_v or "attention_k_eq_v" not in f.data  # transformers' rule
        kv = global_kv if global_kv and gated else self.kv
        if head_dim != self.head_dim or kv != self.kv or k_eq_v:
            self.decided.append(
                (
                    "full-attention layers",
                    "global_head_dim, num_global_key_value_heads, attention_k_eq_v",
                )
            )
        return head_dim, kv, k_eq_v

    def layer_state(self) -> State:
        if self.state is None:
            if self.f.has("attn_type_list"):
                return lightning_state(self.f, self.heads, self.head_dim, self.dtype)
            raise KvplanError(
                f"{self.f.source}: linear/recurrent layers but no recurrent-state fields kvplan "
                "can read"
            )
        return self.state

    # ---- build ------------------------------------------------------------------------------
    def build(self, name: str) -> ModelSpec:
        from kvplan.inputs.architectures.params import Counter as ParamCounter

        self.dims()
        self.read_structure()
        plans = self.per_layer_config(self.per_layer_lists(self.plan()))
        if self.gqa_indexer is not None:
            plans = [p._replace(indexer=v) for p, v in zip(plans, self.gqa_indexer, strict=True)]
        counter = ParamCounter(self)
        layers, cache = [], {}
        for p in plans:
            key = p
            if key not in cache:
                attention = state = None
                if p.mixer in ("full", "sliding", "chunked", "hybrid"):
                    kind = "full" if p.mixer == "hybrid" else p.mixer
                    attention = self.attention(kind, p.overrides)
                    if not p.indexer:  # reuses an earlier layer's top-k: no indexer, no key
                        # (it attends that top-k all the same: vLLM's deepseek_v2.py hands a
                        # skip layer the shared topk_indices_buffer); MiniMax-M3's dense layers
                        # attend every block
                        attention = attention._replace(
                            indexer_head_dim=0,
                            indexer_num_heads=0,
                            sparse_block_size=0,
                            sparse_topk_blocks=0,
                        )
                if p.mixer in ("state", "hybrid"):
                    state = self.layer_state()
                cache[key] = Layer(attention, state, counter.layer(p, attention, state))
            layers.append(cache[key])
        if not layers:
            raise KvplanError(f"{self.f.source}: the config describes no layers")
        self.family_notes(layers)
        quant = read_quantization(self.top, self.f.data, name, self.name_hint)
        self.notes.extend(quant.notes)
        moe = counter.moe(plans)
        parts: Counter = Counter(counter.edges())
        for layer in layers:
            for part, count in layer.params:
                parts[part] += count
        total = sum(parts.values())
        if total > MAX_PARAMS:
            raise KvplanError(
                f"{self.f.source}: the config describes {total:.3g} parameters, over "
                f"{MAX_PARAMS:,}: no real model is this large (a field is corrupt)"
            )
        n_dense = sum(1 for p in plans if p.ffn == "dense")
        return ModelSpec(
            name=name,
            model_type=self.model_type,
            config_model_type=self.top_type if self.top_type != self.model_type else None,
            config_architecture=_first_architecture(self.top),
            family="MoE beside a dense MLP, local/global hybrid"
            if self.moe_block
            else self.family.label,
            hidden_size=self.hidden,
            vocab_size=self.vocab,
            layers=tuple(layers),
            param_parts={k: v for k, v in parts.items() if v},
            dtype=self.dtype,
            moe=moe,
            tied_embeddings=self.tied,
            max_position_embeddings=self.max_positions(),
            weights_quantization=quant.format,
            checkpoint_kv_cache=quant.kv_cache,
            checkpoint_kv_method=quant.kv_cache_method,
            weights_method=quant.method,
            quantized_parts=quant.parts,
            vision_params=vision_params(self.top, self.hidden),
            vision_tower=vision_tower(self.top),
            notes=tuple(self.notes),
            intermediate_size=counter.dense_width if n_dense else None,
            rope_tables=self.rope(layers),
            positions=self.position_keys(),
        )

    def rope(self, layers: list[Layer]) -> tuple[tuple[int, int], ...]:
        attention = [layer.attention for layer in layers if layer.attention is not None]
        if not attention or self.family.learned_positions is not None:
            return ()
        return rope_tables(
            self.f,
            self.head_dim,
            self.max_positions(),
            mla_rope_dim=attention[0].mla_rope_dim,
            has_sliding=any(a.kind is CacheKind.SLIDING for a in attention),
            local_table=self.family.rope_local,
        )

    def family_notes(self, layers: list[Layer]) -> None:
        f, mt = self.f, self.model_type
        if mt == "llama4_text":
            self.notes.append(note("llama4-chunked"))
            if self.top.get("vision_config") is None:
                self.notes.append(note("vision-absent"))
        if self.top.get("vision_config") is not None:
            self.notes.append(note("vision-excluded"))
        if self.mla:
            mtp = f.int("num_nextn_predict_layers", default=0, minimum=0)
            if mtp:
                self.notes.append(note("mtp-excluded", layers=mtp))
            a = next(layer.attention for layer in layers if layer.attention is not None)
            self.notes.append(
                note(
                    "mla-latent",
                    kv_lora_rank=a.mla_kv_lora_rank,
                    rope=a.mla_rope_dim,
                    heads=a.num_q_heads,
                    decompressed=a.num_q_heads * (a.qk_head_dim + a.v_head_dim),
                )
            )
            if self.indexer_dim:
                attention = [x.attention for x in layers if x.attention is not None]
                self.notes.append(
                    note(
                        "indexer-cache",
                        width=self.indexer_dim,
                        layers=sum(1 for x in attention if x.indexer_head_dim),
                        of=len(attention),
                    )
                )
        if self.gqa_indexer:
            self.notes.append(
                note(
                    "gqa-indexer-cache",
                    width=self.indexer_dim,
                    layers=sum(self.gqa_indexer),
                    of=len(self.gqa_indexer),
                )
            )
        if not self.mla:
            mtp = 0
            if mt in MTP_FAMILIES:
                mtp = f.int("num_nextn_predict_layers", default=0, minimum=0)
            if not mtp:  # Qwen3-Next's and Qwen3.5's name for their MTP layers
                mtp = f.int("mtp_num_hidden_layers", default=0, minimum=0)
            if mtp:
                self.notes.append(note("mtp-excluded", layers=mtp))
        if mt == "falcon" and getattr(self, "falcon_new_arch", False) and self.kv < self.heads:
            self.notes.append(note("falcon-broadcast", kv_heads=self.kv, heads=self.heads))
        if mt == "mamba2":
            self.notes.append(note("attention-free-head-dim"))

    def position_keys(self) -> PositionKeys:
        """The length keys engines read (vLLM's and SGLang's lists) and the rope scaling."""
        lengths: list[tuple[str, int]] = []
        for key in ENGINE_LENGTH_KEYS:
            value = self.f.window(key)
            if value:
                lengths.append((key, value))
        if "max_position_embeddings" not in dict(lengths) and self.family.max_positions:
            lengths.append(("max_position_embeddings", self.family.max_positions))
        params = self.f.raw("rope_parameters", "rope_scaling")
        params = params if isinstance(params, dict) else {}
        nested = {k: v for k, v in params.items() if isinstance(v, dict)}
        field = rope_field(self.f)
        sets = [(f"{field}.{k}", v) for k, v in nested.items()] or (
            [(field, params)] if params else []
        )
        rope = tuple(_rope_entry(p, name, self.f.source) for name, p in sets)
        return PositionKeys(tuple(lengths), rope, bool(nested))

    def max_positions(self) -> int | None:
        for key in MAX_POSITION_KEYS:
            value = self.f.window(key)  # null or 0: not stated; else an integer in range
            if value:
                return value
        return self.family.max_positions


GATED_VISION_ACTIVATIONS = ("silu", "swish")


def vision_tower(top: dict) -> tuple[int, int] | None:
    """(layers, hidden size) of `vision_config`, with SGLang's defaults (24, 1024) for a field it
    lacks; Kimi-K2.5 spells them vt_num_hidden_layers / vt_hidden_size, which its config class
    exposes under the usual names (SGLang's mem_fraction_static for Kimi-K2.5 matches 27 x 1152)."""
    vc = top.get("vision_config")
    if not isinstance(vc, dict):
        return None

    def first(*keys: str, default: int) -> int:
        for key in keys:
            value = vc.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return default

    layers = first("num_hidden_layers", "depth", "vt_num_hidden_layers", default=24)
    return layers, first("hidden_size", "vt_hidden_size", default=1024)


def vision_params(top: dict, text_hidden: int) -> int:
    """A ViT/SigLIP vision tower from `vision_config` (an estimate: attention and MLP with biases,
    two LayerNorms per layer, or a gated MLP without biases for SiLU towers; patch and position
    embeddings, a linear projector to the LM)."""
    vc = top.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    try:
        f = Fields(vc, "vision_config")
        # Kimi-K2.5's MoonViT spells them vt_* (its config class maps them to the usual names)
        h = f.int("hidden_size", "vt_hidden_size")
        inter = f.int("intermediate_size", "vt_intermediate_size")
        layers = f.int("num_hidden_layers", "depth", "vt_num_hidden_layers")
        patch = f.int("patch_size", default=14)
        image = f.int("image_size", default=224)
        channels = f.int("num_channels", default=3)
        # a learned position grid of its own size (MoonViT: init_pos_emb_height x _width)
        grid = f.int("init_pos_emb_height", default=0) * f.int("init_pos_emb_width", default=0)
    except KvplanError:
        return 0
    if str(vc.get("hidden_act", "")).lower() in GATED_VISION_ACTIVATIONS:
        # a gated MLP without biases (Pixtral, Qwen2.5-VL): q, k, v, o plus gate, up, down
        per_layer = 4 * h * h + 3 * h * inter + 2 * h
    else:
        per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    embeddings = channels * patch * patch * h + h + (grid or (image // patch) ** 2) * h
    return layers * per_layer + embeddings + 2 * h + h * text_hidden + h


def _first_architecture(top: dict) -> str | None:
    """architectures[0] exactly as the config writes it (engines key their own model class on
    it, as written: a name that is no class name, ' LlamaForCausalLM', matches none of SGLang's
    registered models, engines.sglang.sglang_transformers_backend); its first 200 characters
    where longer (no class is named so); None where the config names none or no string."""
    names = top.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        return None
    return names[0][:200]
