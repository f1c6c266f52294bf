"""Every command's JSON for every bundled model stays as pinned in tests/golden/, unless a change
regenerates it on purpose (scripts/golden.py) with a CHANGELOG.md line saying why."""

from __future__ import annotations

import json

import pytest

from kvplan.inputs.sources import bundled_models

from golden_cases import GOLDEN, compute, dumps, run


@pytest.mark.parametrize("alias", sorted(bundled_models()))
def test_golden(alias):
    path = GOLDEN / f"{alias}.json"
    assert path.exists(), f"no golden file for {alias}: run python scripts/golden.py"
    expected = json.loads(path.read_text(encoding="utf-8"))
    actual = json.loads(dumps(compute(alias)))
    for case in sorted(set(expected) | set(actual)):
        assert actual.get(case) == expected.get(case), f"{alias} {case} changed"


def test_golden_catalog():
    expected = json.loads((GOLDEN / "catalog.json").read_text(encoding="utf-8"))
    assert run(["models"]) == expected["models"]
    assert run(["gpus"]) == expected["gpus"]
