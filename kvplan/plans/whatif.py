"""`kvplan whatif`: price each KV-cache technique by the term of the formula it moves, in bytes
stored, in bytes read per decode step, in time (the ceiling BW / (s * k), the TPOT and TTFT floors
through kvplan.formulas.step_time) and in users on a GPU (kvplan.plans.capacity's budget).

The techniques themselves (syntax, terms, what each does to the model) are in
kvplan.plans.whatif_techniques; the scheduling group changes no byte and is pointed to
`kvplan simulate`.
"""

from __future__ import annotations

import math

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.dtypes import resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.roofline import ceiling_tokens_per_s, compute_dtype
from kvplan.formulas.step_time import (
    Op,
    Rates,
    StepTime,
    decode_step,
    floor_step,
    floor_sums,
    prefill_step,
    time_floor_s,
)
from kvplan.formulas.techniques import (
    expected_tokens_per_round,
    lowrank_reconstruction_op,
    speculative_time_per_token_s,
    verify_step,
)
from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique
from kvplan.plans.common import budget_note, checkpoint_kv_note, model_notes
from kvplan.plans.deployment import choose_deployment, gpus_per_node
from kvplan.plans.pool import budget, max_sequences
from kvplan.plans.roofline import rates as device_rates
from kvplan.plans.whatif_techniques import (
    RECURRENT_GROUPS,
    RECURRENT_HEAD_DIM,
    RECURRENT_STATE_SIZE,
    SCHEDULING,
    Context,
    NotApplicable,
    Scenario,
    Stacking,
    Technique,
    default_apply,
    find_draft,
    parse_combination,
    parse_technique,
    read_bytes_per_token,
    scenario,
    stack,
    stored_bytes,
    stored_model,
)
from kvplan.record import NamedTuple


# ---- the request and the result ----------------------------------------------------------------
class WhatIfRequest(NamedTuple):
    context_len: int = 131072
    batch_sizes: tuple[int, ...] = (1,)
    apply: tuple[str, ...] = ()  # empty: every technique of the chapter, with default settings
    kv_dtype: str = "auto"
    kv_group_size: int = 32
    keep_sink: int = 4  # int3/int2: attention-sink tokens kept in full precision
    keep_recent: int = 128  # int3/int2: most recent tokens kept in full precision
    tp: int | None = None  # None: the smallest TP at which one baseline sequence fits
    gpu_mem_util: float = 0.9
    weights_dtype: str = "auto"
    block_size: int = 16
    spec_tokens: int = 4  # k drafted tokens per round
    spec_acceptance: float = 0.7  # probability that the target accepts one drafted token


class WhatIfRow(NamedTuple):
    technique: str
    batch_size: int
    kinds: tuple[str, ...]  # the technique kinds in the row (empty for the baseline)
    terms: tuple[str, ...]
    lossless: bool
    stacking: Stacking
    kv_bytes: int  # stored by batch_size sequences, all ranks
    factor: float | None  # baseline kv_bytes / kv_bytes
    kv_read_bytes: float  # read to give each of batch_size sequences one token, all ranks
    read_factor: float | None  # baseline kv_read_bytes / kv_read_bytes
    ceiling_tokens_per_s: float | None  # BW / (s * k) per TP group: the rate no batch beats
    max_concurrency: int  # sequences that fit on the GPUs (tp of them)
    batch_fits: int  # the batch TPOT is priced at: min(batch_size, max_concurrency)
    tpot_floor_s: float | None  # decode time per output token at batch_fits (None: none fits)
    tokens_per_s: float | None  # batch_fits / tpot_floor_s
    step_bound: str | None  # what limits the decode (or verification) step: memory | compute
    step_intensity_flop_per_byte: float | None  # that step's FLOPs / bytes (ridge: peak / BW)
    ttft_floor_s: float  # prefill of one sequence (a prefix hit: only the rest)
    held_tokens: int  # tokens each sequence's cache holds (evicted, windowed, paged=N, +k drafted)
    contiguous_concurrency: int | None = None  # paged: sequences a contiguous reservation fits
    draft: str | None = None  # spec: the draft model
    tokens_per_round: float | None = None  # spec: expected tokens per verification


class SchedulingRow(NamedTuple):
    technique: str
    terms: tuple[str, ...] = ()  # none: same bytes, better occupancy
    measured_by: str = "kvplan simulate"


class Skipped(NamedTuple):
    technique: str
    reason: str


class WhatIfResult(NamedTuple):
    kvplan_version: str
    model: dict
    gpu: str
    tp: int
    context_len: int
    batch_sizes: tuple[int, ...]
    kv_dtype: str
    weights_dtype: str
    kv_pool_bytes_per_gpu: float
    rows: list[WhatIfRow]
    scheduling: list[SchedulingRow]
    skipped: list[Skipped]
    notes: tuple[Note, ...]


# ---- pricing ------------------------------------------------------------------------------------
class Pricer(NamedTuple):
    """The deployment every scenario is priced on."""

    context_len: int
    gpu: GpuProfile
    rates: Rates
    tp: int
    pool: float  # KV pool per GPU
    wdtype: str
    draft_wdtype: str
    block_size: int


def _with_ops(step: StepTime, ops: list[Op], rates: Rates) -> StepTime:
    """The floor step with more operators in its list (their floor sums added to its own)."""
    extra_flops, extra_bytes = floor_sums([(ops, 1)])
    flops, num_bytes = step.counts()
    assert step.batch_size is not None and step.context_len is not None, "a floor step"
    return floor_step(
        step.batch_size, step.context_len, flops + extra_flops, num_bytes + extra_bytes, rates
    )


def decode_time(p: Pricer, sc: Scenario, batch_size: int) -> tuple[float, StepTime]:
    """(time per output token of one sequence, the decode step; with a draft, the verification);
    a low-rank cache adds its key rebuild to the step's operators."""

    def rebuild(tokens: int) -> list[Op]:
        if not sc.lowrank:
            return []
        return [lowrank_reconstruction_op(sc.read, sc.read_tokens, tokens, p.tp)]

    if sc.draft is None:
        step = decode_step(sc.read, p.rates, batch_size, sc.read_tokens, p.wdtype, sc.fmt, p.tp)
        step = _with_ops(step, rebuild(batch_size), p.rates)
        return step.total_s, step
    k = sc.draft_tokens
    draft = decode_step(sc.draft, p.rates, batch_size, sc.read_tokens, p.draft_wdtype, sc.fmt, p.tp)
    verify = verify_step(
        sc.read, p.rates, batch_size, sc.read_tokens, p.wdtype, sc.fmt, k + 1, p.tp
    )
    verify = _with_ops(verify, rebuild(batch_size * (k + 1)), p.rates)
    tpot = speculative_time_per_token_s(draft.total_s, verify.total_s, k, sc.acceptance)
    return tpot, verify


def prefill_time_s(p: Pricer, sc: Scenario) -> float:
    """Prefill floor of one sequence of --ctx tokens; with a prefix hit, only the tokens after it
    (the FLOPs of the whole less those of the prefix but its head: the hit computes no logits, the
    rest its last token's; the prefix's cache is still read)."""
    models = [(sc.read, p.wdtype)] + ([(sc.draft, p.draft_wdtype)] if sc.draft else [])
    total = 0.0
    for model, wdtype in models:
        whole = prefill_step(model, p.rates, p.context_len, wdtype, sc.fmt, p.tp)
        if sc.prefix_tokens:
            cached = prefill_step(model, p.rates, sc.prefix_tokens, wdtype, sc.fmt, p.tp)
            flops, num_bytes = whole.counts()
            hit_flops = cached.counts()[0] - 2 * model.head_params / p.tp
            total += time_floor_s(num_bytes, flops - hit_flops, p.rates)
        else:
            total += whole.total_s
    return total


def concurrency(p: Pricer, sc: Scenario, context_len: int, block_size: int) -> int:
    """Sequences that fit in the KV pool (a draft's weights and cache taken from it)."""
    model, pool = stored_model(sc), p.pool
    if sc.draft is not None:
        pool -= weights_bytes_per_gpu(sc.draft, p.draft_wdtype, p.tp)
    if pool <= 0:
        return 0
    return max_sequences(
        pp_stages(model, 1), pool, context_len, sc.fmt, p.tp, block_size, sc.prefix_tokens
    )


class Priced(NamedTuple):
    """What a scenario costs, apart from the batch."""

    scenario: Scenario
    max_concurrency: int
    ceiling_tokens_per_s: float | None
    ttft_floor_s: float
    contiguous_concurrency: int | None


def price(p: Pricer, sc: Scenario) -> Priced:
    for model, what in ((sc.store, ""), (sc.draft, "the draft: ")):
        if model is not None:
            try:
                model.check_tp(p.tp)
            except KvplanError as exc:
                raise NotApplicable(f"{what}{exc}") from None
    read = read_bytes_per_token(sc, p.tp)
    contiguous = None
    if sc.reservation_tokens is not None:  # a contiguous allocator reserves whole sequences
        contiguous = concurrency(p, sc, sc.reservation_tokens, 1)
    return Priced(
        sc,
        concurrency(p, sc, sc.held_tokens or sc.store_tokens, p.block_size),
        ceiling_tokens_per_s(p.gpu.memory_bandwidth_bytes_per_s, read) if read else None,
        prefill_time_s(p, sc),
        contiguous,
    )


def _row(
    p: Pricer,
    name: str,
    techniques: list[Technique],
    stacking: Stacking,
    priced: Priced,
    baseline: dict[int, tuple[int, float]],
    batch_size: int,
) -> WhatIfRow:
    sc = priced.scenario
    kv = stored_bytes(sc, batch_size)
    read = batch_size * read_bytes_per_token(sc)
    base_kv, base_read = baseline.get(batch_size, (kv, read))
    fits = min(batch_size, priced.max_concurrency)
    # Paging moves capacity only: its step is the baseline's (sequences at --ctx, as many as a
    # contiguous reservation fits).
    timed = (
        fits if priced.contiguous_concurrency is None else min(fits, priced.contiguous_concurrency)
    )
    tpot, step = decode_time(p, sc, timed) if timed else (None, None)
    return WhatIfRow(
        technique=name,
        batch_size=batch_size,
        kinds=tuple(t.kind for t in techniques),
        terms=tuple(dict.fromkeys(term for t in techniques for term in t.terms)),
        lossless=all(t.lossless for t in techniques),
        stacking=stacking,
        kv_bytes=kv,
        factor=base_kv / kv if kv else None,
        kv_read_bytes=read,
        read_factor=base_read / read if read else None,
        ceiling_tokens_per_s=priced.ceiling_tokens_per_s,
        max_concurrency=priced.max_concurrency,
        batch_fits=timed,
        tpot_floor_s=tpot,
        tokens_per_s=timed / tpot if tpot else None,
        step_bound=step.bound if step else None,
        step_intensity_flop_per_byte=step.intensity if step else None,
        ttft_floor_s=priced.ttft_floor_s,
        held_tokens=sc.held_tokens or sc.store_tokens,
        contiguous_concurrency=priced.contiguous_concurrency,
        draft=sc.draft.name if sc.draft is not None else None,
        tokens_per_round=(
            expected_tokens_per_round(sc.draft_tokens, sc.acceptance)
            if sc.draft is not None
            else None
        ),
    )


def validate(request: WhatIfRequest) -> None:
    if not request.batch_sizes or min(request.batch_sizes) < 1:
        raise KvplanError("--batch must be at least 1")
    if not 0 <= request.keep_sink <= 1 << 20 or not 0 <= request.keep_recent <= 1 << 20:
        raise KvplanError("--keep-sink and --keep-recent must be between 0 and 1048576 tokens")
    if not 1 <= request.spec_tokens <= 64:
        raise KvplanError(f"--spec-tokens {request.spec_tokens} must be between 1 and 64")
    if not 0 <= request.spec_acceptance <= 1 or math.isnan(request.spec_acceptance):
        raise KvplanError(f"--spec-accept {request.spec_acceptance} must be between 0 and 1")
    if not 0.05 <= request.gpu_mem_util <= 1:
        raise KvplanError(f"--gpu-mem-util {request.gpu_mem_util} must be between 0.05 and 1")
    if not 1 <= request.block_size <= 4096:
        raise KvplanError(f"--block-size {request.block_size} must be between 1 and 4096")


def _whatif_tp(
    spec: ModelSpec, gpu: GpuProfile, wdtype: str, fmt, context_len: int, gpu_mem_util: float
) -> tuple[int, list[Note]]:
    """whatif prices one TP group: the smallest TP within a node at which one sequence fits;
    past the node, the smallest TP across nodes that fits (said so: engines would use PP)."""
    try:
        choice = choose_deployment(spec, gpu, wdtype, fmt, context_len, gpu_mem_util, tp_only=True)
        notes = [n for n in choice.notes if n.id == "node-size-assumed"]
        tp = choice.deployment.tp
        return tp, [note("whatif-tp-auto", tp=tp, gpu=gpu.name, context_len=context_len), *notes]
    except KvplanError:
        pass
    node = gpus_per_node(gpu)[0]
    tp = node * 2
    while tp <= 1024 and gpu.interconnect is not None:
        try:
            choice = choose_deployment(spec, gpu, wdtype, fmt, context_len, gpu_mem_util, tp=tp)
        except KvplanError:  # the heads do not split that way
            tp *= 2
            continue
        if choice.users >= 1:
            return tp, [
                note("whatif-tp-auto", tp=tp, gpu=gpu.name, context_len=context_len),
                *choice.notes,
            ]
        tp *= 2
    return 1, [note("whatif-no-fit", gpu=gpu.name, context_len=context_len)]


def whatif(spec: ModelSpec, gpu: GpuProfile, request: WhatIfRequest) -> WhatIfResult:
    """The Python twin of `kvplan whatif MODEL --gpu GPU`."""
    validate(request)
    s = request.context_len
    fmt = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    if kv_bytes_per_sequence(spec, s, fmt) <= 0:
        raise KvplanError(
            f"{spec.name} keeps no KV cache: there is nothing for a technique to save"
        )
    explicit = bool(request.apply)
    items = request.apply or default_apply(spec, s)
    notes: list[Note | None] = []

    combos: list[list[Technique]] = []
    scheduling: list[SchedulingRow] = []
    for item in items:
        names = parse_combination(item)
        if any(n.strip().lower() in SCHEDULING for n in names):
            if len(names) > 1:
                raise KvplanError(
                    f"--apply {item!r}: {', '.join(SCHEDULING)} change no term of the cache; "
                    "apply them alone (kvplan simulate measures them)"
                )
            scheduling.append(SchedulingRow(names[0].strip().lower()))
            continue
        combos.append([parse_technique(n) for n in names])
    singles = [c[0] for c in combos if len(c) == 1]
    # several singles and no combination: price the ones that apply together
    together = explicit and len(singles) > 1 and len(singles) == len(combos)

    draft = _draft(spec, combos)
    ctx = Context(
        spec,
        s,
        fmt,
        request.kv_group_size,
        request.keep_sink + request.keep_recent,
        draft,
        request.spec_tokens,
        request.spec_acceptance,
    )
    tp = request.tp
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    if tp is None:
        tp, tp_notes = _whatif_tp(spec, gpu, wdtype, fmt, s, request.gpu_mem_util)
        notes += tp_notes
    spec.check_tp(tp)
    draft_wdtype = resolve_weights_dtype(draft, request.weights_dtype)[0] if draft else wdtype
    plan = budget(spec, gpu, wdtype, tp=tp, gpu_mem_util=request.gpu_mem_util)
    pricer = Pricer(
        s,
        gpu,
        device_rates(gpu, compute_dtype(wdtype)),
        tp,
        max(0.0, plan.pool_bytes),
        wdtype,
        draft_wdtype,
        request.block_size,
    )

    base = price(pricer, scenario(ctx, []))
    baseline = {
        b: (stored_bytes(base.scenario, b), b * read_bytes_per_token(base.scenario))
        for b in request.batch_sizes
    }
    singles_bytes = max(request.batch_sizes)
    priced: list[tuple[str, list[Technique], Stacking, Priced]] = [
        ("baseline", [], Stacking(""), base)
    ]
    skipped: list[Skipped] = []

    def strength(t: Technique) -> tuple[int, float]:
        sc = scenario(ctx, [t])
        return stored_bytes(sc, singles_bytes), read_bytes_per_token(sc)

    def add(parts: list[Technique]) -> None:
        name = " + ".join(t.name for t in parts)
        try:
            for t in parts:  # each technique must apply alone
                scenario(ctx, [t])
            used, stacking = stack(parts, strength)
            priced.append((name, parts, stacking, price(pricer, scenario(ctx, used))))
        except NotApplicable as exc:
            skipped.append(Skipped(name, str(exc)))

    for parts in combos:
        add(parts)
    applicable = [t for t in singles if t.name not in {s.technique for s in skipped}]
    if together and len(applicable) > 1:
        add(applicable)

    rows = [
        _row(pricer, name, parts, stacking, p, baseline, b)
        for b in request.batch_sizes
        for name, parts, stacking, p in priced
    ]
    for _, _, _, p in priced[1:]:  # a conversion can leave fewer KV heads than TP ranks
        replicated = ("tp-kv-replicated", "tp-mla-replicated")
        notes += [n for n in model_notes(p.scenario.store, tp) if n.id in replicated]
    kinds = {k for _, parts, _, _ in priced for k in (t.kind for t in parts)}
    formats = {p.scenario.fmt for _, _, _, p in priced}
    notes += model_notes(spec, tp) + wnotes
    notes.append(checkpoint_kv_note(spec, fmt.name))
    notes.append(budget_note(gpu, request.gpu_mem_util, plan.reserve_bytes, False))
    notes.append(
        note(
            "roofline-peaks",
            dtype=compute_dtype(wdtype),
            peak_flop_per_s=pricer.rates.peak_flop_per_s,
            bandwidth_bytes_per_s=pricer.rates.bandwidth_bytes_per_s,
        )
    )
    notes.append(note("whatif-terms"))
    notes.append(note("whatif-time", tp=tp))
    notes += [f.note for f in sorted(formats, key=lambda f: f.name)]
    for kind in sorted(kinds):
        notes.append(_kind_note(kind, request, ctx))
    if spec.has_kind(CacheKind.MLA):
        notes.append(note("whatif-mla"))
    if spec.has_kind(CacheKind.STATE):
        notes.append(note("whatif-state"))
    if scheduling:
        notes.append(note("whatif-scheduling"))
    notes.append(note("whatif-order"))
    return WhatIfResult(
        __version__,
        {"name": spec.name},
        gpu.name,
        tp,
        s,
        tuple(request.batch_sizes),
        fmt.name,
        wdtype,
        plan.pool_bytes,
        rows,
        scheduling,
        skipped,
        unique(notes),
    )


def _draft(spec: ModelSpec, combos: list[list[Technique]]) -> ModelSpec | None:
    named = {t.value for parts in combos for t in parts if t.kind == "spec"}
    if not named:
        return None
    if len(named) > 1:
        raise KvplanError("--apply: one draft model per run (spec=MODEL)")
    (name,) = named
    if name is None:
        return find_draft(spec)
    from kvplan.inputs.sources import load_model

    return load_model(name)


def _kind_note(kind: str, request: WhatIfRequest, ctx: Context) -> Note | None:
    """The note that says what pricing `kind` assumes."""
    if kind == "spec" and ctx.draft is not None:
        return note(
            "whatif-spec",
            draft=ctx.draft.name,
            tokens=request.spec_tokens,
            acceptance=request.spec_acceptance,
            per_round=expected_tokens_per_round(request.spec_tokens, request.spec_acceptance),
        )
    if kind == "recurrent":
        return note(
            "whatif-recurrent",
            head_dim=RECURRENT_HEAD_DIM,
            state_size=RECURRENT_STATE_SIZE,
            groups=RECURRENT_GROUPS,
        )
    simple = {
        "cla": note("whatif-cla"),
        "prefix": note("whatif-prefix"),
        "sparse_read": note("whatif-sparse-read"),
        "lowrank": note("whatif-lowrank"),
        "mla": note("whatif-mla-convert"),
        "cyclic": note("whatif-cyclic"),
        "paged": note("whatif-paged"),
    }
    return simple.get(kind)
