"""`kvplan size` and `kvplan models` through the command line."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO, run_cli, run_json


def test_json_contract_keys():
    data = run_json(
        "size", "llama-3.1-70b", "--ctx", "8k,128k", "--batch", "1,8", "--kv-dtype", "bf16,fp8"
    )
    assert isinstance(data["kvplan_version"], str)
    model = data["model"]
    for key in ("name", "params_total", "params_active", "weights_bytes"):
        assert key in model
    assert len(data["rows"]) == 2 * 2 * 2
    for row in data["rows"]:
        for key, kind in (
            ("context_len", int),
            ("batch_size", int),
            ("kv_dtype", str),
            ("tp", int),
            ("kv_bytes_per_sequence", int),
            ("kv_bytes_total", int),
            ("batch_equal_memory", float),
        ):
            assert isinstance(row[key], kind), key
    assert isinstance(data["notes"], list)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_every_format_carries_the_numbers_and_the_notes(fmt):
    code, out, err = run_cli(
        "size", "deepseek-v3", "--ctx", "32k", "--kv-dtype", "fp8", "--format", fmt
    )
    assert code == 0, err
    # the MLA note travels in every format (CSV's notes on standard error, `note:` lines)
    assert "MLA" in (err if fmt == "csv" else out)
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert int(rows[0]["kv_bytes_per_sequence"]) == 61 * 576 * 32768
    else:
        assert "1.07" in out  # 2,303,721,472 B = 2.30 GB = 2.15 GiB / 2 for fp8 -> 1.07 GiB


def test_context_suffixes():
    data = run_json("size", "llama-3.1-8b", "--ctx", "8192,8k,1m")
    assert [r["context_len"] for r in data["rows"]] == [8192, 8192, 1048576]


def test_breakdown_rows_per_group():
    data = run_json("size", "gemma-3-27b", "--ctx", "8k", "--breakdown")
    groups = {g["group"]: g for g in data["breakdown"]}
    assert groups["sliding window 1,024"]["tokens_held"] == 1024
    assert groups["full attention"]["num_layers"] == 10
    assert (
        sum(g["bytes_per_sequence"] for g in data["breakdown"])
        == data["rows"][0]["kv_bytes_per_sequence"]
    )


def test_config_path_and_folder(tmp_path):
    src = (REPO / "model_configs" / "Llama-3.1-8B.json").read_text()
    (tmp_path / "config.json").write_text(src)
    by_folder = run_json("size", str(tmp_path))
    by_file = run_json("size", str(tmp_path / "config.json"))
    assert by_folder["rows"] == by_file["rows"]


def test_repo_id_resolves_to_the_bundled_copy_offline():
    data = run_json("size", "meta-llama/Llama-3.1-70B")
    assert data["model"]["name"] == "llama-3.1-70b"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["size", "llama-3.1-7b"], "did you mean"),
        (["size", "llama-3.1-8b", "--ctx", "-5"], "not a token count"),
        (["size", "llama-3.1-8b", "--ctx", "0"], "between 1"),
        (["size", "llama-3.1-8b", "--batch", "x"], "not a whole number"),
        (["size", "llama-3.1-8b", "--kv-dtype", "fp6"], "unknown KV dtype"),
        (["size", "llama-3.1-8b", "--weights-dtype", "q2"], "unknown weights dtype"),
        (["size", "llama-3.1-8b", "--tp", "3"], "does not divide"),
        (["size", "/nonexistent/config.json"], "no such config file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle):
    code, out, err = run_cli(*argv)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_invalid_json_and_missing_fields(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama", ')
    code, _, err = run_cli("size", str(bad))
    assert code == 2 and "invalid JSON" in err
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code, _, err = run_cli("size", str(partial))
    assert code == 2 and "lacks" in err


def test_auto_map_code_is_never_imported(tmp_path):
    (tmp_path / "configuration_evil.py").write_text("raise SystemExit('executed!')\n")
    config = json.loads((REPO / "model_configs" / "DeepSeek-V3.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert run_json("size", str(tmp_path))["model"]["params_total"] == 671_026_404_352


def test_hub_lookup_offline_fails_fast_and_clearly(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", "size", "someorg/not-bundled-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "HF_HUB_OFFLINE" in proc.stderr and "Traceback" not in proc.stderr


def test_models_lists_every_bundled_model():
    data = run_json("models")
    names = {m["name"] for m in data["models"]}
    assert {"llama-3.1-70b", "deepseek-v3", "gemma-3-27b", "gpt-oss-120b"} <= names
    llama = next(m for m in data["models"] if m["name"] == "llama-3.1-70b")
    assert llama["kv_bytes_per_token"] == 327_680


def test_size_path_imports_no_heavy_modules():
    code = (
        "import sys; from kvplan.cli import main\n"
        "sys.argv=['kvplan','size','llama-3.1-70b','--ctx','128k']\n"
        "try: main()\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('torch','numpy','matplotlib','huggingface_hub','yaml','rich.console',"
        "'kvplan.formulas.roofline')"  # size needs only B_mem from it: imported when asked
        " if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "HEAVY []" in out


def test_hub_lookup_without_network_fails_in_seconds(tmp_path):
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_ENDPOINT="http://127.0.0.1:9")
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", "size", "someorg/not-bundled-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "cannot be reached" in proc.stderr


def test_contexts_written_the_way_kvplan_prints_them():
    # issue 30: `--ctx 32,768` silently became two contexts, 32 and 768 tokens
    data = run_json("size", "llama-3.1-8b", "--ctx", "32,768")
    assert [row["context_len"] for row in data["rows"]] == [32768]
    data = run_json("size", "llama-3.1-8b", "--ctx", "8k,1,048,576")
    assert sorted({row["context_len"] for row in data["rows"]}) == [8192, 1048576]
    data = run_json("size", "llama-3.1-8b", "--ctx", "32, 768")  # a space: a list, as written
    assert sorted({row["context_len"] for row in data["rows"]}) == [32, 768]
    assert run_json("capacity", "llama-3.1-8b", "--ctx", "32,768")["context_len"] == 32768
    # both readings plausible: one line saying how to write either
    code, out, err = run_cli("size", "llama-3.1-8b", "--ctx", "512,768")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "512768 for one" in err and "(512, 768) for several" in err
    # batch lists stay lists unless a group cannot be a batch of its own ("024")
    data = run_json("size", "llama-3.1-8b", "--ctx", "8k", "--batch", "1,128")
    assert sorted({row["batch_size"] for row in data["rows"]}) == [1, 128]


def test_models_gives_the_long_context_figure_sliding_windows_hold():
    # issue 30: `models` listed only every layer holding every token, 6x too much for Gemma 3
    rows = {m["name"]: m for m in run_json("models")["models"]}
    gemma = rows["gemma-3-27b"]
    assert gemma["long_context_len"] == 131072
    size = run_json("size", "gemma-3-27b", "--ctx", "128k", "--batch", "1", "--kv-dtype", "bf16")
    per_sequence = size["rows"][0]["kv_bytes_per_sequence"]
    assert gemma["long_kv_bytes_per_token"] == pytest.approx(per_sequence / 131072)
    assert gemma["long_kv_bytes_per_token"] < gemma["kv_bytes_per_token"] / 5
    llama = rows["llama-3.1-8b"]  # every layer full: the two agree
    assert llama["long_kv_bytes_per_token"] == llama["kv_bytes_per_token"]


# ---- several models in one table (the design-doc table) -----------------------------------------
SEVERAL = ("llama-3.1-8b", "qwen3-8b", "gemma-3-27b")


def test_several_models_are_one_table_of_each_models_own_size():
    data = run_json("size", *SEVERAL, "--ctx", "32k,128k", "--kv-dtype", "auto,fp8")
    assert [m["model"]["name"] for m in data["models"]] == list(SEVERAL)
    assert len(data["rows"]) == 3 * 2 * 2
    for name in SEVERAL:  # every row is that model's own `kvplan size` row, with its name
        alone = run_json("size", name, "--ctx", "32k,128k", "--kv-dtype", "auto,fp8")
        rows = [r for r in data["rows"] if r["model"] == name]
        assert len(rows) == len(alone["rows"])
        for row, own in zip(rows, alone["rows"], strict=True):
            assert {k: row[k] for k in own} == own
            assert row["params_total"] == alone["model"]["params_total"]
    # gemma-3's sliding layers hold 1,024 tokens: per sequence far below every-layer bytes x s
    gemma = next(r for r in data["rows"] if r["model"] == "gemma-3-27b" and r["kv_dtype"] == "bf16")
    assert gemma["kv_bytes_per_sequence"] < gemma["kv_bytes_per_token"] * gemma["context_len"] / 4
    llama = next(
        r for r in data["rows"] if r["model"] == "llama-3.1-8b" and r["kv_dtype"] == "bf16"
    )
    assert llama["kv_bytes_per_sequence"] == 131_072 * 32_768  # every layer, every token


def test_several_models_csv_has_a_model_column_and_markdown_cites_each_models_notes():
    code, out, _ = run_cli("size", *SEVERAL, "--ctx", "32k", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["model"] for r in rows] == list(SEVERAL)
    assert int(rows[0]["kv_bytes_per_sequence"]) == 131_072 * 32_768
    code, out, _ = run_cli("size", *SEVERAL, "--ctx", "32k", "--format", "markdown")
    assert code == 0
    gemma_line = next(line for line in out.splitlines() if line.startswith("| gemma-3-27b"))
    llama_line = next(line for line in out.splitlines() if line.startswith("| llama-3.1-8b"))
    assert "[^" in gemma_line  # its sliding-window note is cited on its own row
    assert "[^" not in llama_line.split("|")[1]  # llama-3.1-8b has no note of its own


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("llama-3.1-8b", "llama-3.1-8b"), "are the same model"),
        (("llama-3.1-8b", "meta-llama/Llama-3.1-8B"), "are the same model"),
        (("llama-3.1-8b", "qwen3-8b", "--breakdown"), "--breakdown takes one model"),
        (("llama-3.1-8b", "no-such-model-xyz"), "no-such-model-xyz"),
        (("llama-3.1-8b",) * 65, "at most 64"),
    ],
)
def test_several_models_refusals_are_one_line(argv, needle):
    code, out, err = run_cli("size", *argv)
    assert code == 2 and out == "", err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
