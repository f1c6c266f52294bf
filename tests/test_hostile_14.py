"""Hostile inputs, fourteenth round.
1. A given link of a vanishing bandwidth (--interconnect-gbps 1e-300, or the Python twins'
network_gbps) passed `0 < gbps`: simulate priced every collective at ~1e300 s and ended in
'internal error: ValueError: Out of range float values are not JSON compliant' (--format json)
or printed a table of 300-digit latencies; the CLI's --network-gbps floor (0.001) was the CLI's
alone.
2. The caps on a command's work counted requests, output tokens and shared-prefix tokens, not the
prefill chunks: --max-num-batched-tokens 1 (or --chunked-prefill-size 1 under SGLang) makes each
prompt token a step (~22 us of a core each): 4 prompts of 300k tokens ran 71 s, and 100,000
prompts of 1,024 tokens (1e8 steps) would run for hours, where the caps promise minutes.
3. An output whose folder takes no new file (/proc/self/, a read-only mount) passed the checks
made before the work (check_target looked at the folder's existence only): `kvplan measure
--save-profile /proc/self/mem` measured for 318 s, then said 'cannot write'.
4. measure --nproc without --distributed was taken and ignored (--timeout alone is refused)."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError

from helpers import run_cli


# ---- 1. a given link's bandwidth: one range, the CLI's and the twins' --------------------------
@pytest.mark.parametrize("gbps", ["1e-300", "1e-9", "0.0005", "-1", "nan", "1e7"])
def test_simulate_refuses_an_interconnect_outside_the_link_range(gbps):
    code, out, err = run_cli(
        "simulate", "qwen3-8b", "--num-prompts", "4", "--tp", "2", "--interconnect-gbps", gbps,
        "--format", "json",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("error: --interconnect-gbps "), err
    assert "must be between 0.001 and" in err or "not a finite number" in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_link_range_holds_its_ends():
    code, _out, err = run_cli(
        "simulate", "qwen3-8b", "--num-prompts", "4", "--tp", "2", "--interconnect-gbps",
        "0.001", "--format", "json",
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.parametrize("gbps", [1e-300, 0.0, float("nan"), float("inf"), 2e6])
def test_the_python_twins_refuse_a_link_outside_the_range(gbps):
    from kvplan.inputs.hardware import choose_link, load_profile, with_interconnect

    gpu = load_profile("h100")
    with pytest.raises(KvplanError, match="0.001|finite"):
        choose_link(gpu, "network", gbps)
    with pytest.raises(KvplanError, match="0.001|finite"):
        with_interconnect(gpu, gbps)


# ---- 2. the prefill chunks a run must step through ---------------------------------------------
def test_simulate_refuses_a_run_of_more_prefill_steps_than_the_cap_fast():
    import time

    start = time.monotonic()
    for engine in ("vllm", "sglang"):
        code, out, err = run_cli(
            "simulate", "qwen3-8b", "--engine", engine, "--num-prompts", "100000",
            "--max-num-batched-tokens", "1", "--max-num-seqs", "1", "--format", "json",
        )  # fmt: skip
        assert code == 2 and out == "", err
        assert "prefill steps" in err and "8,000,000" in err, err
        assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 60  # refused at once: it ran for hours


def test_the_prefill_step_count_is_a_lower_bound_over_the_runs():
    from kvplan.simulate.workload import RequestSpec, check_prefill_steps

    own = [RequestSpec(rid, 0.0, 1024, 1) for rid in range(1000)]  # 1,024,000 own tokens
    check_prefill_steps(own, [1])  # 1,024,000 steps: under the cap
    check_prefill_steps(own, [1] * 7)  # 7,168,000
    with pytest.raises(KvplanError, match="8,192,000 prefill steps"):
        check_prefill_steps(own, [1] * 8)
    # tokens a shared stream holds are a prefix-cache hit at best: not counted
    shared = [
        RequestSpec(rid, 0.0, 1024, 1, stream_id=0, stream_tokens=1000) for rid in range(8000)
    ]
    check_prefill_steps(shared, [1])  # 8,000 x 24 own tokens
    check_prefill_steps(own * 100, [8192])  # 100,000 prompts in 12,500 chunks


def test_plan_refuses_configurations_of_more_prefill_steps_than_the_cap():
    code, out, err = run_cli(
        "plan", "qwen3-8b", "--rate", "1", "--slo", "ttft_p99=5s", "--num-prompts", "2000",
        "--max-gpus", "1", "--jobs", "1", "--tp", "1", "--max-num-seqs", "1",
        "--max-num-batched-tokens", "1,2,4", "--format", "json",
    )  # fmt: skip
    assert code == 2 and out == "", err
    assert "prefill steps" in err and "configurations" in err, err


# ---- 3. an output folder that takes no file, named before the work -----------------------------
needs_proc = pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="Linux /proc")


@needs_proc
@pytest.mark.parametrize("name", ["/proc/self/mem", "/proc/self/kvplan-new.json"])
def test_check_outputs_refuses_a_folder_that_takes_no_new_file(name):
    from kvplan.atomic import check_outputs

    with pytest.raises(KvplanError, match="cannot write"):
        check_outputs({"--save-profile": name})


@needs_proc
def test_measure_refuses_an_unwritable_profile_before_measuring():
    import time

    start = time.monotonic()
    code, out, err = run_cli(
        "measure", "--model", "qwen3-8b", "--device", "cpu", "--quick", "--save-profile",
        "/proc/self/mem",
    )  # fmt: skip
    assert code == 2 and "--save-profile /proc/self/mem" in err and "cannot write" in err, err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 60  # refused at once: it ran for hours


def test_check_outputs_leaves_no_file_behind(tmp_path):
    from kvplan.atomic import check_outputs

    check_outputs({"--out": tmp_path / "report.json", "--plot": str(tmp_path / "p.png")})
    assert list(tmp_path.iterdir()) == []


# ---- 4. measure --nproc needs --distributed ----------------------------------------------------
def test_measure_nproc_without_distributed_is_refused():
    code, out, err = run_cli("measure", "--model", "qwen3-8b", "--device", "cpu", "--nproc", "3")
    assert code == 2 and out == "" and "--nproc" in err and "--distributed" in err, err
