"""CSV a parser loads: one table per output with unique field names, no comment lines, every
number the table shows (the --breakdown rows, capacity's headline answer), notes on standard
error as `note:` lines. Each command's CSV is read back with csv.DictReader (and pandas where it
is installed) and checked against the JSON of the same command."""

from __future__ import annotations

import csv
import io

import pytest

from helpers import run_cli, run_json

SIZE = ["size", "gemma-3-27b", "--ctx", "8k,128k", "--batch", "1,16", "--kv-dtype", "auto,fp8"]
CAPACITY = ["capacity", "gemma-3-27b", "--gpu", "h200", "--ctx", "32k", "--batch", "1,8"]
CAPACITY += ["--mean-len", "8k", "--prefix-tokens", "2k"]
ROOFLINE = ["roofline", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "8k,32k"]
VLLM = ["engine", "gemma-3-27b", "--engine", "vllm", "--kv-cache-memory", "19.53GiB"]
LLAMACPP = ["engine", "qwen3-30b-a3b", "--engine", "llama.cpp", "--gpu", "rtx-3090", "-c", "32k"]
WHATIF = ["whatif", "mixtral-8x7b", "--apply", "fp8", "--apply", "window=4k"]

COMMANDS = [
    [*SIZE, "--breakdown"],
    SIZE,
    CAPACITY,
    ROOFLINE,
    ["roofline", "--gpu", "mi300x"],
    VLLM,
    ["engine", "llama-3.1-8b", "--engine", "sglang"],
    LLAMACPP,
    WHATIF,
    ["models"],
    ["gpus"],
]


def read_csv(*argv: str) -> tuple[list[str], list[dict], str]:
    """(field names, rows, standard error) of a command's CSV, checked for well-formedness."""
    code, out, err = run_cli(*argv, "--format", "csv")
    assert code == 0, err
    assert not any(line.startswith("#") for line in out.splitlines())
    records = list(csv.reader(io.StringIO(out)))
    assert len(records) >= 2 and all(len(r) == len(records[0]) for r in records)
    reader = csv.DictReader(io.StringIO(out))
    rows = list(reader)
    fields = list(reader.fieldnames or [])
    assert len(fields) == len(set(fields)), f"duplicate fields: {fields}"
    assert all(fields)
    return fields, rows, err


def number(text: str) -> float:
    return float(text)


def same_numbers(rows: list[dict], items: list[dict]) -> int:
    """Every CSV field that is also a numeric JSON field holds the JSON's number, row by row;
    how many such fields there are."""
    assert len(rows) == len(items)
    shared = [
        key
        for key in rows[0]
        if key in items[0] and isinstance(items[0][key], (int, float)) and key != "table"
    ]
    for row, item in zip(rows, items, strict=True):
        for key in shared:
            if item[key] is None or isinstance(item[key], bool):
                continue
            assert number(row[key]) == item[key], key
    return len(shared)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2] + a[-1:]))
def test_csv_loads_with_unique_fields_and_notes_on_stderr(argv):
    fields, rows, err = read_csv(*argv)
    data = run_json(*argv)
    lines = err.splitlines()
    assert all(line.startswith("note: ") for line in lines)
    for item in data.get("notes", []):  # every note of the JSON, one line each
        assert f"note: {item['text']}" in lines


def test_size_rows_and_breakdown():
    fields, rows, _ = read_csv(*SIZE, "--breakdown")
    data = run_json(*SIZE, "--breakdown")
    main = [r for r in rows if r["table"] == "main"]
    groups = [r for r in rows if r["table"] == "per layer group"]
    assert len(main) == len(data["rows"]) == 8 and len(groups) == len(data["breakdown"])
    for got, want in zip(main, data["rows"], strict=True):
        assert int(got["context_len"]) == want["context_len"]
        assert int(got["kv_bytes_per_sequence"]) == want["kv_bytes_per_sequence"]
        assert int(got["kv_bytes_total"]) == want["kv_bytes_total"]
        assert number(got["kv_to_weights"]) == want["kv_to_weights"]
        assert got["bytes_per_sequence"] == ""  # a breakdown field, empty on a main row
    for got, want in zip(groups, data["breakdown"], strict=True):
        assert got["group"] == want["group"]
        assert int(got["tokens_held"]) == want["tokens_held"]
        assert int(got["bytes_per_sequence"]) == want["bytes_per_sequence"]
    # gemma-3-27b at 128k in bf16: 52 sliding layers x 1,024 tokens + 10 full x 131,072, each
    # token 2 (K, V) x 16 heads x 128 x 2 bytes
    sliding = next(
        g for g in groups if g["group"].startswith("sliding") and g["kv_dtype"] == "bf16"
    )
    assert int(sliding["bytes_per_sequence"]) == 52 * 1024 * 2 * 16 * 128 * 2
    assert int(main[0]["kv_bytes_per_token"]) == data["model"]["kv_bytes_per_token"]


def test_size_has_no_table_field_without_breakdown():
    fields, rows, _ = read_csv(*SIZE)
    assert "table" not in fields and len(rows) == 8
    # one field per number: GiB and GB columns show the same bytes
    assert fields.count("kv_bytes_per_sequence") == 1


def test_capacity_carries_the_headline_answer():
    fields, rows, _ = read_csv(*CAPACITY)
    data = run_json(*CAPACITY)
    first = rows[0]
    assert int(first["planned_max_concurrency"]) == data["max_concurrency"]
    assert int(first["planned_context_len"]) == data["context_len"] == 32768
    assert int(first["kv_tokens"]) == data["kv_tokens"]
    assert first["fits"] == "True" and data["fits"] is True
    assert number(first["kv_pool_bytes_per_gpu"]) == data["kv_pool_bytes_per_gpu"]
    for item in data["longest_context"]:
        field = f"longest_context_len_at_batch_{item['batch_size']}"
        assert int(first[field]) == item["max_context_len"]
    assert int(first["paged_sequences"]) == data["paging"]["paged_sequences"]
    assert number(first["transfer_time_s"]) == data["kv_transfer"]["time_s"]
    assert [int(r["max_concurrency"]) for r in rows] == [
        item["max_concurrency"] for item in data["what_if"]
    ]
    assert all(r["planned_max_concurrency"] == first["planned_max_concurrency"] for r in rows)


def test_roofline_engines_whatif_catalog_numbers():
    _, rows, _ = read_csv(*ROOFLINE)
    data = run_json(*ROOFLINE)
    assert [number(r["tokens_per_s"]) for r in rows] == [d["tokens_per_s"] for d in data["decode"]]
    assert [number(r["bytes"]) for r in rows] == [d["bytes"] for d in data["decode"]]

    _, rows, _ = read_csv(*VLLM)
    data = run_json(*VLLM)
    lines = [r["line"] for r in rows if r["table"] == "log lines"]
    assert lines == data["log_lines"]
    assert "GPU KV cache size: 36,560 tokens" in lines  # as vLLM logs it (docs/engines.md)
    groups = [r for r in rows if r["table"] == "KV-cache groups"]
    assert [int(r["layers"]) for r in groups] == [g["layers"] for g in data["groups"]]

    _, rows, _ = read_csv(*LLAMACPP)
    data = run_json(*LLAMACPP)
    fits = [r for r in rows if r["table"].startswith("largest -c")]
    assert [int(r["max_ctx_size"]) for r in fits] == [
        c["max_ctx_size"] for c in data["context_fit"]
    ]

    _, rows, _ = read_csv(*WHATIF)
    data = run_json(*WHATIF)
    assert same_numbers(rows, data["rows"]) >= 2

    _, rows, _ = read_csv("models")
    data = run_json("models")
    by_name = {m["name"]: m for m in data["models"]}
    for row in rows:
        assert int(row["params_total"]) == by_name[row["name"]]["params_total"]
        assert int(row["params_active"]) == by_name[row["name"]]["params_active"]
    assert int(next(r for r in rows if r["name"] == "llama-3.1-8b")["kv_bytes_per_token"]) == (
        32 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head_dim x bf16
    )

    _, rows, _ = read_csv("gpus")
    data = run_json("gpus")
    assert [number(r["memory_bytes"]) for r in rows] == [g["memory_bytes"] for g in data["gpus"]]


@pytest.mark.parametrize("argv", [[*SIZE, "--breakdown"], CAPACITY, LLAMACPP, ["models"]])
def test_pandas_reads_it(argv):
    pandas = pytest.importorskip("pandas")
    code, out, err = run_cli(*argv, "--format", "csv")
    assert code == 0, err
    frame = pandas.read_csv(io.StringIO(out))
    assert frame.columns.is_unique and len(frame) >= 2
    assert not any(str(c).startswith("Unnamed") for c in frame.columns)
