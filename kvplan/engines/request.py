"""What every engine allocator takes (EngineRequest) and the models none of them prices yet (each
refused by name); kvplan.engines.engine_allocation dispatches to the engine's module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.engines.backends import Backends
from kvplan.engines.releases import SGLANG_VERSION, VLLM_VERSION, allocation_release
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

if TYPE_CHECKING:  # imported by the engine that needs them (start-up)
    from kvplan.anatomy.model import ModelSpec
    from kvplan.engines.llamacpp import LlamaCppRequest
    from kvplan.engines.ollama import OllamaRequest
    from kvplan.inputs.hardware import GpuProfile
    from kvplan.notes import Note

ENGINES = ("vllm", "sglang", "llama.cpp", "ollama")


class PiecewiseFlags(NamedTuple):
    """SGLang's piecewise-CUDA-graph flags as given: --disable-piecewise-cuda-graph,
    --enable-piecewise-cuda-graph (the opt-in before 0.5.10, deprecated after) and
    --piecewise-cuda-graph-max-tokens (None: SGLang's default)."""

    disable: bool = False
    enable: bool = False
    max_tokens: int | None = None
    # --context-length as given (None: the model's own), which SGLang 0.5.13-0.5.16 clamp
    # piecewise_cuda_graph_max_tokens to (engines.sglang.piecewise_max_tokens); not a
    # piecewise flag of its own, so given() leaves it out
    context_length: int | None = None

    def given(self) -> tuple[str, ...]:
        """The flags as SGLang's command line spells them, those given."""
        flags = [
            flag
            for flag, given in (
                ("--disable-piecewise-cuda-graph", self.disable),
                ("--enable-piecewise-cuda-graph", self.enable),
            )
            if given
        ]
        if self.max_tokens is not None:
            flags.append(f"--piecewise-cuda-graph-max-tokens {self.max_tokens}")
        return tuple(flags)


class EngineRequest(NamedTuple):
    engine: str = "vllm"
    max_model_len: int = 8192
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    max_num_batched_tokens: int | None = None  # None: the engine's default for the GPU
    tp: int = 1
    pp: int = 1
    gpu_mem_util: float = 0.9
    kv_cache_memory_bytes: int | None = None  # what the engine logged as available KV memory
    # vLLM's hybrid KV-cache manager (on by default): off, windowed layers of a model that also
    # has full ones are stored as full attention. hybrid_chunked False is
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 (off for chunked models only).
    hybrid_kv_cache_manager: bool = True
    hybrid_chunked: bool = True
    mem_fraction_static: float | None = None
    llamacpp: LlamaCppRequest | None = None  # for --engine llama.cpp
    ollama: OllamaRequest | None = None  # for --engine ollama
    dtype: str = "auto"  # the engine's --dtype: auto, bfloat16, float16, float32 (and aliases)
    weights_dtype: str = "auto"  # kvplan's spelling of the checkpoint's weights format
    quantization: str | None = None  # vLLM's --quantization (fp8 online, awq, gptq, ...)
    max_num_seqs: int | None = None  # None: the engine's default for the GPU
    enforce_eager: bool = False  # vLLM: no CUDA graphs (no graph-memory estimate)
    # the vLLM release as the user stated it (`kvplan engine`: one of VLLM_VERSIONS; simulate:
    # any release it takes, "0.13.0"); the allocator's rules are vllm_allocator's
    vllm_version: str = VLLM_VERSION
    # vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype as typed (engines.vllm.state_dtypes)
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    # whose server defaults SGLang's pool takes: a release kvplan knows (engines.releases
    # SGLANG_VERSIONS), resolved by sglang_release
    sglang_version: str = SGLANG_VERSION
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 / SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1: a
    # max_model_len past the engine's derived limit starts, with a note (else it is refused)
    allow_long_max_model_len: bool = False
    # expert / data parallelism (kvplan simulate): the GPUs the routed experts are spread over
    # when that is not tp (EP, or DP-attention ranks whose MoE layers span the group)
    expert_ranks: int | None = None
    # SGLang's --enable-dp-attention --dp-size N (1: off): `tp` is then a rank's attention TP, the
    # server's --tp tp x N (its memory defaults, the MLPs' and head's split)
    dp_attention: int = 1
    # SGLang's --dp-size without DP attention (1: none): independent replicas, each of `tp`
    # GPUs, behind one server (engines.sglang.default_mem_fraction's 0.4.6 graph sizes)
    dp_size: int = 1
    # SGLang under DP attention: --enable-dp-lm-head (the head split over the attention TP
    # group, not the whole group) and --moe-dense-tp-size 1 (the dense layers' MLPs whole on
    # every GPU)
    enable_dp_lm_head: bool = False
    moe_dense_tp_size: int | None = None
    # vLLM -dcp: the KV cache sharded along tokens over this many ranks of the TP group
    decode_context_parallel_size: int = 1
    # the engines' kernel-backend flags as typed (kvplan.engines.backends; none: the engine's own
    # choice)
    backends: Backends = Backends()
    speculative_eagle_topk: int | None = None  # SGLang picks its default backend by it
    # SGLang: the speculative draft tree as resolved (the kvplan method, its topk: EAGLE's as
    # given or auto-chosen, NGRAM's BFS breadth); None: not speculating
    speculative_tree: tuple[str, int] | None = None
    # SGLANG_USE_CUDA_IPC_TRANSPORT=1: the multimodal feature pool (SGLANG_MM_FEATURE_CACHE_MB)
    # the tokenizer process reserves on GPU 0 at start-up (0: the switch is off)
    cuda_ipc_pool_bytes: int = 0
    # SGLang hybrids under speculative decoding: the recurrent states reserved for the
    # verification's positions (engines.sglang.speculative_state_slots; 0: not speculating)
    speculative_state_slots: int = 0
    # SGLang: speculative decoding asked for, the radix cache (False: --disable-radix-cache) and
    # --max-running-requests as server_args hands it to the model runner (given, or 48 when
    # speculating; None: SGLang's own), which size a hybrid's state pool
    # (engines.sglang.sglang_radix_off, sglang_allocation)
    speculative: bool = False
    # SGLang's --speculative-algorithm as typed (None: not speculating): its reserve in the
    # default mem_fraction_static (engines.sglang.speculative_reserve_mib)
    speculative_algorithm: str | None = None
    radix_cache: bool = True
    max_running_requests: int | None = None
    # SGLang's --mamba-scheduler-strategy extra_buffer: the track buffer's recurrent states each
    # running request holds beside its own (engines.sglang.mamba_track_slots; 0: no_buffer)
    mamba_track_slots: int = 0
    # the strategy SGLang's default auto resolved to (engines.sglang.resolve_mamba_strategy;
    # None: one was given, or no auto applies): the pool's notes say how it was decided
    mamba_strategy_auto: str | None = None
    # vLLM V0's profile run (0.6, 0.7), whose sampler takes top-k/top-p (formulas.memory
    # v0_sampler_bytes)
    v0_profile: bool = False
    # SGLang's piecewise-CUDA-graph flags as given (their reserve in the default
    # mem_fraction_static: engines.sglang.piecewise_reserve_mib)
    piecewise: PiecewiseFlags = PiecewiseFlags()

    @property
    def vllm_allocator(self) -> str:
        """The release whose allocator rules kvplan runs for vllm_version (a VLLM_VERSIONS
        entry: engines.releases.allocation_release, the nearest not newer)."""
        return allocation_release(self.vllm_version)


def config_weights_notes(spec: ModelSpec, request: EngineRequest) -> list[Note]:
    """The model's notes that its config's weights format was not read (WEIGHTS_READ_NOTES),
    where the engine's weights come from the config: no --quantization, --weights-dtype auto."""
    from kvplan.anatomy.model import WEIGHTS_READ_NOTES

    if request.quantization is not None or request.weights_dtype != "auto":
        return []
    return [n for n in spec.notes if n.id in WEIGHTS_READ_NOTES]


def check_plain_tp_experts(spec: ModelSpec, request: EngineRequest) -> None:
    """A launch of plain TP (no expert_ranks: the engine's --tp alone) splits every routed
    expert over the TP ranks: refused where the engines stop at loading a block-FP8 expert
    split into partial blocks (engines.moe_backend.check_expert_split; a launch with EP or DP
    ranks is checked by its layout, simulate.setup.parallel_layout)."""
    from kvplan.engines.moe_backend import check_expert_split

    if request.expert_ranks is not None:
        return
    given = request.quantization is not None or request.weights_dtype != "auto"
    check_expert_split(spec, given, request.tp)


def check_kv_memory_given(request: EngineRequest, gpu: GpuProfile) -> None:
    """--kv-cache-memory (the KV memory per GPU the engine logged) is at most the GPU's whole
    memory (the larger of its nominal and its CUDA-reported capacity): the engines allocate it
    on the device beside the weights, so more cannot be an engine's log, and would size a pool
    no engine could allocate. A figure under that bound is taken as given."""
    given = request.kv_cache_memory_bytes
    if given is None:
        return
    from kvplan.units import GIB

    whole = max(gpu.memory_bytes, gpu.memory_reported_bytes or 0.0)
    if given > whole:
        raise KvplanError(
            f"--kv-cache-memory {given / GIB:,.2f} GiB is more than the {gpu.name}'s whole "
            f"memory ({whole / GIB:,.2f} GiB): no engine could allocate it; give the KV memory "
            "per GPU the engine logged"
        )


def refuse_compressed(spec, engine: str) -> None:
    """Compressed attention entries beside a sliding window (DeepSeek-V4's CSA/HCA) have no page
    layout modelled for this engine (vLLM 0.32's and SGLang 0.5.14's are:
    kvplan.engines.vllm_compressed, sglang_compressed): refused by name rather than priced as
    plain MLA."""
    compressed = [a for a in spec.attention_layers() if a.compress_ratio]
    if compressed:
        ratios = sorted({a.compress_ratio for a in compressed})
        raise KvplanError(
            f"{spec.name}: {len(compressed)} layers keep compressed attention entries (1 per "
            f"{' or '.join(map(str, ratios))} tokens beside a sliding window, DeepSeek-V4's "
            f"CSA/HCA); what {engine} allocates for them is not modelled yet (kvplan size and "
            "capacity give the architecture's bytes; kvplan engine --engine vllm or sglang "
            "gives those engines')"
        )


def refuse_gqa_indexer(spec, engine: str) -> None:
    """A key-only indexer cache beside GQA (MiniMax-M3) has no page layout modelled for this
    engine (vLLM's is, kvplan.engines.vllm): refused by name rather than priced as DSA's
    indexer beside MLA. Compressed attention is refused first."""
    refuse_compressed(spec, engine)
    layers = [a for a in spec.attention_layers() if a.gqa_indexer]
    if layers:
        # sglang 0.5.14's sglang/srt/models has no MiniMax-M3 (minimax_m2.py is the newest)
        why = (
            "SGLang 0.5.14 has no MiniMax-M3 model (checked its sglang/srt/models)"
            if engine == "SGLang"
            else f"what {engine} allocates for it is not modelled yet"
        )
        raise KvplanError(
            f"{spec.name}: {len(layers)} layers keep a key-only indexer cache beside K and V "
            f"({layers[0].indexer_head_dim} wide, MiniMax-M3's lightning indexer); {why} (kvplan "
            "size and capacity give the architecture's bytes)"
        )


def refuse_backends_for_compressed(request: EngineRequest, engine: str) -> None:
    """DeepSeek-V4's compressed pools (vLLM 0.32, SGLang 0.5.14) are modelled for the engines'
    own DeepSeek-V4 attention only: a given attention-backend flag is refused, not ignored."""
    given = [flag for flag, _ in request.backends.given(moe=False)]
    if given:
        raise KvplanError(
            f"{given[0]}: kvplan models DeepSeek-V4's pools for {engine}'s own DeepSeek-V4 "
            "attention only, not another backend's"
        )
