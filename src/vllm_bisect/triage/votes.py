"""Role votes from a report's text: each marker binds to its own ref (a phrase right before
it, one right after it in the same sentence, a ✅/❌-style word in a table row or clause that
names only that ref), and "X to Y" / "X → Y" orders two refs. The votes are cast on the
:class:`~vllm_bisect.triage.roles.Point` s; :func:`~vllm_bisect.triage.roles.choose` decides."""

from __future__ import annotations

from itertools import pairwise

from vllm_bisect.triage.markers import (
    AFTER,
    AFTER_FIXED,
    ARROW,
    BEFORE,
    CLAUSE_END,
    COMPARE,
    COMPARE_TAIL,
    CURED,
    DOWNGRADE,
    FILLER,
    HEDGE,
    LABEL_LINE,
    LABEL_ROLE,
    ROW,
    SEGMENT,
    STILL,
    TABLE_RULE,
    UPGRADE_NOUN,
    Role,
    is_question,
    open_range,
)
from vllm_bisect.triage.refs import Mention
from vllm_bisect.triage.roles import Point

MARKUP = str.maketrans("", "", "`*_\"'“”")


def _strip_filler(text: str) -> str:
    text = text[-100:]
    for _ in range(60):
        m = FILLER.search(text)
        if not m:
            break
        text = text[:m.start()]
    return text


def _before_marker(text: str) -> tuple[Role, str] | None:
    """The marker right before a ref, looking past filler words one at a time."""
    text = text[-100:]
    for _ in range(60):
        for role, pat in BEFORE:
            hit = pat.search(text)
            if hit:
                return role, hit.group(0)
        m = FILLER.search(text)
        if not m:
            return None
        text = text[:m.start()]
    return None


def _clauses(line: str) -> list[tuple[int, int]]:
    cuts = [0] + [x.end() for x in CLAUSE_END.finditer(line)] + [len(line)]
    return [(a, b) for a, b in pairwise(cuts) if b > a]


def assign_votes(lines: list[str], mentions: list[Mention], points: list[Point]
                 ) -> list[tuple[Point, Point]]:
    """Cast role votes from markers; return the ordered (older, newer) pairs from "X to Y"."""
    arrows: list[tuple[Point, Point]] = []
    by_line: dict[int, list[Mention]] = {}
    own = {id(m): p for p in points for m in p.mentions}

    def _point_of(_: list[Point], m: Mention) -> Point | None:
        return own.get(id(m))

    for m in mentions:
        if _point_of(points, m) is not None:
            by_line.setdefault(m.line, []).append(m)
    section: Role | None = None
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        label = LABEL_LINE.match(stripped) if len(stripped) < 40 else None
        if label:
            section = LABEL_ROLE[label.group("label").lower().split()[0]]
            continue
        if stripped.startswith("#") or not stripped:
            section = None if stripped.startswith("#") else section
        ms = by_line.get(n, [])
        if not ms or TABLE_RULE.match(line):
            continue
        table = stripped.startswith("|") and stripped.count("|") >= 2
        segments = [(0, len(line))] if table else _clauses(line)
        for a, b in segments:
            seg = [m for m in ms if a <= m.start < b]
            if not seg:
                continue
            distinct = {id(_point_of(points, m)) for m in seg}
            for i, m in enumerate(seg):
                p = _point_of(points, m)
                assert p is not None
                prev_end = seg[i - 1].end if i else a
                next_start = seg[i + 1].start if i + 1 < len(seg) else b
                bound = False
                found = _before_marker(line[prev_end:m.start])
                if found is not None and UPGRADE_NOUN.match(line[m.end:next_start]):
                    found = (Role.BAD, f"{found[1]} ... upgrade")  # "before the X upgrade"
                if found is not None and found[0] is Role.FIXED and (
                        is_question(line[a:b]) or HEDGE.search(line[a:b]) or STILL.search(line)):
                    found = None  # "Is this fixed in 0.7.0?" asks, "should be fixed" hopes,
                    # "fixed in 0.8.0 but came back" says it is not
                found = open_range(line, (prev_end, m.start, m.end, next_start), (a, b), found)
                if found is not None:
                    p.vote(found[0], 3, f"line {n}: {found[1]!r} before it", n)
                    bound = True
                after = line[m.end:next_start][:60]
                wide = line[m.end:(ms[ms.index(m) + 1].start if ms.index(m) + 1 < len(ms)
                                   else len(line))][:60]
                if not bound and AFTER_FIXED.search(wide):
                    p.vote(Role.FIXED, 3, f"line {n}: {wide.strip()[:30]!r} after it", n)
                    bound = True
                subject = p
                if i > 0 and COMPARE.match(_strip_filler(line[seg[i - 1].end:m.start]).strip()):
                    subject = _point_of(points, seg[i - 1]) or p  # "X 相比 Y 劣化": X changed
                # "(X 的精度)较 Y 下降": Y is what the change is measured against (X may be no
                # ref at all): the verdict after Y is X's, Y takes the other one
                reference = subject is p and bool(COMPARE_TAIL.search(
                    _strip_filler(line[prev_end:m.start])))
                for role, pat in AFTER if not (bound or table) else ():
                    if pat.search(after):
                        if reference:
                            role = Role.GOOD if role is Role.BAD else Role.BAD
                        subject.vote(role, 2, f"line {n}: {after.strip()[:30]!r} after "
                                              f"{'it' if subject is p else 'the comparison'}"
                                              + (" (the reference of a comparison)" if reference
                                                 else ""), n)
                        bound = subject is p
                        break
                if not bound and len(distinct) == 1:
                    text = line[a:b]
                    for role, pat in SEGMENT + (ROW if table else ()):
                        if pat.search(text):
                            where = "its table row" if table else "its sentence"
                            hit = pat.search(text)
                            p.vote(role, 1, f"line {n}: {hit.group(0) if hit else ''!r} in "
                                            f"{where}", n)
                            bound = True
                            break
                if not bound and section is not None:
                    p.vote(section, 1, f"line {n}: under a {section.value!r} label", n)
                if i + 1 < len(seg) and m.how == seg[i + 1].how == "compare-url":
                    q = _point_of(points, seg[i + 1])  # a compare URL a...b: a is the base
                    if q is not None and q is not p:
                        arrows.append((p, q))
                elif i + 1 < len(seg):
                    q = _point_of(points, seg[i + 1])
                    # markdown around a ref (`sha`, **v0.5**) is formatting, not a word
                    gap = _strip_filler(line[m.end:seg[i + 1].start].translate(MARKUP)).strip()
                    if q is not None and q is not p and ARROW.match(gap):
                        # "downgrading from X to Y", "switching from X to Y fixed it": Y works
                        back = DOWNGRADE.search(line[max(a, m.start - 50):m.start])
                        if back or CURED.match(line[seg[i + 1].end:b]):
                            q.vote(Role.GOOD, 2, f"line {n}: works after switching to it", n)
                            p.vote(Role.BAD, 2, f"line {n}: switched away from it", n)
                        else:
                            arrows.append((p, q))
    return arrows
