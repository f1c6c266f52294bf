"""The words of the notes beyond the core commands (llama.cpp and Ollama, whatif's techniques,
the engines' memory terms, simulate and plan, deployments, comparisons, measure): registered in
kvplan.present.notes' one table, loaded only when one of them is printed (start-up)."""

from kvplan.present import format as f
from kvplan.present.note_registry import text
from kvplan.present.notes_gpu import EVIDENCE_WORDS

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
text("ollama-flag-deprecated")(
    lambda version: (
        f"--engine llama.cpp --ollama is deprecated: this is --engine ollama --ollama-version "
        f"{version} (its -c is num_ctx, -np OLLAMA_NUM_PARALLEL, -ctk OLLAMA_KV_CACHE_TYPE)."
    )
)
text("ollama-estimate")(
    lambda: (
        "Ollama's estimate is its scheduler's (PredictServerVRAM, v0.33 source): the file size "
        "plus an f16 cache of every layer at num_ctx x num_parallel, whatever the cache type or "
        "window; it decides evictions, while the allocation above is what llama-server takes."
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

# ---- whatif: every technique, in bytes and in time -----------------------------------------------
text("kv-sub-byte")(
    lambda dtype, bits, group_size, full_precision_tokens, full_precision_dtype: (
        f"{dtype} KV: {bits}-bit values packed, an fp16 scale and an fp16 zero-point per "
        f"{group_size} values (keys grouped per channel, values per token, as KIVI; the bytes are "
        "the same either way)"
        + (
            f"; the first and the most recent tokens, {full_precision_tokens:,} per sequence per "
            f"layer (--keep-sink + --keep-recent), stay in {full_precision_dtype}."
            if full_precision_tokens
            else "; no token kept in full precision."
        )
    )
)
text("whatif-terms")(
    lambda: (
        "Terms: p bytes per value, L layers, H_kv KV heads, d head_dim, s tokens held; and what "
        "moves no term of the product: dup duplicate bytes (prefix sharing), waste allocation "
        "slack (paging), reads bytes touched per step (sparse reads), +draft a second cache "
        "(speculative decoding). KV is what the batch stores (all GPUs); read is the KV a decode "
        "step reads to give every sequence one token."
    )
)
text("whatif-time")(
    lambda tp: (
        f"Time per GPU of a TP-{tp} group: max tok/s is BW / (s x k), the decode rate no batch "
        "beats (every KV byte read per token); TPOT and tok/s are decode-step floors, "
        "max(bytes / BW, FLOPs / peak), at the batch that fits (the smaller of --batch and users); "
        "TTFT is the prefill floor of one sequence. Weights are the checkpoint's: the K/V "
        "projection weights a conversion removes or adds are not counted."
    )
)
text("whatif-tp-auto")(
    lambda tp, gpu, context_len: (
        f"TP {tp}: the smallest tensor-parallel degree at which one {context_len:,}-token "
        f"sequence fits beside the weights on {gpu}, within one node when one suffices "
        "(--tp to choose)."
    )
)
text("whatif-no-fit")(
    lambda gpu, context_len: (
        f"One {context_len:,}-token sequence does not fit beside the weights on {gpu} at any "
        "tensor-parallel degree up to 1,024: priced at TP 1, where no sequence fits (users 0, "
        "no TPOT); kvplan capacity weighs pipeline stages and DP attention."
    )
)
text("whatif-cla")(
    lambda: (
        "CLA stores one cache per group of layers, but every layer still attends to it, and a "
        "layer's cache does not stay in cache memory between layers: a decode step reads as "
        "much as before (Brandon et al. 2024: CLA does not cut the per-step bandwidth of "
        "attention). It buys concurrency, not a faster step."
    )
)
text("whatif-prefix")(
    lambda: (
        "Prefix sharing stores the prefix once (in whole blocks for users), and a prefix hit "
        "skips its prefill; paged decode kernels still read the shared blocks once per sequence "
        "(cascade attention, which reads them once per batch, is not assumed)."
    )
)
text("whatif-sparse-read")(
    lambda: (
        "Sparse reads (Quest-style) store every token and read a fraction per step: decode runs "
        "as if the context were that fraction (windows still cap their layers); the selection's "
        "page metadata is not counted."
    )
)
text("whatif-lowrank")(
    lambda: (
        "Low-rank (Palu) caches an r-wide latent per KV head instead of head_dim values and "
        "rebuilds keys from it at every step: 2 x H_kv x r x d FLOPs per attended key are added "
        "to decode (values fold into the output projection)."
    )
)
text("whatif-mla-convert")(
    lambda: (
        "MLA conversion replaces each full-attention layer's K and V by one latent (LATENT + "
        "ROPE values per token); decode runs absorbed, 2 x H_q x (2 x LATENT + ROPE) FLOPs per "
        "key; sliding and chunked layers keep their windows."
    )
)
text("whatif-cyclic")(
    lambda: (
        "A cyclic buffer is how a window is implemented: W slots allocated once and overwritten "
        "at t mod W, so memory is constant (W even for a shorter sequence) and the pages a paged "
        "window straddles (one block more) are not needed."
    )
)
text("whatif-paged")(
    lambda: (
        "paged=N: sequences really hold N tokens (default 30% of --ctx, the middle of the 20-40% "
        "utilisation measured under contiguous allocation). A contiguous allocator reserves "
        "--ctx for each, paging only the whole blocks of N: the same bytes and the same time as "
        "the baseline, more users."
    )
)
text("whatif-spec")(
    lambda draft, tokens, acceptance, per_round: (
        f"Speculative decoding: {draft} drafts {tokens} tokens per round, each accepted with "
        f"probability {acceptance:g} ({per_round:.2f} tokens per round); both caches hold "
        f"{tokens} speculative entries per sequence and the draft's weights and cache come out of "
        "the pool; TPOT = (k draft steps + one verification of k+1 tokens) / tokens per round "
        "(--spec-tokens, --spec-accept)."
    )
)
text("whatif-recurrent")(
    lambda head_dim, state_size, groups: (
        "recurrent=F replaces that fraction of the attention layers by a Mamba-2 state of the "
        f"model's width (Nemotron-H's shape: 2 x hidden channels, {head_dim}-wide heads, state "
        f"{state_size}, {groups} groups): a fixed size per sequence, whatever the context."
    )
)
text("whatif-scheduling")(
    lambda: (
        "The scheduling group changes no term: it decides whether freed memory becomes "
        "throughput. kvplan simulate measures each as a switch (cache-aware routing: the prefix "
        "hit rate per replica with and without it)."
    )
)
# ---- engines: vLLM memory profile, dtypes, SGLang pools ----------------------------------------
text("engine-dtype-downcast")(
    lambda engine, dtype: (
        f"--dtype auto: {engine} does not serve the config's dtype as is; it loads the model in "
        f"{dtype}, and kv-cache-dtype auto follows."
    )
)
text("engine-dtype-cast")(
    lambda config, dtype: (
        f"--dtype {dtype} overrides the config's {config}: the weights load in {dtype} and "
        "kv_cache_dtype auto stores the cache in it too."
    )
)
text("vllm-cuda-graphs-subtracted")(
    lambda: (
        "vLLM 0.21 subtracts its CUDA-graph memory estimate (VLLM_MEMORY_PROFILER_ESTIMATE_"
        "CUDAGRAPHS=1 by default); kvplan's estimate of it is a fit (a + b x layers) with about "
        "0.3 GiB of spread, and the 0.21 sampler (FlashInfer top-k/top-p) is not measured."
    )
)
text("vllm-fp8-ds-mla")(
    lambda: (
        "Sparse-attention MLA with an fp8 cache on the FlashMLA-sparse backend: vLLM switches to "
        "DeepSeek's fp8_ds_mla layout (\"Using DeepSeek's fp8_ds_mla KV cache format\"), 656 B "
        "per token per layer (512 fp8 latent values, 4 fp32 scales, 64 bf16 rope values), plus "
        "the indexer's 132 B key."
    )
)
text("sglang-dsa-dtype")(
    lambda dtype: (
        f"DeepSeek sparse attention: SGLang picks kv-cache-dtype {dtype} for it on this GPU "
        "(fp8_e4m3 from Blackwell on, bfloat16 before) and 64-token pages."
    )
)
text("sglang-nsa-fp8-layout")(
    lambda allocated: (
        f"fp8 DSA pool: each latent is stored in {allocated} B (fp8 values, fp32 scales, bf16 "
        "rope) while SGLang's profile divides the pool by 576 B per layer, so the pool it "
        "allocates is larger than the memory it budgeted; cell_size_bytes is the allocated size."
    )
)
text("sglang-mamba")(
    lambda ratio, ssm: (
        f"Linear-attention hybrid: the state pool takes rest x {ratio}/(1 + {ratio}) first "
        f"(mamba_full_memory_ratio), with {ssm} SSM states and bf16 conv states; the KV pool "
        "covers the full-attention layers only."
    )
)
# ---- simulate and plan ---------------------------------------------------------------------------
text("sim-engine")(
    lambda version: (
        f"The engine is vLLM {version}'s V1 scheduler as kvplan reads it: running requests first "
        "(decodes one token each, prefill continuations take what the budget leaves), then waiting "
        "ones first come first served with head-of-line blocking, only in steps that preempted "
        "nobody; preemption by recompute of the last admitted; blocks and prefix hits from "
        "kvplan.kernels' block manager; one forward per step timed by formulas.batch_step."
    )
)
text("sim-step-terms")(
    lambda shares: (
        "Where the engine's time went (simulated, last rate): "
        + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.0%}" for k, v in shares)
        + "."
    )
)
text("sim-dsa-tables")(
    lambda gpu, layers, tables: (
        f"Sparse attention (DSA) on {layers} layers: each is priced as dense MLA plus what "
        "DeepSeek-V3.2's DSA module costs over DeepSeek-V3's MLA module in vLLM 0.19 on the "
        f"{tables} (NVIDIA aiconfigurator's module tables, taken for {gpu}; read at the step's "
        "batch, length and heads on a rank): more at short contexts (the indexer and top-k), "
        "less at long ones (2,048 keys attended, not all)."
    )
)
text("sim-dsa-dense")(
    lambda gpu, engine: (
        f"Sparse attention (DSA) is priced as the dense MLA it builds on: kvplan has no {engine} "
        f"DSA module tables for {gpu}, so the indexer's and top-k's cost and the long-context "
        "saving are not modelled (vLLM's on H100 and H200 cost 2-3x MLA's at short contexts; "
        "vLLM runs DSA on Hopper and datacenter Blackwell only)."
    )
)
text("sim-achieved-measured")(
    lambda: (
        "The profile is measured (kvplan measure), but its per-operator curves lay out only "
        "dense attention + MLP layers with weights in a plain float format; this model is not "
        "one, so its rates are taken as achieved ones and each kernel family runs at the H100 "
        "SXM's measured ratio to the dense matmul and copy kernels (not checked on this device)."
    )
)
text("sim-measured-ops")(
    lambda dtype, weights: (
        "The profile is measured (kvplan measure): every operator of a step (each layer's "
        "GEMMs over the step's tokens, one decode-attention call, each prefill chunk's causal "
        "attention, norms, activations and cache writes, the head over the sampled positions) "
        "runs at the device's measured curve at its shape plus its measured launch cost: the "
        "per-operator model `kvplan measure --check` validates. The curves were measured in "
        f"{dtype}; this run's weights are {weights}. The scheduler's CPU costs are vLLM's "
        "(BLIS), not measured here."
    )
)
text("sim-prefix-caching-off-hybrid")(
    lambda: "Prefix caching is off: vLLM turns it off by default for models with recurrent state."
)
text("sim-max-model-len-reduced")(
    lambda configured, estimated: (
        f"kvplan's KV pool estimate cannot hold one {configured:,}-token request, which would "
        f"stop vLLM at start-up; simulated with max_model_len {estimated:,} (the pool is what "
        "matters here). Pass --max-model-len or --kv-cache-memory (the engine's logged figure) "
        "to pin it."
    )
)
text("sim-weak-general")(
    lambda: (
        "Known weak spots: the API server's per-request costs (chat templates, tokenizers, HTTP) "
        "vary by model and server, so TTFT at low load is underestimated (published runs show "
        "40-60 ms where kvplan says 20-30 ms); KV pools rest on kvplan's memory estimate; "
        "queueing amplifies step-time errors near saturation."
    )
)
text("sim-weak-moe")(
    lambda: (
        "MoE: fused-MoE kernels reach about a fifth of the GEMM peak (measured), expert load is "
        "taken as uniform, and the small per-layer kernels of large tensor-parallel MoE models "
        "are undercounted: decode at small batch is underestimated (DeepSeek-R1 on 8 H200: "
        "about half the measured TPOT)."
    )
)
text("sim-weak-mla")(
    lambda: (
        "MLA: decode attention is counted absorbed over the latent and prefill un-absorbed; "
        "FlashMLA's 64-token blocks are assumed."
    )
)
text("sim-weak-hybrid")(
    lambda: (
        "Sliding-window and recurrent-state layer groups hold a fixed share per request (the "
        "window's blocks, one state block), reserved when the request is admitted."
    )
)
text("sim-weak-pp")(
    lambda: (
        "Pipeline parallelism is a micro-batched pipeline of pp stages with its bubble; vLLM's "
        "own batch queue across stages is not modelled request by request."
    )
)
text("sim-sharegpt")(
    lambda: (
        "sharegpt lengths are a lognormal stand-in (sigma 1, filtered as the bench filters "
        "ShareGPT: input and output >= 4, input <= 1024, total <= 2048) at the given means, not "
        "the dataset itself: a run's duration follows its longest requests. Use --trace for "
        "real per-request lengths."
    )
)
text("sim-frontend-bound")(
    lambda: (
        "The API server was busy more than 80% of the run: it streams every token in turn, so "
        "clients see its pace rather than the engine's (more API servers or replicas help)."
    )
)
text("sim-preemptions")(
    lambda: (
        "Requests were preempted (the KV pool ran out): each recomputes its prompt and outputs "
        "when readmitted, and its TPOT includes the wait."
    )
)
text("plan-method")(
    lambda bisections, num_prompts: (
        f"Each configuration: one replica simulated with {num_prompts:,} requests, saturated "
        f"first, then {bisections} bisections of the rate for the highest one meeting every "
        "target (its goodput); the smallest max_num_seqs variants reuse runs where the seat "
        "limit never bound."
    )
)
text("plan-pruned")(
    lambda pruned, top: (
        f"{pruned:,} configurations were pruned: a replica's goodput is at most the rate that "
        "ends its search so far (first the saturated rate, then each bisection's upper end, "
        "then the goodput found), so it needs at least ceil(rate / that rate) replicas, and at "
        f"that many it already costs more per hour than the {top:,} cheapest found before it "
        "(groups run cheapest floor first; --no-prune searches every one in full)."
    )
)
text("plan-replicas")(
    lambda: (
        "Replicas behind a round-robin router each take rate / replicas: replicas = "
        "ceil(rate / goodput), GPUs = replicas x TP x PP, and the operating point is a run at "
        "rate / replicas."
    )
)
text("plan-prices")(
    lambda: (
        "Prices are on-demand USD per GPU-hour from hardware_profiles/prices.yaml (RunPod "
        "Secure Cloud list prices read 2026-09-25 unless noted; hyperscalers charge 2-3x); "
        "override with --price GPU=USD. $ per million tokens counts input and output tokens "
        "served at the requested rate."
    )
)
text("plan-no-hf-id")(
    lambda: (
        "The config is a local file: the launch command names the model by kvplan's name; "
        "replace it with the checkpoint's Hugging Face id or path."
    )
)
text("plan-sglang")(
    lambda: (
        "Simulated with SGLang's scheduler and pool (kvplan simulate --engine sglang): "
        "max_num_seqs is --max-running-requests and max_num_batched_tokens "
        "--chunked-prefill-size; kv-cache-dtype fp8 is SGLang's fp8_e4m3."
    )
)
text("plan-point-estimate")(
    lambda: (
        "Sized on kvplan's point estimates, which published runs have mostly found optimistic; "
        "plan --confidence 0.8 (or 0.9) sizes on the pessimistic bound of the simulated "
        "figures' intervals instead (kvplan/data/intervals.json)."
    )
)
text("plan-confidence")(
    lambda confidence, gpus: (
        f"Sized so the pessimistic bound at {confidence:.0%} confidence meets the targets: "
        + "; ".join(
            f"{name} ({evidence} kernel rates) taken as {slow:.2f}x slower than simulated"
            for name, evidence, slow in gpus
        )
        + ", each latency target checked on its own bound (kvplan/data/intervals.json); the "
        "operating point shown is the point estimate."
    )
)
text("plan-none")(
    lambda: (
        "No configuration meets the targets: loosen a target, allow more GPU kinds or TP "
        "degrees, or raise --max-gpus."
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
text("measure-confirm")(
    lambda why, median, worst, passed, regressions, regressed_first: (
        (
            f"Measured twice (--confirm): the first run missed the check (median |error| "
            f"{median:.1%}, worst {worst:.1%}); this second run "
            + ("passed it: the miss was load, not the prediction." if passed else "missed too.")
        )
        if why == "check"
        else (
            "Measured twice (--confirm): the first run regressed against the baseline ("
            + ", ".join(regressed_first)
            + "); "
            + (
                f"{regressions} figure(s) regressed in both runs."
                if regressions
                else "no figure regressed in both runs: load, not a regression."
            )
        )
    )
)
text("check-median")(
    lambda error, tolerance: (
        f"CHECK FAILED (predictions vs this device): the median |error| is {error:.1%}, above "
        f"the {tolerance:.0%} tolerance."
    )
)
text("check-worst")(
    lambda error, tolerance, phase, batch, context: (
        f"CHECK FAILED (predictions vs this device): {phase} at batch {batch}, {context:,} "
        f"tokens is off by {error:+.1%}, beyond the worst-point tolerance of {tolerance:.0%}."
    )
)
text("check-no-memory-point")(
    lambda: (
        "CHECK FAILED (kvplan's self-test, not its predictions): no point is memory-bound, so "
        "wrong bytes could not show: add a batch-1 decode point."
    )
)
text("check-mutation-missed")(
    lambda mutation, median, worst: (
        f"CHECK FAILED (kvplan's self-test, not its predictions): with {mutation} on purpose "
        f"the gate would still pass (median {median:.1%}, worst {worst:.1%}), so on this "
        "device these points cannot see such a mistake. The predictions are judged by the "
        "median and worst |error| of the check line."
    )
)
text("check-profile-off")(
    lambda median, worst: (
        f"CHECK FAILED (the --gpu profile vs this device): the given profile's predictions miss "
        f"by a median {median:.1%} (worst {worst:.1%})."
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
text("deployment-none-fits")(
    lambda reason, gpus=1: (
        f"{reason}. Shown on {'one GPU' if gpus == 1 else f'{gpus} GPUs'}, with what would fit."
    )
)
text("deployment-on-gpus")(
    lambda layout, gpu, num_gpus, replicas, context_len, users, others: (
        f"On {num_gpus:,} x {gpu}: "
        + (
            f"{replicas:,} replicas of {f.layout_text(layout)}"
            if replicas > 1
            else f.layout_text(layout)
        )
        + f", the layout holding the most {context_len:,}-token sequences on them ({users:,})"
        + (
            "; also weighed: "
            + "; ".join(
                f"{n:,} x {f.layout_text(d)} {count:,}"
                if n > 1
                else f"{f.layout_text(d)} {count:,}"
                for d, n, count in others
            )
            if others
            else ""
        )
        + ". Fix any of it with --tp, --pp or --dp-attention."
    )
)
text("launch-engine-seats")(
    lambda planned, held, layout: (
        f"vLLM's own allocation of these flags holds {held:,} max_model_len requests per "
        f"replica of {f.layout_text(layout)}, not the {planned:,} the engine-free plan counts (its page layout "
        "differs, e.g. fp8_ds_mla for a DSA model's fp8 cache): the launch carries vLLM's count."
    )
)
text("gpus-idle")(
    lambda num_gpus, used, layout: (
        f"{num_gpus - used:,} of the {num_gpus:,} GPUs stay idle: replicas of {f.layout_text(layout)} "
        f"use {used:,}."
    )
)
text("roofline-ops")(
    lambda tp: (
        "Operators of the decode step summed over the layers"
        + (
            f", per GPU at TP {tp} (weights and FLOPs split evenly, the KV a rank holds)"
            if tp > 1
            else ""
        )
        + ": each on the datasheet roofline alone, max(bytes / BW, FLOPs / peak); share is of "
        "their summed floors. The embedding lookup and lm_head are outside the layers and not "
        "listed; kvplan measure times the same operators on a device."
    )
)

# ---- simulate: disaggregated prefill/decode -------------------------------------------------------
text("sim-disaggregated")(
    lambda link, one_way_bytes_per_s, latency_s, ranks: (
        "Disaggregated as vLLM's NixlConnector runs behind its proxy: the prefill replica runs the "
        "prompt with max_tokens 1 and keeps its blocks until the decode replica has read them; the "
        "decode replica allocates the prompt's blocks when the request reaches its queue's head, "
        f"pulls the KV over {link} ({f.gbps_text(one_way_bytes_per_s)} one way per GPU, "
        f"{f.us_text(latency_s)} latency, its {ranks} rank(s) in parallel; a transfer holds the "
        "prefill replica's outgoing and the decode replica's incoming links, each side first come "
        "first served), then recomputes the last prompt token and "
        "samples the first token the client sees. TTFT therefore ends on the decode replica "
        "(prefill, its response, the decode queue, the transfer, one decode step), as vllm bench "
        "serve measures it through the proxy; the prefill replica's own first token is reported "
        "beside it."
    )
)

text("sim-weak-disagg-hybrid")(
    lambda: (
        "With a KV connector, vLLM up to at least 0.18 turns its hybrid KV cache manager off (it logs "
        '"Turning off hybrid kv cache manager because `--kv-transfer-config` is set"). Every '
        "sliding-window layer then holds, and the connector moves, the whole context, so the pools are "
        "smaller than simulated here, and Mamba hybrids may not start. kvplan sizes both pools with the "
        "hybrid manager on (--no-disable-hybrid-kv-cache-manager, for a connector that supports it). "
        "Pass --kv-cache-memory with the logged figure to pin the pool."
    )
)

text("sim-outputs-capped")(
    lambda requests, limit: (
        f"{requests:,} request(s) asked for more output than max_model_len {limit:,} leaves after "
        "their prompt: the engine stops them at the limit, so they generate fewer tokens than "
        "asked (as vLLM does; raise --max-model-len to let them run)."
    )
)

text("vllm-uniform-type")(
    lambda layers: (
        f"The {layers} layers need the same token slots but hold different sizes (an indexer key "
        "on some layers only): vLLM puts them in one group whose block covers every layer, its "
        "page the sum of theirs (UniformTypeKVCacheSpecs). Which layers vLLM gives an indexer key "
        "was not checked against a vLLM log for this model."
    )
)

text("vllm-gqa-indexer")(
    lambda layers, width, block_size: (
        f"MiniMax-M3: {layers} layers' lightning indexer keeps its own key-only cache, one bf16 "
        f"vector {width} wide per token on every rank (MiniMaxM3IndexerCache.get_kv_cache_spec, "
        "vllm/models/minimax_m3/common/indexer.py, vLLM 0.32; the indexer_kv_dtype, not "
        "--kv-cache-dtype), counted in its layer's group; blocks of "
        f"{block_size} tokens, the only size the sparse attention backend takes. Read from "
        "vLLM's source, not checked against a vLLM log; vLLM registers the model as "
        "MiniMaxM3SparseForCausalLM (model_type minimax_m3_text)."
    )
)

text("vllm-compressed-layout")(
    lambda caches, layers, groups, block_bytes, in_flight, max_num_batched_tokens: (
        f"DeepSeek-V4 in vLLM 0.32: its {layers} layers register {caches} caches (per layer a "
        "sliding-window cache of 64-token blocks; per compressed layer its compressed entries in "
        "256-token blocks and the compressor's fp32 states; per 1/4 layer the indexer's keys and "
        "its compressor's states), all replicated on every TP rank; "
        f"_get_packed_kv_cache_groups packs them into {groups} groups whose pages share one "
        f"block of {block_bytes:,} B (the widest group). A sliding cache is counted for "
        f"min(window - 1 + {in_flight:,}, max_model_len) tokens a request: the tokens in flight "
        f"are 2 x max_num_batched_tokens {max_num_batched_tokens:,} (async scheduling, on by "
        "default). Read from vLLM 0.32.0's source (vllm/models/deepseek_v4, "
        "vllm/v1/core/kv_cache_utils.py; commit 5df63a720), not checked against a vLLM log."
    )
)

text("vllm-dsv4-fp8-ds-mla")(
    lambda given: (
        f"--kv-cache-dtype {given}: vLLM 0.32 stores DeepSeek-V4's cache in the fp8_ds_mla "
        "layout on FLASHMLA_SPARSE_DSV4 (584 B a token or compressed entry: 448 fp8 values, 64 "
        "bf16 RoPE values, 8 B of scales; pages padded to a multiple of 576 B)."
    )
)

text("sglang-dsv4-pools")(
    lambda version, bytes_per_full_token, layers, c4_layers, c128_layers: (
        f"DeepSeek-V4 in SGLang {version} (DSV4PoolConfigurator): the pool memory is split by "
        f"{bytes_per_full_token:,.2f} B a full token over {layers} layers: a sliding-window row of "
        f"584 B for a tenth of the tokens (swa_full_tokens_ratio 0.1) on every layer, a 584-B "
        f"compressed row per 4 tokens with a 132-B indexer key on {c4_layers} layers and per 128 "
        f"on {c128_layers}, and the compressors' fp32 ring states (8 and 128 slots per "
        "window of the SWA tokens); page 256, max_running_requests min(256, tokens // 2). The "
        "concurrency counts the full pool's tokens; the SWA and state pools (a tenth of them) "
        "are not checked per request. Read from SGLang's source (sglang-0.5.14 wheel), not "
        "checked against an SGLang log."
    )
)

text("sglang-dsv4-dtype")(
    lambda: (
        "--kv-cache-dtype auto: SGLang 0.5.14 serves DeepSeek-V4 with an fp8_e4m3 cache "
        "(apply_deepseek_v4_defaults)."
    )
)

text("sglang-partial-indexer")(
    lambda layers, of: (
        f"Only {layers} of the {of} layers run their own DSA indexer (indexer_types), so only they "
        "are counted an indexer key; whether SGLang's NSA pool allocates one on every layer was "
        "not checked against an SGLang log for this model."
    )
)

text("ollama-newer")(
    lambda version, known: (
        f"Ollama {version} is newer than the releases kvplan's rules follow (up to {known}): its "
        f"defaults are taken as {known}'s; check them against that release's notes."
    )
)
text("sim-vllm-v0")(
    lambda version, steps: (
        f"vLLM {version} runs the V0 engine"
        + (
            f" with multi-step scheduling (--num-scheduler-steps {steps}): the scheduler passes "
            f"and output processing of {steps} decode-only steps overlap them (each pays 1/{steps} "
            f"of the host time), and while decodes run requests are admitted only every {steps} "
            "decode steps (a request finished inside a window leaves at its last token, not at "
            "the window's end)"
            if steps > 1
            else ""
        )
        + ". kvplan simulates V0 releases with the rules of its V1 scheduler at 0.8 (running "
        "requests first, chunked prefill), the nearest it models; V0's own scheduler "
        "(prefills first, its defaults) is not modelled."
    )
)
# ---- simulate: SGLang's scheduler ---------------------------------------------------------------
text("sim-sglang-version-nearest")(
    lambda given, rules: (
        f"SGLang {given} is not a release kvplan models: simulated with the rules and defaults "
        f"of SGLang {rules}, the nearest one it knows (docs/simulate.md lists them)."
    )
)
text("sim-sglang")(
    lambda max_prefill_tokens, page, block, swa: (
        "The engine is SGLang's scheduler as kvplan reads it (main of April 2026, default flags): "
        "a step is a prefill batch alone whenever one can be formed (the running requests do not "
        "decode in it), else a decode step for every running request; admission first come "
        f"first served within max_prefill_tokens {max_prefill_tokens:,} and chunked_prefill_size "
        "per batch, and within the KV pool less what the running requests are expected to still "
        "need (new_token_ratio from 0.7 down to 0.098); when the pool runs out, retraction of the "
        "requests with the fewest outputs. "
        + (
            f"SGLang's page is {page} token{'s' if page != 1 else ''}; the simulated pool counts "
            f"blocks of {block} tokens (at most {block - 1} tokens less per request). "
            if block != page
            else ""
        )
        + (
            "The sliding-window layers' own pool is not a limit here (only the full-attention "
            "pool is)."
            if swa
            else ""
        )
    )
)
text("sim-sglang-pool-caps")(
    lambda context, tokens, longest: (
        f"SGLang's KV pool ({tokens:,} tokens) is smaller than the context length ({context:,}): "
        f"SGLang starts anyway with max_req_len {tokens - 1:,}, refuses prompts of "
        f"{tokens - 6:,} tokens or more and cuts max_new_tokens so that prompt + outputs stay "
        f"within {tokens - 2:,}; the simulation caps requests at {longest:,} tokens (prompt + "
        "outputs, which with a page fit the simulated pool's whole blocks)."
    )
)
text("sim-weak-sglang")(
    lambda: (
        "SGLang: the kernel times are SGLang's own measured tables where the GPU has them (else "
        "vLLM's, or the datasheet: the kernel-tables note says which), and the schedule is "
        "SGLang's (step for step against SGLang 0.5.6.post2's own scheduler on 8 scenarios). On "
        "14 published SGLang runs (tests/data/sim_bench_cases_sglang.json, held out) dense and "
        "Qwen3 MoE models came within 1-36% on throughput and TPOT, while gpt-oss on SGLang "
        "0.5.3-0.5.4 and DeepSeek-V3.2 on 0.5.6 measured 2-19 times slower than simulated. "
        "Median errors: throughput 22%, TPOT 32%, TTFT 36%."
    )
)
text("sim-interval")(
    lambda evidence, calibrated, widen: (
        f"Intervals (bench_interval in JSON): where 80% of real runs fall, from how far "
        f"published runs priced like this one ({EVIDENCE_WORDS.get(evidence.split('/')[0], evidence)}) "
        "landed from kvplan's figures: "
        + (
            "calibrated on runs of this class (kvplan/data/intervals.json). "
            if calibrated
            else "too few published runs of this class to calibrate it: the spread of every "
            "class but GPUs' own tables, widened by half. Loudly unsure. "
        )
        + (
            f"Widened {widen:.2f}x: too few of those runs had this workload's length distribution. "
            if widen > 1
            else ""
        )
        + "The interval need not hold the point: kvplan has been faster than most real runs."
    )
)
text("fit-assumes")(
    lambda build, cache_type, capacity_bytes, gpu: (
        f"Each row assumes llama-server b{build}: -c as shown, one sequence (-np 1), -ctk = "
        f"-ctv {cache_type}, flash attention auto (on), every layer on the GPU (-ngl all), and "
        f"1 GiB kept for compute buffers (-fitt); it fits when that total is within the "
        f"{f.gib_text(capacity_bytes)} {gpu} may use. The rows' bytes are kvplan engine's "
        "(--engine llama.cpp with the same -c, -np 1, -ngl all and --weights-type; the JSON "
        "gives each row's command)."
    )
)
text("fit-rank")(
    lambda every_type: (
        "Ranked by parameters (a quality proxy), then bits per weight, then context, "
        + (
            "every weights type that fits."
            if every_type
            else "with the most bits that fit at each context (--every-type lists all)."
        )
        + " tok/s is one sequence's memory-bound decode ceiling at the full context."
    )
)
text("fit-weights-estimated")(
    lambda: (
        "Weights not read from a GGUF are every parameter in the named ggml type (q4_K 4.5 "
        "bits): llama-quantize's mixes (Q4_K_M) keep some tensors wider, a few percent more; "
        "pass the .gguf file for its exact bytes."
    )
)
text("fit-training-context")(
    lambda models: (
        "Contexts past a model's training context are not tried; its training context is "
        "tried instead: "
        + ", ".join(f"{name} {limit:,}" for name, limit in models[:12])
        + (f" and {len(models) - 12} more." if len(models) > 12 else ".")
    )
)

# ---- simulate: expert parallelism and DP attention (kvplan.simulate.setup.parallel_layout) -------
text("sim-expert-parallel")(
    lambda layout, dp, ep, experts_per_rank, gpus, router: (
        f"Layout {layout} on {gpus} GPU(s) per group. "
        + (
            f"Each of the {dp} DP ranks has its own scheduler and KV pool (requests go to them "
            f"by {router.replace('_', ' ')}) and runs attention and the dense layers on its own "
            "batch, their weights replicated at the attention TP; the MoE layers run on the "
            "gathered batch, priced at the rank's tokens x DP (balanced ranks): the lockstep "
            "wait for the slowest rank and vLLM's dummy batches on idle ranks are not simulated "
            "step by step (kvplan.formulas.batch_step.lockstep_step prices one lockstep step). "
            if dp > 1
            else ""
        )
        + (
            f"EP {ep}: each rank holds {experts_per_rank:g} routed experts and reads the ones "
            "its tokens touch (uniform routing: the expected share), the MoE layers' all-reduce "
            "replaced by a dispatch and a combine all-to-all of each token's hidden state to its "
            "top-k experts (bf16, the link's one-way bandwidth, one latency each)."
            if ep > 1
            else "The experts are tensor-parallel over the group; without EP each MoE layer "
            "all-gathers the ranks' hidden states before it and reduce-scatters after it."
        )
        + " Expert load imbalance is not modelled."
    )
)

text("sim-dp-replicas")(
    lambda ranks, router: (
        f"Data parallel size {ranks}: independent engine replicas (a dense model under vLLM's -dp, "
        f"or SGLang's --dp-size without --enable-dp-attention), requests sent by "
        f"{router.replace('_', ' ')}."
    )
)

text("plan-parallel")(
    lambda flags: (
        f"Every configuration launched with {flags}: a replica is its group of DP ranks (vLLM: "
        "TP x PP x DP GPUs; SGLang's --enable-dp-attention ranks share its --tp GPUs), each rank "
        "simulated with its own scheduler and KV pool as kvplan simulate runs them "
        "(sim-expert-parallel); a layout the model refuses is listed among the rejections."
    )
)
