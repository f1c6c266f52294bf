"""Attention timed per backend: the kernel tables' attention/ files (scripts/derive_achieved.py
attention_backends), picked by the backend the serve flags name, read at the step's KV bytes."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvplan.engines.backends import Backends
from kvplan.formulas.batch_step import Rates, decode_call_s, decode_heads_call_s
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import (
    ATTENTION_FOLDER,
    attention_backends,
    decode_calls_for,
    tables_for,
)
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, backend_kernels, build_replica

from helpers import run_json


def pick(model: str, gpu: str, engine: str, **flags):
    spec, profile = load_model(model), load_profile(gpu)
    options = ServeOptions(engine=engine, backends=Backends(**flags))
    return backend_kernels(spec, profile, options, tables_for(profile, engine))[:2]


def test_a_named_backend_with_rows_is_timed_from_its_own_rows():
    kernels, untimed = pick("llama-3.1-8b", "h100", "sglang", attention_backend="triton")
    assert untimed == []
    decode, prefill = kernels.decode[False], kernels.prefill[False]
    assert decode.backend == prefill.backend == "triton" and decode.kind == "mha"
    assert decode.kernel_source == ("triton",) and decode.version == "0.5.14"
    # the H100's SGLang triton rows read the cache at a smaller share of the bandwidth than
    # fa3's, SGLang's own pick there
    default, _ = pick("llama-3.1-8b", "h100", "sglang")
    assert decode.pair[1] < default.decode[False].pair[1]


@pytest.mark.parametrize(
    ("model", "gpu", "engine", "backend"),
    [
        ("llama-3.1-8b", "h100", "sglang", "fa3"),  # SGLang: Hopper fa3
        ("llama-3.1-8b", "b200", "sglang", "trtllm_mha"),  # SM100: trtllm_mha for MHA
        ("deepseek-v3", "b200", "sglang", "trtllm_mla"),  # DeepSeek-V3 on SM100
        ("llama-3.1-8b", "a100", "vllm", "FLASH_ATTN"),  # vLLM: FlashAttention first
        ("llama-3.1-8b", "b200", "vllm", "FLASHINFER"),  # ... FlashInfer first on SM10x
    ],
)
def test_no_flag_runs_the_engines_own_pick_from_its_rows(model, gpu, engine, backend):
    kernels, untimed = pick(model, gpu, engine)
    assert untimed == [] and {t.backend for t in kernels.decode.values()} == {backend}
    # naming the engine's own pick is the same run
    assert pick(model, gpu, engine, attention_backend=backend) == (kernels, [])


def test_an_engine_pick_without_rows_keeps_the_default_tables():
    # vLLM's H100 tables are 0.14.0's, its FLASH_ATTN rows 0.24.0's: the pick keeps the tables
    tables = tables_for(load_profile("h100"), "vllm")
    assert tables.attention_backends[("mha", "FLASH_ATTN")].version != tables.engine_version
    assert pick("llama-3.1-8b", "h100", "vllm") == (None, [])
    # SGLang's pick for a non-DeepSeek MLA model on SM100 is flashinfer: no MLA rows of it
    assert pick("glm-4.7-flash", "b200", "sglang") == (None, [])
    # vLLM's MLA tables time whole modules, not the attention kernel
    assert pick("deepseek-v3", "h200", "vllm") == (None, [])


def test_selection_by_gpu_engine_and_phase():
    kernels, _ = pick("llama-3.1-8b", "b200", "vllm", attention_backend="triton_attn")
    assert kernels.decode[False].backend == "TRITON_ATTN"
    assert kernels.decode[False].kernel_source == ("vllm_triton_attn",)
    kernels, _ = pick("llama-3.1-8b", "b200", "sglang", decode_attention_backend="flashinfer")
    # decode named, prefill the engine's own pick (trtllm_mha on SM100)
    assert kernels.decode[False].backend == "flashinfer"
    assert kernels.prefill[False].backend == "trtllm_mha"
    # one GPU's rows, not another's: the B300's triton floor is its own
    b200, _ = pick("llama-3.1-8b", "b200", "sglang", attention_backend="triton")
    b300, _ = pick("llama-3.1-8b", "b300", "sglang", attention_backend="triton")
    assert b200.decode[False].floor_s != b300.decode[False].floor_s


def test_a_backend_without_rows_is_named_as_not_timed():
    # SGLang's B200 MLA rows are trtllm_mla's alone, and no GPU with SGLang tables timed
    # flashmla's (triton's MLA rows are borrowed instead: tests/test_transfer.py)
    kernels, untimed = pick("glm-4.7-flash", "b200", "sglang", attention_backend="flashmla")
    assert kernels is None and untimed == ["--attention-backend flashmla"]
    # vLLM's H100 rows: FLASH_ATTN's only; FLASHINFER runs as vLLM's own pick (FLASH_ATTN)
    kernels, untimed = pick("llama-3.1-8b", "h100", "vllm", attention_backend="flashinfer")
    assert untimed == ["--attention-backend flashinfer"]  # as typed
    assert kernels == pick("llama-3.1-8b", "h100", "vllm")[0]
    doc = run_json(
        "simulate", "glm-4.7-flash", "--gpu", "b200", "--engine", "sglang",
        "--attention-backend", "flashmla", "--num-prompts", "2", "--input-len", "64",
        "--output-len", "4",
    )  # fmt: skip
    ids = [n["id"] for n in doc["notes"]]
    assert "sim-attention-kernels" in ids and "sim-attention-timed" not in ids
    words = next(n["text"] for n in doc["notes"] if n["id"] == "sim-attention-kernels")
    assert "--attention-backend flashmla" in words and "MLA" in words and "not known" in words


def test_a_timed_backend_changes_the_step_and_says_so():
    def run(*extra):
        return run_json(
            "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *extra,
            "--num-prompts", "6", "--input-len", "4000", "--output-len", "32",
            "--max-concurrency", "1",
        )  # fmt: skip

    default, triton = run(), run("--attention-backend", "triton")
    assert (
        triton["runs"][0]["bench"]["median_tpot_ms"] > default["runs"][0]["bench"]["median_tpot_ms"]
    )
    words = next(n["text"] for n in triton["notes"] if n["id"] == "sim-attention-timed")
    assert "decode and prefill: triton (MHA kernels" in words and "0.5.14" in words


# two measured batches, two bucket sizes each: (batch, ((bytes per sequence, seconds), ...))
CALLS = (
    (1, ((4096.0, 1e-5), (16384.0, 4e-5))),
    (4, ((4096.0, 2e-5), (16384.0, 8e-5))),
)


def test_the_decode_calls_are_pinned_at_their_rows_and_log_linear_between():
    assert decode_call_s(CALLS, 1, 4096.0) == pytest.approx(1e-5)
    assert decode_call_s(CALLS, 4, 4 * 16384.0) == pytest.approx(8e-5)
    # halfway in log(bytes per sequence) between two rows: the geometric mean of their times
    assert decode_call_s(CALLS, 1, 8192.0) == pytest.approx(math.sqrt(1e-5 * 4e-5))
    # halfway in log(batch) between two measured batches, at one row's bytes per sequence
    assert decode_call_s(CALLS, 2, 2 * 4096.0) == pytest.approx(math.sqrt(1e-5 * 2e-5))
    # beyond any end: the nearest row's time, never extrapolated
    assert decode_call_s(CALLS, 1, 10.0) == pytest.approx(1e-5)
    assert decode_call_s(CALLS, 64, 64 * 1e9) == pytest.approx(8e-5)
    # the array path (a decode span's steps at once) reads the same values
    sizes = np.array([10.0, 3 * 4096.0, 3 * 9000.0, 3 * 16384.0, 1e12])
    scalar = [decode_call_s(CALLS, 3, float(x)) for x in sizes]
    assert np.allclose(decode_call_s(CALLS, 3, sizes, np.maximum), scalar)


def test_the_decode_calls_are_log_linear_in_query_heads_between_measured_counts():
    # the same calls at 4 heads, twice the time at 16
    by_heads = ((4, CALLS), (16, tuple((b, tuple((x, 2 * s) for x, s in c)) for b, c in CALLS)))
    assert decode_heads_call_s(by_heads, 4, 1, 4096.0) == pytest.approx(1e-5)
    assert decode_heads_call_s(by_heads, 16, 4, 4 * 16384.0) == pytest.approx(1.6e-4)
    # halfway in log(heads): the geometric mean of the two counts' times
    assert decode_heads_call_s(by_heads, 8, 1, 4096.0) == pytest.approx(math.sqrt(2) * 1e-5)
    # beyond either end: the end count's time, never extrapolated
    assert decode_heads_call_s(by_heads, 1, 1, 4096.0) == pytest.approx(1e-5)
    assert decode_heads_call_s(by_heads, 128, 1, 4096.0) == pytest.approx(2e-5)
    sizes = np.array([10.0, 3 * 4096.0, 3 * 9000.0, 1e12])
    scalar = [decode_heads_call_s(by_heads, 6, 3, float(x)) for x in sizes]
    assert np.allclose(decode_heads_call_s(by_heads, 6, 3, sizes, np.maximum), scalar)


def test_the_shipped_calls_are_read_at_their_own_rows():
    timing = attention_backends("b200_sxm.sglang.0.5.14.json")[("mha", "triton")]
    by_heads = timing.decode_calls["bfloat16"]
    for heads, calls in by_heads:
        for batch, curve in calls:
            for per_sequence, seconds in curve:
                at = decode_heads_call_s(by_heads, heads, batch, batch * per_sequence)
                assert at == pytest.approx(seconds)
    calls = by_heads[0][1]
    batch, curve = calls[0]
    (x0, y0), (x1, y1) = curve[3:5]
    between = decode_call_s(calls, batch, batch * math.sqrt(x0 * x1))
    assert between == pytest.approx(math.sqrt(y0 * y1))


def test_the_files_carry_their_provenance_and_ship():
    doc = json.loads((ATTENTION_FOLDER / "b200_sxm.sglang.0.5.14.json").read_text())
    assert doc["source"].startswith("aiconfigurator-core 0.12.0")
    assert "attention_backends" in doc["derived_by"]
    # only this GPU and engine's own tables bring them (a datasheet GPU has none)
    assert tables_for(load_profile("mi300x"), "sglang").attention_backends == {}
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    assert '"data/kernel_tables/attention/*.json"' in pyproject.read_text(encoding="utf-8")


def test_decode_calls_are_kept_apart_by_cache_dtype():
    """H200 SGLang 0.5.14 FA3 MLA (aiconfigurator-core 0.12.0 generation_mla_perf): at 128
    sequences of 16 heads reading 4.5 MiB each, the bf16 cache's row (4,096 tokens x 576 x 2 B)
    takes 0.156 ms and the fp8 cache's (8,192 tokens x 576 x 1 B) 2.04 ms: pooled by bytes,
    the median of the two (1.15 ms) priced a bf16 cache 7x slow."""
    timing = attention_backends("h200_sxm.sglang.0.5.14.json")[("mla", "fa3")]
    bf16 = dict(dict(dict(timing.decode_calls["bfloat16"])[16])[128])
    fp8 = dict(dict(dict(timing.decode_calls["fp8"])[16])[128])
    # MLA's rows at their own bytes per sequence: 4,096 x 576 x 2 = 8,192 x 576 x 1 B
    assert bf16[4718592.0] == pytest.approx(1.558e-4)
    assert fp8[4718592.0] == pytest.approx(2.042e-3)
    assert decode_calls_for(timing, "fp8") is timing.decode_calls["fp8"]
    assert decode_calls_for(timing, "bfloat16") is timing.decode_calls["bfloat16"]
    # a backend that timed one dtype only stands in for the other by bytes
    only = timing._replace(decode_calls={"bfloat16": timing.decode_calls["bfloat16"]})
    assert decode_calls_for(only, "fp8") is timing.decode_calls["bfloat16"]
    assert decode_calls_for(timing._replace(decode_calls={}), "fp8") == ()


def test_decode_calls_are_kept_apart_by_query_heads():
    """The same rows at 128 sequences of 4,096 tokens (bf16 cache, 4.5 MiB each), one row per
    head count: 155.8 us at 16 heads (DeepSeek-V3 at attention TP 8), 158.5 us at 32, 162.8
    us at 64, 261.5 us at 128 (attention TP 1: SGLang's DP attention); pooled over the head
    counts, the median (156.8 us) priced every rank at about 16 heads."""
    timing = attention_backends("h200_sxm.sglang.0.5.14.json")[("mla", "fa3")]
    by_heads = timing.decode_calls["bfloat16"]
    assert [h for h, _ in by_heads] == [1, 2, 4, 8, 16, 32, 64, 128]
    rows = {16: 1.558e-4, 32: 1.585e-4, 64: 1.628e-4, 128: 2.615e-4}
    x = 4096 * 576 * 2.0
    for heads, seconds in rows.items():
        assert dict(dict(dict(by_heads)[heads])[128])[x] == pytest.approx(seconds)
        assert decode_heads_call_s(by_heads, heads, 128, 128 * x) == pytest.approx(seconds)
    # between two measured counts, linear in log(heads) and log(seconds): 96 heads, 0.585 of
    # the way from 64 to 128
    t = math.log(96 / 64) / math.log(2)
    between = rows[64] * (rows[128] / rows[64]) ** t
    assert decode_heads_call_s(by_heads, 96, 128, 128 * x) == pytest.approx(between)
    # past the last count, its time
    assert decode_heads_call_s(by_heads, 256, 128, 128 * x) == pytest.approx(rows[128])
    # GQA/MHA rows pool many shapes over the query heads (key 0), read at any head count
    mha = attention_backends("h200_sxm.sglang.0.5.14.json")[("mha", "fa3")]
    pooled = mha.decode_calls["bfloat16"]
    assert [h for h, _ in pooled] == [0]
    assert decode_heads_call_s(pooled, 64, 8, 8 * 4194304.0) == pytest.approx(
        decode_call_s(pooled[0][1], 8, 8 * 4194304.0)
    )


def test_an_fp8_cache_decodes_on_its_own_rows():
    """DeepSeek-V3 on 8 H200 under SGLang (FA3 MLA, its pick on SM90): an fp8 cache reads half
    the bytes but FA3's fp8 MLA path is the slower kernel in the rows (above), so its decode
    steps are longer than a bf16 cache's; read by bytes off one pooled curve they were shorter."""

    def tpot(kv):
        doc = run_json(
            "simulate", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang",
            "--kv-cache-dtype", kv, "--num-prompts", "16", "--input-len", "4000",
            "--output-len", "16", "--max-concurrency", "16",
        )  # fmt: skip
        return doc["runs"][0]["bench"]["median_tpot_ms"]

    assert tpot("fp8_e4m3") > tpot("auto")


def test_dp_attention_reads_the_mla_calls_at_every_head_on_the_rank():
    """DeepSeek-V3 on 8 H200 under SGLang (FA3 MLA, bf16 cache), 128 decodes of 4,096 tokens:
    at TP 8 a rank runs 16 of the 128 heads, under DP attention (-dp 8, attention TP 1) all
    128; the latent cache a rank reads is the same, and the measured call a layer is the
    row of its heads: 155.8 us against 261.5 us (the rows above; the roofline and floor left
    out here)."""
    spec = load_model("deepseek-v3", checkpoint=False)

    def calls_only(**flags):
        options = ServeOptions(engine="sglang", tp=8, **flags)
        m = copy.copy(build_replica(spec, load_profile("h200"), options).model)
        m.floors = m.floors._replace(attention_s=0.0)
        m.decode_rates = {mla: Rates(1e30, 1e30) for mla in m.decode_rates}
        return m

    tp8, dp8 = calls_only(), calls_only(data_parallel_size=8, enable_dp_attention=True)
    assert [g.heads for g in tp8.groups] == [16.0] and [g.heads for g in dp8.groups] == [128.0]
    assert tp8.decode_attention_s(128, 128 * 4096.0)[0] == pytest.approx(61 * 1.558e-4)
    assert dp8.decode_attention_s(128, 128 * 4096.0)[0] == pytest.approx(61 * 2.615e-4)


@pytest.mark.parametrize(
    ("gpu", "kv", "flags", "stand_in"),
    [
        # vLLM's A100 FLASH_ATTN rows (its own pick) hold bf16 caches only
        ("a100", "fp8", (), ("FLASH_ATTN", "fp8", "bfloat16")),
        ("a100", "auto", (), None),
        # vLLM's L40S FLASHINFER rows hold fp8 caches only
        ("l40s", "auto", ("--attention-backend", "FLASHINFER"), ("FLASHINFER", "bfloat16", "fp8")),
        ("h100", "fp8", (), None),  # both dtypes timed
        # no table times an nvfp4 cache: the bf16 calls stand in, by bytes
        # (vLLM's CacheDType has nvfp4 from 0.20.0)
        ("b200", "nvfp4", ("--engine-version", "0.21"), ("FLASHINFER", "nvfp4", "bfloat16")),
    ],
)
def test_a_cache_dtype_its_backend_did_not_time_is_named_as_a_stand_in(gpu, kv, flags, stand_in):
    """Where a backend's rows hold no decode call on the cache's dtype, the other dtype's calls
    price it (decode_calls_dtype): a guess at the same bytes that the rows themselves refute on
    H200 FA3 MLA (13x), so a note names it rather than pricing it silently as the cache's own."""
    doc = run_json(
        "simulate", "llama-3.1-8b", "--gpu", gpu, "--kv-cache-dtype", kv, *flags,
        "--num-prompts", "4", "--input-len", "256", "--output-len", "4",
    )  # fmt: skip
    notes = {n["id"]: n for n in doc["notes"]}
    assert ("sim-attention-cache-stand-in" in notes) is (stand_in is not None)
    if stand_in is not None:
        backend, cache, rows = stand_in
        text = notes["sim-attention-cache-stand-in"]["text"]
        assert f"{backend}'s rows hold no decode call on the {cache} cache" in text
        assert f"its calls on the {rows} cache stand in" in text
        # a prefill reads its cache's dtype's calls: on a cache no table times (nvfp4), the
        # 16-bit ones, said too; an fp8 or 16-bit cache's prefill is its own or the fractions'
        prefill = f"{backend}'s rows hold no prefill call on the {cache} cache"
        assert (prefill in text) is (cache == "nvfp4")
