"""The step-log fixtures' file form, shared by the engine recorders (record_vllm_schedule.py,
record_sglang_schedule.py), which run in the engines' own Pythons and so cannot import kvplan."""

from __future__ import annotations

import json
from pathlib import Path


def dump(fixture: dict) -> str:
    """The fixture as JSON, one step a line (diffs stay readable)."""
    head = {k: v for k, v in fixture.items() if k != "steps"}
    lines = [json.dumps(step, separators=(",", ":")) for step in fixture["steps"]]
    return json.dumps(head)[:-1] + ', "steps": [\n' + ",\n".join(lines) + "\n]}\n"


def write_or_check(fixture: dict, target: Path, check: bool) -> bool:
    """Write the fixture to `target`, or with `check` compare its steps with the file there;
    prints one line either way. False when a check finds them different (or no file)."""
    steps, name = fixture["steps"], target.stem
    if check:
        old = json.loads(target.read_text()) if target.exists() else None
        same = old is not None and old["steps"] == steps
        print(f"{name}: {'same' if same else 'DIFFERENT'} ({len(steps)} steps)")
        return same
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dump(fixture))
    print(f"{name}: {len(steps)} steps -> {target}")
    return True
