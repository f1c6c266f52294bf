"""Deployments as engines run them: TP within a node, PP across nodes, DP attention with EP for
MoE models; the choice kvplan makes when none is given, and the numbers that cannot happen."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes, weights_bytes_per_gpu
from kvplan.inputs.hardware import bundled_profiles, load_profile
from kvplan.inputs.sources import bundled_models, load_model
from kvplan.plans.capacity import CapacityRequest, capacity, concurrency_curve
from kvplan.plans.deployment import Deployment, choose_deployment

from helpers import run_cli, run_json

GIB = 2**30


def cap(model: str, gpu: str, ctx: int, **layout):
    return capacity(
        load_model(model), load_profile(gpu), CapacityRequest(context_len=ctx, **layout)
    )


def test_dp_attention_weights_by_hand():
    """A DP-attention rank holds every weight but the routed experts, and 1/N of those:
    DeepSeek-V3 has 58 MoE layers x 256 experts x 3 matrices of 7168 x 2048."""
    spec = load_model("deepseek-v3")
    experts = 58 * 256 * 3 * 7168 * 2048
    assert spec.param_parts["experts"] == experts
    wdtype = resolve_weights_dtype(spec, "auto")[0]
    total = weight_bytes(spec, wdtype)
    expert_bytes = experts * (1 + 4 / 128**2)  # fp8 with an fp32 scale per 128 x 128 block
    got = weights_bytes_per_gpu(spec, wdtype, dp_attention=16)
    assert got == pytest.approx(total - expert_bytes + expert_bytes / 16, rel=1e-9)
    # under TP 16 the same GPU holds a sixteenth of everything
    assert weights_bytes_per_gpu(spec, wdtype, tp=16) == pytest.approx(total / 16)


def test_an_mla_latent_is_copied_by_tp_and_not_by_dp_attention():
    """DeepSeek-V3 on 16 H100s at 32k: TP 16 copies the latent to every rank; two stages of TP 8
    hold half the layers each (same weights per GPU, so about twice the sequences); DP attention
    holds different sequences on every rank."""
    tp16 = cap("deepseek-v3", "h100", 32768, tp=16)
    tp8pp2 = cap("deepseek-v3", "h100", 32768, tp=8, pp=2)
    dp16 = cap("deepseek-v3", "h100", 32768, dp_attention=16)
    assert tp16.kv_pool_bytes_per_gpu == pytest.approx(tp8pp2.kv_pool_bytes_per_gpu)
    latent = 61 * 576 * 2 * 32768  # bytes of one 32k sequence's latent, all layers
    assert tp16.max_concurrency == int(tp16.kv_pool_bytes_per_gpu // latent)
    assert tp8pp2.max_concurrency == int(tp8pp2.kv_pool_bytes_per_gpu // (latent * 31 / 61))
    per_rank = int(dp16.kv_pool_bytes_per_gpu // latent)
    assert dp16.max_concurrency == 16 * per_rank
    assert dp16.max_concurrency > 3 * tp8pp2.max_concurrency > 6 * tp16.max_concurrency / 2


def test_the_choice_for_deepseek_on_h100_is_dp_attention_over_two_nodes():
    data = run_json("capacity", "deepseek-v3", "--gpu", "h100", "--ctx", "32k")
    assert (data["dp_attention"], data["num_gpus"], data["nodes_per_replica"]) == (16, 16, 2)
    assert data["deployment_chosen_by"] == "most-users"
    chosen = next(n for n in data["notes"] if n["id"] == "deployment-chosen")["text"]
    assert "TP 8 x PP 2" in chosen and "DP attention 16" in chosen  # what else was weighed


def test_llama_70b_at_128k_on_h100_is_tp4():
    """At TP 2 the weights leave no room for one 128k sequence (hand: 70.55 GB of weights per
    GPU against 0.9 x 85.03 GB), at TP 4 three fit."""
    spec, h100 = load_model("llama-3.1-70b"), load_profile("h100")
    assert weights_bytes_per_gpu(spec, "bf16", tp=2) / 1e9 == pytest.approx(70.55, abs=0.01)
    fmt = resolve_kv_format("auto", spec.dtype)
    choice = choose_deployment(spec, h100, "bf16", fmt, 131072)
    assert choice.deployment == Deployment(4, 1, 1) and choice.chosen_by == "fewest-gpus"
    assert choice.users == cap("llama-3.1-70b", "h100", 131072, tp=4).max_concurrency == 3


@pytest.mark.parametrize(
    "gpu",
    ["h100", "h100-nvl"]
    + [pytest.param(g, marks=pytest.mark.slow) for g in ("h200", "a100", "l40s", "mi300x")],
)
def test_tensor_parallelism_never_leaves_the_node(gpu):
    profile = bundled_profiles()[load_profile(gpu).key]
    for model in sorted(bundled_models()):
        spec = load_model(model)
        if not spec.attention_layers():
            continue
        try:
            r = capacity(spec, profile, CapacityRequest(context_len=8192))
        except Exception as exc:  # a model no deployment holds says so
            assert "does not fit" in str(exc), model
            continue
        assert r.tp <= profile.gpus_per_node, (model, r.tp)
        # a model too large for every layout searched (Qwen3.8-2.4T's 4.8 TB of bf16 weights on
        # 32 H100 NVL) is shown on one GPU, saying so
        assert r.fits or "deployment-none-fits" in {n.id for n in r.notes}, model


def test_a_profile_without_node_size_gets_eight_and_a_note(tmp_path):
    import kvplan.hardware_profiles as package

    source = Path(package.__path__[0]) / "h100-sxm.yaml"
    lines = source.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "nonode.yaml"
    path.write_text("\n".join(x for x in lines if not x.startswith("gpus_per_node")))
    data = run_json("capacity", "llama-3.1-70b", "--gpu", str(path), "--ctx", "8k")
    assert any(n["id"] == "node-size-assumed" for n in data["notes"])
    assert (data["tp"], data["gpus_per_node"]) == (2, 8)


@pytest.mark.parametrize(
    "argv,words",
    [
        (["capacity", "llama-3.1-8b", "--dp-attention", "4"], "mixture-of-experts"),
        (["capacity", "deepseek-v3", "--dp-attention", "8", "--tp", "2"], "TP 1"),
        (["capacity", "llama-3.1-70b", "--tp", "4", "--num-gpus", "6"], "multiple"),
    ],
)
def test_impossible_layouts_are_one_line_errors(argv, words):
    code, out, err = run_cli(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_a_model_no_layout_holds_is_answered_on_one_gpu_with_the_reason():
    data = run_json("capacity", "llama-3.1-405b", "--gpu", "m1-max-64gb", "--ctx", "128k", expect=1)
    assert (data["fits"], data["max_concurrency"], data["num_gpus"]) == (False, 0, 1)
    reason = next(n["text"] for n in data["notes"] if n["id"] == "deployment-none-fits")
    assert "does not fit on Apple M1 Max" in reason and "Shown on one GPU" in reason


def test_roofline_marks_batches_the_memory_cannot_hold():
    """70B at TP 4 and 128k: three sequences fit (capacity), so batch 8 and 64 cannot run."""
    data = run_json(
        "roofline", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k",
        "--batch", "1,8,64",
    )  # fmt: skip
    fits = {row["batch_size"]: (row["fits"], row["max_batch"]) for row in data["decode"]}
    assert fits == {1: (True, 3), 8: (False, 3), 64: (False, 3)}
    assert any(n["id"] == "roofline-rows-overflow" for n in data["notes"])


def test_contexts_past_the_positions_are_flagged_or_left_out():
    spec, h100 = load_model("llama-3.1-8b"), load_profile("h100")
    curve = concurrency_curve(spec, h100, CapacityRequest(), [2**k for k in range(10, 21)])
    assert max(c for c, _ in curve["bf16"]) == 131072  # the 1M point cannot happen
    size = run_json("size", "llama-3.1-8b", "--ctx", "128k,1m")
    assert [r["beyond_positions"] for r in size["rows"]] == [False, True]
    assert any(n["id"] == "ctx-beyond-positions" for n in size["notes"])
    longest = run_json("capacity", "llama-3.1-8b", "--gpu", "h200")["longest_context"][0]
    assert longest["max_context_len"] == 131072 < longest["memory_context_len"]


def test_emit_launches_the_chosen_deployment():
    code, out, _ = run_cli(
        "capacity", "deepseek-v3", "--gpu", "h100", "--ctx", "32k", "--emit", "vllm"
    )
    assert code == 0 and "vllm serve deepseek-ai/DeepSeek-V3" in out
    assert "--data-parallel-size 16" in out and "--enable-expert-parallel" in out
    assert "--tensor-parallel-size" not in out
    code, out, _ = run_cli(
        "capacity", "deepseek-v3", "--gpu", "h100", "--ctx", "32k", "--emit", "sglang"
    )
    assert "--enable-dp-attention" in out and "--dp-size 16" in out


def test_layout_notes_carry_the_deployment_and_the_presenter_words_it():
    """A plan's note holds the layout as a Deployment (numbers), not as text it formatted; the
    note's words name it as every presenter does."""
    from kvplan.notes import Note
    from kvplan.present.notes import note_text

    chosen = cap("llama-3.1-70b", "h100", 32768, num_gpus=16)
    given = cap("llama-3.1-70b", "h100", 32768, num_gpus=16, tp=4)
    layouts = {n.id: n.value("layout") for n in chosen.notes + given.notes}
    assert layouts["deployment-on-gpus"] == Deployment(8, 2)
    assert layouts["capacity-replicas"] == Deployment(4)
    for n in chosen.notes + given.notes:
        for _, value in n.values:
            assert not isinstance(value, str) or "TP " not in value, (n.id, value)
    replicas = next(n for n in given.notes if n.id == "capacity-replicas")
    assert note_text(replicas) == "16 GPUs = 4 replicas of TP 4; concurrency summed over replicas."
    assert note_text(
        Note("gpus-idle", (("num_gpus", 6), ("used", 4), ("layout", Deployment(2, 2))))
    ) == ("2 of the 6 GPUs stay idle: replicas of TP 2 x PP 2 use 4.")
