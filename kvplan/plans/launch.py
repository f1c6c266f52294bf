"""Whether an engine can run a plan as planned: the launch of one replica (`Launch`, from
whichever plan made it: `kvplan capacity`, `kvplan plan`), the engine's KV and weights settings
for it, and every refusal (a KV or weights format the engine's command line lacks, a GPU its image
does not drive, a replica across nodes in a container, a split GGUF for vLLM, a context past the
length the engine derives from the config). A plan the engine cannot run as planned is an error,
never a command that would hold fewer sequences than the plan says; kvplan.present.launch spells
what passes in each engine's flags."""

from __future__ import annotations

import os

from kvplan.engines import sglang as sglang_engine
from kvplan.engines import vllm as vllm_engine
from kvplan.engines.backends import ENGINE_NAMES
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

TARGETS = ("vllm", "sglang", "vllm-docker", "sglang-docker", "vllm-k8s", "sglang-k8s")

# KV dtype (kvplan's name, or an engine spelling `kvplan plan` passes on) -> --kv-cache-dtype,
# only where the engine's command line takes it (CLI_KV_CACHE_DTYPES)
KV_CACHE_DTYPE = {
    "vllm": {
        "auto": "auto",
        "bf16": "bfloat16",
        "fp8": "fp8",
        **{name: name for name in vllm_engine.CLI_KV_CACHE_DTYPES},
    },
    "sglang": {
        "auto": "auto",
        "bf16": "bfloat16",
        "fp8": "fp8_e4m3",
        **{name: name for name in sglang_engine.CLI_KV_CACHE_DTYPES},
    },
}
# Weights formats both engines make at load time from a bf16/fp16 checkpoint (--quantization):
# fp8 with dynamic per-tensor scales (vLLM Fp8Config, SGLang W8A8Fp8Config when not serialized).
ONLINE_QUANTIZATION = {"fp8": "fp8", "fp8-tensor": "fp8"}
PLAIN_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # --dtype


class Launch(NamedTuple):
    """What one replica runs with (the engine's names in comments)."""

    model_id: str  # the Hugging Face id engines load, or a local folder (see model_is_local)
    context_len: int  # max-model-len / context-length
    kv_dtype: str  # kvplan's name: auto (the model's dtype), fp8, ...
    seats: int  # sequences one scheduler runs: a replica's, or one DP-attention rank's
    gpu_mem_util: float | None  # None: the engine's default
    tp: int = 1
    pp: int = 1
    dp_attention: int = 1
    block_size: int | None = None  # None: the engine's default
    max_num_batched_tokens: int | None = None  # None: the engine's default
    gpus: int = 1  # one replica
    nodes: int = 1
    replicas: int = 1
    weights_dtype: str = "auto"  # kvplan's name; auto: as the checkpoint stores them
    checkpoint_weights: str = "bf16"  # how the checkpoint stores them (kvplan's name)
    model_is_local: bool = False  # model_id is a path on this machine
    vendor: str = "NVIDIA"  # the GPU's
    mla: bool = False  # the model has MLA latent layers
    # context_len is past the length the engine derives from the config: the command sets the
    # engine's override (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLANG_ALLOW_OVERWRITE_LONGER_...=1)
    long_context: bool = False
    gpu_products: tuple[str, ...] = ()  # the names the driver reports for the GPU planned
    checkpoint_bytes: int = 0  # the weights on disk (sizes the model-cache volume)
    # speculative decoding: the engine's flags and values (kvplan.simulate.speculative's
    # launch_flags), each value one shell word
    speculative: tuple[str, ...] = ()


def launch_kv_dtype(plan_kv_dtype: str, spec) -> str:
    """The KV dtype a launch of a plan passes (kvplan's name): "auto" where the plan's format is
    the model's dtype and the checkpoint states no KV cache of its own, else the plan's format
    spelled out, since --kv-cache-dtype auto takes the cache a ModelOpt checkpoint states
    (ModelSpec.checkpoint_kv_cache: vLLM 0.14+ resolve_kv_cache_dtype_string, SGLang
    configure_kv_cache_dtype) and the server would then not hold the plan's cache."""
    if plan_kv_dtype == spec.dtype and spec.checkpoint_kv_cache is None:
        return "auto"
    return plan_kv_dtype


def kv_cache_dtype(p: Launch, engine: str) -> str:
    """The engine's --kv-cache-dtype for the plan's KV dtype; an error where it has none."""
    found = KV_CACHE_DTYPE[engine].get(p.kv_dtype)
    if found is None:
        choices = (vllm_engine if engine == "vllm" else sglang_engine).CLI_KV_CACHE_DTYPES
        same_bytes = " (fp16 stores as many bytes as bf16)" if p.kv_dtype == "fp16" else ""
        raise KvplanError(
            f"{ENGINE_NAMES[engine]}'s command line has no {p.kv_dtype[:40]} KV cache (its "
            f"--kv-cache-dtype takes {', '.join(choices)}): plan with --kv-dtype auto, bf16 or "
            f"fp8{same_bytes}"
        )
    return found


def weights_setting(p: Launch, engine: str) -> tuple[str, str] | None:
    """("dtype" | "quantization", the engine's value) so the engine loads the weights the plan
    sized (None: as the checkpoint stores them); an error for a format the engine cannot make at
    load time (the checkpoint must already store it)."""
    wanted = p.weights_dtype
    if wanted in ("auto", "checkpoint", p.checkpoint_weights):
        return None
    plain = p.checkpoint_weights in PLAIN_DTYPE
    if plain and wanted in PLAIN_DTYPE:
        return "dtype", PLAIN_DTYPE[wanted]
    if plain and wanted in ONLINE_QUANTIZATION:
        return "quantization", ONLINE_QUANTIZATION[wanted]
    raise KvplanError(
        f"{ENGINE_NAMES[engine]} cannot turn {p.checkpoint_weights} weights into {wanted[:40]} "
        f"when it loads them: name a checkpoint stored as {wanted[:40]} as the model "
        "(its own quantization_config is then used), or plan with --weights-dtype auto"
    )


def mount_source(p: Launch) -> tuple[str, str]:
    """(the host folder a container mounts for a local model, the GGUF file in it or "")."""
    host = os.path.abspath(os.path.expanduser(p.model_id))
    if host.lower().endswith(".gguf"):
        return os.path.split(host)
    return host, ""


def check_launch(p: Launch, target: str, spec=None, allow_long: bool = False) -> Launch:
    """The launch `target` (TARGETS) can run, or a KvplanError saying why not. With the model's
    `spec`, a context past the length the engine derives from its config is refused as the
    engine refuses it, or (`allow_long`) launched with the engine's override variable set."""
    if target not in TARGETS:
        raise KvplanError(f"--emit {target[:40]!r}: choose {', '.join(TARGETS)}")
    engine, _, wrapper = target.partition("-")
    if spec is not None:
        from kvplan.engines.max_len import check_max_model_len
        from kvplan.engines.moe_backend import check_expert_split

        if p.dp_attention <= 1:  # --tp alone splits each expert over the TP ranks
            given = p.weights_dtype not in ("auto", "checkpoint", p.checkpoint_weights)
            check_expert_split(spec, given, p.tp)

        long = check_max_model_len(spec, engine, p.context_len, allow_long, flag="--ctx")
        p = p._replace(long_context=long is not None)
    if p.vendor == "Apple":
        raise KvplanError(
            f"{ENGINE_NAMES[engine]} does not run on Apple GPUs: size llama.cpp or Ollama with "
            "kvplan engine llamacpp / ollama"
        )
    if wrapper == "k8s":
        _single_node(p, "a Kubernetes Deployment")
        _cuda_image(p, engine, "a Deployment asking for nvidia.com/gpu")
        if p.model_is_local:
            raise KvplanError(
                "the model is a folder on this machine: a Kubernetes Deployment needs it in a "
                "volume or a Hugging Face id (name the model by its repository id)"
            )
    elif wrapper == "docker":
        _single_node(p, "a docker run")
        _cuda_image(p, engine, "docker run --gpus all")
        _single_file_gguf(p, engine)
        host = mount_source(p)[0]
        if p.model_is_local and ":" in host:
            raise KvplanError(f"docker run -v cannot mount a path with a colon: {host[:200]!r}")
    else:
        _single_file_gguf(p, engine)
    kv_cache_dtype(p, engine)
    weights_setting(p, engine)
    return p


def _single_file_gguf(p: Launch, engine: str) -> None:
    """vLLM loads a GGUF model from one file only."""
    name = os.path.basename(p.model_id).lower()
    stem, _, count = name.removesuffix(".gguf").rpartition("-of-")
    if engine == "vllm" and name.endswith(".gguf") and count.isdigit() and stem[-5:].isdigit():
        raise KvplanError(
            f"{os.path.basename(p.model_id)[:80]} is one part of a split GGUF and vLLM loads a "
            "single file: merge the parts first (llama-gguf-split --merge) and name the merged file"
        )


def _cuda_image(p: Launch, engine: str, what: str) -> None:
    """The images kvplan names are CUDA builds: only NVIDIA GPUs run them."""
    if p.vendor != "NVIDIA":
        raise KvplanError(
            f"{what} with the CUDA image of {ENGINE_NAMES[engine]} does not drive {p.vendor} GPUs: "
            f"--emit {engine} prints the flags (on AMD, run them in the engine's ROCm image with "
            "--device /dev/kfd --device /dev/dri)"
        )


def _single_node(p: Launch, what: str) -> None:
    if p.nodes > 1:
        raise KvplanError(
            f"one replica spans {p.nodes} nodes: {what} runs on one node (multi-node serving "
            "needs a Ray cluster or the engine's multi-node launcher); --emit vllm or sglang "
            "prints the flags"
        )
