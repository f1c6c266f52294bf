"""Small GGUF files written with the `gguf` package, header only (metadata and tensor table, no
tensor data): what llama.cpp's convert_hf_to_gguf.py writes for a config.json, family by family
(conversion/*.py at upstream 82bb48500), and a tensor table in chosen ggml types.

The keys follow the converter, not kvplan.inputs.gguf: these files are the independent side of
the "a GGUF and its config.json give the same anatomy" tests."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

CONFIGS = Path(__file__).resolve().parents[1] / "model_configs"

# (values per block, bytes per block), written out here from ggml.c's type_traits so the tests
# do not read kvplan's own table.
BLOCKS = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "Q3_K": (256, 110),
    "Q2_K": (256, 84),
    "IQ4_XS": (256, 136),
    "IQ4_NL": (32, 18),
    "MXFP4": (32, 17),
}


def bundled(name: str) -> dict:
    index = json.loads((CONFIGS / "index.json").read_text())
    return json.loads((CONFIGS / index["models"][name]["file"]).read_text())


def tensor_bytes(type_name: str, values: int) -> int:
    block, size = BLOCKS[type_name]
    assert values % block == 0
    return values // block * size


def add_keys(writer, arch: str, keys: dict) -> None:
    """`keys` into a GGUFWriter: {arch}-relative unless namespaced (general., tokenizer.)."""
    for key, value in keys.items():
        full = key if key.split(".")[0] in ("general", "tokenizer") else f"{arch}.{key}"
        if isinstance(value, bool):
            writer.add_bool(full, value)
        elif isinstance(value, int):
            writer.add_uint32(full, value)
        elif isinstance(value, float):
            writer.add_float32(full, value)
        elif isinstance(value, str):
            writer.add_string(full, value)
        else:
            writer.add_array(full, list(value))


def write_gguf(
    path: Path,
    arch: str,
    keys: dict,
    tensors: list[tuple[str, tuple[int, ...], str]],
    *,
    split_max_tensors: int = 0,
) -> None:
    """A header-only GGUF: `keys` are {arch}-relative unless they contain a dot-prefixed
    namespace (general., tokenizer.); tensors are (name, ne (ne0 first), ggml type name)."""
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    add_keys(writer, arch, keys)
    for name, ne, type_name in tensors:
        values = int(np.prod(ne))
        writer.add_tensor_info(
            name,
            tuple(reversed(ne)),
            np.dtype(np.float32),
            tensor_bytes(type_name, values),
            raw_dtype=gguf.GGMLQuantizationType[type_name],
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def _text(cfg: dict) -> dict:
    return cfg.get("text_config", cfg)


def _base(cfg: dict) -> dict:
    """TextModel.set_gguf_parameters (conversion/base.py): the keys every family writes."""
    keys = {
        "block_count": cfg["num_hidden_layers"],
        "context_length": cfg.get("max_position_embeddings", 4096),
        "embedding_length": cfg["hidden_size"],
        "attention.head_count": cfg["num_attention_heads"],
        "vocab_size": cfg.get("vocab_size", 262208),  # Gemma 3's text config omits it
    }
    if "intermediate_size" in cfg:
        keys["feed_forward_length"] = cfg["intermediate_size"]
    if "num_key_value_heads" in cfg:
        keys["attention.head_count_kv"] = cfg["num_key_value_heads"]
    for src, dst in (
        ("num_local_experts", "expert_count"),
        ("num_experts", "expert_count"),
        ("n_routed_experts", "expert_count"),
        ("num_experts_per_tok", "expert_used_count"),
    ):
        if src in cfg:
            keys[dst] = cfg[src]
    if cfg.get("head_dim") is not None:
        keys["attention.key_length"] = keys["attention.value_length"] = cfg["head_dim"]
    return keys


def convert(cfg: dict) -> tuple[str, dict]:
    """(GGUF architecture, keys) as convert_hf_to_gguf.py writes them for this config."""
    text = _text(cfg)
    mt = text["model_type"]
    keys = _base(text) if mt != "mamba2" else {}
    if mt in ("llama", "mistral"):  # MistralModel is LlamaModel: no sliding_window key
        keys["rope.dimension_count"] = text["hidden_size"] // text["num_attention_heads"]
        return "llama", keys
    if mt == "qwen2":
        return "qwen2", keys
    if mt == "qwen3":  # Qwen3Model is Qwen2Model: head_dim as key/value length
        return "qwen3", keys
    if mt == "llama4_text":  # Llama4Model: the chunk size is llama.cpp's own (8192)
        keys["expert_feed_forward_length"] = text["intermediate_size"]
        keys["interleave_moe_layer_step"] = text["interleave_moe_layer_step"]
        return "llama4", keys
    if mt == "glm4_moe":  # Glm4MoeModel: the NextN layers are blocks of the file
        nextn = text.get("num_nextn_predict_layers", 0)
        keys["block_count"] = text["num_hidden_layers"] + nextn
        keys["nextn_predict_layers"] = nextn
        keys["expert_feed_forward_length"] = text["moe_intermediate_size"]
        keys["leading_dense_block_count"] = text["first_k_dense_replace"]
        return "glm4moe", keys
    if mt == "qwen3_moe":
        keys["expert_feed_forward_length"] = text["moe_intermediate_size"]
        return "qwen3moe", keys
    if mt == "gemma2":
        keys["sliding_window"] = text["sliding_window"]  # conversion/gemma.py Gemma2Model
        keys["attention.sliding_window"] = keys.pop("sliding_window")
        return "gemma2", keys
    if mt == "gemma3_text":  # Gemma3Model: sliding_window only, no pattern key
        keys["attention.sliding_window"] = text["sliding_window"]
        keys["attention.key_length"] = keys["attention.value_length"] = text["head_dim"]
        return "gemma3", keys
    if mt == "gpt_oss":  # GptOssModel: sliding_window and the expert width
        keys["attention.sliding_window"] = text["sliding_window"]
        keys["expert_feed_forward_length"] = text["intermediate_size"]
        return "gpt-oss", keys
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2"):  # conversion/deepseek.py (MLA)
        kv_lora, rope = text["kv_lora_rank"], text["qk_rope_head_dim"]
        keys.update(
            {
                "attention.head_count_kv": 1,
                "attention.key_length": kv_lora + rope,
                "attention.value_length": kv_lora,
                "attention.key_length_mla": text["qk_nope_head_dim"] + rope,
                "attention.value_length_mla": text["v_head_dim"],
                "attention.kv_lora_rank": kv_lora,
                "rope.dimension_count": rope,
                "leading_dense_block_count": text["first_k_dense_replace"],
                "expert_feed_forward_length": text["moe_intermediate_size"],
                "expert_shared_count": text["n_shared_experts"],
            }
        )
        if text.get("q_lora_rank"):
            keys["attention.q_lora_rank"] = text["q_lora_rank"]
        return "deepseek2", keys
    if mt in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):  # conversion/qwen.py
        keys.update(
            {
                "attention.key_length": text["head_dim"],
                "attention.value_length": text["head_dim"],
                "ssm.conv_kernel": text["linear_conv_kernel_dim"],
                "ssm.state_size": text["linear_key_head_dim"],
                "ssm.group_count": text["linear_num_key_heads"],
                "ssm.time_step_rank": text["linear_num_value_heads"],
                "ssm.inner_size": text["linear_value_head_dim"] * text["linear_num_value_heads"],
                "full_attention_interval": text.get("full_attention_interval", 4),
            }
        )
        if "moe_intermediate_size" in text:
            keys["expert_feed_forward_length"] = text["moe_intermediate_size"]
        arch = {"qwen3_next": "qwen3next", "qwen3_5_text": "qwen35"}.get(mt, "qwen35moe")
        return arch, keys
    if mt == "nemotron_h":  # conversion/nemotron.py NemotronHModel over GraniteHybridModel
        pattern = text.get("hybrid_override_pattern") or text.get("layers_block_type")
        moe = "num_experts_per_tok" in text
        attn = {i for i, v in enumerate(pattern) if v in ("*", "attention")}
        mlp = {i for i, v in enumerate(pattern) if v in ("-", "E", "mlp", "moe")}
        n = len(pattern)
        heads_kv = text["num_key_value_heads"]
        width = text["moe_intermediate_size"] if moe else text["intermediate_size"]
        head_dim = text.get("head_dim", text.get("attention_head_dim"))
        keys.update(
            {
                "attention.head_count_kv": [heads_kv if i in attn else 0 for i in range(n)],
                "feed_forward_length": [width if i in mlp else 0 for i in range(n)],
                "attention.key_length": head_dim,
                "attention.value_length": head_dim,
                "ssm.conv_kernel": text["conv_kernel"],
                "ssm.state_size": text["ssm_state_size"],
                "ssm.group_count": text["n_groups"],
                "ssm.time_step_rank": text["mamba_num_heads"],
                "ssm.inner_size": text["mamba_num_heads"] * text["mamba_head_dim"],
            }
        )
        if moe:
            keys["expert_feed_forward_length"] = text["moe_intermediate_size"]
            keys["expert_count"] = text["n_routed_experts"]
        return ("nemotron_h_moe" if moe else "nemotron_h"), keys
    if mt == "mamba2":  # conversion/mamba.py Mamba2Model: head_count 0
        inner = text.get("expand", 2) * text["hidden_size"]
        keys = {
            "block_count": text["num_hidden_layers"],
            "context_length": 2**20,
            "embedding_length": text["hidden_size"],
            "feed_forward_length": 0,
            "attention.head_count": 0,
            "ssm.conv_kernel": text.get("conv_kernel", 4),
            "ssm.inner_size": inner,
            "ssm.state_size": text.get("state_size", 128),
            "ssm.time_step_rank": inner // text.get("head_dim", 64),
            "ssm.group_count": text.get("n_groups", 1),
        }
        return "mamba2", keys
    raise ValueError(f"no converter for {mt}")


def tensors_for(arch: str, keys: dict, weight_type: str = "Q8_0") -> list:
    """A plausible tensor table: embeddings, per-layer attention/state/MLP or experts in
    `weight_type` (F16 where a row is not a whole number of its blocks), norms in F32."""
    block = BLOCKS[weight_type][0]
    n = keys["block_count"]
    h = keys["embedding_length"]
    vocab = keys.get("vocab_size", 32000)

    def t(name, ne):
        return (name, ne, weight_type if ne[0] % block == 0 else "F16")

    out = [t("token_embd.weight", (h, vocab)), ("output_norm.weight", (h,), "F32")]
    out.append(t("output.weight", (h, vocab)))
    heads = keys.get("attention.head_count", 0)
    kv = keys.get("attention.head_count_kv", heads)
    ff = keys.get("feed_forward_length", 0)
    experts = keys.get("expert_count", 0)
    for il in range(n):
        p = f"blk.{il}."
        out.append((p + "attn_norm.weight", (h,), "F32"))
        kv_il = kv[il] if isinstance(kv, list) else kv
        ff_il = ff[il] if isinstance(ff, list) else ff
        if heads and kv_il:
            dk = keys.get("attention.key_length", h // heads)
            out += [
                t(p + "attn_q.weight", (h, heads * dk)),
                t(p + "attn_k.weight", (h, kv_il * dk)),
                t(p + "attn_v.weight", (h, kv_il * dk)),
                t(p + "attn_output.weight", (heads * dk, h)),
            ]
        if "ssm.inner_size" in keys and not kv_il:
            inner = keys["ssm.inner_size"]
            out += [t(p + "ssm_in.weight", (h, 2 * inner)), t(p + "ssm_out.weight", (inner, h))]
        if experts and ff_il != 0 and arch not in ("nemotron_h",):
            width = keys.get("expert_feed_forward_length", ff_il)
            out += [
                (p + "ffn_gate_inp.weight", (h, experts), "F32"),
                t(p + "ffn_gate_exps.weight", (h, width, experts)),
                t(p + "ffn_up_exps.weight", (h, width, experts)),
                t(p + "ffn_down_exps.weight", (width, h, experts)),
            ]
        elif ff_il:
            out += [
                t(p + "ffn_gate.weight", (h, ff_il)),
                t(p + "ffn_up.weight", (h, ff_il)),
                t(p + "ffn_down.weight", (ff_il, h)),
            ]
    return out
