"""A config's `quantization_config` as a kvplan weights format and the parts it covers: fp8 (block
or per-tensor scales), compressed-tensors (int groups, fp8, nvfp4), AWQ/GPTQ, ModelOpt, mxfp4.
What it cannot read it names, and a name that says "FP8"/"AWQ"/... with no quantization_config
is flagged: the weights are then counted unquantized, and the output says so."""

import re

from kvplan.formulas.weights import QUANTIZABLE_PARTS
from kvplan.inputs.text import clean
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

# A name that says its weights are quantized (plain substrings of the lower-cased name)
NAME_SAYS_QUANTIZED = (
    "fp8", "fp4", "nvfp4", "mxfp4", "awq", "gptq", "int4", "int8", "w4a16", "w8a8", "w4a8",
    "bnb", "4bit", "8bit",
)  # fmt: skip


MAX_GROUP_SIZE = 1 << 20  # real groups are 32 to 128 values; a larger one is corrupt


def _whole(value) -> bool:
    """An integer as JSON spells one (true and 4.0 are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


class Quantization(NamedTuple):
    format: str | None  # a kvplan weights dtype name, None when not quantized (or unreadable)
    parts: tuple[str, ...] | None  # the parts it covers; None: the format's default
    notes: tuple[Note, ...] = ()


def _excluded_parts(patterns) -> set[str]:
    """Parts an ignore / modules_to_not_convert list keeps unquantized."""
    excluded = set()
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)):
        patterns = ()  # a number or an object is no list of modules: nothing excluded
    for raw in patterns:
        text = str(raw).lower()
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
            return None, f"num_bits {clean(repr(bits))[:20]}"
        if kind == "float" and bits == 8:
            formats.add("fp8-tensor" if strategy in ("tensor", "channel") else "fp8")
        elif kind == "float" and bits == 4:
            formats.add("nvfp4")
        elif kind == "int" and bits in (4, 8):
            if strategy == "group" and not (_whole(size) and 0 < size <= MAX_GROUP_SIZE):
                return None, f"group_size {clean(repr(size))[:20]}"
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


def read_quantization(top: dict, text: dict, name: str, hint: str = "") -> Quantization:
    """`name` is the model as the user named it; `hint` adds where it came from (a file name,
    a repository id) for the check on quantized-looking names."""
    qc = top.get("quantization_config") or text.get("quantization_config")
    if not isinstance(qc, dict):
        words = f"{name} {hint}".lower()
        if any(tag in words for tag in NAME_SAYS_QUANTIZED):
            return Quantization(None, None, (note("quant-name-only", name=clean(name)[:100]),))
        return Quantization(None, None)
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "")[:40].lower()
    ignore = qc.get("modules_to_not_convert") or qc.get("ignore") or qc.get("ignored_layers")
    if method == "fp8":
        block = qc.get("weight_block_size")
        fmt = "fp8" if block else "fp8-tensor"
        return Quantization(fmt, _parts(ignore))
    if method == "mxfp4":
        return Quantization("mxfp4", None)
    if method == "compressed-tensors":
        fmt, why = _compressed_tensors(qc)
        if fmt is None:
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        return Quantization(fmt, _parts(ignore))
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        size = qc.get("group_size", qc.get("q_group_size", 128))
        if not _whole(bits) or bits not in (4, 8):
            why = f"{clean(repr(bits))[:20]} bits"
            return Quantization(None, None, (note("quant-unread", method=method, why=why),))
        if not _whole(size) or size > MAX_GROUP_SIZE:
            why = f"group_size {clean(repr(size))[:20]}"
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
