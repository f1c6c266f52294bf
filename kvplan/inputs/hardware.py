"""Hardware profiles: YAML files in hardware_profiles/ (or a user's file in the same schema),
read by a strict loader (no aliases, bounded size and depth, no duplicate keys) and validated and
coerced on load (PyYAML reads `4.8e12` as a string). The bundled files are read precompiled
(hardware_profiles/bundled.json, kvplan.inputs.profile_cache), one profile parsed per name asked. `--gpu local` is the device in front of
you (kvplan.inputs.local_gpu reads it) with the nearest bundled profile's peaks (local_profile)."""

from __future__ import annotations

import math
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal, overload

from kvplan.errors import KvplanError
from kvplan.inputs.files import user_path
from kvplan.inputs.kernel_tables import parse_field
from kvplan.inputs.options import check_range
from kvplan.inputs.text import clean
from kvplan.record import NamedTuple
from kvplan.units import GBIT, GIB

PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
REPORTED_BASIS = ("exact", "measured", "estimated", "device")  # device: read from this machine
MAX_PROFILE_BYTES = 256 * 1024  # a profile is a few dozen lines
MAX_DEPTH = 8


class Interconnect(NamedTuple):
    name: str
    bandwidth_bytes_per_s: float  # per GPU, both directions together (as datasheets quote)
    latency_s: float

    @property
    def one_way_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / 2


class MeasuredRates(NamedTuple):
    """What `kvplan measure --save-profile` adds to a profile: throughput curves per operator
    class, {size: FLOP/s} with sizes ascending, and the fixed cost of one launch (all optional;
    the per-operator step-time model reads them, kvplan.formulas.step_time.OpRates)."""

    dtype: str
    matmul_bandwidth_bytes_per_s: tuple[tuple[float, float], ...]  # by the GEMM's input width
    matmul_flop_per_s: tuple[tuple[float, float], ...]
    decode_attention_flop_per_s: tuple[tuple[float, float], ...]
    prefill_attention_flop_per_s: tuple[tuple[float, float], ...]
    overhead_s: float
    matmul_overhead_s: float  # more per GEMM launch
    gather_kv: bool  # the decode attention gathers its pages first (kvplan's torch path)
    device: dict  # the identity of the device measured (kvplan.measure.device)
    spread: dict  # run-to-run noise of each figure, relative


class MemoryConfiguration(NamedTuple):
    """One memory size a unified-memory chip is sold with (an Apple M3 Max with 64 GB), and what
    differs in the chip that comes with it (fewer GPU cores and less bandwidth on some)."""

    memory_gib: int  # Apple's "GB" are GiB: hw.memsize of a 64 GB Mac is 64 x 2**30
    gpu_cores: int | None = None  # None: the profile's sm_count
    memory_bandwidth_bytes_per_s: float | None = None  # None: the profile's


class GpuProfile(NamedTuple):
    key: str
    name: str
    aliases: tuple[str, ...]
    vendor: str
    peak_flop_per_s: dict
    memory_bytes: float  # the nominal capacity, as sold
    memory_reported_bytes: float | None  # the total CUDA/ROCm reports (what engines budget from)
    memory_bandwidth_bytes_per_s: float
    l2_cache_bytes: float | None
    sm_count: int | None
    interconnect: Interconnect | None
    network: Interconnect | None
    tdp_w: float | None
    match_names: tuple[str, ...]
    source: str
    path: str
    memory_reported_basis: str | None = None  # exact | measured | estimated | device
    memory_reported_source: str = ""
    gpus_per_node: int | None = None
    measured: MeasuredRates | None = None
    # the memory sizes it is sold with (Apple chips): a bare name is refused, naming them
    memory_configurations: tuple[MemoryConfiguration, ...] = ()
    # {engine: tables key} or {"borrowed": key}: the measured kernel tables it runs at
    # (kvplan.inputs.kernel_tables); {}: the H100 SXM's vLLM fractions on its datasheet rates
    kernel_tables: dict = {}
    # the GPU's link to host memory (PCIe generation and lanes, as its datasheet states them):
    # what vLLM V0's swap preemption copies blocks over (None: the profile states none)
    host_link: Interconnect | None = None
    # CUDA compute capability (major, minor) from NVIDIA's CUDA GPUs table: what vLLM and SGLang
    # pick attention and MoE backends by; None: the profile states none (not NVIDIA, or a
    # user's profile without the field: kvplan.engines.vllm.gpu_generation assumes one, noted)
    compute_capability: tuple[int, int] | None = None

    @property
    def device_vendor(self) -> str:
        """Who made the device: the profile's vendor, or for a profile `kvplan measure` wrote,
        the maker in the name the device reported ("measured" when it names none)."""
        device = self.measured.device if self.measured is not None else {}
        if self.vendor == "measured" and device.get("kind") != "cpu":
            name = " ".join(str(device.get(k) or "") for k in ("name", "nvml_name")).lower()
            if "nvidia" in name:
                return "NVIDIA"
            if "amd" in name or "instinct" in name or "radeon" in name:
                return "AMD"
        return self.vendor

    @property
    def usable_memory_bytes(self) -> float:
        """What the device reports to software where known, else the nominal capacity."""
        return self.memory_reported_bytes or self.memory_bytes

    def tensor_dtype(self, dtype: str) -> str:
        """The dtype the GEMMs run in: `dtype` where the profile has its peak, else bf16 for a
        format the tensor cores lack (weight-only: vLLM's Marlin kernels dequantize fp8 and fp4
        weights into bf16 GEMMs on A100, A10, ...)."""
        weight_only = ("int4", "mxfp4", "int8", "fp32", "fp8", "nvfp4")
        if dtype not in self.peak_flop_per_s and dtype in weight_only:
            if "bf16" in self.peak_flop_per_s:
                return "bf16"
        return dtype

    def peak(self, dtype: str) -> float:
        key = self.tensor_dtype(dtype)
        if key in self.peak_flop_per_s:
            return self.peak_flop_per_s[key]
        if key in ("bf16", "fp16") and "fp32" in self.peak_flop_per_s:
            return self.peak_flop_per_s["fp32"]  # a measured CPU profile: fp32 is its only peak
        raise KvplanError(f"{self.name} has no {dtype} peak in its profile")

    def is_model(self, *models: str) -> bool:
        """Whether one of these GPU models is a word of the name: "H200" in "NVIDIA H200 141GB"
        or "H200 NVL", not in "GH200" or "H2000" (a user's or a measured profile's name holds
        the model anywhere)."""
        name = self.name.upper()
        return any(re.search(rf"\b{re.escape(m.upper())}\b", name) for m in models)


# No device, memory or link is slower or smaller than a million per second (or bytes): below it a
# figure is a typo or an attack, and every time it divides becomes infinite.
PLAUSIBLE_RATE = 1e6
# CUDA reports binary units of a decimal "GB" (80 GB -> 85.0e9 B): at most 2**30 / 10**9 = 1.074
# times the nominal bytes; more is a wrong field (10**14 B "reported" on an 80 GB card).
REPORTED_OVER_NOMINAL = 1.1
# Vendors kvplan tells apart (kernel tables, mxfp4 padding, launch images), in the spelling the
# code compares against: a user's "nvidia" or "Amd" is the same maker, not a new one.
KNOWN_VENDORS = ("NVIDIA", "AMD", "Apple", "Intel", "CPU", "measured")
# A measured figure's relative run-to-run spread (p20-p80 over the median): 0 on a quiet device,
# above 1 only under heavy load; beyond this it is a typo, and it would hide every regression.
MAX_SPREAD = 100.0
MAX_ROUNDS = 10_000


# _number's result type by its flags: required (the default) never None, integer an int
@overload
def _number(
    data: dict,
    key: str,
    source: str,
    *,
    required: Literal[True] = ...,
    integer: Literal[False] = ...,
    maximum: float = ...,
    minimum: float = ...,
) -> float: ...
@overload
def _number(
    data: dict,
    key: str,
    source: str,
    *,
    required: Literal[True] = ...,
    integer: Literal[True],
    maximum: float = ...,
    minimum: float = ...,
) -> int: ...
@overload
def _number(
    data: dict,
    key: str,
    source: str,
    *,
    required: Literal[False],
    integer: Literal[False] = ...,
    maximum: float = ...,
    minimum: float = ...,
) -> float | None: ...
@overload
def _number(
    data: dict,
    key: str,
    source: str,
    *,
    required: Literal[False],
    integer: Literal[True],
    maximum: float = ...,
    minimum: float = ...,
) -> int | None: ...
def _number(
    data: dict,
    key: str,
    source: str,
    *,
    required: bool = True,
    integer: bool = False,
    maximum: float = 1e21,
    minimum: float = 0.0,
) -> float | None:
    value = data.get(key)
    if value is None:
        if required:
            raise KvplanError(f"{source}: profile lacks {key}")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise KvplanError(f"{source}: {key} must be a number, got {type(value).__name__}")
    if isinstance(value, str):
        text = value.replace("_", "").strip()
        if len(text) > 40:
            raise KvplanError(f"{source}: {key} is not a number")
        try:
            number = float(text)
        except ValueError:
            raise KvplanError(f"{source}: {key} must be a number, got {clean(value)!r}") from None
    elif isinstance(value, int):
        if abs(value) > 10**30:
            raise KvplanError(f"{source}: {key} is out of range")
        number = float(value)
    else:
        number = value
    if not math.isfinite(number) or number <= 0 or number > maximum:
        raise KvplanError(f"{source}: {key} must be a positive number below {maximum:g}")
    if number < minimum:  # 1e-300 B/s priced every step at infinite time, confidently
        raise KvplanError(f"{source}: {key} must be between {minimum:g} and {maximum:g}")
    if integer:
        if number != int(number):
            raise KvplanError(f"{source}: {key} must be a whole number")
        return int(number)
    return number


def _text(data: dict, key: str, source: str, default: str = "", limit: int = 2000) -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise KvplanError(f"{source}: {key} must be text")
    return clean(str(value))[:limit]


def _string_list(data: dict, key: str, source: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or len(value) > 64:
        raise KvplanError(f"{source}: {key} must be a list (at most 64 entries)")
    return tuple(clean(str(v))[:200] for v in value if isinstance(v, (str, int, float)))


def parse_profile(data: object, source: str, key: str = "") -> GpuProfile:
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: a profile must be a YAML mapping")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise KvplanError(f"{source}: profile lacks a name")
    peaks_raw = data.get("peak_flop_per_s")
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise KvplanError(f"{source}: profile lacks peak_flop_per_s (a mapping of dtype to FLOP/s)")
    peaks = {}
    for dtype in peaks_raw:
        if dtype not in PEAK_DTYPES:
            raise KvplanError(
                f"{source}: unknown peak dtype {clean(str(dtype))[:20]!r} ({', '.join(PEAK_DTYPES)})"
            )
        peaks[dtype] = _number(peaks_raw, dtype, source, maximum=1e18, minimum=PLAUSIBLE_RATE)
    if "bf16" not in peaks and "fp16" not in peaks and "fp32" not in peaks:
        raise KvplanError(f"{source}: profile needs a bf16, fp16 or fp32 peak")
    basis = data.get("memory_reported_basis")
    if basis is not None and basis not in REPORTED_BASIS:
        raise KvplanError(
            f"{source}: memory_reported_basis must be one of {', '.join(REPORTED_BASIS)}"
        )
    gpus_per_node = _number(
        data, "gpus_per_node", source, required=False, integer=True, maximum=1024
    )
    memory = _number(data, "memory_bytes", source, maximum=1e15, minimum=PLAUSIBLE_RATE)
    reported = _number(
        data, "memory_reported_bytes", source, required=False, maximum=1e15, minimum=PLAUSIBLE_RATE
    )
    if reported is not None and reported > REPORTED_OVER_NOMINAL * memory:
        raise KvplanError(
            f"{source}: memory_reported_bytes ({reported:g}) is more than "
            f"{REPORTED_OVER_NOMINAL:g} x memory_bytes ({memory:g}): one of them is wrong"
        )
    return GpuProfile(
        key=key or clean(name).lower().replace(" ", "-"),
        name=clean(name).strip()[:100],
        aliases=tuple(a.lower() for a in _string_list(data, "aliases", source)),
        vendor=_vendor(_text(data, "vendor", source, limit=100)),
        peak_flop_per_s=peaks,
        memory_bytes=memory,
        memory_reported_bytes=reported,
        memory_bandwidth_bytes_per_s=_number(
            data, "memory_bandwidth_bytes_per_s", source, maximum=1e15, minimum=PLAUSIBLE_RATE
        ),
        l2_cache_bytes=_number(data, "l2_cache_bytes", source, required=False, maximum=1e12),
        sm_count=_number(data, "sm_count", source, required=False, integer=True, maximum=1e6),
        interconnect=_link(data, "interconnect", source),
        network=_link(data, "network", source),
        tdp_w=_number(data, "tdp_w", source, required=False, maximum=1e5),
        match_names=_string_list(data, "match_names", source),
        source=_text(data, "source", source),
        path=source,
        memory_reported_basis=basis,
        memory_reported_source=_text(data, "memory_reported_source", source),
        gpus_per_node=gpus_per_node,
        measured=_measured(data.get("measured"), source),
        memory_configurations=_configurations(data, source),
        kernel_tables=parse_field(data.get("kernel_tables"), source),
        host_link=_link(data, "host_link", source),
        compute_capability=_compute_capability(data, source),
    )


# CUDA compute capabilities run from 1.0 (Tesla) to 12.x (Blackwell sm_120): a major past this is
# a typo, not a GPU
MAX_CUDA_MAJOR = 99


def _compute_capability(data: dict, source: str) -> tuple[int, int] | None:
    """`compute_capability: "9.0"` (NVIDIA's CUDA GPUs table), an NVIDIA profile's only."""
    value = data.get("compute_capability")
    if value is None:
        return None
    if _vendor(_text(data, "vendor", source, limit=100)) != "NVIDIA":
        raise KvplanError(f"{source}: compute_capability is CUDA's; only an NVIDIA profile has one")
    text = clean(str(value)).strip()[:20] if isinstance(value, (str, int, float)) else ""
    match = re.fullmatch(r"([0-9]{1,2})\.([0-9])", text)
    if isinstance(value, bool) or not match or not 1 <= int(match[1]) <= MAX_CUDA_MAJOR:
        raise KvplanError(
            f"{source}: compute_capability must be MAJOR.MINOR as NVIDIA's CUDA GPUs table "
            f"gives it (9.0, 8.9, 12.0), got {text or type(value).__name__!r}"
        )
    return int(match[1]), int(match[2])


def _configurations(data: dict, source: str) -> tuple[MemoryConfiguration, ...]:
    raw = data.get("memory_configurations")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not 1 <= len(raw) <= 32:
        raise KvplanError(f"{source}: memory_configurations must be a list (1 to 32 entries)")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise KvplanError(f"{source}: each memory configuration must be a mapping")
        where = f"{source}: memory_configurations"
        out.append(
            MemoryConfiguration(
                _number(item, "memory_gib", where, integer=True, maximum=1 << 20),
                _number(item, "gpu_cores", where, required=False, integer=True, maximum=1e6),
                _number(
                    item,
                    "memory_bandwidth_bytes_per_s",
                    where,
                    required=False,
                    maximum=1e15,
                    minimum=PLAUSIBLE_RATE,
                ),
            )
        )
    sizes = [c.memory_gib for c in out]
    if len(set(sizes)) != len(sizes):
        raise KvplanError(f"{source}: memory_configurations lists a size twice")
    return tuple(sorted(out))


def configuration_names(profile: GpuProfile) -> list[str]:
    """The spellings of a profile's memory configurations: m3-max-36gb, m3-max-48gb, ..."""
    stem = profile.aliases[0] if profile.aliases else profile.key
    return [f"{stem}-{c.memory_gib}gb" for c in profile.memory_configurations]


def with_memory(profile: GpuProfile, ram_bytes: float, how: str = "") -> GpuProfile:
    """The profile for one memory size: the chip of the configuration sold with it (cores,
    bandwidth), and the GPU's share of the memory by macOS's working-set rule."""
    from kvplan.inputs.local_gpu import apple_default_working_set_bytes

    gib = round(ram_bytes / GIB)
    config = next((c for c in profile.memory_configurations if c.memory_gib == gib), None)
    cores = (config.gpu_cores if config else None) or profile.sm_count
    scale = cores / profile.sm_count if cores and profile.sm_count else 1.0
    bandwidth = (
        config.memory_bandwidth_bytes_per_s if config else None
    ) or profile.memory_bandwidth_bytes_per_s
    working_set = apple_default_working_set_bytes(ram_bytes)
    core_words = f", {cores}-core GPU" if scale != 1.0 else ""
    return profile._replace(
        key=f"{profile.key}-{gib}gb",
        name=f"{profile.name} {gib}GB{core_words}",
        memory_bytes=float(ram_bytes),
        memory_reported_bytes=float(working_set),
        memory_reported_basis="exact",
        memory_reported_source=how
        or (
            f"macOS's default GPU working set (recommendedMaxWorkingSetSize) for {gib} GB: "
            f"{'2/3' if ram_bytes <= 32 * GIB else '3/4'} of the unified memory"
        ),
        peak_flop_per_s={k: v * scale for k, v in profile.peak_flop_per_s.items()},
        memory_bandwidth_bytes_per_s=bandwidth,
        sm_count=cores,
        memory_configurations=(),
    )


def _configured(name: str) -> GpuProfile | None:
    """`m3-max-64gb` (or `apple-m3-max-64GB`): a bundled profile at one of its memory sizes."""
    match = re.fullmatch(r"(.+?)[-_ @]?(\d{1,4})\s*gi?b", name.strip().lower())
    if not match:
        return None
    base = find_bundled(match.group(1))
    if base is None or not base.memory_configurations:
        return None
    gib = int(match.group(2))
    if gib not in [c.memory_gib for c in base.memory_configurations]:
        raise KvplanError(
            f"{base.name} is not sold with {gib} GB; choose "
            + ", ".join(configuration_names(base))
            + " (or --gpu-memory where the command takes it)"
        )
    return with_memory(base, gib * GIB)


def _vendor(text: str) -> str:
    """A known maker in its one spelling ("nvidia" -> "NVIDIA"); anything else as written."""
    folded = text.strip().casefold()
    return next((v for v in KNOWN_VENDORS if v.casefold() == folded), text.strip())


def _curve(data: dict, key: str, source: str) -> tuple[tuple[float, float], ...]:
    raw = data.get(key) or {}
    if not isinstance(raw, dict):
        raise KvplanError(f"{source}: measured.{key} must be a mapping of size to a rate")
    points = []
    for size in raw:
        at = _number({"size": size}, "size", f"{source}: measured.{key}")
        rate = _number(raw, size, f"{source}: measured.{key}", minimum=PLAUSIBLE_RATE)
        points.append((at, rate))
    return tuple(sorted(points))


def _non_negative(data: dict, key: str, source: str, maximum: float = 1e21) -> float:
    """An optional figure that may be 0 (absent: 0)."""
    if data.get(key) in (None, 0, 0.0, "0"):
        return 0.0
    return _number(data, key, source, maximum=maximum)


def _measured(data: object, source: str) -> MeasuredRates | None:
    """The optional `measured:` section a measured profile carries."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: measured must be a mapping")
    curves = {
        key: _curve(data, key, source)
        for key in (
            "matmul_bandwidth_bytes_per_s",
            "matmul_flop_per_s",
            "decode_attention_flop_per_s",
            "prefill_attention_flop_per_s",
        )
    }
    if not all(curves.values()):
        raise KvplanError(
            f"{source}: measured needs matmul bandwidth and throughput, decode and prefill "
            "attention curves"
        )
    device, spread = data.get("device") or {}, data.get("spread") or {}
    if not isinstance(device, dict) or not isinstance(spread, dict):
        raise KvplanError(f"{source}: measured.device and measured.spread must be mappings")
    # a baseline reads both: the noise of each figure and how many rounds its median took
    spread = {
        str(key): _non_negative(spread, key, f"{source}: measured.spread", maximum=MAX_SPREAD)
        for key in spread
    }
    if device.get("rounds") is not None:
        device = {
            **device,
            "rounds": _number(
                device, "rounds", f"{source}: measured.device", integer=True, maximum=MAX_ROUNDS
            ),
        }
    return MeasuredRates(
        str(data.get("dtype", "bf16")),
        curves["matmul_bandwidth_bytes_per_s"],
        curves["matmul_flop_per_s"],
        curves["decode_attention_flop_per_s"],
        curves["prefill_attention_flop_per_s"],
        _number(data, "overhead_s", f"{source}: measured", required=False) or 0.0,
        _non_negative(data, "matmul_overhead_s", f"{source}: measured"),
        bool(data.get("gather_kv", False)),
        device,
        spread,
    )


def _link(data: dict, key: str, source: str) -> Interconnect | None:
    link = data.get(key)
    if link is None:
        return None
    if not isinstance(link, dict):
        raise KvplanError(f"{source}: {key} must be a mapping")
    return Interconnect(
        _text(link, "name", source, default=key, limit=100),
        _number(
            link, "bandwidth_bytes_per_s", f"{source}: {key}", maximum=1e15, minimum=PLAUSIBLE_RATE
        ),
        _number(link, "latency_s", f"{source}: {key}", required=False, maximum=10.0) or 0.0,
    )


# A link given in Gb/s per GPU per direction (--network-gbps, --interconnect-gbps): 1 Mb/s, below
# any link a cluster runs on, up to 1 Pb/s; a vanishing figure (1e-300) priced each collective at
# ~1e300 s, past what a float's square (the metrics' spread) or JSON holds
MIN_LINK_GBPS = 0.001
MAX_LINK_GBPS = 1_000_000


def check_link_gbps(gbps: float, what: str) -> float:
    """A given link's Gb/s within [MIN_LINK_GBPS, MAX_LINK_GBPS]: the CLI's edge and the Python
    twins' (choose_link, with_interconnect) check alike."""
    return check_range(gbps, what=what, minimum=MIN_LINK_GBPS, maximum=MAX_LINK_GBPS)


def choose_link(gpu: GpuProfile, which: str, gbps: float | None = None) -> Interconnect:
    """The link a transfer uses: the intra-node interconnect or the inter-node network, or a
    given bandwidth in Gb/s per GPU per direction (a cluster without a profile)."""
    if gbps is not None:
        check_link_gbps(gbps, "--network-gbps")
        return Interconnect(f"{gbps:g} Gb/s per GPU", 2 * gbps * GBIT, 5e-6)
    if which not in ("interconnect", "network"):
        raise KvplanError(f"--link {clean(which)[:40]!r}: choose interconnect or network")
    link = gpu.interconnect if which == "interconnect" else gpu.network
    if link is None:
        raise KvplanError(f"{gpu.name}'s profile has no {which} figure; pass --network-gbps")
    return link


# the inter-node link where a profile states none: the bundled datacenter profiles' figure (one
# 400 Gb/s InfiniBand NDR NIC per GPU, hardware_profiles/h100-sxm.yaml); every command that
# prices traffic between nodes takes it from inter_node_link, and says so in a note
DEFAULT_NETWORK = Interconnect(
    "assumed 400G InfiniBand NDR per GPU (the profile states no network)", 100e9, 5e-6
)


def inter_node_link(gpu: GpuProfile) -> tuple[Interconnect, bool]:
    """The link between nodes: the profile's network, else DEFAULT_NETWORK (assumed: True)."""
    if gpu.network is None:
        return DEFAULT_NETWORK, True
    return gpu.network, False


INTERCONNECT_LATENCY_S = 2e-6  # a given intra-node link: the profiles' NVLink/xGMI figure


def with_interconnect(gpu: GpuProfile, gbps: float | None) -> GpuProfile:
    """The profile with its TP/PP interconnect replaced by a given link of `gbps` Gb/s per GPU
    per direction (PCIe Gen5 x16 between pods: 512; a cut NVLink), None: the profile's own."""
    if gbps is None:
        return gpu
    check_link_gbps(gbps, "--interconnect-gbps")
    link = Interconnect(f"given link, {gbps:g} Gb/s", 2 * gbps * GBIT, INTERCONNECT_LATENCY_S)
    return gpu._replace(interconnect=link)


def load_yaml(path: Path) -> object:
    """A profile file through the strict loader (kvplan.inputs.yaml_safe)."""
    from kvplan.atomic import note_input
    from kvplan.inputs.yaml_safe import load_strict_yaml

    note_input(path)  # an output of this command may not replace it
    try:
        if path.stat().st_size > MAX_PROFILE_BYTES:
            raise KvplanError(f"{path}: a profile larger than {MAX_PROFILE_BYTES // 1024} KiB")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise KvplanError(
            f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})"
        ) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise KvplanError(f"{path}: a profile larger than {MAX_PROFILE_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: not UTF-8 text") from None
    return load_strict_yaml(text, str(path), max_depth=MAX_DEPTH)


def _profiles_dir() -> Path:
    import kvplan.hardware_profiles as package

    return Path(package.__path__[0])


@lru_cache(maxsize=1)
def _compiled() -> dict:
    """The bundled profiles as hardware_profiles/bundled.json holds them (or as their YAML reads,
    when a file changed since it was compiled: kvplan.inputs.profile_cache)."""
    return read_bundled(_profiles_dir())


def read_bundled(folder: Path) -> dict:
    """The profiles of `folder`: its compiled file while every YAML is the one it was compiled
    from, else the YAML files through the strict loader."""
    from kvplan.inputs.profile_cache import read_compiled

    return read_compiled(folder) or compile_bundled(folder)


def compile_bundled(folder: Path) -> dict:
    """Every YAML in `folder` through the strict loader: {"files": {name: crc32}, "profiles":
    {stem: data}, "prices": data, "names": {lower-case name, key or alias: stem}}, the first
    profile in file order winning a name (as a scan of the profiles in order finds it)."""
    import json

    from kvplan.inputs.profile_cache import PRICES, digests, render

    profiles: dict[str, object] = {}
    prices: object = None
    names: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        data = load_yaml(path)
        if path.stem == PRICES:
            prices = data
            continue
        profiles[path.stem] = data
        profile = parse_profile(data, path.name, path.stem)
        for name in (profile.key, profile.name.lower(), *profile.aliases):
            names.setdefault(name, path.stem)
    compiled = {"files": digests(folder), "profiles": profiles, "prices": prices, "names": names}
    return json.loads(render(compiled))  # the values a read of the file gives, in YAML order


@cache
def bundled_profile(stem: str) -> GpuProfile:
    """One bundled profile by its file name (h200-sxm), validated as a user's file is."""
    return parse_profile(_compiled()["profiles"][stem], f"{stem}.yaml", stem)


@lru_cache(maxsize=1)
def bundled_profiles() -> dict[str, GpuProfile]:
    stems = sorted(_compiled()["profiles"], key=lambda stem: f"{stem}.yaml")  # the files' order
    return {stem: bundled_profile(stem) for stem in stems}


def bundled_prices() -> dict | None:
    """prices.yaml's data, as read (kvplan.inputs.prices validates it)."""
    return _compiled()["prices"]


def find_bundled(name: str) -> GpuProfile | None:
    """The bundled profile with this key, name or alias (any case); only it is parsed."""
    stem = _compiled()["names"].get(name.strip().lower())
    return None if stem is None else bundled_profile(stem)


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
    """`--gpu local`: the device this machine reports (kvplan.inputs.local_gpu) with the nearest
    bundled profile's peaks and bandwidth."""
    from kvplan.inputs import local_gpu

    name, memory, how = local_gpu.read_local_device()
    name = clean(name)[:100]
    near = nearest_profile(name, memory)
    basis = "device"
    pinned = near is not None and (
        0 <= memory - near.usable_memory_bytes <= local_gpu.NVML_GAP_MAX_BYTES
    )
    if how == "nvml" and not pinned and (exact := local_gpu.torch_device()) is not None:
        name, memory, how = clean(exact[0])[:100], exact[1], exact[2]  # CUDA's own total
        near = nearest_profile(name, memory)
    if how == "nvml":  # NVML's total is not CUDA's: pin it to the profile's, else estimate
        if near is not None and pinned:
            memory = int(near.usable_memory_bytes)
            how = f"NVML, matched to {near.name}'s CUDA total ({near.memory_reported_basis})"
        else:
            memory -= local_gpu.NVML_CUDA_GAP_BYTES
            basis = "estimated"
            how = "NVML total less ~600 MiB (NVML counts memory CUDA does not offer)"
    if near is None:
        raise KvplanError(
            f"--gpu local found {name!r} ({memory / GIB:,.2f} GiB) but no bundled profile "
            "matches it: write one (docs/hardware-profiles.md) or measure one with kvplan "
            "measure --save-profile"
        )
    if near.memory_configurations:  # a Mac: the chip sold with this memory (cores, bandwidth)
        ram = local_gpu.mac_memory_bytes()
        if ram is not None:
            near = with_memory(near, ram)
    return near._replace(
        key="local",
        name=f"{name} (local)",
        memory_reported_bytes=float(memory),
        memory_reported_basis=basis,
        memory_reported_source=f"read from this machine: {how}",
        source=f"{near.source} — peaks and bandwidth of the nearest profile, {near.name}",
        path="local",
    )


def load_profile(name: str, allow_bare: bool = False) -> GpuProfile:
    """A profile key (h100-sxm), an alias (h100), a profile name ('H100 SXM'), a YAML path, or
    `local` (the GPU of this machine, with the nearest profile's peaks). A chip sold with
    several memory sizes (Apple's) is named with one, `m3-max-64gb`: its bare name is refused
    unless `allow_bare` (the caller is told the memory another way, --gpu-memory)."""
    if not isinstance(name, str) or not name.strip():
        raise KvplanError("no GPU given")
    if len(name) > 4096:
        raise KvplanError("--gpu: name too long")
    if name.strip().lower() == "all":
        raise KvplanError(
            "--gpu all compares every kind and only kvplan capacity does that: "
            "kvplan capacity MODEL --gpu all (here, name one GPU or repeat --gpu)"
        )
    if name.strip().lower() == "local":
        return local_profile()
    path = user_path(name)
    if name.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise KvplanError(f"{path}: no such profile file")
        return parse_profile(load_yaml(path), str(path), path.stem)
    found = find_bundled(name)
    if found is not None and found.memory_configurations and not allow_bare:
        sizes = "/".join(str(c.memory_gib) for c in found.memory_configurations)
        raise KvplanError(
            f"{found.name} comes with {sizes} GB of unified memory and the answer depends on "
            f"it: name one ({', '.join(configuration_names(found))}), or --gpu local on the Mac"
        )
    if found is not None:
        return found
    configured = _configured(name)
    if configured is not None:
        return configured
    import difflib

    profiles = bundled_profiles()
    names = sorted(set(profiles) | {a for p in profiles.values() for a in p.aliases})
    close = difflib.get_close_matches(name.strip().lower(), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise KvplanError(f"unknown GPU {clean(name)[:60]!r}{hint} (kvplan gpus lists the profiles)")
