"""Writing what kvplan prints: to standard output, or atomically to a file the user named.

A file is written to a temporary file in the same folder and renamed over the target, so a full
disk, a crash or a second kvplan writing the same file never leaves a half-written page; files the
user did not name (a report's charts) are never overwritten silently; every OS error becomes one
clear line (exit 2)."""

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

from kvplan.errors import KvplanError

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


def check_target(path: Path, what: str = "output") -> Path:
    """The folder must exist and the target must not be a folder."""
    path = Path(path)
    if path.is_dir():
        raise KvplanError(f"{what} {path} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise KvplanError(f"{what} {path}: folder {parent} does not exist")
    return path


def write_atomic(path: Path, write: Callable[[Path], None], what: str = "output") -> None:
    """Call `write(temporary_path)`, then rename the temporary file over `path`."""
    import tempfile  # here, not at the top: printing to standard output never needs it

    path = check_target(path, what)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
        os.close(fd)
    except OSError as exc:
        raise KvplanError(f"cannot write {path}: {_os_message(exc)}") from None
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
        raise KvplanError(f"cannot write {path}: {_os_message(exc)}") from None
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
    print(f"wrote {path}", file=sys.stderr)


def companion_path(named: Path, suffix: str, force: bool) -> Path:
    """A file kvplan writes beside one the user named (report.md -> report-roofline.png); an
    existing one is overwritten only with --force."""
    path = Path(named).with_name(Path(named).stem + suffix)
    if path.exists() and not force:
        raise KvplanError(
            f"{path} exists and was not named on the command line: pass --force to overwrite it"
        )
    return path
