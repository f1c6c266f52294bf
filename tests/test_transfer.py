"""Kernel rows a GPU lacks, borrowed from another GPU of its vendor by a ratio fitted on the rows
both have (scripts/derive_transfer.py, kvplan/data/kernel_tables/transfer.json), and the one rule
for another GPU's absolute kernel times (KernelTables.grids_hold)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from kvplan.engines.backends import Backends
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import (
    ATTENTION_FOLDER,
    TRANSFER_FILE,
    attention_backends,
    borrowed_backends,
    ratio_at,
    tables_for,
    transfer_doc,
)
from kvplan.inputs.sources import load_model
from kvplan.plans import intervals
from kvplan.simulate.setup import ServeOptions, backend_kernels, build_replica

from helpers import REPO


def _raw(gpu: str) -> dict:
    return json.loads((ATTENTION_FOLDER / f"{gpu}.sglang.0.5.14.json").read_text())["backends"]


def _entry(gpu: str, backend: str) -> dict:
    return next(
        e for e in transfer_doc()["borrowed"] if e["gpu"] == gpu and e["backend"] == backend
    )


def test_the_fitted_ratio_is_the_two_rows_quotient():
    """B200 over RTX PRO 6000 at one decode call both timed with SGLang's Triton MHA kernels
    (1 sequence, 4,096 KV bytes; 64 sequences, 1 MiB each), recomputed from the rows."""
    entry = _entry("b200_sxm", "mla:triton")
    assert entry["lender"] == "rtx_pro_6000_server" and entry["fitted_on"] == "mha:triton"
    b200, rtx = _raw("b200_sxm")["mha:triton"], _raw("rtx_pro_6000_server")["mha:triton"]

    def at(entry, kv, heads, batch, x):
        curve = entry["decode_calls"].get(kv, {}).get(heads, {}).get(batch, ())
        return dict(map(tuple, curve)).get(x)

    for batch, x in (("1", 4096.0), ("64", 1048576.0)):
        # the median over the cache dtypes and query heads both timed at this call
        quotients = [
            at(b200, kv, heads, batch, x) / at(rtx, kv, heads, batch, x)
            for kv in ("bfloat16", "fp8")
            for heads in b200["decode_calls"].get(kv, {})
            if at(b200, kv, heads, batch, x) and at(rtx, kv, heads, batch, x)
        ]
        assert quotients
        fitted = dict(map(tuple, entry["ratio"]["decode"][batch]))[x]
        assert fitted == pytest.approx(statistics.median(quotients), abs=1e-4)
    # not one constant: Triton's kernels are not tuned per architecture, and the B200 is
    # slower than the RTX PRO 6000 at small calls, faster at large ones
    low, high = entry["summary"]["decode"]["range"]
    assert low < 0.6 and high > 1.2


def test_a_borrowed_call_is_the_lenders_times_the_ratio():
    entry = _entry("b200_sxm", "mla:triton")
    lent = borrowed_backends("b200_sxm", "sglang", "0.5.14")[("mla", "triton")]
    theirs = attention_backends("rtx_pro_6000_server.sglang.0.5.14.json")[("mla", "triton")]
    assert lent.borrowed_from == "rtx_pro_6000_server" and lent.pair is None
    for kv, by_heads in theirs.decode_calls.items():
        for heads, calls in by_heads:
            batch, curve = calls[min(3, len(calls) - 1)]
            x, seconds = curve[min(2, len(curve) - 1)]
            ratio = ratio_at(entry["ratio"]["decode"], batch, x)
            lent_curve = dict(dict(lent.decode_calls[kv])[heads])[batch]
            assert dict(lent_curve)[x] == pytest.approx(seconds * ratio)
    # the floor: the smallest borrowed decode call at 1-16 sequences, as derive_achieved's
    smallest = min(
        s
        for by_heads in lent.decode_calls.values()
        for _, calls in by_heads
        for b, c in calls
        if b <= 16
        for _, s in c
    )
    assert lent.floor_s == smallest


def test_own_rows_win_and_borrowing_fills_only_what_is_missing():
    b200 = tables_for(load_profile("b200"), "sglang").attention_backends
    assert b200[("mha", "triton")].borrowed_from == ""  # its own Triton MHA rows
    assert b200[("mla", "trtllm_mla")].borrowed_from == ""
    assert b200[("mla", "triton")].borrowed_from == "rtx_pro_6000_server"
    # a GPU with its own Triton MLA rows keeps them
    for gpu in ("l40s", "rtx-pro-6000"):
        own = tables_for(load_profile(gpu), "sglang").attention_backends
        assert own[("mla", "triton")].borrowed_from == ""
    # every entry fills a backend its GPU has no rows of, from a lender of its vendor
    sheets = transfer_doc()["datasheet"]
    for e in transfer_doc()["borrowed"]:
        own = _raw(e["gpu"]) if e["engine"] == "sglang" else {}
        assert e["backend"] not in own and e["fitted_on"] in own
        assert e["lender"] in sheets and e["gpu"] in sheets


def test_without_a_lender_the_backend_stays_untimed():
    """flashmla: no GPU with SGLang tables timed it; fa3's MLA rows are the Hoppers', but the
    B200 has no fa3 rows of any kind to fit a ratio on: both run as the engine's own pick."""
    spec = load_model("zai-org/GLM-4.7-Flash", checkpoint=False)
    b200 = load_profile("b200")
    options = ServeOptions(engine="sglang", backends=Backends(attention_backend="flashmla"))
    model = build_replica(spec, b200, options).model
    assert "the attention under --attention-backend flashmla" in model.untimed_parts
    assert model.borrowed_parts == ()
    # SGLang refuses fa3 for MLA on a B200; the rows alone: none of its own, none lent
    fa3 = ServeOptions(engine="sglang", backends=Backends(attention_backend="fa3"))
    kernels, untimed, _ = backend_kernels(spec, b200, fa3, tables_for(b200, "sglang"))
    assert kernels is None and untimed == ["--attention-backend fa3"]
    assert ("mla", "fa3") in tables_for(load_profile("h200"), "sglang").attention_backends
    # a GPU whose vendor has no tables (the MI300X: datasheet class) borrows no rows at all
    mi300x = tables_for(load_profile("mi300x"), "sglang")
    assert mi300x.evidence == "datasheet" and mi300x.attention_backends == {}
    assert all(e["vendor"] == "NVIDIA" for e in transfer_doc()["borrowed"])


def test_a_borrowed_part_puts_the_run_in_the_borrowed_class():
    spec = load_model("zai-org/GLM-4.7-Flash", checkpoint=False)
    b200 = load_profile("b200")
    triton = ServeOptions(engine="sglang", backends=Backends(attention_backend="triton"))
    model = build_replica(spec, b200, triton).model
    assert model.borrowed_parts and "RTX PRO 6000" in model.borrowed_parts[0]
    assert not any("attention" in p for p in model.untimed_parts)
    assert (
        intervals.raw_class(b200, "sglang", spec, model.untimed_parts, model.borrowed_parts)
        == intervals.BORROWED
    )
    plain = build_replica(spec, b200, ServeOptions(engine="sglang")).model
    assert plain.borrowed_parts == ()
    assert intervals.raw_class(b200, "sglang", spec, plain.untimed_parts) == intervals.PARTIAL


@pytest.mark.parametrize(
    ("gpu", "holds"),
    [
        ("h800-sxm", True),  # the H100 SXM's die and HBM3: its rates
        ("h100-nvl", False),
        ("h200-nvl", False),
        ("a100-40gb", False),
        ("a10g", False),
    ],
)
def test_another_gpus_kernel_times_hold_only_on_its_rates(gpu, holds):
    """One rule for every absolute-time grid (gemm, MoE shapes, attention backends, recurrent,
    DSA) on a borrowed profile: they stand for the borrower only where its datasheet rates are
    the lender's; elsewhere the fractions of the datasheet rates transfer, not the times."""
    for engine in ("vllm", "sglang"):
        tables = tables_for(load_profile(gpu), engine)
        assert tables.evidence == "borrowed" and tables.grids_hold is holds
        assert (tables.moe_file is not None) is holds
        assert bool(tables.attention_backends) is holds
    sglang = tables_for(load_profile(gpu), "sglang")
    assert (sglang.gemm_grid is not None) is (holds and sglang.gpu != "a100_sxm")


def test_the_transfer_file_is_what_the_script_writes():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "derive_transfer.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert TRANSFER_FILE.is_file()
