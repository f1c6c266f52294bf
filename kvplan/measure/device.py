"""What device `measure` runs on, and its identity in every result: the GPU (torch, then pynvml
from the `nvidia-ml-py` distribution, matched to the torch device under CUDA_VISIBLE_DEVICES) or
the CPU (/proc/cpuinfo, sysfs caches), the software stack, and the thread layout."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile, bundled_profiles, load_profile
from kvplan.inputs.local_gpu import nvml_handle


def _cpu_caches() -> dict:
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        caches[f"L{level}"] = int(size.rstrip("KMG")) * scale
    return caches


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    name = ""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name or platform.processor() or "unknown CPU", flags


def cpu_model() -> str:
    """The CPU's model name, as benchmarks record the machine they timed on."""
    return _cpu_model_and_flags()[0]


def _total_ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cpus(window_s: float = 0.3) -> float | None:
    """CPUs kept busy by other processes, sampled from /proc/stat over `window_s` while this one
    sleeps (None where /proc/stat is not readable)."""

    def sample():
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        values = [int(v) for v in fields[:8]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values), idle

    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def default_threads() -> tuple[int, float | None]:
    """A thread layout that does not oversubscribe: the CPUs this process may use, less those
    other processes keep busy, less one left free for everything else (at least one). On two
    cores: one thread. An OpenMP region whose second thread shares a core with another process
    waits for it at every barrier, which inflates many small operations far more than a few
    large ones; and load that arrives after the start must find a free core too."""
    cpus = usable_cpus()
    busy = busy_cpus()
    return max(1, min(cpus, round(cpus - (busy or 0.0)) - 1)), busy


def cpu_identity(threads: int, busy: float | None = None) -> dict:
    import torch

    name, flags = _cpu_model_and_flags()
    caches = _cpu_caches()
    return {
        "kind": "cpu",
        "name": name,
        "cpu_model": name,
        "cpu_threads": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "threads": threads,
        "busy_cpus_at_start": busy,
        "memory_bytes": _total_ram_bytes(),
        "caches_bytes": caches,
        "last_level_cache_bytes": max(caches.values()) if caches else 32 << 20,
        "isa": torch.backends.cpu.get_cpu_capability(),
        "fast_bf16": bool({"avx512_bf16", "amx_bf16"} & flags),
        **software(),
    }


def software() -> dict:
    import torch

    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "kvplan_version": __version__,
        "os": f"{platform.system()} {platform.release()}",
    }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_identity(threads: int) -> dict:
    """The GPU torch uses, its name read first (torch), then what pynvml adds, each optional
    query on its own so that one refusal loses only that figure."""
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    info = {
        "kind": "cuda",
        "name": props.name,
        "torch_index": index,
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "last_level_cache_bytes": getattr(props, "L2_cache_size", 0) or 50 << 20,
        "compute_capability": f"{props.major}.{props.minor}",
        "nvml_name": None,
        "driver_version": None,
        "clocks_mhz": None,
        "power_limit_w": None,
        "nvml_error": None,
        "cpu_model": _cpu_model_and_flags()[0],
        "cpu_threads": os.cpu_count(),
        "threads": threads,
        **software(),
    }
    try:
        import pynvml  # the nvidia-ml-py distribution
    except ImportError:
        info["nvml_error"] = "pynvml not installed (pip install nvidia-ml-py)"
        return info
    try:
        pynvml.nvmlInit()
        handle = nvml_handle(pynvml, index, props)
        info["nvml_name"] = _text(pynvml.nvmlDeviceGetName(handle))
    except Exception as exc:  # noqa: BLE001 - no NVML: the optional figures stay null
        info["nvml_error"] = exc.__class__.__name__
        return info
    queries = {
        "driver_version": lambda: _text(pynvml.nvmlSystemGetDriverVersion()),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
        "clocks_mhz": lambda: {
            "sm": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "sm_max": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_max": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        },
    }
    for key, query in queries.items():
        try:
            info[key] = query()
        except Exception:  # noqa: BLE001 - a query this GPU or driver refuses stays null
            pass
    return info


def detect(device: str, threads: int, busy: float | None = None) -> dict:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise KvplanError("--device cuda: no CUDA device is visible to torch")
        return cuda_identity(threads)
    if device != "cpu":
        raise KvplanError(f"--device {device!r}: choose auto, cpu or cuda")
    return cpu_identity(threads, busy)


def device_key(identity: dict) -> str:
    """What makes two results comparable: the kind and the name of the device (for a CPU, its
    model and how many threads it offers)."""
    if identity.get("kind") == "cpu":
        return f"cpu: {identity.get('cpu_model') or identity.get('name')} x{identity.get('cpu_threads')}"
    return f"{identity.get('kind')}: {identity.get('nvml_name') or identity.get('name')}"


def match_profile(info: dict) -> GpuProfile | None:
    """A bundled profile whose NVML (or torch) name matches and whose memory is within 10%."""
    if info["kind"] != "cuda":
        return None
    names = {info.get("nvml_name"), info.get("name")} - {None}
    for profile in bundled_profiles().values():
        if (
            names & set(profile.match_names)
            and abs(profile.memory_bytes - info["memory_bytes"]) < 0.1 * profile.memory_bytes
        ):
            return profile
    return None


def choose_profile(info: dict, gpu: str | None) -> GpuProfile | None:
    return load_profile(gpu) if gpu else match_profile(info)
