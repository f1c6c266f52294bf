"""`kvplan measure --distributed`: all-reduce over the message sizes a decode step uses, and one
request's KV cache sent point-to-point, with torch.distributed (gloo on CPUs, NCCL on GPUs).

Launch: `kvplan measure --distributed --nproc 2` spawns the ranks itself; under
`torchrun --nproc-per-node N -m kvplan measure --distributed` each rank runs in place. Every
collective has a timeout, and the parent watches the ranks: one rank failing ends them all with a
clear error, never a hang.

Predictions: the alpha-beta model calibrated on this link (latency from a 4-byte ping-pong,
bandwidth from a 16 MiB message) predicts every all-reduce size (ring: 2(N-1)/N M/B + 2(N-1) a)
and the KV transfer; with --gpu PROFILE, the profile's interconnect figures predict them too.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.formulas.comm import p2p_time_s, ring_allreduce_time_s
from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.sources import load_model
from kvplan.measure.timing import summarize
from kvplan.present import format as f
from kvplan.present.view import Column, Table
from kvplan.present.view import View as Report

CALIBRATION_BYTES = 16 << 20
INNER = 20  # small operations timed in loops of 20 per sample


class DistributedRequest(NamedTuple):
    nproc: int = 2
    device: str = "cpu"
    model: str = "qwen2.5-3b"
    context_len: int = 2048
    batches: tuple[int, ...] = (1, 8, 64, 256)
    runs: int = 15
    timeout_s: float = 60.0
    gpu: str | None = None
    fail_rank: int | None = None  # inject a failure on this rank (tests the no-hang guarantee)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(fn, runs: int, device: str, barrier, inner: int = 1) -> dict:
    """Per-operation time: `inner` back-to-back operations per sample (as nccl-tests does), so a
    sample is not dominated by the barrier's wake-up; median and p20/p80 over `runs` samples."""
    import torch

    for _ in range(max(2, inner)):
        fn()
    samples = []
    for _ in range(runs):
        barrier()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / inner)
    return summarize(samples).to_json()


def _worker(rank: int, world: int, port: int, request: DistributedRequest, out: str) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if request.device == "cuda" else "gloo"
    if request.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
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

    def barrier():
        dist.barrier()

    def ping():  # rank 0 <-> rank 1 round trip
        buf = torch.zeros(1, dtype=torch.float32, device=device)
        if rank == 0:
            dist.send(buf, 1)
            dist.recv(buf, 1)
        elif rank == 1:
            dist.recv(buf, 0)
            dist.send(buf, 0)

    def sender(num_bytes: int):
        buf = torch.zeros(num_bytes, dtype=torch.uint8, device=device)

        def run():
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)

        return run

    results = {"ping_roundtrip": _timed(ping, request.runs, request.device, barrier, inner=INNER)}
    results["calibration_send"] = _timed(
        sender(CALIBRATION_BYTES), request.runs, request.device, barrier
    )
    kv_bytes = kv_bytes_per_sequence(spec, request.context_len, KvFormat(spec.dtype))
    results["kv_send"] = _timed(
        sender(kv_bytes), max(5, request.runs // 3), request.device, barrier
    )
    results["kv_bytes"] = kv_bytes
    allreduce = []
    for batch in request.batches:
        message = batch * spec.hidden_size * 2  # bf16 activations
        # gloo reduces fp32; the same bytes travel either way
        dtype = torch.bfloat16 if request.device == "cuda" else torch.float32
        tensor = torch.ones(
            message // (2 if dtype == torch.bfloat16 else 4), dtype=dtype, device=device
        )
        timing = _timed(
            lambda t=tensor: dist.all_reduce(t),
            request.runs,
            request.device,
            barrier,
            inner=INNER,
        )
        allreduce.append({"batch_size": batch, "message_bytes": message, **timing})
    results["allreduce"] = allreduce
    if rank == 0:
        Path(out).write_text(json.dumps(results))


def _spawn(request: DistributedRequest, out: str) -> None:
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.start_processes(
        _worker,
        args=(request.nproc, port, request, out),
        nprocs=request.nproc,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + request.timeout_s * 3 + 60
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
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


def run_distributed(request: DistributedRequest) -> Report:
    """The Python twin of `kvplan measure --distributed`."""
    if request.nproc < 2 or request.nproc > 64:
        raise KvplanError("--nproc must be between 2 and 64")
    if request.device not in ("cpu", "cuda"):
        raise KvplanError(f"--device {request.device!r}: choose cpu or cuda")
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
                return Report("rank done", data={"rank": rank})
        else:
            _spawn(request, out)
        results = json.loads(Path(out).read_text())
    return _report(request, results)


def _report(request: DistributedRequest, results: dict) -> Report:
    n = request.nproc
    smallest = min(results["allreduce"], key=lambda r: r["message_bytes"])
    steps = 2 * (n - 1)
    bandwidth = CALIBRATION_BYTES / results["calibration_send"]["median_s"]
    # alpha from the smallest all-reduce (the calibration point), less its small bandwidth term
    latency = max(
        1e-9, (smallest["median_s"] - steps / n * smallest["message_bytes"] / bandwidth) / steps
    )
    profile_link = None
    if request.gpu:
        from kvplan.inputs.hardware import load_profile

        profile = load_profile(request.gpu)
        profile_link = profile.interconnect
    rows = []
    for item in results["allreduce"]:
        predicted = ring_allreduce_time_s(item["message_bytes"], n, bandwidth, latency)
        sheet = (
            ring_allreduce_time_s(
                item["message_bytes"], n, profile_link.one_way_bytes_per_s, profile_link.latency_s
            )
            if profile_link
            else None
        )
        rows.append(
            {
                "operation": f"all-reduce, batch {item['batch_size']}",
                "bytes": item["message_bytes"],
                "measured_s": item["median_s"],
                "p20_s": item["p20_s"],
                "p80_s": item["p80_s"],
                "predicted_calibrated_s": predicted,
                "predicted_profile_s": sheet,
                "error_calibrated": (predicted - item["median_s"]) / item["median_s"],
                "calibration_point": item is smallest,
            }
        )
    kv = results["kv_send"]
    predicted = p2p_time_s(results["kv_bytes"], bandwidth, latency)
    rows.append(
        {
            "operation": f"KV transfer, one {request.context_len:,}-token request",
            "bytes": results["kv_bytes"],
            "measured_s": kv["median_s"],
            "p20_s": kv["p20_s"],
            "p80_s": kv["p80_s"],
            "predicted_calibrated_s": predicted,
            "predicted_profile_s": p2p_time_s(
                results["kv_bytes"], profile_link.one_way_bytes_per_s, profile_link.latency_s
            )
            if profile_link
            else None,
            "error_calibrated": (predicted - kv["median_s"]) / kv["median_s"],
        }
    )
    backend = "NCCL" if request.device == "cuda" else "gloo"
    notes = [
        f"{n} ranks, {backend} on {request.device}, loopback TCP rendezvous; medians of "
        f"{request.runs} runs after a warm-up, a barrier before each.",
        f"Calibrated alpha-beta link: latency {latency * 1e6:,.1f} us per ring step (from the "
        f"smallest all-reduce, the calibration point), bandwidth {bandwidth / 1e9:,.2f} GB/s (a "
        "16 MiB send); the other all-reduce sizes (ring: 2(N-1)/N M/B + 2(N-1) a) and the KV "
        "transfer (a + M/B) are predictions. A 4-byte send/recv round trip took "
        f"{results['ping_roundtrip']['median_s'] * 1e6:,.0f} us.",
        f"All-reduce messages are batch x hidden ({load_model(request.model).hidden_size}) bf16 "
        "activations, what a TP decode step reduces twice per layer"
        + (
            "; gloo reduces them as fp32 of the same byte count."
            if request.device == "cpu"
            else "."
        ),
    ]
    columns = [
        Column("operation", "operation", f.text, "left"),
        Column("bytes", "bytes", lambda v: f"{v:,}"),
        Column("measured_s", "measured (ms)", lambda v: f"{v * 1e3:,.3f}"),
        Column("predicted_calibrated_s", "predicted (ms)", lambda v: f"{v * 1e3:,.3f}"),
        Column("error_calibrated", "error", lambda v: f"{v:+.0%}"),
        Column(
            "predicted_profile_s", "profile (ms)", lambda v: "—" if v is None else f"{v * 1e3:,.3f}"
        ),
    ]
    data = {
        "kvplan_version": __version__,
        "ranks": n,
        "backend": backend,
        "device": request.device,
        "latency_s": latency,
        "bandwidth_bytes_per_s": bandwidth,
        "rows": rows,
        "raw": results,
        "notes": notes,
    }
    facts = [
        ("ranks", f"{n} ({backend}, {request.device})"),
        ("link (calibrated)", f"{latency * 1e6:,.1f} us, {bandwidth / 1e9:,.2f} GB/s"),
    ]
    return Report("kvplan measure --distributed", facts, [Table("", columns, rows)], notes, data)
