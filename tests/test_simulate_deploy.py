"""The deployments real runs use, in `kvplan simulate`: SGLang's --mem-fraction-static pool,
the bench clients' random length laws, a warm prefix cache, the weights' format given as the
engines spell it, the GPUs runs name (H800, MI350X) and a given TP/PP link. Hand-computed cases
against the engines' and clients' own formulas (cited in kvplan/engines/sglang.py and
kvplan/simulate/workload.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_simulate_engine import MODEL, NO_FRONTEND, config

from kvplan.engines.context_limit import ContextLimit
from kvplan.formulas.batch_step import BatchShape
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.quantization import read_quantization
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate import cluster, metrics
from kvplan.simulate.engine import Engine
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import (
    RequestSpec,
    WorkloadSpec,
    bench_random_lengths,
    generate,
    random_length_bounds,
)

from helpers import REPO, one_line_error, run_cli, run_json

GPU = load_profile("h100")
LLAMA_8B = load_model("llama-3.1-8b")
FEW = WorkloadSpec(num_prompts=4, input_len=256, output_len=8)

# ---- SGLang's --mem-fraction-static --------------------------------------------------------
# SGLang model_runner.py profile_max_num_token: rest = free_after_load - free_before x (1 - F)
# = free_before x F - weights; max_total_num_tokens = rest // cell_size, cell_size =
# kv_heads/TP x head_dim x layers x 2 (K, V) x element bytes. Llama-3.1-8B on one H100 SXM:
FREE_BEFORE_BYTES = 85_028_896_768 - 547_608_330  # CUDA's total less the 0.51 GiB context
WEIGHTS_BYTES = 2 * 8_030_261_248 + 33_554_432  # bf16 parameters + the 32 MiB rotary cache
CELL_BYTES = 8 * 128 * 32 * 2 * 2  # 131,072: 8 KV heads of 128, 32 layers, K and V, bf16


@pytest.mark.parametrize("fraction", [0.8, 0.6, 0.93])
def test_an_sglang_pool_at_a_given_fraction_is_the_engines_formula(fraction):
    tokens = int(FREE_BEFORE_BYTES * fraction - WEIGHTS_BYTES) // CELL_BYTES
    request = SimulateRequest(
        workload=FEW, serve=ServeOptions(engine="sglang", mem_fraction_static=fraction)
    )
    setup = simulate(LLAMA_8B, GPU, request).setup
    assert setup.kv_cache_tokens == tokens
    assert setup.mem_fraction_static == fraction
    if fraction == 0.8:
        assert tokens == 392_844  # 51,490,953,822 B of pool / 131,072 B a token


def test_the_sglang_default_fraction_is_reported_and_a_vllm_run_has_none():
    sglang = simulate(LLAMA_8B, GPU, SimulateRequest(FEW, serve=ServeOptions(engine="sglang")))
    # SGLang's heuristic on an 80 GB GPU: 1 - max(10 GiB floor, its reserve) / memory
    assert 0.8 < sglang.setup.mem_fraction_static < 0.9
    assert simulate(LLAMA_8B, GPU, SimulateRequest(FEW)).setup.mem_fraction_static is None


@pytest.mark.parametrize("value", ["0", "1.5", "nan", "-0.2", "0.01"])
def test_a_fraction_out_of_range_is_one_line(value):
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--num-prompts", "2",
        "--mem-fraction-static", value,
    )  # fmt: skip
    one_line_error(code, err, "--mem-fraction-static")


def test_mem_fraction_static_is_refused_for_vllm():
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--num-prompts", "2", "--mem-fraction-static", "0.8"
    )
    one_line_error(code, err, "--gpu-memory-utilization")


# ---- the bench clients' random datasets ----------------------------------------------------


@pytest.mark.parametrize(
    "law, length, ratio, output, bounds",
    [
        # vLLM RandomDataset.get_sampling_params: [floor(L(1-r)), ceil(L(1+r))], output >= 1
        ("vllm-random", 1024, 0.5, False, (512, 1536)),
        ("vllm-random", 100, 0.25, False, (75, 125)),
        ("vllm-random", 3, 0.5, False, (1, 5)),  # floor(1.5), ceil(4.5)
        ("vllm-random", 1, 0.5, True, (1, 2)),  # floor(0.5) = 0, raised to 1
        ("vllm-random", 128, 0.0, True, (128, 128)),
        # SGLang compute_random_lens: [max(int(L r), 1), L]
        ("sglang-random", 1024, 0.0, False, (1, 1024)),
        ("sglang-random", 1024, 1.0, True, (1024, 1024)),
        ("sglang-random", 100, 0.33, False, (33, 100)),
        ("sglang-random", 128, 0.5, True, (64, 128)),
    ],
)
def test_the_random_laws_bounds_by_hand(law, length, ratio, output, bounds):
    assert random_length_bounds(law, length, ratio, output) == bounds


@pytest.mark.parametrize(
    "law, ratio, low, high", [("sglang-random", 0.0, 1, 1024), ("vllm-random", 0.5, 512, 1536)]
)
def test_the_random_laws_draw_their_whole_range_with_its_mean(law, ratio, low, high):
    inputs, _ = bench_random_lengths(law, 1024, 128, ratio, 40_000, seed=3)
    assert (min(inputs), max(inputs)) == (low, high)
    # a discrete uniform's mean is (low + high) / 2: 512.5 and 1024; 40,000 draws of a spread of
    # ~300 (sd) put the sample mean within 3 tokens of it at 1-in-10^4
    assert abs(sum(inputs) / len(inputs) - (low + high) / 2) < 6


def _sglang_client_totals(seed, input_len, output_len, ratio, num):
    """sglang.bench_serving as it runs: np.random.seed(args.seed) in run_benchmark, then
    compute_random_lens for the inputs, then the outputs, from numpy's global generator."""
    np.random.seed(seed)
    inputs = np.random.randint(max(int(input_len * ratio), 1), input_len + 1, size=num)
    outputs = np.random.randint(max(int(output_len * ratio), 1), output_len + 1, size=num)
    return int(inputs.sum()), int(outputs.sum())


def _vllm_client_totals(seed, input_len, output_len, ratio, num):
    """vllm bench serve's RandomDataset: its own default_rng(random_seed), integers(low, high + 1)
    for the inputs then the outputs (a tokenizer without special tokens)."""
    rng = np.random.default_rng(seed)
    lo, hi = math.floor(input_len * (1 - ratio)), math.ceil(input_len * (1 + ratio))
    inputs = rng.integers(lo, hi + 1, size=num)
    lo = max(math.floor(output_len * (1 - ratio)), 1)
    hi = max(math.ceil(output_len * (1 + ratio)), 1)
    outputs = rng.integers(lo, hi + 1, size=num)
    return int(inputs.sum()), int(outputs.sum())


@pytest.mark.parametrize(
    "client, seed, ratio",
    [("sglang", 1, 0.0), ("sglang", 7, 0.5), ("vllm", 0, 0.5), ("vllm", 11, 0.0)],
)
def test_a_seeded_run_sends_the_clients_own_totals(client, seed, ratio):
    """The CLI's spelling; the totals the simulated bench reports equal what the client's own
    numpy draw sends for that seed."""
    expected = (_sglang_client_totals if client == "sglang" else _vllm_client_totals)(
        seed, 1024, 128, ratio, 300
    )
    data = run_json(
        "simulate", "llama-3.1-8b", "--num-prompts", "300", "--dataset-name", "random",
        "--random-input-len", "1024", "--random-output-len", "128",
        "--random-range-ratio", str(ratio), "--bench-client", client, "--seed", str(seed),
        "--format", "json",
    )  # fmt: skip
    bench = data["runs"][0]["bench"]
    assert (bench["total_input_tokens"], bench["total_output_tokens"]) == expected
    assert data["workload"]["source"] == f"{client}-random"
    assert data["workload"]["spread"] == ratio


def test_the_sglang_client_seed_defaults_to_its_own():
    """sglang.bench_serving's --seed defaults to 1, vllm bench serve's to 0; --engine picks the
    client when --bench-client is not given."""
    requests = generate(
        WorkloadSpec(num_prompts=50, length_dist="sglang-random", input_len=64, seed=1)
    )
    data = run_json(
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--num-prompts", "50",
        "--dataset-name", "random", "--random-input-len", "64", "--format", "json",
    )  # fmt: skip
    assert data["workload"]["seed"] == 1
    assert data["runs"][0]["bench"]["total_input_tokens"] == sum(r.input_tokens for r in requests)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--dataset-name", "random", "--random-range-ratio", "1"], "[0, 1)"),  # vLLM's
        (["--dataset-name", "random", "--bench-client", "sglang", "--random-range-ratio", "1.5"],
         "[0, 1]"),
        (["--dataset-name", "random", "--random-range-ratio", "nan"], "--random-range-ratio"),
        (["--dataset-name", "random", "--random-range-ratio", "-0.1"], "--random-range-ratio"),
        (["--random-range-ratio", "0.5"], "--dataset-name random"),
        (["--bench-client", "sglang"], "--dataset-name random"),
        (["--dataset-name", "burstgpt"], "--dataset-name"),
        (["--dataset-name", "random", "--bench-client", "trt"], "--bench-client"),
        (["--dataset-name", "random", "--length-dist", "uniform", "--spread", "0.2"], "not both"),
        (["--dataset-name", "random", "--random-input-len", "1", "--random-range-ratio", "0.5"],
         "too small"),
    ],
)  # fmt: skip
def test_bad_bench_lengths_are_one_line(args, needle):
    code, _, err = run_cli("simulate", "llama-3.1-8b", "--num-prompts", "2", *args)
    one_line_error(code, err, needle)


# ---- a warm prefix cache -------------------------------------------------------------------


def _first_ttft_s(warm: bool) -> float:
    """One request, a 1,024-token shared prefix and 1,000 tokens of its own."""
    spec = RequestSpec(0, 0.0, 2024, 4, stream_id=0, stream_tokens=1024)
    engine = Engine(config(enable_prefix_caching=True), MODEL, 0.0)
    if warm:
        assert engine.warm_prefixes([spec]) == 1024 // 16  # the prefix's 64 blocks
    run = cluster.run([spec], [engine], frontend=NO_FRONTEND, context=ContextLimit(1 << 20))
    return metrics.bench_result(run, math.inf, 1.0, None).mean_ttft_ms / 1e3


def test_a_warm_cache_takes_the_prefixs_prefill_off_the_first_request():
    cold = MODEL.step(BatchShape(0, 0, ((2024, 0),), 1)).total_s
    warm = MODEL.step(BatchShape(0, 0, ((1000, 1024),), 1)).total_s  # 1,000 new after 1,024 hit
    assert _first_ttft_s(False) == pytest.approx(cold, rel=1e-12)
    assert _first_ttft_s(True) == pytest.approx(warm, rel=1e-12)
    assert warm < cold


def test_a_warm_cache_in_unit_time_saves_exactly_the_prefix():
    """With a step time of one unit per computed token, the first TTFT drops by exactly the
    prefix's tokens."""

    class UnitStep:
        def __init__(self, model):
            self.model = model

        def step(self, shape):
            timing = self.model.step(shape)
            computed = sum(new for new, _ in shape.prefill_chunks) + shape.num_decodes
            return timing._replace(total_s=float(computed))

        def __getattr__(self, name):
            return getattr(self.model, name)

    def ttft(warm: bool) -> float:
        spec = RequestSpec(0, 0.0, 2024, 4, stream_id=0, stream_tokens=1024)
        engine = Engine(config(enable_prefix_caching=True), UnitStep(MODEL), 0.0)
        if warm:
            engine.warm_prefixes([spec])
        run = cluster.run([spec], [engine], frontend=NO_FRONTEND, context=ContextLimit(1 << 20))
        return metrics.bench_result(run, math.inf, 1.0, None).mean_ttft_ms / 1e3

    assert ttft(False) - ttft(True) == pytest.approx(1024.0, rel=1e-12)


def test_warm_prefix_cache_on_the_cli_and_its_hit_rate():
    base = (
        "simulate", "llama-3.1-8b", "--num-prompts", "1", "--input-len", "1000",
        "--prefix-len", "1024", "--output-len", "4", "--format", "json",
    )  # fmt: skip
    cold, warm = run_json(*base), run_json(*base, "--warm-prefix-cache")
    assert warm["workload"]["warm_prefix_cache"] is True
    assert cold["runs"][0]["engine"]["prefix_hit_rate"] == 0
    # 1,024 of 2,024 prompt tokens found cached
    assert warm["runs"][0]["engine"]["prefix_hit_rate"] == pytest.approx(1024 / 2024, rel=1e-9)
    assert warm["runs"][0]["bench"]["mean_ttft_ms"] < cold["runs"][0]["bench"]["mean_ttft_ms"]


@pytest.mark.parametrize(
    "args, needle",
    [
        ([], "--prefix-len"),
        (["--prefix-len", "512", "--turns", "2", "--num-prompts", "4"], "--prefix-len"),
        (["--prefix-len", "512", "--no-enable-prefix-caching"], "prefix caching"),
        (["--prefix-len", "512", "--disaggregated", "1:1"], "--disaggregated"),
    ],
)
def test_warm_prefix_cache_without_a_prefix_to_warm_is_one_line(args, needle, tmp_path):
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--num-prompts", "2", "--warm-prefix-cache", *args
    )
    one_line_error(code, err, needle)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 64, "output_tokens": 4}\n')
    code, _, err = run_cli("simulate", "llama-3.1-8b", "--trace", str(trace), "--warm-prefix-cache")
    one_line_error(code, err, "prefix_id")


# ---- the weights' format as the engines spell it -------------------------------------------


def test_quantization_fp8_loads_fp8_weights_and_a_larger_pool():
    bf16 = run_json("simulate", "llama-3.1-8b", "--num-prompts", "2", "--format", "json")
    fp8 = run_json(
        "simulate", "llama-3.1-8b", "--num-prompts", "2", "--quantization", "fp8",
        "--format", "json",
    )  # fmt: skip
    assert (bf16["setup"]["weights_dtype"], fp8["setup"]["weights_dtype"]) == ("bf16", "fp8")
    # the 32 layers' 13,959,168,000 B of bf16 weights halved (embeddings and lm_head stay 16-bit;
    # fp8's block scales are 4 B per 16,384 weights): ~53,250 more tokens at 131,072 B each
    gained = fp8["setup"]["kv_cache_tokens"] - bf16["setup"]["kv_cache_tokens"]
    assert gained == pytest.approx(13_959_168_000 / 2 / CELL_BYTES, rel=2e-3)
    sglang = run_json(
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--num-prompts", "2",
        "--weights-dtype", "fp8", "--format", "json",
    )  # fmt: skip
    assert sglang["setup"]["weights_dtype"] == "fp8"


@pytest.mark.parametrize(
    "engine, method, weights",
    [
        ("vllm", "fbgemm_fp8", "fp8"),
        ("vllm", "modelopt_fp4", "nvfp4"),
        ("sglang", "w8a8_fp8", "fp8-tensor"),
        ("sglang", "modelopt", "fp8-tensor"),
    ],
)
def test_the_engines_quantization_names(engine, method, weights):
    data = run_json(
        "simulate", "llama-3.1-8b", "--engine", engine, "--num-prompts", "2",
        "--quantization", method, "--format", "json",
    )  # fmt: skip
    assert data["setup"]["weights_dtype"] == weights


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--quantization", "bitnet"], "--quantization"),
        (["--quantization", "w8a8_fp8"], "--quantization"),  # SGLang's name, not vLLM's
        (["--quantization", "fp8", "--weights-dtype", "int4"], "not both"),
        (["--weights-dtype", "fp7"], "weights dtype"),
        (["--engine", "sglang", "--quantization", "bitnet"], "--quantization"),
    ],
)
def test_bad_weight_formats_are_one_line(args, needle):
    code, _, err = run_cli("simulate", "llama-3.1-8b", "--num-prompts", "2", *args)
    one_line_error(code, err, needle)


def _llama_405b_fp8_ignore() -> list[str]:
    """meta-llama/Llama-3.1-405B-Instruct-FP8's modules_to_not_convert: every layer's attention
    projections, the first and last layers' MLPs, lm_head (FFN-only FP8, Llama 3 paper §6.2)."""
    names = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(126) for p in "qkvo"]
    names += [f"model.layers.{i}.mlp.{p}_proj" for i in (0, 125) for p in ("gate", "up", "down")]
    return [*names, "lm_head"]


def test_fbgemm_fp8_reads_as_fp8_mlps_with_attention_kept():
    config = {
        "num_hidden_layers": 126,
        "quantization_config": {
            "activation_scale_ub": 1200.0,
            "modules_to_not_convert": _llama_405b_fp8_ignore(),
            "quant_method": "fbgemm_fp8",
        },
    }
    quant = read_quantization(config, {}, "Llama-3.1-405B-Instruct-FP8")
    assert quant.format == "fp8-tensor" and not quant.notes
    assert "attention" not in quant.parts and "mlp" in quant.parts


def test_an_fp8_list_of_norms_routers_and_indexer_projections_keeps_every_part_quantized():
    """zai-org/GLM-5-FP8's modules_to_not_convert names, per layer, its norms, the MoE router
    ("mlp.gate", its correction bias) and the indexer's k_norm and weights projection: the
    attention and dense MLP projections are fp8 all the same, as in glm-5.2-fp8, whose config has
    no list, and the same architecture's weights come to the same bytes."""
    config = json.loads((REPO / "model_configs" / "GLM-5-FP8.json").read_text())
    quant = read_quantization(config, {}, "zai-org/GLM-5-FP8")
    assert quant.format == "fp8" and quant.parts is None and not quant.notes
    fp8, fp8_52 = load_model("glm-5-fp8"), load_model("glm-5.2-fp8")
    assert resolve_weights_dtype(fp8, "auto")[0] == "fp8"
    assert (
        weight_bytes(fp8, "fp8") == weight_bytes(fp8_52, "fp8") < weight_bytes(fp8, "bf16") * 0.51
    )
    # a list that names the attention module itself still keeps the attention in 16 bits
    named = {
        **config["quantization_config"],
        "modules_to_not_convert": ["model.layers.0.self_attn"],
    }
    quant = read_quantization({"quantization_config": named}, {}, "x")
    assert quant.parts is not None and "attention" not in quant.parts and "mlp" in quant.parts


def test_quark_fp8_and_mxfp4_configs():
    # amd/Llama-3.1-8B-Instruct-FP8-KV: per-tensor fp8 e4m3 weights, lm_head excluded
    fp8 = {
        "quant_method": "quark",
        "global_quant_config": {
            "weight": {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False},
            "input_tensors": {"dtype": "fp8_e4m3", "qscheme": "per_tensor"},
        },
        "exclude": ["lm_head"],
        "export": {"kv_cache_group": ["*k_proj", "*v_proj"]},
        "layer_quant_config": {},
    }
    assert read_quantization({"quantization_config": fp8}, {}, "x")[:2] == ("fp8-tensor", None)
    # amd/DeepSeek-R1-MXFP4-style: fp4 per_group of 32 (e8m0 scales) on every linear layer but
    # attention, the router and lm_head
    mx = {
        "quant_method": "quark",
        "global_quant_config": {
            "weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                       "scale_format": "e8m0"},
        },
        "exclude": ["*self_attn*", "*mlp.gate", "lm_head"],
    }  # fmt: skip
    quant = read_quantization({"quantization_config": mx, "num_hidden_layers": 61}, {}, "x")
    assert quant.format == "mxfp4"
    assert "attention" not in quant.parts and {"mlp", "experts"} <= set(quant.parts)
    # a dense model in MXFP4: its MLPs count at 0.53 bytes a weight, not only experts
    dense = read_quantization({"quantization_config": {**mx, "exclude": ["lm_head"]}}, {}, "x")
    assert dense.format == "mxfp4" and "mlp" in dense.parts and "attention" in dense.parts
    odd = {**mx, "global_quant_config": {"weight": {"dtype": "fp6_e3m2"}}}
    unread = read_quantization({"quantization_config": odd}, {}, "x")
    assert unread.format is None and unread.notes[0].id == "quant-unread"


@pytest.mark.parametrize("group, fmt", [(16, "nvfp4"), (None, "nvfp4"), (32, "mxfp4"), (64, None)])
def test_compressed_tensors_4_bit_floats_by_their_group(group, fmt):
    """compressed-tensors writes nvfp4 (nvfp4-pack-quantized: an fp8 scale per 16 values) and
    mxfp4 (mxfp4-pack-quantized, Kimi-K3: a uint8 e8m0 scale per 32) as the same float 4-bit
    weights; the group size tells them apart, and another size is named, not guessed."""
    weights = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": group}
    qc = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": weights}}}
    quant = read_quantization({"quantization_config": qc}, {}, "x")
    assert quant.format == fmt
    if fmt is None:
        assert quant.notes[0].id == "quant-unread"


# ---- GPUs runs name, and the link ----------------------------------------------------------


def test_h800_is_an_h100_with_a_400_gbs_nvlink():
    h800, h100 = load_profile("h800"), load_profile("h100")
    assert h800.peak_flop_per_s == h100.peak_flop_per_s
    assert h800.memory_bandwidth_bytes_per_s == h100.memory_bandwidth_bytes_per_s
    assert h800.interconnect.bandwidth_bytes_per_s == 400e9
    mi350x = load_profile("mi350x")
    # AMD's 2.3 PF BF16 / 4.6 PF FP8 dense: 256 CUs x 4,096 / 8,192 FLOP a clock x 2.2 GHz
    assert mi350x.peak_flop_per_s["bf16"] == pytest.approx(256 * 4096 * 2.2e9, rel=1e-4)
    assert mi350x.peak_flop_per_s["fp8"] == pytest.approx(256 * 8192 * 2.2e9, rel=1e-4)
    assert (mi350x.memory_bytes, mi350x.memory_bandwidth_bytes_per_s) == (288e9, 8e12)


def test_a_given_interconnect_replaces_the_profiles_for_tp():
    args = ("simulate", "llama-3.1-8b", "--tp", "2", "--num-prompts", "8", "--format", "json")
    nvlink = run_json(*args)
    pcie = run_json(*args, "--interconnect-gbps", "512")  # PCIe Gen5 x16: 64 GB/s a direction
    assert nvlink["setup"]["interconnect_bytes_per_s"] == 900e9
    assert pcie["setup"]["interconnect_bytes_per_s"] == 2 * 512e9 / 8
    assert pcie["runs"][0]["bench"]["duration"] > nvlink["runs"][0]["bench"]["duration"]
    h800 = run_json(*args[:-2], "--gpu", "h800", "--format", "json")
    assert h800["setup"]["interconnect_bytes_per_s"] == 400e9


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e9"])
def test_a_bad_interconnect_is_one_line(value):
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--num-prompts", "2", "--interconnect-gbps", value
    )
    one_line_error(code, err, "--interconnect-gbps")


# ---- SGLang releases (--engine-version) ----------------------------------------------------


@pytest.mark.parametrize("tp, fraction", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81)])
def test_sglang_04_sizes_its_pool_at_its_tp_bucketed_fraction(tp, fraction):
    """0.4.6's ServerArgs.__post_init__: mem_fraction_static 0.88 / 0.87 / 0.85 / 0.81 / 0.79 at
    TP 1 / 2 / 4 / 8 / 16 up to 81,920 MiB; chunked_prefill_size 8,192 on an 80 GB GPU (the
    later patches: tests/test_sglang_04_patches.py)."""
    from kvplan.engines import EngineRequest
    from kvplan.engines.sglang import sglang_allocation

    request = EngineRequest(engine="sglang", tp=tp, max_model_len=8192, sglang_version="0.4.6")
    result = sglang_allocation(LLAMA_8B, GPU, request)
    assert (result.mem_fraction_static, result.chunked_prefill_size) == (fraction, 8192)
    assert result.engine_version == "0.4"
    if tp == 1:  # (84,481,288,438 x 0.88 - 16,094,076,928) // 131,072
        assert result.kv_cache_tokens == int(FREE_BEFORE_BYTES * 0.88 - WEIGHTS_BYTES) // CELL_BYTES
        assert result.kv_cache_tokens == 444_408


def test_engine_version_picks_the_release_and_says_when_it_is_only_the_nearest():
    def run(version):
        return run_json(
            "simulate", "llama-3.1-8b", "--engine", "sglang", "--engine-version", version,
            "--num-prompts", "4", "--format", "json",
        )  # fmt: skip

    old, new, later = run("0.4.6.post1"), run("0.5.10"), run("0.6.1")
    assert (old["setup"]["engine_version"], old["setup"]["mem_fraction_static"]) == ("0.4", 0.88)
    assert new["setup"]["engine_version"] == later["setup"]["engine_version"] == "0.5"
    assert later["setup"]["kv_cache_tokens"] == new["setup"]["kv_cache_tokens"]
    # 0.5.8 runs 0.5's rules at its patch: no piecewise-graph reserve without the flag, so a
    # larger pool (0.834 of memory, not 0.829)
    patch = run("0.5.8")
    assert patch["setup"]["engine_version"] == "0.5"
    assert patch["setup"]["kv_cache_tokens"] > new["setup"]["kv_cache_tokens"]
    nearest = [n for n in later["notes"] if n["id"] == "sim-sglang-version-nearest"]
    assert nearest and "0.6.1" in nearest[0]["text"] and "0.5" in nearest[0]["text"]
    assert not any(n["id"] == "sim-sglang-version-nearest" for n in new["notes"])
    vllm = run_json(
        "simulate", "llama-3.1-8b", "--engine-version", "0.13", "--num-prompts", "4",
        "--format", "json",
    )  # fmt: skip
    assert vllm["setup"]["engine_version"] == "0.13"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--engine", "sglang", "--engine-version", "banana"], "SGLang version"),
        (["--engine", "sglang", "--engine-version", "1.0"], "SGLang version"),
        (["--engine", "sglang", "--engine-version", "0.x"], "SGLang version"),
        (["--engine", "sglang", "--engine-version", "0.4." + "9" * 60], "SGLang version"),
        (["--engine", "sglang", "--vllm-version", "0.13"], "--vllm-version"),
        (["--engine-version", "0.13", "--vllm-version", "0.13"], "not both"),
        (["--engine-version", "0.5"], "--engine-version '0.5'"),  # vLLM from 0.6: the flag given
        (["--vllm-version", "0.5"], "--vllm-version '0.5'"),
    ],
)
def test_bad_engine_versions_are_one_line(args, needle):
    code, _, err = run_cli("simulate", "llama-3.1-8b", "--num-prompts", "2", *args)
    one_line_error(code, err, needle)


def test_kvplan_engine_takes_the_sglang_release():
    old = run_json(
        "engine", "llama-3.1-8b", "--engine", "sglang", "--sglang-version", "0.4.6",
        "--max-model-len", "8192",
    )  # fmt: skip
    assert (old["engine_version"], old["mem_fraction_static"]) == ("0.4", 0.88)
    assert old["kv_cache_tokens"] == 444_408
    code, _, err = run_cli("engine", "llama-3.1-8b", "--sglang-version", "0.4")
    one_line_error(code, err, "--sglang-version")


def test_plan_launches_sglang_at_the_given_fraction():
    args = (
        "plan", "llama-3.1-8b", "--rate", "2", "--slo", "ttft_p99=2s", "--gpu", "h100",
        "--tp", "1", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192",
        "--num-prompts", "50", "--jobs", "1",
    )  # fmt: skip
    data = run_json(*args, "--emit", "sglang", "--mem-fraction-static", "0.7", "--format", "json")
    assert data["mem_fraction_static"] == 0.7
    assert "--mem-fraction-static 0.7" in data["candidates"][0]["command"]
    code, _, err = run_cli(*args, "--mem-fraction-static", "0.7")
    one_line_error(code, err, "--emit sglang")
    code, _, err = run_cli(*args, "--emit", "sglang", "--mem-fraction-static", "2")
    one_line_error(code, err, "--mem-fraction-static")


def test_a_traces_prefixes_are_warmed_too(tmp_path):
    trace = tmp_path / "t.jsonl"
    row = '{"arrival_s": 0, "input_tokens": 1088, "output_tokens": 4, "prefix_id": "sys", '
    trace.write_text(row + '"prefix_tokens": 1024}\n')
    warm = run_json("simulate", "llama-3.1-8b", "--trace", str(trace), "--warm-prefix-cache")
    assert warm["runs"][0]["engine"]["prefix_hit_rate"] == pytest.approx(1024 / 1088, rel=1e-9)


def test_the_report_names_what_was_simulated():
    code, out, err = run_cli(
        "simulate", "llama-3.1-8b", "--engine", "sglang", "--engine-version", "0.4",
        "--mem-fraction-static", "0.8", "--tp", "2", "--interconnect-gbps", "512",
        "--num-prompts", "4", "--dataset-name", "random", "--random-range-ratio", "0.5",
        "--prefix-len", "256", "--warm-prefix-cache",
    )  # fmt: skip
    assert code == 0, err
    for words in (
        "SGLang 0.4 scheduler",
        "mem_fraction_static 0.8,",
        "given link, 512 Gb/s (128 GB/s per GPU)",
        "sglang-random lengths",
        "random-range-ratio 0.5, seed 1",
        "shared prefixes cached at the start",
    ):
        assert words in out, words
