"""Output formats: one enum, mapped to pure functions View -> str.

CSV, JSON and Markdown are written with plain string building, never a rich Console (rich wraps
piped output at 80 columns)."""

from __future__ import annotations

import csv
import io
import json
from enum import Enum

from kvplan.present.view import View


class OutputFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


def render(report: View, fmt: OutputFormat | str) -> str:
    return RENDERERS[OutputFormat(fmt)](report)


def render_json(report: View) -> str:
    return json.dumps(report.data, indent=2, allow_nan=False) + "\n"


def render_markdown(report: View) -> str:
    out = [f"## {report.title}", ""]
    if report.facts:
        out += ["| | |", "|---|---|"]
        out += [f"| {label} | {value} |" for label, value in report.facts]
        out.append("")
    for table in report.tables:
        if table.title:
            out += [f"### {table.title}", ""]
        out.append("| " + " | ".join(c.header for c in table.columns) + " |")
        out.append(
            "|" + "|".join("---:" if c.align == "right" else "---" for c in table.columns) + "|"
        )
        for row in table.rows:
            out.append("| " + " | ".join(c.fmt(row.get(c.key)) for c in table.columns) + " |")
        out.append("")
    if report.notes:
        out += ["**Notes**", ""]
        out += [f"{i}. {note}" for i, note in enumerate(report.notes, 1)]
        out.append("")
    return "\n".join(out)


def render_csv(report: View) -> str:
    """The first table, raw values; notes as leading '# ' comment lines."""
    buf = io.StringIO()
    for note in report.notes:
        buf.write(f"# {note}\n")
    if report.tables:
        table = report.tables[0]
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c.key for c in table.columns])
        for row in table.rows:
            writer.writerow(
                ["" if row.get(c.key) is None else row.get(c.key) for c in table.columns]
            )
    return buf.getvalue()


def render_table(report: View) -> str:
    """Aligned plain text for a terminal (no rich: it costs the CLI's start-up budget)."""
    out = [report.title]
    if report.facts:
        width = max(len(label) for label, _ in report.facts)
        out += [f"  {label:<{width}}  {value}" for label, value in report.facts]
    for table in report.tables:
        out.append("")
        if table.title:
            out.append(table.title)
        cells = [[c.fmt(row.get(c.key)) for c in table.columns] for row in table.rows]
        widths = [
            max([len(c.header)] + [len(r[i]) for r in cells]) for i, c in enumerate(table.columns)
        ]

        out.append(_line([c.header for c in table.columns], widths, table.columns))
        out.append("  " + "  ".join("─" * w for w in widths))
        out += [_line(r, widths, table.columns) for r in cells]
    if report.notes:
        out.append("")
        out += [f"[{i}] {note}" for i, note in enumerate(report.notes, 1)]
    return "\n".join(out) + "\n"


def _line(values: list[str], widths: list[int], columns: list) -> str:
    parts = [
        v.rjust(w) if c.align == "right" else v.ljust(w)
        for v, w, c in zip(values, widths, columns, strict=True)
    ]
    return "  " + "  ".join(parts).rstrip()


RENDERERS = {
    OutputFormat.table: render_table,
    OutputFormat.markdown: render_markdown,
    OutputFormat.csv: render_csv,
    OutputFormat.json: render_json,
}
