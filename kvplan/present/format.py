"""Every number kvplan prints is formatted here, with its unit label: one home for digits and
units. Values arrive in SI base units (bytes, seconds, FLOP, FLOP/s, bytes/s); None prints as
an em dash (unknown is never NaN)."""

from collections.abc import Callable
from typing import Any

from kvplan.units import GB, GFLOP, GIB, MB, MIB, MS, TB, TFLOP, TOKENS_K, US

DASH = "—"


def _or_dash(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    def wrapped(value):
        return DASH if value is None else fn(value)

    wrapped.__doc__ = fn.__doc__
    return wrapped


# ---- table cells (numbers only; the unit is in the column header) ----------------------------
gib = _or_dash(lambda b: f"{b / GIB:,.2f}")
gib1 = _or_dash(lambda b: f"{b / GIB:,.1f}")
gb = _or_dash(lambda b: f"{b / GB:,.2f}")
mb = _or_dash(lambda b: f"{b / MB:,.1f}")
integer = _or_dash(lambda v: f"{v:,.0f}")
ratio = _or_dash(lambda v: f"{v:,.3f}")
ms = _or_dash(lambda s: f"{s / MS:,.2f}")
ms3 = _or_dash(lambda s: f"{s / MS:,.3f}")
gflop = _or_dash(lambda f: f"{f / GFLOP:,.1f}")
gflop2 = _or_dash(lambda f: f"{f / GFLOP:,.2f}")
tflop_per_s = _or_dash(lambda f: f"{f / TFLOP:,.1f}")
tb_per_s = _or_dash(lambda b: f"{b / TB:,.2f}")
gb_nominal = _or_dash(lambda b: f"{b / GB:,.0f}")
factor = _or_dash(lambda v: f"{v:,.2f}x")
percent = _or_dash(lambda v: f"{v:+.1%}")
percent0 = _or_dash(lambda v: f"{v:+.0%}")
yes_no = _or_dash(lambda v: "yes" if v else "no")
share = _or_dash(lambda v: f"{v:.1%}")  # a fraction of a whole, unsigned
usd = _or_dash(lambda v: f"{v:,.2f}")


def fixed(digits: int) -> Callable[[Any], str]:
    return _or_dash(lambda v: f"{v:,.{digits}f}")


def text(value: Any) -> str:
    return "" if value is None else str(value)


# ---- prose (number and unit together) -------------------------------------------------------
def listing(items) -> str:
    """ "a", "a and b", "a, b and c" """
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def gib_text(num_bytes: float, digits: int = 2) -> str:
    return f"{num_bytes / GIB:,.{digits}f} GiB"


def vllm_gib(num_bytes: float) -> str:
    """vLLM's format_gib: GiB rounded to 0.01 and printed as a Python float (7.5, 58.11)."""
    return str(round(num_bytes / GIB, 2))


def gb_text(num_bytes: float, digits: int = 2) -> str:
    return f"{num_bytes / GB:,.{digits}f} GB"


def mib_text(num_bytes: float, digits: int = 2) -> str:
    return f"{num_bytes / MIB:,.{digits}f} MiB"


def bytes_text(num_bytes: float) -> str:
    """A size in the largest binary unit that keeps it >= 1: 1.50 GiB, 12.0 MiB, 640 B."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if abs(num_bytes) >= scale:
            return f"{num_bytes / scale:,.2f} {unit}"
    return f"{num_bytes:,.0f} B"


def bandwidth_text(bytes_per_s: float, digits: int = 2) -> str:
    return f"{bytes_per_s / TB:,.{digits}f} TB/s"


def gbps_text(bytes_per_s: float, digits: int = 0) -> str:
    return f"{bytes_per_s / GB:,.{digits}f} GB/s"


def gflops_text(flop_per_s: float, digits: int = 1) -> str:
    return f"{flop_per_s / GFLOP:,.{digits}f} GFLOP/s"


def tflops_text(flop_per_s: float, digits: int = 1) -> str:
    return f"{flop_per_s / TFLOP:,.{digits}f} TFLOP/s"


def ms_text(seconds: float, digits: int = 1) -> str:
    return f"{seconds / MS:,.{digits}f} ms"


def us_text(seconds: float, digits: int = 0) -> str:
    return f"{seconds / US:,.{digits}f} us"


def tokens(count: int) -> str:
    """131072 -> '128k'; 1048576 -> '1m'; 8000 -> '8,000'."""
    if count >= TOKENS_K**2 and count % TOKENS_K**2 == 0:
        return f"{count // TOKENS_K**2}m"
    if count >= TOKENS_K and count % TOKENS_K == 0:
        return f"{count // TOKENS_K}k"
    return f"{count:,}"


def count(value: float) -> str:
    """70553706496 -> '70.55B' (parameters)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"


def layout_text(deployment: Any) -> str:
    """A deployment in words, 'TP 8 x PP 2' (kvplan.plans.deployment.layout_text, whose words the
    plans' layout fields hold too), for a note that carries the Deployment itself."""
    from kvplan.plans.deployment import layout_text as words

    return words(deployment)
