"""The `kvplan` command's entry point: a signal is one line from the first instruction.

`kvplan.cli.main` turns SIGTERM, SIGINT and SIGHUP into a clean stop (kvplan/cli/signals.py), but
only once it runs; importing the CLI (typer, rich) takes tens of milliseconds before that, and a
Ctrl-C there printed a KeyboardInterrupt traceback, a SIGTERM killed the process silently. Until
the import is done nothing has been written and no child started, so a signal then ends the
process at once with the same line and exit code as a stop. A signal the caller ignores (nohup)
stays ignored; the handlers before this one come back before `main` installs its own."""

import os
import signal
import sys

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop_early(signum, frame) -> None:
    try:
        os.write(2, f"error: stopped by {signal.Signals(signum).name}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


def main() -> None:
    previous = {}
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is not signal.SIG_IGN:
            previous[signum] = current
            signal.signal(signum, _stop_early)
    from kvplan.cli import main as cli_main

    for signum, handler in previous.items():
        signal.signal(signum, handler)
    cli_main(sys.argv[1:])
