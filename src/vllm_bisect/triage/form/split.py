"""A form-rendered issue body cut into its answers.

GitHub renders an issue filed with a form as one ``### Label`` heading per field, the answer
below it (``_No response_`` when empty), a textarea with ``render: shell`` inside a ```shell
fence, and checkboxes as ``- [X] label`` / ``- [ ] label``. A body is read as the regression
form when at least three of its headings are the form's labels, one of them an end of the
range; anything else is free text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_bisect.triage.form.fields import NO_RESPONSE, Field, field_of

HEADING = re.compile(r"^###\s{1,4}(?P<label>\S[^\n]*)$")   # the label .strip()ped after
OTHER_HEADING = re.compile(r"^#{1,3}\s")
CHECKBOX = re.compile(r"^\s{0,3}[-*]\s{1,2}\[(?P<x>[ xX])\]\s{1,2}(?P<label>\S[^\n]{0,300})$")
FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")
MIN_FIELDS = 3


@dataclass(frozen=True)
class Answer:
    """One field's answer: its text as written (fence and blank edges dropped; "" for
    ``_No response_``), the 1-based line of its first line, and its ticked boxes."""

    field: Field
    text: str
    line: int
    heading_line: int
    checked: tuple[tuple[str, int], ...] = ()   # (label, line) of each ticked box


@dataclass(frozen=True)
class FormBody:
    answers: dict[Field, Answer]
    scaffold: frozenset[int]   # lines that are the form's frame: headings, empty answers,
    #                            checkboxes, the dropdown (blanked for the free-text reader)


def _answer(f: Field, heading: int, body: list[tuple[int, str]]) -> tuple[Answer, set[int]]:
    frame: set[int] = {heading}
    checked = tuple((m.group("label").strip(), n) for n, ln in body
                    if (m := CHECKBOX.match(ln)) and m.group("x") in "xX")
    frame |= {n for n, ln in body if CHECKBOX.match(ln)}  # the form's words, not the reporter's
    if f is Field.SEARCH:
        frame |= {n for n, _ in body}   # the dropdown's option text ("fix: find the first...")
    rows = [(n, ln) for n, ln in body if ln.strip()]
    if rows and rows[0][1].strip() == NO_RESPONSE:
        frame.add(rows[0][0])
        rows = rows[1:]
    if len(rows) >= 2 and FENCE.match(rows[0][1]) and FENCE.match(rows[-1][1]):
        rows = rows[1:-1]
    first = rows[0][0] if rows else heading
    text = "\n".join(ln for n, ln in body if rows and rows[0][0] <= n <= rows[-1][0]
                     and not FENCE.match(ln)).strip() if rows else ""
    return Answer(f, text, first, heading, checked), frame


def split_form(lines: list[str]) -> FormBody | None:
    """The answers of a body rendered from the regression form, or None for free text."""
    sections: list[tuple[Field | None, int, list[tuple[int, str]]]] = []
    fence = False
    for n, line in enumerate(lines, 1):
        if FENCE.match(line):
            fence = not fence
        m = HEADING.match(line) if not fence else None
        if m or (not fence and OTHER_HEADING.match(line)):
            label = m.group("label").strip() if m else ""
            sections.append((field_of(label) if len(label) <= 200 else None, n, []))
        elif sections:
            sections[-1][2].append((n, line))
    ours = [(f, n, body) for f, n, body in sections if f is not None]
    named = {f for f, _, _ in ours}
    if len(named) < MIN_FIELDS or not named & {Field.GOOD, Field.BAD}:
        return None
    answers: dict[Field, Answer] = {}
    scaffold: set[int] = set()
    for f, n, body in ours:
        if f in answers:
            continue  # a field answered twice: the first is the form's, the rest is text
        answers[f], frame = _answer(f, n, body)
        scaffold |= frame
    return FormBody(answers, frozenset(scaffold))
