"""Terminal output a person can read at 80 columns: every command with a table is run in a
pseudo-terminal (COLUMNS=80, TERM=xterm-256color) and no line may be wider than the terminal, nor
a table's header be broken into interleaved lines; verdicts are coloured; NO_COLOR, TERM=dumb and
pipes get no escape code, and pipes never import rich (the start-up budget)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RULE = re.compile(r"^\s*─+\s*$")
# a child that says nothing this long is hung; generous, so a loaded machine (measure --quick
# shares two cores with other jobs in CI) is not mistaken for a hang
HANG_S = 300

# argv, then the first column's header (its first word) of each table, in order
COMMANDS = [
    (
        ["size", "gemma-3-27b", "--ctx", "8k,128k", "--kv-dtype", "auto,fp8", "--breakdown"],
        ["context", "context"],
    ),
    (["capacity", "gemma-3-27b", "--gpu", "h200", "--mean-len", "4k"], ["scenario"]),
    (["roofline", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "8k,128k"], ["context"]),
    (["roofline", "--gpu", "mi300x"], ["dtype"]),
    (
        ["engine", "gemma-3-27b", "--engine", "vllm", "--kv-cache-memory", "19.53GiB"],
        ["what", "group"],
    ),
    (["engine", "llama-3.1-8b", "--engine", "sglang"], ["what"]),
    (
        ["engine", "qwen3-30b-a3b", "--engine", "llama.cpp", "--gpu", "rtx-3090", "-c", "32k"],
        ["what", "device", "context", "cache", "weights"],
    ),
    (
        ["whatif", "llama-3.1-70b", "--ctx", "128k", "--batch", "32", "--apply", "fp8"]
        + ["--apply", "window=32k", "--apply", "mqa+gqa=4"],
        ["technique"],
    ),
    (["models"], ["name"]),
    (["gpus"], ["profile"]),
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


def run_tty(argv: list[str], cwd, columns: int = 80, **env: str) -> tuple[int, str, str]:
    """Run kvplan with a pseudo-terminal as standard output: (exit code, output, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvplan", *argv],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=clean_env(COLUMNS=str(columns), **env),
        cwd=cwd,
    )
    os.close(slave)
    chunks = []
    try:
        while select.select([master], [], [], HANG_S)[0]:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=HANG_S)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return code, b"".join(chunks).decode().replace("\r\n", "\n"), err


def display_width(line: str) -> int:
    from rich.cells import cell_len

    return cell_len(ESCAPE.sub("", line))


def table_blocks(text: str) -> list[list[str]]:
    """Each table's header block: the lines above its rule, up to a blank line."""
    lines = [ESCAPE.sub("", line) for line in text.splitlines()]
    blocks = []
    for i, line in enumerate(lines):
        if RULE.match(line):
            start = i
            while start > 0 and lines[start - 1].strip():
                start -= 1
            blocks.append(lines[start:i])
    return blocks


@pytest.mark.parametrize("argv,first_headers", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_fits_80_columns_under_a_terminal(argv, first_headers, tmp_path):
    code, out, err = run_tty(argv, tmp_path)
    assert code == 0, err
    wide = [line for line in out.splitlines() if display_width(line) > 80]
    assert not wide, f"{len(wide)} lines wider than 80 columns: {wide[:2]}"
    blocks = table_blocks(out)
    assert len(blocks) == len(first_headers)
    for block, word in zip(blocks, first_headers, strict=True):
        # the header block is indented under its title, and holds the first header once
        starts = [line for line in block if line.startswith("  ") and line.split()[0] == word]
        assert len(starts) == 1, block
        assert len(block) <= 5, block  # a title and at most four header lines, never a wrapped row


def test_narrow_columns_say_what_is_hidden(tmp_path):
    code, out, err = run_tty(["size", "llama-3.1-8b"], tmp_path, columns=60)
    assert code == 0, err
    plain = ESCAPE.sub("", out)
    # the GB twins of GiB columns go first (the highest priority), named under the table
    assert "hidden at 60 columns: KV/seq (GB), KV batch (GB)" in plain
    assert "(--format csv or json has them)" in plain
    assert "KV/seq" in plain and "(GiB)" in plain and "(GB)  " not in plain
    assert all(display_width(line) <= 60 for line in out.splitlines())


def test_verdicts_are_coloured(tmp_path):
    code, out, _ = run_tty(["capacity", "llama-3.1-8b", "--gpu", "h100"], tmp_path)
    assert code == 0
    fits = next(line for line in out.splitlines() if ESCAPE.sub("", line).split()[:1] == ["fits"])
    assert re.search(r"\x1b\[(?:[0-9;]*;)?32myes", fits), repr(fits)  # green
    code, out, _ = run_tty(["capacity", "llama-3.1-405b", "--gpu", "h100", "--tp", "1"], tmp_path)
    assert code == 1  # fits: NO
    fits = next(line for line in out.splitlines() if ESCAPE.sub("", line).split()[:1] == ["fits"])
    assert re.search(r"\x1b\[(?:[0-9;]*;)?31mNO", fits), repr(fits)  # red


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["NO_COLOR", "dumb"])
def test_no_escape_codes_when_asked(env, tmp_path):
    code, out, err = run_tty(["capacity", "llama-3.1-8b", "--gpu", "h100"], tmp_path, **env)
    assert code == 0, err
    assert "\x1b" not in out
    assert "fits" in out and all(display_width(line) <= 80 for line in out.splitlines())


def test_pipes_get_plain_text_without_rich(tmp_path):
    script = (
        "import sys\n"
        "from kvplan.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('rich imported: %s' % any(m.split('.')[0] == 'rich' for m in sys.modules))\n"
    )
    for argv in (["size", "llama-3.1-8b"], ["capacity", "llama-3.1-8b", "--gpu", "h100"]):
        proc = subprocess.run(
            [sys.executable, "-c", script, *argv],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=tmp_path,
            timeout=HANG_S,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(("KV cache of", "Capacity of"))
        assert "\x1b" not in proc.stdout
        assert proc.stderr.endswith("rich imported: False"), proc.stderr


def test_force_color_into_a_pipe(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", "capacity", "llama-3.1-8b", "--gpu", "h100"],
        capture_output=True,
        text=True,
        env=clean_env(FORCE_COLOR="1", COLUMNS="80"),
        cwd=tmp_path,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" in proc.stdout
    assert all(display_width(line) <= 80 for line in proc.stdout.splitlines())


# ---- the pieces, without a terminal ----------------------------------------------------------
class Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def fileno(self) -> int:
        raise OSError("no file")


@pytest.mark.parametrize(
    "tty,env,want",
    [
        (False, {}, (100, False, None)),
        (False, {"COLUMNS": "120"}, (120, False, None)),
        (False, {"FORCE_COLOR": "1"}, (80, True, "standard")),
        (True, {"COLUMNS": "132", "TERM": "xterm-256color"}, (132, True, "256")),
        (True, {"COLUMNS": "90", "COLORTERM": "truecolor"}, (90, True, "truecolor")),
        (True, {"COLUMNS": "90", "NO_COLOR": "1"}, (90, True, None)),
        (True, {"COLUMNS": "90", "NO_COLOR": ""}, (90, True, "standard")),  # empty: not set
        (True, {"COLUMNS": "90", "TERM": "dumb"}, (90, True, None)),
        (True, {"COLUMNS": "90", "TERM": "dumb", "FORCE_COLOR": "1"}, (90, True, "standard")),
        (True, {"COLUMNS": "90", "NO_COLOR": "1", "FORCE_COLOR": "1"}, (90, True, None)),
        (True, {"COLUMNS": "12"}, (40, True, "standard")),  # too narrow to lay out: 40
        (True, {"COLUMNS": "wide"}, (80, True, "standard")),  # no size known: 80
    ],
)
def test_detect(tty, env, want):
    from kvplan.present.terminal import detect

    assert tuple(detect(Stream(tty), env)) == want


def test_fit_columns_stacks_prose_then_drops_by_priority():
    from kvplan.present.render import fit_columns
    from kvplan.present.view import Column

    columns = [
        Column("a", "a"),  # 5 wide
        Column("b", "b", priority=1),  # 5
        Column("c", "c", priority=2),  # 5
        Column("d", "d", align="left", prose=True),  # 30
        Column("e", "e", priority=2),  # 5
    ]
    cells = [["x" * 5, "x" * 5, "x" * 5, "x" * 30, "x" * 5]]
    # all: 2 + 5*4 + 30 + 2*4 = 60
    assert fit_columns(columns, cells, 60) == ([0, 1, 2, 3, 4], [], [])
    # without the prose column: 2 + 20 + 2*3 = 28
    assert fit_columns(columns, cells, 59) == ([0, 1, 2, 4], [3], [])
    assert fit_columns(columns, cells, 28) == ([0, 1, 2, 4], [3], [])
    # then priority 2, the rightmost first (e), then c, then b: 21, 14, 7
    assert fit_columns(columns, cells, 27) == ([0, 1, 2], [3], [4])
    assert fit_columns(columns, cells, 20) == ([0, 1], [3], [2, 4])
    assert fit_columns(columns, cells, 13) == ([0], [3], [1, 2, 4])
    # a pipe stacks but never drops
    assert fit_columns(columns, cells, 27, drop=False) == ([0, 1, 2, 4], [3], [])
    assert fit_columns(columns, cells, None) == ([0, 1, 2, 3, 4], [], [])


@pytest.mark.slow
def test_measure_fits_80_columns_under_a_terminal(tmp_path):
    pytest.importorskip("torch")
    argv = ["measure", "--quick", "--threads", "2", "--layers", "2"]
    code, out, err = run_tty(argv, tmp_path)
    assert code == 0, err
    assert all(display_width(line) <= 80 for line in out.splitlines())
    titles = [block[0] for block in table_blocks(out)]
    assert len(titles) >= 3 and len(set(titles)) == len(titles)  # profile, points, self-test
    check = next(line for line in out.splitlines() if ESCAPE.sub("", line).split()[:1] == ["check"])
    assert "\x1b[" in check  # passed or FAILED, coloured either way


def test_the_narrow_fast_path_agrees_with_unicodedata():
    """cell_width skips unicodedata (start-up) for ranges with no wide or combining character."""
    import unicodedata

    from kvplan.present.render import _NARROW, cell_width

    for low, high in _NARROW:
        for code in range(low, high):
            ch = chr(code)
            assert not unicodedata.combining(ch), hex(code)
            assert unicodedata.east_asian_width(ch) not in ("W", "F"), hex(code)
    assert cell_width("KV ÷ weights — 1.5×") == 19
    assert cell_width("表") == 2 and cell_width("e\u0301") == 1  # measured by unicodedata


def test_the_answer_column_survives_80_columns():
    # issue 30: at 80 columns the comparison hid $/M tokens and plan its p99 latencies
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.compare import CompareRequest, compare
    from kvplan.plans.plan import PlanRequest, parse_slo, plan
    from kvplan.present.compare import compare_view
    from kvplan.present.plan import plan_view
    from kvplan.present.terminal import render_rich
    from kvplan.present.tty import Terminal
    from kvplan.simulate.workload import WorkloadSpec

    narrow = Terminal(width=80, rich=True, colour=None)
    gpus = [load_profile(g) for g in ("h100", "h200", "b200")]
    r = compare(load_model("llama-3.1-70b"), gpus, CompareRequest(context_len=32768, users=200))
    out = render_rich(compare_view(r), narrow)
    assert all(display_width(line) <= 80 for line in out.splitlines())
    header = next(line for line in out.splitlines() if "GPU" in line and "deployment" in line)
    assert header.rstrip().endswith("tokens")  # "$/M" above, "tokens" on the header's last line
    assert "hidden at 80 columns" in out and "$/M tokens" not in out.split("hidden at")[1]
    p = plan(
        load_model("llama-3.1-8b"),
        gpus[:2],
        PlanRequest(
            rate=4,
            slos=(parse_slo("ttft_p99=2s"), parse_slo("tpot_p99=50ms")),
            workload=WorkloadSpec(num_prompts=20, input_len=512, output_len=64),
            tps=(1, 2),
            kv_cache_dtypes=("auto",),
            max_num_seqs=(64,),
            max_num_batched_tokens=(2048,),
            jobs=1,
        ),
    )
    out = render_rich(plan_view(p), narrow)
    assert all(display_width(line) <= 80 for line in out.splitlines())
    hidden = out.split("hidden at 80 columns:")[1].splitlines()[0]
    for header in ("TTFT p99", "TPOT p99", "$/M tokens"):
        assert header not in hidden
    assert "TTFT p99" in out and "TPOT p99" in out


def test_answer_columns_are_kept_even_when_nothing_else_fits():
    from kvplan.present.render import fit_columns
    from kvplan.present.view import Column

    columns = [
        Column("a", "name"),
        Column("b", "b"),
        Column("c", "c"),
        Column("d", "d", answer=True),
    ]
    cells = [["x" * 20, "y" * 20, "z" * 20, "w" * 20]]
    fit = fit_columns(columns, cells, 50)
    assert 0 in fit.shown and 3 in fit.shown and 3 not in fit.dropped
