"""The `kvplan` command's entry point: a signal is one line from the first instruction.

`kvplan.cli.main` turns SIGTERM, SIGINT and SIGHUP into a clean stop (kvplan/cli/signals.py), but
only once it runs; importing the CLI (typer, rich) takes tens of milliseconds before that, and a
Ctrl-C there printed a KeyboardInterrupt traceback, a SIGTERM killed the process silently. Until
the import is done nothing has been written and no child started, so a signal then ends the
process at once with the same line and exit code as a stop. `kvplan.cli.signals.handled` takes
over from this handler (it never hands back to Python's own, which would raise KeyboardInterrupt
in the gap) and the handlers before it come back when the command returns. A signal the caller
ignores (nohup) stays ignored.

Only the C module `_signal` is used: `import signal` builds its enums first (5 ms), a window in
which a Ctrl-C was still a traceback. `kvplan/__init__.py` imports nothing for the same reason.
`python -m kvplan` holds the signals (a signal mask) from the first line of kvplan/__main__.py
until the handlers are set, so what is left there is the interpreter's own start-up and runpy
finding the package, before any line of kvplan runs. The `kvplan` script pip writes imports
this module first (and kvplan/early_stop.py, the handler kvplan.cli.signals knows too); its
window is that import, about a millisecond."""

import sys

from kvplan.early_stop import SIGNALS, stop_early

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads it as True
if TYPE_CHECKING:  # typeshed has no stub for the C module; `signal` re-exports its names
    import signal as _signal
else:
    import _signal


def main(mask: set | None = None) -> None:
    """Run the CLI on sys.argv. `mask`: the signal mask to put back once the handlers are set,
    when the caller held the signals while this module loaded (`python -m kvplan` does); one
    that came meanwhile is delivered then, to the handler."""
    previous = {}
    for signum in SIGNALS:
        current = _signal.getsignal(signum)
        if current != _signal.SIG_IGN:
            previous[signum] = current
            _signal.signal(signum, stop_early)
    if mask is not None:  # before anything starts a child: it would inherit the held signals
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    try:
        from kvplan.cli import main as cli_main

        cli_main(sys.argv[1:])
    finally:
        from kvplan.cli import signals

        if not signals.stopping():  # after a stop a second signal stays ignored to the end
            for signum, handler in previous.items():
                _signal.signal(signum, handler)
