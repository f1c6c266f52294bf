"""`kvplan report` as a design-doc section in Markdown: prose and tables from the typed result,
with every assumption a footnote cited by note id where it applies. Every string of the result
(a model's name from its folder or GGUF, a GPU profile's and a link's name, a dtype, a note's
words) enters the Markdown through `md_text` (kvplan.present.escape); numbers are kvplan's."""

from __future__ import annotations

from kvplan.plans.deployment import deployment_of, layout_text
from kvplan.plans.design import DesignResult
from kvplan.present import format as f
from kvplan.present.escape import md_link_target, md_text
from kvplan.present.notes import note_text, note_texts


class Footnotes:
    """The report's notes as numbered footnotes. `cite(id, **values)` marks where a note applies
    (every note with that id whose values match); `uncited()` lists the ones no place cited, which
    the report cites from its anatomy paragraph: renderers (GitHub, pandoc) drop a footnote no
    one references."""

    def __init__(self, notes):
        self.notes = notes
        self.texts = note_texts(notes)
        self.cited: set[int] = set()

    def cite(self, note_id: str, **values) -> str:
        numbers: list[int] = []
        for item in self.notes:
            if item.id == note_id and all(item.value(k) == v for k, v in values.items()):
                number = self.texts.index(note_text(item)) + 1
                if number not in numbers:
                    numbers.append(number)
        self.cited.update(numbers)
        return "".join(f"[^{n}]" for n in numbers)

    def cite_all(self, *note_ids: str) -> str:
        return "".join(self.cite(note_id) for note_id in note_ids)

    def uncited(self) -> str:
        return "".join(f"[^{n}]" for n in range(1, len(self.texts) + 1) if n not in self.cited)

    def definitions(self) -> list[str]:
        return [f"[^{i}]: {md_text(words)}" for i, words in enumerate(self.texts, 1)]


def _gib(num_bytes: float) -> str:
    return f.gib_text(num_bytes, 1)


def render_markdown(result: DesignResult, plots: dict[str, str] | None = None) -> str:
    m = result.model
    dtypes = result.kv_dtypes
    base = dtypes[0]
    notes = Footnotes(result.notes)
    name = md_text(m.name)
    out = [f"## KV-cache plan: {name}", ""]
    layers = ", ".join(f"{n} × {md_text(label)}" for label, n in m.layers.items())
    saving = f"{m.gqa_saving:.1f}×" if m.gqa_saving else "n/a"
    out += ["### Cache anatomy", ""]
    anatomy = len(out)  # the anatomy paragraph: it also cites the notes no other place does
    out += [
        f"{name}, a {md_text(m.family)} model, has {f.count(m.params_total)} parameters "
        f"({f.count(m.params_active)} active per token); its weights take "
        f"{_gib(m.weights_bytes)} in {md_text(m.weights_dtype)}. Layers: {layers}. Every token "
        f"of context costs **{m.kv_bytes_per_token:,} bytes** of KV in {md_text(base)} with "
        "every attention "
        f"layer holding it — {saving} less than the multi-head equivalent "
        f"({m.mha_equivalent_bytes_per_token:,} B/token).",
        "",
        "### KV per sequence",
        "",
        "| context | "
        + " | ".join(f"{md_text(d)} per sequence{_format_note(notes, d)}" for d in dtypes)
        + " | KV ÷ weights |",
        "|---:|" + "---:|" * len(dtypes) + "---:|",
    ]
    for c in sorted({r.context_len for r in result.kv_table}):
        rows = [r for r in result.kv_table if r.context_len == c]
        out.append(
            f"| {f.tokens(c)} | "
            + " | ".join(_gib(r.kv_bytes_per_sequence) for r in rows)
            + f" | {rows[0].kv_to_weights:.3f} |"
        )
    out += ["", "### Capacity and speed per GPU option", ""]
    out += _comparison(result, notes)
    peaks = _peaks_per_option(result, notes)
    for option, peak in zip(result.options, peaks, strict=True):
        tp = option.tp
        out += [
            f"**{_md_option_name(option)}** ({md_text(_layout(option))}"
            + notes.cite("deployment-chosen", gpu=option.gpu)
            + notes.cite("dp-attention", ranks=option.dp_attention)
            + notes.cite("tp-per-gpu", tp=tp)
            + notes.cite("tp-kv-replicated", tp=tp)
            + notes.cite("tp-mla-replicated", tp=tp)
            + f"; memory utilization {result.gpu_mem_util}"
            f"{notes.cite('capacity-budget', gpu=option.gpu)}; sequences are "
            "per replica, TPOT at that many sequences)",
            "",
            "| context | "
            + " | ".join(
                f"sequences ({md_text(d)}){notes.cite('capacity-paged') if i == 0 else ''}"
                for i, d in enumerate(dtypes)
            )
            + " | KV pool / GPU | limited by | "
            + f"TTFT floor{peak}{notes.cite('roofline-prefill-causal')} | "
            + "TPOT floor at max batch"
            + notes.cite_all("roofline-decode-reads", "roofline-moe", "roofline-state")
            + notes.cite("roofline-tp", tp=tp)
            + notes.cite("roofline-pp")
            + f" | ceiling BW/(s·k) per replica{peak} | "
            + f"B_read{notes.cite('roofline-batch-equal-reads')} |",
            "|---:|" + "---:|" * len(dtypes) + "---:|---|---:|---:|---:|---:|",
        ]
        for row in option.per_context:
            seqs = " | ".join(f"{row.max_sequences[d]:,}" for d in dtypes)
            beyond = notes.cite("ctx-beyond-positions", context_len=row.context_len)
            out.append(
                f"| {f.tokens(row.context_len)}{beyond} | {seqs} | "
                f"{_gib(row.kv_pool_bytes_per_gpu)} | {md_text(row.limited_by)} | "
                f"{row.ttft_floor_s:.2f} s | {f.ms_text(row.tpot_floor_s)} | "
                f"{row.ceiling_tokens_per_s:,.0f} tok/s | {row.batch_equal_reads:.1f} |"
            )
        out.append("")
    transfers = [
        (o, r, r.kv_transfer) for o in result.options for r in o.per_context if r.kv_transfer
    ]
    if transfers:
        out += [
            "### Disaggregated prefill and decode",
            "",
            "Moving each request's KV from a prefill pool to a decode replica"
            f"{notes.cite_all('transfer-link', 'transfer-no-link')}:",
            "",
            "| option | context | KV per request | transfer time | requests/s the links sustain |",
            "|---|---:|---:|---:|---:|",
        ]
        for o, r, t in transfers:
            out.append(
                f"| {_md_option_name(o)} over {md_text(t.link)}"
                f"{notes.cite('transfer-replication', tp=o.tp)} | "
                f"{f.tokens(r.context_len)} | "
                f"{_gib(t.bytes_per_request)} | {f.ms_text(t.time_s)} | "
                f"{t.requests_per_s:,.1f} |"
            )
        out.append("")
    if plots:
        out += [f"![{md_text(title)}]({md_link_target(path)})" for title, path in plots.items()]
        out.append("")
    out += _decision_order(result, notes)
    out[anatomy] += notes.uncited()
    # the definitions last: renderers gather footnotes at the end, under this heading
    out += ["", f"*Generated by kvplan {result.kvplan_version}.*", "", "### Assumptions", ""]
    out += notes.definitions() + [""]
    return "\n".join(out)


def _option_name(option) -> str:
    """'H100 SXM × 16' (the GPUs of one replica)."""
    return f"{option.gpu} × {option.gpus}"


def _md_option_name(option) -> str:
    return md_text(_option_name(option))


def _layout(option) -> str:
    nodes = "one node" if option.nodes == 1 else f"{option.nodes} nodes"
    return f"{layout_text(deployment_of(option))}, {nodes}"


def _comparison(result: DesignResult, notes: Footnotes) -> list[str]:
    """The options side by side per GPU at the longest context, and the verdict."""
    cmp = result.comparison
    if cmp is None or len(cmp.rows) < 2:
        return []
    out = [
        f"**Verdict.** {md_text(note_text(cmp.verdict))}"
        f"{notes.cite('compare-columns')}{notes.cite('compare-prices')}",
        "",
        f"| GPU | deployment | GPUs | sequences at {f.tokens(cmp.context_len)} | per GPU | "
        "TPOT floor | TPOT | tok/s per GPU | $/M output tokens |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in cmp.rows:
        if not row.fits:
            out.append(f"| {md_text(row.gpu)} | does not fit | — | 0 | 0 | — | — | — | — |")
            continue
        assert row.tpot_floor_s is not None and row.tpot_s is not None, "a kind that fits is priced"
        usd = f.usd(row.usd_per_million_output_tokens)
        out.append(
            f"| {md_text(row.gpu)} | {md_text(row.layout)} | {row.gpus_per_replica:,} | "
            f"{row.users_per_replica:,} | {row.users_per_gpu:,.1f} | "
            f"{f.ms_text(row.tpot_floor_s)} | {f.ms_text(row.tpot_s)} | "
            f"{row.tokens_per_s_per_gpu:,.0f} | {usd} |"
        )
    return out + [""]


def _format_note(notes: Footnotes, kv_dtype: str) -> str:
    """The note on how a KV dtype is stored (fp8, int8, int4, ggml types)."""
    return notes.cite(f"kv-{kv_dtype}") + notes.cite("kv-ggml", dtype=kv_dtype)


def _peaks_per_option(result: DesignResult, notes: Footnotes) -> list[str]:
    """Each option's roofline-peaks citation. The note names no GPU; the plan adds one per option
    in order (repeats dropped), so equal counts pair them; otherwise every option cites all."""
    peaks = [item for item in result.notes if item.id == "roofline-peaks"]
    if len(peaks) == len(result.options):
        pairs = [dict(item.values) for item in peaks]
        return [notes.cite("roofline-peaks", **values) for values in pairs]
    return [notes.cite("roofline-peaks")] * len(result.options)


def _decision_order(result: DesignResult, notes: Footnotes) -> list[str]:
    m = result.model
    dtypes = result.kv_dtypes
    option = result.options[0]
    longest = option.per_context[-1]
    c = f.tokens(longest.context_len)
    base = dtypes[0]
    seqs = longest.max_sequences[base]
    wi = longest.what_if
    paging = longest.paging
    lines = [f"### Decision order for {_md_option_name(option)} at {c}", ""]
    saving = f"{m.gqa_saving:.1f}×" if m.gqa_saving else "no"
    lines.append(
        f"1. **Model choice.** This checkpoint already saves {saving} against "
        "multi-head attention; a GQA/MLA checkpoint is the largest lever if the model "
        "is still open."
    )
    if paging:
        lines.append(
            f"2. **Paging and continuous batching** (lossless). At a mean of "
            f"{f.tokens(paging.mean_len)} tokens used of {c} reserved, a contiguous "
            f"allocator admits {paging.contiguous_sequences:,} sequences; a paged one "
            f"{paging.paged_sequences:,}{notes.cite('capacity-paged')}."
        )
    if "prefix" in wi:
        gain = (
            f"{wi['prefix']:,} sequences instead of {seqs:,}"
            if wi["prefix"] > seqs
            else f"no extra sequence at {c} (the prompt is "
            f"{result.prefix_tokens / longest.context_len:.0%} of each one); it pays at "
            "shorter contexts and in prefill time"
        )
        lines.append(
            f"3. **Prefix reuse** (lossless). A {result.prefix_tokens:,}-token shared "
            f"system prompt stored once: {gain}. It needs prefix-aware routing to fire."
        )
    lines.append(
        f"4. **Chunked prefill** (lossless). A {c} prompt takes at least "
        f"{longest.ttft_floor_s:.2f} s of compute; chunk it so it does not stall the "
        f"decode batch (TPOT floor {f.ms_text(longest.tpot_floor_s)})."
    )
    if "kv_fp8" in wi:
        lines.append(
            f"5. **fp8 KV** (measure accuracy). {wi['kv_fp8']:,} sequences at {c} "
            f"instead of {seqs:,}; int4 would give {wi.get('kv_int4', 0):,} but degrades "
            "long-context recall."
        )
    lines.append(
        "6. **Windows or eviction**, only behind a long-context recall probe in CI; "
        "never evict the first (sink) tokens."
    )
    lines.append(
        f"7. **Change the requirement.** Halving the context to "
        f"{f.tokens(longest.context_len // 2)} gives {wi.get('half_context', 0):,} sequences; "
        "otherwise add GPUs (tensor parallelism within a node shards KV heads and weights, "
        "pipeline stages across nodes split the layers, DP attention gives an MoE model's "
        "ranks different requests)."
    )
    return lines


def design_json(result: DesignResult) -> dict:
    """The report's numbers as JSON (the chart data stays out: it is drawn, not printed)."""
    from kvplan.present.view import jsonable

    data = jsonable(result._replace(plot_roofline=None, plot_capacity=None))
    del data["plot_roofline"], data["plot_capacity"]
    return data


def write_plots(result: DesignResult, markdown_path, force: bool = False) -> dict[str, str]:
    """Draw the two charts next to the Markdown file; {title: file name} for the report. Charts
    that exist are overwritten only with `force` (the user named the Markdown, not them)."""
    from kvplan.present.output import companion_path
    from kvplan.present.plots import capacity_plot, have_matplotlib, roofline_plot
    from kvplan.present.view import jsonable

    if result.plot_roofline is None or result.plot_capacity is None or not have_matplotlib():
        return {}
    option = result.options[0]
    roof_path = companion_path(markdown_path, "-roofline.png", force)
    cap_path = companion_path(markdown_path, "-capacity.png", force)
    roofline_plot(jsonable(result.plot_roofline), roof_path)
    title = f"{result.model.name} on {_option_name(option)}"
    capacity_plot(result.plot_capacity, title, cap_path)
    return {"roofline": roof_path.name, "sequences vs context": cap_path.name}
