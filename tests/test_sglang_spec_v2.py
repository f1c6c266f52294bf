"""SGLang's spec v2 (issue 28): speculative decoding beside the overlap scheduler
(EAGLEWorkerV2), the default for EAGLE-family speculation from 0.5.11. A round's host work
overlaps its GPU work, except the pass that prepares the next round after waiting for this one's
verification, which overlaps only the draft extend queued behind it
(simulate.speculative.SGLANG_V2_EXPOSED_PASSES); spec v1 keeps everything serial."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.cli.common import load_gpu, load_model
from kvplan.engines.sglang import sglang_spec_v2
from kvplan.formulas.batch_step import GPU_TERMS, BatchShape
from kvplan.formulas.techniques import speculative_overlap_round_s
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import run_json

CONTEXT = 32 * 2000  # 32 sequences of 2,000 tokens


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def h100():
    return load_gpu("h100-sxm")


def _model(llama, h100, version: str, topk: int | None = 1, **options):
    chain = topk in (None, 1)
    flags = ServeOptions(
        engine="sglang",
        sglang_version=version,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="x/y",
        speculative_num_steps=3,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=4 if chain else 8,
        spec_accept="0.8,0.6,0.4",
        **options,
    )
    return build_replica(llama, h100, flags).model


def test_the_overlapped_round_by_hand():
    """max(host, (k - 1) t_draft + t_verify + max(t_first, exposed host)), k = 3: the host
    bound, the draft extend bound and the exposed pass bound, one at a time."""
    # draft 1, verify 3, first 2: the GPU's 2 x 1 + 3 + 2 = 7 when the host is shorter
    assert speculative_overlap_round_s(1.0, 3.0, 3, 2.0, 4.0, 0.5) == pytest.approx(7.0)
    # the exposed pass (2.5) outlasts the draft extend (2): 2 + 3 + 2.5
    assert speculative_overlap_round_s(1.0, 3.0, 3, 2.0, 4.0, 2.5) == pytest.approx(7.5)
    # a host round of 10 s bounds it
    assert speculative_overlap_round_s(1.0, 3.0, 3, 2.0, 10.0, 2.5) == pytest.approx(10.0)
    # arrays: a decode span's steps
    out = speculative_overlap_round_s(np.array([1.0, 1.0]), np.array([3.0, 9.0]), 3, 2.0, 10, 0)
    assert out == pytest.approx([10.0, 13.0])


@pytest.mark.parametrize(
    ("version", "topk", "overlap_off", "v2"),
    [
        ("0.5.10", 1, False, False),  # SGLANG_ENABLE_SPEC_V2 off by default
        ("0.5.11", 1, False, True),
        ("0.5.11", None, False, True),  # unset: v2 whatever auto_choose picks after the check
        ("0.5.11", 2, False, False),  # "spec v2 currently only supports topk = 1"
        ("0.5.12", 4, False, False),
        ("0.5.13", 4, False, True),  # the v1 worker gone, any topk
        ("0.5.23", 1, True, False),  # --disable-overlap-schedule: non-overlap spec v2
        ("0.5", 1, False, False),  # April 2026's main, as kvplan's 0.5 rules read it
    ],
)
def test_release_gating(version, topk, overlap_off, v2):
    assert sglang_spec_v2(version, topk, overlap_off) is v2


def test_the_replica_runs_the_mode_its_release_runs(llama, h100):
    assert not _model(llama, h100, "0.5.10").overlap
    assert _model(llama, h100, "0.5.11").overlap
    assert not _model(llama, h100, "0.5.11", topk=4).overlap
    assert _model(llama, h100, "0.5.13", topk=4).overlap
    assert not _model(llama, h100, "0.5.11", async_scheduling=False).overlap
    ngram = ServeOptions(engine="sglang", sglang_version="0.5.11", speculative_algorithm="NGRAM")
    assert not build_replica(llama, h100, ngram).model.overlap


def test_a_v2_decode_step_is_the_overlapped_round_of_its_parts(llama, h100):
    """The same parts as spec v1 (draft, first draft, verification and the round's host work,
    all priced once), combined as the source overlaps them; v1 adds them up."""
    v1, v2 = _model(llama, h100, "0.5.10"), _model(llama, h100, "0.5.11")
    e = v2.speculation.tokens_per_round
    assert e == pytest.approx(v1.speculation.tokens_per_round) == pytest.approx(2.8)
    shape = BatchShape(32, CONTEXT, (), 32)
    verify = v2.target.step(BatchShape(32, CONTEXT, (), 128), None, 4)
    draft = v2.draft_step(32, CONTEXT)
    first = v2.draft_step(32, CONTEXT, first=True)
    host_verify = verify.terms_s["host_s"]
    gpu_verify = sum(verify.terms_s[f] for f in GPU_TERMS)
    assert verify.total_s == pytest.approx(gpu_verify + host_verify)  # serial target
    host_round = host_verify + v2.round_host_s(32)
    gpu_before = 2 * draft.total_s + gpu_verify
    expected = max(host_round, gpu_before + max(first.total_s, host_verify)) / e
    step2 = v2.step(shape)
    assert step2.total_s == pytest.approx(expected)
    # v1, the same parts in series (and the same parts: v1 and v2 price them alike)
    serial = (first.total_s + 2 * draft.total_s + verify.total_s + v1.round_host_s(32)) / e
    step1 = v1.step(shape)
    assert step1.total_s == pytest.approx(serial)
    assert step1.terms_s == pytest.approx(step2.terms_s)  # the work is the same
    assert step2.total_s < step1.total_s
    # the host work v2 hides: the whole host round, the GPU the longer here
    assert step1.total_s - step2.total_s == pytest.approx(host_round / e, rel=1e-6)


def test_a_v2_decode_span_prices_each_step_as_one_step_does(llama, h100):
    m = _model(llama, h100, "0.5.11")
    sums = CONTEXT + 32 * np.arange(4, dtype=float)
    times, kept = m.decode_span_s(32, sums)
    singles = [m.step(BatchShape(32, float(x), (), 32)) for x in sums]
    assert times == pytest.approx([s.total_s for s in singles])
    assert kept(4).total_s == pytest.approx(sum(s.total_s for s in singles))
    assert kept(4).terms_s["host_s"] == pytest.approx(sum(s.terms_s["host_s"] for s in singles))


def test_a_v2_prefill_batch_overlaps_its_host_pass(llama, h100):
    """A prefill batch under spec v2 runs beside the overlap scheduler: max(gpu, host), where
    spec v1 adds them (the same release, the overlap scheduler off: 0.5.10 would also differ
    in its piecewise graphs, off when speculating there only)."""
    v1 = _model(llama, h100, "0.5.11", async_scheduling=False)
    v2 = _model(llama, h100, "0.5.11")
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    serial = v1.step(prefill)
    host = serial.terms_s["host_s"]
    assert v2.step(prefill).terms_s == pytest.approx(serial.terms_s)
    assert v2.step(prefill).total_s == pytest.approx(max(serial.total_s - host, host))


def test_simulate_says_which_mode_it_ran():
    base = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang")
    base += ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y")
    base += ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    base += ("--speculative-num-draft-tokens", "4", "--spec-accept-length", "3")
    base += ("--num-prompts", "16", "--input-len", "256", "--output-len", "32")
    runs = {v: run_json(*base, "--engine-version", v) for v in ("0.5.10", "0.5.11")}
    texts = {v: {n["id"]: n["text"] for n in r["notes"]} for v, r in runs.items()}
    assert "spec v1" in texts["0.5.10"]["sglang-spec-mode"]
    assert "spec v2" in texts["0.5.11"]["sglang-spec-mode"]
    assert runs["0.5.11"]["setup"]["async_scheduling"] is True
    tpot = {v: r["runs"][0]["bench"]["mean_tpot_ms"] for v, r in runs.items()}
    assert tpot["0.5.11"] < tpot["0.5.10"]
