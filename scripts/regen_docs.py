"""Regenerate the documentation that is derived from the tool:

- docs/cli.md from the command tree;
- the lines shown under every `$ kvplan ...` in ```console blocks of docs/ and README.md, each
  replaced by the real output line with the same label (text before its first digit).

Run it when a formula changes on purpose, then read the diff: python scripts/regen_docs.py
"""

from __future__ import annotations

import difflib
import io
import re
import shlex
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kvplan.cli import main
from kvplan.cli_docs import cli_reference_markdown

REPO = Path(__file__).resolve().parents[1]


def run(argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    return out.getvalue()


def squeeze(text: str) -> str:
    return " ".join(text.split())


def refresh(text: str) -> str:
    """Replace each shown line by the most similar real output line after the previous one
    (order preserved); lines with `…` are kept as written."""

    def fix_block(match: re.Match) -> str:
        lines, result, actual, position = match.group(1).splitlines(), [], [], 0
        for line in lines:
            if line.startswith("$ "):
                actual, position = run(shlex.split(line[2:])[1:]).splitlines(), 0
                result.append(line)
                continue
            if "…" in line or not line.strip():
                result.append(line)
                continue
            scored = [
                (difflib.SequenceMatcher(None, squeeze(line), squeeze(a)).ratio(), i)
                for i, a in enumerate(actual)
                if i >= position
            ]
            best = max(scored, default=(0.0, -1))
            if best[0] >= 0.6:
                result.append(actual[best[1]].rstrip())
                position = best[1] + 1
            else:
                result.append(line)
        return "```console\n" + "\n".join(result) + "\n```"

    return re.sub(r"```console\n(.*?)\n```", fix_block, text, flags=re.S)


def main_() -> None:
    (REPO / "docs" / "cli.md").write_text(cli_reference_markdown(), encoding="utf-8")
    for path in sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]:
        old = path.read_text(encoding="utf-8")
        new = refresh(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print("updated", path.relative_to(REPO))


if __name__ == "__main__":
    main_()
