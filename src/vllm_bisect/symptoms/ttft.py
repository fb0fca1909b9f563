"""``ttft``: time to first token rose (``probe.prompt_tokens`` sets the prompt length, so a
long prefill is what is timed). The threshold verdict compares the measurement's TTFT with
``verdict.max_ttft_ms`` or ``ttft_factor`` x the reference's; the two-level test (auto's
choice) takes each request's TTFT as a sample."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.symptoms.base import (
    MAX_FACTOR,
    MIN_MS,
    Direction,
    Judged,
    Key,
    Need,
    Noise,
    Screen,
    SymptomInfo,
    Words,
    measured,
)
from vllm_bisect.symptoms.plain import itl_shown

# an hour to the first token is not a regression a bisect over a server's speed judges (issue 49)
MAX_TTFT_MS = 3_600_000.0
FACTOR = Key("ttft_factor", "ttft: bad when time to first token > ttft_factor x the good "
             "endpoint's (or > max_ttft_ms)", gt=1.0, le=MAX_FACTOR)
LIMIT_MS = Key("max_ttft_ms", "ttft: bad when time to first token > this many ms (or > "
               "ttft_factor x the good endpoint's)", ge=MIN_MS, le=MAX_TTFT_MS)


# how triage reads it: its names; prefill or prompt processing with a change word or in the
# title (not a module or file named prefill: "No module named '...backends.mla.prefill'",
# prefill.py), not where the sentence says decoding is unaffected; a time (a prefill rate in
# tok/s is throughput)
WORDS = Words(
    form="TTFT: the first token takes longer",
    metric=(r"(?<![A-Za-z0-9_])TTFT(?![A-Za-z0-9_])|time[- ]to[- ]first[- ]token|"
            r"first token|首\s{0,2}token"),
    said=r"(?<![\w.-])prefill(?![\w-]|\.\w)|prompt processing|long[- ]prefill",
    unless=r"decode\s{1,3}(?:is\s{1,3})?unaffected", timed=True)


def ttft_limit_ms(max_ttft_ms: float | None, factor: float | None, ref_ms: float | None
                  ) -> float | None:
    limits = [x for x in (max_ttft_ms, factor * ref_ms if factor and ref_ms else None)
              if x is not None]
    return min(limits) if limits else None


def _judge(m: Measurement, ref: Measurement | None, v: Any, floor: int | None) -> Judged:
    limit_ms = ttft_limit_ms(LIMIT_MS.of(v), FACTOR.of(v), ref.ttft_ms if ref else None)
    if m.ttft_ms is None:
        return Judged(Verdict.SKIP, "no TTFT measured (no streamed first token)")
    if limit_ms is None:
        return Judged(Verdict.SKIP, "no TTFT limit (verdict.max_ttft_ms or verdict.ttft_factor)")
    prompt = f" ({m.prompt_tokens}-token prompt)" if m.prompt_tokens else ""
    if m.ttft_ms > limit_ms:
        return Judged(Verdict.BAD, f"TTFT {m.ttft_ms:.1f} ms > {limit_ms:.1f} ms{prompt}")
    return Judged(Verdict.GOOD, f"TTFT {m.ttft_ms:.1f} ms <= {limit_ms:.1f} ms{prompt}")


def _samples(m: Measurement) -> list[float]:
    return [float(r.ttft_ms) for r in m.requests if r.n_chunks and r.ttft_ms > 0]


def _limits(s: Screen) -> tuple[float | None, float | None]:
    return (None, None) if s.verdict is None else (FACTOR.of(s.verdict), LIMIT_MS.of(s.verdict))


def _shown(p: dict[str, Any], ref: dict[str, Any] | None, s: Screen) -> bool | None:
    factor, max_ms = _limits(s)
    if (m := measured(p)) is None or (factor is None and max_ms is None):
        return None   # no TTFT threshold written: no screen (prefill time varies with the prompt)
    return itl_shown(m, measured(ref), factor or 0.0, max_ms, key="ttft_ms")


def _caption(ref_name: str, s: Screen) -> str:
    factor, max_ms = _limits(s)
    parts = ([f"{factor:.3g}x {ref_name}'s"] if factor is not None else []) + (
        [f"{max_ms:g} ms"] if max_ms is not None else [])
    return "time to first token above " + " or ".join(parts) if parts else "time to first token"


TTFT = SymptomInfo(
    key="ttft", about="time to first token rose (a long prefill: probe.prompt_tokens)",
    direction=Direction.RISES, noise=Noise.SERVER_AND_REQUEST, judge=_judge,
    needs_reference=lambda v: FACTOR.of(v) is not None, samples=_samples,
    factor_key="ttft_factor", keys=(FACTOR, LIMIT_MS),
    needs=(Need(("verdict.max_ttft_ms", "verdict.ttft_factor"), threshold_only=True),),
    words=WORDS, tunable=("ttft_factor",), triage_defaults=(
        ("probe.prompt_tokens", 2048, "a long prefill, where TTFT shows"),
        ("probe.max_tokens", 16, "TTFT needs few output tokens"),
        ("verdict.ttft_factor", 1.5, "no two values to size it: a 1.5x rise")),
    bot_command=True, speed=True, metric_words=("ttft",), shown=_shown, caption=_caption,
    column_always=False)
