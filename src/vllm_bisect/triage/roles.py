"""Which ref is good, which is bad (or, in a fix report, which has the problem and which is fixed).

A marker binds to its own ref (:mod:`~vllm_bisect.triage.votes` casts the votes): a phrase right
before it ("after upgrading to X", "pre-fix main X", "Occurs in: X", "last good X"), a phrase
right after it in the same sentence ("X is slow", "X gives much better ..."), or a ✅/❌-style
word in a table row or clause that names only that ref. "X to Y" / "X → Y" orders two refs
(here: the points, and the choice). Refs left without a role take the one implied by version
order (in a regression report the older of two compared versions is the good one). Then the
range is the latest good before the earliest bad.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from packaging.version import Version

from vllm_bisect.triage.markers import (
    Role,
)
from vllm_bisect.triage.refs import Mention, version_key


class SearchKind(StrEnum):
    REGRESSION = "regression"
    FIX = "fix"


@dataclass
class Point:
    """One ref of the report with every mention of it and the role votes they cast."""

    version: str | None
    sha: str | None
    mentions: list[Mention] = field(default_factory=list)
    votes: dict[Role, int] = field(default_factory=dict)
    why: list[str] = field(default_factory=list)  # "line 17: ❌ in its table row"
    role_lines: dict[Role, int] = field(default_factory=dict)  # where each role was first read
    marked: list[tuple[Role, str]] = field(default_factory=list)  # each vote's role and words
    name: str | None = None  # a symbolic ref ("main": a fix seen on the main branch/nightlies)

    @property
    def ref(self) -> str:
        if self.sha:
            return self.sha
        if self.version is None:
            return self.name or "?"
        v = version_key(self.version)
        if v is not None and v.is_devrelease:
            return self.version  # a dev/nightly string: no tag, needs its commit
        return "v" + _release_text(self.version)

    @property
    def key(self) -> Version | None:
        return version_key(self.version)

    @property
    def label(self) -> str:
        if self.version and self.sha:
            return f"{self.version} ({self.sha[:12]})"
        return self.ref

    @property
    def line(self) -> int:
        return self.mentions[0].line if self.mentions else min(self.role_lines.values(), default=1)

    def role(self) -> Role | None:
        if not self.votes:
            return None
        best = max(self.votes.values())
        top = [r for r, n in self.votes.items() if n == best]
        return top[0] if len(top) == 1 else None

    def vote(self, role: Role, weight: int, why: str, line: int | None = None) -> None:
        self.votes[role] = self.votes.get(role, 0) + weight
        self.why.append(why)
        self.marked.append((role, why))
        if line is not None:
            self.role_lines.setdefault(role, line)


def _release_text(version: str) -> str:
    parts = version.split(".")
    if len(parts) == 2 and parts[1].isdigit():
        return version + ".0"  # "vllm 0.17" is the v0.17.0 release
    return version


def merge_points(mentions: list[Mention]) -> list[Point]:
    points: list[Point] = []
    by_version: dict[Version, list[Point]] = {}
    with_sha: list[Point] = []
    for m in mentions:
        if m.name is not None:  # "main": one symbolic point however often it is named
            found = next((p for p in points if p.name == m.name), None)
            if found is None:
                found = Point(None, None, name=m.name)
                points.append(found)
            found.mentions.append(m)
            continue
        if m.version is None and m.sha is None:
            continue  # an image such as vllm/vllm-openai:latest: not a commit
        found = None
        if m.sha:
            found = next((p for p in with_sha if p.sha and (
                p.sha.startswith(m.sha) or m.sha.startswith(p.sha))), None)
        key = version_key(m.version)
        if found is None and key is not None:
            found = next((p for p in by_version.get(key, []) if not (m.sha and p.sha)), None)
        if found is None:
            found = Point(m.version, None)
            points.append(found)
        if m.sha and (found.sha is None or len(m.sha) > len(found.sha)):
            if found.sha is None:  # a short sha and its full form are one commit
                with_sha.append(found)
            found.sha = m.sha
        if m.version and found.version is None:
            found.version = m.version
        if found.key is not None and found not in by_version.get(found.key, []):
            by_version.setdefault(found.key, []).append(found)
        found.mentions.append(m)
    return points


@dataclass
class Roles:
    search: SearchKind
    old: Point | None          # regression: the good end; fix: the end with the problem
    new: Point | None          # regression: the bad end; fix: the fixed end
    goods: list[Point]
    bads: list[Point]
    notes: list[str]


def _older(a: Point, b: Point) -> bool | None:
    ka, kb = a.key, b.key
    return None if ka is None or kb is None else ka < kb


def choose(points: list[Point], arrows: list[tuple[Point, Point]],
           lines_with_pairs: list[list[Point]]) -> Roles:
    notes: list[str] = []
    roles = {id(p): p.role() for p in points}
    later_fix(points, roles, notes)
    fix = any(r in (Role.FIXED, Role.PROBLEM) for r in roles.values())
    old_role, new_role = (Role.PROBLEM, Role.FIXED) if fix else (Role.GOOD, Role.BAD)
    if fix:  # in a fix report "good/fast" means fixed and "bad/slow" means the problem
        for p in points:
            r = roles[id(p)]
            roles[id(p)] = {Role.GOOD: Role.FIXED, Role.BAD: Role.PROBLEM}.get(r, r) if r else r
    for a, b in arrows:
        ra, rb = roles[id(a)], roles[id(b)]
        if ra is None and rb in (None, new_role):
            roles[id(a)] = old_role
            a.why.append(f"line {a.line}: before '→/to' {b.label}")
        if rb is None and roles[id(a)] == old_role:
            roles[id(b)] = new_role
            b.why.append(f"line {b.line}: after {a.label} '→/to'")
    olds = [p for p in points if roles[id(p)] == old_role]
    news = [p for p in points if roles[id(p)] == new_role]
    unmarked = [p for p in points if roles[id(p)] is None and p.key is not None]
    if (not fix and olds and news and all(p.votes for p in olds + news)  # verdicts, not arrows
            and all(_older(b, g) for g in olds for b in news)):
        # "v0.10.0 crashes ... the latest 0.10.1 works for me": every good version is newer than
        # every bad one: the report is about a fix (has the problem -> fixed)
        fix, old_role, new_role = True, Role.PROBLEM, Role.FIXED
        olds, news = news, olds
        notes.append("every good version is newer than every bad one: read as a fix report")
    if news and not olds:  # contrast: the unmarked versions older than the earliest bad
        first = min((p for p in news if p.key), key=lambda p: p.key, default=None)  # type: ignore[arg-type,return-value]
        olds = [p for p in unmarked if first is not None and _older(p, first)]
        if first is None and all(p.name == "main" for p in news):
            olds = unmarked  # main is newer than every release
        for p in olds:
            p.why.append(f"line {p.line}: unmarked, older than {first.label if first else '?'}")
    elif olds and not news and not fix:
        last = max((p for p in olds if p.key), key=lambda p: p.key, default=None)  # type: ignore[arg-type,return-value]
        news = [p for p in unmarked if last is not None and _older(last, p)] or [
            p for p in points if p.name == "main" and roles[id(p)] is None]  # newer than any
        for p in news:
            p.why.append(f"line {p.line}: unmarked, newer than {last.label if last else '?'}")
    elif not olds and not news and not fix:
        pair = next((ps for ps in lines_with_pairs if len(ps) >= 2), None)
        versioned = sorted((p for p in points if p.key is not None), key=lambda p: p.key)  # type: ignore[arg-type,return-value]
        if pair is None and len(versioned) >= 2:
            pair = [versioned[0], versioned[-1]]
        if pair is not None:
            pair = sorted(pair, key=lambda p: p.key)  # type: ignore[arg-type,return-value]
            olds, news = [pair[0]], [pair[-1]]
            notes.append(f"no good/bad marker: roles from version order ({pair[0].label} is "
                         f"older than {pair[-1].label})")
    new = _earliest(news)
    old = _latest_before(olds, new)
    if old is not None and new is not None and _older(new, old):
        notes.append(f"markers contradict each other: {old.label} ({old_role.value}) is newer "
                     f"than {new.label} ({new_role.value})")
    others = [p for p in news if p is not new and p.key is None and new is not None]
    if others:
        notes.append("also " + new_role.value + ": " + ", ".join(p.label for p in others) +
                     " (no version to order it by; pass --repo to order by git ancestry)")
    return Roles(SearchKind.FIX if fix else SearchKind.REGRESSION, old, new, olds, news, notes)


def later_fix(points: list[Point], roles: dict[int, Role | None], notes: list[str]) -> None:
    """A named regression (a good and a bad end, each with its own marker) followed by "fixed
    in Z" with Z newer than the bad end, in a sentence of its own: the report is about the
    regression, and Z is later news (where it was fixed), not the range. Z's role is dropped."""
    def having(role: Role) -> list[Point]:
        return [p for p in points if roles[id(p)] is role and p.key is not None]
    goods, bads, fixed = having(Role.GOOD), having(Role.BAD), having(Role.FIXED)
    if not (goods and bads and fixed) or any(r is Role.PROBLEM for r in roles.values()):
        return
    last_bad = max(p.key for p in bads if p.key is not None)
    bad_lines = {m.line for p in bads for m in p.mentions}
    if all(p.key is not None and p.key > last_bad and not {m.line for m in p.mentions} & bad_lines
           for p in fixed) and any(_older(g, b) for g in goods for b in bads):
        for p in fixed:
            roles[id(p)] = None
        notes.append("a fix named after a named good/bad pair (" + ", ".join(p.label for p in fixed)
                     + "): later news, the report is about the regression")


def _earliest(ps: list[Point]) -> Point | None:
    versioned = [p for p in ps if p.key is not None]
    if versioned:
        return min(versioned, key=lambda p: p.key)  # type: ignore[arg-type,return-value]
    return ps[0] if ps else None


def _latest_before(ps: list[Point], new: Point | None) -> Point | None:
    versioned = [p for p in ps if p.key is not None]
    if versioned:
        before = [p for p in versioned if new is None or new.key is None or _older(p, new)]
        return max(before or versioned, key=lambda p: p.key)  # type: ignore[arg-type,return-value]
    return ps[-1] if ps else None
