"""scripts/derive_achieved.py's GEMM rule on small synthetic tables: rows timed without a CUDA
graph (aiconfigurator's vLLM block-fp8 rows) time the host's dispatch at small m, so they give
no fraction; the same kernel timed in a graph by the other engine's collector does."""

from __future__ import annotations

import json

import pytest

from kvplan.inputs.kernel_tables import FOLDER, available

from helpers import load_script

BW = 8e12  # bytes/s
PEAKS = {"bf16": 2.25e15, "fp8": 4.5e15}  # FLOP/s
SHAPES = [(m, n, k) for m in (1, 8, 16, 4096, 8192) for n in (4096, 8192) for k in (4096, 16384)]


def _derive():
    return load_script("derive_achieved")


def _rows(derive, dtype, kernel, memory, compute, floor_s, peak):
    """A table's rows of one format: each call max(floor, weights / (memory x BW), FLOPs /
    (compute x peak)), in the parquet's units (latency in ms)."""
    out = []
    for m, n, k in SHAPES:
        seconds = max(
            floor_s, n * k * derive.BYTES[dtype] / (memory * BW), 2 * m * n * k / (compute * peak)
        )
        out.append(
            {
                "gemm_dtype": dtype,
                "kernel_source": kernel,
                "m": m,
                "n": n,
                "k": k,
                "latency": seconds * 1e3,
            }  # fmt: skip
        )
    return out


@pytest.fixture(scope="module")
def tables():
    d = _derive()
    bf16 = _rows(d, "bfloat16", "torch.nn.functional.linear", 0.7, 0.7, 2e-6, PEAKS["bf16"])
    deep_gemm = ("DeepGemmFp8BlockScaledMMKernel", "sglang_deepgemm_gemm_nt_f8f8bf16")
    # vLLM's collector: block-fp8 eagerly, each call at least the host's 150 us
    vllm = bf16 + _rows(d, "fp8_block", deep_gemm[0], 0.5, 0.6, 150e-6, PEAKS["fp8"])
    # SGLang's: the same DeepGEMM kernel in a CUDA graph, a 4 us launch
    sglang = bf16 + _rows(d, "fp8_block", deep_gemm[1], 0.5, 0.6, 4e-6, PEAKS["fp8"])
    return d, vllm, sglang


def test_host_timed_rows_alone_give_a_fraction_the_kernel_never_had(tables):
    d, vllm, _ = tables
    compute, memory = d.gemm(vllm, BW, PEAKS)["fp8_block"]
    assert memory < 0.1  # 0.5 is the kernel's; the host's 150 us set every small call
    assert d.host_timed(vllm) == {"fp8_block"}


def test_a_host_timed_format_takes_the_same_kernel_timed_in_a_graph(tables):
    d, vllm, sglang = tables
    assert d.host_timed(sglang) == set()
    pairs, why = d.dense_pairs(vllm, BW, PEAKS, "vllm", sglang)
    compute, memory = pairs["fp8_block"]
    assert memory == pytest.approx(0.5, rel=0.02) and compute == pytest.approx(0.6, rel=0.02)
    assert pairs["bfloat16"] == d.gemm(vllm, BW, PEAKS)["bfloat16"]  # graph-timed: as before
    assert "without a CUDA graph" in why["fp8_block"] and "SGLang" in why["fp8_block"]


def test_without_the_same_kernel_elsewhere_a_host_timed_format_has_no_pair(tables):
    d, vllm, sglang = tables
    other_kernel = [dict(r, kernel_source="something_else") for r in sglang]
    for other in (None, other_kernel, vllm):  # none, another kernel, host-timed there too
        pairs, why = d.dense_pairs(vllm, BW, PEAKS, "vllm", other)
        assert "fp8_block" not in pairs and "bfloat16" in pairs
        assert "without a CUDA graph" in why["fp8_block"] and "SGLang" not in why["fp8_block"]


def test_a_slow_kernel_timed_in_a_graph_is_its_own_pair(tables):
    """vLLM 0.14's H100 block-fp8 path measured 20.5 us at its smallest (8.3x bf16's, graph-
    timed): slow, but the kernel's, so the rule keeps it."""
    d, _, _ = tables
    bf16 = _rows(d, "bfloat16", "vllm_default", 0.7, 0.7, 2.5e-6, PEAKS["bf16"])
    slow = bf16 + _rows(d, "fp8_block", "vllm_default", 0.25, 0.25, 20.5e-6, PEAKS["fp8"])
    assert d.host_timed(slow) == set()
    pairs, why = d.dense_pairs(slow, BW, PEAKS, "vllm", None)
    assert pairs == d.gemm(slow, BW, PEAKS) and not why


def test_no_shipped_table_streams_dense_weights_at_a_few_percent():
    """A dense GEMM's memory fraction under 0.15 is the host's dispatch, not a kernel (the vLLM
    0.24 Blackwell tables had 0.02-0.04 for block-fp8 before the rule)."""
    for (gpu, engine), versions in available().items():
        for version in versions:
            doc = json.loads((FOLDER / f"{gpu}.{engine}.{version}.json").read_text())
            for fmt, (_, memory) in doc["achieved"]["dense"].items():
                assert memory >= 0.15, (gpu, engine, version, fmt)


def test_floors_are_per_weights_format_as_well_as_per_family():
    """Each family's floor is the smallest kernel of any format at 1-16 tokens; each format of
    GEMM_FORMATS / MOE_FORMATS gets its own (the kernel a launch in that format runs), rows at
    more tokens and formats kvplan does not key (nvfp4) give none."""
    d = _derive()
    gemm = [
        {"gemm_dtype": "bfloat16", "m": 1, "latency": 1.8e-3},
        {"gemm_dtype": "fp8_block", "m": 4, "latency": 4.2e-3},
        {"gemm_dtype": "fp8_block", "m": 64, "latency": 3.0e-3},  # more tokens: not a floor
        {"gemm_dtype": "nvfp4", "m": 1, "latency": 1.5e-3},
    ]
    shape = {"hidden_size": 2048, "inter_size": 768, "num_experts": 128, "topk": 8,
             "moe_tp_size": 1, "moe_ep_size": 1}  # fmt: skip
    moe = [
        {**shape, "moe_dtype": "bfloat16", "num_tokens": 1, "latency": 13.6e-3},
        {**shape, "moe_dtype": "fp8_block", "num_tokens": 16, "latency": 16.5e-3},
        {**shape, "moe_dtype": "int4_wo", "num_tokens": 2, "latency": 34.1e-3},
        {**shape, "moe_dtype": "w4a16_mxfp4", "num_tokens": 1, "latency": 36.3e-3},
    ]
    floors = d.small_shape_floors(gemm=gemm, moe=moe)
    per_shape = {k: v for k, v in floors.items() if k.count("_") > 1}
    assert per_shape == pytest.approx(
        {
            "moe_bf16_2048x768_128x8_tp1_ep1": 13.6e-6,
            "moe_fp8_2048x768_128x8_tp1_ep1": 16.5e-6,
            "moe_4bit_2048x768_128x8_tp1_ep1": 34.1e-6,
            "moe_mxfp4_2048x768_128x8_tp1_ep1": 36.3e-6,
        }  # fmt: skip
    )
    floors = {k: v for k, v in floors.items() if k not in per_shape}
    assert floors == pytest.approx(
        {
            "gemm": 1.5e-6,
            "gemm_bf16": 1.8e-6,
            "gemm_fp8": 4.2e-6,
            "moe": 13.6e-6,
            "moe_bf16": 13.6e-6,
            "moe_fp8": 16.5e-6,
            "moe_4bit": 34.1e-6,
            "moe_mxfp4": 36.3e-6,
        }
    )


def test_shipped_format_floors_are_at_least_the_familys():
    """Every `<family>_<format>` floor of a shipped table is a kernel of that family, so never
    below the family's smallest; the SGLang B200 table's block-fp8 GEMM (activation quant +
    DeepGEMM) and fused MoE are above its bf16 ones. `attention_mla` is MLA's own kernel, not
    a format of the GQA one `attention` times (SGLang 0.5.6.post2 on an H100: GQA 17.1 us at
    1-16 sequences, MLA 12.2 us), and the step model reads each for its own layers."""
    for (gpu, engine), versions in available().items():
        for version in versions:
            floors = json.loads((FOLDER / f"{gpu}.{engine}.{version}.json").read_text())["floors_s"]
            for key, value in floors.items():
                family = key.split("_")[0]
                if family != key and key != "attention_mla":
                    assert value >= floors[family], (gpu, engine, version, key)
    b200 = json.loads((FOLDER / "b200_sxm.sglang.0.5.14.json").read_text())["floors_s"]
    assert b200["gemm_fp8"] > 2 * b200["gemm_bf16"]
    assert b200["moe_fp8"] > b200["moe_bf16"]


def test_a_moe_shape_gets_its_own_floor():
    """Each fused-MoE shape, format and split of the table gets the smallest time measured for
    it at 1-16 tokens, over the routing distributions, under the key the step model reads."""
    d = _derive()
    shape = {"hidden_size": 7168, "inter_size": 2048, "num_experts": 256, "topk": 8,
             "moe_tp_size": 8, "moe_ep_size": 1, "moe_dtype": "fp8_block"}  # fmt: skip
    moe = [
        {**shape, "num_tokens": 1, "latency": 36.1e-3, "distribution": "balanced"},
        {**shape, "num_tokens": 1, "latency": 35.3e-3, "distribution": "power_law_1.01"},
        {**shape, "num_tokens": 64, "latency": 20e-3, "distribution": "balanced"},
        {**shape, "moe_dtype": "w4afp8", "num_tokens": 1, "latency": 1e-3},  # not keyed
    ]
    floors = d.small_shape_floors(moe=moe)
    assert floors["moe_fp8_7168x2048_256x8_tp8_ep1"] == pytest.approx(35.3e-6)
    assert [k for k in floors if k.count("_") > 1] == ["moe_fp8_7168x2048_256x8_tp8_ep1"]


def test_a_moe_shape_gets_its_own_curve_over_tokens():
    """Each fused-MoE shape, format and split gets its time at every token count measured, under
    aiconfigurator's default routing (power law 1.01), under the floors' key, in seconds to
    four significant figures; other routings and formats without a key are left out."""
    d = _derive()
    shape = {"hidden_size": 7168, "inter_size": 2048, "num_experts": 384, "topk": 8,
             "moe_tp_size": 8, "moe_ep_size": 1, "moe_dtype": "int4_wo"}  # fmt: skip
    moe = [
        {**shape, "num_tokens": 16, "latency": 0.14704, "distribution": "power_law_1.01"},
        {**shape, "num_tokens": 1, "latency": 0.030371, "distribution": "power_law_1.01"},
        {**shape, "num_tokens": 16, "latency": 0.161, "distribution": "balanced"},
        {
            **shape,
            "moe_dtype": "w4afp8",
            "num_tokens": 1,
            "latency": 1e-3,
            "distribution": "power_law_1.01",
        },  # fmt: skip
    ]
    assert d.moe_shape_curves(moe) == {
        "moe_4bit_7168x2048_384x8_tp8_ep1": [[1, 3.037e-05], [16, 0.000147]]
    }


def test_the_4bit_fp_formats_get_curves_and_floors_of_their_own():
    """aiconfigurator's w4a16_mxfp4 (gpt-oss's experts) and nvfp4 fused-MoE rows are keyed under
    formats of their own ("mxfp4", "nvfp4": MOE_SHAPE_FORMATS), never the int4 W4A16 rows'
    "4bit", and give no roofline fraction (MOE_FORMATS, which `moe` reads, lacks them)."""
    d = _derive()
    assert d.MOE_SHAPE_FORMATS["w4a16_mxfp4"] == "mxfp4"
    assert d.MOE_SHAPE_FORMATS["nvfp4"] == "nvfp4"
    assert d.MOE_SHAPE_FORMATS["w4a8_mxfp4_mxfp8"] == "mxfp4a8"
    assert "w4a16_mxfp4" not in d.MOE_FORMATS and "nvfp4" not in d.MOE_FORMATS
    shape = {"hidden_size": 2880, "inter_size": 2880, "num_experts": 128, "topk": 4,
             "moe_tp_size": 2, "moe_ep_size": 1, "distribution": "power_law_1.01"}  # fmt: skip
    moe = [
        {**shape, "moe_dtype": "w4a16_mxfp4", "num_tokens": 1, "latency": 0.046394},
        {**shape, "moe_dtype": "w4a16_mxfp4", "num_tokens": 64, "latency": 0.1},
        {**shape, "moe_dtype": "nvfp4", "num_tokens": 1, "latency": 0.02},
        {**shape, "moe_dtype": "int4_wo", "num_tokens": 1, "latency": 0.05},
    ]
    assert d.moe_shape_curves(moe) == {
        "moe_4bit_2880x2880_128x4_tp2_ep1": [[1, 5e-05]],
        "moe_mxfp4_2880x2880_128x4_tp2_ep1": [[1, 4.639e-05], [64, 0.0001]],
        "moe_nvfp4_2880x2880_128x4_tp2_ep1": [[1, 2e-05]],
    }
    floors = d.small_shape_floors(moe=moe)
    assert floors["moe_mxfp4"] == pytest.approx(46.394e-6)
    assert floors["moe_nvfp4"] == floors["moe"] == pytest.approx(20e-6)


def test_shipped_mxfp4_curves_are_where_aiconfigurator_timed_them():
    """gpt-oss's MXFP4 experts (2880x2880, 32 or 128 experts, top 4) have curves in the Hopper
    and Blackwell files whose tables hold w4a16_mxfp4 rows, and none in the A100's (its tables
    time no MXFP4 fused MoE): there the step leaves them untimed."""
    from kvplan.inputs.kernel_tables import moe_curves

    for name in ("h100_sxm.vllm.0.14.0.json", "h200_sxm.sglang.0.5.14.json",
                 "b200_sxm.vllm.0.24.0.json"):  # fmt: skip
        curves = moe_curves(name)
        assert "moe_mxfp4_2880x2880_128x4_tp1_ep1" in curves, name
        assert "moe_mxfp4_2880x2880_32x4_tp1_ep1" in curves, name
    for name in ("a100_sxm.vllm.0.14.0.json", "a100_sxm.sglang.0.5.10.json"):
        assert not any(k.startswith("moe_mxfp4") for k in moe_curves(name)), name


def test_every_shipped_table_has_its_moe_curves_beside_it():
    """Each GPU's table file has a moe/ file of the same name, from the same tables (`source`),
    on one token axis; and the shapes the step model reads for the runs it is checked on are
    there (Kimi-K2.5's INT4 experts at TP 8 on an H200 under SGLang: Marlin's W4A16 kernel)."""
    from kvplan.inputs.kernel_tables import MOE_FOLDER, moe_curves

    for (gpu, engine), versions in available().items():
        for version in versions:
            name = f"{gpu}.{engine}.{version}.json"
            doc = json.loads((MOE_FOLDER / name).read_text())
            table = json.loads((FOLDER / name).read_text())
            assert doc["source"] == table.get("floors_source", table["source"]), name
            assert doc["tokens"][0] == 1 and doc["tokens"] == sorted(doc["tokens"])
            assert all(len(row) == len(doc["tokens"]) for row in doc["us"].values()), name
    kimi = moe_curves("h200_sxm.sglang.0.5.14.json")["moe_4bit_7168x2048_384x8_tp8_ep1"]
    assert kimi[0] == (1, pytest.approx(30.37e-6)) and kimi[4] == (16, pytest.approx(147.0e-6))


def _gdn(kernel, batch, latency_ms, phase="generation"):
    return {"phase": phase, "batch_size": batch, "kernel_source": kernel, "latency": latency_ms}


def test_small_kernel_floors_are_the_smallest_graph_timed_one_row_kernels():
    """`elementwise` is the smallest conv-state update or vLLM static fp8 quant at 1-16 tokens,
    `recurrent` the smallest Gated DeltaNet state update there; larger batches, prefill
    rows and other kernels do not count."""
    derive = _derive()
    gdn = [
        _gdn("causal_conv1d_update", 1, 0.0019),
        _gdn("causal_conv1d_update", 16, 0.0021),
        _gdn("causal_conv1d_update", 32, 0.0009),  # past 16 sequences
        _gdn("causal_conv1d_fn", 1, 0.0005, phase="context"),
        _gdn(derive.GDN_DECODE_KERNEL, 4, 0.0042),
        _gdn(derive.GDN_DECODE_KERNEL, 64, 0.0030),
    ]
    quant = [
        {"m": 1, "kernel_source": "static_scaled_fp8_quant", "latency": 0.0017},
        {"m": 64, "kernel_source": "static_scaled_fp8_quant", "latency": 0.0010},
        {"m": 1, "kernel_source": "sglang", "latency": 0.0005},  # not a SMALL_KERNELS kernel
    ]
    floors = derive.small_kernel_floors(gdn, quant, gemm_floor_s=1.8e-6)
    assert floors == pytest.approx({"elementwise": 1.7e-6, "recurrent": 4.2e-6})
    assert derive.small_kernel_floors(gdn, None, 1.8e-6)["elementwise"] == pytest.approx(1.9e-6)
    assert derive.small_kernel_floors(None, None, 1.8e-6) == {}


def test_small_kernels_slower_than_twice_the_fastest_gemm_timed_the_host():
    """A one-row kernel over SMALL_HOST_FACTOR times the GPU's fastest GEMM timed the host's
    dispatch (the A100's SGLang 0.5.10 rows: 6.4 us against a 2.5 us GEMM): no floor from it,
    nor from the state update its collector timed alongside."""
    derive = _derive()
    gdn = [_gdn("causal_conv1d_update", 1, 0.0064), _gdn(derive.GDN_DECODE_KERNEL, 1, 0.0067)]
    assert derive.small_kernel_floors(gdn, None, gemm_floor_s=2.5e-6) == {}
    # the same rows next to a slower GEMM are kernel times
    assert set(derive.small_kernel_floors(gdn, None, gemm_floor_s=4e-6)) == {
        "elementwise",
        "recurrent",
    }


def test_shipped_small_kernel_floors_are_a_few_microseconds():
    """Every shipped table with an `elementwise` floor holds it at 1-3 us (a graph-timed launch
    of a one-row kernel), and a `recurrent` floor only beside one."""
    seen = 0
    for path in FOLDER.glob("*.*.*.json"):
        floors = json.loads(path.read_text())["floors_s"]
        if "elementwise" in floors:
            seen += 1
            assert 1e-6 < floors["elementwise"] < 3e-6, path.name
        if "recurrent" in floors:
            assert "elementwise" in floors, path.name
            assert floors["elementwise"] < floors["recurrent"] < 6e-6, path.name
    assert seen >= 10


def test_a_gemm_call_is_read_off_the_grid_at_its_own_shape():
    """gemm_call_s: the grid point itself at a measured (n, k); between grid points bilinear in
    log n and log k (at the geometric middle of a cell, the mean of its corners); the table's m
    at or below the asked tokens; the edge row outside the grid; and gemm_calls_s the counts'
    sum."""
    derive = _derive()
    us = {(1024, 1024): 4.0, (4096, 1024): 8.0, (1024, 4096): 6.0, (4096, 4096): 14.0}
    rows = [
        {"gemm_dtype": "bfloat16", "m": m, "n": n, "k": k, "latency": t * m / 1e3}
        for (n, k), t in us.items()
        for m in (1, 16)
    ]
    rows.append({"gemm_dtype": "fp8_block", "m": 1, "n": 1024, "k": 1024, "latency": 1.0})
    call = derive.gemm_call_s
    assert call(rows, "bfloat16", 1, 4096, 1024) == pytest.approx(8e-6)
    assert call(rows, "bfloat16", 1, 2048, 2048) == pytest.approx((4 + 8 + 6 + 14) / 4 * 1e-6)
    assert call(rows, "bfloat16", 8, 1024, 1024) == pytest.approx(4e-6)  # m 1: below 16
    assert call(rows, "bfloat16", 16, 1024, 1024) == pytest.approx(64e-6)
    assert call(rows, "bfloat16", 1, 65536, 512) == pytest.approx(8e-6)  # the edge (4096, 1024)
    assert call(rows, "fp8_block", 1, 1024, 1024) == pytest.approx(1e-3)
    calls = [(4096, 1024, "bfloat16", 3), (1024, 4096, "bfloat16", 2)]
    assert derive.gemm_calls_s(rows, calls, 1) == pytest.approx((3 * 8 + 2 * 6) * 1e-6)


def test_row_files_are_written_whole_and_read_back(tmp_path, monkeypatch):
    """write_moe_curves' file (write_rows_file): head keys, one shape a line under "us" in
    microseconds on MOE_TOKENS (null where unmeasured), splits over MOE_MAX_RANKS ranks left
    out, and no temporary file left beside it."""
    derive = _derive()
    monkeypatch.setattr(derive, "TABLES", tmp_path)
    kept, dropped = "moe_bf16_4096x1536_128x8_tp8_ep1", "moe_bf16_4096x1536_128x8_tp32_ep1"
    path = derive.write_moe_curves(
        "x.sglang.0.5.json", {kept: [(1, 2.5e-5), (4, 3e-5)], dropped: [(1, 1e-5)]}, "unit"
    )
    doc = json.loads(path.read_text())
    assert doc["source"] == "unit" and doc["tokens"] == list(derive.MOE_TOKENS)
    assert list(doc["us"]) == [kept]
    assert doc["us"][kept][:4] == [25.0, None, 30.0, None]
    (line,) = [x for x in path.read_text().splitlines() if kept in x]  # one shape a line
    assert line.startswith(f' "{kept}": [25.0,null,30.0,null') and line.endswith("]")
    assert [p.name for p in path.parent.iterdir()] == ["x.sglang.0.5.json"]


def test_allreduce_bus_bandwidth_counts_bf16_elements():
    """aiconfigurator's collector/network/collect_all_reduce.py all-reduces a
    [message_size / 4096, 4096] bfloat16 tensor: the row's message_size is elements, so 2^20
    of them in 100 us over 8 GPUs are 2 x 7/8 x 2 MiB / 100 us = 36.7 GB/s of bus bandwidth
    (a float32 row's elements 4 bytes); the smallest message's time is the call."""
    rows = [
        {"num_gpus": 8, "backend": "b_graph", "message_size": 128, "latency": 0.005},
        {"num_gpus": 8, "backend": "b_graph", "message_size": 2**20, "latency": 0.1},
    ]
    derive = _derive()
    call, fraction = derive.allreduce(rows, 1e9, backend=None)[8]
    assert call == 5e-6
    assert fraction == pytest.approx(2 * 7 / 8 * 2**20 * 2 / 100e-6 / 1e9)
    wide = [dict(r, allreduce_dtype="float32") for r in rows]
    assert derive.allreduce(wide, 1e9, backend=None)[8][1] == pytest.approx(2 * fraction)


def test_version_folders_are_ordered_as_releases(tmp_path, monkeypatch):
    """aiconfigurator's version folders include release candidates (sglang/0.5.10rc0): newest()
    orders them as kvplan.release.release_key does, 0.5.10rc0 after 0.5.9 and before 0.5.10."""
    derive = _derive()
    for version in ("0.5.6.post2", "0.5.9", "0.5.10rc0"):
        folder = tmp_path / "test_gpu" / "moe" / "sglang" / version
        folder.mkdir(parents=True)
        (folder / "moe_perf.parquet").write_bytes(b"")
    monkeypatch.setattr(derive, "AT_VERSION", {})
    assert derive.newest(tmp_path, "test_gpu", "moe", "sglang", "moe_perf") == "0.5.10rc0"
    monkeypatch.setattr(derive, "AT_VERSION", {"sglang": "0.5.10"})
    assert derive.newest(tmp_path, "test_gpu", "moe", "sglang", "moe_perf") == "0.5.10rc0"
    monkeypatch.setattr(derive, "AT_VERSION", {"sglang": "0.5.9"})
    assert derive.newest(tmp_path, "test_gpu", "moe", "sglang", "moe_perf") == "0.5.9"
    monkeypatch.setattr(derive, "AT_VERSION", {"sglang": "0.5.3"})
    assert derive.newest(tmp_path, "test_gpu", "moe", "sglang", "moe_perf") == "0.5.6.post2"
