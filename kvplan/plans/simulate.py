"""`kvplan simulate`: a discrete-event simulation of vLLM V1 serving a request stream, reported
with `vllm bench serve`'s fields so it can be put beside a real run.

The engine (kvplan.simulate.engine) schedules as vLLM V1 does, over the KV pool kvplan's vLLM
allocator model sizes, with prefix caching in kvplan.kernels' block manager; each step's time comes
from formulas.batch_step. Several request rates give the latency and throughput curve.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.dtypes import resolve_kv_format
from kvplan.engines.context_limit import ContextLimit
from kvplan.engines.sglang import (
    detokenizer_path,
    detokenizer_token_s,
    frontend_serial_request_s,
    gpt_oss_below_blackwell,
    gpt_oss_sm120_other_kernel,
    sglang_after_sm120_marlin,
)
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import run_untimed_parts
from kvplan.formulas.comm import kv_transfer_bytes, kv_transfer_time_s
from kvplan.inputs.hardware import GpuProfile, choose_link, with_interconnect
from kvplan.inputs.kernel_tables import detokenizer_data, frontend_data
from kvplan.inputs.published_accuracy import held_out_accuracy
from kvplan.notes import Note, note, unique
from kvplan.plans import intervals
from kvplan.plans.common import model_notes
from kvplan.record import NamedTuple
from kvplan.simulate import cluster, disagg, metrics
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import Engine, pool_demand, with_stand_in, without_idle_caching
from kvplan.simulate.setup import (
    ParallelLayout,
    Replica,
    ServeOptions,
    build_replica,
    make_engine,
    node_span,
    parallel_layout,
    with_step_scale,
)
from kvplan.simulate.steplog import StepRecorder
from kvplan.simulate.workload import (
    RequestSpec,
    WorkloadSpec,
    check_prefill_steps,
    check_work,
    generate,
    read_trace,
    workload_seed,
)
from kvplan.units import MS

MAX_RATES = 32
# the length laws whose spread (a range ratio or a sigma) the summary reports
SPREAD_DISTS = ("uniform", "lognormal", "vllm-random", "sglang-random")
# scheduling techniques a run can be compared with and without (kvplan whatif points here)
COMPARISONS = {
    "continuous-batching": "continuous_batching",
    "chunked-prefill": "enable_chunked_prefill",
    "preemption": "preemption",
    "prefix-caching": "enable_prefix_caching",
    "cache-aware-routing": None,  # the router, not a serve flag
}
MAX_REPLICAS = 1024
DOMINANT_SHARE = 0.15  # a term is named as dominant from this share of the engine's time


class SimulateRequest(NamedTuple):
    workload: WorkloadSpec = WorkloadSpec()
    rates: tuple[float, ...] = (math.inf,)  # one run per rate
    trace: str | None = None  # a JSONL trace instead of a generated workload
    max_concurrency: int | None = None
    serve: ServeOptions = ServeOptions()
    replicas: int = 1
    router: str = "round_robin"
    frontend: Frontend = Frontend()
    series: bool = True  # keep replica 0's KV usage and queue over time
    compare: str | None = None  # a COMPARISONS key: run again with the technique toggled
    # disaggregated prefill/decode: (prefill replicas, decode replicas), each of the TP/PP given,
    # the KV moved over `link` (interconnect or network) or a given network_gbps
    disaggregated: tuple[int, int] | None = None
    link: str = "network"
    network_gbps: float | None = None
    # keep replica 0's schedule step by step (SimulateResult.step_log; `--step-log FILE`)
    step_log: bool = False
    # a server reused across runs: every replica starts with the workload's shared prefixes
    # in its prefix cache (Engine.warm_prefixes)
    warm_prefix_cache: bool = False
    # the TP/PP link instead of the profile's: Gb/s per GPU per direction (PCIe between pods)
    interconnect_gbps: float | None = None


class Setup(NamedTuple):
    """The deployment as simulated, every default resolved."""

    gpu: str
    tp: int
    pp: int
    replicas: int
    num_gpus: int
    router: str
    prefill_replicas: int | None  # disaggregated: the prefill pool, the decode pool
    decode_replicas: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    num_blocks: int
    kv_cache_tokens: int
    kv_cache_dtype: str
    weights_dtype: str
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    preemption: bool
    continuous_batching: bool
    async_scheduling: bool
    engine: str = "vllm"  # the scheduler simulated: vllm or sglang
    # SGLang: the mem_fraction_static its pool was sized at (given, or SGLang's own default)
    mem_fraction_static: float | None = None
    # the TP/PP link priced (the profile's, or --interconnect-gbps's), None where there is none
    interconnect: str | None = None
    interconnect_bytes_per_s: float | None = None  # per GPU, both directions together
    # whose rules: the vLLM version, or the SGLang release kvplan knows that was applied
    engine_version: str | None = None
    # vLLM -dcp (1: off) and --enforce-eager / SGLang --disable-cuda-graph
    decode_context_parallel_size: int = 1
    enforce_eager: bool = False
    # a launch over several nodes (kvplan.simulate.setup.node_span): the nodes, GPUs on each,
    # and the inter-node link priced (kept out of the report's JSON at one node)
    nodes: int = 1
    node_gpus: int | None = None
    network: str | None = None
    network_bytes_per_s: float | None = None  # per GPU, both directions together
    # speculative decoding (kvplan.simulate.speculative): method, num_steps, topk,
    # verify_tokens, draft, tokens_per_round, acceptance, draft_weight_bytes (per GPU),
    # draft_kv_bytes_per_token (per GPU), launch (the engine's flags); None: none, and then kept
    # out of the report's JSON
    speculative: dict | None = None


class WorkloadSummary(NamedTuple):
    num_prompts: int
    source: str  # the length distribution, or the trace file
    input_len: int | None
    output_len: int | None
    spread: float | None
    prefix_len: int
    num_prefixes: int
    turns: int
    burstiness: float
    max_concurrency: int | None
    seed: int
    warm_prefix_cache: bool = False  # the shared prefixes cached before the first request


class Run(NamedTuple):
    bench: metrics.BenchResult
    engine: metrics.EngineStats  # disaggregated: the decode pool
    series: metrics.Series | None
    disaggregated: metrics.DisaggStats | None = None  # transfers and the prefill pool
    # every numeric bench key -> [10th, 90th percentile] of where a real run lands
    # (kvplan.plans.intervals); None for the runs of a --compare
    bench_interval: dict | None = None
    # the same run with every step time times the interval class's fast and slow step scales
    # (kvplan.plans.intervals.step_scales): {"step_scales": [fast, slow], key: [bench value at
    # the fast scale, at the slow]} for every numeric bench key; None where not run
    step_scaled: dict | None = None


class Comparison(NamedTuple):
    """The same workload with one scheduling technique toggled."""

    technique: str
    baseline_on: bool  # whether the main runs had the technique
    runs: list[Run]  # with it toggled, one per rate


class SimulateResult(NamedTuple):
    kvplan_version: str
    model: dict
    setup: Setup
    workload: WorkloadSummary
    runs: list[Run]
    dominant_terms: list[str]
    comparison: Comparison | None
    notes: tuple[Note, ...]
    # request.step_log: replica 0's schedule in kvplan.simulate.steplog's format, each step
    # with its start `t_s` (kept out of the report's JSON; `--step-log FILE` writes it)
    step_log: dict | None = None
    # expert parallelism / DP ranks (ParallelLayout._asdict() with its text); None: plain TP,
    # and then kept out of the report's JSON
    parallel: dict | None = None
    # the parts of the step no kernel table times (batch_step.run_untimed_parts): they decide the
    # interval class (kvplan.plans.intervals.raw_class) and the sim-interval note names them
    untimed_parts: tuple[str, ...] = ()
    # the parts of the step timed from another GPU's rows by a fitted ratio
    # (StepModel.borrowed_parts): they put the run in the borrowed interval class
    borrowed_parts: tuple[str, ...] = ()


def simulate(spec: ModelSpec, gpu: GpuProfile, request: SimulateRequest) -> SimulateResult:
    """The Python twin of `kvplan simulate MODEL`."""
    gpu = with_interconnect(gpu, request.interconnect_gbps)
    if not 1 <= request.replicas <= MAX_REPLICAS:
        raise KvplanError(f"--replicas must be between 1 and {MAX_REPLICAS:,}")
    if not request.rates or len(request.rates) > MAX_RATES:
        raise KvplanError(f"give between 1 and {MAX_RATES} request rates")
    if request.max_concurrency is not None and not 1 <= request.max_concurrency <= 1_000_000:
        raise KvplanError("--max-concurrency must be between 1 and 1,000,000")
    if request.router not in cluster.ROUTERS:
        raise KvplanError(f"--router {request.router!r}: choose {', '.join(cluster.ROUTERS)}")
    if request.compare is not None and request.compare not in COMPARISONS:
        raise KvplanError(f"--compare {request.compare!r}: choose {', '.join(COMPARISONS)}")
    spans = request.serve.nnodes != 1 or request.serve.data_parallel_size_local is not None
    if request.disaggregated is None and request.link != "network":
        raise KvplanError("--link prices the KV transfer of --disaggregated P:D")
    if request.disaggregated is None and request.network_gbps and not spans:
        raise KvplanError(
            "--network-gbps prices the KV transfer of --disaggregated P:D, or the link between "
            "the nodes of --nnodes / --data-parallel-size-local"
        )
    if request.network_gbps and spans:  # the cluster's own link between the launch's nodes
        gpu = gpu._replace(network=choose_link(gpu, "network", request.network_gbps))
    if request.disaggregated is not None:
        if request.replicas != 1:
            raise KvplanError("--disaggregated P:D sets the replicas: drop --replicas")
        if not all(1 <= n <= MAX_REPLICAS for n in request.disaggregated):
            raise KvplanError(f"--disaggregated P:D: each between 1 and {MAX_REPLICAS:,}")
    request, layout = _with_dp_ranks(spec, request)
    if request.step_log:
        _check_step_log(request)
    if request.warm_prefix_cache:
        _check_warm(request)
    if request.serve.engine == "sglang":
        if request.disaggregated is not None:
            raise KvplanError("--disaggregated is simulated for vLLM only; drop --engine sglang")
        if request.compare not in (None, "prefix-caching", "cache-aware-routing"):
            raise KvplanError(
                f"--compare {request.compare} toggles a vLLM option; with --engine sglang "
                "compare prefix-caching or cache-aware-routing"
            )
    requests, runs_asked = _requests(request, request.rates[0]), len(request.rates)
    runs_asked *= 1 + bool(request.compare)
    check_work(requests, runs_asked)
    replica = build_replica(spec, gpu, request.serve)
    _check_estimated_limit(replica, requests)
    check_prefill_steps(requests, [replica.config.max_num_batched_tokens] * runs_asked)
    if request.disaggregated is not None:
        replica = replica._replace(transfer=transfer_model(spec, gpu, replica, request))
    recorder = StepRecorder() if request.step_log else None
    runs, capped = _runs(replica, request, recorder)
    comparison = None
    if request.compare is not None:
        toggled, was_on = _toggled(request, replica)
        if request.compare == "cache-aware-routing" and request.replicas < 2:
            raise KvplanError("--compare cache-aware-routing needs --replicas 2 or more")
        other = build_replica(spec, gpu, toggled.serve)._replace(transfer=replica.transfer)
        comparison = Comparison(
            request.compare, was_on, _runs(other, toggled._replace(step_log=False))[0]
        )
    # the runs' untimed parts (another release's eager DSA rows where one of them charged them)
    stand_in = max(r.engine.stand_in_launch_fraction for r in runs)
    parts, borrowed = run_untimed_parts(replica.model, stand_in), replica.model.borrowed_parts
    evidence = intervals.evidence_for(gpu, request.serve.engine, spec, parts, borrowed)
    length_dist = request.workload.length_dist
    runs = _with_intervals(replica, request, runs, evidence)
    most_untimed = _most_untimed(request, runs)
    shares = runs[-1].engine.step_time_shares
    dominant = [k for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v >= DOMINANT_SHARE]
    notes = [
        *_failed_note(runs, replica.context),
        *model_notes(spec, request.serve.tp),
        *replica.notes,
        *(
            [note("sim-outputs-capped", requests=capped, limit=replica.config.max_model_len)]
            if capped
            else []
        ),
        *_engine_note(replica, request.serve.vllm_version),
        note("sim-step-terms", shares=tuple(sorted(shares.items(), key=lambda kv: -kv[1])[:4])),
        *_weak_spots(spec, runs, request, gpu),
        note(
            "sim-interval",
            evidence=evidence,
            parts=parts,
            calibrated=intervals.calibrated(evidence),
            widen=intervals.transfer_widen(evidence, length_dist),
            scales=intervals.step_scales(evidence, length_dist, most_untimed),
            untimed_fraction=most_untimed.time_fraction
            if intervals.untimed_factors(evidence, request.serve.engine) is not None
            else None,
            propagated=intervals.propagated_families(),
        ),
    ]
    if layout is not None:
        notes.append(_layout_note(spec, layout, request.serve.engine, request.serve))
    o = replica.options
    if o.engine == "sglang" and o.enable_dp_attention and o.data_parallel_size < 2:
        notes.append(note("sim-dp-attention-off", tp=o.tp))
    if request.disaggregated is not None:
        t = replica.transfer
        assert t is not None, "a disaggregated replica has its transfer model"
        notes.append(
            note(
                "sim-disaggregated",
                link=t.link,
                one_way_bytes_per_s=t.one_way_bytes_per_s,
                latency_s=t.latency_s,
                ranks=request.serve.tp * request.serve.pp,
            )
        )
    return SimulateResult(
        kvplan_version=__version__,
        model={"name": spec.name, "hf_id": spec.hf_id},
        setup=_setup(gpu, replica, request),
        workload=_workload(request),
        runs=runs,
        dominant_terms=dominant,
        comparison=comparison,
        notes=unique(notes),
        step_log=None if recorder is None else _step_log(spec, request, recorder),
        parallel=None if layout is None else {**layout._asdict(), "text": layout.text},
        untimed_parts=parts,
        borrowed_parts=borrowed,
    )


def _most_untimed(request: SimulateRequest, runs: list[Run]) -> intervals.Untimed:
    """The untimed fraction of the run with the most (its step scales rerun every rate)."""
    fraction = max(r.engine.untimed_time_fraction for r in runs)
    return intervals.Untimed(request.serve.engine, fraction)


def _with_intervals(
    replica: Replica, request: SimulateRequest, runs: list[Run], evidence: str
) -> list[Run]:
    """Each run with its 80% interval (intervals.bench_interval): the class's conformal ends
    and, propagated through the simulation, the same workload rerun with every step time at
    the class's fast and slow step scales (intervals.step_scales; with_step_scale)."""
    length_dist = request.workload.length_dist
    untimed = [intervals.run_untimed(request.serve.engine, r.engine) for r in runs]
    # one rerun at the step scales for every rate: those of the run with most untimed time
    scales = intervals.step_scales(evidence, length_dist, _most_untimed(request, runs))
    if _has_clock(request) and intervals.propagated_families():
        quiet = request._replace(series=False, step_log=False)
        at_scale = [[r.bench for r in _runs(with_step_scale(replica, s), quiet)[0]] for s in scales]
    else:  # no arrival clock: the rerun is the run on a stretched clock (intervals.stretched)
        at_scale = [[intervals.stretched(r.bench, s) for r in runs] for s in scales]
    out = []
    for i, r in enumerate(runs):
        scaled = [a[i] for a in at_scale]
        out.append(
            r._replace(
                bench_interval=intervals.bench_interval(
                    r.bench, evidence, length_dist, scaled, untimed[i]
                ),
                step_scaled=intervals.step_scaled(scales, scaled),
            )
        )
    return out


def _has_clock(request: SimulateRequest) -> bool:
    """Whether the workload keeps time apart from the steps: arrivals at a rate (a run per
    --request-rate; one finite rate reruns them all) or a trace's timestamps. Without it (every request sent at once, closed-loop or not) the same workload
    with every step s times slower is the same run on a clock stretched by s."""
    return request.trace is not None or any(math.isfinite(rate) for rate in request.rates)


def _with_dp_ranks(spec: ModelSpec, request: SimulateRequest):
    """(the request with DP ranks as its replicas, the layout or None). Each DP rank has its own
    scheduler and KV pool; the engines route to them (vLLM's DP coordinator: the least loaded;
    SGLang's --load-balance-method, round robin by default) unless --router names another."""
    layout = parallel_layout(spec, request.serve)
    if not layout.modelled and layout.dp_replicas == 1:
        return request, None
    ranks = layout.dp * layout.dp_replicas
    if ranks > 1:
        if request.replicas != 1:
            raise KvplanError(
                "give the DP ranks as --data-parallel-size / --dp-size or as --replicas, not both"
            )
        if request.disaggregated is not None:
            raise KvplanError("--disaggregated with DP ranks is not simulated; drop the DP size")
        router = layout.router if request.router == "round_robin" else request.router
        request = request._replace(replicas=ranks, router=router)
    return request, layout


def _layout_note(spec: ModelSpec, layout, engine: str = "vllm", serve=None) -> Note:
    """sim-expert-parallel (a MoE model's EP or DP-attention ranks) or sim-dp-replicas."""
    lm_head = bool(serve is not None and serve.enable_dp_lm_head)
    dense_whole = bool(serve is not None and serve.moe_dense_tp_size == 1)
    if not layout.modelled:
        return note("sim-dp-replicas", ranks=layout.dp_replicas, router=layout.router)
    return note(
        "sim-expert-parallel",
        layout=layout.text,
        dp=layout.dp,
        ep=layout.ep,
        experts_per_rank=spec.moe.num_experts / layout.expert_ranks
        if layout.ep > 1 and spec.moe is not None  # EP needs experts: parallel_layout
        else None,
        gpus=layout.gpus,
        router=layout.router,
        engine=engine,
        dp_lm_head=lm_head,
        dense_mlp_whole=dense_whole,
        speculative=bool(
            serve is not None
            and (serve.speculative_algorithm is not None or serve.speculative_config is not None)
        ),
        skip_mlp_sync=bool(serve is not None and serve.speculative_skip_dp_mlp_sync),
    )


def _check_warm(request: SimulateRequest) -> None:
    """A warm cache holds shared prefixes: there must be some, and a cache to hold them."""
    if request.disaggregated is not None:
        raise KvplanError("--warm-prefix-cache is simulated for one pool; drop --disaggregated")
    if request.serve.enable_prefix_caching is False:
        raise KvplanError(
            "--warm-prefix-cache needs prefix caching; drop --no-enable-prefix-caching"
        )
    w = request.workload
    if request.trace is None and (w.prefix_len == 0 or w.turns > 1):
        raise KvplanError(
            "--warm-prefix-cache caches the shared prefixes: give --prefix-len (one turn)"
        )


def _check_step_log(request: SimulateRequest) -> None:
    """A step log is one engine's schedule under vLLM's rules: one run, one rate."""
    if request.serve.engine != "vllm":
        raise KvplanError("--step-log logs vLLM's scheduler; drop --engine sglang")
    if request.disaggregated is not None:
        raise KvplanError("--step-log logs one engine's schedule; drop --disaggregated")
    if len(request.rates) != 1:
        raise KvplanError("--step-log logs one run: give one --request-rate")


def _step_log(spec: ModelSpec, request: SimulateRequest, recorder: StepRecorder) -> dict:
    """The recorded schedule as kvplan.simulate.steplog writes it (scripts/step_log.py
    --against compares it with a vLLM log), the steps timed by the step model."""
    rate = request.rates[0]
    return {
        "scenario": f"kvplan simulate {spec.name}",
        "kvplan_version": __version__,
        "vllm_version": request.serve.vllm_version,
        "request_rate": None if request.trace is not None else rate if rate < math.inf else "inf",
        "replica": 0,
        "step_s": None,  # every step its own time: see each step's t_s
        "steps": recorder.steps,
    }


def _runs(
    replica: Replica, request: SimulateRequest, recorder: StepRecorder | None = None
) -> tuple[list[Run], int]:
    """One run per rate, and how many requests (at most, over the rates) asked for more
    output than max_model_len leaves them where the server serves them capped (SGLang 0.4.0
    and 0.4.1; the others refuse them: ContextLimit); `recorder` logs replica 0's steps in the
    first run."""
    runs, capped = [], 0
    context = replica.context
    for rate in request.rates:
        requests = _requests(request, rate)
        if request.warm_prefix_cache and not any(
            r.stream_id >= 0 and not r.session for r in requests
        ):
            raise KvplanError(
                "--warm-prefix-cache caches shared prefixes: the trace names none (prefix_id)"
            )
        over = sum(
            1 for r in requests if context and context.capped(r.input_tokens, r.output_tokens)
        )
        capped = max(capped, over)
        runs.append(run_once(replica, requests, request, rate, recorder))
        recorder = None
    return runs, capped


def _requests(request: SimulateRequest, rate: float) -> list[RequestSpec]:
    """The requests of the run at `rate`: the trace's, else the workload's."""
    if request.trace is not None:
        return read_trace(Path(request.trace))
    return generate(request.workload._replace(request_rate=rate))


def _engine_note(replica: Replica, vllm_version: str) -> list[Note]:
    """The vLLM scheduler kvplan runs, named by the release simulated (it said 0.19 whatever
    release ran); none for SGLang's, nor where the V0 note (sim-vllm-v0) describes the engine."""
    if replica.policy is not None or any(n.id == "sim-vllm-v0" for n in replica.notes):
        return []
    return [note("sim-engine", version=vllm_version)]


def _toggled(request: SimulateRequest, replica: Replica) -> tuple[SimulateRequest, bool]:
    """The request with the compared technique switched: (that request, whether it was on)."""
    if request.compare == "cache-aware-routing":
        on = request.router == "cache_aware"
        return request._replace(router="round_robin" if on else "cache_aware"), on
    assert request.compare is not None, "called for --compare"
    field = COMPARISONS[request.compare]
    assert field is not None, "a serve flag (the router is toggled above)"
    on = bool(getattr(replica.options, field))
    flag: dict[str, Any] = {field: not on}  # a bool option named at run time
    return request._replace(serve=request.serve._replace(**flag)), on


def transfer_model(
    spec: ModelSpec, gpu: GpuProfile, replica: Replica, request: SimulateRequest
) -> disagg.TransferModel:
    """A request's KV from a prefill replica to a decode replica of the same TP/PP: the bytes
    every decode rank must hold (formulas.comm.kv_transfer_bytes), each rank's share over its own
    link (kv_transfer_time_s)."""
    link = choose_link(gpu, request.link, request.network_gbps)
    fmt = resolve_kv_format(replica.kv_format, spec.dtype)
    tp, ranks = replica.options.tp, replica.options.tp * replica.options.pp

    def bytes_of(tokens: int) -> float:
        return float(kv_transfer_bytes(spec, tokens, fmt, tp))

    def seconds_of(size: float) -> float:
        return kv_transfer_time_s(size, ranks, link.one_way_bytes_per_s, link.latency_s)

    return disagg.TransferModel(
        link.name, link.one_way_bytes_per_s, link.latency_s, bytes_of, seconds_of
    )


def _replica_pool(config, requests, request: SimulateRequest, context: ContextLimit | None):
    """(the engine config, the pool blocks one replica could ever need). With round-robin
    routing and no concurrency limit each replica's requests are known in advance (every R-th
    arrival), so its demand is that share's; otherwise all the requests'. Prefix caching is
    dropped where it cannot change the run (engine.without_idle_caching): the same numbers,
    counted instead of hashed."""
    share = requests
    if request.replicas > 1 and request.router == "round_robin" and not request.max_concurrency:
        served = sorted(
            (
                r
                for r in requests
                if context is None or not context.refuses(r.input_tokens, r.output_tokens)
            ),
            key=lambda r: (r.arrival_s, r.rid),
        )
        shares = [served[i :: request.replicas] for i in range(request.replicas)]
        share = max(shares, key=lambda part: pool_demand(config, part))
    demand = pool_demand(config, share)
    if any(r.stream_id >= 0 for r in requests):  # prompts share token streams: caching counts
        return config, demand
    return without_idle_caching(config, share), demand


def served_by(request: SimulateRequest) -> Frontend:
    """The API server in front of the replicas (engine_frontend)."""
    return engine_frontend(request.serve.engine, request.frontend)


def engine_frontend(engine: str, frontend: Frontend) -> Frontend:
    """`frontend` as `engine`'s API server runs it: SGLang's does each request's parsing, chat
    template and tokenization in its one process, in turn (frontend_serial_request_s; a
    serial part given stays); vLLM's per-request cost has no serial part timed."""
    if engine != "sglang" or frontend.serial_request_s:
        return frontend
    return frontend._replace(serial_request_s=frontend_serial_request_s())


def run_once(
    replica: Replica,
    requests,
    request: SimulateRequest,
    rate: float,
    recorder: StepRecorder | None = None,
) -> Run:
    """One simulated benchmark: every request served, then the bench's numbers; `recorder`
    (a vLLM engine's): replica 0's steps."""
    if request.disaggregated is not None:
        return _run_disaggregated(replica, requests, request, rate)
    config, demand = _replica_pool(replica.config, requests, request, replica.context)
    replica = replica._replace(config=config)

    def served(stand_in: bool):
        engines = [
            make_engine(replica, request.frontend.per_token_s, demand, stand_in)
            for _ in range(request.replicas)
        ]
        if request.warm_prefix_cache:
            for engine in engines:
                engine.warm_prefixes(requests)
        if recorder is not None:  # a run redone with the real pool starts the log again
            recorder.reset()
            engines[0].observer = recorder
        result = cluster.run(
            requests,
            engines,
            router=request.router,
            max_concurrency=request.max_concurrency,
            frontend=served_by(request),
            context=replica.context,
            lockstep=replica.layout.dp if replica.layout is not None else 1,
            servers=cluster.api_servers(len(engines), replica.layout),
        )
        return engines, result

    engines, result = with_stand_in(config, requests, served)
    if recorder is not None:
        _settle_steps(recorder.steps, engines[0], result.finished)
    bench = metrics.bench_result(
        result,
        rate if request.trace is None else None,
        request.workload.burstiness,
        request.max_concurrency,
    )
    stats = metrics.engine_stats(
        result,
        bench.duration,
        request.frontend.per_token_s,
        bench.median_ttft_ms,
        request.frontend.request_s,
    )
    return Run(bench, stats, metrics.series(engines[0]) if request.series else None)


def _settle_steps(steps: list[dict], engine: Engine, finished) -> None:
    """Each step's start (the engine's log holds every step that ran, in order) and the
    requests that sampled their last token in it."""
    log = engine.log
    for i, entry in enumerate(steps):
        k = entry.pop("step")
        steps[i] = {"step": k, "t_s": round(log.end_s[k] - log.duration_s[k], 9), **entry}
    for r in sorted(finished, key=lambda r: r.rid):
        if r.replica == 0 and 0 <= r.last_step < len(steps):
            steps[r.last_step]["finished"].append(str(r.rid))


def _run_disaggregated(replica: Replica, requests, request: SimulateRequest, rate) -> Run:
    """P prefill and D decode replicas of the same build, the KV moved between them."""
    assert request.disaggregated is not None and replica.transfer is not None
    num_prefill, num_decode = request.disaggregated
    demand = pool_demand(replica.config, requests)
    per_token = request.frontend.per_token_s

    def engines(count: int, prefill_only: bool) -> list[Engine]:
        return [
            Engine(replica.config, replica.model, per_token, demand, prefill_only=prefill_only)
            for _ in range(count)
        ]

    drun = disagg.run(
        requests,
        engines(num_prefill, True),
        engines(num_decode, False),
        replica.transfer,
        router=request.router,
        max_concurrency=request.max_concurrency,
        frontend=served_by(request),
        context=replica.context,
    )
    bench = metrics.bench_result(
        drun.decode,
        rate if request.trace is None else None,
        request.workload.burstiness,
        request.max_concurrency,
    )
    # the prefills ran on the prefill replicas: the TTFT's untimed fraction is theirs
    stats = metrics.engine_stats(drun.decode, bench.duration, per_token)._replace(
        ttft_untimed_fraction=metrics.ttft_untimed_fraction(
            drun.prefill_engines,
            None if bench.median_ttft_ms is None else bench.median_ttft_ms * MS,
            request.frontend.request_s,
        )
    )
    return Run(
        bench,
        stats,
        metrics.series(drun.decode.engines[0]) if request.series else None,
        metrics.disagg_stats(drun, bench.duration, per_token, replica.transfer),
    )


def _setup(gpu: GpuProfile, replica: Replica, request: SimulateRequest) -> Setup:
    o = replica.options
    replicas = sum(request.disaggregated) if request.disaggregated else request.replicas
    layout = replica.layout or ParallelLayout(o.tp, gpus=o.tp)
    span = node_span(gpu, o, layout)
    return Setup(
        nodes=1 if span is None else span.nodes,
        node_gpus=None if span is None else span.node_gpus,
        network=None if span is None else span.network.name,
        network_bytes_per_s=None if span is None else span.network.bandwidth_bytes_per_s,
        gpu=gpu.name,
        tp=o.tp,
        pp=o.pp,
        replicas=replicas,
        num_gpus=_num_gpus(replica, o, replicas),
        router=request.router,
        prefill_replicas=request.disaggregated[0] if request.disaggregated else None,
        decode_replicas=request.disaggregated[1] if request.disaggregated else None,
        # resolved: the engine config holds the same values as the options, typed as set
        max_num_seqs=replica.config.max_num_seqs,
        max_num_batched_tokens=replica.config.max_num_batched_tokens,
        max_model_len=replica.config.max_model_len,
        block_size=replica.config.block_size,
        num_blocks=replica.config.num_blocks,
        kv_cache_tokens=replica.kv_cache_tokens,
        kv_cache_dtype=o.kv_cache_dtype,
        weights_dtype=replica.weights_dtype,
        enable_prefix_caching=replica.config.enable_prefix_caching,
        enable_chunked_prefill=o.enable_chunked_prefill is not False,  # resolved by build_replica
        preemption=o.preemption,
        continuous_batching=o.continuous_batching,
        async_scheduling=bool(o.async_scheduling),  # resolved by build_replica
        engine=o.engine,
        mem_fraction_static=o.mem_fraction_static,
        engine_version=o.sglang_version if o.engine == "sglang" else o.vllm_version,
        interconnect=gpu.interconnect.name if gpu.interconnect else None,
        interconnect_bytes_per_s=gpu.interconnect.bandwidth_bytes_per_s
        if gpu.interconnect
        else None,
        decode_context_parallel_size=o.decode_context_parallel_size,
        enforce_eager=o.enforce_eager,
        speculative=_speculative(replica),
    )


def _speculative(replica: Replica) -> dict | None:
    from kvplan.simulate.speculative import launch_flags

    sp = replica.speculation
    if sp is None:
        return None
    r = sp.request
    return {
        "method": r.method,
        "num_steps": r.num_steps,
        "topk": r.topk,
        "verify_tokens": r.verify_tokens,
        "draft": r.draft,
        "tokens_per_round": sp.tokens_per_round,
        "acceptance": sp.acceptance,
        "acceptance_rate": sp.acceptance_rate,
        "draft_weight_bytes": sp.draft_weight_bytes,
        "draft_kv_bytes_per_token": sp.draft_kv_bytes_per_token,
        "launch": launch_flags(r, replica.options.engine, sp.draft_id),
    }


def _num_gpus(replica: Replica, o: ServeOptions, replicas: int) -> int:
    """TP x PP x replicas; DP-attention ranks share their group's GPUs (SGLang: --tp of them)."""
    layout = replica.layout
    if layout is None or layout.dp == 1:
        return o.tp * o.pp * replicas
    return layout.gpus * replicas // layout.dp


def _workload(request: SimulateRequest) -> WorkloadSummary:
    w = request.workload
    if request.trace is not None:
        return WorkloadSummary(
            0,
            f"trace {request.trace}",
            None,
            None,
            None,
            0,
            1,
            1,
            w.burstiness,
            request.max_concurrency,
            workload_seed(w),
            request.warm_prefix_cache,
        )
    return WorkloadSummary(
        num_prompts=w.num_prompts,
        source=w.length_dist,
        input_len=w.input_len,
        output_len=w.output_len,
        spread=w.spread if w.length_dist in SPREAD_DISTS else None,
        prefix_len=w.prefix_len,
        num_prefixes=w.num_prefixes,
        turns=w.turns,
        burstiness=w.burstiness,
        max_concurrency=request.max_concurrency,
        seed=workload_seed(w),
        warm_prefix_cache=request.warm_prefix_cache,
    )


def _check_estimated_limit(replica, requests: list[RequestSpec]) -> None:
    """Refuse a run whose requests fail only on the max_model_len kvplan lowered to what its
    own pool estimate holds (Replica.lowered_from, note sim-max-model-len-reduced; not where the
    user gave the pool): vLLM would not start at the configured length, so whether such a
    request is served turns on a pool kvplan can only estimate, not on anything the server was
    given; a confident "every request failed" (or a figure over the rest) would be a guess."""
    configured, context = replica.lowered_from, replica.context
    if configured is None or context is None:
        return
    at_configured = context._replace(max_model_len=configured, engine_len=None)
    turned = [
        r
        for r in requests
        if context.refuses(r.input_tokens, r.output_tokens)
        and not at_configured.refuses(r.input_tokens, r.output_tokens)
    ]
    if turned:
        longest = max(r.input_tokens + r.output_tokens for r in turned)
        raise KvplanError(
            f"kvplan's KV pool estimate holds one request of at most {context.max_model_len:,} "
            f"tokens, below max_model_len {configured:,} (so vLLM would not start at "
            f"{configured:,}), and {len(turned):,} of {len(requests):,} requests (up to "
            f"{longest:,} tokens) need more: whether they are served turns on the pool, which "
            "kvplan can only estimate; pass --max-model-len, --kv-cache-memory (the engine's "
            "logged figure) or --gpu-memory-utilization as the server had them"
        )


def _failed_note(runs: list[Run], context: ContextLimit | None) -> list[Note]:
    """sim-requests-failed, first among the notes, where a run refused requests: the server
    answers a prompt + max_tokens past max_model_len with HTTP 400 (vLLM 0.19.1
    entrypoints/openai/engine/serving.py: "This model's maximum context length is ...";
    SGLang's tokenizer manager, at the limit too before 0.5.10: kvplan.engines.context_limit),
    and `vllm bench serve` warns "All requests failed" where none completed
    (benchmarks/serve.py calculate_metrics)."""
    worst = max(runs, key=lambda r: r.bench.failed)
    if not worst.bench.failed or context is None:  # None: nothing refused
        return []
    return [
        note(
            "sim-requests-failed",
            failed=worst.bench.failed,
            requests=worst.bench.failed + worst.bench.completed,
            max_model_len=context.max_model_len,
            at_limit=not context.total_at_limit,
            prompt_limit=context.prompt_limit,
        )
    ]


def _detokenizer_note(spec: ModelSpec, version: str) -> Note:
    """sim-weak-detokenizer: the decode path SGLang `version` runs on Moonshot's tokenizer and
    the per-token cost kvplan times it at (EngineConfig.detokenizer_token_s)."""
    data = detokenizer_data()
    return note(
        "sim-weak-detokenizer",
        version=version,
        path=detokenizer_path(spec, version),
        per_token_us=detokenizer_token_s(spec, version) * 1e6,
        batch=data.batch,
        cpu=data.cpu,
    )


def _weak_spots(
    spec: ModelSpec, runs: list[Run], request: SimulateRequest, gpu: GpuProfile
) -> list[Note]:
    """Where this model of the engine is known to be weak, for this case."""
    notes = [note("sim-weak-general")]
    if spec.has_kind(CacheKind.MLA):
        notes.append(note("sim-weak-mla"))
    if spec.has_kind(CacheKind.STATE) or spec.has_kind(CacheKind.SLIDING):
        notes.append(note("sim-weak-hybrid"))
    if request.serve.pp > 1:
        notes.append(note("sim-weak-pp"))
    if request.serve.engine == "sglang":
        frontend = frontend_data()
        notes.append(
            note(
                "sim-sglang-frontend",
                per_request_us=round(served_by(request).serial_request_s * 1e6),
                cpu=frontend.cpu,
            )
        )
        known = held_out_accuracy("sglang")
        notes.append(
            note(
                "sim-weak-sglang",
                runs=known.runs if known else 0,
                cases=known.cases if known else "",
                throughput=known.output_throughput if known else 0.0,
                tpot=known.median_tpot_ms if known else 0.0,
                ttft=known.median_ttft_ms if known else 0.0,
            )
        )
    if intervals.untimed(spec, request.serve.engine):
        notes.append(_detokenizer_note(spec, request.serve.sglang_version))
    if request.serve.engine == "sglang" and gpt_oss_below_blackwell(spec, gpu):
        notes.append(note("sim-weak-gpt-oss-sglang"))
    version = request.serve.sglang_version
    if request.serve.engine == "sglang" and gpt_oss_sm120_other_kernel(spec, gpu, version):
        later = sglang_after_sm120_marlin(version)
        notes.append(note("sim-gpt-oss-sm120-kernel", version=version, later=later))
    if request.trace is None and request.workload.length_dist == "sharegpt":
        notes.append(note("sim-sharegpt"))
    pools = [r.engine for r in runs]
    pools += [r.disaggregated.prefill for r in runs if r.disaggregated is not None]
    if max(p.frontend_busy_fraction for p in pools) > 0.8:
        notes.append(note("sim-frontend-bound"))
    if any(p.preemptions for p in pools):
        notes.append(note("sim-preemptions"))
    if request.disaggregated is not None and (
        spec.has_kind(CacheKind.STATE) or spec.has_kind(CacheKind.SLIDING)
    ):
        notes.append(note("sim-weak-disagg-hybrid"))
    return notes
