"""``correctness``: a greedy output differs from the reference's output of the same length
(text digests; an output of another length is the length symptom's business)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.symptoms.base import Direction, Judged, Need, Noise, SymptomInfo, Words, measured

# an evaluation's score is the model's accuracy, whatever the benchmark is called
WORDS = Words(
    form="Correctness: wrong, garbled or repeated output, lower accuracy",
    metric=(r"accuracy|gsm8k|exact_match|\bmmlu\b|correctness|garbage|"
            r"\beval(?:uation)?[\s_-]{0,3}(?:scores?|results?|metrics?)\b|"
            r"\bbenchmark\s{1,3}scores?\b|pass@\d|"
            r"wrong (?:output|answer)|gibberish|精度|准确率"),
    # garbled, repeated, empty or made-up output, said on its own
    alone=(r"garbage|garbled|gibberish|nonsense|meaningless|unreadable|乱码|重复|毫无意义|幻觉|"
           r"(?<![\w-])(?:repetitive|repetition)(?![\w-])|repeat\w{0,3}\s{1,3}(?:the\s{1,3})?same|"
           r"never\s{1,3}stop|"
           # the same loop or made-up content said other ways
           r"keeps?\s{1,3}repeating|repeats?\s{1,3}(?:itself|forever|endlessly)|"
           r"(?:infinite|endless)\w{0,2}\s{1,3}(?:loop\w{0,2}\s{1,3}of|repeti\w{1,6})|hallucinat\w{1,6}|"
           r"output\w{0,2}\s{1,3}(?:is|was|became|becomes)\s{1,3}(?:noise|unreadable)|"
           r"outputs?\s{1,3}(?:of\s{1,3}[\w .-]{1,30}\s{1,3})?(?:is|are|was|were)\s{1,3}wrong|"
           r"(?:wrong|incorrect|invalid|malformed)\s{1,3}(?:outputs?|answers?|results?|responses?|"
           r"tool[- ]calls?|tokens?|json|format)|"
           # output that is not text: empty, only punctuation, a run of one character
           r"(?:empty|blank)\s{1,3}(?:outputs?|responses?|completions?|strings?)|exclamation\s{1,3}marks|"
           r"([!?])\1{9,}|精度(?:出现|存在|有)?问题|精度下降|准确率跳水|"
           # meaningless / random output in any wording, and the same input giving different outputs
           r"无意义|random\s{1,3}tokens|"
           # output without order: "semantically chaotic", "incoherent responses", 混乱/错乱
           r"chaotic|incoherent|(?:输出|回答|答案|内容)\w{0,4}(?:混乱|错乱|异常)|"
           # a judgement of what the model wrote: "problematic responses", "abnormal output"
           r"(?:problematic|abnormal|broken|weird|strange|corrupted?)\s{1,3}(?:outputs?|responses?|"
           r"answers?|completions?|generations?|text)\b|"
           r"(?:outputs?|results?|answers?|responses?)\b[^.。]{0,60}\b(?:are|is|were|"
           r"was)\s{1,3}different|输出(?:结果)?不(?:相同|一致|同)"),
    means="wrong output")


def text_digests(m: Measurement) -> frozenset[tuple[int, str]]:
    return frozenset((r.output_tokens, r.text_sha256) for r in m.requests if r.text_sha256)


def _judge(m: Measurement, ref_m: Measurement | None, v: Any, floor: int | None) -> Judged:
    ref = text_digests(ref_m) if ref_m is not None else frozenset()
    lengths = {n for n, _ in ref}
    got = [(r.output_tokens, r.text_sha256) for r in m.requests
           if r.text_sha256 and r.output_tokens in lengths]
    if not got:
        return Judged(Verdict.SKIP, "no greedy output of the good endpoint's length to "
                      "compare (follow the length symptom for length changes)")
    wrong = [g for g in got if g not in ref]
    if wrong:
        return Judged(Verdict.BAD, f"greedy output differs from the good endpoint's "
                      f"({len(wrong)}/{len(got)} requests)")
    return Judged(Verdict.GOOD, "greedy output identical to the good endpoint's")


def _pairs(p: dict[str, Any] | None) -> list[tuple[int, str]]:
    pr = (p or {}).get("per_request") or {}
    return [(n, t) for n, t in zip(pr.get("output_tokens") or [], pr.get("text_sha256") or [],
                                   strict=False) if t]


def wrong_text(p: dict[str, Any], ref_p: dict[str, Any] | None) -> bool | None:
    """A greedy output of a probed entry differs from the reference entry's output of the
    same length (None: nothing of the same length to compare)."""
    ref = set(_pairs(ref_p))
    lengths = {n for n, _ in ref}
    got = [x for x in _pairs(p) if x[0] in lengths]
    return None if not got else any(x not in ref for x in got)


CORRECTNESS = SymptomInfo(
    key="correctness", about="a greedy output differs from the good endpoint's",
    direction=Direction.DIFFERS, noise=Noise.DETERMINISTIC, judge=_judge,
    needs_reference=lambda v: True,
    needs=(Need(text="probe.temperature = 0 (it compares greedy outputs)",
                ok=lambda spec: spec.probe.temperature == 0.0),),
    triage_defaults=(("probe.temperature", 0.0,
                      "greedy decoding: outputs are comparable across commits"),),
    words=WORDS, may_be_flaky=True, bot_command=True,
    shown=lambda p, ref, s: None if measured(p) is None else wrong_text(p, ref),
    caption=lambda ref_name, s: f"a greedy output differs from {ref_name}'s", follow_up=True)
