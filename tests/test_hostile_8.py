"""Hostile inputs, eighth round: the multi-node launch flags, vLLM V0's releases, the attention
backend flag on old releases and SGLang's eviction on a full pool. A node rank of 5,000 digits
ended in an internal error; ports, executor backends and the other engine's launch flags were
taken as anything; a vLLM release that never was ran as a real one's rules; a long SGLang run
spent its time re-reading the radix cache for every evicted leaf."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_cli

SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--input-len", "200", "--output-len", "20")
SMALL = ("--num-prompts", "5")


# ---- 1. launch ranks of many digits --------------------------------------------------------
# int() of more than 4,300 digits raises ValueError: `--node-rank 999...9` (5,000 digits) printed
# "internal error: ValueError: Exceeds the limit (4300 digits)".
@pytest.mark.parametrize(
    "argv",
    [
        ("--node-rank", "9" * 5000),
        ("--data-parallel-start-rank", "9" * 5000, "-dp", "2"),
        ("--nnodes", "2", "--tp", "2", "--node-rank", "0" * 5000 + "1"),
    ],
)
def test_a_rank_of_many_digits_is_one_line(argv):
    code, _, err = run_cli(*SIM, *SMALL, *argv)
    one_line_error(code, err, "must be an integer from 0 to")


# ---- 2. ports and the executor backend -----------------------------------------------------
# `--master-port -1`, `--master-port nan`, `-dpp 99999999` and `--distributed-executor-backend
# bogus` ran (exit 0); vLLM's parser takes the ports as int and the backend from its Literal.
@pytest.mark.parametrize("flag", ["--master-port", "--data-parallel-rpc-port", "-dpp"])
@pytest.mark.parametrize("value", ["-1", "0", "65536", "99999999", "nan", "", "2e4", "1" * 5000])
def test_a_port_outside_1_to_65535_is_refused(flag, value):
    code, _, err = run_cli(*SIM, *SMALL, flag, value)
    one_line_error(code, err, "must be an integer from 1 to 65,535")


@pytest.mark.parametrize("backend", ["bogus", "", "MP", " ray", "x" * 100_000])
def test_an_executor_backend_vllm_does_not_know_is_refused(backend):
    code, _, err = run_cli(*SIM, *SMALL, "--distributed-executor-backend", backend)
    one_line_error(code, err, "choose from ray, mp, uni, external_launcher")


# ---- 3. the other engine's launch flags ----------------------------------------------------
# `--engine sglang --headless` (and --master-addr, -dpa, ...) ran, as did vLLM with SGLang's
# --dist-init-addr: the engine's own parser refuses a flag it does not define.
@pytest.mark.parametrize(
    "argv, flag",
    [
        (("--engine", "sglang", "--headless"), "--headless is vLLM's"),
        (("--engine", "sglang", "--master-addr", "10.0.0.1"), "--master-addr is vLLM's"),
        (("--engine", "sglang", "--master-port", "29501"), "--master-port is vLLM's"),
        (("--engine", "sglang", "-dpa", "10.0.0.1"), "--data-parallel-address is vLLM's"),
        (("--engine", "sglang", "-dpp", "13345"), "--data-parallel-rpc-port is vLLM's"),
        (("--engine", "sglang", "-dpr", "0"), "--data-parallel-start-rank is vLLM's"),
        (
            ("--engine", "sglang", "--distributed-executor-backend", "ray"),
            "--distributed-executor-backend is vLLM's",
        ),
        (("--dist-init-addr", "10.0.0.1:5000"), "--dist-init-addr is SGLang's"),
        (("--nccl-init-addr", "10.0.0.1:5000"), "--dist-init-addr is SGLang's"),
    ],
)
def test_the_other_engines_launch_flag_is_refused(argv, flag):
    code, _, err = run_cli(*SIM, *SMALL, *argv)
    one_line_error(code, err, flag)


@pytest.mark.parametrize(
    "argv",
    [
        (
            "--nnodes", "2", "--tp", "16", "--node-rank", "1", "--master-addr", "10.0.0.1",
            "--master-port", "29501", "--distributed-executor-backend", "mp", "--headless",
        ),
        ("-dp", "4", "-dpl", "2", "--tp", "4", "-dpa", "10.0.0.1", "-dpp", "13345", "-dpr", "2"),
        (
            "--engine", "sglang", "--nnodes", "2", "--tp", "16", "--node-rank", "1",
            "--dist-init-addr", "10.0.0.1:5000",
        ),
    ],
)  # fmt: skip
def test_each_engines_own_multi_node_launch_still_runs(argv):
    code, out, err = run_cli(*SIM, *SMALL, *argv, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["setup"]["num_gpus"] == 16


# ---- 4. vLLM releases that never were ------------------------------------------------------
# `--engine-version 0.6.9` printed "vLLM 0.6.9 runs the V0 engine" (0.6 ended at 0.6.6.post1),
# 0.7.4 and 0.8.6 likewise; '0.6.x' and '0.6.99999' (a patch of five digits is read as no
# patch) ran as 0.6.6.
@pytest.mark.parametrize("version", ["0.6.9", "0.7.4", "0.8.6", "0.8.99"])
def test_a_patch_past_the_minors_last_release_is_refused(version):
    code, _, err = run_cli(*SIM, *SMALL, "--engine-version", version)
    one_line_error(code, err, "releases end at")


@pytest.mark.parametrize("version", ["0.6.x", "0.6.99999", "0.7.latest", "0.8.x"])
def test_a_spelling_of_no_release_is_refused(version):
    code, _, err = run_cli(*SIM, *SMALL, "--engine-version", version)
    one_line_error(code, err, "is no vLLM release")


@pytest.mark.parametrize(
    "version", ["0.6", "0.6.0", "0.6.6.post1", "0.6.3+cu118", "0.7.3", "0.8.5.post1", "0.19.9"]
)
def test_real_releases_still_run(version):
    code, out, err = run_cli(*SIM, *SMALL, "--engine-version", version, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["setup"]["engine_version"] == version


# ---- 5. --attention-backend on releases that had no such flag --------------------------------
# `--engine-version 0.6 --attention-backend FLASHINFER` ran with a note of vLLM 0.19's block-size
# rule; V0 read VLLM_ATTENTION_BACKEND. Found here, fixed by main's Backends record (the release
# each flag came with): held here as found.
@pytest.mark.parametrize("version", ["0.6", "0.7.3", "0.8"])
def test_attention_backend_before_its_flag_is_refused(version):
    code, _, err = run_cli(
        *SIM, *SMALL, "--engine-version", version, "--attention-backend", "FLASH_ATTN"
    )
    one_line_error(code, err, "has no such flag (it came with")


def test_attention_backend_on_019_still_runs():
    code, _, err = run_cli(
        *SIM, *SMALL, "--engine-version", "0.19", "--attention-backend", "FLASH_ATTN"
    )
    assert code == 0, err


# ---- 6. SGLang's eviction reads the radix cache once per need, not once per leaf -------------
# 4,000 SGLang prompts took 42 s (1,000: 6 s): _evict_for rebuilt every node of the cached free
# blocks for each leaf it evicted. Evicting a leaf changes no other node, so one look serves until
# its leaves are spent; the scans are counted here (the outputs are the goldens' to hold).
def test_sglang_eviction_scans_the_cache_once_per_need(monkeypatch):
    from kvplan.kernels.block_manager import BlockManager

    counts = {"scans": 0, "evictions": 0}
    scan, evict = BlockManager.cached_free_blocks, BlockManager.evict

    def counted_scan(self):
        counts["scans"] += 1
        return scan(self)

    def counted_evict(self, block_ids):
        counts["evictions"] += 1
        return evict(self, block_ids)

    monkeypatch.setattr(BlockManager, "cached_free_blocks", counted_scan)
    monkeypatch.setattr(BlockManager, "evict", counted_evict)
    code, _, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts", "400",
        "--input-len", "1000", "--output-len", "50", "--kv-cache-memory", "2GiB",
    )  # fmt: skip
    assert code == 0, err
    assert counts["evictions"] > 100, counts  # the pool filled: leaves were evicted
    assert counts["scans"] * 4 < counts["evictions"], counts
