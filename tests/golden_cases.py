"""The golden cases: every planning command, for every bundled model, on two GPU profiles.

tests/golden/<model>.json pins each case's JSON output (or its one-line error). A refactoring step
must leave them byte-identical; a step that changes a number on purpose regenerates them with
`python scripts/golden.py` and says why in CHANGELOG.md.
"""

from __future__ import annotations

import hashlib
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kvplan.cli import main

GOLDEN = Path(__file__).resolve().parent / "golden"
GPUS = ("h100", "h200")


def cases(model: str) -> dict[str, list[str]]:
    """Case name -> argv (the output format is added by the runner)."""
    out = {
        "size": [
            "size",
            model,
            "--ctx",
            "8k,128k",
            "--batch",
            "1,16",
            "--kv-dtype",
            "auto,fp8",
            "--breakdown",
        ],
        "whatif": [
            "whatif",
            model,
            "--ctx",
            "128k",
            "--batch",
            "1,8",
            "--apply",
            "fp8",
            "--apply",
            "window=32k",
            "--apply",
            "fp8+cla2",
            "--apply",
            "int2",
            "--apply",
            "sparse-read=0.125",
        ],
    }
    for gpu in GPUS:
        out[f"roofline-{gpu}"] = [
            "roofline",
            model,
            "--gpu",
            gpu,
            "--ctx",
            "8k,32k",
            "--batch",
            "1,8,64",
        ]
        out[f"capacity-{gpu}"] = [
            "capacity",
            model,
            "--gpu",
            gpu,
            "--ctx",
            "32k",
            "--mean-len",
            "8k",
            "--prefix-tokens",
            "2k",
        ]
        # --allow-long-max-model-len: the same lengths for every model, past the positions of
        # some (llama-2's 4,096), as the engines' override variables allow (a note says so)
        for engine in ("vllm", "sglang"):
            out[f"{engine}-{gpu}"] = [
                *("engine", model, "--engine", engine, "--gpu", gpu, "--ctx", "8k"),
                "--allow-long-max-model-len",
            ]
    out["capacity-tp8"] = ["capacity", model, "--gpu", "h200", "--tp", "8", "--ctx", "128k"]
    out["vllm-tp8"] = [
        "engine",
        model,
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--ctx",
        "32k",
        "--allow-long-max-model-len",
    ]
    out["sglang-tp8"] = [
        "engine",
        model,
        "--engine",
        "sglang",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--ctx",
        "32k",
        "--allow-long-max-model-len",
    ]
    out["roofline-tp8"] = [
        "roofline",
        model,
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--pp",
        "2",
        "--ctx",
        "32k",
        "--batch",
        "1,32",
    ]
    out["report"] = ["report", model, "--gpu", "h100", "--gpu", "h200", "--ctx", "8k,32k"]
    return out


def run(argv: list[str]) -> object:
    """The JSON a command prints, or {"exit": code, "error": stderr} when it fails."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main([*argv, "--format", "json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
    if code and not out.getvalue():
        return {"exit": code, "error": err.getvalue().strip()}
    data = json.loads(out.getvalue())
    if code:  # an answer that is no (capacity's fits: NO exits 1), printed whole
        data["exit"] = code
    return data


def explore_digest(model: str) -> dict[str, str]:
    """The explorer's embedded data is large: pin a digest per top-level key."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.explore import explore_data
    from kvplan.present.explore_page import explore_json

    try:
        data = explore_json(explore_data(load_model(model), [load_profile(g) for g in GPUS]))
    except Exception as exc:  # noqa: BLE001 - pinned as text
        return {"error": f"{exc.__class__.__name__}: {exc}"}
    return {
        key: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
        for key, value in data.items()
    }


def compute(model: str) -> dict:
    result = {name: run(argv) for name, argv in cases(model).items()}
    result["explore"] = explore_digest(model)
    return result


def dumps(data: object) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"
