#!/usr/bin/env python3
"""The scoreboard of tests/data/real_configs: for every real config.json, `kvplan size FILE --ctx
32k --format json` with the kvplan executable given, against transformers' own parameter count
(the text model built on the meta device from the file's fields, quantization_config and auto_map
dropped), else the repository's oracle entry (tests/data/transformers_oracle.json, real/), else
the engine-code count a test cites for types transformers does not know.

Run it from OUTSIDE the repository (the repo's top-level `kernels/` folder shadows a PyPI package
transformers imports), in an environment with transformers and torch:

    cd /tmp && python /path/to/kvplan/scripts/real_configs_scoreboard.py /path/to/kvplan \\
        [--kvplan /path/to/venv/bin/kvplan]

Verdicts: exact, within 0.01%, refused (exit 2, one line), answered without an oracle, WRONG.
Cache bytes are checked by the tests (tests/test_verbatim_configs.py, test_deepseek_v4.py, ...).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
from collections import Counter

# counts the tests cite from the engines' model code where transformers 5.24 does not build the
# file, or builds it without reading fields that change it (tests/test_transformers_oracle.py,
# tests/test_kimi_linear.py); they decide before transformers' own count
CITED = {
    # vLLM 0.32.0's Kimi-K3 model code, vllm/models/kimi_k3 (KimiLinearConfig in transformers
    # 5.24 drops its latent MoE, output gate, attention residuals and full-rank KDA gate)
    "moonshotai--Kimi-K3.json": 2_779_484_393_568,
    "XiaomiMiMo--MiMo-7B-Base.json": 7_622_619_136,
    "stepfun-ai--Step-3.7-Flash.json": 195_844_496_640,
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json": 49_867_145_216,
    "MiniMaxAI--MiniMax-M3.json": 426_174_565_632,
}
TEXT_KEYS = ("text_config", "language_config", "llm_config")


def transformers_count(raw: dict) -> int | None:
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    text = raw
    for key in TEXT_KEYS:
        if isinstance(raw.get(key), dict):
            text = raw[key]
    text = {k: v for k, v in text.items() if k not in ("quantization_config", "auto_map")}
    try:
        config = CONFIG_MAPPING[text["model_type"]](
            **{k: v for k, v in text.items() if k != "model_type"}
        )
        if text is not raw and "tie_word_embeddings" in raw:
            config.tie_word_embeddings = raw["tie_word_embeddings"]
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - transformers cannot build it: another oracle decides
        return None
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--kvplan", default="kvplan")
    args = ap.parse_args()
    oracle_file = os.path.join(args.repo, "tests", "data", "transformers_oracle.json")
    oracle = json.load(open(oracle_file))["models"]
    verdicts, caches = Counter(), Counter()
    for path in sorted(glob.glob(os.path.join(args.repo, "tests/data/real_configs/*.json"))):
        name = os.path.basename(path)
        entry = oracle.get(f"real/{name}")
        if entry:
            expected = (
                entry.get("params_language_model")
                or entry.get("params_text_only")
                or entry["params_total"]
            )
        else:
            expected = CITED.get(name) or transformers_count(json.load(open(path)))
        run = subprocess.run(
            [args.kvplan, "size", path, "--ctx", "32k", "--format", "json"],
            capture_output=True,
            text=True,
        )
        if run.returncode:
            verdict, detail = "refused", run.stderr.strip().splitlines()[-1][:160]
        else:
            got = json.loads(run.stdout)["model"]["params_total"]
            detail = f"{got:,} vs {expected:,}" if expected else f"{got:,}"
            if expected is None:
                verdict = "answered without an oracle"
            elif got == expected:
                verdict = "exact"
            elif abs(got - expected) / expected <= 1e-4:
                verdict = "within 0.01%"
            else:
                verdict = "WRONG"
        verdicts[verdict] += 1
        # where its cache bytes are checked: transformers' forward pass on a shrunk copy
        # (tests/test_transformers_oracle.py, layer by layer), else a hand count from the file's
        # fields and the engine code the family's test cites
        cache = "forward pass" if entry and entry.get("runs") else "hand/engine"
        caches[cache] += 1
        print(f"{verdict:26s} {name}  {detail}  [cache: {cache}]", flush=True)
    print(dict(verdicts), sum(verdicts.values()), "configs; cache checked by", dict(caches))


if __name__ == "__main__":
    main()
