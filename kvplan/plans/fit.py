"""`kvplan fit`: what runs on one machine. Models (the bundled ones, or GGUF and config files) x
weights quantizations x contexts, each sized with llama.cpp's own allocation
(kvplan.engines.llamacpp): every layer on the GPU, one sequence, the weights of each ggml type,
and the GPU total compared with what the GPU may use.

A row's bytes are those of `kvplan engine MODEL --engine llama.cpp --gpu GPU -c CTX -np 1
--weights-type TYPE -ngl all` (the command its JSON carries): the same functions compute both.
"""

from __future__ import annotations

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.notes import Note, note, unique
from kvplan.record import NamedTuple

DEFAULT_CONTEXTS = (4096, 8192, 32768, 131072)
# every parameter in one ggml type, most bits first (a GGUF file is sized as stored instead)
WEIGHT_TYPES = ("f16", "q8_0", "q6_K", "q5_K", "q4_K", "iq4_xs", "q3_K", "q2_K")
CACHE_TYPES = ("f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl", "f32")
MAX_MODELS = 256  # files named on one command line; the bundled list is about sixty
MAX_CONTEXTS = 16
GPU_LAYERS_ALL = 100000  # -ngl all


class FitRequest(NamedTuple):
    models: tuple[str, ...] = ()  # names, paths or Hub ids; none: every bundled model
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    weights_types: tuple[str, ...] = WEIGHT_TYPES  # ignored for a GGUF file (as stored)
    cache_type: str = "f16"  # -ctk = -ctv
    gpu_memory_bytes: float | None = None  # what the GPU may use (else the profile's)
    every_type: bool = False  # every fitting weights type, not only the most bits per context
    gpu_name: str | None = None  # the --gpu spelling a row's command repeats (None: its key)


class FitRow(NamedTuple):
    model: str
    source: str | None
    params_total: int
    params_active: int
    weights_type: str  # a ggml type, or the GGUF's own mix (Q4_K_M) as stored
    weights_stored: bool  # the file's exact bytes (else every parameter in weights_type)
    bits_per_weight: float  # weights bytes x 8 / parameters: the rank's quality proxy
    context_len: int  # -c, one sequence
    weights_bytes: int  # on the GPU (every layer and the output layer)
    kv_bytes: int  # the K and V caches
    state_bytes: int  # recurrent state
    reserve_bytes: int  # compute buffers and margin (llama.cpp's --fit target)
    gpu_bytes: int  # the sum: what the GPU must hold
    headroom_bytes: int  # what is left of the GPU's memory
    decode_tok_per_s: float  # one sequence, memory-bound, at the full context
    model_argument: str  # the MODEL to give `kvplan engine` for the same bytes


class TooLarge(NamedTuple):
    model: str
    params_total: int
    smallest_gpu_bytes: int | None  # the least it needs of what was tried (None: not sized)
    why: str


class FitResult(NamedTuple):
    kvplan_version: str
    gpu: str
    gpu_argument: str  # the --gpu that names it again
    gpu_capacity_bytes: float
    llama_cpp_build: str
    cache_type: str
    gpu_memory_given: bool  # --gpu-memory set the capacity (a row's command repeats it)
    contexts: tuple[int, ...]
    rows: list[FitRow]  # ranked: parameters, then bits per weight, then context, most first
    too_large: list[TooLarge]
    notes: tuple[Note, ...]


def _check(r: FitRequest) -> None:
    if len(r.models) > MAX_MODELS:
        raise KvplanError(f"at most {MAX_MODELS} models at once")
    if not r.contexts or len(r.contexts) > MAX_CONTEXTS:
        raise KvplanError(f"--ctx: 1 to {MAX_CONTEXTS} contexts")
    if r.cache_type not in CACHE_TYPES:
        raise KvplanError(f"--cache-type {r.cache_type!r}: one of {', '.join(CACHE_TYPES)}")
    if not r.weights_types:
        raise KvplanError("--weights-type: at least one ggml type")
    from kvplan.dtypes import ggml_type

    for name in r.weights_types:
        ggml_type(name)  # a known ggml type, or a one-line error


def fit(gpu, request: FitRequest = FitRequest()) -> FitResult:
    """The Python twin of `kvplan fit`: every (model, weights, context) whose llama.cpp
    allocation fits `gpu` with every layer on it, ranked."""
    from kvplan.engines.llamacpp import LLAMA_CPP_BUILD

    _check(request)
    from kvplan.dtypes import ggml_type

    request = request._replace(
        contexts=tuple(sorted(set(request.contexts))),
        # most bits first: the first that fits is the one a context's row shows
        weights_types=tuple(
            sorted(set(request.weights_types), key=lambda t: -ggml_type(t).bits_per_value)
        ),
    )
    capacity = request.gpu_memory_bytes or gpu.usable_memory_bytes
    rows: list[FitRow] = []
    too_large: list[TooLarge] = []
    notes: list[Note] = []
    shortened: list[tuple[str, int | None]] = []
    for name, spec in _models(request.models, too_large):
        try:
            fitting, smallest, skipped = _model_rows(name, spec, gpu, capacity, request)
        except KvplanError as exc:
            too_large.append(TooLarge(spec.name, spec.params_total, None, str(exc)[:200]))
            continue
        if skipped:
            shortened.append((spec.name, spec.max_position_embeddings))
        if fitting:
            rows += fitting
        else:
            too_large.append(
                TooLarge(spec.name, spec.params_total, smallest, "does not fit at any setting")
            )
    rows.sort(key=lambda r: (-r.params_total, -r.bits_per_weight, -r.context_len, r.model))
    notes[:0] = [
        note(
            "fit-assumes",
            build=LLAMA_CPP_BUILD,
            cache_type=request.cache_type,
            capacity_bytes=capacity,
            gpu=gpu.name,
        ),
        note("fit-rank", every_type=request.every_type),
    ]
    if shortened:
        notes.append(note("fit-training-context", models=tuple(shortened)))
    if any(not r.weights_stored for r in rows):
        notes.append(note("fit-weights-estimated"))
    return FitResult(
        kvplan_version=__version__,
        gpu=gpu.name,
        gpu_argument=request.gpu_name or gpu.key,
        gpu_capacity_bytes=capacity,
        llama_cpp_build=f"b{LLAMA_CPP_BUILD}",
        cache_type=request.cache_type,
        gpu_memory_given=request.gpu_memory_bytes is not None,
        contexts=tuple(request.contexts),
        rows=rows,
        too_large=sorted(too_large, key=lambda t: -t.params_total),
        notes=unique(notes),
    )


def _models(names: tuple[str, ...], too_large: list):
    from kvplan.inputs.sources import bundled_models, load_bundled, load_model

    if names:
        for name in names:
            yield name, load_model(name)  # a file the user named: its error is the answer
        return
    for alias in bundled_models():
        try:
            yield alias, load_bundled(alias)
        except KvplanError as exc:  # a bundled config llama.cpp's model cannot read
            too_large.append(TooLarge(alias, 0, None, str(exc)[:200]))


def _model_rows(name: str, spec, gpu, capacity: float, r: FitRequest):
    """(rows that fit, the least GPU bytes of any setting tried, whether contexts past the
    training context were replaced by it)."""
    from kvplan.engines.llamacpp import (
        LlamaCppRequest,
        backend_name,
        decode_ceiling,
        layer_caches,
        memory_split,
        model_weights,
        placement,
        resolve_settings,
    )

    device = backend_name(gpu)
    types = [None] if spec.stored is not None else list(r.weights_types)
    limit = spec.max_position_embeddings
    contexts = [c for c in r.contexts if not limit or c <= limit]
    skipped = len(contexts) < len(r.contexts)
    if skipped and limit not in contexts:
        contexts.append(limit)  # the longest the model takes stands for the longer ones
    weights = {t: model_weights(spec, t)[0] for t in types}
    rows, smallest = [], None
    for ctx in contexts:
        base = LlamaCppRequest(
            ctx_size=ctx,
            parallel=1,
            cache_type_k=r.cache_type,
            cache_type_v=r.cache_type,
            n_gpu_layers=GPU_LAYERS_ALL,
        )
        settings, _ = resolve_settings(spec, base)
        per_layer, _ = layer_caches(spec, settings, base.swa_full)
        p = placement(spec.num_layers, GPU_LAYERS_ALL, base.build, False)
        fitting = []
        for t in types:
            w = weights[t]
            split, _ = memory_split(w, per_layer, p, base.reserve_bytes, device, False)
            total = split.total_bytes
            smallest = total if smallest is None else min(smallest, total)
            if total > capacity:
                continue
            d = decode_ceiling(
                spec,
                w,
                settings,
                p,
                settings.n_ctx_seq,
                gpu.memory_bandwidth_bytes_per_s,
                gpu.memory_bandwidth_bytes_per_s,
                False,
            )
            all_bytes = sum(w.layers) + w.embedding + w.output
            fitting.append(
                FitRow(
                    model=spec.name,
                    source=spec.source,
                    params_total=spec.params_total,
                    params_active=spec.params_active,
                    weights_type=w.type_name,
                    weights_stored=t is None,
                    bits_per_weight=all_bytes * 8 / spec.params_total if spec.params_total else 0,
                    context_len=settings.n_ctx,
                    weights_bytes=split.weights_bytes,
                    kv_bytes=split.kv_bytes,
                    state_bytes=split.state_bytes,
                    reserve_bytes=split.reserve_bytes,
                    gpu_bytes=total,
                    headroom_bytes=int(capacity - total),
                    decode_tok_per_s=d.tok_per_s,
                    model_argument=name,
                )
            )
        if not r.every_type:
            fitting = fitting[:1]  # the most bits that fit (types are listed most bits first)
        rows += fitting
    return rows, smallest, skipped
