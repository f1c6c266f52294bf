"""The one exception type users see: a clear, one-line message and exit code 2."""


class KvplanError(Exception):
    """Bad input or an unmet precondition. The CLI prints `error: <message>` and exits 2."""
