"""The kernel-tables note states the launch costs the step model charges (HostOverheads), not
the per-layer constants it no longer charges as such."""

from __future__ import annotations

from kvplan.formulas.batch_step import HOST_OVERHEADS

from helpers import run_json


def test_the_kernel_tables_note_states_the_launch_costs_charged():
    data = run_json("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "20")
    text = next(n["text"] for n in data["notes"] if n["id"] == "sim-kernel-tables")
    graph_us = HOST_OVERHEADS.per_layer_s / HOST_OVERHEADS.reference_layer_launches * 1e6
    assert f"pays {graph_us:.1f} us for each kernel a layer launches" in text
    assert f"measured host cost ({HOST_OVERHEADS.eager_per_launch_s * 1e6:.1f} us)" in text
    assert "32 us per layer" not in text
