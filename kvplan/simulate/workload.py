"""What the clients send: requests with arrival times, input and output lengths, and the token ids
the prefix cache compares.

Arrivals follow `vllm bench serve`: every request at t = 0 for rate `inf`, else gamma-distributed
gaps with shape `burstiness` and mean 1/rate (burstiness 1 is a Poisson process). Lengths are fixed,
uniform in [L(1 - r), L(1 + r)] (the bench's random dataset), lognormal with a given spread, or
`sharegpt`: a lognormal stand-in for the ShareGPT conversations the bench samples (spread σ = 1,
filtered as the bench filters: input and output >= 4, input <= 1024, input + output <= 2048), scaled
so the kept requests have the requested means. A trace file gives every request explicitly.

The bench clients' own random datasets, drawn as the clients draw them (seeded the same way):

- `vllm-random` (`vllm bench serve --dataset-name random`; vllm/benchmarks/datasets.py
  RandomDataset.get_sampling_params): numpy default_rng(seed), inputs then outputs, each
  integers(low, high + 1) with low = floor(L(1 - r)), high = ceil(L(1 + r)), r in [0, 1); the
  output bounds at least 1. vLLM first subtracts the tokenizer's special tokens from the input
  length (Llama: 1 BOS) and the server adds them back; kvplan draws from L itself (no tokenizer).
- `sglang-random` (`python -m sglang.bench_serving --dataset-name random`; 0.5's
  benchmark/datasets/common.py compute_random_lens): np.random.seed(seed) then np.random.randint(
  max(int(L r), 1), L + 1) for the inputs, then the outputs, r in [0, 1]: r = 0 (the default) is
  U[1, L], r = 1 is fixed at L. (0.4's bench_serving.sample_random_requests drew outputs from
  [int(O r), O], 0 included.)

Token ids are synthetic but exact about sharing: a request's own tokens are unique to it; tokens
drawn from a shared stream (a system prompt, a document, a conversation) are identical across the
requests that name the stream, so prefix-cache hits come from the block manager comparing them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

LENGTH_DISTS = ("fixed", "uniform", "lognormal", "sharegpt", "vllm-random", "sglang-random")
# the bench clients' random datasets: their --seed defaults (vllm bench serve 0,
# sglang.bench_serving 1) and --random-range-ratio defaults (0.0 in both)
BENCH_RANDOM = {"vllm": "vllm-random", "sglang": "sglang-random"}
BENCH_DEFAULT_SEED = {"vllm-random": 0, "sglang-random": 1}
SHAREGPT_SIGMA = 1.0  # spread of the ShareGPT stand-in (log-space standard deviation)
SHAREGPT_MAX_INPUT = 1024  # the bench's ShareGPT filter (is_valid_sequence)
SHAREGPT_MAX_TOTAL = 2048
SHAREGPT_MIN_LEN = 4
MAX_REQUESTS = 100_000  # about 30 s of simulation on one core
# The work of one command, over its runs (each --request-rate, and --compare's second set): the
# requests simulated, and the prompt tokens the prefix cache is searched through (a shared prefix,
# a conversation's whole history): 98 M tokens (48,000 prompts x a 2k prefix) took 364 s on a
# shared core, 60 M 82 s. 100,000 prompts x 1,000 turns of 1,152 tokens is 58 G tokens (hours,
# GBs); the caps hold a command to about 3 minutes.
MAX_RUN_REQUESTS = 500_000
MAX_SHARED_TOKENS = 50_000_000
# And the output tokens decoded over the runs: where requests come and go every few steps no
# decode span is long, each step costs ~0.1 ms, and 4 M outputs (250 prompts x 16k, uniform,
# 50/s, ~24 running) took 16 s; 5,000 such prompts ran past 300 s. The cap leaves plan's 240
# default configurations x 2,000 prompts of 128 (61 M) to run, and bounds churning runs to ~7
# minutes (steady batches decode in spans, far faster).
MAX_OUTPUT_TOKENS = 100_000_000
# And the prefill chunks: a step prefills at most the chunk budget (--max-num-batched-tokens,
# SGLang's --chunked-prefill-size), so the prompts' own tokens / the budget is the fewest steps a
# run can take. A step of one chunk cost ~22 us of a core with the interval's reruns (300,000
# one-token chunks of one prompt: 6.6 s; 1.2 M: 25 s), so 8 M steps hold a command to about
# 3 minutes; a one-token budget made 100,000 prompts of 1,024 tokens 1e8 steps (hours).
MAX_PREFILL_STEPS = 8_000_000
MIN_RATE = 1e-3  # requests per second: one every ~17 minutes
MAX_LEN = 1 << 24  # tokens in one request
# A trace file: MAX_REQUESTS lines of all six fields are ~13 MB; 64 MiB leaves room for long ids
# and blank lines, and is read (and refused past the cap) in well under a second.
MAX_TRACE_BYTES = 64 * 2**20
_STRIDE = 1 << 32  # token-id space of one request or one stream
_OWN, _OUTPUT, _STREAM = 1 << 60, 2 << 60, 3 << 60


class RequestSpec(NamedTuple):
    """One request as a client sends it."""

    rid: int
    arrival_s: float  # when the client wants to send it (before a concurrency limit)
    input_tokens: int
    output_tokens: int
    stream_id: int = -1  # shared token stream (-1: none)
    stream_tokens: int = 0  # leading input tokens taken from the stream
    session: bool = False  # a conversation turn: outputs continue the stream too


class WorkloadSpec(NamedTuple):
    num_prompts: int = 1000
    request_rate: float = math.inf  # requests per second
    burstiness: float = 1.0
    input_len: int = 1024
    output_len: int = 128
    length_dist: str = "fixed"
    spread: float = 0.0  # uniform: range ratio r; lognormal: sigma
    prefix_len: int = 0  # a shared prefix of this many tokens starts every prompt
    num_prefixes: int = 1  # distinct shared prefixes, assigned round robin
    turns: int = 1  # conversation turns: each turn's prompt is the whole conversation so far
    seed: int | None = None  # None: the bench client's default for the law (workload_seed)


def workload_seed(spec: WorkloadSpec) -> int:
    """The seed a workload's requests are drawn with: the one given, else the bench client's
    default for its length law (BENCH_DEFAULT_SEED: sglang.bench_serving seeds 1, else 0), so
    the CLI, plan and the Python twin draw the same requests for the same workload."""
    return BENCH_DEFAULT_SEED.get(spec.length_dist, 0) if spec.seed is None else spec.seed


def prompt_token_ids(req: RequestSpec) -> list[int]:
    """The request's input token ids: the stream's first `stream_tokens`, then its own."""
    shared = min(req.stream_tokens, req.input_tokens) if req.stream_id >= 0 else 0
    base = _STREAM + req.stream_id * _STRIDE
    own = _OWN + req.rid * _STRIDE
    return list(range(base, base + shared)) + list(range(own + shared, own + req.input_tokens))


def output_token_ids(req: RequestSpec, start: int, end: int) -> list[int]:
    """Output tokens [start, end) (0 = the first generated token). A conversation's outputs
    continue its stream (the next turn's prompt holds them); any other request's outputs are
    one id of its own, repeated: no other request can share them, and the prefix cache keys a
    block by everything before it, so their values never matter."""
    if req.session and req.stream_id >= 0:
        base = _STREAM + req.stream_id * _STRIDE + req.input_tokens
        return list(range(base + start, base + end))
    return [_OUTPUT + req.rid] * (end - start)


def arrival_times_s(num: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """`vllm bench serve`'s schedule: all at 0 for rate inf, else cumulative gamma gaps."""
    if math.isinf(rate):
        return [0.0] * num
    import numpy as np

    rng = np.random.default_rng(seed)
    if math.isinf(burstiness):
        gaps = np.full(num, 1.0 / rate)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=num)
    times = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    return [float(t) for t in times]


def _lengths(spec: WorkloadSpec, rng) -> tuple[list[int], list[int]]:
    import numpy as np

    n = spec.num_prompts
    if spec.length_dist == "fixed":
        return [spec.input_len] * n, [spec.output_len] * n
    if spec.length_dist in ("vllm-random", "sglang-random"):
        return bench_random_lengths(
            spec.length_dist, spec.input_len, spec.output_len, spec.spread, n, workload_seed(spec)
        )
    if spec.length_dist == "uniform":
        r = spec.spread
        lo_in, hi_in = math.floor(spec.input_len * (1 - r)), math.ceil(spec.input_len * (1 + r))
        lo_out = max(1, math.floor(spec.output_len * (1 - r)))
        hi_out = math.ceil(spec.output_len * (1 + r))
        inputs = rng.integers(max(1, lo_in), hi_in + 1, size=n)
        outputs = rng.integers(lo_out, hi_out + 1, size=n)
        return [int(x) for x in inputs], [int(x) for x in outputs]
    sigma = SHAREGPT_SIGMA if spec.length_dist == "sharegpt" else spec.spread
    pool = 4 * n + 64
    z_in, z_out = rng.standard_normal(pool), rng.standard_normal(pool)
    if spec.length_dist == "lognormal":
        mu_in = math.log(spec.input_len) - sigma * sigma / 2
        mu_out = math.log(spec.output_len) - sigma * sigma / 2
        inputs = np.maximum(1, np.rint(np.exp(mu_in + sigma * z_in[:n])))
        outputs = np.maximum(1, np.rint(np.exp(mu_out + sigma * z_out[:n])))
        return [int(x) for x in inputs], [int(x) for x in outputs]
    return _sharegpt_like(spec, sigma, z_in, z_out)


def random_length_bounds(law: str, length: int, ratio: float, output: bool) -> tuple[int, int]:
    """[low, high] (both included) a bench client's random dataset draws a length from."""
    if law == "sglang-random":
        return max(int(length * ratio), 1), length
    low, high = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    return (max(low, 1), max(high, 1)) if output else (low, high)


def bench_random_lengths(
    law: str, input_len: int, output_len: int, ratio: float, num: int, seed: int
) -> tuple[list[int], list[int]]:
    """The inputs and outputs a bench client's random dataset draws for `num` prompts with its
    --seed: the same generator, seeded as the client seeds it, the inputs drawn first."""
    import numpy as np

    lo_in, hi_in = random_length_bounds(law, input_len, ratio, output=False)
    lo_out, hi_out = random_length_bounds(law, output_len, ratio, output=True)
    if law == "sglang-random":  # the client seeds numpy's global generator: a RandomState
        rng = np.random.RandomState(seed)
        inputs = rng.randint(lo_in, hi_in + 1, size=num)
        outputs = rng.randint(lo_out, hi_out + 1, size=num)
    else:
        generator = np.random.default_rng(seed)
        inputs = generator.integers(lo_in, hi_in + 1, size=num)
        outputs = generator.integers(lo_out, hi_out + 1, size=num)
    return [int(x) for x in inputs], [int(x) for x in outputs]


def _sharegpt_like(spec: WorkloadSpec, sigma: float, z_in, z_out) -> tuple[list[int], list[int]]:
    """Lognormal pairs kept by the bench's ShareGPT filter, with log-means solved (bisection) so
    the first `num_prompts` kept pairs have the requested mean input and output lengths."""
    import numpy as np

    n = spec.num_prompts
    if spec.input_len >= SHAREGPT_MAX_INPUT or spec.input_len + spec.output_len >= (
        SHAREGPT_MAX_TOTAL
    ):
        raise KvplanError(
            "sharegpt lengths are capped (input <= 1024, input + output <= 2048): choose smaller "
            "means or --length-dist lognormal"
        )

    def draw(mu_in: float, mu_out: float):
        inputs = np.rint(np.exp(mu_in + sigma * z_in))
        outputs = np.rint(np.exp(mu_out + sigma * z_out))
        keep = (
            (inputs >= SHAREGPT_MIN_LEN)
            & (outputs >= SHAREGPT_MIN_LEN)
            & (inputs <= SHAREGPT_MAX_INPUT)
            & (inputs + outputs <= SHAREGPT_MAX_TOTAL)
        )
        return inputs[keep][:n], outputs[keep][:n]

    if spec.input_len > SHAREGPT_MAX_INPUT or spec.input_len + spec.output_len > SHAREGPT_MAX_TOTAL:
        raise KvplanError(
            f"sharegpt lengths: the bench keeps inputs up to {SHAREGPT_MAX_INPUT:,} tokens and "
            f"requests up to {SHAREGPT_MAX_TOTAL:,} in all, so mean lengths of "
            f"{spec.input_len:,} in / {spec.output_len:,} out cannot be drawn; use lognormal"
        )

    def mean(values) -> float:  # an empty draw: as far from any target as can be
        return float(values.mean()) if len(values) else math.inf

    mu_in, mu_out = math.log(spec.input_len), math.log(spec.output_len)
    for _ in range(2):  # the filter couples the two: alternate the two bisections
        mu_in = _bisect(lambda m, o=mu_out: mean(draw(m, o)[0]) - spec.input_len, mu_in)
        mu_out = _bisect(lambda m, i=mu_in: mean(draw(i, m)[1]) - spec.output_len, mu_out)
    inputs, outputs = draw(mu_in, mu_out)
    if len(inputs) < n:
        raise KvplanError("could not draw enough sharegpt-like requests; use lognormal lengths")
    return [int(x) for x in inputs], [int(x) for x in outputs]


def _bisect(error, guess: float) -> float:
    lo, hi = guess - 4.0, guess + 4.0
    for _ in range(30):  # 8 / 2**30: far below one token
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if error(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def generate(spec: WorkloadSpec) -> list[RequestSpec]:
    """Requests from a workload description (seeded: the same spec gives the same requests)."""
    import numpy as np

    check_workload(spec)
    seed = workload_seed(spec)
    rng = np.random.default_rng(seed)
    inputs, outputs = _lengths(spec, rng)
    arrivals = arrival_times_s(spec.num_prompts, spec.request_rate, spec.burstiness, seed + 1)
    if spec.turns > 1:
        return _conversations(spec, inputs, outputs, arrivals)
    requests = []
    for i in range(spec.num_prompts):
        prefix = spec.prefix_len
        requests.append(
            RequestSpec(
                rid=i,
                arrival_s=arrivals[i],
                input_tokens=inputs[i] + prefix,
                output_tokens=outputs[i],
                stream_id=i % spec.num_prefixes if prefix else -1,
                stream_tokens=prefix,
            )
        )
    return requests


def _conversations(spec, inputs, outputs, arrivals) -> list[RequestSpec]:
    """Conversations of `turns` turns: turn t's prompt is the system prefix, every earlier
    turn's input and output, and its own new input; request i belongs to conversation
    i // turns."""
    requests = []
    history: dict[int, int] = {}
    for i in range(spec.num_prompts):
        conv = i // spec.turns
        before = history.get(conv, spec.prefix_len)
        total = before + inputs[i]
        requests.append(
            RequestSpec(
                rid=i,
                arrival_s=arrivals[i],
                input_tokens=total,
                output_tokens=outputs[i],
                stream_id=conv,
                stream_tokens=total,
                session=True,
            )
        )
        history[conv] = total + outputs[i]
    return requests


def check_workload(spec: WorkloadSpec) -> None:
    if not 1 <= spec.num_prompts <= MAX_REQUESTS:
        raise KvplanError(f"--num-prompts must be between 1 and {MAX_REQUESTS:,}")
    if not (math.isinf(spec.request_rate) or MIN_RATE <= spec.request_rate <= 1e6):
        raise KvplanError(
            f"--request-rate must be inf or between {MIN_RATE:g} and 1,000,000 per second"
        )
    if not (spec.burstiness == math.inf or 0.01 <= spec.burstiness <= 100):
        raise KvplanError("--burstiness must be between 0.01 and 100 (or inf)")
    for what, value in (("--input-len", spec.input_len), ("--output-len", spec.output_len)):
        if not 1 <= value <= MAX_LEN:
            raise KvplanError(f"{what} must be between 1 and {MAX_LEN:,} tokens")
    if spec.length_dist not in LENGTH_DISTS:
        raise KvplanError(f"--length-dist {spec.length_dist!r}: choose {', '.join(LENGTH_DISTS)}")
    if spec.length_dist == "vllm-random" and not 0 <= spec.spread < 1:
        raise KvplanError("--random-range-ratio for vLLM's random dataset must be in [0, 1)")
    if spec.length_dist == "sglang-random" and not 0 <= spec.spread <= 1:
        raise KvplanError("--random-range-ratio for SGLang's random dataset must be in [0, 1]")
    if (
        spec.length_dist == "vllm-random"
        and spec.prefix_len + math.floor(spec.input_len * (1 - spec.spread)) < 1
    ):  # vLLM's RandomDataset.sample refuses this too
        raise KvplanError(
            "--random-input-len is too small: vLLM's random dataset could draw an empty prompt "
            "at this --random-range-ratio"
        )
    if spec.length_dist in ("fixed", "sharegpt") and spec.spread:
        raise KvplanError(
            f"--spread shapes uniform and lognormal lengths; {spec.length_dist} lengths take none"
        )
    if spec.length_dist == "uniform" and not 0 <= spec.spread < 1:
        raise KvplanError("--spread for uniform lengths is a range ratio in [0, 1)")
    if spec.length_dist == "lognormal" and not 0 < spec.spread <= 3:
        raise KvplanError("--spread for lognormal lengths is a sigma in (0, 3]")
    if not 0 <= spec.prefix_len <= MAX_LEN:
        raise KvplanError(f"--prefix-len must be between 0 and {MAX_LEN:,} tokens")
    if not 1 <= spec.num_prefixes <= MAX_REQUESTS:
        raise KvplanError("--num-prefixes must be at least 1")
    if not 1 <= spec.turns <= 1000:
        raise KvplanError("--turns must be between 1 and 1000")


def shared_prompt_tokens(requests: list[RequestSpec]) -> int:
    """Prompt tokens the prefix cache is searched through: each request's shared prefix, or a
    conversation turn's whole prompt (its history and its new input)."""
    return sum(
        (r.input_tokens if r.session else min(r.stream_tokens, r.input_tokens))
        for r in requests
        if r.stream_id >= 0
    )


def check_work(
    requests: list[RequestSpec], runs: int, what: str = "run(s) (rates, --compare)"
) -> None:
    """The caps on one command's work (MAX_RUN_REQUESTS, MAX_OUTPUT_TOKENS, MAX_SHARED_TOKENS):
    `runs` runs of
    these requests (`what` names them: the rates, plan's configurations); a one-line error
    naming the cap before any run starts."""
    total = len(requests) * runs
    if total > MAX_RUN_REQUESTS:
        raise KvplanError(
            f"{len(requests):,} requests x {runs:,} {what} is {total:,} requests; kvplan "
            f"simulates at most {MAX_RUN_REQUESTS:,} per command"
        )
    outputs = sum(r.output_tokens for r in requests) * runs
    if outputs > MAX_OUTPUT_TOKENS:
        raise KvplanError(
            f"the requests ask for {outputs:,} output tokens over {runs:,} {what}; kvplan "
            f"simulates at most {MAX_OUTPUT_TOKENS:,} per command (fewer --num-prompts, "
            "--output-len or runs)"
        )
    shared = shared_prompt_tokens(requests) * runs
    if shared > MAX_SHARED_TOKENS:
        raise KvplanError(
            f"the prompts hold {shared:,} tokens of shared prefixes or conversation history over "
            f"{runs:,} {what}; kvplan searches at most {MAX_SHARED_TOKENS:,} through its prefix "
            "cache per command (fewer --num-prompts, --turns, --prefix-len or runs)"
        )


def check_prefill_steps(
    requests: list[RequestSpec], chunk_tokens: list[int], what: str = "run(s) (rates, --compare)"
) -> None:
    """The cap on one command's prefill steps (MAX_PREFILL_STEPS): a run of these requests at
    a chunk budget of `chunk_tokens[i]` tokens per step (one entry per run) takes at least the
    prompts' own tokens (a shared stream's are prefix-cache hits at best, shared_prompt_tokens)
    / the budget steps; a one-line error before any run starts."""
    own = sum(r.input_tokens for r in requests) - shared_prompt_tokens(requests)
    steps = sum(math.ceil(own / max(1, chunk)) for chunk in chunk_tokens)
    if steps > MAX_PREFILL_STEPS:
        runs = len(chunk_tokens)
        raise KvplanError(
            f"{own:,} prompt tokens over {runs:,} {what} in chunks of at most "
            f"{min(chunk_tokens):,} token(s) is at least {steps:,} prefill steps; kvplan simulates "
            f"at most {MAX_PREFILL_STEPS:,} per command (a larger --max-num-batched-tokens / "
            "--chunked-prefill-size, fewer --num-prompts or a shorter --input-len)"
        )


TRACE_FIELDS = (
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "prefix_id",
    "prefix_tokens",
    "session_id",
)


def read_trace(path: Path) -> list[RequestSpec]:
    """A JSONL trace: one object per line with arrival_s (seconds from the start),
    input_tokens, output_tokens, and optionally prefix_id with prefix_tokens (a shared prefix
    of that many tokens) or session_id (a conversation: the whole prompt is the conversation so
    far and the outputs continue it)."""
    from kvplan.inputs.files import read_regular

    raw = read_regular(Path(path), MAX_TRACE_BYTES, "a trace of at most 100,000 requests")
    try:
        lines = raw.decode("utf-8-sig").splitlines()  # a BOM is not data
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: cannot read the trace (not UTF-8 text)") from None
    streams: dict[tuple[str, str], int] = {}
    requests: list[RequestSpec] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(requests) >= MAX_REQUESTS:
            raise KvplanError(f"{path}: more than {MAX_REQUESTS:,} requests")
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise KvplanError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(row, dict):
            raise KvplanError(f"{path}:{number}: not a JSON object")
        unknown = set(row) - set(TRACE_FIELDS)
        if unknown:
            raise KvplanError(
                f"{path}:{number}: unknown field {sorted(unknown)[0]!r} "
                f"(fields: {', '.join(TRACE_FIELDS)})"
            )
        arrival = _trace_number(row, "arrival_s", path, number, 0, 1e9, integer=False)
        inputs = _trace_number(row, "input_tokens", path, number, 1, MAX_LEN)
        outputs = _trace_number(row, "output_tokens", path, number, 1, MAX_LEN)
        stream_id, stream_tokens, session = -1, 0, False
        if "session_id" in row and "prefix_id" in row:
            raise KvplanError(f"{path}:{number}: give prefix_id or session_id, not both")
        for key in ("prefix_id", "session_id"):
            value = row.get(key)
            if key in row and (isinstance(value, bool) or not isinstance(value, (str, int))):
                raise KvplanError(f"{path}:{number}: {key} must be a string or a whole number")
        if "session_id" in row:
            stream_id = streams.setdefault(("session", str(row["session_id"])), len(streams))
            stream_tokens, session = inputs, True
        elif "prefix_id" in row:
            stream_id = streams.setdefault(("prefix", str(row["prefix_id"])), len(streams))
            stream_tokens = _trace_number(row, "prefix_tokens", path, number, 1, inputs)
        elif "prefix_tokens" in row:
            raise KvplanError(f"{path}:{number}: prefix_tokens needs a prefix_id")
        requests.append(
            RequestSpec(len(requests), arrival, inputs, outputs, stream_id, stream_tokens, session)
        )
    if not requests:
        raise KvplanError(f"{path}: the trace has no requests")
    requests.sort(key=lambda r: (r.arrival_s, r.rid))
    return [r._replace(rid=i) for i, r in enumerate(requests)]


def _trace_number(row, key, path, number, low, high, integer=True):
    if key not in row:
        raise KvplanError(f"{path}:{number}: missing {key}")
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KvplanError(f"{path}:{number}: {key} must be a number")
    if not math.isfinite(value) or not low <= value <= high:
        shown = repr(value)[:30]
        raise KvplanError(f"{path}:{number}: {key} {shown} must be between {low:,} and {high:,}")
    if integer:
        if value != int(value):
            raise KvplanError(f"{path}:{number}: {key} must be a whole number")
        return int(value)
    return float(value)
