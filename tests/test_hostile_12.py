"""Hostile inputs, twelfth round.
1. vLLM --block-size 3 was taken by simulate, plan and engine as a plain result. vLLM 0.19.1's
CacheConfig.block_size is an int (config/cache.py) that the attention selector checks per
backend (platforms/cuda.py get_attn_backend_cls): an MLA model has no backend for it ("No valid
attention backend found"); a dense model falls back to FLEX_ATTENTION, with vLLM's warning.
V0 (0.6, 0.7) took argparse choices 8-128; 0.8's BlockSize Literal added 1."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_cli, run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4")


# ---- 1. --block-size as vLLM takes it -----------------------------------------------------
def test_an_mla_model_with_a_block_size_no_backend_takes_is_refused():
    code, out, err = run_cli(
        "engine", "deepseek-v2-lite", "--engine", "vllm", "--gpu", "h100", "--block-size", "3"
    )
    one_line_error(code, err, "No valid attention backend")
    assert out == ""


def test_a_dense_model_with_an_odd_block_size_says_vllm_falls_back_to_flex_attention():
    result = run_json(*SIM, "--block-size", "3")
    ids = [n["id"] for n in result["notes"]]
    assert "vllm-block-size-fallback" in ids
    text = next(n["text"] for n in result["notes"] if n["id"] == "vllm-block-size-fallback")
    assert "FLEX_ATTENTION" in text and "FLASH_ATTN" in text


@pytest.mark.parametrize("size", ["16", "32"])
def test_a_block_size_the_first_backend_takes_says_nothing(size):
    result = run_json(*SIM, "--block-size", size)
    assert "vllm-block-size-fallback" not in [n["id"] for n in result["notes"]]


@pytest.mark.parametrize("version, size", [("0.6.6", "3"), ("0.7.3", "1"), ("0.8.5", "3")])
def test_a_release_before_019_refuses_a_block_size_off_its_choices(version, size):
    code, out, err = run_cli(*SIM, "--engine-version", version, "--block-size", size)
    one_line_error(code, err, "invalid choice")
    assert out == ""


def test_a_v0_release_takes_its_own_choices():
    assert run_json(*SIM, "--engine-version", "0.6.6", "--block-size", "32")["notes"]


# ---- 2. a run where no request can be served -------------------------------------------------
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_run_whose_every_request_fails_says_so_first(engine):
    result = run_json(*SIM, "--engine", engine, "--max-model-len", "1")
    assert result["runs"][0]["bench"]["completed"] == 0
    first = result["notes"][0]
    assert first["id"] == "sim-requests-failed"
    assert first["text"].startswith("All 4 requests failed") and "--max-model-len" in first["text"]


def test_a_run_that_serves_every_request_has_no_failure_note():
    # the default 1,024-token prompts asking 128 outputs: exactly max_model_len, served
    result = run_json(*SIM, "--max-model-len", "1152")
    assert result["runs"][0]["bench"]["failed"] == 0
    assert "sim-requests-failed" not in [n["id"] for n in result["notes"]]


# ---- 3. NGRAM with --speculative-eagle-topk --------------------------------------------------
# SGLang does not refuse it: server_args picks the attention backend with the given top-k
# (_handle_attention_backend_compatibility), then _handle_ngram replaces it with
# --speculative-ngram-max-bfs-breadth (10); kvplan runs the same and says the flag was replaced.
NGRAM = (*SIM, "--engine", "sglang", "--speculative-algorithm", "NGRAM")


def test_ngram_replaces_a_given_eagle_topk_and_says_so():
    result = run_json(*NGRAM, "--speculative-eagle-topk", "4")
    assert result["setup"]["speculative"]["topk"] == 10
    text = next(n["text"] for n in result["notes"] if n["id"] == "sglang-ngram-topk")
    assert "--speculative-eagle-topk 4" in text and "(10)" in text


def test_ngram_without_a_topk_has_no_replacement_note():
    result = run_json(*NGRAM)
    assert result["setup"]["speculative"]["topk"] == 10
    assert "sglang-ngram-topk" not in [n["id"] for n in result["notes"]]


# ---- 4. CSV keeps every number a number -------------------------------------------------------
@pytest.mark.parametrize("extra", [(), ("--compare", "prefix-caching")])
def test_simulate_csv_writes_the_interval_as_two_numeric_fields(extra):
    import csv
    import io

    code, out, err = run_cli(*SIM, *extra, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and "output_throughput_80" not in rows[0]
    text_fields = {"table", "variant"}
    for row in rows:
        for key, value in row.items():
            if key not in text_fields and value != "":
                float(value)  # "303-603" raised here
        if row["output_throughput_low"]:  # a --compare run has none
            assert float(row["output_throughput_low"]) <= float(row["output_throughput_high"])
    assert rows[0]["output_throughput_low"] != ""


# ---- 5. an output that is a symbolic link ---------------------------------------------------
# kvplan replaces the link's target atomically and keeps the link (tests/test_output_files.py);
# the target is a file the user did not name, so the one stderr line names it.
def test_an_output_link_names_the_file_it_replaced(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(link))
    assert code == 0, err
    assert err.count("\n") == 1 and "symbolic link" in err and str(target) in err
    assert target.read_text().startswith("{") and link.is_symlink()


def test_a_plain_output_says_only_wrote(tmp_path):
    out = tmp_path / "plain.json"
    code, _, err = run_cli("report", "llama-3.1-8b", "--format", "json", "-o", str(out))
    assert code == 0 and err == f"wrote {out}\n"


def test_a_plot_link_names_the_file_it_replaced(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "real.png").write_bytes(b"")
    link = tmp_path / "link.png"
    link.symlink_to("real.png")
    code, out, err = run_cli("roofline", "llama-3.1-8b", "--gpu", "h100", "--plot", str(link))
    assert code == 0, err
    assert "symbolic link" in err and str(tmp_path / "real.png") in err
    assert (tmp_path / "real.png").stat().st_size > 0


def test_the_fallback_backend_is_priced_as_untimed_not_as_vllms_own_pick():
    fallback = run_json(*SIM, "--block-size", "3")
    own = run_json(*SIM, "--block-size", "16")
    assert fallback["untimed_parts"] == ["the attention under --block-size 3"]
    assert own["untimed_parts"] == []


# ---- 6. vLLM --speculative-config as given ---------------------------------------------------
def _spec_launch(config: str) -> dict:
    result = run_json(*SIM, "--speculative-config", config)
    flags = result["setup"]["speculative"]["launch"]
    assert flags[0] == "--speculative-config"
    return json.loads(flags[1])


def test_the_launch_keeps_the_speculative_config_as_given():
    given = {
        "method": "ngram_gpu",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert _spec_launch(json.dumps(given)) == given


def test_the_launch_names_a_bundled_draft_by_its_hub_id():
    launch = _spec_launch(
        '{"method": "draft_model", "model": "qwen3-4b", "num_speculative_tokens": 2}'
    )
    assert launch == {
        "method": "draft_model",
        "model": "Qwen/Qwen3-4B",
        "num_speculative_tokens": 2,
    }


@pytest.mark.parametrize(
    "extra, needle",
    [
        ('"prompt_lookup_max": -1', "prompt_lookup_max"),
        ('"prompt_lookup_max": 0', "prompt_lookup_max"),
        ('"prompt_lookup_min": true', "prompt_lookup_min"),
        ('"prompt_lookup_min": 5, "prompt_lookup_max": 2', "must be <= prompt_lookup_max"),
    ],
)
def test_prompt_lookup_bounds_vllm_refuses_are_refused(extra, needle):
    config = '{"method": "ngram", "num_speculative_tokens": 3, ' + extra + "}"
    code, out, err = run_cli(*SIM, "--speculative-config", config)
    one_line_error(code, err, needle)


def test_a_config_that_leaves_the_method_to_the_model_launches_with_it_named():
    launch = _spec_launch('{"model": "[ngram]", "num_speculative_tokens": 2}')
    assert launch == {"method": "ngram", "model": "[ngram]", "num_speculative_tokens": 2}
