"""kvplan explain."""

from __future__ import annotations

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = "Example: kvplan explain I_inf   (kvplan explain: every term)"


def add(app: typer.Typer) -> None:
    @app.command("explain", epilog=EXAMPLE)
    @c.command
    def explain_cmd(
        term: str = typer.Argument(None, help="A term kvplan prints: I_inf, s*, B_read, TPOT..."),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """What a term kvplan prints means, how it is computed and where it appears."""
        from kvplan.present.glossary import explain_view, lookup, suggestions, terms_view

        if term is None:
            c.emit(c.render(terms_view(), fmt))
            return
        found = lookup(term)
        if found is None:
            raise KvplanError(
                f"no term {term[:40]!r}; did you mean: {', '.join(suggestions(term))} "
                "(kvplan explain lists them all)"
            )
        c.emit(c.render(explain_view(found), fmt))
