"""Launch commands for a plan, in each engine's own flags: `vllm serve`, SGLang's launch_server,
the same in a container (`docker run`), and a Kubernetes manifest for one replica.

One input, `Launch`, from whichever plan made it (`kvplan capacity`, `kvplan plan`), so every
command kvplan prints spells the engines' flags the same way. A plan the engine cannot run as
planned (a KV or weights format it lacks, a GPU its image does not drive) is an error, never a
command that would hold fewer sequences than the plan says.
"""

from __future__ import annotations

import os

from kvplan.engines import sglang as sglang_engine
from kvplan.engines import vllm as vllm_engine
from kvplan.errors import KvplanError
from kvplan.present.escape import shell_word, yaml_string
from kvplan.record import NamedTuple

VLLM_IMAGE = "vllm/vllm-openai:v0.19.0"  # the release whose rules kvplan models
SGLANG_IMAGE = "lmsysorg/sglang:latest"  # pin the tag you test with
VLLM_PORT, SGLANG_PORT = 8000, 30000
TARGETS = ("vllm", "sglang", "vllm-docker", "sglang-docker", "vllm-k8s", "sglang-k8s")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
CONTAINER_MODEL_DIR = "/model"  # where a local model folder is mounted in the container

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


def _override(p: Launch, engine: str) -> str | None:
    """The engine's variable that lets a context past the config's derived length start."""
    from kvplan.engines.max_len import OVERRIDE

    return OVERRIDE[engine][2].partition("=")[0] if p.long_context else None


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


def weights_args(p: Launch, engine: str) -> list[str]:
    """--quantization or --dtype so the engine loads the weights the plan sized; an error for a
    format the engine cannot make at load time (the checkpoint must already store it)."""
    wanted = p.weights_dtype
    if wanted in ("auto", "checkpoint", p.checkpoint_weights):
        return []
    plain = p.checkpoint_weights in PLAIN_DTYPE
    if plain and wanted in PLAIN_DTYPE:
        return [f"--dtype {PLAIN_DTYPE[wanted]}"]
    if plain and wanted in ONLINE_QUANTIZATION:
        return [f"--quantization {ONLINE_QUANTIZATION[wanted]}"]
    raise KvplanError(
        f"{ENGINE_NAMES[engine]} cannot turn {p.checkpoint_weights} weights into {wanted[:40]} "
        f"when it loads them: name a checkpoint stored as {wanted[:40]} as the model "
        "(its own quantization_config is then used), or plan with --weights-dtype auto"
    )


# Each engine's spelling of the same settings
FLAGS = {
    "vllm": {
        "context": "--max-model-len",
        "seats": "--max-num-seqs",
        "memory": "--gpu-memory-utilization",
        "tp": "--tensor-parallel-size",
        "pp": "--pipeline-parallel-size",
        "block": "--block-size",
        "tokens": "--max-num-batched-tokens",
    },
    "sglang": {
        "context": "--context-length",
        "seats": "--max-running-requests",
        "memory": "--mem-fraction-static",
        "tp": "--tp-size",
        "pp": "--pp-size",
        "block": "--page-size",
        "tokens": "--chunked-prefill-size",
    },
}


def seats_flag(p: Launch, engine: str) -> int:
    """The value of --max-num-seqs / --max-running-requests that runs `p.seats` per scheduler.
    vLLM's -dp N starts one engine core per rank, each with its own scheduler and the whole
    --max-num-seqs (v1/engine/core_client.py). SGLang divides --max-running-requests among the
    DP-attention ranks: max_running_requests // (dp_size if enable_dp_attention else 1)
    (srt/managers/tp_worker.py, model_runner.py in newer releases), so it gets ranks x seats."""
    if engine == "sglang" and p.dp_attention > 1:
        return p.seats * p.dp_attention
    return p.seats


def engine_args(p: Launch, engine: str) -> list[str]:
    """The flags of one replica in `engine`'s spelling."""
    flag = FLAGS[engine]
    args = [
        f"{flag['context']} {p.context_len}",
        f"--kv-cache-dtype {kv_cache_dtype(p, engine)}",
        f"{flag['seats']} {seats_flag(p, engine)}",
        *weights_args(p, engine),
    ]
    if p.gpu_mem_util is not None:
        args.append(f"{flag['memory']} {p.gpu_mem_util}")
    if p.dp_attention <= 1:
        args.append(f"{flag['tp']} {p.tp}")
    elif engine == "vllm":
        args += [f"--data-parallel-size {p.dp_attention}", "--enable-expert-parallel"]
    else:
        n = p.dp_attention
        args += [f"--tp-size {n}", f"--dp-size {n}", "--enable-dp-attention"]
    optional: tuple[tuple[str, int | None], ...]
    optional = (("pp", p.pp if p.pp > 1 else None), ("block", p.block_size))
    optional += (("tokens", p.max_num_batched_tokens),)
    args += [f"{flag[key]} {value}" for key, value in optional if value is not None]
    spec = p.speculative
    args += [f"{spec[i]} {shell_word(spec[i + 1])}" for i in range(0, len(spec), 2)]
    return args


def _single_file_gguf(p: Launch, engine: str) -> None:
    """vLLM loads a GGUF model from one file only."""
    name = os.path.basename(p.model_id).lower()
    stem, _, count = name.removesuffix(".gguf").rpartition("-of-")
    if engine == "vllm" and name.endswith(".gguf") and count.isdigit() and stem[-5:].isdigit():
        raise KvplanError(
            f"{os.path.basename(p.model_id)[:80]} is one part of a split GGUF and vLLM loads a "
            "single file: merge the parts first (llama-gguf-split --merge) and name the merged file"
        )


def command(p: Launch, engine: str) -> str:
    """The launch command, one flag per line, every value quoted for the shell."""
    _single_file_gguf(p, engine)
    model = shell_word(p.model_id)
    if engine not in FLAGS:
        raise KvplanError(f"--emit {engine!r}: choose {', '.join(TARGETS)}")
    serve = "vllm serve" if engine == "vllm" else "python -m sglang.launch_server --model-path"
    variable = _override(p, engine)
    if variable:
        serve = f"{variable}=1 {serve}"
    parts = [f"{serve} {model}", *engine_args(p, engine)]
    return " \\\n  ".join(parts) + "\n"


def one_line(p: Launch, engine: str) -> str:
    return " ".join(line.strip().rstrip("\\").strip() for line in command(p, engine).splitlines())


def docker(p: Launch, engine: str) -> str:
    """`docker run` for one replica on one node, the HF cache (or the local model folder, read
    only) mounted, the token passed."""
    _single_node(p, "a docker run")
    _cuda_image(p, engine, "docker run --gpus all")
    _single_file_gguf(p, engine)
    head = [
        "docker run --rm --gpus all --ipc=host",
        "-v ~/.cache/huggingface:/root/.cache/huggingface",
        '-e HF_TOKEN="$HF_TOKEN"',
    ]
    variable = _override(p, engine)
    if variable:
        head.append(f"-e {variable}=1")
    model = p.model_id
    if p.model_is_local:  # a folder, or a GGUF file (its folder mounted)
        host = os.path.abspath(os.path.expanduser(p.model_id))
        model = CONTAINER_MODEL_DIR
        if host.lower().endswith(".gguf"):
            host, file = os.path.split(host)
            model = f"{CONTAINER_MODEL_DIR}/{file}"
        if ":" in host:
            raise KvplanError(f"docker run -v cannot mount a path with a colon: {host[:200]!r}")
        head.append(f"-v {shell_word(f'{host}:{CONTAINER_MODEL_DIR}:ro')}")
    model = shell_word(model)
    if engine == "vllm":
        parts = head + [f"-p {VLLM_PORT}:{VLLM_PORT}", VLLM_IMAGE, f"--model {model}"]
    else:
        parts = head + [
            f"-p {SGLANG_PORT}:{SGLANG_PORT}",
            SGLANG_IMAGE,
            f"python3 -m sglang.launch_server --model-path {model}",
            f"--host 0.0.0.0 --port {SGLANG_PORT}",
        ]
    parts += engine_args(p, engine)
    return " \\\n  ".join(parts) + "\n"


def kubernetes(p: Launch, engine: str, name: str) -> str:
    """A Deployment of `replicas` pods of one node each, and a Service in front of them."""
    _single_node(p, "a Kubernetes Deployment")
    _cuda_image(p, engine, "a Deployment asking for nvidia.com/gpu")
    if p.model_is_local:
        raise KvplanError(
            "the model is a folder on this machine: a Kubernetes Deployment needs it in a volume "
            "or a Hugging Face id (name the model by its repository id)"
        )
    app = _dns_name(name)
    if engine == "vllm":
        image, port = VLLM_IMAGE, VLLM_PORT
        args = [f"--model={p.model_id}"]
        cmd = None
    else:
        image, port = SGLANG_IMAGE, SGLANG_PORT
        cmd = ["python3", "-m", "sglang.launch_server"]
        args = [f"--model-path={p.model_id}", "--host=0.0.0.0", f"--port={port}"]
    args += [a.replace(" ", "=", 1) for a in engine_args(p, engine)]
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {app}",
        "spec:",
        f"  replicas: {p.replicas}",
        "  selector:",
        f"    matchLabels: {{app: {app}}}",
        "  template:",
        "    metadata:",
        f"      labels: {{app: {app}}}",
        "    spec:",
        "      containers:",
        f"        - name: {engine}",
        f"          image: {image}",
    ]
    if cmd:
        lines.append(f"          command: [{', '.join(_q(c) for c in cmd)}]")
    lines.append("          args:")
    lines += [f"            - {_q(a)}" for a in args]
    lines += [
        "          env:",
        "            - name: HF_TOKEN",
        "              valueFrom: {secretKeyRef: {name: hf-token, key: token}}",
        *(
            [f'            - {{name: {_override(p, engine)}, value: "1"}}']
            if p.long_context
            else []
        ),
        f"          ports: [{{containerPort: {port}}}]",
        "          resources:",
        f"            limits: {{nvidia.com/gpu: {p.gpus}}}",
        "          readinessProbe:",
        f"            httpGet: {{path: /health, port: {port}}}",
        "            periodSeconds: 10",
        "            failureThreshold: 60  # loading the weights takes minutes",
        "          volumeMounts:",
        "            - {name: shm, mountPath: /dev/shm}",
        "            - {name: hf-cache, mountPath: /root/.cache/huggingface}",
        *_node_selection(p),
        "      volumes:",
        "        - name: shm  # NCCL and PyTorch workers share memory through /dev/shm",
        "          emptyDir: {medium: Memory, sizeLimit: 16Gi}",
        "        - name: hf-cache  # the weights, downloaded once and kept across pod restarts",
        f"          persistentVolumeClaim: {{claimName: {app}-hf-cache}}",
        "---",
        "apiVersion: v1",
        "kind: PersistentVolumeClaim",
        "metadata:",
        f"  name: {app}-hf-cache",
        "spec:",
        "  # every replica reads the same weights: ReadWriteMany needs a storage class that offers",
        "  # it (NFS, EFS, Filestore, CephFS); with ReadWriteOnce give each replica its own claim",
        "  accessModes: [ReadWriteMany]",
        f"  resources: {{requests: {{storage: {_cache_gi(p)}Gi}}}}",
        "---",
        "apiVersion: v1",
        "kind: Service",
        "metadata:",
        f"  name: {app}",
        "spec:",
        f"  selector: {{app: {app}}}",
        f"  ports: [{{port: {port}, targetPort: {port}}}]",
    ]
    return "\n".join(lines) + "\n"


def _node_selection(p: Launch) -> list[str]:
    """Pods go to nodes with the GPU planned: the nvidia.com/gpu.product label NVIDIA's GPU
    Feature Discovery sets (the driver's product name, spaces as dashes)."""
    labels = [name.strip().replace(" ", "-") for name in p.gpu_products if name.strip()]
    if not labels:
        return ["      # add a nodeSelector for the GPU planned (nvidia.com/gpu.product)"]
    if len(labels) == 1:
        return [
            "      nodeSelector:  # GPU Feature Discovery's label of the GPU planned",
            f"        nvidia.com/gpu.product: {_q(labels[0])}",
        ]
    return [
        "      affinity:  # GPU Feature Discovery's labels of the GPU planned",
        "        nodeAffinity:",
        "          requiredDuringSchedulingIgnoredDuringExecution:",
        "            nodeSelectorTerms:",
        "              - matchExpressions:",
        "                  - key: nvidia.com/gpu.product",
        "                    operator: In",
        f"                    values: [{', '.join(_q(label) for label in labels)}]",
    ]


def _cache_gi(p: Launch) -> int:
    """The model-cache claim: the checkpoint and a quarter more (tokenizer, a second revision)."""
    return max(10, -(-int(p.checkpoint_bytes * 1.25) // 2**30))


def emit(p: Launch, target: str, name: str, spec=None, allow_long: bool = False) -> str:
    """--emit TARGET: the command, its container, or its manifest. With the model's `spec`, a
    context past the length the engine derives from its config is refused as the engine
    refuses it, or (`allow_long`) launched with the engine's override variable set."""
    if target not in TARGETS:
        raise KvplanError(f"--emit {target[:40]!r}: choose {', '.join(TARGETS)}")
    engine, _, wrapper = target.partition("-")
    if spec is not None:
        from kvplan.engines.max_len import check_max_model_len

        long = check_max_model_len(spec, engine, p.context_len, allow_long, flag="--ctx")
        p = p._replace(long_context=long is not None)
    if p.vendor == "Apple":
        raise KvplanError(
            f"{ENGINE_NAMES[engine]} does not run on Apple GPUs: size llama.cpp or Ollama with "
            "kvplan engine llamacpp / ollama"
        )
    if wrapper == "k8s":
        return kubernetes(p, engine, name)
    text = docker(p, engine) if wrapper == "docker" else command(p, engine)
    return _replicas_comment(p) + text


def _replicas_comment(p: Launch) -> str:
    """The plain and docker forms launch one replica; say how many the plan needs."""
    if p.replicas <= 1:
        return ""
    each = f"{p.gpus} GPU{'s' if p.gpus != 1 else ''} each" + (
        f" across {p.nodes} nodes" if p.nodes > 1 else ""
    )
    return f"# {p.replicas} replicas of this command ({each}), behind a load balancer\n"


def _cuda_image(p: Launch, engine: str, what: str) -> None:
    """The images named here are CUDA builds: only NVIDIA GPUs run them."""
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


def _dns_name(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return (out or "kvplan")[:53].rstrip("-")


def _q(text: str) -> str:
    """A YAML scalar, quoted (control characters as escapes)."""
    return yaml_string(text)
