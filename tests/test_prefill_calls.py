"""Prefill attention timed from the backend's measured prefill (context) calls (issue 34): the
curves derived from aiconfigurator's context-attention rows (scripts/derive_achieved.py
prefill_curves), read at the step's chunks (kvplan.formulas.batch_step.prefill_call_s), the
fractions where no rows time a layer, and the note that says which."""

from __future__ import annotations

import math

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.formulas.batch_step import (
    BackendKernels,
    StepModel,
    equivalent_prompt_tokens,
    prefill_call_s,
)
from kvplan.formulas.step_time import Rates
from kvplan.inputs.kernel_tables import BackendTiming, attention_backends
from kvplan.inputs.sources import load_model

from helpers import load_script, run_json

# two measured unit counts (sequences x heads on a rank), two prompt lengths each:
# (units, ((prompt tokens, seconds), ...))
CALLS = (
    (8, ((1024.0, 20e-6), (4096.0, 80e-6))),
    (32, ((1024.0, 40e-6), (4096.0, 250e-6))),
)


def test_the_prefill_calls_are_pinned_at_their_rows_and_log_linear_between():
    assert prefill_call_s(CALLS, 8, 1024) == pytest.approx(20e-6)
    assert prefill_call_s(CALLS, 32, 4096) == pytest.approx(250e-6)
    # halfway in log(tokens) at one measured unit count: the geometric mean of the two rows
    assert prefill_call_s(CALLS, 8, 2048) == pytest.approx(math.sqrt(20e-6 * 80e-6))
    # halfway in log(units) at one row's tokens
    assert prefill_call_s(CALLS, 16, 1024) == pytest.approx(math.sqrt(20e-6 * 40e-6))
    # both at once: log-linear along tokens on each count, then along units
    at8, at32 = math.sqrt(20e-6 * 80e-6), math.sqrt(40e-6 * 250e-6)
    assert prefill_call_s(CALLS, 16, 2048) == pytest.approx(math.sqrt(at8 * at32))


def test_beyond_the_rows_flat_below_and_work_linear_above():
    # fewer tokens or units than any row: the nearest row's time (a launch-bound call)
    assert prefill_call_s(CALLS, 8, 16) == pytest.approx(20e-6)
    assert prefill_call_s(CALLS, 2, 1024) == pytest.approx(20e-6)
    # past the longest prompt: its time per causal key times the keys
    assert prefill_call_s(CALLS, 8, 8192) == pytest.approx(80e-6 * 8192 * 8193 / (4096 * 4097))
    # past the most units: that count's time per unit times the units
    assert prefill_call_s(CALLS, 64, 1024) == pytest.approx(2 * 40e-6)


def test_a_chunk_over_cached_tokens_is_the_prompt_of_as_many_keys():
    assert equivalent_prompt_tokens(1024 * 1025 / 2) == pytest.approx(1024)
    # 1,024 new tokens over 3,072 cached attend (4,096 x 4,097 - 3,072 x 3,073) / 2 keys
    keys = (4096 * 4097 - 3072 * 3073) / 2
    n = equivalent_prompt_tokens(keys)
    assert n * (n + 1) / 2 == pytest.approx(keys) and 1024 < n < 4096


def _derive():
    return load_script("derive_achieved")


def _row(batch, heads, isl, ms, kv="bfloat16", attn="bfloat16", head_dim=128, window=0):
    return {
        "batch_size": batch, "num_heads": heads, "num_key_value_heads": 1, "head_dim": head_dim,
        "isl": isl, "attn_dtype": attn, "kv_cache_dtype": kv, "step": 0, "window_size": window,
        "latency": ms,
    }  # fmt: skip


def test_the_curves_are_medians_by_units_and_tokens_per_cache_dtype():
    derive = _derive()
    rows = [
        _row(1, 8, 1024, 0.020),  # 8 units
        _row(2, 4, 1024, 0.024),  # 8 units as well: the median of the two
        _row(8, 8, 1024, 0.050),  # 64 units
        _row(1, 8, 1024, 0.009, window=128),  # a sliding window: its own key
        _row(1, 8, 1024, 0.030, head_dim=64),  # another head shape
        _row(1, 8, 1024, 0.031, kv="fp8", attn="fp8"),  # fp8 cache, fp8 math only
        _row(1, 6, 1024, 0.026),  # 6 units: the bucket of 8 (2^round(log2 6))
    ]
    curves = derive.prefill_curves(rows, mla=False)
    assert curves["bfloat16"]["128x128"] == {
        "8": [[1024, 0.000024]],  # median of 20, 24 and 26 us
        "64": [[1024, 0.00005]],
    }
    assert curves["bfloat16"]["64x64"] == {"8": [[1024, 0.00003]]}
    assert curves["bfloat16"]["128x128/w128"] == {"8": [[1024, 0.000009]]}
    # an fp8 cache takes bf16 attention math where timed, else the fp8 rows
    assert curves["fp8"]["128x128"] == {"8": [[1024, 0.000031]]}
    mixed = derive.prefill_curves([*rows, _row(1, 8, 1024, 0.040, kv="fp8")], mla=False)
    assert mixed["fp8"]["128x128"] == {"8": [[1024, 0.00004]]}
    # MLA rows are keyed by the form their collector timed: trtllm_mla's the MHA form over
    # DeepSeek's up-projected heads (192 qk, 128 v), FA3's and triton's the absorbed latent
    # (576 qk, 512 v)
    mla = [{**_row(1, 16, 512, 0.017), "mla_dtype": "bfloat16", "kernel_source": "trtllm_mla"}]
    assert derive.prefill_curves(mla, mla=True) == {
        "bfloat16": {"192x128": {"16": [[512, 1.7e-05]]}}
    }
    for source in ("flash_attention", "triton"):
        latent = [{**mla[0], "kernel_source": source}]
        assert derive.prefill_curves(latent, mla=True) == {
            "bfloat16": {"576x512": {"16": [[512, 1.7e-05]]}}
        }


def _timing(prefill_calls) -> BackendTiming:
    return BackendTiming(
        kind="mha", backend="fixture", pair=None, floor_s=None, decode_calls={},
        kernel_source=("fixture",), version="0", rows=4, prefill_calls=prefill_calls,
    )  # fmt: skip


def _model(prefill_calls=None, model="llama-3.1-8b") -> StepModel:
    """Llama-3.1-8B (32 layers, 32 query heads of 128) on one H100-like GPU, bf16 cache."""
    kernels = None
    if prefill_calls is not None:
        kernels = BackendKernels(decode={}, prefill={False: _timing(prefill_calls)})
    return StepModel(
        load_model(model),
        Rates(3.35e12, 989e12),
        "bf16",
        resolve_kv_format("auto", "bf16"),
        backend_kernels=kernels,
    )


def test_the_step_reads_the_calls_at_its_chunks_units_and_keys():
    timed, fractions = _model({"bfloat16": {"128x128": CALLS}}), _model()
    (group,) = timed.groups
    assert (group.head_shape, group.heads, group.layers) == ("128x128", 32.0, 32)
    assert timed.prefill_fractions_why(group) == ""
    # one 1,024-token prompt: 32 heads = 32 units, the row's 40 us, on 32 layers
    assert timed.prefill_chunks_attention_s(((1024, 0),)) == pytest.approx(32 * 40e-6)
    # two prompts in one step: one call over 64 units, past the most measured: twice 32's time
    assert timed.prefill_chunks_attention_s(((1024, 0), (1024, 0))) == pytest.approx(32 * 2 * 40e-6)
    # a chunk over cached tokens: the prompt of as many keys (between 1,024 and 4,096 tokens)
    keys = (4096 * 4097 - 3072 * 3073) / 2
    n = equivalent_prompt_tokens(keys)
    t = math.log(n / 1024) / math.log(4)
    expected = 32 * math.exp(math.log(40e-6) + t * math.log(250e-6 / 40e-6))
    assert timed.prefill_chunks_attention_s(((1024, 3072),)) == pytest.approx(expected)
    # not the fractions' roofline, which the same step gets without the calls
    assert fractions.prefill_chunks_attention_s(((1024, 0),)) != pytest.approx(32 * 40e-6)


def test_the_fractions_stand_where_no_rows_time_the_layers():
    baseline = _model().prefill_chunks_attention_s(((1024, 0),))
    for calls, why in (
        ({"bfloat16": {"64x64": CALLS}}, "shape"),  # another head shape
        ({"fp8": {"128x128": CALLS}}, "backend"),  # another cache dtype
        ({}, "backend"),  # the backend timed no prefill of this kind
    ):
        model = _model(calls)
        assert model.prefill_fractions_why(model.groups[0]) == why
        assert model.prefill_chunks_attention_s(((1024, 0),)) == pytest.approx(baseline)
    # the per-chunk roofline of the fractions is the sum over chunks, as before
    two = _model().prefill_chunks_attention_s(((1024, 0), (512, 100)))
    one = _model().prefill_attention_s(1024, 0) + _model().prefill_attention_s(512, 100)
    assert two == pytest.approx(one)


def test_the_shipped_calls_are_read_at_their_own_rows():
    timing = attention_backends("b200_sxm.sglang.0.5.14.json")[("mha", "trtllm_mha")]
    calls = timing.prefill_calls["bfloat16"]["128x128"]
    for units, curve in calls:
        for tokens, seconds in curve:
            assert prefill_call_s(calls, units, tokens) == pytest.approx(seconds)


def test_the_note_says_which_priced_the_prefill():
    def words(model, gpu, *extra):
        doc = run_json(
            "simulate", model, "--gpu", gpu, "--engine", "sglang", *extra,
            "--num-prompts", "2", "--input-len", "256", "--output-len", "4",
        )  # fmt: skip
        return next(n["text"] for n in doc["notes"] if n["id"] == "sim-prefill-attention")

    timed = words("llama-3.1-8b", "b200")
    assert "32 GQA/MHA layers (128x128): trtllm_mha's" in timed and "fractions" not in timed
    # DeepSeek-V3.2's DSA layers on a GPU without DSA module tables: no rows time the sparse
    # prefill; with SGLang's module tables (B200) the dense-MLA base is priced at the fractions
    # (SGLang's tables hold no MLA prefill calls) and the module adds the DSA's own cost
    dsa = words("deepseek-v3.2", "mi300x", "--tp", "8")
    assert dsa.startswith("Prefill attention at the kernel tables") and "sparse layers" in dsa
    dsa = words("deepseek-v3.2", "b200", "--tp", "8")
    assert dsa.startswith("Prefill attention at the kernel tables") and "sparse layers" not in dsa


def test_a_sliding_window_reads_its_own_windows_rows():
    # gpt-oss-20b: 12 sliding layers (window 128) and 12 full ones, 64 query heads of 64
    window_calls = ((64, ((1024.0, 30e-6), (4096.0, 90e-6))),)
    model = _model({"bfloat16": {"64x64": CALLS, "64x64/w128": window_calls}}, "gpt-oss-20b")
    sliding, full = sorted(model.groups, key=lambda g: g.window is None)
    assert (sliding.window, sliding.layers, full.layers, full.heads) == (128, 12, 12, 64.0)
    # a 1,024-token prompt under a 128 window attends 128 x 129 / 2 + 896 x 128 keys: the
    # window's row at 1,024 tokens; the full layers at 64 units, twice 32's measured time
    assert equivalent_prompt_tokens(128 * 129 / 2 + 896 * 128, 128) == pytest.approx(1024)
    assert model.prefill_chunks_attention_s(((1024, 0),)) == pytest.approx(
        12 * 30e-6 + 12 * 2 * 40e-6
    )
    # past the window's longest row: its time per windowed key (linear in tokens past it)
    assert prefill_call_s(window_calls, 64, 8192, 128) == pytest.approx(
        90e-6 * (8256 + (8192 - 128) * 128) / (8256 + (4096 - 128) * 128)
    )
    # without the window's rows: the full-attention calls at the prompt of as many keys
    plain = _model({"bfloat16": {"64x64": CALLS}}, "gpt-oss-20b")
    keys = 128 * 129 / 2 + 896 * 128
    n = equivalent_prompt_tokens(keys)
    assert plain.prefill_chunks_attention_s(((1024, 0),)) == pytest.approx(
        12 * 2 * prefill_call_s(CALLS, 32, n) + 12 * 2 * 40e-6
    )
