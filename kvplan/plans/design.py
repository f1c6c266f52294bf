"""`kvplan report`: a design-doc section in Markdown (or the same content as JSON) for one model
over GPU options and contexts: cache anatomy, KV table, capacity, roofline, the decision order with
the numbers filled in, and the assumptions as footnotes."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import gqa_saving_factor, kv_bytes_per_sequence, kv_bytes_per_token
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile
from kvplan.plans.capacity import CapacityRequest, capacity, smallest_fitting_tp
from kvplan.plans.roofline import RooflineRequest, roofline
from kvplan.plans.size import model_notes
from kvplan.present.view import unique_notes
from kvplan.units import human_count, human_tokens

TP_CHOICES = (1, 2, 4, 8, 16)


class DesignRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192, 32768, 131072)
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")
    tp: int | None = None  # None: the smallest TP at which one sequence of the longest context fits
    gpu_mem_util: float = 0.9
    prefix_tokens: int = 2048


def choose_tp(spec: ModelSpec, gpu: GpuProfile, request: DesignRequest) -> int:
    if request.tp is not None:
        spec.check_tp(request.tp)
        return request.tp
    return smallest_fitting_tp(spec, gpu, max(request.contexts), request.gpu_mem_util, TP_CHOICES)


def design_report(spec: ModelSpec, gpus: list[GpuProfile], request: DesignRequest) -> dict:
    """All the report's numbers, as data (what `--format json` prints)."""
    if not gpus:
        raise KvplanError("report needs at least one --gpu")
    formats = [resolve_kv_format(d, spec.dtype) for d in dict.fromkeys(request.kv_dtypes)]
    base = formats[0]
    wdtype, wnotes = resolve_weights_dtype(spec, "auto")
    weights = weight_bytes(spec, wdtype)
    kv_table = [
        {
            "context_len": c,
            "kv_dtype": f.name,
            "kv_bytes_per_sequence": kv_bytes_per_sequence(spec, c, f),
            "kv_to_weights": kv_bytes_per_sequence(spec, c, f) / weights,
        }
        for c in request.contexts
        for f in formats
    ]
    options = []
    notes = model_notes(spec, 1) + wnotes
    for gpu in gpus:
        tp = choose_tp(spec, gpu, request)
        per_context = []
        for c in request.contexts:
            per_dtype = {}
            for f in formats:
                cap = capacity(
                    spec,
                    gpu,
                    CapacityRequest(
                        context_len=c,
                        tp=tp,
                        gpu_mem_util=request.gpu_mem_util,
                        kv_dtype=f.name,
                        prefix_tokens=min(request.prefix_tokens, c),
                        mean_len=max(1, c // 4),
                    ),
                ).data
                per_dtype[f.name] = cap
            first = per_dtype[base.name]
            roof = roofline(
                spec,
                gpu,
                RooflineRequest(
                    contexts=(c,),
                    batches=(max(1, first["max_concurrency"]),),
                    kv_dtype=base.name,
                    tp=tp,
                ),
            ).data
            limit = (
                "weights"
                if not first["fits"]
                else "KV memory"
                if first["max_concurrency"] < 4096
                else "none"
            )
            per_context.append(
                {
                    "context_len": c,
                    "max_sequences": {k: v["max_concurrency"] for k, v in per_dtype.items()},
                    "kv_tokens": first["kv_tokens"],
                    "kv_pool_bytes_per_gpu": first["kv_pool_bytes_per_gpu"],
                    "limited_by": limit,
                    "ttft_floor_s": roof["prefill"]["time_floor_s"],
                    "tpot_floor_s": roof["decode"][0]["time_floor_s"],
                    "tokens_per_s_at_max_batch": roof["decode"][0]["tokens_per_s"],
                    "ceiling_tokens_per_s": roof["ceiling_tokens_per_s"],
                    "batch_equal": roof["batch_equal"],
                    "what_if": {r["scenario"]: r["max_concurrency"] for r in first["what_if"]},
                    "paging": first["paging"],
                    "kv_transfer": first["kv_transfer"],
                }
            )
            notes += first["notes"] + roof["notes"]
        options.append({"gpu": gpu.name, "tp": tp, "per_context": per_context})
    return {
        "kvplan_version": __version__,
        "model": {
            "name": spec.name,
            "family": spec.family,
            "params_total": spec.params_total,
            "params_active": spec.params_active,
            "weights_bytes": weights,
            "weights_dtype": wdtype,
            "layers": dict(spec.layer_kind_counts()),
            "kv_bytes_per_token": kv_bytes_per_token(spec, base),
            "mha_equivalent_bytes_per_token": spec.mha_equivalent_bytes_per_token(base),
            "gqa_saving": gqa_saving_factor(spec, base),
        },
        "kv_dtypes": [f.name for f in formats],
        "kv_table": kv_table,
        "options": options,
        "prefix_tokens": request.prefix_tokens,
        "notes": unique_notes(notes),
    }


def _gib(b: float) -> str:
    return f"{b / 2**30:,.1f} GiB"


def render_markdown(data: dict, plots: dict[str, str] | None = None) -> str:
    m = data["model"]
    dtypes = data["kv_dtypes"]
    base = dtypes[0]
    notes = data["notes"]
    ref = {n: i for i, n in enumerate(notes, 1)}

    def cite(fragment: str) -> str:
        hits = [str(i) for n, i in ref.items() if fragment in n]
        return f"[^{hits[0]}]" if hits else ""

    out = [f"## KV-cache plan: {m['name']}", ""]
    layers = ", ".join(f"{n} × {label}" for label, n in m["layers"].items())
    saving = f"{m['gqa_saving']:.1f}×" if m["gqa_saving"] else "n/a"
    out += [
        "### Cache anatomy",
        "",
        f"{m['name']}, a {m['family']} model, has {human_count(m['params_total'])} parameters "
        f"({human_count(m['params_active'])} active per token); its weights take "
        f"{_gib(m['weights_bytes'])} in {m['weights_dtype']}. Layers: {layers}. Every token of "
        f"context costs **{m['kv_bytes_per_token']:,} bytes** of KV in {base} with every attention "
        f"layer holding it — {saving} less than the multi-head equivalent "
        f"({m['mha_equivalent_bytes_per_token']:,} B/token).",
        "",
        "### KV per sequence",
        "",
        "| context | " + " | ".join(f"{d} per sequence" for d in dtypes) + " | KV ÷ weights |",
        "|---:|" + "---:|" * len(dtypes) + "---:|",
    ]
    for c in sorted({r["context_len"] for r in data["kv_table"]}):
        rows = [r for r in data["kv_table"] if r["context_len"] == c]
        out.append(
            f"| {human_tokens(c)} | "
            + " | ".join(_gib(r["kv_bytes_per_sequence"]) for r in rows)
            + f" | {rows[0]['kv_to_weights']:.3f} |"
        )
    out += ["", "### Capacity and speed per GPU option", ""]
    for option in data["options"]:
        out += [
            f"**{option['gpu']} × {option['tp']}** (one replica of tensor parallel "
            f"{option['tp']}; memory utilization 0.9{cite('Budget per GPU: ' + option['gpu'])}; sequences are "
            "per replica, TPOT at that many sequences)",
            "",
            "| context | "
            + " | ".join(f"sequences ({d})" for d in dtypes)
            + " | KV pool / GPU | limited by | TTFT floor | TPOT floor at max batch | "
            "ceiling BW/(s·k) per replica | B_equal |",
            "|---:|" + "---:|" * len(dtypes) + "---:|---|---:|---:|---:|---:|",
        ]
        for row in option["per_context"]:
            seqs = " | ".join(f"{row['max_sequences'][d]:,}" for d in dtypes)
            out.append(
                f"| {human_tokens(row['context_len'])} | {seqs} | "
                f"{_gib(row['kv_pool_bytes_per_gpu'])} | {row['limited_by']} | "
                f"{row['ttft_floor_s']:.2f} s | {row['tpot_floor_s'] * 1e3:.1f} ms | "
                f"{row['ceiling_tokens_per_s']:,.0f} tok/s | {row['batch_equal']:.1f} |"
            )
        out.append("")
    transfers = [(o, r) for o in data["options"] for r in o["per_context"] if r["kv_transfer"]]
    if transfers:
        out += [
            "### Disaggregated prefill and decode",
            "",
            f"Moving each request's KV from a prefill pool to a decode replica{cite('KV transfer over')}:",
            "",
            "| option | context | KV per request | transfer time | requests/s the links sustain |",
            "|---|---:|---:|---:|---:|",
        ]
        for o, r in transfers:
            t = r["kv_transfer"]
            out.append(
                f"| {o['gpu']} × {o['tp']} over {t['link']} | {human_tokens(r['context_len'])} | "
                f"{_gib(t['bytes_per_request'])} | {t['time_s'] * 1e3:,.1f} ms | "
                f"{t['requests_per_s']:,.1f} |"
            )
        out.append("")
    if plots:
        out += [f"![{title}]({path})" for title, path in plots.items()] + [""]
    out += _decision_order(data, cite) + ["", "### Assumptions", ""]
    out += [f"[^{i}]: {n}" for n, i in ref.items()]
    out += ["", f"*Generated by kvplan {data['kvplan_version']}.*", ""]
    return "\n".join(out)


def _decision_order(data: dict, cite) -> list[str]:
    m = data["model"]
    dtypes = data["kv_dtypes"]
    option = data["options"][0]
    longest = option["per_context"][-1]
    c = human_tokens(longest["context_len"])
    base = dtypes[0]
    seqs = longest["max_sequences"][base]
    wi = longest["what_if"]
    paging = longest["paging"] or {}
    prefix_key = next((k for k in wi if "shared prefix" in k), None)
    lines = [f"### Decision order for {option['gpu']} × {option['tp']} at {c}", ""]
    saving = f"{m['gqa_saving']:.1f}×" if m["gqa_saving"] else "no"
    lines.append(
        f"1. **Model choice.** This checkpoint already saves {saving} against "
        "multi-head attention; a GQA/MLA checkpoint is the largest lever if the model "
        "is still open."
    )
    if paging:
        lines.append(
            f"2. **Paging and continuous batching** (lossless). At a mean of "
            f"{human_tokens(paging['mean_len'])} tokens used of {c} reserved, a contiguous "
            f"allocator admits {paging['contiguous_sequences']:,} sequences; a paged one "
            f"{paging['paged_sequences']:,}{cite('Paged in blocks')}."
        )
    if prefix_key:
        gain = (
            f"{wi[prefix_key]:,} sequences instead of {seqs:,}"
            if wi[prefix_key] > seqs
            else f"no extra sequence at {c} (the prompt is "
            f"{data['prefix_tokens'] / longest['context_len']:.0%} of each one); it pays at "
            "shorter contexts and in prefill time"
        )
        lines.append(
            f"3. **Prefix reuse** (lossless). A {data['prefix_tokens']:,}-token shared "
            f"system prompt stored once: {gain}. It needs prefix-aware routing to fire."
        )
    lines.append(
        f"4. **Chunked prefill** (lossless). A {c} prompt takes at least "
        f"{longest['ttft_floor_s']:.2f} s of compute; chunk it so it does not stall the "
        f"decode batch (TPOT floor {longest['tpot_floor_s'] * 1e3:.1f} ms)."
    )
    if "KV fp8" in wi:
        lines.append(
            f"5. **fp8 KV** (measure accuracy). {wi['KV fp8']:,} sequences at {c} "
            f"instead of {seqs:,}; int4 would give {wi.get('KV int4', 0):,} but degrades "
            "long-context recall."
        )
    half = wi.get("half context")
    lines.append(
        "6. **Windows or eviction**, only behind a long-context recall probe in CI; "
        "never evict the first (sink) tokens."
    )
    lines.append(
        f"7. **Change the requirement.** Halving the context to "
        f"{human_tokens(longest['context_len'] // 2)} gives {half:,} sequences; "
        "otherwise add GPUs (tensor parallelism shards KV heads and weights)."
    )
    return lines


def write_report(
    data: dict, out: Path | None, spec: ModelSpec, gpus: list[GpuProfile], request: DesignRequest
) -> str:
    """Markdown, with the plots saved next to `out` (when matplotlib is installed)."""
    plots = {}
    if out is not None:
        try:
            from kvplan.plans.capacity import concurrency_curve
            from kvplan.present.plots import capacity_plot, roofline_plot

            option = data["options"][0]
            gpu = gpus[0]
            roof = roofline(
                spec,
                gpu,
                RooflineRequest(contexts=request.contexts, batches=(1, 8, 64), tp=option["tp"]),
            ).data
            roof_path = out.with_name(out.stem + "-roofline.png")
            roofline_plot(roof, roof_path)
            curve = concurrency_curve(
                spec, gpu, CapacityRequest(tp=option["tp"]), [2**k for k in range(10, 19)]
            )
            cap_path = out.with_name(out.stem + "-capacity.png")
            capacity_plot(curve, f"{spec.name} on {gpu.name} × {option['tp']}", cap_path)
            plots = {"roofline": roof_path.name, "sequences vs context": cap_path.name}
        except KvplanError:
            plots = {}
    return render_markdown(data, plots)
