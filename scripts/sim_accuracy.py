"""kvplan simulate against published `vllm bench serve` runs: the error table.

    python scripts/sim_accuracy.py [--json out.json] [--heldout vllm|sglang|external|new]
        [--cases FILE] [--split calibrate|validate]

For every case in tests/data/sim_bench_cases.json (or the held-out file, or FILE): measured vs
simulated output throughput, median TPOT and median TTFT, the relative error, the medians of
the absolute errors, and the terms that dominated the simulated engine time; then, per source,
GPU family and engine, the median |error| of each and how many runs the simulation finished
faster than the real one, and for the runs replayed from their serve commands (the external
file: tests/sim_replay.py) the share whose measured value lies inside the 80% interval
(`bench_interval`). A run kvplan cannot express is listed with what simulate lacks for it,
computed from the record and what simulate takes today (sim_replay.needs), not simulated. A
measured value its record marks `inconsistent` (it contradicts the run's own medians under the
bench client's rules: scripts/bench_consistency.py) is printed with a `!` and its error, left out
of the medians, and listed with the record's reason at the end. Nothing is fitted per case."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kvplan.errors import KvplanError  # noqa: E402

from sim_cases import (  # noqa: E402
    HELDOUT,
    METRICS,
    gpu_name,
    inconsistent_metrics,
    load_cases,
    relative_error,
    replayed_from_serve_cmd,
    run_case,
)
from sim_replay import inside, needs  # noqa: E402

# the GPU family of the bundled GPUStack runs, which carry no `gpu_family` field
FAMILY_OF_PROFILE = {"a100-80gb-sxm": "Ampere", "h100": "Hopper", "h200": "Hopper"}


def groups(case: dict) -> dict[str, str]:
    """The groups a case is summarised in: its source, GPU family, engine and split."""
    family = case.get("gpu_family") or FAMILY_OF_PROFILE.get(gpu_name(case), "?")
    kinds = {
        "source": case.get("source", "GPUStack performance lab"),
        "gpu family": family,
        "engine": case.get("engine", "vllm"),
    }
    if "split" in case:  # the external runs: calibrate or validate (tests/data/README.md)
        kinds["split"] = case["split"]
    return kinds


def counted(row: dict, metric: str) -> bool:
    """Whether a row's metric enters the medians: simulated and measured, and not marked
    `inconsistent` in its record."""
    return metric in row and not row[metric].get("inconsistent")


def group_summary(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """Per kind (source, gpu family, engine, split) and group: runs, median |error| per metric and
    the runs where the simulated output throughput is above the measured one (faster)."""
    summary: dict[str, dict[str, dict]] = {}
    for kind in ("source", "gpu family", "engine", "split"):
        if not any(kind in r["groups"] for r in rows):
            continue
        names = sorted({r["groups"][kind] for r in rows if kind in r["groups"]})
        summary[kind] = {}
        for name in names:
            members = [r for r in rows if r["groups"].get(kind) == name]
            entry = {"runs": len(members)}
            for metric in METRICS:
                errors = [abs(r[metric]["error"]) for r in members if counted(r, metric)]
                entry[metric] = statistics.median(errors) if errors else None
            for metric in METRICS:
                hits = [
                    r[metric]["inside"]
                    for r in members
                    if counted(r, metric) and r[metric].get("inside") is not None
                ]
                entry[f"{metric}_covered"] = (sum(hits), len(hits))
            entry["sim_faster"] = sum(
                1
                for r in members
                if counted(r, "output_throughput") and r["output_throughput"]["error"] > 0
            )
            summary[kind][name] = entry
    return summary


def print_summary(summary: dict[str, dict[str, dict]]) -> None:
    print()
    print(
        f"{'group':52} {'runs':>5} "
        + " ".join(f"{m[:18]:>18}" for m in METRICS)
        + "  sim faster  80% interval holds (thr / TPOT / TTFT)"
    )
    for kind, entries in summary.items():
        for name, entry in entries.items():
            cells = " ".join(
                f"{'-':>18}" if entry[m] is None else f"{entry[m]:>18.0%}" for m in METRICS
            )
            cover = " / ".join("{}/{}".format(*entry.get(f"{m}_covered", (0, 0))) for m in METRICS)
            label = f"{kind}: {name}"
            print(
                f"{label[:52]:52} {entry['runs']:>5} {cells}  "
                f"{entry['sim_faster']:>4}/{entry['runs']:<5} {cover}"
            )


def write_summary(engine: str, runs: int, medians: dict) -> None:
    """The held-out medians of `engine` into kvplan/data/published_accuracy.json (the figures
    the sim-weak notes quote; tests/test_simulate_accuracy.py checks them against a fresh run)."""
    from kvplan import __version__
    from kvplan.atomic import write_atomic
    from kvplan.inputs.published_accuracy import FILE

    doc = json.loads(FILE.read_text())
    doc["heldout"][engine] = {
        "runs": runs,
        "cases": str(HELDOUT[engine].relative_to(ROOT)),
        "median_abs_error": {m: round(v, 4) for m, v in medians.items()},
        "kvplan_version": __version__,
    }
    text = json.dumps(doc, indent=1) + "\n"
    write_atomic(FILE, lambda tmp: tmp.write_text(text), "--write-summary", alone=True)
    print(f"wrote {FILE.relative_to(ROOT)} ({engine})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--heldout",
        choices=sorted(HELDOUT),
        help="the held-out runs of this engine instead (tests/data/README.md)",
    )
    parser.add_argument("--cases", type=Path, help="a case file in the same schema")
    parser.add_argument(
        "--split", choices=("calibrate", "validate"), help="only the runs of this split"
    )
    parser.add_argument(
        "--write-summary",
        action="store_true",
        help="with --heldout: write the medians to kvplan/data/published_accuracy.json, the "
        "figures kvplan's notes quote",
    )
    args = parser.parse_args()
    if args.write_summary and (not args.heldout or args.only or args.split or args.cases):
        parser.error("--write-summary takes --heldout alone (the whole held-out set)")
    if args.cases:
        cases = load_cases(args.cases)
    elif args.heldout:
        cases = load_cases(HELDOUT[args.heldout])
    else:
        cases = load_cases()
    rows = []
    header = f"{'case':58} " + " ".join(f"{m[:14]:>30}" for m in METRICS) + "  dominant terms"
    print(header)
    for case in cases:
        if args.only and args.only not in case["id"]:
            continue
        if args.split and case.get("split") != args.split:
            continue
        lacks = needs(case) if replayed_from_serve_cmd(case) else []
        if lacks:
            print(f"{case['id'][:58]:58} not simulated: needs {'; '.join(lacks)}")
            rows.append({"id": case["id"], "url": case["url"], "needs": lacks})
            continue
        start = time.perf_counter()
        try:
            sim = run_case(case)
        except KvplanError as exc:
            print(f"{case['id'][:58]:58} not simulated: {exc}")
            rows.append({"id": case["id"], "url": case["url"], "error": str(exc)})
            continue
        seconds = time.perf_counter() - start
        row = {"id": case["id"], "url": case["url"], "seconds": seconds, "groups": groups(case)}
        cells = []
        marked = inconsistent_metrics(case)
        for metric in METRICS:
            measured, simulated = case["measured"].get(metric), sim[metric]
            if measured is None or simulated is None:  # e.g. one output token: no TPOT
                cells.append(f"{'-':>10} {'-':>10} {'-':>7}")
                continue
            error = relative_error(simulated, measured)
            row[metric] = {"measured": measured, "simulated": simulated, "error": error}
            if "bench_interval" in sim:
                row[metric]["inside"] = inside(sim["bench_interval"].get(metric), measured)
            flag = " "
            if metric in marked:
                row[metric]["inconsistent"] = case["inconsistent"]["reason"]
                flag = "!"
            cells.append(f"{measured:>10.1f} {simulated:>10.1f} {error:>+7.0%}{flag}")
        shares = sim["step_time_shares"]
        top = sorted(shares.items(), key=lambda kv: -kv[1])[:3]
        row["dominant"] = {k: v for k, v in top}
        print(
            f"{case['id'][:58]:58} "
            + " ".join(f"{c:>30}" for c in cells)
            + "  "
            + ", ".join(f"{k[:-2]} {v:.0%}" for k, v in top)
            + f"  ({seconds:.1f} s)"
        )
        rows.append(row)
    done = [r for r in rows if "error" not in r and "needs" not in r]
    print(
        f"simulated {len(done)}; not simulated {len(rows) - len(done)} "
        f"({sum('needs' in r for r in rows)} for what simulate lacks, "
        f"{sum('error' in r for r in rows)} refused by the simulation)"
    )
    errors = {m: [abs(r[m]["error"]) for r in done if counted(r, m)] for m in METRICS}
    medians = {m: statistics.median(v) if v else None for m, v in errors.items()}
    print(
        "median |error|: "
        + ", ".join(f"{m} {'-' if v is None else f'{v:.1%}'}" for m, v in medians.items())
    )
    summary = group_summary(done)
    print_summary(summary)
    marks = [(r["id"], m, r[m]) for r in done for m in METRICS if m in r and not counted(r, m)]
    if marks:
        print(f"\nleft out of the medians: {len(marks)} measured values marked inconsistent (!)")
        for cid, metric, cell in marks:
            print(f"  {cid} {metric} ({cell['error']:+.0%}): {cell['inconsistent']}")
    if args.write_summary:
        write_summary(args.heldout, len(done), medians)
    if args.json:
        args.json.write_text(
            json.dumps({"cases": rows, "median_abs_error": medians, "groups": summary}, indent=1)
        )


if __name__ == "__main__":
    main()
