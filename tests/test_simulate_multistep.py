"""vLLM V0's multi-step scheduling (--num-scheduler-steps N, --engine-version 0.6 to 0.8) in
kvplan simulate: decode-only steps pay 1/N of the host time, and while decodes run a request is
admitted only every N decode steps — worked by hand."""

from __future__ import annotations

import pytest

from kvplan.cli.common import load_gpu, load_model
from kvplan.formulas.batch_step import HOST_OVERHEADS, BatchShape
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import run_by_hand, run_cli


def test_decode_steps_pay_a_share_of_the_host_time():
    spec, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    options = ServeOptions(vllm_version="0.7", async_scheduling=False)
    one = build_replica(spec, gpu, options).model
    eight = build_replica(spec, gpu, options._replace(num_scheduler_steps=8)).model
    host = HOST_OVERHEADS.per_step_s + 16 * HOST_OVERHEADS.per_request_s
    decodes = BatchShape(16, 16 * 1000, (), 16)
    assert one.step(decodes).terms_s["host_s"] == pytest.approx(host)
    assert eight.step(decodes).terms_s["host_s"] == pytest.approx(host / 8)
    assert one.step(decodes).total_s - eight.step(decodes).total_s == pytest.approx(host * 7 / 8)
    mixed = BatchShape(16, 16 * 1000, ((256, 0),), 17)  # a prefill chunk: scheduled in full
    assert eight.step(mixed).terms_s["host_s"] == one.step(mixed).terms_s["host_s"]


def _first_chunk_step(scheduler_steps: int, arrival_step: int) -> int:
    """The decode step at which a second request's prompt is first scheduled, when it arrives
    after `arrival_step` steps of a first request decoding alone (steps of 1 s)."""
    seen = []

    def observe(engine, steps, num_decodes, chunks):
        for r, _ in chunks:
            if r.rid == 1:
                seen.append(engine.decode_index)

    knobs = {"max_num_batched_tokens": 256, "scheduler_steps": scheduler_steps}
    run_by_hand([(0, 8, 40), (arrival_step, 8, 5)], observe, **knobs)
    return seen[0]


@pytest.mark.parametrize("arrival", [5, 8, 9, 11])
def test_a_request_is_admitted_only_at_a_window_boundary(arrival):
    # alone, the first request's prefill is step 0 and its decodes steps 1, 2, ...; one
    # arriving after step `arrival` - 1 is scheduled at once without multi-step, and at the
    # next multiple of 4 with --num-scheduler-steps 4
    assert _first_chunk_step(1, arrival) == arrival
    assert _first_chunk_step(4, arrival) == -(-arrival // 4) * 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--num-scheduler-steps", "8"), "V0's (0.6-0.8)"),
        (("--num-scheduler-steps", "0", "--engine-version", "0.7"), "between 1 and 64"),
        (("--engine-version", "0.5"), "from 0.6"),
        (("--engine", "sglang", "--num-scheduler-steps", "4"), "SGLang has none"),
    ],
)
def test_bad_multi_step_input_is_one_line(args, message):
    code, out, err = run_cli(
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "4", *args
    )
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err
