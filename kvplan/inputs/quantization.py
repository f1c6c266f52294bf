"""A config's `quantization_config` as a kvplan weights format and the parts it covers: fp8 (block
or per-tensor scales), compressed-tensors (int groups, fp8, nvfp4), AWQ/GPTQ, ModelOpt, mxfp4.
What it cannot read it names, and a name that says "FP8"/"AWQ"/... with no quantization_config
is flagged: the weights are then counted unquantized, and the output says so."""

import re
from typing import TypeGuard

from kvplan.anatomy.model import QUANTIZABLE_PARTS
from kvplan.inputs.text import clean
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

# A name that says its weights are quantized (plain substrings of the lower-cased name)
NAME_SAYS_QUANTIZED = (
    "fp8", "fp4", "nvfp4", "mxfp4", "awq", "gptq", "int4", "int8", "w4a16", "w8a8", "w4a8",
    "bnb", "4bit", "8bit",
)  # fmt: skip


MAX_GROUP_SIZE = 1 << 20  # real groups are 32 to 128 values; a larger one is corrupt


def _whole(value) -> TypeGuard[int]:
    """An integer as JSON spells one (true and 4.0 are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


class Quantization(NamedTuple):
    format: str | None  # a kvplan weights dtype name, None when not quantized (or unreadable)
    parts: tuple[str, ...] | None  # the parts it covers; None: the format's default
    notes: tuple[Note, ...] = ()
    method: str | None = None  # the quant_method (compressed-tensors, mxfp4, fp8, ...)
    # The KV cache format the checkpoint states (modelopt_kv_cache: "fp8", "nvfp4";
    # compressed_tensors_kv_cache: "fp8");
    # None: none stated
    kv_cache: str | None = None
    # The quantization config that states it, as the engines' rules tell them apart
    # (CHECKPOINT_KV_METHODS); None where none is stated
    kv_cache_method: str | None = None


def parts_without(quant: Quantization, dropped: tuple[str, ...]) -> tuple[str, ...] | None:
    """The parts an ignore list leaves quantized, less `dropped` (a family whose modules the
    list names differently); a quantization without a list keeps its format's default scope."""
    if quant.format is None or quant.parts is None:
        return quant.parts  # nothing quantized, or the format's own default scope
    return tuple(p for p in quant.parts if p not in dropped)


_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")
# a MoE router ("mlp.gate", "router") is no MLP projection: an exclusion list naming it keeps the
# MLPs quantized
_ROUTER = re.compile(r"(mlp\.gate|\.gate|router)\*?$")
# nor are a norm, a bias or a sparse-attention indexer's weights projection the attention's
# weights: zai-org/GLM-5-FP8 lists every layer's "self_attn.indexer.k_norm",
# "self_attn.indexers_proj" and "mlp.gate.e_score_correction_bias" and quantizes the rest
_SMALL_MODULE = re.compile(r"(norm|bias|indexers?_proj)\*?$")


def _shown(value) -> str:
    """A config value as a note shows it: its repr, cut at 20 characters with an ellipsis (a
    number cut without one would read as another number)."""
    text = clean(repr(value))
    return text if len(text) <= 20 else text[:19] + "…"


def _excluded_parts(patterns) -> set[str]:
    """Parts an ignore / modules_to_not_convert list keeps unquantized."""
    excluded = set()
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)):
        patterns = ()  # a number or an object is no list of modules: nothing excluded
    for raw in patterns:
        text = str(raw).lower()
        if _ROUTER.search(text) or _SMALL_MODULE.search(text):
            continue  # a router, norm, bias or indexer projection is not its part's weights
        if "shared_expert" in text:
            excluded.add("shared_experts")
        elif "expert" in text:
            excluded.add("experts")
        if "attn" in text or "attention" in text:
            excluded.add("attention")
        if "mlp" in text and re.search(r"gate|up|down|proj", text) and "expert" not in text:
            excluded.add("mlp")
        if "mixer" in text or "mamba" in text:
            excluded.add("mixer")
    return excluded


def _parts(patterns, default: tuple[str, ...] = QUANTIZABLE_PARTS) -> tuple[str, ...] | None:
    excluded = _excluded_parts(patterns)
    if not excluded:
        return None
    return tuple(p for p in default if p not in excluded)


def _compressed_tensors(qc: dict) -> tuple[str | None, str]:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None, "no config_groups"
    formats = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            return None, "a config group without weights"
        bits, kind = weights.get("num_bits"), weights.get("type")
        strategy, size = weights.get("strategy"), weights.get("group_size")
        symmetric = weights.get("symmetric", True)
        if not _whole(bits):
            return None, f"num_bits {_shown(bits)}"
        if kind == "float" and bits == 8:
            formats.add("fp8-tensor" if strategy in ("tensor", "channel") else "fp8")
        elif kind == "float" and bits == 4:
            # nvfp4: an fp8 scale per 16 values; mxfp4 (format "mxfp4-pack-quantized",
            # Kimi-K3): a uint8 e8m0 scale per 32
            if size in (None, 16):
                formats.add("nvfp4")
            elif size == 32:
                formats.add("mxfp4")
            else:
                return None, f"4-bit floats in groups of {_shown(size)}"
        elif kind == "int" and bits in (4, 8):
            if strategy == "group" and not (_whole(size) and 0 < size <= MAX_GROUP_SIZE):
                return None, f"group_size {_shown(size)}"
            if strategy == "group":
                formats.add(f"int{bits}-g{size}" + ("-sym" if symmetric else ""))
            elif bits == 8:
                formats.add("int8")
            else:
                formats.add("int4" + ("-g128-sym" if symmetric else ""))
        else:
            return None, f"weights of {bits} bits, type {kind}"
    if len(formats) != 1:
        return None, f"several weight formats ({', '.join(sorted(formats))})"
    return formats.pop(), ""


def _excluded_whole_parts(patterns, num_layers) -> set[str]:
    """Parts an exclusion list keeps unquantized in every layer: a part named per layer
    ("model.layers.0.mlp.down_proj") counts as excluded only when the list names it in all
    `num_layers` layers (Llama-3.1-405B-FP8 keeps layers 0 and 125's MLPs in bf16 and quantizes
    the other 124), and routers are skipped. Layers left out in part are not counted."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)):
        return set()
    whole: set[str] = set()
    layers: dict[str, set[int]] = {}
    for raw in patterns:
        text = str(raw).lower()
        parts = _excluded_parts([text])
        index = _LAYER_INDEX.search(text)
        if index is None:
            whole |= parts
            continue
        for part in parts:
            layers.setdefault(part, set()).add(int(index.group(1)))
    enough = num_layers if _whole(num_layers) and num_layers > 0 else None
    whole |= {part for part, seen in layers.items() if enough is not None and len(seen) >= enough}
    return whole


def _fbgemm_fp8(qc: dict, top: dict, text: dict) -> Quantization:
    """transformers' FbgemmFp8Config (vLLM's fbgemm_fp8): fp8 e4m3 weights with one fp32 scale
    per output row (4 / K bytes a weight: below 0.1%, as fp8-tensor counts them) and dynamic
    per-token activations; modules_to_not_convert stay in 16 bits. meta-llama/Llama-3.1-405B-
    Instruct-FP8 lists every layer's self_attn projections, layers 0 and 125's MLPs and lm_head:
    attention unquantized, the MLPs quantized."""
    layers = top.get("num_hidden_layers", text.get("num_hidden_layers"))
    excluded = _excluded_whole_parts(qc.get("modules_to_not_convert"), layers)
    parts = tuple(p for p in QUANTIZABLE_PARTS if p not in excluded)
    return Quantization("fp8-tensor", parts if excluded else None)


def _quark(qc: dict, top: dict, text: dict) -> Quantization:
    """AMD Quark's export (quark.torch Config.to_dict; vLLM's quark/quark.py QuarkConfig reads
    the same): global_quant_config.weight {dtype, qscheme, group_size}; fp8_e4m3 per-tensor or
    per-channel (amd/*-FP8-KV) is fp8-tensor, fp4 per_group of 32 with e8m0 scales (amd/*-MXFP4)
    is mxfp4 over every linear layer, not the experts only; `exclude` stays in 16 bits."""
    glob = qc.get("global_quant_config")
    weight = glob.get("weight") if isinstance(glob, dict) else None
    layer_configs = qc.get("layer_quant_config")
    if not isinstance(weight, dict):
        if isinstance(layer_configs, dict) and layer_configs:
            why = "per-layer formats only (layer_quant_config)"
        else:
            why = "no global_quant_config weight"
        return Quantization(None, None, (note("quant-unread", method="quark", why=why),))
    dtype = str(weight.get("dtype", ""))[:20].lower()
    size = weight.get("group_size")
    if isinstance(layer_configs, dict) and layer_configs:
        why = "several weight formats (layer_quant_config)"
        return Quantization(None, None, (note("quant-unread", method="quark", why=why),))
    layers = top.get("num_hidden_layers", text.get("num_hidden_layers"))
    excluded = _excluded_whole_parts(qc.get("exclude"), layers)
    parts = tuple(p for p in QUANTIZABLE_PARTS if p not in excluded)
    if dtype in ("fp8_e4m3", "fp8_e5m2", "fp8"):
        return Quantization("fp8-tensor", parts if excluded else None)
    if dtype in ("fp4", "fp4_e2m1", "mxfp4") and size in (None, 32):
        return Quantization("mxfp4", parts)  # every part the list leaves, experts or not
    if dtype in ("int4", "uint4", "int8", "uint8"):
        bits = 4 if "4" in dtype else 8
        if _whole(size) and 0 < size <= MAX_GROUP_SIZE:
            return Quantization(f"int{bits}-g{size}", parts if excluded else None)
        return Quantization(f"int{bits}", parts if excluded else None)
    why = f"weights {clean(dtype) or 'of no dtype'}, group_size {_shown(size)}"
    return Quantization(None, None, (note("quant-unread", method="quark", why=why),))


def modelopt_kv_cache(qc: dict) -> str | None:
    """The KV cache a ModelOpt quantization_config states, as vLLM reads it
    (vllm/utils/torch_utils.py get_kv_cache_quant_algo_string, 0.14.0-0.32.0): its
    `kv_cache_scheme` ({dynamic: false, num_bits: 8, type: float} is fp8; {num_bits: 4, type:
    float} nvfp4, 0.20.0 on) or `kv_cache_quant_algo` ("FP8", "NVFP4"), at the top or under
    "quantization"; "fp8", "nvfp4", or None where it states none or one vLLM does not map (which
    vLLM then leaves at "auto"). Which releases take which: engines.vllm.CHECKPOINT_KV_CACHES."""
    nested = qc.get("quantization")
    inner: dict = nested if isinstance(nested, dict) else qc
    stated = (
        inner.get("kv_cache_scheme")
        or qc.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or qc.get("kv_cache_quant_algo")
    )
    if isinstance(stated, dict):
        if stated.get("type") != "float":
            return None
        if stated.get("dynamic") is False and stated.get("num_bits") == 8:
            return "fp8"
        return "nvfp4" if stated.get("num_bits") == 4 else None
    if isinstance(stated, str) and stated.lower() in ("fp8", "nvfp4"):
        return stated.lower()
    return None


def vllm_reads_kv_cache(qc: dict) -> bool:
    """Whether vLLM reads a KV cache from quantization_config `qc` (modelopt_kv_cache): its
    get_kv_cache_quant_algo_string reads a quant_method starting with "modelopt" (modelopt,
    modelopt_fp4; 0.21.0 on also modelopt_mixed, modelopt_mxfp8), which
    model_arch_config_convertor._normalize_quantization_config sets for a ModelOpt producer's
    nested config ({"producer": {"name": "modelopt"}, "quantization": {...}}); a config with no
    quant_method is not read."""
    producer = qc.get("producer")
    if isinstance(producer, dict) and producer.get("name") == "modelopt":
        return True
    method = qc.get("quant_method")
    return isinstance(method, str) and method.startswith("modelopt")  # case as written


# The quantization configs that state a checkpoint's KV cache, as the engines' rules read them:
# SGLang's ModelOpt config classes by quant_algo (model_config override: FP4 -> ModelOptFp4Config,
# MIXED_PRECISION -> ModelOptMixedPrecisionConfig, FP8 -> ModelOptFp8Config) and
# CompressedTensorsConfig
CHECKPOINT_KV_METHODS = ("modelopt-fp4", "modelopt-mixed", "modelopt-fp8", "compressed-tensors")


def modelopt_kv_method(algo: str) -> str:
    """The ModelOpt config (CHECKPOINT_KV_METHODS) of a checkpoint's quant_algo."""
    algo = algo.upper()
    if algo == "MIXED_PRECISION":
        return "modelopt-mixed"
    return "modelopt-fp4" if "FP4" in algo else "modelopt-fp8"


def compressed_tensors_kv_cache(qc: dict) -> str | None:
    """The KV cache a compressed-tensors quantization_config states as SGLang reads it
    (CompressedTensorsKVCacheMethod.is_supported_scheme, the 0.5.19-0.5.23 wheels: a static
    symmetric per-tensor FP8 `kv_cache_scheme`, "all BaseKVCacheMethod can represent"): "fp8",
    or None. vLLM's resolve_kv_cache_dtype_string does not read it (engines.vllm)."""
    scheme = qc.get("kv_cache_scheme")
    if not isinstance(scheme, dict):
        return None
    fp8 = (
        scheme.get("type") == "float"
        and scheme.get("num_bits") == 8
        and scheme.get("strategy") == "tensor"
        and scheme.get("symmetric", True) is True
        and not scheme.get("dynamic", False)
    )
    return "fp8" if fp8 else None


def _modelopt_producer(qc: dict) -> dict:
    """A ModelOpt producer's nested config ({"producer": {"name": "modelopt"}, "quantization":
    {"quant_algo": ..., "exclude_modules": ...}}, as ModelOpt 0.29 and earlier write
    hf_quant_config.json) as its "quantization" object with the quant_method vLLM's
    model_arch_config_convertor._normalize_quantization_config sets (modelopt for the FP8
    algorithms, modelopt_fp4 for NVFP4); any other config as it is."""
    producer, inner = qc.get("producer"), qc.get("quantization")
    if not (isinstance(producer, dict) and producer.get("name") == "modelopt"):
        return qc
    if not isinstance(inner, dict) or qc.get("quant_method"):
        return qc
    algo = str(inner.get("quant_algo", ""))[:40].upper()
    return {**inner, "quant_method": "modelopt_fp4" if algo == "NVFP4" else "modelopt"}


def read_quantization(top: dict, text: dict, name: str, hint: str = "") -> Quantization:
    """`name` is the model as the user named it; `hint` adds where it came from (a file name,
    a repository id) for the check on quantized-looking names. The KV cache the config states
    is read where vLLM reads one (vllm_reads_kv_cache), whatever kvplan makes of the weights."""
    quant = _read_weights(top, text, name, hint)
    # the top level's alone: resolve_kv_cache_dtype_string reads hf_config.quantization_config
    # (vllm/utils/torch_utils.py 0.14.0:310-312, 0.19.0:333-335, 0.32.0:521-523), which
    # get_config sets from config.json's top level or hf_quant_config.json only
    # (transformers_utils/config.py 0.14.0:684-693); a text_config's quantization_config gives
    # the weights' method (model_arch_config_convertor.get_quantization_config) but no cache
    qc = top.get("quantization_config")
    if isinstance(qc, dict) and vllm_reads_kv_cache(qc):
        kv_cache = modelopt_kv_cache(qc)
        nested = qc.get("quantization")
        # the algorithm, or where none is stated the method's own (modelopt_fp4 is FP4)
        algo = (nested if isinstance(nested, dict) else qc).get("quant_algo") or qc.get(
            "quant_method"
        )
        kv_method = modelopt_kv_method(str(algo or "")) if kv_cache else None
        return quant._replace(kv_cache=kv_cache, kv_cache_method=kv_method)
    return quant


def _read_weights(top: dict, text: dict, name: str, hint: str) -> Quantization:
    """The weights format of the config's quantization_config (read_quantization)."""
    qc = top.get("quantization_config") or text.get("quantization_config")
    if qc and not isinstance(qc, dict):  # vLLM reads it with .get(): its load fails
        what = clean(qc)[:40] if isinstance(qc, str) else "unnamed"
        kind = {str: "string", list: "array", bool: "boolean"}.get(type(qc), "number")
        why = f"quantization_config is a JSON {kind}, not an object"
        return Quantization(None, None, (note("quant-unread", method=what, why=why),))
    if not isinstance(qc, dict):
        words = f"{name} {hint}".lower()
        if any(tag in words for tag in NAME_SAYS_QUANTIZED):
            return Quantization(None, None, (note("quant-name-only", name=clean(name)[:100]),))
        return Quantization(None, None)
    qc = _modelopt_producer(qc)
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "")[:40].lower()
    ignore = qc.get("modules_to_not_convert") or qc.get("ignore") or qc.get("ignored_layers")
    if method == "fp8":
        block = qc.get("weight_block_size")
        if block and not (
            isinstance(block, list) and len(block) == 2 and all(_whole(b) and b > 0 for b in block)
        ):  # vLLM's Fp8Config takes two block sides; a zero or negative one fails its load
            why = f"weight_block_size {_shown(block)}"
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        return Quantization("fp8" if block else "fp8-tensor", _parts(ignore))
    if method == "mxfp4":
        return Quantization("mxfp4", None, method=method)
    if method == "fbgemm_fp8":
        return _fbgemm_fp8(qc, top, text)
    if method == "quark":
        return _quark(qc, top, text)
    if method == "compressed-tensors":
        fmt, why = _compressed_tensors(qc)
        if fmt is None:
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        kv_cache = compressed_tensors_kv_cache(qc)
        return Quantization(
            fmt,
            _parts(ignore),
            method=method,
            kv_cache=kv_cache,
            kv_cache_method=method if kv_cache else None,
        )
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        size = qc.get("group_size", qc.get("q_group_size", 128))
        if not _whole(bits) or bits not in (4, 8):
            why = f"{_shown(bits)} bits"
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        if not _whole(size) or size > MAX_GROUP_SIZE:
            why = f"group_size {_shown(size)}"
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        if size <= 0:
            return Quantization(f"int{bits}", _parts(ignore))  # per-channel scales
        return Quantization(f"int{bits}-g{size}", _parts(ignore))
    if method in ("modelopt", "nvfp4", "modelopt_fp4"):
        algo = str(qc.get("quant_algo", method)).lower()
        fmt = "nvfp4" if "fp4" in algo else "fp8-tensor" if "fp8" in algo else None
        if fmt is None:
            return Quantization(None, None, (note("quant-unread", method=method, why=algo),))
        return Quantization(fmt, _parts(qc.get("exclude_modules") or ignore))
    return Quantization(
        None,
        None,
        (note("quant-unread", method=method or "unnamed", why="not a method kvplan sizes"),),
    )
