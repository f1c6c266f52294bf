"""Output formats: one enum, mapped to pure functions View -> str.

CSV, JSON and Markdown are written with plain string building, never a rich Console (rich wraps
piped output at 80 columns). The plain table here is what pipes get; a terminal gets the
width-aware, coloured table of kvplan.present.terminal, which shares `fit_columns`.
"""

# No `from __future__ import annotations` here: NamedTuple fields given as strings are each
# compiled at import (typing.ForwardRef), which the CLI's start-up budget pays on every run.

import io
import json
from enum import Enum
from typing import Any

from kvplan.present.escape import csv_cell, md_text, terminal_text
from kvplan.present.view import Column, Table, View, cited, facts_of
from kvplan.record import NamedTuple

INDENT = 2  # a table's left margin
GAP = 2  # spaces between two columns
TEXT_MIN_WIDTH = 10  # a terminal squeezes a wrapping text column no narrower than this


class OutputFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


def render(report: View, fmt: OutputFormat | str) -> str:
    return RENDERERS[OutputFormat(fmt)](report)


def render_json(report: View) -> str:
    return json.dumps(report.data, indent=2, allow_nan=False) + "\n"


# ---- Markdown ----------------------------------------------------------------------------------
def render_markdown(report: View) -> str:
    """Markdown with every note a footnote cited where it applies (facts, column headers, table
    titles, rows); notes cited nowhere are cited from the first fact, or the title: renderers
    (GitHub, pandoc) drop footnotes nobody references. Every word of the view goes through
    `md_text` (kvplan.present.escape), the citations and the table markup after it."""
    facts = facts_of(report)
    used: set[int] = set()

    def cite(refs) -> str:
        numbers = cited(report, refs)
        used.update(numbers)
        return "".join(f"[^{n + 1}]" for n in numbers)

    fact_cites = [cite(x.notes) for x in facts]
    table_lines: list[str] = []
    for table in report.tables:
        title_cite = cite(table.notes)
        if table.title:
            table_lines += [f"### {md_text(table.title)}{title_cite}", ""]
        headers = [md_text(c.header) + cite(c.notes) for c in table.columns]
        if not table.title and title_cite:
            headers[0] += title_cite
        table_lines.append("| " + " | ".join(headers) + " |")
        table_lines.append(
            "|" + "|".join("---:" if c.align == "right" else "---" for c in table.columns) + "|"
        )
        for row in table.rows:
            cells = [md_text(c.fmt(row.get(c.key))) for c in table.columns]
            if table.row_notes is not None and cells:
                cells[0] += cite(table.row_notes(row))
            table_lines.append("| " + " | ".join(cells) + " |")
        table_lines.append("")
    whole = "".join(f"[^{n + 1}]" for n in range(len(report.notes)) if n not in used)
    if facts:
        fact_cites[0] += whole
    out = [f"## {md_text(report.title)}{'' if facts else whole}", ""]
    if facts:
        out += ["| | |", "|---|---|"]
        out += [
            f"| {md_text(x.label)}{refs} | {md_text(x.value)} |"
            for x, refs in zip(facts, fact_cites, strict=True)
        ]
        out.append("")
    out += table_lines
    if report.notes:
        out += ["**Notes**", ""]
        out += [f"[^{i}]: {md_text(note)}" for i, note in enumerate(report.notes, 1)]
        out.append("")
    return "\n".join(out)


# ---- CSV ---------------------------------------------------------------------------------------
def csv_columns(table: Table) -> list[str]:
    """The fields a table writes: each column's key (or the raw fields behind a derived cell),
    once each: two columns showing one number in two units are one field."""
    keys: list[str] = []
    for column in table.columns:
        for key in column.raw_keys or (column.key,):
            if key not in keys:
                keys.append(key)
    return keys


def csv_value(value: Any) -> Any:
    """A field as CSV writes it: None empty, lists and objects as JSON, text through `csv_cell`
    (control characters escaped, no cell a spreadsheet would run as a formula)."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple, dict)):
        return csv_cell(json.dumps(value, allow_nan=False))
    return csv_cell(value)


def render_csv(report: View) -> str:
    """One well-formed table: every table's rows (a leading `table` field names the table when
    there are several: its title, or "main" for an untitled first), raw values (SI units, the unit in the field name), one field per number,
    and the facts' numbers (Fact.data) as fields repeated on every row. No comment lines: the
    CLI prints the notes on standard error, one `note:` line each."""
    fact_fields: dict[str, Any] = {}
    for item in facts_of(report):
        for key, value in item.data.items():
            if key in fact_fields:
                raise ValueError(f"CSV field {key!r} comes from two facts")
            fact_fields[key] = value
    several = len(report.tables) > 1
    fields: list[str] = ["table"] if several else []
    for table in report.tables:
        fields += [key for key in csv_columns(table) if key not in fields]
    clash = sorted(set(fields) & set(fact_fields))
    if clash:
        raise ValueError(f"CSV fields {clash} are both table columns and fact data")
    fields += list(fact_fields)
    rows: list[dict] = []
    for number, table in enumerate(report.tables, 1):
        name = table.title or ("main" if number == 1 else f"table {number}")
        for row in table.rows:
            out = {key: row.get(key) for key in csv_columns(table)}
            rows.append(
                {"table": name, **out, **fact_fields} if several else {**out, **fact_fields}
            )
    if not report.tables and fact_fields:
        rows.append(dict(fact_fields))
    import csv  # here, not at the top: the start-up budget of every other format

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_cell(key) for key in fields])
    for row in rows:
        writer.writerow([csv_value(row.get(key)) for key in fields])
    return buf.getvalue()


# ---- plain table (pipes) -----------------------------------------------------------------------
# Code point ranges with no wide character and no combining mark (checked against unicodedata in
# tests/test_render_csv.py): Latin-1 and Latin extended (× ÷), general punctuation (— …),
# arrows, mathematical operators (≤), box drawing (─).
_NARROW = ((0x00A0, 0x0300), (0x2010, 0x2028), (0x2030, 0x205F), (0x2190, 0x2300), (0x2500, 0x2580))


def _narrow(code: int) -> bool:
    return code < 0x80 or any(low <= code < high for low, high in _NARROW)


def cell_width(text: str) -> int:
    """Columns a string takes in a terminal: wide East Asian characters 2, combining marks 0."""
    if text.isascii() or all(_narrow(ord(ch)) for ch in text):
        return len(text)
    import unicodedata  # only for text beyond the narrow ranges (start-up)

    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def header_min_width(header: str) -> int:
    """A header that may wrap between words needs its longest word."""
    return max((cell_width(word) for word in header.split()), default=0)


def header_two_lines_width(header: str) -> int:
    """The narrowest width at which a header takes at most two lines."""
    words = header.split()
    if len(words) < 2:
        return cell_width(header)
    return min(
        max(cell_width(" ".join(words[:cut])), cell_width(" ".join(words[cut:])))
        for cut in range(1, len(words))
    )


class Bounds(NamedTuple):
    full: list[int]  # widest cell or whole header: one line per row, one header line
    natural: list[int]  # widest cell, header on at most two lines (wrapped headers only)
    least: list[int]  # numbers whole, text wrapped to TEXT_MIN_WIDTH, headers by word


def column_bounds(columns: list[Column], cells: list[list[str]], wrap_headers: bool) -> Bounds:
    full, natural, least = [], [], []
    for i, column in enumerate(columns):
        cell = max((cell_width(row[i]) for row in cells), default=0)
        full.append(max(cell, cell_width(column.header)))
        if not wrap_headers:
            natural.append(full[-1])
            least.append(full[-1])
            continue
        natural.append(max(cell, header_two_lines_width(column.header)))
        text = cell if column.align == "right" else min(cell, TEXT_MIN_WIDTH)
        least.append(max(text, header_min_width(column.header), 1))
    return Bounds(full, natural, least)


def table_width(widths, indent: int = INDENT, gap: int = GAP) -> int:
    widths = list(widths)
    return indent + sum(widths) + gap * max(len(widths) - 1, 0)


class Fit(NamedTuple):
    shown: list[int]  # column indexes kept in the grid, in order
    stacked: list[int]  # prose columns printed under the table
    dropped: list[int]  # columns left out (named in a line under the table)


def fit_columns(
    columns: list[Column],
    cells: list[list[str]],
    width: int | None,
    *,
    drop: bool = True,
    wrap_headers: bool = False,
) -> Fit:
    """Which columns fit in `width` terminal columns. A column wants its widest cell and its
    header (on at most two lines where headers wrap). Too wide: prose columns are stacked under
    the table (widest first); then, with `drop`, columns are left out by priority (highest first,
    the rightmost of equals first), and if even the narrowest layout (text wrapped, headers by
    word) is too wide, unranked columns from the right (never the first, never an answer column:
    Column.answer)."""
    bounds = column_bounds(columns, cells, wrap_headers)
    shown = list(range(len(columns)))
    stacked: list[int] = []
    dropped: list[int] = []

    def total(which) -> int:
        return table_width(which[i] for i in shown)

    if width is None or total(bounds.natural) <= width:
        return Fit(shown, stacked, dropped)
    for i in sorted((i for i in shown if columns[i].prose), key=lambda i: -bounds.natural[i]):
        if total(bounds.natural) <= width or len(shown) == 1:
            break
        shown.remove(i)
        stacked.append(i)
    if drop:
        ranked = sorted(
            (i for i in shown if columns[i].priority > 0 and not columns[i].answer),
            key=lambda i: (-columns[i].priority, -i),
        )
        for i in ranked:
            if total(bounds.natural) <= width:
                break
            shown.remove(i)
            dropped.append(i)
        while total(bounds.least) > width:
            # the last resort: unranked columns from the right, never the first nor an answer
            spare = [i for i in shown[1:] if not columns[i].answer]
            if not spare:
                break
            shown.remove(spare[-1])
            dropped.append(spare[-1])
    return Fit(shown, sorted(stacked), sorted(dropped))


class ShownTable(NamedTuple):
    """A table's words as a terminal or a pipe gets them: its title, headers and cells through
    `terminal_text` (kvplan.present.escape), the one rule of the plain and the rich tables."""

    title: str
    columns: list[Column]
    cells: list[list[str]]  # per row, per column


def shown_table(table: Table) -> ShownTable:
    columns = [c._replace(header=terminal_text(c.header)) for c in table.columns]
    cells = [[terminal_text(c.fmt(row.get(c.key))) for c in table.columns] for row in table.rows]
    return ShownTable(terminal_text(table.title), columns, cells)


def row_label(cells: list[str], fit: Fit) -> str:
    """What names a row in the stacked prose under a table: its first shown cell."""
    return cells[fit.shown[0]] if fit.shown else cells[0]


def render_table(report: View, width: int | None = None) -> str:
    """Aligned plain text, no colour and no rich (it costs the CLI's start-up budget): what pipes
    get. With `width`, prose columns that would make a table wider are stacked under it; no
    column is left out (a pipe may be read by a program). Every word goes through
    `terminal_text`: a pipe often ends at a terminal."""
    out = [terminal_text(report.title)]
    facts = [(terminal_text(x.label), terminal_text(x.value)) for x in facts_of(report)]
    if facts:
        label_width = max(cell_width(label) for label, _ in facts)
        out += [f"  {_pad(label, label_width)}  {value}" for label, value in facts]
    for table in report.tables:
        out.append("")
        shown = shown_table(table)
        if shown.title:
            out.append(shown.title)
        cells = shown.cells
        fit = fit_columns(shown.columns, cells, width, drop=False)
        columns = [shown.columns[i] for i in fit.shown]
        grid = [[r[i] for i in fit.shown] for r in cells]
        widths = [
            max([cell_width(c.header)] + [cell_width(r[j]) for r in grid])
            for j, c in enumerate(columns)
        ]
        out.append(_line([c.header for c in columns], widths, columns))
        out.append("  " + "  ".join("─" * w for w in widths))
        out += [_line(r, widths, columns) for r in grid]
        for i in fit.stacked:
            out += ["", f"  {shown.columns[i].header}"]
            for r in cells:
                if r[i]:
                    out.append(f"    {row_label(r, fit)}: {r[i]}")
    if report.notes:
        out.append("")
        out += [f"[{i}] {terminal_text(note)}" for i, note in enumerate(report.notes, 1)]
    return "\n".join(out) + "\n"


def _pad(text: str, width: int, right: bool = False) -> str:
    space = " " * max(width - cell_width(text), 0)
    return space + text if right else text + space


def _line(values: list[str], widths: list[int], columns: list) -> str:
    parts = [
        _pad(v, w, right=c.align == "right")
        for v, w, c in zip(values, widths, columns, strict=True)
    ]
    return "  " + "  ".join(parts).rstrip()


RENDERERS = {
    OutputFormat.table: render_table,
    OutputFormat.markdown: render_markdown,
    OutputFormat.csv: render_csv,
    OutputFormat.json: render_json,
}
