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
