"""Parameter counts, per layer and for the edges (embeddings, head, final norm), from the
structure a Builder read and its family's block details. Unique parameters, tied weights once,
buffers (e.g. DeepSeek's e_score_correction_bias) excluded: what transformers' model holds."""

from kvplan.anatomy.model import Attention, MoE, State
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.mixers import mixer_params

EXPERT_COUNT = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
EXPERT_TOP_K = (
    "num_experts_per_tok",
    "experts_per_token",
    "moe_top_k",
    "num_selected_experts",
    "top_k_experts",
)


class Counter:
    """Counts one model's parameters from a Builder's reading (kvplan.inputs.architectures.build)."""

    def __init__(self, b):
        self.b, self.f, self.fam = b, b.f, b.family
        f, fam, h = self.f, self.fam, b.hidden
        self.attn_bias = f.bool(fam.bias_field, fam.bias_default) if fam.bias_field else False
        self.mlp_bias = fam.mlp_bias or (
            f.bool(fam.mlp_bias_field, fam.mlp_bias_default) if fam.mlp_bias_field else False
        )
        self.norm_width = h * (2 if fam.norm_bias else 1)
        self.dense_width = self._dense_width()
        self.moe_info = self._moe_info() if b.num_experts else None
        if b.model_type == "falcon":
            self.norms_per_layer = 2 if getattr(b, "falcon_new_arch", False) else 1
        else:
            self.norms_per_layer = fam.norms_per_layer

    # ---- widths -----------------------------------------------------------------------------
    def _dense_width(self) -> int | None:
        f, b = self.f, self.b
        h = b.hidden
        if b.model_type == "llama4_text":
            return f.int("intermediate_size_mlp", "intermediate_size", why="the MLP")
        if b.model_type == "opt":
            return f.int("ffn_dim", "intermediate_size", why="the MLP")
        if b.model_type == "falcon":
            return f.int("ffn_hidden_size", default=4 * h)
        if b.model_type == "gpt2":
            return f.int("n_inner", default=4 * h)
        if b.model_type == "gpt_neox":
            return f.int("intermediate_size", default=4 * h)
        if b.model_type in ("mamba2", "mamba"):
            return None
        if b.model_type == "minimax_m3":
            return f.int("dense_intermediate_size", why="the dense MLP")
        if b.model_type == "lfm2":
            return lfm2_width(f)
        return f.opt_int("intermediate_size", "ffn_dim", "ffn_hidden_size", "n_inner")

    def _moe_info(self) -> dict:
        f, b = self.f, self.b
        top_k = f.int(*EXPERT_TOP_K, why="the active parameter count")
        if top_k > b.num_experts:
            raise KvplanError(
                f"{f.source}: num_experts_per_tok {top_k} exceeds {b.num_experts} experts"
            )
        width = f.opt_int("moe_intermediate_size", "expert_intermediate_size")
        if self.fam.sparse_config:  # MiniMaxM3VLExperts are intermediate_size wide
            experts = f.int("intermediate_size", why="the expert width")
            if width is not None and width != experts:
                raise KvplanError(
                    f"{f.source}: moe_intermediate_size {width} and intermediate_size {experts} "
                    "disagree on the expert width (transformers uses intermediate_size)"
                )
            width = experts
        if width is None:
            width = f.int("intermediate_size", why="the expert width")
        shared_width = 0
        shared_gate = False
        shared_kind = self.fam.mlp
        if self.fam.llama4_shared:
            shared_width = f.int("intermediate_size", why="Llama 4's shared expert")
        elif self.fam.sparse_config and f.has("shared_intermediate_size"):  # MiniMax-M3
            shared_width = f.int("shared_intermediate_size", minimum=0) * f.int(
                "n_shared_experts", default=1, minimum=0
            )
        elif self.fam.shared_experts_field and f.has(self.fam.shared_experts_field):
            shared_width = f.int(self.fam.shared_experts_field, minimum=0) * width
        elif f.has("share_expert_dim"):  # Step-3.x: one shared expert of this width
            shared_width = f.int("share_expert_dim", minimum=0)
            f.has("n_shared_experts")
        elif f.has("shared_expert_intermediate_size"):
            shared_width = f.int("shared_expert_intermediate_size", minimum=0)
            shared_gate = self.fam.shared_expert_gate and shared_width > 0
        elif f.has("moe_shared_expert_intermediate_size"):
            shared_width = f.int("moe_shared_expert_intermediate_size") * f.int(
                "n_shared_experts", default=1
            )
        elif f.has("n_shared_experts"):
            shared_width = f.int("n_shared_experts", minimum=0) * width
        b.decided.append(
            (
                "experts",
                "routed experts from "
                + "/".join(k for k in EXPERT_COUNT if f.data.get(k))
                + ", num_experts_per_tok, the expert width"
                + (", shared experts" if shared_width else ""),
            )
        )
        latent = f.opt_int("moe_latent_size")  # experts run in a latent width (Nemotron-3)
        return {
            "latent": latent,
            "top_k": top_k,
            "width": width,
            "shared_width": shared_width,
            "shared_gate": shared_gate,
            "shared_kind": shared_kind,
        }

    # ---- blocks -----------------------------------------------------------------------------
    def mlp(
        self, width: int, kind: str | None = None, bias: bool | None = None, h: int | None = None
    ) -> int:
        h = h or self.b.hidden
        kind = kind or self.fam.mlp
        bias = self.mlp_bias if bias is None else bias
        if kind == "gated":
            return 3 * h * width + ((2 * width + h) if bias else 0)
        return 2 * h * width + ((width + h) if bias else 0)

    def per_expert(self) -> int:
        info = self.moe_info
        assert info is not None, "asked of a model with routed experts"
        h = info["latent"] or self.b.hidden
        w = info["width"]
        if self.fam.expert_bias:  # fused gate_up with biases, down with bias (gpt-oss)
            return h * 2 * w + 2 * w + w * h + h
        return self.mlp(w, bias=False, h=h)

    def attention(self, a: Attention) -> int:
        if a.mla_kv_lora_rank:
            return self.mla(a)
        fam, h = self.fam, self.b.hidden
        heads, kv, hd = a.num_q_heads, a.num_kv_heads, a.head_dim
        q_factor = 2 if fam.q_gate else 1
        qkv_bias = fam.qkv_bias or self.attn_bias
        o_bias = fam.o_bias or (self.attn_bias and not fam.qkv_bias_field_only)
        v_dim = a.v_head_dim  # values may be narrower than keys (MiMo-V2-Flash: 128 vs 192)
        q = h * heads * hd * q_factor + (heads * hd * q_factor if qkv_bias else 0)
        k = h * kv * hd + (kv * hd if qkv_bias else 0)
        v = h * kv * v_dim + (kv * v_dim if qkv_bias else 0)
        if a.shared_kv_proj:  # values are the keys' projection (Gemma-4's attention_k_eq_v)
            v = 0
        o = heads * v_dim * h + (h if o_bias else 0)
        if a.indexer_head_dim:  # MiniMax-M3's indexer: q and k from hidden, their norms
            width = a.indexer_head_dim
            o += h * a.indexer_num_heads * width + h * width + 2 * width
        norm = 0
        qk_norm = fam.qk_norm
        if qk_norm and fam.qk_norm_field and not self.f.bool(fam.qk_norm_field, False):
            qk_norm = None
        if qk_norm == "head":
            norm = 2 * hd
        elif qk_norm == "full":
            norm = heads * hd + kv * hd
        return q + k + v + o + norm + (heads if a.sinks else 0) + self.head_gate(heads, hd)

    def head_gate(self, heads: int, head_dim: int) -> int:
        """Step-3.x's g_proj: hidden x heads (`gating` true or "per-head"), or hidden x heads x
        head_dim for a per-element gate; none without the family's gate."""
        if not self.fam.head_gate:
            return 0
        gating = self.f.raw("gating", default=True)
        if gating is False:
            return 0
        width = heads if gating is True or gating == "per-head" else heads * head_dim
        return self.b.hidden * width

    def mla(self, a: Attention) -> int:
        h, heads = self.b.hidden, a.num_q_heads
        kv_lora, rope = a.mla_kv_lora_rank, a.mla_rope_dim
        nope, v_dim = a.qk_head_dim - rope, a.v_head_dim
        q_lora = a.mla_q_lora_rank
        if q_lora:
            q = h * q_lora + q_lora + q_lora * heads * (nope + rope)
        else:
            q = h * heads * (nope + rope)
        kv = h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim)
        o = heads * v_dim * h
        return q + kv + o + indexer_params(a, h)

    def layer(self, plan, attention: Attention | None, state: State | None) -> tuple:
        """One layer's parameters by part."""
        b, parts = self.b, {}
        if b.model_type == "zamba2":
            return self.zamba2_layer(attention, state)
        if attention is not None:
            parts["attention"] = self.attention(attention)
        if state is not None:
            parts["mixer"] = mixer_params(
                self.f, state, b.hidden, self.fam.mixer_norm_default, self.fam.mamba1_inner_norms
            )
        if plan.ffn == "dense" and plan.ffn_width:  # a width of its own (DeciLM blocks)
            parts["mlp"] = self.mlp(plan.ffn_width)
        elif plan.ffn == "dense":
            if self.dense_width is None:
                raise KvplanError(f"{self.f.source}: config lacks intermediate_size (the MLP)")
            parts["mlp"] = self.mlp(self.dense_width)
        elif plan.ffn == "moe":
            info = self.moe_info
            if info is None:
                raise KvplanError(f"{self.f.source}: MoE layers but no expert count in the config")
            parts["experts"] = b.num_experts * self.per_expert()
            parts["router"] = b.num_experts * b.hidden + (
                b.num_experts if self.fam.expert_bias else 0
            )
            if info["latent"]:  # into and out of the experts' latent width
                parts["expert_projections"] = 2 * b.hidden * info["latent"]
            if info["shared_width"]:
                parts["shared_experts"] = self.mlp(info["shared_width"], info["shared_kind"], False)
                if info["shared_gate"]:
                    parts["shared_experts"] += b.hidden
        if plan.ffn == "moe" and b.moe_block:  # Gemma-4: the dense MLP runs beside the experts
            if self.dense_width is None:
                raise KvplanError(
                    f"{self.f.source}: config lacks intermediate_size (the MLP beside the experts)"
                )
            parts["mlp"] = self.mlp(self.dense_width)
            parts["router"] += b.hidden + b.num_experts  # scale per unit, per-expert scale
            parts["norms"] = 3 * self.norm_width  # pre-/post-FFN norms of the second branch
        if b.model_type == "granitemoehybrid":  # a dense shared MLP on every layer
            width = self.f.int("shared_intermediate_size", default=1024)
            parts["mlp"] = parts.get("mlp", 0) + self.mlp(width, "gated", False)
        norms = self.norms_per_layer
        if self.fam.norm_per_part:  # a norm before each part the layer has
            norms = (attention is not None) + (plan.ffn != "none")
        parts["norms"] = parts.get("norms", 0) + norms * self.norm_width
        return tuple((k, v) for k, v in parts.items() if v)

    def zamba2_layer(self, attention: Attention | None, state: State | None) -> tuple:
        """A Zamba2 layer: its Mamba-2 mixer and norm; a hybrid layer adds the projection of the
        shared block's output (hidden x hidden) and its own LoRA adapters (the shared blocks
        themselves are counted once, in edges())."""
        f, h = self.f, self.b.hidden
        assert state is not None, "every Zamba2 layer has its Mamba-2 mixer"
        parts = {"mixer": mixer_params(f, state, h, self.fam.mixer_norm_default), "norms": h}
        if attention is not None:
            rank = f.int("adapter_rank", default=128)
            width = self.dense_width
            adapters = h * rank + rank * 2 * width  # gate_up adapter of the shared MLP
            if f.bool("use_shared_attention_adapter", False):
                wide = 2 * h
                adapters += 3 * (wide * rank + rank * wide)  # q, k, v adapters
            parts["attention"] = h * h + adapters
        return tuple((k, v) for k, v in parts.items() if v)

    def zamba2_shared_blocks(self) -> int:
        """Zamba2's shared transformer blocks: attention over concat(hidden, embedding) (2h wide),
        a gated MLP, two norms; counted once per block, whatever the number of layers using it."""
        f, h = self.f, self.b.hidden
        heads, kv, hd = self.b.heads, self.b.kv, self.b.head_dim
        attention = 2 * h * heads * hd + 2 * (2 * h * kv * hd) + heads * hd * h
        mlp = h * 2 * self.dense_width + self.dense_width * h
        return f.int("num_mem_blocks", default=1) * (attention + mlp + 2 * h + h)

    def edges(self) -> dict[str, int]:
        """Embeddings, positions, the output head and the final norm."""
        f, b, fam = self.f, self.b, self.fam
        h, vocab = b.hidden, b.vocab
        parts = {"embedding": 0, "lm_head": 0, "norms": 0}
        embed_width = h
        if b.model_type == "opt":
            embed_width = f.int("word_embed_proj_dim", default=h)
            if embed_width != h:
                parts["embedding"] += 2 * h * embed_width  # project_in and project_out
        parts["embedding"] += vocab * embed_width
        if fam.learned_positions is not None:
            rows = f.int("n_positions", "max_position_embeddings", default=1024)
            parts["embedding"] += (rows + fam.learned_positions) * h
        if not b.tied:
            parts["lm_head"] += vocab * embed_width + (vocab if fam.lm_head_bias else 0)
        final = fam.final_norms
        if b.model_type == "opt" and not f.bool("do_layer_norm_before", True):
            final = 0
        parts["norms"] += final * self.norm_width
        if b.model_type == "zamba2":
            parts["shared_blocks"] = self.zamba2_shared_blocks()
        return parts

    def moe(self, plans) -> MoE | None:
        if self.moe_info is None:
            return None
        n_moe = sum(1 for p in plans if p.ffn == "moe")
        if not n_moe:
            return None
        info = self.moe_info
        return MoE(
            self.b.num_experts,
            info["top_k"],
            self.per_expert(),
            n_moe,
            info["width"],
            info["shared_width"],
        )


def lfm2_width(f) -> int:
    """LFM2's MLP width (transformers' Lfm2MLP): block_ff_dim, with block_auto_adjust_ff_dim
    two thirds of it, scaled by block_ffn_dim_multiplier and then rounded up to
    block_multiple_of (the rounding only with a multiplier)."""
    width = f.int("block_ff_dim", "intermediate_size", why="the MLP")
    if f.bool("block_auto_adjust_ff_dim", False):
        width = int(2 * width / 3)
        multiplier = f.raw("block_ffn_dim_multiplier")
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)):
                raise KvplanError(f"{f.source}: block_ffn_dim_multiplier must be a number")
            multiple = f.int("block_multiple_of", default=256)
            width = multiple * -(-int(multiplier * width) // multiple)
    return width


def indexer_params(a: Attention, hidden: int) -> int:
    """A DSA indexer's weights: query up-projection, key projection with its norm, head weights."""
    if not a.indexer_head_dim:
        return 0
    heads, width = a.indexer_num_heads, a.indexer_head_dim
    q_in = a.mla_q_lora_rank or hidden
    return q_in * heads * width + hidden * width + 2 * width + hidden * heads
