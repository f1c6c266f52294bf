"""Text that came from a file (a config's model_type, a profile's name) before kvplan prints it:
control characters removed, so an ESC sequence in a config cannot reach the terminal raw."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without control characters (tab and newline become spaces)."""
    return _CONTROL.sub("", str(text).replace("\t", " ").replace("\n", " "))
