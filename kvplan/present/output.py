"""What kvplan prints: to standard output, or atomically to a file the user named (kvplan.atomic
writes the files); files the user did not name (a report's charts, explore's default page) are
never overwritten silently."""

import os
import sys
from pathlib import Path

from kvplan.atomic import after_renames, is_stdout, resolved, write_atomic, write_stdout
from kvplan.errors import KvplanError
from kvplan.present.escape import terminal_text


def write_text(text: str, path: Path | str | None, what: str = "output") -> None:
    """`text` to standard output (None or '-') or atomically to `path`."""
    if path is None or is_stdout(path):
        if not after_renames("stdout", text):
            write_stdout(text)
        return

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    write_atomic(Path(path), write, what)
    say_written(path)


def say_written(path: Path | str, always: bool = True) -> None:
    """The line on standard error for a file written: "wrote PATH", and where PATH is a symbolic
    link, the file it replaced, which the user did not name (`always` False: that line alone)."""
    link = Path(path).is_symlink()
    if not (always or link):
        return
    line = f"wrote {terminal_text(path)}"
    if link:
        line += f" (a symbolic link: replaced its target {terminal_text(resolved(path))})"
    if not after_renames("stderr", line):
        print(line, file=sys.stderr)


def unnamed_path(path: Path, force: bool, hint: str = "pass --force to overwrite it") -> Path:
    """A file kvplan chose, not the user: an existing one is overwritten only with --force."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not force:
        raise KvplanError(f"{path} exists and was not named on the command line: {hint}")
    return path


def companion_path(named: Path, suffix: str, force: bool) -> Path:
    """A file kvplan writes beside one the user named (report.md -> report-roofline.png); an
    existing one is overwritten only with --force."""
    return unnamed_path(Path(named).with_name(Path(named).stem + suffix), force)
