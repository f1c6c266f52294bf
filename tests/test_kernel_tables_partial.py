"""Datasheet GPUs with some public kernel-level measurements (kvplan/data/kernel_tables/partial):
which profiles select them, which figures replace the H100's, and the figures re-derived by hand
from the cited kernel timings (AMD AITER's gfx942 decode-GEMM table, vLLM PR 39080)."""

from __future__ import annotations

import statistics

import pytest

import kvplan.present.notes.simulate  # noqa: F401  (registers the simulator's note words)
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import (
    datasheet_achieved,
    parse_field,
    partial_doc,
    tables_for,
)
from kvplan.present.notes.registry import TEXTS

from helpers import REPO, load_script

MI300X_BW = 5.3e12  # the MI300X datasheet's HBM3 bandwidth (hardware_profiles/mi300x.yaml)
MI355X_BW = 8.0e12  # the MI355X and MI350X datasheets' HBM3E (hardware_profiles/mi355x.yaml)


def _derive():
    return load_script("derive_achieved")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_mi300x_selects_its_measurements_and_stays_datasheet_class(engine):
    tables = tables_for(load_profile("mi300x"), engine)
    base = datasheet_achieved()
    # the interval class is the datasheet one: most figures are still the H100's
    assert tables.evidence == "datasheet"
    assert tables.borrowed_from == "h100_sxm"
    assert "AITER" in tables.source and "aiconfigurator" in tables.source
    assert "bandwidth fraction" in tables.measured
    got = tables.achieved
    # measured: the dense bf16 memory side and the GEMM floors; the compute side is the H100's
    assert got.dense["bf16"] == (base.dense["bf16"][0], 0.87)
    assert got.floors_s["gemm"] == got.floors_s["gemm_bf16"] == 1.7919e-06
    # measured: block fp8's compute side (AITER's a8w8 block-scale GEMMs); its memory side is
    # the H100's (no AITER row at M <= 16 reads fp8 weights over the 256 MB Infinity Cache)
    assert got.dense["fp8"] == (0.31, base.dense["fp8"][1]) and base.dense["fp8"][0] == 0.25
    assert got.floors_s["gemm_fp8"] == 3.0108e-06
    # measured: the fused MoE's curve and floors in block fp8 and bf16 (AITER's fused-MoE
    # tables); the formats AITER does not time on 304 CUs (int8, 4-bit) keep the H100's
    measured = partial_doc("mi300x")["measured"]
    for fmt in ("fp8", "bf16"):
        assert got.experts_curve[fmt] == tuple(tuple(p) for p in measured["experts_curve"][fmt])
        assert got.experts_curve[fmt] != base.experts_curve[fmt]
    assert got.experts_curve["4bit"] == base.experts_curve["4bit"]
    assert got.floors_s["moe_fp8"] == 6.7382e-05 and base.floors_s["moe_fp8"] == 2.3962e-05
    assert got.floors_s["moe_bf16"] == got.floors_s["moe"] == 3.271e-05
    assert got.floors_s["moe_int8"] == base.floors_s["moe_int8"]
    # measured: one small all-reduce call, 7.18 us (MI300 custom all-reduce, TP 4, 2 KB)
    assert got.allreduce_call_s == 7.18e-06 and base.allreduce_call_s == 4.6e-06
    # transferred unmeasured: everything else
    assert got.dense["int8"] == base.dense["int8"]
    for field in ("experts", "attention", "mla", "link"):
        assert getattr(got, field) == getattr(base, field), field
    replaced = ("gemm", "gemm_bf16", "gemm_fp8", "moe", "moe_bf16", "moe_fp8")

    def kept(floors):
        return {
            k: v
            for k, v in floors.items()
            if k not in replaced and not k.startswith(("moe_fp8_", "moe_bf16_"))
        }

    assert kept(got.floors_s) == kept(base.floors_s)
    # a datasheet GPU never reads another GPU's per-shape MoE or DSA times
    assert tables.moe_file is None and tables.dsa_file is None


@pytest.mark.parametrize("name", ["mi355x", "mi350x"])
def test_the_gfx950_profiles_select_aiters_measurements_and_stay_datasheet_class(name):
    tables = tables_for(load_profile(name), "sglang")
    base = datasheet_achieved()
    measured = partial_doc("mi355x")["measured"]
    assert tables.evidence == "datasheet" and tables.borrowed_from == "h100_sxm"
    assert "all-reduce" in tables.measured and "gfx950" in tables.measured
    got = tables.achieved
    # measured (AITER's gfx950 tables): the dense bf16 memory side and the GEMM floors, block
    # fp8's compute side, the fused MoE's curve and floors in block fp8 and bf16
    assert got.dense["bf16"] == (base.dense["bf16"][0], measured["dense_memory"]["bf16"])
    assert got.dense["bf16"][1] != base.dense["bf16"][1]
    assert got.dense["fp8"] == (measured["dense_compute"]["fp8"], base.dense["fp8"][1])
    for family in ("gemm", "gemm_bf16", "gemm_fp8", "moe", "moe_bf16", "moe_fp8"):
        assert got.floors_s[family] == measured["floors_s"][family] != base.floors_s.get(family)
    for fmt in ("fp8", "bf16"):
        assert got.experts_curve[fmt] == tuple(tuple(p) for p in measured["experts_curve"][fmt])
        assert got.experts_curve[fmt] != base.experts_curve[fmt]
    # not measured: SGLang's triton W4A16 MoE on ROCm, attention, MLA, int8 GEMMs
    assert got.experts_curve["4bit"] == base.experts_curve["4bit"]
    assert got.floors_s["moe_4bit"] == base.floors_s["moe_4bit"]
    assert got.dense["int8"] == base.dense["int8"]
    for field in ("experts", "attention", "mla", "link"):
        assert getattr(got, field) == getattr(base, field), field
    # its one measured all-reduce call stands for every group: no H100 per-count times beside it
    assert got.allreduce_call_s == 6.3e-06 and got.allreduce_curve_s_by_gpus == {}
    assert got.allreduce_call_s_at(8) == 6.3e-06
    assert tables.moe_file is None and tables.dsa_file is None


def test_the_mi350x_reads_the_mi355x_die_rows_and_the_mi325x_none():
    # one die (gfx950, 256 CUs, 8 TB/s): the same measured fractions and floors, each of the
    # profile's own datasheet rates
    mi350x = tables_for(load_profile("mi350x"), "sglang").achieved
    assert mi350x == tables_for(load_profile("mi355x"), "sglang").achieved
    # the MI325X has no kernel-level data of its own: the H100's, said so
    tables = tables_for(load_profile("mi325x"), "sglang")
    assert tables.evidence == "datasheet" and tables.measured == ""
    assert tables.achieved == datasheet_achieved()


def test_the_gfx950_bf16_fraction_rederived_from_the_cited_rows():
    doc = partial_doc("mi355x")
    rows = doc["rows"]
    # every row a decode GEMM (M = 1-4) whose bf16 weights exceed the 256 MB Infinity Cache
    assert rows and all(m <= 4 and n * k * 2 > 256e6 for m, n, k, _ in rows)
    # by hand, Llama-3-70B's MLP up-projection at M = 1 (llama70B_bf16_tuned_gemm.csv):
    # 8192 x 28672 x 2 B = 469.8 MB in 75.5237 us = 6.220 TB/s = 0.7775 of 8 TB/s
    assert [1, 8192, 28672, 75.5237] in rows
    assert 8192 * 28672 * 2 / 75.5237e-6 / MI355X_BW == pytest.approx(0.7775, abs=1e-4)
    fractions = [n * k * 2 / (us * 1e-6) / MI355X_BW for _, n, k, us in rows]
    assert round(statistics.median(fractions), 2) == doc["measured"]["dense_memory"]["bf16"]
    # below the H100's 0.80 and the MI300X's 0.87
    assert (
        doc["measured"]["dense_memory"]["bf16"]
        < partial_doc("mi300x")["measured"]["dense_memory"]["bf16"]
    )


BF16_HEADER = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us\n"


def _bf16_row(gfx, cu, m, n, k, us):
    return f"{gfx},{cu},{m},{n},{k},False,torch.bfloat16,torch.bfloat16,False,False,t,0,0,{us}"


def test_the_bf16_gemm_deriver_reads_one_die_once_per_shape():
    derive = _derive()
    one = BF16_HEADER + "\n".join(
        [
            # 8192 x 28672 x 2 B = 469.8 MB at 75.5237 us: 0.7775 of 8 TB/s
            _bf16_row("gfx950", 256, 1, 8192, 28672, 75.5237),
            # a cached shape (64 x 4096 x 2 B): the floor, not in the fraction
            _bf16_row("gfx950", 256, 1, 64, 4096, 2.879),
            # M = 8: past the decode rows read
            _bf16_row("gfx950", 256, 8, 8192, 28672, 1.0),
            # other dies: gfx942, gfx1250 at the same 256 CUs, gfx950 at another CU count
            _bf16_row("gfx942", 304, 1, 8192, 28672, 1.0),
            _bf16_row("gfx1250", 256, 1, 8192, 28672, 1.0),
            _bf16_row("gfx950", 80, 1, 8192, 28672, 1.0),
        ]
    )
    # the same shape in another table, slower (a shape once, at its fastest), and another
    # shape: 16384 x 26624 x 2 B = 872.4 MB at 137.4257 us: 0.7935
    two = BF16_HEADER + "\n".join(
        [
            _bf16_row("gfx950", 256, 1, 8192, 28672, 90.0),
            _bf16_row("gfx950", 256, 1, 16384, 26624, 137.4257),
        ]
    )
    got = derive.aiter_bf16_gemm([one, two], MI355X_BW, 256e6, 256, "gfx950")
    assert got["rows"] == [[1, 8192, 28672, 75.5237], [1, 16384, 26624, 137.4257]]
    assert got["memory_fraction"] == round((0.7775 + 0.7935) / 2, 2) == 0.79
    assert got["floor_s"] == pytest.approx(2.879e-6)
    assert got["rows_total"] == 3


def test_mi300x_fraction_and_floor_rederived_from_the_cited_rows():
    doc = partial_doc("mi300x")
    # the four rows whose bf16 weights (20480 x 7168 x 2 B = 293.6 MB) exceed the 256 MB
    # Infinity Cache, M = 1-4: 60.0392, 62.1160, 65.4734, 67.5630 us
    assert doc["rows"] == [
        [1, 20480, 7168, 60.0392],
        [2, 20480, 7168, 62.116],
        [3, 20480, 7168, 65.4734],
        [4, 20480, 7168, 67.563],
    ]
    # by hand: 293,601,280 B / 60.0392 us = 4.890 TB/s = 0.9227 of 5.3 TB/s; then 0.8919,
    # 0.8461, 0.8200; the median of four is (0.8919 + 0.8461) / 2 = 0.869
    weights = 20480 * 7168 * 2
    fractions = sorted(weights / (us * 1e-6) / MI300X_BW for _, _, _, us in doc["rows"])
    assert fractions == pytest.approx([0.8200, 0.8461, 0.8919, 0.9227], abs=1e-4)
    assert round(statistics.median(fractions), 2) == doc["measured"]["dense_memory"]["bf16"]


def test_the_deriver_reproduces_the_file_from_aiter_rows():
    derive = _derive()
    header = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us\n"
    rows = [
        # the table's smallest time (the floor) and a cached shape (121 MB: not counted)
        "gfx942,304,1,1536,128,False,torch.bfloat16,torch.bfloat16,False,False,f,472,0,1.7919",
        "gfx942,304,4,8448,7168,False,torch.bfloat16,torch.bfloat16,False,False,f,505,0,28.9865",
        # another GPU's row (80 CUs): never read
        "gfx942,80,1,20480,7168,False,torch.bfloat16,torch.bfloat16,False,False,f,1,0,1.0",
    ] + [
        f"gfx942,304,{m},20480,7168,False,torch.bfloat16,torch.bfloat16,False,False,f,1,0,{us}"
        for m, _, _, us in partial_doc("mi300x")["rows"]
    ]
    got = derive.aiter_decode_gemm(header + "\n".join(rows) + "\n", MI300X_BW, 256e6)
    doc = partial_doc("mi300x")
    assert got["memory_fraction"] == doc["measured"]["dense_memory"]["bf16"]
    assert got["floor_s"] == pytest.approx(doc["measured"]["floors_s"]["gemm"])
    assert got["rows"] == doc["rows"]


FMOE_HEADER = (
    "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,"
    "use_g1u1,doweight_stage1,block_m,ksplit,us\n"
)
FP8_BLOCK = "torch.bfloat16,torch.float8_e4m3fnuz,torch.float8_e4m3fnuz,QuantType.per_1x128"


def _fmoe_row(cu, tokens, shape, us, quant=FP8_BLOCK, gfx="gfx942"):
    return f"{gfx},{cu},{tokens},{shape},ActivationType.Silu,{quant},1,0,32,0,{us}"


def test_the_fused_moe_curve_and_floor_rederived_by_hand_from_aiter_rows():
    derive = _derive()
    peaks = {"fp8": 2614.9e12, "bf16": 1307.4e12}  # MI300X dense peaks (mi300x.yaml)
    rows = [
        # aiter@e4048607 a8w8_blockscale_tuned_fmoe_glm5_1.csv (gfx942, 304 CUs, block fp8):
        # GLM-5.1 at TP 8, 1 token: 67.3825 us, the smallest (the floor); its 9 touched experts
        # (9 x 3 x 6144 x 256 B = 42.5 MB) sit in the Infinity Cache: not in the curve
        _fmoe_row(304, 1, "6144,256,257,9", 67.3825),
        # GLM-5.1 at EP 8, 4 and 8 tokens: 21.875 and 28.7964 of 32 experts touched (uniform
        # top 8) x 37.75 MB = 825.8 and 1087.0 MB, 155.80 and 205.10 us at 5.3 TB/s (the
        # FLOPs' 0.92 and 1.85 us are below): slowdowns 207.6314 / 155.80 = 1.3326 at
        # 4 x 8 / 32 = 1 token per expert and 241.8714 / 205.10 = 1.1793 at 2
        _fmoe_row(304, 4, "6144,2048,32,8", 207.6314),
        _fmoe_row(304, 8, "6144,2048,32,8", 241.8714),
        # not read: another GPU's row (80 CUs), another architecture's, a failed tune (us 0), a
        # per-token fp8 row (kvplan's int8, no curve here)
        _fmoe_row(80, 4, "6144,2048,32,8", 1.0),
        _fmoe_row(304, 4, "6144,2048,32,8", 1.0, gfx="gfx950"),
        _fmoe_row(304, 16, "6144,256,256,8", 0.0),
        _fmoe_row(
            304,
            4,
            "6144,2048,32,8",
            1.0,
            quant="torch.bfloat16,torch.float8_e4m3fnuz,torch.float8_e4m3fnuz,QuantType.per_Token",
        ),
    ]
    # a_ds_v3 table has no gfx column: DeepSeek-V3 at EP 8 (33 experts, top 9), 4 tokens:
    # 23.7678 touched x 44.04 MB = 1046.7 MB, 197.50 us: 220.8912 / 197.50 = 1.1184 at 1.09
    ds_v3 = FMOE_HEADER.replace("gfx,", "") + (
        "304,4,7168,2048,33,9,ActivationType.Silu," + FP8_BLOCK + ",1,0,16,0,220.8912\n"
    )
    got = derive.aiter_fmoe([FMOE_HEADER + "\n".join(rows) + "\n", ds_v3], 5.3e12, peaks, 256e6)
    assert set(got) == {"fp8"}
    fp8 = got["fp8"]
    # bucket 1: the median of 1.3326 and 1.1184 = 1.2255; bucket 2: 1.1793
    assert fp8["curve"] == ((1.0, 1.23), (2.0, 1.18))
    assert fp8["floor_s"] == pytest.approx(67.3825e-6)
    assert (fp8["rows"], fp8["curve_rows"]) == (4, 3)


def test_a_fused_moe_table_without_a_gfx_column_is_read_by_its_cu_count():
    derive = _derive()
    peaks = {"fp8": 5033.2e12, "bf16": 2516.6e12}  # MI355X dense peaks (mi355x.yaml)
    # aiter@e4048607 a8w8_blockscale_tuned_fmoe_ds_v3.csv (no gfx column), 256 CUs: DeepSeek-V3
    # at TP 8 (7168 x 256, 257 experts, top 9), 1 token: 9 touched x 5.5 MB, in the cache
    no_gfx = FMOE_HEADER.replace("gfx,", "") + "\n".join(
        [
            "256,1,7168,256,257,9,ActivationType.Silu," + FP8_BLOCK + ",1,0,16,0,30.5",
            "304,1,7168,256,257,9,ActivationType.Silu," + FP8_BLOCK + ",1,0,16,0,1.0",
        ]
    )
    # a table with the column: gfx1250 at the same 256 CUs is another die
    named = FMOE_HEADER + _fmoe_row(256, 1, "7168,256,257,9", 1.0, gfx="gfx1250") + "\n"
    got = derive.aiter_fmoe([no_gfx, named], 8e12, peaks, 256e6, 256, "gfx950")
    assert got["fp8"]["floor_s"] == pytest.approx(30.5e-6) and got["fp8"]["rows"] == 1
    # the same table read for gfx942 takes its 304-CU row only
    got = derive.aiter_fmoe([no_gfx], 5.3e12, peaks, 256e6)
    assert got["fp8"]["floor_s"] == pytest.approx(1.0e-6) and got["fp8"]["rows"] == 1


def test_the_block_fp8_gemm_figures_rederived_by_hand_from_aiter_rows():
    derive = _derive()
    header = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us\n"
    rows = [
        # aiter@e4048607 a8w8_blockscale_tuned_gemm_ds_v3.csv, gfx942 / 304 CUs
        "gfx942,304,2,4096,512,ck,8,0,3.4925",  # the smallest at M <= 16: the floor
        "gfx942,304,2,7168,2048,ck,8,0,8.1045",
        # 2 x 8192 x 256 x 7168 = 30.06 GFLOP / 2614.9 TFLOP/s = 11.497 us; / 61.0691 = 0.188
        "gfx942,304,8192,256,7168,ck,18,0,61.0691",
        "gfx942,80,2,4096,512,ck,8,0,1.0",  # another GPU's: not read
    ]
    got = derive.aiter_blockscale_gemm([header + "\n".join(rows) + "\n"], 2614.9e12)
    assert got["compute_fraction"] == 0.19
    assert got["floor_s"] == pytest.approx(3.4925e-6)
    assert (got["rows"], got["compute_rows"]) == (3, 1)


def test_the_mi300x_moe_floor_prices_a_small_deepseek_step():
    """The measured floor binds where the roofline is below it: DeepSeek-V3's 58 MoE layers at
    TP 8 in block fp8 pay AITER's 67.38 us each, not the H100's own kernel at that shape
    (64.11 us: the H100 table's per-shape floor, dropped with the family's 23.96 us)."""
    from kvplan.formulas.batch_step import _Floors, _shape
    from kvplan.inputs.sources import load_model

    spec = load_model("deepseek-ai/DeepSeek-V3")
    got = tables_for(load_profile("mi300x"), "sglang").achieved.floors_s
    base = datasheet_achieved().floors_s
    shape = _shape(spec)
    assert shape.moe_layers == 58
    assert _Floors.of(shape, got, "fp8", 8, 1).experts_s == pytest.approx(58 * 67.382e-6)
    assert _Floors.of(shape, base, "fp8", 8, 1).experts_s == pytest.approx(58 * 64.109e-6)
    assert not any(k.startswith(("moe_fp8_", "moe_bf16_")) for k in got)
    assert any(k.startswith("moe_int8_") for k in got)  # int8: no AITER rows, the H100's kept


def test_partial_field_errors_are_one_line():
    with pytest.raises(KvplanError, match="no kernel measurements 'nope'.*mi300x"):
        parse_field({"partial": "nope"}, "x.yaml")
    with pytest.raises(KvplanError, match="either its own per engine, borrowed or partial"):
        parse_field({"partial": "mi300x", "vllm": "h100_sxm"}, "x.yaml")
    assert parse_field({"partial": "mi300x"}, "x.yaml") == {"partial": "mi300x"}


def test_the_note_says_what_was_measured_and_what_was_transferred():
    words = tables_for(load_profile("mi300x"), "sglang").measured
    text = TEXTS["sim-kernel-tables"](
        gpu="MI300X",
        engine="sglang",
        tables="H100 SXM, vLLM 0.14.0",
        evidence="datasheet",
        measured=words,
    )
    assert "measured on MI300X itself at kernel level" in text
    assert "every other figure is the H100's, transferred unmeasured" in text
    plain = TEXTS["sim-kernel-tables"](
        gpu="MI325X", engine="sglang", tables="H100 SXM, vLLM 0.14.0", evidence="datasheet"
    )
    assert "measured on" not in plain


def test_the_partial_files_ship_in_the_wheel():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"data/kernel_tables/partial/*.json"' in pyproject


@pytest.mark.parametrize("gpu", ["mi350x", "mi325x"])
def test_the_aiter_deriver_refuses_a_gpu_it_has_no_tables_for(monkeypatch, tmp_path, gpu):
    """--aiter-moe --gpu names the partial file written: a GPU without AITER_GPUS tables
    (the MI350X reads the MI355X's file) is refused, not written as the MI300X's."""
    derive = _derive()
    written = []
    monkeypatch.setattr(derive, "write_partial_aiter", lambda *a: written.append(a))
    monkeypatch.setattr("sys.argv", ["derive_achieved", str(tmp_path), "--aiter-moe", "--gpu", gpu])
    with pytest.raises(SystemExit, match=gpu):
        derive.main()
    assert written == []
