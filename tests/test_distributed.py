"""kvplan measure --distributed on CPU: gloo across 2 spawned processes, bounded in time; a rank
that raises ends the whole run with a clear error. No test asserts a speed."""

from __future__ import annotations

import math
import time

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from kvplan.errors import KvplanError  # noqa: E402
from kvplan.measure.distributed import DistributedRequest, run_distributed  # noqa: E402

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

SMALL = dict(model="qwen2.5-3b", context_len=64, batches=(1, 8), runs=3, timeout_s=30)


def test_two_process_gloo_run():
    report = run_distributed(DistributedRequest(nproc=2, gpu="h100", **SMALL))
    data = report.data
    assert data["ranks"] == 2 and data["backend"] == "gloo"
    assert math.isfinite(data["latency_s"]) and data["latency_s"] > 0
    assert data["bandwidth_bytes_per_s"] > 0
    kinds = [r["operation"] for r in data["rows"]]
    assert kinds[:2] == ["all-reduce, batch 1", "all-reduce, batch 8"]
    assert kinds[2].startswith("KV transfer")
    for row in data["rows"]:
        assert row["measured_s"] > 0 and row["p20_s"] <= row["measured_s"] <= row["p80_s"]
        assert row["predicted_calibrated_s"] > 0 and row["predicted_profile_s"] > 0
    assert data["rows"][0]["bytes"] == 1 * 2048 * 2  # batch x hidden bf16
    assert data["rows"][2]["bytes"] == 64 * 36 * 2 * 2 * 128 * 2  # one 64-token request's KV


def test_a_failing_rank_stops_every_rank_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(KvplanError, match="injected failure on rank 1"):
        run_distributed(DistributedRequest(nproc=2, fail_rank=1, **SMALL))
    assert time.monotonic() - start < 60


def test_bad_arguments():
    with pytest.raises(KvplanError, match="--nproc"):
        run_distributed(DistributedRequest(nproc=1))
    with pytest.raises(KvplanError, match="unknown model"):
        run_distributed(DistributedRequest(nproc=2, model="no-such-model"))
