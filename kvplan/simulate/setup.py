"""An engine replica as vLLM would start it: its defaults on this GPU, its KV pool (kvplan's vLLM
allocator model) and its step-time model (formulas.batch_step).

vLLM's defaults for `vllm serve` by release: V1's (0.8 on, engines.vllm.serve_batch_defaults:
from 0.9, on a GPU with >= 70 GiB that is not an A100, max_num_batched_tokens 8192 and max_num_seqs
1024, else 2048 and 256; 0.32 adds 16384 tokens from 160 GiB; 0.8.x by its own rules), V0's for
0.6 and 0.7 (engines.vllm_v0). max_num_seqs is capped at max_num_batched_tokens under V1, which
must be at least max_num_seqs. Chunked prefill is always on in V1 (off: max_num_batched_tokens =
max_model_len), prefix caching on except for models with recurrent state, gpu_memory_utilization
0.9.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from kvplan.anatomy.model import CacheKind, ModelSpec, distinct_layers
from kvplan.dtypes import resolve_kv_format
from kvplan.engines.backends import ENGINE_NAMES, Backends, check_backends
from kvplan.engines.context_limit import (
    ContextLimit,
    context_limit,
    sglang_longest_request,
    sglang_max_req_len,
    sglang_prompt_limit,
)
from kvplan.engines.releases import SGLANG_VERSION, VLLM_VERSION
from kvplan.engines.request import PiecewiseFlags
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import (
    CUDA_GRAPH_MAX_TOKENS,
    HOST_OVERHEADS,
    StepModel,
    dsa_grids_for,
    dsa_layers,
    measured_achieved,
    moe_format,
)
from kvplan.formulas.step_time import Rates, measurable, op_rates_of
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import GpuProfile, Interconnect, inter_node_link
from kvplan.inputs.kernel_tables import (
    MoeRunnerRows,
    borrowed_words,
    moe_runner_rows,
    tables_for,
)
from kvplan.notes import Note, note
from kvplan.record import NamedTuple
from kvplan.units import GIB, MIB

if TYPE_CHECKING:  # the simulator and the engines' allocators load where a replica is built,
    # not for a step model (kvplan capacity --gpu)
    from kvplan.engines.sglang import MambaStrategy
    from kvplan.simulate.disagg import TransferModel
    from kvplan.simulate.engine import Engine, EngineConfig
    from kvplan.simulate.sglang import SglangPolicy
    from kvplan.simulate.speculative import SpecDecode, Speculation


def kv_format_name(engine: str, kv_cache_dtype: str) -> str:
    """The KV format the step time reads for an engine's --kv-cache-dtype spelling, from the
    engine's one vocabulary table (the one its allocation reads): "auto" for the model's."""
    from kvplan.engines.sglang import KV_CACHE_FORMATS as SGLANG
    from kvplan.engines.vllm import KV_CACHE_FORMATS as VLLM

    table = SGLANG if engine == "sglang" else VLLM
    if kv_cache_dtype not in table:
        raise KvplanError(f"--kv-cache-dtype {kv_cache_dtype[:40]!r}: choose {', '.join(table)}")
    return table[kv_cache_dtype] or "auto"


class ServeOptions(NamedTuple):
    """Serve flags the simulation honours (None: the engine's default). With engine "sglang"
    max_num_seqs is --max-running-requests and max_num_batched_tokens --chunked-prefill-size."""

    tp: int = 1
    pp: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    # vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype (engines.vllm.state_dtypes)
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    gpu_mem_util: float = 0.9
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    # None: the engine's default (V1: on; V0: kvplan.engines.vllm_v0's rule of its release)
    enable_chunked_prefill: bool | None = None
    # None: the engine's default (vLLM: engines.vllm.async_scheduling_default; SGLang: its
    # overlap scheduler, on)
    async_scheduling: bool | None = None
    preemption: bool = True
    continuous_batching: bool = True
    engine: str = "vllm"  # or "sglang"
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 / SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
    allow_long_max_model_len: bool = False
    # whose scheduler rules: from 0.19 a request is admitted only when its whole prompt fits
    # (scheduler_reserve_full_isl); earlier versions check its first chunk
    vllm_version: str = VLLM_VERSION
    # SGLang's --mem-fraction-static (None: SGLang's own heuristic for this GPU and layout)
    mem_fraction_static: float | None = None
    # SGLang with SGLANG_USE_CUDA_IPC_TRANSPORT=1: its multimodal feature pool, MiB
    # (SGLANG_MM_FEATURE_CACHE_MB; None: the switch is off)
    cuda_ipc_pool_mib: int | None = None
    # the weights' format: kvplan's --weights-dtype spelling, or the engines' --quantization
    # (vLLM's and SGLang's method names, engines.vllm.QUANTIZATION); "auto": the checkpoint's
    weights_dtype: str = "auto"
    quantization: str | None = None
    # SGLang's release (--engine-version): whose server defaults size the pool and limits
    sglang_version: str = SGLANG_VERSION
    # expert parallelism and DP attention (parallel_layout): vLLM's --enable-expert-parallel and
    # --data-parallel-size, SGLang's --ep-size, --dp-size, --enable-dp-attention, its router
    enable_expert_parallel: bool = False
    data_parallel_size: int = 1
    ep_size: int | None = None
    enable_dp_attention: bool = False
    load_balance_method: str | None = None
    # SGLang under DP attention (check_sglang_dp_flags): --enable-dp-lm-head and
    # --moe-dense-tp-size (1, or None: the whole TP group)
    enable_dp_lm_head: bool = False
    moe_dense_tp_size: int | None = None
    # decode context parallelism and eager mode (vLLM -dcp / --enforce-eager, SGLang
    # --disable-cuda-graph): the KV cache sharded along tokens over dcp ranks of the TP group
    decode_context_parallel_size: int = 1
    enforce_eager: bool = False
    # SGLang's piecewise CUDA graphs for prefill batches (--disable-piecewise-cuda-graph,
    # --enable-piecewise-cuda-graph, --piecewise-cuda-graph-max-tokens; engines.sglang)
    piecewise: PiecewiseFlags = PiecewiseFlags()
    # speculative decoding (kvplan.simulate.speculative): vLLM's --speculative-config JSON as
    # typed, or SGLang's --speculative-* flags; the acceptance as kvplan's --spec-accept (a
    # per-token rate, or per-position rates "0.8,0.6") or --spec-accept-length
    speculative_config: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    # SGLang's --speculative-skip-dp-mlp-sync (kvplan.simulate.speculative MLP_SYNCS_DECODE)
    speculative_skip_dp_mlp_sync: bool = False
    # SGLang's --mamba-scheduler-strategy (engines.sglang.MAMBA_STRATEGIES; None: no_buffer)
    mamba_scheduler_strategy: str | None = None
    spec_accept: str | None = None
    spec_accept_length: float | None = None
    # vLLM V0's multi-step scheduling (--num-scheduler-steps, 0.6-0.8; 1: off)
    num_scheduler_steps: int = 1
    # the kernel-backend flags as typed (kvplan.engines.backends; none: the engine's own choice)
    backends: Backends = Backends()
    # vLLM V0's --preemption-mode (None: recompute for one-sequence requests) and --swap-space
    # (GiB of CPU memory per GPU; None: 4), kvplan.engines.vllm_v0
    preemption_mode: str | None = None
    swap_space: float | None = None
    # resolved, not a flag: vLLM 0.8 runs its V0 engine for these options (_batch_limits,
    # engines.vllm_v0.v08_v0_fallback), so V0's rules apply
    v0_engine: bool = False
    # deployments over several nodes (node_span): the nodes one launch spans (SGLang's and
    # vLLM's --nnodes), or vLLM's DP ranks per node (--data-parallel-size-local: nodes =
    # --data-parallel-size / it)
    nnodes: int = 1
    data_parallel_size_local: int | None = None


# SGLang's --load-balance-method -> the router among its DP ranks (cluster.ROUTERS)
SGLANG_LOAD_BALANCE = {"round_robin": "round_robin", "shortest_queue": "least_outstanding"}
MAX_PARALLEL = 1024


class ParallelLayout(NamedTuple):
    """How one replica's GPUs split a MoE model: attention and dense layers at TP `attn_tp` on
    each of `dp` ranks stepping in lockstep (1: no DP attention), the routed experts over
    `expert_ranks` GPUs, as EP `ep` (1: tensor-parallel experts); `gpus` in the group.
    `dp_replicas`: a DP size that runs independent replicas instead (a dense model under vLLM,
    SGLang's --dp-size without --enable-dp-attention); `router`: how requests reach the ranks."""

    attn_tp: int = 1
    dp: int = 1
    ep: int = 1
    expert_ranks: int = 1
    gpus: int = 1
    dp_replicas: int = 1
    router: str = "round_robin"

    @property
    def modelled(self) -> bool:
        """Whether the layout departs from plain TP (the EP/DP step and pool apply)."""
        return self.dp > 1 or self.ep > 1 or self.expert_ranks != self.attn_tp

    @property
    def text(self) -> str:
        """'DP attention 4 x TP 2 + EP 8'."""
        parts = [
            f"DP attention {self.dp} x TP {self.attn_tp}" if self.dp > 1 else f"TP {self.attn_tp}"
        ]
        parts.append(f"EP {self.ep}" if self.ep > 1 else f"experts TP {self.expert_ranks}")
        return " + ".join(parts)


def parallel_layout(spec: ModelSpec, options: ServeOptions) -> ParallelLayout:
    """The engines' EP and DP flags as a layout (_layout), and the split of each expert it
    makes refused where the engines refuse it (engines.moe_backend.check_expert_split: the ranks
    sharing an expert are its expert ranks over EP)."""
    from kvplan.engines.moe_backend import check_expert_split

    layout = _layout(spec, options)
    weights_given = options.quantization is not None or options.weights_dtype != "auto"
    check_expert_split(spec, weights_given, layout.expert_ranks // max(1, layout.ep))
    return layout


def _layout(spec: ModelSpec, options: ServeOptions) -> ParallelLayout:
    """The engines' EP and DP flags as a layout, each refused where the engine would refuse it
    or kvplan does not model it. vLLM: -dp N on a MoE model runs N engine cores of TP each in
    lockstep (TP x N GPUs, the experts over all of them; EP = TP x N with
    --enable-expert-parallel), on a dense model N independent replicas. SGLang: --tp T GPUs,
    --enable-dp-attention --dp-size N gives each of N ranks attention at TP T / N, the MoE
    layers over all T (--ep-size E: EP E, dividing T); --dp-size alone N replicas."""
    from kvplan.inputs.options import check_range

    o = options
    dp = int(
        check_range(
            o.data_parallel_size, what="--data-parallel-size", minimum=1, maximum=MAX_PARALLEL
        )
    )
    if o.ep_size is not None:
        check_range(o.ep_size, what="--ep-size", minimum=1, maximum=MAX_PARALLEL)
    moe = spec.moe
    if o.engine == "vllm":
        for given, flag, theirs in (
            (o.ep_size is not None, "--ep-size", "--enable-expert-parallel (EP = TP x DP)"),
            (o.enable_dp_attention, "--enable-dp-attention", "-dp N (attention runs DP then)"),
            (
                o.load_balance_method is not None,
                "--load-balance-method",
                "none (DP is least-loaded)",
            ),
        ):
            if given:
                raise KvplanError(f"{flag} is SGLang's; with --engine vllm give {theirs}")
        if o.enable_expert_parallel and moe is None:
            raise KvplanError(f"--enable-expert-parallel: {spec.name} has no routed experts")
        if moe is None:
            return ParallelLayout(o.tp, 1, 1, o.tp, o.tp, dp)
        group = o.tp * dp
        ep = group if o.enable_expert_parallel else 1
        layout = ParallelLayout(o.tp, dp, ep, group, group, 1, "least_outstanding")
    else:
        if o.enable_expert_parallel:
            raise KvplanError(
                "--enable-expert-parallel is vLLM's; with --engine sglang give --ep-size"
            )
        if o.load_balance_method is not None and o.load_balance_method not in SGLANG_LOAD_BALANCE:
            raise KvplanError(
                f"--load-balance-method {str(o.load_balance_method)[:40]!r}: kvplan simulates "
                f"{', '.join(SGLANG_LOAD_BALANCE)}"
            )
        router = SGLANG_LOAD_BALANCE[o.load_balance_method or "round_robin"]
        ep = o.ep_size or 1
        if (ep > 1 or o.enable_dp_attention) and moe is None:
            flag = "--ep-size" if ep > 1 else "--enable-dp-attention"
            raise KvplanError(f"{flag}: {spec.name} has no routed experts")
        if o.tp % ep:
            raise KvplanError(
                f"--ep-size {ep} must divide --tp {o.tp} (SGLang's EP group is within TP)"
            )
        # SGLang turns DP attention off at --dp-size 1 (server_args._handle_data_parallelism):
        # the flag alone runs plain TP, as written (plans.simulate says so in a note)
        if not o.enable_dp_attention or dp < 2:
            if ep == 1:
                return ParallelLayout(o.tp, 1, 1, o.tp, o.tp, dp, router)
            layout = ParallelLayout(o.tp, 1, ep, o.tp, o.tp, dp, router)
        else:
            if o.tp % dp:
                raise KvplanError(
                    f"--dp-size {dp} must divide --tp {o.tp}: SGLang's DP-attention ranks share "
                    "the TP group's GPUs"
                )
            layout = ParallelLayout(o.tp // dp, dp, ep, o.tp, o.tp, 1, router)
    if layout.ep > 1 and moe is not None and moe.num_experts % layout.ep:  # none: refused above
        raise KvplanError(
            f"EP {layout.ep} must divide {spec.name}'s {moe.num_experts} routed experts"
        )
    if layout.modelled and o.pp > 1:
        raise KvplanError(
            "expert or DP-attention parallelism with --pp is not simulated; drop --pp"
        )
    return layout


class NodeSpan(NamedTuple):
    """A launch over several nodes: `nodes` of `node_gpus` GPUs each, joined by `network`
    (`assumed`: the profile states none, DEFAULT_NETWORK)."""

    nodes: int
    node_gpus: int
    network: Interconnect
    assumed: bool = False


def launch_nodes(options: ServeOptions) -> int:
    """The nodes a launch spans from its flags: --nnodes, or vLLM's --data-parallel-size /
    --data-parallel-size-local (which must divide it), refused where they disagree."""
    from kvplan.inputs.options import check_range

    o = options
    nodes = int(check_range(o.nnodes, what="--nnodes", minimum=1, maximum=MAX_PARALLEL))
    local = o.data_parallel_size_local
    if local is None:
        return nodes
    if o.engine != "vllm":
        raise KvplanError(
            "--data-parallel-size-local is vLLM's; SGLang spreads a launch with --nnodes"
        )
    local = int(
        check_range(local, what="--data-parallel-size-local", minimum=1, maximum=MAX_PARALLEL)
    )
    dp = o.data_parallel_size
    if dp % local:
        raise KvplanError(
            f"--data-parallel-size-local {local} must divide --data-parallel-size {dp} "
            "(the DP ranks on each node)"
        )
    if o.nnodes != 1 and o.nnodes != dp // local:
        raise KvplanError(
            f"--nnodes {o.nnodes} disagrees with --data-parallel-size {dp} / "
            f"--data-parallel-size-local {local} = {dp // local} nodes"
        )
    nodes = dp // local
    return nodes


def node_span(gpu: GpuProfile, options: ServeOptions, layout: ParallelLayout) -> NodeSpan | None:
    """The nodes one launch spans (None: one node), refused where the engine could not place
    it: vLLM's --data-parallel-size-local must divide --data-parallel-size (its DP ranks on
    each node; the nodes are the quotient), the launch's GPUs (a replica's, or DP group's, times
    its DP replicas) must split evenly over the nodes, and no node may hold more GPUs than the
    profile's gpus_per_node (a TP 16 on 8-GPU nodes needs --nnodes 2)."""

    o = options
    nodes = launch_nodes(o)
    total = layout.gpus * o.pp * layout.dp_replicas
    if total % nodes:
        raise KvplanError(f"the launch's {total} GPUs do not split evenly over {nodes} nodes")
    per = total // nodes
    if gpu.gpus_per_node and per > gpu.gpus_per_node:
        local = max(1, gpu.gpus_per_node // (o.tp * o.pp))
        hint = (
            f"--data-parallel-size-local {local}"
            if o.engine == "vllm" and o.data_parallel_size > 1 and o.tp * o.pp <= gpu.gpus_per_node
            else f"--nnodes {-(-total // gpu.gpus_per_node)}"
        )
        raise KvplanError(
            f"the launch puts {per} GPUs on one node, but one {gpu.name} node holds "
            f"{gpu.gpus_per_node} (its profile's gpus_per_node): give the nodes it spans ({hint})"
        )
    if nodes == 1:
        return None
    network, assumed = inter_node_link(gpu)
    return NodeSpan(nodes, per, network, assumed)


def span_note(span: NodeSpan, layout: ParallelLayout, options: ServeOptions) -> Note:
    """sim-multinode: which collectives cross nodes and the link they are priced on."""
    node = span.node_gpus
    crossing = []
    if layout.attn_tp > node:
        crossing.append(f"TP {layout.attn_tp} all-reduces (two levels: {node} GPUs x "
                        f"{layout.attn_tp // node} nodes)")  # fmt: skip
    if layout.ep > node:
        crossing.append(f"EP {layout.ep} all-to-alls")
    elif layout.dp > 1 and layout.dp * layout.attn_tp > node:
        crossing.append(f"the DP-attention gather over {layout.dp} ranks")
    if options.pp > 1 and layout.attn_tp * options.pp > node:
        crossing.append("pipeline hops between nodes")
    return note(
        "sim-multinode",
        nodes=span.nodes,
        node_gpus=node,
        network=span.network.name,
        one_way_bytes_per_s=span.network.one_way_bytes_per_s,
        latency_s=span.network.latency_s,
        crossing=tuple(crossing),
        assumed=span.assumed,
    )


class Replica(NamedTuple):
    """Everything one replica needs, and what it resolved to."""

    config: EngineConfig
    model: StepModel
    options: ServeOptions  # with every default filled in
    weights_dtype: str
    kv_cache_tokens: int
    notes: tuple[Note, ...]
    speculation: Speculation | None = None  # speculative decoding (None: none)
    transfer: TransferModel | None = None  # disaggregated: the model of moving KV between pools
    policy: SglangPolicy | None = None  # SGLang's (None: vLLM)
    layout: ParallelLayout | None = None  # EP / DP attention (parallel_layout), None: plain TP
    # what the HTTP server does with a request past max_model_len (the release's rule);
    # None: every request served as asked
    context: ContextLimit | None = None
    # the KV format the engine's allocation resolved (kv_format_name of its kv_cache_dtype:
    # "auto" for the model's): the pool, the step time and a disaggregated transfer read it
    kv_format: str = "auto"
    # the max_model_len the server was configured with where kvplan lowered it to what its own
    # pool estimate holds (note sim-max-model-len-reduced); None: not lowered
    lowered_from: int | None = None


def _batch_limits(spec: ModelSpec, gpu: GpuProfile, options: ServeOptions, max_model_len: int):
    """(the options with chunked prefill and, for V0, prefix caching resolved,
    max_num_batched_tokens, max_num_seqs, the note of V0's defaults or None): vLLM V0's own
    (kvplan.engines.vllm_v0) for 0.6 and 0.7, `vllm serve`'s V1 ones (batch_defaults) from 0.8."""
    from kvplan.engines import vllm_v0
    from kvplan.engines.vllm import gpu_generation

    speculative = (
        options.speculative_config is not None or options.speculative_algorithm is not None
    )
    release = vllm_v0.v0_release(options.vllm_version)
    fallback = vllm_v0.v08_v0_fallback(
        options.vllm_version,
        kv_cache_dtype=options.kv_cache_dtype,
        pp=options.pp,
        scheduler_steps=options.num_scheduler_steps,
        vendor=gpu.device_vendor,
        preemption_mode=options.preemption_mode,
        speculative=speculative,
        hopper=gpu_generation(gpu) == 9,
    )
    if fallback:  # 0.8's engine oracle: the V0 engine, with V0's rules
        release = vllm_v0.v08_release(options.vllm_version)
        options = options._replace(v0_engine=True)
    options = options._replace(async_scheduling=async_scheduling_of(options))
    vllm_v0.check_preemption_mode(options.preemption_mode, release)
    vllm_v0.check_swap_space(options.swap_space)
    if options.preemption_mode is not None and not options.preemption:
        raise KvplanError("give --preemption-mode or --no-preemption, not both")
    given_mnbt, given_seqs = options.max_num_batched_tokens, options.max_num_seqs
    if release is None:
        from kvplan.engines.vllm import serve_batch_defaults

        seqs_default, mnbt_default = serve_batch_defaults(gpu, options.vllm_version)
        chunked = options.enable_chunked_prefill is not False  # V1 always chunks
        mnbt = given_mnbt or (mnbt_default if chunked else max(max_model_len, mnbt_default))
        seqs = given_seqs or min(seqs_default, mnbt)
        return options._replace(enable_chunked_prefill=chunked), mnbt, seqs, None
    defaults = vllm_v0.v0_defaults(
        release,
        spec,
        max_model_len,
        chunked_given=options.enable_chunked_prefill,
        prefix_caching_given=options.enable_prefix_caching,
        vendor=gpu.device_vendor,
        speculative=speculative,
        scheduler_steps=options.num_scheduler_steps,
    )
    vllm_v0.check_multi_step_chunked(
        release, options.num_scheduler_steps, defaults.enable_chunked_prefill, options.pp
    )
    chunked_defaulted = options.enable_chunked_prefill is None
    options = options._replace(
        enable_chunked_prefill=defaults.enable_chunked_prefill,
        enable_prefix_caching=defaults.enable_prefix_caching,
    )
    mnbt = given_mnbt or defaults.max_num_batched_tokens
    seqs = given_seqs or defaults.max_num_seqs  # V0 does not cap it at the token budget
    if fallback:
        return (
            options,
            mnbt,
            seqs,
            note("sim-vllm-08-v0", version=options.vllm_version, flags=fallback),
        )
    return (
        options,
        mnbt,
        seqs,
        note(
            "sim-vllm-v0-defaults",
            release=".".join(map(str, release)),
            max_num_seqs=seqs if given_seqs is None else None,
            max_num_batched_tokens=mnbt if given_mnbt is None else None,
            chunked=defaults.enable_chunked_prefill,
            defaulted=chunked_defaulted,
            why=defaults.chunked_off_because,
            max_model_len=max_model_len,
        ),
    )


def build_replica(spec: ModelSpec, gpu: GpuProfile, options: ServeOptions) -> Replica:
    """Resolve the defaults, size the KV pool, and build the step-time model."""
    from kvplan.engines import EngineRequest, vllm_v0
    from kvplan.engines.vllm import check_vllm_block_size_choice, vllm_allocation

    if any(a.compress_ratio for a in spec.attention_layers()):
        raise KvplanError(
            f"{spec.name}: kvplan simulate does not model the engines' block tables for "
            "DeepSeek-V4's compressed caches (vLLM's packed groups, SGLang's compressed pools); "
            "kvplan engine gives their allocation"
        )
    if options.engine == "sglang":
        for vllm_flag, value in (
            ("--mamba-cache-dtype", options.mamba_cache_dtype),
            ("--mamba-ssm-cache-dtype", options.mamba_ssm_cache_dtype),
        ):
            if value != "auto":
                raise KvplanError(
                    f"{vllm_flag} is vLLM's; SGLang keeps bf16 conv and fp32 SSM states"
                )
        return build_sglang_replica(spec, gpu, options)
    if options.engine != "vllm":
        raise KvplanError(f"--engine {options.engine[:40]!r}: choose vllm or sglang")
    if options.mem_fraction_static is not None:
        raise KvplanError(
            "--mem-fraction-static is SGLang's; with --engine vllm give --gpu-memory-utilization"
        )
    if options.cuda_ipc_pool_mib is not None:
        raise KvplanError("--cuda-ipc-pool-mib is SGLang's (SGLANG_USE_CUDA_IPC_TRANSPORT)")
    for given, flag in (
        (options.enable_dp_lm_head, "--enable-dp-lm-head"),
        (options.moe_dense_tp_size is not None, "--moe-dense-tp-size"),
        (options.mamba_scheduler_strategy is not None, "--mamba-scheduler-strategy"),
        *((True, f.split()[0]) for f in options.piecewise.given()),
    ):
        if given:
            raise KvplanError(f"{flag} is SGLang's; the vLLM simulation does not take it")
    check_backends(options.backends, "vllm", options.vllm_version)
    check_vllm_block_size_choice(options.block_size, options.vllm_version)
    notes: list[Note] = []
    spec.check_tp(options.tp)
    if options.backends.moe_backend is not None and _minor(options.vllm_version) < MOE_BACKEND_FROM:
        raise KvplanError(
            f"--moe-backend: vLLM {str(options.vllm_version)[:20]} takes it, but kvplan knows its "
            "names and refusals (the fused-MoE oracles) from 0.19 on: give --engine-version 0.19 "
            "or later"
        )
    max_model_len = resolved_max_model_len(spec, options)
    length_note = default_length_note(spec, options)
    if length_note is not None:
        notes.append(length_note)
    options, mnbt, seqs, v0_note = _batch_limits(spec, gpu, options, max_model_len)
    v0 = check_multi_step(options)
    if v0 is not None:
        notes.append(v0)
    if v0_note is not None:
        notes.append(v0_note)
    notes.extend(release_notes("vllm", options.vllm_version))
    layout = parallel_layout(spec, options)
    from kvplan.engines.vllm import check_dcp

    dcp = check_dcp(spec, options.tp, options.decode_context_parallel_size, options.engine)
    kv_format_name(options.engine, options.kv_cache_dtype)  # a typo refused before any work
    if mnbt < seqs:
        raise KvplanError(
            f"--max-num-batched-tokens ({mnbt:,}) must be at least --max-num-seqs ({seqs:,}), "
            "as vLLM requires"
        )
    if not options.enable_chunked_prefill and mnbt < max_model_len:
        raise KvplanError(
            "without chunked prefill --max-num-batched-tokens must be at least --max-model-len"
        )
    prefix_caching = options.enable_prefix_caching
    if prefix_caching is None:
        prefix_caching = not spec.has_kind(CacheKind.STATE)
        if not prefix_caching:
            notes.append(note("sim-prefix-caching-off-hybrid"))
    request = EngineRequest(
        engine="vllm",
        max_model_len=max_model_len,
        kv_cache_dtype=options.kv_cache_dtype,
        block_size=options.block_size,
        max_num_batched_tokens=mnbt,
        # V0's profile run is max_num_seqs prompts (ModelRunner.profile_run): its own 256, not
        # the V1 default the allocator would take
        max_num_seqs=seqs if v0_rules(options) else None,
        v0_profile=v0_rules(options) is not None,
        tp=options.tp,
        pp=options.pp,
        gpu_mem_util=options.gpu_mem_util,
        kv_cache_memory_bytes=options.kv_cache_memory_bytes,
        allow_long_max_model_len=options.allow_long_max_model_len,
        weights_dtype=weights_format(options),
        expert_ranks=layout.expert_ranks if layout.modelled else None,
        enforce_eager=options.enforce_eager,
        decode_context_parallel_size=dcp,
        backends=options.backends,
        vllm_version=options.vllm_version,
        mamba_cache_dtype=options.mamba_cache_dtype,
        mamba_ssm_cache_dtype=options.mamba_ssm_cache_dtype,
    )
    alloc = vllm_allocation(spec, gpu, request)
    lowered_from = None
    if not alloc.fits:
        if options.max_model_len is not None or not alloc.estimated_max_model_len:
            raise KvplanError(
                f"the KV pool ({alloc.available_kv_bytes / GIB:,.2f} GiB per GPU) cannot hold one "
                f"{max_model_len:,}-token request, so vLLM would not start; lower --max-model-len "
                f"(at most {alloc.estimated_max_model_len or 0:,}) or raise the KV memory"
            )
        notes.append(
            note(
                "sim-max-model-len-reduced",
                configured=max_model_len,
                estimated=alloc.estimated_max_model_len,
            )
        )
        lowered_from = max_model_len if options.kv_cache_memory_bytes is None else None
        max_model_len = alloc.estimated_max_model_len
        request = request._replace(max_model_len=max_model_len)
        alloc = vllm_allocation(spec, gpu, request)
    notes.extend(alloc.notes)
    fmt_name = kv_format_name("vllm", alloc.kv_cache_dtype)
    speculation, draft = _speculation(spec, gpu, options, fmt_name, layout.attn_tp)
    if speculation is not None:  # the draft's weights and KV layers share the pool
        alloc = _with_draft(alloc, speculation, options, spec, fmt_name, layout.attn_tp)
    pool, why = _v0_pool(spec, gpu, alloc, request, options, speculation)
    if pool is not None:
        notes.append(
            note(
                "sim-vllm-v0-pool",
                gpu_blocks=pool.num_gpu_blocks,
                cpu_blocks=pool.num_cpu_blocks,
                block_bytes=pool.block_bytes,
                available_bytes=pool.available_bytes,
                swap=vllm_v0.swaps(options.preemption_mode),
            )
        )
    if vllm_v0.swaps(options.preemption_mode):
        vllm_v0.check_swap(gpu.name, gpu.host_link is not None, pool is not None, why)
    config = _engine_config(alloc, max_model_len, seqs, mnbt, prefix_caching, options, pool, gpu)
    if config.prefill_first and (layout.modelled or speculation is not None):
        raise KvplanError(
            "kvplan models vLLM V0's prefill-first scheduling (vLLM "
            f"{str(options.vllm_version)[:20]} with chunked prefill off, as given or by V0's "
            "default) for one engine without DP/EP ranks or speculative decoding"
        )
    graph_tokens = 0 if options.enforce_eager else min(2 * seqs, CUDA_GRAPH_MAX_TOKENS, mnbt)
    model, wdtype = step_model(
        spec, gpu, options, fmt_name, graph_tokens, notes, weights_format(options), layout,
    )  # fmt: skip
    if speculation is not None:
        config = config._replace(spec_lookahead=speculation.lookahead)
        model = _speculative_model(model, speculation, draft, gpu, options, fmt_name, graph_tokens)
        notes.append(_spec_note(speculation, options.engine))
    if dcp > 1:
        notes.append(note("sim-dcp", dcp=dcp, tp=options.tp, block_size=config.block_size))
    if options.enforce_eager:
        notes.append(note("sim-enforce-eager", engine="vllm"))
    resolved = options._replace(
        max_num_seqs=seqs,
        max_num_batched_tokens=mnbt,
        max_model_len=max_model_len,
        block_size=config.block_size,
        enable_prefix_caching=prefix_caching,
        # as the allocation resolved it, a checkpoint-stated cache included
        # (checkpoint_kv_cache_dtype): the setup prints what `kvplan engine` prints
        kv_cache_dtype=alloc.kv_cache_dtype,
    )
    # vLLM's own figure (config.block_size is already the scheduler's block_size x dcp); V0's
    # pool holds num_gpu_blocks x block_size tokens
    tokens = (
        config.num_blocks * config.block_size
        if pool is not None
        else alloc.kv_cache_tokens or config.num_blocks * config.block_size
    )
    return Replica(
        config,
        model,
        resolved,
        wdtype,
        tokens,
        tuple(notes),
        speculation=speculation,
        layout=_modelled(layout),
        context=context_limit("vllm", options.vllm_version, config.max_model_len),
        kv_format=fmt_name,
        lowered_from=lowered_from,
    )


def _speculation(spec, gpu, options, fmt_name: str, tp: int):
    """(the replica's Speculation, the draft model's spec) or (None, None)."""
    from kvplan.simulate import speculative

    request = speculative.requested(spec, options)
    if request is None:
        return None, None
    fmt = resolve_kv_format(fmt_name, spec.dtype)
    wdtype = resolve_weights_dtype(spec, weights_format(options))[0]
    return speculative.resolve(spec, request, options, fmt, wdtype, tp)


def _with_draft(alloc, speculation, options, spec, fmt_name: str, tp: int):
    """The allocation with the draft's weights out of the pool's memory and its KV layers in
    every block (techniques.speculative_pool_blocks); a given --kv-cache-memory holds the KV
    alone, so only the split applies. kv_cache_tokens scales with the blocks."""
    from kvplan.formulas.kv import kv_bytes_per_token
    from kvplan.formulas.techniques import speculative_pool_blocks

    target = kv_bytes_per_token(spec, resolve_kv_format(fmt_name, spec.dtype), tp)
    weights = 0.0 if options.kv_cache_memory_bytes is not None else speculation.draft_weight_bytes
    blocks = speculative_pool_blocks(
        alloc.num_blocks,
        alloc.available_kv_bytes,
        weights,
        target,
        speculation.draft_kv_bytes_per_token,
    )
    if blocks <= 0:
        raise KvplanError("the draft's weights leave no memory for the KV cache")
    tokens = alloc.kv_cache_tokens
    if tokens is not None:
        tokens = int(tokens * blocks / alloc.num_blocks)
    return alloc._replace(num_blocks=blocks, kv_cache_tokens=tokens)


def _speculative_model(
    model, speculation, draft, gpu, options, fmt_name, graph_tokens, spec_v2: bool = False
):
    """The target's step model drafting and verifying (kvplan.simulate.speculative); the draft
    runs its prefill batches under graphs as the target does (SGLang 0.5.10: none, its
    piecewise graphs off when speculating; from 0.5.11 on, engines.sglang.piecewise_excluded).
    `spec_v2`: SGLang's spec v2 beside the overlap scheduler (engines.sglang.sglang_spec_v2)."""
    from kvplan.simulate.speculative import SpeculativeStepModel

    draft_model = None
    if draft is not None:  # a draft model at the target's TP, its own checkpoint's format
        plain = options._replace(
            enable_expert_parallel=False, data_parallel_size=1, ep_size=None,
            enable_dp_attention=False, decode_context_parallel_size=1, pp=1,
            data_parallel_size_local=None,
            nnodes=options.nnodes if options.data_parallel_size_local is None else 1,
        )  # fmt: skip
        draft_model, _ = step_model(
            draft, gpu, plain, fmt_name, graph_tokens, [], "auto",
            prefill_graph_tokens=model.prefill_graph_max_tokens,
        )  # fmt: skip
    return SpeculativeStepModel(
        model,
        speculation,
        draft_model,
        sglang_host=options.engine == "sglang",
        skip_dp_mlp_sync=options.speculative_skip_dp_mlp_sync,
        overlap=spec_v2,
    )


def _spec_note(speculation, engine: str) -> Note:
    r = speculation.request
    return note(
        "sim-speculative",
        engine=engine,
        method=r.method,
        draft=r.draft,
        steps=r.num_steps,
        topk=r.topk,
        verify=r.verify_tokens,
        tokens_per_round=speculation.tokens_per_round,
        acceptance=speculation.acceptance,
        rate=speculation.acceptance_rate,
        weights_bytes=speculation.draft_weight_bytes,
        kv_bytes_per_token=speculation.draft_kv_bytes_per_token,
    )


def _modelled(layout: ParallelLayout) -> ParallelLayout | None:
    """The layout a replica keeps: None where it is plain TP (and DP as replicas)."""
    return layout if layout.modelled or layout.dp_replicas > 1 else None


# --quantization methods beyond vLLM's table (engines.vllm.QUANTIZATION) that kvplan sizes:
# both engines' ModelOpt names, and SGLang's w8a8 ones (server_args.py QUANTIZATION_CHOICES)
MORE_QUANTIZATION = {"modelopt": "fp8-tensor", "modelopt_fp4": "nvfp4"}
SGLANG_QUANTIZATION = {"w8a8_fp8": "fp8-tensor", "w8a8_int8": "int8"}


def weights_format(options: ServeOptions) -> str:
    """The weights format a replica loads: --quantization (the engines' method names) as
    kvplan's --weights-dtype, else --weights-dtype as given ("auto": the checkpoint's)."""
    from kvplan.engines.vllm import QUANTIZATION

    if options.quantization is None:
        return options.weights_dtype
    methods = {**QUANTIZATION, **MORE_QUANTIZATION}
    if options.engine == "sglang":
        methods.update(SGLANG_QUANTIZATION)
    method = str(options.quantization).strip().lower()
    if method not in methods:
        raise KvplanError(
            f"--quantization {str(options.quantization)[:40]!r}: kvplan sizes "
            f"{', '.join(methods)}; for another format give --weights-dtype"
        )
    if options.weights_dtype != "auto":
        raise KvplanError("give --quantization or --weights-dtype, not both")
    return methods[method]


def resolved_max_model_len(spec: ModelSpec, options: ServeOptions) -> int:
    """The given length, else the model's positions, at most the length the engine derives; a
    config with no length key at all: the engine's own 2,048 (note `engine-default-length`)."""
    from kvplan.engines.max_len import NO_KEY_DEFAULT, default_max_model_len, engine_max_len

    if options.max_model_len:
        return options.max_model_len
    default = (
        spec.max_position_embeddings
        or engine_max_len(spec, options.engine).tokens
        or NO_KEY_DEFAULT
    )
    return default_max_model_len(spec, options.engine, default)


def default_length_note(spec: ModelSpec, options: ServeOptions) -> Note | None:
    """`engine-default-length` where no --max-model-len is given and the config states no length
    key the engine reads: the engine assumes 2,048 tokens (vLLM warns; SGLang does not)."""
    from kvplan.engines.max_len import NO_KEY_DEFAULT, engine_max_len

    if options.max_model_len or spec.max_position_embeddings:
        return None
    if options.engine != "sglang" and engine_max_len(spec, options.engine).tokens is not None:
        return None
    if options.engine == "sglang" and (spec.positions and spec.positions.lengths):
        return None
    name = "SGLang" if options.engine == "sglang" else "vLLM"
    return note("engine-default-length", engine=name, tokens=NO_KEY_DEFAULT)


def given_backends(options, moe: bool = False) -> str:
    """The attention-backend flags given, as typed ("--attention-backend triton"), or "";
    `moe`: the MoE runner's flag instead, in the engine's spelling ("--moe-runner-backend
    triton")."""
    given = options.backends.given(attention=not moe, moe=moe)
    return " ".join(f"{flag} {value}" for flag, value in given)


def other_mxfp4_kernel(spec, gpu, options) -> bool:
    """Whether the engine runs another MXFP4 fused-MoE kernel on this GPU than the tables'
    w4a16_mxfp4 rows time, so the rows' curves and floors (`moe_mxfp4*`) do not apply and
    gpt-oss's experts stay untimed (StepModel.untimed_parts): vLLM on Hopper before 0.11.1
    (Marlin, not OpenAI's Triton kernels: kvplan.engines.vllm.mxfp4_moe_rows_run), SGLang
    before Blackwell (triton_kernels' matmul_ogs, where its rows time its own Triton fused MoE
    and Marlin: kvplan.engines.sglang.gpt_oss_below_blackwell, note sim-weak-gpt-oss-sglang),
    and SGLang on SM120 outside the releases that run the Marlin MoE its rows time there
    (kvplan.engines.sglang.gpt_oss_sm120_other_kernel, note sim-gpt-oss-sm120-kernel)."""
    from kvplan.engines.sglang import gpt_oss_below_blackwell, gpt_oss_sm120_other_kernel
    from kvplan.engines.vllm import mxfp4_moe_rows_run

    if options.engine == "sglang":
        return gpt_oss_below_blackwell(spec, gpu) or gpt_oss_sm120_other_kernel(
            spec, gpu, options.sglang_version
        )
    return not mxfp4_moe_rows_run(gpu, options.vllm_version)


def without_mxfp4_moe(timings: dict) -> dict:
    """A floors or curves dict without the MXFP4 fused-MoE keys (`moe_mxfp4*`)."""
    return {k: v for k, v in timings.items() if not k.startswith("moe_mxfp4")}


def mxfp8_activations(spec, gpu, options) -> bool:
    """SGLang's gpt-oss on Blackwell: its flashinfer_mxfp4 MoE runner quantizes the activations to
    MXFP8 at the default --flashinfer-mxfp4-moe-precision (layers/quantization/mxfp4.py:
    mxfp8_quantize unless "bf16"), the kernel of the tables' w4a8_mxfp4_mxfp8 rows (`mxfp4a8`),
    not of their w4a16_mxfp4 ones (the bf16 precision)."""
    from kvplan.engines.sglang import GPT_OSS_MODEL_TYPE
    from kvplan.engines.vllm import gpu_generation

    return (
        options.engine == "sglang"
        and spec.model_type == GPT_OSS_MODEL_TYPE
        and gpu_generation(gpu) == 10
    )


def mxfp4_timings(spec, gpu, options, timings: dict) -> dict:
    """The tables' floors or curves with the MXFP4 fused-MoE keys (`moe_mxfp4*`) of the kernel
    this engine runs: none where it runs another (other_mxfp4_kernel), the MXFP8-activation
    rows' as the model's own where SGLang runs those (mxfp8_activations), else the W4A16 rows'."""
    if other_mxfp4_kernel(spec, gpu, options):
        return without_mxfp4_moe(timings)
    if mxfp8_activations(spec, gpu, options):
        kept = without_mxfp4_moe(timings)
        a8 = {
            "moe_mxfp4" + k.removeprefix("moe_mxfp4a8"): v
            for k, v in timings.items()
            if k.startswith("moe_mxfp4a8")
        }
        return {**kept, **a8}
    return timings


class MoeRunner(NamedTuple):
    """The fused-MoE runner SGLang resolves for a run and the rows kvplan prices it on."""

    name: str  # MoeRunnerBackend's name (engines.moe_backend.sglang_moe_runner)
    key: str  # the model's own fused-MoE shape key (batch_step.own_moe_key)
    rows: MoeRunnerRows


def sglang_moe_runner_rows(spec, gpu, options, tables, wdtype: str, layout) -> MoeRunner | None:
    """The runner SGLang runs the model's routed experts on (sglang_moe_runner: by release,
    config model_type, weights format, SM and --moe-runner-backend) and its rows of the model's
    shape from the nearest release that timed that runner (kernel_tables.moe_runner_rows; the
    fastest timed rows, release None, where none did). None: not an SGLang run on its own
    fused-MoE grids, no MoE, or MXFP4 experts (mxfp4_timings picks their kernel's rows)."""
    from kvplan.engines.moe_backend import (
        SGLANG_RUNNER_OF_SOURCE,
        sglang_moe_runner,
        sglang_weights_format,
    )
    from kvplan.engines.sglang import sglang_rules
    from kvplan.engines.vllm import gpu_generation
    from kvplan.formulas.batch_step import own_moe_key

    if options.engine != "sglang" or tables.engine != "sglang" or tables.moe_file is None:
        return None
    key = own_moe_key(spec, wdtype, layout.expert_ranks // layout.ep, layout.ep)
    if key is None or sglang_weights_format(wdtype).startswith("mxfp4"):
        return None
    name = sglang_moe_runner(
        sglang_rules(run_engine_version(options)),
        spec.checkpoint_model_type,
        wdtype,
        gpu_generation(gpu),
        options.backends.moe_runner_backend,
        options.ep_size or 1,
    )
    sources = tuple(src for src, r in SGLANG_RUNNER_OF_SOURCE.items() if r == name)
    rows = moe_runner_rows(tables.gpu, tables.engine, tables.engine_version, key, sources)
    return MoeRunner(name, key, rows)


def untimed_moe_flag(options) -> str:
    """The MoE backend flag as typed ("--moe-runner-backend triton") where it names kernels
    other than the engine's default path the kernel tables time (sim-moe-kernels), else ""."""
    name = options.backends.moe(options.engine)
    return "" if name is None or name.lower() == "auto" else given_backends(options, moe=True)


def nsa_flags(options) -> list[str]:
    """SGLang's --nsa-prefill-backend / --nsa-decode-backend as given ("--nsa-decode-backend fa3")."""
    return [
        f"{flag} {value}"
        for flag, value in (
            ("--nsa-prefill-backend", options.backends.nsa_prefill_backend),
            ("--nsa-decode-backend", options.backends.nsa_decode_backend),
        )
        if value is not None
    ]


def ignored_nsa_flags(spec, options) -> list[str]:
    """The NSA backend flags given for a model without DeepSeek sparse attention: SGLang reads
    them for DSA models only (server_args sets and reads the NSA backends in its DeepSeek NSA
    branch; the nsa attention backend runs DSA models only, kvplan.engines.sglang), so they
    change nothing."""
    if options.engine != "sglang" or any(a.indexer_head_dim for a in spec.attention_layers()):
        return []
    return nsa_flags(options)


def dsa_decode_kernel(spec, gpu, options, kv_format: str, grids) -> tuple[str, str] | None:
    """(the decode kernel, the ones the grids timed) where SGLang runs a DSA model's decode on
    an NSA kernel the GPU's DSA module grids did not time (None: they timed it, the run names
    it by --nsa-decode-backend, which nsa_flags marks untimed, or no SGLang grids record it).
    SGLang picks by the cache dtype and GPU (engines.sglang.nsa_default_backends, 0.5.9's
    rule: flashmla_kv for an fp8 cache); the grids record what aiconfigurator's collector ran
    (DsaGrids.decode_kernels: SGLang 0.5.14's trtllm for an fp8 cache on SM100). A run of the
    grids' own release or a later patch runs what they timed: the collector keeps that
    release's picks (collector/sglang/collect_mla_module.py: "Mirrors SGLang 0.5.14
    server_args.py:_set_default_dsa_backends" for an fp8 cache, the runtime default for bf16),
    so 0.5.9's rule is not applied to it."""
    from kvplan.engines.sglang import nsa_default_backends, sglang_rules
    from kvplan.engines.vllm import gpu_generation

    if options.engine != "sglang" or grids is None or not grids.decode_kernels:
        return None
    if options.backends.nsa_decode_backend or not dsa_layers(spec):
        return None
    run, timed = sglang_rules(options.sglang_version), sglang_rules(grids.engine_version)
    if (
        run.patch is not None
        and timed.patch is not None
        and run.release == timed.release
        and run.patch >= timed.patch
    ):
        return None
    fp8 = resolve_kv_format(kv_format, spec.dtype).name.startswith("fp8")
    decode = nsa_default_backends("fp8_e4m3" if fp8 else "bfloat16", gpu_generation(gpu))[1]
    timed = grids.decode_kernels.get("fp8" if fp8 else "bfloat16", ())
    return None if decode in timed else (decode, ", ".join(timed) or "none")


def backend_kernels(spec, gpu, options, tables):
    """(the BackendKernels of the attention backends a run uses that the GPU's tables timed
    from their own rows, or None; the flags whose backend they did not time, as typed; the
    named backends they timed: backend -> (BackendTiming, [phase, ...])). A phase
    with no backend named runs the engine's own pick for this model and GPU (SGLang's
    _handle_attention_backend_compatibility, vLLM's _get_backend_priorities), from its rows
    where they exist on the tables' own engine version, else on the default tables (no note:
    nothing was named); a named backend without rows runs as that pick does and is named as not
    timed."""
    from kvplan.formulas.batch_step import BackendKernels

    mla = any(a.kind is CacheKind.MLA for a in spec.attention_layers())
    kind = "mla" if mla else "mha"
    if options.engine == "sglang":
        from kvplan.engines.sglang import SGLANG_TRTLLM_MLA_MODELS, _default_sglang_backend
        from kvplan.engines.vllm import gpu_generation

        both = options.backends.attention_backend
        named = {
            "decode": (
                "--decode-attention-backend" if options.backends.decode_attention_backend else
                "--attention-backend", options.backends.decode_attention_backend or both,
            ),
            "prefill": (
                "--prefill-attention-backend" if options.backends.prefill_attention_backend else
                "--attention-backend", options.backends.prefill_attention_backend or both,
            ),
        }  # fmt: skip
        attn = spec.attention_layers()
        default = None
        if attn and not attn[0].indexer_head_dim:
            default = _default_sglang_backend(
                spec, gpu, options.tp, options.speculative_eagle_topk, options.sglang_version
            )
            if mla and gpu_generation(gpu) == 10 and spec.model_type in SGLANG_TRTLLM_MLA_MODELS:
                default = "trtllm_mla"
    else:
        from kvplan.engines import EngineRequest
        from kvplan.engines.vllm import (
            backend_sets_block,
            block_size_backend,
            checkpoint_kv_cache_dtype,
            gpu_generation,
            vllm_backend_name,
        )

        name = vllm_backend_name(options.backends.attention_backend)
        named = {p: ("--attention-backend", name) for p in ("decode", "prefill")}
        if (
            name is None
            and options.block_size is not None
            and v0_rules(options) is None
            and backend_sets_block(spec)
        ):
            # the selector's pick for the size (its warning: note vllm-block-size-fallback),
            # for the cache the allocation holds: auto resolved as vLLM resolves it from the
            # checkpoint (its order on Blackwell MLA reads the cache dtype)
            as_given = EngineRequest(
                kv_cache_dtype=options.kv_cache_dtype, vllm_version=options.vllm_version
            )
            resolved, _ = checkpoint_kv_cache_dtype(spec, as_given)
            picked, passed_over = block_size_backend(
                spec, gpu, options.block_size, resolved.kv_cache_dtype, options.tp
            )
            if passed_over:
                named = {p: ("--block-size", picked) for p in ("decode", "prefill")}
        # platforms/cuda.py _get_backend_priorities: FlashInfer first on SM10x, else
        # FlashAttention (MLA: vLLM's MLA tables time modules, not kernels: none read)
        default = None if mla else "FLASHINFER" if gpu_generation(gpu) == 10 else "FLASH_ATTN"
    typed = {  # the flags' values as written (vLLM takes any case)
        "--attention-backend": options.backends.attention_backend,
        "--prefill-attention-backend": options.backends.prefill_attention_backend,
        "--decode-attention-backend": options.backends.decode_attention_backend,
        "--block-size": options.block_size,
    }
    timed: dict = {"decode": {}, "prefill": {}}
    # DSA's NSA kernels: no per-backend rows (the DSA module tables are vLLM's); for a model
    # without DSA SGLang never reads the flags (ignored_nsa_flags), so nothing is untimed
    untimed = [] if ignored_nsa_flags(spec, options) else nsa_flags(options)
    measured = tables.attention_backends

    def own_pick(backend):
        """The engine's own pick's rows where they were measured on the tables' own engine
        version (vLLM's H100/H200 tables are 0.14.0's, their per-backend rows 0.24.0's: the
        pick keeps the tables there), else None."""
        timing = measured.get((kind, backend)) if backend is not None else None
        return timing if timing is not None and timing.version == tables.engine_version else None

    named_timed: dict = {}
    for phase, (flag, name) in named.items():
        timing = measured.get((kind, name)) if name is not None else None
        if timing is None:  # the engine's own pick, where its rows exist
            if name is not None and name != default:
                given = f"{flag} {typed[flag]}"
                if given not in untimed:
                    untimed.append(given)
            if own_pick(default) is not None:
                timed[phase][mla] = own_pick(default)
        elif name == default:
            if own_pick(default) is not None:
                timed[phase][mla] = timing
        else:
            timed[phase][mla] = timing
            named_timed.setdefault(name, (timing, []))[1].append(phase)
    if not timed["decode"] and not timed["prefill"]:
        return None, untimed, named_timed
    head_block: dict = {}
    as_mha = None
    if options.engine == "sglang" and mla:
        from kvplan.engines.sglang import SGLANG_MLA_PREFILL_AS_MHA, sglang_decode_head_block

        if True in timed["decode"]:  # the block of the kernel whose rows time the decode
            head_block[True] = sglang_decode_head_block(timed["decode"][True].backend, True)
        # the prefill backend that runs (named, else SGLang's pick): where it runs an MLA
        # layer's chunks with no cached tokens as MHA, its MHA rows time them
        runs = named["prefill"][1] or default
        if runs in SGLANG_MLA_PREFILL_AS_MHA:
            as_mha = measured.get(("mha", runs))
    kernels = BackendKernels(timed["decode"], timed["prefill"], head_block, as_mha)
    return kernels, untimed, named_timed


def borrowed_parts(kernels, engine: str) -> list[str]:
    """The attention backends of `kernels` (backend_kernels) timed from another GPU's rows by a
    fitted ratio (kvplan.inputs.kernel_tables.borrowed_backends), in words, each once."""
    out: list[str] = []
    for phase in (kernels.decode, kernels.prefill) if kernels is not None else ():
        for timing in phase.values():
            words = borrowed_words(timing, engine)
            if words and words not in out:
                out.append(words)
    return out


def prefill_attention_note(model, kernels, tables: str) -> Note:
    """`sim-prefill-attention`: which prefill attention each kind of attention layer got, the
    backend's measured calls or the fractions of the datasheet rates, and why the fractions
    (StepModel.prefill_fractions_why)."""
    timed, fractions = [], []
    for g in model.groups:
        if not g.layers:
            continue
        kind = "MLA" if g.mla else "GQA/MHA"
        what = f"{g.layers} {kind} layer{'s' if g.layers != 1 else ''} ({g.head_shape})"
        why = model.prefill_fractions_why(g)
        timing = kernels.prefill.get(g.mla) if kernels is not None else None
        as_mha = kernels.mla_prefill_as_mha if kernels is not None else None
        mha_form = model.prefill_as_mha_calls(g)
        if as_mha is not None and mha_form is not None:
            qk, _, v = g.head_shape.partition("x")
            shape = (
                "this head shape"
                if len(mha_form) == 1
                else f"{qk}x{qk} and {v}x{v}, whose mean times this untimed head shape"
            )
            piecewise = model.prefill_graph_max_tokens
            past = f" in a step past the piecewise graphs' {piecewise} tokens" if piecewise else ""
            timed.append(
                f"{what}, its chunks with no cached tokens{past}: {as_mha.backend}'s MHA rows at "
                f"{shape} (SGLang runs them as MHA over the up-projected heads), measured on "
                f"engine version {as_mha.version}"
            )
            what += f", its other chunks (the absorbed latent form, {g.latent_shape})"
        if not why and timing is not None:
            timed.append(f"{what}: {timing.backend}'s, measured on engine version {timing.version}")
        else:
            fractions.append(f"{what}: {PREFILL_FRACTIONS_WHY[why or 'backend']}")
    return note(
        "sim-prefill-attention",
        timed="; ".join(timed) or None,
        fractions="; ".join(fractions) or None,
        tables=tables,
    )


PREFILL_FRACTIONS_WHY = {
    "sparse": "sparse layers (DSA top-k, compressed or block-sparse), which the rows never ran",
    "backend": "the tables hold no prefill calls of the backend that runs it (for this kind, "
    "cache dtype and the tables' engine version)",
    "shape": "the tables hold no prefill calls of its backend at this head shape",
}


def engine_state_dtypes(spec, gpu, options) -> tuple[str, str] | None:
    """The (conv, SSM) dtypes an engine keeps a recurrent state in: SGLang's own
    (engines.sglang.STATE_DTYPES, the ones its pool is sized by); vLLM's by architecture,
    release and --mamba-*-dtype flags (engines.vllm.state_dtypes, what its pages are sized by);
    None for a model without one."""
    if options.engine == "sglang":
        from kvplan.engines.sglang import STATE_DTYPES

        return STATE_DTYPES
    state = next(iter(spec.state_layers()), None)
    if state is None:
        return None
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import model_dtype, state_dtypes

    request = EngineRequest(
        mamba_cache_dtype=options.mamba_cache_dtype,
        mamba_ssm_cache_dtype=options.mamba_ssm_cache_dtype,
        vllm_version=options.vllm_version,
    )
    return state_dtypes(state, spec.model_type, model_dtype(spec, "auto", gpu)[0], request)


def async_scheduling_of(options: ServeOptions) -> bool:
    """Whether steps overlap the host's scheduling: --async-scheduling / --no-async-scheduling
    as given, else the engine's default: SGLang's overlap scheduler (on from 0.4,
    engines.sglang.sglang_overlap_default), vLLM's
    (engines.vllm.async_scheduling_default: off in V0, including 0.8's fallback to it, and
    before 0.12)."""
    if options.async_scheduling is not None:
        return options.async_scheduling
    if options.engine == "sglang":
        from kvplan.engines.sglang import sglang_overlap_default

        return sglang_overlap_default(options.sglang_version)
    from kvplan.engines import vllm_v0
    from kvplan.engines.vllm import async_scheduling_default

    v0 = options.v0_engine or vllm_v0.v0_release(options.vllm_version) is not None
    return async_scheduling_default(options.vllm_version, v0)


def step_model(
    spec,
    gpu,
    options,
    kv_format: str,
    graph_tokens: int,
    notes: list,
    weights_dtype: str = "auto",
    layout: ParallelLayout | None = None,
    prefill_graph_tokens: int | None = None,
):
    """(the step-time model of one replica, its weights format); its notes appended. `plan`,
    `simulate` and the comparison of GPU kinds (kvplan.plans.compare) price steps through it;
    `layout` (parallel_layout): one DP/EP rank's step (None: plain TP); `prefill_graph_tokens`:
    the most tokens of a step with prefill tokens run under graphs where the engine captures
    those apart (SGLang's piecewise graphs; None: as a decode step's, `graph_tokens`)."""
    span_layout = layout if layout is not None else ParallelLayout(options.tp, gpus=options.tp)
    if layout is None or not layout.modelled:
        layout = ParallelLayout(options.tp, 1, 1, options.tp, options.tp)
    if (layout.gpus > 1 or options.pp > 1) and gpu.interconnect is None:
        raise KvplanError(f"{gpu.name}'s profile has no interconnect figure for TP/PP")
    span = node_span(gpu, options, span_layout)
    if span is not None:
        if options.decode_context_parallel_size > 1 and layout.attn_tp > span.node_gpus:
            raise KvplanError(
                "decode context parallelism in a TP group that spans nodes is not simulated; "
                "drop -dcp or keep TP within a node"
            )
        notes.append(span_note(span, layout, options))
    wdtype, wnotes = resolve_weights_dtype(spec, weights_dtype)
    notes.extend(wnotes)
    measured = gpu.vendor == "measured"
    tables = tables_for(gpu, options.engine, run_engine_version(options))
    # the MXFP4 fused-MoE rows of the kernel the engine runs (none where no table times it)
    achieved = tables.achieved
    achieved = achieved._replace(floors_s=mxfp4_timings(spec, gpu, options, achieved.floors_s))
    moe_curves = mxfp4_timings(spec, gpu, options, tables.moe_curves_s)
    # SGLang's MoE runner for this model, GPU and release, its own rows where a release timed it
    runner = (
        None if measured else sglang_moe_runner_rows(spec, gpu, options, tables, wdtype, layout)
    )
    if runner is not None and runner.rows.release is not None:
        moe_curves = {**moe_curves, runner.key: runner.rows.curve}
    # a measured profile with per-operator curves prices every layer it can lay out (dense
    # attention + MLP in a plain float format) through them: the model kvplan measure checks
    kernels, untimed, named_timed = (
        (None, [], {}) if measured else backend_kernels(spec, gpu, options, tables)
    )
    dsa_grids = (
        None if measured or not dsa_layers(spec) else dsa_grids_for(spec, tables.dsa_delta_us)
    )
    dsa_kernel = dsa_decode_kernel(spec, gpu, options, kv_format, dsa_grids)
    dsa_eager = None if dsa_grids is None else tables.dsa_eager
    per_op = (
        measured
        and gpu.measured is not None
        and wdtype in ("fp32", "bf16", "fp16")
        and measurable(spec)
    )
    model = StepModel(
        spec,
        Rates(gpu.memory_bandwidth_bytes_per_s, gpu.peak(spec.dtype)),
        wdtype,
        resolve_kv_format(kv_format, spec.dtype),
        tp=layout.attn_tp,
        pp=options.pp,
        dcp=options.decode_context_parallel_size,
        link=gpu.interconnect,
        achieved=measured_achieved() if measured else achieved,
        fp8_flop_per_s=gpu.peak_flop_per_s.get("fp8"),
        host=HOST_OVERHEADS,
        async_scheduling=async_scheduling_of(options),
        cuda_graph_max_tokens=graph_tokens,
        prefill_graph_max_tokens=prefill_graph_tokens,
        # the engine's own DSA module tables (None for SGLang: vLLM's do not time its kernels)
        dsa_delta_us=dsa_grids,
        # SGLang's DSA decode module outside a CUDA graph (DsaEager.stands_in_from: the release
        # its rows are of where they stand in for the tables')
        dsa_eager=dsa_eager,
        moe_ranks=layout.expert_ranks,
        ep=layout.ep,
        dp=layout.dp,
        scheduler_steps=options.num_scheduler_steps,
        # the model's own fused-MoE shape timed on this GPU by this (or the other) engine
        moe_curves_s=None if measured or spec.moe is None else moe_curves,
        # each dense GEMM at its own shape, this GPU and engine's own GEMM table (small steps)
        gemm_grid=None if measured else tables.gemm_grid,
        # each recurrent layer's kernels, this GPU's (own or borrowed) table of this engine
        recurrent_grid=None if measured or not spec.state_layers() else tables.recurrent_grid,
        op_rates=op_rates_of(gpu, wdtype) if per_op else None,
        op_dtype=wdtype,
        op_gather_kv=bool(per_op and gpu.measured.gather_kv),
        state_dtypes=engine_state_dtypes(spec, gpu, options),
        network=None if span is None else span.network,
        node_gpus=None if span is None else span.node_gpus,
        backend_kernels=kernels,
        # SGLang's DP attention gathers before every layer's MLP (StepModel.sglang_dp_comm_s)
        sglang_collectives=options.engine == "sglang",
        dp_lm_head=options.enable_dp_lm_head,
        dense_mlp_dp=options.moe_dense_tp_size == 1,
        untimed_backends=tuple(untimed),
        dsa_decode_kernel=dsa_kernel,
        borrowed_backends=tuple(borrowed_parts(kernels, tables.engine)),
        # a runner named on the command line and timed by a release is priced on its rows
        untimed_moe_backend=""
        if measured or (runner is not None and runner.rows.release is not None)
        else untimed_moe_flag(options),
    )
    if spec.moe is not None:
        notes.append(note("sim-weak-moe", timed=tables.label if model.moe_curve else None))
    ignored = ignored_nsa_flags(spec, options)
    if ignored:
        notes.append(note("sim-nsa-backend-ignored", flags=" ".join(ignored)))
    if untimed:
        notes.append(
            note(
                "sim-attention-kernels",
                backends=" ".join(untimed),
                tables=tables.label,
                kind="MLA"
                if any(a.kind is CacheKind.MLA for a in spec.attention_layers())
                else "GQA/MHA",
            )
        )
    if not measured and spec.attention_layers():
        notes.append(prefill_attention_note(model, kernels, tables.label))
    if named_timed:
        phases = named_timed
        notes.append(
            note(
                "sim-attention-timed",
                backends=", ".join(
                    f"{' and '.join(used)}: {name} ({t.kind.upper()} kernels, {t.rows:,} rows"
                    f"{', another GPU' + chr(39) + 's, borrowed' if t.borrowed_from else ''})"
                    for name, (t, used) in phases.items()
                ),
                tables=tables.label,
                version=next(iter(phases.values()))[0].version,
            )
        )
    if model.borrowed_parts:
        notes.append(
            note("sim-attention-borrowed", parts=model.borrowed_parts, tables=tables.label)
        )
    if model.cache_stand_ins:
        notes.append(
            note(
                "sim-attention-cache-stand-in",
                stand_ins=model.cache_stand_ins,
                tables=tables.label,
            )
        )
    if options.backends.moe(options.engine) is not None and not measured:
        notes.append(
            note(
                "sim-moe-kernels",
                flag=given_backends(options, moe=True),
                tables=tables.label,
                moe=spec.moe is not None,
            )
        )
    if any(
        layer.attention and layer.attention.indexer_head_dim
        for layer, _ in distinct_layers(spec.layers)
    ):
        notes.append(
            note(
                "sim-dsa-tables",
                gpu=gpu.name,
                layers=model.dsa.layers,
                tables=tables.name,
                module=f"{ENGINE_NAMES.get(tables.engine, tables.engine)} "
                f"{model.dsa.tables.engine_version}",
                stand_in=not model.dsa.shape_timed,
                own_baseline=model.dsa.tables.baseline == "kvplan_layer",
            )
            if model.dsa is not None
            else note("sim-dsa-dense", gpu=gpu.name, engine=options.engine)
        )
    if model.dsa is not None and dsa_kernel is not None:
        notes.append(
            note(
                "sim-dsa-decode-kernel",
                kernel=dsa_kernel[0],
                timed=dsa_kernel[1],
                tables=tables.name,
            )
        )
    releases = tables.version_words(
        ("gemm", "attention")
        + (("moe",) if spec.moe is not None else ())
        + (("dsa",) if dsa_layers(spec) else ())
        + (("recurrent",) if spec.state_layers() else ()),
        moe_format=moe_format(wdtype) if spec.moe is not None else None,
        moe_runner=None if runner is None else (runner.name, runner.rows.release),
    )
    notes.append(
        note("sim-measured-ops", dtype=gpu.measured.dtype, weights=wdtype)
        if per_op
        else note("sim-achieved-measured")
        if measured
        else note(
            "sim-kernel-tables",
            gpu=gpu.name,
            engine=options.engine,
            tables=tables.label,
            evidence=tables.evidence,
            **({"measured": tables.measured} if tables.measured else {}),
            **({"releases": releases} if releases else {}),
        )
    )
    return model, wdtype


def _v0_pool(spec, gpu, alloc, request, options, speculation):
    """(V0's own KV pool for a V0 release (kvplan.engines.vllm_v0.v0_pool), None and why not
    where kvplan keeps its V1 allocator's pool): on every rank the memory the profile left
    (vllm_memory.stage_memory's terms with the CUDA graphs not subtracted, or
    --kv-cache-memory) over CacheEngine's block, every attention layer of the rank in one."""
    from kvplan.anatomy.model import pp_stages
    from kvplan.engines import vllm_v0
    from kvplan.engines.vllm import attention_bytes_per_token

    release = v0_rules(options)
    if release is None:
        return None, "a V1 release"
    if not vllm_v0.v0_pool_applies(spec, release, request.max_model_len):
        return None, (
            f"{spec.name} has layers other than K/V attention V0 keeps whole (MLA, recurrent "
            "states, or a sliding window shorter than max_model_len), whose V0 cache kvplan "
            "does not model"
        )
    if speculation is not None:
        return None, "V0's speculative decoding (a draft model's cache) is not modelled"
    stages = pp_stages(spec._replace(dtype=alloc.dtype), options.pp)
    if alloc.memory is not None:
        available = [m.available_bytes for m in alloc.memory]
    else:
        available = [request.kv_cache_memory_bytes] * len(stages)
    block_size = options.block_size or vllm_v0.V0_BLOCK_SIZE
    sizes = [
        vllm_v0.cache_block_bytes(
            [
                attention_bytes_per_token(a, request.kv_cache_dtype, alloc.dtype, options.tp)
                for a in stage.attention_layers()
            ],
            block_size,
        )
        for stage in stages
    ]
    swap_gib = vllm_v0.SWAP_SPACE_GIB if options.swap_space is None else options.swap_space
    pool = vllm_v0.v0_pool(available, sizes, swap_gib)
    vllm_v0.check_v0_pool(pool, block_size, request.max_model_len)
    return pool, ""


def _engine_config(
    alloc, max_model_len, seqs, mnbt, prefix_caching, options, pool=None, gpu=None
) -> EngineConfig:
    """The pool in blocks of the full-attention group; sliding-window groups as vLLM's
    SlidingWindowManager keeps them where their blocks map onto the pool's one to one (the
    full group's block size, a whole number of window groups per full group), other windowed
    and state groups as a fixed share per request (their steady-state blocks). `pool`: V0's own
    (kvplan.engines.vllm_v0.V0Pool), all its blocks usable (no null block), with its CPU pool
    and `gpu`'s host link where --preemption-mode swap is given."""
    from kvplan.engines.vllm_v0 import watermark_blocks
    from kvplan.simulate.engine import EngineConfig, side_blocks, usable_blocks, window_blocks

    v0 = v0_rules(options) is not None
    if pool is not None:
        from kvplan.engines.vllm_v0 import V0_BLOCK_SIZE, swaps

        swap = swaps(options.preemption_mode) and gpu is not None and gpu.host_link is not None
        return EngineConfig(
            max_num_seqs=seqs,
            max_num_batched_tokens=mnbt,
            max_model_len=max_model_len,
            num_blocks=pool.num_gpu_blocks,
            block_size=options.block_size or V0_BLOCK_SIZE,
            enable_prefix_caching=prefix_caching,
            enable_chunked_prefill=options.enable_chunked_prefill,
            preemption=options.preemption,
            continuous_batching=options.continuous_batching,
            async_scheduling=options.async_scheduling,
            reserve_full_isl=True,  # can_allocate: the whole prompt's blocks on admission
            scheduler_steps=options.num_scheduler_steps,
            prefill_first=v0_prefill_first(options),
            admission_watermark_blocks=watermark_blocks(pool.num_gpu_blocks),
            swap_cpu_blocks=pool.num_cpu_blocks if swap else -1,
            swap_block_bytes=pool.block_bytes,
            host_link_one_way_bytes_per_s=gpu.host_link.one_way_bytes_per_s if swap else 0.0,
        )

    full = (CacheKind.FULL, CacheKind.MLA)
    main = [g for g in alloc.groups if g.kind in full]
    others = [g for g in alloc.groups if g.kind not in full]
    if not main:  # every layer windowed or recurrent: the first group stands for the pool
        main, others = others[:1], others[1:]
    side: dict[tuple, int] = {}
    sliding: dict[int, int] = {}  # window -> groups
    for g in others:
        if g.kind is CacheKind.SLIDING and g.block_size == main[0].block_size:
            sliding[g.window] = sliding.get(g.window, 0) + 1
            continue
        if g.kind is CacheKind.STATE:
            cap = 0
        elif g.kind is CacheKind.SLIDING:
            cap = math.ceil((g.window - 1) / g.block_size) + 1
        else:  # chunked
            cap = math.ceil(g.window / g.block_size)
        side[(cap, g.block_size)] = side.get((cap, g.block_size), 0) + 1
    windows = []
    for window, groups in sliding.items():
        if groups % len(main) == 0:  # a window table per full group's table
            windows.append((window, groups // len(main)))
        else:  # a fixed share: cdiv(window - 1, block_size) + 1 blocks
            cap = math.ceil((window - 1) / main[0].block_size) + 1
            side[(cap, main[0].block_size)] = side.get((cap, main[0].block_size), 0) + groups
    # vLLM's KV cache managers count a block as block_size x dcp tokens: each of the dcp ranks
    # holds every dcp-th token of it (the interleaved layout, cp_kv_cache_interleave_size 1)
    block_size = main[0].block_size * options.decode_context_parallel_size
    num_blocks = usable_blocks(alloc.num_blocks, len(main))  # less vLLM's null block
    config = EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=mnbt,
        max_model_len=max_model_len,
        num_blocks=num_blocks,
        block_size=block_size,
        side_blocks=tuple((cap, groups, size) for (cap, size), groups in side.items()),
        main_groups=len(main),
        enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=options.enable_chunked_prefill,
        preemption=options.preemption,
        continuous_batching=options.continuous_batching,
        async_scheduling=options.async_scheduling,
        # V0's block manager allocates a prompt's every block on admission (can_allocate)
        reserve_full_isl=v0 or _minor(options.vllm_version) >= FULL_ISL_FROM,
        free_uncached_first=_minor(options.vllm_version) >= UNCACHED_FIRST_FROM,
        window_groups=tuple(windows),
        window_admission_cap=_minor(options.vllm_version) >= WINDOW_CAP_FROM,
        window_processed_drops=_minor(options.vllm_version) >= WINDOW_CAP_FROM,
        scheduler_steps=options.num_scheduler_steps,
        prefill_first=v0_prefill_first(options),
        admission_watermark_blocks=watermark_blocks(num_blocks) if v0 else 0,
    )
    longest = -(-max_model_len // block_size)
    longest += side_blocks(config, max_model_len) + window_blocks(config, max_model_len)
    # vLLM's start-up check (up to at least 0.19) counts its null block as free
    if longest > alloc.num_blocks // len(main):
        raise KvplanError(
            f"the KV pool ({num_blocks:,} blocks of {block_size} tokens) cannot hold one "
            f"{max_model_len:,}-token request; lower --max-model-len or raise the KV memory"
        )
    return config


FULL_ISL_FROM = (0, 19)  # vLLM's scheduler_reserve_full_isl, on by default
UNCACHED_FIRST_FROM = (0, 24)  # BlockPool.free_blocks: uncached blocks reused first
# the whole-prompt check counts a sliding window's blocks at most up to its admission cap
# (SlidingWindowSpec.max_admission_blocks_per_request: in 0.32.0's source, not in 0.19.1's)
WINDOW_CAP_FROM = (0, 32)


def _minor(version: str, flag: str = "--vllm-version") -> tuple[int, int]:
    """'0.13' or '0.19.1' -> (0, 13), a release simulate takes."""
    from kvplan.engines.releases import release_minor
    from kvplan.engines.vllm import check_release_exists
    from kvplan.release import release_line

    if V0_FROM <= (release_line(version) or (-1, -1)) <= (9, 999):
        check_release_exists(version, flag)  # '0.19.x': no release of a line kvplan runs
    major, minor = release_minor(version) or (-1, -1)
    if not V0_FROM <= (major, minor) <= (9, 999):  # V0 0.6-0.7 run with V1's 0.8 rules
        raise KvplanError(f"{flag} {str(version)[:20]!r}: a vLLM version from 0.6, as 0.19")
    return major, minor


def check_engine_version(engine: str, version: str) -> None:
    """--engine-version (simulate's, plan's): a release of `engine` kvplan runs, exactly or
    with the nearest known one's rules (noted where the replica is built), or a one-line error
    for what no release spells."""
    if engine == "sglang":
        from kvplan.engines.sglang import sglang_release

        sglang_release(version)
    else:
        _minor(version, "--engine-version")


def run_engine_version(options: ServeOptions) -> str:
    """The release of the simulated engine a run names (--engine-version; kvplan's default, a
    bare series, where none was given): whose kernel tables price its steps
    (kernel_tables.tables_for)."""
    return options.sglang_version if options.engine == "sglang" else options.vllm_version


def release_notes(engine: str, version: str) -> list[Note]:
    """The notes of a release kvplan does not model itself, whatever the configuration: a
    vLLM release newer than the newest modelled, an SGLang release run with the nearest known
    one's rules, a release candidate or dev build run with its release's rules (the notes
    build_replica gives)."""
    from kvplan.engines.releases import prerelease, release_parts

    notes: list[Note] = []
    parts = release_parts(version)
    if prerelease(version) and parts is not None:
        release = ".".join(str(p) for p in parts)
        name = "SGLang" if engine == "sglang" else "vLLM"
        notes.append(
            note("sim-version-prerelease", engine=name, given=str(version)[:20], release=release)
        )
    if engine != "sglang":
        newer = newer_than_modelled(version)
        return notes if newer is None else [*notes, newer]
    from kvplan.engines.sglang import sglang_release

    release, nearest = sglang_release(version)
    if nearest:
        notes.append(note("sim-sglang-version-nearest", given=version, rules=release))
    return notes


def newer_than_modelled(version: str) -> Note | None:
    """The note of a vLLM release newer than the newest kvplan models (1.0, 0.999): it runs
    with the newest one's rules, said so rather than printed as that release's own."""
    from kvplan.engines.releases import VLLM_VERSIONS

    newest = VLLM_VERSIONS[-1]
    if _minor(version) <= _minor(newest):
        return None
    return note("sim-vllm-version-newer", given=str(version)[:20], rules=newest)


MOE_BACKEND_FROM = (0, 19)  # the oldest release whose --moe-backend names kvplan knows
V0_FROM = (0, 6)  # the oldest release kvplan takes (V0; run with 0.8's V1 rules, noted)
MULTI_STEP_UNTIL = (0, 8)  # --num-scheduler-steps: V0 only, gone with V0 after 0.8
MAX_SCHEDULER_STEPS = 64


def v0_rules(options: ServeOptions) -> tuple[int, int, int] | None:
    """The vLLM V0 release whose rules the replica runs: a V0 release (0.6, 0.7), or the 0.8
    patch whose engine oracle fell back to V0 (options.v0_engine); None for V1."""
    from kvplan.engines import vllm_v0

    if options.engine != "vllm":
        return None
    release = vllm_v0.v0_release(options.vllm_version)
    if release is None and options.v0_engine:
        release = vllm_v0.v08_release(options.vllm_version)
    return release


def v0_prefill_first(options: ServeOptions) -> bool:
    """Whether the replica runs vLLM V0's Scheduler._schedule_default (V0 releases 0.6, 0.7,
    and 0.8's V0 fallback, with chunked prefill off): a step that admits prompts runs them
    alone."""
    return v0_rules(options) is not None and options.enable_chunked_prefill is False


def check_multi_step(options: ServeOptions) -> Note | None:
    """vLLM V0's --num-scheduler-steps, refused where the engine has none; the note of a V0
    release run with V1's rules (None: a V1 release and no multi-step)."""
    steps = options.num_scheduler_steps
    if (
        isinstance(steps, bool)
        or not isinstance(steps, int)
        or not 1 <= steps <= MAX_SCHEDULER_STEPS
    ):
        raise KvplanError(f"--num-scheduler-steps {steps}: between 1 and {MAX_SCHEDULER_STEPS}")
    version = _minor(options.vllm_version)
    if steps > 1 and options.engine != "vllm":
        raise KvplanError(
            "--num-scheduler-steps is vLLM V0's multi-step scheduling; SGLang has none"
        )
    if steps > 1 and version > MULTI_STEP_UNTIL:
        raise KvplanError(
            f"--num-scheduler-steps is vLLM V0's (0.6-0.8); vLLM {options.vllm_version} runs V1, "
            "which has no multi-step scheduling: give --engine-version 0.6, 0.7 or 0.8"
        )
    if steps > 1 and options.speculative_config is not None:
        raise KvplanError("vLLM's multi-step scheduling does not run with speculative decoding")
    v0 = v0_rules(options) is not None
    if v0 or steps > 1:
        return note(
            "sim-vllm-v0",
            version=options.vllm_version,
            steps=steps,
            prefill_first=v0_prefill_first(options),
            v0_rules=v0,
        )
    return None


# SGLang's page is one token; the simulated pool counts blocks of this many (prefix hits and
# allocation in whole blocks), which costs at most this many tokens less per request
SGLANG_SIM_BLOCK = 16


def _speculative_state_slots(spec: ModelSpec, options: ServeOptions, dp: int) -> int:
    """The recurrent states an SGLang hybrid reserves for speculative verification
    (engines.sglang.speculative_state_slots): 0 without a state layer or speculation."""
    from kvplan.engines.sglang import requested_running, speculative_state_slots
    from kvplan.simulate import speculative

    if not spec.state_layers():
        return 0
    request = speculative.requested(spec, options)
    if request is None:
        return 0
    running = requested_running(options.max_num_seqs, True)
    assert running is not None
    return speculative_state_slots(running, request.verify_tokens, dp)


def _sglang_spec_v2(
    options: ServeOptions, spec_request: SpecDecode | None, overlap_given: bool
) -> bool:
    """Whether SGLang runs the speculation `spec_request` asks for (None: none) as spec v2
    (engines.sglang.sglang_spec_v2); `options.async_scheduling` resolved, `overlap_given`:
    whether --enable/--disable-overlap-schedule was given."""
    from kvplan.engines.sglang import sglang_spec_v2

    return (
        spec_request is not None
        and spec_request.method != "ngram"  # NGRAM turns the overlap scheduler off
        and sglang_spec_v2(
            options.sglang_version,
            options.speculative_eagle_topk,
            (overlap_given and not options.async_scheduling) or options.pp > 1,
        )
    )


def _sglang_mamba_strategy(
    spec: ModelSpec,
    gpu: GpuProfile,
    options: ServeOptions,
    speculating: bool,
    spec_v2: bool,
    overlap_given: bool,
) -> MambaStrategy:
    """engines.sglang.resolve_mamba_strategy for these options (async_scheduling resolved)."""
    from kvplan.engines.sglang import resolve_mamba_strategy

    return resolve_mamba_strategy(
        spec,
        gpu,
        options.mamba_scheduler_strategy,
        options.sglang_version,
        overlap=bool(options.async_scheduling),
        overlap_off_given=overlap_given and not options.async_scheduling,
        page_size=options.block_size,
        radix_cache=options.enable_prefix_caching is not False,
        speculative=speculating,
        spec_v2=spec_v2,
    )


def sglang_mamba_strategy(spec: ModelSpec, gpu: GpuProfile, options: ServeOptions) -> MambaStrategy:
    """The mamba strategy (engines.sglang.MambaStrategy) an SGLang replica of these options
    (as given) runs with: the one resolution build_sglang_replica makes, for a caller that
    must know it before building one (plans.plan: whether a speculating hybrid keeps its
    radix cache)."""
    from kvplan.simulate.speculative import requested

    overlap_given = options.async_scheduling is not None
    options = options._replace(async_scheduling=async_scheduling_of(options))
    spec_request = requested(spec, options)
    spec_v2 = _sglang_spec_v2(options, spec_request, overlap_given)
    return _sglang_mamba_strategy(
        spec, gpu, options, spec_request is not None, spec_v2, overlap_given
    )


def build_sglang_replica(spec: ModelSpec, gpu: GpuProfile, options: ServeOptions) -> Replica:
    """An SGLang replica with `python -m sglang.launch_server`'s defaults: the KV pool and
    limits from kvplan's SGLang allocator model, SGLang's scheduler (kvplan.simulate.sglang)."""
    from kvplan.engines import EngineRequest
    from kvplan.engines.moe_backend import check_sglang_moe_backend
    from kvplan.engines.sglang import (
        detokenizer_token_s,
        draft_in_pool,
        mamba_radix_overlap_off,
        piecewise_prefill,
        requested_running,
        sglang_allocation,
        sglang_attention,
        sglang_radix_off,
        sglang_release,
        spec_v2_lookahead_tokens,
        spec_v2_reserve_tokens,
    )
    from kvplan.simulate.engine import EngineConfig
    from kvplan.simulate.sglang import (
        DP_ATTENTION_CONSERVATIVENESS,
        INIT_NEW_TOKEN_RATIO,
        MAX_PREFILL_TOKENS,
        SglangPolicy,
    )

    overlap_given = options.async_scheduling is not None
    options = options._replace(
        async_scheduling=async_scheduling_of(options),
        # a given --context-length caps the piecewise graphs in some releases; none given here,
        # the one a plan's command carries (plans.plan._launch_piecewise), else none
        piecewise=options.piecewise._replace(
            context_length=options.max_model_len or options.piecewise.context_length
        ),
    )
    for given, flag in (
        (
            options.gpu_mem_util != 0.9,
            "--gpu-memory-utilization (SGLang's is --mem-fraction-static)",
        ),
        (options.enable_chunked_prefill is False, "--no-enable-chunked-prefill"),
        (options.preemption_mode is not None, "--preemption-mode"),
        (options.swap_space is not None, "--swap-space"),
        (not options.preemption, "--no-preemption"),
        (not options.continuous_batching, "--no-continuous-batching"),
        (
            options.decode_context_parallel_size != 1,
            "--decode-context-parallel-size (SGLang has no decode context parallelism)",
        ),
        (
            options.num_scheduler_steps != 1,
            "--num-scheduler-steps (vLLM V0's multi-step scheduling; SGLang has none)",
        ),
    ):
        if given:
            raise KvplanError(f"{flag} is a vLLM option; the SGLang simulation does not take it")
    check_backends(options.backends, "sglang", options.sglang_version)
    layout = parallel_layout(spec, options)
    check_sglang_dp_flags(options, layout)
    release, _nearest = sglang_release(options.sglang_version)
    notes: list[Note] = release_notes("sglang", options.sglang_version)
    max_model_len = resolved_max_model_len(spec, options)
    length_note = default_length_note(spec, options)
    if length_note is not None:
        notes.append(length_note)
    from kvplan.simulate.speculative import requested

    spec_request = requested(spec, options)
    speculating = spec_request is not None
    spec_v2 = _sglang_spec_v2(options, spec_request, overlap_given)
    mamba = _sglang_mamba_strategy(spec, gpu, options, speculating, spec_v2, overlap_given)
    track_slots = mamba.track_slots
    request = EngineRequest(
        engine="sglang",
        speculative_state_slots=_speculative_state_slots(spec, options, layout.dp),
        sglang_version=options.sglang_version,  # the patch gates some rules (gpt-oss's pool)
        max_model_len=max_model_len,
        kv_cache_dtype=options.kv_cache_dtype,
        tp=layout.attn_tp,  # a DP-attention rank's: its KV heads and dense layers
        pp=options.pp,
        kv_cache_memory_bytes=options.kv_cache_memory_bytes,
        allow_long_max_model_len=options.allow_long_max_model_len,
        block_size=options.block_size,  # --page-size (the backends may force theirs)
        mem_fraction_static=options.mem_fraction_static,
        weights_dtype=weights_format(options),
        expert_ranks=layout.expert_ranks if layout.modelled else None,
        dp_attention=layout.dp,
        dp_size=layout.dp_replicas,  # --dp-size without DP attention
        enable_dp_lm_head=options.enable_dp_lm_head,
        moe_dense_tp_size=options.moe_dense_tp_size,
        backends=options.backends,
        speculative_eagle_topk=options.speculative_eagle_topk,
        speculative_tree=None if spec_request is None else (spec_request.method, spec_request.topk),
        cuda_ipc_pool_bytes=(options.cuda_ipc_pool_mib or 0) * MIB,
        speculative=speculating,
        speculative_algorithm=options.speculative_algorithm if speculating else None,
        radix_cache=options.enable_prefix_caching is not False,
        # server_args sets 48 when speculating and none is given
        max_running_requests=requested_running(options.max_num_seqs, speculating),
        mamba_track_slots=track_slots,
        mamba_strategy_auto=mamba.auto,
        piecewise=options.piecewise,
    )
    alloc = sglang_allocation(spec, gpu, request)
    check_sglang_moe_backend(
        options.backends.moe_runner_backend, options.quantization, options.tp, options.ep_size
    )
    notes.extend(alloc.notes)
    fmt_name = kv_format_name("sglang", alloc.kv_cache_dtype)
    speculation, draft = _speculation(spec, gpu, options, fmt_name, layout.attn_tp)
    if speculation is not None:
        if layout.dp > 1 and speculation.request.method in ("draft_model", "ngram"):
            raise KvplanError(
                "SGLang runs STANDALONE and NGRAM speculative decoding without DP attention"
            )
        if draft_in_pool(options.sglang_version):
            # from 0.5.14 the pool holds the draft's weights and layers, its pool as many
            # tokens as the target's (engines.sglang.SPEC_DRAFT_IN_POOL_FROM); before it the
            # target's pool is its own, the draft in the speculative reserve
            blocks = speculative_pool_tokens(alloc, speculation, options, spec, fmt_name, layout)
            alloc = alloc._replace(kv_cache_tokens=blocks)
    block = max(alloc.block_size, SGLANG_SIM_BLOCK)
    # a pool below the context length: SGLang starts with max_req_len = pool - 1 and cuts
    # max_new_tokens to max_req_len - prompt - 1, so prompt + outputs <= pool - 2; admission
    # then needs prompt + outputs + a page below the free tokens, here the pool's whole blocks
    context_len = max_model_len  # what the tokenizer manager checks requests against
    longest = min(
        sglang_longest_request(alloc.kv_cache_tokens),
        alloc.kv_cache_tokens // block * block - alloc.block_size - 1,
    )
    if longest < max_model_len:
        if longest < 2:
            raise KvplanError("SGLang's KV pool holds no request; raise the KV memory")
        pool = alloc.kv_cache_tokens
        notes.append(
            note(
                "sim-sglang-pool-caps",
                context=max_model_len,
                tokens=pool,
                max_req_len=sglang_max_req_len(pool),
                prompt_limit=sglang_prompt_limit(pool),
                longest_request=sglang_longest_request(pool),
                longest=longest,
            )
        )
        max_model_len = longest
    chunk = options.max_num_batched_tokens or alloc.chunked_prefill_size
    # the scheduler's count as the allocation resolved it (sglang_allocation: the count the
    # request named, given or server_args' 48 when speculating, a DP-attention rank's share of
    # it, else the pool's own; capped by a hybrid's state pool, init_memory)
    running = alloc.max_running_requests
    if speculation is not None:
        # spec v1: the overlap scheduler off; spec v2 overlaps at the round (SpeculativeStepModel
        # overlap), its target's steps priced with their host serial
        options = options._replace(async_scheduling=False)
    backend = sglang_attention(spec, gpu, request, release, alloc.kv_cache_dtype).decode
    # the radix cache as SGLang keeps it: off where given or where its rules for a hybrid turn it
    # off (sglang_radix_off, the pool's rule too: no prefix is ever reused)
    radix = sglang_radix_off(spec, gpu, request, backend) is None
    if layout.dp > 1:
        # server_args._handle_data_parallelism divides the chunked prefill size ("adjusted to
        # avoid MoE kernel issues": each rank's prefill batch, the MoE layers seeing the sum)
        chunk = max(1, chunk // layout.dp)
    prefix_caching = radix
    if (
        not overlap_given
        and not track_slots
        and mamba_radix_overlap_off(
            spec, options.sglang_version, backend, speculation is not None, prefix_caching
        )
    ):
        options = options._replace(async_scheduling=False)
        notes.append(note("sglang-mamba-no-overlap", backend=backend))
    # spec v2's over-allocation: the slots each running request holds from its committed length
    # on (the token it decodes and 2 x the round's allocation - 1 more)
    reserve = 0
    if speculation is not None:
        r = speculation.request
        reserve = spec_v2_reserve_tokens(
            options.sglang_version, r.method, r.num_steps, r.topk, r.verify_tokens,
            alloc.block_size, spec_v2,
        )  # fmt: skip
    if reserve:
        notes.append(note("sglang-spec-v2-kv", reserve=reserve, tokens=alloc.kv_cache_tokens))
    config = EngineConfig(
        max_num_seqs=running,
        max_num_batched_tokens=chunk,
        max_model_len=max_model_len,
        num_blocks=alloc.kv_cache_tokens // block,
        block_size=block,
        enable_prefix_caching=prefix_caching,
        spec_lookahead=spec_v2_lookahead_tokens(reserve),
        # one detokenizer process serves every DP-attention rank: each rank's engine, stepping
        # as many tokens as the others, gets 1/dp of it
        detokenizer_token_s=detokenizer_token_s(spec, options.sglang_version) * layout.dp,
    )
    # async_scheduling stands for SGLang's overlap scheduler (on by default)
    graph_tokens = 0 if options.enforce_eager else alloc.cuda_graph_max_bs
    piecewise = piecewise_prefill(
        spec,
        options.sglang_version,
        options.piecewise,
        options.max_num_batched_tokens or alloc.chunked_prefill_size,
        sglang_piecewise_excluded(gpu, options, layout, speculation is not None),
    )
    # without piecewise graphs SGLang runs every prefill batch eagerly; kvplan keeps pricing
    # one of up to the decode graphs' batch as a graph step (None), the eager cost SGLang pays
    # being unmeasured (the note says so)
    prefill_graph_tokens = 0 if options.enforce_eager else (piecewise.tokens or None)
    model, wdtype = step_model(
        spec, gpu, options, fmt_name, graph_tokens, notes, weights_format(options), layout,
        prefill_graph_tokens=prefill_graph_tokens,
    )  # fmt: skip
    if speculation is not None:
        model = _speculative_model(
            model, speculation, draft, gpu, options, fmt_name, graph_tokens, spec_v2
        )
        notes.append(_spec_note(speculation, "sglang"))
        notes.append(note("sglang-spec-mode", version=options.sglang_version, v2=spec_v2))
        given_topk = options.speculative_eagle_topk
        if speculation.request.method == "ngram" and given_topk not in (
            None,
            speculation.request.topk,
        ):
            # server_args _handle_ngram (run after the backend pick): topk := the BFS breadth
            notes.append(note("sglang-ngram-topk", given=given_topk, topk=speculation.request.topk))
    if options.enforce_eager:
        notes.append(note("sim-enforce-eager", engine="sglang"))
    notes.append(
        note(
            "sim-sglang",
            max_prefill_tokens=MAX_PREFILL_TOKENS,
            page=alloc.block_size,
            block=block,
            swa=alloc.swa_tokens is not None,
            # the prefill steps priced with graph launches: none under DP attention
            # (lockstep_rules)
            graph_tokens=(
                prefill_graph_tokens if prefill_graph_tokens is not None else graph_tokens
            )
            if layout.dp == 1
            else 0,
            graph_off=piecewise.off_because or "--disable-cuda-graph",
            piecewise=bool(piecewise.tokens),
            release=options.sglang_version,
            eager_per_layer_s=HOST_OVERHEADS.eager_per_layer_s,
            reference_layer_launches=HOST_OVERHEADS.reference_layer_launches,
        )
    )
    resolved = options._replace(
        # spec v2 runs beside the overlap scheduler (its model overlaps at the round)
        async_scheduling=bool(options.async_scheduling) or spec_v2,
        max_num_seqs=running,
        max_num_batched_tokens=chunk,
        max_model_len=max_model_len,
        block_size=block,
        enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=True,  # SGLang's chunked prefill (--no-... refused above)
        kv_cache_dtype=alloc.kv_cache_dtype,
    )
    policy = SglangPolicy(
        page_size=alloc.block_size,
        # the overlap loop's one step more (SglangPolicy.overlap): not under PP, whose
        # server_args._handle_pipeline_parallelism sets disable_overlap_schedule whatever was
        # given and whose scheduler runs event_loop_pp instead
        overlap=bool(resolved.async_scheduling) and options.pp == 1,
        # DP attention scales schedule_conservativeness by 0.3: admission reserves less
        init_new_token_ratio=INIT_NEW_TOKEN_RATIO
        * (DP_ATTENTION_CONSERVATIVENESS if layout.dp > 1 else 1.0),
    )
    return Replica(
        config,
        model,
        resolved._replace(mem_fraction_static=alloc.mem_fraction_static, sglang_version=release),
        wdtype,
        alloc.kv_cache_tokens,
        tuple(notes),
        speculation=speculation,
        policy=policy,
        layout=_modelled(layout),
        context=context_limit(
            "sglang", options.sglang_version, context_len, max_model_len, alloc.kv_cache_tokens
        ),
        kv_format=fmt_name,
    )


def sglang_piecewise_excluded(
    gpu: GpuProfile, options: ServeOptions, layout: ParallelLayout, speculative: bool
) -> str | None:
    """The layout's reason SGLang's _handle_piecewise_cuda_graph turns piecewise prefill graphs
    off (engines.sglang.piecewise_excluded), None where none."""
    from kvplan.engines.sglang import piecewise_excluded

    return piecewise_excluded(gpu, speculative, layout.dp, options.pp, options.sglang_version)


def check_sglang_dp_flags(options: ServeOptions, layout: ParallelLayout) -> None:
    """SGLang's --enable-dp-lm-head and --moe-dense-tp-size, as its server_args takes them:
    the head over the attention TP group needs DP attention ("Please enable dp attention when
    setting enable_dp_lm_head"), and --moe-dense-tp-size takes 1 alone ("moe_dense_tp_size only
    support 1 and None currently"). kvplan prices both under DP attention over 2 or more ranks,
    and --moe-dense-tp-size 1 at an attention TP of 1 only (above it each attention-TP GPU runs
    the dense MLPs on its 1/TP of the rank's rows, ScatterMode SCATTERED, which the GEMM
    shapes here do not lay out): refused otherwise, one line."""
    dense = options.moe_dense_tp_size
    if dense is not None and dense != 1:
        raise KvplanError(
            f"--moe-dense-tp-size {dense}: SGLang takes 1 alone (the dense MLPs whole on "
            "every GPU; without the flag, split over the TP group)"
        )
    for given, flag in (
        (options.enable_dp_lm_head, "--enable-dp-lm-head"),
        (dense is not None, "--moe-dense-tp-size 1"),
    ):
        if given and layout.dp < 2:
            raise KvplanError(
                f"{flag}: kvplan prices it under --enable-dp-attention with --dp-size 2 or more "
                "(SGLang requires DP attention for --enable-dp-lm-head)"
            )
    if dense is not None and layout.attn_tp != 1:
        raise KvplanError(
            f"--moe-dense-tp-size 1 at an attention TP of {layout.attn_tp} (--tp {options.tp} "
            f"/ --dp-size {layout.dp}) is not modelled: give --dp-size equal to --tp"
        )


def speculative_pool_tokens(alloc, speculation, options, spec, fmt_name, layout) -> int:
    """SGLang's pool in tokens with a draft beside it (techniques.speculative_pool_blocks over
    single-token pages)."""
    from kvplan.formulas.kv import kv_bytes_per_token
    from kvplan.formulas.techniques import speculative_pool_blocks

    target = kv_bytes_per_token(spec, resolve_kv_format(fmt_name, spec.dtype), layout.attn_tp)
    weights = 0.0 if options.kv_cache_memory_bytes is not None else speculation.draft_weight_bytes
    tokens = speculative_pool_blocks(
        alloc.kv_cache_tokens,
        alloc.pool_bytes,
        weights,
        target,
        speculation.draft_kv_bytes_per_token,
    )
    if tokens <= 0:
        raise KvplanError("the draft's weights leave no memory for the KV cache")
    return tokens


def make_engine(
    replica: Replica, per_token_s: float, demand: int | None = None, stand_in: bool = False
) -> Engine:
    """One replica's engine: vLLM's scheduler, or SGLang's where the replica has its policy.
    `stand_in` (vLLM's): a counted pool until prefix caching could matter (Engine)."""
    from kvplan.simulate.engine import Engine

    if replica.policy is not None:
        from kvplan.simulate.sglang import SglangEngine

        return SglangEngine(
            replica.config, replica.model, per_token_s, demand, policy=replica.policy
        )
    return Engine(replica.config, replica.model, per_token_s, demand, stand_in=stand_in)


class ScaledStepModel:
    """A replica's step model with every step's time (its total and each term) times `scale`:
    the one place a simulation's step times can be made slower or faster as a whole (the
    interval's propagated runs, kvplan.plans.intervals.step_scales). The engines price a step
    through `step` (one step, a lockstep group's ranks) or `decode_span_s` (a run of
    decode-only steps) of the model they hold, `without_graphs` for an eager group and
    `extend_in_batch` for a group with an extend, each scaled here; besides, they read only the
    facts of SCALED_MODEL_FACTS, passed through as the wrapped model has them (none is a time).
    Any other attribute is an AttributeError, never the wrapped model's pricing unscaled."""

    def __init__(self, model, scale: float):
        if not (math.isfinite(scale) and scale > 0):
            raise KvplanError(f"a step-time scale must be a positive number (got {scale})")
        self.model, self.scale = model, scale

    def step(self, *args, **kwargs):
        return _scaled_step(self.model.step(*args, **kwargs), self.scale)

    def decode_span_s(self, *args, **kwargs):
        times, kept = self.model.decode_span_s(*args, **kwargs)
        return times * self.scale, lambda steps: _scaled_step(kept(steps), self.scale)

    def without_graphs(self) -> ScaledStepModel:
        return ScaledStepModel(self.model.without_graphs(), self.scale)

    def extend_in_batch(self) -> ScaledStepModel:
        return ScaledStepModel(self.model.extend_in_batch(), self.scale)

    def __getattr__(self, name: str):
        if name in SCALED_MODEL_FACTS:
            return getattr(self.model, name)
        raise AttributeError(f"ScaledStepModel does not scale {name!r}")


# what the engines read of the model they step besides its step times (Engine, cluster.Lockstep,
# the SGLang engine's lockstep rules): counts and flags, the same at any scale
SCALED_MODEL_FACTS = frozenset(
    ("cuda_graph_max_tokens", "dp_gather_full", "speculation", "skip_dp_mlp_sync")
)


def _scaled_step(timing, scale: float):
    return timing._replace(
        total_s=timing.total_s * scale,
        terms_s={k: v * scale for k, v in timing.terms_s.items()},
        untimed_s=timing.untimed_s * scale,
        stand_in_launch_s=timing.stand_in_launch_s * scale,
    )


def with_step_scale(replica: Replica, scale: float) -> Replica:
    """The replica with every step time times `scale` (ScaledStepModel); itself at 1."""
    if scale == 1.0:
        return replica
    # duck-typed: the engines call step, decode_span_s, without_graphs and extend_in_batch, the
    # rest delegates
    return replica._replace(model=cast("StepModel", ScaledStepModel(replica.model, scale)))
