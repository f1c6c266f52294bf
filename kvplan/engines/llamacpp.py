"""llama.cpp's KV-cache allocation, reproduced from a GGUF (or a config.json), with its offload.

Rules (docs/engines.md, "llama.cpp"), from llama.cpp's source at upstream 82bb48500 (about
b10309) and the builds where each changed:

- context: n_ctx = pad256(-c) (-c 0: the training context); unified: one stream of n_ctx cells
  shared by every sequence; split (an explicit -np without -kvu): -np streams of
  n_ctx_seq = pad256(n_ctx // np) cells each.
- sliding-window layers (iSWA) get their own cache of pad256(min(n_ctx_seq, window x
  (unified ? np : 1) + n_ubatch)) cells per stream (n_ctx_seq with --swa-full).
- K and V rows: n_embd_k_gqa = Hkv x d_k values per token per layer in -ctk's ggml type (block
  scales included), V likewise in -ctv; MLA stores one K row of kv_lora + rope and no V.
- recurrent layers: max(1, np) cells of f32 conv and ssm state.
- -ngl N puts the output layer and the last N - 1 blocks on the GPU; a block's cache follows it.
"""

from __future__ import annotations

from kvplan import __version__
from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec
from kvplan.dtypes import (
    GGML_CACHE_QUANTS,
    LLAMA_CACHE_TYPES,
    KvFormat,
    ggml_row_bytes,
    ggml_type,
)
from kvplan.errors import KvplanError
from kvplan.formulas.offload import (
    first_gpu_layer,
    output_on_gpu,
    placed_bytes,
    two_memory_step_time_s,
)
from kvplan.formulas.step_time import Op, OpKind, ops_by_layer, step_ops
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique
from kvplan.record import NamedTuple
from kvplan.units import GIB

LLAMA_CPP_BUILD = 10309  # the source these rules were read from (upstream 82bb48500)
CTX_PAD = 256  # GGML_PAD(n_ctx, 256) since b6975
# The newest build checked against real llama.cpp (tests/test_llamacpp_oracle.py: its own start-up
# lines for tiny GGUF files); its log formats (21-column llama_context names, the recurrent
# state's P field, the Flash Attention line of -fa auto) are newer than b10309, first build unknown.
LLAMA_CPP_ORACLE_BUILD = 11312  # upstream 0c1e57098, vendored by llama-cpp-python 0.3.36
DEFAULT_BATCH = 2048
DEFAULT_UBATCH = 512
SERVER_AUTO_PARALLEL = 4  # llama-server -np auto: 4 sequences, unified cache
RESERVE_BYTES = GIB  # --fit's default target margin per device (-fitt 1024 MiB)
# the recurrent R/S state: f32, whatever -ctk/-ctv say (src/llama-model.cpp create_memory:
# llama_memory_recurrent(*this, GGML_TYPE_F32, GGML_TYPE_F32, ...); State.held_in's dtypes)
STATE_DTYPES = ("fp32", "fp32")
STATE_ELEMENT_BYTES = 4
LOGIT_BYTES = 4  # f32 logits per vocabulary entry per sequence (the output buffer)
# Weight types offered when choosing a quantization (llama-quantize's main types).
WEIGHT_CHOICES = ("q8_0", "q6_K", "q5_K", "q4_K", "iq4_xs", "q3_K", "q2_K")
CACHE_CHOICES = ("f16", "q8_0", "q4_0")


class LlamaCppRequest(NamedTuple):
    """llama-server's options, as typed: None means llama.cpp's default."""

    ctx_size: int | None = None  # -c (0 or None: the training context)
    parallel: int | None = None  # -np (None: the server's auto, 4 and unified)
    kv_unified: bool = False  # -kvu
    batch_size: int = DEFAULT_BATCH  # -b
    ubatch_size: int = DEFAULT_UBATCH  # -ub
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    flash_attn: str = "auto"  # -fa on|off|auto
    n_gpu_layers: int | None = None  # -ngl (None: auto, the most that fit)
    swa_full: bool = False  # --swa-full
    build: int = LLAMA_CPP_BUILD
    gpu_memory_bytes: float | None = None  # what the GPU may use (else the profile's)
    reserve_bytes: float = RESERVE_BYTES  # compute buffers and margin per device
    weights_type: str | None = None  # a ggml type for every weight (None: as stored)
    host: GpuProfile | None = None  # the CPU side of an offload (system memory bandwidth)
    device: str | None = None  # the ggml device name the log shows (CUDA0, Vulkan1, MTL0)
    preset_notes: tuple[Note, ...] = ()


class Settings(NamedTuple):
    """What llama.cpp resolves the options to (the llama_context: lines)."""

    n_seq_max: int
    n_ctx: int
    n_ctx_seq: int
    n_ctx_train: int | None
    n_batch: int
    n_ubatch: int
    n_stream: int
    kv_unified: bool
    flash_attn: bool
    cache_type_k: str
    cache_type_v: str
    build: int
    cells_pad: int  # what the era pads cell counts to (256 now; 32 or 256 before b6868, 1 after)


class CacheBuffer(NamedTuple):
    device: str
    bytes: int


class Cache(NamedTuple):
    """One cache object as llama.cpp logs it: the non-SWA/SWA KV cache or the recurrent state."""

    kind: str  # kv | swa | recurrent
    cells: int  # per stream
    layers: int  # as logged (recurrent: every block)
    seqs: int
    streams: int
    k_bytes: int  # K, or R for the recurrent state
    v_bytes: int  # V, or S
    k_type: str
    v_type: str
    buffers: list[CacheBuffer]

    @property
    def total_bytes(self) -> int:
        return self.k_bytes + self.v_bytes


class Placement(NamedTuple):
    n_gpu_layers: int  # the -ngl in effect (min(N, L + 1))
    num_layers: int  # L blocks
    first_gpu_layer: int
    output_on_gpu: bool
    auto: bool  # chosen by kvplan as --fit would (-ngl unset)


class MemorySplit(NamedTuple):
    device: str
    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    reserve_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.state_bytes + self.reserve_bytes


class Decode(NamedTuple):
    """The decode ceiling of one sequence, memory-bound, over the two memories."""

    context_len: int
    gpu_read_bytes: float
    host_read_bytes: float
    step_s: float
    tok_per_s: float


class ContextFit(NamedTuple):
    cache_type: str
    max_ctx_size: int  # largest -c that fits on the GPU with every layer offloaded (0: none)
    capped: bool  # limited by the training context, not memory
    kv_bytes: int  # the cache at that size


class QuantChoice(NamedTuple):
    weights_type: str
    cache_type: str
    weights_bytes: int
    gpu_bytes: int
    fits: bool
    tok_per_s: float


class LlamaCppResult(NamedTuple):
    kvplan_version: str
    engine: str
    engine_version: str
    model: dict
    gpu: str
    host: str
    backend: str
    flash_attn_requested: str
    settings: Settings
    caches: list[Cache]
    placement: Placement
    gpu_memory: MemorySplit
    host_memory: MemorySplit
    gpu_capacity_bytes: float
    fits: bool
    max_gpu_layers: int  # the largest -ngl that fits at these settings
    decode: list[Decode]
    context_fit: list[ContextFit]
    quant_choices: list[QuantChoice]
    recommended: QuantChoice | None
    model_buffers: list[CacheBuffer]
    output_buffer_bytes: int
    notes: tuple[Note, ...]
    # --engine ollama: the settings Ollama resolved (kvplan.engines.ollama.OllamaSettings) and
    # its own pre-flight estimate (OllamaEstimate); None for llama.cpp itself
    ollama: object = None
    ollama_estimate: object = None


def pad(value: int, to: int) -> int:
    """GGML_PAD: `value` rounded up to a multiple of `to`."""
    return -(-value // to) * to


# ggml's GPU devices, as `llama-server --list-devices` names them and --device takes them
# (common/arg.cpp parse_device_list: ggml_backend_dev_by_name, compared without case; a device
# that is not a GPU, such as CPU or BLAS, is an "invalid device"): (backend, numbered, the
# vendors whose GPUs it drives, () for any). The name is the backend's and the device's index.
GGML_GPU_DEVICES: tuple[tuple[str, bool, tuple[str, ...]], ...] = (
    ("CUDA", True, ("nvidia",)),  # ggml/include/ggml-cuda.h GGML_CUDA_NAME
    ("ROCm", True, ("amd",)),  # GGML_CUDA_NAME under GGML_USE_HIP
    ("MUSA", True, ("moore threads",)),  # GGML_CUDA_NAME under GGML_USE_MUSA
    ("Vulkan", True, ()),  # ggml-vulkan.cpp GGML_VK_NAME: any Vulkan GPU
    ("MTL", True, ("apple",)),  # ggml-metal.cpp GGML_METAL_NAME
    ("Metal", False, ("apple",)),  # ggml-metal.m's one device, before the MTL<n> devices
    ("SYCL", True, ("intel", "nvidia", "amd")),  # ggml-sycl GGML_SYCL_NAME (oneAPI plugins)
    ("CANN", True, ("huawei",)),  # ggml-cann GGML_CANN_NAME
)
MAX_DEVICE_INDEX = 99  # two digits: no ggml backend numbers more devices (CUDA and Vulkan: 16)


def device_name(text: str, gpu: GpuProfile) -> str:
    """--device as llama.cpp takes it: one ggml GPU device of a backend that drives this GPU,
    in ggml's own spelling (the log prints that), else a one-line error."""
    shown = repr(text[:20]) if len(text) <= 20 else repr(text[:20])[:-1] + "…'"
    if "," in text:
        raise KvplanError(
            f"--device {shown}: kvplan prices one GPU device; a list splits the model over several"
        )
    folded = text.lower()
    for backend, numbered, vendors in GGML_GPU_DEVICES:
        digits = folded[len(backend) :]
        if not folded.startswith(backend.lower()) or (
            numbered
            and not (
                digits.isascii()
                and digits.isdigit()
                and str(int(digits)) == digits
                and int(digits) <= MAX_DEVICE_INDEX
            )
        ):
            continue
        if not numbered and digits:
            continue
        if vendors and gpu.vendor.lower() not in vendors:
            fits = [b for b, _n, v in GGML_GPU_DEVICES if not v or gpu.vendor.lower() in v]
            raise KvplanError(
                f"--device {shown}: a ggml {backend} device drives no {gpu.vendor} GPU "
                f"({gpu.name}); llama.cpp reaches it through {' or '.join(fits)}"
            )
        return backend + digits
    names = ", ".join(b + ("0" if n else "") for b, n, _v in GGML_GPU_DEVICES)
    raise KvplanError(
        f"--device {shown}: not a ggml GPU device llama.cpp lists (--list-devices): {names}, "
        "or none"
    )


def backend_name(gpu: GpuProfile) -> str:
    """The ggml device that holds the GPU buffers, as the log names it."""
    vendor = gpu.vendor.lower()
    if vendor == "apple":
        return "MTL0"
    if vendor == "amd":
        return "ROCm0"
    if vendor in ("nvidia",):
        return "CUDA0"
    return "CPU"


# ---- settings ----------------------------------------------------------------------------------
def resolve_settings(spec: ModelSpec, r: LlamaCppRequest) -> tuple[Settings, list[Note]]:
    notes: list[Note] = []
    for flag, value in (("--cache-type-k", r.cache_type_k), ("--cache-type-v", r.cache_type_v)):
        if value not in LLAMA_CACHE_TYPES:
            raise KvplanError(
                f"{flag} {str(value)[:20]!r}: llama.cpp's cache types are "
                + ", ".join(LLAMA_CACHE_TYPES)
            )
    if r.flash_attn not in ("on", "off", "auto"):
        raise KvplanError(f"--flash-attn {r.flash_attn!r}: choose on, off or auto")
    if not 1 <= r.ubatch_size <= 1 << 20 or not 1 <= r.batch_size <= 1 << 20:
        raise KvplanError("-b and -ub must be between 1 and 1,048,576")
    n_ctx_train = spec.max_position_embeddings
    build = r.build
    if not 1000 <= build <= 100000:
        raise KvplanError(f"--llama-build {build} must be a build number between 1000 and 100000")
    parallel, unified = r.parallel, r.kv_unified
    if parallel is None:
        if build >= 6925:
            parallel, unified = SERVER_AUTO_PARALLEL, True
            notes.append(note("llamacpp-np-auto", parallel=parallel))
        else:
            parallel = 1
    if not 1 <= parallel <= 256:
        raise KvplanError(f"--parallel {parallel} must be between 1 and 256")
    ctx = r.ctx_size
    if ctx is None:
        ctx = default_ctx_size(build)
    if ctx == 0:
        if not n_ctx_train:
            raise KvplanError("the model states no training context: pass -c")
        ctx = n_ctx_train
        notes.append(note("llamacpp-ctx-train", n_ctx_train=n_ctx_train))
    quant_v = r.cache_type_v in GGML_CACHE_QUANTS
    flash = r.flash_attn == "on" or (r.flash_attn == "auto" and build >= 6325)
    if quant_v and not flash:
        raise KvplanError(
            "llama_init_from_model: quantized V cache requires flash_attn to be enabled "
            "(use -fa on or auto, or an f16/bf16/f32 V cache)"
        )
    if spec.has_kind(CacheKind.MLA) and r.cache_type_k != r.cache_type_v:
        raise KvplanError(
            f"model does not support different K ({r.cache_type_k}) and V ({r.cache_type_v}) "
            "cache types (MLA)"
        )
    if flash:
        for t in {r.cache_type_k, r.cache_type_v} & set(GGML_CACHE_QUANTS):
            block = ggml_type(t).block_size
            for a in spec.attention_layers():
                if a.head_dim % block:
                    raise KvplanError(
                        f"K cache type {t} with block size {block} does not divide "
                        f"n_embd_head_k={a.head_dim}"
                    )
    if r.flash_attn == "auto":
        notes.append(note("llamacpp-fa-auto"))
    cells_pad = CTX_PAD if build >= 6975 else (1 if build >= 6868 else (256 if flash else 32))
    if build < 6071:  # one cache for every sequence (split streams need ggml_set_rows)
        unified = True
    if build >= 6975:  # C1/C2: pad n_ctx, then n_ctx_seq
        n_ctx = pad(ctx, CTX_PAD)
        if unified:
            n_ctx_seq, streams = n_ctx, 1
        else:
            n_ctx_seq, streams = pad(n_ctx // parallel, CTX_PAD), parallel
    elif unified:
        n_ctx, n_ctx_seq, streams = ctx, pad(ctx, cells_pad), 1
    elif build >= 6925:
        n_ctx, n_ctx_seq, streams = ctx, ctx // parallel, parallel
    else:
        n_ctx, n_ctx_seq, streams = ctx, pad(-(-ctx // parallel), cells_pad), parallel
    if not unified and n_ctx_seq * parallel != n_ctx:
        notes.append(note("llamacpp-ctx-rounded", n_ctx=n_ctx_seq * parallel))
        n_ctx = n_ctx_seq * parallel
    # with causal attention -b is capped by -c as given, before the pad (llama-context.cpp)
    n_batch = min(ctx if build >= 6975 else n_ctx, r.batch_size)
    settings = Settings(
        n_seq_max=parallel,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_ctx_train=n_ctx_train,
        n_batch=n_batch,
        n_ubatch=min(n_batch, r.ubatch_size),
        n_stream=streams,
        kv_unified=unified,
        flash_attn=flash,
        cache_type_k=r.cache_type_k,
        cache_type_v=r.cache_type_v,
        build=build,
        cells_pad=cells_pad,
    )
    return settings, notes


def default_ctx_size(build: int) -> int:
    """llama-server's default -c (common.h): 512 before b3087, the training context (0) until
    b4014, 4096 until b7407, the training context since (lowered by --fit when short of memory)."""
    if build < 3087:
        return 512
    if 4014 <= build < 7407:
        return 4096
    return 0


# ---- the caches --------------------------------------------------------------------------------
def swa_cells(s: Settings, window: int, swa_full: bool) -> int:
    """Cells per stream of the sliding-window cache (llama-kv-cache-iswa.cpp):
    pad256(min(n_ctx_seq, W x (unified ? np : 1) + n_ubatch)) since b6975; before, the padded
    span capped at n_ctx_seq (n_batch instead of n_ubatch until b5554); every cell before b5429."""
    if swa_full or s.build < 5429:
        return s.n_ctx_seq
    if s.build >= 6975:
        span = window * (s.n_seq_max if s.kv_unified else 1) + s.n_ubatch
        return pad(min(s.n_ctx_seq, span), CTX_PAD)
    seqs = s.n_seq_max if (s.kv_unified or s.build < 5913) else 1
    batch = s.n_batch if s.build < 5554 else s.n_ubatch
    return min(s.n_ctx_seq, pad(window * seqs + batch, s.cells_pad))


def layer_row_bytes(
    attn: Attention, s: Settings, v_row_values: int | None = None
) -> tuple[int, int]:
    """(K, V) bytes of one token's row in one layer: n_embd_k_gqa values in -ctk's type and
    n_embd_v_gqa in -ctv's (MLA: the latent as K, no V)."""
    if attn.kind is CacheKind.MLA:  # V-less since b7832; before, V held the kv_lora part
        v = 0 if s.build >= 7832 else ggml_row_bytes(s.cache_type_v, attn.mla_kv_lora_rank)
        return ggml_row_bytes(s.cache_type_k, attn.head_dim), v
    k = ggml_row_bytes(s.cache_type_k, attn.num_kv_heads * attn.head_dim)
    v_values = v_row_values or attn.num_kv_heads * attn.head_dim_v
    return k, ggml_row_bytes(s.cache_type_v, v_values)


def _v_width(attns: list[Attention], s: Settings) -> tuple[int | None, list[Note]]:
    """Without flash attention V is stored transposed, padded to the widest layer's V when the
    widths differ ([TAG_V_CACHE_VARIABLE])."""
    widths = {a.num_kv_heads * a.head_dim_v for a in attns if a.kind is not CacheKind.MLA}
    if s.flash_attn or len(widths) < 2:
        return None, []
    return max(widths), [note("llamacpp-v-padded", width=max(widths))]


class LayerCache(NamedTuple):
    index: int  # type: ignore[assignment]  # the layer's number; shadows tuple.index (unused)
    kind: str  # kv | swa | recurrent
    k_bytes: int
    v_bytes: int


def layer_caches(spec: ModelSpec, s: Settings, swa_full: bool) -> tuple[list[LayerCache], list]:
    """Every block's cache bytes at these settings (all streams), by cache object."""
    notes = []
    attns = spec.attention_layers()
    v_max, v_notes = _v_width(attns, s)
    notes += v_notes
    iswa = any(a.kind.windowed for a in attns) and s.build >= 5429
    out = []
    for il, layer in enumerate(spec.layers):
        a = layer.attention
        if a is not None:
            windowed = a.kind.windowed and s.build >= 5429
            cells = (
                swa_cells(s, a.window or 0, swa_full) if windowed else s.n_ctx_seq
            )  # a window: set
            k_row, v_row = layer_row_bytes(a, s, v_max)
            kind = "swa" if windowed else "kv"
            out.append(LayerCache(il, kind, s.n_stream * cells * k_row, s.n_stream * cells * v_row))
        if layer.state is not None:
            conv, ssm = layer.state.elements()
            cells = max(1, s.n_seq_max)
            out.append(
                LayerCache(
                    il,
                    "recurrent",
                    cells * conv * STATE_ELEMENT_BYTES,
                    cells * ssm * STATE_ELEMENT_BYTES,
                )
            )
    if iswa and swa_full:
        notes.append(note("llamacpp-swa-full"))
    return out, notes


def build_caches(
    spec: ModelSpec,
    s: Settings,
    per_layer: list[LayerCache],
    gpu_start: int,
    device: str,
    swa_full: bool,
) -> list[Cache]:
    caches = []
    attns = [a for a in spec.attention_layers()]
    windows = [a.window for a in attns if a.kind.windowed and a.window is not None]  # all
    for kind in ("kv", "swa", "recurrent"):
        rows = [c for c in per_layer if c.kind == kind]
        if not rows:
            continue
        if kind == "swa":
            cells = swa_cells(s, windows[0], swa_full)
        elif kind == "kv":
            cells = s.n_ctx_seq
        else:
            cells = max(1, s.n_seq_max)
        buffers: dict[str, int] = {}
        for c in rows:
            where = device if c.index >= gpu_start else "CPU"
            buffers[where] = buffers.get(where, 0) + c.k_bytes + c.v_bytes
        ordered = [
            CacheBuffer(d, buffers[d]) for d in dict.fromkeys(("CPU", device)) if d in buffers
        ]
        is_state = kind == "recurrent"
        caches.append(
            Cache(
                kind=kind,
                cells=cells,
                layers=spec.num_layers if is_state else len(rows),
                seqs=s.n_seq_max,
                streams=1 if is_state else s.n_stream,
                k_bytes=sum(c.k_bytes for c in rows),
                v_bytes=sum(c.v_bytes for c in rows),
                k_type="f32" if is_state else s.cache_type_k,
                v_type="f32" if is_state else s.cache_type_v,
                buffers=ordered,
            )
        )
    return caches


# ---- weights, placement, memory ----------------------------------------------------------------
GGUF_NORM_BYTES = 4  # a norm's weights in a GGUF: F32, whatever the weight type


class Weights(NamedTuple):
    layers: list[int]  # bytes per block
    embedding: int  # token_embd: always in host memory
    output: int  # the output layer (the head and final norm; a tied head is a copy)
    expert_layers: list[int]  # expert bytes per block (read only top_k / E per token)
    type_name: str


def model_weights(spec: ModelSpec, weights_type: str | None) -> tuple[Weights, list[Note]]:
    """Block-by-block weight bytes: the GGUF's own bytes, or every parameter in `weights_type`
    (a config.json defaults to f16, as convert_hf_to_gguf writes it), the norms (the blocks'
    and the final one) in F32 as it writes them."""
    notes: list[Note] = []
    if spec.stored is not None and weights_type is None:
        st = spec.stored
        per_param = {
            part: st.part_bytes.get(part, 0) / count
            for part, count in spec.param_parts.items()
            if count
        }
        experts = [
            round(dict(layer.params).get("experts", 0) * per_param.get("experts", 0))
            for layer in spec.layers
        ]
        embedding = st.part_bytes.get("embedding", 0)
        head = st.part_bytes.get("lm_head", 0) or embedding
        output = head + st.part_bytes.get("norms", 0) - _layer_part_bytes(spec, "norms", per_param)
        return Weights(list(st.layer_bytes), embedding, int(output), experts, st.file_type), notes
    name = weights_type or "f16"
    bits = ggml_type(name).bits_per_value
    if spec.stored is None:
        notes.append(note("llamacpp-weights-estimated", weights_type=name, bits=bits))
    per = bits / 8
    # each block's norms (attn_norm, ffn_norm, q_norm, ...) in F32 as convert_hf_to_gguf.py
    # writes them (below), the rest in the weight type
    layers = [
        round(
            (sum(c for _, c in layer.params) - _norms(layer)) * per
            + _norms(layer) * GGUF_NORM_BYTES
        )
        for layer in spec.layers
    ]
    experts = [round(dict(layer.params).get("experts", 0) * per) for layer in spec.layers]
    embedding = round(spec.param_parts.get("embedding", 0) * per)
    head = round(spec.param_parts.get("lm_head", 0) * per) or embedding
    # the final norm (output_norm: the norms outside the blocks, as the GGUF path counts them),
    # in F32 as convert_hf_to_gguf.py writes every norm and 1-D tensor ("Most of the codebase
    # that takes in 1D tensors or norms only handles F32 tensors")
    final_norm = spec.param_parts.get("norms", 0) - _layer_part_bytes(spec, "norms", {"norms": 1})
    output = head + round(final_norm * GGUF_NORM_BYTES)
    return Weights(layers, embedding, output, experts, name), notes


def _norms(layer: Layer) -> int:
    """A block's norm parameters (its `norms` part)."""
    return dict(layer.params).get("norms", 0)


def _layer_part_bytes(spec: ModelSpec, part: str, per_param: dict) -> float:
    return sum(dict(layer.params).get(part, 0) for layer in spec.layers) * per_param.get(part, 0)


def placement(num_layers: int, ngl: int, build: int, auto: bool) -> Placement:
    output_first = build >= 7467
    ngl = max(0, min(ngl, num_layers + 1))
    return Placement(
        n_gpu_layers=ngl,
        num_layers=num_layers,
        first_gpu_layer=first_gpu_layer(num_layers, ngl, output_first),
        output_on_gpu=output_on_gpu(num_layers, ngl, output_first),
        auto=auto,
    )


def memory_split(
    w: Weights, per_layer: list[LayerCache], p: Placement, reserve: float, device: str, nkvo: bool
) -> tuple[MemorySplit, MemorySplit]:
    on_gpu = [il >= p.first_gpu_layer for il in range(p.num_layers)]
    gpu_w = sum(b for il, b in enumerate(w.layers) if on_gpu[il]) + (
        w.output if p.output_on_gpu else 0
    )
    host_w = (
        sum(b for il, b in enumerate(w.layers) if not on_gpu[il])
        + w.embedding
        + (0 if p.output_on_gpu else w.output)
    )
    kv = {"gpu": 0, "host": 0}
    state = {"gpu": 0, "host": 0}
    for c in per_layer:
        side = "gpu" if on_gpu[c.index] and not nkvo else "host"
        (state if c.kind == "recurrent" else kv)[side] += c.k_bytes + c.v_bytes
    gpu = MemorySplit(
        device, int(gpu_w), kv["gpu"], state["gpu"], int(reserve) if p.n_gpu_layers else 0
    )
    host = MemorySplit("CPU", int(host_w), kv["host"], state["host"], 0)
    return gpu, host


# ---- decode ------------------------------------------------------------------------------------
def decode_step_ops(
    spec: ModelSpec, w: Weights, s: Settings, context_len: int
) -> list[tuple[int, list[Op]]]:
    """One sequence's decode step as operators by layer index: the anatomy's operator list
    (step_time.step_ops: one decode at `context_len`, the head sampled, the whole model, the
    recurrent state in llama.cpp's f32) laid out by step_time.ops_by_layer (-1 the token
    embedding, 0..L-1 the blocks, L the output layer), each carrying llama.cpp's own bytes:
    one row of token_embd (a tied one too), each block's stored weights (Weights.layers: a
    mixed-quant GGUF stores each block at its own bytes, not per-part averages; routed experts
    top_k of E of Weights.expert_layers), its cache in -ctk's and -ctv's ggml rows, the output
    layer whole (Weights.output). For a GGUF of one weight type and an f16 cache, step_ops'
    own bytes are these (tests/test_llamacpp.py)."""
    groups = step_ops(
        spec,
        spec.dtype,
        KvFormat("fp16"),
        num_decodes=1,
        decode_context=context_len,
        num_sampled=1,
        whole_model=True,
        state_dtypes=STATE_DTYPES,
    )
    moe = spec.moe
    layers: list[tuple[int, list[Op]]] = []
    # each kind of block's operators once (its blocks share them): llama.cpp's cache rows, the
    # routed experts' top_k of E (Weights.expert_layers: the same for every block of a kind),
    # the other weights as its first block stores them
    kinds: dict[int, tuple[list[Op], list[Op], list[Op], int]] = {}
    for il, ops in ops_by_layer(spec, groups, 1):
        if il < 0:  # one row of token_embd
            row = w.embedding / spec.vocab_size if spec.vocab_size else 0.0
            layers.append((il, [_weighing(op, row) for op in ops]))
            continue
        if il >= spec.num_layers:  # the output layer: the head and the final norm
            layers.append((il, _carrying(ops, w.output)))
            continue
        experts = w.expert_layers[il]
        stored = w.layers[il] - experts
        kind = kinds.get(id(ops))
        if kind is None:
            a = spec.layers[il].attention
            cache = 0
            if a is not None:
                k, v = layer_row_bytes(a, s)
                cache = a.tokens_held(context_len) * (k + v)
            touched = experts * moe.top_k / moe.num_experts if moe and experts else 0.0
            own = [
                op._replace(kv_bytes=cache) if op.kind is OpKind.DECODE_ATTENTION else op
                for op in ops
                if op.name != "experts"
            ]
            routed = [_weighing(op, touched) for op in ops if op.name == "experts"]
            kind = kinds[id(ops)] = _carrying(own, stored) + routed, own, routed, stored
        block, own, routed, first = kind
        if stored != first:  # a mixed-quant GGUF stores blocks of one kind at their own types
            block = _carrying(own, stored) + routed
        layers.append((il, block))
    return layers


_new_op = tuple.__new__


def _weighing(op: Op, weight_bytes: float) -> Op:
    """`op` reading `weight_bytes` of weights (Op's fields in order; the floor builds thousands)."""
    return _new_op(Op, (*op[:4], weight_bytes, *op[5:]))


def _carrying(ops: list[Op], weight_bytes: int) -> list[Op]:
    """`ops` with their weights scaled to `weight_bytes` in all (a GGUF's own bytes for what
    the anatomy prices at per-part averages), in whole bytes, the last reading operator taking
    the remainder (the sums stay exact); one more operator carries them where the operators
    read none."""
    anatomy = sum(op[4] for op in ops)
    if not anatomy:
        return [*ops, Op("weights", OpKind.ELEMENTWISE, 0, 0, weight_bytes, 0, 0)]
    scale = weight_bytes / anatomy
    out = [_weighing(op, round(op[4] * scale)) for op in ops]
    last = max(i for i, op in enumerate(ops) if op[4])
    out[last] = _weighing(out[last], weight_bytes - (sum(op[4] for op in out) - out[last][4]))
    return out


def decode_ceiling(
    spec: ModelSpec,
    w: Weights,
    s: Settings,
    p: Placement,
    context_len: int,
    gpu_bw: float,
    host_bw: float,
    nkvo: bool,
) -> Decode:
    """One sequence's decode step at `context_len`: every weight it reads (experts: top_k of E)
    and its own cache, each from the memory that holds it (decode_step_ops placed by
    offload.placed_bytes)."""
    gpu, host = placed_bytes(
        decode_step_ops(spec, w, s, context_len),
        p.num_layers,
        p.first_gpu_layer,
        p.output_on_gpu,
        cache_on_gpu=not nkvo,
    )
    step = two_memory_step_time_s(gpu, gpu_bw, host, host_bw)
    return Decode(context_len, gpu, host, step, 1 / step)


# ---- the allocation ----------------------------------------------------------------------------
class _Model(NamedTuple):
    """Everything the searches below recompute for other settings."""

    spec: ModelSpec
    request: LlamaCppRequest
    device: str
    capacity: float


def _gpu_total(m: _Model, s: Settings, w: Weights, ngl: int) -> tuple[int, list[LayerCache]]:
    per_layer, _ = layer_caches(m.spec, s, m.request.swa_full)
    p = placement(m.spec.num_layers, ngl, m.request.build, False)
    gpu, _ = memory_split(w, per_layer, p, m.request.reserve_bytes, m.device, False)
    return gpu.total_bytes, per_layer


def largest_gpu_layers(m: _Model, s: Settings, w: Weights) -> int:
    """The largest -ngl whose GPU share fits (0 when not even the output layer does)."""
    best = 0
    for ngl in range(1, m.spec.num_layers + 2):
        if _gpu_total(m, s, w, ngl)[0] <= m.capacity:
            best = ngl
        else:
            break
    return best


def largest_context(m: _Model, s: Settings, w: Weights, cache_type: str) -> ContextFit:
    """The largest -c (a multiple of 256) whose cache fits beside every layer on the GPU, for
    one K = V cache type, up to the training context."""
    request = m.request._replace(cache_type_k=cache_type, cache_type_v=cache_type)
    limit = s.n_ctx_train or 1 << 20

    def total(ctx: int) -> tuple[int, int]:
        s2, _ = resolve_settings(m.spec, request._replace(ctx_size=ctx))
        gpu, per_layer = _gpu_total(m, s2, w, m.spec.num_layers + 1)
        return gpu, sum(c.k_bytes + c.v_bytes for c in per_layer)

    if total(CTX_PAD)[0] > m.capacity:
        return ContextFit(cache_type, 0, False, 0)
    low, high = 1, max(1, limit // CTX_PAD)
    if total(high * CTX_PAD)[0] <= m.capacity:
        return ContextFit(cache_type, high * CTX_PAD, True, total(high * CTX_PAD)[1])
    while low < high - 1:
        mid = (low + high) // 2
        if total(mid * CTX_PAD)[0] <= m.capacity:
            low = mid
        else:
            high = mid
    return ContextFit(cache_type, low * CTX_PAD, False, total(low * CTX_PAD)[1])


def quant_choices(
    m: _Model, s: Settings, gpu_bw: float, host_bw: float
) -> tuple[list[QuantChoice], QuantChoice | None]:
    """Weights x cache types at these settings with every layer on the GPU: which fit, and the
    one to choose (the most weight bits with a cache of q8_0 or better, else the most bits)."""
    weights = ([None] if m.spec.stored is not None else []) + list(WEIGHT_CHOICES)
    rows = []
    for wt in weights:
        w, _ = model_weights(m.spec, wt)
        for ct in CACHE_CHOICES:
            if ct != "f16" and not s.flash_attn:
                continue
            s2 = s._replace(cache_type_k=ct, cache_type_v=ct)
            try:
                gpu_bytes, _ = _gpu_total(m, s2, w, m.spec.num_layers + 1)
            except KvplanError:
                continue  # a head width the cache type's blocks do not divide
            p = placement(m.spec.num_layers, m.spec.num_layers + 1, m.request.build, False)
            d = decode_ceiling(m.spec, w, s2, p, s2.n_ctx_seq, gpu_bw, host_bw, False)
            rows.append(
                QuantChoice(
                    w.type_name,
                    ct,
                    sum(w.layers) + w.embedding + w.output,
                    gpu_bytes,
                    gpu_bytes <= m.capacity,
                    d.tok_per_s,
                )
            )
    fitting = [r for r in rows if r.fits]
    good_cache = [r for r in fitting if r.cache_type in ("f16", "q8_0")]
    pool = good_cache or fitting
    best = max(
        pool, key=lambda r: (r.weights_bytes, CACHE_CHOICES[::-1].index(r.cache_type)), default=None
    )
    return rows, best


def llamacpp_allocation(spec: ModelSpec, gpu: GpuProfile, r: LlamaCppRequest) -> LlamaCppResult:
    """The Python twin of `kvplan engine MODEL --engine llama.cpp`."""
    from kvplan.engines.request import refuse_gqa_indexer

    refuse_gqa_indexer(spec, "llama.cpp")
    s, notes = resolve_settings(spec, r)
    notes = [
        *spec.source_notes,
        note("llamacpp-rules", build=LLAMA_CPP_BUILD),
        *r.preset_notes,
        *notes,
    ]
    device = r.device or backend_name(gpu)
    capacity = r.gpu_memory_bytes or gpu.usable_memory_bytes
    host = r.host
    host_bw = host.memory_bandwidth_bytes_per_s if host else None
    w, weight_notes = model_weights(spec, r.weights_type)
    notes += weight_notes
    m = _Model(spec, r, device, capacity)
    per_layer, cache_notes = layer_caches(spec, s, r.swa_full)
    notes += cache_notes
    max_ngl = largest_gpu_layers(m, s, w)
    ngl = r.n_gpu_layers
    auto = ngl is None
    if ngl is None:
        ngl = max_ngl
    if auto:
        notes.append(note("llamacpp-ngl-auto", n_gpu_layers=ngl, layers=spec.num_layers + 1))
    p = placement(spec.num_layers, ngl, r.build, auto)
    gpu_mem, host_mem = memory_split(w, per_layer, p, r.reserve_bytes, device, False)
    notes.append(note("llamacpp-reserve", reserve_bytes=r.reserve_bytes))
    if p.n_gpu_layers < spec.num_layers + 1 and host is None and device != "CPU":
        notes.append(note("llamacpp-host-missing"))
    gpu_bw = gpu.memory_bandwidth_bytes_per_s
    host_bw_used = host_bw or gpu_bw
    decode = [
        decode_ceiling(spec, w, s, p, ctx, gpu_bw, host_bw_used, False)
        for ctx in dict.fromkeys((0, s.n_ctx_seq))
    ]
    notes.append(note("llamacpp-decode-ceiling"))
    fit = [largest_context(m, s, w, t) for t in LLAMA_CACHE_TYPES if _type_allowed(spec, s, t)]
    choices, best = quant_choices(m, s, gpu_bw, host_bw_used)
    caches = build_caches(spec, s, per_layer, p.first_gpu_layer, device, r.swa_full)
    output_buffer = spec.vocab_size * LOGIT_BYTES * s.n_seq_max
    model_buffers = [
        CacheBuffer("CPU_Mapped", host_mem.weights_bytes),
        *([CacheBuffer(device, gpu_mem.weights_bytes)] if p.n_gpu_layers else []),
    ]
    if spec.stored is not None:
        notes.append(note("llamacpp-model-buffers"))
    return LlamaCppResult(
        kvplan_version=__version__,
        engine="llama.cpp",
        engine_version=f"b{LLAMA_CPP_BUILD}",
        model={"name": spec.name, "source": spec.source},
        gpu=gpu.name,
        host=host.name if host else gpu.name,
        backend=device,
        flash_attn_requested=r.flash_attn,
        settings=s,
        caches=caches,
        placement=p,
        gpu_memory=gpu_mem,
        host_memory=host_mem,
        gpu_capacity_bytes=capacity,
        fits=gpu_mem.total_bytes <= capacity,
        max_gpu_layers=max_ngl,
        decode=decode,
        context_fit=fit,
        quant_choices=choices,
        recommended=best,
        model_buffers=model_buffers,
        output_buffer_bytes=output_buffer,
        notes=unique(notes),
    )


def _type_allowed(spec: ModelSpec, s: Settings, t: str) -> bool:
    if t in GGML_CACHE_QUANTS and not s.flash_attn:
        return False
    block = ggml_type(t).block_size
    return all(a.head_dim % block == 0 for a in spec.attention_layers()) or not s.flash_attn
