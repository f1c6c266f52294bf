"""SGLang's detokenizer on Moonshot's tiktoken tokenizer (issue 34): a serving path kvplan does not
time. The checkpoints that ship it are told by the model_type their config.json writes at its top
(kvplan reads their layers as deepseek_v3); a simulation of one under SGLang says so in a note and
takes the untimed interval class where intervals.json has one."""

from __future__ import annotations

import math

import pytest

from kvplan.engines.sglang import detokenizer_untimed
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import WorkloadSpec


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
