"""scripts/bench_dispatch.py (issue 34: the host side of an eager launch) runs in its quick mode,
and the data file it wrote, kvplan/data/kernel_tables/host_dispatch.json, agrees with the script's
op lists, with its own totals and with kvplan's launch counts. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from kvplan.formulas.batch_step import HOST_OVERHEADS, layer_launches
from kvplan.inputs.kernel_tables import FOLDER
from kvplan.inputs.sources import load_model

from helpers import load_script

bench = load_script("bench_dispatch")


def _check_consistent(result: dict) -> None:
    for key in ("source", "derived_by", "cpu", "torch_version", "python_version"):
        assert result[key], key
    # meta and cpu always; cuda where the run had a GPU, and then it names it
    assert set(bench.DEVICES) <= set(result["devices"]) <= {*bench.DEVICES, "cuda"}
    assert (result["cuda_device"] is not None) == ("cuda" in result["devices"])
    for figures in result["devices"].values():
        layers = figures["layers"]
        assert list(layers) == list(bench.LAYERS)
        for name, layer in layers.items():
            # the file's ops are the script's, in the order the layer launches them
            assert [op["op"] for op in layer["ops"]] == [op for op, _ in bench.LAYERS[name]]
            assert layer["launches"] == len(layer["ops"])
            assert all(op["host_us"] > 0 and op["aten_calls"] >= 1 for op in layer["ops"])
            assert layer["host_us_per_launch"] == pytest.approx(
                layer["layer_host_us"] / layer["launches"], abs=0.01
            )
        assert figures["moe_over_dense"] == pytest.approx(
            layers["moe_qwen3"]["layer_host_us"] / layers["dense_llama"]["layer_host_us"],
            abs=0.001,
        )


def test_the_quick_mode_runs_and_its_result_is_consistent(tmp_path):
    out = tmp_path / "host_dispatch.json"
    assert bench.main(["--quick", "--write", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["quick"] is True
    _check_consistent(result)


def test_the_shipped_file_is_a_full_run_of_the_script():
    result = json.loads((FOLDER / "host_dispatch.json").read_text())
    assert result["quick"] is False
    _check_consistent(result)


def test_the_benchmarked_layers_launch_what_kvplan_counts():
    """The dense layer is host_overheads.json's reference layer (10 launches) and the MoE layer
    launches what kvplan counts for a Qwen3 MoE layer (layer_launches), so the benchmark's
    per-launch figures read against the same launches the per-launch prices divide by."""
    layers = bench.LAYERS
    assert len(layers["dense_llama"]) == HOST_OVERHEADS.reference_layer_launches
    qwen3_moe = load_model("qwen3-30b-a3b")
    assert len(layers["moe_qwen3"]) * qwen3_moe.num_layers == layer_launches(qwen3_moe)
