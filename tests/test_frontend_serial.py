"""The API server's serial part (issue 34, SGLang TTFT under a burst): SGLang parses, templates,
tokenizes and hands each request to the scheduler in one process, so a burst reaches the engine
one `serial_request_s` apart; alone, a request still takes `request_s`."""

from __future__ import annotations

import json

import pytest

from kvplan.dtypes import KvFormat
from kvplan.engines.context_limit import ContextLimit
from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.step_time import Rates
from kvplan.inputs.kernel_tables import FOLDER, frontend_data
from kvplan.inputs.sources import load_model
from kvplan.plans.simulate import SimulateRequest, served_by
from kvplan.simulate import cluster
from kvplan.simulate.engine import Engine, EngineConfig
from kvplan.simulate.frontend import Frontend
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import RequestSpec

MODEL = StepModel(load_model("llama-3.1-8b"), Rates(3.35e12, 989.4e12), "bf16", KvFormat("bf16"))
CONFIG = EngineConfig(
    max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=4096, num_blocks=4096,
    block_size=16,
)  # fmt: skip


def test_served_s_alone_is_request_s_and_a_burst_queues_on_the_serial_part():
    frontend = Frontend(request_s=0.010, per_token_s=0.0, serial_request_s=0.004)
    # alone: 10 ms, the serial part inside it
    assert frontend.served_s(1.0, 0.0) == pytest.approx(1.010)
    # three sent at 0: the process takes them in turn, 4 ms each, the first done at 10 ms
    free = 0.0
    served = []
    for _ in range(3):
        free = frontend.served_s(0.0, free)
        served.append(free)
    assert served == pytest.approx([0.010, 0.014, 0.018])
    # no serial part: every one 10 ms after it was sent
    assert Frontend(0.010, 0.0).served_s(0.0, 0.5) == pytest.approx(0.010)


def arrivals(frontend: Frontend, engines: int, requests: list[RequestSpec]) -> list[float]:
    fleet = [Engine(CONFIG, MODEL, 0.0) for _ in range(engines)]
    run = cluster.run(requests, fleet, frontend=frontend, context=ContextLimit(4096))
    return sorted(r.arrival_s for r in run.finished)


def test_a_burst_reaches_one_server_one_serial_part_apart():
    burst = [RequestSpec(i, 0.0, 32, 2) for i in range(4)]
    frontend = Frontend(request_s=0.010, per_token_s=0.0, serial_request_s=0.004)
    assert arrivals(frontend, 1, burst) == pytest.approx([0.010, 0.014, 0.018, 0.022])
    # two replicas, two server processes: two requests in each one's turn
    assert arrivals(frontend, 2, burst) == pytest.approx([0.010, 0.010, 0.014, 0.014])
    # without a serial part the burst arrives together (the cost each request pays alone)
    assert arrivals(Frontend(0.010, 0.0), 1, burst) == pytest.approx([0.010] * 4)


def test_spaced_requests_never_wait_for_the_server():
    spaced = [RequestSpec(i, 0.5 * i, 32, 2) for i in range(3)]
    frontend = Frontend(request_s=0.010, per_token_s=0.0, serial_request_s=0.004)
    assert arrivals(frontend, 1, spaced) == pytest.approx([0.010, 0.510, 1.010])


def test_sglang_gets_the_timed_serial_part_and_vllm_none():
    sglang = served_by(SimulateRequest(serve=ServeOptions(engine="sglang")))
    assert sglang.serial_request_s == frontend_data().serial_request_s
    assert 0.0 < sglang.serial_request_s < sglang.request_s
    assert served_by(SimulateRequest()).serial_request_s == 0.0
    # one given stays as given
    given = Frontend(serial_request_s=0.002)
    request = SimulateRequest(serve=ServeOptions(engine="sglang"), frontend=given)
    assert served_by(request) == given


def test_the_timed_frontend_data_says_where_it_comes_from():
    doc = json.loads((FOLDER / "sglang_frontend.json").read_text(encoding="utf-8"))
    for key in ("source", "derived_by", "cpu", "transformers", "sglang"):
        assert doc[key]
    parts = doc["per_request_us"]
    assert set(parts) == {"json", "validate", "chat_template", "pickle"}
    # the total is the median burst's sum of the parts: near the sum of their medians
    assert doc["serial_request_us"] == pytest.approx(sum(parts.values()), rel=0.2)
    low, high = doc["serial_request_us_spread"]
    assert low <= doc["serial_request_us"] <= high


def arrival_gaps(monkeypatch, run) -> list[float]:
    """The gaps between the requests' engine arrivals (after their dispatch, in order) of the
    one cluster.run that `run` makes (the real one, watched)."""
    seen: list[list[float]] = []
    real = cluster.run

    def watched(requests, engines, **kwargs):
        out = real(requests, engines, **kwargs)
        seen.append(sorted(r.arrival_s - r.dispatch_s for r in out.finished))
        return out

    monkeypatch.setattr(cluster, "run", watched)
    run()
    assert len(seen) == 1
    served = seen[0]
    return [served[i + 1] - served[i] for i in range(len(served) - 1)]


@pytest.mark.parametrize("dp", [1, 2])
def test_sglang_dp_ranks_share_the_one_api_server(monkeypatch, dp):
    """SGLang's --dp-size launches one DataParallelController behind the one TokenizerManager
    of the HTTP server process (entrypoints/engine.py _launch_subprocesses): a burst reaches
    the ranks one serial part apart, as it reaches a single rank."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.plans.simulate import simulate
    from kvplan.simulate.workload import WorkloadSpec

    spec, gpu = load_model("llama-3.1-8b", checkpoint=False), load_profile("h100")
    request = SimulateRequest(
        workload=WorkloadSpec(num_prompts=6, input_len=64, output_len=4),
        serve=ServeOptions(engine="sglang", data_parallel_size=dp),
        series=False,
    )
    gaps = arrival_gaps(monkeypatch, lambda: simulate(spec, gpu, request))
    assert gaps == pytest.approx([frontend_data().serial_request_s] * 5, rel=1e-6)


def test_plan_prices_sglangs_serial_api_server_as_simulate_does(monkeypatch):
    """plan --emit sglang runs each configuration with the front end simulate has (served_by):
    a burst reaches the engine one serial part apart."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.plans import plan
    from kvplan.simulate.setup import build_replica
    from kvplan.simulate.workload import WorkloadSpec

    spec, gpu = load_model("llama-3.1-8b", checkpoint=False), load_profile("h100")
    replica = build_replica(spec, gpu, ServeOptions(engine="sglang"))
    request = plan.PlanRequest(
        rate=1.0, slos=(), emit="sglang", workload=WorkloadSpec(num_prompts=6)
    )
    burst = [RequestSpec(i, 0.0, 64, 4) for i in range(6)]
    gaps = arrival_gaps(monkeypatch, lambda: plan._run(replica, burst, request, 1.0))
    assert gaps == pytest.approx([frontend_data().serial_request_s] * 5, rel=1e-6)
