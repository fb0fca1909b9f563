"""Report-level rules applied after the role votes (roles.py), each with its reason.

- **Commits beat releases**: when commits are named with both roles and the chosen ends are
  bare releases, the commits are the narrower range the reporter already found.
- **One release**: a report naming one release (or one release and its rc/post: the same
  thing twice) without any marker is about that release: it is the bad end.
- **A PR named as the culprit** ("#30924 introduced", "since #30924", "caused by #30924"):
  the bad end is that PR (resolve_refs maps it to its merge commit, the good end to its
  parent).
- **Find the fix**: see fixes.py (the fix cues as a word class); here only ``fixed_on``, the
  ref right after "tested on" / "no longer see the issue on".
- **A table beats a side remark**: when a table compares two or more versions, the refs of a
  sentence about another issue ("looks like #1234, fixed in v0.9.0") are that issue's, not
  this report's range.
- **Dates order commits**: with no marker and no version, commits each dated (a git log's
  ``Date:`` line, "(May 24 nightly)") are ordered by date like versions by number: in a
  regression report the older is the good end, the newer the bad one.
- **An improvement is not a regression**: a title that says something improved or grew in
  capacity, with nothing that says it got worse: no range, no symptom.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise

from vllm_bisect.triage.markers import Role
from vllm_bisect.triage.refs import Mention
from vllm_bisect.triage.roles import Point, Roles, SearchKind

SIDE_REMARK = re.compile(
    r"(?:looks?\s{1,3}like|similar\s{1,3}to|same\s{1,3}as|related\s{1,3}to|like\s{1,3}in|"
    r"as\s{1,3}in|\bsee(?:\s{1,3}also)?|\bcf\.?|duplicate\s{1,3}of|reminds\s{1,3}me\s{1,3}of|"
    r"类似|参见)\s{0,3}(?:issue\s{0,2})?(?:#\d{1,7}\b|https?://github\.com/[\w.-]{1,100}/"
    r"[\w.-]{1,100}/(?:issues|pull)/\d)", re.IGNORECASE)


def drop_side_remarks(lines: list[str], mentions: list[Mention]) -> list[Mention]:
    """A table comparing two or more versions beats a sentence about another issue: that
    sentence's refs are dropped (they are the other issue's)."""
    table = {m.version for m in mentions if m.version and lines[m.line - 1].lstrip().startswith("|")}
    if len(table) < 2:
        return mentions
    return [m for m in mentions if m.version in table or lines[m.line - 1].lstrip().startswith("|")
            or not SIDE_REMARK.search(lines[m.line - 1])]


# a maintainer's suggestion asked as a question: "Could you try v0.10.1rc1?", "have you tried 0.10.1?"
SUGGESTION = re.compile(r"\b(?:can|could|would|will)\s{1,3}you\s{1,3}(?:please\s{1,3})?(?:also\s{1,3})?"
                        r"(?:try|test|check|run|use|upgrad|updat|install|verify|confirm|reproduce)|"
                        r"\b(?:have|did)\s{1,3}you\s{1,3}(?:also\s{1,3})?tr(?:y|ied)|\b(?:how|what)\s{1,3}about|"
                        r"能否|可以试|试一下", re.IGNORECASE)
# advice, said as a statement: "建议用中间版本（0.9.1→0.10.0→0.10.2）二分定位", "I'd suggest
# bisecting between 0.9.1 and 0.10.0": versions to try next, not ones anybody ran
ADVICE = re.compile(r"建议|推荐(?:使用|用|尝试)|\bI(?:'d|\s{1,3}would)?\s{1,3}(?:suggest|recommend)|"
                    r"\bwe\s{1,3}(?:suggest|recommend)|\byou\s{1,3}(?:may|might)\s{1,3}(?:want\s{1,3}to\s{1,3})?"
                    r"(?:try|test|bisect)|\bconsider\s{1,3}(?:trying|testing|bisecting)", re.IGNORECASE)
SENTENCE = re.compile(r"(?:[^.!?。！？]|\.(?=\w)){0,2000}?(?:[!?。！？]|\.(?!\w)|$)")


def drop_suggestions(lines: list[str], mentions: list[Mention]) -> list[Mention]:
    """A ref named only in a question that suggests trying it ("Could you try v0.10.1rc1?") was
    not run by anyone yet: it is no end of the range (the same ref said elsewhere still is)."""
    asked: set[tuple[int, int]] = set()
    for n in {m.line for m in mentions}:
        for sm in SENTENCE.finditer(lines[n - 1]):
            if ((sm.group(0).rstrip().endswith(("?", "？")) and SUGGESTION.search(sm.group(0)))
                    or ADVICE.search(sm.group(0))):
                asked.update((n, i) for i in range(sm.start(), sm.end()))
    return [m for m in mentions if (m.line, m.start) not in asked]


# a table column headed by another package ("| FlashInfer |", "| torch |") holds its versions
OTHER_COLUMN = re.compile(
    r"^\W{0,3}(?:torch|pytorch|transformers|cuda|cudnn|driver|python|triton|flashinfer|cann|nccl|"
    r"rocm|aiter|mlx(?:-lm|-vlm)?|jax|xformers|numpy|deep_?gemm|sgl-kernel|flash[-_]?attn|"
    r"torch_npu)(?![\w-])", re.IGNORECASE)


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def drop_other_columns(lines: list[str], mentions: list[Mention]) -> list[Mention]:
    """A version in a table column headed by another package's name (FlashInfer 0.6.12 next
    to the SGLang commits) is that package's, not a ref of the range."""
    out = []
    for m in mentions:
        line = lines[m.line - 1]
        if not line.lstrip().startswith("|") or m.version is None or m.sha:
            out.append(m)
            continue
        top = m.line - 1
        while top > 0 and lines[top - 1].lstrip().startswith("|"):
            top -= 1
        col = line[:m.start].count("|") - 1
        header = _cells(lines[top])
        if top != m.line - 1 and 0 <= col < len(header) and OTHER_COLUMN.match(header[col].strip()):
            continue
        out.append(m)
    return out


# a PR as "#N" or as its URL (".../pull/N", "/pull/N/files")
_PR = r"(?:#|https?://github\.com/[\w.-]{1,100}/[\w.-]{1,100}/pull/)"
PR_CULPRIT = re.compile(
    rf"(?:(?:(?<![\w#])#|github\.com/[\w.-]{{1,100}}/[\w.-]{{1,100}}/pull/)(?P<a>\d{{3,7}})"
    r"(?:/[\w#-]{0,120})?\)?\s{1,3}(?:introduc\w{0,3}|caus\w{0,3}|broke|regress\w{0,3})\b"
    r"|(?:since|after|introduced\s{1,3}(?:by|in)|caused\s{1,3}by|regression\s{1,3}(?:from|in))"
    # round 7: "after this [PR](<url>)": a PR behind a link text, after this/the/that
    rf"\s{{1,3}}(?:(?:this|the|that)\s{{1,3}})?(?:PR\s{{0,2}})?(?:\[[^\]\n]{{0,40}}\]\(|\[)?"
    rf"{_PR}(?P<b>\d{{3,7}})\b(?!\s{{0,3}}(?:fix|was\s{{1,3}}reverted))"
    # round 7: a revert whose reason is a problem names the culprit ("Reverts o/r#12253 as people
    # find it causes large perf regression")
    r"|\brevert(?:s|ed|ing)?\s{1,3}(?:[\w.-]{1,60}/[\w.-]{1,60}#|#|https?://github\.com/[\w.-]{1,100}/"
    r"[\w.-]{1,100}/pull/)(?P<c>\d{3,7})\b(?=[^.\n]{0,80}?\b(?:regress|slow|crash|broke|break|bug)))",
    re.IGNORECASE)
TESTED_ON = re.compile(r"(?:tested|confirmed|verified|works?|checked)\s{1,3}(?:it\s{1,3})?"
                       r"(?:on|with|in)\s{1,3}$|(?:no\s{1,3}longer\s{1,3}\w{1,12}"
                       r"\s{1,3}(?:the\s{1,3})?(?:issue|problem)?\s{0,3}(?:on|with|in))\s{1,3}$"
                       # "the latest version >= v0.9.1rc1": the lowest version it is fixed in
                       r"|(?:latest|newest)\s{1,3}(?:version|release)\s{0,3}>=\s{0,3}$",
                       re.IGNORECASE)
IMPROVED = re.compile(r"\bimprov\w{0,6}|\bspeed-?up\b|\bgains?\b|\bfaster\b|"
                      r"\bincrease\w{0,2}\s{1,3}(?:\([^)]{0,20}\)\s{1,3})?in\s{1,3}(?:\w+\s{1,3}){0,3}capacity|提升|加速",
                      re.IGNORECASE)
WORSE = re.compile(r"regress|degrad|slow|drop|decreas|lower|worse|bug|error|fail|crash|OOM|"
                   r"memory usage|VRAM|larger|higher|\bsize\s{1,3}increase|下降|劣化|变慢|问题|"
                   # a negation in any language: "提升不明显" (the gain is not visible) is a complaint
                   r"\bnot\b|n't\b|\?|不|没|未", re.IGNORECASE)


PROBLEM_WORDS = re.compile(r"crash|fail|error|regress|degrad|slow|drop|wrong|garbage|OOM|bug|"
                           r"decreas|worse|broken|hang|精度|乱码|劣化|问题|下降|报错|变慢|失败",
                           re.IGNORECASE)


def _bare(p: Point) -> bool:
    k = p.key
    return k is not None and p.sha is None and k.pre is None and k.post is None and k.dev is None


def _release(p: Point) -> tuple[int, ...] | None:
    return tuple(p.key.release) if p.key is not None else None


def refine(roles: Roles, points: list[Point], title_line: int = 1, title: str = "") -> Roles:
    """The commit and one-release rules on the roles the votes gave."""
    notes = list(roles.notes)
    by_order = any(n.startswith("no good/bad marker") for n in notes)
    pair = [p for p in (roles.old, roles.new) if p is not None]
    bare = [p for p in pair if _bare(p) and (by_order or p.role() is None)]
    if len(pair) == 2 and len(bare) == 1 and _release(pair[0]) == _release(pair[1]):
        # "v0.4.3" beside "v0.4.3.post2": the bare release is shorthand for the other
        one = pair[1] if bare[0] is pair[0] else pair[0]
        assert roles.old is not None and roles.new is not None
        one.why.insert(0, "one release named twice (a release and its rc/post): where it is "
                          "broken")
        notes.append(f"{roles.old.label} and {roles.new.label} are one release: read as the bad "
                     "end")
        return replace(roles, old=None, new=one, goods=[], bads=[one], notes=notes)
    if roles.search is SearchKind.REGRESSION:
        goods = [p for p in roles.goods if p.key is None and p.sha]
        bads = [p for p in roles.bads if p.key is None and p.sha]
        if (goods and bads and roles.old is not None and roles.new is not None
                and roles.old.sha is None and roles.new.sha is None):
            notes.append("commits named as good and bad: narrower than the releases")
            goods[-1].why.insert(0, "a commit named as good (commits beat releases)")
            bads[0].why.insert(0, "a commit named as bad (commits beat releases)")
            return replace(roles, old=goods[-1], new=bads[0], goods=goods, bads=bads, notes=notes)
    unmarked = not any(p.votes for p in points)
    if roles.search is SearchKind.REGRESSION and unmarked:
        versioned = [p for p in points if p.key is not None]
        in_title = bool(PROBLEM_WORDS.search(title)) and any(
            m.line == title_line for p in versioned for m in p.mentions)
        if versioned and in_title and len({_release(p) for p in versioned}) == 1:
            one = max(versioned, key=lambda p: (len(p.version or ""), p.key))
            one.why.insert(0, "the one release the report names (in its title), without a "
                              "marker: where it is broken")
            notes.append(f"one release named ({one.label}) and no good/bad marker: read as the "
                         "bad end")
            return replace(roles, old=None, new=one, goods=[], bads=[one], notes=notes)
    good = roles.old
    if (roles.search is SearchKind.REGRESSION and good is not None and good.votes
            and roles.new is None and good.key is not None and PROBLEM_WORDS.search(title)):
        # "# v0.10.0 crashes" ... "the latest 0.10.1 works for me": the title's problem version
        # is older than the only good one: a fix report (has the problem -> fixed)
        older = sorted(((p.key, i) for i, p in enumerate(points) if not p.votes
                        and p.key is not None and p.key < good.key
                        and any(m.line == title_line for m in p.mentions)))
        if older:
            old = points[older[-1][1]]
            old.why.insert(0, "the title's problem version, older than the one said to work")
            good.why.insert(0, "said to work, newer than the title's problem version: fixed")
            notes.append(f"{good.label} works and is newer than the title's {old.label}: read as "
                         "a fix report")
            return Roles(SearchKind.FIX, old, good, [old], [good], notes)
    return replace(roles, notes=notes)


def pr_culprit(lines: list[str]) -> tuple[str, int, str] | None:
    """``("#N", line, words)`` where a PR is named as the culprit."""
    for n, line in enumerate(lines, 1):
        m = PR_CULPRIT.search(line)
        if m:
            return "#" + (m.group("a") or m.group("b") or m.group("c")), n, m.group(0)[:60]
    return None


def fixed_on(points: list[Point], lines: list[str]) -> Point | None:
    """The ref right after "tested on" / "no longer see the issue on": where it is fixed."""
    for p in points:
        for m in p.mentions:
            if TESTED_ON.search(lines[m.line - 1][max(0, m.start - 60):m.start]):
                return p
    return None


def improvement(title: str) -> str | None:
    """The title's words when it reports an improvement and nothing worse."""
    m = IMPROVED.search(title)
    if m and not WORSE.search(title):
        return m.group(0)
    return None


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DATE = re.compile(
    r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?:[ T](?P<t>\d{2}:\d{2}(?::\d{2})?))?"
    r"|\b(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]{0,6}\.?\s{1,3}(?P<day>\d{1,2})\b"
    r"(?:\s{1,3}(?P<t2>\d{2}:\d{2}(?::\d{2})?))?(?:,?\s{1,3}(?P<y2>\d{4})\b)?", re.IGNORECASE)
GIT_DATE = re.compile(r"^\s{0,4}(?:Date|AuthorDate|CommitDate):\s", re.IGNORECASE)


def _date_key(text: str) -> tuple[int, int, int, str] | None:
    m = DATE.search(text)
    if m is None:
        return None
    if m.group("y"):
        return int(m.group("y")), int(m.group("m")), int(m.group("d")), m.group("t") or ""
    return (int(m.group("y2") or 0), MONTHS.index(m.group("mon").lower()[:3]) + 1,
            int(m.group("day")), m.group("t2") or "")


def _dated(p: Point, lines: list[str]) -> tuple[int, int, int, str] | None:
    """The date written with a commit: on its line after it, or a git log Date: line below."""
    m = p.mentions[0]
    key = _date_key(lines[m.line - 1][m.end:m.end + 40])
    for below in lines[m.line:m.line + 3]:
        if key is None and GIT_DATE.match(below):
            key = _date_key(below)
    return key


def by_date(roles: Roles, points: list[Point], lines: list[str]) -> Roles | None:
    """The dates rule (see the module doc); None when it does not apply."""
    if roles.search is not SearchKind.REGRESSION or roles.old or roles.new:
        return None
    dated = [(k, i, p) for i, p in enumerate(points) if p.sha and p.key is None
             and (k := _dated(p, lines)) is not None]
    if len(dated) < 2 or len({k for k, _, _ in dated}) < len(dated):
        return None  # one date, or two commits on one date: no order
    dated.sort(key=lambda x: (x[0], x[1]))
    old, new = dated[0][2], dated[-1][2]
    old.why.insert(0, "no marker: the older of the dated commits")
    new.why.insert(0, "no marker: the newer of the dated commits")
    return replace(roles, old=old, new=new, goods=[old], bads=[new],
                   notes=[*roles.notes, f"no good/bad marker: roles from the commits' dates "
                                        f"({old.label} is older than {new.label})"])


BETWEEN_GAP = re.compile(r"^[\s`*_]{0,3}(?:and|&|to|和|与|到)[\s`*_]{0,3}(?:v(?=\d))?$", re.IGNORECASE)
BETWEEN_TAIL = re.compile(r"\bbetween\s{1,3}(?:[\w-]{1,12}\s{1,3}){0,2}[`*_]{0,2}$|在\s{0,2}$",
                          re.IGNORECASE)
INTRODUCED = re.compile(r"introduc|\bbroke|\bbreak|引入", re.IGNORECASE)


def between_range(lines: list[str], mentions: list[Mention], points: list[Point]) -> None:
    """"regression introduced between v1.5.32 and v1.5.33": a range with both ends named; the
    first is the last good, the second the first bad (only beside a problem word)."""
    own = {id(m): p for p in points for m in p.mentions}
    for a, b in pairwise(mentions):
        if a.line != b.line:
            continue
        line = lines[a.line - 1]
        if not (PROBLEM_WORDS.search(line) or INTRODUCED.search(line)):
            continue
        p, q = own.get(id(a)), own.get(id(b))
        if p is None or q is None or p is q or not BETWEEN_TAIL.search(line[:a.start]) \
                or not BETWEEN_GAP.match(line[a.end:b.start]):
            continue
        if p.key is not None and q.key is not None and q.key < p.key:
            p, q = q, p
        p.vote(Role.GOOD, 3, f"line {a.line}: 'between' it and {q.label}: the last good", a.line)
        q.vote(Role.BAD, 3, f"line {a.line}: 'between' {p.label} and it: the first bad", a.line)


def _vote_lines(p: Point, role: Role) -> set[int]:
    return {int(w.split(":")[0][5:]) for r, w in p.marked
            if r is role and re.match(r"line \d{1,6}:", w)}


FIRST_BAD = re.compile(r"from it on|since|starting|first|introduced|onwards|开始", re.IGNORECASE)


def title_yields(points: list[Point], title_line: int) -> list[str]:
    """A title is a summary; the body says it in full. A bad end read only from the title
    ("TG Regression since 0.35.0") yields when the body names a newer first bad ("from 0.36.0
    onwards"): the title's ref loses its bad vote and is then an unmarked older ref."""
    notes: list[str] = []
    # only a body that says where it *starts* ("from 0.36.0 onwards", "starting with", "first
    # bad", "introduced in"): "0.10.1 is also slow" repeats the title, it does not correct it
    body_bad = [p for p in points if any(
        r is Role.BAD and FIRST_BAD.search(w) and not w.startswith(f"line {title_line}:")
        for r, w in p.marked)]
    if any(title_line in _vote_lines(p, Role.GOOD) for p in points):
        return notes  # the title names both ends ("between X and Y"): a range, not a summary
    for p in points:
        lines_bad = _vote_lines(p, Role.BAD)
        if lines_bad != {title_line} or p.key is None:
            continue
        # a newer *release* (0.11 after the title's 0.11.0rc1 is the same release written short)
        newer = [q for q in body_bad if q is not p and q.key is not None
                 and q.key.release > p.key.release]
        if newer:
            p.votes.pop(Role.BAD, None)
            p.marked = [(r, w) for r, w in p.marked if r is not Role.BAD]
            p.why = [w for w in p.why if not w.startswith(f"line {title_line}:")]
            notes.append(f"the title reads {p.label} as bad, the body names {newer[0].label} as "
                         "the first bad: the body's reading is kept")
    return notes


# "before/after" and what they refer to: a change (a PR link, #N, "the PR/commit/merge/patch")
LEADING = re.compile(r"^\W{0,4}(?P<w>before|after)\s{1,3}(?:https?://\S{1,200}/pull/\d|#\d|PR\s{0,2}#?\d|"
                     r"(?:the|this)\s{1,3}(?:PR|pull\s{1,3}request|commit|merge|patch|change|fix)\b)",
                     re.IGNORECASE)


def leading_label(lines: list[str], points: list[Point]) -> None:
    """A line that opens with "before"/"after" and names one ref ("before <PR url>, stay in
    commit 27a374ea" / "after <PR url> in commit bea282ce"): the opening word labels that ref,
    wherever it stands in the line (a PR link between them is what before/after refers to)."""
    for n, line in enumerate(lines, 1):
        m = LEADING.match(line)
        on_line = [p for p in points if any(x.line == n for x in p.mentions)]
        if m is None or len(on_line) != 1 or n in (_vote_lines(on_line[0], Role.GOOD)
                                                   | _vote_lines(on_line[0], Role.BAD)):
            continue
        role = Role.GOOD if m.group("w").lower() == "before" else Role.BAD
        on_line[0].vote(role, 2, f"line {n}: the line opens with {m.group('w')!r}", n)


ENV_HEAD = re.compile(r"^\s{0,3}(?:#{1,6}|\[)\s{0,3}[^\n]{0,30}?(?:environment|环境|version\s{1,3}"
                      r"information|版本信息|当前版本)", re.IGNORECASE)


def environment_bad(roles: Roles, points: list[Point], lines: list[str]) -> Roles | None:
    """A regression with good ends and no bad one: the version the reporter's own environment
    section names ("### Your current environment ... vLLM 0.13.0rc1"), unmarked anywhere else,
    is the one they run with the problem."""
    if roles.search is not SearchKind.REGRESSION or roles.new is not None or not roles.goods:
        return None
    env: set[int] = set()
    inside = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("#") or ENV_HEAD.match(line):
            inside = bool(ENV_HEAD.match(line))
        elif inside:
            env.add(n)
    cands = [p for p in points if not p.votes and p.key is not None and p.mentions
             and all(m.line in env for m in p.mentions)]
    if not cands:
        return None
    bad = max(cands, key=lambda p: p.key)  # type: ignore[arg-type,return-value]
    older = [g for g in roles.goods if g.key is not None and g.key < bad.key]  # type: ignore[operator]
    if not older:
        return None
    good = max(older, key=lambda p: p.key)  # type: ignore[arg-type,return-value]
    bad.why.insert(0, f"line {bad.line}: the version the reporter's environment section names "
                      "(unmarked elsewhere): the one run with the problem")
    return replace(roles, old=good, new=bad, bads=[bad],
                   notes=[*roles.notes, f"bad end {bad.label}: the reporter's environment"])
