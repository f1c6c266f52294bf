"""`kvplan engine --engine sglang` takes SGLang's mamba strategy flags as `simulate` and `plan`
do (issue 28): --mamba-scheduler-strategy (0.5.7-0.5.19) and --mamba-radix-cache-strategy
(0.5.14 on), auto/no_buffer/extra_buffer, with the same per-release acceptance, and caps the
running requests as `simulate` does; its notes say whether the strategy was given or SGLang's
default auto resolved it."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli, run_json

MODEL = "qwen3.5-35b-a3b"  # Qwen3_5MoeForConditionalGeneration: auto resolves from 0.5.14
ENGINE = ("engine", MODEL, "--engine", "sglang", "--gpu", "h200", "--tp", "2")
SIM = (
    *("simulate", MODEL, "--gpu", "h200", "--engine", "sglang", "--tp", "2"),
    *("--num-prompts", "4", "--input-len", "200", "--output-len", "10"),
)


def _engine(release: str, *flags: str) -> dict:
    return run_json(*ENGINE, "--sglang-version", release, "--max-model-len", "8192", *flags)


def _sim(release: str, *flags: str) -> dict:
    return run_json(*SIM, "--engine-version", release, "--max-model-len", "8192", *flags)


def _note(doc: dict, note_id: str) -> str | None:
    return next((n["text"] for n in doc["notes"] if n["id"] == note_id), None)


@pytest.mark.parametrize(
    ("release", "flags"),
    [
        ("0.5.9", ("--mamba-scheduler-strategy", "extra_buffer")),
        ("0.5.14", ("--mamba-radix-cache-strategy", "no_buffer")),
        ("0.5.14", ("--mamba-scheduler-strategy", "no_buffer")),
        ("0.5.23", ("--mamba-radix-cache-strategy", "auto")),
    ],
)
def test_engine_takes_the_strategy_as_simulate_does(release, flags):
    engine, sim = _engine(release, *flags), _sim(release, *flags)
    assert engine["max_running_requests"] == sim["setup"]["max_num_seqs"]
    assert engine["kv_cache_tokens"] == sim["setup"]["kv_cache_tokens"]


def test_a_given_strategy_changes_the_cap():
    default, given = (
        _engine("0.5.14"),
        _engine("0.5.14", "--mamba-radix-cache-strategy", "no_buffer"),
    )
    assert given["max_running_requests"] > default["max_running_requests"]
    assert _note(given, "sglang-mamba-auto") is None
    assert _note(default, "sglang-mamba-auto") is not None


@pytest.mark.parametrize(
    ("release", "flags", "needle"),
    [
        ("0.5.6", ("--mamba-scheduler-strategy", "extra_buffer"), "0.5.7"),
        ("0.5.6", ("--mamba-scheduler-strategy", "auto"), "0.5.7"),
        ("0.5.13", ("--mamba-radix-cache-strategy", "no_buffer"), "--mamba-scheduler-strategy"),
        ("0.5.20", ("--mamba-scheduler-strategy", "no_buffer"), "--mamba-radix-cache-strategy"),
        ("0.5.14", ("--mamba-radix-cache-strategy", "bogus"), "no_buffer"),
    ],
)
def test_engine_refuses_what_the_release_refuses(release, flags, needle):
    code, out, err = run_cli(*ENGINE, "--sglang-version", release, *flags)
    one_line_error(code, err, needle)
    assert out == ""


def test_both_spellings_at_once_and_vllm_are_refused():
    code, _, err = run_cli(
        *ENGINE,
        *("--sglang-version", "0.5.14", "--mamba-scheduler-strategy", "no_buffer"),
        *("--mamba-radix-cache-strategy", "no_buffer"),
    )
    one_line_error(code, err, "not both")
    vllm = [a if a != "sglang" else "vllm" for a in ENGINE]
    code, _, err = run_cli(*vllm, "--mamba-scheduler-strategy", "no_buffer")
    one_line_error(code, err, "sglang")


def test_the_track_buffer_note_says_how_the_strategy_was_decided():
    """0.5.14's default auto resolves to extra_buffer: the note says so, not that the flag was
    given; a given extra_buffer says it was given."""
    auto = _note(_engine("0.5.14"), "sglang-mamba-extra-buffer")
    given = _note(
        _engine("0.5.14", "--mamba-radix-cache-strategy", "extra_buffer"),
        "sglang-mamba-extra-buffer",
    )
    assert auto is not None and given is not None
    assert "auto" in auto and "given" not in auto
    assert "given" in given and "resolve" not in given
    sim_auto = _note(_sim("0.5.14"), "sglang-mamba-extra-buffer")
    assert sim_auto == auto
    # the flag as the release spells it: 0.5.20 takes only the 0.5.14 name, 0.5.9 only the old
    newest = _note(
        _engine("0.5.20", "--mamba-radix-cache-strategy", "extra_buffer"),
        "sglang-mamba-extra-buffer",
    )
    assert newest is not None and newest.startswith("--mamba-radix-cache-strategy extra_buffer")
    oldest = _note(
        _engine("0.5.9", "--mamba-scheduler-strategy", "extra_buffer"),
        "sglang-mamba-extra-buffer",
    )
    assert oldest is not None and oldest.startswith("--mamba-scheduler-strategy extra_buffer")
