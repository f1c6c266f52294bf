"""How fast kvplan plan searches (a benchmark, never a test assertion).

    python scripts/bench_plan.py [--quick] [--pruned-only] [--jobs N]

For each search, pruned (the default) and with --no-prune: the wall clock, the CPU of this
process and its workers, configurations per CPU-second, and how many configurations were
bisected, pruned and feasible (--pruned-only: the default, pruned, alone):
- the default search space (H100, H200, A100 x TP 1/2/4/8 x KV auto/fp8 x 2 token budgets x 5
  max_num_seqs: 240 configurations) for Qwen3-32B at 20 req/s, 1k in / 128 out, p99 TTFT <= 2 s
  and p99 TPOT <= 50 ms;
- 1,024 configurations: H100, H200, A100, B200 x TP 1/2/4/8 x KV auto/fp8 x 4 token budgets x 8
  max_num_seqs, the same model and traffic (skipped with --quick).
Each search is what `kvplan plan qwen3-32b --rate 20 --slo ttft_p99=2s --slo tpot_p99=50ms`
runs with those options (200 requests a run).
The load average is printed beside: on a shared machine the wall clock is the CPU share it got.
"""

from __future__ import annotations

import argparse
import os
import resource
import time


def cpu_s(children: bool = False) -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def search(gpus: tuple[str, ...], prune: bool, jobs: int, **space) -> None:
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import PlanRequest, parse_slo, plan
    from kvplan.simulate.workload import WorkloadSpec

    request = PlanRequest(
        rate=20,
        slos=(parse_slo("ttft_p99=2s"), parse_slo("tpot_p99=50ms")),
        workload=WorkloadSpec(num_prompts=200),  # the CLI's default traffic
        jobs=jobs,
        prune=prune,
        **space,
    )
    spec, profiles = load_model("qwen3-32b"), [load_profile(g) for g in gpus]
    wall, cpu, child = time.perf_counter(), cpu_s(), cpu_s(children=True)
    result = plan(spec, profiles, request)
    wall = time.perf_counter() - wall
    cpu = cpu_s() - cpu + cpu_s(children=True) - child
    best = result.candidates[0]
    print(
        f"  {result.searched:5,} configurations  prune={'on ' if prune else 'off'} "
        f"{wall:6.2f} s wall {cpu:6.2f} s CPU  {result.searched / cpu:6.1f} configs/CPU-s  "
        f"({result.pruned} pruned, {result.feasible} feasible; cheapest {best.num_gpus} x "
        f"{best.gpu})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the default search only")
    parser.add_argument("--pruned-only", action="store_true", help="skip the --no-prune runs")
    parser.add_argument("--jobs", type=int, default=0, help="processes (0: one per core)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print("default search: qwen3-32b, --gpu h100 --gpu h200 --gpu a100, 20 req/s")
    prunes = (True,) if args.pruned_only else (True, False)
    for prune in prunes:
        search(("h100", "h200", "a100"), prune, args.jobs)
    if not args.quick:
        print("1,024 configurations: + b200, 4 token budgets, 8 max_num_seqs")
        space = dict(
            max_num_seqs=(16, 32, 48, 64, 128, 256, 512, 1024),
            max_num_batched_tokens=(1024, 2048, 4096, 8192),
        )
        for prune in prunes:
            search(("h100", "h200", "a100", "b200"), prune, args.jobs, **space)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
