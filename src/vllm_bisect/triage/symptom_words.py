"""Symptoms named by words that are a symptom in themselves (symptoms.py reads metrics that
need a change word or two values): each rule says why it counts.

- **memory**: running out of memory (``OOM``, ``CUDA out of memory``, ``No available memory
  for the cache blocks``, 显存不足) counts wherever it is said; two different ``# GPU blocks``
  values or KV cache sizes in logs; an out-of-memory start is this symptom, not a crash.
  (Memory use in words, ``VRAM``, ``GPU memory``, ``KV cache size``, 显存, with a change word:
  its ``Words.said``.)
- **crash**: "failed to start / load", "unable to start", "cannot start / load", "startup
  error", 无法启动, 启动失败; "error" in the title ("run X error", "Error after model load"),
  not a measured error ("accuracy error", "error rate"); a request that times out (超时,
  "timed out", ``TimeoutError``), not a timeout setting.
- a symptom's own words, declared in its module (``Words``): ``said`` (ttft's prefill /
  prompt processing, memory's VRAM / GPU memory) with a change word, or in the title; not
  where its ``unless`` says so; for a time (``timed``) not when the sentence measures a
  *rate* (throughput, tok/s) and no time. ``alone`` (correctness's garbled / repeated
  output, mtp-speedup's accepted length stuck at 1) wherever said, unless negated.
"""

from __future__ import annotations

import re

from vllm_bisect.symptoms import Symptom
from vllm_bisect.triage.symptoms import CHANGE, METRIC, NEGATED, READ, Found
from vllm_bisect.triage.versions import title_index

# ASCII boundaries: "直接OOM" (glued to Chinese) is still an OOM
OOM = re.compile(r"(?<![A-Za-z0-9_-])OOM(?:s|ed|ing|'d)?(?![A-Za-z0-9_-])|"
                 r"out[- ]of[- ]memory|OutOfMemoryError|"
                 r"No available memory for the cache|显存不足|内存不足|"
                 # the same running-out said in words: "not enough memory", "insufficient memory"
                 r"(?:not\s{1,3}enough|insufficient)\s{1,3}(?:GPU\s{1,3}|video\s{1,3})?memory|"
                 # a leak is a change in itself: host memory ("RAM leakage") or GPU memory
                 r"(?:RAM|memory|内存|显存)\s{0,2}(?:leak\w{0,4}|泄[漏露])|leak\w{0,4}\s{1,3}(?:of\s{1,3})?"
                 r"(?:host\s{1,3}|CPU\s{1,3}|GPU\s{1,3})?(?:RAM|memory)",
                 re.IGNORECASE)
# "there is no OOM", "without OOM", "never OOMs": said not to happen
NO_BEFORE = re.compile(r"(?:\bno|\bnot|\bwithout|\bnever|n't|没有|未|无)\s{0,3}(?:\w{1,10}\s{1,3})?"
                       r"(?:an?\s{1,3}|any\s{1,3})?$", re.IGNORECASE)
FIXED_NOW = re.compile(r"any\s?more|no\s{1,3}longer|\bfixed|\bresolved|\bgone\b|不再|已修复|已解决",
                       re.IGNORECASE)
MORE_CHANGE = re.compile(r"\blarger\b|\bmore\b|\bgrew\b|\bbigger\b|significantly|dramatic",
                         re.IGNORECASE)
BLOCKS = re.compile(r"# GPU blocks:\s{0,3}(\d{1,9})")
# vLLM's start-up log of KV capacity: two different values are a memory change
KV_LOG = re.compile(r"KV cache size:\s{0,3}([\d,]{1,12})\s{0,2}tokens|Maximum concurrency for "
                    r"[\d,]{1,12} tokens per request:\s{0,3}([\d.]{1,12})x", re.IGNORECASE)
CRASH = re.compile(r"fail\w{0,3}\s{1,3}to\s{1,3}(?:start|load|launch|initiali[sz]e)|"
                   r"unable\s{1,3}to\s{1,3}(?:start|load|launch)|can(?:not|'t|\s{1,3}not)\s{1,3}"
                   r"(?:start|load|launch)|startup\s{1,3}error|无法启动|启动失败|"
                   # a run that stops: it hangs, or it reports an error
                   r"卡住|卡死|(?<![\w-])(?:hangs?|hung)(?![\w-])|"
                   r"an?\s{1,3}error\s{1,3}(?:is|was)\s{1,3}(?:reported|raised|thrown)|报错|出错|"
                   r"throw\w{0,3}\s{1,3}(?:an?\s{1,3})?errors?|"
                   # a request that never comes back times out: the run stops answering (not a
                   # timeout setting: "--timeout", "timeout=600", "timeout of 600 s")
                   r"超时|timed\s{1,3}out|TimeoutError|(?<![\w-])time-?outs?(?![\w=:-])"
                   r"(?!\s{0,2}(?:=|of\s{1,3}\d|\d|setting|value|param))",
                   re.IGNORECASE)
# a title that says the run errors ("run X error", "Error after model load"): the run stops; not
# a measured error ("accuracy error", "error rate", "relative error")
TITLE_ERROR = re.compile(r"(?<!accuracy )(?<!precision )(?<!numerical )(?<!rounding )(?<!relative )"
                         r"(?<!absolute )(?<!squared )(?<!mean )(?<![\w-])errors?(?![\w-])"
                         r"(?!\s{1,3}(?:rate|bars?|margin|metric))|(?<![\w-])Error:", re.IGNORECASE)
# an error in what the model wrote ("tool call parser error", "JSON format error") is its output
OUTPUT_ERROR = re.compile(r"(?:pars\w{0,4}|format|json|schema|template|tool[- ]call\w{0,2})\s{1,3}errors?",
                          re.IGNORECASE)
# each symptom's own words (Words.said, declared in its module): (symptom, words, unless, a time?)
SAID = tuple((s, re.compile(w.said, re.IGNORECASE), re.compile(w.unless or r"(?!)", re.IGNORECASE),
              w.timed) for s in READ if (w := s.info.words) and w.said)
# (symptom, words, what they mean): words that say a symptom on their own unless negated
ALONE = tuple((s, re.compile(w.alone, re.IGNORECASE), w.means)
              for s in READ if (w := s.info.words) and w.alone)
WRONG_OUTPUT = next(p for s, p, _ in ALONE if s is Symptom.CORRECTNESS)
THROUGHPUT = METRIC[Symptom.THROUGHPUT]
TIME = re.compile(r"\bTTFT\b|\d\s{0,2}(?:ms|s|sec|seconds)\b|\btime\b|latency|时间|耗时", re.IGNORECASE)
SENTENCE = re.compile(r"(?<=[.!?])\s+|[。！？；;]")
CODE_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")


def prose_lines(lines: list[str]) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks (commands and configs name flags, not symptoms)."""
    out, fenced = [], False
    for n, line in enumerate(lines, 1):
        if CODE_FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def word_symptoms(lines: list[str]) -> list[tuple[Found, int, str]]:
    """(symptom, line, why) for every rule above that fires (first line each)."""
    found: dict[Found, tuple[int, str]] = {}
    title = title_index(lines) if any(ln.strip() for ln in lines) else 0

    def add(f: Found, n: int, why: str) -> None:
        found.setdefault(f, (n, why))

    for n, line in enumerate(lines, 1):  # logs too: an OOM in the log is the symptom
        m = OOM.search(line)
        if m and (not NO_BEFORE.search(line[max(0, m.start() - 30):m.start()])
                  or FIXED_NOW.search(line)):  # "does not OOM any more": a fix of an OOM
            add(Symptom.MEMORY, n, f"{m.group(0)!r}: out of memory")
    blocks = {b for line in lines for b in BLOCKS.findall(line)}
    if len(blocks) >= 2:
        add(Symptom.MEMORY, 0, f"# GPU blocks differ: {', '.join(sorted(blocks)[:4])}")
    kv = {(m.group(1) is None, m.group(1) or m.group(2)) for line in lines for m in KV_LOG.finditer(line)}
    if any(len({v for k, v in kv if k == kind}) >= 2 for kind in (True, False)):
        add(Symptom.MEMORY, 0, "KV cache size / maximum concurrency differ between runs")
    for n, line in prose_lines(lines):
        for text in SENTENCE.split(line):
            changed = (bool(CHANGE.search(text) or MORE_CHANGE.search(text))
                       and not NEGATED.search(text))
            # "prefill throughput ... tok/s": a rate of prefill is throughput, not time to first
            # token (unless a time is said too)
            rate = THROUGHPUT.search(text) and not TIME.search(text)
            for symptom, said, unless, timed in SAID:
                m = said.search(text)
                if m and (changed or n == title) and not (timed and rate) and not unless.search(text):
                    add(symptom, n, f"{m.group(0)!r} " + ("in the title" if n == title
                                                        else "with a change"))
            for symptom, alone, means in ALONE:
                m = alone.search(text)
                if m and not NEGATED.search(text):
                    add(symptom, n, f"{m.group(0)!r}: {means}")
            m = CRASH.search(text) or (TITLE_ERROR.search(text) if n == title and not (
                WRONG_OUTPUT.search(text) or OUTPUT_ERROR.search(text)) else None)
            if m and not OOM.search(text):
                add(Symptom.CRASH, n, f"{m.group(0)!r}: " + (
                    "the title says the run errors" if n == title else "it times out"
                    if re.search(r"time|超时", m.group(0), re.I) else "it does not start"))
    oom = any(OOM.search(line) for line in lines) and Symptom.MEMORY in found
    if oom and found.get(Symptom.CRASH, (0, ""))[1].endswith("it does not start"):
        # "无法启动 ... 直接OOM": a start that runs out of memory is the memory symptom's bad
        # (the memory probe judges an OOM start), not a second symptom
        del found[Symptom.CRASH]
    return [(f, n, why) for f, (n, why) in found.items()]
