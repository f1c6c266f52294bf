#!/usr/bin/env python3
"""Distil scripts/transformers_oracle.py's output into tests/data/transformers_oracle.json's
form: per model the parameter counts, the shrunk config and, per forward pass, each layer's
cache (K/V width per token, tokens held, indexer key width, conv state, recurrent state).

    python scripts/oracle_distill.py oracle.json --prefix real/ [--only NAME ...]

merges the distilled entries into tests/data/transformers_oracle.json under PREFIX + name."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "tests" / "data" / "transformers_oracle.json"


def layer_of(raw: dict) -> dict:
    tensors = {t["name"]: t["shape"] for t in raw["tensors"]}
    out: dict = {"kind": raw["kind"]}
    if "keys" in tensors:
        keys, values = tensors["keys"], tensors.get("values")
        out["kv_width"] = keys[1] * keys[3] + (values[1] * values[3] if values else 0)
        out["tokens"] = keys[2]
        if "indexer_keys" in tensors:
            out["indexer_width"] = tensors["indexer_keys"][-1]
    for name, shape in tensors.items():
        if name.startswith("conv_states"):
            out["conv"] = [shape[1], shape[2]]
        if name.startswith("recurrent_states"):
            out["recurrent"] = math.prod(shape[1:])
    return out


def language_model_params(entry: dict) -> int | None:
    """A multimodal wrapper's language model as the wrapper builds it (its lm_head tied or not by
    the wrapper's own flag): the wrapper's parameters under language_model plus lm_head. None
    for a model without a language_model part."""
    parts = entry.get("param_breakdown") or {}
    if not any("language_model" in key for key in parts):
        return None
    return sum(v for k, v in parts.items() if "language_model" in k or k.startswith("lm_head"))


def distil(entry: dict) -> dict:
    runs = []
    for index, run in enumerate(entry.get("cache_after_forward") or []):
        tokens = run["prompt_len"] + (1 if index == 2 else 0)  # the third is a decode step
        runs.append({"tokens": tokens, "layers": [layer_of(layer) for layer in run["layers"]]})
    return {
        "model_type": entry.get("model_type"),
        "params_total": entry.get("params_total"),
        "params_text_only": entry.get("params_text_only"),
        "params_language_model": language_model_params(entry),
        "runs": runs,
        "shrunk_config": entry.get("shrunk_config") if runs else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("oracle")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    models = json.loads(Path(args.oracle).read_text())["models"]
    data = json.loads(TARGET.read_text())
    for name, entry in sorted(models.items()):
        if args.only and name not in args.only:
            continue
        data["models"][args.prefix + name] = distil(entry)
    TARGET.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
