"""Round-7 symptom word classes (symptom_words.py holds the earlier ones); each says why it counts.

- **correctness**: accuracy, precision or response quality with a word that it got worse or has
  a problem ("accuracy test issues", "Precision for X drops a lot", "response quality ... is
  degraded"), the English of 精度问题 / 精度下降; a loop said by repeating the words ("repeat and
  repeat", "again and again", "over and over"); a run that writes nothing usable ("fails to
  generate content", "returns empty text").
- **itl**: the time of one decode step or of the attention in it ("attention computation time
  increased 1.7x", "decode step time went up") with a change word: a per-token time is ITL;
  not in a prefill sentence.
- **mtp-speedup**: the acceptance length / rate of a speculative method with a word that it
  fell ("The acceptance length of EAGLE3 is lower than it used to be"): fewer accepted draft
  tokens is the lost speed-up (round 6 read only a length stuck at 1).
- **crash**, only when no other symptom is read: a Python exception or traceback anywhere, logs
  included (``ModuleNotFoundError``, "No module named", "has no attribute", ``Traceback (most
  recent call last)``): the run stopped there; or a component, device or feature said to be
  broken / not working / failing ("the scheduler is broken", "310I Duo been broken"). A
  *version* said to be broken ("0.14 was broken") is a verdict on the end, not how it fails,
  so it names no symptom.
"""

from __future__ import annotations

import re

from vllm_bisect.symptoms import Symptom
from vllm_bisect.triage.symptom_words import SENTENCE, prose_lines
from vllm_bisect.triage.symptoms import CHANGE, NEGATED, Found

_WORSE = (r"(?:issues?|problems?|drops?|dropped|dropping|degrad\w{0,5}|regress\w{0,5}|"
          r"decreas\w{0,3}|worse|lower|bad)\b")
ACCURACY = re.compile(r"\b(?:accura\w{0,4}|accuarcy|precision|(?:response|output|answer|generation)s?"
                      r"\s{1,3}quality)\b(?:\s{1,3}[^\s。]{1,20}){0,4}?\s{1,3}" + _WORSE,
                      re.IGNORECASE)
LOOP = re.compile(r"\bagain\s{1,3}and\s{1,3}again\b|\bover\s{1,3}and\s{1,3}over\b|"
                  r"\brepeat\w{0,3}\s{1,3}and\s{1,3}repeat", re.IGNORECASE)
# a server that runs but writes nothing usable: "fails to generate content", "produces no output"
NO_OUTPUT = re.compile(r"\bfail\w{0,3}\s{1,3}to\s{1,3}(?:generate|produce|return|output)\s{1,3}"
                       r"(?:any\s{1,3})?(?:content|outputs?|text|answers?|tokens?|responses?)\b|"
                       r"\b(?:generates?|produces?|returns?)\s{1,3}(?:no|empty)\s{1,3}"
                       r"(?:content|outputs?|text|answers?|tokens?)\b", re.IGNORECASE)
DECODE_STEP = re.compile(r"\b(?:attention|decode|decoding)\s{1,3}(?:\S{1,20}\s{1,3}){0,2}?"
                         r"(?:computation\s{1,3}|step\s{1,3}|iteration\s{1,3})?(?:time|cost)\b",
                         re.IGNORECASE)
ACCEPTANCE = re.compile(r"accept(?:ance|ed)?[\s_-]{0,2}(?:length|len|rate)|接受率|接受长度",
                        re.IGNORECASE)
FELL = re.compile(r"\blower\b|\bdrop|\bdecreas|\bfell\b|\bfall|\breduc|\bworse|regress|下降|降低",
                  re.IGNORECASE)
NOT = re.compile(r"\bno\b|\bnot\b|n't\b|没有|未", re.IGNORECASE)
EXCEPTION = re.compile(r"Traceback \(most recent call last\)|\b(?:ModuleNotFound|Import|Attribute|"
                       r"Runtime|Assertion|NotImplemented|Key|Type|Value|Index)Error\b|"
                       r"No module named|has no attribute|cannot import name")
_VERSION_BEFORE = re.compile(r"\bv?\d{1,3}(?:\.\d{1,4}){1,3}\w{0,8}[`'\")]{0,2}\s{1,3}"
                             r"(?:(?:is|was|are|were|has\s{1,3}been|been)\s{1,3})?(?:also\s{1,3})?$",
                             re.IGNORECASE)
BROKEN = re.compile(r"\bbroken\b|\bdoes(?:n't|\s{1,3}not)\s{1,3}work\b|\bnot\s{1,3}working\b|"
                    r"\bfails\b|不能用|不可用|用不了", re.IGNORECASE)


def _prose(lines: list[str]) -> list[tuple[int, str]]:
    """(line, sentence) outside fenced code, split as symptom_words splits them."""
    return [(n, s) for n, line in prose_lines(lines) for s in SENTENCE.split(line) if s.strip()]


def failure_symptoms(lines: list[str], found: set[Found]) -> list[tuple[Found, int, str]]:
    """(symptom, line, why) for every rule of the module doc that fires (first line each);
    ``found``: what the other rules read (the crash fallback asks it)."""
    out: dict[Found, tuple[int, str]] = {}
    prose = _prose(lines)
    for n, text in prose:
        m = ACCURACY.search(text)
        if m and not NEGATED.search(text) and not NOT.search(m.group(0)):
            out.setdefault(Symptom.CORRECTNESS, (n, f"{m.group(0)!r}: accuracy worse"))
        m = LOOP.search(text)
        if m:
            out.setdefault(Symptom.CORRECTNESS, (n, f"{m.group(0)!r}: a repetition loop"))
        m = NO_OUTPUT.search(text)
        if m:
            out.setdefault(Symptom.CORRECTNESS, (n, f"{m.group(0)!r}: no usable output"))
        m = DECODE_STEP.search(text)
        if m and CHANGE.search(text) and not NEGATED.search(text) and "prefill" not in text.lower():
            out.setdefault(Symptom.ITL, (n, f"{m.group(0)!r} with a change: a decode-step time"))
        m = ACCEPTANCE.search(text)
        if m and FELL.search(text) and not NEGATED.search(text) and not NOT.search(text):
            out.setdefault(Symptom.MTP_SPEEDUP, (n, f"{m.group(0)!r} fell: fewer accepted draft "
                                                  "tokens"))
    if not found and not out:
        for n, line in enumerate(lines, 1):
            m = EXCEPTION.search(line)
            if m:
                out[Symptom.CRASH] = (n, f"{m.group(0)!r}: an exception stops the run")
                break
    if not found and not out:
        for n, text in prose:
            m = BROKEN.search(text)
            if m and not _VERSION_BEFORE.search(text[:m.start()]) and not NOT.search(
                    text[max(0, m.start() - 12):m.start()]):
                out[Symptom.CRASH] = (n, f"{m.group(0)!r}: a component that stops working")
                break
    return [(f, n, why) for f, (n, why) in out.items()]
