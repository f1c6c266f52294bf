"""A file kvplan reads whole (a config.json, a trace): a regular file only, its size capped before
and while reading. It is opened without blocking and checked on the open descriptor, so a FIFO
(which blocks an open or a read forever), a device (/dev/zero, /dev/urandom never end) or a file
swapped for one after a check is refused, never read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvplan.errors import KvplanError

CHUNK_BYTES = 1 << 20


def user_path(text: str) -> Path:
    """`text` as a path with `~` and `~user` expanded where they name a home folder; where they
    name none (an unknown user, no HOME), the path as written, which then names no file
    (Path.expanduser raises RuntimeError there)."""
    path = Path(text)
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


def read_regular(path: Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them, else a one-line error
    ("{path}: over N MiB, not {what}")."""
    from kvplan.atomic import note_input

    too_large = f"{path}: over {max_bytes / 2**20:g} MiB, not {what}"
    note_input(path)  # an output of this command may not replace it
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        reason = _reason(exc) if isinstance(exc, OSError) else "not a file name"
        raise KvplanError(f"{path}: cannot read ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KvplanError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise KvplanError(too_large)
        chunks, total = [], 0
        while True:  # bounded chunks: a file that grows while read still stops at the cap
            chunk = os.read(fd, min(CHUNK_BYTES, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise KvplanError(too_large)
        return b"".join(chunks)
    except OSError as exc:
        raise KvplanError(f"{path}: cannot read ({_reason(exc)})") from None
    finally:
        os.close(fd)
