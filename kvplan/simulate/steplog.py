"""A schedule step by step: kvplan's engine on a small scenario with a fixed step time, and the
log of what each step scheduled (tokens per request, preemptions, finishes).

A scenario is data (tests/data/sched_scenarios/*.json): the pool (`num_blocks` as vLLM's
KVCacheConfig states it, the null block included), the scheduler's limits and the requests, each
with the step before which it arrives. `scripts/record_vllm_schedule.py` drives vLLM's own
scheduler through the same scenario; tests/test_sched_conformance.py compares the two logs step
for step. `scripts/step_log.py` prints this log for a scenario (the CLI twin of `step_log`).

A step of the log is {"step": k, "scheduled": {request id: tokens}, "preempted": [ids],
"finished": [ids]}: k counts steps that ran (with a unit step time, the step's start), request
ids are strings (vLLM's), a request is finished in the step that sampled its last token.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from pathlib import Path

from kvplan.engines.releases import VLLM_VERSION
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import engine_step_time
from kvplan.formulas.step_time import StepTime
from kvplan.record import NamedTuple
from kvplan.simulate.engine import DECODE, Engine, EngineConfig, Req, usable_blocks
from kvplan.simulate.setup import FULL_ISL_FROM, UNCACHED_FIRST_FROM, WINDOW_CAP_FROM
from kvplan.simulate.workload import RequestSpec

# vLLM versions whose recorded schedules kvplan's engine is checked against (not the allocator
# releases, engines.releases.VLLM_VERSIONS): 0.18 admits a request when its first chunk fits,
# 0.19 on when its whole prompt does (0.19.1 and 0.32.0 schedule every scenario identically)
SCHEDULE_VERSIONS = ("0.18", "0.19", "0.32")
MIN_STEP_S, MAX_STEP_S = 1e-6, 3600.0
MAX_REQUESTS = 10_000


class ScenarioRequest(NamedTuple):
    arrival_step: int
    prompt_len: int
    output_len: int
    prefix_id: int = -1  # requests of one prefix_id share their first prefix_len prompt tokens
    prefix_len: int = 0


class Scenario(NamedTuple):
    name: str
    num_blocks: int  # vLLM's KVCacheConfig.num_blocks (block 0 is its null block)
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    requests: tuple[ScenarioRequest, ...]
    enable_prefix_caching: bool = True
    async_scheduling: bool = False
    sliding_window: int = 0  # > 0: a sliding-window group of this window beside the full one
    description: str = ""


def _int(data: dict, key: str, low: int, high: int, default=None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise KvplanError(f"scenario field {key!r} must be an integer from {low:,} to {high:,}")
    return value


def scenario_from_dict(data: dict) -> Scenario:
    """A scenario from its JSON form, every field range-checked."""
    if not isinstance(data, dict):
        raise KvplanError("a scenario is a JSON object")
    raw = data.get("requests")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_REQUESTS:
        raise KvplanError(f"scenario 'requests' must be a list of 1 to {MAX_REQUESTS:,} requests")
    max_model_len = _int(data, "max_model_len", 2, 1 << 20)
    requests = []
    for item in raw:
        if not isinstance(item, dict):
            raise KvplanError("each scenario request is a JSON object")
        repeat = _int(item, "repeat", 1, MAX_REQUESTS, 1)
        prefix_id = _int(item, "prefix_id", -1, 1 << 20, -1)
        prompt_len = _int(item, "prompt_len", 1, max_model_len - 1)
        request = ScenarioRequest(
            arrival_step=_int(item, "arrival_step", 0, 1 << 30, 0),
            prompt_len=prompt_len,
            output_len=_int(item, "output_len", 1, 1 << 20),
            prefix_id=prefix_id,
            prefix_len=_int(item, "prefix_len", 0, prompt_len, 0) if prefix_id >= 0 else 0,
        )
        requests.extend([request] * repeat)
    if len(requests) > MAX_REQUESTS:
        raise KvplanError(f"a scenario holds at most {MAX_REQUESTS:,} requests")
    flags = {}
    for key in ("enable_prefix_caching", "async_scheduling"):
        value = data.get(key, Scenario._field_defaults[key])
        if not isinstance(value, bool):
            raise KvplanError(f"scenario field {key!r} must be true or false")
        flags[key] = value
    max_num_seqs = _int(data, "max_num_seqs", 1, 1 << 16)
    return Scenario(
        name=str(data.get("name", "scenario"))[:100],
        num_blocks=_int(data, "num_blocks", 2, 1 << 24),
        block_size=_int(data, "block_size", 1, 4096),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=_int(data, "max_num_batched_tokens", max_num_seqs, 1 << 24),
        max_model_len=max_model_len,
        requests=tuple(requests),
        sliding_window=_int(data, "sliding_window", 0, 1 << 20, 0),
        description=str(data.get("description", ""))[:2000],
        **flags,
    )


def load_scenario(path: str | Path) -> Scenario:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise KvplanError(f"cannot read scenario {str(path)[:200]}: {error}") from None
    return scenario_from_dict(data)


def vllm_version_tuple(version: str) -> tuple[int, int]:
    """'0.19' or '0.19.1' -> (0, 19), checked against the versions kvplan follows."""
    from kvplan.engines.releases import release_minor

    minor = release_minor(version)
    if minor is None or f"{minor[0]}.{minor[1]}" not in SCHEDULE_VERSIONS:
        raise KvplanError(
            f"vLLM version {str(version)[:20]!r}: kvplan follows {', '.join(SCHEDULE_VERSIONS)}"
        )
    return minor


def engine_config(scenario: Scenario, vllm_version: str = VLLM_VERSION) -> EngineConfig:
    """The scenario's pool and limits as kvplan's engine takes them, with the scheduling
    rules of `vllm_version`."""
    windows = ((scenario.sliding_window, 1),) if scenario.sliding_window else ()
    minor = vllm_version_tuple(vllm_version)
    return EngineConfig(
        max_num_seqs=scenario.max_num_seqs,
        max_num_batched_tokens=scenario.max_num_batched_tokens,
        max_model_len=scenario.max_model_len,
        num_blocks=usable_blocks(scenario.num_blocks, 1),
        block_size=scenario.block_size,
        window_groups=windows,
        main_groups=1,
        enable_prefix_caching=scenario.enable_prefix_caching,
        async_scheduling=scenario.async_scheduling,
        reserve_full_isl=minor >= FULL_ISL_FROM,
        free_uncached_first=minor >= UNCACHED_FIRST_FROM,
        window_admission_cap=minor >= WINDOW_CAP_FROM,
        window_processed_drops=minor >= WINDOW_CAP_FROM,
    )


class FixedStep:
    """A step model whose every step takes `step_s` (the StepModel calls the engine makes)."""

    def __init__(self, step_s: float):
        self.step_s = step_s

    def _time(self, steps: int) -> StepTime:
        return engine_step_time(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.step_s * steps)

    def step(self, shape) -> StepTime:
        return self._time(1)

    def decode_span_s(self, num_decodes: int, context_sums):
        import numpy as np

        return np.full(len(context_sums), self.step_s), self._time


def parse_step_time(text: str) -> float:
    """'1ms', '250us', '0.5s' -> seconds, from 1 µs to 1 h."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(s|ms|us|µs)\s*", str(text).lower())
    if not match:
        raise KvplanError(f"--fixed-step-time {str(text)[:40]!r}: give a time with a unit (1ms)")
    seconds = float(match.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[match[2]]
    if not MIN_STEP_S <= seconds <= MAX_STEP_S:
        raise KvplanError(f"--fixed-step-time {text!r}: must be from 1 us to 1 h")
    return seconds


def format_log(log: list[dict], step_s: float = 1.0) -> str:
    """One line a step: its index and start, then request:tokens, preemptions, finishes."""
    lines = []
    for entry in log:
        tokens = " ".join(f"{rid}:{n}" for rid, n in entry["scheduled"].items())
        line = f"step {entry['step']:>6}  t={entry['step'] * step_s:.6g}s  {tokens}"
        if entry["preempted"]:
            line += "  preempted " + ",".join(entry["preempted"])
        if entry["finished"]:
            line += "  finished " + ",".join(entry["finished"])
        lines.append(line)
    return "\n".join(lines) + "\n"


def request_specs(scenario: Scenario, step_s: float = 1.0) -> list[RequestSpec]:
    return [
        RequestSpec(
            rid, r.arrival_step * step_s, r.prompt_len, r.output_len, r.prefix_id, r.prefix_len
        )
        for rid, r in enumerate(scenario.requests)
    ]


def step_log(
    scenario: Scenario, step_s: float = 1.0, vllm_version: str = VLLM_VERSION
) -> list[dict]:
    """Run `scenario` on kvplan's engine with `vllm_version`'s scheduling rules, every step
    taking `step_s`; the log of its steps."""
    return _run_log(scenario, step_s, engine_config(scenario, vllm_version), Engine)


def sglang_step_log(scenario: Scenario, step_s: float = 1.0) -> list[dict]:
    """Run `scenario` on kvplan's SGLang engine (SglangEngine, default policy, page 1), its
    pool the tokens of the scenario's usable blocks (scripts/record_sglang_schedule.py sizes
    SGLang's TokenToKVPoolAllocator the same); the log of its steps."""
    from kvplan.simulate.sglang import SglangEngine

    if scenario.sliding_window or scenario.async_scheduling or not scenario.enable_prefix_caching:
        raise KvplanError(f"scenario {scenario.name!r} uses vLLM-only features")
    config = engine_config(scenario)._replace(
        num_blocks=usable_blocks(scenario.num_blocks, 1) * scenario.block_size, block_size=1
    )
    return _run_log(scenario, step_s, config, SglangEngine)


def _run_log(scenario: Scenario, step_s: float, config: EngineConfig, engine_cls) -> list[dict]:
    if not MIN_STEP_S <= step_s <= MAX_STEP_S:
        raise KvplanError(f"the fixed step time must be from 1 µs to 1 h, not {step_s:g} s")
    recorder = StepRecorder(lambda engine: round(engine.clock_s / step_s))
    log = recorder.steps
    engine = engine_cls(config, FixedStep(step_s), 0.0, observer=recorder)
    engine.busy_loop = False  # the recorder adds each request to the scheduler before its step
    pending = deque(sorted(request_specs(scenario, step_s), key=lambda s: (s.arrival_s, s.rid)))
    while pending or engine.has_work:
        next_arrival = pending[0].arrival_s if pending else math.inf
        if engine.has_work and engine.clock_s < next_arrival - step_s / 2:
            done = engine.step(next_arrival - step_s / 2)
            if done and log:
                log[-1]["finished"] = sorted((str(r.rid) for r in done), key=int)
        else:
            spec = pending.popleft()
            limit = engine.output_limit(spec.input_tokens, scenario.max_model_len)
            if limit <= 0:
                raise KvplanError(f"request {spec.rid}'s prompt is over the engine's limit")
            target = min(spec.output_tokens, limit)
            engine.admit(Req(spec, spec.arrival_s, spec.arrival_s, target), spec.arrival_s)
    return log


class StepRecorder:
    """An engine observer that logs every step it runs: {"step", "scheduled", "preempted",
    "finished"} (the module's format). `index(engine)` numbers the step starting now (the
    clock over a fixed step time, or `engine.step_index`); finishes are added by the caller,
    who sees what `Engine.step` returns (`finished`)."""

    def __init__(self, index=None):
        self.index = index or (lambda engine: engine.step_index)
        self.reset()

    def reset(self) -> None:
        """Start again (for a new engine)."""
        self.steps: list[dict] = []
        self._seen: dict[int, int] = {}  # request -> its preemptions already logged
        self._preemptions = 0  # the engine's, already logged

    def __call__(self, engine, steps, num_decodes, chunks) -> None:
        first = self.index(engine)
        decoding = {}  # a step that decodes nothing (SGLang's prefill batch) logs none
        if num_decodes:
            decoding = {str(r.rid): 1 for r in engine.running if r.state == DECODE}
        preempted = []
        if engine.preemptions != self._preemptions:  # the victims wait to be scheduled again
            self._preemptions = engine.preemptions
            for r in (*engine.waiting, *engine.running):
                if r.preemptions != self._seen.get(r.rid, 0):
                    self._seen[r.rid] = r.preemptions
                    preempted.append(str(r.rid))
        for i in range(steps):
            scheduled = dict(decoding)
            if i == 0:
                scheduled.update((str(r.rid), n) for r, n in chunks)
            self.steps.append(
                {
                    "step": first + i,
                    "scheduled": dict(sorted(scheduled.items(), key=_by_id)),
                    "preempted": sorted(preempted, key=int) if i == 0 else [],
                    "finished": [],
                }
            )


def _by_id(item) -> int:
    return int(item[0])


def compare(expected: list[dict], actual: list[dict], keys=("scheduled", "preempted", "finished")):
    """The first step at which two logs differ, as text; None when they are identical."""
    for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
        for key in ("step", *keys):
            if want.get(key) != got.get(key):
                return (
                    f"entry {index} (vLLM step {want.get('step')}): {key} differs:\n"
                    f"  vLLM   {want.get(key)}\n  kvplan {got.get(key)}"
                )
    if len(expected) != len(actual):
        return f"vLLM ran {len(expected)} steps, kvplan {len(actual)}"
    return None
