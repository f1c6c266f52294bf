"""Expert parallelism and DP attention in `kvplan simulate` (kvplan.simulate.setup
parallel_layout, the EP/DP terms of formulas.batch_step.StepModel)."""

from __future__ import annotations

import json
from itertools import accumulate

import pytest

from kvplan.anatomy.model import pp_stages
from kvplan.dtypes import resolve_kv_format
from kvplan.engines.vllm_memory import weights_per_rank
from kvplan.formulas.batch_step import BatchShape, StepModel, lockstep_step, shape_tokens
from kvplan.formulas.expert_parallel import ep_alltoall_bytes
from kvplan.formulas.step_time import Rates
from kvplan.formulas.weights import expert_weight_bytes, weight_bytes_read_per_decode_step
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate import cluster
from kvplan.simulate.engine import Engine, EngineConfig
from kvplan.simulate.frontend import Frontend
from kvplan.simulate.setup import ParallelLayout, ServeOptions, parallel_layout
from kvplan.simulate.sglang import SglangEngine
from kvplan.simulate.workload import RequestSpec

from helpers import run_cli, run_json

SMALL = ("--num-prompts", "8", "--input-len", "512", "--output-len", "32")


def model(spec, **kw) -> StepModel:
    gpu = load_profile("h200")
    fmt = resolve_kv_format("auto", spec.dtype)
    rates = Rates(gpu.memory_bandwidth_bytes_per_s, gpu.peak(spec.dtype))
    return StepModel(spec, rates, "bf16", fmt, link=gpu.interconnect, **kw)


def test_ep_alltoall_bytes_of_a_tiny_moe_by_hand():
    spec = load_model("deepseek-v2-lite")  # 26 MoE layers, top-6 of 64, hidden 2048
    assert (spec.moe.num_layers, spec.moe.top_k, spec.hidden_size) == (26, 6, 2048)
    # dispatch + combine, 16 tokens, each to 6 experts, bf16 hidden states
    assert ep_alltoall_bytes(spec, 16) == 2 * 26 * 16 * 6 * 2048 * 2 == 20_447_232
    # the EP step's comm is that formula's share bound for the other 7 ranks over the link,
    # plus one latency per all-to-all; at TP 1 there is no all-reduce left
    m = model(spec, tp=1, moe_ranks=8, ep=8)
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    expected = 20_447_232 * 7 / 8 / one_way + 2 * 26 * link.latency_s
    assert m.comm_s(16) == pytest.approx(expected, rel=1e-12)


def test_expert_weights_per_rank_with_ep_8_on_256_experts():
    spec = load_model("deepseek-v3")
    assert spec.moe.num_experts == 256
    stage = pp_stages(spec, 1)[0]
    whole = weights_per_rank(spec, stage, True, True, "fp8", 1).total_bytes
    ep8 = weights_per_rank(spec, stage, True, True, "fp8", 1, None, 8).total_bytes
    experts = expert_weight_bytes(spec, "fp8")
    # a rank keeps 32 of the 256 experts: 7/8 of the experts' bytes leave it
    assert whole - ep8 == pytest.approx(experts * 7 / 8, rel=1e-9)
    # a one-token step reads 8 experts per MoE layer in all, 1/8 of them on average per rank
    m = model(spec, tp=1, moe_ranks=8, ep=8, dp=1)
    touched = weight_bytes_read_per_decode_step(spec, "bf16", 1) - (
        weight_bytes_read_per_decode_step(spec._replace(moe=None), "bf16", 1)
        - expert_weight_bytes(spec, "bf16")
    )
    # one expert of every MoE layer, in bf16 here: twice fp8's byte per parameter
    per_expert = experts / 256 * 2
    assert touched == pytest.approx(8 * per_expert, rel=1e-3)
    assert m.weights_bytes(1)[1] == pytest.approx(touched / 8, rel=1e-12)


def test_dp_attention_splits_8_requests_over_4_ranks_and_steps_at_the_slowest():
    data = run_json(
        "simulate", "deepseek-v2-lite", "--gpu", "h200", "--engine", "sglang", "--tp", "4",
        "--dp-size", "4", "--enable-dp-attention", "--request-rate", "inf", *SMALL,
    )  # fmt: skip
    assert [r["requests"] for r in data["runs"][0]["engine"]["replicas"]] == [2, 2, 2, 2]
    assert data["setup"]["num_gpus"] == 4
    # SGLang divides --max-running-requests among the DP-attention ranks
    data = run_json(
        "simulate", "deepseek-v2-lite", "--gpu", "h200", "--engine", "sglang", "--tp", "4",
        "--dp-size", "4", "--enable-dp-attention", "--max-running-requests", "64", *SMALL,
    )  # fmt: skip
    assert data["setup"]["max_num_seqs"] == 16
    # one lockstep step: the MoE layers see all 8 tokens on every rank; the group waits
    spec = load_model("deepseek-v2-lite")
    m = model(spec, tp=1, moe_ranks=4, dp=4)
    even = [BatchShape(2, 2 * 600.0, (), 2)] * 4
    step, _ = lockstep_step(m, even)
    assert step == m.step(even[0], 8) == m.step(even[0])  # balanced: dp x own tokens
    uneven = [BatchShape(1, 600.0, (), 1), BatchShape(3, 3 * 9000.0, (), 3)] * 2
    step, slowest = lockstep_step(m, uneven)
    assert slowest == 1
    assert step.total_s == max(m.step(s, 8).total_s for s in uneven) > m.step(uneven[0], 8).total_s
    # without EP the MoE layers' gather and reduce-scatter are charged: 3 other ranks' tokens
    gather = 2 * 26 * 3 * 2 * 2048 * 2
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    assert m.comm_s(2) == pytest.approx(gather / one_way + 2 * 26 * 3 * link.latency_s)


def test_layouts_of_the_engines_spellings():
    v3 = load_model("deepseek-v3")
    vllm = parallel_layout(
        v3, ServeOptions(tp=8, data_parallel_size=2, enable_expert_parallel=True)
    )
    assert vllm == ParallelLayout(8, 2, 16, 16, 16, 1, "least_outstanding")
    sgl = parallel_layout(
        v3,
        ServeOptions(
            engine="sglang", tp=8, data_parallel_size=4, enable_dp_attention=True, ep_size=8
        ),
    )
    assert sgl == ParallelLayout(2, 4, 8, 8, 8, 1, "round_robin")
    dense = parallel_layout(load_model("llama-3.1-8b"), ServeOptions(data_parallel_size=3))
    assert (dense.modelled, dense.dp_replicas) == (False, 3)


@pytest.mark.parametrize(
    "argv, words",
    [
        (("deepseek-v2-lite", "--engine", "sglang", "--tp", "4", "--ep-size", "3"), "must divide"),
        (
            (
                "deepseek-v2-lite",
                "--engine",
                "sglang",
                "--tp",
                "8",
                "--ep-size",
                "8",
                "--dp-size",
                "3",
                "--enable-dp-attention",
            ),
            "--dp-size 3 must divide --tp 8",
        ),  # fmt: skip
        (
            ("deepseek-v2-lite", "--tp", "2", "-dp", "3", "--enable-expert-parallel"),
            "EP 6 must divide",
        ),  # fmt: skip
        (("llama-3.1-8b", "--enable-expert-parallel"), "no routed experts"),
        (("deepseek-v2-lite", "-dp", "2", "--enable-dp-attention"), "is SGLang's"),
        (("deepseek-v2-lite", "--ep-size", "2"), "is SGLang's"),
        (("deepseek-v2-lite", "--engine", "sglang", "--enable-expert-parallel"), "is vLLM's"),
        (("deepseek-v2-lite", "-dp", "2", "--replicas", "2"), "not both"),
        (
            (
                "deepseek-v2-lite",
                "--engine",
                "sglang",
                "--tp",
                "2",
                "--dp",
                "2",
                "--load-balance-method",
                "minimum_tokens",
            ),
            "round_robin",
        ),  # fmt: skip
    ],
)
def test_bad_layouts_exit_2_with_one_line(argv, words):
    code, out, err = run_cli("simulate", *argv, "--gpu", "h200", *SMALL)
    assert code == 2, err
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_json_states_the_layout_and_its_note():
    data = run_json(
        "simulate", "deepseek-v2-lite", "--gpu", "h200", "--tp", "2", "-dp", "4",
        "--enable-expert-parallel", *SMALL,
    )  # fmt: skip
    assert data["parallel"]["text"] == "DP attention 4 x TP 2 + EP 8"
    assert (data["parallel"]["dp"], data["parallel"]["ep"]) == (4, 8)
    assert data["setup"]["num_gpus"] == 8 and data["setup"]["replicas"] == 4
    assert "sim-expert-parallel" in [n["id"] for n in data["notes"]]


def test_without_the_options_no_layout_in_the_json():
    data = run_json("simulate", "deepseek-v2-lite", "--gpu", "h200", *SMALL)
    assert "parallel" not in data
    assert "sim-expert-parallel" not in [n["id"] for n in data["notes"]]


def test_plan_passes_the_options_through():
    argv = ("plan", "deepseek-v2-lite", "--gpu", "h200", "--rate", "20", "--slo", "tpot_p99=50ms",
            "--tp", "1", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
            "--kv-cache-dtype", "fp8", "--num-prompts", "60", "--price", "h200=3", "--jobs", "1")  # fmt: skip
    plain = run_json(*argv)
    data = run_json(*argv, "-dp", "2", "--enable-expert-parallel")
    assert "parallel_flags" not in plain
    assert data["parallel_flags"] == "--data-parallel-size 2 --enable-expert-parallel"
    best = data["candidates"][0]
    assert best["num_gpus"] == 2 * best["replicas"]  # TP 1 x DP 2 GPUs a replica
    assert best["command"].endswith("--data-parallel-size 2 --enable-expert-parallel")
    assert "plan-parallel" in [n["id"] for n in data["notes"]]


def test_plan_refuses_a_layout_no_tp_could_run():
    code, _, err = run_cli(
        "plan", "llama-3.1-8b", "--gpu", "h200", "--rate", "5", "--slo", "tpot_p99=50ms",
        "--price", "h200=3", "--enable-expert-parallel",
    )  # fmt: skip
    assert code == 2 and "no routed experts" in err and len(err.strip().splitlines()) == 1


def test_under_attention_tp_each_rank_dispatches_its_share_of_the_tokens():
    """TP 4 + EP 4, 16 tokens: attention's all-reduce in all 27 layers, the MLP's in the one
    dense layer and the embedding's stay; the 26 MoE layers' become all-to-alls of each rank's
    4 tokens."""
    spec = load_model("deepseek-v2-lite")
    m = model(spec, tp=4, moe_ranks=4, ep=4)
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    # the attention TP group's all-reduces: the engine's, as its table times 64 KB at 4 GPUs
    allreduce = (2 * 27 + 1 - 26) * m.achieved.allreduce_s(16 * 2048 * 2, 4)
    alltoall = (2 * 26 * 4 * 6 * 2048 * 2) * 3 / 4 / one_way + 2 * 26 * link.latency_s
    assert m.comm_s(16) == pytest.approx(allreduce + alltoall, rel=1e-12)


def test_sglang_ep_without_dp_attention_sums_the_experts_with_the_tp_all_reduce():
    """SGLang's --ep-size without DP attention or --moe-a2a-backend: every TP rank holds all 16
    tokens, runs its own experts on them, and the layer's TP all-reduce sums the partial
    outputs: 2 x 27 all-reduces of 16 x 2048 x 2 B and the embedding's, as TP alone, and no
    all-to-all."""
    spec = load_model("deepseek-v2-lite")
    sglang = model(spec, tp=4, moe_ranks=4, ep=4, sglang_collectives=True)
    allreduce = (2 * 27 + 1) * sglang.achieved.allreduce_s(16 * 2048 * 2, 4)
    assert sglang.comm_s(16) == pytest.approx(allreduce, rel=1e-12)
    assert sglang.comm_s(16) == pytest.approx(model(spec, tp=4).comm_s(16), rel=1e-12)
    assert model(spec, tp=4, moe_ranks=4, ep=4).comm_s(16) != pytest.approx(allreduce)


def test_sglang_dp_attention_without_dp_size_runs_as_plain_tp():
    """SGLang turns DP attention off at --dp-size 1 (server_args._handle_data_parallelism):
    the flag alone is taken as written and runs the plain TP layout, with a note (published
    runs launch it so)."""
    argv = ("deepseek-v2-lite", "--engine", "sglang", "--tp", "2", "--gpu", "h200", *SMALL)
    code, out, err = run_cli("simulate", *argv, "--enable-dp-attention", "--format", "json")
    assert code == 0, err
    alone = json.loads(out)
    code, out, err = run_cli("simulate", *argv, "--format", "json")
    plain = json.loads(out)
    assert alone["runs"][0]["bench"] == plain["runs"][0]["bench"]
    ids = {n["id"] for n in alone["notes"]}
    assert "sim-dp-attention-off" in ids and "sim-expert-parallel" not in ids


def test_two_dp_ranks_step_together_at_the_slower_ranks_time():
    """cluster.Lockstep by hand: rank 0 serves a 100-token prompt, rank 1 a 100,000-token one,
    4 outputs each. Every step both ranks' requests advance (the prefills in step 0, one token
    each in steps 1-3), and each step lasts as long as the slower rank's forward with the MoE
    layers over both ranks' tokens (its all-gather and reduce-scatter included), the other
    rank waiting for it."""
    spec = load_model("deepseek-v2-lite")
    m = model(spec, tp=1, moe_ranks=2, dp=2)
    cfg = EngineConfig(8, 1 << 17, 1 << 17, 8192, 16)
    ranks = [Engine(cfg, m, 0.0) for _ in range(2)]
    requests = [RequestSpec(0, 0.0, 100, 4), RequestSpec(1, 0.0, 100_000, 4)]
    run = cluster.run(requests, ranks, lockstep=2, frontend=Frontend(0.0, 0.0))
    shapes = [  # (rank 0's, rank 1's) shape of each step
        (BatchShape(0, 0, ((100, 0),), 1), BatchShape(0, 0, ((100_000, 0),), 1))
    ] + [(BatchShape(1, 100 + k, (), 1), BatchShape(1, 100_000 + k, (), 1)) for k in (1, 2, 3)]
    gathered = [100_100, 2, 2, 2]  # the tokens each step's MoE layers see on both ranks
    expected = [
        max(m.step(a, g).total_s, m.step(b, g).total_s)
        for (a, b), g in zip(shapes, gathered, strict=True)
    ]
    for (a, b), g, t in zip(shapes, gathered, expected, strict=True):
        # the long-context rank is the slower one; its time includes the gather's comm
        assert t == m.step(b, g).total_s > m.step(a, g).total_s
        assert m.step(b, g).terms_s["comm_s"] == pytest.approx(m.comm_s(shape_tokens(b)))
    for rank in ranks:
        assert rank.log.duration_s == pytest.approx(expected, rel=1e-12)
        assert rank.log.end_s == pytest.approx(list(accumulate(expected)), rel=1e-12)
        assert rank.log.emitted == [1, 1, 1, 1]  # one token a step on each rank
    assert sorted(
        (r.rid, r.replica, r.first_step, r.last_step, r.outputs) for r in run.finished
    ) == [
        (0, 0, 0, 3, 4),
        (1, 1, 0, 3, 4),
    ]
    # apart, rank 0's decode steps would take its own (shorter) time
    alone = cluster.run(
        [RequestSpec(0, 0.0, 100, 4)], [Engine(cfg, m, 0.0)], frontend=Frontend(0.0, 0.0)
    )
    assert alone.engines[0].log.end_s[-1] < ranks[0].log.end_s[-1]


def test_the_engines_lockstep_rules():
    """How a DP-attention group runs a step (Engine.lockstep_rules): (eagerly, MoE tokens
    padded to the largest rank's). vLLM: the CUDA-graph mode is the minimum over the ranks (one
    rank past the largest graph runs all eagerly), under graphs every rank padded to the
    largest count. SGLang: an extend batch on any rank runs all eagerly, its gather summed;
    a decode step pads to the largest where 2 x sum > ranks x max (MAX_LEN)."""
    m = model(load_model("deepseek-v2-lite"), tp=1, moe_ranks=2, dp=2)
    cfg = EngineConfig(8, 8192, 4096, 1024, 16)
    prefill, small_prefill = BatchShape(0, 0, ((600, 0),), 1), BatchShape(0, 0, ((64, 0),), 1)
    decodes = [BatchShape(n, 100.0 * n, (), n) for n in (1, 3, 4, 10)]
    vllm = Engine(cfg, m, 0.0)
    assert m.cuda_graph_max_tokens == 512
    assert vllm.lockstep_rules([prefill, decodes[0]]) == (True, False)  # 600 > 512
    assert vllm.lockstep_rules([small_prefill, decodes[0]]) == (False, True)
    assert vllm.lockstep_rules([decodes[1], BatchShape()]) == (False, True)
    sglang = SglangEngine(cfg, m, 0.0)
    assert sglang.lockstep_rules([small_prefill, decodes[0]]) == (True, False)
    assert sglang.lockstep_rules([decodes[2], decodes[2]]) == (False, True)  # 16 > 8
    assert sglang.lockstep_rules([decodes[3]] + [BatchShape()] * 3) == (False, False)  # 26 < 40
    # priced: padded, the MoE layers see 2 x 3 tokens; an idle rank's dummy adds its token
    assert lockstep_step(m, [decodes[1], decodes[0]], 0, True)[0] == m.step(decodes[1], 6)
    assert lockstep_step(m, [decodes[1]], 1, False)[0] == m.step(decodes[1], 4)
    # eagerly: every layer's kernels dispatched from the CPU at their measured host cost and
    # each layer the rest of the reference layer's constant (HostOverheads.launch_s); by hand,
    # 27 MLA layers, one dense (15 kernels), 26 MoE with a shared expert (23)
    eager = m.without_graphs()
    launches = 15 + 26 * 23
    h = m.host
    assert eager.step(decodes[0], 2).terms_s["launch_s"] == pytest.approx(
        27 * (h.eager_per_layer_s - 10 * h.eager_per_launch_s) + launches * h.eager_per_launch_s
    )
    assert m.step(decodes[0], 2).terms_s["launch_s"] == pytest.approx(
        m.host.per_layer_s / 10 * launches
    )


def test_sglang_dp_attention_gathers_before_every_layer_by_its_padding_mode():
    """SGLang's DP attention (dp_attention.py, communicator.py; no --moe-a2a-backend): every
    layer's MLP (DeepSeek-V2-Lite: 1 dense + 26 MoE = 27) runs on the buffer gathered over the
    4 GPUs. A prefill step, or unbalanced decodes (SUM_LEN): the summed rows all-reduced before
    the MLP and its output all-reduced after, two ring all-reduces of G x 2048 x 2 B per layer.
    Balanced decodes (MAX_LEN, padded to the largest rank): all-gather then reduce-scatter of
    the padded buffer, each GPU receiving the other 3 slices. vLLM's gather (the MoE layers
    alone, the rank's own tokens) is unchanged."""
    spec = load_model("deepseek-v2-lite")
    assert (spec.num_layers, spec.moe.num_layers, spec.hidden_size) == (27, 26, 2048)
    m = model(spec, tp=1, moe_ranks=4, dp=4, sglang_collectives=True)
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    call = m.achieved.allreduce_call_s
    # SUM_LEN, 100 tokens summed over the ranks: 2 x 27 all-reduces of 409,600 B, each the
    # engine's all-reduce as its table times that size at 4 GPUs
    message = 100 * 2048 * 2
    allreduce = m.achieved.allreduce_s(message, 4)
    assert m.comm_s(40, 100) == pytest.approx(2 * 27 * allreduce, rel=1e-12)
    # MAX_LEN, 4 ranks padded to 40: each GPU receives 3 x 40 rows in the gather and sends as
    # many in the reduce-scatter, (4 - 1) latencies each
    padded = 2 * 27 * (3 * 40 * 2048 * 2 / one_way + 3 * link.latency_s)
    assert m.comm_s(40, 160, padded=True) == pytest.approx(padded, rel=1e-12)
    # the step carries it, and a lockstep step of balanced decodes is priced padded; the head's
    # collectives beside it (logits_processor, SUM_LEN of the 160 sampled rows, never padded):
    # their hidden states all-reduced over the 4 GPUs, then the logits (vocab / 4 columns a GPU)
    # all-gathered, each GPU receiving 3/4 of 160 x 102,400 x 2 B
    decodes = [BatchShape(40, 4000.0, (), 40)] * 4
    step, _ = lockstep_step(m, decodes, 0, True)
    assert spec.vocab_size == 102_400
    gather_call = m.achieved.allgather_call_s or call
    head = m.achieved.allreduce_s(160 * 2048 * 2, 4) + (
        160 * 102_400 * 2 * 3 / 4 / one_way + gather_call
    )
    assert step.terms_s["comm_s"] == pytest.approx(padded + head, rel=1e-12)
    # vLLM's rule on the same layout: the 26 MoE layers' gather of the rank's 40 tokens
    v = model(spec, tp=1, moe_ranks=4, dp=4)
    vllm = 2 * 26 * (3 * 40 * 2048 * 2 / one_way + 3 * link.latency_s)
    assert v.comm_s(40, 160, padded=True) == v.comm_s(40) == pytest.approx(vllm, rel=1e-12)


def test_sglang_dp_attention_divides_the_chunk_and_the_conservativeness():
    """server_args._handle_data_parallelism with --enable-dp-attention: chunked_prefill_size
    // dp_size (8,192 on an H200 -> 1,024 a rank at --dp 8) and schedule_conservativeness x 0.3
    (new_token_ratio from 0.7 x 0.3 = 0.21); its StepModel gathers before every layer."""
    from kvplan.simulate.setup import build_replica

    spec = load_model("deepseek-v2-lite")
    gpu = load_profile("h200")
    base = dict(engine="sglang", tp=8)
    plain = build_replica(spec, gpu, ServeOptions(**base))
    dp = build_replica(
        spec, gpu, ServeOptions(**base, data_parallel_size=8, enable_dp_attention=True)
    )
    assert plain.config.max_num_batched_tokens == 8192
    assert dp.config.max_num_batched_tokens == 8192 // 8 == 1024
    assert plain.policy.init_new_token_ratio == pytest.approx(0.7)
    assert dp.policy.init_new_token_ratio == pytest.approx(0.21)
    assert dp.model.dp_gather_full and not plain.model.dp_gather_full
    given = build_replica(
        spec,
        gpu,
        ServeOptions(
            **base, data_parallel_size=4, enable_dp_attention=True, max_num_batched_tokens=4096
        ),
    )
    assert given.config.max_num_batched_tokens == 1024
