"""Hostile inputs, fifth round, the round after the fixes: what an independent campaign on the
new code paths (escaping, the resolution order, engine length limits, bounds, signals, output
files) still found. Each case ends in a correct answer or one `error:` line with exit 2, never a
traceback, an internal error or a silent wrong number."""

from __future__ import annotations

import pytest

from helpers import run_cli


def one_line_error(code: int, err: str, needle: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err
    assert needle in err, err
    return err


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
        [sys.executable, "-m", "kvplan", *argv], stderr=subprocess.PIPE, text=True, cwd=tmp_path
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
    from kvplan.errors import KvplanError
    from kvplan.present.output import check_outputs

    with pytest.raises(KvplanError, match="ends with '/'"):
        check_outputs({"--out": f"{tmp_path}/r.md/"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_the_cli_is_still_importing_is_one_line(tmp_path, signame):
    # a Ctrl-C in the first tens of milliseconds (typer and rich importing, before main() sets
    # its handlers) printed a KeyboardInterrupt traceback; SIGTERM killed it without a word
    import signal
    import subprocess
    import sys
    import time

    signum = getattr(signal, signame)
    seen = set()
    for delay in (0.0, 0.01, 0.02, 0.04, 0.08, 0.15):
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvplan", "size", "llama-3.1-8b"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        if err.startswith("Fatal Python error: init_import_site"):
            continue  # Python's own start-up interrupted, before any line of kvplan ran
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
