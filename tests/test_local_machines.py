"""Local machines: a Mac named with its memory, macOS's GPU share of it, Ollama as an engine, and
`kvplan fit` (what runs here)."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import bundled_profiles, load_profile
from kvplan.inputs.local_gpu import apple_default_working_set_bytes
from kvplan.inputs.sources import load_model
from kvplan.units import GIB, MIB

from helpers import run_cli


def test_a_64gb_mac_gets_three_quarters_of_64_gib():
    gpu = load_profile("m3-max-64gb")
    # 64 GiB x 3/4 = 48 GiB = 51,539,607,552 B (ggml: recommendedMaxWorkingSetSize = 51539.61 MB)
    assert gpu.memory_bytes == 64 * 2**30
    assert gpu.usable_memory_bytes == 51_539_607_552
    assert gpu.memory_bandwidth_bytes_per_s == 400e9 and gpu.sm_count == 40
    assert gpu.name == "Apple M3 Max 64GB"


def test_a_small_mac_gets_two_thirds_and_the_sysctl_overrides():
    # 24 GiB x 2/3 = 16 GiB; 32 GiB x 2/3 = 22,906.50 MB as ggml logs it on a 32 GB M1 Pro
    assert load_profile("m4-pro-24gb").usable_memory_bytes == 16 * GIB
    assert apple_default_working_set_bytes(32 * GIB) / 1e6 == pytest.approx(22906.50, abs=0.01)
    # 36 GiB is above the step: 3/4, 28,991.03 MB
    assert load_profile("m3-pro-36gb").usable_memory_bytes / 1e6 == pytest.approx(
        28991.03, abs=0.01
    )
    assert apple_default_working_set_bytes(64 * GIB, wired_limit_mb=57344) == 56 * GIB
    assert apple_default_working_set_bytes(64 * GIB, wired_limit_mb=0) == 48 * GIB
    assert 57344 * MIB == 56 * GIB


def test_a_configuration_takes_the_chip_sold_with_it():
    small = load_profile("m3-max-36gb")  # the 14-core CPU / 30-core GPU part, 300 GB/s
    big = load_profile("apple-m3-max-128GB")
    assert (small.sm_count, small.memory_bandwidth_bytes_per_s) == (30, 300e9)
    assert small.peak("bf16") == pytest.approx(14.32e12 * 30 / 40)
    assert big.usable_memory_bytes == 96 * GIB and big.sm_count == 40


def test_a_bare_mac_is_refused_naming_its_sizes_in_one_line():
    with pytest.raises(KvplanError, match="m3-max-48gb, m3-max-64gb"):
        load_profile("m3-max")
    with pytest.raises(KvplanError, match="not sold with 65 GB"):
        load_profile("m3-max-65gb")
    code, out, err = run_cli("capacity", "llama-3.1-8b", "--gpu", "m4-max")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "m4-max-36gb, m4-max-48gb, m4-max-64gb, m4-max-128gb" in err
    # the memory told another way: the chip's name is enough
    code, out, err = run_cli(
        "engine",
        "llama-3.1-8b",
        "--engine",
        "llama.cpp",
        "--gpu",
        "m3-max",
        "--gpu-memory",
        "40GiB",
        "-c",
        "8k",
        "--format",
        "json",
    )
    assert code == 0, err and '"gpu_capacity_bytes": 42949672960' in out


def test_every_apple_profile_names_sizes_and_its_largest_is_the_listed_figure():
    apple = [p for p in bundled_profiles().values() if p.vendor == "Apple"]
    assert len(apple) >= 9
    for p in apple:
        assert p.memory_configurations, p.key
        largest = p.memory_configurations[-1].memory_gib
        assert p.memory_bytes == largest * 1e9  # the listing keeps the largest configuration
        assert load_profile(f"{p.aliases[0]}-{largest}gb").usable_memory_bytes == pytest.approx(
            p.memory_reported_bytes
        )


def _engine_json(*argv: str, expect: int = 0) -> dict:
    import json

    code, out, err = run_cli("engine", *argv, "--format", "json")
    assert code == expect, err
    return json.loads(out)


def test_ollama_is_an_engine_with_its_defaults():
    d = _engine_json("llama-3.1-8b", "--engine", "ollama", "--gpu", "rtx-4090")
    assert d["engine"] == "ollama" and d["engine_version"] == "0.33"
    o, s = d["ollama"], d["settings"]
    # 0.33 on a 24 GB card: the >= 23 GiB tier gives num_ctx 32,768; OLLAMA_NUM_PARALLEL 1;
    # f16 cache; flash attention auto (Ollama's default where the GPU supports it); -b = -ub = 512
    assert (o["num_ctx"], o["num_parallel"], o["cache_type"], o["flash_attn"]) == (
        32768,
        1,
        "f16",
        "auto",
    )
    assert (s["n_ctx"], s["n_seq_max"], s["kv_unified"], s["n_batch"], s["n_ubatch"]) == (
        32768,
        1,
        False,
        512,
        512,
    )
    # PredictServerVRAM: 2 x 32 layers x 8 KV heads x (4096 / 32) x 32,768 tokens x 2 B = 4 GiB
    assert d["ollama_estimate"]["kv_bytes"] == 4 * GIB
    e = d["ollama_estimate"]
    assert e["total_bytes"] == e["weights_bytes"] + 4 * GIB
    # the allocation itself is llama.cpp's at -c 32768 -np 1 -b 512 -ub 512
    ll = _engine_json(
        "llama-3.1-8b",
        "--engine",
        "llama.cpp",
        "--gpu",
        "rtx-4090",
        "-c",
        "32768",
        "-np",
        "1",
        "-b",
        "512",
        "-ub",
        "512",
    )
    assert d["gpu_memory"] == ll["gpu_memory"] and d["caches"] == ll["caches"]


def test_ollama_reads_its_environment_and_the_old_spelling_still_works():
    d = _engine_json(
        "llama-3.1-8b",
        "--engine",
        "ollama",
        "--gpu",
        "m3-max-64gb",
        "--ctx",
        "8k",
        "--ollama-env",
        "OLLAMA_NUM_PARALLEL=2",
        "--ollama-env",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
    )
    s = d["settings"]
    # num_ctx is per sequence: -c 8192 x 2 in two streams of 8,192 cells
    assert (s["n_ctx"], s["n_ctx_seq"], s["n_stream"], s["cache_type_k"]) == (
        16384,
        8192,
        2,
        "q8_0",
    )
    old = _engine_json(
        "llama-3.1-8b", "--engine", "llama.cpp", "--ollama", "0.33", "--gpu", "rtx-4090"
    )
    new = _engine_json("llama-3.1-8b", "--engine", "ollama", "--gpu", "rtx-4090")
    assert old["engine"] == "ollama" and old["gpu_memory"] == new["gpu_memory"]
    assert "ollama-flag-deprecated" in [n["id"] for n in old["notes"]]
    assert "ollama-flag-deprecated" not in [n["id"] for n in new["notes"]]


def test_ollama_refuses_llamacpp_flags_naming_its_own_in_one_line():
    for argv, words in (
        (("-np", "2"), "OLLAMA_NUM_PARALLEL"),
        (("-ctk", "q8_0"), "OLLAMA_KV_CACHE_TYPE"),
        (("--kv-cache-dtype", "fp8"), "does not apply to Ollama"),
        (("--ollama-version", "x.y"), "not an Ollama version"),
        (("--ctx", "0"), "num_ctx"),
    ):
        code, out, err = run_cli(
            "engine", "llama-3.1-8b", "--engine", "ollama", "--gpu", "l4", *argv
        )
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert words in err, (argv, err)
    code, _, err = run_cli(
        "engine", "llama-3.1-8b", "--engine", "llama.cpp", "--ollama-version", "0.33"
    )
    assert code == 2 and "--engine ollama" in err


# ---- kvplan fit -------------------------------------------------------------------------------
def _fit(*argv: str, expect: int = 0) -> dict:
    import json

    code, out, err = run_cli("fit", *argv, "--format", "json")
    assert code == expect, err
    return json.loads(out)


def test_a_fit_row_is_hand_computable():
    d = _fit("llama-3.1-8b", "--gpu", "m3-max-64gb", "--ctx", "8k", "--weights-type", "q4_K")
    assert d["gpu_capacity_bytes"] == 48 * GIB  # 3/4 of a 64 GB Mac
    (row,) = d["rows"]
    # 32 layers x 8 KV heads x 128 x (K + V) x 2 B (f16) x 8,192 cells = 1 GiB exactly
    assert row["kv_bytes"] == GIB and row["reserve_bytes"] == GIB
    assert row["gpu_bytes"] == row["weights_bytes"] + 2 * GIB
    assert row["headroom_bytes"] == 48 * GIB - row["gpu_bytes"]
    # q4_K is 4.5 bits: 144 B per 256 values; the norms F32, as convert_hf_to_gguf.py writes
    # every norm: each of the 32 blocks' attn_norm and ffn_norm and the final one, 4,096 each
    params = load_model("llama-3.1-8b").params_total
    norms = (32 * 2 + 1) * 4096
    assert row["bits_per_weight"] == pytest.approx((4.5 * (params - norms) + 32 * norms) / params)


def _engine_of(command: str) -> dict:
    import json
    import shlex

    words = shlex.split(command)
    assert words[:2] == ["kvplan", "engine"]
    code, out, err = run_cli(*words[1:], "--format", "json")
    assert code == 0, err
    return json.loads(out)["gpu_memory"]


def test_fit_rows_are_the_bytes_kvplan_engine_prints():
    d = _fit(
        "llama-3.1-8b",
        "gemma-2-9b",
        "qwen3-next-80b-a3b",
        "--gpu",
        "rtx-4090",
        "--ctx",
        "4k,32k",
        "--every-type",
        "--top",
        "0",
    )
    assert {r["model"] for r in d["rows"]} >= {"llama-3.1-8b", "gemma-2-9b"}
    for row in d["rows"][::3]:  # sliding windows (gemma-2), every type, two contexts
        gpu = _engine_of(row["command"])
        assert (gpu["weights_bytes"], gpu["kv_bytes"], gpu["state_bytes"]) == (
            row["weights_bytes"],
            row["kv_bytes"],
            row["state_bytes"],
        ), row["command"]
        assert (
            gpu["weights_bytes"] + gpu["kv_bytes"] + gpu["state_bytes"] + gpu["reserve_bytes"]
            == row["gpu_bytes"]
        )
    for row in d["rows"]:
        assert row["gpu_bytes"] <= d["gpu_capacity_bytes"]
    keys = [(-r["params_total"], -r["bits_per_weight"], -r["context_len"]) for r in d["rows"]]
    assert keys == sorted(keys)


def test_fit_sizes_a_gguf_file_as_stored(tmp_path):
    from gguf_fixtures import bundled, convert, tensors_for, write_gguf

    arch, keys = convert(bundled("llama-3.1-8b"))
    path = tmp_path / "llama.gguf"
    write_gguf(path, arch, keys, tensors_for(arch, keys, "Q4_K"))
    d = _fit(str(path), "--gpu", "rtx-3090", "--ctx", "8k,32k")
    assert d["rows"] and all(r["weights_stored"] for r in d["rows"])
    for row in d["rows"]:
        assert "--weights-type" not in row["command"]
        gpu = _engine_of(row["command"])
        assert gpu["kv_bytes"] == row["kv_bytes"] and gpu["weights_bytes"] == row["weights_bytes"]


def test_fit_takes_the_memory_and_says_what_is_too_large():
    d = _fit("llama-3.1-70b", "llama-3.1-8b", "--gpu", "m3-max", "--gpu-memory", "20GiB")
    assert d["gpu_capacity_bytes"] == 20 * GIB
    assert [t["model"] for t in d["too_large"]] == ["llama-3.1-70b"]
    assert d["too_large"][0]["smallest_gpu_bytes"] > 20 * GIB
    assert all("--gpu-memory 21474836480B" in r["command"] for r in d["rows"])
    # past the training context: the training context is tried instead, and said
    d = _fit("llama-2-7b", "--gpu", "rtx-4090", "--ctx", "32k")
    assert {r["context_len"] for r in d["rows"]} == {4096}
    assert "fit-training-context" in [n["id"] for n in d["notes"]]


@pytest.mark.parametrize(
    "argv, words",
    [
        (("--top", "-1"), "--top"),
        (("--ctx", "0"), "context"),
        (("--cache-type", "q9_9"), "--cache-type"),
        (("--weights-type", "q9_K"), "q9_K"),
        (("--gpu-memory", "12"), "needs a unit"),
        (("--gpu", "m3-max"), "m3-max-64gb"),
    ],
)
def test_fit_bad_input_is_one_line_and_exit_2(argv, words):
    gpu = () if "--gpu" in argv else ("--gpu", "l4")
    code, out, err = run_cli("fit", "llama-3.1-8b", *gpu, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert words in err, err


def test_fit_orders_types_by_bits_and_drops_repeats():
    d = _fit(
        "llama-3.1-8b",
        "--gpu",
        "l4",
        "--ctx",
        "8k,8k",
        "--weights-type",
        "q2_K",
        "--weights-type",
        "q8_0",
        "--weights-type",
        "q8_0",
    )
    assert [(r["weights_type"], r["context_len"]) for r in d["rows"]] == [("q8_0", 8192)]


def test_local_on_a_mac_reads_its_memory_and_takes_the_chip_sold_with_it(monkeypatch):
    import kvplan.inputs.local_gpu as local

    sysctl = {"hw.memsize": str(36 * GIB), "iogpu.wired_limit_mb": "0"}
    monkeypatch.setattr(local, "_sysctl", lambda name: sysctl.get(name, ""))
    monkeypatch.setattr(local, "_apple_chip", lambda: "Apple M3 Max")
    monkeypatch.setattr(local.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(local.platform, "machine", lambda: "arm64")
    name, memory, how = local._apple_device()
    assert (name, memory) == ("Apple M3 Max", 27 * GIB)  # 3/4 of 36 GiB
    monkeypatch.setattr(local, "read_local_device", lambda: (name, memory, how))
    gpu = load_profile("local")
    assert gpu.usable_memory_bytes == 27 * GIB
    assert (gpu.sm_count, gpu.memory_bandwidth_bytes_per_s) == (30, 300e9)  # the 30-core part
    sysctl["iogpu.wired_limit_mb"] = "30720"  # raised by hand: 30 GiB
    assert local._apple_device()[1] == 30 * GIB


def test_fit_asks_this_machine_without_gpu_and_says_so_when_none(monkeypatch):
    import kvplan.inputs.local_gpu as local
    from kvplan.errors import KvplanError as Error

    def no_device():
        raise Error("--gpu local: no GPU found")

    monkeypatch.setattr(local, "read_local_device", no_device)
    code, out, err = run_cli("fit", "llama-3.1-8b")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--gpu rtx-4090" in err
    monkeypatch.setattr(
        local, "read_local_device", lambda: ("NVIDIA GeForce RTX 4090", 25756696576, "torch")
    )
    d = _fit("llama-3.1-8b", "--ctx", "8k")
    assert d["gpu"] == "NVIDIA GeForce RTX 4090 (local)" and d["gpu_argument"] == "local"
    assert d["rows"][0]["command"].split("--gpu ")[1].startswith("local ")


def test_the_old_version_flag_under_ollama_is_said_and_other_engines_refuse_it():
    d = _engine_json("llama-3.1-8b", "--engine", "ollama", "--ollama", "0.6.7", "--gpu", "l4")
    assert d["engine_version"] == "0.6.7" and d["ollama"]["num_ctx"] == 4096
    assert "ollama-flag-deprecated" in [n["id"] for n in d["notes"]]
    code, _, err = run_cli("engine", "llama-3.1-8b", "--engine", "vllm", "--ollama-env", "X=1")
    assert code == 2 and "an Ollama flag" in err
