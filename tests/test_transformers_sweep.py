"""Every model type transformers knows with a causal-LM or image-text-to-text head, built from its
config class's defaults: kvplan answers exactly, within 0.01 %, with a "sized from structure" note,
or refuses; never silently wrong (scripts/transformers_sweep.py; slow, and skipped without
transformers)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO


@pytest.mark.slow
def test_no_model_type_transformers_knows_is_silently_wrong(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "sweep.json"
    # run from outside the repository: its kernels/ folder shadows a package transformers imports
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "transformers_sweep.py"), "--json", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    rows = json.loads(out.read_text())
    wrong = [f"{r['type']}: {r.get('why')}" for r in rows if r["verdict"] == "WRONG"]
    assert not wrong, "\n".join(wrong)
    assert done.returncode == 0, done.stdout[-2000:]
    assert sum(r["verdict"] in ("exact", "close") for r in rows) >= 100
