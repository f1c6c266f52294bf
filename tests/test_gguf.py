"""GGUF as a model input: small header-only files written with the `gguf` package (no downloads),
checked against hand-computed ggml sizes and against the bundled config.json of each family."""

from __future__ import annotations

import json

import pytest

from kvplan.dtypes import GGML_TYPES, LLAMA_CACHE_TYPES, KvFormat, ggml_row_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.sources import load_model

from gguf_fixtures import BLOCKS, bundled, convert, tensor_bytes, tensors_for, write_gguf
from helpers import run_cli

# ggml.c type_traits, by hand: (values per block, bytes per block) of llama.cpp's cache types.
CACHE_BLOCKS = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 2 + 32),  # fp16 scale + 32 int8
    "q4_0": (32, 2 + 16),  # fp16 scale + 32 nibbles
    "q4_1": (32, 2 + 2 + 16),  # fp16 scale + fp16 min + nibbles
    "iq4_nl": (32, 2 + 16),
    "q5_0": (32, 2 + 4 + 16),  # fp16 scale + 32 high bits + nibbles
    "q5_1": (32, 2 + 2 + 4 + 16),
}


def test_cache_types_carry_their_block_scales():
    assert set(CACHE_BLOCKS) == set(LLAMA_CACHE_TYPES)
    for name, (block, size) in CACHE_BLOCKS.items():
        assert (GGML_TYPES[name].block_size, GGML_TYPES[name].block_bytes) == (block, size)
        assert ggml_row_bytes(name, 4096) == 4096 // block * size
    # a 128-wide head in q8_0 is 136 bytes, not 128; q4_0 72, not 64
    assert KvFormat("q8_0").head_vector_bytes(128) == 136
    assert KvFormat("q4_0").head_vector_bytes(128) == 72


def test_weight_bytes_are_the_sum_of_the_tensors_ggml_sizes(tmp_path):
    arch, keys = convert(bundled("llama-3.1-8b"))
    tensors = tensors_for(arch, keys, "Q4_K")
    tensors[5] = (tensors[5][0], tensors[5][1], "Q6_K")  # a mixed file, as Q4_K_M is
    path = tmp_path / "llama.gguf"
    write_gguf(path, arch, {**keys, "general.file_type": 15}, tensors)
    spec = load_model(str(path))
    expected = sum(tensor_bytes(t, _values(ne)) for _, ne, t in tensors)
    assert spec.stored.total_bytes == expected
    assert spec.stored.file_type == "Q4_K_M"
    dtype, _ = resolve_weights_dtype(spec, "auto")
    assert dtype == "checkpoint" and weight_bytes(spec, dtype) == expected
    assert spec.params_total == sum(_values(ne) for _, ne, _ in tensors)
    # a block of the 4096 x 14336 MLP in q4_K: 144 bytes per 256 values
    assert tensor_bytes("Q4_K", 4096 * 14336) == 4096 * 14336 // 256 * 144


def _values(ne) -> int:
    out = 1
    for d in ne:
        out *= d
    return out


def test_split_gguf_is_one_model(tmp_path):
    arch, keys = convert(bundled("qwen3-30b-a3b"))
    tensors = tensors_for(arch, keys, "Q8_0")
    whole = tmp_path / "whole.gguf"
    write_gguf(whole, arch, keys, tensors)
    write_gguf(tmp_path / "split.gguf", arch, keys, tensors, split_max_tensors=200)
    shards = sorted(tmp_path.glob("split-*-of-*.gguf"))
    assert len(shards) > 1
    one, split = load_model(str(whole)), load_model(str(shards[-1]))
    assert split.stored.total_bytes == one.stored.total_bytes
    assert split.param_parts == one.param_parts and split.layers == one.layers
    shards[1].unlink()
    code, _, err = run_cli("size", str(shards[0]))
    assert code == 2 and "split GGUF is missing" in err


# Families whose GGUF (as convert_hf_to_gguf.py writes it) and config.json give one anatomy.
SAME = [
    "llama-3.1-8b",
    "qwen2.5-7b",
    "qwen3-30b-a3b",
    "gemma-2-9b",
    "gemma-3-27b",
    "gemma-3-4b",
    "gpt-oss-20b",
    "deepseek-v3",
    "deepseek-v2-lite",
    "kimi-k2",
    "qwen3-next-80b-a3b",
    "qwen3.5-27b",
    "qwen3.5-35b-a3b",
    "nemotron-h-56b",
    "nemotron-3-nano-30b",
    "llama-4-scout",
]
# Mamba-2 (mistralai/Mamba-Codestral-7B-v0.1's Mamba2Config fields): not bundled.
MAMBA2 = {
    "model_type": "mamba2",
    "hidden_size": 4096,
    "num_hidden_layers": 64,
    "num_heads": 128,
    "head_dim": 64,
    "state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "vocab_size": 32768,
    "torch_dtype": "bfloat16",
}


def anatomy(spec) -> list:
    """What each layer caches, dtypes aside (llama.cpp keeps state in f32, KV in f16)."""
    out = []
    for layer in spec.layers:
        a, s = layer.attention, layer.state
        out.append(
            (
                a
                and (
                    a.kind,
                    a.num_q_heads,
                    a.num_kv_heads,
                    a.head_dim,
                    a.head_dim_v,
                    a.qk_head_dim,
                    a.v_head_dim,
                    a.window,
                    a.mla_kv_lora_rank,
                    a.mla_rope_dim,
                ),
                s and (s.kind, s.conv_kernel, s.elements()),
            )
        )
    return out


def _gguf_of(cfg: dict, path):
    arch, keys = convert(cfg)
    write_gguf(path, arch, keys, tensors_for(arch, keys))
    return load_model(str(path))


@pytest.mark.parametrize("name", SAME)
def test_gguf_and_config_give_the_same_anatomy(name, tmp_path):
    spec = _gguf_of(bundled(name), tmp_path / f"{name}.gguf")
    assert anatomy(spec) == anatomy(load_model(name))


def test_mamba2_gguf_and_config_agree(tmp_path):
    from kvplan.inputs.architectures import build_model

    spec = _gguf_of(MAMBA2, tmp_path / "mamba2.gguf")
    assert anatomy(spec) == anatomy(build_model(MAMBA2, "mamba2"))
    assert all(layer.attention is None for layer in spec.layers)


def test_where_llama_cpp_differs_from_transformers(tmp_path):
    # Mistral 7B v0.1 converts to the llama architecture: llama.cpp keeps every token.
    spec = _gguf_of(bundled("mistral-7b-v0.1"), tmp_path / "mistral.gguf")
    assert {layer.attention.kind.value for layer in spec.layers} == {"full"}
    # GLM-4.5's NextN block is a block of the file, with its own KV cache.
    spec = _gguf_of(bundled("glm-4.5-air"), tmp_path / "glm.gguf")
    assert spec.num_layers == 47 == load_model("glm-4.5-air").num_layers + 1
    assert any(n.id == "gguf-nextn-layers" for n in spec.notes)


def test_gguf_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    code, _, err = run_cli("size", str(bad))
    assert code == 2 and "not a GGUF file" in err and "Traceback" not in err
    code, _, err = run_cli("size", str(tmp_path / "absent.gguf"))
    assert code == 2 and "no such GGUF file" in err
    write_gguf(tmp_path / "bert.gguf", "bert", {"block_count": 12, "embedding_length": 384}, [])
    code, _, err = run_cli("size", str(tmp_path / "bert.gguf"))
    assert code == 2 and "no KV cache" in err
    write_gguf(tmp_path / "x.gguf", "made-up", {"block_count": 2, "embedding_length": 64}, [])
    code, _, err = run_cli("size", str(tmp_path / "x.gguf"))
    assert code == 2 and "not one kvplan knows" in err


def test_every_command_takes_a_gguf(tmp_path):
    spec_path = tmp_path / "gpt-oss.gguf"
    _gguf_of(bundled("gpt-oss-20b"), spec_path)
    code, out, err = run_cli(
        "size", str(spec_path), "--ctx", "8k", "--kv-dtype", "q8_0", "-f", "json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert "gguf-file" in {n["id"] for n in data["notes"]}
    for argv in (
        ("capacity", str(spec_path), "--gpu", "rtx-3090", "--ctx", "8k"),
        ("roofline", str(spec_path), "--gpu", "rtx-3090", "--ctx", "8k"),
    ):
        code, _, err = run_cli(*argv)
        assert code == 0, err


def test_block_table_matches_the_gguf_package():
    """kvplan's table against the gguf package's GGML_QUANT_SIZES, for every type both know."""
    import gguf

    for t in GGML_TYPES.values():
        try:
            quant = gguf.GGMLQuantizationType(t.type_id)
        except ValueError:
            continue  # newer than the installed package (q2_0)
        assert gguf.GGML_QUANT_SIZES[quant] == (t.block_size, t.block_bytes), t.name
    assert BLOCKS["Q4_K"] == (GGML_TYPES["q4_K"].block_size, GGML_TYPES["q4_K"].block_bytes)
