"""``crash``: the server died or the probe failed (instead of a skip). Shows in some runs only:
auto runs the runs where they tell most (bayes). A measurement that came back is judged by
the plain judge, following nothing (the crash rule judges the failures:
``bisect/policies/threshold.py``)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import FailureKind, legacy_failure
from vllm_bisect.symptoms.base import Direction, Noise, Screen, SymptomInfo, Words, measured
from vllm_bisect.symptoms.plain import itl_reference, judge_plain


def _crashed(p: dict[str, Any]) -> bool:
    """The entry's typed failure is a crash (a result written before the field: the error
    class its reason names)."""
    failure = p.get("failure")
    kind = legacy_failure(p.get("reason") or "") if failure is None else FailureKind(failure)
    return kind is not None and kind.crash


def _shown(p: dict[str, Any], ref: dict[str, Any] | None, s: Screen) -> bool | None:
    return False if measured(p) is not None else (_crashed(p) or None)


def _failed(failure: FailureKind | None, reason: str, log_tail: str) -> str | None:
    """Following the crash symptom, a server that died or a probe that failed is bad."""
    return f"crashed: {reason}" if failure is not None and failure.crash else None


CRASH = SymptomInfo(
    key="crash", about="the server dies or the probe fails (instead of a skip)",
    direction=Direction.DIFFERS, noise=Noise.FLAKY,
    judge=lambda m, ref, v, floor: judge_plain(m, ref, v, floor, length=False, itl=False),
    needs_reference=itl_reference, failed=_failed, retry=False,
    words=Words(form="Crash: the server or a request fails"),
    auto_why="auto: a crash shows in some runs only (runs are repeated where they tell most)",
    shown=_shown, caption=lambda ref_name, s: "the server or the probe failed")
