"""Layer offload (llama.cpp's -ngl): which blocks sit on the GPU, and a decode step that reads
from two memories.

Notation: L blocks (n_layer_all), N = -ngl, the output layer counted as block L.
"""

from __future__ import annotations

from kvplan.formulas.step_time import Op, floor_sums


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


def placed_bytes(
    layers: list[tuple[int, list[Op]]],
    num_layers: int,
    first_gpu: int,
    output_gpu: bool,
    cache_on_gpu: bool = True,
) -> tuple[float, float]:
    """(GPU bytes, host bytes) a step reads, its operators placed by llama.cpp's rule: block il
    on the GPU when il >= first_gpu (its cache too, unless -nkvo keeps every cache on the host),
    the output layer (index L = num_layers: the head and the final norm) where output_on_gpu
    says, the token embedding (index -1) always in host memory. Each side is the datasheet
    floor's sum of its operators (floor_sums)."""
    gpu: list[Op] = []
    host: list[Op] = []
    for il, ops in layers:
        on_gpu = output_gpu if il == num_layers else 0 <= first_gpu <= il
        if not on_gpu:
            host += ops
        elif cache_on_gpu:
            gpu += ops
        else:  # the block's weights on the GPU, its cache on the host
            gpu += [op._replace(kv_bytes=0) for op in ops]
            host += [op._replace(weight_bytes=0) for op in ops]
    return floor_sums([(gpu, 1)])[1], floor_sums([(host, 1)])[1]
