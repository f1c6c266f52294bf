"""Speculative decoding in kvplan simulate (kvplan.simulate.speculative): a round's step time at
acceptance 1.0 and 0.0, the verification's terms, the pool with a draft beside the target, the
lookahead slots and token budget, the engines' two spellings, and the refusals — against
figures worked by hand."""

from __future__ import annotations

import math

import pytest

from kvplan.cli.common import load_gpu, load_model
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import GPU_TERMS, BatchShape
from kvplan.formulas.techniques import (
    expected_tokens_per_round,
    speculative_pool_blocks,
    tokens_per_round_from_positions,
)
from kvplan.simulate import speculative
from kvplan.simulate.engine import Engine, EngineConfig, Req
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.simulate.steplog import FixedStep
from kvplan.simulate.workload import RequestSpec
from kvplan.units import GIB

from helpers import run_by_hand, run_cli, run_json

EAGLE3 = '{"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 3}'
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
SMALL = ("--num-prompts", "16", "--input-len", "256", "--output-len", "32")


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def h100():
    return load_gpu("h100-sxm")


def _gpu(terms) -> float:
    return sum(terms.terms_s[f] for f in GPU_TERMS)


# ---- the round ---------------------------------------------------------------------------------
def test_tokens_per_round_by_hand():
    # a = 0.5, k = 3: 1 + 0.5 + 0.25 + 0.125 = 1.875
    assert expected_tokens_per_round(3, 0.5) == pytest.approx(1.875)
    assert expected_tokens_per_round(3, 1.0) == 4.0
    # vLLM's per-position rates 0.8, 0.6, 0.4: mean acceptance length 2.8
    assert tokens_per_round_from_positions((0.8, 0.6, 0.4)) == pytest.approx(2.8)


@pytest.mark.parametrize("options", [{"spec_accept": "1"}, {"spec_accept": "1,1,1"}])
def test_acceptance_one_yields_k_plus_one_tokens_a_round(llama, h100, options):
    replica = build_replica(llama, h100, ServeOptions(speculative_config=EAGLE3, **options))
    model = replica.model
    assert replica.speculation.tokens_per_round == 4.0  # k + 1
    shape = BatchShape(32, 32 * 2000, (), 32)
    verify = model.target.step(BatchShape(32, 32 * 2000, (), 32 * 4), None, 4)
    draft = model.draft_step(32, 32 * 2000)
    first = model.draft_step(32, 32 * 2000, first=True)
    # one decode step is a quarter of 3 draft steps (the first over the 4 positions the last
    # verification settled) and one verification of 4 tokens each
    expected = (first.total_s + 2 * draft.total_s + verify.total_s) / 4
    assert model.step(shape).total_s == pytest.approx(expected)


def test_acceptance_zero_is_one_token_a_round_and_slower_than_plain(llama, h100):
    # mean acceptance length 1: nothing drafted is kept (a rate of 0 is refused: (0, 1])
    opts = ServeOptions(speculative_config=EAGLE3, spec_accept_length=1.0)
    spec = build_replica(llama, h100, opts).model
    plain = build_replica(llama, h100, ServeOptions()).model
    shape = BatchShape(32, 32 * 2000, (), 32)
    verify = spec.target.step(BatchShape(32, 32 * 2000, (), 128), None, 4)
    draft = spec.draft_step(32, 32 * 2000)
    first = spec.draft_step(32, 32 * 2000, first=True)
    expected = first.total_s + 2 * draft.total_s + verify.total_s
    assert spec.step(shape).total_s == pytest.approx(expected)
    assert spec.step(shape).total_s > plain.step(shape).total_s


def test_the_first_draft_forward_runs_the_settled_positions(h100):
    # a draft model at batch 256: its first forward runs 4 positions per sequence (1,024
    # tokens, past the GEMMs' ridge), the other two 256 tokens; each samples one per sequence
    target = load_model("llama-3.1-70b")
    opts = ServeOptions(
        tp=4,
        speculative_config='{"model": "llama-3.1-8b", "num_speculative_tokens": 3}',
        spec_accept="1",
    )
    m = build_replica(target, h100, opts).model
    context = 256 * 1000
    first = m.draft_step(256, context, first=True)
    draft = m.draft_step(256, context)
    assert first.total_s > draft.total_s
    own = m.draft.step(BatchShape(256, context, (), 256), None, 4)
    assert first.terms_s == {**own.terms_s, "sampler_s": 0.0, "host_s": 0.0}
    verify = m.target.step(BatchShape(256, context, (), 1024), None, 4)
    step = m.step(BatchShape(256, context, (), 256))
    assert step.total_s == pytest.approx((first.total_s + 2 * draft.total_s + verify.total_s) / 4)


def test_verification_reads_each_cache_once_and_runs_every_token(llama, h100):
    target = build_replica(llama, h100, ServeOptions()).model
    batch, context = 16, 16 * 4000
    one, memory_one = target.decode_attention_s(batch, context)
    four, memory_four = target.decode_attention_s(batch, context, queries=4)
    assert memory_one and memory_four  # cache reads bound both at this context
    assert four == pytest.approx(one)  # the cache read once, not four times
    # the GEMMs run 64 tokens: the same weight reads, four times the FLOPs
    assert target.gemm_s(64, 64) == target.gemm_s(16 * 4, 16 * 4)
    step = target.step(BatchShape(batch, context, (), 64), None, 4)
    weights_s, matmul_s = target.gemm_s(64, 64)
    assert step.terms_s["weights_s"] + step.terms_s["matmul_s"] == pytest.approx(
        weights_s + matmul_s
    )


def test_a_mixed_step_charges_the_chunk_in_full(llama, h100):
    model = build_replica(llama, h100, ServeOptions(speculative_config=NGRAM, spec_accept="1"))
    m = model.model
    decodes = BatchShape(8, 8 * 1000, (), 8)
    mixed = BatchShape(8, 8 * 1000, ((512, 0),), 9)
    verify = m.target.step(BatchShape(8, 8 * 1000, (), 32), None, 4)
    verify_mixed = m.target.step(BatchShape(8, 8 * 1000, ((512, 0),), 33), None, 4)
    added = verify_mixed.total_s - verify.total_s
    assert m.step(mixed).total_s == pytest.approx(m.step(decodes).total_s + added)


def test_a_prefill_step_runs_the_draft_over_its_chunks(h100):
    # SGLang's forward_draft_extend after every target extend, vLLM's proposer over every
    # scheduled token: a draft model's own forward over the prompt's 600 tokens (one head row),
    # GPU terms only, on top of the target's prefill
    target = load_model("llama-3.1-70b")
    opts = ServeOptions(
        tp=4,
        speculative_config='{"model": "llama-3.1-8b", "num_speculative_tokens": 3}',
        spec_accept="1",
    )
    m = build_replica(target, h100, opts).model
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    own = m.draft.step(prefill, None, 1)
    extend = m.draft_extend(prefill)
    assert extend.terms_s == {**own.terms_s, "sampler_s": 0.0, "host_s": 0.0}
    assert extend.total_s == pytest.approx(_gpu(own) - own.terms_s["sampler_s"])
    assert m.step(prefill).total_s == pytest.approx(m.target.step(prefill).total_s + extend.total_s)
    # beside 8 decodes the chunk joins the round's first draft forward: what it adds
    mixed = BatchShape(8, 8 * 1000, ((600, 0),), 9)
    first = m.draft.step(BatchShape(8, 8 * 1000, (), 8), None, 4)
    both = m.draft.step(BatchShape(8, 8 * 1000, ((600, 0),), 9), None, 4)
    added = _gpu(both) - both.terms_s["sampler_s"] - _gpu(first) + first.terms_s["sampler_s"]
    assert m.draft_extend(mixed).total_s == pytest.approx(added)


def test_an_mtp_draft_extend_is_one_layer_of_the_target_eagerly(dsv3):
    # DeepSeek-V3's one MTP layer over a 600-token prompt (past the 512-token graphs: eager):
    # the target's mean layer's eager dispatch once, and the target's layer terms / 61: its
    # 3 dense MLA layers launch 15 kernels, its 58 MoE ones 23, each at the measured host cost
    h200 = load_gpu("h200-sxm")
    m = build_replica(
        dsv3, h200, ServeOptions(tp=8, speculative_config='{"method": "mtp"}', spec_accept="1")
    ).model
    assert m.share == pytest.approx(1 / 61)
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    extend = m.draft_extend(prefill)
    h = m.target.host
    rest = h.eager_per_layer_s - 10 * h.eager_per_launch_s  # a layer's part past its launches
    assert extend.terms_s["launch_s"] == pytest.approx(
        rest + (3 * 15 + 58 * 23) / 61 * h.eager_per_launch_s
    )
    whole = m.target._forward(prefill, 1.0).terms
    assert extend.terms_s["attention_s"] == pytest.approx(whole[3] / 61)
    assert extend.terms_s["host_s"] == extend.terms_s["sampler_s"] == 0.0
    ngram = build_replica(
        dsv3, h200, ServeOptions(tp=8, speculative_config=NGRAM, spec_accept="1")
    ).model
    assert ngram.draft_extend(prefill).total_s == 0.0  # no draft forward to run


def test_a_decode_span_prices_each_step_as_one_step_does(llama, h100):
    import numpy as np

    draft_model = '{"model": "llama-3.1-8b", "num_speculative_tokens": 2}'
    seventy = load_model("llama-3.1-70b")
    # TP 4: the steps gather the head's logits over TP, the draft model's too
    for model, config, accept in (
        (llama, EAGLE3, "0.7"),
        (llama, NGRAM, "0.5"),
        (seventy, draft_model, "0.6"),
        (seventy, EAGLE3, "0.7"),
    ):
        tp = 4 if model is not llama else 1
        m = build_replica(
            model, h100, ServeOptions(tp=tp, speculative_config=config, spec_accept=accept)
        ).model
        sums = 24 * 1500 + 24 * np.arange(5, dtype=float)
        times, kept = m.decode_span_s(24, sums)
        singles = [m.step(BatchShape(24, float(x), (), 24)).total_s for x in sums]
        assert times == pytest.approx(singles)
        assert kept(5).total_s == pytest.approx(sum(singles))


# ---- the pool ----------------------------------------------------------------------------------
def test_pool_blocks_formula_by_hand():
    # 1,000 blocks in 40 GiB; a 4 GiB draft; KV 100 B/token target, 25 B/token draft:
    # floor(1000 x 36/40 x 100/125) = floor(720.0) = 720
    assert speculative_pool_blocks(1000, 40 * GIB, 4 * GIB, 100, 25) == 720
    assert speculative_pool_blocks(1000, 4 * GIB, 4 * GIB, 100, 25) == 0


def test_mtp_layer_takes_one_layer_of_every_block(dsv3):
    # KV memory given: only the split applies; the MTP layer is one more MLA layer of 61,
    # so the blocks are floor(N x 61 / 62)
    gpu = load_gpu("h200")
    opts = ServeOptions(tp=8, kv_cache_memory_bytes=40 * GIB)
    plain = build_replica(dsv3, gpu, opts)
    mtp = build_replica(dsv3, gpu, opts._replace(speculative_config='{"method": "mtp"}'))
    n = plain.config.num_blocks + 1  # usable_blocks took vLLM's null block
    assert mtp.config.num_blocks == math.floor(n * 61 / 62) - 1
    assert mtp.speculation.request.num_steps == 1  # num_nextn_predict_layers
    assert mtp.speculation.draft_kv_bytes_per_token == 576 * 2  # one MLA latent, bf16


def test_draft_model_weights_and_layers_come_out_of_the_pool(h100):
    target = load_model("llama-3.1-70b")
    opts = ServeOptions(tp=4)
    plain = build_replica(target, h100, opts)
    with_draft = build_replica(
        target,
        h100,
        opts._replace(
            speculative_config='{"model": "llama-3.1-8b", "num_speculative_tokens": 4}',
            spec_accept="0.7",
        ),
    )
    sp = with_draft.speculation
    # llama-3.1-8b at TP 4: 8,030,261,248 params x 2 B / 4; KV 32 layers x 2 x 2 heads x
    # 128 x 2 B per token per GPU against the target's 80 layers
    assert sp.draft_weight_bytes == pytest.approx(8_030_261_248 * 2 / 4)
    assert sp.draft_kv_bytes_per_token == 32 * 2 * 2 * 128 * 2
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import vllm_allocation

    alloc = vllm_allocation(target, h100, EngineRequest(max_model_len=131072, tp=4))
    blocks = speculative_pool_blocks(
        alloc.num_blocks, alloc.available_kv_bytes, sp.draft_weight_bytes, 80, 32
    )
    assert with_draft.config.num_blocks == blocks - 1  # less the null block
    assert with_draft.config.num_blocks < plain.config.num_blocks


# ---- the scheduler -----------------------------------------------------------------------------
def _run(lookahead: int, prompt: int, outputs: int) -> tuple[list[int], list[int]]:
    """One request alone over blocks of 16: (the tokens handed to the pool, the budget the
    decodes took) at every step."""
    synced, used = [], []

    def observe(engine, steps, num_decodes, chunks):
        assert steps == 1
        synced.append(engine.running[0].synced if engine.running else None)
        used.append(engine.bm.num_used_blocks)

    knobs = {"max_num_seqs": 4, "max_num_batched_tokens": 64, "num_blocks": 50}
    run_by_hand([(0, prompt, outputs)], observe, **knobs, spec_lookahead=lookahead)
    return synced, used


def test_lookahead_slots_are_held_ahead_of_each_decode():
    # prompt 14, 4 outputs: the prefill computes 0-13, decodes compute 14, 15, 16. Without
    # speculation position p needs p + 1 slots: 15, 16, 17 -> blocks 1, 1, 2
    assert _run(0, 14, 4)[1] == [1, 1, 1, 2]
    # k = 2 lookahead: p + 3 slots: 17, 18, 19 -> 2 blocks from the first decode (the pool is
    # handed tokens up to the slots each decode holds; later ones fit the blocks held)
    synced, used = _run(2, 14, 4)
    assert synced[1] == 17
    assert used == [1, 2, 2, 2]
    # prompt 13: the first decode's 16 slots fit one block, position 14 needs 17: a second
    assert _run(2, 13, 4)[1] == [1, 1, 2, 2]


def test_decodes_take_k_plus_one_tokens_of_the_budget():
    # budget 64, four decodes with k = 3 take 16: a 100-token prompt gets a 48-token chunk
    config = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=64, max_model_len=4096, num_blocks=200,
        block_size=16, spec_lookahead=3,
    )  # fmt: skip
    chunks_seen = []

    def observe(engine, steps, num_decodes, chunks):
        if num_decodes == 4 and chunks:
            chunks_seen.append(chunks[0][1])

    engine = Engine(config, FixedStep(1.0), 0.0, observer=observe)
    for rid in range(4):
        engine.admit(Req(RequestSpec(rid, 0.0, 8, 50), 0.0, 0.0, 50), 0.0)
    engine.step(0.5)  # the four short prompts
    engine.admit(Req(RequestSpec(9, 0.0, 100, 5), 0.0, 0.0, 5), engine.clock_s)
    engine.step(engine.clock_s + 0.5)
    assert chunks_seen == [64 - 4 * 4]


# ---- the spellings -----------------------------------------------------------------------------
def test_vllm_json_and_sglang_flags_are_one_request(dsv3):
    vllm = speculative.parse_vllm('{"method": "mtp", "num_speculative_tokens": 3}', dsv3)
    named = speculative.parse_vllm('{"method": "deepseek_mtp", "num_speculative_tokens": 3}', dsv3)
    nextn = speculative.parse_sglang("NEXTN", 3, 1, 4, None, dsv3)
    eagle = speculative.parse_sglang("EAGLE", 3, 1, None, None, dsv3)  # topk 1: steps + 1
    auto = speculative.parse_sglang("NEXTN", None, None, None, None, dsv3)  # SGLang's (3, 1, 4)
    # the request is one; vLLM's keeps its spelling (config) for the launch to repeat
    assert vllm.config == '{"method":"mtp","num_speculative_tokens":3}'
    vllm, named = vllm._replace(config=None), named._replace(config=None)
    assert vllm == named == nextn == eagle == auto
    assert vllm == speculative.SpecDecode("mtp", 3, 1, 4, None)


def test_spellings_give_the_same_simulation(dsv3):
    gpu = load_gpu("h200")
    base = ServeOptions(tp=8, kv_cache_memory_bytes=30 * GIB)
    one = build_replica(
        dsv3,
        gpu,
        base._replace(
            speculative_config='{"method": "mtp", "num_speculative_tokens": 2, '
            '"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}'
        ),
    )
    other = build_replica(
        dsv3,
        gpu,
        base._replace(speculative_config='{"method": "mtp", "num_speculative_tokens": 2}'),
    )
    other_given = build_replica(
        dsv3,
        gpu,
        base._replace(
            speculative_config='{"method": "mtp", "num_speculative_tokens": 2}',
            spec_accept_length=2.5,
        ),
    )
    assert one.speculation.tokens_per_round == other_given.speculation.tokens_per_round == 2.5
    assert other.speculation.acceptance == "assumed"
    shape = BatchShape(16, 16 * 3000, (), 16)
    assert one.model.step(shape) == other_given.model.step(shape)


def test_sglang_defaults_and_launch_flags(llama, h100):
    eagle = speculative.parse_sglang("EAGLE", None, None, None, "org/head", llama)
    assert (eagle.num_steps, eagle.topk, eagle.verify_tokens) == (5, 4, 8)  # Llama's
    replica = build_replica(
        llama,
        h100,
        ServeOptions(
            engine="sglang", speculative_algorithm="EAGLE3", speculative_draft_model_path="x/y"
        ),
    )
    assert replica.config.max_num_seqs == 48  # SGLang's max_running_requests when speculating
    assert replica.model.async_scheduling is False  # its overlap scheduler off
    assert speculative.launch_flags(eagle, "sglang") == [
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5",
        "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
        "--speculative-draft-model-path", "org/head",
    ]  # fmt: skip
    mtp = speculative.SpecDecode("mtp", 1, 1, 2, None)
    assert speculative.launch_flags(mtp, "vllm") == [
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":1}',
    ]


def _sglang_eagle3(llama, h100, steps: int, topk: int, tokens: int, **accept):
    options = ServeOptions(
        engine="sglang",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="x/y",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=tokens,
        **accept,
    )
    return build_replica(llama, h100, options).model


@pytest.mark.parametrize(
    ("accept", "tokens", "round_host_us"),
    [
        # acceptance 1.0: 4 tokens a round; 2 passes x 126 us + 32 x 3 tokens past the first
        # x 4 us = 252 + 384 = 636 us
        ("1", 4.0, 636.0),
        # nothing accepted (length 1): the two passes alone, 252 us, one token a round
        (None, 1.0, 252.0),
    ],
)
def test_an_sglang_round_pays_its_draft_passes_and_outputs_on_the_host(
    llama, h100, accept, tokens, round_host_us
):
    from kvplan.formulas.batch_step import HOST_OVERHEADS

    # host_overheads.json: 126 us a pass (per_step_s), 4 us a request's output (per_request_s)
    assert (HOST_OVERHEADS.per_step_s, HOST_OVERHEADS.per_request_s) == (126e-6, 4e-6)
    given = {"spec_accept": accept} if accept else {"spec_accept_length": 1.0}
    m = _sglang_eagle3(llama, h100, 3, 1, 4, **given)
    assert m.speculation.tokens_per_round == tokens
    assert m.round_host_s(32) == pytest.approx(round_host_us * 1e-6)
    context = 32 * 2000
    verify = m.target.step(BatchShape(32, context, (), 128), None, 4)
    draft = m.draft_step(32, context)
    first = m.draft_step(32, context, first=True)
    step = m.step(BatchShape(32, context, (), 32))
    round_s = first.total_s + 2 * draft.total_s + verify.total_s + round_host_us * 1e-6
    assert step.total_s == pytest.approx(round_s / tokens)
    host = verify.terms_s["host_s"] + round_host_us * 1e-6
    assert step.terms_s["host_s"] == pytest.approx(host / tokens)
    # a decode span prices each step as one step does, host included
    import numpy as np

    sums = context + 32 * np.arange(4, dtype=float)
    times, kept = m.decode_span_s(32, sums)
    singles = [m.step(BatchShape(32, float(x), (), 32)) for x in sums]
    assert times == pytest.approx([s.total_s for s in singles])
    assert kept(4).terms_s["host_s"] == pytest.approx(sum(s.terms_s["host_s"] for s in singles))
    # a prefill batch: the draft's extend over it is one more pass, 126 us
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    alone = m.target.step(prefill).total_s + m.draft_extend(prefill).total_s
    assert m.step(prefill).total_s == pytest.approx(alone + 126e-6)


def test_vllm_and_sglang_ngram_pay_no_draft_pass(llama, h100):
    vllm = build_replica(llama, h100, ServeOptions(speculative_config=EAGLE3, spec_accept="1"))
    assert vllm.model.round_host_s(32) == vllm.model.prefill_host_s() == 0.0
    ngram = build_replica(
        llama,
        h100,
        ServeOptions(engine="sglang", speculative_algorithm="NGRAM", spec_accept_length=3.0),
    ).model
    # no draft forward (ngram_worker.py); its verification's loop still checks every token:
    # 32 x 2 tokens past the first x 4 us = 256 us
    assert ngram.round_host_s(32) == pytest.approx(256e-6)
    assert ngram.prefill_host_s() == 0.0


def test_an_sglang_tree_extends_its_draft_over_k_plus_one_positions(llama, h100):
    # --speculative-num-steps 4 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16
    # verifies 16 tokens a sequence, but the draft extend after it runs 5 (steps + 1,
    # eagle_draft_extend_cuda_graph_runner.py), one sampled row a sequence
    tree = _sglang_eagle3(llama, h100, 4, 4, 16)
    context = 16 * 1000
    first = tree.draft_step(16, context, first=True)
    assert first == tree._draft_forward(BatchShape(16, context, (), 16), 5)
    over_sixteen = tree._draft_forward(BatchShape(16, context, (), 16), 16)
    assert first.total_s < over_sixteen.total_s


def test_an_sglang_tree_verifies_its_draft_tokens_and_accepts_one_path(llama, h100):
    """--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8:
    the tree scores 4 + 2 x 16 = 36 candidates (organize_draft_results), verifies 8 tokens a
    sequence (the root and the 7 best), so each decode's verification runs 8 query rows; the
    longest accepted path is 3 drafted tokens + the bonus, 4, whatever the tree's width."""
    request = speculative.parse_sglang("EAGLE3", 3, 4, 8, "x/y", llama)
    assert (request.num_steps, request.topk, request.verify_tokens) == (3, 4, 8)
    assert speculative.tree_candidates(3, 4) == 36
    tree = _sglang_eagle3(llama, h100, 3, 4, 8, spec_accept_length=4.0)
    assert tree.queries == 8 and tree.speculation.lookahead == 7
    assert tree.speculation.tokens_per_round == 4.0
    # the verification: 16 sequences x 8 rows through the target, each cache read once
    context = 16 * 1000
    verify = tree.target.step(BatchShape(16, context, (), 16 * 8), None, 8)
    chain = tree.target.step(BatchShape(16, context, (), 16 * 4), None, 4)
    # the sampler over every verified row: 128 rows, twice a chain's 64; each cache read once
    assert verify.terms_s["sampler_s"] == pytest.approx(2 * chain.terms_s["sampler_s"])
    assert verify.terms_s["kv_read_s"] == pytest.approx(chain.terms_s["kv_read_s"])
    assert verify.terms_s["weights_s"] > chain.terms_s["weights_s"]  # GEMMs over 128 rows
    e = tree.speculation.tokens_per_round
    draft = tree.draft_step(16, context)
    first = tree.draft_step(16, context, first=True)
    one = tree.step(BatchShape(16, context, (), 16))
    host = tree.round_host_s(16)
    expected = (first.total_s + 2 * draft.total_s + verify.total_s + host) / e
    assert one.total_s == pytest.approx(expected)
    with pytest.raises(KvplanError, match=r"4.5: between 1 and 4 \(k \+ 1\) for 3 drafted.*8 "):
        _sglang_eagle3(llama, h100, 3, 4, 8, spec_accept_length=4.5)
    # more draft tokens than the tree has nodes (36 + its root): SGLang's torch.topk would fail
    with pytest.raises(KvplanError, match="has 37 nodes"):
        speculative.parse_sglang("EAGLE3", 3, 4, 38, "x/y", llama)
    assert speculative.parse_sglang("EAGLE3", 3, 4, 37, "x/y", llama).verify_tokens == 37


def test_an_acceptance_length_past_the_tree_depth_is_one_line(llama):
    code, out, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *SMALL,
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "8", "--spec-accept-length", "5",
    )  # fmt: skip
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "between 1 and 4 (k + 1)" in lines[0], err


def test_an_sglang_verification_replays_its_graph_while_its_batch_fits(llama, h100):
    # SGLang's Llama default 5-4-8 verifies 8 tokens a sequence; its target graph runner
    # captures batch sizes up to cuda_graph_max_bs (can_run: batch size, not tokens), so a
    # batch of max_bs / 8 + 8 sequences (past the plain decode's token limit) still replays
    # one, and only past max_bs does it run eagerly (0.8 ms a layer, 32 layers)
    m = _sglang_eagle3(llama, h100, 5, 4, 8, spec_accept="0.7")
    limit = m.target.cuda_graph_max_tokens
    b = limit // 8 + 8
    assert b * 8 > limit >= b
    graphed = m.target.step(BatchShape(4, 4 * 1000, (), 32), None, 8).terms_s["launch_s"]
    shape = BatchShape(b, b * 1000, (), b * 8)
    assert m.target.step(shape, None, 8).terms_s["launch_s"] == pytest.approx(32 * 0.8e-3)
    verify = m._graphed(m.target, 8).step(shape, None, 8)
    assert verify.terms_s["launch_s"] == pytest.approx(graphed)
    past = BatchShape(limit + 8, (limit + 8) * 1000, (), (limit + 8) * 8)
    eager = m._graphed(m.target, 8).step(past, None, 8).terms_s["launch_s"]
    assert eager == pytest.approx(32 * 0.8e-3)
    # the round prices that verification: (first + 4 drafts + verify + host) / E
    e = m.speculation.tokens_per_round
    first = m.draft_step(b, b * 1000, first=True)
    draft = m.draft_step(b, b * 1000)
    round_s = first.total_s + 4 * draft.total_s + verify.total_s + m.round_host_s(b)
    assert m.step(BatchShape(b, b * 1000, (), b)).total_s == pytest.approx(round_s / e)
    # vLLM's limit counts tokens (CUDA_GRAPH_MAX_TOKENS): its target as it is
    vllm = build_replica(llama, h100, ServeOptions(speculative_config=EAGLE3)).model
    assert vllm._graphed(vllm.target, 4) is vllm.target


@pytest.mark.parametrize(
    ("model", "gpu", "options"),
    [
        # SGLang's MTP: the target's own MoE layer drafts, under a MoE backend no table times
        (
            "deepseek-v3",
            "h200-sxm",
            {"engine": "sglang", "moe_runner_backend": "cutlass", "speculative_algorithm": "NEXTN"},
        ),
        # vLLM's MTP on a GPU without the DSA module's tables: the draft's attention untimed
        ("deepseek-ai/DeepSeek-V3.2", "mi300x", {"speculative_config": '{"method": "mtp"}'}),
    ],
)
def test_the_draft_forwards_of_the_targets_layers_carry_their_untimed_seconds(model, gpu, options):
    """A draft forward of the target's own layers (MTP) runs the parts no table times as the
    target's forwards do: its StepTime.untimed_s is what StepModel.untimed_s gives for its
    terms, not 0, and a decode span's untimed seconds are the steps' (the interval's untimed
    fraction, EngineStats.untimed_time_fraction, sums both)."""
    import numpy as np

    from kvplan.engines.backends import Backends

    moe = options.pop("moe_runner_backend", None)
    backends = Backends(moe_runner_backend=moe) if moe else Backends()
    opts = ServeOptions(tp=8, spec_accept="0.7", backends=backends, **options)
    m = build_replica(load_model(model), load_gpu(gpu), opts).model
    assert m.draft is None and m.target.untimed_terms
    b, context = 16, 16 * 2000
    for first in (False, True):
        draft = m.draft_step(b, context, first=first)
        shape, queries = m._draft_shape(b, context, first)
        tokens, sampled = m._draft_rows(None, first)
        target = m._graphed(m.target, m.extend_queries if first else m.topk)
        gpu_terms = target._forward(shape, m.share, tokens, queries, False, sampled).terms
        rows = queries * shape.num_decodes
        expected = target.untimed_s(gpu_terms, rows, shape.num_sampled, tokens, sampled)
        assert draft.untimed_s == pytest.approx(expected) and expected > 0
    sums = context + b * np.arange(4, dtype=float)
    _, kept = m.decode_span_s(b, sums)
    singles = [m.step(BatchShape(b, float(x), (), b)) for x in sums]
    assert kept(4).untimed_s == pytest.approx(sum(s.untimed_s for s in singles), rel=1e-9)


# ---- the CLI -----------------------------------------------------------------------------------
def test_cli_reports_the_speculation():
    data = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL,
        "--speculative-config", NGRAM, "--spec-accept", "0.6",
    )  # fmt: skip
    sp = data["setup"]["speculative"]
    assert sp["method"] == "ngram" and sp["num_steps"] == 3
    assert sp["tokens_per_round"] == pytest.approx((1 - 0.6**4) / 0.4)
    assert "sim-speculative" in {n["id"] for n in data["notes"]}
    plain = run_json("simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL)
    assert "speculative" not in plain["setup"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--speculative-config", EAGLE3, "--spec-accept", "0"), "(0, 1]"),
        (("--speculative-config", EAGLE3, "--spec-accept", "1.01"), "(0, 1]"),
        (("--speculative-config", EAGLE3, "--spec-accept", "0.9,0.5"), "one acceptance rate"),
        (("--speculative-config", EAGLE3, "--spec-accept-length", "4.5"), "between 1 and 4"),
        (("--speculative-config", "{method: mtp}"), "must be JSON"),
        (("--speculative-config", '{"method": "mtp"}'), "no MTP layers"),
        (("--speculative-config", '{"method": "suffix"}'), "kvplan simulates"),
        (("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 99}'), "64"),
        (("--spec-accept", "0.5"), "prices speculative decoding"),
        (("--speculative-algorithm", "EAGLE"), "SGLang's"),
        (("--engine", "sglang", "--speculative-algorithm", "MEDUSA"), "choose EAGLE"),
    ],
)
def test_bad_speculative_input_is_one_line(args, message):
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, *args)
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


def test_refusals_in_python(llama):
    with pytest.raises(KvplanError, match="acceptance once"):
        speculative.parse_accept("0.7", 2.0, speculative.SpecDecode("ngram", 3, 1, 4))
    with pytest.raises(KvplanError, match="synthetic"):
        speculative.parse_vllm(
            '{"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_length": 2.0}',
            llama,
        )


# ---- plan --------------------------------------------------------------------------------------
PLAN = (
    "plan", "deepseek-v3", "--gpu", "h200", "--rate", "2", "--slo", "tpot_p99=60ms",
    "--tp", "8", "--num-prompts", "20", "--input-len", "1000", "--output-len", "100",
    "--max-num-seqs", "64", "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "auto",
    "--jobs", "1",
)  # fmt: skip


@pytest.mark.parametrize(
    ("emit", "flags"),
    [
        ("vllm", ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']),
        (
            "sglang",
            [
                "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
            ],
        ),
    ],
)  # fmt: skip
def test_plan_searches_mtp_layouts_and_launches_them(emit, flags):
    data = run_json(*PLAN, "--emit", emit, "--spec-accept", "0.85", "--no-prune")
    assert data["searched"] == 2  # the one layout, without and with its MTP layer
    by_spec = {tuple(c.get("speculative") or ()): c for c in data["candidates"]}
    assert set(by_spec) == {(), tuple(flags)}
    mtp = by_spec[tuple(flags)]
    assert mtp["spec_tokens_per_round"] == pytest.approx(1.85)
    # the draft's round pays: more goodput per replica than without at 0.85 acceptance
    assert mtp["goodput_rps"] > by_spec[()]["goodput_rps"]
    assert all(part in mtp["command"] for part in flags)  # shell-quoted, the JSON intact
    assert "plan-speculative" in {n["id"] for n in data["notes"]}


def test_plan_without_speculation():
    data = run_json(*PLAN, "--speculative", "off")
    assert data["searched"] == 1
    assert all("speculative" not in c for c in data["candidates"])
    code, out, err = run_cli(*PLAN, "--speculative", "off", "--spec-accept", "0.5")
    assert code == 2 and "prices speculative layouts" in err


def test_a_measured_profile_prices_a_verification_as_its_chunks():
    # the per-operator model (a `kvplan measure` profile) has no decode of k + 1 queries: a
    # verification is priced as the (k + 1)-token chunks over each cache that it is
    from pathlib import Path

    from kvplan.inputs.hardware import load_profile
    from kvplan.simulate.setup import step_model

    gpu = load_profile(str(Path(__file__).parent / "data" / "measured_cpu_profile.yaml"))
    spec = load_model("qwen2.5-3b")
    spec = spec._replace(layers=spec.layers[:2])
    model, _ = step_model(spec, gpu, ServeOptions(), "auto", 512, [])
    assert model.op_rates is not None
    verify = model.step(BatchShape(4, 4 * 1001, (), 16), None, 4)  # 1,000 cached + 1 each
    chunks = model.step(BatchShape(0, 0, ((4, 1000),) * 4, 16))
    assert verify == chunks


def test_the_cookbook_deepseek_v3_2_h800_acceptance_cannot_happen():
    """sgl-cookbook @ 7b5bd9c0 DeepSeek-V3_2.md #L678/#L742/#L785 ran --speculative-algorithm EAGLE
    --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3 and
    printed accept lengths 3.27 and 3.26. SGLang's "Accept length" (bench_serving reads the
    server's avg_spec_accept_length) is (accepted draft tokens + 1 bonus) per request per
    verify: with a chain of 2 draft steps at most 3 (num_draft_tokens = steps + 1 = 3 tokens
    verified). kvplan reads the flags as SGLang does (k = 2) and refuses the figure, one line;
    tests/data/README.md says why the runs stay refused."""
    spec = load_model("deepseek-v3.2")
    request = speculative.parse_sglang("EAGLE", 2, 1, 3, None, spec)
    assert (request.method, request.num_steps, request.topk, request.verify_tokens) == (
        "mtp",
        2,
        1,
        3,
    )
    assert speculative.check_length(3.0, 2) == 3.0
    with pytest.raises(KvplanError, match=r"3.27: between 1 and 3 \(k \+ 1\) for 2 drafted"):
        speculative.check_length(3.27, 2)


def test_a_graph_twin_is_held_by_the_model_it_was_built_from(llama, h100, monkeypatch):
    """_graphed's twin belongs to the model it copies (StepModel.with_graph_tokens), not to a
    cache keyed by id(model): CPython gives a collected model's address to a model built after
    it, so such a key collides and the second model got the first one's twin. Here every id
    is the same (the collision, made certain: speculative's `id` patched), and each model still
    gets its own twin."""
    import copy

    monkeypatch.setattr(speculative, "id", lambda _: 1, raising=False)
    m = _sglang_eagle3(llama, h100, 5, 4, 8)
    first = copy.copy(m.target)
    first.cuda_graph_max_tokens = 64
    assert m._graphed(first, 8).cuda_graph_max_tokens == 64 * 8
    del first
    second = copy.copy(m.target)
    second.cuda_graph_max_tokens = 32
    assert m._graphed(second, 8).cuda_graph_max_tokens == 32 * 8
    # a copy does not inherit the twins built of its original
    assert m._graphed(copy.copy(second), 8) is not m._graphed(second, 8)
    assert m._graphed(second, 8) is m._graphed(second, 8)  # built once


def test_the_graph_twins_are_one_copy_at_other_limits(llama, h100):
    """without_graphs and with_graph_tokens are one copy (StepModel._graph_twin) at other CUDA
    graph limits: eager is both limits 0, a graph twin the decode limit alone, keeping the
    model's prefill limit; each built once, and eager stays eager."""
    m = build_replica(llama, h100, ServeOptions(engine="sglang")).model
    assert m.cuda_graph_max_tokens and m.prefill_graph_max_tokens
    eager = m.without_graphs()
    assert (eager.cuda_graph_max_tokens, eager.prefill_graph_max_tokens) == (0, 0)
    assert m.without_graphs() is eager and eager.without_graphs() is eager
    wider = 2 * m.cuda_graph_max_tokens
    twin = m.with_graph_tokens(wider)
    assert twin.cuda_graph_max_tokens == wider
    assert twin.prefill_graph_max_tokens == m.prefill_graph_max_tokens
    assert m.with_graph_tokens(wider) is twin
    assert twin.without_graphs() is eager
    assert m.with_graph_tokens(m.cuda_graph_max_tokens) is m
    assert eager.with_graph_tokens(wider) is eager
