"""The mean acceptance length's bound, one rule (speculative.check_length through parse_accept)
for simulate and plan, at its edges (issue 28). SGLang's "Accept length" (bench_serving prints
the server's avg_spec_accept_length) counts, per request per verify, the accepted draft tokens
plus the bonus token (0.5.9 scheduler_metrics_mixin.update_spec_metrics: accepted + bs over bs;
0.5.14 metrics_reporter the same), and a request accepts at most --speculative-num-steps drafts
whatever the tree (eagle_info.verify's accept_index is num_steps + 1 wide, its root included):
so 1 <= length <= num_steps + 1 for EAGLE/NEXTN chains and trees alike; NGRAM verifies
num_draft_tokens a request (k = num_draft_tokens - 1). vLLM's mean acceptance length is the
same count (1 + accepted / drafts), k = num_speculative_tokens. `kvplan whatif` takes a
per-token rate only, no length."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.sources import load_model
from kvplan.simulate import speculative

from helpers import one_line_error, run_cli, run_json

DSV32 = load_model("deepseek-v3.2")
LLAMA = load_model("llama-3.1-8b")


@pytest.mark.parametrize(
    ("flags", "k"),
    [
        (("EAGLE", 2, 1, 3, None, DSV32), 2),  # the H800 DeepSeek-V3.2 launch: a chain
        (("EAGLE3", 3, 4, 8, "x/y", LLAMA), 3),  # a tree of 8 verified tokens, depth 3
        (("NGRAM", None, None, 5, None, LLAMA), 4),  # NGRAM: num_draft_tokens - 1
    ],
)
def test_the_bound_is_one_plus_the_drafted_depth(flags, k):
    request = speculative.parse_sglang(*flags)
    assert request.num_steps == k
    for length in (1.0, k + 0.5, k + 1.0):  # the edges and between them
        assert speculative.parse_accept(None, length, request) == (length, "length", None)
    for length in (0.999, k + 1.001, float("nan")):
        with pytest.raises(KvplanError, match=rf"between 1 and {k + 1} \(k \+ 1\)"):
            speculative.parse_accept(None, length, request)


SIM = (
    *("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang"),
    *("--num-prompts", "8", "--input-len", "128", "--output-len", "16"),
    *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y"),
    *("--speculative-num-steps", "2", "--speculative-eagle-topk", "1"),
    *("--speculative-num-draft-tokens", "3"),
)
PLAN = (
    *("plan", "deepseek-v3", "--gpu", "h200", "--emit", "sglang", "--rate", "1"),
    *("--slo", "tpot_p99=1s", "--tp", "8", "--num-prompts", "20", "--input-len", "128"),
    *("--output-len", "16", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192"),
    *("--kv-cache-dtype", "auto", "--jobs", "1"),
    *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"),
)


def test_simulate_and_plan_take_the_same_edges():
    """k + 1 = 3 runs in simulate (3 tokens a round) and plan; 3.27 (the H800 blocks' printed
    figure) is the same one-line refusal in both, before any run."""
    sim = run_json(*SIM, "--spec-accept-length", "3")
    assert sim["setup"]["speculative"]
    for head in (SIM, PLAN):
        code, out, err = run_cli(*head, "--spec-accept-length", "3.27")
        one_line_error(code, err, "3.27: between 1 and 3 (k + 1) for 2 drafted tokens")
        assert out == ""
    planned = run_json(*PLAN, "--spec-accept-length", "3", "--no-prune")
    speculating = [c for c in planned["candidates"] if c.get("speculative")]
    assert speculating and all(c["spec_tokens_per_round"] == 3.0 for c in speculating)
