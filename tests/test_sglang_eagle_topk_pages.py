"""SGLang's refusal of an EAGLE draft tree (--speculative-eagle-topk > 1) on pages of more than
one token (server_args._handle_speculative_decoding; arg_groups/speculative_hook.py
_handle_eagle_family from 0.5.13): "speculative_eagle_topk > 1 with page_size > 1 is unstable
... only supported for the 'flashinfer' backend" from 0.5.2, fa3 beside it from 0.5.6, triton
from 0.5.13 (_PAGE_TREE_SPEC_BACKENDS); 0.5.1 and the 0.4 releases have no such rule. NGRAM
(whose topk is its BFS breadth) takes flashinfer only, from 0.5.3, its first release."""

from __future__ import annotations

import pytest

from kvplan.engines.sglang import eagle_tree_page_backends

from helpers import one_line_error, run_cli, run_json

SIM = (
    *("simulate", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8"),
    *("--num-prompts", "4", "--input-len", "200", "--output-len", "20"),
    *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2"),
    *("--speculative-num-draft-tokens", "4"),
)
TREE = ("--speculative-eagle-topk", "2")
CHAIN = ("--speculative-eagle-topk", "1")


def test_the_backends_by_release():
    assert eagle_tree_page_backends("0.4.10") is None
    assert eagle_tree_page_backends("0.5.1") is None
    assert eagle_tree_page_backends("0.5.2") == ("flashinfer",)
    assert eagle_tree_page_backends("0.5.5") == ("flashinfer",)
    assert eagle_tree_page_backends("0.5.6") == ("flashinfer", "fa3")
    assert eagle_tree_page_backends("0.5.12") == ("flashinfer", "fa3")
    assert eagle_tree_page_backends("0.5.13") == ("flashinfer", "fa3", "triton")
    assert eagle_tree_page_backends("0.5.23") == ("flashinfer", "fa3", "triton")


@pytest.mark.parametrize(
    "flags,release",
    [
        (("--attention-backend", "flashmla"), "0.5.9"),  # its 64-token pages
        (("--attention-backend", "flashmla"), "0.5.23"),
        (("--attention-backend", "triton", "--page-size", "16"), "0.5.12"),
        (("--attention-backend", "fa3", "--page-size", "16"), "0.5.5"),
    ],
)
def test_a_tree_on_pages_is_refused_off_the_release_backends(flags, release):
    code, out, err = run_cli(*SIM, *TREE, *flags, "--engine-version", release)
    one_line_error(code, err, "page_size > 1")
    assert out == ""


@pytest.mark.parametrize(
    "flags,release",
    [
        (("--attention-backend", "triton", "--page-size", "16"), "0.5.13"),
        (("--attention-backend", "fa3", "--page-size", "16"), "0.5.6"),
        (("--page-size", "16"), "0.5.9"),  # fa3, SGLang's pick for MLA on SM90
        (("--attention-backend", "triton", "--page-size", "16"), "0.5.1"),  # no rule yet
    ],
)
def test_a_tree_on_pages_runs_where_the_release_takes_it(flags, release):
    doc = run_json(*SIM, *TREE, *flags, "--engine-version", release)
    assert doc["setup"]["speculative"]


def test_a_chain_or_one_token_pages_run_anywhere():
    assert run_json(*SIM, *CHAIN, "--attention-backend", "flashmla", "--engine-version", "0.5.9")
    assert run_json(*SIM, *TREE, "--attention-backend", "triton", "--engine-version", "0.5.9")
