"""Every command's JSON for every bundled model stays as pinned in tests/golden/ (each note as its
id and values, rendered from that real instance while the case runs: tests/golden_cases.py),
unless a change regenerates it on purpose (scripts/golden.py) with a CHANGELOG.md line saying
why."""

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


def test_a_notes_words_move_no_golden_and_a_broken_text_fails_the_case(monkeypatch):
    """The goldens hold a note's id and values: new words leave a case's pinned JSON as it was,
    while a text that fails on the case's real instance fails the case."""
    from kvplan.present.notes.registry import TEXTS

    argv = ["capacity", "llama-3.1-8b", "--gpu", "h100", "--ctx", "32k"]
    before = run(argv)
    assert {"id": "capacity-paged", "values": {"block_size": 16}} in before["notes"]
    monkeypatch.setitem(TEXTS, "capacity-paged", lambda block_size: f"Pages of {block_size}.")
    assert run(argv) == before

    def broken(block_size):
        raise KeyError("a text that names a value the note does not have")

    monkeypatch.setitem(TEXTS, "capacity-paged", broken)
    failed = run(argv)  # the CLI turns the error into its exit: not the pinned JSON
    assert failed != before and failed["exit"] and "Traceback" not in failed["error"]
