"""The page-size checks of SGLang's --mamba-scheduler-strategy extra_buffer, by release
(server_args._handle_mamba_radix_cache; arg_groups/mamba_hook.py from 0.5.19): a given
--page-size must divide mamba_track_interval (256 by default) in every release, and the FLA
chunk (64) and the page must divide one another: the page divides 64 in 0.5.7 (FLA_CHUNK_SIZE
% page_size), either way from 0.5.8 (with the first rule: a page dividing 256)."""

from __future__ import annotations

import pytest

from kvplan.engines.sglang import check_mamba_extra_buffer_page, mamba_track_slots
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import one_line_error, run_cli, run_json

H200 = load_profile("h200")


@pytest.mark.parametrize(
    "version, page, refused",
    [
        ("0.5.7", 64, False),
        ("0.5.7", 128, True),  # FLA_CHUNK_SIZE % page_size: 64 % 128
        ("0.5.7", 48, True),
        ("0.5.8", 128, False),  # either way from 0.5.8: 128 % 64
        ("0.5.8", 256, False),
        ("0.5.8", 512, True),  # 256 % 512
        ("0.5.10", 48, True),  # 256 % 48
        ("0.5.14", 96, True),
        ("0.5.23", 16, False),
        ("0.5", 1, False),
        ("0.5.10", None, False),  # no page given: the checks do not run
    ],
)
def test_the_page_checks_by_release(version, page, refused):
    if refused:
        with pytest.raises(KvplanError, match="extra_buffer"):
            check_mamba_extra_buffer_page(page, version)
    else:
        check_mamba_extra_buffer_page(page, version)


def test_track_slots_run_the_checks_only_under_extra_buffer():
    spec = load_model("qwen3.5-35b-a3b")
    with pytest.raises(KvplanError, match="256"):
        mamba_track_slots(spec, H200, "extra_buffer", "0.5.10", True, False, True, page_size=48)
    assert (
        mamba_track_slots(spec, H200, "no_buffer", "0.5.10", True, False, True, page_size=48) == 0
    )
    assert (
        mamba_track_slots(spec, H200, "extra_buffer", "0.5.10", True, False, True, page_size=64)
        == 2
    )


SIM = (
    *("simulate", "qwen3.5-35b-a3b", "--gpu", "h200", "--engine", "sglang", "--tp", "2"),
    *("--num-prompts", "4", "--input-len", "1000", "--output-len", "50"),
    *("--mamba-scheduler-strategy", "extra_buffer"),
)


def test_simulate_refuses_in_one_line_what_the_release_asserts():
    code, out, err = run_cli(*SIM, "--engine-version", "0.5.7", "--page-size", "128")
    one_line_error(code, err, "64")
    assert out == ""
    code, out, err = run_cli(*SIM, "--engine-version", "0.5.10", "--page-size", "48")
    one_line_error(code, err, "256")
    assert run_json(*SIM, "--engine-version", "0.5.10", "--page-size", "64")["runs"]
