"""What the peer checks (``probes.peer``, ``probes.peer_concurrent``) share: a number of a
``vllm bench serve`` result, bench's tokens per chunk, a t-interval of a mean."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_bisect.errors import ProbeError

__all__ = ["bench_number", "bench_tokens_per_chunk", "t_interval"]


def bench_number(doc: Mapping[str, Any], key: str) -> float:
    v = doc.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise ProbeError(f"vllm bench serve result has no number {key!r}",
                         hint="run it with --save-result")
    return float(v)


def bench_tokens_per_chunk(doc: Mapping[str, Any]) -> float | None:
    lens, itls = doc.get("output_lens"), doc.get("itls")
    if isinstance(lens, list) and isinstance(itls, list) and lens and len(lens) == len(itls):
        per = [o / (len(g) + 1) for o, g in zip(lens, itls, strict=True)
               if isinstance(o, int) and isinstance(g, list) and o > 0]
        if per:
            return statistics.fmean(per)
    al = doc.get("spec_decode_acceptance_length")
    return float(al) if isinstance(al, int | float) else None


def t_interval(xs: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """The t-interval of the mean of ``xs`` (None for fewer than two values)."""
    if len(xs) < 2:
        return None
    from scipy import stats  # here, not at import (scipy.stats is slow to load)

    centre = statistics.fmean(xs)
    half = float(stats.t.ppf(0.5 + confidence / 2, len(xs) - 1)
                 * statistics.stdev(xs) / math.sqrt(len(xs)))
    return centre - half, centre + half
