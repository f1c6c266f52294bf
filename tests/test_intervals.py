"""The 80% intervals of simulate and plan (kvplan.plans.intervals, kvplan/data/intervals.json)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans import intervals
from kvplan.plans.plan import PlanRequest, parse_slo, plan
from kvplan.plans.simulate import SimulateRequest, simulate
from kvplan.simulate.workload import LENGTH_DISTS, WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_intervals as cal  # noqa: E402

from sim_cases import CASES_PATH, HELDOUT, load_cases  # noqa: E402

CLASSES = ("own", "other-engine", "borrowed", "datasheet")
# classes the calibration writes where it has runs of them (cal.CLASSES)
WRITTEN = (*CLASSES, intervals.PARTIAL, intervals.UNTIMED)


@pytest.fixture(scope="module")
def small_run():
    request = SimulateRequest(workload=WorkloadSpec(num_prompts=40, seed=0), rates=(math.inf,))
    return simulate(load_model("llama-3.1-8b"), load_profile("h100"), request)


def test_every_numeric_bench_key_has_an_interval(small_run):
    run = small_run.runs[0]
    bench = run.bench._asdict()
    numeric = {
        k for k, v in bench.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    assert set(run.bench_interval) == numeric
    for key, (low, high) in run.bench_interval.items():
        assert low <= high, key
        if intervals.family_of(key) is None:  # a count the workload fixes
            assert low == high == bench[key], key
        else:
            assert low < high, key


def test_duration_is_inverse_to_throughput(small_run):
    run = small_run.runs[0]
    b, iv = run.bench, run.bench_interval
    lo_t, hi_t = (x / b.output_throughput for x in iv["output_throughput"])
    lo_d, hi_d = (x / b.duration for x in iv["duration"])
    assert lo_d == pytest.approx(1 / hi_t) and hi_d == pytest.approx(1 / lo_t)


def test_interval_note_names_the_evidence(small_run):
    notes = [n for n in small_run.notes if n.id == "sim-interval"]
    assert len(notes) == 1 and dict(notes[0].values)["evidence"].split("/")[0] == "own"


def test_evidence_classes():
    classes = intervals.table()["classes"]
    own = intervals.evidence_for(load_profile("h100"), "vllm")
    assert own == ("own/vllm" if "own/vllm" in classes else "own")
    assert intervals.evidence_for(load_profile("h800"), "vllm") == "borrowed"
    assert intervals.evidence_for(load_profile("mi300x"), "vllm") == "datasheet"


def test_an_untimed_run_takes_the_untimed_class_where_the_table_has_one(monkeypatch):
    """SGLang's detokenizer on Moonshot's tokenizer is a serving path kvplan does not time: a
    run of such a model under SGLang takes intervals.UNTIMED (and "untimed/sglang" where
    calibrated per engine) whatever its GPU's tables, and its tables' class while the file has
    no such class; under vLLM, or for another model, the tables' class."""
    h200, table = load_profile("h200"), intervals.table()
    kimi = load_model("moonshotai/Kimi-K2.5", checkpoint=False)
    deepseek = load_model("deepseek-ai/DeepSeek-V3", checkpoint=False)
    tables_class = intervals.evidence_for(h200, "sglang")
    entry = table["classes"]["datasheet"]
    classes = table["classes"]
    without = {
        **table,
        "classes": {k: v for k, v in classes.items() if not k.startswith("untimed")},
    }
    monkeypatch.setattr(intervals, "table", lambda: without)
    assert intervals.evidence_for(h200, "sglang", kimi) == tables_class
    with_class = {**table, "classes": {**without["classes"], "untimed": entry}}
    monkeypatch.setattr(intervals, "table", lambda: with_class)
    assert intervals.evidence_for(h200, "sglang", kimi) == "untimed"
    assert intervals.evidence_for(h200, "sglang", deepseek) == tables_class
    assert intervals.evidence_for(h200, "vllm", kimi) == intervals.evidence_for(h200, "vllm")
    assert intervals.evidence_for(h200, "sglang") == tables_class
    per_engine = {**table, "classes": {**with_class["classes"], "untimed/sglang": entry}}
    monkeypatch.setattr(intervals, "table", lambda: per_engine)
    assert intervals.evidence_for(h200, "sglang", kimi) == "untimed/sglang"


def test_calibration_puts_sglang_runs_of_moonshots_tokenizer_in_the_untimed_class():
    kimi = {"engine": "sglang", "model": "moonshotai/Kimi-K2.5", "gpu_profile": "h200-sxm"}
    assert cal.evidence(kimi, ()) == intervals.UNTIMED
    assert (
        cal.evidence(kimi, ("the DSA indexer and sparse attention",)) == intervals.UNTIMED
    )  # untimed first
    assert cal.evidence({**kimi, "engine": "vllm"}, ()) == "own"
    deepseek = {**kimi, "model": "deepseek-ai/DeepSeek-V3"}
    assert cal.evidence(deepseek, ()) == "own"


def test_a_step_with_untimed_parts_takes_the_partial_class_on_own_tables_only():
    """A part of the step no table times (StepModel.untimed_parts) moves a run on its GPU's own
    tables to intervals.PARTIAL; a run on borrowed tables or none is already priced by
    stand-ins and keeps its class."""
    deepseek = {"engine": "sglang", "model": "deepseek-ai/DeepSeek-V3", "gpu_profile": "h200-sxm"}
    part = ("the bf16 fused MoE of this shape and split",)
    assert cal.evidence(deepseek, part) == intervals.PARTIAL
    assert cal.evidence({**deepseek, "gpu_profile": "h800"}, part) == "borrowed"
    assert cal.evidence({**deepseek, "gpu_profile": "mi300x"}, part) == "datasheet"
    h200 = load_profile("h200")
    assert intervals.raw_class(h200, "vllm", None, part) == intervals.PARTIAL
    assert intervals.raw_class(h200, "vllm", None, ()) == "own"


def test_a_class_the_file_lacks_falls_back_one_step_at_a_time(monkeypatch):
    """Without an untimed class, an untimed run with untimed step parts takes the partial
    class (not its tables' own); without a partial class either, the tables' class."""
    h200, table = load_profile("h200"), intervals.table()
    kimi = load_model("moonshotai/Kimi-K2.5", checkpoint=False)
    part = ("the bf16 fused MoE of this shape and split",)

    def without(*names):
        classes = {k: v for k, v in table["classes"].items() if k.split("/")[0] not in names}
        monkeypatch.setattr(intervals, "table", lambda: {**table, "classes": classes})

    without(intervals.UNTIMED)
    assert intervals.evidence_for(h200, "sglang", kimi, part).split("/")[0] == intervals.PARTIAL
    assert intervals.evidence_for(h200, "sglang", kimi, ()).split("/")[0] == "own"
    without(intervals.UNTIMED, intervals.PARTIAL)
    assert intervals.evidence_for(h200, "sglang", kimi, part) == "own"


def test_an_engines_own_entry_needs_two_labs_and_enough_runs():
    """class/engine entries exist only where that engine's runs of the class come from
    MIN_LABS labs (one lab's runs hold none of the spread between labs) and number
    MIN_ENGINE_RUNS (no single run sets an end: 19 runs put the conformal ends at the 2nd and
    18th)."""
    n = cal.MIN_ENGINE_RUNS
    assert cal.conformal_ranks(n) == (2, n - 1) and cal.conformal_ranks(n - 1)[0] == 1
    values = [i / 10 for i in range(n)]
    one_lab = _rows("own", values, engine="sglang", labs=("Lab A",))
    two_labs = _rows("own", values, engine="vllm")
    too_few = _rows("partial", values[:-1], engine="vllm")
    doc = cal.build(one_lab + two_labs + too_few)
    assert "own/vllm" in doc["classes"] and "own/sglang" not in doc["classes"]
    assert "partial/vllm" not in doc["classes"]
    assert len(doc["classes"]["own"]["runs"]) == 2 * n  # the sglang runs take the pooled ends
    assert cal.lab({"groups": {"source": "GPUStack lab (vllm bench serve against SGLang)"}}) == (
        "GPUStack lab"
    )


def test_a_class_that_knows_less_is_never_narrower():
    """Nested classes: each class's ends hold those of every class above it (own, partial,
    other-engine, borrowed, datasheet; untimed holds own and partial), per engine, and an
    engine whose class above has an entry of its own gets one for each class below."""
    n = cal.MIN_ENGINE_RUNS
    own = _rows("own", [i / 100 for i in range(n)], engine="vllm")
    wide = [-2.0 + i / 10 for i in range(n)]  # -2.0 .. -0.2: far below own's ends
    partial = _rows("partial", wide, engine="sglang")
    datasheet = _rows("datasheet", [-0.3 + i / 100 for i in range(8)], engine="vllm")
    doc = cal.build(own + partial + datasheet)
    classes = doc["classes"]

    def ends(name):
        return classes[name]["log_ratio"]["throughput"]

    assert ends("partial/sglang")[0] == pytest.approx(-1.9)  # its own 2nd smallest
    assert ends("partial/sglang")[1] >= ends("own")[1]  # held up to own's high end
    assert "own" in classes["partial/sglang"]["held"]

    def effective(name, engine):  # the entry kvplan.plans.intervals.evidence_for picks
        return classes.get(f"{name}/{engine}") or classes[name]

    checked = 0
    for engine in ("vllm", "sglang"):
        for name in cal.CLASSES:
            for better in cal.above(name):
                for family in intervals.FAMILIES:
                    lo, hi = effective(name, engine)["log_ratio"][family]
                    blo, bhi = effective(better, engine)["log_ratio"][family]
                    assert lo <= blo and hi >= bhi, (name, better, engine, family)
                    checked += 1
    assert checked == 2 * 12 * len(intervals.FAMILIES)
    # datasheet runs under SGLang reach as low as partial/sglang's: never sized less slow
    assert effective("datasheet", "sglang")["log_ratio"]["throughput"][0] <= -1.9


def test_stored_classes_and_calibration_runs_are_not_held_out():
    doc = intervals.table()
    assert set(CLASSES) <= set(doc["classes"])
    assert all(name.split("/")[0] in WRITTEN for name in doc["classes"])
    assert set(cal.CLASSES) == set(WRITTEN)
    calibration = {c["id"] for c in cal.calibration_cases()}
    heldout = {c["id"] for c in cal.heldout_cases()}
    assert not calibration & heldout
    for name, entry in doc["classes"].items():
        assert set(entry["runs"]) <= calibration, name
        assert entry["calibrated"] == (len(entry["runs"]) >= doc["min_runs"]), name
        for family in intervals.FAMILIES:
            q10, q90 = entry["log_ratio"][family]
            assert q10 < q90, (name, family)
    assert {c["id"] for c in load_cases(CASES_PATH)} <= calibration
    for name in ("vllm", "sglang", "external"):
        split = {c["id"]: c["split"] for c in load_cases(HELDOUT[name])}
        assert {i for i, s in split.items() if s == "calibrate"} <= calibration, name
        assert {i for i, s in split.items() if s == "validate"} <= heldout, name


def _rows(
    evidence, values, length_dist="fixed", engine="vllm", labs=("Lab A", "Lab B"), untimed=0.5
):
    """Calibration rows, their sources alternating between `labs`, each with `untimed` of its
    step time in untimed parts."""
    return [
        {"id": f"{evidence}-{length_dist}-{i}", "evidence": evidence,
         "groups": {"engine": engine, "source": f"{labs[i % len(labs)]} (a bench)"},
         "length_dist": length_dist,
         "workload": intervals.workload_kind(length_dist),
         "untimed_time_fraction": untimed,
         "ratios": {m: v for m in cal.FAMILY_OF_METRIC}}
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_width_rule_own_class_and_pooled_widening():
    own_values = [-0.2, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4]
    own, few = _rows("own", own_values), _rows("borrowed", [-1.0, -0.5])
    doc = cal.build(own + few)
    entry = doc["classes"]["own"]
    assert entry["calibrated"] and "own/vllm" not in doc["classes"]  # 7 < MIN_ENGINE_RUNS
    # 7 runs: ranks floor(0.8) = 0 and ceil(7.2) = 8 lie beyond the sample, so the extremes
    # [-0.2, 0.4] (centre 0.1, half-width 0.3) widen by 1.5: [0.1 - 0.45, 0.1 + 0.45]
    q10, q90 = entry["log_ratio"]["throughput"]
    assert q10 == pytest.approx(-0.35) and q90 == pytest.approx(0.55)
    # too few non-own runs to pool (2 < min_runs): every run, widened
    pool = cal.quantiles([*own_values, -1.0, -0.5])
    for name in ("borrowed", "datasheet", "other-engine"):
        e = doc["classes"][name]
        assert not e["calibrated"] and f"{name}/vllm" not in doc["classes"]
        lo, hi = e["log_ratio"]["throughput"]
        assert (hi - lo) == pytest.approx(cal.WIDEN * (pool[1] - pool[0]))
        assert (lo + hi) / 2 == pytest.approx((pool[0] + pool[1]) / 2)
    # enough non-own runs: those alone
    many = _rows("borrowed", [-1.0, -0.9, -0.8, -0.7, -0.6, -0.5])
    doc = cal.build(own + many)
    assert doc["classes"]["borrowed"]["calibrated"]
    lo, hi = doc["classes"]["datasheet"]["log_ratio"]["throughput"]
    pool = cal.widened(cal.quantiles([-1.0, -0.9, -0.8, -0.7, -0.6, -0.5]))
    # the pooled, widened ends, held up to own's high end (nested: datasheet knows less)
    assert lo == pytest.approx(pool[0]) and pool[1] < 0.55
    assert hi == pytest.approx(doc["classes"]["own"]["log_ratio"]["throughput"][1])


def test_conformal_rank_rule_by_hand():
    # 19 values 0.01 .. 0.19: ranks floor(0.1 * 20) = 2 and ceil(0.9 * 20) = 18, so the ends are
    # the 2nd and 18th smallest; the inclusive 10th/90th percentiles would be 0.028 and 0.172
    values = [i / 100 for i in range(19, 0, -1)]
    assert cal.conformal_ranks(19) == (2, 18)
    assert cal.quantiles(values) == pytest.approx([0.02, 0.18])
    # 25 values: ranks floor(2.6) = 2 and ceil(23.4) = 24 (percentiles: between 3rd and 4th)
    assert cal.conformal_ranks(25) == (2, 24)
    assert cal.quantiles([float(i) for i in range(1, 26)]) == pytest.approx([2.0, 24.0])
    # 9 values is the smallest sample whose ranks (1 and 9) stay inside it: the extremes, as is
    assert cal.conformal_ranks(9) == (1, 9)
    assert cal.quantiles([float(i) for i in range(9)]) == pytest.approx([0.0, 8.0])
    assert cal.conformal_ranks(8) == (0, 9)  # beyond: widened (test above)


def test_workload_widen_by_hand():
    # 9 ShareGPT runs 0.1 .. 0.9: ends the 1st and 9th, centre 0.5, half-width 0.4; 3 fixed-length
    # runs at 0.5, 1.3, 1.7 score 0, 2 and 3 half-widths out; leaving ShareGPT out leaves 3
    # fixed runs, too few (< min_runs) to calibrate on, so they score nothing
    share = _rows("own", [i / 10 for i in range(1, 10)], "sharegpt")
    fixed = _rows("own", [0.5, 1.3, 1.7], "fixed")
    scores = cal.transfer_scores(share + fixed)
    per_metric = len(cal.FAMILY_OF_METRIC)
    assert len(scores) == 3 * per_metric
    assert sorted(scores)[::per_metric] == pytest.approx([0.0, 2.0, 3.0])
    # n = 9 scores: rank ceil(0.8 * 10) = 8, the 8th smallest: 3.0 (the 3.0s are 7th..9th)
    assert cal.transfer_widen(scores) == pytest.approx(3.0)
    assert cal.transfer_widen([0.1, 0.2]) == 1.0  # never narrower than the class
    doc = cal.build(share + fixed)
    assert doc["classes"]["own"]["workloads"] == {"random": 3, "sharegpt": 9}
    assert doc["workload_widen"] == pytest.approx(3.0)


def test_workload_widen_applies_where_the_class_saw_few_such_runs():
    doc = intervals.table()
    for name, entry in doc["classes"].items():
        for dist in LENGTH_DISTS:
            low, high = entry["log_ratio"]["throughput"]
            q10, q90 = intervals.log_quantiles(name, "throughput", dist)
            few = entry["workloads"].get(intervals.workload_kind(dist), 0) < doc["min_runs"]
            factor = doc["workload_widen"] if few else 1.0
            assert (q90 - q10) == pytest.approx(factor * (high - low)), (name, dist)
            assert (q10 + q90) == pytest.approx(low + high), (name, dist)
    assert doc["workload_widen"] >= 1.0


def test_every_length_dist_has_a_workload_kind():
    assert set(intervals.WORKLOAD_OF_LENGTH_DIST) == set(LENGTH_DISTS)
    # the bench clients' random datasets count with the calibration runs' fixed-length stand-ins
    kinds = {intervals.workload_kind(d) for d in ("fixed", "vllm-random", "sglang-random")}
    assert kinds == {"random"}


@pytest.mark.parametrize("evidence", CLASSES)
def test_pessimism_grows_with_confidence(evidence):
    previous = None
    for p in (0.5, 0.6, 0.8, 0.9, 0.95):
        f = intervals.pessimistic_factors(evidence, "sharegpt", p)
        assert all(v >= 1 for v in f.values())
        if previous is not None:
            assert all(f[k] >= previous[k] for k in f)
        previous = f
    q10, _ = intervals.log_quantiles(evidence, "throughput", "sharegpt")  # one-sided 80% end
    assert intervals.log_quantile(evidence, "throughput", "sharegpt", 0.1) == pytest.approx(q10)


def test_plan_with_confidence_needs_at_least_as_many_gpus():
    spec, gpus = load_model("llama-3.1-8b"), [load_profile("h100")]
    base = _one_config_request(40.0, "tpot_p99=40ms", WorkloadSpec(num_prompts=120, seed=0))
    point = plan(spec, gpus, base)
    sure = plan(spec, gpus, base._replace(confidence=0.9))
    assert point.candidates and sure.candidates
    assert sure.candidates[0].num_gpus >= point.candidates[0].num_gpus
    assert sure.candidates[0].goodput_rps < point.candidates[0].goodput_rps
    assert "plan-confidence" in {n.id for n in sure.notes}
    assert "plan-point-estimate" in {n.id for n in point.notes}
    # each candidate says which class its uncertainty came from; the note lists them per GPU
    top = sure.candidates[0]
    assert top.interval_class == intervals.evidence_for(gpus[0], "vllm", spec, top.untimed_parts)
    (confidence,) = [n for n in sure.notes if n.id == "plan-confidence"]
    # the note shows the rate factor the candidate was sized on (fully measured: the class's
    # at its run's share in the API server's per-request cost, r)
    assert top.factors is not None and top.untimed_fractions is not None
    run = intervals.Untimed("vllm", *top.untimed_fractions)
    slow = intervals.pessimistic_factors(top.interval_class, "fixed", 0.9, run)["rate"]
    assert top.factors["rate"] == pytest.approx(slow)
    assert (top.gpu, top.interval_class, slow, slow) in confidence.value("gpus")
    # a fully measured replica's step has no untimed share: its TPOT bound is the class's
    # ends, whatever its run's TTFT and request shares (which move the TTFT and rate bounds)
    assert top.untimed_fractions[0] == 0.0
    plain = intervals.pessimistic_factors(top.interval_class, "fixed", 0.9)
    assert top.factors["tpot"] == pytest.approx(plain["tpot"])
    if top.untimed_fractions[2] >= intervals.MIN_UNTIMED_FRACTION:
        assert slow > plain["rate"]  # the burst's API-server share widens the rate bound


def test_pessimistic_factors_widen_with_the_runs_untimed_share():
    """The partial class's bound at a confidence follows the run's untimed share u as its
    interval does (untimed_ends): more of the step on a stand-in, a larger factor; none, the
    own class's; unknown, the class's own ends; at 0.9 the TPOT factor is exp of the interval's
    90% end (one rule for both)."""
    cls, dist = intervals.PARTIAL, "fixed"
    at = {
        u: intervals.pessimistic_factors(cls, dist, 0.8, intervals.Untimed("sglang", u))
        for u in (0.2, 0.5, 0.9)
    }
    for family in ("rate", "tpot", "e2el"):
        assert at[0.2][family] < at[0.5][family] < at[0.9][family], family
    none = intervals.pessimistic_factors(cls, dist, 0.8, intervals.Untimed("sglang", 0.0))
    own = intervals.pessimistic_factors("own", dist, 0.8)
    assert none["tpot"] == pytest.approx(own["tpot"]) and none["rate"] == pytest.approx(own["rate"])
    assert intervals.pessimistic_factors(cls, dist, 0.8, None) == intervals.pessimistic_factors(
        cls, dist, 0.8
    )
    run = intervals.Untimed("sglang", 0.5, 0.3)
    _q10, q90 = intervals.log_quantiles(cls, "tpot", dist, run)
    assert intervals.pessimistic_factors(cls, dist, 0.9, run)["tpot"] == pytest.approx(
        math.exp(q90), rel=1e-12
    )
    # the TTFT bound of the own class follows the TTFT's untimed share s the same way
    ttft = intervals.Untimed("vllm", 0.0, 0.9)
    _low, high = intervals.log_quantiles("own", "ttft", dist, ttft)
    assert intervals.log_quantile("own", "ttft", dist, 0.9, ttft) == pytest.approx(high)


def _sglang_gpt_oss(input_len: int, confidence: float = 0.9) -> PlanRequest:
    workload = WorkloadSpec(num_prompts=60, input_len=input_len, output_len=32, seed=0)
    request = _one_config_request(5.0, "tpot_p99=200ms", workload, confidence=confidence)
    return request._replace(emit="sglang")


def _gpt_oss_partial(monkeypatch):
    """SGLang's gpt-oss on an A100 as a partial run (its MXFP4 experts in no A100 table), not
    the untimed class its triton_kernels path puts it in (untimed_run): the partial rule's
    mechanics on a bundled model."""
    monkeypatch.setattr(intervals, "gpt_oss_below_blackwell", lambda spec, gpu: False)


def test_sglang_gpt_oss_before_blackwell_is_of_the_untimed_class():
    """SGLang runs gpt-oss's MXFP4 experts through triton_kernels' matmul_ogs before Blackwell
    (note sim-weak-gpt-oss-sglang: an upper bound): the untimed class, on an A100 and an H100;
    on a B200, and under vLLM, the step's own class."""
    spec = load_model("openai/gpt-oss-20b", checkpoint=False)
    parts = ("the mxfp4 fused MoE of this shape and split",)
    for gpu in ("a100", "h100"):
        profile = load_profile(gpu)
        assert intervals.raw_class(profile, "sglang", spec, parts) == intervals.UNTIMED
        assert intervals.raw_class(profile, "vllm", spec, parts) == intervals.PARTIAL
    assert intervals.raw_class(load_profile("b200"), "sglang", spec) != intervals.UNTIMED
    llama = load_model("llama-3.1-8b")
    assert intervals.raw_class(load_profile("a100"), "sglang", llama) == "own"


def test_plan_sizes_a_partial_replica_on_its_runs_untimed_share(monkeypatch):
    """gpt-oss's MXFP4 experts are in no A100 table: under SGLang (the partial class's pooled
    untimed factors) a run whose step spends more of its time in them (u larger) is sized on a
    larger TPOT factor, and one that rests more on the API server's request cost (short
    prompts: r larger) on a larger rate factor, each the factor at its own run's (u, s, r), and
    the note shows the factor used."""
    _gpt_oss_partial(monkeypatch)
    spec, gpus = load_model("openai/gpt-oss-20b", checkpoint=False), [load_profile("a100")]
    tops = {}
    for input_len in (256, 2048):
        result = plan(spec, gpus, _sglang_gpt_oss(input_len))
        (top,) = result.candidates
        assert top.interval_class == intervals.PARTIAL and top.untimed_fractions is not None
        expected = intervals.pessimistic_factors(
            top.interval_class, "fixed", 0.9, intervals.Untimed("sglang", *top.untimed_fractions)
        )
        assert top.factors == pytest.approx({**expected, "itl": expected["tpot"]})
        (confidence,) = [n for n in result.notes if n.id == "plan-confidence"]
        rate = top.factors["rate"]
        assert confidence.value("gpus") == ((top.gpu, top.interval_class, rate, rate),)
        tops[input_len] = top
    short, long = tops[256], tops[2048]
    # the run whose step spends more in the experts is bounded on the larger TPOT factor
    more, less = sorted(tops.values(), key=lambda t: -t.untimed_fractions[0])
    assert more.untimed_fractions[0] > less.untimed_fractions[0] > 0.0
    assert more.factors["tpot"] > less.factors["tpot"]
    # the short prompts' run rests more on the API server's per-request cost: a larger rate
    assert short.untimed_fractions[2] > long.untimed_fractions[2]
    assert short.factors["rate"] > long.factors["rate"]
    # not the class's ends: those hold the partial runs of both engines, whatever their u
    plain = intervals.pessimistic_factors(intervals.PARTIAL, "fixed", 0.9)
    assert short.factors["tpot"] != pytest.approx(plain["tpot"])


def test_at_090_the_plans_tpot_factor_is_the_simulate_intervals_90_end(monkeypatch):
    """The same configuration simulated at the rate the plan's candidate was sized on prints a
    TPOT interval whose upper end over the point is the factor the plan used."""
    from kvplan.simulate.setup import ServeOptions

    _gpt_oss_partial(monkeypatch)

    spec, gpu = load_model("openai/gpt-oss-20b", checkpoint=False), load_profile("a100")
    request = _sglang_gpt_oss(256)
    (top,) = plan(spec, [gpu], request).candidates
    assert top.factors is not None and top.untimed_fractions is not None
    rate = top.goodput_rps * top.factors["rate"]  # the simulated rate of its highest passing run
    serve = ServeOptions(
        engine="sglang", tp=1, max_num_seqs=64, max_num_batched_tokens=8192, kv_cache_dtype="auto"
    )
    sim = simulate(
        spec, gpu, SimulateRequest(workload=request.workload, rates=(rate,), serve=serve)
    )
    (run,) = sim.runs
    assert run.engine.untimed_time_fraction == pytest.approx(top.untimed_fractions[0], rel=1e-6)
    assert run.bench_interval is not None
    _low, high = run.bench_interval["median_tpot_ms"]
    assert top.factors["tpot"] == pytest.approx(high / run.bench.median_tpot_ms, rel=1e-6)
    assert top.factors["tpot"] > 1.0  # (the bound, not the floor of 1)


def test_plan_prices_a_step_with_untimed_parts_at_the_partial_class(monkeypatch):
    """gpt-oss's MXFP4 experts are in no A100 table (aiconfigurator times MXFP4 fused MoE on
    Hopper and Blackwell only): each plan candidate names the part and is sized at the partial
    class's factors (not the GPU's tables' class): a wider partial entry lowers the goodput it
    is credited with; untimed factors of 1 size it as the own class."""
    spec, gpus = load_model("openai/gpt-oss-20b", checkpoint=False), [load_profile("a100")]
    request = _gpt_oss_request("tpot_p99=200ms")
    (top,) = plan(spec, gpus, request).candidates
    assert any("fused MoE" in p for p in top.untimed_parts)
    assert top.interval_class == intervals.PARTIAL  # (no partial/vllm entry: one lab)
    doc = intervals.table()

    def goodput_with(partial_entry: str | dict) -> float:
        entry = doc["classes"][partial_entry] if isinstance(partial_entry, str) else partial_entry
        classes = {**doc["classes"], intervals.PARTIAL: entry}
        monkeypatch.setattr(intervals, "table", lambda: {**doc, "classes": classes})
        (candidate,) = plan(spec, gpus, request).candidates
        return candidate.goodput_rps

    assert goodput_with("untimed") < top.goodput_rps
    # with its untimed share known, the partial class is the own class's ends widened by the
    # untimed factors: factors of 1 (a stand-in as fast as the real kernel) size it as own
    partial = doc["classes"][intervals.PARTIAL]
    ones = {family: [1.0, 1.0] for family in intervals.FAMILIES}
    exact = {
        **partial,
        "untimed_factor": {**partial["untimed_factor"], "pooled": ones, "engines": {}},
    }
    assert goodput_with(exact) == pytest.approx(goodput_with("own"))


def test_the_confidence_note_when_no_configuration_meets_the_bound():
    from kvplan.present.notes import note_text

    spec, gpus = load_model("openai/gpt-oss-20b", checkpoint=False), [load_profile("h100")]
    result = plan(spec, gpus, _gpt_oss_request("tpot_p99=1ms"))
    assert not result.candidates
    (confidence,) = [n for n in result.notes if n.id == "plan-confidence"]
    assert confidence.value("gpus") == ()
    text = note_text(confidence)
    assert "no configuration met them" in text and "operating point" not in text


def _gpt_oss_request(slo: str) -> PlanRequest:
    workload = WorkloadSpec(num_prompts=60, input_len=256, output_len=32, seed=0)
    return _one_config_request(5.0, slo, workload, confidence=0.8)


def _one_config_request(rate: float, slo: str, workload, confidence=None) -> PlanRequest:
    """A plan over one configuration: TP 1, 64 sequences, 8,192 tokens a step, auto KV."""
    return PlanRequest(
        rate=rate,
        slos=(parse_slo(slo),),
        workload=workload,
        tps=(1,),
        max_num_seqs=(64,),
        max_num_batched_tokens=(8192,),
        kv_cache_dtypes=("auto",),
        top=1,
        jobs=1,
        confidence=confidence,
    )


@pytest.mark.parametrize(
    "value",
    [
        "nan",
        # the same path as nan's (check_confidence, in process below): slow runs keep the CLI's
        pytest.param("0.99", marks=pytest.mark.slow),
        pytest.param("0.4", marks=pytest.mark.slow),
    ],
)
def test_confidence_out_of_range_is_a_one_line_error(value):
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", "plan", "llama-3.1-8b", "--rate", "1",
         "--slo", "tpot_p99=50ms", "--confidence", value],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--confidence" in lines[0], proc.stderr


@pytest.mark.parametrize("value", [0.99, 0.4, 0.96, 0.49, float("nan"), float("inf"), "0.9"])
def test_check_confidence_refuses_what_is_outside_its_range(value):
    with pytest.raises(KvplanError, match="--confidence must be between 0.5 and 0.95"):
        intervals.check_confidence(value)


@pytest.mark.parametrize("value", [None, 0.5, 0.8, 0.95, 1 - 0.05])
def test_check_confidence_takes_its_range_and_none(value):
    intervals.check_confidence(value)


@pytest.mark.slow
def test_the_shipped_intervals_are_those_the_calibration_runs_give_today():
    """intervals.json is written from simulations of the calibration runs: a change to the step
    model or the scheduler that moves them must recalibrate it (merging one moved 7 ends)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibrate_intervals.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ---- propagating the step-time uncertainty through the simulation (issue 34) ------------------


def _no_frontend_request(**kw) -> SimulateRequest:
    from kvplan.simulate.cluster import Frontend

    workload = WorkloadSpec(num_prompts=kw.pop("num_prompts", 12), input_len=512, output_len=32)
    return SimulateRequest(workload=workload, frontend=Frontend(0.0, 0.0), series=False, **kw)


def _bench_at(scale: float, request: SimulateRequest):
    from kvplan.plans.simulate import _runs
    from kvplan.simulate.setup import build_replica, with_step_scale

    replica = build_replica(load_model("llama-3.1-8b"), load_profile("h100"), request.serve)
    return _runs(with_step_scale(replica, scale), request)[0][0].bench


def test_a_step_scale_stretches_a_run_at_infinite_rate_exactly():
    """Every request at once, no frontend costs: every time in the run is a sum of step times,
    so at step scale s each latency is s times the point's and each rate 1/s of it (the whole
    run on a clock stretched by s): the hand-computed propagated values."""
    request = _no_frontend_request()
    point, slow = _bench_at(1.0, request), _bench_at(1.5, request)
    for key in ("median_ttft_ms", "median_tpot_ms", "median_e2el_ms", "duration"):
        assert getattr(slow, key) == pytest.approx(1.5 * getattr(point, key), rel=1e-9), key
    assert slow.output_throughput == pytest.approx(point.output_throughput / 1.5, rel=1e-9)
    assert slow.completed == point.completed


def test_a_run_without_a_clock_is_stretched_not_rerun(monkeypatch):
    """intervals.stretched gives what the rerun gives where nothing keeps time but the steps
    (every request at once, no frontend costs): so simulate reruns a workload only where it has
    an arrival rate (or a trace), twice (the fast and the slow scale)."""
    import kvplan.plans.simulate as plans_simulate

    request = _no_frontend_request()
    point, slow = _bench_at(1.0, request), _bench_at(1.5, request)
    by_hand = intervals.stretched(point, 1.5)
    # the peak over one-second windows (max_output_tokens_per_s) bins on the wall clock: a run
    # shorter than a window holds every token in one, stretched or not (intervals.stretched)
    keys = [
        k for k in slow._fields if intervals.family_of(k) is not None and not k.startswith("max_")
    ]
    assert {"median_ttft_ms", "median_tpot_ms", "output_throughput", "duration"} <= set(keys)
    for key in keys:
        assert getattr(by_hand, key) == pytest.approx(getattr(slow, key), rel=1e-9), key
    calls = []
    real = plans_simulate.with_step_scale

    def counted(replica, scale):
        calls.append(scale)
        return real(replica, scale)

    monkeypatch.setattr(plans_simulate, "with_step_scale", counted)
    _with_propagation(monkeypatch, ("ttft", "e2el"))
    simulate(load_model("llama-3.1-8b"), load_profile("h100"), request)
    assert calls == []
    simulate(load_model("llama-3.1-8b"), load_profile("h100"), request._replace(rates=(5.0,)))
    assert len(calls) == 2


def test_a_slower_step_lengthens_the_queue_more_than_the_step_near_saturation():
    """At a rate near what the replica sustains a 1.5x step makes the median TTFT more than 1.5x
    longer (the waiting time grows like 1 / (1 - load)); far below saturation about 1.5x."""
    saturated = _bench_at(1.0, _no_frontend_request(num_prompts=200))
    capacity = saturated.request_throughput
    near = _no_frontend_request(num_prompts=200, rates=(0.6 * capacity,))
    far = _no_frontend_request(num_prompts=200, rates=(0.02 * capacity,))
    near_ratio = _bench_at(1.5, near).median_ttft_ms / _bench_at(1.0, near).median_ttft_ms
    far_ratio = _bench_at(1.5, far).median_ttft_ms / _bench_at(1.0, far).median_ttft_ms
    assert near_ratio > 2.0
    assert far_ratio == pytest.approx(1.5, rel=0.05)


def test_step_scale_is_checked():
    from kvplan.errors import KvplanError
    from kvplan.simulate.setup import ScaledStepModel

    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(KvplanError):
            ScaledStepModel(object(), bad)


def _with_propagation(monkeypatch, families):
    doc = {**intervals.table(), "propagate": {"families": list(families)}}
    monkeypatch.setattr(intervals, "table", lambda: doc)


def test_propagated_interval_is_the_envelope_by_hand(monkeypatch):
    """simulate's interval of a propagated family: the conformal ends about the point widened to
    hold the runs at the class's step scales, (exp q10, exp q90) of its TPOT ends; a family not
    propagated keeps the conformal ends."""
    _with_propagation(monkeypatch, ("ttft", "e2el"))
    request = _no_frontend_request()
    result = simulate(load_model("llama-3.1-8b"), load_profile("h100"), request)
    run = result.runs[0]
    cls = dict(next(n for n in result.notes if n.id == "sim-interval").values)["evidence"]
    fast, slow = intervals.step_scales(cls, "fixed")
    (t10, t90) = intervals.log_quantiles(cls, "tpot", "fixed")
    assert (fast, slow) == (pytest.approx(math.exp(t10)), pytest.approx(math.exp(t90)))
    assert run.step_scaled["step_scales"] == [fast, slow]
    ttft = run.bench.median_ttft_ms
    untimed = intervals.Untimed(
        request.serve.engine, run.engine.untimed_time_fraction, run.engine.ttft_untimed_fraction
    )
    assert 0 < untimed.ttft_fraction < 1  # its prefill steps' launch and host constants
    q10, q90 = intervals.log_quantiles(cls, "ttft", "fixed", untimed)
    # at rate inf without frontend costs the runs at the scales are the point times the scale
    low = min(ttft * math.exp(q10), ttft * fast)
    high = max(ttft * math.exp(q90), ttft * slow)
    assert run.bench_interval["median_ttft_ms"] == [pytest.approx(low), pytest.approx(high)]
    thr = run.bench.output_throughput
    q10, q90 = intervals.log_quantiles(cls, "throughput", "fixed")
    assert run.bench_interval["output_throughput"] == [
        pytest.approx(thr * math.exp(q10)),
        pytest.approx(thr * math.exp(q90)),
    ]


def test_confidence_factors_hold_the_propagated_step(monkeypatch):
    """plan --confidence: where a family is propagated its factor, and the rate's, are at least
    the step scale at that confidence (the TPOT factor): the propagated run at rate G is the
    simulation at G * s stretched by s."""
    cls = intervals.evidence_for(load_profile("h100"), "vllm")
    _with_propagation(monkeypatch, ())
    plain = intervals.pessimistic_factors(cls, "sharegpt", 0.9)
    _with_propagation(monkeypatch, ("ttft", "e2el"))
    out = intervals.pessimistic_factors(cls, "sharegpt", 0.9)
    step = math.exp(intervals.log_quantile(cls, "tpot", "sharegpt", 0.9))
    assert out["rate"] == max(plain["rate"], step)
    assert out["ttft"] == max(plain["ttft"], step) and out["tpot"] == plain["tpot"]


def _row(value: float, propagated: list[float], workload: str = "random") -> dict:
    return {
        "evidence": "own",
        "groups": {"engine": "vllm", "source": "lab"},
        "workload": workload,
        "ratios": {"median_ttft_ms": value, "median_tpot_ms": 0.0},
        "propagated": {"median_ttft_ms": propagated, "median_tpot_ms": [-0.1, 0.1]},
    }


def test_propagation_is_chosen_where_the_conformal_ends_miss_left_out_runs():
    """The width rule (cal.propagation_choice): TTFT is propagated where its conformal ends hold
    fewer than 80% of the calibration runs left out and the runs at the step scales hold more;
    TPOT, inside its ends always, is not; e2el follows TTFT."""
    # 18 random-dataset runs spread 0..1.7, and 4 ShareGPT runs far above them, where the
    # slow run is: left out by workload kind, the random runs' ends miss all 4
    rows = [_row(0.1 * i, [0.0, 0.3]) for i in range(18)]
    rows += [_row(5.0, [0.0, 6.0], "sharegpt") for _ in range(4)]
    choice = cal.propagation_choice(rows)
    kind = choice["scores"]["ttft"]["workload"]
    assert (kind["runs"], kind["conformal"], kind["envelope"]) == (4, 0.0, 1.0)
    assert choice["scores"]["tpot"]["run"]["conformal"] == 1.0
    assert choice["families"] == ["e2el", "ttft"]
    # the random runs alone: their conformal ends hold 16 of 18 left out, nothing propagated
    alone = cal.propagation_choice(rows[:18])
    assert alone["scores"]["ttft"]["run"]["conformal"] == pytest.approx(16 / 18, abs=1e-4)
    assert alone["families"] == []


# ---- the partial class's untimed-part factor (issue 34: as narrow as the evidence allows) ----


def test_untimed_ends_by_hand():
    """A time's ends: the own ends plus log(1 - u + u k) at k10 and k90; a rate's the same on
    its inverse. Own time ends [0, log 2], factors (0.5, 3), u = 0.4: the fast end
    0 + log(0.6 + 0.2) = log 0.8, the slow log 2 + log(0.6 + 1.2) = log 3.6."""
    low, high = intervals.untimed_ends((0.0, math.log(2)), (0.5, 3.0), 0.4, True)
    assert (low, high) == (pytest.approx(math.log(0.8)), pytest.approx(math.log(3.6)))
    # the throughput whose own ends are [log 0.5, 0]: time ends [0, log 2], so 1/3.6 .. 1.25
    low, high = intervals.untimed_ends((math.log(0.5), 0.0), (0.5, 3.0), 0.4, False)
    assert (low, high) == (pytest.approx(math.log(1 / 3.6)), pytest.approx(math.log(1.25)))
    # no untimed time: the own ends; all of it: the factors themselves on the own ends
    assert intervals.untimed_ends((0.0, 1.0), (0.5, 3.0), 0.0, True) == (0.0, 1.0)
    low, high = intervals.untimed_ends((0.0, 1.0), (0.5, 3.0), 1.0, True)
    assert (low, high) == (pytest.approx(math.log(0.5)), pytest.approx(1 + math.log(3)))
    # a factor of 0 on every part of the step leaves no time: the fast end is open
    assert intervals.untimed_ends((0.0, 1.0), (0.0, 3.0), 1.0, True)[0] == -math.inf


@pytest.mark.parametrize("fraction", [-0.2, 1.5, math.nan, math.inf])
def test_an_untimed_fraction_that_is_no_share_is_refused(fraction):
    """u is a share of a run's step time: outside [0, 1] (or NaN) the ends were silently
    inverted (u = -0.2: the slow end below the own one) or NaN; now a one-line error."""
    with pytest.raises(KvplanError, match="untimed time fraction"):
        intervals.untimed_ends((0.0, 1.0), (0.5, 3.0), fraction, True)
    with pytest.raises(KvplanError, match="untimed time fraction"):
        intervals.log_quantiles("partial", "tpot", "fixed", intervals.Untimed("vllm", fraction))


def test_untimed_scores_by_hand():
    """The factor a run asks for: own throughput ends [log 0.5, 0] are time ends [0, log 2];
    u = 0.5. A run at 0.25x the simulated throughput is 4x slower, 2x past the slow end:
    (2 - 0.5) / 0.5 = 3 on the upper score; 4x past the fast end asks no lower factor (1). A
    run 1.6x faster (time 0.625) asks (0.625 - 0.5) / 0.5 = 0.25 below, nothing above."""
    base = [math.log(0.5), 0.0]
    slow = {"untimed_time_fraction": 0.5, "ratios": {"output_throughput": math.log(0.25)}}
    assert cal.untimed_scores(slow, "output_throughput", base) == pytest.approx((1.0, 3.0))
    fast = {"untimed_time_fraction": 0.5, "ratios": {"output_throughput": math.log(1.6)}}
    assert cal.untimed_scores(fast, "output_throughput", base) == pytest.approx((0.25, 1.0))
    # a time (TPOT) 3x the simulated against own ends [0, log 2]: (1.5 - 0.5) / 0.5 = 2
    tpot = {"untimed_time_fraction": 0.5, "ratios": {"median_tpot_ms": math.log(3)}}
    assert cal.untimed_scores(tpot, "median_tpot_ms", [0.0, math.log(2)]) == pytest.approx(
        (1.0, 2.0)
    )


def test_untimed_factors_are_conformal_ranks_per_engine_by_hand():
    """(k10, k90): the lower scores' rank floor(0.1 (n + 1)), the upper's ceil(0.9 (n + 1));
    an engine's own pair where it has MIN_ENGINE_RUNS partial runs, else the pooled pair."""
    n = cal.MIN_ENGINE_RUNS  # 19: ranks 2 and 18
    own = _rows("own", [0.0] * 10)  # own ends [0, 0] (widened extremes of equal values)
    # vLLM runs at u = 0.5, measured/simulated time 1 + i / 20 (i = 0..18): each asks
    # k = (t - 0.5) / 0.5 = 1 + i / 10 above, nothing below
    vllm = _rows("partial", [math.log(1 + i / 20) for i in range(n)], untimed=0.5)
    sglang = _rows("partial", [math.log(5.0)] * 3, engine="sglang", untimed=0.5)
    doc = cal.build(own + [_as_time(r) for r in vllm + sglang])
    rule = doc["classes"]["partial"]["untimed_factor"]
    assert set(rule["engines"]) == {"vllm"} and rule["runs"] == n + 3
    # vLLM's 18th smallest upper score: 1 + 17 / 10; lower: 1 (no run faster than own)
    assert rule["engines"]["vllm"]["tpot"] == pytest.approx([1.0, 2.7])
    # pooled over 22 runs: ranks 2 and 21; the 3 SGLang runs ask (5 - 0.5) / 0.5 = 9
    assert rule["pooled"]["tpot"] == pytest.approx([1.0, 9.0])
    # a rate: throughput ratios are the inverse times, the same factors
    assert rule["engines"]["vllm"]["throughput"] == pytest.approx([1.0, 2.7])


def _as_time(row):
    """A row whose times are its value and whose throughput the inverse."""
    value = row["ratios"]["median_tpot_ms"]
    ratios = {m: (-value if m == "output_throughput" else value) for m in cal.FAMILY_OF_METRIC}
    return {**row, "ratios": ratios}


def test_a_runs_untimed_fraction_sets_its_partial_ends(monkeypatch):
    """Where the simulation gives the untimed fraction, a partial run's ends are the own ends
    widened by the engine's factors (pooled for an engine without its own); without it, the
    class's conformal ends; at no untimed time, the own ends."""
    doc = {
        "min_runs": 6,
        "workload_widen": 1.0,
        "classes": {
            "own": {"log_ratio": {f: [0.0, math.log(2)] for f in intervals.FAMILIES},
                    "workloads": {"random": 9}, "calibrated": True},
            "partial": {
                "log_ratio": {f: [-1.0, 2.0] for f in intervals.FAMILIES},
                "workloads": {"random": 9}, "calibrated": True,
                "untimed_factor": {
                    "pooled": {f: [0.5, 5.0] for f in intervals.FAMILIES},
                    "engines": {"vllm": {f: [0.5, 3.0] for f in intervals.FAMILIES}},
                    "runs": 30,
                },
            },
        },
    }  # fmt: skip
    monkeypatch.setattr(intervals, "table", lambda: doc)
    vllm = intervals.Untimed("vllm", 0.4)
    low, high = intervals.log_quantiles("partial", "tpot", "fixed", vllm)
    assert (low, high) == (pytest.approx(math.log(0.8)), pytest.approx(math.log(3.6)))
    # SGLang takes the pooled factors: slow end log 2 + log(0.6 + 2.0) = log 5.2
    low, high = intervals.log_quantiles(
        "partial", "tpot", "fixed", intervals.Untimed("sglang", 0.4)
    )
    assert high == pytest.approx(math.log(5.2))
    assert intervals.log_quantiles("partial", "tpot", "fixed") == (-1.0, 2.0)
    none = intervals.Untimed("vllm", 0.0)
    assert intervals.log_quantiles("partial", "tpot", "fixed", none) == (0.0, math.log(2))
    # the step scales follow: exp of the TPOT ends
    assert intervals.step_scales("partial", "fixed", vllm) == (
        pytest.approx(0.8),
        pytest.approx(3.6),
    )
    # a figure: the point times the ends; throughput's own ends [0, log 2] are time ends
    # [-log 2, 0]: the slow time end 0 + log(0.6 + 1.2), the fast -log 2 + log(0.6 + 0.2), so
    # 100 x (1 / 1.8 .. 2 / 0.8)
    low, high = intervals.interval(100.0, "output_throughput", "partial", "fixed", (), vllm)
    assert (low, high) == (pytest.approx(100 / 1.8), pytest.approx(250.0))


def test_simulate_stores_the_untimed_fraction_and_widens_by_it():
    """A gpt-oss run on an H100 (its mxfp4 fused MoE in no table: partial) keeps the fraction
    of its step time in those terms; a run on own tables has none."""
    from kvplan.simulate.setup import ServeOptions

    # vLLM before 0.11.1 runs Marlin's MXFP4 MoE on Hopper, which no row times
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=20, input_len=256, output_len=64, seed=0),
        rates=(math.inf,),
        serve=ServeOptions(vllm_version="0.10.2"),
    )
    result = simulate(load_model("openai/gpt-oss-20b"), load_profile("h100"), request)
    run = result.runs[0]
    fraction = run.engine.untimed_time_fraction
    assert 0.05 < fraction < 0.95
    evidence = dict(next(n for n in result.notes if n.id == "sim-interval").values)["evidence"]
    assert evidence.split("/")[0] == intervals.PARTIAL
    engine = run.engine
    untimed = intervals.Untimed(
        "vllm", fraction, engine.ttft_untimed_fraction, engine.frontend_request_fraction
    )
    q10, q90 = intervals.log_quantiles(evidence, "throughput", "fixed", untimed)
    low, high = run.bench_interval["output_throughput"]
    thr = run.bench.output_throughput
    assert (low, high) == (pytest.approx(thr * math.exp(q10)), pytest.approx(thr * math.exp(q90)))
    values = dict(next(n for n in result.notes if n.id == "sim-interval").values)
    assert values["untimed_fraction"] == pytest.approx(fraction)


def test_untimed_seconds_are_the_untimed_groups_share_of_the_gemms():
    """StepModel.untimed_s: with the fused MoE untimed, the GEMM terms times the experts'
    share of the GEMMs' seconds (gemm_parts_s); the whole step's terms where nothing is."""
    from kvplan.formulas.batch_step import BatchShape
    from kvplan.simulate.setup import ServeOptions, build_replica

    model = build_replica(
        load_model("openai/gpt-oss-20b"), load_profile("h100"), ServeOptions(vllm_version="0.10.2")
    ).model
    assert model.untimed_terms == frozenset({"experts"})
    step = model.step(BatchShape(8, 8 * 1000, (), 8))
    _, _, dense_s, expert_s = model.gemm_parts_s(8, 8)
    gemms = step.terms_s["weights_s"] + step.terms_s["matmul_s"]
    assert step.untimed_s == pytest.approx(gemms * expert_s / (dense_s + expert_s))
    assert 0 < step.untimed_s < step.total_s
    own = build_replica(load_model("llama-3.1-8b"), load_profile("h100"), ServeOptions()).model
    assert own.untimed_terms == frozenset()
    assert own.step(BatchShape(8, 8 * 1000, (), 8)).untimed_s == 0.0


def test_nesting_holds_the_partial_factors_at_full_share_for_the_engines_a_class_can_be():
    """A class that knows less holds the partial class's ends at u = 1 under every engine's
    factors; the untimed class (SGLang runs only) under SGLang's, here the pooled ones.
    vLLM's 19 partial runs at u = 0.5 and time 1 - i / 40 ask k = 1 - i / 20 below (its
    2nd smallest: 0.15); with 10 SGLang runs at time 1 the pooled 29 runs' 3rd smallest: 0.2."""
    n = cal.MIN_ENGINE_RUNS
    own = _rows("own", [0.0] * 10)
    vllm = _rows("partial", [math.log(1 - i / 40) for i in range(n)])
    sglang = _rows("partial", [0.0] * 10, engine="sglang")
    untimed = _rows(intervals.UNTIMED, [0.0] * 6, engine="sglang")
    doc = cal.build(own + [_as_time(r) for r in vllm + sglang] + untimed)
    rule = doc["classes"]["partial"]["untimed_factor"]
    assert rule["engines"]["vllm"]["tpot"][0] == pytest.approx(0.15)
    assert rule["pooled"]["tpot"][0] == pytest.approx(0.2)
    classes = doc["classes"]
    # own ends [0, 0]: the untimed class's TPOT low end is log 0.2, not vLLM's log 0.15
    assert classes[intervals.UNTIMED]["log_ratio"]["tpot"][0] == pytest.approx(math.log(0.2))
    assert classes["borrowed"]["log_ratio"]["tpot"][0] <= math.log(0.15) + 1e-12


def _ttft_doc(monkeypatch, factor):
    """The bundled table with the own class's TTFT ends [log 0.8, log 2] and `factor` on the
    TTFT's untimed costs (None: none)."""
    doc = intervals.table()
    own = {**doc["classes"]["own"], "log_ratio": {**doc["classes"]["own"]["log_ratio"]}}
    own["log_ratio"]["ttft"] = [math.log(0.8), math.log(2.0)]
    own.pop("ttft_untimed_factor", None)
    own.pop("ttft_untimed_factor_engines", None)
    if factor is not None:
        own["ttft_untimed_factor"] = list(factor)
    patched = {**doc, "classes": {**doc["classes"], "own": own}}
    monkeypatch.setattr(intervals, "table", lambda: patched)


def test_a_larger_ttft_untimed_share_widens_the_ttft_interval(monkeypatch):
    """TTFT factors (0.5, 3): a run whose TTFT is 40% launch/host/frontend constants takes
    [0.8 (0.6 + 0.4 * 0.5), 2 (0.6 + 0.4 * 3)] = [0.64, 3.6]; at 80%, [0.48, 5.2]; a TTFT
    the kernel tables time whole keeps the conformal ends [0.8, 2], as does a run whose share
    is unknown; TPOT and throughput are not touched by the TTFT share."""
    _ttft_doc(monkeypatch, (0.5, 3.0))

    def ends(share):
        untimed = None if share is None else intervals.Untimed("vllm", 0.0, share)
        low, high = intervals.log_quantiles("own", "ttft", "fixed", untimed)
        return math.exp(low), math.exp(high)

    assert ends(0.0) == (pytest.approx(0.8), pytest.approx(2.0))
    assert ends(None) == ends(0.0)
    assert ends(0.4) == (pytest.approx(0.64), pytest.approx(3.6))
    assert ends(0.8) == (pytest.approx(0.48), pytest.approx(5.2))
    tpot = intervals.log_quantiles("own", "tpot", "fixed", intervals.Untimed("vllm", 0.0, 0.8))
    assert tpot == pytest.approx(tuple(intervals.table()["classes"]["own"]["log_ratio"]["tpot"]))
    # without factors in the file, the share changes nothing
    _ttft_doc(monkeypatch, None)
    assert ends(0.8) == (pytest.approx(0.8), pytest.approx(2.0))


def test_the_ttft_share_widens_a_simulated_runs_interval(monkeypatch):
    """simulate passes each run's TTFT untimed fraction to its interval: a lone short prefill
    at one request at a time (a TTFT mostly launch and host constants and the API server's
    request cost) gets a wider TTFT interval than the conformal ends alone give it."""
    _ttft_doc(monkeypatch, (0.5, 3.0))
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=8, input_len=64, output_len=16),
        max_concurrency=1,
    )
    result = simulate(load_model("llama-3.1-8b"), load_profile("h100"), request)
    run = result.runs[0]
    share = run.engine.ttft_untimed_fraction
    assert 0.3 < share < 1.0  # 64 tokens: the kernels are a small part of the prefill
    low, high = run.bench_interval["median_ttft_ms"]
    ttft = run.bench.median_ttft_ms
    assert low == pytest.approx(ttft * 0.8 * (1 - share + share * 0.5), rel=1e-6)
    assert high >= ttft * 2.0 * (1 - share + share * 3.0) * (1 - 1e-6)


def test_ttft_untimed_factor_weights_runs_by_their_share():
    """Twenty own runs at log ratio 0 but two at 0.5x the simulated TTFT. Each slow run left
    out sees one slow run among 19: the 2nd lowest (rank floor(0.1 * 20) = 2) is 0, so it
    misses low, asking k = (0.5 - 1 + s) / s. Unweighted, 2 of 20 is the 10% the conformal
    ends allow. Where the two are among ten lone prefills (TTFT untimed share 0.8) and ten
    queues (0.05), they hold 1.6 of the summed shares 8.5, over TAIL of it (0.85): k10 =
    (0.5 - 0.2) / 0.8 = 0.375. Where they are queues and the rest lone prefills, they hold 0.1
    of 14.5: no factor."""

    def rows(shares):  # the first two runs are the slow ones
        out = _rows("own", [math.log(0.5)] * 2 + [0.0] * 18)
        return [{**r, "ttft_untimed_fraction": u} for r, u in zip(out, shares, strict=True)]

    lone_slow = [0.8] * 10 + [0.05] * 10
    assert cal.untimed_cost_factor(rows(lone_slow)) == [pytest.approx(0.375), 1.0]
    queues_slow = [0.05] * 2 + [0.8] * 18
    assert cal.untimed_cost_factor(rows(queues_slow)) == [1.0, 1.0]
    # no run with an untimed share: no factor
    assert cal.untimed_cost_factor(rows([0.0] * 20)) == [1.0, 1.0]


def test_throughput_cost_factor_weights_bursts_by_their_request_share():
    """Twenty own runs at log ratio 0 but two at 0.5x the simulated throughput (their duration
    2x). Where the two are bursts of short requests (request share 1: the API server's
    per-request cost paid in turn is the whole simulated duration) among ten such and ten runs
    at share 0.01, they hold 2 of the summed shares 10.1, over TAIL of it: each asks for
    k = (2 - 1 + 1) / 1 = 2 on the API server's cost, k90 = 2. Where the slow two are the runs
    at share 0.01, they hold 0.02: no factor."""

    def rows(shares):  # the first two runs are the slow ones
        out = _rows("own", [math.log(0.5)] * 2 + [0.0] * 18)
        return [{**r, "request_fraction": u} for r, u in zip(out, shares, strict=True)]

    bursts_slow = [1.0] * 10 + [0.01] * 10
    assert cal.untimed_cost_factor(rows(bursts_slow), "throughput") == [1.0, pytest.approx(2.0)]
    steady_slow = [0.01] * 2 + [1.0] * 18
    assert cal.untimed_cost_factor(rows(steady_slow), "throughput") == [1.0, 1.0]


def test_an_engines_ttft_factor_is_scored_against_the_pooled_ends():
    """Own runs of two engines, each MIN_ENGINE_RUNS: the SGLang runs at 0.5x the simulated
    TTFT where their TTFT is mostly constants (share 0.8), the vLLM runs at 1x. The class's
    ends are pooled over both engines; SGLang's own factor is scored against them (its runs
    ask for a lower k), vLLM's asks for none, and the pooled factor lies between."""
    n = cal.MIN_ENGINE_RUNS
    sglang = [
        {**r, "ttft_untimed_fraction": 0.8}
        for r in _rows("own", [math.log(0.5)] * 3 + [0.0] * (n - 3), engine="sglang")
    ]
    vllm = [{**r, "ttft_untimed_fraction": 0.8} for r in _rows("own", [0.0] * n)]
    doc = cal.build(sglang + vllm)
    own = doc["classes"]["own"]
    by_engine = own["ttft_untimed_factor_engines"]
    assert by_engine["vllm"] == [1.0, 1.0]
    # the slow SGLang runs, left out, meet the pooled ends' low end 0 (3 of 2n below): k from
    # 0.5 = 0.2 + 0.8 k
    assert by_engine["sglang"][0] == pytest.approx(0.375)
    assert by_engine["sglang"][0] <= own["ttft_untimed_factor"][0] <= 1.0
    # the interval of an SGLang run takes SGLang's factor, a vLLM run vLLM's
    assert intervals.cost_factor(own, "ttft", "sglang") == tuple(by_engine["sglang"])
    assert intervals.cost_factor(own, "ttft", "vllm") == tuple(by_engine["vllm"])
    assert intervals.cost_factor(own, "ttft", "trtllm") == tuple(own["ttft_untimed_factor"])
    # fewer runs of an engine: pooled only
    few = cal.build(sglang[: n - 1] + vllm[: n - 1])["classes"]["own"]
    assert "ttft_untimed_factor_engines" not in few


def _throughput_doc(monkeypatch, factor):
    """The bundled table with the own class's throughput ends [log 0.6, log 1.2] and `factor`
    on the API server's per-request cost paid in turn."""
    doc = intervals.table()
    own = {**doc["classes"]["own"], "log_ratio": {**doc["classes"]["own"]["log_ratio"]}}
    own["log_ratio"]["throughput"] = [math.log(0.6), math.log(1.2)]
    own["throughput_untimed_factor"] = list(factor)
    patched = {**doc, "classes": {**doc["classes"], "own": own}}
    monkeypatch.setattr(intervals, "table", lambda: patched)


def test_a_larger_request_share_widens_the_throughput_interval(monkeypatch):
    """Throughput factor (1, 3) on the API server's per-request cost: a run whose duration is
    half that cost paid in turn (r = 0.5) takes [0.6 / (0.5 + 0.5 * 3), 1.2] = [0.3, 1.2]; a
    burst that is all of it (r = 1), [0.2, 1.2]; a run with none (r = 0) keeps the conformal
    ends, and TTFT and TPOT are not touched by r."""
    _throughput_doc(monkeypatch, (1.0, 3.0))

    def ends(r):
        untimed = intervals.Untimed("vllm", 0.0, 0.0, r)
        low, high = intervals.log_quantiles("own", "throughput", "fixed", untimed)
        return math.exp(low), math.exp(high)

    assert ends(0.0) == (pytest.approx(0.6), pytest.approx(1.2))
    assert ends(0.5) == (pytest.approx(0.3), pytest.approx(1.2))
    assert ends(1.0) == (pytest.approx(0.2), pytest.approx(1.2))
    for family in ("ttft", "tpot"):
        plain = intervals.log_quantiles("own", family, "fixed", intervals.Untimed("vllm", 0.0))
        wide = intervals.log_quantiles("own", family, "fixed", intervals.Untimed("vllm", 0, 0, 1))
        assert wide == pytest.approx(plain)


def test_frontend_request_fraction_by_hand():
    """1,000 requests at 15.563 ms each on a 10 s run: 15.6 s, capped at the whole run; 100 at
    10 ms on 10 s: 0.1; an empty run: 0."""
    from kvplan.simulate.metrics import frontend_request_fraction

    assert frontend_request_fraction(1000, 15.563e-3, 10.0) == 1.0
    assert frontend_request_fraction(100, 10e-3, 10.0) == pytest.approx(0.1)
    assert frontend_request_fraction(0, 10e-3, 0.0) == 0.0


def test_a_burst_of_short_requests_has_a_larger_request_share():
    """simulate gives each run its request share: 64 short requests sent at once rest on the
    API server's per-request cost more than 8 long ones sent one at a time."""
    spec, gpu = load_model("llama-3.1-8b"), load_profile("h100")

    def share(request):
        (run,) = simulate(spec, gpu, request).runs
        return run.engine.frontend_request_fraction

    burst = SimulateRequest(workload=WorkloadSpec(num_prompts=64, input_len=128, output_len=4))
    lone = SimulateRequest(
        workload=WorkloadSpec(num_prompts=8, input_len=2048, output_len=256), max_concurrency=1
    )
    assert share(burst) > 10 * share(lone) > 0.0


def test_weighted_tail_by_hand():
    """Ascending scores 0.2 (weight 1), 0.5 (weight 1), 0.9 (weight 8): with 1.5 allowed the
    first run may be left out (1 <= 1.5), the second not (2 > 1.5): k = 0.5; with 0.5
    allowed, none: k = 0.2; with everything allowed, the bound."""
    scores = [(0.9, 8.0), (0.2, 1.0), (0.5, 1.0)]
    assert cal._weighted_tail(scores, 1.5, 1.0) == 0.5
    assert cal._weighted_tail(scores, 0.5, 1.0) == 0.2
    assert cal._weighted_tail(scores, 10.0, 1.0) == 1.0


def test_ttft_untimed_fraction_by_hand():
    """A 100 ms TTFT with a 15 ms API-server request cost, on engines whose prefill steps spent
    2 of their 8 s in launch and host constants: (15 + 0.25 * 85) / 100 = 0.3625; no prefill
    steps: the request cost's share alone; no TTFT: 0."""
    from types import SimpleNamespace

    from kvplan.simulate.metrics import ttft_untimed_fraction

    engines = [
        SimpleNamespace(prefill_busy_s=5.0, prefill_fixed_s=1.5),
        SimpleNamespace(prefill_busy_s=3.0, prefill_fixed_s=0.5),
    ]
    assert ttft_untimed_fraction(engines, 0.1, 0.015) == pytest.approx(0.3625)
    idle = [SimpleNamespace(prefill_busy_s=0.0, prefill_fixed_s=0.0)]
    assert ttft_untimed_fraction(idle, 0.1, 0.015) == pytest.approx(0.15)
    assert ttft_untimed_fraction(engines, None, 0.015) == 0.0
    # a TTFT shorter than the request cost is all of it
    assert ttft_untimed_fraction(engines, 0.01, 0.015) == 1.0


def test_the_ttft_untimed_share_counts_the_host_time_on_the_critical_path():
    """A prefill step of 5 ms on the GPU (1 ms of it launches, 4 ms weights) with 3 ms of host
    work. Run serially its total is 8 ms and 1 + 3 = 4 ms of it is fixed: a 0.5 share. Under
    async scheduling its total is max(5, 3) = 5 ms, the host work hidden behind the GPU's: only
    the 1 ms of launches counts, 0.2 (not (1 + 3) / 5 = 0.8). With 7 ms of host work the async
    total is 7 ms, 2 ms of it host time past the GPU's: (1 + 2) / 7."""
    from kvplan.formulas.batch_step import critical_fixed_s, engine_step_time
    from kvplan.simulate.metrics import ttft_untimed_fraction

    from helpers import run_by_hand

    def step(host_s: float, overlapped: bool):
        total_s = max(5e-3, host_s) if overlapped else 5e-3 + host_s
        return engine_step_time(4e-3, 0.0, 0.0, 0.0, 0.0, 0.0, 1e-3, host_s, total_s)

    assert critical_fixed_s(step(3e-3, False)) == pytest.approx(4e-3)
    assert critical_fixed_s(step(3e-3, True)) == pytest.approx(1e-3)
    assert critical_fixed_s(step(7e-3, True)) == pytest.approx(3e-3)

    class Steps:  # every step the one above
        def __init__(self, host_s: float, overlapped: bool):
            self.timing = step(host_s, overlapped)

        def step(self, shape, *args, **kwargs):
            return self.timing

    for host_s, overlapped, share in ((3e-3, False, 0.5), (3e-3, True, 0.2), (7e-3, True, 3 / 7)):
        # one request of 100 prompt tokens and one output: its one step, which samples it
        engine, _ = run_by_hand(
            [(0, 100, 1)], None, Steps(host_s, overlapped), async_scheduling=overlapped
        )
        assert engine.prefill_busy_s == pytest.approx(step(host_s, overlapped).total_s)
        # a TTFT of that step alone, no API-server cost: the step's own share
        ttft_s = engine.prefill_busy_s
        assert ttft_untimed_fraction([engine], ttft_s, 0.0) == pytest.approx(share)


def test_the_confidence_note_shows_the_range_of_rate_factors_used():
    from kvplan.notes import note
    from kvplan.present.notes import note_text

    one = note_text(note("plan-confidence", confidence=0.9, gpus=(("A100", "own", 1.5, 1.5),)))
    assert "taken as 1.50x slower" in one and "untimed share" not in one
    spread = (("A100", "partial", 3.2, 4.9),)
    text = note_text(note("plan-confidence", confidence=0.9, gpus=spread))
    assert "taken as 3.20-4.90x (by each configuration's untimed share) slower" in text


def test_a_model_sglang_serves_on_its_transformers_backend_takes_the_untimed_class():
    """SGLang serves an architecture no release registers (SmolLM3, bundled) on its
    Transformers backend, whose model code kvplan does not time: its runs take the untimed
    class under SGLang on every GPU, and their kernel tables' class under vLLM; a model SGLang
    has its own code for keeps its tables' class."""
    smol, qwen = load_model("smollm3-3b"), load_model("qwen3-8b")
    for gpu in ("h100", "b200", "mi300x"):
        profile = load_profile(gpu)
        assert intervals.raw_class(profile, "sglang", smol) == intervals.UNTIMED
        assert intervals.raw_class(profile, "vllm", smol) == intervals.raw_class(profile, "vllm")
        assert intervals.raw_class(profile, "sglang", qwen) == intervals.raw_class(
            profile, "sglang"
        )
