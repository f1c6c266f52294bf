"""Launch commands in each engine's own flags, their container and their Kubernetes manifest,
for the deployment the plan chose."""

from __future__ import annotations

import yaml

from kvplan.plans.launch import Launch, check_launch
from kvplan.present.launch import emit, one_line

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
    deployment, claim, service = list(yaml.safe_load_all(out))
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    assert claim["kind"] == "PersistentVolumeClaim"  # the weights survive a pod restart
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


# Seats per instance below come from `kvplan capacity llama-3.1-8b --kv-dtype D --format json`'s
# own planner; the checks here are that the emitted flags make the engine store what was sized.


def test_kv_dtype_is_spelled_in_the_engines_words_or_refused():
    code, out, err = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm", "--kv-dtype", "fp8")
    assert code == 0, err
    assert "--kv-cache-dtype fp8 " in out + " "
    code, out, err = run_cli("capacity", "llama-3.1-8b", "--emit", "sglang", "--kv-dtype", "fp8")
    assert code == 0 and "--kv-cache-dtype fp8_e4m3" in out, err
    pairs = (("vllm", "int4"), ("vllm", "q8_0"), ("vllm", "int8"), ("sglang", "int8"))
    for engine, dtype in pairs:
        code, out, err = run_cli("capacity", "llama-3.1-8b", "--emit", engine, "--kv-dtype", dtype)
        assert code == 2 and out == "", (engine, dtype, out)
        assert len(err.strip().splitlines()) == 1
        assert f"no {dtype} KV cache" in err and "fp8_e5m2" in err  # the engine's choices


def test_an_fp16_cache_on_a_bf16_model_is_refused_with_the_same_bytes_hint():
    for engine in ("vllm", "sglang"):
        code, _, err = run_cli("capacity", "llama-3.1-8b", "--emit", engine, "--kv-dtype", "fp16")
        assert code == 2 and "as many bytes as bf16" in err, err


def test_int8_kv_is_refused_for_mla_layers_in_vllm():
    code, _, err = run_cli(
        "capacity", "deepseek-v3", "--ctx", "32k", "--emit", "vllm", "--kv-dtype", "int8"
    )
    assert code == 2 and "no int8 KV cache" in err


def test_an_unchanged_model_dtype_kv_stays_auto():
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm", "--kv-dtype", "bf16")
    assert code == 0 and "--kv-cache-dtype auto" in out


def test_weights_dtype_becomes_online_fp8_or_an_error():
    for engine in ("vllm", "sglang"):
        code, out, err = run_cli(
            "capacity", "llama-3.1-8b", "--emit", engine, "--weights-dtype", "fp8"
        )
        assert code == 0 and "--quantization fp8" in out, err
        for dtype in ("int4", "nvfp4"):
            code, out, err = run_cli(
                "capacity", "llama-3.1-8b", "--emit", engine, "--weights-dtype", dtype
            )
            assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
            assert f"checkpoint stored as {dtype}" in err
    # the checkpoint's own format loads as it is: no flag
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm", "--weights-dtype", "bf16")
    assert code == 0 and "--quantization" not in out and "--dtype" not in out
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm", "--weights-dtype", "fp16")
    assert code == 0 and "--dtype float16" in out
    # DeepSeek-V3's checkpoint is fp8: no engine turns it into bf16 at load time
    code, _, err = run_cli(
        "capacity", "deepseek-v3", "--ctx", "32k", "--emit", "vllm", "--weights-dtype", "bf16"
    )
    assert code == 2 and "cannot turn fp8 weights into bf16" in err


def test_plain_and_docker_forms_say_how_many_replicas():
    for target in ("vllm", "sglang", "vllm-docker"):
        code, out, err = run_cli(
            "capacity", "llama-3.1-70b", "--ctx", "32k", "--users", "500", "--emit", target
        )
        assert code == 0, err
        # 13 replicas of TP 8 (the k8s test above derives it from kvplan capacity's answer)
        assert out.splitlines()[0] == (
            "# 13 replicas of this command (8 GPUs each), behind a load balancer"
        )
    code, out, _ = run_cli(
        "capacity", "llama-3.1-8b", "--num-gpus", "8", "--tp", "1", "--emit", "vllm"
    )
    assert code == 0 and out.startswith("# 8 replicas of this command (1 GPU each)")
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--emit", "vllm")
    assert code == 0 and out.startswith("vllm serve ")  # one replica: no comment


def _model_folder(tmp_path, name):
    from kvplan.inputs.sources import _bundled_dir

    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text((_bundled_dir() / "Llama-3.1-8B.json").read_text())
    return folder


def test_shell_forms_quote_a_hostile_model_path(tmp_path):
    import shlex

    folder = _model_folder(tmp_path, "we ird;$(touch PWNED)")
    for target, flag in (("vllm", "serve"), ("sglang", "--model-path")):
        code, out, err = run_cli("capacity", str(folder), "--emit", target)
        assert code == 0, err
        words = shlex.split(out.replace("\\\n", " "))
        assert words[words.index(flag) + 1] == str(folder)


def test_docker_mounts_a_local_model_folder_read_only(tmp_path):
    import shlex

    folder = _model_folder(tmp_path, "my model;$(id)")
    for target, flag in (("vllm-docker", "--model"), ("sglang-docker", "--model-path")):
        code, out, err = run_cli("capacity", str(folder), "--emit", target)
        assert code == 0, err
        words = shlex.split(out.replace("\\\n", " "))
        assert words[words.index(flag) + 1] == "/model"
        mounts = [words[i + 1] for i, w in enumerate(words) if w == "-v"]
        assert f"{folder}:/model:ro" in mounts


def test_container_forms_refuse_gpus_their_cuda_image_cannot_drive():
    for gpu in ("mi300x", "apple-m3-max-128gb"):
        for target in ("vllm-docker", "sglang-k8s"):
            code, out, err = run_cli("capacity", "llama-3.1-8b", "--gpu", gpu, "--emit", target)
            assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (gpu, target)
    code, _, err = run_cli("capacity", "llama-3.1-8b", "--gpu", "mi300x", "--emit", "vllm-docker")
    assert "ROCm" in err and "/dev/kfd" in err
    code, out, _ = run_cli("capacity", "llama-3.1-8b", "--gpu", "mi300x", "--emit", "vllm")
    assert code == 0 and out.startswith("vllm serve")  # the flags are the same under ROCm
    code, _, err = run_cli(
        "capacity", "llama-3.1-8b", "--gpu", "apple-m3-max-128gb", "--emit", "vllm"
    )
    assert code == 2 and "Apple" in err


def test_kv_spellings_are_the_engines_own():
    """Every --kv-cache-dtype an emit can print is one the engine's command line takes, by the
    engines' own lists: vLLM's CacheDType literal (vllm/config/cache.py; the values every
    release carries) and SGLang's --kv-cache-dtype choices (python/sglang/srt/server_args.py)."""
    from kvplan.plans.launch import KV_CACHE_DTYPE

    vllm_cli = {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}
    sglang_cli = {"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"}
    assert set(KV_CACHE_DTYPE["vllm"].values()) <= vllm_cli
    assert set(KV_CACHE_DTYPE["sglang"].values()) <= sglang_cli


def test_a_measured_profile_launches_as_the_device_it_measured():
    """A profile `kvplan measure --save-profile` wrote says vendor: measured; the device's own
    name decides whether the CUDA images can drive it."""
    from types import SimpleNamespace

    from kvplan.inputs.hardware import load_profile

    h100 = load_profile("h100")

    def measured(name, kind="cuda"):
        device = {"name": name, "kind": kind}
        return h100._replace(vendor="measured", measured=SimpleNamespace(device=device))

    assert measured("NVIDIA H100 80GB HBM3").device_vendor == "NVIDIA"
    assert measured("AMD Instinct MI300X").device_vendor == "AMD"
    assert measured("AMD EPYC 9654", kind="cpu").device_vendor == "measured"
    assert measured("Intel Xeon").device_vendor == "measured"
    assert h100.device_vendor == "NVIDIA"


def test_a_split_gguf_is_not_handed_to_vllm():
    import pytest

    from kvplan.errors import KvplanError
    from kvplan.present.launch import command

    split = Launch("./m/Model-00001-of-00002.gguf", 8192, "auto", 4, None, model_is_local=True)
    for target in ("vllm", "vllm-docker"):
        with pytest.raises(KvplanError, match="llama-gguf-split --merge"):
            check_launch(split, target)
    merged = check_launch(split._replace(model_id="./m/model.gguf"), "vllm")
    assert "vllm serve ./m/model.gguf" in command(merged, "vllm")
    assert check_launch(split, "sglang") == split  # SGLang takes the first part
