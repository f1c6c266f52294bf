"""Several output files: all of them or none. A full disk on the second file used to leave the
first (`report`'s plan-roofline.png), which then blocked the retry (kvplan never overwrites a chart
the user did not name); now a failure leaves none of the run's files, a failure while renaming
puts a replaced file back, and the retry succeeds. `report`, `simulate` and `measure` write
through one mechanism, kvplan.present.atomic.all_or_nothing.

The full disk is simulated: `open` answers ENOSPC for the Nth temporary file, after a few bytes
(matplotlib, PIL and kvplan's text writes all open through it), so no real disk is filled."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvplan import atomic
from kvplan.errors import KvplanError
from kvplan.present import output

from helpers import run_cli

SIMULATE = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "20"]


class _FullDisk:
    """`open` for writing fails with ENOSPC on the Nth temporary file of `folder`, after a few
    bytes reached it (as a disk that fills mid-file)."""

    def __init__(self, folder: Path, fail_at: int):
        self.folder, self.fail_at, self.count = folder, fail_at, 0
        self.real = builtins.open

    def __call__(self, file, mode="r", *args, **kwargs):
        handle = self.real(file, mode, *args, **kwargs)
        path = Path(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else None
        if path is None or path.parent != self.folder or not path.name.endswith(".tmp"):
            return handle
        if not any(flag in mode for flag in "wax+"):
            return handle
        self.count += 1
        if self.count != self.fail_at:
            return handle
        return _FillsUp(handle)


class _FillsUp:
    def __init__(self, handle):
        self.handle = handle

    def write(self, data):
        self.handle.write(data[:8])
        self.handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


REPORT = ["report", "llama-3.1-8b", "--ctx", "8k"]


@pytest.mark.parametrize(
    "fail_at", [2, pytest.param(3, marks=pytest.mark.slow)], ids=["second-chart", "the-page"]
)
def test_a_full_disk_leaves_no_report_file_and_the_retry_succeeds(tmp_path, monkeypatch, fail_at):
    pytest.importorskip("matplotlib")
    page = tmp_path / "plan.md"
    monkeypatch.setattr(builtins, "open", _FullDisk(tmp_path, fail_at))
    code, out, err = run_cli(*REPORT, "--out", str(page))
    monkeypatch.undo()
    assert code == 2, err
    assert err.startswith("error: cannot write ") and "No space left on device" in err, err
    assert err.count("\n") == 1 and out == ""
    assert _files(tmp_path) == []  # not the first chart, no temporary file
    code, _, err = run_cli(*REPORT, "--out", str(page))  # the retry is not blocked
    assert code == 0, err
    assert _files(tmp_path) == ["plan-capacity.png", "plan-roofline.png", "plan.md"]


@pytest.mark.slow  # a full report written twice
def test_a_full_disk_keeps_the_previous_report(tmp_path, monkeypatch):
    """--force over an earlier report: a failed run leaves the earlier one whole."""
    pytest.importorskip("matplotlib")
    page = tmp_path / "plan.md"
    assert run_cli(*REPORT, "--out", str(page))[0] == 0
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    monkeypatch.setattr(builtins, "open", _FullDisk(tmp_path, 3))
    code, _, err = run_cli(*REPORT, "--ctx", "32k", "--out", str(page), "--force")
    monkeypatch.undo()
    assert code == 2, err
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before


@pytest.mark.parametrize(
    "fail_at", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)]
)
def test_a_full_disk_leaves_no_simulate_output(tmp_path, monkeypatch, fail_at):
    pytest.importorskip("matplotlib")
    files = ["--plot", str(tmp_path / "p.png"), "--timeline", str(tmp_path / "t.svg")]
    files += ["--out", str(tmp_path / "o.json"), "-f", "json"]
    monkeypatch.setattr(builtins, "open", _FullDisk(tmp_path, fail_at))
    code, out, err = run_cli(*SIMULATE, *files)
    monkeypatch.undo()
    assert code == 2 and "No space left on device" in err, err
    assert _files(tmp_path) == [] and out == ""
    code, _, err = run_cli(*SIMULATE, *files)
    assert code == 0, err
    assert _files(tmp_path) == ["o.json", "p.png", "t.svg"]
    assert json.loads((tmp_path / "o.json").read_text())["runs"]


def test_a_full_disk_leaves_no_measure_output(tmp_path, monkeypatch, capsys):
    """measure's --json, --save-profile and --junit-xml, and its table: all of them or none
    (the writer is called with a stand-in result: measuring takes minutes)."""
    pytest.importorskip("torch")  # kvplan.measure.profile reads the probes, which need torch
    from kvplan.cli import common
    from kvplan.cli import measure as measure_cli
    from kvplan.measure import profile

    monkeypatch.setattr(profile, "profile_yaml", lambda *args: "name: measured\n")
    monkeypatch.setattr(common, "render", lambda view, fmt, out=None: "the table\n")
    view = SimpleNamespace(data={"summary": "kvplan measure: ok"})
    result = SimpleNamespace(
        profile=None,
        identity={},
        conditions={"rounds": 3, "dtype": "fp32", "gather_kv": True, "threads": 1},
    )
    paths = [tmp_path / "m.json", tmp_path / "me.yaml", tmp_path / "m.xml"]

    def write():
        measure_cli._write_outputs(view, result, *paths, "table", lambda data: "<testsuites/>\n")

    monkeypatch.setattr(builtins, "open", _FullDisk(tmp_path, 2))
    with pytest.raises(KvplanError, match="No space left on device"):
        write()
    monkeypatch.setattr(builtins, "open", _FullDisk(tmp_path, 0))
    assert _files(tmp_path) == []
    assert capsys.readouterr().out == ""  # no table for a run whose files failed
    write()
    assert _files(tmp_path) == ["m.json", "m.xml", "me.yaml"]
    assert capsys.readouterr().out == "the table\n"


def test_a_failed_rename_puts_the_replaced_file_back(tmp_path, monkeypatch):
    """The renames come last; one failing there (or a signal between two) undoes the others."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old")
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KvplanError, match="cannot write .*b.txt"), atomic.all_or_nothing():
        output.write_text("new", first)
        output.write_text("new", second)
    monkeypatch.undo()
    assert first.read_text() == "old" and _files(tmp_path) == ["a.txt"]
    assert atomic._TEMPORARY == {}
