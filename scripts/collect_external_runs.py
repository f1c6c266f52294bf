"""Rebuild the SGLang-cookbook part of tests/data/sim_bench_cases_external.json.

    python scripts/collect_external_runs.py COOKBOOK_GIT_DIR [--update FILE [--only ID,ID]]

COOKBOOK_GIT_DIR is a git clone (or bare mirror) of sgl-project/sgl-cookbook; the runs are read
at COMMIT below. Every printed `Serving Benchmark Result` block of a `python3 -m
sglang.bench_serving` run on the random or ShareGPT dataset whose server command serves a
bundled model is kept, its numbers copied from the block as printed; its `serve_cmd` and
`bench_cmd` are the nearest preceding code blocks that start a server and run the bench
(backslash continuations joined), except that a block printed under a bold label
("**Latency Benchmark (Text)**") with no bench command since that label takes the page's
command under the same label; its GPU is the one its section heading names, else the page's
"Hardware:" line; a bench command naming another --model than the server's sets
record_mismatch (the server command is not the one that ran). A block whose printed concurrency or request count disagrees
with that bench command is dropped (the pairing is wrong), and so is a block whose output
throughput differs from its generated tokens / duration by more than 5% (it contradicts itself);
a block printed word for word in a doc the cookbook added earlier is a copy of that run, kept
once, under the earlier doc (GLM-5.1.md reprints GLM-5.md's H200 blocks). Every run
is kept: what kvplan simulate lacks for one is computed when it is replayed (tests/sim_replay.py
needs()), not stored; a block's printed acceptance length is kept as spec_accept_length; a
block whose output throughput contradicts its own median TTFT and TPOT under the client's rules
(scripts/bench_consistency.py) is marked `inconsistent`, with the reason its printed means give
or "unexplained". The rest of the file (vLLM recipes, issue threads)
was copied by hand; see tests/data/README.md."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_consistency import check, figure, sequential_one_off  # noqa: E402

COMMIT = "7b5bd9c05e3d86da5161ac2be9b91c19a34bf49d"
SOURCE = "SGLang cookbook (sgl-project/sgl-cookbook)"
FIELDS = {
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration_s",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Median TTFT (ms)": "median_ttft_ms",
    "P99 TTFT (ms)": "p99_ttft_ms",
    "Median TPOT (ms)": "median_tpot_ms",
    "P99 TPOT (ms)": "p99_tpot_ms",
    "Median ITL (ms)": "median_itl_ms",
    # read for the consistency check only (scripts/bench_consistency.py), not stored
    "Mean TTFT (ms)": "mean_ttft_ms",
    "Mean E2E Latency (ms)": "mean_e2e_latency_ms",
    "Max request concurrency": "printed_concurrency",
    "Traffic request rate": "printed_rate",
    "Accept length": "accept_length",
}
# the FIELDS a record stores under "measured"
STORED_FIGURES = (
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "duration_s",
    "completed",
)
# the printed GPU name -> kvplan profile key (None: no profile yet) and architecture family
GPU_PROFILES = (
    (r"GB300", "gb300", "Blackwell"),
    (r"B200", "b200", "Blackwell"),
    (r"H200", "h200-sxm", "Hopper"),
    (r"H100 80GB HBM3", "h100-sxm", "Hopper"),
    (r"A100", "a100-80gb-sxm", "Ampere"),
    (r"H800", "h800-sxm", "Hopper"),
    (r"MI350X", "mi350x", "CDNA4"),
    (r"MI355X", "mi355x", "CDNA4"),
    (r"MI325X", "mi325x", "CDNA3"),
    (r"(?i)MI300X", "mi300x", "CDNA3"),
)
# profiles added after the runs were collected: their ids keep the "nogpu" they were given then,
# so that the ids, and the split fixed by them, do not move
ID_GPU = {"h800-sxm": "nogpu", "mi350x": "nogpu"}
# runs re-collected after their ids were given (the shell-array launch of DeepSeek-V3_2.md 5.3,
# read since; first recorded with the doc's B200 launch): they keep the ids they were first
# collected under, so that the split fixed by the id does not move
V32 = "docs/autoregressive/DeepSeek/DeepSeek-V3_2.md"
G4 = "docs/autoregressive/Google/Gemma4.md"
ID_AS_COLLECTED = {
    (V32, 678): "sglcb-deepseek-v3_2-nogpu-tp8-sharegpt-10-c1-L678",
    (V32, 742): "sglcb-deepseek-v3_2-nogpu-tp8-sharegpt-2048-c1024-L742",
    (V32, 785): "sglcb-deepseek-v3_2-nogpu-tp8-sharegpt-2048-c1024-L785",
    # first collected with the page's "Hardware: H200" line; the section heading says MI300X
    (G4, 871): "sglcb-gemma4-h200-sxm-tp1-random-1024-1024-c1-L871",
    (G4, 898): "sglcb-gemma4-h200-sxm-tp1-random-1024-1024-c100-L898",
}


def fenced_blocks(lines: list[str]):
    i = 0
    while i < len(lines):
        if re.match(r"^\s*```", lines[i]):
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            yield i + 1, lines[i + 1 : j]  # 0-based index of the block's first line
            i = j + 1
        else:
            i += 1


def joined(body: list[str]) -> str:
    parts = [line.strip() for line in body if line.strip() and not line.strip().startswith("#")]
    return re.sub(r"\s+", " ", " ".join(p.rstrip("\\").strip() for p in parts))


def shell_array_command(body: list[str]) -> str | None:
    """The command a block runs through a shell array, as SGLang's cookbook writes a multi-node
    launch (DeepSeek-V3_2.md section 5.3):

        export VAR=value
        NAME=$(echo serve \\
          --flag value ...
        )
        NAME=($NAME)
        sglang "${NAME[@]}" 2>&1 | tee ...

    read as `VAR=value sglang serve --flag value ...` (the exports as the command's environment
    prefix, the program before "${NAME[@]}", the echoed words, comments dropped); None for a
    block without one."""
    lines = [x.strip() for x in body if x.strip() and not x.strip().startswith("#")]
    exports = [m.group(1) for x in lines if (m := re.match(r"^export\s+(\w+=\S+)$", x))]
    for i, line in enumerate(lines):
        start = re.match(r"^(\w+)=\$\(echo\s+(.*)$", line)
        if not start:
            continue
        name, words = start.group(1), [start.group(2)]
        j = i + 1
        while not words[-1].rstrip().endswith(")") and j < len(lines):
            words.append(lines[j])
            j += 1
        echoed = " ".join(w.rstrip("\\").strip() for w in words).rstrip().removesuffix(")")
        call = next((x for x in lines[j:] if f'"${{{name}[@]}}"' in x), None)
        if call is None:
            return None
        program = call.split(f'"${{{name}[@]}}"', 1)[0].strip()
        command = " ".join([*exports, program, echoed.replace("\\", " ")])
        return re.sub(r"\s+", " ", command).strip()
    return None


def uncommented(command: str) -> str:
    """A joined command without its trailing shell comment."""
    return re.sub(r"\s+#.*$", "", command)


def added_flag(prose: list[str]) -> str | None:
    """A bench flag the prose between the bench command and a result block says was added
    ("By adding `--random-range-ratio 1`, ..."): that block ran the command with it."""
    for line in prose:
        m = re.search(r"(?i)\bby adding `(--[\w-]+(?:[ =][^`\s]+)?)`", line)
        if m:
            return m.group(1)
    return None


def random_draws_match(bargv: list[str], m: dict, num_prompts: int) -> bool:
    """Whether a block's printed totals are exactly sglang.bench_serving's random-dataset draws
    for the command's lengths, range ratio and seed (defaults 1024, 1024, 0 and 1): the
    client's seeded numpy draws (kvplan.simulate.workload's sglang-random law) summed."""
    from kvplan.simulate.workload import WorkloadSpec, generate

    if not {"total_input_tokens", "total_output_tokens"} <= set(m):
        return False
    spec = WorkloadSpec(
        num_prompts=num_prompts,
        input_len=int(flag(bargv, "--random-input-len") or 1024),
        output_len=int(flag(bargv, "--random-output-len") or 1024),
        length_dist="sglang-random",
        spread=float(flag(bargv, "--random-range-ratio") or 0.0),
        seed=int(flag(bargv, "--seed") or 1),
    )
    draws = generate(spec)
    return (
        sum(r.input_tokens for r in draws) == m["total_input_tokens"]
        and sum(r.output_tokens for r in draws) == m["total_output_tokens"]
    )


def flag(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value


def serving(serves: list[str], bench: str) -> str | None:
    """The server command a bench ran against: the nearest preceding one that serves the
    bench's --model, else the nearest (GLM-5.md prints its H200 FP8 command, then a ROCm one
    for the bf16 checkpoint, then the H200 FP8 benchmark)."""
    model = flag(shlex.split(bench, comments=True), "--model")
    for command in reversed(serves):
        served = flag(shlex.split(command, comments=True), "--model-path", "--model")
        if model is not None and served == model:
            return command
    return serves[-1] if serves else None


def runs_in(repo: str, path: str) -> list[dict]:
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{COMMIT}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    lines = text.split("\n")
    serve = bench = None
    serves: list[str] = []  # every server command so far, in page order
    out = []
    # each line's nearest markdown heading at or above it (a section may name its own GPU)
    headings, heading = [], ""
    in_fence = False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            heading = line
        headings.append(heading)
    end = 0  # where the last block ended: the prose since is read for an added bench flag
    # a bold label line ("**Latency Benchmark (Text)**") names what the blocks under it run; a
    # section that prints a result under a label without its bench command ran the page's
    # command under the same label (Gemma4.md prints them once, for its first model)
    bench_label, bench_of_label = None, {}
    for start, body in fenced_blocks(lines):
        prose, end = lines[end : start - 1], start + len(body) + 1
        label = next(
            (
                x.strip()
                for x in reversed(lines[: start - 1])
                if re.match(r"^\*\*[^*]+\*\*\s*$", x.strip()) or x.startswith("#")
            ),
            None,
        )
        command = shell_array_command(body) or joined(body)
        if (
            "launch_server" in command
            or command.startswith("sglang serve")
            or " sglang serve " in command
        ):
            if "bench_serving" not in command and "--dataset-name" not in command:
                serve = command
                serves.append(command)
        if "sglang.bench_serving" in command or (
            command.startswith("sglang serve") and "--dataset-name" in command
        ):  # Llama3.1.md prints its bench commands under the server's name
            bench, bench_label = command, label
            if label and label.startswith("**"):
                bench_of_label[label] = command
        for k, line in enumerate(body):
            if "Serving Benchmark Result" not in line:
                continue
            measured, printed = {}, [line]
            for row in body[k + 1 :]:
                printed.append(row)
                if row.startswith("=====") and measured:
                    break
                m = re.match(r"^\s*([^:]+?):\s+(\S+)", row)
                if m and m.group(1).strip() in FIELDS:
                    measured.setdefault(FIELDS[m.group(1).strip()], number(m.group(2)))
            before = lines[: start + k]
            hardware = next((x for x in reversed(before) if "Hardware:" in x), "")
            version = next((x for x in reversed(before) if re.search(r"(?i)sglang version", x)), "")
            run_bench = bench
            if label != bench_label and label in bench_of_label:
                run_bench = bench_of_label[label]
            extra = added_flag(prose) if run_bench else None
            run_serve = serving(serves, run_bench) if run_bench else serve
            out.append(
                {
                    "line": start + k + 1,
                    "hardware": hardware,
                    "heading": headings[start + k - 1],
                    "version": version,
                    "serve": run_serve,
                    "serve_skipped": run_serve is not serve,
                    "written": written(repo, path, start + k + 1)
                    if run_serve and IPC_ENV in run_serve
                    else None,
                    # the command as run: the printed one, its trailing comment cut, the flag
                    "bench": f"{uncommented(run_bench)} {extra}" if extra else run_bench,
                    "bench_label": label if run_bench is not bench else None,
                    "added": extra,
                    "measured": measured,
                    "printed": "\n".join(printed),
                    "path": path,
                }
            )
    return out


# the printed figures a record stores or the checks read (the printed concurrency, rate and
# acceptance are read apart: "not set" and "inf" are words the client prints), and those a
# completed run cannot print as 0 (the checks divide by them)
CHECKED_FIGURES = (*STORED_FIGURES, "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "mean_e2e_latency_ms")  # fmt: skip
NONZERO_FIGURES = ("completed", "duration_s", "total_output_tokens", "output_throughput")


def unreadable_figure(m: dict) -> str | None:
    """Why a block's CHECKED_FIGURES are none a completed run prints (text, NaN, inf, a
    negative, or 0 where NONZERO_FIGURES divide), else None."""
    for key in CHECKED_FIGURES:
        if key not in m:
            continue
        value = m[key]
        number = figure(value)
        if number is None or (number == 0 and key in NONZERO_FIGURES):
            return f"printed {key} {str(value)[:20]!r}: not a figure a completed run prints"
    return None


def case_of(raw: dict) -> tuple[dict | None, str]:
    """The record of one printed block, or None and why it is dropped: a block whose figures
    (unreadable_figure) or whose commands' numbers (an --num-prompts of "$N", a count past
    what kvplan simulates) are none a run prints or takes is dropped with the reason."""
    from kvplan.errors import KvplanError

    why = unreadable_figure(raw["measured"])
    if why:
        return None, why
    try:
        return _case_of(raw)
    except (ValueError, KvplanError) as exc:
        return None, f"the commands give a number no run takes: {str(exc)[:120]}"


def _case_of(raw: dict) -> tuple[dict | None, str]:
    from kvplan.engines.releases import older_than
    from kvplan.inputs.sources import find_bundled

    serve, bench, m = raw["serve"], raw["bench"], raw["measured"]
    if not serve or not bench:
        return None, "no serve or bench command before the block"
    hardware = re.sub(r"^[\s\-*]*Hardware:\s*", "", raw["hardware"]).strip()
    if "," in re.sub(r"\([^)]*\)", "", hardware):
        return None, f"several GPUs named for one section: {hardware}"
    sargv, bargv = shlex.split(serve, comments=True), shlex.split(bench, comments=True)
    model = flag(sargv, "--model-path", "--model")
    variable_model = model is not None and model.startswith("$")
    if variable_model:  # a path in a shell variable: the model the bench command names
        model = flag(bargv, "--model")
    dataset = flag(bargv, "--dataset-name") or "sharegpt"
    num_given = flag(bargv, "--num-prompts", "--num-prompt")
    drawn = (
        flag(bargv, "--dataset-name") is None
        and num_given is not None
        and random_draws_match(bargv, m, int(num_given))
    )
    if drawn:
        dataset = "random"
    if dataset not in ("random", "sharegpt"):
        return None, f"dataset {dataset}"
    if find_bundled(model) is None:
        return None, f"model {model} not bundled"
    if flag(bargv, "--num-prompts", "--num-prompt") is None:
        return None, "the bench command gives no --num-prompts"
    num_prompts = int(flag(bargv, "--num-prompts", "--num-prompt"))
    concurrency = flag(bargv, "--max-concurrency")
    concurrency = int(concurrency) if concurrency else None
    rate = flag(bargv, "--request-rate")
    rate = None if rate in (None, "inf") else float(rate)
    printed_rate = m.get("printed_rate")
    # a finite rate printed where the command gives none: the rate the client ran at (the
    # printed command is not the whole one it ran)
    rate_printed_only = (
        rate is None and isinstance(printed_rate, int | float) and math.isfinite(printed_rate)
    )
    if rate_printed_only:
        rate = float(printed_rate)
    printed_c = m.get("printed_concurrency")
    if printed_c not in (None, "not") and concurrency is not None and int(printed_c) != concurrency:
        return None, f"printed concurrency {printed_c} != bench's {concurrency}"
    if m.get("completed") != num_prompts:
        return None, f"completed {m.get('completed')} != --num-prompts {num_prompts}"
    if {"duration_s", "total_output_tokens", "output_throughput"} <= set(m):
        implied = m["total_output_tokens"] / m["duration_s"]
        if abs(implied / m["output_throughput"] - 1) > 0.05:  # the block contradicts itself
            return None, (
                f"printed output throughput {m['output_throughput']} but generated tokens / "
                f"duration = {implied:.2f}"
            )
    gpu_profile, family = next(
        ((key, fam) for pat, key, fam in GPU_PROFILES if re.search(pat, hardware)), ("?", "?")
    )
    # a section heading that names a GPU ("gemma-4-26B-A4B-it (MoE, 1x MI300X, TP=1)") is the
    # GPU of its blocks, whatever the page's test-environment Hardware line above it says
    heading = re.sub(r"^#+\s*", "", raw.get("heading", "")).strip()
    heading_gpu = next(
        ((key, fam) for pat, key, fam in GPU_PROFILES if re.search(pat, heading)), None
    )
    gpu_from_heading = heading_gpu is not None and heading_gpu[0] != gpu_profile
    if gpu_from_heading:
        assert heading_gpu is not None
        (gpu_profile, family), hardware = heading_gpu, heading
    if gpu_profile == "?":
        return None, f"GPU {hardware} unknown"
    tp = int(flag(sargv, "--tp", "--tp-size") or 1)
    dp = int(flag(sargv, "--dp", "--dp-size") or 1)
    ep = int(flag(sargv, "--ep", "--ep-size") or 1)
    version = re.search(r"(\d+\.\d+\.\d+[\w.+]*)", raw["version"])
    ratio = flag(bargv, "--random-range-ratio")
    notes = [
        (
            "sglang.bench_serving random dataset with its default --random-range-ratio: prompt "
            "and output lengths vary per request"
            if ratio is None
            else f"sglang.bench_serving random dataset with --random-range-ratio {ratio}"
        )
        + "; input_len/output_len are the printed totals / completed"
        if dataset == "random"
        else "ShareGPT prompts"
    ]
    if "bench_serving" not in bench:
        notes.append(
            "the doc prints this bench command as `sglang serve --backend sglang ...` (the bench's "
            "flags under the server's name); recorded as printed"
        )
    if gpu_profile == "a100-80gb-sxm":
        notes.append("the doc says A100 without a memory size; simulated as the 80 GB SXM")
    if drawn:
        notes.append(
            "the bench command names no --dataset-name, but the block's totals "
            f"({m['total_input_tokens']} input, {m['total_output_tokens']} generated tokens) are "
            "exactly sglang.bench_serving's random-dataset draws for its lengths at its seed: "
            "recorded as the random dataset"
        )
    elif flag(bargv, "--dataset-name") is None:
        notes.append(
            "the bench command names no --dataset-name: sglang.bench_serving's default, sharegpt"
        )
    if rate_printed_only:
        notes.append(
            f"the bench command gives no --request-rate but the block prints a traffic request "
            f"rate of {printed_rate}: request_rate is the printed one"
        )
    if raw.get("added"):
        notes.append(f"bench_cmd is the printed command with `{raw['added']}`, as the doc says")
    if variable_model:
        notes.append(
            "the serve command's --model-path is a shell variable; model is the bench command's "
            "--model"
        )
    if "--nnodes" in sargv:
        notes.append(
            f"serve_cmd is node 0's launch of {flag(sargv, '--nnodes')} nodes (each runs it "
            "with its own --node-rank)"
        )
    if not version:
        notes.append(
            f"engine version as the doc states it: {raw['version'].strip() or 'not stated'}"
        )
    stated = version.group(1) if version else None
    own = own_model_release(model) if stated else None
    if stated and own and older_than(stated, own):
        notes.append(
            f"the page states SGLang {stated}, which has no model of its own for this "
            f"checkpoint's architecture (the first release with one is {own}: "
            "kvplan/data/sglang_models.json): the block ran a build the page does "
            f"not name, between the two; engine_version is {own}, the nearest release whose "
            "code has the model the build ran"
        )
        stated = own
    if "median_tpot_ms" not in m:
        notes.append("the block prints no median TPOT")
    if raw.get("bench_label"):
        notes.append(
            f"the section prints no bench command under {raw['bench_label'].strip('*')}: "
            "bench_cmd is the page's command under that label"
        )
    if gpu_from_heading:
        page_gpu = re.sub(r"^[\s\-*]*Hardware:\s*", "", raw["hardware"]).strip()
        notes.append(
            f"the GPU is the section heading's ({heading}); the page's Hardware line says "
            f"{page_gpu}"
        )
    bench_model = flag(bargv, "--model")
    if raw.get("serve_skipped"):
        notes.append(
            f"serve_cmd is the nearest server command before the block that serves {model}, "
            "the bench's --model; a later one serves another checkpoint"
        )
    mismatch = None
    if not variable_model and bench_model is not None and bench_model != model:
        mismatch = (
            f"the bench ran --model {bench_model} but the nearest server command before it serves "
            f"{model}: that command is not the one this block ran (the doc prints none beside it)"
        )
    base = Path(raw["path"]).stem.lower()
    lens = (
        f"{flag(bargv, '--random-input-len') or 1024}-{flag(bargv, '--random-output-len') or 1024}"
        if dataset == "random"
        else f"{num_prompts}"
    )
    cid = f"sglcb-{base}-{ID_GPU.get(gpu_profile, gpu_profile)}-tp{tp}-{dataset}-{lens}-c{concurrency or 'inf'}-L{raw['line']}"
    cid = ID_AS_COLLECTED.get((raw["path"], raw["line"]), cid)
    completed = m["completed"]
    case = {
        "id": cid,
        "url": f"https://github.com/sgl-project/sgl-cookbook/blob/{COMMIT}/{raw['path']}#L{raw['line']}",
        "source": SOURCE,
        "engine": "sglang",
        "engine_version": stated,
        "vllm_version": None,
        "gpu": hardware,
        "gpu_profile": gpu_profile,
        "gpu_family": family,
        "tp": tp,
        "pp": 1,
        "dp": dp,
        "ep": ep,
        "model": model,
        "serve_cmd": serve,
        "bench_cmd": bench,
        "dataset": dataset,
        "input_len": round(m["total_input_tokens"] / completed, 1),
        "output_len": round(m["total_output_tokens"] / completed, 1),
        "num_prompts": num_prompts,
        "max_concurrency": concurrency,
        "request_rate": rate,
        "measured": {k: m[k] for k in STORED_FIGURES if k in m},
        "spec_accept_length": m.get("accept_length"),
        "spec_accept_length_docs": None,
        "bundled_config_differs": None,
        "record_mismatch": mismatch,
        "notes": "; ".join(notes),
    }
    if check(case).flagged:  # its throughput contradicts its own medians: say why, or that
        # the block does not (scripts/bench_consistency.py)
        mark = None
        if "mean_ttft_ms" in m and "mean_e2e_latency_ms" in m:
            mark = sequential_one_off(case, m["mean_ttft_ms"], m["mean_e2e_latency_ms"])
        case["inconsistent"] = mark or {
            "metrics": ["output_throughput"],
            "reason": "unexplained: the printed output throughput contradicts the run's own "
            "median TTFT and TPOT under its bench client's rules, and the block prints nothing "
            "that accounts for it (scripts/bench_consistency.py)",
        }
    if IPC_ENV in serve and raw.get("written"):
        pool = IPC_POOL_MIB[raw["written"] >= IPC_POOL_1GIB_FROM]
        case["replay_flags"] = ["--cuda-ipc-pool-mib", str(pool)]
        day = time.strftime("%Y-%m-%d", time.gmtime(raw["written"]))
        case["notes"] += (
            f"; {IPC_ENV}: the tokenizer process reserves SGLANG_MM_FEATURE_CACHE_MB on GPU 0, "
            f"{pool} MiB by default in a build of {day} (the block's git-blame date; 4096 until "
            "SGLang PR #22662, April 2026, 1024 after): replay_flags --cuda-ipc-pool-mib"
        )
    return case, ""


# SGLANG_USE_CUDA_IPC_TRANSPORT=1 reserves SGLANG_MM_FEATURE_CACHE_MB on GPU 0: 4096 by default
# until sgl-project/sglang PR #22662 ("Reduce default SGLANG_MM_FEATURE_CACHE_MB from 4 GiB to
# 1 GiB", opened 2026-04-13), 1024 after. A block written before that date ran a build with
# 4096 (the cookbook's Qwen3.5 blocks, written 2026-02-16 against "main branch").
IPC_ENV = "SGLANG_USE_CUDA_IPC_TRANSPORT=1"
IPC_POOL_1GIB_FROM = 1776038400  # 2026-04-13 00:00 UTC
IPC_POOL_MIB = (4096, 1024)  # before, from


def own_model_release(model: str) -> str | None:
    """The first SGLang release with a model of its own for checkpoint `model` (a bundled id),
    None where every release kvplan models has one (kvplan.engines.sglang.sglang_own_model_from)."""
    from kvplan.engines.sglang import sglang_own_model_from
    from kvplan.inputs.sources import load_model

    first = sglang_own_model_from(load_model(model, checkpoint=False))
    return None if first is None else first.release


def written(repo: str, path: str, line: int) -> int:
    """When the cookbook line `line` of `path` was written (git blame's author time at COMMIT)."""
    out = subprocess.run(
        ["git", "-C", repo, "blame", "--porcelain", "-L", f"{line},{line}", COMMIT, "--", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(re.search(r"^author-time (\d+)$", out, re.M)[1])


def first_added(repo: str, path: str) -> int:
    """When a doc first entered the cookbook (its first commit's time, up to COMMIT)."""
    times = subprocess.run(
        ["git", "-C", repo, "log", "--format=%ct", COMMIT, "--", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(times[-1]) if times else 0


def copies(raws: list[dict], added: dict[str, int]) -> dict[int, str]:
    """The blocks that are copies: a result block printed word for word in another doc added
    earlier (GLM-5.1.md prints GLM-5.md's two H200 blocks, every figure equal, under its own
    heading) measured one run, not two; the earlier doc's keeps it. Index -> why dropped."""
    first: dict[str, dict] = {}
    for raw in sorted(raws, key=lambda r: (added[r["path"]], r["path"], r["line"])):
        first.setdefault(raw["printed"], raw)
    out = {}
    for i, raw in enumerate(raws):
        kept = first[raw["printed"]]
        if kept is not raw:
            out[i] = (
                f"a copy: the same result block, every figure equal, as {kept['path']}"
                f"#L{kept['line']}, which the cookbook printed first"
            )
    return out


def split_of(case_id: str) -> str:
    """The rule fixed before any error was looked at: the first byte of sha256(id), even ->
    calibrate, odd -> validate."""
    return "calibrate" if hashlib.sha256(case_id.encode()).digest()[0] % 2 == 0 else "validate"


def in_file_order(case: dict, existing: list[dict]) -> dict:
    """A collected run as FILE writes it: its keys in the order of FILE's record of its id (else of
    FILE's first record; the records were written in several orders), so that a run already
    there is rewritten byte for byte."""
    same = [c for c in existing if c["id"] == case["id"]] or existing[:1]
    order = [k for k in same[0] if k in case] if same else []
    return {**{k: case[k] for k in order}, **case}


def main() -> None:
    repo = sys.argv[1]
    paths = subprocess.run(
        [
            "git",
            "-C",
            repo,
            "grep",
            "-l",
            "Serving Benchmark Result",
            COMMIT,
            "--",
            "docs/autoregressive",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    cases, dropped = [], []
    docs = sorted(p.split(":", 1)[1] for p in paths)
    raws = [raw for path in docs for raw in runs_in(repo, path)]
    copied = copies(raws, {path: first_added(repo, path) for path in docs})
    for i, raw in enumerate(raws):
        case, why = (None, copied[i]) if i in copied else case_of(raw)
        if case is None:
            dropped.append(f"{raw['path']}#L{raw['line']}: {why}")
            continue
        case["split"] = split_of(case["id"])
        cases.append(case)
    if len(sys.argv) > 5 and sys.argv[2] == "--update" and sys.argv[4] == "--only":
        # replace only the runs of these ids in FILE, each with its re-collected record
        target, ids = Path(sys.argv[3]), sys.argv[5].split(",")
        data = json.loads(target.read_text(encoding="utf-8"))
        fresh = {c["id"]: c for c in cases if c["id"] in ids}
        if set(fresh) != set(ids):
            sys.exit(f"not collected: {', '.join(sorted(set(ids) - set(fresh)))}")
        data["cases"] = [
            in_file_order(fresh[c["id"]], data["cases"]) if c["id"] in fresh else c
            for c in data["cases"]
        ]
        target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(fresh)} runs re-collected in {target}")
        return
    if len(sys.argv) > 3 and sys.argv[2] == "--update":  # replace this source's runs in FILE
        target = Path(sys.argv[3])
        data = json.loads(target.read_text(encoding="utf-8"))
        others = [c for c in data["cases"] if c["source"] != SOURCE]
        data["cases"] = [in_file_order(c, data["cases"]) for c in cases] + others
        target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(cases)} cookbook runs, {len(others)} others; left out:", *dropped, sep="\n")
        return
    json.dump({"cases": cases, "dropped": dropped}, sys.stdout, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
