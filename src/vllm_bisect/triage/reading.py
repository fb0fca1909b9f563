"""Triage's entry: a report body in, a reading out. A body rendered from the regression form
is read field by field, exactly (triage/form/); free text, and whatever the form left empty,
by the rules (triage/parse.py). Every value keeps the sentence of the line it came from."""

from __future__ import annotations

import dataclasses
import re

from vllm_bisect.triage.form import free_text_view, read_form, split_form
from vllm_bisect.triage.parse import MAX_CHARS
from vllm_bisect.triage.parse import triage as free_text_triage
from vllm_bisect.triage.refs import MAX_LINE
from vllm_bisect.triage.values import Read, Triage

QUOTE_CHARS = 200
SENTENCE_END = re.compile(r"[!?。！？]|\.(?=\s|$)")


def sentence(line: str, value: str) -> str:
    """The sentence of ``line`` that holds ``value`` (else the line), at most QUOTE_CHARS. A
    sentence ends at "." before a space or the end (never inside "0.4.3.post"), or at ! ? 。"""
    text = line.strip()
    needle = value.split(" (")[0].lower()
    start = 0
    for end in [m.end() for m in SENTENCE_END.finditer(text)] + [len(text)]:
        if needle and needle in text[start:end].lower():
            text = text[start:end].strip()
            break
        start = end
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "..."


def _quoted(r: Read, lines: list[str]) -> Read:
    if r.quote or not r.line or not 0 < r.line <= len(lines):
        return r
    return dataclasses.replace(r, quote=sentence(lines[r.line - 1], r.value))


def triage(text: str) -> Triage:
    text = text[:MAX_CHARS]
    lines = [ln[:MAX_LINE] for ln in text.splitlines()]
    form = split_form(lines)
    t = free_text_triage("\n".join(free_text_view(form, lines)) if form else text)
    if form is not None:
        read_form(t, form)
    t.read = [_quoted(r, lines) for r in t.read]
    return t
