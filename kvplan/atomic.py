"""Writing files atomically: to a temporary file in the same folder, renamed over the target,
so a full disk, a crash or a second kvplan writing the same file never leaves a half-written file;
every OS error becomes one clear line (exit 2). Every layer that writes a file uses it (the
presenters' outputs, kvplan.present.output; the Hub cache, kvplan.inputs.hub).

Only regular files are written. A symbolic link is followed: its target is replaced atomically
(the temporary file in the target's folder) and the link stays; the target is a file the user did
not name, so the presenters say which one was replaced (kvplan.present.output.say_written). An
existing device, FIFO or socket
is refused, never replaced by a regular file (for a pipe, print to standard output with '-').
Two outputs of one command that resolve to the same file are refused before any work is done
(`check_outputs`), and so is an output that is a file the command read (a config.json, a GGUF, a
trace, a GPU profile: `note_input`), which the report would replace.

A command that writes several files (a report and its charts, measure's JSON, JUnit and profile)
writes them inside `all_or_nothing()`: each goes to its temporary file, and only when every one
is complete are they renamed into place, so a failure (a full disk on the second chart, a signal)
leaves none of them, and a retry is not blocked by a chart the failed run left. Every temporary
file is registered before it exists and removed at exit whatever ends the run (a SIGTERM is turned
into an exit by kvplan.cli.signals; without it the default action would skip every cleanup)."""

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

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


def check_spelling(raw: str, what: str = "output") -> str:
    """A file name as typed: not a folder's spelling (a trailing '/', which Path() would drop,
    writing a file of that name), not empty or blank."""
    if raw.endswith(("/", os.sep)):
        raise KvplanError(f"{what} {raw} ends with '/', a folder's spelling; give a file name")
    if not Path(raw).name.strip():
        raise KvplanError(f"{what} {raw!r} names no file; give a file name")
    return raw


# the files this command has read (resolved): no output of it may replace one
_INPUTS: set[Path] = set()


def note_input(path: Path | str) -> None:
    """`path` is a file this command read (kvplan.inputs' readers call it): an output that
    resolves to it is refused (check_target), never written over the input."""
    _INPUTS.add(resolved(path))


def release_input(path: Path | str) -> None:
    """`path` was read as a result the command may replace (measure's --baseline: --save-profile
    or --json onto it updates it), not as an input to keep."""
    _INPUTS.discard(resolved(path))


def forget_inputs() -> None:
    """A new command starts (kvplan.cli.main): the files an earlier one in this process read
    are not its inputs."""
    _INPUTS.clear()


def check_not_input(path: Path | str, what: str = "output") -> None:
    """An output must not be a file this command read (note_input; a hard link to one too)."""
    real = resolved(path)
    try:
        read = real in _INPUTS or (
            real.exists() and any(p.exists() and real.samefile(p) for p in _INPUTS)
        )
    except OSError:
        read = False
    if read:
        raise KvplanError(
            f"{what} {path} is a file this command read: writing it would replace the input; "
            "give the output its own file"
        )


def check_target(path: Path | str, what: str = "output") -> Path:
    """The folder must exist and the target, if it exists, must be a regular file (a symbolic link
    is judged by what it points to). Returns `path` as a Path."""
    check_spelling(str(path), what)
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
    # the writer makes its temporary file beside the target: a folder that takes none
    # (/proc/self/, a read-only mount, no permission) is named now, not after the work
    try:
        _discard(_new_temporary(real))
    except OSError as exc:
        raise KvplanError(f"{what} {path}: cannot write there ({_os_message(exc)})") from None
    return path


def check_outputs(outputs: dict[str, Path | str | None]) -> None:
    """Every file a command will write, checked before it does any work: {option: path}. Each
    target must be writable (`check_target`), and no two may resolve to the same file (the second
    write would silently replace the first). None and '-' (standard output) are skipped."""
    seen: list[tuple[Path, str, Path | str]] = []
    for what, path in outputs.items():
        if path is None or is_stdout(path):
            continue
        check_target(path, what)
        check_not_input(path, what)
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


# ---- temporary files: registered before they exist, removed whatever ends the run ----------
_TEMPORARY: dict[Path, int] = {}  # temporary file -> the process that made it (not a fork's)
_SWEEP_AT_EXIT: list[bool] = []  # [True] once remove_temporaries is registered with atexit


def _new_temporary(path: Path, link_to: Path | None = None) -> Path:
    """A new file `.NAME.RANDOM.tmp` beside `path` (empty, or a hard link to `link_to`). Its name
    is registered before the file exists, so a signal between the two leaves nothing unlisted;
    48 random bits make a clash with a file of someone else's negligible."""
    if not _SWEEP_AT_EXIT:
        import atexit

        atexit.register(remove_temporaries)
        _SWEEP_AT_EXIT.append(True)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        _TEMPORARY[tmp] = os.getpid()
        try:
            if link_to is None:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            else:
                os.link(link_to, tmp)
        except FileExistsError:  # someone else's file: not ours to remove
            del _TEMPORARY[tmp]
            continue
        except BaseException:  # a failure, or a signal just after the file was made
            _discard(tmp)
            raise
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def _discard(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass
    _TEMPORARY.pop(tmp, None)


def remove_temporaries() -> None:
    """Remove every temporary file this process made and has not renamed into place (at exit,
    whatever ended the run; a forked worker's copy of the registry is not its own)."""
    me = os.getpid()
    for tmp, owner in list(_TEMPORARY.items()):
        if owner == me:
            _discard(tmp)


def _filled(path: Path, shown: Path, write: Callable[[Path], object]) -> Path:
    """A complete temporary file for `path`: written by `write`, with the mode the target has
    (or a new file's)."""
    try:
        tmp = _new_temporary(path)
    except OSError as exc:
        raise KvplanError(f"cannot write {shown}: {_os_message(exc)}") from None
    with _discarded_on_failure(tmp, shown):
        write(tmp)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
    return tmp


@contextlib.contextmanager
def _discarded_on_failure(tmp: Path, shown: Path):
    """Whatever fails inside (a signal too) removes the temporary file; an OSError becomes one
    line naming the file the user asked for."""
    try:
        yield
    except OSError as exc:
        _discard(tmp)
        raise KvplanError(f"cannot write {shown}: {_os_message(exc)}") from None
    except BaseException:
        _discard(tmp)
        raise


def write_atomic(
    path: Path, write: Callable[[Path], object], what: str = "output", *, alone: bool = False
) -> None:
    """Call `write(temporary_path)`, then rename the temporary file over `path`; inside
    `all_or_nothing()` (unless `alone`: a cache, not an output) the rename waits for the others."""
    shown = check_target(path, what)
    if not alone:  # an output, not a cache kvplan reads and refreshes itself
        check_not_input(shown, what)
    path = resolved(shown)  # a symbolic link: its target is replaced, the link kept
    batch = None if alone else _BATCH
    if batch is not None:
        batch.stage(path, shown, write)
        return
    tmp = _filled(path, shown, write)
    with _discarded_on_failure(tmp, shown):
        os.replace(tmp, path)
    _TEMPORARY.pop(tmp, None)


# ---- several files: all of them, or none ------------------------------------------------------
class _Staged(NamedTuple):
    tmp: Path  # the complete new content
    path: Path  # where it goes (symbolic links resolved)
    shown: Path  # the path as the user gave it
    backup: Path | None  # a hard link to the file it replaces, if one existed
    existed: bool


class _Batch:
    """The files of one `all_or_nothing()` block: complete temporary files waiting to be renamed,
    then the lines for standard error and the text for standard output, in order."""

    def __init__(self):
        self.staged: list[_Staged] = []
        self.after: list[tuple[str, str]] = []  # ("stderr" | "stdout", text), after the renames

    def stage(self, path: Path, shown: Path, write: Callable[[Path], object]) -> None:
        if any(s.path == path for s in self.staged):
            raise KvplanError(
                f"{shown} is written twice by one command; give each output its own file"
            )
        existed = path.exists()
        tmp = _filled(path, shown, write)
        backup = None
        if existed:  # a hard link to the old file, so a failed commit can put it back
            try:
                backup = _new_temporary(path, link_to=path)
            except OSError:  # a file system without hard links: the old file cannot come back
                backup = None
            except BaseException:
                _discard(tmp)
                raise
        self.staged.append(_Staged(tmp, path, shown, backup, existed))

    def commit(self) -> None:
        done: list[_Staged] = []
        try:
            for staged in self.staged:
                done.append(staged)  # before the rename: a signal just after it undoes it too
                os.replace(staged.tmp, staged.path)
                _TEMPORARY.pop(staged.tmp, None)
        except BaseException as exc:
            self._undo(done)
            self.discard()
            if isinstance(exc, OSError):
                raise KvplanError(f"cannot write {done[-1].shown}: {_os_message(exc)}") from None
            raise
        for staged in self.staged:
            if staged.backup is not None:
                _discard(staged.backup)
        for stream, text in self.after:
            if stream == "stdout":
                write_stdout(text)
            else:
                print(text, file=sys.stderr)

    @staticmethod
    def _undo(done: list[_Staged]) -> None:
        """The files already renamed into place: new ones removed, replaced ones put back."""
        for staged in reversed(done):
            try:
                if staged.backup is not None:
                    os.replace(staged.backup, staged.path)
                    _TEMPORARY.pop(staged.backup, None)
                elif not staged.existed:
                    staged.path.unlink(missing_ok=True)
            except OSError:
                pass

    def discard(self) -> None:
        for staged in self.staged:
            _discard(staged.tmp)
            if staged.backup is not None:
                _discard(staged.backup)


_BATCH: _Batch | None = None


class all_or_nothing:  # noqa: N801 (used as a function: `with all_or_nothing():`)
    """Every output written inside the block (files, and what goes to standard output) lands
    when the block ends without an error, or none of it does: the files are complete temporary
    files until then, renamed together at the end; on any failure, or a signal, those renamed so
    far are removed again (a file they replaced put back where the file system has hard links).
    Nested blocks are part of the outermost one."""

    def __enter__(self) -> None:
        global _BATCH
        self.outer = _BATCH is not None
        if not self.outer:
            _BATCH = _Batch()

    def __exit__(self, kind, exc, traceback) -> None:
        global _BATCH
        if self.outer:
            return
        batch, _BATCH = _BATCH, None
        assert batch is not None, "__enter__ of the outermost block made it"
        if kind is None:
            batch.commit()
        else:
            batch.discard()


def after_renames(stream: str, text: str) -> bool:
    """Queue `text` for standard output or error ("stdout" | "stderr") after the block's renames;
    False outside a block."""
    if _BATCH is None:
        return False
    _BATCH.after.append((stream, text))
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
