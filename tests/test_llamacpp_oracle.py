"""kvplan's llama.cpp engine against real llama.cpp: the start-up lines llama.cpp itself printed
for tiny GGUF files of several architectures (scripts/llamacpp_oracle.py, recorded with the
driver scripts/build_llamacpp.sh builds) are the oracle; every context's lines that kvplan
predicts must be the recorded ones, character for character. The slow test records them again
from the binary in KVPLAN_LLAMACPP_BIN (CI builds it) and compares the same way."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kvplan.engines.llamacpp import LlamaCppRequest, llamacpp_allocation
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.present.engines import llamacpp_log_lines

from gguf_fixtures import write_gguf
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
ORACLE_DIR = ROOT / "tests" / "data" / "llamacpp_oracle"
RECORDS = sorted(ORACLE_DIR.glob("b*.json"))
# The lines kvplan predicts, by what they begin with (llama.cpp prints many others).
PREDICTED = re.compile(
    r"^(llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|flash_attn|kv_unified) |"
    r"llama_context: n_ctx_seq \(|llama_context: +\S+ +output buffer size|"
    r"llama_kv_cache: +\S+ KV buffer size|llama_kv_cache: size =|"
    r"llama_kv_cache_iswa: creating|llama_memory_recurrent: +\S+ RS buffer size|"
    r"llama_memory_recurrent: size =|resolve_fused_ops: Flash Attention)"
)


def _entries():
    out = []
    for path in RECORDS:
        data = json.loads(path.read_text())
        build = int(data["build"].lstrip("b"))
        out += [(build, e) for e in data["entries"]]
    return out


ENTRIES = _entries()


def _predict(build: int, entry: dict, tmp_path: Path) -> list[str] | None:
    """kvplan's lines for the recorded context (None: kvplan refuses it)."""
    path = tmp_path / "model.gguf"
    write_gguf(
        path, entry["arch"], entry["keys"], [(n, tuple(ne), "F32") for n, ne in entry["tensors"]]
    )
    spec = load_model(str(path))
    request = LlamaCppRequest(**entry["request"], n_gpu_layers=0, build=build, device="CPU")
    try:
        result = llamacpp_allocation(spec, load_profile("h200"), request)
    except KvplanError:
        return None
    return [line for line in llamacpp_log_lines(result) if PREDICTED.match(line)]


def _real(entry: dict) -> list[str]:
    return [line for line in entry["lines"] if PREDICTED.match(line)]


def _compare(build: int, entry: dict, tmp_path: Path) -> None:
    got = _predict(build, entry, tmp_path)
    if entry["status"] == 1:
        assert got is None, "llama.cpp refused this context; kvplan did not"
        return
    assert got is not None, "kvplan refused a context llama.cpp created"
    real = _real(entry)
    assert real, "no comparable line recorded"
    if entry["status"] == -1:  # llama.cpp died in its graph reserve: the lines before it
        got = got[: len(real)]
    assert got == real


def _id(item) -> str:
    build, e = item
    r = e["request"]
    return (
        f"b{build}-{e['family']}-c{r['ctx_size']}-b{r['batch_size']}-ub{r['ubatch_size']}-"
        f"np{r['parallel']}-fa{r['flash_attn']}-{r['cache_type_k']}-{r['cache_type_v']}"
        + ("-swafull" if r["swa_full"] else "")
        + ("-kvu" if r["kv_unified"] else "")
    )


@pytest.mark.parametrize("item", ENTRIES, ids=[_id(i) for i in ENTRIES])
def test_recorded_llamacpp_contexts(item, tmp_path):
    build, entry = item
    _compare(build, entry, tmp_path)


def test_the_records_cover_the_families():
    assert RECORDS, "no llama.cpp oracle recorded"
    families = {e["family"] for _, e in ENTRIES}
    assert len(ENTRIES) >= 25 and len(families) >= 7


@pytest.mark.slow
def test_live_llamacpp_matches(tmp_path):
    binary = os.environ.get("KVPLAN_LLAMACPP_BIN")
    if not binary:
        pytest.skip("KVPLAN_LLAMACPP_BIN not set (scripts/build_llamacpp.sh builds it)")
    oracle = load_script("llamacpp_oracle")
    data = oracle.record(binary)
    build = int(data["build"].lstrip("b"))
    misses = []
    for entry in data["entries"]:
        try:
            _compare(build, entry, tmp_path)
        except AssertionError as exc:
            misses.append(f"{_id((build, entry))}: {exc}"[:2000])
    assert not misses, "\n".join(misses)
