"""``length``: an output fell short of the floor (a cap: ``verdict.min_output_tokens``, else
the ``max_tokens`` the probe sends). Deterministic for a commit: one run tells."""

from __future__ import annotations

from typing import Any

from vllm_bisect.symptoms.base import Direction, Need, Noise, Screen, SymptomInfo, Words, measured
from vllm_bisect.symptoms.plain import judge_plain


def _shown(p: dict[str, Any], ref: dict[str, Any] | None, s: Screen) -> bool | None:
    if (m := measured(p)) is None:
        return None
    return bool(s.min_tokens and any(o < s.min_tokens for o in m.get("output_tokens") or []))


def _caption(ref_name: str, s: Screen) -> str:
    return (f"output below {s.min_tokens} tokens" if s.min_tokens else
            "output below the minimum (none set)")


LENGTH = SymptomInfo(
    key="length", about="an output stops short of the token floor (a cap)",
    direction=Direction.FALLS, noise=Noise.DETERMINISTIC,
    judge=lambda m, ref, v, floor: judge_plain(m, ref, v, floor, length=True, itl=False),
    needs=(Need(text="verdict.min_output_tokens when the probe sends no max_tokens",
                ok=lambda spec: spec.min_output_tokens() is not None),),
    words=Words(form="Output length: generations stop early or at a fixed token count"),
    may_be_flaky=True, effect_series="output tokens", bot_command=True, shown=_shown,
    caption=_caption, follow_up=True)
