"""Hostile GGUF headers: absurd counts and widths, zero or uneven KV heads, truncated files and
split names. Each is a one-line error (exit 2) naming the key, or, for a per-layer 0 KV heads,
llama.cpp's reading (that layer keeps no cache)."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from kvplan.inputs.sources import load_model

from gguf_fixtures import bundled, convert, tensors_for, write_gguf
from helpers import run_cli

# A Llama-3.1-8B-shaped header: 32 layers, 32 query heads over 8 KV heads, width 4096.
BASE = {
    "llama.block_count": ("u32", 32),
    "llama.context_length": ("u32", 8192),
    "llama.embedding_length": ("u32", 4096),
    "llama.feed_forward_length": ("u32", 14336),
    "llama.attention.head_count": ("u32", 32),
    "llama.attention.head_count_kv": ("u32", 8),
    "llama.vocab_size": ("u32", 128256),
}


def write(path, **changes) -> str:
    """BASE with `changes` (key without "llama." -> (type, value), or None to drop it)."""
    keys = dict(BASE)
    for key, value in changes.items():
        full = "llama." + key.replace("__", ".")
        if value is None:
            keys.pop(full, None)
        else:
            keys[full] = value
    writer = gguf.GGUFWriter(str(path), "llama")
    add = {"u32": writer.add_uint32, "u64": writer.add_uint64, "arr": writer.add_array}
    for key, (kind, value) in keys.items():
        if key.startswith("llama.split."):
            key = key.removeprefix("llama.")
        add[kind](key, value)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def error_of(path) -> str:
    code, out, err = run_cli("size", path)
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    assert err.startswith("error: ") and err.count("\n") <= 1 and len(err) < 400, err
    return err


@pytest.mark.parametrize("count", [2**63, 2**32 - 1, 10**7])
def test_absurd_block_count_is_bounded_like_a_config(tmp_path, count):
    err = error_of(write(tmp_path / "m.gguf", block_count=("u64", count)))
    assert "llama.block_count" in err and "4,096" in err


def test_absurd_width_is_bounded_like_a_config(tmp_path):
    err = error_of(write(tmp_path / "m.gguf", embedding_length=("u64", 2**64 - 1)))
    assert "llama.embedding_length" in err and "2,147,483,648" in err


def test_zero_key_length_is_an_error(tmp_path):
    err = error_of(write(tmp_path / "m.gguf", attention__key_length=("u32", 0)))
    assert "llama.attention.key_length is 0" in err


def test_zero_kv_heads_everywhere_is_an_error(tmp_path):
    err = error_of(write(tmp_path / "a.gguf", attention__head_count_kv=("u32", 0)))
    assert "head_count_kv is 0 for every layer" in err
    err = error_of(write(tmp_path / "b.gguf", attention__head_count_kv=("arr", [0] * 32)))
    assert "head_count_kv is 0 for every layer" in err


def test_a_layer_with_zero_kv_heads_keeps_no_cache(tmp_path):
    # llama.cpp sizes layer il's cache as head_dim x head_count_kv(il): 0 heads, 0 bytes.
    kv = [8, 0] * 16
    spec = load_model(write(tmp_path / "m.gguf", attention__head_count_kv=("arr", kv)))
    assert [layer.attention is not None for layer in spec.layers] == [True, False] * 16
    assert spec.layers[0].attention.num_kv_heads == 8
    # 16 layers x K and V x 8 heads x 128 x 2 bytes (fp16) = 65,536 B/token, half of Llama-3.1-8B.
    assert (
        sum(
            2 * layer.attention.num_kv_heads * layer.attention.head_dim * 2
            for layer in spec.layers
            if layer.attention
        )
        == 65_536
    )


def test_per_layer_array_must_have_one_value_per_layer(tmp_path):
    # llama.cpp's get_key_or_arr: "key ... has wrong array length; expected 32, got 33"
    err = error_of(write(tmp_path / "m.gguf", attention__head_count_kv=("arr", [8] * 33)))
    assert "llama.attention.head_count_kv has 33 values for 32 layers" in err


def test_heads_must_be_a_multiple_of_kv_heads(tmp_path):
    err = error_of(write(tmp_path / "m.gguf", attention__head_count_kv=("u32", 7)))
    assert "32 attention heads over 7 KV heads" in err and "head_count_kv" in err


def test_truncated_file_says_so(tmp_path):
    data = open(write(tmp_path / "whole.gguf"), "rb").read()
    for size in (10, 100, 200):
        cut = tmp_path / f"cut{size}.gguf"
        cut.write_bytes(data[:size])
        err = error_of(str(cut))
        assert "truncated or corrupt GGUF" in err and "dtype" not in err and "index" not in err


def test_split_with_many_missing_parts_is_one_short_line(tmp_path):
    path = write(tmp_path / "m-00001-of-00100.gguf", split__count=("u32", 100))
    err = error_of(path)
    assert "missing 99 of 100 parts, e.g. m-00002-of-00100.gguf, m-00003-of-00100.gguf, " in err


def test_split_count_is_bounded(tmp_path):
    path = write(tmp_path / "m-00001-of-99999.gguf", split__count=("u64", 2**31))
    assert "65,535" in error_of(path)
    # The name and split.count must agree (a renamed shard).
    path = write(tmp_path / "one.gguf", split__count=("u64", 2**31))
    assert "split.count says 2147483648 parts" in error_of(path)


def test_a_pattern_that_is_not_a_number_is_an_error(tmp_path):
    """gemma4 has no period of its own: a sliding_window_pattern that is neither a whole number
    nor flags is refused in one line (mypy saw the None period; it was an internal error)."""
    _, keys = convert(bundled("gemma-3-27b"))
    keys["attention.sliding_window_pattern"] = 6.5
    path = tmp_path / "m.gguf"
    write_gguf(path, "gemma4", keys, tensors_for("gemma4", keys))
    assert "gemma4.attention.sliding_window_pattern must be a whole number" in error_of(str(path))


def test_a_token_list_of_numbers_is_not_a_vocabulary(tmp_path):
    """tokenizer.ggml.tokens as a short array of numbers (read as a list, not as an array of
    strings' length) is not a vocabulary size: the size comes from token_embd.weight (it was
    int(list), an internal error, until mypy saw the object there)."""
    path = tmp_path / "m.gguf"
    writer_keys = dict(BASE)
    writer_keys.pop("llama.vocab_size")
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (_, value) in writer_keys.items():
        writer.add_uint32(key, value)
    writer.add_array("tokenizer.ggml.tokens", [1, 2, 3])
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code, out, err = run_cli("size", str(path), "--format", "json")
    assert code == 0, err
    # 32 layers x K and V x 8 KV heads x 128 wide x 2 bytes (f16)
    assert json.loads(out)["model"]["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
