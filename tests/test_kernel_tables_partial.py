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
    # transferred unmeasured: everything else
    assert got.dense["fp8"] == base.dense["fp8"] and got.dense["int8"] == base.dense["int8"]
    # measured: one small all-reduce call, 7.18 us (MI300 custom all-reduce, TP 4, 2 KB)
    assert got.allreduce_call_s == 7.18e-06 and base.allreduce_call_s == 4.6e-06
    for field in ("experts", "attention", "mla", "link", "experts_curve"):
        assert getattr(got, field) == getattr(base, field), field
    assert {k: v for k, v in got.floors_s.items() if not k.startswith("gemm")} == {
        k: v for k, v in base.floors_s.items() if not k.startswith("gemm")
    }
    assert got.floors_s["gemm_int8"] == base.floors_s["gemm_int8"]
    # a datasheet GPU never reads another GPU's per-shape MoE or DSA times
    assert tables.moe_file is None and tables.dsa_file is None


def test_mi355x_measures_only_its_allreduce_and_mi325x_none():
    mi355x = tables_for(load_profile("mi355x"), "vllm")
    base = datasheet_achieved()
    assert mi355x.evidence == "datasheet"
    assert mi355x.achieved.allreduce_call_s == 6.3e-06
    assert mi355x.achieved._replace(allreduce_call_s=base.allreduce_call_s) == base
    assert "all-reduce" in mi355x.measured
    # the MI325X (and MI350X) have no kernel-level data of their own: the H100's, said so
    for name in ("mi325x", "mi350x"):
        tables = tables_for(load_profile(name), "sglang")
        assert tables.evidence == "datasheet" and tables.measured == ""
        assert tables.achieved == base


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
