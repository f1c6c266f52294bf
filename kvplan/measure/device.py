"""What device `measure` runs on: CUDA (torch + pynvml) or the CPU (/proc/cpuinfo, sysfs caches),
and which hardware profile it compares against."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile, bundled_profiles, load_profile


def _cpu_caches() -> dict:
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        value = (
            int(size[:-1]) * {"K": 1024, "M": 1024**2}.get(size[-1], 1)
            if size[-1] in "KM"
            else int(size)
        )
        caches[f"L{level}"] = value
    return caches


def _cpu_flags_and_name() -> tuple[str, set[str]]:
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("unknown CPU", "x86_64", ""):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def _total_ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def detect_cpu(threads: int) -> dict:
    name, flags = _cpu_flags_and_name()
    caches = _cpu_caches()
    fast_bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    return {
        "kind": "cpu",
        "name": name,
        "cores": os.cpu_count(),
        "threads": threads,
        "caches_bytes": caches,
        "last_level_cache_bytes": max(caches.values()) if caches else 32 << 20,
        "memory_bytes": _total_ram_bytes(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "fast_bf16": fast_bf16,
        "measure_dtype": "bf16" if fast_bf16 else "fp32",
    }


def detect_cuda() -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {
        "kind": "cuda",
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "last_level_cache_bytes": getattr(props, "L2_cache_size", 0) or 50 << 20,
        "measure_dtype": "bf16",
        "clocks_mhz": None,
        "power_limit_w": None,
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        info["clocks_mhz"] = {
            "sm": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "sm_max": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        }
        info["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000
        info["nvml_name"] = pynvml.nvmlDeviceGetName(handle)
        if isinstance(info["nvml_name"], bytes):
            info["nvml_name"] = info["nvml_name"].decode()
    except Exception as exc:  # pynvml missing or no NVML: the figures stay null
        info["nvml_error"] = exc.__class__.__name__
    return info


def detect(device: str, threads: int) -> dict:
    if device == "cuda":
        if not torch.cuda.is_available():
            raise KvplanError("--device cuda: no CUDA device is visible to torch")
        return detect_cuda()
    if device != "cpu":
        raise KvplanError(f"--device {device!r}: choose cpu or cuda")
    return detect_cpu(threads)


def match_profile(info: dict) -> GpuProfile | None:
    """A bundled profile whose pynvml name matches and whose memory is within 10%."""
    if info["kind"] != "cuda":
        return None
    name = info.get("nvml_name") or info["name"]
    for profile in bundled_profiles().values():
        if (
            name in profile.match_names
            and abs(profile.memory_bytes - info["memory_bytes"]) < 0.1 * profile.memory_bytes
        ):
            return profile
    return None


def choose_profile(info: dict, gpu: str | None) -> GpuProfile | None:
    return load_profile(gpu) if gpu else match_profile(info)
