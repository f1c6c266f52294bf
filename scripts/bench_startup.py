"""Start-up benchmark: median wall time of `kvplan size llama-3.1-70b --ctx 128k` against
`python -c "import typer, rich"` (the floor any typer CLI pays), 10 runs each, interleaved.

Run it with the interpreter of an environment where kvplan is installed from a wheel (pip
byte-compiles a wheel's modules; an editable install under PYTHONDONTWRITEBYTECODE=1 recompiles
every module on every run):

    python scripts/bench_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall_s(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    kvplan = shutil.which("kvplan") or sys.exit("kvplan is not on PATH")
    baseline_cmd = [sys.executable, "-c", "import typer, rich"]
    kvplan_cmd = [kvplan, "size", "llama-3.1-70b", "--ctx", "128k"]
    wall_s(baseline_cmd), wall_s(kvplan_cmd)  # warm the page cache
    base, ours = [], []
    for _ in range(args.runs):
        base.append(wall_s(baseline_cmd))
        ours.append(wall_s(kvplan_cmd))
    b, o = statistics.median(base), statistics.median(ours)
    print(f"import typer, rich           median {b * 1e3:7.1f} ms over {args.runs} runs")
    print(f"kvplan size ... --ctx 128k   median {o * 1e3:7.1f} ms over {args.runs} runs")
    print(f"ratio                        {o / b:.2f}x (target <= 1.30x)")


if __name__ == "__main__":
    main()
