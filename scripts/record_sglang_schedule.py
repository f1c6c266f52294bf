"""Record SGLang's own scheduler, on a CPU, over kvplan's scheduling scenarios.

Drives SGLang's real `Scheduler.get_next_batch_to_run` (and through it `get_new_batch_prefill`,
`PrefillAdder`, `SchedulePolicy`, `update_running_batch`, `ScheduleBatch.check_decode_mem` /
`retract_decode` and the new_token_ratio decay) over a real `TokenToKVPoolAllocator`,
`ReqToTokenPool` and `RadixCache` on the CPU (page 1, --schedule-policy fcfs, no mixed chunk,
max_prefill_tokens 16,384), with a fake model output: every request that finishes its prefill
or decodes samples one token; a request finishes after its output_len tokens (ignore_eos).
The Scheduler object is made without its __init__ (no model, no TP worker, no ZMQ), with the
attributes those methods read set here. The pool holds the scenario's usable blocks
(num_blocks - 1) x block_size tokens, as kvplan.simulate.steplog.sglang_step_log sizes it.
An idle pass of the event loop (no batch) takes no step time.

What had to be faked on a CPU: `sgl_kernel` (a CUDA extension imported by the MoE and
quantization layers that schedule_batch.py pulls in through ModelConfig; never called here),
torchvision where it is absent (the image transforms of multimodal configs ModelConfig imports),
and `attention_backend="torch_native"` so `write_cache_indices` takes its Python path, not the
Triton kernel. Needs, in a venv of its own (as .ci/run builds it): torch==2.13.0 (CPU),
`sglang==0.5.6.post2 --no-deps` and `-r scripts/sglang_scheduler_requirements.txt`.

    python scripts/record_sglang_schedule.py [SCENARIO.json ...] [--check] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

from step_fixtures import write_or_check

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "data" / "sched_scenarios"
FIXTURES = ROOT / "tests" / "data" / "sched_fixtures_sglang"
# the scenarios SGLang can express (not async scheduling, sliding windows or caching off)
SGLANG_SCENARIOS = (
    "steady",
    "burst",
    "pool_exhaustion",
    "long_prompt",
    "seat_limit",
    "budget_limit",
    "full_isl_admission",
    "full_isl_burst",
    "idle_gap",
    "max_model_len",
    "recompute_outputs",
    "random_resume_whole_blocks",
    "same_prompt",
    "shared_prefix",
    "shared_prefixes_tight",
)
# and the SGLang-only ones (tight pools where new_token_ratio, retraction and batch_is_full
# decide; random shared prefixes, where the radix cache decides)
SGLANG_ONLY = ROOT / "tests" / "data" / "sched_scenarios_sglang"
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
MAX_PREFILL_TOKENS = 16384
MAX_STEPS = 100_000
# token ids: a prefix's, a request's own prompt tokens, and its outputs (one id per request,
# so that no request's outputs match another's in the radix cache)
PREFIX_BASE, REQUEST_BASE, OUTPUT_BASE, VOCAB = 10**4, 10**6, 10**8, 10**9
# imported by the modules the scheduler pulls in, never called on this path: faked where absent
FAKED = ("sgl_kernel", "torchvision")


class _Anything:
    """Whatever a fake CUDA module is asked for: attributes, calls, iteration, a base class."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _FakeModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _FakeImports(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of packages the scheduler's modules import but never call, answered by fake
    modules: sgl_kernel (CUDA only) and torchvision (image transforms of the multimodal
    configs that model_config.py imports; PyPI's torchvision pins a torch of its own)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _FakeModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        import sglang

        return sglang.__version__


def prompt_ids(i: int, item: dict) -> list[int]:
    """Request i's prompt: its prefix's first prefix_len tokens (requests of one prefix_id
    share them), then tokens of its own (no prefix hits between requests beyond that)."""
    shared = item.get("prefix_len", 0) if item.get("prefix_id", -1) >= 0 else 0
    prefix = PREFIX_BASE * (item.get("prefix_id", -1) + 1)
    own = REQUEST_BASE * (i + 1)
    return list(range(prefix, prefix + shared)) + list(
        range(own + shared, own + item["prompt_len"])
    )


def record(sc: dict) -> list[dict]:
    """The step log of SGLang's scheduler over scenario `sc` (its JSON form)."""
    missing = tuple(name for name in FAKED if importlib.util.find_spec(name) is None)
    if missing and not any(isinstance(f, _FakeImports) for f in sys.meta_path):
        sys.meta_path.insert(0, _FakeImports(missing))
    from types import SimpleNamespace

    import torch
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import SchedulePolicy
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.common import release_kv_cache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    requests = []
    for item in sc["requests"]:
        requests += [item] * item.get("repeat", 1)
    pool_tokens = (sc["num_blocks"] - 1) * sc["block_size"]
    seats, chunk = sc["max_num_seqs"], sc["max_num_batched_tokens"]
    args = ServerArgs(
        model_path="none",
        device="cpu",
        attention_backend="torch_native",
        max_running_requests=seats,
        chunked_prefill_size=chunk,
    )
    args.pp_max_micro_batch_size = seats
    args.page_size = 1
    set_global_server_args_for_scheduler(args)
    req_pool = ReqToTokenPool(seats + 2, sc["max_model_len"] + 8, "cpu", False)
    allocator = TokenToKVPoolAllocator(pool_tokens, torch.float16, "cpu", None, False)
    cache = RadixCache(CacheInitParams(False, req_pool, allocator, 1))
    s = object.__new__(Scheduler)
    low = INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR
    s.__dict__.update(
        dllm_config=None,
        chunked_req=None,
        tree_cache=cache,
        req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=allocator,
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(mambaish_config=None)),
        last_batch=None,
        running_batch=ScheduleBatch(reqs=[], batch_is_full=False),
        require_mlp_sync=False,
        spec_algorithm=SpeculativeAlgorithm.from_string(None),
        grammar_queue=[],
        try_preemption=False,
        waiting_queue=[],
        pp_size=1,
        enable_hierarchical_cache=False,
        policy=SchedulePolicy("fcfs", cache, False, None, None),
        page_size=1,
        new_token_ratio=INIT_NEW_TOKEN_RATIO,
        min_new_token_ratio=low,
        new_token_ratio_decay=(INIT_NEW_TOKEN_RATIO - low) / NEW_TOKEN_RATIO_DECAY_STEPS,
        max_prefill_tokens=MAX_PREFILL_TOKENS,
        chunked_prefill_size=chunk,
        is_mixed_chunk=False,
        priority_scheduling_preemption_threshold=0,
        enable_lora=False,
        disaggregation_mode=DisaggregationMode.NULL,
        enable_hicache_storage=False,
        truncation_align_size=None,
        enable_metrics=False,
        model_config=SimpleNamespace(
            is_matryoshka=False,
            vocab_size=10**6,
            is_encoder_decoder=False,
            hf_eos_token_id=None,
            is_multimodal=False,
        ),
        enable_overlap=False,
        decode_mem_cache_buf_multiplier=1,
        forward_ct=0,
        # TpModelWorker: the longest request, prompt and outputs (init_req_max_new_tokens)
        max_req_len=min(sc["max_model_len"] - 1, pool_tokens - 1),
        server_args=args,
        current_scheduler_metrics_enabled=lambda: False,
        _add_request_to_queue=lambda req, is_retracted=False: s.waiting_queue.append(req),
    )
    pending = sorted(enumerate(requests), key=lambda x: (x[1]["arrival_step"], x[0]))
    log, step, idle = [], 0, False
    while step < MAX_STEPS:
        while pending and pending[0][1]["arrival_step"] <= step:
            i, item = pending.pop(0)
            params = SamplingParams(max_new_tokens=item["output_len"], ignore_eos=True)
            params.normalize(None)
            params.verify(VOCAB)
            req = Req(str(i), "", prompt_ids(i, item), params, vocab_size=VOCAB)
            if item["prompt_len"] >= s.max_req_len - 5:  # max_req_input_len: an error reply
                raise SystemExit(f"{sc['name']}: request {i}'s prompt is over SGLang's limit")
            s.init_req_max_new_tokens(req)  # as handle_generate_request does
            s.waiting_queue.append(req)
        before = {r.rid for r in s.running_batch.reqs}
        batch = s.get_next_batch_to_run()
        retracted = sorted((r.rid for r in s.waiting_queue if r.rid in before), key=int)
        if batch is not None:
            extend = batch.forward_mode.is_extend()
            tokens = batch.extend_lens if extend else [1] * len(batch.reqs)
            entry = {
                "step": step,
                "scheduled": {r.rid: int(n) for r, n in zip(batch.reqs, tokens, strict=True)},
                "preempted": retracted,
                "finished": [],
            }
            for r in batch.reqs:  # process_batch_result_prefill / _decode, one token each
                if r.finished() or r.is_retracted:
                    continue
                if extend and r.is_chunked > 0:
                    r.is_chunked -= 1
                    continue
                r.output_ids.append(OUTPUT_BASE + int(r.rid))
                r.check_finished()
                if r.finished():
                    release_kv_cache(r, cache)
                    entry["finished"].append(r.rid)
                elif extend:
                    cache.cache_unfinished_req(r)
            entry["finished"].sort(key=int)  # the batch's order is no part of the schedule
            entry["free_tokens"] = int(allocator.available_size())
            batch.output_ids = torch.tensor([OUTPUT_BASE + int(r.rid) for r in batch.reqs])
            s.last_batch = batch
            log.append(entry)
        elif not pending and not s.waiting_queue and s.chunked_req is None:
            return log
        elif not idle:  # an idle pass of the event loop takes no step time: try again now
            idle = True
            continue
        idle = False
        step += 1
    raise SystemExit(f"{sc['name']}: still running after {MAX_STEPS:,} steps")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help="scenario files (default: SGLang's)")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--out", type=Path, default=None, help="fixture folder")
    args = parser.parse_args(argv)
    version = sglang_version()
    paths = [Path(p).resolve() for p in args.scenarios] or [
        SCENARIOS / f"{name}.json" for name in SGLANG_SCENARIOS
    ] + sorted(SGLANG_ONLY.glob("*.json"))
    out_dir = (args.out or FIXTURES / version).resolve()
    failures = 0
    for path in paths:
        steps = record(json.loads(path.read_text()))
        fixture = {"scenario": path.stem, "sglang_version": version, "steps": steps}
        failures += not write_or_check(fixture, out_dir / path.name, args.check)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
