"""Real SGLang start-up logs (tests/data/sglang_logs.json) and kvplan's prediction of each: the
KV line for the logged token count (cell size), the token count from the log's own memory
figures (pool), and the token count from the config alone (full). Shared by
tests/test_sglang_logs.py and scripts/sglang_log_accuracy.py."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache
from pathlib import Path
from typing import NamedTuple

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.present.engines import sglang_log_lines
from kvplan.units import GIB

DATA = Path(__file__).parent / "data" / "sglang_logs.json"

_KV_LINE = re.compile(r"KV Cache is allocated\.( dtype: \S+,)?( #tokens: \d+,)? K?V? ?size.*")
_TOKENS = re.compile(r"#tokens: (\d+)")
_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
_SIZES = re.compile(r"(K|V|KV) size: ([\d.]+) GB")
_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
_END = re.compile(r"Load weight end\..*avail mem=([\d.]+) GB")
_USAGE = re.compile(r"Load weight end\..*mem usage=([\d.]+) GB")
_CONTEXT = re.compile(r"context_len=(\d+)")
_CHUNKED = re.compile(r"chunked_prefill_size=(\d+)")
_RUNNING = re.compile(r"max_running_requests=(\d+)")


def _first(pattern: re.Pattern, lines: list[str]) -> re.Match | None:
    for line in lines:
        m = pattern.search(line)
        if m:
            return m
    return None


class LogCase(NamedTuple):
    id: str
    url: str
    version: str
    model_id: str
    kvplan_model: str
    gpu: str | None
    args: dict
    weights_dtype: str
    lines: tuple[str, ...]
    too_old: str | None
    full_prediction: bool

    def value(self, pattern: re.Pattern) -> str | None:
        m = _first(pattern, list(self.lines))
        return m.group(1) if m else None

    @property
    def tokens(self) -> int:
        return int(self.value(_TOKENS) or self.value(_MAX_TOTAL))

    @property
    def kv_sizes_gb(self) -> dict[str, float]:
        line = _first(_KV_LINE, list(self.lines)).group(0)
        return {name: float(v) for name, v in _SIZES.findall(line)}

    @property
    def context_len(self) -> int:
        return int(self.value(_CONTEXT) or 8192)

    @property
    def fraction(self) -> float | None:
        return self.args.get("mem_fraction_static")

    @property
    def pool_bytes(self) -> int | None:
        """SGLang's rest_memory from the log: free after load - free before x (1 - fraction).
        Free before is 'Load weight begin', else 'Load weight end''s avail + mem usage."""
        end = self.value(_END)
        if end is None or self.fraction is None:
            return None
        begin = self.value(_BEGIN)
        before = float(begin) if begin else float(end) + float(self.value(_USAGE))
        return int((float(end) - before * (1 - self.fraction)) * GIB)


@cache
def cases() -> tuple[LogCase, ...]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    return tuple(
        LogCase(
            id=e["id"],
            url=e["url"],
            version=e["sglang_version"],
            model_id=e["model_id"],
            kvplan_model=e["kvplan_model"],
            gpu=e["gpu"],
            args=e["args"],
            weights_dtype=e.get("weights_dtype", "auto"),
            lines=tuple(e["lines"]),
            too_old=e.get("too_old"),
            full_prediction=e.get("full_prediction", True) and e["gpu"] is not None,
        )
        for e in data["cases"]
    )


def case(case_id: str) -> LogCase:
    return next(c for c in cases() if c.id == case_id)


def request_for(c: LogCase, **overrides) -> EngineRequest:
    fields = dict(
        engine="sglang",
        tp=int(c.args["tp_size"]),
        max_model_len=c.context_len,
        kv_cache_dtype=c.args.get("kv_cache_dtype") or "auto",
        weights_dtype=c.weights_dtype,
    )
    if c.fraction is not None:
        fields["mem_fraction_static"] = c.fraction
    fields.update(overrides)
    return EngineRequest(**fields)


def predict(c: LogCase, **overrides):
    """kvplan's SGLang result for the run in `c` (H100 SXM where no kvplan GPU fits: the GPU
    matters only to the memory checks, which such cases skip)."""
    return engine_allocation(
        load_model(c.kvplan_model), load_profile(c.gpu or "h100-sxm"), request_for(c, **overrides)
    )


def kv_line_for_logged_tokens(c: LogCase) -> str:
    """kvplan's 'KV Cache is allocated' line with the pool sized to the logged token count."""
    cell = predict(c).profile_cell_size_bytes
    result = predict(c, kv_cache_memory_bytes=c.tokens * cell)
    return next(line for line in sglang_log_lines(result) if line.startswith("KV Cache"))


class Row(NamedTuple):
    case: LogCase
    cell_ok: bool | None  # kvplan's KV line equals the logged one (None: too old)
    pool_tokens: int | None  # from the log's own memory figures
    full_tokens: int | None  # from the config alone
    chunked_prefill_size: int

    @property
    def pool_error(self) -> float | None:
        return None if self.pool_tokens is None else self.pool_tokens / self.case.tokens - 1

    @property
    def full_error(self) -> float | None:
        return None if self.full_tokens is None else self.full_tokens / self.case.tokens - 1


def same_kv_figures(ours: str, logged: str) -> bool:
    """The same #tokens (where the log prints it) and the same K/V (or KV) sizes."""
    logged_tokens = _TOKENS.search(logged)
    if logged_tokens and logged_tokens.group(1) != _TOKENS.search(ours).group(1):
        return False
    return dict(_SIZES.findall(ours)) == dict(_SIZES.findall(logged))


def evaluate(c: LogCase) -> Row:
    logged_line = _first(_KV_LINE, list(c.lines)).group(0)
    cell_ok = None if c.too_old else same_kv_figures(kv_line_for_logged_tokens(c), logged_line)
    pool = None
    if c.pool_bytes is not None and not c.too_old:
        pool = predict(c, kv_cache_memory_bytes=c.pool_bytes).kv_cache_tokens
    full = predict(c).kv_cache_tokens if c.full_prediction and not c.too_old else None
    return Row(c, cell_ok, pool, full, predict(c).chunked_prefill_size)


def summary(rows: list[Row]) -> dict:
    pool = [abs(r.pool_error) for r in rows if r.pool_error is not None]
    full = [abs(r.full_error) for r in rows if r.full_error is not None]
    return {
        "cases": len(rows),
        "cell_exact": sum(r.cell_ok is True for r in rows),
        "cell_checked": sum(r.cell_ok is not None for r in rows),
        "pool_median_abs": statistics.median(pool) if pool else 0.0,
        "pool_worst_abs": max(pool) if pool else 0.0,
        "full_median_abs": statistics.median(full) if full else 0.0,
        "full_worst_abs": max(full) if full else 0.0,
    }
