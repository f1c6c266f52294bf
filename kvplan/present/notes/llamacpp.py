"""The words of llama.cpp and Ollama, and of kvplan fit, which sizes llama-server. Made in
kvplan/engines/llamacpp.py and ollama.py (ollama-flag-deprecated in
kvplan/cli/engine_llamacpp.py) and kvplan/plans/fit.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

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
text("ollama-newer")(
    lambda version, known: (
        f"Ollama {version} is newer than the releases kvplan's rules follow (up to {known}): its "
        f"defaults are taken as {known}'s; check them against that release's notes."
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
