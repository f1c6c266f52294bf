"""What people type on the command line, parsed into SI numbers with their ranges checked at the
edge: token counts (8k, 128k, 1m), lists of them, whole numbers, fractions and sizes with units."""

import math
import re
from typing import TypeVar

from kvplan.errors import KvplanError
from kvplan.units import GB, GIB, KB, KIB, MB, MIB, TB, TIB, TOKENS_K

_TOKEN_SUFFIX = {"": 1, "k": TOKENS_K, "m": TOKENS_K**2}
_BYTES_SUFFIX = {
    "b": 1,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": TIB,
}

MAX_TOKENS = 1 << 40  # anything above is a typo, not a context length
MAX_LIST = 256  # values in one comma-separated list (contexts x batches bounds a table's rows)


def ascii_number(text: object, what: str) -> str:
    """A number as typed, refused when it holds a character outside ASCII: Python's int() and
    float() (and a regex's \\d) read Arabic-Indic, fullwidth or Devanagari digits as 0-9, so
    `١٢٨k` would plan 128k tokens where nobody typed them."""
    text = str(text)
    if not text.isascii():
        import unicodedata  # only for a number with a character outside ASCII

        ch = next(ch for ch in text if not ch.isascii())
        name = unicodedata.name(ch, "")
        raise KvplanError(
            f"{what} {text[:60]!r}: {ch!r} (U+{ord(ch):04X}{' ' + name if name else ''}) is not "
            "an ASCII character; write numbers with the digits 0-9"
        )
    return text


def parse_tokens(text: str, *, what: str = "context length", maximum: int = MAX_TOKENS) -> int:
    """'8192', '8k' (= 8192), '128K', '1m' (= 1,048,576), '1.5k', '32,768' (kvplan's own way of
    printing it) -> a positive whole token count."""
    text = ascii_number(text, what)
    if re.fullmatch(r"\s*\d{1,3}(?:,\d{3})+\s*", str(text)):
        text = str(text).replace(",", "")
    match = re.fullmatch(r"\s*(\d{1,15}(?:\.\d{1,6})?)\s*([kKmM]?)\s*", str(text))
    if not match:
        raise KvplanError(f"{what} {text!r} is not a token count (examples: 8192, 8k, 128k, 1m)")
    value = float(match.group(1)) * _TOKEN_SUFFIX[match.group(2).lower()]
    if value != int(value):
        raise KvplanError(f"{what} {text!r} is not a whole number of tokens")
    tokens = int(value)
    if tokens <= 0 or tokens > maximum:
        raise KvplanError(f"{what} {text!r} must be between 1 and {maximum:,} tokens")
    return tokens


# A context below this many tokens is not one anybody plans: "32,768" is 32768, not 32 and 768
MIN_PLAUSIBLE_CONTEXT = 128


def _thousands(parts: list[str], what: str, text: str, contexts: bool) -> list[str]:
    """Join digit groups written with thousands separators, the way kvplan prints numbers
    ("32,768", "1,048,576"): a run of 1-3 digits then groups of exactly 3, with no space after
    the commas. A run is one number where reading it as a list is implausible: a group with a
    leading zero ("128,000", "1,024"), or, for contexts, a first value under 128 tokens. For
    contexts, a run both readings fit ("512,768") is refused; batch lists ("1,128") stay lists."""
    out, i = [], 0
    while i < len(parts):
        run = [parts[i]]
        if re.fullmatch(r"\d{1,3}", parts[i].strip()) and (i == 0 or not parts[i][:1].isspace()):
            while i + len(run) < len(parts) and re.fullmatch(r"\d{3}", parts[i + len(run)]):
                run.append(parts[i + len(run)])
        if len(run) == 1:
            out.append(parts[i])
            i += 1
            continue
        number = "".join(r.strip() for r in run)
        leading_zero = any(g.startswith("0") for g in run[1:])
        if leading_zero or (contexts and int(run[0]) < MIN_PLAUSIBLE_CONTEXT):
            out.append(number)
        elif contexts:
            raise KvplanError(
                f"{what} {text.strip()[:60]!r}: one context of {int(number):,} tokens or "
                f"{len(run)} contexts? Write {number} for one, or a space after each comma "
                f"({', '.join(r.strip() for r in run)}) for several"
            )
        else:
            out += run
        i += len(run)
    return out


def _items(text: str, what: str, contexts: bool = False) -> list[str]:
    text = ascii_number(text, what)
    parts = _thousands(str(text).split(","), what, str(text), contexts)
    items = [item.strip() for item in parts if item.strip()]
    if not items:
        raise KvplanError(f"no {what} given")
    if len(items) > MAX_LIST:
        raise KvplanError(f"{len(items)} values for {what}: at most {MAX_LIST} in one list")
    return items


def parse_token_list(text: str, *, what: str = "context length") -> list[int]:
    """'8k,32k,128k' -> [8192, 32768, 131072]; '32,768' -> [32768] (see _thousands)."""
    return [parse_tokens(item, what=what) for item in _items(text, what, contexts=True)]


def parse_int(text: str, *, what: str, minimum: int = 1, maximum: int = 1 << 30) -> int:
    item = ascii_number(text, what).strip()
    if not re.fullmatch(r"[+-]?\d{1,12}", item):
        raise KvplanError(f"{what} {item!r} is not a whole number")
    value = int(item)
    if not minimum <= value <= maximum:
        raise KvplanError(f"{what} {value} must be between {minimum:,} and {maximum:,}")
    return value


def parse_int_list(text: str, *, what: str, minimum: int = 1, maximum: int = 1 << 30) -> list[int]:
    """'1,8,64' -> [1, 8, 64], each within [minimum, maximum]."""
    return [
        parse_int(item, what=what, minimum=minimum, maximum=maximum) for item in _items(text, what)
    ]


_Number = TypeVar("_Number", int, float)


def check_range(value: _Number, *, what: str, minimum: float, maximum: float) -> _Number:
    """A number typed by a person, finite and within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KvplanError(f"{what} {value!r} is not a finite number")
    if isinstance(value, float) and not math.isfinite(value):  # an int is finite, however long
        raise KvplanError(f"{what} {value!r} is not a finite number")
    if not minimum <= value <= maximum:
        shown = f"{value:g}" if abs(value) < 1e15 else f"{str(value)[:12]}…"  # no float of 1e400
        raise KvplanError(f"{what} {shown} must be between {minimum:g} and {maximum:g}")
    return value


def parse_bytes(text: str, *, what: str = "memory", allow_zero: bool = False) -> int:
    """'19.53GiB', '80GB', '1073741824B' -> bytes. A size always carries its unit (B, KB, MB,
    GB, TB, KiB, MiB, GiB, TiB): a bare number is refused, since `2` could mean bytes or GiB."""
    raw = ascii_number(text, what).strip()
    match = re.fullmatch(r"(\d{1,15}(?:\.\d{1,9})?(?:[eE]\+?\d{1,2})?)\s*([a-zA-Z]*)", raw)
    if not match:
        raise KvplanError(f"{what} {text!r} is not a size (examples: 19.53GiB, 80GB, 4096MiB)")
    number, unit = match.group(1), match.group(2).lower()
    if not unit:
        if float(number) == 0 and allow_zero:
            return 0
        raise KvplanError(
            f"{what} {text!r} needs a unit: {number}GiB, {number}GB or {number}B (bytes)"
        )
    if unit not in _BYTES_SUFFIX:
        raise KvplanError(f"{what} {text!r}: unknown unit {match.group(2)!r} (B, GB, GiB, ...)")
    value = float(number) * _BYTES_SUFFIX[unit]
    if not math.isfinite(value) or value > 2**60 or (value <= 0 and not allow_zero):
        raise KvplanError(f"{what} {text!r} must be a positive size below 1 EiB")
    return int(value)
