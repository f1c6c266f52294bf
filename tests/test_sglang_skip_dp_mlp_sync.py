"""SGLang's --speculative-skip-dp-mlp-sync (issue 28): under DP attention and speculative
decoding the scheduler gathers every rank's batch facts on the GPUs' group twice a decode round
(the new prefill batches first, then the decode batch: scheduler.get_next_batch_to_run,
scheduler_dp_attn_mixin.prepare_mlp_sync_batch_raw) and once a prefill batch; the flag skips
the first, one all-gather a round, and the ranks' prefill and decode batches may then mix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvplan.formulas.batch_step import BatchShape
from kvplan.formulas.comm import ring_allgather_time_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.engine import EngineConfig
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.simulate.sglang import SglangEngine

from helpers import run_cli, run_json

DP8 = dict(engine="sglang", tp=8, data_parallel_size=8, enable_dp_attention=True)
EAGLE = dict(
    speculative_algorithm="EAGLE",
    speculative_num_steps=1,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=2,
    spec_accept_length=1.8,
)


@pytest.fixture(scope="module")
def models():
    spec, gpu = load_model("deepseek-v3", checkpoint=False), load_profile("h200")
    both = [
        build_replica(spec, gpu, ServeOptions(**DP8, **EAGLE, speculative_skip_dp_mlp_sync=s))
        for s in (False, True)
    ]
    return both[0].model, both[1].model


def test_one_sync_is_one_all_gather_of_six_int64_a_rank(models):
    """MLPSyncBatchInfo: 6 int64 from each of 8 GPUs, each receiving 7 x 48 = 336 B, a ring
    all-gather whose hops together cost the tables' measured all-gather call."""
    synced, _ = models
    target = synced.target
    one_way = target.link.one_way_bytes_per_s * target.achieved.link
    call_s = target.achieved.allgather_call_s or target.achieved.allreduce_call_s
    expected = ring_allgather_time_s(336, 8, one_way, call_s / 7)
    assert expected == pytest.approx(336 / one_way + call_s)
    assert synced.mlp_sync_s() == pytest.approx(expected) and expected > 0


def test_skipping_removes_one_all_gather_a_round(models):
    """The same decode step of 32 sequences: two syncs a round without the flag, one with it,
    each round one E-th of a step (E = 1.8): the difference is one sync / 1.8, all of it
    comm_s; a prefill batch pays one sync either way."""
    synced, skipped = models
    assert (synced.decode_mlp_syncs, skipped.decode_mlp_syncs) == (2, 1)
    sync_s = synced.mlp_sync_s()
    shape = BatchShape(32, 32 * 2000, (), 32)
    a, b = synced.step(shape), skipped.step(shape)
    assert a.total_s - b.total_s == pytest.approx(sync_s / 1.8)
    assert a.terms_s["comm_s"] - b.terms_s["comm_s"] == pytest.approx(sync_s / 1.8)
    times_a, kept_a = synced.decode_span_s(32, [32 * 2000.0, 32 * 2001.0])
    times_b, kept_b = skipped.decode_span_s(32, [32 * 2000.0, 32 * 2001.0])
    assert times_a - times_b == pytest.approx([sync_s / 1.8] * 2)
    assert kept_a(2).terms_s["comm_s"] - kept_b(2).terms_s["comm_s"] == pytest.approx(
        2 * sync_s / 1.8
    )
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    assert synced.step(prefill) == skipped.step(prefill)
    alone = synced.target.step(prefill).total_s + synced.draft_extend(prefill).total_s
    assert synced.step(prefill).total_s == pytest.approx(alone + sync_s + synced.prefill_host_s())


def test_skipping_lets_the_ranks_mix_prefill_and_decode(models):
    synced, skipped = models
    sglang = synced.target
    engine = SglangEngine(EngineConfig(8, 256, 4096, 1024, 64), sglang, 0.0)
    engine.model = SimpleNamespace(speculation=object(), skip_dp_mlp_sync=False)  # type: ignore[assignment]
    assert engine.lockstep_exclusive_prefill
    engine.model = SimpleNamespace(speculation=object(), skip_dp_mlp_sync=True)  # type: ignore[assignment]
    assert not engine.lockstep_exclusive_prefill


def test_without_dp_attention_there_is_no_sync_to_skip():
    spec, gpu = load_model("deepseek-v3", checkpoint=False), load_profile("h200")
    options = ServeOptions(engine="sglang", tp=8, **EAGLE, speculative_skip_dp_mlp_sync=True)
    model = build_replica(spec, gpu, options).model
    assert model.mlp_sync_s() == 0.0


SIM = ("simulate", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8")
SIM += ("--dp-size", "8", "--enable-dp-attention", "--num-prompts", "16")
SIM += ("--input-len", "200", "--output-len", "20")


def test_the_flag_as_sglang_spells_it():
    """Taken with EAGLE and NEXTN (NEXTN is EAGLE by then); SGLang's assert refuses the rest,
    here one line; the layout note says what it changes."""
    doc = run_json(*SIM, "--speculative-algorithm", "NEXTN", "--speculative-skip-dp-mlp-sync")
    layout = next(n["text"] for n in doc["notes"] if n["id"] == "sim-expert-parallel")
    assert "--speculative-skip-dp-mlp-sync" in layout and "idle batch" not in layout
    for bad in (
        ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y"),
        (),
    ):
        code, out, err = run_cli(*SIM, *bad, "--speculative-skip-dp-mlp-sync")
        assert code == 2 and not out and len(err.strip().splitlines()) == 1
        assert "EAGLE" in err


def test_a_decoding_rank_beside_an_extend_runs_its_batch_as_an_extend(models):
    """is_extend_in_batch (some rank prefills): the EAGLE worker runs a decoding rank's batch as
    forward_target_extend + forward_draft_extend: the target over one token a sequence, the
    draft (DeepSeek-V3's MTP layer and the head) over the same, one sync, the draft pass's
    host work; no verification, no draft round. A prefill batch is priced as before."""
    _, skipped = models
    eager = skipped.without_graphs()
    mixed = eager.extend_in_batch()
    shape = BatchShape(32, 32 * 2000, (), 32)
    target = eager.target.step(shape)
    draft = eager._draft_forward(BatchShape(32, 32 * 2000, (), 32), 1)
    expected = target.total_s + draft.total_s + eager.mlp_sync_s() + eager.prefill_host_s()
    assert mixed.step(shape).total_s == pytest.approx(expected)
    assert mixed.step(shape).total_s != eager.step(shape).total_s
    prefill = BatchShape(0, 0.0, ((600, 0),), 1)
    assert mixed.step(prefill) == eager.step(prefill)
    # the twin prices a lockstep step and nothing else: no attribute passes to the model
    for name in ("decode_span_s", "without_graphs", "speculation", "mlp_sync_s"):
        with pytest.raises(AttributeError):
            getattr(mixed, name)


@pytest.mark.parametrize("skip", [False, True])
def test_only_a_skipping_group_mixes_decodes_into_extend_steps(monkeypatch, skip):
    """Requests arriving at 4/s at 8 DP ranks: with the flag, decoding ranks share steps with
    another rank's prefill and run them as extends; without it, never."""
    from kvplan.simulate.speculative import SpeculativeStepModel

    calls = []
    original = SpeculativeStepModel.extend_in_batch_decode

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SpeculativeStepModel, "extend_in_batch_decode", counted)
    flag = ("--speculative-skip-dp-mlp-sync",) if skip else ()
    doc = run_json(*SIM, "--speculative-algorithm", "NEXTN", "--request-rate", "4", *flag)
    assert doc["runs"][0]["bench"]["completed"] == 16
    assert bool(calls) == skip


def test_a_step_scale_holds_on_the_decodes_run_as_extends(models):
    """The interval's propagated reruns (setup.with_step_scale) scale every step, the
    decoding ranks' extends beside another rank's prefill among them: the scaled model's
    extend_in_batch is the extend twin scaled, not the wrapped model's unscaled twin."""
    from kvplan.simulate.setup import ScaledStepModel

    _, skipped = models
    shape = BatchShape(32, 32 * 1_000, (), 32)
    plain = skipped.extend_in_batch().step(shape).total_s
    scaled = ScaledStepModel(skipped, 1.5).extend_in_batch().step(shape).total_s
    assert scaled == pytest.approx(1.5 * plain) and plain > 0
    # a model with no extend rule of its own is itself in such a step
    assert skipped.target.extend_in_batch() is skipped.target


def test_the_wrapping_step_models_pass_no_pricing_through(models):
    """The wrappers of a step model (SpeculativeStepModel over its target, ScaledStepModel
    over any) define what they price; a method they do not define is an AttributeError, not
    the wrapped model's own times (unscaled, or without the speculative round), while the
    facts the engines read pass through."""
    from kvplan.simulate.setup import ScaledStepModel

    _, skipped = models
    assert callable(skipped.target.logits_gather_s)
    with pytest.raises(AttributeError, match="without speculation"):
        skipped.logits_gather_s  # noqa: B018
    assert skipped.cuda_graph_max_tokens == skipped.target.cuda_graph_max_tokens
    scaled = ScaledStepModel(skipped, 2.0)
    for name in ("round_host_s", "mlp_sync_s", "draft_step", "logits_gather_s"):
        with pytest.raises(AttributeError, match="does not scale"):
            getattr(scaled, name)
    assert scaled.speculation is skipped.speculation
    assert scaled.cuda_graph_max_tokens == skipped.cuda_graph_max_tokens
    assert getattr(ScaledStepModel(skipped.target, 2.0), "speculation", None) is None


@pytest.mark.parametrize(
    "release,needle",
    [("0.5.10", "0.5.11"), ("0.5.9", "0.5.11"), ("0.4.10", "0.5.11"), ("0.5.23", "0.5.23")],
)
def test_a_release_without_the_flag_refuses_it(release, needle):
    """The flag is in the argument parser of the wheels 0.5.11 to 0.5.22 only (server_args.py
    of 0.5.11-0.5.13, arg_groups from 0.5.14; 0.5.23 has no speculative_skip_dp_mlp_sync
    anywhere): a release outside that range refuses it, here one line, exit 2."""
    code, out, err = run_cli(*SIM, "--speculative-algorithm", "NEXTN",
                             "--engine-version", release,
                             "--speculative-skip-dp-mlp-sync")  # fmt: skip
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert needle in err and "--speculative-skip-dp-mlp-sync" in err


def test_the_releases_with_the_flag_take_it():
    from kvplan.engines.sglang import skip_dp_mlp_sync_accepted

    taken = [p for p in range(1, 30) if skip_dp_mlp_sync_accepted(f"0.5.{p}")]
    assert taken == list(range(11, 23))
    assert skip_dp_mlp_sync_accepted("0.5")  # April 2026's main: the simulated default
    assert not skip_dp_mlp_sync_accepted("0.4.10")
    doc = run_json(*SIM, "--speculative-algorithm", "NEXTN", "--engine-version", "0.5.22",
                   "--speculative-skip-dp-mlp-sync")  # fmt: skip
    layout = next(n["text"] for n in doc["notes"] if n["id"] == "sim-expert-parallel")
    assert "--speculative-skip-dp-mlp-sync" in layout
