"""The parts of a step no kernel table times (StepModel.untimed_parts): named in the
sim-interval note and in JSON, and they move a run on its GPU's own tables to the "partial"
interval class (kvplan.plans.intervals.raw_class)."""

from __future__ import annotations

import pytest

from kvplan.engines.backends import Backends
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import tables_for
from kvplan.inputs.sources import load_model
from kvplan.plans import intervals
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import run_json


def _parts(model, gpu, **options):
    spec = load_model(model, checkpoint=False)
    return build_replica(spec, load_profile(gpu), ServeOptions(**options)).model.untimed_parts


def test_a_dense_model_on_its_gpus_own_tables_has_none():
    assert _parts("Qwen/Qwen3-8B", "h100") == ()
    assert _parts("Qwen/Qwen3-8B", "h100", engine="sglang") == ()


def test_an_attention_backend_without_rows_is_named_with_its_flag():
    # flashmla: no GPU with SGLang tables has its rows, so none can lend them
    parts = _parts(
        "zai-org/GLM-4.7-Flash",
        "b200",
        engine="sglang",
        backends=Backends(attention_backend="flashmla"),
    )
    assert "the attention under --attention-backend flashmla" in parts
    # without the flag SGLang's own pick runs, and nothing about attention is untimed
    assert not any(
        "attention" in p for p in _parts("zai-org/GLM-4.7-Flash", "b200", engine="sglang")
    )


def test_recurrent_layers_are_named_by_kind_where_no_table_times_them():
    """Mamba-2 is in no recurrent/ table (aiconfigurator's TRT-LLM table times only its conv
    kernels); Gated DeltaNet is where the GPU's table of the engine holds it (B200 under SGLang),
    not on the A100 (its SGLang 0.5.10 table has no chunked kernel: no recurrent/ file)."""
    nano = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    assert "the recurrent layers (mamba2)" in _parts(nano, "b200", engine="sglang")
    qwen3_next = "Qwen/Qwen3-Next-80B-A3B-Thinking"
    assert not any("recurrent" in p for p in _parts(qwen3_next, "b200", engine="sglang", tp=8))
    assert "the recurrent layers (gated_deltanet)" in _parts(
        qwen3_next, "a100", engine="sglang", tp=8
    )


@pytest.mark.parametrize(
    ("gpu", "engine", "untimed"),
    [
        ("b200", "sglang", False),  # the module tables: every GPU and engine the wheel timed
        ("b200", "vllm", False),
        ("h200", "sglang", False),
        ("h200", "vllm", False),
        ("gb300", "sglang", False),
        ("mi300x", "sglang", True),  # no tables of its own: the datasheet's H100 fractions
    ],
)
def test_the_dsa_indexer_is_untimed_without_the_module_tables(gpu, engine, untimed):
    parts = _parts("deepseek-ai/DeepSeek-V3.2", gpu, engine=engine, tp=8)
    assert ("the DSA indexer and sparse attention" in parts) is untimed


STAND_IN = "the DSA module at this model's shape (DeepSeek-V3.2's stands in)"


@pytest.mark.parametrize(("gpu", "engine"), [("h200", "vllm"), ("b200", "vllm")])
def test_glm5s_dsa_takes_deepseek_v32s_grids_as_a_named_stand_in(gpu, engine):
    """GLM-5's heads (64 of 256 wide) and projections are not DeepSeek-V3.2's, whose DSA module
    less DeepSeek-V3's MLA module vLLM's grids hold, and no table holds a dense MLA module of
    GLM-5's shape to subtract: the grids price it, named untimed. GLM-5.3: 21 layers index, 57
    reuse their picks: the 21 take the grids, the 57's top-k read runs on the roofline."""
    spec = load_model("zai-org/GLM-5-FP8", checkpoint=False)
    model = build_replica(spec, load_profile(gpu), ServeOptions(engine=engine, tp=8)).model
    assert model.dsa is not None and not model.dsa.shape_timed
    assert model.dsa.tables.shape["qk_head_dim"] == 192  # DeepSeek-V3.2's
    assert model.untimed_parts == (STAND_IN,)
    spec = load_model("zai-org/GLM-5.3", checkpoint=False)
    options = ServeOptions(engine=engine, tp=8, pp=2, nnodes=2)
    replica = build_replica(spec, load_profile(gpu), options)
    assert replica.model.dsa is not None and replica.model.dsa.layers == 21
    assert replica.model.untimed_parts == (
        STAND_IN,
        "the sparse attention of the layers that reuse another's top-k",
    )


@pytest.mark.parametrize("gpu", ["b200", "h200", "gb300"])
def test_glm5s_dsa_reads_its_own_sglang_grids(gpu):
    """SGLang 0.5.14's DSA module tables time GLM-5-FP8's shape too (dsa/ files' "shapes"): a
    GLM-5 run reads those (its config's fields equal the grid's shape), named timed; GLM-5.3's
    21 indexing layers have the same shape."""
    spec = load_model("zai-org/GLM-5-FP8", checkpoint=False)
    model = build_replica(spec, load_profile(gpu), ServeOptions(engine="sglang", tp=8)).model
    assert model.dsa is not None and model.dsa.shape_timed
    attn = spec.attention_layers()[0]
    assert model.dsa.tables.shape == {f: getattr(attn, f) for f in model.dsa.tables.shape}
    assert model.dsa.tables.shape["qk_head_dim"] == 256
    # SGLang on a B200 decodes an fp8 cache on flashmla_kv, the grids' trtllm (next test)
    decode = (DECODE_UNTIMED,) if gpu != "h200" else ()
    assert model.untimed_parts == decode
    spec = load_model("zai-org/GLM-5.3", checkpoint=False)
    options = ServeOptions(engine="sglang", tp=8, pp=2, nnodes=2)
    replica = build_replica(spec, load_profile(gpu), options)
    assert replica.model.dsa is not None and replica.model.dsa.layers == 21
    assert replica.model.dsa.shape_timed
    assert replica.model.untimed_parts == (
        *decode,
        "the sparse attention of the layers that reuse another's top-k",
    )


DECODE_UNTIMED = "the DSA module's decode under flashmla_kv (the tables time trtllm)"
# a run on 0.5.9's B200 tables reads dsa/b200_sxm.sglang.0.5.14.json, drawn less the layer
# priced on 0.5.14's (KernelTables.dsa_delta_us: DsaGrids.base_release)
BASE_0_5_14 = (
    "the DSA module over this run's layer (its rows were drawn on the layer priced on SGLang "
    "0.5.14's tables, not this run's)"
)


@pytest.mark.parametrize(
    ("gpu", "options", "untimed"),
    [
        # SGLang's default fp8 cache on SM100 decodes on flashmla_kv (_set_default_nsa_backends
        # of 0.5.9); aiconfigurator timed SGLang 0.5.14's trtllm there
        ("b200", {}, (DECODE_UNTIMED,)),
        ("gb300", {}, (DECODE_UNTIMED,)),
        # a bf16 cache on SM100 decodes on trtllm: timed
        ("b200", {"kv_cache_dtype": "bfloat16"}, ()),
        # Hopper: fa3 for bf16 (the default), flashmla_kv for fp8, both timed
        ("h200", {}, ()),
        ("h200", {"kv_cache_dtype": "fp8_e4m3"}, ()),
        # SGLang 0.5.14 itself (the grids' release) or later picks trtllm there: timed; an
        # earlier patch keeps 0.5.9's flashmla_kv
        ("b200", {"sglang_version": "0.5.14"}, ()),
        ("b200", {"sglang_version": "0.5.15"}, ()),
        # (and its tables are 0.5.9's, the DSA file's baseline 0.5.14's: the next part)
        ("b200", {"sglang_version": "0.5.13"}, (BASE_0_5_14, DECODE_UNTIMED)),
        # named by its flag instead: the flag's own untimed part, not this one
        (
            "b200",
            {"backends": Backends(nsa_decode_backend="trtllm")},
            ("the attention under --nsa-decode-backend trtllm",),
        ),
    ],
)
def test_sglangs_dsa_decode_kernel_is_untimed_where_the_grids_timed_another(gpu, options, untimed):
    parts = _parts("deepseek-ai/DeepSeek-V3.2", gpu, engine="sglang", tp=8, **options)
    assert parts == untimed


def test_dsa_without_tables_is_priced_sparse_as_its_note_says():
    """sim-dsa-dense: the top-k latents and every indexer key on the roofline, not dense MLA:
    at 32k tokens held DeepSeek-V3.2's decode attention is a fraction of DeepSeek-V3's."""
    gpu, options = load_profile("mi300x"), ServeOptions(engine="sglang", tp=8)  # no tables
    sparse, dense = (
        build_replica(load_model(m, checkpoint=False), gpu, options).model
        for m in ("deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3")
    )
    assert sparse.dsa is None
    held = 64 * 32768
    assert sparse.decode_attention_s(64, held)[0] < 0.3 * dense.decode_attention_s(64, held)[0]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_fused_moe_without_its_curve_is_named_with_its_format(engine):
    # gpt-oss's MXFP4 experts: no A100 table times an MXFP4 fused MoE (aiconfigurator's
    # w4a16_mxfp4 rows are Hopper's and Blackwell's)
    parts = _parts("openai/gpt-oss-20b", "a100", engine=engine)
    assert any(p.startswith("the mxfp4 fused MoE") for p in parts)
    # mxfp4 quantizes the experts alone: the dense layers stay bf16, timed
    assert not any("dense" in p for p in parts)


@pytest.mark.parametrize(
    ("model", "gpu", "tp"),
    [
        ("Qwen/Qwen3-30B-A3B", "h100", 1),
        ("openai/gpt-oss-20b", "h100", 1),
        ("openai/gpt-oss-120b", "h100", 2),
        ("openai/gpt-oss-20b", "a100", 1),
    ],
)
def test_the_fused_moe_is_named_exactly_where_the_tables_lack_its_curve(model, gpu, tp):
    """The part follows the step model's own curve lookup (StepModel.moe_curve) and the
    sim-weak-moe note that says the same: Qwen3-30B-A3B's bf16 MoE and gpt-oss's MXFP4 one
    (TP 1 and 2) are timed on the H100, gpt-oss's is not on the A100."""
    spec = load_model(model, checkpoint=False)
    replica = build_replica(spec, load_profile(gpu), ServeOptions(tp=tp))
    named = any("fused MoE" in p for p in replica.model.untimed_parts)
    assert named is (replica.model.moe_curve is None)
    (weak,) = [n for n in replica.notes if n.id == "sim-weak-moe"]
    assert (weak.value("timed") is None) is named
    assert named is (gpu == "a100")
    # the eager twin (DP-attention lockstep) names the same parts
    assert replica.model.without_graphs().untimed_parts == replica.model.untimed_parts


@pytest.mark.parametrize(
    ("weights", "untimed"),
    [("int4", True), ("nvfp4", True), ("fp8", False), ("int8", False), ("auto", False)],
)
def test_dense_layers_in_a_format_without_gemm_rows_are_named(weights, untimed):
    """The tables time dense GEMMs in bf16, fp8 and int8 only: int4 (W4A16) and nvfp4 dense
    layers run at the bf16 fractions, a stand-in."""
    spec = load_model("Qwen/Qwen3-8B", checkpoint=False)
    options = ServeOptions(weights_dtype=weights)
    parts = build_replica(spec, load_profile("h100"), options).model.untimed_parts
    assert (f"the {weights} dense GEMMs" in parts) is untimed
    assert len(parts) == int(untimed)


def test_a_moe_backend_flag_is_named_for_a_moe_model_only():
    """A flag naming a MoE backend no table times at the model's shape is an untimed part
    (sim-moe-kernels); SGLang's runner a release timed there is read on its rows
    (kernel_tables.moe_runner_rows: triton's on the H100); 'auto' is the default path; a dense
    model runs no MoE kernels at all."""
    triton = {"engine": "sglang", "backends": Backends(moe_runner_backend="triton")}
    assert _parts("Qwen/Qwen3-30B-A3B", "h100", **triton) == ()
    cutlass = {"engine": "sglang", "backends": Backends(moe_runner_backend="cutlass")}
    assert _parts("Qwen/Qwen3-30B-A3B", "h100", **cutlass) == (
        "the fused MoE under --moe-runner-backend cutlass",
    )
    auto = {"engine": "sglang", "backends": Backends(moe_runner_backend="auto")}
    assert _parts("Qwen/Qwen3-30B-A3B", "h100", **auto) == ()
    assert _parts("Qwen/Qwen3-8B", "h100", **triton) == ()
    vllm = {"vllm_version": "0.19", "backends": Backends(moe_backend="triton")}
    assert _parts("Qwen/Qwen3-30B-A3B", "h100", **vllm) == (
        "the fused MoE under --moe-backend triton",
    )


def test_a_draft_models_untimed_parts_count_as_the_steps():
    """A separate draft model runs its own forwards each round: its parts no table times are
    the step's too, named as the draft's (the dense target here has none)."""
    draft = '{"method": "draft_model", "model": "Qwen/Qwen3-Next-80B-A3B-Thinking", "num_speculative_tokens": 2}'
    options = {"tp": 4, "max_model_len": 4096, "speculative_config": draft}
    parts = _parts("Qwen/Qwen3-32B", "h200", **options)
    # (its Gated DeltaNet layers are in the H200's vLLM recurrent/ table)
    assert parts == ("the draft's bf16 fused MoE of this shape and split",)
    assert intervals.raw_class(load_profile("h200"), "vllm", None, parts) == intervals.PARTIAL
    small = '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 2}'
    assert _parts("Qwen/Qwen3-32B", "h200", **{**options, "speculative_config": small}) == ()


def test_parts_decide_the_class_and_the_note_names_them():
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.simulate.workload import WorkloadSpec

    # gpt-oss's MXFP4 experts on an A100: no table of it times an MXFP4 fused MoE
    spec, gpu = load_model("openai/gpt-oss-20b", checkpoint=False), load_profile("a100")
    request = SimulateRequest(
        serve=ServeOptions(),
        workload=WorkloadSpec(num_prompts=8, input_len=64, output_len=8),
    )
    result = simulate(spec, gpu, request)
    assert result.untimed_parts and all(isinstance(p, str) for p in result.untimed_parts)
    (interval,) = [n for n in result.notes if n.id == "sim-interval"]
    assert interval.value("parts") == result.untimed_parts
    assert interval.value("evidence") == intervals.PARTIAL  # (one lab's vLLM runs: no /vllm)
    # its bench_interval is the partial class's at the run's untimed fraction, not the A100
    # tables' own class's
    run = result.runs[0]
    bench, shown = run.bench, run.bench_interval["output_throughput"]
    engine = run.engine
    untimed = intervals.Untimed(
        "vllm",
        engine.untimed_time_fraction,
        engine.ttft_untimed_fraction,
        engine.frontend_request_fraction,
    )
    assert 0 < untimed.time_fraction < 1
    for cls, other in ((intervals.PARTIAL, True), ("own", False)):
        ends = intervals.interval(
            bench.output_throughput, "output_throughput", cls, "fixed", (), untimed
        )
        assert (tuple(ends) == tuple(shown)) is other
    from kvplan.present.notes import note_text  # the note's words name each part

    text = note_text(interval)
    assert all(p in text for p in result.untimed_parts)
    # one part, no backend flag: "it", and no words about backends
    assert "prices it by a stand-in" in text and "backend" not in text


def test_the_note_speaks_of_backends_only_where_a_flag_is_untimed():
    from kvplan.notes import note
    from kvplan.present.notes import note_text

    flags = (
        "the bf16 fused MoE of this shape and split",
        "the attention under --attention-backend triton",
    )
    text = note_text(
        note("sim-interval", evidence="partial", parts=flags, calibrated=True, widen=1.0)
    )
    assert "prices each by a stand-in" in text and "under a backend flag" in text
    assert f"{flags[0]} and {flags[1]}" in text
    plain = note_text(note("sim-interval", evidence="own", parts=(), calibrated=True, widen=1.0))
    assert "No kernel table" not in plain


@pytest.mark.parametrize(
    ("model", "parts"),
    [("qwen3-8b", []), ("gpt-oss-20b", ["the mxfp4 fused MoE of this shape and split"])],
)
def test_json_carries_the_parts_for_simulate_and_each_plan_candidate(model, parts):
    small = "--gpu a100 --input-len 128 --output-len 8".split()
    doc = run_json("simulate", model, *small, "--num-prompts", "8")
    assert doc["untimed_parts"] == parts
    (interval,) = [n for n in doc["notes"] if n["id"] == "sim-interval"]
    assert all(p in interval["text"] for p in parts)
    one = "--rate 2 --slo tpot_p99=200ms --tp 1 --max-num-seqs 64 --top 1".split()
    plan = run_json("plan", model, *small, *one, "--num-prompts", "20")
    (top,) = plan["candidates"]
    assert top["untimed_parts"] == parts
    assert top["interval_class"].split("/")[0] == ("partial" if parts else "own")


@pytest.mark.parametrize(
    ("gpu", "engine", "table", "fmt"),
    [
        ("h100", "vllm", "h100_sxm.vllm.0.14.0.json", "mxfp4"),
        ("b200", "vllm", "b200_sxm.vllm.0.24.0.json", "mxfp4"),
        # SGLang on Blackwell: MXFP8 activations (the default flashinfer_mxfp4 precision)
        ("b200", "sglang", "b200_sxm.sglang.0.5.14.json", "mxfp4a8"),
    ],
)
def test_mxfp4_experts_read_their_own_curve_not_the_int4_rows(gpu, engine, table, fmt):
    """gpt-oss's experts read the tables' MXFP4 rows of the kernel the engine runs at their own
    shape and split (moe_<fmt>_2880x2880_<experts>x4_tp<tp>_ep1: W4A16 under vLLM, W4A8 with
    MXFP8 activations under SGLang on Blackwell), never the int4 W4A16 ("4bit") rows; the
    step's fused MoE at a token count is that curve's time there."""
    from kvplan.formulas.batch_step import moe_kernel_s
    from kvplan.inputs.kernel_tables import moe_curves

    for model, experts, tp in (("openai/gpt-oss-20b", 32, 1), ("openai/gpt-oss-120b", 128, 2)):
        spec = load_model(model, checkpoint=False)
        replica = build_replica(spec, load_profile(gpu), ServeOptions(tp=tp, engine=engine))
        curve = moe_curves(table)[f"moe_{fmt}_2880x2880_{experts}x4_tp{tp}_ep1"]
        assert replica.model.moe_curve == curve
        assert not any(key.startswith("moe_4bit_2880x2880") for key in moe_curves(table))
        assert moe_kernel_s(replica.model.moe_curve, 16) == curve[4][1]  # tokens 1,2,4,8,16
        other = "mxfp4a8" if fmt == "mxfp4" else "mxfp4"
        assert replica.model.moe_curve != moe_curves(table).get(
            f"moe_{other}_2880x2880_{experts}x4_tp{tp}_ep1"
        )


def test_the_fused_moe_format_key_of_each_weights_format():
    """Which of the tables' fused-MoE keys a model's experts read: MXFP4 and NVFP4 their own,
    int4 at any group size the W4A16 rows ("4bit"), block fp8 "fp8"."""
    from kvplan.formulas.batch_step import _moe_format

    assert _moe_format("mxfp4") == "mxfp4"
    assert _moe_format("nvfp4") == "nvfp4"
    assert _moe_format("int4-g32-sym") == "4bit"
    assert _moe_format("fp8") == "fp8"


@pytest.mark.parametrize(
    ("gpu", "version", "timed"),
    [
        ("h100", "0.10.2", False),  # Hopper before triton_kernels was a dependency: Marlin
        ("h100", "0.11.0", False),
        ("h100", "0.11.1", True),  # OpenAI's Triton kernels, the rows' kernel
        ("h100", "0.19", True),
        ("h200", "0.11.0", False),
        ("b200", "0.10.2", True),  # Blackwell: FlashInfer's kernel, the rows' kernel
    ],
)
def test_vllm_before_0_11_1_on_hopper_runs_an_mxfp4_moe_no_table_times(gpu, version, timed):
    """vLLM's MXFP4 fused MoE on Hopper is OpenAI's Triton kernels only from 0.11.1 (PR #27370
    made triton_kernels a dependency; before, Marlin): aiconfigurator's rows at gpt-oss's shapes
    time the Triton kernels, so older releases leave the experts untimed there."""
    from kvplan.engines.vllm import mxfp4_moe_rows_run

    assert mxfp4_moe_rows_run(load_profile(gpu), version) is timed
    parts = _parts("openai/gpt-oss-20b", gpu, vllm_version=version)
    assert any(p.startswith("the mxfp4 fused MoE") for p in parts) is not timed
    # nor does the rows' floor apply: the experts pay the family's smallest fused MoE
    spec = load_model("openai/gpt-oss-20b", checkpoint=False)
    options = ServeOptions(vllm_version=version)
    replica = build_replica(spec, load_profile(gpu), options)
    floors = tables_for(load_profile(gpu), "vllm").floors_s
    moe_layers = spec.moe.num_layers
    key = "moe_mxfp4_2880x2880_32x4_tp1_ep1"
    per_layer = replica.model.floors.experts_s / moe_layers
    assert per_layer == pytest.approx(floors[key] if timed else floors["moe"])


@pytest.mark.parametrize(("gpu", "timed"), [("h100", False), ("h200", False), ("b200", True)])
def test_sglang_before_blackwell_runs_an_mxfp4_moe_no_table_times(gpu, timed):
    """SGLang runs gpt-oss's experts through triton_kernels' matmul_ogs before Blackwell (note
    sim-weak-gpt-oss-sglang); its tables' w4a16_mxfp4 rows there time its own Triton fused MoE
    and Marlin, so the experts stay untimed; on a B200 its rows time FlashInfer's kernel."""
    parts = _parts("openai/gpt-oss-20b", gpu, engine="sglang")
    assert any(p.startswith("the mxfp4 fused MoE") for p in parts) is not timed


@pytest.mark.parametrize(
    ("version", "timed"),
    [("0.5.13", False), ("0.5.14", True), ("0.5.16", True), ("0.5.17", False), ("0.5", False)],
)
def test_sglang_on_sm120_runs_the_rows_marlin_moe_only_from_0_5_14_to_0_5_16(version, timed):
    """The RTX PRO 6000's SGLang rows (aiconfigurator-core, 0.5.14) time the Marlin MXFP4 MoE
    that SGLang picks for gpt-oss on SM120 from 0.5.14 (PR #28231; triton_kernels' matmul_ogs
    before, and at a bare 0.5, April 2026's main) until FlashInfer's CUTLASS MXFP4 MoE replaced
    it after 0.5.16 (PR #32668): elsewhere the experts stay untimed, and a note says which
    kernel runs."""
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.simulate.workload import WorkloadSpec

    parts = _parts("openai/gpt-oss-20b", "rtx-pro-6000", engine="sglang", sglang_version=version)
    assert any(p.startswith("the mxfp4 fused MoE") for p in parts) is not timed
    request = SimulateRequest(
        serve=ServeOptions(engine="sglang", sglang_version=version),
        workload=WorkloadSpec(num_prompts=4, input_len=64, output_len=4),
    )
    spec = load_model("openai/gpt-oss-20b", checkpoint=False)
    result = simulate(spec, load_profile("rtx-pro-6000"), request)
    assert ("sim-gpt-oss-sm120-kernel" in {n.id for n in result.notes}) is not timed
