"""Launch commands in each engine's own flags, their container and their Kubernetes manifest,
for the deployment the plan chose."""

from __future__ import annotations

import yaml

from kvplan.present.launch import Launch, emit, one_line

from helpers import run_cli


def test_vllm_command_names_the_hf_id_and_the_plan():
    code, out, err = run_cli("capacity", "llama-3.1-70b", "--ctx", "32k", "--emit", "vllm")
    assert code == 0, err
    assert out.startswith("vllm serve meta-llama/Llama-3.1-70B \\")
    for flag in ("--max-model-len 32768", "--tensor-parallel-size 4", "--kv-cache-dtype auto",
                 "--gpu-memory-utilization 0.9"):  # fmt: skip
        assert flag in out


def test_kubernetes_manifest_is_valid_yaml_with_the_replicas_and_gpus():
    code, out, err = run_cli(
        "capacity", "llama-3.1-70b", "--ctx", "32k", "--users", "500", "--emit", "vllm-k8s"
    )
    assert code == 0, err
    deployment, service = list(yaml.safe_load_all(out))
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    spec = deployment["spec"]
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "--tensor-parallel-size=8" in container["args"]
    assert "--model=meta-llama/Llama-3.1-70B" in container["args"]
    # 13 replicas of TP 8 hold the 500 sequences (kvplan capacity's own answer)
    cap = run_cli("capacity", "llama-3.1-70b", "--ctx", "32k", "--tp", "8", "--format", "json")
    import json

    per_replica = json.loads(cap[1])["max_concurrency"]
    assert spec["replicas"] == -(-500 // per_replica) == 13
    assert service["spec"]["ports"][0]["port"] == 8000


def test_sglang_in_docker_and_dp_attention_flags():
    p = Launch("deepseek-ai/DeepSeek-V3", 32768, "fp8", 5, 0.85, dp_attention=8, gpus=8)
    out = emit(p, "sglang-docker", "deepseek-v3")
    assert "lmsysorg/sglang" in out and "--enable-dp-attention" in out
    assert "--tp-size 8" in out and "--dp-size 8" in out and "--kv-cache-dtype fp8_e4m3" in out
    vllm = one_line(p, "vllm")
    assert "--data-parallel-size 8 --enable-expert-parallel" in vllm
    assert "--tensor-parallel-size" not in vllm


def test_a_replica_across_nodes_gets_flags_not_a_container():
    code, _, err = run_cli("capacity", "deepseek-v3", "--ctx", "32k", "--emit", "vllm-docker")
    assert code == 2 and "spans 2 nodes" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli("capacity", "deepseek-v3", "--ctx", "32k", "--emit", "vllm")
    assert code == 0 and "--data-parallel-size 16" in out


def test_unknown_target_is_a_one_line_error():
    code, _, err = run_cli("capacity", "llama-3.1-8b", "--emit", "podman")
    assert code == 2 and "choose vllm, sglang" in err
