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
            r"wrong (?:output|answer)|gibberish|精度|准确率"))


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
