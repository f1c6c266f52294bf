"""How fast kvplan simulate and kvplan plan run (a benchmark, never a test assertion).

    python scripts/bench_simulate.py [--quick]

Times, wall clock and this process's CPU (plan: its workers' too), for:
- 10,000 requests of Qwen3-8B on an H100 (ShareGPT-like lengths) at rate inf, at 20 req/s and
  with 8 in flight, with vLLM's default prefix caching, and once with it off;
- a plan search over 240 configurations (3 GPU kinds x TP 1/2/4/8 x KV auto/fp8 x 2 budgets x
  5 max_num_seqs) for Llama-3.1-70B at 50 req/s, 2k in / 500 out, p99 TTFT <= 1 s.
The load average is printed beside: on a shared machine the wall clock is the CPU share it got.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import time


def cpu_s(children: bool = False) -> float:
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def simulate_case(
    label: str, num: int, rate: float, concurrency, caching, engine: str = "vllm"
) -> None:
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.simulate.setup import ServeOptions
    from kvplan.simulate.workload import WorkloadSpec

    request = SimulateRequest(
        workload=WorkloadSpec(
            num_prompts=num, input_len=220, output_len=200, length_dist="sharegpt"
        ),
        rates=(rate,),
        max_concurrency=concurrency,
        serve=ServeOptions(enable_prefix_caching=caching, engine=engine),
        series=False,
    )
    spec, gpu = load_model("qwen3-8b"), load_profile("h100")
    wall, cpu = time.perf_counter(), cpu_s()
    result = simulate(spec, gpu, request)
    wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
    bench = result.runs[0].bench
    print(
        f"  {label:44} {wall:6.2f} s wall {cpu:6.2f} s CPU  ({bench.completed:,} requests, "
        f"{bench.total_output_tokens:,} tokens, {bench.duration:,.0f} s simulated)"
    )


def plan_case(num_prompts: int) -> None:
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import PlanRequest, parse_slo, plan
    from kvplan.simulate.workload import WorkloadSpec

    request = PlanRequest(
        rate=50,
        slos=(parse_slo("ttft_p99=1s"),),
        workload=WorkloadSpec(num_prompts=num_prompts, input_len=2048, output_len=500),
    )
    gpus = [load_profile(g) for g in ("h100", "h200", "a100")]
    wall, cpu, child = time.perf_counter(), cpu_s(), cpu_s(children=True)
    result = plan(load_model("llama-3.1-70b"), gpus, request)
    wall = time.perf_counter() - wall
    cpu = cpu_s() - cpu + cpu_s(children=True) - child
    best = result.candidates[0]
    print(
        f"  plan, {result.searched} configurations x {num_prompts} requests   {wall:6.2f} s wall "
        f"{cpu:6.2f} s CPU  ({result.feasible} feasible; cheapest {best.num_gpus} x {best.gpu})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="1,000 requests instead of 10,000")
    args = parser.parse_args()
    num = 1000 if args.quick else 10000
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kvplan simulate qwen3-8b --gpu h100, {num:,} requests (sharegpt 220 in / 200 out):")
    simulate_case("rate inf", num, math.inf, None, None)
    simulate_case("20 req/s", num, 20.0, None, None)
    simulate_case("8 in flight (--max-concurrency 8)", num, math.inf, 8, None)
    simulate_case("rate inf, --no-enable-prefix-caching", num, math.inf, None, False)
    simulate_case("rate inf, --engine sglang", num, math.inf, None, None, "sglang")
    simulate_case("20 req/s, --engine sglang", num, 20.0, None, None, "sglang")
    plan_case(200)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
