"""GPU kinds side by side: every row is what the single-GPU commands say, normalised per GPU,
priced by hand, with a verdict that names the best and the kinds that cannot serve at all."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.inputs.hardware import bundled_profiles

from helpers import run_cli, run_json


def test_each_row_is_what_capacity_and_roofline_say_for_that_gpu():
    data = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--gpu", "h200", "--ctx", "32k",
        "--price", "h100=2", "--price", "h200=3",
    )  # fmt: skip
    assert [r["gpu"] for r in data["rows"]] == ["H100 SXM", "H200 SXM"]
    for row, key, usd in zip(data["rows"], ("h100", "h200"), (2.0, 3.0), strict=True):
        one = run_json("capacity", "llama-3.1-70b", "--gpu", key, "--ctx", "32k")
        assert (row["tp"], row["pp"], row["users_per_replica"]) == (
            one["tp"],
            one["pp"],
            one["max_concurrency"],
        )
        assert row["gpus_per_replica"] == one["num_gpus"]
        assert row["users_per_gpu"] == one["max_concurrency"] / one["num_gpus"]
        roof = run_json(
            "roofline", "llama-3.1-70b", "--gpu", key, "--ctx", "32k",
            "--tp", str(one["tp"]), "--batch", str(one["max_concurrency"]),
        )  # fmt: skip
        step = roof["decode"][0]
        assert row["tpot_floor_s"] == step["time_floor_s"] and step["fits"]
        tps = one["max_concurrency"] / step["time_floor_s"] / one["num_gpus"]
        assert row["tokens_per_s_per_gpu"] == pytest.approx(tps)
        # USD per million output tokens: the GPU-hour over the tokens one GPU makes in an hour
        assert row["usd_per_million_output_tokens"] == pytest.approx(usd / (tps * 3600) * 1e6)
        assert row["usd_per_hour"] == pytest.approx(usd * one["num_gpus"])
    best = max(data["rows"], key=lambda r: r["tokens_per_s_per_gpu"])
    assert data["verdict"]["id"] == "compare-verdict"
    assert data["verdict"]["text"].startswith(f"At 32,768 tokens {best['gpu']} decodes the most")


def test_users_size_each_kind_on_the_fewest_gpus_in_all():
    """DeepSeek-V3 at 32k for 500 users: the layout chosen needs no more GPUs in all than
    replicas of the smallest layout that fits, or of TP 8 x PP 2."""
    data = run_json("capacity", "deepseek-v3", "--gpu", "h100", "--gpu", "h200",
                    "--ctx", "32k", "--users", "500")  # fmt: skip
    for row, key in zip(data["rows"], ("h100", "h200"), strict=True):
        assert (
            row["gpus_needed"]
            == math.ceil(500 / row["users_per_replica"]) * row["gpus_per_replica"]
        )
        for layout in ([], ["--tp", "8", "--pp", "2"], ["--tp", "8"]):
            code, out, err = run_cli(
                "capacity", "deepseek-v3", "--gpu", key, "--ctx", "32k", *layout, "-f", "json"
            )
            assert code in (0, 1), err  # 1: this layout does not fit (fits: NO)
            other = json.loads(out)
            if other["max_concurrency"]:
                total = math.ceil(500 / other["max_concurrency"]) * other["num_gpus"]
                assert row["gpus_needed"] <= total, (key, layout)


def test_kinds_that_cannot_serve_say_why_and_the_verdict_names_them():
    data = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--gpu", "m1-max-64gb")
    apple = data["rows"][1]
    assert not apple["fits"] and "does not fit" in apple["why_not"]
    assert apple["users_per_replica"] == 0 and apple["gpus_needed"] is None
    assert "cannot serve it: Apple M1 Max" in data["verdict"]["text"]


def test_all_compares_every_bundled_gpu_once():
    data = run_json("capacity", "llama-3.1-8b", "--gpu", "all", "--gpu", "h100", "--ctx", "8k")
    expected = sorted(p.name for p in bundled_profiles().values() if p.vendor != "CPU")
    assert sorted(r["gpu"] for r in data["rows"]) == expected
    assert all(r["fits"] for r in data["rows"] if r["gpu"].startswith(("H100", "H200")))


def test_the_report_compares_per_gpu_with_a_verdict(tmp_path):
    out = tmp_path / "plan.md"
    code, _, err = run_cli(
        "report", "deepseek-v3", "--gpu", "h100", "--gpu", "h200", "--out", str(out)
    )
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert "**Verdict.** At 131,072 tokens" in text
    assert "| H100 SXM | DP attention 16 + EP 16 | 16 |" in text
    assert "**H200 SXM × 8** (DP attention 8 + EP 8, one node" in text


def test_kinds_compare_at_a_fixed_layout():
    # issue 30: "we have 4-GPU nodes" -- --tp with several --gpu was refused
    data = run_json("capacity", "qwen3-32b", "--gpu", "h100", "--gpu", "h200", "--tp", "4",
                    "--ctx", "32k")  # fmt: skip
    assert [(r["gpu"], r["tp"], r["gpus_per_replica"]) for r in data["rows"]] == [
        ("H100 SXM", 4, 4),
        ("H200 SXM", 4, 4),
    ]
    columns = next(n["text"] for n in data["notes"] if n["id"] == "compare-columns")
    assert "on TP 4, the layout given" in columns
    # a kind the fixed layout cannot hold says so on that layout
    data = run_json("capacity", "llama-3.1-70b", "--gpu", "l40s", "--gpu", "h200", "--tp", "2",
                    "--ctx", "32k")  # fmt: skip
    l40s = data["rows"][0]
    assert not l40s["fits"] and "on TP 2" in l40s["why_not"]
    code, _, err = run_cli("capacity", "qwen3-32b", "--gpu", "h100", "--gpu", "h200",
                           "--num-gpus", "8")  # fmt: skip
    assert code == 2 and "--num-gpus" in err and len(err.strip().splitlines()) == 1
