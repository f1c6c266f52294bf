"""Every note the code creates has words, in one place; every text has a note that uses it."""

from __future__ import annotations

import re

from kvplan.present.notes import all_texts

from helpers import REPO

NOTE_CALL = re.compile(r'\bnote\(\s*"([a-z0-9-]+)"')


def created_ids() -> set[str]:
    ids = set()
    for path in (REPO / "kvplan").rglob("*.py"):
        ids |= set(NOTE_CALL.findall(path.read_text(encoding="utf-8")))
    return ids


def test_every_note_id_has_words():
    missing = created_ids() - set(all_texts())
    assert not missing, (
        f"notes without text in kvplan/present/notes.py, notes_gpu.py or notes_more.py: {sorted(missing)}"
    )


def test_every_text_belongs_to_a_note_the_code_creates():
    unused = set(all_texts()) - created_ids()
    assert not unused, f"texts no code creates: {sorted(unused)}"
