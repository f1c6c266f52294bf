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

# ---- GGUF, llama.cpp and Ollama -------------------------------------------------------------------
text("kv-ggml")(
    lambda dtype, block_size, block_bytes: (
        f"{dtype} KV (ggml): {block_size} values in {block_bytes} bytes, the block's fp16 scale "
        f"(and minimum) included ({8 * block_bytes / block_size:.3g} bits per value), as llama.cpp "
        "stores a quantized cache."
    )
)
text("weights-gguf")(
    lambda file_type, weights_bytes: (
        f"weights as the GGUF file stores them ({file_type}): {f.gib_text(weights_bytes)}, the sum "
        "of every tensor's ggml size with its block scales."
    )
)
text("gguf-file")(
    lambda arch: (
        f"Read from a GGUF file (architecture {arch}): the cache follows llama.cpp's rules for "
        "it; the KV default dtype is f16 and recurrent state is f32, as llama.cpp keeps them."
    )
)
text("gguf-mla-legacy")(
    lambda: (
        "This deepseek2 GGUF has no key_length_mla/value_length_mla: converted before llama.cpp's "
        "MLA cache (#12801), it is cached as full K and V per head, not as the latent."
    )
)
text("gguf-window-ignored")(
    lambda arch: (
        f"The file states a sliding window, but llama.cpp ignores it for {arch}: every layer "
        "keeps every token."
    )
)
text("gguf-nextn-layers")(
    lambda layers: (
        f"The file holds {layers} NextN (multi-token prediction) block(s); llama.cpp allocates "
        "their KV cache too, so they are counted."
    )
)
text("gguf-shared-kv")(
    lambda layers: (
        f"The last {layers} layers read an earlier layer's KV (shared_kv_layers) and keep none "
        "of their own."
    )
)
text("llamacpp-rules")(
    lambda build: (
        f"llama.cpp rules read from its source at b{build} (upstream 82bb48500), with the builds "
        "where each changed; --llama-build picks an older one."
    )
)
text("llamacpp-np-auto")(
    lambda parallel: (
        f"No -np: llama-server's auto gives {parallel} sequences sharing one unified cache "
        "(an explicit -np N splits the cache into N streams unless -kvu)."
    )
)
text("llamacpp-ctx-train")(
    lambda n_ctx_train: (
        f"-c 0 (or unset on builds since b7407): the training context, {n_ctx_train:,} tokens; "
        "llama-server's --fit may lower it when memory is short."
    )
)
text("llamacpp-fa-auto")(
    lambda: (
        "-fa auto is taken as enabled (CUDA, Metal, Vulkan support it); a backend without flash "
        "attention stores V transposed and refuses a quantized V cache."
    )
)
text("llamacpp-ctx-rounded")(
    lambda n_ctx: (
        f"n_ctx is not divisible by n_seq_max - rounding to {n_ctx:,} (each stream padded to "
        "256 cells)."
    )
)
text("llamacpp-v-padded")(
    lambda width: (
        f"the V embeddings have different sizes across layers and FA is not enabled - padding V "
        f"cache to {width}."
    )
)
text("llamacpp-swa-full")(
    lambda: "--swa-full: sliding-window layers keep every cell, as full-attention layers do."
)
text("llamacpp-weights-estimated")(
    lambda weights_type, bits: (
        f"Weights estimated from the parameter count at {weights_type} ({bits:.4g} bits per "
        "value with scales); a GGUF file gives them exactly."
    )
)
text("llamacpp-ngl-auto")(
    lambda n_gpu_layers, layers: (
        f"No -ngl: the most layers that fit, {n_gpu_layers} of {layers} (the output layer "
        "first), as llama-server's --fit chooses; --fit may instead lower -c when -c is unset."
    )
)
text("llamacpp-reserve")(
    lambda reserve_bytes: (
        f"{f.gib_text(reserve_bytes)} kept free on the GPU for compute buffers, as --fit's "
        "target margin (-fitt 1024 MiB); the real compute buffer (150-1000 MiB in logs) grows "
        "with -ub, the vocabulary and FA off."
    )
)
text("llamacpp-host-missing")(
    lambda: "No host profile: offloaded layers are timed at the GPU's bandwidth (pass --cpu)."
)
text("llamacpp-decode-ceiling")(
    lambda: (
        "Decode ceiling: one sequence, memory-bound: the GPU's share of weights (experts: top_k "
        "of E) and cache at its bandwidth, then the host's at system-memory bandwidth; real "
        "speed is lower (kernels, synchronisation)."
    )
)
text("llamacpp-model-buffers")(
    lambda: (
        "Model buffer sizes are the tensor bytes by device from the GGUF; llama.cpp adds a "
        "little alignment."
    )
)
text("ollama-preset")(
    lambda version: (
        f"Ollama {version} defaults as llama.cpp options: -c num_ctx x num_parallel, "
        "-np num_parallel (split streams), -b = -ub = 512, OLLAMA_KV_CACHE_TYPE for K and V."
    )
)
text("ollama-vram-tier")(
    lambda vram_bytes, num_ctx: (
        f"Default context by GPU memory (Ollama >= 0.15.5): {f.gib_text(vram_bytes)} gives "
        f"num_ctx {num_ctx:,} (>= 47 GiB 262,144; >= 23 GiB 32,768; else 4,096)."
    )
)
text("ollama-ctx-capped")(
    lambda n_ctx_train: f"num_ctx capped to the model's training context, {n_ctx_train:,}."
)
text("ollama-single-sequence")(
    lambda arch: f"Ollama serves {arch} one request at a time (num_parallel forced to 1)."
)
text("ollama-kv-needs-fa")(
    lambda: (
        "Before 0.30 Ollama used a quantized OLLAMA_KV_CACHE_TYPE only with flash attention: "
        "f16 is used."
    )
)
text("ollama-old-runner")(
    lambda: (
        "Before 0.30 Ollama's runner kept llama.cpp's C-API default swa_full = true (full-size "
        "sliding-window caches); its own Go engine (gemma3, qwen3, gpt-oss) differs slightly."
    )
)
text("weights-stored")(
    lambda weights_bytes: (
        f"Weights: {f.gib_text(weights_bytes)}, the bytes the checkpoint's tensors take "
        "(their own types and scales)."
    )
)


# ---- explore: deployments (issue 17) ------------------------------------------------------------
text("explore-deployment")(
    lambda context_len, gpus_per_node: (
        "Each GPU opens on the smallest tensor-parallel degree within one node (the profile's "
        f"GPUs per node, {gpus_per_node} when it does not say) at which one "
        f"{context_len:,}-token conversation fits beside the weights; when no degree in one node "
        "holds it, whole nodes are added as pipeline stages (PP 2, 4, 8). Weights split evenly "
        "over TP x PP; KV heads split over TP, replicated when TP exceeds them."
    )
)
text("explore-mla-replicated")(
    lambda: (
        "MLA: every tensor-parallel rank stores the whole latent of every request it serves, so "
        "TP does not shrink the cache per GPU (engines' data-parallel attention, not modelled "
        "here, gives each rank different requests instead)."
    )
)
