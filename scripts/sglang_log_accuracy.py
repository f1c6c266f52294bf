"""kvplan's SGLang prediction against real start-up logs (tests/data/sglang_logs.json): the KV
line for the logged token count, the token count from the log's memory figures (pool) and from
the config alone (full). python scripts/sglang_log_accuracy.py"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sglang_logs import cases, evaluate, summary  # noqa: E402


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.2f}%"


def main() -> None:
    rows = [evaluate(c) for c in cases()]
    header = ("case", "GPU", "TP", "logged", "pool", "pool err", "full", "full err", "KV line")
    table = [header]
    for r in rows:
        c = r.case
        kv = "too old" if r.cell_ok is None else ("exact" if r.cell_ok else "DIFFERS")
        table.append(
            (
                c.id,
                c.gpu or "other",
                str(c.args["tp_size"]),
                f"{c.tokens:,}",
                "—" if r.pool_tokens is None else f"{r.pool_tokens:,}",
                _pct(r.pool_error),
                "—" if r.full_tokens is None else f"{r.full_tokens:,}",
                _pct(r.full_error),
                kv,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    s = summary(rows)
    print(
        f"\n{s['cases']} logs; KV line exact {s['cell_exact']}/{s['cell_checked']}; "
        f"pool median {s['pool_median_abs'] * 100:.3f}%, worst {s['pool_worst_abs'] * 100:.3f}%; "
        f"full median {s['full_median_abs'] * 100:.2f}%, worst {s['full_worst_abs'] * 100:.2f}%"
    )
    for r in rows:
        if r.case.too_old:
            print(f"\n{r.case.id}: {r.case.too_old}")


if __name__ == "__main__":
    main()
