"""Time the per-request work SGLang's HTTP server process does, one request after another, for
a `/v1/chat/completions` request of `vllm bench serve --backend openai-chat`, on this CPU, and
write kvplan/data/kernel_tables/sglang_frontend.json.

SGLang serves HTTP, the chat template, tokenization and the hand-off to the scheduler in one
asyncio process (the TokenizerManager lives in the uvicorn process; http_server.py
`openai_v1_chat_completions` -> serving_chat.py `_process_messages`, which calls
`tokenizer.apply_chat_template(..., tokenize=True)` (:318 of 0.5.4.post2) -> tokenizer_manager.py
`generate_request` -> `send_to_scheduler.send_pyobj`). None of it awaits I/O in between, so at a
burst (request rate inf) the requests reach the scheduler one at a time, each after this much
CPU work. The parts timed here, per request:

- `json`: the request body parsed (FastAPI's `await request.json()`);
- `validate`: SGLang's own `ChatCompletionRequest` (protocol.py of the wheel given) validating it;
- `chat_template`: `apply_chat_template(messages, tokenize=True, add_generation_prompt=True)` of
  a transformers fast tokenizer (the version SGLang 0.5.4-0.5.5 pin, 4.57.1);
- `pickle`: the tokenized request pickled for ZMQ (`send_pyobj`).

Untimed (so the total is a lower bound): uvicorn's HTTP parsing and the event loop's switches,
FastAPI's routing, the TokenizerManager's own bookkeeping, the streaming response's start.

The tokenizer is a stand-in built here (no model's vocabulary is fetched): a byte-level BPE with
Qwen2's pre-tokenizer split, trained by `tokenizers` on the repository's docs, with a ChatML chat
template of Qwen2.5's form. Tokenizing costs per pre-tokenized word and merge, so its cost
follows the prompt's length more than the vocabulary's content. The prompts are slices of the
same docs, of ShareGPT's mean prompt length (about 215 tokens of English prose).

Run from outside the repository root (the project's kernels/ folder shadows a package
transformers imports), with transformers==4.57.1 and SGLang's wheel unpacked:
    pip download --no-deps sglang==0.5.4.post2 -d /tmp/sgl && (cd /tmp/sgl && unzip -q *.whl)
    cd /tmp && python /path/to/scripts/bench_frontend.py --sglang /tmp/sgl \\
        --write /path/to/kvplan/data/kernel_tables/sglang_frontend.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import pickle
import platform
import statistics
import sys
import time
import types
from pathlib import Path

from kvplan.atomic import check_target, write_atomic
from kvplan.measure.device import cpu_model

ROOT = Path(__file__).resolve().parents[1]
# Qwen2's tokenizer.json pre-tokenizer split (then byte-level, no regex of its own)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB = 151_643  # Qwen2/3's BPE ranks: the target (a small corpus may stop short of it)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PROMPT_CHARS = 1000  # about 215 tokens of English prose: ShareGPT's mean prompt in the runs
REQUESTS = 1000  # one burst of `vllm bench serve --num-prompts 1000`
REPEATS = 5


@dataclasses.dataclass
class TokenizedRequest:
    """What SGLang pickles to the scheduler per request (TokenizedGenerateReqInput's main
    fields)."""

    rid: str
    input_text: str
    input_ids: list
    sampling_params: dict
    return_logprob: bool = False
    stream: bool = True


def corpus() -> str:
    return "\n\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def tokenizer(text: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    fast.chat_template = CHATML
    return fast


def chat_request_class(sglang_dir: Path):
    """SGLang's ChatCompletionRequest from the unpacked wheel (its one sglang import stubbed:
    sglang.utils pulls in IPython)."""
    stub = types.ModuleType("sglang.utils")
    stub.convert_json_schema_to_str = json.dumps  # type: ignore[attr-defined]
    sys.modules.setdefault("sglang", types.ModuleType("sglang"))
    sys.modules["sglang.utils"] = stub
    path = sglang_dir / "sglang/srt/entrypoints/openai/protocol.py"
    spec = importlib.util.spec_from_file_location("sglang_protocol", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.ChatCompletionRequest


def bodies(text: str) -> list[bytes]:
    """The bench client's request bodies (vllm bench serve, openai-chat)."""
    out = []
    for i in range(REQUESTS):
        start = (i * 997) % max(1, len(text) - PROMPT_CHARS)
        payload = {
            "model": "stand-in",
            "messages": [{"role": "user", "content": text[start : start + PROMPT_CHARS]}],
            "temperature": 0.0,
            "max_completion_tokens": 200,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        out.append(json.dumps(payload).encode())
    return out


def time_parts(tok, request_class, burst: list[bytes]) -> dict[str, float]:
    """CPU seconds (time.process_time) per request of each part over one burst."""
    parts = {"json": 0.0, "validate": 0.0, "chat_template": 0.0, "pickle": 0.0}
    tokens = 0
    for i, body in enumerate(burst):
        t0 = time.process_time()
        payload = json.loads(body)
        t1 = time.process_time()
        request = request_class.model_validate(payload)
        t2 = time.process_time()
        messages = [m.model_dump() for m in request.messages]
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        t3 = time.process_time()
        sampling = {"max_new_tokens": request.max_completion_tokens, "temperature": 0.0}
        pickle.dumps(TokenizedRequest(f"r{i}", "", ids, sampling))
        t4 = time.process_time()
        for name, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            parts[name] += dt
        tokens += len(ids)
    per = {name: total / len(burst) for name, total in parts.items()}
    per["prompt_tokens"] = tokens / len(burst)
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sglang", type=Path, required=True, help="an unpacked SGLang wheel")
    parser.add_argument("--write", type=Path, help="the JSON file to write")
    args = parser.parse_args()
    if args.write is not None:
        check_target(args.write)
    import transformers

    text = corpus()
    tok = tokenizer(text)
    request_class = chat_request_class(args.sglang)
    burst = bodies(text)
    time_parts(tok, request_class, burst[:50])  # warm: the template compiled, caches filled
    runs = [time_parts(tok, request_class, burst) for _ in range(REPEATS)]
    parts = ("json", "validate", "chat_template", "pickle")
    per_us = {p: round(statistics.median(r[p] for r in runs) * 1e6, 2) for p in parts}
    total = [sum(r[p] for p in parts) for r in runs]
    version = (args.sglang / "sglang/version.py").read_text().split('"')[1]
    result = {
        "source": (
            "scripts/bench_frontend.py on this machine: the per-request CPU work of SGLang's HTTP "
            f"server process for a /v1/chat/completions request (SGLang {version}'s protocol.py "
            "ChatCompletionRequest; transformers apply_chat_template(tokenize=True); the "
            "tokenized request pickled), on a stand-in byte-level BPE tokenizer with Qwen2's "
            "split and a ChatML template"
        ),
        "derived_by": (
            f"median over {REPEATS} bursts of {REQUESTS} requests of CPU time "
            "(time.process_time) per request; uvicorn/FastAPI/event-loop work untimed (a lower "
            "bound)"
        ),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "sglang": version,
        "vocab": tok.vocab_size,
        "prompt_tokens": round(statistics.median(r["prompt_tokens"] for r in runs), 1),
        "per_request_us": per_us,
        "serial_request_us": round(statistics.median(total) * 1e6, 2),
        "serial_request_us_spread": [round(min(total) * 1e6, 2), round(max(total) * 1e6, 2)],
    }
    text_out = json.dumps(result, indent=1) + "\n"
    if args.write is None:
        print(text_out, end="")
    else:
        write_atomic(args.write, lambda tmp: tmp.write_text(text_out))


if __name__ == "__main__":
    main()
