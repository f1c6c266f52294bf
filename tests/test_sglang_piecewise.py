"""SGLang's piecewise CUDA graphs for prefill batches, by release (engines.sglang
piecewise_prefill): the default from 0.5.10 (PR #16331), opt-in before
(--enable-piecewise-cuda-graph), off with --disable-piecewise-cuda-graph, up to
--piecewise-cuda-graph-max-tokens (chunked_prefill_size, 2,048 for MLA), and off for the
configurations _handle_piecewise_cuda_graph excludes."""

from __future__ import annotations

import json

import pytest

from kvplan.engines.sglang import PiecewiseFlags, piecewise_default_on, piecewise_prefill
from kvplan.formulas.batch_step import BatchShape
from kvplan.inputs.hardware import load_profile as load_gpu
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import REPO, run_cli, run_json

HOST = json.loads((REPO / "kvplan/data/kernel_tables/host_overheads.json").read_text())
QWEN3_8B = load_model("qwen3-8b")  # 36 layers
H100 = load_gpu("h100")
PREFILL_1000 = BatchShape(0, 0, ((1000, 0),), 1)


def _launch_s(version: str = "0.5", **fields) -> float:
    """The launch term of a lone 1,000-token prefill on qwen3-8b, H100, TP 1."""
    options = ServeOptions(engine="sglang", sglang_version=version, **fields)
    model = build_replica(QWEN3_8B, H100, options).model
    return model.step(PREFILL_1000).terms_s["launch_s"]


def _graphed_s() -> float:
    """The same step's launch term under graphs, by hand: a dense GQA layer launches 10 kernels
    (the reference layer: per_layer_s is 10 launches' cost), of which its 4 GEMMs are in their
    measured times: 36 layers x 6 launches x per_layer_s / 10, at least the small kernels'
    floor (StepModel._forward)."""
    model = build_replica(QWEN3_8B, H100, ServeOptions(engine="sglang")).model
    graphed = 36 * 6 * HOST["per_layer_s"] / HOST["reference_layer_launches"]
    return max(graphed, model.floors.small_s or 0.0)


EAGER_S = 36 * HOST["eager_per_layer_s"]  # 36 layers x 0.8 ms = 28.8 ms


def test_release_default_from_0_5_10():
    assert [piecewise_default_on(v) for v in ("0.4.6", "0.5.6", "0.5.9", "0.5.9.post1")] == [
        False
    ] * 4
    # 0.5.10 on, a bare 0.5 and 0.6 (0.5's newest rules) too
    assert all(piecewise_default_on(v) for v in ("0.5.10", "0.5.10.post1", "0.5.14", "0.5", "0.6"))


def test_a_1000_token_prefill_with_and_without_the_default():
    """0.5.10 replays the 1,024-token piecewise graph (max tokens = chunked_prefill_size
    8,192 on an H100): graph launch costs; 0.5.9 runs it eagerly: 36 x 0.8 ms."""
    graphed = _graphed_s()
    assert graphed < 2e-3
    assert _launch_s("0.5.10") == pytest.approx(graphed)
    assert _launch_s("0.5.9") == pytest.approx(EAGER_S)
    assert _launch_s("0.5") == pytest.approx(graphed)  # the default release: the newest rules


def test_the_flags_override_the_release():
    graphed = _graphed_s()
    on = PiecewiseFlags(enable=True)
    assert _launch_s("0.5.9", piecewise=on) == pytest.approx(graphed)
    off = PiecewiseFlags(disable=True)
    assert _launch_s("0.5.10", piecewise=off) == pytest.approx(EAGER_S)
    # a cap below the batch: eager above it, graphs up to it
    assert _launch_s("0.5.10", piecewise=PiecewiseFlags(max_tokens=999)) == pytest.approx(EAGER_S)
    assert _launch_s("0.5.10", piecewise=PiecewiseFlags(max_tokens=1000)) == pytest.approx(graphed)
    # a decode step keeps its own graphs whatever the prefill's
    options = ServeOptions(engine="sglang", sglang_version="0.5.10", piecewise=off)
    model = build_replica(QWEN3_8B, H100, options).model
    assert model.step(BatchShape(8, 8 * 1000, (), 8)).terms_s["launch_s"] == pytest.approx(graphed)


def test_without_piecewise_graphs_the_former_price_stays():
    """Without piecewise graphs (0.5.9) SGLang runs a 200-token prefill eagerly, but kvplan
    keeps pricing it as a graph step (up to the decode graphs' largest batch, 256 on an H100
    at TP 1: SGLang's eager cost is not measured, the note says so); with them capped below
    it (--piecewise-cuda-graph-max-tokens 100 on 0.5.10) it runs eagerly: 36 x 0.8 ms."""

    def launch(version: str, flags: PiecewiseFlags) -> float:
        options = ServeOptions(engine="sglang", sglang_version=version, piecewise=flags)
        model = build_replica(QWEN3_8B, H100, options).model
        return model.step(BatchShape(0, 0, ((200, 0),), 1)).terms_s["launch_s"]

    assert launch("0.5.9", PiecewiseFlags()) == pytest.approx(_graphed_s())
    assert launch("0.5.10", PiecewiseFlags(max_tokens=100)) == pytest.approx(EAGER_S)


def test_default_max_tokens_chunked_prefill_or_2048_for_mla():
    flags = PiecewiseFlags()
    assert piecewise_prefill(QWEN3_8B, "0.5.10", flags, 8192) == (8192, None)
    assert piecewise_prefill(load_model("deepseek-v2-lite"), "0.5.10", flags, 8192) == (2048, None)
    assert piecewise_prefill(QWEN3_8B, "0.5.10", PiecewiseFlags(max_tokens=4096), 8192) == (
        4096,
        None,
    )


def test_excluded_configurations_run_prefill_eagerly():
    flags = PiecewiseFlags()
    for name, reason in (
        ("qwen3-next-80b-a3b", "qwen3_next's architecture"),
        ("deepseek-v3.2", "a DSA model"),
        ("qwen3-vl-8b", "a multimodal model"),
    ):
        assert piecewise_prefill(load_model(name), "0.5.10", flags, 8192) == (0, reason)
    # even when asked for: --enable-piecewise-cuda-graph does not skip the checks
    on = PiecewiseFlags(enable=True)
    assert piecewise_prefill(load_model("deepseek-v3.2"), "0.5.9", on, 8192).tokens == 0
    # pipeline parallelism: qwen3-8b at PP 2 on 0.5.10, every prefill eager
    assert _launch_s("0.5.10", pp=2) == pytest.approx(EAGER_S)


def test_the_note_says_the_release_and_the_reason():
    args = ("--num-prompts", "1", "--input-len", "1000", "--output-len", "1")
    base = ("simulate", "qwen3-8b", "--gpu", "h100", "--engine", "sglang", *args)
    on = run_json(*base, "--engine-version", "0.5.10")
    text = next(n["text"] for n in on["notes"] if n["id"] == "sim-sglang")
    assert "SGLang 0.5.10 runs them here" in text and "up to 8,192 tokens" in text
    assert "not a kernel measurement" in text
    off = run_json(*base, "--engine-version", "0.5.9")
    text = next(n["text"] for n in off["notes"] if n["id"] == "sim-sglang")
    assert "SGLang 0.5.9 runs none here (off by default before 0.5.10)" in text
    # SGLang then runs every prefill batch eagerly; kvplan keeps its former price
    assert "kvplan still prices one of up to 256 tokens (the decode graphs' largest" in text
    pp = run_json(*base, "--pp", "2")
    text = next(n["text"] for n in pp["notes"] if n["id"] == "sim-sglang")
    assert "runs none here (pipeline parallelism)" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            (
                "--engine",
                "sglang",
                "--disable-piecewise-cuda-graph",
                "--enable-piecewise-cuda-graph",
            ),
            "give one of",
        ),
        (
            ("--engine", "sglang", "--engine-version", "0.4.6", "--disable-piecewise-cuda-graph"),
            "SGLang 0.4 has no piecewise CUDA graphs",
        ),
        (("--engine", "vllm", "--disable-piecewise-cuda-graph"), "is SGLang's"),
        (("--engine", "sglang", "--piecewise-cuda-graph-max-tokens", "0"), "0"),
    ],
)
def test_bad_flags_one_line_exit_2(argv, message):
    code, _, err = run_cli("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "1", *argv)
    assert code == 2 and message in err and "Traceback" not in err


PLAN = (
    *("plan", "qwen3-8b", "--gpu", "h100", "--rate", "2", "--input-len", "512"),
    *("--output-len", "64", "--slo", "ttft_p99=2s", "--tp", "1", "--max-num-seqs", "64"),
    *("--kv-cache-dtype", "auto", "--num-prompts", "20", "--jobs", "1"),
)


def test_plan_takes_and_emits_the_flags():
    data = run_json(
        *PLAN, "--emit", "sglang", "--disable-piecewise-cuda-graph",
        "--piecewise-cuda-graph-max-tokens", "2048",
    )  # fmt: skip
    flags = "--disable-piecewise-cuda-graph --piecewise-cuda-graph-max-tokens 2048"
    assert data["mode_flags"] == flags
    assert data["candidates"], data["rejections"]
    assert all(c["command"].endswith(flags) for c in data["candidates"])
    assert "mode_flags" not in run_json(*PLAN, "--emit", "sglang")  # the defaults: unsaid
    code, _, err = run_cli(*PLAN, "--enable-piecewise-cuda-graph")  # --emit vllm
    assert code == 2 and "is SGLang's: give --emit sglang" in err


@pytest.mark.parametrize(
    ("version", "tokens"),
    [("0.5.10", 0), ("0.5.12", 0), ("0.5", 0), ("0.5.13", 2048), ("0.5.23", 2048)],
)
def test_dsa_models_keep_piecewise_graphs_from_0_5_13(version, tokens):
    """0.5.12's model_config.py:330-332 ORs is_deepseek_nsa into
    is_piecewise_cuda_graph_disabled_model; 0.5.13's (:330-331) and later ones drop it (their
    piecewise_cuda_graph_disabled_model_archs names no DSA architecture), so DeepSeek-V3.2 and
    GLM-5 replay piecewise prefill graphs up to the MLA max (2,048) from 0.5.13."""
    for name in ("deepseek-v3.2", "glm-5"):
        got = piecewise_prefill(load_model(name), version, PiecewiseFlags(), 8192)
        assert got.tokens == tokens, (name, version)
        assert (got.off_because == "a DSA model") == (tokens == 0)
