"""`kvplan engine --vllm-version` takes a modelled release line's patch releases as written
("0.21.0", vLLM's own spelling of the release, as `simulate --engine-version` does) and runs
that line's allocator; a line kvplan has no allocator for stays a one-line refusal."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_cli

BASE = ("engine", "qwen3-8b", "--gpu", "h100", "-f", "json")


def _pool(version: str) -> dict:
    code, out, err = run_cli(*BASE, "--vllm-version", version)
    assert code == 0, err
    result = json.loads(out)
    result.pop("request", None)  # the release as given
    return result


@pytest.mark.parametrize(("patch", "line"), [("0.21.0", "0.21"), ("0.19.1", "0.19")])
def test_a_patch_release_runs_its_lines_allocator(patch, line):
    assert json.dumps(_pool(patch), sort_keys=True).replace(patch, line) == json.dumps(
        _pool(line), sort_keys=True
    )


@pytest.mark.parametrize("version", ["0.20.1", "0.22", "abc", ""])
def test_a_line_without_an_allocator_is_one_line(version):
    code, _, err = run_cli(*BASE, "--vllm-version", version)
    one_line_error(code, err, "kvplan models 0.19, 0.21, 0.32")
