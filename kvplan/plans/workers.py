"""Worker processes that never outlive the run that started them.

`kvplan plan` simulates configurations in a pool of forked processes. However the run ends, the
workers end with it:
- an exception in the parent (an error, Ctrl-C, a SIGTERM that kvplan.cli.signals turned into an
  exit) terminates them at once, instead of waiting for their simulations to finish (the pool's
  own `with` block waits);
- the parent killed outright (SIGKILL, a crash) takes them with it: on Linux each worker asks the
  kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), elsewhere a thread in each
  worker watches its parent's PID;
- signals are the parent's to answer: a worker dies on SIGTERM and SIGHUP (Python's defaults,
  not the parent's handlers it inherited by fork) and ignores SIGINT (Ctrl-C reaches the whole
  process group; the parent ends the workers itself);
- in the parent, the pool's own threads start with those signals blocked, so the kernel gives
  them to the main thread: one taken by a helper thread never woke the main thread from its
  untimed wait for results, and the run went on to its end (Python runs handlers only in the
  main thread, and only once it is awake);
- the pool's manager thread has finished when `terminate` returns: once its workers are gone it
  closes its wake-up pipe, and at interpreter exit Python 3.11's concurrent.futures writes to
  that pipe without the lock the close takes (later versions guard both with one lock, CPython
  gh-125451): a close between the check and the write printed `Exception ignored in: <module
  'threading'>` and an `OSError: handle is closed` traceback under the run's one line."""

from __future__ import annotations

import os

from kvplan.processes import die_with_parent

TERMINATE_WAIT_S = 2.0  # a terminated worker that has not exited by then is killed


def _signals():
    import signal

    return {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _start_worker(parent: int) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # forked while the parent blocked them
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _signals())
    die_with_parent(parent)


class worker_pool:  # noqa: N801 (used as a function: `with worker_pool(n) as pool:`)
    """A ProcessPoolExecutor of `workers` forked processes (spawned where fork is missing) that
    ends its workers when the block is left by an exception, and never leaves one behind."""

    def __init__(self, workers: int):
        import concurrent.futures as futures
        import multiprocessing

        context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        self.pool = futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(os.getpid(),),
        )

    def __enter__(self):
        """Start the pool's threads and processes now, with the signals blocked in this thread
        (new threads and forks inherit the mask); a signal that comes meanwhile waits, and is
        answered as soon as they are unblocked."""
        import signal

        mask = getattr(signal, "pthread_sigmask", None)
        try:
            before = mask(signal.SIG_BLOCK, _signals()) if mask else None
            try:
                self.pool.submit(int).result()
            finally:
                if before is not None and mask is not None:  # blocked above
                    mask(signal.SIG_SETMASK, before)
        except BaseException:
            self.terminate()
            raise
        return self.pool

    def __exit__(self, kind, exc, traceback) -> None:
        if kind is None:
            self.pool.shutdown(wait=True)
            return
        self.terminate()

    def terminate(self) -> None:
        """End every worker now: SIGTERM, then SIGKILL for one still there after a moment."""
        import time

        # the executor keeps its processes in _processes ({pid: Process}); Python 3.14's
        # terminate_workers() does the same
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        manager = getattr(self.pool, "_executor_manager_thread", None)  # gone after shutdown()
        for process in processes:
            if process.is_alive():
                process.terminate()
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + TERMINATE_WAIT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(0.5)
        if manager is not None:  # see the module's last point
            manager.join(max(0.5, deadline - time.monotonic()))
