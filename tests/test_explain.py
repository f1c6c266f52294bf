"""kvplan explain: every term kvplan prints has words, each entry's example runs, and the terms
printed by roofline are defined where they appear too."""

from __future__ import annotations

import shlex

import pytest

from kvplan.present.glossary import TERMS, lookup

from helpers import run_cli, run_json


@pytest.mark.parametrize("term", TERMS, ids=lambda t: t.name)
def test_every_term_resolves_by_name_and_alias_and_its_example_runs(term):
    for spelling in (term.name, term.name.upper(), *term.aliases):
        assert lookup(spelling) is term, spelling
    argv = shlex.split(term.example)
    assert argv[0] == "kvplan"
    code, out, err = run_cli(*argv[1:])
    assert code == 0, f"{term.example}: {err}"
    data = run_json("explain", term.name)
    assert data["term"] == term.name and data["meaning"] == term.meaning


def test_unknown_terms_suggest_the_near_ones():
    code, _, err = run_cli("explain", "I_infinity")
    assert code == 2 and "I_inf" in err and len(err.strip().splitlines()) == 1


def test_the_list_names_every_term():
    data = run_json("explain")
    assert [row["term"] for row in data["terms"]] == [t.name for t in TERMS]


def test_roofline_defines_the_terms_it_prints():
    data = run_json("roofline", "llama-3.1-8b")
    words = " ".join(n["text"] for n in data["notes"])
    for term in ("I_inf", "BW/(s x k)", "s*", "B_read", "kvplan explain"):
        assert term in words
