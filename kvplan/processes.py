"""A child process that ends with its parent, for every kind of child kvplan starts (plan's
worker pool, measure's distributed ranks): on Linux the kernel sends it SIGKILL when its parent
dies (prctl PR_SET_PDEATHSIG), elsewhere a thread watches the parent's PID."""

from __future__ import annotations

import os
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """This process ends when `parent`, the process that started it, does."""
    import signal

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            _watch_parent(parent)
    else:
        _watch_parent(parent)
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)


def _watch_parent(parent: int) -> None:
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="kvplan-parent-watch").start()
