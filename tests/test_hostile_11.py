"""Hostile inputs, eleventh round.
1. An SGLang --engine-version whose patch no release spells ('0.5.x', '0.5.-1', a five-digit
patch) ran silently as the bare '0.5' (the newest rules kvplan models for it), though the patch
picks rules (piecewise graphs from 0.5.10, the DSA decode kernel from 0.5.14); vLLM's '0.6.x'
was already refused.
2. --kv-cache-memory above the GPU's whole memory (1TiB on an 80 GB H100) sized a pool the engine
could never allocate, printed as a plain result.
3. plan --emit and simulate's launch flags named a draft model as it was typed: a bundled alias
('"model": "qwen3-4b"', --speculative-draft-model-path qwen3-4b), which neither engine can
load, beside the target named by its Hub id.
4. SGLang's random dataset is seeded 1 by default (sglang.bench_serving's --seed): `simulate
--dataset-name random --engine sglang` applied it in the CLI alone, so its Python twin
(WorkloadSpec(length_dist="sglang-random")) and `plan --length-dist sglang-random` drew other
requests (seed 0) than the run simulate prints.
5. scripts/bench_dispatch.py and bench_detokenizer.py checked --write only after the whole run,
and a bad one ended in a KvplanError traceback.
6. An output that is a file the command read (--out onto the model's config.json, --step-log onto
the --trace) replaced the input with the report.
7. A vLLM --engine-version whose patch is no patch ('0.19.x', '0.19.-1', '0.21.99999') ran as the
minor; only 0.6-0.8, read by their patches, refused it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.sglang import sglang_release, sglang_rules
from kvplan.errors import KvplanError

from helpers import one_line_error, run_cli, run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4")


# ---- 1. SGLang releases spelled with an unreadable patch ------------------------------------
@pytest.mark.parametrize(
    "version", ["0.5.x", "0.5.-1", "0.5.99999", "0.5.3.x", "0.5.", "0.4.9post", "0.5.3.post"]
)
def test_an_sglang_release_whose_patch_cannot_be_read_is_refused(version):
    with pytest.raises(KvplanError, match="SGLang version"):
        sglang_release(version)
    code, _, err = run_cli(*SIM, "--engine", "sglang", "--engine-version", version)
    one_line_error(code, err, "SGLang version")


@pytest.mark.parametrize(
    "version, patch",
    [
        ("0.5", None),
        ("0.4.6", 6),
        ("0.5.3rc0", 3),
        ("0.5.4.post2", 4),
        ("0.5.10.post1", 10),
        ("v0.5.14", 14),
        ("0.4.9.post5", 9),
    ],
)
def test_the_spellings_of_real_sglang_releases_still_run(version, patch):
    assert sglang_release(version)[0] in ("0.4", "0.5")
    assert sglang_rules(version).patch == patch


def test_plan_refuses_an_unreadable_sglang_patch_too():
    code, _, err = run_cli(
        "plan", "qwen3-8b", "--rate", "1", "--slo", "ttft_p99=2s", "--gpu", "h100", "--tp", "1",
        "--emit", "sglang", "--engine-version", "0.5.x",
    )  # fmt: skip
    one_line_error(code, err, "SGLang version")


# ---- 2. --kv-cache-memory beyond the GPU --------------------------------------------------
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_kv_memory_above_the_gpus_memory_is_refused(engine):
    code, out, err = run_cli(*SIM, "--engine", engine, "--kv-cache-memory", "1TiB")
    one_line_error(code, err, "--kv-cache-memory")
    assert out == "" and "H100" in err


def test_kvplan_engine_refuses_it_as_simulate_does():
    code, _, err = run_cli("engine", "qwen3-8b", "--gpu", "h100", "--kv-cache-memory", "81GiB")
    one_line_error(code, err, "--kv-cache-memory")


def test_kv_memory_that_fits_the_gpu_still_sizes_the_pool():
    data = run_json(*SIM, "--kv-cache-memory", "20GiB")
    # 20 GiB over Qwen3-8B's 144 KiB a token (36 layers x 8 KV heads x 128 x 2 x 2 B)
    assert data["setup"]["kv_cache_tokens"] == pytest.approx(20 * 2**30 / (36 * 8 * 128 * 4), 0.01)


# ---- 3. a draft model named by its bundled alias in a launch command --------------------
PLAN = (
    "plan", "qwen3-8b", "--rate", "5", "--slo", "ttft_p99=5s", "--gpu", "h100", "--tp", "1",
    "--num-prompts", "30", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192",
    "--kv-cache-dtype", "auto", "--jobs", "1",
)  # fmt: skip
DRAFT_VLLM = '{"method": "draft_model", "model": "qwen3-4b", "num_speculative_tokens": 3}'


def _draft_commands(data: dict) -> list[str]:
    return [c["command"] for c in data["candidates"] if c.get("speculative")]


def test_plan_launches_a_bundled_draft_by_its_hub_id():
    data = run_json(*PLAN, "--speculative-config", DRAFT_VLLM)
    commands = _draft_commands(data)
    assert commands, data["candidates"]
    for command in commands:
        assert '"model":"Qwen/Qwen3-4B"' in command and "qwen3-4b" not in command, command
    data = run_json(
        *PLAN, "--emit", "sglang", "--speculative-algorithm", "STANDALONE",
        "--speculative-draft-model-path", "qwen3-4b",
    )  # fmt: skip
    commands = _draft_commands(data)
    assert commands, data["candidates"]
    for command in commands:
        assert "--speculative-draft-model-path Qwen/Qwen3-4B" in command, command


def test_simulate_prints_the_drafts_launch_flags_by_its_hub_id():
    data = run_json(*SIM, "--speculative-config", DRAFT_VLLM)
    launch = data["setup"]["speculative"]["launch"]
    assert '"model":"Qwen/Qwen3-4B"' in launch[1], launch
    assert data["setup"]["speculative"]["draft"] == "qwen3-4b"  # the flag as given


def test_a_draft_given_as_a_hub_id_or_path_is_launched_as_given(tmp_path):
    config = Path(__file__).resolve().parents[1] / "model_configs" / "Qwen3-4B.json"
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(config.read_text())
    given = json.dumps({"method": "draft_model", "model": str(folder), "num_speculative_tokens": 2})
    data = run_json(*SIM, "--speculative-config", given)
    assert json.loads(data["setup"]["speculative"]["launch"][1])["model"] == str(folder)


# ---- 4. the bench client's default seed, in the library ---------------------------------
def test_the_python_twin_draws_sglangs_random_dataset_as_simulate_does():
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.simulate import SimulateRequest, simulate
    from kvplan.present.view import jsonable
    from kvplan.simulate.setup import ServeOptions
    from kvplan.simulate.workload import WorkloadSpec

    cli = run_json(*SIM, "--engine", "sglang", "--dataset-name", "random")
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=4, length_dist="sglang-random"),
        serve=ServeOptions(engine="sglang"),
    )
    twin = json.loads(
        json.dumps(jsonable(simulate(load_model("qwen3-8b"), load_profile("h100"), request)))
    )
    assert cli["workload"]["seed"] == twin["workload"]["seed"] == 1
    assert cli["runs"][0]["bench"] == twin["runs"][0]["bench"]


def test_plan_draws_sglangs_random_dataset_with_its_clients_seed():
    args = (*PLAN, "--length-dist", "sglang-random", "--spread", "0.5")
    default, seeded = run_json(*args), run_json(*args, "--seed", "1")
    assert default["workload"] == seeded["workload"]
    assert default["workload"] != run_json(*args, "--seed", "0")["workload"]


# ---- 5. the benchmark scripts' --write, checked before the timing --------------------------
@pytest.mark.parametrize("script", ["bench_dispatch", "bench_detokenizer"])
@pytest.mark.parametrize("target", ["folder", "folder/", "missing/x.json", "x.json/"])
def test_a_benchmark_refuses_its_write_target_before_timing_anything(
    script, target, tmp_path, monkeypatch, capsys
):
    """`--write` naming a folder, a missing folder or a folder's spelling: one line and exit 2
    before any timing (it was a KvplanError traceback after the whole run, 22 s in quick mode)."""
    from helpers import load_script

    bench = load_script(script)
    (tmp_path / "folder").mkdir()

    def timed(*args, **kwargs):
        raise AssertionError("timed before the --write target was checked")

    for name in ("run", "measure", "build_tokenizer"):
        if hasattr(bench, name):
            monkeypatch.setattr(bench, name, timed)
    argv = ["--write", f"{tmp_path}/{target}"] + (["--quick"] if script == "bench_dispatch" else [])
    monkeypatch.setattr("sys.argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--write" in err, err
    assert not (tmp_path / "x.json").exists()


# ---- 6. an output that is one of the command's inputs ------------------------------------
def _config(tmp_path) -> Path:
    source = Path(__file__).resolve().parents[1] / "model_configs" / "Qwen3-8B.json"
    path = tmp_path / "config.json"
    path.write_text(source.read_text())
    return path


@pytest.mark.parametrize(
    # one refusal of an output among the files read serves every command: report's run (a
    # page and its charts) is the slowest and runs with the slow tests
    "command",
    ["simulate", pytest.param("report", marks=pytest.mark.slow), "plan"],
)
def test_out_onto_the_model_config_read_is_refused_and_leaves_it(command, tmp_path):
    config = _config(tmp_path)
    before = config.read_bytes()
    args = {
        "simulate": ("--num-prompts", "4"),
        "report": ("--gpu", "h100"),
        "plan": ("--rate", "1", "--slo", "ttft_p99=2s", "--gpu", "h100", "--tp", "1",
                 "--num-prompts", "20", "--max-num-seqs", "64", "--kv-cache-dtype", "auto"),
    }[command]  # fmt: skip
    for target in (config, tmp_path):  # the file, and the folder naming it as the model
        code, _, err = run_cli(command, str(target), *args, "--out", str(config))
        one_line_error(code, err, "is a file this command read")
    assert config.read_bytes() == before


def test_step_log_onto_the_trace_read_is_refused_and_leaves_it(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 100, "output_tokens": 5}\n')
    before = trace.read_bytes()
    code, _, err = run_cli("simulate", "qwen3-8b", "--trace", str(trace), "--step-log", str(trace))
    one_line_error(code, err, "--step-log")
    assert trace.read_bytes() == before


def test_a_gpu_profile_read_is_not_an_output_either(tmp_path):
    bundled = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h100-sxm.yaml"
    profile = tmp_path / "gpu.yaml"
    profile.write_text(bundled.read_text())
    before = profile.read_bytes()
    code, _, err = run_cli(
        *SIM[:2], "--num-prompts", "4", "--gpu", str(profile), "--out", str(profile)
    )
    one_line_error(code, err, "is a file this command read")
    assert profile.read_bytes() == before


def test_an_input_of_an_earlier_command_in_the_process_is_writable(tmp_path):
    config = _config(tmp_path)
    code, _, err = run_cli("size", str(config))
    assert code == 0, err
    before = config.read_text()
    code, _, err = run_cli(*SIM, "--out", str(config))
    assert code == 0, err  # the earlier command's input, not this one's: written as named
    assert config.read_text() != before


def test_a_profile_baseline_stays_replaceable_by_the_run_it_baselines(tmp_path):
    """measure's --baseline is the previous result: --save-profile onto it updates it (as
    --json onto a JSON baseline always could), so reading it notes no input."""
    from kvplan import atomic
    from kvplan.measure.baseline import load_baseline

    atomic.forget_inputs()
    profile = tmp_path / "gpu.yaml"
    bundled = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h100-sxm.yaml"
    profile.write_text(bundled.read_text())
    with pytest.raises(KvplanError, match="not a measured one"):
        load_baseline(str(profile))
    atomic.check_not_input(profile, "--save-profile")  # no error: the baseline is replaceable


# ---- 7. vLLM releases whose patch cannot be read, past the V0 minors ---------------------
@pytest.mark.parametrize("version", ["0.19.x", "0.19.-1", "0.19.", "0.21.99999", "0.32.post1"])
def test_a_vllm_release_whose_patch_cannot_be_read_is_refused(version):
    code, _, err = run_cli(*SIM, "--engine-version", version)
    one_line_error(code, err, "is no vLLM release")


@pytest.mark.parametrize("version", ["0.19", "0.19.1", "0.32.0rc1", "0.8.5.post1", "0.6.6.post1"])
def test_vllm_release_spellings_still_run(version):
    from kvplan.engines.vllm import check_release_exists

    check_release_exists(version)
