"""Fifth hostile campaign: hangs, unbounded memory and a poisoned cache. Every bound is checked
before the work it bounds (a trace's span, a trace file's kind and size, a GGUF's counts, the
safetensors headers' total), every network exchange has one deadline over all of it, and the
Hub's answers are cached only once they validate. Each failure is one `error:` line, exit 2."""

from __future__ import annotations

import os
import struct
import time

import pytest

from helpers import run_cli, run_json


def one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and needle in err, err


# ---- traces: the span is no allocation, the file is a regular file of bounded size -----------
def test_a_trace_spanning_1e9_seconds_is_simulated_in_bounded_memory(tmp_path):
    """An arrival at 1e9 s (the documented maximum) binned the output tokens per second of the
    span: a 7.45 GiB array and an internal MemoryError. Now binned per occupied second."""
    import resource

    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "input_tokens": 100, "output_tokens": 10}\n'
        '{"arrival_s": 1e9, "input_tokens": 100, "output_tokens": 10}\n'
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    bench = run_json("simulate", "qwen3-8b", "--trace", str(trace))["runs"][0]["bench"]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert bench["completed"] == 2 and bench["max_output_tokens_per_s"] == 10
    assert grown_kib < 512 * 1024, grown_kib  # was 7.45 GiB


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "too_large"])
def test_a_trace_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path, kind):
    """A FIFO blocked the read forever, /dev/urandom never ended, /dev/zero grew without bound."""
    if kind == "fifo":
        path = str(tmp_path / "trace.jsonl")
        os.mkfifo(path)
    elif kind == "too_large":
        path = str(tmp_path / "huge.jsonl")
        with open(path, "wb") as handle:
            handle.truncate(64 * 2**20 + 1)  # sparse: no disk used
    else:
        path = kind
    started = time.monotonic()
    code, _, err = run_cli("simulate", "qwen3-8b", "--trace", path)
    needle = "over 64 MiB" if kind == "too_large" else "not a regular file"
    one_line_error(code, err, needle)
    assert time.monotonic() - started < 10


# ---- GGUF: counts and sizes bounded before the reader walks them -----------------------------
def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _tensor(name: str, dims: list[int], n_dims: int | None = None) -> bytes:
    count = len(dims) if n_dims is None else n_dims
    return _s(name) + struct.pack(f"<I{len(dims)}QIQ", count, *dims, 1, 0)  # f16, offset 0


def _gguf(tmp_path, kvs: list[bytes], tensors: list[bytes], tensor_count=None) -> str:
    base = [
        _s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
        _u32("llama.block_count", 2),
        _u32("llama.embedding_length", 64),
        _u32("llama.attention.head_count", 4),
        _u32("llama.attention.head_count_kv", 4),
    ]
    kvs = base + kvs
    count = len(tensors) if tensor_count is None else tensor_count
    head = b"GGUF" + struct.pack("<IQQ", 3, count, len(kvs))
    path = tmp_path / "m.gguf"
    path.write_bytes(head + b"".join(kvs) + b"".join(tensors) + b"\0" * 64)
    return str(path)


EMBED = [_tensor("token_embd.weight", [64, 1000])]


def _array(key: str, item_type: int, count: int, body: bytes = b"") -> bytes:
    return _s(key) + struct.pack("<IIQ", 9, item_type, count) + body


@pytest.mark.parametrize(
    "kvs, tensors, tensor_count, needle",
    [
        # 8M nested empty arrays (96 MB) took over 200 s and 8.2 GB; llama.cpp reads none
        ([_array("x.nested", 9, 1000, struct.pack("<IQ", 4, 0) * 1000)], EMBED, None,
         "array of arrays"),
        # a string array of 2^40: struct.error, an internal error; 30M empty ones: 6 s, 270 MB
        ([_array("tokenizer.ggml.tokens", 8, 2**40)], EMBED, None, "array length"),
        ([_array("tokenizer.ggml.tokens", 8, 2**24 + 1)], EMBED, None, "16,777,216"),
        ([_array("llama.x", 4, 2**40)], EMBED, None, "array length"),
        ([_array("llama.x", 4, 1000)], EMBED, None, "runs past its end"),
        # dims: 2.7e39 GiB of weights printed
        ([], [_tensor("token_embd.weight", [2**40] * 4)], None, "over 1,099,511,627,776 elements"),
        ([], [_tensor("token_embd.weight", [], n_dims=2**31)], None, "tensor dimensions"),
        ([], EMBED, 2**62, "tensor count"),
        # a vocabulary of 2^40 was taken as stated
        ([_s("llama.vocab_size") + struct.pack("<IQ", 10, 2**40)], EMBED, None,
         "llama.vocab_size"),
        ([], [_tensor("token_embd.weight", [64, 2**30])], None, "vocabulary of 1,073,741,824"),
    ],
)  # fmt: skip
def test_hostile_gguf_counts_are_refused_before_reading(
    tmp_path, kvs, tensors, tensor_count, needle
):
    started = time.monotonic()
    code, _, err = run_cli("size", _gguf(tmp_path, kvs, tensors, tensor_count))
    one_line_error(code, err, needle)
    assert time.monotonic() - started < 10


def test_a_gguf_built_by_hand_reads(tmp_path):
    """The hand-built file of the cases above is itself a readable model."""
    data = run_json("size", _gguf(tmp_path, [], EMBED))
    assert data["model"]["weights_bytes"] == 64 * 1000 * 2
