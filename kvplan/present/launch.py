"""Launch commands for a plan, in each engine's own flags: `vllm serve`, SGLang's launch_server,
the same in a container (`docker run`), and a Kubernetes manifest for one replica.

One input, `Launch`, from whichever plan made it (`kvplan capacity`, `kvplan plan`), so every
command kvplan prints spells the engines' flags the same way. What an engine or a GPU can run is
decided in kvplan.plans.launch (`check_launch`, before anything is printed); this module spells
a launch that passed it.
"""

from __future__ import annotations

from kvplan.engines.releases import VLLM_VERSION
from kvplan.plans.launch import Launch, kv_cache_dtype, mount_source, weights_setting
from kvplan.present.escape import shell_word, yaml_string

VLLM_REPOSITORY = "vllm/vllm-openai"  # vLLM's image, tagged v + the release (v0.8.5)
VLLM_IMAGE = f"{VLLM_REPOSITORY}:v{VLLM_VERSION}.0"  # the release kvplan models by default
SGLANG_IMAGE = "lmsysorg/sglang:latest"  # pin the tag you test with


def vllm_image(version: str) -> str:
    """The vLLM image of the release `version` names (--engine-version): a patch as given
    (0.6.3 -> v0.6.3, 0.6.6.post1 -> v0.6.6.post1); a minor alone the patch whose rules kvplan
    runs for it (V0's last: 0.6 -> v0.6.6, 0.7 -> v0.7.3; 0.8 -> v0.8.5), else its first
    (0.21 -> v0.21.0). A release candidate or dev build (0.8.4rc1) is refused, one line:
    vllm/vllm-openai is tagged for releases only (vllm-project/vllm#20483: no image of
    v0.9.2rc1), and its release's image (v0.8.4) is another build."""
    import re

    from kvplan.engines.releases import prerelease, release_key, release_parts
    from kvplan.engines.vllm_v0 import LAST_PATCH, V08_LAST_PATCH
    from kvplan.errors import KvplanError

    parts, key = release_parts(version), release_key(version)
    if parts is None or key is None:
        raise ValueError(f"not a vLLM release: {version[:20]!r}")
    major, minor, patch = parts
    if prerelease(version):
        raise KvplanError(
            f"vLLM {str(version)[:20]} is a pre-release: {VLLM_REPOSITORY} publishes no image "
            f"of it (its tags name releases, v{major}.{minor}.{patch}); give --engine-version "
            f"{major}.{minor}.{patch} or build the image yourself"
        )
    post = re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?", str(version))
    if post is not None:
        return f"{VLLM_REPOSITORY}:v{version}"
    if patch is None:
        patch = LAST_PATCH.get((major, minor), V08_LAST_PATCH if (major, minor) == (0, 8) else 0)
    return f"{VLLM_REPOSITORY}:v{major}.{minor}.{patch}"


VLLM_PORT, SGLANG_PORT = 8000, 30000
CONTAINER_MODEL_DIR = "/model"  # where a local model folder is mounted in the container


def _override(p: Launch, engine: str) -> str | None:
    """The engine's variable that lets a context past the config's derived length start."""
    from kvplan.engines.max_len import OVERRIDE

    return OVERRIDE[engine][2].partition("=")[0] if p.long_context else None


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


def weights_args(p: Launch, engine: str) -> list[str]:
    """--dtype or --quantization so the engine loads the weights the plan sized."""
    setting = weights_setting(p, engine)
    return [] if setting is None else [f"--{setting[0]} {setting[1]}"]


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


def command(p: Launch, engine: str) -> str:
    """The launch command, one flag per line, every value quoted for the shell."""
    model = shell_word(p.model_id)
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
        host, file = mount_source(p)
        model = f"{CONTAINER_MODEL_DIR}/{file}" if file else CONTAINER_MODEL_DIR
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


def emit(p: Launch, target: str, name: str) -> str:
    """--emit TARGET: the command, its container, or its manifest, for a launch that passed
    kvplan.plans.launch.check_launch for that target."""
    engine, _, wrapper = target.partition("-")
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


def _dns_name(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return (out or "kvplan")[:53].rstrip("-")


def _q(text: str) -> str:
    """A YAML scalar, quoted (control characters as escapes)."""
    return yaml_string(text)
