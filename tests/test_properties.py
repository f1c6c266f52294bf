"""Properties of the cache formulas, over random geometries (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import gqa_saving_factor, kv_bytes_per_sequence, kv_bytes_per_token

from helpers import llama_like, spec_from

BF16, FP8 = KvFormat("bf16"), KvFormat("fp8")


@st.composite
def geometries(draw) -> ModelSpec:
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    group = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv_heads * group
    head_dim = draw(st.sampled_from([32, 64, 128, 256]))
    layers = draw(st.integers(1, 12))
    window = draw(st.one_of(st.none(), st.integers(1, 4096)))
    config = llama_like(
        model_type="mistral",
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=heads * head_dim,
        sliding_window=window,
    )
    return spec_from(config)


contexts = st.integers(1, 1 << 20)


@settings(max_examples=60, deadline=None)
@given(geometries(), contexts, st.integers(1, 512))
def test_linear_in_batch(spec, context_len, batch):
    per_seq = kv_bytes_per_sequence(spec, context_len, BF16)
    # a sequence holds K and V of every layer, bf16, for the tokens its window keeps: counted
    # here from the layers' own fields, not through kvplan's formula
    by_hand = sum(
        2 * layer.attention.num_kv_heads * layer.attention.head_dim * 2
        * min(context_len, layer.attention.window or context_len)
        for layer in spec.layers
    )  # fmt: skip
    assert per_seq == by_hand
    # the CLI's total column is per-sequence x batch (checked through size())
    from kvplan.plans.size import SizeRequest, size

    row = size(spec, SizeRequest(contexts=(context_len,), batches=(batch,))).rows[0]._asdict()
    assert row["kv_bytes_total"] == per_seq * batch


@settings(max_examples=60, deadline=None)
@given(geometries(), contexts, contexts)
def test_monotone_in_context(spec, a, b):
    lo, hi = sorted((a, b))
    assert kv_bytes_per_sequence(spec, lo, BF16) <= kv_bytes_per_sequence(spec, hi, BF16)


@settings(max_examples=60, deadline=None)
@given(geometries(), contexts)
def test_fp8_is_exactly_half_of_bf16(spec, context_len):
    assert 2 * kv_bytes_per_sequence(spec, context_len, FP8) == kv_bytes_per_sequence(
        spec, context_len, BF16
    )


@settings(max_examples=60, deadline=None)
@given(geometries())
def test_gqa_saving_is_exactly_query_over_kv_heads(spec):
    attn = spec.layers[0].attention
    assert gqa_saving_factor(spec, BF16) == attn.num_q_heads / attn.num_kv_heads


@settings(max_examples=60, deadline=None)
@given(geometries(), contexts)
def test_sliding_layers_are_capped_at_the_window(spec, context_len):
    attn = spec.layers[0].attention
    held = kv_bytes_per_sequence(spec, context_len, BF16)
    if attn.kind == "sliding":
        assert held == kv_bytes_per_token(spec, BF16) * min(context_len, attn.window)
        capped = kv_bytes_per_sequence(spec, attn.window, BF16)
        assert kv_bytes_per_sequence(spec, attn.window + context_len, BF16) == capped
    else:
        assert held == kv_bytes_per_token(spec, BF16) * context_len


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([8, 16, 32, 64, 128]), st.sampled_from([64, 128, 256, 576]))
def test_quantized_formats_count_their_scales(group, width):
    int4 = KvFormat("int4", group).head_vector_bytes(width)
    assert int4 == width // 2 + -(-width // group) * 4
    assert KvFormat("int8").head_vector_bytes(width) == width + 4
