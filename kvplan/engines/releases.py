"""The engine releases kvplan models, and the one each command takes when none is given: every
default release (`kvplan engine`, `simulate`, `plan`, `launch`'s image) is read from here.

The rules that differ between releases stay with their engine (kvplan/engines/vllm.py,
sglang.py), keyed by these names."""

# vLLM: the releases whose allocator kvplan models. 0.21: CUDA-graph memory subtracted, new
# cache-size line; 0.32: the start-up fit check and the max-length estimate plan against the
# memory less the null block BlockPool holds back
VLLM_VERSIONS = ("0.19", "0.21", "0.32")
VLLM_VERSION = "0.19"  # the default: the release kvplan's start-up memory fit was made on

# SGLang: the releases whose server defaults kvplan models (docs/simulate.md states each one's):
# 0.4 (server_args.py ServerArgs.__post_init__ of the 0.4 releases): mem_fraction_static by TP
#     alone, chunked_prefill_size 2,048 below 25,000 MB of GPU memory else 8,192,
#     cuda_graph_max_bs 160 (below 25,000 MB: 8, or 80 from TP 4);
# 0.5 (main of April 2026): the memory-bucket heuristic of default_mem_fraction.
SGLANG_VERSIONS = ("0.4", "0.5")
SGLANG_VERSION = "0.5"  # the default
