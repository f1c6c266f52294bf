"""What every command shares: the one-line error handling, the options that mean the same thing
in every command (with their ranges checked at the edge), and writing the output."""

import functools
import inspect
import math
import re
from pathlib import Path
from typing import Any

import typer

from kvplan.cli import signals
from kvplan.dtypes import WEIGHT_DTYPE_HELP
from kvplan.errors import KvplanError
from kvplan.present.escape import error_line, terminal_text
from kvplan.present.render import OutputFormat

MODEL_HELP = (
    "Path to a config.json or its folder (an existing path is read first), bundled name "
    "(kvplan models), or Hugging Face repo id."
)
CTX_DEFAULT = "8k"  # the same default context in every command
CTX_HELP = (
    "Context length(s) in tokens: 8192, 8k, 128k (k = 1024), 1m, 32,768; comma-separated for "
    "several."
)
BATCH_HELP = "Batch size(s), concurrent sequences: 1 or 1,8,64."
GPU_HELP = "GPU profile: name, alias (h100, a100, ...), a YAML file, or local (this machine's GPU)."
MAX_BATCH = 1 << 24
MAX_TP = 1024


def command(fn):
    """Turn KvplanError into one line on stderr (escaped for a terminal: messages quote file
    names and contents) and exit code 2 — unless a signal stopped the run first: then the
    error is a consequence of the stop, and the run ends as stopped."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KvplanError as exc:
            stop = signals.stopped()
            if stop is not None:  # the error followed a stop (main() says "stopped by ...")
                raise stop from None
            typer.echo(error_line(exc), err=True)
            raise typer.Exit(2) from None

    return wrapper


# ---- options: one definition each, so each means the same thing everywhere ------------------
def model_argument() -> Any:
    return typer.Argument(..., help=MODEL_HELP)


def models_argument() -> Any:
    return typer.Argument(..., help=MODEL_HELP + " Several give one table.")


def allow_long_option() -> Any:
    return typer.Option(
        False,
        "--allow-long-max-model-len",
        help="A --max-model-len past the length the engine derives from the config, as "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
        "allow it (else refused, as the engine refuses to start).",
    )


def format_option() -> Any:
    return typer.Option(OutputFormat.table, "--format", "-f", help="Output format.")


def ctx_option(default: str = CTX_DEFAULT, help: str = CTX_HELP) -> Any:
    return typer.Option(default, "--ctx", help=help)


def batch_option(default: str = "1", help: str = BATCH_HELP) -> Any:
    return typer.Option(default, "--batch", help=help)


# The engines' serve flags, each spelled once: vLLM's spellings, then SGLang's where it names
# the flag otherwise. `kvplan engine`, `simulate` and `plan` declare every one of them through
# serve_option, so a flag is accepted under the same names wherever it is taken.
SERVE_FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "tp": (("--tensor-parallel-size", "--tp"), ()),
    "pp": (("--pipeline-parallel-size", "--pp"), ()),
    "max_num_seqs": (("--max-num-seqs",), ("--max-running-requests",)),
    "max_num_batched_tokens": (("--max-num-batched-tokens",), ("--chunked-prefill-size",)),
    "max_model_len": (("--max-model-len",), ("--context-length",)),
    "kv_cache_dtype": (("--kv-cache-dtype",), ()),
    "mamba_cache_dtype": (("--mamba-cache-dtype",), ()),
    "mamba_ssm_cache_dtype": (("--mamba-ssm-cache-dtype",), ()),
    "gpu_memory_utilization": (("--gpu-memory-utilization", "--gpu-mem-util"), ()),
    "mem_fraction_static": ((), ("--mem-fraction-static",)),
    "quantization": (("--quantization", "-q"), ()),
    "kv_cache_memory": (("--kv-cache-memory",), ()),
    "block_size": (("--block-size",), ("--page-size",)),
    "data_parallel_size": (("--data-parallel-size", "-dp"), ("--dp-size", "--dp")),
    "enable_expert_parallel": (("--enable-expert-parallel", "-ep"), ()),
    "ep_size": ((), ("--ep-size", "--expert-parallel-size")),
    "enable_dp_attention": ((), ("--enable-dp-attention",)),
    "enable_dp_lm_head": ((), ("--enable-dp-lm-head",)),
    "moe_dense_tp_size": ((), ("--moe-dense-tp-size",)),
    "attention_backend": (("--attention-backend",), ()),  # SGLang spells it the same
    "prefill_attention_backend": ((), ("--prefill-attention-backend",)),
    "decode_attention_backend": ((), ("--decode-attention-backend",)),
    "nsa_prefill_backend": ((), ("--nsa-prefill-backend",)),
    "nsa_decode_backend": ((), ("--nsa-decode-backend",)),
    "moe_backend": (("--moe-backend",), ()),
    "moe_runner_backend": ((), ("--moe-runner-backend",)),
}
# the attention-backend flags (SERVE_FLAGS' names) and each one's help
ATTENTION_BACKEND_FLAGS = {
    "attention_backend": "The engine's attention kernels as it names them (vLLM from 0.13: "
    "FLASH_ATTN, FLASHINFER, FLASHMLA, ..., auto from 0.18; SGLang: fa3, flashinfer, triton, "
    "flashmla, trtllm_mla, ...): the page size they force and the backends the engine refuses "
    "for the model and GPU.",
    "prefill_attention_backend": "SGLang (from 0.4.9.post5): the prefill phase's attention "
    "backend.",
    "decode_attention_backend": "SGLang (from 0.4.9.post5): the decode phase's attention backend.",
    "nsa_prefill_backend": "SGLang (from 0.5.4), DeepSeek sparse attention models: the prefill "
    "NSA kernels.",
    "nsa_decode_backend": "SGLang (from 0.5.4), DeepSeek sparse attention models: the decode "
    "NSA kernels.",
}
# the kernel-backend flags (SERVE_FLAGS' names, kvplan.engines.backends.Backends' fields): the
# attention ones and each engine's MoE kernel flag
BACKEND_FLAGS = {
    **ATTENTION_BACKEND_FLAGS,
    "moe_backend": "vLLM (0.19 on): the MoE kernels as vLLM names them (auto, triton, "
    "deep_gemm, cutlass, flashinfer_trtllm, ...): the names and launches vLLM refuses; MoE times "
    "stay on kvplan's default kernel tables.",
    "moe_runner_backend": "SGLang (0.5): the MoE kernels as SGLang names them (auto, triton, "
    "triton_kernel, flashinfer_trtllm, flashinfer_cutlass, flashinfer_mxfp4, ...): the names and "
    "launches SGLang refuses; MoE times stay on kvplan's default kernel tables.",
}


def backends_of(values: dict[str, Any]) -> Any:
    """The kernel-backend flags given (`values`: BACKEND_FLAGS' names to the options' values,
    more keys ignored) as the one record every request carries."""
    from kvplan.engines.backends import Backends

    return Backends(**{name: values[name] for name in BACKEND_FLAGS})


def with_backends(fn):
    """Command `fn` with the kernel-backend flags (BACKEND_FLAGS, as the engines spell them) as
    its options in place of its `backends` parameter, which receives them as one Backends
    record (backends_of): plan and simulate declare and build them here, once."""
    signature = inspect.signature(fn)
    params = []
    for param in signature.parameters.values():
        if param.name != "backends":
            params.append(param)
            continue
        params.extend(
            inspect.Parameter(name, param.kind, default=backend_option(name), annotation=str)
            for name in BACKEND_FLAGS
        )

    @functools.wraps(fn)
    def wrapper(**options: Any) -> Any:
        backends = backends_of(options)
        rest = {k: v for k, v in options.items() if k not in BACKEND_FLAGS}
        return fn(**rest, backends=backends)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    annotations = {k: v for k, v in fn.__annotations__.items() if k != "backends"}
    wrapper.__annotations__ = {**annotations, **dict.fromkeys(BACKEND_FLAGS, str)}
    return wrapper


# vLLM's recurrent-state dtype flags (engines.vllm.state_dtypes) and each one's help
MAMBA_DTYPE_FLAGS = {
    "mamba_cache_dtype": "vLLM: the recurrent state's dtype, conv and SSM (auto: the model "
    "dtype; float32, float16; bfloat16 from 0.32).",
    "mamba_ssm_cache_dtype": "vLLM: the SSM state's dtype alone (auto: the architecture's, "
    "Nemotron-H float32 from 0.21, else --mamba-cache-dtype's; float32, float16; bfloat16 "
    "from 0.32).",
}


def mamba_dtype_option(name: str) -> Any:
    """One of vLLM's recurrent-state dtype flags (MAMBA_DTYPE_FLAGS), as vLLM spells it."""
    return serve_option(name, None, MAMBA_DTYPE_FLAGS[name], engines=("vllm",))


def backend_option(name: str) -> Any:
    """One of the kernel-backend flags (BACKEND_FLAGS), as the engines spell it."""
    return serve_option(name, None, BACKEND_FLAGS[name])


def serve_option(
    name: str,
    default: Any,
    help: str,
    *,
    engines: tuple[str, ...] = ("vllm", "sglang"),
    extra: tuple[str, ...] = (),
    **kwargs: Any,
) -> Any:
    """The engines' serve flag `name` (SERVE_FLAGS) with this command's default and help,
    spelled as each of `engines` spells it; `extra`: more spellings this command takes beside
    the engines' (kvplan engine's --ctx)."""
    vllm, sglang = SERVE_FLAGS[name]
    spellings = (vllm if "vllm" in engines else ()) + (sglang if "sglang" in engines else ())
    return typer.Option(default, *spellings, *extra, help=help, **kwargs)


def tp_option(default: int | None = 1) -> Any:
    return typer.Option(
        default,
        "--tp",
        min=1,
        max=MAX_TP,
        help="Tensor-parallel degree (1 to 1024): per-GPU figures.",
    )


def pp_option(default: int | None = 1) -> Any:
    return typer.Option(
        default, "--pp", min=1, max=MAX_TP, help="Pipeline-parallel degree (1 to 1024)."
    )


def dp_attention_option() -> Any:
    return typer.Option(
        None,
        "--dp-attention",
        min=2,
        max=1 << 16,
        help="MoE models: attention data-parallel over N ranks, experts spread over them (EP); "
        "2 to 65,536. Default: kvplan chooses TP/PP/DP attention unless --tp or --pp is given.",
    )


def gpu_option(default: str = "h100") -> Any:
    return typer.Option(default, "--gpu", help=GPU_HELP)


def kv_dtype_option() -> Any:
    return typer.Option(
        "auto",
        "--kv-dtype",
        help="KV dtype: auto (the model's), fp32, bf16, fp16, fp8, int8, int4, or a llama.cpp "
        "type with its block scales: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl.",
    )


def weights_dtype_option() -> Any:
    return typer.Option(
        "auto",
        "--weights-dtype",
        help=f"Weights dtype: {WEIGHT_DTYPE_HELP}.",
    )


def kv_group_size_option() -> Any:
    return typer.Option(
        32, "--kv-group-size", min=1, max=4096, help="int4 KV: values per scale group (1 to 4096)."
    )


def fraction(value: float, what: str, low: float = 0.05, high: float = 1.0) -> float:
    """A fraction option checked at the edge (typer's ranges let NaN through)."""
    if value is None:
        return value
    if not math.isfinite(value) or not low <= value <= high:
        raise KvplanError(f"{what} {value} must be between {low:g} and {high:g}")
    return value


def gpu_mem_util_option(default: float | None = 0.9) -> Any:
    return typer.Option(
        default,
        "--gpu-mem-util",
        "--gpu-memory-utilization",
        help="Fraction of the GPU's memory used (0.05 to 1).",
    )


def output_path(value: object, what: str = "output") -> Path:
    """An output option's value as typed, checked before it becomes a Path: Path() drops a
    trailing '/', so `--out ./r.md/` (a folder's spelling) would write a file `r.md`."""
    if isinstance(value, Path):  # a default, not typed
        return value
    from kvplan.atomic import check_spelling

    return Path(check_spelling(str(value), what))


def path_option(default: Path | None, *names: str, help: str) -> Any:
    """An option naming a file kvplan writes (its raw spelling checked: `output_path`)."""
    return typer.Option(
        default,
        *names,
        help=help,
        parser=lambda value: output_path(value, names[0]),
        metavar="PATH",
    )


def out_option(
    default: Path | None = None, help: str = "Write here instead of standard output ('-')."
):
    return path_option(default, "--out", "-o", help=help)


# ---- parsing the shared options ---------------------------------------------------------------
def contexts(text: str) -> tuple[int, ...]:
    from kvplan.inputs.options import parse_token_list

    return tuple(parse_token_list(text))


def one_context(text: str, what: str = "--ctx") -> int:
    from kvplan.inputs.options import parse_tokens

    return parse_tokens(text, what=what)


def batches(text: str) -> tuple[int, ...]:
    from kvplan.inputs.options import parse_int_list

    return tuple(parse_int_list(text, what="batch size", maximum=MAX_BATCH))


def dtype_list(text: str) -> tuple[str, ...]:
    names = tuple(d.strip() for d in str(text).split(",") if d.strip())
    if not names:
        raise KvplanError("no KV dtype given")
    return names


def load_model(name: str):
    from kvplan.inputs.sources import load_model as load

    return load(name)


def load_models(names: list[str]) -> list:
    """Each model argument read once, in order; the same model twice is refused (one row each
    would only repeat it)."""
    from kvplan.plans.size import MAX_MODELS

    if len(names) > MAX_MODELS:
        raise KvplanError(f"{len(names):,} models: at most {MAX_MODELS} in one table")
    specs = [load_model(name) for name in names]
    seen: dict[str, str] = {}
    for name, spec in zip(names, specs, strict=True):
        if spec.name in seen:
            raise KvplanError(f"{name} and {seen[spec.name]} are the same model ({spec.name})")
        seen[spec.name] = name
    return specs


def load_gpu(name: str, allow_bare: bool = False):
    from kvplan.inputs.hardware import load_profile

    return load_profile(name, allow_bare=allow_bare)


def load_gpus(names: list[str]) -> list:
    """Repeated --gpu values, in order, repeats dropped; `all` is every bundled GPU profile."""
    from kvplan.inputs.hardware import bundled_profiles, load_profile

    out, seen = [], set()
    for name in names:
        if str(name).strip().lower() == "all":
            found = [p for _, p in sorted(bundled_profiles().items()) if p.vendor != "CPU"]
        else:
            found = [load_profile(name)]
        for profile in found:
            if profile.key not in seen:
                seen.add(profile.key)
                out.append(profile)
    return out


def gpus_option(default: list[str], help_text: str) -> Any:
    return typer.Option(default, "--gpu", help=help_text)


def price_option() -> Any:
    return typer.Option(
        None,
        "--price",
        help="USD per GPU-hour for a GPU, overriding hardware_profiles/prices.yaml: h100=2.49. "
        "Repeat the option.",
    )


def prices(values: list[str] | None) -> dict:
    from kvplan.inputs.prices import parse_price

    return dict(parse_price(v) for v in values or [])


def emit(text: str, out: Path | None = None) -> None:
    from kvplan.present.output import write_text

    write_text(text, out)


def render(view, fmt, out: Path | None = None) -> str:
    """The view in `fmt`. The table format is fitted to standard output (a terminal: rich, its
    width, colour; a pipe or a file: plain text); CSV's notes go to standard error, one `note:`
    line each, so the CSV itself is one clean table."""
    from kvplan.present.render import render as render_view

    fmt = OutputFormat(fmt)
    if fmt is OutputFormat.table:
        from kvplan.atomic import is_stdout
        from kvplan.present.tty import PIPE_WIDTH, Terminal, detect

        terminal = detect() if is_stdout(out) else Terminal(PIPE_WIDTH, rich=False, colour=None)
        if not terminal.rich:  # a pipe or a file: the plain text, no rich renderer imported
            from kvplan.present.render import render_table

            return render_table(view, terminal.width)
        from kvplan.present.terminal import render_for

        return render_for(view, terminal)
    if fmt is OutputFormat.csv:
        for words in view.notes:
            typer.echo(f"note: {terminal_text(words)}", err=True)
    return render_view(view, fmt)


def engine_version_option():
    """--engine-version: the release of the engine simulated (simulate's --engine, plan's
    --emit) whose rules and defaults apply; checked by check_engine_version."""
    from kvplan.engines.releases import VLLM_VERSION

    return typer.Option(
        None,
        "--engine-version",
        help="The engine's release whose rules and defaults apply: vLLM 0.6 on (default "
        f"{VLLM_VERSION}), SGLang 0.4 or 0.5 (default; another runs with the nearest, noted).",
    )


def check_engine_version(engine: str, version: str | None) -> str | None:
    """--engine-version as given less the whitespace around it (the one edge both engines'
    releases pass: '0.19 ' runs, and is named, as 0.19), or a one-line error for what no
    release of `engine` spells (kvplan.simulate.setup.check_engine_version)."""
    from kvplan.simulate.setup import check_engine_version as check

    if version is not None:
        version = version.strip()
        check(engine, version)
    return version


def seed_option():
    """--seed of the synthetic workloads (simulate's and plan's)."""
    return typer.Option(
        None,
        "--seed",
        min=0,
        max=2**31,
        help="Random seed (default 0; with SGLang's random dataset 1, its client's default).",
    )


def dcp_option():
    """vLLM's --decode-context-parallel-size / -dcp (SGLang has none)."""
    return typer.Option(
        1,
        "--decode-context-parallel-size",
        "-dcp",
        "--dcp",
        help="vLLM: shard the KV cache along tokens over this many ranks of the TP group "
        "(divides --tp, at most tp / KV heads).",
    )


def nnodes_option():
    """The nodes one launch spans: SGLang's --nnodes, vLLM's (its multiprocessing multi-node
    flag; with Ray vLLM takes none, so kvplan asks for it)."""
    return typer.Option(
        1,
        "--nnodes",
        min=1,
        max=1024,
        help="Nodes the launch spans (SGLang, vLLM): collectives between them priced on the "
        "profile's inter-node network (--network-gbps overrides).",
    )


def dp_local_option():
    """vLLM's --data-parallel-size-local / -dpl."""
    return typer.Option(
        None,
        "--data-parallel-size-local",
        "-dpl",
        min=1,
        max=1024,
        help="vLLM: DP ranks on each node (divides --data-parallel-size; the nodes are the "
        "quotient).",
    )


def launch_only_option(*names: str, flag: bool = False):
    """A multi-node launch flag that changes nothing kvplan prices (addresses, ports, a
    node's rank, Ray or multiprocessing): taken as the engines spell it."""
    return typer.Option(
        False if flag else None,
        *names,
        help="Accepted as the engine spells it; changes nothing kvplan prices.",
    )


# vLLM's ParallelConfig.distributed_executor_backend (DistributedExecutorBackend, 0.19)
DISTRIBUTED_EXECUTOR_BACKENDS = ("ray", "mp", "uni", "external_launcher")
# the launch-only flags one engine's parser takes and the other's refuses (vLLM's EngineArgs and
# serve parser; SGLang's ServerArgs: --dist-init-addr, alias --nccl-init-addr); both take
# --nnodes and --node-rank
VLLM_LAUNCH_FLAGS = (
    "--master-addr",
    "--master-port",
    "--distributed-executor-backend",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-start-rank",
    "--headless",
)
SGLANG_LAUNCH_FLAGS = ("--dist-init-addr",)
MAX_PORT = 65535


def _launch_int(value: object, what: str, low: int, high: int) -> None:
    """An integer launch flag as the engines' int() reads it, within [low, high]; a few digits
    at most (int() of 4,301 digits raises)."""
    from kvplan.inputs.options import ascii_number

    text = ascii_number(str(value), what).strip()
    if re.fullmatch(r"[0-9]{1,12}", text) is None or not low <= int(text) <= high:
        raise KvplanError(f"{what} {text[:20]!r} must be an integer from {low:,} to {high:,}")


def check_launch_flags(engine: str, nnodes: int, dp: int, given: dict[str, Any]) -> None:
    """The launch-only flags (`given`: flag -> value, None or False when left out), refused as
    the engine would refuse them, one line each: another engine's flag, --node-rank beyond
    --nnodes, --data-parallel-start-rank beyond --data-parallel-size, a port outside 1-65535, an
    executor backend vLLM does not know. The values change nothing priced."""
    others = {"vllm": SGLANG_LAUNCH_FLAGS, "sglang": VLLM_LAUNCH_FLAGS}.get(engine, ())
    for flag in others:
        if given.get(flag) not in (None, False):
            whose = "vLLM's" if flag in VLLM_LAUNCH_FLAGS else "SGLang's"
            raise KvplanError(f"{flag} is {whose}; --engine {engine} does not take it")
    for flag, limit in (("--node-rank", nnodes), ("--data-parallel-start-rank", dp)):
        if given.get(flag) is not None:
            _launch_int(given[flag], flag, 0, limit - 1)
    for flag in ("--master-port", "--data-parallel-rpc-port"):
        if given.get(flag) is not None:
            _launch_int(given[flag], flag, 1, MAX_PORT)
    backend = given.get("--distributed-executor-backend")
    if backend is not None and backend not in DISTRIBUTED_EXECUTOR_BACKENDS:
        raise KvplanError(
            f"--distributed-executor-backend {str(backend)[:40]!r}: choose from "
            f"{', '.join(DISTRIBUTED_EXECUTOR_BACKENDS)}"
        )


def enforce_eager_option():
    """vLLM's --enforce-eager, SGLang's --disable-cuda-graph."""
    return typer.Option(
        False,
        "--enforce-eager",
        "--disable-cuda-graph",
        help="No CUDA graphs: every step pays the eager per-layer launch cost (vLLM: no graph "
        "memory).",
    )


def disable_piecewise_option():
    return typer.Option(
        False,
        "--disable-piecewise-cuda-graph",
        help="SGLang: prefill batches without piecewise CUDA graphs (their default from "
        "0.5.10): every prefill batch pays the eager per-layer launch cost.",
    )


def enable_piecewise_option():
    return typer.Option(
        False,
        "--enable-piecewise-cuda-graph",
        help="SGLang 0.5 before 0.5.10: prefill batches under piecewise CUDA graphs (the "
        "default from 0.5.10, where the flag is deprecated).",
    )


def piecewise_max_tokens_option():
    return typer.Option(
        None,
        "--piecewise-cuda-graph-max-tokens",
        min=1,
        max=1 << 20,
        help="SGLang: the longest prefill batch run under piecewise CUDA graphs (default: "
        "the chunked prefill size, 2,048 for MLA models).",
    )


def piecewise_flags(
    disable: bool, enable: bool, max_tokens: int | None, context_length: int | None = None
):
    """SGLang's piecewise-CUDA-graph flags as given, and --context-length as given
    (engines.sglang.PiecewiseFlags)."""
    from kvplan.engines.request import PiecewiseFlags

    return PiecewiseFlags(bool(disable), bool(enable), max_tokens, context_length)


def radix_flag(engine: str, disable_radix_cache: bool, prefix_caching: bool | None):
    """SGLang's --disable-radix-cache as the prefix-caching switch it is (None: not given)."""
    if not disable_radix_cache:
        return prefix_caching
    if engine != "sglang":
        raise KvplanError(
            "--disable-radix-cache is SGLang's; vLLM takes --no-enable-prefix-caching"
        )
    if prefix_caching:
        raise KvplanError("give --disable-radix-cache or --enable-prefix-caching, not both")
    return False


def mamba_scheduler_strategy_option(lead: str = "SGLang, a recurrent-state hybrid"):
    """SGLang's --mamba-scheduler-strategy, one declaration for `engine`, `simulate` and `plan`
    (`lead`: where the command takes it); its value and spelling checked by mamba_strategy."""
    return typer.Option(
        None,
        "--mamba-scheduler-strategy",
        help=f"{lead}: auto (the default: the release resolves it, from 0.5.14 extra_buffer for "
        "a listed hybrid), no_buffer or extra_buffer (from 0.5.7: the radix cache and overlap "
        "scheduler stay on; each running request holds a track buffer of 2 more states, 1 "
        "without the overlap scheduler or speculating); to 0.5.19.",
    )


def mamba_radix_cache_strategy_option():
    """SGLang's later spelling of --mamba-scheduler-strategy (mamba_strategy)."""
    return typer.Option(
        None,
        "--mamba-radix-cache-strategy",
        help="SGLang 0.5.14 on: --mamba-scheduler-strategy's later spelling (from 0.5.20 the only "
        "one).",
    )


def mamba_strategy(old: str | None, new: str | None, engine: str, version: str) -> str | None:
    """The strategy given under either spelling (None: neither), refused one line where both
    are given or SGLang `version` refuses the spelling (engines.sglang.mamba_strategy_flags);
    a vLLM run refuses either later, as SGLang's."""
    from kvplan.engines.sglang import (
        MAMBA_AUTO,
        MAMBA_STRATEGY_FLAGS,
        check_mamba_strategy_flag,
        check_mamba_strategy_release,
    )

    if old is not None and new is not None:
        raise KvplanError(f"give one of {' and '.join(MAMBA_STRATEGY_FLAGS)}, not both")
    given = old if old is not None else new
    if engine == "sglang":
        for flag, value in zip(MAMBA_STRATEGY_FLAGS, (old, new), strict=True):
            if value is not None:
                check_mamba_strategy_flag(flag, version)
        if given is not None and given.strip().lower() == MAMBA_AUTO:
            # SGLang's own default among its choices (MAMBA_SCHEDULER_STRATEGY_CHOICES): given
            # by name it is the default, which the release resolves (mamba_default_strategy)
            check_mamba_strategy_release(given, version)
            return None
    return given


def speculative_config_option():
    """vLLM's --speculative-config JSON."""
    return typer.Option(
        None,
        "--speculative-config",
        help='vLLM\'s speculative decoding as vllm serve takes it: \'{"method": "mtp", '
        '"num_speculative_tokens": 1}\' (eagle, eagle3, draft_model, ngram; "model": a draft).',
    )


def speculative_algorithm_option():
    return typer.Option(
        None,
        "--speculative-algorithm",
        help="SGLang's speculative decoding: EAGLE, EAGLE3, NEXTN (MTP), STANDALONE, NGRAM.",
    )


def speculative_int_option(flag: str, what: str):
    return typer.Option(None, flag, help=f"SGLang's {what} (unset: SGLang's default).")


def speculative_draft_option():
    return typer.Option(
        None,
        "--speculative-draft-model-path",
        help="SGLang's draft model or EAGLE head (a bundled name or path for STANDALONE).",
    )


def spec_accept_option():
    return typer.Option(
        None,
        "--spec-accept",
        help="Speculative acceptance: a per-token rate in (0, 1], or per-position rates as "
        "vLLM's spec-decode metrics print them (0.82,0.61,0.43); unset: 0.7, noted.",
    )


def spec_accept_length_option():
    return typer.Option(
        None,
        "--spec-accept-length",
        help="Speculative acceptance as a mean acceptance length (vLLM's 'Mean acceptance "
        "length', SGLang's 'accept len'): tokens per round, 1 to k + 1.",
    )


def speculative_fields(
    config, algorithm, num_steps, topk, draft_tokens, draft_path, accept, accept_length
) -> dict:
    """The ServeOptions fields of the speculative flags."""
    return {
        "speculative_config": config,
        "speculative_algorithm": algorithm,
        "speculative_num_steps": num_steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft_tokens,
        "speculative_draft_model_path": draft_path,
        "spec_accept": accept,
        "spec_accept_length": accept_length,
    }
