"""Roofline: the seed's Llama-3.1-70B-on-H100 numbers, and where kvplan's accounting differs."""

from __future__ import annotations

import pytest

from kvplan.anatomy.model import MoE
from kvplan.dtypes import KvFormat
from kvplan.formulas.flops import (
    causal_keys_attended,
    flops_per_decode_token,
    matmul_params,
    prefill_flops,
)
from kvplan.formulas.roofline import ridge_flop_per_byte
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.roofline import RooflineRequest, roofline
from kvplan.present.view import jsonable

from helpers import run_cli, run_json

BF16 = KvFormat("bf16")


@pytest.fixture(scope="module")
def seed():
    spec = load_model("llama-3.1-70b")
    report = roofline(
        spec, load_profile("h100"), RooflineRequest(contexts=(8192,), batches=(1,), tp=1)
    )
    return spec, jsonable(report)


def test_ridge_is_295(seed):
    assert round(seed[1]["gpu"]["ridge_flop_per_byte"]) == 295  # 989.4e12 / 3.35e12


def test_decode_batch1_intensity_and_tpot(seed):
    decode = seed[1]["decode"][0]
    assert decode["arithmetic_intensity_flop_per_byte"] == pytest.approx(1.13, abs=0.005)
    # seed: 43 ms (1.44e11 B / 3.35e12). kvplan streams every weight except the input-embedding
    # table (1.05e9 params: only one row is looked up), so 42.3 ms: 1.5% lower.
    assert decode["time_floor_s"] == pytest.approx(0.0423, abs=0.0002)
    spec = seed[0]
    table_bytes = spec.param_parts["embedding"] * 2
    seed_bytes = spec.params_total * 2 + 8192 * 327_680
    assert decode["bytes"] == pytest.approx(seed_bytes - table_bytes + 8192 * 2, rel=1e-9)
    assert decode["bound"] == "memory"


def test_ceiling_asymptote_and_critical_context(seed):
    data = seed[1]
    assert data["ceiling_tokens_per_s"] == pytest.approx(1248, abs=1)  # 3.35e12 / 2.68e9
    assert data["asymptotic_intensity_flop_per_byte"] == pytest.approx(59.8, abs=0.1)  # seed ~60
    # seed: s* ~ 1,500 (2P / (I* k - 4 L d)); kvplan's P excludes the lookup table: 1,476
    assert data["critical_context_len"] == pytest.approx(1500, rel=0.02)


def test_batch_equal_is_half_the_ceiling(seed):
    spec, data = seed
    # seed: 52.6 = 2P/(s k) with P counting the embedding table that decode does not stream;
    # kvplan's 51.8 is the batch at which KV reads equal the weights actually read (1.5% lower)
    assert data["batch_equal_reads"] == pytest.approx(51.8, abs=0.1)
    streamed = (spec.params_total - spec.param_parts["embedding"]) * 2
    assert data["batch_equal_reads"] == pytest.approx(streamed / (8192 * 327_680), rel=1e-3)


def test_prefill_differs_from_the_seed_by_causal_attention_and_the_lookup_table(seed):
    spec, data = seed
    pre = data["prefill"]
    n, layers, d_model = 8192, 80, 8192
    seed_flops = n * (2 * spec.params_total + 4 * layers * d_model * n)  # the seed's count
    assert seed_flops / 989.4e12 == pytest.approx(1.35, abs=0.01)  # the seed's TTFT floor
    # kvplan: causal half of the n x n scores, no FLOPs for the embedding lookup, and the head
    # over the last position only (the engines compute that one's logits)
    head = spec.param_parts["lm_head"]
    assert head == 128_256 * d_model
    ours = 2 * (matmul_params(spec) - head) * n + 2 * head
    ours += 2 * 64 * 256 * layers * n * (n + 1) // 2
    assert pre["flops"] == ours == prefill_flops(spec, n)
    assert pre["time_floor_s"] == pytest.approx(1.22, abs=0.005)  # 9.5% below the seed's 1.35
    # the seed's ~9,000 FLOP/B; kvplan's FLOPs as above over the weights read and the KV written
    assert pre["arithmetic_intensity_flop_per_byte"] == pytest.approx(8528, rel=0.001)
    assert pre["arithmetic_intensity_flop_per_byte"] == pytest.approx(9000, rel=0.06)
    assert pre["bound"] == "compute"


def test_decode_flops_per_token_is_the_seed_formula_less_the_lookup():
    spec = load_model("llama-3.1-70b")
    seed_f = 2 * spec.params_total + 4 * 80 * 8192 * 8192
    assert flops_per_decode_token(spec, 8192) == seed_f - 2 * spec.param_parts["embedding"]


@pytest.mark.parametrize(
    "n,window,chunked,expected",
    [
        (5, None, False, 15),
        (5, 3, False, 1 + 2 + 3 + 3 + 3),
        (5, 2, True, 1 + 2 + 1 + 2 + 1),
        (1, None, False, 1),
    ],
)
def test_causal_keys(n, window, chunked, expected):
    assert causal_keys_attended(n, window, chunked) == expected


def test_moe_expected_experts():
    moe = MoE(num_experts=8, top_k=2, params_per_expert=1, num_layers=1)
    assert moe.expected_experts_touched(1) == pytest.approx(2)
    assert moe.expected_experts_touched(2) == pytest.approx(8 * (1 - 0.75**2))
    assert moe.expected_experts_touched(10_000) == pytest.approx(8)


def test_moe_decode_reads_fewer_weights_at_batch_1():
    spec = load_model("mixtral-8x7b")
    data = roofline(
        spec, load_profile("h100"), RooflineRequest(contexts=(1024,), batches=(1, 512), tp=1)
    )
    data = jsonable(data)
    b1, b512 = data["decode"]
    assert b1["bytes"] < 0.35 * spec.params_total * 2  # 2 of 8 experts
    assert b512["bytes"] > spec.params_total * 2 * 0.95  # every expert touched
    assert any("E*(1-(1-k/E)^B)" in n for n in (x["text"] for x in data["notes"]))


def test_h200_has_the_h100_compute_and_a_lower_ridge():
    h100, h200 = load_profile("h100"), load_profile("h200")
    assert h200.peak("bf16") == h100.peak("bf16")
    ridges = [
        ridge_flop_per_byte(g.peak("bf16"), g.memory_bandwidth_bytes_per_s) for g in (h100, h200)
    ]
    assert ridges[1] < ridges[0]


def test_json_contract():
    data = run_json(
        "roofline", "llama-3.1-8b", "--gpu", "a100", "--ctx", "4k,32k", "--batch", "1,16"
    )
    assert set(data["gpu"]) >= {"name", "ridge_flop_per_byte"}
    assert set(data["prefill"]) >= {
        "context_len",
        "arithmetic_intensity_flop_per_byte",
        "time_floor_s",
    }
    for row in data["decode"]:
        assert set(row) >= {
            "batch_size",
            "context_len",
            "arithmetic_intensity_flop_per_byte",
            "time_floor_s",
            "tokens_per_s",
            "bound",
        }
    for key in (
        "asymptotic_intensity_flop_per_byte",
        "critical_context_len",
        "ceiling_tokens_per_s",
        "batch_equal_reads",
        "notes",
    ):
        assert key in data
    assert len(data["decode"]) == 4


def test_device_only_and_plot(tmp_path):
    code, out, _ = run_cli("roofline", "--gpu", "h100")
    assert code == 0 and "295.3" in out
    path = tmp_path / "roof.png"
    code, _, err = run_cli("roofline", "deepseek-v3", "--gpu", "h200", "--plot", str(path))
    assert code == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = run_cli("roofline", "llama-3.1-8b", "--plot", str(tmp_path / "x.jpg"))
    assert code == 2 and ".png or .svg" in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["roofline", "--gpu", "h1000"], "did you mean"),
        (["roofline", "llama-3.1-8b", "--batch", "0"], "between 1"),
        (["roofline", "llama-3.1-70b", "--tp", "5"], "does not divide"),
    ],
)
def test_bad_input(argv, needle):
    code, _, err = run_cli(*argv)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_ops_lists_each_operator_of_the_decode_step_by_hand():
    """Llama-3.1-8B at 8k, batch 1: q|k|v is (4096 + 2 x 1024) x 4096 per layer, the cache
    32 layers x 2 x 8 heads x 128 x 2 bytes per token, attention 2 x 32 heads x (128 + 128) FLOPs
    per cached token per layer."""
    data = run_json("roofline", "llama-3.1-8b", "--ctx", "8k", "--batch", "1", "--ops")
    ops = {row["name"]: row for row in data["operators"]}
    assert list(ops) == ["norms", "qkv", "attention", "o", "gate_up", "activation", "down"]
    assert ops["qkv"]["weight_bytes"] == 32 * (4096 + 2 * 1024) * 4096 * 2
    assert ops["gate_up"]["weight_bytes"] == 32 * 2 * 14336 * 4096 * 2
    assert ops["attention"]["kv_bytes"] == 8192 * 32 * 2 * 8 * 128 * 2
    assert ops["attention"]["flops"] == 32 * 2 * 32 * 256 * 8192
    assert sum(row["share"] for row in data["operators"]) == pytest.approx(1.0)
    assert all(row["bound"] == "memory" for row in data["operators"])
    # at TP 2 a GPU holds half of every weight and half the KV heads
    tp2 = run_json("roofline", "llama-3.1-8b", "--ctx", "8k", "--batch", "1", "--ops", "--tp", "2")
    half = {row["name"]: row for row in tp2["operators"]}
    assert half["qkv"]["weight_bytes"] == ops["qkv"]["weight_bytes"] / 2
    assert half["attention"]["kv_bytes"] == ops["attention"]["kv_bytes"] / 2


def test_ops_refuses_layers_it_cannot_lay_out():
    code, _, err = run_cli("roofline", "deepseek-v3", "--tp", "8", "--ops")
    assert code == 2 and "roofline --ops" in err and len(err.strip().splitlines()) == 1


def test_roofline_plans_on_a_deployment_that_holds_the_model():
    data = run_json("roofline", "llama-3.1-70b", "--ctx", "8k", "--batch", "1")
    assert (data["tp"], data["deployment_chosen_by"]) == (2, "fewest-gpus")
    assert data["decode"][0]["fits"]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b", "gemma-2-9b", "phi-3-mini-4k"])
@pytest.mark.parametrize("batch,context", [(1, 8192), (16, 2048)])
def test_measures_operators_add_up_to_the_planners_step(model, batch, context):
    """kvplan measure predicts per operator (formulas.step_time.decode_ops); the planner's
    decode_step is the same accounting: the layers' operators plus what lies outside them (the
    lm_head and final norm, the B embedding rows looked up)."""
    from kvplan.dtypes import resolve_kv_format
    from kvplan.formulas.flops import matmul_params
    from kvplan.formulas.step_time import Rates, decode_ops, decode_step, layer_shape

    spec = load_model(model)
    fmt = resolve_kv_format("auto", spec.dtype)
    ops = decode_ops(spec, batch, context, spec.dtype, fmt)
    step = decode_step(spec, Rates(1e12, 1e15), batch, context, spec.dtype, fmt)
    p = 2  # bf16
    layer_params = sum(sum(count for _, count in layer.params) for layer in spec.layers)
    outside = matmul_params(spec) - layer_params  # lm_head (or tied embedding) and final norm
    # the planner prices every parameter at 2 FLOPs per token, norm weights and biases included;
    # the operators give those to elementwise kernels with no FLOPs
    other = sum(layer_shape(spec, layer).other_params for layer in spec.layers)
    expected_flops = sum(op.flops for op in ops) + 2 * batch * (outside + other)
    assert step.flops == pytest.approx(expected_flops, rel=1e-12)
    rows = batch * spec.hidden_size  # one embedding row per token, a tied table's too
    expected = sum(op.weight_bytes + op.kv_bytes for op in ops) + (outside + rows) * p
    assert step.bytes == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "model, gpu, ctx, batch, kv, wd, tp, pp, dp",
    [
        ("llama-3.1-8b", "h100", 8192, 64, "auto", "auto", 1, 1, None),
        ("llama-3.1-70b", "h100", 32768, 20, "fp8", "auto", 4, 1, None),
        ("llama-3.1-70b", "a100", 8192, 7, "auto", "int4", 8, 2, None),
        ("deepseek-v3", "h100", 8192, 300, "auto", "auto", 1, 1, 16),
        ("qwen3-30b-a3b", "l4", 4096, 3, "auto", "auto", 2, 1, None),
    ],
)
def test_decode_floor_is_rooflines_row(model, gpu, ctx, batch, kv, wd, tp, pp, dp):
    """capacity --gpu prices with decode_floor: the figures of the full roofline() call."""
    from kvplan.plans.roofline import decode_floor

    spec, profile = load_model(model), load_profile(gpu)
    full = roofline(
        spec,
        profile,
        RooflineRequest(
            contexts=(ctx,), batches=(batch,), kv_dtype=kv, weights_dtype=wd,
            tp=tp, pp=pp, dp_attention=dp,
        ),
    )  # fmt: skip
    slim = decode_floor(spec, profile, ctx, batch, kv, wd, tp, pp, dp)
    assert slim.time_floor_s == full.decode[0].time_floor_s
    assert slim.tokens_per_s == full.decode[0].tokens_per_s
    assert slim.ceiling_tokens_per_s == full.ceiling_tokens_per_s


def test_decode_floor_refuses_what_roofline_refuses():
    from kvplan.errors import KvplanError
    from kvplan.plans.roofline import decode_floor

    spec = load_model("llama-3.1-8b")
    for gpu, tp, dp in (("m1-max-32gb", 2, None), ("h100", 1, 8)):
        profile = load_profile(gpu)
        request = RooflineRequest(contexts=(8192,), batches=(1,), tp=tp, dp_attention=dp)
        with pytest.raises(KvplanError) as full:
            roofline(spec, profile, request)
        with pytest.raises(KvplanError) as slim:
            decode_floor(spec, profile, 8192, 1, "auto", "auto", tp, 1, dp)
        assert str(slim.value) == str(full.value)


@pytest.mark.parametrize(("tp", "pp"), [(16, 1), (8, 2)])
def test_traffic_between_nodes_without_a_network_figure_runs_on_the_assumed_network(tp, pp):
    """RTX 4090 nodes hold 8 GPUs and the profile states no network: a TP 16 group's
    all-reduces, or the stage hop of 8 x 2 GPUs, cross nodes and are priced on the network
    simulate and plan assume (DEFAULT_NETWORK, noted), not on the intra-node PCIe link: the
    same figures as a profile stating that network, other figures than one whose network is
    the PCIe link."""
    from kvplan.inputs.hardware import DEFAULT_NETWORK, Interconnect

    spec, gpu = load_model("llama-3.1-70b"), load_profile("rtx-4090")
    assert gpu.network is None and gpu.gpus_per_node == 8
    request = RooflineRequest(contexts=(8192,), batches=(1, 8), tp=tp, pp=pp)
    assumed = roofline(spec, gpu, request)
    stated = roofline(spec, gpu._replace(network=Interconnect("a 400G NIC", 100e9, 5e-6)), request)
    pcie = roofline(spec, gpu._replace(network=gpu.interconnect), request)
    comm = [[r.comm_s for r in result.decode] for result in (assumed, stated, pcie)]
    assert comm[0] == comm[1] and all(a != b for a, b in zip(comm[0], comm[2], strict=True))
    assert [n.id for n in assumed.notes].count("node-network-assumed") == 1
    assert "node-network-assumed" not in [n.id for n in stated.notes]
    told = next(n for n in assumed.notes if n.id == "node-network-assumed")
    assert told.value("network") == DEFAULT_NETWORK.name and told.value("nodes") == 2
    # the TP group's own link within a node, the network between nodes (the sweep's too)
    assert assumed.link_name == gpu.interconnect.name
    assert assumed.network_name == DEFAULT_NETWORK.name and assumed.gpus_per_node == 8


def test_a_layout_within_a_node_prices_no_network():
    spec, gpu = load_model("llama-3.1-70b"), load_profile("rtx-4090")
    result = roofline(spec, gpu, RooflineRequest(contexts=(8192,), batches=(1,), tp=4, pp=2))
    assert "node-network-assumed" not in [n.id for n in result.notes]
    assert result.link_name == gpu.interconnect.name


def test_the_comparison_notes_the_assumed_network_of_a_kind_without_one():
    doc = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "rtx-4090", "--gpu", "h100", "--ctx", "8k",
        "--tp", "16",
    )  # fmt: skip
    told = [n["text"] for n in doc["notes"] if n["id"] == "node-network-assumed"]
    assert len(told) == 1 and "RTX 4090's profile states no inter-node network" in told[0]
