"""Local machines: a Mac named with its memory, macOS's GPU share of it, Ollama as an engine, and
`kvplan fit` (what runs here)."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.formulas.offload import apple_default_working_set_bytes
from kvplan.inputs.hardware import bundled_profiles, load_profile
from kvplan.units import GIB, MIB
from tests.helpers import run_cli


def test_a_64gb_mac_gets_three_quarters_of_64_gib():
    gpu = load_profile("m3-max-64gb")
    # 64 GiB x 3/4 = 48 GiB = 51,539,607,552 B (ggml: recommendedMaxWorkingSetSize = 51539.61 MB)
    assert gpu.memory_bytes == 64 * 2**30
    assert gpu.usable_memory_bytes == 51_539_607_552
    assert gpu.memory_bandwidth_bytes_per_s == 400e9 and gpu.sm_count == 40
    assert gpu.name == "Apple M3 Max 64GB"


def test_a_small_mac_gets_two_thirds_and_the_sysctl_overrides():
    # 24 GiB x 2/3 = 16 GiB; 32 GiB x 2/3 = 22,906.50 MB as ggml logs it on a 32 GB M1 Pro
    assert load_profile("m4-pro-24gb").usable_memory_bytes == 16 * GIB
    assert apple_default_working_set_bytes(32 * GIB) / 1e6 == pytest.approx(22906.50, abs=0.01)
    # 36 GiB is above the step: 3/4, 28,991.03 MB
    assert load_profile("m3-pro-36gb").usable_memory_bytes / 1e6 == pytest.approx(
        28991.03, abs=0.01
    )
    assert apple_default_working_set_bytes(64 * GIB, wired_limit_mb=57344) == 56 * GIB
    assert apple_default_working_set_bytes(64 * GIB, wired_limit_mb=0) == 48 * GIB
    assert 57344 * MIB == 56 * GIB


def test_a_configuration_takes_the_chip_sold_with_it():
    small = load_profile("m3-max-36gb")  # the 14-core CPU / 30-core GPU part, 300 GB/s
    big = load_profile("apple-m3-max-128GB")
    assert (small.sm_count, small.memory_bandwidth_bytes_per_s) == (30, 300e9)
    assert small.peak("bf16") == pytest.approx(14.32e12 * 30 / 40)
    assert big.usable_memory_bytes == 96 * GIB and big.sm_count == 40


def test_a_bare_mac_is_refused_naming_its_sizes_in_one_line():
    with pytest.raises(KvplanError, match="m3-max-48gb, m3-max-64gb"):
        load_profile("m3-max")
    with pytest.raises(KvplanError, match="not sold with 65 GB"):
        load_profile("m3-max-65gb")
    code, out, err = run_cli("capacity", "llama-3.1-8b", "--gpu", "m4-max")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "m4-max-36gb, m4-max-48gb, m4-max-64gb, m4-max-128gb" in err
    # the memory told another way: the chip's name is enough
    code, out, err = run_cli(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "llama.cpp",
        "--gpu",
        "m3-max",
        "--gpu-memory",
        "40GiB",
        "-c",
        "8k",
        "--format",
        "json",
    )
    assert code == 0, err and '"gpu_capacity_bytes": 42949672960' in out


def test_every_apple_profile_names_sizes_and_its_largest_is_the_listed_figure():
    apple = [p for p in bundled_profiles().values() if p.vendor == "Apple"]
    assert len(apple) >= 9
    for p in apple:
        assert p.memory_configurations, p.key
        largest = p.memory_configurations[-1].memory_gib
        assert p.memory_bytes == largest * 1e9  # the listing keeps the largest configuration
        assert load_profile(f"{p.aliases[0]}-{largest}gb").usable_memory_bytes == pytest.approx(
            p.memory_reported_bytes
        )
