"""A signal ends kvplan as an error does: cleanly, promptly, with one line and the shell's code.

Python's default for SIGTERM and SIGHUP is to die on the spot: no `finally` runs, so the worker
processes of `kvplan plan` were left running (adopted by PID 1, holding the caller's pipes) and a
chart being written left its `.name.XXXX.tmp`. Here SIGTERM, SIGHUP and SIGINT raise `Stopped` (a
SystemExit, so nothing that catches Exception swallows it) in the main thread; on its way out
every `finally` runs (the process pool ends its workers, kvplan.atomic removes the
temporary files and the outputs of an unfinished `all_or_nothing()` block) and `kvplan.cli.main`
prints `error: stopped by SIGTERM` and exits 128 + the signal's number (143; SIGINT 130, SIGHUP
129). A second signal during that cleanup is ignored: the cleanup is bounded, and the first
signal's exit stands, through to the end of the process (the handlers are not put back after a
stop). A signal the caller set to be ignored (nohup, a background job's SIGINT)
stays ignored; the entry point's early handler (kvplan/early_stop.py) counts as a default, so no
signal falls into the gap between the two.

The `signal` module is already loaded by typer and rich, so installing costs no start-up."""

import os
import signal

from kvplan.early_stop import stop_early

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(SystemExit):
    """The run was stopped by `signum`; the exit code is 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def message(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


_stopping = False
_stopped_by: int | None = None  # the signal that stopped this run


def stopping() -> bool:
    """Whether a signal has stopped this run (its handlers then stay as they are to the end)."""
    return _stopping


def stopped() -> "Stopped | None":
    """The stop to report, when a signal has stopped this run: an error that surfaces after it
    (an import the signal cut short, then retried by a cleanup) is its consequence, not the
    outcome."""
    return Stopped(_stopped_by) if _stopping and _stopped_by is not None else None


_arrivals: int | None = None  # read end of the wakeup pipe: signal numbers in arrival order


def _first_arrived(signum: int) -> int:
    """The first of the signals that arrived. Two that come while the main thread is in one long
    C call run their Python handlers together, in signal-number order (SIGHUP before SIGTERM),
    not in the order they came; the interpreter's wakeup fd has them in that order."""
    if _arrivals is None:
        return signum
    try:
        arrived = os.read(_arrivals, 4096)
    except OSError:  # nothing there (another wakeup fd took over): the handler's own
        return signum
    return next((number for number in arrived if number in SIGNALS), signum)


def _stop(signum, frame) -> None:
    global _stopping
    if _stopping:  # already on the way out: let the cleanup finish
        return
    global _stopped_by
    _stopping = True
    _stopped_by = _first_arrived(signum)
    raise Stopped(_stopped_by)


class handled:  # noqa: N801 (used as a function: `with handled():`)
    """Inside the block, SIGTERM, SIGINT and SIGHUP raise `Stopped`, unless the caller ignores
    them (nohup, a background job's SIGINT); the handlers before it come back at its end, unless a
    signal stopped the run (then they stay until the process ends) (main()
    also runs inside test suites and other programs). Only the main thread can set handlers:
    elsewhere the block changes nothing."""

    def __enter__(self) -> None:
        global _stopping, _stopped_by
        _stopping, _stopped_by = False, None
        self.previous = {}
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            if current is default or current is stop_early:
                try:
                    signal.signal(signum, _stop)
                except ValueError:  # not the main thread
                    return
                self.previous[signum] = current
        if self.previous:
            self._record_arrivals()

    def _record_arrivals(self) -> None:
        global _arrivals
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self.pipe = (read, write)
        self.wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        _arrivals = read

    def _stop_recording(self) -> None:
        global _arrivals
        if not hasattr(self, "pipe"):
            return
        signal.set_wakeup_fd(self.wakeup)
        _arrivals = None
        for fd in self.pipe:
            os.close(fd)
        del self.pipe

    def __exit__(self, kind, exc, traceback) -> None:
        self._stop_recording()
        if _stopping:
            # on the way out on a signal: a second one stays ignored until the process ends (the
            # interpreter's shutdown still joins the worker pool's threads and runs the atexit
            # sweep of temporary files; restored, the default action would kill it there or
            # end it by SIGINT instead of the first signal's exit). SIG_IGN, not our handler:
            # the interpreter's last step puts a Python handler back to the default action
            for signum in self.previous:
                signal.signal(signum, signal.SIG_IGN)
            return
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
