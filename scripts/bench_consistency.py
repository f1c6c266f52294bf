"""Published runs whose measured output throughput disagrees with their own TTFT and TPOT.

    python scripts/bench_consistency.py [--json out.json]

Both bench clients print output throughput = the server-counted output tokens of the completed
requests / duration (sglang.bench_serving 0.5.9 `calculate_metrics`: `output_lens` from the
server's `meta_info.completion_tokens`, the re-tokenized count printed apart; `vllm bench serve`
`calculate_metrics` likewise from the server's usage, re-tokenizing the text only where the
server reports none). The duration runs from `benchmark_start_time`, taken after the
untimed warmup request (the first prompt, at most 32 output tokens) and the optional
`/flush_cache`, to the end of the last request. A request's latency is its TTFT plus (output
tokens - 1) x its TPOT (the clients' own TPOT definition). So the run's own medians imply:

- concurrency 1, rate inf: the requests run one after another and the duration is the sum of
  their latencies: N x (TTFT + (output - 1) x TPOT) with the record's mean output length (the
  printed total / completed), exact up to median against mean;
- concurrency c < N: c requests are in flight while any wait, so the duration is at least
  N x latency / c (the last wave drains with fewer in flight);
- a finite request rate: the last request cannot start before the (N - 1) / rate the arrivals
  take, so the duration is at least that plus one latency;
- every request at once (c >= N, rate inf): the duration is the slowest request's latency,
  which medians do not give: not checked.

Where the record prints no median TPOT, its median ITL stands in (both clients: the gap between
streamed chunks, one token each without speculative decoding). The sequential rule is an
equality: a measured throughput off it by more than TOLERANCE either way is inconsistent. The
other two are lower bounds on the duration, so only a measured throughput above the implied one
by more than TOLERANCE contradicts them (one below is queueing: a median says nothing of the last
request). A flagged run is listed with the reason its record states (`inconsistent`,
tests/data/README.md) or "unexplained"; tests/test_bench_consistency.py holds every case file to
that. Nothing here is fitted: the formulas are the clients'."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CASE_FILES = sorted(DATA.glob("sim_bench_cases*.json"))
# the threshold (issue 34): off by more than this is inconsistent
TOLERANCE = 0.30


class Implied(NamedTuple):
    output_throughput: float | None  # tok/s; None: the medians cannot give it
    basis: str  # which rule above, or why not checked
    exact: bool = False  # the sequential rule (an equality), else an upper bound on throughput


def figure(value) -> float | None:
    """A printed figure as a number: None where it is not a finite number >= 0 (text, a bool,
    NaN, inf or a negative, which no bench client prints for a run that completed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def count(value) -> int | None:
    """A printed count (requests, concurrency): None where it is not a whole number >= 0."""
    number = figure(value)
    return int(number) if number is not None and number.is_integer() else None


def implied_output_throughput(case: dict) -> Implied:
    """The output throughput the run's own medians imply under its bench client's rules; not
    checked (None, the basis says why) where the record's figures are not ones a run prints."""
    m = case["measured"]
    ttft_ms = m.get("median_ttft_ms")
    tpot_ms = m.get("median_tpot_ms")
    tpot_of = "TPOT"
    if tpot_ms is None and m.get("median_itl_ms") is not None:
        tpot_ms, tpot_of = m["median_itl_ms"], "ITL"
    if ttft_ms is None or tpot_ms is None:
        return Implied(None, "no median TTFT or TPOT/ITL printed")
    ttft_ms, tpot_ms = figure(ttft_ms), figure(tpot_ms)
    if ttft_ms is None or tpot_ms is None:
        return Implied(None, f"not checked: a median TTFT or {tpot_of} that is not a number >= 0")
    completed = m.get("completed")
    requests = count(case["num_prompts"] if completed is None else completed)
    if not requests:
        return Implied(None, "not checked: no request completed (or a count that is no count)")
    given = case.get("max_concurrency")
    concurrency = count(given or requests)  # 0 or None: none given
    rate = case.get("request_rate")  # None: rate inf
    output_tokens = figure(case["output_len"])
    if concurrency is None or not concurrency:
        return Implied(None, f"not checked: max concurrency {given!r} is not a count >= 1")
    if rate is not None and not figure(rate):
        return Implied(None, f"not checked: request rate {rate!r} is not a number > 0")
    if not output_tokens:
        return Implied(None, "not checked: no output tokens per request")
    concurrency = min(concurrency, requests)
    latency_s = (ttft_ms + (output_tokens - 1) * tpot_ms) / 1000
    if latency_s <= 0:
        return Implied(None, "not checked: the medians give a request no latency")
    if concurrency >= requests and rate is None and requests > 1:
        return Implied(None, "every request at once: the duration is the slowest request's")
    duration_s = requests * latency_s / concurrency
    exact = concurrency == 1 and rate is None
    if exact:
        basis = "sequential: duration = sum of latencies"
    else:
        basis = f"at least N x latency / {concurrency} in flight"
    if rate is not None and (requests - 1) / rate + latency_s > duration_s:
        duration_s = (requests - 1) / rate + latency_s
        basis = f"arrivals at {rate:g}/s: at least (N - 1) / rate + one latency"
    if tpot_of == "ITL":
        basis += " (median ITL for TPOT)"
    return Implied(requests * output_tokens / duration_s, basis, exact)


def sequential_one_off(case: dict, mean_ttft_ms: float, mean_e2e_ms: float) -> dict | None:
    """The `inconsistent` mark of a flagged sequential run whose printed means account for its
    printed duration (N x mean E2E latency within TOLERANCE of it) while its medians do not: the
    mean TTFT then holds a one-off, about N x mean - (N - 1) x median seconds in one request's
    first token. None where the means do not account for the duration either."""
    m = case["measured"]
    requests = m.get("completed") or case["num_prompts"]
    implied = implied_output_throughput(case)
    if not implied.exact or implied.output_throughput is None:
        return None
    duration_s, mean_ttft_ms, mean_e2e_ms = (
        figure(m.get("duration_s")),
        figure(mean_ttft_ms),
        figure(mean_e2e_ms),
    )
    if not duration_s or mean_ttft_ms is None or not mean_e2e_ms:  # no printed duration, means
        return None
    if abs(requests * mean_e2e_ms / 1000 / duration_s - 1) > TOLERANCE:
        return None
    one_off_s = (requests * mean_ttft_ms - (requests - 1) * m["median_ttft_ms"]) / 1000
    reason = (
        f"concurrency 1: the printed duration {m['duration_s']:g} s is {requests} x the printed "
        f"mean E2E latency {mean_e2e_ms:g} ms, but the median TTFT {m['median_ttft_ms']:g} ms "
        f"and TPOT imply {implied.output_throughput:.1f} tok/s against the printed "
        f"{m['output_throughput']:g}: the printed mean TTFT {mean_ttft_ms:g} ms puts about "
        f"{one_off_s:.0f} s into one request's first token ({requests} x the mean less "
        f"{requests - 1} at the median), a one-off stall the untimed warmup request "
        "(sglang.bench_serving: the first prompt, at most 32 output tokens) did not absorb and "
        "the block does not explain; kvplan simulates the steady state, so the output "
        "throughput is left out of the medians and the interval calibration; the median TTFT "
        "and TPOT stand (scripts/bench_consistency.py)"
    )
    return {"metrics": ["output_throughput"], "reason": reason}


class Check(NamedTuple):
    id: str
    file: str
    measured: float | None
    implied: Implied
    ratio: float | None  # measured / implied
    flagged: bool
    marked: str | None  # the record's `inconsistent` reason


def check(case: dict, file: str = "") -> Check:
    implied = implied_output_throughput(case)
    measured = case["measured"].get("output_throughput")
    ratio = None
    if measured is not None and implied.output_throughput:
        ratio = measured / implied.output_throughput
    flagged = ratio is not None and (
        ratio - 1 > TOLERANCE or (implied.exact and 1 - ratio > TOLERANCE)
    )
    marked = (case.get("inconsistent") or {}).get("reason")
    return Check(case["id"], file, measured, implied, ratio, flagged, marked)


def checks() -> list[Check]:
    return [
        check(case, path.name)
        for path in CASE_FILES
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--all", action="store_true", help="every run, not only the flagged")
    args = parser.parse_args()
    rows = checks()
    print(f"{'case':62} {'measured':>9} {'implied':>9} {'ratio':>6}  basis")
    for row in rows:
        if not (args.all or row.flagged):
            continue
        implied = row.implied.output_throughput
        cells = (
            f"{row.measured or 0:>9.1f} {implied:>9.1f} {row.ratio:>6.2f}"
            if implied is not None and row.ratio is not None
            else f"{'-':>9} {'-':>9} {'-':>6}"
        )
        print(f"{row.id[:62]:62} {cells}  {row.implied.basis}")
        if row.flagged:
            print(f"{'':62} record: {row.marked or 'unexplained (no inconsistent mark)'}")
    checked = [r for r in rows if r.ratio is not None]
    flagged = [r for r in rows if r.flagged]
    print(
        f"{len(rows)} runs in {len(CASE_FILES)} files; {len(checked)} checked; "
        f"{len(flagged)} off by more than {TOLERANCE:.0%} "
        f"({sum(r.marked is not None for r in flagged)} marked in their record)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "id": r.id,
                        "file": r.file,
                        "measured": r.measured,
                        "implied": r.implied.output_throughput,
                        "basis": r.implied.basis,
                        "ratio": r.ratio,
                        "flagged": r.flagged,
                        "inconsistent": r.marked,
                    }
                    for r in rows
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
