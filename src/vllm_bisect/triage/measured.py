"""Roles from measurements: a sentence that gives each of two versions its own value of one
metric ("I test 0.4.3.post and its gen throughput is 14 t/s but the gen throughput of
0.4.3.post2 is 5 t/s") says which one is worse without a verdict word. Each metric has a good
direction (more tok/s is better, fewer ms or s is better); the version with the worse value is
the bad one. Only when neither version has a role from words already (a marker wins)."""

from __future__ import annotations

import re

from vllm_bisect.triage.markers import Role
from vllm_bisect.triage.refs import Mention
from vllm_bisect.triage.roles import Point
from vllm_bisect.triage.symptoms import NUM

RATE = re.compile(rf"(?P<n>{NUM})\s{{0,2}}(?:tok(?:en)?s?/s|t/s|TPS|tokens per second|req/s)"
                  r"(?![A-Za-z/])", re.IGNORECASE)
TIME = re.compile(rf"(?P<n>{NUM})\s{{0,2}}(?:ms|s|sec|seconds)(?![A-Za-z0-9_/])")
# a sentence ends at "." before a space (never inside "0.4.3.post") or at ! ? 。！？
SENTENCE = re.compile(r"(?:[^.!?。！？]|\.(?!\s|$)){1,2000}(?:\.(?=\s|$)|[!?。！？]|$)")


def _values(pat: re.Pattern[str], text: str, start: int) -> list[tuple[int, float]]:
    return [(start + m.start(), float(m.group("n").replace(",", ""))) for m in pat.finditer(text)]


def measured_roles(lines: list[str], mentions: list[Mention], points: list[Point]) -> None:
    own = {id(m): p for p in points for m in p.mentions}
    for n, line in enumerate(lines, 1):
        ms = sorted((m for m in mentions if m.line == n and id(m) in own), key=lambda m: m.start)
        if len(ms) != 2 or own[id(ms[0])] is own[id(ms[1])]:
            continue
        for s in SENTENCE.finditer(line):
            inside = [m for m in ms if s.start() <= m.start < s.end()]
            if len(inside) != 2:
                continue
            for pat, higher_better in ((RATE, True), (TIME, False)):
                vals = _values(pat, s.group(0), s.start())
                if len(vals) != 2 or not (inside[0].end <= vals[0][0] < inside[1].start
                                          and inside[1].end <= vals[1][0]):
                    continue  # each value right after its own version, in order
                p, q = own[id(inside[0])], own[id(inside[1])]
                if p.votes or q.votes or vals[0][1] == vals[1][1]:
                    continue
                first_better = (vals[0][1] > vals[1][1]) == higher_better
                good, bad = (p, q) if first_better else (q, p)
                why = f"line {n}: its measured value is the {{}} one of the two in its sentence"
                good.vote(Role.GOOD, 2, why.format("better"), n)
                bad.vote(Role.BAD, 2, why.format("worse"), n)
