"""kvplan whatif: every technique of the techniques chapter, priced in bytes, in time and in users,
checked against arithmetic done here from the model's shape and the GPU's datasheet figures.

Llama-3.1-70B: 80 layers, 8 KV heads of 128, 64 query heads, hidden 8192, vocabulary 128,256
(untied), bf16. Per layer and token its bf16 cache is 8 heads x (K + V) x 128 x 2 = 4096 bytes.
Llama-3.1-8B (the draft): 32 such layers, hidden 4096. H100 SXM: 3.35 TB/s, 989.4 TFLOP/s bf16.
"""

from __future__ import annotations

import itertools
import math

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.whatif import WhatIfRequest, whatif
from kvplan.plans.whatif_techniques import KINDS, SCHEDULING, parse_technique
from kvplan.present.whatif import PROBES, whatif_view

from helpers import run_cli, run_json

GIB = 2**30
BW, PEAK = 3.35e12, 989.4e12
LAYERS, PER_LAYER = 80, 4096  # llama-3.1-70b: bf16 K+V bytes per token per layer
VOCAB, HIDDEN_70B, HIDDEN_8B = 128256, 8192, 4096
S, B = 128000, 32  # the chapter's 128k x 32

LLAMA70 = load_model("llama-3.1-70b")
H100 = load_profile("h100")


def price(*apply, context_len=S, batches=(B,), tp=4, **kw):
    request = WhatIfRequest(
        context_len=context_len, batch_sizes=tuple(batches), apply=apply, tp=tp, **kw
    )
    return whatif(LLAMA70, H100, request)


def rows(result, batch_size=B):
    return {r.technique: r for r in result.rows if r.batch_size == batch_size}


# ---- bytes ---------------------------------------------------------------------------------------
def test_the_chapters_table_is_reproduced_exactly():
    """1,250 -> 625 -> 312.5 GiB: FP8 and CLA2 halve, a 32k window quarters, CLA2 + FP8 multiply."""
    got = rows(price("fp8", "cla2", "window=32000", "cla2+fp8"))
    assert {name: r.kv_bytes / GIB for name, r in got.items()} == {
        "baseline": 1250.0,
        "fp8": 625.0,
        "cla2": 625.0,
        "window=32000": 312.5,
        "cla2 + fp8": 312.5,
    }
    assert got["cla2 + fp8"].factor == 4.0
    assert got["cla2 + fp8"].stacking.kind == "multiply"


def recurrent_state_bytes():
    """Mamba-2 at hidden 8192: 16384 channels, 256 heads of 64, state 256, 8 groups, kernel 4."""
    conv = 3 * (16384 + 2 * 8 * 256)
    ssm = 256 * 64 * 256
    return (conv + ssm) * 2


# technique -> stored bytes of 32 sequences of 128,000 tokens, by hand
BY_HAND = {
    "baseline": LAYERS * PER_LAYER * S * B,
    "fp8": LAYERS * 2048 * S * B,
    "int8": LAYERS * 8 * 2 * (128 + 4) * S * B,  # one fp32 scale per head vector
    "int4": LAYERS * 8 * 2 * (64 + 4 * 4) * S * B,  # 4 groups of 32: fp16 scale + zero each
    # 3 and 2 bits, 4 + 128 tokens per layer kept in bf16
    "int3": LAYERS * (S * 8 * 2 * (48 + 16) + 132 * (PER_LAYER - 1024)) * B,
    "int2": LAYERS * (S * 8 * 2 * (32 + 16) + 132 * (PER_LAYER - 768)) * B,
    "cla2": 40 * PER_LAYER * S * B,
    "mqa": LAYERS * 512 * S * B,
    "gqa=4": LAYERS * 2048 * S * B,
    "prune=4": LAYERS * 2048 * S * B,
    "lowrank=0.5": LAYERS * 2048 * S * B,  # head_dim 128 -> 64
    "lowrank=32": LAYERS * 1024 * S * B,  # a rank of 32 per head
    "mla=512+64": LAYERS * 576 * 2 * S * B,
    "window=32000": LAYERS * PER_LAYER * 32000 * B,
    "cyclic=32000": LAYERS * PER_LAYER * 32000 * B,
    "evict=0.75": LAYERS * PER_LAYER * 32000 * B,
    "merge=0.75": LAYERS * PER_LAYER * 32000 * B,
    "recurrent=0.75": (20 * PER_LAYER * S + 60 * recurrent_state_bytes()) * B,
    "prefix=2000": LAYERS * PER_LAYER * (2000 + B * (S - 2000)),
    "paged": LAYERS * PER_LAYER * S * B,  # the same bytes
    "sparse-read=0.125": LAYERS * PER_LAYER * S * B,  # the same bytes
    # the draft's cache beside the target's, both holding 4 speculative entries
    "spec=llama-3.1-8b": (LAYERS + 32) * PER_LAYER * (S + 4) * B,
}


def test_every_technique_in_bytes():
    got = rows(price(*[t for t in BY_HAND if t != "baseline"], "cla2+fp8"))
    for technique, expected in BY_HAND.items():
        assert got[technique].kv_bytes == expected, technique
        assert got[technique].factor == pytest.approx(BY_HAND["baseline"] / expected)


def test_a_shared_prefix_is_shared_by_the_draft_too():
    both = rows(price("spec=llama-3.1-8b+prefix=2000"))["spec=llama-3.1-8b + prefix=2000"]
    assert both.kv_bytes == (LAYERS + 32) * PER_LAYER * (2000 + B * (S + 4 - 2000))
    assert both.stacking.kind == "multiply"


def test_sub_byte_keeps_bound_by_what_a_layer_holds():
    """A sequence shorter than sink + recent is all bf16; a window holds at most W tokens."""
    short = rows(price("int2", context_len=100, batches=(1,)), 1)
    assert short["int2"].kv_bytes == short["baseline"].kv_bytes == LAYERS * PER_LAYER * 100
    none_kept = rows(price("int2", keep_sink=0, keep_recent=0, batches=(1,)), 1)
    assert none_kept["int2"].kv_bytes == LAYERS * 768 * S
    gemma = load_model("gemma-3-27b")  # 10 full layers, 52 sliding of 1024; 16 x 128 K+V
    result = whatif(
        gemma, H100, WhatIfRequest(context_len=8192, apply=("int2",), keep_recent=2000, tp=1)
    )
    int2 = rows(result, 1)["int2"]
    full, quant = 16 * 2 * 128 * 2, 16 * 2 * 48
    kept = 4 + 2000
    expected = 10 * (8192 * quant + kept * (full - quant)) + 52 * 1024 * full
    assert int2.kv_bytes == expected


def test_cyclic_buffer_is_constant_memory():
    """Below the window a paged window holds what it has; a cyclic buffer holds W slots."""
    got = rows(price("window=32000", "cyclic=32000", context_len=8000, batches=(1,)), 1)
    assert got["window=32000"].kv_bytes == LAYERS * PER_LAYER * 8000
    assert got["cyclic=32000"].kv_bytes == LAYERS * PER_LAYER * 32000
    assert got["cyclic=32000"].held_tokens == 32000


# ---- time and capacity -------------------------------------------------------------------------
def weights_read_bytes(params, hidden, batch_size):
    """A dense decode step reads every weight but the embedding table, of which B rows."""
    return 2 * (params - (VOCAB - batch_size) * hidden)


def decode_s(kv_read_per_rank, batch_size, tp=4):
    return (weights_read_bytes(LLAMA70.params_total, HIDDEN_70B, batch_size) / tp) / BW + (
        batch_size * kv_read_per_rank / BW
    )


SEQ_PER_RANK = LAYERS * PER_LAYER // 4 * S  # bytes one sequence keeps on one of 4 ranks


def test_storage_side_and_read_side_are_told_apart():
    got = rows(price("fp8", "cla2", "prefix=64000", "sparse-read=0.125", "paged"))
    base = got["baseline"]
    assert base.ceiling_tokens_per_s == pytest.approx(BW / SEQ_PER_RANK)
    # sparse reads: the same bytes and users, an eighth of the reads, 8x the ceiling
    sparse = got["sparse-read=0.125"]
    assert (sparse.kv_bytes, sparse.max_concurrency) == (base.kv_bytes, base.max_concurrency)
    assert sparse.kv_read_bytes == base.kv_read_bytes / 8
    assert sparse.ceiling_tokens_per_s == pytest.approx(8 * base.ceiling_tokens_per_s)
    assert sparse.tpot_floor_s < base.tpot_floor_s
    # quantization: both
    fp8 = got["fp8"]
    assert fp8.kv_read_bytes == base.kv_read_bytes / 2
    assert fp8.ceiling_tokens_per_s == pytest.approx(2 * base.ceiling_tokens_per_s)
    assert fp8.max_concurrency > base.max_concurrency
    # CLA and prefix sharing: capacity, not the decode step (every layer, every sequence reads)
    for name in ("cla2", "prefix=64000"):
        row = got[name]
        assert row.kv_bytes < base.kv_bytes and row.max_concurrency > base.max_concurrency
        assert row.kv_read_bytes == base.kv_read_bytes
        assert row.ceiling_tokens_per_s == base.ceiling_tokens_per_s
    assert got["prefix=64000"].ttft_floor_s < base.ttft_floor_s
    # paging: the same bytes and step, more users when sequences hold 30% of --ctx
    paged = got["paged"]
    assert (paged.kv_bytes, paged.tpot_floor_s) == (base.kv_bytes, base.tpot_floor_s)
    assert paged.held_tokens == round(0.3 * S)
    assert paged.contiguous_concurrency == base.max_concurrency < paged.max_concurrency


def test_users_and_tpot_by_hand():
    result = price("fp8", "sparse-read=0.125")
    got = rows(result)
    pool = result.kv_pool_bytes_per_gpu
    # paged in blocks of 16 (128,000 is a multiple): 2 KV heads per rank
    assert got["baseline"].max_concurrency == int(pool // SEQ_PER_RANK) == 3
    assert got["fp8"].max_concurrency == int(pool // (SEQ_PER_RANK // 2)) == 7
    for name, kv_read in (
        ("baseline", SEQ_PER_RANK),
        ("fp8", SEQ_PER_RANK / 2),
        ("sparse-read=0.125", SEQ_PER_RANK / 8),
    ):
        row = got[name]
        assert row.batch_fits == min(B, row.max_concurrency)
        assert row.step_bound == "memory"
        assert row.tpot_floor_s == pytest.approx(decode_s(kv_read, row.batch_fits), rel=1e-12)
        assert row.tokens_per_s == pytest.approx(row.batch_fits / row.tpot_floor_s)


def test_prefix_hit_prefills_only_the_rest():
    """Prefill is compute-bound: 2 (P_m - P_head) n, the head over the last token, plus
    2 H_q (d + d_v) per causal key per layer. A hit computes none of the prefix's: its rest
    computes the last token's logits."""
    got = rows(price("prefix=16000"))
    head = VOCAB * HIDDEN_70B
    layers = LLAMA70.params_total - 2 * head  # the lookup table and the head left out

    def flops(n):
        return 2 * layers * n + 2 * head + LAYERS * 2 * 64 * 256 * n * (n + 1) // 2

    assert got["baseline"].ttft_floor_s == pytest.approx(flops(S) / 4 / PEAK, rel=1e-12)
    rest = flops(S) - flops(16000) + 2 * head
    assert got["prefix=16000"].ttft_floor_s == pytest.approx(rest / 4 / PEAK, rel=1e-12)


def test_speculative_decoding_by_hand():
    """k = 4 drafted tokens accepted with probability 0.7: (1 - 0.7^5) / 0.3 tokens per round."""
    draft = load_model("llama-3.1-8b")
    result = price("spec=llama-3.1-8b", batches=(1,))
    got = rows(result, 1)["spec=llama-3.1-8b"]
    per_round = (1 - 0.7**5) / 0.3
    assert got.tokens_per_round == pytest.approx(per_round) and got.draft == "llama-3.1-8b"
    draft_seq = 32 * PER_LAYER // 4 * S
    t_draft = (weights_read_bytes(draft.params_total, HIDDEN_8B, 1) / 4 + draft_seq) / BW
    t_verify = (weights_read_bytes(LLAMA70.params_total, HIDDEN_70B, 5) / 4 + SEQ_PER_RANK) / BW
    assert got.tpot_floor_s == pytest.approx((4 * t_draft + t_verify) / per_round, rel=1e-12)
    assert got.ceiling_tokens_per_s == pytest.approx(
        BW / ((SEQ_PER_RANK + 4 * draft_seq) / per_round)
    )
    # the draft's weights and cache come out of the pool
    draft_weights = 2 * draft.params_total / 4
    per_seq = (LAYERS + 32) * PER_LAYER // 4 * (S + 4)
    expected_users = int((result.kv_pool_bytes_per_gpu - draft_weights) // per_seq)
    assert got.max_concurrency == expected_users
    # verification is closer to compute-bound than a plain step (5 tokens' FLOPs for about one
    # step's bytes), and it slows as the batch grows
    plain = rows(result, 1)["baseline"]
    ratio = got.step_intensity_flop_per_byte / plain.step_intensity_flop_per_byte
    assert 4.9 < ratio < 5.0
    big = rows(price("spec=llama-3.1-8b", batches=(1, 2)), 2)["spec=llama-3.1-8b"]
    assert big.tpot_floor_s > got.tpot_floor_s


def test_lowrank_and_mla_spend_decode_flops_for_bytes():
    """Palu rebuilds keys, MLA's absorbed decode attends over the latent: more FLOPs per key, but
    at batch 1 decode stays memory-bound, so the step is priced by its bytes. Across 8 ranks the
    latent is replicated (the chapter's KV sharding caveat): per GPU it reads more than 1 of 8
    KV heads."""
    at_tp2 = rows(price("lowrank=0.5", "mla=512+64", context_len=8192, batches=(1,), tp=2), 1)
    base = at_tp2["baseline"]
    for name, per_token_per_rank in (
        ("lowrank=0.5", 80 * 4 * 2 * 64 * 2),
        ("mla=512+64", 80 * 576 * 2),
    ):
        row = at_tp2[name]
        assert row.step_bound == "memory"
        assert row.tpot_floor_s == pytest.approx(
            decode_s(per_token_per_rank * 8192, 1, tp=2), rel=1e-12
        )
        assert row.tpot_floor_s < base.tpot_floor_s
    at_tp8 = rows(price("mla=512+64", batches=(1,), tp=8), 1)
    assert at_tp8["mla=512+64"].tpot_floor_s > at_tp8["baseline"].tpot_floor_s


def test_tp_degree_defaults_to_the_smallest_that_fits():
    result = price("fp8", tp=None, batches=(1,))
    # TP 2: 65.7 GiB of bf16 weights per GPU leave ~3.6 GiB of the 0.9 x 79.19 GiB, and one
    # 128,000-token sequence is 80 x 2048 x 128,000 bytes = 19.5 GiB per GPU; TP 4 fits it.
    assert result.tp == 4
    assert any(n.id == "whatif-tp-auto" for n in result.notes)


# ---- stacking ----------------------------------------------------------------------------------
CATALOGUE = [
    "fp8",
    "int8",
    "int4",
    "int3",
    "int2",
    "cla2",
    "mqa",
    "gqa=4",
    "prune=4",
    "lowrank=0.5",
    "mla=512+64",
    "window=32000",
    "cyclic=32000",
    "evict=0.75",
    "merge=0.75",
    "recurrent=0.75",
    "prefix=2000",
    "paged",
    "sparse-read=0.125",
    "spec=llama-3.1-8b",
]
# Techniques that act on the product alone (no fixed part): on different terms they multiply
# exactly. int8 (a fixed scale per head vector), recurrent (a fixed state), prefix (stored once),
# spec (a second model's cache) and the no-term ones do not.
PRODUCT = {
    "fp8",
    "int4",
    "int3",
    "int2",
    "cla2",
    "mqa",
    "gqa=4",
    "prune=4",
    "lowrank=0.5",
    "mla=512+64",
    "window=32000",
    "cyclic=32000",
    "evict=0.75",
    "merge=0.75",
}
# kvplan has no windowed MLA layer: a window cannot follow a conversion to MLA.
UNPRICED = {frozenset({"mla=512+64", "window=32000"}), frozenset({"mla=512+64", "cyclic=32000"})}


def test_every_pair_stacks_as_the_chapter_says():
    keep = dict(keep_sink=0, keep_recent=0)
    singles = rows(price(*CATALOGUE, **keep))
    baseline = singles["baseline"].kv_bytes
    checked = 0
    for a, b in itertools.combinations(CATALOGUE, 2):
        result = price(f"{a}+{b}", **keep)
        if frozenset({a, b}) in UNPRICED:
            assert result.skipped and "MLA" in result.skipped[0].reason
            continue
        assert not result.skipped, (a, b)
        row = rows(result)[f"{a} + {b}"]
        ta, tb = parse_technique(a), parse_technique(b)
        if set(ta.terms) & set(tb.terms):
            # the same term: only the stronger counts
            assert row.stacking.kind == "same_term", (a, b)
            stronger = min(singles[a].kv_bytes, singles[b].kv_bytes)
            assert row.kv_bytes == stronger, (a, b)
            assert len(row.stacking.dropped) == 1
        else:
            assert row.stacking.kind == "multiply", (a, b)
            if a in PRODUCT and b in PRODUCT:
                product = (baseline / singles[a].kv_bytes) * (baseline / singles[b].kv_bytes)
                assert row.factor == pytest.approx(product, rel=1e-12), (a, b)
        checked += 1
    assert checked == math.comb(len(CATALOGUE), 2) - len(UNPRICED)


def test_same_term_keeps_the_stronger():
    row = rows(price("mqa+gqa=4"))["mqa + gqa=4"]
    assert row.factor == 8.0
    assert row.stacking.dropped == ("gqa=4",)
    assert row.stacking.clashes == ("kv_heads",)


# ---- words -------------------------------------------------------------------------------------
def test_every_lossy_technique_carries_its_accuracy_note_and_probe():
    lossy = [kind for kind, (_, lossless) in KINDS.items() if not lossless and kind != "dtype"]
    lossy += ["fp8", "int8", "int4", "int3", "int2"]
    for key in lossy:
        words = PROBES[key]
        assert "probe" in words or "evaluate" in words, key
    view = whatif_view(price(*CATALOGUE))
    for item in view.data["rows"]:
        assert item["probe"]
        if not item["lossless"]:
            assert item["technique"] in "\n".join(view.notes)


def test_scheduling_group_points_to_simulate():
    result = price("continuous-batching", "chunked-prefill", "preemption", "cache-aware-routing")
    assert [s.technique for s in result.scheduling] == list(SCHEDULING)
    assert all(s.terms == () and s.measured_by == "kvplan simulate" for s in result.scheduling)
    assert [r.technique for r in result.rows] == ["baseline"]
    with pytest.raises(KvplanError, match="simulate"):
        price("fp8+chunked-prefill")


def test_not_applicable_techniques_say_why():
    deepseek = load_model("deepseek-v3")
    result = whatif(deepseek, load_profile("h200"), WhatIfRequest(8192, (1,), ("mqa", "fp8"), tp=8))
    assert [s.technique for s in result.skipped] == ["mqa"]  # and no "mqa + fp8" either
    assert "MLA latent" in result.skipped[0].reason
    assert "fp8" in rows(result, 1)


def test_fewer_kv_heads_than_ranks_are_replicated_and_said():
    result = price("mqa", batches=(1,))
    mqa = rows(result, 1)["mqa"]
    # one KV head on each of 4 ranks: a rank stores 1/2 of its 2 heads' bytes, not 1/8
    assert mqa.ceiling_tokens_per_s == pytest.approx(
        2 * rows(result, 1)["baseline"].ceiling_tokens_per_s
    )
    assert any(n.id == "tp-kv-replicated" for n in result.notes)


# ---- the command ---------------------------------------------------------------------------------
def test_no_apply_prices_every_technique_for_every_batch():
    data = run_json("whatif", "llama-3.1-70b", "--ctx", "128k", "--batch", "1,32")
    names = {r["technique"] for r in data["rows"]}
    kinds = {k for r in data["rows"] for k in r["kinds"]}
    assert kinds == set(KINDS)
    assert {"fp8", "int3", "int2", "spec", "paged", "sparse-read=0.125", "cla2 + fp8"} <= names
    for batch in (1, 32):
        assert {r["technique"] for r in data["rows"] if r["batch_size"] == batch} == names
    assert [s["technique"] for s in data["scheduling"]] == list(SCHEDULING)
    for row in data["rows"]:
        for key in ("kv_bytes", "kv_read_bytes", "ceiling_tokens_per_s", "max_concurrency"):
            assert row[key] is not None, (row["technique"], key)
        assert row["ttft_floor_s"] > 0


def test_batch_list_rows_scale_with_the_batch():
    data = run_json("whatif", "llama-3.1-8b", "--ctx", "8k", "--batch", "1,8", "--apply", "fp8")
    by = {(r["technique"], r["batch_size"]): r for r in data["rows"]}
    assert by[("fp8", 8)]["kv_bytes"] == 8 * by[("fp8", 1)]["kv_bytes"] == 8 * 32 * 2048 * 8192


def test_terminal_table_stays_narrow():
    code, out, err = run_cli("whatif", "llama-3.1-70b", "--ctx", "128k", "--batch", "32")
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith("  ") and "  " in line[2:]]
    assert max(len(line) for line in table) <= 90


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--apply", "fp9"], "unknown technique"),
        (["--apply", "lowrank=1.5"], "lowrank"),
        (["--apply", "mla=abc"], "LATENT+ROPE"),
        (["--apply", "sparse-read=1"], "between 0 and 1"),
        (["--apply", "paged=1m"], "more tokens than --ctx"),
        (["--apply", "fp8", "--spec-accept", "2"], "--spec-accept"),
        (["--apply", "fp8", "--spec-accept", "nan"], "--spec-accept"),
        (["--apply", "spec=no-such-model"], "no-such-model"),
    ],
)
def test_bad_input_is_one_line(argv, needle):
    code, out, err = run_cli("whatif", "llama-3.1-8b", "--ctx", "8k", *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_the_draft_index_is_every_bundled_model_built():
    """kvplan/plans/draft_models.py (`python scripts/compile_drafts.py` writes it) holds each
    bundled model's type, vocabulary and parameters as building it gives them, and the draft
    found through it is the one a search over every built model finds."""
    from kvplan.inputs.sources import bundled_models
    from kvplan.plans import draft_models
    from kvplan.plans.whatif_techniques import (
        DRAFT_MAX_FRACTION,
        config_checksums,
        find_draft,
        summarize_bundled,
    )

    assert draft_models.CONFIG_CRC32 == config_checksums(), "run python scripts/compile_drafts.py"
    assert draft_models.MODELS == summarize_bundled(), "run python scripts/compile_drafts.py"
    for name in ("llama-3.1-70b", "qwen3-32b", "llama-2-70b", "deepseek-v3", "llama-3.1-8b"):
        spec = load_model(name)
        best = None
        for other_name in bundled_models():
            other = load_model(other_name)
            if (
                other.model_type == spec.model_type
                and other.vocab_size == spec.vocab_size
                and other.params_total <= DRAFT_MAX_FRACTION * spec.params_total
                and (best is None or other.params_total < best.params_total)
            ):
                best = other
        assert find_draft(spec) == best


def test_a_changed_config_is_built_to_find_the_draft(monkeypatch):
    from kvplan.plans import draft_models, whatif_techniques

    monkeypatch.setattr(draft_models, "CONFIG_CRC32", {"index.json": "0"})
    monkeypatch.setattr(draft_models, "MODELS", ())  # stale: not read
    assert whatif_techniques.draft_candidates() == whatif_techniques.summarize_bundled()
    assert whatif_techniques.find_draft(load_model("llama-3.1-70b")).name == "llama-3.1-8b"
