"""Every note kvplan can print, rendered from a real instance (issue 27).

SOURCES names, for every registered note id, the invocation that makes the library emit it: a
command run in-process on a real input (a bundled model, a config or GGUF file written here, a
GPU profile edited here), or a Python twin where no command prints the note. Each invocation
runs once; every note rendered while it runs is caught, with the values the library gave it, by
wrapping the registered texts (kvplan.present.notes.TEXTS), and its words are checked: not
empty, no placeholder left unformatted, no None or NaN where a value was missing, the names and
whole numbers it quotes as given. A new note id without an entry fails ("add one"), and so does
an entry whose invocation no longer produces its note.

Three stand-ins replace what a test cannot have: the Hub (a server on 127.0.0.1), and the two
`kvplan measure` runs, whose timings come from recordings of real runs on a CPU
(tests/data/recorded/); the same measure notes come from a real run in the slow test at the end."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from kvplan.present.notes import all_texts, note_text

from helpers import (
    RECORDED_MEASURE_MODEL,
    REPO,
    llama_like,
    mamba2_config,
    run_cli,
    serve_locally,
)

REAL = REPO / "tests/data/real_configs"
RECORDED = REPO / "tests/data/recorded"
SMALL = "--num-prompts", "8", "--input-len", "128", "--output-len", "8"  # a short simulate
PLAN = ("--rate", "2", "--input-len", "256", "--output-len", "32", "--num-prompts", "20")
PLAN += ("--jobs", "1")
H100_50MS = ("--gpu", "h100", "--slo", "tpot_p99=50ms")
ONE_PLAN = ("--tp", "1", "--kv-cache-dtype", "auto", "--max-num-seqs", "64")
ONE_PLAN += ("--max-num-batched-tokens", "2048")
MEASURE = ("measure", "--model", "{d}/measure-model.json", "--quick", "--rounds", "3")
# the model measured: two small fp32 layers (scripts/record_measure_runs.py records its timings)
MEASURE_MODEL = RECORDED_MEASURE_MODEL


# ---- the inputs, written once ------------------------------------------------------------------
def _write_inputs(d: Path) -> None:
    """Config files, GPU profiles, GGUF headers and a checkpoint folder, each made to carry the
    one trait a note is about."""
    configs = {
        "bnb.json": llama_like(quantization_config={"quant_method": "bitsandbytes"}),
        "mamba2.json": mamba2_config(),
        "unknown.json": llama_like(model_type="brandnew_lm"),  # no family kvplan knows
        "fp32.json": llama_like(torch_dtype="float32"),
        # the wrapper unties what its text config ties
        "tied.json": {
            "model_type": "gemma3",
            "tie_word_embeddings": False,
            "text_config": llama_like(model_type="gemma3_text", tie_word_embeddings=True),
            "vision_config": {"hidden_size": 64},
        },
        "moe.json": llama_like(
            model_type="qwen3_moe",
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=512,
            head_dim=64,
        ),
        "measure-model.json": MEASURE_MODEL,
    }
    for name, config in configs.items():
        (d / name).write_text(json.dumps(config))
    h100 = (REPO / "hardware_profiles/h100-sxm.yaml").read_text()
    assert "gpus_per_node: 8" in h100
    (d / "no-node.yaml").write_text(h100.replace("gpus_per_node: 8", ""))
    assert '\ncompute_capability: "9.0"' in h100
    (d / "no-cc.yaml").write_text(h100.replace('\ncompute_capability: "9.0"', "\n"))
    _write_ggufs(d)
    _write_checkpoint(d / "ckpt")
    (d / "modelopt").mkdir()  # a ModelOpt 0.29 export: hf_quant_config.json beside config.json
    (d / "modelopt/config.json").write_text((REPO / "model_configs/Llama-3.1-8B.json").read_text())
    (d / "modelopt/hf_quant_config.json").write_text(
        json.dumps(
            {
                "producer": {"name": "modelopt", "version": "0.27.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
            }
        )
    )


def _write_ggufs(d: Path) -> None:
    from gguf_fixtures import bundled, convert, tensors_for, write_gguf

    def write(name: str, arch: str, keys: dict) -> None:
        write_gguf(d / name, arch, keys, tensors_for(arch, keys))

    for name, model in (("glm.gguf", "glm-4.5-air"), ("nemotron.gguf", "nemotron-3-nano-30b")):
        write(name, *convert(bundled(model)))
    arch, keys = convert(bundled("deepseek-v2-lite"))  # a file converted before MLA keys
    write("mla-legacy.gguf", arch, {k: v for k, v in keys.items() if "_mla" not in k})
    _, keys = convert(bundled("llama-3.1-8b"))
    write("phi3.gguf", "phi3", {**keys, "attention.sliding_window": 2047})
    layers = keys["block_count"]
    gemma4 = {
        **keys,
        "attention.sliding_window": 1024,
        "attention.sliding_window_pattern": [i % 6 != 5 for i in range(layers)],
        "attention.shared_kv_layers": 8,
    }
    write("gemma4.gguf", "gemma4", gemma4)


def _write_checkpoint(folder: Path) -> None:
    """config.json beside a safetensors header whose tensors are far from the config's count."""
    from test_hub import safetensors_header

    folder.mkdir()
    (folder / "config.json").write_text((REPO / "model_configs/Llama-3.1-8B.json").read_text())
    shard = {
        "model.embed_tokens.weight": ("BF16", [128256, 4096]),
        "model.layers.0.mlp.down_proj.qweight": ("I32", [14336 // 8, 4096]),
    }
    (folder / "model.safetensors").write_bytes(safetensors_header(shard))


# ---- invocations -------------------------------------------------------------------------------
Invocation = Callable[[Path], None]


def cli(*argv: str, env: dict[str, str] | None = None) -> Invocation:
    """`kvplan ARGV --format json` in-process ({d}: the inputs' folder); an answer is expected
    (exit 0, or 1 for a plan that does not fit or a check that missed)."""

    def run(d: Path) -> None:
        args = [a.replace("{d}", str(d)) for a in argv]
        with _environment(env, d):
            code, out, err = run_cli(*args, "--format", "json")
        assert code in (0, 1), f"kvplan {' '.join(args)}: exit {code}: {err}"

    return run


@contextmanager
def _environment(env: dict[str, str] | None, d: Path):
    if not env:
        yield
        return
    saved = dict(os.environ)
    os.environ.update({k: v.replace("{d}", str(d)) for k, v in env.items()})
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def launch_seats(d: Path) -> None:
    """capacity's plan for `--emit vllm`, whose seats vLLM's own allocation caps (the launch
    prints the command alone, so the note is rendered from the Python twin's result)."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.capacity import CapacityRequest, capacity_for_launch

    result = capacity_for_launch(
        load_model("gemma-3-27b"), load_profile("h100"), CapacityRequest(32768), "vllm", False
    )
    for item in result.notes:
        note_text(item)


def launch_state_cap(d: Path) -> None:
    """capacity's plan for `--emit sglang` of a hybrid whose state pool caps SGLang's running
    requests below its KV pool's (rendered from the Python twin's result, as launch_seats)."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.capacity import CapacityRequest, capacity_for_launch

    result = capacity_for_launch(
        load_model("qwen3.5-35b-a3b"), load_profile("h200"), CapacityRequest(8192), "sglang", False
    )
    for item in result.notes:
        note_text(item)


def llamacpp_without_host(d: Path) -> None:
    """The Python twin of `engine --engine llama.cpp` with no host profile (the CLI always names
    one), on a GPU too small for the model: layers offloaded to a host it does not know."""
    from kvplan.engines.llamacpp import LlamaCppRequest, llamacpp_allocation
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model

    result = llamacpp_allocation(
        load_model("llama-3.1-70b"), load_profile("rtx-3090"), LlamaCppRequest(ctx_size=8192)
    )
    for item in result.notes:
        note_text(item)


def measure_replayed(*argv: str) -> Invocation:
    """`kvplan measure ARGV` on this machine's CPU with the device, its thread layout and every
    timing replayed from a recorded real run (tests/data/recorded/measure_cpu_quick.json, written
    by scripts/record_measure_runs.py): the workload, the rates derived from the probes, the
    prediction and the check all run."""
    command = cli(*MEASURE, *argv)

    def run(d: Path) -> None:
        torch = pytest.importorskip("torch")
        import kvplan.measure.run as measure_run
        from kvplan.measure.timing import Timing

        recorded = json.loads((RECORDED / "measure_cpu_quick.json").read_text())

        def time_rounds(items, *_args, **_kwargs):
            missing = [i.key for i in items if i.key not in recorded["timings"]]
            assert not missing, f"the recording has no timing for {missing}: record it again"
            return {i.key: Timing(**recorded["timings"][i.key]) for i in items}

        replayed = {
            "detect": lambda *_a, **_k: dict(recorded["info"]),
            "default_threads": lambda: tuple(recorded["threads"]),
            "time_rounds": time_rounds,
        }
        real = {name: getattr(measure_run, name) for name in replayed}
        threads = torch.get_num_threads()  # measure sets torch's, for the process
        for name, fn in replayed.items():
            setattr(measure_run, name, fn)
        try:
            command(d)
        finally:
            for name, fn in real.items():
                setattr(measure_run, name, fn)
            torch.set_num_threads(threads)

    return run


def distributed_replayed(on_cuda: bool, kv_slower: float = 1.0) -> Invocation:
    """`kvplan measure --distributed`'s analysis of what its ranks reported, recorded from a real
    two-rank gloo run on a CPU (tests/data/recorded/measure_distributed_cpu.json), the KV
    transfer measured `kv_slower` times slower in every round. An NCCL run (`on_cuda`) reports
    the same timings without the host's reduction, which only gloo has."""

    def run(d: Path) -> None:
        pytest.importorskip("torch")
        from kvplan.measure.distributed import DistributedRequest, analyse
        from kvplan.present.measure import distributed_view

        recorded = json.loads((RECORDED / "measure_distributed_cpu.json").read_text())
        request = recorded["request"] | {"batches": tuple(recorded["request"]["batches"])}
        results = recorded["results"]
        kv = results["kv_send"]
        for key in ("median_s", "p20_s", "p80_s"):
            kv[key] *= kv_slower
        kv["round_s"] = [t * kv_slower for t in kv["round_s"]]
        if on_cuda:
            request["device"] = "cuda"
            del results["reduce"]
        from kvplan.measure.verdict import distributed_verdict

        result = analyse(DistributedRequest(**request), results)
        distributed_view(result, distributed_verdict(result, check_gated=True))

    return run


def hub(d: Path) -> None:
    """A Hub id kvplan does not bundle, from a stand-in Hub on 127.0.0.1 that serves its
    config.json and no safetensors index or shard."""
    config = (REPO / "model_configs/Llama-3.1-8B.json").read_bytes()

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):  # noqa: N802 - the stdlib's name
            if not self.path.endswith("/config.json"):
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(config)))
            self.end_headers()
            self.wfile.write(config)

    server = serve_locally(Hub)
    url = next(server)
    try:
        env = {"HF_ENDPOINT": url, "HF_HOME": "{d}/hf", "KVPLAN_CACHE": "{d}/kv"}
        cli("size", "someorg/llama-like", env=env)(d)
    finally:
        next(server, None)


SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100")
LLAMA = ("--engine", "llama.cpp")
OLLAMA = ("--engine", "ollama", "--gpu", "rtx-3090")
INVOCATIONS: dict[str, Invocation] = {
    # the model, as read from its config, GGUF header or checkpoint
    "size checkpoint folder": cli("size", "{d}/ckpt"),
    "size modelopt hf_quant_config": cli("size", "{d}/modelopt"),
    "size instruct variant": cli("size", "Qwen/Qwen2.5-72B-Instruct"),
    "size quantized caches": cli("size", "llama-3.1-8b", "--kv-dtype", "int8,int4,nvfp4,q8_0"),
    "size bitsandbytes": cli("size", "{d}/bnb.json"),
    "size mamba2": cli("size", "{d}/mamba2.json"),
    "size unknown family": cli("size", "{d}/unknown.json"),
    "size untied wrapper": cli("size", "{d}/tied.json"),
    "size deepseek-v4": cli("size", f"{REAL}/deepseek-ai--DeepSeek-V4-Flash.json"),
    "size minimax-m3": cli("size", f"{REAL}/MiniMaxAI--MiniMax-M3.json"),
    "size gguf phi3": cli("size", "{d}/phi3.gguf"),
    "size gguf gemma4": cli("size", "{d}/gemma4.gguf"),
    "size gguf glm": cli("size", "{d}/glm.gguf"),
    "size gguf mla legacy": cli("size", "{d}/mla-legacy.gguf"),
    "size hub": hub,
    "models": cli("models"),
    "gpus": cli("gpus"),
    # deployments and capacity
    "report deepseek-v3.2": cli(
        "report", "deepseek-v3.2", "--gpu", "h100", "--gpu", "h200", "--ctx", "8k,32k"
    ),
    "capacity users": cli(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--ctx", "32k", "--users", "200"
    ),
    "capacity six gpus": cli(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--ctx", "32k", "--num-gpus", "6"
    ),
    "capacity no node size": cli("capacity", "llama-3.1-70b", "--gpu", "{d}/no-node.yaml"),
    "capacity estimated memory": cli("capacity", "llama-3.1-70b", "--gpu", "h100-nvl"),
    "capacity none fits": cli(
        "capacity", "llama-3.1-405b", "--gpu", "m1-max-64gb", "--ctx", "128k"
    ),
    "capacity glm-5 tp8": cli("capacity", "glm-5", "--gpu", "h200", "--tp", "8", "--ctx", "128k"),
    "capacity glm-4.7": cli("capacity", "glm-4.7", "--gpu", "h100", "--ctx", "32k"),
    "capacity gemma-2b tp8": cli(
        "capacity", "gemma-2b", "--gpu", "h200", "--tp", "8", "--ctx", "128k"
    ),
    "capacity falcon legacy": cli("capacity", "falcon-40b-legacy", "--gpu", "h100"),
    "capacity gpt-oss": cli("capacity", "gpt-oss-120b", "--gpu", "h100"),
    "capacity nemotron lightning": cli("capacity", "nemotron-3.5-lightning-30b", "--gpu", "h100"),
    "capacity mistral small": cli("capacity", "mistral-small-3.1-24b", "--gpu", "h100"),
    "compare none fits": cli(
        "capacity", "llama-3.1-405b", "--gpu", "rtx-3090", "--gpu", "m1-max-64gb", "--tp", "1"
    ),
    "compare borrowed tables": cli(
        "capacity", "deepseek-v3", "--gpu", "mi300x", "--gpu", "gaudi3", "--ctx", "32k"
    ),
    "launch seats": launch_seats,
    "fit a mac": cli("fit", "--gpu", "m3-max-64gb"),
    "explore mla": cli("explore", "deepseek-v2-lite", "--gpu", "h100", "--out", "{d}/e.html"),
    # roofline and what-if
    "roofline deepseek-v3 tp8 pp2": cli(
        "roofline", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--pp", "2", "--batch", "1,32"
    ),
    "roofline nemotron": cli(
        "roofline", "nemotron-3-nano-30b", "--gpu", "h100", "--ctx", "8k,32k", "--batch", "1,64"
    ),
    "roofline ops": cli("roofline", "llama-3.1-8b", "--gpu", "h100", "--ctx", "8k", "--ops"),
    "whatif every technique": cli("whatif", "qwen3-32b", "--ctx", "32k", "--gpu", "h100"),
    "whatif deepseek-v3": cli(
        "whatif", "deepseek-v3", "--ctx", "128k", "--apply", "fp8", "--apply", "int2"
    ),
    "whatif maverick": cli("whatif", "llama-4-maverick", "--ctx", "128k", "--apply", "fp8"),
    "whatif nemotron": cli("whatif", "nemotron-3-nano-30b", "--ctx", "128k", "--apply", "fp8"),
    # engines
    "vllm nvfp4 checkpoint kv": cli(
        "engine", "gemma-4-31b-nvfp4", "--engine", "vllm", "--gpu", "h100"
    ),
    "sglang nvfp4 checkpoint kv": cli(
        "engine", "gemma-4-31b-nvfp4", "--engine", "sglang", "--gpu", "h100"
    ),
    "vllm dsa fp8 tp8": cli(
        "engine",
        "deepseek-v3.2",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8",
        "--ctx",
        "32k",
    ),
    "vllm fp16 pp2 0.21": cli(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--gpu",
        "h100",
        "--dtype",
        "float16",
        "--ctx",
        "8k",
        "--vllm-version",
        "0.21",
        "--pp",
        "2",
    ),
    "vllm hybrid manager off": cli(
        "engine",
        "gemma-3-27b",
        "--engine",
        "vllm",
        "--gpu",
        "h100",
        "--ctx",
        "8k",
        "--disable-hybrid-kv-cache-manager",
    ),
    "vllm no compute capability": cli("engine", "llama-3.1-8b", "--gpu", "{d}/no-cc.yaml"),
    "vllm fp32 config": cli("engine", "{d}/fp32.json", "--engine", "vllm", "--gpu", "h100"),
    "vllm long max-model-len": cli(
        "engine",
        "codellama-34b",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--ctx",
        "32k",
        "--allow-long-max-model-len",
    ),
    "vllm glm-5.3": cli(
        "engine",
        f"{REAL}/zai-org--GLM-5.3.json",
        "--engine",
        "vllm",
        "--gpu",
        "b300",
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8",
        "--kv-cache-memory",
        "50GiB",
    ),
    "vllm gemma 0.32": cli(
        "engine",
        "gemma-3-27b",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--ctx",
        "32k",
        "--vllm-version",
        "0.32",
    ),
    "vllm deepseek-v4": cli(
        "engine",
        f"{REAL}/deepseek-ai--DeepSeek-V4-Flash.json",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--kv-cache-memory",
        "60GiB",
        "--vllm-version",
        "0.32",
    ),
    "sglang deepseek-v4": cli(
        "engine",
        f"{REAL}/deepseek-ai--DeepSeek-V4-Flash.json",
        "--engine",
        "sglang",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--kv-cache-memory",
        "60GiB",
    ),
    "vllm minimax-m3": cli(
        "engine",
        f"{REAL}/MiniMaxAI--MiniMax-M3.json",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--kv-cache-memory",
        "3GiB",
        "--vllm-version",
        "0.32",
    ),
    "vllm nemotron": cli("engine", "nemotron-3-nano-30b", "--engine", "vllm", "--gpu", "h100"),
    "sglang glm-5.3": cli(
        "engine",
        f"{REAL}/zai-org--GLM-5.3.json",
        "--engine",
        "sglang",
        "--gpu",
        "b300",
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8_e4m3",  # SGLang's parser takes no fp8
        "--kv-cache-memory",
        "50GiB",
    ),
    "sglang dsa tp8": cli(
        "engine",
        "deepseek-v3.2",
        "--engine",
        "sglang",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--ctx",
        "32k",
        "--allow-long-max-model-len",
    ),
    "sglang nemotron": cli("engine", "nemotron-3-nano-30b", "--engine", "sglang", "--gpu", "h100"),
    "sglang gemma-3 fp16": cli(
        "engine", "gemma-3-27b", "--engine", "sglang", "--gpu", "h100", "--dtype", "float16"
    ),
    "sglang gpt-oss 0.5.4": cli(
        "engine",
        "gpt-oss-120b",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.4.post2",
        "--gpu",
        "h100",
    ),
    "llama.cpp gemma-3 defaults": cli(
        "engine",
        "gemma-3-27b",
        *LLAMA,
        "--gpu",
        "rtx-3090",
        "-c",
        "0",
        "--swa-full",
        "-fa",
        "off",
        "-ctk",
        "q8_0",
    ),
    "llama.cpp gemma-4 no flash": cli(
        "engine", "gemma-4-26b-a4b", *LLAMA, "--gpu", "h100", "-c", "8k", "-fa", "off"
    ),
    "llama.cpp rounded context": cli(
        "engine", "llama-3.1-8b", *LLAMA, "--gpu", "rtx-3090", "-c", "30000", "-np", "3"
    ),
    "llama.cpp without host": llamacpp_without_host,
    "ollama nemotron gguf": cli(
        "engine", "{d}/nemotron.gguf", *OLLAMA, "--ollama-env", "OLLAMA_NUM_PARALLEL=2"
    ),
    "ollama old q8_0": cli(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "llama.cpp",
        "--ollama",
        "0.5.0",
        "--gpu",
        "rtx-3090",
        "--ollama-env",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
    ),
    "ollama newer": cli("engine", "llama-3.1-8b", *OLLAMA, "--ollama-version", "99.0"),
    "ollama long context": cli("engine", "llama-3.1-8b", *OLLAMA, "--ctx", "200000"),
    # simulate and plan
    "simulate measured profile": cli(
        "simulate", "qwen2.5-3b", "--gpu", "tests/data/measured_cpu_profile.yaml", *SMALL
    ),
    "simulate measured moe": cli(
        "simulate", "{d}/moe.json", "--gpu", "tests/data/measured_cpu_profile.yaml", *SMALL
    ),
    "simulate dcp eager": cli(
        "simulate",
        "deepseek-v2-lite",
        "--gpu",
        "h100",
        "--tp",
        "4",
        "-dcp",
        "4",
        "--enforce-eager",
        *SMALL,
    ),
    "simulate dsa": cli("simulate", "deepseek-v3.2", "--gpu", "h200", "--tp", "8", *SMALL),
    "simulate sglang gpt-oss": cli(
        "simulate", "gpt-oss-20b", "--gpu", "a100", "--engine", "sglang", *SMALL
    ),
    "simulate sglang gpt-oss sm120": cli(
        "simulate", "gpt-oss-20b", "--gpu", "rtx-pro-6000", "--engine", "sglang", *SMALL
    ),
    "simulate sglang kimi": cli(
        "simulate",
        "kimi-k2.5",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--engine",
        "sglang",
        "--engine-version",
        "0.5.9",  # the first release with Kimi-K2.5's model; the keyword decode until 0.5.11
        *SMALL,
    ),
    "simulate attention backend": cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--attention-backend", "FLASHINFER", *SMALL
    ),
    "roofline network assumed": cli("roofline", "llama-3.1-70b", "--gpu", "rtx-4090", "--tp", "16"),
    "simulate nsa backend ignored": cli(
        "simulate",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--engine",
        "sglang",
        "--nsa-decode-backend",
        "fa3",
        *SMALL,
    ),
    "simulate attention backend timed": cli(
        "simulate",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--engine",
        "sglang",
        "--attention-backend",
        "triton",
        *SMALL,
    ),
    "simulate attention backend borrowed": cli(
        "simulate",
        "glm-4.7-flash",
        "--gpu",
        "b200",
        "--engine",
        "sglang",
        "--attention-backend",
        "triton",
        *SMALL,
    ),
    # vLLM's A100 FLASH_ATTN rows hold bf16 caches only
    "simulate attention cache stand-in": cli(
        "simulate", "llama-3.1-8b", "--gpu", "a100", "--kv-cache-dtype", "fp8", *SMALL
    ),
    "simulate moe backend": cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--moe-backend", "triton", *SMALL
    ),
    "engine sglang flashmla": cli(
        "engine",
        "deepseek-v3",
        "--engine",
        "sglang",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--attention-backend",
        "flashmla",
    ),
    "engine vllm flashmla": cli(
        "engine",
        "deepseek-v3",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--attention-backend",
        "FLASHMLA",
    ),  # fmt: skip
    "engine vllm block size 8": cli(
        "engine", "qwen3-8b", "--engine", "vllm", "--gpu", "h100", "--block-size", "8"
    ),
    "simulate every request failed": cli(
        "simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "2", "--max-model-len", "1"
    ),
    "simulate sglang ngram topk": cli(
        "simulate",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "2",
        "--engine",
        "sglang",
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-eagle-topk",
        "4",
    ),  # fmt: skip
    "simulate sglang spec v2 kv": cli(
        "simulate",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "2",
        "--engine",
        "sglang",
        "--engine-version",
        "0.5.11",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "x/y",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ),  # fmt: skip
    "simulate dsa sglang b200": cli(
        "simulate", "deepseek-v3.2", "--gpu", "b200", "--tp", "8", "--engine", "sglang", *SMALL
    ),
    "simulate dsa untabled": cli(
        "simulate", "deepseek-v3.2", "--gpu", "mi300x", "--tp", "8", *SMALL
    ),
    "simulate hybrid pp sharegpt": cli(
        "simulate",
        "nemotron-3-nano-30b",
        "--gpu",
        "h100",
        "--pp",
        "2",
        *SMALL,
        "--length-dist",
        "sharegpt",
    ),
    "simulate frontend bound": cli(
        *SIM, "--num-prompts", "300", "--input-len", "16", "--output-len", "64"
    ),
    "simulate small pool": cli(
        *SIM,
        "--kv-cache-memory",
        "2GiB",
        "--num-prompts",
        "40",
        "--input-len",
        "2000",
        "--output-len",
        "400",
    ),
    "simulate capped outputs": cli(
        *SIM,
        "--engine",
        "sglang",
        "--engine-version",
        "0.4.1",
        "--max-model-len",
        "256",
        "--input-len",
        "128",
        "--output-len",
        "200",
        "--num-prompts",
        "8",
    ),
    "simulate sglang": cli(
        *SIM,
        "--engine",
        "sglang",
        "--engine-version",
        "0.6",
        "--enforce-eager",
        "--kv-cache-memory",
        "1GiB",
        *SMALL,
    ),
    "simulate sglang cuda ipc": cli(
        "simulate",
        "qwen3.5-35b-a3b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--engine",
        "sglang",
        "--cuda-ipc-pool-mib",
        "1024",
        *SMALL,
    ),
    "simulate sglang auto strategy": cli(
        *("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--tp", "2", "--engine", "sglang"),
        *("--engine-version", "0.5.14", "--num-prompts", "4", "--input-len", "200"),
        *("--output-len", "10"),
    ),
    "capacity emit sglang hybrid": launch_state_cap,
    "engine sglang transformers backend": cli(
        *("engine", "smollm3-3b", "--engine", "sglang", "--gpu", "h100"),
    ),
    "simulate sglang extra buffer": cli(
        "simulate",
        "qwen3.5-35b-a3b",
        "--gpu",
        "h200",
        "--tp",
        "2",
        "--engine",
        "sglang",
        "--engine-version",
        "0.5.9",
        "--mamba-scheduler-strategy",
        "extra_buffer",
        "--num-prompts",
        "4",
        "--input-len",
        "128",
        "--output-len",
        "8",
    ),
    "simulate sglang hybrid mtp": cli(
        "simulate",
        "qwen3.5-35b-a3b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--engine",
        "sglang",
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        *SMALL,
    ),
    "simulate vllm v0": cli(*SIM, "--engine-version", "0.7", "--num-scheduler-steps", "4", *SMALL),
    "simulate vllm newer": cli(*SIM, "--vllm-version", "1.0", *SMALL),
    "simulate vllm prerelease": cli(*SIM, "--vllm-version", "0.32.0rc1", *SMALL),
    "simulate vllm 0.8 fp8": cli(
        *SIM, "--engine-version", "0.8.0", "--kv-cache-dtype", "fp8", *SMALL
    ),
    "simulate expert parallel": cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "-dp", "2", "-ep", *SMALL
    ),
    "simulate dp replicas": cli(*SIM, "-dp", "2", *SMALL),
    "simulate two nodes": cli(*SIM, "--tp", "16", "--nnodes", "2", *SMALL),
    "simulate sglang dp attention alone": cli(
        "simulate",
        "qwen3-30b-a3b",
        "--gpu",
        "h100",
        "--engine",
        "sglang",
        "--tp",
        "2",
        "--enable-dp-attention",
        *SMALL,
    ),
    "simulate disaggregated": cli(
        "simulate", "gemma-3-27b", "--gpu", "h100", "--disaggregated", "1:1", *SMALL
    ),
    "simulate speculative": cli(
        *SIM, "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}', *SMALL
    ),
    "plan pruned": cli("plan", "llama-3.1-8b", *H100_50MS, *PLAN, "--top", "1"),
    "plan none": cli(
        "plan",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--slo",
        "tpot_p99=1ms",
        *PLAN,
        *ONE_PLAN,
        "-dp",
        "2",
    ),
    "plan config sglang confidence": cli(
        "plan",
        "{d}/unknown.json",
        *H100_50MS,
        *PLAN,
        *ONE_PLAN,
        "--emit",
        "sglang",
        "--confidence",
        "0.9",
    ),
    "plan speculative": cli(
        "plan",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--slo",
        "tpot_p99=60ms",
        *PLAN,
        "--tp",
        "8",
        *ONE_PLAN[2:],
        "--speculative",
        "auto",
    ),
    # measure (stand-ins: recorded timings)
    "measure confirmed": measure_replayed("--check", "--confirm", "--tolerance", "5"),
    "measure strict against h100": measure_replayed("--gpu", "h100", "--tolerance", "0.01"),
    "measure distributed gloo": distributed_replayed(on_cuda=False),
    "measure distributed nccl, KV 3x slower": distributed_replayed(on_cuda=True, kv_slower=3),
}


# ---- running them: every note rendered, with its values ----------------------------------------
class Rendered:
    """One note as it was rendered: its id, the values the library gave it, its words."""

    def __init__(self, note_id: str, values: dict, words: str):
        self.id, self.values, self.words = note_id, values, words

    def __repr__(self) -> str:
        return f"{self.id} {self.values!r}: {self.words!r}"


@contextmanager
def _caught(into: list[Rendered]):
    """Every text function wrapped while the block runs: each call is recorded."""
    texts = all_texts()
    real = dict(texts)

    def wrapped(note_id: str, fn: Callable[..., str]) -> Callable[..., str]:
        def words(**values) -> str:
            out = fn(**values)
            into.append(Rendered(note_id, values, out))
            return out

        return words

    texts.update({note_id: wrapped(note_id, fn) for note_id, fn in real.items()})
    try:
        yield
    finally:
        texts.update(real)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    _write_inputs(d)
    return d


_RUNS: dict[str, list[Rendered]] = {}


def rendered_by(name: str, inputs: Path) -> list[Rendered]:
    """The notes invocation `name` renders (run once per process)."""
    if name not in _RUNS:
        out: list[Rendered] = []
        with _caught(out):
            INVOCATIONS[name](inputs)
        _RUNS[name] = out
    return _RUNS[name]


# ---- the table: every note id, and the invocation that makes it --------------------------------
SOURCES: dict[str, str] = {
    "attention-free-head-dim": "size mamba2",
    "capacity-budget": "report deepseek-v3.2",
    "capacity-no-room": "capacity none fits",
    "capacity-paged": "report deepseek-v3.2",
    "capacity-pp": "capacity glm-4.7",
    "capacity-replicas": "capacity users",
    "check-link-worst": "measure distributed nccl, KV 3x slower",
    "check-median": "measure strict against h100",
    "check-mutation-missed": "measure confirmed",
    "check-no-memory-point": "measure confirmed",
    "check-profile-off": "measure strict against h100",
    "check-worst": "measure strict against h100",
    "checkpoint-differs": "size checkpoint folder",
    "checkpoint-unread": "size hub",
    "checkpoint-weights": "size checkpoint folder",
    "checkpoint-kv-cache-stated": "size modelopt hf_quant_config",
    "compare-best-layout": "compare borrowed tables",
    "compare-columns": "report deepseek-v3.2",
    "compare-none": "compare none fits",
    "compare-prices": "report deepseek-v3.2",
    "compare-verdict": "report deepseek-v3.2",
    "compressed-attention": "size deepseek-v4",
    "ctx-beyond-positions": "capacity gemma-2b tp8",
    "deployment-chosen": "report deepseek-v3.2",
    "deployment-for-users": "capacity users",
    "deployment-none-fits": "capacity none fits",
    "deployment-on-gpus": "capacity six gpus",
    "distributed-method": "measure distributed gloo",
    "distributed-no-reduce": "measure distributed nccl, KV 3x slower",
    "distributed-reduce": "measure distributed gloo",
    "distributed-rounds": "measure distributed gloo",
    "distributed-send": "measure distributed gloo",
    "distributed-sizes": "measure distributed gloo",
    "dp-attention": "report deepseek-v3.2",
    "engine-compute-capability": "vllm no compute capability",
    "engine-dtype-cast": "vllm fp16 pp2 0.21",
    "engine-dtype-downcast": "vllm fp32 config",
    "engine-default-length": "simulate measured moe",
    "engine-long-max-model-len": "vllm long max-model-len",
    "expert-dtype-unpriced": "size deepseek-v4",
    "explore-cache-bytes": "explore mla",
    "explore-capacity": "explore mla",
    "explore-deployment": "explore mla",
    "explore-mla-replicated": "explore mla",
    "falcon-broadcast": "capacity falcon legacy",
    "fit-assumes": "fit a mac",
    "fit-rank": "fit a mac",
    "fit-training-context": "fit a mac",
    "fit-weights-estimated": "fit a mac",
    "gguf-file": "size gguf phi3",
    "gguf-mla-legacy": "size gguf mla legacy",
    "gguf-nextn-layers": "size gguf glm",
    "gguf-shared-kv": "size gguf gemma4",
    "gguf-window-ignored": "size gguf phi3",
    "gpus-dense": "gpus",
    "gpus-idle": "capacity six gpus",
    "gqa-indexer-cache": "size minimax-m3",
    "indexer-cache": "report deepseek-v3.2",
    "kv-fp8": "explore mla",
    "kv-ggml": "size quantized caches",
    "kv-int4": "size quantized caches",
    "kv-int8": "size quantized caches",
    "kv-nvfp4": "size quantized caches",
    "kv-sub-byte": "whatif every technique",
    "launch-engine-seats": "launch seats",
    "launch-sglang-state-cap": "capacity emit sglang hybrid",
    "llama4-chunked": "whatif maverick",
    "llamacpp-ctx-rounded": "llama.cpp rounded context",
    "llamacpp-ctx-train": "llama.cpp gemma-3 defaults",
    "llamacpp-decode-ceiling": "llama.cpp gemma-3 defaults",
    "llamacpp-fa-auto": "llama.cpp rounded context",
    "llamacpp-host-missing": "llama.cpp without host",
    "llamacpp-model-buffers": "ollama nemotron gguf",
    "llamacpp-ngl-auto": "llama.cpp gemma-3 defaults",
    "llamacpp-np-auto": "llama.cpp gemma-3 defaults",
    "llamacpp-reserve": "llama.cpp gemma-3 defaults",
    "llamacpp-rules": "llama.cpp gemma-3 defaults",
    "llamacpp-swa-full": "llama.cpp gemma-3 defaults",
    "llamacpp-v-padded": "llama.cpp gemma-4 no flash",
    "llamacpp-weights-estimated": "llama.cpp gemma-3 defaults",
    "measure-bandwidth": "measure confirmed",
    "measure-confirm": "measure confirmed",
    "measure-cpu-fp32": "measure confirmed",
    "measure-gather": "measure confirmed",
    "measure-method": "measure confirmed",
    "measure-no-datasheet": "measure confirmed",
    "measure-threads": "measure confirmed",
    "measure-workload": "measure confirmed",
    "memory-estimated": "capacity estimated memory",
    "mla-latent": "report deepseek-v3.2",
    "quant-hf-file": "size modelopt hf_quant_config",
    "model-path": "size checkpoint folder",
    "models-kv-per-token": "models",
    "mtp-excluded": "size deepseek-v4",
    "no-dtype": "capacity gpt-oss",
    "node-size-assumed": "capacity no node size",
    "ollama-ctx-capped": "ollama long context",
    "ollama-estimate": "ollama nemotron gguf",
    "ollama-flag-deprecated": "ollama old q8_0",
    "ollama-kv-needs-fa": "ollama old q8_0",
    "ollama-newer": "ollama newer",
    "ollama-old-runner": "ollama old q8_0",
    "ollama-preset": "ollama nemotron gguf",
    "ollama-single-sequence": "ollama nemotron gguf",
    "ollama-vram-tier": "ollama nemotron gguf",
    "plan-confidence": "plan config sglang confidence",
    "plan-method": "plan pruned",
    "plan-no-hf-id": "plan config sglang confidence",
    "plan-none": "plan none",
    "plan-parallel": "plan none",
    "plan-point-estimate": "plan pruned",
    "plan-prices": "plan pruned",
    "plan-pruned": "plan pruned",
    "plan-replicas": "plan pruned",
    "plan-sglang": "plan config sglang confidence",
    "plan-speculative": "plan speculative",
    "pp-across-nodes": "capacity glm-4.7",
    "quant-name-only": "capacity glm-4.7",
    "quant-unread": "size bitsandbytes",
    "roofline-batch-equal-reads": "report deepseek-v3.2",
    "roofline-decode-reads": "report deepseek-v3.2",
    "roofline-moe": "report deepseek-v3.2",
    "roofline-ops": "roofline ops",
    "roofline-peaks": "report deepseek-v3.2",
    "roofline-pp": "roofline deepseek-v3 tp8 pp2",
    "roofline-prefill-causal": "report deepseek-v3.2",
    "roofline-rows-overflow": "roofline nemotron",
    "roofline-state": "roofline nemotron",
    "roofline-terms": "report deepseek-v3.2",
    "roofline-tp": "report deepseek-v3.2",
    "sglang-checkpoint-kv-cache": "sglang nvfp4 checkpoint kv",
    "sglang-cuda-ipc-pool": "simulate sglang cuda ipc",
    "sglang-dsa-dtype": "sglang dsa tp8",
    "sglang-mamba": "sglang nemotron",
    "sglang-mamba-spec": "simulate sglang hybrid mtp",
    "sglang-radix-off": "simulate sglang hybrid mtp",
    "sglang-mamba-no-radix": "simulate sglang hybrid mtp",
    "sglang-mamba-no-overlap": "simulate sglang cuda ipc",
    "sglang-mamba-auto": "simulate sglang auto strategy",
    "sglang-transformers-backend": "engine sglang transformers backend",
    "sglang-mamba-extra-buffer": "simulate sglang extra buffer",
    "sglang-nsa-fp8-layout": "sglang glm-5.3",
    "sglang-partial-indexer": "sglang glm-5.3",
    "sglang-pool": "sglang dsa tp8",
    "sglang-rules": "sglang glm-5.3",
    "sglang-swa": "sglang gemma-3 fp16",
    "sglang-swa-off": "sglang gpt-oss 0.5.4",
    "sglang-triton-kernels-kept": "sglang gpt-oss 0.5.4",
    "sim-achieved-measured": "simulate measured moe",
    "sim-dcp": "simulate dcp eager",
    "sim-disaggregated": "simulate disaggregated",
    "sim-dp-replicas": "simulate dp replicas",
    "sim-multinode": "simulate two nodes",
    "sim-dp-attention-off": "simulate sglang dp attention alone",
    "sim-dsa-dense": "simulate dsa untabled",
    "sim-dsa-tables": "simulate dsa",
    "sim-dsa-decode-kernel": "simulate dsa sglang b200",
    "sim-enforce-eager": "simulate dcp eager",
    "sim-attention-kernels": "simulate attention backend",
    "sim-attention-timed": "simulate attention backend timed",
    "sim-attention-borrowed": "simulate attention backend borrowed",
    "sim-attention-cache-stand-in": "simulate attention cache stand-in",
    "sim-prefill-attention": "simulate attention backend timed",
    "sim-nsa-backend-ignored": "simulate nsa backend ignored",
    "node-network-assumed": "roofline network assumed",
    "sim-moe-kernels": "simulate moe backend",
    "sglang-attention": "engine sglang flashmla",
    "sglang-ngram-topk": "simulate sglang ngram topk",
    "sglang-spec-mode": "simulate sglang ngram topk",
    "sglang-spec-v2-kv": "simulate sglang spec v2 kv",
    "vllm-attention": "engine vllm flashmla",
    "vllm-block-size-fallback": "engine vllm block size 8",
    "sim-engine": "simulate measured profile",
    "sim-expert-parallel": "simulate expert parallel",
    "sim-frontend-bound": "simulate frontend bound",
    "sim-interval": "simulate measured profile",
    "sim-kernel-tables": "compare borrowed tables",
    "sim-max-model-len-reduced": "simulate small pool",
    "sim-measured-ops": "simulate measured profile",
    "sim-outputs-capped": "simulate capped outputs",
    "sim-requests-failed": "simulate every request failed",
    "sim-preemptions": "simulate small pool",
    "sim-prefix-caching-off-hybrid": "simulate hybrid pp sharegpt",
    "sim-sglang": "simulate sglang",
    "sim-sglang-frontend": "simulate sglang",
    "sim-sglang-pool-caps": "simulate sglang",
    "sim-sglang-version-nearest": "simulate sglang",
    "sim-sharegpt": "simulate hybrid pp sharegpt",
    "sim-speculative": "simulate speculative",
    "sim-step-terms": "simulate measured profile",
    "sim-vllm-v0": "simulate vllm v0",
    "sim-vllm-v0-defaults": "simulate vllm v0",
    "sim-vllm-v0-pool": "simulate vllm v0",
    "sim-vllm-08-v0": "simulate vllm 0.8 fp8",
    "sim-vllm-version-newer": "simulate vllm newer",
    "sim-version-prerelease": "simulate vllm prerelease",
    "sim-weak-disagg-hybrid": "simulate disaggregated",
    "sim-weak-general": "simulate measured profile",
    "sim-weak-hybrid": "simulate hybrid pp sharegpt",
    "sim-weak-mla": "simulate dcp eager",
    "sim-weak-moe": "simulate measured moe",
    "sim-weak-pp": "simulate hybrid pp sharegpt",
    "sim-weak-sglang": "simulate sglang",
    "sim-weak-detokenizer": "simulate sglang kimi",
    "sim-weak-gpt-oss-sglang": "simulate sglang gpt-oss",
    "sim-gpt-oss-sm120-kernel": "simulate sglang gpt-oss sm120",
    "sliding-held": "size untied wrapper",
    "state-fixed": "size mamba2",
    "structure-read": "size unknown family",
    "structure-unread": "capacity nemotron lightning",
    "tie-wrapper-default": "capacity mistral small",
    "tie-wrapper-wins": "size untied wrapper",
    "tp-crosses-nodes": "whatif deepseek-v3",
    "tp-kv-replicated": "capacity gemma-2b tp8",
    "tp-mla-replicated": "capacity glm-5 tp8",
    "tp-per-gpu": "capacity users",
    "transfer-link": "report deepseek-v3.2",
    "transfer-no-link": "capacity none fits",
    "transfer-replication": "capacity glm-5 tp8",
    "variant-resolved": "size instruct variant",
    "vision-absent": "whatif maverick",
    "vision-excluded": "size untied wrapper",
    "sglang-dsv4-dtype": "sglang deepseek-v4",
    "sglang-dsv4-pools": "sglang deepseek-v4",
    "vllm-cache-size-definition": "vllm dsa fp8 tp8",
    "vllm-compressed-layout": "vllm deepseek-v4",
    "vllm-cuda-graph-estimate": "vllm dsa fp8 tp8",
    "vllm-cuda-graphs-subtracted": "vllm fp16 pp2 0.21",
    "vllm-dsv4-fp8-ds-mla": "vllm deepseek-v4",
    "vllm-fp8-ds-mla": "vllm dsa fp8 tp8",
    "vllm-checkpoint-kv-cache": "vllm nvfp4 checkpoint kv",
    "vllm-gqa-indexer": "vllm minimax-m3",
    "vllm-hma-off": "vllm hybrid manager off",
    "vllm-memory-estimated": "vllm dsa fp8 tp8",
    "vllm-memory-given": "vllm glm-5.3",
    "vllm-mla-block": "vllm dsa fp8 tp8",
    "vllm-pp": "vllm fp16 pp2 0.21",
    "vllm-rules": "vllm dsa fp8 tp8",
    "vllm-state-block": "vllm nemotron",
    "vllm-uniform-type": "vllm glm-5.3",
    "vllm-window-in-flight": "vllm gemma 0.32",
    "weights-gguf": "size gguf phi3",
    "weights-quantized": "size deepseek-v4",
    "weights-stored": "size checkpoint folder",
    "whatif-cla": "whatif every technique",
    "whatif-cyclic": "whatif every technique",
    "whatif-lowrank": "whatif every technique",
    "whatif-mla": "whatif deepseek-v3",
    "whatif-mla-convert": "whatif every technique",
    "whatif-no-fit": "whatif maverick",
    "whatif-order": "whatif every technique",
    "whatif-paged": "whatif every technique",
    "whatif-prefix": "whatif every technique",
    "whatif-recurrent": "whatif every technique",
    "whatif-scheduling": "whatif every technique",
    "whatif-sparse-read": "whatif every technique",
    "whatif-spec": "whatif every technique",
    "whatif-state": "whatif nemotron",
    "whatif-terms": "whatif every technique",
    "whatif-time": "whatif every technique",
    "whatif-tp-auto": "whatif every technique",
}


# ---- what the words must be --------------------------------------------------------------------
UNFORMATTED = re.compile(r"[{}]")  # a placeholder left in the words
# Python's spelling of a missing or undefined value ("None of A, B holds..." is words)
MISSING_VALUE = re.compile(r"\bNone\b(?! of)|\bnan\b|\binf\b")
# values that choose the wording rather than appear in it: (note id, value name), each with why
CHOOSE_WORDS = {
    ("vllm-cache-size-definition", "version"),  # which vLLM definition of the cache size
    ("measure-threads", "clock"),  # thread_cpu or wall: said in words
    ("sim-interval", "evidence"),  # own/vllm: whose published runs, said in words
    ("sim-speculative", "acceptance"),  # how the rate was chosen, said in words
    ("sglang-radix-off", "reason"),  # which of SGLang's rules, said in words
    ("sim-dp-replicas", "router"),  # round_robin: the router said in words
    ("sim-expert-parallel", "router"),
    ("sim-expert-parallel", "engine"),  # SGLang's gather rules said in words
    ("sim-multinode", "assumed"),  # the profile's network or kvplan's default: said in words
    ("indexer-cache", "layers"),  # every layer: "every layer", no count
    ("indexer-cache", "of"),
    ("roofline-ops", "tp"),  # TP 1: unsaid
    ("compare-columns", "context_len"),  # a layout given: no context in the words
    ("sim-enforce-eager", "engine"),  # the engine's flag: --enforce-eager, --disable-cuda-graph
    ("sglang-attention", "forced"),  # whether the backend forced the page: said in words
    ("sglang-attention", "graphs"),  # CUDA graphs off: said in words
    ("sim-sglang", "graph_tokens"),  # 0 (every prefill batch eager): said in words
    ("sim-sglang", "graph_off"),  # said only where no prefill batch runs graphs
    ("sim-sglang", "piecewise"),  # whether SGLang runs piecewise graphs: said in words
    ("sim-sglang", "page"),  # said where the pool's blocks are not SGLang's page (DSA's 64: are)
    ("sim-sglang", "block"),
    ("plan-speculative", "engine"),  # the engine's flags: --speculative-config or -*
    ("deployment-chosen", "nodes"),  # "one node"
    ("deployment-on-gpus", "replicas"),  # one replica: unsaid
    ("measure-confirm", "regressions"),  # said only for a regression against a baseline
    ("vllm-memory-estimated", "tp"),  # which caveats apply (NCCL buffers, TP 8 unmeasured)
    ("vllm-memory-estimated", "pp"),
    ("sim-vllm-v0-defaults", "why"),  # why V0 kept chunked prefill off: said in words
    ("sim-weak-detokenizer", "path"),  # SGLang's decode path: said in words
}


def check_words(item: Rendered) -> None:
    """The words of one real note: present, fully formatted, no missing value shown, and every
    name and whole number it was given quoted as given (byte counts are printed in binary units,
    so they are not looked for)."""
    words = item.words
    assert isinstance(words, str) and words.strip(), f"{item.id}: no words"
    assert not UNFORMATTED.search(words), f"{item.id}: a placeholder left: {words!r}"
    assert not MISSING_VALUE.search(words), f"{item.id}: a missing value shown: {words!r}"
    plain = words.lower().replace("_", " ")
    for key, value in item.values.items():
        if (item.id, key) in CHOOSE_WORDS or isinstance(value, bool):
            continue
        if isinstance(value, str):
            assert value.lower().replace("_", " ") in plain, f"{item.id}: {key}={value!r} unsaid"
        elif isinstance(value, int) and not key.endswith("_bytes"):
            assert _quoted(value, words), f"{item.id}: {key}={value} unsaid: {words!r}"
        elif isinstance(value, float):
            assert math.isfinite(value), f"{item.id}: {key}={value}"


def _quoted(number: int, words: str) -> bool:
    """The whole number in the words, plain or with thousands separators, not part of another."""
    return any(
        re.search(rf"(?<!\d)(?<!\d[.,]){re.escape(spelled)}(?!\d|[.,]\d)", words)
        for spelled in (str(number), f"{number:,}")
    )


# ---- the tests ---------------------------------------------------------------------------------
def test_every_note_has_a_real_instance():
    registered = set(all_texts())
    missing = sorted(registered - set(SOURCES))
    assert not missing, "\n".join(
        f"note {note_id} has no real instance: add one to SOURCES" for note_id in missing
    )
    gone = sorted(set(SOURCES) - registered)
    assert not gone, f"SOURCES names notes no text is registered for: {gone}"
    unknown = sorted(set(SOURCES.values()) - set(INVOCATIONS))
    assert not unknown, f"SOURCES names invocations that do not exist: {unknown}"
    idle = sorted(set(INVOCATIONS) - set(SOURCES.values()))
    assert not idle, f"invocations no note is taken from: {idle}"


# the replayed measure runs take 8 s of the default run's two minutes: CI's slow run has them
HEAVY = {"measure confirmed", "measure strict against h100"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in INVOCATIONS],
)
def test_the_invocation_renders_its_notes_from_real_values(name, inputs):
    rendered = rendered_by(name, inputs)
    produced = {item.id for item in rendered}
    expected = {note_id for note_id, source in SOURCES.items() if source == name}
    lost = sorted(expected - produced)
    assert not lost, f"{name!r} no longer produces {lost}: give those notes another invocation"
    for item in rendered:  # every note it renders, not only those it is the source of
        check_words(item)


@pytest.mark.slow
def test_measure_notes_from_real_runs_on_this_cpu(inputs):
    """The notes the stand-ins give, from `kvplan measure` run for real: one device run and one
    two-rank gloo run on this machine's CPU (what each check finds depends on the machine)."""
    caught: list[Rendered] = []
    with _caught(caught):
        cli(*MEASURE)(inputs)
        cli("measure", "--distributed", "--quick")(inputs)
    produced = {item.id for item in caught}
    assert {
        "measure-method", "measure-workload", "measure-threads", "measure-bandwidth",
        "measure-cpu-fp32", "measure-gather", "measure-no-datasheet", "distributed-method",
        "distributed-reduce", "distributed-send", "distributed-sizes", "distributed-rounds",
    } <= produced  # fmt: skip
    for item in caught:
        check_words(item)
