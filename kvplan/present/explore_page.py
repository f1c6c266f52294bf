"""`kvplan explore` as one self-contained HTML page: the data kvplan computed
(kvplan.plans.explore) embedded as JSON, exactly what `kvplan explore --format json` prints, and
the page's words, layout and script (kvplan.present.explore_html, kvplan.present.explore_js).

The script formats bytes the way kvplan.present.format.bytes_text does (two decimals in the
largest binary unit that keeps the number >= 1, thousands separated); it computes no number of
its own beyond placing bars."""

from __future__ import annotations

import html
import json
import re

from kvplan.plans.explore import ExploreResult
from kvplan.present.explore_html import BODY, STYLE
from kvplan.present.explore_js import SCRIPT
from kvplan.present.view import jsonable


def explore_json(result: ExploreResult) -> dict:
    """The page's data: the typed result as JSON (notes as {"id", "text"})."""
    return jsonable(result)


def explore_json_text(result: ExploreResult) -> str:
    return json.dumps(explore_json(result), indent=1, allow_nan=False) + "\n"


def explore_page(result: ExploreResult) -> str:
    """The page's HTML: kvplan's numbers embedded as data, the words and layout around them."""
    payload = json.dumps(explore_json(result), separators=(",", ":"), allow_nan=False)
    # "<" only ever appears inside JSON strings: as \u003c, neither "</script>" nor "<!--" (which
    # makes a later "</script>" no end tag) can occur inside the data block.
    payload = payload.replace("<", "\\u003c")
    title = html.escape(f"KV cache explorer: {result.model['name']}")
    parts = {"STYLE": STYLE, "BODY": BODY, "SCRIPT": SCRIPT, "TITLE": title, "DATA": payload}
    # one pass over the page: a model named "__DATA__" stays its name, not the payload again
    return re.sub(r"__(STYLE|BODY|SCRIPT|TITLE|DATA)__", lambda m: parts[m.group(1)], PAGE)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__STYLE__</style></head><body>
__BODY__
<script id="kvplan-data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script></body></html>
"""
