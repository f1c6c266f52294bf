"""GPU-hour prices: the documented defaults in hardware_profiles/prices.yaml (one per bundled
profile, with the date its source was read) and the overrides people type (`h100=2.49`)."""

from __future__ import annotations

import math
from functools import lru_cache

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile, load_profile
from kvplan.record import NamedTuple

MAX_USD_PER_GPU_HOUR = 10_000.0
MIN_USD_PER_GPU_HOUR = 0.001  # a tenth of a cent: below it the cost columns print 0.00


class Price(NamedTuple):
    usd_per_gpu_hour: float
    read_on: str | None  # the date the source was read (None: not re-read)
    source: str  # where the figure comes from, or "--price" for an override


@lru_cache(maxsize=1)
def default_prices() -> dict[str, Price]:
    """Profile key -> its documented default price."""
    from kvplan.inputs.hardware import bundled_prices

    return prices_from(bundled_prices())


def prices_from(data: dict | None) -> dict[str, Price]:
    """prices.yaml's data (as the strict loader or hardware_profiles/bundled.json holds it) ->
    profile key -> price."""
    prices = {}
    for key, row in (data or {}).get("prices", {}).items():
        value = float(str(row["usd_per_gpu_hour"]))
        read_on = row.get("read_on")
        prices[key] = Price(value, None if read_on is None else str(read_on), str(row["source"]))
    return prices


def parse_price(text: str) -> tuple[str, float]:
    """'h100=2.49' -> (the profile key of h100, 2.49)."""
    name, sep, value = str(text).partition("=")
    if not sep or not name.strip():
        raise KvplanError(f"--price {text!r}: write GPU=USD per GPU-hour, e.g. h100=2.49")
    from kvplan.inputs.options import ascii_number

    try:
        usd = float(ascii_number(value, f"--price {name.strip()[:40]}="))
    except ValueError:
        raise KvplanError(f"--price {text!r}: {value!r} is not a number of USD") from None
    if not math.isfinite(usd) or not MIN_USD_PER_GPU_HOUR <= usd <= MAX_USD_PER_GPU_HOUR:
        raise KvplanError(
            f"--price {str(text)[:40]!r}: the price must be between {MIN_USD_PER_GPU_HOUR} and "
            f"{MAX_USD_PER_GPU_HOUR:,.0f} USD per GPU-hour"
        )
    return load_profile(name.strip()).key, usd


def price_for(gpu: GpuProfile, overrides: dict[str, float]) -> Price | None:
    """The price of one GPU-hour of `gpu`: an override, else the documented default."""
    if gpu.key in overrides:
        return Price(overrides[gpu.key], None, "--price")
    return default_prices().get(gpu.key)
