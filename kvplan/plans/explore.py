"""`kvplan explore`: the four-act cache explorer as one self-contained HTML page for any model and
GPU profiles. Every number is computed here, by kvplan's formulas, over the grid of slider
positions, and embedded as data; the page's JavaScript only looks values up and formats them."""

from __future__ import annotations

import html
import json

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec, pp_stages
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import cache_groups, kv_bytes_per_sequence, kv_bytes_per_token
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import GpuProfile
from kvplan.plans.capacity import CapacityRequest, budget, max_sequences, smallest_fitting_tp
from kvplan.plans.size import model_notes

ACT1_MAX_PROMPT = 4096
ACT1_MAX_GENERATE = 256
USER_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
CONTEXT_GRID = tuple(2**k for k in range(10, 21))  # 1k .. 1m
QUANT = ("bf16", "fp8", "int8", "int4")
QUANT_LABELS = {
    "bf16": ("lossless", "the baseline: 16-bit keys and values"),
    "fp8": (
        "near-lossless",
        "fp8 e4m3 with calibrated scales: about 2x the users; check your "
        "task, uncalibrated scales cost 1-2 points",
    ),
    "int8": (
        "near-lossless",
        "int8 with a per-token scale per head: generally safe; evaluate on your task",
    ),
    "int4": (
        "lossy",
        "int4 with a scale and zero-point per 32 values: errors compound over long "
        "outputs; run a long-context recall probe before shipping",
    ),
}


def explore_data(spec: ModelSpec, gpus: list[GpuProfile]) -> dict:
    if not gpus:
        raise KvplanError("explore needs at least one --gpu")
    base = resolve_kv_format("auto", spec.dtype)
    groups = cache_groups(spec, base)
    max_t = ACT1_MAX_PROMPT + ACT1_MAX_GENERATE
    act1 = {
        "tokens_max": max_t,
        "groups": [
            {
                "label": g.label,
                "layers": g.num_layers,
                "kind": g.kind,
                "heads": g.num_kv_heads,
                "state_bytes": g.state_bytes_per_layer * g.num_layers,
            }
            for g in groups
        ],
        # K and V vectors stored per group at t tokens: layers x heads x 2 (MLA: 1 latent)
        "vectors": [
            [
                g.num_layers * g.num_kv_heads * (1 if g.kind == "mla" else 2) * g.tokens_held(t)
                for t in range(max_t + 1)
            ]
            for g in groups
        ],
        "bytes": [kv_bytes_per_sequence(spec, t, base) if t else 0 for t in range(max_t + 1)],
        # without a cache, step i recomputes K/V for all i tokens: sum i = t(t+1)/2 vs t
        "recompute_ratio": [(t + 1) / 2 if t else 1.0 for t in range(max_t + 1)],
    }
    attn = [a for a in spec.attention_layers()]
    mla = any(a.kind == "mla" for a in attn)
    heads_q = attn[0].num_q_heads if attn else 0
    act2 = {
        "applies": bool(attn) and not mla,
        "mla": mla,
        "query_heads": heads_q,
        "current_kv_heads": spec.num_kv_heads,
        "context": 8192,
        "options": [],
        "hybrid": len({g.kind for g in groups}) > 1,
    }
    if act2["applies"]:

        def with_heads(heads: int) -> ModelSpec:
            return spec._replace(
                layers=tuple(
                    layer._replace(attention=layer.attention._replace(num_kv_heads=heads))
                    if layer.attention is not None
                    else layer
                    for layer in spec.layers
                )
            )

        mha = kv_bytes_per_sequence(with_heads(heads_q), 8192, base)
        for heads in [h for h in range(1, heads_q + 1) if heads_q % h == 0]:
            model = with_heads(heads)
            per_seq = kv_bytes_per_sequence(model, 8192, base)
            act2["options"].append(
                {
                    "kv_heads": heads,
                    "bytes_per_token": kv_bytes_per_token(model, base),
                    "bytes_per_sequence": per_seq,
                    "reduction_vs_mha": mha / per_seq,
                    "label": "MQA" if heads == 1 else "MHA" if heads == heads_q else "GQA",
                }
            )
    if mla:
        a = attn[0]
        act2["mla_latent"] = a.head_dim
        act2["mla_bytes_per_token"] = kv_bytes_per_token(spec, base)
        act2["mla_mha_bytes_per_token"] = spec.mha_equivalent_bytes_per_token(base)
    contexts = [
        c
        for c in CONTEXT_GRID
        if not spec.max_position_embeddings or c <= max(spec.max_position_embeddings, 8192)
    ]
    act3 = {"contexts": contexts, "users": list(USER_GRID), "gpus": []}
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    for gpu in gpus:
        tp = smallest_fitting_tp(spec, gpu, 1024)
        plan = budget(spec, gpu, CapacityRequest(tp=tp), wdtype)
        stages = pp_stages(spec, 1)
        entry = {
            "name": gpu.name,
            "tp": tp,
            "usable_bytes": plan.usable_bytes,
            "weights_bytes": plan.weights_bytes,
            "reserve_bytes": plan.reserve_bytes,
            "pool_bytes": plan.pool_bytes,
            "max_users": {},
            "cache_bytes": {},
            "free_bytes": {},
            "quant": {},
        }
        for dtype in QUANT:
            fmt = resolve_kv_format(dtype, spec.dtype)
            rows = {
                "max_users": [],
                "bytes_per_token": kv_bytes_per_token(spec, fmt, tp),
                "shrink_vs_bf16": kv_bytes_per_token(
                    spec, resolve_kv_format("bf16", spec.dtype), tp
                )
                / kv_bytes_per_token(spec, fmt, tp)
                if attn
                else 1.0,
            }
            for c in contexts:
                rows["max_users"].append(
                    max_sequences(stages, max(0.0, plan.pool_bytes), c, fmt, tp, 16)
                )
            entry["quant"][dtype] = rows
        for c in contexts:
            per_seq = kv_bytes_per_sequence(spec, c, base, tp)
            entry["max_users"][c] = max_sequences(
                stages, max(0.0, plan.pool_bytes), c, base, tp, 16
            )
            entry["cache_bytes"][c] = [u * per_seq for u in USER_GRID]
            entry["free_bytes"][c] = [plan.pool_bytes - u * per_seq for u in USER_GRID]
        act3["gpus"].append(entry)
    return {
        "kvplan_version": __version__,
        "model": {
            "name": spec.name,
            "family": spec.family,
            "dtype": spec.dtype,
            "layers": spec.num_layers,
            "kv_bytes_per_token": kv_bytes_per_token(spec, base),
        },
        "act1": act1,
        "act2": act2,
        "act3": act3,
        "act4": {"dtypes": list(QUANT), "labels": QUANT_LABELS},
        "notes": model_notes(spec, 1)
        + [
            "Capacity: memory the GPU reports (or its nominal memory) x 0.9 utilization, minus the "
            "weights per GPU, minus an activation and runtime reserve; whole 16-token blocks per "
            "sequence; the tensor-parallel degree is the smallest at which the model fits.",
            "Cache bytes count every layer's real cache: windows hold at most W tokens and "
            "recurrent states a fixed size, as kvplan size computes them.",
        ],
    }


def explore_page(spec: ModelSpec, gpus: list[GpuProfile]) -> str:
    data = explore_data(spec, gpus)
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return PAGE.replace("__TITLE__", html.escape(f"KV cache explorer: {spec.name}")).replace(
        "__DATA__", payload
    )


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
:root{--ink:#1c2430;--muted:#5b6675;--line:#d9dee5;--w:#6b7fd7;--kv:#e0774a;--free:#e6ebf0;--bad:#c0392b;--ok:#2e8b57}
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--ink);background:#f7f8fa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:0 0 4px}.sub{color:var(--muted);margin:0 0 18px}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:18px 20px;margin:0 0 18px}
.act{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.06em}
.controls{display:flex;flex-wrap:wrap;gap:18px;align-items:center;margin:12px 0}
.controls label{display:flex;flex-direction:column;font-size:13px;color:var(--muted);min-width:220px}
.controls input[type=range]{width:260px}
.stats{display:grid;grid-template-columns:repeat(auto-fit,minmax(190px,1fr));gap:12px;margin-top:10px}
.stat{border:1px solid var(--line);border-radius:8px;padding:10px 12px}
.stat b{display:block;font-size:22px;font-variant-numeric:tabular-nums}.stat span{font-size:12px;color:var(--muted)}
table{border-collapse:collapse;width:100%;font-size:13px;margin-top:8px}td,th{border-bottom:1px solid var(--line);padding:4px 8px;text-align:right}th:first-child,td:first-child{text-align:left}
.bar{display:flex;height:30px;border-radius:6px;overflow:hidden;border:1px solid var(--line);margin-top:12px;background:var(--free)}
.bar div{height:100%}.w{background:var(--w)}.r{background:#9aa5b1}.kv{background:var(--kv)}.kv.over{background:var(--bad)}
.legend{display:flex;gap:16px;font-size:12px;color:var(--muted);margin-top:6px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
button{font:inherit;padding:6px 12px;border:1px solid var(--line);border-radius:6px;background:#fff;cursor:pointer}button.on{background:var(--ink);color:#fff}
.note{color:var(--muted);font-size:13px}.warn{color:var(--bad);font-weight:600}.okc{color:var(--ok);font-weight:600}
footer{font-size:12px;color:var(--muted)}footer li{margin-bottom:4px}
</style></head><body><main>
<h1 id="title"></h1><p class="sub" id="subtitle"></p>

<section id="act1"><div class="act">Act 1 · prefill and decode</div><h2>Watch the cache grow</h2>
<p class="note">Prefill stores every prompt token's keys and values in every layer at once; each decode step appends one more token. Nothing is recomputed.</p>
<div class="controls"><label>Prompt length (tokens): <output id="a1-prompt-out"></output><input id="a1-prompt" type="range" min="0" max="4096" step="1" value="512"></label>
<button id="a1-generate">Generate one token</button><button id="a1-reset">Reset generation</button></div>
<div class="stats"><div class="stat"><b id="a1-tokens"></b><span>tokens cached (prompt + generated)</span></div>
<div class="stat"><b id="a1-vectors"></b><span>K/V vectors stored, all layers</span></div>
<div class="stat"><b id="a1-bytes"></b><span>cache for this sequence</span></div>
<div class="stat"><b id="a1-recompute"></b><span>recompute avoided vs no cache</span></div></div>
<table id="a1-groups"><thead><tr><th>layers, by what they cache</th><th>layers</th><th>K/V vectors stored</th></tr></thead><tbody></tbody></table>
</section>

<section id="act2"><div class="act">Act 2 · heads</div><h2>Collapse the cache with grouped-query attention</h2>
<p class="note" id="a2-intro"></p>
<div class="controls" id="a2-controls"><label>KV heads: <output id="a2-heads-out"></output><input id="a2-heads" type="range" min="0" step="1"></label></div>
<div class="stats" id="a2-stats"><div class="stat"><b id="a2-kind"></b><span>attention layout</span></div>
<div class="stat"><b id="a2-reduction"></b><span>cache reduction vs multi-head</span></div>
<div class="stat"><b id="a2-per-token"></b><span>KV per token, all layers</span></div>
<div class="stat"><b id="a2-per-seq"></b><span>KV per 8,192-token sequence</span></div></div>
</section>

<section id="act3"><div class="act">Act 3 · the concurrency wall</div><h2>Where the cache caps your users</h2>
<div class="controls"><label>GPU: <select id="a3-gpu"></select></label>
<label>Context per user (tokens): <output id="a3-ctx-out"></output><input id="a3-ctx" type="range" min="0" step="1" value="3"></label>
<label>Concurrent users: <output id="a3-users-out"></output><input id="a3-users" type="range" min="0" step="1" value="5"></label></div>
<div class="bar"><div class="w" id="a3-bar-w"></div><div class="r" id="a3-bar-r"></div><div class="kv" id="a3-bar-kv"></div></div>
<div class="legend"><span><i style="background:var(--w)"></i>weights per GPU (shared by all users)</span><span><i style="background:#9aa5b1"></i>activation and runtime reserve</span><span><i style="background:var(--kv)"></i>KV cache of all users</span><span><i style="background:var(--free)"></i>free</span></div>
<div class="stats"><div class="stat"><b id="a3-max"></b><span>max users that fit at this context</span></div>
<div class="stat"><b id="a3-demand"></b><span>KV cache demanded per GPU</span></div>
<div class="stat"><b id="a3-free"></b><span>free beside weights and cache, per GPU</span></div>
<div class="stat"><b id="a3-status"></b><span id="a3-status-label">status</span></div></div>
<p class="note" id="a3-gpu-note"></p>
</section>

<section id="act4"><div class="act">Act 4 · quantize the cache</div><h2>Claw the memory back</h2>
<div class="controls" id="a4-buttons"></div>
<div class="stats"><div class="stat"><b id="a4-shrink"></b><span>cache shrink vs bf16</span></div>
<div class="stat"><b id="a4-users"></b><span id="a4-users-label">users that fit</span></div>
<div class="stat"><b id="a4-per-token"></b><span>KV per token per GPU, scales included</span></div>
<div class="stat"><b id="a4-quality"></b><span>quality</span></div></div>
<p class="note" id="a4-probe"></p>
</section>

<footer><h2>Assumptions</h2><ol id="notes"></ol><p id="version"></p></footer>
</main>
<script id="kvplan-data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("kvplan-data").textContent);
const $ = (id) => document.getElementById(id);
const GiB = 2 ** 30;
function bytes(b) { if (b >= GiB) return (b / GiB).toFixed(2) + " GiB"; if (b >= 2 ** 20) return (b / 2 ** 20).toFixed(2) + " MiB"; if (b >= 1024) return (b / 1024).toFixed(1) + " KiB"; return b + " B"; }
function int(n) { return Number(n).toLocaleString("en-US"); }
function tokens(n) { return n >= 1024 && n % 1024 === 0 ? (n / 1024) + "k" : int(n); }
$("title").textContent = "KV cache explorer: " + D.model.name;
$("subtitle").textContent = D.model.family + " · " + D.model.layers + " layers · " + int(D.model.kv_bytes_per_token) + " bytes of KV per token in " + D.model.dtype + " · numbers computed by kvplan " + D.kvplan_version;

// Act 1
let generated = 0;
function act1() {
  const prompt = Number($("a1-prompt").value);
  const t = Math.min(prompt + generated, D.act1.tokens_max);
  $("a1-prompt-out").textContent = int(prompt);
  $("a1-tokens").textContent = int(t);
  let total = 0;
  const body = $("a1-groups").tBodies[0]; body.innerHTML = "";
  D.act1.groups.forEach((g, i) => {
    const v = D.act1.vectors[i][t]; total += v;
    const row = body.insertRow();
    row.insertCell().textContent = g.label + (g.kind === "state" ? " (fixed " + bytes(g.state_bytes) + " per sequence)" : "");
    row.insertCell().textContent = int(g.layers);
    row.insertCell().textContent = g.kind === "state" ? "—" : int(v);
  });
  $("a1-vectors").textContent = int(total);
  $("a1-bytes").textContent = bytes(D.act1.bytes[t]);
  $("a1-recompute").textContent = D.act1.recompute_ratio[t].toFixed(1) + "×";
}
$("a1-prompt").addEventListener("input", () => { generated = 0; act1(); });
$("a1-generate").addEventListener("click", () => { if (Number($("a1-prompt").value) + generated < D.act1.tokens_max) generated += 1; act1(); });
$("a1-reset").addEventListener("click", () => { generated = 0; act1(); });

// Act 2
const A2 = D.act2;
if (A2.applies) {
  $("a2-heads").max = A2.options.length - 1;
  $("a2-heads").value = A2.options.findIndex((o) => o.kv_heads === A2.current_kv_heads);
  $("a2-intro").textContent = "Multi-head attention caches one key and value per query head; grouped-query attention lets " + A2.query_heads + " query heads share fewer KV heads. This model has " + A2.current_kv_heads + "." + (A2.hybrid ? " Windowed layers and recurrent states keep their shape; the slider changes the KV heads of the attention layers." : "");
} else {
  $("a2-controls").style.display = "none";
  $("a2-stats").style.display = "none";
  $("a2-intro").textContent = A2.mla
    ? "This model uses multi-head latent attention: each layer caches one compressed latent of " + A2.mla_latent + " values per token (" + int(A2.mla_bytes_per_token) + " bytes per token over all layers) instead of keys and values per head (" + int(A2.mla_mha_bytes_per_token) + " bytes for multi-head). There are no KV heads to share, so the slider does not apply."
    : "This model has no attention KV heads to share: its layers keep fixed-size recurrent states, so the slider does not apply.";
}
function act2() {
  if (!A2.applies) return;
  const o = A2.options[Number($("a2-heads").value)];
  $("a2-heads-out").textContent = o.kv_heads + " of " + A2.query_heads;
  $("a2-kind").textContent = o.label + " " + (A2.query_heads / o.kv_heads) + ":1";
  $("a2-reduction").textContent = o.reduction_vs_mha.toFixed(2) + "×";
  $("a2-per-token").textContent = int(o.bytes_per_token) + " B";
  $("a2-per-seq").textContent = bytes(o.bytes_per_sequence);
}
$("a2-heads").addEventListener("input", act2);

// Act 3 and 4
const A3 = D.act3;
A3.gpus.forEach((g, i) => { const o = document.createElement("option"); o.value = i; o.textContent = g.name + " × " + g.tp; $("a3-gpu").appendChild(o); });
$("a3-ctx").max = A3.contexts.length - 1;
$("a3-users").max = A3.users.length - 1;
let quant = "bf16";
function act3() {
  const g = A3.gpus[Number($("a3-gpu").value)];
  const ci = Number($("a3-ctx").value), ctx = A3.contexts[ci];
  const ui = Number($("a3-users").value), users = A3.users[ui];
  $("a3-ctx-out").textContent = tokens(ctx);
  $("a3-users-out").textContent = int(users);
  const cache = g.cache_bytes[ctx][ui], free = g.free_bytes[ctx][ui];
  const scale = Math.max(g.usable_bytes, g.weights_bytes + g.reserve_bytes + cache);
  $("a3-bar-w").style.width = (100 * g.weights_bytes / scale) + "%";
  $("a3-bar-r").style.width = (100 * g.reserve_bytes / scale) + "%";
  $("a3-bar-kv").style.width = (100 * cache / scale) + "%";
  const over = users > g.max_users[ctx];
  $("a3-bar-kv").classList.toggle("over", over);
  $("a3-max").textContent = int(g.max_users[ctx]);
  $("a3-demand").textContent = bytes(cache);
  $("a3-free").textContent = free >= 0 ? bytes(free) : "none";
  $("a3-status").textContent = over ? "overflow" : "fits";
  $("a3-status").className = over ? "warn" : "okc";
  $("a3-gpu-note").textContent = g.name + " × " + g.tp + " (tensor parallel " + g.tp + "): per GPU " + bytes(g.usable_bytes) + " usable = weights " + bytes(g.weights_bytes) + " + reserve " + bytes(g.reserve_bytes) + " + a KV pool of " + bytes(g.pool_bytes) + ".";
  act4();
}
function act4() {
  const g = A3.gpus[Number($("a3-gpu").value)];
  const ci = Number($("a3-ctx").value);
  const q = g.quant[quant];
  document.querySelectorAll("#a4-buttons button").forEach((b) => b.classList.toggle("on", b.dataset.dtype === quant));
  $("a4-shrink").textContent = q.shrink_vs_bf16.toFixed(2) + "×";
  $("a4-users").textContent = int(q.max_users[ci]);
  $("a4-users-label").textContent = "users that fit at " + tokens(A3.contexts[ci]) + " on " + g.name + " × " + g.tp;
  $("a4-per-token").textContent = int(q.bytes_per_token) + " B";
  const label = D.act4.labels[quant];
  $("a4-quality").textContent = label[0];
  $("a4-quality").className = label[0] === "lossy" ? "warn" : "okc";
  $("a4-probe").textContent = label[1] + ".";
}
D.act4.dtypes.forEach((d) => { const b = document.createElement("button"); b.textContent = d; b.dataset.dtype = d; b.id = "a4-" + d; b.addEventListener("click", () => { quant = d; act4(); }); $("a4-buttons").appendChild(b); });
["a3-gpu", "a3-ctx", "a3-users"].forEach((id) => $(id).addEventListener("input", act3));
$("a3-gpu").addEventListener("change", act3);
D.notes.forEach((n) => { const li = document.createElement("li"); li.textContent = n; $("notes").appendChild(li); });
$("version").textContent = "Generated by kvplan " + D.kvplan_version + "; every number on this page comes from kvplan's formulas (embedded as data).";
act1(); act2(); act3();
</script></body></html>
"""
