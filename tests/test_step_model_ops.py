"""One cost model for every command: simulate's and plan's step (batch_step.StepModel) takes its
bytes and FLOPs by kernel kind from the same operator list as the datasheet floor
(step_time.step_ops). On every bundled model and seeded random step shapes, each of its terms'
quantities (dense weights and GEMMs, the experts touched, each cache group's KV and attention
FLOPs, the recurrent state) is that list's sum over the operators of its kind at the step's
shape, with no exception."""

import copy
import random

import pytest

from kvplan.anatomy.model import CacheKind
from kvplan.dtypes import resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.flops import causal_keys_attended
from kvplan.formulas.kv import compressed_read_bytes
from kvplan.formulas.step_time import OpKind, Rates, step_ops
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import tables_for
from kvplan.inputs.sources import bundled_models, load_model

RATES = Rates(3.35e12, 989e12)
MODELS = sorted(bundled_models())
ATTENTION = (OpKind.DECODE_ATTENTION, OpKind.PREFILL_ATTENTION)


def _close(a, b):
    assert a == pytest.approx(b, rel=1e-9, abs=1e-6)


def _shapes(spec, name, n=4):
    """Seeded random (tokens, sampled, gathered MoE tokens, tp, moe ranks, weights, kv dtype)."""
    rng = random.Random(name)
    tps = [t for t in (1, 2, 4, 8) if _valid_tp(spec, t)]
    wdtypes = [spec.dtype, "fp8", "int4", "nvfp4", spec.weights_quantization or spec.dtype]
    for _ in range(n):
        tokens = rng.choice([1, 3, 64, 511, 4096, 300_000])
        tp = rng.choice(tps)
        yield (
            tokens,
            rng.randint(1, min(tokens, 64)),
            tokens * rng.choice([1, 1, 4]),
            tp,
            tp * rng.choice([1, 1, 2, 8]),
            rng.choice(wdtypes),
            rng.choice(["auto", "fp8", "int4", "nvfp4", "q4_0"]),
        )


def _valid_tp(spec, tp):
    try:
        spec.check_tp(tp)
    except Exception:
        return False
    return True


def _sums(groups, pick):
    """(weight bytes, FLOPs with a streaming operator's, KV bytes) of the operators `pick` takes."""
    weights = flops = kv = 0.0
    for ops, count in groups:
        for op in ops:
            if pick(op):
                weights += count * op.weight_bytes
                flops += count * (op.flops + op.elementwise_flops)
                kv += count * op.kv_bytes
    return weights, flops, kv


@pytest.mark.parametrize("name", MODELS)
def test_step_models_weights_and_gemms_are_the_operator_lists_sums(name):
    """Dense weights at the step's tokens (the embedding a lookup of their rows), the experts the
    gathered tokens touch on this rank, the dense GEMMs over every token and the head over the
    sampled ones, the experts' GEMMs over the gathered tokens."""
    spec = load_model(name)
    for tokens, sampled, gathered, tp, moe_ranks, wdtype, _ in _shapes(spec, name):
        m = StepModel(spec, RATES, wdtype, resolve_kv_format("auto", spec.dtype), tp=tp,
                      moe_ranks=moe_ranks, dp=gathered // tokens)  # fmt: skip
        fmt = m.fmt
        step = step_ops(spec, wdtype, fmt, num_decodes=tokens, decode_context=1,
                        num_sampled=sampled, even_split=True, whole_model=True)  # fmt: skip
        routed = step_ops(spec, wdtype, fmt, num_decodes=gathered, decode_context=1,
                          num_sampled=1, even_split=True, whole_model=True)  # fmt: skip
        dense = _sums(step, lambda op: op.name != "experts" and op.kind not in ATTENTION)
        experts = _sums(routed, lambda op: op.name == "experts")
        dense_bytes, expert_bytes = m.weights_bytes(tokens, gathered)
        _close(dense_bytes, dense[0] / tp)
        _close(expert_bytes, experts[0] / moe_ranks)
        _close(m.dense_flop_per_token * tokens + m.head_flop_per_sample * sampled, dense[1] / tp)
        _close(m.expert_flop_per_token * gathered, experts[1] / moe_ranks)
        assert bool(expert_bytes) == (spec.moe is not None)


@pytest.mark.parametrize("name", MODELS)
def test_step_models_attention_is_the_operator_lists_sums(name):
    """Each decode's cache read (every group's keys held at its context, the recurrent state per
    sequence) and attention FLOPs, and a prefill chunk's causal FLOPs and its cached and written
    KV (every new token's, a windowed layer's too), DeepSeek-V4's compressed entries (a decode's:
    those its indexer scores and its top-k; a chunk's: all cached and its own). No exceptions."""
    spec = load_model(name)
    rng = random.Random(name + "/attention")
    for _, _, _, tp, _, _, kv in _shapes(spec, name):
        try:
            fmt = resolve_kv_format(kv, spec.dtype)
            m = StepModel(spec, RATES, spec.dtype, fmt, tp=tp)
        except KvplanError:  # a block format that does not divide a head width
            continue
        decodes = rng.choice([1, 5, 256])
        context = rng.choice([1, 17, 4096, 131_072])
        new, cached = rng.choice([(1, 0), (100, 17), (2048, 0), (512, 8192), (8192, 4096)])
        ops = step_ops(spec, spec.dtype, fmt, num_decodes=decodes, decode_context=context,
                       prefill_chunks=((new, cached),), tp=tp, even_split=True)  # fmt: skip
        _, decode_flops, decode_kv = _sums(ops, lambda op: op.kind is OpKind.DECODE_ATTENTION)
        _, _, state_kv = _sums(ops, lambda op: op.name == "state")
        _, prefill_flops, prefill_kv = _sums(
            ops, lambda op: op.kind is OpKind.PREFILL_ATTENTION or op.name == "kv_write"
        )

        def keys(g, length):
            return length if g.window is None else min(length, g.window)

        def compressed(g, length, kv_bytes, index_bytes):
            if not g.compress_ratio:
                return 0
            return compressed_read_bytes(
                length // g.compress_ratio, g.compressed_topk, kv_bytes, index_bytes
            )

        def latents(g, length):  # DSA without tables: the top-k's latents alone
            held = keys(g, length)
            if g.attended_block:  # MiniMax-M3: the top-k blocks, the local (last) one among them
                blocks = -(-held // g.attended_block)
                if blocks <= g.attended_topk:
                    return held
                return (
                    (g.attended_topk - 1) * g.attended_block
                    + held
                    - (blocks - 1) * g.attended_block
                )
            return min(held, g.attended_topk) if g.attended_topk else held

        kv_read = sum(
            decodes
            * (
                g.kv_bytes_per_token * latents(g, context)
                + g.index_bytes_per_token * keys(g, context)  # DSA: every key's indexer key
                + compressed(
                    g, context, g.compressed_kv_bytes_per_entry, g.compressed_index_bytes_per_entry
                )
            )
            for g in m.groups
        )
        _close(kv_read, decode_kv)
        _close(m.state_bytes_per_sequence * (decodes + 1), state_kv)
        flops = sum(
            g.decode_flop_per_key * decodes * (latents(g, context) + compressed(g, context, 1, 0))
            # DSA's indexer scores every held key
            + g.index_flop_per_key * decodes * keys(g, context)
            # DeepSeek-V4's indexer scores the compressed keys whose bytes it reads
            + decodes * compressed(g, context, 0, g.compressed_index_flop_per_entry)
            for g in m.groups
        )
        _close(flops, decode_flops)
        # the step's own pricing reads those bytes
        _, memory = m._decode_attention(decodes, decodes * context, max, min)
        bw = m.attention_rates.bandwidth_bytes_per_s
        state = decodes * m.state_bytes_per_sequence
        if m.dsa is None and not any(g.mla for g in m.groups):
            _close(memory * bw, kv_read + state)
        end = new + cached
        attended = sum(
            g.prefill_flop_per_key
            * (causal_keys_attended(end, g.window, g.chunked) - causal_keys_attended(cached, g.window, g.chunked))
            for g in m.groups
        )  # fmt: skip
        # DeepSeek-V4: the token at position p attends its p // ratio compressed entries too, a
        # CSA layer's top-k of them
        attended += sum(
            g.prefill_flop_per_key
            * sum(min(p // g.compress_ratio, g.compressed_topk or p) for p in range(cached + 1, end + 1))
            for g in m.groups
            if g.compress_ratio
        )  # fmt: skip
        # DeepSeek-V4's indexer: the token at position p scores p // ratio compressed keys, unless
        # the chunk ends within the top-k entries (vLLM skips the indexer)
        attended += sum(
            g.compressed_index_flop_per_entry * sum(p // g.compress_ratio for p in range(cached + 1, end + 1))
            for g in m.groups
            if g.compressed_index_flop_per_entry and end // g.compress_ratio > g.compressed_topk
        )  # fmt: skip
        _close(attended, prefill_flops)
        held = sum(
            (g.kv_bytes_per_token + g.index_bytes_per_token)
            * (end if g.window is None else min(end, g.window + new))
            for g in m.groups
        )
        held += sum(
            (g.compressed_kv_bytes_per_entry + g.compressed_index_bytes_per_entry)
            * (cached // g.compress_ratio + new // g.compress_ratio)
            for g in m.groups
            if g.compress_ratio
        )
        _close(held, prefill_kv)
        # the chunk's state read and written as the op list's: once per chunk
        stateless = copy.copy(m)
        stateless.state_bytes_per_sequence = 0.0
        chunk_state_s = m.prefill_attention_s(new, cached) - stateless.prefill_attention_s(
            new, cached
        )
        _close(chunk_state_s * m.attention_rates.bandwidth_bytes_per_s, state_kv / (decodes + 1))


def test_dsa_tables_leave_the_indexer_keys_to_the_dsa_module():
    """With the GPU's DSA tables the indexer's key cache is theirs: the MLA group reads the
    operator list's KV less the indexer's keys, every latent (the tables time DSA over dense
    MLA); without them, all of it, the latents of the top-k and every indexer key."""
    spec = load_model("deepseek-v3.2")
    fmt = resolve_kv_format("auto", spec.dtype)
    tables = tables_for(load_profile("h200-sxm"), "vllm").dsa_delta_us
    with_tables = StepModel(spec, RATES, "fp8", fmt, tp=8, dsa_delta_us=tables)
    bare = StepModel(spec, RATES, "fp8", fmt, tp=8)
    assert with_tables.dsa is not None and bare.dsa is None
    indexer = sum(a.indexer_bytes_per_token(fmt) for a in spec.attention_layers())
    assert indexer > 0
    (g,), (b,) = with_tables.groups, bare.groups
    assert g.kv_bytes_per_token == b.kv_bytes_per_token
    assert (g.attended_topk, g.index_bytes_per_token) == (0, 0)
    assert (b.attended_topk, b.index_bytes_per_token) == (2048, indexer)
    ops = step_ops(spec, "fp8", fmt, num_decodes=1, decode_context=1, tp=8, even_split=True)
    read = _sums(ops, lambda op: op.kind is OpKind.DECODE_ATTENTION)[2]
    assert b.kv_bytes_per_token + b.index_bytes_per_token == read
    # at 32k the MLA group with the tables reads every latent, without them the top-k's
    long = step_ops(spec, "fp8", fmt, num_decodes=1, decode_context=32_768, tp=8, even_split=True)
    read = _sums(long, lambda op: op.kind is OpKind.DECODE_ATTENTION)[2]
    assert read == 2048 * b.kv_bytes_per_token + 32_768 * indexer
    assert with_tables._decode_attention(1, 32_768, max, min)[1] > bare._decode_attention(
        1, 32_768, max, min
    )[1] - with_tables.dsa.delta_s("decode", 1, 32_768)
    assert CacheKind.MLA is spec.attention_layers()[0].kind
