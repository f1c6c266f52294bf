"""Every note the code creates has words, in one place; every text has a note that uses it. The
words live in one family module per id prefix (kvplan/present/notes/): every id is found through
the prefix table, none is registered twice, and printing a note imports its family alone."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kvplan.notes import note
from kvplan.present import notes
from kvplan.present.notes import FAMILIES, all_texts, family, note_text
from kvplan.present.notes.registry import text

from helpers import REPO

NOTE_CALL = re.compile(r'\bnote\(\s*"([a-z0-9-]+)"')
TEXT_CALL = re.compile(r'^text\("([a-z0-9-]+)"\)', re.MULTILINE)
FAMILY_DIR = REPO / "kvplan/present/notes"


def created_ids() -> set[str]:
    ids = set()
    for path in (REPO / "kvplan").rglob("*.py"):
        ids |= set(NOTE_CALL.findall(path.read_text(encoding="utf-8")))
    return ids


def test_every_note_id_has_words():
    missing = created_ids() - set(all_texts())
    assert not missing, f"notes without text in kvplan/present/notes/: {sorted(missing)}"


def test_every_text_belongs_to_a_note_the_code_creates():
    unused = set(all_texts()) - created_ids()
    assert not unused, f"texts no code creates: {sorted(unused)}"


def test_every_id_is_registered_by_the_family_its_prefix_names():
    texts = all_texts()
    misplaced = {
        note_id: (fn.__module__, family(note_id))
        for note_id, fn in texts.items()
        if fn.__module__ != f"kvplan.present.notes.{family(note_id)}"
    }
    assert not misplaced, f"id: (module that registers it, family its prefix names) {misplaced}"
    files = {path.stem for path in FAMILY_DIR.glob("*.py")} - {"__init__", "registry"}
    assert files == set(FAMILIES), "a family module FAMILIES does not name, or one with no file"


def test_no_id_is_registered_twice_and_every_prefix_is_used():
    registered: dict[str, list[str]] = {}
    for path in sorted(FAMILY_DIR.glob("*.py")):
        for note_id in TEXT_CALL.findall(path.read_text(encoding="utf-8")):
            registered.setdefault(note_id, []).append(path.name)
    twice = {note_id: where for note_id, where in registered.items() if len(where) > 1}
    assert not twice, f"registered more than once: {twice}"
    assert set(registered) == set(all_texts())
    used = {prefix for note_id in registered for prefix in _prefixes(note_id)}
    idle = sorted(p for prefixes in FAMILIES.values() for p in prefixes if p not in used)
    assert not idle, f"prefixes in FAMILIES no note id has: {idle}"
    with pytest.raises(ValueError, match="two texts"):
        text("capacity-paged")(lambda block_size: "")


def _prefixes(note_id: str) -> list[str]:
    words = note_id.split("-")
    return ["-".join(words[:n]) for n in range(1, len(words) + 1)]


def test_the_longest_whole_word_prefix_decides():
    assert family("tp-crosses-nodes") == "capacity"
    assert family("tp-per-gpu") == "size"
    assert family("gpus-idle") == "capacity"
    assert family("gpus-dense") == "catalog"
    assert family("models-kv-per-token") == "catalog"
    assert family("model-path") == "sources"
    with pytest.raises(KeyError):
        family("nonesuch-note")
    with pytest.raises(KeyError):
        note_text(note("nonesuch-note"))


def test_printing_a_note_imports_its_family_alone():
    """In a fresh interpreter: the package imports no family; one note imports its own."""
    script = (
        "import sys\n"
        "from kvplan.notes import note\n"
        "from kvplan.present.notes import note_text\n"
        "loaded = lambda: sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "    if m.startswith('kvplan.present.notes.') and not m.endswith('.registry'))\n"
        "print(loaded())\n"
        "print(note_text(note('capacity-paged', block_size=16)))\n"
        "print(loaded())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.splitlines()
    assert out == ["[]", note_text(note("capacity-paged", block_size=16)), "['capacity']"]


def test_the_package_keeps_the_presenters_api():
    assert {"note_text", "note_texts", "all_texts"} <= set(vars(notes))
