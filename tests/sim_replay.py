"""Published serving runs replayed through `kvplan simulate` with the flags their servers ran.

A run's `serve_cmd` (vllm serve / sglang.launch_server, as printed) becomes kvplan simulate's own
arguments: every flag kvplan simulate takes is passed as written (a few engine spellings that
kvplan spells otherwise are renamed: -tp and --tp-size to --tp, SGLang's --ep to --ep-size, vLLM's
dotted --speculative-config.KEY VALUE gathered into one JSON); flags that change nothing kvplan
prices (ports, parsers, templates, names) are dropped; any other flag is an error that names it,
so a run whose flags kvplan cannot express is never replayed silently without them. The workload
is the bench command's, read as its client reads it (`bench_workload`): the random dataset as
that client draws it (SGLang's bench_serving: U[max(1, L r), L] per request from numpy seeded with
its --seed, default 1 and r = 0; vllm bench serve: [L(1 - r), L(1 + r)], r = 0 fixed), with the
command's lengths, range ratio, seed, prompt count, request rate and concurrency limit; ShareGPT
as the stand-in at the run's mean lengths. Nothing is fitted per run."""

from __future__ import annotations

import io
import json
import math
import shlex
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kvplan.errors import KvplanError

DATA = Path(__file__).resolve().parent / "data"
FEATURES_PATH = DATA / "sim_bench_cases_features.json"
EXTERNAL_PATH = DATA / "sim_bench_cases_external.json"
METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")

# the engine's spelling -> kvplan simulate's, where they differ
RENAMED = {
    "-tp": "--tp",
    "--tp-size": "--tp",
    "--tensor-parallel-size": "--tp",
    "--ep": "--ep-size",
    "--dp": "--dp-size",
    "--nccl-init": "--nccl-init-addr",  # argparse's unique prefix of SGLang's alias
    "--speculative-algo": "--speculative-algorithm",  # the same (Qwen3.5.md's NEXTN launch)
    "--mem-frac": "--mem-fraction-static",  # the same (SGLang's benchmark_vllm_060 notes)
    "--tensor": "--tp",  # argparse's unique prefix of vLLM's --tensor-parallel-size (the same)
}
# flags kvplan simulate takes as the engines spell them: name -> takes a value
TAKEN = {
    "--tp": True,
    "--pp": True,
    "--pipeline-parallel-size": True,
    "--data-parallel-size": True,
    "-dp": True,
    "--dp-size": True,
    "--enable-expert-parallel": False,
    "--nnodes": True,
    "--data-parallel-size-local": True,
    "-dpl": True,
    "--ep-size": True,
    "--enable-dp-attention": False,
    "--load-balance-method": True,
    "--max-num-seqs": True,
    "--max-running-requests": True,
    "--max-num-batched-tokens": True,
    "--chunked-prefill-size": True,
    "--max-model-len": True,
    "--context-length": True,
    "--kv-cache-dtype": True,
    "--gpu-memory-utilization": True,
    "--mem-fraction-static": True,
    "--quantization": True,
    "--block-size": True,
    "--page-size": True,
    "--enable-prefix-caching": False,
    "--disable-radix-cache": False,
    "--no-enable-prefix-caching": False,
    "--async-scheduling": False,
    "--decode-context-parallel-size": True,
    "-dcp": True,
    "--enforce-eager": False,
    "--num-scheduler-steps": True,  # vLLM V0's multi-step scheduling (--engine-version 0.6-0.8)
    "--disable-cuda-graph": False,
    "--speculative-config": True,
    "--speculative-algorithm": True,
    "--speculative-num-steps": True,
    "--speculative-eagle-topk": True,
    "--speculative-num-draft-tokens": True,
    "--speculative-draft-model-path": True,
    "--speculative-skip-dp-mlp-sync": False,
    "--mamba-scheduler-strategy": True,
    "--mamba-radix-cache-strategy": True,
    "--attention-backend": True,
    "--prefill-attention-backend": True,
    "--decode-attention-backend": True,
    "--nsa-prefill-backend": True,
    "--nsa-decode-backend": True,
}
# flags that change nothing kvplan prices: name -> takes a value
DROPPED = {
    "--host": True,
    "--port": True,
    "--model": True,
    "--model-path": True,
    "--served-model-name": True,
    "--trust-remote-code": False,
    "--tool-call-parser": True,
    "--reasoning-parser": True,
    "--enable-auto-tool-choice": False,
    "--chat-template": True,
    "--chat-template-content-format": True,
    "--tokenizer-mode": True,
    "--watchdog-timeout": True,
    "--disable-log-requests": False,
    "--log-requests": False,
    "--enable-metrics": False,
    "--allow-auto-truncate": False,  # cuts prompts over the context length: none here
    # where the nodes of a multi-node launch meet, and which one this is: kvplan simulate
    # takes them as written, but a printed command leaves them as shell variables ($RANK)
    "--node-rank": True,
    "--dist-init-addr": True,
    "--nccl-init-addr": True,
    "--master-addr": True,
    "--master-port": True,
    "--data-parallel-address": True,
    "-dpa": True,
    "--data-parallel-rpc-port": True,
    "-dpp": True,
    "--data-parallel-start-rank": True,
    "-dpr": True,
    "--headless": False,
}
# flags kvplan does not model but that leave the schedule, the layout and the CUDA-graph sizes
# as they are (kernel speed only): dropped, and the run's record says so in `notes`
NOT_MODELLED = {"--enable-torch-compile": False}
# environment switches written before the command that choose among kernels of the same step
# (ROCm: AITER kernels, the fused MLA decode kernel): kernel speed only, which the datasheet
# class has no tables for; dropped, and any other VAR=value prefix refuses the run
# (ROCm vLLM: VLLM_USE_TRITON_FLASH_ATTN=0 takes CK's flash attention for Triton's, vllm/envs.py
# "flag to control if vllm should use triton flash attention")
NOT_MODELLED_ENV = {
    "SGLANG_USE_AITER",
    "SGLANG_ROCM_FUSED_DECODE_MLA",
    "VLLM_USE_TRITON_FLASH_ATTN",
}
# environment switches that change nothing kvplan prices in the launch they precede: the SMs
# of DeepEP's low-latency combine (no DeepEP without --moe-a2a-backend deepep), the CPU
# affinity of SGLang's processes (host-side placement) and vLLM's RPC timeout (vllm/envs.py:
# "Time in ms for the zmq client to wait for a response from the backend server": a limit on
# a wait, not a cost)
NO_EFFECT_ENV = {
    "SGLANG_DEEPEP_LL_COMBINE_SEND_NUM_SMS",
    "SGLANG_SET_CPU_AFFINITY",
    "VLLM_RPC_TIMEOUT",
}
# environment switches kvplan simulate takes as a flag whose value the command does not print:
# SGLANG_USE_CUDA_IPC_TRANSPORT=1 reserves SGLANG_MM_FEATURE_CACHE_MB of GPU 0 (its default
# depends on the SGLang build), given in the run's `replay_flags`
ENV_FLAGS = {"SGLANG_USE_CUDA_IPC_TRANSPORT": "--cuda-ipc-pool-mib"}
# what a serve command asks for that needs an acceptance length to simulate
SPECULATIVE_FLAGS = ("--speculative-config", "--speculative-algorithm")


def _flag_value(argv: list[str], i: int) -> tuple[str, str | None, int]:
    """(flag, its inline value or None, index after it) of argv[i] (--flag=value or --flag)."""
    arg = argv[i]
    if arg.startswith("--") and "=" in arg:
        name, value = arg.split("=", 1)
        return name, value, i + 1
    return arg, None, i + 1


def _dashed(arg: str) -> str:
    """A --flag_name (or --flag_name=value) with its name's underscores as dashes, as vLLM's
    FlexibleArgumentParser reads it: the name before any dot only (a dotted key such as
    --speculative-config.num_speculative_tokens keeps the JSON key's spelling)."""
    if not arg.startswith("--"):
        return arg
    name, sep, value = arg.partition("=")
    head, dot, key = name.partition(".")
    return head.replace("_", "-") + dot + key + sep + value


def serve_argv(serve_cmd: str) -> list[str]:
    """The kvplan simulate arguments of a printed serve command (module docstring); raises
    KvplanError naming the first flag kvplan cannot express."""
    argv = shlex.split(serve_cmd)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):  # VAR=value prefixes
        var = argv.pop(0).split("=", 1)[0]
        if var not in NOT_MODELLED_ENV | NO_EFFECT_ENV | set(ENV_FLAGS):
            raise KvplanError(f"{var}: an environment switch kvplan simulate does not model")
    vllm = argv[:2] == ["vllm", "serve"] or "vllm.entrypoints.openai.api_server" in argv
    if argv[:2] == ["vllm", "serve"]:
        argv = argv[3:]  # the model is positional
    elif "vllm.entrypoints.openai.api_server" in argv:  # vLLM's server module: --model X
        argv = argv[argv.index("vllm.entrypoints.openai.api_server") + 1 :]
    elif "sglang.launch_server" in argv:
        argv = argv[argv.index("sglang.launch_server") + 1 :]
    elif argv[:2] == ["sglang", "serve"]:
        argv = argv[2:]
    else:
        raise KvplanError(
            f"not a vllm serve, vLLM api_server or sglang.launch_server command: {serve_cmd[:60]}"
        )
    if vllm:  # its FlexibleArgumentParser reads --max_model_len as --max-model-len
        argv = [_dashed(arg) for arg in argv]
    out: list[str] = []
    speculative: dict = {}
    i = 0
    while i < len(argv):
        name, inline, i = _flag_value(argv, i)
        if name.startswith("--speculative-config."):  # vLLM's dotted form of the JSON
            value = inline if inline is not None else argv[i]
            i += inline is None
            key = name.split(".", 1)[1]
            speculative[key] = int(value) if value.isdigit() else value
            continue
        name = RENAMED.get(name, name)
        for table in (TAKEN, DROPPED, NOT_MODELLED):
            if name in table:
                value = None
                if table[name] and inline is None:
                    value, i = argv[i], i + 1
                elif table[name]:
                    value = inline
                if table is TAKEN:
                    out += [name] if value is None else [name, value]
                break
        else:
            raise KvplanError(f"{name}: a serve flag kvplan simulate does not take")
    if speculative:
        out += ["--speculative-config", json.dumps(speculative)]
    return out


# the bench clients' flags kvplan reads (argparse takes any unique prefix: --num-prompt)
BENCH_FLAGS = (
    "--dataset-name",
    "--random-input-len",
    "--random-output-len",
    "--random-range-ratio",
    "--num-prompts",
    "--max-concurrency",
    "--request-rate",
    "--seed",
    "--ignore-eos",  # vllm bench serve: outputs run to the drawn length (default: to EOS)
    "--disable-ignore-eos",  # sglang.bench_serving: outputs stop at EOS (default: drawn length)
)
# flags of the bench clients that exist but change nothing kvplan replays
BENCH_OTHER = (
    "--backend",
    "--model",
    "--model-path",
    "--host",
    "--port",
    "--base-url",
    "--endpoint",
    "--dataset-path",
    "--trust-remote-code",
    "--tokenizer",
)


# the clients' random-dataset lengths where the command gives none (sglang.bench_serving 0.5,
# vllm bench serve: --random-input-len 1024; --random-output-len 1024 and 128)
BENCH_DEFAULT_LENS = {"sglang": ("1024", "1024"), "vllm": ("1024", "128")}


def bench_client(bench_cmd: str) -> str | None:
    """Whose bench client a command runs: `sglang` for sglang.bench_serving (and the cookbook's
    `sglang serve --backend ...` misprint of it: its flags are bench_serving's, and its runs'
    printed mean input lengths are bench_serving's seeded draws), `vllm` for vllm bench serve
    and benchmark_serving.py; None for no command."""
    words = shlex.split(bench_cmd)[:4] if bench_cmd else []
    head = " ".join(words)
    if "sglang" in head:
        return "sglang"
    if "vllm" in head or "benchmark_serving" in head:
        return "vllm"
    return None


def drawn_outputs(client: str | None, flags: dict[str, str | None]) -> bool:
    """Whether the client's random dataset runs every output to its drawn length, so that the
    replay can draw the run's lengths as the client did: sglang.bench_serving ignores EOS
    unless --disable-ignore-eos; vllm bench serve stops at EOS unless --ignore-eos (then each
    output's length is the model's, and the replay takes the printed means at fixed lengths)."""
    if client == "sglang":
        return "--disable-ignore-eos" not in flags
    return client == "vllm" and "--ignore-eos" in flags


def bench_flags(bench_cmd: str) -> dict[str, str | None]:
    """The flags of a bench command that kvplan replays, by full name: argparse's unique-prefix
    abbreviations (`--num-prompt`, `--random-input`) expanded, `--flag=value` split."""
    out: dict[str, str | None] = {}
    argv = shlex.split(bench_cmd)
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, _, inline = word.partition("=")
        known = [f for f in BENCH_FLAGS + BENCH_OTHER if f == name] or [
            f for f in BENCH_FLAGS + BENCH_OTHER if f.startswith(name)
        ]
        if len(known) != 1:
            raise KvplanError(f"{name}: a bench flag the replay does not read")
        value = inline or None
        if not inline and i < len(argv) and not argv[i].startswith("--"):
            value = argv[i]
            i += 1
        if known[0] in BENCH_FLAGS:
            out[known[0]] = value
    return out


def workload_argv(case: dict) -> list[str]:
    """The bench's workload as kvplan simulate arguments (see the module's docstring)."""
    client = bench_client(case.get("bench_cmd") or "")
    flags = bench_flags(case["bench_cmd"]) if client else {}
    argv = ["--num-prompts", str(case["num_prompts"])]
    if case["dataset"] == "random" and drawn_outputs(client, flags):
        argv += ["--dataset-name", "random", "--bench-client", client]
        default_in, default_out = BENCH_DEFAULT_LENS[client]
        argv += ["--input-len", flags.get("--random-input-len") or default_in]
        argv += ["--output-len", flags.get("--random-output-len") or default_out]
        if flags.get("--random-range-ratio") is not None:
            argv += ["--random-range-ratio", flags["--random-range-ratio"] or ""]
        if flags.get("--seed") is not None:
            argv += ["--seed", flags["--seed"] or ""]
    else:
        argv += [
            "--input-len",
            str(round(case["input_len"])),
            "--output-len",
            str(round(case["output_len"])),
            "--length-dist",
            "sharegpt" if case["dataset"] == "sharegpt" else "fixed",
            "--seed",
            "0",
        ]
    rate = case.get("request_rate")
    argv += ["--request-rate", "inf" if rate is None else f"{rate:g}"]
    if case.get("max_concurrency"):
        argv += ["--max-concurrency", str(case["max_concurrency"])]
    return argv


def replayed_model(case: dict) -> str:
    """The model argument a run replays: its `kvplan_model` (a bundled config, or a config folder
    kept under tests/data/ with the cases, as a path from the repository root: README) else its
    checkpoint id."""
    model = case.get("kvplan_model") or case["model"]
    if model.startswith("tests/data/"):
        return str(DATA / model.removeprefix("tests/data/"))
    return model


def simulate_argv(case: dict, accept_length: float | None = None) -> list[str]:
    """The whole `kvplan simulate` command line of a run: model, GPU, engine and version, the
    serve flags, the run's `replay_flags` (a checkpoint format the bundled config does not state:
    notes say why), the workload and, for a speculative run, the acceptance length given (else
    the one the run reported, else kvplan's default)."""
    argv = [
        "simulate",
        replayed_model(case),
        "--gpu",
        case["gpu_profile"],
        "--engine",
        case["engine"],
    ]
    version = case.get("engine_version")
    if version:
        argv += ["--engine-version", version]
    argv += serve_argv(case["serve_cmd"]) + list(case.get("replay_flags") or ())
    argv += workload_argv(case)
    length = accept_length if accept_length is not None else case.get("spec_accept_length")
    if length is not None:
        argv += ["--spec-accept-length", f"{length:g}"]
    return argv


def replay(case: dict, accept_length: float | None = None) -> dict:
    """Run kvplan simulate in-process on the run's command line; its first run's `bench`,
    `bench_interval`, step-time shares and the step's parts no kernel table times. Raises KvplanError with the CLI's one-line message."""
    from kvplan.cli import main

    argv = simulate_argv(case, accept_length) + ["--format", "json"]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if code != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise KvplanError(lines[-1] if lines else f"kvplan simulate exited {code}")
    doc = json.loads(out.getvalue())
    run = doc["runs"][0]
    return {
        "bench": run["bench"],
        "bench_interval": run.get("bench_interval") or {},
        "step_scaled": run.get("step_scaled") or {},
        "step_time_shares": (run.get("engine") or {}).get("step_time_shares") or {},
        "untimed_time_fraction": (run.get("engine") or {}).get("untimed_time_fraction", 0.0),
        "ttft_untimed_fraction": (run.get("engine") or {}).get("ttft_untimed_fraction", 0.0),
        "frontend_request_fraction": (run.get("engine") or {}).get(
            "frontend_request_fraction", 0.0
        ),
        "untimed_parts": tuple(doc.get("untimed_parts") or ()),
        "borrowed_parts": tuple(doc.get("borrowed_parts") or ()),
    }


def flag_names(serve_cmd: str) -> set[str]:
    """The flags a serve command names, as kvplan spells them (RENAMED: an engine's spelling or
    argparse's unique prefix of it), without values or vLLM's dotted keys."""
    names = {arg.split("=", 1)[0].split(".", 1)[0] for arg in shlex.split(serve_cmd)}
    return {RENAMED.get(name, name) for name in names}


def is_speculative(case: dict) -> bool:
    return bool(flag_names(case["serve_cmd"]) & set(SPECULATIVE_FLAGS))


def accept_length(case: dict) -> float | None:
    """A speculative run's acceptance length as its source states it: the one its result block
    printed (`spec_accept_length`), else one a source gives for that draft
    (`spec_accept_length_docs`); None where no source states one."""
    if case.get("spec_accept_length") is not None:
        return case["spec_accept_length"]
    docs = case.get("spec_accept_length_docs")
    return docs["length"] if docs else None


def needs(case: dict) -> list[str]:
    """Why kvplan simulate cannot replay a published run, computed from the record and what
    simulate takes today (empty: it replays): no GPU profile for the run's GPU; no prompt count
    (InferenceX's blocks print none); a checkpoint
    whose config kvplan does not bundle (`bundled_config_differs` where the id would resolve to
    another checkpoint's config, a fact of the record); a record whose serve command is not the
    one its block ran (`record_mismatch`, likewise); a serve flag or environment switch
    simulate does not take (the replay's own refusal); a speculative run whose source states no
    acceptance length. A run that passes these may still be refused by the simulation itself
    (its memory model, say): that one-line message is printed where it runs."""
    from kvplan.inputs.sources import find_bundled

    out = []
    if case.get("gpu_profile") is None:
        out.append(f"a GPU profile for {case['gpu']}")
    if case.get("record_mismatch"):
        out.append(case["record_mismatch"])
    if case.get("bundled_config_differs"):
        out.append(case["bundled_config_differs"])
    elif not case.get("kvplan_model") and find_bundled(case["model"]) is None:
        out.append(f"a model config for {case['model']} (not bundled)")
    try:
        serve_argv(case["serve_cmd"])
    except KvplanError as exc:
        out.append(str(exc))
    for var, flag in ENV_FLAGS.items():
        if f"{var}=" in case["serve_cmd"] and flag not in (case.get("replay_flags") or ()):
            out.append(f"{var}: the {flag} its SGLang build reserved (the record gives none)")
    if is_speculative(case) and accept_length(case) is None:
        out.append("an acceptance length for the speculative run (its source states none)")
    if case.get("num_prompts") is None:
        out.append("a prompt count (its source prints none)")
    return out


def relative_error(simulated: float, measured: float) -> float:
    return (simulated - measured) / measured


def inside(interval: list[float] | None, value: float) -> bool | None:
    if not interval or any(v is None or not math.isfinite(v) for v in interval):
        return None
    return interval[0] <= value <= interval[1]
