"""`kvplan models` and `kvplan gpus` as tables."""

from __future__ import annotations

from kvplan.plans.catalog import ModelsResult
from kvplan.plans.gpus import GpusResult
from kvplan.present import format as f
from kvplan.present.view import Column, Table, View, jsonable, view


def models_view(result: ModelsResult) -> View:
    data = jsonable(result)
    for item in data["models"]:
        item["params"] = f"{f.count(item['params_total'])} / {f.count(item['params_active'])}"
    columns = [
        Column("name", "name", f.text, "left"),
        Column("repo_id", "Hugging Face id", f.text, "left", priority=3),
        Column("family", "family", f.text, "left", priority=1),
        Column(
            "params", "params total / active", f.text, raw_keys=("params_total", "params_active")
        ),
        Column("dtype", "dtype", f.text, "left", priority=2),
        Column("kv_bytes_per_token", "KV B/token", f.integer, priority=1),
        Column("long_kv_bytes_per_token", "at 128k", f.integer, notes=("models-kv-per-token",)),
        Column("state_bytes_per_sequence", "state B/seq", f.integer, priority=2),
    ]
    return view("Bundled models", result, tables=[Table("", columns, data["models"])], data=data)


def gpus_view(result: GpusResult) -> View:
    columns = [
        Column("key", "profile", f.text, "left"),
        Column("name", "name", f.text, "left", priority=2),
        Column("aliases", "aliases", f.text, "left", priority=3),
        Column("memory_bytes", "memory (GB)", f.gb_nominal),
        Column("memory_bandwidth_bytes_per_s", "BW (TB/s)", f.tb_per_s),
        Column("bf16_peak_flop_per_s", "bf16 (TFLOP/s)", f.tflop_per_s),
        Column("ridge_bf16_flop_per_byte", "ridge bf16 (FLOP/B)", f.fixed(1)),
        Column("ridge_fp8_flop_per_byte", "ridge fp8 (FLOP/B)", f.fixed(1), priority=1),
        Column("memory_configurations", "name with memory", f.text, "left", priority=4),
    ]
    data = jsonable(result)
    return view("Hardware profiles", result, tables=[Table("", columns, data["gpus"])], data=data)
