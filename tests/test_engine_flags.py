"""`kvplan engine`'s options are declared once each with the engines that take them
(kvplan.cli.engine.Flag): every flag given to an engine that does not take it is refused as one
line naming it, and every engine that takes it gets past the check."""

from __future__ import annotations

import json

import pytest

from kvplan.cli.engine import EVERY, _flags, check_flags

from helpers import run_cli

CHECKED = [f for f in _flags() if f.name]
VALUES = {
    int: "2",
    str: "x",
    float: "0.5",
}


def _argv(flag) -> list[str]:
    if flag.annotation is bool:
        return [flag.name]
    if flag.name == "--ollama-env":
        return [flag.name, "OLLAMA_NUM_PARALLEL=2"]
    return [flag.name, VALUES[flag.annotation]]


def test_every_engine_flag_names_its_engines():
    assert len(CHECKED) >= 35
    for flag in CHECKED:
        assert flag.engines and set(flag.engines) <= set(EVERY), flag.name
        assert set(flag.engines) != set(EVERY), f"{flag.name} is checked but every engine takes it"
        assert set(flag.instead) <= set(EVERY) - set(flag.engines), flag.name


@pytest.mark.parametrize(
    ("flag", "engine"),
    [(f, e) for f in CHECKED for e in EVERY if e not in f.engines],
    ids=lambda v: getattr(v, "name", v),
)
def test_a_flag_for_another_engine_is_one_line_naming_it(flag, engine):
    code, out, err = run_cli("engine", "llama-3.1-8b", "--engine", engine, *_argv(flag))
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag.name in lines[0], err


@pytest.mark.parametrize(
    ("flag", "engine"),
    [(f, e) for f in CHECKED for e in f.engines],
    ids=lambda v: getattr(v, "name", v),
)
def test_an_engine_takes_its_own_flags(flag, engine):
    check_flags(engine, {flag.name: True})  # raises for a flag the engine does not take


def test_the_servers_vocabulary_points_llamacpp_to_its_own():
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--engine", "llama.cpp", "--kv-cache-dtype", "fp8"
    )
    assert code == 2
    assert "--kv-cache-dtype does not apply to llama.cpp (its cache: --cache-type-k" in err
    code, _, err = run_cli("engine", "llama-3.1-8b", "--engine", "ollama", "-np", "4")
    assert code == 2 and "Ollama takes --ollama-env OLLAMA_NUM_PARALLEL=N" in err


def _params(command: str) -> list:
    import typer.main

    from kvplan.cli import build_app

    return typer.main.get_command(build_app([command])).commands[command].params


@pytest.mark.parametrize("command", ["simulate", "plan", "engine"])
def test_the_engines_serve_flags_are_spelled_alike_in_every_command(command):
    """vLLM's and SGLang's spellings of a serve flag (cli.common.SERVE_FLAGS) are accepted in
    every command that takes it: simulate and plan both engines', engine the ones of the
    engines its Flag names."""
    from kvplan.cli.common import SERVE_FLAGS

    taken = {f.param: f for f in _flags()}
    found = 0
    for param in _params(command):
        opts = set(param.opts) | set(param.secondary_opts)
        for vllm, sglang in SERVE_FLAGS.values():
            spellings = set(vllm) | set(sglang)
            if not opts & spellings:
                continue
            found += 1
            if command == "engine" or param.name == "block_size":  # SGLang's sim: no pages
                engines = taken[param.name].engines if command == "engine" else ("vllm",)
                spellings = set(vllm if "vllm" in engines else ()) | set(
                    sglang if "sglang" in engines else ()
                )
            assert spellings <= opts, (command, param.name, spellings - opts)
    assert found >= (11 if command == "engine" else 9)


def test_sglang_spellings_run_in_simulate():
    code, out, err = run_cli(
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--max-running-requests", "4",
        "--chunked-prefill-size", "2048", "--context-length", "4096",
        "--num-prompts", "8", "--input-len", "256", "--output-len", "8", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["runs"][0]["bench"]["completed"] == 8
