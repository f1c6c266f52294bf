"""kvplan simulate against published `vllm bench serve` runs: the error table.

    python scripts/sim_accuracy.py [--json out.json]

For every case in tests/data/sim_bench_cases.json: measured vs simulated output throughput,
median TPOT and median TTFT, the relative error, the medians of the absolute errors, and the
terms that dominated the simulated engine time. Nothing is fitted per case."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kvplan.errors import KvplanError  # noqa: E402

from sim_cases import HELDOUT, METRICS, load_cases, relative_error, run_case  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--heldout",
        choices=sorted(HELDOUT),
        help="the held-out runs of this engine instead (tests/data/README.md)",
    )
    args = parser.parse_args()
    rows = []
    header = f"{'case':58} " + " ".join(f"{m[:14]:>30}" for m in METRICS) + "  dominant terms"
    print(header)
    for case in load_cases(HELDOUT[args.heldout]) if args.heldout else load_cases():
        if args.only and args.only not in case["id"]:
            continue
        start = time.perf_counter()
        try:
            sim = run_case(case)
        except KvplanError as exc:
            print(f"{case['id'][:58]:58} not simulated: {exc}")
            rows.append({"id": case["id"], "url": case["url"], "error": str(exc)})
            continue
        seconds = time.perf_counter() - start
        row = {"id": case["id"], "url": case["url"], "seconds": seconds}
        cells = []
        for metric in METRICS:
            measured, simulated = case["measured"].get(metric), sim[metric]
            if measured is None or simulated is None:  # e.g. one output token: no TPOT
                cells.append(f"{'-':>10} {'-':>10} {'-':>7}")
                continue
            error = relative_error(simulated, measured)
            row[metric] = {"measured": measured, "simulated": simulated, "error": error}
            cells.append(f"{measured:>10.1f} {simulated:>10.1f} {error:>+7.0%}")
        result = sim["result"]
        shares = result.runs[0].engine.step_time_shares
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
    done = [r for r in rows if "error" not in r]
    medians = {m: statistics.median(abs(r[m]["error"]) for r in done if m in r) for m in METRICS}
    print("median |error|: " + ", ".join(f"{m} {v:.1%}" for m, v in medians.items()))
    if args.json:
        args.json.write_text(json.dumps({"cases": rows, "median_abs_error": medians}, indent=1))


if __name__ == "__main__":
    main()
