"""Writing what kvplan prints: to standard output, or atomically to a file the user named.

A file is written to a temporary file in the same folder and renamed over the target, so a full
disk, a crash or a second kvplan writing the same file never leaves a half-written page; files the
user did not name (a report's charts, explore's default page) are never overwritten silently; every
OS error becomes one clear line (exit 2).

Only regular files are written. A symbolic link is followed: its target is replaced atomically
(the temporary file in the target's folder) and the link stays. An existing device, FIFO or socket
is refused, never replaced by a regular file (for a pipe, print to standard output with '-').
Two outputs of one command that resolve to the same file are refused before any work is done
(`check_outputs`)."""

import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.present.escape import terminal_text

STDOUT = "-"


def is_stdout(path: Path | str | None) -> bool:
    return path is None or str(path) == STDOUT


def _os_message(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, exc.__class__.__name__)


def write_stdout(text: str) -> None:
    """Print `text`; a closed pipe (`| head`) ends quietly, a full device is a clear error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:  # the reader went away: stop writing, and do not complain at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        raise SystemExit(0) from None
    except OSError as exc:
        raise KvplanError(f"cannot write to standard output: {_os_message(exc)}") from None


def _special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is, in words (None: either)."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def resolved(path: Path | str) -> Path:
    """The file a write to `path` lands in: symbolic links followed (a dangling link: the file
    it names), relative paths made absolute."""
    return Path(os.path.realpath(path))


def check_target(path: Path, what: str = "output") -> Path:
    """The folder must exist and the target, if it exists, must be a regular file (a symbolic link
    is judged by what it points to). Returns `path` unchanged."""
    path = Path(path)
    real = resolved(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        # /dev/stdout into a pipe resolves to /proc/.../pipe:[n], which no path names: ask the
        # original path, whose stat follows the link to the pipe itself
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None
    except OSError as exc:
        raise KvplanError(f"{what} {path}: {_os_message(exc)}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise KvplanError(f"{what} {path} is a folder; give a file name")
    kind = None if mode is None else _special_kind(mode)
    if kind is not None:
        raise KvplanError(
            f"{what} {path} is {kind}, not a regular file: kvplan writes only regular files "
            "(to send output down a pipe, use '-' and a shell redirect)"
        )
    if not real.parent.is_dir():
        named = path.parent if str(path.parent) else Path(".")
        shown = named if not named.is_dir() else real.parent  # a link into a missing folder
        raise KvplanError(f"{what} {path}: folder {shown} does not exist")
    return path


def check_outputs(outputs: dict[str, Path | str | None]) -> None:
    """Every file a command will write, checked before it does any work: {option: path}. Each
    target must be writable (`check_target`), and no two may resolve to the same file (the second
    write would silently replace the first). None and '-' (standard output) are skipped."""
    seen: list[tuple[Path, str, Path | str]] = []
    for what, path in outputs.items():
        if is_stdout(path):
            continue
        check_target(Path(path), what)
        real = resolved(path)
        for other_real, other, other_path in seen:
            if real == other_real or (
                real.exists() and other_real.exists() and real.samefile(other_real)
            ):
                raise KvplanError(
                    f"{other} {other_path} and {what} {path} are the same file: one would "
                    "replace the other; give each output its own file"
                )
        seen.append((real, what, path))


def write_atomic(path: Path, write: Callable[[Path], None], what: str = "output") -> None:
    """Call `write(temporary_path)`, then rename the temporary file over `path`."""
    import tempfile  # here, not at the top: printing to standard output never needs it

    shown = check_target(path, what)
    path = resolved(shown)  # a symbolic link: its target is replaced, the link kept
    parent = path.parent
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
        os.close(fd)
    except OSError as exc:
        raise KvplanError(f"cannot write {shown}: {_os_message(exc)}") from None
    tmp = Path(tmp_name)
    try:
        write(tmp)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvplanError(f"cannot write {shown}: {_os_message(exc)}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(text: str, path: Path | str | None, what: str = "output") -> None:
    """`text` to standard output (None or '-') or atomically to `path`."""
    if is_stdout(path):
        write_stdout(text)
        return

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    write_atomic(Path(path), write, what)
    print(f"wrote {terminal_text(path)}", file=sys.stderr)


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
