"""Hostile inputs, sixth round: the leftovers of the fifth. An output path spelled as a folder,
a rope factor that shrinks the positions to none, digits outside ASCII, a compressed answer from
the Hub, invisible format characters in names, and odd numbers for the options. Each ends in a
correct answer or one `error:` line with exit 2, never a traceback, an internal error or a
silent wrong number."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from http.server import BaseHTTPRequestHandler

import pytest

from helpers import REPO, llama_like, one_line_error, run_cli, serve_locally


def _config(tmp_path, **overrides) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama_like(max_position_embeddings=4096, **overrides)))
    return str(path)


# ---- 1. an output path ending in '/' -----------------------------------------------------------
# typer's Path conversion dropped the slash before kvplan's check saw it: `--out ./r.md/` wrote a
# file r.md. Every option naming a file kvplan writes now checks the spelling as typed.
@pytest.mark.parametrize(
    "argv, option",
    [
        (("report", "llama-3.1-8b", "--out", "r.md/"), "--out"),
        (("report", "llama-3.1-8b", "--out=r.md/"), "--out"),
        (("report", "llama-3.1-8b", "-o", "r.md/"), "--out"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--plot", "c.png/"), "--plot"),
        (("roofline", "llama-3.1-8b", "--gpu", "h100", "--plot", "c.png/"), "--plot"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--plot", "c.png/"), "--plot"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--timeline", "t.png/"), "--timeline"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--out", "s.json/"), "--out"),
        (("plan", "llama-3.1-8b", "--rate", "1", "--gpu", "h100", "--out", "p.md/"), "--out"),
        (("explore", "llama-3.1-8b", "--out", "k.html/"), "--out"),
        (("measure", "--json", "m.json/"), "--json"),
        (("measure", "--junit-xml", "m.xml/"), "--junit-xml"),
        (("measure", "--save-profile", "g.yaml/"), "--save-profile"),
    ],
)
def test_an_output_path_spelled_as_a_folder_is_refused_as_typed(tmp_path, argv, option):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, _, err = run_cli(*argv)
    finally:
        os.chdir(cwd)
    one_line_error(code, err, f"{option} ")
    assert "ends with '/', a folder's spelling" in err
    assert list(tmp_path.iterdir()) == []  # nothing written, under any name


def test_an_empty_output_path_is_refused(tmp_path):
    code, _, err = run_cli("report", "llama-3.1-8b", "--out", "")
    one_line_error(code, err, "names no file")


def test_an_output_path_as_typed_still_writes(tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run_cli(
        "simulate",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "10",
        "-f",
        "json",
        "-o",
        str(out),
    )
    assert code == 0, err
    assert json.loads(out.read_text())["model"]["name"] == "llama-3.1-8b"


@pytest.mark.slow
def test_a_report_path_as_typed_still_writes(tmp_path):
    out = tmp_path / "r.md"
    code, _, err = run_cli("report", "llama-3.1-8b", "--out", str(out))
    assert code == 0, err
    assert out.read_text().startswith("#")


# ---- 2. a rope scaling factor outside transformers' range --------------------------------------
@pytest.mark.parametrize("factor", [1e-300, 1e-5, 0.5, 0, -1, "4", True])
@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3"])
def test_a_rope_factor_below_one_or_no_number_is_a_range_error(tmp_path, factor, kind):
    # 1e-300 shrank the positions vLLM derives to 0 ("--max-model-len 8,192 is over the 0
    # tokens"); 0, -1 and "4" were silently taken as no factor
    rope = {"rope_type": kind, "factor": factor, "original_max_position_embeddings": 4096}
    path = _config(tmp_path, rope_scaling=rope)
    for argv in (("size", path), ("engine", path, "--engine", "vllm", "--gpu", "h100")):
        code, _, err = run_cli(*argv)
        one_line_error(code, err, "rope_scaling.factor must be a number from 1 up")


def test_a_rope_factor_per_layer_type_names_its_key(tmp_path):
    rope = {"full_attention": {"rope_type": "linear", "factor": 1e-300}}
    code, _, err = run_cli("size", _config(tmp_path, rope_parameters=rope))
    one_line_error(code, err, "rope_parameters.full_attention.factor must be a number from 1")


@pytest.mark.parametrize("factor", [1, 1.0, 8.0, None])
def test_a_rope_factor_of_one_up_or_null_reads(tmp_path, factor):
    path = _config(tmp_path, rope_scaling={"rope_type": "linear", "factor": factor})
    code, _, err = run_cli("size", path)
    assert code == 0, err


# ---- 3. digits outside ASCII -------------------------------------------------------------------
# int() and float() (and a regex's \d) read them as 0-9: `--ctx ١٢٨k` planned 128k tokens
@pytest.mark.parametrize(
    "argv, needle",
    [
        (("size", "llama-3.1-8b", "--ctx", "١٢٨k"), "U+0661 ARABIC-INDIC DIGIT ONE"),
        (("size", "llama-3.1-8b", "--ctx", "１２８k"), "U+FF11 FULLWIDTH DIGIT ONE"),
        (("size", "llama-3.1-8b", "--ctx", "8k,१२८k"), "U+0967 DEVANAGARI DIGIT ONE"),
        (("size", "llama-3.1-8b", "--batch", "١"), "U+0661"),
        (("size", "llama-3.1-8b", "--tp", "２"), "--tp '２'"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--users", "١٢"), "--users"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--gpu-mem-util", "٠.٩"), "U+0660"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--reserve", "２GiB"), "U+FF12"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--price", "h100=٢"), "--price"),
        (("engine", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100", "--tp", "２"), "U+FF12"),
        (("engine", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100", "--max-model-len", "٨k"),
         "U+0668"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--request-rate", "٢"), "--request-rate"),
        (("fit", "llama-3.1-8b", "--gpu", "h100", "--top", "٣"), "--top"),
        (("plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "١"), "--rate"),
        (("plan", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=٢s"),
         "--slo"),
        (("whatif", "llama-3.1-8b", "--gpu", "h100", "--apply", "lowrank=٠.٥"), "--apply"),
    ],
)  # fmt: skip
def test_a_digit_outside_ascii_is_refused_naming_it(argv, needle):
    code, _, err = run_cli(*argv)
    one_line_error(code, err, needle)
    assert "is not an ASCII character; write numbers with the digits 0-9" in err


# ---- 4. a compressed answer from the Hub -------------------------------------------------------
CONFIG = (REPO / "model_configs" / "Llama-3.1-8B.json").read_bytes()


class Hub:
    mode = "gzip"


class GzipHub(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if not self.path.endswith("config.json"):
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        encoding, body = {
            "gzip": ("gzip", gzip.compress(CONFIG)),
            "deflate": ("deflate", zlib.compress(CONFIG)),
            "gzip_unasked": (None, gzip.compress(CONFIG)),  # a .gz served as it is
            "bomb": ("gzip", gzip.compress(b" " * (64 * 2**20))),  # 64 KiB -> 64 MiB
            "cut": ("gzip", gzip.compress(CONFIG)[:200]),
            "junk": ("gzip", b"\x1f\x8bnot gzip at all"),
            "br": ("br", b"\x0b\x02\x80{}\x03"),
        }[Hub.mode]
        self.send_response(200)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def hub():
    yield from serve_locally(GzipHub)


@pytest.fixture
def against(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path / "kv"))
    monkeypatch.setenv("KVPLAN_HUB_TIMEOUT", "5")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path


@pytest.mark.parametrize("mode", ["gzip", "deflate", "gzip_unasked"])
def test_a_compressed_config_from_the_hub_is_decoded(against, mode):
    Hub.mode = mode
    code, out, err = run_cli("size", f"someorg/{mode}", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["name"]
    cached = against / "kv" / "configs" / f"someorg--{mode}" / "config.json"
    assert json.loads(cached.read_text()) == json.loads(CONFIG)  # the text, not the gzip


@pytest.mark.parametrize(
    "mode, needle",
    [
        ("bomb", "config.json is too large to be one (over 2,097,152 bytes decompressed)"),
        ("cut", "a gzip body that ends early"),
        ("junk", "a gzip body that does not decompress"),
        ("br", "the Hub sent config.json as Content-Encoding br, which kvplan cannot read"),
    ],
)
def test_a_compressed_answer_kvplan_cannot_read_is_one_line(against, mode, needle):
    Hub.mode = mode
    code, _, err = run_cli("size", f"someorg/{mode}")
    one_line_error(code, err, needle)
    assert not (against / "kv" / "configs" / f"someorg--{mode}" / "config.json").exists()


# ---- 5. invisible format characters (Unicode category Cf) --------------------------------------
FORMAT_CHARS = ["\u00ad", "\u200b", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069",
                "\ufeff", "\u0600", "\u180e", "\U000e0041"]  # fmt: skip


@pytest.mark.parametrize("ch", FORMAT_CHARS)
def test_every_format_character_is_escaped_by_every_renderer(ch):
    from kvplan.present.escape import csv_cell, md_text, shell_word, terminal_text, yaml_string

    code = ord(ch)
    shown = f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    )  # fmt: skip
    assert terminal_text(f"a{ch}b") == f"a{shown}b"
    assert md_text(f"a{ch}b") == "a\\" + shown + "b"  # the backslash itself escaped
    assert csv_cell(f"a{ch}b") == f"a{shown}b"
    assert yaml_string(f"a{ch}b") == f'"a{shown}b"'
    assert ch not in shell_word(f"a{ch}b") and shell_word(f"a{ch}b").startswith("$'")


def test_no_format_control_or_surrogate_character_is_left_raw():
    import unicodedata

    from kvplan.present.escape import shell_word, terminal_text

    raw = [
        hex(code)
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        and terminal_text(chr(code)) == chr(code)
    ]
    assert raw == []
    assert shell_word("a\ud800") == "$'a\\\\ud800'"  # a lone surrogate has no UTF-8 bytes


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_a_soft_hyphen_in_a_model_folder_name_is_shown_escaped(tmp_path, fmt):
    folder = tmp_path / "llama\u00adx\u2066y"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like()))
    code, out, err = run_cli("size", str(folder), "--format", fmt)
    assert code == 0, err
    assert "\u00ad" not in out + err and "\u2066" not in out + err
    assert "\\xad" in out + err


def test_a_format_character_in_an_error_line_is_escaped(tmp_path):
    # (a name's bidi controls are deleted on the way, kvplan.inputs.text.clean; the rest escaped)
    code, _, err = run_cli("size", str(tmp_path / "no\u00adsu\u202ech\ufeffx\U000e0041"))
    assert code == 2 and err.count("\n") == 1, err
    assert not {"\u00ad", "\u202e", "\ufeff", "\U000e0041"} & set(err)
    assert "no\\xadsuch\\ufeffx\\U000e0041" in err


# ---- the sixth round's own pass: odd numbers for the options -----------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        # an empty value was taken as the option not given
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--mean-len="), "--mean-len '' is not"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len="), "--max-model-len ''"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory="),
         "--kv-cache-memory '' is not a size"),
        (("fit", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory="), "--gpu-memory '' is not a size"),
        (("engine", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100", "--max-model-len="),
         "--max-model-len '' is not"),
        (("engine", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "h100", "--gpu-memory="),
         "--gpu-memory '' is not a size"),
        (("engine", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "h100", "-fa", ""),
         "--flash-attn '': choose on, off or auto"),
        (("engine", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "h100", "-ctk", ""), "''"),
        (("engine", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "h100", "-ctv", ""), "''"),
        # float() reads 1e309 as inf: simulate took it as a deterministic arrival process
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--burstiness", "1e309"),
         "--burstiness '1e309' is beyond a float's range"),
        (("simulate", "llama-3.1-8b", "--gpu", "h100", "--spread", "-1e309"),
         "--spread '-1e309' is beyond a float's range"),
        (("capacity", "llama-3.1-8b", "--gpu", "h100", "--network-gbps", "1e309"),
         "--network-gbps '1e309' is beyond"),
    ],
)  # fmt: skip
def test_an_empty_or_overflowing_number_is_refused(argv, needle):
    code, _, err = run_cli(*argv)
    one_line_error(code, err, needle)


def test_a_superscript_digit_in_an_ollama_variable_is_no_internal_error():
    # str.isdigit() is true of '²', which int() refuses: a ValueError reached the user
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--gpu", "h100", "--engine", "ollama",
        "--ollama-env", "OLLAMA_CONTEXT_LENGTH=²",
    )  # fmt: skip
    one_line_error(code, err, "OLLAMA_CONTEXT_LENGTH=²: a whole number between 1 and")


def test_inf_typed_as_inf_still_means_infinity():
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "20", "--burstiness", "inf"
    )
    assert code == 0, err


def test_a_folder_name_that_is_no_utf8_is_shown_escaped(tmp_path):
    # Python holds the byte 0xff of a file name as the lone surrogate U+DCFF, which no UTF-8
    # stream can write: shown as its escape
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/m\xffx")
    os.mkdir(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(json.dumps(llama_like()))
    for fmt in ("table", "markdown", "csv"):
        code, out, err = run_cli("size", folder, "--format", fmt)
        assert code == 0, err
        both = out + err
        assert "m\\udcffx" in both.replace("\\\\", "\\") and "\udcff" not in both


def test_a_gemma4_moe_config_without_the_dense_width_is_one_line(tmp_path):
    # the fuzzer's find: Gemma-4's MoE layers run a dense MLP beside the experts; with
    # intermediate_size null the weight count was a TypeError (an internal error)
    import json

    from helpers import REPO

    data = json.loads((REPO / "model_configs" / "gemma-4-26B-A4B.json").read_text())
    text = data.get("text_config", data)
    text["intermediate_size"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli("size", str(path))
    assert code == 2 and err.count("\n") == 1, err
    assert "intermediate_size (the MLP beside the experts)" in err
