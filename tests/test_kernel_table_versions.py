"""The kernel tables of the engine release a run used (kernel_tables.nearest_version): SGLang's
kernels change by release, and aiconfigurator measured the older releases too."""

from __future__ import annotations

import copy
import json

import pytest

from kvplan.formulas.batch_step import BatchShape, moe_kernel_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import (
    FOLDER,
    MOE_FOLDER,
    RECURRENT_FOLDER,
    available,
    grid_file,
    nearest_version,
    tables_for,
)
from kvplan.inputs.sources import load_model


@pytest.mark.parametrize(
    "gpu, asked, got",
    [
        ("b200", "0.5.7", "0.5.9"),  # the newest release at or below the run's
        ("h200", "0.5.6", "0.5.6.post2"),  # none older: the oldest
        ("h200", "0.5.3", "0.5.6.post2"),
        ("h200", "0.5.8", "0.5.6.post2"),
        ("h100", "0.5.9", "0.5.9"),  # its own
        ("gb300", "0.5.10.post1", "0.5.10"),  # a post release after its release
        ("b200", "0.5.14", "0.5.14"),
        ("b200", "0.5.16", "0.5.14"),  # newer than every table: the newest
        ("h200", None, "0.5.14"),  # none named: the newest
        ("h200", "0.5", "0.5.14"),  # a bare series (kvplan's default): the newest
    ],
)
def test_a_run_reads_the_tables_of_the_release_nearest_its_own(gpu, asked, got):
    tables = tables_for(load_profile(gpu), "sglang", asked)
    assert tables.engine_version == got and tables.asked_version == asked
    assert tables.evidence == "own"
    doc = json.loads((FOLDER / f"{tables.gpu}.sglang.{got}.json").read_text())
    assert tables.achieved.dense == {k: tuple(v) for k, v in doc["achieved"]["dense"].items()}


def test_nearest_version_orders_releases_as_the_module_does():
    versions = ("0.5.6.post2", "0.5.9", "0.5.10", "0.5.14")
    assert nearest_version(versions, "0.5.6.post2") == "0.5.6.post2"
    assert nearest_version(versions, "0.5.11") == "0.5.10"  # 0.5.10 < 0.5.11, not by text
    assert nearest_version(versions, "0.5.2") == "0.5.6.post2"
    assert nearest_version(versions, "main") == "0.5.14"
    assert nearest_version(versions, "") == "0.5.14"


def test_every_older_release_file_names_the_version_folder_of_each_table():
    """Each table of an older release's file was read from that release's folder, or the file
    says which release's it took instead (derive_achieved.py --at-version)."""
    older = [
        (gpu, v)
        for (gpu, engine), versions in available().items()
        if engine == "sglang"
        for v in versions
        if v in ("0.5.6.post2", "0.5.9")
    ]
    assert {g for g, v in older if v == "0.5.6.post2"} == {"h100_sxm", "h200_sxm"}
    assert len([g for g, v in older if v == "0.5.9"]) == 8
    for gpu, version in older:
        doc = json.loads((FOLDER / f"{gpu}.sglang.{version}.json").read_text())
        assert "--at-version " + version in doc["derived_by"]
        listed = doc["source"].split("versions per table: ")[1].split(", ")
        for entry in listed:
            table, table_version = entry.rsplit(" ", 1)
            if table.endswith("(nccl)"):
                continue
            if table_version != version:
                assert any(
                    b.startswith(f"{table}: SGLang {table_version}'s") for b in doc["borrowed"]
                )
        moe = json.loads((MOE_FOLDER / f"{gpu}.sglang.{version}.json").read_text())
        assert moe["source"] == doc["source"]


def test_a_grid_family_the_release_lacks_comes_from_the_nearest_and_the_note_says_so():
    """SGLang 0.5.9's Gated DeltaNet tables time no chunked prefill kernel: a 0.5.7 run on a
    B200 reads 0.5.9's tables and the nearest recurrent grid that has both phases."""
    b200 = tables_for(load_profile("b200"), "sglang", "0.5.7")
    recurrent = sorted(p.name for p in RECURRENT_FOLDER.glob("b200_sxm.sglang.*.json"))
    assert "b200_sxm.sglang.0.5.9.json" not in recurrent and recurrent
    got = grid_file(RECURRENT_FOLDER, "b200_sxm", "sglang", "0.5.9")
    assert got in recurrent
    other = got.split("sglang.")[1][: -len(".json")]
    assert b200.grid_versions()["recurrent"] == other != "0.5.9"
    assert b200.recurrent_grid is not None
    assert b200.grid_versions()["moe"] == b200.grid_versions()["gemm"] == "0.5.9"
    words = b200.version_words(("gemm", "moe", "recurrent"))
    assert words == (
        f"SGLang 0.5.9's tables for a 0.5.7 run; Gated DeltaNet layers from SGLang {other}'s"
    )
    assert b200.version_words(("gemm", "moe")) == "SGLang 0.5.9's tables for a 0.5.7 run"
    assert tables_for(load_profile("b200"), "sglang", "0.5.9").version_words(("gemm",)) == ""
    assert tables_for(load_profile("b200"), "sglang").version_words() == ""


def test_the_simulate_note_names_the_release_of_the_tables():
    from kvplan.simulate.setup import ServeOptions, step_model

    spec, gpu = load_model("qwen3-235b-a22b"), load_profile("b200")
    notes: list = []
    options = ServeOptions(tp=8, engine="sglang", sglang_version="0.5.7")
    step_model(spec, gpu, options, "auto", 512, notes)
    note = next(n for n in notes if n.id == "sim-kernel-tables")
    assert note.value("tables") == "B200, SGLang 0.5.9"
    assert note.value("releases") == "SGLang 0.5.9's tables for a 0.5.7 run"
    notes = []
    step_model(spec, gpu, options._replace(sglang_version="0.5"), "auto", 512, notes)
    note = next(n for n in notes if n.id == "sim-kernel-tables")
    assert note.value("tables") == "B200, SGLang 0.5.14" and note.value("releases") is None


def _model(version: str):
    from kvplan.simulate.setup import ServeOptions, step_model

    options = ServeOptions(tp=8, engine="sglang", sglang_version=version)
    spec = load_model("qwen3-235b-a22b")
    return step_model(spec, load_profile("b200"), options, "bf16", 512, [])[0]


def test_a_fused_moe_decode_step_prices_at_its_releases_rows():
    """Qwen3-235B bf16 TP8 on a B200 at one token: SGLang 0.5.6 ran triton's fused MoE (timed
    by 0.5.9's table), 0.5.14 flashinfer_trtllm's; each release's step reads its own row of the
    shape, so the MoE part of the step differs by the rows' difference and the MoE by their
    ratio."""
    key = "moe_bf16_4096x1536_128x8_tp8_ep1"
    rows = {
        v: json.loads((MOE_FOLDER / f"b200_sxm.sglang.{v}.json").read_text())
        for v in ("0.5.9", "0.5.14")
    }
    first_s = {v: d["us"][key][d["tokens"].index(1)] * 1e-6 for v, d in rows.items()}
    old, new = _model("0.5.6"), _model("0.5.14")
    assert old.moe_curve is not None and new.moe_curve is not None
    got = {v: moe_kernel_s(m.moe_curve, 1) for v, m in (("0.5.9", old), ("0.5.14", new))}
    assert got == pytest.approx(first_s, rel=1e-9)
    assert got["0.5.9"] / got["0.5.14"] == pytest.approx(first_s["0.5.9"] / first_s["0.5.14"])
    # the same step model with the other release's MoE curve only: the step moves by the rows'
    # difference over the MoE layers
    swapped = copy.copy(old)
    swapped.moe_curve = new.moe_curve
    shape = BatchShape(1, 1024, (), 1)
    diff = old.step(shape).total_s - swapped.step(shape).total_s
    layers = old.moe_layers
    assert diff == pytest.approx(layers * (first_s["0.5.9"] - first_s["0.5.14"]), rel=1e-6)
    assert first_s["0.5.9"] > first_s["0.5.14"]
    assert old.step(shape).total_s > new.step(shape).total_s


def test_an_older_release_keeps_the_backends_borrowed_for_its_gpu():
    """transfer.json fits the backends a GPU lacks on the newest release's rows: a run of an
    older release of the same GPU still reads them (its own tables time no triton MLA)."""
    newest = tables_for(load_profile("b200"), "sglang")
    older = tables_for(load_profile("b200"), "sglang", "0.5.7")
    assert older.engine_version != newest.engine_version
    lent = newest.attention_backends[("mla", "triton")]
    assert lent.borrowed_from == "rtx_pro_6000_server"
    assert older.attention_backends[("mla", "triton")] == lent
    own = json.loads((FOLDER / "attention" / "b200_sxm.sglang.0.5.9.json").read_text())
    assert "mla:triton" not in own["backends"]


def test_a_format_the_release_did_not_time_comes_from_the_nearest_that_did():
    """SGLang 0.5.9's B200 fused-MoE table times no MXFP4 kernel: gpt-oss on a 0.5.6 run reads
    the MXFP4 rows of the nearest release that has them, the rest 0.5.9's, and the note says
    which."""
    from kvplan.simulate.setup import ServeOptions, step_model

    tables = tables_for(load_profile("b200"), "sglang", "0.5.6")
    assert tables.engine_version == "0.5.9"
    own = json.loads((MOE_FOLDER / "b200_sxm.sglang.0.5.9.json").read_text())["us"]
    assert not any(k.startswith("moe_mxfp4_") for k in own)
    where = tables.moe_formats_elsewhere()["mxfp4"]
    lender = json.loads((MOE_FOLDER / f"b200_sxm.sglang.{where}.json").read_text())
    key = next(k for k in lender["us"] if k.startswith("moe_mxfp4_"))
    first = lender["us"][key][lender["tokens"].index(1)]
    assert tables.moe_curves_s[key][0] == (1, pytest.approx(first * 1e-6))
    bf16 = next(k for k in own if k.startswith("moe_bf16_"))
    assert tables.moe_curves_s[bf16][0][1] == pytest.approx(own[bf16][0] * 1e-6)
    assert tables_for(load_profile("b200"), "sglang").moe_formats_elsewhere() == {}
    notes: list = []
    options = ServeOptions(tp=8, engine="sglang", sglang_version="0.5.6")
    step_model(load_model("gpt-oss-120b"), load_profile("b200"), options, "auto", 512, notes)
    note = next(n for n in notes if n.id == "sim-kernel-tables")
    assert f"mxfp4 fused-MoE shapes from SGLang {where}'s" in note.value("releases")


@pytest.mark.parametrize(
    "asked, got",
    [
        ("0.5.14rc0", "0.5.10"),  # a release candidate came before its release
        ("0.5.10.dev3", "0.5.9"),  # so did a dev build
        ("v0.5.9", "0.5.9"),  # the spellings the engine-version check accepts
        ("V0.5.10", "0.5.10"),
        ("0.5.9+cu129", "0.5.9"),  # a local tail is the release's own build
        ("0.5.9.post1", "0.5.9"),
    ],
)
def test_nearest_version_reads_a_release_as_the_release_rules_do(asked, got):
    """The tables' release is picked with the one reading of a release (kvplan.release.release_key)
    that --engine-version is checked with, not a second one."""
    versions = ("0.5.6.post2", "0.5.9", "0.5.10", "0.5.14")
    assert nearest_version(versions, asked) == got
