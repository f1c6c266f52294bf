"""GPU kinds side by side: every row is what the single-GPU commands say, normalised per GPU,
priced by hand, with a verdict that names the best and the kinds that cannot serve at all."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.formulas.batch_step import BatchShape
from kvplan.inputs.hardware import bundled_profiles, load_profile
from kvplan.inputs.sources import load_bundled
from kvplan.plans.compare import CompareRequest, compare, pareto_points
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import run_cli, run_json


def test_a_dp_attention_row_is_the_simulators_rank_on_the_same_flags():
    """Issue 27: a DP-attention layout is priced by the step model simulate and plan run for
    vLLM's `--tp 1 -dp N --enable-expert-parallel` (each rank its own batch, the experts over
    the gathered tokens), not by the 100% floor: capacity's comparison and plan do not price
    one layout two ways."""
    data = run_json("capacity", "deepseek-v3", "--gpu", "h200", "--gpu", "h100", "--ctx", "32k")
    row = data["rows"][0]
    assert row["layout"] == "DP attention 8 + EP 8" and row["priced_by"] == "step"
    spec = load_bundled("deepseek-v3")
    options = ServeOptions(tp=1, data_parallel_size=8, enable_expert_parallel=True)
    replica = build_replica(spec, load_profile("h200"), options)
    per_rank = min(row["users_per_replica"] // 8, replica.options.max_num_seqs)
    assert row["batch"] == per_rank * 8
    step = replica.model.step(BatchShape(per_rank, per_rank * 32768, (), per_rank))
    tpot = max(step.total_s, per_rank * Frontend().per_token_s)
    assert row["tpot_s"] == pytest.approx(tpot)
    assert row["tokens_per_s_per_gpu"] == pytest.approx(per_rank * 8 / tpot / 8)
    assert row["tpot_s"] > row["tpot_floor_s"]
    assert "or floor" not in data["verdict"]["text"]


def test_each_row_is_what_capacity_roofline_and_plans_step_model_say_for_that_gpu():
    """Each kind on its best layout: capacity at that layout, the roofline's floor, and the TPOT
    of plan's own replica model (simulate.setup.build_replica) at the batch the layout holds."""
    data = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--gpu", "h200", "--ctx", "32k",
        "--price", "h100=2", "--price", "h200=3",
    )  # fmt: skip
    assert [r["gpu"] for r in data["rows"]] == ["H100 SXM", "H200 SXM"]
    spec = load_bundled("llama-3.1-70b")
    for row, key, usd in zip(data["rows"], ("h100", "h200"), (2.0, 3.0), strict=True):
        one = run_json(
            "capacity", "llama-3.1-70b", "--gpu", key, "--ctx", "32k", "--tp", str(row["tp"])
        )
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
        floor = one["max_concurrency"] / step["time_floor_s"] / one["num_gpus"]
        assert row["tokens_per_s_per_gpu_floor"] == pytest.approx(floor)
        # plan's replica model: the same step, every seat taken, each sequence at 32k
        replica = build_replica(spec, load_profile(key), ServeOptions(tp=row["tp"]))
        b = row["batch"]
        assert b == min(one["max_concurrency"], replica.options.max_num_seqs)
        tpot = max(
            replica.model.step(BatchShape(b, b * 32768, (), b)).total_s, b * Frontend().per_token_s
        )
        assert row["tpot_s"] == pytest.approx(tpot) and row["priced_by"] == "step"
        assert row["tpot_s"] > row["tpot_floor_s"]  # the kernels reach less than the datasheet
        tps = b / tpot / one["num_gpus"]
        assert row["tokens_per_s_per_gpu"] == pytest.approx(tps)
        # USD per million output tokens: the GPU-hour over the tokens one GPU makes in an hour
        assert row["usd_per_million_output_tokens"] == pytest.approx(usd / (tps * 3600) * 1e6)
        assert row["usd_per_hour"] == pytest.approx(usd * one["num_gpus"])
        # the best of the layouts weighed: no wider TP decodes more per GPU
        fewest = run_json("capacity", "llama-3.1-70b", "--gpu", key, "--ctx", "32k")
        assert row["layouts_weighed"][0] == f"TP {fewest['tp']}"
        assert row["layout"] in row["layouts_weighed"]
        for tp in (int(layout.split()[1]) for layout in row["layouts_weighed"]):
            fixed = compare(spec, [load_profile(key)], CompareRequest(context_len=32768, tp=tp))
            other = fixed.rows[0]
            assert other.tokens_per_s_per_gpu <= row["tokens_per_s_per_gpu"] * (1 + 1e-9)
    best = max(data["rows"], key=lambda r: r["tokens_per_s_per_gpu"])
    assert data["verdict"]["id"] == "compare-verdict"
    assert data["verdict"]["text"].startswith(f"At 32,768 tokens {best['gpu']} decodes the most")
    assert "by plan's step model" in data["verdict"]["text"]


def test_the_comparison_and_plan_do_not_contradict_each_other_on_qwen3_32b():
    """Issue 30 item 5: the 100%-bandwidth floor on the fewest-GPU layout (TP 1: 3 sequences on
    an H100) called H200 cheaper per token; plan under latency targets finds H100 cheaper.
    Priced by plan's step model on each kind's best layout the two cost within a few percent,
    and the verdict says so: a tie at the model's precision, which plan's targets decide."""
    code, out, err = run_cli(
        "plan", "qwen3-32b", "--gpu", "h100", "--gpu", "h200", "--rate", "20",
        "--input-len", "2k", "--output-len", "500", "--slo", "ttft_p99=2s",
        "--slo", "tpot_p99=50ms", "--tp", "1,2,4", "--kv-cache-dtype", "auto",
        "--max-num-seqs", "64,256", "--max-num-batched-tokens", "8192",
        "--num-prompts", "100", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    planned = json.loads(out)["candidates"][0]["gpu"]
    assert planned == "H100 SXM"
    for ctx in ("2500", "8k"):  # the plan's requests (2k in + 500 out), and the default
        data = run_json("capacity", "qwen3-32b", "--gpu", "h100", "--gpu", "h200", "--ctx", ctx)
        text = data["verdict"]["text"]
        rows = {r["gpu"]: r for r in data["rows"]}
        assert all(r["priced_by"] == "step" and r["gpus_per_replica"] > 1 for r in rows.values())
        cheapest = min(rows.values(), key=lambda r: r["usd_per_million_output_tokens"])
        # either the comparison names plan's choice cheapest, or it names a tie that includes
        # plan's choice and says what decides it
        assert cheapest["gpu"] == planned or (
            "H200 SXM and H100 SXM serve a million output tokens within" in text
            and "latency targets decide, kvplan plan --slo ranks them" in text
        ), text
        assert "H200 SXM serves a million output tokens cheapest" not in text


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


def test_pareto_front_keeps_the_points_nothing_beats_on_both_axes():
    from kvplan.present.plots import pareto_front

    points = [(10, 900), (20, 800), (15, 700), (40, 300), (30, 300), (50, 100)]
    assert pareto_front(points) == [(10, 900), (20, 800), (40, 300), (50, 100)]


def test_the_comparison_plots_tokens_per_gpu_against_tokens_per_user(tmp_path):
    pytest.importorskip("matplotlib")
    spec = load_bundled("qwen3-32b")
    gpus = [load_profile("h100"), load_profile("h200")]
    series = pareto_points(spec, gpus, CompareRequest())
    assert sorted(series) == ["H100 SXM", "H200 SXM"]
    rows = {r.gpu: r for r in compare(spec, gpus, CompareRequest()).rows}
    for gpu, points in series.items():
        assert {p.layout for p in points} == set(rows[gpu].layouts_weighed)
        # the row is the best point of its kind: the full replica of its best layout
        best = max(points, key=lambda p: p.tokens_per_s_per_gpu)
        assert best.tokens_per_s_per_gpu == pytest.approx(rows[gpu].tokens_per_s_per_gpu)
        assert best.tokens_per_s_per_user == pytest.approx(rows[gpu].tokens_per_s_per_user)
    path = tmp_path / "pareto.svg"
    code, out, err = run_cli(
        "capacity", "qwen3-32b", "--gpu", "h100", "--gpu", "h200", "--plot", str(path)
    )
    assert code == 0, err
    assert "verdict" in out and "<svg" in path.read_text()[:500]


def test_a_comparison_plot_with_a_bad_suffix_is_refused_before_any_work(tmp_path):
    path = tmp_path / "pareto.txt"
    code, out, err = run_cli(
        "capacity", "qwen3-32b", "--gpu", "h100", "--gpu", "h200", "--plot", str(path)
    )
    assert code == 2 and out == "" and ".png or .svg" in err
    assert not path.exists()


def test_kinds_without_a_link_or_tables_of_their_own_say_how_they_were_priced():
    """A profile without an interconnect figure is weighed on its fewest-GPU layout only (the
    step model cannot price TP over no link); a GPU without kernel tables of its own runs at
    another GPU's fractions, and a note says whose."""
    spec = load_bundled("llama-3.1-8b")
    gpus = [load_profile("h100"), load_profile("m1-max-64gb"), load_profile("mi300x")]
    assert gpus[1].interconnect is None
    result = compare(spec, gpus, CompareRequest(context_len=8192))
    apple = result.rows[1]
    assert apple.layouts_weighed == ("TP 1",) and apple.priced_by == "step"
    borrowed = [n for n in result.notes if n.id == "sim-kernel-tables"]
    assert [n.value("gpu") for n in borrowed] == ["Apple M1 Max 64GB", "MI300X"]
    assert {n.value("evidence") for n in borrowed} == {"datasheet"}
