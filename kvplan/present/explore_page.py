"""`kvplan explore` as one self-contained HTML page: the data kvplan computed
(kvplan.plans.explore) embedded as JSON, exactly what `kvplan explore --format json` prints, and
the page's words, layout and script (kvplan.present.explore_html, kvplan.present.explore_js).

The script formats bytes the way kvplan.present.format.bytes_text does (two decimals in the
largest binary unit that keeps the number >= 1, thousands separated); it computes no number of
its own beyond placing bars."""

from __future__ import annotations

import html
import json

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
    payload = payload.replace("</", "<\\/")  # no "</script>" inside the data block
    title = html.escape(f"KV cache explorer: {result.model['name']}")
    return (
        PAGE.replace("__STYLE__", STYLE)
        .replace("__BODY__", BODY)
        .replace("__SCRIPT__", SCRIPT)
        .replace("__TITLE__", title)
        .replace("__DATA__", payload)
    )


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__STYLE__</style></head><body>
__BODY__
<script id="kvplan-data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script></body></html>
"""
