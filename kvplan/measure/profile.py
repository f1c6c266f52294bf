"""From probe timings to a device profile (the per-operator rates the step-time model reads), and
the profile as a hardware-profile YAML that every command loads with `--gpu FILE.yaml`.

Rules (docs/measure.md):
- bandwidth: the fastest streaming probe (copy, triad, read): what elementwise operators, a
  gather and a fused attention's KV reads stream at;
- matmul bandwidth: batch-1 products over generic DRAM-resident matrices of three row lengths,
  the rate at which a GEMM streams its weights by its input width (on CPUs often well below
  STREAM, and lower for short rows: the kernel, not the memory, sets it);
- matmul throughput at M rows: FLOPs / time of the DRAM-resident probe, unless that probe ran
  within 25% of its bytes / matmul bandwidth (it measured the memory, not the arithmetic): then
  the same M over the cache-resident matrix gives the arithmetic rate;
- decode attention: when the kernel gathers its pages first, the gather is priced as memory
  (KV bytes / bandwidth) and the attention's throughput is FLOPs / (time - that); a fused kernel
  within 25% of its memory time is memory-bound, its arithmetic taken as at least 1.25x what it
  showed;
- prefill attention: FLOPs / time; overhead: the one-element add's time per launch; a GEMM's
  fixed cost: a small GEMM's time with the caches flushed, less its bytes at the matmul bandwidth
  and one launch.
"""

from __future__ import annotations

from kvplan import __version__
from kvplan.formulas.step_time import OpRates, curve_value
from kvplan.inputs.hardware import GpuProfile
from kvplan.measure import probes as pr
from kvplan.measure.probes import Probe
from kvplan.measure.timing import Timing
from kvplan.record import NamedTuple

MEMORY_BOUND_MARGIN = 1.25  # a probe within 25% of bytes / bandwidth measured the memory


class Figure(NamedTuple):
    """One figure of the profile: `value` is the rate the step-time model uses (FLOP/s, bytes/s)
    or the overhead (s); `probe_value` what the probe itself showed (FLOPs or bytes / its time)."""

    key: str
    kind: str  # stream | matmul | decode_attention | prefill_attention | overhead
    size: int
    value: float
    probe_value: float
    unit: str  # bytes_per_s | flop_per_s | s
    spread: float  # this run's relative noise of the figure
    memory_bound: bool = False


class DeviceProfile(NamedTuple):
    rates: OpRates
    figures: tuple[Figure, ...]
    bandwidth_probe: str


def figure_key(kind: str, size: int = 0) -> str:
    if kind == "matmul":
        return f"matmul:m={size}"
    if kind == "matmul_bandwidth":
        return f"matmul_bandwidth:k={size}"
    if kind in ("decode_attention", "prefill_attention"):
        return f"{kind}:tokens={size}"
    return kind


def derive(
    probes: list[Probe],
    timings: dict[str, Timing],
    kv_bytes_per_token: float,
    gather_kv: bool,
) -> DeviceProfile:
    """The profile from the probes' typical times (Timing.typical_s). `kv_bytes_per_token`: what one cached token
    of the probed attention layer holds (K and V)."""
    by_key = {p.key: p for p in probes}

    def median(key: str) -> float:
        return timings[key].typical_s

    figures: list[Figure] = []
    streams = {p.key: p.bytes / median(p.key) for p in probes if p.kind == "stream"}
    bandwidth_probe = max(streams, key=streams.__getitem__)
    bandwidth = streams[bandwidth_probe]
    matvec = by_key["matmul:m=1"]
    matmul_bandwidth = matvec.bytes / median(matvec.key)
    matvecs = [(float(pr.PROBE_K), matvec.key, matmul_bandwidth)] + [
        (float(p.size), p.key, p.bytes / median(p.key))
        for p in probes
        if p.kind == "matmul_bandwidth"
    ]
    matmul_bandwidths = tuple(sorted((k, rate) for k, _, rate in matvecs))
    figures.append(
        Figure(
            "bandwidth",
            "stream",
            0,
            bandwidth,
            bandwidth,
            "bytes_per_s",
            timings[bandwidth_probe].spread,
            True,
        )
    )
    for width, key, rate in sorted(matvecs):
        figures.append(
            Figure(
                f"matmul_bandwidth:k={int(width)}",
                "matmul_bandwidth",
                int(width),
                rate,
                rate,
                "bytes_per_s",
                timings[key].spread,
                True,
            )
        )
    for key, value in streams.items():
        spread = timings[key].spread
        figures.append(Figure(key, "stream", 0, value, value, "bytes_per_s", spread, True))

    def add(probe: Probe, rate: float, memory_bound: bool) -> None:
        figures.append(
            Figure(
                figure_key(probe.kind, probe.size),
                probe.kind,
                probe.size,
                rate,
                probe.flops / median(probe.key),
                "flop_per_s",
                timings[probe.key].spread,
                memory_bound,
            )
        )

    matmul = []
    for probe in sorted((p for p in probes if p.kind == "matmul"), key=lambda p: p.size):
        time_s = median(probe.key)
        rate = probe.flops / time_s
        memory_bound = time_s <= MEMORY_BOUND_MARGIN * probe.bytes / matmul_bandwidth
        cache_key = f"matmul_cache:m={probe.size}"
        if memory_bound and cache_key in by_key:
            rate = max(rate, by_key[cache_key].flops / median(cache_key))
        matmul.append((float(probe.size), rate))
        add(probe, rate, memory_bound)

    decode = []
    for probe in sorted((p for p in probes if p.kind == "decode_attention"), key=lambda p: p.size):
        time_s = median(probe.key)
        memory_s = probe.size * kv_bytes_per_token / bandwidth
        memory_bound = time_s <= MEMORY_BOUND_MARGIN * memory_s
        if gather_kv:
            compute_s = max(time_s - memory_s, 0.25 * time_s)
        else:
            compute_s = time_s / MEMORY_BOUND_MARGIN if memory_bound else time_s
        decode.append((float(probe.size), probe.flops / compute_s))
        add(probe, probe.flops / compute_s, memory_bound)

    prefill = []
    for probe in sorted((p for p in probes if p.kind == "prefill_attention"), key=lambda p: p.size):
        rate = probe.flops / median(probe.key)
        prefill.append((float(probe.size), rate))
        add(probe, rate, False)

    overhead = median("overhead") / by_key["overhead"].size
    figures.append(
        Figure("overhead", "overhead", 0, overhead, overhead, "s", timings["overhead"].spread)
    )
    start = by_key.get("matmul_start")
    matmul_overhead = 0.0
    if start is not None:
        streaming = start.bytes / curve_value(matmul_bandwidths, pr.PROBE_K)
        matmul_overhead = max(0.0, median(start.key) - streaming - overhead)
        figures.append(
            Figure(
                "matmul_overhead",
                "overhead",
                0,
                matmul_overhead,
                median(start.key),
                "s",
                timings[start.key].spread,
            )
        )
    rates = OpRates(
        bandwidth,
        matmul_bandwidths,
        tuple(matmul),
        tuple(decode),
        tuple(prefill),
        overhead,
        matmul_overhead,
    )
    return DeviceProfile(rates, tuple(figures), bandwidth_probe)


def figures_of(profile: GpuProfile) -> dict[str, tuple[float, float]]:
    """A measured profile's figures as {key: (value, spread)}, for a baseline comparison."""
    m = profile.measured
    spread = m.spread if m else {}
    out = {"bandwidth": (profile.memory_bandwidth_bytes_per_s, spread.get("bandwidth", 0.0))}
    if m is None:
        return out
    for width, value in m.matmul_bandwidth_bytes_per_s:
        key = figure_key("matmul_bandwidth", int(width))
        out[key] = (value, float(spread.get(key, 0.0)))
    for kind, curve in (
        ("matmul", m.matmul_flop_per_s),
        ("decode_attention", m.decode_attention_flop_per_s),
        ("prefill_attention", m.prefill_attention_flop_per_s),
    ):
        for size, value in curve:
            key = figure_key(kind, int(size))
            out[key] = (value, float(spread.get(key, 0.0)))
    out["overhead"] = (m.overhead_s, float(spread.get("overhead", 0.0)))
    out["matmul_overhead"] = (m.matmul_overhead_s, float(spread.get("matmul_overhead", 0.0)))
    return out


def _mapping(points) -> list[str]:
    return [f"    {int(size)}: {value:.6e}" for size, value in points]


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:.6e}" if isinstance(value, float) else str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def profile_yaml(
    profile: DeviceProfile, identity: dict, dtype: str, gather_kv: bool, threads: int
) -> str:
    """A hardware profile of the measured rates, loadable by `--gpu FILE.yaml` everywhere: the
    bandwidth and the best matmul rate as its roofline, the curves under `measured:`."""
    rates = profile.rates
    peak = max(value for _, value in rates.matmul_flop_per_s)
    peak_dtype = dtype if dtype in ("fp32", "bf16", "fp16") else "bf16"
    spread = {
        f.key: round(f.spread, 4)
        for f in profile.figures
        if ":" not in f.key or "stream" not in f.key
    }
    device = {
        key: value
        for key, value in identity.items()
        if not isinstance(value, (dict, list)) and value is not None
    }
    name = identity.get("nvml_name") or identity.get("name")
    lines = [
        f"# Measured by kvplan {__version__} (kvplan measure --save-profile) on {name}.",
        "# The roofline figures are the fastest streaming probe and the best matmul rate; the",
        "# per-operator curves below are what `kvplan measure` predicts with.",
        f'name: "measured {name}"',
        "vendor: measured",
        "peak_flop_per_s:",
        f"  {peak_dtype}: {peak:.6e}",
        f"memory_bytes: {float(identity.get('memory_bytes') or 1):.6e}",
        f"memory_bandwidth_bytes_per_s: {rates.bandwidth_bytes_per_s:.6e}",
        f"l2_cache_bytes: {float(identity['last_level_cache_bytes']):.6e}",
    ]
    if identity.get("sm_count"):
        lines.append(f"sm_count: {identity['sm_count']}")
    lines += [
        f'source: "kvplan measure, {threads} threads, torch {identity.get("torch_version")}, '
        f'{dtype}"',
        "measured:",
        f"  dtype: {dtype}",
        f"  gather_kv: {_scalar(gather_kv)}",
        f"  overhead_s: {rates.overhead_s:.6e}",
        f"  matmul_overhead_s: {rates.matmul_overhead_s:.6e}",
        "  matmul_bandwidth_bytes_per_s:  # GEMM input width -> bytes/s of weights streamed",
        *_mapping(rates.matmul_bandwidth_bytes_per_s),
        "  matmul_flop_per_s:  # GEMM rows -> FLOP/s",
        *_mapping(rates.matmul_flop_per_s),
        "  decode_attention_flop_per_s:  # KV tokens per call -> FLOP/s",
        *_mapping(rates.decode_attention_flop_per_s),
        "  prefill_attention_flop_per_s:  # prompt tokens -> FLOP/s",
        *_mapping(rates.prefill_attention_flop_per_s),
        "  spread:  # relative run-to-run noise of each figure",
        *[f'    "{key}": {value}' for key, value in spread.items()],
        "  device:",
        *[f"    {key}: {_scalar(value)}" for key, value in device.items()],
    ]
    return "\n".join(lines) + "\n"
