"""Time SGLang's detokenizer step on a Moonshot-style tiktoken tokenizer, on this CPU, and write
kvplan/data/kernel_tables/sglang_detokenizer.json (the cost per streamed token per request, by
decode path).

What SGLang's DetokenizerManager does per scheduler step (detokenizer_manager.py,
_decode_batch_token_id_output, 0.5.6.post2 to 0.5.12): for the B requests that streamed a token
it builds two windows per request, `surr_ids` (the tokens since the last text it committed: one
in steady state) and `read_ids` (those plus the new one: two), and decodes each list with
`tokenizer.batch_decode(ids, skip_special_tokens=True, spaces_between_special_tokens=True)`
(SamplingParams' defaults). Moonshot's TikTokenTokenizer (tokenization_kimi.py, a transformers
`PreTrainedTokenizer`) decodes natively through tiktoken only when called without keyword
arguments; with them it falls back to transformers' slow `_decode`, which rebuilds
`all_special_tokens` / `all_special_ids` (properties) for every token and the added-token set per
call. The three paths timed here:

- `hf_kwargs`: that fallback as shipped (SGLang before 0.5.11: #16427's cache patch exists from
  0.5.8 but SGLANG_PATCH_TOKENIZER defaults to False until 0.5.11);
- `cached_special`: the same with both properties cached (#16427's _SpecialTokensCachePatcher,
  on by default from 0.5.11);
- `native`: special ids filtered, then `decode(ids)` with no keyword arguments, i.e. tiktoken's
  own decode (#25309's decode_without_hf_kwargs, from 0.5.13).

The tokenizer here is a stand-in written for this benchmark (no Moonshot code or vocabulary): a
`PreTrainedTokenizer` with Kimi-K2's shape (163,584 base ranks, 256 reserved special ids in the
tiktoken encoding, the named ones as additional_special_tokens) and the same decode methods
(id -> byte-level unicode string dict, bytes_to_unicode inverse on join, decode() falling back
to super() when given keyword arguments). Its BPE ranks are synthetic (distinct byte strings of
1-3 bytes): decoding never merges, it looks tokens up and joins bytes, so its cost depends on the
number of tokens and special tokens, not on which bytes the ranks hold (a real vocabulary's
longer tokens add a few bytes per join).

Cross-check: #25309 published one sequence of 80,002 ids decoded with skip_special_tokens=True
(raw kwargs path ~727 ms, with #16427's cache 52.57 ms, native 2.22 ms); the same case is timed
here (`pr25309_case`) so the ratios between paths and this CPU's speed can be compared.

Run from outside the repository root (the project's kernels/ folder shadows a package
transformers imports), with the transformers the releases pin (SGLang 0.5.6.post2-0.5.9:
transformers==4.57.1):
    cd /tmp && python /path/to/scripts/bench_detokenizer.py --write /path/to/kvplan/data/kernel_tables/sglang_detokenizer.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time

from kvplan.atomic import check_target, write_atomic
from kvplan.errors import KvplanError
from kvplan.measure.device import cpu_model

BASE_TOKENS = 163_584  # Kimi-K2's tiktoken.model ranks (vocab_size 163,840 = these + 256)
RESERVED = 256  # TikTokenTokenizer.num_reserved_special_tokens
# Kimi-K2's named special ids (offsets from BASE_TOKENS), as its tokenizer_config names them
NAMED = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|im_end|>",
    3: "<|im_user|>",
    4: "<|im_assistant|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    9: "[EOT]",
    10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>",
    12: "<|tool_calls_section_end|>",
    13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>",
    15: "<|tool_call_end|>",
    17: "<|im_middle|>",
    254: "[UNK]",
    255: "[PAD]",
}
BATCHES = (1, 16, 100)  # requests streaming a token in one step
SURR_LEN, READ_LEN = 1, 2  # steady-state window lengths (tokens) per request


def synthetic_ranks(count: int) -> dict[bytes, int]:
    """`count` distinct byte strings: the 256 single bytes, then 2- and 3-byte strings."""
    ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    rng = random.Random(0)
    while len(ranks) < count:
        size = 2 if len(ranks) < 8_000 else 3  # of 95^2 = 9,025 printable pairs, then triples
        piece = bytes(rng.randrange(32, 127) for _ in range(size))
        ranks.setdefault(piece, len(ranks))
    return ranks


def build_tokenizer(extra_named: int = 0):
    """The stand-in tokenizer (see the module doc); `extra_named` more reserved ids named as
    additional special tokens (Kimi-K2.5's media tokens and the like: a sensitivity check)."""
    import tiktoken
    from transformers import PreTrainedTokenizer
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    ranks = synthetic_ranks(BASE_TOKENS)
    names = dict(NAMED)
    spare = [i for i in range(RESERVED) if i not in names]
    for i in spare[:extra_named]:
        names[i] = f"<|named_extra_{i}|>"
    special = {
        names.get(i, f"<|reserved_token_{BASE_TOKENS + i}|>"): BASE_TOKENS + i
        for i in range(RESERVED)
    }
    encoding = tiktoken.Encoding(
        name="stand-in", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens=special
    )
    byte_encoder = bytes_to_unicode()
    decoder = {
        i: "".join(byte_encoder[b] for b in encoding.decode_single_token_bytes(i))
        for i in range(encoding.n_vocab)
    }
    encoder = {v: k for k, v in decoder.items()}
    skip = {"[BOS]", "[EOS]", "[UNK]", "[PAD]"}
    additional = [names[i] for i in sorted(names) if names[i] not in skip]

    class StandInTikToken(PreTrainedTokenizer):
        """Moonshot TikTokenTokenizer's decode surface (see the module doc)."""

        def __init__(self, **kwargs):
            self.model = encoding
            self.decoder = decoder
            self.encoder = encoder
            self.byte_decoder = {v: k for k, v in byte_encoder.items()}
            super().__init__(**kwargs)

        @property
        def vocab_size(self) -> int:
            return encoding.n_vocab

        def get_vocab(self):
            return self.encoder

        def _tokenize(self, text, **kwargs):
            return [self.decoder[t] for t in self.model.encode(text, allowed_special="all")]

        def _convert_token_to_id(self, token):
            return self.encoder.get(token, BASE_TOKENS + 254)

        def _convert_id_to_token(self, index):
            return self.decoder.get(index)

        def convert_tokens_to_string(self, tokens):
            text = "".join(tokens)
            return bytearray([self.byte_decoder[c] for c in text]).decode("utf-8", "replace")

        def decode(self, token_ids, **kwargs):
            if len(kwargs) > 0:  # the keyword path: transformers' slow _decode
                return super().decode(token_ids, **kwargs)
            if type(token_ids) is int:
                token_ids = [token_ids]
            return self.model.decode(token_ids)

    # TikTokenTokenizer.__init__ takes the config's added_tokens_decoder for its own special-id
    # names and does not pass it on, so transformers' added-token maps hold only the tokens its
    # __init__ adds back: bos/eos/unk/pad and the additional special tokens (4.57.1
    # PreTrainedTokenizer.__init__ step 4; from_pretrained adds nothing after it)
    tok = StandInTikToken(
        bos_token="[BOS]",
        eos_token="[EOS]",
        unk_token="[UNK]",
        pad_token="[PAD]",
        additional_special_tokens=additional,
    )
    return tok, len(additional)


def cache_special(tok) -> None:
    """#16427's effect: all_special_tokens and all_special_ids computed once (a subclass whose
    properties return the values computed now)."""
    tokens, ids = list(tok.all_special_tokens), list(tok.all_special_ids)
    cls = type(tok)
    tok.__class__ = type(
        cls.__name__ + "Cached",
        (cls,),
        {
            "all_special_tokens": property(lambda self: tokens),
            "all_special_ids": property(lambda self: ids),
        },
    )


def step_hf(tok, surr, read):
    """One detokenizer step, keyword path (SGLang's two batch_decode calls)."""
    tok.batch_decode(surr, skip_special_tokens=True, spaces_between_special_tokens=True)
    tok.batch_decode(read, skip_special_tokens=True, spaces_between_special_tokens=True)


def step_native(tok, surr, read, special_ids):
    """One detokenizer step, #25309's path: filter special ids, decode without keywords."""
    for rows in (surr, read):
        [tok.decode([t for t in ids if t not in special_ids]) for ids in rows]


def time_s(fn, repeats: int) -> float:
    """Median CPU seconds of `fn()` over `repeats` runs (gc off while timing). The process's
    CPU time, not the wall clock: on a shared machine a descheduled run does not count the
    time it waited for a core (the detokenizer owns a core of the serving host)."""
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
    finally:
        gc.enable()
    return statistics.median(times)


def measure(tok, special_ids, repeats: int) -> dict:
    rng = random.Random(1)
    rows = {}
    for batch in BATCHES:
        surr = [[rng.randrange(BASE_TOKENS) for _ in range(SURR_LEN)] for _ in range(batch)]
        read = [s + [rng.randrange(BASE_TOKENS)] for s in surr]
        reps = max(5, repeats // batch)
        hf = time_s(lambda s=surr, r=read: step_hf(tok, s, r), reps)
        native = time_s(lambda s=surr, r=read: step_native(tok, s, r, special_ids), reps)
        rows[batch] = (hf / batch, native / batch)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", help="the data file to write")
    parser.add_argument("--repeats", type=int, default=2000, help="runs of a one-request step")
    args = parser.parse_args()
    if not 1 <= args.repeats <= 1_000_000:
        print(f"--repeats must be 1 to 1,000,000 (got {args.repeats})", file=sys.stderr)
        sys.exit(2)
    try:  # the file checked as typed before anything is timed, and written atomically
        target = None if args.write is None else check_target(args.write, "--write")
    except KvplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)

    import tiktoken
    import transformers

    tok, named = build_tokenizer()
    print("tokenizer built", file=sys.stderr)
    special_ids = set(tok.all_special_ids)
    raw = measure(tok, special_ids, args.repeats)
    print("hf_kwargs timed", raw, file=sys.stderr)
    ids80k = [random.Random(2).randrange(BASE_TOKENS) for _ in range(80_002)]
    pr_raw = time_s(lambda: tok.decode(ids80k, skip_special_tokens=True), 3)
    cache_special(tok)
    cached = measure(tok, special_ids, args.repeats)
    pr_cached = time_s(lambda: tok.decode(ids80k, skip_special_tokens=True), 5)
    pr_native = time_s(lambda: tok.decode([t for t in ids80k if t not in special_ids]), 20)
    # sensitivity: more of the reserved ids as additional special tokens (a tokenizer_config
    # that names media tokens, or lists every special added token, as newer transformers save)
    more = {}
    for extra in (16, RESERVED - len(NAMED)):
        tok_more, named_more = build_tokenizer(extra_named=extra)
        more[named_more] = measure(tok_more, set(tok_more.all_special_ids), args.repeats)
        print("sensitivity timed", named_more, file=sys.stderr)

    def per_token(rows, which):
        return {str(b): round(r[which] * 1e6, 2) for b, r in rows.items()}

    doc = {
        "source": (
            "scripts/bench_detokenizer.py on this machine: SGLang DetokenizerManager's per-step "
            "decode (two batch_decode calls over 1- and 2-token windows per request, "
            "skip_special_tokens=True, spaces_between_special_tokens=True; "
            "detokenizer_manager.py of 0.5.6.post2) on a stand-in tokenizer of Kimi-K2's shape"
        ),
        "derived_by": (
            "median CPU time (time.process_time) of a step / requests in it; the three decode paths as SGLang runs "
            "them: hf_kwargs (transformers' slow _decode, SGLang < 0.5.11), cached_special "
            "(#16427's cache, SGLANG_PATCH_TOKENIZER default True from 0.5.11), native (#25309, "
            "0.5.13). Synthetic BPE ranks: decoding looks tokens up and joins bytes, its cost "
            "does not depend on the ranks' content"
        ),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "tiktoken": tiktoken.__version__,
        "base_tokens": BASE_TOKENS,
        "reserved_special_tokens": RESERVED,
        "additional_special_tokens": named,
        "per_request_token_us": {
            "hf_kwargs": per_token(raw, 0),
            "cached_special": per_token(cached, 0),
            "native": per_token(raw, 1),
        },
        "sensitivity_hf_kwargs_us_by_additional_special_tokens": {
            str(count): per_token(rows, 0) for count, rows in more.items()
        },
        "pr25309_case_ms": {
            "published": {"hf_kwargs": 727.0, "cached_special": 52.57, "native": 2.22},
            "here": {
                "hf_kwargs": round(pr_raw * 1e3, 2),
                "cached_special": round(pr_cached * 1e3, 2),
                "native": round(pr_native * 1e3, 2),
            },
        },
    }
    text = json.dumps(doc, indent=1) + "\n"
    print(text)
    if target is not None:
        try:
            write_atomic(target, lambda tmp: tmp.write_text(text, encoding="utf-8"), "--write")
        except KvplanError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
