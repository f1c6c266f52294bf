"""The words of every note, keyed by its id: the one home of each assumption's text.

The library creates `Note(id, values)` with numbers in SI units; this module turns a note into
prose (formatting its numbers through kvplan.present.format). A test checks that every note id the
code creates has a text here, and the design report cites notes by id."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kvplan.notes import Note
from kvplan.present import format as f

TEXTS: dict[str, Callable[..., str]] = {}


def text(note_id: str):
    """Register the text of `note_id` (a function of the note's values)."""

    def register(fn: Callable[..., str]) -> Callable[..., str]:
        if note_id in TEXTS:
            raise ValueError(f"note {note_id!r} has two texts")
        TEXTS[note_id] = fn
        return fn

    return register


def note_text(item: Note) -> str:
    return TEXTS[item.id](**dict(item.values))


def note_texts(items: Iterable[Note]) -> list[str]:
    """Texts in order, repeats dropped (two notes may read the same)."""
    out: list[str] = []
    for item in items:
        words = note_text(item)
        if words not in out:
            out.append(words)
    return out


# ---- the model, as read from its config ------------------------------------------------------
text("no-dtype")(lambda: "config names no torch_dtype: the model dtype is taken as bf16.")
text("llama4-chunked")(
    lambda: (
        "Llama 4 chunked layers are sized by their chunk (as vLLM's hybrid allocator can); "
        "vLLM 0.19 disables that allocator for chunked models by default and stores every "
        "layer in full (--hybrid-chunked in kvplan capacity --engine vllm)."
    )
)
text("vision-absent")(lambda: "Vision tower not in this config; parameter counts are text-only.")
text("vision-excluded")(lambda: "Vision tower excluded from the parameter count.")
text("mtp-excluded")(
    lambda layers: (
        f"{layers} multi-token-prediction layer(s) excluded (not in num_hidden_layers; vLLM "
        "allocates them only with MTP speculative decoding)."
    )
)
text("mla-latent")(
    lambda kv_lora_rank, rope, heads, decompressed: (
        f"MLA caches one latent of {kv_lora_rank}+{rope} = {kv_lora_rank + rope} values per token "
        f"per layer (vLLM; transformers >= 5.15). transformers <= 5.14 cached decompressed K and V "
        f"for all {heads} heads ({decompressed} values per token per layer)."
    )
)
text("falcon-broadcast")(
    lambda kv_heads, heads: (
        f"transformers broadcasts Falcon's {kv_heads} KV heads to all {heads} query heads before "
        f"caching, so it stores {heads // kv_heads}x what vLLM (and kvplan) count."
    )
)
text("attention-free-head-dim")(
    lambda: "Attention-free: the config's head_dim is the Mamba head width."
)

# ---- storage formats -------------------------------------------------------------------------
text("kv-fp8")(lambda: "fp8 KV: e4m3 with per-tensor scales (two fp32 per layer, not counted).")
text("kv-int8")(
    lambda: "int8 KV: one fp32 scale per token per head for K and for V (vLLM int8_per_token_head)."
)
text("kv-int4")(
    lambda group_size: (
        f"int4 KV: asymmetric, an fp16 scale and an fp16 zero-point per group of "
        f"{group_size} values (KIVI-style); no full-precision residual window counted."
    )
)
text("weights-quantized")(
    lambda dtype, scope, bytes_per_param, rest_dtype: (
        f"weights: {scope} in {dtype} ({bytes_per_param:.4f} B/param with scales); "
        f"the rest in {rest_dtype}."
    )
)
text("weights-quant-unknown")(
    lambda method, dtype: (
        f"config quantization {method!r} is not one kvplan sizes: weights counted at "
        f"{dtype}; pass --weights-dtype int4 or int8 to size it."
    )
)

# ---- the model at a tensor-parallel degree ---------------------------------------------------
text("tp-kv-replicated")(
    lambda tp, kv_heads: (
        f"TP {tp} > {kv_heads} KV heads: each rank stores one KV head, "
        f"replicated {tp // kv_heads}x across ranks."
    )
)
text("tp-mla-replicated")(
    lambda tp: f"MLA latent is replicated on all {tp} TP ranks (not sharded)."
)
text("tp-per-gpu")(lambda tp: f"Per-GPU figures at TP {tp}: weights split evenly across ranks.")
text("state-fixed")(
    lambda: (
        "Recurrent state per sequence counted once, at its fixed size (conv state with "
        "kernel-1 columns plus the SSM state), in the model dtype unless the config names one;"
        " the KV dtype does not apply to it."
    )
)
text("sliding-held")(
    lambda: (
        "Sliding-window layers hold min(s, W) tokens. transformers keeps W-1; vLLM reserves "
        "W-1 + max_num_batched_tokens + one block (kvplan capacity --engine vllm)."
    )
)

# ---- roofline ---------------------------------------------------------------------------------
text("roofline-peaks")(
    lambda dtype, peak_flop_per_s, bandwidth_bytes_per_s: (
        f"Compute at the {dtype} dense peak ({f.tflops_text(peak_flop_per_s)}); bandwidth "
        f"{f.bandwidth_text(bandwidth_bytes_per_s)}; floors assume both at 100% (real kernels "
        "reach 55-90% of bandwidth on decode, see kvplan measure)."
    )
)
text("roofline-decode-reads")(
    lambda: (
        "Decode reads every weight once per step (the input-embedding table only for the B rows "
        "looked up) plus every resident sequence's KV; FLOPs are 2 per active matmul parameter "
        "plus attention over each layer's real heads, head widths and window."
    )
)
text("roofline-prefill-causal")(
    lambda: (
        "Prefill attention counts the causal half of the n x n scores (what FlashAttention "
        "computes); the seed's 4*L*d*n per token counts the full square."
    )
)
text("roofline-batch-equal-reads")(
    lambda: (
        "B_read is the batch at which a decode step's KV reads equal its weight reads, i.e. "
        "where throughput reaches half the ceiling BW/(s*k); kvplan size's B_mem (weights "
        "stored / KV per sequence) is where the cache's memory equals the weights'."
    )
)
text("roofline-moe")(
    lambda experts, top_k: (
        f"MoE: a decode step reads only the experts its batch touches, expected "
        f"E*(1-(1-k/E)^B) per MoE layer under uniform routing (E={experts}, "
        f"k={top_k}); real routing is less uniform, so more experts stay idle."
    )
)
text("roofline-state")(
    lambda: (
        "Recurrent-state layers: the state read and written each step is in the "
        "KV bytes; their scan FLOPs are small and not counted."
    )
)
text("roofline-tp")(
    lambda tp, link, one_way_bytes_per_s, latency_s: (
        f"Per GPU at TP {tp}: FLOPs, weights and KV heads divided by {tp}; each layer adds 2 "
        f"ring all-reduces of batch x hidden bf16 activations over {link} "
        f"({f.gbps_text(one_way_bytes_per_s)} one way, {f.us_text(latency_s)} "
        "per message), not overlapped with compute."
    )
)
text("roofline-pp")(
    lambda pp, bubble: (
        f"PP {pp}: a token crosses the {pp} stages in turn (each stage boundary sends batch x "
        "hidden activations); the floors above are per token through all stages. Throughput "
        f"needs microbatches to fill the pipe: with m microbatches the stages idle "
        f"(p-1)/(m+p-1) of the time, {bubble:.0%} at m = p."
    )
)

# ---- capacity ----------------------------------------------------------------------------------
text("capacity-budget")(
    lambda gpu, reported, usable_memory_bytes, gpu_mem_util, reserve_bytes, reserve_given: (
        f"Budget per GPU: {gpu} {'reports' if reported else 'nominal'} "
        f"{f.gib_text(usable_memory_bytes)} x {gpu_mem_util} utilization, minus weights, minus a "
        f"reserve of {f.gib_text(reserve_bytes)} "
        + (
            "(given)"
            if reserve_given
            else "(activation peak of an 8192-token forward and the sampler, plus 0.25 GiB "
            "non-torch; see kvplan.formulas.memory)"
        )
        + "."
    )
)
text("capacity-paged")(
    lambda block_size: (
        f"Paged in blocks of {block_size} tokens: each sequence wastes under one block per "
        "layer group; counts are whole sequences."
    )
)
text("capacity-pp")(
    lambda pp: (
        f"PP {pp}: layers split as vLLM does; the most loaded stage sets capacity. "
        "Pipeline bubbles are not modelled."
    )
)
text("capacity-replicas")(
    lambda num_gpus, replicas, tp, pp: (
        f"{num_gpus} GPUs = {replicas} replicas of TP {tp} x PP {pp}; "
        "concurrency summed over replicas."
    )
)
text("capacity-no-room")(
    lambda weights_bytes, usable_bytes: (
        f"The weights ({f.gib_text(weights_bytes)} per GPU) and reserve do not fit "
        f"in {f.gib_text(usable_bytes)}: raise --tp/--pp, quantize the weights or "
        "use a larger GPU."
    )
)
text("ctx-beyond-positions")(
    lambda context_len, positions: (
        f"--ctx {context_len:,} exceeds the model's {positions:,} positions."
    )
)
text("transfer-no-link")(lambda reason: f"No disaggregated KV transfer figure: {reason}.")
text("transfer-replication")(
    lambda tp, what, factor: (
        f"KV transfer counts replication honestly: each of the {tp} decode ranks receives "
        f"the {what} it needs, {factor:.0f}x the cache itself."
    )
)
text("transfer-link")(
    lambda link, one_way_bytes_per_s, latency_s: (
        f"KV transfer over {link}: {f.gbps_text(one_way_bytes_per_s)} one way per "
        f"GPU and {f.us_text(latency_s)} latency, each decode rank on its own link, the "
        "link doing nothing else."
    )
)

# ---- whatif -------------------------------------------------------------------------------------
text("whatif-mla")(
    lambda: (
        "MLA caches a latent: gqa/mqa do not apply to it (no KV heads to share), "
        "and windows were left off its layers."
    )
)
text("whatif-state")(
    lambda: "Recurrent states are fixed-size: the techniques act on the attention layers only."
)
text("whatif-order")(
    lambda: (
        "Order of adoption (seed 004): lossless first — paging and continuous batching, "
        "prefix reuse, chunked prefill — then fp8, then windows or eviction behind a "
        "recall probe, then change the requirement."
    )
)

# ---- engines ------------------------------------------------------------------------------------
text("vllm-rules")(lambda version: f"Rules of vLLM V1 {version}.")
text("vllm-memory-given")(
    lambda: (
        "Available KV memory given (vLLM prints it rounded to 0.01 GiB, which pins num_blocks "
        "only to a small range)."
    )
)
text("vllm-memory-estimated")(
    lambda usable_memory_bytes, gpu_mem_util, weights_bytes, activation_bytes, non_torch_bytes, available_bytes: (
        f"Available KV memory estimated: {f.gib_text(usable_memory_bytes)} x {gpu_mem_util} - "
        f"weights {f.gib_text(weights_bytes)} - activation peak {f.gib_text(activation_bytes)} - "
        f"non-torch {f.gib_text(non_torch_bytes)} = {f.gib_text(available_bytes)}. Against the "
        "two logged vLLM 0.19 runs this estimate is off by -0.12 GiB (Llama-3.1-8B, logged 58.11) "
        "and +0.53 GiB (Gemma-3-27B, logged 19.53); pass --kv-cache-memory with the logged "
        "figure for exact counts."
    )
)
text("vllm-mla-block")(
    lambda: "MLA: block size 64, which vLLM's FlashMLA backend forces on Hopper."
)
text("vllm-hma-off")(
    lambda: (
        "vLLM 0.19 disables the hybrid KV-cache manager for chunked-attention models by "
        "default: chunked (and sliding) layers are stored in full. --hybrid-chunked models "
        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1."
    )
)
text("vllm-state-block")(
    lambda block_size: (
        f"Attention block size forced to {block_size} tokens so one attention page "
        "holds a Mamba state page (version-dependent: vllm#54458)."
    )
)
text("vllm-cache-size-definition")(
    lambda: (
        '"GPU KV cache size" uses the 0.19 definition: num_blocks // groups x block size '
        "(later versions print int(concurrency x max_model_len))."
    )
)
text("vllm-pp")(
    lambda: "PP: each stage is grouped on its own layers; every rank takes the minimum num_blocks."
)
text("sglang-rules")(
    lambda version, fraction, given: (
        f"Rules of SGLang {version} (model_runner.profile_max_num_token); "
        f"mem_fraction_static {fraction}"
        + (
            ""
            if given
            else " (SGLang picks its own default per GPU; pass --mem-fraction-static to match)"
        )
        + "."
    )
)
text("sglang-pool")(
    lambda after_weights_bytes, kept_free_bytes, pool_bytes: (
        f"Memory after weights {f.gib_text(after_weights_bytes)} minus "
        f"{f.gib_text(kept_free_bytes)} kept free = {f.gib_text(pool_bytes)} for the pool."
    )
)
text("sglang-swa")(
    lambda swa, full, ratio: (
        f"Hybrid SWA: {swa} windowed and {full} full layers share the pool "
        f"(swa_full_tokens_ratio {ratio})."
    )
)

# ---- explore ------------------------------------------------------------------------------------
text("explore-capacity")(
    lambda: (
        "Capacity: memory the GPU reports (or its nominal memory) x 0.9 utilization, minus the "
        "weights per GPU, minus an activation and runtime reserve; whole 16-token blocks per "
        "sequence; the tensor-parallel degree is the smallest at which the model fits."
    )
)
text("explore-cache-bytes")(
    lambda: (
        "Cache bytes count every layer's real cache: windows hold at most W tokens and "
        "recurrent states a fixed size, as kvplan size computes them."
    )
)

# ---- catalogues ---------------------------------------------------------------------------------
text("models-kv-per-token")(
    lambda: (
        "KV B/token: every attention layer holding every token, in the model dtype (sliding and "
        "chunked layers hold fewer at long context: see kvplan size --breakdown)."
    )
)
text("gpus-dense")(
    lambda: "Dense peaks (no 2:4 sparsity) from each vendor's datasheet; sources in each YAML."
)

# ---- structure ----------------------------------------------------------------------------------
text("structure-read")(
    lambda model_type, decided: (
        f"model_type {model_type!r} is not one kvplan knows: sized from its structure — "
        + "; ".join(f"{part}: {fields}" for part, fields in decided)
        + ". No structural field was left unread; check the result against the model's card."
    )
)
text("structure-unread")(
    lambda fields: (
        "Structural fields kvplan did not read (they may change the cache or the parameter "
        f"count): {', '.join(fields)}."
    )
)
text("indexer-cache")(
    lambda width: (
        f"Sparse-attention indexer: every layer also caches one {width}-value key per token beside "
        "the latent (transformers: in the model dtype; vLLM stores it as fp8 plus a scale)."
    )
)
text("tie-wrapper-default")(
    lambda wrapper: (
        f"The config does not say whether the output head is tied; the {wrapper} class defaults "
        "to tied, but its checkpoints store a separate lm_head (transformers unties weights a "
        "checkpoint holds twice), so it is counted untied."
    )
)
text("variant-resolved")(
    lambda repo_id, alias: (
        f"{repo_id} was resolved offline to the bundled {alias} config: the same architecture "
        "(an instruction-tuned or dated variant); pass a path to its own config.json if it differs."
    )
)

# ---- measure ------------------------------------------------------------------------------------
text("measure-method")(
    lambda rounds, probes: (
        f"Predicted per operator: max(bytes / bandwidth, FLOPs / throughput at the operator's "
        f"shape) + launches x overhead, summed over the step, from a profile of {probes} probes "
        "(streams, generic skinny and prefill GEMMs, attention over other lengths, a launch); no "
        f"point's own timing enters it. Probes and points ran in the same {rounds} interleaved "
        "rounds (drift and background load hit both alike); times are each item's 25th "
        "percentile (load only ever slows a call), medians and p20/p80 in the JSON. error = "
        "predicted / measured - 1."
    )
)
text("measure-workload")(
    lambda model, layers, dtype, weight_bytes: (
        f"Workload: {model}, {layers} layer(s) built from the widths its config states "
        f"({f.gb_text(weight_bytes)} of {dtype} weights), no embeddings and no output head."
    )
)
text("measure-threads")(
    lambda threads, busy, cpus, clock: (
        f"{threads} thread(s)"
        + (
            f": {cpus} usable CPUs, {busy:.1f} kept busy by other processes at the start, one "
            "left free (a thread layout that does not oversubscribe)"
            if busy is not None
            else " (as given)"
        )
        + {
            "thread_cpu": "; times are what the thread ran (its CPU time), so that waiting "
            "for another process is not charged to the step or the probe.",
            "wall": "; wall-clock times.",
            "cuda_events": "; CUDA event times, the L2 flushed before each call.",
        }[clock]
    )
)
text("measure-bandwidth")(
    lambda probe: (
        f"Stream bandwidth from the fastest streaming probe ({probe}); a GEMM's weights stream "
        "at the batch-1 product's rate over a generic matrix, which on CPUs is well below STREAM."
    )
)
text("measure-gather")(
    lambda: (
        "The paged attention gathers its pages into a cache-sized buffer, then attends: the "
        "gather is priced as memory (KV bytes / stream bandwidth), the attention as compute."
    )
)
text("measure-cpu-fp32")(
    lambda fast_bf16: (
        "Measured in fp32: CPU bf16 kernels measure slow kernels, not memory"
        + (" (even with AVX512-BF16 here)" if fast_bf16 else "")
        + "; bf16 bytes are accounted for analytically by the planner."
    )
)
text("measure-no-datasheet")(
    lambda: (
        "No hardware profile matched this device: the datasheet column is empty (pass --gpu "
        "PROFILE; --save-profile writes this device's)."
    )
)
text("check-median")(
    lambda error, tolerance: (
        f"CHECK FAILED: the median |error| is {error:.1%}, above the {tolerance:.0%} tolerance."
    )
)
text("check-worst")(
    lambda error, tolerance, phase, batch, context: (
        f"CHECK FAILED: {phase} at batch {batch}, {context:,} tokens is off by {error:+.1%}, "
        f"beyond the worst-point tolerance of {tolerance:.0%}."
    )
)
text("check-no-memory-point")(
    lambda: (
        "CHECK FAILED: no point is memory-bound, so wrong bytes could not show: add a batch-1 "
        "decode point."
    )
)
text("check-mutation-missed")(
    lambda mutation, median, worst: (
        f"CHECK FAILED: self-test — with {mutation} the gate would still pass (median "
        f"{median:.1%}, worst {worst:.1%}): these points cannot see such a mistake."
    )
)
text("check-profile-off")(
    lambda median, worst: (
        f"CHECK FAILED: the given profile's predictions miss by a median {median:.1%} (worst "
        f"{worst:.1%})."
    )
)
text("check-link-worst")(
    lambda operation, error, tolerance: (
        f"CHECK FAILED: {operation} is off by {error:+.1%}, beyond the worst-point tolerance of "
        f"{tolerance:.0%}."
    )
)
text("distributed-method")(
    lambda ranks, backend, device, runs, latency_s, bandwidth, calibration: (
        f"{ranks} ranks, {backend} on {device}, loopback TCP rendezvous; medians of {runs} runs "
        "after a warm-up, a barrier before each sample. The alpha-beta link "
        f"({f.us_text(latency_s, 1)} per ring step, {f.gbps_text(bandwidth, 2)} one way) is "
        "fitted to all-reduces of "
        + ", ".join(f"{size:,}" for size in calibration)
        + " bytes, none of them a reported size; the reported all-reduces (ring: "
        "2(N-1) a + 2(N-1)/N M / B) and the KV transfer (a + M / B) are predictions."
    )
)
text("distributed-reduce")(
    lambda rate: (
        "gloo reduces on the host: each rank adds (N-1)/N of the message into its buffer, at the "
        f"{f.gbps_text(rate, 1)} a local add reached on the rank; without that term large "
        "all-reduces are under-predicted (the alpha-beta-only column)."
    )
)
text("distributed-no-reduce")(
    lambda: "NCCL reduces on the GPU, overlapped with the transfer: no host reduction term."
)
text("distributed-sizes")(
    lambda hidden, model, context, kv_bytes: (
        f"All-reduce messages are batch x hidden ({hidden:,}) bf16 activations of {model}, what "
        "a TP decode step reduces twice per layer (gloo carries them as fp32 of the same byte "
        f"count); the KV transfer is one {context:,}-token {model} request's whole cache "
        f"({f.bytes_text(kv_bytes)}), as a disaggregated prefill sends it."
    )
)
text("distributed-send")(
    lambda latency_s, bandwidth, sizes: (
        "The KV transfer is predicted from point-to-point sends of "
        + ", ".join(f.bytes_text(size) for size in sizes)
        + f" (fitted: {f.us_text(latency_s, 1)} + M / {f.gbps_text(bandwidth, 2)})."
    )
)
