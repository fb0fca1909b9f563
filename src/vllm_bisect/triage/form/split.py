"""A form-rendered issue body cut into its answers.

GitHub renders an issue filed with a form as one ``### Label`` heading per field, the answer
below it (``_No response_`` when empty), a textarea with ``render: shell`` inside a ```shell
fence, and checkboxes as ``- [X] label`` / ``- [ ] label``. A body is read as the regression
form when at least three of its headings are the form's labels, one of them an end of the
range; anything else is free text.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from vllm_bisect.triage.form.fields import NO_RESPONSE, Field, field_of

HEADING = re.compile(r"^###\s{1,4}(?P<label>\S[^\n]*)$")   # the label .strip()ped after
OTHER_HEADING = re.compile(r"^#{1,3}\s")
CHECKBOX = re.compile(r"^\s{0,3}[-*]\s{1,2}\[(?P<x>[ xX])\]\s{1,2}(?P<label>\S[^\n]{0,300})$")
FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")
# the bot's reply wraps its block in a ````markdown fence; copied with it, the block is still
# the form (its inner ```shell fences are the fields')
MD_FENCE = re.compile(r"^\s{0,3}(?P<ticks>`{4,}|~{4,})\s{0,2}(?:markdown|md)\s{0,4}$",
                      re.IGNORECASE)
# the bot's reply marks each answer it only guessed; pasted back unedited, it stays a guess
GUESS_MARK = re.compile(r"^\s{0,3}<!--\s{0,3}vllm-bisect guessed:\s{0,3}(?P<digest>[0-9a-f]{12})"
                        r"\s{0,3}-->\s{0,3}$")


def digest(text: str) -> str:
    """The short digest a guess mark names: the answer text, whitespace collapsed."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:12]
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
    guess_mark: str | None = None   # the digest of the bot's guess this answer was written as

    @property
    def unedited_guess(self) -> bool:
        """The bot's guessed answer, pasted back unchanged (it stays a guess)."""
        shown = "\n".join(label for label, _ in self.checked) if self.checked else self.text
        return self.guess_mark is not None and self.guess_mark == digest(shown)


@dataclass(frozen=True)
class FormBody:
    answers: dict[Field, Answer]
    scaffold: frozenset[int]   # lines that are the form's frame: headings, empty answers,
    #                            checkboxes, the dropdown (blanked for the free-text reader)
    copies: tuple[tuple[int, int], ...] = ()   # (first, last line) of each copy of the form


def _answer(f: Field, heading: int, body: list[tuple[int, str]]) -> tuple[Answer, set[int]]:
    frame: set[int] = {heading}
    marks = [(n, m.group("digest")) for n, ln in body if (m := GUESS_MARK.match(ln))]
    frame |= {n for n, _ in marks}
    body = [(n, ln) for n, ln in body if not GUESS_MARK.match(ln)]
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
    return Answer(f, text, first, heading, checked, marks[-1][1] if marks else None), frame


def split_form(lines: list[str]) -> FormBody | None:
    """The answers of a body rendered from the regression form, or None for free text."""
    sections: list[tuple[Field | None, int, list[tuple[int, str]]]] = []
    fence = False
    outer: str | None = None   # the ````markdown fence a copied block came in
    for n, line in enumerate(lines, 1):
        if not fence and outer is None and (md := MD_FENCE.match(line)):
            outer = md.group("ticks")
            continue
        if not fence and outer is not None and line.strip() and set(line.strip()) == {
                outer[0]} and len(line.strip()) >= len(outer):
            outer = None
            continue
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
    # the form pasted again (corrected, or the bot's reply): a field's heading repeats. Each
    # copy's answers replace the earlier ones (the latest answer of a field wins); a replaced
    # answer's lines are blanked for the free-text reader too
    copies: list[list[int]] = []
    seen: set[Field] = set()
    answers: dict[Field, Answer] = {}
    scaffold: set[int] = set()
    lines_of: dict[Field, set[int]] = {}
    for f, n, body in ours:
        if f in seen or not copies:
            copies.append([n, n])
            seen = set()
        seen.add(f)
        copies[-1][1] = max([n] + [m for m, _ in body])
        if f in answers:
            scaffold |= lines_of[f]
        answers[f], frame = _answer(f, n, body)
        lines_of[f] = {n} | {m for m, _ in body}
        scaffold |= frame
    return FormBody(answers, frozenset(scaffold), tuple((a, b) for a, b in copies))
