"""MLA's absorbed BMMs at their own shape (kvplan.formulas.gemm_calls.mla_bmm_calls_s): the
interpolation in the shipped gemm/ files' mla_bmm rows, GLM-4.7-Flash's equivalent heads, and
one GLM-4.7-Flash decode step on a B200 under SGLang at 1 and 16 tokens worked by hand from the
file's GEMM and BMM entries."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.formulas.batch_step import BatchShape, StepModel
from kvplan.formulas.gemm_calls import mla_bmm_call_s, mla_bmm_calls, mla_bmm_calls_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import GEMM_FOLDER, gemm_grid, tables_for
from kvplan.inputs.sources import load_model

from helpers import load_script, sglang_table_step

B200 = "b200_sxm.sglang.0.5.14.json"
GLM = "zai-org/GLM-4.7-Flash"


def _raw() -> dict:
    return json.loads((GEMM_FOLDER / B200).read_text())


def _bmm(raw: dict, op: str, m: int, heads: int) -> float:
    """The file's BMM entry of `op` at m tokens and a table head count, microseconds."""
    bmm = raw["mla_bmm"]
    return bmm["us"]["bf16"][op][raw["m"].index(m)][bmm["heads"].index(heads)]


def _gemm(raw: dict, m: int, n: int, k: int) -> float:
    return raw["us"]["bf16"][raw["m"].index(m)][raw["n"].index(n)][raw["k"].index(k)]


def test_the_b200_sglang_file_holds_the_bf16_bmm_rows():
    bmm = _raw()["mla_bmm"]
    assert "b200_sxm/mla_bmm/sglang/0.5.14" in bmm["source"]
    assert bmm["heads"] == [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    assert set(bmm["us"]) == {"bf16"} and set(bmm["us"]["bf16"]) == {"pre", "post"}


def test_between_table_heads_linear_in_heads_and_tokens():
    raw, grid = _raw(), gemm_grid(B200)
    assert mla_bmm_call_s(grid, "bf16", "pre", 1, 16) == pytest.approx(
        _bmm(raw, "pre", 1, 16) * 1e-6
    )
    lo, hi = _bmm(raw, "post", 4, 32), _bmm(raw, "post", 4, 48)
    assert mla_bmm_call_s(grid, "bf16", "post", 4, 40) == pytest.approx((lo + hi) / 2 * 1e-6)
    # in tokens as the dense GEMMs: log-log between grid token counts
    t16, t32 = _bmm(raw, "pre", 16, 64), _bmm(raw, "pre", 32, 64)
    w = math.log(20 / 16) / math.log(2)
    assert mla_bmm_call_s(grid, "bf16", "pre", 20, 64) == pytest.approx(
        t16 * (t32 / t16) ** w * 1e-6
    )
    # past the table's 128 heads: that many 128-head calls; fp8: not timed
    assert mla_bmm_call_s(grid, "bf16", "pre", 1, 256) == pytest.approx(
        2 * _bmm(raw, "pre", 1, 128) * 1e-6
    )
    assert mla_bmm_call_s(grid, "fp8", "pre", 1, 16) is None
    # past the grid's last token count the op's rows time (pre: 8,192 on this table, which
    # times no bf16 pre at 16,384), linear in tokens from it
    timed = [m for m in raw["m"] if _bmm(raw, "pre", m, 16) is not None]
    last = timed[-1]
    assert last == 8192 and _bmm(raw, "pre", 16384, 16) is None
    assert mla_bmm_call_s(grid, "bf16", "pre", 3 * last, 16) == pytest.approx(
        3 * _bmm(raw, "pre", last, 16) * 1e-6
    )


def test_glm_4_7_flash_runs_its_bmms_at_30_and_40_slice_heads():
    # 20 heads; pre 192 x 512 a head (qk_nope 192), post 512 x 256 (v 256), against the
    # table's 128 x 512 and 512 x 128: 1.5 and 2 slice heads each; every one of its 47 layers
    spec = load_model(GLM)
    calls = mla_bmm_calls(spec, 1)
    assert sum(c.times for c in calls if c.op == "pre") == 47
    assert {(c.op, c.heads) for c in calls} == {("pre", 30.0), ("post", 40.0)}
    # DeepSeek-R1 at TP 8: its own 16 heads of the slice
    r1 = mla_bmm_calls(load_model("deepseek-r1"), 8)
    assert {(c.op, c.heads) for c in r1} == {("pre", 16.0), ("post", 16.0)}


def _glm_model(spec, bf16_grid: bool = True) -> StepModel:
    grid = tables_for(load_profile("b200"), "sglang").gemm_grid
    assert grid is not None
    if not bf16_grid:  # the same grid without its BMM rows: the BMMs at their floor
        grid = grid._replace(bmm_heads=(), bmm_us={})
    return sglang_table_step(spec, "b200", "bf16", 1, gemm_grid=grid)


@pytest.mark.parametrize("tokens", [1, 16])
def test_glm_4_7_flash_b200_decode_step_by_hand(tokens):
    """Every dense GEMM and absorbed BMM of one GLM-4.7-Flash decode step (TP 1, bf16) from the
    B200 SGLang 0.5.14 file's entries, at 1 and at 16 decodes (both grid token counts): q_a|kv_a
    1344 x 2048 (log n between 1024 and 1536), q_b 5120 x 768, o 2048 x 5120 on 47 layers; the
    first layer's dense MLP 20480 x 2048 (log n between 16384 and 51200) and 2048 x 10240; 46 MoE
    layers' router 64 x 2048 and shared expert 3072 x 2048, 2048 x 1536; the head 154880 x 2048
    at one sampled token a decode (past the grid's 65536: x 154880 / 65536); the BMMs at 30
    slice heads (pre: 3/4 of the way from 24 to 32) and 40 (post: halfway from 32 to 48)."""
    raw = _raw()

    def log_between(n, k, lo, hi, m=tokens):
        w = math.log(n / lo) / math.log(hi / lo)
        return _gemm(raw, m, lo, k) * (1 - w) + _gemm(raw, m, hi, k) * w

    attention = log_between(1344, 2048, 1024, 1536) + _gemm(raw, tokens, 5120, 768)
    attention += _gemm(raw, tokens, 2048, 5120)
    dense_mlp = log_between(20480, 2048, 16384, 51200) + _gemm(raw, tokens, 2048, 10240)
    moe_layer = _gemm(raw, tokens, 64, 2048) + _gemm(raw, tokens, 3072, 2048)
    moe_layer += _gemm(raw, tokens, 2048, 1536)
    head = _gemm(raw, tokens, 65536, 2048) * 154880 / 65536
    pre = _bmm(raw, "pre", tokens, 24) * 0.25 + _bmm(raw, "pre", tokens, 32) * 0.75
    post = (_bmm(raw, "post", tokens, 32) + _bmm(raw, "post", tokens, 48)) / 2
    want_us = 47 * attention + dense_mlp + 46 * moe_layer + head + 47 * (pre + post)

    spec = load_model(GLM)
    model = _glm_model(spec)
    got = model.dense_calls_s(tokens, tokens)
    assert got == pytest.approx(want_us * 1e-6, rel=1e-9)
    # the BMMs alone, against the floor the step charged before (3.9 us each, any shape)
    bmms_s = 47 * (pre + post) * 1e-6
    assert mla_bmm_calls_s(model.gemm_grid, model.mla_bmm_calls, "bf16", tokens) == pytest.approx(
        bmms_s
    )
    floored = _glm_model(spec, bf16_grid=False)
    assert floored.mla_bmm_calls == ()
    assert floored.dense_calls_s(tokens, tokens) == pytest.approx(got - bmms_s + floored.mla_bmms_s)
    assert bmms_s > floored.mla_bmms_s  # 4.4-4.7 us a BMM at 30-40 slice heads, not 3.9
    # the step's weight-bound GEMMs carry the difference (the calls bind at these tokens)
    shape = BatchShape(num_decodes=tokens, decode_context_sum=tokens * 1000, num_sampled=tokens)
    step, step_floored = model.step(shape), floored.step(shape)
    assert step.terms_s["weights_s"] - step_floored.terms_s["weights_s"] == pytest.approx(
        bmms_s - floored.mla_bmms_s
    )


def test_fp8_checkpoints_keep_the_bmm_floor():
    model = sglang_table_step(load_model("deepseek-r1"), "b200", "fp8", 8)
    assert model.mla_bmm_calls == ()


def test_the_deriver_keeps_the_bf16_rows_by_op_tokens_and_heads():
    derive = load_script("derive_achieved")
    rows = [
        {"op_name": op, "bmm_dtype": dtype, "num_tokens": m, "num_heads": h, "latency": lat}
        for op in ("mla_gen_pre", "mla_gen_post")
        for dtype, lat in (("bfloat16", 0.004), ("fp8", 0.009))
        for m in (1, 2, 300)
        for h in (16, 32)
    ]
    grid = derive.mla_bmm_grid(rows)
    assert grid["heads"] == [16, 32]
    assert set(grid["us"]) == {"bf16"}
    pre = grid["us"]["bf16"]["pre"]
    assert pre[0] == [4.0, 4.0] and pre[1] == [4.0, 4.0]
    assert all(v is None for row in pre[2:] for v in row)  # 4..32,768 tokens: not timed
