"""Turn a measurement into GOOD / BAD for the symptom the bisect follows (pure): the
symptom's own threshold judge (its declaration in ``vllm_bisect.symptoms``), against the
reference endpoint's measurement where its verdict is relative."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_bisect.models import Measurement
from vllm_bisect.spec import VerdictSpec
from vllm_bisect.symptoms import Judged
from vllm_bisect.symptoms.correctness import text_digests
from vllm_bisect.symptoms.plain import itl_limit_ms
from vllm_bisect.symptoms.throughput import throughput_of

__all__ = ["Judge", "Judgement", "text_digests", "throughput_of"]

Judgement = Judged   # (verdict, reason, length_bad, itl_bad)


@dataclass(frozen=True)
class Judge:
    """Thresholds for one bisect; ``reference`` is the good endpoint's measurement (the fixed
    end's in a find-the-fix search) once it is known."""

    spec: VerdictSpec
    min_output_tokens: int | None
    reference: Measurement | None = None

    @property
    def needs_reference(self) -> bool:
        return self.spec.symptom.info.needs_reference(self.spec)

    def with_reference(self, m: Measurement) -> Judge:
        return Judge(self.spec, self.min_output_tokens, m)

    def itl_limit_ms(self) -> float | None:
        return itl_limit_ms(self.spec, self.reference)

    def judge(self, m: Measurement) -> Judgement:
        return self.spec.symptom.info.judge(m, self.reference, self.spec, self.min_output_tokens)
