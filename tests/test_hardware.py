"""Hardware profiles: every bundled one loads with plausible numbers; bad YAML is refused."""

from __future__ import annotations

import json
import re

import pytest

from kvplan.errors import KvplanError
from kvplan.formulas.roofline import ridge_flop_per_byte
from kvplan.inputs.hardware import bundled_profiles, load_profile

from helpers import REPO, run_cli, run_json

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
    # the GPUs people rent now
    "b300",
    "gb300",
    "mi355x",
    "h20",
    "rtx-5090",
    "rtx-pro-6000",
    "l40",
    "a10g",
    "l20",
]
# Compute-light SKUs whose ridge sits below the datacenter range (export-limited Hopper).
LOW_RIDGE = {"h20", "h20-3e"}


def test_every_required_profile_is_bundled():
    assert set(REQUIRED) <= set(bundled_profiles())


@pytest.mark.parametrize("key", sorted(bundled_profiles()))
def test_profiles_are_physically_plausible(key):
    """Ranges the datasheets support (docs/hardware-profiles.md): bandwidth, dense peaks, ridge,
    memory, and the memory the device reports against the nominal figure."""
    p = bundled_profiles()[key]
    ridge = ridge_flop_per_byte(p.peak("bf16"), p.memory_bandwidth_bytes_per_s)
    assert p.source
    if p.vendor == "CPU":
        # a host for llama.cpp's offload: DDR bandwidth and a vector-unit peak, no reported total
        assert 20e9 <= p.memory_bandwidth_bytes_per_s <= 1e12
        assert 1 < ridge < 100
        return
    if p.vendor == "Apple":
        # unified memory, no matrix units: a low ridge; Metal's default working set is 3/4 of
        # the RAM, which Apple counts in GiB
        assert 10 < ridge < 50
        assert p.memory_reported_basis in ("measured", "estimated")
        assert p.memory_reported_bytes == 0.75 * (p.memory_bytes / 1e9) * 2**30
        assert p.memory_reported_source
        return
    assert (20 if key in LOW_RIDGE else 50) < ridge < 700
    assert 1e12 <= p.peak("bf16") <= 5e15  # dense: no datacenter part reaches 5 PF bf16 dense
    assert 8e9 <= p.memory_bytes <= 600e9
    assert 0.1e12 <= p.memory_bandwidth_bytes_per_s <= 10e12
    if "fp8" in p.peak_flop_per_s:
        # fp8 runs at twice the 16-bit rate (1x on Gaudi 3): a sparse figure mistaken for dense
        # in one of the two would break the ratio
        assert 0.99 <= p.peak("fp8") / p.peak("bf16") <= 2.05
    # the total the device reports, with its basis and source
    assert p.memory_reported_bytes and p.memory_reported_basis in ("exact", "measured", "estimated")
    assert p.memory_reported_source
    # NVIDIA's and AMD's nominal GB are close to GiB: the reported total sits within 0.95-1.08 of
    # the nominal read as decimal bytes (ECC-on GDDR loses 1/16; HBM reports more than 10^9 x GB)
    assert 0.95 <= p.memory_reported_bytes / p.memory_bytes <= 1.08
    if p.l2_cache_bytes:
        assert 1e6 <= p.l2_cache_bytes <= 512e6


def test_reported_memory_of_the_h200_is_not_the_nominal_141_gb():
    h200 = load_profile("h200")
    assert h200.usable_memory_bytes / 2**30 == pytest.approx(139.80, abs=0.01)
    assert load_profile("a100").usable_memory_bytes / 2**30 == pytest.approx(79.15, abs=0.01)


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
    assert (
        p.peak("bf16") == 100e12
        and ridge_flop_per_byte(p.peak("bf16"), p.memory_bandwidth_bytes_per_s) == 100
    )


@pytest.mark.parametrize(
    "text,needle",
    [
        (GOOD.replace("memory_bytes: 24e9\n", ""), "lacks memory_bytes"),
        (GOOD.replace("1e12", "fast"), "must be a number"),
        (GOOD.replace("1e12", "-1"), "must be a positive number"),
        (GOOD + "memory_bandwidth_bytes_per_s: 2e12\n", "appears twice"),
        ("a: &x [1, 2]\nb: *x\n" + GOOD, "anchors are not allowed"),
        (GOOD.replace("24e9", "1" * 5000), "not plausible"),
        ("a:\n" + "".join("  " * i + "- \n" for i in range(1, 30)), "nested deeper"),
        (GOOD.replace("memory_bytes: 24e9", "memory_bytes: .nan"), "positive number"),
        (GOOD.replace("bf16: 100e12", "fp4: 1"), "unknown peak dtype"),
        ("name: [unclosed", "invalid YAML"),
        ("- a list", "must be a YAML mapping"),
        # third campaign: figures too small to be a device priced every step at infinite time
        (GOOD.replace("1e12", "1e-300"), "between 1e+06 and 1e+15"),
        (GOOD.replace("bf16: 100e12", "bf16: 1e-300"), "between 1e+06 and 1e+18"),
        (GOOD.replace("memory_bytes: 24e9", "memory_bytes: 1"), "between 1e+06"),
        (GOOD + "memory_reported_bytes: 1e14\n", "more than 1.1 x memory_bytes"),
        (GOOD + "interconnect: {name: x, bandwidth_bytes_per_s: 1e-9}\n", "between 1e+06"),
        ("!!python/object/apply:os.system ['true']\n", "invalid YAML"),
        (GOOD.replace("name: Test GPU", "name: !!python/name:os.system"), "invalid YAML"),
        # issue 34: the compute capability is data, checked as any figure is
        (GOOD + "vendor: NVIDIA\ncompute_capability: 9\n", "must be MAJOR.MINOR"),
        (GOOD + "vendor: NVIDIA\ncompute_capability: hopper\n", "must be MAJOR.MINOR"),
        (GOOD + "vendor: NVIDIA\ncompute_capability: '9.0.1'\n", "must be MAJOR.MINOR"),
        (GOOD + "vendor: NVIDIA\ncompute_capability: [9, 0]\n", "must be MAJOR.MINOR"),
        (GOOD + "vendor: NVIDIA\ncompute_capability: '0.5'\n", "must be MAJOR.MINOR"),
        (GOOD + "vendor: AMD\ncompute_capability: '9.4'\n", "only an NVIDIA profile"),
    ],
)
def test_bad_yaml_is_refused(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(KvplanError, match=re.escape(needle)):
        load_profile(str(path))
    code, _, err = run_cli("roofline", "--gpu", str(path))
    assert code == 2 and needle in err


def test_gpus_command_lists_ridges():
    rows = {r["key"]: r for r in run_json("gpus")["gpus"]}
    assert rows["h100-sxm"]["ridge_bf16_flop_per_byte"] == pytest.approx(295.3, abs=0.1)
    assert rows["a100-80gb-sxm"]["ridge_fp8_flop_per_byte"] is None


class FakeNvml:
    """Stands in for nvidia-ml-py: one H200 as NVML reports it (nvidia-smi's total)."""

    @staticmethod
    def nvmlInit():
        pass

    @staticmethod
    def nvmlDeviceGetHandleByIndex(index):
        return index

    @staticmethod
    def nvmlDeviceGetName(handle):
        return b"NVIDIA H200"

    @staticmethod
    def nvmlDeviceGetMemoryInfo(handle):
        class Info:
            total = 143771 * 2**20

        return Info


def test_gpu_local_reads_the_device_and_takes_the_nearest_profiles_peaks(monkeypatch):
    import sys

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml)
    local = load_profile("local")
    h200 = load_profile("h200")
    assert local.name == "NVIDIA H200 (local)" and local.memory_reported_basis == "device"
    assert local.peak_flop_per_s == h200.peak_flop_per_s
    # NVML's total less its gap to CUDA's: within 5 MiB of the CUDA total seen on an H200
    assert abs(local.usable_memory_bytes - h200.usable_memory_bytes) < 6 * 2**20
    data = run_json("capacity", "llama-3.1-8b", "--gpu", "local")
    assert data["gpu"] == "NVIDIA H200 (local)"


def test_gpu_local_without_a_device_is_a_clear_error(monkeypatch):
    import sys

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, _, err = run_cli("capacity", "llama-3.1-8b", "--gpu", "local")
    assert code == 2 and "no GPU found" in err


def test_the_compiled_profiles_are_the_yaml_read_by_the_strict_loader():
    """hardware_profiles/bundled.json (`python scripts/compile_profiles.py` writes it) holds what
    the strict loader reads from every bundled YAML, and each profile and price parsed from it
    equals the one parsed from its YAML file."""
    from kvplan.inputs.hardware import _profiles_dir, compile_bundled, load_yaml, parse_profile
    from kvplan.inputs.prices import default_prices, prices_from
    from kvplan.inputs.profile_cache import COMPILED, render

    folder = _profiles_dir()
    written = (folder / COMPILED).read_text(encoding="utf-8")
    assert written == render(compile_bundled(folder)), "run python scripts/compile_profiles.py"
    paths = sorted(folder.glob("*.yaml"))
    assert list(bundled_profiles()) == [p.stem for p in paths if p.stem != "prices"]
    for path in paths:
        if path.stem == "prices":
            assert default_prices() == prices_from(load_yaml(path))
        else:
            assert bundled_profiles()[path.stem] == parse_profile(
                load_yaml(path), path.name, path.stem
            )


def test_every_name_finds_the_profile_a_scan_in_file_order_finds():
    from kvplan.inputs.hardware import find_bundled

    for key, profile in bundled_profiles().items():
        for name in (key, profile.name, profile.name.upper(), *profile.aliases):
            first = next(
                p
                for p in bundled_profiles().values()
                if name.lower() in (p.key, p.name.lower()) or name.lower() in p.aliases
            )
            assert find_bundled(f" {name} ") == first
    assert find_bundled("no-such-gpu") is None


def test_a_yaml_edited_since_compiling_is_read_from_the_yaml(tmp_path):
    """The compiled file is a cache: a changed, added or removed YAML sends every read back
    to the strict loader, so an edited profile takes effect before it is recompiled."""
    import shutil

    from kvplan.inputs.hardware import _profiles_dir, read_bundled
    from kvplan.inputs.profile_cache import COMPILED, read_compiled

    shutil.copytree(_profiles_dir(), tmp_path / "p")
    folder = tmp_path / "p"
    assert read_compiled(folder) == json.loads((folder / COMPILED).read_text(encoding="utf-8"))
    h200 = folder / "h200-sxm.yaml"
    h200.write_text(h200.read_text().replace("sm_count: 132", "sm_count: 133"))
    (folder / "x1.yaml").write_text((folder / "l4.yaml").read_text().replace("L4", "X1"))
    assert read_compiled(folder) is None  # stale: the YAML files are read instead
    fresh = read_bundled(folder)
    assert fresh["profiles"]["h200-sxm"]["sm_count"] == 133
    assert fresh["names"]["x1"] == "x1"
    (folder / "x1.yaml").unlink()
    (folder / COMPILED).write_text("{not json")
    assert "x1" not in read_bundled(folder)["profiles"]


def test_the_package_data_ships_the_compiled_profiles():
    """CI installs the wheel: its package data must name bundled.json beside the YAML."""
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    line = next(
        line
        for line in pyproject.read_text(encoding="utf-8").splitlines()
        if line.startswith('"kvplan.hardware_profiles" =')
    )
    assert '"bundled.json"' in line.partition("#")[0]


# NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus), written out here a second time so
# that a profile edited by mistake fails: the engines pick backends by its major
CUDA_GPUS_TABLE = {
    "A100": (8, 0), "A10": (8, 6), "A10G": (8, 6), "RTX 3090": (8, 6), "RTX A6000": (8, 6),
    "L4": (8, 9), "L20": (8, 9), "L40": (8, 9), "L40S": (8, 9), "RTX 4090": (8, 9),
    "RTX 6000 Ada": (8, 9), "H100": (9, 0), "H200": (9, 0), "H20": (9, 0), "H800": (9, 0),
    "B200": (10, 0), "GB200": (10, 0), "B300": (10, 3), "GB300": (10, 3), "RTX 5090": (12, 0),
    "RTX PRO 6000": (12, 0),
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(bundled_profiles()))
def test_every_nvidia_profile_states_its_compute_capability(key):
    profile = bundled_profiles()[key]
    if profile.vendor != "NVIDIA":
        assert profile.compute_capability is None
        return
    # the table's model the profile's name starts with, longest first (A10G before A10)
    model = max((m for m in CUDA_GPUS_TABLE if profile.name.startswith(m)), key=len)
    assert profile.compute_capability == CUDA_GPUS_TABLE[model], profile.name


def test_the_backends_follow_the_profiles_compute_capability_not_its_name(tmp_path):
    """A Hopper under a name with no "H100" in it picks Hopper's backends; one named "H100"
    that states Ampere's capability picks Ampere's (gpu_generation read the name before)."""
    from kvplan.engines.vllm import default_block_size, gpu_generation
    from kvplan.inputs.sources import load_model

    h100 = (REPO / "hardware_profiles/h100-sxm.yaml").read_text()
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(h100.replace("name: H100 SXM", "name: Lab Hopper box"))
    ampere = tmp_path / "ampere.yaml"
    ampere.write_text(h100.replace('compute_capability: "9.0"', 'compute_capability: "8.0"'))
    hopper, named = load_profile(str(renamed)), load_profile(str(ampere))
    assert (gpu_generation(hopper), gpu_generation(named)) == (9, 8)
    spec = load_model("deepseek-v2-lite")  # MLA: FLASH_ATTN_MLA on Hopper, TRITON_MLA on Ampere
    assert default_block_size(spec, "auto", hopper, 1) == 16
    assert default_block_size(spec, "fp8", hopper, 1) == 64
    assert default_block_size(spec, "fp8", named, 1) == 16  # TRITON_MLA's default block


def test_a_profile_without_compute_capability_says_what_it_assumed(tmp_path):
    h100 = (REPO / "hardware_profiles/h100-sxm.yaml").read_text()
    path = tmp_path / "no-cc.yaml"
    path.write_text(h100.replace('compute_capability: "9.0"', ""))
    assert load_profile(str(path)).compute_capability is None
    for engine in ("vllm", "sglang"):
        out = run_json("engine", "llama-3.1-8b", "--engine", engine, "--gpu", str(path))
        ids = [n["id"] for n in out["notes"]]
        assert "engine-compute-capability" in ids, (engine, ids)
        bundled = run_json("engine", "llama-3.1-8b", "--engine", engine, "--gpu", "h100")
        assert "engine-compute-capability" not in [n["id"] for n in bundled["notes"]]
