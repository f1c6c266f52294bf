"""DeepSeek-V4 (Flash, Pro) in SGLang 0.5.14: the pool sizes it logs, by hand from its source
(the sglang-0.5.14 wheel).

srt/arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults: page_size 256, kv-cache-dtype
fp8_e4m3 for auto, max_running_requests 256, swa_full_tokens_ratio 0.1.
srt/model_executor/pool_configurator.py DSV4PoolConfigurator._get_bytes_per_full_token
(lines 545-577): 0.1 x 584 x L + 584/4 x L4 + 584/128 x L128 + 132/4 x L4
+ 0.1 x 8/128 x 8,192 x L4 + 0.1 x 128/128 x 4,096 x L128 + 0.1 x 8/128 x 2,048 x L4
(584 = 448 fp8 + 64 x 2 bf16 + 8; 132 = 128 + 4; fp32 states 2x2x512x4, 2x512x4, 2x2x128x4;
ring sizes 8 and 128 of srt/mem_cache/deepseek_v4_memory_pool.py:30-44 over the 128-token SWA
page); _compute_dsv4_sizes (579-589): full = int(available / that) // 256 x 256,
swa = int(full x 0.1) // 256 x 256, c4 = full // 4, c128 = full // 128,
c4_state = swa // 128 x 8, c128_state = swa // 128 x 128; model_runner_kv_cache_mixin.py
_resolve_max_num_reqs: min(256, full // 2).
"""

from __future__ import annotations

import json

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import REPO, one_line_error, run_cli

GIB = 1 << 30


@pytest.mark.parametrize(
    "model, layers, l4, l128",
    [("deepseek-v4-flash", 43, 21, 20), ("deepseek-v4-pro", 61, 30, 31)],
)
@pytest.mark.parametrize("memory", [60 * GIB, 7 * GIB + 12_345])
def test_pool_sizes_by_hand(model, layers, l4, l128, memory):
    per_token = (
        0.1 * 584 * layers
        + 1 / 4 * 584 * l4
        + 1 / 128 * 584 * l128
        + 1 / 4 * 132 * l4
        + 0.1 * (8 / 128) * 8192 * l4
        + 0.1 * (128 / 128) * 4096 * l128
        + 0.1 * (8 / 128) * 2048 * l4
    )
    full = int(memory / per_token) // 256 * 256
    swa = int(full * 0.1) // 256 * 256
    request = EngineRequest(engine="sglang", kv_cache_memory_bytes=memory, tp=8)
    r = engine_allocation(load_model(model, checkpoint=False), load_profile("h200"), request)
    p = r.pools
    assert p.bytes_per_full_token == per_token
    assert (p.full_tokens, p.swa_tokens) == (full, swa)
    assert (p.c4_tokens, p.c128_tokens) == (full // 4, full // 128)
    assert (p.c4_state_pool_size, p.c128_state_pool_size) == (swa // 128 * 8, swa // 128 * 128)
    assert r.max_running_requests == min(256, full // 2)
    assert r.kv_cache_tokens == full and r.kv_cache_dtype == "fp8_e4m3"


RECORDS = REPO / "tests" / "data" / "sglang_dsv4_pools" / "0.5.14.json"


@pytest.mark.parametrize(
    "case",
    json.loads(RECORDS.read_text())["cases"],
    ids=lambda c: f"{c['model']}@{c['available_bytes']}",
)
def test_pools_equal_sglangs_own_configurator(case):
    """scripts/record_sglang_dsv4_pools.py ran SGLang 0.5.14's own DSV4PoolConfigurator (and
    apply_deepseek_v4_defaults) from the released wheel on a CPU: kvplan's pools are its."""
    assert (case["page_size"], case["kv_cache_dtype"]) == (256, "fp8_e4m3")
    assert case["swa_full_tokens_ratio"] == 0.1 and case["max_running_requests_default"] == 256
    spec = load_model(str(REPO / "model_configs" / f"{case['model']}.json"), checkpoint=False)
    request = EngineRequest(engine="sglang", kv_cache_memory_bytes=case["available_bytes"], tp=8)
    r = engine_allocation(spec, load_profile("h200"), request)
    p = r.pools
    assert p.bytes_per_full_token == pytest.approx(case["bytes_per_full_token"], rel=1e-15)
    got = (p.full_tokens, p.swa_tokens, p.c4_tokens, p.c128_tokens)
    assert got == (
        case["full_tokens"],
        case["swa_tokens"],
        case["c4_tokens"],
        case["c128_tokens"],
    )
    assert (p.c4_state_pool_size, p.c128_state_pool_size) == (
        case["c4_state_pool_size"],
        case["c128_state_pool_size"],
    )
    assert (p.layers, p.c4_layers, p.c128_layers) == (
        case["layers"],
        case["c4_layers"],
        case["c128_layers"],
    )


@pytest.mark.slow
def test_sglang_still_sizes_as_recorded(tmp_path):
    """SGLang's own configurator re-run (scripts/record_sglang_dsv4_pools.py) must give the
    records: KVPLAN_SGLANG_PYTHON (a Python with torch and transformers) and
    KVPLAN_SGLANG_PATH (the unpacked sglang-0.5.14 wheel and dill/orjson, os.pathsep-joined)
    name it; skipped without them."""
    import os
    import subprocess

    python, path = os.environ.get("KVPLAN_SGLANG_PYTHON"), os.environ.get("KVPLAN_SGLANG_PATH")
    if not python or not path:
        pytest.skip("KVPLAN_SGLANG_PYTHON and KVPLAN_SGLANG_PATH name an SGLang wheel to run")
    run = subprocess.run(
        [python, str(REPO / "scripts" / "record_sglang_dsv4_pools.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    fresh = json.loads((tmp_path / RECORDS.name).read_text())
    assert fresh["cases"] == json.loads(RECORDS.read_text())["cases"]


def test_flash_prints_sglangs_pool_lines():
    """Flash at 60 GiB: 15,897.45 B a full token (2,511.2 + 3,066 + 91.25 + 693 + 1,075.2 +
    8,192 + 268.8), 4,052,480 full tokens."""
    code, out, err = run_cli(
        *("engine", "deepseek-v4-flash", "--engine", "sglang", "--gpu", "h200"),
        *("--kv-cache-memory", "60GiB", "--format", "json"),
    )
    assert code == 0, err
    lines = json.loads(out)["log_lines"]
    assert lines[0] == (
        "DSV4 memory calculation: bytes_per_full_token=15897.45, available_bytes=60.00 GB, "
        "full_token=4052480"
    )
    assert lines[1] == (
        "DSV4 pool sizes: full=4052480, swa=405248, c4=1013120, c128=31660, c4_state=25328, "
        "c128_state=405248"
    )


@pytest.mark.parametrize(
    "args, named",
    [
        (("--kv-cache-dtype", "fp8_e5m2"), "is not supported for DeepseekV4ForCausalLM"),
        (("--kv-cache-dtype", "bfloat16"), "does not model that pool"),
        (("--page-size", "64"), "sets page_size 256"),
        (("--pp", "2"), "PP 1"),
        (("--gpu", "mi300x"), "NVIDIA Hopper and Blackwell"),
        (("--sglang-version", "0.4"), "no DeepSeek-V4 pools"),
    ],
)
def test_what_sglang_refuses_or_kvplan_does_not_model(args, named):
    code, _, err = run_cli(
        *("engine", "deepseek-v4-pro", "--engine", "sglang", "--gpu", "h200"),
        *("--kv-cache-memory", "60GiB", *args),
    )
    one_line_error(code, err, named)


def test_the_pool_memory_is_asked_for_not_guessed():
    code, _, err = run_cli("engine", "deepseek-v4-pro", "--engine", "sglang", "--gpu", "h200")
    one_line_error(code, err, "give --kv-cache-memory")
