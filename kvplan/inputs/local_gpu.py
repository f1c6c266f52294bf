"""`--gpu local`: the GPU of this machine. Its memory is read from the device (the total CUDA
reports, via torch; else NVML's total, via nvidia-ml-py); its peaks and bandwidth come from the
nearest bundled profile (matched by the device's name and memory), said so in the profile."""

from __future__ import annotations

import platform
import subprocess

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile, bundled_profiles
from kvplan.inputs.text import clean
from kvplan.units import GIB, MIB

# NVML's (nvidia-smi's) total exceeds what CUDA reports by 470-720 MiB (H100 470, H200 615,
# B200 717, RTX 5090 506): where no profile pins it, kvplan takes the middle of that range.
NVML_CUDA_GAP_BYTES = 600 * MIB
NVML_GAP_MAX_BYTES = GIB


def read_local_device() -> tuple[str, int, str]:
    """(device name, memory bytes as software sees it, how it was read), or KvplanError."""
    try:
        import torch

        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            return props.name, int(props.total_memory), "torch.cuda total_memory"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available() and hasattr(torch.mps, "recommended_max_memory"):
            return (
                _apple_chip(),
                int(torch.mps.recommended_max_memory()),
                ("torch.mps recommended_max_memory (the GPU's default working-set limit)"),
            )
    except ImportError:
        pass
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return _apple_device()
    try:
        import pynvml  # the nvidia-ml-py distribution
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            return name, total, "nvml"
        except Exception:  # noqa: BLE001 - NVML raises its own error types; no device is the answer
            pass
    raise KvplanError(
        "--gpu local: no GPU found (torch sees no CUDA or MPS device and NVML none); "
        "name a profile instead (kvplan gpus), or install torch or nvidia-ml-py"
    )


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _apple_device() -> tuple[str, int, str]:
    """A Mac without torch: hw.memsize and macOS's working-set rule, or iogpu.wired_limit_mb."""
    from kvplan.formulas.offload import apple_default_working_set_bytes

    ram = _sysctl("hw.memsize")
    if not (ram.isascii() and ram.isdigit()):
        raise KvplanError("--gpu local: sysctl hw.memsize gave no memory size; name a profile")
    wired = _sysctl("iogpu.wired_limit_mb")
    wired_mb = int(wired) if wired.isascii() and wired.isdigit() else 0
    how = (
        f"iogpu.wired_limit_mb = {wired_mb}"
        if wired_mb
        else f"macOS's default working set for hw.memsize {int(ram) / GIB:.0f} GiB"
    )
    return _apple_chip(), int(apple_default_working_set_bytes(int(ram), wired_mb)), how


def _apple_chip() -> str:
    try:
        out = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or platform.processor() or "Apple silicon"
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or "Apple silicon"


def nearest_profile(name: str, memory_bytes: int) -> GpuProfile | None:
    """A bundled profile whose match names contain the device name, else whose name appears in
    it; among several, the one whose memory is closest."""
    lowered = name.lower()
    candidates = [
        p
        for p in bundled_profiles().values()
        if any(m.lower() == lowered for m in p.match_names)
        or p.name.lower() in lowered
        or any(alias in lowered.split() for alias in p.aliases)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda p: abs(p.usable_memory_bytes - memory_bytes))


def local_profile() -> GpuProfile:
    name, memory, how = read_local_device()
    name = clean(name)[:100]
    near = nearest_profile(name, memory)
    basis = "device"
    if how == "nvml":  # NVML's total is not CUDA's: pin it to the profile's, else estimate
        if near is not None and 0 <= memory - near.usable_memory_bytes <= NVML_GAP_MAX_BYTES:
            memory = int(near.usable_memory_bytes)
            how = f"NVML, matched to {near.name}'s CUDA total ({near.memory_reported_basis})"
        else:
            memory -= NVML_CUDA_GAP_BYTES
            basis = "estimated"
            how = "NVML total less ~600 MiB (NVML counts memory CUDA does not offer)"
    if near is None:
        raise KvplanError(
            f"--gpu local found {name!r} ({memory / GIB:,.2f} GiB) but no bundled profile "
            "matches it: write one (docs/hardware-profiles.md) or measure one with kvplan "
            "measure --save-profile"
        )
    if near.memory_configurations:  # a Mac: the chip sold with this memory (cores, bandwidth)
        ram = _sysctl("hw.memsize")
        if ram.isascii() and ram.isdigit():
            from kvplan.inputs.hardware import with_memory

            near = with_memory(near, int(ram))
    return near._replace(
        key="local",
        name=f"{name} (local)",
        memory_reported_bytes=float(memory),
        memory_reported_basis=basis,
        memory_reported_source=f"read from this machine: {how}",
        source=f"{near.source} — peaks and bandwidth of the nearest profile, {near.name}",
        path="local",
    )
