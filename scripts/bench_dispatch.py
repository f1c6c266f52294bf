"""Time the host side of running a layer's ops eagerly in PyTorch, on this CPU, and write
kvplan/data/kernel_tables/host_dispatch.json (issue 34: what one eager launch costs the host).

Each op below stands for one kernel an engine launches in that layer (SGLang 0.5's model code:
python/sglang/srt/models/llama.py, qwen3_moe.py, deepseek_v2.py; layers/moe/fused_moe_triton).
Where the engine calls one custom op (sgl_kernel's fused_add_rmsnorm, topk_softmax,
moe_align_block_size, silu_and_mul, the Triton fused_moe_kernel) the stand-in is the nearest
PyTorch call or the few aten calls that compute the same thing; `aten_calls` counts what each
stand-in dispatches (a TorchDispatchMode counter), so a stand-in of several aten calls can be told
from one of one. Timed two ways:

- `meta`: tensors on the meta device: the Python of the call, argument parsing, the dispatcher
  and shape inference, no kernel work (the host part a CUDA launch also pays before it enqueues);
- `cpu`: tiny fp32 CPU tensors (one token, a 64-wide model): the same plus a CPU kernel on a few
  hundred bytes (an upper bound on the host part, not a GPU time).

With `--cuda` (a GPU machine) the same calls are timed on CUDA tensors, host side: the loop waits
for no kernel, so it times Python, the dispatcher and cudaLaunchKernel per call. Without it,
neither measures what a CUDA launch adds (the driver's cudaLaunchKernel, a Triton launcher's
Python, the stream's queue): this machine has no GPU. Per-op figures are the least over
interleaved repeats of a loop's mean per call; per-layer figures time the whole sequence the same
way (torch.inference_mode, one intra-op thread: many small OpenMP regions on a shared 2-core
machine inflate times).

    python scripts/bench_dispatch.py --write kvplan/data/kernel_tables/host_dispatch.json
    python scripts/bench_dispatch.py --quick   # a few repeats, for tests
    python scripts/bench_dispatch.py --cuda    # on a GPU machine: the host side with CUDA launches
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from kvplan.atomic import check_target, write_atomic
from kvplan.errors import KvplanError
from kvplan.measure.device import cpu_model

# a tiny model: the host cost of an op does not depend on its sizes (no kernel work on meta)
TOKENS = 1
HIDDEN = 64
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
INTERMEDIATE = 128
EXPERTS, TOP_K, EXPERT_INTERMEDIATE = 8, 2, 32
# MLA at DeepSeek-V3's proportions, shrunk: q_lora 1536 -> 48, kv_lora 512 -> 16, rope 64 -> 8
Q_LORA, KV_LORA, NOPE_DIM, ROPE_DIM, V_DIM = 48, 16, 16, 8, 16

Op = tuple[str, Callable[[dict[str, torch.Tensor]], Any]]


def make_tensors(device: str) -> dict[str, torch.Tensor]:
    """The activations and weights every op reads, all fp32 (bf16 CPU kernels are slow here)."""
    shapes = {
        "x": (TOKENS, HIDDEN),
        "residual": (TOKENS, HIDDEN),
        "norm_w": (HIDDEN,),
        "w_qkv": ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
        "w_o": (HIDDEN, HEADS * HEAD_DIM),
        "w_gate_up": (2 * INTERMEDIATE, HIDDEN),
        "w_down": (HIDDEN, INTERMEDIATE),
        "cos_sin": (TOKENS, HEAD_DIM),
        "q": (1, HEADS, TOKENS, HEAD_DIM),  # [batch, heads, tokens, head_dim]
        "k": (1, HEADS, TOKENS, HEAD_DIM),
        "v": (1, HEADS, TOKENS, HEAD_DIM),
        "gate_up": (TOKENS, 2 * INTERMEDIATE),
        "w_router": (EXPERTS, HIDDEN),
        "router_logits": (TOKENS, EXPERTS),
        "w13": (EXPERTS, HIDDEN, 2 * EXPERT_INTERMEDIATE),  # [experts, in, out]
        "w2": (EXPERTS, EXPERT_INTERMEDIATE, HIDDEN),
        "x_routed": (TOKENS * TOP_K, 1, HIDDEN),  # [tokens x top-k, 1, hidden]
        "h_routed": (TOKENS * TOP_K, 1, EXPERT_INTERMEDIATE),
        "moe_gate_up": (TOKENS * TOP_K, 2 * EXPERT_INTERMEDIATE),
        "moe_out": (TOKENS, TOP_K, HIDDEN),
        "topk_weights": (TOKENS, TOP_K, 1),
        "w_qkv_a": (Q_LORA + KV_LORA + ROPE_DIM, HIDDEN),
        "q_a": (TOKENS, Q_LORA),
        "kv_a": (TOKENS, KV_LORA),
        "q_a_norm_w": (Q_LORA,),
        "kv_a_norm_w": (KV_LORA,),
        "w_q_b": (HEADS * (NOPE_DIM + ROPE_DIM), Q_LORA),
        "q_pe": (TOKENS, HEADS, ROPE_DIM),
        "q_nope_t": (HEADS, TOKENS, NOPE_DIM),  # [heads, tokens, nope]
        "w_kc": (HEADS, NOPE_DIM, KV_LORA),  # the absorbed k projection
        "w_vc": (HEADS, KV_LORA, V_DIM),  # the absorbed v projection
        "latent_out": (HEADS, TOKENS, KV_LORA),
        "kv_cache": (16, KV_LORA + ROPE_DIM),  # 16 slots
        "kv_new": (TOKENS, KV_LORA + ROPE_DIM),
        "q_mla": (1, HEADS, TOKENS, KV_LORA + ROPE_DIM),
        "k_mla": (1, 1, TOKENS, KV_LORA + ROPE_DIM),
        "v_mla": (1, 1, TOKENS, KV_LORA),
        "w_o_mla": (HIDDEN, HEADS * V_DIM),
        "attn_mla": (TOKENS, HEADS * V_DIM),
    }
    tensors = {name: torch.rand(shape, device=device) for name, shape in shapes.items()}
    tensors["slots"] = torch.zeros(TOKENS, dtype=torch.long, device=device)
    tensors["topk_ids"] = torch.zeros(TOKENS, TOP_K, dtype=torch.long, device=device)
    return tensors


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w)


def _silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


# the attention half every GQA layer shares (llama.py LlamaAttention + LlamaDecoderLayer)
GQA_ATTENTION: list[Op] = [
    ("rmsnorm", lambda t: _rmsnorm(t["x"], t["norm_w"])),
    ("qkv_linear", lambda t: F.linear(t["x"], t["w_qkv"])),
    ("rotary", lambda t: t["q"].mul_(t["cos_sin"])),  # one in-place kernel on q and k
    ("attention", lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"])),
    ("o_linear", lambda t: F.linear(t["x"], t["w_o"])),
    ("residual_add", lambda t: t["x"].add_(t["residual"])),
]
DENSE_MLP: list[Op] = [
    ("rmsnorm", lambda t: _rmsnorm(t["x"], t["norm_w"])),
    ("gate_up_linear", lambda t: F.linear(t["x"], t["w_gate_up"])),
    ("silu_and_mul", lambda t: _silu_and_mul(t["gate_up"])),
    ("down_linear", lambda t: F.linear(t["gate_up"][:, :INTERMEDIATE], t["w_down"])),
]


def _grouped_matmul(x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Stand-in for one Triton fused_moe_kernel launch: gather each routed row's expert, bmm."""
    return torch.bmm(x, w.index_select(0, ids.view(-1)))


# qwen3_moe.py Qwen3MoeSparseMoeBlock through fused_moe_triton (no shared expert)
MOE_BLOCK: list[Op] = [
    ("rmsnorm", lambda t: _rmsnorm(t["x"], t["norm_w"])),
    ("router_linear", lambda t: F.linear(t["x"], t["w_router"])),
    ("softmax_topk", lambda t: torch.topk(torch.softmax(t["router_logits"], -1), TOP_K, -1)),
    ("sort_align", lambda t: torch.sort(t["topk_ids"].view(-1))),
    ("grouped_gate_up", lambda t: _grouped_matmul(t["x_routed"], t["w13"], t["topk_ids"])),
    ("silu_and_mul", lambda t: _silu_and_mul(t["moe_gate_up"])),
    ("grouped_down", lambda t: _grouped_matmul(t["h_routed"], t["w2"], t["topk_ids"])),
    ("weighted_sum", lambda t: (t["moe_out"] * t["topk_weights"]).sum(dim=1)),
]
# deepseek_v2.py DeepseekV2AttentionMLA, decode with the absorbed projections
MLA_ATTENTION: list[Op] = [
    ("rmsnorm", lambda t: _rmsnorm(t["x"], t["norm_w"])),
    ("qkv_a_linear", lambda t: F.linear(t["x"], t["w_qkv_a"])),
    ("q_a_rmsnorm", lambda t: _rmsnorm(t["q_a"], t["q_a_norm_w"])),
    ("kv_a_rmsnorm", lambda t: _rmsnorm(t["kv_a"], t["kv_a_norm_w"])),
    ("q_b_linear", lambda t: F.linear(t["q_a"], t["w_q_b"])),
    ("rotary", lambda t: t["q_pe"].mul_(t["cos_sin"][:, :ROPE_DIM].unsqueeze(1))),
    ("absorbed_k_bmm", lambda t: torch.bmm(t["q_nope_t"], t["w_kc"])),
    ("kv_cache_write", lambda t: t["kv_cache"].index_copy_(0, t["slots"], t["kv_new"])),
    (
        "attention",
        lambda t: F.scaled_dot_product_attention(
            t["q_mla"], t["k_mla"].expand(1, HEADS, -1, -1), t["v_mla"].expand(1, HEADS, -1, -1)
        ),
    ),
    ("absorbed_v_bmm", lambda t: torch.bmm(t["latent_out"], t["w_vc"])),
    ("o_linear", lambda t: F.linear(t["attn_mla"], t["w_o_mla"])),
    ("residual_add", lambda t: t["x"].add_(t["residual"])),
]
LAYERS: dict[str, list[Op]] = {
    "dense_llama": GQA_ATTENTION + DENSE_MLP,
    "moe_qwen3": GQA_ATTENTION + MOE_BLOCK,
    "mla_attention": MLA_ATTENTION,
}


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        return func(*args, **(kwargs or {}))


def aten_calls(
    op: Callable[[dict[str, torch.Tensor]], Any], tensors: dict[str, torch.Tensor]
) -> int:
    """How many aten ops one call of the stand-in dispatches (views included)."""
    with _Counter() as counter:
        op(tensors)
    return counter.calls


def _loop_s(run: Callable[[], Any], calls: int) -> float:
    """Mean seconds a call of `run` holds the host, the device's queue drained first (on CUDA the
    loop is not synchronised at its end: tiny kernels finish faster than they are launched, so
    the host's launches are what the loop times)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def time_us(runs: dict[str, Callable[[], Any]], loop_s: float, repeats: int) -> dict[str, float]:
    """Each run's least mean seconds per call over `repeats` loops, in microseconds. A loop holds
    as many calls as fill about loop_s (sized from a warm-up of 3 calls, at least 3); the repeats
    are interleaved across the runs, so background load spreads over all of them, and the least
    loop is taken because load on a shared machine only adds time (each loop is thousands of
    calls in the full mode, not one lucky call)."""
    calls = {key: max(3, int(loop_s / _loop_s(run, 3))) for key, run in runs.items()}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for key, run in runs.items():
            best[key] = min(best[key], _loop_s(run, calls[key]))
    return {key: seconds * 1e6 for key, seconds in best.items()}


class _Noop(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def bench_device(device: str, loop_s: float, repeats: int) -> dict[str, Any]:
    tensors = make_tensors(device)
    module, x = _Noop(), tensors["x"]

    def sequence(ops: list[Op]) -> Callable[[], None]:
        def run() -> None:
            for _, op in ops:
                op(tensors)

        return run

    runs: dict[str, Callable[[], Any]] = {
        "python_call": lambda: None,  # the loop and a Python call
        "module_call": lambda: module(x),  # an nn.Module's __call__
    }
    for name, ops in LAYERS.items():
        runs[name] = sequence(ops)
        for index, (_, op) in enumerate(ops):
            runs[f"{name}/{index}"] = lambda op=op: op(tensors)
    timed = time_us(runs, loop_s, repeats)
    layers: dict[str, Any] = {}
    for name, ops in LAYERS.items():
        layers[name] = {
            "ops": [
                {
                    "op": op_name,
                    "aten_calls": aten_calls(op, tensors),
                    "host_us": round(timed[f"{name}/{index}"], 2),
                }
                for index, (op_name, op) in enumerate(ops)
            ],
            "launches": len(ops),
            "layer_host_us": round(timed[name], 2),
            "host_us_per_launch": round(timed[name] / len(ops), 2),
        }
    moe_over_dense = layers["moe_qwen3"]["layer_host_us"] / layers["dense_llama"]["layer_host_us"]
    return {
        "python_call_floor_us": round(timed["python_call"], 3),
        "module_call_us": round(timed["module_call"], 3),
        "layers": layers,
        "moe_over_dense": round(moe_over_dense, 3),
    }


DEVICES = ("meta", "cpu")  # and "cuda" where a GPU is present (--cuda)


def run(quick: bool, devices: tuple[str, ...] = DEVICES) -> dict[str, Any]:
    torch.set_num_threads(1)
    loop_s, repeats = (0.002, 2) if quick else (0.05, 15)
    with torch.inference_mode():
        timed = {device: bench_device(device, loop_s, repeats) for device in devices}
    return {
        "source": "scripts/bench_dispatch.py on this machine's CPU: PyTorch eager calls standing "
        "for the kernels SGLang 0.5's model code launches per layer (llama.py, qwen3_moe.py, "
        "deepseek_v2.py); no GPU, so no CUDA launch is timed",
        "derived_by": "per op: the least over interleaved repeats of a loop's mean time per call (a loop of "
        "about loop_s; background load only adds time); per layer: "
        "the op sequence timed as one loop; host_us_per_launch = layer_host_us / launches; "
        "moe_over_dense = moe_qwen3 / dense_llama layer_host_us; aten_calls counted with a "
        "TorchDispatchMode; torch.inference_mode, one intra-op thread, fp32",
        "quick": quick,
        "loop_s": loop_s,
        "repeats": repeats,
        "cpu": cpu_model(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cuda_device": torch.cuda.get_device_name() if "cuda" in devices else None,
        "devices": timed,
    }


def render(result: dict[str, Any]) -> str:
    lines = [f"{result['cpu']}, torch {result['torch_version']}"]
    for device, figures in result["devices"].items():
        lines.append(
            f"[{device}] python call floor {figures['python_call_floor_us']} us, "
            f"nn.Module call {figures['module_call_us']} us"
        )
        for name, layer in figures["layers"].items():
            ops = ", ".join(f"{o['op']} {o['host_us']}/{o['aten_calls']}" for o in layer["ops"])
            lines.append(
                f"  {name}: {layer['layer_host_us']} us a layer, {layer['launches']} launches, "
                f"{layer['host_us_per_launch']} us a launch (op us/aten calls: {ops})"
            )
        lines.append(f"  moe/dense layer: {figures['moe_over_dense']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few repeats (tests)")
    parser.add_argument("--write", help="write the JSON here")
    parser.add_argument(
        "--cuda", action="store_true", help="also time the calls on CUDA tensors (host side)"
    )
    args = parser.parse_args(argv)
    if args.cuda and not torch.cuda.is_available():
        parser.error("--cuda: this torch sees no CUDA device")
    try:  # the file checked as typed before anything is timed, and written atomically
        target = None if args.write is None else check_target(args.write, "--write")
    except KvplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    result = run(args.quick, DEVICES + ("cuda",) if args.cuda else DEVICES)
    print(render(result))
    if target is not None:
        text = json.dumps(result, indent=1) + "\n"
        try:
            write_atomic(target, lambda tmp: tmp.write_text(text, encoding="utf-8"), "--write")
        except KvplanError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
