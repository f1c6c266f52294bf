"""Hostile inputs to the newest paths: `measure --confirm` with `--check`, `--baseline` and
`--distributed`; baselines edited by hand; custom GPU profiles choosing the simulator's kernel
tables and vLLM's mxfp4 padding. Each case ends in a correct answer or one `error:` line with
exit 2, never a traceback, a silent wrong number or a run that measures more than it says."""

from __future__ import annotations

import json
import sys

import pytest

from helpers import one_line_error, run_cli


def _profile(tmp_path, name: str, vendor: str | None, peaks: str, extra: str = "") -> str:
    path = tmp_path / f"{abs(hash((name, vendor, peaks, extra)))}.yaml"
    vendor_line = "" if vendor is None else f'vendor: "{vendor}"\n'
    path.write_text(
        f'name: "{name}"\n{vendor_line}peak_flop_per_s: {{{peaks}}}\n'
        "memory_bytes: 141e+9\nmemory_bandwidth_bytes_per_s: 4.8e+12\n" + extra
    )
    return str(path)


# ---- custom GPU profiles: which kernel tables, which mxfp4 padding --------------------------------
@pytest.mark.parametrize(
    "name,vendor,peaks,extra,tables,evidence",
    [
        # a name alone never picks tables: an "H200" without the field runs at the datasheet's
        ("NVIDIA H200", "NVIDIA", "bf16: 989e+12, fp8: 1979e+12", "", "H100 SXM", "datasheet"),
        ("H200-lookalike", "AMD", "bf16: 1.3e+15", "", "H100 SXM", "datasheet"),
        # the field does, whatever the name or vendor
        ("Box", "", "bf16: 989e+12", "kernel_tables: {vllm: h200_sxm}\n", "H200 SXM", "own"),
        ("Old card", "nvidia", "bf16: 312e+12", "kernel_tables: {borrowed: a100_sxm}\n",
         "A100 SXM", "borrowed"),
    ],
)  # fmt: skip
def test_kernel_tables_follow_the_profiles_field_not_its_name(
    tmp_path, name, vendor, peaks, extra, tables, evidence
):
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.kernel_tables import tables_for

    got = tables_for(load_profile(_profile(tmp_path, name, vendor, peaks, extra)), "vllm")
    assert (got.achieved.source, got.evidence) == (tables, evidence)


@pytest.mark.parametrize(
    "extra",
    ["kernel_tables: {vllm: h900_sxm}\n", "kernel_tables: {trtllm: h100_sxm}\n",
     "kernel_tables: [h100_sxm]\n", "kernel_tables: {vllm: h100_sxm, borrowed: h100_sxm}\n"],
)  # fmt: skip
def test_a_profile_naming_unknown_kernel_tables_fails_in_one_line(tmp_path, extra):
    path = _profile(tmp_path, "Box", "NVIDIA", "bf16: 989e+12", extra)
    code, _, err = run_cli("simulate", "qwen3-8b", "--gpu", path)
    one_line_error(code, err, "kernel_tables")


def test_a_vendor_is_read_in_its_one_spelling(tmp_path):
    from kvplan.inputs.hardware import load_profile

    for written, read in (
        ("nvidia", "NVIDIA"),
        (" amd ", "AMD"),
        ("apple", "Apple"),
        ("Acme", "Acme"),
    ):
        assert load_profile(_profile(tmp_path, "X", written, "bf16: 1e+14")).vendor == read


def _measured_yaml(device_name: str, kind: str = "cuda", **edits: str) -> str:
    """A profile as `kvplan measure --save-profile` writes it, with lines replaced by `edits`."""
    lines = {
        "rounds": "    rounds: 7",
        "spread": '    "bandwidth": 0.05',
    }
    lines.update(edits)
    return (
        f'name: "measured {device_name}"\nvendor: measured\npeak_flop_per_s:\n  bf16: 1.6e+14\n'
        "memory_bytes: 1.9e+11\nmemory_bandwidth_bytes_per_s: 8.0e+12\nmeasured:\n"
        "  dtype: bf16\n  gather_kv: false\n  overhead_s: 1.0e-06\n  matmul_overhead_s: 7.5e-06\n"
        "  matmul_bandwidth_bytes_per_s:\n    1024: 6.0e+12\n"
        "  matmul_flop_per_s:\n    1: 1.6e+12\n    4096: 1.6e+14\n"
        "  decode_attention_flop_per_s:\n    1000: 2.0e+12\n"
        "  prefill_attention_flop_per_s:\n    100: 3.0e+13\n"
        f"  spread:\n{lines['spread']}\n"
        f'  device:\n    kind: "{kind}"\n    name: "{device_name}"\n{lines["rounds"]}\n'
    )


@pytest.mark.parametrize(
    "profile,align",
    [
        ("b200", (256, 256)),
        ("gb300", (256, 256)),
        ("h100", (128, 256)),
        ("mi355x", (256, 256)),
        # measured profiles are "vendor: measured": the device's own name decides
        ("measured:NVIDIA B200", (256, 256)),
        ("measured:AMD Instinct MI300X", (256, 256)),
        ("measured:NVIDIA H100 80GB HBM3", (128, 256)),
        ("custom:NVIDIA B200", (256, 256)),  # the GPU anywhere in the name
        ("custom:B2000", (128, 256)),
    ],
)
def test_mxfp4_padding_reads_the_device_a_profile_describes(tmp_path, profile, align):
    from kvplan.engines.vllm_memory import mxfp4_alignment
    from kvplan.inputs.hardware import load_profile

    if profile.startswith("measured:"):
        path = tmp_path / "m.yaml"
        path.write_text(_measured_yaml(profile.split(":", 1)[1]))
        profile = str(path)
    elif profile.startswith("custom:"):
        profile = _profile(tmp_path, profile.split(":", 1)[1], "NVIDIA", "bf16: 2.25e+15")
    assert mxfp4_alignment(load_profile(profile)) == align


def test_a_measured_vendor_without_its_section_is_still_a_profile(tmp_path):
    """`vendor: measured` written by hand, with no `measured:` section: the device's maker is
    unknown ("measured"), not an AttributeError (capacity --emit and engine both ask)."""
    path = _profile(tmp_path, "Meas", "measured", "bf16: 312e+12")
    for argv in (
        ("engine", "gpt-oss-20b", "--gpu", path),
        ("capacity", "qwen2.5-3b", "--gpu", path, "--emit", "vllm"),
    ):
        code, out, err = run_cli(*argv)
        assert code == 0, err
        assert "internal error" not in err


@pytest.mark.parametrize(
    "edit,needle",
    [
        ({"spread": '    "bandwidth": .nan'}, "measured.spread: bandwidth must be"),
        ({"spread": '    "bandwidth": -3'}, "measured.spread: bandwidth must be"),
        ({"spread": '    "bandwidth": "x"'}, "measured.spread: bandwidth must be a number"),
        ({"spread": '    "bandwidth": [1]'}, "measured.spread: bandwidth must be a number"),
        ({"rounds": '    rounds: "abc"'}, "measured.device: rounds must be a number"),
        ({"rounds": "    rounds: .inf"}, "measured.device: rounds must be"),
        ({"rounds": "    rounds: [1, 2]"}, "measured.device: rounds must be a number"),
        ({"rounds": "    rounds: -5"}, "measured.device: rounds must be"),
        ({"rounds": "    rounds: 2.5"}, "measured.device: rounds must be a whole number"),
    ],
)
def test_a_hand_edited_measured_profile_is_refused_at_load(tmp_path, edit, needle):
    """A NaN or negative spread made every regression "within noise" (silently passing a
    baseline); a rounds that is not a count crashed `measure --baseline` (ValueError,
    OverflowError, TypeError as internal errors)."""
    path = tmp_path / "edited.yaml"
    path.write_text(_measured_yaml("NVIDIA H200", **edit))
    code, _, err = run_cli("roofline", "qwen2.5-3b", "--gpu", str(path))
    one_line_error(code, err, needle)


# ---- measure: baselines edited by hand, checked before any measuring ------------------------------
torch_needed = pytest.mark.skipif(
    "torch" not in sys.modules and __import__("importlib").util.find_spec("torch") is None,
    reason="measure needs torch",
)


def _measure_json() -> dict:
    return {
        "identity": {"kind": "cpu", "cpu_model": "X", "cpu_threads": 2},
        "conditions": {
            "rounds": 7,
            "model": "m",
            "layers": 1,
            "dtype": "fp32",
            "attention_impl": "torch",
        },
        "profile": {
            "figures": [
                {"key": "bandwidth", "value": 1e10, "spread": 0.02, "unit": "bytes_per_s"},
                {
                    "key": "matmul_overhead",
                    "value": 5e-5,
                    "probe_value": 2.4e-4,
                    "spread": 0.02,
                    "unit": "s",
                },
            ]
        },
        "points": [
            {
                "phase": "decode",
                "batch_size": 1,
                "context_len": 1024,
                "measured_s": 0.03,
                "spread": 0.01,
            }
        ],
    }


def _edit(path: str, value):
    def apply(data: dict) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return apply


@torch_needed
@pytest.mark.parametrize(
    "path,value,needle",
    [
        ("conditions.rounds", float("inf"), "conditions.rounds"),  # was OverflowError
        ("conditions.rounds", "10**400", "conditions.rounds"),  # was OverflowError
        ("conditions.rounds", -3, "conditions.rounds"),
        ("conditions.rounds", 2.7, "conditions.rounds"),
        ("identity", [1], "identity is not a mapping"),  # was AttributeError after the run
        ("profile.figures.0.spread", float("nan"), "bandwidth: spread"),  # hid the regression
        ("profile.figures.0.spread", -5, "bandwidth: spread"),
        ("profile.figures.0.spread", float("inf"), "bandwidth: spread"),
        ("profile.figures.0.value", float("nan"), "bandwidth: value"),  # compared as "ok"
        ("profile.figures.0.value", float("inf"), "bandwidth: value"),
        ("profile.figures.0.value", "1e9", "bandwidth: value is not a number"),
        ("profile.figures.1.probe_value", -1.0, "matmul_overhead: probe_value"),
        ("points.0.measured_s", float("nan"), "decode:batch=1,tokens=1024: measured_s"),
    ],
)
def test_a_hand_edited_measure_json_baseline_is_one_line(tmp_path, path, value, needle):
    data = _measure_json()
    _edit(path, 10**400 if value == "10**400" else value)(data)
    file = tmp_path / "base.json"
    file.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    code, _, err = run_cli("measure", "--quick", "--baseline", str(file))
    one_line_error(code, err, "not a kvplan measure JSON")
    assert needle in err


@torch_needed
def test_a_baseline_that_is_a_folder_or_a_fifo_says_so(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (tmp_path, fifo):
        code, _, err = run_cli("measure", "--quick", "--baseline", str(target))
        one_line_error(code, err, "not a regular file")


# ---- measure: options that would be ignored are refused -------------------------------------------
@torch_needed
@pytest.mark.parametrize(
    "argv,needle",
    [
        # --distributed times collectives: the step sweep's options used to be silently ignored
        (["--distributed", "--check", "--confirm"], "--confirm applies to the step sweep"),
        (["--distributed", "--baseline", "x.json"], "--baseline applies to the step sweep"),
        (["--distributed", "--save-profile", "p.yaml"], "--save-profile applies"),
        (["--distributed", "--layers", "1", "--rounds", "5"], "--layers, --rounds apply"),
        (["--distributed", "--threads", "1"], "--threads applies"),
        # --confirm only retries a failure that decides the exit code
        (["--confirm"], "add --check, --baseline FILE or both"),
        # --max-regression without a baseline compared nothing
        (["--max-regression", "10%"], "--max-regression applies to --baseline"),
    ],
)
def test_measure_options_that_would_be_ignored_are_refused(tmp_path, argv, needle):
    code, _, err = run_cli("measure", "--quick", *argv)
    one_line_error(code, err, needle)


# ---- measure --confirm with --check and --baseline: at most two runs ------------------------------
@torch_needed
def test_confirm_with_a_baseline_measures_at_most_twice_and_counts_its_runs(monkeypatch):
    """A run that missed the check AND regressed was measured four times (measure() retried the
    check, measure_against() retried the baseline and measure() the check again) and reported
    "runs": 3. One second run now serves both, and the result says 2."""
    import kvplan.measure.baseline as bl
    import kvplan.measure.run as run
    from kvplan.measure.baseline import Baseline, Figure

    def result(check_passed: bool, bandwidth: float):
        check = run.Check(check_passed, 0.15, 0.3, 0.05, 0.5, 1, (), ())
        figures = {"bandwidth": {"value": bandwidth, "spread": 0.0, "runs": 9,
                                 "higher_is_better": True}}  # fmt: skip
        return run.MeasureResult({}, {"runs": 1}, None, None, (), check, figures, ())

    def baseline(figures):
        return Baseline("b.json", "measure-json", {"kind": "cpu"}, None, figures)

    monkeypatch.setattr(
        bl,
        "from_json",
        lambda data: baseline({k: Figure(**v) for k, v in data.probe_timings.items()}),
    )
    then = baseline({"bandwidth": Figure(10.0, 0.0, 9, True)})
    for first, second, passed, regressions, whys in (
        # missed and regressed, twice: both notes, one retry
        (result(False, 5.0), result(False, 5.0), False, 1, ["baseline", "check"]),
        (result(False, 10.0), result(True, 5.0), True, 0, ["check"]),  # only the retry regressed
        (result(True, 5.0), result(True, 10.0), True, 0, ["baseline"]),  # regressed once
    ):
        queue = [first, second, result(True, 10.0), result(True, 10.0)]
        monkeypatch.setattr(run, "_measure_once", lambda request, progress, q=queue: q.pop(0))
        request = run.MeasureRequest(check=True, confirm=True)
        final, comparison = run.measure_against(request, then, 0.05, False)
        assert len(queue) == 2, "more than two runs"
        assert final.conditions["runs"] == 2
        assert final.check.passed is second.check.passed  # the second run decides the check
        assert comparison.regressions == regressions and final.check.passed is passed
        notes = [n for n in final.notes if n.id == "measure-confirm"]
        assert sorted(dict(n.values)["why"] for n in notes) == whys
