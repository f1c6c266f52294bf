"""Planning-command benchmark: each planning command's whole-process time against
`kvplan size llama-3.1-8b` (the goal: every one within 1.50x of it), N rounds, each round running
the reference and every command once, in turn, with standard output a pipe read to the end. The
ratio quoted is the median over rounds of (command / the reference run beside it): the drift of a
loaded machine cancels. CPU time (user + system, of the child) is reported beside the wall time:
on a shared machine it moves less than the wall clock.

Run it with the interpreter of an environment where kvplan is installed (a wheel, or editable).
The commands run without PYTHONDONTWRITEBYTECODE, so the warm-up round writes the byte-code
caches an installed package has (with it set, every run recompiles every module it imports:
that measures the compiler, not kvplan):

    python scripts/bench_commands.py [--runs 15] [--only capacity]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REFERENCE = ["size", "llama-3.1-8b"]
OUT = tempfile.mkdtemp(prefix="kvplan-bench-")  # explore's page goes here
BUDGET = 1.50
COMMANDS = [
    ["capacity", "llama-3.1-8b", "--gpu", "all"],
    ["capacity", "qwen3-32b", "--gpu", "all", "--ctx", "32k"],
    ["capacity", "deepseek-v3", "--gpu", "all"],
    ["capacity", "llama-3.1-8b", "--gpu", "h100"],
    ["roofline", "llama-3.1-8b", "--gpu", "h100"],
    ["engine", "llama-3.1-8b", "--gpu", "h100"],
    ["whatif", "llama-3.1-8b"],
    ["report", "llama-3.1-8b"],
    ["explore", "llama-3.1-8b", "--out", os.path.join(OUT, "e.html")],
]
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_s(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `cmd` with standard output a pipe that is read to the end."""
    cpu, start = _cpu_s(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start, _cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--only", help="time only the commands whose words contain this text")
    args = parser.parse_args()
    kvplan = shutil.which("kvplan") or sys.exit("kvplan is not on PATH")
    commands = [c for c in COMMANDS if not args.only or args.only in " ".join(c)]
    reference = [kvplan, *REFERENCE]
    for _ in range(2):  # write the byte-code caches, warm the page cache
        for cmd in [REFERENCE, *commands]:
            run_s([kvplan, *cmd])
    base: list[tuple[float, float]] = []
    timed: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(commands))}
    for _ in range(args.runs):  # reference, then each command, in turn
        base.append(run_s(reference))
        for i, cmd in enumerate(commands):
            timed[i].append(run_s([kvplan, *cmd]))
    b_wall = statistics.median(w for w, _ in base)
    b_cpu = statistics.median(c for _, c in base)
    load = os.getloadavg()
    print(f"reference: kvplan {' '.join(REFERENCE)}: median wall {b_wall * 1e3:.1f} ms, CPU "
          f"{b_cpu * 1e3:.1f} ms; {args.runs} rounds; load average {load[0]:.2f} {load[1]:.2f}")  # fmt: skip
    print(f"{'command':52} {'wall':>7} {'CPU':>7}  (median of per-round ratios; budget {BUDGET}x)")
    for i, cmd in enumerate(commands):
        runs = timed[i]
        wall = statistics.median(r[0] / b[0] for r, b in zip(runs, base, strict=True))
        cpu = statistics.median(r[1] / b[1] for r, b in zip(runs, base, strict=True))
        flag = "" if max(wall, cpu) <= BUDGET else "  over"
        words = " ".join(cmd).replace(OUT + os.sep, "")
        print(f"kvplan {words:45} {wall:6.2f}x {cpu:6.2f}x{flag}")


if __name__ == "__main__":
    main()
