"""The explorer page's layout: its style sheet and its HTML skeleton. Every number and most
sentences are filled in by the script (kvplan.present.explore_js) from kvplan's embedded data;
the fixed words here carry no number."""

STYLE = r"""
:root{--ink:#1c2430;--muted:#5b6675;--line:#d9dee5;--bg:#f6f7f9;--card:#fff;
--w:#5b6fd0;--r:#9aa5b1;--kv:#e0774a;--gen:#f2c94c;--free:#e8edf2;--bad:#c0392b;--ok:#2e8b57;
--q:#5b6fd0;--accent:#2f6fdd}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:var(--bg)}
main{max-width:1040px;margin:0 auto;padding:20px 20px 40px}
h1{font-size:30px;line-height:1.2;margin:6px 0 10px}h2{font-size:22px;margin:2px 0 6px}
h3{font-size:16px;margin:0 0 6px}
p{margin:8px 0}
.kicker,.act{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.08em;font-weight:600}
.lede{font-size:18px;max-width:62em}
section,header.hook{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:20px 22px;margin:0 0 18px;min-width:0}
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(200px,1fr));gap:12px;margin:14px 0 6px}
.figure{border-left:4px solid var(--kv);padding:4px 12px}.figure b{display:block;font-size:24px;font-variant-numeric:tabular-nums}
.figure span{font-size:13px;color:var(--muted)}.figure.wt{border-color:var(--w)}
nav.toc{display:flex;flex-wrap:wrap;gap:6px 14px;font-size:14px;margin-top:10px}nav.toc a{color:var(--accent);text-decoration:none}
.intro{color:var(--ink);max-width:62em}
.controls{display:flex;flex-wrap:wrap;gap:12px 22px;align-items:flex-end;margin:14px 0}
.controls label{display:flex;flex-direction:column;font-size:13px;color:var(--muted);min-width:0;flex:1 1 220px;max-width:340px}
.controls label output{color:var(--ink);font-weight:600}
.controls input[type=range]{width:100%;margin:6px 0 0}
select{font:inherit;padding:6px 8px;border:1px solid var(--line);border-radius:6px;background:#fff;max-width:100%}
.buttons{display:flex;flex-wrap:wrap;gap:6px}
button{font:inherit;font-size:14px;padding:7px 12px;border:1px solid var(--line);border-radius:8px;background:#fff;color:var(--ink);cursor:pointer}
button:hover{border-color:var(--muted)}button.on{background:var(--ink);color:#fff;border-color:var(--ink)}
button .tag{font-size:11px;opacity:.75;margin-left:4px}
.stats{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:10px;margin-top:12px}
.stat{border:1px solid var(--line);border-radius:8px;padding:9px 12px;min-width:0}
.stat b{display:block;font-size:21px;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.stat span{font-size:12px;color:var(--muted)}
.takeaway{margin:16px 0 0;padding:10px 14px;border-radius:8px;background:#eef3fb;border-left:4px solid var(--accent)}
.takeaway::before{content:"Takeaway  ";font-weight:700;color:var(--accent)}
.note{color:var(--muted);font-size:14px}
.warn{color:var(--bad);font-weight:600}.okc{color:var(--ok);font-weight:600}
.table-wrap{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%;font-size:13px;margin-top:10px}
td,th{border-bottom:1px solid var(--line);padding:4px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left;overflow-wrap:anywhere}
/* Act 1: the token strip, one square per paged block */
.strip-row{margin:10px 0 4px}.strip-row .lab{font-size:13px;color:var(--muted);margin-bottom:3px}
.strip{display:flex;flex-wrap:wrap;gap:2px;min-height:12px}
.blk{width:12px;height:14px;border-radius:2px;background:var(--free);position:relative;overflow:hidden}
.blk i{position:absolute;left:0;bottom:0;top:0;background:var(--kv)}
.blk.gen i{background:var(--gen)}.blk.gone{background:#f3f4f6;outline:1px dashed #c9ced6;outline-offset:-1px}
.blk.gone i{background:transparent}
.statebox{display:inline-block;padding:3px 10px;border-radius:6px;background:#efe6fb;border:1px solid #cbb6ee;font-size:13px}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:var(--muted);margin-top:8px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:5px;border-radius:2px;vertical-align:-1px}
/* Act 2: heads */
.heads{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0}
.grp{border:1px solid var(--line);border-radius:8px;padding:5px;display:flex;flex-direction:column;align-items:center;gap:4px;background:#fbfcfd}
.kvh{font-size:10px;font-weight:700;color:#fff;background:var(--kv);border-radius:4px;padding:1px 5px;white-space:nowrap}
.qs{display:flex;flex-wrap:wrap;gap:2px;justify-content:center}
.qh{width:9px;height:9px;border-radius:50%;background:var(--q)}
.latent{border:2px solid var(--kv);border-radius:10px;padding:10px;background:#fff7f2;text-align:center;max-width:100%}
.latent .kvh{display:inline-block;font-size:12px;padding:3px 8px;margin:4px 0}
.latent .qs{margin-top:8px}
/* Act 3: memory with a fixed wall */
.mem{margin:26px 0 6px;position:relative}
.track{position:relative;height:40px;border-radius:6px;background:linear-gradient(to right,var(--free) 0,var(--free) var(--wall),transparent var(--wall));border:1px solid var(--line)}
.zone{position:absolute;top:0;bottom:0;right:0;left:var(--wall);background:repeating-linear-gradient(135deg,#fbeaea 0 6px,#fff 6px 12px);border-radius:0 6px 6px 0}
.seg{position:absolute;top:0;bottom:0;width:0}
.seg.w{background:var(--w)}.seg.r{background:var(--r)}.seg.kv{background:var(--kv)}
.seg.over{background:repeating-linear-gradient(135deg,var(--bad) 0 7px,#e05a4c 7px 14px)}
.seg.over.clipped{border-radius:0 6px 6px 0}
.wall{position:absolute;top:-22px;bottom:-6px;width:0;border-left:4px solid #111;left:var(--wall);margin-left:-2px}
.wall span{position:absolute;bottom:calc(100% - 20px);right:6px;white-space:nowrap;font-size:12px;font-weight:600}
.over-label{margin-top:4px;min-height:18px;font-size:12px;color:var(--bad);font-weight:700;text-align:right}
.verdict{margin:12px 0 0;padding:10px 14px;border-radius:8px;font-size:15px}
.verdict.fits{background:#edf7f0;border-left:4px solid var(--ok)}
.verdict.over{background:#fbeceb;border-left:4px solid var(--bad)}
.why-deploy{font-size:14px;margin:8px 0 0;padding:8px 12px;border-radius:8px;background:#f4f6f9}
/* Act 4: users per dtype */
.ubars{margin:12px 0 0;display:grid;grid-template-columns:auto 1fr auto;gap:6px 10px;align-items:center;font-size:14px}
.ubar{height:16px;border-radius:4px;background:var(--kv);min-width:2px}
.ubar.sel{outline:2px solid var(--ink);outline-offset:1px}
.ubars .n{font-variant-numeric:tabular-nums;font-weight:600}
/* why cards and quiz */
.cards{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:12px}
.card{border:1px solid var(--line);border-radius:10px;padding:14px 16px;background:#fbfcfd;min-width:0}
.card p{font-size:15px}
.formula{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px;background:#f1f3f6;border-radius:6px;padding:8px 10px;overflow-wrap:anywhere}
.q{border-top:1px solid var(--line);padding:14px 0 6px}.q:first-of-type{border-top:0}
.q .choices{display:flex;flex-direction:column;gap:6px;margin:8px 0}
.q .choices button{text-align:left;width:100%;overflow-wrap:anywhere}
.q button.right{background:#e3f3e8;border-color:var(--ok)}.q button.wrong{background:#fbeceb;border-color:var(--bad)}
.feedback{font-size:14px;min-height:1em}.feedback.okc,.feedback.warn{font-weight:500}
details{margin-top:12px}summary{cursor:pointer;color:var(--accent)}
footer{font-size:13px;color:var(--muted);padding:0 4px}footer li{margin-bottom:4px;overflow-wrap:anywhere}
@media (max-width:600px){
 main{padding:10px 10px 30px}
 section,header.hook{padding:14px 14px;border-radius:10px}
 h1{font-size:24px}h2{font-size:19px}.lede{font-size:16px}
 .figure b{font-size:20px}.stat b{font-size:18px}
 .controls label{flex-basis:100%;max-width:none}
 .blk{width:8px;height:10px}
 .wall span{font-size:11px}
 .cards{grid-template-columns:minmax(0,1fr)}
}
"""

BODY = r"""<main>
<header class="hook" id="hook">
<div class="kicker">KV cache explorer · computed by kvplan</div>
<h1 id="title"></h1>
<p class="lede" id="hook-text"></p>
<div class="figures">
<div class="figure"><b id="hook-per-token"></b><span>of cache per token, all layers</span></div>
<div class="figure"><b id="hook-per-seq"></b><span id="hook-per-seq-label"></span></div>
<div class="figure wt"><b id="hook-weights"></b><span id="hook-weights-label"></span></div>
</div>
<nav class="toc"><a href="#act1">1 · Watch it grow</a><a href="#act2">2 · Share the heads</a><a href="#act3">3 · Hit the wall</a><a href="#act4">4 · Fewer bits</a><a href="#why">Why</a><a href="#quiz">Quiz</a></nav>
</header>

<section id="act1"><div class="act">Act 1 · prefill and decode</div><h2>Watch the cache grow</h2>
<p class="intro" id="a1-intro"></p>
<div class="controls"><label>Prompt length (tokens): <output id="a1-prompt-out"></output><input id="a1-prompt" type="range" min="0" step="1" value="512"></label>
<div class="buttons"><button id="a1-generate">Generate one token</button><button id="a1-generate16">Generate 16</button><button id="a1-reset">Reset generation</button></div></div>
<div id="a1-strips"></div>
<div class="legend"><span><i style="background:var(--kv)"></i>prompt tokens (prefill, all at once)</span><span><i style="background:var(--gen)"></i>generated tokens (decode, one per step)</span><span id="a1-legend-gone"><i style="background:#f3f4f6;outline:1px dashed #c9ced6"></i>freed: outside the window</span><span id="a1-legend-block"></span></div>
<div class="stats"><div class="stat"><b id="a1-tokens"></b><span>tokens cached (prompt + generated)</span></div>
<div class="stat"><b id="a1-vectors"></b><span id="a1-vectors-label">K/V vectors stored, all layers</span></div>
<div class="stat"><b id="a1-bytes"></b><span>cache for this sequence</span></div>
<div class="stat"><b id="a1-recompute"></b><span>key/value work a cache-less model would redo</span></div></div>
<div class="table-wrap"><table id="a1-groups"><thead><tr><th>layers, by what they cache</th><th>layers</th><th>K/V vectors stored</th></tr></thead><tbody></tbody></table></div>
<p class="takeaway" id="a1-takeaway"></p>
</section>

<section id="act2"><div class="act">Act 2 · heads</div><h2 id="a2-title">Share the heads, shrink the cache</h2>
<p class="intro" id="a2-intro"></p>
<div class="controls" id="a2-controls"><label>KV heads: <output id="a2-heads-out"></output><input id="a2-heads" type="range" min="0" step="1"></label></div>
<div id="a2-diagram" class="heads" aria-label="query heads grouped under the KV heads they read"></div>
<div class="legend" id="a2-legend"><span><i style="background:var(--q);border-radius:50%"></i>query head (computed fresh each step, never cached)</span><span><i style="background:var(--kv)"></i>what is cached per token per layer</span></div>
<div class="stats" id="a2-stats"><div class="stat"><b id="a2-kind"></b><span>attention layout (query : KV heads)</span></div>
<div class="stat"><b id="a2-reduction"></b><span>cache reduction vs multi-head</span></div>
<div class="stat"><b id="a2-per-token"></b><span>KV per token, all layers</span></div>
<div class="stat"><b id="a2-per-seq"></b><span id="a2-per-seq-label">KV per sequence</span></div></div>
<p class="takeaway" id="a2-takeaway"></p>
</section>

<section id="act3"><div class="act">Act 3 · the concurrency wall</div><h2>Where the cache caps your users</h2>
<p class="intro" id="a3-intro"></p>
<div class="controls"><label>GPU <select id="a3-gpu"></select></label>
<div><div class="note">GPUs for one copy of the model</div><div class="buttons" id="a3-deploy"></div></div></div>
<p class="why-deploy" id="a3-why"></p>
<div class="controls"><label>Context per user (tokens): <output id="a3-ctx-out"></output><input id="a3-ctx" type="range" min="0" step="1"></label>
<label>Concurrent users: <output id="a3-users-out"></output><input id="a3-users" type="range" min="0" step="1"></label></div>
<div class="mem" id="a3-mem"><div class="track" id="a3-track"><div class="zone"></div>
<div class="seg w" id="a3-seg-w"></div><div class="seg r" id="a3-seg-r"></div><div class="seg kv" id="a3-seg-kv"></div><div class="seg over" id="a3-seg-over"></div>
<div class="wall" id="a3-wall"><span id="a3-wall-label"></span></div></div>
<div class="over-label" id="a3-over-label"></div></div>
<div class="legend"><span><i style="background:var(--w)"></i>weights per GPU (shared by every user)</span><span><i style="background:var(--r)"></i>activation and runtime reserve</span><span><i style="background:var(--kv)"></i>every user's cache</span><span><i style="background:var(--free)"></i>free</span><span><i style="background:var(--bad)"></i>past the wall: does not fit</span></div>
<p class="verdict" id="a3-verdict"></p>
<div class="stats"><div class="stat"><b id="a3-max"></b><span>max users that fit at this context</span></div>
<div class="stat"><b id="a3-demand"></b><span>cache demanded per GPU, in whole blocks</span></div>
<div class="stat"><b id="a3-free"></b><span id="a3-free-label">free beside weights and cache, per GPU</span></div>
<div class="stat"><b id="a3-status"></b><span>status</span></div></div>
<p class="note" id="a3-gpu-note"></p>
<p class="takeaway" id="a3-takeaway"></p>
</section>

<section id="act4"><div class="act">Act 4 · quantize the cache</div><h2>Claw the memory back</h2>
<p class="intro" id="a4-intro"></p>
<div class="controls"><div class="buttons" id="a4-buttons"></div>
<label>Context per user (tokens): <output id="a4-ctx-out"></output><input id="a4-ctx" type="range" min="0" step="1"></label></div>
<div class="ubars" id="a4-bars"></div>
<div class="stats"><div class="stat"><b id="a4-shrink"></b><span>cache shrink vs bf16</span></div>
<div class="stat"><b id="a4-users"></b><span id="a4-users-label">users that fit</span></div>
<div class="stat"><b id="a4-per-token"></b><span>KV per token per GPU, scales included</span></div>
<div class="stat"><b id="a4-quality"></b><span>quality</span></div></div>
<p class="note" id="a4-probe"></p>
<p class="takeaway" id="a4-takeaway"></p>
</section>

<section id="why"><div class="act">Behind the acts</div><h2>Why the cache rules serving</h2>
<div class="cards">
<div class="card" id="why-exists"><h3>Why keep a cache at all</h3><p id="why-exists-text"></p></div>
<div class="card" id="why-trade"><h3>The trade: memory for work</h3><p id="why-trade-text"></p></div>
<div class="card" id="why-formula"><h3>The size formula, for this model</h3><p id="why-formula-text"></p><div class="formula" id="why-formula-terms"></div><p class="note" id="why-formula-scale"></p></div>
<div class="card" id="why-serving"><h3>Why it caps serving</h3><p id="why-serving-text"></p></div>
</div></section>

<section id="quiz"><div class="act">Check yourself</div><h2>Four questions on this model</h2>
<p class="note">Pick an answer; every number below comes from kvplan, for this model and the first GPU's opening deployment.</p>
<div id="quiz-questions"></div>
<p id="quiz-score" class="note"></p>
<details id="quiz-all"><summary>See every answer, with the reasoning</summary><ol id="quiz-answers"></ol></details>
</section>

<footer><h2>Assumptions</h2><ol id="notes"></ol><p id="version"></p></footer>
</main>"""
