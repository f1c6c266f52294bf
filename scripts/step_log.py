"""Print kvplan's engine schedule for a scenario, step by step, every step taking a fixed time.

    python scripts/step_log.py tests/data/sched_scenarios/burst.json
    python scripts/step_log.py SCENARIO.json --fixed-step-time 1ms --format json > log.json
    python scripts/step_log.py SCENARIO.json --against tests/data/sched_fixtures/0.19/X.json

A scenario is the JSON of tests/data/sched_scenarios (pool, limits, requests by arrival step);
the Python twin is kvplan.simulate.steplog.step_log. `--against` compares with a step log
recorded from vLLM (scripts/record_vllm_schedule.py) and prints the first step that differs.
"""

from __future__ import annotations

import argparse
import json
import sys

from kvplan.engines.releases import VLLM_VERSION
from kvplan.errors import KvplanError
from kvplan.simulate import steplog


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="scenario JSON file")
    parser.add_argument("--fixed-step-time", default="1s", help="every step's time (1 us to 1 h)")
    parser.add_argument(
        "--vllm-version",
        default=VLLM_VERSION,
        choices=steplog.SCHEDULE_VERSIONS,
        help="whose scheduling rules (0.18: first-chunk admission; 0.19 on: whole prompt)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--against", help="a recorded vLLM step log to compare with")
    args = parser.parse_args(argv)
    try:
        step_s = steplog.parse_step_time(args.fixed_step_time)
        scenario = steplog.load_scenario(args.scenario)
        log = steplog.step_log(scenario, step_s, args.vllm_version)
    except KvplanError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps({"scenario": scenario.name, "step_s": step_s, "steps": log}))
    else:
        sys.stdout.write(steplog.format_log(log, step_s))
    if args.against:
        recorded = json.loads(open(args.against).read())["steps"]
        difference = steplog.compare(recorded, log)
        print(difference or f"identical to {args.against}", file=sys.stderr)
        return 1 if difference else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
