"""The words that give a ref its role: before it, after it, in its clause or table row, or
as a label line above it. Each pattern is a grammar decision with its reason in a comment;
all are linear (bounded repetitions, no nested quantifiers)."""

from __future__ import annotations

import re
from enum import StrEnum


class Role(StrEnum):
    GOOD = "good"
    BAD = "bad"
    FIXED = "fixed"      # fix report: the commit/version where the problem is gone
    PROBLEM = "problem"  # fix report: a commit/version that still has it (e.g. "pre-fix main")


FILLER = re.compile(
    r"(?:(?<![A-Za-z0-9])(?:vllm|vllm-ascend|sglang|trtllm|tensorrt-llm|version|versions|release|"
    r"releases|tag|the|commit|id|merge|pr|main|nightly|nightlies|build|built|image|docker|wheel|"
    r"rocm|ascend|stable|latest|eg|branch|from|this|my|our|vllm-openai|lmsysorg|nvcr|#\d{1,7})"
    r"|参考|参见|版本|为"
    r"|[\s`*_:=,(（)\[\]/#.\-]|\d)$", re.IGNORECASE)
BEFORE = (
    (Role.PROBLEM, re.compile(r"(?:pre-?fix|before the fix|without the fix|unfixed|修复前的?|"
                              r"修复之前的?)$", re.IGNORECASE)),
    (Role.FIXED, re.compile(r"(?:(?:fixed|resolved|addressed|solved)\s{1,3}(?:by|in|on|with|at)|"
                            r"(?:修复|the\s{1,3}fix)\s{0,3}(?:已|was\s{1,3})?(?:合并|合入|merged|landed)|"
                            r"(?:with|after) the fix|post-?fix|修复[:：]?|已修复|修复后的?)$",
                            re.IGNORECASE)),
    (Role.GOOD, re.compile(
        r"(?:last\s{1,3}(?:known\s{1,3})?(?:good|healthy|working|ok|fast)|"
        r"(?<!first )(?<!first\s)\bgood|\bworks?\s{1,3}(?:(?:fine|well|correctly|ok)\s{1,3})?"
        r"(?:on|with|in)|"
        r"\bfine\s{1,3}(?:on|with|in)|prior\s{1,3}to|\bbefore(?:\s{1,3}(?:update|upgrading))?|"
        r"downgrad\w{0,6}\s{1,3}to|revert\w{0,4}\s{1,3}(?:back\s{1,3})?to|"
        # "switching back to 0.2.6 fixes it": going back to a version is going to a good one
        r"(?:switch\w{0,5}|go(?:ing)?|went|mov\w{0,5})\s{1,3}back\s{1,3}to|"
        r"roll\w{0,4}\s{1,3}back\s{1,3}to|does\s{1,3}not\s{1,3}occur\s{1,3}in|"
        r"doesn't\s{1,3}occur\s{1,3}in|not\s{1,3}(?:reproduc\w{0,5}|occur\w{0,3})\s{1,3}(?:on|in|with)|"
        r"\bno\s{1,3}(?:such\s{1,3})?(?:issues?|problems?|errors?)\s{1,3}with\s{1,3}(?:prior|previous)?|"
        r"\bold|\bnormal|baseline|\b(?:previous|earlier)|(?:slower|worse|behind)\s{1,3}than|✅|✔|正常|回退到|降级到|"
        # "性能不如0.7.3版本" (not as good as 0.7.3): the reference is the good one
        r"不如|比不上|"
        # "(ok in 0.7.2)": a verdict word with a preposition binds forward, to the ref after it
        r"\b(?:ok|okay|fine|normal|correct)\s{1,3}(?:on|with|in|at)|"
        # "when the version is higher than 0.5.3": a bound on the version: X is the last good
        r"\bversions?\s{1,3}(?:is\s{1,3}|are\s{1,3})?(?:higher|newer|later|greater)\s{1,3}than|"
        # an A/B's control arm is the reference (the good end); its treatment the change
        r"\bcontrol(?:\s{1,3}(?:arm|group|run|build))?)$",
        re.IGNORECASE)),
    (Role.BAD, re.compile(
        r"(?:upgrad\w{0,5}\s{1,3}to|updat\w{0,5}\s{1,3}to|chang\w{0,5}\s{1,3}to|"
        r"switch\w{0,5}\s{1,3}to|mov\w{0,5}\s{1,3}to|bump\w{0,5}\s{1,3}to|\bafter|\bsince|"
        r"starting\s{1,3}(?:with|from|at|in)|first\s{1,3}(?:bad|broken|regressed|slow)|"
        r"first\s{1,3}(?:observed|seen|noticed)\s{1,3}(?:regressed|bad|broken|slow)?\s{0,3}"
        r"(?:at|in|on|with)?|regress\w{0,4}\s{1,3}(?:at|in|on|with|since)|"
        r"broken\s{1,3}(?:at|in|on|with)|(?<!not )occurs?\s{1,3}in|introduced\s{1,3}(?:in|by)|"
        r"first\s{1,3}in|still\s{1,3}present\s{1,3}in|(?:appears|shows\s{1,3}up)\s{1,3}"
        r"(?:after|in|on|with)|with\s{1,3}this(?:\s{1,3}pr)?|(?:faster|better)\s{1,3}than|"
        r"(?:slower|worse|regressed)\s{1,3}(?:from|since|after|at)|\bnew|\bbad|❌|✗|✘|变慢的?|升级到|"
        r"\bnow\s{1,3}(?:with|on|in)|"
        r"换成|切换到|"
        # "升级 v0.11.0rc1 后": upgrading names the version upgraded to
        r"升级(?:到|至)?|"
        # "is slower on X", "fails on X", "crashes with X": the failure is at X
        r"(?:slower|worse|slow|broken|fails?|failing|crash\w{0,2}|hangs?)\s{1,3}(?:on|in|with)|"
        # "this PR" in a results table is the change under test (not "before/prior to this PR")
        r"(?<!before )(?<!without )(?<!to )(?<!than )\bthis\s{1,3}(?:pr|commit|change|patch|branch)|"
        # a reporter's own bisect names the first bad commit: "bisected it to X", "git bisect
        # points to X", "the culprit is X"
        r"\bbisect\w{0,3}(?:\s{1,3}(?:it|this|the\s{1,3}\w{1,12}))?\s{1,3}(?:down\s{1,3})?to|"
        r"\bpoints?\s{1,3}to|\bculprit(?:\s{1,3}(?:is|was))?|"
        # "fixed in 0.8.0 but came back in 0.9.0": where it came back is bad
        r"(?:came|comes|is|was)\s{1,3}back\s{1,3}(?:in|on|with)|reappear\w{0,3}\s{1,3}(?:in|on|with)|"
        r"\btreatment(?:\s{1,3}(?:arm|group|run|build))?)$", re.IGNORECASE)),
)
AFTER_FIXED = re.compile(r"问题(?:已经)?(?:消失|解决)|(?:issue|problem|regression|bug)\s{1,3}"
                         r"(?:is\s{1,3}|was\s{1,3}|has\s{1,3}been\s{1,3})?(?:gone|fixed|resolved)",
                         re.IGNORECASE)
AFTER = (
    (Role.GOOD, re.compile(r"^[\s:：)）(（-]{0,4}(?:✅|✔|正常|没问题|\(good\)|"
                           # "X (ok in Y)": the verdict is Y's (BEFORE), not X's
                           r"(?:ok|fine)\b(?!\s{1,3}(?:on|with|in|at)\b))|"
                           r"\b(?:is|was|works?|worked)\s{1,3}(?:fine|ok|good|well|fast|normal|healthy|"
                           r"true|correctly)\b(?!\s{1,3}(?:on|with|in|at)\b)|"
                           # "X works for me", "X works now"
                           r"\b(?:works?|worked)\s{1,3}(?:for\s{1,3}(?:me|us)|now)\b|"
                           # "X (works well)", "X (correct output)": a verdict in brackets is X's
                           r"^[\s`*_]{0,4}[(（]\s{0,2}(?:works?|worked|good|ok|fine|fast|correct|normal|"
                           r"healthy|passing|passes)\b(?!(?:\s{1,3}\w{1,12})?\s{1,3}(?:on|with|in|at)\b)|"
                           r"\bproduces?\s{1,3}(?:the\s{1,3})?(?:expected|correct|normal)|"
                           r"^\W{0,4}before\s{1,3}the\s{1,3}(?:change|pr|commit)|"
                           r"\bgives\s{1,3}(?:much\s{1,3})?better|\bfaster\s{1,3}than|\bbaseline\b|"
                           # "X (pre-regression control)": named as the reference before it
                           r"^\W{0,4}(?:pre-?regression|pre-?change|control)\b",
                           re.IGNORECASE)),
    (Role.BAD, re.compile(r"^[\s:：)）(（-]{0,4}(?:❌|✗|✘|变慢|慢|\(bad\))|"
                          # "X (gibberish output)", "X (crashes)": a failure in brackets is X's
                          r"^[\s`*_]{0,4}[(（][^()（）]{0,30}?\b(?:gibberish|garbage|garbled|broken|"
                          r"fails?|failing|failed|crash\w{0,3}|errors?|wrong|slow\w{0,2}|"
                          r"regress\w{0,4}|bad|OOM|hangs?)\b|"
                          r"^\W{0,4}(?:adds?|with|after)\s{1,3}the\s{1,3}change|"
                          r"\b(?:is|are|was|were)\s{1,3}(?:just\s{1,3}as\s{1,3})?(?:slow|slower|broken|"
                          r"bad|worse|regressed)\b|\bslower\s{1,3}than|\bdrops?\b|\blags?\b|"
                          r"\b(?:very|incredibly|extremely|really|significantly)\s{1,3}(?:low|slow)\b|"
                          # "a regression in X" binds forward, to X (round 7)
                          r"(?<!pre-)(?<!pre)\bregress\w{0,4}\b(?!\s{1,3}(?:at|in|on|with|since)\b)|劣化|下降|变慢|"
                          # round 7: compared with its own past ("main is lower than it used to
                          # be", "X is slower than before"): X is the changed, newer end
                          r"\bthan\s{1,3}(?:it\s{1,3}|they\s{1,3})?used\s{1,3}to\b|"
                          r"\bthan\s{1,3}(?:before|previously)\b|"
                          r"^\W{0,4}treatment\b|"
                          # "X as the first bad commit", "X is the first bad commit"
                          r"^\W{0,4}(?:is|as|was)\s{1,3}(?:the\s{1,3})?first\s{1,3}(?:bad|broken)|"
                          # "our 0.5.9 doesn't include these changes": it lacks the fix
                          r"^\W{0,4}(?:does\s{1,3}not|doesn't|did\s{1,3}not|didn't)\s{1,3}(?:yet\s{1,3})?"
                          r"(?:include|contain|have)\s{1,3}(?:the|these|this|that)\s{1,3}(?:fix\w{0,2}|"
                          r"changes?|commits?|PRs?|patch\w{0,2})\b",
                          re.IGNORECASE)),
)
# an open range upward after a ref: "v0.20.0+", "0.6.3 or above", "from 0.36.0 onwards",
# "0.0.3版本开始", "0.11 及以后": what the clause says holds from X on. In a regression X is the
# first bad one; in a fix statement ("should not occur in v0.6.3 or above anymore") the first
# fixed one. A bare "after/之后" is not one ("1.0.0之后加入了 FP8": a feature added after it).
OPEN_RANGE = re.compile(r"^(?:`|\*\*)?(?:\+(?![\w.])|\s{0,2}(?:(?:and|or)\s{1,3}(?:above|later|newer|"
                        r"higher|up)\b|(?:and\s{1,3})?onwards?\b)|"
                        r"\s{0,2}(?:版本)?(?:开始|起|及(?:以)?(?:上|后)|以(?:上|后)的?版本))", re.IGNORECASE)
# "between vllm 0.14.0 and newer versions": a range with two ends, not one open one
BETWEEN = re.compile(r"\bbetween\s{1,3}(?:[\w-]{1,12}\s{1,3}){0,2}$", re.IGNORECASE)
# the words that make an open range a fixed one ("not occur in X or above any more")
# ("works" is left out: "not working with v2.2 or later" is the negation of it)
FIX_WORDS = re.compile(r"\b(?:fixed|resolved|solved|no\s{1,3}longer|any\s?more)\b|"
                       r"(?:n't|\bnot)\s{1,3}(?:occur|happen|appear|reproduce)|修复|解决|不再",
                       re.IGNORECASE)
SEGMENT = (
    (Role.GOOD, re.compile(r"✅|✔|✓|正常|没问题|\(good\)")),
    (Role.BAD, re.compile(r"❌|✗|✘|变慢|\(bad\)")),
)
ROW = (  # a table row is about its one ref: words mark it too
    # "Parent `07f326c`": the parent of the culprit is the last good commit
    (Role.GOOD, re.compile(r"\bOK\b|\bbaseline\b|\bfast\b|\bgood\b|\bworks\b|\bfine\b|\bparent\b",
                           re.IGNORECASE)),
    (Role.BAD, re.compile(r"回归|劣化|\bregress\w{0,4}|\bslow\w{0,2}\b|\bbad\b|\bbroken\b|"
                          r"\bworse\b|\bdegrad\w{0,5}", re.IGNORECASE)),
)
# a comparison word right before a ref makes it the reference: "较 Y 下降", "compared to Y"
COMPARE_TAIL = re.compile(r"(?:相比于?|相较于?|较|对比|(?<![对相])比|compared\s{1,3}(?:to|with)|"
                          r"relative\s{1,3}to|\bvs\.?|\bversus)\s{0,3}$", re.IGNORECASE)
COMPARE = re.compile(r"^(?:相比|相较于?|对比|比|compared\s{1,3}(?:to|with)|vs\.?|versus)$",
                     re.IGNORECASE)
LABEL_LINE = re.compile(r"^[\s#>*_-]{0,8}(?P<label>before(?:\s{1,3}(?:update|upgrade))?|"
                        r"after(?:\s{1,3}(?:update|upgrade))?|good|bad|old|new|control|treatment|"
                        r"修复前|修复后)"
                        r"[\s*_:：]{0,6}$", re.IGNORECASE)
LABEL_ROLE = {"before": Role.GOOD, "good": Role.GOOD, "old": Role.GOOD, "after": Role.BAD,
              "bad": Role.BAD, "new": Role.BAD, "control": Role.GOOD, "treatment": Role.BAD,
              "修复前": Role.PROBLEM, "修复后": Role.FIXED}
CLAUSE_END = re.compile(r"[.!?](?=\s|$)|\.(?=[A-Z])|[;；。！？，]|\bbut\b|\bwhile\b|\bwhereas\b|"
                        r"\bhowever\b")
# an arrow after these words runs back: "downgrading from 0.10.1 to 0.10.0" (0.10.0 is good)
DOWNGRADE = re.compile(r"(?:downgrad\w{0,6}|roll\w{0,4}\s{1,3}back|revert\w{0,4}|"
                       r"(?:go|went|going|switch\w{0,4})\s{1,3}back|降级|回退|回滚)(?:\s{1,3}\w{1,12}){0,2}?\s{1,3}(?:from\s{1,3})?[^\s]{0,12}$",
                       re.IGNORECASE)
# what follows "from X to Y" says Y works: "... to Y fixed it", "... to Y and it works again"
CURED = re.compile(r"^(?:[^.;!?]|\.(?=\d)){0,40}?\b(?:fixed|fixes|solved|solves|resolved|resolves|"
                   r"works?(?!\s{1,3}(?:worse|slower))|is\s{1,3}(?:fine|ok|normal|gone))\b", re.IGNORECASE)
ARROW = re.compile(r"^(?:to|→|->|=>|⇒|到|升级到)$", re.IGNORECASE)
TABLE_RULE = re.compile(r"^\s*\|?(?:\s*:?-{2,}:?\s*\|)+\s*:?-{0,}:?\s*\|?\s*$")

# "before the v0.12 upgrade", "since the 0.9.2 update": the upgrade went to X, so X is the bad
# end whatever word ("before", "after", "since") stands in front of it
UPGRADE_NOUN = re.compile(r"^[\s`*_]{0,3}(?:upgrade|update|bump|migration|rollout|升级)\b",
                          re.IGNORECASE)

# a question asks whether it is fixed; it does not say so ("Is this fixed on 0.7.0?", "修复了吗？",
# "..., correct?"): no fix cue, no fixed end
QUESTION_START = re.compile(r"^(?:[^:?\n]{0,40}:\s)?\W{0,4}(?:is|are|was|were|has|have|had|does|do|"
                            r"did|can|could|will|would|should|which|what|when|why|how|any|"
                            r"anyone|whether)\b",
                            re.IGNORECASE)
ASKING = re.compile(r"吗|么|是否|请问|\bwhether\b|\bwonder|"
                    r"[,，]\s{0,2}(?:correct|right|no|yes|isn't\s{1,3}it|is\s{1,3}it|true)\s{0,2}[?？]$",
                    re.IGNORECASE)

# a hope, not an observation: "this should be fixed in newer versions", "could be fixed by #N"
HEDGE = re.compile(r"\b(?:should|could|might|may|would|will|hopefully|probably|likely)\s{1,3}"
                   r"(?:\w{1,12}\s{1,3})?(?:be|have\s{1,3}been)\s{1,3}(?:\w{1,10}\s{1,3})?"
                   r"(?:fixed|resolved|solved|addressed)\b", re.IGNORECASE)

# the problem is still there, or came back, or is not fixed ("The bug has not been fixed in the
# latest version": sglang's issue template)
STILL = re.compile(r"\bstill\b|\bagain\b|came\s{1,3}back|reappear|re-?introduc|\bnot\s{1,3}yet\b|"
                   r"(?:\bnot|n't|\bnever)\s{1,3}(?:\w{1,10}\s{1,3}){0,2}?(?:been\s{1,3})?"
                   r"(?:fixed|resolved|solved|addressed|gone)\b|"
                   r"仍然|依然|依旧|未修复|没有修复|没修复|未解决", re.IGNORECASE)


def is_question(sentence: str) -> bool:
    s = sentence.strip()
    return s.endswith(("?", "？")) and bool(QUESTION_START.match(s) or ASKING.search(s))


def open_range(line: str, around: tuple[int, int, int, int], seg: tuple[int, int],
                found: tuple[Role, str] | None) -> tuple[Role, str] | None:
    """"X+", "X or above", "X版本开始": the clause's state holds from X on (first bad, or first
    fixed in a fix statement); not "between X and newer ones", not "X+ works fine"."""
    prev_end, start, end, next_start = around
    opened = OPEN_RANGE.match(line[end:next_start])
    if opened is None or BETWEEN.search(line[prev_end:start]) or \
            AFTER[0][1].search(line[end + opened.end():next_start][:60]):
        return found
    fixed = bool(FIX_WORDS.search(line[seg[0]:seg[1]])) or (
        found is not None and found[0] in (Role.GOOD, Role.FIXED))
    return (Role.FIXED if fixed else Role.BAD, f"{opened.group(0).strip()!r} after it: from it on")
