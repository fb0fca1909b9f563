"""Round 7: a symbolic end pinned by the report. "main" read as an end (from "drops a lot on
main") is main's head when the bisect runs; a sha the report labels as main's ("main commit
da3dc497...", "main at da3dc497", "main (da3dc497)") is the main that was measured, so that sha
is the end: main has moved on since the report."""

from __future__ import annotations

import re

MAIN_SHA = re.compile(r"\b(?:main|master)(?:\s{1,3}(?:branch\s{1,3})?(?:commit|at|@)|\s{0,2}[(@:])"
                      r"\s{0,3}`?(?P<sha>[0-9a-f]{7,40})\b", re.IGNORECASE)


def main_pin(lines: list[str]) -> tuple[str, int] | None:
    """(sha, line) of the first sha the report labels as main's commit, or None."""
    for n, line in enumerate(lines, 1):
        m = MAIN_SHA.search(line)
        if m and any(c.isdigit() for c in m.group("sha")) and any(c.isalpha() for c in m.group("sha")):
            return m.group("sha"), n
    return None
