"""The one table of note words, keyed by note id: `text(id)` registers a note's words (a function
of its values). The word modules (kvplan.present.notes, notes_gpu, notes_more) register into it;
kvplan.present.notes looks a note up, importing the others on first use (start-up)."""

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
