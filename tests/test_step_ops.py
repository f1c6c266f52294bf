"""One cost model: the datasheet floor (decode_step, prefill_step) is the sums of the step's
operator list (step_time.step_ops), on every bundled model and on random batch shapes, equal to
the aggregate formulas it replaced (FLOPs f(s), weights read per step, the cache per sequence)."""

import random

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.flops import flops_per_decode_token, prefill_flops
from kvplan.formulas.kv import cache_groups, kv_bytes_per_sequence
from kvplan.formulas.step_time import (
    Rates,
    batch_ops,
    decode_step,
    floor_sums,
    prefill_step,
    step_ops,
)
from kvplan.formulas.weights import weight_bytes_read_per_decode_step
from kvplan.inputs.sources import bundled_models, load_model

RATES = Rates(3.35e12, 989e12)
MODELS = sorted(bundled_models())
REL = 1e-9


def _old_decode(spec, batch, context, wdtype, fmt, tp):
    flops = batch * flops_per_decode_token(spec, context) / tp
    weights = weight_bytes_read_per_decode_step(spec, wdtype, batch) / tp
    # what a sparse layer's decode reads less what it holds
    compressed = 0
    for a in spec.attention_layers():
        if a.compress_ratio:
            entries, parts = a.compressed_entries(context), a.compressed_entry_parts(fmt)
            picked = min(entries, a.compressed_topk) if a.compressed_topk else entries
            indexed = entries if a.compressed_topk and entries > a.compressed_topk else 0
            compressed += picked * parts[0] + indexed * parts[1] - entries * sum(parts)
        # DSA (DeepSeek-V3.2, GLM-5): the latents of the index_topk picked, not of every token
        if a.indexer_topk:
            latent = fmt.head_vector_bytes(a.mla_kv_lora_rank + a.mla_rope_dim)
            compressed -= (context - min(context, a.indexer_topk)) * latent
        # MiniMax-M3: the K and V of the top-k blocks, the local (last, partial) one among them
        if a.sparse_topk_blocks:
            block, topk = a.sparse_block_size, a.sparse_topk_blocks
            blocks = -(-context // block)
            picked = context
            if blocks > topk:
                picked = (topk - 1) * block + context - (blocks - 1) * block
            kv = a.kv_bytes_per_token(fmt, tp) - a.indexer_bytes_per_token(fmt)
            compressed -= (context - picked) * kv
    held = kv_bytes_per_sequence(spec, context, fmt, tp)
    return flops, weights + batch * (held + compressed)


def _old_prefill(spec, tokens, wdtype, fmt, tp):
    flops = prefill_flops(spec, tokens) / tp
    weights = weight_bytes_read_per_decode_step(spec, wdtype, tokens) / tp
    # every token's K and V written, a windowed layer's too (it keeps the window's after)
    beyond = sum(
        g.num_layers * g.bytes_per_token_per_layer * max(0, tokens - g.window)
        for g in cache_groups(spec, fmt, tp)
        if g.kind.windowed
    )
    return flops, weights + kv_bytes_per_sequence(spec, tokens, fmt, tp) + beyond


def _shapes(name, n=6):
    """Seeded random (batch, context, prefill tokens, tp, weights dtype, kv dtype)."""
    rng = random.Random(name)
    spec = load_model(name)
    tps = [t for t in (1, 2, 4, 8) if _valid_tp(spec, t)]
    wdtypes = [spec.dtype, "fp8", "int4", "nvfp4", spec.weights_quantization or spec.dtype]
    for _ in range(n):
        yield (
            rng.choice([1, 2, 3, 7, 16, 64, 255, 1024, 4096]),
            rng.choice([1, 17, 512, 4096, 8191, 32768, 131072, 1_000_000]),
            rng.choice([1, 100, 2048, 8192, 65536]),
            rng.choice(tps),
            rng.choice(wdtypes),
            rng.choice(["auto", "fp8", "int4", "nvfp4", "q4_0"]),
        )


def _valid_tp(spec, tp):
    try:
        spec.check_tp(tp)
    except Exception:
        return False
    return True


def _close(a, b):
    assert a == pytest.approx(b, rel=REL, abs=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_floor_is_the_operator_lists_sums_on_every_bundled_model(name):
    spec = load_model(name)
    for batch, context, tokens, tp, wdtype, kv in _shapes(name):
        fmt = resolve_kv_format(kv, spec.dtype)
        try:  # a block format that does not divide a head width: refused by both
            kv_bytes_per_sequence(spec, 1, fmt, tp)
        except KvplanError:
            with pytest.raises(KvplanError):
                decode_step(spec, RATES, batch, context, wdtype, fmt, tp)
            continue
        step = decode_step(spec, RATES, batch, context, wdtype, fmt, tp)
        flops, num_bytes = _old_decode(spec, batch, context, wdtype, fmt, tp)
        _close(step.flops, flops)
        _close(step.bytes, num_bytes)
        pre = prefill_step(spec, RATES, tokens, wdtype, fmt, tp)
        flops, num_bytes = _old_prefill(spec, tokens, wdtype, fmt, tp)
        _close(pre.flops, flops)
        _close(pre.bytes, num_bytes)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3.2", "qwen3.5-35b-a3b", "kimi-k3"])
def test_the_flat_list_and_the_counted_groups_hold_the_same_operators(name):
    """batch_ops (one entry per layer, in order) is step_ops with each distinct layer repeated."""
    spec = load_model(name)
    fmt = resolve_kv_format("auto", spec.dtype)
    shape = dict(num_decodes=5, decode_context=3000, prefill_chunks=((512, 1024),), num_sampled=6)
    flat = batch_ops(spec, spec.dtype, fmt, whole_model=True, **shape)
    groups = step_ops(spec, spec.dtype, fmt, whole_model=True, **shape)
    assert floor_sums([(flat, 1)]) == pytest.approx(floor_sums(groups), rel=1e-12)
    assert len(flat) == sum(len(ops) * count for ops, count in groups)
    assert flat[0].name == "embedding" and flat[-1].name == "lm_head"


def test_every_layer_kind_has_operators():
    """MoE (router, the experts the batch touches, shared experts), MLA with the DSA indexer's
    keys, sliding windows, recurrent states, attention-free layers: each laid out."""
    names = {
        op.name
        for model in ("deepseek-v3.2", "qwen3.5-35b-a3b", "lfm2-1.2b", "gpt-oss-20b")
        for ops, _ in step_ops(
            load_model(model),
            "bf16",
            resolve_kv_format("auto", "bf16"),
            num_decodes=4,
            decode_context=100,
            num_sampled=4,
            whole_model=True,
        )
        for op in ops
    }
    assert {"router", "experts", "shared_experts", "mixer", "state", "attention"} <= names


def test_experts_read_are_those_the_batch_touches():
    spec = load_model("qwen3-30b-a3b")
    fmt = resolve_kv_format("auto", spec.dtype)
    moe = spec.moe
    for batch in (1, 8, 512):
        ops = batch_ops(spec, "bf16", fmt, num_decodes=batch, decode_context=10)
        experts = [op for op in ops if op.name == "experts"]
        assert len(experts) == moe.num_layers
        touched = moe.expected_experts_touched(batch)
        assert experts[0].weight_bytes == pytest.approx(touched * moe.params_per_expert * 2)
        assert experts[0].flops == 2 * batch * moe.top_k * moe.params_per_expert


def test_bundled_models_hold_nothing_outside_their_named_parts():
    """The floor's list reads no 'weights_other' on a config (only a checkpoint's headers can
    hold tensors outside the named parts), and what lies outside the layers is the final norm
    and a few model-level widths."""
    for name in MODELS:
        spec = load_model(name)
        fmt = resolve_kv_format("auto", spec.dtype)
        groups = step_ops(
            spec, spec.dtype, fmt, num_decodes=1, decode_context=1, num_sampled=1, whole_model=True
        )
        tail = {op.name: op for op in groups[-1][0]}
        assert "weights_other" not in tail, name
        for op_name, op in tail.items():
            if op_name not in ("lm_head",):
                assert op.weight_bytes <= 64 * spec.hidden_size * 4, (name, op_name)


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "kimi-k3", "gpt-oss-120b"])
def test_dp_attention_floor_is_the_operator_lists_sums(name):
    """A DP-attention rank: its own sequences' operators but the routed experts, and 1/N of
    the experts the whole batch touches, equal to the aggregate it replaced."""
    from kvplan.formulas.expert_parallel import (
        dp_attention_decode_step,
        dp_attention_prefill_step,
        without_routed_experts,
    )

    spec = load_model(name)
    dense = without_routed_experts(spec)
    fmt = resolve_kv_format("auto", spec.dtype)
    rng = random.Random(name)
    for _ in range(5):
        batch, context, ranks = rng.choice([1, 5, 64, 999]), rng.choice([1, 4096]), 8
        wd = rng.choice(["bf16", "fp8", "int4"])
        own = -(-batch // ranks)
        step = dp_attention_decode_step(spec, RATES, batch, context, wd, fmt, ranks)
        expert = flops_per_decode_token(spec, context) - flops_per_decode_token(dense, context)
        _close(step.flops, own * flops_per_decode_token(dense, context) + batch * expert / ranks)
        read = weight_bytes_read_per_decode_step
        experts = read(spec, wd, batch) - read(dense, wd, batch)
        kv = own * kv_bytes_per_sequence(spec, context, fmt, 1)
        _close(step.bytes, read(dense, wd, own) + experts / ranks + kv)
        pre = dp_attention_prefill_step(spec, RATES, context, wd, fmt, ranks)
        flops = prefill_flops(dense, context)
        _close(pre.flops, flops + (prefill_flops(spec, context) - flops) / ranks)
        experts = read(spec, wd, context) - read(dense, wd, context)
        kv = _old_prefill(spec, context, wd, fmt, 1)[1] - read(spec, wd, context)
        _close(pre.bytes, read(dense, wd, context) + experts / ranks + kv)


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "kimi-k3", "gpt-oss-120b"])
def test_dp_attention_batch_equal_reads_is_the_operator_lists_crossover(name):
    """B_read of a DP-attention rank from the operator list equals the crossover of the
    aggregate it replaced: the dense model's weights at the rank's own sequences plus 1/N of
    the experts the whole batch touches, against the rank's KV reads."""
    from kvplan.formulas.expert_parallel import (
        dp_attention_batch_equal_reads,
        without_routed_experts,
    )
    from kvplan.formulas.roofline import MAX_BATCH_SEARCH

    spec = load_model(name)
    dense = without_routed_experts(spec)
    fmt = resolve_kv_format("auto", spec.dtype)
    read = weight_bytes_read_per_decode_step
    rng = random.Random(name)
    for _ in range(3):
        context, ranks = rng.choice([1024, 32768]), rng.choice([2, 8])
        wd = rng.choice(["bf16", "fp8"])
        kv = kv_bytes_per_sequence(spec, context, fmt, 1)

        def weights(own: int, ranks: int = ranks, wd: str = wd) -> float:
            batch = own * ranks
            experts = read(spec, wd, batch) - read(dense, wd, batch)
            return read(dense, wd, own) + experts / ranks

        lo, hi = 0.0, float(MAX_BATCH_SEARCH)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if weights(max(1, round(mid))) > mid * kv else (lo, mid)
        _close(dp_attention_batch_equal_reads(spec, context, wd, fmt, ranks), (lo + hi) / 2)


def test_cache_groups_keep_each_layers_own_bytes():
    """A stack of full-attention layers holds s x (the sum of its layers' bytes per token): the
    groups may not merge layers that differ in what they hold (MiniMax-M3's 3 plain layers and
    57 with an indexer key were one group of the first layer's 2,048 B/token at bf16)."""
    from kvplan.anatomy.model import CacheKind
    from kvplan.formulas.kv import kv_bytes_per_token

    checked = 0
    for name in MODELS:
        spec = load_model(name)
        layers = [layer for layer in spec.layers if layer.attention is not None]
        if (
            any(
                layer.state is not None
                or layer.attention.kind.windowed
                or layer.attention.compress_ratio
                or layer.attention.kind is CacheKind.STATE
                for layer in spec.layers
                if layer.attention is not None or layer.state is not None
            )
            or not layers
        ):
            continue
        fmt = resolve_kv_format("auto", spec.dtype)
        assert kv_bytes_per_sequence(spec, 1000, fmt) == 1000 * kv_bytes_per_token(spec, fmt), name
        checked += 1
    assert checked > 40
    spec = load_model("minimax-m3")
    fmt = resolve_kv_format("auto", spec.dtype)
    assert kv_bytes_per_sequence(spec, 1000, fmt) == 1000 * (60 * 2048 + 57 * 256)


@pytest.mark.parametrize("name", ["gemma-2-9b", "qwen3-4b", "llama-3.1-8b"])
def test_the_input_embedding_is_a_gather_of_one_row_per_token_tied_or_not(name):
    """The engines gather one row of the input table per token (vLLM's and SGLang's embedding
    lookup, llama.cpp's ggml_get_rows on token_embd), whether or not the head reuses the table:
    a tied model reads the rows and, as its head, the whole table."""
    spec = load_model(name)
    fmt = resolve_kv_format("auto", spec.dtype)
    h, p = spec.hidden_size, 2  # bf16
    for batch in (1, 7, 300):
        groups = step_ops(spec, "bf16", fmt, num_decodes=batch, decode_context=100,
                          num_sampled=batch, whole_model=True)  # fmt: skip
        (embedding,), _ = groups[0]
        assert embedding.name == "embedding"
        assert embedding.weight_bytes == batch * h * p
        head = next(op for op in groups[-1][0] if op.name == "lm_head")
        assert head.weight_bytes == spec.vocab_size * h * p
    assert spec.tied_embeddings == (name != "llama-3.1-8b")


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_indexer_scores_every_compressed_key(name):
    """A CSA layer's indexer scores each compressed key with index_n_heads x index_head_dim
    (q.k, 2 FLOPs a multiply-add) per query token: a decode at s every s // 4 entry, a prefill
    token at position p its p // 4; skipped (vLLM) while the entries are within the top-k."""
    import json
    from pathlib import Path

    from kvplan.formulas.flops import attention_flops_per_decode_token

    spec = load_model(name)
    config = json.loads(
        (
            Path(__file__).parents[1] / "model_configs" / f"{spec.hf_id.split('/')[-1]}.json"
        ).read_text()
    )
    csa = config["compress_ratios"][: config["num_hidden_layers"]].count(4)
    per_key = 2 * config["index_n_heads"] * config["index_head_dim"]
    topk = config["index_topk"]
    without = spec._replace(
        layers=tuple(
            layer._replace(attention=layer.attention._replace(indexer_num_heads=0))
            for layer in spec.layers
        )
    )
    for s in (1, 2048, 4 * topk, 4 * topk + 4, 131_072):
        extra = attention_flops_per_decode_token(spec, s) - attention_flops_per_decode_token(
            without, s
        )
        assert extra == (csa * per_key * (s // 4) if s // 4 > topk else 0), s
    for n in (100, 4 * topk, 5000):
        extra = prefill_flops(spec, n) - prefill_flops(without, n)
        scored = sum(p // 4 for p in range(1, n + 1)) if n // 4 > topk else 0
        assert extra == csa * per_key * scored, n


def test_deepseek_v4_asymptotic_intensity_is_over_the_kv_a_decode_reads():
    """I_inf(s) = f(s) / KV(s) with KV(s) what a decode step reads (the step's own KV bytes per
    sequence): a CSA layer reads its top-k entries and every indexer key, not what it holds."""
    from kvplan.formulas.roofline import asymptotic_intensity

    spec = load_model("deepseek-v4-flash")
    fmt = resolve_kv_format("auto", spec.dtype)
    for s in (1000, 65_536, 1_000_000):
        groups = step_ops(spec, spec.dtype, fmt, num_decodes=1, decode_context=s)
        read = sum(n * op.kv_bytes for ops, n in groups for op in ops)
        assert read < kv_bytes_per_sequence(spec, s, fmt) or s // 4 <= 512
        assert asymptotic_intensity(spec, s, fmt) == pytest.approx(
            flops_per_decode_token(spec, s) / read, rel=1e-12
        )


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "nemotron-h-56b", "lfm2-1.2b", "kimi-k3"])
def test_the_step_reads_the_recurrent_state_in_the_engines_own_dtypes(name):
    """A decode reads its recurrent state in the dtypes the engine keeps it: the spec's (the
    config's) by default; SGLang's bf16 conv and fp32 SSM, the bytes its pool is sized by
    (engines.sglang), under --engine sglang; vLLM's, the bytes its state pages are sized by
    (engines.vllm.layer_specs), under --engine vllm at each release; never the KV cache's
    format."""
    from kvplan.anatomy.model import CacheKind
    from kvplan.engines import EngineRequest
    from kvplan.engines.sglang import _mamba_bytes_per_request
    from kvplan.engines.vllm import layer_specs
    from kvplan.formulas.batch_step import StepModel
    from kvplan.inputs.hardware import load_profile
    from kvplan.simulate.setup import ServeOptions, engine_state_dtypes

    spec = load_model(name)
    h100 = load_profile("h100")
    sglang = engine_state_dtypes(spec, h100, ServeOptions(engine="sglang"))
    for kv in ("auto", "fp8"):
        fmt = resolve_kv_format(kv, spec.dtype)
        for tp in (1, 2):
            ops = step_ops(spec, spec.dtype, fmt, num_decodes=3, decode_context=50, tp=tp)
            state = sum(n * op.kv_bytes for group, n in ops for op in group if op.name == "state")
            assert state == 3 * sum(s.bytes_per_sequence(tp) for s in spec.state_layers())
            ops = step_ops(spec, spec.dtype, fmt, num_decodes=3, decode_context=50, tp=tp,
                           state_dtypes=sglang)  # fmt: skip
            state = sum(n * op.kv_bytes for group, n in ops for op in group if op.name == "state")
            assert state == 3 * sum(_mamba_bytes_per_request(spec, tp))
            model = StepModel(spec, RATES, spec.dtype, fmt, tp=tp, state_dtypes=sglang)
            assert model.state_bytes_per_sequence == sum(_mamba_bytes_per_request(spec, tp))
            for version in ("0.19", "0.21", "0.32"):
                vllm = engine_state_dtypes(spec, h100, ServeOptions(vllm_version=version))
                model = StepModel(spec, RATES, spec.dtype, fmt, tp=tp, state_dtypes=vllm)
                pages, _ = layer_specs(spec, EngineRequest(vllm_version=version), tp)
                assert model.state_bytes_per_sequence == sum(
                    p.state_bytes for p in pages if p.kind is CacheKind.STATE
                )
    assert engine_state_dtypes(load_model("llama-3.1-8b"), h100, ServeOptions()) is None


def _config(spec):
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "model_configs" / f"{spec.hf_id.split('/')[-1]}.json"
    return json.loads(path.read_text())


def _without_indexer(spec):
    """The spec with its indexers' heads removed: their FLOPs 0, nothing else changed."""
    return spec._replace(
        layers=tuple(
            layer
            if layer.attention is None
            else layer._replace(attention=layer.attention._replace(indexer_num_heads=0))
            for layer in spec.layers
        )
    )


@pytest.mark.parametrize("name", ["deepseek-v3.2", "glm-5"])
def test_dsa_indexer_scores_every_cached_key_on_the_floor(name):
    """DSA's lightning indexer (index_n_heads x index_head_dim, every layer) scores every cached
    key per query token: a decode at s its s keys, a prefill token at position p its p; a step of
    prefills alone that all end within index_topk runs dense (vLLM) and scores none, a step with
    a decode scores every chunk."""
    spec = load_model(name)
    config = _config(spec)
    per_key = 2 * config["index_n_heads"] * config["index_head_dim"]
    layers, topk = config["num_hidden_layers"], config["index_topk"]
    bare = _without_indexer(spec)
    fmt = resolve_kv_format("auto", spec.dtype)
    for batch, s, tp in ((1, 1, 1), (8, 2048, 1), (3, 100_000, 8)):
        extra = (
            decode_step(spec, RATES, batch, s, spec.dtype, fmt, tp).flops
            - decode_step(bare, RATES, batch, s, spec.dtype, fmt, tp).flops
        )
        assert extra == pytest.approx(batch * layers * per_key * s / tp, rel=REL), s
    for n in (100, topk, topk + 1, 9000):
        extra = (
            prefill_step(spec, RATES, n, spec.dtype, fmt).flops
            - prefill_step(bare, RATES, n, spec.dtype, fmt).flops
        )
        scored = sum(range(1, n + 1)) if n > topk else 0
        assert extra == layers * per_key * scored, n
        assert prefill_flops(spec, n) - prefill_flops(bare, n) == layers * per_key * scored
    # a mixed step: a decode at 50 and a chunk of 100 after 20 cached scores both; without the
    # decode, the chunk (ending at 120) is skipped
    for decodes, scored in ((1, 50 + sum(range(21, 121))), (0, 0)):
        kw = dict(num_decodes=decodes, decode_context=50, prefill_chunks=((100, 20),))
        with_ = floor_sums(step_ops(spec, spec.dtype, fmt, **kw))[0]
        without = floor_sums(step_ops(bare, spec.dtype, fmt, **kw))[0]
        assert with_ - without == layers * per_key * scored, decodes


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_prefill_attends_the_compressed_entries(name):
    """A DeepSeek-V4 prefill token at position p attends its window's min(p, W) keys and the
    compressed entries it holds, p // ratio: all of an HCA layer's (ratio 128), a CSA layer's
    (ratio 4) index_topk of them; each key 2 x heads x (head_dim + head_dim) FLOPs (shared KV).
    Counted by brute force from the config, the indexer's scores (test above) apart."""
    spec = load_model(name)
    config = _config(spec)
    ratios = config["compress_ratios"][: config["num_hidden_layers"]]
    window, topk = config["sliding_window"], config["index_topk"]
    per_key = 2 * config["num_attention_heads"] * 2 * config["head_dim"]
    plain = spec._replace(
        layers=tuple(
            layer._replace(
                attention=layer.attention._replace(
                    compress_ratio=0, compressed_topk=0, compressed_indexer_dim=0
                )
            )
            for layer in spec.layers
        )
    )
    bare = _without_indexer(spec)
    for n in (100, 4 * topk, 5000, 70_000):
        compressed = sum(
            sum(min(p // r, topk) if r == 4 else p // r for p in range(1, n + 1))
            for r in ratios
            if r
        )
        window_keys = len(ratios) * sum(min(p, window) for p in range(1, n + 1))
        attention = prefill_flops(bare, n) - prefill_flops(plain, n)
        assert attention == per_key * compressed, n
        # and the plain layers' windows, as before
        assert (
            prefill_flops(plain, n)
            - prefill_flops(
                plain._replace(
                    layers=tuple(layer._replace(attention=None) for layer in plain.layers)
                ),
                n,
            )
            == per_key * window_keys
        )


def test_minimax_m3_indexer_scores_every_cached_key_of_its_sparse_layers():
    """MiniMax-M3's sparse layers (sparse_attention_freq) score every cached token's index key
    with sparse_num_index_heads x sparse_index_dim per query token, at any length (no dense
    short-prefill skip); its index heads are its KV heads, split over the ranks as they are."""
    spec = load_model("minimax-m3")
    config = _config(spec)
    sparse = config.get("text_config", config)["sparse_attention_config"]
    layers = sum(sparse["sparse_attention_freq"])
    per_key = 2 * sparse["sparse_num_index_heads"] * sparse["sparse_index_dim"]
    bare = _without_indexer(spec)
    fmt = resolve_kv_format("auto", spec.dtype)
    for batch, s, tp in ((1, 1, 1), (4, 4096, 4)):
        extra = (
            decode_step(spec, RATES, batch, s, spec.dtype, fmt, tp).flops
            - decode_step(bare, RATES, batch, s, spec.dtype, fmt, tp).flops
        )
        assert extra == pytest.approx(batch * layers * per_key * s / tp, rel=REL), s
    for n in (100, 3000):
        assert (
            prefill_flops(spec, n) - prefill_flops(bare, n) == layers * per_key * n * (n + 1) // 2
        )
    # one rank of 8 holds one of the 4 index heads (as its KV head): a quarter of the scores
    kw = dict(num_decodes=2, decode_context=1000, tp=8)
    ranked = sum(op.flops for op in batch_ops(spec, spec.dtype, fmt, **kw))
    ranked -= sum(op.flops for op in batch_ops(bare, spec.dtype, fmt, **kw))
    assert ranked == layers * 2 * 1000 * per_key // 4
