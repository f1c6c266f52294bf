"""The engines' kernel-backend flags as one record (kvplan.engines.backends.Backends, issue 28):
the CLI builds it once and every request carries it to the engine's allocator; each flag is
taken under the engine (and release) whose argument parser takes it and refused under the other
as one line naming whose it is (vLLM's --moe-backend and SGLang's --moe-runner-backend are two
flags, not two spellings of one); `plan --emit` writes the emitted engine's spelling."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.engines.backends import Backends, check_backends
from kvplan.engines.releases import older_than, release_key
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import run_cli, run_json

SMALL = ("--num-prompts", "4", "--input-len", "64", "--output-len", "4")
# every flag with a value its engine takes on Qwen3-30B-A3B (a MoE model) on an H100
VLLM_FLAGS = {"--attention-backend": "FLASH_ATTN", "--moe-backend": "triton"}
SGLANG_FLAGS = {
    "--attention-backend": "flashinfer",
    "--prefill-attention-backend": "fa3",
    "--decode-attention-backend": "flashinfer",
    "--nsa-prefill-backend": "flashmla_sparse",  # read for DSA models only; the parser takes it
    "--nsa-decode-backend": "fa3",
    "--moe-runner-backend": "triton",
}
OWNER = {"--moe-backend": "vLLM's", "--moe-runner-backend": "SGLang's"}
OTHER = {"vllm": "sglang", "sglang": "vllm"}


def argv_of(flags: dict[str, str]) -> list[str]:
    return [word for pair in flags.items() for word in pair]


def one_line_refusal(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert err.count("\n") == 1, err
    return err


def records_reaching(monkeypatch, module, name: str) -> list[Backends]:
    """The Backends of every request the allocator `module.name` is called with (it still runs)."""
    seen: list[Backends] = []
    real = getattr(module, name)

    def spy(spec, gpu, request):
        seen.append(request.backends)
        return real(spec, gpu, request)

    monkeypatch.setattr(module, name, spy)
    return seen


def test_simulate_carries_the_record_to_the_engines_allocator(monkeypatch):
    import kvplan.engines.sglang as sglang

    seen = records_reaching(monkeypatch, sglang, "sglang_allocation")
    doc = run_json(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", "sglang",
        *argv_of(SGLANG_FLAGS), *SMALL,
    )  # fmt: skip
    assert seen == [
        Backends(
            attention_backend="flashinfer",
            prefill_attention_backend="fa3",
            decode_attention_backend="flashinfer",
            nsa_prefill_backend="flashmla_sparse",
            nsa_decode_backend="fa3",
            moe_runner_backend="triton",
        )
    ]
    notes = {n["id"]: n["text"] for n in doc["notes"]}
    # the notes quote the flags as given, in the engine's spelling: the attention note names
    # those whose backend the H100's SGLang tables did not time (fa3 for prefill is SGLang's
    # own pick there, timed from its rows, so not named); the NSA flags, which SGLang reads
    # for DSA models only, are named as ignored for this model, not as untimed
    assert notes["sim-attention-kernels"].startswith("--decode-attention-backend flashinfer:")
    assert notes["sim-nsa-backend-ignored"].startswith(
        "--nsa-prefill-backend flashmla_sparse --nsa-decode-backend fa3: ignored for this model"
    )
    assert notes["sim-moe-kernels"].startswith("--moe-runner-backend triton:")


def test_engine_carries_the_record(monkeypatch):
    import kvplan.engines.vllm as vllm

    seen = records_reaching(monkeypatch, vllm, "vllm_allocation")
    code, _, err = run_cli("engine", "qwen3-30b-a3b", "--gpu", "h100", *argv_of(VLLM_FLAGS))
    assert code == 0, err
    assert seen == [Backends(attention_backend="FLASH_ATTN", moe_backend="triton")]


@pytest.mark.parametrize(("emit", "flags"), [("vllm", VLLM_FLAGS), ("sglang", SGLANG_FLAGS)])
def test_plan_emits_each_flag_in_the_engines_spelling(emit, flags):
    doc = run_json(
        "plan", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
        "--tp", "1", "--kv-cache-dtype", "auto", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "2048", "--num-prompts", "20", "--input-len", "256",
        "--output-len", "32", "--speculative", "off", "--emit", emit, *argv_of(flags),
    )  # fmt: skip
    assert doc["mode_flags"] == " ".join(argv_of(flags))
    assert doc["candidates"], "the flags are taken: configurations were simulated"
    command = doc["candidates"][0]["command"]
    assert command.endswith(" " + " ".join(argv_of(flags))), command
    other = "--moe-runner-backend" if emit == "vllm" else "--moe-backend"
    assert other not in command


@pytest.mark.parametrize(
    ("engine", "flag"),
    [("vllm", flag) for flag in VLLM_FLAGS] + [("sglang", flag) for flag in SGLANG_FLAGS],
)
def test_simulate_takes_each_flag_under_its_engine(engine, flag):
    flags = VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS
    code, _, err = run_cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine, flag, flags[flag],
        *SMALL,
    )  # fmt: skip
    assert code == 0, err


ENGINE_ONLY = [
    ("vllm", flag, value)
    for flag, value in SGLANG_FLAGS.items()
    if flag != "--attention-backend"  # both engines take it
] + [("sglang", "--moe-backend", "triton")]


@pytest.mark.parametrize(("engine", "flag", "value"), ENGINE_ONLY)
def test_the_other_engines_flag_is_one_line_naming_whose_it_is(engine, flag, value):
    owner = OWNER.get(flag, "SGLang's")
    for command in (
        ("simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine, *SMALL),
        ("plan", "qwen3-30b-a3b", "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=5s",
         "--emit", engine),
    ):  # fmt: skip
        err = one_line_refusal(*run_cli(*command, flag, value))
        assert err.startswith(f"error: {flag} is {owner}; "), err
    # kvplan engine answers in its own words for every engine-specific flag
    err = one_line_refusal(
        *run_cli("engine", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine, flag, value)
    )
    assert f"{flag} is a {OTHER[engine]} flag; it does not apply to {engine}" in err


def test_the_moe_flags_name_the_other_spelling():
    err = one_line_refusal(
        *run_cli("simulate", "qwen3-30b-a3b", "--gpu", "h100", "--moe-runner-backend", "triton")
    )
    assert "--moe-runner-backend is SGLang's; vLLM spells it --moe-backend" in err
    err = one_line_refusal(
        *run_cli(
            "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", "sglang",
            "--moe-backend", "triton",
        )
    )  # fmt: skip
    assert "--moe-backend is vLLM's; SGLang spells it --moe-runner-backend" in err


@pytest.mark.parametrize(
    ("engine", "version", "flag", "value", "words"),
    [
        # vLLM 0.12 read VLLM_ATTENTION_BACKEND; --attention-backend came with 0.13 (vllm#26315)
        ("vllm", "0.12", "--attention-backend", "FLASH_ATTN", "it came with 0.13"),
        ("vllm", "0.11.0", "--attention-backend", "FLASH_ATTN", "VLLM_ATTENTION_BACKEND"),
        # `auto` came with 0.18 (vllm#35738); 0.17 looks AUTO up in AttentionBackendEnum
        ("vllm", "0.17.1", "--attention-backend", "auto", "it came with 0.18"),
        ("vllm", "0.16", "--attention-backend", "FLASHINFER_MLA_SPARSE", "it came with 0.17"),
        ("vllm", "0.16", "--moe-backend", "triton", "it came with 0.17"),
        ("sglang", "0.4.9", "--prefill-attention-backend", "fa3", "it came with 0.4.9.post5"),
        ("sglang", "0.4.9.post4", "--decode-attention-backend", "fa3", "0.4.9.post5"),
        ("sglang", "0.5.3.post3", "--nsa-prefill-backend", "tilelang", "it came with 0.5.4"),
        ("sglang", "0.5.4rc0", "--nsa-decode-backend", "tilelang", "it came with 0.5.4"),
        ("sglang", "0.4", "--moe-runner-backend", "triton", "it came with 0.5"),
    ],
)
def test_a_flag_newer_than_the_release_is_refused(engine, version, flag, value, words):
    err = one_line_refusal(
        *run_cli(
            "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine,
            "--engine-version", version, flag, value, *SMALL,
        )
    )  # fmt: skip
    assert words in err and version in err, err


@pytest.mark.parametrize(
    ("engine", "version", "flag", "value"),
    [
        ("vllm", "0.13.0", "--attention-backend", "FLASH_ATTN"),
        ("vllm", "0.18", "--attention-backend", "auto"),
        ("sglang", "0.4.9.post5", "--prefill-attention-backend", "fa3"),
        ("sglang", "0.4", "--decode-attention-backend", "fa3"),  # the 0.4 line: 0.4.10 has it
        ("sglang", "0.5.4.post2", "--nsa-decode-backend", "fa3"),
        ("sglang", "0.5.1", "--moe-runner-backend", "triton"),
    ],
)
def test_the_first_release_that_takes_a_flag_runs(engine, version, flag, value):
    code, _, err = run_cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine", engine,
        "--engine-version", version, flag, value, *SMALL,
    )  # fmt: skip
    assert code == 0, err


def test_releases_order_as_they_came():
    keys = [
        release_key(v)
        for v in ("0.4.9", "0.4.9.post5", "0.4.10", "0.5.3rc0", "0.5.3", "0.5.3.post3", "0.5")
    ]
    assert keys == sorted(keys)
    assert release_key("v0.13.0") == (0, 13, 0, 0) and release_key("main") is None
    assert older_than("0.12.1", "0.13") and not older_than("0.13.0rc1", "0.13")
    assert older_than("0.5.4rc0", "0.5.4") and not older_than("0.4", "0.4.9.post5")
    assert not older_than("garbage", "0.13")  # the version's own check refuses it


def test_the_python_twins_refuse_as_the_cli_does():
    spec, h100 = load_model("qwen3-30b-a3b"), load_profile("h100")
    request = EngineRequest(engine="vllm", backends=Backends(moe_runner_backend="triton"))
    with pytest.raises(KvplanError, match="is SGLang's; vLLM spells it --moe-backend"):
        engine_allocation(spec, h100, request)
    with pytest.raises(KvplanError, match="--nsa-decode-backend: SGLang 0.4.6 has no such flag"):
        engine_allocation(
            spec,
            h100,
            EngineRequest(
                engine="sglang",
                sglang_version="0.4.6",
                backends=Backends(nsa_decode_backend="fa3"),
            ),
        )
    with pytest.raises(KvplanError, match="llama.cpp takes none"):
        check_backends(Backends(attention_backend="fa3"), "llama.cpp", "")
    check_backends(Backends(), "vllm", "0.6")  # nothing given: nothing to refuse
