"""`--gpu local`: the GPU of this machine, as the device reports it (its name and NVML's total, via
nvidia-ml-py, which kvplan.inputs.hardware pins to the matching profile's CUDA total; where none
matches, the total CUDA reports, via torch, imported only then: ~20 s; on a Mac, macOS's
working set), and
macOS's rule for a Mac GPU's share of unified memory. kvplan.inputs.hardware.local_profile
matches the device to the nearest bundled profile, which gives its peaks and bandwidth."""

from __future__ import annotations

import os
import platform
import subprocess

from kvplan.errors import KvplanError
from kvplan.units import GIB, MIB

# NVML's (nvidia-smi's) total exceeds what CUDA reports by 470-720 MiB (H100 470, H200 615,
# B200 717, RTX 5090 506): where no profile pins it, kvplan takes the middle of that range.
NVML_CUDA_GAP_BYTES = 600 * MIB
NVML_GAP_MAX_BYTES = GIB


def read_local_device() -> tuple[str, int, str]:
    """(device name, memory bytes as software sees it, how it was read), or KvplanError. NVML
    first (milliseconds): its answer, "nvml", is not CUDA's total, and the caller pins it to a
    profile or asks `torch_device` for the exact one."""
    found = nvml_device()
    if found is not None:
        return found[0], found[1], "nvml"
    found_torch = torch_device()
    if found_torch is not None:
        return found_torch
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return _apple_device()
    raise KvplanError(
        "--gpu local: no GPU found (torch sees no CUDA or MPS device and NVML none); "
        "name a profile instead (kvplan gpus), or install torch or nvidia-ml-py"
    )


def torch_device() -> tuple[str, int, str] | None:
    """The device torch uses and the total it reports (CUDA's, or MPS's working set), None
    where torch is missing or sees no GPU."""
    try:
        import torch
    except ImportError:
        return None
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
    return None


def nvml_device() -> tuple[str, int] | None:
    """(name, NVML's total) of the GPU torch would use (CUDA_VISIBLE_DEVICES' first), None
    where pynvml is missing, finds none, or the GPU is split by MIG (NVML's total is then the
    whole GPU's, not the instance CUDA sees)."""
    try:
        import pynvml  # the nvidia-ml-py distribution
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = nvml_handle(pynvml, 0, None)
        try:
            if pynvml.nvmlDeviceGetMigMode(handle)[0]:
                return None
        except Exception:  # noqa: BLE001 - no MIG on this GPU or driver
            pass
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return name, int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:  # noqa: BLE001 - NVML raises its own error types; no device is the answer
        return None


def nvml_handle(pynvml, torch_index: int, props):
    """The NVML handle of the torch device `torch_index`. NVML numbers every GPU in the machine;
    torch numbers those CUDA_VISIBLE_DEVICES lists, in its order, by index or by UUID: match by
    the device's UUID where torch gives it, else through the visible list, else by index."""
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(
                text if text.startswith("GPU-") else f"GPU-{text}"
            )
        except Exception:  # noqa: BLE001 - MIG and older drivers: fall through
            pass
    visible = [
        v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()
    ]
    if torch_index < len(visible):
        entry = visible[torch_index]
        if entry.isascii() and entry.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
        return pynvml.nvmlDeviceGetHandleByUUID(entry)
    return pynvml.nvmlDeviceGetHandleByIndex(torch_index)


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
