"""Symptoms a report shows: an output cap, ITL/TPOT, throughput, TTFT, latency, correctness,
a crash, a lost MTP speed-up. A metric counts when a sentence says it changed (regressed,
dropped, increased, 劣化 ...), when the title names it, or when the report gives two or more
values of it (a before/after pair, a table column).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import TypeAlias

from vllm_bisect.symptoms import Direction, Symptom
from vllm_bisect.triage.versions import title_index


class Prose(StrEnum):
    """What a report may name that no symptom declares: latency (no probe judges it)."""

    LATENCY = "latency"


# what triage reads in a report: a symptom of the registry that declares its words (READ:
# ``SymptomInfo.words``, its names and its checkbox on the form), or latency
Found: TypeAlias = Symptom | Prose
READ: tuple[Symptom, ...] = tuple(s for s in Symptom if s.info.words is not None)


def found_of(key: str) -> Found:
    """What triage reads, by its key ("ttft", "latency")."""
    return Prose(key) if key in Prose._value2member_map_ else Symptom(key)


def rises(found: Found) -> bool:
    """Is a larger value of the metric worse (a latency; a symptom whose declaration says
    its number rises when it shows)?"""
    return found is Prose.LATENCY or (isinstance(found, Symptom)
                                      and found.info.direction is Direction.RISES)


NUM = r"\d{1,3}(?:,\d{3}){1,4}(?:\.\d{1,6})?|\d{1,9}(?:\.\d{1,6})?"
CHANGE = re.compile(
    r"regress|degrad|decreas|increas|\bdrop|\bslow|\bworse|\blower\b|\bhigher\b|\blags?\b|"
    r"\breduc|deteriorat|\bsurge|\bjump|\bfell\b|\bfall|\bloss\b|\bdip|\bcut\b|\bhurt|\blarger\b|"
    r"劣化|下降|变慢|降低|增加|上升|回退|慢|"
    # a comparison is a change: "lower than" in Chinese (准确率明显低于N卡), and a duration that
    # got "longer" ("prefill time ... 13ms longer"; not "no longer")
    r"低于|高于|(?<!no )\blonger\b|更长|变长", re.IGNORECASE)
# a metric judged bad is a symptom without a change word ("tpot性能非常差", "TTFT is very poor",
# "poor throughput"): the judgement right after the metric (within a few words) or right before it
JUDGE = r"(?:poor|bad|weak(?:er)?|terrible|awful|horrible)\b"
JUDGED_AFTER = re.compile(r"^[^.。,，;；]{0,12}?(?:(?:非常|很|较|特别|极|太)?差(?![异别距值])|不佳)|"
                          r"^[^.。,，;；]{0,24}?\b(?:is|are|was|were|looks?|seems?|got|gets|became|"
                          r"becomes)\s{1,3}(?:(?:very|quite|really|so|much|extremely|rather)\s{1,3})?"
                          + JUDGE, re.IGNORECASE)
JUDGED_BEFORE = re.compile(r"\b" + JUDGE + r"\s{1,3}$", re.IGNORECASE)
# "identical outputs" says nothing changed; "under identical topology / the same config" says
# the two runs were set up alike (a control), not that the metric did not change
SETUP = (r"(?:\s{1,3}[^\s]{1,12}){0,1}\s{1,3}(?:topolog\w{1,3}|config\w{0,9}|setups?|settings?|"
         r"hardware|environments?|commands?|param\w{0,8}|models?|weights|machines?|nodes?|clusters?|"
         r"images?|arg\w{0,7}|flags|scripts?|datasets?|conditions|workloads?|inputs?|prompts?)\b")
NEGATED = re.compile(r"unaffected|not\s{1,3}affected|no\s{1,3}(?:meaningful\s{1,3})?regression|"
                     rf"match(?:es)?\s{{1,3}}closely|identical(?!{SETUP})|confirming|unchanged|"
                     # "throughput is the same, but TTFT doubled": the same is no change
                     r"\b(?:is|are|was|were|stays?|stayed|remains?|remained)\s{1,3}(?:about\s{1,3}|"
                     r"roughly\s{1,3}|basically\s{1,3})?(?:the\s{1,3})?(?:same|similar|comparable|"
                     r"stable|flat)\b|无变化|"
                     # "使用评估代码、prompt一致": the runs were set up alike (a control), like
                     # "identical config"; 一致 alone (输出一致) still says nothing changed
                     r"(?<!prompt)(?<!代码)(?<!配置)(?<!参数)(?<!环境)(?<!条件)(?<!命令)(?<!脚本)一致",
                     re.IGNORECASE)
CONTRAST = re.compile(r"\bbut\b|\bwhile\b|\bwhereas\b|\bhowever\b|但是|但|而", re.IGNORECASE)


# A change word has a direction, and each metric a good one: lower TTFT/ITL/latency is better,
# higher throughput is better. A clause that only says the metric got better ("lowered the
# TTFT from 1,187 ms to 923 ms", "PP speed increased") is an improvement, not the symptom.
BETTER_WORDS = re.compile(r"improv|\bbetter\b|\bfaster\b|提升|优化|改善", re.IGNORECASE)
WORSE_WORDS = re.compile(r"regress|degrad|\bworse\b|\bslow|劣化|变慢|变差", re.IGNORECASE)
DOWN_WORDS = re.compile(r"\blower|\breduc|\bdecreas|\bdrop|\bfell\b|\bfall|\bdown\b|\bcut\b|"
                        r"降低|下降|减少", re.IGNORECASE)
UP_WORDS = re.compile(r"\bhigher\b|\bincreas|\brais|\bgrew\b|\bjump|\bsurge|\bup\b|上升|增加|提高|"
                      r"\blonger\b", re.IGNORECASE)


FROM_TO = re.compile(rf"\bfrom\s{{1,3}}~?(?P<a>{NUM})[^\d]{{0,20}}?\bto\s{{1,3}}~?(?P<b>{NUM})",
                     re.IGNORECASE)


def improved_only(found: Found, text: str, pos: int = 0) -> bool:
    """Whether a clause says ``found`` (named at ``pos``) only got better: the values "from A
    to B" when given, else the direction of its change words; read between the metrics named
    before and after it ("TTFT went from 51 ms to 80 ms and accuracy dropped": TTFT rose)."""
    others = [(m.start(), m.end()) for f, pat in METRICS if f is not found
              for m in pat.finditer(text)]
    start = max((b for a, b in others if b <= pos), default=0)
    end = min((a for a, b in others if a > pos), default=len(text))
    text = text[start:end]
    lower_better = rises(found)
    values = FROM_TO.search(text)
    if values and found is not Symptom.CORRECTNESS:
        a, b = number(values.group("a")), number(values.group("b"))
        return (b < a) if lower_better else (b > a)
    if WORSE_WORDS.search(text):
        return False
    better = BETTER_WORDS.search(text) or (DOWN_WORDS if lower_better else UP_WORDS).search(text)
    worse = (UP_WORDS if lower_better else DOWN_WORDS).search(text)
    return bool(better) and not worse and found is not Symptom.CORRECTNESS


def clause(text: str, pos: int) -> str:
    """The part of a sentence around ``pos`` between contrast words ("X is the same, but Y
    doubled": a negation in one clause says nothing about the other)."""
    cuts = [0] + [m.start() for m in CONTRAST.finditer(text)] + [len(text)]
    return next((text[a:b] for a, b in pairwise(cuts) if a <= pos < b), text)
# latency (end-to-end request time) is triage's own word: no symptom is declared for it
LATENCY = re.compile(r"(?<!inter-token )(?<!token )(?<!bench )\blatency\b|时延|延迟|"
                     r"(?:inference|response|request|wall|e2e|end-to-end)[ -]time\b|"
                     # 耗时: the time a request took
                     r"(?:返回|请求|推理|响应)?耗时|"
                     # the time to load something ("the loading times for LoRA adapters")
                     r"\b(?:loading|load)\s{1,3}times?\b|加载(?:时间|耗时)",
                     re.IGNORECASE)
# each metric's names (a symptom's, declared in its module: Words.metric), in the registry's
# order, the times (a number that rises when it shows) first, then latency, then the rest:
# where a table's header names two, the first wins
_NAMED = [(s, re.compile(w.metric, re.IGNORECASE)) for s in READ if (w := s.info.words) and w.metric]
METRICS: tuple[tuple[Found, re.Pattern[str]], ...] = (
    *((s, p) for s, p in _NAMED if s.info.direction is Direction.RISES),
    (Prose.LATENCY, LATENCY),
    *((s, p) for s, p in _NAMED if s.info.direction is not Direction.RISES))
METRIC: dict[Found, re.Pattern[str]] = dict(METRICS)
TOKS = re.compile(rf"(?P<n>{NUM})\s{{0,2}}(?:tok(?:en)?s?/s|TPS|QPS|tokens per second|it/s|items/s|"
                  rf"t/s)(?!/)",
                  re.IGNORECASE)
# "12s左右": a unit glued to Chinese still ends at the next ASCII letter or digit
SECONDS = re.compile(rf"(?P<n>{NUM})\s{{0,2}}(?:s|sec|secs|seconds)(?![A-Za-z0-9_])")
VERSIONISH = re.compile(r"(?<![\w.])v?\d{1,3}\.\d{1,4}\.\d{1,4}")
MS = re.compile(rf"(?P<n>{NUM})\s{{0,2}}ms(?![A-Za-z0-9_])", re.IGNORECASE)  # "21ms左右" too
# "TPOT 在 27 ms", "Output TPS `647.9`": one value right after the metric's name
AFTER_METRIC = re.compile(rf"^[\s:：=`*_在为是约~～]{{0,6}}(?P<n>{NUM})(?![\d.])")
CAP = re.compile(
    r"(?:stops?|stopped|capped|cut\s{1,3}off|truncat\w{0,5}|exactly|hard[- ]?limit\w{0,4}|"
    r"limited|硬限制在|截断在|停在|只有|限制在)[^\n\d]{0,25}?(?P<n>\d{2,6})\s{0,2}"
    r"(?:个\s{0,2})?(?:output\s{1,3}|输出\s{0,2})?tokens?(?![/\w])"
    r"|(?<!-)(?<!--)\boutput[ _]len(?:gth)?\s{0,3}(?:of\s{1,3}|=|:)?\s{0,3}(?P<m>\d{2,6})\b",
    re.IGNORECASE)
CRASH = re.compile(r"illegal memory access|\bcrash\w{0,3}|segmentation fault|segfault|core dumped|"
                   r"CUDA error|EngineDeadError|engine (?:core )?died|崩溃", re.IGNORECASE)
OUT_OF_MEMORY = re.compile(r"out[- ]of[- ]memory", re.IGNORECASE)
MTP_SPEEDUP = re.compile(r"\b(?:MTP|speculative decoding|spec(?:ulative)? decode|EAGLE)\s{1,3}"
                         r"(?:cut|cuts|hurt|hurts|slowed|reduced|made|helps?)\b|MTP\s{0,2}让|"
                         r"(?:MTP|spec\w{0,10})[- ]speed-?up|speed-?up\s{1,3}(?:of|from)\s{1,3}"
                         r"(?:MTP|spec)|(?:with|开)\s{0,2}MTP\b.{0,40}(?:\+\d|提升|faster)",
                         re.IGNORECASE)
PER_REQUEST = re.compile(r"per[- ]request|single[- ]request|每个?请求|单请求|\bbs\s{0,2}=\s{0,2}1\b|"
                         r"decode|generation rate|one request", re.IGNORECASE)
# an abbreviation's dot ("30s vs. 10s", "e.g. 2x") does not end the sentence
SENTENCE_END = re.compile(r"(?<=[.!?])(?<!vs\.)(?<!e\.g\.)(?<!i\.e\.)(?<!approx\.)\s+|[。！？；;]")


@dataclass
class Symptoms:
    found: list[Found] = field(default_factory=list)
    caps: list[int] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    tok_s: list[float] = field(default_factory=list)
    where: dict[str, int] = field(default_factory=dict)  # symptom -> first line it was read on
    why: dict[str, str] = field(default_factory=dict)    # symptom -> how it was read

    def add(self, f: Found, n: int, why: str) -> None:
        """Record ``f`` read on line ``n`` (the first reading of a symptom is kept)."""
        if f not in self.found:
            self.found.append(f)
            self.where[f.value] = n
            self.why[f.value] = why


def number(text: str) -> float:
    return float(text.replace(",", ""))


def _table_columns(lines: list[str], where: dict[Found, int] | None = None
                   ) -> dict[Found, list[float]]:
    """Values in table columns headed by a metric name (two or more = a comparison)."""
    out: dict[Found, list[float]] = {}
    header: list[str] | None = None
    header_line = 0
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not (s.startswith("|") and s.count("|") >= 2):
            header = None
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if header is None:
            header, header_line = cells, n
            continue
        itl_table = any(METRIC[Symptom.ITL].search(h) for h in header)
        for i, cell in enumerate(cells[:len(header)]):
            m = re.match(rf"~?(?P<n>{NUM})", cell.strip("*_` "))  # "**15.70 ms**" too
            if not m:
                continue
            unit = re.search(r"tok(?:en)?s?/s|\bms\b", cell)
            for found, pat in METRICS:
                if pat.search(header[i]) or (unit and pat.search(unit.group(0))):
                    if found is Symptom.THROUGHPUT and not re.search(
                            r"throughput|吞吐", header[i], re.I) and itl_table:
                        found = Symptom.ITL  # tok/s beside ITL: one decode speed, two units
                        break
                    out.setdefault(found, []).append(number(m.group("n")))
                    if where is not None:
                        where.setdefault(found, header_line)
                    break
    return out


def _row_metrics(lines: list[str]) -> dict[Found, list[tuple[int, float]]]:
    """Tables whose rows are metrics ("| Decode (token) | | 14.22 ms | ..."): the row's first
    value, with its line."""
    out: dict[Found, list[tuple[int, float]]] = {}
    for n, line in enumerate(lines, 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 2:
            continue
        value = next((m for c in cells[1:] if (m := re.match(rf"~?(?P<n>{NUM})", c.strip("*_` ")))),
                     None)
        found = next((f for f, pat in METRICS if pat.search(cells[0])), None)
        if value is not None and found is not None:
            out.setdefault(found, []).append((n, number(value.group("n"))))
    return out


# "Mean TPOT (ms):                          20.1": `vllm bench serve` aligns its values
LABELLED = re.compile(rf"(?P<label>[A-Za-z][\w ()/.-]{{0,40}}?)\s{{0,2}}:\s{{0,60}}~?(?P<n>{NUM})")


def _labelled_values(lines: list[str]) -> dict[Found, list[float]]:
    """"Throughput: 21.25 requests/s" on one line, "Throughput: 0.93 ..." on another: the values
    of each label, kept for a metric only when one label's values differ (two benchmark
    outputs where only "Mean TPOT (ms)" moved change ITL, not throughput)."""
    by_label: dict[tuple[Found, str], list[float]] = {}
    for line in lines:
        for m in LABELLED.finditer(line):
            for found, pat in METRICS:
                if pat.search(m.group("label")):
                    key = (found, m.group("label").strip().lower())
                    by_label.setdefault(key, []).append(number(m.group("n")))
                    break
    out: dict[Found, list[float]] = {}
    for (found, _), values in by_label.items():
        if _differ(values):
            out.setdefault(found, []).extend(values)
    return out


def _differ(values: list[float]) -> bool:
    """Two or more values, more than 3% apart (closer is noise, not a change)."""
    pos = [v for v in values if v > 0]
    return len(set(values)) >= 2 and (len(pos) < len(values) or max(pos) > 1.03 * min(pos))


def _only_better(found: Found, seen: list[tuple[int, float]], sides: dict[int, str]) -> bool:
    """Values of one metric on the good end's line and on the bad end's line, paired in the
    order written: True when every pair moved the good way (lower TTFT/ITL/latency, higher
    throughput): the report shows no regression of this metric."""
    old = [v for n, v in seen if sides.get(n) == "old"]
    new = [v for n, v in seen if sides.get(n) == "new"]
    if not old or len(old) != len(new):
        return False
    lower_better = rises(found)
    return all((b < a) if lower_better else (b > a) for a, b in zip(old, new, strict=True))


def find_symptoms(lines: list[str], bench_throughput: bool,
                  sides: dict[int, str] | None = None) -> Symptoms:
    """``sides``: the lines that name only the good ("old") or only the bad ("new") end."""
    s = Symptoms()

    add = s.add

    title = lines[title_index(lines) - 1] if lines else ""
    version_toks: list[tuple[int, float]] = []
    per_line: dict[Found, list[tuple[int, float]]] = {}  # one value of a metric per line
    for n, line in enumerate(lines, 1):
        for m in CAP.finditer(line):
            s.caps.append(int(m.group("n") or m.group("m")))
            add(Symptom.LENGTH, n, f"output cap: {m.group(0)[:40]!r}")
        crash = CRASH.search(line)
        # round 7: "CUDA error: out of memory" is the memory symptom (read by symptom_words), not
        # a crash besides it
        if crash and not re.search(r"\bno\s{1,3}crash", line, re.I) and not (
                crash.group(0).lower() == "cuda error" and OUT_OF_MEMORY.search(line)):
            add(Symptom.CRASH, n, "a crash message")
        if line.strip().startswith("|") and line.count("|") >= 2:
            continue  # a table row: its columns are read by _table_columns
        for text in SENTENCE_END.split(line):
            if MTP_SPEEDUP.search(text):
                add(Symptom.MTP_SPEEDUP, n, "MTP compared with plain decoding")
                continue  # its numbers compare MTP with plain decoding, not two versions
            toks = [number(m.group("n")) for m in TOKS.finditer(text)]
            changed = bool(CHANGE.search(text))
            for found, pat in METRICS:
                hit = pat.search(text)
                if not hit:
                    continue
                part = clause(text, hit.start())
                if NEGATED.search(part) or improved_only(found, part,
                                                         hit.start() - text.find(part)):
                    continue
                if found is Symptom.THROUGHPUT and (
                        re.search(r"decode[- ]throughput", text, re.I) or (
                            PER_REQUEST.search(text) and not re.search(r"throughput|吞吐", text, re.I))):
                    found = Symptom.ITL  # a per-request decode speed
                judged = bool(JUDGED_AFTER.search(text[hit.end():]) or
                              JUDGED_BEFORE.search(text[:hit.start()]))
                if (changed or judged or line is title or len(MS.findall(text)) >= 2 or len(toks) >= 2
                        or len(SECONDS.findall(text)) >= 2):
                    add(found, n, "named in the title" if line is title else (
                        "named with a change" if changed else
                        "named with a judgement" if judged else "two values compared"))
                value = AFTER_METRIC.match(text[hit.end():hit.end() + 24])
                if value is not None:
                    per_line.setdefault(found, []).append((n, number(value.group("n"))))
            if len(SECONDS.findall(text)) >= 2 and re.search(r"\bvs\.?\b|→|->|对比", text):
                add(Prose.LATENCY, n, "two durations compared")  # "1.6s vs. 0.95s": two durations compared
            if len(toks) == 1 and VERSIONISH.search(text):
                version_toks.append((n, toks[0]))  # "v2.0.7: 16tokens/s" on its own line
            if len(toks) >= 2:
                s.tok_s += toks
                per_req = PER_REQUEST.search(text) and not re.search(
                    r"throughput|concurren|parallel|\bload\b", text, re.I)
                add(Symptom.ITL if per_req else Symptom.THROUGHPUT, n,
                    "tok/s compared" + (" per request" if per_req else ""))
            if re.search(r"\b(?:ITL|TPOT)\b|inter-token", text, re.I):
                s.itl_ms += [number(m.group("n")) for m in MS.finditer(text)]
    if len({v for _, v in version_toks}) >= 2 and not {Symptom.ITL, Symptom.THROUGHPUT} & set(s.found):
        s.tok_s += [v for _, v in version_toks]  # one value per version line: compared
        add(Symptom.THROUGHPUT, version_toks[0][0], "tok/s on one line per version")
    for found, seen in per_line.items():  # "v0.9.1 ... TPOT 20ms" / "v0.11 ... TPOT 27ms"
        if len({n for n, _ in seen}) >= 2 and len({v for _, v in seen}) >= 2 and not \
                _only_better(found, seen, sides or {}):
            add(found, seen[0][0], "one value per line on two lines")
            if found is Symptom.ITL:
                s.itl_ms += [v for _, v in seen]
    table_lines: dict[Found, int] = {}
    for found, values in (_table_columns(lines, table_lines) | _labelled_values(lines)).items():
        if _differ(values):
            add(found, table_lines.get(found, 0), "values in a table column or labelled lines")
            if found is Symptom.ITL:
                s.itl_ms += values
            if found is Symptom.THROUGHPUT:
                s.tok_s += values
    slow_title = bool(CHANGE.search(title)) and not NEGATED.search(title)
    for found, rows in _row_metrics(lines).items():  # a metric per row: compared across tables,
        if len({v for _, v in rows}) >= 2 or slow_title:  # or the one the title says got worse
            add(found, rows[0][0], "a table row per metric" + (" (the title says it got worse)"
                                                               if len(rows) < 2 else ""))
            if found is Symptom.ITL:
                s.itl_ms += [v for _, v in rows]
    if bench_throughput and s.tok_s and Symptom.ITL in s.found and Symptom.THROUGHPUT not in s.found:
        add(Symptom.THROUGHPUT, 0, "`vllm bench throughput` tok/s")
    return s
