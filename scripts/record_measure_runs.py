"""Record the two `kvplan measure` runs tests/test_every_note.py replays (run from the repository
root on a CPU with torch; rewrites tests/data/recorded/):

- measure_cpu_quick.json: `kvplan measure --model M --quick --rounds 3` on the small model the
  test writes (M below): the device info, the thread layout and every item's timing;
- measure_distributed_cpu.json: `kvplan measure --distributed --quick` (two gloo ranks): the
  request and what the ranks reported.

    python scripts/record_measure_runs.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests/data/recorded"


def _dump(data: dict, name: str) -> None:
    path = OUT / name
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path.relative_to(REPO)}")


def record_device_run(model: str) -> None:
    import kvplan.measure.run as run

    recorded: dict = {}
    detect, threads, time_rounds = run.detect, run.default_threads, run.time_rounds

    def detect_kept(*args, **kwargs):
        recorded["info"] = detect(*args, **kwargs)
        return recorded["info"]

    def threads_kept():
        recorded["threads"] = list(threads())
        return tuple(recorded["threads"])

    def timings_kept(items, *args, **kwargs):
        out = time_rounds(items, *args, **kwargs)
        recorded["timings"] = {key: timing._asdict() for key, timing in out.items()}
        return out

    run.detect, run.default_threads, run.time_rounds = detect_kept, threads_kept, timings_kept
    run.measure(run.MeasureRequest(model=model, quick=True, rounds=3))
    _dump(recorded, "measure_cpu_quick.json")


def record_distributed_run() -> None:
    import kvplan.measure.distributed as distributed

    recorded: dict = {}
    analyse = distributed.analyse

    def analyse_kept(request, results):
        recorded["request"], recorded["results"] = request._asdict(), results
        return analyse(request, results)

    distributed.analyse = analyse_kept
    distributed.run_distributed(distributed.DistributedRequest())  # the --quick defaults
    _dump(recorded, "measure_distributed_cpu.json")


def main() -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from test_every_note import MEASURE_MODEL  # the model the test measures

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "config.json"
        model.write_text(json.dumps(MEASURE_MODEL))
        record_device_run(str(model))
    record_distributed_run()


if __name__ == "__main__":  # the distributed run spawns processes that import this module
    main()
