"""plan --engine-version: every configuration simulated with that release's defaults and
admission rules (the notes simulate gives), launched without the flags kvplan does not plan
for it; bad versions are one-line errors, and no option leaves plan's answer as it was."""

from __future__ import annotations

import json

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.plan import PlanRequest, parse_slo, plan
from kvplan.simulate.workload import WorkloadSpec

from helpers import run_cli

BASE = (
    *("plan", "qwen3-8b", "--gpu", "h100", "--rate", "2", "--input-len", "512"),
    *("--output-len", "64", "--slo", "ttft_p99=2s", "--tp", "1", "--max-num-seqs", "64"),
    *("--kv-cache-dtype", "auto", "--num-prompts", "40", "--jobs", "1"),
)


V07 = ("--engine-version", "0.7")


def _plan(*extra: str) -> dict:
    code, out, err = run_cli(*BASE, *extra, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _ids(data: dict) -> list[str]:
    return [n["id"] for n in data["notes"]]


def test_v0_release_runs_v0_rules_in_every_configuration():
    """At --max-model-len 8,192 vLLM 0.6's V0 defaults turn chunked prefill off
    (max_model_len not above 32,768), so a 2,048-token budget is below max_model_len and V0
    refuses it: the configuration is ruled out, where 0.19 (V1, always chunked) runs it."""
    args = ("--max-num-batched-tokens", "2048,8192", "--max-model-len", "8192")
    v1, v0 = _plan(*args), _plan(*args, "--engine-version", "0.6")
    assert v1["searched"] == v0["searched"] == 2
    assert v1["feasible"] == 2 and v0["feasible"] == 1
    assert [c["max_num_batched_tokens"] for c in v0["candidates"]] == [8192]
    assert v0["rejections"] == [
        {"reason": "chunked prefill off and a token budget below max_model_len", "count": 1}
    ]
    defaults = [n for n in v0["notes"] if n["id"] == "sim-vllm-v0-defaults"]
    assert len(defaults) == 1 and "0.6.6" in defaults[0]["text"]
    assert "sim-vllm-v0" in _ids(v0)
    assert "sim-vllm-v0-defaults" not in _ids(v1) and "sim-vllm-v0" not in _ids(v1)
    # V0's prefill-first steps: the 8,192-token configuration's decode gaps span prefills
    assert (
        v0["candidates"][0]["operating_point"]["p99_tpot_ms"]
        > (v1["candidates"][0]["operating_point"]["p99_tpot_ms"])
    )


def test_the_release_notes_come_from_the_replicas_the_search_built(monkeypatch):
    """The release notes are read off the replicas the search built: nothing is built after
    it (each listed configuration's replica was built a second time only for its notes). A
    configuration the search never built, for want of a price, is built for them."""
    from kvplan.plans import plan as p

    run_all, build = p._run_all, p.build_replica

    def search_then_no_build(*args, **kwargs):
        answer = run_all(*args, **kwargs)
        monkeypatch.setattr(p, "build_replica", _no_build)
        return answer

    monkeypatch.setattr(p, "_run_all", search_then_no_build)
    data = _plan("--max-num-batched-tokens", "2048,8192", *V07)
    assert data["feasible"] == 2
    assert "sim-vllm-v0" in _ids(data) and "sim-vllm-v0-defaults" in _ids(data)

    monkeypatch.setattr(p, "_run_all", run_all)  # no price, never built: built for its notes
    monkeypatch.setattr(p, "build_replica", build)
    argv = [("h100-pcie" if a == "h100" else a) for a in (*BASE, "--format", "json")]
    code, out, err = run_cli(*argv, "--max-num-batched-tokens", "2048,8192", *V07)
    assert code == 0, err
    priceless = json.loads(out)
    assert priceless["feasible"] == 0 and priceless["rejections"][0]["reason"].startswith(
        "no price for H100 PCIe"
    )
    assert "sim-vllm-v0" in _ids(priceless) and "sim-vllm-v0-defaults" in _ids(priceless)


def _no_build(*args, **kwargs):
    raise AssertionError("a replica built after the search")


def test_v0_without_budgets_searches_the_release_default():
    """No --max-num-batched-tokens: a V0 release searches its own default budget for the
    max_model_len (chunked prefill off at 32,768: the budget is max_model_len), where 2048 and
    8192 would both be ruled out; an explicit grid is still searched as given."""
    mimo = ("--max-model-len", "32768", "--engine-version", "0.6")
    found = _plan(*mimo)  # BASE's model and options, with MiMo-7B swapped in below
    code, out, err = run_cli(
        *(a if a != "qwen3-8b" else "mimo-7b" for a in BASE), *mimo, "--format", "json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["searched"] == 1 and data["feasible"] == 1 and data["rejections"] == []
    assert [c["max_num_batched_tokens"] for c in data["candidates"]] == [32768]
    assert [c["max_num_batched_tokens"] for c in found["candidates"]] == [32768]
    given = run_cli(
        *(a if a != "qwen3-8b" else "mimo-7b" for a in BASE),
        *mimo,
        *("--max-num-batched-tokens", "2048,8192", "--format", "json"),
    )
    assert given[0] == 0, given[2]
    grid = json.loads(given[1])
    assert grid["searched"] == 2 and grid["feasible"] == 0
    # above 32,768 tokens V0 chunks: its default budget (2,048 from 0.6.5) is searched
    above = _plan("--max-model-len", "40960", "--engine-version", "0.6")
    assert [c["max_num_batched_tokens"] for c in above["candidates"]] == [2048]
    # V1 without budgets: the default grid
    assert _plan("--max-model-len", "32768")["searched"] == 2


def test_the_python_twin_takes_the_release():
    spec, gpu = load_model("qwen3-8b"), load_profile("h100")
    request = PlanRequest(
        rate=2,
        slos=(parse_slo("ttft_p99=2s"),),
        workload=WorkloadSpec(num_prompts=40, input_len=512, output_len=64),
        tps=(1,),
        kv_cache_dtypes=("auto",),
        max_num_seqs=(64,),
        max_num_batched_tokens=(2048, 8192),
        max_model_len=8192,
        jobs=1,
    )
    assert plan(spec, [gpu], request).feasible == 2
    v0 = plan(spec, [gpu], request._replace(engine_version="0.7"))
    assert v0.feasible == 1 and "sim-vllm-v0-defaults" in [n.id for n in v0.notes]


def test_no_option_and_the_default_release_give_the_same_answer():
    """--engine-version 0.19 is the release plan runs without the option: the same JSON, with
    the release and its image named."""
    named = _plan("--engine-version", "0.19")
    assert named.pop("engine_version") == "0.19"
    assert named.pop("image") == "vllm/vllm-openai:v0.19.0"
    assert _plan() == named


def test_unknown_releases_run_with_the_nearest_rules_and_say_so():
    newer = _plan("--engine-version", "0.40")
    note = next(n for n in newer["notes"] if n["id"] == "sim-vllm-version-newer")
    assert "0.40" in note["text"] and "0.32" in note["text"]
    sglang = _plan("--emit", "sglang", "--engine-version", "0.6")
    note = next(n for n in sglang["notes"] if n["id"] == "sim-sglang-version-nearest")
    assert "0.6" in note["text"] and "0.5" in note["text"]
    assert "sim-sglang-version-nearest" not in _ids(_plan("--emit", "sglang"))


def test_bad_versions_are_one_line_errors():
    for extra in (
        ("--engine-version", "garbage"),
        ("--engine-version", "0.5"),  # before vLLM 0.6
        ("--engine-version", ""),
        ("--emit", "sglang", "--engine-version", "1.0"),
        ("--engine-version", "0.6", "--data-parallel-size", "2"),
    ):
        code, out, err = run_cli(*BASE, *extra)
        assert code == 2 and out == "", extra
        assert err.startswith("error:") and err.count("\n") == 1, err


def test_backend_flags_are_checked_against_the_release_named():
    """A kernel-backend flag the named release does not take is refused as simulate refuses it
    (kvplan.engines.backends), where the default release takes it."""
    for extra, needle in (
        (("--attention-backend", "FLASH_ATTN"), "vLLM 0.6 has no such flag (it came with 0.13)"),
        (("--attention-backend", "auto"), "vLLM 0.13 has no such backend"),
        (("--emit", "sglang", "--moe-runner-backend", "triton"), "SGLang 0.4 has no such flag"),
    ):
        version = {"FLASH_ATTN": "0.6", "auto": "0.13", "triton": "0.4"}[extra[-1]]
        code, _, err = run_cli(*BASE, *extra, "--engine-version", version)
        assert code == 2 and needle in err and err.count("\n") == 1, err
    code, _, err = run_cli(*BASE, "--attention-backend", "auto", "--top", "1")
    assert code == 0, err


def test_v0_launch_prints_no_flag_kvplan_does_not_plan_for_v0():
    """MiMo-7B has an MTP layer: plan searches an MTP layout (--speculative-config) for 0.19,
    none for V0 (whose default at its 32,768 tokens is chunked prefill off: a budget of
    max_model_len); DP/EP are refused for V0 before searching."""
    base = (BASE[0], "mimo-7b", *BASE[2:], "--max-num-batched-tokens", "32768")
    code, out, _ = run_cli(*base, "--format", "json")
    assert code == 0 and "--speculative-config" in out
    code, out, err = run_cli(*base, "--engine-version", "0.6", "--format", "json")
    assert code == 0, err
    commands = [c["command"] for c in json.loads(out)["candidates"]]
    assert commands and not any("--speculative-config" in c for c in commands)
    assert all(c.startswith("vllm serve XiaomiMiMo/MiMo-7B") for c in commands), commands
    code, _, err = run_cli(*BASE, "--engine-version", "0.7.3", "--data-parallel-size", "2")
    assert code == 2 and "--data-parallel-size" in err


def test_simulate_names_the_flag_given():
    code, _, err = run_cli("simulate", "qwen3-8b", "--engine-version", "bogus")
    assert code == 2 and err.startswith("error: --engine-version 'bogus'")


def test_the_image_is_the_release_named():
    """vLLM's image tag of the release: a patch as given, a minor alone the patch whose rules
    ran (V0's last, 0.7.3; 0.8.5), else its first; none without the option (the JSON as
    before), none for SGLang (its tags name a CUDA build as well)."""
    args = ("--max-model-len", "8192", "--max-num-batched-tokens", "8192")
    for version, image in (
        ("0.7", "v0.7.3"),
        ("0.6.3", "v0.6.3"),
        ("0.8", "v0.8.5"),
        ("0.21", "v0.21.0"),
    ):
        data = _plan(*args, "--engine-version", version)
        assert data["image"] == f"vllm/vllm-openai:{image}" and data["engine_version"] == version
    default = _plan(*args)
    assert "image" not in default and "engine_version" not in default
    sglang = _plan(*args, "--emit", "sglang", "--engine-version", "0.4")
    assert "image" not in sglang and sglang["engine_version"] == "0.4"
    code, out, _ = run_cli(*BASE, *args, "--engine-version", "0.7")
    assert code == 0 and "vllm/vllm-openai:v0.7.3" in out
