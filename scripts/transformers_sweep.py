#!/usr/bin/env python3
"""Every model type the installed transformers knows with a causal-LM or image-text-to-text head,
built from its config class's defaults and compared with kvplan: the parameter count on the meta
device (the language model as the wrapper builds it, with its lm_head) and the attention layout
(which layers hold K/V, how many KV heads, how wide). A new family kvplan misreads is found the day
transformers ships it.

Run it after transformers updates, from OUTSIDE the repository (the repo's top-level `kernels/`
folder shadows a PyPI package transformers imports), with kvplan installed in the environment:

    cd /tmp && python /path/to/kvplan/scripts/transformers_sweep.py [--only TYPE ...] [--json OUT]

Each model type ends in one verdict:
  exact      kvplan's parameters equal transformers' and every layer's K/V width agrees
  close      parameters within 0.01 %, layout equal
  refused    kvplan exits with a message (loud, as designed: nothing to fix unless it should answer)
  noted      kvplan answers an unknown type from structure, disagrees, and says it sized it from
             structure (an estimate with a note; worth a family row if the type matters)
  WRONG      kvplan answers and disagrees without such a note (the case this script exists for:
             a silent miss)
  skipped    transformers itself cannot build the default model on the meta device
Exit status 1 when any type is WRONG. tests/test_transformers_sweep.py runs it in the slow tests.
"""

from __future__ import annotations

import argparse
import json
import sys

TOLERANCE = 1e-4  # 0.01 %
# where a multimodal wrapper keeps its language model (idefics2/3 and smolvlm: text_model)
LANGUAGE_PARTS = ("language_model", "text_model")


def model_types() -> list[str]:
    from transformers.models.auto import modeling_auto as auto

    names = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    names |= set(getattr(auto, "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", {}))
    return sorted(names)


def transformers_side(model_type: str):
    """(config dict, language-model parameters, per-layer (KV heads, K width, V width) or None
    where the layout is not read from the model)."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    try:
        from transformers import AutoModelForImageTextToText
    except ImportError:  # pragma: no cover - old transformers
        AutoModelForImageTextToText = None
    config = CONFIG_MAPPING[model_type]()
    raw = config.to_dict()
    model = None
    for auto in (AutoModelForCausalLM, AutoModelForImageTextToText):
        if auto is None:
            continue
        try:
            with torch.device("meta"):
                model = auto.from_config(config)
            break
        except Exception:  # noqa: BLE001 - the next head may fit
            continue
    if model is None:
        raise RuntimeError("transformers cannot build it on the meta device")
    names = dict(model.named_parameters())

    def language(name: str) -> bool:
        return any(part in name for part in LANGUAGE_PARTS)

    wrapped = any(language(n) for n in names)
    params = sum(
        p.numel() for n, p in names.items() if not wrapped or language(n) or n.startswith("lm_head")
    )
    layout = []
    for name, module in model.named_modules():
        if wrapped and not language(name):
            continue  # the vision or audio tower's attention is not the language model's cache
        # a linear-attention mixer named self_attn (Kimi Linear's KDA) has k_proj and v_proj and
        # keeps no K/V cache: its short convolution (conv1d) tells it from softmax attention
        recurrent = hasattr(module, "conv1d")
        if (
            name.endswith("self_attn")
            and hasattr(module, "k_proj")
            and hasattr(module, "v_proj")
            and not recurrent
        ):
            k, v = module.k_proj.out_features, module.v_proj.out_features
            layout.append((k, v))
    return raw, params, layout or None


def kvplan_side(raw: dict):
    from kvplan.inputs.architectures import build_model

    spec = build_model(raw, raw.get("model_type", "?"))
    layout = [
        (a.num_kv_heads * a.head_dim, a.num_kv_heads * a.head_dim_v)
        for a in spec.attention_layers()
        if not a.mla_kv_lora_rank and not a.shared_kv_proj
    ]
    noted = any(n.id in ("structure-read", "structure-unread") for n in spec.notes)
    return spec.params_total, layout, noted


def verdict(model_type: str) -> dict:
    from kvplan.errors import KvplanError

    try:
        raw, theirs, their_layout = transformers_side(model_type)
    except Exception as exc:  # noqa: BLE001 - recorded
        return {
            "type": model_type,
            "verdict": "skipped",
            "why": f"{type(exc).__name__}: {exc}"[:200],
        }
    try:
        ours, our_layout, noted = kvplan_side(raw)
    except KvplanError as exc:
        return {"type": model_type, "verdict": "refused", "why": str(exc)[:300]}
    except Exception as exc:  # noqa: BLE001 - a crash is a bug, reported as WRONG
        return {"type": model_type, "verdict": "WRONG", "why": f"crash {type(exc).__name__}: {exc}"}
    off = abs(ours - theirs) / theirs if theirs else float(ours != theirs)
    # the K and V projection widths of every plain attention layer, as a multiset
    layout_ok = their_layout is None or sorted(our_layout) == sorted(their_layout)
    row = {"type": model_type, "kvplan": ours, "transformers": theirs, "off": off}
    if ours == theirs and layout_ok:
        row["verdict"] = "exact"
    elif off <= TOLERANCE and layout_ok:
        row["verdict"] = "close"
    else:
        # an unknown type sized from structure says so in a note: an estimate, not a silent miss
        row["verdict"] = "noted" if noted else "WRONG"
        row["why"] = (
            f"parameters {ours:,} vs {theirs:,} ({off:.2%})"
            if off > TOLERANCE
            else f"K/V layout {sorted(set(our_layout))} vs {sorted(set(their_layout))}"
        )
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = [verdict(t) for t in model_types() if not args.only or t in args.only]
    for row in rows:
        detail = row.get("why") or f"{row['kvplan']:,} vs {row['transformers']:,}"
        print(f"{row['type']:32s} {row['verdict']:8s} {detail[:150]}", flush=True)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    print(" ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 1 if counts.get("WRONG") else 0


if __name__ == "__main__":
    sys.exit(main())
