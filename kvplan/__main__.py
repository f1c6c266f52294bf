TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads it as True
if TYPE_CHECKING:  # typeshed has no stub for the C module; `signal` re-exports its names
    import signal as _signal
else:
    import _signal

# first: hold SIGTERM, SIGINT and SIGHUP while the entry point loads; main() sets its handlers and
# lets them through (see kvplan/_entry.py)
_held = None
if hasattr(_signal, "pthread_sigmask"):
    _held = _signal.pthread_sigmask(
        _signal.SIG_BLOCK, {_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP}
    )

from kvplan._entry import main  # noqa: E402

main(mask=_held)
