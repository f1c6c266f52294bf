"""kvplan measure: the per-operator step-time model against hand-computed values, the profile
rules, the gate and its self-test, baselines and regressions, device identity (pynvml mocked),
the workload against an independent float64 forward, and the CLI's exit codes. The real runs
(minutes of measuring) are marked slow; no test asserts a speed."""

from __future__ import annotations

import json
import math
import statistics
import sys
import types
import xml.etree.ElementTree as ET

import pytest

torch = pytest.importorskip("torch")

from kvplan.dtypes import KvFormat  # noqa: E402
from kvplan.errors import KvplanError  # noqa: E402
from kvplan.formulas.step_time import (  # noqa: E402
    Op,
    OpKind,
    OpRates,
    curve_value,
    decode_ops,
    layer_shape,
    op_time,
    prefill_ops,
    scale_bytes,
    step_time,
)
from kvplan.formulas.weights import weight_bytes  # noqa: E402
from kvplan.inputs.hardware import load_profile  # noqa: E402
from kvplan.inputs.sources import load_model  # noqa: E402
from kvplan.measure import device as dev  # noqa: E402
from kvplan.measure.baseline import Baseline, Figure, compare, from_json  # noqa: E402
from kvplan.measure.probes import Probe  # noqa: E402
from kvplan.measure.profile import derive, figures_of, profile_yaml  # noqa: E402
from kvplan.measure.run import MUTATIONS, Point, _check  # noqa: E402
from kvplan.measure.timing import Clock, Item, Timing, noise, summarize, time_rounds  # noqa: E402
from kvplan.measure.verdict import verdict_of  # noqa: E402
from kvplan.measure.workload import Workload, truncate  # noqa: E402
from kvplan.present.measure import check_text, junit_xml, summary_line, verdict_json  # noqa: E402

from helpers import FITS_OR_NOT, run_cli, spec_from, synthetic_measure_points  # noqa: E402

SMALL = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}
FP32 = KvFormat("fp32")


# ---- the per-operator model -----------------------------------------------------------------
def test_op_time_is_the_larger_term_plus_launches():
    rates = OpRates(
        100.0, ((1.0, 50.0),), ((1.0, 10.0), (100.0, 1000.0)), ((1.0, 1.0),), ((1.0, 1.0),), 0.5
    )
    memory_bound = Op("w", OpKind.MATMUL, 1, 20.0, 1000.0, 0, 0, 2, 4096)
    t = op_time(memory_bound, rates)  # bytes 1000 / 50 = 20 s; FLOPs 20 / 10 = 2 s
    assert (t.memory_s, t.compute_s, t.overhead_s, t.time_s) == (20.0, 2.0, 1.0, 21.0)
    assert t.bound == "memory"
    gather = Op("g", OpKind.ELEMENTWISE, 0, 0, 0, 300.0, 0)  # streams at the 100 B/s stream rate
    assert op_time(gather, rates).time_s == 3.0 + 0.5
    compute_bound = Op("w", OpKind.MATMUL, 100, 5000.0, 100.0, 0, 0)  # 2 s of bytes
    assert op_time(compute_bound, rates).bound == "compute"
    assert op_time(compute_bound, rates).time_s == 5.0 + 0.5  # 5000 / 1000 at 100 rows


def test_curves_interpolate_in_log_space_and_never_extrapolate():
    curve = ((1.0, 10.0), (100.0, 1000.0))
    assert curve_value(curve, 10.0) == pytest.approx(100.0)  # halfway in log: geometric mean
    assert curve_value(curve, 0.5) == 10.0 and curve_value(curve, 1e6) == 1000.0


def test_a_layer_is_laid_out_from_its_stated_widths():
    spec = load_model("qwen2.5-7b")
    shape = layer_shape(spec, spec.layers[0])
    qkv, o, gate_up, down = shape.matrices
    assert (qkv.rows, qkv.cols) == (28 * 128 + 4 * (128 + 128), 3584)
    assert (o.rows, o.cols) == (3584, 28 * 128)
    assert (gate_up.rows, gate_up.cols) == (2 * 18944, 3584) and shape.gated
    assert (down.rows, down.cols) == (3584, 18944)
    assert shape.other_params == 2 * 3584 + 4608  # two RMS norms and the q|k|v bias


def test_a_truncated_model_reads_exactly_its_layers_weights():
    spec = load_model("qwen2.5-7b")
    two = truncate(spec, 2)
    ops = decode_ops(two, 3, 1000, "fp32", FP32)
    # the planner's own weight count of those two layers, 4 bytes each
    assert sum(op.weight_bytes for op in ops) == weight_bytes(two, "fp32")
    assert sum(op.weight_bytes for op in ops) == 2 * sum(dict(spec.layers[0].params).values()) * 4
    kv = sum(op.kv_bytes for op in ops)
    assert kv == 2 * 3 * 1000 * 2 * 4 * 128 * 4  # layers x batch x tokens x K,V x heads x d x 4
    attention = [op for op in ops if op.kind is OpKind.DECODE_ATTENTION]
    assert attention[0].flops == 3 * 1000 * 4 * 28 * 128  # QK^T and PV: 2 x 2 x Hq x d per key


def test_the_gather_splits_attention_into_memory_and_compute():
    spec = truncate(load_model("qwen2.5-7b"), 1)
    fused = decode_ops(spec, 2, 512, "fp32", FP32)
    split = decode_ops(spec, 2, 512, "fp32", FP32, gather_kv=True)
    gather = next(op for op in split if op.name == "kv_gather")
    attention = next(op for op in fused if op.name == "attention")
    assert gather.kv_bytes == attention.kv_bytes and gather.flops == 0
    assert sum(op.flops for op in split) == sum(op.flops for op in fused)


def test_prefill_attention_is_causal():
    spec = truncate(spec_from(SMALL), 1)
    ops = prefill_ops(spec, 10, "fp32", FP32)
    attention = next(op for op in ops if op.kind is OpKind.PREFILL_ATTENTION)
    assert attention.flops == 2 * 8 * (32 + 32) * (10 * 11 // 2)


def test_layers_it_cannot_lay_out_are_refused():
    with pytest.raises(KvplanError, match="MLA|mla"):
        truncate(load_model("deepseek-v2-lite"), 1)
    with pytest.raises(KvplanError, match="only dense"):
        truncate(load_model("qwen1.5-moe-a2.7b"), 1)
    with pytest.raises(KvplanError, match="has 2 layers"):
        truncate(spec_from(SMALL), 3)


def test_scale_bytes_changes_only_the_bytes_it_names():
    ops = decode_ops(truncate(spec_from(SMALL), 1), 1, 64, "fp32", FP32)
    doubled = scale_bytes(ops, weights=2.0)
    assert [o.weight_bytes for o in doubled] == [2 * o.weight_bytes for o in ops]
    assert [o.kv_bytes for o in doubled] == [o.kv_bytes for o in ops]
    assert [o.flops for o in scale_bytes(ops, kv=10.0)] == [o.flops for o in ops]


# ---- the workload runs what the model predicts -------------------------------------------------
def test_workload_decode_equals_an_independent_float64_forward():
    spec = truncate(spec_from(SMALL), 2)
    work = Workload(spec, "fp32", "cpu", 4096, attention_impl="torch")
    batch, context = 2, 40
    step = work.decode(batch, context)
    out = step()
    table, _ = work._table(batch, context)
    h = _step_input(step).double()
    for layer in work.layers:  # RMS norm (unit weights), dense GQA attention, gated MLP
        w = {k: v.double() for k, v in layer["weights"].items()}
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        q = (y @ w["qkv"].T)[:, : 8 * 32].view(batch, 8, 32)
        k_cache, v_cache = layer["cache"]
        outs = []
        for b in range(batch):
            blocks = table[b].long()
            k = k_cache[blocks].reshape(-1, 2, 32)[:context].double().repeat_interleave(4, 1)
            v = v_cache[blocks].reshape(-1, 2, 32)[:context].double().repeat_interleave(4, 1)
            scores = torch.einsum("hd,thd->ht", q[b], k) / math.sqrt(32)
            outs.append(torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v))
        h = h + torch.stack(outs).reshape(batch, -1) @ w["o"].T
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        gate, up = (y @ w["gate_up"].T).chunk(2, -1)
        h = h + (torch.nn.functional.silu(gate) * up) @ w["down"].T
    torch.testing.assert_close(out.double(), h, atol=1e-4, rtol=1e-4)


def _step_input(step):
    """The x0 a decode step closure holds (its only [B, hidden] tensor)."""
    for cell in step.__closure__:
        value = cell.cell_contents
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            return value
    raise AssertionError("no input in the closure")


def test_workload_prefill_writes_its_kv_where_decode_reads_it():
    spec = truncate(spec_from(SMALL), 1)
    work = Workload(spec, "fp32", "cpu", 512, attention_impl="torch")
    work.prefill(40)()
    table, _ = work._table(1, 40)
    k_cache, _ = work.layers[0]["cache"]
    written = k_cache[table[0].long()].reshape(-1, 2, 32)[:40]
    assert torch.isfinite(written).all()


def test_a_workload_draws_from_its_seed_and_leaves_the_callers_rng_alone():
    """Workload seeds its own draws (the same weights for the same seed) inside a forked RNG:
    the caller's random stream goes on as if nothing had been drawn."""
    spec = truncate(spec_from(SMALL), 1)
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    first = Workload(spec, "fp32", "cpu", 64, attention_impl="torch")
    assert torch.equal(torch.rand(3), expected)
    second = Workload(spec, "fp32", "cpu", 64, attention_impl="torch", seed=0)
    other = Workload(spec, "fp32", "cpu", 64, attention_impl="torch", seed=1)
    weights = [w.layers[0]["weights"] for w in (first, second, other)]
    name = next(iter(weights[0]))
    assert torch.equal(weights[0][name], weights[1][name])
    assert not torch.equal(weights[0][name], weights[2][name])


def test_a_measure_run_puts_the_callers_thread_count_back(monkeypatch):
    """measure sets its own thread layout for the run and restores the caller's after it, even
    when the run fails."""
    import kvplan.measure.run as run

    seen = []

    def failing(request, progress, began, device, tolerance, threads, busy):
        seen.append(torch.get_num_threads())
        raise KvplanError("stopped")

    monkeypatch.setattr(run, "_measure_on", failing)
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with pytest.raises(KvplanError):
        run.measure(run.MeasureRequest(device="cpu", threads=target))
    assert seen == [target] and torch.get_num_threads() == before


# ---- the profile rules -------------------------------------------------------------------------
def _timing(seconds: float) -> Timing:
    return Timing(seconds, seconds * 0.95, seconds * 1.05, 7)


def _probe(key, kind, size, flops, num_bytes):
    return Probe(key, kind, size, flops, num_bytes, Item(key, key, lambda: None))


def synthetic_probes():
    """Probes with hand-picked times: stream 10 GB/s best (triad), a matvec at 8 GB/s (memory-
    bound: its cache-resident twin is 4x faster), M=4 at 6 GFLOP/s (compute-bound)."""
    gb = 1e9
    probes = [
        _probe("stream:copy", "stream", 0, 0, 8 * gb),  # 1 s -> 8 GB/s
        _probe("stream:triad", "stream", 0, 0, 10 * gb),  # 1 s -> 10 GB/s
        _probe("stream:read", "stream", 0, 0, 9 * gb),
        _probe("matmul:m=1", "matmul", 1, 4 * gb, 8 * gb),  # 1 s: 8 GB/s, 4 GFLOP/s
        _probe("matmul_cache:m=1", "matmul_cache", 1, 4 * gb, 0.1 * gb),  # 0.25 s: 16 GFLOP/s
        _probe("matmul_bandwidth:k=1024", "matmul_bandwidth", 1024, 1, 6 * gb),
        _probe("matmul:m=4", "matmul", 4, 6 * gb, 8 * gb),  # 1 s: 6 GFLOP/s, 8 GB/s of 8 -> ...
        _probe("matmul_cache:m=4", "matmul_cache", 4, 6 * gb, 0.1 * gb),
        _probe("decode_attention:tokens=1000", "decode_attention", 1000, 2 * gb, 0),
        _probe("prefill_attention:tokens=100", "prefill_attention", 100, 3 * gb, 0),
        _probe("overhead", "overhead", 50, 0, 0),
        _probe("matmul_start", "matmul_start", 1, 1, 0.1 * gb),  # 12.5 ms of bytes at 8 GB/s
    ]
    times = {p.key: 1.0 for p in probes}
    times["matmul_cache:m=1"] = 0.25
    times["matmul:m=4"] = 2.0  # 8 GB in 2 s: 4 GB/s, half the matvec rate -> compute-bound
    times["matmul_cache:m=4"] = 0.5
    times["overhead"] = 50e-6
    times["matmul_start"] = 0.02
    return probes, {k: _timing(v) for k, v in times.items()}


def test_profile_rules():
    probes, timings = synthetic_probes()
    profile = derive(probes, timings, kv_bytes_per_token=1e6, gather_kv=True)
    rates = profile.rates
    assert rates.bandwidth_bytes_per_s == 10e9 and profile.bandwidth_probe == "stream:triad"
    assert dict(rates.matmul_bandwidth_bytes_per_s) == {1024.0: 6e9, 4096.0: 8e9}
    matmul = dict(rates.matmul_flop_per_s)
    assert matmul[1.0] == 16e9  # memory-bound probe: the cache-resident rate
    assert matmul[4.0] == 3e9  # compute-bound probe: its own rate, not the cache's 12e9
    # the gather's memory time (1000 tokens x 1 MB / 10 GB/s = 0.1 s) comes off the attention
    assert dict(rates.decode_attention_flop_per_s)[1000.0] == pytest.approx(2e9 / 0.9)
    assert dict(rates.prefill_attention_flop_per_s)[100.0] == 3e9
    assert rates.overhead_s == pytest.approx(1e-6)
    # a cold small GEMM beyond its bytes and one launch: every GEMM's fixed cost
    assert rates.matmul_overhead_s == pytest.approx(0.02 - 0.1e9 / 8e9 - 1e-6)
    gemm = Op("w", OpKind.MATMUL, 1, 0, 8e9, 0, 0, 1, 4096)
    assert op_time(gemm, rates).time_s == pytest.approx(1.0 + 0.02 - 0.1e9 / 8e9)


def test_saved_profile_loads_everywhere_and_keeps_its_figures(tmp_path):
    probes, timings = synthetic_probes()
    profile = derive(probes, timings, 1e6, True)
    identity = {
        "kind": "cpu",
        "name": "Test CPU",
        "cpu_model": "Test CPU",
        "cpu_threads": 2,
        "memory_bytes": 16e9,
        "last_level_cache_bytes": 32e6,
        "rounds": 7,
    }
    path = tmp_path / "me.yaml"
    path.write_text(profile_yaml(profile, identity, "fp32", True, 2))
    loaded = load_profile(str(path))
    assert loaded.memory_bandwidth_bytes_per_s == pytest.approx(10e9)
    assert loaded.peak("bf16") == pytest.approx(16e9)  # the best matmul rate, as fp32
    assert dict(loaded.measured.matmul_flop_per_s) == pytest.approx({1.0: 16e9, 4.0: 3e9})
    assert loaded.measured.device["cpu_model"] == "Test CPU"
    figures = figures_of(loaded)
    assert figures["matmul:m=4"][0] == pytest.approx(3e9)
    for command in (("roofline", "llama-3.1-8b"), ("capacity", "llama-3.1-8b")):
        code, _, err = run_cli(*command, "--gpu", str(path))
        assert code in FITS_OR_NOT, err  # 16 GB: capacity may answer fits: NO (exit 1)


def test_a_broken_measured_section_is_one_clear_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: x\npeak_flop_per_s: {fp32: 1e+12}\nmemory_bytes: 1e+9\n"
        "memory_bandwidth_bytes_per_s: 1e+10\nmeasured: {matmul_flop_per_s: {1: -3}}\n"
    )
    with pytest.raises(KvplanError, match="must be (a )?positive|needs"):
        load_profile(str(path))


# ---- the gate ------------------------------------------------------------------------------------
def _point(phase, error, bound):
    return Point(
        phase,
        1,
        1,
        1.0,
        1.0,
        1.0,
        1.0,
        0.0,
        1 + error,
        error,
        bound,
        0,
        0,
        0,
        1,
        0,
        None,
        None,
        0,
        0,
        0,
        False,
        (),
    )


def _steps(rates, measured_by_ops):
    """Steps whose measured times equal what `rates` predicts times a factor."""
    steps, timings = [], {}
    for i, (ops, factor) in enumerate(measured_by_ops):
        key = f"p{i}"
        steps.append(("decode", 1, 1, ops, key))
        timings[key] = _timing(step_time(ops, rates).total_s * factor)
    return steps, timings


def test_the_gate_catches_every_mutation_of_the_bytes_with_memory_bound_points():
    rates = OpRates(10.0, ((1.0, 10.0),), ((1.0, 100.0),), ((1.0, 100.0),), ((1.0, 100.0),))
    weights = Op("w", OpKind.MATMUL, 1, 10.0, 100.0, 0, 0)  # memory-bound: 10 s vs 0.1 s
    cache = Op("g", OpKind.ELEMENTWISE, 0, 0, 0, 50.0, 0)  # 5 s of KV
    steps, timings = _steps(rates, [([weights, cache], 1.0), ([weights], 1.02)])
    points = [_point("decode", 0.0, "memory"), _point("decode", -0.02, "memory")]
    check = _check(points, steps, timings, rates, 0.15, False)
    assert check.passed and all(m.caught for m in check.mutations)
    assert [m.name for m in check.mutations] == [name for name, _, _ in MUTATIONS]
    kv = next(m for m in check.mutations if m.name == "KV x10")
    assert kv.worst_abs_error == pytest.approx(45 / 15)  # 10 + 50 s predicted against 15 s


def test_the_gate_fails_without_a_memory_bound_point_and_on_misses():
    rates = OpRates(10.0, ((1.0, 10.0),), ((1.0, 1.0),), ((1.0, 1.0),), ((1.0, 1.0),))
    compute = Op("w", OpKind.MATMUL, 1, 100.0, 1.0, 0, 0)  # 100 s of arithmetic, bytes moot
    steps, timings = _steps(rates, [([compute], 1.0)])
    check = _check([_point("decode", 0.0, "compute")], steps, timings, rates, 0.15, False)
    ids = {n.id for n in check.failures}
    assert not check.passed and "check-no-memory-point" in ids
    assert "check-mutation-missed" in ids  # wrong weight bytes cannot show at such a point
    worst = _check([_point("decode", -0.4, "memory")], steps, timings, rates, 0.15, False)
    assert {"check-median", "check-worst"} <= {n.id for n in worst.failures}


# ---- baselines and regressions -----------------------------------------------------------------
def _baseline(figures, identity=None, workload=None):
    return Baseline(
        "b.json",
        "measure-json",
        identity or {"kind": "cpu", "cpu_model": "X", "cpu_threads": 2},
        workload,
        figures,
    )


def test_a_regression_beyond_the_threshold_and_the_noise_fails_one_within_the_noise_does_not():
    now = _baseline(
        {
            "bandwidth": Figure(9.0, 0.01, 9, True),  # 10 -> 9 GB/s: 11% worse, noise ~1.3%
            "matmul:m=4": Figure(9.0, 0.30, 9, True),  # 11% worse, but the run is noisy (30%)
            "decode:batch=1,tokens=1024": Figure(1.02, 0.01, 9, False),  # 2% slower: fine
            "overhead": Figure(1e-6, 0.0, 9, False),
        },
        workload={"model": "m"},
    )
    then = _baseline(
        {
            "bandwidth": Figure(10.0, 0.01, 9, True),
            "matmul:m=4": Figure(10.0, 0.30, 9, True),
            "decode:batch=1,tokens=1024": Figure(1.0, 0.01, 9, False),
            "overhead": Figure(2e-6, 0.0, 9, False),
        },
        workload={"model": "m"},
    )
    result = compare(now, then, 0.05, False)
    verdicts = {c.key: c.verdict for c in result.changes}
    assert verdicts == {
        "bandwidth": "regression",
        "matmul:m=4": "within noise",
        "decode:batch=1,tokens=1024": "ok",
        "overhead": "faster",
    }
    assert result.regressions == 1 and result.within_noise == 1 and not result.passed
    change = next(c for c in result.changes if c.key == "bandwidth")
    assert change.worse_by == pytest.approx(10 / 9 - 1)
    assert change.noise == pytest.approx(math.hypot(noise(0.01, 9), noise(0.01, 9)))


def test_another_device_is_refused_unless_asked():
    now = _baseline({"bandwidth": Figure(1.0, 0.0, 5, True)})
    other = _baseline(
        {"bandwidth": Figure(1.0, 0.0, 5, True)},
        identity={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
    )
    with pytest.raises(KvplanError, match="allow-other-device"):
        compare(now, other, 0.05, False)
    assert not compare(now, other, 0.05, True).same_device


def test_step_times_are_compared_only_for_the_same_workload():
    key = "decode:batch=1,tokens=1024"
    now = _baseline({key: Figure(2.0, 0.0, 5, False)}, workload={"model": "a"})
    then = _baseline({key: Figure(1.0, 0.0, 5, False)}, workload={"model": "b"})
    assert compare(now, then, 0.05, False).changes == ()


# ---- device identity (pynvml mocked) ---------------------------------------------------------------
class FakeNvml(types.SimpleNamespace):
    """pynvml's surface: handles are the physical index; one query refuses (NotSupported)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1

    def __init__(self, names, uuids):
        super().__init__(names=names, uuids=uuids, inited=False)

    def nvmlInit(self):
        self.inited = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return self.uuids.index(uuid)

    def nvmlDeviceGetName(self, handle):
        return self.names[handle].encode()

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980 if clock == 0 else 2619

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return 1980 if clock == 0 else 2619


def test_nvml_follows_cuda_visible_devices(monkeypatch):
    nvml = FakeNvml(["GPU zero", "GPU one", "GPU two"], ["GPU-a", "GPU-b", "GPU-c"])
    props = types.SimpleNamespace()  # no uuid: matched through CUDA_VISIBLE_DEVICES
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert dev.nvml_handle(nvml, 0, props) == 2 and dev.nvml_handle(nvml, 1, props) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    assert dev.nvml_handle(nvml, 0, props) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert dev.nvml_handle(nvml, 0, types.SimpleNamespace(uuid="c")) == 2  # the UUID wins


def test_cuda_identity_reads_the_name_first_and_survives_a_refused_query(monkeypatch):
    nvml = FakeNvml(["NVIDIA H100 80GB HBM3", "NVIDIA H200"], ["GPU-a", "GPU-b"])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    props = types.SimpleNamespace(
        name="NVIDIA H200",
        multi_processor_count=132,
        total_memory=150_110_011_392,
        L2_cache_size=50 << 20,
        major=9,
        minor=0,
    )
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    info = dev.cuda_identity(4)
    assert info["name"] == "NVIDIA H200" and info["nvml_name"] == "NVIDIA H200"
    assert info["driver_version"] == "570.86.15" and info["clocks_mhz"]["sm_max"] == 1980
    assert info["power_limit_w"] is None  # refused: null, the rest kept
    assert dev.match_profile(info).name.startswith("H200")
    assert dev.device_key(info) == "cuda: NVIDIA H200"


def test_a_thread_layout_that_does_not_oversubscribe(monkeypatch):
    monkeypatch.setattr(dev, "usable_cpus", lambda: 2)
    monkeypatch.setattr(dev, "busy_cpus", lambda window_s=0.3: 1.1)
    assert dev.default_threads() == (1, 1.1)
    monkeypatch.setattr(dev, "busy_cpus", lambda window_s=0.3: 0.1)
    assert dev.default_threads()[0] == 1  # one core left free for everything else
    monkeypatch.setattr(dev, "usable_cpus", lambda: 64)
    assert dev.default_threads()[0] == 63
    monkeypatch.setattr(dev, "busy_cpus", lambda window_s=0.3: 10.4)
    assert dev.default_threads()[0] == 53
    monkeypatch.setattr(dev, "busy_cpus", lambda window_s=0.3: 80.0)
    assert dev.default_threads()[0] == 1


# ---- timing ----------------------------------------------------------------------------------------
def test_rounds_interleave_every_item_and_summarize_each():
    order = []
    items = [Item(k, k, lambda k=k: order.append(k)) for k in "abc"]
    timings = time_rounds(items, Clock("cpu", 1 << 20), rounds=4, min_sample_s=0.0)
    assert set(timings) == {"a", "b", "c"} and all(t.runs == 4 for t in timings.values())
    measured = order[6:]  # after two warm-up calls each
    assert measured[:3] == ["a", "b", "c"] and measured[3:6] == ["b", "c", "a"]


def test_summary_statistics():
    t = summarize([3, 1, 2, 5, 4])
    assert t.median_s == 3 and t.p20_s == pytest.approx(1.8) and t.p80_s == pytest.approx(4.2)
    assert t.spread == pytest.approx((4.2 - 1.8) / 2 / 3)


# ---- presentation ----------------------------------------------------------------------------------
def _data(errors, caught=True, regressions=0, check_gated=True, baseline=True):
    """A measure JSON's fields the presenters read, from synthetic point errors: the check's
    figures and failure notes follow from them as kvplan.measure.run._check makes them, and the
    verdict from those (no timing)."""
    points = synthetic_measure_points(errors)
    median = statistics.median(abs(e) for e in errors)
    worst = max(abs(e) for e in errors)
    ids = (
        (["check-median"] if median > 0.15 else [])
        + (["check-worst"] if worst > 0.3 else [])
        + ([] if caught else ["check-mutation-missed"])
    )
    data = {
        "identity": {"kind": "cpu", "name": "CPU X"},
        "conditions": {"threads": 1, "elapsed_s": 12.5},
        "points": points,
        "check": {
            "passed": not ids,
            "tolerance": 0.15,
            "worst_tolerance": 0.3,
            "median_abs_error": median,
            "worst_abs_error": worst,
            "memory_bound_points": 1,
            "mutations": [{"name": "KV x10", "caught": caught, "median_abs_error": 0.4}],
            "failures": [{"id": i, "text": i} for i in ids],
        },
        "verdict": verdict_json(verdict_of(ids, check_gated, regressions if baseline else None)),
    }
    if baseline:
        data["baseline"] = {
            "regressions": regressions,
            "within_noise": 0,
            "max_regression": 0.05,
            "changes": [
                {
                    "key": "bandwidth",
                    "verdict": "regression" if regressions else "ok",
                    "worse_by": 0.2,
                    "noise": 0.01,
                }
            ],
        }
    return data


def test_the_check_line_says_which_check_failed_what_it_means_and_what_to_do():
    """Issue 30 #11: a 5.4% median error with a weak self-test mutation read "check FAILED",
    as if kvplan were wrong on the machine."""
    weak = _data([0.054], caught=False)
    weak["check"]["mutations"][0]["name"] = "weights x2"
    assert weak["verdict"]["check_missed"] == ["self-test"] and weak["verdict"]["blind"]
    text = check_text(weak["check"], ["self-test"])
    assert text.startswith("FAILED (kvplan's self-test, not its predictions)")
    assert "the predictions are within the limits on this device (median |error| 5.4%" in text
    assert "with weights x2 on purpose the gate would still pass" in text
    assert "it is blind, not passed" in text
    assert "Nothing here says kvplan is wrong on this machine" in text and "--confirm" in text
    off = _data([0.5], caught=True)
    assert off["verdict"]["check_missed"] == ["predictions"]
    assert check_text(off["check"], ["predictions"]).startswith(
        "FAILED (kvplan's predictions vs this device)"
    )
    assert check_text(_data([0.01])["check"], []).startswith("passed: median |error| 1.0%")
    # without --check the same check gates nothing, and says so
    assert check_text(off["check"], ["predictions"], gated=False).startswith(
        "not gated (no --check), it would have failed (kvplan's predictions vs this device)"
    )
    assert check_text(_data([0.01])["check"], [], gated=False).startswith(
        "not gated (no --check), passed: median"
    )


def test_junit_xml_has_a_case_per_point_and_criterion():
    root = ET.fromstring(junit_xml(_data([0.05, 0.02, -0.45])))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 3 + 2 + 1 + 1  # points, median + memory-bound, a mutation, a figure
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["decode batch 1, 3072 tokens"]
    assert suite.get("failures") == "1"
    regressed = ET.fromstring(junit_xml(_data([0.0], regressions=1)))
    assert regressed.find("testsuite").get("failures") == "1"
    # without --check the check's cases are skipped, with what they showed; a regression fails
    ungated = junit_xml(_data([0.05, 0.02, -0.45], check_gated=False))
    ungated = ET.fromstring(ungated).find("testsuite")
    assert ungated.get("failures") == "0" and ungated.get("skipped") == "6"
    (point,) = [c for c in ungated.findall("testcase") if c.get("name").endswith("3072 tokens")]
    assert point.find("skipped").get("message") == (
        "not gated (no --check): it would fail: predicted 5.500 ms, measured 10.000 ms: error "
        "-45.0% beyond 30%"
    )


def test_the_ci_line_says_what_failed():
    assert summary_line(_data([0.01])).startswith("kvplan measure: PASS | cpu CPU X, 1 thread |")
    # a self-test alone is the gate's sensitivity, not a wrong prediction (issue 30 #11), and a
    # blind gate is not a pass
    line = summary_line(_data([0.01], caught=False))
    assert line.startswith(
        "kvplan measure: FAIL (self-test: the gate is blind here, it could not see wrong bytes; "
        "predictions within the limits) |"
    )
    missed = _data([0.01, 0.9])
    assert "FAIL (prediction check: predictions vs this device)" in summary_line(missed)
    assert "FAIL (regression)" in summary_line(_data([0.01], regressions=1))
    both = summary_line(_data([0.01, 0.9], regressions=1))
    assert "FAIL (prediction check: predictions vs this device; regression) |" in both


def test_a_check_without_check_gates_nothing_and_the_ci_line_says_so():
    """Issue 32's CI log: `measure --baseline` without --check printed "FAIL (self-test: ...)"
    and exited 0. The check is reported, not gated, and the line says what was and was not."""
    line = summary_line(_data([0.01], caught=False, check_gated=False))
    assert line.startswith(
        "kvplan measure: PASS (baseline: no regression; the prediction check not gated, no "
        "--check) | cpu CPU X, 1 thread | not gated (no --check): 1 points:"
    )
    assert (
        "self-test 0/1 caught | not gated, it would fail: blind, the check could not see wrong"
        in line
    )
    assert "FAIL" not in line
    plain = summary_line(_data([0.01, 0.9], check_gated=False, baseline=False))
    assert plain.startswith("kvplan measure: NOT GATED (no --check or --baseline: the exit")
    assert (
        "caught | not gated, it would fail: the predictions missed" in plain and "FAIL" not in plain
    )
    regressed = summary_line(_data([0.01, 0.9], regressions=2, check_gated=False))
    assert regressed.startswith("kvplan measure: FAIL (regression) |")


# ---- the command line ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--device", "tpu"], "choose auto, cpu or cuda"),
        (["--threads", "0"], "not in the range 1<=x<=1024"),
        (["--max-regression", "abc"], "give a percentage"),
        (["--max-regression", "250%"], "between 0.1% and 100%"),
        (["--tolerance", "nan"], "--tolerance nan must be between"),
        (["--baseline", "/no/such/file.json"], "no such file"),
        (["--baseline", "h100"], "no such file"),
        (["--model", "deepseek-v2-lite", "--device", "cpu"], "is not measured"),
        (["--json", "/no/such/folder/m.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle):
    code, _, err = run_cli("measure", "--quick", *argv)
    assert code == 2 and needle in err and "Traceback" not in err


def test_a_datasheet_profile_is_not_a_baseline():
    import kvplan.hardware_profiles as profiles

    path = f"{profiles.__path__[0]}/h100-sxm.yaml"
    code, _, err = run_cli("measure", "--baseline", path)
    assert code == 2 and "a datasheet profile, not a measured one" in err


def test_a_measure_json_baseline_round_trips():
    data = {
        "identity": {"kind": "cpu", "cpu_model": "X", "cpu_threads": 2},
        "conditions": {
            "rounds": 7,
            "model": "m",
            "layers": 1,
            "dtype": "fp32",
            "attention_impl": "torch",
        },
        "profile": {
            "figures": [{"key": "bandwidth", "value": 1e10, "spread": 0.02, "unit": "bytes_per_s"}]
        },
        "points": [
            {
                "phase": "decode",
                "batch_size": 1,
                "context_len": 64,
                "measured_s": 0.02,
                "spread": 0.03,
            }
        ],
    }
    base = from_json(json.loads(json.dumps(data)))
    assert base.figures["bandwidth"] == Figure(1e10, 0.02, 7, True)
    assert base.figures["decode:batch=1,tokens=64"] == Figure(0.02, 0.03, 7, False)


def test_a_run_is_compared_as_its_json_reads_without_the_round_trip():
    """measure --baseline builds the current run's figures from the typed result itself (the
    presenters' JSON is above measure): the same Baseline as from the JSON it writes."""
    from kvplan.measure.profile import DeviceProfile
    from kvplan.measure.profile import Figure as ProfileFigure
    from kvplan.measure.run import Check, MeasureResult
    from kvplan.present.view import jsonable

    figures = (
        ProfileFigure("bandwidth", "stream", 1 << 24, 1.5e10, 1.4e10, "bytes_per_s", 0.02, True),
        ProfileFigure("matmul:m=4", "matmul", 4, 2e11, 2e11, "flop_per_s", 0.05),
        ProfileFigure("matmul_overhead", "overhead", 0, 3e-5, 4e-5, "s", 0.1),
    )
    point = Point(**dict.fromkeys(Point._fields, 0.0))._replace(
        phase="decode", batch_size=2, context_len=64, measured_s=0.01, spread=0.03, ops=()
    )
    result = MeasureResult(
        {"kind": "cpu", "cpu_model": "X", "cpu_threads": 2},
        {"rounds": 5, "model": "m", "layers": 1, "dtype": "fp32", "attention_impl": "torch"},
        DeviceProfile(None, figures, "stream"),
        None,
        (point,),
        Check(True, 0.15, 0.3, 0.05, 0.1, 1, (), ()),
        {},
        (),
    )
    typed = from_json(result)
    assert typed == from_json(json.loads(json.dumps(jsonable(result))))
    assert typed.figures["decode:batch=2,tokens=64"] == Figure(0.01, 0.03, 5, False)
    assert typed.figures["matmul:m=4"] == Figure(2e11, 0.05, 5, True)
    assert typed.figures["matmul_start"] == Figure(4e-5, 0.1, 5, False)  # the probe's raw time


# ---- real runs (slow) ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(
        json.dumps(SMALL | {"hidden_size": 1024, "intermediate_size": 4096, "head_dim": 128})
    )
    return str(path)


@pytest.mark.slow
def test_a_quick_run_end_to_end(small_model, tmp_path):
    out, profile, junit = tmp_path / "m.json", tmp_path / "me.yaml", tmp_path / "m.xml"
    code, text, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--rounds",
        "3",
        "--json",
        str(out),
        "--save-profile",
        str(profile),
        "--junit-xml",
        str(junit),
    )
    assert code == 0, err
    # no --check, no --baseline: nothing gates the run, whatever its check showed
    assert err.strip().splitlines()[-1].startswith("kvplan measure: NOT GATED (")
    data = json.loads(out.read_text())
    assert data["verdict"]["outcome"] == "NOT GATED" and data["verdict"]["exit_code"] == 0
    for point in data["points"]:
        for key in (
            "phase",
            "batch_size",
            "context_len",
            "measured_s",
            "predicted_s",
            "error",
            "used_for_calibration",
            "bound",
            "predicted_roofline_s",
        ):
            assert key in point
        assert point["used_for_calibration"] is False
        assert point["error"] == pytest.approx(point["predicted_s"] / point["measured_s"] - 1)
        assert point["p20_s"] <= point["measured_s"] <= point["median_s"] <= point["p80_s"]
    assert {p["context_len"] for p in data["points"] if p["phase"] == "decode"} >= {16384}
    assert max(p["batch_size"] for p in data["points"]) == 16
    for key in ("name", "cpu_model", "cpu_threads", "threads", "torch_version", "memory_bytes"):
        assert key in data["identity"]
    json.dumps(data, allow_nan=False)
    ET.parse(junit)
    assert load_profile(str(profile)).measured is not None
    # the run against itself: no regression; against a doctored, 3x faster baseline: exit 3
    code, _, err = run_cli(
        "measure", "--model", small_model, "--quick", "--rounds", "3", "--baseline", str(out)
    )
    assert code in (0, 3), err  # a shared machine may drift; 3 only when beyond its noise
    word = "kvplan measure: PASS (baseline" if code == 0 else "kvplan measure: FAIL (regression)"
    assert err.strip().splitlines()[-1].startswith(word), err
    faster = json.loads(out.read_text())
    for figure in faster["profile"]["figures"]:
        figure["value"] = figure["value"] * 3 if figure["unit"] != "s" else figure["value"] / 3
    for point in faster["points"]:
        point["measured_s"] /= 3
    (tmp_path / "faster.json").write_text(json.dumps(faster))
    code, text, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--rounds",
        "3",
        "--baseline",
        str(tmp_path / "faster.json"),
        "-f",
        "json",
    )
    assert code == 3, err
    assert json.loads(text)["baseline"]["regressions"] > 0


@pytest.mark.slow
def test_check_fails_with_a_profile_whose_bandwidth_is_3x_wrong(small_model, tmp_path):
    profile = tmp_path / "measured.yaml"
    code, _, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--rounds",
        "3",
        "--save-profile",
        str(profile),
    )
    assert code == 0, err
    text = profile.read_text()
    line = next(x for x in text.splitlines() if x.startswith("memory_bandwidth_bytes_per_s"))
    wrong = float(line.split(":")[1]) * 3
    lines = text.replace(line, f"memory_bandwidth_bytes_per_s: {wrong:.6e}").splitlines()
    # the GEMMs' weights stream 3x too fast as well
    out, inside = [], False
    for row in lines:
        if row.startswith("  matmul_bandwidth_bytes_per_s"):
            inside = True
        elif inside and not row.startswith("    "):
            inside = False
        if inside and row.startswith("    "):
            key, value = row.split(":")
            row = f"{key}: {float(value) * 3:.6e}"
        out.append(row)
    (tmp_path / "wrong.yaml").write_text("\n".join(out) + "\n")
    code, text, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--rounds",
        "3",
        "--gpu",
        str(tmp_path / "wrong.yaml"),
        "--check",
        "-f",
        "json",
    )
    assert code == 1, err
    data = json.loads(text)
    assert any(n["id"] == "check-profile-off" for n in data["notes"])
    assert data["check"]["profile_checked"] and "profile" in data["verdict"]["failed"]
    assert (
        data["summary"].startswith("kvplan measure: FAIL (") and "--gpu profile" in data["summary"]
    )
    assert data["summary"] == err.strip().splitlines()[-1]


# ---- the CI recipes in docs/measure.md -------------------------------------------------------------
def test_the_ci_recipes_are_valid_workflows_using_real_options():
    import re

    import yaml

    from kvplan.cli import command_tree

    from helpers import REPO

    text = (REPO / "docs" / "measure.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2  # the GPU runner and the CPU runner
    measure = command_tree().commands["measure"]
    options = {opt for param in measure.params for opt in param.opts}
    for block in blocks:
        workflow = yaml.safe_load(block)
        assert {"name", "jobs"} <= set(workflow) and (True in workflow or "on" in workflow)
        for job in workflow["jobs"].values():
            assert job["runs-on"] and isinstance(job["steps"], list)
            runs = [step["run"] for step in job["steps"] if "run" in step]
            commands = [
                line for run in runs for line in run.splitlines() if "kvplan measure" in line
            ]
            assert commands
            for command in commands:
                used = set(re.findall(r"(--[a-z-]+)", command.split("kvplan measure", 1)[1]))
                assert used <= options, used - options


def test_a_residual_overhead_is_compared_as_its_probes_raw_time():
    """matmul_overhead is the first small matmul's time less a streaming estimate from another
    probe: ~50 of ~250 us on a CPU, and it moved +64% and +168% between two CI runs on an idle
    machine where the raw time moved a few percent. The baseline compares the raw time."""

    def run(residual_s, raw_s):
        return {
            "identity": {"kind": "cpu", "cpu_model": "X", "cpu_threads": 2},
            "conditions": {"rounds": 7, "model": "m", "layers": 1, "dtype": "fp32",
                           "attention_impl": "torch"},
            "profile": {"figures": [{"key": "matmul_overhead", "value": residual_s,
                                     "probe_value": raw_s, "spread": 0.01, "unit": "s"}]},
            "points": [],
        }  # fmt: skip

    then = from_json(run(48.9e-6, 243.5e-6))
    assert set(then.figures) == {"matmul_start"}
    shifted = compare(from_json(run(130.9e-6, 250.0e-6)), then, 0.5, False)
    assert shifted.passed and shifted.changes[0].worse_by == pytest.approx(250 / 243.5 - 1)
    slower = compare(from_json(run(400e-6, 600e-6)), then, 0.5, False)  # a real slowdown
    assert not slower.passed


# ---- --confirm: a miss or a regression must show in a second, fresh run ------------------------
def _run_result(passed: bool, worst: float = 0.1, figures=None):
    from kvplan.measure.run import Check, MeasureResult

    check = Check(passed, 0.15, 0.3, 0.05, worst, 1, (), ())
    # the figures ride in probe_timings: the stand-in for from_json below reads them there
    return MeasureResult({}, {"runs": 1}, None, None, (), check, figures or {}, ())


def _queue(monkeypatch, *results):
    """`_measure_once` returns these in turn; the list left shows how many runs were taken."""
    import kvplan.measure.run as run

    queue = list(results)
    monkeypatch.setattr(run, "_measure_once", lambda request, progress: queue.pop(0))
    return queue


def test_confirm_measures_again_only_after_a_miss_and_the_second_run_decides(monkeypatch):
    import kvplan.measure.run as run

    left = _queue(monkeypatch, _run_result(False, 0.48), _run_result(True))
    assert not run.measure(run.MeasureRequest(check=True)).check.passed  # no --confirm
    assert len(left) == 1
    left = _queue(monkeypatch, _run_result(True), _run_result(False))
    request = run.MeasureRequest(check=True, confirm=True)
    assert run.measure(request).check.passed and len(left) == 1
    _queue(monkeypatch, _run_result(False, 0.48), _run_result(True))
    second = run.measure(request)
    assert second.check.passed and second.conditions["runs"] == 2
    (confirm,) = [n for n in second.notes if n.id == "measure-confirm"]
    assert dict(confirm.values)["worst"] == 0.48 and dict(confirm.values)["passed"] is True
    _queue(monkeypatch, _run_result(False, 0.48), _run_result(False, 0.52))
    assert not run.measure(request).check.passed  # missed twice: fails
    assert "measured twice (--confirm)" in summary_line(
        _data([0.01]) | {"conditions": {"threads": 1, "runs": 2}}
    )


def test_confirm_without_the_check_gating_never_measures_again_for_a_miss(monkeypatch):
    # `kvplan measure --confirm --baseline X` (no --check): a missed check fails nothing, so it
    # costs no second run; before, every miss measured the whole sweep again
    import kvplan.measure.baseline as bl
    import kvplan.measure.run as run

    left = _queue(monkeypatch, _run_result(False, 0.48), _run_result(True))
    assert not run.measure(run.MeasureRequest(confirm=True)).check.passed and len(left) == 1
    then = _baseline({"bandwidth": Figure(10.0, 0.0, 9, True)})
    monkeypatch.setattr(
        bl,
        "from_json",
        lambda data: _baseline(dict(data.probe_timings)),
    )
    same = {"bandwidth": Figure(10.0, 0.0, 9, True)}
    left = _queue(monkeypatch, _run_result(False, 0.48, same), _run_result(True, figures=same))
    result, comparison = run.measure_against(run.MeasureRequest(confirm=True), then, 0.05, False)
    assert len(left) == 1 and comparison.passed and result.conditions["runs"] == 1


def test_confirm_takes_one_second_run_for_a_miss_and_a_regression_together(monkeypatch):
    # --check --confirm --baseline: the first run misses the check and regresses; one more run
    # settles both (before: up to four runs, and "runs" said 3)
    import kvplan.measure.baseline as bl
    import kvplan.measure.run as run

    then = _baseline({"bandwidth": Figure(10.0, 0.0, 9, True)})
    monkeypatch.setattr(
        bl,
        "from_json",
        lambda data: _baseline(dict(data.probe_timings)),
    )
    slow = {"bandwidth": Figure(5.0, 0.0, 9, True)}
    first, second = _run_result(False, 0.48, slow), _run_result(False, 0.52, slow)
    first = first._replace(conditions={"runs": 1, "elapsed_s": 30.0})
    second = second._replace(conditions={"runs": 1, "elapsed_s": 40.0})
    left = _queue(monkeypatch, first, second, _run_result(True), _run_result(True))
    request = run.MeasureRequest(check=True, confirm=True)
    result, comparison = run.measure_against(request, then, 0.05, False)
    assert len(left) == 2 and not result.check.passed and comparison.regressions == 1
    assert result.conditions["runs"] == 2 and result.conditions["elapsed_s"] == 70.0
    whys = [dict(n.values)["why"] for n in result.notes if n.id == "measure-confirm"]
    assert whys == ["check", "baseline"]


def test_confirm_counts_a_regression_only_when_the_same_figure_regresses_twice(monkeypatch):
    import kvplan.measure.baseline as bl
    import kvplan.measure.run as run

    then = _baseline({k: Figure(10.0, 0.0, 9, True) for k in ("bandwidth", "matmul:m=4")})
    slow_bw = {"bandwidth": Figure(5.0, 0.0, 9, True), "matmul:m=4": Figure(10.0, 0.0, 9, True)}
    slow_mm = {"bandwidth": Figure(10.0, 0.0, 9, True), "matmul:m=4": Figure(5.0, 0.0, 9, True)}
    monkeypatch.setattr(
        bl,
        "from_json",
        lambda data: _baseline(dict(data.probe_timings)),
    )

    def against(*figure_sets):
        _queue(monkeypatch, *[_run_result(True, figures=f) for f in figure_sets])
        return run.measure_against(run.MeasureRequest(confirm=True), then, 0.05, False)

    result, comparison = against(slow_bw, slow_mm)  # load: a different figure each time
    assert comparison.passed and result.conditions["runs"] == 2
    (confirm,) = [n for n in result.notes if n.id == "measure-confirm"]
    assert dict(confirm.values)["regressed_first"] == ("bandwidth",)
    assert {c.key: c.verdict for c in comparison.changes}["matmul:m=4"] == "not confirmed"
    _, comparison = against(slow_bw, slow_bw)  # the same figure twice: a regression
    assert comparison.regressions == 1 and not comparison.passed
    result, comparison = against(slow_mm | {"matmul:m=4": Figure(10.0, 0.0, 9, True)})
    assert comparison.passed and result.conditions["runs"] == 1  # nothing regressed: one run
