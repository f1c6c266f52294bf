"""The figures kvplan's notes quote about its accuracy on published runs come from one data
file (kvplan/data/published_accuracy.json), never from literals in the note text; the slow
accuracy test checks the file against a fresh run."""

from __future__ import annotations

import json

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.published_accuracy import FILE, held_out_accuracy
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.present.notes import note_text
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import WorkloadSpec


def test_the_sglang_note_quotes_the_data_file():
    known = held_out_accuracy("sglang")
    assert known is not None and known.runs > 0
    spec = load_model("llama-3.1-8b", checkpoint=False)
    result = simulate(
        spec,
        load_profile("h100"),
        SimulateRequest(
            serve=ServeOptions(engine="sglang"),
            workload=WorkloadSpec(num_prompts=4, input_len=64, output_len=8),
        ),
    )
    (weak,) = [n for n in result.notes if n.id == "sim-weak-sglang"]
    text = note_text(weak)
    for value in (known.output_throughput, known.median_tpot_ms, known.median_ttft_ms):
        assert f"{value:.0%}" in text
    assert f"On {known.runs} published SGLang runs ({known.cases}" in text


def test_an_engine_without_figures_has_none():
    doc = json.loads(FILE.read_text())
    assert "no-such-engine" not in doc["heldout"]
    assert held_out_accuracy("no-such-engine") is None
