"""Record real llama.cpp start-up logs as the oracle for kvplan's llama.cpp engine.

Builds tiny GGUF files of several architectures (tests/gguf_fixtures.py's converter over bundled
configs shrunk to a few layers, tensors filled with zeros; the tensor table is completed from
llama.cpp's own loader: a missing tensor is added, a wrong shape takes the shape it expects),
creates contexts at the settings of CONTEXTS with scripts/llamacpp_ctx.cpp (built by
scripts/build_llamacpp.sh) and keeps llama.cpp's log lines, context by context:

    python scripts/llamacpp_oracle.py --bin .cache/llamacpp/llamacpp_ctx
        [--out tests/data/llamacpp_oracle/b11312.json]

tests/test_llamacpp_oracle.py compares kvplan's predictions with the recorded lines (and, with
KVPLAN_LLAMACPP_BIN set, records them again live)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from gguf_fixtures import add_keys, bundled, convert  # noqa: E402

# Shrunk configs: (name, bundled config, overrides). Widths keep q8_0/q4_0 blocks (32) whole.
SMALL = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
}
FAMILIES = {
    "llama-gqa": ("llama-3.1-8b", {}),
    "qwen2": ("qwen2.5-7b", {}),
    "qwen3": ("qwen3-8b", {}),
    "qwen3moe": (
        "qwen3-30b-a3b",
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64},
    ),
    "gemma2-swa": ("gemma-2-9b", {"sliding_window": 256}),
    "gemma3-swa": ("gemma-3-27b", {"sliding_window": 256, "num_hidden_layers": 6}),
    "gpt-oss": (
        "gpt-oss-20b",
        {"sliding_window": 128, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "deepseek2-mla": (
        "deepseek-v2-lite",
        {
            "kv_lora_rank": 64,
            "qk_rope_head_dim": 32,
            "qk_nope_head_dim": 32,
            "v_head_dim": 32,
            "q_lora_rank": None,
            "first_k_dense_replace": 1,
            "n_shared_experts": 1,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
        },
    ),
    "nemotron-h-hybrid": (
        "nemotron-h-56b",
        {
            "hybrid_override_pattern": "M-M*",
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "conv_kernel": 4,
            "ssm_state_size": 16,
            "n_groups": 2,
            "mamba_num_heads": 4,
            "mamba_head_dim": 32,
        },
    ),
}
# (family, c, b, ub, np, fa, ctk, ctv, swa_full, kvu)
CONTEXTS = [
    ("llama-gqa", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("llama-gqa", 1000, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("llama-gqa", 0, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("llama-gqa", 8192, 512, 128, 4, "on", "q8_0", "q8_0", 0, 0),
    ("llama-gqa", 8192, 4096, 1024, 4, "on", "q4_0", "q8_0", 0, 1),
    ("llama-gqa", 2048, 2048, 512, 1, "off", "f32", "f16", 0, 0),
    ("llama-gqa", 300, 2048, 512, 3, "off", "q8_0", "f16", 0, 0),
    ("qwen2", 4096, 2048, 512, 2, "auto", "f16", "f16", 0, 0),
    ("qwen2", 32768, 2048, 512, 1, "on", "q8_0", "q8_0", 0, 0),
    ("qwen3", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("qwen3", 6000, 1024, 256, 2, "on", "bf16", "bf16", 0, 1),
    ("qwen3moe", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("qwen3moe", 4096, 2048, 512, 4, "on", "q8_0", "q4_0", 0, 1),
    ("gemma2-swa", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("gemma2-swa", 4096, 2048, 512, 1, "auto", "f16", "f16", 1, 0),
    ("gemma2-swa", 8192, 2048, 512, 4, "on", "q8_0", "q8_0", 0, 1),
    ("gemma3-swa", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("gemma3-swa", 4096, 2048, 512, 1, "auto", "f16", "f16", 1, 0),
    ("gemma3-swa", 16384, 2048, 256, 2, "on", "q8_0", "q8_0", 0, 0),
    ("gemma3-swa", 2048, 512, 512, 1, "off", "f16", "f16", 0, 0),
    ("gpt-oss", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("gpt-oss", 8192, 2048, 512, 2, "on", "q8_0", "q8_0", 0, 1),
    ("deepseek2-mla", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("deepseek2-mla", 8192, 2048, 512, 2, "on", "q8_0", "q8_0", 0, 0),
    ("deepseek2-mla", 2048, 2048, 512, 1, "off", "f16", "f16", 0, 0),
    ("nemotron-h-hybrid", 4096, 2048, 512, 1, "auto", "f16", "f16", 0, 0),
    ("nemotron-h-hybrid", 8192, 2048, 512, 4, "on", "q8_0", "q8_0", 0, 1),
    ("nemotron-h-hybrid", 4096, 2048, 512, 2, "off", "f16", "f16", 0, 0),
    ("qwen2", 4096, 8192, 8192, 1, "auto", "f16", "f16", 0, 0),
    ("qwen3", 4096, 100, 512, 1, "auto", "f16", "f16", 0, 0),
]
KEEP = re.compile(
    r"^(llama_context|llama_kv_cache|llama_kv_cache_iswa|llama_memory_recurrent|"
    r"llama_memory_hybrid|load_tensors|print_info: (n_ctx_train|n_swa|n_layer|arch)|"
    r"sched_reserve|graph_reserve|resolve_fused_ops)\b"
)
MISSING = re.compile(r"missing tensor '([^']+)'|tensor '([^']+)' not found")
SHAPE = re.compile(r"tensor '([^']+)' has wrong shape; expected ([\d, ]+), got")
KEY = re.compile(r"key not found in model: (\S+)")
MAX_ROUNDS = 400


def family_keys(family: str) -> tuple[str, dict]:
    name, overrides = FAMILIES[family]
    cfg = dict(bundled(name))
    text = cfg.get("text_config", cfg)
    always = ("head_dim", "vocab_size")
    text = {**text, **{k: v for k, v in SMALL.items() if k in text or k in always}}
    text.update(overrides)
    if "hybrid_override_pattern" in text:
        text["num_hidden_layers"] = len(text["hybrid_override_pattern"])
    text = {k: v for k, v in text.items() if v is not None}
    arch, keys = convert(text)
    keys["general.name"] = family
    keys["tokenizer.ggml.model"] = "none"
    return arch, keys


def write_model(path: Path, arch: str, keys: dict, tensors: list) -> None:
    """A GGUF with every tensor present (zeros, f32): llama.cpp reads and maps the data."""
    w = gguf.GGUFWriter(path, arch)
    add_keys(w, arch, keys)
    for name, ne in tensors:
        w.add_tensor(name, np.zeros(tuple(reversed(ne)), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load(binary: str, path: Path, specs: list[str]) -> str:
    done = subprocess.run([binary, str(path), *specs], capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr


def complete_tensors(binary: str, arch: str, keys: dict, work: Path) -> list:
    """The tensor table llama.cpp asks for, one missing tensor or wrong shape at a time (and
    the keys it asks for: an epsilon 1e-6, anything else 1; `keys` grows in place)."""
    tensors: dict[str, tuple[int, ...]] = {}
    path = work / "probe.gguf"
    for _ in range(MAX_ROUNDS):
        write_model(path, arch, keys, list(tensors.items()))
        out = load(binary, path, [])
        if m := SHAPE.search(out):
            tensors[m.group(1)] = tuple(int(x) for x in m.group(2).split(",") if x.strip())
            while len(tensors[m.group(1)]) > 1 and tensors[m.group(1)][-1] == 1:
                tensors[m.group(1)] = tensors[m.group(1)][:-1]
        elif m := MISSING.search(out):
            tensors[m.group(1) or m.group(2)] = (1,)
        elif m := KEY.search(out):  # a key the converter writes from a field SMALL lacks
            key = m.group(1).removeprefix(f"{arch}.")
            keys[key] = 1e-6 if "epsilon" in key else 1
        elif "=== build" in out and "model failed" not in out:
            return list(tensors.items())
        else:
            raise SystemExit(f"{arch}: llama.cpp refused the model:\n{out[-3000:]}")
    raise SystemExit(f"{arch}: no tensor table after {MAX_ROUNDS} rounds")


def head_tail(head: list[str]) -> list[str]:
    """A context whose process died: its lines from the context's first line on."""
    starts = [i for i, line in enumerate(head) if line.startswith("llama_context")]
    return head[starts[0] :] if starts else []


def split_contexts(out: str) -> tuple[list[str], list[tuple[str, int, list[str]]]]:
    head: list[str] = []
    contexts = []
    current = None
    for line in out.splitlines():
        if line.startswith("=== ctx "):
            current = (line[8:], [])
        elif line.startswith("=== end ") and current:
            contexts.append((current[0], int(line[8:]), current[1]))
            current = None
        elif KEEP.match(line.strip()):
            (current[1] if current else head).append(line.rstrip())
    if current:  # died inside this context
        head += current[1]
    return head, contexts


def record(binary: str) -> dict:
    build = load(binary, Path("/nonexistent"), []).split("=== build ")[1].split()[0]
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for family in dict.fromkeys(c[0] for c in CONTEXTS):
            arch, keys = family_keys(family)
            tensors = complete_tensors(binary, arch, keys, work)
            path = work / f"{family}.gguf"
            write_model(path, arch, keys, tensors)
            rows = [c for c in CONTEXTS if c[0] == family]
            for row in rows:  # one process a context: a crash in one leaves the others
                spec = ",".join(str(x) for x in row[1:])
                head, contexts = split_contexts(load(binary, path, [spec]))
                _spec, rc, lines = contexts[0] if contexts else (spec, -1, head_tail(head))
                c, b, ub, np_, fa, ctk, ctv, swa_full, kvu = row[1:]
                entries.append(
                    {
                        "family": family,
                        "arch": arch,
                        "keys": keys,
                        "tensors": [[n, list(ne)] for n, ne in tensors],
                        "request": {
                            "ctx_size": c,
                            "batch_size": b,
                            "ubatch_size": ub,
                            "parallel": np_,
                            "flash_attn": fa,
                            "cache_type_k": ctk,
                            "cache_type_v": ctv,
                            "swa_full": bool(swa_full),
                            "kv_unified": bool(kvu),
                        },
                        # 0: created; 1: refused (llama_init_from_model returned NULL);
                        # -1: the process died after the lines kept (graph reserve)
                        "status": rc,
                        "lines": lines,
                    }
                )
    return {
        "build": build,
        "command": "scripts/build_llamacpp.sh && python scripts/llamacpp_oracle.py --bin BIN",
        "driver": "scripts/llamacpp_ctx.cpp (llama_init_from_model, CPU, n_gpu_layers 0)",
        "entries": entries,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the driver scripts/build_llamacpp.sh built")
    ap.add_argument("--out", help="the JSON to write (default tests/data/llamacpp_oracle/BUILD)")
    args = ap.parse_args()
    data = record(args.bin)
    out = Path(args.out or ROOT / "tests" / "data" / "llamacpp_oracle" / f"{data['build']}.json")
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(data['entries'])} contexts from llama.cpp {data['build']} -> {out}")


if __name__ == "__main__":
    main()
