#!/usr/bin/env python3
"""Independent ground truth from the `transformers` library for kvplan's model configs.

Run it with an environment holding `transformers` and torch, from OUTSIDE the repository (the
repo's top-level `kernels/` folder shadows a PyPI package that transformers imports), with
KVPLAN_REPO pointing at the checkout and the current folder holding any extra configs:

    cd /tmp/oracle && KVPLAN_REPO=/path/to/kvplan python /path/to/kvplan/scripts/transformers_oracle.py

tests/data/transformers_oracle.json is distilled from its output (scripts/oracle_distill.py) (parameter counts and the cache
tensors after real forward passes); the numbers in it were produced with transformers 5.24.0.

For every config file (the ones in the current folder and the ones bundled in
model_configs/) it
  1. loads the config with the transformers config class of its `model_type`
     (never trust_remote_code; an unknown model_type is recorded as unsupported),
  2. builds the model on the meta device and counts unique parameters (tied weights once),
     buffers separately, the text model alone where a text_config exists, and a breakdown,
  3. builds a SHRUNK copy (same layer pattern / head ratios / head-dim fields, few layers,
     small hidden and vocab, windows scaled down to 64) in float32 on CPU, runs real forward
     passes with use_cache=True (37 tokens, 97 tokens, then one decode step after the 97-token
     prefill), and records every cache tensor's shape and dtype per layer.
Failures are recorded with their message; nothing stops the run.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import time
import traceback

import torch
import transformers
from transformers import CONFIG_MAPPING, AutoModel, AutoModelForCausalLM

try:
    from transformers import AutoModelForImageTextToText
except Exception:  # pragma: no cover
    AutoModelForImageTextToText = None

BUNDLED = os.path.join(os.environ.get("KVPLAN_REPO", "."), "model_configs")
SHRUNK_WINDOW = 64
PROMPTS = (37, 97)  # 37 < window, 97 > window
SHRUNK_VOCAB = 512
SHRUNK_FFN = 128
SHRUNK_MOE_FFN = 64
MAX_EXPERTS = 8
MAX_TOPK = 2

# model_type aliases that transformers itself applies in another place; results are reported
# separately under "alias_result" and never replace the "unsupported" verdict.
ALIASES = {
    # transformers' Kimi_K25Config rewrites a text_config model_type "kimi_k2" to "deepseek_v3"
    # (models/kimi_k25/configuration_kimi_k25.py); the stand-alone Kimi-K2 config says kimi_k2
    # with architectures DeepseekV3ForCausalLM.
    "kimi_k2": "deepseek_v3",
}

PER_LAYER_LIST_KEYS = (
    "layer_types",
    "layers_block_type",
    "attn_type_list",
    "no_rope_layers",
    "moe_layers",
    "block_types",
    "layer_block_types",
    "full_attn_idxs",
    "hybrid_layer_pattern",
    "moe_layer_freq",
    "mlp_layer_types",
    "indexer_types",  # GLM-5.3: full / shared indexer per layer
)
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k")
MOE_FFN_KEYS = (
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
)
VISION_LAYER_KEYS = ("num_hidden_layers", "depth", "vt_num_hidden_layers", "num_layers")


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------


def load_json(path):
    with open(path) as f:
        return json.load(f)  # python's json accepts the non-standard Infinity token


def clean_for_transformers(d):
    """Drop keys that would trigger quantizers / remote code; report what was dropped."""
    d = copy.deepcopy(d)
    dropped = []
    for k in ("quantization_config", "auto_map"):
        if k in d:
            d.pop(k)
            dropped.append(k)
    for sub in ("text_config", "language_config", "llm_config"):
        if isinstance(d.get(sub), dict):
            for k in ("quantization_config", "auto_map"):
                if k in d[sub]:
                    d[sub].pop(k)
                    dropped.append(f"{sub}.{k}")
    return d, dropped


def make_config(d):
    mt = d.get("model_type")
    cls = CONFIG_MAPPING[mt]
    return cls.from_dict(d)


def text_config_of(cfg):
    try:
        tc = cfg.get_text_config(decoder=True)
    except TypeError:
        tc = cfg.get_text_config()
    return tc


def has_sub_text_config(cfg):
    tc = text_config_of(cfg)
    return tc is not cfg


# ----------------------------------------------------------------------------------------------
# meta-device counting
# ----------------------------------------------------------------------------------------------


def build_model(cfg, device="meta", prefer_multimodal=False):
    errors = []
    classes = [AutoModelForCausalLM]
    if AutoModelForImageTextToText is not None:
        if prefer_multimodal:
            classes.insert(0, AutoModelForImageTextToText)
        else:
            classes.append(AutoModelForImageTextToText)
    classes.append(AutoModel)
    for auto in classes:
        try:
            with torch.device(device):
                m = auto.from_config(cfg)
            return m, auto.__name__, errors
        except Exception as e:  # try the next auto class
            errors.append(f"{auto.__name__}: {type(e).__name__}: {str(e)[:300]}")
    raise RuntimeError(" | ".join(errors))


def group_key(name):
    parts = name.split(".")
    parts = ["*" if p.isdigit() else p for p in parts]
    return ".".join(parts[:-1]) if len(parts) > 1 else parts[0]


def top_key(name):
    parts = name.split(".")
    out = []
    for p in parts:
        if p.isdigit() or p in ("layers", "h", "blocks", "layer"):
            out.append(p if not p.isdigit() else None)
            break
        out.append(p)
    out = [p for p in out if p is not None]
    return ".".join(out[:3])


def count_model(model):
    params = list(model.named_parameters())  # remove_duplicate=True: tied weights once
    total = sum(p.numel() for _, p in params)
    by_top, by_group = {}, {}
    for n, p in params:
        by_top[top_key(n)] = by_top.get(top_key(n), 0) + p.numel()
        g = group_key(n)
        by_group[g] = by_group.get(g, 0) + p.numel()
    all_named_with_dups = list(model.named_parameters(remove_duplicate=False))
    tied = sorted({n for n, _ in all_named_with_dups} - {n for n, _ in params})
    buffers = list(model.named_buffers())
    buf_total = sum(b.numel() for _, b in buffers)
    persistent = set()
    for mod_name, mod in model.named_modules():
        for bn in getattr(mod, "_buffers", {}):
            if bn not in getattr(mod, "_non_persistent_buffers_set", set()):
                persistent.add(f"{mod_name}.{bn}" if mod_name else bn)
    buf_persistent = sum(b.numel() for n, b in buffers if n in persistent)
    by_buffer = {}
    for n, b in buffers:
        g = group_key(n) + "." + n.split(".")[-1]
        by_buffer[g] = by_buffer.get(g, 0) + b.numel()
    return {
        "params_total": total,
        "tied_parameter_count": len(tied),
        "tied_parameter_names": tied[:12]
        + ([f"... {len(tied) - 12} more"] if len(tied) > 12 else []),
        "buffers": buf_total,
        "buffers_persistent": buf_persistent,
        "buffer_breakdown": by_buffer,
        "param_breakdown": dict(sorted(by_top.items())),
        "param_breakdown_detail": dict(sorted(by_group.items())),
    }


# ----------------------------------------------------------------------------------------------
# shrinking
# ----------------------------------------------------------------------------------------------


def _num_layers(t):
    for k in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(t.get(k), int):
            return k, t[k]
    return None, None


def _minimal_prefix(seq):
    """Shortest prefix that contains every distinct element of seq (at least 2 long)."""
    kinds = set(seq)
    seen = set()
    for i, x in enumerate(seq):
        seen.add(x)
        if seen == kinds:
            return max(i + 1, 2)
    return len(seq)


def shrink_text(t, mt, notes):
    """Shrink a (text) config dict in place-copy. Returns the new dict."""
    t = copy.deepcopy(t)
    lk, L = _num_layers(t)
    if L is None:
        for k in PER_LAYER_LIST_KEYS:
            if isinstance(t.get(k), list):
                L = len(t[k])
                notes.append(f"no layer count key; L={L} taken from len({k}) (not written back)")
                break
        else:
            if isinstance(t.get("hybrid_override_pattern"), str):
                L = len(t["hybrid_override_pattern"])
                notes.append(
                    f"no layer count key; L={L} from hybrid_override_pattern (not written back)"
                )
            else:
                notes.append("no layer count key found; left as is")
                L = 2
    # ---- how many layers to keep --------------------------------------------------------------
    n_new = min(L, 2)
    per_layer_lists = [
        k for k in PER_LAYER_LIST_KEYS if isinstance(t.get(k), list) and len(t[k]) == L
    ]
    for k in per_layer_lists:
        vals = [json.dumps(v) for v in t[k]]
        if k in ("no_rope_layers",):
            n_new = max(n_new, min(L, _minimal_prefix(vals)))
        else:
            n_new = max(n_new, min(L, _minimal_prefix(vals)))
    if isinstance(t.get("hybrid_override_pattern"), str) and len(t["hybrid_override_pattern"]) == L:
        n_new = max(n_new, _minimal_prefix(list(t["hybrid_override_pattern"])))
    if isinstance(t.get("sliding_window_pattern"), int) and t["sliding_window_pattern"] > 1:
        n_new = max(n_new, min(L, t["sliding_window_pattern"]))
    if isinstance(t.get("full_attention_interval"), int) and t["full_attention_interval"] > 1:
        n_new = max(n_new, min(L, t["full_attention_interval"]))
    if isinstance(t.get("interleave_moe_layer_step"), int) and t["interleave_moe_layer_step"] > 1:
        n_new = max(n_new, min(L, 2 * t["interleave_moe_layer_step"]))
    if mt.startswith("llama4") and isinstance(t.get("no_rope_layers"), list) is False:
        n_new = max(n_new, min(L, 4))  # llama4 default: every 4th layer is NoPE
    fk = t.get("first_k_dense_replace")
    if isinstance(fk, int) and fk > 0:
        t["first_k_dense_replace"] = 1
        n_new = max(n_new, 2)
        notes.append(f"first_k_dense_replace {fk} -> 1 (layer 0 dense, layer 1 MoE)")
    if n_new > 16:
        notes.append(f"layer prefix {n_new} capped to 16")
        n_new = 16
    if lk is not None:
        t[lk] = n_new
    for k in per_layer_lists:
        t[k] = t[k][:n_new]
    if isinstance(t.get("hybrid_override_pattern"), str) and len(t["hybrid_override_pattern"]) == L:
        t["hybrid_override_pattern"] = t["hybrid_override_pattern"][:n_new]
    if isinstance(t.get("mlp_only_layers"), list):
        t["mlp_only_layers"] = [i for i in t["mlp_only_layers"] if i < n_new]
    if isinstance(t.get("max_window_layers"), int):
        t["max_window_layers"] = min(t["max_window_layers"], n_new)
    notes.append(f"layers {L} -> {n_new}")

    # ---- heads -------------------------------------------------------------------------------
    hkey = (
        "num_attention_heads"
        if "num_attention_heads" in t
        else ("n_head" if "n_head" in t else None)
    )
    kvkey = None
    for k in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
        if k in t and t[k] is not None:
            kvkey = k
            break
    hidden_key = "hidden_size" if "hidden_size" in t else ("n_embd" if "n_embd" in t else None)
    H = t.get(hkey) if hkey else None
    hidden = t.get(hidden_key) if hidden_key else None
    mla = "kv_lora_rank" in t and t.get("kv_lora_rank")
    explicit_hd = t.get("head_dim") not in (None, 0) and mt not in ("phi3",)
    derived_hd = (hidden // H) if (hidden and H) else None
    if H:
        KV = t.get(kvkey) if kvkey else H
        if t.get("multi_query") and not t.get("new_decoder_architecture"):
            KV = 1
        KV = KV or H
        if mla:
            H2, KV2 = 4, 4
        elif KV == H:
            H2 = KV2 = min(H, 4)
        elif KV == 1:
            H2, KV2 = min(H, 8), 1
        else:
            g = H // KV
            KV2 = min(KV, 2) if g <= 8 else 1
            H2 = KV2 * g
            if H2 > 16:
                notes.append(f"query group {g} capped: heads {H2} -> 16")
                H2 = 16
        t[hkey] = H2
        if kvkey:
            t[kvkey] = KV2
        notes.append(f"heads {H}/{KV} -> {H2}/{KV2}")
        if "swa_num_key_value_heads" in t:  # MiMo-V2-Flash: sliding layers keep twice the KV
            t["swa_num_attention_heads"] = H2
            t["swa_num_key_value_heads"] = 2 * KV2
            notes.append(f"swa heads -> {H2}/{2 * KV2}")
    # ---- hidden ------------------------------------------------------------------------------
    if hidden_key and hidden:
        if mla or explicit_hd or not H:
            new_hidden = 256
        else:
            new_hidden = t[hkey] * derived_hd
        t[hidden_key] = new_hidden
        notes.append(
            f"hidden {hidden} -> {new_hidden} (head_dim {'explicit ' + str(t.get('head_dim')) if explicit_hd else 'derived ' + str(derived_hd)})"
        )
        if "word_embed_proj_dim" in t:
            t["word_embed_proj_dim"] = new_hidden
        if "attention_hidden_size" in t and t["attention_hidden_size"]:
            t["attention_hidden_size"] = 2 * new_hidden
        if "attention_head_dim" in t and t["attention_head_dim"]:
            t["attention_head_dim"] = 2 * new_hidden // t[hkey]
    else:
        new_hidden = hidden
    # ---- ffn -----------------------------------------------------------------------------------
    for k in (
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        "ffn_hidden_size",
        "intermediate_size_mlp",
        "dense_intermediate_size",
    ):
        if isinstance(t.get(k), int) and t[k] > 0:
            t[k] = SHRUNK_FFN
    for k in MOE_FFN_KEYS + ("shared_intermediate_size",):
        if isinstance(t.get(k), int) and t[k] > 0:
            t[k] = SHRUNK_MOE_FFN
    for k in EXPERT_COUNT_KEYS:
        if isinstance(t.get(k), int) and t[k] > MAX_EXPERTS:
            notes.append(f"{k} {t[k]} -> {MAX_EXPERTS}")
            t[k] = MAX_EXPERTS
    for k in TOPK_KEYS:
        if isinstance(t.get(k), int) and t[k] > MAX_TOPK:
            t[k] = MAX_TOPK
    for k in ("n_group", "topk_group"):
        if isinstance(t.get(k), int) and t[k] > 1:
            t[k] = 1
    # ---- DSA indexer ---------------------------------------------------------------------------
    if "index_n_heads" in t:
        t["index_n_heads"] = min(t["index_n_heads"], 4)
        t["index_topk"] = min(t.get("index_topk", 32), 32)
        notes.append("index_n_heads -> <=4, index_topk -> 32 (head dims kept)")
    # ---- linear attention (qwen3_next / qwen3_5) ------------------------------------------------
    if "linear_num_key_heads" in t and "linear_num_value_heads" in t:
        r = max(1, t["linear_num_value_heads"] // t["linear_num_key_heads"])
        t["linear_num_key_heads"] = 2
        t["linear_num_value_heads"] = 2 * r
        notes.append(f"linear heads -> 2/{2 * r} (head dims kept)")
    # ---- mamba / ssm ---------------------------------------------------------------------------
    if mt == "granitemoehybrid" and "mamba_d_head" in t:
        e = t.get("mamba_expand", 2)
        dh = t["mamba_d_head"]
        nh = (e * new_hidden) // dh
        t["mamba_n_heads"] = nh
        g = t.get("mamba_n_groups", 1)
        while nh % g:
            g -= 1
        t["mamba_n_groups"] = g
        notes.append(f"mamba_n_heads -> {nh} (= expand*hidden/d_head), groups {g}")
    if mt == "falcon_h1":
        dh = t.get("mamba_d_head", 64)
        t["mamba_n_heads"] = 8
        t["mamba_d_ssm"] = 8 * dh
        t["mamba_n_groups"] = 1
        notes.append(f"mamba_n_heads -> 8, mamba_d_ssm -> {8 * dh}")
    if mt == "nemotron_h":
        if "mamba_num_heads" in t:
            t["mamba_num_heads"] = 8
            g = t.get("n_groups", 1)
            while 8 % g:
                g -= 1
            t["n_groups"] = g
            notes.append(
                f"mamba_num_heads -> 8, n_groups -> {g} (mamba_head_dim, ssm_state_size kept)"
            )
    if mt == "zamba2":
        dh = t.get("mamba_headdim", 64)
        e = t.get("mamba_expand", 2)
        nh = (e * new_hidden) // dh
        g = t.get("mamba_ngroups", 1)
        while nh % g:
            g -= 1
        t["mamba_ngroups"] = g
        t["n_mamba_heads"] = nh
        notes.append(f"zamba2 n_mamba_heads -> {nh} (= expand*hidden/mamba_headdim), ngroups {g}")
    # ---- windows -------------------------------------------------------------------------------
    maxpos = t.get("max_position_embeddings")
    for k in ("sliding_window", "attention_chunk_size", "sliding_window_size"):
        if isinstance(t.get(k), int) and isinstance(maxpos, int) and t[k] >= maxpos:
            notes.append(
                f"{k} {t[k]} >= max_position_embeddings {maxpos}: left unchanged (no effect)"
            )
            continue
        if isinstance(t.get(k), int) and t[k] > SHRUNK_WINDOW:
            notes.append(f"{k} {t[k]} -> {SHRUNK_WINDOW}")
            t[k] = SHRUNK_WINDOW
    # ---- vocab & token ids -----------------------------------------------------------------------
    for k in ("vocab_size",):
        if isinstance(t.get(k), int):
            t[k] = SHRUNK_VOCAB
    for k in list(t.keys()):
        if ("token_id" in k or "token_index" in k) and k != "vocab_size":
            v = t[k]
            if isinstance(v, int) and v >= SHRUNK_VOCAB:
                t[k] = 1 if k != "pad_token_id" else 0
            elif isinstance(v, list):
                t[k] = [x if (not isinstance(x, int) or x < SHRUNK_VOCAB) else 1 for x in v]
    if "num_nextn_predict_layers" in t:
        t["num_nextn_predict_layers"] = 0
    t["use_cache"] = True
    return t


def shrink_vision(v):
    if not isinstance(v, dict):
        return v
    v = copy.deepcopy(v)
    for k in VISION_LAYER_KEYS:
        if isinstance(v.get(k), int) and v[k] > 1:
            v[k] = 1
    return v


# ----------------------------------------------------------------------------------------------
# cache recording
# ----------------------------------------------------------------------------------------------


def _tensor_desc(name, x):
    return {"name": name, "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}


def _collect(obj, prefix):
    out = []
    if isinstance(obj, torch.Tensor):
        if obj.numel() > 0 or obj.dim() > 1:
            out.append(_tensor_desc(prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_collect(v, f"{prefix}[{k}]"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.extend(_collect(v, f"{prefix}[{i}]"))
    return out


def describe_cache(cache):
    if cache is None:
        return {"cache_class": None, "layers": []}
    res = {"cache_class": type(cache).__name__, "layers": []}
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for i, layer in enumerate(layers):
            entry = {"layer": i, "kind": type(layer).__name__, "tensors": []}
            for attr in ("sliding_window", "cumulative_length"):
                if hasattr(layer, attr) and isinstance(getattr(layer, attr), (int, type(None))):
                    entry[attr] = getattr(layer, attr)
            for k, v in vars(layer).items():
                entry["tensors"].extend(_collect(v, k))
            res["layers"].append(entry)
    else:  # legacy / custom cache objects
        for k, v in vars(cache).items():
            descs = _collect(v, k)
            if descs:
                res["layers"].append({"layer": None, "kind": f"attr:{k}", "tensors": descs})
    return res


def run_forward(model, n_tokens, vocab, past=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab - 1, (1, n_tokens), generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, past_key_values=past)
    return out


# ----------------------------------------------------------------------------------------------
# per-file driver
# ----------------------------------------------------------------------------------------------


def resolved_dict(cfg):
    d = cfg.to_dict()
    for k in ("id2label", "label2id", "task_specific_params"):
        d.pop(k, None)
    return d


def process(path, source):
    name = os.path.basename(path)
    rec = {"source": source, "errors": []}
    try:
        raw = load_json(path)
    except Exception as e:
        rec["errors"].append(f"json: {e}")
        return name, rec
    mt = raw.get("model_type")
    rec["model_type"] = mt
    if mt not in CONFIG_MAPPING:
        rec["unsupported"] = (
            f"unsupported by transformers {transformers.__version__} (model_type {mt!r})"
        )
        if mt in ALIASES:
            alias = copy.deepcopy(raw)
            alias["model_type"] = ALIASES[mt]
            sub = analyse(alias, rec_errors := [])
            sub["errors"] = rec_errors
            sub["alias_model_type"] = ALIASES[mt]
            rec["alias_result"] = sub
        return name, rec
    body = analyse(raw, rec["errors"])
    rec.update(body)
    return name, rec


def analyse(raw, errors):
    rec = {}
    d, dropped = clean_for_transformers(raw)
    rec["dropped_keys_before_loading"] = dropped
    mt = d.get("model_type")
    try:
        cfg = make_config(d)
    except Exception as e:
        errors.append(f"config: {type(e).__name__}: {e}")
        cfg = None
    if cfg is not None:
        rec["config_class"] = type(cfg).__name__
        sub_text = has_sub_text_config(cfg)
        try:
            rec["resolved_text_config"] = resolved_dict(text_config_of(cfg))
        except Exception as e:
            errors.append(f"resolved_text_config: {e}")
    else:
        sub_text = False
        rec["note"] = "full config rejected by transformers; shrunk run attempted anyway"
    # inject per-layer pattern lists that transformers derives from class defaults, so that the
    # shrunk copy keeps the real pattern (e.g. gemma3 text_config without layer_types)
    inject = {}
    if cfg is not None:
        rt = text_config_of(cfg)
        raw_t = None
        for key in ("text_config", "language_config", "llm_config"):
            if isinstance(d.get(key), dict):
                raw_t = d[key]
                break
        raw_t = d if raw_t is None else raw_t
        for k in ("layer_types",):
            v = getattr(rt, k, None)
            if (
                isinstance(v, (list, tuple))
                and k not in raw_t
                and "layers_block_type" not in raw_t
                and "hybrid_override_pattern" not in raw_t
            ):
                inject[k] = list(v)
    if inject:
        rec["injected_from_resolved_config"] = sorted(inject)
        for key in ("text_config", "language_config", "llm_config"):
            if isinstance(d.get(key), dict):
                d = copy.deepcopy(d)
                d[key].update(inject)
                break
        else:
            d = dict(d, **inject)
    # ---- (2) parameter count on meta ------------------------------------------------------------
    t0 = time.time()
    try:
        if cfg is None:
            raise RuntimeError("no config")
        model, auto_name, tried = build_model(cfg, "meta", prefer_multimodal="vision_config" in d)
        rec["model_class"] = type(model).__name__
        rec["auto_class"] = auto_name
        c = count_model(model)
        rec.update(c)
        del model
    except Exception as e:
        errors.append(f"meta count: {type(e).__name__}: {str(e)[:2000]}")
    if sub_text:
        try:
            tmodel, auto_name, _ = build_model(text_config_of(cfg), "meta")
            ct = count_model(tmodel)
            rec["params_text_only"] = ct["params_total"]
            rec["text_model_class"] = type(tmodel).__name__
            rec["param_breakdown_text_only"] = ct["param_breakdown"]
            del tmodel
        except Exception as e:
            errors.append(f"meta count (text only): {type(e).__name__}: {str(e)[:1000]}")
    rec["meta_seconds"] = round(time.time() - t0, 2)
    # ---- (3) shrunk forward ---------------------------------------------------------------------
    notes = []
    try:
        tc_dict = None
        for key in ("text_config", "language_config", "llm_config"):
            if isinstance(d.get(key), dict):
                tc_dict = (key, d[key])
                break
        if tc_dict is not None:
            key, sub = tc_dict
            sub = dict(sub)
            if cfg is not None:
                sub.setdefault("model_type", text_config_of(cfg).model_type)
            small_text = shrink_text(sub, sub["model_type"], notes)
            shrunk_full = copy.deepcopy(d)
            shrunk_full[key] = small_text
            for vk in ("vision_config", "audio_config"):
                if vk in shrunk_full:
                    shrunk_full[vk] = shrink_vision(shrunk_full[vk])
            rec["shrunk_config"] = shrunk_full
            # run the language model alone: built from the (shrunk) text config the way the
            # wrapper builds it.
            full_small_cfg = make_config(shrunk_full)
            run_cfg = text_config_of(full_small_cfg)
            rec["shrunk_run_on"] = f"text model built from {key} (model_type {run_cfg.model_type})"
        else:
            small = shrink_text(d, mt, notes)
            rec["shrunk_config"] = small
            run_cfg = make_config(small)
            rec["shrunk_run_on"] = "full model"
        rec["shrink_notes"] = notes
        run_cfg._attn_implementation = "eager"
        try:
            run_cfg.dtype = torch.float32
        except Exception:
            pass
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(run_cfg)
        model = model.float().eval()
        rec["shrunk_model_class"] = type(model).__name__
        rec["shrunk_params_total"] = sum(p.numel() for p in model.parameters())
        rec["shrunk_resolved_config"] = resolved_dict(model.config)
        vocab = model.config.vocab_size if hasattr(model.config, "vocab_size") else SHRUNK_VOCAB
        runs = []
        for n in PROMPTS:
            entry = {"prompt_len": n}
            try:
                out = run_forward(model, n, vocab, seed=n)
                entry.update(describe_cache(out.past_key_values))
                if n == PROMPTS[-1]:
                    try:
                        out2 = run_forward(model, 1, vocab, past=out.past_key_values, seed=1)
                        dec = describe_cache(out2.past_key_values)
                        dec["prompt_len"] = n
                        dec["after_decode_steps"] = 1
                        runs.append(entry)
                        entry = dec
                    except Exception as e:
                        errors.append(f"decode after {n}: {type(e).__name__}: {str(e)[:800]}")
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {str(e)[:800]}"
                errors.append(f"forward {n}: {type(e).__name__}: {str(e)[:800]}")
                tb = traceback.format_exc().splitlines()[-6:]
                entry["traceback_tail"] = tb
            runs.append(entry)
        rec["cache_after_forward"] = runs
        rec["prompt_len"] = list(PROMPTS)
        del model
    except Exception as e:
        errors.append(f"shrunk: {type(e).__name__}: {str(e)[:1500]}")
        rec.setdefault("shrink_notes", notes)
        rec["shrunk_traceback_tail"] = traceback.format_exc().splitlines()[-8:]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(os.getcwd(), "oracle.json"))
    args = ap.parse_args()
    files = []
    for p in sorted(glob.glob(os.path.join(os.getcwd(), "*.json"))):  # the extra configs
        if os.path.basename(p) in ("oracle.json",):
            continue
        files.append((p, "current folder"))
    for p in sorted(glob.glob(os.path.join(BUNDLED, "*.json"))):
        if os.path.basename(p) == "index.json":
            continue
        files.append((p, "main/model_configs"))
    if args.only:
        files = [f for f in files if any(o in os.path.basename(f[0]) for o in args.only)]
    result = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "settings": {
            "shrunk_window": SHRUNK_WINDOW,
            "prompts": list(PROMPTS),
            "decode_steps_after_last_prompt": 1,
            "shrunk_vocab": SHRUNK_VOCAB,
            "shrunk_ffn": SHRUNK_FFN,
            "shrunk_moe_ffn": SHRUNK_MOE_FFN,
            "max_experts": MAX_EXPERTS,
            "max_topk": MAX_TOPK,
            "attn_implementation": "eager",
            "dtype": "float32",
        },
        "models": {},
    }
    for p, src in files:
        key = os.path.basename(p) if src == "staging/configs" else "main/" + os.path.basename(p)
        t0 = time.time()
        try:
            name, rec = process(p, src)
        except Exception as e:
            rec = {"source": src, "errors": [f"fatal: {type(e).__name__}: {e}"]}
        rec["seconds"] = round(time.time() - t0, 2)
        result["models"][key] = rec
        print(
            f"{key:60s} {rec.get('model_type')!s:18s} params={rec.get('params_total')} "
            f"text={rec.get('params_text_only')} errs={len(rec.get('errors', []))} "
            f"{rec.get('unsupported', '')} {rec['seconds']}s",
            flush=True,
        )
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
