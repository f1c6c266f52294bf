"""Per-family layer readers the Builder (kvplan.inputs.architectures.build) mixes in: DeciLM
block_configs, MiniMax-M3's sparse_attention_config, Step-3.x's sliding heads, MiMo-V2-Flash's
sliding-layer shapes and sinks, EXAONE-4.0's lettered window pattern. Each reads its fields and
refuses what it does not build, by name."""

from typing import TYPE_CHECKING

from kvplan.errors import KvplanError
from kvplan.inputs.fields import MAX_LAYERS, Fields
from kvplan.record import NamedTuple

if TYPE_CHECKING:
    from kvplan.inputs.architectures.families import Family


class Plan(NamedTuple):
    """One layer before it becomes a Layer: what its mixer is and what MLP it has."""

    mixer: str  # full | sliding | chunked | state | hybrid | none
    ffn: str  # dense | moe | none
    indexer: bool = True  # a DSA indexer of its own, where the model has one ("shared": none)
    overrides: tuple = ()  # (field, value) pairs from `per_layer_config` for this layer
    ffn_width: int = 0  # this layer's own MLP width (DeciLM block_configs; 0: the config's)


# DeciLM block fields kvplan does not build (set: the block is refused by name).
DECI_UNBUILT = (
    "replace_with_linear",
    "sparsify",
    "num_sink_tokens",
    "window_length",
    "unshifted_sink",
    "use_prefill_window_in_sink_attention",
)

# MiniMax-M3 sparse_attention_config fields that choose what is read, not what is stored.
SPARSE_BENIGN = (
    "use_sparse_attention",
    "sparse_attention_freq",
    "sparse_disable_index_value",
    "sparse_index_dim",
    "sparse_num_index_heads",
    "sparse_block_size",
    "sparse_topk_blocks",
    "sparse_init_block",
    "sparse_local_block",
    "sparse_score_type",
)


class FamilyLayouts:
    """Methods of Builder for the families whose layers are not one uniform block."""

    # Builder's own attributes, read here (declared for the type checker; set by Builder)
    f: Fields
    family: "Family"
    heads: int
    sparse_blocks: tuple[int, int] | None
    kv: int
    head_dim: int
    hidden: int
    decided: list[tuple[str, str]]
    gqa_indexer: list[bool] | None
    indexer_dim: int | None

    def _block_configs(self) -> list[Plan]:
        """DeciLM / Nemotron-NAS (Llama-3.x-Nemotron Super/Ultra): one block per layer, its
        attention absent (`no_op`) or GQA with num_attention_heads // n_heads_in_group KV heads,
        its MLP absent or int(2 x ffn_mult x hidden / 3) rounded up to 256 wide (vLLM's
        nemotron_nas.py, the hub's modeling_decilm.py). Linear replacements, sinks, windows and
        sparsity are refused by name."""
        f = self.f
        blocks = f.raw("block_configs")
        count = f.opt_int("num_hidden_layers")
        if not isinstance(blocks, list) or not blocks or len(blocks) > MAX_LAYERS:
            raise KvplanError(f"{f.source}: block_configs must list one block per layer")
        if count is not None and count != len(blocks):
            raise KvplanError(
                f"{f.source}: block_configs has {len(blocks)} blocks, num_hidden_layers {count}"
            )
        plans = []
        for index, block in enumerate(blocks):
            where = f"{f.source}: block_configs[{index}]"
            if not isinstance(block, dict):
                raise KvplanError(f"{where} must be an object")
            attention, ffn = (
                Fields(block.get(k) or {}, f"{where}.{k}") for k in ("attention", "ffn")
            )
            for part, fields in (("attention", attention), ("ffn", ffn)):
                if not isinstance(block.get(part) or {}, dict):
                    raise KvplanError(f"{where}.{part} must be an object")
                unbuilt = [k for k in DECI_UNBUILT if fields.data.get(k) not in (None, False, 0)]
                if unbuilt:
                    raise KvplanError(
                        f"{where}.{part} sets {', '.join(unbuilt)}, which kvplan does not build"
                    )
            overrides: tuple[tuple[str, int], ...]
            if attention.bool("no_op", False):
                mixer, overrides = "none", ()
            else:
                group = attention.int("n_heads_in_group", why="the KV heads")
                if self.heads % group:
                    raise KvplanError(f"{where}: {self.heads} heads over groups of {group}")
                mixer, overrides = "full", (("num_key_value_heads", self.heads // group),)
            if ffn.bool("no_op", False):
                plans.append(Plan(mixer, "none", overrides=overrides))
                continue
            mult = ffn.raw("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e3:
                raise KvplanError(f"{where}.ffn: ffn_mult must be a positive number")
            width = int(2 * mult * self.hidden / 3)
            width = width if width % 256 == 0 else width + 256 - width % 256
            plans.append(Plan(mixer, "dense", overrides=overrides, ffn_width=width))
        self.decided.append(("layers", "per layer from block_configs (attention, ffn_mult)"))
        return plans

    def _sparse_attention_config(self) -> None:
        """MiniMax-M3: GQA layers with a lightning indexer whose key (index_head_dim wide, one
        per token) is cached beside K and V, on the layers `sparse_attention_freq` marks (or
        layer_types' minimax_m3_sparse); read as MiniMaxM3VLTextConfig reads the hub's
        `sparse_attention_config` (sparse_index_dim, sparse_num_index_heads). Block sizes and
        top-k choose what is read, not what is stored; an index value cache (a layer with
        sparse_disable_index_value 0) is refused."""
        f = self.f
        given = f.raw("sparse_attention_config") or {}
        if not isinstance(given, dict):
            raise KvplanError(f"{f.source}: sparse_attention_config must be an object")
        cfg = Fields(given, f"{f.source}: sparse_attention_config")
        for key in SPARSE_BENIGN:
            cfg.has(key)
        n = f.int("num_hidden_layers", why="the layer count")
        layer_types = f.str_list("layer_types")
        if layer_types is not None:
            sparse = [t == "minimax_m3_sparse" for t in layer_types]
        elif cfg.bool("use_sparse_attention", True):
            sparse = [bool(v) for v in (cfg.int_list("sparse_attention_freq", length=n) or [])]
        else:
            sparse = []
        if not any(sparse):
            return
        if len(sparse) != n:
            raise KvplanError(f"{f.source}: sparse_attention_freq must give one value per layer")
        disable = cfg.int_list("sparse_disable_index_value", length=n)
        if disable is not None and any(s and not d for s, d in zip(sparse, disable, strict=True)):
            raise KvplanError(
                f"{f.source}: sparse layers with an index value cache (sparse_disable_index_value "
                "0) are not built"
            )
        self.gqa_indexer = sparse
        self.indexer_dim = cfg.opt_int("sparse_index_dim") or f.int("index_head_dim", default=128)
        self.indexer_heads = cfg.opt_int("sparse_num_index_heads") or f.int(
            "index_n_heads", default=4
        )
        # what a sparse layer reads: the top-k blocks, the query's own (local) block forced among
        # them (vLLM's models/minimax_m3/common/ops/index_topk.py, _topk_index_kernel); without a
        # local block the tail block may or may not be picked: counted dense, as held
        block = cfg.opt_int("sparse_block_size")
        topk = cfg.opt_int("sparse_topk_blocks")
        local = cfg.opt_int("sparse_local_block", minimum=0)
        cfg.opt_int("sparse_init_block", minimum=0)  # pinned inside the top-k: the same count
        if block and topk and local:
            self.sparse_blocks = (block, topk)
        unread = sorted(k for k in given if k not in cfg.read)
        if unread:
            raise KvplanError(
                f"{f.source}: sparse_attention_config declares {', '.join(unread)}, which kvplan "
                "does not read"
            )

    def _sliding_heads(self) -> None:
        """Step-3.x: sliding layers may have their own query-head count
        (num_sliding_attention_heads, or the legacy attention_other_setting's
        num_attention_heads, which is all Step3p7TextConfig keeps of it)."""
        f = self.f
        self.sliding_heads = f.opt_int("num_sliding_attention_heads")
        other = f.raw("attention_other_setting")
        if self.sliding_heads is None and other is not None:
            if not isinstance(other, dict):
                raise KvplanError(f"{f.source}: attention_other_setting must be an object")
            inner = Fields(other, f"{f.source}: attention_other_setting")
            self.sliding_heads = inner.opt_int("num_attention_heads")
            for key in ("num_key_value_heads", "head_dim"):
                value = inner.opt_int(key)
                if value is not None and value != (self.kv if key[4] == "k" else self.head_dim):
                    raise KvplanError(
                        f"{f.source}: attention_other_setting sets {key} {value} for the sliding "
                        "layers, which transformers' Step3p7 ignores; kvplan will not guess"
                    )

    def _swa_attention(self, kind: str, head_dim: int, kv: int) -> tuple[int, int, int]:
        """MiMo-V2-Flash: values v_head_dim wide; sliding layers with swa_num_key_value_heads
        (transformers' rule, which ignores the field: twice the full layers' KV heads),
        swa_head_dim and swa_v_head_dim."""
        f = self.f
        v_dim = f.int("v_head_dim", default=128)
        if kind != "sliding":
            return head_dim, kv, v_dim
        heads = f.int("swa_num_attention_heads", default=self.heads)
        if heads != self.heads:
            raise KvplanError(f"{f.source}: swa_num_attention_heads differs from the full layers'")
        return (
            f.int("swa_head_dim", default=head_dim),
            f.int("swa_num_key_value_heads", default=2 * kv),
            f.int("swa_v_head_dim", default=v_dim),
        )

    def _sinks(self, kind: str) -> bool:
        """Whether this layer's attention has one learned sink logit per head."""
        if not self.family.swa_fields:
            return self.family.sinks
        if kind == "sliding":
            return self.f.bool("add_swa_attention_sink_bias", True)
        return self.f.bool("add_full_attention_sink_bias", False)

    def _window_letters(self) -> list[str] | None:
        """`sliding_window_pattern` given as letters (EXAONE-4.0: "LLLG", L local = sliding, G
        global = full, repeated over the layers as vLLM reads it); None for a number."""
        value = self.f.raw("sliding_window_pattern")
        if not isinstance(value, str):
            return None
        if not value or set(value) - set("LG"):
            raise KvplanError(
                f"{self.f.source}: sliding_window_pattern {value[:40]!r} is neither a number nor "
                "a string of L (local) and G (global) letters"
            )
        return ["sliding" if c == "L" else "full" for c in value]

    def _check_window_letters(self, mixers: list[str]) -> None:
        """Where layer_types lists every layer, a lettered pattern beside it must say the same."""
        letters = self._window_letters()
        if letters is None:
            return
        implied = [letters[i % len(letters)] for i in range(len(mixers))]
        if implied != mixers:
            raise KvplanError(
                f"{self.f.source}: sliding_window_pattern "
                f"{self.f.data['sliding_window_pattern']!r} and layer_types disagree on which "
                "layers slide"
            )
