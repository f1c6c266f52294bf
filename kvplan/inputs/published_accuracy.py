"""How far kvplan's simulation has landed from published runs it was not fitted on, as data:
kvplan/data/published_accuracy.json, written by `scripts/sim_accuracy.py --heldout ENGINE
--write-summary` and checked against a fresh run by the slow accuracy test, so a note that
quotes these figures never prints stale ones."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from kvplan.record import NamedTuple

FILE = Path(__file__).resolve().parent.parent / "data" / "published_accuracy.json"


class HeldOutAccuracy(NamedTuple):
    """The median |error| (a fraction) over an engine's held-out published runs."""

    runs: int
    cases: str  # the case file, relative to the repository
    output_throughput: float
    median_tpot_ms: float
    median_ttft_ms: float


@cache
def held_out_accuracy(engine: str) -> HeldOutAccuracy | None:
    """The engine's held-out medians, or None where the file has none for it."""
    entry = json.loads(FILE.read_text())["heldout"].get(engine)
    if entry is None:
        return None
    medians = entry["median_abs_error"]
    return HeldOutAccuracy(
        runs=int(entry["runs"]),
        cases=str(entry["cases"]),
        output_throughput=float(medians["output_throughput"]),
        median_tpot_ms=float(medians["median_tpot_ms"]),
        median_ttft_ms=float(medians["median_ttft_ms"]),
    )
