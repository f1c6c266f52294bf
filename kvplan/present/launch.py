"""Launch commands for a plan, in each engine's own flags: `vllm serve`, SGLang's launch_server,
the same in a container (`docker run`), and a Kubernetes manifest for one replica.

One input, `Launch`, from whichever plan made it (`kvplan capacity`, `kvplan plan`), so every
command kvplan prints spells the engines' flags the same way.
"""

from __future__ import annotations

from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

VLLM_IMAGE = "vllm/vllm-openai:v0.19.0"  # the release whose rules kvplan models
SGLANG_IMAGE = "lmsysorg/sglang:latest"  # pin the tag you test with
VLLM_PORT, SGLANG_PORT = 8000, 30000
TARGETS = ("vllm", "sglang", "vllm-docker", "sglang-docker", "vllm-k8s", "sglang-k8s")


class Launch(NamedTuple):
    """What one replica runs with (the engine's names in comments)."""

    model_id: str  # the Hugging Face id engines load
    context_len: int  # max-model-len / context-length
    kv_dtype: str  # kvplan's name: auto, fp8, ...
    seats: int  # max-num-seqs / max-running-requests, per engine instance
    gpu_mem_util: float | None  # None: the engine's default
    tp: int = 1
    pp: int = 1
    dp_attention: int = 1
    block_size: int | None = None  # None: the engine's default
    max_num_batched_tokens: int | None = None  # None: the engine's default
    gpus: int = 1  # one replica
    nodes: int = 1
    replicas: int = 1


def vllm_args(p: Launch) -> list[str]:
    args = [
        f"--max-model-len {p.context_len}",
        f"--kv-cache-dtype {'fp8' if p.kv_dtype == 'fp8' else 'auto'}",
        f"--max-num-seqs {p.seats}",
    ]
    if p.gpu_mem_util is not None:
        args.append(f"--gpu-memory-utilization {p.gpu_mem_util}")
    if p.dp_attention > 1:
        args += [f"--data-parallel-size {p.dp_attention}", "--enable-expert-parallel"]
    else:
        args.append(f"--tensor-parallel-size {p.tp}")
    if p.pp > 1:
        args.append(f"--pipeline-parallel-size {p.pp}")
    if p.block_size is not None:
        args.append(f"--block-size {p.block_size}")
    if p.max_num_batched_tokens is not None:
        args.append(f"--max-num-batched-tokens {p.max_num_batched_tokens}")
    return args


def sglang_args(p: Launch) -> list[str]:
    args = [
        f"--context-length {p.context_len}",
        f"--kv-cache-dtype {'fp8_e4m3' if p.kv_dtype == 'fp8' else 'auto'}",
        f"--max-running-requests {p.seats}",
    ]
    if p.gpu_mem_util is not None:
        args.append(f"--mem-fraction-static {p.gpu_mem_util}")
    if p.dp_attention > 1:
        n = p.dp_attention
        args += [f"--tp-size {n}", f"--dp-size {n}", "--enable-dp-attention"]
    else:
        args.append(f"--tp-size {p.tp}")
    if p.pp > 1:
        args.append(f"--pp-size {p.pp}")
    if p.block_size is not None:
        args.append(f"--page-size {p.block_size}")
    if p.max_num_batched_tokens is not None:
        args.append(f"--chunked-prefill-size {p.max_num_batched_tokens}")
    return args


def command(p: Launch, engine: str) -> str:
    """The launch command, one flag per line."""
    if engine == "vllm":
        parts = [f"vllm serve {p.model_id}", *vllm_args(p)]
    elif engine == "sglang":
        parts = [f"python -m sglang.launch_server --model-path {p.model_id}", *sglang_args(p)]
    else:
        raise KvplanError(f"--emit {engine!r}: choose {', '.join(TARGETS)}")
    return " \\\n  ".join(parts) + "\n"


def one_line(p: Launch, engine: str) -> str:
    return " ".join(line.strip().rstrip("\\").strip() for line in command(p, engine).splitlines())


def docker(p: Launch, engine: str) -> str:
    """`docker run` for one replica on one node, the HF cache mounted, the token passed."""
    _single_node(p, "a docker run")
    head = [
        "docker run --rm --gpus all --ipc=host",
        "-v ~/.cache/huggingface:/root/.cache/huggingface",
        '-e HF_TOKEN="$HF_TOKEN"',
    ]
    if engine == "vllm":
        parts = head + [f"-p {VLLM_PORT}:{VLLM_PORT}", VLLM_IMAGE, f"--model {p.model_id}"]
        parts += vllm_args(p)
    else:
        parts = head + [
            f"-p {SGLANG_PORT}:{SGLANG_PORT}",
            SGLANG_IMAGE,
            f"python3 -m sglang.launch_server --model-path {p.model_id}",
            f"--host 0.0.0.0 --port {SGLANG_PORT}",
        ]
        parts += sglang_args(p)
    return " \\\n  ".join(parts) + "\n"


def kubernetes(p: Launch, engine: str, name: str) -> str:
    """A Deployment of `replicas` pods of one node each, and a Service in front of them."""
    _single_node(p, "a Kubernetes Deployment")
    app = _dns_name(name)
    if engine == "vllm":
        image, port = VLLM_IMAGE, VLLM_PORT
        args = [f"--model={p.model_id}", *(a.replace(" ", "=", 1) for a in vllm_args(p))]
        cmd = None
    else:
        image, port = SGLANG_IMAGE, SGLANG_PORT
        cmd = ["python3", "-m", "sglang.launch_server"]
        args = [f"--model-path={p.model_id}", "--host=0.0.0.0", f"--port={port}"]
        args += [a.replace(" ", "=", 1) for a in sglang_args(p)]
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
        "      volumes:",
        "        - name: shm  # NCCL and PyTorch workers share memory through /dev/shm",
        "          emptyDir: {medium: Memory, sizeLimit: 16Gi}",
        "        - name: hf-cache  # a PersistentVolumeClaim spares each pod the download",
        "          emptyDir: {}",
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


def emit(p: Launch, target: str, name: str) -> str:
    """--emit TARGET: the command, its container, or its manifest."""
    if target not in TARGETS:
        raise KvplanError(f"--emit {target[:40]!r}: choose {', '.join(TARGETS)}")
    engine, _, wrapper = target.partition("-")
    if wrapper == "docker":
        return docker(p, engine)
    if wrapper == "k8s":
        return kubernetes(p, engine, name)
    return command(p, engine)


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
    """A YAML scalar, quoted."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
