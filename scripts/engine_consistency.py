"""Sweep: do `kvplan engine` and `kvplan simulate` agree on one launch (issue 28)?

For each bundled model x engine x release, runs `kvplan engine` and `kvplan simulate` with the
same flags (GPU, TP, release, --max-model-len) and prints every field where they disagree:
whether each starts at all (one refusing what the other sizes; for vLLM engine's "fits":
false is its refusal), the KV dtype, the KV tokens, the
running-request cap, the token budget, SGLang's mem_fraction_static. `plan --emit` prices a
launch by `simulate` and `capacity --emit` by the engines' allocations, so the pair covers both.

    python scripts/engine_consistency.py [--models a,b] [--gpu h200] [--tp 8] [--json out.json]

Exit status 1 where any launch disagrees. A model both commands refuse is skipped.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout

from kvplan.cli import main
from kvplan.inputs.sources import bundled_models

RELEASES = {"vllm": ("0.19", "0.21", "0.32"), "sglang": ("0.5.9", "0.5.14", "0.5.23")}
RELEASE_FLAG = {"vllm": "--vllm-version", "sglang": "--sglang-version"}
SIM = ("--num-prompts", "2", "--input-len", "64", "--output-len", "4")


def _run(argv: list[str]) -> tuple[dict | None, str]:
    """(the command's JSON, None where it refused) and its one-line error."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main([*argv, "--format", "json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code != 0:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue() else "?"
    return json.loads(out.getvalue()), ""


def compare(model: str, engine: str, release: str, gpu: str, tp: int, ctx: int) -> list[str]:
    """The disagreements between engine and simulate for one launch ([]: none)."""
    common = ["--gpu", gpu, "--tp", str(tp), "--max-model-len", str(ctx)]
    alloc, alloc_err = _run(
        ["engine", model, "--engine", engine, RELEASE_FLAG[engine], release, *common]
    )
    sim, sim_err = _run(
        ["simulate", model, "--engine", engine, "--engine-version", release, *common, *SIM]
    )
    # vLLM refuses a pool that holds no max-length request (engine: "fits": false, the error it
    # logs); SGLang starts with max_req_len = the pool - 1, as simulate runs it
    if alloc is not None and engine == "vllm" and not alloc["fits"]:
        alloc, alloc_err = None, "does not fit"
    if alloc is None and sim is None:
        return []
    if alloc is None or sim is None:
        return [f"starts: engine {alloc_err or 'yes'} | simulate {sim_err or 'yes'}"]
    s = sim["setup"]
    pairs = {
        "kv_cache_dtype": (alloc["kv_cache_dtype"], s["kv_cache_dtype"]),
        "kv_cache_tokens": (alloc["kv_cache_tokens"], s["kv_cache_tokens"]),
    }
    if engine == "sglang":
        pairs["max_running_requests"] = (alloc["max_running_requests"], s["max_num_seqs"])
        pairs["chunked_prefill_size"] = (alloc["chunked_prefill_size"], s["max_num_batched_tokens"])
        pairs["mem_fraction_static"] = (alloc["mem_fraction_static"], s["mem_fraction_static"])
    else:
        pairs["max_num_seqs"] = (alloc["max_num_seqs"], s["max_num_seqs"])
        pairs["max_num_batched_tokens"] = (
            alloc["max_num_batched_tokens"],
            s["max_num_batched_tokens"],
        )
    return [f"{k}: engine {a} | simulate {b}" for k, (a, b) in pairs.items() if a != b]


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every bundled)")
    parser.add_argument("--engines", default="vllm,sglang")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else sorted(bundled_models())
    rows, bad = [], 0
    for model in models:
        for engine in args.engines.split(","):
            for release in RELEASES[engine]:
                found = compare(model, engine, release, args.gpu, args.tp, args.ctx)
                rows.append(
                    {"model": model, "engine": engine, "release": release, "disagree": found}
                )
                if found:
                    bad += 1
                    print(f"{model} {engine} {release}: " + "; ".join(found), flush=True)
    print(f"{bad} of {len(rows)} launches disagree")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main_())
