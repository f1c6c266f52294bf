"""vLLM V0's own defaults and preemption flags in kvplan simulate (--engine-version 0.6, 0.7),
each case worked from the releases' source (kvplan/engines/vllm_v0.py cites it):
max_num_seqs 256; chunked prefill on by default only above a 32,768-token max_model_len on a GPU
(and not for sliding-window or multimodal models, nor on ROCm from 0.6.5); its budget 512 tokens
to 0.6.4 and 2,048 from 0.6.5, max(max_model_len, 2,048) without it; prefix caching off; the
block manager's 1% watermark at admission; --preemption-mode and --swap-space checked."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_by_hand, run_cli, run_json

SMALL = ("--num-prompts", "4", "--input-len", "128", "--output-len", "4")


def _setup(*args: str, model: str = "llama-3.1-8b", gpu: str = "h100") -> dict:
    return run_json("simulate", model, "--gpu", gpu, *SMALL, *args)["setup"]


def _limits(setup: dict) -> tuple:
    return (
        setup["enable_chunked_prefill"],
        setup["max_num_batched_tokens"],
        setup["max_num_seqs"],
        setup["enable_prefix_caching"],
    )


@pytest.mark.parametrize(
    ("version", "max_model_len", "expected"),
    [
        # 65,536 > 32,768 on a GPU: chunked prefill on, its budget by release
        ("0.6", "65536", (True, 2048, 256, False)),  # 0.6 = 0.6.6.post1: 2,048
        ("0.6.4", "65536", (True, 512, 256, False)),  # SchedulerConfig's 512 until 0.6.4
        ("0.6.5", "65536", (True, 2048, 256, False)),
        ("0.7", "65536", (True, 2048, 256, False)),
        # 32,768 is not above 32,768: off, the budget max(max_model_len, 2048)
        ("0.7", "32768", (False, 32768, 256, False)),
        ("0.6", "1024", (False, 2048, 256, False)),
        # V1 (0.8 on): always chunked, vllm serve's H100 defaults, prefix caching on
        ("0.8", "65536", (True, 8192, 1024, True)),
    ],
)
def test_each_release_resolves_its_own_defaults(version, max_model_len, expected):
    setup = _setup("--engine-version", version, "--max-model-len", max_model_len)
    assert _limits(setup) == expected


@pytest.mark.parametrize(
    ("gpu", "version", "expected"),
    [
        # EngineArgs._set_default_args_v1 of 0.8.0-0.8.3: 8,192 tokens only on a GPU named
        # H100/H200, 1,024 seats everywhere; 0.8.4: 256 seats off those; 0.8.5 (and "0.8"):
        # the larger pair from 70 GiB, an 80 GB A100 included; 0.9 on: A100 excepted
        ("a100", "0.8.0", (2048, 1024)),
        ("a100", "0.8.4", (2048, 256)),
        ("a100", "0.8", (8192, 1024)),
        ("a100", "0.9", (2048, 256)),
        ("b200", "0.8.3", (2048, 1024)),
        ("b200", "0.19", (8192, 1024)),
        ("b200", "0.32", (16384, 1024)),  # get_batch_defaults' tier from 160 GiB
    ],
)
def test_v1_releases_resolve_their_own_serve_defaults(gpu, version, expected):
    setup = _setup("--engine-version", version, "--max-model-len", "8192", gpu=gpu)
    assert (setup["max_num_batched_tokens"], setup["max_num_seqs"]) == expected


def test_a_08_run_that_vllm_sends_to_v0_runs_v0s_rules():
    # 0.8's _is_v1_supported_oracle falls back to V0 for fp8 KV (0.8.5: unless FlashAttention 3
    # runs it, on Hopper); kvplan then runs V0's rules: 0.8's _set_default_args_v0 and V0's pool
    def run(version, gpu, *extra):
        return run_json(
            "simulate", "llama-3.1-8b", "--gpu", gpu, *SMALL, "--engine-version", version, *extra
        )

    fallback = run("0.8.0", "h100", "--kv-cache-dtype", "fp8")
    words = next(n["text"] for n in fallback["notes"] if n["id"] == "sim-vllm-08-v0")
    assert "--kv-cache-dtype fp8" in words and "V0's rules" in words
    assert fallback["setup"]["max_num_seqs"] == 256  # V0's, not V1's 1,024
    assert any(n["id"] == "sim-vllm-v0-pool" for n in fallback["notes"])
    # 0.8.5 keeps fp8 KV on V1 on an H100 (FA3), not on an A100 (FA2)
    hopper = run("0.8", "h100", "--kv-cache-dtype", "fp8")
    assert all(n["id"] != "sim-vllm-08-v0" for n in hopper["notes"])
    assert hopper["setup"]["max_num_seqs"] == 1024
    ampere = run("0.8", "a100-80gb-sxm", "--kv-cache-dtype", "fp8")
    assert any(n["id"] == "sim-vllm-08-v0" for n in ampere["notes"])
    # --preemption-mode sends 0.8 to V0 too: there it runs (it was refused before)
    swap = run("0.8", "h100", "--preemption-mode", "swap")
    assert swap["setup"]["max_num_seqs"] == 256
    plain = run("0.8", "h100")
    assert all(n["id"] != "sim-vllm-08-v0" for n in plain["notes"])


def test_flags_given_win_over_v0_defaults():
    setup = _setup(
        "--engine-version", "0.7", "--max-model-len", "65536", "--no-enable-chunked-prefill",
        "--enable-prefix-caching", "--max-num-seqs", "64",
    )  # fmt: skip
    assert _limits(setup) == (False, 65536, 64, True)


def test_the_long_context_rule_has_v0s_exceptions():
    # Mistral-7B-v0.1's 4,096-token window in every layer: get_sliding_window() is not None
    long = ("--engine-version", "0.7", "--max-model-len", "65536", "--allow-long-max-model-len")
    # ROCm: off from 0.6.5 (`not current_platform.is_rocm()`), on before
    assert (
        _setup("--engine-version", "0.7", "--max-model-len", "65536", gpu="mi300x")[
            "enable_chunked_prefill"
        ]
        is False
    )
    assert (
        _setup("--engine-version", "0.6.4", "--max-model-len", "65536", gpu="mi300x")[
            "enable_chunked_prefill"
        ]
        is True
    )
    assert _setup(*long, model="mistral-7b-v0.1")["enable_chunked_prefill"] is False
    # a multimodal model (a vision tower): off from 0.6.2, on in 0.6.1
    for version, on in (("0.6.1", True), ("0.6.2", False), ("0.7", False)):
        setup = _setup(
            "--engine-version", version, "--max-model-len", "65536", model="mistral-small-3.1-24b"
        )
        assert setup["enable_chunked_prefill"] is on
    # 0.6.0 alone keeps it off when prefix caching is asked for
    prefix = ("--max-model-len", "65536", "--enable-prefix-caching")
    assert _limits(_setup("--engine-version", "0.6.0", *prefix)) == (False, 65536, 256, True)
    assert _limits(_setup("--engine-version", "0.6.1", *prefix)) == (True, 512, 256, True)


def test_the_note_says_which_defaults_ran():
    notes = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, "--engine-version", "0.6.4",
        "--max-model-len", "65536",
    )["notes"]  # fmt: skip
    words = next(n["text"] for n in notes if n["id"] == "sim-vllm-v0-defaults")
    assert "vLLM 0.6.4's V0 defaults" in words
    assert "max_num_seqs 256" in words and "max_num_batched_tokens 512" in words
    assert "chunked prefill on by default (max_model_len 65,536 > 32,768" in words


def _max_running(tmp_path, version: str) -> tuple[int, int]:
    """300 requests at once (64-token prompts, 200 outputs): the most requests one step
    schedules, and how many prompts the first step takes."""
    log = tmp_path / f"steps-{version}.json"
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "300", "--input-len",
        "64", "--output-len", "200", "--engine-version", version, "--step-log", str(log),
    )  # fmt: skip
    assert code == 0, err
    steps = json.loads(log.read_text())["steps"]
    return max(len(s["scheduled"]) for s in steps), len(steps[0]["scheduled"])


def test_max_num_seqs_256_caps_300_requests_in_flight(tmp_path):
    # Llama-3.1-8B's 131,072-token context: chunked prefill on, 2,048 tokens a step = 32
    # prompts of 64; at most 256 run; 0.8 (V1, 1,024 seats, 8,192 tokens: 128 prompts) runs all
    assert _max_running(tmp_path, "0.6") == (256, 32)
    assert _max_running(tmp_path, "0.8") == (300, 128)


def _watermark_schedule(watermark: int) -> list[tuple[int, ...]]:
    """A pool of 100 blocks of 16: A and B, 800-token prompts (50 blocks each), one output.
    Returns the prompts each step schedules."""
    steps: list[tuple[int, ...]] = []

    def observe(engine, count, num_decodes, chunks):
        steps.extend([tuple(r.rid for r, _ in chunks)] * count)

    knobs = {"enable_prefix_caching": False, "admission_watermark_blocks": watermark}
    run_by_hand([(0, 800, 1), (0, 800, 1)], observe, **knobs)
    return steps


def test_the_watermark_holds_back_a_prompt_that_would_fill_the_pool():
    # V1: 50 + 50 blocks fit the 100 free, both prompts in step 0. V0 (watermark int(0.01 x
    # 100) = 1): after A, 50 free - 50 needed = 0 < 1, so B waits for A's blocks
    assert _watermark_schedule(0) == [(0, 1)]
    assert _watermark_schedule(1) == [(0,), (1,)]


def test_preemption_mode_recompute_and_swap_space_run():
    base = ("--engine-version", "0.7", "--max-model-len", "8192")
    plain = run_json("simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, *base)
    given = run_json(
        "simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, *base, "--preemption-mode",
        "recompute", "--swap-space", "16",
    )  # fmt: skip
    assert given["runs"] == plain["runs"]  # recompute is V0's default; swap space is host memory
    # --swap-space is accepted by V1 releases too (CacheConfig keeps it; nothing swaps there)
    assert run_cli("simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, "--swap-space", "8")[0] == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--engine-version", "0.7", "--preemption-mode", "evict"), "choose recompute or swap"),
        (
            ("--engine-version", "0.7", "--preemption-mode", "swap", "--gpu", "b200"),
            "profile states no host_link",
        ),
        (("--preemption-mode", "recompute"), "V1 preempts by recompute only"),
        (("--engine-version", "0.7", "--swap-space", "-1"), "--swap-space -1.0"),
        (("--engine-version", "0.7", "--swap-space", "nan"), "--swap-space nan"),
        (
            ("--engine-version", "0.7", "--preemption-mode", "recompute", "--no-preemption"),
            "not both",
        ),
        (("--engine", "sglang", "--swap-space", "4"), "--swap-space is a vLLM option"),
        (
            ("--engine-version", "0.6.2", "--num-scheduler-steps", "4"),
            "allowed from 0.6.3",
        ),
        (
            ("--engine-version", "0.6.5", "--num-scheduler-steps", "4", "--pp", "2"),
            "with --pp above 1",
        ),
    ],
)
def test_bad_v0_input_is_one_line(args, needle):
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--gpu", "h100", *SMALL, *args)
    one_line_error(code, err, needle)
    assert not out
