"""SGLang's detokenizer on Moonshot's tiktoken tokenizer (issue 34): one CPU process per server,
timed per streamed token by release (scripts/bench_detokenizer.py). The checkpoints that ship it are told by the model_type their config.json writes at its top
(kvplan reads their layers as deepseek_v3); a simulation of one under SGLang says so in a note and
takes the untimed interval class where intervals.json has one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.engines import sglang as sglang_rules
from kvplan.engines.sglang import detokenizer_path, detokenizer_token_s, detokenizer_untimed
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import detokenizer_data
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate.engine import serial_stage_s
from kvplan.simulate.setup import ServeOptions, build_replica
from kvplan.simulate.workload import WorkloadSpec

from helpers import load_script


@pytest.mark.parametrize(
    ("model", "layers_type", "config_type", "untimed"),
    [
        ("moonshotai/Kimi-K2.5", "deepseek_v3", "kimi_k25", True),
        ("moonshotai/Kimi-K2-Instruct", "deepseek_v3", "kimi_k2", True),
        ("deepseek-ai/DeepSeek-V3", "deepseek_v3", None, False),  # same layers, its own tokenizer
        ("llama-3.1-8b", "llama", None, False),
    ],
)
def test_the_checkpoints_own_model_type_tells_moonshots_tokenizer(
    model, layers_type, config_type, untimed
):
    spec = load_model(model, checkpoint=False)
    assert (spec.model_type, spec.config_model_type) == (layers_type, config_type)
    assert detokenizer_untimed(spec) is untimed


def _notes(model: str, engine: str) -> set[str]:
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=4, input_len=64, output_len=16, seed=0),
        rates=(math.inf,),
        serve=ServeOptions(tp=8, engine=engine),
    )
    result = simulate(load_model(model, checkpoint=False), load_profile("h200"), request)
    return {n.id for n in result.notes}


def test_a_kimi_run_under_sglang_says_its_detokenizer_is_untimed():
    assert "sim-weak-detokenizer" in _notes("moonshotai/Kimi-K2.5", "sglang")
    # vLLM detokenizes in its API server, which kvplan times: no such note there
    assert "sim-weak-detokenizer" not in _notes("moonshotai/Kimi-K2.5", "vllm")
    assert "sim-weak-detokenizer" not in _notes("deepseek-ai/DeepSeek-V3", "sglang")


# ---- the detokenizer timed (kvplan/data/kernel_tables/sglang_detokenizer.json) ----------------


@pytest.mark.parametrize(
    ("version", "path"),
    [
        ("0.4.9.post2", "hf_kwargs"),  # 0.4's detokenizer passed the same keywords
        ("0.5.6.post2", "hf_kwargs"),  # the release the cookbook's Kimi-K2.5 page names
        ("0.5.8", "hf_kwargs"),  # #16427's cache ships, off by default
        ("0.5.10.post1", "hf_kwargs"),
        ("0.5.11", "cached_special"),  # SGLANG_PATCH_TOKENIZER defaults to True
        ("0.5.12.post1", "cached_special"),
        ("0.5.13", "native"),  # #25309: decode without keywords
        ("0.5.20", "native"),
        ("0.5", "native"),  # a bare release runs the newest rules
    ],
)
def test_the_decode_path_follows_the_release(version, path):
    kimi = load_model("moonshotai/Kimi-K2.5", checkpoint=False)
    assert detokenizer_path(kimi, version) == path
    deepseek = load_model("deepseek-ai/DeepSeek-V3", checkpoint=False)
    assert detokenizer_path(deepseek, version) is None
    assert detokenizer_token_s(deepseek, version) == 0.0


def test_the_slow_paths_cost_what_the_data_file_says_and_native_nothing():
    kimi = load_model("moonshotai/Kimi-K2-Instruct", checkpoint=False)
    rows = detokenizer_data().per_request_token_s
    raw, cached = detokenizer_token_s(kimi, "0.5.6.post1"), detokenizer_token_s(kimi, "0.5.11")
    assert (raw, cached) == (rows["hf_kwargs"], rows["cached_special"])
    # #16427's cache drops the per-token rebuilds (on 1- and 2-token windows the per-call
    # added-token set still costs); the native path is not timed
    assert 0 < cached < raw
    assert detokenizer_token_s(kimi, "0.5.13") == 0.0


@pytest.mark.parametrize("steps", [1, 2, 15, 17, 1025])
@pytest.mark.parametrize("busy_s", [0.0, 0.004, 0.05])
def test_serial_stage_matches_a_step_by_step_queue(steps, busy_s):
    ends = np.cumsum(np.random.default_rng(steps).uniform(0.001, 0.02, steps))
    done, free = [], 0.003
    for end in ends:  # the naive reference: each step's tokens wait for the stage, then take it
        free = max(end, free) + busy_s
        done.append(free)
    assert np.allclose(serial_stage_s(ends, 0.003, busy_s), done)


def _kimi_run(concurrency: int, version: str, output_len: int = 64):
    request = SimulateRequest(
        workload=WorkloadSpec(
            num_prompts=2 * concurrency, input_len=256, output_len=output_len, seed=0
        ),
        rates=(math.inf,),
        max_concurrency=concurrency,
        serve=ServeOptions(tp=8, engine="sglang", sglang_version=version),
        series=False,
    )
    spec = load_model("moonshotai/Kimi-K2.5", checkpoint=False)
    return simulate(spec, load_profile("h200"), request).runs[0].bench


# a per-token cost at which 100 requests in flight outpace the detokenizer on 8 H200 (the
# measured rows cap near 10,000 tok/s on the benchmark's CPU, above what the GPUs reach there)
SLOW_TOKEN_S = 4e-3


@pytest.fixture
def slow_detokenizer(monkeypatch):
    data = detokenizer_data()
    slow = data._replace(per_request_token_s=dict.fromkeys(data.per_request_token_s, SLOW_TOKEN_S))
    monkeypatch.setattr(sglang_rules, "detokenizer_data", lambda: slow)


# 0.5.10 (the keyword decode, before 0.5.11) and 0.5.13 (no detokenizer cost) both price on
# SGLang 0.5.10's kernel tables (kernel_tables.nearest_version): only the detokenizer differs
SLOW_RELEASE, FAST_RELEASE = "0.5.10", "0.5.13"


def test_the_detokenizer_caps_the_stream_at_high_concurrency_not_at_one(slow_detokenizer):
    slow, fast = _kimi_run(100, SLOW_RELEASE), _kimi_run(100, FAST_RELEASE)
    # 100 in flight: the GPUs outpace the detokenizer, whose rate the clients receive
    assert slow.output_throughput <= 1.02 / SLOW_TOKEN_S
    assert slow.output_throughput < 0.5 * fast.output_throughput
    assert slow.median_tpot_ms > 2 * fast.median_tpot_ms
    # one in flight: the detokenizer keeps up with the GPU step, the token rate is the GPUs'
    slow1, fast1 = _kimi_run(1, SLOW_RELEASE), _kimi_run(1, FAST_RELEASE)
    assert SLOW_TOKEN_S < 0.9 * fast1.median_tpot_ms / 1e3
    assert slow1.median_tpot_ms == pytest.approx(fast1.median_tpot_ms, rel=0.02)


def test_the_measured_cost_does_not_bind_kimi_on_h200_at_100():
    # kvplan's 8 H200 stream ~2,000 tok/s of Kimi-K2.5 at 100 in flight: under the cap the
    # timed cost sets, so the detokenizer changes the clients' rate by under 2%
    slow, fast = _kimi_run(100, SLOW_RELEASE), _kimi_run(100, FAST_RELEASE)
    per_token_s = detokenizer_data().per_request_token_s["hf_kwargs"]
    assert fast.output_throughput < 1 / per_token_s
    assert slow.output_throughput == pytest.approx(fast.output_throughput, rel=0.02)


def test_other_models_and_engines_get_no_detokenizer_stage():
    h200 = load_profile("h200")
    # 0.5.9: the first release with a model for Kimi-K2.5's architecture, before 0.5.11's cache
    serve = ServeOptions(tp=8, engine="sglang", sglang_version="0.5.9")
    kimi = build_replica(load_model("moonshotai/Kimi-K2.5", checkpoint=False), h200, serve)
    assert kimi.config.detokenizer_token_s > 0
    deepseek = build_replica(load_model("deepseek-ai/DeepSeek-V3", checkpoint=False), h200, serve)
    assert deepseek.config.detokenizer_token_s == 0.0
    vllm = build_replica(
        load_model("moonshotai/Kimi-K2.5", checkpoint=False), h200, ServeOptions(tp=8)
    )
    assert vllm.config.detokenizer_token_s == 0.0


@pytest.mark.parametrize("repeats", ["0", "-5", "1000001"])
def test_bench_detokenizer_refuses_a_repeat_count_out_of_range(repeats, monkeypatch, capsys):
    """--repeats out of 1..1,000,000: a one-line error and exit 2, before anything is timed."""
    bench = load_script("bench_detokenizer")
    monkeypatch.setattr("sys.argv", ["bench_detokenizer.py", "--repeats", repeats])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--repeats" in err and repeats in err
