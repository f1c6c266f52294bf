"""Charts (matplotlib, imported only here and only when a plot is asked for)."""

from __future__ import annotations

from pathlib import Path

from kvplan.atomic import check_target, write_atomic
from kvplan.errors import KvplanError
from kvplan.present.format import tokens
from kvplan.present.output import say_written
from kvplan.units import TFLOP


def have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        # every text drawn as written: names from inputs (a model folder, a GPU profile) may hold
        # `$`, which mathtext would parse (an unknown symbol fails the whole chart)
        matplotlib.rcParams["text.parse_math"] = False
        import matplotlib.pyplot as plt
    except ImportError:
        raise KvplanError(
            "plotting needs matplotlib: pip install matplotlib (or, in a clone of kvplan, "
            "pip install '.[plot]')"
        ) from None
    return plt


def _check_path(path: Path) -> None:
    if path.suffix.lower() not in (".png", ".svg"):
        raise KvplanError(f"--plot {path}: the file must end in .png or .svg")
    check_target(path, "--plot")


def check_plot_path(path: Path) -> None:
    """Refuse a --plot path before any work (its suffix, a target that cannot be written)."""
    _check_path(path)


def _save(fig, path: Path) -> None:
    """Write the chart atomically (a temporary file renamed over the target)."""
    plt = _pyplot()
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lower()[1:]), "--plot")
    finally:
        plt.close(fig)
    say_written(path, always=False)


def roofline_plot(data: dict, path: Path) -> None:
    """Log-log roofline of the device with the model's prefill and decode points labelled."""
    _check_path(path)
    plt = _pyplot()
    gpu = data["gpu"]
    peak, bw = gpu["peak_flop_per_s"], gpu["memory_bandwidth_bytes_per_s"]
    ridge = gpu["ridge_flop_per_byte"]
    points = [("prefill", data["prefill"])] + [
        (f"decode B={d['batch_size']} s={d['context_len']:,}", d)
        for d in data["decode"]
        if d.get("fits", True)  # a batch whose cache does not fit cannot run: not drawn
    ]
    xs = [p["arithmetic_intensity_flop_per_byte"] for _, p in points]
    lo, hi = min(xs + [ridge]) / 4, max(xs + [ridge]) * 4
    fig, ax = plt.subplots(figsize=(10, 5.5))
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(
        grid,
        [min(peak, bw * x) / TFLOP for x in grid],
        color="black",
        lw=2,
        label=f"{gpu['name']} roof",
    )
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    floor = min(bw * lo, peak) / TFLOP
    ax.annotate(
        f"ridge {ridge:,.0f} FLOP/B",
        (ridge, floor),
        xytext=(4, 4),
        textcoords="offset points",
        fontsize=8,
        color="grey",
    )
    for label, p in points:
        x = p["arithmetic_intensity_flop_per_byte"]
        y = p["flops"] / p["time_floor_s"] / TFLOP
        marker = "s" if label == "prefill" else "o"
        ax.scatter([x], [y], s=36, zorder=3, marker=marker, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable throughput (TFLOP/s)")
    tp = f" x {data['tp']} (per GPU)" if data.get("tp", 1) > 1 else ""
    ax.set_title(
        f"{data['model']['name']} on {gpu['name']}{tp}, weights {data['weights_dtype']}, "
        f"KV {data['kv_dtype']}",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def capacity_plot(series: dict[str, list[tuple[int, int]]], title: str, path: Path) -> None:
    """Maximum concurrent sequences against context length, one line per KV dtype."""
    _check_path(path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1)  # symlog: zero (nothing fits) stays on the chart
    ax.set_ylim(bottom=0)
    contexts = sorted({p[0] for points in series.values() for p in points})
    ax.set_xticks(contexts)
    ax.set_xticklabels([tokens(c) for c in contexts])
    ax.set_xlabel("context length per sequence (tokens)")
    ax.set_ylabel("max concurrent sequences")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="KV dtype")
    fig.tight_layout()
    _save(fig, path)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both axes (x: tokens/s per user, y: tokens/s per GPU),
    by x ascending."""
    front, best_y = [], -1.0
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best_y:
            front.append((x, y))
            best_y = y
    return sorted(front)


def pareto_plot(series: dict, title: str, path: Path) -> None:
    """Tokens/s per GPU against tokens/s per user, one colour per GPU kind: every layout and
    batch priced (faint), and each kind's Pareto front (the line)."""
    _check_path(path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for gpu, points in series.items():
        xy = [(p.tokens_per_s_per_user, p.tokens_per_s_per_gpu) for p in points]
        dots = ax.scatter([x for x, _ in xy], [y for _, y in xy], s=12, alpha=0.3)
        front = pareto_front(xy)
        ax.plot(
            [x for x, _ in front],
            [y for _, y in front],
            marker="o",
            color=dots.get_facecolor()[0][:3],
            label=gpu,
        )
    # linear axes: log ticks are drawn with mathtext, which is off (text.parse_math)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(title="GPU (Pareto front)")
    fig.tight_layout()
    _save(fig, path)
