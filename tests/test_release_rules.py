"""One reading of an engine release for every rule that changes between releases
(kvplan.engines.releases.release_parts / release_key, kvplan.engines.sglang.sglang_rules): a
release kvplan does not know runs with the nearest known one's rules, the same ones for every
rule (a later SGLang release: the nearest's newest patch, as a bare release; an earlier one: its
first patch)."""

from __future__ import annotations

import pytest

from kvplan.engines.moe_backend import sglang_moe_runner
from kvplan.engines.releases import release_key, release_minor, release_parts
from kvplan.engines.sglang import (
    SglangAttention,
    SglangRules,
    _default_sglang_backend,
    detokenizer_path,
    gpt_oss_one_pool,
    gpt_oss_sm120_other_kernel,
    mamba_radix_overlap_off,
    piecewise_default_on,
    sglang_after_sm120_marlin,
    sglang_release,
    sglang_rules,
)
from kvplan.engines.vllm import async_scheduling_default, mxfp4_moe_rows_run
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.steplog import vllm_version_tuple


@pytest.mark.parametrize(
    ("version", "parts"),
    [
        ("0.8", (0, 8, None)),
        ("0.8.4", (0, 8, 4)),
        ("0.8.4.post1", (0, 8, 4)),
        ("0.11.1rc2", (0, 11, 1)),  # vllm_v0's own parse read (0, 11, None)
        ("0.19.1+cu129", (0, 19, 1)),
        ("0.5.3rc0", (0, 5, 3)),
        ("0.6.x", None),  # a third part that is no patch is no release (never the bare minor)
        ("0.6.99999", None),
        ("0.5.-1", None),
        ("0.19x", None),
        ("٠.٥", None),
        ("0." + "5" * 5000, None),
        ("V0.19", (0, 19, None)),
    ],
)
def test_one_parse_of_a_release(version, parts):
    assert release_parts(version) == parts
    assert release_minor(version) == (None if parts is None else parts[:2])


def test_a_bare_release_compares_as_its_newest_patch():
    assert release_key("0.11") > release_key("0.11.1") > release_key("0.11.1rc2")
    assert release_key("0.11.1rc2") > release_key("0.11.0")
    assert release_key("0.11") < release_key("0.12.0rc1")
    assert release_key("nonsense") is None


@pytest.mark.parametrize(
    ("version", "rules"),
    [
        ("0.5.8.post1", ("0.5", 8, False)),
        ("v0.5.10.post1", ("0.5", 10, False)),
        ("0.5", ("0.5", None, False)),
        ("0.4.6", ("0.4", 6, False)),
        # a later release: the nearest's newest rules, whatever its own patch
        ("0.6", ("0.5", None, True)),
        ("0.6.1", ("0.5", None, True)),
        ("0.9.3rc1", ("0.5", None, True)),
        # an earlier one: the nearest's first rules
        ("0.3.2", ("0.4", 0, True)),
    ],
)
def test_the_sglang_rules_of_a_release(version, rules):
    assert sglang_rules(version) == SglangRules(*rules)
    assert sglang_release(version) == (rules[0], rules[2])


@pytest.mark.parametrize("version", ["1.0", "0.0.1", "0.100", "five", "0.5x", "0." + "5" * 50])
def test_what_no_sglang_release_spells_is_refused(version):
    with pytest.raises(KvplanError, match="give a release such as"):
        sglang_rules(version)


@pytest.fixture(scope="module")
def models():
    return {
        "qwen3_next": load_model("Qwen/Qwen3-Next-80B-A3B-Instruct", checkpoint=False),
        "gpt_oss": load_model("gpt-oss-120b", checkpoint=False),
        "kimi": load_model("moonshotai/Kimi-K2.5", checkpoint=False),
    }


def _sglang_rules_at(models, version: str) -> dict:
    """Every SGLang rule kvplan gates by patch, at `version`."""
    b200, rtx = load_profile("b200"), load_profile("rtx-pro-6000-server")
    pool = SglangAttention("fa3", "fa3", None, None, 1, True, False, False)
    return {
        "overlap off": mamba_radix_overlap_off(models["qwen3_next"], version, "fa3", False, True),
        "hybrid backend": _default_sglang_backend(models["qwen3_next"], b200, 8, None, version),
        "piecewise": piecewise_default_on(version),
        "detokenizer": detokenizer_path(models["kimi"], version),
        "gpt-oss one pool": gpt_oss_one_pool(models["gpt_oss"], pool, version),
        "gpt-oss sm120": gpt_oss_sm120_other_kernel(models["gpt_oss"], rtx, version),
        "gpt-oss sm120 later": sglang_after_sm120_marlin(version),
        "moe runner": sglang_moe_runner(sglang_rules(version), "qwen3_moe", "bf16", 10),
    }


# a patch N at which each rule runs apart in 0.5.N and 0.4.N
RULE_FLIPS = {
    "overlap off": 6,
    "hybrid backend": 10,
    "piecewise": 10,
    "detokenizer": 13,
    "gpt-oss one pool": 7,
    "gpt-oss sm120": 14,
    "gpt-oss sm120 later": 17,
    "moe runner": 9,
}


def test_a_later_sglang_release_runs_every_rule_as_a_bare_release(models):
    """0.6 and 0.6.1 run every patch-gated rule as a bare 0.5 does (0.5's newest), not as
    0.5.1: before one reading, the overlap rule, the hybrid backend and gpt-oss's pool read
    0.6.1's patch 1 as 0.5.1's while the piecewise and detokenizer rules ran 0.5's newest."""
    bare = _sglang_rules_at(models, "0.5")
    first = _sglang_rules_at(models, "0.5.1")
    assert bare != first  # the rules do differ between 0.5's first and newest patches
    assert _sglang_rules_at(models, "0.6") == bare
    assert _sglang_rules_at(models, "0.6.1") == bare


def test_a_0_4_release_runs_no_rule_of_a_0_5_patch(models):
    """The patch-gated rules are 0.5's: a 0.4 release runs each as 0.4.0 does, whatever its
    own patch (0.4.10's patch 10 is no 0.5.10: Qwen3-Next's SM100 triton rule ends there)."""
    assert _sglang_rules_at(models, "0.4.10") == _sglang_rules_at(models, "0.4.0")


@pytest.mark.parametrize(("rule", "patch"), RULE_FLIPS.items())
def test_each_0_5_patch_rule_reads_0_4_and_0_5_of_one_patch_apart(models, rule, patch):
    """Every patch-gated rule passes SglangRules.from_05: at the patch where 0.5 turns it,
    0.5.N runs it and 0.4.N runs 0.4.0's side (before the one gate, note
    sim-gpt-oss-sm120-kernel read 0.4.17's 17 as a release after 0.5.16)."""
    new, old = (_sglang_rules_at(models, f"0.{minor}.{patch}")[rule] for minor in (5, 4))
    assert new != old
    assert old == _sglang_rules_at(models, "0.4.0")[rule]


@pytest.mark.parametrize(
    ("version", "first", "bare", "runs"),
    [
        ("0.5.9", 9, True, True),
        ("0.4.9", 9, True, False),  # 0.4's patch 9 is no 0.5.9
        ("0.5.8", 9, True, False),
        ("0.5", 9, True, True),  # a bare 0.5: the newest rules kvplan models
        ("0.5", 9, False, False),  # a rule dated after them
        ("0.6.1", 9, True, True),  # a later release: a bare 0.5's
        ("0.3.2", 0, True, False),  # an earlier one: 0.4.0's
    ],
)
def test_the_one_0_5_patch_gate(version, first, bare, runs):
    assert sglang_rules(version).from_05(first, bare) is runs


def test_vllm_rules_read_rc_and_bare_releases_as_the_others_do():
    # async scheduling is on from 0.12 (vllm-project/vllm#27614): its release candidates too
    assert async_scheduling_default("0.12.0", False)
    assert async_scheduling_default("0.12.0rc1", False)
    assert not async_scheduling_default("0.11.2", False)
    # Hopper runs OpenAI's Triton MXFP4 MoE from 0.11.1: a bare 0.11 is its newest patch
    h100 = load_profile("h100-sxm")
    assert not mxfp4_moe_rows_run(h100, "0.11.0")
    assert mxfp4_moe_rows_run(h100, "0.11.1rc2")
    assert mxfp4_moe_rows_run(h100, "0.11")
    assert vllm_version_tuple("0.19.1+cu129") == (0, 19)
    with pytest.raises(KvplanError, match="kvplan follows"):
        vllm_version_tuple("0.19x")
