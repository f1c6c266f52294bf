"""A release candidate or dev build ('0.5.9rc0', '0.5.9.dev0') came before its release
(kvplan.release.release_key orders it so) but carries that release's patch number: SGLang's
release gate (sglang_rules) and vLLM's rules run it with its release's rules, as kvplan runs
vLLM's release candidates (0.32.0rc1), and say so (note sim-version-prerelease), since a rule
that landed late in the cycle may be missing from the candidate."""

from __future__ import annotations

import pytest

from kvplan.engines.releases import prerelease
from kvplan.engines.sglang import sglang_rules

from helpers import run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4")


@pytest.mark.parametrize(
    "version, pre",
    [
        ("0.5.9rc0", True),
        ("0.5.9.dev0", True),
        ("0.32.0rc1", True),
        ("0.5.9", False),
        ("0.5.9.post1", False),
        ("0.5", False),
        ("0.5.x", False),  # no release: refused where it is read
    ],
)
def test_a_prerelease_is_read_as_one(version, pre):
    assert prerelease(version) is pre


@pytest.mark.parametrize("version", ["0.5.9rc0", "0.5.9.dev0"])
def test_an_sglang_prerelease_runs_its_releases_rules_and_says_so(version):
    assert sglang_rules(version).patch == 9
    out = run_json(*SIM, "--engine", "sglang", "--engine-version", version)
    note = next(n for n in out["notes"] if n["id"] == "sim-version-prerelease")
    assert version in note["text"] and "0.5.9" in note["text"]
    plain = run_json(*SIM, "--engine", "sglang", "--engine-version", "0.5.9")
    assert "sim-version-prerelease" not in [n["id"] for n in plain["notes"]]


def test_a_vllm_release_candidate_is_named_too():
    out = run_json(*SIM, "--vllm-version", "0.32.0rc1")
    assert "sim-version-prerelease" in [n["id"] for n in out["notes"]]
