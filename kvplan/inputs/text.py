"""Text that came from a file (a config's model_type, a profile's name) before kvplan prints it:
control characters removed, so an ESC sequence in a config cannot reach the terminal raw."""

# C0 and C1 controls (tab and newline become spaces first), zero-width and direction marks, line
# and paragraph separators, and the bidirectional isolates: deleted by str.translate (a table,
# not a regular expression: nothing to compile at start-up)
_RANGES = (
    (0x00, 0x08),
    (0x0B, 0x1F),
    (0x7F, 0x9F),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2066, 0x2069),
)
_CONTROL = {code: None for low, high in _RANGES for code in range(low, high + 1)}


def clean(text: str) -> str:
    """`text` without control characters (tab and newline become spaces)."""
    text = str(text)
    if text.isascii() and text.isprintable():  # nothing to remove (the common case, 8x faster)
        return text
    return text.replace("\t", " ").replace("\n", " ").translate(_CONTROL)
