"""What a presenter hands to a renderer: header facts, tables, notes (already in words) and the
JSON data (the machine contract). Renderers (kvplan.present.render, kvplan.present.terminal)
turn it into text.

Presenters tag what a renderer needs beyond the words, with small typed markers:

- `Column.priority`: at a narrow terminal the column with the highest priority is left out first
  (a line under the table names it); 0 (the default) only when even the narrowest layout is too
  wide, rightmost first. `Column.answer=True` marks the column the command exists for ($/M
  tokens in a comparison, the p99 latencies in plan): never left out. `Column.prose=True` marks
  long text that is stacked under the table instead of squeezed into it.
- `Verdict` (good, bad, warn): `Fact(..., verdict=...)`, or `Column(..., verdict=fn)` with `fn`
  a function of the row; a terminal colours it.
- Note references: `Fact(..., notes=...)`, `Column(..., notes=...)` (cited at its header),
  `Table(..., notes=...)` (at its title) and `Table(..., row_notes=fn)` (at a row's first cell),
  each a tuple of note ids or `ref("id", value=...)`. Markdown cites them as footnotes; a note
  cited nowhere is cited from the first fact (or the title), so every note is referenced.
- `Fact(..., data={...})`: the raw numbers behind a fact (SI, unit in the key), which CSV writes as
  columns; `Column(..., raw_keys=(...))`: the fields behind a derived cell, written instead.
"""

# No `from __future__ import annotations` here: NamedTuple fields given as strings are each
# compiled at import (typing.ForwardRef), which the CLI's start-up budget pays on every run.

from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any

from kvplan.notes import Note
from kvplan.present.notes import note_text, note_texts
from kvplan.record import NamedTuple


class Verdict(str, Enum):
    """How a cell or fact reads at a glance: a terminal shows good green, bad red, warn yellow."""

    good = "good"
    bad = "bad"
    warn = "warn"


def judged(ok: bool | None, bad: Verdict = Verdict.bad) -> Verdict | None:
    """good when `ok`, else `bad` (or warn); None (no verdict) when unknown."""
    if ok is None:
        return None
    return Verdict.good if ok else bad


class NoteRef(NamedTuple):
    """Where a note applies: its id, and values that pick one of several notes with that id. A
    reference to a note the view does not hold is ignored, so presenters may cite notes that only
    some results carry."""

    id: str
    values: tuple[tuple[str, Any], ...] = ()


def ref(note_id: str, **values: Any) -> NoteRef:
    """`ref("capacity-budget", gpu="H100 SXM")`: the capacity-budget note of that GPU."""
    return NoteRef(note_id, tuple(values.items()))


Refs = Sequence[NoteRef | str]


class Column(NamedTuple):
    key: str
    header: str  # with its unit, e.g. "KV/seq (GiB)"
    fmt: Callable[[Any], str] = str
    align: str = "right"
    priority: int = 0  # the highest is left out first when the width is short (0: last resort)
    answer: bool = False  # the column the command exists for: never left out
    prose: bool = False  # long text: stacked under the table when the table is too wide
    verdict: Callable[[dict], Verdict | None] | None = None  # a row's verdict for this cell
    notes: Refs = ()  # cited at the header
    raw_keys: tuple[str, ...] = ()  # CSV writes these fields (the numbers behind a derived cell)


class Table(NamedTuple):
    title: str
    columns: list[Column]
    rows: list[dict]
    notes: Refs = ()  # cited at the title (the first header when untitled)
    row_notes: Callable[[dict], Refs] | None = None  # cited at a row's first cell


class Fact(NamedTuple):
    label: str
    value: str
    verdict: Verdict | None = None
    notes: Refs = ()
    data: dict[str, Any] = {}  # the raw numbers behind the value (SI, unit in the key), for CSV


class View(NamedTuple):
    title: str
    facts: Sequence[Fact | tuple[str, str]] = []
    tables: list[Table] = []
    notes: list[str] = []
    data: dict = {}
    note_items: tuple[Note, ...] = ()  # the notes as the result holds them (ids for citations)


def facts_of(report: View) -> list[Fact]:
    """The view's facts as Fact values (presenters may still give (label, value) pairs)."""
    return [item if isinstance(item, Fact) else Fact(*item) for item in report.facts]


def cited(report: View, refs: Iterable[NoteRef | str]) -> list[int]:
    """Indexes into report.notes of the notes `refs` point at, in order, repeats dropped."""
    out: list[int] = []
    for item in refs:
        wanted = NoteRef(item) if isinstance(item, str) else item
        for held in report.note_items:
            if held.id != wanted.id:
                continue
            if any(held.value(key) != value for key, value in wanted.values):
                continue
            words = note_text(held)
            if words in report.notes:
                index = report.notes.index(words)
                if index not in out:
                    out.append(index)
    return out


def note_json(items) -> list[dict]:
    """Notes as JSON: {"id", "text"} each, repeats of the same words dropped."""
    out, seen = [], set()
    for item in items:
        words = note_text(item)
        if words not in seen:
            seen.add(words)
            out.append({"id": item.id, "text": words})
    return out


_PLAIN = (str, int, float, bool, type(None))  # JSON as they are (exact types: not an IntEnum)


def jsonable(value: Any) -> Any:
    """A typed result as JSON data: NamedTuples become objects, enums their values, notes
    {"id", "text"} objects."""
    if type(value) in _PLAIN:  # most of a result's values: no further checks
        return value
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
    items = tuple(notes if notes is not None else getattr(result, "notes", ()))
    return View(
        title,
        list(facts),
        list(tables),
        note_texts(items),
        data if data is not None else jsonable(result),
        tuple(item for item in items if isinstance(item, Note)),
    )
