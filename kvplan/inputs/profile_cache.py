"""The bundled profiles precompiled: hardware_profiles/bundled.json holds what the strict YAML
loader reads from each bundled file (the GPU profiles and prices.yaml), the names each profile
answers to, and each file's CRC-32. Reading it takes ~2 ms of CPU where the pure-Python loader
took ~190 ms for the 41 files, which every `--gpu` command paid.

`python scripts/compile_profiles.py` writes it (kvplan.inputs.hardware.compile_bundled reads the
YAML files through the strict loader); tests/test_hardware.py re-reads every YAML with the strict
loader and compares. The file is a cache, never a second home of a number: when a YAML was edited,
added or removed since it was written (a digest differs), the YAML files are read through the
strict loader instead. Users' own files always go through the strict loader."""

from __future__ import annotations

import datetime
import json
import zlib
from pathlib import Path

COMPILED = "bundled.json"
PRICES = "prices"  # prices.yaml: GPU-hour prices (kvplan.inputs.prices), not a profile


def digests(folder: Path) -> dict[str, str]:
    """Each YAML's CRC-32: to notice an edit, not a security boundary (whoever can edit a bundled
    YAML can edit the JSON beside it). zlib is loaded already; hashlib's OpenSSL costs ~7 ms."""
    return {
        path.name: f"{zlib.crc32(path.read_bytes()):08x}" for path in sorted(folder.glob("*.yaml"))
    }


def _plain(value: object) -> str:
    """What JSON cannot hold as YAML read it: a date (prices' read_on) as its ISO text, the
    text every reader makes of it (str(date))."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} in a bundled profile has no JSON form")


def render(compiled: dict) -> str:
    return json.dumps(compiled, indent=1, default=_plain) + "\n"


def read_compiled(folder: Path) -> dict | None:
    """The compiled file if every YAML beside it is the one it was compiled from, else None (then
    kvplan.inputs.hardware.compile_bundled reads the YAML files)."""
    try:
        compiled = json.loads((folder / COMPILED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        compiled = None
    if not isinstance(compiled, dict) or compiled.get("files") != digests(folder):
        return None
    return compiled
