"""kvplan measure on this CPU: detection, finite numbers with their conditions, saved profiles,
and --check. No test asserts a speed."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from kvplan.measure.device import detect  # noqa: E402
from kvplan.measure.run import MeasureRequest, fit_line, measure, predicted_s  # noqa: E402
from kvplan.measure.timing import summarize  # noqa: E402

from helpers import run_cli  # noqa: E402

SMALL = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 4096,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


@pytest.fixture(scope="module")
def report(small_model):
    return measure(MeasureRequest(model=small_model, quick=True, threads=2, contexts=(128, 512)))


def test_cpu_detection():
    info = detect("cpu", 2)
    assert info["kind"] == "cpu" and info["threads"] == 2
    assert info["cores"] >= 1 and info["last_level_cache_bytes"] > 0
    assert info["measure_dtype"] in ("fp32", "bf16")
    assert isinstance(info["fast_bf16"], bool)


def finite_positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_every_measurement_is_finite_positive_with_conditions(report):
    data = report.data
    cond = data["conditions"]
    assert cond["threads"] == 2 and cond["torch_version"] and cond["dtype"]
    for probe in ("copy", "triad", "read"):
        assert finite_positive(data["device_probes"]["bandwidth"][probe]["bytes_per_s_median"])
    assert finite_positive(data["calibration"]["bandwidth_bytes_per_s"])
    assert finite_positive(data["calibration"]["peak_flop_per_s"])
    rows = data["decode"] + data["prefill"]
    assert len(data["decode"]) == 2 and len(data["prefill"]) == 1
    for row in rows:
        m = row["measured"]
        assert finite_positive(m["median_s"]) and m["p20_s"] <= m["median_s"] <= m["p80_s"]
        assert finite_positive(row["predicted_calibrated_s"])
        assert row["predicted_datasheet_s"] is None  # no profile matches a CPU
        assert row["bound"] in ("memory", "compute")
    json.dumps(data, allow_nan=False)
    assert data["fits"][0]["batch_size"] == 1


def test_decode_bytes_are_the_planner_shapes(report):
    row = report.data["decode"][0]
    per_layer = 1024 * 128 * (2 * 8 + 2 * 2) + 3 * 1024 * 4096
    element = 4 if report.data["conditions"]["dtype"] == "fp32" else 2
    assert row["weight_bytes"] == per_layer * element  # quick mode builds one layer
    assert row["kv_bytes"] == 128 * 2 * 2 * 128 * element


def test_saved_profile_loads_plans_and_matches_calibration(small_model, tmp_path):
    profile = tmp_path / "measured.yaml"
    code, out, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--threads",
        "2",
        "--save-profile",
        str(profile),
        "--json",
        str(tmp_path / "m.json"),
    )
    assert code == 0, err
    data = json.loads((tmp_path / "m.json").read_text())
    from kvplan.inputs.hardware import load_profile

    p = load_profile(str(profile))
    assert p.memory_bandwidth_bytes_per_s == pytest.approx(
        data["calibration"]["bandwidth_bytes_per_s"], rel=1e-5
    )
    code, out, err = run_cli("roofline", "llama-3.1-8b", "--gpu", str(profile))
    assert code == 0, err
    code, out, err = run_cli("capacity", "llama-3.1-8b", "--gpu", str(profile))
    assert code == 0, err


def test_check_fails_with_a_profile_whose_bandwidth_is_3x_wrong(small_model, tmp_path):
    profile = tmp_path / "measured.yaml"
    code, _, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--threads",
        "2",
        "--save-profile",
        str(profile),
    )
    assert code == 0, err
    text = profile.read_text()
    line = next(x for x in text.splitlines() if x.startswith("memory_bandwidth_bytes_per_s"))
    wrong = float(line.split(":")[1]) * 3
    (tmp_path / "wrong.yaml").write_text(
        text.replace(line, f"memory_bandwidth_bytes_per_s: {wrong:.6e}")
    )
    code, out, err = run_cli(
        "measure",
        "--model",
        small_model,
        "--quick",
        "--threads",
        "2",
        "--gpu",
        str(tmp_path / "wrong.yaml"),
        "--check",
        "-f",
        "json",
    )
    assert code == 1
    data = json.loads(out)
    assert any("profile prediction off" in f for f in data["check"]["failures"])
    for row in data["decode"]:
        if row["bound"] == "memory":  # the profile's 3x bandwidth predicts a third of the time
            assert row["predicted_datasheet_s"] < 0.5 * row["predicted_calibrated_s"]


def test_helpers():
    assert fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((1, 2))
    assert fit_line([5, 5], [1, 2]) is None
    assert predicted_s(100, 10, 10, 1) == 10 and predicted_s(100, 10, None, 1) is None
    t = summarize([3, 1, 2, 5, 4])
    assert t.median_s == 3 and t.p20_s == pytest.approx(1.8) and t.p80_s == pytest.approx(4.2)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--device", "tpu"], "choose cpu or cuda"),
        (["--threads", "0"], "not in the range 1<=x<=1024"),
        (
            ["--model", "nemotron-h-56b", "--device", "cpu", "--layers", "0"],
            "not in the range 1<=x<=256",
        ),
    ],
)
def test_bad_input(argv, needle):
    code, _, err = run_cli("measure", "--quick", *argv)
    assert code == 2 and needle in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_detection_and_profile_match():
    from kvplan.measure.device import detect_cuda, match_profile

    info = detect_cuda()
    assert info["kind"] == "cuda" and info["memory_bytes"] > 0
    match_profile(info)  # may be None for an unknown part; must not raise
