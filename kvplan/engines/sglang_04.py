"""SGLang 0.4's server defaults, patch by patch (kvplan issue 28).

Read from each 0.4 wheel on PyPI, 0.4.6 to 0.4.10.post2: server_args.py
ServerArgs.__post_init__ (mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs) and
model_executor/cuda_graph_runner.py get_batch_sizes_to_capture (the largest batch captured when
no --cuda-graph-max-bs is given). `mem` is get_device_memory_capacity(), the GPU's total in MiB
(nvidia-smi); P = tp_size x pp_size. Each rule applies from the (patch, post) named:

- before 0.4.6 (no wheel read; the 0.4.1 H100 and 0.4.4.post2 H200 start-up logs print 0.88 at
  TP 1): the TP table alone, whatever the memory;
- 0.4.6, 0.4.6.post1: the TP table (tp_size) up to 81,920 MiB; above, (mem - 13 GiB) / mem,
  not rounded;
- 0.4.6.post2 to post5: the table on P up to 81,920 MiB, else 0.88; then above 96 GiB
  min(f + 48 GiB x (1 - f) / mem, (mem - 18 GiB) / mem);
- 0.4.7: as post2, but above 180,000 MiB on CUDA 0.79; with speculation the 18 GiB is 20 GiB,
  and at or below 96 GiB the fraction is x 0.95;
- 0.4.7.post1 to 0.4.10.post2: round((mem - reserved) / mem, 3), reserved by memory bucket
  (RESERVED_BUCKETS_MIB), + 2 GiB with speculation, + 4 GiB with DP attention; a multimodal
  model's fraction then x 0.90 in 0.4.9 to 0.4.9.post2, and adjust_mem_fraction_for_vlm's
  factor from 0.4.9.post3 (engines.sglang.vlm_fraction_factor).

chunked_prefill_size: 2,048 below 25,000 MiB else 8,192 until 0.4.7; 0.4.7 16,384 above 180,000
MiB; from 0.4.7.post1 2,048 below 35 GiB, 8,192 below 160 GiB, else 16,384.
cuda_graph_max_bs: below the small-GPU threshold (25,000 MiB; 35 GiB from 0.4.7.post1) 8 at TP
under 4, else 80; otherwise the capture list's largest: 160, 256 above 81,920 MiB without --dp
in 0.4.6 and post1, above 96 GiB from post2 (90 GiB from 0.4.7.post1), 512 above 180,000 MiB in
0.4.7 (160,000 from 0.4.7.post1).
"""

from __future__ import annotations

from kvplan.release import NEWEST, release_key

GIB_MIB = 1024  # MiB in a GiB: SGLang's thresholds are written `N * 1024`
# 0.4's TP table: (parallel size at least, fraction), the first that applies
MEM_FRACTION_TABLE = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
TABLE_FLAT_FRACTION = 0.88  # 0.4.6.post2-0.4.7 above the table's 81,920 MiB
TABLE_MAX_MIB = 81920
LARGE_GPU_FROM = (6, 0)  # 0.4.6: above TABLE_MAX_MIB, (mem - 13 GiB) / mem
LARGE_GPU_RESERVE_MIB = 13 * GIB_MIB
PARALLEL_FROM = (6, 2)  # 0.4.6.post2: the table on TP x PP, and the 96 GiB rule
HIGH_MEM_MIB = 96 * GIB_MIB
HIGH_MEM_HEADROOM_MIB = 48 * GIB_MIB  # f + 48 GiB x (1 - f) / mem
HIGH_MEM_RESERVE_MIB = 18 * GIB_MIB  # "15 GB + additional 3GB for cuda graph"
LARGE_CUDA_FROM = (7, 0)  # 0.4.7: above 180,000 MiB on CUDA, 0.79
LARGE_CUDA_MIB = 180_000
LARGE_CUDA_FRACTION = 0.79
SPEC_HIGH_MEM_RESERVE_MIB = 20 * GIB_MIB  # 0.4.7: "reserve more memory for spec cuda graph"
SPEC_FRACTION_FACTOR = 0.95  # 0.4.7 at or below 96 GiB, speculating
RESERVED_FROM = (7, 1)  # 0.4.7.post1: the reserved-memory buckets
# (below this many MiB, base GiB, GiB per unit of TP x PP); above the last: LARGEST_RESERVED
RESERVED_BUCKETS_MIB = (
    (20 * GIB_MIB, 2.8, 0.1),  # T4, 4080
    (35 * GIB_MIB, 2.8, 0.1),  # A10, L40, 4090, 5090
    (90 * GIB_MIB, 9.5, 0.5),  # H100, A100
    (100 * GIB_MIB, 12.0, 0.5),  # H20
    (160 * GIB_MIB, 12.0, 0.5),  # H200
)
LARGEST_RESERVED_MIB = 32 * GIB_MIB  # B200, MI300
SPEC_RESERVED_MIB = 2 * GIB_MIB  # "draft model and larger cuda graph buffers"
DP_ATTENTION_RESERVED_MIB = 4 * GIB_MIB
VLM_FLAT_FROM = (9, 0)  # 0.4.9: a multimodal model's fraction x 0.90
VLM_FLAT_FACTOR = 0.90
VLM_ADJUST_FROM = (9, 3)  # 0.4.9.post3: adjust_mem_fraction_for_vlm
# chunked_prefill_size
SMALL_GPU_MIB = 25_000  # until 0.4.7.post1
SMALL_GPU_MIB_LATER = 35 * GIB_MIB  # from 0.4.7.post1 (RESERVED_FROM)
SMALL_CHUNK, CHUNK, LARGE_CHUNK = 2048, 8192, 16384
LARGE_CHUNK_MIB = (180_000, 160 * GIB_MIB)  # 0.4.7; from 0.4.7.post1
# cuda_graph_max_bs: (small GPU TP < 4, small GPU TP >= 4); the capture list's sizes
SMALL_GRAPHS = (8, 80)
GRAPHS, MORE_GRAPHS, MOST_GRAPHS = 160, 256, 512
MORE_GRAPHS_MIB = (TABLE_MAX_MIB, 96 * GIB_MIB, 90 * GIB_MIB)  # 0.4.6; post2; 0.4.7.post1
MOST_GRAPHS_MIB = (180_000, 160_000)  # 0.4.7; 0.4.7.post1 (written 160 * 1000)


def patch_04(version: str, patch: int | None, nearest: bool) -> tuple[int, int]:
    """(patch, post) of a 0.4 release whose rules apply (engines.sglang.sglang_rules' patch and
    nearest): the newest for a bare 0.4, the first for an earlier release run with 0.4's; a
    pre-release counts as post -1 (before its patch's first rules)."""
    if patch is None:
        return NEWEST, NEWEST
    if nearest:
        return 0, 0
    key = release_key(str(version).strip().lower().lstrip("v"))
    return (patch, 0) if key is None else (key[2], key[3])


def fraction_04(
    at: tuple[int, int],
    gpu_mib: float,
    tp: int,
    pp: int,
    cuda: bool,
    speculative: bool,
    dp_attention: bool,
    vlm_factor: float | None,
) -> float:
    """mem_fraction_static of SGLang 0.4 at (patch, post) `at` (module doc); `vlm_factor`:
    adjust_mem_fraction_for_vlm's factor for a multimodal model, None for a text model."""
    if at >= RESERVED_FROM:
        parallel = tp * pp
        reserved = float(LARGEST_RESERVED_MIB)
        for below, base, per_rank in RESERVED_BUCKETS_MIB:
            if gpu_mib < below:
                reserved = (base + parallel * per_rank) * GIB_MIB
                break
        reserved += SPEC_RESERVED_MIB if speculative else 0
        reserved += DP_ATTENTION_RESERVED_MIB if dp_attention else 0
        fraction = round((gpu_mib - reserved) / gpu_mib, 3)
        if vlm_factor is not None and at >= VLM_ADJUST_FROM:
            fraction *= vlm_factor
        elif vlm_factor is not None and at >= VLM_FLAT_FROM:
            fraction *= VLM_FLAT_FACTOR
        return fraction
    parallel = tp * pp if at >= PARALLEL_FROM else tp
    table = next(f for at_least, f in MEM_FRACTION_TABLE if parallel >= at_least)
    if at < LARGE_GPU_FROM or gpu_mib <= TABLE_MAX_MIB:
        fraction = table
    elif at < PARALLEL_FROM:
        return (gpu_mib - LARGE_GPU_RESERVE_MIB) / gpu_mib
    else:
        fraction = TABLE_FLAT_FRACTION
    if at < PARALLEL_FROM:
        return fraction
    if at >= LARGE_CUDA_FROM and gpu_mib > LARGE_CUDA_MIB and cuda:
        return LARGE_CUDA_FRACTION
    if gpu_mib > HIGH_MEM_MIB:
        reserve = (
            SPEC_HIGH_MEM_RESERVE_MIB
            if speculative and at >= LARGE_CUDA_FROM
            else HIGH_MEM_RESERVE_MIB
        )
        return min(
            fraction + HIGH_MEM_HEADROOM_MIB * (1 - fraction) / gpu_mib,
            (gpu_mib - reserve) / gpu_mib,
        )
    if speculative and at >= LARGE_CUDA_FROM:
        return fraction * SPEC_FRACTION_FACTOR
    return fraction


def chunked_prefill_04(at: tuple[int, int], gpu_mib: float) -> int:
    """chunked_prefill_size of SGLang 0.4 at (patch, post) `at` (module doc)."""
    if at >= RESERVED_FROM:
        if gpu_mib < SMALL_GPU_MIB_LATER:
            return SMALL_CHUNK
        return CHUNK if gpu_mib < LARGE_CHUNK_MIB[1] else LARGE_CHUNK
    if at >= LARGE_CUDA_FROM and gpu_mib > LARGE_CHUNK_MIB[0]:
        return LARGE_CHUNK
    return SMALL_CHUNK if gpu_mib < SMALL_GPU_MIB else CHUNK


def cuda_graph_max_bs_04(at: tuple[int, int], gpu_mib: float, tp: int, dp: int) -> int:
    """The largest decode batch SGLang 0.4 at (patch, post) `at` captures in a CUDA graph with
    no --cuda-graph-max-bs given (module doc); `dp` is --dp-size."""
    small = SMALL_GPU_MIB_LATER if at >= RESERVED_FROM else SMALL_GPU_MIB
    if gpu_mib < small:
        return SMALL_GRAPHS[0 if tp < 4 else 1]
    if at < LARGE_GPU_FROM:
        return GRAPHS
    if at < PARALLEL_FROM:
        return MORE_GRAPHS if gpu_mib > MORE_GRAPHS_MIB[0] and dp == 1 else GRAPHS
    if at < LARGE_CUDA_FROM:
        return MORE_GRAPHS if gpu_mib > MORE_GRAPHS_MIB[1] else GRAPHS
    later = at >= RESERVED_FROM
    if gpu_mib > MOST_GRAPHS_MIB[1 if later else 0]:
        return MOST_GRAPHS
    return MORE_GRAPHS if gpu_mib > MORE_GRAPHS_MIB[2 if later else 1] else GRAPHS
