"""Every data file kvplan reads at run time ships in the wheel: pyproject.toml's package-data
patterns for the kvplan package cover every file under kvplan/data (a table left out prices an
installed kvplan differently from the checkout, silently: the GEMM and recurrent tables were)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _kvplan_patterns() -> list[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    entry = re.search(r'^"kvplan"\s*=\s*\[(.*?)\]', section, re.S | re.M)
    assert entry, "no package-data entry for kvplan"
    return re.findall(r'"([^"]+)"', entry[1])


def test_every_data_file_is_in_the_wheel_patterns():
    package = ROOT / "kvplan"
    covered = {p for pattern in _kvplan_patterns() for p in package.glob(pattern)}
    files = {p for p in (package / "data").rglob("*") if p.is_file()}
    missing = sorted(str(p.relative_to(package)) for p in files - covered)
    assert files and not missing, missing


def test_the_check_sees_a_folder_left_out():
    patterns = [p for p in _kvplan_patterns() if "gemm" not in p]
    package = ROOT / "kvplan"
    covered = {p for pattern in patterns for p in package.glob(pattern)}
    assert any(
        p.parent.name == "gemm" for p in (package / "data").rglob("*.json") if p not in covered
    )
