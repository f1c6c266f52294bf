"""Tables for a person at a terminal: as wide as the terminal, verdicts in colour.

`detect` reads how standard output is used (a terminal or a pipe, its width, NO_COLOR,
FORCE_COLOR, TERM=dumb); `render_for` picks the renderer. A pipe gets the plain text of
kvplan.present.render (rich is never imported: the start-up budget); a terminal gets rich tables
fitted to its width: prose columns stacked under the table, low-priority columns left out (a line
says which, and that --format json or csv has them), long facts and notes wrapped with a hanging
indent.
"""

# No `from __future__ import annotations` here: NamedTuple fields given as strings are each
# compiled at import (typing.ForwardRef), which the CLI's start-up budget pays on every run.

import io
import re

from kvplan.present.escape import terminal_text
from kvplan.present.render import (
    GAP,
    INDENT,
    cell_width,
    column_bounds,
    fit_columns,
    render_table,
    row_label,
    shown_table,
    table_width,
)
from kvplan.present.tty import FALLBACK_WIDTH, MIN_WIDTH, PIPE_WIDTH, Terminal, detect
from kvplan.present.view import Column, Table, Verdict, View, facts_of

__all__ = ["FALLBACK_WIDTH", "MIN_WIDTH", "PIPE_WIDTH", "Terminal", "detect", "render_for"]

STYLES = {Verdict.good: "green", Verdict.bad: "bold red", Verdict.warn: "yellow"}


def render_for(report: View, terminal: Terminal) -> str:
    """The table format for this terminal: rich when it is one, else the plain text."""
    if terminal.rich:
        return render_rich(report, terminal)
    return render_table(report, terminal.width)


# ---- rich --------------------------------------------------------------------------------------
def column_widths(columns: list[Column], cells: list[list[str]], width: int) -> list[int]:
    """Each shown column's width: its widest cell and whole header. While the table is wider than
    `width`, the header that gains most is wrapped onto two lines (a whole step: a header half
    wrapped only leaves a gap); then columns are narrowed one by one down to the narrowest layout
    (numbers never fold; text and headers wrap between words)."""
    bounds = column_bounds(columns, cells, wrap_headers=True)
    widths = list(bounds.full)
    while table_width(widths) > width:
        gain = [w - n for w, n in zip(widths, bounds.natural, strict=True)]
        best = max(range(len(widths)), key=lambda i: gain[i])
        if gain[best] <= 0:
            break
        widths[best] = bounds.natural[best]
    excess = table_width(widths) - width
    while excess > 0:
        room = [w - least for w, least in zip(widths, bounds.least, strict=True)]
        best = max(range(len(widths)), key=lambda i: room[i])
        if room[best] <= 0:
            break
        widths[best] -= 1
        excess -= 1
    return widths


def _grid(width: int, first: int, gap: int = GAP):
    """Two columns, the second wrapping with a hanging indent under itself; `width` counts an
    indent of INDENT before the grid."""
    from rich.table import Table as RichTable

    grid = RichTable.grid(padding=(0, gap, 0, 0))
    grid.add_column(width=first, overflow="fold", no_wrap=False)
    grid.add_column(width=max(width - INDENT - first - gap, 10), overflow="fold")
    return grid


def _indented(renderable):
    from rich.padding import Padding

    return Padding(renderable, (0, 0, 0, INDENT))


def _styled(text: str, verdict: Verdict | None, colour: bool):
    """The words in the verdict's colour (the words only: not the cell's padding)."""
    from rich.text import Text

    styled = Text(text)
    if verdict is not None and colour:
        styled.stylize(STYLES[verdict])
    return styled


def _table(table: Table, width: int, colour: bool) -> list:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    shown_words = shown_table(table)  # every word through terminal_text
    columns, cells = shown_words.columns, shown_words.cells
    fit = fit_columns(columns, cells, width, drop=True, wrap_headers=True)
    shown = [columns[i] for i in fit.shown]
    grid_cells = [[r[i] for i in fit.shown] for r in cells]
    widths = column_widths(shown, grid_cells, width)
    out: list = []
    if shown_words.title:
        out.append(Text(shown_words.title, style="bold" if colour else ""))
    grid = RichTable(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP - 1, 0, 0),
        header_style="bold" if colour else "",
    )
    for column, w in zip(shown, widths, strict=True):
        grid.add_column(
            column.header,
            justify="right" if column.align == "right" else "left",
            width=w,
            overflow="fold",
        )
    for row, r in zip(table.rows, grid_cells, strict=True):
        grid.add_row(
            *(
                _styled(text, column.verdict(row) if column.verdict else None, colour)
                for column, text in zip(shown, r, strict=True)
            )
        )
    out.append(_indented(grid))
    for i in fit.stacked:
        column = columns[i]
        labels = [row_label(r, fit) + ":" for r in cells]
        stack = _grid(width - INDENT, min(max(map(cell_width, labels), default=1), width // 3))
        for row, label, r in zip(table.rows, labels, cells, strict=True):
            if r[i]:
                verdict = column.verdict(row) if column.verdict else None
                stack.add_row(label, _styled(r[i], verdict, colour))
        out += [
            Text(""),
            _indented(Text(column.header, style="bold" if colour else "")),
            _indented(_indented(stack)),
        ]
    if fit.dropped:
        names = ", ".join(columns[i].header for i in fit.dropped)
        out.append(
            _indented(
                Text(
                    f"hidden at {width} columns: {names} (--format csv or json has them)",
                    style="dim" if colour else "",
                )
            )
        )
    return out


def render_rich(report: View, terminal: Terminal) -> str:
    """The view as a terminal shows it, escape codes included when `terminal.colour`: kvplan's
    own (rich's colours); every word of the view goes through `terminal_text`."""
    from rich.console import Console
    from rich.text import Text

    width = terminal.width or FALLBACK_WIDTH
    colour = terminal.colour is not None
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=colour,
        color_system=terminal.colour,
        no_color=not colour,
        legacy_windows=False,
        emoji=False,
        highlight=False,
        markup=False,
        soft_wrap=False,
    )
    console.print(Text(terminal_text(report.title), style="bold" if colour else ""))
    facts = [
        x._replace(label=terminal_text(x.label), value=terminal_text(x.value))
        for x in facts_of(report)
    ]
    if facts:
        label = min(max(cell_width(x.label) for x in facts), max(12, (width - INDENT) // 3))
        grid = _grid(width, label)
        for x in facts:
            grid.add_row(Text(x.label), _styled(x.value, x.verdict, colour))
        console.print(_indented(grid))
    for table in report.tables:
        console.print()
        for part in _table(table, width, colour):
            console.print(part)
    if report.notes:
        console.print()
        numbers = [f"[{i}]" for i in range(1, len(report.notes) + 1)]
        grid = _grid(width + INDENT, max(map(len, numbers)), gap=1)
        for number, words in zip(numbers, report.notes, strict=True):
            grid.add_row(number, Text(terminal_text(words)))
        console.print(grid)
    return "\n".join(_rstrip(line) for line in buffer.getvalue().split("\n"))


def _rstrip(line: str) -> str:
    """Drop the spaces rich pads a line with, keeping the escape codes among them."""
    tail = re.search(r"(?: |\x1b\[[0-9;]*m)+$", line)
    if tail is None:
        return line
    return line[: tail.start()] + "".join(re.findall(r"\x1b\[[0-9;]*m", tail.group()))
