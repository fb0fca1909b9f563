"""Find the fix: the words that say a problem went away, and the ends they give a fix search.

A **fix cue** is a statement (not a question, not a workaround, not "still") that the problem is
gone, read as a word class rather than as phrases:

- a problem word with a verb of ending: "the issue is resolved", "all the issues were resolved",
  "this bug seems to be fixed", "has been fixed", "went away", 问题已解决, 已修复, 修复了;
- a negated occurrence: "no longer see/happens", "not present any more", "doesn't crash any
  more", 不再出现; or a negated occurrence beside an upgrade ("will not occur if vllm is
  upgraded to 0.7.3", "does not happen on the latest main");
- a fix with where it is: "fixed in/by/on X", "works on the latest", "upgrading to X fixed it";
- a maintainer's "please try the (current) latest version".

Not a cue: a question ("is this fixed?", 修复了吗？), a workaround ("fixed by downgrading",
"resolved by setting --enforce-eager", "switching back to 0.2.6 fixes it": the fix is an older
version or a flag), a sentence that says the problem is still there or came back.

**The ends.** Refs in a cue's clause (the sentence, cut at "but/however") are where it is fixed,
unless the report gives them a problem verdict; "upgraded to X" counts as fixed here. The fixed
end is the earliest of them newer than the problem end; the problem end is the latest other ref
with a problem verdict (or none) older than it. When the cue names no ref but says *main*, the
*main branch* or the *nightlies* ("tried the code from the main branch, all the issues were
resolved", "not present any more on the current nightlies"), the fixed end is the symbolic ref
``main``: the bot resolves it to main's head (a nightly is built from main), and says so.
"resolved in the latest version" names no ref: the fixed end stays unknown and the bot asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from vllm_bisect.triage.fix_words import ADVISED, FIX_WORDS, FUTURE, WORKAROUND_GONE
from vllm_bisect.triage.markers import STILL, Role, is_question
from vllm_bisect.triage.roles import Point, Roles, SearchKind
from vllm_bisect.triage.versions import title_index

_NOUN = r"(?:issues?|problems?|bugs?|errors?|crash(?:es)?|hangs?|OOMs?|regressions?|failures?)"
_PRONOUN = r"(?:it|this|that|they|all)"
_AUX = r"(?:is|are|was|were|has\s{1,3}been|have\s{1,3}been|had\s{1,3}been|seems?\s{1,3}to\s{1,3}be|" \
       r"appears?\s{1,3}to\s{1,3}(?:have\s{1,3}been|be)|got|gets|'s|’s)"
_GONE = r"(?:resolved|fixed|solved|gone|disappeared)"
FIX_CUE = re.compile(
    # "has been fixed", "have been resolved" (whatever the subject: "the test has been fixed")
    r"\b(?:has|have|had)\s{1,3}been\s{1,3}(?:\w{1,12}\s{1,3}(?:and\s{1,3})?)?"
    r"(?:resolved|fixed|solved|addressed)\b"
    # "the issue (is) resolved", "all the issues were resolved", "it seems to be fixed"
    rf"|\b{_NOUN}\s{{1,3}}(?:{_AUX}\s{{1,3}})?(?:(?:now|already|basically)\s{{1,3}})?{_GONE}\b"
    rf"|\b{_PRONOUN}\s{{1,3}}{_AUX}\s{{1,3}}(?:(?:now|already|basically)\s{{1,3}})?{_GONE}\b"
    r"|\b(?:went|goes|go|has\s{1,3}gone)\s{1,3}away\b"
    # "no longer see the issue", "not present any more", "doesn't crash anymore"
    r"|\bno\s{1,3}longer\s{1,3}(?:see|seeing|seen|reproduc\w{0,4}|observ\w{0,4}|happen\w{0,3}|"
    r"occur\w{0,4}|present|exists?|an?\s{1,3}(?:issue|problem)|crash\w{0,3}|hang\w{0,3}|fails?)"
    r"|\bnot\s{1,3}(?:present|there|reproducible|happening|occurring|seen)\s{1,3}any\s?more\b"
    r"|(?:n't|\bnot)\s{1,3}(?:see|happen|occur|appear|reproduce|exist|crash|hang|fail)\w{0,3}"
    r"(?:\s{1,3}[\w-]{1,12}){0,4}?\s{1,3}any\s?(?:more|longer)\b"
    # "will not occur if vllm is upgraded to 0.7.3", "doesn't happen on the latest main"
    r"|(?:n't|\bnot)\s{1,3}(?:occur|happen|appear|reproduce)\w{0,3}\b"
    r"(?=[^.!?。]{0,80}(?:upgrad|updat|newer|latest|nightl|\bmain\b|\bmaster\b))"
    # "fixed in 0.2.9", "fixed by #4660", "resolved on main"
    r"|\b(?:fixed|resolved|solved)\s{1,3}(?:(?:upstream|already|now)\s{1,3})?(?:in|on|by|with|via)\b"
    r"|\bworks?\s{1,3}(?:\w{1,8}\s{1,3})?(?:on|with|in)\s{1,3}(?:the\s{1,3})?(?:latest|newest|current)\b"
    # "upgrading to 0.5.3 fixed it"
    r"|\bupgrad\w{0,4}\s{1,3}(?:\w{1,12}\s{1,3}){0,3}?to\b(?:[^.!?。]|\.(?=\w)){0,40}?"
    r"\b(?:fix|solv|resolv)\w{0,3}\b"
    # "0.10.1 fixed it", "the upgrade solved the problem" (a workaround is caught by NOT_FIX)
    r"|\b(?:fixed|solved|resolved|fixes|solves|resolves)\s{1,3}(?:it|this|that|the\s{1,3}"
    r"(?:issue|problem|bug|crash|error|regression))\b"
    # a maintainer's "please try the (current) latest version", "use the latest upstream (dev)
    # image", "just use the latest main": the problem is gone there
    # (advice, not a report: "please/just/could/you can use ...", or an imperative opening the
    # sentence; "I use the latest version and it crashes" is the reporter's setup)
    r"|(?:\b(?:please|just|could|can|should|may|might|recommend(?:ed)?|suggest(?:ed)?)\s{1,3}"
    r"(?:you\s{1,3})?(?:also\s{1,3})?|^\W{0,3})"
    r"(?:try|use|pull|install)\s{1,3}(?:\w{1,10}\s{1,3})?(?:the\s{1,3})?(?:current\s{1,3})?"
    r"(?:latest|newest)\s{1,3}(?:[\w()-]{1,20}\s{1,3}){0,2}?(?:version|release|main|nightly|image|build)"
    # a good verdict on the latest ("good in latest version", "fine on the current release");
    # not a negated one ("not working on the latest")
    r"|(?<!not\s)(?<!n't\s)\b(?:good|fine|ok|okay|normal|correct|works?|working)\s{1,3}"
    r"(?:\w{1,8}\s{1,3})?(?:in|on|with)\s{1,3}(?:the\s{1,3})?(?:latest|newest|current)\b"
    # a maintainer closing the issue as solved ("Closing as solved as v0.7.2 is now released")
    r"|\bclos\w{0,3}\s{1,3}(?:this\s{1,3}(?:issue\s{1,3})?)?(?:as|since)\s{1,3}"
    r"(?:solved|resolved|fixed|completed|done)\b"
    r"|最新版本?(?:中|里)?(?:已经?)?(?:正常|没有?问题)"
    r"|已修复|已经修复|修复了|已解决|已经解决|解决了|问题(?:已经?)?(?:消失|解决)|不再(?:出现|复现|发生)|"
    # "已在 v0.10.0rc1 中修复", "得到解决", "升级到 X 后解决"
    r"已(?:经)?在[^。！？?]{1,40}?(?:修复|解决)|得到(?:了)?(?:修复|解决)|"
    r"升级(?:到|至)?[^。！？?]{1,40}?(?:后|之后)?(?:即可)?(?:修复|解决)|"
    r"没有?(?:这个|该)?问题了|正常了|"
    # round 7: a release that carries the fix, a wait for it, a build from source, the latest
    # code working (`fix_words`)
    + FIX_WORDS,
    re.IGNORECASE)
# the fix is an older version, a revert or a setting: a workaround, not a fixed commit
NOT_FIX = re.compile(r"downgrad|revert|roll\w{0,4}\s{1,3}back|\bback\s{1,3}to\b|\bpinn|"
                     r"work\s?around|\bby\s{1,3}(?:setting|adding|disabling|enabling|passing|"
                     r"removing|turning|lowering|reducing|increasing|changing)|(?<![\w-])--[a-z]|"
                     # "gone when I disable prefix caching": a setting, not a version
                     r"\b(?:disabl|enabl)\w{0,3}\b|\bturn\w{0,3}\s{1,3}(?:off|on)\b|\bwhen\s{1,3}I\s{1,3}set|"
                     # "this PR fixes the regression", "pr #12820 fixes the problem": the fix is
                     # named (a PR's own description), there is nothing to search for
                     r"\b(?:PR|pull\s{1,3}request|patch|change)\s{0,3}(?:#\d{1,7}\s{1,3})?(?:fix|solv|resolv)|"
                     r"#\d{1,7}\s{1,3}(?:fix|solv|resolv)|"
                     r"\b[A-Z][A-Z0-9_]{3,}=|回退|降级|回滚", re.IGNORECASE)
# a condition, not a statement: "red on main until this is resolved", "once it is fixed"
CONDITION = re.compile(r"\b(?:until|till|once|when|whenever|if|unless|before|after)\s{1,3}"
                       r"(?:[\w'-]{1,12}\s{1,3}){0,3}$", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
CONTRAST = re.compile(r"\bbut\b|\bhowever\b|\bwhereas\b|\bwhile\b|;|但是|但|不过|；", re.IGNORECASE)
MAIN_WORDS = re.compile(
    r"\b(?:main|master)\s{1,3}branch|主线|主干|main\s?分支|"
    r"\b(?:latest|current|recent|newest|today'?s)\s{1,3}(?:main|master|nightl(?:y|ies))\b|"
    r"\bnightl(?:y|ies)\b|"
    # a dev image/build is built from main: "the latest upstream sglang(dev) image"
    r"\bdev\)?\s{0,2}(?:image|build|branch|version)\b|\(dev\)|"
    r"\b(?:on|from|with|at|of)\s{1,3}(?:the\s{1,3})?(?:main|master)(?=\s{0,2}(?:[.,;:!?)]|$|now|too))"
    # built from source / the latest code: main, not a release ("build sglang from source")
    r"|\bfrom\s{1,3}(?:the\s{1,3})?source\b|\b(?:latest|newest)\s{1,3}(?:[\w-]{1,20}\s{1,3})?code\b",
    re.IGNORECASE)
UPGRADED = re.compile(r"'(?:upgrad|updat|bump|chang|switch|mov)\w{0,6}\s{1,3}to'|'升级", re.IGNORECASE)


@dataclass(frozen=True)
class Cue:
    """A fix statement: its line, the clause it stands in (offsets), and its words."""

    line: int
    start: int
    end: int
    words: str
    main: bool   # the clause names main / the main branch / the nightlies
    advice: bool = False  # advice to move to a ref, not a statement that it is fixed there


def _sentences(line: str) -> list[tuple[int, int]]:
    cuts = [0] + [m.end() for m in SENTENCE_END.finditer(line)] + [len(line)]
    return [(a, b) for a, b in pairwise(cuts) if b > a]


def fix_cues(lines: list[str]) -> list[Cue]:
    """Every fix statement of the report (see the module doc), in order."""
    out = []
    for n, line in enumerate(lines, 1):
        for a, b in _sentences(line):
            sentence = line[a:b]
            m = FIX_CUE.search(sentence)
            advice = m is None
            if m is None:  # round 7: advice to move to another ref, weaker than a statement
                m = ADVISED.search(sentence)
            # a hedge from who knows the fix ("should be fixed in X", "may have been fixed by
            # bumping to X") still says where to look (the bisect checks it); a future or a hope
            # does not: nothing fixed exists yet
            if (m is None or NOT_FIX.search(WORKAROUND_GONE.sub(" ", sentence))
                    or STILL.search(sentence) or FUTURE.search(sentence)
                    or CONDITION.search(sentence[:m.start()]) or is_question(sentence)):
                continue
            cuts = [0] + [x.end() for x in CONTRAST.finditer(sentence)] + [len(sentence)]
            ca, cb = next(((x, y) for x, y in pairwise(cuts)
                           if x <= m.start() < y), (0, len(sentence)))
            out.append(Cue(n, a + ca, a + cb, m.group(0)[:60],
                           bool(MAIN_WORDS.search(sentence)), advice))
    return out


def _problem_verdict(p: Point) -> bool:
    """A bad/problem vote that is not "upgraded to X" (in a fix report the upgrade is the fix)."""
    return any(r is Role.PROBLEM or (r is Role.BAD and not UPGRADED.search(w))
               for r, w in p.marked)


def _in_cue(p: Point, cues: list[Cue]) -> bool:
    return any(m.line == c.line and c.start <= m.start < c.end for m in p.mentions for c in cues)


def _only_in(p: Point, cues: list[Cue]) -> bool:
    """Every mention of the point stands in one of the cues' clauses."""
    return bool(p.mentions and cues) and all(
        any(m.line == c.line and c.start <= m.start < c.end for c in cues) for m in p.mentions)


def named_good(roles: Roles) -> bool:
    """Whether the report itself names a good end. An old end the rules only inferred (from
    version order, or as the unmarked version older than the bad one) is a default: it yields
    to the report saying the problem went away ("try the latest version >= X")."""
    old = roles.old
    if old is None:
        return False
    inferred = any(n.startswith("no good/bad marker") for n in roles.notes) or any(
        w.startswith(f"line {old.line}: unmarked") for w in old.why)
    return bool(old.votes) or not inferred


def _older(a: Point, b: Point) -> bool:
    return a.key is not None and b.key is not None and a.key < b.key


def _pick(ps: list[Point], latest: bool) -> Point | None:
    """The latest (or earliest) versioned point; else the last (or first) one named."""
    versioned = [(p.key, i) for i, p in enumerate(ps) if p.key is not None]
    if versioned:
        return ps[(max(versioned) if latest else min(versioned))[1]]
    return (ps[-1] if latest else ps[0]) if ps else None


def _advised(points: list[Point], cues: list[Cue], title: int
             ) -> tuple[list[Cue], list[Point]] | None:
    """Advice to move to a ref points at the fix only towards newer refs: the refs the advice
    names (not the title's: that is the version the problem is reported on), when each is newer
    than every other versioned ref of the report, or main ("retry with current main"); advice to
    try an older release, or a commit, is a bisect step, not a fix (None then)."""
    inside = [p for p in points if _in_cue(p, cues) and not _problem_verdict(p)
              and not any(m.line == title for m in p.mentions)]
    if any(p.key is None and p.name != "main" for p in inside):
        return None  # a commit named in advice is one to test ("install at commit X and rerun")
    others = [p for p in points if p not in inside and p.key is not None]
    newer = [p for p in inside if p.key is not None and all(_older(o, p) for o in others)]
    if newer and len(newer) == len([p for p in inside if p.key is not None]):
        return [c for c in cues if any(_in_cue(p, [c]) for p in newer)], newer
    if not [p for p in inside if p.key is not None] and any(c.main for c in cues):
        return [c for c in cues if c.main], []
    return None


def drop_advised_old(roles: Roles, lines: list[str]) -> Roles:
    """In a fix search, a ref named only in advice to try it ("Please try v0.3.0", before a
    maintainer's "fixed in v0.3.1") was not run by anyone: it is no end with the problem."""
    old = roles.old
    tried = [c for c in fix_cues(lines) if c.advice]
    if roles.search is not SearchKind.FIX or old is None or not _only_in(old, tried):
        return roles
    return Roles(roles.search, None, roles.new, [p for p in roles.goods if p is not old],
                 roles.bads, [*roles.notes, f"{old.label} is only advised to try: no end"])


def as_fix(roles: Roles, points: list[Point], lines: list[str],
           tested_on: Point | None = None) -> Roles | None:
    """A regression reading without a named good end turned into a fix search, when the
    report says the problem is gone; None when the rule does not apply."""
    cues = fix_cues(lines)
    if not cues or roles.search is not SearchKind.REGRESSION or named_good(roles):
        return None
    stated = [c for c in cues if not c.advice]
    fixed = [p for p in points if _in_cue(p, stated) and not _problem_verdict(p)]
    if not fixed and not any(c.main for c in stated):
        advice = [c for c in cues if c.advice]
        advised = _advised(points, advice, title_index(lines))
        if advised is not None and roles.old and roles.new and not (
                _in_cue(roles.old, advice) or _in_cue(roles.new, advice)):
            advised = None  # the report's own two ends stand: advice is a hint, not a fix report
        if advised is not None:
            cues, fixed = advised
        elif not stated:
            return None
        else:
            cues = stated
    else:
        cues = stated
    cue = cues[0]
    if tested_on is not None and tested_on not in fixed:
        fixed.append(tested_on)
    if not fixed and not any(c.main for c in cues) and roles.old and roles.new:
        return None  # "it has been resolved", nowhere named: the range read stays a regression
    problem = [p for p in points if p not in fixed and (p in roles.bads or not p.votes
                                                        or _problem_verdict(p))]
    first_fixed = _pick(fixed, latest=False)
    before = [p for p in problem if first_fixed is None or first_fixed.key is None
              or _older(p, first_fixed)]
    old = _pick(before, latest=True)
    new = _pick([p for p in fixed if old is None or old.key is None or p.key is None
                 or _older(old, p)], latest=False)
    notes = [*roles.notes, f"line {cue.line}: {cue.words!r}: read as a fix report"]
    if new is None and any(c.main for c in cues):
        where = next(c for c in cues if c.main)
        new = Point(None, None, name="main", role_lines={Role.FIXED: where.line})
        new.why.append(f"line {where.line}: {where.words!r} on main / the nightlies: the fixed end "
                       "is main's head (pass --bad <sha> to pin the commit that was tested)")
        notes.append("fixed end: main (a symbolic ref; the bisect resolves it to main's head)")
    for p, role in ((old, Role.PROBLEM), (new, Role.FIXED)):
        if p is not None and p.name is None:
            p.why.insert(0, f"line {cue.line}: {cue.words!r}: the report says the problem went "
                            f"away ({'has the problem' if role is Role.PROBLEM else 'fixed there'})")
    return Roles(SearchKind.FIX, old, new, [old] if old else [], [new] if new else [], notes)
