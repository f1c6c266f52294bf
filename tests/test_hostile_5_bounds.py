"""Fifth hostile campaign: hangs, unbounded memory and a poisoned cache. Every bound is checked
before the work it bounds (a trace's span, a trace file's kind and size, a GGUF's counts, the
safetensors headers' total), every network exchange has one deadline over all of it, and the
Hub's answers are cached only once they validate. Each failure is one `error:` line, exit 2."""

from __future__ import annotations

import os
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
