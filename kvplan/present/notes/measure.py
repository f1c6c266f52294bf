"""The words of kvplan measure: its method, the checks against a baseline, the distributed run. Made
in kvplan/measure/run.py and distributed.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("measure-method")(
    lambda rounds, probes: (
        f"Predicted per operator: max(bytes / bandwidth, FLOPs / throughput at the operator's "
        f"shape) + launches x overhead, summed over the step, from a profile of {probes} probes "
        "(streams, generic skinny and prefill GEMMs, attention over other lengths, a launch); no "
        f"point's own timing enters it. Probes and points ran in the same {rounds} interleaved "
        "rounds (drift and background load hit both alike); times are each item's 25th "
        "percentile (load only ever slows a call), medians and p20/p80 in the JSON. error = "
        "predicted / measured - 1."
    )
)
text("measure-workload")(
    lambda model, layers, dtype, weight_bytes: (
        f"Workload: {model}, {layers} layer(s) built from the widths its config states "
        f"({f.gb_text(weight_bytes)} of {dtype} weights), no embeddings and no output head."
    )
)
text("measure-threads")(
    lambda threads, busy, cpus, clock: (
        f"{threads} thread(s)"
        + (
            f": {cpus} usable CPUs, {busy:.1f} kept busy by other processes at the start, one "
            "left free (a thread layout that does not oversubscribe)"
            if busy is not None
            else " (as given)"
        )
        + {
            "thread_cpu": "; times are what the thread ran (its CPU time), so that waiting "
            "for another process is not charged to the step or the probe.",
            "wall": "; wall-clock times.",
            "cuda_events": "; CUDA event times, the L2 flushed before each call.",
        }[clock]
    )
)
text("measure-bandwidth")(
    lambda probe: (
        f"Stream bandwidth from the fastest streaming probe ({probe}); a GEMM's weights stream "
        "at the batch-1 product's rate over a generic matrix, which on CPUs is well below STREAM."
    )
)
text("measure-gather")(
    lambda: (
        "The paged attention gathers its pages into a cache-sized buffer, then attends: the "
        "gather is priced as memory (KV bytes / stream bandwidth), the attention as compute."
    )
)
text("measure-cpu-fp32")(
    lambda fast_bf16: (
        "Measured in fp32: CPU bf16 kernels measure slow kernels, not memory"
        + (" (even with AVX512-BF16 here)" if fast_bf16 else "")
        + "; bf16 bytes are accounted for analytically by the planner."
    )
)
text("measure-no-datasheet")(
    lambda: (
        "No hardware profile matched this device: the datasheet column is empty (pass --gpu "
        "PROFILE; --save-profile writes this device's)."
    )
)
text("measure-confirm")(
    lambda why, median, worst, passed, regressions, regressed_first: (
        (
            f"Measured twice (--confirm): the first run missed the check (median |error| "
            f"{median:.1%}, worst {worst:.1%}); this second run "
            + ("passed it: the miss was load, not the prediction." if passed else "missed too.")
        )
        if why == "check"
        else (
            "Measured twice (--confirm): the first run regressed against the baseline ("
            + ", ".join(regressed_first)
            + "); "
            + (
                f"{regressions} figure(s) regressed in both runs."
                if regressions
                else "no figure regressed in both runs: load, not a regression."
            )
        )
    )
)
text("check-median")(
    lambda error, tolerance: (
        f"The check misses (predictions vs this device): the median |error| is {error:.1%}, above "
        f"the {tolerance:.0%} tolerance."
    )
)
text("check-worst")(
    lambda error, tolerance, phase, batch, context: (
        f"The check misses (predictions vs this device): {phase} at batch {batch}, {context:,} "
        f"tokens is off by {error:+.1%}, beyond the worst-point tolerance of {tolerance:.0%}."
    )
)
text("check-no-memory-point")(
    lambda: (
        "The check is blind (kvplan's self-test, not its predictions): no point is memory-bound, "
        "so wrong bytes could not show: add a batch-1 decode point."
    )
)
text("check-mutation-missed")(
    lambda mutation, median, worst: (
        f"The check is blind (kvplan's self-test, not its predictions): with {mutation} on "
        f"purpose the gate would still pass (median {median:.1%}, worst {worst:.1%}), so on this "
        "device these points cannot see such a mistake. The predictions are judged by the "
        "median and worst |error| of the check line."
    )
)
text("check-profile-off")(
    lambda median, worst: (
        f"The check misses (the --gpu profile vs this device): the given profile's predictions "
        f"miss "
        f"by a median {median:.1%} (worst {worst:.1%})."
    )
)
text("check-link-worst")(
    lambda operation, error, tolerance: (
        f"The check misses: {operation} is off by {error:+.1%}, beyond the worst-point tolerance of "
        f"{tolerance:.0%}."
    )
)
text("distributed-method")(
    lambda ranks, backend, device, runs, rounds, latency_s, bandwidth, calibration: (
        f"{ranks} ranks, {backend} on {device}, loopback TCP rendezvous; after a warm-up, "
        f"{rounds} rounds of {runs} interleaved samples of every operation (a barrier before "
        "each sample, the order rotated each round); a round's time is its 25th-percentile "
        "sample (load only ever slows a call), an operation's time the median of its round "
        "times. The alpha-beta link "
        f"({f.us_text(latency_s, 1)} per ring step, {f.gbps_text(bandwidth, 2)} one way) is "
        "fitted to all-reduces of "
        + ", ".join(f"{size:,}" for size in calibration)
        + " bytes, none of them a reported size; the reported all-reduces (ring: "
        "2(N-1) a + 2(N-1)/N M / B) and the KV transfer (a + M / B) are predictions."
    )
)
text("distributed-rounds")(
    lambda rounds, spread, error_spread, allowance, tolerance, noisy, mutations: (
        f"The check allows for the noise its {rounds} rounds measured. Between rounds the "
        f"operations' times spread by {spread:.1%} (median over the operations, half the "
        "p20-p80 range of their round times), but load that slows a whole round slows its "
        "calibration alike: predicted by each round's own fitted link, the rows' predicted / "
        f"measured spread by {error_spread:.1%} (median). A row's noise is two standard errors "
        "of its median error (1.25 sigma / sqrt(rounds), sigma from its spread); the median "
        "|error| may reach the tolerance plus the judged rows' median noise "
        f"({tolerance:.0%} + {allowance:.1%}), a row twice the tolerance plus its own noise. "
        + (
            f"Noisy, not judged (noise above the {tolerance:.0%} tolerance: its rounds disagree "
            "more than the check can allow): " + "; ".join(noisy) + ". "
            if noisy
            else "Every row judged (none noisier than the tolerance). "
        )
        + "Self-test, the same rows predicted by a wrong link: "
        + "; ".join(
            f"{name}, median |error| {median:.1%}, worst {worst:.1%}"
            for name, median, worst in mutations
        )
        + "."
    )
)
text("distributed-reduce")(
    lambda rate: (
        "gloo reduces on the host: each rank adds (N-1)/N of the message into its buffer, at the "
        f"{f.gbps_text(rate, 1)} a local add reached on the rank; without that term large "
        "all-reduces are under-predicted (the alpha-beta-only column)."
    )
)
text("distributed-no-reduce")(
    lambda: "NCCL reduces on the GPU, overlapped with the transfer: no host reduction term."
)
text("distributed-sizes")(
    lambda hidden, model, context, kv_bytes: (
        f"All-reduce messages are batch x hidden ({hidden:,}) bf16 activations of {model}, what "
        "a TP decode step reduces twice per layer (gloo carries them as fp32 of the same byte "
        f"count); the KV transfer is one {context:,}-token {model} request's whole cache "
        f"({f.bytes_text(kv_bytes)}), as a disaggregated prefill sends it."
    )
)
text("distributed-send")(
    lambda latency_s, bandwidth, sizes: (
        "The KV transfer is predicted from point-to-point sends of "
        + ", ".join(f.bytes_text(size) for size in sizes)
        + f" (fitted: {f.us_text(latency_s, 1)} + M / {f.gbps_text(bandwidth, 2)})."
    )
)
