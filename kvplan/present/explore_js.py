"""The explorer page's script: it reads kvplan's embedded data (D), looks values up for the
controls' positions, puts them into words and places the bars. It computes no number the page
prints: every figure is a value from D, formatted as kvplan.present.format.bytes_text does."""

SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("kvplan-data").textContent);
const $ = (id) => document.getElementById(id);
const M = D.model, A1 = D.act1, A2 = D.act2, DP = D.deploy;

// ---- formatting (mirrors kvplan.present.format) ----------------------------------------------
const UNITS = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
function two(x) { return x.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }); }
function int(n) { return Number(n).toLocaleString("en-US", { maximumFractionDigits: 0 }); }
function bytes(b) { for (const [unit, scale] of UNITS) { if (Math.abs(b) >= scale) return two(b / scale) + " " + unit; } return int(b) + " B"; }
function times(x) { return two(x) + "×"; }
function ratio1(x) { return x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + "×"; }
function tokens(n) { if (n >= 2 ** 20 && n % 2 ** 20 === 0) return (n / 2 ** 20) + "m"; if (n >= 1024 && n % 1024 === 0) return (n / 1024) + "k"; return int(n); }
function share(x) { return x >= 1 ? times(x) : x < 0.01 ? "under 1% of" : Math.round(100 * x) + "% of"; }
function plural(n, one, many) { return int(n) + " " + (n === 1 ? one : many); }
function put(id, text) { $(id).textContent = text; }
function node(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
function layoutTag(o) { return o.dp_attention > 1 ? "DP attention " + o.dp_attention + " + EP" : o.pp > 1 ? "TP " + o.tp + " × PP " + o.pp : "TP " + o.tp; }
function deployLabel(o, gpu) {
  if (o.dp_attention > 1) return o.num_gpus + " × " + gpu + " (DP attention over " + o.dp_attention + " GPUs, experts spread over them" + (o.nodes > 1 ? ", " + plural(o.nodes, "node", "nodes") : "") + ")";
  const split = o.pp > 1 ? " (TP " + o.tp + " × PP " + o.pp + ", " + plural(o.nodes, "node", "nodes") + ")" : o.tp > 1 ? " (tensor parallel " + o.tp + ")" : "";
  return (o.num_gpus === 1 ? "one " : o.num_gpus + " × ") + gpu + split;
}
const attention = M.layout !== null;
const isMla = A2.mla;
const windowed = A1.groups.filter((g) => g.kind === "sliding" || g.kind === "chunked");
const stateGroups = A1.groups.filter((g) => g.kind === "state");
const LONG = DP.long_context;
const longIndex = DP.contexts.indexOf(LONG);

// ---- the hook -----------------------------------------------------------------------------------
put("title", "The memory behind every token: " + M.name);
const H = D.hook;
let hook;
if (isMla) {
  hook = "Every token " + M.name + " reads leaves " + bytes(M.kv_bytes_per_token) + " behind: one compressed latent of " + int(A2.mla_latent) + " values in each of its " + int(M.attention_layers) + " layers, from which all " + int(A2.query_heads) + " query heads rebuild their keys and values.";
} else if (attention) {
  hook = "Every token " + M.name + " reads leaves " + bytes(M.kv_bytes_per_token) + " behind: a key and a value from each of its " + int(M.kv_heads) + " KV heads in each of its " + int(M.attention_layers) + " attention layers" + (windowed.length ? " (its sliding-window layers keep only their most recent tokens)" : "") + (M.state_layers ? ", plus a fixed recurrent state in " + plural(M.state_layers, "other layer", "other layers") : "") + ".";
} else {
  hook = M.name + " keeps no keys and values: each conversation carries a fixed recurrent state in each of its " + int(M.state_layers) + " layers, whatever its length.";
}
hook += (attention ? " The model keeps them so that the next token never recomputes the past." : " The state sums up everything read so far, so nothing is recomputed.") + " One " + tokens(H.context_len) + "-token conversation holds " + bytes(H.kv_bytes_per_sequence) + (H.cache_to_weights === null ? "" : ", " + share(H.cache_to_weights) + " the model's " + bytes(H.weights_bytes) + " of weights") + ", and every user brings their own. Follow it in four acts: watch it grow, shrink it by sharing heads, hit the memory wall that caps how many people a GPU serves, then store it in fewer bits.";
put("hook-text", hook);
put("hook-per-token", attention ? bytes(M.kv_bytes_per_token) : "none");
put("hook-per-seq", bytes(H.kv_bytes_per_sequence));
put("hook-per-seq-label", "one " + tokens(H.context_len) + "-token conversation (" + M.kv_dtype + ")");
put("hook-weights", bytes(H.weights_bytes));
put("hook-weights-label", "weights in " + M.weights_dtype + ", loaded once, shared by all users");

// ---- Act 1: prefill and decode ------------------------------------------------------------------
$("a1-prompt").max = A1.prompt_max;
$("a1-prompt").value = 512;
put("a1-intro", "Prefill runs the whole prompt through the model at once and stores every prompt token's " + (isMla ? "latent" : "key and value") + " in every layer. Each decode step then produces one token and appends its own. Nothing already cached is computed again. Slide the prompt, then generate.");
put("a1-generate16", "Generate " + A1.block_size);
if (isMla) put("a1-vectors-label", "latent vectors stored, all layers");
put("a1-legend-block", "each square: one block of " + A1.block_size + " tokens, the unit serving engines allocate the cache in");
$("a1-legend-gone").style.display = windowed.length ? "" : "none";
let generated = 0;
function strips(t, prompt) {
  const box = $("a1-strips"); box.innerHTML = "";
  const bs = A1.block_size, blocks = Math.ceil(t / bs);
  A1.groups.forEach((g) => {
    const row = node("div", "strip-row");
    row.appendChild(node("div", "lab", g.label + " · " + plural(g.layers, "layer", "layers")));
    if (g.kind === "state") {
      row.appendChild(node("span", "statebox", "fixed " + bytes(g.state_bytes) + " per sequence, whatever its length"));
      box.appendChild(row); return;
    }
    const strip = node("div", "strip");
    for (let b = 0; b < blocks; b++) {
      const first = b * bs, last = Math.min(t, first + bs);
      const blk = node("div", "blk");
      if (g.window && last <= t - g.window) blk.classList.add("gone");
      const p = Math.max(0, Math.min(prompt, last) - first), q = last - first - p;
      if (p) { const i = node("i"); i.style.width = (100 * p / bs) + "%"; blk.appendChild(i); }
      if (q) { const i = node("i"); i.style.left = (100 * p / bs) + "%"; i.style.width = (100 * q / bs) + "%"; i.style.background = "var(--gen)"; blk.appendChild(i); }
      strip.appendChild(blk);
    }
    row.appendChild(strip); box.appendChild(row);
  });
}
function act1() {
  const prompt = Number($("a1-prompt").value);
  const t = Math.min(prompt + generated, A1.tokens_max);
  put("a1-prompt-out", int(prompt));
  put("a1-tokens", int(t));
  let total = 0;
  const body = $("a1-groups").tBodies[0]; body.innerHTML = "";
  A1.groups.forEach((g, i) => {
    const v = A1.vectors[i][t]; total += v;
    const row = body.insertRow();
    row.insertCell().textContent = g.label + (g.kind === "state" ? " (fixed " + bytes(g.state_bytes) + " per sequence)" : "");
    row.insertCell().textContent = int(g.layers);
    row.insertCell().textContent = g.kind === "state" ? "—" : int(v);
  });
  put("a1-vectors", int(total));
  put("a1-bytes", bytes(A1.bytes[t]));
  put("a1-recompute", ratio1(A1.recompute_ratio[t]));
  strips(t, prompt);
  let take = "At " + plural(t, "token", "tokens") + " this one conversation holds " + bytes(A1.bytes[t]) + ".";
  if (attention) take += " Every new token adds up to " + bytes(M.kv_bytes_per_token) + " more, for as long as the conversation lasts: the cache grows in a straight line while a cache-less model's work would grow with the square of the length (" + ratio1(A1.recompute_ratio[t]) + " the key/value work at this length).";
  if (windowed.length) take += " The sliding-window layers stop growing at " + int(windowed[0].window) + " tokens; past that, only the full-attention layers grow.";
  if (stateGroups.length) take += " The recurrent state never grows: it is the same at one token and at a million.";
  put("a1-takeaway", take);
}
$("a1-prompt").addEventListener("input", () => { generated = 0; act1(); });
function generate(n) { const room = A1.tokens_max - Number($("a1-prompt").value) - generated; generated += Math.max(0, Math.min(n, room)); act1(); }
$("a1-generate").addEventListener("click", () => generate(1));
$("a1-generate16").addEventListener("click", () => generate(A1.block_size));
$("a1-reset").addEventListener("click", () => { generated = 0; act1(); });

// ---- Act 2: heads -------------------------------------------------------------------------------
function diagram(kvHeads, groupSize) {
  const box = $("a2-diagram"); box.innerHTML = "";
  for (let k = 0; k < kvHeads; k++) {
    const grp = node("div", "grp");
    grp.appendChild(node("span", "kvh", "K V"));
    const qs = node("div", "qs");
    qs.style.maxWidth = (Math.ceil(Math.sqrt(groupSize)) * 11) + "px";
    for (let j = 0; j < groupSize; j++) qs.appendChild(node("i", "qh"));
    grp.appendChild(qs); box.appendChild(grp);
  }
}
const mhaOption = A2.applies ? A2.options[A2.options.length - 1] : null;
if (A2.applies) {
  $("a2-heads").max = A2.options.length - 1;
  $("a2-heads").value = A2.options.findIndex((o) => o.kv_heads === A2.current_kv_heads);
  put("a2-intro", "Multi-head attention caches a key and a value for every query head. Grouped-query attention lets several query heads read one shared KV head, so only the KV heads are cached. " + M.name + " has " + int(A2.query_heads) + " query heads and " + int(A2.current_kv_heads) + " KV heads. Drag the slider: one KV head is multi-query attention (MQA), " + int(A2.query_heads) + " is full multi-head attention (MHA)." + (A2.hybrid ? " Windowed layers and recurrent states keep their shape; the slider changes the KV heads of the attention layers." : ""));
  const real = A2.options.find((o) => o.kv_heads === A2.current_kv_heads);
  if (real.kv_heads < A2.query_heads) {
    put("a2-takeaway", M.name + " shares each KV head among " + int(real.group_size) + " query heads: its cache is " + times(real.reduction_vs_mha) + " smaller than multi-head attention would make it (" + bytes(real.bytes_per_token) + " instead of " + bytes(mhaOption.bytes_per_token) + " per token). The queries are still computed for every head; only what is stored is shared.");
  } else {
    const gqa = A2.options.filter((o) => o.group_size <= 8).slice(-1)[0] || A2.options[0];
    put("a2-takeaway", M.name + " uses full multi-head attention: every query head keeps its own key and value. Sharing each KV head among " + int(gqa.group_size) + " query heads (" + int(gqa.kv_heads) + " KV heads) would cut its cache " + times(gqa.reduction_vs_mha) + ", which is why most recent models use grouped-query attention.");
  }
} else {
  $("a2-controls").style.display = "none";
  if (isMla) {
    put("a2-title", "One latent instead of keys and values");
    put("a2-intro", M.name + " uses multi-head latent attention: instead of a key and a value per head, each layer caches one compressed latent of " + int(A2.mla_latent) + " values per token (" + int(A2.mla_kv_lora_rank) + " for the content and " + int(A2.mla_rope_dim) + " for the rotary position key" + (A2.mla_indexer_dim ? ", plus an indexer key of " + int(A2.mla_indexer_dim) : "") + "), and each of its " + int(A2.query_heads) + " query heads rebuilds its keys and values from it. There are no KV heads to share, so there is no slider.");
    const box = $("a2-diagram"); box.innerHTML = "";
    const lat = node("div", "latent");
    lat.appendChild(node("div", "", "one latent per token per layer"));
    lat.appendChild(node("span", "kvh", "latent " + int(A2.mla_kv_lora_rank) + " + rope " + int(A2.mla_rope_dim)));
    const qs = node("div", "qs");
    for (let j = 0; j < A2.query_heads; j++) qs.appendChild(node("i", "qh"));
    lat.appendChild(qs);
    lat.appendChild(node("div", "note", "all " + int(A2.query_heads) + " query heads read it"));
    box.appendChild(lat);
    put("a2-kind", "MLA " + int(A2.query_heads) + ":1");
    put("a2-reduction", times(A2.mla_reduction_vs_mha));
    put("a2-per-token", bytes(A2.mla_bytes_per_token));
    put("a2-per-seq", bytes(A2.mla_bytes_per_sequence));
    put("a2-per-seq-label", "KV per " + int(A2.context) + "-token sequence");
    put("a2-takeaway", "One latent per layer makes " + M.name + "'s cache " + times(A2.mla_reduction_vs_mha) + " smaller than multi-head attention over " + int(A2.query_heads) + " heads would (" + bytes(A2.mla_bytes_per_token) + " instead of " + bytes(A2.mla_mha_bytes_per_token) + " per token). The catch shows in Act 3: a latent cannot be split across tensor-parallel GPUs, so each one stores it whole.");
  } else {
    $("a2-stats").style.display = "none";
    $("a2-legend").style.display = "none";
    put("a2-intro", M.name + " has no attention KV heads to share: its layers keep fixed-size recurrent states, so the slider does not apply.");
    put("a2-takeaway", "A recurrent state does not grow with the context: long conversations cost " + M.name + " no more cache than short ones.");
  }
}
function act2() {
  if (!A2.applies) return;
  const o = A2.options[Number($("a2-heads").value)];
  put("a2-heads-out", o.kv_heads + " of " + A2.query_heads);
  put("a2-kind", o.label + " " + o.group_size + ":1");
  put("a2-reduction", times(o.reduction_vs_mha));
  put("a2-per-token", bytes(o.bytes_per_token));
  put("a2-per-seq", bytes(o.bytes_per_sequence));
  put("a2-per-seq-label", "KV per " + int(A2.context) + "-token sequence");
  diagram(o.kv_heads, o.group_size);
}
$("a2-heads").addEventListener("input", act2);

// ---- Act 3: deployment and the wall -------------------------------------------------------------
const WALL = 72;  // where the wall stands on the bar (%); the rest shows what overflows
$("a3-track").style.setProperty("--wall", WALL + "%");
$("a3-wall").style.setProperty("--wall", WALL + "%");
put("a3-intro", "Weights load once per GPU and every user shares them; each user's cache is their own, for their whole context. Pick a GPU and how many of them hold one copy of the model, then push the context and the users until the caches hit the wall: the memory the GPU has.");
DP.gpus.forEach((g, i) => { const o = node("option", "", g.name); o.value = i; $("a3-gpu").appendChild(o); });
$("a3-ctx").max = DP.contexts.length - 1;
$("a3-ctx").value = DP.contexts.indexOf(DP.opening_context);
$("a3-users").max = DP.users.length - 1;
$("a3-users").value = DP.users.indexOf(DP.opening_users);
$("a4-ctx").max = DP.contexts.length - 1;
$("a4-ctx").value = longIndex;
let gi = 0, oi = DP.gpus[0].chosen;
const G = () => DP.gpus[gi];
const O = () => G().options[oi];
function deployButtons() {
  const box = $("a3-deploy"); box.innerHTML = "";
  G().options.forEach((o, i) => {
    const b = node("button", i === oi ? "on" : "", plural(o.num_gpus, "GPU", "GPUs"));
    b.id = "a3-opt-" + i;
    b.appendChild(node("span", "tag", layoutTag(o)));
    if (i === G().chosen) b.appendChild(node("span", "tag", "· opening"));
    b.addEventListener("click", () => { oi = i; act3(); });
    box.appendChild(b);
  });
}
function whyDeploy() {
  const g = G(), c = g.options[g.chosen], prev = g.chosen > 0 ? g.options[g.chosen - 1] : null;
  const nodeWords = g.gpus_per_node + "-GPU node";
  let text;
  if (g.reason === "smallest-tp" && !prev) {
    text = "Opens on one " + g.name + ": the weights (" + bytes(c.weights_bytes) + ") leave room under the " + bytes(c.usable_bytes) + " wall for a whole " + tokens(LONG) + "-token conversation (" + bytes(c.kv_bytes_per_sequence[longIndex]) + ").";
  } else if (g.reason === "smallest-tp") {
    text = "Opens on " + deployLabel(c, g.name) + ": the smallest degree within one " + nodeWords + " at which a whole " + tokens(LONG) + "-token conversation (" + bytes(c.kv_bytes_per_sequence[longIndex]) + " per GPU) fits beside the weights. On " + plural(prev.num_gpus, "GPU", "GPUs") + " the weights alone take " + bytes(prev.weights_bytes) + " of the " + bytes(prev.usable_bytes) + " wall per GPU" + (prev.pool_bytes > 0 ? ", leaving " + bytes(prev.pool_bytes) + " for caches where that conversation needs " + bytes(prev.kv_bytes_per_sequence[longIndex]) + "." : ": they do not fit at all.");
  } else if (g.reason === "pipeline") {
    const full = g.options.filter((o) => o.pp === 1).slice(-1)[0];
    text = "No tensor-parallel degree within one " + nodeWords + " holds " + M.name + " with room for a " + tokens(LONG) + "-token conversation: on " + plural(full.num_gpus, "GPU", "GPUs") + " the weights take " + bytes(full.weights_bytes) + " of the " + bytes(full.usable_bytes) + " wall per GPU. So it opens on " + deployLabel(c, g.name) + ": each node is a pipeline stage holding 1/" + c.pp + " of the layers, their weights and their cache.";
  } else if (g.reason === "dp-attention") {
    text = "Opens on " + deployLabel(c, g.name) + ": the fewest GPUs that hold a whole " + tokens(LONG) + "-token conversation, and of the layouts that size the one holding the most. Each GPU keeps every weight but the routed experts, a share of the experts, and its own conversations' cache whole" + (isMla ? ", where tensor parallelism would copy each conversation's latent to every GPU." : ".");
  } else {
    text = "Even " + deployLabel(c, g.name) + " cannot hold " + M.name + " with room for one " + tokens(LONG) + "-token conversation: the bar shows by how much it overflows.";
  }
  const o = O();
  if (oi !== g.chosen) text += " You are looking at " + deployLabel(o, g.name) + " instead.";
  if (attention && o.tp > 1) {
    if (isMla) text += " Each of the " + o.tp + " tensor-parallel GPUs" + (o.pp > 1 ? " of a stage" : "") + " stores the whole latent of every conversation: tensor parallelism splits the weights, not this cache.";
    else if (o.kv_head_copies > 1) text += " TP " + o.tp + " exceeds the " + M.kv_heads + " KV heads: each GPU holds " + plural(o.kv_heads_per_gpu, "KV head", "KV heads") + " and every head is stored on " + o.kv_head_copies + " GPUs, so the cache per GPU stops shrinking.";
    else text += " Each GPU holds " + o.kv_heads_per_gpu + " of the " + M.kv_heads + " KV heads of every layer, so tensor parallelism splits the cache too.";
  }
  if (o.pp > 1) text += " Pipeline stages split the layers: each GPU holds the cache of its own stage's layers.";
  return text;
}
function place(id, from, to) { const e = $(id); e.style.left = from + "%"; e.style.width = Math.max(0, to - from) + "%"; }
function act3() {
  const g = G(), o = O();
  deployButtons();
  const ci = Number($("a3-ctx").value), ctx = DP.contexts[ci];
  const ui = Number($("a3-users").value), users = DP.users[ui];
  put("a3-ctx-out", tokens(ctx) + (M.max_positions && ctx > M.max_positions ? " (beyond the model's " + int(M.max_positions) + " positions)" : ""));
  put("a3-users-out", int(users));
  put("a3-why", whyDeploy());
  const cache = o.cache_bytes[ci][ui], spare = o.spare_bytes[ci][ui], max = o.max_users_model_dtype[ci];
  const over = spare < 0;
  // the bar: a fixed scale per deployment, the wall at WALL% = the usable memory
  const at = (b) => WALL * b / o.usable_bytes;
  const w = at(o.weights_bytes), r = w + at(o.reserve_bytes), k = r + at(cache);
  place("a3-seg-w", 0, Math.min(w, WALL));
  place("a3-seg-r", Math.min(w, WALL), Math.min(r, WALL));
  place("a3-seg-kv", Math.min(r, WALL), Math.min(k, WALL));
  place("a3-seg-over", WALL, over ? Math.min(k, 100) : WALL);
  $("a3-seg-over").classList.toggle("clipped", k > 100);
  put("a3-wall-label", "the wall: " + bytes(o.usable_bytes) + " per GPU");
  put("a3-over-label", over ? bytes(-spare) + " past the wall" + (k > 100 ? " (bar cut off)" : "") : "");
  $("a3-mem").classList.toggle("overflowing", over);
  const v = $("a3-verdict");
  v.className = "verdict " + (over ? "over" : "fits");
  if (!over) {
    v.textContent = "Fits. " + plural(users, "user", "users") + " × " + tokens(ctx) + " tokens need " + bytes(cache) + " of cache per GPU; " + bytes(spare) + " stay free. Up to " + plural(max, "user fits", "users fit") + " at this context.";
  } else if (o.pool_bytes < 0) {
    v.textContent = "Overflow: on " + plural(o.num_gpus, "GPU", "GPUs") + " the weights and the runtime reserve alone pass the " + bytes(o.usable_bytes) + " wall by " + bytes(-o.pool_bytes) + " per GPU, before a single token is cached; with " + plural(users, "user", "users") + " × " + tokens(ctx) + " it is " + bytes(-spare) + " past the wall. " + (oi < g.options.length - 1 ? "Add GPUs with the buttons above." : "It needs more GPUs than these buttons offer, smaller weights (a quantized checkpoint) or a larger GPU.");
  } else {
    v.textContent = "Overflow: " + plural(users, "user", "users") + " × " + tokens(ctx) + " tokens need " + bytes(cache) + " of cache per GPU, " + bytes(-spare) + " more than fits under the " + bytes(o.usable_bytes) + " wall. " + (max ? "At most " + plural(max, "user fits", "users fit") + " at this context." : "Not even one conversation of this length fits.");
  }
  put("a3-max", int(max));
  put("a3-demand", bytes(cache));
  put("a3-free", over ? "none" : bytes(spare));
  put("a3-free-label", over ? "free per GPU: " + bytes(-spare) + " past the wall" : "free beside weights and cache, per GPU");
  put("a3-status", over ? "overflow" : "fits");
  $("a3-status").className = over ? "warn" : "okc";
  put("a3-gpu-note", g.name + ": " + bytes(g.memory_bytes) + " reported × " + g.gpu_mem_util + " = " + bytes(o.usable_bytes) + " usable per GPU = weights " + bytes(o.weights_bytes) + " + reserve " + bytes(o.reserve_bytes) + (o.pool_bytes >= 0 ? " + a KV pool of " + bytes(o.pool_bytes) + "." : ", " + bytes(-o.pool_bytes) + " short of a KV pool.") + (g.gpus_per_node_stated ? "" : " The profile does not say how many GPUs share a node; kvplan assumes " + g.gpus_per_node + "."));
  put("a3-takeaway", o.pool_bytes > 0
    ? "On " + deployLabel(o, g.name) + " the weights take " + bytes(o.weights_bytes) + " of each GPU's " + bytes(o.usable_bytes) + "; what is left holds " + plural(max, "conversation", "conversations") + " of " + tokens(ctx) + " tokens, " + bytes(o.kv_bytes_per_sequence[ci]) + " per GPU each. Memory, not compute, decides how many people one copy of the model serves, which is why long context is priced by the token."
    : "On " + deployLabel(o, g.name) + " the weights do not fit at all: split them over more GPUs before any cache can be stored.");
  act4();
}
$("a3-gpu").addEventListener("change", () => { gi = Number($("a3-gpu").value); oi = G().chosen; act3(); });
$("a3-gpu").addEventListener("input", () => { gi = Number($("a3-gpu").value); oi = G().chosen; act3(); });
["a3-ctx", "a3-users"].forEach((id) => $(id).addEventListener("input", act3));

// ---- Act 4: quantize the cache ------------------------------------------------------------------
const QUALITY = {
  bf16: ["lossless", "the baseline: 16-bit keys and values"],
  fp8: ["near-lossless", "fp8 e4m3 with calibrated scales: check your task, uncalibrated scales can cost accuracy"],
  int8: ["near-lossless", "int8 with a scale per token and head: generally safe; evaluate on your task"],
  int4: ["lossy", "int4 with a scale and zero-point per " + DP.int4_group_size + " values: errors add up over long outputs; run a long-context recall probe before shipping"],
};
let quant = "fp8";
put("a4-intro", "The cache need not be 16-bit. Storing keys and values in fewer bits shrinks it in proportion (plus a small scale per group of values) and buys users on the same GPUs, at some risk to quality on long outputs. The GPU and GPU count are Act 3's.");
function act4() {
  const g = G(), o = O();
  const ci = Number($("a4-ctx").value), ctx = DP.contexts[ci];
  put("a4-ctx-out", tokens(ctx) + (M.max_positions && ctx > M.max_positions ? " (beyond the model's " + int(M.max_positions) + " positions)" : ""));
  document.querySelectorAll("#a4-buttons button").forEach((b) => b.classList.toggle("on", b.dataset.dtype === quant));
  const bars = $("a4-bars"); bars.innerHTML = "";
  const most = Math.max(1, ...DP.dtypes.map((d) => o.max_users[d][ci]));
  DP.dtypes.forEach((d) => {
    bars.appendChild(node("span", "", d));
    const bar = node("div", "ubar" + (d === quant ? " sel" : ""));
    bar.style.width = (100 * o.max_users[d][ci] / most) + "%";
    bars.appendChild(bar);
    bars.appendChild(node("span", "n", plural(o.max_users[d][ci], "user", "users")));
  });
  put("a4-shrink", times(o.shrink_vs_bf16[quant]));
  put("a4-users", int(o.max_users[quant][ci]));
  put("a4-users-label", "users that fit at " + tokens(ctx) + " on " + deployLabel(o, g.name));
  put("a4-per-token", bytes(o.kv_bytes_per_token[quant]));
  const label = QUALITY[quant];
  put("a4-quality", label[0]);
  $("a4-quality").className = label[0] === "lossy" ? "warn" : "okc";
  put("a4-probe", label[1] + ".");
  const u = (d) => int(o.max_users[d][ci]);
  put("a4-takeaway", "At " + tokens(ctx) + " on " + deployLabel(o, g.name) + ": bf16 fits " + u("bf16") + ", fp8 " + u("fp8") + ", int4 " + u("int4") + " conversations. fp8 is the usual production choice, a " + times(o.shrink_vs_bf16.fp8) + " smaller cache that is near-lossless; int4 goes further, but its errors add up over long outputs, so test it on your task first." + (o.max_users.int4[ci] === 0 ? " Here not even int4 fits one conversation: add GPUs in Act 3." : ""));
}
DP.dtypes.forEach((d) => { const b = node("button", "", d); b.dataset.dtype = d; b.id = "a4-" + d; b.addEventListener("click", () => { quant = d; act4(); }); $("a4-buttons").appendChild(b); });
$("a4-ctx").addEventListener("input", act4);

// ---- why cards ----------------------------------------------------------------------------------
const opening = DP.gpus[0].options[DP.gpus[0].chosen];
const whyQ = D.quiz.find((q) => q.id === "why-cache").values;
put("why-exists-text", "A model writes one token at a time, and each new token attends to every token before it. Without a cache, each step would recompute the keys and values of every earlier token, so a conversation's key/value work grows with the square of its length: at " + int(whyQ.tokens) + " tokens a cache-less model does " + ratio1(whyQ.recompute_ratio) + " the work. With the cache, each step computes one token's " + (isMla ? "latent" : "key and value") + " and reads the rest: a straight-line append.");
put("why-trade-text", "The price is memory: for every token, in every layer, for every conversation in flight, " + (isMla ? "a latent stays" : attention ? "a key and a value stay" : "a state stays") + " on the GPU. For " + M.name + " that is " + (attention ? bytes(M.kv_bytes_per_token) + " per token; " : "") + "one " + tokens(H.context_len) + "-token conversation holds " + bytes(H.kv_bytes_per_sequence) + (H.cache_to_weights === null ? "." : ", " + share(H.cache_to_weights) + " the model's weights."));
put("why-formula-text", attention ? "Bytes per token = 2 × layers × KV heads × head dimension × bytes per value: the 2 is one key and one value. Grouped-query attention shrinks the KV heads, MLA replaces the pair with one latent, and fewer bits shrink the last term. For " + M.name + ":" : "A recurrent layer keeps a fixed state per sequence, whatever its length. For " + M.name + ":");
const terms = $("why-formula-terms"); terms.innerHTML = "";
A1.groups.forEach((g) => {
  let line;
  if (g.kind === "state") line = g.label + ": " + plural(g.layers, "layer", "layers") + ", fixed " + bytes(g.state_bytes) + " per sequence";
  else if (g.element_bytes === null) line = g.label + ": " + int(g.layers) + " layers × " + int(g.bytes_per_token_per_layer) + " B = " + int(g.bytes_per_token) + " B per token";
  else if (g.kind === "mla") line = g.label + ": " + int(g.layers) + " layers × (" + int(A2.mla_kv_lora_rank) + " + " + int(A2.mla_rope_dim) + (A2.mla_indexer_dim ? " + " + int(A2.mla_indexer_dim) : "") + ") values × " + g.element_bytes + " B = " + int(g.bytes_per_token) + " B per token";
  else if (g.head_dim_v === g.head_dim) line = g.label + ": 2 × " + int(g.layers) + " layers × " + int(g.kv_heads) + " KV heads × " + int(g.head_dim) + " × " + g.element_bytes + " B = " + int(g.bytes_per_token) + " B per token";
  else line = g.label + ": " + int(g.layers) + " layers × " + int(g.kv_heads) + " KV heads × (" + int(g.head_dim) + " + " + int(g.head_dim_v) + ") × " + g.element_bytes + " B = " + int(g.bytes_per_token) + " B per token";
  if (g.window) line += ", each held for at most " + int(g.window) + " tokens";
  terms.appendChild(node("div", "", line));
});
if (attention && A1.groups.length > 1) terms.appendChild(node("div", "", "all layers: " + int(M.kv_bytes_per_token) + " B per token (" + bytes(M.kv_bytes_per_token) + ")"));
put("why-formula-scale", "Multiply by the context for one conversation, and by the users for the whole batch: that is Act 3's bar.");
put("why-serving-text", "Each decode step reads every weight and every cached token from memory and does little arithmetic per byte it reads, so the GPU mostly waits on memory. What stops one more user is not compute but whether one more cache fits beside the weights. On " + deployLabel(opening, DP.gpus[0].name) + " each GPU keeps " + bytes(opening.weights_bytes) + " of weights and " + (opening.pool_bytes > 0 ? bytes(opening.pool_bytes) : "no room") + " for caches: " + plural(opening.max_users_model_dtype[longIndex], "conversation", "conversations") + " of " + tokens(LONG) + " tokens. Every serving trick you will meet (grouped heads, paged blocks, quantized caches, shared prefixes) is a way to shrink the cache.");

// ---- the quiz -----------------------------------------------------------------------------------
function quizWords(q) {
  const v = q.values;
  const where = v.gpu ? deployLabel(v, v.gpu) : "";
  if (q.id === "why-cache") return {
    ask: "Why does a model keep keys and values while it generates?",
    label: (c) => ({ reuse: "So each new token reuses the past's keys and values instead of recomputing them", weights: "To keep the model's weights close to the arithmetic units", history: "To remember earlier conversations between requests" })[c.key],
    why: (c) => c.correct ? "Each step computes only the new token's key and value and reads the stored ones: at " + int(v.tokens) + " tokens a cache-less model would do " + ratio1(v.recompute_ratio) + " the key/value work." : c.key === "weights" ? "The weights are loaded once whatever happens; the cache holds what the model computed from this conversation's tokens." : "The cache belongs to one request and is freed when it ends; reusing a shared prompt across requests is prefix caching, a different trick.",
  };
  if (q.id === "sequence-bytes") return {
    ask: "How much cache does one " + int(v.context_len) + "-token conversation of " + M.name + " hold, in " + M.kv_dtype + "?",
    label: (c) => bytes(c.value),
    why: (c) => ({
      correct: (attention ? bytes(v.kv_bytes_per_token) + " per token × " + int(v.context_len) + " tokens" + (windowed.length ? ", with the sliding-window layers capped at their window" : "") : "the fixed state of every layer") + (stateGroups.length && attention ? ", plus the fixed recurrent state" : "") + ": " + bytes(c.value) + ".",
      "per-token": "That is one token's cache; a conversation keeps one for each of its tokens.",
      "multi-head": isMla ? "That is what it would hold if the latent were expanded into keys and values for every head." : "That is what it would hold if every query head kept its own key and value; " + M.name + " shares them.",
      "every-layer-every-token": "That counts every layer holding every token; the sliding-window layers keep only their window.",
      weights: "That is the model's weights, loaded once and shared by every user; the cache is per conversation.",
    })[c.correct ? "correct" : c.key],
  };
  if (q.id === "what-caps") return {
    ask: "On " + where + ", " + plural(v.max_users, "conversation", "conversations") + " of " + tokens(v.context_len) + " tokens fit. What stops one more?",
    label: (c) => ({ memory: "The memory left beside the weights for another cache", compute: "The GPU's arithmetic throughput (FLOP/s)", heads: "The number of attention heads" })[c.key],
    why: (c) => c.correct ? "Each GPU holds " + bytes(v.weights_bytes) + " of weights; the " + (v.pool_bytes > 0 ? bytes(v.pool_bytes) : "nothing") + " left hold " + plural(v.max_users, "cache", "caches") + " of " + bytes(v.kv_bytes_per_sequence) + ", and one more does not fit." : c.key === "compute" ? "Decode reads far more bytes than it does arithmetic per byte: the GPU waits on memory long before it runs out of FLOP/s." : "Heads set how big each cache is, not how many fit; the memory left over does.",
  };
  if (q.id === "fp8-users") return {
    ask: "At " + tokens(v.context_len) + " on " + where + ", " + plural(v.users.bf16, "conversation fits", "conversations fit") + " with a bf16 cache. How many with an fp8 cache?",
    label: (c) => int(c.value),
    why: (c) => c.correct ? "fp8 stores each value in fewer bytes than bf16, so the same memory holds " + int(v.users.fp8) + " conversations (int4 would reach " + int(v.users.int4) + ", at more risk to quality)." : c.key === "bf16" ? "That is bf16's count; each conversation's cache is smaller in fp8, so more fit in the same memory." : "That is int4's count, the smallest cache of the four and the largest risk to quality.",
  };
}
let score = 0;
const answered = new Set();
D.quiz.forEach((q, qi) => {
  const w = quizWords(q);
  const box = node("div", "q"); box.id = "quiz-" + q.id;
  box.appendChild(node("h3", "", (qi + 1) + ". " + w.ask));
  const choices = node("div", "choices");
  const feedback = node("p", "feedback"); feedback.id = "quiz-" + q.id + "-feedback";
  q.choices.forEach((c) => {
    const b = node("button", "", w.label(c));
    b.id = "quiz-" + q.id + "-" + c.key;
    b.dataset.correct = c.correct ? "yes" : "no";
    b.addEventListener("click", () => {
      choices.querySelectorAll("button").forEach((x) => x.classList.remove("right", "wrong"));
      b.classList.add(c.correct ? "right" : "wrong");
      feedback.textContent = (c.correct ? "Right. " : "Not quite. ") + w.why(c);
      feedback.className = "feedback " + (c.correct ? "okc" : "warn");
      if (!answered.has(q.id)) { answered.add(q.id); if (c.correct) score += 1; }
      put("quiz-score", "First tries right: " + score + " of " + answered.size + " answered.");
    });
    choices.appendChild(b);
  });
  box.appendChild(choices); box.appendChild(feedback);
  $("quiz-questions").appendChild(box);
  const right = q.choices.find((c) => c.correct);
  const li = node("li", "", w.ask + " Answer: " + w.label(right) + ". " + w.why(right));
  $("quiz-answers").appendChild(li);
});

D.notes.forEach((n) => $("notes").appendChild(node("li", "", n.text)));
put("version", "Generated by kvplan " + D.kvplan_version + ". Every number on this page comes from kvplan's formulas, embedded as data (kvplan explore --format json prints it).");
act1(); act2(); act3();
"""
