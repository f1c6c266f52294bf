"""scripts/prefill_terms.py: a lone prefill's terms in the published runs at concurrency 1."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from kvplan.simulate.frontend import Frontend

from helpers import load_script

DATA = Path(__file__).resolve().parents[1] / "kvplan" / "data" / "kernel_tables"


def test_qwen3_lone_prefill_terms_add_up(monkeypatch):
    """Qwen3-235B on 8 B200 (SGLang cookbook, 8,000-token random prompts, one at a time): the
    median TTFT is the mean of the 5th and 6th of the ten prompts SGLang's bench draws
    (numpy RandomState(1).randint(1, 8001, 10) sorted: 3981 and 5057, by hand); the step's
    terms add up to the step, and the simulated TTFT is that step plus the frontend's
    per-request cost, nothing else."""
    script = load_script("prefill_terms")
    monkeypatch.setattr(sys, "argv", ["prefill_terms.py", "--only", "qwen3-b200-tp8-random-8000"])
    out = io.StringIO()
    with redirect_stdout(out):
        script.main()
    rows = [line for line in out.getvalue().splitlines() if "|" in line][1:]
    assert len(rows) == 1
    head, terms, tail = rows[0].split("|")
    assert head.split()[-1] == "3981/5057"
    step, *parts = (float(x) for x in terms.split())
    assert abs(sum(parts) - step) < 0.5  # each printed to 0.1 ms; the sampler ~0
    assert abs(float(tail.split()[0]) - Frontend().request_s * 1e3) < 0.1


def test_qwen3_prefill_at_given_lengths_prices_the_moe_on_sglangs_triton_rows(monkeypatch):
    """--tokens prices the same lone prefill at given prompt lengths. Qwen3-235B (bf16, no
    --quantization) on 8 B200 under SGLang 0.5.6: SGLang's auto runner is Triton's fused MoE
    there (engines.moe_backend: the SM100 flashinfer_trtllm rule for unquantized Qwen3 MoE is
    taken from 0.5.8), priced on the nearest release's tables, 0.5.9's (the B200 has no 0.5.6
    tables), so the MoE term per MoE layer is the moe/ file's Triton row of the model's TP 8
    shape, linear between its timed token counts; the terms add up to the step; the step grows
    by the terms' growth per prompt token."""
    script = load_script("prefill_terms")
    monkeypatch.setattr(
        sys,
        "argv",
        ["prefill_terms.py", "--only", "qwen3-b200-tp8-random-8000", "--tokens", "500,2000,4000"],
    )
    out = io.StringIO()
    with redirect_stdout(out):
        script.main()
    rows = [line for line in out.getvalue().splitlines() if "|" in line][1:]
    assert [int(row.split("|")[0].split()[-1]) for row in rows] == [500, 2000, 4000]
    table = json.loads((DATA / "moe" / "b200_sxm.sglang.0.5.9.json").read_text())
    key = "moe_bf16_4096x1536_128x8_tp8_ep1"
    assert table["runners"][key]["runs"] == ["sglang_fused_moe_triton"]
    steps = []
    for row in rows:
        head, terms, tail = row.split("|")
        tokens = int(head.split()[-1])
        step, *parts = (float(x) for x in terms.split())
        assert abs(sum(parts) - step) < 0.5
        per_layer_us = float(tail.split()[0])
        assert abs(per_layer_us - float(np.interp(tokens, table["tokens"], table["us"][key]))) < 0.2
        steps.append((tokens, step, float(tail.split()[1])))
    (t0, s0, _), (t1, s1, slope1), (t2, s2, slope2) = steps
    assert abs(slope1 - (s1 - s0) * 1e3 / (t1 - t0)) < 0.2
    assert abs(slope2 - (s2 - s1) * 1e3 / (t2 - t1)) < 0.2


@pytest.mark.parametrize(
    ("tokens", "words"),
    [
        ("0", "at least 1 token"),
        ("-5", "at least 1 token"),
        ("500,abc", "'abc' is not a whole number"),
        ("1.5", "'1.5' is not a whole number"),
        # str.isdigit takes '²' (int() then raised ValueError, a traceback) and '١٠' (int()
        # read it as 10): a length is ASCII digits, as every kvplan count is
        ("²", "is not a whole number"),
        ("١٠", "is not a whole number"),
        ("500,٣", "is not a whole number"),
        (",".join(str(n) for n in range(1, 10_001)), "at most 100 lengths"),
    ],
)
def test_tokens_out_of_range_is_one_line_and_exit_2_before_any_replay(
    monkeypatch, capsys, tokens, words
):
    """--tokens takes 1 to 100 whole prompt lengths of at least one token: anything else is one
    line on stderr and exit status 2, before a run is replayed (a length of 0 or -5 tokens
    priced a step of 8 ms; a non-number raised a traceback)."""
    script = load_script("prefill_terms")
    monkeypatch.setattr(script, "replay", lambda *a, **k: pytest.fail("replayed"))
    monkeypatch.setattr(sys, "argv", ["prefill_terms.py", "--tokens", tokens])
    with pytest.raises(SystemExit) as exit_:
        script.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_tokens_past_the_models_context_is_refused(monkeypatch, capsys):
    """A prompt length past the run's context window (its max_model_len) is one line on stderr
    and exit status 2, not a step priced at 10^12 tokens."""
    script = load_script("prefill_terms")
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "prefill_terms.py",
            "--only",
            "qwen3-b200-tp8-random-8000",
            "--tokens",
            "500,10" + "0" * 12,
        ],
    )
    with pytest.raises(SystemExit) as exit_:
        with redirect_stdout(io.StringIO()):
            script.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "past the run's context" in err
