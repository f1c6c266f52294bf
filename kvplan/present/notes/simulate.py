"""The words of the simulator: the engine's scheduler, the step model's kernel tables, speculative
decoding, DCP, expert and data parallelism, disaggregation, its known weak spots and its
intervals. Made in kvplan/plans/simulate.py and kvplan/simulate/setup.py."""

from kvplan.formulas.batch_step import HOST_OVERHEADS
from kvplan.present import format as f
from kvplan.present.format import gib_text
from kvplan.present.notes.registry import text

# the evidence class of a GPU's kernel tables in words (sim-interval's)
EVIDENCE_WORDS = {
    "own": "this GPU's own measured kernel tables for this engine",
    "partial": "this GPU's own kernel tables for this engine, with a part of the step in none "
    "of them",
    "other-engine": "this GPU's kernel tables measured for the other engine",
    "borrowed": "another GPU's kernel tables (the profile names which)",
    "datasheet": "no kernel tables: another GPU's fractions on this GPU's datasheet rates",
    "untimed": "a part of the serving path kvplan does not time, or times only on another "
    "machine's CPU, or a kernel family no table prices: the detokenizer or gpt-oss note says "
    "which",
}
# whose tables the GPU runs on, in sim-kernel-tables' words ("for H200 ...")
KERNEL_TABLE_WORDS = {
    "own": "its own",
    "other-engine": "its own but for the other engine (none measured for {engine})",
    "borrowed": "another GPU's, named by its profile",
    "datasheet": "none of its own: the H100 SXM's, on its datasheet rates",
}
text("sim-kernel-tables")(
    lambda gpu, engine, tables, evidence, measured="", releases="": (
        "Each operation runs at the fraction of the datasheet rate the engine's own kernel "
        f"reaches, from the measured kernel tables {tables} (NVIDIA aiconfigurator's silicon "
        f"tables; evidence {evidence}: for {gpu} "
        + (KERNEL_TABLE_WORDS.get(evidence) or evidence).format(engine=engine)
        + (
            f"; the release measured nearest the run's, its kernels being the release's own: "
            f"{releases}"
            if releases
            else ""
        )
        + (
            f"; measured on {gpu} itself at kernel level, and used in the H100's place: "
            f"{measured}; every other figure is the H100's, transferred unmeasured"
            if measured
            else ""
        )
        + "): dense GEMMs and attention by the medians of their tables, fused-MoE experts by "
        "the model's own timed shape where the tables have it (the MoE note says), else a curve "
        "of the tokens each expert gets; a CUDA-graph step pays "
        f"{f.us_text(HOST_OVERHEADS.per_launch_s(), 1)} for each kernel a layer launches outside "
        "the measured GEMM and fused-MoE rows (BLIS's per-layer constant over a dense layer's "
        "launches), a larger step each launch's measured host cost "
        f"({f.us_text(HOST_OVERHEADS.eager_per_launch_s, 1)}) and the rest of "
        f"{f.ms_text(HOST_OVERHEADS.eager_per_layer_s)} per layer of CPU dispatch (a constant of "
        "aiconfigurator's vLLM backend, not a kernel measurement); the API server 15.6 ms per "
        "request and 46 us per streamed token (BLIS)."
    )
)
text("sim-dcp")(
    lambda dcp, tp, block_size: (
        f"Decode context parallelism (-dcp {dcp}, inside the TP {tp} group): each rank holds "
        f"every {dcp}th token of a request's cache, so the pool holds {dcp}x the tokens and "
        f"the scheduler counts blocks of {block_size} tokens; a decode reads 1/{dcp} of its "
        "context per rank, then the ranks all-gather their partial outputs and LSEs once per "
        "attention layer (charged on the interconnect); prefill attention is priced as without "
        "DCP."
    )
)
text("sim-dp-attention-off")(
    lambda tp: (
        f"--enable-dp-attention with --dp-size 1: SGLang turns DP attention off "
        f"(server_args' _handle_data_parallelism) and serves plain TP {tp}, as simulated here."
    )
)
text("sim-enforce-eager")(
    lambda engine: (
        "No CUDA graphs ("
        + ("--enforce-eager" if engine == "vllm" else "--disable-cuda-graph")
        + "): every step pays the eager per-layer CPU dispatch cost"
        + (", and no CUDA-graph memory is taken from the KV pool." if engine == "vllm" else ".")
    )
)
_SPEC_DRAFT = {
    "mtp": "the checkpoint's MTP layer (one layer + the target's LM head per draft step)",
    "eagle": "an EAGLE head priced as one target-width decoder layer + the target's LM head",
    "eagle3": "an EAGLE-3 head priced as one target-width decoder layer + the target's LM head",
    "ngram": "n-gram lookup on the host (one more per-request host pass a round, no GPU work)",
}
_SPEC_ACCEPTANCE = {
    "rate": "from the per-token acceptance rate {rate:g}, (1 - a^(k+1)) / (1 - a)",
    "positions": "1 + the sum of the per-position acceptance rates given",
    "length": "the mean acceptance length given",
    "assumed": "ASSUMED: no acceptance given, a per-token rate of {rate:g} (whatif's default); "
    "give --spec-accept or --spec-accept-length from the engine's metrics",
}
text("sim-speculative")(
    lambda engine, method, draft, steps, topk, verify, tokens_per_round, acceptance, rate, weights_bytes, kv_bytes_per_token: (
        f"Speculative decoding ({method}"
        + (f", draft {draft}" if draft else "")
        + f"): each round runs {steps} draft step(s)"
        + (f" of {topk} branches" if topk > 1 else "")
        + f" and one target forward verifying {verify} tokens per sequence (each cache read "
        f"once), and yields {tokens_per_round:.2f} tokens per sequence, the expected value "
        "(never sampled: runs are deterministic), "
        + _SPEC_ACCEPTANCE[acceptance].format(rate=rate or 0.0)
        + ". Each decode step is 1/E of a round (E tokens per round); a prefill chunk in it is "
        "charged what it adds to the verification"
        + (
            ""
            if method == "ngram"
            else ", and every prefill chunk what it adds to a draft forward (the draft runs "
            "over the prompt's tokens too: SGLang's draft extend, vLLM's proposer over every "
            "scheduled token)"
        )
        + ". The draft: "
        + _SPEC_DRAFT.get(method, f"{draft} priced by its own step model at the target's TP")
        + f"; its weights ({gib_text(weights_bytes)} per GPU) and KV cache "
        f"({kv_bytes_per_token:,.0f} B per token per GPU) come out of the pool"
        + (
            f", and every running request holds {verify - 1} lookahead slot(s) and "
            f"schedules {verify} tokens of the budget (vLLM's num_lookahead_tokens)."
            if engine == "vllm"
            else "; SGLang's own --mem-fraction-static adjustments for a draft are not "
            "modelled, and its overlap scheduler is off (spec v1): its host work is serial "
            "with the GPU, and each round prepares "
            + (
                ""
                if method == "ngram"
                else "two more forward passes than the verification "
                "(the draft's and the draft extend's: eagle_worker.py), a host step's cost "
                "each, and "
            )
            + "a request's output cost for every token a round emits past the first "
            "(EagleVerifyInput.verify checks each)."
        )
        + " vLLM bench's ITL is per streamed chunk (a round's tokens arrive together): "
        "kvplan's ITL is per token, like its TPOT."
    )
)
text("sim-engine")(
    lambda version: (
        f"The engine is vLLM {version}'s V1 scheduler as kvplan reads it: running requests first "
        "(decodes one token each, prefill continuations take what the budget leaves), then waiting "
        "ones first come first served with head-of-line blocking, only in steps that preempted "
        "nobody; preemption by recompute of the last admitted; blocks and prefix hits from "
        "kvplan.kernels' block manager; one forward per step timed by formulas.batch_step."
    )
)
text("sim-step-terms")(
    lambda shares: (
        "Where the engine's time went (simulated, last rate): "
        + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.0%}" for k, v in shares)
        + "."
    )
)
text("sim-dsa-tables")(
    lambda gpu, layers, tables, module, stand_in, own_baseline=False: (
        f"Sparse attention (DSA) on {layers} layers: each is priced as dense MLA plus what "
        + ("DeepSeek-V3.2's DSA module" if stand_in else "the DSA module at this model's shape")
        + f" in {module} costs over "
        + (
            "kvplan's own price of that layer without it (its MLA projections, absorbed BMMs "
            f"and MLA kernel at the top-k read, from the {tables}' rows)"
            if own_baseline
            else "DeepSeek-V3's MLA module in vLLM"
        )
        + f" on the {tables} (NVIDIA aiconfigurator's module tables, taken for {gpu}; read at "
        "the step's batch, length and heads on a rank): more at short contexts (the indexer and "
        "top-k), less at long ones (2,048 keys attended, not all)."
        + (
            " This model's heads and projections are not DeepSeek-V3.2's and the tables hold no "
            "DSA module of its shape with a baseline to subtract (vLLM's: no dense MLA module "
            "of its shape): DeepSeek-V3.2's difference stands in "
            "(the two models' DSA modules are within about 12% at TP 8 in vLLM 0.24.0 and "
            "SGLang 0.5.14 decodes on H200 and B200)."
            if stand_in
            else ""
        )
    )
)
text("sim-dsa-decode-kernel")(
    lambda kernel, timed, tables: (
        f"SGLang runs this model's DSA decode on its {kernel} kernel (its default for this KV "
        f"cache dtype and GPU), but the DSA module tables on the {tables} timed {timed} "
        "(aiconfigurator's collector runs SGLang 0.5.14's pick): the module's decode is priced "
        f"at those rows, and how far {kernel} lands from them is not known to kvplan, so the "
        "attention terms count as untimed (the partial interval class)."
    )
)
text("sim-dsa-dense")(
    lambda gpu, engine: (
        "Sparse attention (DSA) is priced on the roofline at the tables' MLA fractions: each "
        "decode reads the top-k latents it attends and every cached token's indexer key, which "
        f"its indexer scores; kvplan has no {engine} DSA module tables for {gpu}, so how far "
        "the real indexer and sparse kernels land from that is not known (DeepSeek-V3.2's "
        "module costs over MLA's at short contexts 15-25 us a layer in SGLang on Blackwell, "
        "100-150 us in vLLM; vLLM runs DSA on Hopper and datacenter Blackwell only)."
    )
)
text("sim-achieved-measured")(
    lambda: (
        "The profile is measured (kvplan measure), but its per-operator curves lay out only "
        "dense attention + MLP layers with weights in a plain float format; this model is not "
        "one, so its rates are taken as achieved ones and each kernel family runs at the H100 "
        "SXM's measured ratio to the dense matmul and copy kernels (not checked on this device)."
    )
)
text("sim-measured-ops")(
    lambda dtype, weights: (
        "The profile is measured (kvplan measure): every operator of a step (each layer's "
        "GEMMs over the step's tokens, one decode-attention call, each prefill chunk's causal "
        "attention, norms, activations and cache writes, the head over the sampled positions) "
        "runs at the device's measured curve at its shape plus its measured launch cost: the "
        "per-operator model `kvplan measure --check` validates. The curves were measured in "
        f"{dtype}; this run's weights are {weights}. The scheduler's CPU costs are vLLM's "
        "(BLIS), not measured here."
    )
)
text("sim-prefix-caching-off-hybrid")(
    lambda: "Prefix caching is off: vLLM turns it off by default for models with recurrent state."
)
text("sim-max-model-len-reduced")(
    lambda configured, estimated: (
        f"kvplan's KV pool estimate cannot hold one {configured:,}-token request, which would "
        f"stop vLLM at start-up; simulated with max_model_len {estimated:,} (the pool is what "
        "matters here). Pass --max-model-len or --kv-cache-memory (the engine's logged figure) "
        "to pin it."
    )
)
text("sim-weak-general")(
    lambda: (
        "Known weak spots: the API server's per-request costs (chat templates, tokenizers, HTTP) "
        "vary by model and server, so TTFT at low load is underestimated (published runs show "
        "40-60 ms where kvplan says 20-30 ms); KV pools rest on kvplan's memory estimate; "
        "queueing amplifies step-time errors near saturation."
    )
)
text("sim-sglang-frontend")(
    lambda per_request_us, cpu: (
        "SGLang's one HTTP server process parses, templates, tokenizes and hands each request "
        f"to the scheduler in turn: kvplan charges {per_request_us:,} us of it per request, "
        "serially (a burst reaches the scheduler that far apart), timed by "
        f"scripts/bench_frontend.py on {cpu} with a chat request and uvicorn's own work "
        "untimed: a lower bound, and the serving host's CPU moves it in proportion."
    )
)
text("sim-weak-moe")(
    lambda timed: (
        (
            f"MoE: the model's own fused-MoE shape, format and split was timed in the kernel "
            f"tables ({timed}) at the token counts a step runs, with aiconfigurator's "
            "power-law expert routing; "
            if timed
            else "MoE: the kernel tables time no fused MoE of this model's shape, format and "
            "split, so its experts run at the tables' median MoE fraction of the roofline "
            "(about a fifth of the GEMM peak), expert load taken as uniform; "
        )
        + "published runs of large tensor-parallel MoE models at small and middle batches have "
        "landed up to several times from the sum of their kernels, mostly slower (docs/"
        "simulate.md lists each run), so decode there is less certain than the kernels say."
    )
)
text("sim-weak-mla")(
    lambda: (
        "MLA: decode attention is counted absorbed over the latent and prefill un-absorbed; "
        "FlashMLA's 64-token blocks are assumed."
    )
)
text("sim-weak-hybrid")(
    lambda: (
        "Sliding-window and recurrent-state layer groups hold a fixed share per request (the "
        "window's blocks, one state block), reserved when the request is admitted."
    )
)
text("sim-weak-pp")(
    lambda: (
        "Pipeline parallelism is a micro-batched pipeline of pp stages with its bubble; vLLM's "
        "own batch queue across stages is not modelled request by request."
    )
)
text("sim-sharegpt")(
    lambda: (
        "sharegpt lengths are a lognormal stand-in (sigma 1, filtered as the bench filters "
        "ShareGPT: input and output >= 4, input <= 1024, total <= 2048) at the given means, not "
        "the dataset itself: a run's duration follows its longest requests. Use --trace for "
        "real per-request lengths."
    )
)
text("sim-frontend-bound")(
    lambda: (
        "The API server was busy more than 80% of the run: it streams every token in turn, so "
        "clients see its pace rather than the engine's (more API servers or replicas help)."
    )
)
text("sim-preemptions")(
    lambda: (
        "Requests were preempted (the KV pool ran out): each recomputes its prompt and outputs "
        "when readmitted, and its TPOT includes the wait."
    )
)
text("sim-disaggregated")(
    lambda link, one_way_bytes_per_s, latency_s, ranks: (
        "Disaggregated as vLLM's NixlConnector runs behind its proxy: the prefill replica runs the "
        "prompt with max_tokens 1 and keeps its blocks until the decode replica has read them; the "
        "decode replica allocates the prompt's blocks when the request reaches its queue's head, "
        f"pulls the KV over {link} ({f.gbps_text(one_way_bytes_per_s)} one way per GPU, "
        f"{f.us_text(latency_s)} latency, its {ranks} rank(s) in parallel; a transfer holds the "
        "prefill replica's outgoing and the decode replica's incoming links, each side first come "
        "first served), then recomputes the last prompt token and "
        "samples the first token the client sees. TTFT therefore ends on the decode replica "
        "(prefill, its response, the decode queue, the transfer, one decode step), as vllm bench "
        "serve measures it through the proxy; the prefill replica's own first token is reported "
        "beside it."
    )
)
text("sim-weak-disagg-hybrid")(
    lambda: (
        "With a KV connector, vLLM up to at least 0.18 turns its hybrid KV cache manager off (it logs "
        '"Turning off hybrid kv cache manager because `--kv-transfer-config` is set"). Every '
        "sliding-window layer then holds, and the connector moves, the whole context, so the pools are "
        "smaller than simulated here, and Mamba hybrids may not start. kvplan sizes both pools with the "
        "hybrid manager on (--no-disable-hybrid-kv-cache-manager, for a connector that supports it). "
        "Pass --kv-cache-memory with the logged figure to pin the pool."
    )
)
text("sim-requests-failed")(
    lambda failed, requests, max_model_len, at_limit=False, prompt_limit=None: (
        (
            f"All {requests:,} requests failed"
            if failed == requests
            else f"{failed:,} of {requests:,} requests failed"
        )
        + ": their prompt plus the output the client asks for (max_tokens) "
        + ("reaches" if at_limit else "is more than")
        + f" max_model_len ({max_model_len:,}) tokens, which the server refuses before "
        "serving anything (HTTP 400, the request longer than the model's context length)"
        + (
            f", or their prompt reaches {prompt_limit:,} tokens, which SGLang's scheduler "
            "refuses (max_req_input_len: max_req_len - 5)"
            if prompt_limit is not None
            else ""
        )
        + (
            ", so every figure is empty (the bench client, vllm bench serve or "
            'sglang.bench_serving, warns: "All requests failed. This is likely due to a '
            'misconfiguration on the benchmark arguments.")'
            if failed == requests
            else ", so the figures cover the others only"
        )
        + (
            "; raise --max-model-len"
            + (
                " (or the KV memory, where SGLang's pool is below it: note sim-sglang-pool-caps)"
                if prompt_limit is not None
                else ""
            )
            + " to serve them."
        )
    )
)
text("sim-outputs-capped")(
    lambda requests, limit: (
        f"{requests:,} request(s) asked for more output than max_model_len {limit:,} leaves after "
        "their prompt: the server takes them and SGLang's scheduler lowers their output to "
        "what the context leaves less 2 tokens (max_req_len - prompt - 1, max_req_len = "
        "context_len - 1; SGLang 0.4.0 and 0.4.1 take a longer total too, later releases and "
        "vLLM refuse it with HTTP 400), so they generate fewer tokens than asked; raise "
        "--max-model-len to let them run."
    )
)
text("sim-vllm-v0")(
    lambda version, steps, prefill_first=False, v0_rules=True: (
        f"vLLM {version} runs the V0 engine"
        + (
            f" with multi-step scheduling (--num-scheduler-steps {steps}): the scheduler passes "
            f"and output processing of {steps} decode-only steps overlap them (each pays 1/{steps} "
            f"of the host time), and while decodes run requests are admitted only every {steps} "
            "decode steps (a request finished inside a window leaves at its last token, not at "
            "the window's end)"
            if steps > 1
            else ""
        )
        + (
            ". With chunked prefill off it runs V0's Scheduler._schedule_default: a step that "
            "admits prompts runs them alone and the running requests decode only in steps that "
            "admit none (their inter-token gaps span those steps)."
            if prefill_first
            else ". With chunked prefill on it runs kvplan's V1 scheduler, which orders a step as "
            "V0's _schedule_chunked_prefill does (running requests, then chunked prompts, then "
            "new ones)."
        )
        + (
            " As V0's block manager does, a prompt is admitted only when its whole sequence's "
            "blocks leave 1% of the pool free (the watermark); preemption is by recompute (V0's "
            "default for one-sequence requests) or, with --preemption-mode swap, by swapping to "
            "the CPU pool. The KV pool is V0's own where a note says so, else kvplan's V1 "
            "allocator's."
            if v0_rules
            else " kvplan applies V0's multi-step windows alone here: admission, defaults and the "
            "KV pool are its V1 ones."
        )
    )
)
text("sim-vllm-v0-pool")(
    lambda gpu_blocks, cpu_blocks, block_bytes, available_bytes, swap: (
        f"V0's own KV pool (vllm/worker/worker.py determine_num_available_blocks): "
        f"{available_bytes / 2**30:,.2f} GiB left after the profile run (total x "
        "gpu_memory_utilization less weights, the profile batch's activation peak and non-torch "
        "memory; the CUDA graphs are captured after, not subtracted) over a block of "
        f"{block_bytes:,} B (CacheEngine.get_cache_block_size: K and V of every attention layer "
        f"of the rank): # GPU blocks {gpu_blocks:,}, # CPU blocks {cpu_blocks:,} (--swap-space "
        "over the same block)"
        + (
            ". --preemption-mode swap: a preempted request's blocks are copied to the CPU pool "
            "and back before it runs again (swapped requests before new prompts), each copy "
            "taking blocks x block bytes over the host link's one-way bandwidth (added to the "
            "step's time); a full CPU pool aborts the run as V0 does."
            if swap
            else "."
        )
    )
)
text("sim-vllm-08-v0")(
    lambda version, flags: (
        f"vLLM {version}'s engine oracle (EngineArgs._is_v1_supported_oracle, VLLM_USE_V1 unset) "
        f"falls back to the V0 engine with {', '.join(flags)}: kvplan simulates it with V0's "
        "rules (0.8's _set_default_args_v0: max_num_seqs 256, chunked prefill only above 32,768 "
        "tokens and not for MLA or multimodal models, prefix caching off; V0's admission, "
        "preemption and KV pool). Fallbacks kvplan cannot decide from flags (a V0-only "
        "architecture, compute capability below 8.0) are not checked."
    )
)
_V0_CHUNKED_OFF = {
    "short": "max_model_len {max_model_len:,} is not above 32,768",
    "multimodal": "V0 keeps it off for multimodal models",
    "rocm": "V0 keeps it off on ROCm from 0.6.5",
    "not-gpu": "V0 turns it on only on a GPU",
    "sliding": "V0 keeps it off for a model with a sliding window",
    "speculative": "V0 keeps it off with speculative decoding",
    "prefix-caching": "0.6.0 keeps it off with prefix caching",
    "state": "V0 keeps it off for recurrent-state layers before 0.6.3",
    "mla": "0.8's V0 keeps it off for MLA models",
}


def _v0_chunked(chunked, defaulted, why, max_model_len) -> str:
    if not defaulted:
        return f"chunked prefill {'on' if chunked else 'off'} as given"
    if chunked:
        return f"chunked prefill on by default (max_model_len {max_model_len:,} > 32,768 on a GPU)"
    reason = _V0_CHUNKED_OFF.get(why, "")
    return "chunked prefill off by default" + (
        f" ({reason.format(max_model_len=max_model_len)})" if reason else ""
    )


text("sim-vllm-v0-defaults")(
    lambda release, max_num_seqs, max_num_batched_tokens, chunked, defaulted, why, max_model_len: (
        f"vLLM {release}'s V0 defaults applied (vllm/engine/arg_utils.py "
        "EngineArgs.create_engine_config, vllm/config.py SchedulerConfig): "
        + ", ".join(
            part
            for part in (
                _v0_chunked(chunked, defaulted, why, max_model_len),
                f"max_num_seqs {max_num_seqs:,}" if max_num_seqs is not None else "",
                (
                    f"max_num_batched_tokens {max_num_batched_tokens:,}"
                    + (
                        " (its chunked-prefill budget)"
                        if chunked and max_num_batched_tokens < max(max_model_len, 2048)
                        else " (max(max_model_len, 2,048))"
                    )
                )
                if max_num_batched_tokens is not None
                else "",
                "prefix caching off unless --enable-prefix-caching",
            )
            if part
        )
        + ". docs/simulate.md lists each release's defaults."
    )
)
text("sim-vllm-version-newer")(
    lambda given, rules: (
        f"vLLM {given} is newer than the releases kvplan models: simulated with the scheduler "
        f"and allocator rules of vLLM {rules}, the newest it knows; what changed since is not "
        "modelled."
    )
)
text("sim-version-prerelease")(
    lambda engine, given, release: (
        f"{engine} {given} is a release candidate or dev build of {release}: simulated with "
        f"{release}'s rules, as kvplan reads its patch; a rule that landed in {release} after "
        "this build was cut is not told apart."
    )
)
text("sim-sglang-version-nearest")(
    lambda given, rules: (
        f"SGLang {given} is not a release kvplan models: simulated with the rules and defaults "
        f"of SGLang {rules}, the nearest one it knows: its newest patch's rules for a later "
        "release, its first's for an earlier one (docs/simulate.md lists them)."
    )
)
text("sim-sglang")(
    lambda max_prefill_tokens, page, block, swa, graph_tokens, graph_off, piecewise, release, eager_per_layer_s, reference_layer_launches: (
        "The engine is SGLang's scheduler as kvplan reads it (main of April 2026, default flags): "
        "a step is a prefill batch alone whenever one can be formed (the running requests do not "
        "decode in it), else a decode step for every running request; admission first come "
        f"first served within max_prefill_tokens {max_prefill_tokens:,} and chunked_prefill_size "
        "per batch, and within the KV pool less what the running requests are expected to still "
        "need (new_token_ratio from 0.7 down to 0.098); when the pool runs out, retraction of the "
        "requests with the fewest outputs. "
        + (
            f"SGLang's page is {page} token{'s' if page != 1 else ''}; the simulated pool counts "
            f"blocks of {block} tokens (at most {block - 1} tokens less per request). "
            if block != page
            else ""
        )
        + (
            "The sliding-window layers' own pool is not a limit here (only the full-attention "
            "pool is). "
            if swa
            else ""
        )
        + "SGLang's decode graphs replay decode batches only; prefill batches run under "
        "piecewise CUDA graphs by default from 0.5.10 (PR #16331; opt-in before with "
        "--enable-piecewise-cuda-graph), up to --piecewise-cuda-graph-max-tokens, and eagerly "
        "above. "
        + (
            f"SGLang {release} runs them here: kvplan prices a prefill batch of up to "
            f"{graph_tokens:,} tokens with graph launch costs (not the padding to the captured "
            "size) and a longer one "
            if piecewise
            else f"SGLang {release} runs none here ({graph_off}), so every prefill batch runs "
            "eagerly; "
            + (
                f"kvplan still prices one of up to {graph_tokens:,} tokens (the decode graphs' "
                "largest batch) as a graph step, SGLang's eager cost being unmeasured, and a "
                "longer one "
                if graph_tokens
                else "kvplan prices every prefill batch "
            )
        )
        + f"at {f.ms_text(eager_per_layer_s)} of CPU dispatch for a dense layer's "
        f"{reference_layer_launches} kernels "
        "(a layer of more kernels pays each one's measured host cost on top), a constant of "
        "aiconfigurator's vLLM backend (_prefill_dispatch_overhead_ms, set against end-to-end "
        "vLLM runs, not a kernel measurement; its SGLang backend adds none): SGLang's own "
        "dispatch cost, with or without graphs, is not measured."
    )
)
text("sim-sglang-pool-caps")(
    lambda context, tokens, max_req_len, prompt_limit, longest_request, longest: (
        f"SGLang's KV pool ({tokens:,} tokens) is smaller than the context length ({context:,}): "
        f"SGLang starts anyway with max_req_len {max_req_len:,}, refuses prompts "
        f"of {prompt_limit:,} tokens or more and cuts max_new_tokens so that "
        f"prompt + outputs stay within {longest_request:,}; the simulation caps "
        f"requests at {longest:,} tokens (prompt + outputs, which with a page fit the simulated "
        "pool's whole blocks)."
    )
)
text("sim-weak-sglang")(
    lambda runs, cases, throughput, tpot, ttft: (
        "SGLang: the kernel times are SGLang's own measured tables where the GPU has them (else "
        "vLLM's, or the datasheet: the kernel-tables note says which), and the schedule is "
        "SGLang's (step for step against SGLang 0.5.6.post2's own scheduler on 8 scenarios). "
        + (
            f"On {runs} published SGLang runs ({cases}, held out) the median |error| is "
            f"{throughput:.0%} on output throughput, {tpot:.0%} on median TPOT and {ttft:.0%} on "
            "median TTFT (kvplan/data/published_accuracy.json); gpt-oss on SGLang 0.5.3-0.5.4 "
            "and DeepSeek-V3.2 on 0.5.6 measured several times slower than simulated."
            if runs
            else ""
        )
    )
)
# how SGLang's detokenizer decodes Moonshot's tokenizer, by kvplan.engines.sglang's path name
DETOKENIZER_PATH_WORDS = {
    "hf_kwargs": "on transformers' slow decode path (before 0.5.11 the keyword arguments SGLang "
    "passes send the tokenizer's decode to transformers' _decode, which rebuilds the "
    "special-token lists for every token; PR #16427's cache for them is off by default "
    "through 0.5.10)",
    "cached_special": "on transformers' slow decode path with the special-token lists cached "
    "(0.5.11-0.5.12: PR #16427's cache on by default)",
    "native": "through tiktoken itself (0.5.13 on: PR #25309 drops the keyword arguments), as "
    "fast as the fast tokenizers kvplan leaves to the API server's per-token cost",
}
text("sim-weak-detokenizer")(
    lambda version, path, per_token_us, batch, cpu: (
        f"Detokenizer: SGLang {version} streams every token of this model through one CPU "
        f"process that decodes Moonshot's tiktoken tokenizer {DETOKENIZER_PATH_WORDS[path]}. "
        + (
            f"kvplan times it as a stage of its own between the engine and the API server, "
            f"{per_token_us:,.0f} us per token per request (scripts/bench_detokenizer.py: "
            f"SGLang's two decode calls a request, {batch} requests a step, on {cpu}, not the "
            "serving host's CPU, whose speed moves that cap in proportion): the tokens/s "
            f"clients receive cannot pass about {1e6 / per_token_us:,.0f}, however fast the "
            "GPUs step. "
            if path != "native"
            else "kvplan does not time it. "
        )
        + "Published runs of Kimi-K2.5 on 8 H200 (SGLang 0.5.6.post2, random dataset) streamed "
        "258 and 254 tok/s at 16 and 100 in flight while their fastest second reached 1,103 "
        "and 1,199 tok/s."
    )
)
text("sim-weak-gpt-oss-sglang")(
    lambda: (
        "gpt-oss under SGLang before Blackwell: SGLang runs the MXFP4 experts through "
        "triton_kernels' matmul_ogs (and, on Ampere, attention through its Triton backend), which "
        "no kernel table times. Three of GPUStack's four published runs (SGLang 0.5.3-0.5.4, "
        "1,000 ShareGPT prompts at once) measured 3-19x lower throughput than kvplan simulates "
        "at the same KV pool (gpt-oss-20b on one A100: 266 tok/s and a 2.5 s median TPOT against 5,168 tok/s and "
        "97 ms). Read these figures as an upper bound."
    )
)
text("sim-gpt-oss-sm120-kernel")(
    lambda version, later: (
        f"gpt-oss under SGLang {version} on an SM120 GPU (RTX PRO 6000, RTX 5090): SGLang runs "
        "its MXFP4 experts through "
        + (
            "FlashInfer's CUTLASS MXFP4 MoE (PR #32668, after 0.5.16; 0.5.17 may still run Marlin)"
            if later
            else "triton_kernels' matmul_ogs (Marlin only from 0.5.14, PR #28231)"
        )
        + ", not the Marlin MoE the kernel tables time there (SGLang 0.5.14-0.5.16), so the "
        "experts are priced by a stand-in; --engine-version 0.5.14 to 0.5.16 runs the timed "
        "kernel."
    )
)
# the metric families of kvplan.plans.intervals, as the sim-interval note names them
PROPAGATED_WORDS = {
    "throughput": "throughput",
    "ttft": "TTFT",
    "tpot": "TPOT/ITL",
    "e2el": "end-to-end latency",
}
text("sim-interval")(
    lambda evidence, calibrated, widen, parts=(), scales=(), propagated=(), untimed_fraction=None: (
        (
            f"No kernel table times {f.listing(parts)}: kvplan prices "
            f"{'it' if len(parts) == 1 else 'each'} by a stand-in (the datasheet roofline at "
            "the tables' fractions"
            + (
                "; under a backend flag, the kernels of the engine's own pick"
                if any(" under --" in p for p in parts)
                else ""
            )
            + "), and how far the real kernels land from "
            f"{'it' if len(parts) == 1 else 'them'} is not known to kvplan (untimed_parts in "
            "JSON). "
            if parts
            else ""
        )
        + f"Intervals (bench_interval in JSON): where 80% of real runs fall, from how far "
        f"published runs priced like this one ({EVIDENCE_WORDS.get(evidence.split('/')[0], evidence)}) "
        "landed from kvplan's figures: "
        + (
            "calibrated on runs of this class (kvplan/data/intervals.json). "
            if calibrated
            else "too few published runs of this class to calibrate it: the spread of every "
            "class but GPUs' own tables, widened by half. Loudly unsure. "
        )
        + (
            f"Those parts take {f.share(untimed_fraction)} of the simulated step time "
            "(the most of any rate simulated; each run's untimed_time_fraction in JSON): the "
            "interval is that of runs on this GPU's own "
            "tables with those parts' time anywhere between the fastest and the slowest "
            "factor on its stand-in that published partial runs asked for, so the less of the "
            "step they take, the narrower. "
            if untimed_fraction is not None
            else ""
        )
        + (
            f"Widened {widen:.2f}x: too few of those runs had this workload's length distribution. "
            if widen > 1
            else ""
        )
        + (
            f"The {f.listing([PROPAGATED_WORDS.get(p, p) for p in propagated])} intervals also "
            f"hold this run simulated again with every step {scales[0]:.2f}x and "
            f"{scales[1]:.2f}x as long (this class's TPOT ends): near saturation a queue "
            "stretches far more than the step does, far from it about as much. "
            if propagated and len(scales) == 2
            else ""
        )
        + "The interval need not hold the point: kvplan has been faster than most real runs."
    )
)
text("sim-expert-parallel")(
    lambda layout, dp, ep, experts_per_rank, gpus, router, engine="vllm", dp_lm_head=False, dense_mlp_whole=False, speculative=False, skip_mlp_sync=False: (
        f"Layout {layout} on {gpus} GPU(s) per group. "
        + (
            f"Each of the {dp} DP ranks has its own scheduler and KV pool (requests go to them "
            f"by {router.replace('_', ' ')}) and runs attention on its own batch, its weights "
            "replicated at the attention TP"
            + (
                " (the MLPs, router and head: below)"
                if engine == "sglang"
                else ", and the dense layers likewise"
            )
            + "; the MoE layers run on the gathered batch. The ranks step in lockstep, each step as long as the slowest "
            "rank's, an idle rank running a dummy batch (vLLM's of one token, SGLang's of none) "
            "(kvplan.formulas.batch_step.lockstep_step). "
            if dp > 1
            else ""
        )
        + (
            "SGLang's DP attention (no --moe-a2a-backend, so with or without --ep-size): before "
            "every layer's MLP, dense ones included, the ranks' hidden states are gathered over "
            "the whole group and after it handed back: in a step with a prefill, or with "
            "unbalanced ranks, two all-reduces of the summed rows (SUM_LEN); in balanced decode "
            "steps an all-gather and a reduce-scatter of the rows padded to the largest rank's "
            "(MAX_LEN); under CUDA graphs every rank is padded to the captured batch size of the "
            "largest rank's batch. The dense MLPs, shared experts, router and head run over the "
            "whole group on the gathered rows (1/G of their weights a GPU), the head's logits "
            "all-gathered over it. With DP attention SGLang divides chunked_prefill_size by the "
            "DP size and multiplies schedule_conservativeness by 0.3 (server_args), and divides a "
            "given --max-running-requests among the ranks (tp_worker; its own count is already "
            "a rank's). Not priced: "
            "the scheduler's all-gather of the ranks' batch sizes over the CPU group every step "
            "(prepare_mlp_sync_batch_raw; no kernel table times it). "
            if dp > 1 and engine == "sglang"
            else ""
        )
        + (
            "With speculative decoding SGLang never mixes prefill and decode batches in the "
            "group (scheduler.get_next_batch_to_run syncs the new prefill batches first): while "
            "any rank prefills, every other rank runs an idle batch and its requests wait. "
            "That sync and the decode batch's run on the GPUs' group (the overlap scheduler is "
            "off), serial with the step: two all-gathers a decode round, one a prefill batch, "
            "each one measured all-gather call. "
            if dp > 1 and engine == "sglang" and speculative and not skip_mlp_sync
            else ""
        )
        + (
            "--speculative-skip-dp-mlp-sync: SGLang skips the scheduler's sync of the new "
            "prefill batches (get_next_batch_to_run), so each rank runs what its own scheduler "
            "formed, prefill beside another's decode, and a decode round pays one all-gather of "
            "the ranks' batch facts on the GPUs' group, not two; in a mixed step the decoding "
            "ranks run their batches as extends (is_extend_in_batch), one token a sequence and "
            "no draft round. "
            if dp > 1 and engine == "sglang" and speculative and skip_mlp_sync
            else ""
        )
        + (
            "--enable-dp-lm-head: the head instead over each rank's attention TP group on its "
            "own rows (its weights split over that group alone), no gather over the group for "
            "it (logits_processor.py use_attn_tp_group). "
            if dp > 1 and dp_lm_head
            else ""
        )
        + (
            "--moe-dense-tp-size 1: the dense layers' MLPs instead whole on every GPU, on each "
            "rank's own rows, with no gather before those layers (ScatterMode SCATTERED). "
            if dp > 1 and dense_mlp_whole
            else ""
        )
        + (
            f"EP {ep}: each rank holds {experts_per_rank:g} routed experts and reads the ones "
            "its tokens touch (uniform routing: the expected share)"
            + (
                "."
                if dp > 1 and engine == "sglang"
                else "; every rank holds all the tokens and the layer's TP all-reduce sums "
                "the experts' partial outputs (SGLang without --moe-a2a-backend: no all-to-all)."
                if engine == "sglang"
                else ", the MoE layers' all-reduce replaced by a dispatch and a combine "
                "all-to-all of each token's hidden state to its top-k experts (bf16, the link's "
                "one-way bandwidth, one latency each)."
            )
            if ep > 1
            else "The experts are tensor-parallel over the group"
            + (
                "."
                if dp > 1 and engine == "sglang"
                else "; without EP each MoE layer all-gathers the ranks' hidden states before "
                "it and reduce-scatters after it."
            )
        )
        + " Expert load imbalance is not modelled."
    )
)
text("sim-multinode")(
    lambda nodes, node_gpus, network, one_way_bytes_per_s, latency_s, crossing, assumed: (
        f"The launch spans {nodes} nodes of {node_gpus} GPU(s), ranks numbered node by node as "
        "the engines place them. "
        + (
            "Crossing nodes: " + "; ".join(crossing) + ", priced on the inter-node link "
            if crossing
            else "No collective of a replica crosses nodes (each TP group and DP group fits one "
            "node); the inter-node link would be "
        )
        + f"{network} ({f.gbps_text(one_way_bytes_per_s)} one way per GPU, "
        f"{f.us_text(latency_s)} per message) at its datasheet rate: kvplan has no measured "
        "inter-node all-reduce or all-to-all table. TP all-reduces across nodes run in two levels "
        "(reduce-scatter and all-gather within the node, a ring all-reduce of each GPU's shard "
        "across nodes: kvplan.formulas.comm.tp_allreduce_time_s); EP all-to-alls send "
        "each token's expert copies bound for other nodes over the GPU's own network link, one "
        "copy per expert (DeepEP's one-copy-per-node dispatch is not modelled)."
        + (
            " The GPU's profile states no inter-node network: kvplan assumed the bundled "
            "datacenter profiles' 400 Gb/s InfiniBand NDR per GPU; give --network-gbps for "
            "the cluster's own."
            if assumed
            else ""
        )
    )
)
text("sim-dp-replicas")(
    lambda ranks, router: (
        f"Data parallel size {ranks}: independent engine replicas (a dense model under vLLM's -dp, "
        f"or SGLang's --dp-size without --enable-dp-attention), requests sent by "
        f"{router.replace('_', ' ')}."
    )
)
text("sim-moe-kernels")(
    lambda flag, tables, moe: (
        f"{flag}: the kernel tables ({tables}) time the MoE layers with the expert kernels NVIDIA's "
        "aiconfigurator measured for the engine's default MoE path, not per MoE backend, so this "
        "backend's kernels run at those rates here; how much faster or slower they are is not "
        "known to kvplan. kvplan checks the name and the launches the engine refuses for it, "
        "nothing else."
        if moe
        else f"{flag}: the model has no routed experts, so the engine's MoE backend is not used."
    )
)
text("sim-attention-kernels")(
    lambda backends, tables, kind: (
        f"{backends}: the kernel tables ({tables}) hold no kernel rows of this backend for "
        f"{kind} attention (NVIDIA's aiconfigurator did not time it on this GPU for this engine), "
        "so its attention runs at the kernels of the engine's own pick for this model and GPU "
        "here (its rows where the tables hold them, else the tables' fastest kernel per shape); "
        "how much faster or slower it is, is not known to kvplan. "
        "What the backend changes that kvplan models: its page size and whether CUDA graphs "
        "stay on."
    )
)
text("sim-attention-borrowed")(
    lambda parts, tables: (
        f"Borrowed: {f.listing(parts)}. The kernel tables ({tables}) hold no rows of "
        f"{'this backend' if len(parts) == 1 else 'these backends'} for this kind of attention, "
        "but a GPU of the same vendor ran the same kernels under the same engine version, and "
        "both GPUs ran them for the other kind: the calls are priced as that GPU's measured "
        "calls times this GPU's time over that GPU's at the calls both timed (by batch and KV "
        "bytes, prefill by units and tokens; kvplan/data/kernel_tables/transfer.json, "
        "scripts/derive_transfer.py). Not this GPU's own timing: the run is in the borrowed "
        "interval class."
    )
)
text("sim-nsa-backend-ignored")(
    lambda flags: (
        f"{flags}: ignored for this model, as SGLang ignores it: SGLang reads the NSA backends "
        "for DeepSeek sparse attention (DSA) models only, and this model has none, so the flag "
        "changes nothing in the launch or in these figures"
    )
)
text("sim-prefill-attention")(
    lambda timed, fractions, tables: " ".join(
        part
        for part in (
            (
                f"Prefill attention timed from its backend's measured prefill calls in the "
                f"kernel tables ({tables}; aiconfigurator's context-attention rows): {timed}. A "
                "step's chunks run as one call over their sequences x the query heads on a "
                "rank, each chunk as the prompt whose causal attention attends as many keys (a "
                "chunk over cached tokens or a window as the prompt of the same work), "
                "interpolated between measured calls, work-linear past the largest, and at "
                "least the chunks' KV read."
            )
            if timed
            else "",
            (
                f"Prefill attention at the kernel tables' ({tables}) fractions of the datasheet "
                f"rates (the roofline of its FLOPs and KV read, no measured call time) for "
                f"{fractions}."
            )
            if fractions
            else "",
        )
        if part
    )
)
text("sim-attention-cache-stand-in")(
    lambda stand_ins, tables: (
        "Attention on a cache dtype its backend's rows do not hold ("
        + tables
        + "): "
        + "; ".join(
            f"{backend}'s rows hold no {phase} call on the {cache} cache: its calls on the "
            f"{rows} cache stand in"
            + (", read by the KV bytes each sequence holds" if phase == "decode" else "")
            for phase, backend, cache, rows in stand_ins
        )
        + ". At the same bytes the two caches' kernels can differ several times over (H200 "
        "SGLang FA3 MLA decode at 128 sequences of 4 MiB: bf16 0.157 ms, fp8 2.04 ms), so these "
        "steps are unsure beyond the interval."
    )
)
text("sim-attention-timed")(
    lambda backends, tables, version: (
        f"Attention timed per backend from its own kernels in the kernel tables ({tables}; "
        f"aiconfigurator's rows measured on engine version {version}): {backends}. Each decode "
        "call takes at least the median measured call over as many sequences reading as many KV "
        "bytes each (interpolated), "
        "its smallest call at 1-16 sequences, and the backend's own fractions of the datasheet "
        "rates; a phase not listed runs the default tables' kernels."
    )
)
