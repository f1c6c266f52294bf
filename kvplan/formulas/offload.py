"""Layer offload (llama.cpp's -ngl): which blocks sit on the GPU, and a decode step that reads
from two memories.

Notation: L blocks (n_layer_all), N = -ngl, the output layer counted as block L.
"""

from __future__ import annotations

from kvplan.units import GIB, MIB


def first_gpu_layer(num_layers: int, gpu_layers: int, output_first: bool = True) -> int:
    """i_gpu_start: blocks il >= it run on the GPU. llama.cpp >= b7467 offloads the output layer
    first (max(L + 1 - N, 0)); older builds the last N blocks (max(L - N, 0))."""
    if output_first:
        return max(num_layers + 1 - gpu_layers, 0)
    return max(num_layers - gpu_layers, 0)


def output_on_gpu(num_layers: int, gpu_layers: int, output_first: bool = True) -> bool:
    """Whether the output layer (block L) is on the GPU: N >= 1 now, N > L before b7467."""
    return gpu_layers >= 1 if output_first else gpu_layers > num_layers


def two_memory_step_time_s(
    gpu_bytes: float,
    gpu_bandwidth_bytes_per_s: float,
    host_bytes: float,
    host_bandwidth_bytes_per_s: float,
) -> float:
    """A memory-bound decode step over split layers: the GPU's blocks stream at its bandwidth,
    then the host's at system-memory bandwidth, one after the other:
    t = bytes_gpu / BW_gpu + bytes_host / BW_host."""
    return gpu_bytes / gpu_bandwidth_bytes_per_s + host_bytes / host_bandwidth_bytes_per_s


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
