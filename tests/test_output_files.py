"""Output files: only regular files are written (a symbolic link's target replaced atomically, a
device, FIFO or socket refused), a file kvplan chose is never overwritten silently, and two outputs
of one command never land in one file. Every check happens before any work is done.

No test here writes to /dev or to any special file outside pytest's tmp_path: FIFOs and sockets
are made under tmp_path; a device node is faked (os.stat answering S_IFCHR for a path that does not
exist), so nothing could be written to a real device even if the check were missing."""

from __future__ import annotations

import os
import socket
import stat
import sys
import types

import pytest

from kvplan import atomic
from kvplan.present import output

from helpers import one_line_error, run_cli


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- what is not a regular file ---------------------------------------------------------------
def test_a_fifo_is_refused_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    code, _, err = run_cli("report", "llama-3.1-8b", "--ctx", "8k", "-o", str(fifo))
    one_line_error(code, err)
    assert "FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.txt"]  # no charts drawn beside it


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.md"
    if len(str(path)) > 100:
        pytest.skip("tmp_path too long for a unix socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(path))
        one_line_error(code, err)
        assert "socket" in err and stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        sock.close()


@pytest.mark.parametrize("mode", [stat.S_IFCHR | 0o666, stat.S_IFBLK | 0o660])
def test_a_device_node_is_refused(tmp_path, monkeypatch, mode):
    """`--out /dev/full` replaced the device with a regular file. The node is faked: os.stat
    answers "device" for a path under tmp_path that does not exist; the writer every command
    uses is called directly (the CLI's own option parsing also stats the path)."""
    from kvplan.errors import KvplanError

    target = tmp_path / "full"
    real_stat = os.stat

    def fake_stat(path, *args, **kwargs):
        if os.fspath(path) == str(target):
            return os.stat_result((mode, 0, 0, 1, 0, 0, 0, 0, 0, 0))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", fake_stat)
    with pytest.raises(KvplanError, match="is a device, not a regular file"):
        output.write_text("text", target, "--out")
    with pytest.raises(KvplanError, match="is a device"):
        atomic.check_outputs({"--json": target})
    monkeypatch.undo()
    assert not target.exists() and leftovers(tmp_path) == []


def test_special_kinds_by_mode():
    assert atomic._special_kind(stat.S_IFCHR | 0o666) == "a device"
    assert atomic._special_kind(stat.S_IFBLK | 0o660) == "a device"
    assert atomic._special_kind(stat.S_IFIFO | 0o644) == "a FIFO (named pipe)"
    assert atomic._special_kind(stat.S_IFSOCK | 0o755) == "a socket"
    assert atomic._special_kind(stat.S_IFREG | 0o644) is None
    assert atomic._special_kind(stat.S_IFDIR | 0o755) is None


# ---- symbolic links ---------------------------------------------------------------------------
def test_a_link_is_followed_and_its_target_replaced_atomically(tmp_path):
    real_dir, link_dir = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    link_dir.mkdir()
    target = real_dir / "plan.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = link_dir / "link.json"
    link.symlink_to(os.path.relpath(target, link_dir))
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(target, link_dir)
    assert target.read_text().startswith("{") and '"model"' in target.read_text()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640  # the target's mode kept
    assert sorted(p.name for p in link_dir.iterdir()) == ["link.json"]
    assert sorted(p.name for p in real_dir.iterdir()) == ["plan.json"]  # no temporary left


def test_a_dangling_link_writes_the_file_it_names(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and (tmp_path / "made.json").read_text().startswith("{")


def test_a_link_into_a_missing_folder_is_one_line(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "gone" / "x.json")
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(link))
    one_line_error(code, err)
    assert "gone" in err and "does not exist" in err


def test_a_link_to_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.md"
    link.symlink_to(fifo)
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(link))
    one_line_error(code, err)
    assert "FIFO" in err and link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_a_link_loop_is_one_line(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(a))
    one_line_error(code, err)
    assert a.is_symlink() and b.is_symlink()


# ---- explore's default page -------------------------------------------------------------------
def test_explore_never_overwrites_its_default_page_silently(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "kvcache.html"
    page.write_text("my own page")
    code, _, err = run_cli("explore", "llama-3.1-8b", "--gpu", "h100")
    one_line_error(code, err)
    assert "--force" in err and "--out" in err
    assert page.read_text() == "my own page"
    code, _, err = run_cli("explore", "llama-3.1-8b", "--gpu", "h100", "--force")
    assert code == 0, err
    assert page.read_text().startswith("<!doctype html>")
    page.write_text("my own page")
    code, _, err = run_cli("explore", "llama-3.1-8b", "--gpu", "h100", "--out", "kvcache.html")
    assert code == 0, err  # named on the command line: the user asked for it
    assert page.read_text().startswith("<!doctype html>")
    assert leftovers(tmp_path) == []


# ---- two outputs on one file ------------------------------------------------------------------
@pytest.fixture
def no_simulation(monkeypatch):
    """The simulation must never start: the check comes first."""
    import kvplan.plans.simulate as plans

    def refuse(*args, **kwargs):
        raise AssertionError("simulated before checking the output files")

    monkeypatch.setattr(plans, "simulate", refuse)


@pytest.mark.parametrize(
    "first,second,name_a,name_b",
    [
        ("--plot", "--timeline", "same.png", "same.png"),
        ("--out", "--plot", "o.svg", "o.svg"),
        ("--out", "--timeline", "same.svg", "./same.svg"),
        ("--plot", "--timeline", "a.png", "link.png"),  # link.png -> a.png
    ],
)
def test_simulate_refuses_two_outputs_on_one_file(
    tmp_path, monkeypatch, no_simulation, first, second, name_a, name_b
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.png").symlink_to("a.png")
    argv = ["simulate", "qwen3-8b", "--num-prompts", "20", first, name_a, second, name_b]
    code, _, err = run_cli(*argv)
    one_line_error(code, err)
    assert first in err and second in err and "same file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.png"]


def test_simulate_checks_its_files_before_simulating(tmp_path, no_simulation):
    code, _, err = run_cli(
        "simulate", "qwen3-8b", "--num-prompts", "20", "--plot", str(tmp_path / "no" / "x.png")
    )
    one_line_error(code, err)
    assert "does not exist" in err


# ---- measure: every output checked before measuring --------------------------------------------
@pytest.fixture
def no_measuring(monkeypatch):
    """Stand-ins for the measuring modules (no torch imported, nothing timed): reaching them is a
    failure, since every output must be checked first."""

    def refuse(*args, **kwargs):
        raise AssertionError("measured before checking the output files")

    run = types.ModuleType("kvplan.measure.run")
    run.MeasureRequest = lambda **kwargs: kwargs
    run.measure = refuse
    distributed = types.ModuleType("kvplan.measure.distributed")
    distributed.DEFAULT_TOLERANCE = 0.25
    distributed.DistributedRequest = lambda **kwargs: kwargs
    distributed.run_distributed = refuse
    monkeypatch.setitem(sys.modules, "kvplan.measure.run", run)
    monkeypatch.setitem(sys.modules, "kvplan.measure.distributed", distributed)


@pytest.mark.parametrize("extra", [[], ["--distributed"]])
@pytest.mark.parametrize(
    "option",
    ["--json", "--junit-xml", "--save-profile"],
)
def test_measure_checks_every_output_before_measuring(tmp_path, no_measuring, option, extra):
    target = tmp_path / "nonexistent" / "x.xml"
    code, _, err = run_cli("measure", "--quick", *extra, option, str(target))
    one_line_error(code, err)
    assert option in err and "does not exist" in err


def test_measure_refuses_a_fifo_and_two_outputs_on_one_file(tmp_path, no_measuring):
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    code, _, err = run_cli("measure", "--quick", "--junit-xml", str(fifo))
    one_line_error(code, err)
    assert "FIFO" in err
    same = str(tmp_path / "same.json")
    code, _, err = run_cli("measure", "--quick", "--json", same, "--junit-xml", same)
    one_line_error(code, err)
    assert "--json" in err and "--junit-xml" in err and "same file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.xml"]


def test_check_outputs_skips_standard_output_and_allows_distinct_files(tmp_path):
    atomic.check_outputs({"--out": None, "--json": "-", "--plot": tmp_path / "a.png"})
    atomic.check_outputs({"--plot": tmp_path / "a.png", "--timeline": tmp_path / "b.png"})
