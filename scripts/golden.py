"""Regenerate tests/golden/ (the pinned JSON of every command for every bundled model).

Run it only when a change alters a number on purpose, then read the diff and add a line to
CHANGELOG.md saying why: python scripts/golden.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kvplan.inputs.sources import bundled_models  # noqa: E402

from golden_cases import GOLDEN, compute, dumps  # noqa: E402


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for alias in bundled_models():
        (GOLDEN / f"{alias}.json").write_text(dumps(compute(alias)), encoding="utf-8")
        print("wrote", alias)
    (GOLDEN / "catalog.json").write_text(
        dumps({"models": compute_catalog("models"), "gpus": compute_catalog("gpus")}),
        encoding="utf-8",
    )


def compute_catalog(name: str):
    from golden_cases import run

    return run([name])


if __name__ == "__main__":
    main()
