"""kvplan simulate against published runs that use expert parallelism, DP attention, speculative
decoding or decode context parallelism (issue 28), every one held out.

    python scripts/sim_features.py [--markdown] [--json out.json]

The runs: every case of tests/data/sim_bench_cases_features.json (collected for this, split
validate: nothing was fitted or chosen on them) and the cases of
tests/data/sim_bench_cases_external.json whose serve command uses one of those features (their
records, with the acceptance length a block printed, are not changed here). Each is replayed through
`kvplan simulate` with its own serve flags (tests/sim_replay.py); a speculative run with the
acceptance length it printed, else kvplan's default (0.7 per drafted token), and where a source
gives an acceptance for that draft (`spec_accept_length_docs`) once more at it. Printed: per
run the measured and simulated output throughput, median TPOT and median TTFT, the error and
whether the 80% interval (`bench_interval`) holds the measured value; then per feature, GPU
family, engine and source the median |error| and the interval's coverage. `--markdown` prints the
summary table docs/simulate.md carries (tests/test_sim_features.py checks they agree)."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kvplan.errors import KvplanError  # noqa: E402

from sim_replay import (  # noqa: E402
    EXTERNAL_PATH,
    FEATURES_PATH,
    METRICS,
    flag_names,
    inside,
    relative_error,
    replay,
)

FEATURE_FLAGS = {
    "ep": ("--enable-expert-parallel", "-ep", "--ep", "--ep-size", "--expert-parallel-size"),
    "dp-attention": ("--enable-dp-attention",),
    "dp": ("-dp", "--data-parallel-size"),
    "speculative": ("--speculative-config", "--speculative-algorithm"),
    "dcp": ("-dcp", "--dcp", "--decode-context-parallel-size"),
}
FEATURE_ORDER = ("ep", "dp-attention", "dp", "speculative", "dcp")
# external runs whose checkpoint the bundled config of their id does not describe, replayed on a
# bundled config that does (their records stay as they are): Kimi-K2-Thinking is Kimi-K2's text
# model with INT4 (QAT, compressed-tensors, group 32) experts, the format and layers of the bundled
# Kimi-K2.5's text model; moonshotai/Kimi-K2-Thinking would resolve to the FP8 Kimi-K2-Instruct
STAND_IN = {
    "vllmrecipes-kimi-k2-thinking-h200-tp8-dcp8-random-8000-4000-rate100": "moonshotai/Kimi-K2.5",
}


def features_of(serve_cmd: str) -> list[str]:
    """The issue-28 features a serve command asks for, by its flags as written."""
    names = {arg.split("=", 1)[0].split(".", 1)[0] for arg in shlex.split(serve_cmd)}
    names |= flag_names(serve_cmd)  # argparse's abbreviations too (--speculative-algo)
    return [f for f in FEATURE_ORDER if names & set(FEATURE_FLAGS[f])]


def load_runs() -> list[dict]:
    """The feature runs (module docstring): the new file's, then the external file's."""
    runs = [
        dict(case, collection="features file")
        for case in json.loads(FEATURES_PATH.read_text(encoding="utf-8"))["cases"]
    ]
    for case in json.loads(EXTERNAL_PATH.read_text(encoding="utf-8"))["cases"]:
        if not features_of(case["serve_cmd"]) or case.get("num_prompts") is None:
            continue
        case = dict(case, kvplan_model=STAND_IN.get(case["id"]))
        runs.append(dict(case, collection="external file"))
    return runs


def replays(case: dict) -> list[tuple[str, float | None]]:
    """(label, acceptance length) of each replay of a run: as published (its printed length,
    else kvplan's default) and, for a speculative run without one, at its sources' length."""
    out: list[tuple[str, float | None]] = [("as published", None)]
    docs = case.get("spec_accept_length_docs")
    if case.get("spec_accept_length") is None and docs:
        out.append(("docs acceptance", docs["length"]))
    return out


def row_of(case: dict, label: str, length: float | None) -> dict:
    """One replay: errors and interval hits per metric, or the one-line refusal."""
    groups = {
        "source": case["source"].split(" (")[0],
        "gpu family": case["gpu_family"],
        "engine": case["engine"],
        "records": case["collection"],
    }
    row: dict = {"id": case["id"], "url": case["url"], "replay": label, "groups": groups}
    row["features"] = features_of(case["serve_cmd"])
    if case.get("gpu_profile") is None:
        row["refused"] = "no GPU profile"
        return row
    if case.get("record_mismatch"):  # the record's serve command is not the one that ran
        row["refused"] = "the serve command this block ran is not recorded"
        return row
    try:
        sim = replay(case, length)
    except KvplanError as exc:
        row["refused"] = str(exc).removeprefix("error: ")
        return row
    row["accept_length"] = length if length is not None else case.get("spec_accept_length")
    for metric in METRICS:
        measured, simulated = case["measured"].get(metric), sim["bench"].get(metric)
        if not measured or simulated is None:
            continue
        row[metric] = {
            "measured": measured,
            "simulated": simulated,
            "error": relative_error(simulated, measured),
            "inside": inside(sim["bench_interval"].get(metric), measured),
            "interval": sim["bench_interval"].get(metric),
        }
    return row


def summarise(rows: list[dict]) -> list[dict]:
    """Per group (all, each feature, GPU family, engine, source) of the published-acceptance
    replays that ran: runs, median |error| and 80%-interval coverage per metric."""
    done = [r for r in rows if "refused" not in r and r["replay"] == "as published"]
    spec_docs = [r for r in rows if "refused" not in r and r["replay"] == "docs acceptance"]
    groups: list[tuple[str, list[dict]]] = [("all", done)]
    for feature in FEATURE_ORDER:
        members = [r for r in done if feature in r["features"]]
        if members:
            groups.append((f"feature: {feature}", members))
    if spec_docs:
        groups.append(("speculative, again at a source's acceptance", spec_docs))
    for kind in ("gpu family", "engine", "source", "records"):
        for name in sorted({r["groups"][kind] for r in done}):
            groups.append((f"{kind}: {name}", [r for r in done if r["groups"][kind] == name]))
    out = []
    for label, members in groups:
        entry: dict = {"group": label, "runs": len(members)}
        for metric in METRICS:
            have = [r[metric] for r in members if metric in r]
            entry[metric] = statistics.median(abs(h["error"]) for h in have) if have else None
            hits = [h["inside"] for h in have if h["inside"] is not None]
            entry[f"{metric}_covered"] = (sum(hits), len(hits))
        widths = [
            r["output_throughput"]["interval"][1] / r["output_throughput"]["interval"][0]
            for r in members
            if r.get("output_throughput", {}).get("interval")
        ]
        entry["throughput_high_over_low"] = statistics.median(widths) if widths else None
        entry["sim_faster"] = sum(
            1 for r in members if r.get("output_throughput", {}).get("error", 0) > 0
        )
        out.append(entry)
    return out


def markdown(summary: list[dict]) -> str:
    """The summary as docs/simulate.md prints it."""
    lines = [
        "| group | runs | output throughput | median TPOT | median TTFT | 80% interval holds "
        "(thr. / TPOT / TTFT) | thr. interval high/low | simulation faster |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for e in summary:
        cells = ["-" if e[m] is None else f"{e[m]:.0%}" for m in METRICS]  # median |error|
        cover = " / ".join(f"{e[f'{m}_covered'][0]}/{e[f'{m}_covered'][1]}" for m in METRICS)
        width = e["throughput_high_over_low"]
        lines.append(
            f"| {e['group']} | {e['runs']} | {' | '.join(cells)} | {cover} | "
            f"{'-' if width is None else f'{width:.1f}x'} | {e['sim_faster']}/{e['runs']} |"
        )
    return "\n".join(lines)


def compute() -> tuple[list[dict], list[dict]]:
    rows = []
    for case in load_runs():
        for label, length in replays(case):
            rows.append(row_of(case, label, length))
    return rows, summarise(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown", action="store_true", help="only the docs' summary table")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows, summary = compute()
    if args.markdown:
        print(markdown(summary))
        return
    for r in rows:
        label = f"{r['id'][:60]:60} {r['replay'][:15]:15}"
        if "refused" in r:
            print(f"{label} refused: {r['refused']}")
            continue
        cells = []
        for metric in METRICS:
            if metric not in r:
                cells.append(f"{'-':>30}")
                continue
            h = r[metric]
            mark = {True: "in", False: "OUT", None: "?"}[h["inside"]]
            cells.append(
                f"{h['measured']:>10.1f} {h['simulated']:>10.1f} {h['error']:>+6.0%} {mark:>3}"
            )
        print(label + " " + " ".join(cells))
    print()
    print(markdown(summary))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
