"""Hardware profiles: every bundled one loads with plausible numbers; bad YAML is refused."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import bundled_profiles, load_profile

from helpers import run_cli, run_json

REQUIRED = [
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200-sxm",
    "h200-nvl",
    "a100-40gb",
    "a100-80gb-sxm",
    "a100-80gb-pcie",
    "l4",
    "l40s",
    "a10",
    "b200",
    "gb200",
    "mi300x",
    "mi325x",
    "rtx-4090",
    "gaudi3",
]


def test_every_required_profile_is_bundled():
    assert set(REQUIRED) <= set(bundled_profiles())


@pytest.mark.parametrize("key", REQUIRED)
def test_profiles_are_plausible(key):
    p = bundled_profiles()[key]
    assert 50 < p.ridge_flop_per_byte("bf16") < 600
    assert 16e9 <= p.memory_bytes <= 300e9
    assert 0.2e12 <= p.memory_bandwidth_bytes_per_s <= 10e12
    assert p.source
    if "fp8" in p.peak_flop_per_s:
        assert p.peak("fp8") >= p.peak("bf16")


@pytest.mark.parametrize(
    "alias,name",
    [
        ("h100", "H100 SXM"),
        ("a100", "A100 80GB SXM"),
        ("H200 SXM", "H200 SXM"),
        ("mi300x", "MI300X"),
    ],
)
def test_aliases(alias, name):
    assert load_profile(alias).name == name


def test_h100_reports_79_19_gib():
    assert load_profile("h100").usable_memory_bytes / 2**30 == pytest.approx(79.19, abs=0.005)


GOOD = """
name: Test GPU
peak_flop_per_s: {bf16: 100e12}
memory_bytes: 24e9
memory_bandwidth_bytes_per_s: 1e12
"""


def test_user_yaml_numbers_are_coerced(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(GOOD)  # PyYAML reads 100e12 as a string
    p = load_profile(str(path))
    assert p.peak("bf16") == 100e12 and p.ridge_flop_per_byte() == 100


@pytest.mark.parametrize(
    "text,needle",
    [
        (GOOD.replace("memory_bytes: 24e9\n", ""), "lacks memory_bytes"),
        (GOOD.replace("1e12", "fast"), "must be a number"),
        (GOOD.replace("1e12", "-1"), "must be positive"),
        (GOOD.replace("bf16: 100e12", "fp4: 1"), "unknown peak dtype"),
        ("name: [unclosed", "invalid YAML"),
        ("- a list", "must be a YAML mapping"),
    ],
)
def test_bad_yaml_is_refused(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(KvplanError, match=needle):
        load_profile(str(path))
    code, _, err = run_cli("roofline", "--gpu", str(path))
    assert code == 2 and needle in err


def test_gpus_command_lists_ridges():
    rows = {r["key"]: r for r in run_json("gpus")["gpus"]}
    assert rows["h100-sxm"]["ridge_bf16_flop_per_byte"] == pytest.approx(295.3, abs=0.1)
    assert rows["a100-80gb-sxm"]["ridge_fp8_flop_per_byte"] is None
