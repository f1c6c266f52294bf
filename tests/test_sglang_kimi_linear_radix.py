"""Kimi Linear's radix cache in SGLang by release (server_args._handle_model_specific_adjustments
of each wheel): 0.5.6-0.5.8 "Disabling Radix Cache for KimiLinearForCausalLM", 0.5.9-0.5.13
_handle_mamba_radix_cache(support_mamba_cache=False): no radix cache; 0.5.14 routes it through
_handle_mamba_radix_cache like every hybrid (MambaRadixCache kept; "auto" resolves to no_buffer,
the architecture not in _support_mamba_cache_extra_buffer's list); 0.5.16 adds it to
_MAMBA_EXTRA_BUFFER_ARCHS (arg_groups/overrides.py), so "auto" resolves to extra_buffer."""

from __future__ import annotations

import json

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import (
    mamba_default_strategy,
    mamba_radix_overlap_off,
    mamba_track_slots,
    sglang_radix_off,
    speculative_radix_off,
)
from kvplan.inputs.architectures import build_model
from kvplan.inputs.hardware import load_profile

from helpers import REPO

DEFAULTS = REPO / "tests" / "data" / "class_configs" / "kimi_linear.KimiLinearConfig-defaults.json"
H100 = load_profile("h100")


@pytest.fixture(scope="module")
def kimi():
    return build_model(json.loads(DEFAULTS.read_text()), "kimi-linear")


def _request(version: str, **fields) -> EngineRequest:
    return EngineRequest(engine="sglang", sglang_version=version, max_model_len=4096, **fields)


@pytest.mark.parametrize(
    "version, reason",
    [
        ("0.5.6", "unsupported"),
        ("0.5.9", "unsupported"),
        ("0.5.13", "unsupported"),
        ("0.5", "unsupported"),  # April 2026's main: before 0.5.14
        ("0.5.14", None),  # MambaRadixCache kept (no_buffer)
        ("0.5.16", None),
        ("0.5.23", None),
    ],
)
def test_the_radix_cache_by_release(kimi, version, reason):
    assert kimi.model_type == "kimi_linear"
    assert sglang_radix_off(kimi, H100, _request(version), "fa3") == reason


@pytest.mark.parametrize(
    "version, strategy",
    [
        ("0.5.13", None),
        ("0.5.14", "no_buffer"),
        ("0.5.15", "no_buffer"),
        ("0.5.16", "extra_buffer"),
    ],
)
def test_auto_resolves_as_the_release_lists_it(kimi, version, strategy):
    assert mamba_default_strategy(kimi, H100, version, False, None, True) == strategy


def test_with_the_radix_cache_it_follows_the_hybrid_rules(kimi):
    """0.5.14: no_buffer turns the overlap scheduler off and a speculating launch needs
    --disable-radix-cache (as for every hybrid); 0.5.13: the radix cache is off first, so
    neither, and an extra_buffer given holds no track buffer."""
    assert mamba_radix_overlap_off(kimi, "0.5.14", "fa3", False, True)
    assert not mamba_radix_overlap_off(kimi, "0.5.13", "fa3", False, True)
    assert speculative_radix_off(kimi, "0.5.14")
    assert not speculative_radix_off(kimi, "0.5.13")
    assert mamba_track_slots(kimi, H100, "extra_buffer", "0.5.13", True, False, True) == 0
    assert mamba_track_slots(kimi, H100, "extra_buffer", "0.5.16", True, False, True) == 2
