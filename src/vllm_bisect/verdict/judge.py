"""Turn a measurement into GOOD / BAD for the symptom the bisect follows (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.spec import Symptom, VerdictSpec


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

    @property
    def needs_reference(self) -> bool:
        return self.spec.itl_factor is not None and self.spec.symptom is not Symptom.LENGTH

    def with_reference(self, m: Measurement) -> Judge:
        return Judge(self.spec, self.min_output_tokens, m.itl_ms)

    def itl_limit_ms(self) -> float | None:
        limits = []
        if self.spec.max_itl_ms is not None:
            limits.append(self.spec.max_itl_ms)
        if self.spec.itl_factor is not None and self.reference_itl_ms is not None:
            limits.append(self.spec.itl_factor * self.reference_itl_ms)
        return min(limits) if limits else None

    def judge(self, m: Measurement) -> Judgement:
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
