"""The shape every command's result takes before rendering: header facts, tables, notes, and the
JSON data (the contract). Renderers (kvplan.present.render) turn it into text; nothing here prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Column(NamedTuple):
    key: str
    header: str  # with its unit, e.g. "KV/seq (GiB)"
    fmt: Callable[[Any], str] = str
    align: str = "right"


class Table(NamedTuple):
    title: str
    columns: list[Column]
    rows: list[dict]


class Report(NamedTuple):
    title: str
    facts: list[tuple[str, str]] = []
    tables: list[Table] = []
    notes: list[str] = []
    data: dict = {}


def fmt_gib(num_bytes: float | None) -> str:
    return "—" if num_bytes is None else f"{num_bytes / 2**30:,.2f}"


def fmt_gb(num_bytes: float | None) -> str:
    return "—" if num_bytes is None else f"{num_bytes / 1e9:,.2f}"


def fmt_int(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def fmt_float(digits: int) -> Callable[[Any], str]:
    def render(value: float | None) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    return render


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3f}"


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.2f}"


def fmt_text(value: Any) -> str:
    return "" if value is None else str(value)


def unique_notes(notes: list[str]) -> list[str]:
    seen, out = set(), []
    for note in notes:
        if note and note not in seen:
            seen.add(note)
            out.append(note)
    return out
