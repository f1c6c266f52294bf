"""How standard output is used: a terminal or a pipe, its width, NO_COLOR, FORCE_COLOR,
TERM=dumb. Small on purpose: a pipe decides here and never imports the rich renderer
(kvplan.present.terminal) nor rich (the start-up budget)."""

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from kvplan.record import NamedTuple

if TYPE_CHECKING:  # the names rich's Console takes (a string annotation: nothing at run time)
    from typing import Literal

    Colour = Literal["standard", "256", "truecolor"]

PIPE_WIDTH = 100  # a pipe has no width: prose columns are stacked past this (or $COLUMNS)
FALLBACK_WIDTH = 80  # FORCE_COLOR into a pipe, and a terminal that reports no size
MIN_WIDTH = 40  # narrower than this, layouts stop making sense: lines may wrap


class Terminal(NamedTuple):
    width: int | None  # columns; None: no limit
    rich: bool  # a terminal (or FORCE_COLOR): rich tables fitted to the width
    colour: (
        "Colour | None"  # rich's colour system ("standard", "256", "truecolor"); None: no colour
    )


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """NO_COLOR and FORCE_COLOR count when set to anything but the empty string."""
    return bool(environ.get(name, ""))


def _columns(environ: Mapping[str, str]) -> int | None:
    try:
        value = int(environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def detect(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> Terminal:
    """How to print to `stream` (standard output): rich when it is a terminal or FORCE_COLOR is
    set; colour unless NO_COLOR is set or TERM is dumb (FORCE_COLOR overrides a dumb TERM, never
    NO_COLOR); the width from $COLUMNS, else the terminal's."""
    stream = sys.stdout if stream is None else stream
    environ = os.environ if environ is None else environ
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    force = _flag(environ, "FORCE_COLOR")
    if not tty and not force:
        return Terminal(_columns(environ) or PIPE_WIDTH, rich=False, colour=None)
    width = _columns(environ)
    if width is None and tty:
        try:
            width = os.get_terminal_size(stream.fileno()).columns or None
        except (AttributeError, ValueError, OSError):
            width = None
    width = max(width or FALLBACK_WIDTH, MIN_WIDTH)
    dumb = environ.get("TERM", "") == "dumb"
    if _flag(environ, "NO_COLOR") or (dumb and not force):
        return Terminal(width, rich=True, colour=None)
    colour: Colour
    if environ.get("COLORTERM", "") in ("truecolor", "24bit"):
        colour = "truecolor"
    elif "256" in environ.get("TERM", ""):
        colour = "256"
    else:
        colour = "standard"
    return Terminal(width, rich=True, colour=colour)
