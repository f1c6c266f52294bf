"""Hostile inputs, fifth round: injection into what kvplan writes. Names that came from an input
(a model folder, a GGUF's general.name, a GPU profile's and a link's name, a file's contents
quoted in an error) must stay words in every output: no HTML a Markdown renderer passes to a
browser, no escape sequence a terminal obeys, no CSV cell a spreadsheet runs as a formula.
Each renderer has one rule (kvplan.present.escape); these tests feed it every kind of input."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest

from kvplan.present.escape import csv_cell, md_text, shell_word, terminal_text, yaml_string
from kvplan.present.render import render
from kvplan.present.terminal import render_rich
from kvplan.present.tty import Terminal
from kvplan.present.view import Column, Fact, Table, View

from gguf_fixtures import convert, tensors_for, write_gguf
from helpers import llama_like, run_cli

markdown_it = pytest.importorskip("markdown_it")
footnote = pytest.importorskip("mdit_py_plugins.footnote")

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
FORMULA = "=cmd|' /C calc'!A0"
# an OSC window title, a screen clear, a C1 CSI, a bidi override, a BEL and a NUL
TERMINAL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\x00"
HOSTILE = f"{TERMINAL}{IMG}{SCRIPT}[x](javascript:alert(1))`code`*b*_i_|&amp;"
# what a terminal may see: kvplan's own colours (SGR) and nothing else
SGR = re.compile(r"\x1b\[[0-9;]*m")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069]")


def to_html(text: str) -> str:
    parser = markdown_it.MarkdownIt("commonmark").enable("table").use(footnote.footnote_plugin)
    return parser.render(text)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data) -> None:
        self.text.append(data)


def assert_inert_markdown(markdown: str, *needles: str) -> None:
    """The Markdown, rendered as a CommonMark page would be, holds no tag or attribute from an
    input (only kvplan's own: tables, footnotes, its chart images), and the input's words are
    there as text."""
    parser = _Tags()
    parser.feed(to_html(markdown))
    for tag, attrs in parser.tags:
        assert tag not in ("script", "iframe", "object", "embed", "style", "svg"), tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "img":
            assert attrs["src"].endswith(".png") and "<" not in attrs["src"], attrs
        if tag == "a":
            assert attrs["href"].startswith("#"), attrs  # footnote links only
    text = "".join(parser.text)
    for needle in needles:
        assert needle in text, (needle, text[:2000])


def assert_inert_terminal(text: str) -> None:
    """No control character but newlines, and no escape sequence but kvplan's own colours."""
    assert CONTROL.sub("", SGR.sub("", text)) == SGR.sub("", text), repr(text[:500])


def one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, repr(err)
    assert_inert_terminal(err)


# ---- hostile inputs ------------------------------------------------------------------------------
@pytest.fixture
def evil_gguf(tmp_path):
    arch, keys = convert(llama_like())
    keys["general.name"] = HOSTILE
    path = tmp_path / "evil.gguf"
    write_gguf(path, arch, keys, tensors_for(arch, keys))
    return str(path)


@pytest.fixture
def evil_folder(tmp_path):
    folder = tmp_path / "<script>alert(1)<img src=x onerror=alert(1)>"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like()))
    return str(folder)


def _gpu(tmp_path, name: str, link: str = "NVLink 4", stem: str = "gpu") -> str:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(
        f"name: {json.dumps(name)}\n"
        "peak_flop_per_s: {bf16: 989e+12}\n"
        "memory_bytes: 80e+9\n"
        "memory_bandwidth_bytes_per_s: 3.35e+12\n"
        f"interconnect: {{name: {json.dumps(link)}, bandwidth_bytes_per_s: 900e+9}}\n"
        "gpus_per_node: 8\n"
        f"network: {{name: {json.dumps(link)}, bandwidth_bytes_per_s: 100e+9}}\n"
    )
    return str(path)


@pytest.fixture
def formula_gpu(tmp_path):
    return _gpu(tmp_path, FORMULA, stem="formula")


@pytest.fixture
def html_gpu(tmp_path):
    return _gpu(tmp_path, f"{IMG} GPU", link=f"{SCRIPT} link", stem="html")


# ---- Markdown: kvplan report and --format markdown -------------------------------------------------
def test_report_markdown_holds_no_html_from_folder_gpu_or_link_names(
    evil_folder, html_gpu, formula_gpu
):
    code, out, err = run_cli(
        "report", evil_folder, "--gpu", html_gpu, "--gpu", formula_gpu, "--ctx", "8k,32k"
    )
    assert code == 0, err
    assert re.search(r"(?<!\\)<(script|img)", out) is None  # escaped in the source too
    assert_inert_markdown(out, "<script>alert(1)<img", IMG + " GPU", SCRIPT + " link", FORMULA)


def test_report_markdown_holds_no_html_or_escape_from_a_gguf_name(evil_gguf):
    code, out, err = run_cli("report", evil_gguf, "--ctx", "8k")
    assert code == 0, err
    shown = "\\x1b]0;pwned\\x07\\x1b[2J"  # shown, not sent
    assert_inert_markdown(out, IMG, SCRIPT, "[x](javascript:alert(1))", "`code`*b*_i_|&amp;", shown)
    assert_inert_terminal(out)  # the Markdown may be read in a terminal too


def test_report_chart_links_survive_a_hostile_out_name(tmp_path, evil_folder):
    pytest.importorskip("matplotlib")
    out_path = tmp_path / "plan (1)<img src=x>.md"
    code, _, err = run_cli("report", evil_folder, "--ctx", "8k", "--out", str(out_path))
    assert code == 0, err
    markdown = out_path.read_text()
    assert_inert_markdown(markdown)
    assert "](plan%20%281%29%3Cimg%20src%3Dx%3E-roofline.png)" in markdown


def test_report_charts_draw_a_name_with_dollars(tmp_path):
    """matplotlib parses `$...$` as mathtext: an unknown symbol in a name failed the chart."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / "m$\\foo{$x"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like()))
    code, _, err = run_cli("report", str(folder), "--ctx", "8k", "--out", str(tmp_path / "r.md"))
    assert code == 0, err
    assert (tmp_path / "r-roofline.png").stat().st_size > 0


@pytest.mark.parametrize("command", [["size"], ["capacity", "--gpu", "HTML_GPU"]])
def test_markdown_format_holds_no_html(evil_gguf, html_gpu, command):
    argv = [html_gpu if a == "HTML_GPU" else a for a in command]
    code, out, err = run_cli(argv[0], evil_gguf, *argv[1:], "--format", "markdown")
    assert code == 0, err
    assert_inert_markdown(out, IMG, SCRIPT)
    assert_inert_terminal(out)


# ---- terminals: the plain table, rich, standard error ------------------------------------------
def test_gguf_name_reaches_the_plain_table_escaped(evil_gguf):
    code, out, err = run_cli("size", evil_gguf)
    assert code == 0, err
    assert_inert_terminal(out + err)
    assert "\x1b" not in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil\\x00" in out


def test_gguf_name_reaches_the_rich_table_escaped(evil_gguf, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    code, out, err = run_cli("size", evil_gguf)
    assert code == 0, err
    assert SGR.search(out), "FORCE_COLOR gives rich's colours"
    assert_inert_terminal(out + err)
    assert "\\x1b]0;pwned" in out


def test_csv_notes_on_stderr_are_escaped(tmp_path):
    """Notes quote the config (here a quantization name with an escape sequence); CSV's notes
    go to standard error, a terminal."""
    folder = tmp_path / "quant"
    folder.mkdir()
    config = llama_like(quantization_config={"quant_method": "\x1b[2Jevil\x1b]0;t\x07"})
    (folder / "config.json").write_text(json.dumps(config))
    for fmt in ("csv", "table"):
        code, out, err = run_cli("size", str(folder), "--format", fmt)
        assert code == 0, err
        assert_inert_terminal(out + err)


def test_every_slot_of_a_view_is_escaped_by_every_renderer():
    """Title, facts, table titles, headers, cells (text and derived), notes: each renderer's one
    rule reaches all of them, whichever presenter built the view."""
    view = View(
        title=f"title {HOSTILE}",
        facts=[Fact(f"label {HOSTILE}", f"value {HOSTILE}"), (f"pair {HOSTILE}", HOSTILE)],
        tables=[
            Table(
                f"table {HOSTILE}",
                [
                    Column("name", f"header {HOSTILE}", align="left"),
                    Column("prose", "prose", fmt=lambda v: f"long {v} " * 8, prose=True),
                    Column("n", "n"),
                ],
                [{"name": HOSTILE, "prose": HOSTILE, "n": -12.5}],
            )
        ],
        notes=[f"note {HOSTILE}"],
    )
    for text in (
        render(view, "table"),
        render_rich(view, Terminal(60, rich=True, colour=None)),
        render_rich(view, Terminal(200, rich=True, colour="truecolor")),
        render(view, "markdown"),
        render(view, "csv"),
    ):
        assert_inert_terminal(text)
        assert "pwned" in text
    assert "\x1b" not in render_rich(view, Terminal(60, rich=True, colour=None))
    assert_inert_markdown(render(view, "markdown"), IMG, SCRIPT, "[x](javascript:alert(1))")
    rows = list(csv.reader(io.StringIO(render(view, "csv"))))
    assert rows[1][rows[0].index("n")] == "-12.5"  # a number stays a number


# ---- CSV -----------------------------------------------------------------------------------------
def _formula_cells(text: str) -> list[str]:
    return [
        cell
        for row in csv.reader(io.StringIO(text))
        for cell in row
        if cell.lstrip(" ")[:1] in ("=", "+", "-", "@", "\t", "\r")
        and not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", cell.strip())
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["capacity", "llama-3.1-8b", "--gpu", "FORMULA_GPU", "--format", "csv"],
        ["capacity", "llama-3.1-8b", "--gpu", "FORMULA_GPU", "--gpu", "h100", "--format", "csv"],
        ["roofline", "llama-3.1-8b", "--gpu", "FORMULA_GPU", "--format", "csv"],
        ["gpus", "--format", "csv"],
    ],
)
def test_csv_cells_from_a_gpu_name_are_not_formulas(formula_gpu, argv):
    argv = [formula_gpu if a == "FORMULA_GPU" else a for a in argv]
    code, out, err = run_cli(*argv)
    assert code == 0, err
    assert _formula_cells(out) == []
    if "FORMULA_GPU" in argv or formula_gpu in argv:
        assert "'" + FORMULA in out or FORMULA not in out


@pytest.mark.parametrize(
    "value,cell",
    [
        ("=1+2", "'=1+2"),
        ("+cmd", "'+cmd"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("  =1", "'  =1"),
        ("\t=1", "\\x09=1"),  # tab and CR are shown as escapes: no longer a formula
        ("\r=1", "\\x0d=1"),
        ("-12.5", "-12.5"),  # numbers, as text or not, stay numbers
        ("+3", "+3"),
        ("-1e+12", "-1e+12"),
        (-12.5, -12.5),
        (7, 7),
        ("H100 SXM", "H100 SXM"),
        ("", ""),
    ],
)
def test_csv_cell_rule(value, cell):
    assert csv_cell(value) == cell


# ---- the escaping rules themselves -------------------------------------------------------------
def test_terminal_text_shows_every_control_character():
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E, 0x2066, 0x200F, 0xFEFF]:
        shown = terminal_text(f"a{chr(code)}b")
        assert CONTROL.search(shown) is None and "\ufeff" not in shown, hex(code)
        assert shown.startswith("a\\") and shown.endswith("b")
    assert terminal_text("H100 SXM × 8 — 4.5 GiB") == "H100 SXM × 8 — 4.5 GiB"


def test_md_text_keeps_words_readable():
    rendered = to_html(f"| a |\n|---|\n| {md_text(HOSTILE)} |\n")
    assert "<td>" in rendered and "<img" not in rendered and "<script" not in rendered
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered


# ---- error messages quoting a file -------------------------------------------------------------
def test_gguf_error_quoting_the_file_is_one_inert_line(tmp_path):
    path = tmp_path / "arch.gguf"
    _, keys = convert(llama_like())
    write_gguf(path, "\x1b[2J\x1b]0;t\x07<b>arch", keys, [("t\x1b[31m", (4,), "F32")])
    code, _, err = run_cli("size", str(path))
    one_line_error(code, err)
    assert "\\x1b[2J" in err


def test_gguf_error_in_a_hostile_file_name_is_one_inert_line(tmp_path):
    path = tmp_path / "\x1b]0;t\x07\x1b[2Jx.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 8)
    code, _, err = run_cli("size", str(path))
    one_line_error(code, err)


def _safetensors(path, header: dict) -> None:
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body)


def test_safetensors_error_quoting_a_tensor_name_is_one_inert_line(tmp_path):
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like()))
    name = "model.\x1b]0;pwned\x07\x1b[2J\u202eweight"
    _safetensors(folder / "model.safetensors", {name: {"dtype": "\x1b[5mX9", "shape": [4]}})
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err)
    assert "pwned" in err


def test_unknown_model_name_with_escapes_is_one_inert_line():
    code, _, err = run_cli("size", "\x1b]0;pwned\x07\x1b[2J\nnext")
    one_line_error(code, err)


def test_usage_error_quoting_an_argument_is_one_inert_line():
    code, _, err = run_cli("size", "llama-3.1-8b", "--bogus\x1b[2J")
    one_line_error(code, err)


# ---- launch commands and manifests (capacity --emit) --------------------------------------------
def test_launch_command_for_a_hostile_folder_is_inert_and_exact(tmp_path, monkeypatch):
    folder = tmp_path / "m\x1b]0;t\x07'$(x)"
    folder.mkdir()  # a length key: without one the engines take 2,048 and refuse the 8k default
    (folder / "config.json").write_text(json.dumps(llama_like(max_position_embeddings=8192)))
    monkeypatch.chdir(tmp_path)
    for target in ("vllm", "vllm-docker", "sglang"):
        code, out, err = run_cli("capacity", folder.name, "--emit", target)
        assert code == 0, err
        assert_inert_terminal(out + err)
    code, out, _ = run_cli("capacity", folder.name, "--emit", "vllm")
    word = out.split()[2]  # vllm serve WORD
    assert word == "$'./m\\x1b]0;t\\x07\\'$(x)'"
    if shutil.which("bash"):  # bash reads the word back as the folder's name
        echo = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True)
        assert echo.stdout == "./" + folder.name


@pytest.mark.parametrize("text", ["plain", 'it\'s "q" \\', "x\x1b[2Jy", "n\nl\u202e\x85"])
def test_shell_and_yaml_quoting_mean_the_text(text):
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(yaml_string(text)) == text
    assert CONTROL.search(shell_word(text)) is None and CONTROL.search(yaml_string(text)) is None
    if shutil.which("bash"):
        echo = subprocess.run(
            ["bash", "-c", f"printf %s {shell_word(text)}"], capture_output=True, text=True
        )
        assert echo.stdout == text
