"""kvplan.inputs.kernel_tables: which measured tables a profile and engine get, and the files'
provenance."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import FOLDER, available, host_overheads_data, tables_for


@pytest.mark.parametrize(
    "gpu,engine,tables,evidence",
    [
        ("h100", "vllm", "h100_sxm", "own"),
        ("h200", "vllm", "h200_sxm", "own"),
        ("a100-80gb-sxm", "vllm", "a100_sxm", "own"),
        ("h800-sxm", "vllm", "h100_sxm", "borrowed"),  # an H100 with a cut link
        ("h200-nvl", "vllm", "h200_sxm", "borrowed"),
        ("rtx-3090", "vllm", "a100_sxm", "borrowed"),  # Ampere without fp8
        ("h100", "sglang", "h100_sxm", "own"),
        ("b200", "vllm", "b200_sxm", "own"),
        ("gb300", "sglang", "gb300", "own"),
        ("rtx-pro-6000", "vllm", "rtx_pro_6000_server", "own"),
        ("h100-pcie", "sglang", "h100_sxm", "borrowed"),
        ("mi300x", "vllm", "h100_sxm", "datasheet"),
        ("gaudi3", "sglang", "h100_sxm", "datasheet"),
    ],
)
def test_each_profile_gets_the_tables_its_field_names(gpu, engine, tables, evidence):
    got = tables_for(load_profile(gpu), engine)
    assert (got.gpu, got.evidence) == (tables, evidence)
    assert (got.borrowed_from is None) == (evidence in ("own", "other-engine"))


def test_an_engine_without_tables_takes_the_other_engines_and_says_so():
    profile = load_profile("h100")
    own = {engine for gpu, engine in available() if gpu == "h100_sxm"}
    for engine in ("vllm", "sglang"):
        got = tables_for(profile, engine)
        assert got.evidence == ("own" if engine in own else "other-engine")
        assert got.engine in own
        # vLLM's DSA module grids never price another engine's run
        assert (got.dsa_delta_us is None) or got.engine == engine


def test_the_h100_vllm_tables_are_the_numbers_kvplan_had():
    """The H100 SXM vLLM 0.14.0 file holds the literals batch_step held (goldens rest on them)."""
    a = tables_for(load_profile("h100"), "vllm", "0.14.0").achieved
    assert a.dense["bf16"] == (0.81, 0.80) and a.dense["fp8"] == (0.25, 0.28)
    assert a.experts["4bit"] == (0.24, 0.62) and a.attention == (0.53, 0.80)
    # the all-reduce's bus bandwidth: 0.39 until the table's message_size was read as bf16
    # elements (2 bytes each), as aiconfigurator's collector times it (test_derive_achieved)
    assert (a.allreduce_call_s, a.link) == (4.6e-6, 0.80)
    assert a.experts_curve["bf16"][0] == (0.5, 1.44) and a.experts_curve["fp8"][-1] == (4096, 3.65)


def test_every_data_file_loads_with_its_provenance():
    for (gpu, engine), versions in available().items():
        for version in versions:
            doc = json.loads((FOLDER / f"{gpu}.{engine}.{version}.json").read_text())
            assert doc["engine"] == engine and doc["engine_version"] == version
            assert doc["gpu"] == gpu and "aiconfigurator" in doc["source"]
            assert "scripts/derive_achieved.py" in doc["derived_by"]
            a = doc["achieved"]
            for kind in ("dense", "experts"):
                assert "bf16" in a[kind]
                assert all(0 < v <= 1.5 for pair in a[kind].values() for v in pair), (gpu, kind)
            assert 0 < a["attention"][0] <= 1.5 and 0 < a["link"] <= 1.5
            for curve in a["experts_curve"].values():
                xs = [x for x, _ in curve]
                assert xs == sorted(xs) and all(y > 0 for _, y in curve)
    host = host_overheads_data()
    assert host.source and all(v > 0 for v in host.values.values())


def test_an_asked_version_without_a_file_takes_the_newest_and_keeps_the_question():
    got = tables_for(load_profile("h100"), "vllm", "9.9.9")
    newest = available()[("h100_sxm", "vllm")][-1]
    assert got.engine_version == newest and got.asked_version == "9.9.9"


def test_each_engine_gets_its_own_tables_where_the_wheel_has_them():
    """SGLang runs on an H100 take SGLang's kernels, not vLLM's; a B200 its own, not the H100's."""
    h100 = load_profile("h100")
    vllm, sglang = tables_for(h100, "vllm"), tables_for(h100, "sglang")
    assert (vllm.engine, sglang.engine) == ("vllm", "sglang")
    assert vllm.achieved != sglang.achieved
    assert (vllm.dsa_file, sglang.dsa_file) == (
        "h100_sxm.vllm.0.14.0.json",
        "h100_sxm.sglang.0.5.14.json",
    )
    assert tables_for(load_profile("b200"), "vllm").achieved != vllm.achieved


def test_dsa_grids_are_read_only_when_a_model_asks_for_them():
    """The DSA module grids are nine tenths of the H100/H200 files' bytes: they sit in dsa/ and
    are parsed on first use (a model with DSA layers), and the wheel ships them."""
    from pathlib import Path

    from kvplan.inputs import kernel_tables

    h200 = tables_for(load_profile("h200"), "vllm")
    assert h200.dsa_file == "h200_sxm.vllm.0.14.0.json"
    assert "dsa" not in json.loads((FOLDER / h200.dsa_file).read_text())
    kernel_tables._dsa.cache_clear()
    tables_for(load_profile("h100"), "vllm")
    assert kernel_tables._dsa.cache_info().currsize == 0  # not read for the tables alone
    grids = h200.dsa_delta_us
    assert grids is not None and grids.delta_us and kernel_tables._dsa.cache_info().currsize == 1
    assert tables_for(load_profile("b200"), "vllm").dsa_file == "b200_sxm.vllm.0.24.0.json"
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    line = next(
        line
        for line in pyproject.read_text(encoding="utf-8").splitlines()
        if line.startswith('"kvplan" =')
    )
    assert '"data/kernel_tables/dsa/*.json"' in line
    assert '"data/kernel_tables/moe/*.json"' in pyproject.read_text(encoding="utf-8")


def test_moe_shape_curves_are_read_only_on_the_gpu_that_timed_them():
    """A GPU's own (or other-engine, or named borrowed) tables bring their per-shape fused-MoE
    curves; a GPU on the datasheet fallback does not take the H100's absolute times."""
    own = tables_for(load_profile("h200"), "sglang")
    assert own.moe_file == "h200_sxm.sglang.0.5.14.json"
    assert "moe_4bit_7168x2048_384x8_tp8_ep1" in own.moe_curves_s
    fallback = tables_for(load_profile("mi300x"), "sglang")
    assert fallback.evidence == "datasheet"
    assert fallback.moe_file is None and fallback.moe_curves_s == {}


@pytest.mark.parametrize(
    "gpu,engine,dsa_file",
    [
        ("h100", "vllm", "h100_sxm.vllm.0.14.0.json"),  # vLLM 0.19.0's modules (095f58a5)
        ("h200", "vllm", "h200_sxm.vllm.0.14.0.json"),
        ("h100", "sglang", "h100_sxm.sglang.0.5.14.json"),
        ("h200", "sglang", "h200_sxm.sglang.0.5.14.json"),
        ("b200", "vllm", "b200_sxm.vllm.0.24.0.json"),
        ("b200", "sglang", "b200_sxm.sglang.0.5.14.json"),
        ("b300", "vllm", "b300_sxm.vllm.0.24.0.json"),
        ("b300", "sglang", "b300_sxm.sglang.0.5.14.json"),
        ("gb200", "sglang", "gb200.sglang.0.5.14.json"),
        ("gb300", "vllm", "gb300.vllm.0.24.0.json"),
        ("h800-sxm", "sglang", "h100_sxm.sglang.0.5.14.json"),  # borrowed: the H100's
        # borrowed of other rates: the H200 SXM's module times do not hold (grids_hold)
        ("h200-nvl", "vllm", None),
        ("a100-80gb-sxm", "sglang", None),  # the wheel times no DSA module on an A100
        ("l40s", "vllm", None),
        ("rtx-pro-6000", "sglang", None),
        ("mi300x", "sglang", None),  # datasheet: the H100's vLLM fractions, no DSA module
    ],
)
def test_dsa_grids_are_picked_by_the_profiles_tables_and_the_engine(gpu, engine, dsa_file):
    """The DSA module grids of the GPU key and engine the profile's `kernel_tables` names (the
    file beside the tables of that name), never another engine's, and each holds its engine's
    version, the shape it timed and a grid for every (phase, heads, kv dtype) it lists."""
    got = tables_for(load_profile(gpu), engine)
    assert got.dsa_file == dsa_file
    if dsa_file is None:
        return
    grids = got.dsa_delta_us
    assert grids is not None and got.engine == engine
    assert grids.shape["qk_head_dim"] == 192 and grids.shape["indexer_topk"] == 2048
    assert {phase for phase, _, _ in grids.delta_us} == {"decode", "prefill"}
    for (phase, _, _), rows in grids.delta_us.items():
        assert len(rows) == len(grids.batches[phase])
        assert {len(r) for r in rows} == {len(grids.lengths[phase])}
    doc = json.loads((FOLDER / "dsa" / dsa_file).read_text())
    if engine == "sglang":
        assert grids.engine_version == got.engine_version == "0.5.14"
        assert "sparse_attention/sglang/0.5.14/dsa_generation_module_perf" in doc["source"]


def test_allreduce_call_by_group_size():
    """A small all-reduce costs the table's smallest message at the smallest GPU count that
    holds the group (aiconfigurator-core 0.12.0, gb300/comm/sglang/0.5.14/custom_allreduce_perf
    .parquet, sglang_graph rows of 128 bf16 elements, 256 B: 3.408 / 3.847 / 26.931 / 47.828 us
    at 2 / 4 / 8 / 16 GPUs), the largest count's above it, the file's one call where no count
    was timed."""
    a = tables_for(load_profile("gb300"), "sglang").achieved
    assert sorted(a.allreduce_curve_s_by_gpus) == [2, 4, 8, 16]
    assert [a.allreduce_call_s_at(n) for n in (2, 3, 4, 5, 8, 16, 32)] == [
        3.408e-06, 3.847e-06, 3.847e-06, 2.6931e-05, 2.6931e-05, 4.7828e-05, 4.7828e-05
    ]  # fmt: skip
    bare = a._replace(allreduce_curve_s_by_gpus={})
    assert bare.allreduce_call_s_at(4) == a.allreduce_call_s and bare.allreduce_s(1e6, 4) is None


def test_allreduce_time_read_off_the_measured_curve():
    """Between two measured sizes the time is log-log interpolated, below the smallest it is
    the smallest's, beyond the largest it grows with the bytes at the largest's rate (GB300
    SGLang 0.5.14 at 4 GPUs: 4,096 B 3.734 us, 8,192 B 3.784 us)."""
    a = tables_for(load_profile("gb300"), "sglang").achieved
    t = 3.734e-06 * (3.784e-06 / 3.734e-06) ** (math.log(6144 / 4096) / math.log(2))
    assert a.allreduce_s(6144, 4) == pytest.approx(t, rel=1e-12)
    assert a.allreduce_s(8, 4) == a.allreduce_call_s_at(4) == 3.847e-06
    largest_bytes, largest_s = a.allreduce_curve_s_by_gpus[4][-1]
    assert a.allreduce_s(4 * largest_bytes, 4) == pytest.approx(4 * largest_s, rel=1e-12)


def test_small_allreduce_of_a_tp4_step_costs_the_4_gpu_call():
    """MiniMax-M2.5 at TP 4 on GB300 under SGLang: one all-reduce of one token's hidden state
    (3,072 x 2 B) is the 4-GPU curve's 6,144 B: about 3.76 us, not the 16-GPU 47.8 us the
    file's single call holds."""
    from kvplan.inputs.sources import load_model
    from kvplan.simulate.setup import ServeOptions, step_model

    gpu = load_profile("gb300")
    spec = load_model("minimax-m2.5")
    model, _ = step_model(spec, gpu, ServeOptions(tp=4, engine="sglang"), "auto", 256, [])
    assert model.tp_allreduce_s(1, 1) == model.achieved.allreduce_s(6144, 4)
    assert 3.7e-06 < model.tp_allreduce_s(1, 1) < 3.8e-06
