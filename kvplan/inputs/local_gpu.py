"""`--gpu local`: the GPU of this machine, as the device reports it (its name, and the total CUDA
reports, via torch; else NVML's total, via nvidia-ml-py; on a Mac, macOS's working set), and
macOS's rule for a Mac GPU's share of unified memory. kvplan.inputs.hardware.local_profile
matches the device to the nearest bundled profile, which gives its peaks and bandwidth."""

from __future__ import annotations

import platform
import subprocess

from kvplan.errors import KvplanError
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


def mac_memory_bytes() -> int | None:
    """A Mac's unified memory (sysctl hw.memsize), None where it cannot be read."""
    ram = _sysctl("hw.memsize")
    return int(ram) if ram.isascii() and ram.isdigit() else None


def apple_default_working_set_bytes(
    unified_memory_bytes: float, wired_limit_mb: int | None = None
) -> float:
    """Metal's recommendedMaxWorkingSetSize, the GPU's share of a Mac's unified memory, on
    macOS 14/15: 2/3 of the memory up to 32 GiB, 3/4 above, as ggml's Metal backend prints it
    (`ggml_metal_init: recommendedMaxWorkingSetSize`): 22906.50 MB on 32 GiB (2/3); 28991.03 MB
    on 36 GiB, 51539.61 MB on 64 GiB, 103079.22 MB on 128 GiB (3/4), in public llama.cpp logs;
    10.67 GiB on a 16 GB M4 (exo PR #1672). Apple sells no size between 32 and 36 GB, so the
    step lies in (32, 36] GiB. `sudo sysctl iogpu.wired_limit_mb=<MiB>` replaces it (Metal
    then reports that many MiB, llmfit PR #754; 0 means unset); macOS 26 defaults higher (an
    M5 Max 128 GB reports 107.52 GiB, antirez/ds4 PR #893), not modelled."""
    if wired_limit_mb:
        return float(wired_limit_mb * MIB)
    share = 2 / 3 if unified_memory_bytes <= 32 * GIB else 3 / 4
    return unified_memory_bytes * share
