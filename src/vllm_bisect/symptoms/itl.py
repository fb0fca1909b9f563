"""``itl``: per-token inter-token latency rose (decoding is slower per output token). Noisy
at two levels, the server start and the request: each request's ITL is a sample."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Measurement
from vllm_bisect.symptoms.base import (
    MAX_FACTOR,
    MIN_MS,
    Direction,
    Key,
    Need,
    Noise,
    Screen,
    SymptomInfo,
    Words,
    measured,
)
from vllm_bisect.symptoms.plain import itl_reference, itl_shown, judge_plain

SCREEN_ITL_FACTOR = 1.5   # the report's ITL screen where no itl_factor is written
# a minute a token is not a regression a bisect over a server's speed judges (issue 49)
MAX_ITL_MS = 60_000.0
LIMIT_MS = Key("max_itl_ms", "itl (and any): bad when per-token ITL > this many ms (or > "
               "itl_factor x the good endpoint's, whichever is lower)", ge=MIN_MS, le=MAX_ITL_MS)
FACTOR = Key("itl_factor", "itl (and any): bad when per-token ITL > itl_factor x the good "
             "endpoint's; the noise-aware tests' smallest change that matters",
             gt=1.0, le=MAX_FACTOR)
WORDS = Words(
    form="ITL: decoding is slower per output token (ITL / TPOT)",
    metric=(r"(?<![A-Za-z0-9_])(?:ITL|TPOT)(?![A-Za-z0-9_])|inter[- ]token|"
            r"time (?:per|of) output tokens?|ms per token|decode'?s?\s{1,3}token\s{1,3}speed|"
            r"per[- ]token latency|decode[- ](?:speed|latency|throughput|perf\w*)|"
            r"generation rate|每个?请求|单请求|single[- ]request|"
            # a decode step's time per token ("Decode (token)" in a benchmark table)
            r"decode\s{0,2}\(\s{0,2}(?:per[- ])?token\s{0,2}\)|"
            r"decode\s{1,3}time\s{1,3}per\s{1,3}token"))


def _samples(m: Measurement) -> list[float]:
    return [float(r.itl_ms) for r in m.requests if r.itl_ms]


def itl_limit_text(factor: float | None, max_ms: float | None, ref_name: str) -> str:
    parts = ([f"{factor:.3g}x {ref_name}'s"] if factor is not None else []) + (
        [f"{max_ms:g} ms"] if max_ms is not None else [])
    return "per-token ITL above " + " or ".join(parts) if parts else "per-token ITL"


def _shown(p: dict[str, Any], ref: dict[str, Any] | None, s: Screen) -> bool | None:
    if (m := measured(p)) is None:
        return None
    return itl_shown(m, measured(ref), s.itl_factor or SCREEN_ITL_FACTOR, s.max_itl_ms)


ITL = SymptomInfo(
    key="itl", about="per-token inter-token latency rose (ITL / TPOT)",
    direction=Direction.RISES, noise=Noise.SERVER_AND_REQUEST,
    judge=lambda m, ref, v, floor: judge_plain(m, ref, v, floor, length=False, itl=True),
    needs_reference=itl_reference, samples=_samples, sequential=True, factor_key="itl_factor",
    keys=(LIMIT_MS, FACTOR),
    needs=(Need(("verdict.max_itl_ms", "verdict.itl_factor"), threshold_only=True),),
    words=WORDS, tunable=("itl_factor",), triage_defaults=(
        ("verdict.itl_factor", 1.5,
         "the report gives no two values to size the step: a 1.5x slowdown"),),
    effect_series="ITL", bot_command=True, speed=True, metric_words=("itl", "tpot"),
    shown=_shown, caption=lambda ref_name, s: itl_limit_text(s.itl_factor, s.max_itl_ms,
                                                             ref_name),
    follow_up=True)
