"""`kvplan plan`: the cheapest deployments that serve a request rate within latency targets.

For every configuration in the search space (GPU kind x TP x PP x KV dtype x max_num_seqs x
max_num_batched_tokens) one replica is simulated (kvplan.simulate, vLLM V1's scheduler):
1. the latency floor: a lone request's TTFT and TPOT from the step-time model; a target below
   it rules the configuration out without a simulation;
2. the saturated throughput: every request at once;
3. the goodput: the highest request rate whose run meets every target, by bisection between 0
   and the saturated throughput (targets are monotone in the rate).
Replicas behind a round-robin router each take rate / replicas, so the deployment needs
ceil(rate / goodput) replicas: GPUs = replicas x TP x PP, cost = GPUs x the GPU-hour price.
A final run at rate / replicas gives the operating point. Configurations run in parallel
processes, one per core.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.engines.backends import Backends, check_backends
from kvplan.engines.max_len import check_max_model_len
from kvplan.engines.request import PiecewiseFlags
from kvplan.engines.sglang import check_piecewise_flags
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import BatchShape, critical_fixed_s, run_untimed_parts
from kvplan.inputs.hardware import GpuProfile
from kvplan.inputs.prices import price_for
from kvplan.notes import Note, note, unique
from kvplan.plans import intervals
from kvplan.plans.simulate import engine_frontend
from kvplan.record import NamedTuple
from kvplan.simulate import cluster, metrics
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import pool_demand, with_stand_in, without_idle_caching
from kvplan.simulate.setup import (
    Replica,
    ServeOptions,
    build_replica,
    make_engine,
)
from kvplan.simulate.workload import (
    MIN_RATE,
    RequestSpec,
    WorkloadSpec,
    arrival_times_s,
    check_prefill_steps,
    check_work,
    generate,
    workload_seed,
)
from kvplan.units import MS

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p99")
BISECTIONS = 5  # goodput to within 1/32 of the saturated rate
MAX_CONFIGS = 5000
DEFAULT_TPS = (1, 2, 4, 8)
DEFAULT_SEQS = (64, 128, 256, 512, 1024)
DEFAULT_BUDGETS = (2048, 8192)
# --kv-cache-dtype values searched where none are given, in the --emit engine's spellings (SGLang's
# parser takes no "fp8": engines.sglang.KV_CACHE_FORMATS)
DEFAULT_KV = {"vllm": ("auto", "fp8"), "sglang": ("auto", "fp8_e4m3")}
ENGINES = ("vllm", "sglang")  # --emit: the engine simulated and launched


class Slo(NamedTuple):
    """A latency target: `stat` of `metric` at most `limit_s` seconds."""

    metric: str
    stat: str
    limit_s: float

    @property
    def key(self) -> str:
        """The bench-serve key it is checked against: p99_ttft_ms, median_tpot_ms, ..."""
        return f"{self.stat}_{self.metric}_ms"

    @property
    def label(self) -> str:
        return f"{self.metric}_{self.stat}"


def parse_slo(text: str) -> Slo:
    """'ttft_p99=2s', 'tpot_p99=50ms', 'e2el_median=20s' -> Slo."""
    from kvplan.inputs.options import ascii_number

    match = re.fullmatch(
        r"\s*([a-z0-9]+)_([a-z0-9]+)\s*=\s*([0-9]{1,12}(?:\.[0-9]{1,12})?)\s*(ms|s|us)\s*",
        ascii_number(text, "--slo").lower(),
    )
    if not match:
        raise KvplanError(
            f"--slo {text!r}: write METRIC_STAT=VALUE with a unit, e.g. ttft_p99=2s, "
            f"tpot_p99=50ms (metrics {', '.join(METRICS)}; stats {', '.join(STATS)})"
        )
    metric, stat, value, unit = match.groups()
    if metric not in METRICS:
        raise KvplanError(f"--slo {text!r}: metric {metric!r}; choose {', '.join(METRICS)}")
    if stat not in STATS:
        raise KvplanError(f"--slo {text!r}: statistic {stat!r}; choose {', '.join(STATS)}")
    seconds = float(value) * {"s": 1.0, "ms": MS, "us": 1e-6}[unit]
    if not 1e-6 <= seconds <= 86400:
        raise KvplanError(f"--slo {text!r}: the target must be between 1 us and 1 day")
    return Slo(metric, stat, seconds)


class PlanRequest(NamedTuple):
    rate: float  # requests per second to serve, all replicas together
    slos: tuple[Slo, ...]
    workload: WorkloadSpec = WorkloadSpec(num_prompts=400)
    tps: tuple[int, ...] = DEFAULT_TPS
    pps: tuple[int, ...] = (1,)
    kv_cache_dtypes: tuple[str, ...] = ()  # (): the engine's DEFAULT_KV (plan_kv_cache_dtypes)
    max_num_seqs: tuple[int, ...] = DEFAULT_SEQS
    # () (none given): DEFAULT_BUDGETS, and for a vLLM V0 release that release's own default
    # budget for the max_model_len (V0 turns chunked prefill off below 32,768 tokens, where
    # neither default budget would admit a max-length prompt)
    max_num_batched_tokens: tuple[int, ...] = ()
    max_model_len: int | None = None
    prices: dict = {}  # profile key -> USD per GPU-hour (overrides)
    max_gpus: int = 1024
    top: int = 10
    emit: str = "vllm"  # the engine whose launch command is printed
    # --engine-version: the release of --emit's engine whose defaults and admission rules every
    # configuration is simulated with (None: the default release, engines.releases)
    engine_version: str | None = None
    async_scheduling: bool | None = None  # None: the engine's default for its release
    jobs: int = 0  # worker processes (0: one per core)
    frontend: Frontend = Frontend()
    prune: bool = True  # skip groups whose saturated rate cannot place them among the top
    # SGLang's --mem-fraction-static for every configuration (None: SGLang's own default)
    mem_fraction_static: float | None = None
    # size so that the pessimistic bound at this confidence meets the targets (0.5-0.95;
    # kvplan.plans.intervals); None: the point estimate
    confidence: float | None = None
    # expert parallelism / DP attention for every configuration, as `kvplan simulate` takes
    # them (kvplan.simulate.setup.parallel_layout): a replica is then its group of DP ranks
    enable_expert_parallel: bool = False
    data_parallel_size: int = 1
    ep_size: int | None = None
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False  # SGLang's, under DP attention
    moe_dense_tp_size: int | None = None  # SGLang's (1), under DP attention
    # a launch over several nodes for every configuration (kvplan.simulate.setup.node_span):
    # --nnodes, vLLM's --data-parallel-size-local; a configuration whose GPUs do not split over
    # them, or put more on a node than the profile's gpus_per_node, is ruled out
    nnodes: int = 1
    data_parallel_size_local: int | None = None
    # vLLM -dcp and --enforce-eager (SGLang --disable-cuda-graph) for every configuration
    decode_context_parallel_size: int = 1
    enforce_eager: bool = False
    # SGLang's piecewise-CUDA-graph flags for every configuration (engines.sglang)
    piecewise: PiecewiseFlags = PiecewiseFlags()
    # the kernel-backend flags for every configuration, as `kvplan simulate` takes them
    # (kvplan.engines.backends; none: the engine's own choice)
    backends: Backends = Backends()
    # speculative decoding (kvplan.simulate.speculative): "auto" searches each layout without
    # it and, for a model with MTP layers, with them (k = its MTP layers); "off" without it.
    # A speculative layout given as `kvplan simulate` takes it (vLLM's --speculative-config,
    # SGLang's --speculative-* flags) is searched beside none instead of MTP. The acceptance:
    # spec_accept / spec_accept_length (unset: an assumed 0.7 per token, noted)
    speculative: str = "auto"
    speculative_config: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    spec_accept: str | None = None
    spec_accept_length: float | None = None
    # SGLang's --disable-radix-cache for every configuration (given); a speculative layout of a
    # hybrid SGLang runs without it (engines.sglang.speculative_radix_off) carries it anyway.
    # --speculative-skip-dp-mlp-sync given: every EAGLE/NEXTN layout under DP attention takes
    # it; not given, such a layout is searched with and without it (speculative "auto").
    disable_radix_cache: bool = False
    speculative_skip_dp_mlp_sync: bool = False
    # SGLang's --mamba-scheduler-strategy for every configuration (None: no_buffer, unprinted)
    mamba_scheduler_strategy: str | None = None


class Config(NamedTuple):
    gpu_index: int
    tp: int
    pp: int
    kv_cache_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    speculative: int = 0  # an index into speculative_layouts(): 0 is none


class OperatingPoint(NamedTuple):
    """One replica at rate / replicas: the bench's latencies there."""

    request_rate: float
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    p99_itl_ms: float | None
    p99_e2el_ms: float | None
    peak_kv_usage: float
    preemptions: int


class Candidate(NamedTuple):
    gpu: str
    gpu_key: str
    tp: int
    pp: int
    kv_cache_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int
    goodput_rps: float  # the highest rate one replica sustains within every target
    replicas: int
    num_gpus: int
    usd_per_gpu_hour: float
    price_read_on: str | None
    price_source: str
    usd_per_hour: float
    usd_per_million_tokens: float  # input + output tokens served
    usd_per_million_output_tokens: float
    operating_point: OperatingPoint
    max_model_len: int
    # speculative decoding: the launch flags in --emit's spelling and the tokens per round
    # (None: none)
    speculative: list[str] | None = None
    spec_tokens_per_round: float | None = None
    # the flags of its layout besides those (SGLang's --disable-radix-cache,
    # --speculative-skip-dp-mlp-sync; launch_layout_flags), in --emit's spelling (None: none)
    layout_flags: list[str] | None = None
    # the interval class its uncertainty was taken from (kvplan.plans.intervals.evidence_for)
    # and the parts of its highest passing run's steps no kernel table times (_untimed_parts)
    interval_class: str = ""
    untimed_parts: tuple[str, ...] = ()
    # at the plan's confidence, the pessimistic factors it was sized on (factors_for: those of
    # its highest passing run, at that run's untimed fractions); None: the point estimate
    factors: dict | None = None
    # that run's untimed fractions (u: of its step time, s: of its median TTFT, r: of its
    # duration in the API server's per-request cost paid in turn; run_untimed)
    untimed_fractions: tuple[float, float, float] | None = None


class Rejection(NamedTuple):
    reason: str
    count: int  # type: ignore[assignment]  # how many were rejected; shadows tuple.count


class PlanResult(NamedTuple):
    kvplan_version: str
    model: dict
    rate: float
    slos: list[dict]
    workload: dict
    searched: int
    feasible: int
    candidates: list[Candidate]
    rejections: list[Rejection]
    notes: tuple[Note, ...]
    pruned: int = 0  # configurations not bisected: they could not be among the `top` cheapest
    mem_fraction_static: float | None = None  # SGLang's, as given (launched with it)
    confidence: float | None = None  # sized on the pessimistic bound at this confidence
    # the EP / DP flags every launch command carries, in the engine's spelling (None: none)
    parallel_flags: str | None = None
    # the -dcp / eager-mode / attention-backend flags every launch command carries besides
    mode_flags: str | None = None
    # --engine-version as given: the release simulated and launched (None: the default)
    engine_version: str | None = None


def plan(
    spec: ModelSpec,
    gpus: list[GpuProfile],
    request: PlanRequest,
    progress: Callable[[int, int], None] | None = None,
) -> PlanResult:
    """The Python twin of `kvplan plan MODEL --rate R --slo ...`."""
    gpus = [gpu for index, gpu in enumerate(gpus) if gpu not in gpus[:index]]  # each kind once
    _check(request, gpus)
    _check_release(request)
    _check_layout(spec, request)
    _check_backends(request)
    _check_piecewise(request)
    if request.max_model_len is not None:  # a launch the engine refuses, refused before searching
        check_max_model_len(spec, request.emit, request.max_model_len, False, allow_flag=None)
    _check_sglang_flags(spec, request)
    _check_speculative(spec, request)
    requests = generate(request.workload._replace(request_rate=math.inf))
    configs = search_space(gpus, request, len(speculative_layouts(spec, request)), spec)
    if not configs:
        raise KvplanError("the search space is empty")
    if len(configs) > MAX_CONFIGS:
        raise KvplanError(f"{len(configs):,} configurations: at most {MAX_CONFIGS:,}")
    check_work(requests, len(configs), "configurations")
    check_prefill_steps(requests, [c.max_num_batched_tokens for c in configs], "configurations")
    outcomes, released = _run_all(spec, gpus, request, configs, requests, request.jobs, progress)
    candidates, reasons, pruned = [], Counter[str](), 0
    found: list[tuple[Candidate, Config]] = []
    for config, outcome in zip(configs, outcomes, strict=True):
        if outcome == PRUNED:  # (a reason is never this word)
            pruned += 1
        elif isinstance(outcome, str):
            reasons[outcome] += 1
        else:
            found.append((outcome, config))
    found.sort(key=lambda f: (f[0].usd_per_hour, f[0].num_gpus, -f[0].goodput_rps))
    candidates = [c for c, _config in found]
    mean_in = sum(r.input_tokens for r in requests) / len(requests)
    mean_out = sum(r.output_tokens for r in requests) / len(requests)
    notes = [
        *spec.source_notes,
        note("plan-method", bisections=BISECTIONS, num_prompts=request.workload.num_prompts),
        note("plan-replicas"),
        note("plan-prices"),
        *([note("plan-pruned", pruned=pruned, top=request.top)] if pruned else []),
        _confidence_note(request, candidates),
    ]
    if not spec.hf_id:
        notes.append(note("plan-no-hf-id"))
    if request.emit == "sglang":
        notes.append(note("plan-sglang"))
    if parallel_flags(request):
        notes.append(note("plan-parallel", flags=parallel_flags(request)))
    layouts = speculative_layouts(spec, request)
    if len(layouts) > 1:
        notes.append(note("plan-speculative", layouts=len(layouts) - 1, engine=request.emit))
    if not candidates:
        notes.append(note("plan-none"))
    if request.engine_version is not None:
        listed = [config for _c, config in found[: request.top]]
        tried = listed or configs[:RELEASE_TRIES]
        notes.extend(_release_notes(spec, gpus, request, tried, released))
    return PlanResult(
        kvplan_version=__version__,
        model={"name": spec.name, "hf_id": spec.hf_id},
        rate=request.rate,
        slos=[{"target": s.label, "key": s.key, "limit_s": s.limit_s} for s in request.slos],
        workload={
            "num_prompts": request.workload.num_prompts,
            "length_dist": request.workload.length_dist,
            "mean_input_tokens": mean_in,
            "mean_output_tokens": mean_out,
        },
        searched=len(configs),
        feasible=len(candidates),
        candidates=candidates[: request.top],
        rejections=[Rejection(reason, count) for reason, count in reasons.most_common()],
        notes=unique(notes),
        pruned=pruned,
        mem_fraction_static=request.mem_fraction_static,
        confidence=request.confidence,
        parallel_flags=parallel_flags(request),
        mode_flags=mode_flags(request),
        engine_version=request.engine_version,
    )


def factors_for(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: PlanRequest,
    replica: Replica,
    untimed: intervals.Untimed | None = None,
) -> dict | None:
    """How much slower than simulated a real `replica` may be at the plan's confidence: 'rate'
    divides the rate one replica sustains (the real rate R runs like the simulated R * rate),
    'ttft'/'tpot'/'itl'/'e2el' multiply those latencies; None: the point estimate. `untimed`:
    the simulated run's untimed fractions (run_untimed), which widen the bound as they widen
    the interval `simulate` prints for that run (intervals.pessimistic_factors)."""
    if request.confidence is None:
        return None
    evidence = _evidence(spec, gpu, request, replica, untimed)
    out = intervals.pessimistic_factors(
        evidence, request.workload.length_dist, request.confidence, untimed
    )
    out["itl"] = out["tpot"]
    return out


def run_untimed(replica: Replica, stats: metrics.EngineStats) -> intervals.Untimed:
    """A simulated run's untimed fractions as simulate's interval takes them
    (intervals.run_untimed): the share of its step time in untimed parts (u), of its median
    TTFT in untimed costs (s) and of its duration in the API server's per-request cost paid in
    turn (r)."""
    return intervals.run_untimed(replica.options.engine, stats)


def _untimed_parts(replica: Replica, untimed: intervals.Untimed | None) -> tuple[str, ...]:
    """The untimed parts of one configuration's run whose untimed fractions are `untimed`
    (run_untimed; None: no run's, its model's alone)."""
    stand_in = 0.0 if untimed is None else untimed.stand_in_launch_fraction
    return run_untimed_parts(replica.model, stand_in)


def _evidence(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: PlanRequest,
    replica: Replica,
    untimed: intervals.Untimed | None,
) -> str:
    """The interval class of one configuration's run whose untimed fractions are `untimed`
    (its untimed parts count: _untimed_parts)."""
    return intervals.evidence_for(
        gpu, request.emit, spec, _untimed_parts(replica, untimed), replica.model.borrowed_parts
    )


def _confidence_note(request: PlanRequest, found: list[Candidate]) -> Note:
    """plan-confidence: per GPU kind and interval class of the configurations that met the
    targets, how much slower than simulated a replica was taken to be (the least and most rate
    factor its configurations were sized on: Candidate.factors, at each one's untimed
    fractions)."""
    if request.confidence is None:
        return note("plan-point-estimate")
    per_gpu: dict[tuple[str, str], list[float]] = {}
    for c in found:
        assert c.factors is not None, "a candidate of a plan with a confidence has its factors"
        per_gpu.setdefault((c.gpu, c.interval_class), []).append(c.factors["rate"])
    return note(
        "plan-confidence",
        confidence=request.confidence,
        gpus=tuple((gpu, cls, min(slow), max(slow)) for (gpu, cls), slow in per_gpu.items()),
    )


def _check(request: PlanRequest, gpus: list[GpuProfile]) -> None:
    intervals.check_confidence(request.confidence)
    if not (MIN_RATE <= request.rate <= 1e6) or math.isinf(request.rate):
        raise KvplanError(f"--rate must be between {MIN_RATE:g} and 1,000,000 requests per second")
    if not request.slos:
        raise KvplanError("plan needs at least one --slo target (e.g. ttft_p99=2s)")
    named = [f"{s.metric}_{s.stat}" for s in request.slos]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise KvplanError(f"--slo {twice[0]} is given twice: give each target once")
    if not gpus:
        raise KvplanError("plan needs at least one --gpu")
    if request.emit not in ENGINES:
        raise KvplanError(f"--emit {request.emit!r}: choose {' or '.join(ENGINES)}")
    if request.mem_fraction_static is not None:
        if request.emit != "sglang":
            raise KvplanError("--mem-fraction-static is SGLang's: give it with --emit sglang")
        f = request.mem_fraction_static
        if not (math.isfinite(f) and 0.05 <= f <= 1):
            raise KvplanError(f"--mem-fraction-static {f} must be between 0.05 and 1")
    _check_kv_cache_dtypes(request)
    if not 1 <= request.max_gpus <= 1_000_000:
        raise KvplanError("--max-gpus must be at least 1")
    if not 1 <= request.top <= 1000:
        raise KvplanError("--top must be between 1 and 1000")
    if not 20 <= request.workload.num_prompts <= 100_000:
        raise KvplanError("--num-prompts for plan must be between 20 and 100,000")


def _check_kv_cache_dtypes(request: PlanRequest) -> None:
    """A kv-cache-dtype the engine has no such name for is a typo, and one the --emit release
    refuses (the engine's check_kv_cache_dtype_release, its allocation's rule) cannot be
    launched: both refused before the search (it used to rule out every configuration, one by
    one, and answer "none meet the targets")."""
    from kvplan.engines import sglang, vllm
    from kvplan.engines.releases import SGLANG_VERSION, VLLM_VERSION

    engine, default = (sglang, SGLANG_VERSION) if request.emit == "sglang" else (vllm, VLLM_VERSION)
    known = engine.KV_CACHE_DTYPES
    for kv in plan_kv_cache_dtypes(request):
        if kv not in known:
            raise KvplanError(f"--kv-cache-dtype {kv[:40]!r}: choose {', '.join(known)}")
        engine.check_kv_cache_dtype_release(kv, request.engine_version or default)


def plan_kv_cache_dtypes(request: PlanRequest) -> tuple[str, ...]:
    """The --kv-cache-dtype values the search tries: the ones given, else the --emit engine's
    DEFAULT_KV."""
    return request.kv_cache_dtypes or DEFAULT_KV.get(request.emit, DEFAULT_KV["vllm"])


def token_budgets(
    spec: ModelSpec | None, gpu: GpuProfile | None, request: PlanRequest
) -> tuple[int, ...]:
    """The token budgets searched on `gpu`: the ones given, else DEFAULT_BUDGETS, else (a vLLM
    V0 release, none given) the release's own default for the max_model_len, as its
    SchedulerConfig resolves it (chunked prefill on or off by the release's rule)."""
    if request.max_num_batched_tokens:
        return request.max_num_batched_tokens
    if not _vllm_v0(request) or spec is None or gpu is None:
        return DEFAULT_BUDGETS
    from kvplan.engines import vllm_v0
    from kvplan.simulate.setup import resolved_max_model_len

    release = vllm_v0.v0_release(str(request.engine_version))
    assert release is not None
    options = ServeOptions(max_model_len=request.max_model_len, **release_fields(request))
    defaults = vllm_v0.v0_defaults(
        release,
        spec,
        resolved_max_model_len(spec, options),
        chunked_given=None,
        prefix_caching_given=None,
        vendor=gpu.device_vendor,
        speculative=False,  # V0 plans search no speculative layout (speculative_layouts)
    )
    return (defaults.max_num_batched_tokens,)


def search_space(
    gpus: list[GpuProfile], request: PlanRequest, layouts: int = 1, spec: ModelSpec | None = None
) -> list[Config]:
    """Every combination of the options (and of `layouts` speculative layouts), skipping (for
    vLLM, which refuses it) max_num_seqs above the token budget; SGLang's running requests are
    not tied to its chunk size. A value given twice is searched once."""
    configs = []
    for index in range(len(gpus)):
        budgets = dict.fromkeys(token_budgets(spec, gpus[index], request))
        for tp in dict.fromkeys(request.tps):
            for pp in dict.fromkeys(request.pps):
                for kv in dict.fromkeys(plan_kv_cache_dtypes(request)):
                    for budget in budgets:
                        for seqs in dict.fromkeys(request.max_num_seqs):
                            if seqs <= budget or request.emit == "sglang":
                                for sp in range(layouts):
                                    configs.append(Config(index, tp, pp, kv, seqs, budget, sp))
    return configs


SPECULATIVE_FIELDS = (
    "speculative_config",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
)


def speculative_layouts(spec: ModelSpec, request: PlanRequest) -> list[dict]:
    """The ServeOptions fields of each speculative layout searched, none first: the one given,
    else (speculative "auto") the model's MTP layers where it has them, in --emit's spelling."""
    from kvplan.simulate.speculative import mtp_layers

    if request.speculative not in ("auto", "off"):
        raise KvplanError(f"--speculative {request.speculative[:20]!r}: choose auto or off")
    accept = {"spec_accept": request.spec_accept, "spec_accept_length": request.spec_accept_length}
    given = {k: getattr(request, k) for k in SPECULATIVE_FIELDS if getattr(request, k) is not None}
    if given:
        if request.speculative == "off":
            raise KvplanError("--speculative off: drop the speculative flags")
        return _sglang_layouts(spec, request, [{}, {**given, **accept}])
    layers = mtp_layers(spec)
    if request.speculative == "off" or not layers or _vllm_v0(request):
        if request.spec_accept is not None or request.spec_accept_length is not None:
            raise KvplanError(
                "--spec-accept prices speculative layouts: give one (--speculative-config, "
                "--speculative-algorithm) or plan a model with MTP layers"
            )
        return [{}]
    mtp: dict[str, object]
    if request.emit == "vllm":
        mtp = {"speculative_config": f'{{"method": "mtp", "num_speculative_tokens": {layers}}}'}
    else:
        mtp = {
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": layers,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": layers + 1,
        }
    return _sglang_layouts(spec, request, [{}, {**mtp, **accept}])


def _sglang_layouts(spec: ModelSpec, request: PlanRequest, layouts: list[dict]) -> list[dict]:
    """The speculative layouts as SGLang runs them: an EAGLE/NEXTN layout under DP attention
    with --speculative-skip-dp-mlp-sync (given), or without and with it (searched). Whether a
    speculating hybrid keeps its radix cache needs the GPU: _speculative_radix."""
    from kvplan.engines.sglang import skip_dp_mlp_sync_accepted

    if request.emit != "sglang":
        return layouts
    version = ServeOptions(**release_fields(request)).sglang_version
    # searched where the release's argument parser takes the flag (given: _check_sglang_flags)
    searched = (
        request.enable_dp_attention
        and request.data_parallel_size > 1
        and skip_dp_mlp_sync_accepted(version)
    )
    out = [layouts[0]]
    for layout in layouts[1:]:
        algorithm = str(layout.get("speculative_algorithm") or "").strip().upper()
        skips = searched and algorithm in ("EAGLE", "NEXTN")
        if request.speculative_skip_dp_mlp_sync or not skips:
            out.append(layout)
        else:
            out.extend([layout, {**layout, "speculative_skip_dp_mlp_sync": True}])
    return out


def launch_layout_flags(options: ServeOptions) -> list[str] | None:
    """The flags of a configuration's layout that plan's launch command adds, in --emit's
    spelling (None: none): SGLang's --disable-radix-cache and --speculative-skip-dp-mlp-sync."""
    flags = []
    if options.engine == "sglang" and options.enable_prefix_caching is False:
        flags.append("--disable-radix-cache")
    if options.speculative_skip_dp_mlp_sync:
        flags.append("--speculative-skip-dp-mlp-sync")
    return flags or None


def _groups(configs: list[Config]) -> list[list[Config]]:
    """Configurations that differ only in max_num_seqs, largest first: a group shares its runs
    wherever the seat limit never bound."""
    groups: dict[tuple, list[Config]] = {}
    for config in configs:
        groups.setdefault(config._replace(max_num_seqs=0), []).append(config)
    return [sorted(g, key=lambda c: -c.max_num_seqs) for g in groups.values()]


PRUNED = "pruned"  # an outcome: its search stopped, it could not be among the `top` cheapest


def _run_all(spec, gpus, request, configs: list[Config], requests, workers: int, progress):
    """Every configuration's outcome, in `configs`' order, and the release notes of each one
    whose replica was built (see _prepare; none for a pruned one). Two passes over the groups:
    1. each group's saturated run (its largest max_num_seqs): a ceiling on the goodput of every
       configuration of the group, hence a floor on its replicas and its $/hour;
    2. the groups by that floor, cheapest first, bisected in full, until a group's floor is
       above the `top`-th cheapest $/hour found before it: it and every group after it are
       PRUNED (none can be listed: each costs more than `top` candidates already found).
    The prune is decided as if the groups ran one after another in that order, whatever the
    processes' timing (a group run ahead of its turn and then found pruned is dropped), so the
    result is the same for any --jobs, and `request.prune=False` bisects every group."""
    import os

    groups = _groups(configs)
    workers = (workers or os.cpu_count() or 1) if len(groups) >= 2 else 1
    total, done, outcomes = len(configs), 0, {}
    released: dict[Config, tuple[Note, ...] | None] = {}
    if progress:  # at once: the saturated runs come before any configuration is done
        progress(0, total)
    with _executor(workers) as pool:
        saturated = dict(
            zip(
                range(len(groups)),
                _ordered(
                    pool,
                    [(saturate, spec, gpus, request, g[0], requests) for g in groups],
                ),
                strict=True,
            )
        )
        floors = [_usd_floor(gpus, request, g[0], saturated[i]) for i, g in enumerate(groups)]
        order = sorted(range(len(groups)), key=lambda i: floors[i])
        usds: list[float] = []  # $/hour of every candidate of the groups before, in order
        pending: dict = {}  # future -> group index
        results: dict[int, list] = {}
        position = 0  # groups in `order` decided: evaluated, or pruned with all after
        submitted = 0
        cut = len(order)
        while position < cut:
            while submitted < cut and len(pending) < workers:
                index = order[submitted]
                bar = _bar(request, usds)  # at most the groups' bar before this one: >= its own
                if floors[index] > bar:
                    cut = submitted  # the floors rise and the bar only falls: all after too
                    break
                pending[
                    pool.submit(
                        evaluate_group,
                        spec,
                        gpus,
                        request,
                        groups[index],
                        requests,
                        saturated[index],
                        bar,
                    )
                ] = index
                submitted += 1
            if position >= cut:
                break
            finished = _wait_any(pending)
            for future in finished:
                results[pending.pop(future)] = future.result()
            while position < cut and order[position] in results:
                index = order[position]
                bar = _bar(request, usds)  # every group before this one's candidates
                if floors[index] > bar:  # ran ahead of its turn: dropped
                    cut = position
                    break
                for config, answer in zip(groups[index], results[index], strict=True):
                    outcome, floor, released[config] = answer
                    # pruned by this bar, whatever bar (never lower) the worker was given
                    outcome = PRUNED if floor > bar else outcome
                    outcomes[config] = outcome
                    if not isinstance(outcome, str):
                        usds.append(outcome.usd_per_hour)
                done += len(groups[index])
                if progress:
                    progress(done, total)
                position += 1
        for future in pending:
            future.cancel()
    for index in order[cut:]:
        for config in groups[index]:
            outcomes[config] = PRUNED
    if progress and done < total:
        progress(total, total)
    return [outcomes[c] for c in configs], released


def _bar(request: PlanRequest, usds: list[float]) -> float:
    """The $/hour a configuration must not exceed to be listed: with `top` candidates ahead of
    it in the order, the `top`-th cheapest (one costing more cannot be listed; one costing the
    same is not pruned, so no tie is decided by the prune); else, or unpruned, infinity."""
    if not request.prune or len(usds) < request.top:
        return math.inf
    return sorted(usds)[request.top - 1]


def _usd_floor(gpus, request: PlanRequest, config: Config, saturated) -> float:
    """The least $/hour any configuration of the group can cost: its goodput is at most the
    saturated rate (the bisection's upper end), so replicas >= ceil(rate / saturated rate).
    -inf where the group's first configuration did not reach a saturated run."""
    if saturated is None or isinstance(saturated[1], str):
        return -math.inf
    cap = saturated[0][0].bench.request_throughput
    if not cap > 0:
        return -math.inf
    price = price_for(gpus[config.gpu_index], request.prices)
    if price is None:  # _prepare rules out a GPU without a price: nothing to prune by
        return -math.inf
    return _least_usd(request, config, price.usd_per_gpu_hour, cap)


def _least_usd(request: PlanRequest, config: Config, usd_per_gpu_hour: float, rate: float) -> float:
    """$/hour at the fewest replicas a goodput of at most `rate` needs, as evaluate prices a
    candidate (replicas x TP x PP GPUs, times the price); inf past any float."""
    needed = request.rate / rate - 1e-9
    if not math.isfinite(needed):
        return math.inf
    return math.ceil(needed) * replica_gpus(request, config) * usd_per_gpu_hour


def replica_gpus(request: PlanRequest, config: Config) -> int:
    """The GPUs of one replica: TP x PP, times the DP size (vLLM's -dp, SGLang's --dp-size
    alone); SGLang's DP-attention ranks share its --tp GPUs."""
    if request.emit == "sglang" and request.enable_dp_attention:
        return config.tp * config.pp
    return config.tp * config.pp * request.data_parallel_size


def parallel_flags(request: PlanRequest) -> str | None:
    """The EP / DP options as the launch command spells them for --emit's engine."""
    flags = []
    if request.data_parallel_size > 1:
        dp = "--data-parallel-size" if request.emit == "vllm" else "--dp-size"
        flags.append(f"{dp} {request.data_parallel_size}")
    if request.enable_expert_parallel:
        flags.append("--enable-expert-parallel")
    if request.enable_dp_attention:
        flags.append("--enable-dp-attention")
    if request.enable_dp_lm_head:
        flags.append("--enable-dp-lm-head")
    if request.moe_dense_tp_size is not None:
        flags.append(f"--moe-dense-tp-size {request.moe_dense_tp_size}")
    if request.ep_size is not None:
        flags.append(f"--ep-size {request.ep_size}")
    if request.data_parallel_size_local is not None:
        flags.append(f"--data-parallel-size-local {request.data_parallel_size_local}")
    if request.nnodes > 1:
        flags.append(f"--nnodes {request.nnodes}")
    return " ".join(flags) or None


def mode_flags(request: PlanRequest) -> str | None:
    """The -dcp and eager-mode options as the launch command spells them for --emit's engine
    (SGLang has no -dcp: plan rules such configurations out)."""
    flags = []
    if request.decode_context_parallel_size > 1:
        flags.append(f"--decode-context-parallel-size {request.decode_context_parallel_size}")
    if request.enforce_eager:
        flags.append("--enforce-eager" if request.emit == "vllm" else "--disable-cuda-graph")
    flags.extend(request.piecewise.given())
    if request.mamba_scheduler_strategy is not None:
        from kvplan.engines.sglang import mamba_strategy_flag, mamba_strategy_name

        version = ServeOptions(**release_fields(request)).sglang_version
        name = mamba_strategy_name(request.mamba_scheduler_strategy)
        flags.append(f"{mamba_strategy_flag(version)} {name}")
    flags.extend(f"{flag} {value}" for flag, value in request.backends.given())
    return " ".join(flags) or None


def _check_backends(request: PlanRequest) -> None:
    """Kernel-backend flags and names --emit's engine does not take, refused before searching
    (which model and GPU a known backend runs on is each configuration's to rule on)."""
    from kvplan.engines.moe_backend import moe_backend_name

    release = ServeOptions(**release_fields(request))  # --engine-version, or the default
    version = release.sglang_version if request.emit == "sglang" else release.vllm_version
    check_backends(request.backends, request.emit, version)
    moe_backend_name(request.emit, request.backends.moe(request.emit), version)
    if request.emit == "sglang":
        from kvplan.engines.sglang import check_sglang_backends

        check_sglang_backends(request.backends)
        return
    from kvplan.engines.vllm import vllm_backend_name

    vllm_backend_name(request.backends.attention_backend)


def _check_piecewise(request: PlanRequest) -> None:
    """SGLang's piecewise-CUDA-graph flags: refused for --emit vllm and where the release
    refuses them (engines.sglang.piecewise_prefill), before searching."""
    given = request.piecewise.given()
    if not given:
        return
    if request.emit != "sglang":
        raise KvplanError(f"{given[0].split()[0]} is SGLang's: give --emit sglang")
    release = ServeOptions(**release_fields(request))
    check_piecewise_flags(release.sglang_version, request.piecewise)


def _check_layout(spec: ModelSpec, request: PlanRequest) -> None:
    """EP / DP options no searched TP could run (a dense model, the other engine's spelling,
    sizes that divide nothing): refused before searching, with the first TP's reason."""
    if parallel_flags(request) is None:
        return
    from kvplan.simulate.setup import check_sglang_dp_flags, launch_nodes, parallel_layout

    if request.emit != "sglang":
        for given, flag in (
            (request.enable_dp_lm_head, "--enable-dp-lm-head"),
            (request.moe_dense_tp_size is not None, "--moe-dense-tp-size"),
        ):
            if given:
                raise KvplanError(f"{flag} is SGLang's: give --emit sglang")

    launch_nodes(
        ServeOptions(engine=request.emit, **release_fields(request), **_parallel_flags(request))
    )

    first = None
    for tp in request.tps:
        try:
            options = ServeOptions(
                tp=tp,
                engine=request.emit,
                **release_fields(request),
                **_parallel_flags(request),
            )
            layout = parallel_layout(spec, options)
            if request.emit == "sglang":
                check_sglang_dp_flags(options, layout)
            return
        except KvplanError as exc:
            first = first or exc
    if first is not None:  # no TP at all: the search space is empty, refused as without flags
        raise first


def _check_speculative(spec: ModelSpec, request: PlanRequest) -> None:
    """A speculative layout or acceptance no configuration could run (an MTP draft of a
    checkpoint without MTP layers, as SGLang's NEXTN; a draft model that is none, of another
    vocabulary, or of an architecture the release has no model for): refused before
    searching."""
    from kvplan.simulate import speculative

    for layout in speculative_layouts(spec, request)[1:]:
        options = ServeOptions(engine=request.emit, **release_fields(request), **layout)
        asked = speculative.requested(spec, options)
        if asked is None:
            continue
        speculative.check_mtp(spec, asked)
        if asked.method == "draft_model":
            speculative.check_draft_model(spec, asked, options)
        speculative.parse_accept(options.spec_accept, options.spec_accept_length, asked)


def release_fields(request: PlanRequest) -> dict:
    """The ServeOptions field of --engine-version: --emit's release (none given: the
    ServeOptions default, engines.releases VLLM_VERSION / SGLANG_VERSION)."""
    if request.engine_version is None:
        return {}
    key = "sglang_version" if request.emit == "sglang" else "vllm_version"
    return {key: request.engine_version}


def _vllm_v0(request: PlanRequest) -> bool:
    """Whether the plan simulates and launches a vLLM V0 release (0.6, 0.7)."""
    from kvplan.engines.vllm_v0 import v0_release

    return (
        request.emit == "vllm"
        and request.engine_version is not None
        and v0_release(request.engine_version) is not None
    )


def _check_release(request: PlanRequest) -> None:
    """--engine-version: a release of --emit's engine (one a release spells; a release kvplan
    does not model runs with the nearest one's rules, noted), and for a vLLM V0 release no
    option whose launch flag plan would print for a V1 engine only."""
    if request.engine_version is None:
        return
    from kvplan.simulate.setup import check_engine_version

    check_engine_version(request.emit, request.engine_version)
    if not _vllm_v0(request):
        return
    from kvplan.engines.vllm_v0 import check_v0_launch

    given = {
        "--data-parallel-size": request.data_parallel_size > 1,
        "--enable-expert-parallel": request.enable_expert_parallel,
        "--data-parallel-size-local": request.data_parallel_size_local is not None,
        "--nnodes": request.nnodes > 1,
        "--decode-context-parallel-size": request.decode_context_parallel_size > 1,
        "--speculative-config": any(getattr(request, k) is not None for k in SPECULATIVE_FIELDS),
    }
    check_v0_launch(request.engine_version, tuple(flag for flag, on in given.items() if on))


RELEASE_TRIES = 20  # with none listed: the first configurations whose replica builds say it
RELEASE_NOTES = (  # the notes of the release a replica is built with (--engine-version)
    "sim-vllm-v0",
    "sim-vllm-v0-defaults",
    "sim-vllm-08-v0",
    "sim-vllm-version-newer",
    "sim-sglang-version-nearest",
    "sim-version-prerelease",
)


def _release_notes(
    spec, gpus, request: PlanRequest, listed: list[Config], released: dict
) -> tuple[Note, ...]:
    """What --engine-version's release ran with: the release notes of the `listed`
    configurations' replicas (the same notes simulate gives), as the search built them
    (`released`, from _run_all); a replica the search never tried (no price, more stages than
    layers) is built here, and one that cannot be is skipped. Then those of a release kvplan
    does not model itself whatever the configuration."""
    from kvplan.simulate.setup import release_notes

    notes = release_notes(request.emit, request.engine_version or "")
    for config in listed:
        found = released.get(config)
        if found is None:
            try:
                options = _options(spec, request, config, gpus[config.gpu_index])
                found = _release_of(build_replica(spec, gpus[config.gpu_index], options))
            except KvplanError:
                continue
        notes.extend(found)
    return unique(notes)


def _release_of(replica: Replica) -> tuple[Note, ...]:
    return tuple(n for n in replica.notes if n.id in RELEASE_NOTES)


def _parallel_flags(request: PlanRequest) -> dict:
    """The ServeOptions fields of the EP / DP options."""
    return {
        "enable_expert_parallel": request.enable_expert_parallel,
        "data_parallel_size": request.data_parallel_size,
        "ep_size": request.ep_size,
        "enable_dp_attention": request.enable_dp_attention,
        "enable_dp_lm_head": request.enable_dp_lm_head,
        "moe_dense_tp_size": request.moe_dense_tp_size,
        "nnodes": request.nnodes,
        "data_parallel_size_local": request.data_parallel_size_local,
    }


class _Inline:
    """An executor that runs each call at once, in this process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn, *args):
        import concurrent.futures as futures

        future: futures.Future = futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 (raised again by .result())
            future.set_exception(exc)
        return future


def _executor(workers: int):
    if workers <= 1:
        return _Inline()
    from kvplan.plans.workers import worker_pool

    return worker_pool(workers)  # its workers end with the run, however it ends


def _ordered(pool, calls: list[tuple]) -> list:
    futures = [pool.submit(*call) for call in calls]
    return [f.result() for f in futures]


def _wait_any(pending: dict) -> set:
    import concurrent.futures as futures

    finished, _ = futures.wait(list(pending), return_when=futures.FIRST_COMPLETED)
    return finished


class _Memo:
    """Runs of one group, by rate: a run with more seats stands for one with fewer wherever
    its running requests stayed below the smaller limit (the limit never bound), and for its
    own configuration (the same run)."""

    def __init__(self):
        self.runs: dict[float, tuple[_Outcome, int, int]] = {}  # outcome, peak running, seats

    def run(self, replica: Replica, requests, request: PlanRequest, rate: float) -> _Outcome:
        seats = replica.config.max_num_seqs
        known = self.runs.get(rate)
        if known is not None and (known[1] < seats or known[2] == seats):
            return known[0]
        timed = requests if math.isinf(rate) else _at_rate(requests, request, rate)
        outcome = _run(replica, timed, request, rate)
        self.runs[rate] = (outcome, outcome.peak_running, seats)
        return outcome


def saturate(spec, gpus, request, config: Config, requests):
    """A group's first configuration up to its saturated run: (its _Memo entry: the run's
    _Outcome, peak running, seats; None), or (None, the reason it was ruled out before one)."""
    prepared, _release = _prepare(spec, gpus, request, config, requests)
    if isinstance(prepared, str):
        return None, prepared
    replica, _price = prepared
    memo = _Memo()
    memo.run(replica, requests, request, math.inf)
    return memo.runs[math.inf], None


def evaluate_group(
    spec, gpus, request, group: list[Config], requests, saturated=None, bar=math.inf
) -> list:
    """Each configuration of a group (largest max_num_seqs first), with shared runs: (its
    outcome, its floor, its replica's release notes) (see evaluate); `saturated` is saturate()'s
    answer for the group's first configuration."""
    memo, bracket = _Memo(), None
    if saturated is not None and saturated[0] is not None:
        memo.runs[math.inf] = saturated[0]
    outcomes = []
    for config in group:
        outcome, cap, floor, release = evaluate(
            spec, gpus, request, config, requests, memo, bracket, bar
        )
        bracket = bracket or cap
        outcomes.append((outcome, floor, release))
    return outcomes


def evaluate(
    spec: ModelSpec,
    gpus: list[GpuProfile],
    request: PlanRequest,
    config: Config,
    requests: list[RequestSpec],
    memo: _Memo | None = None,
    bracket: float | None = None,
    bar: float = math.inf,
):
    """One configuration: (a Candidate, or the reason it cannot serve the targets; the rate the
    goodput search ended at; the floor; its replica's release notes, None where none was
    built). `requests` is the workload with every request at t = 0, re-timed for each rate;
    `bracket` caps the search (the group's largest saturated rate). The floor is the least
    $/hour the configuration can cost, from its goodput, or from the bisection's upper end where
    there is none (-inf where no run was needed); once a floor on the way there is above `bar`,
    the search stops and the outcome is PRUNED with it."""
    memo = memo or _Memo()
    prepared, release = _prepare(spec, gpus, request, config, requests)
    if isinstance(prepared, str):
        # a refusal before any run; the latency floor keeps the group's bracket
        kept = bracket if prepared.endswith("at zero load above its target") else None
        return prepared, kept, -math.inf, release
    replica, price = prepared
    searched = _search(spec, request, config, gpus, requests, replica, price, memo, bracket, bar)
    return (*searched, release)


def _search(spec, request, config, gpus, requests, replica, price, memo, bracket, bar):
    """evaluate's goodput search of a built replica: (outcome, cap, floor)."""
    gpu = gpus[config.gpu_index]

    def factors_of(outcome: _Outcome) -> dict | None:  # at its run's own interval
        return factors_for(spec, gpu, request, replica, run_untimed(replica, outcome.engine))

    cap = bracket
    if cap is None:
        saturated = memo.run(replica, requests, request, math.inf).bench
        if saturated.failed:  # refused by the server at every rate: never a good configuration
            return _refused(saturated, replica), None, -math.inf
        cap = saturated.request_throughput
        if cap <= 0:
            return "no request completed", None, -math.inf

    def floor(rate: float) -> float:  # goodput <= rate: at least this many replicas
        return _least_usd(request, config, price.usd_per_gpu_hour, rate)

    lo, hi = 0.0, cap
    best = None
    for _ in range(BISECTIONS):
        if floor(hi) > bar:
            return PRUNED, cap, floor(hi)
        rate = (lo + hi) / 2
        outcome = memo.run(replica, requests, request, rate)
        if outcome.bench.failed:  # the bracket came from another configuration's run
            return _refused(outcome.bench, replica), None, -math.inf
        if meets(outcome.bench, request.slos, factors_of(outcome)):
            lo, best = rate, outcome
        else:
            hi = rate
    if best is None:
        return "targets missed even at 1/32 of the saturated rate", cap, floor(hi)
    factors = factors_of(best)  # sized on the highest passing run's bound
    fractions = run_untimed(replica, best.engine)
    slow = factors["rate"] if factors else 1.0
    goodput = lo / slow  # the real rate that runs like the simulated `lo`
    least = floor(goodput)
    if least > bar:
        return PRUNED, cap, least
    replicas = math.ceil(request.rate / goodput - 1e-9)
    num_gpus = replicas * replica_gpus(request, config)
    if num_gpus > request.max_gpus:
        return f"more than {request.max_gpus} GPUs", cap, least
    checked = memo.run(replica, requests, request, request.rate / replicas * slow)
    if not meets(
        checked.bench, request.slos, factors_of(checked)
    ):  # between bisection points: one more
        replicas += 1
        num_gpus = replicas * replica_gpus(request, config)
    operating = memo.run(replica, requests, request, request.rate / replicas)
    usd_per_hour = num_gpus * price.usd_per_gpu_hour
    mean_in = sum(r.input_tokens for r in requests) / len(requests)
    mean_out = sum(r.output_tokens for r in requests) / len(requests)
    tokens_per_hour = request.rate * 3600 * (mean_in + mean_out)
    output_per_hour = request.rate * 3600 * mean_out
    b = operating.bench
    candidate = Candidate(
        gpu=gpu.name,
        gpu_key=gpu.key,
        tp=config.tp,
        pp=config.pp,
        kv_cache_dtype=config.kv_cache_dtype,
        **_server_limits(request, config, replica),
        kv_cache_tokens=replica.kv_cache_tokens,
        goodput_rps=goodput,
        replicas=replicas,
        num_gpus=num_gpus,
        usd_per_gpu_hour=price.usd_per_gpu_hour,
        price_read_on=price.read_on,
        price_source=price.source,
        usd_per_hour=usd_per_hour,
        usd_per_million_tokens=usd_per_hour / tokens_per_hour * 1e6,
        usd_per_million_output_tokens=usd_per_hour / output_per_hour * 1e6,
        operating_point=OperatingPoint(
            request.rate / replicas,
            b.median_ttft_ms,
            b.p99_ttft_ms,
            b.median_tpot_ms,
            b.p99_tpot_ms,
            b.p99_itl_ms,
            b.p99_e2el_ms,
            operating.engine.peak_kv_usage,
            operating.engine.preemptions,
        ),
        max_model_len=replica.options.max_model_len,
        speculative=_spec_flags(replica, request.emit),
        layout_flags=launch_layout_flags(replica.options),
        spec_tokens_per_round=replica.speculation.tokens_per_round
        if replica.speculation is not None
        else None,
        interval_class=_evidence(spec, gpu, request, replica, fractions),
        untimed_parts=_untimed_parts(replica, fractions),
        factors=factors,
        untimed_fractions=None
        if factors is None
        else (fractions.time_fraction, fractions.ttft_fraction, fractions.request_fraction),
    )
    return candidate, cap, least


def _server_limits(request: PlanRequest, config: Config, replica: Replica) -> dict[str, int]:
    """max_num_seqs and max_num_batched_tokens as the launch command passes them. SGLang under
    --enable-dp-attention divides both among its DP ranks (--max-running-requests in
    tp_worker.py, --chunked-prefill-size in server_args._handle_data_parallelism), which the
    replica ran as each rank's: the command carries the server's values, the configuration's."""
    if request.emit == "sglang" and request.enable_dp_attention and request.data_parallel_size > 1:
        return {
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": config.max_num_batched_tokens,
        }
    seqs, tokens = replica.options.max_num_seqs, replica.options.max_num_batched_tokens
    assert seqs is not None and tokens is not None, "a built replica resolves both"
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}


def _spec_flags(replica: Replica, engine: str) -> list[str] | None:
    if replica.speculation is None:
        return None
    from kvplan.simulate.speculative import launch_flags

    return launch_flags(replica.speculation.request, engine, replica.speculation.draft_id)


def _prepare(spec, gpus, request: PlanRequest, config: Config, requests):
    """(A configuration's replica and price, or the reason it is ruled out before any run; the
    release notes of its replica: none where the build was refused, None where none was
    tried)."""
    gpu = gpus[config.gpu_index]
    price = price_for(gpu, request.prices)
    if price is None:
        return f"no price for {gpu.name} (give --price {gpu.key}=USD)", None
    options = _options(spec, request, config, gpu)
    try:
        if config.pp > spec.num_layers:
            return "more pipeline stages than layers", None
        replica = build_replica(spec, gpu, options)
    except KvplanError as exc:
        return _reason(str(exc)), ()  # built, and refused: no notes
    release = _release_of(replica)
    replica = replica._replace(config=without_idle_caching(replica.config, requests))
    floor, untimed = latency_floor(replica, requests, request.frontend)
    factors = factors_for(spec, gpu, request, replica, untimed) or {}
    for slo in request.slos:
        if slo.metric in floor and floor[slo.metric] * factors.get(slo.metric, 1) > slo.limit_s:
            return f"{slo.metric} at zero load above its target", release
    return (replica, price), release


def _options(
    spec: ModelSpec, request: PlanRequest, config: Config, gpu: GpuProfile
) -> ServeOptions:
    """The serve options one configuration is simulated with, on `gpu` (its gpu_index's)."""
    options = ServeOptions(
        tp=config.tp,
        pp=config.pp,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=request.max_model_len,
        kv_cache_dtype=config.kv_cache_dtype,  # both engines' simulations take fp8
        async_scheduling=request.async_scheduling,
        engine=request.emit,
        **release_fields(request),
        mem_fraction_static=request.mem_fraction_static,
        **_parallel_flags(request),
        decode_context_parallel_size=request.decode_context_parallel_size,
        enforce_eager=request.enforce_eager,
        piecewise=_launch_piecewise(spec, request),
        backends=request.backends,
        mamba_scheduler_strategy=request.mamba_scheduler_strategy,
        **_layout_fields(spec, request, config.speculative),
    )
    return _speculative_radix(spec, gpu, options)


def _speculative_radix(spec: ModelSpec, gpu: GpuProfile, options: ServeOptions) -> ServeOptions:
    """`options` with --disable-radix-cache where SGLang runs this speculating hybrid without
    its radix cache, or refuses to start with it (engines.sglang.speculative_radix_off: the
    no_buffer strategy, given or resolved; from 0.5.10 SGLang raises, PR #19391): the mamba
    strategy resolved on `gpu` as simulate and `kvplan engine` resolve it
    (setup.sglang_mamba_strategy). Where SGLang's default auto resolves extra_buffer
    (0.5.14+, the listed architectures, CUDA) the radix cache stays and no flag is added; where
    that resolution is refused (auto's extra_buffer off CUDA, a page it asserts against), the
    launch starts only without the radix cache, so the flag is added."""
    from kvplan.engines.sglang import speculative_radix_off
    from kvplan.simulate.setup import sglang_mamba_strategy
    from kvplan.simulate.speculative import requested

    if options.engine != "sglang" or options.enable_prefix_caching is False:
        return options
    if not speculative_radix_off(spec, options.sglang_version, options.mamba_scheduler_strategy):
        return options
    try:
        speculating = requested(spec, options) is not None
    except KvplanError:  # the replica's build refuses it in its own words (_prepare)
        return options
    if not speculating:
        return options
    try:
        kept = sglang_mamba_strategy(spec, gpu, options).auto == "extra_buffer"
    except KvplanError:
        kept = False
    return options if kept else options._replace(enable_prefix_caching=False)


def _launch_piecewise(spec: ModelSpec, request: PlanRequest) -> PiecewiseFlags:
    """The piecewise flags with the --context-length the plan's command carries, given or not
    (present.plan serve_command: the resolved length), which SGLang 0.5.13-0.5.16 cap the
    piecewise graphs to (engines.sglang.piecewise_max_tokens): the replica `simulate` builds
    when given that length."""
    from kvplan.simulate.setup import ServeOptions, resolved_max_model_len

    if request.emit != "sglang":
        return request.piecewise
    options = ServeOptions(
        max_model_len=request.max_model_len, engine=request.emit, **release_fields(request)
    )
    return request.piecewise._replace(context_length=resolved_max_model_len(spec, options))


def _layout_fields(spec: ModelSpec, request: PlanRequest, index: int) -> dict:
    """The ServeOptions fields of speculative layout `index` (0: none), with
    --disable-radix-cache (given: every configuration's) and --speculative-skip-dp-mlp-sync
    (given: every speculative layout's)."""
    fields: dict = {}
    if request.disable_radix_cache:
        fields["enable_prefix_caching"] = False
    if request.speculative_skip_dp_mlp_sync and index > 0:
        fields["speculative_skip_dp_mlp_sync"] = True
    return {**fields, **speculative_layouts(spec, request)[index]}


def _check_sglang_flags(spec: ModelSpec, request: PlanRequest) -> None:
    """--disable-radix-cache and --speculative-skip-dp-mlp-sync where SGLang takes them:
    refused before searching for --emit vllm, and the latter without DP attention or without
    an EAGLE/NEXTN layout to search (SGLang asserts EAGLE; kvplan.simulate.speculative). An
    --emit sglang release without a model of its own for the checkpoint's architecture is
    refused before searching too (the allocation's check_sglang_own_model: it used to rule out
    every configuration, one by one, and answer "none meet the targets")."""
    if request.emit == "sglang":
        from kvplan.engines.sglang import check_sglang_own_model

        check_sglang_own_model(spec, ServeOptions(**release_fields(request)).sglang_version)
    for given, flag in (
        (request.disable_radix_cache, "--disable-radix-cache"),
        (request.speculative_skip_dp_mlp_sync, "--speculative-skip-dp-mlp-sync"),
        (request.mamba_scheduler_strategy is not None, "--mamba-scheduler-strategy"),
    ):
        if given and request.emit != "sglang":
            raise KvplanError(f"{flag} is SGLang's: give --emit sglang")
    if request.mamba_scheduler_strategy is not None:
        from kvplan.engines.sglang import check_mamba_strategy_given

        version = ServeOptions(**release_fields(request)).sglang_version
        check_mamba_strategy_given(spec, request.mamba_scheduler_strategy, version)
    if not request.speculative_skip_dp_mlp_sync:
        return
    from kvplan.engines.sglang import check_skip_dp_mlp_sync_release

    check_skip_dp_mlp_sync_release(ServeOptions(**release_fields(request)).sglang_version)
    if not (request.enable_dp_attention and request.data_parallel_size > 1):
        raise KvplanError(
            "--speculative-skip-dp-mlp-sync skips DP attention's sync: give --dp-size N "
            "--enable-dp-attention"
        )
    layouts = speculative_layouts(spec, request)[1:]
    algorithms = {str(x.get("speculative_algorithm") or "").strip().upper() for x in layouts}
    if not algorithms or not algorithms <= {"EAGLE", "NEXTN"}:
        raise KvplanError(
            "--speculative-skip-dp-mlp-sync is SGLang's, with --speculative-algorithm EAGLE "
            "(or NEXTN) only: give one, or plan a model with MTP layers"
        )


def _reason(message: str) -> str:
    """A refusal from building the replica, as a short reason that groups well."""
    if "does not divide" in message or "neither divides" in message:
        return "TP does not divide the heads"
    if "no memory is left" in message or "cannot hold one" in message:
        return "weights, the profile run or one max-length request do not fit"
    if "GPUs on one node" in message:
        return "more GPUs on a node than the profile's gpus_per_node"
    if "do not split evenly over" in message:
        return "the GPUs do not split evenly over the nodes"
    if message.startswith("without chunked prefill"):  # V0's default below 32,768 tokens
        return "chunked prefill off and a token budget below max_model_len"
    return message.split(";")[0][:80]


def _at_rate(requests: list[RequestSpec], request: PlanRequest, rate: float) -> list[RequestSpec]:
    """The same requests, sent on the bench's schedule at `rate`."""
    w = request.workload
    times = arrival_times_s(len(requests), rate, w.burstiness, workload_seed(w) + 1)
    return [r._replace(arrival_s=t) for r, t in zip(requests, times, strict=True)]


class _Outcome(NamedTuple):
    bench: metrics.BenchResult
    engine: metrics.EngineStats
    peak_running: int


def _run(replica: Replica, requests: list[RequestSpec], request: PlanRequest, rate) -> _Outcome:
    """One replica simulated. Where no prompt shares a token stream, a counted pool stands in
    for the prefix cache until a sequence it freed comes back (most runs never preempt); then
    the run is redone with the real one, so the outcome is the same either way."""
    demand = pool_demand(replica.config, requests)
    return with_stand_in(
        replica.config,
        requests,
        lambda stand_in: _simulate(replica, requests, request, rate, demand, stand_in),
    )


def _simulate(replica, requests, request: PlanRequest, rate, demand, stand_in) -> _Outcome:
    layout = replica.layout  # DP ranks: one engine each, routed as the engine routes them
    ranks = 1 if layout is None else layout.dp * layout.dp_replicas
    engines = [
        make_engine(replica, request.frontend.per_token_s, demand, stand_in) for _ in range(ranks)
    ]
    engine = engines[0]
    run = cluster.run(
        requests,
        engines,
        router="round_robin" if layout is None else layout.router,
        # the API server as simulate runs it: SGLang's serial part, one per replica
        frontend=engine_frontend(request.emit, request.frontend),
        context=replica.context,
        servers=cluster.api_servers(len(engines), layout),
    )
    bench = metrics.bench_result(run, rate, request.workload.burstiness, None)
    stats = metrics.engine_stats(  # as simulate's (its TTFT's untimed share too)
        run,
        bench.duration,
        request.frontend.per_token_s,
        bench.median_ttft_ms,
        request.frontend.request_s,
    )
    return _Outcome(bench, stats, max(engine.log.running, default=0))


def _refused(bench: metrics.BenchResult, replica: Replica) -> str:
    """The reason a configuration whose server refuses requests (HTTP 400: prompt + output
    past max_model_len, kvplan.engines.context_limit) is listed, not ranked."""
    assert replica.context is not None, "a refusal comes from the replica's rule"
    total = bench.failed + bench.completed
    limit = replica.context.prompt_limit
    return (
        f"{bench.failed:,} of {total:,} requests refused (prompt + output past max_model_len "
        f"{replica.context.max_model_len:,}"
        + ("" if limit is None else f", or a prompt of {limit:,} tokens or more")
        + ")"
    )


def meets(bench: metrics.BenchResult, slos: tuple[Slo, ...], factors: dict | None = None) -> bool:
    """Every request completed and every target holds (each latency times its pessimistic
    factor, where the plan has a confidence)."""
    if bench.failed:
        return False
    for slo in slos:
        value = getattr(bench, slo.key)
        if value is None or value * MS * (factors or {}).get(slo.metric, 1) > slo.limit_s:
            return False
    return True


def latency_floor(
    replica: Replica, requests: list[RequestSpec], frontend: Frontend
) -> tuple[dict, intervals.Untimed]:
    """A lone request of the workload's mean lengths: TTFT (API latency + its prefill steps)
    and TPOT (a one-sequence decode step plus its streamed token); and its untimed fractions
    as a run's EngineStats give them (run_untimed: the decode step's untimed share, the
    TTFT's; metrics.untimed_share, metrics.ttft_untimed_share)."""
    model, config = replica.model, replica.config
    mean_in = round(sum(r.input_tokens for r in requests) / len(requests))
    prefill_s, fixed_s, done = 0.0, 0.0, 0
    while done < mean_in:
        chunk = min(config.max_num_batched_tokens, mean_in - done)
        step = model.step(BatchShape(0, 0, ((chunk, done),), 1))
        prefill_s += step.total_s
        fixed_s += critical_fixed_s(step)
        done += chunk
    decode = model.step(BatchShape(1, mean_in + 1, (), 1))
    ttft = frontend.request_s + prefill_s + frontend.per_token_s
    untimed = intervals.Untimed(
        replica.options.engine,
        metrics.untimed_share(decode.untimed_s, decode.total_s),
        metrics.ttft_untimed_share(ttft, frontend.request_s, prefill_s, fixed_s),
    )
    return {"ttft": ttft, "tpot": decode.total_s, "itl": decode.total_s}, untimed
