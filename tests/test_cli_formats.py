"""Every planning command in every output format: exit 0, JSON that parses, notes carried."""

from __future__ import annotations

import csv
import io
import json

import pytest

from helpers import run_cli

COMMANDS = [
    ["size", "qwen3-30b-a3b", "--ctx", "8k,32k"],
    ["models"],
    ["gpus"],
    ["roofline", "gpt-oss-20b", "--gpu", "h100"],
    ["roofline", "--gpu", "mi300x"],
    ["capacity", "gemma-3-27b", "--gpu", "h200"],
    ["engine", "llama-3.1-8b", "--engine", "vllm", "--kv-cache-memory", "20GiB"],
    ["engine", "llama-3.1-8b", "--engine", "sglang", "--kv-cache-memory", "20GiB"],
    ["whatif", "mixtral-8x7b", "--apply", "fp8", "--apply", "window=4k"],
]


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_command_in_format(argv, fmt):
    code, out, err = run_cli(*argv, "--format", fmt)
    assert code == 0, err
    assert out.strip()
    if fmt == "json":
        data = json.loads(out)
        assert "notes" in data or "models" in data or "gpus" in data or "peaks" in data
    elif fmt == "csv":
        rows = list(csv.reader(line for line in io.StringIO(out) if not line.startswith("#")))
        assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows)
    elif fmt == "markdown":
        assert out.startswith("## ")


def test_report_markdown_and_json(tmp_path):
    code, out, err = run_cli("report", "qwen3-8b", "--gpu", "l40s", "--ctx", "8k,32k")
    assert code == 0, err
    assert "### Decision order" in out and "[^1]:" in out
    code, out, err = run_cli("report", "qwen3-8b", "--gpu", "l40s", "--format", "json")
    assert code == 0 and json.loads(out)["options"][0]["gpu"] == "L40S"
    path = tmp_path / "plan.md"
    code, _, err = run_cli("report", "qwen3-8b", "--gpu", "l40s", "--out", str(path))
    assert code == 0, err
    text = path.read_text()
    assert "(plan-roofline.png)" in text and (tmp_path / "plan-roofline.png").exists()
    assert (tmp_path / "plan-capacity.png").exists()
