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

import kvplan.measure.distributed as distributed  # noqa: E402
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
from kvplan.measure.timing import NOISE_FACTOR  # noqa: E402

from helpers import run_cli  # noqa: E402

gloo = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

SMALL = dict(model="qwen2.5-3b", context_len=64, batches=(1, 8), runs=2, rounds=3, timeout_s=30)
LATENCY, BANDWIDTH, REDUCE = 50e-6, 2e9, 10e9  # a link and a host with known figures
STEADY = (1.0,) * 5  # five rounds that agree


def _timing(seconds: float, rounds: tuple[float, ...] = STEADY) -> dict:
    """An operation's round times: `seconds` x each round's factor, p20/p80 over the rounds
    (linear interpolation, as the ranks report them)."""
    times = sorted(seconds * f for f in rounds)

    def at(q):
        position = q * (len(times) - 1)
        lo = int(position)
        hi = min(lo + 1, len(times) - 1)
        return times[lo] + (times[hi] - times[lo]) * (position - lo)

    return {
        "median_s": at(0.5),
        "p20_s": at(0.2),
        "p80_s": at(0.8),
        "runs": len(times),
        "round_s": [seconds * f for f in rounds],
    }


def synthetic(
    request: DistributedRequest,
    kv_error: float = 0.0,
    rounds: tuple[float, ...] = STEADY,
    odd: dict | None = None,
) -> dict:
    """What the ranks would report on a link with exactly LATENCY and BANDWIDTH and a host adding
    at REDUCE, the KV send off by `kv_error`; every operation slowed by `rounds` (one factor per
    round, load that hits a whole round), and the operations named in `odd` (`ar:BATCH`, `kv`)
    by their own factors instead."""
    n, spec = request.nproc, load_model(request.model)
    reported = [tp_allreduce_bytes(spec, b) for b in request.batches]
    odd = odd or {}

    def allreduce(size):
        return ring_allreduce_time_s(size, n, BANDWIDTH, LATENCY) + ring_allreduce_reduce_time_s(
            size, n, REDUCE
        )

    kv_bytes = 75_497_472
    return {
        "calibration": [
            {"message_bytes": m, **_timing(allreduce(m), rounds)}
            for m in calibration_sizes(reported)
        ],
        "allreduce": [
            {
                "batch_size": b,
                "message_bytes": m,
                **_timing(allreduce(m), odd.get(f"ar:{b}", rounds)),
            }
            for b, m in zip(request.batches, reported, strict=True)
        ],
        "reduce": {"bytes": 1 << 20, **_timing((1 << 20) / REDUCE, rounds)},
        "send_calibration": [
            {"message_bytes": m, **_timing(p2p_time_s(m, BANDWIDTH, LATENCY), rounds)}
            for m in (1 << 20, 16 << 20)
        ],
        "kv_send": _timing(
            p2p_time_s(kv_bytes, BANDWIDTH, LATENCY) * (1 + kv_error), odd.get("kv", rounds)
        ),
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


def test_load_that_slows_whole_rounds_widens_nothing():
    """Every operation 0.7x to 1.6x slower from round to round, alike: the times spread, but each
    round's own link predicts its round exactly, so no row carries noise and all are judged."""
    request = DistributedRequest(nproc=2, batches=(1, 8, 64, 256), rounds=5)
    result = analyse(request, synthetic(request, rounds=(1.0, 1.6, 0.7, 1.3, 0.9)))
    check = result.check
    assert check.rounds == 5 and check.spread > 0.1  # (1.3 - 0.9) / 2 / 1.0 of the times
    assert check.error_spread == pytest.approx(0.0, abs=1e-9)
    assert all(row.judged and row.noise == pytest.approx(0.0, abs=1e-9) for row in result.rows)
    assert check.passed and check.judged == 5 and check.noisy == ()


def test_a_row_whose_rounds_disagree_is_noisy_not_judged():
    """Batch 8's all-reduce alone swings 0.2x to 3x between rounds (median 2.5x: measured 60%
    slower than predicted, beyond the 50% worst-point limit): reported noisy, not judged, and
    the check passes on the other rows instead of failing on it."""
    request = DistributedRequest(nproc=2, batches=(1, 8, 64, 256), rounds=5)
    swing = (0.2, 2.5, 3.0, 0.4, 2.5)
    result = analyse(request, synthetic(request, odd={"ar:8": swing}))
    row = next(r for r in result.rows if r.operation == "all-reduce, batch 8")
    assert row.error == pytest.approx(1 / 2.5 - 1)  # -60%
    assert not row.judged and row.noise > request.tolerance
    assert result.check.noisy == ("all-reduce, batch 8",) and result.check.judged == 4
    assert result.check.passed
    assert "distributed-rounds" in {n.id for n in result.notes}


def test_the_noise_widens_a_row_limit_by_two_standard_errors_of_its_median():
    """The KV send measured 1/1.6 of its prediction (error +60%, beyond 2 x 25%) with rounds
    0.8x to 1.2x: its predicted / measured spreads by about 12%, noise = NOISE_FACTOR x spread /
    sqrt(5), about 16%, limit about 66%: passes. The same error with rounds that agree fails."""
    request = DistributedRequest(nproc=2, batches=(1, 8, 64, 256), rounds=5)
    # kv_error -0.375: measured 0.625 x the link's time, predicted / measured = 1.6
    spread_rounds = (0.8, 0.9, 1.0, 1.1, 1.2)
    noisy = analyse(request, synthetic(request, kv_error=-0.375, odd={"kv": spread_rounds}))
    kv = noisy.rows[-1]
    assert kv.error == pytest.approx(0.6)
    # predicted / measured per round is 1.6 / factor: its p20-p80 over the rounds
    ratios = sorted(1.6 / f for f in spread_rounds)
    p20 = ratios[0] + (ratios[1] - ratios[0]) * 0.8
    p80 = ratios[3] + (ratios[4] - ratios[3]) * 0.2
    assert kv.spread == pytest.approx((p80 - p20) / 2 / 1.6)
    assert kv.noise == pytest.approx(NOISE_FACTOR * kv.spread / 5**0.5)
    assert kv.judged and 0.1 < kv.noise < 0.25 and kv.error < 2 * 0.25 + kv.noise
    assert noisy.check.passed
    steady = analyse(request, synthetic(request, kv_error=-0.375))
    assert not steady.check.passed
    assert "check-link-worst" in {n.id for n in steady.check.failures}


def test_the_self_test_fails_a_run_that_could_not_see_a_wrong_link():
    """Exact timings: a link 10x too fast or too slow is caught. Every row swinging 0.2x to 3x:
    none is judged, neither wrong link would show, and the check fails for it."""
    request = DistributedRequest(nproc=2, batches=(1, 8, 64, 256), rounds=5)
    exact = analyse(request, synthetic(request)).check
    assert [m.caught for m in exact.mutations] == [True, True]
    faster = exact.mutations[0]
    assert faster.bandwidth_factor == 10 and faster.worst_abs_error > 0.8  # the KV send
    swing = (0.2, 2.5, 3.0, 0.4, 2.5)
    odd = {"ar:1": swing, "ar:8": swing, "ar:64": swing[::-1], "ar:256": swing, "kv": swing}
    blind = analyse(request, synthetic(request, odd=odd)).check
    assert blind.judged == 0 and not blind.passed
    assert [n.id for n in blind.failures] == ["check-mutation-missed"] * 2


def test_a_prediction_10x_off_fails_even_where_it_would_look_right():
    """The link fitted 10x too fast (a wrong formula, say) on exact timings: the check fails, and
    on rows noisy enough to hide it, the self-test's 10x slower link (the truth) passing fails
    it too."""
    request = DistributedRequest(nproc=2, batches=(1, 8, 64, 256), rounds=5)
    fit = distributed.fit_link

    def wrong(ranks, results):
        link = fit(ranks, results)
        return link._replace(
            bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * 10,
            send_bandwidth_bytes_per_s=link.send_bandwidth_bytes_per_s * 10,
        )

    try:
        distributed.fit_link = wrong
        result = analyse(request, synthetic(request))
    finally:
        distributed.fit_link = fit
    assert not result.check.passed
    assert "check-link-worst" in {n.id for n in result.check.failures}
    assert "check-mutation-missed" in {n.id for n in result.check.failures}  # 10x slower passes


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
def test_a_link_10x_too_fast_fails_on_a_real_noisy_run(monkeypatch):
    """A real gloo run (2 ranks on this machine, under whatever load it has), analysed with its
    fitted bandwidths x10: the check fails, whatever the noise (either the rows show the error
    or the self-test's 10x slower link, which is the measured one, passes)."""
    request = DistributedRequest(
        nproc=2, context_len=2048, batches=(64, 256), runs=3, rounds=5, timeout_s=60
    )
    kept = {}
    real = distributed.analyse

    def keep(request, results):
        kept["results"] = results
        return real(request, results)

    monkeypatch.setattr(distributed, "analyse", keep)
    honest = run_distributed(request)
    fit = distributed.fit_link

    def wrong(ranks, results):
        link = fit(ranks, results)
        return link._replace(
            bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * 10,
            send_bandwidth_bytes_per_s=link.send_bandwidth_bytes_per_s * 10,
        )

    monkeypatch.setattr(distributed, "fit_link", wrong)
    result = real(request, kept["results"])
    assert not result.check.passed, result.check
    assert honest.check.mutations[0].bandwidth_factor == 10


@gloo
@pytest.mark.slow
def test_check_works_with_distributed_from_the_command_line(tmp_path):
    """Exit 0 when the check passed, 1 when it failed (either may happen on a loaded machine),
    the summary last on stderr. A tolerance of 500% cannot see a 10x wrong link: the self-test
    fails it."""
    out = tmp_path / "d.json"
    code, _, err = run_cli("measure", "--distributed", "--quick", "--check", "--json", str(out))
    data = json.loads(out.read_text())
    assert code == (0 if data["check"]["passed"] else 1), err
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("kvplan measure --distributed: " + ("PASS" if code == 0 else "FAIL"))
    assert "15 rounds" in summary and len(data["raw"]["kv_send"]["round_s"]) == 15
    blind = analyse(
        DistributedRequest(context_len=2048, rounds=15, runs=6, tolerance=5), data["raw"]
    )
    assert not blind.check.passed
    assert {n.id for n in blind.check.failures} == {"check-mutation-missed"}


@gloo
@pytest.mark.slow
def test_a_failing_rank_stops_every_rank_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(KvplanError, match="injected failure on rank 1"):
        run_distributed(DistributedRequest(nproc=2, fail_rank=1, **SMALL))
    assert time.monotonic() - start < 60
