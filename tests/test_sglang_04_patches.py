"""SGLang 0.4's defaults by patch (engines.sglang_04; server_args.py ServerArgs.__post_init__ and
cuda_graph_runner.py of the 0.4.6 ... 0.4.10.post2 wheels). Each expected value is written out
from the wheel's own expression with the GPU's MiB (torch total_memory / 2^20, what
get_device_memory_capacity reads): H100 SXM 81,089.875 MiB, H200 SXM 143,156 MiB, MI300X
196,592 MiB, B200 182,642 MiB, RTX 3090 24,259 MiB."""

from __future__ import annotations

import pytest

from kvplan.engines.request import EngineRequest
from kvplan.engines.sglang import default_mem_fraction, sglang_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

LLAMA_8B = load_model("llama-3.1-8b")
H100, H200 = load_profile("h100"), load_profile("h200-sxm")
MI300X, B200, RTX3090 = load_profile("mi300x"), load_profile("b200"), load_profile("rtx-3090")


def _mib(gpu) -> float:
    return gpu.usable_memory_bytes / 2**20


def _fraction(gpu, version, tp=1, pp=1, **kw) -> float:
    return default_mem_fraction(LLAMA_8B, gpu, tp, pp, version, **kw).mem_fraction_static


def test_the_gpus_memory_as_sglang_reads_it():
    assert (_mib(H100), _mib(H200), _mib(MI300X), _mib(B200), _mib(RTX3090)) == (
        81089.875, 143156.0, 196592.0, 182642.0, 24259.0,
    )  # fmt: skip


@pytest.mark.parametrize("version", ["0.4.1", "0.4.5", "0.4.6", "0.4.6.post1", "0.4.7"])
@pytest.mark.parametrize("tp, fraction", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_the_tp_table_up_to_81920_mib(version, tp, fraction):
    assert _fraction(H100, version, tp) == fraction


def test_before_0_4_6_the_table_holds_on_every_gpu():
    """The 0.4.4.post2 H200 start-up log prints 0.88 at TP 1 (tests/data/sglang_logs.json)."""
    assert _fraction(H200, "0.4.4") == 0.88


def test_0_4_6_above_81920_mib_reserves_13_gib():
    m = _mib(H200)
    assert _fraction(H200, "0.4.6") == (m - 1024 * 13) / m  # not rounded
    assert _fraction(H200, "0.4.6.post1", tp=8) == (m - 1024 * 13) / m  # whatever the TP


def test_0_4_6_post2_counts_pp_and_caps_above_96_gib():
    # the table on TP x PP: TP 2 x PP 2 is 4's 0.85 (0.4.6.post1 reads TP alone: 0.87)
    assert _fraction(H100, "0.4.6.post2", tp=2, pp=2) == 0.85
    assert _fraction(H100, "0.4.6.post1", tp=2, pp=2) == 0.87
    m = _mib(H200)  # above 81,920: 0.88, then min(0.88 + 48 GiB x 0.12 / m, (m - 18 GiB) / m)
    expected = min(0.88 + 48 * 1024 * (1 - 0.88) / m, (m - 1024 * 18) / m)
    assert expected == (m - 1024 * 18) / m  # the second term binds on an H200
    for version in ("0.4.6.post2", "0.4.6.post5", "0.4.7"):
        assert _fraction(H200, version) == expected


def test_0_4_7_large_cuda_gpus_and_speculation():
    assert _fraction(B200, "0.4.7") == 0.79  # above 180,000 MiB on CUDA
    m = _mib(MI300X)  # ROCm: the 96 GiB rule instead
    assert _fraction(MI300X, "0.4.7") == min(0.88 + 48 * 1024 * 0.12 / m, (m - 18 * 1024) / m)
    h = _mib(H200)  # speculating: 20 GiB above 96 GiB, x 0.95 at or below it
    assert _fraction(H200, "0.4.7", speculative_algorithm="EAGLE") == (h - 20 * 1024) / h
    assert _fraction(H100, "0.4.7", speculative_algorithm="EAGLE") == 0.88 * 0.95
    assert _fraction(H100, "0.4.6.post5", speculative_algorithm="EAGLE") == 0.88


@pytest.mark.parametrize("version", ["0.4.7.post1", "0.4.8", "0.4.9.post6", "0.4.10.post2", "0.4"])
def test_the_reserved_memory_buckets_from_0_4_7_post1(version):
    h100, h200 = _mib(H100), _mib(H200)
    assert _fraction(H100, version) == round((h100 - (9.5 + 1 / 2) * 1024) / h100, 3)
    assert _fraction(H100, version, tp=8) == round((h100 - (9.5 + 8 / 2) * 1024) / h100, 3)
    assert _fraction(H200, version, tp=4, pp=2) == round((h200 - (12 + 8 / 2) * 1024) / h200, 3)
    assert _fraction(B200, version) == round((_mib(B200) - 32 * 1024) / _mib(B200), 3)
    r = _mib(RTX3090)
    assert _fraction(RTX3090, version) == round((r - (2.8 + 1 / 10) * 1024) / r, 3)
    spec = _fraction(H100, version, speculative_algorithm="EAGLE")  # + 2 GiB
    assert spec == round((h100 - (9.5 + 1 / 2 + 2) * 1024) / h100, 3)
    dp = _fraction(H100, version, tp=8, dp_attention=8)  # + 4 GiB (the server's TP is 8)
    assert dp == round((h100 - (9.5 + 8 / 2 + 4) * 1024) / h100, 3)


@pytest.mark.parametrize(
    "version, gpu, chunk, graphs",
    [
        ("0.4.6", RTX3090, 2048, 8),
        ("0.4.6", H100, 8192, 160),
        ("0.4.6", H200, 8192, 256),  # above 81,920 MiB, no --dp
        ("0.4.6.post2", H200, 8192, 256),  # above 96 GiB
        ("0.4.7", B200, 16384, 512),  # above 180,000 MiB
        ("0.4.7", H200, 8192, 256),
        ("0.4.7.post1", B200, 16384, 512),  # above 160 GiB / 160,000 MiB
        ("0.4.10.post2", H200, 8192, 256),
        ("0.4.10.post2", RTX3090, 2048, 8),
    ],
)
def test_chunk_and_graphs_by_patch(version, gpu, chunk, graphs):
    got = default_mem_fraction(LLAMA_8B, gpu, 1, 1, version)
    assert (got.chunked_prefill_size, got.cuda_graph_max_bs) == (chunk, graphs)


def test_0_4_6_captures_no_more_graphs_with_dp():
    got = default_mem_fraction(LLAMA_8B, H200, 8, 1, "0.4.6", dp_attention=8)
    assert got.cuda_graph_max_bs == 160


def test_the_small_gpu_threshold_moves_to_35_gib():
    """A 32 GiB card (5090-class, 32,607 MiB): above 25,000 MiB, below 35 GiB."""
    gpu = RTX3090._replace(memory_reported_bytes=32607 * 2**20)
    old = default_mem_fraction(LLAMA_8B, gpu, 1, 1, "0.4.7")
    new = default_mem_fraction(LLAMA_8B, gpu, 1, 1, "0.4.7.post1")
    assert (old.chunked_prefill_size, old.cuda_graph_max_bs) == (8192, 160)
    assert (new.chunked_prefill_size, new.cuda_graph_max_bs) == (2048, 8)


def test_the_pool_follows_the_patch():
    """sglang_allocation: tokens = (free before load x fraction - weights) // cell, so two
    patches' pools differ by exactly their fractions' share of the free memory."""
    request = EngineRequest(engine="sglang", sglang_version="0.4.6")
    old = sglang_allocation(LLAMA_8B, H200, request)
    new = sglang_allocation(LLAMA_8B, H200, request._replace(sglang_version="0.4.10.post2"))
    m = _mib(H200)
    assert (old.mem_fraction_static, new.mem_fraction_static) == (
        (m - 13 * 1024) / m,
        round((m - 12.5 * 1024) / m, 3),
    )
    for got in (old, new):
        rest = got.free_before_load_bytes * got.mem_fraction_static - got.weights_bytes
        assert got.kv_cache_tokens == int(rest) // got.profile_cell_size_bytes
    assert new.kv_cache_tokens > old.kv_cache_tokens


def test_0_4_6_captures_no_more_graphs_with_dp_size_alone():
    """cuda_graph_runner.get_batch_sizes_to_capture (0.4.6, 0.4.6.post1) adds 160-256 only where
    server_args.dp_size == 1: --dp-size without DP attention (independent replicas, kvplan's
    dp_replicas) captures 160 too, as simulate builds the replica."""
    from kvplan.simulate.setup import ServeOptions, build_replica

    for dp, graphs in ((1, 256), (2, 160)):
        options = ServeOptions(engine="sglang", sglang_version="0.4.6", data_parallel_size=dp)
        assert build_replica(LLAMA_8B, H200, options).model.cuda_graph_max_tokens == graphs, dp
        assert (
            default_mem_fraction(LLAMA_8B, H200, 1, 1, "0.4.6", dp_size=dp).cuda_graph_max_bs
            == graphs
        )
