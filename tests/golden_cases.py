"""The golden cases: every planning command, for every bundled model, on two GPU profiles.

tests/golden/<model>.json pins each case's JSON output (or its one-line error), each note as its
id and values, `{"id", "values"}`, not its words: a change to a note's wording moves no golden
file, and every note is still rendered while the cases run (a text that fails on a real instance
fails the golden test). A refactoring step must leave them byte-identical; a step that changes a
number on purpose regenerates them with `python scripts/golden.py` and says why in CHANGELOG.md.
"""

from __future__ import annotations

import hashlib
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kvplan.cli import main
from kvplan.notes import Note
from kvplan.present import view

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
    if model.startswith("deepseek-v4"):
        # the engines' DeepSeek-V4 layouts need the memory the engine logged; vLLM 0.32's packed
        # layout of the compressed caches, from the memory vLLM logged
        out["vllm-0.32-h200"] = [
            *("engine", model, "--engine", "vllm", "--gpu", "h200", "--vllm-version", "0.32"),
            *("--kv-cache-memory", "60GiB", "--ctx", "128k"),
        ]
        # SGLang 0.5.14's DeepSeek-V4 pools, from the pool memory it logged
        out["sglang-dsv4-h200"] = [
            *("engine", model, "--engine", "sglang", "--gpu", "h200", "--tp", "8"),
            *("--kv-cache-memory", "60GiB", "--ctx", "128k"),
        ]
    return out


PINNED = "\x00note "  # what a note's words are, while a case runs: its id and values (_pinned)


def _pinned(item: Note) -> str:
    """A note as its id and values, after its words are rendered (a text that fails on this real
    instance fails here)."""
    words(item)
    values = {key: view.jsonable(value) for key, value in item.values}
    return PINNED + json.dumps([item.id, values], sort_keys=True)


words = view.note_text  # the real renderer


def _notes_as_values(data: object) -> object:
    """{"id", "text"} notes, their text `_pinned`, as {"id", "values"}."""
    if isinstance(data, dict):
        text = data.get("text")
        if set(data) == {"id", "text"} and isinstance(text, str) and text.startswith(PINNED):
            note_id, values = json.loads(text[len(PINNED) :])
            return {"id": note_id, "values": values}
        return {key: _notes_as_values(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_notes_as_values(item) for item in data]
    return data


def run(argv: list[str]) -> object:
    """The JSON a command prints (its notes as id and values), or {"exit": code, "error": stderr}
    when it fails."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    view.note_text = _pinned
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main([*argv, "--format", "json"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        view.note_text = words
    if code and not out.getvalue():
        return {"exit": code, "error": err.getvalue().strip()}
    data = _notes_as_values(json.loads(out.getvalue()))
    if code:  # an answer that is no (capacity's fits: NO exits 1), printed whole
        data["exit"] = code
    return data


def explore_digest(model: str) -> dict[str, str]:
    """The explorer's embedded data is large: pin a digest per top-level key."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.explore import explore_data
    from kvplan.present.explore_page import explore_json

    view.note_text = _pinned
    try:
        data = explore_json(explore_data(load_model(model), [load_profile(g) for g in GPUS]))
    except Exception as exc:  # noqa: BLE001 - pinned as text
        return {"error": f"{exc.__class__.__name__}: {exc}"}
    finally:
        view.note_text = words
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
