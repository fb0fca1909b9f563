"""Round-7 find-the-fix word classes: the fix said as a release that carries it, as a wait for
one, as a build from source, as advice to move to a newer ref, or hedged by the maintainer who
knows the fix ("should be fixed in X"). Each is a statement that the fix *exists somewhere*;
where is read from the clause by `fixes.as_fix`.

Not a fix: a future or a hope ("will be fixed", "hopefully fixed in the next release": nothing
fixed exists yet), a fix that is an older version or a setting (`fixes.NOT_FIX`), a question.
"""

from __future__ import annotations

import re

_PR = r"(?:#|[\w.-]{1,60}/[\w.-]{1,60}#|https://github\.com/[\w.-]{1,60}/[\w.-]{1,60}/pull/)"

# a release that carries the fix: "v0.9.0 has been released with the bugfix #18259", "0.5.3
# includes the fix", "the fix is in 0.6.1 / is merged / is available in"; never negated ("0.9.0
# doesn't include the fix" is a problem verdict on 0.9.0)
RELEASED_FIX = (
    r"\breleased\s{1,3}with\s{1,3}(?:the\s{1,3}|a\s{1,3})?(?:bug\s?)?fix(?:es)?\b"
    r"|(?<!n't\s)(?<!not\s)\b(?:(?:includes?|contains?|ships?|carries)\s{1,3}(?:the|this|that|a)"
    r"|has\s{1,3}(?:the|this|that))\s{1,3}(?:bug\s?)?fix(?:es)?\b"
    # "the fix is in 0.6.1", not "the fix is in progress / in review"
    r"|\bthe\s{1,3}(?:bug\s?)?fix\s{1,3}(?:is|was|has\s{1,3}been)\s{1,3}(?:already\s{1,3})?"
    r"(?:merged|in(?!\s{1,3}(?:progress|review|the\s{1,3}works))|included|available|released|"
    r"landed)\b"
)
# a wait for the release that has the fix: "we need to wait for version 0.15.1", "wait till
# the fix gets put into a release" (the fix exists; a release with it is what is awaited)
WAIT_FIX = (
    r"\bwait\w{0,3}\s{1,3}(?:for|till|until)\s{1,3}(?:(?:the\s{1,3})?(?:version|release)"
    r"\s{1,3}v?\d|v?\d{1,3}\.\d|the\s{1,3}(?:bug\s?)?fix\b[^.!?。]{0,40}?\brelease)"
)
# advice to build or install from source / main: the fix is on main, not released yet ("You
# must build sglang from source"); the reporter's own "I built from source" is their setup
FROM_SOURCE = (
    r"(?:\b(?:must|need\s{1,3}to|have\s{1,3}to|please|can|could|should|just)\s{1,3}"
    r"(?:either\s{1,3})?|^\W{0,3})(?:re)?(?:build|install|compil)\w{0,3}\s{1,3}"
    r"(?:[\w-]{1,20}\s{1,3}){0,2}?from\s{1,3}(?:the\s{1,3})?(?:source|main|master)\b"
    # not a bisect step: "install from source at commit abc123 and rerun" names a commit to test
    r"(?!\s{1,3}(?:at|with|on)\s{1,3}(?:the\s{1,3})?(?:commit|[0-9a-f]{7}|v?\d))"
)
# a good verdict on building with the newest code ("Building with the latest lmcache code makes
# it work"): the fix is on main
LATEST_WORKS = (
    r"\b(?:latest|newest|current)\s{1,3}(?:[\w-]{1,20}\s{1,3}){0,2}?(?:code|source|build|image)"
    r"\s{1,3}(?:makes\s{1,3}it\s{1,3}work|works|fixes\s{1,3}it)\b"
)
# a fix statement, any of the above
FIX_WORDS = "|".join((RELEASED_FIX, WAIT_FIX, FROM_SOURCE, LATEST_WORKS))

# advice to move to another ref ("Please retry with current main or sglang>=0.5.14", "you can
# use v0.10.0rc1-310p first"): a pointer at where the problem is gone, weaker than a fix
# statement (a stated fix wins over it), and only for refs newer than the problem ones
ADVISED = re.compile(
    r"\b(?:please|just|can|could|should|recommend(?:ed)?|suggest(?:ed)?)\s{1,3}(?:you\s{1,3})?"
    r"(?:also\s{1,3})?(?:re-?try|try|use|install|upgrade|update|switch|move)\w{0,3}\b",
    re.IGNORECASE)

# the future, a hope or a possibility: nothing fixed exists yet ("will be fixed in the next
# release"), or a PR that *could be* a fix ("could be mostly fixed by #24562" proposes it). A
# hedge on a fix that was done ("may have been fixed by bumping to 0.8.5") or a maintainer's
# "should be fixed in v0.3.1" is still a statement: the bisect checks it
FUTURE = re.compile(r"\b(?:(?:will|would|hopefully|going\s{1,3}to)\s{1,3}(?:\w{1,12}\s{1,3})?"
                    r"(?:be|have\s{1,3}been)|(?:could|might|may)\s{1,3}(?:\w{1,12}\s{1,3})?be)"
                    r"\s{1,3}(?:\w{1,10}\s{1,3})?(?:fixed|resolved|solved|addressed)\b"
                    # "should be fixed in the next release": a release that does not exist yet
                    r"|\b(?:next|upcoming|coming|future|later)\s{1,3}(?:release|version)",
                    re.IGNORECASE)

# a workaround the fix made unnecessary ("so the workaround in #2992 is no longer needed") is
# not a workaround offered as the fix: its words are taken out before `NOT_FIX` is asked
WORKAROUND_GONE = re.compile(
    r"\bwork\s?arounds?\b[^.!?。]{0,40}?\b(?:is|are)\s{1,3}(?:no\s{1,3}longer|not)\s{1,3}"
    r"(?:needed|necessary|required)\b", re.IGNORECASE)

# the PR a fix statement names: "(bug)fix vllm-project/vllm#18259", "<PR url> fixed it", "fixed
# ... in <PR url>" within the clause
FIX_PR = re.compile(
    rf"\b(?:bug\s?fix(?:es)?|the\s{{1,3}}fix)\s{{1,3}}(?:PR\s{{0,2}})?{_PR}(?P<a>\d{{1,7}})\b"
    rf"|{_PR}(?P<b>\d{{1,7}})\s{{1,3}}(?:fixed|fixes|resolved|resolves|solved|solves)\s{{1,3}}"
    r"(?:it|this|that|the)\b"
    r"|\b(?:fixed|resolved|addressed)\s{1,3}(?:(?!\bbut\b|\bnot\b)(?:[^.!?\n]|\.(?=\w))){0,60}?"
    r"\s(?:in|by|via)"
    rf"\s{{1,3}}(?:PR\s{{0,2}})?{_PR}(?P<c>\d{{1,7}})\b",
    re.IGNORECASE)


def fix_prs(text: str) -> list[str]:
    """PR numbers that a fix statement names as the fix (round 7's shapes)."""
    out: list[str] = []
    for m in FIX_PR.finditer(text):
        pr = m.group("a") or m.group("b") or m.group("c")
        if pr not in out:
            out.append(pr)
    return out


_ITEM = re.compile(r"^\s{0,4}(?:[-*+]|\d{1,2}[.)])\s")
_PULL = re.compile(r"https://github\.com/[\w.-]{1,60}/[\w.-]{1,60}/pull/(?P<n>\d{1,7})\b")


def listed_fix_prs(lines: list[str], cue_lines: list[int]) -> list[str]:
    """A fix statement that names no PR, followed by a list of links ("fixed upstream. Related
    issues and PRs: - .../issues/19393 - .../pull/19411"): the PR links of that list (within a
    few lines of the statement) are the fix; issue links are not."""
    out: list[str] = []
    for n in cue_lines:
        seen_item = False
        for line in lines[n:n + 6]:
            if _ITEM.match(line):
                seen_item = True
                out += [m.group("n") for m in _PULL.finditer(line) if m.group("n") not in out]
            elif seen_item and line.strip():
                break
    return out
