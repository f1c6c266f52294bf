"""The words of every note, keyed by its id: the one home of each assumption's text.

The library creates `Note(id, values)` with numbers in SI units; this module turns a note into
prose (formatting its numbers through kvplan.present.format). A test checks that every note id the
code creates has a text here, in kvplan.present.notes_gpu or in kvplan.present.notes_more, and the
design report cites notes by id."""

from collections.abc import Callable, Iterable

from kvplan.notes import Note
from kvplan.present import format as f
from kvplan.present.note_registry import TEXTS, text


def note_text(item: Note) -> str:
    words = TEXTS.get(item.id)
    if words is None:  # the commands beyond the core: their texts load on first use
        import kvplan.present.notes_gpu  # noqa: F401  (registers its texts)

        words = TEXTS.get(item.id) or all_texts()[item.id]
    return words(**dict(item.values))


def all_texts() -> dict[str, Callable[..., str]]:
    """Every note's text: this module's (the core commands), kvplan.present.notes_gpu's (what
    the planning commands print for a GPU kind: roofline, deployments, GPU kinds side by side,
    explore) and kvplan.present.notes_more's (llama.cpp, whatif techniques, engines, simulate,
    plan, measure), each imported only when one of its notes is printed (start-up; a --gpu
    command's notes are all in the first two)."""
    import kvplan.present.notes_gpu  # noqa: F401  (registers its texts)
    import kvplan.present.notes_more  # noqa: F401  (registers its texts)

    return TEXTS


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
        "Llama 4 chunked layers are sized by their chunk, as vLLM's hybrid KV-cache manager "
        "stores them (on for chunked attention by default since vllm#29627; "
        "kvplan engine --no-hybrid-chunked models it off)."
    )
)
text("vision-absent")(lambda: "Vision tower not in this config; parameter counts are text-only.")
text("vision-excluded")(lambda: "Vision tower excluded from the parameter count.")
text("compressed-attention")(
    lambda layers, window, ratios, indexer: (
        f"DeepSeek-V4 compressed attention: all {layers} layers keep a sliding window of "
        f"{window:,} tokens (K and V one shared vector); {ratios} compressed layers also keep one "
        f"compressed entry per that many tokens, the 1/4 (CSA) layers with an indexer key of "
        f"{indexer} beside it. The compressor's buffer (under one window of tokens) is not "
        "counted."
    )
)
text("expert-dtype-unpriced")(
    lambda expert_dtype, format: (
        f"expert_dtype {expert_dtype}: the routed experts are stored as {expert_dtype}, the rest "
        f"as {format}; kvplan prices every quantized part as {format}, so the weights bytes "
        "overstate the experts (use --weights-dtype to price them another way)."
    )
)
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
text("kv-nvfp4")(
    lambda: (
        "nvfp4 KV: 4-bit values two to a byte and one fp8 scale per 16 values (vLLM's nvfp4 "
        "cache, 0.5625 bytes a value)."
    )
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
        "W-1 + max_num_batched_tokens + one block (kvplan engine MODEL --engine vllm)."
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
        "computes); the textbook 4 x L x d x n per token counts the full square."
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
            else "(what vLLM 0.19's profiling run measures beside the weights: the torch peak "
            "of an 8192-token step with the sampler, non-torch memory at this TP, the rotary "
            "tables; see kvplan.formulas.memory)"
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
    lambda num_gpus, replicas, layout: (
        f"{num_gpus} GPUs = {replicas} replicas of {f.layout_text(layout)}; concurrency summed "
        "over replicas."
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
        f"--ctx {context_len:,} is past the model's {positions:,} positions "
        "(max_position_embeddings): it cannot attend that far without a longer-context "
        "variant or rope scaling; such rows are marked '!' and show what a cache that long "
        "would take."
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
        "Order of adoption (the techniques chapter): lossless first — paging and continuous "
        "batching, prefix reuse, chunked prefill — then fp8, then windows or eviction behind a "
        "recall probe, then change the requirement."
    )
)

# ---- engines ------------------------------------------------------------------------------------
text("vllm-rules")(lambda version: f"Rules of vLLM V1 {version}.")
text("engine-long-max-model-len")(
    lambda engine, max_model_len, limit, key, variable: (
        f"{max_model_len:,} tokens is past the {limit:,} {engine} derives from the config "
        f"({key}): {engine} starts with it only under {variable}, and positions past "
        f"{limit:,} may give NaN (RoPE) or out-of-bounds errors (learned positions)."
    )
)
text("vllm-memory-given")(
    lambda: (
        "Available KV memory given (vLLM prints it rounded to 0.01 GiB, which pins num_blocks "
        "only to a small range)."
    )
)
text("vllm-memory-estimated")(
    lambda tp, pp: (
        "Available KV memory predicted term by term as vLLM 0.19 measures it: "
        "ceil(memory CUDA reports x gpu_memory_utilization) - weights on the rank - torch peak "
        "of the profiling run - non-torch memory"
        + (" (NCCL and all-reduce buffers at this TP)" if tp > 1 else "")
        + ". Against 56 vLLM 0.19 start-up logs on H100 (tests/test_vllm_logs.py) it is off by "
        "0.04 GiB at the median and 0.22 GiB at worst; the non-torch term was measured on H100 "
        "SXM only"
        + (", and TP 8 is not measured (the TP 4 figure is used)" if tp > 4 else "")
        + ". Pass --kv-cache-memory with a logged figure for exact counts."
    )
)
text("vllm-mla-block")(
    lambda block_size: (
        f"MLA: block size {block_size}, what vLLM 0.19's MLA backend for this GPU and cache "
        "dtype asks for (Hopper: FLASH_ATTN_MLA 16, FlashMLA 64 with fp8; Blackwell: FlashInfer "
        "MLA 32; sparse-attention models: 64 or 32; others: Triton MLA 16)."
    )
)
text("vllm-hma-off")(
    lambda: (
        "Hybrid KV-cache manager off (--no-hybrid-chunked, like "
        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 or --disable-hybrid-kv-cache-manager"
        "): chunked and sliding layers are stored as full attention. vLLM keeps it on by "
        "default since vllm#29627 (0.13)."
    )
)
text("vllm-state-block")(
    lambda block_size: (
        f"Attention block size forced to {block_size} tokens so one attention page "
        "holds a Mamba state page (version-dependent: vllm#54458)."
    )
)
text("vllm-cache-size-definition")(
    lambda version: (
        '"GPU KV cache size" uses the 0.19 definition: num_blocks // groups x block size '
        "(from 0.21: int(concurrency x max_model_len))."
        if version == "0.19"
        else '"GPU KV cache size" uses the 0.21 definition: int(concurrency x max_model_len).'
    )
)
text("vllm-pp")(
    lambda: "PP: each stage is grouped on its own layers; every rank takes the minimum num_blocks."
)
text("sglang-rules")(
    lambda version, fraction, given: (
        f"Rules of SGLang {version} "
        + (
            "(main, April 2026: pool_configurator, model_runner_kv_cache_mixin)"
            if version == "0.5"
            else "(the 0.4 releases' server_args defaults: mem_fraction_static by TP)"
        )
        + f"; mem_fraction_static {fraction}"
        + (
            ""
            if given
            else " (SGLang's own default for this GPU and layout: its server_args heuristic)"
        )
        + "."
    )
)
text("sglang-pool")(
    lambda free_before_bytes, fraction, weights_bytes, pool_bytes: (
        f"Pool: free memory before loading {f.gib_text(free_before_bytes)} (what the device "
        "reports less the CUDA context and communicators, as measured on H100) x "
        f"{fraction} - weights {f.gib_text(weights_bytes)} = {f.gib_text(pool_bytes)}."
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
    lambda gpu_mem_util, block_size: (
        f"Capacity: memory the GPU reports (or its nominal memory) x {gpu_mem_util:g} "
        "utilization (the wall on the memory bar), minus the weights per GPU, minus an "
        f"activation and runtime reserve; whole {block_size}-token blocks per sequence."
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
    lambda context_len=131072: (
        "KV B/token: every attention layer holding every token, in the model dtype. at "
        f"{f.tokens(context_len)}: the KV of one {context_len:,}-token sequence per token (at "
        "the model's maximum positions where shorter), sliding-window and chunked layers "
        "holding only their window: what a long context really costs (kvplan size --breakdown "
        "per layer group)."
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
        + ". Every structural-looking field was read, but blocks a config does not announce "
        "(an extra gate, a bias, a different norm) cannot be seen from it: the parameter count "
        "is the common layout's, so check it against the model's card."
    )
)
text("structure-unread")(
    lambda fields: (
        "Structural fields kvplan did not read (they may change the cache or the parameter "
        f"count): {', '.join(fields)}."
    )
)
text("gqa-indexer-cache")(
    lambda width, layers, of: (
        f"Lightning indexer: {layers} of the {of} layers also cache one {width}-value key per "
        "token beside K and V (MiniMax-M3; transformers' sparse cache layer holds it as "
        "idx_keys), counted in the KV bytes per token."
    )
)
text("indexer-cache")(
    lambda width, layers=None, of=None: (
        "Sparse-attention indexer: "
        + (
            "every layer also caches"
            if layers == of
            else f"{layers} of the {of} layers (the others reuse their selection) also cache"
        )
        + f" one {width}-value key per token beside the latent (transformers: in the "
        "model dtype; vLLM stores it as fp8 plus a scale)."
    )
)
text("tie-wrapper-wins")(
    lambda wrapper, tied: (
        f"text_config and the {wrapper} wrapper disagree on tie_word_embeddings; the wrapper's "
        f"model holds the output head, so its value decides: "
        f"{'tied' if tied else 'a separate lm_head'} (as transformers builds it)."
    )
)
text("tie-wrapper-default")(
    lambda wrapper: (
        f"The config does not say whether the output head is tied; the {wrapper} class defaults "
        "to tied, but its checkpoints store a separate lm_head (transformers unties weights a "
        "checkpoint holds twice), so it is counted untied."
    )
)


def _model_path(path: str, instead_of: str | None) -> str:
    """A config read from a local path; where the same spelling also names a bundled config or a
    Hub repository, which one was not read."""
    if instead_of is None:
        return f"Config read from the local path {path}."
    kind, _, name = instead_of.partition(":")
    other, which = (
        (f"the bundled {name} config", "the bundled one")
        if kind == "bundled"
        else (f"the Hub repository {name}", "the Hub's")
    )
    return (
        f"Config read from the local path {path}, not {other} of the same name: an existing "
        f"path is read first, as engines read their model argument (run from another folder "
        f"for {which})."
    )


text("model-path")(_model_path)

text("variant-resolved")(
    lambda repo_id, alias: (
        f"{repo_id} was resolved offline to the bundled {alias} config: the same architecture "
        "(an instruction-tuned or dated variant); pass a path to its own config.json if it differs."
    )
)

text("memory-estimated")(
    lambda gpu, source: (
        f"{gpu}: the memory the device reports is an estimate ({source}); budgets may be off by "
        "a few hundred MiB per GPU."
    )
)
text("quant-name-only")(
    lambda name: (
        f"{name} looks quantized by its name, but its config declares no quantization_config "
        "(ModelOpt keeps it in hf_quant_config.json): weights are counted unquantized. Pass "
        "--weights-dtype (nvfp4, fp8, int4-g128, ...) or a checkpoint folder for exact bytes."
    )
)
text("quant-unread")(
    lambda method, why: (
        f"config quantization {method!r} ({why}) is not one kvplan sizes: weights counted "
        "unquantized; pass --weights-dtype (fp8, int4-gN, nvfp4, ...) to size it."
    )
)

# ---- checkpoints --------------------------------------------------------------------------------
text("checkpoint-weights")(
    lambda source, tensors, text_bytes, vision_bytes, skipped_bytes: (
        f"Weights from the checkpoint's own tensor headers ({source}, {tensors:,} tensors): "
        f"{f.gib_text(text_bytes)} for the language model"
        + (f", {f.gib_text(vision_bytes)} vision tower" if vision_bytes else "")
        + (
            f", {f.gib_text(skipped_bytes)} of multi-token-prediction layers not loaded by default"
            if skipped_bytes
            else ""
        )
        + "."
    )
)
text("checkpoint-differs")(
    lambda checkpoint_bytes, config_bytes, config_dtype: (
        f"The checkpoint holds {f.gib_text(checkpoint_bytes)} of weights where the config's count "
        f"in {config_dtype} gives {f.gib_text(config_bytes)} "
        f"({checkpoint_bytes / config_bytes - 1:+.1%}): the checkpoint's figure is used."
    )
)
text("checkpoint-unread")(
    lambda repo_id: (
        f"{repo_id}: the safetensors headers could not be read in time (or there are none): "
        "weights counted from the config."
    )
)
