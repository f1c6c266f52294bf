"""A given --mamba-scheduler-strategy extra_buffer SGLang asserts against the architecture, by
release (issue 28): 0.5.7-0.5.11 assert it off for NemotronH (0.5.9 server_args.py
_handle_model_specific_adjustments, support_mamba_cache_extra_buffer=False), 0.5.7-0.5.12 for
FalconH1, 0.5.9-0.5.12 for GraniteMoeHybrid, 0.5.9-0.5.13 for Lfm2; from 0.5.14
_validate_mamba_extra_buffer asserts _support_mamba_cache_extra_buffer's list (0.5.14
server_args.py:4338-4367). kvplan refuses in one line what the release refuses."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli


def _engine(model: str, version: str, *more: str):
    # the flag's spelling from 0.5.14 (the old one is refused from 0.5.20)
    new = version in ("0.5.14", "0.5.23")
    flag = "--mamba-radix-cache-strategy" if new else "--mamba-scheduler-strategy"
    return run_cli(
        *("engine", model, "--engine", "sglang", "--gpu", "h200", "--sglang-version", version),
        *(flag, "extra_buffer", *more),
    )


@pytest.mark.parametrize(
    ("model", "version", "refused"),
    [
        ("nemotron-h-56b", "0.5.9", True),
        ("nemotron-h-56b", "0.5.11", True),
        ("nemotron-h-56b", "0.5.12", False),
        ("nemotron-h-56b", "0.5.14", False),
        # lfm2 on 0.5.8: no SGLang model (Lfm2ForCausalLM arrives in 0.5.9), refused before this
        ("lfm2-1.2b", "0.5.9", True),
        ("lfm2-1.2b", "0.5.13", True),
        ("lfm2-1.2b", "0.5.14", True),
        ("lfm2-1.2b", "0.5.23", True),
        ("qwen3-next-80b-a3b", "0.5.9", False),
        ("qwen3-next-80b-a3b", "0.5.23", False),
    ],
)
def test_extra_buffer_refused_where_the_release_asserts_the_architecture(model, version, refused):
    code, out, err = _engine(model, version, "--tp", "2")
    if refused:
        one_line_error(code, err, f"SGLang {version}")
        assert "no_buffer" in err
    else:
        assert code == 0, err
