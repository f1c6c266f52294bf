"""Hostile inputs, fifth round, the round after the fixes: what an independent campaign on the
new code paths (escaping, the resolution order, engine length limits, bounds, signals, output
files) still found. Each case ends in a correct answer or one `error:` line with exit 2, never a
traceback, an internal error or a silent wrong number."""

from __future__ import annotations

import os
import re

import pytest

from helpers import default_signals, one_line_error, run_cli


# ---- `~user` naming no home folder -------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (("size", "~kvplan-no-such-user/config.json"), "no such config file"),
        (("size", "~kvplan-no-such-user"), "no such config file"),
        (("size", "~kvplan-no-such-user/m.gguf"), "no such GGUF file"),
        (("capacity", "llama-3.1-8b", "--gpu", "~kvplan-no-such-user/g.yaml"), "no such profile"),
        (("capacity", "llama-3.1-8b", "--gpu", "~kvplan-no-such-user"), "unknown GPU"),
    ],
)
def test_a_tilde_of_an_unknown_user_is_no_such_file(argv, needle):
    # Path.expanduser raises RuntimeError for ~user with no such user: it was an internal error
    code, _, err = run_cli(*argv)
    one_line_error(code, err, needle)


# ---- a second signal while kvplan exits on the first -------------------------------------------
SECOND_SIGNAL_AT_EXIT = """
import atexit, os, signal, sys, threading, time
from kvplan.cli import main

def second():  # registered after the sweep of temporary files: runs before it, at exit
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)  # the handler runs here, at the next bytecode
atexit.register(second)
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
main(sys.argv[1:])
"""


def test_a_second_signal_during_the_exit_of_a_stopped_run_is_ignored(tmp_path):
    # the handlers were put back as the run left main(): a SIGINT while the interpreter shut
    # down (the pool's threads joined, the atexit sweep) ended it by SIGINT, or with a traceback
    import subprocess
    import sys

    argv = ["plan", "llama-3.1-8b", "--rate", "5", "--slo", "ttft_p99=1s", "--jobs", "2"]
    argv += ["--num-prompts", "2000"]
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL_AT_EXIT, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 143, (proc.returncode, proc.stderr)
    assert proc.stderr == "error: stopped by SIGTERM\n", proc.stderr


HANDLERS_AFTER_A_STOP = """
import signal
from kvplan.cli import signals
try:
    with signals.handled():
        signal.raise_signal(signal.SIGTERM)
except signals.Stopped as exc:
    print(exc.code, [signal.getsignal(s) == signal.SIG_IGN for s in signals.SIGNALS])
"""


def test_after_a_stop_the_signals_are_ignored_to_the_end_of_the_process():
    # the interpreter's last step puts a Python handler back to the default action: a second
    # signal there killed the stopped run (exit -1 after 'error: stopped by SIGTERM')
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", HANDLERS_AFTER_A_STOP], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout == "143 [True, True, True]\n", (proc.stdout, proc.stderr)


def test_a_report_stopped_twice_exits_as_the_first_signal_says(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    argv = ["report", "llama-3.1-8b", "--out", str(tmp_path / "r.md")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvplan", *argv],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=default_signals,
    )
    time.sleep(0.8)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.01)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the first signal: nothing to test
        return
    assert proc.returncode == 143, (proc.returncode, err)
    assert err == "error: stopped by SIGTERM\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["report", "llama-3.1-8b"], ["explore", "llama-3.1-8b"]])
def test_an_output_path_that_names_no_file_is_refused(tmp_path, monkeypatch, command):
    # `--out ' '` wrote a file named " " and printed a 'wrote' line that looked empty
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*command, "--out", " ")
    assert code == 2 and out == "", err
    assert err == "error: --out ' ' names no file; give a file name\n", err
    assert list(tmp_path.iterdir()) == []


def test_a_path_spelled_as_a_folder_is_refused_before_any_work(tmp_path):
    from kvplan.atomic import check_outputs
    from kvplan.errors import KvplanError

    with pytest.raises(KvplanError, match="ends with '/'"):
        check_outputs({"--out": f"{tmp_path}/r.md/"})
    assert list(tmp_path.iterdir()) == []


def _interrupted_before_kvplan(err: str) -> bool:
    """A KeyboardInterrupt raised before the first line of kvplan ran: in the interpreter's own
    frames (runpy locating `kvplan`, the import lock's callback) or an import hook's (an editable
    install's finder), never in a file of the kvplan package. A frame of kvplan's in the
    traceback is the defect the test is for."""
    import kvplan

    package = os.path.dirname(os.path.abspath(kvplan.__file__)) + os.sep
    frames = re.findall(r'^  File "([^"]+)"', err, flags=re.M)
    return (
        "Traceback (most recent call last):" in err
        and err.rstrip().rstrip(":").endswith("KeyboardInterrupt")
        and bool(frames)
        and not any(os.path.abspath(f).startswith(package) for f in frames if f[0] != "<")
    )


def test_interrupted_before_kvplan_is_told_from_a_traceback_in_kvplan():
    runpy_only = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 189, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 112, in _get_module_details\n'
        "KeyboardInterrupt\n"
    )
    import kvplan

    init = os.path.abspath(kvplan.__file__)
    in_kvplan = runpy_only.replace(
        "KeyboardInterrupt", f'  File "{init}", line 5, in <module>\nKeyboardInterrupt'
    )
    in_a_finder = runpy_only.replace(
        "KeyboardInterrupt",
        '  File "/venv/site-packages/__editable___kvplan_0_1_0_finder.py", line 20\nKeyboardInterrupt',
    )
    assert _interrupted_before_kvplan(in_a_finder)
    import_lock = (
        "Exception ignored in: <function _get_module_lock.<locals>.cb at 0x7f0>\n"
        "Traceback (most recent call last):\n"
        '  File "<frozen importlib._bootstrap>", line 207, in cb\n'
        "KeyboardInterrupt: \n"
    )
    assert _interrupted_before_kvplan(runpy_only)
    assert _interrupted_before_kvplan(import_lock)
    assert not _interrupted_before_kvplan(in_kvplan)
    assert not _interrupted_before_kvplan("error: stopped by SIGINT\n")


@pytest.mark.parametrize(
    "signame",
    [
        "SIGINT",
        # kvplan/__main__.py blocks the three together and early_stop.SIGNALS handles them
        # alike: SIGINT's run (the Ctrl-C the comment below names) covers them by default
        pytest.param("SIGTERM", marks=pytest.mark.slow),
        pytest.param("SIGHUP", marks=pytest.mark.slow),
    ],
)
def test_a_signal_while_the_cli_is_still_importing_is_one_line(tmp_path, signame):
    # a Ctrl-C in the first tens of milliseconds (typer and rich importing, before main() sets
    # its handlers) printed a KeyboardInterrupt traceback; SIGTERM killed it without a word
    import signal
    import subprocess
    import sys
    import time

    signum = getattr(signal, signame)
    seen = set()
    # a loaded machine stretches both the child's start-up and this process's sleep, so fixed
    # delays can all land before kvplan or after it (at load 7 every one of them landed before
    # its handlers): after the fixed ones, fractions of an unsignalled run timed just now, until
    # one has landed inside
    argv = [sys.executable, "-m", "kvplan", "size", "llama-3.1-8b"]
    started = time.monotonic()
    subprocess.run(argv, capture_output=True, cwd=tmp_path, timeout=60, check=True)
    run_s = time.monotonic() - started
    fixed = (0.0, 0.01, 0.02, 0.04, 0.08, 0.15)
    delays = fixed + tuple(run_s * f for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)) * 3
    for index, delay in enumerate(delays):
        if 128 + signum in seen and index >= len(fixed):
            break
        proc = subprocess.Popen(
            argv,
            preexec_fn=default_signals,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        if err.startswith("Fatal Python error: init_"):
            continue  # Python's own start-up (site, std streams) interrupted, before kvplan ran
        if _interrupted_before_kvplan(err):
            continue  # runpy still finding the package: no frame of kvplan's yet, none can help
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err)
        if proc.returncode == 0:  # it had finished: its answer whole
            assert "KV cache of llama-3.1-8b" in out
        elif proc.returncode == -signum:  # before Python itself ran: the kernel's default
            assert err == "", err
        else:
            assert proc.returncode == 128 + signum, (delay, proc.returncode, err)
            assert err == f"error: stopped by {signame}\n", err
        seen.add(proc.returncode)
    assert 128 + signum in seen  # at least one delay landed inside kvplan, not all before or after


def test_the_signals_held_while_the_entry_point_loads_are_let_through_before_the_command(
    monkeypatch,
):
    # `python -m kvplan` holds SIGTERM/SIGINT/SIGHUP while kvplan._entry loads; a mask left
    # blocking would be inherited by every child the command starts (plan's workers, engines)
    import signal

    from kvplan import _entry

    seen = {}

    def fake_cli(argv):
        seen["blocked"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        seen["handler"] = signal.getsignal(signal.SIGTERM)

    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
    try:
        monkeypatch.setattr("kvplan.cli.main", fake_cli)
        _entry.main(mask=before)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert signal.SIGTERM not in seen["blocked"] and signal.SIGHUP not in seen["blocked"]
    assert seen["handler"] is _entry.stop_early
    assert signal.getsignal(signal.SIGTERM) is not _entry.stop_early  # put back on return
