"""The documentation is part of the product: its examples run, and its commands' output matches.

- docs/formulas.md is a doctest.
- Every ```console block in docs/ and README.md is run: each `$ kvplan ...` line is executed and
  the lines shown under it must appear, in order, in the real output (`…` matches anything).
  `python scripts/regen_docs.py` rewrites the shown lines when a formula changes on purpose.
"""

from __future__ import annotations

import doctest
import re
import shlex

import pytest

from helpers import REPO, run_cli

DOC_FILES = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]


def console_examples():
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
            command, expected = None, []
            for line in block.splitlines():
                if line.startswith("$ "):
                    if command:
                        yield path.relative_to(REPO), command, expected
                    command, expected = line[2:], []
                elif command is not None and line.strip():
                    expected.append(line.rstrip())
            if command:
                yield path.relative_to(REPO), command, expected


EXAMPLES = list(console_examples())


def line_matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.strip().split("…"))
    return re.fullmatch(pattern, actual.strip()) is not None


def test_formulas_doctest():
    result = doctest.testfile(
        str(REPO / "docs" / "formulas.md"), module_relative=False, optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 20 and result.failed == 0


def test_there_are_console_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize(
    "path,command,expected", EXAMPLES, ids=[f"{p}:{c[:60]}" for p, c, _ in EXAMPLES]
)
def test_console_example(path, command, expected, tmp_path, monkeypatch):
    argv = shlex.split(command)
    assert argv[0] == "kvplan", f"{path}: console examples run kvplan only"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv[1:])
    assert code == 0, f"{path}: `{command}` failed: {err}"
    lines = out.splitlines()
    position = 0
    for want in expected:
        while position < len(lines) and not line_matches(want, lines[position]):
            position += 1
        assert position < len(lines), f"{path}: `{command}` did not print {want!r}"
        position += 1
