"""`kvplan capacity` in words: the budget, the answer, the what-if table; and `--emit vllm`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile
from kvplan.plans.capacity import CapacityResult, LongestContext, Remedy, WhatIfRow
from kvplan.plans.deployment import Deployment, deployment_of, layout_text
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, Verdict, View, jsonable, judged, ref, view

if TYPE_CHECKING:  # the engines' launch modules load for --emit alone
    from kvplan.plans.launch import Launch


def scenario(row: WhatIfRow, ctx: int) -> str:
    """A what-if row's label."""
    return {
        "kv_dtype": lambda: f"KV {row.kv_dtype}",
        "weights_dtype": lambda: f"weights {row.weights_dtype}",
        "half_context": lambda: "half context",
        "double_context": lambda: "double context",
        "prefix": lambda: f"{row.prefix_tokens:,}-token shared prefix",
        "contiguous": lambda: f"contiguous, reserving {ctx:,} per sequence",
        "paged": lambda: f"paged, {row.context_len:,} tokens actually used",
    }[row.kind]()


def deployment_text(r: CapacityResult) -> str:
    """'TP 8 x PP 2 on 16 GPUs (2 nodes of 8), chosen: ...'."""
    d = Deployment(r.tp, r.pp, r.dp_attention)
    per_replica = d.gpus
    where = "one node" if r.nodes_per_replica == 1 else f"{r.nodes_per_replica} nodes"
    out = f"{layout_text(d)}: {per_replica:,} GPU{'s' if per_replica > 1 else ''} ({where})"
    if r.replicas > 1:
        out += f" x {r.replicas:,} replicas = {r.num_gpus:,} GPUs"
    return (
        out
        + {
            "given": "",
            "none-fits": ", where nothing fits",
            "fewest-gpus": ", the fewest that fit",
            "most-users": ", the fewest that fit, the layout holding the most",
            "fewest-total-gpus": ", the layout serving --users on the fewest GPUs",
            "most-users-on-gpus": ", the layout holding the most on --num-gpus",
        }[r.deployment_chosen_by]
    )


WEIGHTS_HOW = {  # how a launch gets the weights format a remedy names
    "fp8": "--weights-dtype fp8 (vLLM and SGLang quantize a bf16 checkpoint as they load it)",
    "int4": "an int4 (AWQ or GPTQ) checkpoint as the model",
}


def remedy_text(r: Remedy, gpu: str) -> str:
    """'TP 4 on 4 GPUs holds 13'; 'fp8 weights on TP 2 hold 9 (--weights-dtype fp8 ...)'."""
    layout = layout_text(Deployment(r.tp, r.pp, r.dp_attention))
    held = f"{r.max_concurrency:,} sequence{'s' if r.max_concurrency != 1 else ''}"
    if r.kind == "layout":
        flags = (
            f"--dp-attention {r.dp_attention}"
            if r.dp_attention > 1
            else f"--tp {r.tp}" + (f" --pp {r.pp}" if r.pp > 1 else "")
        )
        return f"{layout} on {r.num_gpus:,} x {gpu} holds {held} ({flags})"
    if r.kind == "weights_dtype":
        how = WEIGHTS_HOW.get(r.weights_dtype, f"--weights-dtype {r.weights_dtype}")
        return f"{r.weights_dtype} weights on {layout} hold {held}: {how}"
    if r.kind == "kv_dtype":
        return f"an {r.kv_dtype} KV cache on {layout} holds {held} (--kv-dtype {r.kv_dtype})"
    return f"--ctx {r.context_len:,} or less on {layout}"


def remedies_text(result: CapacityResult) -> str:
    return "; ".join(remedy_text(r, result.gpu) for r in result.remedies)


def longest_text(row: LongestContext) -> str:
    if row.limited_by == "positions":
        return (
            f"{row.max_context_len:,} tokens (the model's maximum positions; memory would hold "
            f"{row.memory_context_len:,})"
        )
    return f"{row.max_context_len:,} tokens"


def _what_if_note(row: dict) -> tuple:
    """A what-if row cites its KV format's note, or paging's."""
    if row["kind"] == "kv_dtype":
        return (f"kv-{row['kv_dtype']}", ref("kv-ggml", dtype=row["kv_dtype"]))
    return ("capacity-paged",) if row["kind"] in ("paged", "contiguous") else ()


def capacity_view(result: CapacityResult) -> View:
    r = result
    ctx = r.context_len
    facts = [
        Fact(
            "model / GPU",
            f"{r.model['name']} on {r.gpu}",
            notes=("capacity-pp", "capacity-replicas", "tp-per-gpu", "memory-estimated"),
        ),
        Fact(
            "deployment",
            deployment_text(r),
            notes=("deployment-chosen", "deployment-for-users", "dp-attention"),
            data={
                "tp": r.tp,
                "pp": r.pp,
                "dp_attention": r.dp_attention,
                "replicas": r.replicas,
                "num_gpus": r.num_gpus,
            },
        ),
        Fact(
            "dtypes",
            f"weights {r.weights_dtype}, KV {r.kv_dtype}",
            notes=("weights-quantized", f"kv-{r.kv_dtype}", ref("kv-ggml", dtype=r.kv_dtype)),
        ),
        Fact(
            "memory per GPU",
            f"{f.gib(r.usable_bytes_per_gpu)} GiB usable - {f.gib(r.weights_bytes_per_gpu)} "
            f"weights - {f.gib(r.reserve_bytes_per_gpu)} reserve = "
            f"{f.gib(r.kv_pool_bytes_per_gpu)} GiB KV pool",
            notes=("capacity-budget",),
            data={
                "usable_bytes_per_gpu": r.usable_bytes_per_gpu,
                "weights_bytes_per_gpu": r.weights_bytes_per_gpu,
                "reserve_bytes_per_gpu": r.reserve_bytes_per_gpu,
                "kv_pool_bytes_per_gpu": r.kv_pool_bytes_per_gpu,
            },
        ),
        Fact(
            "fits",
            "yes" if r.fits else "NO",
            verdict=judged(r.fits),
            notes=("capacity-no-room",),
            data={"fits": r.fits},
        ),
        *(
            [Fact("would fit with", remedies_text(r), data={"remedies": len(r.remedies)})]
            if r.remedies
            else []
        ),
        Fact(
            "KV tokens per GPU",
            f.DASH
            if r.kv_tokens is None
            else f"{r.kv_tokens:,} (every attention layer holding every token)",
            notes=("sliding-held", "state-fixed", "tp-kv-replicated", "tp-mla-replicated"),
            data={"kv_tokens": r.kv_tokens},
        ),
        Fact(
            f"max sequences at {ctx:,}",
            f"{r.max_concurrency:,}",
            verdict=None if r.max_concurrency else Verdict.bad,
            notes=("capacity-paged", "ctx-beyond-positions"),
            data={"planned_context_len": ctx, "planned_max_concurrency": r.max_concurrency},
        ),
    ]
    facts += [
        Fact(
            f"longest context at batch {row.batch_size:,}",
            longest_text(row),
            verdict=None if row.max_context_len else Verdict.bad,
            notes=("ctx-beyond-positions",) if row.limited_by == "positions" else (),
            data={f"longest_context_len_at_batch_{row.batch_size}": row.max_context_len},
        )
        for row in r.longest_context
    ]
    if r.paging:
        facts.append(
            Fact(
                "paging vs contiguous",
                f"{r.paging.paged_sequences:,} vs {r.paging.contiguous_sequences:,} sequences at "
                f"mean length {r.paging.mean_len:,}",
                notes=("capacity-paged",),
                data={
                    "paging_mean_len": r.paging.mean_len,
                    "paged_sequences": r.paging.paged_sequences,
                    "contiguous_sequences": r.paging.contiguous_sequences,
                },
            )
        )
    if r.kv_transfer:
        t = r.kv_transfer
        facts.append(
            Fact(
                "disaggregated KV transfer",
                f"{f.gib_text(t.bytes_per_request)} per {ctx:,}-token request over {t.link}: "
                f"{f.ms_text(t.time_s)}, at most {t.requests_per_s:,.1f} requests/s",
                notes=("transfer-link", "transfer-replication"),
                data={
                    "transfer_bytes_per_request": t.bytes_per_request,
                    "transfer_time_s": t.time_s,
                    "transfer_requests_per_s": t.requests_per_s,
                },
            )
        )
    data = jsonable(r)
    for row, item in zip(r.what_if, data["what_if"], strict=True):
        item["scenario"] = scenario(row, ctx)
    table = Table(
        "what if",
        [
            Column("scenario", "scenario", f.text, "left"),
            Column("context_len", "context (tokens)", f.integer),
            Column("max_concurrency", "max sequences", f.integer),
        ],
        data["what_if"],
        row_notes=_what_if_note,
    )
    return view(f"Capacity of {r.model['name']} on {r.gpu}", r, facts, [table], data=data)


def seats_per_engine(result: CapacityResult) -> int:
    """Sequences one scheduler runs: a replica's share (per DP rank under DP attention;
    kvplan.present.launch turns it into each engine's flag)."""
    return max(1, result.max_concurrency // result.replicas // result.dp_attention)


def launch_of(
    result: CapacityResult,
    spec: ModelSpec,
    gpu: GpuProfile,
    model: str,
    max_num_batched_tokens: int,
    block_size: int | None = None,
) -> Launch:
    """The launch settings matching this plan (kvplan.present.launch spells them); `model` is
    the model argument as given, loaded from its folder when it is a local path; `block_size`
    the --block-size given (None: 16, or an MLA model's engine default, left to the engine). A
    plan holding
    no sequence is refused with what would fit: vLLM will not start unless its KV pool holds one
    max_model_len request (v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory), and SGLang
    would admit no request of that length."""
    if not result.fits:
        layout = layout_text(deployment_of(result))
        would = remedies_text(result) or "a larger GPU"
        raise KvplanError(
            f"no launch printed: not one {result.context_len:,}-token sequence fits beside the "
            f"weights on {layout} ({result.num_gpus // result.replicas:,} x {result.gpu}), and "
            f"an engine would refuse to start with --max-model-len {result.context_len}; "
            f"what fits: {would}"
        )
    from kvplan.plans.launch import Launch, launch_kv_dtype

    source = spec.source or ""
    local = bool(source) and not source.startswith(("bundled:", "hub:", "variant:"))
    model_id = spec.hf_id or model
    if local:
        path = source.removeprefix("gguf:")
        model_id = os.path.dirname(path) if path.lower().endswith(".json") else path
        if not os.path.isabs(model_id):  # ./ so that no engine reads it as a repo id or a flag
            model_id = os.path.join(".", model_id)
    return Launch(
        model_id=model_id,
        context_len=result.context_len,
        kv_dtype=launch_kv_dtype(result.kv_dtype, spec),
        seats=seats_per_engine(result),
        gpu_mem_util=result.gpu_mem_util,
        tp=result.tp,
        pp=result.pp,
        dp_attention=result.dp_attention,
        # MLA backends take their own block sizes (FlashMLA 64, CUTLASS MLA 128): the engine picks
        block_size=None
        if block_size is None and spec.has_kind(CacheKind.MLA)
        else result.block_size,
        max_num_batched_tokens=None if max_num_batched_tokens == 8192 else max_num_batched_tokens,
        gpus=result.num_gpus // result.replicas,
        nodes=result.nodes_per_replica,
        replicas=result.replicas,
        weights_dtype=result.weights_dtype,
        checkpoint_weights=spec.weights_quantization or spec.dtype,
        model_is_local=local,
        vendor=gpu.device_vendor,
        mla=spec.has_kind(CacheKind.MLA),
        gpu_products=tuple(gpu.match_names) if gpu.device_vendor == "NVIDIA" else (),
        checkpoint_bytes=weight_bytes(spec, resolve_weights_dtype(spec, "auto")[0]),
    )
