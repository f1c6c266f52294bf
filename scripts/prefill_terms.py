"""What a lone prefill costs in the published runs at one request at a time, term by term.

    python scripts/prefill_terms.py [--only SUBSTRING] [--tokens N,N,...]

(--tokens: 1 to 100 whole prompt lengths in ASCII digits, each at least 1 token and within the
run's context; anything else is one line on stderr and exit status 2. A speculative run's row
says it is not split: its step holds the draft's extend beside the target's GEMMs.)

At --max-concurrency 1 a request's TTFT is the API server's per-request cost plus one prefill
step with nothing queued ahead of it, so the terms of that step are what the TTFT is made of. For
every run of tests/data/sim_bench_cases_external.json replayed from its serve command at
concurrency 1 (tests/sim_replay.py; runs it cannot replay are skipped): the measured and
simulated median TTFT; the two middle prompt lengths of the run's own draw (the median TTFT is
the mean of those two requests' TTFTs, each a lone prefill); and, averaged over those two, the
simulated prefill step (StepModel.step of one chunk of that many new tokens) split into the dense
GEMMs and the fused MoE as the step prices each (StepModel.gemm_parts_s: the GEMM table's calls
at their own shapes, the moe/ table's curve, or their rooflines), prefill attention, the TP all-reduces, the per-layer launch charge (per_layer_s
under a CUDA graph, eager_per_layer_s past the graph size) and the host's per-step cost; then what
the simulated TTFT holds beside that step (the frontend's request_s), and the launch charge's
share of the simulated TTFT. With --tokens, the same step at each of the given prompt lengths
instead of the run's middle prompts, with the fused MoE's time per MoE layer (microseconds, to
read against the moe/ table's row at that many tokens) and each term's growth per prompt token
from the length before (microseconds a token): the slope a run's TTFT takes with its prompts.
Read-only: nothing is fitted, nothing written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import kvplan.plans.simulate as plans_simulate  # noqa: E402
from kvplan.errors import KvplanError  # noqa: E402
from kvplan.formulas.batch_step import BatchShape  # noqa: E402

from sim_cases import HELDOUT, load_cases  # noqa: E402
from sim_replay import replay  # noqa: E402

if TYPE_CHECKING:
    from kvplan.simulate.setup import Replica

TERMS = ("step", "dense", "moe", "attention", "comm", "launch", "host")
# the most prompt lengths --tokens prices (each is one step per run shown: a bounded time)
MAX_LENGTHS = 100


class _Capture:
    """The replica and the requests of the run kvplan simulate builds (the last one)."""

    def __init__(self) -> None:
        self.replica: Replica | None = None
        self.requests: list = []
        self._build = plans_simulate.build_replica
        self._requests = plans_simulate._requests

    def __enter__(self) -> _Capture:
        def build(*args, **kwargs):
            self.replica = self._build(*args, **kwargs)
            return self.replica

        def requests(*args, **kwargs):
            self.requests = self._requests(*args, **kwargs)
            return self.requests

        plans_simulate.build_replica = build
        plans_simulate._requests = requests
        return self

    def __exit__(self, *exc) -> None:
        plans_simulate.build_replica = self._build
        plans_simulate._requests = self._requests


def prefill_terms_s(model, tokens: int) -> dict[str, float]:
    """The terms of one step prefilling `tokens` new tokens alone (seconds, TERMS); the GEMM
    terms split by group as the step model prices them (StepModel.gemm_parts_s)."""
    step = model.step(BatchShape(prefill_chunks=((tokens, 0),), num_sampled=1))
    terms = step.terms_s
    dense_s, moe_s = model.gemm_parts_s(tokens, 1)[2:]
    return {
        "step": step.total_s,
        "dense": dense_s,
        "moe": moe_s,
        "attention": terms["attention_s"] + terms["kv_read_s"],
        "comm": terms["comm_s"],
        "launch": terms["launch_s"],
        "host": terms["host_s"],
    }


def terms_at_lengths(model, lengths: list[int]) -> list[tuple[int, dict[str, float]]]:
    """(prompt tokens, prefill_terms_s in milliseconds, plus "moe/layer" in microseconds and
    "us/token": the step's growth per prompt token since the previous length, 0 for the first)
    for each of `lengths`."""
    rows: list[tuple[int, dict[str, float]]] = []
    for tokens in lengths:
        ms = {term: seconds * 1e3 for term, seconds in prefill_terms_s(model, tokens).items()}
        ms["moe/layer"] = ms["moe"] * 1e3 / model.moe_layers if model.moe_layers else 0.0
        if rows:
            before, was = rows[-1]
            ms["us/token"] = (ms["step"] - was["step"]) * 1e3 / (tokens - before)
        else:
            ms["us/token"] = 0.0
        rows.append((tokens, ms))
    return rows


def _print_lengths(case: dict, simulated: float, model, lengths: list[int]) -> None:
    measured = case["measured"].get("median_ttft_ms")
    shown = "-" if measured is None else f"{measured:.1f}"
    for tokens, ms in terms_at_lengths(model, lengths):
        print(
            f"{case['id'][:52]:52} {shown:>6} {simulated:6.1f} {tokens:>14} | "
            + " ".join(f"{ms[t]:6.1f}" for t in TERMS)
            + f" | {ms['moe/layer']:9.1f} {ms['us/token']:8.1f}"
        )


def _refuse(words: str) -> NoReturn:
    print(f"--tokens: {words}", file=sys.stderr)
    raise SystemExit(2)


def _lengths(text: str) -> list[int]:
    """--tokens's prompt lengths, sorted and each once: whole numbers of at least one token, at
    most MAX_LENGTHS of them (else one line on stderr, exit status 2)."""
    items = [n.strip() for n in text.split(",") if n.strip()]
    if len(items) > MAX_LENGTHS:
        _refuse(f"at most {MAX_LENGTHS} lengths (got {len(items):,})")
    # ASCII digits only: str.isdigit takes '²' (which int() refuses) and '١٠' (which it reads)
    bad = next((n for n in items if not (n.isascii() and n.lstrip("+-").isdigit())), None)
    if bad is not None:
        _refuse(f"{bad!r} is not a whole number of tokens")
    lengths = sorted({int(n) for n in items})
    if lengths and lengths[0] < 1:
        _refuse(f"each length is at least 1 token (got {lengths[0]})")
    return lengths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--tokens", default="", help="comma-separated prompt lengths to price the step at"
    )
    args = parser.parse_args()
    lengths = _lengths(args.tokens)
    if lengths:
        print(
            f"{'case':52} {'meas':>6} {'sim':>6} {'prompt tokens':>14} | "
            + " ".join(f"{t:>6}" for t in TERMS)
            + f" | {'moe/layer':>9} {'us/token':>8}"
        )
    else:
        print(
            f"{'case':52} {'meas':>6} {'sim':>6} {'middle prompts':>14} | "
            + " ".join(f"{t:>6}" for t in TERMS)
            + f" | {'rest':>5} {'launch/TTFT':>11}"
        )
    for case in load_cases(HELDOUT["external"]):
        if case.get("max_concurrency") != 1 or args.only not in case["id"]:
            continue
        if "serve_cmd" not in case:
            continue
        with _Capture() as run:
            try:
                sim = replay(case)
            except KvplanError as exc:
                print(f"{case['id'][:52]:52} not simulated: {exc}")
                continue
        if run.replica is None or len(run.requests) < 2:
            continue
        model = run.replica.model
        simulated = sim["bench"]["median_ttft_ms"]
        if hasattr(model, "speculation"):  # SpeculativeStepModel: no gemm_parts_s of its own
            print(
                f"{case['id'][:52]:52} not split: a speculative run (its prefill step holds the "
                "draft's extend, which StepModel.gemm_parts_s does not price)"
            )
            continue
        if lengths:
            context = run.replica.config.max_model_len
            if lengths[-1] > context:
                _refuse(f"{lengths[-1]:,} tokens is past the run's context ({context:,} tokens)")
            _print_lengths(case, simulated, model, lengths)
            continue
        drawn = sorted(r.input_tokens for r in run.requests)
        middle = drawn[(len(drawn) - 1) // 2 : len(drawn) // 2 + 1]
        ms = dict.fromkeys(TERMS, 0.0)
        for tokens in middle:
            for term, seconds in prefill_terms_s(model, tokens).items():
                ms[term] += seconds * 1e3 / len(middle)
        measured = case["measured"].get("median_ttft_ms")
        shown = "-" if measured is None else f"{measured:.1f}"
        print(
            f"{case['id'][:52]:52} {shown:>6} {simulated:6.1f} "
            f"{'/'.join(str(n) for n in middle):>14} | "
            + " ".join(f"{ms[t]:6.1f}" for t in TERMS)
            + f" | {simulated - ms['step']:5.1f} {ms['launch'] / simulated:11.0%}"
        )


if __name__ == "__main__":
    main()
