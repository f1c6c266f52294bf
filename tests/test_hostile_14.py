"""Hostile inputs, fourteenth round.
1. A given link of a vanishing bandwidth (--interconnect-gbps 1e-300, or the Python twins'
network_gbps) passed `0 < gbps`: simulate priced every collective at ~1e300 s and ended in
'internal error: ValueError: Out of range float values are not JSON compliant' (--format json)
or printed a table of 300-digit latencies; the CLI's --network-gbps floor (0.001) was the CLI's
alone."""

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
