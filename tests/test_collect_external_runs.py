"""scripts/collect_external_runs.py's pairing of a result block with its GPU and server command
(issue 34: the cookbook's Gemma4 MI300X runs were recorded as H200 from the page's test
environment line, and GLM-5's H200 runs with the BF16 ROCm launch a section above them)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))

import collect_external_runs as collect  # noqa: E402

MEASURED = {
    "completed": 10,
    "duration_s": 43.73,
    "total_input_tokens": 6101,
    "total_output_tokens": 4220,
    "output_throughput": 96.49,
    "printed_concurrency": 1,
}


def raw(**kw) -> dict:
    base = {
        "line": 871,
        "hardware": "- Hardware: H200",
        "heading": "#### gemma-4-26B-A4B-it (MoE, 1x MI300X, TP=1)",
        "version": "- SGLang Version: gemma4 branch",
        "serve": "sglang serve --model-path google/gemma-4-26B-A4B-it",
        "bench": "python3 -m sglang.bench_serving --backend sglang --dataset-name random "
        "--num-prompts 10 --max-concurrency 1",
        "added": None,
        "measured": dict(MEASURED),
        "path": "docs/autoregressive/Google/Gemma4.md",
    }
    return {**base, **kw}


def test_a_section_heading_that_names_a_gpu_wins_over_the_pages_hardware_line():
    case, why = collect.case_of(raw())
    assert case is not None, why
    assert (case["gpu_profile"], case["gpu_family"]) == ("mi300x", "CDNA3")
    assert "Hardware line says H200" in case["notes"]
    # the id it was first collected under stays, so that its split does not move
    assert case["id"] == "sglcb-gemma4-h200-sxm-tp1-random-1024-1024-c1-L871"
    under_h200 = collect.case_of(raw(heading="#### gemma-4-26B-A4B-it (MoE, 1x H200, TP=1)"))[0]
    assert under_h200 is not None and under_h200["gpu_profile"] == "h200-sxm"
    assert "Hardware line" not in under_h200["notes"]
    plain = collect.case_of(raw(heading="#### Latency Benchmark"))[0]
    assert plain is not None and plain["gpu_profile"] == "h200-sxm"


def test_a_bench_of_another_checkpoint_than_the_server_is_a_record_mismatch():
    bench = (
        "python3 -m sglang.bench_serving --backend sglang --model zai-org/GLM-5-FP8 "
        "--dataset-name random --random-input-len 1000 --random-output-len 1000 "
        "--num-prompts 10 --max-concurrency 1 --request-rate inf"
    )
    glm = raw(
        line=437,
        heading="#### 5.1.1 Latency Benchmark",
        serve="sglang serve --model zai-org/GLM-5 --tp 8 --mem-fraction-static 0.80",
        bench=bench,
        path="docs/autoregressive/GLM/GLM-5.md",
    )
    case, why = collect.case_of(glm)
    assert case is not None, why
    assert "--model zai-org/GLM-5-FP8" in case["record_mismatch"]
    same = collect.case_of({**glm, "bench": bench.replace("GLM-5-FP8", "GLM-5")})[0]
    assert same is not None and same["record_mismatch"] is None


def test_a_result_under_a_label_without_its_bench_command_takes_the_pages_same_label_command(
    tmp_path, monkeypatch
):
    """Gemma4.md prints its bench commands once, under the first model's labels; later sections
    print results under the same labels: each takes the page's command of its label, not the
    nearest one above (the first model's image bench)."""
    page = "\n".join(
        [
            "- Hardware: H200",
            "#### gemma-4-E2B-it (1x H200, TP=1)",
            "```bash",
            "sglang serve --model-path google/gemma-4-E2B-it",
            "```",
            "**Latency Benchmark (Text)**",
            "```bash",
            "python3 -m sglang.bench_serving --backend sglang --dataset-name random "
            "--num-prompts 10 --max-concurrency 1",
            "```",
            "**Latency Benchmark (Image)**",
            "```bash",
            "python3 -m sglang.bench_serving --backend sglang-oai-chat --dataset-name image "
            "--num-prompts 10 --max-concurrency 1",
            "```",
            "#### gemma-4-26B-A4B-it (MoE, 1x H200, TP=1)",
            "```bash",
            "sglang serve --model-path google/gemma-4-26B-A4B-it",
            "```",
            "**Latency Benchmark (Text)**",
            "```",
            "============ Serving Benchmark Result ============",
            "Max request concurrency:                 1",
            "Successful requests:                     10",
            "==================================================",
            "```",
        ]
    )
    repo = tmp_path / "cookbook"
    path = "docs/autoregressive/Google/Gemma4.md"
    (repo / path).parent.mkdir(parents=True)
    (repo / path).write_text(page + "\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "page"], check=True)
    head = subprocess.run(
        [*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setattr(collect, "COMMIT", head)
    (run,) = collect.runs_in(str(repo), path)
    assert "--dataset-name random" in run["bench"] and "image" not in run["bench"]
    assert run["bench_label"] == "**Latency Benchmark (Text)**"
    assert run["serve"] == "sglang serve --model-path google/gemma-4-26B-A4B-it"


def _page_runs(tmp_path, monkeypatch, path: str, lines: list[str]) -> list[dict]:
    repo = tmp_path / "cookbook"
    (repo / path).parent.mkdir(parents=True)
    (repo / path).write_text("\n".join(lines) + "\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "page"], check=True)
    head = subprocess.run(
        [*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setattr(collect, "COMMIT", head)
    return collect.runs_in(str(repo), path)


def test_a_bench_takes_the_nearest_server_command_that_serves_its_checkpoint(tmp_path, monkeypatch):
    """GLM-5.md (cookbook 7b5bd9c) prints the H200 launch of zai-org/GLM-5-FP8 (section 4), then
    an additional ROCm launch of the bf16 zai-org/GLM-5 (4.1), then the H200 benchmark of
    GLM-5-FP8 (5.1): the bench ran against the FP8 launch, not the nearest one (issue 34)."""
    fp8 = "sglang serve --model zai-org/GLM-5-FP8 --tp 8 --mem-fraction-static 0.85"
    rocm = "sglang serve --model zai-org/GLM-5 --tp 8 --mem-fraction-static 0.80"
    bench = (
        "python3 -m sglang.bench_serving --backend sglang --model zai-org/GLM-5-FP8 "
        "--dataset-name random --num-prompts 10 --max-concurrency 1"
    )
    result = [
        "```",
        "============ Serving Benchmark Result ============",
        "Successful requests:                     10",
        "==================================================",
        "```",
    ]
    fence = ["```shell", "", "```"]
    lines = [
        "- Hardware: H200 (8x)",
        *[fence[0], fp8, fence[2]],
        *[fence[0], rocm, fence[2]],
        *[fence[0], bench, fence[2]],
        *result,
    ]
    (run,) = _page_runs(tmp_path, monkeypatch, "docs/autoregressive/GLM/GLM-5.md", lines)
    assert run["serve"] == fp8 and run["serve_skipped"]
    # a page that prints no launch of the bench's checkpoint keeps the nearest one (a mismatch)
    only_rocm = [lines[0], fence[0], rocm, fence[2], fence[0], bench, fence[2], *result]
    monkeypatch.undo()
    (tmp_path / "other").mkdir()
    (run,) = _page_runs(tmp_path / "other", monkeypatch, "docs/GLM-5.md", only_rocm)
    assert run["serve"] == rocm and not run["serve_skipped"]


def test_a_block_reprinted_in_a_later_doc_is_one_run_kept_under_the_earlier_doc():
    """GLM-5.1.md reprints GLM-5.md's two H200 result blocks word for word (every figure equal,
    only the bench's --model renamed): one measurement, kept once, under the doc the cookbook
    added first, whichever sorts first by name."""
    block = "============ Serving Benchmark Result ============\nBenchmark duration (s): 35.78"
    glm5 = raw(path="docs/autoregressive/GLM/GLM-5.md", line=437, printed=block)
    glm51 = raw(path="docs/autoregressive/GLM/GLM-5.1.md", line=407, printed=block)
    other = raw(path="docs/autoregressive/GLM/GLM-5.1.md", line=462, printed=block + "1")
    added = {glm5["path"]: 100, glm51["path"]: 200}
    dropped = collect.copies([glm51, other, glm5], added)
    assert set(dropped) == {0}
    assert "GLM-5.md#L437" in dropped[0]
    # the doc added first keeps the run, not the one whose name sorts first
    assert set(collect.copies([glm51, glm5], {glm5["path"]: 300, glm51["path"]: 200})) == {1}


def test_update_rewrites_a_run_already_in_the_file_byte_for_byte():
    """--update writes each run's keys in the order of the file's record of the same id (the
    file's records were written in several orders); a new run takes the first record's order."""
    existing = [{"id": "a", "split": "x", "model": "m"}, {"id": "b", "model": "m", "split": "y"}]
    again = collect.in_file_order({"model": "m", "split": "y", "id": "b"}, existing)
    assert list(again) == ["id", "model", "split"]
    new = collect.in_file_order({"model": "n", "id": "c", "split": "z", "extra": 1}, existing)
    assert list(new) == ["id", "split", "model", "extra"]


def test_the_cuda_ipc_switch_replays_with_the_pool_of_the_blocks_date():
    """SGLANG_USE_CUDA_IPC_TRANSPORT=1 reserves SGLANG_MM_FEATURE_CACHE_MB: 4096 MiB by default
    until SGLang PR #22662 (2026-04-13), 1024 after; the block's git-blame date picks it."""
    serve = (
        "SGLANG_USE_CUDA_IPC_TRANSPORT=1 python -m sglang.launch_server "
        "--model Qwen/Qwen3.5-397B-A17B --tp 8 --mem-fraction-static 0.8"
    )
    base = raw(heading="#### Latency Benchmark", serve=serve, path="docs/Qwen3.5.md")
    feb = collect.case_of({**base, "written": 1771232839})[0]  # 2026-02-16
    assert feb is not None and feb["replay_flags"] == ["--cuda-ipc-pool-mib", "4096"]
    assert "2026-02-16" in feb["notes"]
    may = collect.case_of({**base, "written": collect.IPC_POOL_1GIB_FROM + 86400 * 30})[0]
    assert may is not None and may["replay_flags"] == ["--cuda-ipc-pool-mib", "1024"]
    plain = collect.case_of(raw())[0]
    assert plain is not None and "replay_flags" not in plain
