"""Deployments as engines run them, and the one kvplan plans with when none is given.

- Tensor parallelism (TP) stays within a node (the profile's `gpus_per_node`: the GPUs its
  interconnect joins); TP must divide the query heads and divide, or be a multiple of, the KV heads.
- Past one node, pipeline stages (PP) split the layers across nodes, at the node's full TP.
- MoE models may instead run attention data-parallel (DP attention) over N ranks with the routed
  experts spread over the same ranks (expert parallelism, EP): vLLM's `-dp N
  --enable-expert-parallel`, SGLang's `--enable-dp-attention`. Each rank holds every weight but
  the experts, 1/N of the experts, and its own requests' cache whole. Under TP, an MLA latent (and
  a KV head when TP exceeds the KV heads) is copied to every rank; under DP attention each rank
  keeps different requests, so the same memory holds several times the sequences.

The choice when nothing is fixed: the fewest GPUs at which one sequence of the context fits;
among deployments of that size, the one that holds the most sequences (ties: plain TP, then
fewer pipeline stages). For a number of users (--users): replicas of the layout that serves them
on the fewest GPUs in all, a replica spanning no more nodes than the smallest layout that fits.
For a number of GPUs (--num-gpus N, "I have N GPUs"): the layout whose replicas on those N GPUs
hold the most sequences (8 H100s for Llama-3.1-70B at 32k: one TP 8 holds 40, two TP 4 hold 26);
ties: the fewest GPUs left idle, then plain TP, then fewer stages.
Everything the user fixes (--tp, --pp, --dp-attention) is kept.
"""

from __future__ import annotations

from kvplan.anatomy.model import CacheKind, ModelSpec, kept_with, pp_stages
from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note
from kvplan.plans.pool import Budget, budget, max_sequences
from kvplan.record import NamedTuple

DEFAULT_GPUS_PER_NODE = 8
MAX_NODES = 16  # the largest replica the automatic choice considers
MAX_PP = 16


class Deployment(NamedTuple):
    """One replica's layout. `dp_attention` > 1: attention data-parallel over that many ranks
    (TP 1 and one stage each), the routed experts spread over them (EP)."""

    tp: int = 1
    pp: int = 1
    dp_attention: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp_attention

    @property
    def expert_parallel(self) -> bool:
        return self.dp_attention > 1


class Candidate(NamedTuple):
    deployment: Deployment
    users: int  # sequences of the context one replica holds
    budget: Budget  # one rank's (the KV pool per GPU: budget.pool_bytes)


class DeploymentChoice(NamedTuple):
    deployment: Deployment
    users: int
    gpus_per_node: int
    nodes: int  # nodes one replica spans
    chosen_by: str  # given | fewest-gpus | most-users | fewest-total-gpus | most-users-on-gpus
    weighed: tuple[Candidate, ...]  # the other deployments of the same size, most users first
    notes: tuple[Note, ...]
    budget: Budget  # one rank's budget on `deployment` (its pool holds `users` per replica)


def gpus_per_node(gpu: GpuProfile) -> tuple[int, list[Note]]:
    """The profile's node size, or the common 8 with a note saying it was assumed."""
    if gpu.gpus_per_node:
        return gpu.gpus_per_node, []
    return DEFAULT_GPUS_PER_NODE, [note("node-size-assumed", gpu=gpu.name, gpus=8)]


def check_deployment(spec: ModelSpec, d: Deployment) -> None:
    """The layout must be one the model's shapes allow (one-line errors otherwise)."""
    if d.dp_attention > 1:
        if spec.moe is None:
            raise KvplanError(
                f"--dp-attention needs a mixture-of-experts model ({spec.name} has no experts): "
                "for a dense model, serve more replicas"
            )
        if d.tp != 1 or d.pp != 1:
            raise KvplanError("--dp-attention runs each rank at TP 1 and one stage: drop --tp/--pp")
        if d.dp_attention > 1 << 16:
            raise KvplanError("--dp-attention must be between 1 and 65,536")
        if d.dp_attention > spec.moe.num_experts:
            raise KvplanError(
                f"--dp-attention {d.dp_attention}: expert parallelism over {d.dp_attention} ranks "
                f"leaves ranks without one of {spec.name}'s {spec.moe.num_experts} routed experts "
                f"(at most {spec.moe.num_experts})"
            )
        return
    spec.check_tp(d.tp)
    if not 1 <= d.pp <= spec.num_layers:
        raise KvplanError(f"--pp {d.pp} must be between 1 and the {spec.num_layers} layers")


def rank_budget(
    spec: ModelSpec,
    gpu: GpuProfile,
    wdtype: str,
    d: Deployment,
    gpu_mem_util: float,
    reserve_bytes: float | None = None,
    max_num_batched_tokens: int = 8192,
) -> Budget:
    return budget(
        spec,
        gpu,
        wdtype,
        tp=d.tp,
        pp=d.pp,
        dp_attention=d.dp_attention,
        gpu_mem_util=gpu_mem_util,
        reserve_bytes=reserve_bytes,
        max_num_batched_tokens=max_num_batched_tokens,
    )


def replica_sequences(
    spec: ModelSpec,
    d: Deployment,
    pool_bytes: float,
    context_len: int,
    fmt: KvFormat,
    block_size: int = 16,
    prefix_tokens: int = 0,
) -> int:
    """Sequences of `context_len` one replica holds with `pool_bytes` per GPU: the fullest
    pipeline stage decides; DP-attention ranks each hold their own."""
    pool = max(0.0, pool_bytes)
    if d.dp_attention > 1:
        per_rank = max_sequences([spec], pool, context_len, fmt, 1, block_size, prefix_tokens)
        return per_rank * d.dp_attention
    stages = pp_stages(spec, d.pp)
    return max_sequences(stages, pool, context_len, fmt, d.tp, block_size, prefix_tokens)


def valid_tps(spec: ModelSpec, node: int) -> list[int]:
    """The tensor-parallel sizes within a node of `node` GPUs: powers of two the heads allow."""
    tps, tp = [], 1
    while tp <= node:
        try:
            spec.check_tp(tp)
            tps.append(tp)
        except KvplanError:
            pass
        tp *= 2
    return tps


def candidates(spec: ModelSpec, node: int, max_gpus: int) -> list[Deployment]:
    """Every layout kvplan weighs: TP within the node (powers of two the heads allow); PP only
    at the node's largest valid TP; DP attention for MoE models over 2..node ranks, then whole
    nodes. Kept per model, node and size (`capacity --gpu all` asks it of every GPU kind)."""
    return list(
        kept_with(
            _CANDIDATES, spec, (node, max_gpus), lambda: tuple(_candidates(spec, node, max_gpus))
        )
    )


_CANDIDATES: dict[tuple, tuple] = {}


def _candidates(spec: ModelSpec, node: int, max_gpus: int) -> list[Deployment]:
    tps = valid_tps(spec, node)
    out = [Deployment(tp, 1, 1) for tp in tps if tp <= max_gpus]
    if tps:
        top = tps[-1]
        for pp in range(2, min(MAX_PP, spec.num_layers) + 1):
            if top * pp <= max_gpus:
                out.append(Deployment(top, pp, 1))
    if spec.moe is not None:
        sizes = [n for n in (2, 4, 8, 16, 32, 64) if n < node] + [
            node * k for k in range(1, max_gpus // node + 1)
        ]
        out += [Deployment(1, 1, n) for n in sizes if n <= max_gpus]
    return out


def choose_deployment(
    spec: ModelSpec,
    gpu: GpuProfile,
    wdtype: str,
    fmt: KvFormat,
    context_len: int,
    gpu_mem_util: float = 0.9,
    *,
    tp: int | None = None,
    pp: int | None = None,
    dp_attention: int | None = None,
    block_size: int = 16,
    reserve_bytes: float | None = None,
    max_num_batched_tokens: int = 8192,
    tp_only: bool = False,
    users_target: int | None = None,
    num_gpus: int | None = None,
) -> DeploymentChoice:
    """The deployment to plan with: the one given, completed; else the fewest GPUs that hold one
    sequence of `context_len`, and of those the layout that holds the most. `tp_only`: tensor
    parallelism within one node, nothing else (for what prices one TP group). `users_target`:
    the layout that serves that many sequences on the fewest GPUs in all (replicas of it).
    `num_gpus`: the layout whose replicas on that many GPUs hold the most sequences."""
    node, notes = gpus_per_node(gpu)

    def score(d: Deployment) -> Candidate:
        plan = rank_budget(
            spec, gpu, wdtype, d, gpu_mem_util, reserve_bytes, max_num_batched_tokens
        )
        users = replica_sequences(spec, d, plan.pool_bytes, context_len, fmt, block_size)
        return Candidate(d, users if plan.pool_bytes > 0 else 0, plan)

    if tp is not None or pp is not None or dp_attention is not None:
        d = Deployment(tp or 1, pp or 1, dp_attention or 1)
        check_deployment(spec, d)
        picked = score(d)
        return DeploymentChoice(
            d,
            picked.users,
            node,
            _nodes(d, node),
            "given",
            (),
            tuple(notes + _layout_notes(spec, d, node)),
            picked.budget,
        )
    if gpu.interconnect is None:
        pool = [score(Deployment())]
    else:
        most = node if tp_only else node * MAX_NODES
        layouts = candidates(spec, node, min(most, num_gpus) if num_gpus else most)
        if tp_only:
            layouts = [d for d in layouts if d.pp == 1 and d.dp_attention == 1]
        if users_target or num_gpus:
            pool = [score(d) for d in layouts]
        else:
            pool = _fewest_first(layouts, score)
    fitting = [c for c in pool if c.users >= 1]
    if not fitting:
        largest = max(c.deployment.gpus for c in pool)
        raise KvplanError(
            f"{spec.name} does not fit on {gpu.name}: not one {context_len:,}-token sequence "
            f"beside the weights on {'one GPU' if largest == 1 else f'up to {largest:,} GPUs'} "
            f"({_span(largest, node)}); try a "
            "quantized --weights-dtype, a shorter --ctx or a larger GPU"
        )
    if num_gpus:
        best, ranked = _best_on_gpus(fitting, num_gpus)
        chosen_by = "most-users-on-gpus"
        notes.append(
            note(
                "deployment-on-gpus",
                layout=best.deployment,
                gpu=gpu.name,
                num_gpus=num_gpus,
                replicas=num_gpus // best.deployment.gpus,
                context_len=context_len,
                users=best.users * (num_gpus // best.deployment.gpus),
                others=[
                    (
                        c.deployment,
                        num_gpus // c.deployment.gpus,
                        c.users * (num_gpus // c.deployment.gpus),
                    )
                    for c in ranked[1:4]
                ],
            )
        )
    elif users_target:
        # a replica spans no more nodes than the smallest that fits; more users, more replicas
        span = min(_nodes(c.deployment, node) for c in fitting)
        fitting = [c for c in fitting if _nodes(c.deployment, node) <= span]

        def total(c: Candidate) -> int:
            return -(-users_target // c.users) * c.deployment.gpus

        fewest = min(total(c) for c in fitting)
        ranked = sorted(
            (c for c in fitting if total(c) == fewest),
            key=lambda c: (-c.users / c.deployment.gpus, c.deployment.gpus, c.deployment.pp),
        )
        best, chosen_by = ranked[0], "fewest-total-gpus"
        notes.append(
            note(
                "deployment-for-users",
                layout=best.deployment,
                gpu=gpu.name,
                gpus=best.deployment.gpus,
                replicas=-(-users_target // best.users),
                total=fewest,
                users_target=users_target,
                context_len=context_len,
                users=best.users,
            )
        )
    else:
        fewest = min(c.deployment.gpus for c in fitting)
        ranked = sorted(
            (c for c in fitting if c.deployment.gpus == fewest),
            key=lambda c: (-c.users, c.deployment.dp_attention > 1, c.deployment.pp),
        )
        best = ranked[0]
        chosen_by = "most-users" if len(ranked) > 1 else "fewest-gpus"
        notes.append(
            note(
                "deployment-chosen",
                layout=best.deployment,
                gpu=gpu.name,
                gpus=fewest,
                nodes=_nodes(best.deployment, node),
                context_len=context_len,
                users=best.users,
                others=[(c.deployment, c.users) for c in ranked[1:]],
            )
        )
    notes += _layout_notes(spec, best.deployment, node)
    return DeploymentChoice(
        best.deployment,
        best.users,
        node,
        _nodes(best.deployment, node),
        chosen_by,
        tuple(ranked[1:]),
        tuple(notes),
        best.budget,
    )


def _fewest_first(layouts: list[Deployment], score) -> list[Candidate]:
    """The scored layouts of the fewest GPUs at which one fits (in `layouts`' order), the larger
    ones left unscored: the default choice looks no further (`capacity --gpu all` weighs about
    20 layouts per kind, most of them pipelines far wider than the one chosen). Every layout
    when none fits."""
    sized = [(d.gpus, d) for d in layouts]
    scored: list[Candidate] = []
    for gpus in sorted({n for n, _ in sized}):
        group = [score(d) for n, d in sized if n == gpus]
        if any(c.users >= 1 for c in group):
            return group
        scored += group
    return scored


def _best_on_gpus(fitting: list[Candidate], num_gpus: int) -> tuple[Candidate, list[Candidate]]:
    """Of the layouts that fit, the one whose replicas on `num_gpus` GPUs hold the most; ties:
    the fewest GPUs idle, plain TP, fewer stages. Returns it and every fitting layout ranked."""

    def key(c: Candidate) -> tuple:
        replicas = num_gpus // c.deployment.gpus
        idle = num_gpus - replicas * c.deployment.gpus
        return (-c.users * replicas, idle, c.deployment.dp_attention > 1, c.deployment.pp)

    ranked = sorted(fitting, key=key)
    return ranked[0], ranked


def fallback_on_gpus(spec: ModelSpec, gpu: GpuProfile, num_gpus: int) -> Deployment:
    """Where nothing fits on `num_gpus` GPUs: the widest plain TP they allow within a node (the
    most memory one replica has), shown with fits: NO and what would make it fit."""
    node, _ = gpus_per_node(gpu)
    tps = [d.tp for d in candidates(spec, node, min(num_gpus, node)) if d.pp == d.dp_attention == 1]
    return Deployment(max(tps) if tps and gpu.interconnect is not None else 1)


def layout_text(d: Deployment) -> str:
    """'TP 8 x PP 2', 'TP 4', 'DP attention 16 + EP 16' (the words every presenter uses)."""
    if d.dp_attention > 1:
        return f"DP attention {d.dp_attention} + EP {d.dp_attention}"
    return f"TP {d.tp}" + (f" x PP {d.pp}" if d.pp > 1 else "")


def _nodes(d: Deployment, node: int) -> int:
    return -(-d.gpus // node)


def _span(gpus: int, node: int) -> str:
    nodes = -(-gpus // node)
    return f"{nodes} node{'s' if nodes > 1 else ''} of {node}"


def _layout_notes(spec: ModelSpec, d: Deployment, node: int) -> list[Note]:
    out = []
    if d.tp > node:
        out.append(note("tp-crosses-nodes", tp=d.tp, node=node))
    if d.pp > 1 and d.gpus > node:
        out.append(note("pp-across-nodes", pp=d.pp, nodes=_nodes(d, node)))
    if d.dp_attention > 1:
        mla = spec.has_kind(CacheKind.MLA)
        out.append(note("dp-attention", ranks=d.dp_attention, mla=mla))
    return out


def deployment_of(result) -> Deployment:
    """The layout a capacity or report result planned with."""
    return Deployment(result.tp, result.pp, getattr(result, "dp_attention", 1))
