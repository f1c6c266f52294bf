"""The handler a signal meets before the CLI's own (kvplan/_entry.py sets it first thing; the
CLI's kvplan.cli.signals takes over from it, and counts it as a default): one line, exit 128 + the
signal's number. Only the C module `_signal` is used: `import signal` builds its enums first
(5 ms), a window in which a Ctrl-C was still a traceback."""

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads it as True
if TYPE_CHECKING:  # typeshed has no stub for the C module; `signal` re-exports its names
    import signal as _signal
else:
    import _signal

SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
_NAMES = {_signal.SIGTERM: "SIGTERM", _signal.SIGINT: "SIGINT", _signal.SIGHUP: "SIGHUP"}


def stop_early(signum, frame) -> None:
    """A signal before the CLI's own handlers: one line, exit 128 + the signal's number."""
    try:
        os.write(2, f"error: stopped by {_NAMES.get(signum, signum)}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)
