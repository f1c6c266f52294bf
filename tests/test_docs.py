"""The documentation is part of the product: its examples run, and its commands' output matches.

- docs/formulas.md is a doctest.
- Every ```console block in docs/ and README.md is run: each `$ kvplan ...` line is executed and
  the lines shown under it must appear, in order, in the real output (`…` matches anything);
  it exits 0, or 1 where capacity answers fits: NO.
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


def squeeze(text: str) -> str:
    return " ".join(text.split())


def line_matches(expected: str, actual: str) -> bool:
    """Whitespace runs are layout, not content; `…` matches anything."""
    pattern = ".*".join(re.escape(squeeze(part)) for part in expected.split("…"))
    return re.fullmatch(pattern, squeeze(actual)) is not None


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
def test_console_example(path, command, expected, monkeypatch):
    argv = shlex.split(command)
    assert argv[0] == "kvplan", f"{path}: console examples run kvplan only"
    monkeypatch.chdir(REPO)  # example paths are relative to the repository
    code, out, err = run_cli(*argv[1:])
    # capacity's answer "fits: NO" exits 1 (the whole answer printed); anything else exits 0
    no_fit = argv[1] == "capacity" and re.search(r"^\s*fits\s+NO\b", out, flags=re.M)
    assert code == (1 if no_fit else 0), f"{path}: `{command}` failed: {err}"
    lines = out.splitlines()
    position = 0
    for want in expected:
        while position < len(lines) and not line_matches(want, lines[position]):
            position += 1
        assert position < len(lines), f"{path}: `{command}` did not print {want!r}"
        position += 1


def test_every_command_and_option_has_help_and_cli_md_is_current():
    from kvplan.cli_docs import cli_reference_markdown, command_tree

    group = command_tree()
    assert len(group.commands) >= 9
    for name, cmd in group.commands.items():
        assert (cmd.help or "").strip(), f"kvplan {name} has no help text"
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "help":
                assert (param.help or "").strip(), f"kvplan {name} {param.opts} has no help"
            if param.param_type_name == "argument":
                assert (getattr(param, "help", "") or "").strip(), f"kvplan {name} {param.name}"
    cli_md = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert cli_md == cli_reference_markdown(), "docs/cli.md is stale: python scripts/regen_docs.py"


FORMULA_MODULES = [
    "kvplan.formulas.kv",
    "kvplan.formulas.flops",
    "kvplan.formulas.memory",
    "kvplan.formulas.weights",
    "kvplan.formulas.roofline",
    "kvplan.formulas.step_time",
    "kvplan.formulas.comm",
    "kvplan.dtypes",
    "kvplan.formulas.offload",
    "kvplan.formulas.techniques",
]
FORMULA_FUNCTIONS = {
    "kvplan.plans.pool": ["max_sequences", "max_context_at_batch", "budget"],
}


def test_every_public_formula_function_is_in_formulas_md():
    import importlib
    import inspect

    text = (REPO / "docs" / "formulas.md").read_text(encoding="utf-8")
    names = []
    for module_name in FORMULA_MODULES + list(FORMULA_FUNCTIONS):
        module = importlib.import_module(module_name)
        chosen = FORMULA_FUNCTIONS.get(module_name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module_name and not name.startswith("_"):
                if chosen is None or name in chosen:
                    names.append(name)
    missing = [n for n in names if f"`{n}`" not in text and f"{n}(" not in text]
    assert not missing, f"formulas.md does not mention {missing}"
