"""Launches over several nodes (kvplan.simulate.setup.node_span): the collectives that cross nodes
priced on the profile's inter-node network, hand-computed; the memory per GPU as TP 16 gives it;
the flags as the engines spell them, and the launches an engine could not place refused."""

from __future__ import annotations

import pytest

from kvplan.dtypes import resolve_kv_format
from kvplan.engines import EngineRequest
from kvplan.engines.vllm import vllm_allocation
from kvplan.errors import KvplanError
from kvplan.formulas.comm import (
    ring_allreduce_time_s,
    tp_allreduce_time_s,
    two_level_allgather_time_s,
)
from kvplan.formulas.expert_parallel import ep_alltoall_bytes_by_link, ep_alltoall_two_link_time_s
from kvplan.inputs.hardware import DEFAULT_NETWORK, load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import (
    ServeOptions,
    build_replica,
    node_span,
    parallel_layout,
    step_model,
)

from helpers import REPO, one_line_error, run_cli, run_json

H800 = load_profile("h800")
SMALL = ("--num-prompts", "8", "--input-len", "256", "--output-len", "16")


def test_two_level_allreduce_by_hand():
    """TP 16 over two 8-GPU nodes, 8 tokens of DeepSeek-V3's 7168-wide bf16 hidden state:
    M = 8 x 7168 x 2 = 114,688 B. Within the node a ring of 8 moves 2 x 7/8 x M at 200 GB/s one
    way in 14 hops of 2 us; across nodes each GPU's 1/8 shard (14,336 B) is all-reduced by a
    ring of 2 at 50 GB/s in 2 hops of 5 us."""
    m = 8 * 7168 * 2
    intra = 2 * 7 / 8 * 114_688 / 200e9 + 14 * 2e-6  # 1.00352 us + 28 us
    inter = 2 * 1 / 2 * 14_336 / 50e9 + 2 * 5e-6  # 0.28672 us + 10 us
    assert intra + inter == pytest.approx(39.29024e-6, rel=1e-12)
    got = tp_allreduce_time_s(m, 16, 8, 200e9, 2e-6, 50e9, 5e-6)
    assert got == pytest.approx(39.29024e-6, rel=1e-12)
    # a TP within one node is the plain ring, the network unused: TP 8 = 1.00352 + 28 us,
    # TP 4 = 2 x 3/4 x M / 200e9 + 6 x 2 us = 0.86016 + 12 us; no node size: one node
    for tp, node, expected in ((8, 8, 29.00352e-6), (4, 8, 12.86016e-6), (16, None, None)):
        got = tp_allreduce_time_s(m, tp, node, 200e9, 2e-6, 50e9, 5e-6)
        assert got == pytest.approx(
            expected or ring_allreduce_time_s(m, 16, 200e9, 2e-6), rel=1e-12
        )
        assert got == pytest.approx(ring_allreduce_time_s(m, tp, 200e9, 2e-6), rel=1e-12)
    assert ring_allreduce_time_s(m, 16, 200e9, 2e-6) == pytest.approx(
        2 * 15 / 16 * m / 200e9 + 30 * 2e-6
    )


def test_simulated_tp16_prices_its_allreduces_across_the_nodes():
    """The step model of TP 16 on two H800 nodes charges each all-reduce the two-level formula:
    the intra-node ring at the kernel tables' achieved NVLink rate and call latency, the
    network's part at the profile's 400G InfiniBand (50 GB/s one way, 5 us)."""
    spec = load_model("deepseek-v3")
    options = ServeOptions(tp=16, nnodes=2)
    notes: list = []
    fmt = resolve_kv_format("auto", spec.dtype)
    model, _ = step_model(spec, H800, options, "auto", 512, notes)
    assert model.node_gpus == 8 and model.network == H800.network
    assert H800.network is not None and H800.network.one_way_bytes_per_s == 50e9
    a = model.achieved
    nvlink = H800.interconnect.one_way_bytes_per_s * a.link
    m = 8 * spec.hidden_size * 2
    intra = 2 * 7 / 8 * m / nvlink + a.allreduce_call_s_at(8)  # 14 hops: one measured call
    inter = 2 * 1 / 2 * (m / 8) / 50e9 + 2 * 5e-6
    one = intra + inter
    assert one == pytest.approx(
        tp_allreduce_time_s(m, 16, 8, nvlink, a.allreduce_call_s_at(8) / 14, 50e9, 5e-6), rel=1e-12
    )
    assert model.tp_allreduce_s(8, 1) == pytest.approx(one, rel=1e-12)
    # two per layer and the vocab-parallel embedding's
    assert model.comm_s(8) == pytest.approx((2 * spec.num_layers + 1) * one, rel=1e-12)
    # the head's logits gathered over both nodes: each rank receives the other 15/16 of
    # 8 x vocab bf16; the 7 node-mates' over NVLink at one NCCL call, the other node's 8 shares
    # over the 8 GPUs' network links at one network latency
    received = 8 * spec.vocab_size * 2 * 15 / 16
    share = received / 15
    gather = 7 * share / nvlink + a.allgather_call_s + 8 * share / 8 / 50e9 + 5e-6
    assert model.logits_gather_s(8) == pytest.approx(gather, rel=1e-12)
    # the same TP 16 as if it were one NVLink domain is cheaper: the network is not NVLink
    flat = ring_allreduce_time_s(m, 16, nvlink, a.allreduce_call_s_at(16) / 30)
    assert model.tp_allreduce_s(8, 1) > flat
    assert any(n.id == "sim-multinode" for n in notes)
    assert fmt is not None


def test_dp_local_ep_alltoall_bytes_cross_nodes():
    """Kimi-K2 at -dp 16 --data-parallel-size-local 8 --enable-expert-parallel (TP 1): EP 16
    over two nodes. One token of a rank's sends 2 x 60 MoE layers x top-8 x 7168 x 2 B =
    13,762,560 B; of its 16 destinations 7 are node-mates and 8 on the other node."""
    spec = load_model("moonshotai/Kimi-K2-Instruct")
    assert (spec.moe.num_layers, spec.moe.top_k, spec.hidden_size) == (60, 8, 7168)
    intra, inter = ep_alltoall_bytes_by_link(spec, 1, 16, 8)
    assert intra == 13_762_560 * 7 / 16 == 6_021_120
    assert inter == 13_762_560 * 8 / 16 == 6_881_280
    options = ServeOptions(
        data_parallel_size=16, data_parallel_size_local=8, enable_expert_parallel=True
    )
    layout = parallel_layout(spec, options)
    assert (layout.ep, layout.gpus) == (16, 16)
    span = node_span(H800, options, layout)
    assert span is not None and (span.nodes, span.node_gpus) == (2, 8)
    model, _ = step_model(spec, H800, options, "auto", 512, [], "auto", layout)
    # the step's all-to-alls: the network's 6.88 MB at 50 GB/s outlasts NVLink's 6.02 MB,
    # plus 5 us per dispatch and combine in each of the 60 MoE layers
    want = 6_881_280 / 50e9 + 2 * 60 * 5e-6
    assert ep_alltoall_two_link_time_s(
        spec, 1, 16, 8, H800.interconnect.one_way_bytes_per_s, 50e9, 5e-6
    ) == pytest.approx(want, rel=1e-12)
    nvlink = H800.interconnect.one_way_bytes_per_s * model.achieved.link
    a2a = ep_alltoall_two_link_time_s(spec, 1, 16, 8, nvlink, 50e9, 5e-6)
    assert model.comm_s(1) == pytest.approx(a2a, rel=1e-12)  # TP 1: no all-reduce


def test_dp_attention_gather_across_nodes_by_hand():
    """SGLang --tp 16 --dp 2 --enable-dp-attention --nnodes 2: each DP rank is one node's TP 8.
    A rank receives the other's 3 tokens x 7168 x 2 B = 43,008 B per gather, all from the other
    node, spread over the node's 8 network links: 5,376 B at 50 GB/s plus one 5 us latency."""
    assert two_level_allgather_time_s(43_008, 2, 1, 8, 200e9, 2e-6, 50e9, 5e-6) == pytest.approx(
        5_376 / 50e9 + 5e-6, rel=1e-12
    )
    # within one node: the plain ring, received bytes over NVLink and (ranks - 1) latencies
    assert two_level_allgather_time_s(43_008, 2, 2, 16, 200e9, 2e-6, 50e9, 5e-6) == pytest.approx(
        43_008 / 200e9 + 2e-6, rel=1e-12
    )


def test_memory_per_gpu_is_tp16s():
    """DeepSeek-V3 at TP 16 over two nodes keeps the pool vLLM sizes at TP 16: each GPU a
    sixteenth of the weights and the whole MLA latent (61 layers x 576 values x 2 B a token),
    so a block of 16 tokens takes 61 x 16 x 576 x 2 = 1,124,352 B of every GPU."""
    spec = load_model("deepseek-v3")
    replica = build_replica(spec, H800, ServeOptions(tp=16, nnodes=2, max_model_len=32768))
    alloc = vllm_allocation(
        spec,
        H800,
        EngineRequest(engine="vllm", tp=16, max_model_len=32768, max_num_batched_tokens=8192),
    )
    assert replica.kv_cache_tokens == alloc.kv_cache_tokens
    assert alloc.block_size == 16
    assert alloc.num_blocks == alloc.available_kv_bytes // 1_124_352
    # on one node (TP 8) the weights alone overfill an H800: only TP 16's sixteenth fits
    with pytest.raises(KvplanError, match="no memory is left"):
        build_replica(spec, H800, ServeOptions(tp=8, max_model_len=32768))


def test_the_simulated_run_says_it_spans_nodes():
    doc = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--tp", "16", "--nnodes", "2",
        "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "5000", *SMALL,
    )  # fmt: skip
    setup = doc["setup"]
    assert (setup["nodes"], setup["node_gpus"], setup["num_gpus"]) == (2, 8, 16)
    assert setup["network"] == "400G InfiniBand NDR per GPU"
    assert "sim-multinode" in {n["id"] for n in doc["notes"]}
    one = run_json("simulate", "llama-3.1-8b", "--gpu", "h100", "--tp", "8", *SMALL)
    assert "nodes" not in one["setup"]  # one node: the JSON as before


def test_network_gbps_gives_the_link_between_the_nodes():
    doc = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--tp", "16", "--nnodes", "2",
        "--network-gbps", "200", *SMALL,
    )  # fmt: skip
    assert doc["setup"]["network"] == "200 Gb/s per GPU"
    assert doc["setup"]["network_bytes_per_s"] == pytest.approx(2 * 200e9 / 8)


def test_a_profile_without_a_network_uses_the_default_and_says_so(tmp_path):
    text = (REPO / "hardware_profiles" / "h800-sxm.yaml").read_text(encoding="utf-8")
    cut = text.split("\nnetwork:")[0] + "\n"
    path = tmp_path / "h800-no-network.yaml"
    path.write_text(cut.replace("name: H800 SXM", "name: H800 no network"))
    gpu = load_profile(str(path))
    assert gpu.network is None
    spec = load_model("deepseek-v3")
    options = ServeOptions(tp=16, nnodes=2)
    span = node_span(gpu, options, parallel_layout(spec, options))
    assert span is not None and span.assumed and span.network == DEFAULT_NETWORK
    notes: list = []
    step_model(spec, gpu, options, "auto", 512, notes)
    (multinode,) = [n for n in notes if n.id == "sim-multinode"]
    assert multinode.value("assumed") is True


@pytest.mark.parametrize(
    "args, named",
    [
        (("deepseek-v3", "--gpu", "h800", "--tp", "16"), "--nnodes 2"),
        (("deepseek-v3", "--gpu", "h800", "--tp", "16", "--nnodes", "1"), "holds 8"),
        (("llama-3.1-8b", "--gpu", "h100", "--tp", "8", "--nnodes", "3"), "split evenly"),
        (
            ("qwen3-30b-a3b", "--gpu", "h100", "-dp", "4", "-dpl", "3", "-ep"),
            "--data-parallel-size-local 3 must divide --data-parallel-size 4",
        ),
        (
            ("qwen3-30b-a3b", "--gpu", "h100", "-dp", "4", "-dpl", "2", "--nnodes", "4", "-ep"),
            "disagrees",
        ),
        (
            ("qwen3-30b-a3b", "--gpu", "h100", "--engine", "sglang", "--dp", "2", "-dpl", "1"),
            "vLLM's",
        ),
        (("llama-3.1-8b", "--gpu", "h100", "--tp", "16", "--nnodes", "2", "--node-rank", "2"), "0 to 1"),
        (("llama-3.1-8b", "--gpu", "h100", "--tp", "8", "--network-gbps", "200"), "--nnodes"),
        (
            ("llama-3.1-8b", "--gpu", "h100", "--tp", "16", "--nnodes", "2", "-dcp", "2"),
            "spans nodes",
        ),
    ],
)  # fmt: skip
def test_launches_the_engines_could_not_place_are_one_line_errors(args, named):
    code, _, err = run_cli("simulate", *args, *SMALL)
    one_line_error(code, err, named)


def test_plan_takes_the_nodes_and_prints_them_in_the_launch():
    code, out, err = run_cli(
        "plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--tp", "16", "--nnodes", "2", "--num-prompts", "30", "--input-len", "256",
        "--output-len", "16", "--price", "h100=2", "--jobs", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "--nnodes 2" in out
    code, _, err = run_cli(
        "plan", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "-dp", "4", "-dpl", "3", "-ep", "--price", "h100=2",
    )  # fmt: skip
    one_line_error(code, err, "must divide")


def test_tp8_pp2_over_two_nodes_hands_activations_over_the_network():
    """vLLM -tp 8 -pp 2 --nnodes 2 on H100s: each stage is one node's TP 8 (its all-reduces on
    NVLink), and the one stage boundary crosses the network: 4 tokens x 8192 x 2 B = 65,536 B at
    50 GB/s one way plus 5 us."""
    spec = load_model("llama-3.1-70b")
    h100 = load_profile("h100")
    model, _ = step_model(spec, h100, ServeOptions(tp=8, pp=2, nnodes=2), "auto", 512, [])
    assert model.pipeline_hops_s(4) == pytest.approx(65_536 / 50e9 + 5e-6, rel=1e-12)
    one, _ = step_model(spec, h100, ServeOptions(tp=4, pp=2), "auto", 512, [])
    nvlink = h100.interconnect.one_way_bytes_per_s * one.achieved.link
    assert one.pipeline_hops_s(4) == pytest.approx(65_536 / nvlink + 2e-6, rel=1e-12)
    # TP within the node: the same all-reduces as on one node
    alone, _ = step_model(spec, h100, ServeOptions(tp=8), "auto", 512, [])
    assert model.tp_allreduce_s(4, 1) == pytest.approx(alone.tp_allreduce_s(4, 1))


def test_roofline_and_the_comparison_price_tp16_over_two_nodes_in_two_levels():
    """roofline (and capacity --gpu's comparison, through decode_floor) prices a TP 16 group on
    8-GPU H800 nodes as simulate does, in two levels at the datasheet rates: one decode token of
    Llama-3.1-70B is M = 8192 x 2 = 16,384 B per all-reduce; within the node a ring of 8 at 200
    GB/s one way and 2 us a hop (2 x 7/8 x M / 200e9 + 14 x 2 us = 28.14336 us), across the
    two nodes each GPU's 2,048 B shard in a ring of 2 at 50 GB/s and 5 us (0.04096 + 10 us):
    38.18432 us, 2 x 80 layers of them and the embedding's one a step. Before, it was a flat ring of 16 over the
    network (2 x 15/16 x M / 50e9 + 30 x 5 us = 150.6144 us)."""
    from kvplan.plans.roofline import RooflineRequest, decode_floor, roofline

    spec = load_model("llama-3.1-70b")
    assert (spec.hidden_size, spec.num_layers) == (8192, 80)
    one = 2 * 7 / 8 * 16_384 / 200e9 + 14 * 2e-6 + 2 * 1 / 2 * 2_048 / 50e9 + 2 * 5e-6
    assert one == pytest.approx(38.18432e-6, rel=1e-12)
    assert tp_allreduce_time_s(16_384, 16, 8, 200e9, 2e-6, 50e9, 5e-6) == pytest.approx(one)
    request = RooflineRequest(contexts=(8192,), batches=(1,), tp=16)
    result = roofline(spec, H800, request)
    assert result.decode[0].comm_s == pytest.approx(161 * one, rel=1e-12)
    floor = decode_floor(spec, H800, 8192, 1, "auto", "auto", 16, 1, None)
    assert floor.time_floor_s == result.decode[0].time_floor_s
    told = next(n for n in result.notes if n.id == "roofline-tp")
    assert told.value("node_gpus") == 8 and told.value("network") == H800.network.name
    # TP 8 fits the node: the plain ring, no network term, as before
    within = roofline(spec, H800, request._replace(tp=8))
    ring = 2 * 7 / 8 * 16_384 / 200e9 + 14 * 2e-6
    assert within.decode[0].comm_s == pytest.approx(161 * ring, rel=1e-12)
    assert "node_gpus" not in dict(next(n for n in within.notes if n.id == "roofline-tp").values)


def test_the_tp_sweep_prices_tp_above_a_node_on_the_network():
    """tp_where_comm_dominates sweeps TP 2..64 with the same price: up to the node the
    interconnect alone (the network changes nothing), above it two levels (a slower network
    makes communication dominate at the first TP that spans nodes)."""
    from kvplan.inputs.hardware import Interconnect
    from kvplan.plans.roofline import tp_where_comm_dominates

    spec = load_model("llama-3.1-70b")
    fmt = resolve_kv_format("auto", spec.dtype)
    args = (spec, H800, 64, 8192, "bf16", fmt)
    at_ib = tp_where_comm_dominates(*args, 8)
    slow = H800._replace(network=Interconnect("1 Gb/s", 0.25e9, 1e-3))
    assert tp_where_comm_dominates(spec, slow, 64, 8192, "bf16", fmt, 8) == 16
    assert at_ib != 16
    # nodes of 64: every TP of the sweep within one node, the network unused
    assert tp_where_comm_dominates(spec, slow, 64, 8192, "bf16", fmt, 64) == (
        tp_where_comm_dominates(*args, 64)
    )
