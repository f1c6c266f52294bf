"""scripts/prefill_terms.py: a lone prefill's terms in the published runs at concurrency 1."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout

from kvplan.simulate.frontend import Frontend

from helpers import load_script


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
