"""Parsing of sizes typed by people, and the one place numbers get their printed units.

Inside the library everything is SI base units: bytes, seconds, FLOP, FLOP/s, bytes/s.
GiB (2**30) is used for capacities, GB/s and TFLOP/s (10**9, 10**12) where datasheets use them.
"""

from __future__ import annotations

import math
import re

from kvplan.errors import KvplanError

GIB = 2**30
GB = 10**9

_TOKEN_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
_BYTES_SUFFIX = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

MAX_TOKENS = 1 << 40  # anything above is a typo, not a context length


def parse_tokens(text: str, *, what: str = "context length") -> int:
    """'8192', '8k' (= 8192), '128K', '1m' (= 1,048,576), '1.5k' -> a positive whole token count."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", str(text))
    if not match:
        raise KvplanError(f"{what} {text!r} is not a token count (examples: 8192, 8k, 128k, 1m)")
    value = float(match.group(1)) * _TOKEN_SUFFIX[match.group(2).lower()]
    if value != int(value):
        raise KvplanError(f"{what} {text!r} is not a whole number of tokens")
    tokens = int(value)
    if tokens <= 0 or tokens > MAX_TOKENS:
        raise KvplanError(f"{what} {text!r} must be between 1 and {MAX_TOKENS:,} tokens")
    return tokens


def parse_token_list(text: str, *, what: str = "context length") -> list[int]:
    """'8k,32k,128k' -> [8192, 32768, 131072]."""
    items = [item for item in str(text).split(",") if item.strip()]
    if not items:
        raise KvplanError(f"no {what} given")
    return [parse_tokens(item, what=what) for item in items]


def parse_int_list(text: str, *, what: str, minimum: int = 1, maximum: int = 1 << 30) -> list[int]:
    """'1,8,64' -> [1, 8, 64], each within [minimum, maximum]."""
    values = []
    for item in [i.strip() for i in str(text).split(",") if i.strip()]:
        if not re.fullmatch(r"\d+", item):
            raise KvplanError(f"{what} {item!r} is not a whole number")
        value = int(item)
        if not minimum <= value <= maximum:
            raise KvplanError(f"{what} {value} must be between {minimum} and {maximum:,}")
        values.append(value)
    if not values:
        raise KvplanError(f"no {what} given")
    return values


def parse_bytes(text: str, *, what: str = "memory") -> int:
    """'19.53GiB', '80GB', '1024' (bytes) -> bytes. A bare number is bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _BYTES_SUFFIX:
        raise KvplanError(f"{what} {text!r} is not a size (examples: 19.53GiB, 80GB, 1073741824)")
    value = float(match.group(1)) * _BYTES_SUFFIX[match.group(2).lower()]
    if not math.isfinite(value) or value <= 0 or value > 2**60:
        raise KvplanError(f"{what} {text!r} must be a positive size")
    return int(value)


def human_tokens(tokens: int) -> str:
    """131072 -> '128k'; 8000 -> '8,000'."""
    if tokens >= 1024**2 and tokens % 1024**2 == 0:
        return f"{tokens // 1024**2}m"
    if tokens >= 1024 and tokens % 1024 == 0:
        return f"{tokens // 1024}k"
    return f"{tokens:,}"


def human_count(value: float) -> str:
    """70553706496 -> '70.55B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"
