"""llama.cpp's allocation and log lines against real logs (tests/data/llamacpp_logs.json, each
with its source) and hand-computed values; Ollama's preset; offload and the decode ceiling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.llamacpp import LlamaCppRequest, llamacpp_allocation
from kvplan.inputs.hardware import bundled_profiles, load_profile
from kvplan.inputs.local_gpu import apple_default_working_set_bytes
from kvplan.inputs.sources import load_model
from kvplan.present.engines import llamacpp_log_lines
from kvplan.units import GIB, MIB

from gguf_fixtures import CONFIGS, bundled, convert, tensors_for, write_gguf
from helpers import run_cli

LOGS = json.loads((Path(__file__).parent / "data" / "llamacpp_logs.json").read_text())["entries"]
# Entries whose logs had their whitespace altered on the way (noted in the research data).
WHITESPACE_ALTERED = {7, 8, 11, 16}


def _log_model(entry, tmp_path):
    path = tmp_path / "model.gguf"
    keys = entry["keys"]
    write_gguf(
        path, entry["arch"], keys, [("token_embd.weight", (keys["embedding_length"], 32000), "F16")]
    )
    return load_model(str(path))


@pytest.mark.parametrize("index", range(len(LOGS)), ids=lambda i: f"log{LOGS[i]['log']}-{i}")
def test_allocation_and_lines_match_real_logs(index, tmp_path):
    entry = LOGS[index]
    spec = _log_model(entry, tmp_path)
    result = llamacpp_allocation(
        spec, load_profile("h200"), LlamaCppRequest(build=entry["build"], **entry["request"])
    )
    got = [
        [c.kind, c.cells, c.layers, round(c.k_bytes / MIB, 2), round(c.v_bytes / MIB, 2)]
        for c in result.caches
    ]
    assert got == entry["expected"], entry["source"]
    lines = llamacpp_log_lines(result)
    for line in entry["log_lines"]:
        if entry["log"] in WHITESPACE_ALTERED:
            assert "".join(line.split()) in {"".join(x.split()) for x in lines}, line
        else:
            assert line in lines, line


def _gguf(name, tmp_path, weight_type="Q4_K"):
    arch, keys = convert(bundled(name))
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, arch, keys, tensors_for(arch, keys, weight_type))
    return load_model(str(path))


def test_hand_computed_cache_sizes(tmp_path):
    spec = _gguf("llama-3.1-8b", tmp_path)
    gpu = load_profile("rtx-3090")
    # 32 layers x 8 KV heads x 128: a q8_0 row of 1024 values is 32 blocks x 34 B = 1088 B.
    r = llamacpp_allocation(
        spec,
        gpu,
        LlamaCppRequest(ctx_size=8192, parallel=1, cache_type_k="q8_0", cache_type_v="q4_0"),
    )
    (cache,) = r.caches
    assert cache.k_bytes == 8192 * 32 * 1088 and cache.v_bytes == 8192 * 32 * 576
    # -c 10000 -np 3: n_ctx 10240, each stream pad256(10240 // 3 = 3413) = 3584 cells.
    r = llamacpp_allocation(spec, gpu, LlamaCppRequest(ctx_size=10000, parallel=3))
    assert (r.settings.n_ctx, r.settings.n_ctx_seq, r.settings.n_stream) == (10752, 3584, 3)
    assert r.caches[0].k_bytes == 3 * 3584 * 32 * 1024 * 2
    # Gemma 3 27B: 52 sliding layers keep pad256(min(32768, 1024 + 512)) = 1536 cells.
    spec = _gguf("gemma-3-27b", tmp_path)
    r = llamacpp_allocation(spec, gpu, LlamaCppRequest(ctx_size=32768, parallel=1))
    full, swa = r.caches
    assert (full.cells, full.layers, swa.cells, swa.layers) == (32768, 10, 1536, 52)
    assert swa.k_bytes == 1536 * 52 * 16 * 128 * 2


def test_errors_in_llama_cpps_words(tmp_path):
    path = tmp_path / "m.gguf"
    arch, keys = convert(bundled("llama-3.1-8b"))
    write_gguf(path, arch, keys, tensors_for(arch, keys))
    base = ("engine", str(path), "--engine", "llama.cpp", "--gpu", "rtx-3090")
    code, _, err = run_cli(*base, "-ctv", "q8_0", "-fa", "off")
    assert code == 2 and "quantized V cache requires flash_attn" in err
    code, _, err = run_cli(*base, "-ctk", "q3_K")
    assert code == 2 and "cache types are" in err
    code, _, err = run_cli(*base, "--tp", "2")
    assert code == 2 and "--tp does not apply to llama.cpp" in err
    code, _, err = run_cli("engine", "llama-3.1-8b", "--engine", "vllm", "-ngl", "20")
    assert code == 2 and "--n-gpu-layers is a llama.cpp flag" in err
    code, _, err = run_cli(*base, "-ngl", "-3")
    assert code == 2 and "error:" in err


def test_offload_and_decode_ceiling_by_hand(tmp_path):
    spec = _gguf("llama-3.1-8b", tmp_path)
    gpu = load_profile("rtx-3090")
    host = load_profile("desktop-ddr5")
    layers = spec.stored.layer_bytes
    request = LlamaCppRequest(ctx_size=4096, parallel=1, n_gpu_layers=20, host=host)
    r = llamacpp_allocation(spec, gpu, request)
    # -ngl 20 on 32 blocks: the output layer and blocks 13..31
    assert (r.placement.first_gpu_layer, r.placement.output_on_gpu) == (13, True)
    kv_per_layer = 4096 * 1024 * 2 * 2
    assert r.gpu_memory.kv_bytes == 19 * kv_per_layer
    assert r.host_memory.kv_bytes == 13 * kv_per_layer
    assert (
        r.gpu_memory.weights_bytes
        == sum(layers[13:]) + spec.stored.part_bytes["lm_head"] + 4096 * 4
    )
    empty = r.decode[0]
    gpu_read = sum(layers[13:]) + spec.stored.part_bytes["lm_head"] + 4096 * 4
    host_read = sum(layers[:13]) + spec.stored.part_bytes["embedding"] / spec.vocab_size
    expected = gpu_read / gpu.memory_bandwidth_bytes_per_s + host_read / 89.6e9
    assert empty.context_len == 0 and empty.step_s == pytest.approx(expected)


def test_largest_gpu_layers_and_context_fit(tmp_path):
    spec = _gguf("qwen3-30b-a3b", tmp_path, "Q4_K")
    gpu = load_profile("rtx-3090")
    r = llamacpp_allocation(spec, gpu, LlamaCppRequest(ctx_size=32768, parallel=1))
    # the most layers that fit: one more would not
    more = llamacpp_allocation(
        spec, gpu, LlamaCppRequest(ctx_size=32768, parallel=1, n_gpu_layers=r.max_gpu_layers + 1)
    )
    assert r.fits and (r.max_gpu_layers == spec.num_layers + 1 or not more.fits)
    by_type = {c.cache_type: c for c in r.context_fit}
    assert (
        by_type["q8_0"].max_ctx_size >= by_type["f16"].max_ctx_size >= by_type["f32"].max_ctx_size
    )
    f16 = by_type["f16"]
    if not f16.capped:
        at = llamacpp_allocation(
            spec, gpu, LlamaCppRequest(ctx_size=f16.max_ctx_size, parallel=1, n_gpu_layers=999)
        )
        over = llamacpp_allocation(
            spec,
            gpu,
            LlamaCppRequest(ctx_size=f16.max_ctx_size + 256, parallel=1, n_gpu_layers=999),
        )
        assert at.fits and not over.fits


def test_ollama_preset(tmp_path):
    spec = _gguf("qwen3-30b-a3b", tmp_path)
    base = ("engine", str(spec.source.removeprefix("gguf:")), "--engine", "llama.cpp", "-f", "json")
    # 0.33 on a 24 GB card: the 23 GiB tier, num_ctx 32768, one sequence, split streams
    code, out, err = run_cli(*base, "--gpu", "rtx-3090", "--ollama", "0.33")
    assert code == 0, err
    s = json.loads(out)["settings"]
    assert (s["n_ctx"], s["n_seq_max"], s["kv_unified"], s["n_ubatch"]) == (32768, 1, False, 512)
    # 0.6.7: 4096 per sequence, 2 sequences -> -c 8192 -np 2, 2 streams of 4096
    code, out, err = run_cli(
        *base,
        "--gpu",
        "rtx-3090",
        "--ollama",
        "0.6.7",
        "--ollama-env",
        "OLLAMA_FLASH_ATTENTION=1",
        "--ollama-env",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
    )
    s = json.loads(out)["settings"]
    assert (s["n_ctx"], s["n_ctx_seq"], s["n_stream"], s["cache_type_k"]) == (8192, 4096, 2, "q8_0")
    # 48 GiB cards get 262144, capped to the model's training context (40960)
    code, out, err = run_cli(*base, "--gpu", "rtx-a6000", "--ollama", "0.33")
    assert json.loads(out)["settings"]["n_ctx"] == 40960
    # a release newer than kvplan's rules is said, not silently read as the newest known
    code, out, err = run_cli(*base, "--gpu", "rtx-a6000", "--ollama", "99.99")
    assert code == 0, err
    assert "ollama-newer" in [n["id"] for n in json.loads(out)["notes"]]
    code, out, err = run_cli(*base, "--gpu", "rtx-a6000", "--ollama", "0.33")
    assert "ollama-newer" not in [n["id"] for n in json.loads(out)["notes"]]
    code, _, err = run_cli(*base, "--ollama-env", "OLLAMA_BOGUS=1")
    assert code == 2 and "--ollama-env" in err


def test_apple_working_set_defaults_match_the_profiles():
    for key in ("apple-m3-max", "apple-m3-pro", "apple-m1-max"):
        gpu = bundled_profiles()[key]  # the listed, largest configuration
        ram = gpu.memory_bytes / 1e9 * GIB  # Apple's "GB" are GiB
        assert apple_default_working_set_bytes(ram) == pytest.approx(gpu.memory_reported_bytes)
    # 32 GiB and below: 2/3 (ggml logs 22906.50 MB on a 32 GB M1 Pro)
    assert apple_default_working_set_bytes(32 * GIB) / 1e6 == pytest.approx(22906.50, abs=0.01)


def test_the_engine_command_on_a_mac_and_a_24gb_gpu(tmp_path):
    spec = _gguf("qwen3-30b-a3b", tmp_path)
    path = spec.source.removeprefix("gguf:")
    code, out, err = run_cli(
        "engine", path, "--engine", "llama.cpp", "--gpu", "m3-max-128gb", "-c", "32k"
    )
    assert code == 0, err and "MTL0" in out
    code, out, err = run_cli(
        "engine",
        path,
        "--engine",
        "llama.cpp",
        "--gpu",
        "rtx-3090",
        "-c",
        "32k",
        "-np",
        "1",
        "-f",
        "json",
    )
    data = json.loads(out)
    assert code == 0 and data["log_lines"] and data["recommended"] is not None


def _convertible():
    names = []
    for name in json.loads((CONFIGS / "index.json").read_text())["models"]:
        try:
            convert(bundled(name))
        except (ValueError, KeyError):  # an architecture the fixture writer does not convert
            continue
        names.append(name)
    return names


def test_anatomy_op_list_placed_gives_the_decode_split(tmp_path):
    """The anatomy's operator list (step_ops: one decode at 4k, the head sampled, the whole
    model), placed block by block by -ngl's rule, reads the same bytes from each memory as
    llama.cpp's own decode step, for every bundled model the fixture writer converts to a GGUF
    of one weight type, with an f16 cache, at half and full offload."""
    from kvplan.dtypes import KvFormat
    from kvplan.engines.llamacpp import decode_ceiling, model_weights, placement, resolve_settings
    from kvplan.formulas.offload import placed_bytes
    from kvplan.formulas.step_time import ops_by_layer, step_ops

    names = _convertible()
    assert len(names) >= 30, names
    for name in names:
        spec = _gguf(name, tmp_path)
        s, _ = resolve_settings(spec, LlamaCppRequest(ctx_size=4096, parallel=1))
        w, _ = model_weights(spec, None)
        groups = step_ops(
            spec, "checkpoint", KvFormat("fp16"), 1, 4096, num_sampled=1, whole_model=True
        )
        layers = ops_by_layer(spec, groups, 1)
        n = spec.num_layers
        for ngl in (n // 2, n + 1):
            p = placement(n, ngl, s.build, False)
            old = decode_ceiling(spec, w, s, p, 4096, 1e12, 1e11, False)
            gpu, host = placed_bytes(layers, n, p.first_gpu_layer, p.output_on_gpu)
            assert gpu == pytest.approx(old.gpu_read_bytes, rel=1e-12), (name, ngl)
            assert host == pytest.approx(old.host_read_bytes, rel=1e-12), (name, ngl)
            # -nkvo: every cache in host memory, the weights where -ngl puts them
            old = decode_ceiling(spec, w, s, p, 4096, 1e12, 1e11, True)
            gpu, host = placed_bytes(layers, n, p.first_gpu_layer, p.output_on_gpu, False)
            assert gpu == pytest.approx(old.gpu_read_bytes, rel=1e-12), (name, ngl)
            assert host == pytest.approx(old.host_read_bytes, rel=1e-12), (name, ngl)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-4b", "qwen3-30b-a3b"])
def test_the_output_layer_holds_the_final_norm_from_a_config_as_from_its_gguf(name, tmp_path):
    """The output layer llama.cpp places (-ngl's block L) is the head and output_norm: from a
    config priced in the weight type with the norm in F32 (as convert_hf_to_gguf.py writes it),
    the same bytes as the GGUF's own tensors."""
    from kvplan.engines.llamacpp import model_weights

    config = load_model(name)
    gguf = _gguf(name, tmp_path, "F16")
    assert model_weights(config, "f16")[0].output == model_weights(gguf, None)[0].output
    head = config.param_parts.get("lm_head") or config.param_parts["embedding"]
    assert model_weights(config, "f16")[0].output == 2 * head + 4 * config.hidden_size


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-4b", "qwen3-30b-a3b"])
def test_a_configs_block_norms_are_f32_as_a_gguf_holds_them(name):
    """Each block's norms (attn_norm and ffn_norm; Gemma-3's post-attention and post-FFN norms
    too) priced from a config in F32, as convert_hf_to_gguf.py writes every norm, the rest in the
    weight type: counted by hand from the config. (Qwen3's and Gemma-3's per-head q_norm and
    k_norm are counted in the attention part, and priced with it.)"""
    from kvplan.engines.llamacpp import model_weights

    config = load_model(name)
    raw = bundled(name)
    h = raw.get("text_config", raw)["hidden_size"]
    norms = {"llama-3.1-8b": 2 * h, "qwen3-30b-a3b": 2 * h, "gemma-3-4b": 4 * h}[name]
    for weight_type, bits in (("f16", 16), ("q8_0", 8.5)):
        w = model_weights(config, weight_type)[0]
        for il, layer in enumerate(config.layers):
            params = sum(n for _, n in layer.params)
            assert w.layers[il] == round(bits / 8 * (params - norms) + 4 * norms), il


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_offloaded_decode_reads_each_blocks_own_stored_bytes(name, tmp_path):
    """The placed operators are step_ops' list carrying llama.cpp's bytes: a mixed-quant GGUF
    stores blocks of one kind at their own types, and each block reads its own (here every
    block made a different size), the routed experts top_k of E, the cache in ggml rows."""
    from kvplan.engines.llamacpp import decode_ceiling, model_weights, placement, resolve_settings

    spec = _gguf(name, tmp_path)
    stored = spec.stored
    sizes = tuple(b + 4096 * il for il, b in enumerate(stored.layer_bytes))
    spec = spec._replace(stored=stored._replace(layer_bytes=sizes))
    s, _ = resolve_settings(spec, LlamaCppRequest(ctx_size=4096, parallel=1, cache_type_k="q8_0"))
    w, _ = model_weights(spec, None)
    n, moe = spec.num_layers, spec.moe
    unread = [e * (1 - moe.top_k / moe.num_experts) if moe else 0 for e in w.expert_layers]
    a = spec.layers[0].attention
    row = a.num_kv_heads * a.head_dim
    cache = 1000 * (row // 32 * 34 + row * 2)  # q8_0 K, f16 V
    for ngl in (1, n // 2, n + 1):
        p = placement(n, ngl, s.build, False)
        d = decode_ceiling(spec, w, s, p, 1000, 1e12, 1e11, False)
        on_gpu = range(p.first_gpu_layer, n)
        gpu = sum(sizes[il] - unread[il] + cache for il in on_gpu) + w.output
        host = sum(sizes[il] - unread[il] + cache for il in range(p.first_gpu_layer))
        assert d.gpu_read_bytes == pytest.approx(gpu, rel=1e-12)
        assert d.host_read_bytes == pytest.approx(host + w.embedding / spec.vocab_size, rel=1e-12)
