"""kvplan's vLLM 0.19 memory prediction against real start-up logs (tests/data/vllm_0.19_h100).

For each logged run: predicted minus logged "Available KV cache memory" (rank 0), and the same for
each term of the profile line (weights, torch peak, non-torch), then the median and worst absolute
error overall and by kind (TP, MoE, quantized, fp32). Run: python scripts/vllm_log_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vllm_logs import cases, covered, evaluate, load_case_model, summary  # noqa: E402


def kinds(row) -> list[str]:
    case = row.case
    spec = load_case_model(case)
    out = [f"TP{case.tp}" if case.pp == 1 else f"PP{case.pp}"]
    if spec.moe is not None:
        out.append("MoE")
    if case.weights_dtype != "auto" or case.args.get("quantization") or spec.weights_quantization:
        out.append("quantized")
    if case.args.get("dtype") == "float32":
        out.append("fp32")
    if spec.vision_params:
        out.append("multimodal")
    return out


def main() -> None:
    rows = [evaluate(c) for c in covered()]
    print(f"{'run':58s} {'avail':>7s} {'weights':>8s} {'peak':>7s} {'nontorch':>8s} {'tokens':>7s}")
    for r in sorted(rows, key=lambda r: -abs(r.available_error_gib)):
        tokens = f"{r.tokens_ratio:.3f}" if r.tokens_ratio else "-"
        print(
            f"{r.case.label[:58]:58s} {r.available_error_gib:+7.2f} {r.weights_error_gib:+8.2f} "
            f"{r.peak_error_gib:+7.2f} {r.non_torch_error_gib:+8.2f} {tokens:>7s}"
        )
    print()
    groups = {"all": rows}
    for r in rows:
        for k in kinds(r):
            groups.setdefault(k, []).append(r)
    print(f"{'group':12s} {'runs':>5s} {'median':>7s} {'worst':>7s} {'<=0.25':>7s} {'<=1':>5s}")
    for name, group in groups.items():
        s = summary(group)
        print(
            f"{name:12s} {s['cases']:5d} {s['median_abs_gib']:7.3f} {s['worst_abs_gib']:7.3f} "
            f"{s['within_0.25']:7d} {s['within_1']:5d}"
        )
    skipped = [c for c in cases() if c.config is None]
    if skipped:
        print(
            f"\nnot covered ({len(skipped)}): "
            + "; ".join(f"{c.model} ({c.not_covered})" for c in skipped)
        )


if __name__ == "__main__":
    main()
