"""Turn a measurement into GOOD / BAD for the symptom the bisect follows (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_bisect.models import Measurement, MemoryResult, Verdict
from vllm_bisect.spec import Symptom, VerdictSpec
from vllm_bisect.verdict.memory import judge_memory
from vllm_bisect.verdict.ttft import judge_ttft, ttft_limit_ms


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str
    length_bad: bool
    itl_bad: bool | None  # None: no ITL threshold configured


@dataclass(frozen=True)
class Judge:
    """Thresholds for one bisect. ``reference_itl_ms`` is the good endpoint's ITL."""

    spec: VerdictSpec
    min_output_tokens: int | None
    reference_itl_ms: float | None = None
    # the good endpoint's greedy outputs: (output tokens, text digest) per request
    reference_texts: frozenset[tuple[int, str]] | None = None
    reference_tok_s: float | None = None  # the good endpoint's output tok/s under load
    reference_ttft_ms: float | None = None
    reference_memory: MemoryResult | None = None  # the good endpoint's start-up memory

    @property
    def needs_reference(self) -> bool:
        if self.spec.symptom in (Symptom.CORRECTNESS, Symptom.THROUGHPUT, Symptom.MEMORY):
            return True
        if self.spec.symptom is Symptom.TTFT:
            return self.spec.ttft_factor is not None
        return self.spec.itl_factor is not None and self.spec.symptom is not Symptom.LENGTH

    def with_reference(self, m: Measurement) -> Judge:
        return Judge(self.spec, self.min_output_tokens, m.itl_ms, text_digests(m),
                     throughput_of(m)[0], m.ttft_ms, m.memory)

    def _throughput(self, m: Measurement) -> Judgement:
        got_tok_s, where = throughput_of(m)
        if got_tok_s is None:
            return Judgement(Verdict.SKIP, "no throughput measurement", False, None)
        limits = []
        if self.spec.min_throughput_tok_s is not None:
            limits.append(self.spec.min_throughput_tok_s)
        if self.spec.throughput_factor is not None and self.reference_tok_s is not None:
            limits.append(self.reference_tok_s / self.spec.throughput_factor)
        floor = max(limits) if limits else 0.0
        got = got_tok_s
        if got < floor:
            return Judgement(Verdict.BAD, f"{where} < {floor:.1f}", False, None)
        return Judgement(Verdict.GOOD, f"{where} >= {floor:.1f}", False, None)

    def _mtp_speedup(self, m: Measurement) -> Judgement:
        floor = self.spec.min_mtp_speedup or 0.0
        if m.mtp_speedup is None or m.mtp_on is None:
            return Judgement(Verdict.SKIP, "no MTP speed-up measurement", False, None)
        ctx = (f", {m.mtp_on.context_tokens}-token context"
               if m.mtp_on.context_tokens is not None else "")
        where = (f"MTP speed-up {m.mtp_speedup:.2f}x at concurrency {m.mtp_on.concurrency}{ctx} "
                 f"({m.mtp_on.output_tok_s:.1f} vs {m.mtp_off.output_tok_s if m.mtp_off else 0:.1f}"
                 " tok/s)")
        if m.mtp_speedup < floor:
            return Judgement(Verdict.BAD, f"{where} < {floor:.2f}x", False, None)
        return Judgement(Verdict.GOOD, f"{where} >= {floor:.2f}x", False, None)

    def _correctness(self, m: Measurement) -> Judgement:
        """Bad when a greedy output of the same length as the good endpoint's differs from it
        (an output of another length is the length symptom's business, not comparable)."""
        ref = self.reference_texts or frozenset()
        lengths = {n for n, _ in ref}
        got = [(r.output_tokens, r.text_sha256) for r in m.requests
               if r.text_sha256 and r.output_tokens in lengths]
        if not got:
            return Judgement(Verdict.SKIP, "no greedy output of the good endpoint's length to "
                             "compare (follow the length symptom for length changes)", False, None)
        wrong = [g for g in got if g not in ref]
        if wrong:
            return Judgement(Verdict.BAD, f"greedy output differs from the good endpoint's "
                             f"({len(wrong)}/{len(got)} requests)", False, None)
        return Judgement(Verdict.GOOD, "greedy output identical to the good endpoint's",
                         False, None)

    def itl_limit_ms(self) -> float | None:
        limits = []
        if self.spec.max_itl_ms is not None:
            limits.append(self.spec.max_itl_ms)
        if self.spec.itl_factor is not None and self.reference_itl_ms is not None:
            limits.append(self.spec.itl_factor * self.reference_itl_ms)
        return min(limits) if limits else None

    def judge(self, m: Measurement) -> Judgement:
        if self.spec.symptom is Symptom.CORRECTNESS:
            return self._correctness(m)
        if self.spec.symptom is Symptom.THROUGHPUT:
            return self._throughput(m)
        if self.spec.symptom is Symptom.MTP_SPEEDUP:
            return self._mtp_speedup(m)
        if self.spec.symptom in (Symptom.TTFT, Symptom.MEMORY):
            v, why = (judge_ttft(m, ttft_limit_ms(self.spec.max_ttft_ms, self.spec.ttft_factor,
                                                  self.reference_ttft_ms))
                      if self.spec.symptom is Symptom.TTFT else
                      judge_memory(m.memory, self.reference_memory, self.spec.memory_factor))
            return Judgement(v, why, False, None)
        floor = self.min_output_tokens
        short = [o for o in m.output_tokens if floor is not None and o < floor]
        length_bad = bool(short)
        limit = self.itl_limit_ms()
        itl_bad: bool | None = None
        if limit is not None:
            itl_bad = m.itl_ms is None or m.itl_ms > limit
        reasons: list[str] = []
        follow_length = self.spec.symptom in (Symptom.LENGTH, Symptom.ANY)
        follow_itl = self.spec.symptom in (Symptom.ITL, Symptom.ANY)
        if follow_length and length_bad:
            reasons.append(f"output {min(short)} < {floor} tokens "
                           f"({len(short)}/{len(m.output_tokens)} requests short)")
        if follow_itl and itl_bad:
            shown = "n/a" if m.itl_ms is None else f"{m.itl_ms:.2f}"
            reasons.append(f"ITL {shown} ms > {limit:.2f} ms")
        if reasons:
            return Judgement(Verdict.BAD, "; ".join(reasons), length_bad, itl_bad)
        parts = []
        if follow_length and floor is not None:
            parts.append(f"all outputs >= {floor} tokens")
        if follow_itl and limit is not None and m.itl_ms is not None:
            parts.append(f"ITL {m.itl_ms:.2f} ms <= {limit:.2f} ms")
        return Judgement(Verdict.GOOD, "; ".join(parts) or "no symptom", length_bad, itl_bad)


def text_digests(m: Measurement) -> frozenset[tuple[int, str]]:
    return frozenset((r.output_tokens, r.text_sha256) for r in m.requests if r.text_sha256)


def throughput_of(m: Measurement) -> tuple[float | None, str]:
    """Output tok/s from the load probe, else from vLLM's benchmark; and how it was measured."""
    if m.load is not None:
        return m.load.output_tok_s, (f"{m.load.output_tok_s:.1f} output tok/s at concurrency "
                                     f"{m.load.concurrency}")
    if m.bench is not None and m.bench.output_tok_s is not None:
        return m.bench.output_tok_s, (f"{m.bench.output_tok_s:.1f} output tok/s "
                                      f"(vllm bench {m.bench.tool})")
    return None, ""
