"""The plain threshold judge (pure): output length below the floor, per-token ITL above the
limit (``itl_factor`` x the reference's, or ``max_itl_ms``, whichever is lower). The length,
ITL, ``any`` and crash symptoms judge a measurement with it, each following its own part."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.symptoms.base import Judged


def itl_limit_ms(v: Any, ref: Measurement | None) -> float | None:
    limits = []
    if v.max_itl_ms is not None:
        limits.append(v.max_itl_ms)
    if v.itl_factor is not None and ref is not None and ref.itl_ms is not None:
        limits.append(v.itl_factor * ref.itl_ms)
    return min(limits) if limits else None


def judge_plain(m: Measurement, ref: Measurement | None, v: Any, floor: int | None, *,
                length: bool, itl: bool) -> Judged:
    short = [o for o in m.output_tokens if floor is not None and o < floor]
    length_bad = bool(short)
    limit = itl_limit_ms(v, ref)
    itl_bad: bool | None = None
    if limit is not None:
        itl_bad = m.itl_ms is None or m.itl_ms > limit
    reasons: list[str] = []
    if length and length_bad:
        reasons.append(f"output {min(short)} < {floor} tokens "
                       f"({len(short)}/{len(m.output_tokens)} requests short)")
    if itl and itl_bad:
        shown = "n/a" if m.itl_ms is None else f"{m.itl_ms:.2f}"
        reasons.append(f"ITL {shown} ms > {limit:.2f} ms")
    if reasons:
        return Judged(Verdict.BAD, "; ".join(reasons), length_bad, itl_bad)
    parts = []
    if length and floor is not None:
        parts.append(f"all outputs >= {floor} tokens")
    if itl and limit is not None and m.itl_ms is not None:
        parts.append(f"ITL {m.itl_ms:.2f} ms <= {limit:.2f} ms")
    return Judged(Verdict.GOOD, "; ".join(parts) or "no symptom", length_bad, itl_bad)


def itl_reference(v: Any) -> bool:
    """The ITL limit is relative to the reference's ITL when ``itl_factor`` is set."""
    return v.itl_factor is not None


def itl_shown(m: dict[str, Any], ref: dict[str, Any] | None, factor: float,
              max_ms: float | None, key: str = "itl_ms") -> bool | None:
    """The report's screen: the value above ``factor`` x the reference's or ``max_ms``."""
    r, got = (ref or {}).get(key), m.get(key)
    limit = min([x for x in (max_ms, factor * r if r else None) if x is not None], default=None)
    return None if limit is None or got is None else got > limit
