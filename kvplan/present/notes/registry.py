"""The one table of note words, keyed by note id: `text(id)` registers a note's words (a function
of its values). Each family module of kvplan.present.notes registers its notes' words here when it
is imported; kvplan.present.notes imports a family on the first note of it that is printed."""

from collections.abc import Callable

TEXTS: dict[str, Callable[..., str]] = {}


def text(note_id: str):
    """Register the text of `note_id` (a function of the note's values)."""

    def register(fn: Callable[..., str]) -> Callable[..., str]:
        if note_id in TEXTS:
            raise ValueError(f"note {note_id!r} has two texts")
        TEXTS[note_id] = fn
        return fn

    return register
