"""Validated reads from a config dict: every missing or malformed field becomes a one-line error.

`null` in a config means "use the derived value" (transformers and vLLM both treat it so), so a
null field reads as absent.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from kvplan.errors import KvplanError

_MISSING = object()
REQUIRED = _MISSING  # pass as `default=` when a class default may be absent
MAX_DIM = 1 << 31  # no real config has a dimension this large; anything above is corrupt
MAX_LAYERS = (
    4096  # layers are iterated one by one (per deployment tried); real models: a few hundred
)
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")
# Tighter bounds where a value sizes a loop or a table (real models: heads <= 128, experts <=
# 512, vocab <= 262k): generous by orders of magnitude, small enough to keep work bounded. The
# vocabulary's 2^24 (64x Gemma 3's 262,144) also bounds a GGUF's arrays (its tokens, scores and
# merges), walked string by string: 2^24 of them read in about 5 s (166 MB).
FIELD_MAXIMUM = {
    "num_attention_heads": 1 << 16,
    "n_head": 1 << 16,
    "num_heads": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "num_kv_heads": 1 << 16,
    "n_head_kv": 1 << 16,
    "vocab_size": 1 << 24,
    "n_routed_experts": 1 << 16,
    "num_experts": 1 << 16,
    "num_local_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16,
}


class Fields:
    """A config dict with typed, validated getters; `source` names the config in messages."""

    def __init__(self, data: dict, source: str, parent: dict | None = None):
        if not isinstance(data, dict):
            raise KvplanError(f"{source}: config is not a JSON object")
        self.data = data
        self.parent = parent or {}
        self.source = source
        self.read: set[str] = set()  # every key looked up, found or not (the structure report)

    def has(self, name: str) -> bool:
        self.read.add(name)
        return self.data.get(name) is not None

    def raw(self, *names: str, default: Any = None) -> Any:
        self.read.update(names)
        for name in names:
            value = self.data.get(name)
            if value is not None:
                return value
        return default

    def int(self, *names: str, default: Any = _MISSING, minimum: int = 1, why: str = "") -> int:
        self.read.update(names)
        for name in names:
            value = self.data.get(name)
            if value is not None:
                return self._check_int(name, value, minimum)
        if default is _MISSING:
            reason = f" (needed for {why})" if why else ""
            raise KvplanError(f"{self.source}: config lacks {names[0]}{reason}")
        return default

    def opt_int(self, *names: str, minimum: builtins.int = 1) -> builtins.int | None:
        return self.int(*names, default=None, minimum=minimum)

    def window(self, name: str, default: Any = None) -> builtins.int | None:
        """A window size: null or 0 disables it (vLLM treats 0 as disabled)."""
        self.read.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        if value is None or value == 0:
            return None
        return self._check_int(name, value, 1)

    def bool(self, name: str, default: bool) -> bool:
        self.read.add(name)
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise KvplanError(
                f"{self.source}: field {name} must be true or false, got {shown(value)}"
            )
        return value

    def float(self, name: str, default: float) -> float:
        self.read.add(name)
        value = self.data.get(name)
        if value is None:
            return default
        if not finite_number(value):
            raise KvplanError(f"{self.source}: field {name} must be a number, got {shown(value)}")
        return float(value)

    def int_list(
        self, name: str, length: builtins.int | None = None, minimum: builtins.int = 0
    ) -> list[builtins.int] | None:
        self.read.add(name)
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise KvplanError(
                f"{self.source}: field {name} must be a list, got {type(value).__name__}"
            )
        if len(value) > MAX_LAYERS:
            raise KvplanError(f"{self.source}: field {name} has over {MAX_LAYERS:,} entries")
        out = [self._check_int(name, item, minimum) for item in value]
        if length is not None and len(out) != length:
            raise KvplanError(
                f"{self.source}: field {name} has {len(out)} entries, expected {length}"
            )
        return out

    def str_list(self, name: str, length: builtins.int | None = None) -> list[str] | None:
        self.read.add(name)
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise KvplanError(f"{self.source}: field {name} must be a list of strings")
        if len(value) > MAX_LAYERS:
            raise KvplanError(f"{self.source}: field {name} has over {MAX_LAYERS:,} entries")
        if length is not None and len(value) != length:
            raise KvplanError(
                f"{self.source}: field {name} has {len(value)} entries, expected {length}"
            )
        return list(value)

    def string(self, name: str, default: str | None = None) -> str | None:
        self.read.add(name)
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise KvplanError(f"{self.source}: field {name} must be a string, got {shown(value)}")
        return value

    def _check_int(self, name: str, value: Any, minimum: builtins.int) -> builtins.int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KvplanError(f"{self.source}: field {name} must be an integer, got {shown(value)}")
        if isinstance(value, float):
            if not math.isfinite(value) or value != int(value):
                raise KvplanError(
                    f"{self.source}: field {name} must be an integer, got {shown(value)}"
                )
            value = int(value)
        maximum = MAX_LAYERS if name in LAYER_FIELDS else FIELD_MAXIMUM.get(name, MAX_DIM)
        if value < minimum or value > maximum:
            raise KvplanError(
                f"{self.source}: field {name} = {shown(value)} is out of range ({minimum} to "
                f"{maximum:,})"
            )
        return value


def finite_number(value) -> bool:
    """A JSON number that is one: not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shown(value) -> str:
    """A config value in an error message, cut to one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
