"""`kvplan simulate` in words: `vllm bench serve`'s result block (its labels, its units), what the
engine would show, a row per request rate, and the comparison with a technique toggled; the
charts of latency and throughput against the rate and of KV usage and queue over time."""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.plans.simulate import Run, SimulateResult
from kvplan.present import format as f
from kvplan.present.view import Column, Table, View, jsonable, view
from kvplan.units import MIB

# `vllm bench serve`'s printed labels, in its order, with the --save-result key of each
BENCH_LINES = (
    ("Successful requests:", "completed", f.integer),
    ("Failed requests:", "failed", f.integer),
    ("Benchmark duration (s):", "duration", f.fixed(2)),
    ("Total input tokens:", "total_input_tokens", f.integer),
    ("Total generated tokens:", "total_output_tokens", f.integer),
    ("Request throughput (req/s):", "request_throughput", f.fixed(2)),
    ("Output token throughput (tok/s):", "output_throughput", f.fixed(2)),
    ("Peak output token throughput (tok/s):", "max_output_tokens_per_s", f.fixed(2)),
    ("Peak concurrent requests:", "max_concurrent_requests", f.fixed(2)),
    ("Total Token throughput (tok/s):", "total_token_throughput", f.fixed(2)),
)
LATENCIES = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2EL", "e2el"))
TERM_LABELS = {
    "weights_s": "streaming weights",
    "matmul_s": "matmul compute",
    "kv_read_s": "reading the KV cache",
    "attention_s": "attention compute",
    "sampler_s": "sampler",
    "comm_s": "TP/PP communication",
    "launch_s": "kernel launches",
    "host_s": "scheduler (CPU)",
}


def bench_facts(run: Run) -> list[tuple[str, str]]:
    """The result block as `vllm bench serve` prints it, then the engine's own figures."""
    b = run.bench._asdict()
    facts = [(label, fmt(b[key])) for label, key, fmt in BENCH_LINES]
    for name, key in LATENCIES:
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p99", "P99")):
            facts.append((f"{label} {name} (ms):", f.fixed(2)(b[f"{stat}_{key}_ms"])))
    e = run.engine
    facts += [
        ("Peak KV cache usage:", f.share(e.peak_kv_usage)),
        ("Preemptions:", f.integer(e.preemptions)),
        ("Prefix cache hit rate:", f.share(e.prefix_hit_rate)),
        ("Mean running requests:", f.fixed(1)(e.mean_running_requests)),
        ("Mean waiting requests:", f.fixed(1)(e.mean_waiting_requests)),
        ("Mean queue wait (ms):", f.fixed(2)(e.mean_queue_ms)),
        ("API server busy:", f.share(e.frontend_busy_fraction)),
    ]
    return facts


# the figures whose 80% interval is printed after the bench block (JSON: every numeric key)
INTERVAL_LINES = (
    ("output throughput (tok/s)", "output_throughput", f.fixed(1)),
    ("median TTFT (ms)", "median_ttft_ms", f.fixed(1)),
    ("median TPOT (ms)", "median_tpot_ms", f.fixed(2)),
    ("median E2EL (ms)", "median_e2el_ms", f.fixed(0)),
)


def interval_text(run: Run, key: str, fmt) -> str | None:
    """ "lo-hi" of a bench key's 80% interval, or None where the run has none."""
    pair = (run.bench_interval or {}).get(key)
    if pair is None:
        return None
    return f"{fmt(pair[0])}-{fmt(pair[1])}"


def interval_facts(run: Run) -> list[tuple[str, str]]:
    """The 80% interval of the headline figures, beside their points."""
    facts = []
    b = run.bench._asdict()
    for label, key, fmt in INTERVAL_LINES:
        span = interval_text(run, key, fmt)
        if span is not None and b[key] is not None:
            facts.append((f"80% interval, {label}:", f"{span} (point {fmt(b[key])})"))
    return facts


def _disagg_row(run: Run) -> dict:
    """One run's transfers and pools, for the bench block and for the table."""
    d = run.disaggregated
    assert d is not None, "called for disaggregated runs"
    return {
        "request_rate": run.bench.request_rate,
        "transfers": d.transfers,
        "transfer_bytes": d.mean_transfer_bytes or 0,
        "transfer_mib": (d.mean_transfer_bytes or 0) / MIB,
        "transfer_median_ms": d.transfer.median_ms,
        "transfer_p99_ms": d.transfer.p99_ms,
        "link_wait_median_ms": d.link_wait.median_ms,
        "link_wait_p99_ms": d.link_wait.p99_ms,
        "kv_wait_median_ms": d.kv_wait.median_ms,
        "prefill_ttft_median_ms": d.prefill_ttft.median_ms,
        "link_busy": d.link_busy_fraction,
        "prefill_busy": d.prefill.engine_busy_fraction,
        "decode_busy": run.engine.engine_busy_fraction,
        "prefill_peak_kv": d.prefill.peak_kv_usage,
        "decode_peak_kv": run.engine.peak_kv_usage,
        "prefill_preemptions": d.prefill.preemptions,
    }


# the bench block's lines after the run's own: (label, row key, format)
DISAGG_FACTS = (
    ("KV transfers:", "transfers", f.integer),
    ("Mean KV per transfer:", "transfer_bytes", f.bytes_text),
    ("Median transfer (ms):", "transfer_median_ms", f.fixed(2)),
    ("P99 transfer (ms):", "transfer_p99_ms", f.fixed(2)),
    ("Median link wait (ms):", "link_wait_median_ms", f.fixed(2)),
    ("P99 link wait (ms):", "link_wait_p99_ms", f.fixed(2)),
    ("Median KV wait at decode (ms):", "kv_wait_median_ms", f.fixed(2)),
    ("Median prefill-replica TTFT (ms):", "prefill_ttft_median_ms", f.fixed(2)),
    ("Link busy (busiest):", "link_busy", f.share),
    ("Prefill pool busy:", "prefill_busy", f.share),
    ("Decode pool busy:", "decode_busy", f.share),
    ("Prefill peak KV cache usage:", "prefill_peak_kv", f.share),
    ("Decode peak KV cache usage:", "decode_peak_kv", f.share),
    ("Prefill preemptions:", "prefill_preemptions", f.integer),
)


def disagg_facts(run: Run) -> list[tuple[str, str]]:
    """The transfers and the pools, after the bench block."""
    row = _disagg_row(run)
    header = ("", "------- Disaggregated prefill/decode (KV transfer) -------")
    return [header, *((label, fmt(row[key])) for label, key, fmt in DISAGG_FACTS)]


DISAGG_COLUMNS = [
    Column("request_rate", "rate (req/s)", f.text),
    Column("transfers", "transfers", f.integer),
    Column("transfer_mib", "KV each (MiB)", f.fixed(1)),
    Column("transfer_median_ms", "transfer med (ms)", f.fixed(2)),
    Column("transfer_p99_ms", "transfer p99 (ms)", f.fixed(2)),
    Column("link_wait_p99_ms", "link wait p99 (ms)", f.fixed(2)),
    Column("kv_wait_median_ms", "KV wait med (ms)", f.fixed(2)),
    Column("prefill_ttft_median_ms", "prefill TTFT med (ms)", f.fixed(1)),
    Column("link_busy", "link busy", f.share),
    Column("prefill_busy", "prefill busy", f.share),
    Column("decode_busy", "decode busy", f.share),
    Column("prefill_peak_kv", "prefill peak KV", f.share, priority=1),
    Column("decode_peak_kv", "decode peak KV", f.share, priority=1),
]


def disagg_table(result: SimulateResult) -> Table:
    keys = [c.key for c in DISAGG_COLUMNS]
    rows = [{k: v for k, v in _disagg_row(run).items() if k in keys} for run in result.runs]
    title = "disaggregated prefill/decode: KV transfers and pools"
    return Table(title, DISAGG_COLUMNS, rows, notes=("sim-disaggregated",))


def step_shares(shares: dict) -> str:
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{TERM_LABELS[k]} {f.share(v)}" for k, v in ranked if v >= 0.005)


def simulate_view(result: SimulateResult) -> View:
    s = result.setup
    deployment = f"{s.gpu} x {s.num_gpus} (TP {s.tp}, PP {s.pp}"
    if s.prefill_replicas:
        deployment += (
            f"; disaggregated: {s.prefill_replicas} prefill + {s.decode_replicas} decode "
            f"replicas, {s.router} router)"
        )
    elif result.parallel is not None and result.parallel["dp"] > 1:
        # DP ranks in lockstep share one replica's GPUs (SGLang's --enable-dp-attention: TP T
        # over T GPUs, not T x N): "2 replicas" of "TP 2" on 2 GPUs read as 4 GPUs
        deployment += f", {s.replicas} DP ranks in lockstep, {s.router} router)"
    elif s.replicas > 1:
        deployment += f", {s.replicas} replicas, {s.router} router)"
    else:
        deployment += ")"
    if s.interconnect and s.interconnect_bytes_per_s is not None and s.tp * s.pp > 1:
        deployment += f", {s.interconnect} ({f.gbps_text(s.interconnect_bytes_per_s)} per GPU)"
    if s.nodes > 1 and s.network_bytes_per_s is not None:
        deployment += (
            f"; over {s.nodes} nodes of {s.node_gpus} GPUs, {s.network} "
            f"({f.gbps_text(s.network_bytes_per_s)} per GPU) between them"
        )
    facts = [
        ("model", result.model["hf_id"] or result.model["name"]),
        ("deployment", deployment),
        ("engine", _engine_fact(s, result.notes)),
        (
            "KV cache",
            f"{s.kv_cache_tokens:,} tokens per "
            f"{'DP rank' if result.parallel is not None and result.parallel['dp'] > 1 else 'replica'}"
            f" ({s.num_blocks:,} blocks of "
            f"{s.block_size}), kv-cache-dtype {s.kv_cache_dtype}, weights {s.weights_dtype}",
        ),
        (
            "techniques",
            ", ".join(
                f"{name} {'on' if on else 'off'}"
                for name, on in (
                    ("continuous batching", s.continuous_batching),
                    ("chunked prefill", s.enable_chunked_prefill),
                    ("prefix caching", s.enable_prefix_caching),
                    ("preemption", s.preemption),
                )
            ),
        ),
        ("workload", workload_text(result)),
        ("engine time", step_shares(result.runs[-1].engine.step_time_shares)),
    ]
    if len(result.runs) == 1:
        facts.append(("", "============ Serving Benchmark Result ============"))
        facts += bench_facts(result.runs[0])
        facts += interval_facts(result.runs[0])
        if result.runs[0].disaggregated is not None:
            facts += disagg_facts(result.runs[0])
    tables = [rates_table(result)]
    if s.prefill_replicas:
        tables.append(disagg_table(result))
    if s.replicas > 1:
        tables.append(replica_table(result))
    data = jsonable(result._replace(step_log=None))
    data.pop("step_log")  # its own file (--step-log)
    if s.nodes == 1:  # one node: the JSON as before
        for key in ("nodes", "node_gpus", "network", "network_bytes_per_s"):
            data["setup"].pop(key)
    if s.speculative is None:
        data["setup"].pop("speculative")  # no speculative decoding: the JSON as before
    else:
        sp = s.speculative
        facts.insert(
            3,
            (
                "speculative",
                f"{sp['method']}{' ' + sp['draft'] if sp['draft'] else ''}: "
                f"{sp['num_steps']} draft step(s)"
                + (f" x {sp['topk']} branches" if sp["topk"] > 1 else "")
                + f", {sp['verify_tokens']} tokens verified, "
                f"{sp['tokens_per_round']:.2f} tokens per round ({sp['acceptance']}); "
                f"draft {f.gib_text(sp['draft_weight_bytes'])} weights per GPU "
                f"({' '.join(sp['launch'])})",
            ),
        )
    if not result.borrowed_parts:
        data.pop("borrowed_parts")  # nothing borrowed: the JSON as before
    if result.parallel is None:
        data.pop("parallel")  # plain TP: the JSON as before
    else:
        facts.insert(2, ("parallel", result.parallel["text"]))
    if result.comparison is not None:
        tables.append(comparison_table(result))
    title = f"Simulated serving of {result.model['name']} on {s.gpu}"
    return view(title, result, facts, tables, data=data)


def workload_text(result: SimulateResult) -> str:
    w = result.workload
    if w.input_len is None:
        text = w.source
    else:
        text = f"{w.num_prompts:,} prompts, {w.source} lengths: input {w.input_len:,}, output "
        if w.source in ("vllm-random", "sglang-random"):
            text += f"{w.output_len:,} (random-range-ratio {w.spread:g}, seed {w.seed})"
        else:
            text += f"{w.output_len:,}" + (f" (spread {w.spread:g})" if w.spread else "")
        if w.prefix_len:
            text += f", {w.prefix_len:,}-token shared prefix x {w.num_prefixes}"
        if w.turns > 1:
            text += f", {w.turns}-turn conversations"
    if w.warm_prefix_cache:
        text += ", shared prefixes cached at the start (warm server)"
    if w.max_concurrency:
        text += f", at most {w.max_concurrency:,} in flight"
    return text


RATE_COLUMNS = [
    Column("request_rate", "rate (req/s)", f.text),
    Column("request_throughput", "req/s", f.fixed(2)),
    Column("output_throughput", "output tok/s", f.fixed(1)),
    Column(
        "output_throughput_80",
        "80% interval",
        f.text,
        raw_keys=("output_throughput_low", "output_throughput_high"),
    ),
    Column("median_ttft_ms", "TTFT med (ms)", f.fixed(1)),
    Column("p99_ttft_ms", "TTFT p99 (ms)", f.fixed(1)),
    Column("median_tpot_ms", "TPOT med (ms)", f.fixed(2)),
    Column("p99_tpot_ms", "TPOT p99 (ms)", f.fixed(2)),
    Column("median_itl_ms", "ITL med (ms)", f.fixed(2)),
    Column("p99_e2el_ms", "E2EL p99 (ms)", f.fixed(0)),
    Column("peak_kv_usage", "peak KV", f.share),
    Column("preemptions", "preempted", f.integer),
    Column("prefix_hit_rate", "prefix hits", f.share),
    Column("mean_running_requests", "running", f.fixed(1)),
]


def _row(run: Run, **extra) -> dict:
    row = {**jsonable(run.bench), **jsonable(run.engine), **extra}
    row["output_throughput_80"] = interval_text(run, "output_throughput", f.fixed(0))
    low, high = (run.bench_interval or {}).get("output_throughput") or (None, None)
    row["output_throughput_low"], row["output_throughput_high"] = low, high
    return row


def rates_table(result: SimulateResult) -> Table:
    return Table("by request rate", RATE_COLUMNS, [_row(r) for r in result.runs])


def replica_table(result: SimulateResult) -> Table:
    rows = []
    for run in result.runs:
        pools = [("", run.engine.replicas)]
        if run.disaggregated is not None:
            pools = [("prefill", run.disaggregated.prefill.replicas), ("decode", pools[0][1])]
        for pool, replicas in pools:
            for rep in replicas:
                rows.append({"request_rate": run.bench.request_rate, "pool": pool, **rep._asdict()})
    pool_column = [Column("pool", "pool", f.text, "left")] if result.setup.prefill_replicas else []
    return Table(
        "by replica",
        [
            Column("request_rate", "rate (req/s)", f.text),
            *pool_column,
            Column("replica", "replica", f.integer),
            Column("requests", "requests", f.integer),
            Column("prefix_hit_rate", "prefix hits", f.share),
            Column("preemptions", "preempted", f.integer),
            Column("peak_kv_usage", "peak KV", f.share),
        ],
        rows,
    )


def comparison_table(result: SimulateResult) -> Table:
    c = result.comparison
    assert c is not None, "called for --compare"
    rows = []
    for label, on, runs in (
        ("as set", c.baseline_on, result.runs),
        ("toggled", not c.baseline_on, c.runs),
    ):
        for run in runs:
            hits = [r.prefix_hit_rate for r in run.engine.replicas]
            rows.append(
                _row(
                    run,
                    variant=f"{c.technique} {'on' if on else 'off'} ({label})",
                    replica_hit_rates=" / ".join(f.share(h) for h in hits),
                )
            )
    columns = [Column("variant", "variant", f.text, "left"), *RATE_COLUMNS]
    if c.technique == "cache-aware-routing":
        columns.append(Column("replica_hit_rates", "hits by replica", f.text, "left"))
    return Table(f"with and without {c.technique}", columns, rows)


def _offered_rate(run: Run, fastest: float) -> float:
    """A run's x on the throughput plot: its request rate; "inf" at the fastest achieved rate,
    a trace (its own arrival times, no rate) at its achieved rate."""
    rate = run.bench.request_rate
    if rate is None:
        return run.bench.request_throughput
    return fastest if rate == "inf" else float(rate)


def simulate_plots(result: SimulateResult, plot: Path | None, timeline: Path | None) -> None:
    """--plot: latency percentiles and throughput against the request rate; --timeline: KV
    usage, running and waiting requests over time (the last rate, replica 0)."""
    from kvplan.present.plots import _check_path, _pyplot, _save

    if plot is not None:
        _check_path(plot)
        plt = _pyplot()
        runs = [r for r in result.runs if r.bench.request_rate != "inf"] or result.runs
        x = [r.bench.request_throughput for r in runs]
        fig, (lat, thr) = plt.subplots(1, 2, figsize=(11, 4.5))
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL")):
            for stat, style in (("median", "-"), ("p99", "--")):
                values = [getattr(r.bench, f"{stat}_{key}_ms") for r in runs]
                lat.plot(x, values, style, marker="o", label=f"{label} {stat}")
        lat.set_yscale("log")
        lat.set_xlabel("achieved request rate (req/s)")
        lat.set_ylabel("latency (ms)")
        lat.grid(True, which="both", alpha=0.3)
        lat.legend(fontsize=8)
        thr.plot(
            [_offered_rate(r, max(x)) for r in runs],
            [r.bench.output_throughput for r in runs],
            marker="o",
        )
        thr.set_xlabel("offered request rate (req/s)")
        thr.set_ylabel("output throughput (tok/s)")
        thr.grid(True, alpha=0.3)
        fig.suptitle(
            f"{result.model['name']} on {result.setup.gpu}: simulated {'SGLang' if result.setup.engine == 'sglang' else 'vLLM'}",
            fontsize=10,
        )
        fig.tight_layout()
        _save(fig, plot)
    if timeline is not None:
        _check_path(timeline)
        series = result.runs[-1].series
        if series is None or not series.time_s:
            return
        plt = _pyplot()
        fig, (kv, queue) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
        kv.plot(series.time_s, [u * 100 for u in series.kv_usage], color="tab:blue")
        kv.set_ylabel("KV cache usage (%)")
        kv.set_ylim(0, 105)
        kv.grid(True, alpha=0.3)
        queue.plot(series.time_s, series.running, label="running")
        queue.plot(series.time_s, series.waiting, label="waiting")
        queue.set_xlabel("time (s)")
        queue.set_ylabel("requests")
        queue.grid(True, alpha=0.3)
        queue.legend(fontsize=8)
        fig.suptitle(f"{result.model['name']}: KV usage and queue over time", fontsize=10)
        fig.tight_layout()
        _save(fig, timeline)


def _engine_fact(s, notes=()) -> str:
    if s.engine == "sglang":
        return (
            f"SGLang {s.engine_version} scheduler: max_running_requests {s.max_num_seqs:,}, "
            f"chunked_prefill_size "
            f"{s.max_num_batched_tokens:,}, context_length {s.max_model_len:,}, "
            f"mem_fraction_static {s.mem_fraction_static:g}, "
            f"{'overlap' if s.async_scheduling else 'no overlap'} scheduling"
        )
    from kvplan.engines.vllm_v0 import v0_release

    fallback = any(n.id == "sim-vllm-08-v0" for n in notes)  # 0.8's engine oracle chose V0
    kind = "V1" if v0_release(str(s.engine_version)) is None and not fallback else "V0"
    return (
        f"vLLM {kind} scheduler ({s.engine_version} rules): max_num_seqs {s.max_num_seqs:,}, "
        f"max_num_batched_tokens "
        f"{s.max_num_batched_tokens:,}, max_model_len {s.max_model_len:,}, "
        f"{'async' if s.async_scheduling else 'synchronous'} scheduling"
    )


def step_log_text(result: SimulateResult) -> str:
    """The --step-log file: the schedule as JSON, one step a line (diffs stay readable)."""
    if result.step_log is None:
        raise KvplanError("this simulation kept no step log (SimulateRequest.step_log)")
    head = {k: v for k, v in result.step_log.items() if k != "steps"}
    lines = [json.dumps(step, separators=(", ", ": ")) for step in result.step_log["steps"]]
    return json.dumps(head)[:-1] + ', "steps": [\n' + ",\n".join(lines) + "\n]}\n"
