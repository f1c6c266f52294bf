"""`kvplan explore` as one self-contained HTML page: the data kvplan computed (kvplan.plans.explore)
embedded as JSON, the words and the page's layout here."""

from __future__ import annotations

import html
import json

from kvplan.present.notes import note_texts

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


def explore_page(data: dict) -> str:
    """The page's HTML: kvplan's numbers embedded as data, notes in words."""
    data = {**data, "notes": note_texts(data["notes"])}
    data["act4"] = {**data["act4"], "labels": QUANT_LABELS}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"KV cache explorer: {data['model']['name']}")
    return PAGE.replace("__TITLE__", title).replace("__DATA__", payload)


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
