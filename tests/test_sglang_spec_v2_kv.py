"""Spec v2's KV over-allocation in SGLang (engines.sglang.spec_v2_reserve_tokens): before every
round each running request's allocation is topped up to kv_committed_len + 2 x
get_alloc_len_per_decode(), max(steps x topk, draft tokens) at page 1 or topk 1
(speculative/eagle_info_v2.py prepare_for_decode; mem_cache/common.py, later
allocation_sizing.py). The simulated pool holds those slots (EngineConfig.spec_lookahead =
reserve - 1 beyond the token being decoded), so admission sees fewer free tokens and the decode
check retracts when the top-up does not fit."""

from __future__ import annotations

import math

import pytest
from test_simulate_engine import MODEL, NO_FRONTEND, config, held_blocks

from kvplan.cli.common import load_gpu, load_model
from kvplan.engines.context_limit import ContextLimit
from kvplan.engines.sglang import spec_v2_reserve_tokens
from kvplan.errors import KvplanError
from kvplan.simulate import cluster
from kvplan.simulate.engine import DECODE
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.simulate.sglang import SglangEngine
from kvplan.simulate.workload import RequestSpec

from helpers import run_json


@pytest.mark.parametrize(
    "version, method, steps, topk, draft, page, overlap, reserve",
    [
        ("0.5.10", "eagle", 3, 1, 4, 1, False, 0),  # spec v1 (SGLANG_ENABLE_SPEC_V2 off)
        ("0.5.11", "eagle3", 3, 1, 4, 1, True, 2 * 4),  # 2 x max(3 x 1, 4)
        ("0.5.11", "eagle3", 3, 1, 4, 1, False, 0),  # the overlap scheduler off: v1's schema
        ("0.5.12", "mtp", 1, 1, 2, 1, True, 2 * 2),
        ("0.5.13", "eagle", 3, 1, 4, 1, False, 2 * 4),  # v2's schema, overlap or not
        ("0.5.13", "eagle", 5, 4, 8, 1, True, 2 * 20),  # 2 x max(5 x 4, 8)
        ("0.5.23", "draft_model", 3, 1, 4, 1, True, 2 * 4),  # STANDALONE
        # page 64, topk 4, 3 steps: ceil((63 + 3) / 64) = 2 pages a branch, 2 x 64 x 4
        ("0.5.13", "eagle", 3, 4, 8, 64, True, 2 * 2 * 64 * 4),
        ("0.5.13", "eagle", 3, 1, 4, 64, True, 2 * 4),  # topk 1: no page term
        ("0.5.13", "ngram", 0, 1, 12, 1, False, 0),
        ("0.5", "eagle", 3, 1, 4, 1, False, 0),  # April 2026's main: v1
        ("0.4.10", "eagle", 3, 1, 4, 1, False, 0),
    ],
)
def test_the_reserve_by_release(version, method, steps, topk, draft, page, overlap, reserve):
    assert spec_v2_reserve_tokens(version, method, steps, topk, draft, page, overlap) == reserve


def test_0_5_11_refuses_what_it_cannot_size():
    with pytest.raises(KvplanError, match="page_size > 1 and spec_topk > 1"):
        spec_v2_reserve_tokens("0.5.11", "eagle", 3, 4, 8, 64, True)


def _serve(requests, lookahead: int, num_blocks: int, observer=None):
    cfg = config(spec_lookahead=lookahead, num_blocks=num_blocks, max_num_seqs=64)
    engine = SglangEngine(cfg, MODEL, 0.0, observer=observer)
    run = cluster.run(
        requests, [engine], frontend=NO_FRONTEND, context=ContextLimit(cfg.max_model_len)
    )
    return engine, run


@pytest.mark.parametrize("reserve", [1, 8, 24, 25, 40])
def test_the_first_round_tops_up_to_the_reserve(reserve):
    """One request of 8 prompt tokens: after its first decode it holds ceil((8 + reserve) / 16)
    blocks (committed 8 tokens, `reserve` slots from there), 16-token blocks."""
    held = []

    def watch(engine, steps, num_decodes, chunks):
        if num_decodes and not held:
            held.append(held_blocks(engine.bm, 0))

    _serve([RequestSpec(0, 0.0, 8, 3)], reserve - 1, 64, watch)
    assert held == [math.ceil((8 + reserve) / 16)]


def test_every_decoding_request_holds_its_reserve():
    reserve = 24
    seen = []

    def watch(engine, steps, num_decodes, chunks):
        joined = {r.rid for r in engine.spec_joined}
        for r in engine.running:
            if r.state == DECODE and r.rid not in joined:
                position = r.c0 + (engine.decode_index - r.j0)
                assert held_blocks(engine.bm, r.rid) * 16 >= position + reserve - 1
                seen.append(r.rid)

    requests = [RequestSpec(i, 0.01 * i, 100 + 37 * i, 60 + 11 * i) for i in range(12)]
    _, run = _serve(requests, reserve - 1, 1 << 12, watch)
    assert len(run.finished) == 12 and seen


def test_the_reserve_admits_fewer_at_once():
    """A pool of 60 blocks (960 tokens), eight requests of 100 + 8 tokens: admission counts
    100 + 8 + a page each (8 x 109 = 872 fit), and without the reserve each holds 7 blocks at
    most, all eight at once; with 40 slots ahead each holds ceil((100 + 40) / 16) = 9 blocks
    from its first round, and 60 // 9 = 6 run at once. Every request still finishes."""
    peak = {}
    for lookahead in (0, 39):
        most = [0]

        def watch(engine, steps, num_decodes, chunks, most=most):
            most[0] = max(most[0], sum(r.state == DECODE for r in engine.running))

        requests = [RequestSpec(i, 0.0, 100, 8) for i in range(8)]
        _, run = _serve(requests, lookahead, 60, watch)
        assert len(run.finished) == 8
        peak[lookahead] = most[0]
    assert peak == {0: 8, 39: 60 // math.ceil((100 + 40) / 16)}


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def h100():
    return load_gpu("h100-sxm")


@pytest.mark.parametrize(
    "version, overlap, lookahead",
    [("0.5.10", None, 0), ("0.5.11", None, 7), ("0.5.11", False, 0), ("0.5.13", False, 7)],
)
def test_simulate_holds_the_reserve_by_release(llama, h100, version, overlap, lookahead):
    """EAGLE-3 (3, 1, 4): 2 x 4 slots, 7 beyond the token being decoded."""
    flags = ServeOptions(
        engine="sglang",
        sglang_version=version,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="x/y",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        spec_accept="0.8,0.6,0.4",
        async_scheduling=overlap,
    )
    replica = build_replica(llama, h100, flags)
    assert replica.config.spec_lookahead == lookahead
    assert ("sglang-spec-v2-kv" in {n.id for n in replica.notes}) == bool(lookahead)


def test_the_cli_says_so():
    base = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang")
    base += ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y")
    base += ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    base += ("--speculative-num-draft-tokens", "4", "--spec-accept-length", "3")
    base += ("--num-prompts", "4", "--input-len", "64", "--output-len", "8")
    out = run_json(*base, "--engine-version", "0.5.11")
    texts = {n["id"]: n["text"] for n in out["notes"]}
    assert "holds 8 KV slots" in texts["sglang-spec-v2-kv"]
