"""Hostile inputs, tenth round.
1. Work-size caps: `simulate --num-prompts 100000 --turns 1000` searched 58 G prompt tokens
through the prefix cache (hours, GBs), 32 rates x 100,000 prompts ran 3.2 M requests, plan 5,000
configurations x 100,000 prompts, and 5,000 prompts x 16k outputs coming and going ran past
300 s; each is refused before any run.
2. llama.cpp's --device took any word (`bogus` labelled the log's buffers), a backend that cannot
drive the GPU (ROCm0 on an H100) and a device list.
3. `--gpu local` asks NVML before importing torch (~20 s), and keeps torch's exact total where
NVML's matches no profile.
4. config.json: a 400-digit field filled its error line; a quantization_config that is a string
or an array (vLLM's load fails on it) was ignored without a note.
5. plan searched a value or a GPU given twice twice, and listed the copies as configurations.
6. `engine --dcp 999...9` (400 digits): OverflowError, an internal error, in check_range."""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import pytest

from kvplan.units import MIB

from helpers import one_line_error, run_cli

MODELS = Path(__file__).resolve().parents[1] / "model_configs"

# ---- 1. work-size caps ---------------------------------------------------------------------
SIM = ("simulate", "qwen3-8b", "--gpu", "h100")


def test_a_million_turn_conversation_workload_is_refused_before_it_runs():
    start = time.monotonic()
    code, out, err = run_cli(*SIM, "--num-prompts", "100000", "--turns", "1000")
    one_line_error(code, err, "at most 50,000,000")
    assert out == "" and "57,644,800,000 tokens" in err
    assert time.monotonic() - start < 30  # refused from the requests, no run started


def test_a_shared_prefix_over_many_prompts_counts_toward_the_same_cap():
    code, _, err = run_cli(*SIM, "--num-prompts", "100000", "--prefix-len", "2k")
    one_line_error(code, err, "204,800,000 tokens of shared prefixes")


def test_a_rate_sweep_counts_every_run_toward_the_request_cap():
    code, _, err = run_cli(*SIM, "--num-prompts", "100000", "--request-rate", "1,2,3,4,5,inf")
    one_line_error(code, err, "600,000 requests; kvplan simulates at most 500,000")


def test_prompts_times_output_length_is_capped():
    code, _, err = run_cli(*SIM, "--num-prompts", "100000", "--output-len", "1k")
    one_line_error(code, err, "ask for 102,400,000 output tokens over 1 run(s)")
    code, _, err = run_cli(
        "plan", "qwen3-8b", "--gpu", "h100", "--rate", "20", "--slo", "ttft_p99=1s",
        "--output-len", "16k",
    )  # fmt: skip
    one_line_error(code, err, "262,144,000 output tokens over 80 configurations")


def test_compare_counts_its_second_set_of_runs():
    code, _, err = run_cli(
        *SIM, "--num-prompts", "100000", "--request-rate", "1,2,inf", "--compare", "prefix-caching"
    )
    one_line_error(code, err, "100,000 requests x 6 run(s)")


def test_a_trace_counts_its_conversations_like_a_generated_workload(tmp_path):
    import json

    lines = [{"arrival_s": 0, "input_tokens": 1 << 20, "output_tokens": 1, "session_id": "a"}] * 200
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in lines))
    code, _, err = run_cli(*SIM, "--trace", str(path))
    one_line_error(code, err, "209,715,200 tokens")


def test_plan_counts_its_configurations_times_its_prompts():
    code, _, err = run_cli(
        "plan", "qwen3-8b", "--gpu", "h100", "--rate", "20", "--slo", "ttft_p99=1s",
        "--num-prompts", "100000",
    )  # fmt: skip
    one_line_error(code, err, "configurations is 8,000,000 requests")


def test_the_caps_are_inclusive_and_count_only_shared_tokens():
    from kvplan.errors import KvplanError
    from kvplan.simulate.workload import (
        MAX_RUN_REQUESTS,
        MAX_SHARED_TOKENS,
        RequestSpec,
        check_work,
        shared_prompt_tokens,
    )

    own = [RequestSpec(i, 0.0, 10**6, 1) for i in range(1000)]  # no shared tokens: no search
    assert shared_prompt_tokens(own) == 0
    check_work(own, MAX_RUN_REQUESTS // 1000)
    with pytest.raises(KvplanError):
        check_work(own, MAX_RUN_REQUESTS // 1000 + 1)
    prefix = [RequestSpec(i, 0.0, 5000, 1, stream_id=0, stream_tokens=4000) for i in range(100)]
    turn = [RequestSpec(100, 0.0, 6000, 1, stream_id=1, stream_tokens=6000, session=True)]
    assert shared_prompt_tokens(prefix + turn) == 100 * 4000 + 6000
    check_work(prefix, MAX_SHARED_TOKENS // 400_000)
    with pytest.raises(KvplanError):
        check_work(prefix, MAX_SHARED_TOKENS // 400_000 + 1)


# ---- 2. llama.cpp's --device ---------------------------------------------------------------
LLAMA = ("engine", "qwen3-8b", "--engine", "llama.cpp", "--gpu", "h100")


@pytest.mark.parametrize(
    "device", ["bogus", "", "CUDA", "CUDA00", "CUDA100", "CUDA-1", "ＣＵＤＡ0", "CUDA0\nx", "BLAS"]
)
def test_a_name_no_ggml_gpu_device_has_is_refused(device):
    code, out, err = run_cli(*LLAMA, "--device", device)
    one_line_error(code, err, "not a ggml GPU device llama.cpp lists")
    assert out == ""


@pytest.mark.parametrize("device", ["ROCm0", "MTL0", "Metal", "MUSA0", "CANN0"])
def test_a_backend_that_cannot_drive_this_gpu_is_refused(device):
    code, _, err = run_cli(*LLAMA, "--device", device)
    one_line_error(code, err, "drives no NVIDIA GPU")
    assert "CUDA or Vulkan" in err


def test_a_device_list_is_refused():
    code, _, err = run_cli(*LLAMA, "--device", "CUDA0,CUDA1")
    one_line_error(code, err, "one GPU device")


@pytest.mark.parametrize(
    ("gpu", "device", "label"),
    [("h100", "cuda1", "CUDA1"), ("h100", "VULKAN2", "Vulkan2"), ("mi300x", "rocm0", "ROCm0"),
     ("m4-max-36gb", "metal", "Metal"), ("m4-max-36gb", "mtl0", "MTL0")],
)  # fmt: skip
def test_a_device_is_matched_without_case_and_labelled_as_ggml_spells_it(gpu, device, label):
    code, out, _ = run_cli(
        "engine", "qwen3-8b", "--engine", "llama.cpp", "--gpu", gpu, "--device", device
    )
    assert code == 0
    assert f"{label} KV buffer size" in out


def test_ollama_takes_the_same_device_check():
    code, _, err = run_cli("engine", "qwen3-8b", "--engine", "ollama", "--gpu", "h100",
                           "--device", "bogus")  # fmt: skip
    one_line_error(code, err, "not a ggml GPU device")


# ---- 3. --gpu local: NVML before torch ------------------------------------------------------
class _Nvml(types.ModuleType):
    def __init__(self, name: str, total: int, mig: bool = False):
        super().__init__("pynvml")
        self._name, self._total, self._mig = name, total, mig

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMigMode(self, handle):
        return (int(self._mig), int(self._mig))

    def nvmlDeviceGetName(self, handle):
        return self._name.encode()

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=self._total)


class _Torch(types.ModuleType):
    """A torch whose CUDA device reports `total`; `touched` counts the calls."""

    def __init__(self, name: str, total: int):
        super().__init__("torch")
        self.touched = 0
        props = types.SimpleNamespace(name=name, total_memory=total)

        def available():
            self.touched += 1
            return True

        self.cuda = types.SimpleNamespace(
            is_available=available,
            current_device=lambda: 0,
            get_device_properties=lambda index: props,
        )


H100_NAME = "NVIDIA H100 80GB HBM3"


def _h100_cuda_total() -> int:
    from kvplan.inputs.hardware import load_profile

    return int(load_profile("h100").usable_memory_bytes)


def test_nvml_that_matches_a_profile_answers_without_torch(monkeypatch):
    from kvplan.inputs.hardware import load_profile

    cuda = _h100_cuda_total()
    torch = _Torch(H100_NAME, cuda)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", _Nvml(H100_NAME, cuda + 470 * MIB))
    monkeypatch.setitem(sys.modules, "torch", torch)
    gpu = load_profile("local")
    assert torch.touched == 0
    assert gpu.usable_memory_bytes == cuda and gpu.memory_reported_basis == "device"


@pytest.mark.parametrize("mig", [False, True])
def test_nvml_that_matches_no_profile_or_a_mig_gpu_takes_torchs_exact_total(monkeypatch, mig):
    from kvplan.inputs.hardware import load_profile

    cuda = _h100_cuda_total() - 2 * 2**30  # a total no profile pins
    torch = _Torch(H100_NAME, cuda)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_total = _h100_cuda_total() + (470 * MIB if mig else -2 * 2**30 + 470 * MIB)
    monkeypatch.setitem(sys.modules, "pynvml", _Nvml(H100_NAME, nvml_total, mig=mig))
    monkeypatch.setitem(sys.modules, "torch", torch)
    gpu = load_profile("local")
    assert torch.touched == 1
    assert gpu.usable_memory_bytes == cuda and gpu.memory_reported_basis == "device"


def test_nvml_without_torch_still_estimates_cudas_total(monkeypatch):
    from kvplan.inputs.hardware import load_profile

    nvml_total = _h100_cuda_total() - 2 * 2**30
    monkeypatch.setitem(sys.modules, "pynvml", _Nvml(H100_NAME, nvml_total))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    gpu = load_profile("local")
    assert gpu.memory_reported_basis == "estimated"
    assert gpu.usable_memory_bytes == nvml_total - 600 * MIB


# ---- 4. config.json values ------------------------------------------------------------------
def _config(tmp_path, **fields):
    import json

    config = json.loads((MODELS / "Qwen3-8B.json").read_text())
    config.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_a_400_digit_field_is_cut_in_its_one_line_error(tmp_path):
    code, _, err = run_cli("size", str(_config(tmp_path, num_key_value_heads=10**400)))
    one_line_error(code, err, "num_key_value_heads = 1000")
    assert "... is out of range" in err and len(err) < 300


@pytest.mark.parametrize(("qc", "kind"), [("fp8", "string"), ([8], "array"), (4, "number")])
def test_a_quantization_config_that_is_no_object_is_noted_not_ignored(tmp_path, qc, kind):
    code, out, _ = run_cli("size", str(_config(tmp_path, quantization_config=qc)))
    assert code == 0
    assert f"quantization_config is a JSON {kind}, not an object" in out and "in bf16" in out


# ---- 5. plan's search space -----------------------------------------------------------------
def test_a_value_or_gpu_given_twice_is_searched_once():
    code, out, _ = run_cli(
        "plan", "qwen3-8b", "--gpu", "h100", "--gpu", "h100", "--rate", "1",
        "--slo", "ttft_p99=1s", "--num-prompts", "20", "--tp", "1,1,1,1",
        "--max-num-seqs", "64,64", "--max-num-batched-tokens", "2048,2048",
        "--kv-cache-dtype", "auto,auto",
    )  # fmt: skip
    assert code == 0
    assert "searched             1 configurations" in out


# ---- 6. a 400-digit integer option ----------------------------------------------------------
@pytest.mark.parametrize("sign", ["", "-"])
def test_a_400_digit_integer_is_a_range_error_not_an_overflow(sign):
    code, _, err = run_cli("engine", "qwen3-8b", "--gpu", "h100", "--dcp", sign + "9" * 400)
    one_line_error(code, err, "must be between 1 and 1024")
    assert len(err) < 120


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "fifo"])
def test_a_device_or_fifo_is_not_a_missing_config(tmp_path, target):
    """`size /dev/zero` said "no such config file" of a path that exists: it is refused as what
    it is, in one line, without reading it."""
    if target == "fifo":
        fifo = tmp_path / "config.fifo"
        os.mkfifo(fifo)
        target = str(fifo)
    code, _, err = run_cli("size", target)
    one_line_error(code, err, "not a regular file (a device, FIFO or socket), not a config")
