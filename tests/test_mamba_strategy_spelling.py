"""--mamba-scheduler-strategy's one reading (engines.sglang.mamba_strategy_name): SGLang's
argument parser takes its choices case-sensitively, so kvplan plan launches the strategy as
SGLang spells it (test_hostile_15); kvplan engine and simulate read a given spelling the same
way, run what plan launches, and refuse a name that is no choice in one line naming them."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli, run_json

ENGINE = ("engine", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "4", "--engine", "sglang")
ENGINE += ("--sglang-version", "0.5.14")
SIM = ("simulate", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "4", "--engine", "sglang")
SIM += ("--engine-version", "0.5.14", "--num-prompts", "4")


def _ids(out: dict) -> list[str]:
    return [n["id"] for n in out["notes"]]


@pytest.mark.parametrize("spelling", ["EXTRA_BUFFER", " extra_buffer"])
def test_engine_reads_a_spelling_as_plan_launches_it(spelling):
    given = run_json(*ENGINE, "--mamba-scheduler-strategy", spelling)
    sglangs = run_json(*ENGINE, "--mamba-scheduler-strategy", "extra_buffer")
    plain = run_json(*ENGINE)
    for key in ("max_running_requests", "kv_cache_tokens", "notes"):
        assert given[key] == sglangs[key], key
    assert given["notes"] != plain["notes"]  # the strategy's own note: it was read, not dropped


def test_simulate_reads_a_spelling_as_plan_launches_it():
    given = run_json(*SIM, "--mamba-scheduler-strategy", "EXTRA_BUFFER")
    sglangs = run_json(*SIM, "--mamba-scheduler-strategy", "extra_buffer")
    assert given["setup"] == sglangs["setup"] and _ids(given) == _ids(sglangs)


@pytest.mark.parametrize("command", [ENGINE, SIM])
def test_a_name_that_is_no_choice_is_refused_naming_them(command):
    code, out, err = run_cli(*command, "--mamba-scheduler-strategy", "extra")
    one_line_error(code, err, "choose no_buffer or extra_buffer")
