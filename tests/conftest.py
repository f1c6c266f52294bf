"""Test-suite settings. CI runs property and fuzz tests derandomized (the same examples every run,
so a red run means a change, not a lucky draw); local runs stay random to keep finding bugs."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
