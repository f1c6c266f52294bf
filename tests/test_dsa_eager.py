"""SGLang's DSA decode module outside a CUDA graph (kvplan/data/kernel_tables/dsa_eager,
scripts/derive_achieved.py --write-dsa-eager): a decode batch above the server's
cuda_graph_max_bs runs the module eagerly, which aiconfigurator's collector times as such; the
step charges its eager time over its graph time, by hand from the file's rows."""

from __future__ import annotations

import json
import statistics

import pytest

from kvplan.formulas.batch_step import MLA_ATTENTION_LAUNCHES, BatchShape, run_untimed_parts
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.kernel_tables import DSA_EAGER_FOLDER, tables_for
from kvplan.inputs.sources import load_model
from kvplan.simulate.setup import ServeOptions, build_replica

H200_ROWS = DSA_EAGER_FOLDER / "h200_sxm.sglang.0.5.14.json"
STAND_IN = "the DSA module's decode outside a CUDA graph (SGLang 0.5.14's eager rows stand in)"


def _model(version: str, gpu: str = "h200"):
    spec = load_model("deepseek-ai/DeepSeek-V3.2", checkpoint=False)
    options = ServeOptions(engine="sglang", tp=8, sglang_version=version)
    return build_replica(spec, load_profile(gpu), options).model


@pytest.fixture(scope="module")
def h200_0562():
    return _model("0.5.6.post2")


def _pairs(module: dict, kind: str, batch: int) -> dict:
    return dict(module[kind][str(batch)])


def test_the_files_eager_batches_are_above_their_graph_ones_and_slower():
    """Every dsa_eager file's eager batches lie above its graph batches, and the first eager
    batch's median module time (<= 256 tokens held) is at least 3x (DSA_EAGER_JUMP) the
    largest graph batch's: the rows the collector timed without a CUDA graph, not a kernel's
    growth."""
    files = sorted(DSA_EAGER_FOLDER.glob("*.json"))
    assert files
    for path in files:
        doc = json.loads(path.read_text())
        assert min(doc["eager_batches"]) > max(doc["graph_batches"]), path.name
        assert doc["source"] and doc["derived_by"] and doc["version"]
        largest, first = str(max(doc["graph_batches"])), str(min(doc["eager_batches"]))
        graph = [us for m in doc["modules"] for x, us in m["graph"][largest] if x <= 256]
        eager = [us for m in doc["modules"] for x, us in m["eager"][first] if x <= 256]
        assert statistics.median(eager) >= 3 * statistics.median(graph), path.name


@pytest.mark.parametrize(
    "version, stand_in",
    [
        ("0.5.6.post2", "0.5.14"),  # an earlier release: 0.5.14's rows stand in
        ("0.5.9", "0.5.14"),
        ("0.5.14", None),  # the rows' own release
        ("0.5.15", None),  # a later patch runs what they timed
        ("0.5", None),  # a bare release: the newest kvplan models
        ("0.4.6", "0.5.14"),
    ],
)
def test_the_release_gate(version, stand_in):
    """The eager rows are the run's own where its tables are of their release (the run's
    release, a later patch or a bare release), and stand in (an untimed part) for another
    release's tables: the rule the DSA module grids' baseline follows (dsa_delta_us)."""
    tables = tables_for(load_profile("h200"), "sglang", version)
    rows = tables.dsa_eager
    assert rows is not None and rows.engine_version == "0.5.14"
    assert rows.stands_in_from == stand_in
    assert (stand_in is None) == (tables.engine_version == "0.5.14")


def test_an_eager_decode_step_charges_the_eager_excess_by_hand(h200_0562):
    """1,024 decodes of 256 tokens held on an H200, SGLang 0.5.6.post2, TP8 (16 heads a rank,
    bf16 cache: a cell of the file, no interpolation): each of the 61 DSA layers pays the
    module's eager time less its graph time at 1,024 (256's plus 768 sequences at what each
    did between 128 and 256), less the 10 eager launches the step already counts for an MLA
    attention, at the measured host cost a launch."""
    m = h200_0562
    assert m.cuda_graph_max_tokens == 512
    module = next(
        g
        for g in json.loads(H200_ROWS.read_text())["modules"]
        if g["heads"] == 16 and g["kv_dtype"] == "bfloat16"
    )
    eager_us = _pairs(module, "eager", 1024)[256]
    small_us, large_us = _pairs(module, "graph", 128)[256], _pairs(module, "graph", 256)[256]
    graph_us = large_us + (1024 - 256) * (large_us - small_us) / (256 - 128)
    assert MLA_ATTENTION_LAUNCHES == 10
    per_layer_s = (eager_us - graph_us) * 1e-6 - 10 * m.host.eager_per_launch_s
    assert per_layer_s > 0
    shape = BatchShape(num_decodes=1024, decode_context_sum=1024 * 256, num_sampled=1024)
    assert m.dsa_eager_s(shape) == pytest.approx(61 * per_layer_s, rel=1e-9)
    # the step's launch term holds it on top of the eager launches
    step = m.step(shape)
    bare = _model("0.5.6.post2")
    bare.dsa_eager = None
    assert step.terms_s["launch_s"] - bare.step(shape).terms_s["launch_s"] == pytest.approx(
        61 * per_layer_s, rel=1e-9
    )


@pytest.mark.parametrize(
    "shape, queries",
    [
        (BatchShape(num_decodes=512, decode_context_sum=512 * 256, num_sampled=512), 1),
        (BatchShape(num_decodes=1024, decode_context_sum=1024 * 256, num_sampled=1024), 2),
        (
            BatchShape(
                num_decodes=1000,
                decode_context_sum=1000 * 256,
                prefill_chunks=((600, 0),),
                num_sampled=1001,
            ),
            1,
        ),
    ],
    ids=["graphed", "verify", "with-prefill"],
)
def test_no_charge_in_a_graph_a_verification_or_beside_a_prefill(h200_0562, shape, queries):
    """512 decodes replay a graph; a verification runs several queries a sequence and a step
    with a prefill chunk is an extend: the eager rows time neither."""
    assert h200_0562.dsa_eager_s(shape, queries) == 0.0


def test_below_the_graph_batches_the_graph_time_is_the_smallers(h200_0562):
    """An eager step of 16 decodes (a DP-attention rank beside another's prefill) takes the
    graph time of the smaller graph-timed batch (128), not a line extrapolated below it."""
    module = next(
        g
        for g in json.loads(H200_ROWS.read_text())["modules"]
        if g["heads"] == 16 and g["kv_dtype"] == "bfloat16"
    )
    eager_us = _pairs(module, "eager", 512)[256]  # flat below the smallest eager batch
    graph_us = _pairs(module, "graph", 128)[256]
    assert h200_0562.dsa_eager.excess_s(16, 256) == pytest.approx(
        (eager_us - graph_us) * 1e-6, rel=1e-9
    )


def test_the_stand_in_is_named_once_a_step_charged_it():
    """A 0.5.6.post2 run names 0.5.14's eager rows as an untimed part only once a step ran
    eagerly; a 0.5.14 run charges the same rows as its own and names nothing new."""
    eager = BatchShape(num_decodes=1024, decode_context_sum=1024 * 256, num_sampled=1024)
    graphed = BatchShape(num_decodes=8, decode_context_sum=8 * 256, num_sampled=8)
    old = _model("0.5.6.post2")
    assert old.dsa_eager_stand_in_part == STAND_IN
    assert STAND_IN not in old.untimed_parts  # the model's own: no run's
    graphed_step = old.step(graphed)
    assert graphed_step.stand_in_launch_s == 0.0
    assert STAND_IN not in run_untimed_parts(old, graphed_step.stand_in_launch_s)
    step = old.step(eager)
    assert step.stand_in_launch_s == pytest.approx(old.dsa_eager_s(eager), rel=1e-12)
    assert step.stand_in_launch_s > 0
    assert run_untimed_parts(old, step.stand_in_launch_s) == (*old.untimed_parts, STAND_IN)
    assert step.untimed_s >= step.stand_in_launch_s
    # pricing names nothing by itself: the graphed step's parts are still without it
    assert STAND_IN not in run_untimed_parts(old, old.step(graphed).stand_in_launch_s)
    own = _model("0.5.14")
    assert own.dsa_eager_s(eager) > 0
    own_step = own.step(eager)
    assert own_step.stand_in_launch_s == 0.0 and own.dsa_eager_stand_in_part is None
    assert not any("eager rows" in part for part in run_untimed_parts(own, 1.0))
