"""Hostile inputs, fifth round: where a model argument and its files come from. A local path
the user names wins over a bundled name or a Hub id of the same spelling, and the output says it
read that path; a split GGUF with a part copied over another is refused; a shard that is a link
to some other file has none of that file's bytes printed; a --max-model-len the engine refuses
to start with is refused the same way. Each case ends in a correct answer or one `error:` line
with exit 2, never a traceback or a silent wrong number."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from gguf_fixtures import bundled, convert, tensors_for, write_gguf
from helpers import one_line_error, run_cli, run_json


# ---- a split GGUF with a part twice -----------------------------------------------------------
def _split(tmp_path, max_tensors: int) -> list:
    arch, keys = convert(bundled("qwen3-30b-a3b"))
    write_gguf(
        tmp_path / "m.gguf", arch, keys, tensors_for(arch, keys), split_max_tensors=max_tensors
    )
    shards = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(shards) == 3
    return shards


def test_a_split_gguf_with_a_part_copied_over_another_is_refused(tmp_path):
    # 435 tensors in three parts of 145: a copy of part 2 over part 3 keeps the declared total
    # (split.tensors.count), so only the parts' own indices tell (llama.cpp checks split.no).
    shards = _split(tmp_path, 145)
    shutil.copy(shards[1], shards[2])
    code, out, err = run_cli("size", str(shards[0]))
    one_line_error(code, err, "split index 2 appears twice")
    assert out == "" and shards[1].name in err


def test_a_split_gguf_part_linked_to_another_part_is_refused(tmp_path):
    shards = _split(tmp_path, 145)
    shards[1].unlink()
    shards[1].symlink_to(shards[0].name)
    code, _, err = run_cli("size", str(shards[2]))
    one_line_error(code, err, "split index 1 appears twice")


def test_a_split_gguf_part_cut_from_another_split_holds_tensors_twice(tmp_path):
    shards = _split(tmp_path, 145)
    other = tmp_path / "other"
    other.mkdir()
    arch, keys = convert(bundled("qwen3-30b-a3b"))
    write_gguf(other / "o.gguf", arch, keys, tensors_for(arch, keys), split_max_tensors=200)
    two = sorted(other.glob("o-*-of-*.gguf"))  # 3 parts too, but split.no 1 of a 200-split
    assert len(two) == 3
    shutil.copy(two[1], shards[1])  # same index and count, another cut: tensors held twice
    code, _, err = run_cli("size", str(shards[0]))
    one_line_error(code, err, f"is also in {shards[1].name}: a part of the split appears twice")


def test_a_split_gguf_part_of_a_split_with_another_count_is_a_count_mismatch(tmp_path):
    shards = _split(tmp_path, 145)
    other = tmp_path / "other"
    other.mkdir()
    arch, keys = convert(bundled("qwen3-30b-a3b"))
    write_gguf(other / "o.gguf", arch, keys, tensors_for(arch, keys), split_max_tensors=110)
    four = sorted(other.glob("o-*-of-*.gguf"))
    assert len(four) == 4
    shutil.copy(four[1], shards[1])  # part 2 of 4 named part 2 of 3
    code, _, err = run_cli("size", str(shards[0]))
    one_line_error(code, err, f"{shards[1].name}: split count mismatch")


def test_a_split_gguf_renamed_out_of_order_is_refused(tmp_path):
    shards = _split(tmp_path, 145)
    tmp = shards[1].with_suffix(".tmp")
    shards[1].rename(tmp)
    shards[2].rename(shards[1])
    tmp.rename(shards[2])
    code, _, err = run_cli("size", str(shards[0]))
    one_line_error(code, err, "holds part 3 of the split, not part 2")


def test_an_intact_split_still_reads(tmp_path):
    shards = _split(tmp_path, 145)
    data = run_json("size", str(shards[0]))
    assert data["model"]["num_layers"] == 48


# ---- a shard that is a link to another file ---------------------------------------------------
SECRET = b"qzxw:x:0:0:qzxw:/qzxw:/bin/bash\nhunter2-SECRET-LINE\n"  # /etc/passwd-like


def _config_folder(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(bundled("llama-3.1-8b")))
    secret = tmp_path / "passwd"
    secret.write_bytes(SECRET)
    return folder, secret


def _never_echoed(err: str) -> None:
    head = struct.unpack("<Q", SECRET[:8])[0]
    for leak in ("qzxw", "hunter2", "SECRET", str(head), f"{head:,}", "/bin/bash"):
        assert leak not in err, err


def test_a_safetensors_shard_linked_to_another_file_prints_none_of_its_bytes(tmp_path):
    folder, secret = _config_folder(tmp_path)
    (folder / "model.safetensors").symlink_to(secret)
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err, "model.safetensors")
    assert "not a safetensors file" in err
    _never_echoed(err)


@pytest.mark.parametrize(
    "head",
    [
        SECRET,
        b"GGUF" + SECRET,  # the magic, then another file's bytes as its version
        b"GGUF\x03\x00\x00\x00" + SECRET,  # a version the reader knows, then garbage counts
    ],
)
def test_a_gguf_linked_to_another_file_prints_none_of_its_bytes(tmp_path, head):
    secret = tmp_path / "passwd"
    secret.write_bytes(head)
    link = tmp_path / "model.gguf"
    link.symlink_to(secret)
    code, _, err = run_cli("size", str(link))
    one_line_error(code, err, "model.gguf: not a GGUF file kvplan can read")
    _never_echoed(err)
    version = struct.unpack("<I", head[4:8])[0]
    if version not in (1, 2, 3):  # a version the reader knows is no secret (and a short number)
        assert f"{version}" not in err.partition("model.gguf")[2]  # the version it read, unsaid


def test_a_split_gguf_shard_linked_to_another_file_prints_none_of_its_bytes(tmp_path):
    shards = _split(tmp_path, 145)
    secret = tmp_path / "passwd"
    secret.write_bytes(SECRET)
    shards[2].unlink()
    shards[2].symlink_to(secret)
    code, _, err = run_cli("size", str(shards[0]))
    one_line_error(code, err, shards[2].name)
    _never_echoed(err)


def test_a_dangling_shard_link_is_named_with_what_is_wrong(tmp_path):
    folder, _ = _config_folder(tmp_path)
    (folder / "model.safetensors").symlink_to(tmp_path / "nowhere")
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err, "model.safetensors: cannot read (No such file or directory)")


# ---- a local path before a bundled name or a Hub id of the same spelling ---------------------
def _half_llama() -> dict:
    config = bundled("llama-3.1-8b")
    config["num_hidden_layers"] = 16  # not the bundled 32: which one was read shows
    return config


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _model_path_note(data: dict) -> str:
    (words,) = [n["text"] for n in data["notes"] if n["id"] == "model-path"]
    return words


@pytest.mark.parametrize(
    "argument,where",
    [
        ("Llama-3.1-8B.json", "Llama-3.1-8B.json"),  # a bundled file name
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B/config.json"),  # a bundled Hub id
        ("llama-3.1-8b", "llama-3.1-8b/config.json"),  # a bundled alias
    ],
)
def test_a_local_path_wins_over_the_bundled_name_and_says_so(in_folder, argument, where):
    target = in_folder / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(_half_llama()))
    data = run_json("size", argument)
    assert data["model"]["num_layers"] == 16
    words = _model_path_note(data)
    assert where in words and "not the bundled llama-3.1-8b config" in words


def test_a_local_folder_wins_over_a_hub_id_and_says_so(in_folder):
    (in_folder / "acme" / "tiny").mkdir(parents=True)
    (in_folder / "acme" / "tiny" / "config.json").write_text(json.dumps(_half_llama()))
    data = run_json("size", "acme/tiny")  # never asked of the Hub
    assert data["model"]["num_layers"] == 16
    assert "not the Hub repository acme/tiny" in _model_path_note(data)


def test_a_plain_local_path_is_named(in_folder):
    (in_folder / "mine.json").write_text(json.dumps(_half_llama()))
    for argument in ("mine.json", "./mine.json", str(in_folder / "mine.json")):
        words = _model_path_note(run_json("size", argument))
        assert words.startswith("Config read from the local path ") and "not the" not in words


def test_without_the_path_the_bundled_config_is_read(in_folder):
    data = run_json("size", "Llama-3.1-8B.json")
    assert data["model"]["num_layers"] == 32
    assert not [n for n in data["notes"] if n["id"] == "model-path"]


def test_an_empty_folder_named_like_a_bundled_model_says_why_it_was_read(in_folder):
    (in_folder / "llama-3.1-8b").mkdir()
    code, _, err = run_cli("size", "llama-3.1-8b")
    one_line_error(code, err, "llama-3.1-8b/config.json: no such config file")
    assert "an existing path is read before the bundled model of the same name" in err
    (in_folder / "qwen3-8b").write_text("a log, not a config")  # a file, not a folder
    code, _, err = run_cli("size", "qwen3-8b")
    one_line_error(code, err, "qwen3-8b: invalid JSON")
    assert "an existing path is read before the bundled model of the same name" in err


COMMANDS = [
    ["size"],
    ["capacity"],
    ["engine", "--engine", "vllm"],
    ["engine", "--engine", "sglang"],
    ["engine", "--engine", "llama.cpp"],
    ["roofline"],
    ["whatif", "--apply", "fp8"],
    ["simulate", "--num-prompts", "20"],
    ["plan", "--rate", "1", "--slo", "ttft_p99=2s", "--num-prompts", "20", "--gpu", "h100"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_every_command_reads_the_same_path_and_names_it(in_folder, command):
    (in_folder / "Llama-3.1-8B.json").write_text(json.dumps(_half_llama()))
    name, *options = command
    data = run_json(name, "Llama-3.1-8B.json", *options)
    assert "not the bundled llama-3.1-8b config" in _model_path_note(data)


def test_the_python_twin_reads_the_same_path(in_folder):
    from kvplan.inputs.sources import load_model, resolve

    (in_folder / "llama-3.1-8b").mkdir()
    (in_folder / "llama-3.1-8b" / "config.json").write_text(json.dumps(_half_llama()))
    assert resolve("llama-3.1-8b").kind == "path"
    assert load_model("llama-3.1-8b").num_layers == 16


def test_the_bundled_listing_and_defaults_never_read_a_local_path(in_folder):
    from kvplan.inputs.sources import load_bundled

    (in_folder / "llama-3.1-8b").mkdir()
    (in_folder / "llama-3.1-8b" / "config.json").write_text(json.dumps(_half_llama()))
    assert load_bundled("llama-3.1-8b").num_layers == 32
    rows = {r["name"]: r for r in run_json("models")["models"]}
    assert rows["llama-3.1-8b"]["params_total"] > 8e9


# ---- a --max-model-len the engine refuses to start with ---------------------------------------
VLLM_REFUSAL = "vLLM refuses to start unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
SGLANG_REFUSAL = "SGLang refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["engine", "llama-3.1-8b", "--max-model-len", "200k"], VLLM_REFUSAL),
        (["engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "200k"], SGLANG_REFUSAL),
        (["simulate", "llama-3.1-8b", "--max-model-len", "200k"], VLLM_REFUSAL),
        (
            ["simulate", "llama-3.1-8b", "--engine", "sglang", "--max-model-len", "200k"],
            SGLANG_REFUSAL,
        ),
        (["engine", "llama-2-7b", "--max-model-len", "4097"], VLLM_REFUSAL),
        (["capacity", "llama-2-7b", "--ctx", "32k", "--emit", "vllm"], VLLM_REFUSAL),
        (["capacity", "llama-2-7b", "--ctx", "32k", "--emit", "sglang-docker"], SGLANG_REFUSAL),
        (
            ["plan", "llama-2-7b", "--rate", "1", "--slo", "ttft_p99=2s", "--max-model-len", "8k"],
            VLLM_REFUSAL,
        ),
    ],
)
def test_a_max_model_len_past_the_engines_limit_is_refused(argv, needle):
    code, out, err = run_cli(*argv)
    err = one_line_error(code, err, needle)
    assert out == ""
    assert "tokens vLLM derives" in err or "tokens SGLang derives" in err
    if argv[0] != "plan":  # plan has no override: the refusal names only the engine's
        assert "--allow-long-max-model-len" in err


def test_the_limit_is_named_with_its_key():
    code, _, err = run_cli("engine", "llama-3.1-8b", "--max-model-len", "200k")
    one_line_error(code, err, "--max-model-len 204,800 is over the 131,072 tokens")
    assert "(max_position_embeddings)" in err
    code, _, err = run_cli("engine", "deepseek-v2-lite", "--max-model-len", "163841")
    one_line_error(code, err, "163,840 tokens vLLM derives")
    assert "original_max_position_embeddings x rope factor 40" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["engine", "llama-3.1-8b", "--max-model-len", "200k"],
        ["engine", "llama-3.1-8b", "--engine", "sglang", "--ctx", "200k"],
        ["simulate", "llama-3.1-8b", "--max-model-len", "200k", "--num-prompts", "20"],
    ],
)
def test_with_the_override_the_launch_is_predicted_with_a_note(argv):
    data = run_json(*argv, "--allow-long-max-model-len")
    (words,) = [n["text"] for n in data["notes"] if n["id"] == "engine-long-max-model-len"]
    assert "204,800 tokens is past the 131,072" in words and "ALLOW" in words


def test_within_the_limit_there_is_no_note():
    data = run_json("engine", "llama-3.1-8b", "--max-model-len", "128k")
    assert not [n for n in data["notes"] if n["id"] == "engine-long-max-model-len"]


def test_the_default_length_stays_within_a_short_model():
    # phi-2 states 2,048 positions: kvplan's 8k default would be a launch vLLM refuses
    data = run_json("engine", "phi-2")
    assert data["max_model_len"] == 2048
    data = run_json("simulate", "phi-2", "--num-prompts", "20")
    assert data["setup"]["max_model_len"] == 2048


def test_capacity_emits_the_override_with_the_flag():
    argv = ("capacity", "llama-2-7b", "--ctx", "32k", "--allow-long-max-model-len")
    code, out, err = run_cli(*argv, "--emit", "vllm")
    assert code == 0, err
    assert out.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve") and "32768" in out
    code, out, _ = run_cli(*argv, "--emit", "sglang-docker")
    assert code == 0 and "-e SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in out
    code, out, _ = run_cli(*argv, "--emit", "vllm-k8s")
    assert code == 0 and '{name: VLLM_ALLOW_LONG_MAX_MODEL_LEN, value: "1"}' in out
    code, out, _ = run_cli("capacity", "llama-2-7b", "--ctx", "4k", "--emit", "vllm")
    assert code == 0 and "ALLOW" not in out  # within the limit: the plain command
    code, _, err = run_cli(*argv)
    one_line_error(code, err, "--allow-long-max-model-len applies to --emit")
    code, _, err = run_cli("engine", "llama-2-7b", "--engine", "llama.cpp", argv[-1])
    one_line_error(code, err, "--allow-long-max-model-len does not apply to llama.cpp")


def _limits(**config):
    from kvplan.engines.max_len import sglang_max_len, vllm_max_len

    from helpers import llama_like, spec_from

    spec = spec_from(llama_like(**config))
    return vllm_max_len(spec).tokens, sglang_max_len(spec).tokens


@pytest.mark.parametrize(
    "config,vllm,sglang",
    [
        ({"max_position_embeddings": 4096}, 4096, 4096),
        # vLLM: the smallest key; SGLang: the first of its own order
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048, 2048),
        ({"max_position_embeddings": 4096, "n_positions": 1024}, 1024, 4096),
        # a config's model_max_length is the limit (Command-R)
        ({"max_position_embeddings": 8192, "model_max_length": 131072}, 131072, 131072),
        # rope scaling: linear and dynamic multiply, YaRN multiplies the original length,
        # llama3 is already scaled; SGLang keeps the length where an original is stated
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}},
            16384,
            16384,
        ),
        (
            {
                "max_position_embeddings": 4096,
                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
            },
            8192,
            8192,
        ),
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            },
            131072,
            32768,
        ),
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "original_max_position_embeddings": 8192,
                },
            },
            131072,
            131072,
        ),
    ],
)
def test_the_engines_derive_their_limits_as_they_do(config, vllm, sglang):
    assert _limits(**config) == (vllm, sglang)


def test_a_config_without_a_length_key():
    # vLLM takes the user's length; SGLang assumes 2,048
    assert _limits() == (None, 2048)
