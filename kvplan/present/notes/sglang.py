"""The words of SGLang's pools. Made in kvplan/engines/sglang.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("sglang-rules")(
    lambda version, fraction, given: (
        f"Rules of SGLang {version} "
        + (
            "(main, April 2026: pool_configurator, model_runner_kv_cache_mixin)"
            if version == "0.5"
            else "(the 0.4 releases' server_args defaults, by patch: mem_fraction_static by TP "
            "before 0.4.7.post1, by a reserved-memory bucket from it)"
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
text("sglang-cuda-ipc-pool")(
    lambda pool_bytes, held_bytes, fraction, later_bytes: (
        (
            "SGLANG_USE_CUDA_IPC_TRANSPORT=1: the tokenizer process reserves a "
            f"{f.gib_text(pool_bytes)} multimodal feature pool and its own CUDA context on GPU "
            f"0 at start-up, {f.gib_text(held_bytes)} taken from the free memory before loading "
            "(SGLang's minimum over ranks): every rank's pool shrinks by "
            f"{fraction} x that. If the reservation lands after SGLang's first measurement (a "
            f"start-up race) the pool is {f.gib_text(later_bytes)}. A text-only request sends "
            "no feature through it: the step is unchanged."
        )
        if held_bytes
        else (
            "SGLANG_USE_CUDA_IPC_TRANSPORT=1 changes nothing here: a text-only model builds no "
            "multimodal processor, so no feature pool is reserved."
        )
    )
)
text("sglang-swa")(
    lambda swa, full, ratio: (
        f"Hybrid SWA: {swa} windowed and {full} full layers share the pool "
        f"(swa_full_tokens_ratio {ratio})."
    )
)
text("sglang-swa-off")(
    lambda swa, full: (
        f"One pool: SGLang keeps gpt-oss's {swa} windowed layers at full length beside its "
        f"{full} full layers (disable_hybrid_swa_memory: always before 0.5.8, then with "
        "trtllm_mha)."
    )
)
text("sglang-triton-kernels-kept")(
    lambda kept_bytes, hopper: (
        f"Weights include {f.gib_text(kept_bytes)} SGLang's triton_kernels MoE keeps beside the "
        "loaded experts: "
        + (
            "the checkpoint's expert scales stay beside the swizzled copies Hopper's layout "
            "makes of them, and "
            if hopper
            else ""
        )
        + "the expert biases are held in fp32 (layers/quantization/mxfp4.py, "
        "process_weights_after_loading)."
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
text("sglang-checkpoint-kv-cache")(
    lambda version, kv_cache_dtype, method, first: (
        f"--kv-cache-dtype auto: the checkpoint's quantization_config states an "
        f"{kv_cache_dtype} KV cache ({method}), which SGLang {version} takes for auto (its "
        f"quant_config's kv_cache_quant_algo FP8, read from {first}: configure_kv_cache_dtype); "
        "give --kv-cache-dtype bf16 for a 16-bit cache (a choice from 0.5.4)."
    )
)
text("sglang-mamba-extra-buffer")(
    lambda track, ratio, decided: (
        (
            "The extra_buffer mamba strategy, which SGLang's default auto resolved to (note "
            "sglang-mamba-auto): "
            if decided == "auto"
            else f"{decided} extra_buffer, as given: "
        )
        + "SGLang keeps the radix cache (and the "
        f"overlap scheduler, unless it speculates as spec v1), and each running request holds "
        f"{track} more recurrent state(s) for MambaRadixCache's ping-pong track buffer (from "
        "0.5.10 2 with the overlap scheduler, 1 without; 0.5.7-0.5.9 2 unless it speculates; "
        "speculating, as spec v1, 1, as spec v2, from 0.5.11, 2), so the state pool caps "
        f"running requests at its states // {ratio} "
        "(_calculate_mamba_ratio; the flag is from 0.5.7)."
    )
)
text("sglang-spec-v2-kv")(
    lambda reserve, tokens: (
        f"Spec v2's KV over-allocation: each running request holds {reserve} KV slots from its "
        "committed length on, 2 x max(topk x steps, draft tokens) (get_alloc_reserve_per_decode; "
        "page-rounded where the page and topk are above 1), topped up before every round "
        "(prepare_for_decode), so the "
        f"{tokens:,}-token pool admits and keeps fewer requests: the slots are taken from the "
        "free tokens admission counts, and check_decode_mem retracts when the top-up does not "
        "fit. SGLang runs this schema in 0.5.11-0.5.12 beside the overlap scheduler and from "
        "0.5.13 for every EAGLE-family algorithm (ScheduleBatch.is_spec_v2)."
    )
)
text("sglang-spec-mode")(
    lambda version, v2: (
        (
            f"Speculative decoding as SGLang {version}'s spec v2 beside the overlap scheduler "
            "(EAGLEWorkerV2; the default for EAGLE, EAGLE3, NEXTN and STANDALONE from 0.5.11, "
            "any topk from 0.5.13): a round's host work overlaps its GPU work, a round taking "
            "max(host, (k - 1) draft steps + verification + max(draft extend, the host's "
            "pass that prepares the next round after waiting for the verification)); that pass "
            "is priced as a decode step's host pass, which attention backends that skip the "
            "sequence-length copy (needs_cpu_seq_lens False, from 0.5.13) also hide."
        )
        if v2
        else (
            f"Speculative decoding as SGLang {version}'s spec v1, the overlap scheduler off "
            "(before 0.5.11, where SGLANG_ENABLE_SPEC_V2 is off by default and kvplan reads no "
            "environment; NGRAM; --disable-overlap-schedule, kvplan's --no-async-scheduling, or "
            "PP > 1; a given "
            "--speculative-eagle-topk above 1 before 0.5.13; from 0.5.13 SGLang's "
            "non-overlap spec v2, timed the same): a round's host work serial with its GPU "
            "work."
        )
    )
)
text("sglang-mamba-auto")(
    lambda strategy: (
        f"No --mamba-radix-cache-strategy given: SGLang's default here resolves to {strategy}. "
        "From 0.5.14 the default is auto, which picks extra_buffer for a hybrid whose "
        "architecture SGLang lists when the overlap scheduler is wanted or --page-size > 1, "
        "and no_buffer (the overlap scheduler off) otherwise; 0.5.7-0.5.13 always no_buffer "
        "(server_args._handle_mamba_radix_cache)."
    )
)
text("sglang-mamba-no-overlap")(
    lambda backend: (
        "Linear-attention hybrid with the radix cache on: SGLang keeps the recurrent states in "
        "MambaRadixCache (--mamba-scheduler-strategy no_buffer, the default) and turns the "
        "overlap scheduler off for it (server_args._handle_mamba_radix_cache, from 0.5.6 as "
        f"kvplan reads it; the attention backend here is {backend}, trtllm_mha would turn the "
        "radix cache off instead), so each step's scheduling runs between the GPU's steps, not "
        "beside them. --disable-radix-cache keeps it on."
    )
)
text("sglang-radix-off")(
    lambda reason, patch: (
        "Linear-attention hybrid without the radix cache: SGLang turns it off "
        + {
            "unsupported": "for this model type (support_mamba_cache=False: no MambaRadixCache)",
            "speculative": (
                "when it speculates under --mamba-scheduler-strategy no_buffer (the default), "
                "as 0.5.9 and earlier do; from 0.5.10 (PR #19391) SGLang refuses that launch, "
                "ROCm excepted (PR #22908)"
                + (
                    ", so a run of it under an unnamed 0.5 patch is read as one from before"
                    if patch is None
                    else ""
                )
            ),
            "trtllm_mha": "on the trtllm_mha attention backend, whose pages MambaRadixCache "
            "cannot take (and keeps the overlap scheduler on)",
        }[reason]
        + " (server_args._handle_mamba_radix_cache). No prompt reuses a cached prefix, and the "
        "state pool holds one state a running request."
    )
)
text("sglang-mamba-no-radix")(
    lambda slots, ssm: (
        f"Linear-attention hybrid without the radix cache: the state pool holds {slots:,} "
        f"states, max_running_requests' (model_runner_kv_cache_mixin.handle_max_mamba_cache), "
        f"with {ssm} SSM states and bf16 conv states; the rest is the KV pool's."
    )
)
text("sglang-mamba-spec")(
    lambda slots, state_bytes, reserved_bytes: (
        f"Speculative decoding on a linear-attention hybrid: before the split SGLang reserves "
        f"the verification's intermediate recurrent states, max_running_requests x "
        f"speculative_num_draft_tokens = {slots:,} states of {f.mib_text(state_bytes)} "
        f"({f.gib_text(reserved_bytes)}; model_runner_kv_cache_mixin.handle_max_mamba_cache)."
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
text("sglang-ngram-topk")(
    lambda given, topk: (
        f"NGRAM: SGLang takes the draft tree's branches from --speculative-ngram-max-bfs-breadth "
        f"({topk}), replacing --speculative-eagle-topk {given} (server_args _handle_ngram); the "
        "given value still picks the default attention backend, chosen before it is replaced "
        "(_handle_attention_backend_compatibility: fa3 on Hopper only with no top-k or 1)."
    )
)
text("sglang-attention")(
    lambda prefill, decode, nsa_prefill, nsa_decode, page, forced, graphs: (
        "Attention backend: "
        + (
            f"{prefill}"
            if prefill == decode
            else f"{prefill or 'the release default'} for prefill, "
            f"{decode or 'the release default'} for decode"
        )
        + (f" (DSA kernels: {nsa_prefill} prefill, {nsa_decode} decode)" if nsa_prefill else "")
        + (
            f"; it takes {page}-token pages, so SGLang sets page_size {page} and the pool rounds "
            "down to whole pages"
            if forced
            else f"; page_size {page}"
        )
        + ("" if graphs else "; it turns CUDA graphs off (every step runs eagerly)")
        + " (sglang 0.5.9 server_args.py, _handle_attention_backend_compatibility)."
    )
)
text("sglang-transformers-backend")(
    lambda architecture: (
        f"No SGLang release kvplan read (0.4.10, 0.5.0-0.5.23: kvplan/data/sglang_models.json) "
        "registers a model of its own for "
        f"{architecture if architecture.isidentifier() else repr(architecture)}: SGLang serves it on its Transformers "
        "backend (resolve_transformers_arch; or refuses to start where the checkpoint's remote "
        "code is not compatible), whose model code kvplan does not time; the pool is SGLang's "
        "own, the step times are kvplan's for the layers the config states."
    )
)
