"""SGLang releases without a model of their own for a checkpoint's architecture (issue 34): the
cookbook's Kimi-K2.5 H200 page says "SGLang Version: 0.5.6.post2", a release with no
KimiK25ForConditionalGeneration (models/kimi_k25.py arrives in 0.5.9), so kvplan refuses that
release for the checkpoint, and the collector records those runs on the first release with the
model (the nearest release whose code has the model the unnamed build ran)."""

from __future__ import annotations

import json
import sys

import pytest

from kvplan.engines.releases import older_than
from kvplan.engines.sglang import check_sglang_own_model, sglang_own_model_from
from kvplan.errors import KvplanError
from kvplan.inputs.sources import load_model

from helpers import REPO, one_line_error, run_cli

sys.path.insert(0, str(REPO / "scripts"))

import collect_external_runs as collect  # noqa: E402

KIMI_K25 = "moonshotai/Kimi-K2.5"
SIM = ("simulate", KIMI_K25, "--gpu", "h200-sxm", "--engine", "sglang", "--tp", "8")
SMALL = ("--num-prompts", "4", "--input-len", "256", "--output-len", "16", "--max-concurrency", "2")


@pytest.mark.parametrize(
    ("version", "served"),
    [
        ("0.4.9.post2", False),  # 0.4's patch numbers are not 0.5's
        ("0.5.6.post2", False),  # the cookbook page's label
        ("0.5.8", False),
        ("0.5.8.post1", False),  # the last release before 0.5.9 (2026-02-05)
        ("0.5.9", True),  # adds models/kimi_k25.py
        ("0.5.10.post1", True),
        ("0.5", True),  # a bare release runs the newest rules
        ("0.6", True),  # a later release than kvplan knows runs 0.5's newest
    ],
)
def test_kimi_k25_needs_the_release_with_its_model(version, served):
    spec = load_model(KIMI_K25, checkpoint=False)
    assert spec.config_model_type == "kimi_k25"  # the gate reads the config's field
    first = sglang_own_model_from(spec)
    assert first is not None and first.release == "0.5.9"
    if served:
        check_sglang_own_model(spec, version)
    else:
        with pytest.raises(KvplanError, match="KimiK25ForConditionalGeneration"):
            check_sglang_own_model(spec, version)


def test_kimi_k2_layers_served_by_every_release_are_not_gated():
    """Kimi-K2-Instruct's layers are Kimi-K2.5's (DeepseekV3ForCausalLM), but its checkpoint is
    the text model SGLang has served since 0.4: no release is refused for it."""
    kimi_k2 = load_model("moonshotai/Kimi-K2-Instruct", checkpoint=False)
    assert sglang_own_model_from(kimi_k2) is None
    check_sglang_own_model(kimi_k2, "0.5.6.post2")
    check_sglang_own_model(kimi_k2, "0.4.9")


def test_simulate_refuses_a_release_without_the_model_in_one_line():
    code, _, err = run_cli(*SIM, *SMALL, "--engine-version", "0.5.6.post2")
    one_line_error(code, err, "KimiK25ForConditionalGeneration")
    assert "give SGLang 0.5.9 or later" in err
    code, out, err = run_cli(*SIM, *SMALL, "--engine-version", "0.5.9", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["runs"][0]["bench"]["output_throughput"] > 0


def _kimi_block(version: str) -> dict:
    return {
        "line": 582,
        "hardware": "- Hardware: NVIDIA H200 GPU (8x)",
        "heading": "**Scenario 1: Chat (1K/1K) - Most Important**",
        "version": f"- SGLang Version: {version}",
        "serve": f"sglang serve --model-path {KIMI_K25} --tp 8 --trust-remote-code",
        "bench": f"python3 -m sglang.bench_serving --backend sglang --model {KIMI_K25} "
        "--dataset-name random --random-input-len 1000 --random-output-len 1000 "
        "--num-prompts 10 --max-concurrency 1 --request-rate inf",
        "added": None,
        "measured": {
            "completed": 10,
            "duration_s": 39.77,
            "total_input_tokens": 6101,
            "total_output_tokens": 4220,
            "output_throughput": 106.1,
            "printed_concurrency": 1,
        },
        "path": "docs/autoregressive/Moonshotai/Kimi-K2.5.md",
    }


def test_the_collector_moves_a_release_without_the_model_to_the_first_with_it():
    labelled, why = collect.case_of(_kimi_block("0.5.6.post2"))
    assert labelled is not None, why
    assert labelled["engine_version"] == "0.5.9"
    assert "states SGLang 0.5.6.post2" in labelled["notes"] and "0.5.9" in labelled["notes"]
    later, why = collect.case_of(_kimi_block("0.5.9"))
    assert later is not None, why
    assert later["engine_version"] == "0.5.9" and "states SGLang" not in later["notes"]


def test_every_cookbook_run_names_a_release_that_has_its_model():
    """The rule on the file: no SGLang run keeps a release older than the first with a model of
    its own for its checkpoint; the runs it left unpinned say why."""
    cases = json.loads(
        (REPO / "tests/data/sim_bench_cases_external.json").read_text(encoding="utf-8")
    )["cases"]
    cookbook = [c for c in cases if c["source"] == collect.SOURCE]
    own = {model: collect.own_model_release(model) for model in {c["model"] for c in cookbook}}
    unpinned = []
    for case in cookbook:
        version, first = case["engine_version"], own[case["model"]]
        if "the block ran a build the page does not name" in case["notes"]:
            unpinned.append(case["id"])
            assert first is not None and version == first, case["id"]
        elif version is not None and first is not None:
            assert not older_than(version, first), case["id"]
    # the Kimi-K2.5 H200 page's eight blocks, labelled 0.5.6.post2 (its MI350X blocks state
    # 0.5.9), and the GLM-4.7-Flash B200 page's nine, labelled 0.5.7 (Glm4MoeLiteForCausalLM
    # arrives in 0.5.8)
    assert len(unpinned) == 17
    assert sum("kimi-k2.5-h200" in i for i in unpinned) == 8
    assert sum("glm-4.7-flash-b200" in i for i in unpinned) == 9


# Every bundled checkpoint whose SGLang model arrives after 0.4.10 (scripts/sglang_model_releases.py
# over the released wheels): the release before its first is refused, its first serves it.
OWN_MODEL_CASES = [
    ("qwen3.5-35b-a3b", "0.5.8.post1", "0.5.9", "Qwen3_5MoeForConditionalGeneration"),
    ("deepseek-v3.2", "0.5.2", "0.5.3", "DeepseekV32ForCausalLM"),
    ("gemma-4-26b-a4b", "0.5.10", "0.5.11", "Gemma4ForConditionalGeneration"),
    ("gpt-oss-20b", "0.4.10", "0.5.1", "GptOssForCausalLM"),
]


@pytest.mark.parametrize(("model", "before", "first", "arch"), OWN_MODEL_CASES)
def test_a_release_before_the_models_own_is_refused(model, before, first, arch):
    spec = load_model(model, checkpoint=False)
    gate = sglang_own_model_from(spec)
    assert gate is not None and (gate.release, gate.architecture) == (first, arch)
    with pytest.raises(KvplanError, match=arch):
        check_sglang_own_model(spec, before)
    check_sglang_own_model(spec, first)
    check_sglang_own_model(spec, "0.5")  # a bare 0.5 runs the newest rules


def test_kvplan_engine_refuses_qwen35_on_a_release_without_it():
    base = ("engine", "qwen3.5-35b-a3b", "--engine", "sglang", "--gpu", "h200", "--tp", "2")
    code, _, err = run_cli(*base, "--sglang-version", "0.5.8")
    one_line_error(code, err, "Qwen3_5MoeForConditionalGeneration")
    code, _, err = run_cli(*base, "--sglang-version", "0.5.9")
    assert code == 0, err


def _wheel(root, release: str, files: dict[str, str]) -> None:
    models = root / release / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for name, text in files.items():
        (models / name).write_text(text)


def test_the_derivation_reads_each_releases_entry_classes(tmp_path):
    import sglang_model_releases as derive

    llama = "class LlamaForCausalLM:\n    pass\n\nEntryClass = [LlamaForCausalLM]\n"
    _wheel(tmp_path, "0.4.10", {"llama.py": llama})
    _wheel(tmp_path, "0.5.2", {"llama.py": llama})
    # defined but not registered (no EntryClass): not yet SGLang's own
    _wheel(tmp_path, "0.5.9", {"llama.py": llama, "q.py": "class Qwen3_5MoeForCausalLM(X):\n"})
    # registered over several lines, beside an alias that registers its class's own name
    _wheel(
        tmp_path,
        "0.5.10",
        {
            "llama.py": llama,
            "q.py": "class Qwen3_5MoeForCausalLM(X):\n    pass\n\nAlias = Qwen3_5MoeForCausalLM\n"
            "EntryClass = [\n    Qwen3_5MoeForCausalLM,\n    Alias,\n]\n",
        },
    )
    table = derive.first_releases(tmp_path)
    assert table["releases"] == ["0.4.10", "0.5.2", "0.5.9", "0.5.10"]  # numeric, not text
    arch = table["architectures"]
    assert arch["Qwen3_5MoeForCausalLM"] == {"first": "0.5.10", "path": "models/q.py"}
    assert arch["LlamaForCausalLM"]["first"] == "0.4.10"
    assert "Alias" not in arch


def _config(tmp_path, model_type: str, architecture: str) -> str:
    config = json.loads((REPO / "model_configs" / "Qwen3.5-35B-A3B.json").read_text())
    config["model_type"], config["architectures"] = model_type, [architecture]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_an_unseen_checkpoint_is_gated_by_its_architecture(tmp_path):
    """The gate keys on the config's architectures[0], as SGLang's ModelRegistry does, so a
    checkpoint kvplan has never seen (a fine-tune with its own model_type) is gated too."""
    spec = load_model(_config(tmp_path, "my_finetune", "Qwen3_5MoeForConditionalGeneration"))
    assert spec.config_architecture == "Qwen3_5MoeForConditionalGeneration"
    with pytest.raises(KvplanError, match="arrives in 0.5.9"):
        check_sglang_own_model(spec, "0.5.8")
    check_sglang_own_model(spec, "0.5.9")


def test_an_architecture_no_release_registers_says_transformers_backend(tmp_path):
    from kvplan.engines.sglang import sglang_transformers_backend

    spec = load_model(_config(tmp_path, "qwen3_5_moe", "NoSuchModelForCausalLM"))
    assert sglang_transformers_backend(spec) and sglang_own_model_from(spec) is None
    code, out, err = run_cli(
        "engine", _config(tmp_path, "qwen3_5_moe", "NoSuchModelForCausalLM"),
        "--engine", "sglang", "--gpu", "h200", "--tp", "2", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    ids = {n["id"] for n in json.loads(out)["notes"]}
    assert "sglang-transformers-backend" in ids
    assert not sglang_transformers_backend(load_model("qwen3-8b"))


@pytest.mark.parametrize(
    "architecture", [" LlamaForCausalLM", "Llama For", "Qwen3_5MoeForCausalLM\n"]
)
def test_an_architecture_that_is_no_class_name_is_not_registered(tmp_path, architecture):
    """SGLang's ModelRegistry matches architectures[0] as written (_normalize_archs keeps the
    names in its registry, then appends TransformersForCausalLM): a name with a space in it
    matches no model of SGLang's, so the checkpoint goes to the Transformers backend (or is
    refused by resolve_transformers_arch), said by the note, never gated as the name it
    resembles nor passed silently."""
    from kvplan.engines.sglang import sglang_transformers_backend

    path = _config(tmp_path, "qwen3_5_moe", architecture)
    spec = load_model(path)
    assert spec.config_architecture == architecture
    assert sglang_transformers_backend(spec) and sglang_own_model_from(spec) is None
    code, out, err = run_cli(
        "engine", path, "--engine", "sglang", "--gpu", "h200", "--tp", "2", "-f", "json"
    )
    assert code == 0, err
    note = next(n for n in json.loads(out)["notes"] if n["id"] == "sglang-transformers-backend")
    assert repr(architecture) in note["text"]
