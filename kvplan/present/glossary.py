"""The words behind every term kvplan prints (`kvplan explain TERM`): what it is, how it is
computed, and where it appears. One entry per term; the aliases are the spellings people type."""

from __future__ import annotations

from kvplan.record import NamedTuple


class Term(NamedTuple):
    name: str
    aliases: tuple[str, ...]
    meaning: str
    formula: str
    where: str  # the commands and columns that print it
    example: str  # a command that shows it


TERMS = (
    Term(
        "GPU working set (Mac)",
        ("working-set", "recommendedmaxworkingsetsize", "wired-limit", "unified-memory", "mac"),
        "How much of a Mac's unified memory the GPU may use: Metal's "
        "recommendedMaxWorkingSetSize. kvplan names a Mac with its memory (--gpu m3-max-64gb) "
        "and sizes against this share, not the whole RAM.",
        "macOS 14/15: 2/3 of the RAM up to 32 GiB, 3/4 above (a 64 GB Mac: 48 GiB); "
        "sudo sysctl iogpu.wired_limit_mb=N replaces it with N MiB (pass --gpu-memory too).",
        "kvplan engine --engine llama.cpp|ollama (GPU memory), fit (machine), capacity",
        "kvplan fit --gpu m3-max-64gb --ctx 8k",
    ),
    Term(
        "fit row",
        ("fit-row", "kvplan-fit", "what-can-i-run"),
        "One model at one weights quantization and context that llama.cpp can hold on the "
        "machine with every layer on the GPU, one sequence, and 1 GiB for compute buffers.",
        "GPU total = weights (every block and the output layer, in the type) + K and V caches "
        "at -c (the cache type's bytes, block scales included) + recurrent state + 1 GiB; it "
        "fits when that is within the GPU's usable memory. Ranked by parameters, bits, context.",
        "kvplan fit (every row; the JSON gives the kvplan engine command with the same bytes)",
        "kvplan fit --gpu rtx-4090 --ctx 8k,32k",
    ),
    Term(
        "KV bytes per token",
        ("kv", "kv-cache", "bytes-per-token", "kv-bytes"),
        "What one token of context costs in the KV cache, over every layer: the keys and values "
        "a layer keeps so later tokens can attend to it without recomputing them.",
        "2 x layers x KV heads x head_dim x bytes per value (MLA: one latent of kv_lora_rank + "
        "rope dims per layer; sliding-window layers stop growing at their window; recurrent "
        "layers keep a fixed state instead).",
        "kvplan size (KV bytes/token), capacity, report, explore",
        "kvplan size llama-3.1-8b --ctx 8k --breakdown",
    ),
    Term(
        "B_mem",
        ("b-mem", "bmem", "b_equal", "b-equal", "batch-equal-memory"),
        "The batch at which the cache takes as much memory as the weights: below it the weights "
        "dominate memory, above it the cache does.",
        "B_mem = weight bytes (per GPU) / KV bytes per sequence at the context.",
        "kvplan size (B_mem column)",
        "kvplan size llama-3.1-70b --ctx 8k,128k",
    ),
    Term(
        "B_read",
        ("b-read", "bread", "batch-equal-reads"),
        "The batch at which a decode step reads as many cache bytes as weight bytes: there the "
        "throughput reaches half the ceiling BW/(s x k).",
        "Solved numerically: weights read per step (MoE: the experts a batch touches; the "
        "embedding only for the rows looked up) = B x KV bytes per sequence.",
        "kvplan roofline (at N tokens: B_read), report",
        "kvplan roofline llama-3.1-70b --ctx 8k",
    ),
    Term(
        "I_inf",
        ("i-inf", "iinf", "asymptotic-intensity"),
        "The arithmetic intensity a decode step approaches as the batch grows: every sequence "
        "brings its own cache to read, so batching stops helping intensity. Below the device's "
        "ridge, long-context decode stays memory-bound at any batch.",
        "I_inf = FLOPs per token at the context / KV bytes per sequence.",
        "kvplan roofline (at N tokens: I_inf)",
        "kvplan roofline llama-3.1-8b --ctx 8k,128k",
    ),
    Term(
        "s*",
        ("s-star", "sstar", "critical-context"),
        "The critical context: below it, a large enough batch can reach the ridge point (become "
        "compute-bound); above it, decode is memory-bound whatever the batch.",
        "The context s at which I_inf(s) equals the ridge point of the GPU.",
        "kvplan roofline (critical context s*)",
        "kvplan roofline llama-3.1-70b --gpu h100",
    ),
    Term(
        "ceiling",
        ("max-tok/s", "ceiling-tokens-per-second", "bw/(s*k)", "bw/(s.k)"),
        "The decode rate no batch can beat: every token generated re-reads its sequence's whole "
        "cache, so a GPU streaming its bandwidth over one sequence's cache makes at most this "
        "many tokens a second across the batch.",
        "ceiling = memory bandwidth / (context x KV bytes per token per GPU).",
        "kvplan roofline (ceiling), whatif (max tok/s), capacity comparisons (ceiling tok/s)",
        "kvplan whatif llama-3.1-70b --ctx 128k --batch 32 --apply fp8",
    ),
    Term(
        "TPOT floor",
        ("tpot", "time-per-output-token", "itl"),
        "The shortest a decode step can take: time per output token for every sequence in the "
        "batch, at 100% of the datasheet bandwidth and peak. Real engines reach 55-90% of "
        "bandwidth; kvplan measure checks the model on a device.",
        "max(bytes read / bandwidth, FLOPs / peak) + communication (TP all-reduces, PP hand-offs, "
        "DP attention's all-to-alls).",
        "kvplan roofline (TPOT floor), report, whatif, capacity comparisons",
        "kvplan roofline llama-3.1-70b --ctx 8k --batch 1,64",
    ),
    Term(
        "TTFT floor",
        ("ttft", "time-to-first-token", "prefill-floor"),
        "The shortest a prompt's prefill can take on the deployment: the first token cannot come "
        "sooner. Prefill is compute-bound above a few hundred tokens.",
        "max(bytes / bandwidth, prefill FLOPs / peak), prefill FLOPs = 2 x matmul params x n + "
        "causal attention (the half of the n x n scores FlashAttention computes).",
        "kvplan roofline (prefill), report, whatif (TTFT s)",
        "kvplan roofline llama-3.1-8b --ctx 32k",
    ),
    Term(
        "ridge point",
        ("ridge", "ridge-point"),
        "The arithmetic intensity at which a GPU's compute and memory take equally long: below "
        "it a kernel is memory-bound, above it compute-bound.",
        "ridge = peak FLOP/s (in the compute dtype) / memory bandwidth.",
        "kvplan roofline (ridge point), kvplan roofline --gpu GPU",
        "kvplan roofline --gpu h100",
    ),
    Term(
        "KV pool",
        ("pool", "kv-pool", "budget"),
        "The memory per GPU left for the cache once the weights and the runtime's working memory "
        "are placed.",
        "memory the GPU reports x utilization (0.9) - weights per GPU - reserve.",
        "kvplan capacity (memory per GPU), engine, explore (the wall)",
        "kvplan capacity llama-3.1-8b --gpu h100",
    ),
    Term(
        "reserve",
        ("activation-reserve", "runtime-reserve"),
        "Memory an engine keeps beside the weights for its own work: the peak of its profiling "
        "forward (activations, the sampler's logits), memory outside torch (NCCL, cuBLAS), "
        "rotary tables.",
        "kvplan.formulas.memory.runtime_reserve_bytes, fitted on vLLM 0.19 start-up logs; "
        "--reserve SIZE overrides it.",
        "kvplan capacity (reserve), engine vllm (the log's terms)",
        "kvplan engine llama-3.1-8b --engine vllm",
    ),
    Term(
        "users",
        ("sequences", "concurrency", "max-sequences", "max-concurrency"),
        "Sequences of the full context whose caches fit in the pool at once, in whole paged "
        "blocks: the concurrent requests one replica can hold.",
        "floor(pool / paged bytes per sequence) on the fullest pipeline stage (x DP-attention "
        "ranks, x replicas).",
        "kvplan capacity (max sequences), whatif (users), explore, report",
        "kvplan capacity llama-3.1-70b --gpu h200 --ctx 32k",
    ),
    Term(
        "deployment",
        ("layout", "tp", "pp", "tensor-parallel", "pipeline-parallel", "replicas"),
        "How one copy of the model is laid over GPUs: tensor parallelism (TP) splits every "
        "layer within a node, pipeline parallelism (PP) splits the layers across nodes, replicas "
        "copy the whole. kvplan chooses the fewest GPUs that hold one sequence of the context, "
        "and of those the layout holding the most; --tp, --pp, --dp-attention fix it.",
        "Per GPU: weights / (TP x PP); KV heads / TP (copied when TP exceeds them; an MLA "
        "latent on every TP rank); the fullest stage's layers under PP.",
        "kvplan capacity (deployment), roofline, report, explore",
        "kvplan capacity deepseek-v3 --gpu h100 --ctx 32k",
    ),
    Term(
        "DP attention",
        ("dp-attention", "data-parallel-attention", "ep", "expert-parallel"),
        "For mixture-of-experts models: attention runs data-parallel, each GPU serving its own "
        "requests with its own cache, while the routed experts are spread over the GPUs "
        "(expert parallelism). Under TP an MLA latent is copied to every rank; under DP "
        "attention every rank holds different requests.",
        "Per GPU: every weight but the routed experts + experts / N; the rank's own sequences' "
        "cache whole; two all-to-alls per MoE layer per step.",
        "kvplan capacity (deployment: DP attention N + EP N), roofline, report",
        "kvplan capacity deepseek-v3 --gpu h100 --ctx 32k --dp-attention 16",
    ),
    Term(
        "paging",
        ("paged", "pagedattention", "block-size"),
        "The cache stored in fixed blocks of tokens (16 by default) allocated as a sequence "
        "grows, so memory follows what sequences really use rather than --ctx each; a sequence "
        "wastes under one block per layer group.",
        "paged bytes per sequence = ceil(tokens / block) x block x bytes per token.",
        "kvplan capacity (paging vs contiguous, --mean-len), whatif (paged)",
        "kvplan capacity llama-3.1-8b --ctx 32k --mean-len 8k",
    ),
    Term(
        "engine-free vs engine numbers",
        ("engine-free", "which-number", "engine"),
        "kvplan size and capacity are engine-free: the bytes the model's cache takes and what "
        "fits under a stated budget. kvplan engine reproduces what vLLM, SGLang or llama.cpp "
        "allocate and log, with their own block sizes, memory terms and defaults: quote it when "
        "the question is what a given server will do.",
        "See docs/tasks.md, 'Which number do I quote'.",
        "kvplan capacity, kvplan engine",
        "kvplan engine llama-3.1-8b --engine vllm --gpu h100",
    ),
    Term(
        "goodput",
        ("goodput-rps", "goodput/replica"),
        "The highest request rate one replica sustains while every latency target still holds "
        "(throughput that meets the SLOs, not raw throughput): what sets the replica count.",
        "Bisection on the rate between 0 and the saturated throughput of a simulated replica "
        "(vLLM V1's scheduler), each run checked against every --slo; replicas = ceil(rate / "
        "goodput).",
        "kvplan plan (goodput/replica column)",
        "kvplan plan llama-3.1-8b --gpu h100 --rate 2 --slo ttft_p99=2s --tp 1 --kv-cache-dtype "
        "auto --max-num-seqs 64 --max-num-batched-tokens 2048 --num-prompts 20 --input-len 512 "
        "--output-len 64",
    ),
    Term(
        "$/M tokens",
        ("usd-per-million", "$/m", "dollars-per-million", "cost-per-million", "price"),
        "What a million tokens cost on the GPUs' hourly price. The comparison (capacity with "
        "several --gpu) prices output tokens at the full replica's decode floor (100% bandwidth: "
        "it ranks kinds); plan prices input and output tokens served at the requested rate on "
        "the simulated deployment.",
        "capacity: USD per GPU-hour / (floor tokens/s per GPU x 3,600) x 10^6; plan: replicas x "
        "GPUs x USD per GPU-hour / (tokens served per hour) x 10^6. Prices from "
        "hardware_profiles/prices.yaml (dated), --price GPU=USD overrides.",
        "kvplan capacity with two or more --gpu ($/M tokens column), kvplan plan ($/M tokens)",
        "kvplan capacity llama-3.1-8b --gpu h100 --gpu h200 --ctx 8k",
    ),
    Term(
        "verdict",
        ("compare-verdict", "winner"),
        "The comparison's one-line answer: the kind that decodes the most per GPU, the one that "
        "serves a million output tokens cheapest, and (with --users) the one needing the fewest "
        "GPUs. Each kind is on its own deployment; the figures are floors, so the verdict ranks "
        "kinds; kvplan plan prices them under latency targets.",
        "Max over kinds of floor tokens/s per GPU; min of $/M output tokens; min of GPUs for "
        "--users.",
        "kvplan capacity with two or more --gpu (verdict line), kvplan report",
        "kvplan capacity llama-3.1-8b --gpu h100 --gpu h200 --ctx 8k",
    ),
    Term(
        "KV transfer",
        ("kv-transfer", "disaggregated", "disaggregation", "transfer"),
        "Disaggregated serving prefills on one replica and decodes on another: each request's "
        "cache crosses the link between them once. Its time adds to TTFT; the link's rate caps "
        "the requests per second a decode replica can take.",
        "bytes = KV bytes of the context as the decode ranks store it (an MLA latent or a "
        "replicated KV head counted once per rank); time = bytes / (ranks x one-way link "
        "bandwidth) + latency; requests/s <= ranks x bandwidth / bytes.",
        "kvplan capacity (disaggregated KV transfer), kvplan simulate --disagg",
        "kvplan capacity llama-3.1-70b --gpu h100 --ctx 32k",
    ),
    Term(
        "fits",
        ("fit", "fits-no", "exit-code"),
        "Whether one sequence of the context fits beside the weights on the deployment shown. "
        "fits: NO prints the whole answer (with what would fit) and exits 1, so a script can "
        "test it; errors in the input exit 2, an answer that fits exits 0.",
        "fits = KV pool per GPU > 0 and whole sequences of --ctx >= 1.",
        "kvplan capacity (fits, would fit with)",
        "kvplan capacity llama-3.1-8b --gpu h100 --ctx 32k",
    ),
)


def _key(text: str) -> str:
    return "".join(ch for ch in str(text).lower() if ch.isalnum() or ch in "*/")


INDEX = {_key(alias): term for term in TERMS for alias in (term.name, *term.aliases)}


def lookup(text: str) -> Term | None:
    return INDEX.get(_key(text))


def suggestions(text: str) -> list[str]:
    import difflib

    names = {term.name for term in TERMS}
    keys = difflib.get_close_matches(_key(text), list(INDEX), n=3, cutoff=0.5)
    found = [INDEX[k].name for k in keys]
    return list(dict.fromkeys(found)) or sorted(names)[:5]


def explain_view(term: Term):
    from kvplan.present.view import View

    facts = [
        ("what", term.meaning),
        ("how", term.formula),
        ("printed by", term.where),
        ("try", term.example),
    ]
    data = {
        "term": term.name,
        "aliases": list(term.aliases),
        **dict(
            zip(
                ("meaning", "formula", "where", "example"),
                (term.meaning, term.formula, term.where, term.example),
                strict=True,
            )
        ),
    }
    return View(term.name, facts, [], [], data)


def terms_view():
    from kvplan.present.view import Column, Table, View

    rows = [{"term": t.name, "also": ", ".join(t.aliases[:3]), "where": t.where} for t in TERMS]
    table = Table(
        "",
        [
            Column("term", "term", str, "left"),
            Column("also", "also written", str, "left", priority=1),
            Column("where", "printed by", str, "left", prose=True),
        ],
        rows,
    )
    return View("Terms kvplan prints (kvplan explain TERM)", [], [table], [], {"terms": rows})
