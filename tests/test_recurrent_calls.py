"""Recurrent layers timed from the GPU's kernel tables (kvplan.formulas.recurrent_calls): the
derivation of kernel_tables/recurrent/ (scripts/derive_achieved.py recurrent_grid), its
interpolation rule, and one step worked by hand from aiconfigurator's rows."""

from __future__ import annotations

import copy

import pytest

from kvplan.formulas.recurrent_calls import RecurrentKernels
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import recurrent_grid
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import load_script


def _row(kernel, phase, batch, seq, latency_ms, k=2, v=4, model="m"):
    return {
        "kernel_source": kernel,
        "phase": phase,
        "batch_size": batch,
        "seq_len": seq,
        "num_k_heads": k,
        "head_k_dim": 128,
        "num_v_heads": v,
        "head_v_dim": 128,
        "model_name": model,
        "latency": latency_ms,
    }


def test_the_grid_sums_a_phases_two_kernels_at_the_median_over_models():
    """A decode point is the conv update plus the recurrent state update, each the median over
    the models timed at that head shape; a prefill point the causal conv plus the chunked
    kernel at (sequences, tokens each); a point missing one kernel is None; a head shape
    whose phase lacks its state kernel gets no row of that phase."""
    derive = load_script("derive_achieved")
    rows = [
        _row("causal_conv1d_update", "generation", 1, 1, 0.002, model="a"),
        _row("causal_conv1d_update", "generation", 1, 1, 0.004, model="b"),
        _row("causal_conv1d_update", "generation", 1, 1, 0.009, model="c"),
        _row("fused_recurrent_gated_delta_rule_packed_decode", "generation", 1, 1, 0.005),
        _row("causal_conv1d_update", "generation", 8, 1, 0.003),  # no state kernel timed
        _row("causal_conv1d_fn", "context", 2, 64, 0.010),
        _row("chunk_gated_delta_rule", "context", 2, 64, 0.030),
        _row("causal_conv1d_update", "generation", 1, 1, 0.002, k=4, v=8),  # conv only
        _row("causal_conv1d_fn", "context", 1, 1, 0.001, k=4, v=8),
    ]
    grid = derive.recurrent_grid(rows)
    assert grid["decode_batch"] == [1, 8]
    assert grid["prefill_batch"] == [1, 2] and grid["prefill_tokens"] == [1, 64]
    assert grid["us"] == {
        "gated_deltanet/2x128/4x128/decode": [pytest.approx(4.0 + 5.0), None],
        "gated_deltanet/2x128/4x128/prefill": [[None, None], [None, pytest.approx(40.0)]],
    }


# aiconfigurator-core 0.12.0, b200_sxm/linear_attention/sglang/0.5.14/gdn_perf.parquet, the rows
# of 2 key heads and 4 value heads of 128 (Qwen3.5-4B, -9B, -35B-A3B: the shape Qwen3-Next-80B's
# 16 key and 32 value heads leave on a rank at TP 8), generation, microseconds:
#   causal_conv1d_update  batch 1: 1.753, 1.870, 1.897      batch 16: 2.095, 2.093, 2.109
#   fused_recurrent_gated_delta_rule_packed_decode
#                         batch 1: 4.356, 4.347, 4.357      batch 16: 4.964, 4.943, 4.965
B200_SGLANG_ONE_US = 1.870 + 4.356  # the medians
B200_SGLANG_SIXTEEN_US = 2.095 + 4.964


def test_the_shipped_b200_sglang_rows_are_the_parquet_medians():
    grid = recurrent_grid("b200_sxm.sglang.0.5.14.json")
    row = grid.decode["gated_deltanet/2x128/4x128"]
    assert grid.decode_batch[0] == 1 and grid.decode_batch[4] == 16
    assert row[0] == pytest.approx(B200_SGLANG_ONE_US, abs=1e-3)
    assert row[4] == pytest.approx(B200_SGLANG_SIXTEEN_US, abs=1e-3)


def _qwen3_next_b200_sglang_tp8():
    spec = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking", checkpoint=False)
    options = ServeOptions(engine="sglang", tp=8)
    return build_replica(spec, load_profile("b200"), options).model


def test_a_qwen3_next_decode_step_by_hand():
    """Qwen3-Next-80B at TP 8 on a B200 under SGLang: 36 of its 48 layers are Gated DeltaNet,
    each of 2 key and 4 value heads on a rank; a decode step of 1 (16) sequences runs each
    layer's conv update and state update at the table's time for 1 (16) sequences, 36 times.
    That replaces the state read on the roofline in the step's attention term."""
    model = _qwen3_next_b200_sglang_tp8()
    assert model.recurrent is not None and model.recurrent.layers == 36
    assert model.recurrent.key == "gated_deltanet/2x128/4x128"
    untimed = copy.copy(model)  # the same step without the recurrent layers' term
    untimed.recurrent, untimed.state_bytes_per_sequence = None, 0.0
    for decodes, per_layer_us in ((1, B200_SGLANG_ONE_US), (16, B200_SGLANG_SIXTEEN_US)):
        expected = 36 * per_layer_us * 1e-6
        assert model.recurrent.decode_s(decodes) == pytest.approx(expected, rel=1e-3)
        context = 1000.0 * decodes
        with_layers = model.decode_attention_s(decodes, context)[0]
        assert with_layers - untimed.decode_attention_s(decodes, context)[0] == pytest.approx(
            expected, rel=1e-3
        )


def test_the_interpolation_rule():
    """Decodes: linear between the table's batches, each sequence past 1,024 adding what one
    did between 512 and 1,024. Prefill: c chunks of N tokens read as c sequences of N / c,
    linear along tokens then sequences."""
    grid = recurrent_grid("b200_sxm.sglang.0.5.14.json")
    kernels = RecurrentKernels(36, "k", grid.decode["gated_deltanet/2x128/4x128"],
                               grid.prefill["gated_deltanet/2x128/4x128"], grid)  # fmt: skip
    row = kernels.decode
    assert kernels.decode_us(24) == pytest.approx((row[4] + row[5]) / 2)
    assert kernels.decode_us(2048) == pytest.approx(row[-1] + 1024 * (row[-1] - row[-2]) / 512)
    tokens = grid.prefill_tokens
    i = tokens.index(1024)
    two = kernels.prefill[1]  # 2 sequences
    assert kernels.prefill_us(2, 3072) == pytest.approx((two[i] + two[i + 1]) / 2)
    assert kernels.prefill_s(((1000, 0), (2072, 500))) == pytest.approx(
        36 * kernels.prefill_us(2, 3072) * 1e-6
    )


def test_a_layer_kind_or_shape_the_tables_do_not_hold_is_not_timed():
    grid = recurrent_grid("b200_sxm.sglang.0.5.14.json")
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", checkpoint=False)
    assert RecurrentKernels.of(nano, 1, grid) is None  # Mamba-2: no recurrent/ rows
    qwen3_next = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking", checkpoint=False)
    assert RecurrentKernels.of(qwen3_next, 8, None) is None
    assert RecurrentKernels.of(qwen3_next, 3, grid) is None  # 16 key heads do not split by 3


def test_timed_recurrent_kernels_leave_the_small_floor():
    """Where the recurrent/ tables time the Gated DeltaNet layers (the conv-state update and the
    state update, in the attention term), the small-launch floor does not count those two
    launches of each of the 36 layers again: Qwen3-Next's 290 small launches less its 36 conv
    updates at `elementwise`, no state update at `recurrent`; untimed, all 290 and the 36."""
    from kvplan.formulas.batch_step import _Floors, _shape

    spec = load_model("Qwen/Qwen3-Next-80B-A3B-Thinking", checkpoint=False)
    floors = {"elementwise": 2e-6, "recurrent": 5e-6}
    timed = _Floors.of(_shape(spec), floors, recurrent_timed=True)
    untimed = _Floors.of(_shape(spec), floors)
    assert timed.small_s == pytest.approx((290 - 36) * 2e-6)
    assert untimed.small_s == pytest.approx(290 * 2e-6 + 36 * 5e-6)
    model = _qwen3_next_b200_sglang_tp8()
    assert model.recurrent is not None
    small, recurrent = model.achieved.floors_s["elementwise"], model.achieved.floors_s["recurrent"]
    assert model.floors.small_s == pytest.approx((290 - 36) * small)
    assert model.floors.small_s < 290 * small + 36 * recurrent
