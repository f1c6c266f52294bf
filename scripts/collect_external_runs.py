"""Rebuild the SGLang-cookbook part of tests/data/sim_bench_cases_external.json.

    python scripts/collect_external_runs.py COOKBOOK_GIT_DIR [--update FILE]

COOKBOOK_GIT_DIR is a git clone (or bare mirror) of sgl-project/sgl-cookbook; the runs are read
at COMMIT below. Every printed `Serving Benchmark Result` block of a `python3 -m
sglang.bench_serving` run on the random or ShareGPT dataset whose server command serves a
bundled model is kept, its numbers copied from the block as printed; its `serve_cmd` and
`bench_cmd` are the nearest preceding code blocks that start a server and run the bench
(backslash continuations joined). A block whose printed concurrency or request count disagrees
with that bench command is dropped (the pairing is wrong), and so is a block whose output
throughput differs from its generated tokens / duration by more than 5% (it contradicts itself). Every run
is kept: what kvplan simulate lacks for one is computed when it is replayed (tests/sim_replay.py
needs()), not stored; a block's printed acceptance length is kept as spec_accept_length. The rest of the file (vLLM recipes, issue threads)
was copied by hand; see tests/data/README.md."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    "Max request concurrency": "printed_concurrency",
    "Traffic request rate": "printed_rate",
    "Accept length": "accept_length",
}
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


def runs_in(repo: str, path: str) -> list[dict]:
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{COMMIT}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    lines = text.split("\n")
    serve = bench = None
    out = []
    for start, body in fenced_blocks(lines):
        command = joined(body)
        if (
            "launch_server" in command
            or command.startswith("sglang serve")
            or " sglang serve " in command
        ):
            if "bench_serving" not in command and "--dataset-name" not in command:
                serve = command
        if "sglang.bench_serving" in command or (
            command.startswith("sglang serve") and "--dataset-name" in command
        ):  # Llama3.1.md prints its bench commands under the server's name
            bench = command
        for k, line in enumerate(body):
            if "Serving Benchmark Result" not in line:
                continue
            measured = {}
            for row in body[k + 1 :]:
                if row.startswith("=====") and measured:
                    break
                m = re.match(r"^\s*([^:]+?):\s+(\S+)", row)
                if m and m.group(1).strip() in FIELDS:
                    measured.setdefault(FIELDS[m.group(1).strip()], number(m.group(2)))
            before = lines[: start + k]
            hardware = next((x for x in reversed(before) if "Hardware:" in x), "")
            version = next((x for x in reversed(before) if re.search(r"(?i)sglang version", x)), "")
            out.append(
                {
                    "line": start + k + 1,
                    "hardware": hardware,
                    "version": version,
                    "serve": serve,
                    "bench": bench,
                    "measured": measured,
                    "path": path,
                }
            )
    return out


def case_of(raw: dict) -> tuple[dict | None, str]:
    from kvplan.inputs.sources import resolve_variant

    serve, bench, m = raw["serve"], raw["bench"], raw["measured"]
    if not serve or not bench:
        return None, "no serve or bench command before the block"
    hardware = re.sub(r"^[\s\-*]*Hardware:\s*", "", raw["hardware"]).strip()
    if "," in re.sub(r"\([^)]*\)", "", hardware):
        return None, f"several GPUs named for one section: {hardware}"
    sargv, bargv = shlex.split(serve), shlex.split(bench)
    model = flag(sargv, "--model-path", "--model")
    dataset = flag(bargv, "--dataset-name") or "sharegpt"
    if dataset not in ("random", "sharegpt"):
        return None, f"dataset {dataset}"
    if resolve_variant(model) is None:
        return None, f"model {model} not bundled"
    if flag(bargv, "--num-prompts", "--num-prompt") is None:
        return None, "the bench command gives no --num-prompts"
    num_prompts = int(flag(bargv, "--num-prompts", "--num-prompt"))
    concurrency = flag(bargv, "--max-concurrency")
    concurrency = int(concurrency) if concurrency else None
    rate = flag(bargv, "--request-rate")
    rate = None if rate in (None, "inf") else float(rate)
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
    if gpu_profile == "?":
        return None, f"GPU {hardware} unknown"
    tp = int(flag(sargv, "--tp", "--tp-size") or 1)
    dp = int(flag(sargv, "--dp", "--dp-size") or 1)
    ep = int(flag(sargv, "--ep", "--ep-size") or 1)
    version = re.search(r"(\d+\.\d+\.\d+[\w.+]*)", raw["version"])
    notes = [
        "sglang.bench_serving random dataset with its default --random-range-ratio: prompt and "
        "output lengths vary per request; input_len/output_len are the printed totals / completed"
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
    if flag(bargv, "--dataset-name") is None:
        notes.append(
            "the bench command names no --dataset-name: sglang.bench_serving's default, sharegpt"
        )
    if not version:
        notes.append(
            f"engine version as the doc states it: {raw['version'].strip() or 'not stated'}"
        )
    if "median_tpot_ms" not in m:
        notes.append("the block prints no median TPOT")
    base = Path(raw["path"]).stem.lower()
    lens = (
        f"{flag(bargv, '--random-input-len') or 1024}-{flag(bargv, '--random-output-len') or 1024}"
        if dataset == "random"
        else f"{num_prompts}"
    )
    cid = f"sglcb-{base}-{ID_GPU.get(gpu_profile, gpu_profile)}-tp{tp}-{dataset}-{lens}-c{concurrency or 'inf'}-L{raw['line']}"
    completed = m["completed"]
    case = {
        "id": cid,
        "url": f"https://github.com/sgl-project/sgl-cookbook/blob/{COMMIT}/{raw['path']}#L{raw['line']}",
        "source": SOURCE,
        "engine": "sglang",
        "engine_version": version.group(1) if version else None,
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
        "measured": {
            k: m[k]
            for k in (
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
            if k in m
        },
        "spec_accept_length": m.get("accept_length"),
        "spec_accept_length_docs": None,
        "bundled_config_differs": None,
        "record_mismatch": None,
        "notes": "; ".join(notes),
    }
    return case, ""


def split_of(case_id: str) -> str:
    """The rule fixed before any error was looked at: the first byte of sha256(id), even ->
    calibrate, odd -> validate."""
    return "calibrate" if hashlib.sha256(case_id.encode()).digest()[0] % 2 == 0 else "validate"


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
    for path in sorted(p.split(":", 1)[1] for p in paths):
        for raw in runs_in(repo, path):
            case, why = case_of(raw)
            if case is None:
                dropped.append(f"{path}#L{raw['line']}: {why}")
                continue
            case["split"] = split_of(case["id"])
            cases.append(case)
    if len(sys.argv) > 3 and sys.argv[2] == "--update":  # replace this source's runs in FILE
        target = Path(sys.argv[3])
        data = json.loads(target.read_text(encoding="utf-8"))
        others = [c for c in data["cases"] if c["source"] != SOURCE]
        data["cases"] = cases + others
        target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(cases)} cookbook runs, {len(others)} others; left out:", *dropped, sep="\n")
        return
    json.dump({"cases": cases, "dropped": dropped}, sys.stdout, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
