"""Real vLLM 0.19 start-up logs (tests/data/vllm_0.19_h100/logs.json) and kvplan's prediction of
each: the settings come from the log's own "non-default args" line, the logged figures from its
profile lines. Shared by tests/test_vllm_logs.py and scripts/vllm_log_accuracy.py."""

from __future__ import annotations

import ast
import json
import re
import statistics
from functools import cache
from pathlib import Path
from typing import NamedTuple

from kvplan.engines import EngineRequest, engine_allocation
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.units import GIB

DATA = Path(__file__).parent / "data" / "vllm_0.19_h100"

_ARGS = re.compile(r"non-default args: (\{.*\})")
_LOADED = re.compile(r"Model loading took ([\d.]+) GiB")
_PROFILE = re.compile(
    r"^\((\w+) pid=\d+\).*Total non KV cache memory: ([\d.]+)GiB; torch peak memory increase: "
    r"([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB; weights memory: ([\d.]+)GiB"
)
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")
_GRAPHS = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total")


class Profile(NamedTuple):
    """One worker's DEBUG profile line (GiB, as printed)."""

    worker: str
    non_kv: float
    torch_peak: float
    non_torch: float
    weights: float


class LogCase(NamedTuple):
    url: str
    model: str
    args: dict
    config: str | None
    weights_dtype: str
    not_covered: str | None
    profiles: tuple[Profile, ...]  # rank 0 first
    available_gib: float
    tokens: int | None
    concurrency: float | None
    graphs_gib: float | None

    @property
    def tp(self) -> int:
        return int(self.args.get("tensor_parallel_size", 1))

    @property
    def pp(self) -> int:
        return int(self.args.get("pipeline_parallel_size", 1))

    @property
    def label(self) -> str:
        extras = [f"TP{self.tp}"] + ([f"PP{self.pp}"] if self.pp > 1 else [])
        for key in ("dtype", "quantization", "kv_cache_dtype"):
            if key in self.args:
                extras.append(f"{key}={self.args[key]}")
        if self.args.get("max_model_len", 8192) != 8192:
            extras.append(f"len {self.args['max_model_len']}")
        if self.args.get("gpu_memory_utilization", 0.9) != 0.95:
            extras.append(f"util {self.args.get('gpu_memory_utilization', 0.9)}")
        return f"{self.model.split('/')[-1]} " + " ".join(extras)


def _first(pattern: re.Pattern, lines: list[str]):
    for line in lines:
        m = pattern.search(line)
        if m:
            return m.group(1)
    return None


def _is_rank0(worker: str) -> bool:
    """The worker that prints the INFO lines: EngineCore (one GPU) or Worker_TP0 / Worker_PP0."""
    return worker == "EngineCore" or (worker.startswith("Worker_") and worker.endswith("0"))


@cache
def cases() -> tuple[LogCase, ...]:
    data = json.loads((DATA / "logs.json").read_text(encoding="utf-8"))
    out = []
    for entry in data["cases"]:
        lines = entry["lines"]
        args = ast.literal_eval(_first(_ARGS, lines))
        profiles = []
        for line in lines:
            m = _PROFILE.search(line)
            if m:
                worker = m.group(1)
                profiles.append(Profile(worker, *(float(v) for v in m.groups()[1:])))
        profiles.sort(key=lambda p: not _is_rank0(p.worker))
        tokens = _first(_TOKENS, lines)
        concurrency = _first(_CONCURRENCY, lines)
        graphs = _first(_GRAPHS, lines)
        out.append(
            LogCase(
                url=entry["url"],
                model=args["model"],
                args=args,
                config=entry.get("config"),
                weights_dtype=entry.get("weights_dtype", "auto"),
                not_covered=entry.get("not_covered"),
                profiles=tuple(profiles),
                available_gib=float(_first(_AVAILABLE, lines)),
                tokens=int(tokens.replace(",", "")) if tokens else None,
                concurrency=float(concurrency) if concurrency else None,
                graphs_gib=float(graphs) if graphs else None,
            )
        )
    return tuple(out)


def covered() -> list[LogCase]:
    return [c for c in cases() if c.config is not None]


def load_case_model(case: LogCase):
    if case.config.startswith("bundled:"):
        return load_model(case.config.removeprefix("bundled:"))
    return load_model(str(DATA / case.config))


def request_for(case: LogCase, **overrides) -> EngineRequest:
    args = case.args
    fields = dict(
        engine="vllm",
        max_model_len=int(args.get("max_model_len", 8192)),
        kv_cache_dtype=args.get("kv_cache_dtype", "auto"),
        tp=case.tp,
        pp=case.pp,
        gpu_mem_util=float(args.get("gpu_memory_utilization", 0.9)),
        dtype=args.get("dtype", "auto"),
        quantization=args.get("quantization"),
        weights_dtype=case.weights_dtype,
    )
    fields.update(overrides)
    return EngineRequest(**fields)


def predict(case: LogCase, **overrides):
    """kvplan's vLLM result for the run in `case` (H100 SXM)."""
    return engine_allocation(
        load_case_model(case), load_profile("h100"), request_for(case, **overrides)
    )


class Row(NamedTuple):
    case: LogCase
    available_error_gib: float  # predicted - logged, rank 0
    weights_error_gib: float
    peak_error_gib: float
    non_torch_error_gib: float
    tokens_ratio: float | None  # predicted / logged GPU KV cache size


def evaluate(case: LogCase) -> Row:
    result = predict(case)
    stage = result.memory[0]
    logged = case.profiles[0]
    tokens_ratio = None
    if case.tokens and result.kv_cache_tokens:
        tokens_ratio = result.kv_cache_tokens / case.tokens
    return Row(
        case,
        result.available_kv_bytes / GIB - case.available_gib,
        stage.weights.total_bytes / GIB - logged.weights,
        stage.peak.total_bytes / GIB - logged.torch_peak,
        stage.non_torch_bytes / GIB - logged.non_torch,
        tokens_ratio,
    )


def summary(rows: list[Row]) -> dict:
    errors = [abs(r.available_error_gib) for r in rows]
    return {
        "cases": len(rows),
        "median_abs_gib": statistics.median(errors) if errors else 0.0,
        "worst_abs_gib": max(errors) if errors else 0.0,
        "within_0.25": sum(e <= 0.25 for e in errors),
        "within_1": sum(e <= 1.0 for e in errors),
    }
