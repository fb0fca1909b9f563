"""The TTFT symptom's threshold verdict (pure): time to first token against a written limit or
``ttft_factor`` x the good endpoint's. The two-level test (the default strategy) takes each
request's TTFT as a sample instead (verdict/auto.py); ``probe.prompt_tokens`` sets the prompt
length, so a long prefill is what is timed.
"""

from __future__ import annotations

from vllm_bisect.models import Measurement, Verdict


def ttft_limit_ms(max_ttft_ms: float | None, factor: float | None, ref_ms: float | None
                  ) -> float | None:
    limits = [x for x in (max_ttft_ms, factor * ref_ms if factor and ref_ms else None)
              if x is not None]
    return min(limits) if limits else None


def judge_ttft(m: Measurement, limit_ms: float | None) -> tuple[Verdict, str]:
    if m.ttft_ms is None:
        return Verdict.SKIP, "no TTFT measured (no streamed first token)"
    if limit_ms is None:
        return Verdict.SKIP, "no TTFT limit (verdict.max_ttft_ms or verdict.ttft_factor)"
    prompt = f" ({m.prompt_tokens}-token prompt)" if m.prompt_tokens else ""
    if m.ttft_ms > limit_ms:
        return Verdict.BAD, f"TTFT {m.ttft_ms:.1f} ms > {limit_ms:.1f} ms{prompt}"
    return Verdict.GOOD, f"TTFT {m.ttft_ms:.1f} ms <= {limit_ms:.1f} ms{prompt}"
