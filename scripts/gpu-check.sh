#!/usr/bin/env bash
# The GPU check, ready for the first time a CUDA machine is available: offline (no pip, no
# network; kvplan runs from this checkout if it is not installed), python3, under 8 minutes on an
# H100/H200, one JSON summary on stdout (and in OUT/gpu-check.json):
#   - the device, and the bundled profile it matched;
#   - the Triton paged-decode kernel against a float64 reference on awkward inputs (bf16 too);
#   - bandwidth reached by the paged kernel against a device-to-device copy and grouped-query SDPA
#     on the same KV stored contiguously, at batch 1 (where the KV must be split to fill the SMs)
#     and at larger batches;
#   - kvplan measure --quick on the GPU: decode and prefill predicted vs measured, the check.
#
#   bash scripts/gpu-check.sh [out-dir]
# KVPLAN_GPU_CHECK_DEVICE=cpu runs the same steps on a CPU at small sizes (a dry run of the script).
set -uo pipefail
OUT=$(mkdir -p "${1:-gpu-check}" && cd "${1:-gpu-check}" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$OUT" || exit 2  # not the checkout: its kernels/ folder would shadow a PyPI package
exec timeout 480 python3 - "$REPO" "$OUT" <<'PY'
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO, OUT = Path(sys.argv[1]), Path(sys.argv[2])
STARTED = time.time()
summary = {"ok": False, "steps": {}, "errors": []}


def bootstrap():
    """kvplan from this checkout when it is not installed: the three folders setup.py maps into
    the package are mapped here by hand (kernels/ -> kvplan.kernels, ...)."""
    try:
        import kvplan.kernels  # noqa: F401
        import kvplan.measure.run  # noqa: F401

        return "installed"
    except ImportError:
        pass
    sys.path.insert(0, str(REPO))
    import kvplan

    for name, folder in (
        ("kvplan.kernels", "kernels"),
        ("kvplan.model_configs", "model_configs"),
        ("kvplan.hardware_profiles", "hardware_profiles"),
    ):
        path = REPO / folder
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        setattr(kvplan, name.split(".")[1], module)
        spec.loader.exec_module(module)
    import kvplan.measure.run  # noqa: F401

    return f"from {REPO}"


def step(name):
    def wrap(fn):
        start = time.time()
        try:
            summary["steps"][name] = {"ok": True, **fn()}
        except Exception as exc:  # one step failing keeps the others' figures
            summary["steps"][name] = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"}
            summary["errors"].append(f"{name}: {traceback.format_exc(limit=3)}")
        summary["steps"][name]["seconds"] = round(time.time() - start, 1)

    return wrap


try:
    summary["kvplan"] = bootstrap()
    import torch
except Exception as exc:
    summary["errors"].append(f"setup: {exc.__class__.__name__}: {exc}")
    print(json.dumps(summary, indent=2))
    sys.exit(2)

DEVICE = os.environ.get("KVPLAN_GPU_CHECK_DEVICE", "cuda")
DRY = DEVICE != "cuda"
if not DRY and not torch.cuda.is_available():
    summary["errors"].append("no CUDA device visible to torch")
    print(json.dumps(summary, indent=2))
    sys.exit(2)
DTYPE = torch.float32 if DRY else torch.bfloat16


@step("device")
def _device():
    from kvplan.measure.device import cpu_identity, cuda_identity, match_profile

    info = cpu_identity(torch.get_num_threads()) if DRY else cuda_identity(1)
    profile = match_profile(info)
    summary["device"] = info
    summary["profile_matched"] = profile.name if profile else None
    return {"name": info.get("nvml_name") or info["name"]}


@step("kernel_correctness")
def _kernels():
    """Triton (the torch path in a dry run) against float64 on the awkward inputs of the tests."""
    sys.path.insert(0, str(REPO / "tests"))
    from kv_fixtures import all_cases, make_case, worst_error

    from kvplan.kernels import paged_decode_attention

    impl = "torch" if DRY else "triton"

    def on(case):
        q, kc, vc, table, lens, dense = case
        return (q.to(DEVICE), kc.to(DEVICE), vc.to(DEVICE), table.to(DEVICE), lens.to(DEVICE), dense)

    worst = {}
    for label, case, window, scale in all_cases():
        worst[label] = worst_error(paged_decode_attention, on(case), window, scale, impl=impl)
    half = {}
    q, kc, vc, table, lens, _ = make_case([1, 15, 17, 300, 4097], 2, 4, 128, 16)
    kc, vc = torch.nan_to_num(kc), torch.nan_to_num(vc)
    for dtype in (torch.bfloat16, torch.float16):
        args = [t.to(DEVICE) for t in (q.to(dtype), kc.to(dtype), vc.to(dtype), table, lens)]
        ref = paged_decode_attention(*args, impl="reference").float()
        got = paged_decode_attention(*args, impl=impl).float()
        half[str(dtype)] = (ref - got).abs().max().item()
    ok = max(worst.values()) < 1e-4 and max(half.values()) < 3e-2
    return {"passed": ok, "worst_fp32_error": max(worst.values()), "half_errors": half,
            "cases": len(worst)}


@step("bandwidth")
def _bandwidth():
    """KV GB/s of the paged kernel, grouped-query SDPA (folded and enable_gqa) on contiguous KV,
    and a device copy; CUDA events, the L2 flushed before every call, interleaved rounds."""
    import torch.nn.functional as F

    from kvplan.kernels import paged_decode_attention

    heads, kv_heads, dim, block = 32, 8, 128, 16  # Llama-3.1-8B's attention
    shapes = ((1, 2048), (4, 1024)) if DRY else ((1, 32768), (1, 131072), (8, 32768), (64, 4096))
    flush = torch.empty((256 << 20) // 4, device=DEVICE)
    rows = []
    for batch, context in shapes:
        blocks = batch * context // block
        kc = torch.randn(blocks, block, kv_heads, dim, device=DEVICE, dtype=DTYPE)
        vc = torch.randn_like(kc)
        table = torch.randperm(blocks, device=DEVICE).view(batch, -1).to(torch.int32)
        lens = torch.full((batch,), context, dtype=torch.int32, device=DEVICE)
        q = torch.randn(batch, heads, dim, device=DEVICE, dtype=DTYPE)
        order = table.long().flatten()
        k = kc[order].view(batch, context, kv_heads, dim).transpose(1, 2).contiguous()
        v = vc[order].view(batch, context, kv_heads, dim).transpose(1, 2).contiguous()
        folded = q.view(batch, kv_heads, heads // kv_heads, dim)
        kv_bytes = 2 * k.numel() * k.element_size()
        src, dst = torch.empty(kv_bytes // 4, device=DEVICE), torch.empty(kv_bytes // 4, device=DEVICE)
        impl = "torch" if DRY else "triton"
        fns = {
            "paged": lambda: paged_decode_attention(q, kc, vc, table, lens, max_seq_len=context, impl=impl),
            "sdpa_folded": lambda: F.scaled_dot_product_attention(folded, k, v),
            "sdpa_enable_gqa": lambda: F.scaled_dot_product_attention(
                q.view(batch, heads, 1, dim), k, v, enable_gqa=True),
            "copy": lambda: dst.copy_(src),
        }
        samples = {name: [] for name in fns}
        for fn in fns.values():
            fn(), fn()
        for _ in range(3 if DRY else 15):
            for name, fn in fns.items():
                flush.zero_()
                if DRY:
                    t0 = time.perf_counter()
                    fn()
                    samples[name].append(time.perf_counter() - t0)
                    continue
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                fn()
                end.record()
                end.synchronize()
                samples[name].append(begin.elapsed_time(end) * 1e-3)
        med = {name: statistics.median(s) for name, s in samples.items()}
        gbps = {name: (2 if name == "copy" else 1) * kv_bytes / t / 1e9 for name, t in med.items()}
        rows.append({
            "batch": batch, "context": context, "kv_bytes": kv_bytes,
            "gb_per_s": gbps, "median_ms": {n: t * 1e3 for n, t in med.items()},
            "paged_fraction_of_copy": gbps["paged"] / gbps["copy"],
            "paged_vs_fastest_sdpa": min(med["sdpa_folded"], med["sdpa_enable_gqa"]) / med["paged"],
        })
        del kc, vc, k, v, src, dst
    return {"shapes": rows}


@step("measure")
def _measure():
    """kvplan measure --quick through the Python API: the profile from probes, the points
    predicted through the planner's step-time model, measured, checked."""
    from kvplan.measure.run import MeasureRequest, measure
    from kvplan.present.view import jsonable

    request = MeasureRequest(device=DEVICE, quick=True)
    if DRY:
        request = request._replace(
            decode_points=((1, 1024), (1, 4096), (4, 2048)), prefill_points=(128,), rounds=3
        )
    result = measure(request)
    data = jsonable(result)
    (OUT / "measure.json").write_text(json.dumps(data, indent=2))
    points = [
        {k: p[k] for k in ("phase", "batch_size", "context_len", "measured_s", "predicted_s",
                            "error", "bound", "predicted_datasheet_s", "error_datasheet")}
        for p in data["points"]
    ]
    check = data["check"]
    return {
        "passed": check["passed"],
        "median_abs_error": check["median_abs_error"],
        "worst_abs_error": check["worst_abs_error"],
        "mutations_caught": [m["name"] for m in check["mutations"] if m["caught"]],
        "failures": [n["id"] for n in check["failures"]],
        "points": points,
        "profile_compared": data["datasheet"],
        "bandwidth_bytes_per_s": data["profile"]["rates"]["bandwidth_bytes_per_s"],
    }


summary["elapsed_s"] = round(time.time() - STARTED, 1)
summary["ok"] = all(s.get("ok") and s.get("passed", True) for s in summary["steps"].values())
(OUT / "gpu-check.json").write_text(json.dumps(summary, indent=2, default=str))
print(json.dumps(summary, indent=2, default=str))
sys.exit(0 if summary["ok"] else 1)
PY
