"""Small wording helpers every layer uses: counted nouns, durations, and commit subjects
shortened without cutting their pull-request number (pure)."""

from __future__ import annotations

import re

PR_AT_END = re.compile(r"\s*\(#\d+\)\s*$")


def plural(n: float, noun: str, nouns: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 steps`` (``nouns``: an irregular plural)."""
    return f"{n:g} {noun if n == 1 else nouns or noun + 's'}"


def seconds(s: float) -> str:
    """A short time in seconds as it reads: ``0.4 s``, ``6 s`` (never ``0 s`` for 0.4), and
    under 0.05 s in milliseconds (``20 ms``, never ``0.0 s``)."""
    if 0 < s < 0.05:
        return f"{max(s * 1000, 1):.0f} ms"
    return f"{s:.1f} s" if 0 < s < 9.95 else f"{s:.0f} s"


def duration_h(hours: float) -> str:
    """A wall time given in hours, in the unit that reads: ``40 s``, ``12 min``, ``1.5 h``."""
    s = hours * 3600
    if s < 90:
        return f"{max(1, round(s))} s"
    if hours < 1.5:
        return f"{round(s / 60)} min"
    return f"{hours:.1f} h"


def short_subject(subject: str, width: int) -> str:
    """``subject`` in at most ``width`` characters: the text is cut (with an ellipsis), never
    its trailing ``(#PR)``."""
    subject = subject.strip()
    if len(subject) <= width:
        return subject
    m = PR_AT_END.search(subject)
    tail = subject[m.start():].strip() if m else ""
    head = subject[:m.start()] if m else subject
    room = width - len(tail) - (2 if tail else 1)
    if room < 8:   # no room for both: the PR number alone says which change
        return tail if tail and len(tail) <= width else subject[:width - 1] + "…"
    return head[:room].rstrip() + "…" + (f" {tail}" if tail else "")
