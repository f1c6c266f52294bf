"""What a presenter hands to a renderer: header facts, tables, notes (already in words) and the
JSON data (the machine contract). Renderers (kvplan.present.render) turn it into text."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, NamedTuple

from kvplan.notes import Note
from kvplan.present.notes import note_text, note_texts


class Column(NamedTuple):
    key: str
    header: str  # with its unit, e.g. "KV/seq (GiB)"
    fmt: Callable[[Any], str] = str
    align: str = "right"


class Table(NamedTuple):
    title: str
    columns: list[Column]
    rows: list[dict]


class View(NamedTuple):
    title: str
    facts: list[tuple[str, str]] = []
    tables: list[Table] = []
    notes: list[str] = []
    data: dict = {}


def note_json(items) -> list[dict]:
    """Notes as JSON: {"id", "text"} each, repeats of the same words dropped."""
    out, seen = [], set()
    for item in items:
        words = note_text(item)
        if words not in seen:
            seen.add(words)
            out.append({"id": item.id, "text": words})
    return out


def jsonable(value: Any) -> Any:
    """A typed result as JSON data: NamedTuples become objects, enums their values, notes
    {"id", "text"} objects."""
    if isinstance(value, Note):
        return {"id": value.id, "text": note_text(value)}
    if hasattr(value, "_asdict"):
        return {key: jsonable(item) for key, item in value._asdict().items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, Note) for item in value):
            return note_json(value)
        return [jsonable(item) for item in value]
    return value


def rows_of(items: list) -> list[dict]:
    """Typed rows as the dicts a Table renders."""
    return [jsonable(item) for item in items]


def view(title: str, result: Any, facts=(), tables=(), notes=None, data=None) -> View:
    """A View whose JSON is the result itself and whose notes are the result's notes."""
    items = notes if notes is not None else getattr(result, "notes", ())
    return View(
        title,
        list(facts),
        list(tables),
        note_texts(items),
        data if data is not None else jsonable(result),
    )
