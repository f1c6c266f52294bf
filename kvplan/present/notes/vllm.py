"""The words of vLLM's allocation: its rules, the memory profile, block sizes, layer grouping. Made
in kvplan/engines/vllm.py."""

from kvplan.formulas.memory import NON_TORCH_MEASURED_MAX_TP
from kvplan.present.notes.registry import text

text("vllm-rules")(lambda version: f"Rules of vLLM V1 {version}.")
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
        + (
            ", and TP 8 is not measured (the TP 4 figure is used)"
            if tp > NON_TORCH_MEASURED_MAX_TP
            else ""
        )
        + ". Pass --kv-cache-memory with a logged figure for exact counts."
    )
)
text("vllm-block-size-fallback")(
    lambda block_size, backend, passed_over: (
        f"--block-size {block_size} precluded the faster attention backend(s) {passed_over}: "
        f"vLLM runs {backend} (its warning; platforms/cuda.py get_attn_backend_cls), timed "
        "from that backend's rows where the kernel tables have them, else named among the "
        "untimed parts. Drop --block-size for vLLM's own choice."
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
text("vllm-window-in-flight")(
    lambda in_flight, batches, max_num_batched_tokens: (
        f"vLLM 0.32 sizes a request's sliding-window (or chunked-local) blocks for the window "
        f"plus the tokens in flight, {in_flight:,}: {batches} concurrent batches of "
        f"max_num_batched_tokens {max_num_batched_tokens:,} (VllmConfig.max_in_flight_tokens; "
        "async scheduling, on by default under Model Runner V2, adds one batch to the pipeline's "
        "stages). With --no-async-scheduling it is one batch per stage; vLLM 0.19 and 0.21 "
        "count one token budget."
    )
)
text("vllm-pp")(
    lambda: "PP: each stage is grouped on its own layers; every rank takes the minimum num_blocks."
)
text("vllm-cuda-graph-estimate")(
    lambda: (
        '"Estimated CUDA graph memory" is logged but not subtracted by vLLM 0.19 (it is from '
        "0.21 on); kvplan's figure is a fit (a + b x layers on the rank), good to about 0.3 GiB."
    )
)
text("vllm-cuda-graphs-subtracted")(
    lambda: (
        "vLLM 0.21 subtracts its CUDA-graph memory estimate (VLLM_MEMORY_PROFILER_ESTIMATE_"
        "CUDAGRAPHS=1 by default); kvplan's estimate of it is a fit (a + b x layers) with about "
        "0.3 GiB of spread, and the 0.21 sampler (FlashInfer top-k/top-p) is not measured."
    )
)
text("vllm-checkpoint-kv-cache")(
    lambda version, kv_cache_dtype: (
        f"--kv-cache-dtype auto: the checkpoint's quantization_config states an {kv_cache_dtype} "
        f"KV cache (ModelOpt kv_cache_scheme / kv_cache_quant_algo), which vLLM {version} takes "
        "for auto (resolve_kv_cache_dtype_string: fp8 from 0.14, nvfp4 from 0.20); give "
        "--kv-cache-dtype bfloat16 for a 16-bit cache."
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
text("vllm-uniform-type")(
    lambda layers: (
        f"The {layers} layers need the same token slots but hold different sizes (an indexer key "
        "on some layers only): vLLM puts them in one group whose block covers every layer, its "
        "page the sum of theirs (UniformTypeKVCacheSpecs). Which layers vLLM gives an indexer key "
        "was not checked against a vLLM log for this model."
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
text("vllm-attention")(
    lambda backend, block_size: (
        f"Attention backend {backend} (--attention-backend): block size {block_size}, vLLM "
        "0.19's default 16 where the backend's kernels take it, else their smallest size "
        "(get_preferred_block_size; FLASHMLA 64, FLASHINFER_MLA 32, CUTLASS_MLA 128)."
    )
)
