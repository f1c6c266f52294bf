"""Notes: the assumptions that travel with every number, as stable ids plus the values (SI units)
their text is built from. The library only ever creates Note values; the words live in one place,
kvplan.present.notes, keyed by id. Reports cite notes by id, never by their wording."""

from collections.abc import Iterable
from typing import Any

from kvplan.record import NamedTuple


class Note(NamedTuple):
    id: str
    values: tuple[tuple[str, Any], ...] = ()

    def value(self, key: str, default: Any = None) -> Any:
        return dict(self.values).get(key, default)


def note(note_id: str, **values: Any) -> Note:
    """A note with its values, frozen (lists become tuples) so notes can be compared and hashed."""
    frozen = tuple(
        [(key, tuple(value) if isinstance(value, list) else value) for key, value in values.items()]
    )  # a list first: faster than tuple() of a generator (a note is made per layout and GPU)
    return Note(note_id, frozen)


def unique(notes: Iterable[Note | None]) -> tuple[Note, ...]:
    """Drop repeats (and Nones), keeping the first occurrence's place."""
    seen, out = set(), []
    for item in notes:
        if item is not None and item not in seen:
            seen.add(item)
            out.append(item)
    return tuple(out)
