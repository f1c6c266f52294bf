"""Hostile and ordinary inputs: every case ends in a correct answer or one `error:` line with exit 2,
within a bounded time; no run leaves a user's file half-written or overwrites a file the user did
not name. (Hub servers that misbehave: tests/test_hub.py; YAML profiles: tests/test_hardware.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import REPO, llama_like, one_line_error, run_cli, run_json


# ---- ordinary calls that used to crash -------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["report", "llama-3.1-8b", "--ctx", "2k"],  # the default prefix is the whole context
        ["report", "llama-3.1-8b", "--ctx", "1k,8k"],
        ["capacity", "llama-3.1-8b", "--ctx", "32k", "--prefix-tokens", "32k"],
    ],
)
def test_ordinary_calls_answer(argv):
    code, out, err = run_cli(*argv)
    assert code == 0, err
    assert out


def test_a_prompt_shared_whole_still_costs_each_sequence_its_last_block():
    whole = run_json("capacity", "llama-3.1-8b", "--ctx", "32k", "--prefix-tokens", "32k")
    row = next(r for r in whole["what_if"] if r["kind"] == "prefix")
    pool = whole["kv_pool_bytes_per_gpu"]
    shared = (32768 - 16) * 131_072  # every block but the last
    assert row["max_concurrency"] == int((pool - shared) // (16 * 131_072))


def test_a_model_without_a_cache_gets_an_answer_not_a_crash(tmp_path):
    config = {
        "model_type": "nemotron_h",
        "hidden_size": 256,
        "hybrid_override_pattern": "----",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "ssm_state_size": 16,
        "n_groups": 1,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert run_json("size", str(path))["rows"][0]["kv_bytes_per_sequence"] == 0
    assert run_json("roofline", str(path))["decode"]
    for argv in (["capacity"], ["report"], ["explore", "--out", str(tmp_path / "p.html")]):
        code, _, err = run_cli(argv[0], str(path), *argv[1:])
        one_line_error(code, err)
        assert "keeps no per-sequence cache" in err
    code, _, err = run_cli("whatif", str(path), "--apply", "fp8")
    one_line_error(code, err)


# ---- impossible values are refused at the edge -----------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["engine", "llama-3.1-8b", "--max-num-batched-tokens", "-100000000"],
        ["capacity", "llama-3.1-8b", "--reserve", "-1"],
        ["capacity", "llama-3.1-8b", "--reserve", "nan"],
        ["capacity", "llama-3.1-8b", "--reserve", "1e400"],
        ["capacity", "llama-3.1-8b", "--reserve", "inf"],
        ["capacity", "llama-3.1-8b", "--reserve", "1024"],  # a size needs its unit
        ["capacity", "llama-3.1-8b", "--block-size", "0"],
        ["capacity", "llama-3.1-8b", "--block-size", "-16"],
        ["engine", "llama-3.1-8b", "--engine", "sglang", "--mem-fraction-static", "0"],
        ["capacity", "llama-3.1-8b", "--gpu-mem-util", "nan"],
        ["capacity", "llama-3.1-8b", "--gpu-mem-util", "inf"],
        ["capacity", "llama-3.1-8b", "--kv-cache-memory", "20GiB"],  # an engine option
        ["capacity", "llama-3.1-8b", "--network-gbps", "nan"],
        ["capacity", "llama-3.1-8b", "--num-gpus", "0"],
        ["size", "llama-3.1-8b", "--kv-dtype", ""],
        ["size", "llama-3.1-8b", "--kv-dtype", "int3"],
        ["size", "llama-3.1-8b", "--ctx", "0"],
        ["size", "llama-3.1-8b", "--ctx", "-8k"],
        ["size", "llama-3.1-8b", "--ctx", "1" * 400],
        ["size", "llama-3.1-8b", "--batch", "0"],
        ["size", "llama-3.1-8b", "--tp", "3"],
        ["size", "llama-3.1-8b", "--tp", "99999"],
        ["size", "llama-3.1-8b", "--weights-dtype", "int3"],
        ["whatif", "llama-3.1-8b", "--apply", "cla²"],
        ["whatif", "llama-3.1-8b", "--apply", "gqa=٣"],
        ["whatif", "llama-3.1-8b", "--apply", "evict=1.5"],
        ["whatif", "llama-3.1-8b", "--apply", ""],
        ["roofline", "llama-3.1-8b", "--pp", "0"],
        ["engine", "llama-3.1-8b", "--kv-cache-dtype", ""],
        ["engine", "llama-3.1-8b", "--gpu-memory-utilization", "2"],
    ],
)
def test_impossible_values_are_one_line_errors(argv):
    code, _, err = run_cli(*argv)
    one_line_error(code, err)


def test_list_products_are_bounded():
    contexts = ",".join(str(1000 + i) for i in range(200))
    batches = ",".join(str(1 + i) for i in range(200))
    code, _, err = run_cli("size", "llama-3.1-8b", "--ctx", contexts, "--batch", batches)
    one_line_error(code, err)
    assert "at most 10,000" in err


# ---- configs that are hostile -----------------------------------------------------------------
@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "invalid JSON"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON"),
        ('{"a":' * 200 + "1" + "}" * 200, "nested deeper"),
        ("\xff\xfe not utf8", "not UTF-8"),
    ],
)
def test_hostile_config_text(tmp_path, text, needle):
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("latin-1", "ignore") if "\xff" in text else text.encode())
    code, _, err = run_cli("size", str(path))
    one_line_error(code, err)
    assert needle in err, err


def test_a_fifo_or_a_device_is_not_read(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    code, _, err = run_cli("size", str(fifo))
    assert code == 2 and time.monotonic() - started < 10, err
    code, _, err = run_cli("size", "/dev/zero")
    one_line_error(code, err)


def test_huge_pattern_and_lists_are_capped(tmp_path):
    config = llama_like(model_type="nemotron_h", hybrid_override_pattern="*" * 200_000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _, err = run_cli("size", str(path))
    one_line_error(code, err)
    assert "over 4,096" in err
    config = llama_like(num_attention_heads=2_000_000_000, num_key_value_heads=1)
    path.write_text(json.dumps(config))
    code, _, err = run_cli("explore", str(path), "--out", str(tmp_path / "x.html"))
    one_line_error(code, err)


def test_escape_sequences_from_a_config_never_reach_the_terminal(tmp_path):
    config = llama_like(model_type="llama\x1b[2J\x1b]0;pwned\x07")
    path = tmp_path / "evil" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    code, out, err = run_cli("size", str(path))
    assert "\x1b" not in out + err and "\x07" not in out + err


# ---- files ------------------------------------------------------------------------------------
def test_report_never_overwrites_charts_it_was_not_told_to_write(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "design.md"
    chart = tmp_path / "design-roofline.png"
    chart.write_bytes(b"the user's own picture")
    code, _, err = run_cli("report", "llama-3.1-8b", "--ctx", "8k", "--out", str(out))
    one_line_error(code, err)
    assert "--force" in err and chart.read_bytes() == b"the user's own picture"
    assert not out.exists()
    code, _, err = run_cli("report", "llama-3.1-8b", "--ctx", "8k", "--out", str(out), "--force")
    assert code == 0, err
    assert chart.read_bytes().startswith(b"\x89PNG")


def test_dash_means_standard_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("explore", "llama-3.1-8b", "--out", "-")
    assert code == 0 and out.startswith("<!doctype html>"), err
    code, out, err = run_cli("report", "llama-3.1-8b", "--ctx", "8k", "--out", "-")
    assert code == 0 and out.startswith("## KV-cache plan"), err
    assert not list(tmp_path.iterdir())  # no file named '-' and no '--roofline.png'


@pytest.mark.parametrize("target", ["folder", "missing/x.png", "/proc/kvplan.png"])
def test_plot_to_a_place_that_cannot_hold_it(tmp_path, target):
    pytest.importorskip("matplotlib")
    if target == "folder":
        (tmp_path / "folder.png").mkdir()
        target = str(tmp_path / "folder.png")
    elif not target.startswith("/"):
        target = str(tmp_path / target)
    code, _, err = run_cli("roofline", "llama-3.1-8b", "--plot", target)
    one_line_error(code, err)


def test_an_existing_page_survives_a_failed_write(tmp_path):
    page = tmp_path / "kvcache.html"
    page.write_text("my page")
    os.chmod(tmp_path, 0o500)  # the folder refuses the temporary file
    try:
        if os.access(tmp_path, os.W_OK):
            pytest.skip("running as a user that ignores folder permissions")
        code, _, err = run_cli("explore", "llama-3.1-8b", "--out", str(page))
        one_line_error(code, err)
    finally:
        os.chmod(tmp_path, 0o700)
    assert page.read_text() == "my page"


def test_standard_output_on_a_full_device_is_a_clear_error():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "kvplan", "models"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    assert proc.returncode == 2 and "No space left" in proc.stderr, proc.stderr


def test_a_closed_pipe_ends_quietly():
    proc = subprocess.run(
        f"{sys.executable} -m kvplan models | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.startswith("Bundled models") and "Error" not in proc.stderr


@pytest.mark.slow
def test_a_full_disk_leaves_the_users_page_whole(tmp_path):
    """A 1 MiB tmpfs filled to the brim: the write fails cleanly and the old page stays."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        page = mount / "kvcache.html"
        page.write_text("my page")
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        code, _, err = run_cli("explore", "llama-3.1-8b", "--out", str(page))
        one_line_error(code, err)
        assert "No space left" in err
        assert page.read_text() == "my page"
        assert [p.name for p in mount.iterdir() if p.name.startswith(".")] == []  # no temp left
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


# ---- the second campaign ------------------------------------------------------------------
def _kvplan(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **kwargs.pop("env", {})}
    return subprocess.run(
        [sys.executable, "-m", "kvplan", *args], env=env, timeout=120, cwd=REPO, **kwargs
    )


def test_a_closed_stdout_is_not_an_internal_error():
    proc = _kvplan(["gpus"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    code = subprocess.run(
        [sys.executable, "-c", "import os,subprocess,sys; os.close(1); "
         "sys.exit(subprocess.run([sys.executable, '-m', 'kvplan', 'gpus']).returncode)"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO, stderr=subprocess.PIPE, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0
    assert code.returncode == 0, code.stderr
    assert "internal error" not in code.stderr


@pytest.mark.parametrize(
    "encoding, layers", [("ascii", "32 ? full"), ("latin-1", "32 \u00d7 full")]
)
def test_an_encoding_without_the_tables_characters_prints_placeholders(encoding, layers):
    proc = _kvplan(
        ["size", "llama-3.1-8b", "--breakdown"],
        capture_output=True,
        text=True,
        env={"PYTHONIOENCODING": encoding},
        encoding=encoding,
    )
    assert proc.returncode == 0, proc.stderr
    assert layers in proc.stdout  # ascii has no multiplication sign: replaced
    assert "?" in proc.stdout  # the table's rule characters exist in neither


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["plan", "qwen3-8b", "--slo", "ttft_p99=2s", "--gpu", "h100", "--rate", "1e-300"],
         "between 0.001 and 1,000,000"),
        (["simulate", "qwen3-8b", "--num-prompts", "200000"], "100000"),
        (["capacity", "llama-3.1-8b", "--gpu", "h100", "--price", "h100=2"], "prices a comparison"),
        (["capacity", "llama-3.1-8b", "--gpu", "h100", "--price", "h100=nan"], "between 0.001"),
        (["capacity", "llama-3.1-8b", "--gpu", "h100", "--gpu", "h200", "--price", "h100=1e-320"],
         "between 0.001"),
        (["capacity", "deepseek-v3", "--dp-attention", "512"], "256 routed experts"),
        (["whatif", "llama-3.1-8b", "--apply", "mla=+"], "empty technique"),
        (["whatif", "llama-3.1-8b", "--apply", "++fp8"], "empty technique"),
        (["simulate", "qwen3-8b", "--spread", "0.5"], "fixed lengths take none"),
        (["plan", "qwen3-8b", "--rate", "5", "--gpu", "h100", "--slo", "ttft_p99=2s",
          "--slo", "ttft_p99=1s"], "given twice"),
        (["measure", "--timeout", "30"], "add --distributed"),
        (["measure", "--allow-other-device"], "add --baseline"),
        (["measure", "--confirm"], "add --check, --baseline FILE or both"),
        (["measure", "--confirm", "--check", "--distributed"], "not to --distributed"),
    ],
)  # fmt: skip
def test_second_campaign_inputs_are_one_line_errors(argv, needle):
    code, _, err = run_cli(*argv)
    one_line_error(code, err)
    assert needle in err


def test_json_nested_past_pythons_recursion_limit_is_refused(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    for argv in (
        ["simulate", "qwen3-8b", "--trace", str(deep)],
        ["measure", "--baseline", str(deep)],
    ):
        code, _, err = run_cli(*argv)
        one_line_error(code, err)


def test_cla_sharing_more_layers_than_exist_is_not_priced():
    data = run_json("whatif", "llama-3.1-8b", "--apply", "cla33")
    assert not data["rows"][1:] or all(r["technique"] != "cla33" for r in data["rows"])
    assert any("cla33" in str(s) for s in data["skipped"])


def test_outputs_past_max_model_len_fail_over_http():
    """vLLM's server refuses prompt + max_tokens > max_model_len (HTTP 400): the request
    fails, it is not served with fewer outputs."""
    data = run_json("simulate", "qwen3-8b", "--num-prompts", "1", "--output-len", "16777216")
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (0, 1)
    assert data["notes"][0]["id"] == "sim-requests-failed"
    assert "sim-outputs-capped" not in [n["id"] for n in data["notes"]]


def test_fp8_weights_on_a_gpu_without_fp8_tensor_cores_compute_in_bf16():
    data = run_json("roofline", "deepseek-v3", "--gpu", "a100")
    assert data["compute_dtype"] == "bf16"


def test_a_trace_with_a_byte_order_mark_reads_and_ranges_read_as_numbers(tmp_path):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n')
    assert (
        run_json("simulate", "qwen3-8b", "--trace", str(bom))["runs"][0]["bench"]["completed"] == 1
    )
    big = tmp_path / "big.jsonl"
    big.write_text('{"arrival_s": 0, "input_tokens": 99999999999, "output_tokens": 5}\n')
    code, _, err = run_cli("simulate", "qwen3-8b", "--trace", str(big))
    one_line_error(code, err)
    assert "between 1 and 16,777,216" in err


@pytest.mark.parametrize(
    "command, out",
    [("roofline", ()), ("report", ("--out", "r.md")), ("explore", ("--out", "e.html"))],
)
def test_gpu_all_outside_capacity_says_where_it_works(command, out, tmp_path):
    out = tuple(str(tmp_path / o) if "." in o else o for o in out)
    code, _, err = run_cli(command, "llama-3.1-8b", "--gpu", "all", *out)
    one_line_error(code, err)
    assert "kvplan capacity MODEL --gpu all" in err


def test_a_trace_prefix_id_must_be_a_name_or_a_number(tmp_path):
    trace = tmp_path / "t.jsonl"
    row = '{"arrival_s": 0, "input_tokens": 100, "output_tokens": 5, "prefix_tokens": 10, '
    trace.write_text(row + '"prefix_id": {"a": 1}}\n')
    code, _, err = run_cli("simulate", "qwen3-8b", "--trace", str(trace))
    one_line_error(code, err)
    assert "prefix_id must be a string or a whole number" in err


# ---- third campaign: hostile config.json fields -------------------------------------------
def _config_file(tmp_path, config: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"partial_rotary_factor": 1e308}, "partial_rotary_factor must be in [0, 1]"),
        ({"partial_rotary_factor": -1}, "partial_rotary_factor must be in [0, 1]"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 1e308,
                           "original_max_position_embeddings": 8192}}, "gives inf positions"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 1e6}}, "over 2,147,483,648"),
        ({"max_position_embeddings": 10**30}, "max_position_embeddings = 1" + "0" * 30),
        ({"max_position_embeddings": -1}, "max_position_embeddings = -1 is out of range"),
        ({"layer_types": ["full_attention"] * 3}, "layer_types has 3 entries, expected 4"),
        ({"hybrid_override_pattern": "M*"}, "hybrid_override_pattern has 2 entries, expected 4"),
        ({"attn_type_list": [1] * 5}, "attn_type_list has 5 entries, expected 4"),
    ],
)  # fmt: skip
def test_hostile_structural_fields_are_one_line_errors(tmp_path, overrides, needle):
    """Each used to crash (OverflowError), price a table of 1e30 positions, or drop layers."""
    path = _config_file(tmp_path, llama_like(**{"max_position_embeddings": 4096, **overrides}))
    for command in ("size", "capacity", "whatif"):
        code, _, err = run_cli(command, path)
        one_line_error(code, err)
        assert needle in err


@pytest.mark.parametrize(
    "qc, weights",
    [
        # an `ignore` that is no list (a number) used to crash iterating it
        ({"quant_method": "fp8", "weight_block_size": [128, 128], "ignore": 5}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": 7}, "nvfp4"),
        # 4.0 bits, `true` or 1e30 as a group size were spelled into a dtype name
        ({"quant_method": "gptq", "bits": 4.0, "group_size": 128}, "bf16"),
        ({"quant_method": "gptq", "bits": 4, "group_size": True}, "bf16"),
        ({"quant_method": "awq", "bits": 4, "group_size": 10**30}, "bf16"),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
            "num_bits": 4, "type": "int", "strategy": "group", "group_size": 10**30}}}}, "bf16"),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, "int4"),  # per channel
    ],
)  # fmt: skip
def test_quantization_garbage_is_read_or_named_unread(tmp_path, qc, weights):
    path = _config_file(tmp_path, llama_like(quantization_config=qc))
    data = run_json("size", path)
    assert data["model"]["weights_dtype"] == weights
    if weights == "bf16":
        assert "quant-unread" in [n["id"] for n in data["notes"]]


def test_absurd_products_of_in_range_fields_are_refused(tmp_path):
    """Each field within its bound, the model 7e19 parameters: refused, not priced."""
    config = llama_like(num_attention_heads=65536, num_key_value_heads=65536, head_dim=2**31 - 1)
    code, _, err = run_cli("size", _config_file(tmp_path, config))
    one_line_error(code, err)
    assert "parameters, over 1,000,000,000,000,000" in err


def test_a_deep_stack_is_bounded_and_answered(tmp_path):
    """4,096 layers (the bound) answer; 4,097 are refused. Deep stacks used to take minutes in
    `capacity --gpu all` (cache_groups walked every layer per deployment tried)."""
    path = _config_file(tmp_path, llama_like(num_hidden_layers=4097))
    code, _, err = run_cli("size", path)
    one_line_error(code, err)
    assert "num_hidden_layers = 4097 is out of range (1 to 4,096)" in err
    deep = run_json("size", _config_file(tmp_path, llama_like(num_hidden_layers=4096)))
    # 4 KV heads x 64 dims x (K + V) x 2 bytes per layer, by hand
    assert deep["model"]["kv_bytes_per_token"] == 4096 * 4 * 64 * 2 * 2


@pytest.mark.parametrize(
    "argv, needle",
    [
        # -inf passed the "inf means evenly spaced" test and ran as +inf
        (["simulate", "qwen3-8b", "--num-prompts", "5", "--burstiness", "-inf"], "--burstiness"),
        # a typo ruled out every configuration one by one and answered "0 meet the targets"
        (["plan", "qwen3-8b", "--slo", "ttft_p99=2s", "--rate", "1", "--kv-cache-dtype", "nan"],
         "--kv-cache-dtype 'nan': choose auto"),
    ],
)  # fmt: skip
def test_third_campaign_options_are_one_line_errors(argv, needle):
    code, _, err = run_cli(*argv)
    one_line_error(code, err)
    assert needle in err


@pytest.mark.parametrize(
    "flag, value", [("--weights-dtype", "int4"), ("--dtype", "float16"), ("--weights-dtype", "nan")]
)
def test_llamacpp_refuses_the_vllm_dtype_flags_it_would_ignore(flag, value):
    """`engine --engine llama.cpp --weights-dtype int4` answered for the weights as stored."""
    code, _, err = run_cli("engine", "llama-3.1-8b", "--engine", "llama.cpp", flag, value)
    one_line_error(code, err)
    assert f"{flag} does not apply to llama.cpp (its weights: --weights-type)" in err


def test_a_model_name_cannot_break_the_explorer_page(tmp_path):
    """A folder named `__DATA__<!--<script>`: "<!--" then "<script" inside the data block made
    its "</script>" no end tag (the page's code was swallowed as data), and "__DATA__" in the
    title received a second copy of the payload."""
    import re

    folder = tmp_path / "__DATA__<!--<script>"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like()))
    page_path = tmp_path / "e.html"
    code, _, err = run_cli("explore", str(folder), "--out", str(page_path))
    assert code == 0, err
    page = page_path.read_text()
    data = re.search(r'<script id="kvplan-data" type="application/json">(.*?)</script>', page, re.S)
    assert "<" not in data.group(1)  # no "<!--", no "</script>", no "<script" in the block
    assert json.loads(data.group(1))["model"]["name"] == "__DATA__<!--<script>"
    assert "<title>KV cache explorer: __DATA__&lt;!--&lt;script&gt;</title>" in page


def test_a_config_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(llama_like()).encode())
    assert run_json("size", str(path))["model"]["num_layers"] == 4
