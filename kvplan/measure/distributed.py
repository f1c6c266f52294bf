"""`kvplan measure --distributed`: all-reduce over the message sizes a TP decode step reduces,
and one request's KV cache sent point to point, with torch.distributed (gloo on CPUs, NCCL on
GPUs), each predicted by the alpha-beta link model calibrated on message sizes that are not the
ones reported.

Launch: `kvplan measure --distributed --nproc 2` spawns the ranks itself; under
`torchrun --nproc-per-node N -m kvplan measure --distributed` each rank runs in place. Every
collective has a timeout, and the parent watches the ranks: one rank failing ends them all with a
clear error, never a hang.

Model (kvplan.formulas.comm): a ring all-reduce of M bytes over N ranks takes
2(N-1) a + 2(N-1)/N M / B, plus, where the host reduces (gloo), (N-1)/N M / R with R the rate at
which a rank adds two buffers (measured on the rank). a and B are fitted by least squares to
all-reduces at calibration sizes (0.75 x the reported ones' neighbours, never equal to them) after
the reduction term is taken out; R is measured by a local add at the largest calibration size.
The KV transfer is a + M / B with a and B fitted to point-to-point sends of 1 and 16 MiB (a
gloo all-reduce's effective bandwidth is not a send's). With --gpu PROFILE, the profile's link
figures predict too.

Rounds and the check: every operation is timed in `rounds` rounds of interleaved samples; a
row's time is the median of its round times, and its noise two standard errors of its median
error, from how far each round's own fitted link and measurement disagree across the rounds.
The gate's limits are widened by that noise; a row noisier than the tolerance is reported as
noisy, not judged; a self-test (links 10x too fast and too slow must fail) keeps a run too noisy
to see a wrong link from passing.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.comm import (
    p2p_time_s,
    ring_allreduce_reduce_time_s,
    ring_allreduce_time_s,
    tp_allreduce_bytes,
)
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.sources import load_model
from kvplan.measure.timing import Timing, noise, summarize
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

# All-reduces per sample: 20 back to back at every size (as nccl-tests does). A count that
# changed with the size (it was 3 from 1 MiB) timed neighbouring sizes differently: under load
# 20 gloo all-reduces back to back ran up to 1.7x slower per call than 3, so the 1 MiB point
# measured faster than the 786 KB calibration one and was over-predicted by 50-78% run after run.
INNER = 20
SEND_CALIBRATION_BYTES = (
    1 << 20,
    16 << 20,
)  # point-to-point sizes the KV transfer's link is fitted on
DEFAULT_TOLERANCE = 0.25  # median |error| of a loopback link on a shared machine; worst 2x
# the self-test: the gate must fail the same rows predicted by a link 10x too fast and 10x too
# slow (both: a prediction already 10x off would pass the one that brings it back to the truth)
MUTATIONS = (("a link 10x faster than fitted", 10.0), ("a link 10x slower than fitted", 0.1))


class DistributedRequest(NamedTuple):
    nproc: int = 2
    device: str = "cpu"
    model: str = "qwen2.5-3b"
    context_len: int = 2048
    batches: tuple[int, ...] = (1, 8, 64, 256)
    runs: int = 6  # interleaved samples of each operation per round
    rounds: int = 15  # rounds: the check judges medians across them, widened by their spread
    timeout_s: float = 60.0
    gpu: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    fail_rank: int | None = None  # inject a failure on this rank (tests the no-hang guarantee)


class LinkRow(NamedTuple):
    operation: str
    bytes: int
    measured_s: float
    p20_s: float
    p80_s: float
    predicted_s: float
    predicted_alpha_beta_s: float  # the same without the host's reduction
    predicted_profile_s: float | None
    error: float
    used_for_calibration: bool
    spread: float = 0.0  # of predicted / measured across the rounds, each round its own link
    noise: float = 0.0  # 2 standard errors of its median error (timing.noise of the spread)
    judged: bool = False  # False: calibration, or noisy (noise above the tolerance), not judged


class DistributedCheck(NamedTuple):
    passed: bool
    tolerance: float
    median_abs_error: float  # over the judged rows
    worst_abs_error: float
    failures: tuple[Note, ...]
    rounds: int = 1
    spread: float = 0.0  # between rounds: the median spread of every timed operation's time
    error_spread: float = 0.0  # ... and of the predicted rows' predicted / measured
    allowance: float = 0.0  # the median criterion's widening: the judged rows' median noise
    judged: int = 0
    noisy: tuple[str, ...] = ()  # rows whose rounds disagree beyond the tolerance: not judged
    mutations: tuple[LinkMutation, ...] = ()  # the self-test


class LinkMutation(NamedTuple):
    """The gate's figures with the same rows predicted by a wrong link."""

    name: str
    bandwidth_factor: float
    median_abs_error: float
    worst_abs_error: float
    caught: bool


class DistributedResult(NamedTuple):
    ranks: int
    backend: str
    device: str
    model: str
    latency_s: float
    bandwidth_bytes_per_s: float
    reduce_bytes_per_s: float | None
    send_latency_s: float
    send_bandwidth_bytes_per_s: float
    rows: tuple[LinkRow, ...]
    calibration: tuple[LinkRow, ...]
    check: DistributedCheck
    raw: dict
    notes: tuple[Note, ...]


def calibration_sizes(reported: list[int]) -> list[int]:
    """Four all-reduce sizes spanning the reported ones (x1/4 .. x4), none equal to any of them,
    whole fp32 elements."""
    lo, hi = min(reported), max(reported)
    sizes = {lo * 3 // 8, lo * 3, hi * 3 // 4, hi * 3}
    out = []
    for size in sorted(sizes):
        size = max(4, size // 4 * 4)
        while size in reported or size in out:
            size += 4
        out.append(size)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _interleaved(ops: dict, rounds: int, per_round: int, device: str, barrier) -> dict:
    """Time every operation in the same interleaved passes (A B C A B C ...), a barrier before
    each sample, so that drift and other processes hit all of them alike; per operation, `inner`
    back-to-back calls per sample (nccl-tests style). `rounds` rounds of `per_round` passes, the
    order rotated each round (every rank alike). Per operation and round, its typical sample
    (Timing.typical_s: load only ever slows a call); the operation's time is the median of
    those round times, its p20/p80 theirs (their spread is the between-round noise)."""
    import torch

    for fn, inner in ops.values():
        for _ in range(max(2, inner)):
            fn()
    keys = list(ops)
    per_key: dict = {key: [] for key in ops}
    kept: dict = {key: [] for key in ops}
    for r in range(rounds):
        samples: dict = {key: [] for key in ops}
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for _ in range(per_round):
            for key in order:
                fn, inner = ops[key]
                barrier()
                start = time.perf_counter()
                for _ in range(inner):
                    fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                samples[key].append((time.perf_counter() - start) / inner)
        for key, values in samples.items():
            per_key[key].append(summarize(values).typical_s)
            kept[key].append(values)
    out = {}
    for key, values in per_key.items():
        t = summarize(values)
        out[key] = {
            "median_s": t.median_s,
            "p20_s": t.p20_s,
            "p80_s": t.p80_s,
            "runs": t.runs,
            "round_s": values,
            "samples_s": kept[key],
        }
    return out


def _worker(rank: int, world: int, port: int, request: DistributedRequest, out: str) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if request.device == "cuda" else "gloo"
    if request.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:
        torch.set_num_threads(1)  # N ranks on the cores: no rank oversubscribes another's
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=request.timeout_s),
    )
    try:
        _measure_rank(rank, request, out)
    except Exception as exc:  # record the cause before the other ranks see a dead peer
        Path(out).with_name(f"error-rank{rank}.txt").write_text(
            f"{time.time():.6f} rank {rank}: {exc.__class__.__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        )
        raise
    finally:
        dist.destroy_process_group()


def _measure_rank(rank: int, request: DistributedRequest, out: str) -> None:
    import torch
    import torch.distributed as dist

    if request.fail_rank == rank:
        raise RuntimeError(f"injected failure on rank {rank}")
    device = "cuda" if request.device == "cuda" else "cpu"
    spec = load_model(request.model)
    # bf16 activations on the wire; gloo reduces fp32, so on a CPU the same bytes travel as fp32
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    element = 2 if dtype == torch.bfloat16 else 4

    def barrier():
        dist.barrier()

    def allreduce(num_bytes: int):
        tensor = torch.ones(max(1, num_bytes // element), dtype=dtype, device=device)
        return (lambda: dist.all_reduce(tensor)), INNER

    def sender(num_bytes: int):
        buf = torch.zeros(num_bytes, dtype=torch.uint8, device=device)

        def run():
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)

        return run, 1

    reported = [tp_allreduce_bytes(spec, b) for b in request.batches]
    calibration = calibration_sizes(reported)
    kv_bytes = kv_bytes_per_sequence(spec, request.context_len, KvFormat(spec.dtype))
    ops = {f"cal:{size}": allreduce(size) for size in calibration}
    ops.update({f"ar:{size}": allreduce(size) for size in reported})
    ops["kv"] = sender(kv_bytes)
    sends = [size for size in SEND_CALIBRATION_BYTES if size != kv_bytes]
    ops.update({f"send:{size}": sender(size) for size in sends})
    if device == "cpu":  # the host's reduction rate: a += b at the largest calibration size
        a = torch.ones(calibration[-1] // 4)
        b = torch.ones(calibration[-1] // 4)
        ops["reduce"] = ((lambda: a.add_(b)), 5)
    timed = _interleaved(ops, request.rounds, request.runs, device, barrier)
    results: dict = {
        "calibration": [{"message_bytes": m, **timed[f"cal:{m}"]} for m in calibration],
        "allreduce": [
            {"batch_size": b, "message_bytes": m, **timed[f"ar:{m}"]}
            for b, m in zip(request.batches, reported, strict=True)
        ],
        "kv_send": timed["kv"],
        "send_calibration": [{"message_bytes": m, **timed[f"send:{m}"]} for m in sends],
        "kv_bytes": kv_bytes,
        "hidden_size": spec.hidden_size,
    }
    if "reduce" in timed:
        results["reduce"] = {"bytes": calibration[-1], **timed["reduce"]}
    if rank == 0:
        Path(out).write_text(json.dumps(results))


def _spawn(request: DistributedRequest, out: str) -> None:
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.start_processes(
        _spawned_worker,
        args=(os.getpid(), request.nproc, port, request, out),
        nprocs=request.nproc,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + request.timeout_s * 3 + 60
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise KvplanError("distributed run timed out; every rank was stopped")
    except KvplanError:
        raise
    except Exception as exc:  # a rank raised or died: spawn has already ended the others
        causes = sorted(Path(out).parent.glob("error-rank*.txt"), key=lambda p: p.read_text())
        if causes:
            detail = causes[0].read_text().split(" ", 1)[1]
        else:
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            detail = lines[-1] if lines else exc.__class__.__name__
        raise KvplanError(
            f"distributed run failed, all ranks stopped; first error: {detail}"
        ) from None
    finally:  # a timeout, an error, a signal: no rank outlives the run (a SystemExit here used
        # to wait for the ranks to finish their work: multiprocessing joins its children at exit)
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(1.0)


def _spawned_worker(rank: int, parent: int, *args) -> None:
    """A rank this process spawned: SIGKILL when its parent dies (kvplan.processes). torch's
    spawn asks for SIGINT, which a rank blocked in a collective does not act on until the
    collective's timeout."""
    from kvplan.processes import die_with_parent

    die_with_parent(parent)
    _worker(rank, *args)


def run_distributed(request: DistributedRequest) -> DistributedResult | None:
    """The Python twin of `kvplan measure --distributed` (None on a torchrun rank but 0)."""
    if request.nproc < 2 or request.nproc > 64:
        raise KvplanError("--nproc must be between 2 and 64")
    if request.device not in ("cpu", "cuda"):
        raise KvplanError(f"--device {request.device!r}: choose cpu or cuda")
    if not 0.01 <= request.tolerance <= 5:
        raise KvplanError("--tolerance must be between 0.01 and 5")
    if request.device == "cuda":
        import torch

        if torch.cuda.device_count() < request.nproc:
            raise KvplanError(f"--nproc {request.nproc} needs {request.nproc} CUDA devices")
    load_model(request.model)  # fail fast on a bad model, before any process starts
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rank0.json")
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            port = int(os.environ.get("MASTER_PORT", "29500"))
            _worker(rank, world, port, request._replace(nproc=world), out)
            if rank != 0:
                return None
        else:
            _spawn(request, out)
        results = json.loads(Path(out).read_text())
    return analyse(request, results)


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares t = intercept + slope x M over (bytes, seconds), both kept positive (a flat
    or noisy fit falls back to the largest message's time per byte)."""
    xs = [m for m, _ in points]
    ys = [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    if slope <= 0:
        slope = max(ys[-1], 1e-9) / xs[-1]
    return max(my - slope * mx, 1e-7), slope


def fit_ring(points: list[tuple[float, float]], ranks: int) -> tuple[float, float]:
    """(latency a per step, one-way bandwidth B) of t = 2(N-1) a + 2(N-1)/N M / B, fitted to
    all-reduces with the host reduction already taken out."""
    steps = 2 * (ranks - 1)
    intercept, slope = fit_line(points)
    return intercept / steps, steps / ranks / slope


class Link(NamedTuple):
    """The fitted link: ring all-reduce (latency per step, one-way bandwidth, the host's add
    rate where it reduces) and point-to-point sends."""

    latency_s: float
    bandwidth_bytes_per_s: float
    reduce_bytes_per_s: float | None
    send_latency_s: float
    send_bandwidth_bytes_per_s: float


def fit_link(ranks: int, results: dict) -> Link:
    """The link fitted to the calibration all-reduces (the host's reduction taken out) and the
    sends, from their `median_s`."""
    reduce_rate = None
    if "reduce" in results:
        reduce_rate = results["reduce"]["bytes"] / results["reduce"]["median_s"]
    cal = sorted(results["calibration"], key=lambda r: r["message_bytes"])
    latency, bandwidth = fit_ring(
        [
            (r["message_bytes"], r["median_s"] - _reduction(r["message_bytes"], ranks, reduce_rate))
            for r in cal
        ],
        ranks,
    )
    sends = sorted(results["send_calibration"], key=lambda r: r["message_bytes"])
    send_latency, per_byte = fit_line([(r["message_bytes"], r["median_s"]) for r in sends])
    return Link(latency, bandwidth, reduce_rate, send_latency, 1 / per_byte)


def _reduction(size: float, ranks: int, rate: float | None) -> float:
    return ring_allreduce_reduce_time_s(size, ranks, rate) if rate else 0.0


def predict(ranks: int, results: dict, link: Link, faster: float = 1.0) -> dict:
    """{key: (predicted s, alpha-beta only s, measured s)} for every all-reduce (`cal:` and `ar:`
    with its size) and the KV transfer (`kv`); `faster` scales both bandwidths (the self-test)."""
    out = {}
    for kind, items in (("cal", results["calibration"]), ("ar", results["allreduce"])):
        for item in items:
            size = item["message_bytes"]
            alpha_beta = ring_allreduce_time_s(
                size, ranks, link.bandwidth_bytes_per_s * faster, link.latency_s
            )
            predicted = alpha_beta + _reduction(size, ranks, link.reduce_bytes_per_s)
            out[f"{kind}:{size}"] = (predicted, alpha_beta, item["median_s"])
    kv = p2p_time_s(
        results["kv_bytes"], link.send_bandwidth_bytes_per_s * faster, link.send_latency_s
    )
    out["kv"] = (kv, kv, results["kv_send"]["median_s"])
    return out


def round_results(results: dict, r: int) -> dict:
    """The ranks' results as round `r` alone measured them (each `median_s` its round median)."""

    def at(item: dict) -> dict:
        return {**item, "median_s": item["round_s"][r]}

    out = {
        **results,
        "calibration": [at(i) for i in results["calibration"]],
        "allreduce": [at(i) for i in results["allreduce"]],
        "kv_send": at(results["kv_send"]),
        "send_calibration": [at(i) for i in results["send_calibration"]],
    }
    if "reduce" in results:
        out["reduce"] = at(results["reduce"])
    return out


def ratio_spreads(ranks: int, results: dict) -> tuple[int, dict]:
    """(rounds, {key: spread}): each round's own link predicts that round's operations; the
    spread of predicted / measured across the rounds is how far one row's error moves by chance
    (load that slows a whole round slows its calibration alike and cancels). Ranks' results
    without round medians (one round): no spread."""
    rounds = min(len(i.get("round_s", ())) for i in results["calibration"])
    if rounds < 2:
        return 1, {key: 0.0 for key in predict(ranks, results, fit_link(ranks, results))}
    ratios: dict = {}
    for r in range(rounds):
        one = round_results(results, r)
        for key, (predicted, _, measured) in predict(ranks, one, fit_link(ranks, one)).items():
            ratios.setdefault(key, []).append(predicted / measured)
    return rounds, {key: summarize(values).spread for key, values in ratios.items()}


def _spread(item: dict) -> float:
    """An operation's between-round spread (its p20/p80 are over its round medians)."""
    return Timing(item["median_s"], item["p20_s"], item["p80_s"], item["runs"]).spread


def judge(rows: list[LinkRow], tolerance: float) -> tuple[float, float, list[Note], float]:
    """The gate over the predicted rows: (median |error|, worst |error|, failures, allowance).
    Only judged rows count; a row's limit is widened by its noise (its own and its
    prediction's): median |error| <= tolerance + the judged rows' median noise, each judged row
    <= 2 x tolerance + its noise. A row whose noise exceeds the tolerance is not judged (the
    self-test in `analyse` fails a run whose judged rows could not see a wrong link)."""
    judged = [r for r in rows if r.judged]
    counted = judged or rows
    median_err = statistics.median(abs(r.error) for r in counted)
    worst_err = max(abs(r.error) for r in counted)
    allowance = statistics.median(r.noise for r in judged) if judged else 0.0
    failures = []
    if judged and median_err > tolerance + allowance:
        failures.append(note("check-median", error=median_err, tolerance=tolerance + allowance))
    beyond = [r for r in judged if abs(r.error) > 2 * tolerance + r.noise]
    if beyond:
        worst = max(beyond, key=lambda r: abs(r.error) - r.noise)
        failures.append(
            note(
                "check-link-worst",
                operation=worst.operation,
                error=worst.error,
                tolerance=2 * tolerance + worst.noise,
            )
        )
    return median_err, worst_err, failures, allowance


def analyse(request: DistributedRequest, results: dict) -> DistributedResult:
    n = request.nproc
    link = fit_link(n, results)
    sheet = None
    if request.gpu:
        from kvplan.inputs.hardware import load_profile

        sheet = load_profile(request.gpu).interconnect
    rounds, spreads = ratio_spreads(n, results)

    def link_rows(faster: float = 1.0) -> tuple[list[LinkRow], list[LinkRow]]:
        """(calibration rows, predicted rows) with the link's bandwidths x `faster`."""
        predicted = predict(n, results, link, faster)

        def row(key: str, item: dict, label: str, calibration: bool, profile) -> LinkRow:
            time_s, alpha_beta, measured = predicted[key]
            row_noise = noise(spreads[key], rounds)
            return LinkRow(
                label,
                item.get("message_bytes", results["kv_bytes"]),
                measured,
                item["p20_s"],
                item["p80_s"],
                time_s,
                alpha_beta,
                profile,
                time_s / measured - 1,
                calibration,
                spreads[key],
                row_noise,
                not calibration and row_noise <= request.tolerance,
            )

        def ring(size: int) -> float | None:
            return (
                ring_allreduce_time_s(size, n, sheet.one_way_bytes_per_s, sheet.latency_s)
                if sheet
                else None
            )

        cal = [
            row(
                f"cal:{r['message_bytes']}",
                r,
                f"all-reduce, {r['message_bytes']:,} B (calibration)",
                True,
                ring(r["message_bytes"]),
            )
            for r in sorted(results["calibration"], key=lambda r: r["message_bytes"])
        ]
        reported = [
            row(
                f"ar:{r['message_bytes']}",
                r,
                f"all-reduce, batch {r['batch_size']}",
                False,
                ring(r["message_bytes"]),
            )
            for r in results["allreduce"]
        ]
        reported.append(
            row(
                "kv",
                results["kv_send"],
                f"KV transfer, one {request.context_len:,}-token {request.model} request",
                False,
                p2p_time_s(results["kv_bytes"], sheet.one_way_bytes_per_s, sheet.latency_s)
                if sheet
                else None,
            )
        )
        return cal, reported

    calibration, rows = link_rows()
    median_err, worst_err, failures, allowance = judge(rows, request.tolerance)
    # the self-test: the same rows, with their noise, predicted by a link 10x off
    mutations = []
    for name, factor in MUTATIONS:
        mutated_median, mutated_worst, missed, _ = judge(link_rows(factor)[1], request.tolerance)
        mutations.append(LinkMutation(name, factor, mutated_median, mutated_worst, bool(missed)))
        if not missed:
            failures.append(
                note(
                    "check-mutation-missed",
                    mutation=name,
                    median=mutated_median,
                    worst=mutated_worst,
                )
            )
    timed = [
        *results["calibration"],
        *results["allreduce"],
        results["kv_send"],
        *results["send_calibration"],
    ]
    check = DistributedCheck(
        not failures,
        request.tolerance,
        median_err,
        worst_err,
        tuple(failures),
        rounds,
        statistics.median(_spread(item) for item in timed),
        statistics.median(r.spread for r in rows),
        allowance,
        sum(1 for r in rows if r.judged),
        tuple(r.operation for r in rows if not r.judged),
        tuple(mutations),
    )
    latency, bandwidth, reduce_rate = (
        link.latency_s,
        link.bandwidth_bytes_per_s,
        link.reduce_bytes_per_s,
    )
    send_latency, send_bandwidth = link.send_latency_s, link.send_bandwidth_bytes_per_s
    sends = sorted(results["send_calibration"], key=lambda r: r["message_bytes"])
    backend = "NCCL" if request.device == "cuda" else "gloo"
    notes = [
        note(
            "distributed-method",
            ranks=n,
            backend=backend,
            device=request.device,
            runs=request.runs,
            rounds=rounds,
            latency_s=latency,
            bandwidth=bandwidth,
            calibration=[r.bytes for r in calibration],
        ),
        note("distributed-reduce", rate=reduce_rate)
        if reduce_rate
        else note("distributed-no-reduce"),
        note(
            "distributed-send",
            latency_s=send_latency,
            bandwidth=send_bandwidth,
            sizes=[r["message_bytes"] for r in sends],
        ),
        note(
            "distributed-sizes",
            hidden=results["hidden_size"],
            model=request.model,
            context=request.context_len,
            kv_bytes=results["kv_bytes"],
        ),
        note(
            "distributed-rounds",
            rounds=rounds,
            spread=check.spread,
            error_spread=check.error_spread,
            allowance=allowance,
            tolerance=request.tolerance,
            noisy=list(check.noisy),
            mutations=[[m.name, m.median_abs_error, m.worst_abs_error] for m in mutations],
        ),
        *failures,
    ]
    return DistributedResult(
        n,
        backend,
        request.device,
        request.model,
        latency,
        bandwidth,
        reduce_rate,
        send_latency,
        send_bandwidth,
        tuple(rows),
        tuple(calibration),
        check,
        results,
        tuple(notes),
    )
