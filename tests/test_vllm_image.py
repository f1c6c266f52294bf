"""The vLLM image a plan names for --engine-version (kvplan.present.launch.vllm_image): the
release's own tag, and none for a pre-release, which vllm/vllm-openai does not publish."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.present.launch import VLLM_REPOSITORY, vllm_image

from helpers import one_line_error, run_cli


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        ("0.6.3", "v0.6.3"),
        ("0.6.6.post1", "v0.6.6.post1"),
        ("0.6", "v0.6.6"),  # a minor alone: the patch whose rules kvplan runs for it
        ("0.8", "v0.8.5"),
        ("0.21", "v0.21.0"),
        ("0.19.1+cu129", "v0.19.1"),  # a local build tail names the release's image
    ],
)
def test_a_release_names_its_own_image(version, tag):
    assert vllm_image(version) == f"{VLLM_REPOSITORY}:{tag}"


@pytest.mark.parametrize("version", ["0.8.4rc1", "0.11.1rc2", "0.10.0.dev3", "0.9.0b1"])
def test_a_pre_release_is_refused_not_named_as_its_release(version):
    """0.8.4rc1 named v0.8.4 before: another build than the one planned for."""
    with pytest.raises(KvplanError, match="pre-release") as refused:
        vllm_image(version)
    assert version in str(refused.value)


def test_plan_refuses_a_vllm_pre_release_before_it_searches():
    code, out, err = run_cli(
        "plan", "qwen3-8b", "--rate", "1", "--slo", "ttft_p99=2s", "--gpu", "h100", "--tp", "1",
        "--emit", "vllm", "--engine-version", "0.8.4rc1",
    )  # fmt: skip
    one_line_error(code, err, "pre-release")
    assert out == ""
