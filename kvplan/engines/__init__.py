"""Engine allocators: predict what vLLM, SGLang and llama.cpp allocate and log, from the config
(or GGUF) alone. The request and the shared refusals live in kvplan.engines.request, which each
engine's module imports; this package's `engine_allocation` picks the module."""

from __future__ import annotations

from kvplan.engines.releases import VLLM_VERSIONS, release_minor
from kvplan.engines.request import ENGINES, EngineRequest
from kvplan.errors import KvplanError

__all__ = ["ENGINES", "EngineRequest", "engine_allocation"]


def engine_allocation(spec, gpu, request: EngineRequest):
    """The Python twin of `kvplan engine MODEL --engine vllm|sglang|llama.cpp|ollama`: a typed
    result."""
    from kvplan.engines.backends import check_backends

    if request.engine not in ENGINES:
        raise KvplanError(f"unknown engine {request.engine!r}; choose from {', '.join(ENGINES)}")
    if request.engine == "vllm" and release_minor(request.vllm_version) not in {
        release_minor(v) for v in VLLM_VERSIONS
    }:
        # `kvplan engine` answers for the release lines whose allocators kvplan models (0.21 and
        # its patch releases, 0.21.0, 0.21.1: one allocator); simulate runs any release on its
        # nearest (EngineRequest.vllm_allocator)
        raise KvplanError(
            f"--vllm-version {request.vllm_version[:20]!r}: kvplan models {', '.join(VLLM_VERSIONS)}"
            " (and their patch releases)"
        )
    version = request.sglang_version if request.engine == "sglang" else request.vllm_allocator
    check_backends(request.backends, request.engine, version)
    if request.engine == "vllm":
        from kvplan.engines.vllm import vllm_allocation

        return vllm_allocation(spec, gpu, request)
    if request.engine == "sglang":
        from kvplan.engines.sglang import sglang_allocation, sglang_compressed_allocation

        if any(a.compress_ratio for a in spec.attention_layers()):  # DeepSeek-V4
            return sglang_compressed_allocation(spec, gpu, request)
        return sglang_allocation(spec, gpu, request)
    if request.engine == "llama.cpp":
        from kvplan.engines.llamacpp import LlamaCppRequest, llamacpp_allocation

        return llamacpp_allocation(spec, gpu, request.llamacpp or LlamaCppRequest())
    from kvplan.engines.ollama import OllamaRequest, ollama_allocation

    return ollama_allocation(spec, gpu, request.ollama or OllamaRequest())
