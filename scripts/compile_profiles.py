"""Write hardware_profiles/bundled.json: every bundled YAML (the GPU profiles and prices.yaml)
read through the strict loader, precompiled so a `--gpu` command reads one JSON file instead of
parsing 41 YAML files in pure Python (kvplan.inputs.profile_cache). Run it after editing a
profile; tests/test_hardware.py fails while the file is out of date.

    python scripts/compile_profiles.py
"""

from __future__ import annotations

from pathlib import Path

from kvplan.inputs.hardware import compile_bundled
from kvplan.inputs.profile_cache import COMPILED, render

FOLDER = Path(__file__).resolve().parent.parent / "hardware_profiles"


def main() -> None:
    (FOLDER / COMPILED).write_text(render(compile_bundled(FOLDER)), encoding="utf-8")
    print(f"wrote {FOLDER / COMPILED}")


if __name__ == "__main__":
    main()
