"""kvplan measure --distributed: the link model fitted on sizes it does not report, gloo's host
reduction, the check (from synthetic timings, fast), and real gloo runs across 2 spawned
processes, bounded in time, where a rank that raises ends the whole run with a clear error (slow).
No test asserts a speed."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from kvplan.errors import KvplanError  # noqa: E402
from kvplan.formulas.comm import (  # noqa: E402
    p2p_time_s,
    ring_allreduce_reduce_time_s,
    ring_allreduce_time_s,
    tp_allreduce_bytes,
)
from kvplan.inputs.sources import load_model  # noqa: E402
from kvplan.measure.distributed import (  # noqa: E402
    DistributedRequest,
    analyse,
    calibration_sizes,
    fit_line,
    run_distributed,
)

from helpers import run_cli  # noqa: E402

gloo = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

SMALL = dict(model="qwen2.5-3b", context_len=64, batches=(1, 8), runs=3, timeout_s=30)
LATENCY, BANDWIDTH, REDUCE = 50e-6, 2e9, 10e9  # a link and a host with known figures


def _timing(seconds: float) -> dict:
    return {"median_s": seconds, "p20_s": seconds * 0.9, "p80_s": seconds * 1.1, "runs": 9}


def synthetic(request: DistributedRequest, kv_error: float = 0.0) -> dict:
    """What the ranks would report on a link with exactly LATENCY and BANDWIDTH and a host adding
    at REDUCE, the KV send off by `kv_error`."""
    n, spec = request.nproc, load_model(request.model)
    reported = [tp_allreduce_bytes(spec, b) for b in request.batches]

    def allreduce(size):
        return ring_allreduce_time_s(size, n, BANDWIDTH, LATENCY) + ring_allreduce_reduce_time_s(
            size, n, REDUCE
        )

    kv_bytes = 75_497_472
    return {
        "calibration": [
            {"message_bytes": m, **_timing(allreduce(m))} for m in calibration_sizes(reported)
        ],
        "allreduce": [
            {"batch_size": b, "message_bytes": m, **_timing(allreduce(m))}
            for b, m in zip(request.batches, reported, strict=True)
        ],
        "reduce": {"bytes": 1 << 20, **_timing((1 << 20) / REDUCE)},
        "send_calibration": [
            {"message_bytes": m, **_timing(p2p_time_s(m, BANDWIDTH, LATENCY))}
            for m in (1 << 20, 16 << 20)
        ],
        "kv_send": _timing(p2p_time_s(kv_bytes, BANDWIDTH, LATENCY) * (1 + kv_error)),
        "kv_bytes": kv_bytes,
        "hidden_size": spec.hidden_size,
    }


def test_calibration_sizes_are_never_reported_ones():
    reported = [tp_allreduce_bytes(load_model("qwen2.5-3b"), b) for b in (1, 8, 64, 256)]
    sizes = calibration_sizes(reported)
    assert len(sizes) == 4 and not set(sizes) & set(reported)
    assert min(sizes) < min(reported) and max(sizes) > max(reported)
    assert all(size % 4 == 0 for size in sizes)


def test_the_link_is_recovered_from_calibration_alone_and_predicts_the_rest():
    request = DistributedRequest(nproc=4, batches=(1, 8, 64, 256))
    result = analyse(request, synthetic(request))
    assert result.latency_s == pytest.approx(LATENCY, rel=1e-6)
    assert result.bandwidth_bytes_per_s == pytest.approx(BANDWIDTH, rel=1e-6)
    assert result.reduce_bytes_per_s == pytest.approx(REDUCE)
    assert all(abs(row.error) < 1e-6 for row in result.rows)
    assert not any(row.used_for_calibration for row in result.rows)
    assert all(row.used_for_calibration for row in result.calibration)
    assert result.check.passed
    # without the host's reduction the largest all-reduce is under-predicted
    largest = max(result.rows[:-1], key=lambda r: r.bytes)
    assert largest.predicted_alpha_beta_s < largest.measured_s
    assert largest.predicted_s - largest.predicted_alpha_beta_s == pytest.approx(
        3 / 4 * largest.bytes / REDUCE
    )


def test_the_check_fails_on_a_miss():
    request = DistributedRequest(nproc=2, batches=(1, 8), tolerance=0.25)
    result = analyse(request, synthetic(request, kv_error=1.5))  # the KV send 2.5x slower
    assert not result.check.passed
    assert "check-link-worst" in {n.id for n in result.check.failures}


def test_the_kv_transfer_size_follows_the_model():
    for model in ("qwen2.5-3b", "llama-3.1-8b"):
        request = DistributedRequest(nproc=2, model=model, batches=(1,))
        rows = analyse(request, synthetic(request)).rows
        assert model in rows[-1].operation
    assert fit_line([(1.0, 3.0), (2.0, 5.0)]) == pytest.approx((1.0, 2.0))


def test_bad_arguments():
    with pytest.raises(KvplanError, match="--nproc"):
        run_distributed(DistributedRequest(nproc=1))
    with pytest.raises(KvplanError, match="unknown model"):
        run_distributed(DistributedRequest(nproc=2, model="no-such-model"))
    with pytest.raises(KvplanError, match="--tolerance"):
        run_distributed(DistributedRequest(nproc=2, tolerance=0.0))


@gloo
@pytest.mark.slow
def test_two_process_gloo_run():
    result = run_distributed(DistributedRequest(nproc=2, gpu="h100", **SMALL))
    assert result.ranks == 2 and result.backend == "gloo"
    assert result.latency_s > 0 and result.bandwidth_bytes_per_s > 0
    kinds = [r.operation for r in result.rows]
    assert kinds[:2] == ["all-reduce, batch 1", "all-reduce, batch 8"]
    assert kinds[2].startswith("KV transfer")
    for row in result.rows + result.calibration:
        assert row.measured_s > 0 and row.p20_s <= row.measured_s <= row.p80_s
        assert row.predicted_s > 0 and row.predicted_profile_s > 0
    assert result.rows[0].bytes == 1 * 2048 * 2  # batch x hidden bf16
    assert result.rows[2].bytes == 64 * 36 * 2 * 2 * 128 * 2  # one 64-token request's KV


@gloo
@pytest.mark.slow
def test_check_works_with_distributed_from_the_command_line(tmp_path):
    out = tmp_path / "d.json"
    code, _, err = run_cli(
        "measure", "--distributed", "--quick", "--check", "--tolerance", "5", "--json", str(out)
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["check"]["passed"] and err.strip().splitlines()[-1].startswith("kvplan measure")


@gloo
@pytest.mark.slow
def test_a_failing_rank_stops_every_rank_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(KvplanError, match="injected failure on rank 1"):
        run_distributed(DistributedRequest(nproc=2, fail_rank=1, **SMALL))
    assert time.monotonic() - start < 60
