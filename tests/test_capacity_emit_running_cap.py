"""`capacity --emit sglang` promises no more running requests than SGLang runs with the launch's
own flags (issue 28's sweep): a recurrent-state hybrid's state pool caps SGLang's
max_running_requests (init_memory: max_mamba_cache_size // _calculate_mamba_ratio, with the
default strategy's track slots, engines.sglang.resolve_mamba_strategy), which `kvplan engine`
reports for the same flags; the KV pool alone held more sequences than that."""

from __future__ import annotations

import re

from helpers import run_cli, run_json

MODEL = "qwen3.5-35b-a3b"


def _flag(command: str, flag: str) -> str:
    found = re.search(rf"{flag} (\S+)", command)
    assert found is not None, command
    return found.group(1)


def test_emitted_seats_are_within_sglangs_running_cap():
    code, out, err = run_cli("capacity", MODEL, "--gpu", "h200", "--ctx", "8k", "--emit", "sglang")
    assert code == 0, err
    seats = int(_flag(out, "--max-running-requests"))
    alloc = run_json(
        *("engine", MODEL, "--engine", "sglang", "--gpu", "h200"),
        *("--tp", _flag(out, "--tp-size"), "--max-model-len", _flag(out, "--context-length")),
        *("--mem-fraction-static", _flag(out, "--mem-fraction-static")),
        *("--block-size", _flag(out, "--page-size")),
    )
    held = alloc["kv_cache_tokens"] // int(_flag(out, "--context-length"))
    assert held > alloc["max_running_requests"]  # the state pool, not the KV pool, binds
    assert seats == alloc["max_running_requests"]


def test_a_dense_model_keeps_its_kv_seats():
    code, out, err = run_cli(
        "capacity", "qwen3-8b", "--gpu", "h100", "--ctx", "8k", "--emit", "sglang"
    )
    assert code == 0, err
    alloc = run_json(
        *("engine", "qwen3-8b", "--engine", "sglang", "--gpu", "h100", "--tp", "1"),
        *("--max-model-len", "8192", "--mem-fraction-static", "0.9", "--block-size", "16"),
    )
    assert int(_flag(out, "--max-running-requests")) == alloc["kv_cache_tokens"] // 8192
